// Package web serves finance's findings page (`reconcile serve`): the open
// findings grouped by severity with their money at risk by meaning, the
// acknowledged ones apart, a CSV of the current view, and acknowledging a
// finding as the signed-in user (docs/design.md, "The findings page").
//
// Pages are html/template, so every outside value is text, never markup;
// free text is redact.Text besides, ids are shown exact (docs/design.md,
// "Untrusted text"). Every response carries a strict Content-Security-Policy
// and state-changing requests from another site are refused.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"reconcile"

	"reconcile/internal/alerts"
	"reconcile/internal/redact"
	"reconcile/internal/report"
	"reconcile/internal/store"
)

// Store is what the pages read and change; *store.Store is one.
type Store interface {
	// Findings returns the findings, only the open ones if open is set,
	// most severe first.
	Findings(ctx context.Context, open bool) ([]store.FindingRecord, error)
	// Ack acknowledges an open finding as by, for reason.
	Ack(ctx context.Context, fingerprint, by, reason string, now time.Time) (store.FindingRecord, error)
	// Reopen clears an open finding's acknowledgement.
	Reopen(ctx context.Context, fingerprint string) (store.FindingRecord, error)
	// Finding returns the finding of exactly that fingerprint, open or
	// resolved, and FindingAlerts the alerts about it.
	Finding(ctx context.Context, fingerprint string) (store.FindingRecord, error)
	FindingAlerts(ctx context.Context, fingerprint string) ([]store.AlertRecord, error)
	// LastRuns returns the n most recently started runs, newest first.
	LastRuns(ctx context.Context, n int) ([]store.RunRecord, error)
	// MetricsStore is what /metrics reads besides.
	MetricsStore
	// SlackStore is what Slack's buttons need (slack.go).
	SlackStore
}

// Options configure the pages.
type Options struct {
	// Store holds the findings; required.
	Store Store
	// Trace assembles a finding's obligation's trace for its page; nil:
	// the page shows what the store holds.
	Trace Tracer
	// Mirror holds Stripe's objects as last read, for the page of a
	// finding without an obligation; nil: not shown.
	Mirror Mirror
	// Now is the clock acknowledgements are stamped with; default time.Now.
	Now func() time.Time
	// Auth says who may see and act.
	Auth Auth
	// Live links Stripe ids to the live dashboard rather than the test one.
	Live bool
	// Logger receives the errors a page answers 500 for; default none.
	Logger *slog.Logger
	// MaxRunAge is how long after the last completed run /healthz still
	// answers healthy (serve.max_run_age); zero: no bound.
	MaxRunAge time.Duration
	// Slack turns on POST /slack/interactions, Slack's buttons, and the
	// edits of Slack's messages when a finding is acknowledged here
	// (slack.go); without a signing secret the route answers 404.
	Slack SlackOptions
}

// ContentSecurityPolicy is sent with every response: nothing but the
// page's own stylesheet and images loads, forms post only to the page, and
// no other site may frame it.
const ContentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

var pages = template.Must(template.ParseFS(templateFS, "templates/*.html"))

type server struct {
	store  Store
	trace  Tracer
	mirror Mirror
	now    func() time.Time
	auth   *authenticator
	live   bool
	logger *slog.Logger
	maxAge time.Duration
	slack  *slackButtons // nil without a signing secret
}

type userKey struct{}

// Handler serves the pages; Close waits for the Slack edits it started.
type Handler struct {
	http.Handler
	slack *slackButtons
}

// Close stops starting Slack edits and waits, until ctx ends, for those
// under way: serve calls it once the server is shut down.
func (h *Handler) Close(ctx context.Context) error { return h.slack.Close(ctx) }

