package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"reconcile"
	"reconcile/internal/pgtest"
)

// One finding's life across runs: new, seen again, repeated, acknowledged,
// changed, left alone outside the scope, resolved, reopened. Each step
// says which alerts it must queue, in order.
func TestFindingLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *Options) { o.RepeatInterval = 24 * time.Hour })
	dup := newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1a", "re_1b")
	stale := newFinding(reconcile.StaleLease, "refund:2", "", 0)
	staleChanged := stale
	staleChanged.AtRisk = reconcile.Money{Amount: 4000, Currency: "usd"}
	staleChanged.ContentHash = reconcile.ContentHash(staleChanged.AtRisk, nil)
	orphan := newFinding(reconcile.Orphan, "", "re_9", 500, "re_9")
	name := map[string]string{dup.Fingerprint: "dup", stale.Fingerprint: "stale", orphan.Fingerprint: "orphan"}

	type want struct {
		Event   reconcile.AlertEvent
		Name    string
		Changed bool
	}
	steps := []struct {
		name   string
		at     time.Duration
		before func(now time.Time) // what happens between runs
		res    reconcile.Conclusions
		want   []want
		check  func(t *testing.T, a Applied)
	}{
		{
			name: "first sight fires each finding after one summary",
			res:  resultOf([]reconcile.Finding{dup, stale, orphan}, nil),
			want: []want{{"summary", "", false}, {"firing", "dup", false}, {"firing", "stale", false}, {"firing", "orphan", false}},
			check: func(t *testing.T, a Applied) {
				wantNew := map[reconcile.FindingKind]int{reconcile.Duplicate: 1, reconcile.StaleLease: 1, reconcile.Orphan: 1}
				if diff := cmp.Diff(wantNew, a.Summary.New); diff != "" {
					t.Errorf("summary new (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 9400, Currency: "usd"})}, a.Summary.AtRisk); diff != "" {
					t.Errorf("summary at risk (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "seen again within the repeat interval",
			at:   time.Hour,
			res:  resultOf([]reconcile.Finding{dup, stale, orphan}, nil),
		},
		{
			name: "no repeat while the first alert is still unsent",
			at:   25 * time.Hour,
			res:  resultOf([]reconcile.Finding{dup, stale, orphan}, nil),
		},
		{
			// Found by the simulation (I6): the first alerts reached Slack
			// only now, so a repeat now would follow them at once.
			name:   "no repeat right after a late first alert was delivered",
			at:     26 * time.Hour,
			before: func(now time.Time) { e.markAllSent(now) },
			res:    resultOf([]reconcile.Finding{dup, stale, orphan}, nil),
		},
		{
			name: "repeat once the interval passed since delivery",
			at:   50 * time.Hour,
			res:  resultOf([]reconcile.Finding{dup, stale, orphan}, nil),
			want: []want{{"repeat", "dup", false}, {"repeat", "stale", false}, {"repeat", "orphan", false}},
			check: func(t *testing.T, a Applied) {
				// A repeat moves the last alert, which the next repeat
				// counts from.
				if got, want := e.finding(dup.Fingerprint).LastAlertedAt, t0().Add(50*time.Hour); !got.Equal(want) {
					t.Errorf("dup last alerted %v, want %v", got, want)
				}
			},
		},
		{
			name: "an acknowledged finding is not repeated",
			at:   75 * time.Hour,
			before: func(now time.Time) {
				e.markAllSent(t0().Add(50 * time.Hour))
				if _, err := e.s.Ack(t.Context(), stale.Fingerprint, "ops@example", "worker restarted", now); err != nil {
					t.Fatalf("Ack: %v", err)
				}
			},
			res:  resultOf([]reconcile.Finding{dup, stale, orphan}, nil),
			want: []want{{"repeat", "dup", false}, {"repeat", "orphan", false}},
		},
		{
			name:   "a change fires again and clears the acknowledgement",
			at:     76 * time.Hour,
			before: func(now time.Time) { e.markAllSent(now) },
			res:    resultOf([]reconcile.Finding{dup, staleChanged, orphan}, nil),
			want:   []want{{"summary", "", false}, {"firing", "stale", true}},
			check: func(t *testing.T, a Applied) {
				if a.Changed != 1 || a.Summary.Changed[reconcile.StaleLease] != 1 {
					t.Errorf("Applied.Changed = %d, summary changed = %v; want 1 stale_lease", a.Changed, a.Summary.Changed)
				}
				r := e.finding(stale.Fingerprint)
				if !r.AcknowledgedAt.IsZero() || r.AckReason != "" {
					t.Errorf("acknowledgement after a change = %v %q, want cleared", r.AcknowledgedAt, r.AckReason)
				}
			},
		},
		{
			name: "absent but outside the run's scope stays open",
			at:   77 * time.Hour,
			res:  resultOf([]reconcile.Finding{dup, staleChanged}, nil, "refund:7", "re_8"),
			check: func(t *testing.T, a Applied) {
				if r := e.finding(orphan.Fingerprint); r.Status != FindingOpen {
					t.Errorf("orphan status = %s, want open", r.Status)
				}
			},
		},
		{
			name: "absent within the run's scope is resolved",
			at:   78 * time.Hour,
			res:  resultOf([]reconcile.Finding{dup, staleChanged}, nil, "re_9"),
			want: []want{{"summary", "", false}, {"resolved", "orphan", false}},
			check: func(t *testing.T, a Applied) {
				r := e.finding(orphan.Fingerprint)
				if r.Status != FindingResolved || r.ResolvedRun != "run-8" || !r.ResolvedAt.Equal(t0().Add(78*time.Hour)) {
					t.Errorf("orphan = %s in %s at %v, want resolved in run-8", r.Status, r.ResolvedRun, r.ResolvedAt)
				}
				if a.Summary.Resolved[reconcile.Orphan] != 1 || a.Summary.Open[reconcile.Orphan] != 0 {
					t.Errorf("summary resolved %v open %v, want one orphan resolved and none open", a.Summary.Resolved, a.Summary.Open)
				}
			},
		},
		{
			name: "a resolved finding that comes back is reopened",
			at:   79 * time.Hour,
			res:  resultOf([]reconcile.Finding{dup, staleChanged, orphan}, nil),
			want: []want{{"summary", "", false}, {"firing", "orphan", false}},
			check: func(t *testing.T, a Applied) {
				r := e.finding(orphan.Fingerprint)
				if r.Status != FindingOpen || !r.ResolvedAt.IsZero() || r.FirstSeenRun != "run-0" {
					t.Errorf("orphan = %s resolved at %v first seen in %s; want open, not resolved, first seen in run-0",
						r.Status, r.ResolvedAt, r.FirstSeenRun)
				}
				if a.New != 1 || a.Reopened != 1 {
					t.Errorf("Applied new %d reopened %d, want 1, 1", a.New, a.Reopened)
				}
			},
		},
	}
	var last int64
	for i, st := range steps {
		now := t0().Add(st.at)
		if st.before != nil {
			st.before(now)
		}
		run := testRun("run-"+string(rune('0'+i)), now)
		a, err := e.s.Apply(t.Context(), run, st.res, now)
		if err != nil {
			t.Fatalf("%s: Apply: %v", st.name, err)
		}
		var evs []event
		evs, last = e.events(last)
		var got []want
		for _, ev := range evs {
			got = append(got, want{ev.Event, name[ev.Fingerprint], ev.Changed})
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("%s: alerts queued (-want +got):\n%s", st.name, diff)
		}
		if a.Alerts != len(got) {
			t.Errorf("%s: Applied.Alerts = %d, want %d", st.name, a.Alerts, len(got))
		}
		if st.check != nil {
			st.check(t, a)
		}
	}
}

func (e *env) finding(fp string) FindingRecord {
	e.tb.Helper()
	all, err := e.s.Findings(context.Background(), false)
	if err != nil {
		e.tb.Fatal(err)
	}
	for _, r := range all {
		if r.Fingerprint == fp {
			return r
		}
	}
	e.tb.Fatalf("finding %s not stored", fp)
	return FindingRecord{}
}

func TestSummaryPayload(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	// Left open from an earlier run, outside this run's scope.
	old := newFinding(reconcile.StaleLease, "refund:old", "", 0)
	if _, err := e.s.Apply(t.Context(), testRun("run-0", now.Add(-time.Hour)), resultOf([]reconcile.Finding{old}, nil), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.markAllSent(now)
	yen := newFinding(reconcile.Orphan, "", "ch_jp", 12000, "ch_jp")
	yen.AtRisk.Currency, yen.Money.Currency = "jpy", "jpy"
	yen.ContentHash = reconcile.ContentHash(yen.AtRisk, yen.ProviderIDs)
	fs := []reconcile.Finding{
		newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_2"),
		newFinding(reconcile.Duplicate, "refund:2", "", 100, "re_3", "re_4"),
		yen,
		newFinding(reconcile.UnresolvedUnknown, "refund:5", "", 0),
	}
	run := testRun("run-1", now)
	if _, err := e.s.Apply(t.Context(), run, resultOf(fs, nil), now); err != nil {
		t.Fatal(err)
	}
	due, err := e.s.Due(t.Context(), now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 5 || due[0].Event != reconcile.AlertSummary || due[0].Summary == nil {
		t.Fatalf("Due = %d alerts, first %s; want 5, the summary first", len(due), due[0].Event)
	}
	want := reconcile.RunSummary{
		RunID: "run-1", Window: run.Window, Counts: run.Counts,
		New:    map[reconcile.FindingKind]int{reconcile.Duplicate: 2, reconcile.Orphan: 1, reconcile.UnresolvedUnknown: 1},
		AtRisk: []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 12000, Currency: "jpy"}), reconcile.TotalOf(reconcile.Money{Amount: 9000, Currency: "usd"})},
		Open: map[reconcile.FindingKind]int{reconcile.Duplicate: 2, reconcile.Orphan: 1,
			reconcile.UnresolvedUnknown: 1, reconcile.StaleLease: 1},
		// The duplicates paid out too much; the orphan is a charge: money
		// collected. The unknown outcome has nothing at risk.
		ByMeaning: &reconcile.AtRiskByMeaning{
			PaidOutTooMuch: []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 9000, Currency: "usd"})},
			CollectedWrong: []reconcile.Total{reconcile.TotalOf(reconcile.Money{Amount: 12000, Currency: "jpy"})},
		},
	}
	if diff := cmp.Diff(want, *due[0].Summary, cmpInstants); diff != "" {
		t.Errorf("summary payload (-want +got):\n%s", diff)
	}
	for _, a := range due[1:] {
		var f reconcile.Finding
		for _, g := range fs {
			if g.Fingerprint == a.Finding.Fingerprint {
				f = g
			}
		}
		if diff := cmp.Diff(f, a.Finding, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("alert %d finding payload (-want +got):\n%s", a.ID, diff)
		}
	}
}

