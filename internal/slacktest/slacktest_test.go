package slacktest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"reconcile/internal/slacktest"
)

const token = "xoxb-slacktest-token"

func start(t *testing.T) (*slacktest.Server, string) {
	t.Helper()
	s := slacktest.New(token)
	base, stop, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, base
}

// A script answers posts one each, in order, as Slack would, to the real
// client: rate limited with Retry-After, accepted with the answer lost,
// a Slack error, Slack's edge failing, accepted.
func TestScriptThroughTheClient(t *testing.T) {
	s, base := start(t)
	at := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return at }
	s.SetFaults(slacktest.Faults{RetryAfter: 7, Script: []string{
		slacktest.AnswerRateLimited, slacktest.AnswerReset, "channel_not_found", "503", slacktest.AnswerOK}})
	client := slack.New(token, slack.OptionAPIURL(base+"/api/"))
	post := func(text string) (string, error) {
		_, ts, err := client.PostMessageContext(t.Context(), "C0FIN", slack.MsgOptionText(text, false), slack.MsgOptionTS("1.5"))
		return ts, err
	}
	var rl *slack.RateLimitedError
	if _, err := post("one"); !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Errorf("post 1 = %v, want rate limited for 7s", err)
	}
	if _, err := post("two"); err == nil {
		t.Errorf("post 2 (reset) succeeded, want the connection's error")
	}
	var se slack.SlackErrorResponse
	if _, err := post("three"); !errors.As(err, &se) || se.Err != "channel_not_found" {
		t.Errorf("post 3 = %v, want channel_not_found", err)
	}
	var sc slack.StatusCodeError
	if _, err := post("four"); !errors.As(err, &sc) || sc.Code != 503 {
		t.Errorf("post 4 = %v, want HTTP 503", err)
	}
	ts, err := post("five")
	if err != nil || ts == "" {
		t.Errorf("post 5 = %q, %v; want accepted with a ts", ts, err)
	}
	msgs := s.Messages()
	var texts []string
	for _, m := range msgs {
		texts = append(texts, m.Text)
		if m.Channel != "C0FIN" || m.Thread != "1.5" || !m.At.Equal(at) || m.TS == "" || len(m.Blocks) != 0 {
			t.Errorf("message %+v: want channel C0FIN, thread 1.5, stamped %v, a ts, no blocks", m, at)
		}
	}
	if !slices.Equal(texts, []string{"two", "five"}) || s.Requests() != 5 {
		t.Errorf("Slack shows %q after %d requests, want the reset post and the accepted one after 5", texts, s.Requests())
	}
	if _, err := post("six"); err != nil {
		t.Errorf("post after the script = %v, want accepted", err)
	}
}

