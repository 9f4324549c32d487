package alerts

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"reconcile/internal/config"
	"reconcile/internal/slacktest"

	"reconcile"
)

const testToken = "xoxb-test-SECRET-0042"

// harness is a deliverer's world: Slack (slacktest, its messages stamped
// by the fake clock), the clock, an in-memory outbox and the logs.
type harness struct {
	slack    *slacktest.Server
	slackURL string
	clock    *fakeClock
	outbox   *fakeOutbox
	logs     *bytes.Buffer
}

func newHarness(tb testing.TB) *harness {
	tb.Helper()
	clock := newFakeClock()
	slack := slacktest.New(testToken)
	slack.Now = clock.Now
	base, stop, err := slack.Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return &harness{slack: slack, slackURL: base, clock: clock, outbox: &fakeOutbox{}, logs: &bytes.Buffer{}}
}

// script has Slack answer the next posts so, one each (slacktest.Faults).
func (h *harness) script(answers ...string) {
	h.slack.SetFaults(slacktest.Faults{Script: answers})
}

// deliverer is a bot-token deliverer on the fake Slack; mod adjusts its
// options.
func (h *harness) deliverer(tb testing.TB, mod func(*SlackOptions)) *Deliverer {
	tb.Helper()
	opts := testOptions()
	opts.BotToken, opts.Channel, opts.APIURL = testToken, "C0FINANCE", h.slackURL+"/api/"
	opts.MaxRetries, opts.Timeout, opts.Sleep = 3, 5*time.Second, h.clock.Sleep
	opts.Logger = slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if mod != nil {
		mod(&opts)
	}
	d, err := NewSlack(opts)
	if err != nil {
		tb.Fatalf("NewSlack: %v", err)
	}
	return d
}

func (h *harness) drain(tb testing.TB, d *Deliverer) (DrainStats, error) {
	tb.Helper()
	return d.Drain(tb.Context(), h.outbox, h.clock.Now)
}

func webhook(h *harness) func(*SlackOptions) {
	return func(o *SlackOptions) {
		o.BotToken, o.Channel, o.WebhookURL = "", "", h.slackURL+"/services/T0ACC/B0ACC/"+testToken
	}
}

// smallRun is a run's outbox rows: a summary, two criticals, three others.
func smallRun(runID string) []reconcile.Alert {
	fs := sampleFindings()
	s := sampleSummary(0)
	s.RunID, s.Summary.RunID = runID, runID
	rows := []reconcile.Alert{s}
	for _, k := range []reconcile.FindingKind{reconcile.Duplicate, reconcile.StatusMismatch, reconcile.Orphan, reconcile.AmountMismatch, reconcile.StaleLease} {
		rows = append(rows, reconcile.Alert{RunID: runID, Event: reconcile.AlertFiring, Finding: fs[k]})
	}
	return rows
}

func TestDrainRateLimitedThenSentOnce(t *testing.T) {
	h := newHarness(t)
	ids := h.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]))
	h.script("429", "ok")
	st, err := h.drain(t, h.deliverer(t, nil))
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	posts, requests := h.slack.Messages(), h.slack.Requests()
	if len(posts) != 1 || requests != 2 {
		t.Fatalf("Drain posted %d messages in %d requests, want 1 in 2", len(posts), requests)
	}
	if st.Messages != 1 || st.Sent != 1 || st.RateLimited != 1 || st.Retries != 1 {
		t.Errorf("Drain stats = %+v, want 1 message, 1 sent, 1 rate limited, 1 retry", st)
	}
	if got := h.clock.sleeps(); !slices.Contains(got, time.Second) {
		t.Errorf("slept %v, want Retry-After's 1s among them", got)
	}
	r := h.outbox.get(ids[0])
	if !r.sent || r.sentCount != 1 || r.channel != "C0FINANCE" || r.ts != "1700000000.000001" {
		t.Errorf("row = sent %t ×%d in %q at %q, want sent once in C0FINANCE at 1700000000.000001", r.sent, r.sentCount, r.channel, r.ts)
	}
}

