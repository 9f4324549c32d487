package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"reconcile/internal/redact"
	"reconcile/internal/store"
)

// WriteFindingsCSV writes stored findings for a spreadsheet: money in
// major units beside a currency column, and text cells that a spreadsheet
// would run as a formula defused. Its header is a contract, like the JSON.
// The id columns (fingerprint, obligation_id, provider_ids) hold the ids
// exact, for joining; the free text (acknowledged_by, ack_reason, detail)
// is redact.Text (docs/design.md, "Untrusted text"). Columns are only ever
// added at the end: account, the connected account's id (empty for the
// platform's own), came last.
func WriteFindingsCSV(w io.Writer, fs []store.FindingRecord) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"fingerprint", "severity", "kind", "status", "obligation_id", "provider_ids", "currency",
		"amount", "at_risk_currency", "at_risk", "first_seen_at", "last_seen_at", "resolved_at",
		"acknowledged_at", "acknowledged_by", "ack_reason", "detail", "account"})
	for _, f := range fs {
		cw.Write([]string{cell(f.Fingerprint), cell(string(f.Severity)), cell(string(f.Kind)), cell(string(f.Status)),
			cell(f.ObligationID), cell(strings.Join(f.ProviderIDs, " ")), cell(strings.ToUpper(f.Money.Currency)),
			f.Money.Decimal(), cell(strings.ToUpper(f.AtRisk.Currency)), f.AtRisk.Decimal(),
			stampOrEmpty(f.FirstSeenAt), stampOrEmpty(f.LastSeenAt), stampOrEmpty(f.ResolvedAt),
			stampOrEmpty(f.AcknowledgedAt), cell(redact.Text(f.AcknowledgedBy)), cell(redact.Text(f.AckReason)),
			cell(redact.Text(f.Detail)), cell(f.Account)})
	}
	cw.Flush()
	return cw.Error()
}

// cell defuses spreadsheet formulas (CSV injection): a text cell starting
// with = + - @, a tab or a carriage return gets a leading apostrophe. Every
// text column passes it; the amounts and times, which are numbers and
// stamps the reconciler writes, do not.
func cell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// WriteFindingsText writes stored findings as a table for people, one a
// line, or says there are none. Outside text is redact.Text, so that no
// value breaks its line or moves a column (docs/design.md, "Untrusted
// text"); the store's own words are on one line too.
func WriteFindingsText(w io.Writer, fs []store.FindingRecord) error {
	if len(fs) == 0 {
		_, err := fmt.Fprintln(w, "no findings")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEVERITY\tKIND\tSUBJECT\tAT RISK\tSTATUS\tFIRST SEEN\tLAST SEEN\tFINGERPRINT")
	for _, f := range fs {
		status := redact.Line(string(f.Status))
		if !f.AcknowledgedAt.IsZero() && f.Status == store.FindingOpen {
			status = "open, acknowledged"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", redact.Line(string(f.Severity)), redact.Line(string(f.Kind)),
			redact.Text(Subject(f.ObligationID, f.ProviderIDs)), redact.Text(f.AtRisk.String()), status,
			f.FirstSeenAt.UTC().Format(time.DateTime), f.LastSeenAt.UTC().Format(time.DateTime), redact.Line(f.Fingerprint))
	}
	return tw.Flush()
}
