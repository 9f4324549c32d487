package alerts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"reconcile"
)

func TestSinkWritesWhatFinanceReads(t *testing.T) {
	outbox := &fakeOutbox{}
	outbox.add(smallRun(testRun)...)
	clock := newFakeClock()
	var out bytes.Buffer
	sink := NewSink(&out, false)
	st, err := sink.Drain(t.Context(), outbox, clock.Now)
	if err != nil {
		t.Fatalf("Sink.Drain: %v", err)
	}
	if st.Messages != 4 || st.Sent != 6 {
		t.Errorf("Sink.Drain stats = %+v, want 4 messages carrying 6 rows", st)
	}
	outbox.checkSentOnce(t)
	for _, r := range outbox.rows {
		if r.channel != SinkChannel || r.ts == "" {
			t.Errorf("row %d recorded in %q at %q, want %s with a ts", r.alert.ID, r.channel, r.ts, SinkChannel)
		}
	}
	got := out.String()
	for _, want := range []string{"refund:4821:approved-request-7", "re_4821a", "USD 89.00", "KWD 1.000", "JPY 12,000",
		"https://dashboard.stripe.com/test/refunds/re_4821a", "reconcile trace OBLIGATION_ID"} {
		if !strings.Contains(got, want) {
			t.Errorf("sink output lacks %q", want)
		}
	}
	for _, markup := range []string{"&lt;", "&amp;", "*Obligation*", "|dashboard>"} {
		if strings.Contains(got, markup) {
			t.Errorf("sink output shows Slack markup %q", markup)
		}
	}

	path := filepath.Join("testdata", "sink.golden.txt")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}

	// Nothing due, nothing written.
	out.Reset()
	if _, err := sink.Drain(t.Context(), outbox, clock.Now); err != nil || out.Len() > 0 {
		t.Errorf("second Sink.Drain wrote %q, err %v; want nothing", out.String(), err)
	}
}

func TestSinkRepliesIndentedUnderTheirThread(t *testing.T) {
	outbox := &fakeOutbox{}
	outbox.add(sampleSummary(0), firing(0, sampleFindings()[reconcile.Orphan]))
	var out bytes.Buffer
	if _, err := NewSink(&out, true).Drain(t.Context(), outbox, newFakeClock().Now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "    ↳ ") || !strings.Contains(out.String(), "https://dashboard.stripe.com/refunds/re_5600x") {
		t.Errorf("sink output lacks an indented reply with a live link:\n%s", out.String())
	}
}
