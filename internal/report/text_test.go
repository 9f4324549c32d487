package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/runner"
	"reconcile/internal/store"
)

// hostile is an id that tries to forge a line of its own, turn text
// around and hide a card number from the masking.
const hostile = "charge:1\nCRITICAL  forged\u202e\u2066x\u2069\u200b\u2028\tcard 4242\u200b4242 4242 4242"

// noControls fails t if out holds a control character other than the
// newlines between lines, a format character or a line separator.
func noControls(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029') {
			t.Errorf("%s holds %U:\n%s", what, r, out)
			return
		}
	}
	if strings.Contains(out, "\nCRITICAL  forged") || strings.Contains(out, "4242424242424242") || strings.Contains(out, "4242 4242") {
		t.Errorf("%s shows what an id forged or hid:\n%s", what, out)
	}
}

// The run's text report shows outside text on one line, masked, without
// control or format characters: an id cannot start a line of its own.
func TestWriteTextNeutralisesOutsideText(t *testing.T) {
	f := reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical, ObligationID: hostile,
		ProviderIDs: []string{"re_1\n" + hostile}, Money: reconcile.Money{Amount: 100, Currency: "usd\u202e"},
		AtRisk: reconcile.Money{Amount: 100, Currency: "usd\u202e"}, Fingerprint: "0123", Detail: "detail\n" + hostile}
	out := &runner.Outcome{
		Run:         reconcile.Run{ID: "run_1", Status: reconcile.RunCompleted},
		Result:      matcher.Result{Conclusions: reconcile.Conclusions{Findings: []reconcile.Finding{f}}},
		Transitions: []reconcile.Transition{{ObligationID: hostile, From: reconcile.ConfirmationUnknown, To: reconcile.Paid, ProviderID: "ch_1\n" + hostile}},
		Unmapped:    map[string]int{hostile: 1, "4242\t4242\t4242\t4242": 1, "CONFIRMATION_UNKNOWN ": 1},
	}
	var b bytes.Buffer
	WriteText(&b, out)
	noControls(t, "WriteText", b.String())
	// Quoted, a tab would show as \t between a card number's groups.
	if strings.Contains(b.String(), `4242\t4242`) || !strings.Contains(b.String(), `"CONFIRMATION_UNKNOWN " 1`) {
		t.Errorf("WriteText's unmapped states show a card number or lose a stray blank:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "charge:1 CRITICAL  forgedx") {
		t.Errorf("WriteText lost the id's text:\n%s", b.String())
	}
}

// The findings table keeps one finding a line and its columns in place.
func TestWriteFindingsTextNeutralisesOutsideText(t *testing.T) {
	f := duplicate
	f.ObligationID, f.AtRisk.Currency = hostile, "usd\t\u202e"
	var b bytes.Buffer
	if err := WriteFindingsText(&b, []store.FindingRecord{record(f, nil), record(orphan, nil)}); err != nil {
		t.Fatal(err)
	}
	noControls(t, "WriteFindingsText", b.String())
	if n := strings.Count(b.String(), "\n"); n != 3 {
		t.Errorf("WriteFindingsText wrote %d lines, want a header and one a finding:\n%s", n, b.String())
	}
}

// The text report of a pass that matched incrementally says so, and how
// much it matched again; one that matched whole says nothing of it.
func TestWriteTextSaysHowThePassMatched(t *testing.T) {
	for _, tt := range []struct {
		sync runner.SyncReport
		want string
	}{
		{runner.SyncReport{Mode: runner.SyncIncremental, Match: runner.MatchIncremental, Rematched: 7},
			"matched      incrementally: 7 obligations again"},
		{runner.SyncReport{Mode: runner.SyncIncremental, Match: runner.MatchFull, MatchReason: "--full"}, ""},
	} {
		var b bytes.Buffer
		WriteText(&b, &runner.Outcome{Run: reconcile.Run{ID: "run_1", Status: reconcile.RunCompleted}, Sync: tt.sync})
		if got := strings.Contains(b.String(), "matched      incrementally"); got != (tt.want != "") || !strings.Contains(b.String(), tt.want) {
			t.Errorf("%s match: want %q in\n%s", tt.sync.Match, tt.want, b.String())
		}
	}
}

// The records line says what was read; the count of obligations decided
// on without all their records follows it, whatever was not read (an
// earlier stretch, key evidence, a retrieval that failed).
func TestWriteTextCountsTheObligationsNotAllRead(t *testing.T) {
	for _, partial := range []int{0, 3} {
		out := &runner.Outcome{Run: reconcile.Run{ID: "run_1", Status: reconcile.RunCompleted}, Partial: partial,
			Covered: reconcile.Window{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}}
		var b bytes.Buffer
		WriteText(&b, out)
		want := "  not decided  3 obligations whose records were not all read (never marked PAID; their findings say what was not read)\n"
		if got := strings.Contains(b.String(), "not decided"); got != (partial > 0) || partial > 0 && !strings.Contains(b.String(), want) {
			t.Errorf("%d partial: want the line %q only when some are, in\n%s", partial, want, b.String())
		}
	}
}
