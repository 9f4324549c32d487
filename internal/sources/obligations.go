package sources

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// travels as a query parameter, cast to the type of the column it is
// compared with, as the catalogue names it (see Check).
//
// With an account column mapped, ForAccount gives a view that reads one
// Stripe account's obligations only (docs/design.md, "Obligations").
type Obligations struct {
	pool  *pgxpool.Pool
	table reconcile.ObligationTable

	// root is the reader the view was made from (itself, for the whole
	// table): its mu and q are the views' too, so that the catalogue is
	// read once for all of them.
	root *Obligations
	// scoped says that this is a view of one account's obligations:
	// account's (acct_…), or the platform's for "".
	scoped  bool
	account string

	name  string // the quoted, possibly schema-qualified table name
	list  string // the select list, in collect's order
	probe string // the select list over the table, LIMIT 0: what Check runs last
	// canon maps each configured state value to its canonical state; a
	// value not in it is unmapped (see reconcile.ObligationTable.Canonical).
	canon map[string]reconcile.State

	mu sync.Mutex
	q  *obligationQueries // built by Check from the column types; nil before
}

// obligationQueries are the statements of one reading of the catalogue:
// built from the column types, so that every comparison is in the
// column's own type (an enum with an enum, a uuid with a uuid) and the
// team's indexes apply.
type obligationQueries struct {
	types reconcile.ObligationTypes
	// whole are the statements over the whole table.
	whole accountQueries
	get   string
	// mapped are the raw values of every mapped state.
	mapped []string
	// open are the raw state values of EXECUTING and CONFIRMATION_UNKNOWN,
	// which are in scope whatever their age.
	open []string
	// Filters of the names the provider gave, per compared column: a name
	// that cannot be a value of the column's type (not a uuid, for a uuid
	// column) matches no row, and is left out rather than failing the
	// cast. nil keeps every name.
	id, key, providerID, targetID nameFilter
	// targetParam is the parameter the target_id column is compared with:
	// provider_id's ($8) when both keep the same names, else its own.
	targetParam int
	// With an account column mapped: platform holds read's, named's and
	// oldest's statements for the platform's own obligations (a NULL or
	// empty account), account those for one connected account's, which
	// take its id as one more parameter, after the others.
	platform, account accountQueries
}

// accountQueries are the reading statements of the whole table, or of one
// account's obligations. named is read's named terms alone; oldest the
// earliest creation among read's state and window terms; census counts,
// by raw state, the rows created before $1 and before $2, and those
// created or updated in a window ($4 to $7) whose state is none of the
// mapped values ($3). readMany and namedMany are read and named for more
// than lookupMost names (manyNames); readJoined and namedJoined are
// those with each list of names one text parameter (joinNames).
type accountQueries struct {
	read, named, oldest, census string
	readMany, namedMany         string
	readJoined, namedJoined     string
}

// nameFilter keeps the names that can be values of one column's type.
type nameFilter func(names []string) []string

// apply runs f, or keeps every name when there is none.
func (f nameFilter) apply(names []string) []string {
	if f == nil {
		return names
	}
	return f(names)
}

// NewObligations returns a reader of the table that table describes. A bad
// identifier or state mapping is refused with an error naming the
// configuration field (obligations.columns.state, …); nothing is sent to the
// database until Check, Read or Get.
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
	// Text-like columns are selected as ::text, whatever their type (an
	// enum, a uuid, a varchar): a cast in the select list costs nothing and
	// touches no index. Amount and the times are left as they are: the
	// scanners below accept every integer type, numeric, timestamp and
	// timestamptz (a domain's values arrive as its base type's).
	txt := func(col string) string { return q(col) + "::text" }
	list := strings.Join([]string{
		txt(c.ID), txt(c.Kind), txt(c.IdempotencyKey), txt(c.Provider), txt(c.ProviderID), txt(c.TargetID),
		q(c.Amount), txt(c.Currency), txt(c.State), txt(c.LeaseOwner), q(c.LeaseExpiresAt),
		q(c.CreatedAt), q(c.UpdatedAt), q(c.PaidAt),
	}, ", ")
	if c.Account != "" {
		list += ", " + txt(c.Account)
	}
	canon := make(map[string]reconcile.State, len(table.States))
	for s, v := range table.States {
		canon[v] = s
	}
	r := &Obligations{
		pool:  pool,
		table: table,
		name:  name,
		list:  list,
		probe: "SELECT " + list + " FROM " + name + " LIMIT 0",
		canon: canon,
	}
	r.root = r
	return r, nil
}

// ForAccount returns a view of r that reads, in Read, ReadNamed and
// Oldest, only the obligations of Stripe account acct: a connected
// account's (acct_…) where the account column holds its id, the
// platform's own for "" where it is NULL or empty. With no account column
// mapped every obligation is the platform's: ForAccount("") reads the
// whole table, and a connected account's view reads nothing, sending no
// query. Get stays global. The view shares r's reading of the catalogue
// (Check runs once for all views), and passes the account as a query
// parameter (docs/design.md, "Obligations").
func (r *Obligations) ForAccount(acct string) *Obligations {
	root := r.root
	return &Obligations{
		pool: root.pool, table: root.table, name: root.name, list: root.list, probe: root.probe, canon: root.canon,
		root: root, scoped: true, account: acct,
	}
}

// readsNothing reports whether r is a view of a connected account on a
// table without an account column: none of its obligations can be that
// account's.
func (r *Obligations) readsNothing() bool {
	return r.scoped && r.account != "" && r.table.Columns.Account == ""
}

// statements are read's, named's and oldest's statements for r's
// obligations, and the parameter the restricted ones take beyond theirs.
func (r *Obligations) statements(q *obligationQueries) (accountQueries, []any) {
	switch {
	case !r.scoped || r.table.Columns.Account == "":
		return q.whole, nil
	case r.account == "":
		return q.platform, nil
	}
	return q.account, []any{r.account}
}

// textType is the reference table's type of every text column: a value
// compared with such a column needs no cast beyond the parameter's own.
const textType = `"pg_catalog"."text"`

