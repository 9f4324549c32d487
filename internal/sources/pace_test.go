package sources

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"reconcile/internal/stripetest"
)

// Each 429 halves the pace down to a sixteenth; answers raise it by a
// fiftieth of the configured rate, never above it.
func TestPaceHalvesAndRecovers(t *testing.T) {
	p := newPace(25, 1)
	for _, want := range []float64{12.5, 6.25, 3.125, 1.5625} {
		if got, changed := p.limited(); got != want || !changed || p.lim.Limit() != rate.Limit(want) {
			t.Fatalf("after a 429: pace %v (changed %t), limiter %v; want %v", got, changed, p.lim.Limit(), want)
		}
	}
	if got, changed := p.limited(); got != 25.0/16 || changed {
		t.Errorf("at the floor: pace %v, changed %t; want it to stay at %v", got, changed, 25.0/16)
	}
	p.answered()
	if want := 25.0/16 + 0.5; p.cur != want || p.lim.Limit() != rate.Limit(want) {
		t.Errorf("after one answer: pace %v, limiter %v; want %v", p.cur, p.lim.Limit(), want)
	}
	for range 100 {
		p.answered()
	}
	if p.cur != 25 || p.lim.Limit() != 25 {
		t.Errorf("after many answers: pace %v, limiter %v; want back at 25", p.cur, p.lim.Limit())
	}

	unlimited := newPace(math.Inf(1), 1)
	if _, changed := unlimited.limited(); changed || unlimited.lim.Limit() != rate.Inf {
		t.Errorf("an unlimited pace changed after a 429 (limiter %v)", unlimited.lim.Limit())
	}
}

// A reader paced at four times what the account has to spare (the rest
// goes to the payment workers) slows down instead of spending the limit on
// refused requests, and still reads everything.
func TestReaderYieldsToASharedLimit(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 3000)
	e.srv.SetFaults(stripetest.Faults{RateLimit: 40, RateBurst: 4})
	r := e.reader(t, func(o *StripeOptions) {
		o.Rate, o.Burst, o.Concurrency, o.SliceMin, o.MaxRetries = 160, 1, 4, time.Minute, 20
	})
	l, err := r.List(t.Context(), window)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, l, d)
	st := e.srv.Stats()
	if st.RateLimited == 0 || l.Stats.RateLimited != st.RateLimited {
		t.Fatalf("server refused %d requests, the reader counted %d; want some, all counted", st.RateLimited, l.Stats.RateLimited)
	}
	// Unpaced by 429s the reader would have four requests refused for
	// every one answered.
	if share := float64(l.Stats.RateLimited) / float64(l.Stats.Requests); share > 0.25 {
		t.Errorf("%d of %d requests refused (%.0f%%); want the reader to slow down to under a quarter",
			l.Stats.RateLimited, l.Stats.Requests, 100*share)
	}
	t.Logf("%d requests, %d refused", l.Stats.Requests, l.Stats.RateLimited)
}
