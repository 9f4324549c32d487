package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
)

// ErrNotFound is returned (wrapped) by Obligations.Get when no obligation
// has the id asked for.
var ErrNotFound = errors.New("obligation not found")

// Obligations reads the application's obligations table, read-only, through
// a pgx pool. Table, column and state names come from a validated
// reconcile.ObligationTable and are quoted with pgx.Identifier; every value
// travels as a query parameter.
type Obligations struct {
	pool  *pgxpool.Pool
	table reconcile.ObligationTable

	name      string // the quoted, possibly schema-qualified table name
	readSQL   string
	namedSQL  string // Read's named terms alone
	oldestSQL string // the oldest creation among Read's state and window terms
	getSQL    string
	probe     string // the select list over the table, LIMIT 0: what Check runs last
	// open are the raw state values of EXECUTING and CONFIRMATION_UNKNOWN,
	// which are in scope whatever their age.
	open []string
}

// NewObligations returns a reader of the table that table describes. A bad
// identifier or state mapping is refused with an error naming the
// configuration field (obligations.columns.state, …); nothing is sent to the
// database until Read, Get or Check.
func NewObligations(pool *pgxpool.Pool, table reconcile.ObligationTable) (*Obligations, error) {
	if err := table.Validate("obligations"); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("obligations reader: nil pool")
	}
	c := table.Columns
	q := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	name := q(table.Table)
	if table.Schema != "" {
		name = pgx.Identifier{table.Schema, table.Table}.Sanitize()
	}
	// Text-like columns are read and compared as ::text so that a team's
	// varchar, enum or uuid column works as well as the reference text one;
	// on a text column the cast is a no-op and its indexes still apply.
	// Amount and the times are left as they are: the scanners below accept
	// every integer type, numeric without fraction, timestamp and
	// timestamptz.
	txt := func(col string) string { return q(col) + "::text" }
	list := strings.Join([]string{
		txt(c.ID), txt(c.Kind), txt(c.IdempotencyKey), txt(c.Provider), txt(c.ProviderID), txt(c.TargetID),
		q(c.Amount), txt(c.Currency), txt(c.State), txt(c.LeaseOwner), q(c.LeaseExpiresAt),
		q(c.CreatedAt), q(c.UpdatedAt), q(c.PaidAt),
	}, ", ")
	from := " FROM " + name
	// One scan of the table, every scope rule an OR term. The created and
	// updated bounds are separate parameters so that the two columns may
	// differ in type (timestamp vs timestamptz) without a conflicting
	// parameter type. The named lists are = ANY(array): under a custom plan
	// PostgreSQL ≥ 14 turns each into a hash probe, so hundreds of
	// thousands of names cost one hash build, not a comparison per name per
	// row; Read forces the custom plan (see there).
	scope := txt(c.State) + " = ANY($1::text[])" +
		" OR (" + q(c.CreatedAt) + " >= $2 AND " + q(c.CreatedAt) + " < $3)" +
		" OR (" + q(c.UpdatedAt) + " >= $4 AND " + q(c.UpdatedAt) + " < $5)"
	named := func(n int) string {
		p := func(k int) string { return fmt.Sprintf("$%d::text[]", k) }
		return txt(c.ID) + " = ANY(" + p(n) + ")" +
			" OR " + txt(c.IdempotencyKey) + " = ANY(" + p(n+1) + ")" +
			" OR " + txt(c.ProviderID) + " = ANY(" + p(n+2) + ")" +
			" OR " + txt(c.TargetID) + " = ANY(" + p(n+2) + ")"
	}
	return &Obligations{
		pool:      pool,
		table:     table,
		name:      name,
		readSQL:   "SELECT " + list + from + " WHERE " + scope + " OR " + named(6),
		namedSQL:  "SELECT " + list + from + " WHERE " + named(1),
		oldestSQL: "SELECT min(" + q(c.CreatedAt) + ")" + from + " WHERE " + scope,
		// LIMIT 2: a second row means the id column is not unique, which
		// Get reports rather than picking one.
		getSQL: "SELECT " + list + from + " WHERE " + txt(c.ID) + " = $1 LIMIT 2",
		probe:  "SELECT " + list + from + " LIMIT 0",
		open:   []string{table.Raw(reconcile.Executing), table.Raw(reconcile.ConfirmationUnknown)},
	}, nil
}

// Named is what the listed provider objects name, each list matched against
// the obligations table: IDs are obligation ids (metadata), Keys are
// idempotency keys (metadata and events), ProviderIDs are the objects' own
// ids, matched against both provider_id and target_id.
type Named struct {
	IDs, Keys, ProviderIDs []string
}

