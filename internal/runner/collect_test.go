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
	// A step that allocated more than returnAfter hands what its
	// collection freed back to the system: no more stays resident and
	// free than a step may allocate and keep it.
	leave(returnAfter>>20 + 32)
	c.mark("mirror_save")
	forced(4, "a step that allocated more than returnAfter")
	free := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(free)
	if got := free[0].Value.Uint64(); got > returnAfter/2 {
		t.Errorf("after a step that allocated more than returnAfter, %d MiB stay resident and free, want at most %d",
			got>>20, returnAfter>>21)
	}
	if len(c.phases) != 6 {
		t.Fatalf("phases %v, want small, provider, obligations, match, apply and mirror_save", c.phases)
	}
}
