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
	"reconcile/internal/alerts"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// trace is everything known about one obligation.
type trace struct {
	Obligation traceObligation `json:"obligation"`
	// Provider is what the provider holds for it now (a read-only look at
	// the obligation's lifetime); empty with ProviderError set when it
	// could not be read.
	Window        *report.Window     `json:"provider_window,omitempty"`
	ProviderError string             `json:"provider_error,omitempty"`
	Objects       []traceObject      `json:"provider_objects"`
	Keys          []traceKey         `json:"idempotency_keys"`
	Lookups       []traceLookup      `json:"lookups"`
	Current       []report.Finding   `json:"findings_now"`
	Transition    *report.Transition `json:"would_transition,omitempty"`
	Findings      []report.Finding   `json:"findings"`
	Transitions   []traceAudit       `json:"transitions"`
	Alerts        []traceAlert       `json:"alerts"`
}

type traceObligation struct {
	ID             string `json:"id"`
	Kind           string `json:"kind"`
	IdempotencyKey string `json:"idempotency_key"`
	ProviderID     string `json:"provider_id"`
	TargetID       string `json:"target_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	State          string `json:"state"`
	LeaseOwner     string `json:"lease_owner"`
	LeaseExpiresAt string `json:"lease_expires_at"`
	CreatedAt      string `json:"created_at"`
	UpdatedAt      string `json:"updated_at"`
	PaidAt         string `json:"paid_at"`
}

type traceObject struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Status    string `json:"status"`
	RawStatus string `json:"raw_status"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Refunded  int64  `json:"amount_refunded,omitempty"`
	Target    string `json:"target,omitempty"`
	Intent    string `json:"payment_intent,omitempty"`
	Created   string `json:"created"`
	Route     string `json:"route"` // how it links to the obligation; empty for a related unlinked object
}

