package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"reconcile"

	"reconcile/internal/redact"
	"reconcile/internal/report"
	"reconcile/internal/store"
)

// cmdMigrate creates or upgrades the reconciler's schema.
func cmdMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("migrate")
	cfg, err := c.start(args, stdout, getenv)
	if err != nil {
		return err
	}
	d, err := openDB(ctx, cfg, newLogger(stderr, slog.LevelInfo)) // fails fast, with a clear line, if the database is down
	if err != nil {
		return err
	}
	d.close()
	rep, err := store.Up(ctx, cfg.Env.DatabaseURL.Reveal())
	if err != nil {
		return failed(errors.New(redact.String(err.Error())))
	}
	applied := rep.Applied
	if len(rep.River) > 0 {
		// River's own migrations, for its job queue in the same schema.
		applied = append(applied, fmt.Sprintf("River's %v", rep.River))
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema %s is up to date (version %d)\n", store.Schema, rep.Version)
	} else {
		fmt.Fprintf(stdout, "schema %s migrated to version %d (%s)\n", store.Schema, rep.Version, strings.Join(applied, ", "))
	}
	return nil
}

// cmdAck acknowledges an open finding so it is not repeated.
func cmdAck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("ack")
	var reason, by string
	c.fs.StringVar(&reason, "reason", "", "why the finding needs no more reminders (required)")
	c.fs.StringVar(&by, "by", getenv("USER"), "who acknowledges it")
	pos, cfg, err := c.startWith(args, stdout, getenv, "FINGERPRINT")
	if err != nil {
		return err
	}
	if strings.TrimSpace(reason) == "" {
		return usageError("ack: --reason is required (say why no more reminders are needed)")
	}
	d, err := openDB(ctx, cfg, newLogger(stderr, slog.LevelInfo))
	if err != nil {
		return err
	}
	defer d.close()
	f, err := d.store.Ack(ctx, pos[0], by, reason, time.Now().UTC())
	if err != nil {
		return failed(err)
	}
	fmt.Fprintf(stdout, "acknowledged %s (%s, %s): no more repeats unless it changes\n",
		f.Fingerprint, f.Kind, redact.Text(report.Subject(f.ObligationID, f.ProviderIDs)))
	return nil
}

// cmdFindings lists findings for finance.
func cmdFindings(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("findings")
	var open bool
	var kind, target string
	c.fs.BoolVar(&open, "open", false, "only findings still open")
	c.fs.StringVar(&kind, "kind", "", "only findings of this kind (duplicate, orphan, …)")
	c.fs.StringVar(&target, "target", "", "only findings about this Stripe charge or payment intent (or naming this obligation or Stripe id)")
	format := c.format("text", "json", "csv")
	cfg, err := c.start(args, stdout, getenv)
	if err != nil {
		return err
	}
	d, err := openDB(ctx, cfg, newLogger(stderr, slog.LevelInfo))
	if err != nil {
		return err
	}
	defer d.close()
	if err := d.store.CheckSchema(ctx); err != nil {
		return failed(err)
	}
	if kind != "" && reconcile.FindingKind(kind).Info().Label == "" {
		return usageError("findings: --kind %q is not a finding kind", kind)
	}
	fs, err := d.store.Findings(ctx, open)
	if err != nil {
		return failed(err)
	}
	fs = slices.DeleteFunc(fs, func(f store.FindingRecord) bool {
		return kind != "" && string(f.Kind) != kind ||
			target != "" && f.Target != target && f.ObligationID != target && !slices.Contains(f.ProviderIDs, target)
	})
	switch format.value {
	case "json":
		return writeJSON(stdout, report.FromRecords(fs))
	case "csv":
		return report.WriteFindingsCSV(stdout, fs)
	}
	return report.WriteFindingsText(stdout, fs)
}
