package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/store/storetest"
)

func TestApplyTransitions(t *testing.T) {
	t.Parallel()
	now := t0()
	expired := now.Add(-time.Hour)
	tests := []struct {
		name       string
		ob         reconcile.Obligation
		providerID string
		want       stored
	}{
		{
			name:       "confirmation unknown gets its provider id",
			ob:         unknownRefund("refund:1"),
			providerID: "re_1",
			want:       stored{State: "PAID", ProviderID: "re_1", PaidAt: now, UpdatedAt: now},
		},
		{
			name: "executing with an expired lease",
			ob: func() reconcile.Obligation {
				o := unknownRefund("refund:2")
				o.State, o.LeaseOwner, o.LeaseExpiresAt = reconcile.Executing, "worker-7", reconcile.StampOf(expired)
				return o
			}(),
			providerID: "re_2",
			want:       stored{State: "PAID", ProviderID: "re_2", PaidAt: now, UpdatedAt: now},
		},
		{
			name: "a provider id already there is kept",
			ob: func() reconcile.Obligation {
				o := unknownRefund("refund:3")
				o.ProviderID = "re_original"
				return o
			}(),
			providerID: "re_other",
			want:       stored{State: "PAID", ProviderID: "re_original", PaidAt: now, UpdatedAt: now},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			pgtest.InsertObligations(t, e.pool, tt.ob)
			tr := markPaid(tt.ob, tt.providerID)
			got, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf(nil, []reconcile.Transition{tr}), now)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if diff := cmp.Diff([]reconcile.Transition{tr}, got.Transitions); diff != "" {
				t.Errorf("Apply transitions (-want +got):\n%s", diff)
			}
			if len(got.Skipped) != 0 {
				t.Errorf("Apply skipped %v, want none", got.Skipped)
			}
			if diff := cmp.Diff(tt.want, e.obligation(tt.ob.ID)); diff != "" {
				t.Errorf("obligation after Apply (-want +got):\n%s", diff)
			}
			h, err := e.s.ObligationHistory(t.Context(), tt.ob.ID)
			if err != nil {
				t.Fatalf("ObligationHistory: %v", err)
			}
			wantAudit := []TransitionRecord{{ObligationID: tt.ob.ID, From: tt.ob.State, To: reconcile.Paid,
				ProviderID: tt.providerID, RunID: "run-1", At: now}}
			if diff := cmp.Diff(wantAudit, h.Transitions, cmpAudit); diff != "" {
				t.Errorf("audit (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpAudit compares audit rows without their ids, times by instant.
var cmpAudit = cmp.Options{
	cmp.Transformer("noID", func(r TransitionRecord) TransitionRecord { r.ID = 0; r.At = r.At.UTC(); return r }),
}

// A worker that changed the obligation after the matcher read it wins:
// the reconciler's transition is skipped and the worker's row stays as
// the worker left it, while the other transitions of the run apply.
func TestApplySkipsWhatAWorkerChanged(t *testing.T) {
	t.Parallel()
	now := t0()
	tests := []struct {
		name       string
		ob         reconcile.Obligation
		worker     string // SQL run on the row ($1 = id) after the read
		wantReason string
	}{
		{
			name:       "worker marked it paid",
			ob:         unknownRefund("refund:w1"),
			worker:     `UPDATE obligations SET state = 'PAID', provider_id = 're_worker', paid_at = '2026-11-30T05:59:00Z' WHERE id = $1`,
			wantReason: "state is now PAID, was CONFIRMATION_UNKNOWN",
		},
		{
			name: "worker renewed its lease",
			ob: func() reconcile.Obligation {
				o := unknownRefund("refund:w2")
				o.State, o.LeaseOwner, o.LeaseExpiresAt = reconcile.Executing, "worker-1", reconcile.StampOf(now.Add(-time.Minute))
				return o
			}(),
			worker:     `UPDATE obligations SET lease_expires_at = '2026-11-30T06:05:00Z' WHERE id = $1`,
			wantReason: "lease now expires 2026-11-30T06:05:00Z, was 2026-11-30T05:59:00Z",
		},
		{
			name:       "worker took a lease",
			ob:         unknownRefund("refund:w3"),
			worker:     `UPDATE obligations SET lease_owner = 'w', lease_expires_at = '2026-11-30T06:05:00Z' WHERE id = $1`,
			wantReason: "lease now expires 2026-11-30T06:05:00Z, was never (no lease)",
		},
		{
			name:       "obligation deleted",
			ob:         unknownRefund("refund:w4"),
			worker:     `DELETE FROM obligations WHERE id = $1`,
			wantReason: "obligation not found",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			other := unknownRefund("refund:other")
			pgtest.InsertObligations(t, e.pool, tt.ob, other)
			e.exec(tt.worker, tt.ob.ID)
			var before string
			if !strings.Contains(tt.name, "deleted") {
				before = e.row(tt.ob.ID)
			}
			ts := []reconcile.Transition{markPaid(other, "re_other"), markPaid(tt.ob, "re_reconciler")}
			got, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf(nil, ts), now)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if len(got.Transitions) != 1 || got.Transitions[0].ObligationID != other.ID {
				t.Errorf("Apply applied %v, want only %s", got.Transitions, other.ID)
			}
			if len(got.Skipped) != 1 || got.Skipped[0].Transition.ObligationID != tt.ob.ID ||
				!strings.Contains(got.Skipped[0].Reason, tt.wantReason) {
				t.Errorf("Apply skipped %+v, want %s with reason containing %q", got.Skipped, tt.ob.ID, tt.wantReason)
			}
			if before != "" {
				if after := e.row(tt.ob.ID); after != before {
					t.Errorf("worker's row after Apply = %s, want %s", after, before)
				}
			}
			if n := e.count(`SELECT count(*) FROM reconcile.transitions WHERE obligation_id = $1`, tt.ob.ID); n != 0 {
				t.Errorf("audit rows for the skipped obligation = %d, want 0", n)
			}
			if n := e.count(`SELECT skipped FROM reconcile.runs WHERE id = 'run-1'`); n != 1 {
				t.Errorf("run's skipped count = %d, want 1", n)
			}
		})
	}
}

// The worker's transaction is still open while Apply runs: Apply waits
// for the row, loses the race when the worker commits, runs again and
// skips.
func TestApplyLosesToAConcurrentWorker(t *testing.T) {
	t.Parallel()
	now := t0()
	tests := []struct {
		name        string
		worker      string
		maxAttempts int
	}{
		{"marks it paid", `UPDATE obligations SET state = 'PAID', provider_id = 're_worker' WHERE id = $1`, 0},
		{"renews its lease", `UPDATE obligations SET lease_expires_at = '2026-11-30T07:00:00Z' WHERE id = $1`, 0},
		{"marks it paid, no retries allowed", `UPDATE obligations SET state = 'PAID' WHERE id = $1`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(o *Options) {
				if tt.maxAttempts > 0 {
					o.MaxApplyAttempts = tt.maxAttempts
				}
			})
			ob := unknownRefund("refund:1")
			ob.State, ob.LeaseExpiresAt = reconcile.Executing, reconcile.StampOf(now.Add(-time.Hour))
			pgtest.InsertObligations(t, e.pool, ob)

			worker, err := e.pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer worker.Rollback(context.Background())
			if _, err := worker.Exec(t.Context(), tt.worker, ob.ID); err != nil {
				t.Fatal(err)
			}
			type result struct {
				a   Applied
				err error
			}
			done, ended := make(chan result, 1), make(chan struct{})
			go func() {
				defer close(ended)
				a, err := e.s.Apply(context.Background(), testRun("run-1", now), resultOf(nil, []reconcile.Transition{markPaid(ob, "re_1")}), now)
				done <- result{a, err}
			}()
			e.waitForLockWaiter("", ended)
			if err := worker.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			after := e.row(ob.ID)
			got := <-done
			if tt.maxAttempts == 1 {
				// The race is lost and not retried: an error, and nothing
				// of the run written.
				if !retryable(got.err) {
					t.Errorf("Apply with one attempt = %v, want a serialization failure", got.err)
				}
				if n := e.count(`SELECT count(*) FROM reconcile.runs`); n != 0 {
					t.Errorf("runs = %d, want 0", n)
				}
				return
			}
			if got.err != nil {
				t.Fatalf("Apply: %v", got.err)
			}
			if len(got.a.Transitions) != 0 || len(got.a.Skipped) != 1 {
				t.Errorf("Apply = %d applied, %d skipped; want 0, 1", len(got.a.Transitions), len(got.a.Skipped))
			}
			if got.a.Attempts != 2 {
				t.Errorf("Apply attempts = %d, want 2 (a serialization failure, then the rerun)", got.a.Attempts)
			}
			if row := e.row(ob.ID); row != after {
				t.Errorf("row after Apply = %s, want the worker's %s", row, after)
			}
		})
	}
}

