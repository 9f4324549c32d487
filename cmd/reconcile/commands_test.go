package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/report"
	"reconcile/internal/slacktest"
	"reconcile/internal/store/storetest"
	"reconcile/internal/trace"
)

// seedDoubleRefund loads order 4821's story and a stale lease. The charge
// has no obligation here: it is an orphan, which makes three findings of
// three severities.
func seedDoubleRefund(t *testing.T, e *env) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	pgtest.InsertObligations(t, e.pool,
		reconcile.Obligation{ID: "refund:4821:approved-request-7", Kind: reconcile.Refund, IdempotencyKey: "refund:4821:approved-request-7",
			ProviderID: "re_4821b", TargetID: "ch_4821", Money: usd(8900), State: reconcile.Paid,
			CreatedAt: reconcile.StampOf(now.Add(-3 * time.Hour)), PaidAt: reconcile.StampOf(now.Add(-3 * time.Hour))},
		reconcile.Obligation{ID: "charge:5400", Kind: reconcile.Charge, IdempotencyKey: "k-5400", Money: usd(700),
			State: reconcile.Executing, LeaseOwner: "worker-7", LeaseExpiresAt: reconcile.StampOf(now.Add(-3 * time.Hour)), CreatedAt: reconcile.StampOf(now.Add(-4 * time.Hour))},
	)
	e.add(
		reconcile.ProviderObject{ID: "ch_4821", Kind: reconcile.Charge, Money: usd(17800), Status: reconcile.Succeeded,
			Created: reconcile.StampOf(now.Add(-70 * time.Hour)), Metadata: map[string]string{"_key": "k-4821"}},
		reconcile.ProviderObject{ID: "re_4821a", Kind: reconcile.Refund, Money: usd(8900), Status: reconcile.Succeeded,
			Target: "ch_4821", Charge: "ch_4821", Created: reconcile.StampOf(now.Add(-3 * time.Hour)),
			Metadata: map[string]string{"_key": "refund:4821:approved-request-7"}},
		reconcile.ProviderObject{ID: "re_4821b", Kind: reconcile.Refund, Money: usd(8900), Status: reconcile.Succeeded,
			Target: "ch_4821", Charge: "ch_4821", Created: reconcile.StampOf(now.Add(-179 * time.Minute)), Metadata: map[string]string{"_key": "retry-1"}},
	)
}

func TestDryRunWritesNothing(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	before := storetest.Take(t, e.pool, reconcile.DefaultObligationTable())
	code, stdout, stderr := e.run("run", "--since", "100h", "--dry-run", "--format", "json")
	if code != 0 {
		t.Fatalf("dry run exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || !rep.DryRun || len(rep.Findings) != 3 {
		t.Fatalf("dry run report = %+v (%v), want dry_run and 3 findings", rep, err)
	}
	after := storetest.Take(t, e.pool, reconcile.DefaultObligationTable())
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("dry run changed the database:\n%s", diff)
	}
	if n := len(e.slack.Messages()); n != 0 {
		t.Errorf("dry run posted %d Slack messages, want none", n)
	}
}

func TestTextReport(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	code, stdout, stderr := e.run("run", "--since", "100h")
	if code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	for _, want := range []string{"findings     3 (1 critical, 1 high, 1 warning)",
		"at risk      Paid out too much: USD 89.00\n", "at risk      Collected too little or too much: USD 178.00\n",
		"at risk      Unconfirmed (may or may not have moved): USD 7.00\n",
		"CRITICAL", "duplicate", "refund:4821:approved-request-7", "HIGH", "orphan", "ch_4821", "WARNING", "stale_lease",
		"reconcile trace charge:5400"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text report lacks %q:\n%s", want, stdout)
		}
	}
	// Logs on stderr are JSON lines with the run id on each one.
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		if id, _ := m["run_id"].(string); !strings.HasPrefix(id, "run_") {
			t.Errorf("log line without run_id: %q", line)
		}
	}
}

