package sim

import (
	"sync"
	"time"
)

// epoch is where every history starts. Whole seconds, as Stripe's created.
var epoch = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

// clock is the virtual clock of one history. Nothing in a history reads
// the real clock for a decision: the runner, the matcher, the store and
// the Slack deliverer all get Now from here, and the clock moves only
// when the history says so, in whole seconds.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: epoch} }

// Now returns the virtual time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d, rounded down to whole seconds.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d.Truncate(time.Second))
}
