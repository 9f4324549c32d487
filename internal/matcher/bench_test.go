package matcher

import (
	"strconv"
	"testing"
	"time"

	"reconcile"
)

// benchWorld builds n obligations and about as many provider objects, with
// one key event per object: mostly clean (ids, intents, keys only,
// metadata only, refunds, unknowns and expired leases to mark PAID), and in
// every thousand one of each finding kind.
func benchWorld(n int) Input {
	now := propNow
	in := Input{
		Obligations: make([]reconcile.Obligation, 0, n),
		Objects:     make([]reconcile.ProviderObject, 0, n+n/100),
		Keys:        make([]reconcile.KeyEvidence, 0, n+n/100),
		Listed:      reconcile.Window{From: now.Add(-720 * time.Hour), To: now},
		EventsFrom:  now.Add(-720 * time.Hour),
	}
	for i := range n {
		s := strconv.Itoa(i)
		money := reconcile.Money{Amount: int64(500 + i%250000), Currency: [...]string{"usd", "eur", "jpy", "gbp"}[i%4]}
		created := now.Add(-time.Duration(30+i%40000) * time.Minute)
		o := reconcile.Obligation{ID: "charge:" + s, Kind: reconcile.Charge, IdempotencyKey: "k-" + s, Provider: "stripe",
			Money: money, State: reconcile.Paid, RawState: "PAID", CreatedAt: created, UpdatedAt: created, PaidAt: created}
		p := reconcile.ProviderObject{ID: "ch_" + s, Kind: reconcile.Charge, Money: money, Status: reconcile.Succeeded,
			RawStatus: "succeeded", Customer: "cus_" + strconv.Itoa(i%5000), Created: created}
		obj, key := true, true
		switch i % 20 {
		case 10, 11: // a refund
			o.ID, o.Kind, o.IdempotencyKey, o.TargetID = "refund:"+s, reconcile.Refund, "rk-"+s, "ch_"+strconv.Itoa(i-1)
			p.ID, p.Kind, p.Target, p.Charge, p.Customer = "re_"+s, reconcile.Refund, o.TargetID, o.TargetID, ""
			o.ProviderID = p.ID
		case 12: // an intent and its charge
			o.ProviderID = "pi_" + s
			p.PaymentIntent = o.ProviderID
			in.Objects = append(in.Objects, reconcile.ProviderObject{ID: o.ProviderID, Kind: reconcile.PaymentIntent, Money: money,
				Status: reconcile.Succeeded, Charge: p.ID, Customer: p.Customer, Created: created})
		case 13: // the key alone
		case 14: // metadata alone
			p.Metadata = map[string]string{"obligation_id": o.ID}
			key = false
		case 15: // unknown outcome, resolved by key
			o.State, o.RawState = reconcile.ConfirmationUnknown, "CONFIRMATION_UNKNOWN"
		case 16: // a crashed worker, resolved by key
			o.State, o.RawState, o.LeaseOwner, o.LeaseExpiresAt = reconcile.Executing, "EXECUTING", "w", now.Add(-time.Hour)
		default:
			o.ProviderID = p.ID
		}
		switch i % 1000 {
		case 101: // duplicate: a second charge under a retry's metadata
			in.Objects = append(in.Objects, reconcile.ProviderObject{ID: "ch_dup" + s, Kind: reconcile.Charge, Money: money,
				Status: reconcile.Succeeded, Metadata: map[string]string{"obligation_id": o.ID}, Created: created})
		case 202: // orphan
			in.Objects = append(in.Objects, reconcile.ProviderObject{ID: "ch_orphan" + s, Kind: reconcile.Charge, Money: money,
				Status: reconcile.Succeeded, Created: created})
		case 303: // suspected duplicate: same customer and money, unlinked
			in.Objects = append(in.Objects, reconcile.ProviderObject{ID: "ch_twin" + s, Kind: reconcile.Charge, Money: money,
				Status: reconcile.Succeeded, Customer: p.Customer, Created: created.Add(time.Minute)})
		case 404: // paid without evidence: its charge does not exist
			obj, key = false, false
			o.ProviderID = "ch_gone" + s
			in.Lookups = append(in.Lookups, reconcile.Lookup{ID: o.ProviderID, Result: reconcile.LookupNotFound})
		case 505: // amount mismatch
			p.Money.Amount++
		case 606: // status mismatch
			p.Status = reconcile.Failed
		case 707: // stale lease
			obj, key = false, false
			o.State, o.RawState, o.LeaseExpiresAt = reconcile.Executing, "EXECUTING", time.Time{}
		case 808: // unresolved unknown
			obj, key = false, false
			o.State, o.RawState = reconcile.ConfirmationUnknown, "CONFIRMATION_UNKNOWN"
		case 909: // conflict: the object also names another obligation
			p.Metadata = map[string]string{"obligation_id": "charge:" + strconv.Itoa(i-1)}
		}
		in.Obligations = append(in.Obligations, o)
		if obj {
			in.Objects = append(in.Objects, p)
		}
		if key {
			in.Keys = append(in.Keys, reconcile.KeyEvidence{ObjectID: p.ID, Key: o.IdempotencyKey, EventType: "charge.succeeded", Created: created})
		}
	}
	return in
}

