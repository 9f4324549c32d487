package alerts

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slack-go/slack"

	"reconcile"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")

var testNow = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

const testRun = "run-20261130-0600"

func usd(n int64) reconcile.Money { return reconcile.Money{Amount: n, Currency: "usd"} }

// sampleFindings holds one finding of every kind, as the matcher writes
// them, keyed by kind.
func sampleFindings() map[reconcile.FindingKind]reconcile.Finding {
	mk := func(kind reconcile.FindingKind, obl string, ids []string, m, risk reconcile.Money, detail string) reconcile.Finding {
		obj := ""
		if obl == "" && len(ids) > 0 {
			obj = ids[0]
		}
		return reconcile.Finding{
			Kind: kind, Severity: kind.Severity(), ObligationID: obl, ProviderIDs: ids, Money: m, AtRisk: risk,
			Fingerprint: reconcile.Fingerprint(kind, obl, obj), ContentHash: reconcile.ContentHash(risk, ids), Detail: detail,
		}
	}
	jpy := reconcile.Money{Amount: 12000, Currency: "jpy"}
	kwd := reconcile.Money{Amount: 1000, Currency: "kwd"}
	return map[reconcile.FindingKind]reconcile.Finding{
		reconcile.Duplicate: mk(reconcile.Duplicate, "refund:4821:approved-request-7", []string{"re_4821a", "re_4821b"}, usd(8900), usd(8900),
			"Two refunds of USD 89.00 succeeded for one approved refund: the first response was lost and the request was retried with a fresh idempotency key."),
		reconcile.PaidWithoutEvidence: mk(reconcile.PaidWithoutEvidence, "charge:5100", nil, jpy, jpy,
			"The obligation is PAID but no Stripe object of any status links to it."),
		reconcile.StatusMismatch: mk(reconcile.StatusMismatch, "charge:5200", []string{"ch_5200"}, kwd, kwd,
			"The obligation is PAID but its charge failed at Stripe (card_declined)."),
		reconcile.SuspectedDuplicate: mk(reconcile.SuspectedDuplicate, "refund:5300", []string{"re_5300b"}, usd(2500), usd(2500),
			"An unlinked refund of the same charge, amount and currency succeeded 4 minutes after the linked one."),
		reconcile.Orphan: mk(reconcile.Orphan, "", []string{"re_5600x"}, usd(3000), usd(3000),
			"A succeeded refund that no obligation names."),
		reconcile.AmountMismatch: mk(reconcile.AmountMismatch, "charge:5700", []string{"pi_5700"}, usd(10000), usd(500),
			"Stripe moved USD 105.00; the obligation says USD 100.00."),
		reconcile.ConflictingLink: mk(reconcile.ConflictingLink, "charge:5800", []string{"ch_5800"}, usd(4200), usd(4200),
			"ch_5800 links to charge:5800 by provider id and to charge:5801 by metadata."),
		reconcile.StaleLease: mk(reconcile.StaleLease, "charge:5400", nil, usd(7700), reconcile.Money{},
			"EXECUTING since 2026-11-29 03:10 UTC; the lease expired at 03:15 and Stripe shows no charge."),
		reconcile.UnresolvedUnknown: mk(reconcile.UnresolvedUnknown, "refund:5900", []string{"re_5900f"}, usd(1500), reconcile.Money{},
			"CONFIRMATION_UNKNOWN; only a failed refund exists at Stripe."),
	}
}

