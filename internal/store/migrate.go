package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SchemaDigest names the schema Migrate makes: a digest of the name and
// content of every migration this build embeds, goose's and River's,
// equal between two builds exactly when they migrate alike. Tests key the
// template database they clone on it (pgtest.NewMigrated), so a River
// upgrade that brings a migration builds a new template too.
func SchemaDigest() string {
	h := sha256.New()
	fmt.Fprintf(h, "goose %s\n", digest(migrationFiles))
	for _, m := range riverMigrator(nil).AllVersions() {
		fmt.Fprintf(h, "river %d %s %d\n%s\n", m.Version, m.Name, len(m.SQLUp), m.SQLUp)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// digest is SchemaDigest of the migrations in fsys.
func digest(fsys fs.FS) string {
	h := sha256.New()
	entries, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is valid
	}
	for _, e := range entries { // in lexical order, goose's order too
		b, err := fs.ReadFile(fsys, e)
		if err != nil {
			panic(err) // listed a moment ago
		}
		fmt.Fprintf(h, "%s %d\n%s\n", e, len(b), b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Schema is the PostgreSQL schema that holds the reconciler's own tables.
const Schema = "reconcile"

// versionTable is goose's bookkeeping table, kept inside Schema so that the
// reconciler touches nothing outside its own schema.
const versionTable = Schema + ".goose_db_version"

// Advisory lock keys. Advisory locks are scoped to one database, so one key
// per purpose is enough. They spell "reconmig" and "reconcil" in ASCII, to
// be recognisable in pg_locks.
const (
	migrateLockKey int64 = 0x7265636f6e6d6967
	runLockKey     int64 = 0x7265636f6e63696c
)

// MigrationReport says what Up did.
type MigrationReport struct {
	// Applied are the migration files applied by this call, in order; empty
	// when the schema was already current.
	Applied []string
	// Version is the schema version after the call.
	Version int64
	// River are the versions of River's own migrations applied by this
	// call, in order; empty when River's tables were already current.
	River []int
}

// Migrate creates or upgrades the reconciler's schema: goose's migrations
// of the reconciler's tables, then River's of the job queue's, in the same
// schema (docs/design.md, "The schema `reconcile`"). It is safe to run
// twice and from several processes at once: the schema is created under a
// transaction-scoped advisory lock, and the migrations of each kind under
// one session-level advisory lock.
func Migrate(ctx context.Context, dbURL string) error {
	_, err := Up(ctx, dbURL)
	return err
}

// Up is Migrate, reporting what it applied.
func Up(ctx context.Context, dbURL string) (MigrationReport, error) {
	p, db, err := newProvider(dbURL)
	if err != nil {
		return MigrationReport{}, err
	}
	defer db.Close()
	if err := createSchema(ctx, db); err != nil {
		return MigrationReport{}, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return MigrationReport{}, fmt.Errorf("migrate: %w", err)
	}
	var rep MigrationReport
	for _, r := range results {
		if r.Source != nil {
			rep.Applied = append(rep.Applied, r.Source.Path)
		}
	}
	rep.Version, err = p.GetDBVersion(ctx)
	if err != nil {
		return rep, fmt.Errorf("migrate: read schema version: %w", err)
	}
	rep.River, err = migrateRiver(ctx, dbURL)
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// riverMigrator is River's migrator for the schema reconcile on pool (nil
// for one that only lists River's migrations). River's logging is
// discarded as goose's is: what it applied is in the report.
func riverMigrator(pool *pgxpool.Pool) *rivermigrate.Migrator[pgx.Tx] {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{
		Schema: Schema,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err) // only an unknown migration line fails, and none is named
	}
	return m
}

// migrateRiver applies River's migrations that the database lacks, in the
// schema reconcile, and returns their versions. River's migrator takes no
// lock of its own, and two migrators would both try to apply the same
// version, so this one holds the session-level advisory lock goose's
// migrations are applied under, on a connection of its own, for as long as
// River's migrator runs on the others.
func migrateRiver(ctx context.Context, dbURL string) ([]int, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("migrate river: parse database url: %w", err)
	}
	cfg.ConnConfig.BuildContextWatcherHandler = cancelRequestHandler
	cfg.MaxConns = 2 // the lock's, and the migrator's
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrateLockKey); err != nil {
		return nil, fmt.Errorf("migrate river: take migration lock: %w", err)
	}
	defer func() {
		// A connection that cannot say it released the lock is closed,
		// which releases it.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrateLockKey); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	res, err := riverMigrator(pool).Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	var applied []int
	for _, v := range res.Versions {
		applied = append(applied, v.Version)
	}
	return applied, nil
}

func newProvider(dbURL string) (*goose.Provider, *sql.DB, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		// pgx's parse errors do not repeat the URL, so no password leaks.
		return nil, nil, fmt.Errorf("migrate: parse database url: %w", err)
	}
	// A migrator waiting for the lock whose context ends asks the server
	// to stop waiting, as the run lock does (see Store.Lock).
	cfg.BuildContextWatcherHandler = cancelRequestHandler
	db := stdlib.OpenDB(*cfg)
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub,
		goose.WithTableName(versionTable),
		goose.WithSessionLocker(sessionLocker{key: migrateLockKey}),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	return p, db, nil
}

// sessionLocker is goose's lock.SessionLocker on a blocking session-level
// advisory lock. goose's own Postgres locker polls pg_try_advisory_lock at
// whole-second intervals and gives up after a fixed count; blocking in
// pg_advisory_lock wakes the second migrator as soon as the first is done
// and waits as long as the context allows. Either way the lock dies with
// the connection, so a crashed migrator frees it.
type sessionLocker struct{ key int64 }

var _ lock.SessionLocker = sessionLocker{}

func (l sessionLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, l.key); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	return nil
}

func (l sessionLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var released bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, l.key).Scan(&released); err != nil {
		return fmt.Errorf("release migration lock: %w", err)
	}
	if !released {
		return errors.New("release migration lock: not held")
	}
	return nil
}