// A 5xx that came before the request was written out whole (an edge that
// turned it away unread, over an uplink that stalled), and Slack's
// service_unavailable, are answers to a call no one acted on: retried with
// backoff, sent once, and not called a repeat.
func TestDrainRetriesWhatWasNotActedOn(t *testing.T) {
	for _, tt := range []struct {
		name   string
		script []string
		stalls int
	}{
		{"5xx before the request was written whole", []string{"early:503", "early:500", "ok"}, 2},
		{"service_unavailable", []string{"service_unavailable", "service_unavailable", "ok"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			ids := h.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]))
			h.script(tt.script...)
			st, err := h.drain(t, h.deliverer(t, func(o *SlackOptions) {
				o.BackoffBase, o.BackoffMax = time.Second, 90*time.Second
				o.HTTPClient = &http.Client{Transport: slacktest.StallingTransport(tt.stalls)}
			}))
			if err != nil {
				t.Fatalf("Drain: %v", err)
			}
			if st.Sent != 1 || st.Retries != 2 || st.Unknown != 0 {
				t.Errorf("Drain stats = %+v, want 1 sent after 2 retries, none unknown", st)
			}
			if got, want := h.clock.sleeps(), []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(got, want) {
				t.Errorf("slept %v, want backoff %v", got, want)
			}
			h.outbox.checkSentOnce(t)
			posts := h.slack.Messages()
			if len(posts) != 1 || h.slack.Requests() != 3 || strings.Contains(posts[0].Flat, "Possible repeat") {
				t.Errorf("%d posts in %d requests, want 1 in 3, not called a possible repeat", len(posts), h.slack.Requests())
			}
			if r := h.outbox.get(ids[0]); r.alert.UnknownOutcome {
				t.Errorf("row marked of unknown outcome after answers to a call no one acted on")
			}
		})
	}
}

// Slack's edge answering 503 to a whole request may have passed it on:
// the first message's outcome is unknown, so the drain stops there, and
// once Slack is back that message alone says it may be a repeat.
func TestDrainSlackDownThenBack(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(smallRun("run-1")...)
	h.slack.SetFaults(slacktest.Faults{Down: true})
	d := h.deliverer(t, nil)
	st, err := h.drain(t, d)
	if err != nil {
		t.Fatalf("Drain with Slack down = %v, want nil: the run still completes", err)
	}
	if st.Sent != 0 || st.Unknown != 1 || st.Deferred != 6 || st.Stopped == "" || st.Retries != 0 {
		t.Errorf("Drain stats = %+v, want nothing sent, the summary unknown, 6 deferred, a reason, no retry", st)
	}
	if n := h.outbox.unsent(); n != 6 {
		t.Errorf("%d rows unsent after Slack was down, want 6", n)
	}
	requests := h.slack.Requests()
	if requests != 1 {
		t.Errorf("%d requests while Slack was down, want 1: a request Slack may have taken is not repeated", requests)
	}

	h.slack.SetFaults(slacktest.Faults{})
	st, err = h.drain(t, d)
	if err != nil {
		t.Fatalf("Drain after Slack came back: %v", err)
	}
	h.outbox.checkSentOnce(t)
	posts := h.slack.Messages()
	if len(posts) != st.Messages || st.Messages != 4 {
		t.Fatalf("posted %d messages, stats say %d, want 4 (summary, 2 criticals, 1 group)", len(posts), st.Messages)
	}
	for i, p := range posts {
		if marked := strings.Contains(p.Flat, "Possible repeat"); marked != (i == 0) {
			t.Errorf("message %d says possible repeat: %t, want %t (only the summary's request was answered 503):\n%s", i, marked, i == 0, p.Text)
		}
	}
	if posts[3].Thread != "1700000000.000001" {
		t.Errorf("group posted in thread %q, want the summary's 1700000000.000001", posts[3].Thread)
	}
}

