package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"reconcile/internal/alerts"
	"reconcile/internal/slacktest"
	"reconcile/internal/store"
	"reconcile/internal/web"
)

const (
	botToken      = "xoxb-web-test-token"
	signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	channel       = "C0FINANCE"
)

// slackEnv is the seeded store after a run's alerts went to a fake Slack
// with buttons on, and the page's handler answering Slack's calls over
// HTTP.
type slackEnv struct {
	sd    seeded
	slack *slacktest.Server
	h     *web.Handler
	url   string // the interactivity request URL
	base  string // the fake Slack's, SLACK_API_URL less /api/
}

func newSlackEnv(t *testing.T, secret, publicURL string) *slackEnv {
	t.Helper()
	sd := seed(t)
	fake := slacktest.New(botToken)
	base, stop, err := fake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	d, err := alerts.NewSlack(alerts.SlackOptions{BotToken: botToken, Channel: channel, APIURL: base + "/api/",
		Timeout: 5 * time.Second, Buttons: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(t.Context(), sd.s, func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	opts := web.Options{Store: sd.s, Now: func() time.Time { return now.Add(time.Hour) },
		Auth: web.Auth{Mode: web.AuthProxy, TrustedProxies: []string{"10.0.0.0/24", "127.0.0.1"}}}
	if secret != "" {
		opts.Slack = web.SlackOptions{Client: slack.New(botToken, slack.OptionAPIURL(base+"/api/")), SigningSecret: secret, PublicURL: publicURL}
	}
	h, err := web.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &slackEnv{sd: sd, slack: fake, h: h, url: srv.URL + "/slack/interactions", base: base}
}

// message returns the message Slack shows whose text holds s.
func (e *slackEnv) message(t *testing.T, s string) slacktest.Message {
	t.Helper()
	for _, m := range e.slack.Messages() {
		if strings.Contains(m.Text, s) {
			return m
		}
	}
	t.Fatalf("no message holds %q", s)
	return slacktest.Message{}
}

// withButton is message, which must show the Acknowledge button.
func (e *slackEnv) withButton(t *testing.T, s string) slacktest.Message {
	t.Helper()
	m := e.message(t, s)
	if !strings.Contains(string(m.Blocks), `"action_id":"reconcile_ack"`) {
		t.Fatalf("the message holding %q has no button: %s", s, m.Blocks)
	}
	return m
}

// settle waits for the handler's edits of Slack's messages.
func (e *slackEnv) settle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func (e *slackEnv) finding(t *testing.T, fp string) store.FindingRecord {
	t.Helper()
	fs, err := e.sd.s.FindingsOf(t.Context(), []string{fp})
	if err != nil || len(fs) != 1 {
		t.Fatalf("finding %s: %v, %v", fp, fs, err)
	}
	return fs[0]
}

func reasonValues(reason string) map[string]map[string]string {
	return map[string]map[string]string{"reason": {"reason": reason}}
}

var ana = slacktest.User{ID: "U0ANA", Username: "ana", Name: "ana"}

// The whole button: a run's message in Slack, pressed, asks why in a
// modal; submitted, the finding is acknowledged in the database as the
// Slack user, and the message shows who and why instead of the button. A
// second press and submission, racing the first, change nothing.
func TestSlackButtonAcknowledges(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t, signingSecret, "")
	m := e.withButton(t, "Paid twice (critical): USD")
	_, status, body, err := e.slack.Press(t.Context(), e.url, signingSecret, m.Channel, m.TS, alerts.AckActionID, ana)
	if err != nil || status != http.StatusOK {
		t.Fatalf("press = %d %q, %v", status, body, err)
	}
	// A colleague presses too before ana submits.
	late, err := e.slack.PressPayload(m.Channel, m.TS, alerts.AckActionID, slacktest.User{ID: "U0BO", Name: "bo"})
	if err != nil {
		t.Fatal(err)
	}
	views := e.slack.Views()
	if len(views) != 1 || views[0].CallbackID != alerts.AckCallbackID || !strings.Contains(views[0].PrivateMetadata, m.TS) {
		t.Fatalf("views after the press: %+v", views)
	}
	// No reason: the modal stays open and says so.
	if _, status, body, err := e.slack.Submit(t.Context(), e.url, signingSecret, views[0].ID, reasonValues("  "), ana); err != nil ||
		status != http.StatusOK || !strings.Contains(body, `"response_action":"errors"`) || !strings.Contains(body, `"reason"`) {
		t.Errorf("submit without a reason = %d %q, %v; want the modal's errors", status, body, err)
	}
	if f := e.finding(t, e.sd.dup.Fingerprint); !f.AcknowledgedAt.IsZero() {
		t.Fatalf("a submission without a reason acknowledged the finding")
	}
	in, status, body, err := e.slack.Submit(t.Context(), e.url, signingSecret, views[0].ID, reasonValues("refunded by hand, FIN-12"), ana)
	if err != nil || status != http.StatusOK || body != "" {
		t.Fatalf("submit = %d %q, %v; want 200 with an empty body, which closes the modal", status, body, err)
	}
	e.settle(t)
	f := e.finding(t, e.sd.dup.Fingerprint)
	if f.AcknowledgedBy != "ana (Slack U0ANA)" || f.AckReason != "refunded by hand, FIN-12" || !f.AcknowledgedAt.Equal(now.Add(time.Hour)) {
		t.Errorf("the finding after the submission: by %q for %q at %v", f.AcknowledgedBy, f.AckReason, f.AcknowledgedAt)
	}
	m = e.message(t, "Paid twice (critical): USD")
	if strings.Contains(string(m.Blocks), `"type":"actions"`) {
		t.Errorf("the acknowledged message keeps its button: %s", m.Blocks)
	}
	if !strings.Contains(m.Flat, "Acknowledged by ana (Slack U0ANA) at 2026-11-30 07:00 UTC: refunded by hand, FIN-12") {
		t.Errorf("the message does not say who acknowledged and why:\n%s", m.Flat)
	}
	if len(e.slack.Updates()) != 1 {
		t.Errorf("%d updates, want 1", len(e.slack.Updates()))
	}

	// bo's press, from before the edit: a modal saying who acknowledged.
	if status, _, err := slacktest.Sign(signingSecret, time.Now(), late).Post(t.Context(), e.url); err != nil || status != http.StatusOK {
		t.Fatalf("the late press = %d, %v", status, err)
	}
	views = e.slack.Views()
	if len(views) != 2 || views[1].Title != "Already acknowledged" || !strings.Contains(views[1].Flat, "ana (Slack U0ANA)") ||
		!strings.Contains(views[1].Flat, "refunded by hand") {
		t.Errorf("the late press opened %+v", views[len(views)-1])
	}
	// A second submission of the first modal (Slack delivering it again
	// would be a replay; this one is signed anew) changes nothing.
	body2, err := e.slack.SubmitPayload(views[0].ID, reasonValues("another reason"), slacktest.User{ID: "U0BO", Name: "bo"})
	if err != nil {
		t.Fatal(err)
	}
	if status, _, err := slacktest.Sign(signingSecret, time.Now(), body2).Post(t.Context(), e.url); err != nil || status != http.StatusOK {
		t.Fatalf("the second submission = %d, %v", status, err)
	}
	e.settle(t)
	if g := e.finding(t, e.sd.dup.Fingerprint); g.AckReason != f.AckReason || g.AcknowledgedBy != f.AcknowledgedBy || !g.AcknowledgedAt.Equal(f.AcknowledgedAt) {
		t.Errorf("a second submission changed the acknowledgement to %q by %q at %v", g.AckReason, g.AcknowledgedBy, g.AcknowledgedAt)
	}
	// The very same request again is refused, with no effect.
	if status, _, _ := in.Post(t.Context(), e.url); status != http.StatusConflict {
		t.Errorf("the submission replayed = %d, want 409", status)
	}
	if v := e.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack's limits broken: %v", v)
	}
}

// Requests not signed with the secret, signed five minutes ago or more,
// or received before, are refused and change nothing.
func TestSlackInteractionsAreVerified(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t, signingSecret, "")
	m := e.message(t, "Paid twice (critical): USD")
	payload, err := e.slack.PressPayload(m.Channel, m.TS, alerts.AckActionID, ana)
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]slacktest.Interaction{
		"another secret":  slacktest.Sign("not-the-secret", time.Now(), payload),
		"stale":           slacktest.Sign(signingSecret, time.Now().Add(-6*time.Minute), payload),
		"from the future": slacktest.Sign(signingSecret, time.Now().Add(6*time.Minute), payload),
		"unsigned":        {Body: payload, Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}},
	} {
		if status, _, err := in.Post(t.Context(), e.url); err != nil || status != http.StatusUnauthorized {
			t.Errorf("%s: %d, %v; want 401", name, status, err)
		}
	}
	tampered := slacktest.Sign(signingSecret, time.Now(), payload)
	tampered.Body = strings.Replace(tampered.Body, "U0ANA", "U0EVE", 1)
	if status, _, _ := tampered.Post(t.Context(), e.url); status != http.StatusUnauthorized {
		t.Errorf("a tampered body = %d, want 401", status)
	}
	if n := len(e.slack.Views()); n != 0 {
		t.Fatalf("refused requests opened %d views", n)
	}
	in := slacktest.Sign(signingSecret, time.Now(), payload)
	if status, _, _ := in.Post(t.Context(), e.url); status != http.StatusOK {
		t.Fatalf("the press = %d", status)
	}
	if status, _, _ := in.Post(t.Context(), e.url); status != http.StatusConflict {
		t.Errorf("the press replayed = %d, want 409", status)
	}
	if n := len(e.slack.Views()); n != 1 {
		t.Errorf("a press and its replay opened %d views, want 1", n)
	}
	big := slacktest.Sign(signingSecret, time.Now(), "payload="+strings.Repeat("x", 2<<20))
	if status, _, _ := big.Post(t.Context(), e.url); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB body = %d, want 413", status)
	}
	e.settle(t)
	if f := e.finding(t, e.sd.dup.Fingerprint); !f.AcknowledgedAt.IsZero() {
		t.Errorf("refused requests acknowledged the finding: %+v", f)
	}
}

