package matcher

import (
	"time"

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
	m.add(reconcile.StaleLease, o.ID, "", m.attemptIDs(failed, stale), o.Money, o.Money,
		reconcile.DetailStaleLease(o, m.now, m.noSuccess(o, failed, stale)))
}

func (m *matcher) unknownFinding(o *reconcile.Obligation, failed, stale []int32) {
	m.add(reconcile.UnresolvedUnknown, o.ID, "", m.attemptIDs(failed, stale), o.Money, o.Money,
		reconcile.DetailUnknown(o, m.noSuccess(o, failed, stale)))
}

// attemptIDs are the provider ids of an obligation's attempts that moved
// no money: the failed ones, then those left pending too long.
func (m *matcher) attemptIDs(failed, stale []int32) []string {
	var ids []string
	for _, mv := range failed {
		ids = m.ids(ids, mv, "")
	}
	for _, mv := range stale {
		ids = m.ids(ids, mv, "")
	}
	return ids
}

// noSuccess says what the provider shows for an obligation without a
// succeeded movement; only failed ones are named as such, and where the
// run did not read all of its records, what it read (reconcile.NoSuccess).
func (m *matcher) noSuccess(o *reconcile.Obligation, failed, stale []int32) string {
	var pendingFor time.Duration
	if len(stale) > 0 {
		pendingFor = m.now.Sub(m.created(stale[0]))
	}
	return reconcile.NoSuccess(o, m.mentions(failed), m.mentions(stale), pendingFor, m.unread(o).String())
}

// unconfirmedFinding: exactly one succeeded movement of the right money
// reaches an obligation that may be marked PAID, but the run did not read
// every record that could show a second one, so it is not marked.
func (m *matcher) unconfirmedFinding(kind reconcile.FindingKind, o *reconcile.Obligation, mv int32) {
	m.add(kind, o.ID, "", m.ids(nil, mv, ""), o.Money, o.Money, reconcile.DetailUnconfirmed(kind, o, m.mention(mv), m.unread(o)))
}
