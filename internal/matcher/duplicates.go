package matcher

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"reconcile"
)

// Duplicates and suspected duplicates (docs/design.md, "Findings"). Two or
// more succeeded movements linked to one obligation are a duplicate. An
// unlinked succeeded movement with the same class, target (a refund's
// refunded movement, a charge's customer) and money as a linked one,
// created within the duplicate window of it, is a suspected duplicate of
// the nearest such twin's obligation, reported instead of an orphan; it
// keeps that obligation from PAID. Read only as evidence outside the
// run's subject, a movement is a suspect only of an obligation the run
// decides on.

// classifyUnlinked buckets every movement and reports the unlinked
// succeeded ones as suspected duplicates or orphans.
func (m *matcher) classifyUnlinked() {
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
	m.indexTwins(suspects)
	for _, s := range suspects {
		twin := m.nearestTwin(s, m.twinsOf(s))
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
			m.suspectFinding(s, twin, m.target(s))
		case inSubject:
			m.orphanFinding(s, m.target(s))
		default:
			m.movs[s].bucket = bIgnored
		}
	}
}

// twinKey is what twins share: their class, target and money (its
// currency folded).
type twinKey struct {
	class  class
	target string
	money  reconcile.Money
}

func (m *matcher) twinKey(mv int32) twinKey {
	return twinKey{m.movs[mv].class, m.target(mv), lowerMoney(m.money(mv))}
}

// indexTwins indexes, for the suspects, the linked succeeded movements
// that could be their twins, sorted by creation time. Only those some
// suspect could have are indexed: amounts first (cheap), then targets, so
// that a run with few unlinked objects pays little for suspicion.
func (m *matcher) indexTwins(suspects []int32) {
	amounts := map[int64]struct{}{}
	for _, s := range suspects {
		if k := m.twinKey(s); k.target != "" {
			if m.twins == nil {
				m.twins = map[twinKey][]int32{}
			}
			m.twins[k] = nil
			amounts[k.money.Amount] = struct{}{}
		}
	}
	if len(m.twins) == 0 {
		return
	}
	for k := range m.movs {
		mv, v := int32(k), &m.movs[k]
		if v.status != mSucceeded || v.bucket != bLinked {
			continue
		}
		if _, ok := amounts[m.money(mv).Amount]; !ok {
			continue
		}
		key := m.twinKey(mv)
		if list, ok := m.twins[key]; ok && key.target != "" {
			m.twins[key] = append(list, mv)
		}
	}
	for key, list := range m.twins {
		slices.SortFunc(list, func(a, b int32) int {
			if c := m.created(a).Compare(m.created(b)); c != 0 {
				return c
			}
			return strings.Compare(m.movID(a), m.movID(b))
		})
		m.twins[key] = list
	}
}

// twinsOf lists the linked succeeded movements of the same class, target
// and money as suspect s, sorted by creation time; none when s has no
// target.
func (m *matcher) twinsOf(s int32) []int32 {
	k := m.twinKey(s)
	if k.target == "" {
		return nil
	}
	return m.twins[k]
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

// target is what a movement is a suspected duplicate against: a refund's
// refunded movement, a charge's or an intent's customer ("" for none).
func (m *matcher) target(mv int32) string {
	v := &m.movs[mv]
	rep := m.obj(v.rep)
	switch v.class {
	case clsRefund:
		return m.refundTarget(rep)
	case clsCharge:
		if rep.Customer == "" && v.ref >= 0 {
			return m.obj(v.ref).Customer
		}
		return rep.Customer
	}
	return ""
}

// refundTarget is the movement a refund takes money back from: a refund
// of an intent and a refund of that intent's charge have the same target.
func (m *matcher) refundTarget(r *reconcile.ProviderObject) string {
	t := cmp.Or(r.Target, r.Charge, r.PaymentIntent)
	if t == "" {
		return ""
	}
	if mv := m.movementOf(t); mv >= 0 {
		return m.movID(mv)
	}
	if r.PaymentIntent != "" {
		return r.PaymentIntent
	}
	return t
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
		also = append(also, foreign[c].money(c))
	}
	tooMuch := atRisk.money(currency)
	if len(also) > 0 {
		tooMuch += " and " + strings.Join(also, " and ")
	}
	m.add(reconcile.Duplicate, o.ID, "", ids, o.Money, reconcile.Money{Amount: atRisk.v, Currency: currency},
		reconcile.DetailDuplicate(o, m.mentions(succ), tooMuch))
	// A refund paid twice paid out too much; a charge collected too much.
	m.res.Findings[len(m.res.Findings)-1].PaidOut = o.Kind == reconcile.Refund
}

func (m *matcher) suspectFinding(s, twin int32, target string) {
	o := m.obl(m.movs[twin].link.obl)
	ids := m.ids(nil, s, reconcile.Succeeded)
	ids = m.ids(ids, twin, reconcile.Succeeded)
	m.add(reconcile.SuspectedDuplicate, o.ID, m.movID(s), ids, o.Money, m.money(s),
		reconcile.DetailSuspect(m.mention(s), m.mention(twin), o, m.movs[s].class == clsRefund, m.targetNoun(target), target,
			absDur(m.created(s).Sub(m.created(twin))), m.keyless(s)))
	f := &m.res.Findings[len(m.res.Findings)-1]
	f.Target, f.PaidOut = target, m.movs[s].class == clsRefund
}