// buildQueries builds the read and get statements for columns of types;
// account is the type of the account column, when one is mapped.
func (r *Obligations) buildQueries(types reconcile.ObligationTypes, filters map[string]nameFilter, account reconcile.ColumnType) *obligationQueries {
	c := r.table.Columns
	q := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	// in is the parameter n (text[]) as an array of the column's base
	// type: the cast is on the parameter, a constant under the custom
	// plan Read forces, never on the column.
	in := func(n int, t reconcile.ColumnType) string {
		p := fmt.Sprintf("$%d::text[]", n)
		if t.Base != textType {
			p += "::" + t.Base + "[]"
		}
		return p
	}
	// joined is in for a parameter that holds the names as one text,
	// split where joinNames joined them: string_to_array of a constant is
	// folded into a constant array under the custom plan, and hashed.
	joined := func(n int, t reconcile.ColumnType) string {
		p := fmt.Sprintf("string_to_array($%d::text, chr(%d))", n, nameSep)
		if t.Base != textType {
			p += "::" + t.Base + "[]"
		}
		return p
	}
	qs := &obligationQueries{
		types:       types,
		open:        []string{r.table.Raw(reconcile.Executing), r.table.Raw(reconcile.ConfirmationUnknown)},
		id:          filters["id"],
		key:         filters["idempotency_key"],
		providerID:  filters["provider_id"],
		targetID:    filters["target_id"],
		targetParam: 8,
	}
	if types.TargetID.Kind != types.ProviderID.Kind || types.TargetID.Base != types.ProviderID.Base {
		qs.targetParam = 9
	}
	from := " FROM " + r.name
	// One scan of the table, every scope rule an OR term. The created and
	// updated bounds are separate parameters, each of its column's type,
	// so that the two columns may differ (timestamp vs timestamptz); a
	// timestamp without time zone is compared with the bound's UTC wall
	// clock, as it is read. The named lists are = ANY(array): under a
	// custom plan PostgreSQL ≥ 14 turns each into a hash probe, so hundreds
	// of thousands of names cost one hash build, not a comparison per name
	// per row; Read forces the custom plan (see there).
	scope := q(c.State) + " = ANY(" + in(1, types.State) + ")" +
		" OR (" + q(c.CreatedAt) + " >= $2::" + types.CreatedAt.Base + " AND " + q(c.CreatedAt) + " < $3::" + types.CreatedAt.Base + ")" +
		" OR (" + q(c.UpdatedAt) + " >= $4::" + types.UpdatedAt.Base + " AND " + q(c.UpdatedAt) + " < $5::" + types.UpdatedAt.Base + ")"
	// named's parameters begin at first: the ids, the keys, the provider
	// ids and (if apart) the target ids.
	named := func(first int, in func(int, reconcile.ColumnType) string) string {
		target := first + 2
		if qs.targetParam == 9 {
			target = first + 3
		}
		return q(c.ID) + " = ANY(" + in(first, types.ID) + ")" +
			" OR " + q(c.IdempotencyKey) + " = ANY(" + in(first+1, types.IdempotencyKey) + ")" +
			" OR " + q(c.ProviderID) + " = ANY(" + in(first+2, types.ProviderID) + ")" +
			" OR " + q(c.TargetID) + " = ANY(" + in(target, types.TargetID) + ")"
	}
	// Read and ReadNamed select how many rows they return with every row
	// (counted), so that collect holds them in one slice of the right
	// length from the first row on.
	counted := r.list + countColumn
	// One scan for every count an incremental pass takes of the table,
	// grouped by the raw state (a handful of groups), summed in Go. The
	// state compared as text: a value no enum label holds is still a value
	// to leave out. The window's created and updated bounds are $4 to $7.
	created, updated := q(c.CreatedAt), q(c.UpdatedAt)
	before := func(n int) string {
		return fmt.Sprintf("count(*) FILTER (WHERE %s < $%d::%s)", created, n, types.CreatedAt.Base)
	}
	window := "(" + created + " >= $4::" + types.CreatedAt.Base + " AND " + created + " < $5::" + types.CreatedAt.Base + ")" +
		" OR (" + updated + " >= $6::" + types.UpdatedAt.Base + " AND " + updated + " < $7::" + types.UpdatedAt.Base + ")"
	census := func(restrict string) string {
		return "SELECT " + q(c.State) + "::text, " + before(1) + ", " + before(2) +
			", count(*) FILTER (WHERE NOT (" + q(c.State) + "::text = ANY($3::text[])) AND (" + window + "))" +
			from + " WHERE true" + restrict + " GROUP BY 1"
	}
	// statements are the reading statements, each restricted by one more
	// AND term (none for the whole table) around its whole WHERE clause,
	// so that the scope's plan (its hash probes, a team's BitmapOr) stays
	// as it is and the restriction filters its rows: read's and named's
	// (named's parameters five fewer than read's), oldest's and census's.
	statements := func(readAnd, namedAnd, oldestAnd, censusAnd string) accountQueries {
		return accountQueries{
			read:        "SELECT " + counted + from + " WHERE (" + scope + " OR " + named(6, in) + ")" + readAnd,
			readMany:    "SELECT " + counted + from + " WHERE (" + scope + " OR " + unestimated(named(6, in)) + ")" + readAnd,
			readJoined:  "SELECT " + counted + from + " WHERE (" + scope + " OR " + unestimated(named(6, joined)) + ")" + readAnd,
			named:       "SELECT " + counted + from + " WHERE (" + named(1, in) + ")" + namedAnd,
			namedMany:   "SELECT " + counted + from + " WHERE " + unestimated(named(1, in)) + namedAnd,
			namedJoined: "SELECT " + counted + from + " WHERE " + unestimated(named(1, joined)) + namedAnd,
			oldest:      "SELECT min(" + q(c.CreatedAt) + ")" + from + " WHERE (" + scope + ")" + oldestAnd,
			census:      census(censusAnd),
		}
	}
	qs.whole = statements("", "", "", "")
	for _, st := range reconcile.States {
		qs.mapped = append(qs.mapped, r.table.Raw(st))
	}
	id := "$1"
	if types.ID.Base != textType {
		id = "$1::text::" + types.ID.Base
	}
	// LIMIT 2: a second row means the id column is not unique, which Get
	// reports rather than picking one.
	qs.get = "SELECT " + r.list + from + " WHERE " + q(c.ID) + " = " + id + " LIMIT 2"
	if c.Account != "" {
		col := q(c.Account)
		cast := ""
		if account.Base != textType {
			cast = "::" + account.Base
		}
		platform := " AND (" + col + " IS NULL OR " + col + " = ''" + cast + ")"
		acct := func(n int) string { return fmt.Sprintf(" AND %s = $%d::text%s", col, n, cast) }
		qs.platform = statements(platform, platform, platform, platform)
		// The account's parameter follows the others: read's last is
		// the target ids' ($9 apart, else provider ids' $8), named's
		// five fewer, oldest's $5, census's $7.
		qs.account = statements(acct(qs.targetParam+1), acct(qs.targetParam-4), acct(6), acct(8))
	}
	return qs
}

