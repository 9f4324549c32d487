package runner_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
)

// doubleRefund puts the story on e: a refund obligation left
// CONFIRMATION_UNKNOWN (or, with state, anything else) five days before
// e's clock, whose first refund happened then under its own key, and whose
// retry happened an hour ago under a fresh key, naming the obligation in
// its metadata.
func doubleRefund(e *env, state reconcile.State) {
	e.tb.Helper()
	usd := func(n int64) reconcile.Money { return reconcile.Money{Amount: n, Currency: "usd"} }
	created := e.clock.Add(-5 * 24 * time.Hour)
	charge := reconcile.ProviderObject{ID: "ch_7", Kind: reconcile.Charge, Money: usd(8900), Status: reconcile.Succeeded,
		Created: reconcile.StampOf(created.Add(-24 * time.Hour)), Customer: "cus_7"}
	first := reconcile.ProviderObject{ID: "re_7a", Kind: reconcile.Refund, Money: usd(8900), Status: reconcile.Succeeded,
		Target: "ch_7", Charge: "ch_7", Created: reconcile.StampOf(created.Add(time.Minute))}
	retry := reconcile.ProviderObject{ID: "re_7b", Kind: reconcile.Refund, Money: usd(8900), Status: reconcile.Succeeded,
		Target: "ch_7", Charge: "ch_7", Created: reconcile.StampOf(e.clock.Add(-time.Hour)), Metadata: map[string]string{"obligation_id": "refund:7"}}
	e.add("key-charge-7", charge)
	e.add("key-refund-7", first)
	e.add("", retry)
	refund := reconcile.Obligation{ID: "refund:7", Kind: reconcile.Refund, IdempotencyKey: "key-refund-7", TargetID: "ch_7",
		Money: usd(8900), State: state, CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)}
	if state == reconcile.Paid {
		refund.ProviderID, refund.PaidAt = "re_7a", reconcile.StampOf(created.Add(time.Minute))
	}
	pgtest.InsertObligations(e.tb, e.pool,
		reconcile.Obligation{ID: "charge:7", Kind: reconcile.Charge, IdempotencyKey: "key-charge-7", ProviderID: "ch_7",
			Money: usd(8900), State: reconcile.Paid, CreatedAt: reconcile.StampOf(charge.Created.Time()), UpdatedAt: reconcile.StampOf(charge.Created.Time()), PaidAt: reconcile.StampOf(charge.Created.Time())},
		refund)
}

func kinds(out *runner.Outcome, obligation string) []reconcile.FindingKind {
	var ks []reconcile.FindingKind
	for _, f := range out.Result.Findings {
		if f.ObligationID == obligation {
			ks = append(ks, f.Kind)
		}
	}
	return ks
}

// A narrow window decides as the whole history does: the double refund of
// an obligation older than the window is a duplicate whatever --since
// says, and nothing is marked PAID, with or without the mirror, whether
// the obligation waits for confirmation or was already marked paid (then
// only the retry, in the window, names it).
func TestNarrowWindowSeesTheWholeLife(t *testing.T) {
	t.Parallel()
	for _, state := range []reconcile.State{reconcile.ConfirmationUnknown, reconcile.Paid} {
		for _, since := range []time.Duration{6 * time.Hour, 24 * time.Hour, 72 * time.Hour, 30 * 24 * time.Hour} {
			for _, mirrored := range []bool{false, true} {
				name := string(state) + "/" + since.String()
				if mirrored {
					name += "/mirrored"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					e := newEnv(t)
					doubleRefund(e, state)
					if mirrored {
						// Earlier nights read what they could; the mirror
						// then holds the first refund.
						e.clock = e.clock.Add(-24 * time.Hour)
						e.pass(true, runner.Request{DryRun: false})
						e.clock = e.clock.Add(24 * time.Hour)
					}
					w := reconcile.Window{From: e.clock.Add(-since), To: e.clock}
					for _, dry := range []bool{true, false} {
						out := e.pass(mirrored, runner.Request{Window: w, DryRun: dry})
						if got := kinds(out, "refund:7"); !slices.Equal(got, []reconcile.FindingKind{reconcile.Duplicate}) {
							t.Errorf("dry %t: findings of refund:7 = %v, want [duplicate]: %v", dry, got, out.Result.Findings)
						}
						if len(out.Transitions) != 0 {
							t.Errorf("dry %t: transitions %v, want none", dry, out.Transitions)
						}
						if !out.Covered.From.Before(e.clock.Add(-5 * 24 * time.Hour)) {
							t.Errorf("dry %t: covered from %s, after the obligation's creation", dry, out.Covered.From)
						}
						for _, f := range out.Result.Findings {
							if strings.Contains(f.Detail, "shows nothing") {
								t.Errorf("dry %t: %s says %q", dry, f.Kind, f.Detail)
							}
						}
					}
				})
			}
		}
	}
}

