// Package store keeps the reconciler's own state in PostgreSQL (schema
// reconcile): runs, findings, the audit of transitions and the alert
// outbox. It applies a run's conclusions in one transaction, changing
// obligations only by compare-and-set, and makes sure only one run at a
// time works on a database (docs/design.md, "The PAID rule" and "Runs and the lock").
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"reconcile/internal/config"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
)

// Errors the store returns; check them with errors.Is.
var (
	// ErrNotFound: no row has that id or fingerprint.
	ErrNotFound = errors.New("not found")
	// ErrLocked: another run holds the run lock of this database.
	ErrLocked = errors.New("another reconcile run holds the lock on this database")
	// ErrLockLost: the run lock this run took is no longer its own (its
	// connection ended, or another run took the lock since), so the run
	// must write nothing more.
	ErrLockLost = errors.New("the run lock was lost")
	// ErrResolved: the finding is resolved, so there is nothing to acknowledge.
	ErrResolved = errors.New("finding is resolved")
	// ErrAmbiguous: a fingerprint prefix matches more than one finding.
	ErrAmbiguous = errors.New("fingerprint prefix matches more than one finding")
	// ErrAlreadySent: the outbox row was already recorded as sent.
	ErrAlreadySent = errors.New("alert already recorded as sent")
)

// Options configure a Store.
type Options struct {
	// Table names the obligations table, its columns and state values
	// (config's obligations).
	Table reconcile.ObligationTable
	// RepeatInterval is how long an open, unacknowledged finding waits
	// before it is alerted again (config's alerts.repeat_interval); it
	// must be positive.
	RepeatInterval time.Duration
	// MaxApplyAttempts bounds how many times Apply runs its transaction
	// when it loses a serialization race or a deadlock (config's
	// store.apply_attempts); it must be positive.
	MaxApplyAttempts int
	// Logger receives retries and other events worth a line; default none.
	Logger *slog.Logger
}

// OptionsFrom takes a Store's options from the configuration (config.Default
// holds their defaults, the one place they are defined); Logger stays
// unset.
func OptionsFrom(c config.Config) Options {
	return Options{
		Table:            c.Obligations,
		RepeatInterval:   c.Alerts.RepeatInterval,
		MaxApplyAttempts: c.Store.ApplyAttempts,
	}
}

// Store is the reconciler's state in one PostgreSQL database.
type Store struct {
	pool  *pgxpool.Pool
	opts  Options
	table reconcile.ObligationTable
	// ob holds the obligations statements, built for the reference
	// schema's column types until UseTypes gives the table's own.
	ob atomic.Pointer[obligationSQL]

	// hook, when set (by tests only), runs inside Apply's transaction
	// after each stage, so that a test can act at a precise point.
	hook func(ctx context.Context, stage string, tx pgx.Tx) error
}

// obligationSQL holds the quoted identifiers of the obligations table and
// the statements built from them and the columns' types, in New and
// UseTypes.
type obligationSQL struct {
	table, id, state, providerID, leaseExpiresAt, paidAt, updatedAt string
	types                                                           reconcile.ObligationTypes

	staging string // the temporary table the compare-and-set reads
	cas     string // the batched compare-and-set with its audit rows
	current string // the current state and lease of some obligations
}

// New returns a Store on pool. It validates the obligations table's names;
// it does not touch the database (see CheckSchema).
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("new store: nil pool")
	}
	if err := opts.Table.Validate("obligations"); err != nil {
		return nil, fmt.Errorf("new store: %w", err)
	}
	if opts.RepeatInterval <= 0 {
		return nil, fmt.Errorf("new store: repeat interval %s is not positive", opts.RepeatInterval)
	}
	if opts.MaxApplyAttempts <= 0 {
		return nil, fmt.Errorf("new store: %d apply attempts: want at least one", opts.MaxApplyAttempts)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{pool: pool, opts: opts, table: opts.Table}
	ob := buildObligationSQL(opts.Table, reconcile.ReferenceObligationTypes())
	s.ob.Store(&ob)
	return s, nil
}

// UseTypes makes the compare-and-set compare and write each column in its
// own type (an enum state as the enum, a uuid id as a uuid, a timestamp
// without time zone as UTC), as types says: what sources.Obligations.Check
// read from the catalogue, handed over so that the catalogue is read in
// one place. Until it is called the store assumes the reference schema's
// types (configs/obligations.sql: text, timestamptz), on which an enum
// state fails the apply. A type the store cannot compare and write is
// refused, naming the column's configuration field.
func (s *Store) UseTypes(types reconcile.ObligationTypes) error {
	if err := s.table.CheckTypes("obligations", types); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	ob := buildObligationSQL(s.table, types)
	s.ob.Store(&ob)
	return nil
}

// sql returns the obligations statements in use.
func (s *Store) sql() *obligationSQL { return s.ob.Load() }

