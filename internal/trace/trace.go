// Package trace assembles everything known about one obligation: its row,
// what the provider holds for it now and how each object links to it, the
// idempotency keys seen in events, the audit of the reconciler's
// transitions, its findings and their alerts. `reconcile trace` prints it
// as text or JSON; a web page can serve the same Trace. Assemble writes
// nothing anywhere: the provider is read by a dry pass.
package trace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"reconcile"
	"reconcile/internal/redact"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// Trace is everything known about one obligation, in the JSON shape of
// `reconcile trace --format json`: other tools parse it, so no field is
// renamed or removed, and a field added later is omitted when empty. The
// lists are never nil, so that an empty one prints [].
//
// What tools join on is exact: ids (of the obligation, the provider's
// objects, events, runs), idempotency keys, fingerprints, states,
// statuses and currencies as read. Free text (error texts, details, who
// acknowledged and why) is redact.Text; provider metadata is not part of
// a trace (docs/design.md, "Untrusted text"). WriteText masks the rest.
type Trace struct {
	Obligation Obligation `json:"obligation"`
	// Window is what the dry pass read of the provider; nil with
	// ProviderError set when the provider could not be read.
	Window        *report.Window `json:"provider_window,omitempty"`
	ProviderError string         `json:"provider_error,omitempty"`
	// Objects are what the provider holds for the obligation now: the
	// objects linked to it and those sharing its target.
	Objects []Object `json:"provider_objects"`
	Keys    []Key    `json:"idempotency_keys"`
	Lookups []Lookup `json:"lookups"`
	// Current are the findings about it that a pass would report now;
	// Transition the change a pass would make now, if any.
	Current    []report.Finding   `json:"findings_now"`
	Transition *report.Transition `json:"would_transition,omitempty"`
	// Findings are those the store keeps about it, with their history.
	Findings    []report.Finding `json:"findings"`
	Transitions []Audit          `json:"transitions"`
	Alerts      []Alert          `json:"alerts"`
}

// Obligation is the obligation's row as read, times in RFC 3339 UTC and
// empty where NULL. State is the raw value, as the application wrote it.
type Obligation struct {
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
	// Account is the connected account (acct_…) the obligation moves
	// money on; omitted for the platform's own (docs/design.md,
	// "Accounts").
	Account string `json:"account,omitempty"`
}

// Object is one provider object that concerns the obligation.
type Object struct {
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
	// Route is how it links to the obligation; empty for a related
	// object that does not link (one sharing its target).
	Route string `json:"route"`
}

