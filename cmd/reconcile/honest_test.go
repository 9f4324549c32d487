package main

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"reconcile/internal/stripesim"
)

// closedPort returns an address on loopback that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// logLine returns the first JSON log line on stderr whose msg is msg.
func logLine(t *testing.T, stderr, msg string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	t.Fatalf("no log line %q in stderr:\n%s", msg, stderr)
	return nil
}

// An unreachable Stripe ends the run with one line naming STRIPE_API_BASE's
// host and what was tried (docs/design.md, "Errors"), and the pass's log
// counts every attempt it made.
func TestStripeUnreachableSaysWhereAndWhat(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	addr := closedPort(t)
	e.vars["STRIPE_API_BASE"] = "http://" + addr + "/v1proxy?token=CANARYquery"
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, cfg, "stripe:\n  max_retries: 2\n  concurrency: 1\n")
	code, _, stderr := e.run("run", "--config", cfg, "--since", "2h")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	last := lastLine(stderr)
	for _, want := range []string{"reconcile: ", "no answer from Stripe (STRIPE_API_BASE host " + addr + "): 3 attempts over ", "connection refused"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q does not say %q", last, want)
		}
	}
	if strings.Contains(stderr, "CANARYquery") || strings.Contains(stderr, "v1proxy") {
		t.Errorf("stderr shows STRIPE_API_BASE's path or query, want its host alone:\n%s", stderr)
	}
	phases := logLine(t, stderr, "pass phases")
	// One slice at a time: the first request is tried three times and
	// fails the pass.
	if phases["stripe_requests"] != 3.0 || phases["stripe_retries"] != 2.0 {
		t.Errorf("pass log: stripe_requests %v, stripe_retries %v; want 3 and 2", phases["stripe_requests"], phases["stripe_retries"])
	}
}

// The pass's log counts every request the provider received, retries,
// retrievals and failed passes included.
func TestPassLogCountsEveryAttempt(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, cfg, "stripe:\n  max_retries: 2\n")
	for _, tt := range []struct {
		name   string
		faults stripesim.Faults
		code   int
	}{
		{"every request refused with 500", stripesim.Faults{ServerErrorEvery: 1}, 1},
		{"every third request refused with 500", stripesim.Faults{ServerErrorEvery: 3}, 0},
		{"no fault", stripesim.Faults{}, 0},
	} {
		e.stripe.SetFaults(tt.faults)
		e.stripe.ResetStats()
		code, _, stderr := e.run("run", "--config", cfg, "--since", "2h", "--dry-run")
		if code != tt.code {
			t.Fatalf("%s: exit %d, want %d; stderr:\n%s", tt.name, code, tt.code, stderr)
		}
		phases := logLine(t, stderr, "pass phases")
		st := e.stripe.Stats()
		if phases["stripe_requests"] != float64(st.Requests) || st.Requests == 0 {
			t.Errorf("%s: pass log says stripe_requests %v, the server received %d", tt.name, phases["stripe_requests"], st.Requests)
		}
		retries, _ := phases["stripe_retries"].(float64)
		if wantRetries := tt.faults.ServerErrorEvery != 0; (retries > 0) != wantRetries || int(retries) >= st.Requests {
			t.Errorf("%s: pass log says stripe_retries %v of %d requests", tt.name, phases["stripe_retries"], st.Requests)
		}
	}
}

// An unreachable Slack names SLACK_API_URL's host, or the webhook's with
// its path (the webhook's secret) redacted; the run still completes.
func TestSlackUnreachableSaysWhere(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	addr := closedPort(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, cfg, "alerts:\n  max_retries: 0\n")
	for _, tt := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"bot", map[string]string{"SLACK_API_URL": "http://" + addr + "/api/"}, "post to slack (SLACK_API_URL host " + addr + "): "},
		{"webhook", map[string]string{"SLACK_BOT_TOKEN": "", "SLACK_CHANNEL": "",
			"SLACK_WEBHOOK_URL": "http://" + addr + "/services/T0/B0/CANARYhookpath"},
			"post to slack (SLACK_WEBHOOK_URL host " + addr + ", path <redacted>): "},
	} {
		for k, v := range tt.vars {
			e.vars[k] = v
		}
		code, _, stderr := e.run("run", "--config", cfg, "--since", "2h")
		if code != 0 {
			t.Fatalf("%s: exit %d, want 0 (Slack down still completes); stderr:\n%s", tt.name, code, stderr)
		}
		stopped := logLine(t, stderr, "slack delivery stopped; undelivered alerts stay in the outbox for the next run")
		if reason, _ := stopped["reason"].(string); !strings.Contains(reason, tt.want) || !strings.Contains(reason, "connection refused") {
			t.Errorf("%s: reason %q, want it to contain %q and the cause", tt.name, reason, tt.want)
		}
		if strings.Contains(stderr, "CANARYhookpath") || strings.Contains(stderr, "/services/") {
			t.Errorf("%s: stderr shows the webhook's path:\n%s", tt.name, stderr)
		}
	}
}
