package matcher

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"reconcile/internal/config"

	"reconcile"
)

// history is a world with time in it: obligations created over ten days,
// each followed (never preceded) by the provider objects its execution
// made — retries under fresh keys, attempts that failed, refunds made by
// hand, objects whose metadata names another obligation — and the key
// evidence of every object made under a key.
type history struct {
	obls []reconcile.Obligation
	objs []reconcile.ProviderObject
	keys []reconcile.KeyEvidence
}

func genHistory(r *rand.Rand, dw time.Duration) history {
	var h history
	day := 24 * time.Hour
	monies := []reconcile.Money{{Amount: 100, Currency: "usd"}, {Amount: 250, Currency: "usd"}, {Amount: 900, Currency: "eur"}}
	targets := []string{"ch_t1", "ch_t2"}
	for _, id := range targets {
		h.objs = append(h.objs, reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: monies[0],
			Status: reconcile.Succeeded, Created: reconcile.StampOf(propNow.Add(-12 * day))})
	}
	at := func(from time.Time, most time.Duration) time.Time {
		t := from.Add(time.Duration(r.Int64N(int64(most)/int64(time.Minute)+1)) * time.Minute)
		if end := propNow.Add(-time.Second); t.After(end) {
			return end
		}
		return t
	}
	n := 1 + r.IntN(8)
	obj := 0
	newObj := func(o *reconcile.Obligation, created time.Time) reconcile.ProviderObject {
		obj++
		p := reconcile.ProviderObject{Money: o.Money, Status: reconcile.Succeeded, Created: reconcile.StampOf(created), Customer: "cus_1"}
		if o.Kind == reconcile.Refund {
			p.ID, p.Kind, p.Target, p.Charge, p.Customer = fmt.Sprintf("re_%d", obj), reconcile.Refund, o.TargetID, o.TargetID, ""
		} else {
			p.ID, p.Kind = fmt.Sprintf("ch_%d", obj), reconcile.Charge
			if r.IntN(2) == 0 {
				p.Customer = "cus_2"
			}
		}
		if r.IntN(8) == 0 {
			p.Status = reconcile.Status([]string{"failed", "pending", "canceled"}[r.IntN(3)])
		}
		if r.IntN(10) == 0 {
			p.Money = monies[r.IntN(len(monies))]
		}
		p.RawStatus = string(p.Status)
		return p
	}
	for i := range n {
		o := reconcile.Obligation{ID: fmt.Sprintf("o%d", i), Kind: reconcile.Charge, IdempotencyKey: fmt.Sprintf("k%d", i),
			Provider: "stripe", Money: monies[r.IntN(len(monies))], CreatedAt: reconcile.StampOf(at(propNow.Add(-10*day), 10*day))}
		if r.IntN(2) == 0 {
			o.Kind, o.TargetID = reconcile.Refund, targets[r.IntN(len(targets))]
		}
		o.State = reconcile.States[r.IntN(len(reconcile.States))]
		o.RawState = string(o.State)
		o.UpdatedAt = o.CreatedAt
		if r.IntN(2) == 0 {
			o.UpdatedAt = reconcile.StampOf(at(o.CreatedAt.Time(), 4*day))
		}
		if o.State == reconcile.Executing && r.IntN(3) > 0 {
			o.LeaseOwner, o.LeaseExpiresAt = "w", reconcile.StampOf(at(o.CreatedAt.Time(), day))
		}
		for range r.IntN(4) {
			// The provider's clock may run up to the clock skew behind.
			p := newObj(&o, at(o.CreatedAt.Time().Add(-4*time.Minute), 3*day))
			switch r.IntN(5) {
			case 0:
				if o.ProviderID == "" {
					o.ProviderID = p.ID
				}
			case 1:
				h.keys = append(h.keys, reconcile.KeyEvidence{ObjectID: p.ID, ObjectKind: p.Kind, Key: o.IdempotencyKey, Created: p.Created})
			case 2:
				p.Metadata = map[string]string{"obligation_id": o.ID}
			case 3:
				p.Metadata = map[string]string{"idempotency_key": o.IdempotencyKey}
			}
			// A retry under a fresh key and no metadata (case 4) links to
			// nothing: a suspected duplicate or an orphan.
			h.objs = append(h.objs, p)
		}
		if o.State == reconcile.Paid {
			o.PaidAt = o.UpdatedAt
		}
		h.obls = append(h.obls, o)
	}
	// Objects that name a second obligation too, made after both.
	for range r.IntN(3) {
		a, b := &h.obls[r.IntN(n)], &h.obls[r.IntN(n)]
		p := newObj(a, at(later(a.CreatedAt.Time(), b.CreatedAt.Time()), 2*day))
		h.keys = append(h.keys, reconcile.KeyEvidence{ObjectID: p.ID, ObjectKind: p.Kind, Key: a.IdempotencyKey, Created: p.Created})
		p.Metadata = map[string]string{"obligation_id": b.ID}
		h.objs = append(h.objs, p)
	}
	if r.IntN(4) == 0 {
		// The suspect at the edge: a refund made by hand (x) a little
		// under a duplicate window before obligation a's refund (y), and a
		// little more after obligation b's (z), all alike: x repeats z,
		// not y — which only a run that reads a second duplicate window
		// back, past x's twin search, can tell.
		a := &h.obls[r.IntN(n)]
		a.Kind, a.TargetID, a.State, a.RawState, a.LeaseExpiresAt = reconcile.Refund, targets[0], reconcile.ConfirmationUnknown, "CONFIRMATION_UNKNOWN", 0
		a.PaidAt, a.ProviderID = 0, ""
		y := newObj(a, at(a.CreatedAt.Time().Add(time.Minute), 0))
		y.Status, y.RawStatus, y.Money = reconcile.Succeeded, "succeeded", a.Money
		h.keys = append(h.keys, reconcile.KeyEvidence{ObjectID: y.ID, ObjectKind: y.Kind, Key: a.IdempotencyKey, Created: y.Created})
		skew := 5 * time.Minute
		d2 := time.Duration(r.Int64N(int64(dw / 4)))
		x := newObj(a, y.Created.Time().Add(-dw+d2))
		x.Status, x.RawStatus, x.Money = reconcile.Succeeded, "succeeded", a.Money
		d1 := d2 + skew + time.Minute + time.Duration(r.Int64N(int64(dw/4)))
		b := reconcile.Obligation{ID: "ob", Kind: reconcile.Refund, IdempotencyKey: "kb", Provider: "stripe", TargetID: targets[0],
			Money: a.Money, State: reconcile.Paid, RawState: "PAID", CreatedAt: reconcile.StampOf(x.Created.Time().Add(-d1 - time.Minute))}
		z := newObj(&b, x.Created.Time().Add(-d1))
		z.Status, z.RawStatus, z.Money = reconcile.Succeeded, "succeeded", a.Money
		b.ProviderID, b.UpdatedAt, b.PaidAt = z.ID, reconcile.StampOf(z.Created.Time()), reconcile.StampOf(z.Created.Time())
		h.obls = append(h.obls, b)
		h.objs = append(h.objs, x, y, z)
	}
	// Money moved by hand, repeating what the workflow moved, up to two
	// days before or after.
	for range r.IntN(7) {
		o := &h.obls[r.IntN(n)]
		h.objs = append(h.objs, newObj(o, at(o.CreatedAt.Time().Add(-2*day), 4*day)))
	}
	return h
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// whole is the input of a run over the whole history.
func (h history) whole() Input {
	from := propNow.Add(-30 * 24 * time.Hour)
	return Input{Obligations: h.obls, Objects: h.objs, Keys: h.keys,
		Listed: reconcile.Window{From: from, To: propNow}, EventsFrom: from}
}

