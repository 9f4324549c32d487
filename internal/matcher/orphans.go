package matcher

import (
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
		if w.Contains(m.obj(j).Created.Time()) {
			return true
		}
	}
	return false
}

func (m *matcher) orphanFinding(s int32, target string) {
	m.add(reconcile.Orphan, "", m.movID(s), m.ids(nil, s, reconcile.Succeeded), m.money(s), m.money(s),
		reconcile.DetailOrphan(m.mention(s), m.movs[s].class == clsRefund, m.targetNoun(target), target, m.keyless(s)))
	f := &m.res.Findings[len(m.res.Findings)-1]
	f.Target, f.PaidOut = target, m.movs[s].class == clsRefund
}

// keyless reports, for an unlinked movement, that the provider's events
// that would tell its idempotency key were not read, so that an obligation
// could own it under its key unseen.
func (m *matcher) keyless(mv int32) bool {
	ev := m.in.EventsFrom
	return ev.IsZero() || ev.After(m.created(mv))
}