func sampleSummary(id int64) reconcile.Alert {
	return reconcile.Alert{
		ID: id, RunID: testRun, Event: reconcile.AlertSummary, CreatedAt: testNow,
		Summary: &reconcile.RunSummary{
			RunID:    testRun,
			Window:   reconcile.Window{From: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
			Counts:   reconcile.Counts{Obligations: 120, ProviderObjects: 131, Linked: 118},
			New:      map[reconcile.FindingKind]int{reconcile.Duplicate: 1, reconcile.Orphan: 2, reconcile.StaleLease: 1},
			Changed:  map[reconcile.FindingKind]int{reconcile.AmountMismatch: 1},
			Resolved: map[reconcile.FindingKind]int{reconcile.UnresolvedUnknown: 2},
			AtRisk: []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 1000, Currency: "kwd"}),
				reconcile.TotalOf(reconcile.Money{Amount: 12000, Currency: "jpy"}), reconcile.TotalOf(reconcile.Money{Amount: 12400, Currency: "usd"})},
			Open: map[reconcile.FindingKind]int{reconcile.Duplicate: 1, reconcile.Orphan: 2, reconcile.StaleLease: 1, reconcile.AmountMismatch: 1},
			ByMeaning: &reconcile.AtRiskByMeaning{
				PaidOutTooMuch: []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 12000, Currency: "jpy"}),
					reconcile.TotalOf(reconcile.Money{Amount: 9900, Currency: "usd"})},
				CollectedWrong: []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 1000, Currency: "kwd"})},
				Unconfirmed:    []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 2500, Currency: "usd"})},
			},
			Confirmed:      2,
			ConfirmedTotal: []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 4800, Currency: "usd"})},
		},
	}
}

func firing(id int64, f reconcile.Finding) reconcile.Alert {
	return reconcile.Alert{ID: id, RunID: testRun, Event: reconcile.AlertFiring, Finding: f, CreatedAt: testNow}
}

// goldenMessage is a planned message as the golden files record it: what
// Slack receives (text, blocks) and what the drain needs (ids, thread).
type goldenMessage struct {
	Kind           MessageKind   `json:"kind"`
	AlertIDs       []int64       `json:"alert_ids"`
	Parent         int           `json:"parent"`
	ThreadTS       string        `json:"thread_ts,omitempty"`
	PossibleRepeat bool          `json:"possible_repeat,omitempty"`
	Text           string        `json:"text"`
	Blocks         []slack.Block `json:"blocks"`
}

func checkGolden(t *testing.T, name string, v any) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep Slack's <url|label> readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatalf("marshal %s: %v", name, err)
	}
	got := buf.Bytes()
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

func goldenPlan(t *testing.T, name string, msgs []Message) {
	t.Helper()
	out := make([]goldenMessage, len(msgs))
	for i, m := range msgs {
		out[i] = goldenMessage{m.Kind, m.AlertIDs, m.Parent, m.ThreadTS, m.PossibleRepeat, m.Text, m.Blocks}
		if v := violations(m.Text, m.Blocks); len(v) > 0 {
			t.Errorf("%s: message %d breaks Slack's limits: %v", name, i, v)
		}
	}
	checkGolden(t, name, out)
}

func TestPlanGoldenSummary(t *testing.T) {
	goldenPlan(t, "summary", Plan([]reconcile.Alert{sampleSummary(1)}, testNow, PlanOptions{}))
}

func TestPlanGoldenKinds(t *testing.T) {
	for kind, f := range sampleFindings() {
		t.Run(string(kind), func(t *testing.T) {
			msgs := Plan([]reconcile.Alert{firing(7, f)}, testNow, PlanOptions{})
			if len(msgs) != 1 {
				t.Fatalf("Plan(one %s) = %d messages, want 1", kind, len(msgs))
			}
			wantKind := KindGroup
			if kind.Severity() == reconcile.Critical {
				wantKind = KindFinding
			}
			if msgs[0].Kind != wantKind {
				t.Errorf("Plan(one %s) kind = %s, want %s", kind, msgs[0].Kind, wantKind)
			}
			b, _ := json.Marshal(msgs[0].Blocks)
			if !strings.Contains(string(b), escapeJSON(kindAction(kind))) {
				t.Errorf("Plan(one %s) lacks what to do %q:\n%s", kind, kindAction(kind), b)
			}
			if f.ObligationID != "" && !strings.Contains(msgs[0].Text, f.ObligationID) ||
				!strings.Contains(msgs[0].Text, f.Money.Major()) && !strings.Contains(msgs[0].Text, f.AtRisk.Major()) {
				t.Errorf("Plan(one %s) text lacks the obligation id or amount:\n%s", kind, msgs[0].Text)
			}
			for _, id := range f.ProviderIDs {
				if !strings.Contains(msgs[0].Text, id) {
					t.Errorf("Plan(one %s) text lacks %s:\n%s", kind, id, msgs[0].Text)
				}
			}
			goldenPlan(t, "kind_"+string(kind), msgs)
		})
	}
}

