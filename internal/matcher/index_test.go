package matcher

import (
	"fmt"
	"testing"
)

// The index finds every id it holds and nothing else, and its fixed hash
// spreads ids that differ in a digit or two: at its load of one half,
// linear probing stays short (the hash is fixed, so this is exact, not a
// chance).
func TestIndexFindsAndSpreads(t *testing.T) {
	for _, format := range []string{"ch_%07d", "refund:%d:approved-request-7", "%d", "pi_3Q%020d"} {
		const n = 200_000
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf(format, i)
		}
		x := newIndex(n)
		key := func(p int32) string { return ids[p] }
		for i, id := range ids {
			if _, added := x.add(id, int32(i), key); !added {
				t.Fatalf("%s: %q added twice", format, id)
			}
		}
		if _, added := x.add(ids[7], 99, key); added {
			t.Errorf("%s: an id already held was added again", format)
		}
		probes := 0
		for i, id := range ids {
			if got := x.find(id, key); got != int32(i) {
				t.Fatalf("%s: find(%q) = %d, want %d", format, id, got, i)
			}
			p, _ := x.hash(id)
			for x.slots[p]&0xffffffff != uint64(i) {
				p = (p + 1) & x.mask
				probes++
			}
		}
		if got := x.find(fmt.Sprintf(format, n+1), key); got != -1 {
			t.Errorf("%s: found an id never added at %d", format, got)
		}
		if mean := float64(probes) / n; mean > 1 {
			t.Errorf("%s: %.2f extra probes per id on average, want at most 1 at load ½", format, mean)
		}
	}
}