// Two charges of 9,223,372,036,854,775,807 cents that no obligation
// accounts for are exact alone; their sum at risk is exact too, in the
// text report and in Slack's summary, not wrapped to USD -0.02 (docs/design.md,
// "Findings").
func TestAtRiskBeyondInt64(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Second)
	for _, id := range []string{"ch_big1", "ch_big2"} {
		e.add(reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: usd(math.MaxInt64), Status: reconcile.Succeeded,
			Created: reconcile.StampOf(now.Add(-time.Hour)), Metadata: map[string]string{"_key": "k-" + id}})
	}
	code, stdout, stderr := e.run("run", "--since", "2h")
	if code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	const want = "USD 184,467,440,737,095,516.14"
	if !strings.Contains(stdout, "  at risk      Collected too little or too much: "+want+"\n") {
		t.Errorf("text report's money at risk is not %s:\n%s", want, stdout)
	}
	var summary string
	for _, m := range e.slack.Messages() {
		if strings.Contains(m.Flat, "Money at risk") {
			summary = m.Flat
		}
	}
	if !strings.Contains(summary, want) {
		t.Errorf("Slack summary's money at risk is not %s: %q", want, summary)
	}
}

func TestFindingsAckAndTrace(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	if code, _, stderr := e.run("run", "--since", "100h"); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}

	code, stdout, stderr := e.run("findings", "--open", "--format", "json")
	if code != 0 {
		t.Fatalf("findings exited %d: %s", code, stderr)
	}
	var fs []report.Finding
	if err := json.Unmarshal([]byte(stdout), &fs); err != nil {
		t.Fatalf("findings --format json: %v\n%s", err, stdout)
	}
	if len(fs) != 3 || fs[0].Kind != "duplicate" || fs[0].Status != "open" {
		t.Fatalf("findings = %+v, want 3 open, the duplicate first", fs)
	}
	dup := fs[0]

	// --kind and --target narrow the list; --target matches a finding's
	// target, its obligation or any of its Stripe ids.
	for _, tt := range []struct {
		args []string
		want []string // kinds, in order
	}{
		{[]string{"--kind", "orphan"}, []string{"orphan"}},
		{[]string{"--target", "re_4821b"}, []string{"duplicate"}},
		{[]string{"--target", "charge:5400"}, []string{"stale_lease"}},
		{[]string{"--kind", "duplicate", "--target", "charge:5400"}, nil},
	} {
		code, out, stderr := e.run(append([]string{"findings", "--open", "--format", "json"}, tt.args...)...)
		var got []report.Finding
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("findings %v exited %d: %s%s", tt.args, code, out, stderr)
		}
		var kinds []string
		for _, f := range got {
			kinds = append(kinds, f.Kind)
		}
		if !slices.Equal(kinds, tt.want) {
			t.Errorf("findings %v = %v, want %v", tt.args, kinds, tt.want)
		}
	}
	if code, _, stderr := e.run("findings", "--kind", "bogus"); code != 2 || !strings.Contains(stderr, "bogus") {
		t.Errorf("findings --kind bogus exited %d (%s), want 2 naming the kind", code, stderr)
	}

	code, stdout, _ = e.run("findings", "--format", "csv")
	rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
	if code != 0 || err != nil || len(rows) != 4 {
		t.Fatalf("findings --format csv: exit %d, %v, %d rows:\n%s", code, err, len(rows), stdout)
	}
	header := strings.Join(rows[0], ",")
	if !strings.Contains(header, "currency,amount") {
		t.Errorf("CSV header %q lacks currency and amount columns", header)
	}
	var dupRow []string
	for _, r := range rows[1:] {
		if r[0] == dup.Fingerprint {
			dupRow = r
		}
	}
	if dupRow == nil || dupRow[6] != "USD" || dupRow[7] != "89.00" {
		t.Errorf("CSV row of the duplicate = %q, want USD and 89.00 in major units", dupRow)
	}

	// trace shows the row, both refunds and their routes, the keys, the findings and the alerts.
	code, stdout, stderr = e.run("trace", "refund:4821:approved-request-7", "--format", "json")
	if code != 0 {
		t.Fatalf("trace exited %d: %s", code, stderr)
	}
	var tr trace.Trace
	if err := json.Unmarshal([]byte(stdout), &tr); err != nil {
		t.Fatalf("trace --format json: %v\n%s", err, stdout)
	}
	routes := map[string]string{}
	for _, o := range tr.Objects {
		routes[o.ID] = o.Route
	}
	if routes["re_4821a"] != string(reconcile.RouteIdempotencyKey) || routes["re_4821b"] != string(reconcile.RouteProviderID) {
		t.Errorf("trace routes = %v, want re_4821a by idempotency key and re_4821b by provider id", routes)
	}
	if len(tr.Keys) == 0 || tr.Keys[0].Key == "" || !strings.HasPrefix(tr.Keys[0].RequestID, "req_") {
		t.Errorf("trace shows no idempotency keys with their request ids: %+v", tr.Keys)
	}
	if len(tr.Findings) != 1 || tr.Findings[0].Kind != "duplicate" || len(tr.Current) != 1 {
		t.Errorf("trace findings = %+v now %+v, want the duplicate", tr.Findings, tr.Current)
	}
	if len(tr.Alerts) == 0 || tr.Alerts[0].SentAt == "" {
		t.Errorf("trace alerts = %+v, want the sent firing alert", tr.Alerts)
	}
	if tr.Obligation.State != "PAID" || tr.Obligation.Amount != 8900 {
		t.Errorf("trace obligation = %+v", tr.Obligation)
	}
	code, stdout, _ = e.run("trace", "refund:4821:approved-request-7")
	if code != 0 || !strings.Contains(stdout, "linked by idempotency key") || !strings.Contains(stdout, "re_4821b") {
		t.Errorf("trace text (exit %d):\n%s", code, stdout)
	}
	if code, _, stderr := e.run("trace", "refund:nope"); code != 1 || !strings.Contains(stderr, "no obligation") {
		t.Errorf("trace of an unknown obligation: exit %d, %q; want 1 and a clear line", code, stderr)
	}
	// A Stripe id leads to its obligation: as its provider_id (re_4821b),
	// through the stored duplicate that names it (re_4821a, created under
	// the obligation's key but no obligation's provider_id), or as the one
	// obligation's target (ch_4821).
	for _, id := range []string{"re_4821b", "re_4821a", "ch_4821"} {
		code, stdout, stderr := e.run("trace", id, "--format", "json")
		var got trace.Trace
		if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Obligation.ID != "refund:4821:approved-request-7" {
			t.Errorf("trace %s: exit %d, obligation %q (%s); want refund:4821:approved-request-7", id, code, got.Obligation.ID, stderr)
		}
	}
	if code, _, stderr := e.run("trace", "re_nobody"); code != 1 || !strings.Contains(stderr, "names it as a Stripe id") {
		t.Errorf("trace of an unknown Stripe id: exit %d, %q; want 1 saying nothing names it", code, stderr)
	}

	// ack: an acknowledged finding is not repeated after the repeat interval.
	code, stdout, stderr = e.run("ack", dup.Fingerprint[:8], "--reason", "customer returned USD 89.00", "--by", "finance@example")
	if code != 0 || !strings.Contains(stdout, dup.Fingerprint) {
		t.Fatalf("ack exited %d: %s %s", code, stdout, stderr)
	}
	code, stdout, _ = e.run("findings", "--open")
	if code != 0 || !strings.Contains(stdout, "open, acknowledged") {
		t.Errorf("findings after ack:\n%s", stdout)
	}
	if code, _, stderr := e.run("ack", "zzzzzzzz", "--reason", "x"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("ack of an unknown fingerprint: exit %d, %q", code, stderr)
	}
}

