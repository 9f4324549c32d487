package report

import (
	"reconcile"
	"reconcile/internal/redact"
	"reconcile/internal/runner"
)

// Report is the JSON report of `reconcile run` (README.md, "The JSON report"), field for
// field: other tools parse it, so no field is renamed or removed. Fields
// added since are omitted when empty, so that a report without them reads
// as before.
type Report struct {
	RunID       string           `json:"run_id"`
	DryRun      bool             `json:"dry_run"`
	Window      Window           `json:"window"`
	Counts      reconcile.Counts `json:"counts"`
	Findings    []Finding        `json:"findings"`
	Transitions []Transition     `json:"transitions"`
	// UnmappedStates counts the obligations read by raw state value
	// whose state obligations.states does not map: never transitioned.
	UnmappedStates map[string]int `json:"unmapped_states,omitempty"`
	// Coverage is what the decisions rest on, whatever the window.
	Coverage *Coverage `json:"coverage,omitempty"`
	// AtRiskByMeaning sums the findings' money at risk by what it is
	// (paid out too much, collected wrongly, unconfirmed), per currency;
	// omitted when nothing is at risk.
	AtRiskByMeaning *reconcile.AtRiskByMeaning `json:"at_risk_by_meaning,omitempty"`
	// ConfirmedPaid counts the unknown outcomes the run confirmed from the
	// provider's records and marked PAID (or would, on a dry run).
	ConfirmedPaid *ConfirmedPaid `json:"confirmed_paid,omitempty"`
	// Accounts are the connected accounts the pass read besides the
	// platform's own, each with its counts; omitted when it read the
	// platform's alone (docs/design.md, "Accounts").
	Accounts []Account `json:"accounts,omitempty"`
}

// Account is one connected account a pass read: its id, its display name
// where Stripe gives one (outside text: redact.Text), and what was read
// of it and found on it.
type Account struct {
	ID       string           `json:"id"`
	Name     string           `json:"name,omitempty"`
	Counts   reconcile.Counts `json:"counts"`
	Findings int              `json:"findings"`
}

// ConfirmedPaid is how many unknown outcomes a run confirmed and marked
// PAID, and their money per currency.
type ConfirmedPaid struct {
	Count int               `json:"count"`
	Total []reconcile.Total `json:"total"`
}

// Coverage says which of the provider's records the run read in full
// (docs/design.md, "Coverage"): their creation times, where the key
// evidence starts, how many obligations were read only to link, and how
// many it decided on without all of their records (never marked PAID).
type Coverage struct {
	From       string `json:"from"`
	To         string `json:"to"`
	EventsFrom string `json:"events_from"`
	Context    int    `json:"context_obligations"`
	Partial    int    `json:"partial_obligations"`
}

// Window is a span of time in RFC 3339 UTC, From inclusive.
type Window struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Transition is a change of an obligation's state that a pass applied, or
// on a dry run would apply, on the evidence of ProviderID.
type Transition struct {
	ObligationID string `json:"obligation_id"`
	From         string `json:"from"`
	To           string `json:"to"`
	ProviderID   string `json:"provider_id"`
}

// New is the report of a completed pass. Findings and transitions are
// never nil: a pass without any prints [], as it always has.
func New(out *runner.Outcome) Report {
	r := Report{
		RunID:       out.Run.ID,
		DryRun:      out.Run.Status == reconcile.RunDry,
		Window:      Window{From: stamp(out.Run.Window.From), To: stamp(out.Run.Window.To)},
		Counts:      out.Run.Counts,
		Findings:    make([]Finding, 0, len(out.Result.Findings)),
		Transitions: make([]Transition, 0, len(out.Transitions)),
		// Raw values as read: JSON escapes what needs escaping.
		UnmappedStates: out.Unmapped,
	}
	if out.Covered.Valid() {
		r.Coverage = &Coverage{From: stamp(out.Covered.From), To: stamp(out.Covered.To),
			EventsFrom: stamp(out.EventsFrom), Context: out.Context, Partial: out.Partial}
	}
	for _, f := range out.Result.Findings {
		r.Findings = append(r.Findings, FromFinding(f))
	}
	if by := reconcile.SplitAtRisk(out.Result.Findings); !by.Empty() {
		r.AtRiskByMeaning = &by
	}
	if n, total := reconcile.Confirmed(out.Transitions); n > 0 {
		r.ConfirmedPaid = &ConfirmedPaid{Count: n, Total: total}
	}
	for _, t := range out.Transitions {
		r.Transitions = append(r.Transitions, FromTransition(t))
	}
	for _, a := range out.Accounts {
		if a.Account.Platform() {
			continue
		}
		r.Accounts = append(r.Accounts, Account{ID: a.Account.ID, Name: redact.Text(a.Account.Name), Counts: a.Counts, Findings: a.Findings})
	}
	return r
}

// FromTransition is the shape of one transition.
func FromTransition(t reconcile.Transition) Transition {
	return Transition{ObligationID: t.ObligationID, From: string(t.From), To: string(t.To), ProviderID: t.ProviderID}
}