func TestPlanGoldenRunWithThreads(t *testing.T) {
	fs := sampleFindings()
	rows := []reconcile.Alert{sampleSummary(1)}
	for i, k := range reconcile.FindingKinds {
		rows = append(rows, firing(int64(i+2), fs[k]))
	}
	msgs := Plan(rows, testNow, PlanOptions{})
	goldenPlan(t, "run_threads", msgs)
	// summary, three criticals, one group of the rest in the summary's thread.
	if got := kinds(msgs); !slices.Equal(got, []MessageKind{KindSummary, KindFinding, KindFinding, KindFinding, KindGroup}) {
		t.Errorf("Plan(run) kinds = %v", got)
	}
	if msgs[4].Parent != 0 {
		t.Errorf("group parent = %d, want 0 (the summary)", msgs[4].Parent)
	}
}

func TestPlanGoldenChanged(t *testing.T) {
	f := sampleFindings()[reconcile.Duplicate]
	f.ProviderIDs = append(f.ProviderIDs, "re_4821c")
	f.AtRisk = usd(17800)
	r := firing(3, f)
	r.Changed = true
	msgs := Plan([]reconcile.Alert{r}, testNow, PlanOptions{})
	goldenPlan(t, "changed", msgs)
	if !strings.Contains(msgs[0].Text, "178.00") || !strings.Contains(msgs[0].Text, "Changed") {
		t.Errorf("changed text = %q, want the new amount and Changed", msgs[0].Text)
	}
}

func TestPlanGoldenResolved(t *testing.T) {
	fs := sampleFindings()
	rows := []reconcile.Alert{
		{ID: 10, RunID: "run-2", Event: reconcile.AlertResolved, Finding: fs[reconcile.Duplicate], ThreadTS: "1700000000.000002"},
		{ID: 11, RunID: "run-2", Event: reconcile.AlertResolved, Finding: fs[reconcile.StaleLease], ThreadTS: "1700000000.000001"},
		{ID: 12, RunID: "run-2", Event: reconcile.AlertResolved, Finding: fs[reconcile.Orphan], ThreadTS: "1700000000.000001"},
		{ID: 13, RunID: "run-2", Event: reconcile.AlertResolved, Finding: fs[reconcile.UnresolvedUnknown]},
	}
	msgs := Plan(rows, testNow, PlanOptions{})
	goldenPlan(t, "resolved", msgs)
	for _, m := range msgs {
		if !strings.Contains(strings.ToLower(m.Text), "resolved") {
			t.Errorf("resolution message text lacks %q: %q", "resolved", m.Text)
		}
	}
	if len(msgs) != 3 || msgs[0].ThreadTS != "1700000000.000002" || msgs[1].ThreadTS != "1700000000.000001" || msgs[2].ThreadTS != "" {
		t.Errorf("resolved threads = %v, want one per thread then one top-level", threadsOf(msgs))
	}
}

func TestPlanGoldenRepeat(t *testing.T) {
	fs := sampleFindings()
	rows := []reconcile.Alert{
		{ID: 20, RunID: "run-3", Event: reconcile.AlertRepeat, Finding: fs[reconcile.Duplicate], ThreadTS: "1700000000.000002"},
		{ID: 21, RunID: "run-3", Event: reconcile.AlertRepeat, Finding: fs[reconcile.Orphan]},
	}
	goldenPlan(t, "repeat", Plan(rows, testNow, PlanOptions{}))
}

func TestPlanGoldenPossibleRepeat(t *testing.T) {
	fs := sampleFindings()
	crit := firing(30, fs[reconcile.Duplicate])
	crit.UnknownOutcome, crit.Attempts = true, 1
	high := firing(31, fs[reconcile.Orphan])
	high.UnknownOutcome, high.Attempts = true, 2
	fresh := firing(32, fs[reconcile.AmountMismatch])
	msgs := Plan([]reconcile.Alert{crit, high, fresh}, testNow, PlanOptions{})
	goldenPlan(t, "possible_repeat", msgs)
	for _, m := range msgs {
		carriesUnknown := slices.Contains(m.AlertIDs, 30) || slices.Contains(m.AlertIDs, 31)
		if got := strings.Contains(m.Text, "Possible repeat"); got != carriesUnknown {
			t.Errorf("message %v says possible repeat = %t, want %t", m.AlertIDs, got, carriesUnknown)
		}
	}
}

