package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/pgtest"
)

// accountPart is one account's conclusions of a pass, as the runner's
// share of that account hands them over: objects settled as that account
// names them (reconcile.AccountObject).
func accountPart(account string, fs []reconcile.Finding, ts []reconcile.Transition) reconcile.Conclusions {
	for i := range fs {
		fs[i].Account = account
		if account != "" {
			obj := ""
			if fs[i].Kind == reconcile.Orphan {
				obj = fs[i].ProviderIDs[0]
			}
			fs[i].Fingerprint = reconcile.AccountFingerprint(account, fs[i].Kind, fs[i].ObligationID, obj)
		}
	}
	c := resultOf(fs, ts)
	for i, id := range c.Settled.Objects {
		c.Settled.Objects[i] = reconcile.AccountObject(account, id)
	}
	return c
}

// merged is what one Apply of a whole pass gets: every account's
// conclusions together, findings in the matcher's order.
func merged(parts ...reconcile.Conclusions) reconcile.Conclusions {
	var c reconcile.Conclusions
	for _, p := range parts {
		c.Findings = append(c.Findings, p.Findings...)
		c.Transitions = append(c.Transitions, p.Transitions...)
		c.Counts.Obligations += p.Counts.Obligations
		c.Settled.Obligations = append(c.Settled.Obligations, p.Settled.Obligations...)
		c.Settled.Objects = append(c.Settled.Objects, p.Settled.Objects...)
	}
	slices.SortFunc(c.Findings, reconcile.CompareFindings)
	return c
}

// outboxState is every outbox row as Slack would be handed it: in id
// order, with what it says.
type outboxState struct {
	Event       reconcile.AlertEvent
	Fingerprint string
	Changed     bool
	Payload     string
	Due         bool
}

func (e *env) outbox() []outboxState {
	e.tb.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT event, coalesce(fingerprint, ''), changed, payload::text,
		next_attempt_at <= created_at FROM reconcile.outbox ORDER BY id`)
	if err != nil {
		e.tb.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxState])
	if err != nil {
		e.tb.Fatal(err)
	}
	return out
}

// findingsState is every finding row but for its times of acknowledgement.
func (e *env) findingsState() []string {
	e.tb.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT concat_ws('|', fingerprint, account, kind, status, first_seen_run,
		last_seen_run, coalesce(resolved_run, ''), content_hash, last_alerted_at) FROM reconcile.findings ORDER BY fingerprint`)
	if err != nil {
		e.tb.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.tb.Fatal(err)
	}
	return out
}

func (e *env) runRow(id string) string {
	e.tb.Helper()
	var s string
	if err := e.pool.QueryRow(context.Background(), `SELECT concat_ws('|', status, obligations, provider_objects, linked, findings,
		transitions, skipped, window_from, started_at) FROM reconcile.runs WHERE id = $1`, id).Scan(&s); err != nil {
		e.tb.Fatal(err)
	}
	return s
}

