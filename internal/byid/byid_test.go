package byid

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// Sort and Order order as slices.Sort does: byte-wise, a prefix before
// what it begins, a zero byte before none at all, beyond the first
// sixteen bytes too, and copies side by side.
func TestSortsAsStringsCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"", "\x00", "a", "b", "\xff", "é"}
	for round := range 500 {
		s := make([]string, rng.IntN(40))
		for i := range s {
			// Long shared heads, so that most ties go past 16 bytes.
			head := []string{"", "ch_", "ch_0123456789abc", "ch_0123456789abcdef"}[rng.IntN(4)]
			for range rng.IntN(4) {
				head += alphabet[rng.IntN(len(alphabet))]
			}
			s[i] = head
		}
		want := slices.Clone(s)
		slices.Sort(want)
		order := Order(len(s), func(i int32) string { return s[i] })
		got := make([]string, len(order))
		for i, k := range order {
			got[i] = s[k.Index]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: Order gave %q, want %q", round, got, want)
		}
		Sort(s)
		if !slices.Equal(s, want) {
			t.Fatalf("round %d: Sort gave %q, want %q", round, s, want)
		}
	}
}

// BenchmarkSort sorts a million Stripe-like ids, against slices.Sort.
//
// Run: go test -run '^$' -bench BenchmarkSort ./internal/byid
func BenchmarkSort(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	ids := make([]string, 1_000_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("ch_3%s%07d", strconv.FormatUint(rng.Uint64()%(1<<40), 36), i)
	}
	// Their bytes lie far from their neighbours', as a listing's ids lie
	// among its objects.
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, c := range []struct {
		name string
		sort func([]string)
	}{{"byid", Sort}, {"slices", slices.Sort[[]string]}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := slices.Clone(ids)
				b.StartTimer()
				c.sort(s)
			}
		})
	}
}