func TestPlanGoldenWebhook(t *testing.T) {
	fs := sampleFindings()
	rows := []reconcile.Alert{sampleSummary(1)}
	for i, k := range reconcile.FindingKinds {
		rows = append(rows, firing(int64(i+2), fs[k]))
	}
	rows = append(rows,
		reconcile.Alert{ID: 40, RunID: testRun, Event: reconcile.AlertResolved, Finding: fs[reconcile.UnresolvedUnknown], ThreadTS: "1700000000.000009"},
		reconcile.Alert{ID: 41, RunID: testRun, Event: reconcile.AlertRepeat, Finding: fs[reconcile.Orphan], ThreadTS: "1700000000.000008"},
	)
	msgs := Plan(rows, testNow, PlanOptions{Webhook: true})
	goldenPlan(t, "webhook", msgs)
	for i, m := range msgs {
		if m.Parent >= 0 || m.ThreadTS != "" {
			t.Errorf("webhook message %d threads (parent %d, ts %q); webhooks cannot", i, m.Parent, m.ThreadTS)
		}
	}
	bot := Plan(rows, testNow, PlanOptions{})
	if len(msgs) >= len(bot) {
		t.Errorf("webhook plan has %d messages, bot plan %d: want fewer without threads", len(msgs), len(bot))
	}
}

func TestPlanGoldenLiveLinks(t *testing.T) {
	f := sampleFindings()[reconcile.Duplicate]
	f.ProviderIDs = []string{"ch_live1", "pi_live2", "re_live3"}
	msgs := Plan([]reconcile.Alert{firing(1, f)}, testNow, PlanOptions{Live: true})
	b, _ := json.Marshal(msgs[0].Blocks)
	for _, want := range []string{
		"https://dashboard.stripe.com/payments/ch_live1", "https://dashboard.stripe.com/payments/pi_live2",
		"https://dashboard.stripe.com/refunds/re_live3",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("live blocks lack %s", want)
		}
	}
	if strings.Contains(string(b), "/test/") {
		t.Errorf("live blocks link to the test dashboard: %s", b)
	}
	test := Plan([]reconcile.Alert{firing(1, f)}, testNow, PlanOptions{})
	b, _ = json.Marshal(test[0].Blocks)
	if !strings.Contains(string(b), "https://dashboard.stripe.com/test/refunds/re_live3") {
		t.Errorf("test-mode blocks lack the /test/ link: %s", b)
	}
}

// A connected account's finding names its account, by display name and
// linked to its page, and links its objects in that account's dashboard;
// the same target on another account is another cause (docs/design.md,
// "Accounts"). A name is untrusted text, escaped as any.
func TestPlanConnectedAccount(t *testing.T) {
	f := sampleFindings()[reconcile.Duplicate]
	f.Account, f.AccountName = "acct_1Shop", "Shop <&> Co"
	f.Fingerprint = reconcile.AccountFingerprint(f.Account, f.Kind, f.ObligationID, "")
	msgs := Plan([]reconcile.Alert{firing(1, f)}, testNow, PlanOptions{})
	b, _ := json.Marshal(msgs[0].Blocks)
	for _, want := range []string{
		`*Account* \u003chttps://dashboard.stripe.com/test/connect/accounts/acct_1Shop|Shop \u0026lt;\u0026amp;\u0026gt; Co (acct_1Shop)\u003e`,
		"https://dashboard.stripe.com/acct_1Shop/test/refunds/" + f.ProviderIDs[0],
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("blocks lack %s:\n%s", want, b)
		}
	}
	if !strings.Contains(msgs[0].Text, "Account Shop <&> Co (acct_1Shop).") {
		t.Errorf("text lacks the account: %s", msgs[0].Text)
	}
	platform := sampleFindings()[reconcile.Duplicate]
	pb, _ := json.Marshal(Plan([]reconcile.Alert{firing(1, platform)}, testNow, PlanOptions{})[0].Blocks)
	if strings.Contains(string(pb), "Account") || strings.Contains(string(pb), "acct_") {
		t.Errorf("a platform finding names an account: %s", pb)
	}

	// Two suspected duplicates of one target id, one on the platform and
	// one on a connected account, are two causes, not one group.
	s1 := sampleFindings()[reconcile.SuspectedDuplicate]
	s1.Target = "ch_t"
	s2 := s1
	s2.Account, s2.Fingerprint = "acct_2", reconcile.AccountFingerprint("acct_2", s1.Kind, s1.ObligationID, "re_x")
	if causeOf(s1) == causeOf(s2) {
		t.Errorf("causes %q and %q: one target on two accounts is two causes", causeOf(s1), causeOf(s2))
	}
}

