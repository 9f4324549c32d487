package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/pgtest"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// teamTable is one team's obligations table: the SQL types of its
// columns (test constants, pasted into the DDL), the SQL creating those
// types first, and how the configuration maps it.
type teamTable struct {
	name   string
	schema string // SQL identifier as written in DDL: payments, "TeamPay"
	setup  string // creates the schema's types and domains
	// column types
	id, key, providerID, targetID, amount, currency, state, times string
	// ids of the three rows: marked PAID, changed by a worker meanwhile,
	// in a state the configuration does not map
	pay, skip, unmapped string
	cfg                 func(*reconcile.ObligationTable) // the team's mapping, from the default
	currencyRaw         string                           // as stored; read as "usd"
	wantKinds           map[string]reconcile.TypeKind    // of some columns, by field
}

// lowerStates maps each state to its name in lower case.
func lowerStates(t *reconcile.ObligationTable) {
	for _, s := range reconcile.States {
		t.States[s] = strings.ToLower(string(s))
	}
}

const (
	uuidPay      = "0b0f8a52-3c1e-4a47-9d0a-6f2a1b8c9d01"
	uuidSkip     = "5e7c1d3a-9b2f-4c8e-a1d6-0f3b2a4c6e02"
	uuidUnmapped = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c03"
	enumValues   = `'PENDING_APPROVAL', 'APPROVED', 'EXECUTING', 'CONFIRMATION_UNKNOWN', 'PAID', 'FAILED', 'REQUIRES_REVIEW', 'CANCELLED'`
)

// teamTables is the matrix: one table per kind of column type a team may
// use, the reference types for comparison, and one mixing them all with
// names that survive only quoted.
func teamTables() []teamTable {
	text := teamTable{
		schema: "payments", setup: "",
		id: "text", key: "text", providerID: "text", targetID: "text", amount: "bigint", currency: "text",
		state: "text", times: "timestamptz",
		pay: "refund:4821:pay", skip: "refund:4821:skip", unmapped: "refund:4821:cancelled",
		currencyRaw: "usd",
	}
	with := func(name string, change func(*teamTable)) teamTable {
		tt := text
		tt.name = name
		change(&tt)
		return tt
	}
	return []teamTable{
		with("text everything (reference)", func(tt *teamTable) {
			tt.wantKinds = map[string]reconcile.TypeKind{"state": reconcile.TypeString, "paid_at": reconcile.TypeTimestamptz}
		}),
		with("enum state", func(tt *teamTable) {
			tt.setup = `CREATE TYPE payments.cmd_state AS ENUM (` + enumValues + `)`
			tt.state = "payments.cmd_state"
			tt.wantKinds = map[string]reconcile.TypeKind{"state": reconcile.TypeEnum}
		}),
		with("domain state", func(tt *teamTable) {
			tt.setup = `CREATE DOMAIN payments.state_name AS text CHECK (VALUE ~ '^[A-Z_]+$')`
			tt.state = "payments.state_name"
			tt.wantKinds = map[string]reconcile.TypeKind{"state": reconcile.TypeString}
		}),
		with("varchar(n) columns", func(tt *teamTable) {
			tt.id, tt.key, tt.providerID, tt.targetID = "varchar(64)", "varchar(100)", "varchar(40)", "varchar(40)"
			tt.currency, tt.state = "varchar(3)", "varchar(24)"
			tt.currencyRaw = "USD"
		}),
		with("uuid id", func(tt *teamTable) {
			tt.id = "uuid"
			tt.pay, tt.skip, tt.unmapped = uuidPay, uuidSkip, uuidUnmapped
			tt.wantKinds = map[string]reconcile.TypeKind{"id": reconcile.TypeUUID}
		}),
		with("int4 amount", func(tt *teamTable) {
			tt.amount = "integer"
			tt.wantKinds = map[string]reconcile.TypeKind{"amount": reconcile.TypeInteger}
		}),
		with("numeric(12,0) amount", func(tt *teamTable) {
			tt.amount = "numeric(12,0)"
			tt.wantKinds = map[string]reconcile.TypeKind{"amount": reconcile.TypeNumeric}
		}),
		with("domain over bigint amount", func(tt *teamTable) {
			tt.setup = `CREATE DOMAIN payments.minor_units AS bigint CHECK (VALUE > 0)`
			tt.amount = "payments.minor_units"
			tt.wantKinds = map[string]reconcile.TypeKind{"amount": reconcile.TypeInteger}
		}),
		with("timestamp without time zone times", func(tt *teamTable) {
			tt.times = "timestamp"
			tt.wantKinds = map[string]reconcile.TypeKind{"paid_at": reconcile.TypeTimestamp, "lease_expires_at": reconcile.TypeTimestamp}
		}),
		with("mixed, quoted names", func(tt *teamTable) {
			tt.schema = `"TeamPay"`
			tt.setup = `CREATE TYPE "TeamPay"."Cmd State" AS ENUM ('pending_approval', 'approved', 'executing',
				'confirmation_unknown', 'paid', 'failed', 'requires_review', 'CANCELLED');
				CREATE DOMAIN "TeamPay"."Stripe Ref" AS varchar(64) CHECK (VALUE LIKE '__\_%');
				CREATE DOMAIN "TeamPay".minor AS numeric(14,0) CHECK (VALUE > 0)`
			tt.id, tt.key, tt.providerID, tt.targetID = "uuid", "varchar(80)", `"TeamPay"."Stripe Ref"`, "varchar(64)"
			tt.amount, tt.currency, tt.state, tt.times = `"TeamPay".minor`, "char(3)", `"TeamPay"."Cmd State"`, "timestamp(3)"
			tt.pay, tt.skip, tt.unmapped = uuidPay, uuidSkip, uuidUnmapped
			tt.currencyRaw = "USD"
			tt.cfg = func(t *reconcile.ObligationTable) {
				t.Schema, t.Table = "TeamPay", "PaymentCommands"
				t.Columns = reconcile.ObligationColumns{ID: "Ref", Kind: "Type", IdempotencyKey: "RequestKey", Provider: "PSP",
					ProviderID: "PSPRef", TargetID: "RefundedRef", Amount: "AmountMinor", Currency: "Ccy", State: "Status",
					LeaseOwner: "Worker", LeaseExpiresAt: "LeaseUntil", CreatedAt: "InsertedAt", UpdatedAt: "ModifiedAt",
					PaidAt: "SettledAt"}
				lowerStates(t)
			}
			tt.wantKinds = map[string]reconcile.TypeKind{"id": reconcile.TypeUUID, "state": reconcile.TypeEnum,
				"provider_id": reconcile.TypeString, "amount": reconcile.TypeNumeric, "paid_at": reconcile.TypeTimestamp}
		}),
	}
}

