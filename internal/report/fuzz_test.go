package report_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/redact"
	"reconcile/internal/redact/redacttest"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/store"
	"reconcile/internal/trace"
)

// attacks are the seed corpus, as internal/alerts' FuzzRenderers has it:
// formatting, a forged line, mentions, bidirectional and zero-width
// characters, card numbers hidden from the masking, e-mail addresses,
// spreadsheet formulas, broken UTF-8.
var attacks = []string{
	"*bold*", "_italic_", "~strike~", "`code`", "> quoted", "charge:1\n*FAKE* Duplicate payment: USD 1,000,000",
	"charge:1\nCRITICAL  forged", "re_4821a", "<!channel>", "&amp;lt;", "id\u202egnp.exe", "\u2066x\u2069\u2067y\u2068z",
	"a\u200bb\u200cc\u200dd", "\u200e\u200f\u202a\u202b\u202c\u202d\ufeff", "line\u2028sep\u2029para", "4242424242424242",
	"4242 4242 4242 4242", "4242\u200b4242\u200b4242\u200b4242", "4242\n4242\t4242\r4242", "4242  4242  4242  4242",
	"5555-5555-5555-4444", "jane.doe@example.com", "=HYPERLINK(\"https://evil\")", "+1", "-1", "@SUM(A1)", "\tx", "\rx",
	"x\r\ny", "\xff\xfe", "a\x00b\x1b[31mred", "sk_live_0123456789abcdefABCDEF", "", " ",
}

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// FuzzRenderers builds, from fuzzed ids, an idempotency key, a state, a
// detail, a metadata value and an acknowledgement, a pass's outcome, the
// store's records and a trace, and renders them every way the commands
// print them: the run report (JSON and text), the findings (JSON, CSV and
// text), the trace (JSON and text) and the mirror's metadata at rest. It
// checks (docs/design.md, "Untrusted text"):
//
//   - JSON: valid; the ids (obligation and provider ids, the key, the
//     state, the fingerprint) decode to exactly the input; the free text
//     (detail, who acknowledged and why, error texts) holds no card-like
//     number (13 to 19 digits passing Luhn), no e-mail address and no
//     control, format or separator character;
//   - CSV: parses back with encoding/csv, a header and one row of as many
//     cells; no cell starts with = + - @, a tab or a carriage return; the
//     id columns hold the ids exact but for the apostrophe that defuses a
//     formula (and the \r\n that encoding/csv reads back as \n); the free
//     text is as in JSON;
//   - text: no control character but the newlines between lines, no
//     format or separator character, no card-like number or e-mail
//     address, and exactly as many lines as the same outputs rendered
//     from stand-ins (a distinct plain word for each distinct input,
//     empty for empty): outside text adds no line;
//   - the mirror: the link keys' values exact, every other key and value
//     without card-like number or e-mail address.
//
// Ids are valid UTF-8, as they come from PostgreSQL's text and Stripe's
// JSON: the inputs are made valid first.
func FuzzRenderers(f *testing.F) {
	for i, a := range attacks {
		b, c := attacks[(i+1)%len(attacks)], attacks[(i+7)%len(attacks)]
		f.Add(a, b, c, a, "detail "+b, c, a+b)
	}
	f.Fuzz(func(t *testing.T, obligation, providerID, key, state, detail, meta, ack string) {
		in := inputs{obligation, providerID, key, state, detail, meta, ack}
		for i := range in {
			in[i] = strings.ToValidUTF8(in[i], "\uFFFD")
		}
		out := renderAll(t, in)
		checkJSON(t, in, out)
		checkCSV(t, in, out.csv)
		checkMetadata(t, in)
		stand := renderAll(t, in.standIns())
		for name, text := range out.texts {
			checkHuman(t, name, text)
			if got, want := strings.Count(text, "\n"), strings.Count(stand.texts[name], "\n"); got != want {
				t.Fatalf("%s: %d lines, from stand-ins %d: outside text added a line:\n%s", name, got, want, text)
			}
		}
	})
}

// inputs are the fuzzed strings: obligation id, provider id, idempotency
// key, state, detail, metadata value, acknowledgement.
type inputs [7]string

func (in inputs) obligation() string { return in[0] }
func (in inputs) providerID() string { return in[1] }
func (in inputs) key() string        { return in[2] }
func (in inputs) state() string      { return in[3] }
func (in inputs) detail() string     { return in[4] }
func (in inputs) meta() string       { return in[5] }
func (in inputs) ack() string        { return in[6] }

