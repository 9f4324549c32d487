package trace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// fakeObligations holds the obligations table, as sources.Obligations.Get
// answers: an error wrapping sources.ErrNotFound for an unknown id.
type fakeObligations map[string]reconcile.Obligation

func (f fakeObligations) Get(_ context.Context, id string) (reconcile.Obligation, error) {
	o, ok := f[id]
	if !ok {
		return reconcile.Obligation{}, fmt.Errorf("get obligation %q: %w", id, sources.ErrNotFound)
	}
	return o, nil
}

// fakeHistory is the store's side: schemaErr as CheckSchema's answer, and
// the history it holds.
type fakeHistory struct {
	schemaErr error
	h         store.History
	asked     []string
}

func (f *fakeHistory) CheckSchema(context.Context) error { return f.schemaErr }

func (f *fakeHistory) ObligationHistory(_ context.Context, id string) (store.History, error) {
	f.asked = append(f.asked, id)
	return f.h, nil
}

// fakePass answers every pass with out or err and records the requests.
type fakePass struct {
	out  *runner.Outcome
	err  error
	reqs []runner.Request
}

func (f *fakePass) Run(_ context.Context, req runner.Request) (*runner.Outcome, error) {
	f.reqs = append(f.reqs, req)
	return f.out, f.err
}

var (
	now     = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	created = now.Add(-3 * time.Hour)
	usd     = func(a int64) reconcile.Money { return reconcile.Money{Amount: a, Currency: "usd"} }

	// The story this tool exists for: refund 4821 paid out twice.
	refund = reconcile.Obligation{ID: "refund:4821:approved-request-7", Kind: reconcile.Refund,
		IdempotencyKey: "refund:4821:approved-request-7", Provider: "stripe", ProviderID: "re_4821b", TargetID: "ch_4821",
		Money: usd(8900), State: reconcile.Paid, RawState: "PAID", CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created.Add(time.Minute)),
		PaidAt: reconcile.StampOf(created.Add(time.Minute))}

	dup = reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical, ObligationID: refund.ID,
		ProviderIDs: []string{"re_4821a", "re_4821b"}, Money: usd(8900), AtRisk: usd(8900), Fingerprint: "c83330dc6b3c018abc15",
		Detail: "paid out twice (card 4242424242424242)"}
)

// outcome is what a dry pass over the provider read: the two refunds of
// the obligation (one by key, one by provider id), its target charge, a
// refund on the same charge linked elsewhere, and what concerns others.
func outcome() *runner.Outcome {
	obj := func(id string, kind reconcile.ObjectKind, m reconcile.Money, target string, at time.Duration) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: kind, Money: m, Status: reconcile.Succeeded, RawStatus: "succeeded",
			Target: target, Charge: target, Created: reconcile.StampOf(created.Add(at))}
	}
	other := reconcile.Finding{Kind: reconcile.Orphan, Severity: reconcile.High, ProviderIDs: []string{"ch_9999"},
		Money: usd(5), AtRisk: usd(5), Fingerprint: "ffff", Detail: "no obligation"}
	return &runner.Outcome{
		Input: matcher.Input{
			Objects: []reconcile.ProviderObject{
				obj("re_4821a", reconcile.Refund, usd(8900), "ch_4821", time.Minute),
				obj("re_4821b", reconcile.Refund, usd(8900), "ch_4821", 3*time.Minute),
				obj("re_other", reconcile.Refund, usd(100), "ch_4821", 5*time.Minute),
				obj("ch_9999", reconcile.Charge, usd(5), "", time.Hour),
				// Read twice (listed and retrieved by id): shown once.
				obj("re_4821a", reconcile.Refund, usd(8900), "ch_4821", time.Minute),
			},
			Keys: []reconcile.KeyEvidence{
				{ObjectID: "re_4821a", Key: "refund:4821:approved-request-7", EventID: "evt_1", EventType: "refund.created", Created: reconcile.StampOf(created)},
				{ObjectID: "ch_9999", Key: "k-9999", EventID: "evt_2", EventType: "charge.succeeded", Created: reconcile.StampOf(created)},
				// The obligation's key on an object not read: shown, it
				// says the key was used.
				{ObjectID: "re_gone", Key: "refund:4821:approved-request-7", EventID: "evt_3", EventType: "refund.created", Created: reconcile.StampOf(created)},
			},
		},
		Result: matcher.Result{
			Conclusions: reconcile.Conclusions{Findings: []reconcile.Finding{dup, other}},
			Links: []reconcile.Link{
				{ObjectID: "re_4821a", ObligationID: refund.ID, Route: reconcile.RouteIdempotencyKey},
				{ObjectID: "re_4821b", ObligationID: refund.ID, Route: reconcile.RouteProviderID},
				{ObjectID: "re_other", ObligationID: "refund:4821:other", Route: reconcile.RouteIdempotencyKey},
			},
		},
		Transitions: []reconcile.Transition{
			{ObligationID: "refund:4821:other", From: reconcile.ConfirmationUnknown, To: reconcile.Paid, ProviderID: "re_other"},
		},
		Lookups: []reconcile.Lookup{
			{ID: "ch_4821", Result: reconcile.LookupFailed, Err: "GET with key sk_test_abcdefghijklmnopqrstu: 503"},
			{ID: "ch_elsewhere", Result: reconcile.LookupFound},
		},
		Covered: reconcile.Window{From: created.Add(-time.Hour), To: now},
	}
}