// flood is a drain's worth of rows: a summary and n findings of every kind
// in turn, with long details.
func flood(n int) []reconcile.Alert {
	fs := sampleFindings()
	rows := []reconcile.Alert{sampleSummary(1)}
	for i := range n {
		k := reconcile.FindingKinds[i%len(reconcile.FindingKinds)]
		f := fs[k]
		f.ObligationID = fmt.Sprintf("%s:%06d:approved-request-%d", f.Kind, i, i%7)
		f.ProviderIDs = []string{fmt.Sprintf("re_%06da", i), fmt.Sprintf("re_%06db", i)}
		f.Fingerprint = reconcile.Fingerprint(k, f.ObligationID, "")
		f.Detail = strings.Repeat("A long detail sentence for finance. ", 10)
		rows = append(rows, firing(int64(i+2), f))
	}
	return rows
}

type shape struct {
	Kind           MessageKind `json:"kind"`
	Alerts         int         `json:"alerts"`
	Parent         int         `json:"parent"`
	Blocks         int         `json:"blocks"`
	LongestSection int         `json:"longest_section"`
	TextLength     int         `json:"text_length"`
}

func TestPlanGoldenTenThousand(t *testing.T) {
	rows := flood(10000)
	msgs := Plan(rows, testNow, PlanOptions{})
	var shapes []shape
	for i, m := range msgs {
		if v := violations(m.Text, m.Blocks); len(v) > 0 {
			t.Errorf("message %d breaks Slack's limits: %v", i, v)
		}
		s := shape{Kind: m.Kind, Alerts: len(m.AlertIDs), Parent: m.Parent, Blocks: len(m.Blocks), TextLength: runeLen(m.Text)}
		for _, b := range m.Blocks {
			if sb, ok := b.(*slack.SectionBlock); ok {
				s.LongestSection = max(s.LongestSection, runeLen(sb.Text.Text))
			}
		}
		shapes = append(shapes, s)
	}
	if len(msgs) > 11 {
		t.Errorf("Plan(10,000 findings) = %d messages, want at most 11 (the summary and 10)", len(msgs))
	}
	checkCarriedOnce(t, rows, msgs)
	checkGolden(t, "shape_10000", shapes)
}

func TestPlanOverflowCounts(t *testing.T) {
	rows := flood(2000)
	msgs := Plan(rows, testNow, PlanOptions{MaxMessages: 8})
	if len(msgs) != 9 {
		t.Fatalf("Plan(MaxMessages 8) = %d messages, want 9 (the summary and 8)", len(msgs))
	}
	// One run: what did not fit is named in its summary with a count.
	sum := msgs[0]
	if sum.Kind != KindSummary || len(sum.AlertIDs) < 2 || !strings.Contains(sum.Text, "more alerts") ||
		!strings.Contains(sum.Text, "reconcile findings --open") {
		t.Errorf("summary carries %d rows, text %q; want it to count the rest and say how to list them", len(sum.AlertIDs), sum.Text)
	}
	for _, m := range msgs {
		if m.Kind == KindOverflow {
			t.Errorf("an overflow message of its own, though the run's summary is in the plan")
		}
	}
	checkCarriedOnce(t, rows, msgs)

	// Rows of a run whose summary went out earlier: an overflow message
	// within the cap counts them.
	rows = rows[1:]
	msgs = Plan(rows, testNow, PlanOptions{MaxMessages: 8})
	if len(msgs) != 8 {
		t.Fatalf("Plan(MaxMessages 8, no summary) = %d messages, want 8", len(msgs))
	}
	last := msgs[len(msgs)-1]
	if last.Kind != KindOverflow {
		t.Fatalf("last message kind = %s, want overflow", last.Kind)
	}
	if !strings.Contains(last.Text, "reconcile findings --open") {
		t.Errorf("overflow text lacks the command to list them: %q", last.Text)
	}
	checkCarriedOnce(t, rows, msgs)
}

