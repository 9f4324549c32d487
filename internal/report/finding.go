// Package report holds the shapes in which conclusions leave the
// reconciler: the run report of `reconcile run` (JSON and text), the one
// JSON shape of a finding that the run report, `reconcile findings` and a
// trace share, and the findings listings (CSV and text). The command
// prints them; a web page can serve the same values.
//
// The JSON shapes are contracts that other tools parse: no field is
// renamed or removed, and a field added later is omitted when empty, so
// that an output without it reads as before.
package report

import (
	"time"

	"reconcile"
	"reconcile/internal/redact"
	"reconcile/internal/store"
)

// Finding is a finding's one JSON shape: what a pass concluded, and for a
// finding the store keeps, its history across runs.
//
// The run report has printed a pass's finding with Kind, Severity,
// ObligationID, ProviderIDs, Amount, Currency, Fingerprint and Detail
// (README.md's "The JSON report", in that order), and `findings --format json` a stored
// finding with every field; tools parse both. So the fields only a stored
// finding has are omitted when empty: Status and the first and last seen
// are never empty in the store, and AtRisk is a pointer so that a stored
// finding with nothing at risk still prints its zero.
type Finding struct {
	Kind     string `json:"kind"`
	Severity string `json:"severity"`
	// Status is open or resolved; stored findings only.
	Status       string   `json:"status,omitempty"`
	ObligationID string   `json:"obligation_id"`
	ProviderIDs  []string `json:"provider_ids"`
	Amount       int64    `json:"amount"`
	Currency     string   `json:"currency"`
	// AtRisk is nil for a pass's finding, whose report never printed it.
	*AtRisk
	Fingerprint string `json:"fingerprint"`
	// Detail is redact.Text, as it quotes outside text; the ids above are
	// exact, for tools to join on (docs/design.md, "Untrusted text").
	Detail string `json:"detail"`
	// Target is the charge or payment intent the finding's money concerns
	// beyond its obligation; omitted when none.
	Target string `json:"target,omitempty"`
	// Account is the Stripe connected account (acct_…) of the finding's
	// obligation and objects, and AccountName its display name (outside
	// text: redact.Text); both omitted for the platform's own account
	// (docs/design.md, "Accounts").
	Account     string `json:"account,omitempty"`
	AccountName string `json:"account_name,omitempty"`
	// The history of a stored finding, in RFC 3339 UTC.
	FirstSeenRun   string `json:"first_seen_run,omitempty"`
	FirstSeenAt    string `json:"first_seen_at,omitempty"`
	LastSeenRun    string `json:"last_seen_run,omitempty"`
	LastSeenAt     string `json:"last_seen_at,omitempty"`
	ResolvedAt     string `json:"resolved_at,omitempty"`
	AcknowledgedAt string `json:"acknowledged_at,omitempty"`
	// Who acknowledged and why are a person's words: redact.Text.
	AcknowledgedBy string `json:"acknowledged_by,omitempty"`
	AckReason      string `json:"ack_reason,omitempty"`
}

// AtRisk is the money a stored finding says may have moved wrongly or not
// at all, in minor units.
type AtRisk struct {
	Amount   int64  `json:"at_risk_amount"`
	Currency string `json:"at_risk_currency"`
}

// FromFinding is the shape of a finding a pass concluded, as the run
// report and a trace's findings_now print it.
func FromFinding(f reconcile.Finding) Finding {
	return Finding{
		Kind: string(f.Kind), Severity: string(f.Severity), ObligationID: f.ObligationID,
		ProviderIDs: nonNil(f.ProviderIDs), Amount: f.Money.Amount, Currency: f.Money.Currency,
		Fingerprint: f.Fingerprint, Detail: redact.Text(f.Detail), Target: f.Target,
		Account: f.Account, AccountName: redact.Text(f.AccountName),
	}
}

// FromRecord is the shape of a stored finding, as `reconcile findings` and
// a trace's findings print it.
func FromRecord(r store.FindingRecord) Finding {
	f := FromFinding(r.Finding)
	f.Status = string(r.Status)
	f.AtRisk = &AtRisk{Amount: r.AtRisk.Amount, Currency: r.AtRisk.Currency}
	f.FirstSeenRun, f.FirstSeenAt = r.FirstSeenRun, stampOrEmpty(r.FirstSeenAt)
	f.LastSeenRun, f.LastSeenAt = r.LastSeenRun, stampOrEmpty(r.LastSeenAt)
	f.ResolvedAt, f.AcknowledgedAt = stampOrEmpty(r.ResolvedAt), stampOrEmpty(r.AcknowledgedAt)
	f.AcknowledgedBy, f.AckReason = redact.Text(r.AcknowledgedBy), redact.Text(r.AckReason)
	return f
}

// FromRecords is FromRecord of each, never nil: an empty list prints as
// [], not null.
func FromRecords(rs []store.FindingRecord) []Finding {
	out := make([]Finding, 0, len(rs))
	for _, r := range rs {
		out = append(out, FromRecord(r))
	}
	return out
}

// nonNil keeps an empty list of ids a JSON [], not null.
func nonNil(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func stampOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return stamp(t)
}
