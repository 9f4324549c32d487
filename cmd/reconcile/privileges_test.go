package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/report"
)

// readmeSQL is the README's ```sql block that contains marker: the tests
// grant what the README tells people to grant, so that it stays true.
func readmeSQL(t *testing.T, marker string) string { return readmeBlock(t, "sql", marker) }

// readmeBlock is the README's fenced block of lang that contains marker.
func readmeBlock(t *testing.T, lang, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```"+lang+"\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, marker) {
			return block
		}
	}
	t.Fatalf("README.md has no %s block containing %q", lang, marker)
	return ""
}

var roleWord = regexp.MustCompile(`\breconciler\b`)

// newRole creates a login role of its own that holds exactly grants (SQL
// naming the role "reconciler", which CREATE ROLE unless grants does), on
// e's database, dropped at cleanup, and returns e's DATABASE_URL as that
// role.
func newRole(t *testing.T, e *env, grants string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "reconciler_" + hex.EncodeToString(b)
	if !strings.Contains(grants, "CREATE ROLE") {
		grants = "CREATE ROLE reconciler LOGIN;\n" + grants
	}
	if _, err := e.pool.Exec(t.Context(), roleWord.ReplaceAllString(grants, name)); err != nil {
		t.Fatalf("grant: %v\n%s", err, grants)
	}
	// A password of its own: a server that asks for one (the embedded
	// server of a machine without PostgreSQL does) refuses a role with
	// none; under trust it is not asked.
	rand.Read(b)
	password := hex.EncodeToString(b)
	if _, err := e.pool.Exec(t.Context(), "ALTER ROLE "+name+" PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// In the test's database, before pgtest drops it: DROP OWNED
		// revokes what was granted there.
		if _, err := e.pool.Exec(context.Background(), "DROP OWNED BY "+name+"; DROP ROLE "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(e.vars["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	return u.String()
}

// seedUnknownOutcome adds to seedDoubleRefund's data an unknown outcome
// that Stripe's records confirm: the run marks it PAID, writing all four
// columns it may.
func seedUnknownOutcome(t *testing.T, e *env) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	pgtest.InsertObligations(t, e.pool, reconcile.Obligation{ID: "refund:4821:other", Kind: reconcile.Refund,
		IdempotencyKey: "rk-other", TargetID: "ch_4821", Money: usd(100), State: reconcile.ConfirmationUnknown,
		CreatedAt: reconcile.StampOf(now.Add(-2 * time.Hour))})
	e.add(reconcile.ProviderObject{ID: "re_other", Kind: reconcile.Refund, Money: usd(100), Status: reconcile.Succeeded,
		Target: "ch_4821", Charge: "ch_4821", Created: reconcile.StampOf(now.Add(-119 * time.Minute)), Metadata: map[string]string{"_key": "rk-other"}})
}

// The whole flow runs as a role holding exactly the README's grants for
// the reference schema (docs/design.md, "Privileges"): a run that finds,
// marks PAID, records and alerts; its rerun; a trace and the findings.
func TestLeastPrivilegeRunsTheWholeFlow(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	seedUnknownOutcome(t, e)
	e.vars["DATABASE_URL"] = newRole(t, e, readmeSQL(t, "ON obligations TO reconciler"))

	code, stdout, stderr := e.run("run", "--since", "100h", "--format", "json")
	if code != 0 {
		t.Fatalf("run as the least-privileged role exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, f := range rep.Findings {
		kinds = append(kinds, f.Kind)
	}
	if !slices.Contains(kinds, "duplicate") {
		t.Errorf("findings %v, want the duplicate", kinds)
	}
	wantT := report.Transition{ObligationID: "refund:4821:other", From: "CONFIRMATION_UNKNOWN", To: "PAID", ProviderID: "re_other"}
	if !slices.Contains(rep.Transitions, wantT) {
		t.Errorf("transitions %+v, want %+v", rep.Transitions, wantT)
	}
	var paid bool
	if err := e.pool.QueryRow(t.Context(), "SELECT paid_at IS NOT NULL FROM obligations WHERE id = 'refund:4821:other'").Scan(&paid); err != nil || !paid {
		t.Errorf("refund:4821:other paid_at set: %t (%v), want true", paid, err)
	}
	if len(e.slack.Messages()) == 0 {
		t.Error("no Slack message posted")
	}
	var duplicate string
	for _, f := range rep.Findings {
		if f.Kind == "duplicate" {
			duplicate = f.Fingerprint
		}
	}
	for _, args := range [][]string{
		{"run", "--since", "100h"},
		{"run", "--since", "100h", "--dry-run"},
		{"trace", "refund:4821:approved-request-7"},
		{"findings", "--open"},
		{"ack", duplicate, "--reason", "refunded by hand"},
	} {
		if code, _, stderr := e.run(args...); code != 0 {
			t.Errorf("%v as the least-privileged role exited %d: %s", args, code, stderr)
		}
	}
}

// A role missing one grant fails at once, exit 1, naming what is missing,
// before any request to Stripe or Slack, and changes nothing.
func TestMissingGrantFailsBeforeStripe(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	seedUnknownOutcome(t, e)
	admin := e.vars["DATABASE_URL"]
	grants := readmeSQL(t, "ON obligations TO reconciler")
	edit := func(old, new string) string {
		if !strings.Contains(grants, old) {
			t.Fatalf("the README's grants no longer hold %q", old)
		}
		return strings.Replace(grants, old, new, 1)
	}
	tests := []struct {
		name, grants, want string
		dryRunOK           bool
	}{
		{"no UPDATE (paid_at)", edit("provider_id, paid_at, updated_at", "provider_id, updated_at"),
			"UPDATE (paid_at) on public.obligations", true},
		{"no SELECT (lease_owner)", edit("GRANT SELECT ON obligations",
			"GRANT SELECT (id, kind, idempotency_key, provider, provider_id, target_id, amount, currency, state, lease_expires_at, created_at, updated_at, paid_at) ON obligations"),
			"SELECT (lease_owner) on public.obligations", false},
		{"no INSERT on findings", grants + "REVOKE INSERT ON reconcile.findings FROM reconciler;",
			"INSERT on reconcile.findings", true},
		{"no sequences", edit("GRANT USAGE ON ALL SEQUENCES IN SCHEMA reconcile TO reconciler;", ""),
			"USAGE on sequence reconcile.outbox_id_seq, reconcile.transitions_id_seq", true},
		{"no schema", edit("GRANT USAGE ON SCHEMA reconcile TO reconciler;", ""), "USAGE on schema reconcile", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.vars["DATABASE_URL"] = newRole(t, e, tt.grants)
			defer func() { e.vars["DATABASE_URL"] = admin }()
			e.stripe.ResetStats()
			before := e.slack.Requests()
			code, _, stderr := e.run("run", "--since", "100h")
			if code != 1 || !strings.Contains(lastLine(stderr), tt.want) || !strings.Contains(lastLine(stderr), "lacks what a run needs") {
				t.Errorf("exit %d, last line %q; want 1 and a line naming %q", code, lastLine(stderr), tt.want)
			}
			if n := e.stripe.Stats().Requests; n != 0 {
				t.Errorf("%d requests reached Stripe, want none", n)
			}
			if n := e.slack.Requests() - before; n != 0 {
				t.Errorf("%d requests reached Slack, want none", n)
			}
			if s := e.state("refund:4821:other"); s != "CONFIRMATION_UNKNOWN" {
				t.Errorf("refund:4821:other is %s, want it untouched", s)
			}
			// A dry run writes nothing and needs no grant to write.
			if code, _, stderr := e.run("run", "--since", "100h", "--dry-run"); (code == 0) != tt.dryRunOK {
				t.Errorf("dry run exited %d, want success %t: %s", code, tt.dryRunOK, stderr)
			}
		})
	}
}

// The README's grants for a mapped table, with those on the schema
// reconcile, are enough for a run that marks one of its rows PAID.
func TestLeastPrivilegeMappedTable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA payments;
		CREATE TABLE payments.payment_jobs (job_id text PRIMARY KEY, job_kind text NOT NULL, request_key text NOT NULL,
			psp text NOT NULL, psp_ref text, refunds_ref text, amount_minor bigint NOT NULL, currency text NOT NULL,
			status text NOT NULL, worker text, lease_until timestamptz, created timestamptz NOT NULL,
			modified timestamptz NOT NULL, settled timestamptz, notes text)`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO payments.payment_jobs VALUES
		('charge:77', 'charge', 'k-77', 'stripe', NULL, NULL, 4300, 'usd', 'CONFIRMATION_UNKNOWN', NULL, NULL, $1, $1, NULL, 'a note')`,
		now.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.add(reconcile.ProviderObject{ID: "ch_77", Kind: reconcile.Charge, Money: usd(4300), Status: reconcile.Succeeded,
		Created: reconcile.StampOf(now.Add(-119 * time.Minute)), Metadata: map[string]string{"_key": "k-77"}})
	mapping := readmeBlock(t, "yaml", "payment_jobs")
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, cfg, mapping)

	var reconcileGrants []string
	for _, l := range strings.Split(readmeSQL(t, "ON obligations TO reconciler"), "\n") {
		if strings.Contains(l, "reconcile ") {
			reconcileGrants = append(reconcileGrants, l)
		}
	}
	e.vars["DATABASE_URL"] = newRole(t, e, readmeSQL(t, "payments.payment_jobs")+strings.Join(reconcileGrants, "\n"))
	code, stdout, stderr := e.run("run", "--config", cfg, "--since", "100h", "--format", "json")
	if code != 0 {
		t.Fatalf("run over the mapped table exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Transitions) != 1 || rep.Transitions[0].ObligationID != "charge:77" || rep.Transitions[0].To != "PAID" {
		t.Errorf("transitions %+v, want charge:77 to PAID", rep.Transitions)
	}
	var state string
	var settled bool
	if err := e.pool.QueryRow(ctx, "SELECT status, settled IS NOT NULL FROM payments.payment_jobs").Scan(&state, &settled); err != nil ||
		state != "PAID" || !settled {
		t.Errorf("payment_jobs row: status %q, settled %t (%v); want PAID, settled", state, settled, err)
	}
}
