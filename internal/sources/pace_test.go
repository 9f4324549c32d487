package sources

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"reconcile/internal/stripesim"
)

// A 429 halves the pace, once per overload, down to a sixteenth; answers
// raise it by a fiftieth of the configured rate per second's worth of
// answers, never above it.
func TestPaceHalvesAndRecovers(t *testing.T) {
	p := newPace(25, 1)
	at := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	for _, want := range []float64{12.5, 6.25, 3.125, 1.5625} {
		at = at.Add(time.Second)
		if got, changed := p.limited(at, at); got != want || !changed || p.lim.Limit() != rate.Limit(want) {
			t.Fatalf("after a 429: pace %v (changed %t), limiter %v; want %v", got, changed, p.lim.Limit(), want)
		}
	}
	if got, changed := p.limited(at.Add(time.Second), at.Add(time.Second)); got != 25.0/16 || changed {
		t.Errorf("at the floor: pace %v, changed %t; want it to stay at %v", got, changed, 25.0/16)
	}

	q := newPace(25, 1)
	q.limited(at, at)
	if got, changed := q.limited(at.Add(-time.Millisecond), at.Add(time.Millisecond)); got != 12.5 || changed {
		t.Errorf("a 429 to a request sent before the cut: pace %v, changed %t; want 12.5, unchanged", got, changed)
	}

	// At the floor, a second's worth of answers (about 1.6) adds about
	// 25/50 = 0.5.
	for range 2 {
		p.answered()
	}
	if p.cur < 25.0/16+0.5 || p.cur > 25.0/16+0.7 {
		t.Errorf("after a second's answers at the floor: pace %v, want about %v", p.cur, 25.0/16+0.5)
	}
	for range 10_000 {
		p.answered()
	}
	if p.cur != 25 || p.lim.Limit() != 25 {
		t.Errorf("after many answers: pace %v, limiter %v; want back at 25", p.cur, p.lim.Limit())
	}

	unlimited := newPace(math.Inf(1), 1)
	if _, changed := unlimited.limited(at, at); changed || unlimited.lim.Limit() != rate.Inf {
		t.Errorf("an unlimited pace changed after a 429 (limiter %v)", unlimited.lim.Limit())
	}
}

// A reader paced at ten times what the account has to spare (the rest
// goes to the payment workers) slows down instead of spending the limit on
// refused requests, and still reads everything.
func TestReaderYieldsToASharedLimit(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 3000)
	// Well under what the reader asks for, even on a loaded machine.
	e.srv.SetFaults(stripesim.Faults{RateLimit: 15, RateBurst: 2})
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
