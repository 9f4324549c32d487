package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"

	"reconcile/internal/store"
	"reconcile/internal/web"
)

// series returns the lines of the text exposition in body whose metric is
// one of names, sorted.
func series(body string, names ...string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		name, _, _ := strings.Cut(l, "{")
		name, _, _ = strings.Cut(name, " ")
		if !strings.HasPrefix(l, "#") && slices.Contains(names, name) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// /metrics reads the store on the scrape: the outbox's backlog and its
// age, the open findings by kind, severity and acknowledgement, the money
// at risk per currency and meaning, and the last run.
func TestMetrics(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	ctx := t.Context()
	due, err := sd.s.Due(ctx, now, 100)
	if err != nil || len(due) < 2 {
		t.Fatalf("Due = %d alerts, %v; want the seeded run's", len(due), err)
	}
	if err := sd.s.MarkSent(ctx, due[0].ID, "C1", "1.1", now); err != nil {
		t.Fatal(err)
	}
	if _, err := sd.s.Ack(ctx, sd.dup.Fingerprint, "ana", "reversed", now); err != nil {
		t.Fatal(err)
	}
	failed := reconcile.Run{ID: "run-2", Trigger: reconcile.TriggerCron, Window: reconcile.Window{From: now, To: now.Add(10 * time.Minute)},
		Started: now.Add(10 * time.Minute), Finished: now.Add(12*time.Minute + 30*time.Second), Status: reconcile.RunFailed,
		Stripe: &reconcile.StripeStats{Retries: 4, RateLimited: 3}}
	if err := sd.s.RecordFailedRun(ctx, failed, "list stripe charges: 429 after 8 attempts"); err != nil {
		t.Fatal(err)
	}
	body := get(t, proxyHandler(t, sd.s), "/metrics")

	want := []string{
		fmt.Sprintf("reconcile_outbox_backlog %d", len(due)-1),
		"reconcile_outbox_oldest_age_seconds 3600", // queued at now, scraped an hour later
		`reconcile_open_money_minor_units{currency="eur",meaning="collected_wrong"} 1250`,
		`reconcile_open_money_minor_units{currency="usd",meaning="collected_wrong"} 3000`,
		`reconcile_open_money_minor_units{currency="usd",meaning="paid_out_too_much"} 13900`,
		`reconcile_last_run_status{status="completed"} 0`,
		`reconcile_last_run_status{status="failed"} 1`,
		"reconcile_last_run_duration_seconds 150",
		"reconcile_last_success_timestamp_seconds " + strconv.FormatFloat(float64(now.Unix()), 'g', -1, 64),
		"reconcile_last_run_stripe_rate_limited 3",
		"reconcile_last_run_stripe_retries 4",
		"reconcile_serve_scrape_errors_total 0",
	}
	got := series(body, "reconcile_outbox_backlog", "reconcile_outbox_oldest_age_seconds", "reconcile_open_money_minor_units",
		"reconcile_last_run_status", "reconcile_last_run_duration_seconds", "reconcile_last_success_timestamp_seconds",
		"reconcile_last_run_stripe_rate_limited", "reconcile_last_run_stripe_retries", "reconcile_serve_scrape_errors_total")
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/metrics (-want +got):\n%s\n%s", diff, body)
	}

	findings := series(body, "reconcile_open_findings")
	for _, w := range []string{
		`reconcile_open_findings{acknowledged="true",kind="duplicate",severity="critical"} 1`,
		`reconcile_open_findings{acknowledged="false",kind="duplicate",severity="critical"} 0`,
		`reconcile_open_findings{acknowledged="false",kind="orphan",severity="high"} 2`,
		`reconcile_open_findings{acknowledged="false",kind="amount_mismatch",severity="high"} 1`,
		`reconcile_open_findings{acknowledged="true",kind="orphan",severity="high"} 0`,
	} {
		if !slices.Contains(findings, w) {
			t.Errorf("/metrics lacks %s:\n%s", w, strings.Join(findings, "\n"))
		}
	}
	total := 0
	for _, l := range findings {
		var n int
		fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &n)
		total += n
	}
	if total != 4 || len(findings) != 2*len(reconcile.Kinds) {
		t.Errorf("/metrics counts %d open findings in %d series, want 4 in %d", total, len(findings), 2*len(reconcile.Kinds))
	}
}

// failingStore reads nothing.
type failingStore struct{ *store.Store }

func (failingStore) Vitals(context.Context) (store.Vitals, error) {
	return store.Vitals{}, errors.New("connection refused")
}

// A store that cannot be read leaves its figures out and counts the
// scrape as failed; /metrics still answers.
func TestMetricsStoreUnreadable(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, failingStore{sd.s})
	for i := 1; i <= 2; i++ {
		body := get(t, h, "/metrics")
		if got := series(body, "reconcile_outbox_backlog", "reconcile_open_findings", "reconcile_last_run_status"); len(got) != 0 {
			t.Errorf("an unreadable store's scrape shows %v", got)
		}
		// The counter is read in the same gather as the failing read, so a
		// scrape shows at least the failures before it.
		if got := series(body, "reconcile_serve_scrape_errors_total"); len(got) != 1 ||
			(got[0] != fmt.Sprintf("reconcile_serve_scrape_errors_total %d", i) && got[0] != fmt.Sprintf("reconcile_serve_scrape_errors_total %d", i-1)) {
			t.Errorf("scrape %d: errors %v", i, got)
		}
	}
}

// /metrics tells money totals: it asks the pages' sign-in, and in auth
// none answers loopback only.
func TestMetricsSignIn(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	if w := do(proxyHandler(t, sd.s), http.MethodGet, "/metrics", nil, map[string]string{web.DefaultProxyHeader: ""}); w.Code != http.StatusUnauthorized {
		t.Errorf("/metrics through the proxy without a user = %d, want 401", w.Code)
	}
	none, err := web.New(web.Options{Store: sd.s, Auth: web.Auth{Mode: web.AuthNone}})
	if err != nil {
		t.Fatal(err)
	}
	for addr, code := range map[string]int{"127.0.0.1:5000": http.StatusOK, "[::1]:5000": http.StatusOK, "192.0.2.9:5000": http.StatusForbidden} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		none.ServeHTTP(w, r)
		if w.Code != code {
			t.Errorf("auth none: /metrics from %s = %d, want %d", addr, w.Code, code)
		}
	}
	bh, err := basicHandler(t, sd.s, "basic_auth_users:\n  prometheus: "+hashOf(t, "scrape")+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if w := basicDo(bh, http.MethodGet, "/metrics", "", "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("auth basic: /metrics without credentials = %d, want 401", w.Code)
	}
	if w := basicDo(bh, http.MethodGet, "/metrics", "prometheus", "scrape", nil); w.Code != http.StatusOK ||
		!strings.Contains(w.Body.String(), "reconcile_outbox_backlog ") {
		t.Errorf("auth basic: /metrics as prometheus = %d:\n%s", w.Code, w.Body)
	}
}