// Read returns DESIGN.md §3's scope, sorted by id, each obligation once:
// every obligation whose state is EXECUTING or CONFIRMATION_UNKNOWN
// whatever its age; those created or updated in [w.From, w.To); and those
// whose id, idempotency key, provider_id or target_id is named. An
// obligation that cannot be mapped (an unknown kind, a NULL amount) fails
// the read: leaving it out would turn its money into orphans.
func (r *Obligations) Read(ctx context.Context, w reconcile.Window, named Named) ([]reconcile.Obligation, error) {
	if w.To.Before(w.From) {
		return nil, fmt.Errorf("read obligations: window from %s is after to %s",
			w.From.Format(time.RFC3339Nano), w.To.Format(time.RFC3339Nano))
	}
	from, to := w.From.UTC(), w.To.UTC()
	obs, err := r.query(ctx, r.readSQL, r.open, from, to, from, to, named.IDs, named.Keys, named.ProviderIDs)
	if err != nil {
		return nil, fmt.Errorf("read obligations: %w", err)
	}
	return obs, nil
}

// ReadNamed returns, sorted by id, the obligations that named names alone
// (by id, idempotency key, provider_id or target_id), whatever their state
// and age: those the objects a run reads as evidence belong to.
func (r *Obligations) ReadNamed(ctx context.Context, named Named) ([]reconcile.Obligation, error) {
	if len(named.IDs)+len(named.Keys)+len(named.ProviderIDs) == 0 {
		return nil, nil
	}
	obs, err := r.query(ctx, r.namedSQL, named.IDs, named.Keys, named.ProviderIDs)
	if err != nil {
		return nil, fmt.Errorf("read named obligations: %w", err)
	}
	return obs, nil
}

// Oldest returns the earliest created_at among the obligations Read puts
// in scope by state and window (every EXECUTING and CONFIRMATION_UNKNOWN
// one, those created or updated in w), the zero time if there is none: a
// run must read the provider's records back to it (docs/design.md,
// "Coverage").
func (r *Obligations) Oldest(ctx context.Context, w reconcile.Window) (time.Time, error) {
	from, to := w.From.UTC(), w.To.UTC()
	var oldest scanTime
	if err := r.pool.QueryRow(ctx, r.oldestSQL, r.open, from, to, from, to).Scan(&oldest); err != nil {
		return time.Time{}, fmt.Errorf("read the oldest obligation in scope: %w", err)
	}
	if oldest.infinite {
		return time.Time{}, fmt.Errorf("read the oldest obligation in scope: obligations.columns.created_at is infinite")
	}
	return oldest.t, nil
}

// query runs one of the reading statements in a read-only transaction and
// collects its rows.
func (r *Obligations) query(ctx context.Context, sql string, args ...any) ([]reconcile.Obligation, error) {
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	// Read-only: there is nothing to commit.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// pgx caches the prepared statement, and after five executions
	// PostgreSQL may switch it to a generic plan, where the arrays are
	// parameters rather than constants: = ANY is then no longer hashed and
	// every row is compared with every name (minutes on a large table
	// instead of a second). A custom plan also lets the planner use a
	// team's indexes (a BitmapOr) when it has one on every column.
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
		return nil, fmt.Errorf("set plan_cache_mode: %w", err)
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return r.collect(rows)
}

// Get returns the obligation with id, or an error wrapping ErrNotFound when
// there is none. It is what `reconcile trace` starts from.
func (r *Obligations) Get(ctx context.Context, id string) (reconcile.Obligation, error) {
	rows, err := r.pool.Query(ctx, r.getSQL, id)
	if err != nil {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, err)
	}
	// collect refuses a second row with the same id: the id column is then
	// not unique.
	obs, err := r.collect(rows)
	if err != nil {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, err)
	}
	if len(obs) == 0 {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, ErrNotFound)
	}
	return obs[0], nil
}

