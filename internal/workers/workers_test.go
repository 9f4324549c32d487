package workers_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/bench"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/pgtest"
	"reconcile/internal/queue"
	"reconcile/internal/runner"
	"reconcile/internal/slacktest"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
	"reconcile/internal/workers"
)

const testKey = "sk_test_workers0123456789abcdefSECRET"

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// platform is a Stripe test server holding a bench.Platform.
type platform struct {
	bench.Platform
	base string
}

func newPlatform(t testing.TB, accounts, n int, more ...func(*bench.Platform)) *platform {
	t.Helper()
	p := &platform{Platform: bench.NewPlatform(accounts, n, t0)}
	for _, f := range more {
		f(&p.Platform)
	}
	srv := stripesim.New(testKey)
	if err := p.Serve(srv); err != nil {
		t.Fatal(err)
	}
	base, stop, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	p.base = base
	return p
}

// reconciler is one database holding the platform's obligations, and a
// runner reading every account on the pass's clock.
type reconciler struct {
	pool   *pgxpool.Pool
	store  *store.Store
	runner *runner.Runner
}

func newReconciler(t testing.TB, p *platform) *reconciler {
	t.Helper()
	pool, _ := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
	pgtest.InsertAccountObligations(t, pool, "stripe_account", p.Obligations...)
	st, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	table := reconcile.DefaultObligationTable()
	table.Columns.Account = "stripe_account"
	obl, err := sources.NewObligations(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	so := sources.StripeOptionsFrom(config.Default())
	so.APIKey, so.BaseURL, so.Rate = testKey, p.base, math.Inf(1)
	so.RetryBase, so.RetryMax, so.RequestTimeout = time.Millisecond, 4*time.Millisecond, 10*time.Second
	stripe, err := sources.NewStripe(so)
	if err != nil {
		t.Fatal(err)
	}
	mirror := store.NewMirror(pool)
	r := &runner.Runner{Provider: stripe, Obligations: obl, Store: st, Mirror: mirror,
		Matcher: matcher.OptionsFrom(config.Default().Matcher), MaxLookback: config.Default().MaxLookback,
		Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler),
		Accounts: stripe.Accounts,
		Scope: func(acct string) runner.Readers {
			return runner.Readers{Provider: stripe.ForAccount(acct), Obligations: obl.ForAccount(acct), Mirror: mirror.ForAccount(acct)}
		},
	}
	return &reconciler{pool: pool, store: st, runner: r}
}