func TestConfigCheckRedacts(t *testing.T) {
	e := newEnv(t)
	e.vars["DATABASE_URL"] = "postgres://app:CANARYpw@db.internal:5432/payments"
	e.vars["SLACK_WEBHOOK_URL"] = "https://hooks.slack.com/services/T0/B0/CANARYhook"
	e.vars["SLACK_SIGNING_SECRET"] = "CANARYsigning"
	code, stdout, stderr := e.run("config", "check")
	if code != 0 {
		t.Fatalf("config check exited %d: %s", code, stderr)
	}
	for _, want := range []string{"lookback: 72h0m0s", "rate: 25", "DATABASE_URL: postgres://app:<redacted>@db.internal:5432/payments",
		"STRIPE_API_KEY: sk_test_… <redacted>", "SLACK_BOT_TOKEN: <redacted>", "SLACK_WEBHOOK_URL: https://hooks.slack.com/",
		"SLACK_SIGNING_SECRET: <redacted>"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("config check lacks %q:\n%s", want, stdout)
		}
	}
}

// The scheduler validates its spec, runs passes, serves /metrics and
// /healthz, and on SIGTERM waits for the running pass and returns nil.
func TestSchedule(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	sc := e.schedule(t)
	body := sc.metrics(t, `reconcile_runs_total{status="completed"}`)
	for _, want := range []string{`reconcile_runs_total{status="completed"}`, `reconcile_findings{kind="duplicate",severity="critical"} 1`,
		"reconcile_last_success_timestamp_seconds", "reconcile_provider_objects_fetched_total", "reconcile_run_duration_seconds"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if resp, err := http.Get("http://" + sc.addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz: %v %v", resp, err)
	}
	if logs := sc.stop(t); !strings.Contains(logs, "stopped") {
		t.Errorf("schedule logs lack the stop:\n%s", logs)
	}
}

// A scheduled pass whose alerts cannot be delivered (an error code this
// version does not know) counts a delivery failure under the code in
// /metrics and logs one error line, the pass's, naming it.
func TestScheduleUndeliverable(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	e.slack.SetFaults(slacktest.Faults{Error: "shiny_new_refusal"})
	sc := e.schedule(t)
	sc.metrics(t, `reconcile_alert_delivery_failures_total{code="shiny_new_refusal"}`)
	logs := sc.stop(t)
	passes, loud := 0, 0
	for _, l := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		if rec["msg"] == "run started" {
			passes++
		}
		if rec["level"] == "ERROR" {
			loud++
			if rec["msg"] != "alerts cannot be delivered" || rec["code"] != "shiny_new_refusal" {
				t.Errorf("error line %v, want \"alerts cannot be delivered\" with code shiny_new_refusal", rec)
			}
		}
	}
	if passes == 0 || loud != passes {
		t.Errorf("%d passes logged %d error lines, want one each:\n%s", passes, loud, logs)
	}
}

