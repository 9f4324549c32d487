package sources_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/sources"
)

// The window of the scope tests: [oblFrom, oblTo).
var (
	oblFrom = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	oblTo   = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	oblOld  = oblFrom.AddDate(0, 0, -30)
)

// oblFixture is one obligation per scope rule. Ids run against insertion
// order so that sorting is tested too.
func oblFixture() []reconcile.Obligation {
	ob := func(id string, state reconcile.State, created, updated time.Time) reconcile.Obligation {
		return reconcile.Obligation{
			ID: id, Kind: reconcile.Charge, IdempotencyKey: "key:" + id, Provider: "stripe",
			Money: reconcile.Money{Amount: 8900, Currency: "usd"}, State: state, RawState: string(state),
			CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(updated),
		}
	}
	us := time.Microsecond // PostgreSQL's resolution
	executing := ob("z-old-executing", reconcile.Executing, oblOld, oblOld)
	executing.LeaseOwner = "worker-1"
	executing.LeaseExpiresAt = reconcile.StampOf(oblOld.Add(time.Minute))
	paid := ob("x-old-paid", reconcile.Paid, oblOld, oblOld)
	paid.ProviderID = "ch_x"
	paid.PaidAt = reconcile.StampOf(oblOld.Add(time.Second))
	named := ob("w-old-paid-named", reconcile.Paid, oblOld, oblOld)
	named.Kind = reconcile.Refund
	named.IdempotencyKey = "key-w"
	named.ProviderID = "re_w"
	named.TargetID = "ch_w_target"
	named.PaidAt = reconcile.StampOf(oblOld.Add(time.Second))
	return []reconcile.Obligation{
		executing,
		ob("y-old-unknown", reconcile.ConfirmationUnknown, oblOld, oblOld),
		paid,
		named,
		ob("v-created-at-from", reconcile.Paid, oblFrom, oblFrom),
		ob("u-created-before-from", reconcile.Paid, oblFrom.Add(-us), oblFrom.Add(-us)),
		ob("t-created-before-to", reconcile.Paid, oblTo.Add(-us), oblTo.Add(-us)),
		ob("s-created-at-to", reconcile.Paid, oblTo, oblTo),
		ob("r-updated-in-window", reconcile.Paid, oblOld, oblFrom.Add(time.Hour)),
		ob("q-updated-at-to", reconcile.Paid, oblOld, oblTo),
		ob("p-old-failed", reconcile.FailedState, oblOld, oblOld),
		ob("o-old-approved", reconcile.Approved, oblOld, oblOld),
		ob("n-old-pending-approval", reconcile.PendingApproval, oblOld, oblOld),
		ob("m-old-requires-review", reconcile.RequiresReview, oblOld, oblOld),
	}
}

// oblInScope is what Read returns for the fixture with nothing named.
var oblInScope = []string{"r-updated-in-window", "t-created-before-to", "v-created-at-from", "y-old-unknown", "z-old-executing"}

func newObligationsReader(tb testing.TB, pool *pgxpool.Pool, table reconcile.ObligationTable) *sources.Obligations {
	tb.Helper()
	r, err := sources.NewObligations(pool, table)
	if err != nil {
		tb.Fatalf("NewObligations: %v", err)
	}
	return r
}

func oblIDs(obs []reconcile.Obligation) []string {
	ids := make([]string, len(obs))
	for i, o := range obs {
		ids[i] = o.ID
	}
	return ids
}

func oblExec(tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	tb.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("exec %.60q: %v", sql, err)
	}
}