// createSchema creates the reconcile schema if it is missing. Two
// concurrent CREATE SCHEMA IF NOT EXISTS can both miss the schema and one
// then fails on pg_namespace's unique index, so creators queue on an
// advisory lock; the second then sees the first's committed schema.
func createSchema(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: create schema: %w", err)
	}
	defer tx.Rollback()
	// A plain existence check first: a role allowed to use the schema but
	// not to create one in the database must still be able to migrate.
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, Schema).Scan(&exists); err != nil {
		return fmt.Errorf("migrate: create schema: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
		return fmt.Errorf("migrate: create schema: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{Schema}.Sanitize()); err != nil {
		return fmt.Errorf("migrate: create schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: create schema: %w", err)
	}
	return nil
}

// ErrSchemaOutdated is returned by CheckSchema when the database was not
// migrated to this build's schema.
var ErrSchemaOutdated = errors.New("the reconcile schema is not up to date (run `reconcile migrate`)")

// CheckSchema returns ErrSchemaOutdated (wrapped, with both versions) if the
// database's reconcile schema is older than this build, so that a run says
// what to do instead of failing on a missing table. River's tables count
// too: migrate makes them with the rest, and a database whose goose
// migrations are current but whose River migrations are not (migrated by a
// build with an older River) is as outdated as one missing a table of its
// own.
func (s *Store) CheckSchema(ctx context.Context) error {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, versionTable).Scan(&exists); err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	var latest int64
	entries, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	for _, e := range entries {
		v, err := goose.NumericComponent(e)
		if err != nil {
			return fmt.Errorf("check schema: %w", err)
		}
		latest = max(latest, v)
	}
	var current int64
	if exists {
		// goose records downgrades as rows with is_applied = false; the
		// newest row per version tells.
		err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM (
			SELECT DISTINCT ON (version_id) version_id, is_applied FROM `+versionTable+`
			ORDER BY version_id, id DESC) v WHERE is_applied`).Scan(&current)
		if err != nil {
			return fmt.Errorf("check schema: %w", err)
		}
	}
	if current < latest {
		return fmt.Errorf("check schema: at version %d, want %d: %w", current, latest, ErrSchemaOutdated)
	}
	res, err := riverMigrator(s.pool).Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("check schema: river's migrations: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("check schema: river's tables: %s: %w", strings.Join(res.Messages, "; "), ErrSchemaOutdated)
	}
	return nil
}
