package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/runner"
	"reconcile/internal/slacktest"
	"reconcile/internal/stripesim"
)

// oneObject decodes stdout as exactly one JSON object, failing the test
// if it holds anything else.
func oneObject(t *testing.T, name, stdout string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: stdout is not one JSON object: %v\n%q", name, err, stdout)
	}
	var more json.RawMessage
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: stdout holds more than one JSON object (%v): %q", name, err, stdout)
	}
	return m
}

// checkFailure checks a failure object: status failed, a one-line error
// containing want, and run_id exactly when wantRunID.
func checkFailure(t *testing.T, name string, m map[string]any, want string, wantRunID bool) string {
	t.Helper()
	if m["status"] != "failed" {
		t.Errorf("%s: status = %v, want failed", name, m["status"])
	}
	msg, _ := m["error"].(string)
	if !strings.Contains(msg, want) || strings.ContainsAny(msg, "\n\r") {
		t.Errorf("%s: error = %q, want one line containing %q", name, msg, want)
	}
	id, hasID := m["run_id"].(string)
	if hasID != wantRunID || hasID && !strings.HasPrefix(id, "run_") {
		t.Errorf("%s: run_id = %v (present %t), want present %t", name, m["run_id"], hasID, wantRunID)
	}
	for k := range m {
		if k != "status" && k != "error" && k != "run_id" {
			t.Errorf("%s: unexpected field %q in %v", name, k, m)
		}
	}
	return id
}

