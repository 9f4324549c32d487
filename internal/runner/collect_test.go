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

// A step's end collects what stands beyond the live heap once it is more
// than collectAfter, and only then, and each step at most once a pass: a
// nightly pass's steps, which leave a few megabytes, pay no collection,
// and a pass over many accounts none at every account's steps. The
// collector runs on its own only when the test says (GOGC and GOMEMLIMIT
// off meanwhile), so that what stands is what the test left.
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
	if len(c.phases) != 4 {
		t.Fatalf("phases %v, want small, provider, obligations and match", c.phases)
	}
}
