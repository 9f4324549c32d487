package matcher

import (
	"slices"
	"strings"
	"time"

	"reconcile"
)

// Evidence and the PAID decision (docs/design.md, "The PAID rule"). Each
// obligation the run decides on is judged against the movements that reach
// it. It is marked PAID only from CONFIRMATION_UNKNOWN, or EXECUTING with
// an expired lease, when exactly one succeeded movement reaches it, of its
// exact money, nothing pending or conflicting clouds the evidence, no
// duplicate, suspected duplicate or mismatch was found for it, and the run
// read every record that could show a second payment ("Coverage"). The
// mismatches of money and of state, conflicts, and paid-without-evidence
// are decided here too.

// evaluateObligations classifies every obligation against the movements
// reaching it and decides its PAID transition.
func (m *matcher) evaluateObligations() {
	var succ, failed, stale, conflicts []int32 // scratch, reused
	m.res.Transitions = make([]reconcile.Transition, 0, m.markable())
	for i := range m.nObls() {
		if !m.decides(i) {
			continue
		}
		o := m.obl(i)
		read := m.recordsRead(o)
		if !read {
			m.partial = append(m.partial, o.ID)
		}
		movs := m.movementsOf(i)
		succ, failed, stale, conflicts = succ[:0], failed[:0], stale[:0], conflicts[:0]
		live := 0
		for _, mv := range movs {
			v := &m.movs[mv]
			if v.conflict {
				conflicts = append(conflicts, mv)
				continue
			}
			switch v.status {
			case mSucceeded:
				succ = append(succ, mv)
			case mPendingLive:
				live++
			case mPendingStale:
				stale = append(stale, mv)
			default:
				failed = append(failed, mv)
			}
		}
		// Fast path: the overwhelmingly common settled obligation.
		if o.State == reconcile.Paid && len(movs) == 1 && len(succ) == 1 && m.moneyEq(succ[0], o.Money) {
			continue
		}
		m.sortMovs(succ)
		m.sortMovs(failed)
		m.sortMovs(stale)
		m.sortMovs(conflicts)

		blocked := m.suspected[i] // a duplicate, mismatch or conflict: never PAID
		for _, mv := range conflicts {
			m.conflictFinding(o, mv)
			blocked = true
		}
		if len(succ) >= 2 {
			m.duplicateFinding(o, succ)
			blocked = true
		}
		if m.amountFinding(o, succ) {
			blocked = true
		}
		// Outcome findings speak only when every linked movement is
		// final (or past its grace) and no conflict clouds the evidence.
		settled := len(conflicts) == 0 && live == 0
		leaseLive := o.LeaseLive(m.now)
		canMark := o.State == reconcile.ConfirmationUnknown || o.State == reconcile.Executing && !leaseLive
		proven := canMark && !blocked && settled && len(succ) == 1 && m.moneyEq(succ[0], o.Money)
		switch o.State {
		case reconcile.Paid:
			if settled && len(succ) == 0 {
				switch {
				case len(failed) > 0:
					m.paidFailedFinding(o, failed)
				case len(stale) > 0:
					m.paidStaleFinding(o, stale)
				default:
					m.absenceFinding(o)
				}
			}
		case reconcile.FailedState, reconcile.Approved, reconcile.PendingApproval, reconcile.RequiresReview:
			if len(succ) > 0 {
				m.movedFinding(o, succ)
				blocked = true
			}
		case reconcile.Executing:
			switch {
			case proven && !read:
				m.unconfirmedFinding(reconcile.StaleLease, o, succ[0])
			case !leaseLive && settled && len(succ) == 0:
				m.staleLeaseFinding(o, failed, stale)
			}
		case reconcile.ConfirmationUnknown:
			switch {
			case proven && !read:
				m.unconfirmedFinding(reconcile.UnresolvedUnknown, o, succ[0])
			case settled && len(succ) == 0:
				m.unknownFinding(o, failed, stale)
			}
		default:
			// A state the configuration does not map: never transitioned,
			// and money moved for it is a disagreement (docs/design.md,
			// "Findings").
			if !o.State.Known() && len(succ) > 0 {
				m.movedFinding(o, succ)
			}
		}
		// PAID only where every record that could show a second payment
		// was read: the evidence is whole (docs/design.md, "Coverage").
		if proven && read {
			m.res.Transitions = append(m.res.Transitions, reconcile.Transition{
				ObligationID:       o.ID,
				From:               o.State,
				To:                 reconcile.Paid,
				FromRaw:            o.RawState,
				FromLeaseExpiresAt: o.LeaseExpiresAt.Time(),
				ProviderID:         m.evidenceID(o, succ[0]),
				Money:              o.Money,
			})
		}
	}
}

// evidenceID is the provider id a transition records: the id the
// obligation names if it is part of the movement, else the intent's id for
// an intent's group, else the object's.
func (m *matcher) evidenceID(o *reconcile.Obligation, mv int32) string {
	if o.ProviderID != "" && m.movementOf(o.ProviderID) == mv {
		return o.ProviderID
	}
	return m.movID(mv)
}