// buildObligationSQL builds the statements on the obligations table for
// columns of types. Every value is a parameter cast to its column's type,
// as the catalogue names it (quoted from its schema and type name, never
// from configuration): a value compared with a column is cast to the
// column's base type (a domain's checks are for writes), a value written
// to it to the column's own type. The columns themselves are never cast,
// so that the team's indexes apply.
func buildObligationSQL(t reconcile.ObligationTable, types reconcile.ObligationTypes) obligationSQL {
	ident := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	tableName := pgx.Identifier{t.Table}
	if t.Schema != "" {
		tableName = pgx.Identifier{t.Schema, t.Table}
	}
	q := obligationSQL{
		table:          tableName.Sanitize(),
		id:             ident(t.Columns.ID),
		state:          ident(t.Columns.State),
		providerID:     ident(t.Columns.ProviderID),
		leaseExpiresAt: ident(t.Columns.LeaseExpiresAt),
		paidAt:         ident(t.Columns.PaidAt),
		updatedAt:      ident(t.Columns.UpdatedAt),
		types:          types,
	}
	// cast is the text expression e as type typ, left as it is on text,
	// where the cast would be a no-op.
	cast := func(e, typ string) string {
		if typ == `"pg_catalog"."text"` {
			return e
		}
		return e + "::" + typ
	}
	// texts is parameter n, sent as text[], as an array of type typ.
	texts := func(n int, typ string) string {
		p := fmt.Sprintf("$%d::text[]", n)
		if e := cast(p, typ); e != p {
			return e + "[]"
		}
		return p
	}
	// One statement for every transition of a run, read from a
	// temporary table the apply fills by COPY: the rows whose state and
	// lease are still what the matcher read are updated, each writes its
	// audit row, and the ids returned are those not applied (none, as a
	// rule: returning the applied ones sent a hundred thousand ids back
	// for nothing). A row a worker changed meanwhile simply does not
	// match. paid_at and provider_id are only ever filled, never
	// overwritten. The time of the run is one parameter per column type
	// ($6 for the audit, $8 and $9 for paid_at and updated_at), sent as
	// UTC: a timestamp without time zone stores the UTC wall clock, and no
	// conversion through the session's TimeZone happens anywhere.
	//
	// A run's transitions are few kinds of move (CONFIRMATION_UNKNOWN to
	// PAID, mostly), so the four state columns go once per kind of move
	// ($1 to $4, k), and each transition names its move by number (a
	// position in them).
	q.staging = `CREATE TEMP TABLE transitions_in (id text NOT NULL, lease ` + types.LeaseExpiresAt.Base +
		`, provider_id text, move int4 NOT NULL) ON COMMIT DROP`
	q.cas = `WITH c AS (
	SELECT ` + cast("x.id", types.ID.Base) + ` AS id, k.from_raw, k.to_raw, x.lease, ` +
		cast("x.provider_id", types.ProviderID.Name) + ` AS provider_id, k.from_state, k.to_state
	FROM pg_temp.transitions_in AS x
	JOIN unnest(` + texts(1, types.State.Base) + `, ` + texts(2, types.State.Name) + `, $3::text[], $4::text[])
		WITH ORDINALITY AS k(from_raw, to_raw, from_state, to_state, move) ON k.move = x.move
), upd AS (
	UPDATE ` + q.table + ` AS o SET
		` + q.state + ` = c.to_raw,
		` + q.providerID + ` = COALESCE(o.` + q.providerID + `, c.provider_id),
		` + q.paidAt + ` = CASE WHEN c.to_state = $5 THEN COALESCE(o.` + q.paidAt + `, $8::` + types.PaidAt.Base + `) ELSE o.` + q.paidAt + ` END,
		` + q.updatedAt + ` = $9::` + types.UpdatedAt.Base + `
	FROM c
	WHERE o.` + q.id + ` = c.id AND o.` + q.state + ` = c.from_raw
		AND o.` + q.leaseExpiresAt + ` IS NOT DISTINCT FROM c.lease
	RETURNING c.id::text AS id, c.from_state, c.to_state, c.provider_id::text AS provider_id
), ins AS (
	INSERT INTO reconcile.transitions (obligation_id, from_state, to_state, provider_id, run_id, at)
	SELECT id, from_state, to_state, provider_id, $7, $6::timestamptz FROM upd
	RETURNING obligation_id
)
SELECT x.id FROM pg_temp.transitions_in AS x WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.obligation_id = x.id)`
	q.current = `SELECT ` + q.id + `::text, ` + q.state + `::text, ` + q.leaseExpiresAt + ` FROM ` + q.table +
		` WHERE ` + q.id + ` = ANY(` + texts(1, types.ID.Base) + `)`
	return q
}

// retryable reports whether err lost a race that running the whole
// transaction again can win: a serialization failure or a deadlock.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}

// notFound translates the driver's no-rows error at the boundary.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// nullString maps the empty string to NULL.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// timeOf maps NULL to the zero time.
func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// stringOf maps NULL to the empty string.
func stringOf(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
