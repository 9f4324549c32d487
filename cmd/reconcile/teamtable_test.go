package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/report"
)

// A team's own table, as teams have it: the state a PostgreSQL
// enum spelled in lower case, a uuid id, times without time zone, the
// currency in upper case, and rows in states the configuration does not
// map. `reconcile run` marks the lost answer PAID (it used to fail every
// run at apply: operator does not exist), finds no amount mismatch for
// USD against Stripe's usd, and reports the unmapped rows by state.
func TestTeamTableEndToEnd(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	const (
		lost  = "0b0f8a52-3c1e-4a47-9d0a-6f2a1b8c9d01"
		paid  = "5e7c1d3a-9b2f-4c8e-a1d6-0f3b2a4c6e02"
		gone  = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c03"
		blank = "11111111-2222-4333-8444-555555555504"
	)
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA payments;
	CREATE TYPE payments.cmd_state AS ENUM ('pending_approval', 'approved', 'executing', 'confirmation_unknown',
		'paid', 'failed', 'requires_review', 'CANCELLED', 'confirmation_unknown ');
	CREATE TABLE payments.commands (
		ref uuid PRIMARY KEY, kind text NOT NULL, request_key varchar(80) NOT NULL UNIQUE, provider text NOT NULL DEFAULT 'stripe',
		provider_id varchar(64), target_id varchar(64), amount integer NOT NULL, currency char(3) NOT NULL,
		status payments.cmd_state NOT NULL, lease_owner text, lease_expires_at timestamp,
		created_at timestamp NOT NULL, updated_at timestamp NOT NULL, paid_at timestamp)`); err != nil {
		t.Fatal(err)
	}
	insert := func(id, key, providerID, state string, created time.Time) {
		t.Helper()
		var pid *string
		if providerID != "" {
			pid = &providerID
		}
		at := created.Format("2006-01-02 15:04:05") // the UTC wall clock
		if _, err := e.pool.Exec(ctx, `INSERT INTO payments.commands (ref, kind, request_key, provider_id, target_id, amount,
			currency, status, created_at, updated_at, paid_at)
			VALUES ($1::text::uuid, 'refund', $2, $3, 'ch_9100', 2500, 'USD', $4::text::payments.cmd_state,
				$5::text::timestamp, $5::text::timestamp, CASE WHEN $4 = 'paid' THEN $5::text::timestamp END)`,
			id, key, pid, state, at); err != nil {
			t.Fatal(err)
		}
	}
	insert(lost, "rk-lost", "", "confirmation_unknown", now.Add(-2*time.Hour))
	insert(paid, "rk-paid", "re_paid", "paid", now.Add(-3*time.Hour))
	insert(gone, "rk-gone", "", "CANCELLED", now.Add(-4*time.Hour))
	insert(blank, "rk-blank", "", "confirmation_unknown ", now.Add(-5*time.Hour))
	e.add(
		reconcile.ProviderObject{ID: "re_lost", Kind: reconcile.Refund, Money: usd(2500), Status: reconcile.Succeeded,
			Target: "ch_9100", Charge: "ch_9100", Created: reconcile.StampOf(now.Add(-119 * time.Minute)), Metadata: map[string]string{"_key": "rk-lost"}},
		reconcile.ProviderObject{ID: "re_paid", Kind: reconcile.Refund, Money: usd(2500), Status: reconcile.Succeeded,
			Target: "ch_9100", Charge: "ch_9100", Created: reconcile.StampOf(now.Add(-179 * time.Minute)), Metadata: map[string]string{"_key": "rk-paid"}},
	)
	cfg := filepath.Join(t.TempDir(), "team.yaml")
	writeConfig(t, cfg, `obligations:
  schema: payments
  table: commands
  columns:
    id: ref
    idempotency_key: request_key
    state: status
  states:
    PENDING_APPROVAL: pending_approval
    APPROVED: approved
    EXECUTING: executing
    CONFIRMATION_UNKNOWN: confirmation_unknown
    PAID: paid
    FAILED: failed
    REQUIRES_REVIEW: requires_review
`)
	code, stdout, stderr := e.run("run", "--config", cfg, "--since", "24h", "--format", "json")
	if code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	wantT := []report.Transition{{ObligationID: lost, From: "CONFIRMATION_UNKNOWN", To: "PAID", ProviderID: "re_lost"}}
	if diff := cmp.Diff(wantT, rep.Transitions); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	for _, f := range rep.Findings {
		if f.Kind == string(reconcile.AmountMismatch) {
			t.Errorf("finding %+v: USD in the table is Stripe's usd", f)
		}
	}
	if diff := cmp.Diff(map[string]int{"CANCELLED": 1, "confirmation_unknown ": 1}, rep.UnmappedStates); diff != "" {
		t.Errorf("unmapped_states (-want +got):\n%s", diff)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil || string(raw["unmapped_states"]) == "" {
		t.Errorf("the JSON report has no unmapped_states field:\n%s", stdout)
	}
	var state, paidAt string
	if err := e.pool.QueryRow(ctx, `SELECT status::text, coalesce(paid_at::text, '') FROM payments.commands WHERE ref = $1::text::uuid`, lost).
		Scan(&state, &paidAt); err != nil {
		t.Fatal(err)
	}
	if state != "paid" || paidAt == "" {
		t.Errorf("lost answer's row = %s, paid at %q; want paid with paid_at set", state, paidAt)
	}
	for _, want := range []string{`"state":"\"CANCELLED\""`, `"state":"\"confirmation_unknown \""`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("logs lack a warning with %s:\n%s", want, stderr)
		}
	}

	// The text report says the same; a run with nothing unmapped says
	// nothing of it (the reference table's default test data).
	code, stdout, stderr = e.run("run", "--config", cfg, "--since", "24h")
	if code != 0 {
		t.Fatalf("text run exited %d: %s", code, stderr)
	}
	if want := `unmapped     2 in states obligations.states does not map, never transitioned: "CANCELLED" 1, "confirmation_unknown " 1`; !strings.Contains(stdout, want) {
		t.Errorf("text report lacks %q:\n%s", want, stdout)
	}
	code, stdout, _ = e.run("run", "--since", "24h", "--format", "json")
	if code != 0 || strings.Contains(stdout, "unmapped_states") {
		t.Errorf("run of the reference table exited %d with report %s; want 0 and no unmapped_states", code, stdout)
	}
}
