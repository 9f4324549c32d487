package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"reconcile/internal/config"
	"reconcile/internal/pgtest"
	"reconcile/internal/slacktest"
)

// serve refuses an address others can reach when nobody signs in, before
// it needs a database.
func TestServeRefusesNonLoopbackWithAuthNone(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.10:8080", "[::]:8080", "example.com:8080"} {
		var stderr bytes.Buffer
		err := run(t.Context(), []string{"serve", "--listen", addr}, func(string) string { return "" }, io.Discard, &stderr)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), "serve.auth is none") {
			t.Errorf("serve --listen %s = %v, want a usage error naming serve.auth", addr, err)
		}
	}
	// An address no listener could take is refused as serve.listen's
	// would be, by serve and demo --serve alike.
	for _, args := range [][]string{{"serve", "--listen", "127.0.0.1:99999"}, {"demo", "--serve", "--listen", "127.0.0.1"}} {
		err := run(t.Context(), args, func(string) string { return "" }, io.Discard, io.Discard)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), "--listen:") {
			t.Errorf("%v = %v, want a usage error naming --listen", args, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080"} {
		if !loopback(addr) {
			t.Errorf("loopback(%s) = false", addr)
		}
	}
}

// serving runs `reconcile` with args and --listen on a free loopback
// port until stop: it returns the address, the body of the first GET /
// that answered (within a minute), and stop, which ends the command and
// returns its error and what it printed.
func serving(t *testing.T, getenv func(string) string, args ...string) (addr string, resp *http.Response, body string, stop func() (string, error)) {
	t.Helper()
	addr = pgtest.ClosedPort(t)
	var err error
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	var stdout bytes.Buffer
	go func() {
		done <- run(ctx, append(args, "--listen", addr), getenv, &stdout, io.Discard)
	}()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err = http.Get(fmt.Sprintf("http://%s/", addr)); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
	}
	if err != nil {
		t.Fatalf("GET / on %s: %v", strings.Join(args, " "), err)
	}
	stop = func() (string, error) {
		cancel()
		select {
		case err := <-done:
			return stdout.String(), err
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop when its context ended", strings.Join(args, " "))
			return "", nil
		}
	}
	return addr, resp, body, stop
}

// serve answers its page with the security headers, prints its address
// and stops cleanly when its context ends.
func TestServeUntilCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr, resp, body, stop := serving(t, func(k string) string { return e.vars[k] }, "serve")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Open findings") ||
		!strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("GET / = %d, CSP %q:\n%s", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), body)
	}
	// Without SLACK_SIGNING_SECRET Slack's buttons are off.
	if resp, err := http.Post("http://"+addr+"/slack/interactions", "application/x-www-form-urlencoded", strings.NewReader("payload=%7B%7D")); err != nil ||
		resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /slack/interactions without a signing secret = %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	stdout, err := stop()
	if err != nil {
		t.Errorf("serve after its context ended = %v, want nil", err)
	}
	if !strings.Contains(stdout, "http://"+addr+"/") {
		t.Errorf("serve printed %q, want its address", stdout)
	}
}