// A failed `run --format json` still prints one JSON object on stdout,
// where the README's crontab keeps it (README.md, "The JSON report"); the text format
// prints nothing there. The exit status is unchanged.
func TestRunFailedPrintsOneObject(t *testing.T) {
	e := newEnv(t)
	// Two attempts per request, so that a list that fails for good fails
	// fast (0 would mean the default, 8).
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("stripe:\n  max_retries: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("stripe list fails for good", func(t *testing.T) {
		e.stripe.SetFaults(stripesim.Faults{FailList: stripesim.ListRefunds})
		defer e.stripe.SetFaults(stripesim.Faults{})
		code, stdout, stderr := e.run("run", "--config", cfg, "--since", "2h", "--format", "json")
		if code != 1 {
			t.Fatalf("exit %d, want 1; stderr %s", code, stderr)
		}
		id := checkFailure(t, "stripe", oneObject(t, "stripe", stdout), "read the provider", true)
		// The id is the pass's: its failed row and its log lines carry it.
		var status string
		if err := e.pool.QueryRow(t.Context(), "SELECT status FROM reconcile.runs WHERE id = $1", id).Scan(&status); err != nil || status != "failed" {
			t.Errorf("run %s in reconcile.runs: status %q, %v; want failed", id, status, err)
		}
		if !strings.Contains(stderr, `"run_id":"`+id+`"`) {
			t.Errorf("no log line carries run_id %s:\n%s", id, stderr)
		}
		// The failure object's error is the line stderr ends with.
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		var m map[string]any
		_ = json.Unmarshal([]byte(stdout), &m)
		if last := lines[len(lines)-1]; last != "reconcile: "+m["error"].(string) {
			t.Errorf("stderr ends %q, failure object says %q", last, m["error"])
		}

		// A dry run is recorded nowhere, but its log lines name it.
		code, stdout, stderr = e.run("run", "--config", cfg, "--since", "2h", "--dry-run", "--format", "json")
		if code != 1 {
			t.Fatalf("dry run: exit %d, want 1; stderr %s", code, stderr)
		}
		id = checkFailure(t, "stripe dry run", oneObject(t, "stripe dry run", stdout), "read the provider", true)
		if !strings.Contains(stderr, `"run_id":"`+id+`"`) {
			t.Errorf("dry run: no log line carries run_id %s:\n%s", id, stderr)
		}

		code, stdout, _ = e.run("run", "--config", cfg, "--since", "2h")
		if code != 1 || stdout != "" {
			t.Errorf("text format: exit %d, stdout %q; want 1 and nothing", code, stdout)
		}
	})

	t.Run("database unreachable", func(t *testing.T) {
		saved := e.vars["DATABASE_URL"]
		defer func() { e.vars["DATABASE_URL"] = saved }()
		e.vars["DATABASE_URL"] = "postgres://nobody:CANARYpw@127.0.0.1:1/x?connect_timeout=2"
		code, stdout, _ := e.run("run", "--format", "json")
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		checkFailure(t, "database", oneObject(t, "database", stdout), "database unreachable", false)
		code, stdout, _ = e.run("run")
		if code != 1 || stdout != "" {
			t.Errorf("text format: exit %d, stdout %q; want 1 and nothing", code, stdout)
		}
	})

	t.Run("another run holds the lock", func(t *testing.T) {
		defer e.holdRunLock(t).Release(t.Context())
		code, stdout, _ := e.run("run", "--since", "2h", "--format", "json")
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		// No run_id: the pass never began, and its id is in no log line
		// and no row.
		checkFailure(t, "locked", oneObject(t, "locked", stdout), "holds the run lock", false)
		code, stdout, _ = e.run("run", "--since", "2h")
		if code != 1 || stdout != "" {
			t.Errorf("text format: exit %d, stdout %q; want 1 and nothing", code, stdout)
		}
	})

	// Usage and configuration errors (exit 2) print it too, once
	// --format json has been read: a night that failed for want of
	// DATABASE_URL leaves its record as any other.
	t.Run("usage errors", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			env  map[string]string
			args []string
			want string
		}{
			{"missing DATABASE_URL", map[string]string{"DATABASE_URL": ""}, nil, "DATABASE_URL is not set"},
			{"missing stripe key", map[string]string{"STRIPE_API_KEY": ""}, nil, "STRIPE_API_KEY is not set"},
			{"bad fail-on", nil, []string{"--fail-on", "loud"}, "--fail-on"},
			{"unknown flag after --format", nil, []string{"--sinse", "1h"}, "sinse"},
		} {
			saved := map[string]string{}
			for k, v := range tt.env {
				saved[k], e.vars[k] = e.vars[k], v
			}
			code, stdout, _ := e.run(append([]string{"run", "--format", "json"}, tt.args...)...)
			if code != 2 {
				t.Errorf("%s: exit %d, want 2", tt.name, code)
			}
			checkFailure(t, tt.name, oneObject(t, tt.name, stdout), tt.want, false)
			code, stdout, _ = e.run(append([]string{"run"}, tt.args...)...)
			if code != 2 || stdout != "" {
				t.Errorf("%s, text format: exit %d, stdout %q; want 2 and nothing", tt.name, code, stdout)
			}
			for k, v := range saved {
				e.vars[k] = v
			}
		}
		// The flag parser stops at the first bad flag: before --format it
		// cannot know that JSON was asked for, and prints nothing.
		if code, stdout, _ := e.run("run", "--sinse", "1h", "--format", "json"); code != 2 || stdout != "" {
			t.Errorf("unknown flag before --format: exit %d, stdout %q; want 2 and nothing", code, stdout)
		}
		// -h is no failure.
		if code, stdout, _ := e.run("run", "--format", "json", "-h"); code != 0 || strings.Contains(stdout, `"failed"`) {
			t.Errorf("-h: exit %d, stdout %q; want 0 and the usage", code, stdout)
		}
	})

	// A completed run whose alerts cannot be delivered exits 1 with its
	// report, and only its report: for a bad token, and for an error code
	// this version does not know. Each run asks Slack once, keeps the rows
	// unsent, and logs one error line naming Slack's code.
	t.Run("alerts undeliverable", func(t *testing.T) {
		now := time.Now().UTC().Truncate(time.Second)
		e.add(reconcile.ProviderObject{ID: "ch_orphan", Kind: reconcile.Charge, Money: usd(500), Status: reconcile.Succeeded,
			Created: reconcile.StampOf(now.Add(-time.Hour)), Metadata: map[string]string{"_key": "k-orphan"}})
		defer e.slack.SetFaults(slacktest.Faults{})
		for _, tt := range []struct {
			name   string
			faults slacktest.Faults
			code   string
		}{
			{"bad token", slacktest.Faults{BadAuth: true}, "invalid_auth"},
			{"a code this version does not know", slacktest.Faults{Error: "shiny_new_refusal"}, "shiny_new_refusal"},
			{"the same again", slacktest.Faults{Error: "shiny_new_refusal"}, "shiny_new_refusal"},
		} {
			e.slack.SetFaults(tt.faults)
			before := e.slack.Requests()
			code, stdout, stderr := e.run("run", "--since", "2h", "--format", "json")
			if code != 1 {
				t.Fatalf("%s: exit %d, want 1; stderr %s", tt.name, code, stderr)
			}
			m := oneObject(t, "alerts", stdout)
			if _, ok := m["findings"]; !ok || m["status"] != nil {
				t.Errorf("%s: stdout = %v, want the report", tt.name, m)
			}
			if n := e.slack.Requests() - before; n != 1 {
				t.Errorf("%s: the run asked Slack %d times, want once", tt.name, n)
			}
			var loud []map[string]any
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			for _, l := range lines {
				var rec map[string]any
				if json.Unmarshal([]byte(l), &rec) == nil && rec["level"] == "ERROR" {
					loud = append(loud, rec)
				}
			}
			if len(loud) != 1 || loud[0]["msg"] != "alerts cannot be delivered" || loud[0]["code"] != tt.code {
				t.Errorf("%s: error lines %v, want one \"alerts cannot be delivered\" with code %s", tt.name, loud, tt.code)
			}
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "reconcile: slack: "+tt.code+": ") {
				t.Errorf("%s: stderr ends %q, want the fix for %s", tt.name, last, tt.code)
			}
			var unsent int
			if err := e.pool.QueryRow(t.Context(), "SELECT count(*) FROM reconcile.outbox WHERE sent_at IS NULL AND NOT outcome_unknown").Scan(&unsent); err != nil || unsent == 0 {
				t.Errorf("%s: %d rows unsent and known (%v), want the run's alerts kept for when it is fixed", tt.name, unsent, err)
			}
		}
	})
}

