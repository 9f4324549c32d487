package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/report"
	"reconcile/internal/slacktest"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

const (
	testStripeKey = "sk_test_e2eCANARYsecret9f"
	testSlackTok  = "xoxb-e2e-CANARY-token"
)

// env is a test's environment and the fakes behind it.
type env struct {
	t      *testing.T
	vars   map[string]string
	pool   *pgxpool.Pool
	stripe *stripesim.Server
	slack  *slacktest.Server
}

// newEnv is an env on a database holding the reference obligations table
// and the reconcile schema.
func newEnv(t *testing.T) *env {
	t.Helper()
	pool, dbURL := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
	return newEnvOn(t, pool, dbURL)
}

// newUnmigratedEnv is an env whose database holds the reference
// obligations table alone, as before the first `reconcile migrate`.
func newUnmigratedEnv(t *testing.T) *env {
	t.Helper()
	pool, dbURL := pgtest.NewObligations(t)
	return newEnvOn(t, pool, dbURL)
}

func newEnvOn(t *testing.T, pool *pgxpool.Pool, dbURL string) *env {
	t.Helper()
	e := &env{t: t, pool: pool, stripe: stripesim.New(testStripeKey), slack: slacktest.New(testSlackTok)}
	stripeURL, stop, err := e.stripe.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	slackURL, stopSlack, err := e.slack.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopSlack)
	e.vars = map[string]string{
		"DATABASE_URL":    dbURL,
		"STRIPE_API_KEY":  testStripeKey,
		"STRIPE_API_BASE": stripeURL,
		"SLACK_BOT_TOKEN": testSlackTok,
		"SLACK_CHANNEL":   "C0FINANCE",
		"SLACK_API_URL":   slackURL + "/api/",
	}
	return e
}

// run runs the command in-process, as main does, and returns its exit
// status and output.
func (e *env) run(args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(e.t.Context(), 2*time.Minute)
	defer cancel()
	err := run(ctx, args, func(k string) string { return e.vars[k] }, &out, &errb)
	code = exitCode(err, &errb)
	all := out.String() + errb.String()
	for _, secret := range []string{testStripeKey, testSlackTok, "CANARY"} {
		if strings.Contains(all, secret) {
			e.t.Errorf("reconcile %v printed a secret (%q)", args, secret)
		}
	}
	return code, out.String(), errb.String()
}

func (e *env) state(id string) string {
	e.t.Helper()
	var s string
	if err := e.pool.QueryRow(e.t.Context(), "SELECT state FROM obligations WHERE id = $1", id).Scan(&s); err != nil {
		e.t.Fatalf("state of %s: %v", id, err)
	}
	return s
}

func (e *env) add(objs ...reconcile.ProviderObject) {
	e.t.Helper()
	for _, o := range objs {
		key := o.Metadata["_key"]
		delete(o.Metadata, "_key")
		if err := e.stripe.Add(o, key); err != nil {
			e.t.Fatal(err)
		}
	}
}

func usd(a int64) reconcile.Money { return reconcile.Money{Amount: a, Currency: "usd"} }

