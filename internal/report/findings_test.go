package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"reconcile/internal/store"
)

// The CSV is for spreadsheets: money in major units beside its currency,
// and no text cell that a spreadsheet would run as a formula.
func TestWriteFindingsCSV(t *testing.T) {
	fs := []store.FindingRecord{
		record(duplicate, func(r *store.FindingRecord) {
			r.AcknowledgedAt, r.AcknowledgedBy, r.AckReason = t0, "@finance", "=HYPERLINK(\"https://evil\")"
		}),
		record(orphan, func(r *store.FindingRecord) { r.Account = "acct_1Shop" }),
	}
	fs[1].Detail = "+1 refund by hand"
	var b bytes.Buffer
	if err := WriteFindingsCSV(&b, fs); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	wantHeader := []string{"fingerprint", "severity", "kind", "status", "obligation_id", "provider_ids", "currency",
		"amount", "at_risk_currency", "at_risk", "first_seen_at", "last_seen_at", "resolved_at",
		"acknowledged_at", "acknowledged_by", "ack_reason", "detail", "account"}
	if diff := cmp.Diff(wantHeader, rows[0]); diff != "" {
		t.Errorf("CSV header (-want +got):\n%s", diff)
	}
	col := func(row []string, name string) string {
		for i, h := range rows[0] {
			if h == name {
				return row[i]
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	for name, want := range map[string]string{"currency": "USD", "amount": "89.00", "at_risk": "89.00",
		"provider_ids": "re_4821a re_4821b", "acknowledged_by": "'@finance", "ack_reason": "'=HYPERLINK(\"https://evil\")",
		"acknowledged_at": "2026-11-30T02:00:00Z", "resolved_at": ""} {
		if got := col(rows[1], name); got != want {
			t.Errorf("CSV %s of the duplicate = %q, want %q", name, got, want)
		}
	}
	if a1, a2 := col(rows[1], "account"), col(rows[2], "account"); a1 != "" || a2 != "acct_1Shop" {
		t.Errorf("CSV accounts = %q, %q; want none for the platform's and acct_1Shop", a1, a2)
	}
	if got := col(rows[2], "detail"); got != "'+1 refund by hand" {
		t.Errorf("CSV detail of the orphan = %q, want the formula defused", got)
	}
	if d := col(rows[1], "detail"); strings.Contains(d, "4242424242424242") {
		t.Errorf("CSV detail = %q, want it redacted", d)
	}
}

func TestWriteFindingsText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFindingsText(&b, nil); err != nil || b.String() != "no findings\n" {
		t.Errorf("WriteFindingsText(none) = %q, %v; want \"no findings\"", b.String(), err)
	}
	b.Reset()
	acked := record(duplicate, func(r *store.FindingRecord) { r.AcknowledgedAt = t0 })
	if err := WriteFindingsText(&b, []store.FindingRecord{acked, record(orphan, nil)}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SEVERITY", "refund:4821:approved-request-7", "open, acknowledged", "USD 89.00",
		"re_5600x", "2026-11-28 02:00:00"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteFindingsText lacks %q:\n%s", want, b.String())
		}
	}
}

// Machine-readable outputs keep the ids exact, for tools to join on, even
// one that looks like a card number; the free text beside them is
// redact.Text. In the CSV, an id is exact but for the apostrophe that
// defuses a formula.
func TestIdsExactFreeTextMasked(t *testing.T) {
	f := duplicate
	f.ObligationID = "=charge:4242424242424242"
	f.ProviderIDs = []string{"pi_jane@example.com", "-re_1\u202e"}
	f.Detail = "paid with 4242 4242 4242 4242\nby jane@example.com"
	r := record(f, func(r *store.FindingRecord) {
		r.AcknowledgedAt, r.AcknowledgedBy, r.AckReason = t0, "jane@example.com", "+card 4242424242424242\n*done*"
	})

	var b bytes.Buffer
	if err := WriteFindingsCSV(&b, []store.FindingRecord{r}); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, h := range rows[0] {
		got[h] = rows[1][i]
	}
	for col, want := range map[string]string{
		"obligation_id":   "'=charge:4242424242424242",
		"provider_ids":    "pi_jane@example.com -re_1\u202e",
		"fingerprint":     f.Fingerprint,
		"acknowledged_by": "[email]",
		"ack_reason":      "'+card •••• 4242 *done*",
		"detail":          "paid with •••• 4242 by [email]",
	} {
		if got[col] != want {
			t.Errorf("CSV %s = %q, want %q", col, got[col], want)
		}
	}

	js, err := json.Marshal(FromRecord(r))
	if err != nil {
		t.Fatal(err)
	}
	var back Finding
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.ObligationID != f.ObligationID || !slices.Equal(back.ProviderIDs, f.ProviderIDs) || back.Fingerprint != f.Fingerprint {
		t.Errorf("JSON ids = %q %q %q, want them exact", back.ObligationID, back.ProviderIDs, back.Fingerprint)
	}
	if back.Detail != "paid with •••• 4242 by [email]" || back.AcknowledgedBy != "[email]" || back.AckReason != "+card •••• 4242 *done*" {
		t.Errorf("JSON free text = %q, %q, %q; want it masked, on one line", back.Detail, back.AcknowledgedBy, back.AckReason)
	}
}