// prepared returns the statements of the last Check, running Check first
// if it never ran: the column types are read once, not per Read.
func (r *Obligations) prepared(ctx context.Context) (*obligationQueries, error) {
	root := r.root
	root.mu.Lock()
	q := root.q
	root.mu.Unlock()
	if q != nil {
		return q, nil
	}
	if err := root.Check(ctx); err != nil {
		return nil, err
	}
	root.mu.Lock()
	defer root.mu.Unlock()
	return root.q, nil
}

// Types returns the column types the last Check read from the catalogue,
// for the store's compare-and-set (store.Store.UseTypes); the zero value
// before any Check.
func (r *Obligations) Types() reconcile.ObligationTypes {
	root := r.root
	root.mu.Lock()
	defer root.mu.Unlock()
	if root.q == nil {
		return reconcile.ObligationTypes{}
	}
	return root.q.types
}

// Named is what the listed provider objects name, each list matched against
// the obligations table: IDs are obligation ids (metadata), Keys are
// idempotency keys (metadata and events), ProviderIDs are the objects' own
// ids, matched against both provider_id and target_id.
type Named struct {
	IDs, Keys, ProviderIDs []string
}

// count is how many names n holds.
func (n Named) count() int { return len(n.IDs) + len(n.Keys) + len(n.ProviderIDs) }

// Read returns the scope of docs/design.md's "Coverage", sorted by id, each obligation once:
// every obligation whose state is EXECUTING or CONFIRMATION_UNKNOWN
// whatever its age; those created or updated in [w.From, w.To); and those
// whose id, idempotency key, provider_id or target_id is named. An
// obligation that cannot be mapped (a NULL or empty id, an unknown kind, a
// NULL or non-positive amount, a NULL state or created_at) fails the read:
// leaving it out would turn its money into orphans. Read runs Check first
// if it never ran. A view (ForAccount) reads its account's alone.
func (r *Obligations) Read(ctx context.Context, w reconcile.Window, named Named) ([]reconcile.Obligation, error) {
	return r.read(ctx, w, named, nil)
}

// ReadShard returns, sorted by id, the obligations in scope of w by state
// and window (Read's, without names) whose id hashes to shard of shards
// (reconcile.ShardOf): one shard's own of a pass split in shards
// (docs/design.md, "Shards"). Every row is still read and checked, as
// Read checks it, so that a row no shard could read fails each of them;
// only the shard's own are kept.
func (r *Obligations) ReadShard(ctx context.Context, w reconcile.Window, shard, shards int) ([]reconcile.Obligation, error) {
	return r.read(ctx, w, Named{}, func(id string) bool { return reconcile.ShardOf(id, shards) == shard })
}

