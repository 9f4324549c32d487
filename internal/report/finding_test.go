package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/redact"
	"reconcile/internal/runner"
	"reconcile/internal/store"
)

// The shapes a finding had before it had one type, copied from
// cmd/reconcile as they were (report.go's reportFinding, cmd_store.go's
// findingJSON), with the conversions that filled them: the before of the
// tests below.
type legacyReportFinding struct {
	Kind         string   `json:"kind"`
	Severity     string   `json:"severity"`
	ObligationID string   `json:"obligation_id"`
	ProviderIDs  []string `json:"provider_ids"`
	Amount       int64    `json:"amount"`
	Currency     string   `json:"currency"`
	Fingerprint  string   `json:"fingerprint"`
	Detail       string   `json:"detail"`
}

func legacyFromFinding(f reconcile.Finding) legacyReportFinding {
	ids := f.ProviderIDs
	if ids == nil {
		ids = []string{}
	}
	return legacyReportFinding{
		Kind: string(f.Kind), Severity: string(f.Severity), ObligationID: f.ObligationID,
		ProviderIDs: ids, Amount: f.Money.Amount, Currency: f.Money.Currency,
		Fingerprint: f.Fingerprint, Detail: redact.String(f.Detail),
	}
}

type legacyFindingJSON struct {
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

func legacyFindingsJSON(fs []store.FindingRecord) []legacyFindingJSON {
	out := make([]legacyFindingJSON, 0, len(fs))
	for _, f := range fs {
		ids := f.ProviderIDs
		if ids == nil {
			ids = []string{}
		}
		out = append(out, legacyFindingJSON{
			Fingerprint: f.Fingerprint, Kind: string(f.Kind), Severity: string(f.Severity), Status: string(f.Status),
			ObligationID: f.ObligationID, ProviderIDs: ids, Amount: f.Money.Amount, Currency: f.Money.Currency,
			AtRiskAmount: f.AtRisk.Amount, AtRiskCurrency: f.AtRisk.Currency, Detail: redact.String(f.Detail),
			FirstSeenRun: f.FirstSeenRun, FirstSeenAt: stampOrEmpty(f.FirstSeenAt), LastSeenRun: f.LastSeenRun,
			LastSeenAt: stampOrEmpty(f.LastSeenAt), ResolvedAt: stampOrEmpty(f.ResolvedAt),
			AcknowledgedAt: stampOrEmpty(f.AcknowledgedAt), AcknowledgedBy: f.AcknowledgedBy, AckReason: f.AckReason,
		})
	}
	return out
}

var (
	t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

	duplicate = reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical,
		ObligationID: "refund:4821:approved-request-7", ProviderIDs: []string{"re_4821a", "re_4821b"},
		Money: reconcile.Money{Amount: 8900, Currency: "usd"}, AtRisk: reconcile.Money{Amount: 8900, Currency: "usd"},
		Fingerprint: "c83330dc6b3c018abc15", ContentHash: "h1",
		// Provider metadata quoted in a detail: a card number and a key.
		Detail: "paid out twice (note: card 4242424242424242, key sk_test_abcdefghijklmnopqrstu)"}
	orphan = reconcile.Finding{Kind: reconcile.Orphan, Severity: reconcile.High, ProviderIDs: []string{"re_5600x"},
		Money: reconcile.Money{Amount: 1000, Currency: "usd"}, AtRisk: reconcile.Money{Amount: 1000, Currency: "usd"},
		Fingerprint: "c2ec4365da8055b591a0", Detail: "belongs to no obligation"}
	// Nothing at risk, no provider ids at all (nil, not empty), and no
	// currency at risk: the zero values that omitempty would drop.
	nothingAtRisk = reconcile.Finding{Kind: reconcile.StatusMismatch, Severity: reconcile.Critical,
		ObligationID: "charge:5800", Money: reconcile.Money{Amount: 100, Currency: "jpy"},
		Fingerprint: "0123456789abcdef0123", Detail: "PAID but the charge failed"}
)