// A run's money at risk summed past int64 is stored exactly in the
// summary's payload and read back exactly (docs/design.md, "Findings"): the usd sum
// as "amount_exact" with no "amount", the jpy one that fits as before.
func TestSummaryAtRiskBeyondInt64(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	yen := newFinding(reconcile.Orphan, "", "ch_jp", 12000, "ch_jp")
	yen.AtRisk.Currency, yen.Money.Currency = "jpy", "jpy"
	yen.ContentHash = reconcile.ContentHash(yen.AtRisk, yen.ProviderIDs)
	fs := []reconcile.Finding{
		newFinding(reconcile.Duplicate, "refund:1", "", math.MaxInt64, "re_1", "re_2"),
		newFinding(reconcile.Duplicate, "refund:2", "", math.MaxInt64, "re_3", "re_4"),
		yen,
	}
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf(fs, nil), now); err != nil {
		t.Fatal(err)
	}
	due, err := e.s.Due(t.Context(), now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) == 0 || due[0].Summary == nil {
		t.Fatalf("Due = %d alerts, want the summary first", len(due))
	}
	got := due[0].Summary.AtRisk
	want := new(big.Int).Mul(big.NewInt(2), big.NewInt(math.MaxInt64))
	if len(got) != 2 || got[0].String() != "JPY 12,000" || got[1].Currency != "usd" || got[1].Big().Cmp(want) != 0 {
		t.Fatalf("summary at risk = %v, want [JPY 12,000 USD %s cents]", got, want)
	}
	var hasAmount bool
	var exact string
	if err := e.pool.QueryRow(t.Context(), `SELECT r ? 'amount', coalesce(r->>'amount_exact', '')
	FROM reconcile.outbox o, jsonb_array_elements(o.payload->'at_risk') r
	WHERE o.event = 'summary' AND r->>'currency' = 'usd'`).Scan(&hasAmount, &exact); err != nil {
		t.Fatal(err)
	}
	if hasAmount || exact != want.String() {
		t.Errorf("stored usd at risk: amount present %t, amount_exact %q; want no amount and %q", hasAmount, exact, want)
	}
}

