package main

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"reconcile/internal/pgtest"
	"reconcile/internal/slacktest"
	"reconcile/internal/stripesim"
)

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
	addr := pgtest.ClosedPort(t)
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
	// One slice at a time, so that a failing pass leaves no request of
	// another slice abandoned in flight, started but perhaps never seen
	// by the server.
	writeConfig(t, cfg, "stripe:\n  max_retries: 2\n  concurrency: 1\n")
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
		// Failed or not, the run logs its own peak memory last; this
		// process's, which the run shares, holds at least its heap.
		peak := logLine(t, stderr, "peak memory")
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if b, _ := peak["peak_rss_bytes"].(float64); b < float64(ms.HeapInuse) || peak["peak_rss_mib"] != float64(int64(b)>>20) {
			t.Errorf("%s: peak memory logged as %v bytes (%v MiB); the heap in use alone is %d bytes", tt.name,
				peak["peak_rss_bytes"], peak["peak_rss_mib"], ms.HeapInuse)
		}
	}
}

// An unreachable Slack names SLACK_API_URL's host, or the webhook's with
// its path (the webhook's secret) redacted; the run still completes.
func TestSlackUnreachableSaysWhere(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	addr := pgtest.ClosedPort(t)
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

// `config check --connect` checks each connection a run makes, one line
// each, and exits 1 when one fails; it posts nothing to Slack and reads
// Stripe once (docs/design.md, "Errors").
func TestConfigCheckConnect(t *testing.T) {
	e := newEnv(t)
	seedDoubleRefund(t, e)
	admin := e.vars["DATABASE_URL"]
	down := pgtest.ClosedPort(t)
	tests := []struct {
		name     string
		vars     map[string]string
		grants   string // a role of its own with these grants
		slack    slacktest.Faults
		code     int
		want     []string
		requests int // to Stripe
	}{
		{"all good", nil, "", slacktest.Faults{}, 0, []string{
			"ok   database: ", "holds every privilege a run needs",
			"ok   stripe: STRIPE_API_BASE http://127.0.0.1:", "(1 read)", "sk_test_… <redacted>",
			"ok   slack: auth.test accepted SLACK_BOT_TOKEN (SLACK_API_URL host 127.0.0.1:"}, 1},
		{"stripe and slack down", map[string]string{"STRIPE_API_BASE": "http://" + down, "SLACK_API_URL": "http://" + down + "/api/"},
			"", slacktest.Faults{}, 1, []string{
				"ok   database: ",
				"FAIL stripe: list 1 charge: no answer from Stripe (STRIPE_API_BASE host " + down + "): 1 attempt",
				"FAIL slack: auth.test: post to slack (SLACK_API_URL host " + down + "): ", "connection refused"}, 0},
		{"wrong stripe key", map[string]string{"STRIPE_API_KEY": "sk_test_CANARYwrongkey"}, "", slacktest.Faults{}, 1,
			[]string{"FAIL stripe: list 1 charge: stripe answered 401"}, 1},
		{"bad slack token", nil, "", slacktest.Faults{BadAuth: true}, 1,
			[]string{"FAIL slack: slack auth.test (SLACK_API_URL host 127.0.0.1:", "invalid_auth: the bot token is wrong or revoked"}, 1},
		{"webhook", map[string]string{"SLACK_BOT_TOKEN": "", "SLACK_CHANNEL": "", "SLACK_WEBHOOK_URL": "http://127.0.0.1:9/services/T0/B0/CANARYhook"},
			"", slacktest.Faults{}, 0, []string{
				"--   slack: an incoming webhook cannot be checked without posting to it (SLACK_WEBHOOK_URL host 127.0.0.1:9, path <redacted>); nothing was posted"}, 1},
		{"no slack", map[string]string{"SLACK_BOT_TOKEN": "", "SLACK_CHANNEL": ""}, "", slacktest.Faults{}, 0,
			[]string{"--   slack: slack is not configured: set SLACK_BOT_TOKEN and SLACK_CHANNEL, or SLACK_WEBHOOK_URL"}, 1},
		{"no stripe key", map[string]string{"STRIPE_API_KEY": ""}, "", slacktest.Faults{}, 1,
			[]string{"FAIL stripe: STRIPE_API_KEY is not set"}, 0},
		{"database down", map[string]string{"DATABASE_URL": "postgres://nobody:CANARYpw@" + down + "/x?connect_timeout=2"}, "", slacktest.Faults{}, 1,
			[]string{"FAIL database: database unreachable", "ok   stripe: ", "ok   slack: "}, 1},
		{"a grant missing", nil, "no paid_at", slacktest.Faults{}, 1,
			[]string{"FAIL database: database role \"reconciler_", "lacks what a run needs: UPDATE (paid_at) on public.obligations", "ok   stripe: "}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			saved := maps.Clone(e.vars)
			defer func() { e.vars = saved }()
			for k, v := range tt.vars {
				e.vars[k] = v
			}
			if tt.grants != "" {
				e.vars["DATABASE_URL"] = admin
				g := strings.Replace(readmeSQL(t, "ON obligations TO reconciler"), "provider_id, paid_at, updated_at", "provider_id, updated_at", 1)
				e.vars["DATABASE_URL"] = newRole(t, e, g)
			}
			e.slack.SetFaults(tt.slack)
			defer e.slack.SetFaults(slacktest.Faults{})
			e.stripe.ResetStats()
			posted := len(e.slack.Messages())
			code, stdout, stderr := e.run("config", "check", "--connect")
			if code != tt.code {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			if n := strings.Count(stdout[strings.Index(stdout, "# connections"):], "\n"); n != 4 {
				t.Errorf("%d lines after # connections, want a line per check:\n%s", n-1, stdout)
			}
			if tt.code == 1 && !strings.Contains(stderr, "checks failed") {
				t.Errorf("stderr %q, want it to say how many checks failed", stderr)
			}
			if n := e.stripe.Stats().Requests; n != tt.requests {
				t.Errorf("%d requests to Stripe, want %d", n, tt.requests)
			}
			if n := len(e.slack.Messages()) - posted; n != 0 {
				t.Errorf("posted %d Slack messages, want none", n)
			}
			if strings.Contains(stdout+stderr, "CANARY") {
				t.Errorf("a secret was printed:\n%s\n%s", stdout, stderr)
			}
		})
	}
}

// `config check` refuses what the configuration must not hold, naming the
// field, exit 2 (docs/design.md, "Errors").
func TestConfigCheckRefuses(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct{ yaml, want string }{
		{"schedule: \"@every -1h\"\n", "schedule: \"@every -1h\": the interval must be positive"},
		{"schedule: \"@every 0s\"\n", "schedule: \"@every 0s\": the interval must be positive"},
		{"schedule: \"0 0 30 2 *\"\n", "schedule: \"0 0 30 2 *\" never fires in the next 366 days"},
		{"lookback: 3h\n---\nlookback: 4h\n", "want one YAML document, found a second"},
		{"stripe:\n  concurrency: 1.5\n", "stripe.concurrency: want a whole number, got \"1.5\""},
		{"metrics:\n  listen: 127.0.0.1:99999\n", "metrics.listen: \"127.0.0.1:99999\": port \"99999\" must be a number from 0 to 65535"},
		{"serve:\n  listen: \"not a host:8080\"\n", "serve.listen: \"not a host:8080\": host \"not a host\" is neither"},
	} {
		cfg := filepath.Join(t.TempDir(), "c.yaml")
		writeConfig(t, cfg, tt.yaml)
		code, _, stderr := e.run("config", "check", "--config", cfg)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("config check of %q: exit %d, stderr %q; want 2 and %q", tt.yaml, code, stderr, tt.want)
		}
	}
}