// A wrong token, blocks that are not JSON and an unknown method are
// refused as Slack refuses them; the token never shows in Bodies.
func TestAPIRefusals(t *testing.T) {
	s, base := start(t)
	if _, _, err := slack.New("xoxb-wrong", slack.OptionAPIURL(base+"/api/")).PostMessage("C", slack.MsgOptionText("x", false)); err == nil ||
		err.Error() != "invalid_auth" {
		t.Errorf("post with a wrong token = %v, want invalid_auth", err)
	}
	for _, tt := range []struct{ path, body, want string }{
		{"/api/chat.postMessage", "token=" + token + "&channel=C&text=hi&blocks=%5Bnot+json", `{"ok":false,"error":"invalid_blocks_format"}`},
		{"/api/chat.nosuch", "token=" + token, `{"ok":false,"error":"unknown_method"}`},
	} {
		resp, err := http.Post(base+tt.path, "application/x-www-form-urlencoded", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != tt.want {
			t.Errorf("POST %s = %d %s, want 200 %s", tt.path, resp.StatusCode, b, tt.want)
		}
	}
	if len(s.Messages()) != 0 {
		t.Errorf("refused posts were recorded: %+v", s.Messages())
	}
	bodies := strings.Join(s.Bodies(), "\n")
	if strings.Contains(bodies, token) || !strings.Contains(bodies, "text=hi") {
		t.Errorf("bodies = %q, want the fields decoded, without the token", bodies)
	}
}

// A webhook answers "ok" or an error code in plain text under Slack's
// status for it, and records a message's thread and blocks.
func TestWebhook(t *testing.T) {
	s, base := start(t)
	hook := base + "/services/T0/B0/" + token
	post := func(url, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	s.SetFaults(slacktest.Faults{Script: []string{"404", "channel_is_archived", slacktest.AnswerRateLimited}})
	for _, tt := range []struct {
		url, body string
		code      int
		answer    string
	}{
		{hook, `{"text":"a"}`, 404, "no_service"},
		{hook, `{"text":"a"}`, 410, "channel_is_archived"},
		{hook, `{"text":"a"}`, 429, "rate_limited"},
		{base + "/services/T0/B0/wrong", `{"text":"a"}`, 403, "invalid_token"},
		{hook, `{"text":`, 400, "invalid_payload"},
		{hook, `{"text":"a","blocks":{"type":"section"}}`, 400, "invalid_payload"},
		{hook, `{"text":"in a thread","thread_ts":"1.5","blocks":[{"type":"section","text":{"type":"mrkdwn","text":"*b*"}}]}`, 200, "ok"},
	} {
		if code, answer := post(tt.url, tt.body); code != tt.code || answer != tt.answer {
			t.Errorf("webhook %s = %d %q, want %d %q", tt.body, code, answer, tt.code, tt.answer)
		}
	}
	msgs := s.Messages()
	if len(msgs) != 1 || msgs[0].Method != "webhook" || msgs[0].Thread != "1.5" || msgs[0].TS != "" ||
		!strings.Contains(string(msgs[0].Blocks), `"*b*"`) || !strings.Contains(msgs[0].Flat, "*b*\n") {
		t.Errorf("messages = %+v, want the one accepted webhook post, its thread and blocks", msgs)
	}
	if err := slack.PostWebhook(hook, &slack.WebhookMessage{Text: "through the client"}); err != nil {
		t.Errorf("PostWebhook = %v", err)
	}
	if m := s.Messages(); len(m) != 2 || m[1].Text != "through the client" || m[1].Blocks != nil {
		t.Errorf("the client's webhook post was recorded as %+v, want its text and no blocks", m[len(m)-1])
	}
}

// Posts over Slack's limits are accepted and named in Violations.
func TestViolations(t *testing.T) {
	s, base := start(t)
	client := slack.New(token, slack.OptionAPIURL(base+"/api/"))
	within := []slack.Block{slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, strings.Repeat("h", 150), false, false))}
	if _, _, err := client.PostMessage("C", slack.MsgOptionText("fine", false), slack.MsgOptionBlocks(within...)); err != nil {
		t.Fatal(err)
	}
	if v := s.Violations(); len(v) != 0 {
		t.Errorf("a message within the limits: violations %q", v)
	}
	over := []slack.Block{slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, strings.Repeat("h", 151), false, false))}
	for range 50 {
		over = append(over, slack.NewDividerBlock())
	}
	if _, _, err := client.PostMessage("C", slack.MsgOptionText(strings.Repeat("t", 4001), false), slack.MsgOptionBlocks(over...)); err != nil {
		t.Fatal(err)
	}
	want := []string{"message 2 (chat.postMessage): text of 4001 characters", "message 2 (chat.postMessage): 51 blocks",
		"message 2 (chat.postMessage): header of 151 characters"}
	if v := s.Violations(); !slices.Equal(v, want) {
		t.Errorf("violations = %q, want %q", v, want)
	}
}

