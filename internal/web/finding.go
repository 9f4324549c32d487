package web

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/redact"
	"reconcile/internal/store"
	"reconcile/internal/trace"
)

// Tracer assembles an obligation's trace, as `reconcile trace` does
// (trace.Assemble); the page shows it as a timeline.
type Tracer func(ctx context.Context, obligationID string) (trace.Trace, error)

// Mirror is the provider's objects as the last pass read them
// (store.Mirror is one): a finding without an obligation (an orphan) is
// shown with its objects' own records.
type Mirror interface {
	Get(ctx context.Context, ids []string, since time.Time) ([]store.MirrorObject, error)
}

// accountMirror is a Mirror kept per Stripe account (store.Mirror): a
// connected account's finding shows that account's objects.
type accountMirror interface {
	ForAccount(account string) *store.Mirror
}

// The finding page's data.
type (
	event struct {
		At, What, Detail string
		Links            []link
	}
	object struct {
		ID, URL, Kind, Status, Money, Refunded, Target, Intent, Created, Route string
	}
	findingPage struct {
		User     string
		CanAct   bool
		Finding  row
		Severity string
		Status   string
		Target   link
		// Open: the finding is still open, so it may be acknowledged or,
		// once acknowledged, reopened.
		Open, Acked    bool
		LastSeen       string
		Objects        []object
		ObjectsFrom    string
		Timeline       []event
		Now            []string
		WouldChange    string
		ProviderError  string
		Lookups        []string
		TraceError     string
		ObligationRow  []string
		HasObligation  bool
		ObjectsMissing []string
		// account is the finding's Stripe account, whose dashboard its
		// objects open in.
		account string
	}
)

// finding shows one finding: what it says, and the trace of its
// obligation as a timeline, or for a finding without one the provider
// objects' own records (docs/design.md, "The findings page").
func (s *server) finding(w http.ResponseWriter, r *http.Request) {
	fp := r.PathValue("fingerprint")
	rec, err := s.store.Finding(r.Context(), fp)
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, "no finding has that fingerprint", http.StatusNotFound)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	u := userOf(r)
	p := findingPage{
		User: redact.Text(u.name), CanAct: u.name != "", Finding: s.row(rec), Severity: string(rec.Severity),
		Status: string(rec.Status), Open: rec.Status == store.FindingOpen, Acked: !rec.AcknowledgedAt.IsZero(),
		LastSeen: stamp(rec.LastSeenAt), HasObligation: rec.ObligationID != "", account: rec.Account,
	}
	if rec.Target != "" {
		p.Target = link{ID: rec.Target, URL: alerts.AccountDashboardURL(rec.Account, rec.Target, s.live)}
	}
	traced := false
	if rec.ObligationID != "" && s.trace != nil {
		t, err := s.trace(r.Context(), rec.ObligationID)
		switch {
		case errors.Is(err, trace.ErrNotFound):
			p.TraceError = "The obligation " + redact.Text(rec.ObligationID) + " is no longer in the obligations table."
		case err != nil:
			s.logger.Error("trace failed", "fingerprint", fp, "error", redact.String(err.Error()))
			p.TraceError = "The obligation's trace could not be read; see the server's log."
		default:
			s.fromTrace(&p, t)
			traced = true
		}
	}
	if !traced {
		if err := s.fromStore(r.Context(), &p, rec); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	slices.SortStableFunc(p.Timeline, func(a, b event) int { return cmp.Compare(a.At, b.At) })
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "finding.html", p); err != nil {
		s.logger.Error("page failed", "path", r.URL.Path, "error", redact.String(err.Error()))
	}
}