// standIns replaces each distinct input by a distinct plain word, keeping
// empty ones empty, so that what equals what is kept.
func (in inputs) standIns() inputs {
	words := map[string]string{"": ""}
	var out inputs
	for i, s := range in {
		if _, ok := words[s]; !ok {
			words[s] = fmt.Sprintf("w%d", len(words))
		}
		out[i] = words[s]
	}
	return out
}

type rendered struct {
	runJSON, findingsJSON, traceJSON []byte
	csv                              []byte
	texts                            map[string]string
}

const fingerprint = "c83330dc6b3c018abc15"

func renderAll(t *testing.T, in inputs) rendered {
	t.Helper()
	usd := reconcile.Money{Amount: 8900, Currency: "usd"}
	fnd := reconcile.Finding{Kind: reconcile.Duplicate, Severity: reconcile.Critical, ObligationID: in.obligation(),
		ProviderIDs: []string{in.providerID(), "re_2"}, Money: usd, AtRisk: usd, Fingerprint: fingerprint, Detail: in.detail()}
	orphan := fnd
	orphan.Kind, orphan.Severity, orphan.ObligationID, orphan.ProviderIDs = reconcile.Orphan, reconcile.High, "", []string{in.providerID()}
	rec := store.FindingRecord{Finding: fnd, Status: store.FindingOpen, FirstSeenRun: "run_1", FirstSeenAt: t0,
		LastSeenRun: "run_2", LastSeenAt: t0, AcknowledgedAt: t0, AcknowledgedBy: in.ack(), AckReason: in.ack() + " " + in.detail()}
	recs := []store.FindingRecord{rec, {Finding: orphan, Status: store.FindingResolved, FirstSeenAt: t0, LastSeenAt: t0, ResolvedAt: t0}}
	obj := reconcile.ProviderObject{ID: in.providerID(), Kind: reconcile.Charge, Money: usd, Status: reconcile.Succeeded,
		RawStatus: in.state(), Metadata: map[string]string{"obligation_id": in.obligation(), "note": in.meta()}, Created: reconcile.StampOf(t0)}
	keys := []reconcile.KeyEvidence{{ObjectID: in.providerID(), Key: in.key(), EventID: "evt_1", EventType: "charge.succeeded", Created: reconcile.StampOf(t0)}}
	links := []reconcile.Link{{ObjectID: in.providerID(), ObligationID: in.obligation(), Route: reconcile.RouteMetadataID}}
	outcome := &runner.Outcome{
		Run:         reconcile.Run{ID: "run_1", Status: reconcile.RunCompleted, Window: reconcile.Window{From: t0.Add(-time.Hour), To: t0}},
		Input:       matcher.Input{Objects: []reconcile.ProviderObject{obj}, Keys: keys},
		Result:      matcher.Result{Conclusions: reconcile.Conclusions{Findings: []reconcile.Finding{fnd, orphan}}, Links: links},
		Transitions: []reconcile.Transition{{ObligationID: in.obligation(), From: reconcile.ConfirmationUnknown, To: reconcile.Paid, ProviderID: in.providerID()}},
		Lookups:     []reconcile.Lookup{{ID: in.providerID(), Result: reconcile.LookupFailed, Err: in.detail()}},
		Covered:     reconcile.Window{From: t0.Add(-2 * time.Hour), To: t0},
		Unmapped:    map[string]int{in.state(): 1},
	}
	ob := reconcile.Obligation{ID: in.obligation(), Kind: reconcile.Charge, IdempotencyKey: in.key(), ProviderID: in.providerID(),
		Money: usd, State: reconcile.Paid, RawState: in.state(), LeaseOwner: in.ack(), CreatedAt: reconcile.StampOf(t0.Add(-time.Hour)), UpdatedAt: reconcile.StampOf(t0)}
	hist := store.History{ObligationID: in.obligation(), Findings: recs[:1],
		Transitions: []store.TransitionRecord{{ObligationID: in.obligation(), From: reconcile.ConfirmationUnknown, To: reconcile.Paid, ProviderID: in.providerID(), RunID: "run_1", At: t0}},
		Alerts: []store.AlertRecord{{ID: 1, RunID: "run_1", Fingerprint: fingerprint, Event: reconcile.AlertFiring, CreatedAt: t0,
			Attempts: 1, SentAt: t0, SlackTS: in.state(), LastError: in.meta()}}}

	var r rendered
	var err error
	if r.runJSON, err = json.Marshal(report.New(outcome)); err != nil {
		t.Fatal(err)
	}
	if r.findingsJSON, err = json.Marshal(report.FromRecords(recs)); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := report.WriteFindingsCSV(&b, recs); err != nil {
		t.Fatal(err)
	}
	r.csv = slices.Clone(b.Bytes())
	r.texts = map[string]string{}
	b.Reset()
	report.WriteText(&b, outcome)
	r.texts["run text"] = b.String()
	b.Reset()
	if err := report.WriteFindingsText(&b, recs); err != nil {
		t.Fatal(err)
	}
	r.texts["findings text"] = b.String()

	tr, err := trace.Assemble(context.Background(), trace.Deps{
		Obligations: oneObligation{ob}, History: history{hist},
		Provider: trace.PassFunc(func(context.Context, runner.Request) (*runner.Outcome, error) { return outcome, nil }),
		Now:      func() time.Time { return t0 },
	}, in.obligation())
	if err != nil {
		t.Fatal(err)
	}
	if r.traceJSON, err = json.Marshal(tr); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	trace.WriteText(&b, tr)
	r.texts["trace text"] = b.String()
	// A trace whose provider could not be read shows the error instead.
	tr, err = trace.Assemble(context.Background(), trace.Deps{
		Obligations: oneObligation{ob}, History: history{hist},
		Provider: trace.PassFunc(func(context.Context, runner.Request) (*runner.Outcome, error) {
			return nil, fmt.Errorf("read the provider: %s", in.detail())
		}),
		Now: func() time.Time { return t0 },
	}, in.obligation())
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	trace.WriteText(&b, tr)
	r.texts["trace text, provider not read"] = b.String()
	if !strings.Contains(string(mustJSON(t, tr)), `"provider_error"`) {
		t.Fatalf("a trace whose provider failed has no provider_error")
	}
	checkFree(t, "provider_error", tr.ProviderError)
	return r
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type oneObligation struct{ o reconcile.Obligation }

func (o oneObligation) Get(context.Context, string) (reconcile.Obligation, error) { return o.o, nil }

type history struct{ h store.History }

func (history) CheckSchema(context.Context) error { return nil }
func (h history) ObligationHistory(context.Context, string) (store.History, error) {
	return h.h, nil
}

func checkJSON(t *testing.T, in inputs, r rendered) {
	t.Helper()
	for name, b := range map[string][]byte{"run": r.runJSON, "findings": r.findingsJSON, "trace": r.traceJSON} {
		if !json.Valid(b) {
			t.Fatalf("%s JSON is not valid: %s", name, b)
		}
	}
	var rep report.Report
	decodeJSON(t, r.runJSON, &rep)
	exact(t, "run findings[0].obligation_id", rep.Findings[0].ObligationID, in.obligation())
	exact(t, "run findings[0].provider_ids[0]", rep.Findings[0].ProviderIDs[0], in.providerID())
	exact(t, "run findings[0].fingerprint", rep.Findings[0].Fingerprint, fingerprint)
	exact(t, "run transitions[0].obligation_id", rep.Transitions[0].ObligationID, in.obligation())
	exact(t, "run transitions[0].provider_id", rep.Transitions[0].ProviderID, in.providerID())
	if !maps.Equal(rep.UnmappedStates, map[string]int{in.state(): 1}) {
		t.Fatalf("run unmapped_states = %v, want %q exact", rep.UnmappedStates, in.state())
	}
	for _, f := range rep.Findings {
		checkFree(t, "run detail", f.Detail)
	}

	var fs []report.Finding
	decodeJSON(t, r.findingsJSON, &fs)
	exact(t, "findings obligation_id", fs[0].ObligationID, in.obligation())
	exact(t, "findings provider_ids", strings.Join(fs[0].ProviderIDs, "\x00"), in.providerID()+"\x00re_2")
	for _, f := range fs {
		checkFree(t, "findings detail", f.Detail)
		checkFree(t, "findings acknowledged_by", f.AcknowledgedBy)
		checkFree(t, "findings ack_reason", f.AckReason)
	}

	var tr trace.Trace
	decodeJSON(t, r.traceJSON, &tr)
	exact(t, "trace obligation.id", tr.Obligation.ID, in.obligation())
	exact(t, "trace obligation.idempotency_key", tr.Obligation.IdempotencyKey, in.key())
	exact(t, "trace obligation.provider_id", tr.Obligation.ProviderID, in.providerID())
	exact(t, "trace obligation.state", tr.Obligation.State, in.state())
	if len(tr.Objects) != 1 || len(tr.Keys) != 1 || len(tr.Lookups) != 1 || len(tr.Findings) != 1 || len(tr.Alerts) != 1 {
		t.Fatalf("trace holds %d objects, %d keys, %d lookups, %d findings, %d alerts; want one each",
			len(tr.Objects), len(tr.Keys), len(tr.Lookups), len(tr.Findings), len(tr.Alerts))
	}
	exact(t, "trace provider_objects[0].id", tr.Objects[0].ID, in.providerID())
	exact(t, "trace provider_objects[0].raw_status", tr.Objects[0].RawStatus, in.state())
	exact(t, "trace idempotency_keys[0].key", tr.Keys[0].Key, in.key())
	exact(t, "trace lookups[0].id", tr.Lookups[0].ID, in.providerID())
	exact(t, "trace findings[0].obligation_id", tr.Findings[0].ObligationID, in.obligation())
	checkFree(t, "trace lookups[0].error", tr.Lookups[0].Error)
	checkFree(t, "trace alerts[0].last_error", tr.Alerts[0].LastError)
	for _, f := range append(tr.Findings, tr.Current...) {
		checkFree(t, "trace detail", f.Detail)
		checkFree(t, "trace acknowledged_by", f.AcknowledgedBy)
		checkFree(t, "trace ack_reason", f.AckReason)
	}
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func exact(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %q, want %q exact", what, got, want)
	}
}

// formulaStart are the first characters that make a spreadsheet run a
// cell.
const formulaStart = "=+-@\t\r"

func checkCSV(t *testing.T, in inputs, b []byte) {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not parse: %v\n%q", err, b)
	}
	if len(rows) != 3 {
		t.Fatalf("the CSV has %d rows, want a header and two", len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, row := range rows {
		for _, c := range row {
			if c != "" && strings.ContainsRune(formulaStart, rune(c[0])) {
				t.Fatalf("a CSV cell starts a formula: %q", c)
			}
		}
	}
	// encoding/csv reads a \r\n inside a quoted cell back as \n.
	asRead := func(s string) string {
		s = strings.ReplaceAll(s, "\r\n", "\n")
		if s != "" && strings.ContainsRune(formulaStart, rune(s[0])) {
			return "'" + s
		}
		return s
	}
	row := rows[1]
	exact(t, "CSV obligation_id", row[col["obligation_id"]], asRead(in.obligation()))
	exact(t, "CSV provider_ids", row[col["provider_ids"]], asRead(in.providerID()+" re_2"))
	exact(t, "CSV fingerprint", row[col["fingerprint"]], fingerprint)
	exact(t, "CSV provider_ids of the orphan", rows[2][col["provider_ids"]], asRead(in.providerID()))
	for _, c := range []string{"acknowledged_by", "ack_reason", "detail"} {
		checkFree(t, "CSV "+c, strings.TrimPrefix(row[col[c]], "'"))
	}
}

func checkMetadata(t *testing.T, in inputs) {
	t.Helper()
	m := map[string]string{"obligation_id": in.obligation(), "idempotency_key": in.key(), "note": in.meta(), in.meta(): in.detail()}
	got := redact.Metadata(m, "obligation_id", "idempotency_key")
	exact(t, "mirrored obligation_id", got["obligation_id"], in.obligation())
	exact(t, "mirrored idempotency_key", got["idempotency_key"], in.key())
	for k, v := range got {
		if k == "obligation_id" || k == "idempotency_key" {
			continue
		}
		checkMasked(t, "mirrored key", k)
		checkMasked(t, "mirrored value", v)
	}
}

var emailLike = regexp.MustCompile(`[0-9A-Za-z._%+\-]+@[0-9A-Za-z\-]+(?:\.[0-9A-Za-z\-]+)*\.[A-Za-z]{2,}`)

// checkMasked fails t if s shows a card-like number or an e-mail address.
func checkMasked(t *testing.T, what, s string) {
	t.Helper()
	if run, ok := redacttest.CardLike(s); ok {
		t.Fatalf("%s shows card-like %q: %q", what, run, s)
	}
	if e := emailLike.FindString(s); e != "" {
		t.Fatalf("%s shows e-mail address %q: %q", what, e, s)
	}
}

// checkFree checks free text: masked, on one line, nothing that is not
// shown.
func checkFree(t *testing.T, what, s string) {
	t.Helper()
	checkMasked(t, what, s)
	if i := strings.IndexFunc(s, invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		t.Fatalf("%s holds %U: %q", what, r, s)
	}
}

// checkHuman checks an output for people.
func checkHuman(t *testing.T, what, s string) {
	t.Helper()
	checkMasked(t, what, s)
	if i := strings.IndexFunc(s, func(r rune) bool { return r != '\n' && invisible(r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		t.Fatalf("%s holds %U:\n%s", what, r, s)
	}
}

// invisible reports the characters that change how text shows rather
// than what it says.
func invisible(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}