// cmpInstants compares times by instant, whatever their location.
var cmpInstants = cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })

func TestAck(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	// Fingerprints chosen to share a prefix.
	fs := []reconcile.Finding{newFinding(reconcile.Orphan, "", "re_1", 1, "re_1"), newFinding(reconcile.Orphan, "", "re_2", 1, "re_2"),
		newFinding(reconcile.Orphan, "", "re_3", 1, "re_3")}
	fs[0].Fingerprint, fs[1].Fingerprint, fs[2].Fingerprint = "abcdef0001", "abcdef1002", "fedcba0003"
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf(fs, nil), now); err != nil {
		t.Fatal(err)
	}
	// Resolve the third.
	if _, err := e.s.Apply(t.Context(), testRun("run-2", now), resultOf(fs[:2], nil, "re_3"), now); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		fp      string
		reason  string
		wantFP  string
		wantErr error
	}{
		{name: "exact", fp: "abcdef0001", reason: "refunded by hand", wantFP: "abcdef0001"},
		{name: "unique prefix", fp: "abcdef1", reason: "known", wantFP: "abcdef1002"},
		{name: "ambiguous prefix", fp: "abcdef", reason: "x", wantErr: ErrAmbiguous},
		{name: "prefix too short", fp: "abc", reason: "x", wantErr: ErrNotFound},
		{name: "resolved", fp: "fedcba0003", reason: "x", wantErr: ErrResolved},
		{name: "unknown", fp: "0000000000", reason: "x", wantErr: ErrNotFound},
		{name: "no reason", fp: "abcdef0001", reason: " ", wantErr: errors.New("reason")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.s.Ack(t.Context(), tt.fp, "ops@example", tt.reason, now)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Ack(%s) = %v", tt.fp, err)
			case tt.wantErr != nil && err == nil:
				t.Fatalf("Ack(%s) succeeded, want %v", tt.fp, tt.wantErr)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr) && !strings.Contains(err.Error(), tt.wantErr.Error()):
				t.Fatalf("Ack(%s) = %v, want %v", tt.fp, err, tt.wantErr)
			case tt.wantErr != nil:
				return
			}
			if got.Fingerprint != tt.wantFP || got.AckReason != tt.reason || got.AcknowledgedBy != "ops@example" ||
				!got.AcknowledgedAt.Equal(now) {
				t.Errorf("Ack(%s) = %s by %q for %q at %v, want %s", tt.fp, got.Fingerprint, got.AcknowledgedBy,
					got.AckReason, got.AcknowledgedAt, tt.wantFP)
			}
		})
	}
}

