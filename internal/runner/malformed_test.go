package runner_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/bench"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store/storetest"
	"reconcile/internal/stripesim"
)

// A charges page answered 200 {} used to read as the end of the charges:
// the pass completed without the duplicate below, and the mirror vouched
// for the stretch. Now the pass fails, reports nothing and records
// nothing but the failed run, from scratch and incrementally; once Stripe
// answers whole pages, the duplicate is found; and a malformed page now
// and then is retried and costs nothing.
func TestMalformedPageFailsThePass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.load(bench.NewWorldWith(200, t0, bench.WorldOptions{}))
	e.pass(true, runner.Request{}) // the mirror, for the incremental pass

	// Two charges created with one obligation's key: a critical duplicate.
	e.clock = t0.Add(time.Hour)
	created := e.clock.Add(-10 * time.Minute)
	money := reconcile.Money{Amount: 4821, Currency: "usd"}
	for i, id := range []string{"ch_dup_1", "ch_dup_2"} {
		e.add("key-dup", reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: money, Status: reconcile.Succeeded,
			Created: reconcile.StampOf(created.Add(time.Duration(i) * time.Second))})
	}
	pgtest.InsertObligations(t, e.pool, reconcile.Obligation{ID: "charge:dup", Kind: reconcile.Charge,
		IdempotencyKey: "key-dup", Money: money, State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created)})

	for _, mirrored := range []bool{false, true} {
		e.srv.SetFaults(stripesim.Faults{Malformed: stripesim.ShapeEmpty, MalformedList: stripesim.ListCharges})
		before := storetest.Take(t, e.pool, reconcile.ObligationTable{})
		out, err := e.runner(mirrored).Run(context.Background(), runner.Request{
			Window: reconcile.Window{From: e.clock.Add(-72 * time.Hour), To: e.clock}, Trigger: reconcile.TriggerManual})
		var le *sources.ListError
		if out != nil || !errors.As(err, &le) || le.List != sources.ListCharges || !strings.Contains(err.Error(), "malformed list page") {
			t.Fatalf("mirror %t: pass completed %t, error %v; want no outcome and a ListError of charges saying the page was malformed",
				mirrored, out != nil, err)
		}
		after := storetest.Take(t, e.pool, reconcile.ObligationTable{})
		runs := after.Tables[`"reconcile"."runs"`]
		if n := len(runs) - len(before.Tables[`"reconcile"."runs"`]); n != 1 ||
			!slices.ContainsFunc(runs, func(r string) bool {
				return strings.Contains(r, ",failed,") && strings.Contains(r, "malformed list page")
			}) {
			t.Errorf("mirror %t: %d new run rows, want one failed run saying why: %v", mirrored, n, runs)
		}
		// Taking the run lock moves its fencing epoch, whatever the pass
		// then does.
		for _, table := range []string{`"reconcile"."runs"`, `"reconcile"."run_lock"`} {
			delete(before.Tables, table)
			delete(after.Tables, table)
		}
		if diff := cmp.Diff(before.Tables, after.Tables); diff != "" {
			t.Errorf("mirror %t: a failed pass wrote beside its run row (-before +after):\n%s", mirrored, diff)
		}
	}

	for _, f := range []stripesim.Faults{
		{Malformed: stripesim.ShapeEmpty, MalformedList: stripesim.ListCharges, MalformedEvery: 2},
		{},
	} {
		e.srv.SetFaults(f)
		e.srv.ResetStats()
		// From scratch: the 72 hours take several pages of charges.
		out := e.pass(false, runner.Request{DryRun: true})
		var dup *reconcile.Finding
		for i, fd := range out.Result.Findings {
			if fd.Kind == reconcile.Duplicate && fd.ObligationID == "charge:dup" {
				dup = &out.Result.Findings[i]
			}
		}
		if dup == nil || !slices.Equal(dup.ProviderIDs, []string{"ch_dup_1", "ch_dup_2"}) {
			t.Errorf("faults %+v: findings %v, want the duplicate of charge:dup", f, out.Result.Findings)
		}
		if f.Malformed != "" && (e.srv.Stats().Malformed == 0 || out.Stats.Retries < e.srv.Stats().Malformed) {
			t.Errorf("faults %+v: %d malformed pages served, %d retries: want some, each retried", f, e.srv.Stats().Malformed, out.Stats.Retries)
		}
	}
}