// A group's button acknowledges all its open findings at once, as the
// Slack user; a hostile name and reason show masked and escaped in the
// edited message. An acknowledgement on the page, and its reopening, edit
// the messages of that finding too.
func TestSlackGroupAndPageAck(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t, signingSecret, "")
	g := e.withButton(t, "findings to check")
	// The page acknowledges one of the group's findings first.
	form := url.Values{"fingerprint": {e.sd.mismatch.Fingerprint}, "reason": {"customer agreed"}}
	if w := do(e.h, http.MethodPost, "/ack", form, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("POST /ack = %d %s", w.Code, w.Body)
	}
	e.settle(t)
	g = e.message(t, "findings to check")
	if !strings.Contains(g.Flat, "Acknowledged by [email] at 2026-11-30 07:00 UTC: customer agreed") ||
		!strings.Contains(string(g.Blocks), `"action_id":"reconcile_ack"`) {
		t.Fatalf("after the page's ack the digest shows:\n%s\n%s", g.Flat, g.Blocks)
	}
	// Acknowledged and at once reopened on the page, the message ends
	// showing it open: the edits land in order.
	e = newSlackEnv(t, signingSecret, "")
	if w := do(e.h, http.MethodPost, "/ack", form, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("POST /ack = %d %s", w.Code, w.Body)
	}
	if w := do(e.h, http.MethodPost, "/reopen", url.Values{"fingerprint": {e.sd.mismatch.Fingerprint}}, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("POST /reopen = %d %s", w.Code, w.Body)
	}
	e.settle(t)
	if g = e.message(t, "findings to check"); strings.Contains(g.Flat, "customer agreed") || !strings.Contains(string(g.Blocks), `"action_id":"reconcile_ack"`) {
		t.Fatalf("after the page's reopen the digest shows:\n%s\n%s", g.Flat, g.Blocks)
	}
	if u := e.slack.Updates(); len(u) != 2 {
		t.Errorf("the ack and the reopening made %d edits, want 2", len(u))
	}

	e = newSlackEnv(t, signingSecret, "")
	g = e.message(t, "findings to check")
	eve := slacktest.User{ID: "U0EVE", Name: "<!channel> *bold*"}
	if _, status, _, err := e.slack.Press(t.Context(), e.url, signingSecret, g.Channel, g.TS, alerts.AckActionID, eve); err != nil || status != http.StatusOK {
		t.Fatalf("press = %d, %v", status, err)
	}
	v := e.slack.Views()
	if len(v) != 1 || !strings.Contains(v[0].Flat, "the 3 open findings") {
		t.Fatalf("views: %+v", v)
	}
	if _, status, _, err := e.slack.Submit(t.Context(), e.url, signingSecret, v[0].ID,
		reasonValues("<https://evil|x> paid to 4242424242424242\nsecond line"), eve); err != nil || status != http.StatusOK {
		t.Fatalf("submit = %d, %v", status, err)
	}
	e.settle(t)
	for _, fp := range []string{e.sd.orphan.Fingerprint, e.sd.orphanCharge.Fingerprint, e.sd.mismatch.Fingerprint} {
		if f := e.finding(t, fp); f.AcknowledgedBy != "<!channel> *bold* (Slack U0EVE)" {
			t.Errorf("finding %s acknowledged by %q", fp, f.AcknowledgedBy)
		}
	}
	if f := e.finding(t, e.sd.dup.Fingerprint); !f.AcknowledgedAt.IsZero() {
		t.Errorf("the digest's button acknowledged the critical of another message")
	}
	g = e.message(t, "findings to check")
	for _, bad := range []string{"<!channel>", "*bold*", "<https://evil", "4242424242424242", `"type":"actions"`} {
		if strings.Contains(g.Flat, bad) || strings.Contains(string(g.Blocks), bad) {
			t.Errorf("the edited digest shows %q:\n%s\n%s", bad, g.Flat, g.Blocks)
		}
	}
	if !strings.Contains(g.Flat, "&lt;!channel&gt; ＊bold＊ (Slack U0EVE) at 2026-11-30 07:00 UTC: &lt;https://evil|x&gt; paid to •••• 4242 second line") {
		t.Errorf("the edited digest does not say who and why:\n%s", g.Flat)
	}
	if v := e.slack.Violations(); len(v) > 0 {
		t.Errorf("Slack's limits broken: %v", v)
	}
}