// A broken integration refunds one charge 1,500 times outside the
// workflow: finance gets the summary and one message that counts them,
// totals them and says how to list them, not 48 messages.
func TestPlanFloodOnOneCharge(t *testing.T) {
	rows := []reconcile.Alert{sampleSummary(1)}
	for i := range 1500 {
		id := fmt.Sprintf("re_flood%04d", i)
		f := reconcile.Finding{Kind: reconcile.Orphan, Severity: reconcile.High, ProviderIDs: []string{id},
			Money: reconcile.Money{Amount: 1000, Currency: "usd"}, AtRisk: reconcile.Money{Amount: 1000, Currency: "usd"},
			Fingerprint: reconcile.Fingerprint(reconcile.Orphan, "", id), Target: "ch_3PflooD",
			Detail: "Refund " + id + " of USD 10.00 (on charge ch_3PflooD) was paid out by the provider but belongs to no obligation."}
		rows = append(rows, firing(int64(i+2), f))
	}
	msgs := Plan(rows, testNow, PlanOptions{})
	if len(msgs) > 11 {
		t.Errorf("Plan(1,500 orphans on one charge) = %d messages, want at most 11", len(msgs))
	}
	if len(msgs) != 2 || msgs[1].Kind != KindCause || len(msgs[1].AlertIDs) != 1500 {
		t.Fatalf("Plan = %d messages, want the summary and one message carrying all 1,500", len(msgs))
	}
	for _, want := range []string{"1,500 × Money moved outside the workflow", "ch_3PflooD", "USD 15,000.00 at risk",
		"…and 1,495 more", "reconcile findings --open --kind orphan --target ch_3PflooD", "What to do:"} {
		if !strings.Contains(msgs[1].Text, want) {
			t.Errorf("flood message text lacks %q:\n%s", want, msgs[1].Text)
		}
	}
	for i, m := range msgs {
		if v := violations(m.Text, m.Blocks); len(v) > 0 {
			t.Errorf("message %d breaks Slack's limits: %v", i, v)
		}
	}
	checkCarriedOnce(t, rows, msgs)
	goldenPlan(t, "flood_one_charge", msgs)
}

// A run that found one of every kind: the summary, the criticals' own
// messages, and the digest of the rest in the summary's thread.
func TestPlanGoldenEveryKind(t *testing.T) {
	rows := []reconcile.Alert{sampleSummary(1)}
	fs := sampleFindings()
	for i, k := range reconcile.FindingKinds {
		rows = append(rows, firing(int64(i+2), fs[k]))
	}
	msgs := Plan(rows, testNow, PlanOptions{})
	checkCarriedOnce(t, rows, msgs)
	goldenPlan(t, "every_kind", msgs)
}

func TestPlanCarriesEveryRowOnce(t *testing.T) {
	fs := sampleFindings()
	var rows []reconcile.Alert
	id := int64(0)
	events := []reconcile.AlertEvent{reconcile.AlertFiring, reconcile.AlertRepeat, reconcile.AlertResolved}
	for run := range 3 {
		id++
		s := sampleSummary(id)
		s.RunID = fmt.Sprintf("run-%d", run)
		rows = append(rows, s)
		for i := range 40 {
			id++
			k := reconcile.FindingKinds[i%len(reconcile.FindingKinds)]
			r := reconcile.Alert{ID: id, RunID: s.RunID, Event: events[(i/9)%3], Finding: fs[k], UnknownOutcome: i%5 == 0}
			if i%3 == 0 {
				r.ThreadTS = fmt.Sprintf("1700000000.%06d", i%13)
			}
			rows = append(rows, r)
		}
	}
	for _, opts := range []PlanOptions{{}, {Webhook: true}, {MaxMessages: 10}, {MaxCritical: 1, MaxThreads: 1}} {
		msgs := Plan(rows, testNow, opts)
		checkCarriedOnce(t, rows, msgs)
		for i, m := range msgs {
			if m.Parent >= i {
				t.Errorf("Plan(%+v): message %d replies to later message %d", opts, i, m.Parent)
			}
			if m.Parent >= 0 && msgs[m.Parent].Kind != KindSummary {
				t.Errorf("Plan(%+v): message %d replies to a %s", opts, i, msgs[m.Parent].Kind)
			}
			if v := violations(m.Text, m.Blocks); len(v) > 0 {
				t.Errorf("Plan(%+v): message %d breaks Slack's limits: %v", opts, i, v)
			}
		}
	}
}