func TestFindingsList(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	fs := []reconcile.Finding{
		newFinding(reconcile.StaleLease, "refund:3", "", 0),
		newFinding(reconcile.Orphan, "", "re_9", 1, "re_9"),
		newFinding(reconcile.Duplicate, "refund:2", "", 1, "re_1", "re_2"),
		newFinding(reconcile.Duplicate, "refund:1", "", 1, "re_3", "re_4"),
	}
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf(fs, nil), now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Apply(t.Context(), testRun("run-2", now.Add(time.Hour)), resultOf(fs[1:], nil, "refund:3"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		open bool
		want []string
	}{
		{true, []string{"duplicate refund:1", "duplicate refund:2", "orphan "}},
		{false, []string{"duplicate refund:1", "duplicate refund:2", "orphan ", "stale_lease refund:3"}},
	}
	for _, tt := range tests {
		got, err := e.s.Findings(t.Context(), tt.open)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range got {
			names = append(names, string(r.Kind)+" "+r.ObligationID)
		}
		if diff := cmp.Diff(tt.want, names); diff != "" {
			t.Errorf("Findings(open=%v) (-want +got):\n%s", tt.open, diff)
		}
	}
	all, _ := e.s.Findings(t.Context(), false)
	last := all[len(all)-1]
	if last.Status != FindingResolved || last.FirstSeenRun != "run-1" || last.LastSeenRun != "run-1" || last.ResolvedRun != "run-2" {
		t.Errorf("resolved finding = %+v, want first and last seen in run-1, resolved in run-2", last)
	}
	if first := all[0]; first.LastSeenRun != "run-2" || !first.LastSeenAt.Equal(now.Add(time.Hour)) || !first.FirstSeenAt.Equal(now) {
		t.Errorf("open finding seen %s..%s in run %s, want first at %v, last at %v in run-2",
			first.FirstSeenAt, first.LastSeenAt, first.LastSeenRun, now, now.Add(time.Hour))
	}
}

func TestObligationHistory(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	ob := unknownRefund("refund:1")
	pgtest.InsertObligations(t, e.pool, ob)
	f := newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_2")
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf([]reconcile.Finding{f}, []reconcile.Transition{markPaid(ob, "re_1")}), now); err != nil {
		t.Fatal(err)
	}
	if err := e.s.MarkSent(t.Context(), 2, "C1", "111.2", now); err != nil {
		t.Fatal(err)
	}
	h, err := e.s.ObligationHistory(t.Context(), "refund:1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Findings) != 1 || h.Findings[0].Fingerprint != f.Fingerprint {
		t.Errorf("history findings = %+v, want the duplicate", h.Findings)
	}
	if len(h.Transitions) != 1 || h.Transitions[0].To != reconcile.Paid || h.Transitions[0].RunID != "run-1" {
		t.Errorf("history transitions = %+v, want one to PAID in run-1", h.Transitions)
	}
	if len(h.Alerts) != 1 || h.Alerts[0].Event != reconcile.AlertFiring || h.Alerts[0].SlackTS != "111.2" || h.Alerts[0].SentAt.IsZero() {
		t.Errorf("history alerts = %+v, want the sent firing alert", h.Alerts)
	}
	empty, err := e.s.ObligationHistory(t.Context(), "refund:unknown")
	if err != nil || len(empty.Findings)+len(empty.Transitions)+len(empty.Alerts) != 0 {
		t.Errorf("ObligationHistory(unknown) = %+v, %v; want empty, nil", empty, err)
	}
}