func record(f reconcile.Finding, change func(*store.FindingRecord)) store.FindingRecord {
	r := store.FindingRecord{Finding: f, Status: store.FindingOpen,
		FirstSeenRun: "run_20261128T020000Z_aaaaaaaa", FirstSeenAt: t0.Add(-48 * time.Hour),
		LastSeenRun: "run_20261130T020000Z_bbbbbbbb", LastSeenAt: t0, LastAlertedAt: t0}
	if change != nil {
		change(&r)
	}
	return r
}

// A pass's finding prints exactly as the run report printed it: the same
// bytes, so the same keys in the same order (the README's), with the
// detail redacted.
func TestFromFindingPrintsTheRunReportsShape(t *testing.T) {
	for name, f := range map[string]reconcile.Finding{"duplicate": duplicate, "orphan": orphan, "nothing at risk": nothingAtRisk} {
		want, err := json.Marshal(legacyFromFinding(f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(FromFinding(f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("FromFinding(%s) = %s\nwant %s", name, got, want)
		}
	}
	if d := FromFinding(duplicate).Detail; strings.Contains(d, "4242424242424242") || strings.Contains(d, "sk_test_") {
		t.Errorf("FromFinding(duplicate).Detail = %q, want it redacted", d)
	}
}

// A stored finding prints every key and value that `findings --format
// json` printed, and no other: acknowledged, resolved, open, and with
// nothing at risk, whose zero at_risk_amount and empty at_risk_currency
// are still printed. Only the position of fingerprint changed, which JSON
// objects do not order.
func TestFromRecordPrintsTheFindingsShape(t *testing.T) {
	records := []store.FindingRecord{
		record(duplicate, nil),
		record(duplicate, func(r *store.FindingRecord) {
			r.AcknowledgedAt, r.AcknowledgedBy, r.AckReason = t0.Add(time.Hour), "finance@example", "=customer returns it"
		}),
		record(orphan, func(r *store.FindingRecord) {
			r.Status, r.ResolvedRun, r.ResolvedAt = store.FindingResolved, "run_20261201T020000Z_cccccccc", t0.Add(24*time.Hour)
		}),
		record(nothingAtRisk, nil),
	}
	for i, r := range records {
		var want, got map[string]any
		decode(t, legacyFindingsJSON([]store.FindingRecord{r})[0], &want)
		decode(t, FromRecord(r), &got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("FromRecord(records[%d]) differs from what findings printed (-want +got):\n%s", i, diff)
		}
	}
	var want, got []map[string]any
	decode(t, legacyFindingsJSON(records), &want)
	decode(t, FromRecords(records), &got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FromRecords differs from what findings printed (-want +got):\n%s", diff)
	}
}

// No findings print as [], never null, in a listing and in a report.
func TestEmptyListsPrintAsArrays(t *testing.T) {
	if b, _ := json.Marshal(FromRecords(nil)); string(b) != "[]" {
		t.Errorf("FromRecords(nil) = %s, want []", b)
	}
	b, err := json.Marshal(New(&runner.Outcome{}))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"findings", "transitions"} {
		if string(m[k]) != "[]" {
			t.Errorf("New(empty pass).%s = %s, want []", k, m[k])
		}
	}
	for _, k := range []string{"coverage", "unmapped_states"} {
		if _, ok := m[k]; ok {
			t.Errorf("New(empty pass) prints %s, want it omitted when empty", k)
		}
	}
}

// A stored finding decodes back into a Finding with its money at risk,
// as a tool written in Go would read `findings --format json`.
func TestFindingRoundTrips(t *testing.T) {
	in := FromRecord(record(nothingAtRisk, nil))
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Finding
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("Finding after a round trip through JSON (-want +got):\n%s", diff)
	}
}

func decode(t *testing.T, v, into any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}
