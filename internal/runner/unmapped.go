package runner

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"reconcile"
)

// unmappedStates counts the obligations whose state the configuration
// does not map (CANCELLED, or "CONFIRMATION_UNKNOWN " with a stray blank),
// by their raw value, and warns once per value. Such a row is never
// transitioned and no rule of the matcher reads its state, so without the
// warning it would sit unnoticed, whatever its money did. The value is
// logged through %q so that blanks and odd bytes show. nil when there are
// none.
func unmappedStates(log *slog.Logger, obs []reconcile.Obligation) map[string]int {
	var counts map[string]int
	for _, o := range obs {
		if o.State.Known() {
			continue
		}
		if counts == nil {
			counts = map[string]int{}
		}
		counts[o.RawState]++
	}
	warnUnmapped(log, counts)
	return counts
}

// warnUnmapped warns once per unmapped raw state value.
func warnUnmapped(log *slog.Logger, counts map[string]int) {
	for _, raw := range slices.Sorted(maps.Keys(counts)) {
		log.Warn("obligations in a state that obligations.states does not map: never transitioned; map it or fix the rows",
			"state", fmt.Sprintf("%q", raw), "count", counts[raw])
	}
}
