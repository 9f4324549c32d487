package runner

import (
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

// A step's end collects what the step left once it is more than
// collectAfter, and only then: a nightly pass's steps, which leave a few
// megabytes, pay no collection. Not parallel: no other test allocates
// meanwhile.
func TestMarkCollectsWhatAStepLeft(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// What the pass holds: with it live, the collector lets the heap grow
	// past it by as much again before it runs on its own.
	held := make([]byte, 2*collectAfter)
	defer runtime.KeepAlive(held)
	c := &phaseClock{}
	c.start(time.Now)
	runtime.GC()
	before := forcedCycles()
	sink = make([]byte, 4<<20)
	sink = nil
	c.mark("small")
	if got := forcedCycles() - before; got != 0 {
		t.Fatalf("a step that left 4 MiB forced %d collections, want none", got)
	}
	for range (collectAfter >> 20) + 32 {
		sink = make([]byte, 1<<20)
	}
	sink = nil
	c.mark("large")
	if got := forcedCycles() - before; got != 1 {
		t.Fatalf("a step that left %d MiB forced %d collections, want one", collectAfter>>20+32, got)
	}
	c.mark("after")
	if got := forcedCycles() - before; got != 1 {
		t.Fatalf("a step right after a collection forced %d more", got-1)
	}
	if len(c.phases) != 3 {
		t.Fatalf("phases %v, want small, large and after", c.phases)
	}
}
