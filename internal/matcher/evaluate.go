package matcher

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"reconcile"
)

// evaluateObligations classifies every obligation against the movements
// reaching it and decides its PAID transition.
func (m *matcher) evaluateObligations() {
	var succ, failed, stale, conflicts []int32 // scratch, reused
	for i := range m.nObls() {
		if !m.decides(i) {
			continue
		}
		o := m.obl(i)
		read := m.recordsRead(o)
		if !read {
			m.partial = append(m.partial, o.ID)
		}
		movs := m.oblMovs[m.oblStart[i]:m.oblStart[i+1]]
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
				FromLeaseExpiresAt: o.LeaseExpiresAt,
				ProviderID:         m.evidenceID(o, succ[0]),
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

// classifyUnlinked buckets every movement and reports the unlinked
// succeeded ones as suspected duplicates or orphans.
func (m *matcher) classifyUnlinked() {
	type skey struct {
		class  class
		target string
		money  reconcile.Money
	}
	var suspects []int32
	for k := range m.movs {
		mv, v := int32(k), &m.movs[k]
		switch {
		case v.conflict:
			v.bucket = bConflict
		case v.link.obl >= 0:
			v.bucket = bLinked
		case v.status == mSucceeded && m.within(mv, m.in.Listed):
			v.bucket = bOrphan // until a twin is found; see below
			suspects = append(suspects, mv)
		case v.status == mPendingLive:
			v.bucket = bPending
		default:
			v.bucket = bIgnored
		}
	}
	if len(suspects) == 0 {
		return
	}
	// Only the twins some suspect could have are indexed: amounts first
	// (cheap), then targets, so that a run with few unlinked objects pays
	// little for suspicion.
	targets := make([]string, len(suspects))
	var twins map[skey][]int32
	amounts := map[int64]struct{}{}
	for k, s := range suspects {
		if targets[k] = m.target(s); targets[k] != "" {
			if twins == nil {
				twins = map[skey][]int32{}
			}
			twins[skey{m.movs[s].class, targets[k], lowerMoney(m.money(s))}] = nil
			amounts[m.money(s).Amount] = struct{}{}
		}
	}
	if len(twins) > 0 {
		for k := range m.movs {
			mv, v := int32(k), &m.movs[k]
			if v.status != mSucceeded || v.bucket != bLinked {
				continue
			}
			if _, ok := amounts[m.money(mv).Amount]; !ok {
				continue
			}
			key := skey{v.class, m.target(mv), lowerMoney(m.money(mv))}
			if list, ok := twins[key]; ok && key.target != "" {
				twins[key] = append(list, mv)
			}
		}
		for key, list := range twins {
			slices.SortFunc(list, func(a, b int32) int {
				if c := m.created(a).Compare(m.created(b)); c != 0 {
					return c
				}
				return strings.Compare(m.movID(a), m.movID(b))
			})
			twins[key] = list
		}
	}
	for k, s := range suspects {
		twin := int32(-1)
		if targets[k] != "" {
			twin = m.nearestTwin(s, twins[skey{m.movs[s].class, targets[k], lowerMoney(m.money(s))}])
		}
		// An object of the subject is the run's to explain: a suspected
		// duplicate or an orphan. One read only as evidence outside it
		// matters only as the repeat of a movement of an obligation the
		// run decides on; the obligations that could claim it otherwise
		// were not all read (docs/design.md, "Coverage").
		inSubject := m.within(s, m.subject)
		switch {
		case twin >= 0 && (inSubject || m.decides(m.movs[twin].link.obl)):
			m.movs[s].bucket = bSuspected
			m.suspected[m.movs[twin].link.obl] = true
			m.suspectFinding(s, twin, targets[k])
		case inSubject:
			m.orphanFinding(s, targets[k])
		default:
			m.movs[s].bucket = bIgnored
		}
	}
}

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

// nearestTwin finds, in list (sorted by creation time), the linked movement
// created nearest to s and within the duplicate window; ties go to the
// smaller obligation id, then movement id. -1 if none.
func (m *matcher) nearestTwin(s int32, list []int32) int32 {
	if len(list) == 0 {
		return -1
	}
	t := m.created(s)
	w := m.opts.DuplicateWindow
	best, bestD := int32(-1), time.Duration(0)
	better := func(c int32, d time.Duration) bool {
		if best < 0 || d < bestD {
			return true
		}
		if d > bestD {
			return false
		}
		oc, ob := m.oblIDs[m.movs[c].link.obl], m.oblIDs[m.movs[best].link.obl]
		if oc != ob {
			return oc < ob
		}
		return m.movID(c) < m.movID(best)
	}
	i, _ := slices.BinarySearchFunc(list, t, func(c int32, t time.Time) int { return m.created(c).Compare(t) })
	for j := i - 1; j >= 0; j-- {
		d := absDur(t.Sub(m.created(list[j])))
		if d > w || best >= 0 && d > bestD {
			break
		}
		if better(list[j], d) {
			best, bestD = list[j], d
		}
	}
	for j := i; j < len(list); j++ {
		d := absDur(m.created(list[j]).Sub(t))
		if d > w || best >= 0 && d > bestD {
			break
		}
		if better(list[j], d) {
			best, bestD = list[j], d
		}
	}
	return best
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
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

func (m *matcher) money(mv int32) reconcile.Money { return m.obj(m.movs[mv].rep).Money }

func (m *matcher) created(mv int32) time.Time { return m.obj(m.movs[mv].rep).Created }

func (m *matcher) sortMovs(movs []int32) {
	if len(movs) > 1 {
		slices.SortFunc(movs, func(a, b int32) int { return strings.Compare(m.movID(a), m.movID(b)) })
	}
}

// ids appends the ids of the members of movement mv that have status
// want, or of every member when want is empty.
func (m *matcher) ids(dst []string, mv int32, want reconcile.Status) []string {
	for j := m.movs[mv].first; j >= 0; j = m.next[j] {
		if want == "" || m.obj(j).Status == want {
			dst = append(dst, m.obj(j).ID)
		}
	}
	return dst
}

// movIDs are the movements' own ids (an intent's group by its intent), for
// sentences.
func (m *matcher) movIDs(movs []int32) string {
	s := make([]string, len(movs))
	for k, mv := range movs {
		s[k] = m.movID(mv)
	}
	return strings.Join(s, ", ")
}

func (m *matcher) add(kind reconcile.FindingKind, oblID, objectID string, ids []string, money, atRisk reconcile.Money, detail string) {
	if ids == nil {
		ids = []string{}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	m.res.Findings = append(m.res.Findings, reconcile.Finding{
		Kind:         kind,
		Severity:     kind.Severity(),
		ObligationID: oblID,
		ProviderIDs:  ids,
		Money:        money,
		AtRisk:       atRisk,
		Fingerprint:  reconcile.Fingerprint(kind, oblID, objectID),
		ContentHash:  reconcile.ContentHash(atRisk, ids),
		Detail:       detail,
	})
}

func (m *matcher) conflictFinding(o *reconcile.Obligation, mv int32) {
	obls := []string{m.oblIDs[m.movs[mv].link.obl]}
	for _, l := range m.more[mv] {
		obls = append(obls, m.obl(l.obl).ID)
	}
	slices.Sort(obls)
	money, id := m.money(mv), m.movID(mv)
	m.add(reconcile.ConflictingLink, o.ID, id, m.ids(nil, mv, ""), o.Money, money,
		fmt.Sprintf("The provider's %s %s of %s is claimed by %s obligations (%s): it cannot count for any of them until someone decides which it belongs to.",
			m.movNoun(mv), id, money, count(len(obls)), strings.Join(obls, ", ")))
}

func (m *matcher) duplicateFinding(o *reconcile.Obligation, succ []int32) {
	var ids []string
	var same, maxSame sum
	nSame := 0
	foreign := map[string]sum{}
	for _, mv := range succ {
		ids = m.ids(ids, mv, reconcile.Succeeded)
		mon := m.money(mv)
		if sameCurrency(mon.Currency, o.Money.Currency) {
			same = same.add(mon.Amount)
			maxSame.v = max(maxSame.v, mon.Amount)
			nSame++
		} else {
			c := strings.ToLower(mon.Currency)
			foreign[c] = foreign[c].add(mon.Amount)
		}
	}
	// The money at risk is what moved beyond the obligation's amount. When
	// the movements do not add up to more (each moved too little), it is
	// all but the largest. Money in other currencies is all extra; it is
	// the figure at risk only when none is extra in the obligation's own.
	extra := same.add(-o.Money.Amount)
	if extra.v <= 0 && nSame > 1 {
		extra = same.add(-maxSame.v)
	}
	atRisk := extra
	atRisk.v = max(atRisk.v, 0)
	currency := o.Money.Currency
	others := slices.Sorted(maps.Keys(foreign))
	var also []string
	for _, c := range others {
		if atRisk.v == 0 {
			atRisk, currency = foreign[c], c
			continue
		}
		also = append(also, foreign[c].text(c))
	}
	tooMuch := atRisk.text(currency)
	if len(also) > 0 {
		tooMuch += " and " + strings.Join(also, " and ")
	}
	noun, verb, loss := oblWords(o.Kind)
	m.add(reconcile.Duplicate, o.ID, "", ids, o.Money, reconcile.Money{Amount: atRisk.v, Currency: currency},
		fmt.Sprintf("%s %s of %s was %s %s by the provider (%s): %s too much %s.",
			noun, o.ID, o.Money, verb, times(len(succ)), m.movIDs(succ), tooMuch, loss))
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
	noun, verb, _ := oblWords(o.Kind)
	var detail string
	switch mon := off[0]; {
	case len(bad) > 1:
		parts := make([]string, len(bad))
		for k, mv := range bad {
			parts[k] = fmt.Sprintf("%s %s", off[k], m.movID(mv))
		}
		detail = fmt.Sprintf("%s %s was approved for %s, but the provider %s other amounts for it (%s).",
			noun, o.ID, o.Money, verb, strings.Join(parts, ", "))
	case !sameCurrency(mon.Currency, o.Money.Currency):
		detail = fmt.Sprintf("%s %s was approved for %s, but the provider %s %s for it (%s), in another currency.",
			noun, o.ID, o.Money, verb, mon, m.movID(bad[0]))
	default:
		more := "more"
		if mon.Amount < o.Money.Amount {
			more = "less"
		}
		detail = fmt.Sprintf("%s %s was approved for %s, but the provider %s %s for it (%s): %s %s than approved.",
			noun, o.ID, o.Money, verb, mon, m.movID(bad[0]), diff.text(currency), more)
	}
	m.add(reconcile.AmountMismatch, o.ID, "", ids, o.Money, atRisk, detail)
	return true
}

// paidFailedFinding: PAID, but every provider record of it failed or was
// canceled.
func (m *matcher) paidFailedFinding(o *reconcile.Obligation, failed []int32) {
	var ids []string
	for _, mv := range failed {
		ids = m.ids(ids, mv, "")
	}
	noun, _, _ := oblWords(o.Kind)
	what := "failed"
	if len(failed) == 1 && m.obj(m.movs[failed[0]].rep).Status == reconcile.Canceled {
		what = "was canceled"
	}
	rec := "record of it (" + m.movIDs(failed) + ") " + what
	if len(failed) > 1 {
		rec = "records of it (" + m.movIDs(failed) + ") all failed or were canceled"
	}
	outcome := ": no money moved."
	if gap := m.unread(o); gap != "" {
		outcome = ", and nothing else read belongs to it; " + gap + "."
	}
	m.add(reconcile.StatusMismatch, o.ID, "", ids, o.Money, o.Money,
		fmt.Sprintf("%s %s of %s is marked paid, but the provider's %s%s", noun, o.ID, o.Money, rec, outcome))
}

// paidStaleFinding: PAID, but its provider record is still pending long
// after the grace period: that is no evidence that money moved.
func (m *matcher) paidStaleFinding(o *reconcile.Obligation, stale []int32) {
	var ids []string
	for _, mv := range stale {
		ids = m.ids(ids, mv, "")
	}
	noun, _, _ := oblWords(o.Kind)
	outcome := ": no money has moved yet."
	if gap := m.unread(o); gap != "" {
		outcome = ", and nothing else read belongs to it; " + gap + "."
	}
	m.add(reconcile.PaidWithoutEvidence, o.ID, "", ids, o.Money, o.Money,
		fmt.Sprintf("%s %s of %s is marked paid, but the provider's record of it (%s) is still pending after %s%s",
			noun, o.ID, o.Money, m.movIDs(stale), human(m.now.Sub(m.created(stale[0]))), outcome))
}

// absenceFinding: PAID and nothing links to it. Absence is claimed only on
// evidence of absence: the object it names was looked up and does not
// exist, or the listing (and, for an obligation that only its key could
// link, the events) covered its whole time. Anything less proves nothing.
func (m *matcher) absenceFinding(o *reconcile.Obligation) {
	noun, _, _ := oblWords(o.Kind)
	skew := m.opts.ClockSkew
	from, to := o.CreatedAt.Add(-skew), maxTime(o.UpdatedAt, o.PaidAt).Add(skew)
	listed := m.in.Listed.Valid() && m.in.Listed.Covers(from, to)
	wrongKind := ""
	if o.ProviderID != "" {
		if mv := m.movementOf(o.ProviderID); mv >= 0 {
			// It names a record that exists but is of another kind, so
			// it could not link; as without a provider id, only a key
			// or metadata could have.
			wrongKind = fmt.Sprintf(" (the provider record it names, %s, is a %s)", o.ProviderID, m.movNoun(mv))
		}
	}
	if o.ProviderID != "" && wrongKind == "" {
		l, looked := m.lookups[o.ProviderID]
		switch {
		case looked && l.Result == reconcile.LookupNotFound:
			m.add(reconcile.PaidWithoutEvidence, o.ID, "", []string{o.ProviderID}, o.Money, o.Money,
				fmt.Sprintf("%s %s of %s is marked paid, but the provider has no record %s: it was looked up and does not exist.",
					noun, o.ID, o.Money, o.ProviderID))
			return
		case looked && l.Result == reconcile.LookupFailed:
			reason := "failed"
			if l.Err != "" {
				reason += " (" + l.Err + ")"
			}
			m.unverified(o, []string{o.ProviderID}, fmt.Sprintf("the lookup of %s %s", o.ProviderID, reason))
			return
		case looked:
			m.unverified(o, []string{o.ProviderID}, fmt.Sprintf("%s exists but was not among the records read", o.ProviderID))
			return
		}
		if listed {
			m.add(reconcile.PaidWithoutEvidence, o.ID, "", []string{o.ProviderID}, o.Money, o.Money,
				fmt.Sprintf("%s %s of %s is marked paid with provider record %s, but the provider has no such record between %s and %s.",
					noun, o.ID, o.Money, o.ProviderID, stamp(m.in.Listed.From), stamp(m.in.Listed.To)))
			return
		}
		m.unverified(o, []string{o.ProviderID}, "the provider's records of its time were not all read")
		return
	}
	// Without a provider id only its key or metadata can link it; the key
	// is known only from events, so they must cover its time too.
	events := !m.in.EventsFrom.IsZero() && !m.in.EventsFrom.After(from)
	var ids []string
	if wrongKind != "" {
		ids = []string{o.ProviderID}
	}
	if listed && events {
		m.add(reconcile.PaidWithoutEvidence, o.ID, "", ids, o.Money, o.Money,
			fmt.Sprintf("%s %s of %s is marked paid, but nothing the provider recorded between %s and %s belongs to it%s.",
				noun, o.ID, o.Money, stamp(m.in.Listed.From), stamp(m.in.Listed.To), wrongKind))
		return
	}
	m.unverified(o, ids, "the provider's records and events of its time were not all read"+wrongKind)
}

func (m *matcher) unverified(o *reconcile.Obligation, ids []string, why string) {
	if !m.opts.ReportUnverified {
		return
	}
	noun, _, _ := oblWords(o.Kind)
	m.add(Unverified, o.ID, "", ids, o.Money, o.Money,
		fmt.Sprintf("%s %s of %s is marked paid and no provider record links to it, but this could not be checked: %s.",
			noun, o.ID, o.Money, why))
}

// movedFinding: money moved for an obligation that says it must not have.
func (m *matcher) movedFinding(o *reconcile.Obligation, succ []int32) {
	var ids []string
	for _, mv := range succ {
		ids = m.ids(ids, mv, reconcile.Succeeded)
	}
	noun, verb, _ := oblWords(o.Kind)
	var state string
	switch o.State {
	case reconcile.FailedState:
		state = "is marked failed"
	case reconcile.Approved:
		state = "is approved and waiting to be executed"
	case reconcile.PendingApproval:
		state = "is still awaiting approval"
	case reconcile.RequiresReview:
		state = "is held for review"
	default:
		state = fmt.Sprintf("is in state %q, which the reconciler's configuration does not map (so it is never marked paid)", o.RawState)
	}
	moved := fmt.Sprintf("%s for it (%s)", m.money(succ[0]), m.movID(succ[0]))
	if len(succ) > 1 {
		moved = fmt.Sprintf("money for it %s (%s)", times(len(succ)), m.movIDs(succ))
	}
	m.add(reconcile.StatusMismatch, o.ID, "", ids, o.Money, o.Money,
		fmt.Sprintf("%s %s of %s %s, but the provider already %s %s.", noun, o.ID, o.Money, state, verb, moved))
}

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

// recordsRead reports whether the run read every provider record that can
// bear on a decision about o: the listings and the key evidence reach back
// to Options.RecordsFrom of its creation and the listings on to now
// (docs/design.md, "Coverage").
func (m *matcher) recordsRead(o *reconcile.Obligation) bool {
	return m.unread(o) == ""
}

// unread says, as a clause of a finding's detail, what the run did not
// read of the records a decision about o rests on, and how to read it;
// "" when it read them all.
func (m *matcher) unread(o *reconcile.Obligation) string {
	from := m.opts.RecordsFrom(o.CreatedAt)
	l, ev := m.in.Listed, m.in.EventsFrom
	switch {
	case !l.Valid():
		return "no listing of the provider's records was read"
	case l.To.Before(m.now):
		return fmt.Sprintf("the provider's records created after %s were not read", stamp(l.To))
	case l.From.After(from):
		// Whole days, rounded up: what max_lookback must reach.
		hours := int64((m.now.Sub(from) + 24*time.Hour - 1) / (24 * time.Hour) * 24)
		return fmt.Sprintf("the provider's records before %s were not read (it was created %s; "+
			"a max_lookback of at least %dh reads back that far)", stamp(l.From), stamp(o.CreatedAt), hours)
	case ev.IsZero():
		return "no provider events were read, and only they tell which idempotency key made each record"
	case ev.After(from):
		return fmt.Sprintf("the provider's events before %s, which tell which idempotency key made each record, "+
			"were not read (Stripe keeps events 30 days; only what the reconciler's mirror kept is older)", stamp(ev))
	}
	return ""
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

func (m *matcher) suspectFinding(s, twin int32, target string) {
	o := m.obl(m.movs[twin].link.obl)
	money, id := m.money(s), m.movID(s)
	ids := m.ids(nil, s, reconcile.Succeeded)
	ids = m.ids(ids, twin, reconcile.Succeeded)
	same, outcome := "same customer "+target, "the customer was probably charged twice"
	if m.movs[s].class == clsRefund {
		same, outcome = "same "+m.targetNoun(target)+" "+target, "probably paid out twice"
	}
	m.add(reconcile.SuspectedDuplicate, o.ID, id, ids, o.Money, money,
		fmt.Sprintf("%s %s of %s belongs to no obligation%s but repeats %s %s of %s (%s, same amount, %s apart): %s.",
			capital(m.movNoun(s)), id, money, m.keyless(s), m.movNoun(twin), m.movID(twin), o.ID, same,
			human(absDur(m.created(s).Sub(m.created(twin)))), outcome))
}

// movNoun names a movement's kind for people: an intent with its charges
// is a payment.
func (m *matcher) movNoun(mv int32) string {
	r := m.movs[mv].ref
	if r < 0 {
		return "payment"
	}
	switch m.obj(r).Kind {
	case reconcile.PaymentIntent:
		return "payment"
	case reconcile.Charge:
		return "charge"
	case reconcile.Refund:
		return "refund"
	}
	return "record"
}

// targetNoun names what a refund refunds; an id that was not read is
// named by its provider prefix.
func (m *matcher) targetNoun(id string) string {
	if mv := m.movementOf(id); mv >= 0 {
		return m.movNoun(mv)
	}
	if strings.HasPrefix(id, "ch_") || strings.HasPrefix(id, "py_") {
		return "charge"
	}
	return "payment"
}

// oblWords are the words a sentence about an obligation of kind k uses.
func oblWords(k reconcile.ObjectKind) (noun, verb, loss string) {
	if k == reconcile.Refund {
		return "Refund", "paid out", "left the account"
	}
	if kindClass(k) == clsCharge {
		return "Charge", "collected", "was taken from the customer"
	}
	return "Obligation", "moved", "moved"
}

func count(n int) string {
	if n >= 2 && n <= 9 {
		return []string{"two", "three", "four", "five", "six", "seven", "eight", "nine"}[n-2]
	}
	return fmt.Sprint(n)
}

func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	case 3:
		return "three times"
	}
	return fmt.Sprintf("%d times", n)
}

// human formats a duration the way a person says it.
func human(d time.Duration) string {
	d = absDur(d)
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d < time.Minute:
		return unit(int64(d/time.Second), "second")
	case d < 2*time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sameCurrency compares ISO currency codes as DESIGN says: without regard
// to case (a team's table may say USD where Stripe says usd).
func sameCurrency(a, b string) bool { return a == b || strings.EqualFold(a, b) }

// lowerMoney is money with its currency in lower case, for keys.
func lowerMoney(m reconcile.Money) reconcile.Money {
	m.Currency = strings.ToLower(m.Currency)
	return m
}

// sameMoney reports whether a and b are the same amount of the same
// currency.
func sameMoney(a, b reconcile.Money) bool {
	return a.Amount == b.Amount && sameCurrency(a.Currency, b.Currency)
}

// sum is money added up exactly in minor units, or, past what an int64
// holds, its bound and the fact that it was reached: a figure at risk is
// said to be at least that, never wrapped around.
type sum struct {
	v    int64
	over bool // the true figure lies beyond v (v is MaxInt64 or MinInt64)
}

func (s sum) add(b int64) sum {
	r := s.v + b
	switch {
	case b > 0 && r < s.v:
		return sum{v: math.MaxInt64, over: true}
	case b < 0 && r > s.v:
		return sum{v: math.MinInt64, over: true}
	}
	return sum{v: r, over: s.over}
}

// or keeps s's figure and adds t's mark of having reached a bound.
func (s sum) or(t sum) sum { s.over = s.over || t.over; return s }

// text formats the sum as money of currency, "at least …" when it
// reached a bound.
func (s sum) text(currency string) string {
	m := reconcile.Money{Amount: s.v, Currency: currency}.String()
	if s.over {
		return "at least " + m
	}
	return m
}