// A posted answer shows the post and then answers its error; an early
// answer comes before the body was read, and with a StallingTransport
// before the client wrote its request out whole (the trace's WroteRequest
// never reports a whole request); the requests after go out whole.
func TestPostedAndEarlyAnswers(t *testing.T) {
	s, base := start(t)
	client := slack.New(token, slack.OptionAPIURL(base+"/api/"),
		slack.OptionHTTPClient(&http.Client{Transport: slacktest.StallingTransport(1)}))
	// post reports whether net/http wrote the request out whole, waiting
	// for its report: an answer can come before it.
	post := func(text string) (written bool, err error) {
		reported := make(chan bool, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
			reported <- i.Err == nil
		}})
		_, _, err = client.PostMessageContext(ctx, "C0FIN", slack.MsgOptionText(text, false))
		select {
		case written = <-reported:
		case <-ctx.Done():
			t.Errorf("post %q: net/http never reported how writing it ended", text)
		}
		return written, err
	}
	var se slack.SlackErrorResponse
	var sc slack.StatusCodeError
	// The stalled request comes first: the script's order is the posts'.
	s.SetFaults(slacktest.Faults{Script: []string{"early:503", "posted:internal_error", "posted:500", slacktest.AnswerOK}})
	if written, err := post("turned away"); !errors.As(err, &sc) || sc.Code != 503 || written {
		t.Errorf("early 503 over a stalled uplink = %v, written %t; want HTTP 503 before the request was written whole", err, written)
	}
	if written, err := post("stored, then failed"); !errors.As(err, &se) || se.Err != "internal_error" || !written {
		t.Errorf("posted:internal_error = %v, written %t; want internal_error after a whole request", err, written)
	}
	if _, err := post("stored, then the edge failed"); !errors.As(err, &sc) || sc.Code != 500 {
		t.Errorf("posted:500 = %v, want HTTP 500", err)
	}
	if _, err := post("accepted"); err != nil {
		t.Errorf("post after the script = %v, want accepted", err)
	}
	var texts []string
	for _, m := range s.Messages() {
		texts = append(texts, m.Text)
	}
	if want := []string{"stored, then failed", "stored, then the edge failed", "accepted"}; !slices.Equal(texts, want) {
		t.Errorf("Slack shows %q, want %q", texts, want)
	}
	if n, bodies := s.Requests(), s.Bodies(); n != 4 || len(bodies) != 3 || strings.Contains(strings.Join(bodies, "\n"), "turned away") {
		t.Errorf("%d requests, bodies %q; want 4 requests and the 3 bodies read", n, bodies)
	}

	// A webhook shows a posted answer's post too, and answers the code
	// under its status; an early answer over a plain client still comes.
	hook := base + "/services/T0/B0/" + token
	s.SetFaults(slacktest.Faults{Script: []string{"posted:rollup_error", "early:503"}})
	if err := slack.PostWebhook(hook, &slack.WebhookMessage{Text: "hooked"}); !errors.As(err, &sc) || sc.Code != 500 {
		t.Errorf("webhook posted:rollup_error = %v, want HTTP 500", err)
	}
	if err := slack.PostWebhook(hook, &slack.WebhookMessage{Text: "hooked early"}); !errors.As(err, &sc) || sc.Code != 503 {
		t.Errorf("webhook early:503 = %v, want HTTP 503", err)
	}
	if m := s.Messages(); len(m) != 4 || m[3].Text != "hooked" {
		t.Errorf("the webhook's posted answer was recorded as %+v, want its post shown", m[len(m)-1])
	}
}