// An obligation older than max_lookback is not marked PAID on the part of
// its life that was read: it stays unresolved, and the finding says which
// records were not read and how far max_lookback must reach.
func TestOlderThanMaxLookbackIsNotPaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	usd := reconcile.Money{Amount: 1000, Currency: "usd"}
	created := e.clock.Add(-10 * 24 * time.Hour)
	e.add("key-old", reconcile.ProviderObject{ID: "ch_old", Kind: reconcile.Charge, Money: usd, Status: reconcile.Succeeded,
		Created: reconcile.StampOf(created.Add(time.Minute))})
	pgtest.InsertObligations(t, e.pool, reconcile.Obligation{ID: "charge:old", Kind: reconcile.Charge, IdempotencyKey: "key-old",
		ProviderID: "ch_old", Money: usd, State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)})

	run := func(maxLookback time.Duration) *runner.Outcome {
		t.Helper()
		r := e.runner(false)
		r.MaxLookback = maxLookback
		out, err := r.Run(t.Context(), runner.Request{Window: reconcile.Window{From: e.clock.Add(-72 * time.Hour), To: e.clock},
			Trigger: reconcile.TriggerManual})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := run(7 * 24 * time.Hour)
	if len(out.Transitions) != 0 {
		t.Fatalf("transitions %v, want none: the records before the max lookback were not read", out.Transitions)
	}
	if want := e.clock.Add(-7 * 24 * time.Hour); !out.Covered.From.Equal(want) {
		t.Errorf("covered from %s, want the max lookback's %s", out.Covered.From, want)
	}
	if out.Partial != 1 {
		t.Errorf("partial = %d, want 1", out.Partial)
	}
	if out.ObligationsRead != 1 || out.Input.Obligations != nil {
		t.Errorf("the pass read %d obligations and holds %d after it, want 1 read and none held: it lets them go once matched",
			out.ObligationsRead, len(out.Input.Obligations))
	}
	var f *reconcile.Finding
	for i := range out.Result.Findings {
		if out.Result.Findings[i].ObligationID == "charge:old" {
			f = &out.Result.Findings[i]
		}
	}
	if f == nil || f.Kind != reconcile.UnresolvedUnknown {
		t.Fatalf("findings %v, want unresolved_unknown for charge:old", out.Result.Findings)
	}
	for _, want := range []string{"ch_old", "were not read", "max_lookback of at least 312h"} {
		if !strings.Contains(f.Detail, want) {
			t.Errorf("detail %q does not say %q", f.Detail, want)
		}
	}
	// Read as far back as the detail says, the same obligation is marked PAID.
	if out = run(312 * time.Hour); len(out.Transitions) != 1 || out.Transitions[0].ObligationID != "charge:old" {
		t.Errorf("with a 312h max lookback: transitions %v, want charge:old marked PAID", out.Transitions)
	}
}

