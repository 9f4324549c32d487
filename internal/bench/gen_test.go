package bench

import (
	"strings"
	"testing"
	"time"

	"reconcile"
)

// FindingsEvery spaces out the records that make findings, and only
// those: a World with them ten times sparser holds a tenth of the
// duplicates, orphans, twins, absent charges, stale leases and unresolved
// unknowns, and the same clean business.
func TestWorldFindingsEvery(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	type counts struct{ dup, orphan, twin, lookups, stale, unknown, obligations int }
	count := func(w World) counts {
		var c counts
		keyed := map[string]bool{}
		for _, k := range w.Keys {
			keyed[k.Key] = true
		}
		for _, o := range w.Objects {
			switch {
			case strings.HasPrefix(o.ID, "ch_dup"):
				c.dup++
			case strings.HasPrefix(o.ID, "ch_orphan"):
				c.orphan++
			case strings.HasPrefix(o.ID, "ch_twin"):
				c.twin++
			}
		}
		for _, o := range w.Obligations {
			switch {
			case o.State == reconcile.Executing && o.LeaseExpiresAt.IsZero():
				c.stale++
			case o.State == reconcile.ConfirmationUnknown && !keyed[o.IdempotencyKey]:
				c.unknown++
			}
		}
		c.lookups, c.obligations = len(w.Lookups), len(w.Obligations)
		return c
	}
	const n = 40_000
	dense, spaced := count(NewWorld(n, now)), count(NewWorldWith(n, now, WorldOptions{FindingsEvery: 10_000}))
	if want := (counts{40, 40, 40, 40, 40, 40, n}); dense != want {
		t.Errorf("default World: %+v, want %+v", dense, want)
	}
	if want := (counts{4, 4, 4, 4, 4, 4, n}); spaced != want {
		t.Errorf("findings every 10,000: %+v, want %+v", spaced, want)
	}
	defer func() {
		if recover() == nil {
			t.Error("FindingsEvery 1500 was taken; want a panic (the kinds' places need a multiple of 1000)")
		}
	}()
	NewWorldWith(10, now, WorldOptions{FindingsEvery: 1500})
}
