package runner

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// sink keeps an allocation from being optimised away.
var sink []byte

// forcedCycles is how many collections were forced so far.
func forcedCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// leave allocates mib MiB that die at once.
func leave(mib int) {
	for range mib {
		sink = make([]byte, 1<<20)
	}
	sink = nil
}

// A step's end collects once the step allocated more than collectAfter,
// and only then, and each step at most once a pass: a step that
// allocated a few megabytes pays no collection, and a pass over many
// accounts none at every account's steps. The collector runs on its own
// only when the test says (GOGC and GOMEMLIMIT off meanwhile), so that
// what stands is what the test left.
func TestMarkCollectsWhatAStepLeft(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	c := &phaseClock{}
	c.start(time.Now)
	runtime.GC()
	before := forcedCycles()
	forced := func(want uint64, after string) {
		t.Helper()
		if got := forcedCycles() - before; got != want {
			t.Fatalf("after %s: %d collections forced, want %d", after, got, want)
		}
	}
	leave(4)
	c.mark("small")
	forced(0, "a step that left 4 MiB")
	leave(collectAfter>>20 + 32)
	c.mark("provider")
	forced(1, "a step that left collectAfter and more")
	c.mark("obligations")
	forced(1, "a step right after a collection")
	leave(collectAfter>>20 + 32)
	c.mark("provider")
	forced(1, "the second account's step of one name")
	c.mark("match")
	forced(2, "another step")
	// The collector ran on its own near the step's end, while the
	// step's temporaries were live: it found them live, and they die
	// after it.
	temps := make([][]byte, 0, collectAfter>>20+32)
	for range cap(temps) {
		temps = append(temps, make([]byte, 1<<20))
	}
	runtime.GC()
	before++
	temps = nil
	c.mark("apply")
	forced(3, "a step whose temporaries outlived the collector's own run")
	// Where a step ends on a heap of more than returnAbove, what its
	// collection freed goes back to the system, though the step itself
	// allocated little: there, what died was read before it (the
	// matcher lets the obligations go). The collector runs at its
	// default pace, as in a pass, so that the runtime's scavenger keeps
	// what a heap of this size may grow into.
	debug.SetGCPercent(100)
	hold := func(mib int) [][]byte {
		b := make([][]byte, 0, mib)
		for range mib {
			b = append(b, make([]byte, 1<<20))
		}
		return b
	}
	live, read := hold(returnAbove>>21+32), hold(returnAbove>>21)
	c.mark("mirror_save")
	forced(4, "a step that read what the next lets go")
	clear(read)
	leave(collectAfter>>20 + 32)
	c.mark("alerts")
	forced(5, "a step that let go what the step before read")
	if free := readUint64("/memory/classes/heap/free:bytes"); free > returnAbove/4 {
		t.Errorf("after a step that ended on a heap of more than returnAbove, %d MiB stay resident and free, want at most %d",
			free>>20, returnAbove>>22)
	}
	runtime.KeepAlive(live)
	if len(c.phases) != 7 {
		t.Fatalf("phases %v, want small, provider, obligations, match, apply, mirror_save and alerts", c.phases)
	}
}

// midStep collects by the rule of a step's end, once a pass for each
// name, and ends no step.
func TestMidStepCollectsWithoutEndingAStep(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	c := &phaseClock{}
	c.start(time.Now)
	before := forcedCycles()
	c.midStep("match_rules")
	leave(collectAfter>>20 + 32)
	c.midStep("match_rules")
	leave(collectAfter>>20 + 32)
	c.midStep("match_rules")
	if got := forcedCycles() - before; got != 1 {
		t.Errorf("%d collections forced, want 1: none before the step allocated, and one a pass", got)
	}
	if len(c.phases) != 0 {
		t.Errorf("phases %v, want none", c.phases)
	}
}