func (r *Obligations) read(ctx context.Context, w reconcile.Window, named Named, keep func(id string) bool) ([]reconcile.Obligation, error) {
	if w.To.Before(w.From) {
		return nil, fmt.Errorf("read obligations: window from %s is after to %s",
			w.From.Format(time.RFC3339Nano), w.To.Format(time.RFC3339Nano))
	}
	if r.readsNothing() {
		return nil, nil
	}
	q, err := r.prepared(ctx)
	if err != nil {
		return nil, fmt.Errorf("read obligations: %w", err)
	}
	sql, extra := r.statements(q)
	stmt, plan := sql.forRead(named)
	stmt, names := q.namedParams(named, plan, stmt, sql.readJoined)
	args := append([]any{q.open, w.From.UTC(), w.To.UTC(), w.From.UTC(), w.To.UTC()}, names...)
	obs, err := r.query(ctx, keep, plan, stmt, append(args, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("read obligations: %w", err)
	}
	return obs, nil
}

// namedArgs are the parameters of named's terms, filtered for their
// columns' types.
func (q *obligationQueries) namedArgs(named Named) []any {
	args := []any{q.id.apply(named.IDs), q.key.apply(named.Keys), q.providerID.apply(named.ProviderIDs)}
	if q.targetParam == 9 {
		args = append(args, q.targetID.apply(named.ProviderIDs))
	}
	return args
}

// namedParams are stmt, a statement planned as plan, and its named
// terms' parameters; with many names (manyNames), joined, and the
// statement the joined one (joinedStmt), unless they cannot be.
func (q *obligationQueries) namedParams(named Named, plan readPlan, stmt, joinedStmt string) (string, []any) {
	names := q.namedArgs(named)
	if plan == manyNames {
		if j, ok := joinNames(names); ok {
			return joinedStmt, j
		}
	}
	return stmt, names
}

// nameSep separates the names of a joined parameter (joinNames): the
// ASCII unit separator, which no id or key is expected to hold.
const nameSep = 0x1f

// joinNames is each list of names of a named terms' parameters (as
// namedArgs gives them) as one text, its names separated by nameSep, and
// whether every list can be: none holds an empty name (alone in its
// list, the split would lose it) or the separator. pgx encodes an array
// of text element by element: a first pass's 2.1 million names cost 0.8
// s of CPU and 235 MB of buffers as arrays, against copying one string
// each as texts.
func joinNames(lists []any) ([]any, bool) {
	out := make([]any, len(lists))
	for i, l := range lists {
		names := l.([]string)
		n := len(names)
		for _, s := range names {
			if s == "" || strings.IndexByte(s, nameSep) >= 0 {
				return nil, false
			}
			n += len(s)
		}
		var b strings.Builder
		b.Grow(n)
		for j, s := range names {
			if j > 0 {
				b.WriteByte(nameSep)
			}
			b.WriteString(s)
		}
		out[i] = b.String()
	}
	return out, true
}

// ReadNamed returns, sorted by id, the obligations that named names alone
// (by id, idempotency key, provider_id or target_id), whatever their state
// and age: those the objects a run reads as evidence belong to
// (docs/design.md, "Coverage"). Rows are refused as Read refuses them. A
// view (ForAccount) reads its account's alone.
func (r *Obligations) ReadNamed(ctx context.Context, named Named) ([]reconcile.Obligation, error) {
	if named.count() == 0 || r.readsNothing() {
		return nil, nil
	}
	q, err := r.prepared(ctx)
	if err != nil {
		return nil, fmt.Errorf("read named obligations: %w", err)
	}
	sql, extra := r.statements(q)
	// A few thousand names are looked up by the table's indexes: the
	// planner took ten thousand for enough to scan a million rows (0.3 to
	// 0.45 s a round of an incremental pass, against a few hundredths).
	stmt, plan := sql.forNamed(named)
	stmt, names := q.namedParams(named, plan, stmt, sql.namedJoined)
	obs, err := r.query(ctx, nil, plan, stmt, append(names, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("read named obligations: %w", err)
	}
	return obs, nil
}

// Oldest returns the earliest created_at among the obligations Read puts
// in scope by state and window (every EXECUTING and CONFIRMATION_UNKNOWN
// one, those created or updated in w), the zero time if there is none: a
// run reads the provider's records back to it (docs/design.md,
// "Coverage"). A view (ForAccount) looks at its account's alone.
func (r *Obligations) Oldest(ctx context.Context, w reconcile.Window) (time.Time, error) {
	if r.readsNothing() {
		return time.Time{}, nil
	}
	q, err := r.prepared(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the oldest obligation in scope: %w", err)
	}
	sql, extra := r.statements(q)
	var oldest scanTime
	args := append([]any{q.open, w.From.UTC(), w.To.UTC(), w.From.UTC(), w.To.UTC()}, extra...)
	err = r.pool.QueryRow(ctx, sql.oldest, args...).Scan(&oldest)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the oldest obligation in scope: %w", err)
	}
	if oldest.infinite {
		return time.Time{}, errors.New("read the oldest obligation in scope: obligations.columns.created_at is infinite")
	}
	return oldest.t, nil
}

// Census is what an incremental pass counts of the obligations table
// (docs/design.md, "Incremental matching"), in one scan.
type Census struct {
	// CreatedA and CreatedB count the rows created before a and before b
	// (a ≤ b): a pass compares the first with what the last pass counted
	// before the same time (where that pass reached), and keeps the
	// second for the next.
	CreatedA, CreatedB int64
	// Unmapped counts, by raw value, the rows created or updated in w
	// whose state the configuration does not map (docs/design.md, "States
	// and who moves them"): what a pass that reads only what changed
	// still reports of the rows it never transitions. nil when none.
	Unmapped map[string]int
}

// Census counts the table for an incremental pass over w at b, whose last
// pass counted before a. A view (ForAccount) counts its account's alone.
//
// It counts the table as it stood when it began: taken, when not nil, is
// called once that is fixed, before the counting scan. A read begun after
// taken sees every row the census counts; a pass that scans what changed
// beside the census waits for it (docs/design.md, "Incremental
// matching").
func (r *Obligations) Census(ctx context.Context, a, b time.Time, w reconcile.Window, taken func()) (Census, error) {
	var c Census
	if r.readsNothing() {
		if taken != nil {
			taken()
		}
		return c, nil
	}
	q, err := r.prepared(ctx)
	if err != nil {
		return c, fmt.Errorf("count obligations: %w", err)
	}
	sql, extra := r.statements(q)
	args := append([]any{a.UTC(), b.UTC(), q.mapped, w.From.UTC(), w.To.UTC(), w.From.UTC(), w.To.UTC()}, extra...)
	// A repeatable-read transaction's snapshot is taken by its first
	// statement and kept by the rest.
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return c, fmt.Errorf("count obligations: begin: %w", err)
	}
	// Read-only: there is nothing to commit.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		return c, fmt.Errorf("count obligations: %w", err)
	}
	if taken != nil {
		taken()
	}
	rows, err := tx.Query(ctx, sql.census, args...)
	if err != nil {
		return c, fmt.Errorf("count obligations: %w", err)
	}
	var (
		raw               string
		na, nb, nUnmapped int64
	)
	_, err = pgx.ForEachRow(rows, []any{&raw, &na, &nb, &nUnmapped}, func() error {
		c.CreatedA += na
		c.CreatedB += nb
		if nUnmapped > 0 {
			if c.Unmapped == nil {
				c.Unmapped = map[string]int{}
			}
			c.Unmapped[raw] = int(nUnmapped)
		}
		return nil
	})
	if err != nil {
		return Census{}, fmt.Errorf("count obligations: %w", err)
	}
	return c, nil
}

// lookupMost is the most names ReadNamed looks up one by one in the
// table's indexes, and the most Read and ReadNamed let the planner weigh:
// more are compared in one scan of the table (manyNames).
const lookupMost = 100_000

// readPlan is how query lets PostgreSQL plan a reading statement.
type readPlan int

const (
	// planned: as the planner sees fit, under a custom plan.
	planned readPlan = iota
	// lookUp: the names looked up in the table's indexes, no scan of it.
	lookUp
	// manyNames: more than lookupMost names, compared in one scan of the
	// table by a single process (see unestimated). At a million
	// obligations named by 2.1 million names (a first pass's), the
	// planner spent 4.1 to 5.1 s weighing each name against the columns'
	// statistics, and starting two parallel workers took 4.2 s more,
	// each sent its own copy of the plan and its constant arrays, which
	// then found no page left to read: 9.4 s for the statement, against
	// 1.1 to 1.75 s without both (0.9 s without the names).
	manyNames
)

