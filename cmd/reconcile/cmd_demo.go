package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os/user"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/demo"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/store"
	"reconcile/internal/stripetest"
)

// demoKey is the test server's API key: a test-mode key of no account.
const demoKey = "sk_test_demo_reconcile"

// cmdDemo runs the whole flow on built-in sample data with no set-up: a
// throwaway database, the in-repo Stripe-compatible server, and Slack
// messages printed as finance would see them.
func cmdDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("demo")
	format := c.format("text", "json")
	cfg, err := c.start(args, stdout, getenv)
	if err != nil {
		return err
	}
	log := newLogger(stderr, slog.LevelWarn) // the demo's story is on stdout; only trouble goes to stderr

	dbURL, drop, err := demoDatabase(ctx, cfg.Env.DatabaseURL.Reveal())
	if err != nil {
		return failed(err)
	}
	defer drop()
	if err := store.Migrate(ctx, dbURL); err != nil {
		return failed(fmt.Errorf("demo database: %w", err))
	}

	now := time.Now().UTC().Truncate(time.Second)
	data := demo.Sample(now)
	stripe := stripetest.New(demoKey)
	for _, o := range data.Objects {
		if err := stripe.Add(o.ProviderObject, o.Key); err != nil {
			return failed(fmt.Errorf("demo data: %w", err))
		}
	}
	stripeURL, stopStripe, err := stripe.Start()
	if err != nil {
		return failed(err)
	}
	defer stopStripe()

	// The demo's own environment: nothing of the caller's leaks in.
	cfg.Env.DatabaseURL = config.Secret(dbURL)
	cfg.Env.StripeAPIKey = config.Secret(demoKey)
	cfg.Env.StripeAPIBase = stripeURL
	cfg.Env.SlackBotToken, cfg.Env.SlackWebhookURL, cfg.Env.SlackChannel = "", "", ""
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.close()
	if _, err := d.pool.Exec(ctx, reconcile.ReferenceSchema); err != nil {
		return failed(fmt.Errorf("demo obligations table: %w", err))
	}
	if err := insertObligations(ctx, d, data.Obligations); err != nil {
		return failed(err)
	}
	r, err := d.newRunner(ctx, nil)
	if err != nil {
		return err
	}
	var sink io.Writer = stdout
	if format.value == "json" {
		sink = stderr // stdout holds the JSON report only
	}
	r.Alerts = alerts.NewSink(sink, false)

	fmt.Fprintf(sink, "%s\n\nSlack, as finance sees it:\n\n", demo.Story)
	out, err := r.Run(ctx, runner.Request{Window: reconcile.Window{From: now.Add(-cfg.Lookback), To: now}, Trigger: reconcile.TriggerDemo})
	if err != nil {
		return failed(err)
	}
	if format.value == "json" {
		return writeJSON(stdout, report.New(out))
	}
	fmt.Fprintln(stdout, "\nThe report:")
	fmt.Fprintln(stdout)
	report.WriteText(stdout, out)

	// A second pass over the same history: nothing new, nothing changed,
	// nothing sent. This is what makes it safe to run from cron.
	again, err := r.Run(ctx, runner.Request{Window: reconcile.Window{From: now.Add(-cfg.Lookback), To: now}, Trigger: reconcile.TriggerDemo})
	if err != nil {
		return failed(err)
	}
	fmt.Fprintf(stdout, "\nA second run over the same data: %d findings still open, %d new alerts, %d transitions.\n",
		len(again.Result.Findings), again.Applied.Alerts, len(again.Transitions))
	fmt.Fprintln(stdout, "Trace one obligation end to end with: reconcile trace refund:4821:approved-request-7 (against your own database).")
	return nil
}

func insertObligations(ctx context.Context, d *deps, obs []reconcile.Obligation) error {
	batch := &pgx.Batch{}
	for _, o := range obs {
		batch.Queue(`INSERT INTO obligations (id, kind, idempotency_key, provider, provider_id, target_id, amount, currency,
			state, lease_owner, lease_expires_at, created_at, updated_at, paid_at)
			VALUES ($1,$2,$3,$4,NULLIF($5,''),NULLIF($6,''),$7,$8,$9,NULLIF($10,''),$11,$12,$13,$14)`,
			o.ID, string(o.Kind), o.IdempotencyKey, o.Provider, o.ProviderID, o.TargetID, o.Money.Amount, o.Money.Currency,
			o.RawState, o.LeaseOwner, nullTime(o.LeaseExpiresAt), o.CreatedAt, o.UpdatedAt, nullTime(o.PaidAt))
	}
	if err := d.pool.SendBatch(ctx, batch).Close(); err != nil {
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

// demoDatabase creates a throwaway database and returns its URL and a
// function that drops it: on the server of DATABASE_URL if set, else on a
// PostgreSQL answering on localhost:5432.
func demoDatabase(ctx context.Context, databaseURL string) (string, func(), error) {
	var candidates []string
	if databaseURL != "" {
		candidates = []string{databaseURL}
	} else {
		candidates = []string{"postgres://root@127.0.0.1:5432/postgres?sslmode=disable"}
		if u, err := user.Current(); err == nil && u.Username != "root" {
			candidates = append(candidates, "postgres://"+url.PathEscape(u.Username)+"@127.0.0.1:5432/postgres?sslmode=disable")
		}
		candidates = append(candidates, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
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
		alerts.Redact(lastErr.Error()))
}