func TestDrainPermanentErrors(t *testing.T) {
	tests := []struct {
		name    string
		webhook bool
		token   string
		script  string
		want    []string // in the error
		unknown bool     // a code this version does not know: the generic fix
	}{
		{name: "invalid_auth", token: "xoxb-revoked-SECRET-0000", want: []string{"invalid_auth", "SLACK_BOT_TOKEN"}},
		{name: "token_revoked", script: "token_revoked", want: []string{"token_revoked", "SLACK_BOT_TOKEN"}},
		{name: "account_inactive", script: "account_inactive", want: []string{"account_inactive", "SLACK_BOT_TOKEN"}},
		{name: "channel_not_found", script: "channel_not_found", want: []string{"channel_not_found", "SLACK_CHANNEL"}},
		{name: "not_in_channel", script: "not_in_channel", want: []string{"not_in_channel", "invite"}},
		{name: "is_archived", script: "is_archived", want: []string{"is_archived", "SLACK_CHANNEL"}},
		{name: "posting_to_general_channel_denied", script: "posting_to_general_channel_denied", want: []string{"posting_to_general_channel_denied", "SLACK_CHANNEL"}},
		{name: "messages_tab_disabled", script: "messages_tab_disabled", want: []string{"messages_tab_disabled", "SLACK_CHANNEL"}},
		{name: "method_deprecated", script: "method_deprecated", want: []string{"method_deprecated", "upgrade reconcile", "SLACK_API_URL"}},
		{name: "deprecated_endpoint", script: "deprecated_endpoint", want: []string{"deprecated_endpoint", "upgrade reconcile", "SLACK_API_URL"}},
		{name: "not_allowed_token_type", script: "not_allowed_token_type", want: []string{"not_allowed_token_type", "SLACK_BOT_TOKEN"}},
		{name: "accesslimited", script: "accesslimited", want: []string{"accesslimited", "SLACK_BOT_TOKEN"}},
		{name: "a code this version does not know", script: "shiny_new_refusal", want: []string{"shiny_new_refusal", "does not know", "SLACK_CHANNEL"}, unknown: true},
		{name: "an answer not shaped as a code", script: "<b>Oops</b> SECRET", want: []string{"unrecognized_answer", "does not know"}, unknown: true},
		{name: "webhook removed", webhook: true, script: "404", want: []string{"404", "SLACK_WEBHOOK_URL"}},
		{name: "webhook forbidden", webhook: true, script: "403", want: []string{"403", "SLACK_WEBHOOK_URL"}},
		{name: "webhook channel archived", webhook: true, script: "410", want: []string{"410", "SLACK_WEBHOOK_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			ids := h.outbox.add(smallRun("run-1")...)
			if tt.script != "" {
				h.script(tt.script)
			}
			d := h.deliverer(t, func(o *SlackOptions) {
				if tt.token != "" {
					o.BotToken = tt.token
				}
				if tt.webhook {
					webhook(h)(o)
				}
			})
			st, err := h.drain(t, d)
			if !errors.Is(err, ErrPermanent) {
				t.Fatalf("Drain = %v, want an error matching ErrPermanent", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || strings.Contains(msg, "SECRET") {
				t.Errorf("error %q: want one line without secrets", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			if generic := strings.Contains(msg, "does not know"); generic != tt.unknown {
				t.Errorf("error %q: the generic fix for a code this version does not know: %t, want %t", msg, generic, tt.unknown)
			}
			requests := h.slack.Requests()
			if requests != 1 {
				t.Errorf("%d requests, want 1: no retry can fix this", requests)
			}
			for _, id := range ids {
				if r := h.outbox.get(id); r.sent || r.sending || r.alert.UnknownOutcome {
					t.Errorf("row %d sent %t, intent left %t, unknown %t; want unsent, its refusal recorded, for when it is fixed",
						id, r.sent, r.sending, r.alert.UnknownOutcome)
				}
			}
			if st.Sent != 0 {
				t.Errorf("stats = %+v, want nothing sent", st)
			}

			// Fixed: everything goes, once.
			fixed := h.deliverer(t, func(o *SlackOptions) {
				if tt.webhook {
					webhook(h)(o)
				}
			})
			if _, err := h.drain(t, fixed); err != nil {
				t.Fatalf("Drain after the fix: %v", err)
			}
			h.outbox.checkSentOnce(t)
			posts := h.slack.Messages()
			for _, p := range posts {
				if strings.Contains(p.Flat, "Possible repeat") {
					t.Errorf("a message Slack refused was sent after the fix as a possible repeat:\n%s", p.Text)
				}
			}
		})
	}
}

// Every answer that leaves Slack's action unknown stops the drain after
// one request: Slack shows the message at most once then, the row stays
// unsent and marked of unknown outcome, and the next drain's copy says it
// may be a repeat. Answers: the connection lost after Slack took the post
// (reset, hang), Slack storing the post and failing (posted:…), Slack's
// request_timeout, and a 5xx to a request written out whole, whether or
// not Slack took it.
func TestDrainUnknownOutcomeResentMarked(t *testing.T) {
	for _, tt := range []struct {
		answer  string
		webhook bool
		shown   bool // Slack shows the first post
	}{
		{answer: "reset", shown: true},
		{answer: "hang", shown: true},
		{answer: "posted:internal_error", shown: true},
		{answer: "posted:fatal_error", shown: true},
		{answer: "internal_error"},
		{answer: "request_timeout"},
		{answer: "posted:500", shown: true},
		{answer: "502"},
		{answer: "504"},
		{answer: "posted:500", webhook: true, shown: true},
		{answer: "503", webhook: true},
		{answer: "reset", webhook: true, shown: true},
	} {
		name := tt.answer
		if tt.webhook {
			name = "webhook " + name
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			ids := h.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]), firing(0, sampleFindings()[reconcile.StatusMismatch]))
			h.script(tt.answer)
			d := h.deliverer(t, func(o *SlackOptions) {
				o.Timeout = 50 * time.Millisecond
				if tt.webhook {
					webhook(h)(o)
				}
			})
			st, err := h.drain(t, d)
			if err != nil {
				t.Fatalf("Drain: %v", err)
			}
			requests, shown := h.slack.Requests(), len(h.slack.Messages())
			if requests != 1 || shown != map[bool]int{true: 1}[tt.shown] {
				t.Errorf("%d requests, %d shown; want 1 request, %t shown: a request that may have arrived is never repeated blindly",
					requests, shown, tt.shown)
			}
			if st.Unknown != 1 || st.Deferred != 2 || st.Retries != 0 {
				t.Errorf("stats = %+v, want 1 unknown, 2 deferred, no retry", st)
			}
			if r := h.outbox.get(ids[0]); r.sent || !r.alert.UnknownOutcome {
				t.Errorf("row sent %t unknown %t, want unsent and marked unknown", r.sent, r.alert.UnknownOutcome)
			}
			if r := h.outbox.get(ids[1]); r.sent || r.alert.UnknownOutcome {
				t.Errorf("untried row sent %t unknown %t, want unsent and not unknown", r.sent, r.alert.UnknownOutcome)
			}

			if _, err := h.drain(t, d); err != nil {
				t.Fatalf("second Drain: %v", err)
			}
			h.outbox.checkSentOnce(t)
			posts := h.slack.Messages()
			if len(posts) != shown+2 {
				t.Fatalf("%d posts, want %d (%d shown before, the marked copy, the other)", len(posts), shown+2, shown)
			}
			resend, other := posts[shown], posts[shown+1]
			if shown == 1 && strings.Contains(posts[0].Flat, "Possible repeat") {
				t.Errorf("the first post says possible repeat:\n%s", posts[0].Text)
			}
			if !strings.Contains(resend.Flat, "Possible repeat") || !strings.Contains(resend.Text, "Possible repeat") {
				t.Errorf("the resend does not say possible repeat, in its text too:\n%s", resend.Text)
			}
			if strings.Contains(other.Flat, "Possible repeat") {
				t.Errorf("the other row's message is marked a possible repeat")
			}
		})
	}
}