// forRead is Read's statement for named and how it is planned.
func (q accountQueries) forRead(named Named) (string, readPlan) {
	if named.count() > lookupMost {
		return q.readMany, manyNames
	}
	return q.read, planned
}

// forNamed is ReadNamed's statement for named and how it is planned.
func (q accountQueries) forNamed(named Named) (string, readPlan) {
	if named.count() > lookupMost {
		return q.namedMany, manyNames
	}
	return q.named, lookUp
}

// settings are the SET LOCAL statements query runs before a statement
// planned as p.
func (p readPlan) settings() string {
	switch p {
	case lookUp:
		return "SET LOCAL enable_seqscan = off; SET LOCAL jit = off"
	case manyNames:
		return "SET LOCAL max_parallel_workers_per_gather = 0"
	}
	return ""
}

// unestimated is terms, a statement's named terms, behind a coalesce
// that the planner does not look into for its estimate: comparing each
// of a million names with a column's statistics costs seconds, while the
// executor still compares the column with each array by one hash probe.
func unestimated(terms string) string { return "coalesce(" + terms + ", false)" }

// query runs one of the reading statements in a read-only transaction and
// collects its rows, planned as plan says. With lookUp, the statement
// looks names up: no sequential scan where an index serves (a table
// without one is scanned all the same), and no JIT.
func (r *Obligations) query(ctx context.Context, keep func(id string) bool, plan readPlan, sql string, args ...any) ([]reconcile.Obligation, error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire a connection: %w", err)
	}
	defer func() {
		if plan == manyNames {
			// pgx keeps a statement's encoded parameters (a first pass's
			// two million names are 46 MB as arrays, about 40 MB joined)
			// until later statements overwrite them, and would hold them
			// while the pass matches, when its heap stands highest.
			// Closed, the connection lets them go.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = conn.Hijack().Close(cctx)
			return
		}
		conn.Release()
	}()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	// Read-only: there is nothing to commit.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// pgx caches the prepared statement, and after five executions
	// PostgreSQL may switch it to a generic plan, where the arrays are
	// parameters rather than constants: = ANY is then no longer hashed and
	// every row is compared with every name (minutes on a large table
	// instead of a second), and joined names are split again for every
	// row. A custom plan also lets the planner use a team's indexes (a
	// BitmapOr) when it has one on every column.
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
		return nil, fmt.Errorf("set plan_cache_mode: %w", err)
	}
	if set := plan.settings(); set != "" {
		if _, err := tx.Exec(ctx, set); err != nil {
			return nil, fmt.Errorf("%s: %w", set, err)
		}
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return r.collect(rows, keep, true)
}

// Get returns the obligation with id, or an error wrapping ErrNotFound when
// there is none, whatever its account (a view's Get too). It is what
// `reconcile trace` starts from.
func (r *Obligations) Get(ctx context.Context, id string) (reconcile.Obligation, error) {
	q, err := r.prepared(ctx)
	if err != nil {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, err)
	}
	if len(q.id.apply([]string{id})) == 0 {
		// Not a value of the id column's type (not a uuid, for a uuid
		// column): no row has it.
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, ErrNotFound)
	}
	rows, err := r.pool.Query(ctx, q.get, id)
	if err != nil {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, err)
	}
	// collect refuses a second row with the same id: the id column is then
	// not unique.
	obs, err := r.collect(rows, nil, false)
	if err != nil {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, err)
	}
	if len(obs) == 0 {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, ErrNotFound)
	}
	return obs[0], nil
}

// catalogColumn is one column as pg_attribute and pg_type describe it: its
// type, and the type under it when that is a domain.
type catalogColumn struct {
	display                   string // format_type, with the modifier
	nsp, typ                  string
	baseNsp, baseTyp          string
	baseTyptype, baseCategory string
}

// columnType is c as the reconcile.ColumnType that SQL is built from, the
// names quoted from the catalogue's own.
func (c catalogColumn) columnType() reconcile.ColumnType {
	kind := reconcile.TypeOther
	switch {
	case c.baseTyptype == "e":
		kind = reconcile.TypeEnum
	case c.baseNsp != "pg_catalog":
		// An extension's type (citext) or a team's own: a string type
		// reads and compares like text, anything else is other.
		if c.baseCategory == "S" {
			kind = reconcile.TypeString
		}
	case c.baseTyp == "uuid":
		kind = reconcile.TypeUUID
	case c.baseTyp == "int2", c.baseTyp == "int4", c.baseTyp == "int8":
		kind = reconcile.TypeInteger
	case c.baseTyp == "numeric":
		kind = reconcile.TypeNumeric
	case c.baseTyp == "timestamp":
		kind = reconcile.TypeTimestamp
	case c.baseTyp == "timestamptz":
		kind = reconcile.TypeTimestamptz
	case c.baseCategory == "S":
		kind = reconcile.TypeString
	}
	return reconcile.ColumnType{
		Name:    pgx.Identifier{c.nsp, c.typ}.Sanitize(),
		Base:    pgx.Identifier{c.baseNsp, c.baseTyp}.Sanitize(),
		Kind:    kind,
		Display: c.display,
	}
}

// textLike reports whether c is text, varchar or char, or a domain over
// one: what an account column may be, its values compared with an
// account id and selected as it is.
func (c catalogColumn) textLike() bool {
	return c.baseNsp == "pg_catalog" && (c.baseTyp == "text" || c.baseTyp == "varchar" || c.baseTyp == "bpchar")
}

// filter is the nameFilter of a column compared with names the provider
// gave; nil keeps every name (a string type takes any).
func (c catalogColumn) filter() nameFilter {
	switch c.columnType().Kind {
	case reconcile.TypeUUID:
		return keepIf(validUUID)
	case reconcile.TypeInteger:
		bits := map[string]int{"int2": 16, "int4": 32, "int8": 64}[c.baseTyp]
		return keepIf(func(s string) bool {
			_, err := strconv.ParseInt(s, 10, bits)
			return err == nil
		})
	}
	return nil
}