func TestObligationsReadScope(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	pgtest.InsertObligations(t, pool, oblFixture()...)
	r := newObligationsReader(t, pool, reconcile.DefaultObligationTable())
	w := reconcile.Window{From: oblFrom, To: oblTo}

	many := make([]string, 50_000)
	for i := range many {
		many[i] = fmt.Sprintf("absent-%d", i)
	}
	plus := func(ids ...string) []string {
		all := append(slices.Clone(oblInScope), ids...)
		slices.Sort(all)
		return all
	}
	for _, tc := range []struct {
		name  string
		named sources.Named
		want  []string
	}{
		{"nothing named", sources.Named{}, oblInScope},
		{"PAID named by id", sources.Named{IDs: []string{"w-old-paid-named"}}, plus("w-old-paid-named")},
		{"PAID named by idempotency key", sources.Named{Keys: []string{"key-w"}}, plus("w-old-paid-named")},
		{"PAID named by provider_id", sources.Named{ProviderIDs: []string{"re_w"}}, plus("w-old-paid-named")},
		{"PAID named by target_id", sources.Named{ProviderIDs: []string{"ch_w_target"}}, plus("w-old-paid-named")},
		{"a key is not an id", sources.Named{IDs: []string{"key-w"}, Keys: []string{"w-old-paid-named"}}, oblInScope},
		{"named twice and already in scope", sources.Named{
			IDs: []string{"z-old-executing", "x-old-paid"}, Keys: []string{"key:x-old-paid"}, ProviderIDs: []string{"ch_x", "re_w"},
		}, plus("w-old-paid-named", "x-old-paid")},
		// More names than the planner is let weigh (150k): each way of
		// naming still reads its row.
		{"150k names of which one exists", sources.Named{IDs: append(slices.Clone(many), "p-old-failed"), Keys: many, ProviderIDs: many},
			plus("p-old-failed")},
		{"150k names, PAID named by idempotency key", sources.Named{IDs: many, Keys: append(slices.Clone(many), "key-w"), ProviderIDs: many},
			plus("w-old-paid-named")},
		{"150k names, PAID named by provider_id", sources.Named{IDs: many, Keys: many, ProviderIDs: append(slices.Clone(many), "re_w")},
			plus("w-old-paid-named")},
		{"150k names, PAID named by target_id", sources.Named{IDs: many, Keys: many, ProviderIDs: append(slices.Clone(many), "ch_w_target")},
			plus("w-old-paid-named")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Read(t.Context(), w, tc.named)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if diff := cmp.Diff(tc.want, oblIDs(got)); diff != "" {
				t.Errorf("Read(%s) ids (-want +got):\n%s", tc.name, diff)
			}
		})
	}

	t.Run("empty window: only open states", func(t *testing.T) {
		got, err := r.Read(t.Context(), reconcile.Window{From: oblFrom, To: oblFrom}, sources.Named{})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if diff := cmp.Diff([]string{"y-old-unknown", "z-old-executing"}, oblIDs(got)); diff != "" {
			t.Errorf("Read ids (-want +got):\n%s", diff)
		}
	})
	t.Run("reversed window refused", func(t *testing.T) {
		_, err := r.Read(t.Context(), reconcile.Window{From: oblTo, To: oblFrom}, sources.Named{})
		if err == nil || !strings.Contains(err.Error(), "window") {
			t.Errorf("Read(reversed window) error = %v, want one about the window", err)
		}
	})
	t.Run("fields", func(t *testing.T) {
		got, err := r.Read(t.Context(), w, sources.Named{IDs: []string{"w-old-paid-named", "x-old-paid"}})
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		want := map[string]reconcile.Obligation{}
		for _, o := range oblFixture() {
			want[o.ID] = o
		}
		for _, o := range got {
			if diff := cmp.Diff(want[o.ID], o); diff != "" {
				t.Errorf("Read: obligation %s (-want +got):\n%s", o.ID, diff)
			}
			for name, ts := range map[string]time.Time{"CreatedAt": o.CreatedAt.Time(), "UpdatedAt": o.UpdatedAt.Time(),
				"LeaseExpiresAt": o.LeaseExpiresAt.Time(), "PaidAt": o.PaidAt.Time()} {
				if loc := ts.Location(); loc != time.UTC {
					t.Errorf("Read: obligation %s %s location = %v, want UTC", o.ID, name, loc)
				}
			}
		}
	})
}

