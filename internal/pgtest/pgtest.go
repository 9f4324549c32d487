// Package pgtest gives each test a fresh PostgreSQL database of its own on
// the real server, dropped when the test ends.
//
// The admin connection comes from TEST_DATABASE_URL, default
// postgres://root@127.0.0.1:5432/postgres?sslmode=disable (the local
// server with trust auth). There is no mock: a test that needs a database
// fails when none answers, saying how to start one.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
)

// DefaultAdminURL is used when TEST_DATABASE_URL is unset.
const DefaultAdminURL = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the connection string tests create their databases through.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// NewDatabase creates an empty database for tb and returns its URL. The
// database is dropped (connections forced closed) at cleanup.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		tb.Fatalf("pgtest: connect to PostgreSQL (set TEST_DATABASE_URL, or start the local server: "+
			"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", err)
	}
	defer admin.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	name := "reconcile_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
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
	u, err := url.Parse(AdminURL())
	if err != nil {
		tb.Fatalf("pgtest: parse admin URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// NewPool returns a pool on a fresh database, closed at cleanup.
func NewPool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	dbURL := NewDatabase(tb)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		tb.Fatalf("pgtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, dbURL
}

// NewObligations returns a pool on a fresh database holding the reference
// obligations table (docs/design.md, "Obligations").
func NewObligations(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, dbURL := NewPool(tb)
	if _, err := pool.Exec(context.Background(), reconcile.ReferenceSchema); err != nil {
		tb.Fatalf("pgtest: reference schema: %v", err)
	}
	return pool, dbURL
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
			created = time.Now()
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
			o.Money.Amount, o.Money.Currency, state, nullStr(o.LeaseOwner), nullTime(o.LeaseExpiresAt),
			created, updated, nullTime(o.PaidAt))
	}
	if err := pool.SendBatch(context.Background(), batch).Close(); err != nil {
		tb.Fatalf("pgtest: insert obligations: %v", err)
	}
}