// keepIf is the nameFilter keeping the names ok accepts, without copying
// when it accepts them all.
func keepIf(ok func(string) bool) nameFilter {
	return func(names []string) []string {
		for i, s := range names {
			if !ok(s) {
				kept := slices.Clone(names[:i])
				for _, s := range names[i+1:] {
					if ok(s) {
						kept = append(kept, s)
					}
				}
				return kept
			}
		}
		return names
	}
}

// validUUID accepts the two spellings of a uuid that PostgreSQL's uuid
// input surely accepts, in either case: 8-4-4-4-12 hex digits, or 32 hex
// digits. PostgreSQL accepts a few more (braces, other hyphen places);
// those are left out, which can only miss a match, never fail the read.
func validUUID(s string) bool {
	hex := func(s string) bool {
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
			default:
				return false
			}
		}
		return true
	}
	switch len(s) {
	case 32:
		return hex(s)
	case 36:
		return s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' &&
			hex(s[:8]) && hex(s[9:13]) && hex(s[14:18]) && hex(s[19:23]) && hex(s[24:])
	}
	return false
}

// catalogSQL describes each column of a table: its type as PostgreSQL
// prints it, the type's schema and name, and the same of the type under
// it when it is a domain (through nested domains).
const catalogSQL = `SELECT a.attname, format_type(a.atttypid, a.atttypmod), tn.nspname, t.typname,
	bn.nspname, b.typname, b.typtype::text, b.typcategory::text
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_namespace tn ON tn.oid = t.typnamespace
CROSS JOIN LATERAL (
	WITH RECURSIVE d(oid, depth) AS (
		SELECT t.oid, 0
		UNION ALL
		SELECT p.typbasetype, d.depth + 1 FROM d JOIN pg_type p ON p.oid = d.oid WHERE p.typtype = 'd')
	SELECT oid FROM d ORDER BY depth DESC LIMIT 1) base
JOIN pg_type b ON b.oid = base.oid
JOIN pg_namespace bn ON bn.oid = b.typnamespace
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`

// Check verifies that the table and every configured column exist, that
// each column's type is one the reader and the store handle (see
// reconcile.ObligationTable.TypeRules), that every configured state value
// is a value of the state column's type, and that the reader may select
// from the table. Its error names each missing or unusable column by its
// configuration field. It reads the column types once, for Read, Get and
// (through Types) the store. The command runs it before any provider
// call, so that a wrong mapping costs no Stripe requests. The account
// column, when one is mapped, must be text, varchar or char (or a domain
// over one). A view's Check is its reader's.
func (r *Obligations) Check(ctx context.Context) error {
	if r.root != r {
		return r.root.Check(ctx)
	}
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
	rows, err := r.pool.Query(ctx, catalogSQL, *oid)
	if err != nil {
		return fmt.Errorf("check obligations table %s: %w", r.name, err)
	}
	have := map[string]catalogColumn{}
	var (
		attname string
		col     catalogColumn
	)
	_, err = pgx.ForEachRow(rows, []any{&attname, &col.display, &col.nsp, &col.typ,
		&col.baseNsp, &col.baseTyp, &col.baseTyptype, &col.baseCategory}, func() error {
		have[attname] = col
		return nil
	})
	if err != nil {
		return fmt.Errorf("check obligations table %s: %w", r.name, err)
	}
	var (
		types    reconcile.ObligationTypes
		problems []string
		filters  = map[string]nameFilter{}
	)
	for _, rule := range r.table.TypeRules(&types) {
		got, ok := have[rule.Column]
		if !ok {
			problems = append(problems, fmt.Sprintf("obligations.columns.%s: column %q does not exist", rule.Field, rule.Column))
			continue
		}
		*rule.Type = got.columnType()
		filters[rule.Field] = got.filter()
	}
	var account reconcile.ColumnType
	if col := r.table.Columns.Account; col != "" {
		got, ok := have[col]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("obligations.columns.account: column %q does not exist", col))
		case !got.textLike():
			problems = append(problems, fmt.Sprintf("obligations.columns.account: column %q is %s, want one of text, varchar, char (or a domain over one)",
				col, got.display))
		}
		account = got.columnType()
	}
	if len(problems) == 0 {
		if err := r.table.CheckTypes("obligations", types); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) == 0 {
		problems = r.checkStates(ctx, have[r.table.Columns.State])
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
	q := r.buildQueries(types, filters, account)
	r.mu.Lock()
	r.q = q
	r.mu.Unlock()
	return nil
}

// checkStates reports each configured state value that the state column
// cannot hold: not a label of its enum, refused by its domain's check, or
// longer than its varchar. The compare-and-set would otherwise fail at the
// end of a run, after every provider call, on the first transition into
// that state.
func (r *Obligations) checkStates(ctx context.Context, col catalogColumn) []string {
	var problems []string
	for _, s := range reconcile.States {
		v := r.table.Raw(s)
		// The cast is to the column's type with its modifier, as the
		// catalogue prints it (format_type quotes what needs quoting). An
		// explicit cast to varchar(n) truncates instead of failing: the
		// value read back says.
		var back string
		err := r.pool.QueryRow(ctx, "SELECT ($1::text::"+col.display+")::text", v).Scan(&back)
		switch {
		case err != nil:
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				return []string{fmt.Sprintf("obligations.states.%s: %v", s, err)}
			}
			problems = append(problems, fmt.Sprintf("obligations.states.%s: %q is not a value of column %q (%s): %s",
				s, v, r.table.Columns.State, col.display, pgErr.Message))
		case back != v:
			problems = append(problems, fmt.Sprintf("obligations.states.%s: %q is not a value of column %q (%s): it would be stored as %q",
				s, v, r.table.Columns.State, col.display, back))
		}
	}
	return problems
}

