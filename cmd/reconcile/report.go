package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/runner"
)

// report is the run's JSON report (README.md, "The JSON report"), field for field: other tools parse
// it, so no field is renamed or removed. Fields added since are omitted
// when empty, so that a report without them reads as before.
type report struct {
	RunID       string             `json:"run_id"`
	DryRun      bool               `json:"dry_run"`
	Window      reportWindow       `json:"window"`
	Counts      reconcile.Counts   `json:"counts"`
	Findings    []reportFinding    `json:"findings"`
	Transitions []reportTransition `json:"transitions"`
	// UnmappedStates counts the obligations read by raw state value
	// whose state obligations.states does not map: never transitioned.
	UnmappedStates map[string]int `json:"unmapped_states,omitempty"`
	// Coverage is what the decisions rest on, whatever the window.
	Coverage *reportCoverage `json:"coverage,omitempty"`
}

// reportCoverage says which of the provider's records the run read in
// full (docs/design.md, "Coverage"): their creation times, where the key
// evidence starts, how many obligations were read only to link, and how
// many it decided on without all of their records (never marked PAID).
type reportCoverage struct {
	From       string `json:"from"`
	To         string `json:"to"`
	EventsFrom string `json:"events_from"`
	Context    int    `json:"context_obligations"`
	Partial    int    `json:"partial_obligations"`
}

type reportWindow struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type reportFinding struct {
	Kind         string   `json:"kind"`
	Severity     string   `json:"severity"`
	ObligationID string   `json:"obligation_id"`
	ProviderIDs  []string `json:"provider_ids"`
	Amount       int64    `json:"amount"`
	Currency     string   `json:"currency"`
	Fingerprint  string   `json:"fingerprint"`
	Detail       string   `json:"detail"`
}

type reportTransition struct {
	ObligationID string `json:"obligation_id"`
	From         string `json:"from"`
	To           string `json:"to"`
	ProviderID   string `json:"provider_id"`
}

func newReport(out *runner.Outcome) report {
	r := report{
		RunID:       out.Run.ID,
		DryRun:      out.Run.Status == reconcile.RunDry,
		Window:      reportWindow{From: stamp(out.Run.Window.From), To: stamp(out.Run.Window.To)},
		Counts:      out.Run.Counts,
		Findings:    []reportFinding{},
		Transitions: []reportTransition{},
		// Raw values as read: JSON escapes what needs escaping.
		UnmappedStates: out.Unmapped,
	}
	if out.Covered.Valid() {
		r.Coverage = &reportCoverage{From: stamp(out.Covered.From), To: stamp(out.Covered.To),
			EventsFrom: stamp(out.EventsFrom), Context: out.Context, Partial: out.Partial}
	}
	for _, f := range out.Result.Findings {
		ids := f.ProviderIDs
		if ids == nil {
			ids = []string{}
		}
		r.Findings = append(r.Findings, reportFinding{
			Kind: string(f.Kind), Severity: string(f.Severity), ObligationID: f.ObligationID,
			ProviderIDs: ids, Amount: f.Money.Amount, Currency: f.Money.Currency,
			Fingerprint: f.Fingerprint, Detail: alerts.Redact(f.Detail),
		})
	}
	for _, t := range out.Transitions {
		r.Transitions = append(r.Transitions, reportTransition{
			ObligationID: t.ObligationID, From: string(t.From), To: string(t.To), ProviderID: t.ProviderID,
		})
	}
	return r
}