// A finding found again as it is stored has only when it was last seen
// written; one whose content hash is the same but any other column it
// writes differs (its detail, its money, its target, whether money moved
// out) is written whole.
func TestFindingFoundAgain(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	base := newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1a", "re_1b")
	apply := func(runID string, at time.Time, f reconcile.Finding) FindingRecord {
		t.Helper()
		if _, err := e.s.Apply(t.Context(), testRun(runID, at), resultOf([]reconcile.Finding{f}, nil), at); err != nil {
			t.Fatalf("%s: %v", runID, err)
		}
		return e.finding(f.Fingerprint)
	}
	first := apply("run-1", now, base)
	// A statement that sets the finding's content (the upsert does, even
	// to the same values) leaves a row here: the column trigger fires on
	// the columns a statement sets, not on those it changes.
	e.exec(`CREATE TABLE content_written (fingerprint text)`)
	e.exec(`CREATE FUNCTION note_content_written() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO content_written VALUES (NEW.fingerprint); RETURN NEW; END $$`)
	e.exec(`CREATE TRIGGER content_written BEFORE UPDATE OF detail, amount, target, paid_out, severity
		ON reconcile.findings FOR EACH ROW EXECUTE FUNCTION note_content_written()`)
	again := apply("run-2", now.Add(time.Hour), base)
	if n := e.count(`SELECT count(*) FROM content_written`); n != 0 {
		t.Errorf("found again unchanged, its content was written %d times; want only when it was last seen", n)
	}
	if again.LastSeenRun != "run-2" || !again.LastSeenAt.Equal(now.Add(time.Hour)) || again.FirstSeenRun != "run-1" {
		t.Errorf("found again: first seen %s, last seen %s at %s; want run-1, run-2 at %s",
			again.FirstSeenRun, again.LastSeenRun, again.LastSeenAt, now.Add(time.Hour))
	}
	first.LastSeenRun, first.LastSeenAt = again.LastSeenRun, again.LastSeenAt
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("found again unchanged, the row changed beyond when it was last seen (-first +again):\n%s", diff)
	}
	for i, change := range []func(f *reconcile.Finding){
		func(f *reconcile.Finding) { f.Detail += " (reworded)" },
		func(f *reconcile.Finding) { f.Money.Amount++ },
		func(f *reconcile.Finding) { f.Target = "ch_1" },
		func(f *reconcile.Finding) { f.PaidOut = !f.PaidOut },
		func(f *reconcile.Finding) { f.Severity = reconcile.Info },
	} {
		// Stored as base first, so that only this change differs.
		apply(fmt.Sprintf("run-base-%d", i), now.Add(time.Duration(2+2*i)*time.Hour), base)
		f := base
		change(&f)
		runID := fmt.Sprintf("run-change-%d", i)
		written := e.count(`SELECT count(*) FROM content_written`)
		got := apply(runID, now.Add(time.Duration(3+2*i)*time.Hour), f)
		if n := e.count(`SELECT count(*) FROM content_written`); n != written+1 {
			t.Errorf("change %d: content written %d times, want once", i, n-written)
		}
		if got.ContentHash != base.ContentHash {
			t.Fatalf("change %d moved the content hash; the test wants it unchanged", i)
		}
		if got.Detail != f.Detail || got.Money != f.Money || got.Target != f.Target || got.PaidOut != f.PaidOut ||
			got.Severity != f.Severity || got.LastSeenRun != runID {
			t.Errorf("change %d: stored %+v; want the finding as found, %+v, last seen by %s", i, got.Finding, f, runID)
		}
	}
}

