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
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

var (
	lastOK  = time.Date(2026, 11, 30, 2, 0, 7, 0, time.UTC)
	readAt  = time.Date(2026, 11, 30, 2, 1, 0, 0, time.UTC)
	queued  = readAt.Add(-90 * time.Second)
	big53   = int64(1) << 53
	usdOpen = []store.FindingRecord{
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical, AtRisk: reconcile.Money{Amount: 8900, Currency: "usd"}}},
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical, AtRisk: reconcile.Money{Amount: 100, Currency: "usd"}},
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

// value is the one sample of name whose labels are labels (name=value
// pairs); it fails the test when there is none.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)/2
		for i := 0; match && i+1 < len(labels); i += 2 {
			match = got[labels[i]] == labels[i+1]
		}
		if match {
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v among %v", name, labels, mf.GetMetric())
	return 0
}

// checkCompleted checks every figure of completedRun as fams holds them.
func checkCompleted(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reconcile_last_run_status", []string{"status", "completed"}, 1},
		{"reconcile_last_run_status", []string{"status", "failed"}, 0},
		{"reconcile_last_run_duration_seconds", nil, 2.5},
		{"reconcile_last_success_timestamp_seconds", nil, float64(lastOK.Unix())},
		{"reconcile_last_run_stripe_requests", nil, 9},
		{"reconcile_last_run_stripe_retries", nil, 3},
		{"reconcile_last_run_stripe_rate_limited", nil, 2},
		{"reconcile_outbox_backlog", nil, 4},
		{"reconcile_outbox_oldest_age_seconds", nil, 90},
		{"reconcile_open_findings", []string{"kind", "duplicate", "severity", "critical", "acknowledged", "false"}, 1},
		{"reconcile_open_findings", []string{"kind", "duplicate", "severity", "critical", "acknowledged", "true"}, 1},
		{"reconcile_open_findings", []string{"kind", "unresolved_unknown", "severity", "warning", "acknowledged", "false"}, 1},
		{"reconcile_open_findings", []string{"kind", "orphan", "severity", "high", "acknowledged", "false"}, 0},
		{"reconcile_open_money_minor_units", []string{"currency", "usd", "meaning", "paid_out_too_much"}, 9000},
		// 2^53 minor units: still exact as a float64.
		{"reconcile_open_money_minor_units", []string{"currency", "eur", "meaning", "unconfirmed"}, float64(big53)},
	} {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
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
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reconcile_last_run_status", []string{"status", "failed"}, 1},
		{"reconcile_last_run_status", []string{"status", "completed"}, 0},
		{"reconcile_last_run_duration_seconds", nil, 10},
		{"reconcile_last_success_timestamp_seconds", nil, float64(lastOK.Unix())},
		{"reconcile_open_findings", []string{"kind", "duplicate", "severity", "critical", "acknowledged", "false"}, 1},
		{"reconcile_outbox_backlog", nil, 4},
	} {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("after a failed run without the store: %s%v = %v, want %v", c.name, c.labels, got, c.want)
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
	if got := value(t, fams, "reconcile_last_success_timestamp_seconds"); got != float64(lastOK.Unix()) {
		t.Errorf("last success = %v, want the store's %v", got, lastOK.Unix())
	}
}

// Money beyond 2^53 minor units is rounded to the nearest float64, never
// wrapped or lost.
func TestMoneyBeyondExact(t *testing.T) {
	fs := []store.FindingRecord{
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, AtRisk: reconcile.Money{Amount: math.MaxInt64, Currency: "usd"}}},
		{Finding: reconcile.Finding{Kind: reconcile.Duplicate, AtRisk: reconcile.Money{Amount: math.MaxInt64, Currency: "usd"}}},
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