// TestTeamTables runs every table of the matrix through what a pass does
// to it: Check, Read, and Apply of a PAID transition by compare-and-set
// next to one whose row a worker changed since the read. Every session
// runs in a TimeZone far from UTC, so that any conversion between
// timestamp and timestamptz on the way would move a time by five hours.
func TestTeamTables(t *testing.T) {
	t.Parallel()
	for _, tt := range teamTables() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runTeamTable(t, tt)
		})
	}
}

func runTeamTable(t *testing.T, tt teamTable) {
	ctx := t.Context()
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	created := now.Add(-2 * time.Hour)
	lease := now.Add(-time.Hour) // expired: the matcher may mark it
	_, dbURL := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = "America/New_York"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	table := reconcile.DefaultObligationTable()
	table.Schema, table.Table = strings.Trim(tt.schema, `"`), "commands"
	if tt.cfg != nil {
		tt.cfg(&table)
	}
	raw := func(s reconcile.State) string { return table.Raw(s) }
	c := table.Columns
	col := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	name := pgx.Identifier{table.Schema, table.Table}.Sanitize()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%.80s: %v", sql, err)
		}
	}
	exec(`CREATE SCHEMA ` + tt.schema)
	if tt.setup != "" {
		exec(tt.setup)
	}
	exec(fmt.Sprintf(`CREATE TABLE %s (%s %s PRIMARY KEY, %s text NOT NULL, %s %s NOT NULL UNIQUE, %s text NOT NULL DEFAULT 'stripe',
		%s %s, %s %s, %s %s NOT NULL, %s %s NOT NULL, %s %s NOT NULL, %s text, %s %s,
		%s %s NOT NULL, %s %s NOT NULL, %s %s)`, name,
		col(c.ID), tt.id, col(c.Kind), col(c.IdempotencyKey), tt.key, col(c.Provider),
		col(c.ProviderID), tt.providerID, col(c.TargetID), tt.targetID, col(c.Amount), tt.amount,
		col(c.Currency), tt.currency, col(c.State), tt.state, col(c.LeaseOwner), col(c.LeaseExpiresAt), tt.times,
		col(c.CreatedAt), tt.times, col(c.UpdatedAt), tt.times, col(c.PaidAt), tt.times))
	// Values go in as text, cast to each column's type; times as the UTC
	// wall clock for a timestamp, with +00 for a timestamptz.
	stamp := func(at time.Time) string {
		if strings.HasPrefix(tt.times, "timestamptz") {
			return at.UTC().Format("2006-01-02 15:04:05+00")
		}
		return at.UTC().Format("2006-01-02 15:04:05")
	}
	insert := fmt.Sprintf(`INSERT INTO %s (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) VALUES
		($1::text::%s, 'refund', $2::text::%s, 'ch_4821'::text::%s, $3::text::%s, $4::text::%s, $5::text::%s,
		 $6::text::%s, $7::text::%s, $7::text::%s, $8)`, name,
		col(c.ID), col(c.Kind), col(c.IdempotencyKey), col(c.TargetID), col(c.Amount), col(c.Currency), col(c.State),
		col(c.LeaseExpiresAt), col(c.CreatedAt), col(c.UpdatedAt), col(c.LeaseOwner),
		tt.id, tt.key, tt.targetID, tt.amount, tt.currency, tt.state, tt.times, tt.times, tt.times)
	var none *string
	leaseText, worker := stamp(lease), "worker-7"
	exec(insert, tt.pay, "key-pay", "8900", tt.currencyRaw, raw(reconcile.Executing), &leaseText, stamp(created), &worker)
	exec(insert, tt.skip, "key-skip", "8900", tt.currencyRaw, raw(reconcile.ConfirmationUnknown), none, stamp(created), none)
	exec(insert, tt.unmapped, "key-cancelled", "8900", tt.currencyRaw, "CANCELLED", none, stamp(created), none)

	// Check, once, before anything else.
	r, err := sources.NewObligations(pool, table)
	if err != nil {
		t.Fatalf("NewObligations: %v", err)
	}
	if err := r.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	types := r.Types()
	for _, rule := range table.TypeRules(&types) {
		if want, ok := tt.wantKinds[rule.Field]; ok && rule.Type.Kind != want {
			t.Errorf("Check: %s is %s (%s), want %s", rule.Field, rule.Type.Kind, rule.Type.Display, want)
		}
	}

	// Read: names of every sort beside the window, none of them in the
	// table (a uuid column is asked about non-uuids too).
	obs, err := r.Read(ctx, reconcile.Window{From: now.Add(-72 * time.Hour), To: now},
		sources.Named{IDs: []string{"junk", "42"}, Keys: []string{"junk"}, ProviderIDs: []string{"re_absent", "7"}})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	byID := map[string]reconcile.Obligation{}
	for _, o := range obs {
		byID[o.ID] = o
	}
	want := reconcile.Obligation{
		ID: tt.pay, Kind: reconcile.Refund, IdempotencyKey: "key-pay", Provider: "stripe", TargetID: "ch_4821",
		Money: reconcile.Money{Amount: 8900, Currency: "usd"}, State: reconcile.Executing, RawState: raw(reconcile.Executing),
		LeaseOwner: "worker-7", LeaseExpiresAt: reconcile.StampOf(lease), CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created),
	}
	if diff := cmp.Diff(want, byID[tt.pay]); diff != "" {
		t.Errorf("Read: obligation to pay (-want +got):\n%s", diff)
	}
	if len(obs) != 3 {
		t.Fatalf("Read returned %d obligations, want 3: %+v", len(obs), obs)
	}
	if s := byID[tt.unmapped].State; s.Known() || byID[tt.unmapped].RawState != "CANCELLED" {
		t.Errorf("Read: unmapped row's state = %q (raw %q), want an unknown state, raw CANCELLED", s, byID[tt.unmapped].RawState)
	}
	// The oldest in scope by state and window, and the named-only read
	// that coverage adds (docs/design.md, "Coverage"), in the same types.
	if oldest, err := r.Oldest(ctx, reconcile.Window{From: now.Add(-time.Hour), To: now}); err != nil || !oldest.Equal(created) {
		t.Errorf("Oldest = %v, %v; want %v (the open rows)", oldest, err, created)
	}
	named, err := r.ReadNamed(ctx, sources.Named{IDs: []string{tt.unmapped, "junk"}, Keys: []string{"key-skip"}, ProviderIDs: []string{"7"}})
	if err != nil {
		t.Fatalf("ReadNamed: %v", err)
	}
	if len(named) != 2 || named[0].IdempotencyKey == named[1].IdempotencyKey {
		t.Errorf("ReadNamed by id and key = %+v, want the unmapped and the second row", named)
	}

	// A worker marks the second obligation PAID after the read.
	exec(fmt.Sprintf(`UPDATE %s SET %s = $1::text::%s, %s = 're_worker' WHERE %s = $2::text::%s`,
		name, col(c.State), tt.state, col(c.ProviderID), col(c.ID), tt.id), raw(reconcile.Paid), tt.skip)

	opts := store.OptionsFrom(config.Default())
	opts.Table = table
	st, err := store.New(pool, opts)
	if err != nil {
		t.Fatalf("store.New: %v", err)
	}
	if err := st.UseTypes(types); err != nil {
		t.Fatalf("UseTypes: %v", err)
	}
	mark := func(o reconcile.Obligation, providerID string) reconcile.Transition {
		return reconcile.Transition{ObligationID: o.ID, From: o.State, FromRaw: o.RawState, To: reconcile.Paid,
			FromLeaseExpiresAt: o.LeaseExpiresAt.Time(), ProviderID: providerID}
	}
	ts := []reconcile.Transition{mark(byID[tt.pay], "re_pay"), mark(byID[tt.skip], "re_skip")}
	run := reconcile.Run{ID: "run-1", Trigger: reconcile.TriggerManual, Window: reconcile.Window{From: now.Add(-72 * time.Hour), To: now},
		Started: now, Finished: now, Status: reconcile.RunCompleted}
	applied, err := st.Apply(ctx, run, reconcile.Conclusions{Transitions: ts, ObligationIDs: []string{tt.pay, tt.skip, tt.unmapped}}, now)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(applied.Transitions) != 1 || applied.Transitions[0].ObligationID != tt.pay {
		t.Errorf("Apply applied %+v, want only %s", applied.Transitions, tt.pay)
	}
	wantReason := fmt.Sprintf("state is now %s, was %s", raw(reconcile.Paid), raw(reconcile.ConfirmationUnknown))
	if len(applied.Skipped) != 1 || applied.Skipped[0].Transition.ObligationID != tt.skip ||
		!strings.Contains(applied.Skipped[0].Reason, wantReason) {
		t.Errorf("Apply skipped %+v, want %s with a reason containing %q", applied.Skipped, tt.skip, wantReason)
	}

	// The rows as the table holds them now.
	type row struct {
		State, ProviderID string
		PaidAt, UpdatedAt time.Time
		PaidWall          string // paid_at's wall clock as PostgreSQL prints it in UTC
	}
	read := func(id string) row {
		t.Helper()
		var (
			got  row
			pid  *string
			paid *time.Time
			wall *string
		)
		inUTC := "" // a timestamp's wall clock is UTC already
		if strings.HasPrefix(tt.times, "timestamptz") {
			inUTC = " AT TIME ZONE 'UTC'"
		}
		err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT %[1]s::text, %[2]s::text, %[3]s, %[4]s,
			to_char(%[3]s%[5]s, 'YYYY-MM-DD HH24:MI:SS') FROM %[6]s WHERE %[7]s::text = $1`,
			col(c.State), col(c.ProviderID), col(c.PaidAt), col(c.UpdatedAt), inUTC, name, col(c.ID)), id).
			Scan(&got.State, &pid, &paid, &got.UpdatedAt, &wall)
		if err != nil {
			t.Fatalf("read row %s: %v", id, err)
		}
		if pid != nil {
			got.ProviderID = *pid
		}
		if paid != nil {
			got.PaidAt = paid.UTC()
		}
		if wall != nil {
			got.PaidWall = *wall
		}
		got.UpdatedAt = got.UpdatedAt.UTC()
		return got
	}
	wantPaid := row{State: raw(reconcile.Paid), ProviderID: "re_pay", PaidAt: now, UpdatedAt: now, PaidWall: "2026-11-30 06:00:00"}
	if diff := cmp.Diff(wantPaid, read(tt.pay)); diff != "" {
		t.Errorf("row marked PAID (-want +got):\n%s", diff)
	}
	if got := read(tt.skip); got.State != raw(reconcile.Paid) || got.ProviderID != "re_worker" || !got.PaidAt.IsZero() ||
		!got.UpdatedAt.Equal(created) {
		t.Errorf("row the worker changed = %+v, want it as the worker left it (PAID, re_worker, no paid_at)", got)
	}
	if got := read(tt.unmapped); got.State != "CANCELLED" || !got.UpdatedAt.Equal(created) {
		t.Errorf("unmapped row = %+v, want it untouched", got)
	}

	// The audit: one row, canonical states, the run's time.
	h, err := st.ObligationHistory(ctx, tt.pay)
	if err != nil {
		t.Fatalf("ObligationHistory: %v", err)
	}
	if len(h.Transitions) != 1 {
		t.Fatalf("audit of %s = %+v, want one transition", tt.pay, h.Transitions)
	}
	got := h.Transitions[0]
	got.ID, got.At = 0, got.At.UTC()
	wantAudit := store.TransitionRecord{ObligationID: tt.pay, From: reconcile.Executing, To: reconcile.Paid,
		ProviderID: "re_pay", RunID: "run-1", At: now}
	if diff := cmp.Diff(wantAudit, got); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	var audits int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM reconcile.transitions`).Scan(&audits); err != nil || audits != 1 {
		t.Errorf("audit rows = %d (%v), want 1", audits, err)
	}
}
