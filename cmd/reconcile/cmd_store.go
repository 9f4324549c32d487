package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"reconcile/internal/alerts"
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
		return failed(errors.New(alerts.Redact(err.Error())))
	}
	if len(rep.Applied) == 0 {
		fmt.Fprintf(stdout, "schema %s is up to date (version %d)\n", store.Schema, rep.Version)
	} else {
		fmt.Fprintf(stdout, "schema %s migrated to version %d (%s)\n", store.Schema, rep.Version, strings.Join(rep.Applied, ", "))
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
		f.Fingerprint, f.Kind, alerts.Redact(subjectOf(f.ObligationID, f.ProviderIDs)))
	return nil
}

func subjectOf(obligationID string, providerIDs []string) string {
	if obligationID != "" {
		return obligationID
	}
	return strings.Join(providerIDs, ", ")
}

// cmdFindings lists findings for finance.
func cmdFindings(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("findings")
	var open bool
	c.fs.BoolVar(&open, "open", false, "only findings still open")
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
	fs, err := d.store.Findings(ctx, open)
	if err != nil {
		return failed(err)
	}
	switch format.value {
	case "json":
		return writeJSON(stdout, findingsJSON(fs))
	case "csv":
		return writeFindingsCSV(stdout, fs)
	}
	if len(fs) == 0 {
		fmt.Fprintln(stdout, "no findings")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEVERITY\tKIND\tSUBJECT\tAT RISK\tSTATUS\tFIRST SEEN\tLAST SEEN\tFINGERPRINT")
	for _, f := range fs {
		status := string(f.Status)
		if !f.AcknowledgedAt.IsZero() && f.Status == store.FindingOpen {
			status = "open, acknowledged"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Severity, f.Kind,
			alerts.Redact(subjectOf(f.ObligationID, f.ProviderIDs)), f.AtRisk, status,
			f.FirstSeenAt.UTC().Format(time.DateTime), f.LastSeenAt.UTC().Format(time.DateTime), f.Fingerprint)
	}
	return tw.Flush()
}

type findingJSON struct {
	Fingerprint    string   `json:"fingerprint"`
	Kind           string   `json:"kind"`
	Severity       string   `json:"severity"`
	Status         string   `json:"status"`
	ObligationID   string   `json:"obligation_id"`
	ProviderIDs    []string `json:"provider_ids"`
	Amount         int64    `json:"amount"`
	Currency       string   `json:"currency"`
	AtRiskAmount   int64    `json:"at_risk_amount"`
	AtRiskCurrency string   `json:"at_risk_currency"`
	Detail         string   `json:"detail"`
	FirstSeenRun   string   `json:"first_seen_run"`
	FirstSeenAt    string   `json:"first_seen_at"`
	LastSeenRun    string   `json:"last_seen_run"`
	LastSeenAt     string   `json:"last_seen_at"`
	ResolvedAt     string   `json:"resolved_at,omitempty"`
	AcknowledgedAt string   `json:"acknowledged_at,omitempty"`
	AcknowledgedBy string   `json:"acknowledged_by,omitempty"`
	AckReason      string   `json:"ack_reason,omitempty"`
}

func findingsJSON(fs []store.FindingRecord) []findingJSON {
	out := make([]findingJSON, 0, len(fs))
	for _, f := range fs {
		ids := f.ProviderIDs
		if ids == nil {
			ids = []string{}
		}
		out = append(out, findingJSON{
			Fingerprint: f.Fingerprint, Kind: string(f.Kind), Severity: string(f.Severity), Status: string(f.Status),
			ObligationID: f.ObligationID, ProviderIDs: ids, Amount: f.Money.Amount, Currency: f.Money.Currency,
			AtRiskAmount: f.AtRisk.Amount, AtRiskCurrency: f.AtRisk.Currency, Detail: alerts.Redact(f.Detail),
			FirstSeenRun: f.FirstSeenRun, FirstSeenAt: stampOrEmpty(f.FirstSeenAt), LastSeenRun: f.LastSeenRun,
			LastSeenAt: stampOrEmpty(f.LastSeenAt), ResolvedAt: stampOrEmpty(f.ResolvedAt),
			AcknowledgedAt: stampOrEmpty(f.AcknowledgedAt), AcknowledgedBy: f.AcknowledgedBy, AckReason: f.AckReason,
		})
	}
	return out
}

func stampOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return stamp(t)
}

// writeFindingsCSV writes findings for a spreadsheet: money in major units
// beside a currency column, text cells that a spreadsheet would run as a
// formula defused.
func writeFindingsCSV(w io.Writer, fs []store.FindingRecord) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"fingerprint", "severity", "kind", "status", "obligation_id", "provider_ids", "currency",
		"amount", "at_risk_currency", "at_risk", "first_seen_at", "last_seen_at", "resolved_at",
		"acknowledged_at", "acknowledged_by", "ack_reason", "detail"})
	for _, f := range fs {
		cw.Write([]string{f.Fingerprint, string(f.Severity), string(f.Kind), string(f.Status),
			cell(f.ObligationID), cell(strings.Join(f.ProviderIDs, " ")), strings.ToUpper(f.Money.Currency),
			f.Money.Decimal(), strings.ToUpper(f.AtRisk.Currency), f.AtRisk.Decimal(),
			stampOrEmpty(f.FirstSeenAt), stampOrEmpty(f.LastSeenAt), stampOrEmpty(f.ResolvedAt),
			stampOrEmpty(f.AcknowledgedAt), cell(f.AcknowledgedBy), cell(f.AckReason), cell(alerts.Redact(f.Detail))})
	}
	cw.Flush()
	return cw.Error()
}

// cell defuses spreadsheet formulas (CSV injection): a text cell starting
// with = + - @ or a tab gets a leading apostrophe.
func cell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