// A pass applied account by account, in any order, and finished writes
// what one Apply of all its conclusions writes: the same findings, the
// same run row, and the same outbox rows in the same order, the summary
// first, so that Slack is told the same (docs/design.md, "Passes as
// jobs").
func TestPassInPartsEqualsOneApply(t *testing.T) {
	t.Parallel()
	one, parts := newEnv(t, nil), newEnv(t, nil)
	u1, u2 := unknownRefund("refund:u1"), unknownRefund("refund:u2")
	for _, e := range []*env{one, parts} {
		pgtest.InsertObligations(t, e.pool, u1, u2)
	}
	pass := func(n int) (platform, shop reconcile.Conclusions) {
		switch n {
		case 1:
			platform = accountPart("", []reconcile.Finding{
				newFinding(reconcile.Duplicate, "refund:p1", "", 8900, "re_p1a", "re_p1b"),
				newFinding(reconcile.Orphan, "", "re_x", 500, "re_x"),
			}, []reconcile.Transition{markPaid(u1, "re_u1")})
			platform.Transitions[0].Money = u1.Money
			shop = accountPart("acct_1", []reconcile.Finding{
				newFinding(reconcile.Duplicate, "refund:a1", "", 8900, "re_a", "re_b"),
				newFinding(reconcile.Orphan, "", "re_x", 700, "re_x"), // the same id as the platform's orphan
				newFinding(reconcile.UnresolvedUnknown, "refund:u2", "", 8900),
			}, nil)
		case 2: // the platform's orphan is gone; the shop's unknown is confirmed
			platform = accountPart("", []reconcile.Finding{
				newFinding(reconcile.Duplicate, "refund:p1", "", 8900, "re_p1a", "re_p1b"),
			}, nil)
			platform.Settled.Objects = append(platform.Settled.Objects, "re_x")
			shop = accountPart("acct_1", []reconcile.Finding{
				newFinding(reconcile.Duplicate, "refund:a1", "", 8900, "re_a", "re_b"),
				newFinding(reconcile.Orphan, "", "re_x", 700, "re_x"),
			}, []reconcile.Transition{markPaid(u2, "re_u2")})
			shop.Transitions[0].Money = u2.Money
			shop.Settled.Obligations = append(shop.Settled.Obligations, "refund:u2")
		}
		platform.Counts = reconcile.Counts{Obligations: 3, ProviderObjects: 4, Linked: 3}
		shop.Counts = reconcile.Counts{Obligations: 2, ProviderObjects: 3, Linked: 2}
		return platform, shop
	}
	ctx := t.Context()
	for n := 1; n <= 2; n++ {
		now := t0().Add(time.Duration(n) * time.Hour)
		run := testRun("run-"+string(rune('0'+n)), now)
		platform, shop := pass(n)
		all := merged(platform, shop)
		run.Counts = reconcile.Counts{Obligations: 5, ProviderObjects: 7, Linked: 5}
		if _, err := one.s.Apply(ctx, run, all, now); err != nil {
			t.Fatal(err)
		}

		begin := run
		begin.Counts, begin.Finished, begin.Status = reconcile.Counts{}, time.Time{}, reconcile.RunRunning
		if err := pgx.BeginTxFunc(ctx, parts.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			return parts.s.BeginPass(ctx, tx, begin, nil)
		}); err != nil {
			t.Fatal(err)
		}
		// The shop's job first, then the platform's: jobs finish in any
		// order.
		for _, p := range []struct {
			account string
			c       reconcile.Conclusions
		}{{"acct_1", shop}, {"", platform}} {
			r := begin
			r.Counts = p.c.Counts
			thenRan := false
			if _, err := parts.s.ApplyPart(ctx, r, Part{Account: p.account}, p.c, PartReport{}, now, func(context.Context, pgx.Tx) error {
				thenRan = true
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !thenRan {
				t.Errorf("pass %d, account %q: ApplyPart did not run then in its transaction", n, p.account)
			}
		}
		if _, done, err := parts.s.FinishPass(ctx, run.ID, now, nil); err != nil || !done {
			t.Fatalf("FinishPass = done %t, %v", done, err)
		}
		if _, done, err := parts.s.FinishPass(ctx, run.ID, now, nil); err != nil || done {
			t.Errorf("a second FinishPass = done %t, %v; want nothing done", done, err)
		}
		if diff := cmp.Diff(one.outbox(), parts.outbox()); diff != "" {
			t.Errorf("pass %d: outbox (-one apply +in parts):\n%s", n, diff)
		}
		if diff := cmp.Diff(one.findingsState(), parts.findingsState()); diff != "" {
			t.Errorf("pass %d: findings (-one apply +in parts):\n%s", n, diff)
		}
		if a, b := one.runRow(run.ID), parts.runRow(run.ID); a != b {
			t.Errorf("pass %d: run row %q in parts, %q in one apply", n, b, a)
		}
		for _, e := range []*env{one, parts} {
			e.markAllSent(now)
		}
	}
	if a, b := one.obligation("refund:u2"), parts.obligation("refund:u2"); a != b || a.State != string(reconcile.Paid) {
		t.Errorf("refund:u2: %+v in parts, %+v in one apply; want PAID in both", b, a)
	}
}

// While a pass runs, another cannot begin; a failed pass releases the
// alerts its applied parts held, so that their findings are told, and
// queues no summary, and applies nothing more; a running pass none of
// whose jobs is left is failed when the next looks for one.
func TestFailedPassReleasesItsAlerts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	now := t0()
	run := testRun("run-f", now)
	run.Status, run.Finished = reconcile.RunRunning, time.Time{}
	// A pass always has a job to run until it ends: one River job here.
	begin := func(r reconcile.Run) error {
		return pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if err := e.s.BeginPass(ctx, tx, r, nil); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO reconcile.river_job (args, kind, max_attempts, queue, state)
				VALUES (jsonb_build_object('pass', jsonb_build_object('id', $1::text)), 'reconcile_apply', 5, 'apply', 'available')`, r.ID)
			return err
		})
	}
	if err := begin(run); err != nil {
		t.Fatal(err)
	}
	passJob(t, e, run.ID, "available")
	other := run
	other.ID = "run-g"
	if err := begin(other); err == nil || !errors.Is(err, ErrPassRunning) {
		t.Errorf("a second pass began while one runs: %v; want ErrPassRunning", err)
	}
	shop := accountPart("acct_1", []reconcile.Finding{newFinding(reconcile.Duplicate, "refund:a1", "", 8900, "re_a", "re_b")}, nil)
	if _, err := e.s.ApplyPart(ctx, run, Part{Account: "acct_1"}, shop, PartReport{}, now, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.ApplyPart(ctx, run, Part{Account: "acct_1"}, shop, PartReport{}, now, nil); err == nil {
		t.Errorf("the same account's part applied twice")
	}
	due, err := e.s.Due(ctx, now.Add(time.Hour), 100)
	if err != nil || len(due) != 0 {
		t.Errorf("due while the pass runs: %d rows, %v; want its alerts held", len(due), err)
	}
	if err := e.s.FailPass(ctx, run.ID, "Stripe could not be read", now, nil); err != nil {
		t.Fatal(err)
	}
	due, err = e.s.Due(ctx, now, 100)
	if err != nil || len(due) != 1 || due[0].Event != reconcile.AlertFiring || due[0].Finding.Account != "acct_1" {
		t.Errorf("due after the pass failed: %+v, %v; want the shop's duplicate alone, no summary", due, err)
	}
	if got := e.runRow(run.ID); got[:len("failed")] != "failed" {
		t.Errorf("run row %q; want failed", got)
	}
	late := accountPart("acct_2", []reconcile.Finding{newFinding(reconcile.Duplicate, "refund:a2", "", 8900, "re_c", "re_d")}, nil)
	if _, err := e.s.ApplyPart(ctx, run, Part{Account: "acct_2"}, late, PartReport{}, now, nil); !errors.Is(err, ErrPassEnded) {
		t.Errorf("a part applied after its pass failed: %v; want ErrPassEnded", err)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.findings WHERE account = 'acct_2'`); n != 0 {
		t.Errorf("%d findings of the late part stored", n)
	}
	if err := begin(other); err != nil {
		t.Errorf("a pass could not begin after the failed one ended: %v", err)
	}
	// River discards run-g's last job unworked (its worker died on its
	// last attempt): run-g can never end, so the next look fails it.
	e.exec(`UPDATE reconcile.river_job SET state = 'discarded', finalized_at = now() WHERE args->'pass'->>'id' = 'run-g'`)
	if id, running, err := e.s.RunningPass(ctx); err != nil || running {
		t.Errorf("RunningPass = %q, %t, %v; want run-g failed, none running", id, running, err)
	}
	var cause string
	if err := e.pool.QueryRow(ctx, `SELECT status || ': ' || error FROM reconcile.runs WHERE id = 'run-g'`).Scan(&cause); err != nil ||
		!strings.HasPrefix(cause, "failed: its jobs ended without finishing it") {
		t.Errorf("run-g: %q, %v", cause, err)
	}
}

