package sources

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/pgtest"
)

// TestObligationsReadUsesTeamIndexes: on a team's table of other column
// types (an enum state, a uuid id, varchar keys, timestamps without time
// zone) with an index on every column the read filters on, the read and
// Get can use those indexes: the parameters are cast to the columns'
// types, never the columns to text. With sequential scans priced out, a
// single cast column would leave no plan but a Seq Scan. A view of one
// account's obligations (ForAccount) filters the same plan's rows.
func TestObligationsReadUsesTeamIndexes(t *testing.T) {
	pool, _ := pgtest.NewPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA payments;
	CREATE TYPE payments.cmd_state AS ENUM ('PENDING_APPROVAL', 'APPROVED', 'EXECUTING', 'CONFIRMATION_UNKNOWN',
		'PAID', 'FAILED', 'REQUIRES_REVIEW', 'CANCELLED');
	CREATE TABLE payments.commands (
		id uuid PRIMARY KEY, kind text NOT NULL, idempotency_key varchar(80) NOT NULL, provider text NOT NULL,
		provider_id varchar(64), target_id varchar(64), amount integer NOT NULL, currency char(3) NOT NULL,
		state payments.cmd_state NOT NULL, lease_owner text, lease_expires_at timestamp,
		created_at timestamp NOT NULL, updated_at timestamp NOT NULL, paid_at timestamp, account varchar(32));
	INSERT INTO payments.commands
		SELECT gen_random_uuid(), 'charge', 'key-' || g, 'stripe', 'py_' || g, NULL, 100, 'USD', 'PAID', NULL, NULL,
			timestamp '2026-01-01' + g * interval '1 minute', timestamp '2026-01-01' + g * interval '1 minute', NULL,
			CASE WHEN g % 3 = 0 THEN NULL ELSE 'acct_' || g % 3 END
		FROM generate_series(1, 5000) g;
	CREATE INDEX ON payments.commands (state);
	CREATE INDEX ON payments.commands (created_at);
	CREATE INDEX ON payments.commands (updated_at);
	CREATE INDEX ON payments.commands (idempotency_key);
	CREATE INDEX ON payments.commands (provider_id);
	CREATE INDEX ON payments.commands (target_id);
	ANALYZE payments.commands`); err != nil {
		t.Fatal(err)
	}
	table := reconcile.DefaultObligationTable()
	table.Schema, table.Table, table.Columns.Account = "payments", "commands", "account"
	r, err := NewObligations(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	q, err := r.prepared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	named := Named{
		IDs:         []string{"0b0f8a52-3c1e-4a47-9d0a-6f2a1b8c9d01", "not-a-uuid"},
		Keys:        []string{"key-17", "key-18"},
		ProviderIDs: []string{"py_17", "re_9"},
	}
	readArgs := []any{q.open, from, from.Add(time.Hour), from, from.Add(time.Hour),
		q.id.apply(named.IDs), q.key.apply(named.Keys), q.providerID.apply(named.ProviderIDs)}
	if q.targetParam == 9 {
		readArgs = append(readArgs, q.targetID.apply(named.ProviderIDs))
	}
	for _, tc := range []struct {
		name string
		sql  string
		args []any
	}{
		{"read", q.whole.read, readArgs},
		{"get", q.get, []any{"0b0f8a52-3c1e-4a47-9d0a-6f2a1b8c9d01"}},
		{"read of a connected account", q.account.read, append(readArgs, "acct_1")},
		{"read of the platform", q.platform.read, readArgs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := explain(t, r, tc.sql, tc.args)
			if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") {
				t.Errorf("plan of the %s does not use the table's indexes:\n%s", tc.name, plan)
			}
		})
	}
}

// explain returns the plan of sql with args, sequential scans priced out.
func explain(tb testing.TB, r *Obligations, sql string, args []any) string {
	tb.Helper()
	return explainAfter(tb, r, "SET LOCAL enable_seqscan = off", sql, args)
}

// explainAfter returns the plan of sql with args, in a transaction that
// first runs the statements of setup ("" none).
func explainAfter(tb testing.TB, r *Obligations, setup, sql string, args []any) string {
	tb.Helper()
	var lines []string
	err := pgx.BeginFunc(context.Background(), r.pool, func(tx pgx.Tx) error {
		if setup != "" {
			if _, err := tx.Exec(context.Background(), setup); err != nil {
				return err
			}
		}
		rows, err := tx.Query(context.Background(), "EXPLAIN (VERBOSE) "+sql, args...)
		if err != nil {
			return err
		}
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		tb.Fatalf("explain: %v", err)
	}
	return strings.Join(lines, "\n")
}

// permute puts a Read's rows in id order in place, whatever order they
// came in: every permutation of a few sizes, each obligation moved to
// where the sorted order says and none lost.
func TestPermuteSortsInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 100, 1000} {
		for range 20 {
			obs := make([]reconcile.Obligation, n)
			for i, p := range rng.Perm(n) {
				obs[i] = reconcile.Obligation{ID: fmt.Sprintf("ob-%05d", p)}
			}
			order := make([]idIndex, n)
			for i := range obs {
				order[i] = idIndex{id: obs[i].ID, at: int32(i)}
			}
			slices.SortFunc(order, func(a, b idIndex) int { return strings.Compare(a.id, b.id) })
			permute(obs, order)
			for i := range obs {
				if want := fmt.Sprintf("ob-%05d", i); obs[i].ID != want {
					t.Fatalf("n=%d: obs[%d] = %q, want %q", n, i, obs[i].ID, want)
				}
			}
		}
	}
}

// More than lookupMost names take statements of their own: the named
// terms behind a coalesce the planner does not estimate, and no parallel
// workers, each of which would be sent its own copy of the names; each
// list joined into one text, which the plan holds split. At or under it,
// the planner sees the names, and a read may go parallel.
func TestManyNamesPlan(t *testing.T) {
	pool := paidCharges(t, 50000)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `ANALYZE obligations`); err != nil {
		t.Fatal(err)
	}
	r, err := NewObligations(pool, reconcile.DefaultObligationTable())
	if err != nil {
		t.Fatal(err)
	}
	q, err := r.prepared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sql, _ := r.statements(q)
	few := Named{ProviderIDs: []string{"ch_7", "ch_8"}}
	var many Named
	for i := range lookupMost + 1 {
		many.ProviderIDs = append(many.ProviderIDs, fmt.Sprintf("ch_%d", i))
	}
	from := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	window := []any{q.open, from, from.Add(time.Hour), from, from.Add(time.Hour)}
	// read and named are the statements, plans and parameters Read and
	// ReadNamed take for n.
	read := func(n Named) (string, readPlan, []any) {
		stmt, plan := sql.forRead(n)
		stmt, names := q.namedParams(n, plan, stmt, sql.readJoined)
		return stmt, plan, append(slices.Clip(window), names...)
	}
	named := func(n Named) (string, readPlan, []any) {
		stmt, plan := sql.forNamed(n)
		stmt, names := q.namedParams(n, plan, stmt, sql.namedJoined)
		return stmt, plan, names
	}
	// asArrays are the many-names statements with their names as arrays,
	// as a name holding the separator sends them.
	asArrays := func(stmt string, first []any) func(Named) (string, readPlan, []any) {
		return func(n Named) (string, readPlan, []any) {
			return stmt, manyNames, append(slices.Clip(first), q.namedArgs(n)...)
		}
	}
	for _, tc := range []struct {
		name                    string
		stmt                    func(Named) (string, readPlan, []any)
		named                   Named
		plan                    readPlan
		coalesce, gather, split bool
	}{
		{"read, few names", read, few, planned, false, true, false},
		{"read, many names", read, many, manyNames, true, false, true},
		{"read, many names as arrays", asArrays(sql.readMany, window), many, manyNames, true, false, false},
		{"named, few names", named, few, lookUp, false, false, false},
		{"named, many names", named, many, manyNames, true, false, true},
		{"named, many names as arrays", asArrays(sql.namedMany, nil), many, manyNames, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stmt, plan, args := tc.stmt(tc.named)
			if plan != tc.plan {
				t.Fatalf("planned as %d, want %d", plan, tc.plan)
			}
			if got := strings.Contains(stmt, "string_to_array"); got != tc.split {
				t.Errorf("names joined: %v, want %v", got, tc.split)
			}
			// As query runs it, with parallel workers made free, so that
			// only plan's settings keep a read from them.
			setup := `SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL parallel_setup_cost = 0;
				SET LOCAL parallel_tuple_cost = 0; SET LOCAL min_parallel_table_scan_size = 0`
			if set := plan.settings(); set != "" {
				setup += "; " + set
			}
			text := explainAfter(t, r, setup, stmt, args)
			// Joined names are split once, when the statement is
			// planned: the plan holds a constant array, never the split.
			if strings.Contains(text, "string_to_array") {
				t.Errorf("the plan splits the names as it runs:\n%.2000s", text)
			}
			if got := strings.Contains(text, "COALESCE"); got != tc.coalesce {
				t.Errorf("named terms behind a coalesce: %v, want %v:\n%.2000s", got, tc.coalesce, text)
			}
			if got := strings.Contains(text, "Gather"); got != tc.gather {
				t.Errorf("parallel workers: %v, want %v:\n%.2000s", got, tc.gather, text)
			}
		})
	}
}

// More than lookupMost names travel as one text per list, split by the
// statement, unless a name is empty or holds the separator, when every
// list travels as an array; either way Read and ReadNamed find the rows
// an array finds: names of every character on the reference table, and
// uuid and varchar columns seen whole and through account views on a
// team's table.
func TestManyNamesJoined(t *testing.T) {
	ctx := t.Context()
	t.Run("reference table", func(t *testing.T) {
		pool := paidCharges(t, 30)
		odd := "k,\"{x}\\ é'"
		if _, err := pool.Exec(ctx, `UPDATE obligations SET idempotency_key = $1 WHERE id = 'ob-7'`, odd); err != nil {
			t.Fatal(err)
		}
		pool, log := tracedPool(t, pool)
		r, err := NewObligations(pool, reconcile.DefaultObligationTable())
		if err != nil {
			t.Fatal(err)
		}
		var many Named
		for i := range lookupMost + 1 {
			many.ProviderIDs = append(many.ProviderIDs, fmt.Sprintf("ch_%d", 2*i)) // the even charges
		}
		many.Keys = []string{odd, "key-9"}
		want := []string{"ob-7", "ob-9"}
		for i := 2; i <= 30; i += 2 {
			want = append(want, fmt.Sprintf("ob-%d", i))
		}
		slices.Sort(want)
		for _, tc := range []struct {
			name   string
			named  func(Named) Named
			joined bool
		}{
			{"joined", func(n Named) Named { return n }, true},
			// Joined, the name would be two, key-3's and key-5's.
			{"a name holding the separator", func(n Named) Named {
				n.Keys = append(slices.Clone(n.Keys), "key-3\x1fkey-5")
				return n
			}, false},
			// Joined alone, the list would be empty.
			{"an empty name", func(n Named) Named { n.IDs = []string{""}; return n }, false},
		} {
			named := tc.named(many)
			for _, read := range manyNamesReads(r, named) {
				got := readIDs(t, log, tc.name+", "+read.name, read.read, tc.joined)
				if !slices.Equal(got, want) {
					t.Errorf("%s, %s: read %v, want %v", tc.name, read.name, got, want)
				}
			}
		}
	})
	t.Run("typed table", func(t *testing.T) {
		pool, _ := pgtest.NewPool(t)
		if _, err := pool.Exec(ctx, `CREATE TABLE commands (
			id uuid PRIMARY KEY, kind text NOT NULL, idempotency_key varchar(80) NOT NULL, provider text NOT NULL,
			provider_id varchar(64), target_id varchar(64), amount bigint NOT NULL, currency text NOT NULL,
			state text NOT NULL, lease_owner text, lease_expires_at timestamptz,
			created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, paid_at timestamptz, account varchar(32));
		INSERT INTO commands SELECT md5(g::text)::uuid, 'charge', 'key-' || g, 'stripe', 'py_' || g, NULL, 100, 'usd', 'PAID',
			NULL, NULL, timestamptz '2026-01-01', timestamptz '2026-01-01', NULL, CASE WHEN g % 2 = 0 THEN NULL ELSE 'acct_1' END
		FROM generate_series(1, 40) g`); err != nil {
			t.Fatal(err)
		}
		var uuid5 string
		if err := pool.QueryRow(ctx, `SELECT md5('5')::uuid::text`).Scan(&uuid5); err != nil {
			t.Fatal(err)
		}
		pool, log := tracedPool(t, pool)
		table := reconcile.DefaultObligationTable()
		table.Table, table.Columns.Account = "commands", "account"
		whole, err := NewObligations(pool, table)
		if err != nil {
			t.Fatal(err)
		}
		var named Named
		for i := range lookupMost + 1 {
			named.ProviderIDs = append(named.ProviderIDs, fmt.Sprintf("py_%d", 4*i)) // every fourth
		}
		named.IDs, named.Keys = []string{uuid5, "not-a-uuid"}, []string{"key-3"}
		arrays := named
		arrays.Keys = append(slices.Clone(named.Keys), "key-none\x1f") // as arrays
		for _, view := range []struct {
			name string
			r    *Obligations
			want int
		}{{"whole", whole, 12}, {"platform", whole.ForAccount(""), 10}, {"acct_1", whole.ForAccount("acct_1"), 2}} {
			joined, asArrays := manyNamesReads(view.r, named), manyNamesReads(view.r, arrays)
			for i := range joined {
				name := view.name + ", " + joined[i].name
				got := readIDs(t, log, name+" joined", joined[i].read, true)
				if len(got) != view.want {
					t.Errorf("%s: read %d rows, want %d: %v", name, len(got), view.want, got)
				}
				if want := readIDs(t, log, name+" as arrays", asArrays[i].read, false); !slices.Equal(got, want) {
					t.Errorf("%s: joined read %v, as arrays %v", name, got, want)
				}
			}
		}
	})
}

// manyNamesReads are Read (over a window no row is in) and ReadNamed of
// named by r.
func manyNamesReads(r *Obligations, named Named) []struct {
	name string
	read func() ([]reconcile.Obligation, error)
} {
	ctx := context.Background()
	return []struct {
		name string
		read func() ([]reconcile.Obligation, error)
	}{
		{"ReadNamed", func() ([]reconcile.Obligation, error) { return r.ReadNamed(ctx, named) }},
		{"Read", func() ([]reconcile.Obligation, error) {
			return r.Read(ctx, reconcile.Window{From: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2020, 1, 2, 0, 0, 0, 0, time.UTC)}, named)
		}},
	}
}

// readIDs runs read and returns the ids it read, failing t unless the
// statement that read them split joined names (string_to_array) exactly
// when joined.
func readIDs(t *testing.T, log *sqlLog, name string, read func() ([]reconcile.Obligation, error), joined bool) []string {
	t.Helper()
	log.reset()
	obs, err := read()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if got := log.split(); got != joined {
		t.Errorf("%s: names joined %v, want %v", name, got, joined)
	}
	var ids []string
	for _, o := range obs {
		ids = append(ids, o.ID)
	}
	return ids
}

// sqlLog records the statements a pool's connections run.
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = append(l.sql, d.SQL)
	return ctx
}

func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *sqlLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = nil
}

// split reports whether a statement since reset split joined names.
func (l *sqlLog) split() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.sql, func(s string) bool { return strings.Contains(s, "string_to_array") })
}

// tracedPool is a pool on pool's database whose statements log records.
func tracedPool(t *testing.T, pool *pgxpool.Pool) (*pgxpool.Pool, *sqlLog) {
	t.Helper()
	cfg := pool.Config().Copy()
	log := &sqlLog{}
	cfg.ConnConfig.Tracer = log
	traced, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	return traced, log
}

// A read naming more than lookupMost names closes its connection after
// it, so that the megabytes of names pgx keeps encoded on the connection
// (until later statements overwrite them) go while the pass matches; the
// reads after it open another.
func TestManyNamesLetTheirConnectionGo(t *testing.T) {
	pool := paidCharges(t, 3)
	ctx := t.Context()
	r, err := NewObligations(pool, reconcile.DefaultObligationTable())
	if err != nil {
		t.Fatal(err)
	}
	var many Named
	for i := range lookupMost + 1 {
		many.ProviderIDs = append(many.ProviderIDs, fmt.Sprintf("ch_%d", i))
	}
	for _, tc := range []struct {
		name   string
		named  Named
		closed bool
	}{{"few names", Named{ProviderIDs: []string{"ch_2"}}, false}, {"many names", many, true}} {
		before := pool.Stat().NewConnsCount()
		got, err := r.ReadNamed(ctx, tc.named)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) == 0 {
			t.Fatalf("%s: read nothing", tc.name)
		}
		// The next statement opens a connection only if the read's went.
		if _, err := r.ReadNamed(ctx, Named{ProviderIDs: []string{"ch_1"}}); err != nil {
			t.Fatal(err)
		}
		if opened := pool.Stat().NewConnsCount() > before; opened != tc.closed {
			t.Errorf("%s: the read's connection closed: %v, want %v", tc.name, opened, tc.closed)
		}
	}
}

// paidCharges is a reference table of n paid charges, ob-1 … ob-n, each
// with its key and charge (key-i, ch_i), a minute apart from 2026-01-01.
func paidCharges(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewObligations(t)
	if _, err := pool.Exec(t.Context(), `INSERT INTO obligations (id, kind, idempotency_key, provider, provider_id, amount, currency,
			state, created_at, updated_at)
		SELECT 'ob-' || g, 'charge', 'key-' || g, 'stripe', 'ch_' || g, 100, 'usd', 'PAID',
			timestamptz '2026-01-01' + g * interval '1 minute', timestamptz '2026-01-01' + g * interval '1 minute'
		FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
	return pool
}

// The census counts the table as it stood when taken was called: a row
// written with old times after that is left to the next pass's census,
// which tells of it, for a read begun after taken saw it or not.
func TestCensusCountsTheTableAsTaken(t *testing.T) {
	pool := paidCharges(t, 3)
	r, err := NewObligations(pool, reconcile.DefaultObligationTable())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	w := reconcile.Window{From: at.Add(-time.Hour), To: at}
	c, err := r.Census(t.Context(), at, at, w, func() {
		if _, err := pool.Exec(t.Context(), `INSERT INTO obligations (id, kind, idempotency_key, provider, amount, currency,
				state, created_at, updated_at)
			VALUES ('ob-old', 'charge', 'key-old', 'stripe', 100, 'usd', 'PAID', '2026-01-01', '2026-01-01')`); err != nil {
			t.Error(err)
		}
	})
	if err != nil || c.CreatedA != 3 || c.CreatedB != 3 {
		t.Errorf("census with a row written after it was taken: %+v, %v; want 3 rows created before", c, err)
	}
	if c, err = r.Census(t.Context(), at, at, w, nil); err != nil || c.CreatedA != 4 {
		t.Errorf("the next census: %+v, %v; want 4 rows created before", c, err)
	}
}
