package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"reconcile"
)

// The bot's messages are kept as posted, found by channel and ts and by
// the fingerprints they announce; recording one again keeps the first.
func TestSlackMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	now := t0()
	m := reconcile.SlackMessage{Channel: "C1", TS: "1.000001", Kind: "cause", RunID: "run-1",
		Fingerprints: []string{"fp-a", "fp-b"}, Blocks: []byte(`[{"type":"section"}]`), Text: "two findings", PostedAt: now}
	if err := e.s.RecordMessage(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	again := m
	again.Text = "another"
	if err := e.s.RecordMessage(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RecordMessage(t.Context(), reconcile.SlackMessage{Channel: "C1", TS: "1.000002", Kind: "summary", RunID: "run-1",
		Text: "summary", PostedAt: now}); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.SlackMessage(t.Context(), "C1", "1.000001")
	if err != nil || got.Text != "two findings" || !slices.Equal(got.Fingerprints, m.Fingerprints) || string(got.Blocks) != `[{"type": "section"}]` ||
		!got.PostedAt.Equal(now) {
		t.Errorf("SlackMessage = %+v, %v; want the first record", got, err)
	}
	if _, err := e.s.SlackMessage(t.Context(), "C2", "1.000001"); !errors.Is(err, ErrNotFound) {
		t.Errorf("SlackMessage of another channel = %v, want ErrNotFound", err)
	}
	of, err := e.s.SlackMessagesOf(t.Context(), "fp-b")
	if err != nil || len(of) != 1 || of[0].TS != "1.000001" {
		t.Errorf("SlackMessagesOf(fp-b) = %+v, %v", of, err)
	}
	if of, _ := e.s.SlackMessagesOf(t.Context(), "fp-c"); len(of) != 0 {
		t.Errorf("SlackMessagesOf(fp-c) = %+v, want none", of)
	}
}

// AckOpen acknowledges only what is open and not yet acknowledged, and
// says what it changed: a second call changes nothing, and an earlier
// acknowledgement's time, author and reason stand.
func TestAckOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	now := t0()
	fs := []reconcile.Finding{newFinding(reconcile.Orphan, "", "re_1", 1, "re_1"), newFinding(reconcile.Orphan, "", "re_2", 1, "re_2"),
		newFinding(reconcile.Orphan, "", "re_3", 1, "re_3")}
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf(fs, nil), now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Apply(t.Context(), testRun("run-2", now), resultOf(fs[:2], nil, "re_3"), now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Ack(t.Context(), fs[0].Fingerprint, "cli", "by hand", now); err != nil {
		t.Fatal(err)
	}
	all := []string{fs[0].Fingerprint, fs[1].Fingerprint, fs[2].Fingerprint, "unknown"}
	later := now.Add(time.Minute)
	got, err := e.s.AckOpen(t.Context(), all, "Ana (Slack U1)", "refunded", later)
	if err != nil || len(got) != 1 || got[0].Fingerprint != fs[1].Fingerprint || got[0].AcknowledgedBy != "Ana (Slack U1)" ||
		!got[0].AcknowledgedAt.Equal(later) {
		t.Fatalf("AckOpen = %+v, %v; want only the open unacknowledged one", got, err)
	}
	if got, err := e.s.AckOpen(t.Context(), all, "Bo (Slack U2)", "again", later.Add(time.Minute)); err != nil || len(got) != 0 {
		t.Errorf("AckOpen again = %+v, %v; want nothing changed", got, err)
	}
	if f := e.finding(fs[0].Fingerprint); f.AcknowledgedBy != "cli" || f.AckReason != "by hand" || !f.AcknowledgedAt.Equal(now) {
		t.Errorf("the command's acknowledgement became %q %q %v", f.AcknowledgedBy, f.AckReason, f.AcknowledgedAt)
	}
	if f := e.finding(fs[2].Fingerprint); !f.AcknowledgedAt.IsZero() {
		t.Errorf("the resolved finding was acknowledged: %+v", f)
	}
	recs, err := e.s.FindingsOf(t.Context(), all)
	if err != nil || len(recs) != 3 {
		t.Errorf("FindingsOf = %d findings, %v; want the three stored", len(recs), err)
	}
}