// collect maps rows to obligations, one row at a time into reused scan
// targets, sorts them by id and closes rows.
//
// A million obligations are a quarter of a gigabyte of structs, and a
// second copy of them was the highest the heap stood in a first pass (the
// collector then let it grow to twice that). With counted, the statement
// selects its row count last (countColumn), and every row goes straight
// into one slice of that length; the sort moves (id, index) pairs, and the
// rows are then put in order in place, each moved once. Without it (Get),
// or when keep keeps only some rows (a shard's), rows go into chunks of
// growing size and are copied once, in order, into a slice of exactly the
// right length.
//
// A row that cannot be mapped fails the whole read, its error naming the
// obligation (or, without a usable id, the row's number and idempotency
// key) and the column by its configuration field.
func (r *Obligations) collect(rows pgx.Rows, keep func(id string) bool, counted bool) ([]reconcile.Obligation, error) {
	defer rows.Close()
	// Kind, provider, currency, state and lease owner take a handful of
	// values over a whole table: one string each instead of one per row.
	// A currency is normalised once per distinct value: trimmed and lower
	// case, as Stripe spells it, so that a table's "USD" is Stripe's "usd".
	intern := func() map[string]string { return make(map[string]string, 8) }
	var (
		id, key, providerID, targetID           scanText
		kind, provider, currency, state, leaser = scanText{intern: intern()}, scanText{intern: intern()},
			scanText{intern: intern(), norm: normCurrency}, scanText{intern: intern()}, scanText{intern: intern()}
		amount                        scanAmount
		lease, created, updated, paid scanTime
	)
	targets := []any{&id, &kind, &key, &provider, &providerID, &targetID,
		&amount, &currency, &state, &leaser, &lease, &created, &updated, &paid}
	// The account, last in the select list when a column is mapped.
	account := scanText{intern: intern()}
	if r.table.Columns.Account != "" {
		targets = append(targets, &account)
	}
	var total int64
	if counted {
		targets = append(targets, &total)
	}
	var (
		chunks [][]reconcile.Obligation
		order  []idIndex
		n      int // rows seen
		// exact is the one slice of every row, in the order they came,
		// when the count came with them and every row is kept.
		exact []reconcile.Obligation
	)
	// which names the row for an error: by id, or when the id is NULL or
	// blank by its number in the result and its idempotency key (known
	// once the key's column was scanned).
	which := func(keyScanned bool) string {
		if !id.null && strings.TrimSpace(id.s) != "" {
			return fmt.Sprintf("obligation %q", id.s)
		}
		if keyScanned && key.s != "" {
			return fmt.Sprintf("row %d (idempotency_key %q)", n, key.s)
		}
		return fmt.Sprintf("row %d", n)
	}
	next := make([]reconcile.Obligation, 0, 64)
	for rows.Next() {
		n++
		if err := rows.Scan(targets...); err != nil {
			// pgx scans columns in order: when a later one fails, the
			// earlier ones are already this row's and name it.
			if se := (pgx.ScanArgError{}); errors.As(err, &se) && se.ColumnIndex > 0 && se.ColumnIndex < len(collectFields) {
				return nil, fmt.Errorf("%s: obligations.columns.%s: %w", which(se.ColumnIndex > 2),
					collectFields[se.ColumnIndex], err)
			}
			return nil, fmt.Errorf("row %d: %w", n, err)
		}
		switch {
		case id.null:
			return nil, fmt.Errorf("%s: obligations.columns.id is NULL", which(true))
		case strings.TrimSpace(id.s) == "":
			return nil, fmt.Errorf("%s: obligations.columns.id is empty (%q)", which(true), id.s)
		case kind.null:
			return nil, fmt.Errorf("%s: obligations.columns.kind is NULL, want charge or refund", which(true))
		}
		k, ok := obligationKind(kind.s)
		if !ok {
			return nil, fmt.Errorf("%s: obligations.columns.kind: %q is neither charge nor refund", which(true), kind.s)
		}
		switch {
		case amount.problem != "":
			return nil, fmt.Errorf("%s: obligations.columns.amount: %s", which(true), amount.problem)
		case !amount.valid:
			return nil, fmt.Errorf("%s: obligations.columns.amount is NULL", which(true))
		case amount.v <= 0:
			return nil, fmt.Errorf("%s: obligations.columns.amount is %d, want a positive amount in minor units", which(true), amount.v)
		case state.null:
			return nil, fmt.Errorf("%s: obligations.columns.state is NULL", which(true))
		case created.null:
			return nil, fmt.Errorf("%s: obligations.columns.created_at is NULL", which(true))
		case account.s != "" && !reconcile.ValidAccountID(account.s):
			// No view would read it: its money would go unreconciled.
			return nil, fmt.Errorf("%s: obligations.columns.account: %q is not a Stripe account id (acct_…), nor NULL or empty for the platform's own",
				which(true), account.s)
		}
		for _, t := range []struct {
			field string
			t     *scanTime
		}{{"lease_expires_at", &lease}, {"created_at", &created}, {"updated_at", &updated}, {"paid_at", &paid}} {
			if t.t.infinite {
				return nil, fmt.Errorf("%s: obligations.columns.%s is infinite", which(true), t.field)
			}
			if t.t.far {
				return nil, fmt.Errorf("%s: obligations.columns.%s is in the year %d, beyond the years ±%d the reconciler holds",
					which(true), t.field, t.t.t.Year(), reconcile.StampRange)
			}
		}
		if keep != nil && !keep(id.s) {
			continue
		}
		canonical, mapped := r.canon[state.s]
		if !mapped {
			canonical = r.table.Canonical(state.s)
		}
		to := &next
		switch {
		case counted && keep == nil:
			if exact == nil {
				exact = make([]reconcile.Obligation, 0, total)
				order = make([]idIndex, 0, total)
			}
			order = append(order, idIndex{id: id.s, at: int32(len(exact))})
			to = &exact
		default:
			if len(next) == cap(next) {
				chunks = append(chunks, next)
				next = make([]reconcile.Obligation, 0, min(2*cap(next), 8192))
			}
			order = append(order, idIndex{id: id.s, chunk: int32(len(chunks)), at: int32(len(next))})
		}
		*to = append(*to, reconcile.Obligation{
			ID:             id.s,
			Account:        account.s,
			Kind:           k,
			IdempotencyKey: key.s,
			Provider:       provider.s,
			ProviderID:     providerID.s,
			TargetID:       targetID.s,
			Money:          reconcile.Money{Amount: amount.v, Currency: currency.s},
			State:          canonical,
			RawState:       state.s,
			LeaseOwner:     leaser.s,
			LeaseExpiresAt: reconcile.StampOf(lease.t),
			CreatedAt:      reconcile.StampOf(created.t),
			UpdatedAt:      reconcile.StampOf(updated.t),
			PaidAt:         reconcile.StampOf(paid.t),
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
	for i := 1; i < len(order); i++ {
		// One query returns each row once: equal ids mean the configured id
		// column is not unique, and compare-and-set by id would be
		// ambiguous.
		if order[i].id == order[i-1].id {
			return nil, fmt.Errorf("id %q is on more than one row of %s: "+
				"obligations.columns.id must name a unique column", order[i].id, r.name)
		}
	}
	if exact != nil {
		permute(exact, order)
		return exact, nil
	}
	obs := make([]reconcile.Obligation, len(order))
	for i, o := range order {
		obs[i] = chunks[o.chunk][o.at]
	}
	return obs, nil
}

// countColumn is the last column of Read's and ReadNamed's select lists:
// how many rows the statement returns.
const countColumn = ", count(*) OVER ()"

// permute puts obs in the order of order (order[i].at is where the i-th
// obligation is now) in place, following each cycle of the permutation
// once: every obligation is moved once, through one spare.
func permute(obs []reconcile.Obligation, order []idIndex) {
	from := make([]int32, len(order))
	for i, o := range order {
		from[i] = o.at
	}
	for i := range from {
		if from[i] == int32(i) || from[i] < 0 {
			continue
		}
		spare := obs[i]
		j := i
		for {
			k := int(from[j])
			from[j] = -1
			if k == i {
				obs[j] = spare
				break
			}
			obs[j] = obs[k]
			j = k
		}
	}
}

// collectFields are the configuration fields of the select list's columns,
// in its order.
var collectFields = []string{"id", "kind", "idempotency_key", "provider", "provider_id", "target_id",
	"amount", "currency", "state", "lease_owner", "lease_expires_at", "created_at", "updated_at", "paid_at", "account"}

// normCurrency is a currency code as Stripe spells it: trimmed, lower case.
func normCurrency(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

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
// ::text) straight from pgx's buffer; NULL reads as "" with null set. With
// intern set, equal values share one string; with norm set too, each
// distinct value is normalised once.
type scanText struct {
	s      string
	null   bool
	intern map[string]string
	norm   func(string) string
}

// ScanBytes implements pgtype.BytesScanner. b is pgx's buffer, reused for
// the next row: it is copied, or looked up without a copy. pgx passes nil
// for NULL and an empty, non-nil slice for the empty string.
func (t *scanText) ScanBytes(b []byte) error {
	t.null = b == nil
	if t.intern == nil {
		t.s = string(b)
		return nil
	}
	if s, ok := t.intern[string(b)]; ok {
		t.s = s
		return nil
	}
	raw := string(b)
	t.s = raw
	if t.norm != nil {
		t.s = t.norm(raw)
	}
	// Bounded, should a team's column hold more than a handful of values.
	if len(t.intern) < 256 {
		t.intern[raw] = t.s
	}
	return nil
}

// scanAmount scans an integer or numeric amount column. A numeric that is
// not a whole number of minor units, or does not fit int64 (or is NaN or
// infinite), is not an error of the scan but a problem the row is refused
// for, so that the error names the obligation and the column's field.
type scanAmount struct {
	v       int64
	valid   bool
	problem string
}

// ScanInt64 implements pgtype.Int64Scanner (int2, int4, int8 columns).
func (a *scanAmount) ScanInt64(v pgtype.Int8) error {
	*a = scanAmount{v: v.Int64, valid: v.Valid}
	return nil
}

// ScanNumeric implements pgtype.NumericScanner (numeric columns).
func (a *scanAmount) ScanNumeric(v pgtype.Numeric) error {
	*a = scanAmount{valid: v.Valid}
	if !v.Valid {
		return nil
	}
	if v.NaN || v.InfinityModifier != pgtype.Finite {
		a.problem = fmt.Sprintf("%s is not an amount in minor units", numericText(v))
		return nil
	}
	i, err := v.Int64Value()
	if err == nil {
		a.v = i.Int64
		return nil
	}
	// Int64Value fails for a fraction and for a value beyond int64: say
	// which, with the value as stored.
	whole := new(big.Int).Set(v.Int)
	exp := v.Exp
	for ; exp < 0; exp++ {
		var rem big.Int
		whole.QuoRem(whole, big.NewInt(10), &rem)
		if rem.Sign() != 0 {
			a.problem = fmt.Sprintf("%s has a fraction; minor units have none", numericText(v))
			return nil
		}
	}
	a.problem = fmt.Sprintf("%s does not fit a 64-bit integer of minor units", numericText(v))
	return nil
}

// numericText is v as PostgreSQL would print it, for messages.
func numericText(v pgtype.Numeric) string {
	b, err := v.MarshalJSON()
	if err != nil {
		return "the numeric"
	}
	return strings.Trim(string(b), `"`)
}

// scanTime scans timestamptz and timestamp columns alike (a timestamp
// without time zone is read as UTC, as pgx writes it), NULL as the zero
// time with null set. PostgreSQL's ±infinity has no time.Time, and its
// furthest years no reconcile.Stamp: they are flagged so that the row is
// refused with the column's name rather than misread.
type scanTime struct {
	t        time.Time
	null     bool
	infinite bool
	far      bool
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
		s.null = true
	case inf != pgtype.Finite:
		s.infinite = true
	default:
		s.t = t.UTC()
		s.far = !reconcile.StampHolds(s.t)
	}
}