func TestPlanNothingDueNothingPlanned(t *testing.T) {
	if msgs := Plan(nil, testNow, PlanOptions{}); len(msgs) != 0 {
		t.Errorf("Plan(no rows) = %d messages, want none", len(msgs))
	}
}

func TestPlanFitsPathologicalInput(t *testing.T) {
	f := sampleFindings()[reconcile.Duplicate]
	f.ObligationID = strings.Repeat("o", 20000)
	f.Detail = strings.Repeat("<!channel> & ", 20000)
	for i := range 3000 {
		f.ProviderIDs = append(f.ProviderIDs, fmt.Sprintf("re_%05d", i))
	}
	rows := []reconcile.Alert{firing(1, f)}
	g := f
	g.Kind, g.Severity = reconcile.Orphan, reconcile.High
	for i := range 300 {
		rows = append(rows, firing(int64(i+2), g))
	}
	for _, opts := range []PlanOptions{{}, {Webhook: true}} {
		msgs := Plan(rows, testNow, opts)
		checkCarriedOnce(t, rows, msgs)
		for i, m := range msgs {
			if v := violations(m.Text, m.Blocks); len(v) > 0 {
				t.Errorf("Plan(%+v): message %d breaks Slack's limits: %v", opts, i, v)
			}
			b, _ := json.Marshal(m.Blocks)
			if strings.Contains(string(b)+m.Text, "<!channel>") {
				t.Errorf("Plan(%+v): message %d carries an unescaped <!channel>", opts, i)
			}
		}
	}
}

// escapeJSON is s as it appears inside a JSON string.
func escapeJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func checkCarriedOnce(t *testing.T, rows []reconcile.Alert, msgs []Message) {
	t.Helper()
	carried := map[int64]int{}
	for _, m := range msgs {
		for _, id := range m.AlertIDs {
			carried[id]++
		}
	}
	for _, r := range rows {
		if carried[r.ID] != 1 {
			t.Errorf("row %d carried by %d messages, want 1", r.ID, carried[r.ID])
		}
		delete(carried, r.ID)
	}
	if len(carried) > 0 {
		t.Errorf("messages carry ids of no row: %v", carried)
	}
}

func kinds(msgs []Message) []MessageKind {
	var ks []MessageKind
	for _, m := range msgs {
		ks = append(ks, m.Kind)
	}
	return ks
}

func threadsOf(msgs []Message) []string {
	var ts []string
	for _, m := range msgs {
		ts = append(ts, fmt.Sprintf("%d/%q", m.Parent, m.ThreadTS))
	}
	return ts
}

func BenchmarkPlan10000(b *testing.B) {
	rows := flood(10000)
	for b.Loop() {
		Plan(rows, testNow, PlanOptions{})
	}
}

func TestPlanKeepsOwnIDsWhole(t *testing.T) {
	f := sampleFindings()[reconcile.Duplicate]
	f.Fingerprint = "4242424242424242abcd" // hex that holds a Luhn-valid run
	msgs := Plan([]reconcile.Alert{firing(1, f)}, testNow, PlanOptions{})
	b, _ := json.Marshal(msgs[0].Blocks)
	if want := "reconcile ack 4242424242424242abcd"; !strings.Contains(string(b), want) {
		t.Errorf("blocks lack %q: a fingerprint is ours, not a card number:\n%s", want, b)
	}
}