// With stripe.accounts, the check lists the connected accounts as a run
// lists them, and names an account the key cannot reach.
func TestConfigCheckConnectAccounts(t *testing.T) {
	e := newEnv(t)
	if err := e.stripe.AddAccount(stripesim.Account{ID: "acct_1Shop", DisplayName: "Shop"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), `ALTER TABLE obligations ADD COLUMN stripe_account text`); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "reconcile.yaml")
	for _, tt := range []struct {
		accounts string
		code     int
		want     string
	}{
		{"all", 0, "ok   stripe: STRIPE_API_BASE http://127.0.0.1:"},
		{"[acct_1Shop]", 0, "it reaches the 1 connected account(s) stripe.accounts names"},
		{"[acct_1Shop, acct_2Gone]", 1, "FAIL stripe: stripe.accounts names acct_2Gone, which /v1/accounts does not list: the key cannot reach it"},
	} {
		writeConfig(t, path, "stripe:\n  accounts: "+tt.accounts+"\nobligations:\n  columns:\n    account: stripe_account\n")
		code, stdout, stderr := e.run("config", "check", "--connect", "--config", path)
		if code != tt.code || !strings.Contains(stdout, tt.want) {
			t.Errorf("accounts %s: exit %d, stdout:\n%s\nstderr: %s\nwant exit %d and %q", tt.accounts, code, stdout, stderr, tt.code, tt.want)
		}
	}
}