// narrow is the input of a run about subject, read as docs/design.md
// ("Coverage") says a run reads, stated here apart from the runner: the
// obligations it decides on (by state and window, and those the subject's
// objects name), the provider's records from Options.CoverFrom on, the
// objects its obligations name looked up by id, and the obligations the
// records read name, to link only.
func (h history) narrow(subject reconcile.Window, opts Options, maxLookback time.Duration) Input {
	type names struct{ ids, keys, pids map[string]bool }
	nameOf := func(keep func(*reconcile.ProviderObject) bool) names {
		n := names{map[string]bool{}, map[string]bool{}, map[string]bool{}}
		for i := range h.objs {
			p := &h.objs[i]
			if !keep(p) {
				continue
			}
			n.pids[p.ID] = true
			n.ids[p.Metadata["obligation_id"]] = true
			n.keys[p.Metadata["idempotency_key"]] = true
			for _, k := range h.keys {
				if k.ObjectID == p.ID {
					n.keys[k.Key] = true
				}
			}
		}
		return n
	}
	named := func(o *reconcile.Obligation, n names) bool {
		return n.ids[o.ID] || n.keys[o.IdempotencyKey] || o.ProviderID != "" && n.pids[o.ProviderID] || o.TargetID != "" && n.pids[o.TargetID]
	}
	inSubject := nameOf(func(p *reconcile.ProviderObject) bool { return subject.Contains(p.Created.Time()) })
	decided := map[string]bool{}
	var oldest time.Time
	for i := range h.obls {
		o := &h.obls[i]
		if o.State == reconcile.Executing || o.State == reconcile.ConfirmationUnknown ||
			subject.Contains(o.CreatedAt.Time()) || subject.Contains(o.UpdatedAt.Time()) || named(o, inSubject) {
			decided[o.ID] = true
			if oldest.IsZero() || o.CreatedAt.Time().Before(oldest) {
				oldest = o.CreatedAt.Time()
			}
		}
	}
	cover := reconcile.Window{From: opts.CoverFrom(subject, oldest, propNow, maxLookback), To: propNow}
	in := Input{Listed: cover, EventsFrom: cover.From, Subject: subject}
	for _, p := range h.objs {
		if cover.Contains(p.Created.Time()) {
			in.Objects = append(in.Objects, p)
		}
	}
	for _, k := range h.keys {
		if cover.Contains(k.Created.Time()) {
			in.Keys = append(in.Keys, k)
		}
	}
	read := nameOf(func(p *reconcile.ProviderObject) bool { return cover.Contains(p.Created.Time()) })
	for i := range h.obls {
		o := &h.obls[i]
		switch {
		case decided[o.ID]:
			for _, id := range []string{o.ProviderID, o.TargetID} {
				if id == "" || slices.ContainsFunc(in.Objects, func(p reconcile.ProviderObject) bool { return p.ID == id }) {
					continue
				}
				if k := slices.IndexFunc(h.objs, func(p reconcile.ProviderObject) bool { return p.ID == id }); k >= 0 {
					in.Objects = append(in.Objects, h.objs[k])
					in.Lookups = append(in.Lookups, reconcile.Lookup{ID: id, Result: reconcile.LookupFound})
				} else {
					in.Lookups = append(in.Lookups, reconcile.Lookup{ID: id, Result: reconcile.LookupNotFound})
				}
			}
		case named(o, read):
			in.Context = append(in.Context, o.ID)
		default:
			continue
		}
		in.Obligations = append(in.Obligations, *o)
	}
	return in
}

