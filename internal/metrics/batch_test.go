package metrics

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"reconcile"
	"reconcile/internal/metrics/metricstest"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

var (
	lastOK  = time.Date(2026, 11, 30, 2, 0, 7, 0, time.UTC)
	readAt  = time.Date(2026, 11, 30, 2, 1, 0, 0, time.UTC)
	queued  = readAt.Add(-90 * time.Second)
	big53   = int64(1) << 53
	usdOpen = []store.FindingRecord{
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical, PaidOut: true, AtRisk: reconcile.Money{Amount: 8900, Currency: "usd"}}},
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical, PaidOut: true, AtRisk: reconcile.Money{Amount: 100, Currency: "usd"}},
			AcknowledgedAt: readAt},
		{Finding: reconcile.Finding{Kind: reconcile.UnresolvedUnknown, Severity: reconcile.Warning, AtRisk: reconcile.Money{Amount: big53, Currency: "eur"}}},
	}
)

func completedRun() BatchRun {
	return BatchRun{
		Status: StatusCompleted, Duration: 2500 * time.Millisecond,
		Stripe: &sources.ListStats{Requests: 9, Retries: 3, RateLimited: 2},
		Store: &StoreFigures{Vitals: store.Vitals{Undelivered: 4, OldestUndelivered: queued, LastCompleted: lastOK},
			Open: usdOpen, Now: readAt},
	}
}

// checkCompleted checks every figure of completedRun as fams holds them.
func checkCompleted(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	metricstest.Check(t, "a completed run", fams, []metricstest.Want{
		metricstest.W("reconcile_last_run_status", 1, "status", "completed"),
		metricstest.W("reconcile_last_run_status", 0, "status", "failed"),
		metricstest.W("reconcile_last_run_duration_seconds", 2.5),
		metricstest.W("reconcile_last_success_timestamp_seconds", float64(lastOK.Unix())),
		metricstest.W("reconcile_last_run_stripe_requests", 9),
		metricstest.W("reconcile_last_run_stripe_retries", 3),
		metricstest.W("reconcile_last_run_stripe_rate_limited", 2),
		metricstest.W("reconcile_outbox_backlog", 4),
		metricstest.W("reconcile_outbox_oldest_age_seconds", 90),
		metricstest.W("reconcile_open_findings", 1, "kind", "duplicate", "severity", "critical", "acknowledged", "false"),
		metricstest.W("reconcile_open_findings", 1, "kind", "duplicate", "severity", "critical", "acknowledged", "true"),
		metricstest.W("reconcile_open_findings", 1, "kind", "unresolved_unknown", "severity", "warning", "acknowledged", "false"),
		metricstest.W("reconcile_open_findings", 0, "kind", "orphan", "severity", "high", "acknowledged", "false"),
		metricstest.W("reconcile_open_money_minor_units", 9000, "currency", "usd", "meaning", "paid_out_too_much"),
		// 2^53 minor units: still exact as a float64.
		metricstest.W("reconcile_open_money_minor_units", float64(big53), "currency", "eur", "meaning", "unconfirmed"),
	})
	if n := len(fams["reconcile_open_money_minor_units"].GetMetric()); n != 2 {
		t.Errorf("%d money series, want 2 (one per currency and meaning with money open)", n)
	}
}

// The textfile holds every figure of a completed run, as Prometheus's own
// parser reads it; it is 0644 and nothing of the write is left beside it.
func TestWriteTextfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reconcile.prom")
	if err := WriteTextfile(path, completedRun()); err != nil {
		t.Fatal(err)
	}
	fams, err := ParseText(path)
	if err != nil {
		t.Fatalf("Prometheus's text parser refuses the file: %v", err)
	}
	checkCompleted(t, fams)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", fi.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %v, want the file alone", entries)
	}
	// node_exporter refuses timestamps in a textfile.
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(line, "#") && len(strings.Fields(line)) != 2 {
			t.Errorf("line %q is not a name and a value", line)
		}
	}
}