// `demo --serve` leaves the demo's data up behind the findings page, so a
// newcomer sees the double refund of order 4821 there within a minute.
func TestDemoServe(t *testing.T) {
	t.Parallel()
	addr, _, body, stop := serving(t, func(k string) string {
		if k == "DATABASE_URL" {
			return pgtest.AdminURL()
		}
		return ""
	}, "demo", "--serve")
	for _, want := range []string{"refund:4821:approved-request-7", "re_4821b", "Paid twice", "Paid out too much"} {
		if !strings.Contains(body, want) {
			t.Errorf("the demo's page lacks %q:\n%s", want, body)
		}
	}
	stdout, err := stop()
	if err != nil {
		t.Errorf("demo --serve after its context ended = %v, want nil", err)
	}
	if !strings.Contains(stdout, "http://"+addr+"/") {
		t.Errorf("demo --serve did not print the page's address:\n%s", stdout)
	}
	if err := run(t.Context(), []string{"demo", "--serve", "--listen", "0.0.0.0:0"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Error("demo --serve on a non-loopback address started")
	}
}

// serve turns Slack's buttons on only with both the bot token and the
// signing secret, says once when they are off, and never logs the secret.
func TestServeSlackButtons(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if o := slackButtons(cfg, log); o.SigningSecret != "" || o.Client != nil || strings.Count(logs.String(), "slack buttons are off") != 1 {
		t.Errorf("without a secret: %+v, logged %q", o, logs.String())
	}
	logs.Reset()
	cfg.Env.SlackSigningSecret = "signing-canary"
	if o := slackButtons(cfg, log); o.Client != nil || !strings.Contains(logs.String(), "SLACK_BOT_TOKEN is not") {
		t.Errorf("a secret without a token: %+v, logged %q", o, logs.String())
	}
	logs.Reset()
	cfg.Env.SlackBotToken, cfg.Env.SlackChannel, cfg.Serve.PublicURL = "xoxb-canary", "C1", "https://reconcile.example.com"
	o := slackButtons(cfg, log)
	if o.Client == nil || o.SigningSecret != "signing-canary" || o.PublicURL != cfg.Serve.PublicURL || logs.Len() != 0 {
		t.Errorf("with both: client %v, secret set %t, public URL %q, logged %q", o.Client != nil, o.SigningSecret != "", o.PublicURL, logs.String())
	}
	if strings.Contains(logs.String(), "canary") {
		t.Errorf("a secret was logged: %s", logs.String())
	}
}

// The button end to end through the commands: `run` with the signing
// secret posts the double refund with an Acknowledge button; `serve`
// with the same environment answers its press and submission as Slack
// sends them, acknowledges the finding as the Slack user and, before it
// stops, edits the message to say so.
func TestServeSlackButtonEndToEnd(t *testing.T) {
	t.Parallel()
	const secret = "serve-test-signing-secret"
	e := newEnv(t)
	seedDoubleRefund(t, e)
	e.vars["SLACK_SIGNING_SECRET"] = secret
	if code, _, stderr := e.run("run", "--since", "100h"); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	var m slacktest.Message
	for _, msg := range e.slack.Messages() {
		if strings.Contains(msg.Text, "Paid twice (critical)") {
			m = msg
		}
	}
	if !strings.Contains(string(m.Blocks), `"action_id":"reconcile_ack"`) {
		t.Fatalf("the double refund's message has no button: %+v", m)
	}
	addr, _, _, stop := serving(t, func(k string) string { return e.vars[k] }, "serve")
	url := "http://" + addr + "/slack/interactions"
	if status, _, _ := slacktest.Sign("wrong", time.Now(), "payload=%7B%7D").Post(t.Context(), url); status != http.StatusUnauthorized {
		t.Errorf("a request signed with another secret = %d, want 401", status)
	}
	ana := slacktest.User{ID: "U0ANA", Name: "ana"}
	if _, status, body, err := e.slack.Press(t.Context(), url, secret, m.Channel, m.TS, "reconcile_ack", ana); err != nil || status != http.StatusOK {
		t.Fatalf("press = %d %q, %v", status, body, err)
	}
	views := e.slack.Views()
	if len(views) != 1 {
		t.Fatalf("views after the press: %+v", views)
	}
	values := map[string]map[string]string{"reason": {"reason": "refund reversed, FIN-7"}}
	if _, status, body, err := e.slack.Submit(t.Context(), url, secret, views[0].ID, values, ana); err != nil || status != http.StatusOK || body != "" {
		t.Fatalf("submit = %d %q, %v", status, body, err)
	}
	if _, err := stop(); err != nil {
		t.Fatalf("serve = %v", err)
	}
	var by, reason string
	if err := e.pool.QueryRow(t.Context(), `SELECT acknowledged_by, ack_reason FROM reconcile.findings WHERE kind = 'duplicate'`).Scan(&by, &reason); err != nil {
		t.Fatal(err)
	}
	if by != "ana (Slack U0ANA)" || reason != "refund reversed, FIN-7" {
		t.Errorf("the duplicate is acknowledged by %q for %q", by, reason)
	}
	for _, msg := range e.slack.Messages() {
		if msg.TS == m.TS && (!strings.Contains(msg.Flat, "Acknowledged by ana (Slack U0ANA)") || strings.Contains(string(msg.Blocks), `"type":"actions"`)) {
			t.Errorf("after serve stopped the message shows:\n%s", msg.Flat)
		}
	}
}