type traceKey struct {
	ObjectID  string `json:"object_id"`
	Key       string `json:"key"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	Created   string `json:"created"`
}

type traceLookup struct {
	ID     string `json:"id"`
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

type traceAudit struct {
	From       string `json:"from"`
	To         string `json:"to"`
	ProviderID string `json:"provider_id"`
	RunID      string `json:"run_id"`
	At         string `json:"at"`
}

type traceAlert struct {
	ID          int64  `json:"id"`
	Event       string `json:"event"`
	Fingerprint string `json:"fingerprint"`
	RunID       string `json:"run_id"`
	CreatedAt   string `json:"created_at"`
	Attempts    int    `json:"attempts"`
	SentAt      string `json:"sent_at"`
	SlackTS     string `json:"slack_ts,omitempty"`
	Unknown     bool   `json:"outcome_unknown,omitempty"`
	LastError   string `json:"last_error,omitempty"`
}

// cmdTrace shows everything known about one obligation: its row, what the
// provider holds for it and how each object links, the idempotency keys
// seen in events, the audit of transitions, its findings and their alerts.
// It writes nothing anywhere.
func cmdTrace(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("trace")
	format := c.format("text", "json")
	pos, cfg, err := c.startWith(args, stdout, getenv, "OBLIGATION_ID")
	if err != nil {
		return err
	}
	id := pos[0]
	log := newLogger(stderr, slog.LevelInfo)
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.close()
	ob, err := d.obligations.Get(ctx, id)
	if errors.Is(err, sources.ErrNotFound) {
		return failed(fmt.Errorf("trace: no obligation %q in the obligations table", alerts.Redact(id)))
	}
	if err != nil {
		return failed(err)
	}
	t := trace{Obligation: obligationJSON(ob), Objects: []traceObject{}, Keys: []traceKey{}, Lookups: []traceLookup{},
		Current: []report.Finding{}, Findings: []report.Finding{}, Transitions: []traceAudit{}, Alerts: []traceAlert{}}

	if err := d.store.CheckSchema(ctx); err == nil {
		h, err := d.store.ObligationHistory(ctx, id)
		if err != nil {
			return failed(err)
		}
		t.Findings = report.FromRecords(h.Findings)
		for _, a := range h.Transitions {
			t.Transitions = append(t.Transitions, traceAudit{From: string(a.From), To: string(a.To), ProviderID: a.ProviderID,
				RunID: a.RunID, At: stamp(a.At)})
		}
		for _, a := range h.Alerts {
			t.Alerts = append(t.Alerts, alertJSON(a))
		}
	} else if !errors.Is(err, store.ErrSchemaOutdated) {
		return failed(err)
	}

	if cfg.Env.StripeAPIKey == "" {
		t.ProviderError = "STRIPE_API_KEY is not set: the provider's side is not shown"
	} else if err := traceProvider(ctx, d, ob, &t); err != nil {
		t.ProviderError = alerts.Redact(err.Error())
	}
	if format.value == "json" {
		return writeJSON(stdout, t)
	}
	writeTrace(stdout, t)
	return nil
}

// traceProvider reads the provider over the obligation's lifetime (a
// dry run: no lock, no write) and keeps what concerns the obligation.
func traceProvider(ctx context.Context, d *deps, ob reconcile.Obligation, t *trace) error {
	r, err := d.newRunner(ctx, nil)
	if err != nil {
		return err
	}
	r.Alerts = nil
	now := time.Now().UTC().Truncate(time.Second)
	last := latest(ob.CreatedAt, ob.UpdatedAt, ob.PaidAt)
	w := reconcile.Window{
		From: ob.CreatedAt.Add(-time.Hour).Truncate(time.Second),
		To:   earliest(now, last.Add(d.cfg.Matcher.DuplicateWindow)).Add(time.Second).Truncate(time.Second),
	}
	out, err := r.Run(ctx, runner.Request{Window: w, DryRun: true, Trigger: reconcile.TriggerManual})
	if err != nil {
		return err
	}
	// What was read: the pass reads back from the obligation's creation
	// and on to now, whatever its window (docs/design.md, "Coverage").
	t.Window = &report.Window{From: stamp(out.Covered.From), To: stamp(out.Covered.To)}
	routes := map[string]reconcile.Route{}
	for _, l := range out.Result.Links {
		if l.ObligationID == ob.ID {
			routes[l.ObjectID] = l.Route
		}
	}
	related := func(o reconcile.ProviderObject) bool {
		_, linked := routes[o.ID]
		return linked || o.ID == ob.ProviderID || o.ID == ob.TargetID ||
			(ob.Kind == reconcile.Refund && ob.TargetID != "" && (o.Target == ob.TargetID || o.Charge == ob.TargetID))
	}
	shown := map[string]bool{}
	for _, o := range out.Input.Objects {
		if !related(o) || shown[o.ID] {
			continue
		}
		shown[o.ID] = true
		t.Objects = append(t.Objects, traceObject{ID: o.ID, Kind: string(o.Kind), Status: string(o.Status),
			RawStatus: o.RawStatus, Amount: o.Money.Amount, Currency: o.Money.Currency, Refunded: o.AmountRefunded,
			Target: o.Target, Intent: o.PaymentIntent, Created: stamp(o.Created), Route: string(routes[o.ID])})
	}
	for _, k := range out.Input.Keys {
		if shown[k.ObjectID] || k.Key == ob.IdempotencyKey {
			t.Keys = append(t.Keys, traceKey{ObjectID: k.ObjectID, Key: k.Key, EventID: k.EventID, EventType: k.EventType, Created: stamp(k.Created)})
		}
	}
	for _, l := range out.Lookups {
		if l.ID == ob.ProviderID || l.ID == ob.TargetID {
			t.Lookups = append(t.Lookups, traceLookup{ID: l.ID, Result: string(l.Result), Error: alerts.Redact(l.Err)})
		}
	}
	for _, f := range out.Result.Findings {
		if f.ObligationID == ob.ID {
			t.Current = append(t.Current, report.FromFinding(f))
		}
	}
	for _, tr := range out.Transitions {
		if tr.ObligationID == ob.ID {
			tr := report.FromTransition(tr)
			t.Transition = &tr
		}
	}
	return nil
}

func obligationJSON(o reconcile.Obligation) traceObligation {
	return traceObligation{ID: o.ID, Kind: string(o.Kind), IdempotencyKey: o.IdempotencyKey, ProviderID: o.ProviderID,
		TargetID: o.TargetID, Amount: o.Money.Amount, Currency: o.Money.Currency, State: o.RawState,
		LeaseOwner: o.LeaseOwner, LeaseExpiresAt: stampOrEmpty(o.LeaseExpiresAt), CreatedAt: stampOrEmpty(o.CreatedAt),
		UpdatedAt: stampOrEmpty(o.UpdatedAt), PaidAt: stampOrEmpty(o.PaidAt)}
}

func alertJSON(a store.AlertRecord) traceAlert {
	return traceAlert{ID: a.ID, Event: string(a.Event), Fingerprint: a.Fingerprint, RunID: a.RunID,
		CreatedAt: stamp(a.CreatedAt), Attempts: a.Attempts, SentAt: stampOrEmpty(a.SentAt), SlackTS: a.SlackTS,
		Unknown: a.OutcomeUnknown, LastError: alerts.Redact(a.LastError)}
}

func writeTrace(w io.Writer, t trace) {
	o := t.Obligation
	r := alerts.Redact
	fmt.Fprintf(w, "obligation %s\n", r(o.ID))
	fmt.Fprintf(w, "  %s of %s, state %s\n", o.Kind, reconcile.Money{Amount: o.Amount, Currency: o.Currency}, o.State)
	fmt.Fprintf(w, "  idempotency key %s\n", r(o.IdempotencyKey))
	fmt.Fprintf(w, "  provider id %s   target %s\n", orDash(o.ProviderID), orDash(o.TargetID))
	fmt.Fprintf(w, "  created %s   updated %s   paid %s\n", o.CreatedAt, o.UpdatedAt, orDash(o.PaidAt))
	if o.LeaseOwner != "" || o.LeaseExpiresAt != "" {
		fmt.Fprintf(w, "  lease %s until %s\n", orDash(o.LeaseOwner), orDash(o.LeaseExpiresAt))
	}
	fmt.Fprintln(w)
	if t.ProviderError != "" {
		fmt.Fprintf(w, "provider: not read (%s)\n", t.ProviderError)
	} else {
		fmt.Fprintf(w, "provider, read now over %s → %s\n", t.Window.From, t.Window.To)
		if len(t.Objects) == 0 {
			fmt.Fprintln(w, "  no provider object links to it or shares its target")
		}
		for _, p := range t.Objects {
			route := "not linked (same target)"
			if p.Route != "" {
				route = "linked by " + strings.ReplaceAll(p.Route, "_", " ")
			}
			fmt.Fprintf(w, "  %-16s %-14s %-10s %s   created %s   %s\n", p.ID, p.Kind, p.Status,
				reconcile.Money{Amount: p.Amount, Currency: p.Currency}, p.Created, route)
		}
		for _, l := range t.Lookups {
			fmt.Fprintf(w, "  looked up %s by id: %s %s\n", l.ID, l.Result, l.Error)
		}
		if len(t.Keys) > 0 {
			fmt.Fprintln(w, "  idempotency keys from events:")
			for _, k := range t.Keys {
				fmt.Fprintf(w, "    %s created %s (%s %s, %s)\n", r(k.Key), k.ObjectID, k.EventType, k.EventID, k.Created)
			}
		}
		for _, f := range t.Current {
			fmt.Fprintf(w, "  now: %s %s — %s\n", f.Severity, f.Kind, f.Detail)
		}
		if t.Transition != nil {
			fmt.Fprintf(w, "  now: a run would mark it %s on the evidence of %s\n", t.Transition.To, t.Transition.ProviderID)
		}
	}
	fmt.Fprintln(w, "\ntransitions made by the reconciler")
	if len(t.Transitions) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, a := range t.Transitions {
		fmt.Fprintf(w, "  %s  %s → %s  evidence %s  run %s\n", a.At, a.From, a.To, orDash(a.ProviderID), a.RunID)
	}
	fmt.Fprintln(w, "\nfindings")
	if len(t.Findings) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, f := range t.Findings {
		ack := ""
		if f.AcknowledgedAt != "" {
			ack = fmt.Sprintf(", acknowledged by %s: %s", r(f.AcknowledgedBy), r(f.AckReason))
		}
		fmt.Fprintf(w, "  %s %s %s (%s%s) first seen %s, last seen %s\n    %s\n", f.Fingerprint, f.Severity, f.Kind,
			f.Status, ack, f.FirstSeenAt, f.LastSeenAt, f.Detail)
	}
	fmt.Fprintln(w, "\nalerts")
	if len(t.Alerts) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, a := range t.Alerts {
		sent := "not sent yet"
		if a.SentAt != "" {
			sent = "sent " + a.SentAt + " (ts " + a.SlackTS + ")"
		}
		if a.Unknown {
			sent += ", an attempt's outcome is unknown"
		}
		fmt.Fprintf(w, "  %s %s queued %s, %d attempts, %s\n", a.Event, a.Fingerprint, a.CreatedAt, a.Attempts, sent)
	}
}

func stampOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return stamp(t)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return alerts.Redact(s)
}

func latest(ts ...time.Time) time.Time {
	return slices.MaxFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