// Two applies of the same result racing: the second waits behind the
// first, fails to serialize when it commits, reruns and finds nothing to
// do. Each transition is applied once with one audit row, and no alert is
// queued twice.
func TestApplyRacingSameResult(t *testing.T) {
	t.Parallel()
	now := t0()
	obs := []reconcile.Obligation{unknownRefund("refund:1"), unknownRefund("refund:2"), unknownRefund("refund:3")}
	findings := []reconcile.Finding{
		newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1a", "re_1b"),
		newFinding(reconcile.Orphan, "", "re_9", 500, "re_9"),
	}
	tests := []struct {
		name        string
		transitions []reconcile.Transition
		sameRun     bool
	}{
		{"transitions and findings, two runs", []reconcile.Transition{markPaid(obs[1], "re_2"), markPaid(obs[2], "re_3")}, false},
		{"transitions and findings, one run applied twice", []reconcile.Transition{markPaid(obs[1], "re_2"), markPaid(obs[2], "re_3")}, true},
		{"findings only", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			pgtest.InsertObligations(t, e.pool, obs...)
			first, err := New(e.pool, testOptions(nil))
			if err != nil {
				t.Fatal(err)
			}
			reached, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			first.hook = func(ctx context.Context, stage string, tx pgx.Tx) error {
				if stage == "findings" {
					once.Do(func() { close(reached); <-release })
				}
				return nil
			}
			res := resultOf(findings, tt.transitions)
			secondRun := "run-b"
			if tt.sameRun {
				secondRun = "run-a"
			}
			var wg sync.WaitGroup
			var a, b Applied
			var errA, errB error
			firstEnded, secondEnded := make(chan struct{}), make(chan struct{})
			wg.Go(func() {
				defer close(firstEnded)
				a, errA = first.Apply(context.Background(), testRun("run-a", now), res, now)
			})
			select {
			case <-reached:
			case <-firstEnded:
				t.Fatalf("the first apply ended before it wrote its findings: %v", errA)
			}
			wg.Go(func() {
				defer close(secondEnded)
				b, errB = e.s.Apply(context.Background(), testRun(secondRun, now), res, now)
			})
			e.waitForLockWaiter("", secondEnded)
			close(release)
			wg.Wait()
			if errA != nil || errB != nil {
				t.Fatalf("Apply = %v, %v", errA, errB)
			}
			if b.Attempts < 2 {
				t.Errorf("second Apply attempts = %d, want ≥ 2: it did not race", b.Attempts)
			}
			if got, want := len(a.Transitions)+len(b.Transitions), len(tt.transitions); got != want {
				t.Errorf("transitions applied = %d, want %d", got, want)
			}
			if got, want := len(b.Skipped), len(tt.transitions); got != want {
				t.Errorf("second Apply skipped %d, want %d", got, want)
			}
			for _, tr := range tt.transitions {
				if n := e.count(`SELECT count(*) FROM reconcile.transitions WHERE obligation_id = $1`, tr.ObligationID); n != 1 {
					t.Errorf("audit rows for %s = %d, want 1", tr.ObligationID, n)
				}
			}
			// One summary and one firing alert per finding, from the first.
			if n, want := e.count(`SELECT count(*) FROM reconcile.outbox`), 1+len(findings); n != want {
				t.Errorf("outbox rows = %d, want %d", n, want)
			}
			if b.Alerts != 0 || b.New != 0 {
				t.Errorf("second Apply queued %d alerts for %d new findings, want 0, 0", b.Alerts, b.New)
			}
		})
	}
}

