package sim

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"reconcile/internal/pgtest"
	"reconcile/internal/store"
)

var (
	flagSeed  = flag.Uint64("sim.seed", 0, "replay this one seed, printing its history (with -v)")
	flagFirst = flag.Uint64("sim.first", 1, "the first seed of a run of SIM_SEEDS seeds")
)

// defaultSeeds is how many seeds go test runs; SIM_SEEDS=N runs N.
const defaultSeeds = 500

// newEnv is a database of its own for one worker of the simulation.
func newEnv(tb testing.TB) *Env {
	tb.Helper()
	_, url := pgtest.NewMigrated(tb, store.SchemaDigest(), store.Migrate)
	env, err := NewEnv(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(env.Close)
	return env
}

func replayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run 'TestSim$' -sim.seed=%d -v", seed)
}

// TestSim runs SIM_SEEDS seeded histories (500 by default) and fails with
// a replay command for each seed that broke an invariant. With -sim.seed
// it replays one seed and prints its history.
func TestSim(t *testing.T) {
	if *flagSeed != 0 {
		env := newEnv(t)
		var trace *os.File
		if testing.Verbose() {
			trace = os.Stdout
		}
		rep, err := Run(t.Context(), env, Options{Seed: *flagSeed, Trace: traceWriter(trace)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %d steps, %d passes, digest %s\n%s", rep.Seed, rep.Steps, rep.Passes, rep.Digest, rep.Coverage)
		for _, v := range rep.Violations {
			t.Errorf("%s", v)
		}
		return
	}
	n := defaultSeeds
	if s := os.Getenv("SIM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("SIM_SEEDS=%q: want a positive number", s)
		}
		n = v
	}
	workers := 6
	if s := os.Getenv("SIM_WORKERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("SIM_WORKERS=%q: want a positive number", s)
		}
		workers = v
	}
	envs := make([]*Env, workers)
	for i := range envs {
		envs[i] = newEnv(t)
	}
	seeds := make(chan uint64)
	go func() {
		defer close(seeds)
		for i := range uint64(n) {
			seeds <- *flagFirst + i
		}
	}()
	var (
		mu       sync.Mutex
		failed   []*Report
		cov      = newCoverage()
		steps    int
		passes   int
		limited  int
		byInv    = map[string]int{}
		known    = map[string]int{}
		stats    = map[string]int{}
		infraErr error
	)
	start := time.Now()
	var wg sync.WaitGroup
	for _, env := range envs {
		wg.Go(func() {
			for seed := range seeds {
				rep, err := Run(t.Context(), env, Options{Seed: seed})
				mu.Lock()
				if err != nil && infraErr == nil {
					infraErr = fmt.Errorf("seed %d: %w", seed, err)
				}
				if rep != nil {
					cov.Merge(rep.Coverage)
					steps += rep.Steps
					passes += rep.Passes
					limited += rep.Unlinkable
					if len(rep.Violations) > 0 {
						failed = append(failed, rep)
					}
					for _, v := range rep.Violations {
						byInv[v.Invariant]++
					}
					for k, c := range rep.Known {
						known[k] += c
					}
					for k, c := range rep.Stats {
						stats[k] += c
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if infraErr != nil {
		t.Fatal(infraErr)
	}
	t.Logf("%d seeds, %d steps, %d passes in %s; %d seeds with violations %v; known deviations %v; %d PAID while money also moved under a key nothing ties to the obligation",
		n, steps, passes, time.Since(start).Round(time.Millisecond), len(failed), byInv, known, limited)
	t.Logf("pass statistics: %v", stats)
	t.Logf("coverage (passes in which the fault fired with an obligation of the state in scope; least cell %d):\n%s", cov.Min(), cov)
	// A simulation whose faults stopped firing would pass every seed and
	// prove nothing: each fault must fire in a default run, and at 10,000
	// seeds every cell of the table must reach 100.
	if n >= defaultSeeds {
		for _, f := range append(slices.Clone(FaultKinds), JobFaultKinds...) {
			fired := 0
			for _, c := range cov[f] {
				fired += c
			}
			if fired == 0 {
				t.Errorf("fault %s never fired in %d seeds", f, n)
			}
		}
	}
	if least := cov.Min(); n >= 10_000 && least < 100 {
		t.Errorf("least coverage cell %d at %d seeds, want at least 100", least, n)
	}
	slices.SortFunc(failed, func(a, b *Report) int { return int(a.Seed) - int(b.Seed) })
	for i, rep := range failed {
		if i == 20 {
			t.Errorf("… and %d more failing seeds", len(failed)-20)
			break
		}
		var b strings.Builder
		for j, v := range rep.Violations {
			if j == 5 {
				fmt.Fprintf(&b, "\n  … %d more", len(rep.Violations)-5)
				break
			}
			fmt.Fprintf(&b, "\n  %s", v)
		}
		t.Errorf("seed %d broke %d invariant(s):%s\n  replay: %s", rep.Seed, len(rep.Violations), b.String(), replayCommand(rep.Seed))
	}
}

func traceWriter(f *os.File) interface{ Write([]byte) (int, error) } {
	if f == nil {
		return nil
	}
	return f
}

// TestSimReplay runs seeds twice: a seed must replay the same history,
// decisions, deliveries and violations included.
func TestSimReplay(t *testing.T) {
	env := newEnv(t)
	for seed := range uint64(3) {
		seed += 1000
		a, err := Run(t.Context(), env, Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(t.Context(), env, Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if a.Digest != b.Digest {
			for i := range min(len(a.Trace), len(b.Trace)) {
				if a.Trace[i] != b.Trace[i] {
					t.Errorf("seed %d replays differently from line %d:\n first: %s\nsecond: %s", seed, i, a.Trace[i], b.Trace[i])
					break
				}
			}
			if len(a.Trace) != len(b.Trace) {
				t.Errorf("seed %d: %d trace lines, then %d", seed, len(a.Trace), len(b.Trace))
			}
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