func history() store.History {
	return store.History{ObligationID: refund.ID,
		Findings: []store.FindingRecord{{Finding: dup, Status: store.FindingOpen, FirstSeenRun: "run_1", FirstSeenAt: now.Add(-time.Hour),
			LastSeenRun: "run_2", LastSeenAt: now, AcknowledgedAt: now, AcknowledgedBy: "finance@example.com", AckReason: "returned"}},
		Transitions: []store.TransitionRecord{{ID: 1, ObligationID: refund.ID, From: reconcile.ConfirmationUnknown,
			To: reconcile.Paid, ProviderID: "re_4821b", RunID: "run_1", At: now.Add(-time.Hour)}},
		Alerts: []store.AlertRecord{{ID: 7, RunID: "run_1", Fingerprint: dup.Fingerprint, Event: reconcile.AlertFiring,
			CreatedAt: now.Add(-time.Hour), Attempts: 2, LastError: "token xoxb-1234-abcd rejected", OutcomeUnknown: true}},
	}
}

func deps(h *fakeHistory, p Pass) Deps {
	return Deps{Obligations: fakeObligations{refund.ID: refund}, History: h, Provider: p,
		DuplicateWindow: 24 * time.Hour, Now: func() time.Time { return now.Add(500 * time.Millisecond) }}
}

