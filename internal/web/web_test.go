package web_test

import (
	"encoding/csv"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"

	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/pgtest"
	"reconcile/internal/store"
	"reconcile/internal/web"
)

// hostile is an obligation id that would be markup if pasted raw.
const hostile = `ob_<script>alert(1)</script>"x`

var now = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

const (
	proxyAddr = "10.0.0.7:41000"
	userEmail = "ana@example.com"
)

func finding(kind reconcile.FindingKind, obligationID, objectID string, m reconcile.Money, providerIDs ...string) reconcile.Finding {
	f := reconcile.Finding{
		Kind: kind, Severity: kind.Severity(), ObligationID: obligationID, ProviderIDs: providerIDs,
		Money: m, AtRisk: m, Fingerprint: reconcile.Fingerprint(kind, obligationID, objectID),
		Detail: string(kind) + " about " + obligationID + objectID,
	}
	f.ContentHash = reconcile.ContentHash(f.AtRisk, f.ProviderIDs)
	return f
}

// seeded is a store holding a duplicate of the hostile obligation, an
// orphan refund, an orphan charge and an amount mismatch in euros, as a
// run applied them.
type seeded struct {
	s                                   *store.Store
	pool                                *pgxpool.Pool
	dup, orphan, orphanCharge, mismatch reconcile.Finding
}

func seed(t *testing.T) seeded {
	t.Helper()
	pool, _ := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
	s, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	usd := func(n int64) reconcile.Money { return reconcile.Money{Amount: n, Currency: "usd"} }
	sd := seeded{s: s, pool: pool,
		dup:          finding(reconcile.Duplicate, hostile, "", usd(8900), "re_dup1", "re_dup2"),
		orphan:       finding(reconcile.Orphan, "", "re_orph", usd(5000), "re_orph"),
		orphanCharge: finding(reconcile.Orphan, "", "ch_orph", usd(3000), "ch_orph"),
		mismatch:     finding(reconcile.AmountMismatch, "ob_3", "", reconcile.Money{Amount: 1250, Currency: "eur"}, "ch_3"),
	}
	sd.dup.PaidOut, sd.orphan.PaidOut = true, true // refunds: money paid out
	fs := []reconcile.Finding{sd.dup, sd.orphan, sd.orphanCharge, sd.mismatch}
	res := reconcile.Conclusions{Findings: fs, ObligationIDs: []string{hostile, "ob_3"},
		ObjectIDs: []string{"ch_3", "ch_orph", "re_dup1", "re_dup2", "re_orph"}}
	res.Settled = reconcile.Settled{Obligations: res.ObligationIDs, Objects: res.ObjectIDs}
	run := reconcile.Run{ID: "run-1", Trigger: reconcile.TriggerManual, Window: reconcile.Window{From: now.Add(-72 * time.Hour), To: now},
		Started: now, Finished: now, Status: reconcile.RunCompleted}
	if _, err := s.Apply(t.Context(), run, res, now); err != nil {
		t.Fatal(err)
	}
	return sd
}

