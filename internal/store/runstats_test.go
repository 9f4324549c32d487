package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
)

// A run's Stripe figures are kept with its row, completed or failed, and a
// run recorded without them reads back as unknown (nil), not as zero.
func TestRunStripeStats(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	done := testRun("run-a", now.Add(-2*time.Hour))
	done.Stripe = &reconcile.StripeStats{Retries: 7, RateLimited: 3}
	if _, err := e.s.Apply(t.Context(), done, resultOf(nil, nil), now); err != nil {
		t.Fatal(err)
	}
	failed := testRun("run-b", now.Add(-time.Hour))
	failed.Status = reconcile.RunFailed
	failed.Stripe = &reconcile.StripeStats{Retries: 9, RateLimited: 9}
	if err := e.s.RecordFailedRun(t.Context(), failed, "list stripe charges: 429 after 9 attempts"); err != nil {
		t.Fatal(err)
	}
	old := testRun("run-c", now)
	if _, err := e.s.Apply(t.Context(), old, resultOf(nil, nil), now); err != nil {
		t.Fatal(err)
	}
	runs, err := e.s.LastRuns(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*reconcile.StripeStats{}
	for _, r := range runs {
		got[r.ID] = r.Stripe
	}
	want := map[string]*reconcile.StripeStats{"run-a": done.Stripe, "run-b": failed.Stripe, "run-c": nil}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stripe figures read back (-want +got):\n%s", diff)
	}
}
