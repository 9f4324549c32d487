package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/term"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/redact"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// isTerminal reports whether w is a terminal (progress lines and
// human-readable logs go there; JSON logs otherwise).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newLogger logs to stderr through slog: JSON when stderr is not a
// terminal, text when a person watches. Every value passes through the
// redactor first, so that no secret reaches a log line.
func newLogger(stderr io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: redact.Attr}
	if isTerminal(stderr) {
		return slog.New(slog.NewTextHandler(stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(stderr, opts))
}

// deps are the pieces a database-backed command needs.
type deps struct {
	cfg         config.Config
	log         *slog.Logger
	pool        *pgxpool.Pool
	store       *store.Store
	obligations *sources.Obligations
}

// openDB connects to DATABASE_URL and proves the database answers, fast,
// before any provider call: an unreachable database is exit 1 with zero
// requests to Stripe or Slack.
func openDB(ctx context.Context, cfg config.Config, log *slog.Logger) (*deps, error) {
	if cfg.Env.DatabaseURL == "" {
		return nil, usageError("DATABASE_URL is not set (the PostgreSQL holding the obligations table, e.g. postgres://user@host:5432/db)")
	}
	pcfg, err := pgxpool.ParseConfig(cfg.Env.DatabaseURL.Reveal())
	if err != nil {
		return nil, usageError("DATABASE_URL: not a valid PostgreSQL connection string")
	}
	pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, failed(fmt.Errorf("database: %s", redact.String(err.Error())))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, failed(fmt.Errorf("database unreachable (%s): %s",
			redact.URL(cfg.Env.DatabaseURL.Reveal(), false), redact.String(err.Error())))
	}
	opts := store.OptionsFrom(cfg)
	opts.Logger = log
	st, err := store.New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, usageError("%v", err)
	}
	obligations, err := sources.NewObligations(pool, cfg.Obligations)
	if err != nil {
		pool.Close()
		return nil, usageError("%v", err)
	}
	return &deps{cfg: cfg, log: log, pool: pool, store: st, obligations: obligations}, nil
}

func (d *deps) close() { d.pool.Close() }

// newRunner wires one pass: it checks the role's privileges, the schema
// and the obligations table before anything reaches the provider. A dry
// run needs no privilege to write.
func (d *deps) newRunner(ctx context.Context, progress func(sources.ProgressEvent), dryRun bool) (*runner.Runner, error) {
	cfg := d.cfg
	if cfg.Env.StripeAPIKey == "" {
		return nil, usageError("STRIPE_API_KEY is not set (a restricted key with read access to charges, refunds, payment intents and events)")
	}
	// Every privilege at once, named, before any provider call
	// (docs/design.md, "Privileges"): otherwise a missing column grant
	// is met at apply, after all of them.
	if err := store.CheckPrivileges(ctx, d.pool, cfg.Obligations, dryRun); err != nil {
		return nil, failed(err)
	}
	if err := d.store.CheckSchema(ctx); err != nil {
		if errors.Is(err, store.ErrSchemaOutdated) {
			return nil, failed(err)
		}
		return nil, failed(fmt.Errorf("check the reconcile schema: %w", err))
	}
	if err := d.obligations.Check(ctx); err != nil {
		return nil, failed(err)
	}
	// The store compares and sets in the column types Check just read.
	if err := d.store.UseTypes(d.obligations.Types()); err != nil {
		return nil, failed(err)
	}
	so := sources.StripeOptionsFrom(cfg)
	so.Logger, so.Progress = d.log, progress
	stripe, err := sources.NewStripe(so)
	if err != nil {
		return nil, usageError("%v", err)
	}
	mirror := store.NewMirror(d.pool)
	r := &runner.Runner{
		Provider:    stripe,
		Obligations: d.obligations,
		Store:       d.store,
		Matcher:     matcher.OptionsFrom(cfg.Matcher),
		Now:         time.Now,
		Logger:      d.log,
		Mirror:      mirror,
		MaxLookback: cfg.MaxLookback,
	}
	if want := cfg.Stripe.Accounts; len(want) > 0 {
		// A platform: every account read apart, through views of the one
		// reader, table and mirror (docs/design.md, "Accounts").
		r.Accounts = func(ctx context.Context) ([]reconcile.Account, error) {
			listed, err := stripe.Accounts(ctx)
			if err != nil {
				return nil, err
			}
			return pickAccounts(want, listed)
		}
		r.Scope = func(acct string) runner.Readers {
			return runner.Readers{Provider: stripe.ForAccount(acct), Obligations: d.obligations.ForAccount(acct), Mirror: mirror.ForAccount(acct)}
		}
	}
	deliverer, err := newDeliverer(cfg, d.log)
	if err != nil {
		return nil, usageError("%v", err)
	}
	if deliverer != nil {
		r.Alerts = deliverer
	}
	return r, nil
}

// pickAccounts are the connected accounts stripe.accounts names among
// those the key lists: every one for all, else each id named, which the
// listing must hold: an account the key cannot reach is refused before
// anything is read, rather than read as empty.
func pickAccounts(want config.AccountList, listed []reconcile.Account) ([]reconcile.Account, error) {
	if want.All() {
		return listed, nil
	}
	byID := make(map[string]reconcile.Account, len(listed))
	for _, a := range listed {
		byID[a.ID] = a
	}
	picked := make([]reconcile.Account, 0, len(want))
	var missing []string
	for _, id := range want {
		a, ok := byID[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		picked = append(picked, a)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("stripe.accounts names %s, which /v1/accounts does not list: the key cannot reach %s (not connected to the platform, or its access was revoked)",
			strings.Join(missing, ", "), map[bool]string{true: "it", false: "them"}[len(missing) == 1])
	}
	return picked, nil
}

// newDeliverer returns nil when no Slack is configured.
func newDeliverer(cfg config.Config, log *slog.Logger) (*alerts.Deliverer, error) {
	e := cfg.Env
	if e.SlackBotToken == "" && e.SlackWebhookURL == "" {
		return nil, nil
	}
	opts := alerts.SlackOptionsFrom(cfg)
	opts.Logger = log
	return alerts.NewSlack(opts)
}