// New returns the pages' handler.
func New(o Options) (*Handler, error) {
	if o.Store == nil {
		return nil, errors.New("web: a store is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	au, err := newAuthenticator(o.Auth, o.Now)
	if err != nil {
		return nil, err
	}
	s := &server{store: o.Store, trace: o.Trace, mirror: o.Mirror, now: o.Now, auth: au, live: o.Live, logger: o.Logger, maxAge: o.MaxRunAge}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if o.Slack.SigningSecret != "" {
		if o.Slack.Client == nil {
			return nil, errors.New("web: Slack's buttons need the bot's client (SLACK_BOT_TOKEN)")
		}
		s.slack = &slackButtons{store: o.Store, client: o.Slack.Client, secret: o.Slack.SigningSecret,
			publicURL: o.Slack.PublicURL, now: s.now, log: s.logger, seen: map[string]time.Time{}}
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /findings.csv", s.csv)
	mux.HandleFunc("GET /runs", s.runs)
	mux.HandleFunc("GET /findings/{fingerprint}", s.finding)
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	// Every state-changing route refuses requests a browser says come from
	// another site (Sec-Fetch-Site, or Origin against Host).
	csrf := http.NewCrossOriginProtection()
	mux.Handle("POST /ack", csrf.Handler(http.HandlerFunc(s.ack)))
	mux.Handle("POST /reopen", csrf.Handler(http.HandlerFunc(s.reopen)))
	// /healthz is for the platform's probes, which sign in nowhere; it
	// says only whether the nightly run is current.
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", s.healthz)
	// Slack signs its calls, and signs in nowhere (slack.go).
	root.HandleFunc("POST /slack/interactions", s.slack.interactions)
	root.Handle("/", s.authenticate(mux))
	return &Handler{Handler: secureHeaders(root), slack: s.slack}, nil
}

// healthz answers 200 while the reconciler is doing its job: the newest
// recorded run completed, and finished within MaxRunAge. Otherwise 503,
// saying why in one line (docs/design.md, "The findings page").
func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	// The last run that ended: a pass the workers are still running
	// (docs/design.md, "Passes as jobs") says nothing yet of health.
	runs, err := s.store.LastRuns(r.Context(), 2)
	if err != nil {
		s.logger.Error("healthz: read runs", "error", err)
		http.Error(w, "unhealthy: the runs cannot be read", http.StatusServiceUnavailable)
		return
	}
	if len(runs) > 0 && runs[0].Status == reconcile.RunRunning {
		runs = runs[1:]
	}
	switch {
	case len(runs) == 0:
		http.Error(w, "unhealthy: no run has been recorded yet", http.StatusServiceUnavailable)
	case runs[0].Status != reconcile.RunCompleted:
		http.Error(w, "unhealthy: the last run, "+runs[0].ID+", "+string(runs[0].Status)+": "+redact.Text(runs[0].Error), http.StatusServiceUnavailable)
	case s.maxAge > 0 && s.now().Sub(runs[0].Finished) > s.maxAge:
		http.Error(w, fmt.Sprintf("unhealthy: the last completed run, %s, finished %s ago, more than serve.max_run_age (%s)",
			runs[0].ID, s.now().Sub(runs[0].Finished).Round(time.Second), s.maxAge), http.StatusServiceUnavailable)
	default:
		fmt.Fprintf(w, "ok: the last run, %s, completed %s\n", runs[0].ID, runs[0].Finished.UTC().Format(time.RFC3339))
	}
}

// secureHeaders sets the headers every response carries, errors included.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, status, msg := s.auth.check(r)
		if status != 0 {
			if status == http.StatusUnauthorized && s.auth.mode == AuthBasic {
				w.Header().Set("WWW-Authenticate", BasicChallenge)
			}
			http.Error(w, msg, status)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
	})
}

func userOf(r *http.Request) user {
	u, _ := r.Context().Value(userKey{}).(user)
	return u
}

// filter is a view of the open findings: by kind, severity, currency and
// an id.
type filter struct {
	kind     reconcile.FindingKind
	severity reconcile.Severity
	currency string
	q        string
	age      age
}

// age keeps the findings first seen less (newer) or more than days ago;
// the zero age keeps all. Its form value is "lt1d", "gt7d" and the like.
type age struct {
	newer bool
	days  int
}

// ages are the filter's choices.
var ages = []struct {
	age   age
	label string
}{
	{age{true, 1}, "new in the last day"},
	{age{false, 1}, "open over a day"},
	{age{false, 7}, "open over a week"},
	{age{false, 30}, "open over 30 days"},
}

func parseAge(v string) (age, bool) {
	if v == "" {
		return age{}, true
	}
	dir, rest := v[:min(2, len(v))], v[min(2, len(v)):]
	n, err := strconv.Atoi(strings.TrimSuffix(rest, "d"))
	if (dir != "lt" && dir != "gt") || !strings.HasSuffix(rest, "d") || err != nil || n < 1 || n > 3650 {
		return age{}, false
	}
	return age{newer: dir == "lt", days: n}, true
}