// A finding about an obligation is settled only by a run that settled
// the obligation: settling one of its objects (an object retrieved for
// another obligation, whose owner the run read only as context or not at
// all) leaves it open; a conflict is such a finding. An orphan and a
// suspected duplicate are settled by either. A run that decided on the
// obligation without reading all its records settles only the findings
// about its outcome.
func TestFindingSettledByWhatItIsAbout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	now := t0()
	var fs []reconcile.Finding
	for _, k := range reconcile.Kinds {
		oblID, objectID := "charge:o", ""
		switch {
		case k.Kind == reconcile.Orphan:
			oblID, objectID = "", "ch_1"
		case k.Kind == reconcile.SuspectedDuplicate || k.Kind == reconcile.ConflictingLink:
			objectID = "ch_1" // their fingerprints name the movement
		}
		fs = append(fs, newFinding(k.Kind, oblID, objectID, 100, "ch_1", "ch_2"))
	}
	if _, err := e.s.Apply(ctx, testRun("run-1", now), resultOf(fs, nil), now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Apply(ctx, testRun("run-2", now.Add(time.Hour)), settled("ch_1"), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		want := FindingOpen
		if f.Kind.SettledByObject() {
			want = FindingResolved
		}
		if got := e.finding(f.Fingerprint).Status; got != want {
			t.Errorf("after a run that settled ch_1 alone, the %s finding is %s, want %s", f.Kind, got, want)
		}
	}
	partial := reconcile.Conclusions{ObligationIDs: []string{"charge:o"}}
	if _, err := e.s.Apply(ctx, testRun("run-3", now.Add(2*time.Hour)), partial, now.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		want := FindingOpen
		if f.Kind.SettledByObject() || f.Kind.AboutOutcome() {
			want = FindingResolved
		}
		if got := e.finding(f.Fingerprint).Status; got != want {
			t.Errorf("after a run that decided on charge:o without all its records, the %s finding is %s, want %s", f.Kind, got, want)
		}
	}
	obligation := reconcile.Conclusions{ObligationIDs: []string{"charge:o"}, Settled: reconcile.Settled{Obligations: []string{"charge:o"}}}
	if _, err := e.s.Apply(ctx, testRun("run-4", now.Add(3*time.Hour)), obligation, now.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if got := e.finding(f.Fingerprint).Status; got != FindingResolved {
			t.Errorf("after a run that settled charge:o, the %s finding is %s, want resolved", f.Kind, got)
		}
	}
}
