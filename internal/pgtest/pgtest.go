// Package pgtest gives each test a fresh PostgreSQL database of its own on
// the real server, dropped when the test ends.
//
// A test that wants tables gets a clone of a template database built once
// (CREATE DATABASE … TEMPLATE): NewObligations clones one holding the
// reference obligations table, NewMigrated one holding it and the schema a
// migration makes. Templates are named after what built them, so a changed
// schema builds a new one; they stay on the server between runs.
//
// The admin connection comes from TEST_DATABASE_URL, default
// postgres://root@127.0.0.1:5432/postgres?sslmode=disable (the local
// server with trust auth; RECONCILE_LOCAL_PG_ADDR moves where it is
// looked for). When it is unset and nothing answers there, the first
// caller in the test binary starts an embedded PostgreSQL of the user's
// own (internal/embeddedpg, on RECONCILE_PG_BINARIES or the library's
// download), which every test of the binary then shares; its watchdog
// stops and removes it when the test binary exits, so no package needs a
// TestMain for it. There is no mock: a test that needs a database fails
// when none can be had, saying why.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/embeddedpg"
)

// DefaultAdminURL is used when TEST_DATABASE_URL is unset.
const DefaultAdminURL = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the connection string tests create their databases through:
// TEST_DATABASE_URL, else DefaultAdminURL (on the address
// RECONCILE_LOCAL_PG_ADDR names, if set) when the local server answers,
// else the embedded server's, started on first use. When that cannot
// start, AdminURL says why on stderr once, returns DefaultAdminURL and
// the connection's failure names the reason too.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	adminChoice.once.Do(func() {
		local := embeddedpg.LocalURL(DefaultAdminURL, os.Getenv)
		adminChoice.url = local
		if embeddedpg.Answers(context.Background(), embeddedpg.LocalAddr(os.Getenv)) {
			return
		}
		s, err := embeddedpg.Start(context.Background(), os.Getenv)
		if err != nil {
			adminChoice.err = fmt.Errorf("nothing answers on %s and %w", embeddedpg.LocalAddr(os.Getenv), err)
			fmt.Fprintln(os.Stderr, "pgtest:", adminChoice.err)
			return
		}
		adminChoice.server, adminChoice.url = s, s.URL
	})
	return adminChoice.url
}

// adminChoice is the test binary's choice of server, made once; server, the
// embedded one, is kept referenced for as long as the process lives: its
// watchdog stops it when the process ends.
var adminChoice struct {
	once   sync.Once
	url    string
	err    error
	server *embeddedpg.Server
}

// NewDatabase creates an empty database for tb and returns its URL. The
// database is dropped (connections forced closed) at cleanup.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, "", nil)
}

// NewPool returns a pool on a fresh empty database, closed at cleanup.
func NewPool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return poolOn(tb, NewDatabase(tb))
}

// NewObligations returns a pool on a fresh database holding the reference
// obligations table (docs/design.md, "Obligations").
func NewObligations(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return NewFromTemplate(tb, "obligations\n"+reconcile.ReferenceSchema, referenceSchema)
}

// NewMigrated returns a pool on a fresh database holding the reference
// obligations table and what migrate makes of it (store.Migrate: the
// schema reconcile, docs/design.md, "The schema `reconcile`"). version
// names what migrate makes (store.SchemaDigest): a template is built once
// per version and reference schema.
func NewMigrated(tb testing.TB, version string, migrate func(ctx context.Context, url string) error) (*pgxpool.Pool, string) {
	tb.Helper()
	return NewFromTemplate(tb, "obligations\n"+reconcile.ReferenceSchema+"\nmigrated\n"+version,
		func(ctx context.Context, url string) error {
			if err := referenceSchema(ctx, url); err != nil {
				return err
			}
			return migrate(ctx, url)
		})
}

// NewFromTemplate returns a pool on a fresh database cloned from the
// template that setup built for key, closed and dropped at cleanup.
//
// The template is built the first time a key is asked for on the server,
// by whichever test process asks first, and kept: key must change
// whenever setup would build something else, so it should hold what setup
// runs (the SQL, or a digest of the migrations). setup must close every
// connection it opens before it returns: PostgreSQL clones only a
// database nobody is connected to.
func NewFromTemplate(tb testing.TB, key string, setup func(ctx context.Context, url string) error) (*pgxpool.Pool, string) {
	tb.Helper()
	return poolOn(tb, newDatabase(tb, templateName(key), setup))
}

