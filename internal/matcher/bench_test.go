package matcher

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/bench"
	"reconcile/internal/config"
)

// benchWorld is the shared benchmark history (internal/bench.World) of n
// obligations and about as many provider objects, as the matcher's input:
// mostly clean, and in every thousand one of each finding kind. It comes
// in the order the runner hands it over: obligations sorted by id
// (sources.Obligations.Read), objects and keys by kind, creation time and
// id (sources.Stripe.List), lookups by id.
func benchWorld(n int) Input {
	w := bench.NewWorld(n, propNow)
	slices.SortFunc(w.Obligations, func(a, b reconcile.Obligation) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(w.Objects, func(a, b reconcile.ProviderObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(w.Keys, func(a, b reconcile.KeyEvidence) int {
		return cmp.Or(cmp.Compare(a.ObjectKind, b.ObjectKind), cmp.Compare(a.Created, b.Created),
			cmp.Compare(a.ObjectID, b.ObjectID), cmp.Compare(a.Key, b.Key))
	})
	slices.SortFunc(w.Lookups, func(a, b reconcile.Lookup) int { return strings.Compare(a.ID, b.ID) })
	return Input{Obligations: w.Obligations, Objects: w.Objects, Keys: w.Keys, Lookups: w.Lookups,
		Listed: w.Listed, EventsFrom: w.EventsFrom}
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
				res = Match(in, propNow, OptionsFrom(config.Default().Matcher))
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
	res := Match(in, propNow, OptionsFrom(config.Default().Matcher))
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