// Key is an idempotency key an event said created an object.
type Key struct {
	ObjectID  string `json:"object_id"`
	Key       string `json:"key"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	// RequestID is the API request that created the object, where the
	// event told it.
	RequestID string `json:"request_id,omitempty"`
	Created   string `json:"created"`
}

// Lookup is the pass's retrieval by id of an object the obligation names
// (its provider id or target) and the listing did not hold.
type Lookup struct {
	ID     string `json:"id"`
	Result string `json:"result"`
	// Error is redact.Text: it is the provider's or the network's text.
	Error string `json:"error,omitempty"`
}

// Audit is one transition the reconciler made to the obligation.
type Audit struct {
	From       string `json:"from"`
	To         string `json:"to"`
	ProviderID string `json:"provider_id"`
	RunID      string `json:"run_id"`
	At         string `json:"at"`
}

// Alert is one alert about the obligation's findings and how its delivery
// went.
type Alert struct {
	ID          int64  `json:"id"`
	Event       string `json:"event"`
	Fingerprint string `json:"fingerprint"`
	RunID       string `json:"run_id"`
	CreatedAt   string `json:"created_at"`
	Attempts    int    `json:"attempts"`
	SentAt      string `json:"sent_at"`
	SlackTS     string `json:"slack_ts,omitempty"`
	// SlackChannel is the channel the message went to, with SlackTS.
	SlackChannel string `json:"slack_channel,omitempty"`
	Unknown      bool   `json:"outcome_unknown,omitempty"`
	// LastError is redact.Text: it is Slack's or the network's text.
	LastError string `json:"last_error,omitempty"`
}

// Obligations reads one obligation by id (sources.Obligations is one),
// with an error wrapping sources.ErrNotFound when there is none.
type Obligations interface {
	Get(ctx context.Context, id string) (reconcile.Obligation, error)
}

// History is what the store knows about one obligation (store.Store is
// one). CheckSchema tells a store never migrated, whose history is empty,
// from one that fails.
type History interface {
	CheckSchema(ctx context.Context) error
	ObligationHistory(ctx context.Context, obligationID string) (store.History, error)
}

// Pass runs a reconciliation pass (runner.Runner is one). Assemble asks
// only for dry runs, which take no lock and write nothing.
type Pass interface {
	Run(ctx context.Context, req runner.Request) (*runner.Outcome, error)
}

// PassFunc is a function as a Pass: one that builds its runner only when
// the trace gets as far as the provider, or says why it cannot read it.
type PassFunc func(ctx context.Context, req runner.Request) (*runner.Outcome, error)

// Run calls f.
func (f PassFunc) Run(ctx context.Context, req runner.Request) (*runner.Outcome, error) {
	return f(ctx, req)
}

// Deps are what Assemble reads.
type Deps struct {
	Obligations Obligations
	History     History
	// Provider reads the provider. Its error is shown in the trace
	// rather than failing it: the obligation and the store's side are
	// worth showing without the provider's.
	Provider Pass
	// DuplicateWindow is how long after the obligation's last change the
	// provider is read: a duplicate may come that late.
	DuplicateWindow time.Duration
	// Now is the clock, read once; time.Now when nil.
	Now func() time.Time
}

// ErrNotFound is returned (wrapped) by Assemble when the obligations
// table has no obligation of the id.
var ErrNotFound = errors.New("no such obligation")

// notFoundError says which obligation is missing, in the words the
// command has always printed.
type notFoundError struct {
	id string
	// named: no obligation or finding names id as a Stripe id either.
	named bool
}

func (e notFoundError) Error() string {
	// Masked on one line before quoting, as a quoted tab or zero-width
	// character would show between a card number's groups.
	s := fmt.Sprintf("trace: no obligation %q in the obligations table", redact.Text(e.id))
	if e.named {
		s += ", and no obligation or stored finding names it as a Stripe id"
	}
	return s
}

func (e notFoundError) Unwrap() error { return ErrNotFound }

// Assemble gathers everything known about obligation id. An obligation the
// store never saw has an empty history, and a provider that cannot be read
// leaves ProviderError set (redact.Text): neither is an error. It fails when the
// obligation cannot be read (ErrNotFound when it does not exist) or the
// store's history cannot.
func Assemble(ctx context.Context, d Deps, id string) (Trace, error) {
	ob, err := d.Obligations.Get(ctx, id)
	if errors.Is(err, sources.ErrNotFound) {
		return Trace{}, notFoundError{id: id}
	}
	if err != nil {
		return Trace{}, err
	}
	t := Trace{Obligation: obligation(ob), Objects: []Object{}, Keys: []Key{}, Lookups: []Lookup{},
		Current: []report.Finding{}, Findings: []report.Finding{}, Transitions: []Audit{}, Alerts: []Alert{}}

	if err := d.History.CheckSchema(ctx); err == nil {
		h, err := d.History.ObligationHistory(ctx, id)
		if err != nil {
			return Trace{}, err
		}
		t.Findings = report.FromRecords(h.Findings)
		for _, a := range h.Transitions {
			t.Transitions = append(t.Transitions, Audit{From: string(a.From), To: string(a.To), ProviderID: a.ProviderID,
				RunID: a.RunID, At: stamp(a.At)})
		}
		for _, a := range h.Alerts {
			t.Alerts = append(t.Alerts, AlertOf(a))
		}
	} else if !errors.Is(err, store.ErrSchemaOutdated) {
		return Trace{}, err
	}

	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	if err := provider(ctx, d.Provider, ob, d.DuplicateWindow, now().UTC().Truncate(time.Second), &t); err != nil {
		t.ProviderError = redact.Text(err.Error())
	}
	return t, nil
}

// provider reads the provider over the obligation's lifetime, from an
// hour before its creation to a duplicate window after its last change
// (or now), and keeps what concerns the obligation.
func provider(ctx context.Context, p Pass, ob reconcile.Obligation, duplicateWindow time.Duration, now time.Time, t *Trace) error {
	last := latest(ob.CreatedAt.Time(), ob.UpdatedAt.Time(), ob.PaidAt.Time())
	w := reconcile.Window{
		From: ob.CreatedAt.Time().Add(-time.Hour).Truncate(time.Second),
		To:   earliest(now, last.Add(duplicateWindow)).Add(time.Second).Truncate(time.Second),
	}
	// The obligation's own account alone: objects link only to
	// obligations of their account (docs/design.md, "Accounts").
	out, err := p.Run(ctx, runner.Request{Window: w, DryRun: true, Trigger: reconcile.TriggerManual, Accounts: []string{ob.Account}})
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
		t.Objects = append(t.Objects, Object{ID: o.ID, Kind: string(o.Kind), Status: string(o.Status),
			RawStatus: o.RawStatus, Amount: o.Money.Amount, Currency: o.Money.Currency, Refunded: o.AmountRefunded,
			Target: o.Target, Intent: o.PaymentIntent, Created: stamp(o.Created.Time()), Route: string(routes[o.ID])})
	}
	for _, k := range out.Input.Keys {
		if shown[k.ObjectID] || k.Key == ob.IdempotencyKey {
			t.Keys = append(t.Keys, Key{ObjectID: k.ObjectID, Key: k.Key, EventID: k.EventID, EventType: k.EventType,
				RequestID: k.RequestID, Created: stamp(k.Created.Time())})
		}
	}
	for _, l := range out.Lookups {
		if l.ID == ob.ProviderID || l.ID == ob.TargetID {
			t.Lookups = append(t.Lookups, Lookup{ID: l.ID, Result: string(l.Result), Error: redact.Text(l.Err)})
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

func obligation(o reconcile.Obligation) Obligation {
	return Obligation{ID: o.ID, Kind: string(o.Kind), IdempotencyKey: o.IdempotencyKey, ProviderID: o.ProviderID,
		TargetID: o.TargetID, Amount: o.Money.Amount, Currency: o.Money.Currency, State: o.RawState,
		LeaseOwner: o.LeaseOwner, LeaseExpiresAt: stampOrEmpty(o.LeaseExpiresAt.Time()), CreatedAt: stampOrEmpty(o.CreatedAt.Time()),
		UpdatedAt: stampOrEmpty(o.UpdatedAt.Time()), PaidAt: stampOrEmpty(o.PaidAt.Time()), Account: o.Account}
}

// AlertOf is a stored alert in a trace's shape.
func AlertOf(a store.AlertRecord) Alert {
	return Alert{ID: a.ID, Event: string(a.Event), Fingerprint: a.Fingerprint, RunID: a.RunID,
		CreatedAt: stamp(a.CreatedAt), Attempts: a.Attempts, SentAt: stampOrEmpty(a.SentAt), SlackTS: a.SlackTS, SlackChannel: a.SlackChannel,
		Unknown: a.OutcomeUnknown, LastError: redact.Text(a.LastError)}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func stampOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return stamp(t)
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
