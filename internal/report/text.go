package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"reconcile"
	"reconcile/internal/redact"
	"reconcile/internal/runner"
)

// WriteText is the report of a completed pass for people: the summary
// first, then findings by severity, then what changed. Whatever came from
// outside (ids, details, currencies) is redact.Text on the way out:
// masked, and on one line without control or format characters
// (docs/design.md, "Untrusted text").
func WriteText(w io.Writer, out *runner.Outcome) {
	run, res := out.Run, out.Result
	title := "reconcile run " + redact.Line(run.ID)
	if run.Status == reconcile.RunDry {
		title += " (dry run: nothing written, nothing sent)"
	}
	fmt.Fprintln(w, title)
	fmt.Fprintf(w, "  window       %s → %s\n", stamp(run.Window.From), stamp(run.Window.To))
	fmt.Fprintf(w, "  read         %d obligations, %d provider objects, %d linked\n",
		run.Counts.Obligations, run.Counts.ProviderObjects, run.Counts.Linked)
	if out.Sync.Match == runner.MatchIncremental {
		fmt.Fprintf(w, "  matched      incrementally: %d obligations again (what changed since the last pass that matched, what is open, what is connected to those); the rest keep their stored conclusions\n",
			out.Sync.Rematched)
	}
	if c := out.Covered; c.Valid() {
		fmt.Fprintf(w, "  records      created %s → %s, key evidence from %s\n", stamp(c.From), stamp(c.To), stamp(out.EventsFrom))
		if out.Partial > 0 {
			fmt.Fprintf(w, "  not decided  %d obligations whose records were not all read (never marked PAID; their findings say what was not read)\n", out.Partial)
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
		by := reconcile.SplitAtRisk(res.Findings)
		if by.Empty() {
			fmt.Fprintln(w, "  at risk      none")
		}
		for _, m := range reconcile.Meanings {
			if ts := by.Of(m); len(ts) > 0 {
				fmt.Fprintf(w, "  at risk      %s: %s\n", m.Label(), totalsLine(ts))
			}
		}
	}
	if n, total := reconcile.Confirmed(out.Transitions); n > 0 {
		money := ""
		if len(total) > 0 {
			money = " (" + totalsLine(total) + ")"
		}
		what := "unknown outcome"
		if n > 1 {
			what += "s"
		}
		fmt.Fprintf(w, "  confirmed    %d %s confirmed from Stripe's records and marked PAID%s\n", n, what, money)
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
			fmt.Fprintf(w, "  %-22s %s   %s at risk\n", f.Kind, redact.Text(Subject(f.ObligationID, f.ProviderIDs)), redact.Text(f.AtRisk.String()))
			fmt.Fprintf(w, "      %s\n", redact.Text(f.Detail))
			trace := ""
			if f.ObligationID != "" {
				trace = "   trace: reconcile trace " + redact.Text(f.ObligationID)
			}
			fmt.Fprintf(w, "      fingerprint %s%s\n", redact.Line(f.Fingerprint), trace)
			if f.Account != "" {
				fmt.Fprintf(w, "      account %s\n", redact.Text(reconcile.Account{ID: f.Account, Name: f.AccountName}.Label()))
			}
		}
	}
	if len(out.Transitions) > 0 {
		fmt.Fprintln(w, "\nTRANSITIONS")
		for _, t := range out.Transitions {
			fmt.Fprintf(w, "  %s   %s → %s   evidence %s\n", redact.Text(t.ObligationID), t.From, t.To, redact.Text(t.ProviderID))
		}
	}
}

// Subject names what a finding is about for people: its obligation, or
// the provider objects of one that has none (an orphan). Not redacted:
// the caller redacts where it prints (redact.Text for people).
func Subject(obligationID string, providerIDs []string) string {
	if obligationID != "" {
		return obligationID
	}
	return strings.Join(providerIDs, ", ")
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
		// Masked, on one line, before quoting: quoted, a zero-width
		// character or a tab would show as \u200b or \t between the
		// groups of a card number the masking had passed by. A stray
		// blank still shows.
		parts = append(parts, fmt.Sprintf("%q %d", redact.Text(raw), counts[raw]))
	}
	return fmt.Sprintf("%d in states obligations.states does not map, never transitioned: %s", total, strings.Join(parts, ", "))
}

// totalsLine lists totals per currency: "USD 99.00, EUR 9.00".
func totalsLine(ts []reconcile.Total) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return redact.Text(strings.Join(parts, ", "))
}
