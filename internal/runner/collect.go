package runner

import (
	"runtime"
	"runtime/metrics"
)

// collectAfter is how much the heap may hold beyond what the collector
// last found live before a step's end collects it: a first pass's steps
// each leave hundreds of megabytes that die with the step (the listing's
// pages, the names sent for the obligations, the matcher's indexes),
// while a nightly pass's steps leave a few (docs/design.md, "Memory and
// CPU").
const collectAfter = 64 << 20

// collectIfGrown runs the garbage collector when the heap holds more than
// collectAfter bytes beyond what the collector last found live, and
// reports whether it ran. What it holds beyond counts what was allocated
// since, by this step or any goroutine, and the garbage of the last
// collection not yet swept: right after the collector ran on its own,
// that can start a collection that frees little, at the cost of marking
// what is live.
//
// The collector lets the heap grow to twice what it last found live
// before it runs again. When it last ran in the middle of a step, with
// that step's temporaries live, the next steps allocate on top of them:
// a first pass's heap peaked at the live listing and obligations, plus
// the garbage of reading the obligations, plus all that the match
// allocated. Collected where a step ends, the next one starts from what
// is live.
func collectIfGrown() bool {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return false
	}
	if live, held := s[0].Value.Uint64(), s[1].Value.Uint64(); held <= live || held-live <= collectAfter {
		return false
	}
	runtime.GC()
	return true
}
