package runner

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// collectAfter is how much a step may allocate before its end collects
// the garbage: a first pass's steps each leave hundreds of megabytes
// that die with the step (the listing's pages, the names sent for the
// obligations, the matcher's indexes), while most of a nightly pass's
// steps allocate a few, and the two that pass it collect heaps of tens
// of megabytes (docs/design.md, "Memory and CPU").
const collectAfter = 64 << 20

// returnAbove is how much the heap may hold, live and garbage alike,
// where a step ends before its collection also hands the memory freed
// back to the system: a nightly pass's heap, tens of megabytes, would
// fault the pages in again at once (0.25 s more CPU for a nightly pass
// at a million).
const returnAbove = 256 << 20

// heapAllocs is how many bytes the program has allocated on the heap
// since it began.
func heapAllocs() uint64 { return readUint64("/gc/heap/allocs:bytes") }

// readUint64 reads one of the runtime's metrics of that kind; 0 if this
// runtime has no such metric.
func readUint64(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// collectIfGrown collects the garbage when more than collectAfter bytes
// were allocated since since (heapAllocs where the step began), and
// reports whether it did; when the heap holds more than returnAbove it
// also hands the memory freed back to the system.
//
// The collector lets the heap grow to twice what it last found live
// before it runs again. When it last ran in the middle of a step, with
// that step's temporaries live, the next steps allocate on top of them:
// a first pass's heap peaked at the live listing and obligations, plus
// the garbage of reading the obligations, plus all that the match
// allocated. Collected where a step ends, the next one starts from what
// is live.
//
// What the step allocated is the measure, not what the heap holds beyond
// what the collector last found live: when the collector had run on its
// own near the step's end, it found the step's temporaries still live,
// the heap held little beyond, and they stood uncollected under the next
// step.
//
// From a large heap the memory freed is handed back at once
// (debug.FreeOSMemory) because the next steps' largest arrays cannot
// reuse it: the obligations (216 MB at a million) need contiguous
// pages, while the freed ones lie between live objects and stay
// resident until the runtime's background scavenger returns them,
// slowly. In one first pass at a million, 1,217 MB stood resident over
// an 823 MB heap while the obligations were read. The heap's size is
// the measure, not what the step allocated: a step may allocate little
// and let go of much that an earlier one read. When the obligations
// died in the apply's collection (130 MB allocated; 276 MB of the heap
// at a million, when each took 280 bytes), kept resident they stood
// under the rest of the pass: 279 MB free and resident at its end, its
// highest.
func collectIfGrown(since uint64) bool {
	if heapAllocs()-since <= collectAfter {
		return false
	}
	if readUint64("/memory/classes/heap/objects:bytes") <= returnAbove {
		runtime.GC()
	} else {
		debug.FreeOSMemory()
	}
	return true
}