// A refund read only as evidence before the window may also name another
// obligation, which the pass reads only to see the conflict: the
// obligation it decides on is not marked PAID on a refund that another
// obligation claims, and nothing is said about the other.
func TestEvidenceNamesAnotherObligation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	usd := reconcile.Money{Amount: 500, Currency: "usd"}
	created := e.clock.Add(-4 * 24 * time.Hour)
	e.add("key-ch", reconcile.ProviderObject{ID: "ch_9", Kind: reconcile.Charge, Money: usd, Status: reconcile.Succeeded,
		Created: reconcile.StampOf(created.Add(-time.Hour))})
	e.add("key-a", reconcile.ProviderObject{ID: "re_9", Kind: reconcile.Refund, Money: usd, Status: reconcile.Succeeded,
		Target: "ch_9", Charge: "ch_9", Created: reconcile.StampOf(created.Add(time.Minute)), Metadata: map[string]string{"obligation_id": "refund:b"}})
	pgtest.InsertObligations(t, e.pool,
		reconcile.Obligation{ID: "refund:a", Kind: reconcile.Refund, IdempotencyKey: "key-a", TargetID: "ch_9",
			Money: usd, State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)},
		reconcile.Obligation{ID: "refund:b", Kind: reconcile.Refund, IdempotencyKey: "key-b", TargetID: "ch_9",
			Money: usd, State: reconcile.Paid, CreatedAt: reconcile.StampOf(created.Add(-time.Hour)), UpdatedAt: reconcile.StampOf(created.Add(-time.Hour))})

	out := e.pass(false, runner.Request{Window: reconcile.Window{From: e.clock.Add(-24 * time.Hour), To: e.clock}, DryRun: true})
	if len(out.Transitions) != 0 {
		t.Errorf("transitions %v, want none: re_9 is claimed twice", out.Transitions)
	}
	if got := kinds(out, "refund:a"); !slices.Equal(got, []reconcile.FindingKind{reconcile.ConflictingLink}) {
		t.Errorf("findings of refund:a = %v, want [conflicting_link]", got)
	}
	if got := kinds(out, "refund:b"); len(got) != 0 {
		t.Errorf("findings of refund:b = %v, want none: the pass does not decide on it", got)
	}
	if slices.Contains(out.Result.ObligationIDs, "refund:b") || out.Context != 1 {
		t.Errorf("decided on %v with %d read to link; want refund:b read only to link", out.Result.ObligationIDs, out.Context)
	}
}

// The stretch an incremental pass lists before the mirror's joins the
// mirror, idempotency keys included: the next pass reads it from there,
// and decides what rests on it (a worker's expired lease, proved paid by
// the charge its key made).
func TestOlderStretchJoinsTheMirror(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	usd := reconcile.Money{Amount: 4200, Currency: "usd"}
	start := e.clock
	e.pass(true, runner.Request{Window: reconcile.Window{From: start.Add(-24 * time.Hour), To: start}})

	// An obligation from five days back, which no pass has read so far,
	// executing under a lease until 90 minutes after start.
	created := start.Add(-5 * 24 * time.Hour)
	e.add("key-5d", reconcile.ProviderObject{ID: "ch_5d", Kind: reconcile.Charge, Money: usd, Status: reconcile.Succeeded,
		Created: reconcile.StampOf(created.Add(time.Minute))})
	pgtest.InsertObligations(t, e.pool, reconcile.Obligation{ID: "charge:5d", Kind: reconcile.Charge, IdempotencyKey: "key-5d",
		Money: usd, State: reconcile.Executing, LeaseOwner: "w", LeaseExpiresAt: reconcile.StampOf(start.Add(90 * time.Minute)),
		CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)})

	e.clock = start.Add(time.Hour)
	second := e.pass(true, runner.Request{Window: reconcile.Window{From: e.clock.Add(-24 * time.Hour), To: e.clock}})
	if second.Sync.Mode != runner.SyncIncremental || !second.Sync.Older.Valid() || len(second.Transitions) != 0 {
		t.Fatalf("second pass: mode %q (%s), older %v, transitions %v; want incremental, listing the stretch before the mirror, no transition",
			second.Sync.Mode, second.Sync.Reason, second.Sync.Older, second.Transitions)
	}

	e.clock = start.Add(2 * time.Hour)
	third := e.pass(true, runner.Request{Window: reconcile.Window{From: e.clock.Add(-24 * time.Hour), To: e.clock}})
	if third.Sync.Mode != runner.SyncIncremental || third.Sync.Older.Valid() {
		t.Errorf("third pass: mode %q (%s), older %v; want incremental from the mirror alone", third.Sync.Mode, third.Sync.Reason, third.Sync.Older)
	}
	if third.Partial != 0 || len(third.Transitions) != 1 || third.Transitions[0].ProviderID != "ch_5d" {
		t.Errorf("third pass: %d obligations partly read (events from %s, covered from %s), transitions %v; want charge:5d marked PAID by ch_5d",
			third.Partial, third.EventsFrom, third.Covered.From, third.Transitions)
	}
}
