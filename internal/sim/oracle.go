// The third of three statements of the matching rules (docs/design.md,
// "Three statements of the rules"): from the truth the simulation made, the
// oracle says what each pass must conclude, written from the design apart
// from the matcher (internal/matcher) and the property test's oracle
// (internal/matcher/property_test.go). A rule change touches all three and
// the design, so that one stated wrong is caught by the other two.

package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"reconcile"
)

// The matcher's defaults, which the runner is wired with; the oracle
// states docs/design.md's rules with them independently of the matcher.
const (
	duplicateWindow = 24 * time.Hour
	pendingGrace    = 72 * time.Hour
	clockSkew       = 5 * time.Minute
	eventGrace      = 60 // seconds read past the window's end for events
	repeatInterval  = 24 * time.Hour
)

// expectation is what the oracle, from the truth at a pass's start and
// the pass's window, knows the pass must conclude. It knows what the
// provider really did, but holds the pass only to what the pass could see:
// the provider's records over its coverage (docs/design.md, "Coverage"),
// the objects obligations it decides on name (retrieved, unless
// retrievals failed), key evidence from the events of that coverage, and
// the obligations it decides on.
type expectation struct {
	now    time.Time
	window reconcile.Window
	truth  *ledger
	// cover is where the pass reads the provider's records, keysFrom where
	// its key evidence is complete from.
	cover    reconcile.Window
	keysFrom time.Time

	scope   map[string]bool // obligations the pass decides on
	context map[string]bool // obligations read only to link
	// partial: obligations in scope whose records the pass did not all read.
	partial  map[string]bool
	listed   map[string]bool // objects the listing returns
	subject  map[string]bool // listed objects created in the window
	input    map[string]bool // objects the matcher gets: listed and retrieved
	lookups  map[string]reconcile.LookupResult
	links    map[string][]string // object → obligations it links to
	linked   map[string][]string // obligation → objects linked to it alone
	findings map[string]expFinding
	// transitions: obligation → the provider id of its PAID transition.
	transitions map[string]string
}

type expFinding struct {
	kind     reconcile.FindingKind
	obl, obj string
}

func (f expFinding) String() string {
	s := string(f.kind)
	if f.obl != "" {
		s += " " + f.obl
	}
	if f.obj != "" {
		s += " " + f.obj
	}
	return s
}

func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func class(k reconcile.ObjectKind) int {
	switch k {
	case reconcile.Charge, reconcile.PaymentIntent:
		return 1
	case reconcile.Refund:
		return 2
	}
	return 0
}

// recordsFrom and coverFrom state docs/design.md's coverage rule for the
// oracle, apart from the matcher's: an obligation's decisions rest on the
// records from its creation less the clock skew and two duplicate windows;
// a pass reads from a duplicate window before its window, back to that of
// the oldest obligation it decides on, but not past maxLookback unless its
// window begins earlier.
func recordsFrom(created time.Time) time.Time { return created.Add(-clockSkew - 2*duplicateWindow) }

func coverFrom(win reconcile.Window, oldest, now time.Time, maxLookback time.Duration) time.Time {
	from := win.From.Add(-duplicateWindow)
	if !oldest.IsZero() && recordsFrom(oldest).Before(from) {
		from = recordsFrom(oldest)
	}
	if limit := now.Add(-maxLookback); from.Before(limit) {
		from = limit
	}
	if win.From.Before(from) {
		from = win.From
	}
	return from
}

