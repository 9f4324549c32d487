package runner_test

import (
	"context"
	"testing"
	"time"

	"reconcile"

	"reconcile/internal/runner"
	"reconcile/internal/stripesim"
)

// A run's row keeps the retries and 429s of its reading of Stripe, for a
// completed pass, for one that failed after reading and for one that
// failed while reading (serve's /metrics shows the last run's).
func TestRunKeepsStripeStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.srv.SetFaults(stripesim.Faults{RateLimitEvery: 2})
	out := e.pass(false, runner.Request{})
	if out.Stats.RateLimited == 0 {
		t.Fatalf("the pass met no 429 (stats %+v); the test proves nothing", out.Stats)
	}
	runs, err := e.store.LastRuns(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := reconcile.StripeStats{Retries: out.Stats.Retries, RateLimited: out.Stats.RateLimited}
	if len(runs) != 1 || runs[0].Stripe == nil || *runs[0].Stripe != want {
		t.Errorf("completed run row keeps %+v, want %+v", runs[0].Stripe, want)
	}

	e.clock = e.clock.Add(time.Hour)
	r := e.runner(false)
	r.Store = failingApply{e.store}
	if _, err := r.Run(context.Background(), runner.Request{Window: reconcile.Window{From: e.clock.Add(-72 * time.Hour), To: e.clock},
		Trigger: reconcile.TriggerManual}); err == nil {
		t.Fatal("Run with a failing apply succeeded")
	}
	runs, err = e.store.LastRuns(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Status != reconcile.RunFailed || runs[0].Stripe == nil || runs[0].Stripe.RateLimited == 0 {
		t.Errorf("failed run row %+v keeps Stripe figures %+v, want its 429s", runs, runs[0].Stripe)
	}

	// A pass whose listing fails midway keeps what it met on the way.
	e.clock = e.clock.Add(time.Hour)
	e.srv.SetFaults(stripesim.Faults{RateLimitEvery: 2, FailList: "refunds", FailListAfter: 1})
	if _, err := e.runner(false).Run(context.Background(), runner.Request{Window: reconcile.Window{From: e.clock.Add(-72 * time.Hour), To: e.clock},
		Trigger: reconcile.TriggerManual, Full: true}); err == nil {
		t.Fatal("Run with a failing list succeeded")
	}
	runs, err = e.store.LastRuns(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Status != reconcile.RunFailed || runs[0].Stripe == nil || runs[0].Stripe.RateLimited == 0 || runs[0].Stripe.Retries == 0 {
		t.Errorf("run failed while reading: row %+v keeps Stripe figures %+v, want its 429s and retries", runs, runs[0].Stripe)
	}
}