// Many applies of the same result at once, no choreography: whatever the
// interleaving, each transition is applied once and each alert queued
// once.
func TestApplyStampede(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, func(o *Options) { o.MaxApplyAttempts = 20 })
	var obs []reconcile.Obligation
	var ts []reconcile.Transition
	for _, id := range []string{"refund:1", "refund:2", "refund:3", "refund:4"} {
		o := unknownRefund(id)
		obs = append(obs, o)
		ts = append(ts, markPaid(o, "re_"+id[7:]))
	}
	pgtest.InsertObligations(t, e.pool, obs...)
	res := resultOf([]reconcile.Finding{newFinding(reconcile.StaleLease, "refund:9", "", 0)}, ts)
	const racers = 6
	var wg sync.WaitGroup
	applied := make([]Applied, racers)
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			applied[i], errs[i] = e.s.Apply(context.Background(), testRun("run-"+string(rune('a'+i)), now), res, now)
		})
	}
	wg.Wait()
	total := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("Apply %d: %v", i, errs[i])
		}
		total += len(applied[i].Transitions)
	}
	if total != len(ts) {
		t.Errorf("transitions applied in all = %d, want %d", total, len(ts))
	}
	if n := e.count(`SELECT count(*) FROM reconcile.transitions`); n != len(ts) {
		t.Errorf("audit rows = %d, want %d", n, len(ts))
	}
	if n := e.count(`SELECT count(*) FROM reconcile.outbox`); n != 2 {
		t.Errorf("outbox rows = %d, want 2 (one summary, one firing)", n)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.runs`); n != racers {
		t.Errorf("runs = %d, want %d", n, racers)
	}
}

// The connection dies in the middle of an apply: nothing of it remains,
// and the next apply does all of it.
func TestApplyConnectionKilled(t *testing.T) {
	t.Parallel()
	now := t0()
	for _, stage := range []string{"transitions", "findings", "outbox"} {
		t.Run("after "+stage, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			obs := []reconcile.Obligation{unknownRefund("refund:1"), unknownRefund("refund:2")}
			pgtest.InsertObligations(t, e.pool, obs...)
			// An earlier run left an open finding that this one resolves.
			old := newFinding(reconcile.UnresolvedUnknown, "refund:2", "", 0)
			if _, err := e.s.Apply(t.Context(), testRun("run-0", now.Add(-time.Hour)),
				resultOf([]reconcile.Finding{old}, nil), now.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			before := storetest.Take(t, e.pool, reconcile.ObligationTable{})

			killer, err := New(e.pool, testOptions(nil))
			if err != nil {
				t.Fatal(err)
			}
			killed := false
			killer.hook = func(ctx context.Context, at string, tx pgx.Tx) error {
				if at != stage || killed {
					return nil
				}
				killed = true
				var pid int32
				if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					return err
				}
				var ok bool
				// From another connection; the timeout makes it wait until
				// the backend is gone.
				err := e.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ok)
				if err != nil || !ok {
					t.Errorf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
				}
				return nil
			}
			res := resultOf([]reconcile.Finding{newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_1b")},
				[]reconcile.Transition{markPaid(obs[0], "re_1"), markPaid(obs[1], "re_2")}, "refund:2")
			_, err = killer.Apply(t.Context(), testRun("run-1", now), res, now)
			if err == nil {
				t.Fatal("Apply on a killed connection succeeded")
			}
			if !strings.Contains(err.Error(), "(attempt 1)") {
				t.Errorf("Apply on a killed connection = %v, want it given up after attempt 1: only races are retried", err)
			}
			if !killed {
				t.Fatalf("the hook never reached stage %s", stage)
			}
			after := storetest.Take(t, e.pool, reconcile.ObligationTable{})
			if diff := cmp.Diff(before.Tables, after.Tables); diff != "" {
				t.Errorf("tables after the killed apply (-before +after):\n%s", diff)
			}

			got, err := e.s.Apply(t.Context(), testRun("run-1", now), res, now)
			if err != nil {
				t.Fatalf("Apply after the kill: %v", err)
			}
			if len(got.Transitions) != 2 || got.New != 1 || got.Resolved != 1 || got.Alerts != 3 {
				t.Errorf("Apply after the kill = %d transitions, %d new, %d resolved, %d alerts; want 2, 1, 1, 3",
					len(got.Transitions), got.New, got.Resolved, got.Alerts)
			}
			for _, o := range obs {
				if s := e.obligation(o.ID).State; s != "PAID" {
					t.Errorf("%s state = %s, want PAID", o.ID, s)
				}
			}
		})
	}
}

// Applying the same result again changes nothing and queues nothing.
func TestApplyAgainChangesNothing(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	obs := []reconcile.Obligation{unknownRefund("refund:1"), unknownRefund("refund:2")}
	pgtest.InsertObligations(t, e.pool, obs...)
	res := resultOf([]reconcile.Finding{
		newFinding(reconcile.Duplicate, "refund:3", "", 8900, "re_3a", "re_3b"),
		newFinding(reconcile.Orphan, "", "re_9", 100, "re_9"),
	}, []reconcile.Transition{markPaid(obs[0], "re_1"), markPaid(obs[1], "re_2")})
	first, err := e.s.Apply(t.Context(), testRun("run-1", now), res, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Transitions) != 2 || first.Alerts != 3 {
		t.Fatalf("first Apply = %d transitions, %d alerts; want 2, 3", len(first.Transitions), first.Alerts)
	}
	obsBefore := []string{e.row("refund:1"), e.row("refund:2")}
	tests := []struct {
		name  string
		runID string
		at    time.Time
	}{
		{"same run again", "run-1", now},
		{"next run an hour later", "run-2", now.Add(time.Hour)},
		{"a run just inside the repeat interval", "run-3", now.Add(24*time.Hour - time.Second)},
	}
	for _, tt := range tests {
		got, err := e.s.Apply(t.Context(), testRun(tt.runID, tt.at), res, tt.at)
		if err != nil {
			t.Fatalf("%s: Apply: %v", tt.name, err)
		}
		if len(got.Transitions) != 0 || len(got.Skipped) != 2 {
			t.Errorf("%s: Apply = %d applied, %d skipped; want 0, 2", tt.name, len(got.Transitions), len(got.Skipped))
		}
		if got.Alerts+got.New+got.Changed+got.Resolved+got.Repeated != 0 {
			t.Errorf("%s: Apply = %+v, want no alerts and no new, changed, resolved or repeated findings", tt.name, got)
		}
		if n := e.count(`SELECT count(*) FROM reconcile.transitions`); n != 2 {
			t.Errorf("%s: audit rows = %d, want 2", tt.name, n)
		}
		if n := e.count(`SELECT count(*) FROM reconcile.outbox`); n != 3 {
			t.Errorf("%s: outbox rows = %d, want 3", tt.name, n)
		}
		if got := []string{e.row("refund:1"), e.row("refund:2")}; !cmp.Equal(got, obsBefore) {
			t.Errorf("%s: obligations = %v, want %v", tt.name, got, obsBefore)
		}
	}
	// The run applied twice keeps the count of what its first apply did.
	if n := e.count(`SELECT transitions FROM reconcile.runs WHERE id = 'run-1'`); n != 2 {
		t.Errorf("run-1 transitions = %d, want 2", n)
	}
}

func TestApplyRefuses(t *testing.T) {
	t.Parallel()
	now := t0()
	ob := unknownRefund("refund:1")
	// Rows in states the configuration does not map.
	cancelled, blank := unknownRefund("refund:cancelled"), unknownRefund("refund:blank")
	cancelled.RawState, blank.RawState = "CANCELLED", "CONFIRMATION_UNKNOWN "
	tests := []struct {
		name string
		run  reconcile.Run
		res  func() reconcile.Transition
		want string
	}{
		{"a dry run", func() reconcile.Run { r := testRun("run-1", now); r.Status = reconcile.RunDry; return r }(), nil, "dry run"},
		{"a run without id", testRun("", now), nil, "no id"},
		{"an unknown trigger", func() reconcile.Run { r := testRun("run-1", now); r.Trigger = "hourly"; return r }(), nil, "trigger"},
		{"an unknown target state", testRun("run-1", now), func() reconcile.Transition {
			tr := markPaid(ob, "re_1")
			tr.To = "SETTLED"
			return tr
		}, "unknown target state"},
		// Defence in depth: the matcher never proposes these.
		{"a from state the configuration does not map", testRun("run-1", now), func() reconcile.Transition {
			tr := markPaid(cancelled, "re_c")
			tr.From, tr.FromRaw = "CANCELLED", "CANCELLED"
			return tr
		}, `state "CANCELLED" is not mapped in obligations.states`},
		{"a from value with a trailing blank", testRun("run-1", now), func() reconcile.Transition {
			tr := markPaid(blank, "re_b")
			tr.From, tr.FromRaw = "CONFIRMATION_UNKNOWN ", "CONFIRMATION_UNKNOWN "
			return tr
		}, `state "CONFIRMATION_UNKNOWN " is not mapped`},
		{"an unmapped raw value under a known from state", testRun("run-1", now), func() reconcile.Transition {
			tr := markPaid(cancelled, "re_c")
			tr.From, tr.FromRaw = reconcile.ConfirmationUnknown, "CANCELLED"
			return tr
		}, `state "CANCELLED" is not mapped`},
		{"a from state disagreeing with the value read", testRun("run-1", now), func() reconcile.Transition {
			tr := markPaid(ob, "re_1")
			tr.From = reconcile.Executing
			return tr
		}, "disagrees with the value read"},
		{"no from state at all", testRun("run-1", now), func() reconcile.Transition {
			tr := markPaid(ob, "re_1")
			tr.From, tr.FromRaw = "", ""
			return tr
		}, `state "" is not mapped`},
	}
	e := newEnv(t, nil)
	pgtest.InsertObligations(t, e.pool, ob, cancelled, blank)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := storetest.Take(t, e.pool, reconcile.ObligationTable{})
			ts := []reconcile.Transition{markPaid(ob, "re_1")}
			if tt.res != nil {
				ts = []reconcile.Transition{tt.res()}
			}
			_, err := e.s.Apply(t.Context(), tt.run, resultOf(nil, ts), now)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Apply(%s) = %v, want an error about %q", tt.name, err, tt.want)
			}
			if diff := cmp.Diff(before, storetest.Take(t, e.pool, reconcile.ObligationTable{})); diff != "" {
				t.Errorf("Apply(%s) wrote (-before +after):\n%s", tt.name, diff)
			}
		})
	}
	t.Run("two transitions for one obligation", func(t *testing.T) {
		_, err := e.s.Apply(t.Context(), testRun("run-1", now),
			resultOf(nil, []reconcile.Transition{markPaid(ob, "re_1"), markPaid(ob, "re_2")}), now)
		if err == nil || !strings.Contains(err.Error(), "two transitions") {
			t.Errorf("Apply = %v, want an error about two transitions", err)
		}
	})
}

// The obligations table of a team that named everything its own way, with
// names that only survive quoted.
func TestApplyCustomTable(t *testing.T) {
	t.Parallel()
	now := t0()
	pool, _ := pgtest.NewMigrated(t, SchemaDigest(), Migrate)
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA billing;
	CREATE TABLE billing."PaymentObligations" (
		"Key" text PRIMARY KEY, status text NOT NULL, stripe_ref text, lease_until timestamptz,
		settled timestamptz, modified timestamptz NOT NULL DEFAULT now());
	INSERT INTO billing."PaymentObligations" ("Key", status, lease_until) VALUES
		('a', 'unknown', NULL), ('b', 'running', '2026-11-30T05:00:00Z'), ('c', 'unknown', NULL)`); err != nil {
		t.Fatal(err)
	}
	table := reconcile.DefaultObligationTable()
	table.Schema, table.Table = "billing", "PaymentObligations"
	table.Columns.ID, table.Columns.State, table.Columns.ProviderID = "Key", "status", "stripe_ref"
	table.Columns.LeaseExpiresAt, table.Columns.PaidAt, table.Columns.UpdatedAt = "lease_until", "settled", "modified"
	table.States[reconcile.ConfirmationUnknown], table.States[reconcile.Executing], table.States[reconcile.Paid] =
		"unknown", "running", "settled"
	s, err := New(pool, testOptions(func(o *Options) { o.Table = table }))
	if err != nil {
		t.Fatal(err)
	}
	ts := []reconcile.Transition{
		{ObligationID: "a", From: reconcile.ConfirmationUnknown, FromRaw: "unknown", To: reconcile.Paid, ProviderID: "re_a"},
		{ObligationID: "b", From: reconcile.Executing, FromRaw: "running", FromLeaseExpiresAt: now.Add(-time.Hour), To: reconcile.Paid, ProviderID: "re_b"},
		// Read while the table said 'running': it has changed since.
		{ObligationID: "c", From: reconcile.Executing, FromRaw: "running", To: reconcile.Paid, ProviderID: "re_c"},
	}
	got, err := s.Apply(t.Context(), testRun("run-1", now), resultOf(nil, ts), now)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(got.Transitions) != 2 || len(got.Skipped) != 1 {
		t.Errorf("Apply = %d applied, %d skipped; want 2, 1", len(got.Transitions), len(got.Skipped))
	}
	rows, err := pool.Query(t.Context(), `SELECT "Key" || ' ' || status || ' ' || coalesce(stripe_ref, '-') || ' ' || (settled IS NOT NULL)
		FROM billing."PaymentObligations" ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a settled re_a true", "b settled re_b true", "c unknown - false"}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("table after Apply (-want +got):\n%s", diff)
	}
	var from, to string
	if err := pool.QueryRow(t.Context(), `SELECT from_state, to_state FROM reconcile.transitions WHERE obligation_id = 'a'`).Scan(&from, &to); err != nil {
		t.Fatal(err)
	}
	if from != "CONFIRMATION_UNKNOWN" || to != "PAID" {
		t.Errorf("audit = %s → %s, want the canonical CONFIRMATION_UNKNOWN → PAID", from, to)
	}
}

func TestNewValidatesTable(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	table := reconcile.DefaultObligationTable()
	table.Columns.State = `state"; DROP TABLE obligations; --`
	_, err := New(pool, testOptions(func(o *Options) { o.Table = table }))
	if err == nil || !strings.Contains(err.Error(), "obligations.columns.state") {
		t.Errorf("New with a bad column = %v, want an error naming obligations.columns.state", err)
	}
	if _, err := New(pool, testOptions(func(o *Options) { o.RepeatInterval = -time.Hour })); err == nil {
		t.Error("New with a negative repeat interval succeeded")
	}
	if _, err := New(pool, testOptions(func(o *Options) { o.MaxApplyAttempts = 0 })); err == nil {
		t.Error("New with no apply attempts succeeded")
	}
	if _, err := New(pool, Options{}); err == nil {
		t.Error("New with no options succeeded; nothing may default inside the store")
	}
}

