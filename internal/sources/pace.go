package sources

import (
	"math"
	"sync"

	"golang.org/x/time/rate"
)

// pace is the reader's request rate under its limiter. The account's
// rate limit is shared with whatever else calls Stripe with it (the
// payment workers themselves), so a 429 means someone is short: each one
// halves the pace, down to a sixteenth of the configured rate, and every
// request answered raises it again by a fiftieth, back up to the
// configured rate (additive increase, multiplicative decrease, as TCP
// does). The reader then settles just under what the account has to
// spare instead of spending it on refused requests. An unlimited rate
// stays unlimited: with no pace to start from there is nothing to halve.
type pace struct {
	lim *rate.Limiter

	mu       sync.Mutex
	max, cur float64
}

func newPace(r float64, burst int) *pace {
	if math.IsInf(r, 1) {
		return &pace{lim: rate.NewLimiter(rate.Inf, 1), max: r, cur: r}
	}
	return &pace{lim: rate.NewLimiter(rate.Limit(r), burst), max: r, cur: r}
}

// limited halves the pace after a 429 and returns the new one; changed is
// false when it was already at its floor (or unlimited).
func (p *pace) limited() (now float64, changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := max(p.cur/2, p.max/16)
	if next == p.cur || math.IsInf(p.max, 1) {
		return p.cur, false
	}
	p.cur = next
	p.lim.SetLimit(rate.Limit(next))
	return next, true
}

// answered raises the pace after a request Stripe answered.
func (p *pace) answered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur >= p.max {
		return
	}
	p.cur = min(p.max, p.cur+p.max/50)
	p.lim.SetLimit(rate.Limit(p.cur))
}
