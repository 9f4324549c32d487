package sources

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// pace is the reader's request rate under its limiter. The account's
// rate limit is shared with whatever else calls Stripe with it (the
// payment workers themselves), so a 429 means someone is short. As TCP
// does (additive increase, multiplicative decrease): a 429 halves the
// pace, down to a sixteenth of the configured rate, once per overload
// (429s to requests sent before the last cut are the same overload), and
// answered requests raise it by a fiftieth of the configured rate each
// second, back up to it. The reader then settles just under what the
// account has to spare instead of spending it on refused requests. An
// unlimited rate stays unlimited: with no pace there is nothing to halve.
type pace struct {
	lim *rate.Limiter

	mu       sync.Mutex
	max, cur float64
	cut      time.Time // when the pace was last halved
}

func newPace(r float64, burst int) *pace {
	if math.IsInf(r, 1) {
		return &pace{lim: rate.NewLimiter(rate.Inf, 1), max: r, cur: r}
	}
	return &pace{lim: rate.NewLimiter(rate.Limit(r), burst), max: r, cur: r}
}

// limited takes a 429 to a request sent at sent, at now. It halves the
// pace unless the request went out before the last cut, and returns the
// pace; changed is false when it stayed (at its floor, or unlimited).
func (p *pace) limited(sent, now time.Time) (pace float64, changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := max(p.cur/2, p.max/16)
	if next == p.cur || sent.Before(p.cut) {
		return p.cur, false
	}
	p.cur, p.cut = next, now
	p.lim.SetLimit(rate.Limit(next))
	return next, true
}

// answered raises the pace after a request Stripe answered: by
// max/50/cur, which at cur answers a second is max/50 a second.
func (p *pace) answered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur >= p.max {
		return
	}
	p.cur = min(p.max, p.cur+p.max/50/p.cur)
	p.lim.SetLimit(rate.Limit(p.cur))
}
