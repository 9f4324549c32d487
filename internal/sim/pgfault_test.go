package sim

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/runner"
	"reconcile/internal/slacktest"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

// busyWorld is a world whose next pass has everything to do: obligations
// to mark PAID, findings to open, alerts to queue.
func busyWorld(t *testing.T, env *Env, seed uint64) *world {
	t.Helper()
	var trace *os.File
	if testing.Verbose() {
		trace = os.Stdout
	}
	w, err := newWorld(t.Context(), env, Options{Seed: seed, Trace: traceWriter(trace)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	w.mirror = true
	steps := []func() error{w.seedWorld, w.lostAnswer, w.lostAnswer, w.lostAnswer, w.manualMovement, w.newObligation}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	w.clock.Advance(10 * time.Minute)
	return w
}

// TestKilledDatabaseSessions kills the reconciler's PostgreSQL sessions
// (pg_terminate_backend) while Apply's transaction has written the
// transitions and findings but not committed: nothing of the pass may
// remain, and the next pass must complete and find everything.
func TestKilledDatabaseSessions(t *testing.T) {
	env := newEnv(t)
	w := busyWorld(t, env, 3)
	ctx := t.Context()

	// Hold the runs table once the pass has begun: Apply writes its run
	// row last, so it waits there with everything else written.
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	w.afterBegin = func(*passCtl) error {
		w.afterBegin = nil
		_, err := tx.Exec(ctx, `LOCK TABLE reconcile.runs IN ACCESS EXCLUSIVE MODE`)
		return err
	}
	type result struct {
		pc  *passCtl
		err error
	}
	done := make(chan result, 1)
	go func() {
		pc, err := w.runPass(w.quiet())
		done <- result{pc, err}
	}()
	killed := 0
	waiting, err := pollUntil(ctx, env.Pool, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock')`, runnerApp)
	if err != nil {
		t.Fatal(err)
	}
	if waiting {
		err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name IN ($1, 'reconcile run lock')) AS t`, runnerApp).Scan(&killed)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if killed < 2 {
		t.Fatalf("terminated %d sessions, want the pass's Apply and its run lock", killed)
	}
	if r.pc.applied != nil || r.pc.applyErr == nil {
		t.Fatalf("the pass whose sessions were killed applied (%v, err %v); want Apply to fail", r.pc.applied != nil, r.pc.applyErr)
	}
	t.Logf("killed %d sessions; the pass failed with: %v", killed, r.pc.runErr)

	// The next pass completes and does what the killed one could not.
	next, err := w.runPass(w.quiet())
	if err != nil {
		t.Fatal(err)
	}
	if next.applied == nil {
		t.Fatalf("the pass after the killed one did not complete: %v", next.runErr)
	}
	if len(next.applied.Transitions) == 0 || next.applied.New == 0 {
		t.Errorf("the next pass applied %d transitions and %d new findings; want some of each", len(next.applied.Transitions), next.applied.New)
	}
	for _, v := range w.rep.Violations {
		t.Errorf("%s", v)
	}
}

// TestDatabaseDownAtStart: with the database unreachable, a pass fails at
// once, before any request to Stripe or Slack.
func TestDatabaseDownAtStart(t *testing.T) {
	stripe := stripesim.New(canaryStripeKey)
	stripeURL, stop, err := stripe.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	slack := slacktest.New(canaryBotToken)
	slackURL, stopSlack, err := slack.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stopSlack()
	cfg, err := pgxpool.ParseConfig("postgres://reconciler:" + canaryDBPass + "@127.0.0.1:1/obligations?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := sources.NewObligations(pool, reconcile.DefaultObligationTable())
	if err != nil {
		t.Fatal(err)
	}
	so := sources.StripeOptionsFrom(config.Default())
	so.APIKey, so.BaseURL = canaryStripeKey, stripeURL
	reader, err := sources.NewStripe(so)
	if err != nil {
		t.Fatal(err)
	}
	ao := alerts.SlackOptionsFrom(config.Default())
	ao.BotToken, ao.Channel, ao.APIURL = canaryBotToken, "C0SIMFIN", slackURL+"/api/"
	d, err := alerts.NewSlack(ao)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner.Runner{Provider: reader, Obligations: obs, Store: st, Alerts: d, Matcher: matcher.OptionsFrom(config.Default().Matcher),
		Now: func() time.Time { return epoch }, Logger: discardLogger(), Mirror: store.NewMirror(pool)}
	for _, dry := range []bool{false, true} {
		_, err = r.Run(t.Context(), runner.Request{Window: reconcile.Window{From: epoch.Add(-lookback), To: epoch}, DryRun: dry})
		if err == nil {
			t.Fatalf("dry=%t: Run with the database down succeeded", dry)
		}
		if strings.Contains(err.Error(), canaryDBPass) {
			t.Errorf("dry=%t: the error names the database password: %v", dry, err)
		}
	}
	if n := stripe.Stats().Requests; n != 0 {
		t.Errorf("%d requests reached Stripe with the database down, want 0", n)
	}
	if n := slack.Requests(); n != 0 {
		t.Errorf("%d requests reached Slack with the database down, want 0", n)
	}
}

// TestCommandDatabaseDown builds the reconcile command and runs it
// against an unreachable database: exit status 1, one line on stderr that
// names no secret, no request to Stripe or Slack.
func TestCommandDatabaseDown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "reconcile")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		// The test binary's race-instrumented packages are in the build
		// cache; a plain build would compile every dependency again.
		args = append(args, "-race")
	}
	build := exec.CommandContext(t.Context(), "go", append(args, "reconcile/cmd/reconcile")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	stripe := stripesim.New(canaryStripeKey)
	stripeURL, stop, err := stripe.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	slack := slacktest.New(canaryBotToken)
	slackURL, stopSlack, err := slack.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stopSlack()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--since", "72h")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL=postgres://reconciler:"+canaryDBPass+"@127.0.0.1:1/obligations?sslmode=disable",
		"STRIPE_API_KEY="+canaryStripeKey, "STRIPE_API_BASE="+stripeURL,
		"SLACK_BOT_TOKEN="+canaryBotToken, "SLACK_CHANNEL=C0SIMFIN", "SLACK_API_URL="+slackURL+"/api/")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	code := cmd.ProcessState.ExitCode()
	t.Logf("exit %d after %s; stderr: %s", code, took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	if code != 1 {
		t.Errorf("exit status %d (%v), want 1", code, err)
	}
	for _, c := range canaries() {
		if strings.Contains(stderr.String()+stdout.String(), c) {
			t.Errorf("the output names canary %q:\n%s%s", c, stdout.String(), stderr.String())
		}
	}
	if n := stripe.Stats().Requests; n != 0 {
		t.Errorf("%d requests reached Stripe with the database down, want 0", n)
	}
	if n := slack.Requests(); n != 0 {
		t.Errorf("%d requests reached Slack with the database down, want 0", n)
	}
}

// TestLockLostMidPass: the run lock's session dies while a pass is in
// Apply, and a second pass takes the lock at once. The fence keeps them
// apart: the second's move of the lock's epoch waits for the first's
// transaction, which, its lock gone, is refused; the second then reads
// and applies everything once, and the first records nothing.
func TestLockLostMidPass(t *testing.T) {
	env := newEnv(t)
	w := busyWorld(t, env, 3)
	ctx := t.Context()

	// SHARE on the runs table lets the passes read everything but keeps
	// Apply from writing its run row, last of all it writes.
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `LOCK TABLE reconcile.runs IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	await := func(what, query string, args ...any) {
		t.Helper()
		ok, err := pollUntil(ctx, env.Pool, query, args...)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("never: %s", what)
		}
	}
	start := func(pc *passCtl) chan error {
		r, err := w.newRunner(pc)
		if err != nil {
			t.Fatal(err)
		}
		r.Alerts = nil // delivery is another matter, checked by I3
		done := make(chan error, 1)
		go func() {
			_, err := r.Run(pc.ctx, runner.Request{Window: pc.plan.window, Trigger: reconcile.TriggerManual})
			done <- err
		}()
		return done
	}
	var runsBefore int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM reconcile.runs`).Scan(&runsBefore); err != nil {
		t.Fatal(err)
	}
	first := w.newPass(w.quiet())
	firstDone := start(first)
	await("the first pass waits to write its run row", `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock')`, runnerApp)
	var killed int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'reconcile run lock') AS t`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("terminated %d run lock sessions, want 1", killed)
	}
	second := w.newPass(w.quiet())
	secondDone := start(second)
	await("the second pass's lock waits for the first's apply", `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'reconcile run lock'
			AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple'))`)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-firstDone; !errors.Is(err, store.ErrLockLost) {
		t.Fatalf("the first pass = %v, want ErrLockLost", err)
	}
	if err := <-secondDone; err != nil {
		t.Fatalf("the second pass: %v", err)
	}
	a, b := first.applied, second.applied
	if a != nil || b == nil {
		t.Fatalf("applied: first %v, second %v; want the second only", a != nil, b != nil)
	}
	t.Logf("first: %v; second: %d transitions, %d new findings, %d alerts (attempts %d)",
		first.applyErr, len(b.Transitions), b.New, b.Alerts, b.Attempts)
	if len(b.Transitions) == 0 || b.New == 0 {
		t.Fatalf("the second pass had nothing to do; pick a busier seed")
	}
	var dupAudit, dupFiring, runsAfter int
	if err := env.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM (SELECT obligation_id FROM reconcile.transitions GROUP BY 1 HAVING count(*) > 1) x),
		(SELECT count(*) FROM (SELECT fingerprint FROM reconcile.outbox WHERE event = 'firing' GROUP BY 1 HAVING count(*) > 1) y),
		(SELECT count(*) FROM reconcile.runs)`).Scan(&dupAudit, &dupFiring, &runsAfter); err != nil {
		t.Fatal(err)
	}
	if dupAudit+dupFiring > 0 {
		t.Errorf("%d obligations with two audit rows, %d findings alerted twice; want none", dupAudit, dupFiring)
	}
	if runsAfter != runsBefore+1 {
		t.Errorf("the two passes left %d run rows, want 1: the second's (the first, its lock lost, records nothing)", runsAfter-runsBefore)
	}
	// The second pass's transitions into the ledger, then an ordinary
	// pass and its rerun, checked like any other.
	for _, tr := range b.Transitions {
		adopt(w.led.obls[tr.ObligationID], tr, second.start)
	}
	if _, err := w.runPass(w.quiet()); err != nil {
		t.Fatal(err)
	}
	for _, v := range w.rep.Violations {
		t.Errorf("%s", v)
	}
}