// templateName is the name of key's template: the prefix and a digest of
// key.
func templateName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return templatePrefix + hex.EncodeToString(sum[:10])
}

// templatePrefix starts the name of every template pgtest builds.
const templatePrefix = "reconcile_tpl_"

// keepTemplates is how many templates of other keys survive the building
// of a new one: those of a branch with other migrations, whose tests may
// be running beside this one's. Older ones are dropped.
const keepTemplates = 6

// templateLockKey is the advisory lock, on the admin database, that
// builders of templates hold exclusively and cloners shared, so that no
// clone copies a template half built or being dropped. It spells
// "recontpl" in ASCII.
const templateLockKey int64 = 0x7265636f6e74706c

func poolOn(tb testing.TB, dbURL string) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, dbURL
}

// newDatabase creates a database of a random name for tb, empty when
// template is "", else cloned from template (built by setup if missing),
// and returns its URL; it is dropped at cleanup.
func newDatabase(tb testing.TB, template string, setup func(ctx context.Context, url string) error) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		if adminChoice.err != nil {
			tb.Fatalf("pgtest: no PostgreSQL: %v", adminChoice.err)
		}
		tb.Fatalf("pgtest: connect to PostgreSQL (set TEST_DATABASE_URL, or start the local server: "+
			"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start; "+
			"with nothing listening there, an embedded one is started): %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	name := "reconcile_test_" + hex.EncodeToString(b)
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template == "" {
		if _, err := conn.Exec(ctx, create); err != nil {
			tb.Fatalf("pgtest: create database: %v", err)
		}
	} else if err := clone(ctx, tb, conn, create, template, setup); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			tb.Errorf("pgtest: drop %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	u, err := databaseURL(name)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return u
}

// clone runs create (a CREATE DATABASE) with template as its template,
// under templateLockKey held shared; a template missing or half built is
// built first, under the lock held exclusively.
func clone(ctx context.Context, tb testing.TB, admin *pgx.Conn, create, template string, setup func(ctx context.Context, url string) error) error {
	tb.Helper()
	for built := false; ; built = true {
		if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock_shared($1)`, templateLockKey); err != nil {
			return fmt.Errorf("wait for template %s: %w", template, err)
		}
		var ready bool
		err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)`,
			template).Scan(&ready)
		if err == nil && ready {
			_, err = admin.Exec(ctx, create+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
		}
		if _, uerr := admin.Exec(ctx, `SELECT pg_advisory_unlock_shared($1)`, templateLockKey); err == nil {
			err = uerr
		}
		switch {
		case err != nil:
			return fmt.Errorf("clone %s: %w", template, err)
		case ready:
			return nil
		case built:
			return fmt.Errorf("clone %s: the template is missing right after it was built", template)
		}
		start := time.Now()
		made, err := build(ctx, admin, template, setup)
		if err != nil {
			return err
		}
		if made {
			tb.Logf("pgtest: built template %s in %s", template, time.Since(start).Round(time.Millisecond))
		}
	}
}

// build makes template with setup, unless another process did while this
// one waited for the lock (made is false then), and drops the oldest
// templates of other keys.
// A template is marked IS_TEMPLATE once setup succeeded: a database of its
// name without the mark is a build that died half way, and is rebuilt.
func build(ctx context.Context, admin *pgx.Conn, template string, setup func(ctx context.Context, url string) error) (made bool, err error) {
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock($1)`, templateLockKey); err != nil {
		return false, fmt.Errorf("build template %s: %w", template, err)
	}
	defer func() {
		if _, uerr := admin.Exec(ctx, `SELECT pg_advisory_unlock($1)`, templateLockKey); err == nil && uerr != nil {
			err = fmt.Errorf("build template %s: %w", template, uerr)
		}
	}()
	ident := pgx.Identifier{template}.Sanitize()
	var exists, ready bool
	if err := admin.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(datistemplate), false) FROM pg_database WHERE datname = $1`,
		template).Scan(&exists, &ready); err != nil {
		return false, fmt.Errorf("build template %s: %w", template, err)
	}
	if ready {
		return false, nil
	}
	if exists {
		if _, err := admin.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			return false, fmt.Errorf("build template %s: drop a half-built one: %w", template, err)
		}
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return false, fmt.Errorf("build template %s: %w", template, err)
	}
	u, err := databaseURL(template)
	if err == nil {
		err = setup(ctx, u)
	}
	if err == nil {
		_, err = admin.Exec(ctx, "ALTER DATABASE "+ident+" IS_TEMPLATE true")
	}
	if err != nil {
		// At best: what is left is unmarked, so the next build redoes it.
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		return false, fmt.Errorf("build template %s: %w", template, err)
	}
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1) AND datname <> $2
		ORDER BY oid DESC OFFSET $3`, templatePrefix, template, keepTemplates)
	if err != nil {
		return false, fmt.Errorf("list old templates: %w", err)
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("list old templates: %w", err)
	}
	for _, name := range old {
		if err := dropTemplate(ctx, admin, name); err != nil {
			return true, err
		}
	}
	return true, nil
}

// dropTemplate drops a template; the caller holds templateLockKey
// exclusively.
func dropTemplate(ctx context.Context, admin *pgx.Conn, name string) error {
	id := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+id+" IS_TEMPLATE false"); err != nil {
		return fmt.Errorf("drop template %s: %w", name, err)
	}
	if _, err := admin.Exec(ctx, "DROP DATABASE "+id+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop template %s: %w", name, err)
	}
	return nil
}

// referenceSchema creates the reference obligations table in the database
// at dbURL.
func referenceSchema(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("reference schema: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, reconcile.ReferenceSchema); err != nil {
		return fmt.Errorf("reference schema: %w", err)
	}
	return nil
}

// databaseURL is the admin URL naming database name instead.
func databaseURL(name string) (string, error) {
	u, err := url.Parse(AdminURL())
	if err != nil {
		return "", fmt.Errorf("parse admin URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// InsertObligations writes obligations into the reference table; zero
// times become NULL (lease, paid) or now() (created, updated).
func InsertObligations(tb testing.TB, pool interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, obs ...reconcile.Obligation) {
	tb.Helper()
	batch := &pgx.Batch{}
	nullTime := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	nullStr := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	for _, o := range obs {
		created, updated := o.CreatedAt, o.UpdatedAt
		if created.IsZero() {
			created = reconcile.StampOf(time.Now())
		}
		if updated.IsZero() {
			updated = created
		}
		state := o.RawState
		if state == "" {
			state = string(o.State)
		}
		provider := o.Provider
		if provider == "" {
			provider = "stripe"
		}
		batch.Queue(`INSERT INTO obligations (id, kind, idempotency_key, provider, provider_id, target_id, amount, currency,
			state, lease_owner, lease_expires_at, created_at, updated_at, paid_at)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)`,
			o.ID, string(o.Kind), o.IdempotencyKey, provider, nullStr(o.ProviderID), nullStr(o.TargetID),
			o.Money.Amount, o.Money.Currency, state, nullStr(o.LeaseOwner), nullTime(o.LeaseExpiresAt.Time()),
			created.Time(), updated.Time(), nullTime(o.PaidAt.Time()))
	}
	if err := pool.SendBatch(context.Background(), batch).Close(); err != nil {
		tb.Fatalf("pgtest: insert obligations: %v", err)
	}
}

// InsertAccountObligations adds the column column to the reference
// obligations table, naming each obligation's Stripe connected account
// (obligations.columns.account), and inserts obs with their accounts: a
// platform's obligations table (docs/design.md, "Accounts").
func InsertAccountObligations(tb testing.TB, pool interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, column string, obs ...reconcile.Obligation) {
	tb.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `ALTER TABLE obligations ADD COLUMN `+pgx.Identifier{column}.Sanitize()+` text`); err != nil {
		tb.Fatalf("add the account column: %v", err)
	}
	InsertObligations(tb, pool, obs...)
	var ids, accounts []string
	for _, o := range obs {
		if o.Account != "" {
			ids, accounts = append(ids, o.ID), append(accounts, o.Account)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE obligations o SET `+pgx.Identifier{column}.Sanitize()+` = u.account
		FROM unnest($1::text[], $2::text[]) AS u(id, account) WHERE o.id = u.id`, ids, accounts); err != nil {
		tb.Fatalf("set the obligations' accounts: %v", err)
	}
}