// failure is what `run --format json` prints instead of the report when
// there is none to print: a run that failed, or never began. RunID is
// there when the pass began (its log lines and its failed run row carry
// it). Error is the line stderr shows, redacted.
type failure struct {
	RunID  string `json:"run_id,omitempty"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

// writeFailure prints err's failure object. Should stdout itself have
// failed, there is nowhere left to say so but stderr, which exitCode does.
func writeFailure(w io.Writer, err error) {
	f := failure{Status: string(reconcile.RunFailed), Error: errorLine(err)}
	var fr *runner.FailedRunError
	if errors.As(err, &fr) {
		f.RunID = fr.RunID
	}
	_ = writeJSON(w, f)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeText is the report for people: the summary first, then findings by
// severity, then what changed.
func writeText(w io.Writer, out *runner.Outcome) {
	run, res := out.Run, out.Result
	title := "reconcile run " + run.ID
	if run.Status == reconcile.RunDry {
		title += " (dry run: nothing written, nothing sent)"
	}
	fmt.Fprintln(w, title)
	fmt.Fprintf(w, "  window       %s → %s\n", stamp(run.Window.From), stamp(run.Window.To))
	fmt.Fprintf(w, "  read         %d obligations, %d provider objects, %d linked\n",
		run.Counts.Obligations, run.Counts.ProviderObjects, run.Counts.Linked)
	if c := out.Covered; c.Valid() {
		fmt.Fprintf(w, "  records      created %s → %s, key evidence from %s\n", stamp(c.From), stamp(c.To), stamp(out.EventsFrom))
		if out.Partial > 0 {
			fmt.Fprintf(w, "  not decided  %d obligations whose records reach back further (never marked PAID; see max_lookback)\n", out.Partial)
		}
	}
	if line := unmappedLine(out.Unmapped); line != "" {
		fmt.Fprintf(w, "  unmapped     %s\n", line)
	}
	bySev := map[reconcile.Severity]int{}
	for _, f := range res.Findings {
		bySev[f.Severity]++
	}
	if len(res.Findings) == 0 {
		fmt.Fprintln(w, "  findings     none: every obligation in scope agrees with the provider")
	} else {
		var parts []string
		for _, s := range []reconcile.Severity{reconcile.Critical, reconcile.High, reconcile.Warning, reconcile.Info} {
			if bySev[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", bySev[s], s))
			}
		}
		fmt.Fprintf(w, "  findings     %d (%s)\n", len(res.Findings), strings.Join(parts, ", "))
		fmt.Fprintf(w, "  at risk      %s\n", atRiskLine(res.Findings))
	}
	verb := "marked PAID"
	if run.Status == reconcile.RunDry {
		verb = "would mark PAID"
	}
	fmt.Fprintf(w, "  %-12s %d\n", verb, len(out.Transitions))
	if n := len(out.Applied.Skipped); n > 0 {
		fmt.Fprintf(w, "  skipped      %d (changed by a worker since read; left as the worker set it)\n", n)
	}
	for _, s := range []reconcile.Severity{reconcile.Critical, reconcile.High, reconcile.Warning, reconcile.Info} {
		if bySev[s] == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", strings.ToUpper(string(s)))
		for _, f := range res.Findings {
			if f.Severity != s {
				continue
			}
			fmt.Fprintf(w, "  %-22s %s   %s at risk\n", f.Kind, alerts.Redact(subjectOf(f.ObligationID, f.ProviderIDs)), f.AtRisk)
			fmt.Fprintf(w, "      %s\n", alerts.Redact(f.Detail))
			trace := ""
			if f.ObligationID != "" {
				trace = "   trace: reconcile trace " + alerts.Redact(f.ObligationID)
			}
			fmt.Fprintf(w, "      fingerprint %s%s\n", f.Fingerprint, trace)
		}
	}
	if len(out.Transitions) > 0 {
		fmt.Fprintln(w, "\nTRANSITIONS")
		for _, t := range out.Transitions {
			fmt.Fprintf(w, "  %s   %s → %s   evidence %s\n", alerts.Redact(t.ObligationID), t.From, t.To, t.ProviderID)
		}
	}
}

// unmappedLine says how many obligations are in states the configuration
// does not map, by raw value quoted so that a stray blank shows:
// `4 in states obligations.states does not map, never transitioned: "CANCELLED" 3, "CONFIRMATION_UNKNOWN " 1`.
// Empty when there are none.
func unmappedLine(counts map[string]int) string {
	if len(counts) == 0 {
		return ""
	}
	total := 0
	var parts []string
	for _, raw := range slices.Sorted(maps.Keys(counts)) {
		total += counts[raw]
		parts = append(parts, fmt.Sprintf("%s %d", alerts.Redact(fmt.Sprintf("%q", raw)), counts[raw]))
	}
	return fmt.Sprintf("%d in states obligations.states does not map, never transitioned: %s", total, strings.Join(parts, ", "))
}

// atRiskLine sums money at risk per currency: "USD 99.00, EUR 9.00".
func atRiskLine(fs []reconcile.Finding) string {
	ms := make([]reconcile.Money, len(fs))
	for i, f := range fs {
		ms[i] = f.AtRisk
	}
	var parts []string
	for _, m := range reconcile.SumByCurrency(ms) {
		parts = append(parts, m.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