func proxyHandler(t *testing.T, s web.Store) http.Handler {
	t.Helper()
	h, err := web.New(web.Options{Store: s, Now: func() time.Time { return now.Add(time.Hour) },
		Auth: web.Auth{Mode: web.AuthProxy, TrustedProxies: []string{"10.0.0.0/24", "::1"}}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// do sends a request through the proxy as the signed-in user.
func do(h http.Handler, method, target string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	var r *http.Request
	if form != nil {
		r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	r.RemoteAddr = proxyAddr
	r.Header.Set(web.DefaultProxyHeader, userEmail)
	for k, v := range header {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func get(t *testing.T, h http.Handler, target string) string {
	t.Helper()
	w := do(h, http.MethodGet, target, nil, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", target, w.Code, w.Body)
	}
	return w.Body.String()
}

func TestFindingsPage(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	body := get(t, proxyHandler(t, sd.s), "/")
	if strings.Contains(body, "<script>") || strings.Contains(body, hostile) {
		t.Errorf("the page holds the hostile obligation id raw:\n%s", body)
	}
	for _, want := range []string{
		template.HTMLEscapeString(hostile), // shown, as text
		"Paid twice", "Money moved outside the workflow", "Wrong amount",
		`href="https://dashboard.stripe.com/test/refunds/re_dup1"`, `href="https://dashboard.stripe.com/test/refunds/re_orph"`,
		`href="https://dashboard.stripe.com/test/payments/ch_3"`,
		"USD 89.00", "EUR 12.50", `<option value="eur">EUR</option>`,
		// Money at risk by meaning: the duplicate and the orphan refund paid
		// out too much, the mismatch and the orphan charge collected wrong.
		"<dt>Paid out too much</dt><dd>USD 139.00</dd>", "<dt>Collected too little or too much</dt><dd>EUR 12.50, USD 30.00</dd>",
		`value="` + sd.dup.Fingerprint + `"`, "Signed in as [email]",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q:\n%s", want, body)
		}
	}
	crit, high := strings.Index(body, "<h2>critical</h2>"), strings.Index(body, "<h2>high</h2>")
	if crit < 0 || high < 0 || crit > high || !(crit < strings.Index(body, "re_dup1") && strings.Index(body, "re_dup1") < high) {
		t.Errorf("findings not grouped by severity, critical (%d) first, high (%d) next", crit, high)
	}
	if i := strings.Index(body, "re_orph"); i < high {
		t.Errorf("the orphan (at %d) is not in the high group (at %d)", i, high)
	}
}

// A connected account's finding names its account, by display name and
// linked to its page, on the list and on its own page, and its objects
// open in that account's dashboard (docs/design.md, "Accounts").
func TestConnectedAccountShown(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
	s, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	f := finding(reconcile.Duplicate, "refund:1", "", reconcile.Money{Amount: 8900, Currency: "usd"}, "re_a", "re_b")
	f.Account, f.Fingerprint = "acct_1Bakery", reconcile.AccountFingerprint("acct_1Bakery", f.Kind, "refund:1", "")
	run := reconcile.Run{ID: "run-1", Trigger: reconcile.TriggerManual, Window: reconcile.Window{From: now.Add(-72 * time.Hour), To: now},
		Started: now, Finished: now, Status: reconcile.RunCompleted}
	if err := s.SaveAccounts(t.Context(), run.ID, []reconcile.Account{{ID: "acct_1Bakery", Name: "Corner <Bakery>"}}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(t.Context(), run, reconcile.Conclusions{Findings: []reconcile.Finding{f}}, now); err != nil {
		t.Fatal(err)
	}
	h := proxyHandler(t, s)
	for _, body := range []string{get(t, h, "/"), get(t, h, "/findings/"+f.Fingerprint)} {
		for _, want := range []string{
			`<a href="https://dashboard.stripe.com/test/connect/accounts/acct_1Bakery" rel="noreferrer">Corner &lt;Bakery&gt; (acct_1Bakery)</a>`,
			`href="https://dashboard.stripe.com/acct_1Bakery/test/refunds/re_a"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("page lacks %q:\n%s", want, body)
			}
		}
	}
}

func TestLiveDashboardLinks(t *testing.T) {
	t.Parallel()
	if got := alerts.DashboardURL("re_1", true); got != "https://dashboard.stripe.com/refunds/re_1" {
		t.Errorf("live refund link %q", got)
	}
	if got := alerts.DashboardURL("pi_1", false); got != "https://dashboard.stripe.com/test/payments/pi_1" {
		t.Errorf("test intent link %q", got)
	}
	if got := alerts.DashboardURL(`re_1"><script>`, true); got != "" {
		t.Errorf("a hostile id got a link %q", got)
	}
}

func TestFiltersAndSearch(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, sd.s)
	tests := []struct {
		query string
		want  []string // the fingerprints shown
	}{
		{"", []string{sd.dup.Fingerprint, sd.orphan.Fingerprint, sd.orphanCharge.Fingerprint, sd.mismatch.Fingerprint}},
		{"kind=orphan", []string{sd.orphan.Fingerprint, sd.orphanCharge.Fingerprint}},
		{"severity=critical", []string{sd.dup.Fingerprint}},
		{"severity=high", []string{sd.orphan.Fingerprint, sd.orphanCharge.Fingerprint, sd.mismatch.Fingerprint}},
		{"kind=orphan&q=ch_orph", []string{sd.orphanCharge.Fingerprint}},
		{"currency=eur", []string{sd.mismatch.Fingerprint}},
		{"currency=EUR&severity=high", []string{sd.mismatch.Fingerprint}},
		{"currency=usd&severity=high", []string{sd.orphan.Fingerprint, sd.orphanCharge.Fingerprint}},
		{"currency=jpy", nil},
		{"kind=amount_mismatch&severity=critical", nil},
		{"q=re_dup2", []string{sd.dup.Fingerprint}},
		{"q=" + url.QueryEscape(hostile), []string{sd.dup.Fingerprint}},
		{"q=ch_3", []string{sd.mismatch.Fingerprint}},
		{"q=ob_3", []string{sd.mismatch.Fingerprint}},
		{"q=re_none", nil},
	}
	all := []string{sd.dup.Fingerprint, sd.orphan.Fingerprint, sd.orphanCharge.Fingerprint, sd.mismatch.Fingerprint}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			body := get(t, h, "/?"+tt.query)
			for _, fp := range all {
				if shown := strings.Contains(body, `value="`+fp+`"`); shown != slices.Contains(tt.want, fp) {
					t.Errorf("/?%s: finding %s shown %t, want %t", tt.query, fp, shown, !shown)
				}
			}
		})
	}
	for _, bad := range []string{"/?kind=nonsense", "/?severity=urgent", "/findings.csv?kind=nonsense"} {
		if w := do(h, http.MethodGet, bad, nil, nil); w.Code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400", bad, w.Code)
		}
	}
}

func TestCSVOfTheView(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, sd.s)
	read := func(target string) []map[string]string {
		t.Helper()
		w := do(h, http.MethodGet, target, nil, nil)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/csv") {
			t.Fatalf("GET %s = %d %s", target, w.Code, w.Header().Get("Content-Type"))
		}
		recs, err := csv.NewReader(w.Body).ReadAll()
		if err != nil || len(recs) == 0 {
			t.Fatalf("GET %s: %d records, %v", target, len(recs), err)
		}
		var rows []map[string]string
		for _, rec := range recs[1:] {
			m := map[string]string{}
			for i, col := range recs[0] {
				m[col] = rec[i]
			}
			rows = append(rows, m)
		}
		return rows
	}
	if rows := read("/findings.csv"); len(rows) != 4 {
		t.Errorf("whole view: %d rows, want 4", len(rows))
	}
	rows := read("/findings.csv?severity=critical")
	if len(rows) != 1 || rows[0]["obligation_id"] != hostile || rows[0]["kind"] != "duplicate" ||
		rows[0]["fingerprint"] != sd.dup.Fingerprint || rows[0]["provider_ids"] == "" {
		t.Errorf("critical view rows = %v, want the duplicate of %q alone, its id exact", rows, hostile)
	}
	if rows := read("/findings.csv?currency=usd"); len(rows) != 3 {
		t.Errorf("usd view: %d rows, want 3", len(rows))
	}
	rows = read("/findings.csv?q=ch_3")
	if len(rows) != 1 || rows[0]["fingerprint"] != sd.mismatch.Fingerprint {
		t.Errorf("search view rows = %v, want the mismatch alone", rows)
	}
}