// UseTypes refuses column types the compare-and-set cannot compare or
// write, naming the column's configuration field, and keeps the
// statements it had.
func TestUseTypesRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	before := e.s.sql()
	for _, tc := range []struct {
		name   string
		change func(*reconcile.ObligationTypes)
		want   string
	}{
		{"uuid provider_id", func(ts *reconcile.ObligationTypes) {
			ts.ProviderID = reconcile.ColumnType{Name: `"pg_catalog"."uuid"`, Base: `"pg_catalog"."uuid"`, Kind: reconcile.TypeUUID, Display: "uuid"}
		}, "obligations.columns.provider_id"},
		{"date paid_at", func(ts *reconcile.ObligationTypes) {
			ts.PaidAt = reconcile.ColumnType{Name: `"pg_catalog"."date"`, Base: `"pg_catalog"."date"`, Kind: reconcile.TypeOther, Display: "date"}
		}, `obligations.columns.paid_at: column "paid_at" is date`},
		{"never read", func(ts *reconcile.ObligationTypes) { *ts = reconcile.ObligationTypes{} }, "obligations.columns.id: the type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			types := reconcile.ReferenceObligationTypes()
			tc.change(&types)
			if err := e.s.UseTypes(types); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("UseTypes(%s) = %v, want an error naming %q", tc.name, err, tc.want)
			}
			if e.s.sql() != before {
				t.Errorf("UseTypes(%s) replaced the statements", tc.name)
			}
		})
	}
}

