package alerts

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"reconcile"
)

// buttonRows is a run with something of every message kind that a button
// may or may not go on: the summary, three criticals (own messages), two
// orphans on one charge (a cause), lone high and warning findings (the
// digest), a repeat in its thread and a resolution in another.
func buttonRows() []reconcile.Alert {
	fs := sampleFindings()
	rows := []reconcile.Alert{sampleSummary(1)}
	for i, k := range []reconcile.FindingKind{reconcile.Duplicate, reconcile.PaidWithoutEvidence, reconcile.StatusMismatch,
		reconcile.AmountMismatch, reconcile.StaleLease} {
		rows = append(rows, firing(int64(i+2), fs[k]))
	}
	for i := range 2 {
		id := fmt.Sprintf("re_cause%d", i)
		rows = append(rows, firing(int64(10+i), reconcile.Finding{Kind: reconcile.Orphan, Severity: reconcile.High,
			ProviderIDs: []string{id}, Money: usd(1000), AtRisk: usd(1000), Target: "ch_3PcauSe",
			Fingerprint: reconcile.Fingerprint(reconcile.Orphan, "", id)}))
	}
	rows = append(rows,
		reconcile.Alert{ID: 20, RunID: testRun, Event: reconcile.AlertRepeat, Finding: fs[reconcile.ConflictingLink], ThreadTS: "1700000000.000009"},
		reconcile.Alert{ID: 21, RunID: testRun, Event: reconcile.AlertResolved, Finding: fs[reconcile.UnresolvedUnknown], ThreadTS: "1700000000.000008"})
	return rows
}

func hasActions(m Message) bool {
	return slices.ContainsFunc(m.Blocks, func(b slack.Block) bool {
		a, ok := b.(*slack.ActionBlock)
		return ok && a.BlockID == AckBlockID && len(a.Elements.ElementSet) == 1 &&
			a.Elements.ElementSet[0].(*slack.ButtonBlockElement).ActionID == AckActionID
	})
}

// With Slack's buttons on, every message announcing open findings (a
// critical's own, a cause's, a digest or repeat) has one Acknowledge
// button; a summary, a resolutions-only group and an overflow have none.
func TestPlanGoldenButtons(t *testing.T) {
	rows := buttonRows()
	msgs := Plan(rows, testNow, PlanOptions{Buttons: true})
	checkCarriedOnce(t, rows, msgs)
	goldenPlan(t, "buttons", msgs)
	for i, m := range msgs {
		resolvedOnly := !slices.ContainsFunc(rows, func(r reconcile.Alert) bool {
			return slices.Contains(m.AlertIDs, r.ID) && r.Event != reconcile.AlertResolved
		})
		want := m.Kind != KindSummary && m.Kind != KindOverflow && !resolvedOnly
		if got := hasActions(m); got != want {
			t.Errorf("message %d (%s, rows %v) has the button %t, want %t", i, m.Kind, m.AlertIDs, got, want)
		}
		if want != (len(m.Fingerprints) > 0) {
			t.Errorf("message %d (%s) carries fingerprints %v", i, m.Kind, m.Fingerprints)
		}
		if v := violations(m.Text, m.Blocks); len(v) > 0 {
			t.Errorf("message %d breaks Slack's limits: %v", i, v)
		}
	}
	if got := kinds(msgs); !slices.Equal(got, []MessageKind{KindSummary, KindFinding, KindFinding, KindFinding, KindCause, KindGroup, KindGroup, KindGroup}) {
		t.Errorf("kinds = %v", got)
	}

	// An overflow counts what did not fit: no button, as it lists nothing.
	over := Plan(flood(40), testNow, PlanOptions{Buttons: true, MaxMessages: 3})
	for i, m := range over {
		if (m.Kind == KindOverflow || m.Kind == KindSummary) && hasActions(m) {
			t.Errorf("overflow plan message %d (%s) has the button", i, m.Kind)
		}
	}
	if !slices.Contains(kinds(over), KindOverflow) && !slices.ContainsFunc(over, func(m Message) bool { return strings.Contains(m.Text, "more alerts") }) {
		t.Errorf("flood(40) with 3 messages planned no overflow: %v", kinds(over))
	}

	// The default: no button, no link; the goldens of every other test
	// pin the same.
	for i, m := range Plan(rows, testNow, PlanOptions{}) {
		if hasActions(m) || strings.Contains(rawBlocks(t, m), "findings page") {
			t.Errorf("default message %d (%s) has a button or a link", i, m.Kind)
		}
	}
}

// Without buttons but with serve.public_url, a critical links to its
// finding's page and a cause to the page narrowed to its kind and charge,
// escaped; a digest to the page.
func TestPlanGoldenLinks(t *testing.T) {
	rows := buttonRows()
	msgs := Plan(rows, testNow, PlanOptions{PublicURL: "https://reconcile.example.com/"})
	goldenPlan(t, "links", msgs)
	dup := sampleFindings()[reconcile.Duplicate]
	want := map[int]string{
		1: "<https://reconcile.example.com/findings/" + dup.Fingerprint + "|the findings page>",
		4: "<https://reconcile.example.com/?kind=orphan&amp;q=ch_3PcauSe|the findings page>",
		5: "<https://reconcile.example.com/|the findings page>",
	}
	for i, m := range msgs {
		if hasActions(m) {
			t.Errorf("message %d has a button without a signing secret", i)
		}
		if w, ok := want[i]; ok && !strings.Contains(rawBlocks(t, m), w) {
			t.Errorf("message %d (%s) lacks the link %s:\n%s", i, m.Kind, w, rawBlocks(t, m))
		}
		if m.Kind == KindSummary && strings.Contains(rawBlocks(t, m), "findings page") {
			t.Errorf("the summary links to the page")
		}
	}
}