// The summary Slack shows and answers internal_error (Slack says part of
// the call may have succeeded) is posted once in that drain, not three
// times unmarked; the next drain posts it once more, marked as a possible
// repeat, and the findings' messages unmarked.
func TestDrainSummaryShownButAnsweredInternalError(t *testing.T) {
	h := newHarness(t)
	ids := h.outbox.add(smallRun("run-1")...)
	h.script("posted:internal_error")
	d := h.deliverer(t, nil)
	st, err := h.drain(t, d)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	posts := h.slack.Messages()
	if len(posts) != 1 || h.slack.Requests() != 1 || !strings.Contains(posts[0].Text, "Reconciliation:") {
		t.Fatalf("%d posts in %d requests, want the summary once in 1", len(posts), h.slack.Requests())
	}
	if st.Unknown != 1 || st.Sent != 0 {
		t.Errorf("stats = %+v, want the summary unknown, nothing sent", st)
	}
	if r := h.outbox.get(ids[0]); r.sent || !r.alert.UnknownOutcome || r.sending {
		t.Errorf("summary row sent %t unknown %t intent %t, want unsent, unknown, its attempt recorded", r.sent, r.alert.UnknownOutcome, r.sending)
	}

	if _, err := h.drain(t, d); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
	h.outbox.checkSentOnce(t)
	posts = h.slack.Messages()
	summaries := 0
	for i, p := range posts {
		summary := strings.Contains(p.Text, "Reconciliation:")
		if summary {
			summaries++
		}
		if marked := strings.Contains(p.Flat, "Possible repeat"); marked != (i == 1) {
			t.Errorf("post %d (summary %t) says possible repeat: %t, want only the summary's resend to", i, summary, marked)
		}
	}
	if summaries != 2 || len(posts) != 5 {
		t.Errorf("%d posts, %d of them the summary; want 5: the summary twice (once marked), 2 criticals, 1 group", len(posts), summaries)
	}
}