// Check verifies that the table and every configured column exist, that
// the amount and time columns have types the reader understands, and that
// the reader may select from the table. Its error names each missing or
// unusable column by its configuration field. The command runs it before
// any provider call, so that a wrong mapping costs no Stripe requests.
func (r *Obligations) Check(ctx context.Context) error {
	var oid *uint32
	// to_regclass takes the quoted name as a value: it resolves the schema
	// (or the search path) exactly as the queries will, and answers NULL
	// instead of failing when the table is absent.
	if err := r.pool.QueryRow(ctx, "SELECT to_regclass($1)::oid", r.name).Scan(&oid); err != nil {
		return fmt.Errorf("check obligations table %s: %w", r.name, err)
	}
	if oid == nil {
		field := "obligations.table"
		if r.table.Schema != "" {
			field = "obligations.schema, obligations.table"
		}
		return fmt.Errorf("check obligations table: %s: table %s does not exist", field, r.name)
	}
	rows, err := r.pool.Query(ctx, `SELECT a.attname, t.typname, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, *oid)
	if err != nil {
		return fmt.Errorf("check obligations table %s: %w", r.name, err)
	}
	type column struct{ typname, typ string }
	have := map[string]column{}
	var attname, typname, typ string
	_, err = pgx.ForEachRow(rows, []any{&attname, &typname, &typ}, func() error {
		have[attname] = column{typname, typ}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check obligations table %s: %w", r.name, err)
	}
	integer := []string{"int2", "int4", "int8", "numeric"}
	timestamp := []string{"timestamptz", "timestamp"}
	c := r.table.Columns
	var problems []string
	for _, col := range []struct {
		field, name string
		types       []string // acceptable pg_type names; nil: anything, read as text
	}{
		{"id", c.ID, nil}, {"kind", c.Kind, nil}, {"idempotency_key", c.IdempotencyKey, nil},
		{"provider", c.Provider, nil}, {"provider_id", c.ProviderID, nil}, {"target_id", c.TargetID, nil},
		{"amount", c.Amount, integer}, {"currency", c.Currency, nil}, {"state", c.State, nil},
		{"lease_owner", c.LeaseOwner, nil}, {"lease_expires_at", c.LeaseExpiresAt, timestamp},
		{"created_at", c.CreatedAt, timestamp}, {"updated_at", c.UpdatedAt, timestamp}, {"paid_at", c.PaidAt, timestamp},
	} {
		got, ok := have[col.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("obligations.columns.%s: column %q does not exist", col.field, col.name))
		case col.types != nil && !slices.Contains(col.types, got.typname):
			problems = append(problems, fmt.Sprintf("obligations.columns.%s: column %q is %s, want one of %s",
				col.field, col.name, got.typ, strings.Join(col.types, ", ")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("check obligations table %s: %s", r.name, strings.Join(problems, "; "))
	}
	// The catalogue says the columns exist; selecting them says this role
	// may read them.
	rows, err = r.pool.Query(ctx, r.probe)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return fmt.Errorf("check obligations table %s: select: %w", r.name, err)
	}
	return nil
}

// collect maps rows to obligations, one row at a time into reused scan
// targets, sorts them by id and closes rows.
//
// A million obligations are a quarter of a gigabyte of structs: rows go
// into chunks of growing size rather than one slice that append would copy
// at every doubling, the sort moves (id, index) pairs rather than the
// structs, and the result is written once, in order, into a slice of
// exactly the right length.
func (r *Obligations) collect(rows pgx.Rows) ([]reconcile.Obligation, error) {
	defer rows.Close()
	// Kind, provider, currency, state and lease owner take a handful of
	// values over a whole table: one string each instead of one per row.
	intern := func() map[string]string { return make(map[string]string, 8) }
	var (
		id, key, providerID, targetID           scanText
		kind, provider, currency, state, leaser = scanText{intern: intern()}, scanText{intern: intern()},
			scanText{intern: intern()}, scanText{intern: intern()}, scanText{intern: intern()}
		amount                        pgtype.Int8
		lease, created, updated, paid scanTime
	)
	targets := []any{&id, &kind, &key, &provider, &providerID, &targetID,
		&amount, &currency, &state, &leaser, &lease, &created, &updated, &paid}
	var (
		chunks [][]reconcile.Obligation
		order  []idIndex
	)
	next := make([]reconcile.Obligation, 0, 64)
	for rows.Next() {
		if err := rows.Scan(targets...); err != nil {
			// pgx scans columns in order: when a later one fails, the id
			// (the first) is already this row's, and names it.
			if se := (pgx.ScanArgError{}); errors.As(err, &se) && se.ColumnIndex > 0 {
				return nil, fmt.Errorf("obligation %q: %w", id.s, err)
			}
			return nil, fmt.Errorf("row %d: %w", len(order)+1, err)
		}
		k, ok := obligationKind(kind.s)
		if !ok {
			return nil, fmt.Errorf("obligation %q: kind %q is neither charge nor refund", id.s, kind.s)
		}
		if !amount.Valid {
			return nil, fmt.Errorf("obligation %q: amount is NULL", id.s)
		}
		for _, t := range []struct {
			field string
			t     *scanTime
		}{{"lease_expires_at", &lease}, {"created_at", &created}, {"updated_at", &updated}, {"paid_at", &paid}} {
			if t.t.infinite {
				return nil, fmt.Errorf("obligation %q: %s is infinite", id.s, t.field)
			}
		}
		if len(next) == cap(next) {
			chunks = append(chunks, next)
			next = make([]reconcile.Obligation, 0, min(2*cap(next), 8192))
		}
		order = append(order, idIndex{id: id.s, chunk: int32(len(chunks)), at: int32(len(next))})
		next = append(next, reconcile.Obligation{
			ID:             id.s,
			Kind:           k,
			IdempotencyKey: key.s,
			Provider:       provider.s,
			ProviderID:     providerID.s,
			TargetID:       targetID.s,
			Money:          reconcile.Money{Amount: amount.Int64, Currency: strings.TrimSpace(currency.s)},
			State:          r.table.Canonical(state.s),
			RawState:       state.s,
			LeaseOwner:     leaser.s,
			LeaseExpiresAt: lease.t,
			CreatedAt:      created.t,
			UpdatedAt:      updated.t,
			PaidAt:         paid.t,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	chunks = append(chunks, next)
	// Sorted in Go, byte-wise, rather than by ORDER BY: the database's
	// collation would order ids differently from every other sort in the
	// program, and sorting a million rows in PostgreSQL spills to disk at
	// the default work_mem.
	cmp := func(a, b idIndex) int { return strings.Compare(a.id, b.id) }
	if !slices.IsSortedFunc(order, cmp) {
		slices.SortFunc(order, cmp)
	}
	obs := make([]reconcile.Obligation, len(order))
	for i, o := range order {
		// One query returns each row once: equal ids mean the configured id
		// column is not unique, and compare-and-set by id would be
		// ambiguous.
		if i > 0 && o.id == order[i-1].id {
			return nil, fmt.Errorf("id %q is on more than one row of %s: "+
				"obligations.columns.id must name a unique column", o.id, r.name)
		}
		obs[i] = chunks[o.chunk][o.at]
	}
	return obs, nil
}

// idIndex places one collected obligation: its id, and where it is.
type idIndex struct {
	id        string
	chunk, at int32
}

// obligationKind accepts the kind column's value in any case and with
// surrounding blanks: the reference table's CHECK allows only the two
// lower-case words, but a team's table may not constrain it.
func obligationKind(raw string) (reconcile.ObjectKind, bool) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "charge":
		return reconcile.Charge, true
	case "refund":
		return reconcile.Refund, true
	}
	return "", false
}

// scanText scans a text column (every text-like column is selected as
// ::text) straight from pgx's buffer; NULL reads as "". With intern set,
// equal values share one string.
type scanText struct {
	s      string
	intern map[string]string
}

// ScanBytes implements pgtype.BytesScanner. b is pgx's buffer, reused for
// the next row: it is copied, or looked up without a copy.
func (t *scanText) ScanBytes(b []byte) error {
	if t.intern == nil {
		t.s = string(b)
		return nil
	}
	if s, ok := t.intern[string(b)]; ok {
		t.s = s
		return nil
	}
	t.s = string(b)
	// Bounded, should a team's column hold more than a handful of values.
	if len(t.intern) < 256 {
		t.intern[t.s] = t.s
	}
	return nil
}

// scanTime scans timestamptz and timestamp columns alike (a timestamp
// without time zone is read as UTC, as pgx writes it), NULL as the zero
// time. PostgreSQL's ±infinity has no time.Time; it is flagged so that the
// row is refused with the column's name rather than misread.
type scanTime struct {
	t        time.Time
	infinite bool
}

// ScanTimestamptz implements pgtype.TimestamptzScanner.
func (s *scanTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	s.set(v.Time, v.Valid, v.InfinityModifier)
	return nil
}

// ScanTimestamp implements pgtype.TimestampScanner.
func (s *scanTime) ScanTimestamp(v pgtype.Timestamp) error {
	s.set(v.Time, v.Valid, v.InfinityModifier)
	return nil
}

func (s *scanTime) set(t time.Time, valid bool, inf pgtype.InfinityModifier) {
	*s = scanTime{}
	switch {
	case !valid:
	case inf != pgtype.Finite:
		s.infinite = true
	default:
		s.t = t.UTC()
	}
}