func (a age) String() string {
	if a.days == 0 {
		return ""
	}
	dir := "gt"
	if a.newer {
		dir = "lt"
	}
	return dir + strconv.Itoa(a.days) + "d"
}

// keeps says a finding first seen at seen passes the filter at now.
func (a age) keeps(seen, now time.Time) bool {
	if a.days == 0 {
		return true
	}
	older := now.Sub(seen) > time.Duration(a.days)*24*time.Hour
	return older != a.newer
}

func parseFilter(v url.Values) (filter, error) {
	f := filter{kind: reconcile.FindingKind(strings.TrimSpace(v.Get("kind"))), q: strings.TrimSpace(v.Get("q")),
		currency: strings.ToLower(strings.TrimSpace(v.Get("currency")))}
	if f.kind != "" && f.kind.Info().Label == "" {
		return f, fmt.Errorf("%q is not a finding kind", f.kind)
	}
	a, ok := parseAge(strings.TrimSpace(v.Get("age")))
	if !ok {
		return f, fmt.Errorf("%q is not an age (lt1d, gt7d, …)", v.Get("age"))
	}
	f.age = a
	if sev := strings.TrimSpace(v.Get("severity")); sev != "" {
		s, ok := reconcile.ParseSeverity(sev)
		if !ok {
			return f, fmt.Errorf("%q is not a severity", sev)
		}
		f.severity = s
	}
	return f, nil
}

func (f filter) match(r store.FindingRecord, now time.Time) bool {
	return f.age.keeps(r.FirstSeenAt, now) && (f.kind == "" || r.Kind == f.kind) &&
		(f.severity == "" || r.Severity == f.severity) &&
		(f.currency == "" || strings.EqualFold(r.Money.Currency, f.currency) || strings.EqualFold(r.AtRisk.Currency, f.currency)) &&
		(f.q == "" || r.ObligationID == f.q || r.Target == f.q || slices.Contains(r.ProviderIDs, f.q))
}

func (f filter) query() url.Values {
	v := url.Values{}
	if f.kind != "" {
		v.Set("kind", string(f.kind))
	}
	if f.severity != "" {
		v.Set("severity", string(f.severity))
	}
	if f.currency != "" {
		v.Set("currency", f.currency)
	}
	if f.q != "" {
		v.Set("q", f.q)
	}
	if a := f.age.String(); a != "" {
		v.Set("age", a)
	}
	return v
}

// view reads the open findings once and returns the filter, the findings
// it keeps, and the currencies of all of them (so that the filter offers
// every currency whatever the view).
func (s *server) view(w http.ResponseWriter, r *http.Request) (filter, []store.FindingRecord, []string, bool) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return f, nil, nil, false
	}
	fs, err := s.store.Findings(r.Context(), true)
	if err != nil {
		s.fail(w, r, err)
		return f, nil, nil, false
	}
	cur := currencies(fs)
	now := s.now()
	return f, slices.DeleteFunc(fs, func(r store.FindingRecord) bool { return !f.match(r, now) }), cur, true
}

// currencies are those of the findings, lower case, sorted.
func currencies(fs []store.FindingRecord) []string {
	var cs []string
	for _, f := range fs {
		for _, c := range []string{f.Money.Currency, f.AtRisk.Currency} {
			if c = strings.ToLower(c); c != "" && !slices.Contains(cs, c) {
				cs = append(cs, c)
			}
		}
	}
	slices.Sort(cs)
	return cs
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.logger.Error("page failed", "path", r.URL.Path, "error", redact.String(err.Error()))
	http.Error(w, "the findings could not be read; see the server's log", http.StatusInternalServerError)
}