// An error code this version does not know stops delivery until someone
// looks: each drain asks Slack once and returns a *PermanentError naming
// the code, the rows stay unsent and are not called repeats, and the
// deliverer logs no error line of its own: the run logs the one line
// ("alerts cannot be delivered", internal/runner).
func TestDrainUnknownCodeStopsEveryDrain(t *testing.T) {
	h := newHarness(t)
	ids := h.outbox.add(smallRun("run-1")...)
	h.slack.SetFaults(slacktest.Faults{Error: "shiny_new_refusal"})
	d := h.deliverer(t, nil)
	for i := range 3 {
		st, err := h.drain(t, d)
		pe, ok := errors.AsType[*PermanentError](err)
		if !errors.Is(err, ErrPermanent) || !ok || pe.Reason != "shiny_new_refusal" {
			t.Fatalf("Drain %d = %v, want a *PermanentError for shiny_new_refusal", i+1, err)
		}
		if n := h.slack.Requests(); n != i+1 {
			t.Errorf("after drain %d Slack had %d requests, want %d: one a drain, no loop", i+1, n, i+1)
		}
		if st.Sent != 0 || st.Unknown != 0 || st.Retries != 0 || st.Deferred != 6 {
			t.Errorf("drain %d stats = %+v, want all 6 rows deferred, none unknown, no retry", i+1, st)
		}
	}
	for _, id := range ids {
		if r := h.outbox.get(id); r.sent || r.sending || r.alert.UnknownOutcome {
			t.Errorf("row %d sent %t, intent left %t, unknown %t; want kept unsent and known", id, r.sent, r.sending, r.alert.UnknownOutcome)
		}
	}
	if len(h.slack.Messages()) != 0 {
		t.Errorf("Slack shows %d messages, want none", len(h.slack.Messages()))
	}
	if strings.Contains(h.logs.String(), `"level":"ERROR"`) {
		t.Errorf("the deliverer logged an error line of its own; the run logs the one:\n%s", h.logs.String())
	}
}

// A process that dies after Slack accepted a message and before it
// recorded so leaves the send's intent behind: the next drain's copy says
// it may be a repeat. Without the intent on record nothing is sent.
func TestDrainKilledAfterSlackAccepted(t *testing.T) {
	h := newHarness(t)
	ids := h.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]))
	d := h.deliverer(t, nil)
	h.outbox.dieAfterSend = true
	if _, err := h.drain(t, d); err == nil {
		t.Fatal("Drain with MarkSent failing returned no error")
	}
	if r := h.outbox.get(ids[0]); r.sent || !r.sending {
		t.Fatalf("row sent %t, intent %t; want unsent with its intent recorded", r.sent, r.sending)
	}
	if _, err := h.drain(t, d); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
	h.outbox.checkSentOnce(t)
	posts := h.slack.Messages()
	if len(posts) != 2 {
		t.Fatalf("%d posts, want 2 (the unrecorded one and its marked copy)", len(posts))
	}
	if strings.Contains(posts[0].Flat, "Possible repeat") || !strings.Contains(posts[1].Flat, "Possible repeat") {
		t.Errorf("want only the copy marked as a possible repeat:\n%s\n---\n%s", posts[0].Text, posts[1].Text)
	}

	h2 := newHarness(t)
	h2.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]))
	h2.outbox.sendingErr = errors.New("connection reset")
	if _, err := h2.drain(t, h2.deliverer(t, nil)); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("Drain with MarkSending failing = %v, want its error", err)
	}
	if posts, requests := h2.slack.Messages(), h2.slack.Requests(); len(posts) != 0 || requests != 0 {
		t.Errorf("%d posts, %d requests with no intent on record, want none", len(posts), requests)
	}
}

func TestDrainRefusedMessageFallsBackToText(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]))
	h.script("invalid_blocks", "ok")
	if _, err := h.drain(t, h.deliverer(t, nil)); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	posts := h.slack.Messages()
	if len(posts) != 1 || len(posts[0].Blocks) != 0 || !strings.Contains(posts[0].Text, "refund:4821:approved-request-7") {
		t.Fatalf("posts = %+v, want one text-only message with the ids", posts)
	}
	h.outbox.checkSentOnce(t)
}

func TestDrainRefusedTwiceSkipsOnlyThatMessage(t *testing.T) {
	h := newHarness(t)
	ids := h.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]), firing(0, sampleFindings()[reconcile.StatusMismatch]))
	h.script("msg_too_long", "msg_too_long", "ok")
	st, err := h.drain(t, h.deliverer(t, nil))
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if st.Failed != 1 || st.Sent != 1 {
		t.Errorf("stats = %+v, want 1 failed, 1 sent", st)
	}
	r := h.outbox.get(ids[0])
	if r.sent || r.alert.Attempts != 1 || !r.next.After(h.clock.Now()) || r.alert.UnknownOutcome {
		t.Errorf("refused row: sent %t attempts %d next %v unknown %t, want unsent, 1 attempt, later, known", r.sent, r.alert.Attempts, r.next, r.alert.UnknownOutcome)
	}
	if !h.outbox.get(ids[1]).sent {
		t.Errorf("the next message was not sent after one was refused")
	}
}