// violations lists how a message breaks Slack's limits; none for a message
// that Plan produced.
func violations(text string, blocks []slack.Block) []string {
	var v []string
	if n := runeLen(text); n > maxText {
		v = append(v, fmt.Sprintf("text has %d characters, over %d", n, maxText))
	}
	if len(blocks) > maxBlocks {
		v = append(v, fmt.Sprintf("%d blocks, over %d", len(blocks), maxBlocks))
	}
	if n := blocksText(blocks); n > maxBlocksText {
		v = append(v, fmt.Sprintf("blocks hold %d characters, over %d", n, maxBlocksText))
	}
	for i, b := range blocks {
		switch b := b.(type) {
		case *slack.HeaderBlock:
			if n := runeLen(b.Text.Text); n > maxHeaderText {
				v = append(v, fmt.Sprintf("block %d: header of %d characters, over %d", i, n, maxHeaderText))
			}
		case *slack.SectionBlock:
			if n := runeLen(b.Text.Text); n > maxSectionText {
				v = append(v, fmt.Sprintf("block %d: section of %d characters, over %d", i, n, maxSectionText))
			}
		case *slack.ContextBlock:
			if n := len(b.ContextElements.Elements); n > maxContextElem {
				v = append(v, fmt.Sprintf("block %d: context of %d elements, over %d", i, n, maxContextElem))
			}
		}
	}
	return v
}

// Money at risk summed past int64 is shown exactly, in the summary and in
// the overflow message, never wrapped to a negative amount (docs/design.md,
// "Findings").
func TestPlanAtRiskBeyondInt64(t *testing.T) {
	const maxI = math.MaxInt64
	s := sampleSummary(1)
	huge := reconcile.SumByCurrency([]reconcile.Money{
		{Amount: maxI, Currency: "usd"}, {Amount: maxI, Currency: "usd"},
		{Amount: maxI, Currency: "jpy"}, {Amount: maxI, Currency: "jpy"}, {Amount: maxI, Currency: "jpy"},
	})
	s.Summary.AtRisk = huge
	s.Summary.ByMeaning = &reconcile.AtRiskByMeaning{PaidOutTooMuch: huge}
	msgs := Plan([]reconcile.Alert{s}, testNow, PlanOptions{})
	if len(msgs) != 1 {
		t.Fatalf("Plan = %d messages, want the summary", len(msgs))
	}
	const want = "JPY 27,670,116,110,564,327,421, USD 184,467,440,737,095,516.14"
	if !strings.Contains(msgs[0].Text, "Money at risk: Paid out too much: "+want+".") {
		t.Errorf("summary text = %q, want money paid out too much %s", msgs[0].Text, want)
	}
	if flat := flatBlocks(t, msgs[0]); !strings.Contains(flat, "*Paid out too much*: "+strings.ReplaceAll(want, ", ", " · ")) {
		t.Errorf("summary blocks = %s, want money paid out too much %s", flat, want)
	}

	// The overflow message counts findings of MaxInt64 cents each.
	rows := flood(300)
	for i := range rows[1:] {
		rows[i+1].Finding.AtRisk = reconcile.Money{Amount: maxI, Currency: "usd"}
	}
	msgs = Plan(rows[1:], testNow, PlanOptions{MaxMessages: 8})
	last := msgs[len(msgs)-1]
	if last.Kind != KindOverflow {
		t.Fatalf("last message kind = %s, want overflow", last.Kind)
	}
	n := int64(len(last.AlertIDs))
	exact := new(big.Int).Mul(big.NewInt(n), big.NewInt(maxI))
	// USD in major units: the exact sum with two decimals, grouped.
	digits := exact.String()
	whole, cents := digits[:len(digits)-2], digits[len(digits)-2:]
	var grouped []string
	for len(whole) > 3 {
		grouped = append([]string{whole[len(whole)-3:]}, grouped...)
		whole = whole[:len(whole)-3]
	}
	wantUSD := "USD " + strings.Join(append([]string{whole}, grouped...), ",") + "." + cents
	if flat := flatBlocks(t, last); !strings.Contains(flat, "*Money at risk* among them: "+wantUSD) {
		t.Errorf("overflow of %d findings of %d cents: blocks = %s, want money at risk %s", n, int64(maxI), flat, wantUSD)
	}
}

// flatBlocks is a message's blocks as JSON, for looking for a phrase.
func flatBlocks(t *testing.T, m Message) string {
	t.Helper()
	b, err := json.Marshal(m.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