// The fake plays Slack's side of a button: a press posts a block_actions
// payload signed as Slack signs, whose trigger opens a modal for three
// seconds only; a modal over Slack's limits is a violation; chat.update
// edits a message that exists and refuses one that does not.
func TestInteractions(t *testing.T) {
	s, base := start(t)
	clock := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return clock }
	client := slack.New(token, slack.OptionAPIURL(base+"/api/"))
	button := slack.NewButtonBlockElement("reconcile_ack", "fp1", slack.NewTextBlockObject(slack.PlainTextType, "Acknowledge", false, false))
	_, ts, err := client.PostMessageContext(t.Context(), "C0FIN", slack.MsgOptionText("a finding", false),
		slack.MsgOptionBlocks(slack.NewActionBlock("reconcile_ack", button)))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "signing-secret"
	var got []slack.InteractionCallback
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sv, err := slack.NewSecretsVerifier(r.Header, secret)
		if err == nil {
			sv.Write(body)
			err = sv.Ensure()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		ic, err := slack.InteractionCallbackParse(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = append(got, ic)
	})
	appSrv := httptestServer(t, app)
	user := slacktest.User{ID: "U9", Username: "ana", Name: "Ana"}
	in, status, _, err := s.Press(t.Context(), appSrv, secret, "C0FIN", ts, "reconcile_ack", user)
	if err != nil || status != http.StatusOK || len(got) != 1 {
		t.Fatalf("press = %d, %v; the app got %d interactions", status, err, len(got))
	}
	ic := got[0]
	if ic.Type != slack.InteractionTypeBlockActions || ic.Container.ChannelID != "C0FIN" || ic.Container.MessageTs != ts ||
		ic.User.ID != "U9" || ic.User.Name != "Ana" || len(ic.ActionCallback.BlockActions) != 1 ||
		ic.ActionCallback.BlockActions[0].ActionID != "reconcile_ack" || ic.ActionCallback.BlockActions[0].Value != "fp1" || ic.TriggerID == "" {
		t.Errorf("the press as the app read it: %+v", ic)
	}
	if status, _, _ := slacktest.Sign("wrong", time.Now(), in.Body).Post(t.Context(), appSrv); status != http.StatusUnauthorized {
		t.Errorf("a press signed with another secret = %d, want the app's 401", status)
	}
	if _, _, _, err := s.Press(t.Context(), appSrv, secret, "C0FIN", ts, "other", user); !errors.Is(err, slacktest.ErrNoButton) {
		t.Errorf("pressing a button the message lacks = %v, want ErrNoButton", err)
	}

	modal := func(title string) slack.ModalViewRequest {
		return slack.ModalViewRequest{Type: slack.VTModal, CallbackID: "reconcile_ack", PrivateMetadata: "{}",
			Title:  slack.NewTextBlockObject(slack.PlainTextType, title, false, false),
			Blocks: slack.Blocks{BlockSet: []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "why?", false, false), nil, nil)}}}
	}
	v, err := client.OpenViewContext(t.Context(), ic.TriggerID, modal("Acknowledge"))
	if err != nil || v.ID == "" || len(s.Views()) != 1 || s.Views()[0].User != user || len(s.Violations()) != 0 {
		t.Errorf("views.open = %+v, %v; views %+v, violations %q", v, err, s.Views(), s.Violations())
	}
	if _, err := client.OpenViewContext(t.Context(), ic.TriggerID, modal("A title far over Slack's twenty-four")); err != nil ||
		len(s.Violations()) != 1 || !strings.Contains(s.Violations()[0], "title of 36 characters") {
		t.Errorf("a modal over the limits: %v, violations %q", err, s.Violations())
	}
	var se slack.SlackErrorResponse
	if _, err := client.OpenViewContext(t.Context(), "made-up", modal("x")); !errors.As(err, &se) || se.Err != "invalid_trigger_id" {
		t.Errorf("views.open with a trigger Slack never issued = %v, want invalid_trigger_id", err)
	}
	clock = clock.Add(slacktest.TriggerLife)
	if _, err := client.OpenViewContext(t.Context(), ic.TriggerID, modal("x")); !errors.As(err, &se) || se.Err != "expired_trigger_id" {
		t.Errorf("views.open three seconds after the press = %v, want expired_trigger_id", err)
	}

	if _, _, _, err := client.UpdateMessageContext(t.Context(), "C0FIN", ts, slack.MsgOptionText("acknowledged", false)); err != nil {
		t.Fatal(err)
	}
	if m := s.Messages()[0]; m.Text != "acknowledged" || len(m.Blocks) != 0 || len(s.Updates()) != 1 {
		t.Errorf("after chat.update the channel shows %+v; updates %+v", m, s.Updates())
	}
	var many []slack.Block
	for range 51 {
		many = append(many, slack.NewDividerBlock())
	}
	if _, _, _, err := client.UpdateMessageContext(t.Context(), "C0FIN", ts, slack.MsgOptionText("x", false), slack.MsgOptionBlocks(many...)); err != nil ||
		!strings.Contains(strings.Join(s.Violations(), "\n"), "update 2 (chat.update): 51 blocks") {
		t.Errorf("an update of 51 blocks: %v, violations %q", err, s.Violations())
	}
	if _, _, _, err := client.UpdateMessageContext(t.Context(), "C0OTHER", ts, slack.MsgOptionText("x", false)); !errors.As(err, &se) || se.Err != "message_not_found" {
		t.Errorf("chat.update of a message not in that channel = %v, want message_not_found", err)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