// scheduled is `reconcile schedule` running on e, every second, with
// /metrics on addr.
type scheduled struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	stderr *bytes.Buffer
}

func (e *env) schedule(t *testing.T) *scheduled {
	t.Helper()
	addr := pgtest.ClosedPort(t)
	cfgPath := t.TempDir() + "/c.yaml"
	writeConfig(t, cfgPath, fmt.Sprintf("schedule: \"@every 1s\"\nlookback: 100h\nmetrics:\n  listen: %q\n", addr))
	ctx, cancel := context.WithCancel(t.Context())
	sc := &scheduled{addr: addr, cancel: cancel, done: make(chan error, 1), stderr: &bytes.Buffer{}}
	go func() {
		sc.done <- run(ctx, []string{"schedule", "--config", cfgPath}, func(k string) string { return e.vars[k] }, io.Discard, sc.stderr)
	}()
	return sc
}

// metrics waits for /metrics to show want and returns what it showed.
func (sc *scheduled) metrics(t *testing.T, want string) string {
	t.Helper()
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + sc.addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if strings.Contains(body, want) {
				return body
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("/metrics never showed %q:\n%s", want, body)
	return body
}

// stop does what SIGTERM does through signal.NotifyContext in main, checks
// that the scheduler returned nil (exit 0), and returns its logs.
func (sc *scheduled) stop(t *testing.T) string {
	t.Helper()
	sc.cancel()
	select {
	case err := <-sc.done:
		if err != nil {
			t.Errorf("schedule returned %v after SIGTERM, want nil (exit 0)", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("schedule did not stop after SIGTERM")
	}
	return sc.stderr.String()
}

func writeConfig(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The demo needs nothing from the environment and tells the whole story.
func TestDemo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"demo"}, func(k string) string {
		if k == "DATABASE_URL" {
			return pgtest.AdminURL() // the test server; the demo makes and drops a database of its own there
		}
		return ""
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"Paid twice", "Paid out too much: USD 99.00", "confirmed from Stripe's records and marked PAID (USD 43.00)", "refund:4821:approved-request-7", "re_4821a", "re_4821b", "USD 89.00",
		"refund:5100:1   CONFIRMATION_UNKNOWN → PAID", "stale_lease", "orphan", "re_5600x", "amount_mismatch", "EUR 9.00",
		"A second run over the same data: 4 findings still open, 0 new alerts, 0 transitions."} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// The demo's Slack messages, as the Sink renders their blocks, are a
	// golden: run ids and clock times aside, they are what finance reads.
	i, j := strings.Index(out, "Slack, as finance sees it:"), strings.Index(out, "The report:")
	if i < 0 || j < i {
		t.Fatalf("demo output has no Slack section:\n%s", out)
	}
	slackText := regexp.MustCompile(`run_\d{8}T\d{6}Z_[0-9a-f]{8}`).ReplaceAllString(out[i:j], "RUN_ID")
	slackText = regexp.MustCompile(`\d{4}-\d{2}-\d{2} \d{2}:\d{2}`).ReplaceAllString(slackText, "TIME")
	golden := filepath.Join("testdata", "demo_slack.golden.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(slackText), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want, err := os.ReadFile(golden); err != nil {
		t.Errorf("read %s (go test -update writes it): %v", golden, err)
	} else if diff := cmp.Diff(string(want), slackText); diff != "" {
		t.Errorf("demo's Slack messages changed (-want +got):\n%s", diff)
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out)
	}
}

// A demo that cannot create its database says why, in one line without
// the password, and exits 1.
func TestDemoWithoutDatabase(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"demo"}, func(k string) string {
		if k == "DATABASE_URL" {
			return "postgres://demo:SECRETpw@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
		}
		return ""
	}, &stdout, &stderr)
	if err == nil {
		t.Fatal("demo with no database succeeded")
	}
	var line bytes.Buffer
	code := exitCode(err, &line)
	msg := line.String()
	if !strings.Contains(msg, "no PostgreSQL") || !strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "SECRETpw") ||
		strings.Count(msg, "\n") != 1 || code != 1 {
		t.Errorf("demo error %q (exit %d): want one line naming the server's failure, without the password, exit 1", msg, code)
	}
}