// The failure object's error is one line with every secret redacted,
// whatever the error carried, and run_id comes from the FailedRunError.
func TestWriteFailure(t *testing.T) {
	cause := errors.New("connect postgres://app:CANARYpw@db:5432/pay failed:\n  key sk_test_CANARYsecret9f0123456789 rejected,\ttoken xoxb-CANARY-1")
	for _, tt := range []struct {
		name  string
		err   error
		runID string
	}{
		{"unwrapped", failed(cause), ""},
		{"from a pass", failed(&runner.FailedRunError{RunID: "run_20261130T020000Z_1a2b3c4d", Err: cause}), "run_20261130T020000Z_1a2b3c4d"},
	} {
		var b bytes.Buffer
		writeFailure(&b, tt.err)
		var f failure
		if err := json.Unmarshal(b.Bytes(), &f); err != nil {
			t.Fatalf("%s: %v: %q", tt.name, err, b.String())
		}
		if f.Status != "failed" || f.RunID != tt.runID {
			t.Errorf("%s: %+v, want status failed and run_id %q", tt.name, f, tt.runID)
		}
		if strings.Contains(f.Error, "CANARY") || strings.ContainsAny(f.Error, "\n\t") ||
			!strings.HasPrefix(f.Error, "connect postgres://app:<redacted>@db:5432/pay failed: key <redacted> rejected,") {
			t.Errorf("%s: error = %q, want one redacted line", tt.name, f.Error)
		}
	}
}