// The double refund of order 4821 (the story this tool exists for): the response of
// the first refund was lost, the agent retried with a fresh key, and the
// provider refunded twice.
func TestDoubleRefundEndToEnd(t *testing.T) {
	e := newUnmigratedEnv(t)
	now := time.Now().UTC().Truncate(time.Second)
	pgtest.InsertObligations(t, e.pool,
		reconcile.Obligation{ID: "charge:4821", Kind: reconcile.Charge, IdempotencyKey: "k-4821", ProviderID: "ch_4821",
			Money: usd(17800), State: reconcile.Paid, CreatedAt: reconcile.StampOf(now.Add(-70 * time.Hour)), PaidAt: reconcile.StampOf(now.Add(-70 * time.Hour))},
		reconcile.Obligation{ID: "refund:4821:approved-request-7", Kind: reconcile.Refund, IdempotencyKey: "refund:4821:approved-request-7",
			ProviderID: "re_4821b", TargetID: "ch_4821", Money: usd(8900), State: reconcile.Paid,
			CreatedAt: reconcile.StampOf(now.Add(-3 * time.Hour)), PaidAt: reconcile.StampOf(now.Add(-3 * time.Hour))},
		// A refund whose answer was lost, confirmed by the provider under its key.
		reconcile.Obligation{ID: "refund:4821:other", Kind: reconcile.Refund, IdempotencyKey: "rk-other",
			TargetID: "ch_4821", Money: usd(100), State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(now.Add(-2 * time.Hour))},
	)
	e.add(
		reconcile.ProviderObject{ID: "ch_4821", Kind: reconcile.Charge, Money: usd(17800), Status: reconcile.Succeeded,
			AmountRefunded: 17900, Created: reconcile.StampOf(now.Add(-70 * time.Hour)), Metadata: map[string]string{"_key": "k-4821"}},
		reconcile.ProviderObject{ID: "re_4821a", Kind: reconcile.Refund, Money: usd(8900), Status: reconcile.Succeeded,
			Target: "ch_4821", Charge: "ch_4821", Created: reconcile.StampOf(now.Add(-3 * time.Hour)),
			Metadata: map[string]string{"_key": "refund:4821:approved-request-7"}},
		reconcile.ProviderObject{ID: "re_4821b", Kind: reconcile.Refund, Money: usd(8900), Status: reconcile.Succeeded,
			Target: "ch_4821", Charge: "ch_4821", Created: reconcile.StampOf(now.Add(-179 * time.Minute)),
			Metadata: map[string]string{"_key": "agent-retry-5b1e", "note": "card 4242424242424242 <!channel>"}},
		reconcile.ProviderObject{ID: "re_other", Kind: reconcile.Refund, Money: usd(100), Status: reconcile.Succeeded,
			Target: "ch_4821", Charge: "ch_4821", Created: reconcile.StampOf(now.Add(-119 * time.Minute)), Metadata: map[string]string{"_key": "rk-other"}},
	)

	// From a database the reconciler has never seen: `reconcile migrate`
	// makes its schema, and says so; a second one finds nothing to do.
	for _, want := range []string{"schema reconcile migrated to version", "schema reconcile is up to date"} {
		code, stdout, stderr := e.run("migrate")
		if code != 0 || !strings.HasPrefix(stdout, want) {
			t.Fatalf("migrate exited %d printing %q (%s), want 0 and %q", code, stdout, stderr, want)
		}
	}
	code, stdout, stderr := e.run("run", "--since", "720h", "--format", "json")
	if code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	if len(rep.Findings) != 1 {
		t.Fatalf("findings = %+v, want exactly the duplicate", rep.Findings)
	}
	f := rep.Findings[0]
	if f.Kind != "duplicate" || f.Severity != "critical" || f.ObligationID != "refund:4821:approved-request-7" ||
		!slices.Equal(f.ProviderIDs, []string{"re_4821a", "re_4821b"}) || f.Amount != 8900 || f.Currency != "usd" || f.Fingerprint == "" {
		t.Errorf("finding = %+v, want the critical duplicate of refund:4821:approved-request-7 over re_4821a and re_4821b, USD 8900", f)
	}
	wantT := []report.Transition{{ObligationID: "refund:4821:other", From: "CONFIRMATION_UNKNOWN", To: "PAID", ProviderID: "re_other"}}
	if !slices.Equal(rep.Transitions, wantT) {
		t.Errorf("transitions = %+v, want %+v", rep.Transitions, wantT)
	}
	if rep.Counts.Obligations != 3 || rep.Counts.ProviderObjects != 4 {
		t.Errorf("counts = %+v, want 3 obligations and 4 provider objects", rep.Counts)
	}
	for id, want := range map[string]string{"refund:4821:approved-request-7": "PAID", "refund:4821:other": "PAID", "charge:4821": "PAID"} {
		if got := e.state(id); got != want {
			t.Errorf("obligation %s is %s, want %s", id, got, want)
		}
	}
	msgs := e.slack.Messages()
	all := ""
	for _, m := range msgs {
		all += m.Flat
	}
	for _, want := range []string{"refund:4821:approved-request-7", "re_4821a", "re_4821b", "89.00"} {
		if !strings.Contains(all, want) {
			t.Errorf("no Slack message mentions %q; messages:\n%s", want, all)
		}
	}
	for _, leak := range []string{"4242424242424242", "<!channel>"} {
		if strings.Contains(all, leak) {
			t.Errorf("Slack messages carry %q from provider metadata", leak)
		}
	}
	e.stripe.AssertNoWrites(t)

	// A rerun changes nothing and sends nothing.
	before := len(msgs)
	code, stdout, stderr = e.run("run", "--since", "720h", "--format", "json")
	if code != 0 {
		t.Fatalf("rerun exited %d: %s", code, stderr)
	}
	var rep2 report.Report
	if err := json.Unmarshal([]byte(stdout), &rep2); err != nil {
		t.Fatal(err)
	}
	if len(rep2.Transitions) != 0 || len(rep2.Findings) != 1 {
		t.Errorf("rerun: %d transitions, %d findings; want 0 and the same 1", len(rep2.Transitions), len(rep2.Findings))
	}
	if n := len(e.slack.Messages()); n != before {
		t.Errorf("rerun posted %d Slack messages, want none", n-before)
	}

	// --fail-on critical: the report is still printed, exit 3.
	code, stdout, _ = e.run("run", "--since", "720h", "--format", "json", "--fail-on", "critical")
	if code != 3 || !strings.Contains(stdout, `"duplicate"`) {
		t.Errorf("--fail-on critical exited %d with report %q; want 3 and the report", code, stdout)
	}
}