// TestObligationsReadUnusualValues reads NULLs, unicode ids and currencies
// Stripe may or may not know, exactly as stored, except that a currency is
// trimmed and in lower case, as Stripe spells it: a table's "USD" must
// equal Stripe's "usd", or every such obligation is an amount mismatch.
func TestObligationsReadUnusualValues(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	at := oblFrom.Add(time.Hour)
	ob := func(id string, amount int64, currency string) reconcile.Obligation {
		return reconcile.Obligation{ID: id, Kind: reconcile.Charge, IdempotencyKey: "key:" + id, Provider: "stripe",
			Money: reconcile.Money{Amount: amount, Currency: currency}, State: reconcile.ConfirmationUnknown,
			RawState: string(reconcile.ConfirmationUnknown), CreatedAt: reconcile.StampOf(at), UpdatedAt: reconcile.StampOf(at)}
	}
	in := []reconcile.Obligation{
		ob("charge:jpy", 12000, "jpy"),
		ob("charge:kwd", 1000, "kwd"),
		ob("charge:unknown-currency", 1, "qqq"),
		ob("charge:padded-currency", 500, " usd "),
		ob("charge:upper-currency", 600, "USD"),
		ob("charge:mixed-currency", 700, " Eur\t"),
		ob("charge:max", 1<<63-1, "usd"),
		ob("refund:Ørsted:注文-4821", 8900, "eur"),
		ob("charge:😀\u200d", 100, "gbp"),
	}
	in[0].ProviderID, in[0].TargetID, in[0].LeaseOwner = "", "", "" // all NULL in the table
	pgtest.InsertObligations(t, pool, in...)
	r := newObligationsReader(t, pool, reconcile.DefaultObligationTable())
	got, err := r.Read(t.Context(), reconcile.Window{From: oblFrom, To: oblTo}, sources.Named{})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := slices.Clone(in)
	want[3].Money.Currency, want[4].Money.Currency, want[5].Money.Currency = "usd", "usd", "eur"
	slices.SortFunc(want, func(a, b reconcile.Obligation) int { return strings.Compare(a.ID, b.ID) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
}

// TestObligationsTeamTable reads a team's table (another schema, table,
// column and state names, an enum state, a varchar id, an integer amount, a
// timestamp without time zone) and gets what the reference table gives.
func TestObligationsTeamTable(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	pgtest.InsertObligations(t, pool, oblFixture()...)
	oblExec(t, pool, `CREATE SCHEMA billing`)
	oblExec(t, pool, `CREATE TYPE billing.status AS ENUM ('pending_approval', 'approved', 'executing',
		'confirmation_unknown', 'paid', 'failed', 'requires_review')`)
	oblExec(t, pool, `CREATE TABLE billing.payment_obligations (
		obligation_ref varchar(200) PRIMARY KEY, "type" text NOT NULL, request_key text NOT NULL,
		psp text NOT NULL, psp_ref text, refunded_ref text, amount_minor integer NOT NULL, ccy varchar(3) NOT NULL,
		status billing.status NOT NULL, worker text, lease_until timestamp,
		"InsertedAt" timestamptz NOT NULL, modified_at timestamptz NOT NULL, settled_at timestamptz)`)
	oblExec(t, pool, `INSERT INTO billing.payment_obligations
		SELECT id, kind, idempotency_key, provider, provider_id, target_id, amount, currency,
		       lower(state)::billing.status, lease_owner, lease_expires_at AT TIME ZONE 'UTC',
		       created_at, updated_at, paid_at
		FROM public.obligations`)

	team := reconcile.ObligationTable{
		Schema: "billing", Table: "payment_obligations",
		Columns: reconcile.ObligationColumns{
			ID: "obligation_ref", Kind: "type", IdempotencyKey: "request_key", Provider: "psp",
			ProviderID: "psp_ref", TargetID: "refunded_ref", Amount: "amount_minor", Currency: "ccy",
			State: "status", LeaseOwner: "worker", LeaseExpiresAt: "lease_until",
			CreatedAt: "InsertedAt", UpdatedAt: "modified_at", PaidAt: "settled_at",
		},
		States: map[reconcile.State]string{},
	}
	for _, s := range reconcile.States {
		team.States[s] = strings.ToLower(string(s))
	}
	ref := newObligationsReader(t, pool, reconcile.DefaultObligationTable())
	teamReader := newObligationsReader(t, pool, team)
	if err := teamReader.Check(t.Context()); err != nil {
		t.Fatalf("Check(team table) = %v, want nil", err)
	}
	w := reconcile.Window{From: oblFrom, To: oblTo}
	for _, named := range []sources.Named{
		{},
		{IDs: []string{"w-old-paid-named"}},
		{Keys: []string{"key:x-old-paid"}, ProviderIDs: []string{"ch_w_target"}},
	} {
		want, err := ref.Read(t.Context(), w, named)
		if err != nil {
			t.Fatalf("Read(reference, %+v): %v", named, err)
		}
		got, err := teamReader.Read(t.Context(), w, named)
		if err != nil {
			t.Fatalf("Read(team, %+v): %v", named, err)
		}
		for i := range want {
			want[i].RawState = strings.ToLower(want[i].RawState)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Read(team, %+v) (-reference +team):\n%s", named, diff)
		}
	}
	got, err := teamReader.Get(t.Context(), "z-old-executing")
	if err != nil {
		t.Fatalf("Get(team): %v", err)
	}
	if got.State != reconcile.Executing || got.RawState != "executing" {
		t.Errorf("Get(team) state = %q (raw %q), want %q (raw %q)", got.State, got.RawState, reconcile.Executing, "executing")
	}
}

func TestNewObligationsRefusesBadIdentifiers(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	for _, tc := range []struct {
		name   string
		change func(*reconcile.ObligationTable)
		field  string
	}{
		{"state column injection", func(tb *reconcile.ObligationTable) { tb.Columns.State = "state; DROP TABLE obligations" }, "obligations.columns.state"},
		{"quote in id column", func(tb *reconcile.ObligationTable) { tb.Columns.ID = `id" OR 1=1 --` }, "obligations.columns.id"},
		{"empty amount column", func(tb *reconcile.ObligationTable) { tb.Columns.Amount = "" }, "obligations.columns.amount"},
		{"dotted table", func(tb *reconcile.ObligationTable) { tb.Table = "public.obligations" }, "obligations.table"},
		{"schema with a space", func(tb *reconcile.ObligationTable) { tb.Schema = "billing x" }, "obligations.schema"},
		{"missing state value", func(tb *reconcile.ObligationTable) { delete(tb.States, reconcile.Paid) }, "obligations.states.PAID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := reconcile.DefaultObligationTable()
			tc.change(&table)
			r, err := sources.NewObligations(pool, table)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("NewObligations(%s) = %v, %v; want an error naming %s", tc.name, r, err, tc.field)
			}
		})
	}
	// The refused configuration reached no SQL: the table is still there.
	if err := newObligationsReader(t, pool, reconcile.DefaultObligationTable()).Check(t.Context()); err != nil {
		t.Errorf("Check after refused configurations = %v, want nil", err)
	}
}