func TestRecordFailedRun(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	pgtest.InsertObligations(t, e.pool, unknownRefund("refund:1"))
	before := storetest.Take(t, e.pool, reconcile.ObligationTable{})
	run := testRun("run-f", now)
	run.Status = reconcile.RunFailed
	if err := e.s.RecordFailedRun(t.Context(), run, "list stripe refunds: 500 after 5 attempts"); err != nil {
		t.Fatalf("RecordFailedRun: %v", err)
	}
	after := storetest.Take(t, e.pool, reconcile.ObligationTable{})
	for name, rows := range after.Tables {
		if name == `"reconcile"."runs"` {
			continue
		}
		if diff := cmp.Diff(before.Tables[name], rows); diff != "" {
			t.Errorf("RecordFailedRun wrote to %s (-before +after):\n%s", name, diff)
		}
	}
	runs, err := e.s.LastRuns(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Status != reconcile.RunFailed || runs[0].Error != "list stripe refunds: 500 after 5 attempts" {
		t.Errorf("LastRuns = %+v, want the one failed run with its cause", runs)
	}

	if _, err := e.s.Apply(t.Context(), testRun("run-ok", now), resultOf(nil, nil), now); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RecordFailedRun(t.Context(), testRun("run-ok", now), "late failure"); err == nil ||
		!strings.Contains(err.Error(), "completed") {
		t.Errorf("RecordFailedRun over a completed run = %v, want an error", err)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.runs WHERE id = 'run-ok' AND status = 'completed'`); n != 1 {
		t.Error("the completed run was overwritten")
	}
}

// A dry run does not call Apply; what it may call instead (reads) writes
// nothing, and an Apply that is told it is a dry run refuses. Taking the
// lock, which a dry run does not, moves its fencing epoch and writes
// nothing else. The snapshot helper is also shown to see a write.
func TestDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	obs := []reconcile.Obligation{unknownRefund("refund:1"), unknownRefund("refund:2")}
	pgtest.InsertObligations(t, e.pool, obs...)
	f := newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_2")
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf([]reconcile.Finding{f}, nil), now); err != nil {
		t.Fatal(err)
	}
	before := storetest.Take(t, e.pool, reconcile.ObligationTable{})

	dry := testRun("run-dry", now.Add(48*time.Hour))
	dry.Status = reconcile.RunDry
	res := resultOf([]reconcile.Finding{newFinding(reconcile.Orphan, "", "re_7", 10, "re_7")},
		[]reconcile.Transition{markPaid(obs[1], "re_x")}, "re_1", "re_2")
	if _, err := e.s.Apply(t.Context(), dry, res, now.Add(48*time.Hour)); err == nil {
		t.Error("Apply of a dry run succeeded")
	}
	if err := e.s.CheckSchema(t.Context()); err != nil {
		t.Error(err)
	}
	l, err := e.s.Lock(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Error(err)
	}
	if _, err := e.s.Findings(t.Context(), false); err != nil {
		t.Error(err)
	}
	if _, err := e.s.Due(t.Context(), now.Add(48*time.Hour), 100); err != nil {
		t.Error(err)
	}
	if _, err := e.s.ObligationHistory(t.Context(), "refund:1"); err != nil {
		t.Error(err)
	}
	if _, err := e.s.LastRuns(t.Context(), 10); err != nil {
		t.Error(err)
	}
	after := storetest.Take(t, e.pool, reconcile.ObligationTable{})
	const runLock = `"reconcile"."run_lock"`
	if got, want := after.Tables[runLock], []string{fmt.Sprintf("(t,%d)", l.Epoch())}; !cmp.Equal(got, want) || l.Epoch() != 1 {
		t.Errorf("run_lock after one Lock = %v, want %v at epoch 1", got, want)
	}
	after.Tables[runLock] = before.Tables[runLock]
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("a dry run wrote (-before +after):\n%s", diff)
	}

	if _, err := e.s.Ack(t.Context(), f.Fingerprint, "ops", "known", now); err != nil {
		t.Fatal(err)
	}
	if cmp.Equal(before, storetest.Take(t, e.pool, reconcile.ObligationTable{})) {
		t.Error("the snapshot did not see an acknowledgement: it proves nothing")
	}
}

func TestErrorsAreTranslated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if _, err := e.s.Ack(t.Context(), "0123456789", "ops", "why", t0()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Ack(unknown) = %v, want ErrNotFound", err)
	}
	if err := e.s.MarkSent(t.Context(), 42, "C1", "1.2", t0()); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkSent(unknown) = %v, want ErrNotFound", err)
	}
}
