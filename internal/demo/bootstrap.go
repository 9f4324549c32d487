package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/user"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/embeddedpg"
	"reconcile/internal/redact"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

// Key is the demo's Stripe API key: a test-mode key of no account, which
// the demo's Stripe-compatible server accepts.
const Key = "sk_test_demo_reconcile"

// Env is what `reconcile demo` runs against: a throwaway database holding
// the reconciler's schema and the sample's obligations table, and an
// in-process Stripe-compatible server holding the sample's provider
// objects. Nothing of the caller's is touched but the PostgreSQL server
// the database is created on.
type Env struct {
	// DatabaseURL is the throwaway database's.
	DatabaseURL string
	// StripeURL is the base URL of the Stripe-compatible server, which
	// accepts Key.
	StripeURL string
	// Embedded, when no server was named and none answered locally, says
	// which embedded PostgreSQL holds the database (embeddedpg.Server);
	// "" otherwise.
	Embedded string
	// close undoes Start, last step first.
	close []func()
	// keep leaves the database when the Env closes.
	keep bool
}

// Keep makes Close leave the throwaway database in place (and stop the
// rest), for `demo --keep`: `trace`, `findings`, `ack` and `serve` can
// then be tried on the demo's data.
func (e *Env) Keep() { e.keep = true }

// Start sets up the demo's Env for data. The throwaway database is made
// on the server of adminURL when it is set, else on a PostgreSQL answering
// on localhost:5432 (RECONCILE_LOCAL_PG_ADDR) as root, the current user or
// postgres, else on an embedded PostgreSQL started for it
// (internal/embeddedpg, RECONCILE_PG_BINARIES). Close the Env to stop the
// servers and drop the database.
func Start(ctx context.Context, adminURL string, data Dataset) (*Env, error) {
	env := &Env{}
	if err := env.start(ctx, adminURL, data); err != nil {
		env.Close() // what was made before the failure
		return nil, err
	}
	return env, nil
}

func (e *Env) start(ctx context.Context, adminURL string, data Dataset) error {
	local := embeddedpg.LocalAddr(os.Getenv)
	if adminURL == "" && !embeddedpg.Answers(ctx, local) {
		pg, err := embeddedpg.Start(ctx, os.Getenv)
		if err != nil {
			return fmt.Errorf("demo: no PostgreSQL: DATABASE_URL is unset, nothing answers on %s, and %w", local, err)
		}
		e.close = append(e.close, pg.Stop)
		e.Embedded = pg.String()
		adminURL = pg.URL
	}
	dbURL, drop, err := throwawayDatabase(ctx, adminURL)
	if err != nil {
		return err
	}
	e.DatabaseURL = dbURL
	e.close = append(e.close, func() {
		if !e.keep {
			drop()
		}
	})
	if err := store.Migrate(ctx, dbURL); err != nil {
		return fmt.Errorf("demo database: %w", err)
	}

	stripe := stripesim.New(Key)
	for _, a := range data.Accounts {
		if err := stripe.AddAccount(stripesim.Account{ID: a.ID, DisplayName: a.Name}); err != nil {
			return fmt.Errorf("demo data: %w", err)
		}
	}
	for _, o := range data.Objects {
		if err := stripe.As(o.Account).Add(o.ProviderObject, o.Key); err != nil {
			return fmt.Errorf("demo data: %w", err)
		}
	}
	stripeURL, stopStripe, err := stripe.Start()
	if err != nil {
		return err
	}
	e.StripeURL = stripeURL
	e.close = append(e.close, stopStripe)

	return loadObligations(ctx, dbURL, data.Obligations)
}

// Close stops the Stripe-compatible server and drops the database, even
// when ctx of Start has ended (an interrupted demo cleans up too).
func (e *Env) Close() {
	for i := len(e.close) - 1; i >= 0; i-- {
		e.close[i]()
	}
	e.close = nil
}

// Printer is the demo's Slack: a deliverer that prints the messages a
// drain would post, as finance would read them in Slack, to w, and marks
// them sent. The links point at Stripe's test-mode dashboard.
func Printer(w io.Writer) *alerts.Sink {
	return alerts.NewSink(w, false)
}

// loadObligations creates the reference obligations table in the database
// at dbURL, with the column naming each obligation's connected account
// (AccountColumn: NULL for the platform's own), and inserts obs.
func loadObligations(ctx context.Context, dbURL string, obs []reconcile.Obligation) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("demo obligations table: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, reconcile.ReferenceSchema); err != nil {
		return fmt.Errorf("demo obligations table: %w", err)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE obligations ADD COLUMN `+AccountColumn+` text`); err != nil {
		return fmt.Errorf("demo obligations table: %w", err)
	}
	batch := &pgx.Batch{}
	for _, o := range obs {
		batch.Queue(`INSERT INTO obligations (id, kind, idempotency_key, provider, provider_id, target_id, amount, currency,
			state, lease_owner, lease_expires_at, created_at, updated_at, paid_at, `+AccountColumn+`)
			VALUES ($1,$2,$3,$4,NULLIF($5,''),NULLIF($6,''),$7,$8,$9,NULLIF($10,''),$11,$12,$13,$14,NULLIF($15,''))`,
			o.ID, string(o.Kind), o.IdempotencyKey, o.Provider, o.ProviderID, o.TargetID, o.Money.Amount, o.Money.Currency,
			o.RawState, o.LeaseOwner, nullTime(o.LeaseExpiresAt.Time()), o.CreatedAt.Time(), o.UpdatedAt.Time(), nullTime(o.PaidAt.Time()), o.Account)
	}
	if err := conn.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("demo obligations: %w", err)
	}
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// throwawayDatabase creates a database of a random name and returns its
// URL and a function that drops it: on the server of adminURL if set,
// else on the first of the usual local accounts that may create one.
func throwawayDatabase(ctx context.Context, adminURL string) (string, func(), error) {
	var candidates []string
	if adminURL != "" {
		candidates = []string{adminURL}
	} else {
		candidates = []string{"postgres://root@127.0.0.1:5432/postgres?sslmode=disable"}
		if u, err := user.Current(); err == nil && u.Username != "root" {
			candidates = append(candidates, "postgres://"+url.PathEscape(u.Username)+"@127.0.0.1:5432/postgres?sslmode=disable")
		}
		candidates = append(candidates, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
		for i, c := range candidates {
			candidates[i] = embeddedpg.LocalURL(c, os.Getenv)
		}
	}
	var lastErr error
	for _, admin := range candidates {
		u, err := url.Parse(admin)
		if err != nil || u.Scheme == "" {
			return "", nil, errors.New("DATABASE_URL: the demo needs a postgres:// URL to derive a throwaway database from")
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, admin)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		b := make([]byte, 4)
		rand.Read(b)
		name := "reconcile_demo_" + hex.EncodeToString(b)
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		conn.Close(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		u.Path = "/" + name
		drop := func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if conn, err := pgx.Connect(dctx, admin); err == nil {
				conn.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
				conn.Close(dctx)
			}
		}
		return u.String(), drop, nil
	}
	return "", nil, fmt.Errorf("demo: no PostgreSQL to create a throwaway database on (%s): set DATABASE_URL to a server where you may create databases, or install and start PostgreSQL on localhost:5432 (Debian: apt-get install postgresql)",
		redact.String(lastErr.Error()))
}