func TestObligationsCheck(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	// Each case gets a schema holding a copy of the reference table, then
	// breaks it.
	for i, tc := range []struct {
		name   string
		alter  string // SQL breaking the case's table (%s); empty: nothing broken
		change func(*reconcile.ObligationTable)
		want   []string // substrings of the error; nil: no error
	}{
		{name: "reference table"},
		{name: "missing column", alter: `ALTER TABLE %s DROP COLUMN paid_at`,
			want: []string{"obligations.columns.paid_at", `"paid_at" does not exist`}},
		{name: "two missing columns", alter: `ALTER TABLE %s DROP COLUMN kind, DROP COLUMN lease_owner`,
			want: []string{"obligations.columns.kind", "obligations.columns.lease_owner"}},
		{name: "configured column absent", change: func(tb *reconcile.ObligationTable) { tb.Columns.UpdatedAt = "modified_at" },
			want: []string{"obligations.columns.updated_at", `"modified_at" does not exist`}},
		{name: "text amount", alter: `ALTER TABLE %[1]s DROP COLUMN amount; ALTER TABLE %[1]s ADD COLUMN amount text`,
			want: []string{"obligations.columns.amount", "is text"}},
		{name: "date paid_at", alter: `ALTER TABLE %s ALTER COLUMN paid_at TYPE date`,
			want: []string{"obligations.columns.paid_at", "is date"}},
		{name: "enum state, uuid id, varchar key", alter: `CREATE TYPE %[1]s_state AS ENUM ('PENDING_APPROVAL', 'APPROVED',
			'EXECUTING', 'CONFIRMATION_UNKNOWN', 'PAID', 'FAILED', 'REQUIRES_REVIEW', 'CANCELLED');
			ALTER TABLE %[1]s ALTER COLUMN state TYPE %[1]s_state USING state::%[1]s_state,
				ALTER COLUMN id TYPE uuid USING id::uuid, ALTER COLUMN idempotency_key TYPE varchar(64)`},
		{name: "enum state without a configured value", alter: `CREATE TYPE %[1]s_state AS ENUM ('PENDING_APPROVAL', 'APPROVED',
			'EXECUTING', 'CONFIRMATION_UNKNOWN', 'PAID', 'FAILED');
			ALTER TABLE %[1]s ALTER COLUMN state TYPE %[1]s_state USING state::%[1]s_state`,
			want: []string{"obligations.states.REQUIRES_REVIEW", `"REQUIRES_REVIEW" is not a value of column "state"`, "invalid input value for enum"}},
		{name: "varchar state too short", alter: `ALTER TABLE %s ALTER COLUMN state TYPE varchar(16)`,
			want: []string{"obligations.states.CONFIRMATION_UNKNOWN", "character varying(16)", `stored as "CONFIRMATION_UNK"`}},
		{name: "domain state refusing a value", alter: `CREATE DOMAIN %[1]s_state AS text CHECK (VALUE <> 'FAILED');
			ALTER TABLE %[1]s ALTER COLUMN state TYPE %[1]s_state`,
			want: []string{"obligations.states.FAILED", "violates check constraint"}},
		{name: "bytea id", alter: `ALTER TABLE %s ALTER COLUMN id TYPE bytea USING id::bytea`,
			want: []string{"obligations.columns.id", `column "id" is bytea`}},
		{name: "uuid provider_id", alter: `ALTER TABLE %s ALTER COLUMN provider_id TYPE uuid USING provider_id::uuid`,
			want: []string{"obligations.columns.provider_id", `column "provider_id" is uuid, want one of string`}},
		{name: "domain over date paid_at", alter: `CREATE DOMAIN %[1]s_day AS date;
			ALTER TABLE %[1]s ALTER COLUMN paid_at TYPE %[1]s_day`,
			want: []string{"obligations.columns.paid_at", "obligations_day, want one of timestamp, timestamptz"}},
		{name: "missing table", change: func(tb *reconcile.ObligationTable) { tb.Table = "payment_obligations" },
			want: []string{"obligations.table", "payment_obligations", "does not exist"}},
		{name: "missing schema", change: func(tb *reconcile.ObligationTable) { tb.Schema = "nowhere" },
			want: []string{"obligations.schema", `"nowhere"."obligations"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := fmt.Sprintf("check_%d", i)
			oblExec(t, pool, `CREATE SCHEMA `+schema)
			oblExec(t, pool, `CREATE TABLE `+schema+`.obligations (LIKE public.obligations INCLUDING ALL)`)
			if tc.alter != "" {
				oblExec(t, pool, fmt.Sprintf(tc.alter, schema+".obligations"))
			}
			table := reconcile.DefaultObligationTable()
			table.Schema = schema
			if tc.change != nil {
				tc.change(&table)
			}
			err := newObligationsReader(t, pool, table).Check(t.Context())
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want nil", tc.name, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check(%s) = nil, want an error naming %v", tc.name, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check(%s) = %q, want it to contain %q", tc.name, err, w)
				}
			}
		})
	}
}

func TestObligationsGet(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	fixture := oblFixture()
	uni := fixture[3]
	uni.ID, uni.IdempotencyKey = "refund:Ørsted:注文-4821", "key:注文"
	pgtest.InsertObligations(t, pool, append(fixture, uni)...)
	r := newObligationsReader(t, pool, reconcile.DefaultObligationTable())
	for _, want := range []reconcile.Obligation{fixture[0], fixture[3], uni} {
		got, err := r.Get(t.Context(), want.ID)
		if err != nil {
			t.Fatalf("Get(%q): %v", want.ID, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get(%q) (-want +got):\n%s", want.ID, diff)
		}
	}
	for _, id := range []string{"absent", "", "Z-OLD-EXECUTING", "z-old-executing "} {
		if _, err := r.Get(t.Context(), id); !errors.Is(err, sources.ErrNotFound) {
			t.Errorf("Get(%q) error = %v, want ErrNotFound", id, err)
		}
	}
}

// TestObligationsRefusesUnmappableRows: a row the reader cannot map fails
// the read, naming the obligation (or, without a usable id, the row's
// number and idempotency key) and the column by its configuration field,
// rather than vanishing from the scope (its provider objects would then
// look like orphans) or being read as something it is not.
func TestObligationsRefusesUnmappableRows(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	// Team tables without the reference table's constraints, one with a
	// bigint amount and one with a numeric amount.
	for _, schema := range []string{"loose", "loosenum"} {
		oblExec(t, pool, `CREATE SCHEMA `+schema)
		oblExec(t, pool, `CREATE TABLE `+schema+`.obligations (LIKE public.obligations INCLUDING DEFAULTS)`)
		oblExec(t, pool, `ALTER TABLE `+schema+`.obligations ALTER COLUMN id DROP NOT NULL, ALTER COLUMN kind DROP NOT NULL,
			ALTER COLUMN idempotency_key DROP NOT NULL, ALTER COLUMN amount DROP NOT NULL, ALTER COLUMN state DROP NOT NULL,
			ALTER COLUMN created_at DROP NOT NULL`)
	}
	oblExec(t, pool, `ALTER TABLE loosenum.obligations ALTER COLUMN amount TYPE numeric`)
	readers := map[string]*sources.Obligations{}
	for _, schema := range []string{"loose", "loosenum"} {
		table := reconcile.DefaultObligationTable()
		table.Schema = schema
		readers[schema] = newObligationsReader(t, pool, table)
	}
	// row is one obligation's values as SQL literals; the zero value of a
	// field takes the default below.
	type row struct{ id, kind, key, amount, state, created, lease string }
	def := row{kind: "'charge'", amount: "100", state: "'EXECUTING'", created: "'2026-11-28T00:00:00Z'", lease: "NULL"}
	for _, tc := range []struct {
		name     string
		schema   string // loose unless set
		row      row
		want     []string // substrings of the error; nil: reads fine
		notWant  string   // a substring the error must not have
		wantKind reconcile.ObjectKind
		wantAmt  int64
	}{
		{name: "unknown kind", row: row{id: "'payout:1'", kind: "'payout'"},
			want: []string{`obligation "payout:1"`, `obligations.columns.kind: "payout" is neither charge nor refund`}},
		{name: "NULL kind", row: row{id: "'charge:2'", kind: "NULL"},
			want: []string{`obligation "charge:2"`, "obligations.columns.kind is NULL"}},
		{name: "NULL amount", row: row{id: "'charge:3'", amount: "NULL"},
			want: []string{`obligation "charge:3"`, "obligations.columns.amount is NULL"}},
		{name: "zero amount", row: row{id: "'charge:3z'", amount: "0"},
			want: []string{`obligation "charge:3z"`, "obligations.columns.amount is 0, want a positive amount"}},
		{name: "negative amount", row: row{id: "'charge:3n'", amount: "-8900"},
			want: []string{`obligation "charge:3n"`, "obligations.columns.amount is -8900"}},
		{name: "infinite lease", row: row{id: "'charge:4'", lease: "'infinity'"},
			want: []string{`obligation "charge:4"`, "obligations.columns.lease_expires_at is infinite"}},
		{name: "lease in PostgreSQL's last years", row: row{id: "'charge:4f'", lease: "'294000-01-01T00:00:00Z'"},
			want: []string{`obligation "charge:4f"`, "obligations.columns.lease_expires_at is in the year 294000, beyond the years ±290000"}},
		{name: "kind in capitals and blanks", row: row{id: "'refund:5'", kind: "' Refund '"},
			wantKind: reconcile.Refund, wantAmt: 100},
		{name: "NULL id", row: row{id: "NULL", key: "'k-null'"},
			want: []string{`row 1 (idempotency_key "k-null")`, "obligations.columns.id is NULL"}},
		{name: "NULL id without a key", row: row{id: "NULL", key: "NULL"},
			want: []string{"row 1: obligations.columns.id is NULL"}, notWant: "idempotency_key"},
		{name: "empty id", row: row{id: "''", key: "'k-empty'"},
			want: []string{`row 1 (idempotency_key "k-empty")`, "obligations.columns.id is empty"}},
		{name: "blank id", row: row{id: "'  '", key: "'k-blank'"},
			want: []string{`row 1 (idempotency_key "k-blank")`, `obligations.columns.id is empty ("  ")`}},
		{name: "NULL id and an unknown kind", row: row{id: "NULL", key: "'k-both'", kind: "'payout'"},
			want: []string{`row 1 (idempotency_key "k-both")`, "obligations.columns.id is NULL"}},
		{name: "NULL state", row: row{id: "'charge:6'", state: "NULL"},
			want: []string{`obligation "charge:6"`, "obligations.columns.state is NULL"}},
		{name: "NULL created_at", row: row{id: "'charge:7'", created: "NULL"},
			want: []string{`obligation "charge:7"`, "obligations.columns.created_at is NULL"}},
		{name: "numeric with a fraction", schema: "loosenum", row: row{id: "'charge:8'", amount: "12.5"},
			want: []string{`obligation "charge:8"`, "obligations.columns.amount: 12.5 has a fraction"}},
		{name: "numeric beyond int64", schema: "loosenum", row: row{id: "'charge:9'", amount: "9223372036854775808"},
			want: []string{`obligation "charge:9"`, "obligations.columns.amount: 9223372036854775808 does not fit a 64-bit integer"}},
		{name: "numeric NaN", schema: "loosenum", row: row{id: "'charge:10'", amount: "'NaN'"},
			want: []string{`obligation "charge:10"`, "obligations.columns.amount: NaN is not an amount"}},
		{name: "numeric zero", schema: "loosenum", row: row{id: "'charge:11'", amount: "0.00"},
			want: []string{`obligation "charge:11"`, "obligations.columns.amount is 0"}},
		{name: "numeric whole with a scale", schema: "loosenum", row: row{id: "'charge:12'", amount: "1200.00"},
			wantKind: reconcile.Charge, wantAmt: 1200},
		{name: "numeric at int64's maximum", schema: "loosenum", row: row{id: "'charge:13'", amount: "9223372036854775807"},
			wantKind: reconcile.Charge, wantAmt: 1<<63 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := orSQL(tc.schema, "loose")
			r := tc.row
			r.kind, r.amount, r.state = orSQL(r.kind, def.kind), orSQL(r.amount, def.amount), orSQL(r.state, def.state)
			r.created, r.lease = orSQL(r.created, def.created), orSQL(r.lease, def.lease)
			r.key = orSQL(r.key, "'key-'||"+r.id)
			oblExec(t, pool, `TRUNCATE `+schema+`.obligations`)
			oblExec(t, pool, fmt.Sprintf(`INSERT INTO %s.obligations (id, kind, idempotency_key, amount, currency, state,
				created_at, updated_at, lease_expires_at) VALUES (%s, %s, %s, %s, 'usd', %s, %s, '2026-11-28T00:00:00Z', %s)`,
				schema, r.id, r.kind, r.key, r.amount, r.state, r.created, r.lease))
			got, err := readers[schema].Read(t.Context(), reconcile.Window{From: oblFrom, To: oblTo}, sources.Named{})
			errs := []error{err}
			if id := strings.Trim(r.id, "'"); id != "NULL" && strings.TrimSpace(id) != "" {
				_, getErr := readers[schema].Get(t.Context(), id)
				errs = append(errs, getErr)
			}
			if tc.want == nil {
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("Read, Get(%s) = %v; want no error", tc.name, err)
				}
				if len(got) != 1 || got[0].Kind != tc.wantKind || got[0].Money.Amount != tc.wantAmt {
					t.Fatalf("Read(%s) = %+v, want one obligation of kind %s and amount %d", tc.name, got, tc.wantKind, tc.wantAmt)
				}
				return
			}
			for _, e := range errs {
				if e == nil {
					t.Fatalf("Read/Get(%s) = nil error, want one naming %v", tc.name, tc.want)
				}
				for _, w := range tc.want {
					if !strings.Contains(e.Error(), w) {
						t.Errorf("Read/Get(%s) error = %q, want it to contain %q", tc.name, e, w)
					}
				}
				if tc.notWant != "" && strings.Contains(e.Error(), tc.notWant) {
					t.Errorf("Read/Get(%s) error = %q, want it without %q", tc.name, e, tc.notWant)
				}
			}
		})
	}
	t.Run("id not unique", func(t *testing.T) {
		oblExec(t, pool, `TRUNCATE loose.obligations`)
		oblExec(t, pool, `INSERT INTO loose.obligations (id, kind, idempotency_key, amount, currency, state)
			VALUES ('charge:6', 'charge', 'k', 100, 'usd', 'EXECUTING'), ('charge:6', 'charge', 'k', 100, 'usd', 'EXECUTING')`)
		_, err := readers["loose"].Read(t.Context(), reconcile.Window{From: oblFrom, To: oblTo}, sources.Named{})
		_, getErr := readers["loose"].Get(t.Context(), "charge:6")
		for _, e := range []error{err, getErr} {
			if e == nil || !strings.Contains(e.Error(), "obligations.columns.id") {
				t.Errorf("Read/Get(duplicate id) error = %v, want one naming obligations.columns.id", e)
			}
		}
	})
}

// orSQL is a, or b when a is empty.
func orSQL(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// TestObligationsNumericAmount: a numeric amount column reads when whole and
// fails, naming the obligation, when it has a fraction (minor units have
// none; rounding would invent money).
func TestObligationsNumericAmount(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	oblExec(t, pool, `CREATE SCHEMA num`)
	oblExec(t, pool, `CREATE TABLE num.obligations (LIKE public.obligations INCLUDING DEFAULTS)`)
	oblExec(t, pool, `ALTER TABLE num.obligations ALTER COLUMN amount TYPE numeric`)
	oblExec(t, pool, `INSERT INTO num.obligations (id, kind, idempotency_key, amount, currency, state)
		VALUES ('charge:whole', 'charge', 'k1', 9007199254740993, 'usd', 'EXECUTING'),
		       ('charge:fraction', 'charge', 'k2', 12.5, 'usd', 'PAID')`)
	table := reconcile.DefaultObligationTable()
	table.Schema = "num"
	r := newObligationsReader(t, pool, table)
	if err := r.Check(t.Context()); err != nil {
		t.Fatalf("Check(numeric amount) = %v, want nil", err)
	}
	got, err := r.Get(t.Context(), "charge:whole")
	if err != nil {
		t.Fatalf("Get(charge:whole): %v", err)
	}
	if want := (reconcile.Money{Amount: 9007199254740993, Currency: "usd"}); got.Money != want {
		t.Errorf("Get(charge:whole) money = %v, want %v", got.Money, want)
	}
	if _, err := r.Get(t.Context(), "charge:fraction"); err == nil || !strings.Contains(err.Error(), `"charge:fraction"`) {
		t.Errorf("Get(charge:fraction) error = %v, want one naming the obligation", err)
	}
	if _, err := r.Read(t.Context(), reconcile.Window{}, sources.Named{IDs: []string{"charge:fraction"}}); err == nil ||
		!strings.Contains(err.Error(), `obligation "charge:fraction"`) {
		t.Errorf("Read(charge:fraction named) error = %v, want one naming the obligation", err)
	}
}

// TestObligationsNamesOfOtherTypes: a name the provider gives (metadata,
// an object's id) that cannot be a value of the compared column's type (not
// a uuid, beyond an int4) matches no row; it must not fail the read, which
// casting it to the column's type would.
func TestObligationsNamesOfOtherTypes(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	oblExec(t, pool, `CREATE SCHEMA typed`)
	oblExec(t, pool, `CREATE TABLE typed.obligations (LIKE public.obligations INCLUDING DEFAULTS)`)
	oblExec(t, pool, `ALTER TABLE typed.obligations ALTER COLUMN id TYPE uuid USING id::uuid,
		ALTER COLUMN idempotency_key TYPE bigint USING idempotency_key::bigint,
		ALTER COLUMN target_id TYPE integer USING target_id::integer`)
	const (
		a = "0b0f8a52-3c1e-4a47-9d0a-6f2a1b8c9d01"
		b = "5e7c1d3a-9b2f-4c8e-a1d6-0f3b2a4c6e02"
		c = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c03"
		d = "11111111-2222-4333-8444-555555555504"
	)
	old := oblOld.Format(time.RFC3339)
	oblExec(t, pool, `INSERT INTO typed.obligations (id, kind, idempotency_key, provider_id, target_id, amount, currency,
		state, created_at, updated_at) VALUES
		($1, 'charge', 41, NULL, NULL, 100, 'usd', 'PAID', $5, $5),
		($2, 'charge', 42, NULL, NULL, 100, 'usd', 'PAID', $5, $5),
		($3, 'refund', 43, 're_3', 7, 100, 'usd', 'PAID', $5, $5),
		($4, 'refund', 44, 're_4', 8, 100, 'usd', 'PAID', $5, $5)`, a, b, c, d, old)
	table := reconcile.DefaultObligationTable()
	table.Schema = "typed"
	r := newObligationsReader(t, pool, table)
	got, err := r.Read(t.Context(), reconcile.Window{From: oblFrom, To: oblTo}, sources.Named{
		// Only a (in upper case, which uuid input accepts) is an id.
		IDs: []string{"junk", "", "charge:4821", strings.ToUpper(a), a + "x", "{" + b + "}"},
		// Only 42 is a bigint.
		Keys: []string{"key:42", "99999999999999999999", "4.2e1", "42"},
		// 7 names c's target; re_4 is d's provider_id; 3000000000 does not
		// fit the int4 target_id.
		ProviderIDs: []string{"3000000000", "7", "re_4", "ch_x"},
	})
	if err != nil {
		t.Fatalf("Read with names of other types: %v", err)
	}
	if diff := cmp.Diff([]string{a, d, b, c}, oblIDs(got)); diff != "" {
		t.Errorf("Read ids (-want +got):\n%s", diff)
	}
	for _, id := range []string{"junk", "", a + "0"} {
		if _, err := r.Get(t.Context(), id); !errors.Is(err, sources.ErrNotFound) {
			t.Errorf("Get(%q) from a uuid id column = %v, want ErrNotFound", id, err)
		}
	}
	if o, err := r.Get(t.Context(), strings.ToUpper(b)); err != nil || o.ID != b {
		t.Errorf("Get(upper-case uuid) = %q, %v; want %q", o.ID, err, b)
	}
}