// hashJoin is the floor a matcher cannot beat: obligations by provider id,
// each object looked up once.
func hashJoin(in *Input) int {
	byID := make(map[string]int32, len(in.Obligations))
	for i := range in.Obligations {
		if id := in.Obligations[i].ProviderID; id != "" {
			byID[id] = int32(i)
		}
	}
	n := 0
	for i := range in.Objects {
		if _, ok := byID[in.Objects[i].ID]; ok {
			n++
		}
	}
	return n
}

// BenchmarkMatch times Match and, on the same data, the bare hash join, at
// 10k, 100k and 1M obligations, in wall and CPU (user+system, GC workers
// included) ns per provider object.
//
//	go test ./internal/matcher -run '^$' -bench Match -benchtime 3x -benchmem
func BenchmarkMatch(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"10k", 10_000}, {"100k", 100_000}, {"1M", 1_000_000}} {
		// Built once per size, and only if one of its benchmarks runs.
		var in Input
		world := func() {
			if in.Obligations == nil {
				in = benchWorld(size.n)
			}
		}
		b.Run(size.name+"/match", func(b *testing.B) {
			world()
			objects := float64(len(in.Objects))
			b.ReportAllocs()
			var res Result
			var cpu time.Duration
			for b.Loop() {
				c := cpuTime()
				res = Match(in, propNow, DefaultOptions())
				cpu += cpuTime() - c
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/objects, "ns/object")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/objects, "cpu-ns/object")
			b.ReportMetric(float64(len(res.Findings)), "findings")
			b.ReportMetric(float64(len(res.Transitions)), "transitions")
		})
		b.Run(size.name+"/hashjoin", func(b *testing.B) {
			world()
			objects := float64(len(in.Objects))
			b.ReportAllocs()
			hits := 0
			var cpu time.Duration
			for b.Loop() {
				c := cpuTime()
				hits = hashJoin(&in)
				cpu += cpuTime() - c
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/objects, "ns/object")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/objects, "cpu-ns/object")
			if hits == 0 {
				b.Fatal("hash join found nothing")
			}
		})
	}
}

// TestBenchWorld keeps the benchmark honest: its world has every finding
// kind and transitions, mostly clean.
func TestBenchWorld(t *testing.T) {
	in := benchWorld(10_000)
	res := Match(in, propNow, DefaultOptions())
	kinds := map[reconcile.FindingKind]int{}
	for _, f := range res.Findings {
		kinds[f.Kind]++
	}
	for _, k := range reconcile.FindingKinds {
		if kinds[k] == 0 {
			t.Errorf("benchmark world has no %s finding (%v)", k, kinds)
		}
	}
	if len(res.Transitions) < 1000 {
		t.Errorf("benchmark world has %d transitions, want over 1000", len(res.Transitions))
	}
	if len(res.Findings) > len(in.Obligations)/50 {
		t.Errorf("benchmark world has %d findings for %d obligations: not mostly clean", len(res.Findings), len(in.Obligations))
	}
}