// state is what a pass leaves that people and the next pass read, with
// the runs' ids replaced by RUN0, RUN1, …: every finding, every outbox row in order
// (what Slack is told), every obligation's state and every transition's
// audit, the run row's counts, and the mirror's cursors.
func (rc *reconciler) state(t testing.TB, runIDs ...string) map[string][]string {
	t.Helper()
	queries := map[string]string{
		"findings": `SELECT concat_ws('|', fingerprint, account, kind, severity, status, obligation_id, provider_ids::text,
			at_risk_amount, content_hash, detail, first_seen_run, last_seen_run, coalesce(resolved_run, '')) FROM reconcile.findings ORDER BY fingerprint`,
		"outbox":      `SELECT concat_ws('|', event, coalesce(fingerprint, ''), changed, payload::text, next_attempt_at <= created_at) FROM reconcile.outbox ORDER BY id`,
		"obligations": `SELECT concat_ws('|', id, state, coalesce(provider_id, ''), coalesce(paid_at::text, '')) FROM obligations ORDER BY id`,
		"transitions": `SELECT concat_ws('|', obligation_id, from_state, to_state, provider_id, run_id) FROM reconcile.transitions ORDER BY obligation_id`,
		"runs": `SELECT concat_ws('|', id, status, obligations, provider_objects, linked, findings, transitions, skipped)
			FROM reconcile.runs ORDER BY started_at, id`,
		"cursors": `SELECT concat_ws('|', account, name, complete_from, complete_to, run_id) FROM reconcile.sync_cursors ORDER BY account, name`,
	}
	out := map[string][]string{}
	for name, q := range queries {
		rows, err := rc.pool.Query(context.Background(), q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range lines {
			for k, id := range runIDs {
				lines[i] = strings.ReplaceAll(lines[i], id, fmt.Sprintf("RUN%d", k))
			}
		}
		if name == "runs" {
			// Passes of one clock start in the same second: their ids
			// order them at random.
			slices.Sort(lines)
		}
		out[name] = lines
	}
	return out
}

// workersOn starts n River clients, each with its own workers, on rc's
// database, stopped when the test ends.
func workersOn(t testing.TB, rc *reconciler, n, shards int) *queue.Queue {
	t.Helper()
	var first *queue.Queue
	for i := range n {
		ws := river.NewWorkers()
		workers.Register(ws, workers.Deps{Runner: rc.runner, Store: rc.store, Now: func() time.Time { return t0 }, Shards: shards})
		q, err := queue.Open(rc.pool, queue.Config{Workers: ws, ID: fmt.Sprintf("worker-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := q.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer scancel()
			_ = q.Stop(sctx)
			cancel()
		})
		if first == nil {
			first = q
		}
	}
	return first
}

// waitPass waits until pass runID is no longer running and its drain is
// done, and returns its status.
func waitPass(t testing.TB, rc *reconciler, runID string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var status string
		var pending int
		err := rc.pool.QueryRow(context.Background(), `SELECT status, (SELECT count(*) FROM reconcile.river_job
			WHERE state NOT IN ('completed', 'discarded', 'cancelled')) FROM reconcile.runs WHERE id = $1`, runID).Scan(&status, &pending)
		if err != nil {
			t.Fatal(err)
		}
		if status != string(reconcile.RunRunning) && pending == 0 {
			return status
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pass %s did not end in two minutes", runID)
	return ""
}

// platformPair are two reconcilers of p that read the platform's account
// alone (no Accounts, no Scope): the one-process pass's and the workers'.
func platformPair(t testing.TB, p *platform) (one, dist *reconciler) {
	t.Helper()
	one, dist = newReconciler(t, p), newReconciler(t, p)
	for _, rc := range []*reconciler{one, dist} {
		rc.runner.Accounts, rc.runner.Scope = nil, nil
	}
	return one, dist
}

// passBoth runs the pass req asks for in one process on one and as jobs
// on dist's workers (q), and returns both runs' ids.
func passBoth(t testing.TB, one, dist *reconciler, q *queue.Queue, req runner.Request, slice time.Duration) (oneID, distID string) {
	t.Helper()
	out, err := one.runner.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return out.Run.ID, completePass(t, dist, q, req, slice).Run.ID
}

// completePass enqueues the pass req asks for on rc's workers (q), in
// slices of slice, and waits for it to complete, failing the test with
// the run's cause otherwise.
func completePass(t testing.TB, rc *reconciler, q *queue.Queue, req runner.Request, slice time.Duration) runner.PassPlan {
	t.Helper()
	plan, err := workers.Enqueue(t.Context(), rc.pool, q, rc.runner, rc.store, req, slice)
	if err != nil {
		t.Fatal(err)
	}
	if status := waitPass(t, rc, plan.Run.ID); status != string(reconcile.RunCompleted) {
		var cause string
		_ = rc.pool.QueryRow(t.Context(), `SELECT coalesce(error, '') FROM reconcile.runs WHERE id = $1`, plan.Run.ID).Scan(&cause)
		t.Fatalf("pass %s ended %s: %s", plan.Run.ID, status, cause)
	}
	return plan
}

// sameState fails the test where the state one's passes (oneIDs) left
// differs from the state dist's (distIDs) left.
func sameState(t *testing.T, one, dist *reconciler, oneIDs, distIDs []string) {
	t.Helper()
	want, got := one.state(t, oneIDs...), dist.state(t, distIDs...)
	for name := range want {
		if diff := cmp.Diff(want[name], got[name]); diff != "" {
			t.Errorf("%s (-one process +jobs):\n%s", name, diff)
		}
	}
}

// A pass run as jobs by three workers concludes, writes and tells exactly
// what the one-process pass does over the same history: the same
// findings and fingerprints, transitions, run counts, mirror cursors and
// outbox rows in the same order (docs/design.md, "Passes as jobs").
func TestJobsEqualOneProcess(t *testing.T) {
	p := newPlatform(t, 4, 1000)
	one, dist := newReconciler(t, p), newReconciler(t, p)
	req := runner.Request{Window: reconcile.Window{From: t0.Add(-72 * time.Hour), To: t0}, Trigger: reconcile.TriggerManual}

	out, err := one.runner.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Result.Findings) < 4*9 || len(out.Transitions) == 0 {
		t.Fatalf("the one-process pass found %d findings and %d transitions; the history holds every kind on every account",
			len(out.Result.Findings), len(out.Transitions))
	}

	q := workersOn(t, dist, 3, 1)
	plan := completePass(t, dist, q, req, 6*time.Hour)
	if len(plan.Slices) < 4*16 {
		t.Errorf("the plan has %d fetch slices; want one per 6 hours of every account's four days", len(plan.Slices))
	}
	// The accounts taken in turn, so that workers do not meet one
	// account's rate limit with all their fetchers at once.
	for i := 1; i < 4; i++ {
		if plan.Slices[i].Account == plan.Slices[i-1].Account {
			t.Errorf("fetch jobs %d and %d are both of account %q; want the accounts in turn", i-1, i, plan.Slices[i].Account)
		}
	}
	sameState(t, one, dist, []string{out.Run.ID}, []string{plan.Run.ID})
}

// An account's match and apply split in shards concludes, writes and
// tells what its one share does (docs/design.md, "Shards"): the
// history's conflicts, twins, refunds and intents fall across shards,
// and each shard holds a part of the account.
func TestShardsEqualOneProcess(t *testing.T) {
	// A charge of the subject naming by metadata an obligation paid three
	// weeks ago, outside the window: both passes read back to it, and
	// find it paid twice.
	late := func(p *bench.Platform) {
		paid := t0.Add(-21 * 24 * time.Hour)
		money := reconcile.Money{Amount: 4242, Currency: "usd"}
		for i, a := range p.Accounts {
			id := fmt.Sprintf("a%02d-old", i)
			p.Obligations = append(p.Obligations, reconcile.Obligation{ID: id, Account: a.ID, Kind: reconcile.Charge,
				IdempotencyKey: id + "-key", Provider: "stripe", ProviderID: "ch_old", Money: money, State: reconcile.Paid,
				RawState: "PAID", CreatedAt: reconcile.StampOf(paid), UpdatedAt: reconcile.StampOf(paid), PaidAt: reconcile.StampOf(paid)})
			for _, o := range []reconcile.ProviderObject{
				{ID: "ch_old", Created: reconcile.StampOf(paid)},
				{ID: "ch_late", Metadata: map[string]string{"obligation_id": id}, Created: reconcile.StampOf(t0.Add(-time.Hour))},
			} {
				o.Account, o.Kind, o.Money, o.Status, o.RawStatus = a.ID, reconcile.Charge, money, reconcile.Succeeded, "succeeded"
				p.Objects[a.ID] = append(p.Objects[a.ID], o)
			}
		}
	}
	p := newPlatform(t, 2, 3000, late)
	one, dist := newReconciler(t, p), newReconciler(t, p)
	req := runner.Request{Window: reconcile.Window{From: t0.Add(-72 * time.Hour), To: t0}, Trigger: reconcile.TriggerManual}
	out, err := one.runner.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	const shards = 3
	q := workersOn(t, dist, 2, shards)
	plan := completePass(t, dist, q, req, 24*time.Hour)
	sameState(t, one, dist, []string{out.Run.ID}, []string{plan.Run.ID})
	want := one.state(t, out.Run.ID)
	// Every account applied in three parts, each holding about a third
	// of the account's obligations decided on and of its objects.
	rows, err := dist.pool.Query(t.Context(), `SELECT account, shard, obligations, provider_objects FROM reconcile.pass_parts
		WHERE run_id = $1 ORDER BY account, shard`, plan.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	type part struct {
		Account                  string
		Shard, Obls, ProviderObj int
	}
	parts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[part])
	if err != nil {
		t.Fatal(err)
	}
	// The report reads as the one-process pass's: the coverage (read
	// back as far for every shard) and the counts of obligations read to
	// link and decided on partially.
	res, err := dist.store.PassResult(t.Context(), plan.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Covered != out.Covered || res.Report.Context != out.Context || res.Report.Partial != out.Partial {
		t.Errorf("the shards' report: covered %v, context %d, partial %d; the one process's: covered %v, context %d, partial %d",
			res.Report.Covered, res.Report.Context, res.Report.Partial, out.Covered, out.Context, out.Partial)
	}
	if !slices.ContainsFunc(want["findings"], func(f string) bool { return strings.Contains(f, "|duplicate|") && strings.Contains(f, "a00-old") }) {
		t.Errorf("the one-process pass did not find a00-old paid twice: the history does not test reading back")
	}
	if len(parts) != 2*shards {
		t.Fatalf("%d parts applied; want %d (2 accounts × %d shards): %v", len(parts), 2*shards, shards, parts)
	}
	whole := out.Run.Counts.ProviderObjects / 2
	for _, pt := range parts {
		if pt.ProviderObj == 0 || pt.ProviderObj > whole/2 {
			t.Errorf("shard %d of account %q counted %d of its account's %d objects; want about a third", pt.Shard, pt.Account, pt.ProviderObj, whole)
		}
	}
}

// A worker of a reconciler that reads the platform's account alone
// works pass after pass with the readers it was given: a job's wrapping
// of them (its fetches, its shard) is its own, so that the second pass
// of the same workers reads and concludes what a one-process second pass
// does.
func TestShardsPassAfterPassOnThePlatformAlone(t *testing.T) {
	one, dist := platformPair(t, newPlatform(t, 1, 2000))
	q := workersOn(t, dist, 2, 2)
	var oneIDs, distIDs []string
	for _, since := range []time.Duration{72 * time.Hour, 24 * time.Hour} {
		req := runner.Request{Window: reconcile.Window{From: t0.Add(-since), To: t0}, Trigger: reconcile.TriggerManual, Full: true}
		oneID, distID := passBoth(t, one, dist, q, req, 12*time.Hour)
		oneIDs, distIDs = append(oneIDs, oneID), append(distIDs, distID)
	}
	sameState(t, one, dist, oneIDs, distIDs)
}

// A drain that cannot deliver for a reason no retry helps (a revoked bot
// token) keeps why on the pass's row, where `run --enqueue` reads it to
// exit 1 as `run` does, and the alerts stay in the outbox.
func TestDrainKeepsWhyAlertsCannotGo(t *testing.T) {
	p := newPlatform(t, 2, 100)
	rc := newReconciler(t, p)
	sl := slacktest.New("xoxb-workers-test")
	slackURL, stop, err := sl.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	sl.SetFaults(slacktest.Faults{BadAuth: true})
	d, err := alerts.NewSlack(alerts.SlackOptions{BotToken: "xoxb-workers-test", Channel: "C0FINANCE", APIURL: slackURL + "/api/",
		Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ws := river.NewWorkers()
	workers.Register(ws, workers.Deps{Runner: rc.runner, Store: rc.store, Alerts: d, Now: func() time.Time { return t0 }})
	q, err := queue.Open(rc.pool, queue.Config{Workers: ws})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	req := runner.Request{Window: reconcile.Window{From: t0.Add(-72 * time.Hour), To: t0}, Trigger: reconcile.TriggerManual}
	plan := completePass(t, rc, q, req, 24*time.Hour)
	res, err := rc.store.PassResult(t.Context(), plan.Run.ID)
	if err != nil || !res.Drained || !strings.Contains(res.AlertsError, "invalid_auth") {
		t.Errorf("PassResult: drained %t, alerts error %q, %v; want the drain done and invalid_auth kept", res.Drained, res.AlertsError, err)
	}
	var unsent int
	if err := rc.pool.QueryRow(t.Context(), `SELECT count(*) FROM reconcile.outbox WHERE sent_at IS NULL`).Scan(&unsent); err != nil || unsent == 0 {
		t.Errorf("%d alerts unsent (%v); want them kept in the outbox", unsent, err)
	}
}