// moneyEq reports whether every succeeded member of movement mv moved
// exactly want (an intent and its charge normally agree; if they do not,
// the movement is not proof of the obligation's money).
func (m *matcher) moneyEq(mv int32, want reconcile.Money) bool {
	_, off := m.offMoney(mv, want)
	return !off
}

// offMoney returns money of movement mv that differs from want: the
// movement's own if it differs, else that of the succeeded member with
// the smallest id that differs.
func (m *matcher) offMoney(mv int32, want reconcile.Money) (reconcile.Money, bool) {
	if mon := m.money(mv); !sameMoney(mon, want) {
		return mon, true
	}
	var found *reconcile.ProviderObject
	for j := m.movs[mv].first; j >= 0; j = m.next[j] {
		p := m.obj(j)
		if p.Status == reconcile.Succeeded && !sameMoney(p.Money, want) && (found == nil || p.ID < found.ID) {
			found = p
		}
	}
	if found == nil {
		return reconcile.Money{}, false
	}
	return found.Money, true
}

// amountFinding reports the succeeded movements whose money differs from
// the obligation's; it reports whether there were any.
func (m *matcher) amountFinding(o *reconcile.Obligation, succ []int32) bool {
	var bad []int32
	var off []reconcile.Money
	for _, mv := range succ {
		if mon, ok := m.offMoney(mv, o.Money); ok {
			bad = append(bad, mv)
			off = append(off, mon)
		}
	}
	if len(bad) == 0 {
		return false
	}
	var ids []string
	var diff sum
	foreign := ""
	for k, mv := range bad {
		ids = m.ids(ids, mv, reconcile.Succeeded)
		mon := off[k]
		if sameCurrency(mon.Currency, o.Money.Currency) {
			d := sum{v: mon.Amount}.add(-o.Money.Amount)
			if d.v < 0 {
				d = sum{}.add(-d.v)
			}
			diff = diff.add(d.v).or(d)
		} else if c := strings.ToLower(mon.Currency); foreign == "" || c < foreign {
			foreign = c
		}
	}
	currency := o.Money.Currency
	if foreign != "" {
		diff, currency = sum{}, foreign
		for _, mon := range off {
			if sameCurrency(mon.Currency, foreign) {
				diff = diff.add(mon.Amount)
			}
		}
	}
	atRisk := reconcile.Money{Amount: diff.v, Currency: currency}
	mentions := make([]reconcile.Mention, len(bad))
	for k, mv := range bad {
		mentions[k] = reconcile.Mention{ID: m.movID(mv), Noun: m.movNoun(mv), Money: off[k]}
	}
	m.add(reconcile.AmountMismatch, o.ID, "", ids, o.Money, atRisk, reconcile.DetailAmount(o, mentions, diff.money(currency)))
	return true
}

func (m *matcher) conflictFinding(o *reconcile.Obligation, mv int32) {
	obls := []string{m.oblIDs[m.movs[mv].link.obl]}
	for _, l := range m.more[mv] {
		obls = append(obls, m.obl(l.obl).ID)
	}
	slices.Sort(obls)
	m.add(reconcile.ConflictingLink, o.ID, m.movID(mv), m.ids(nil, mv, ""), o.Money, m.money(mv),
		reconcile.DetailConflict(m.mention(mv), obls))
}

// paidFailedFinding: PAID, but every provider record of it failed or was
// canceled.
func (m *matcher) paidFailedFinding(o *reconcile.Obligation, failed []int32) {
	var ids []string
	for _, mv := range failed {
		ids = m.ids(ids, mv, "")
	}
	m.add(reconcile.StatusMismatch, o.ID, "", ids, o.Money, o.Money,
		reconcile.DetailPaidFailed(o, m.mentions(failed), m.unread(o).String()))
}

// paidStaleFinding: PAID, but its provider record is still pending long
// after the grace period: that is no evidence that money moved.
func (m *matcher) paidStaleFinding(o *reconcile.Obligation, stale []int32) {
	var ids []string
	for _, mv := range stale {
		ids = m.ids(ids, mv, "")
	}
	m.add(reconcile.PaidWithoutEvidence, o.ID, "", ids, o.Money, o.Money,
		reconcile.DetailPaidStale(o, m.mentions(stale), m.now.Sub(m.created(stale[0])), m.unread(o).String()))
}