func TestDrainTenThousandFindings(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(flood(10000)...)
	st, err := h.drain(t, h.deliverer(t, nil))
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	posts, limits := h.slack.Messages(), h.slack.Violations()
	if len(posts) > 50 {
		t.Errorf("10,000 findings took %d messages, want at most 50", len(posts))
	}
	if len(limits) > 0 {
		t.Errorf("messages over Slack's limits: %v", limits)
	}
	if st.Sent != 10001 || h.outbox.unsent() != 0 {
		t.Errorf("stats = %+v, %d unsent; want all 10,001 rows sent", st, h.outbox.unsent())
	}
	h.outbox.checkSentOnce(t)
	for i := 1; i < len(posts); i++ {
		if gap := posts[i].At.Sub(posts[i-1].At); gap < time.Second {
			t.Errorf("posts %d and %d %v apart, want at least 1s", i-1, i, gap)
		}
	}
}

func TestDrainPacingInterval(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(smallRun("run-1")...)
	if _, err := h.drain(t, h.deliverer(t, func(o *SlackOptions) { o.PerChannelInterval = 3 * time.Second })); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	posts := h.slack.Messages()
	for i := 1; i < len(posts); i++ {
		if gap := posts[i].At.Sub(posts[i-1].At); gap < 3*time.Second {
			t.Errorf("posts %d and %d %v apart, want at least 3s", i-1, i, gap)
		}
	}
}

func TestDrainRerunSendsNothing(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(smallRun("run-1")...)
	d := h.deliverer(t, nil)
	if _, err := h.drain(t, d); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	before := h.slack.Requests()
	st, err := h.drain(t, d)
	if err != nil {
		t.Fatalf("second Drain: %v", err)
	}
	if after := h.slack.Requests(); after != before || st != (DrainStats{}) {
		t.Errorf("rerun made %d requests with stats %+v, want none", after-before, st)
	}
}

func TestDrainThreads(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(smallRun("run-1")...)
	d := h.deliverer(t, nil)
	if _, err := h.drain(t, d); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	// summary ts 1, criticals 2 and 3, group 4 in the summary's thread.
	fs := sampleFindings()
	ids := h.outbox.add(
		reconcile.Alert{RunID: "run-2", Event: reconcile.AlertResolved, Finding: fs[reconcile.Duplicate]},
		reconcile.Alert{RunID: "run-2", Event: reconcile.AlertResolved, Finding: fs[reconcile.Orphan]},
		reconcile.Alert{RunID: "run-2", Event: reconcile.AlertRepeat, Finding: fs[reconcile.StatusMismatch]},
	)
	if _, err := h.drain(t, d); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
	posts := h.slack.Messages()
	threads := map[string]string{}
	for _, p := range posts[4:] {
		for _, f := range []reconcile.FindingKind{reconcile.Duplicate, reconcile.Orphan, reconcile.StatusMismatch} {
			if strings.Contains(p.Text, kindLabel(f)) {
				threads[string(f)] = p.Thread
			}
		}
	}
	want := map[string]string{
		string(reconcile.Duplicate):      "1700000000.000002", // its own message
		string(reconcile.StatusMismatch): "1700000000.000003",
		string(reconcile.Orphan):         "1700000000.000001", // grouped in the summary's thread
	}
	for k, w := range want {
		if threads[k] != w {
			t.Errorf("%s notice in thread %q, want %q", k, threads[k], w)
		}
	}
	for _, id := range ids {
		if r := h.outbox.get(id); !r.sent {
			t.Errorf("row %d unsent", id)
		}
	}
}

func TestDrainWebhookGroupsWithoutThreads(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(smallRun("run-1")...)
	fs := sampleFindings()
	h.outbox.add(
		reconcile.Alert{RunID: "run-1", Event: reconcile.AlertResolved, Finding: fs[reconcile.UnresolvedUnknown]},
		reconcile.Alert{RunID: "run-1", Event: reconcile.AlertRepeat, Finding: fs[reconcile.ConflictingLink]},
	)
	h.script("429", "ok")
	st, err := h.drain(t, h.deliverer(t, webhook(h)))
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	posts := h.slack.Messages()
	for _, p := range posts {
		if p.Method != "webhook" || p.Thread != "" {
			t.Errorf("post %s in thread %q, want webhook posts without threads", p.Method, p.Thread)
		}
	}
	if len(posts) != 4 || st.RateLimited != 1 {
		t.Errorf("%d posts (rate limited %d), want 4: summary, 2 criticals, 1 group", len(posts), st.RateLimited)
	}
	h.outbox.checkSentOnce(t)
	for _, r := range h.outbox.rows {
		if r.channel != "webhook" || r.ts != "" {
			t.Errorf("row %d sent to %q at %q, want webhook without ts", r.alert.ID, r.channel, r.ts)
		}
	}
}