func TestAckByTheProxyUser(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, sd.s)
	form := url.Values{"fingerprint": {sd.dup.Fingerprint}, "reason": {"refund reversed by hand"}, "back": {"kind=duplicate&evil=//x"}}
	w := do(h, http.MethodPost, "/ack", form, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/?kind=duplicate" {
		t.Fatalf("POST /ack = %d to %q, want 303 to /?kind=duplicate: %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	fs, err := sd.s.Findings(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(fs, func(f store.FindingRecord) bool { return f.Fingerprint == sd.dup.Fingerprint })
	if i < 0 || fs[i].AcknowledgedBy != userEmail || fs[i].AckReason != "refund reversed by hand" || !fs[i].AcknowledgedAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("stored acknowledgement = %+v, want by %s at %v", fs[i], userEmail, now.Add(time.Hour))
	}
	body := get(t, h, "/")
	acked := strings.Index(body, "<h2>Acknowledged</h2>")
	if acked < 0 {
		t.Fatal("no acknowledged section")
	}
	if strings.Contains(body[:acked], `value="`+sd.dup.Fingerprint+`"`) {
		t.Error("the acknowledged finding still has an acknowledge form among the open ones")
	}
	ackedPart := body[acked:]
	if !strings.Contains(ackedPart, `action="/reopen"`) {
		t.Error("the acknowledged finding cannot be reopened")
	}
	for _, want := range []string{template.HTMLEscapeString(hostile), "refund reversed by hand", "[email]", "2026-11-30T07:00:00Z"} {
		if !strings.Contains(ackedPart, want) {
			t.Errorf("acknowledged section lacks %q:\n%s", want, ackedPart)
		}
	}
	if strings.Contains(ackedPart, "re_orph") || !strings.Contains(body[:acked], "re_orph") {
		t.Error("the orphan, not acknowledged, is not among the open ones alone")
	}
	// A resolved or unknown fingerprint is refused, nothing recorded.
	if w := do(h, http.MethodPost, "/ack", url.Values{"fingerprint": {"0000000000"}, "reason": {"x"}}, nil); w.Code != http.StatusNotFound {
		t.Errorf("ack of an unknown finding = %d, want 404", w.Code)
	}
	if w := do(h, http.MethodPost, "/ack", url.Values{"fingerprint": {sd.orphan.Fingerprint}, "reason": {"  "}}, nil); w.Code != http.StatusBadRequest {
		t.Errorf("ack without a reason = %d, want 400", w.Code)
	}
	if w := do(h, http.MethodPost, "/ack", url.Values{"fingerprint": {sd.orphan.Fingerprint}, "reason": {strings.Repeat("x", 70<<10)}}, nil); w.Code != http.StatusBadRequest {
		t.Errorf("ack with a 70 KiB form = %d, want 400", w.Code)
	}
	fs, err = sd.s.Findings(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(fs, func(f store.FindingRecord) bool { return f.Fingerprint == sd.orphan.Fingerprint }); i < 0 || !fs[i].AcknowledgedAt.IsZero() {
		t.Errorf("a refused ack of the orphan recorded something: %+v", fs)
	}
}

func TestCrossOriginAckRefused(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, sd.s)
	form := url.Values{"fingerprint": {sd.dup.Fingerprint}, "reason": {"forged"}}
	for _, hdr := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://evil.example", "Sec-Fetch-Site": ""},
	} {
		if w := do(h, http.MethodPost, "/ack", form, hdr); w.Code != http.StatusForbidden {
			t.Errorf("cross-origin POST /ack with %v = %d, want 403", hdr, w.Code)
		}
	}
	fs, err := sd.s.Findings(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if !f.AcknowledgedAt.IsZero() {
			t.Errorf("finding %s acknowledged by a cross-origin request (by %q)", f.Fingerprint, f.AcknowledgedBy)
		}
	}
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, sd.s)
	cases := []struct {
		name   string
		method string
		target string
		header map[string]string
		code   int
	}{
		{"page", http.MethodGet, "/", nil, 200},
		{"csv", http.MethodGet, "/findings.csv", nil, 200},
		{"runs", http.MethodGet, "/runs", nil, 200},
		{"css", http.MethodGet, "/static/style.css", nil, 200},
		{"not found", http.MethodGet, "/nope", nil, 404},
		{"bad filter", http.MethodGet, "/?kind=x", nil, 400},
		{"not signed in", http.MethodGet, "/", map[string]string{web.DefaultProxyHeader: ""}, 401},
		{"untrusted", http.MethodGet, "/", map[string]string{"X-Test-Remote": "1"}, 403},
		{"cross-site", http.MethodPost, "/ack", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w *httptest.ResponseRecorder
			if c.header["X-Test-Remote"] != "" {
				r := httptest.NewRequest(c.method, c.target, nil)
				r.RemoteAddr = "203.0.113.9:5000"
				r.Header.Set(web.DefaultProxyHeader, userEmail)
				w = httptest.NewRecorder()
				h.ServeHTTP(w, r)
			} else {
				w = do(h, c.method, c.target, url.Values{}, c.header)
			}
			if w.Code != c.code {
				t.Fatalf("%s %s = %d, want %d", c.method, c.target, w.Code, c.code)
			}
			for k, v := range map[string]string{
				"Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
			} {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestProxyAuth(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h := proxyHandler(t, sd.s)
	req := func(remote, user string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		if user != "" {
			r.Header.Set(web.DefaultProxyHeader, user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		name, remote, user string
		want               int
	}{
		{"trusted, signed in", proxyAddr, userEmail, 200},
		{"trusted v6 address", "[::1]:5000", userEmail, 200},
		{"missing header", proxyAddr, "", 401},
		{"anonymous", proxyAddr, "anonymous", 401},
		{"untrusted address", "10.0.1.7:5000", userEmail, 403},
		{"untrusted, no header", "198.51.100.1:5000", "", 403},
	} {
		if got := req(c.remote, c.user); got != c.want {
			t.Errorf("%s: GET / from %s as %q = %d, want %d", c.name, c.remote, c.user, got, c.want)
		}
	}
}

func TestAuthNoneAcksOnlyFromLoopback(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h, err := web.New(web.Options{Store: sd.s, Now: func() time.Time { return now }, Auth: web.Auth{Mode: web.AuthNone}})
	if err != nil {
		t.Fatal(err)
	}
	post := func(remote, fp string) int {
		r := httptest.NewRequest(http.MethodPost, "/ack", strings.NewReader(url.Values{"fingerprint": {fp}, "reason": {"seen"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if got := post("192.0.2.1:1234", sd.orphan.Fingerprint); got != http.StatusForbidden {
		t.Errorf("ack from a remote address with auth none = %d, want 403", got)
	}
	if got := post("127.0.0.1:1234", sd.dup.Fingerprint); got != http.StatusSeeOther {
		t.Fatalf("ack from loopback with auth none = %d, want 303", got)
	}
	fs, err := sd.s.Findings(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		switch {
		case f.Fingerprint == sd.dup.Fingerprint && f.AcknowledgedBy != "local":
			t.Errorf("loopback ack recorded by %q, want local", f.AcknowledgedBy)
		case f.Fingerprint != sd.dup.Fingerprint && !f.AcknowledgedAt.IsZero():
			t.Errorf("finding %s acknowledged by %q from a remote address", f.Fingerprint, f.AcknowledgedBy)
		}
	}
}

func TestNewRefusesUnbuiltOrIncompleteAuth(t *testing.T) {
	t.Parallel()
	for _, a := range []web.Auth{{Mode: web.AuthBasic}, {Mode: "sso"}, {Mode: web.AuthProxy}, {Mode: web.AuthProxy, TrustedProxies: []string{"not-an-ip"}}} {
		if _, err := web.New(web.Options{Store: &store.Store{}, Auth: a}); err == nil {
			t.Errorf("New with auth %+v succeeded", a)
		}
	}
	if _, err := web.New(web.Options{Auth: web.Auth{Mode: web.AuthNone}}); err == nil {
		t.Error("New without a store succeeded")
	}
}

func TestRunsPage(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	failed := reconcile.Run{ID: "run-2", Trigger: reconcile.TriggerManual, Window: reconcile.Window{From: now.Add(-time.Hour), To: now.Add(time.Hour)},
		Started: now.Add(time.Hour), Finished: now.Add(time.Hour + 1500*time.Millisecond), Status: reconcile.RunFailed}
	if err := sd.s.RecordFailedRun(t.Context(), failed, `stripe list: key sk_live_4eC39HqLyjWDarjtT1zdp7dc said <b>no</b> to ops@example.com`); err != nil {
		t.Fatal(err)
	}
	body := get(t, proxyHandler(t, sd.s), "/runs")
	for _, leak := range []string{"sk_live_4eC39HqLyjWDarjtT1zdp7dc", "<b>", "ops@example.com"} {
		if strings.Contains(body, leak) {
			t.Errorf("runs page holds %q:\n%s", leak, body)
		}
	}
	two, one := strings.Index(body, "<code>run-2</code>"), strings.Index(body, "<code>run-1</code>")
	if two < 0 || one < 0 || two > one {
		t.Errorf("runs not listed newest first (run-2 at %d, run-1 at %d):\n%s", two, one, body)
	}
	for _, want := range []string{`<tr class="failed">`, "&lt;b&gt;no&lt;/b&gt;", "[email]", "<redacted>", "1.5s", "2026-11-30T05:00:00Z – 2026-11-30T07:00:00Z"} {
		if !strings.Contains(body, template.HTMLEscapeString(want)) && !strings.Contains(body, want) {
			t.Errorf("runs page lacks %q:\n%s", want, body)
		}
	}
}

// /healthz answers the platform's probes without a sign-in: healthy while
// the newest run completed within serve.max_run_age, unhealthy with no
// run, after a failed one, or once the last completed run is too old.
func TestHealthz(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
	s, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	clock := now
	h, err := web.New(web.Options{Store: s, Now: func() time.Time { return clock }, MaxRunAge: 26 * time.Hour,
		Auth: web.Auth{Mode: web.AuthProxy, TrustedProxies: []string{"10.0.0.0/24"}}})
	if err != nil {
		t.Fatal(err)
	}
	probe := func() (int, string) {
		// From the kubelet's address, with no proxy and no user.
		r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		r.RemoteAddr = "192.168.7.7:4242"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "no run") {
		t.Errorf("healthz with no run = %d %q, want 503 saying no run was recorded", code, body)
	}
	run := reconcile.Run{ID: "run-ok", Trigger: reconcile.TriggerCron, Window: reconcile.Window{From: now.Add(-72 * time.Hour), To: now},
		Started: now, Finished: now, Status: reconcile.RunCompleted}
	if _, err := s.Apply(t.Context(), run, reconcile.Conclusions{}, now); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(25 * time.Hour)
	if code, body := probe(); code != http.StatusOK || !strings.Contains(body, "run-ok") {
		t.Errorf("healthz 25h after a completed run = %d %q, want 200 naming it", code, body)
	}
	// A pass the workers are still running says nothing of health yet.
	pass := reconcile.Run{ID: "run-jobs", Trigger: reconcile.TriggerCron, Window: run.Window, Started: now.Add(time.Minute), Status: reconcile.RunRunning}
	if err := pgx.BeginTxFunc(t.Context(), pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := s.BeginPass(t.Context(), tx, pass, nil); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), `INSERT INTO reconcile.river_job (args, kind, max_attempts, queue, state)
			VALUES ('{"pass": {"id": "run-jobs"}}', 'reconcile_fetch', 5, 'fetch', 'available')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := probe(); code != http.StatusOK || !strings.Contains(body, "run-ok") {
		t.Errorf("healthz while a pass runs as jobs = %d %q, want 200 naming the last completed run", code, body)
	}
	clock = now.Add(27 * time.Hour)
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "serve.max_run_age") {
		t.Errorf("healthz 27h after the last completed run = %d %q, want 503 naming serve.max_run_age", code, body)
	}
	failed := reconcile.Run{ID: "run-bad", Trigger: reconcile.TriggerCron, Window: reconcile.Window{From: now, To: now.Add(time.Hour)},
		Started: now.Add(time.Hour), Finished: now.Add(time.Hour), Status: reconcile.RunFailed}
	if err := s.RecordFailedRun(t.Context(), failed, "read the provider: key sk_live_4eC39HqLyjWDarjtT1zdp7dc rejected"); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(2 * time.Hour)
	code, body := probe()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "run-bad") || strings.Contains(body, "sk_live_4eC39") {
		t.Errorf("healthz after a failed run = %d %q, want 503 naming it, its error masked", code, body)
	}
}
