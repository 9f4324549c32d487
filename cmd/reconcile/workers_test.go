//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile/internal/bench"
	"reconcile/internal/pgtest"
	"reconcile/internal/slacktest"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

// workerFleet is a database worked by real `reconcile worker` processes.
type workerFleet struct {
	t     *testing.T
	bin   string
	env   []string
	pool  *pgxpool.Pool
	procs map[int]*exec.Cmd // by pid, those alive
	logs  []*bytes.Buffer
	host  string
}

func (f *workerFleet) start() {
	f.t.Helper()
	cmd := exec.Command(f.bin, "worker", "--config", f.env[0][len("CONFIG="):])
	cmd.Env = f.env[1:]
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.procs[cmd.Process.Pid] = cmd
	f.logs = append(f.logs, &log)
	f.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
			}
		}
	})
}

// killHolder SIGKILLs a worker while it holds a running job of kind,
// the leader (whose death also starts a new leader's rescue at once)
// where it holds one, and starts another worker in its place, as a
// Deployment would. It returns the job's id.
func (f *workerFleet) killHolder(kind string) int64 {
	f.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var fallback struct {
		pid int
		job int64
	}
	for time.Now().Before(deadline) {
		rows, err := f.pool.Query(f.t.Context(), `SELECT j.id, j.attempted_by[array_length(j.attempted_by, 1)],
			coalesce((SELECT leader_id FROM reconcile.river_leader LIMIT 1), '')
			FROM reconcile.river_job j WHERE j.state = 'running' AND j.kind = $1`, kind)
		if err != nil {
			f.t.Fatal(err)
		}
		type held struct {
			id             int64
			client, leader string
		}
		var (
			hs []held
			h  held
		)
		if _, err := pgx.ForEachRow(rows, []any{&h.id, &h.client, &h.leader}, func() error {
			hs = append(hs, h)
			return nil
		}); err != nil {
			f.t.Fatal(err)
		}
		for _, h := range hs {
			var pid int
			if _, err := fmt.Sscanf(strings.TrimPrefix(h.client, f.host+"-"), "%d", &pid); err != nil || f.procs[pid] == nil {
				continue
			}
			if h.client == h.leader || fallback.pid == 0 {
				fallback.pid, fallback.job = pid, h.id
			}
			if h.client == h.leader {
				break
			}
		}
		if fallback.pid != 0 {
			cmd := f.procs[fallback.pid]
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				f.t.Fatal(err)
			}
			_ = cmd.Wait()
			delete(f.procs, fallback.pid)
			f.start()
			return fallback.job
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatalf("no worker held a running %s job within 45s", kind)
	return 0
}

// Three `reconcile worker` processes work a pass over a platform of
// twelve Stripe accounts; one is killed with SIGKILL while it holds a
// fetch job and another while it holds a match-and-apply job. River's
// rescuer hands their jobs on, the pass completes, nothing is applied or
// alerted twice, and the report, the stored findings and transitions and
// what Slack is told equal the one-process run's over the same history
// (docs/design.md, "Passes as jobs").
func TestWorkerProcessesSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs worker processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "reconcile")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	now := time.Now().UTC().Truncate(time.Second)
	p := bench.NewPlatform(12, 150, now)
	srv := stripesim.New(testStripeKey)
	if err := p.Serve(srv); err != nil {
		t.Fatal(err)
	}
	stripeURL, stop, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Cleanup(func() { srv.AssertNoWrites(t) })

	config := filepath.Join(dir, "reconcile.yaml")
	if err := os.WriteFile(config, []byte(`stripe:
  rate: 5000
  accounts: all
obligations:
  columns:
    account: stripe_account
workers:
  enabled: true
  slice: 6h
  fetchers: 2
  appliers: 1
  job_timeout: 3s
  rescue_after: 4s
alerts:
  per_channel_interval: 20ms
`), 0o600); err != nil {
		t.Fatal(err)
	}
	type side struct {
		pool  *pgxpool.Pool
		url   string
		slack *slacktest.Server
		vars  map[string]string
	}
	newSide := func() side {
		pool, url := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
		pgtest.InsertAccountObligations(t, pool, "stripe_account", p.Obligations...)
		sl := slacktest.New(testSlackTok)
		slackURL, stopSlack, err := sl.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stopSlack)
		return side{pool: pool, url: url, slack: sl, vars: map[string]string{
			"DATABASE_URL": url, "STRIPE_API_KEY": testStripeKey, "STRIPE_API_BASE": stripeURL,
			"SLACK_BOT_TOKEN": testSlackTok, "SLACK_CHANNEL": "C0FINANCE", "SLACK_API_URL": slackURL + "/api/",
		}}
	}
	one, dist := newSide(), newSide()

	// The one-process run.
	var oneOut, oneErr bytes.Buffer
	if err := run(t.Context(), []string{"run", "--config", config, "--format", "json"}, func(k string) string { return one.vars[k] },
		&oneOut, &oneErr); err != nil {
		t.Fatalf("one-process run: %v\n%s", err, oneErr.String())
	}

	// The same pass, enqueued for three workers.
	env := []string{"CONFIG=" + config, "PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for k, v := range dist.vars {
		env = append(env, k+"="+v)
	}
	host, _ := os.Hostname()
	f := &workerFleet{t: t, bin: bin, env: env, pool: dist.pool, procs: map[int]*exec.Cmd{}, host: host}
	for range 3 {
		f.start()
	}
	srv.SetFaults(stripesim.Faults{Latency: 15 * time.Millisecond}) // so that workers hold jobs long enough to be caught
	started := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	enq := exec.CommandContext(ctx, bin, "run", "--enqueue", "--config", config, "--format", "json")
	enq.Env = env[1:]
	var enqOut, enqErr bytes.Buffer
	enq.Stdout, enq.Stderr = &enqOut, &enqErr
	if err := enq.Start(); err != nil {
		t.Fatal(err)
	}
	fetchJob := f.killHolder("reconcile_fetch")
	applyJob := f.killHolder("reconcile_apply")
	if err := enq.Wait(); err != nil {
		for i, l := range f.logs {
			t.Logf("worker %d:\n%s", i, l.String())
		}
		t.Fatalf("run --enqueue: %v\n%s", err, enqErr.String())
	}
	took := time.Since(started)
	t.Logf("the pass took %s with two workers killed", took.Round(100*time.Millisecond))

	// Each killed job ran again, on another worker, and completed once.
	for _, id := range []int64{fetchJob, applyJob} {
		var state string
		var attempts int
		if err := dist.pool.QueryRow(t.Context(), `SELECT state::text, attempt FROM reconcile.river_job WHERE id = $1`, id).
			Scan(&state, &attempts); err != nil || state != "completed" || attempts < 2 {
			t.Errorf("killed job %d: %s after %d attempts (%v); want completed by a second attempt", id, state, attempts, err)
		}
	}

	// The same report, but for the run's id and clock.
	norm := regexp.MustCompile(`run_[0-9TZ]+_[0-9a-f]+`)
	stamps := regexp.MustCompile(`("(?:from|to|events_from)": )"[^"]*"`)
	clean := func(b []byte) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(stamps.ReplaceAll(norm.ReplaceAll(b, []byte("RUN")), []byte(`$1"X"`)), &m); err != nil {
			t.Fatalf("report: %v\n%s", err, b)
		}
		return m
	}
	if diff := cmp.Diff(clean(oneOut.Bytes()), clean(enqOut.Bytes())); diff != "" {
		t.Errorf("report (-one process +workers):\n%s", diff)
	}
	// The same stored conclusions, each once.
	for name, q := range map[string]string{
		"findings":    `SELECT concat_ws('|', fingerprint, account, kind, status, content_hash) FROM reconcile.findings ORDER BY fingerprint`,
		"transitions": `SELECT concat_ws('|', obligation_id, from_state, to_state, provider_id) FROM reconcile.transitions ORDER BY obligation_id, id`,
		"outbox":      `SELECT concat_ws('|', event, coalesce(fingerprint, ''), changed, sent_at IS NOT NULL) FROM reconcile.outbox ORDER BY id`,
		"obligations": `SELECT concat_ws('|', id, state, coalesce(provider_id, '')) FROM obligations ORDER BY id`,
	} {
		a, b := rowsOf(t, one.pool, q), rowsOf(t, dist.pool, q)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("%s (-one process +workers):\n%s", name, diff)
		}
		if name == "transitions" || name == "outbox" {
			if c := slices.Compact(slices.Sorted(slices.Values(b))); len(c) != len(b) {
				t.Errorf("%s: %d rows, %d distinct: something was applied or queued twice", name, len(b), len(c))
			}
		}
	}
	// What Slack was told, message by message.
	msgs := func(s *slacktest.Server) []string {
		var out []string
		for _, m := range s.Messages() {
			posted := m.Thread + "\n" + m.Text + "\n" + string(m.Blocks)
			out = append(out, windowLine.ReplaceAllString(norm.ReplaceAllString(posted, "RUN"), "WINDOW"))
		}
		return out
	}
	if a, b := msgs(one.slack), msgs(dist.slack); len(a) < 2 || !cmp.Equal(a, b) {
		t.Errorf("Slack messages (-one process +workers):\n%s", cmp.Diff(a, b))
	}
}

// windowLine is a summary's window, which names the minute each run
// began.
var windowLine = regexp.MustCompile(`(?i)window\*? [0-9: -]+→ [0-9: -]+UTC`)

func rowsOf(t *testing.T, pool *pgxpool.Pool, q string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