func TestDrainOutboxError(t *testing.T) {
	h := newHarness(t)
	h.outbox.dueErr = errors.New("connection refused")
	_, err := h.drain(t, h.deliverer(t, nil))
	if err == nil || !strings.Contains(err.Error(), "read due alerts: connection refused") || errors.Is(err, ErrPermanent) {
		t.Errorf("Drain = %v, want the outbox's error wrapped", err)
	}
}

// Canary secrets and personal data placed where the provider's metadata
// ends up (details, ids) never reach Slack or a log line.
func TestSecretsNeverLeave(t *testing.T) {
	canaries := []string{
		"sk_test_canary4f9a1cSECRET", "rk_live_canaryABC123SECRET", "xoxb-canary-SECRET-1234",
		"CanaryPw0rdSECRET", "4242 4242 4242 4242", "4111111111111111", "jane.canary@example.com",
		testToken, "SECRET",
	}
	detail := "metadata: api_key=sk_test_canary4f9a1cSECRET restricted rk_live_canaryABC123SECRET slack xoxb-canary-SECRET-1234 " +
		"dsn postgres://app:CanaryPw0rdSECRET@db.internal:5432/pay card 4242 4242 4242 4242 pan 4111111111111111 " +
		"customer jane.canary@example.com <!channel> <!here> <@U0ADMIN> <http://evil.example|your bank>"
	for _, mode := range []string{"bot", "webhook"} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t)
			fs := sampleFindings()
			rows := smallRun("run-1")
			for i := range rows[1:] {
				rows[i+1].Finding.Detail = detail
			}
			dup := fs[reconcile.Duplicate]
			dup.ObligationID = "refund:4111111111111111:jane.canary@example.com"
			dup.ProviderIDs = []string{"re_ok", "xoxb-canary-SECRET-1234"}
			dup.Detail = detail
			rows = append(rows, firing(0, dup), reconcile.Alert{RunID: "run-1", Event: reconcile.AlertResolved, Finding: dup})
			h.outbox.add(rows...)
			h.script("503", "429", "reset")
			mod := func(o *SlackOptions) {}
			if mode == "webhook" {
				mod = webhook(h)
			}
			d := h.deliverer(t, mod)
			for range 3 {
				if _, err := h.drain(t, d); err != nil {
					t.Fatalf("Drain: %v", err)
				}
			}
			if n := h.outbox.unsent(); n != 0 {
				t.Fatalf("%d rows unsent", n)
			}
			posts := h.slack.Messages()
			var sent strings.Builder
			for _, p := range posts {
				sent.WriteString(p.Flat + "\n")
			}
			where := map[string]string{"payloads": sent.String(), "request bodies": strings.Join(h.slack.Bodies(), "\n"), "logs": h.logs.String()}
			for _, r := range h.outbox.rows {
				where["outbox errors"] += strings.Join(r.errs, "\n")
			}
			for name, text := range where {
				for _, c := range canaries {
					if strings.Contains(text, c) {
						t.Errorf("%s contain %q", name, c)
					}
				}
				for _, markup := range []string{"<!channel>", "<!here>", "<@U0ADMIN>", "<http://evil"} {
					if name == "payloads" && strings.Contains(text, markup) {
						t.Errorf("payloads contain unescaped %q", markup)
					}
				}
			}
			if !strings.Contains(sent.String(), "&lt;!channel&gt;") || !strings.Contains(sent.String(), "•••• 4242") {
				t.Errorf("payloads lack the escaped mention or the masked card")
			}
			if h.logs.Len() == 0 {
				t.Errorf("no log lines: the check above proved nothing")
			}
		})
	}
}

func TestWebhookErrorsHideTheURL(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(firing(0, sampleFindings()[reconcile.Duplicate]))
	secretURL := "http://127.0.0.1:1/services/T0ACC/B0ACC/hooksecretSECRET"
	d := h.deliverer(t, func(o *SlackOptions) { o.BotToken, o.Channel, o.WebhookURL, o.MaxRetries = "", "", secretURL, 1 })
	st, err := h.drain(t, d)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if st.Stopped == "" {
		t.Fatalf("stats = %+v, want a reason the drain stopped", st)
	}
	for name, text := range map[string]string{"stopped": st.Stopped, "logs": h.logs.String(), "outbox": strings.Join(h.outbox.rows[0].errs, " ")} {
		if strings.Contains(text, "hooksecret") || strings.Contains(text, "SECRET") {
			t.Errorf("%s reveal the webhook URL: %s", name, text)
		}
	}
}

// testOptions are the configuration's delivery defaults, with nothing
// configured.
func testOptions() SlackOptions { return SlackOptionsFrom(config.Default()) }

