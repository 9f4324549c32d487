package main

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// runEnv is run with vars for the environment, so that two runs of one
// test can see different servers.
func (e *env) runEnv(vars map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := run(ctx, args, func(k string) string { return vars[k] }, &out, &errb)
	code = exitCode(err, &errb)
	for _, secret := range []string{testStripeKey, testSlackTok, "CANARY"} {
		if strings.Contains(out.String()+errb.String(), secret) {
			e.t.Errorf("reconcile %v printed a secret (%q)", args, secret)
		}
	}
	return code, out.String(), errb.String()
}

// poll runs query, which returns one boolean, until it is true; false if
// stop is closed first (or a minute, a guard against hanging, passes).
func (e *env) poll(stop <-chan struct{}, query string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		select {
		case <-stop:
			return false
		default:
		}
		var ok bool
		if err := e.pool.QueryRow(ctx, query).Scan(&ok); err != nil {
			e.t.Errorf("poll %q: %v", query, err)
			return false
		}
		if ok {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// Two `reconcile run` at once, as cron and an engineer might start them:
// the first's run lock connection is terminated at a step, and a second
// `run --wait` starts at that moment. The first exits 1 saying that it
// lost the lock and where it stopped (printing its report if it had
// applied), the second completes, and nothing is applied or posted twice.
func TestRunLockLost(t *testing.T) {
	t.Parallel()
	for _, step := range []struct {
		name string
		// slack: the lock is lost at the first run's first Slack post;
		// otherwise at its first Stripe request.
		slack   bool
		stopped string
		// report: the first run applied, so it prints its report.
		report bool
	}{
		{name: "during the provider read", stopped: "this run stopped before applying; another run may hold it now"},
		{name: "during the drain", slack: true, report: true,
			stopped: "this run stopped while sending alerts (the rest stay in the outbox); another run may hold it now"},
	} {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// A refund whose answer was lost, which the provider confirms:
			// the one transition. seedDoubleRefund adds three findings.
			seedUnknownOutcome(t, e)
			seedDoubleRefund(t, e)

			var (
				secondDone              = make(chan struct{})
				code2                   int
				stdout2, stderr2        string
				startOnce               sync.Once
				firstVars, secondVars   = maps.Clone(e.vars), maps.Clone(e.vars)
				hookedURL, hookedTarget = "", http.Handler(e.stripe)
			)
			startSecond := func() {
				startOnce.Do(func() {
					go func() {
						defer close(secondDone)
						code2, stdout2, stderr2 = e.runEnv(secondVars, "run", "--since", "100h", "--wait")
					}()
				})
			}
			hook := func() {
				var killed int
				if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000)
					FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'reconcile run lock') t`).Scan(&killed); err != nil || killed != 1 {
					t.Errorf("terminated %d run lock sessions (%v), want 1", killed, err)
				}
				startSecond()
				if step.slack {
					// The first run's message is in flight: the second
					// waits for it to be recorded.
					if !e.poll(secondDone, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
						AND application_name = 'reconcile run lock' AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple'))`) {
						t.Errorf("the second run did not wait for the first's message in flight")
					}
					return
				}
				if !e.poll(secondDone, `SELECT epoch > 1 FROM reconcile.run_lock`) {
					t.Errorf("the second run never took the lock")
				}
			}
			if step.slack {
				hookedTarget = e.slack
			}
			var once sync.Once
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !step.slack || r.URL.Path == "/api/chat.postMessage" {
					once.Do(hook)
				}
				hookedTarget.ServeHTTP(w, r)
			}))
			defer srv.Close()
			hookedURL = srv.URL
			if step.slack {
				firstVars["SLACK_API_URL"] = hookedURL + "/api/"
			} else {
				firstVars["STRIPE_API_BASE"] = hookedURL
			}

			code1, stdout1, stderr1 := e.runEnv(firstVars, "run", "--since", "100h")
			startSecond() // if the hook never ran, the second run shows what a lone run does
			<-secondDone
			t.Logf("first run: exit %d; stderr's last line: %s", code1, lastLine(stderr1))
			if code1 != 1 || !strings.Contains(stderr1, "reconcile: ") || !strings.Contains(lastLine(stderr1), "the run lock was lost") ||
				!strings.Contains(lastLine(stderr1), step.stopped) {
				t.Errorf("the first run exited %d with %q; want 1 saying the lock was lost and %q", code1, lastLine(stderr1), step.stopped)
			}
			if got := strings.Contains(stdout1, "refund:4821:approved-request-7"); got != step.report {
				t.Errorf("the first run printed its report: %t, want %t:\n%s", got, step.report, stdout1)
			}
			if code2 != 0 {
				t.Errorf("the second run exited %d: %s", code2, lastLine(stderr2))
			}
			if !strings.Contains(stdout2, "refund:4821:approved-request-7") {
				t.Errorf("the second run's report lacks the duplicate:\n%s", stdout2)
			}
			if got := e.state("refund:4821:other"); got != "PAID" {
				t.Errorf("refund:4821:other is %s, want PAID", got)
			}
			var audit, runs, failed int
			if err := e.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM reconcile.transitions),
				(SELECT count(*) FROM reconcile.runs), (SELECT count(*) FROM reconcile.runs WHERE status <> 'completed')`).
				Scan(&audit, &runs, &failed); err != nil {
				t.Fatal(err)
			}
			wantRuns := 1
			if step.report {
				wantRuns = 2
			}
			if audit != 1 || runs != wantRuns || failed != 0 {
				t.Errorf("%d audit rows, %d run rows (%d not completed); want 1, %d, 0", audit, runs, failed, wantRuns)
			}
			msgs := e.slack.Messages()
			seen := map[string]bool{}
			for _, m := range msgs {
				if seen[m.Flat] || strings.Contains(m.Flat, "Possible repeat") || strings.Contains(m.Flat, "may repeat") {
					t.Errorf("posted twice, or marked as a possible repeat:\n%s", m.Flat)
				}
				seen[m.Flat] = true
			}
			if len(msgs) < 2 {
				t.Errorf("%d Slack messages, want the summary and the findings", len(msgs))
			}
			var unsent int
			if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM reconcile.outbox
				WHERE sent_at IS NULL OR outcome_unknown OR sending_since IS NOT NULL`).Scan(&unsent); err != nil {
				t.Fatal(err)
			}
			if unsent != 0 {
				t.Errorf("%d outbox rows unsent or of unknown outcome, want none", unsent)
			}
		})
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