// fromTrace fills the page from the obligation's trace: its row, what the
// provider holds for it now, and everything that happened, in time order.
func (s *server) fromTrace(p *findingPage, t trace.Trace) {
	o := t.Obligation
	m := reconcile.Money{Amount: o.Amount, Currency: o.Currency}
	p.ObligationRow = []string{
		"Obligation " + o.ID + " (" + o.Kind + "), " + m.String() + ", state " + o.State,
		"Idempotency key " + o.IdempotencyKey,
	}
	if o.Account != "" {
		p.ObligationRow = append(p.ObligationRow, "On connected account "+o.Account)
	}
	if o.ProviderID != "" {
		p.ObligationRow = append(p.ObligationRow, "Provider id "+o.ProviderID)
	}
	if o.TargetID != "" {
		p.ObligationRow = append(p.ObligationRow, "Refunds "+o.TargetID)
	}
	if o.LeaseOwner != "" {
		p.ObligationRow = append(p.ObligationRow, "Lease held by "+o.LeaseOwner+" until "+o.LeaseExpiresAt)
	}
	for i := range p.ObligationRow {
		p.ObligationRow[i] = redact.Text(p.ObligationRow[i])
	}
	s.add(p, o.CreatedAt, "Obligation created", o.Kind+" of "+m.String()+" under key "+o.IdempotencyKey)
	if o.UpdatedAt != "" && o.UpdatedAt != o.CreatedAt {
		s.add(p, o.UpdatedAt, "Obligation last updated", "state "+o.State)
	}
	if o.PaidAt != "" {
		s.add(p, o.PaidAt, "Obligation paid", "")
	}
	if t.Window != nil {
		p.ObjectsFrom = "What Stripe holds now, read from " + t.Window.From + " to " + t.Window.To + "."
	}
	p.ProviderError = t.ProviderError
	for _, ob := range t.Objects {
		p.Objects = append(p.Objects, s.object(p, ob))
		var how string
		switch {
		case ob.Route != "":
			how = "linked by " + strings.ReplaceAll(ob.Route, "_", " ")
		case ob.ID == o.TargetID:
			how = "what the obligation refunds"
		case ob.ID == o.ProviderID:
			how = "the obligation's provider id, yet not linked"
		default:
			how = "shares its target; not linked"
		}
		s.add(p, ob.Created, "Stripe "+strings.ReplaceAll(ob.Kind, "_", " ")+" created",
			ob.Status+", "+reconcile.Money{Amount: ob.Amount, Currency: ob.Currency}.String()+"; "+how, ob.ID)
	}
	for _, k := range t.Keys {
		req := "the request"
		if k.RequestID != "" {
			req = "request " + k.RequestID
		}
		s.add(p, k.Created, "Event "+k.EventType, "says "+req+", which created it, carried idempotency key "+k.Key, k.ObjectID, k.EventID)
	}
	for _, l := range t.Lookups {
		line := "Retrieved " + l.ID + " by id: " + l.Result
		if l.Error != "" {
			line += " (" + l.Error + ")"
		}
		p.Lookups = append(p.Lookups, redact.Text(line))
	}
	for _, a := range t.Transitions {
		s.add(p, a.At, "Reconciler moved it "+a.From+" → "+a.To, "run "+a.RunID, a.ProviderID)
	}
	for _, f := range t.Findings {
		label := reconcile.FindingKind(f.Kind).Info().Label
		s.add(p, f.FirstSeenAt, "Found: "+cmp.Or(label, f.Kind)+" ("+f.Severity+")", "run "+f.FirstSeenRun+"; fingerprint "+f.Fingerprint)
		if f.AcknowledgedAt != "" {
			s.add(p, f.AcknowledgedAt, "Acknowledged by "+f.AcknowledgedBy, f.AckReason)
		}
		if f.ResolvedAt != "" {
			s.add(p, f.ResolvedAt, "Resolved: no longer found", "fingerprint "+f.Fingerprint)
		}
	}
	for _, a := range t.Alerts {
		s.alertEvent(p, a)
	}
	for _, f := range t.Current {
		p.Now = append(p.Now, redact.Text(cmp.Or(reconcile.FindingKind(f.Kind).Info().Label, f.Kind)+": "+f.Detail))
	}
	if tr := t.Transition; tr != nil {
		p.WouldChange = redact.Text("A pass now would move it " + tr.From + " → " + tr.To + " on " + tr.ProviderID + ".")
	}
}