// expect computes the expectation of a pass with plan that began at now,
// when the ledger was truth, whose retrievals of the ids in failed failed
// (the fault injector knows which), reading back at most maxLookback.
func expect(t *ledger, plan passPlan, now time.Time, failed map[string]bool, maxLookback time.Duration) *expectation {
	win := plan.window
	e := &expectation{now: now, window: win, truth: t, scope: map[string]bool{}, context: map[string]bool{},
		partial: map[string]bool{}, listed: map[string]bool{}, subject: map[string]bool{},
		input: map[string]bool{}, lookups: map[string]reconcile.LookupResult{}, links: map[string][]string{},
		linked: map[string][]string{}, findings: map[string]expFinding{}, transitions: map[string]string{}}
	inWin := func(at time.Time) bool { return !at.Before(win.From) && at.Before(win.To) }
	created := func(x *object, from, to time.Time) bool {
		c := x.Created.Unix()
		return c >= ceilUnix(from) && c < ceilUnix(to)
	}
	// What an object names: obligation ids and idempotency keys (its
	// metadata, and the key its creation event tells), and itself.
	names := func(x *object, ids, keys, pids map[string]bool) {
		pids[x.ID] = true
		if v := x.Meta["obligation_id"]; v != "" {
			ids[v] = true
		}
		if v := x.Meta["idempotency_key"]; v != "" {
			keys[v] = true
		}
		if x.Key != "" {
			keys[x.Key] = true
		}
	}
	named := func(o *obligation, ids, keys, pids map[string]bool) bool {
		return ids[o.ID] || keys[o.Key] || (o.ProviderID != "" && pids[o.ProviderID]) || (o.Target != "" && pids[o.Target])
	}

	// The pass decides on the obligations in scope by state and window,
	// and on those the window's objects name.
	ids, keys, pids := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, id := range t.objIDs {
		if x := t.objs[id]; created(x, win.From, win.To) && created(x, win.From, now) {
			e.subject[id] = true
			names(x, ids, keys, pids)
		}
	}
	var oldest time.Time
	for _, id := range t.oblIDs {
		o := t.obls[id]
		if o.State == reconcile.Executing || o.State == reconcile.ConfirmationUnknown || inWin(o.Created) || inWin(o.Updated) ||
			named(o, ids, keys, pids) {
			e.scope[id] = true
			if oldest.IsZero() || o.Created.Before(oldest) {
				oldest = o.Created
			}
		}
	}
	// It reads the provider's records over its coverage, and what they
	// name besides to link them.
	e.cover = reconcile.Window{From: coverFrom(win, oldest, now, maxLookback), To: now}
	e.keysFrom = e.cover.From
	if r := now.Add(-30 * 24 * time.Hour); r.After(e.keysFrom) {
		e.keysFrom = r
	}
	ids, keys, pids = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, id := range t.objIDs {
		if x := t.objs[id]; created(x, e.cover.From, now) {
			e.listed[id], e.input[id] = true, true
			names(x, ids, keys, pids)
		}
	}
	for _, id := range t.oblIDs {
		if o := t.obls[id]; !e.scope[id] && named(o, ids, keys, pids) {
			e.context[id] = true
		}
	}
	// Retrievals of what obligations in scope name and the listing missed,
	// and every obligation naming what they found, to link it.
	ids, keys, pids = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, id := range t.oblIDs {
		if !e.scope[id] {
			continue
		}
		o := t.obls[id]
		for _, ref := range []string{o.ProviderID, o.Target} {
			if ref == "" || e.listed[ref] {
				continue
			}
			switch x, ok := t.objs[ref]; {
			case failed[ref]:
				e.lookups[ref] = reconcile.LookupFailed
			case ok:
				e.lookups[ref] = reconcile.LookupFound
				e.input[ref] = true
				// What it names itself: the key that created it is told
				// only by its creation's event, before the coverage.
				names(&object{ID: x.ID, Meta: x.Meta}, ids, keys, pids)
			default:
				e.lookups[ref] = reconcile.LookupNotFound
			}
		}
	}
	for _, id := range t.oblIDs {
		if o := t.obls[id]; !e.scope[id] && named(o, ids, keys, pids) {
			e.context[id] = true
		}
	}

	// Links, by every route, to obligations read of the same class.
	read := func(id string) bool { return e.scope[id] || e.context[id] }
	byKey := map[string]string{}
	for _, id := range t.oblIDs {
		if read(id) {
			byKey[t.obls[id].Key] = id
		}
	}
	inputIDs := slices.Sorted(maps.Keys(e.input))
	for _, xid := range inputIDs {
		x := t.objs[xid]
		reach := map[string]bool{}
		add := func(oid string) {
			if oid != "" && read(oid) && class(t.obls[oid].Kind) == class(x.Kind) {
				reach[oid] = true
			}
		}
		for _, id := range t.oblIDs {
			if read(id) && t.obls[id].ProviderID == xid {
				add(id)
			}
		}
		// Events are read from the coverage's start to a minute past now:
		// the key of an object created as the pass began is known even
		// where only a retrieval returned the object.
		if c := x.Created.Unix(); x.Key != "" && c >= ceilUnix(e.cover.From) && c < ceilUnix(now)+eventGrace {
			add(byKey[x.Key])
		}
		add(x.Meta["obligation_id"])
		if v := x.Meta["idempotency_key"]; v != "" {
			add(byKey[v])
		}
		e.links[xid] = slices.Sorted(maps.Keys(reach))
		if len(reach) == 1 {
			oid := e.links[xid][0]
			e.linked[oid] = append(e.linked[oid], xid)
		}
	}

	pendingLive := func(x *object) bool { return now.Sub(x.Created) < pendingGrace }
	add := func(kind reconcile.FindingKind, obl, obj string) {
		e.findings[reconcile.Fingerprint(kind, obl, obj)] = expFinding{kind, obl, obj}
	}
	target := func(x *object) string {
		if x.Kind == reconcile.Refund {
			return x.Target
		}
		return x.Customer
	}

	// Unlinked money: a suspected duplicate of a linked twin, or, created
	// in the window, an orphan. Read only as evidence, it matters only as
	// the repeat of a movement of an obligation the pass decides on.
	suspected := map[string]bool{}
	for _, xid := range inputIDs {
		x := t.objs[xid]
		if len(e.links[xid]) > 0 || x.Status != reconcile.Succeeded || !e.listed[xid] {
			continue
		}
		var twin *object
		var twinObl string
		var bestD time.Duration
		for _, yid := range inputIDs {
			y := t.objs[yid]
			if len(e.links[yid]) != 1 || y.Status != reconcile.Succeeded || class(y.Kind) != class(x.Kind) ||
				target(y) == "" || target(y) != target(x) || y.Money != x.Money {
				continue
			}
			d := x.Created.Sub(y.Created).Abs()
			if d > duplicateWindow {
				continue
			}
			yo := e.links[yid][0]
			if twin == nil || d < bestD || d == bestD && (yo < twinObl || yo == twinObl && yid < twin.ID) {
				twin, twinObl, bestD = y, yo, d
			}
		}
		switch {
		case twin != nil && target(x) != "" && (e.subject[xid] || e.scope[twinObl]):
			suspected[twinObl] = true
			add(reconcile.SuspectedDuplicate, twinObl, xid)
		case e.subject[xid]:
			add(reconcile.Orphan, "", xid)
		}
	}

	// Every obligation in scope against the movements that link to it.
	for _, id := range slices.Sorted(maps.Keys(e.scope)) {
		o := t.obls[id]
		// Its records are all read when the coverage and the key
		// evidence reach back to them, and the record its provider_id
		// names, a payment maybe, was not a retrieval that failed.
		whole := !e.cover.From.After(recordsFrom(o.Created)) && !e.keysFrom.After(recordsFrom(o.Created)) &&
			e.lookups[o.ProviderID] != reconcile.LookupFailed
		if !whole {
			e.partial[id] = true
		}
		var succ, failed, stale, conflicts []*object
		live := 0
		for _, xid := range inputIDs {
			if !slices.Contains(e.links[xid], id) {
				continue
			}
			x := t.objs[xid]
			switch {
			case len(e.links[xid]) > 1:
				conflicts = append(conflicts, x)
			case x.Status == reconcile.Succeeded:
				succ = append(succ, x)
			case x.Status == reconcile.Pending && pendingLive(x):
				live++
			case x.Status == reconcile.Pending:
				stale = append(stale, x)
			default:
				failed = append(failed, x)
			}
		}
		movs := len(succ) + len(failed) + len(stale) + len(conflicts) + live
		if o.State == reconcile.Paid && movs == 1 && len(succ) == 1 && succ[0].Money == o.Money {
			continue
		}
		blocked := suspected[id]
		for _, x := range conflicts {
			add(reconcile.ConflictingLink, id, x.ID)
			blocked = true
		}
		if len(succ) >= 2 {
			add(reconcile.Duplicate, id, "")
			blocked = true
		}
		if slices.ContainsFunc(succ, func(x *object) bool { return x.Money != o.Money }) {
			add(reconcile.AmountMismatch, id, "")
			blocked = true
		}
		settled := len(conflicts) == 0 && live == 0
		leaseLive := o.LeaseExp.After(now)
		canMark := o.State == reconcile.ConfirmationUnknown || o.State == reconcile.Executing && !leaseLive
		proven := canMark && !blocked && settled && len(succ) == 1 && succ[0].Money == o.Money
		switch o.State {
		case reconcile.Paid:
			if settled && len(succ) == 0 {
				switch {
				case len(failed) > 0:
					add(reconcile.StatusMismatch, id, "")
				case len(stale) > 0:
					add(reconcile.PaidWithoutEvidence, id, "")
				case e.absent(o):
					add(reconcile.PaidWithoutEvidence, id, "")
				}
			}
		case reconcile.FailedState, reconcile.Approved, reconcile.PendingApproval, reconcile.RequiresReview:
			if len(succ) > 0 {
				add(reconcile.StatusMismatch, id, "")
			}
		case reconcile.Executing:
			if proven && !whole || !leaseLive && settled && len(succ) == 0 {
				add(reconcile.StaleLease, id, "")
			}
		case reconcile.ConfirmationUnknown:
			if proven && !whole || settled && len(succ) == 0 {
				add(reconcile.UnresolvedUnknown, id, "")
			}
		}
		// PAID only on the whole of its records.
		if proven && whole {
			e.transitions[id] = succ[0].ID
		}
	}
	return e
}