// `demo --keep` leaves its database, says where and how to drop it, and
// findings, ack and trace then work on it.
func TestDemoKeep(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"demo", "--keep"}, func(k string) string {
		if k == "DATABASE_URL" {
			return pgtest.AdminURL()
		}
		return ""
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("demo --keep: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`export DATABASE_URL='([^']+)'`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("demo --keep printed no DATABASE_URL:\n%s", stdout.String())
	}
	kept := m[1]
	// A password in the server's URL is not printed; the newcomer puts
	// their own back, as the test does.
	admin0, err := url.Parse(pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	if pw, ok := admin0.User.Password(); ok {
		if strings.Contains(stdout.String(), ":"+pw+"@") {
			t.Fatalf("demo --keep printed the server's password:\n%s", stdout.String())
		}
		u := *admin0
		u.Path = kept[strings.LastIndex(kept, "/"):strings.Index(kept, "?")]
		kept = u.String()
	}
	name := kept[strings.LastIndex(kept, "/")+1 : strings.Index(kept, "?")]
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		admin.Close(context.Background())
	})
	if !strings.Contains(stdout.String(), "dropdb "+name) {
		t.Errorf("demo --keep does not say how to drop %s:\n%s", name, stdout.String())
	}
	env := func(k string) string {
		if k == "DATABASE_URL" {
			return kept
		}
		return ""
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"findings", "--open", "--kind", "duplicate", "--format", "json"}, env, &out, io.Discard); err != nil {
		t.Fatalf("findings on the kept database: %v", err)
	}
	var fs []report.Finding
	if err := json.Unmarshal(out.Bytes(), &fs); err != nil || len(fs) != 1 || fs[0].ObligationID != "refund:4821:approved-request-7" {
		t.Fatalf("findings on the kept database = %s (%v), want the double refund", out.String(), err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"ack", fs[0].Fingerprint, "--reason", "tried on the demo", "--by", "newcomer"}, env, &out, io.Discard); err != nil {
		t.Errorf("ack on the kept database: %v", err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"trace", "re_4821a"}, env, &out, io.Discard); err != nil || !strings.Contains(out.String(), "refund:4821:approved-request-7") {
		t.Errorf("trace on the kept database: %v\n%s", err, out.String())
	}

	// Without --keep nothing is said to be kept.
	stdout.Reset()
	if err := run(t.Context(), []string{"demo"}, func(k string) string {
		if k == "DATABASE_URL" {
			return pgtest.AdminURL()
		}
		return ""
	}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "export DATABASE_URL") {
		t.Errorf("demo without --keep printed a DATABASE_URL")
	}
}
