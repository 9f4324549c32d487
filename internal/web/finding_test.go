package web_test

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/report"
	"reconcile/internal/store"
	"reconcile/internal/trace"
	"reconcile/internal/web"
)

// traced is the trace of the seeded duplicate, as trace.Assemble would
// give it: hostile text where outside text goes.
func traced(sd seeded) trace.Trace {
	return trace.Trace{
		Obligation: trace.Obligation{ID: hostile, Kind: "refund", IdempotencyKey: "key-<b>7</b>", ProviderID: "re_dup2",
			TargetID: "ch_dup", Amount: 8900, Currency: "usd", State: "PAID",
			CreatedAt: "2026-11-29T10:00:00Z", UpdatedAt: "2026-11-29T10:05:00Z", PaidAt: "2026-11-29T10:05:00Z"},
		Window: &report.Window{From: "2026-11-28T00:00:00Z", To: "2026-11-30T07:00:00Z"},
		Objects: []trace.Object{
			{ID: "re_dup1", Kind: "refund", Status: "succeeded", Amount: 8900, Currency: "usd", Target: "ch_dup", Created: "2026-11-29T10:01:00Z", Route: "idempotency_key"},
			{ID: "re_dup2", Kind: "refund", Status: "succeeded", Amount: 8900, Currency: "usd", Target: "ch_dup", Created: "2026-11-29T10:04:00Z", Route: "provider_id"},
		},
		Keys:        []trace.Key{{ObjectID: "re_dup1", Key: "key-<b>7</b>", EventID: "evt_1", EventType: "refund.created", Created: "2026-11-29T10:01:01Z"}},
		Transitions: []trace.Audit{{From: "CONFIRMATION_UNKNOWN", To: "PAID", ProviderID: "re_dup2", RunID: "run-0", At: "2026-11-29T10:05:00Z"}},
		Findings: []report.Finding{{Kind: "duplicate", Severity: "critical", Fingerprint: sd.dup.Fingerprint,
			FirstSeenRun: "run-1", FirstSeenAt: "2026-11-30T06:00:00Z"}},
		Alerts: []trace.Alert{{ID: 1, Event: "firing", Fingerprint: sd.dup.Fingerprint, RunID: "run-1",
			CreatedAt: "2026-11-30T06:00:00Z", SentAt: "2026-11-30T06:00:02Z", SlackChannel: "C0123", SlackTS: "1700000000.000001"}},
		Lookups: []trace.Lookup{}, Current: []report.Finding{},
	}
}

