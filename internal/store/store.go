// Package store keeps the reconciler's own state in PostgreSQL (schema
// reconcile): runs, findings, the audit of transitions and the alert
// outbox. It applies a run's conclusions in one transaction, changing
// obligations only by compare-and-set, and makes sure only one run at a
// time works on a database (DESIGN.md §4–5).
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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

// Defaults for Options' zero values.
const (
	DefaultRepeatInterval   = 24 * time.Hour
	DefaultMaxApplyAttempts = 5
)

// Options configure a Store.
type Options struct {
	// Table names the obligations table, its columns and state values. The
	// zero value means reconcile.DefaultObligationTable().
	Table reconcile.ObligationTable
	// RepeatInterval is how long an open, unacknowledged finding waits
	// before it is alerted again (default 24h).
	RepeatInterval time.Duration
	// MaxApplyAttempts bounds how many times Apply runs its transaction
	// when it loses a serialization race or a deadlock (default 5).
	MaxApplyAttempts int
	// Logger receives retries and other events worth a line; default none.
	Logger *slog.Logger
}

// Store is the reconciler's state in one PostgreSQL database.
type Store struct {
	pool  *pgxpool.Pool
	opts  Options
	table reconcile.ObligationTable
	ob    obligationSQL

	// hook, when set (by tests only), runs inside Apply's transaction
	// after each stage, so that a test can act at a precise point.
	hook func(ctx context.Context, stage string, tx pgx.Tx) error
}

// obligationSQL holds the quoted identifiers of the obligations table and
// the statements built from them once, in New.
type obligationSQL struct {
	table, id, state, providerID, leaseExpiresAt, paidAt, updatedAt string

	cas     string // the batched compare-and-set with its audit rows
	current string // the current state and lease of some obligations
}

// New returns a Store on pool. It validates the obligations table's names;
// it does not touch the database (see CheckSchema).
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("new store: nil pool")
	}
	if opts.Table.Table == "" && opts.Table.States == nil {
		opts.Table = reconcile.DefaultObligationTable()
	}
	if err := opts.Table.Validate("obligations"); err != nil {
		return nil, fmt.Errorf("new store: %w", err)
	}
	if opts.RepeatInterval < 0 {
		return nil, fmt.Errorf("new store: repeat interval %s is negative", opts.RepeatInterval)
	}
	if opts.RepeatInterval == 0 {
		opts.RepeatInterval = DefaultRepeatInterval
	}
	if opts.MaxApplyAttempts <= 0 {
		opts.MaxApplyAttempts = DefaultMaxApplyAttempts
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{pool: pool, opts: opts, table: opts.Table}
	s.ob = buildObligationSQL(opts.Table)
	return s, nil
}

func buildObligationSQL(t reconcile.ObligationTable) obligationSQL {
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
	}
	// One statement for every transition of a run: the rows whose state
	// and lease are still what the matcher read are updated, each writes
	// its audit row, and the ids returned are those applied. A row a worker
	// changed meanwhile simply does not match. paid_at and provider_id are
	// only ever filled, never overwritten.
	q.cas = `WITH c AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[])
		AS c(id, from_raw, to_raw, lease, provider_id, from_state, to_state)
), upd AS (
	UPDATE ` + q.table + ` AS o SET
		` + q.state + ` = c.to_raw,
		` + q.providerID + ` = COALESCE(o.` + q.providerID + `, c.provider_id),
		` + q.paidAt + ` = CASE WHEN c.to_raw = $8 THEN COALESCE(o.` + q.paidAt + `, $9) ELSE o.` + q.paidAt + ` END,
		` + q.updatedAt + ` = $9
	FROM c
	WHERE o.` + q.id + ` = c.id AND o.` + q.state + ` = c.from_raw
		AND o.` + q.leaseExpiresAt + ` IS NOT DISTINCT FROM c.lease
	RETURNING c.id, c.from_state, c.to_state, c.provider_id
)
INSERT INTO reconcile.transitions (obligation_id, from_state, to_state, provider_id, run_id, at)
SELECT id, from_state, to_state, provider_id, $10, $9 FROM upd
RETURNING obligation_id`
	q.current = `SELECT ` + q.id + `, ` + q.state + `, ` + q.leaseExpiresAt + ` FROM ` + q.table +
		` WHERE ` + q.id + ` = ANY($1::text[])`
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