// settles says whether the pass settles an earlier finding (docs/design.md,
// "Coverage"): its obligation is in scope with every record read (or
// with some, for a stale lease or an unresolved unknown, which more
// records could only take away), or, for an orphan or a suspected
// duplicate, one of its objects was created in the window, or retrieved
// by id and links to an obligation in scope.
func (e *expectation) settles(kind reconcile.FindingKind, oblID string, providerIDs []string) bool {
	outcome := kind == reconcile.StaleLease || kind == reconcile.UnresolvedUnknown
	if oblID != "" && e.scope[oblID] && (!e.partial[oblID] || outcome) {
		return true
	}
	if oblID != "" && kind != reconcile.Orphan && kind != reconcile.SuspectedDuplicate {
		return false
	}
	decided := func(oid string) bool { return e.scope[oid] }
	return slices.ContainsFunc(providerIDs, func(id string) bool {
		return e.input[id] && (e.subject[id] || !e.listed[id] && slices.ContainsFunc(e.links[id], decided))
	})
}

// absent says whether the pass can prove that nothing the provider
// recorded belongs to PAID obligation o, to which nothing linked: the
// object it names was looked up and does not exist, or (naming none, or
// one of another kind) the listing and the events covered its whole time.
func (e *expectation) absent(o *obligation) bool {
	from := o.Created.Add(-clockSkew)
	to := o.Updated
	if o.Paid.After(to) {
		to = o.Paid
	}
	to = to.Add(clockSkew)
	covered := e.cover.Valid() && !from.Before(e.cover.From) && !to.After(e.cover.To)
	if o.ProviderID != "" && !e.input[o.ProviderID] {
		return e.lookups[o.ProviderID] == reconcile.LookupNotFound
	}
	return covered && !e.keysFrom.After(from)
}