// A run that could not read the store (the database down) replaces what
// it knows and keeps the rest of the file: the last success does not move
// and the findings stand. One that could replaces the whole file: counts
// its pass did not return are gone, not stale.
func TestWriteTextfileFailedRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reconcile.prom")
	if err := WriteTextfile(path, completedRun()); err != nil {
		t.Fatal(err)
	}
	if err := WriteTextfile(path, BatchRun{Status: StatusFailed, Duration: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	fams, err := ParseText(path)
	if err != nil {
		t.Fatal(err)
	}
	metricstest.Check(t, "after a failed run without the store", fams, []metricstest.Want{
		metricstest.W("reconcile_last_run_status", 1, "status", "failed"),
		metricstest.W("reconcile_last_run_status", 0, "status", "completed"),
		metricstest.W("reconcile_last_run_duration_seconds", 10),
		metricstest.W("reconcile_last_success_timestamp_seconds", float64(lastOK.Unix())),
		metricstest.W("reconcile_open_findings", 1, "kind", "duplicate", "severity", "critical", "acknowledged", "false"),
		metricstest.W("reconcile_outbox_backlog", 4),
	})
	// The completed run's Stripe figures are not this run's: gone.
	for _, gone := range []string{"reconcile_last_run_stripe_requests", "reconcile_last_run_stripe_retries", "reconcile_last_run_stripe_rate_limited"} {
		if _, ok := fams[gone]; ok {
			t.Errorf("after a failed run without the store, the last run's %s is still there: %v", gone, fams[gone])
		}
	}

	failed := completedRun()
	failed.Status, failed.Stripe, failed.Store.Open = StatusFailed, nil, nil
	if err := WriteTextfile(path, failed); err != nil {
		t.Fatal(err)
	}
	if fams, err = ParseText(path); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"reconcile_last_run_stripe_requests", "reconcile_open_money_minor_units"} {
		if _, ok := fams[gone]; ok {
			t.Errorf("after a failed run that read the store, %s is still there: %v", gone, fams[gone])
		}
	}
	metricstest.Check(t, "after a failed run that read the store", fams, []metricstest.Want{
		metricstest.W("reconcile_last_success_timestamp_seconds", float64(lastOK.Unix())),
	})
}

// Money beyond 2^53 minor units is rounded to the nearest float64, never
// wrapped or lost.
func TestMoneyBeyondExact(t *testing.T) {
	fs := []store.FindingRecord{
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, PaidOut: true, AtRisk: reconcile.Money{Amount: math.MaxInt64, Currency: "usd"}}},
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, PaidOut: true, AtRisk: reconcile.Money{Amount: math.MaxInt64, Currency: "usd"}}},
	}
	reg := BatchRun{Status: StatusCompleted, Store: &StoreFigures{Open: fs}}.Registry()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() == "reconcile_open_money_minor_units" {
			if got, want := mf.GetMetric()[0].GetGauge().GetValue(), 2*float64(math.MaxInt64); got != want {
				t.Errorf("two MaxInt64 = %v, want %v", got, want)
			}
			return
		}
	}
	t.Error("no money series")
}

// Push PUTs the whole group when the run read the store and POSTs (adds)
// when it could not; credentials in the URL go as basic auth and never
// into an error.
func TestPush(t *testing.T) {
	type req struct{ method, path, user, pass string }
	var got []req
	var bodies []string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		got = append(got, req{r.Method, r.URL.Path, u, p})
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		w.WriteHeader(status)
	}))
	defer srv.Close()
	gw := strings.Replace(srv.URL, "http://", "http://pusher:s3cretPW@", 1)
	ctx := context.Background()
	if err := Push(ctx, gw, "db:5432/payments", completedRun()); err != nil {
		t.Fatal(err)
	}
	if err := Push(ctx, gw, "db:5432/payments", BatchRun{Status: StatusFailed, Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	// The instance has a slash: the client encodes it in base64.
	want := []req{
		{http.MethodPut, "/metrics/job/reconcile/instance@base64/ZGI6NTQzMi9wYXltZW50cw", "pusher", "s3cretPW"},
		{http.MethodPost, "/metrics/job/reconcile/instance@base64/ZGI6NTQzMi9wYXltZW50cw", "pusher", "s3cretPW"},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("requests = %+v, want %+v", got, want)
	}
	if len(bodies) == 2 && strings.Contains(bodies[1], "reconcile_last_success_timestamp_seconds") {
		t.Errorf("a run that did not read the store pushed a last success")
	}

	status = http.StatusBadRequest
	err := Push(ctx, gw, "x", completedRun())
	if err == nil || strings.Contains(err.Error(), "s3cretPW") || !strings.Contains(err.Error(), "400") {
		t.Errorf("push refused: err = %v, want one naming the status without the password", err)
	}
	srv.Close()
	err = Push(ctx, gw, "x", completedRun())
	if err == nil || strings.Contains(err.Error(), "s3cretPW") {
		t.Errorf("gateway down: err = %v, want one without the password", err)
	}
}

// The parser the tests read the textfile with is Prometheus's text
// parser, and it refuses what node_exporter would.
func TestParseTextIsStrict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.prom")
	os.WriteFile(path, []byte("reconcile_x{a=\"1\" 2\n"), 0o644)
	if _, err := ParseText(path); err == nil {
		t.Error("a malformed line parsed")
	}
}

// A textfile that cannot be written is an error naming metrics.textfile,
// and the file already there is left whole.
func TestWriteTextfileFails(t *testing.T) {
	dir := t.TempDir()
	if err := WriteTextfile(filepath.Join(dir, "gone", "r.prom"), completedRun()); err == nil ||
		!strings.HasPrefix(err.Error(), "metrics.textfile: ") {
		t.Errorf("a missing directory: err = %v, want one naming metrics.textfile", err)
	}
	// A directory where the file should be: the rename fails, the
	// temporary file is removed.
	path := filepath.Join(dir, "r.prom")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteTextfile(path, completedRun()); err == nil {
		t.Error("writing over a directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %v after a failed write, want what was there", entries)
	}
}