// fromStore fills the page of a finding without an obligation (or when
// no trace can be assembled): the finding's own history and alerts, and
// its objects as the mirror last read them.
func (s *server) fromStore(ctx context.Context, p *findingPage, rec store.FindingRecord) error {
	s.add(p, stamp(rec.FirstSeenAt), "Found: "+p.Finding.Label+" ("+string(rec.Severity)+")", "run "+rec.FirstSeenRun)
	if !rec.AcknowledgedAt.IsZero() {
		s.add(p, stamp(rec.AcknowledgedAt), "Acknowledged by "+rec.AcknowledgedBy, rec.AckReason)
	}
	if !rec.ResolvedAt.IsZero() {
		s.add(p, stamp(rec.ResolvedAt), "Resolved: no longer found", "run "+rec.ResolvedRun)
	}
	as, err := s.store.FindingAlerts(ctx, rec.Fingerprint)
	if err != nil {
		return err
	}
	for _, a := range as {
		s.alertEvent(p, trace.AlertOf(a))
	}
	if s.mirror == nil {
		return nil
	}
	ids := rec.ProviderIDs
	if rec.Target != "" && !slices.Contains(ids, rec.Target) {
		ids = append(slices.Clone(ids), rec.Target)
	}
	mirror := s.mirror
	if am, ok := mirror.(accountMirror); ok && rec.Account != "" {
		mirror = am.ForAccount(rec.Account)
	}
	mos, err := mirror.Get(ctx, ids, time.Time{})
	if err != nil {
		return err
	}
	p.ObjectsFrom = "Stripe's records as the last pass read them (the mirror)."
	for _, mo := range mos {
		o := mo.Object
		p.Objects = append(p.Objects, s.object(p, trace.Object{ID: o.ID, Kind: string(o.Kind), Status: string(o.Status),
			Amount: o.Money.Amount, Currency: o.Money.Currency, Refunded: o.AmountRefunded, Target: o.Target,
			Intent: o.PaymentIntent, Created: stamp(o.Created.Time())}))
		how := "no obligation links to it"
		if rec.ObligationID != "" {
			// Without the obligation's trace, how it links was not read.
			how = "as the mirror last read it"
		}
		s.add(p, stamp(o.Created.Time()), "Stripe "+strings.ReplaceAll(string(o.Kind), "_", " ")+" created",
			string(o.Status)+", "+o.Money.String()+"; "+how, o.ID)
	}
	for _, id := range ids {
		if !slices.ContainsFunc(mos, func(mo store.MirrorObject) bool { return mo.Object.ID == id }) {
			p.ObjectsMissing = append(p.ObjectsMissing, id)
		}
	}
	return nil
}

func (s *server) object(p *findingPage, o trace.Object) object {
	ob := object{ID: o.ID, URL: alerts.AccountDashboardURL(p.account, o.ID, s.live), Kind: strings.ReplaceAll(o.Kind, "_", " "),
		Status: redact.Text(o.Status), Money: reconcile.Money{Amount: o.Amount, Currency: o.Currency}.String(),
		Target: o.Target, Intent: o.Intent, Created: o.Created, Route: strings.ReplaceAll(o.Route, "_", " ")}
	if o.Refunded != 0 {
		ob.Refunded = reconcile.Money{Amount: o.Refunded, Currency: o.Currency}.String()
	}
	if o.RawStatus != "" && o.RawStatus != o.Status {
		ob.Status += " (" + redact.Text(o.RawStatus) + ")"
	}
	return ob
}

// alertEvent puts an alert on the timeline: when it was queued, and when
// Slack took it, with a link to the message, or why it has not.
func (s *server) alertEvent(p *findingPage, a trace.Alert) {
	what := "Alert (" + a.Event + ") queued for Slack"
	detail := "run " + a.RunID
	switch {
	case a.SentAt != "":
		var links []link
		if u := slackLink(a.SlackChannel, a.SlackTS); u != "" {
			links = append(links, link{ID: "the message in Slack", URL: u})
		}
		s.add(p, a.CreatedAt, what, detail)
		p.Timeline = append(p.Timeline, event{At: a.SentAt, What: "Alert (" + a.Event + ") delivered to Slack", Links: links})
		return
	case a.Unknown:
		detail += "; a delivery may have reached Slack without an answer"
	case a.Attempts > 0:
		detail += "; not delivered yet after " + plural(a.Attempts, "attempt")
		if a.LastError != "" {
			detail += ": " + a.LastError
		}
	default:
		detail += "; not delivered yet"
	}
	s.add(p, a.CreatedAt, what, detail)
}

// add puts an event on the timeline; ids are linked to the dashboard
// where they are Stripe's. Every text is masked, one line.
func (s *server) add(p *findingPage, at, what, detail string, ids ...string) {
	e := event{At: at, What: redact.Text(what), Detail: redact.Text(detail)}
	for _, id := range ids {
		if id != "" {
			e.Links = append(e.Links, link{ID: id, URL: alerts.AccountDashboardURL(p.account, id, s.live)})
		}
	}
	p.Timeline = append(p.Timeline, e)
}

// slackLink is a Slack message's address, which opens it in the
// workspace of whoever follows it; empty for ids that are not Slack's.
func slackLink(channel, ts string) string {
	if !slackChannel(channel) || !slackTS(ts) {
		return ""
	}
	return "https://slack.com/archives/" + url.PathEscape(channel) + "/p" + strings.Replace(ts, ".", "", 1)
}

func slackChannel(c string) bool {
	if len(c) < 2 || len(c) > 32 {
		return false
	}
	for _, r := range c {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

func slackTS(ts string) bool {
	sec, frac, ok := strings.Cut(ts, ".")
	if !ok || len(sec) == 0 || len(sec) > 12 || len(frac) != 6 {
		return false
	}
	for _, r := range sec + frac {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func plural(n int, one string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + one + "s"
}