func TestFindingPageShowsTheTraceAsATimeline(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	var asked []string
	h, err := web.New(web.Options{Store: sd.s, Now: func() time.Time { return now.Add(time.Hour) },
		Auth: web.Auth{Mode: web.AuthProxy, TrustedProxies: []string{"10.0.0.0/24"}},
		Trace: func(_ context.Context, id string) (trace.Trace, error) {
			asked = append(asked, id)
			return traced(sd), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	body := get(t, h, "/findings/"+sd.dup.Fingerprint)
	if len(asked) != 1 || asked[0] != hostile {
		t.Errorf("traced %q, want the finding's obligation", asked)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "<b>7") {
		t.Errorf("the page holds outside text as markup:\n%s", body)
	}
	timeline := body[strings.Index(body, "<h2>Timeline</h2>"):]
	// In time order: the obligation, the first refund and the event that
	// told its key, the second refund, the transition, the finding, its
	// alert with a link to the message in Slack.
	order := []string{"Obligation created", "Stripe refund created", "Event refund.created", "evt_1",
		`href="https://dashboard.stripe.com/test/refunds/re_dup2"`, "Reconciler moved it CONFIRMATION_UNKNOWN → PAID",
		"Found: Paid twice (critical)", "Alert (firing) delivered to Slack",
		`href="https://slack.com/archives/C0123/p1700000000000001"`}
	at := 0
	for _, want := range order {
		i := strings.Index(timeline[at:], want)
		if i < 0 {
			t.Fatalf("timeline lacks %q after position %d:\n%s", want, at, timeline)
		}
		at += i
	}
	for _, want := range []string{template.HTMLEscapeString(hostile), "linked by idempotency key", "provider id",
		"What Stripe holds now, read from 2026-11-28T00:00:00Z", `action="/ack"`, `name="return" value="finding"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if w := do(h, http.MethodGet, "/findings/ffffffffffffffffffff", nil, nil); w.Code != http.StatusNotFound {
		t.Errorf("page of an unknown finding = %d, want 404", w.Code)
	}
}

func TestFindingPageOfAnOrphanShowsItsStripeObjects(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	m := store.NewMirror(sd.pool)
	seen := reconcile.ProviderObject{ID: "re_orph", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 5000, Currency: "usd"},
		Status: reconcile.Succeeded, RawStatus: "succeeded", Target: "ch_9", Created: reconcile.StampOf(now.Add(-5 * time.Hour))}
	if err := m.Save(t.Context(), store.MirrorUpdate{RunID: "run-1", Now: now, Seen: []store.SeenObjects{{At: now, Objects: []reconcile.ProviderObject{seen}}}}); err != nil {
		t.Fatal(err)
	}
	traces := 0
	h, err := web.New(web.Options{Store: sd.s, Mirror: m, Auth: web.Auth{Mode: web.AuthProxy, TrustedProxies: []string{"10.0.0.0/24"}},
		Trace: func(context.Context, string) (trace.Trace, error) { traces++; return trace.Trace{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	body := get(t, h, "/findings/"+sd.orphan.Fingerprint)
	if traces != 0 {
		t.Error("an orphan's page traced an obligation")
	}
	for _, want := range []string{"none: no obligation links to it", "Stripe&#39;s records as the last pass read them",
		`href="https://dashboard.stripe.com/test/refunds/re_orph"`, "USD 50.00", "ch_9", "no obligation links to it",
		"Found: Money moved outside the workflow (high)", "2026-11-30T01:00:00Z"} {
		if !strings.Contains(body, want) {
			t.Errorf("orphan page lacks %q:\n%s", want, body)
		}
	}
	// An object the mirror does not hold is said to be not read, not absent.
	body = get(t, h, "/findings/"+sd.orphanCharge.Fingerprint)
	if !strings.Contains(body, "<code>ch_orph</code> is not in the mirror: the last passes did not read it.") {
		t.Errorf("page of an orphan the mirror lacks does not say so:\n%s", body)
	}
}

func TestReopen(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, sd.s)
	same := map[string]string{"Sec-Fetch-Site": "same-origin"}
	fp := sd.dup.Fingerprint
	ack := url.Values{"fingerprint": {fp}, "reason": {"handled"}, "return": {"finding"}}
	if w := do(h, http.MethodPost, "/ack", ack, same); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/findings/"+fp {
		t.Fatalf("POST /ack from the finding's page = %d to %q, want 303 back to it", w.Code, w.Header().Get("Location"))
	}
	if body := get(t, h, "/findings/"+fp); !strings.Contains(body, `action="/reopen"`) || !strings.Contains(body, "acknowledged by [email]") {
		t.Errorf("an acknowledged finding's page offers no reopen or hides who acknowledged:\n%s", body)
	}
	if w := do(h, http.MethodPost, "/reopen", url.Values{"fingerprint": {fp}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); w.Code != http.StatusForbidden {
		t.Errorf("cross-site reopen = %d, want 403", w.Code)
	}
	if rec, _ := sd.s.Finding(t.Context(), fp); rec.AcknowledgedAt.IsZero() {
		t.Fatal("a refused reopen cleared the acknowledgement")
	}
	if w := do(h, http.MethodPost, "/reopen", url.Values{"fingerprint": {fp}, "back": {"kind=duplicate"}}, same); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/?kind=duplicate" {
		t.Fatalf("POST /reopen = %d to %q, want 303 to /?kind=duplicate: %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	rec, err := sd.s.Finding(t.Context(), fp)
	if err != nil || !rec.AcknowledgedAt.IsZero() || rec.AcknowledgedBy != "" || rec.AckReason != "" {
		t.Errorf("after reopen: %+v, %v; want no acknowledgement", rec, err)
	}
	if w := do(h, http.MethodPost, "/reopen", url.Values{"fingerprint": {"ffffffffffffffffffff"}}, same); w.Code != http.StatusNotFound {
		t.Errorf("reopen of an unknown finding = %d, want 404", w.Code)
	}
}

func TestAgeFilter(t *testing.T) {
	t.Parallel()
	sd := seed(t) // every finding first seen at now
	at := func(d time.Duration) http.Handler {
		h, err := web.New(web.Options{Store: sd.s, Now: func() time.Time { return now.Add(d) },
			Auth: web.Auth{Mode: web.AuthProxy, TrustedProxies: []string{"10.0.0.0/24"}}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tt := range []struct {
		after time.Duration
		age   string
		want  int
	}{
		{time.Hour, "lt1d", 4}, {time.Hour, "gt1d", 0},
		{50 * time.Hour, "lt1d", 0}, {50 * time.Hour, "gt1d", 4}, {50 * time.Hour, "gt7d", 0},
	} {
		body := get(t, at(tt.after), "/?age="+tt.age)
		if want := strconv.Itoa(tt.want) + " open finding(s) in this view."; !strings.Contains(body, want) {
			t.Errorf("%v after, age %s: page lacks %q", tt.after, tt.age, want)
		}
		if !strings.Contains(body, `<option value="`+tt.age+`" selected>`) {
			t.Errorf("age %s is not shown selected", tt.age)
		}
	}
	if w := do(at(0), http.MethodGet, "/?age=gt0d", nil, nil); w.Code != http.StatusBadRequest {
		t.Errorf("age gt0d = %d, want 400", w.Code)
	}
	if w := do(at(50*time.Hour), http.MethodGet, "/findings.csv?age=lt1d", nil, nil); strings.Count(w.Body.String(), "\n") != 1 {
		t.Errorf("CSV of an empty age view has rows:\n%s", w.Body)
	}
}

// When the obligation's trace cannot be assembled the page says so and
// still shows what the store holds: the finding's history and alerts, and
// its objects as the mirror last read them, without claiming how they
// link.
func TestFindingPageWhenTheTraceFails(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	m := store.NewMirror(sd.pool)
	seen := reconcile.ProviderObject{ID: "re_dup1", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Succeeded, RawStatus: "succeeded", Created: reconcile.StampOf(now.Add(-5 * time.Hour))}
	if err := m.Save(t.Context(), store.MirrorUpdate{RunID: "run-1", Now: now, Seen: []store.SeenObjects{{At: now, Objects: []reconcile.ProviderObject{seen}}}}); err != nil {
		t.Fatal(err)
	}
	h, err := web.New(web.Options{Store: sd.s, Mirror: m, Auth: web.Auth{Mode: web.AuthProxy, TrustedProxies: []string{"10.0.0.0/24"}},
		Trace: func(context.Context, string) (trace.Trace, error) {
			return trace.Trace{}, errors.New("obligations table unreadable")
		}})
	if err != nil {
		t.Fatal(err)
	}
	body := get(t, h, "/findings/"+sd.dup.Fingerprint)
	for _, want := range []string{"The obligation&#39;s trace could not be read; see the server&#39;s log.",
		"Found: Paid twice (critical)", "not known: the obligation was not traced", "as the mirror last read it",
		"<code>re_dup2</code> is not in the mirror"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "No Stripe object of it was read") || strings.Contains(body, "no obligation links to it") {
		t.Errorf("a page whose trace failed claims what was not read:\n%s", body)
	}
}
