package matcher

import (
	"fmt"

	"reconcile"
)

// Leases and unknown outcomes (docs/design.md, "Findings"). An EXECUTING
// obligation whose lease expired (or that has none) and a
// CONFIRMATION_UNKNOWN one, with no succeeded movement once everything
// reaching them is final, are a stale lease and an unresolved unknown:
// never marked FAILED, never retried. Where one succeeded movement would
// prove them paid but the run did not read all of their records, they are
// reported the same way, saying what was not read.

func (m *matcher) staleLeaseFinding(o *reconcile.Obligation, failed, stale []int32) {
	var ids []string
	for _, mv := range failed {
		ids = m.ids(ids, mv, "")
	}
	for _, mv := range stale {
		ids = m.ids(ids, mv, "")
	}
	noun, _, _ := oblWords(o.Kind)
	lease := "has no worker lease"
	if !o.LeaseExpiresAt.IsZero() {
		lease = fmt.Sprintf("lost its worker when the lease expired %s ago (%s)", human(m.now.Sub(o.LeaseExpiresAt)), stamp(o.LeaseExpiresAt))
	}
	m.add(reconcile.StaleLease, o.ID, "", ids, o.Money, o.Money,
		fmt.Sprintf("%s %s of %s is still marked executing but %s, and %s: someone must find out whether it was sent.",
			noun, o.ID, o.Money, lease, m.noSuccess(o, failed, stale)))
}

func (m *matcher) unknownFinding(o *reconcile.Obligation, failed, stale []int32) {
	var ids []string
	for _, mv := range failed {
		ids = m.ids(ids, mv, "")
	}
	for _, mv := range stale {
		ids = m.ids(ids, mv, "")
	}
	noun, _, _ := oblWords(o.Kind)
	m.add(reconcile.UnresolvedUnknown, o.ID, "", ids, o.Money, o.Money,
		fmt.Sprintf("%s %s of %s is waiting for confirmation, and %s.", noun, o.ID, o.Money, m.noSuccess(o, failed, stale)))
}

// noSuccess says what the provider shows for an obligation without a
// succeeded movement; only failed ones are named as such (docs/design.md,
// "Findings"). Where the run did not read all of the obligation's records
// it says what it read and what it did not, never "nothing".
func (m *matcher) noSuccess(o *reconcile.Obligation, failed, stale []int32) string {
	_, verb, _ := oblWords(o.Kind)
	gap := m.unread(o)
	switch {
	case len(failed) > 0 && len(stale) == 0:
		what := "failed"
		if len(failed) == 1 && m.obj(m.movs[failed[0]].rep).Status == reconcile.Canceled {
			what = "was canceled"
		}
		recs := "only record of it (" + m.movIDs(failed) + ")"
		if len(failed) > 1 {
			recs, what = "only records of it ("+m.movIDs(failed)+")", "failed or were canceled"
		}
		if gap != "" {
			return fmt.Sprintf("the %s among the provider's records read %s; %s", recs, what, gap)
		}
		return fmt.Sprintf("the provider's %s %s, so no money moved", recs, what)
	case len(stale) > 0:
		s := fmt.Sprintf("the provider's record of it (%s) is still pending after %s", m.movIDs(stale), human(m.now.Sub(m.created(stale[0]))))
		if gap != "" {
			s += "; and " + gap
		}
		return s
	}
	if gap != "" {
		return fmt.Sprintf("nothing %s for it is among the provider's records read; %s", verb, gap)
	}
	return "the provider shows nothing " + verb + " for it"
}

// unconfirmedFinding: exactly one succeeded movement of the right money
// reaches an obligation that may be marked PAID, but the run did not read
// every record that could show a second one, so it is not marked.
func (m *matcher) unconfirmedFinding(kind reconcile.FindingKind, o *reconcile.Obligation, mv int32) {
	noun, verb, _ := oblWords(o.Kind)
	state := "is waiting for confirmation"
	if kind == reconcile.StaleLease {
		state = "is still marked in progress, though its worker's time ran out"
	}
	m.add(kind, o.ID, "", m.ids(nil, mv, ""), o.Money, o.Money,
		fmt.Sprintf("%s %s of %s %s. The provider %s %s for it (%s), but it was not marked paid: %s, so a second payment "+
			"there could not be ruled out.", noun, o.ID, o.Money, state, verb, m.money(mv), m.movID(mv), m.unread(o)))
}