// A trace keeps, of what the dry pass read, what concerns the obligation:
// the objects linked to it (with their routes) or sharing its target, the
// keys of those and its own key, the lookups of the ids it names, its
// findings and its transition; and the store's history, with what came
// from outside redacted.
func TestAssemble(t *testing.T) {
	h := &fakeHistory{h: history()}
	p := &fakePass{out: outcome()}
	got, err := Assemble(t.Context(), deps(h, p), refund.ID)
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	stored := report.FromRecord(history().Findings[0])
	want := Trace{
		Obligation: Obligation{ID: refund.ID, Kind: "refund", IdempotencyKey: refund.IdempotencyKey, ProviderID: "re_4821b",
			TargetID: "ch_4821", Amount: 8900, Currency: "usd", State: "PAID", CreatedAt: "2026-11-30T09:00:00Z",
			UpdatedAt: "2026-11-30T09:01:00Z", PaidAt: "2026-11-30T09:01:00Z"},
		Window: &report.Window{From: "2026-11-30T08:00:00Z", To: "2026-11-30T12:00:00Z"},
		Objects: []Object{
			{ID: "re_4821a", Kind: "refund", Status: "succeeded", RawStatus: "succeeded", Amount: 8900, Currency: "usd",
				Target: "ch_4821", Created: "2026-11-30T09:01:00Z", Route: "idempotency_key"},
			{ID: "re_4821b", Kind: "refund", Status: "succeeded", RawStatus: "succeeded", Amount: 8900, Currency: "usd",
				Target: "ch_4821", Created: "2026-11-30T09:03:00Z", Route: "provider_id"},
			{ID: "re_other", Kind: "refund", Status: "succeeded", RawStatus: "succeeded", Amount: 100, Currency: "usd",
				Target: "ch_4821", Created: "2026-11-30T09:05:00Z"},
		},
		Keys: []Key{
			{ObjectID: "re_4821a", Key: refund.IdempotencyKey, EventID: "evt_1", EventType: "refund.created", Created: "2026-11-30T09:00:00Z"},
			{ObjectID: "re_gone", Key: refund.IdempotencyKey, EventID: "evt_3", EventType: "refund.created", Created: "2026-11-30T09:00:00Z"},
		},
		Lookups:     []Lookup{{ID: "ch_4821", Result: "failed", Error: "GET with key <redacted>: 503"}},
		Current:     []report.Finding{report.FromFinding(dup)},
		Findings:    []report.Finding{stored},
		Transitions: []Audit{{From: "CONFIRMATION_UNKNOWN", To: "PAID", ProviderID: "re_4821b", RunID: "run_1", At: "2026-11-30T11:00:00Z"}},
		Alerts: []Alert{{ID: 7, Event: "firing", Fingerprint: dup.Fingerprint, RunID: "run_1", CreatedAt: "2026-11-30T11:00:00Z",
			Attempts: 2, Unknown: true, LastError: "token <redacted> rejected"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Assemble (-want +got):\n%s", diff)
	}
	if strings.Contains(got.Current[0].Detail, "4242424242424242") || strings.Contains(got.Findings[0].Detail, "4242424242424242") {
		t.Errorf("finding details are not redacted: %q, %q", got.Current[0].Detail, got.Findings[0].Detail)
	}
	if diff := cmp.Diff([]string{refund.ID}, h.asked); diff != "" {
		t.Errorf("history asked for (-want +got):\n%s", diff)
	}
	// One dry pass, from an hour before the obligation's creation to a
	// duplicate window after its last change, or now (to the second)
	// when that is earlier, and a second more; of the obligation's own
	// account (the platform's) alone.
	wantReq := []runner.Request{{Window: reconcile.Window{From: created.Add(-time.Hour), To: now.Add(time.Second)},
		DryRun: true, Trigger: reconcile.TriggerManual, Accounts: []string{""}}}
	if diff := cmp.Diff(wantReq, p.reqs); diff != "" {
		t.Errorf("passes asked for (-want +got):\n%s", diff)
	}
}

// The obligation that a pass would mark PAID says so; an old one is read
// up to a duplicate window after its last change, not to now.
func TestAssembleWouldTransition(t *testing.T) {
	other := reconcile.Obligation{ID: "refund:4821:other", Kind: reconcile.Refund, IdempotencyKey: "rk-other", TargetID: "ch_4821",
		Money: usd(100), State: reconcile.ConfirmationUnknown, RawState: "CONFIRMATION_UNKNOWN",
		CreatedAt: reconcile.StampOf(now.Add(-72 * time.Hour)), UpdatedAt: reconcile.StampOf(now.Add(-71 * time.Hour))}
	p := &fakePass{out: outcome()}
	d := deps(&fakeHistory{}, p)
	d.Obligations = fakeObligations{other.ID: other}
	got, err := Assemble(t.Context(), d, other.ID)
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	want := &report.Transition{ObligationID: other.ID, From: "CONFIRMATION_UNKNOWN", To: "PAID", ProviderID: "re_other"}
	if diff := cmp.Diff(want, got.Transition); diff != "" {
		t.Errorf("Assemble(%s).Transition (-want +got):\n%s", other.ID, diff)
	}
	if len(got.Current) != 0 {
		t.Errorf("Assemble(%s).Current = %+v, want none (the duplicate is another's)", other.ID, got.Current)
	}
	if w, want := p.reqs[0].Window, now.Add(-47*time.Hour+time.Second); !w.To.Equal(want) {
		t.Errorf("pass window ends %s, want a duplicate window after the last change and a second (%s)", w.To, want)
	}
}

func TestAssembleErrors(t *testing.T) {
	t.Run("unknown obligation", func(t *testing.T) {
		p := &fakePass{out: outcome()}
		_, err := Assemble(t.Context(), deps(&fakeHistory{}, p), "refund:nope")
		if !errors.Is(err, ErrNotFound) || err.Error() != `trace: no obligation "refund:nope" in the obligations table` {
			t.Errorf("Assemble(unknown) error = %v, want ErrNotFound saying which", err)
		}
		if len(p.reqs) != 0 {
			t.Errorf("Assemble(unknown) read the provider %d times, want never", len(p.reqs))
		}
	})
	t.Run("unknown obligation named by a card number", func(t *testing.T) {
		_, err := Assemble(t.Context(), deps(&fakeHistory{}, &fakePass{}), "4242\t4242\t4242\t4242")
		if err == nil || err.Error() != `trace: no obligation "•••• 4242" in the obligations table` {
			t.Errorf("Assemble(unknown card number) error = %v, want it masked", err)
		}
	})
	t.Run("store never migrated", func(t *testing.T) {
		h := &fakeHistory{schemaErr: fmt.Errorf("schema reconcile: %w", store.ErrSchemaOutdated), h: history()}
		got, err := Assemble(t.Context(), deps(h, &fakePass{out: outcome()}), refund.ID)
		if err != nil || len(got.Findings) != 0 || len(got.Alerts) != 0 || len(h.asked) != 0 {
			t.Errorf("Assemble without the schema = %d findings, %d alerts, %v; want an empty history and the rest", len(got.Findings), len(got.Alerts), err)
		}
		if len(got.Objects) == 0 {
			t.Errorf("Assemble without the schema shows no provider objects")
		}
	})
	t.Run("store fails", func(t *testing.T) {
		boom := errors.New("check the reconcile schema: connection reset")
		if _, err := Assemble(t.Context(), deps(&fakeHistory{schemaErr: boom}, &fakePass{}), refund.ID); !errors.Is(err, boom) {
			t.Errorf("Assemble with a failing store = %v, want %v", err, boom)
		}
	})
	t.Run("provider unreadable", func(t *testing.T) {
		p := &fakePass{err: errors.New("read the provider: key sk_test_abcdefghijklmnopqrstu rejected")}
		got, err := Assemble(t.Context(), deps(&fakeHistory{h: history()}, p), refund.ID)
		if err != nil {
			t.Fatalf("Assemble with the provider unreadable: %v, want the trace", err)
		}
		if got.ProviderError != "read the provider: key <redacted> rejected" || got.Window != nil || len(got.Findings) != 1 {
			t.Errorf("Assemble with the provider unreadable = %q, window %v, %d findings; want the redacted error, no window, the history",
				got.ProviderError, got.Window, len(got.Findings))
		}
	})
}

// An empty trace prints its lists as [], never null: tools index them.
func TestEmptyTracePrintsArrays(t *testing.T) {
	got, err := Assemble(t.Context(), deps(&fakeHistory{}, &fakePass{out: &runner.Outcome{}}), refund.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"provider_objects", "idempotency_keys", "lookups", "findings_now", "findings", "transitions", "alerts"} {
		if string(m[k]) != "[]" {
			t.Errorf("empty trace's %s = %s, want []", k, m[k])
		}
	}
	for _, k := range []string{"provider_error", "would_transition"} {
		if _, ok := m[k]; ok {
			t.Errorf("empty trace prints %s, want it omitted", k)
		}
	}
}

// The text is for people: how each object links, what a run would do,
// and who acknowledged, with what came from outside redacted.
func TestWriteText(t *testing.T) {
	got, err := Assemble(t.Context(), deps(&fakeHistory{h: history()}, &fakePass{out: outcome()}), refund.ID)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteText(&b, got)
	for _, want := range []string{"obligation refund:4821:approved-request-7\n", "refund of USD 89.00, state PAID",
		"re_4821a         refund         succeeded  USD 89.00   created 2026-11-30T09:01:00Z   linked by idempotency key",
		"linked by provider id", "re_other", "not linked (same target)", "looked up ch_4821 by id: failed GET with key <redacted>: 503",
		"now: critical duplicate — paid out twice", "CONFIRMATION_UNKNOWN → PAID  evidence re_4821b  run run_1",
		"(open, acknowledged by [email]: returned)", "an attempt's outcome is unknown"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteText lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "4242424242424242") {
		t.Errorf("WriteText shows a card number:\n%s", b.String())
	}

	b.Reset()
	got, err = Assemble(t.Context(), deps(&fakeHistory{}, &fakePass{err: errors.New("STRIPE_API_KEY is not set")}), refund.ID)
	if err != nil {
		t.Fatal(err)
	}
	WriteText(&b, got)
	for _, want := range []string{"provider: not read (STRIPE_API_KEY is not set)", "transitions made by the reconciler\n  none",
		"findings\n  none", "alerts\n  none"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteText without the provider lacks %q:\n%s", want, b.String())
		}
	}
}

// The text of a trace shows every outside value on one line, masked,
// without control or format characters, whatever the obligation, the
// provider or Slack wrote; the JSON keeps the ids exact.
func TestWriteTextNeutralisesOutsideText(t *testing.T) {
	const bad = "x\nFORGED line\u202e\u200b\u2028\t4242\u200b4242 4242 4242"
	ob := refund
	ob.ID, ob.IdempotencyKey, ob.ProviderID, ob.TargetID, ob.RawState = bad, bad, bad, bad, bad
	ob.LeaseOwner, ob.Money.Currency = bad, "usd\n"+bad
	h := history()
	for i := range h.Findings {
		h.Findings[i].ObligationID, h.Findings[i].Detail = bad, bad
		h.Findings[i].AcknowledgedBy, h.Findings[i].AckReason = bad, bad
	}
	for i := range h.Alerts {
		h.Alerts[i].SlackTS, h.Alerts[i].LastError = bad, bad
	}
	out := outcome()
	for i := range out.Input.Keys {
		out.Input.Keys[i].Key, out.Input.Keys[i].EventType, out.Input.Keys[i].EventID = ob.IdempotencyKey, bad, bad
	}
	out.Lookups = append(out.Lookups, reconcile.Lookup{ID: bad, Result: reconcile.LookupFailed, Err: bad})
	out.Input.Objects = append(out.Input.Objects, reconcile.ProviderObject{ID: bad, Kind: reconcile.Refund,
		Money: reconcile.Money{Amount: 1, Currency: bad}, Status: reconcile.Succeeded, RawStatus: bad, Created: reconcile.StampOf(created)})
	h.Transitions[0].ProviderID = bad
	d := deps(&fakeHistory{h: h}, &fakePass{out: out})
	d.Obligations = fakeObligations{bad: ob}
	got, err := Assemble(t.Context(), d, bad)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteText(&b, got)
	for _, r := range b.String() {
		if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028') {
			t.Fatalf("WriteText holds %U:\n%s", r, b.String())
		}
	}
	if n := strings.Count(b.String(), "FORGED line"); n < 15 {
		t.Errorf("WriteText shows %d outside values, want every one:\n%s", n, b.String())
	}
	if strings.Contains(b.String(), "\nFORGED") || strings.Contains(b.String(), "4242 4242") {
		t.Errorf("WriteText shows what outside text forged or hid:\n%s", b.String())
	}
	if got.Obligation.ID != bad || got.Obligation.IdempotencyKey != bad {
		t.Errorf("the trace's obligation id and key = %q, %q; want them exact for JSON", got.Obligation.ID, got.Obligation.IdempotencyKey)
	}
}