// TestWindowIndependence is docs/design.md's coverage claim as a property:
// for any history, a run about any window makes the same PAID decisions
// and finds the same critical and high findings, for every obligation it
// decides on whose records it read in full, as a run over the whole
// history; and it marks none PAID whose records it did not read in full.
func TestWindowIndependence(t *testing.T) {
	n := propertyCases(t)
	compared, paid, urgent, partial := 0, 0, 0, 0
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 12))
		opts := OptionsFrom(config.Default().Matcher)
		if r.IntN(4) == 0 {
			opts.DuplicateWindow = time.Hour
		}
		h := genHistory(r, opts.DuplicateWindow)
		maxLookback := []time.Duration{90 * 24 * time.Hour, 4 * 24 * time.Hour, 60 * time.Hour}[r.IntN(3)]
		to := propNow.Add(-time.Duration(r.IntN(3)) * time.Duration(r.IntN(48)) * time.Hour)
		subject := reconcile.Window{From: to.Add(-time.Duration(1+r.IntN(96)) * time.Hour), To: to}

		full := Match(h.whole(), propNow, opts)
		narrow := Match(h.narrow(subject, opts, maxLookback), propNow, opts)
		settled := map[string]bool{}
		for _, id := range narrow.Settled.Obligations {
			settled[id] = true
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Errorf("seed %d, subject %s..%s, max lookback %s: %s", seed, subject.From.Format(time.Stamp), subject.To.Format(time.Stamp),
				maxLookback, fmt.Sprintf(format, args...))
		}
		for _, id := range narrow.ObligationIDs {
			got, want := decisions(narrow, id), decisions(full, id)
			o := h.obls[slices.IndexFunc(h.obls, func(o reconcile.Obligation) bool { return o.ID == id })]
			// Within max_lookback a run reads all of an obligation's
			// records; beyond it, it must not mark it PAID on part.
			if from := opts.RecordsFrom(o.CreatedAt.Time()); from.Before(propNow.Add(-maxLookback)) && from.Before(subject.From) {
				partial++
				if _, ok := got["PAID"]; ok {
					fail("%s marked PAID, though its records were not all read", id)
				}
				continue
			}
			if !settled[id] {
				fail("%s is within max_lookback, but its records were not all read", id)
			}
			compared++
			if _, ok := want["PAID"]; ok {
				paid++
			}
			urgent += len(want)
			if !maps.Equal(got, want) {
				fail("%s: decided %v, the whole history %v", id, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		}
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
	// The histories must give decisions to compare, or the property says
	// little.
	if compared < n || paid == 0 || urgent <= paid || partial == 0 {
		t.Errorf("compared %d obligations over %d histories (%d PAID, %d decisions in all, %d partly read): too few", compared, n, paid, urgent, partial)
	}
	t.Logf("%d histories: %d obligations compared, %d PAID, %d decisions in all, %d partly read", n, compared, paid, urgent, partial)
}

// decisions are what a result decided about obligation id: PAID (with
// its evidence), and its critical and high findings.
func decisions(res Result, id string) map[string]bool {
	out := map[string]bool{}
	for _, tr := range res.Transitions {
		if tr.ObligationID == id {
			out["PAID"] = true
			out["PAID by "+tr.ProviderID] = true
		}
	}
	for _, f := range res.Findings {
		if f.ObligationID == id && f.Severity.Rank() >= reconcile.High.Rank() {
			out[string(f.Kind)+" "+f.Fingerprint] = true
		}
	}
	return out
}

// The record an obligation's provider_id names, retrieved by id, may be a
// second payment: when its retrieval failed, the obligation's records
// were not all read. It is not marked PAID on another record linking to
// it, the finding says which lookup failed, and the run settles nothing
// of it (its earlier findings stand). Absent (a 404), the record proves
// nothing against it, and it is marked PAID; so it is when what was read
// holds the record (an intent, through its charge; a charge, through its
// intent).
func TestFailedLookupLeavesTheRecordsUnread(t *testing.T) {
	from := propNow.Add(-30 * 24 * time.Hour)
	usd := reconcile.Money{Amount: 2500, Currency: "usd"}
	o := reconcile.Obligation{ID: "charge:1", Kind: reconcile.Charge, IdempotencyKey: "key-1", ProviderID: "pi_lost",
		Money: usd, State: reconcile.ConfirmationUnknown, RawState: "CONFIRMATION_UNKNOWN",
		CreatedAt: reconcile.StampOf(propNow.Add(-2 * time.Hour)), UpdatedAt: reconcile.StampOf(propNow.Add(-2 * time.Hour))}
	ch := reconcile.ProviderObject{ID: "ch_1", Kind: reconcile.Charge, Money: usd, Status: reconcile.Succeeded,
		Created: reconcile.StampOf(propNow.Add(-time.Hour)), Metadata: map[string]string{"obligation_id": o.ID}}
	run := func(l reconcile.Lookup) Result {
		in := Input{Obligations: []reconcile.Obligation{o}, Objects: []reconcile.ProviderObject{ch},
			Lookups: []reconcile.Lookup{l}, Listed: reconcile.Window{From: from, To: propNow}, EventsFrom: from}
		return Match(in, propNow, OptionsFrom(config.Default().Matcher))
	}

	res := run(reconcile.Lookup{ID: "pi_lost", Result: reconcile.LookupFailed, Err: "timeout"})
	if len(res.Transitions) > 0 {
		t.Errorf("marked %+v though the lookup of pi_lost failed", res.Transitions)
	}
	if !slices.Equal(res.ObligationIDs, []string{o.ID}) || len(res.Settled.Obligations) > 0 {
		t.Errorf("decided %q and settled %q, want charge:1 decided and nothing settled", res.ObligationIDs, res.Settled.Obligations)
	}
	want := "it was not marked paid: the lookup of pi_lost failed (timeout), so a second payment there could not be ruled out."
	if len(res.Findings) != 1 || res.Findings[0].Kind != reconcile.UnresolvedUnknown || !strings.HasSuffix(res.Findings[0].Detail, want) {
		t.Errorf("findings %+v, want one unresolved unknown ending %q", res.Findings, want)
	}

	res = run(reconcile.Lookup{ID: "pi_lost", Result: reconcile.LookupNotFound})
	if len(res.Transitions) != 1 || res.Transitions[0].ProviderID != "ch_1" || len(res.Findings) > 0 {
		t.Errorf("with pi_lost absent: transitions %+v, findings %+v; want charge:1 PAID by ch_1 and no finding", res.Transitions, res.Findings)
	}
	if !slices.Equal(res.Settled.Obligations, []string{o.ID}) {
		t.Errorf("with pi_lost absent settled %q, want charge:1", res.Settled.Obligations)
	}

	// An intent whose charge was read is held through it, however its
	// own retrieval went.
	ch.Metadata, ch.PaymentIntent = nil, "pi_lost"
	res = run(reconcile.Lookup{ID: "pi_lost", Result: reconcile.LookupFailed, Err: "timeout"})
	if len(res.Transitions) != 1 || len(res.Findings) > 0 || !slices.Equal(res.Settled.Obligations, []string{o.ID}) {
		t.Errorf("with pi_lost's charge read: transitions %+v, findings %+v, settled %q; want charge:1 PAID and settled",
			res.Transitions, res.Findings, res.Settled.Obligations)
	}

	// So is a charge whose intent was read, naming it its latest.
	o.ProviderID = "ch_lost"
	ch.ID, ch.Kind, ch.PaymentIntent, ch.Charge = "pi_1", reconcile.PaymentIntent, "", "ch_lost"
	res = run(reconcile.Lookup{ID: "ch_lost", Result: reconcile.LookupFailed, Err: "timeout"})
	if len(res.Transitions) != 1 || len(res.Findings) > 0 || !slices.Equal(res.Settled.Obligations, []string{o.ID}) {
		t.Errorf("with ch_lost's intent read: transitions %+v, findings %+v, settled %q; want charge:1 PAID and settled",
			res.Transitions, res.Findings, res.Settled.Obligations)
	}
}