// Slack shows a run's summary and answers internal_error (some of the
// call may have succeeded): the run completes (exit 0, nothing is lost)
// without posting it again, the store keeps the row unsent and of unknown
// outcome, and the next run's copy says it may be a repeat while the
// findings' messages go unmarked.
func TestShownButAnsweredInternalError(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	e.slack.SetFaults(slacktest.Faults{Script: []string{"posted:internal_error"}})
	if code, _, stderr := e.run("run", "--since", "100h"); code != 0 {
		t.Fatalf("run exited %d, want 0: %s", code, stderr)
	}
	msgs := e.slack.Messages()
	if len(msgs) != 1 || e.slack.Requests() != 1 || !strings.Contains(msgs[0].Text, "Reconciliation:") {
		t.Fatalf("%d messages in %d requests, want the summary once in 1", len(msgs), e.slack.Requests())
	}
	var unknown, unsent int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE outcome_unknown), count(*)
		FROM reconcile.outbox WHERE sent_at IS NULL`).Scan(&unknown, &unsent); err != nil || unknown != 1 || unsent < 2 {
		t.Fatalf("outbox: %d unsent, %d of unknown outcome (%v); want the summary unknown, the rest unsent", unsent, unknown, err)
	}

	if code, _, stderr := e.run("run", "--since", "100h"); code != 0 {
		t.Fatalf("second run exited %d, want 0: %s", code, stderr)
	}
	msgs = e.slack.Messages()
	if len(msgs) < 3 || !strings.Contains(msgs[1].Text, "Reconciliation:") {
		t.Fatalf("%d messages, want the summary's copy second and the findings' after", len(msgs))
	}
	for i, m := range msgs {
		if marked := strings.Contains(m.Flat, "Possible repeat"); marked != (i == 1) {
			t.Errorf("message %d says possible repeat: %t, want only the summary's copy to:\n%s", i, marked, m.Text)
		}
	}
	if err := e.pool.QueryRow(t.Context(), "SELECT count(*) FROM reconcile.outbox WHERE sent_at IS NULL").Scan(&unsent); err != nil || unsent != 0 {
		t.Errorf("%d rows unsent after the second run (%v), want none", unsent, err)
	}
}

// Bad input exits 2 (1 for an unreachable database) with one clear line,
// before any provider call.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	malformed := write("malformed.yaml", "stripe: [1,\n")
	unknown := write("unknown.yaml", "stripe:\n  rat: 3\n")
	badCron := write("cron.yaml", "schedule: \"CRON_TZ=UTC\"\n")
	badRate := write("rate.yaml", "stripe:\n  rate: 0\n")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"no command", nil, nil, 2, ""},
		{"unknown command", nil, []string{"frobnicate"}, 2, "unknown command"},
		{"missing DATABASE_URL", map[string]string{"DATABASE_URL": ""}, []string{"run"}, 2, "DATABASE_URL is not set"},
		{"malformed YAML", nil, []string{"run", "--config", malformed}, 2, "config"},
		{"unknown key", nil, []string{"run", "--config", unknown}, 2, "stripe.rat: unknown key"},
		{"bad cron spec", nil, []string{"schedule", "--config", badCron}, 2, "schedule:"},
		{"non-positive rate", nil, []string{"run", "--config", badRate}, 2, "stripe.rate"},
		{"bad duration", nil, []string{"run", "--since", "3 days"}, 2, "--since"},
		{"from after to", nil, []string{"run", "--from", "2026-11-28", "--to", "2026-11-27"}, 2, "is not before"},
		{"since and from", nil, []string{"run", "--since", "1h", "--from", "2026-11-27"}, 2, "not both"},
		{"bad fail-on", nil, []string{"run", "--fail-on", "loud"}, 2, "--fail-on"},
		{"bad format", nil, []string{"run", "--format", "xml"}, 2, "format"},
		{"unknown flag", nil, []string{"run", "--sinse", "1h"}, 2, "sinse"},
		{"missing stripe key", map[string]string{"STRIPE_API_KEY": ""}, []string{"run"}, 2, "STRIPE_API_KEY is not set"},
		{"unreachable database", map[string]string{"DATABASE_URL": "postgres://nobody:CANARYpw@127.0.0.1:1/x?connect_timeout=2"}, []string{"run"}, 1, "database unreachable"},
		{"ack without reason", nil, []string{"ack", "abc"}, 2, "--reason"},
		{"trace without id", nil, []string{"trace"}, 2, "OBLIGATION_ID"},
	}
	for _, tt := range tests {
		saved := maps.Clone(e.vars)
		for k, v := range tt.env {
			e.vars[k] = v
		}
		code, _, stderr := e.run(tt.args...)
		e.vars = saved
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and a line containing %q", tt.name, code, stderr, tt.code, tt.want)
		}
		if lines := strings.Count(strings.TrimSpace(stderr), "\n"); tt.want != "" && lines > 0 {
			t.Errorf("%s: stderr has %d lines, want one: %q", tt.name, lines+1, stderr)
		}
	}
	if n := e.stripe.Stats().Requests; n != 0 {
		t.Errorf("bad input reached the provider with %d requests, want none", n)
	}
	if n := e.slack.Requests(); n != 0 {
		t.Errorf("bad input reached Slack with %d requests, want none", n)
	}
}