// Without a signing secret Slack's calls find nothing; a button on a
// message the reconciler never recorded says so and links to the page.
func TestSlackOffAndNotOnRecord(t *testing.T) {
	t.Parallel()
	off := newSlackEnv(t, "", "")
	payload := "payload=%7B%7D"
	if status, _, _ := slacktest.Sign(signingSecret, time.Now(), payload).Post(t.Context(), off.url); status != http.StatusNotFound {
		t.Errorf("POST /slack/interactions without a secret = %d, want 404", status)
	}

	e := newSlackEnv(t, signingSecret, "https://reconcile.example.com")
	// A message with the button that was never recorded: posted by hand.
	_, ts, err := slack.New(botToken, slack.OptionAPIURL(e.base+"/api/")).PostMessageContext(t.Context(), channel,
		slack.MsgOptionText("old", false), slack.MsgOptionBlocks(slack.NewActionBlock(alerts.AckBlockID,
			slack.NewButtonBlockElement(alerts.AckActionID, "ack", slack.NewTextBlockObject(slack.PlainTextType, "Acknowledge", false, false)))))
	if err != nil {
		t.Fatal(err)
	}
	if _, status, _, err := e.slack.Press(t.Context(), e.url, signingSecret, channel, ts, alerts.AckActionID, ana); err != nil || status != http.StatusOK {
		t.Fatalf("press = %d, %v", status, err)
	}
	v := e.slack.Views()
	if len(v) != 1 || v[0].Title != "Not on record" || !strings.Contains(v[0].Flat, "<https://reconcile.example.com/|the findings page>") {
		t.Errorf("a press on a message not on record opened %+v", v)
	}
	if slices.ContainsFunc(v, func(v slacktest.View) bool { return v.CallbackID == alerts.AckCallbackID }) {
		t.Error("a message not on record offered to acknowledge")
	}
}