// checkModel compares what the pass concluded with the expectation.
func (w *world) checkModel(pc *passCtl, res *reconcile.Conclusions) {
	e, n := pc.exp, pc.n
	faulted := len(pc.fired) > 0
	label := func(def string) string {
		if faulted {
			return "I7"
		}
		return def
	}
	// A pass that matched incrementally decides on, and reads, only what
	// can have changed since the last pass that matched; it must still
	// find every finding and make every transition a whole match makes
	// (docs/design.md, "Incremental matching"): the checks of findings and
	// transitions below hold it to the whole expectation.
	incremental := res.Incremental
	if incremental {
		if w.rep.Stats == nil {
			w.rep.Stats = map[string]int{}
		}
		w.rep.Stats["match_incremental"]++
	}
	gotScope := map[string]bool{}
	for _, id := range res.ObligationIDs {
		gotScope[id] = true
	}
	for id := range e.scope {
		if !gotScope[id] && !incremental {
			w.violate(label("M"), n, "obligation %s (%s) is in scope but the pass did not read it", id, e.truth.obls[id].State)
		}
	}
	for id := range gotScope {
		if !e.scope[id] {
			w.violate("M", n, "the pass read obligation %s, which is not in scope: %s", id, w.describeObl(e, id))
		}
	}
	gotObjs := map[string]bool{}
	for _, id := range res.ObjectIDs {
		gotObjs[id] = true
	}
	for id := range e.input {
		if !gotObjs[id] && !incremental {
			w.violate(label("M"), n, "provider object %s (created %s) was listed or named but the pass did not read it",
				id, e.truth.objs[id].Created.Sub(epoch))
		}
	}
	for id := range gotObjs {
		if !e.input[id] {
			w.violate("M", n, "the pass read provider object %s, which it should not have: %s", id, w.describe(e, expFinding{obj: id}))
		}
	}

	got := map[string]reconcile.Finding{}
	for _, f := range res.Findings {
		got[f.Fingerprint] = f
	}
	for _, fp := range slices.Sorted(maps.Keys(e.findings)) {
		if _, ok := got[fp]; !ok {
			w.violate("I2", n, "true anomaly not found: %s %s", e.findings[fp], w.describe(e, e.findings[fp]))
		}
	}
	for _, fp := range slices.Sorted(maps.Keys(got)) {
		if _, ok := e.findings[fp]; !ok {
			f := got[fp]
			inv := "M"
			if f.Kind == reconcile.Orphan || f.Kind == reconcile.SuspectedDuplicate {
				inv = label("M")
			}
			w.violate(inv, n, "finding without a true anomaly: %s %s %v: %s", f.Kind, f.ObligationID, f.ProviderIDs, f.Detail)
		}
	}
	gotT := map[string]string{}
	for _, t := range res.Transitions {
		gotT[t.ObligationID] = t.ProviderID
		if t.To != reconcile.Paid {
			w.violate("I7", n, "transition of %s to %s: the reconciler only ever marks PAID", t.ObligationID, t.To)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.transitions)) {
		if gotT[id] != e.transitions[id] {
			w.violate("M", n, "obligation %s should be marked PAID by %s; the pass decided %q", id, e.transitions[id], gotT[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(gotT)) {
		if _, ok := e.transitions[id]; !ok {
			w.violate(label("I1"), n, "obligation %s (%s) marked PAID by %s without the evidence for it: %s",
				id, e.truth.obls[id].State, gotT[id], w.describeObl(e, id))
		}
	}
}

// checkWindow checks I9, window independence: for every obligation the
// pass decided on whose records lie within its reach (max_lookback, and
// Stripe's 30 days of events), the pass made the PAID decision and found
// the critical and high findings that the oracle expects of a pass over
// the whole history at the same moment; and it marked none PAID beyond. A pass whose
// retrievals by id failed saw less than its coverage, and is held to I1
// and the model alone.
func (w *world) checkWindow(pc *passCtl, res *reconcile.Conclusions) {
	e, n := pc.exp, pc.n
	if pc.fired["stripe_lookup_fail"] {
		return
	}
	// A window from before the first record, less the margins of the
	// coverage rule, so that the whole history is read whatever
	// max_lookback says.
	whole := passPlan{window: reconcile.Window{From: recordsFrom(e.truth.start()).Add(-time.Hour), To: pc.start}}
	full := expect(e.truth, whole, pc.start, nil, w.maxLookback)
	gotT := map[string]string{}
	for _, t := range res.Transitions {
		gotT[t.ObligationID] = t.ProviderID
	}
	urgent := func(k reconcile.FindingKind) bool { return k.Severity().Rank() >= reconcile.High.Rank() }
	got := map[string][]string{}
	for _, f := range res.Findings {
		if urgent(f.Kind) && f.ObligationID != "" {
			got[f.ObligationID] = append(got[f.ObligationID], string(f.Kind)+" "+f.Fingerprint)
		}
	}
	want := map[string][]string{}
	for fp, f := range full.findings {
		if urgent(f.kind) && f.obl != "" {
			want[f.obl] = append(want[f.obl], string(f.kind)+" "+fp)
		}
	}
	// Within reach are the obligations whose records begin after now less
	// max_lookback (or after the window's start) and within Stripe's 30
	// days of events: all of their records can be read.
	events := pc.start.Add(-30 * 24 * time.Hour)
	reach := func(o *obligation) bool {
		from := recordsFrom(o.Created)
		return !from.Before(events) && (!from.Before(pc.start.Add(-w.maxLookback)) || !from.Before(e.window.From))
	}
	for _, id := range slices.Sorted(maps.Keys(e.scope)) {
		if !reach(e.truth.obls[id]) {
			if p, ok := gotT[id]; ok {
				w.violate("I9", n, "%s marked PAID by %s though its records before %s were not read: %s", id, p, fmtT(e.cover.From), w.describeObl(e, id))
			}
			continue
		}
		if gotT[id] != full.transitions[id] {
			w.violate("I9", n, "%s: the pass over %s..%s decided PAID by %q, a pass over the whole history by %q: %s",
				id, fmtT(e.window.From), fmtT(e.window.To), gotT[id], full.transitions[id], w.describeObl(full, id))
		}
		g, x := slices.Sorted(slices.Values(got[id])), slices.Sorted(slices.Values(want[id]))
		if !slices.Equal(g, x) {
			w.violate("I9", n, "%s: the pass over %s..%s found %v, a pass over the whole history %v: %s",
				id, fmtT(e.window.From), fmtT(e.window.To), g, x, w.describeObl(full, id))
		}
	}
}

// describe says, for a violation, what the truth was.
func (w *world) describe(e *expectation, f expFinding) string {
	if f.obl != "" {
		return w.describeObl(e, f.obl)
	}
	x := e.truth.objs[f.obj]
	if x == nil {
		return ""
	}
	return fmt.Sprintf("[%s %s %s created %s for %q key %s meta %v]", x.ID, x.Money, x.Status, x.Created.Sub(epoch), x.For, x.Key, x.Meta)
}

func (w *world) describeObl(e *expectation, id string) string {
	o := e.truth.obls[id]
	if o == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%s %s %s pid=%q key=%s lease=%s created=%s updated=%s paid=%s; objects:",
		o.ID, o.State, o.Money, o.ProviderID, o.Key, fmtT(o.LeaseExp), fmtT(o.Created), fmtT(o.Updated), fmtT(o.Paid))
	for _, x := range e.truth.objectsFor(id) {
		fmt.Fprintf(&b, " %s(%s %s %s key=%s in=%t links=%v)", x.ID, x.Money, x.Status, fmtT(x.Created), x.Key, e.input[x.ID], e.links[x.ID])
	}
	fmt.Fprintf(&b, "; window %s..%s now %s]", fmtT(e.window.From), fmtT(e.window.To), fmtT(e.now))
	return b.String()
}

func fmtT(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(epoch).String()
}