// passJob inserts a River job of pass runID in state, as the workers'
// jobs name their pass.
func passJob(t *testing.T, e *env, runID, state string) {
	t.Helper()
	if _, err := e.pool.Exec(t.Context(), `INSERT INTO reconcile.river_job (kind, args, state, finalized_at)
		VALUES ('reconcile_fetch', jsonb_build_object('pass', jsonb_build_object('id', $1::text)), $2::reconcile.river_job_state,
		CASE WHEN $2 IN ('completed', 'discarded', 'cancelled') THEN now() END)`, runID, state); err != nil {
		t.Fatal(err)
	}
}

// A pass none of whose jobs is left (River's rescuer discarded a job
// whose worker died on its last attempt) is failed by the next pass's
// BeginPass, its applied part's alerts queued, rather than refusing every pass
// after it.
func TestBeginPassFailsAPassWithNoJobLeft(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	now := t0()
	run := testRun("run-d", now)
	run.Status, run.Finished = reconcile.RunRunning, time.Time{}
	begin := func(r reconcile.Run) error {
		return pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{}, func(tx pgx.Tx) error { return e.s.BeginPass(ctx, tx, r, nil) })
	}
	if err := begin(run); err != nil {
		t.Fatal(err)
	}
	shop := accountPart("acct_1", []reconcile.Finding{newFinding(reconcile.Duplicate, "refund:a1", "", 8900, "re_a", "re_b")}, nil)
	if _, err := e.s.ApplyPart(ctx, run, Part{Account: "acct_1"}, shop, PartReport{}, now, nil); err != nil {
		t.Fatal(err)
	}
	passJob(t, e, run.ID, "completed")
	passJob(t, e, run.ID, "discarded")
	next := run
	next.ID, next.Started = "run-e", now.Add(time.Hour)
	if err := begin(next); err != nil {
		t.Fatalf("a pass could not begin after one none of whose jobs is left: %v", err)
	}
	if got := e.runRow(run.ID); !strings.HasPrefix(got, "failed") {
		t.Errorf("run row %q; want failed", got)
	}
	due, err := e.s.Due(ctx, next.Started, 100)
	if err != nil || len(due) != 1 || due[0].Event != reconcile.AlertFiring {
		t.Errorf("due after the pass was failed: %+v, %v; want the shop's duplicate alone, no summary", due, err)
	}
}