// An acknowledged message loses its button and says who acknowledged,
// when and why, escaped and masked; the button stays while some of its
// findings are not acknowledged; an earlier line is replaced, not added to.
func TestAcknowledged(t *testing.T) {
	m := Plan([]reconcile.Alert{firing(2, sampleFindings()[reconcile.Duplicate])}, testNow, PlanOptions{Buttons: true})[0]
	at := time.Date(2026, 11, 30, 7, 5, 0, 0, time.UTC)
	acks := []Ack{{By: "<!channel> *bold* (Slack U1)", Reason: "<https://evil|x> refunded to 4242424242424242\nsecond line", At: at},
		{By: "<!channel> *bold* (Slack U1)", Reason: "<https://evil|x> refunded to 4242424242424242\nsecond line", At: at}}
	blocks, text := Acknowledged(m.Blocks, m.Text, acks, false)
	got := Message{Blocks: blocks, Text: text}
	flat := rawBlocks(t, got)
	if hasActions(got) {
		t.Error("the acknowledged message keeps its button")
	}
	for _, bad := range []string{"<!channel>", "*bold*", "<https://evil", "4242424242424242", "\\nsecond"} {
		if strings.Contains(flat, bad) || strings.Contains(text, bad) {
			t.Errorf("the acknowledgement shows %q raw:\n%s\n%s", bad, flat, text)
		}
	}
	for _, want := range []string{"Acknowledged by &lt;!channel&gt; ＊bold＊ (Slack U1) at 2026-11-30 07:05 UTC: &lt;https://evil|x&gt; refunded to •••• 4242 second line"} {
		if !strings.Contains(flat, want) || !strings.Contains(text, want) {
			t.Errorf("the acknowledgement lacks %q:\n%s\n%s", want, flat, text)
		}
	}
	if n := strings.Count(flat, "Acknowledged by"); n != 1 {
		t.Errorf("one acknowledgement given twice is shown %d times", n)
	}
	again, _ := Acknowledged(blocks, text, []Ack{{By: "Bo", Reason: "later", At: at}}, true)
	if f := rawBlocks(t, Message{Blocks: again}); strings.Contains(f, "bold") || !strings.Contains(f, "Acknowledged by Bo") ||
		!hasActions(Message{Blocks: again}) {
		t.Errorf("a second edit with findings still open:\n%s", f)
	}
	if v := violations(text, blocks); len(v) > 0 {
		t.Errorf("the edited message breaks Slack's limits: %v", v)
	}
}

// rawBlocks is a message's blocks as JSON without HTML escaping, so that
// what Slack is sent ("&lt;" for "<") reads as sent.
func rawBlocks(t *testing.T, m Message) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m.Blocks); err != nil {
		t.Fatal(err)
	}
	// slack-go marshals some blocks on its own, with HTML escaping.
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(b.String())
}

// A drain records every message the bot posted and Slack accepted, as
// posted, under its own ts, with the findings it announces; a webhook's
// messages, which no button can come back to, are not recorded.
func TestDrainRecordsBotMessages(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(buttonRows()...)
	d := h.deliverer(t, func(o *SlackOptions) { o.Buttons = true })
	if _, err := h.drain(t, d); err != nil {
		t.Fatal(err)
	}
	posted := h.slack.Messages()
	if len(posted) == 0 || len(h.outbox.recorded) != len(posted) {
		t.Fatalf("recorded %d messages of %d posted", len(h.outbox.recorded), len(posted))
	}
	if v := h.slack.Violations(); len(v) > 0 {
		t.Errorf("violations: %v", v)
	}
	if len(h.outbox.unfenced) > 0 {
		t.Errorf("recorded outside the fence: %v", h.outbox.unfenced)
	}
	buttons := 0
	for i, rec := range h.outbox.recorded {
		p := posted[i]
		if rec.Channel != p.Channel || rec.TS != p.TS || rec.Text != p.Text || !rec.PostedAt.Equal(p.At) {
			t.Errorf("record %d = %s/%s %q, posted %s/%s %q", i, rec.Channel, rec.TS, rec.Text, p.Channel, p.TS, p.Text)
		}
		var a, b any
		json.Unmarshal(rec.Blocks, &a)
		json.Unmarshal(p.Blocks, &b)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("record %d blocks differ from what Slack got:\n%s\n%s", i, rec.Blocks, p.Blocks)
		}
		if strings.Contains(string(p.Blocks), `"action_id":"reconcile_ack"`) {
			buttons++
			if len(rec.Fingerprints) == 0 {
				t.Errorf("message %d has a button and no fingerprints", i)
			}
		}
		if rec.Kind == string(KindSummary) && len(rec.Fingerprints) > 0 {
			t.Errorf("the summary was recorded with fingerprints %v", rec.Fingerprints)
		}
	}
	if buttons != 6 {
		t.Errorf("%d messages have the button, want 6 (3 criticals, a cause, the digest, the repeat)", buttons)
	}

	w := newHarness(t)
	w.outbox.add(buttonRows()...)
	if _, err := w.drain(t, w.deliverer(t, func(o *SlackOptions) { webhook(w)(o); o.Buttons = true })); err != nil {
		t.Fatal(err)
	}
	if len(w.outbox.recorded) != 0 || len(w.slack.Messages()) == 0 || strings.Contains(w.slack.Messages()[0].Flat+string(w.slack.Messages()[1].Blocks), "reconcile_ack") {
		t.Errorf("a webhook's drain recorded %d messages, or posted a button", len(w.outbox.recorded))
	}
}