// absenceFinding: PAID and nothing links to it. Absence is claimed only on
// evidence of absence: the object it names was looked up and does not
// exist, or the listing (and, for an obligation that only its key could
// link, the events) covered its whole time. Anything less proves nothing.
func (m *matcher) absenceFinding(o *reconcile.Obligation) {
	skew := m.opts.ClockSkew
	from, to := o.CreatedAt.Time().Add(-skew), maxTime(o.UpdatedAt.Time(), o.PaidAt.Time()).Add(skew)
	listed := m.in.Listed.Valid() && m.in.Listed.Covers(from, to)
	var named *reconcile.Mention
	if o.ProviderID != "" {
		if mv := m.movementOf(o.ProviderID); mv >= 0 {
			// It names a record that exists but is of another kind, so
			// it could not link; as without a provider id, only a key
			// or metadata could have.
			mn := m.mention(mv)
			named = &mn
		}
	}
	if o.ProviderID != "" && named == nil {
		l, looked := m.lookups[o.ProviderID]
		switch {
		case looked && l.Result == reconcile.LookupNotFound:
			m.add(reconcile.PaidWithoutEvidence, o.ID, "", []string{o.ProviderID}, o.Money, o.Money, reconcile.DetailNotFound(o))
		case looked && l.Result == reconcile.LookupFailed:
			m.unverified(o, []string{o.ProviderID}, reconcile.WhyLookupFailed(o.ProviderID, l.Err))
		case looked:
			m.unverified(o, []string{o.ProviderID}, reconcile.WhyNotAmongRead(o.ProviderID))
		case listed:
			m.add(reconcile.PaidWithoutEvidence, o.ID, "", []string{o.ProviderID}, o.Money, o.Money,
				reconcile.DetailNoSuchRecord(o, m.in.Listed))
		default:
			m.unverified(o, []string{o.ProviderID}, reconcile.WhyRecordsNotRead(o, false, nil))
		}
		return
	}
	// Without a provider id only its key or metadata can link it; the key
	// is known only from events, so they must cover its time too.
	events := !m.in.EventsFrom.IsZero() && !m.in.EventsFrom.After(from)
	var ids []string
	if named != nil {
		ids = []string{o.ProviderID}
	}
	if listed && events {
		m.add(reconcile.PaidWithoutEvidence, o.ID, "", ids, o.Money, o.Money, reconcile.DetailNothingBelongs(o, m.in.Listed, named))
		return
	}
	m.unverified(o, ids, reconcile.WhyRecordsNotRead(o, true, named))
}

func (m *matcher) unverified(o *reconcile.Obligation, ids []string, why string) {
	if !m.opts.ReportUnverified {
		return
	}
	m.add(Unverified, o.ID, "", ids, o.Money, o.Money, reconcile.DetailUnverified(o, why))
}

// movedFinding: money moved for an obligation that says it must not have.
func (m *matcher) movedFinding(o *reconcile.Obligation, succ []int32) {
	var ids []string
	for _, mv := range succ {
		ids = m.ids(ids, mv, reconcile.Succeeded)
	}
	m.add(reconcile.StatusMismatch, o.ID, "", ids, o.Money, o.Money, reconcile.DetailMoved(o, m.mentions(succ)))
}

// recordsRead reports whether the run read every provider record that can
// bear on a decision about o: the listings and the key evidence reach back
// to Options.RecordsFrom of its creation and the listings on to now, and
// the record its provider_id names was not a retrieval that failed
// (docs/design.md, "Coverage").
func (m *matcher) recordsRead(o *reconcile.Obligation) bool {
	return m.unread(o).Kind == reconcile.GapNone
}

// unread is what the run did not read of the records a decision about o
// rests on; the zero Gap when it read them all.
func (m *matcher) unread(o *reconcile.Obligation) reconcile.Gap {
	from := m.opts.RecordsFrom(o.CreatedAt.Time())
	l, ev := m.in.Listed, m.in.EventsFrom
	g := reconcile.Gap{Listed: l, EventsFrom: ev, Created: o.CreatedAt.Time()}
	switch {
	case !l.Valid():
		g.Kind = reconcile.GapNoListing
	case l.To.Before(m.now):
		g.Kind = reconcile.GapLater
	case l.From.After(from):
		// Whole days, rounded up: what max_lookback must reach.
		g.Kind, g.Reach = reconcile.GapEarlier, (m.now.Sub(from)+24*time.Hour-1)/(24*time.Hour)*(24*time.Hour)
	case ev.IsZero():
		g.Kind = reconcile.GapNoEvents
	case ev.After(from):
		g.Kind = reconcile.GapEvents
	case o.ProviderID != "":
		// The record it names as its answer, retrieved by id, may be a
		// second payment: unread when its retrieval failed, unless what
		// was read holds it (an intent, through its charges).
		if l, ok := m.lookups[o.ProviderID]; ok && l.Result == reconcile.LookupFailed {
			if k, mv := m.objectOf(o.ProviderID); k < 0 && mv < 0 {
				g.Kind, g.Record, g.Err = reconcile.GapLookup, o.ProviderID, l.Err
			}
		}
	}
	return g
}

// markable counts the obligations the run decides on that a transition
// may mark PAID (CONFIRMATION_UNKNOWN or EXECUTING), as many as the
// transitions can be: grown by appending, a first pass's hundred thousand
// transitions allocated five times their 13 MB.
func (m *matcher) markable() int {
	n := 0
	for i := range m.nObls() {
		if m.decides(i) && m.obl(i).Unsettled() {
			n++
		}
	}
	return n
}
