package matcher

import (
	"fmt"

	"reconcile"
)

// Orphans (docs/design.md, "Findings"). A succeeded movement created in the
// run's subject that links to no obligation and repeats no linked movement
// is an orphan. One read only as evidence, or retrieved by id, is not: the
// obligations that could claim it were not all read.

// within reports whether some member of movement mv was created inside w.
// Objects outside the listed window were retrieved by id as evidence for
// the obligations that name them, and the obligations that could claim
// them were never read, so unlinked they are no orphans.
func (m *matcher) within(mv int32, w reconcile.Window) bool {
	for j := m.movs[mv].first; j >= 0; j = m.next[j] {
		if w.Contains(m.obj(j).Created) {
			return true
		}
	}
	return false
}

func (m *matcher) orphanFinding(s int32, target string) {
	v := &m.movs[s]
	money, id := m.money(s), m.movID(s)
	on := ""
	if v.class == clsRefund && target != "" {
		on = fmt.Sprintf(" (on %s %s)", m.targetNoun(target), target)
	}
	verb := "collected"
	if v.class == clsRefund {
		verb = "paid out"
	}
	m.add(reconcile.Orphan, "", id, m.ids(nil, s, reconcile.Succeeded), money, money,
		fmt.Sprintf("%s %s of %s%s was %s by the provider but belongs to no obligation%s.",
			capital(m.movNoun(s)), id, money, on, verb, m.keyless(s)))
}

// keyless says, for the detail of an unlinked movement, that the
// provider's events that would tell its idempotency key were not read, so
// that an obligation could own it under its key unseen; "" when they were.
func (m *matcher) keyless(mv int32) string {
	ev, created := m.in.EventsFrom, m.created(mv)
	if !ev.IsZero() && !ev.After(created) {
		return ""
	}
	return " that its metadata or id names (the provider's events from its time, which alone would tell the idempotency key it was made with, were not read)"
}