func TestSlackOptionsNeverPrintSecrets(t *testing.T) {
	o := testOptions()
	o.BotToken, o.Channel, o.WebhookURL = testToken, "C0FINANCE", "https://hooks.slack.com/services/T/B/hookSECRET"
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "slack", o)
	d, err := NewSlack(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", o, o, o, o), fmt.Sprintf("%v %+v %#v", d, d, d), logs.String()} {
		if strings.Contains(s, "SECRET") {
			t.Errorf("printed options reveal a secret: %s", s)
		}
	}
}

func TestNewSlack(t *testing.T) {
	tests := []struct {
		name       string
		opts       SlackOptions
		configured bool
		wantErr    string
	}{
		{name: "nothing", configured: false},
		{name: "channel alone", opts: SlackOptions{Channel: "C0FINANCE"}, configured: false},
		{name: "bot token and channel", opts: SlackOptions{BotToken: testToken, Channel: "C0FINANCE"}, configured: true},
		{name: "webhook", opts: SlackOptions{WebhookURL: "https://hooks.slack.com/services/T/B/x"}, configured: true},
		{name: "bot token without channel", opts: SlackOptions{BotToken: testToken}, wantErr: "SLACK_CHANNEL"},
		{name: "webhook not a URL", opts: SlackOptions{WebhookURL: "hooks.slack.com/SECRET"}, wantErr: "SLACK_WEBHOOK_URL"},
		{name: "api url not a URL", opts: SlackOptions{BotToken: testToken, Channel: "C", APIURL: "slack"}, wantErr: "SLACK_API_URL"},
		{name: "bot token without api url", opts: SlackOptions{BotToken: testToken, Channel: "C", APIURL: ""}, wantErr: "SLACK_API_URL"},
		{name: "no timeout", opts: SlackOptions{WebhookURL: "https://hooks.slack.com/services/T/B/x", Timeout: -1}, wantErr: "alerts.timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The configuration's defaults under what the row sets.
			o := testOptions()
			o.BotToken, o.Channel, o.WebhookURL = tt.opts.BotToken, tt.opts.Channel, tt.opts.WebhookURL
			if tt.opts.APIURL != "" || tt.name == "bot token without api url" {
				o.APIURL = tt.opts.APIURL
			}
			if tt.opts.Timeout != 0 {
				o.Timeout = tt.opts.Timeout
			}
			d, err := NewSlack(o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "SECRET") {
					t.Fatalf("NewSlack = %v, want an error naming %s without secrets", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewSlack: %v", err)
			}
			if d.Configured() != tt.configured {
				t.Errorf("Configured() = %t, want %t", d.Configured(), tt.configured)
			}
			if !tt.configured {
				if _, err := d.Drain(t.Context(), &fakeOutbox{}, time.Now); !errors.Is(err, ErrNotConfigured) {
					t.Errorf("Drain = %v, want ErrNotConfigured", err)
				}
			}
		})
	}
}

// Each message is claimed, sent and recorded under one fence of the
// outbox, released once its outcome is on record; when a fence is refused
// (the run lost its lock) nothing more is claimed or sent.
func TestDrainHoldsTheFenceAcrossEachSend(t *testing.T) {
	h := newHarness(t)
	h.outbox.add(smallRun("run_1")...)
	// Two messages go out, the third meets a Slack that stays down: its
	// failed attempt is recorded under the fence too.
	h.script("ok", "ok", "500", "500", "500", "500")
	st, err := h.drain(t, h.deliverer(t, nil))
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	posts := h.slack.Messages()
	if len(posts) != 2 || st.Deferred == 0 {
		t.Fatalf("%d posts, %d deferred; want 2 sent and the rest deferred", len(posts), st.Deferred)
	}
	if len(h.outbox.unfenced) > 0 || h.outbox.held != 0 {
		t.Errorf("marks outside a fence: %v; fences still held: %d", h.outbox.unfenced, h.outbox.held)
	}
	if h.outbox.fences < len(posts) {
		t.Errorf("%d fences for %d posts, want one per message at least", h.outbox.fences, len(posts))
	}

	h = newHarness(t)
	h.outbox.add(smallRun("run_1")...)
	h.outbox.fenceFailAt = 2
	_, err = h.drain(t, h.deliverer(t, nil))
	if !errors.Is(err, errFenceLost) {
		t.Fatalf("Drain with the second fence refused = %v, want its error", err)
	}
	if posts := h.slack.Messages(); len(posts) != 1 {
		t.Errorf("%d posts with the second fence refused, want 1", len(posts))
	}
	for id := int64(1); id <= int64(len(h.outbox.rows)); id++ {
		if r := h.outbox.get(id); !r.sent && r.sending {
			t.Errorf("alert %d was claimed after its fence was refused", id)
		}
	}
	if h.outbox.held != 0 {
		t.Errorf("%d fences still held after the drain", h.outbox.held)
	}
}
