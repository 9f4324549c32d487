package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/redact"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// connectTimeout bounds each check of `config check --connect`.
const connectTimeout = 30 * time.Second

// checkConnections is `config check --connect`: the database (with the
// privileges, schema and table a run needs), Stripe (one read, no retry)
// and Slack (auth.test; a webhook cannot be asked without posting, and is
// not), one line each, "ok", "FAIL" or "--" (not checked). Any FAIL is
// exit 1 (docs/design.md, "Errors").
func checkConnections(ctx context.Context, w io.Writer, cfg config.Config) error {
	fmt.Fprintln(w, "# connections")
	failures := 0
	report := func(name, ok string, err error) {
		switch {
		case err == nil:
			fmt.Fprintf(w, "ok   %s: %s\n", name, ok)
		case errors.Is(err, alerts.ErrNotConfigured), errors.Is(err, alerts.ErrUncheckable):
			fmt.Fprintf(w, "--   %s: %s\n", name, errorLine(err))
		default:
			failures++
			fmt.Fprintf(w, "FAIL %s: %s\n", name, errorLine(err))
		}
	}
	log := slog.New(slog.DiscardHandler)
	ok, err := checkDatabase(ctx, cfg, log)
	report("database", ok, err)
	ok, err = checkStripe(ctx, cfg, log)
	report("stripe", ok, err)
	ok, err = checkSlack(ctx, cfg, log)
	report("slack", ok, err)
	if failures > 0 {
		return failed(fmt.Errorf("config check --connect: %d of 3 checks failed", failures))
	}
	return nil
}

// checkDatabase connects, then checks what a run checks before its first
// provider call, in the same order: privileges, schema, table.
func checkDatabase(ctx context.Context, cfg config.Config, log *slog.Logger) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		return "", err
	}
	defer d.close()
	var role string
	if err := d.pool.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		return "", fmt.Errorf("database: %w", err)
	}
	if err := store.CheckPrivileges(ctx, d.pool, cfg.Obligations, false); err != nil {
		return "", err
	}
	if err := d.store.CheckSchema(ctx); err != nil {
		return "", fmt.Errorf("check the reconcile schema: %w", err)
	}
	if err := d.obligations.Check(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s answers as role %q, which holds every privilege a run needs; schema reconcile is up to date; the obligations table is as configured",
		redact.URL(cfg.Env.DatabaseURL.Reveal(), false), role), nil
}

// checkStripe lists one charge, once.
func checkStripe(ctx context.Context, cfg config.Config, log *slog.Logger) (string, error) {
	if cfg.Env.StripeAPIKey == "" {
		return "", errors.New("STRIPE_API_KEY is not set (a restricted key with read access to charges, refunds, payment intents and events)")
	}
	so := sources.StripeOptionsFrom(cfg)
	so.Logger = log
	s, err := sources.NewStripe(so)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	n, err := s.Probe(ctx)
	if err != nil {
		return "", fmt.Errorf("list 1 charge: %w", err)
	}
	msg := fmt.Sprintf("STRIPE_API_BASE %s answered a list of charges (%d read) with the key (%s)",
		redact.URL(cfg.Env.StripeAPIBase, false), n, keyKind(cfg.Env.StripeAPIKey.Reveal()))
	if want := cfg.Stripe.Accounts; len(want) > 0 {
		// The connected accounts a run reads, listed as a run lists
		// them (docs/design.md, "Accounts").
		listed, err := s.Accounts(ctx)
		if err != nil {
			return "", fmt.Errorf("list the connected accounts: %w", err)
		}
		picked, err := pickAccounts(want, listed)
		if err != nil {
			return "", err
		}
		msg += fmt.Sprintf("; it reaches the %d connected account(s) stripe.accounts names", len(picked))
	}
	return msg, nil
}

// checkSlack asks auth.test; it posts nothing.
func checkSlack(ctx context.Context, cfg config.Config, log *slog.Logger) (string, error) {
	d, err := newDeliverer(cfg, log)
	if err != nil {
		return "", err
	}
	if d == nil {
		return "", fmt.Errorf("%w: set SLACK_BOT_TOKEN and SLACK_CHANNEL, or SLACK_WEBHOOK_URL; until then findings stay in the outbox and the report",
			alerts.ErrNotConfigured)
	}
	return d.Check(ctx)
}
