package metrics

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/runner"
)

// scrape returns what Prometheus reads from h's /metrics.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

func completed(finished time.Time, objects int, kinds ...reconcile.FindingKind) *runner.Outcome {
	out := &runner.Outcome{Run: reconcile.Run{Finished: finished, Counts: reconcile.Counts{ProviderObjects: objects}}}
	for _, k := range kinds {
		out.Result.Findings = append(out.Result.Findings, reconcile.Finding{Kind: k, Severity: k.Severity()})
	}
	return out
}

// Each pass counts by outcome; a completed one sets the findings of every
// kind (zero for those it did not find, so that an alert on a kind
// resolves), adds the objects read and moves the last success; a failed
// one leaves the last completed pass's findings standing; one skipped for
// another's lock is not timed.
func TestObserve(t *testing.T) {
	m := New()
	h := m.Handler()
	t1 := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	m.Observe(completed(t1, 20, reconcile.Duplicate, reconcile.Orphan, reconcile.Orphan), nil, 3*time.Second)
	body := scrape(t, h)
	for _, want := range []string{
		`reconcile_runs_total{status="completed"} 1`,
		`reconcile_findings{kind="duplicate",severity="critical"} 1`,
		`reconcile_findings{kind="orphan",severity="high"} 2`,
		`reconcile_findings{kind="stale_lease",severity="warning"} 0`,
		`reconcile_provider_objects_fetched_total 20`,
		fmt.Sprintf(`reconcile_last_success_timestamp_seconds %g`, float64(t1.Unix())),
		`reconcile_run_duration_seconds_count 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("after a completed pass, /metrics lacks %q:\n%s", want, body)
		}
	}

	m.Observe(nil, &runner.FailedRunError{RunID: "run_x", Err: errors.New("read the provider: 503")}, time.Second)
	m.Observe(nil, fmt.Errorf("take run lock: %w", runner.ErrLocked), 0)
	t2 := t1.Add(time.Hour)
	m.Observe(completed(t2, 5, reconcile.Duplicate), nil, time.Second)
	body = scrape(t, h)
	for _, want := range []string{
		`reconcile_runs_total{status="completed"} 2`,
		`reconcile_runs_total{status="failed"} 1`,
		`reconcile_runs_total{status="skipped"} 1`,
		`reconcile_findings{kind="duplicate",severity="critical"} 1`,
		`reconcile_findings{kind="orphan",severity="high"} 0`,
		`reconcile_provider_objects_fetched_total 25`,
		fmt.Sprintf(`reconcile_last_success_timestamp_seconds %g`, float64(t2.Unix())),
		`reconcile_run_duration_seconds_count 3`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("after four passes, /metrics lacks %q:\n%s", want, body)
		}
	}

	// A failed pass between two scrapes keeps the findings it could not
	// check.
	m.Observe(nil, errors.New("read the provider: 503"), time.Second)
	if body := scrape(t, h); !strings.Contains(body, `reconcile_findings{kind="duplicate",severity="critical"} 1`+"\n") {
		t.Errorf("a failed pass reset the findings:\n%s", body)
	}
}

// A completed pass whose alerts cannot be delivered until someone looks
// counts one delivery failure under Slack's code; a pass whose alerts only
// wait for Slack to come back, or that was delivered, counts none.
func TestObserveDeliveryFailures(t *testing.T) {
	m := New()
	h := m.Handler()
	now := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	undeliverable := func(err error) *runner.Outcome {
		out := completed(now, 1)
		out.AlertErr = err
		return out
	}
	m.Observe(undeliverable(fmt.Errorf("drain: %w", &alerts.PermanentError{Reason: "shiny_new_refusal", Fix: "look"})), nil, time.Second)
	m.Observe(undeliverable(&alerts.PermanentError{Reason: "shiny_new_refusal", Fix: "look"}), nil, time.Second)
	m.Observe(undeliverable(&alerts.PermanentError{Reason: "invalid_auth", Fix: "set SLACK_BOT_TOKEN"}), nil, time.Second)
	m.Observe(undeliverable(errors.New("drain alerts: context canceled")), nil, time.Second)
	m.Observe(completed(now, 1), nil, time.Second)
	body := scrape(t, h)
	for _, want := range []string{
		`reconcile_alert_delivery_failures_total{code="shiny_new_refusal"} 2`,
		`reconcile_alert_delivery_failures_total{code="invalid_auth"} 1`,
		`reconcile_runs_total{status="completed"} 5`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if n := strings.Count(body, "reconcile_alert_delivery_failures_total{"); n != 2 {
		t.Errorf("%d delivery failure series, want 2 (a pass waiting for Slack is no failure):\n%s", n, body)
	}
}

// Two Metrics share nothing: each scheduler, and each test, has its own.
func TestMetricsAreNotGlobal(t *testing.T) {
	a, b := New(), New()
	a.Observe(completed(time.Now(), 1), nil, time.Second)
	if body := scrape(t, b.Handler()); strings.Contains(body, `reconcile_runs_total{status="completed"}`) {
		t.Errorf("a pass observed on one Metrics shows on another:\n%s", body)
	}
}

func TestServe(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := New()
	// Serve binds the port itself, on a port below Linux's ephemeral range
	// (32768 and up): a port found free by listening on port 0 and closing
	// it can be handed by the kernel to another process's port-0 listener
	// before Serve binds it, as a parallel package's test server.
	var (
		addr string
		stop func()
		err  error
	)
	for range 100 {
		addr = fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if stop, err = m.Serve(addr, log); !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Serve(%s): %v", addr, err)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok\n" {
		t.Errorf("GET /healthz = %d %q, want 200 ok", resp.StatusCode, b)
	}
	if _, err := m.Serve(addr, log); err == nil || !strings.HasPrefix(err.Error(), "metrics.listen "+addr+": ") {
		t.Errorf("Serve on a port in use = %v, want an error naming metrics.listen and the address", err)
	}
	stop()
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Errorf("GET /healthz after stop succeeded, want the server gone")
	}
}