func (s *server) csv(w http.ResponseWriter, r *http.Request) {
	_, fs, _, ok := s.view(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="findings.csv"`)
	if err := report.WriteFindingsCSV(w, fs); err != nil {
		s.logger.Error("csv failed", "error", redact.String(err.Error()))
	}
}

// maxAckForm bounds an acknowledgement's form: a fingerprint, a reason and
// the view to return to.
const maxAckForm = 64 << 10

func (s *server) ack(w http.ResponseWriter, r *http.Request) {
	fp, ok := s.actOn(w, r)
	if !ok {
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		http.Error(w, "a reason is required", http.StatusBadRequest)
		return
	}
	rec, err := s.store.Ack(r.Context(), fp, userOf(r).name, reason, s.now().UTC())
	s.acted(w, r, rec, err)
}

// reopen clears a finding's acknowledgement: it is repeated again past
// the repeat interval, as before it was acknowledged.
func (s *server) reopen(w http.ResponseWriter, r *http.Request) {
	fp, ok := s.actOn(w, r)
	if !ok {
		return
	}
	rec, err := s.store.Reopen(r.Context(), fp)
	s.acted(w, r, rec, err)
}

// actOn reads a state-changing form: it needs a user who may act, and
// names the finding; ok is false once the request is answered.
func (s *server) actOn(w http.ResponseWriter, r *http.Request) (fingerprint string, ok bool) {
	if userOf(r).name == "" {
		http.Error(w, "acting on a finding needs a signed-in user (serve.auth proxy or basic), or a browser on this machine", http.StatusForbidden)
		return "", false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxAckForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read (at most 64 KiB)", http.StatusBadRequest)
		return "", false
	}
	fp := strings.TrimSpace(r.PostFormValue("fingerprint"))
	if fp == "" {
		http.Error(w, "a finding is required", http.StatusBadRequest)
		return "", false
	}
	return fp, true
}

// acted answers a state-changing form: the error as a status, or back to
// the page the form was on: the finding's own page, or the findings with
// the view's filters (only those are kept, so the redirect never leaves
// the page). Slack's messages about a changed finding are edited to say
// how it stands (docs/design.md, "Buttons in Slack").
func (s *server) acted(w http.ResponseWriter, r *http.Request, rec store.FindingRecord, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		http.Error(w, "no open finding has that fingerprint", http.StatusNotFound)
		return
	case errors.Is(err, store.ErrResolved), errors.Is(err, store.ErrAmbiguous):
		http.Error(w, redact.Text(err.Error()), http.StatusConflict)
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.slack.acknowledged(r.Context(), rec.Fingerprint)
	if r.PostFormValue("return") == "finding" {
		http.Redirect(w, r, "/findings/"+url.PathEscape(rec.Fingerprint), http.StatusSeeOther)
		return
	}
	back, _ := url.ParseQuery(r.PostFormValue("back"))
	f, err := parseFilter(back)
	target := "/"
	if q := f.query().Encode(); err == nil && q != "" {
		target += "?" + q
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// runsShown is how many recent runs the runs page lists.
const runsShown = 50

type runRow struct {
	ID, Trigger, Status, From, To, Started, Duration, Error string
	Obligations, Objects, Linked, Findings, Transitions     int
	Failed                                                  bool
}

// runs lists the recent runs: status, window, duration, counts, and the
// error of a failed one (docs/design.md, "The schema `reconcile`").
func (s *server) runs(w http.ResponseWriter, r *http.Request) {
	rs, err := s.store.LastRuns(r.Context(), runsShown)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows := make([]runRow, 0, len(rs))
	for _, rr := range rs {
		row := runRow{
			ID: rr.ID, Trigger: string(rr.Trigger), Status: string(rr.Status),
			From: stamp(rr.Window.From), To: stamp(rr.Window.To), Started: stamp(rr.Started),
			Obligations: rr.Counts.Obligations, Objects: rr.Counts.ProviderObjects, Linked: rr.Counts.Linked,
			Findings: rr.Findings, Transitions: rr.Transitions,
			Error:  redact.Text(rr.Error),
			Failed: rr.Status == reconcile.RunFailed,
		}
		if !rr.Finished.IsZero() && !rr.Started.IsZero() {
			row.Duration = rr.Finished.Sub(rr.Started).Round(time.Millisecond).String()
		}
		rows = append(rows, row)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "runs.html", struct {
		User string
		Runs []runRow
	}{redact.Text(userOf(r).name), rows}); err != nil {
		s.logger.Error("page failed", "path", r.URL.Path, "error", redact.String(err.Error()))
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// The page's data.
type (
	link struct{ ID, URL string }
	row  struct {
		Label, Kind, ObligationID, Fingerprint string
		// Account is a connected account's label (its display name and
		// id) and page; empty on the platform's own (docs/design.md,
		// "Accounts").
		Account                          link
		Providers                        []link
		Money, AtRisk, Detail, FirstSeen string
		AckBy, AckReason, AckAt          string
	}
	group struct {
		Severity string
		Rows     []row
	}
	option struct {
		Value, Label string
		Selected     bool
	}
	meaningTotals struct {
		Label  string
		Totals []string
	}
	page struct {
		User, Q, Back, CSV string
		CanAck             bool
		Kinds, Severities  []option
		Ages               []option
		Currencies         []option
		AtRisk             []meaningTotals
		Groups             []group
		Acked              []row
		Count              int
	}
)

var severities = []reconcile.Severity{reconcile.Critical, reconcile.High, reconcile.Warning, reconcile.Info}

func (s *server) index(w http.ResponseWriter, r *http.Request) {
	f, fs, cur, ok := s.view(w, r)
	if !ok {
		return
	}
	u := userOf(r)
	p := page{User: redact.Text(u.name), CanAck: u.name != "", Q: f.q, Back: f.query().Encode(), Count: len(fs)}
	p.CSV = "/findings.csv"
	if p.Back != "" {
		p.CSV += "?" + p.Back
	}
	for _, k := range reconcile.Kinds {
		p.Kinds = append(p.Kinds, option{Value: string(k.Kind), Label: k.Label, Selected: k.Kind == f.kind})
	}
	for _, a := range ages {
		p.Ages = append(p.Ages, option{Value: a.age.String(), Label: a.label, Selected: a.age == f.age})
	}
	for _, sev := range severities {
		p.Severities = append(p.Severities, option{Value: string(sev), Label: string(sev), Selected: sev == f.severity})
	}

	if f.currency != "" && !slices.Contains(cur, f.currency) {
		cur = append(cur, f.currency)
	}
	for _, c := range cur {
		p.Currencies = append(p.Currencies, option{Value: c, Label: strings.ToUpper(c), Selected: c == f.currency})
	}
	open := make([]reconcile.Finding, 0, len(fs))
	for _, rec := range fs {
		open = append(open, rec.Finding)
		rw := s.row(rec)
		if !rec.AcknowledgedAt.IsZero() {
			p.Acked = append(p.Acked, rw)
			continue
		}
		if n := len(p.Groups); n == 0 || p.Groups[n-1].Severity != string(rec.Severity) {
			p.Groups = append(p.Groups, group{Severity: string(rec.Severity)})
		}
		g := &p.Groups[len(p.Groups)-1]
		g.Rows = append(g.Rows, rw)
	}
	split := reconcile.SplitAtRisk(open)
	for _, m := range reconcile.Meanings {
		ts := split.Of(m)
		if len(ts) == 0 {
			continue
		}
		mt := meaningTotals{Label: m.Label()}
		for _, t := range ts {
			mt.Totals = append(mt.Totals, t.String())
		}
		p.AtRisk = append(p.AtRisk, mt)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "index.html", p); err != nil {
		s.logger.Error("page failed", "path", r.URL.Path, "error", redact.String(err.Error()))
	}
}

func (s *server) row(rec store.FindingRecord) row {
	rw := row{
		Label: rec.Kind.Info().Label, Kind: string(rec.Kind), ObligationID: rec.ObligationID,
		Fingerprint: rec.Fingerprint, Detail: redact.Text(rec.Detail),
		FirstSeen: rec.FirstSeenAt.UTC().Format(time.RFC3339),
		AckBy:     redact.Text(rec.AcknowledgedBy), AckReason: redact.Text(rec.AckReason),
	}
	if rw.Label == "" {
		rw.Label = string(rec.Kind)
	}
	if rec.Money.Currency != "" {
		rw.Money = rec.Money.String()
	}
	if rec.AtRisk.Currency != "" && rec.AtRisk.Amount != 0 {
		rw.AtRisk = rec.AtRisk.String()
	}
	if !rec.AcknowledgedAt.IsZero() {
		rw.AckAt = rec.AcknowledgedAt.UTC().Format(time.RFC3339)
	}
	if rec.Account != "" {
		rw.Account = link{ID: redact.Text(reconcile.Account{ID: rec.Account, Name: rec.AccountName}.Label()),
			URL: alerts.ConnectedAccountURL(rec.Account, s.live)}
	}
	for _, id := range rec.ProviderIDs {
		rw.Providers = append(rw.Providers, link{ID: id, URL: alerts.AccountDashboardURL(rec.Account, id, s.live)})
	}
	return rw
}
