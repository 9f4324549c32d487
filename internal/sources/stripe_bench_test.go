package sources

import (
	"fmt"
	"math"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/stripesim"
)

// benchWindow is spread with benchData's objects.
var benchWindow = reconcile.Window{From: t0, To: t0.Add(72 * time.Hour)}

// benchData fills e with n charges over benchWindow, an intent for every
// third (created with its charge, succeeded: two events), a refund for
// every sixth. With n = 6000: 9,000 objects and 11,000 key-bearing events,
// 20,000 list entries, 200 full pages.
func benchData(tb testing.TB, e *env, n int) {
	tb.Helper()
	step := benchWindow.To.Sub(benchWindow.From) / time.Duration(n)
	for i := range n {
		created := benchWindow.From.Add(time.Duration(i) * step).Truncate(time.Second)
		ch := reconcile.ProviderObject{ID: fmt.Sprintf("ch_%06d", i), Kind: reconcile.Charge,
			Money: reconcile.Money{Amount: int64(1000 + i), Currency: "usd"}, Status: reconcile.Succeeded, Created: reconcile.StampOf(created),
			Customer: fmt.Sprintf("cus_%d", i%500), Metadata: map[string]string{"obligation_id": fmt.Sprintf("ob-%d", i)}}
		if i%3 == 0 {
			ch.PaymentIntent = fmt.Sprintf("pi_%06d", i)
		}
		e.add(tb, fmt.Sprintf("key-%d", i), ch)
		if ch.PaymentIntent != "" {
			e.add(tb, fmt.Sprintf("key-%d", i), reconcile.ProviderObject{ID: ch.PaymentIntent, Kind: reconcile.PaymentIntent,
				Money: ch.Money, Status: reconcile.Succeeded, Charge: ch.ID, Customer: ch.Customer, Created: reconcile.StampOf(created)})
		}
		if i%6 == 0 {
			e.add(tb, fmt.Sprintf("key-refund-%d", i), reconcile.ProviderObject{ID: fmt.Sprintf("re_%06d", i), Kind: reconcile.Refund,
				Money: reconcile.Money{Amount: 100, Currency: "usd"}, Status: reconcile.Succeeded, Target: ch.ID, Charge: ch.ID,
				Created: reconcile.StampOf(created.Add(time.Second))})
		}
	}
}

// BenchmarkFetch measures how fast List reads a window from the test
// server, in list entries (objects and events) a second:
//
//   - paced: the server answers after 50ms and at most 25 requests a
//     second (Stripe's test-mode limit), the reader paces itself at 25/s;
//     the ceiling is 25 × 100 = 2,500 entries/s, and ceiling_ratio says
//     how close the reader comes. 429s/op counts rate limits the server
//     served (retried, never surfaced: List succeeded).
//   - unpaced: no latency, no limit: the cost of the reader itself
//     (stripe-go's decoding, translation, merge), server included.
//
// Run: go test -run '^$' -bench BenchmarkFetch -benchtime 1x ./internal/sources
// (the paced case takes about 9 s an iteration).
func BenchmarkFetch(b *testing.B) {
	cases := []struct {
		name   string
		faults stripesim.Faults
		rate   float64
	}{
		{"paced", stripesim.Faults{Latency: 50 * time.Millisecond, RateLimit: 25}, 25},
		{"unpaced", stripesim.Faults{}, math.Inf(1)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b)
			benchData(b, e, 6000)
			e.srv.SetFaults(c.faults)
			r := e.reader(b, func(o *StripeOptions) {
				o.Rate, o.Burst, o.Concurrency = c.rate, 1, 4
				o.RetryBase, o.RetryMax = 100*time.Millisecond, 2*time.Second
			})
			e.srv.ResetStats()
			var items, objects, n int
			for b.Loop() {
				l, err := r.List(b.Context(), benchWindow)
				if err != nil {
					b.Fatal(err)
				}
				objects += len(l.Objects)
				items += l.Stats.Charges + l.Stats.Refunds + l.Stats.PaymentIntents + l.Stats.Events
				n++
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(items)/secs, "entries/s")
			b.ReportMetric(float64(objects)/secs, "objects/s")
			b.ReportMetric(float64(items)/secs/2500, "ceiling_ratio")
			b.ReportMetric(float64(e.srv.Stats().RateLimited)/float64(n), "429s/op")
			b.ReportMetric(float64(e.srv.Stats().Requests)/float64(n), "requests/op")
		})
	}
}

// BenchmarkMerge measures merge alone over a million objects and as many
// keys as a first pass's listing holds them: eight slices of pages of a
// hundred, each slice newest first, as the list workers return them, the
// keys of three kinds side by side as the events list gives them.
//
// Run: go test -run '^$' -bench BenchmarkMerge -benchtime 5x ./internal/sources
func BenchmarkMerge(b *testing.B) {
	// tie objects share a second, as at a million in the end-to-end
	// bench (per is a multiple of it).
	const slices, pages, per, tie = 8, 1250, 100, 25
	read := func() [][]page {
		out := make([][]page, slices)
		for s := range out {
			out[s] = make([]page, pages)
			for p := range out[s] {
				for i := range per {
					n := (s+1)*pages*per - (p*per + i) - 1 // newest first
					created := t0.Add(time.Duration(n/tie) * time.Second)
					id := fmt.Sprintf("ch_%07d", n)
					out[s][p].objects = append(out[s][p].objects, reconcile.ProviderObject{ID: id, Kind: reconcile.Charge,
						Money: reconcile.Money{Amount: 100, Currency: "usd"}, Status: reconcile.Succeeded, Created: reconcile.StampOf(created)})
					// The events of one second come in their own order,
					// not their objects'.
					e := n - n%tie + n%tie*7%tie
					kind := []reconcile.ObjectKind{reconcile.Charge, reconcile.PaymentIntent, reconcile.Refund}[e%3]
					out[s][p].keys = append(out[s][p].keys, reconcile.KeyEvidence{ObjectID: fmt.Sprintf("ch_%07d", e), ObjectKind: kind,
						Key: fmt.Sprintf("key-%d", e), EventID: fmt.Sprintf("evt_%07d", n), Created: reconcile.StampOf(created)})
				}
			}
		}
		return out
	}
	for b.Loop() {
		b.StopTimer()
		r := read()
		b.StartTimer()
		if l := merge(r); len(l.Objects) != slices*pages*per || len(l.Keys) != slices*pages*per {
			b.Fatalf("merged %d objects and %d keys", len(l.Objects), len(l.Keys))
		}
	}
}
