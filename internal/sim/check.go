package sim

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/store"
)

// checkPass checks what a pass left in the database against what it saw,
// what it decided and the truth, and then takes its verified transitions
// into the ledger. Called under w.mu, once the pass can write no more.
func (w *world) checkPass(pc *passCtl) error {
	if pc.checked {
		return nil
	}
	pc.checked = true
	pc.exp = expect(pc.truth, pc.plan, pc.start, pc.failed, w.maxLookback)
	after, err := w.snapshot(w.ctx)
	if err != nil {
		return err
	}
	before, n := pc.before, pc.n

	for fp, f := range before.findings {
		if _, ok := after.findings[fp]; !ok {
			w.violate("I2", n, "finding %s (%s %s) was deleted; findings are resolved, never deleted", fp, f.kind, f.obligationID)
		}
	}
	var newTr []transitionRow
	for _, t := range after.transitions {
		if len(before.transitions) == 0 || t.id > before.transitions[len(before.transitions)-1].id {
			newTr = append(newTr, t)
		}
	}
	var newOut []outboxRow
	for _, id := range slices.Sorted(maps.Keys(after.outbox)) {
		if id > before.maxOutbox {
			newOut = append(newOut, after.outbox[id])
		}
	}
	for id, r := range after.outbox {
		if r.sent && !before.outbox[id].sent && w.obs.row(id).accepted == 0 {
			w.violate("I3", n, "outbox row %d (%s) recorded as sent, but Slack never accepted it", id, r.event)
		}
	}

	switch {
	case pc.plan.dryRun:
		w.checkUnchanged(pc, before, after, "a dry run")
		if pc.slackReqs > 0 {
			w.violate("I6", n, "a dry run sent %d requests to Slack", pc.slackReqs)
		}
		if pc.outcome != nil {
			w.checkModel(pc, &pc.outcome.Result.Conclusions)
			w.checkWindow(pc, &pc.outcome.Result.Conclusions)
		} else {
			w.tracef("pass %d (dry) failed: %v", n, short(pc.runErr))
		}
	case pc.applied == nil:
		// A pass that could not read everything, or died before Apply
		// committed, leaves no trace but a failed run (I7).
		w.checkUnchanged(pc, before, after, "a pass that did not complete")
		for id, r := range after.runs {
			if _, ok := before.runs[id]; !ok && r.status != string(reconcile.RunFailed) && id != pc.stuckRun {
				w.violate("I7", n, "a pass that did not complete left run %s %s", id, r.status)
			}
		}
		why := "failed"
		if pc.killedAt != "" {
			why = "killed after " + pc.killedAt
		}
		w.tracef("pass %d %s: %v", n, why, short(cmp.Or(pc.applyErr, pc.runErr)))
	default:
		w.checkModel(pc, pc.result)
		w.checkWindow(pc, pc.result)
		w.checkTransitions(pc, newTr, after)
		w.checkFindings(pc, before, after, newOut, newTr)
		a := pc.applied
		w.tracef("pass %d applied: %d findings (%d new, %d changed, %d resolved, %d repeated), %d transitions, %d skipped, %d alerts%s",
			n, len(pc.result.Findings), a.New, a.Changed, a.Resolved, a.Repeated, len(a.Transitions), len(a.Skipped), a.Alerts,
			map[bool]string{true: ", then killed after " + pc.killedAt}[pc.killedAt != ""])
	}
	// I4: the table holds what the worker wrote and what the verified
	// transitions wrote, nothing else.
	for _, id := range w.led.oblIDs {
		o, got := w.led.obls[id], after.obligations[id]
		want := oblRow{state: string(o.State), providerID: o.ProviderID, leaseOwner: o.LeaseOwner,
			leaseExp: o.LeaseExp, updated: o.Updated, paid: o.Paid}
		if !got.leaseExp.Equal(want.leaseExp) || !got.updated.Equal(want.updated) || !got.paid.Equal(want.paid) ||
			got.state != want.state || got.providerID != want.providerID || got.leaseOwner != want.leaseOwner {
			w.violate("I4", n, "obligation %s changed without a verified transition: table %+v, want %+v", id, got, want)
			// Take the table's word, so that one fault is reported once.
			o.State, o.ProviderID, o.LeaseOwner = reconcile.State(got.state), got.providerID, got.leaseOwner
			o.LeaseExp, o.Updated, o.Paid = got.leaseExp, got.updated, got.paid
		}
	}
	return nil
}

func short(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// checkUnchanged: nothing but failed run rows and outbox delivery
// bookkeeping may differ (a dry run changes nothing at all).
func (w *world) checkUnchanged(pc *passCtl, before, after dbState, what string) {
	n := pc.n
	if len(after.transitions) != len(before.transitions) {
		w.violate("I7", n, "%s wrote %d audit rows", what, len(after.transitions)-len(before.transitions))
	}
	if after.maxOutbox != before.maxOutbox {
		w.violate("I7", n, "%s queued alerts (outbox ids %d..%d)", what, before.maxOutbox+1, after.maxOutbox)
	}
	for fp, f := range after.findings {
		b, ok := before.findings[fp]
		if !ok || !b.sameBut(f) {
			w.violate("I7", n, "%s changed finding %s (%s %s): %s → %s", what, fp, f.kind, f.obligationID, b.status, f.status)
		}
	}
	for id, r := range after.outbox {
		if b := before.outbox[id]; b.sent != r.sent || b.attempts != r.attempts {
			w.violate("I7", n, "%s touched outbox row %d", what, id)
		}
	}
	if pc.plan.dryRun && len(after.runs) != len(before.runs) {
		w.violate("I6", n, "a dry run recorded a run")
	}
	switch {
	case pc.jobs:
		// A pass run as jobs that did not complete may leave what its
		// fetches read in the mirror, as the provider held it at the
		// pass's start, but vouches for nothing: only a completed pass
		// moves the cursors (docs/design.md, "Passes as jobs").
		if after.cursors != before.cursors {
			w.violate("I7", n, "%s moved the provider mirror's cursors", what)
		}
	case after.mirror != before.mirror:
		w.violate("I7", n, "%s changed the provider mirror", what)
	}
}

// checkTransitions checks the audit rows of a pass that applied (I1, I4,
// I5) and takes the transitions into the ledger.
func (w *world) checkTransitions(pc *passCtl, newTr []transitionRow, after dbState) {
	e, n, a := pc.exp, pc.n, pc.applied
	if len(newTr) != len(a.Transitions) {
		w.violate("I4", n, "%d transitions applied but %d audit rows written", len(a.Transitions), len(newTr))
	}
	audit := map[string]transitionRow{}
	for _, t := range newTr {
		if _, dup := audit[t.obligationID]; dup {
			w.violate("I4", n, "two audit rows for obligation %s in one pass", t.obligationID)
		}
		audit[t.obligationID] = t
	}
	for _, t := range a.Transitions {
		id := t.ObligationID
		read := e.truth.obls[id]
		o := w.led.obls[id]
		row, ok := audit[id]
		switch {
		case !ok:
			w.violate("I4", n, "transition of %s applied without an audit row", id)
		case row.from != string(t.From) || row.to != string(t.To) || row.providerID != t.ProviderID || !row.at.Equal(pc.start):
			w.violate("I4", n, "audit row of %s says %s→%s by %s at %s, the transition %s→%s by %s at %s",
				id, row.from, row.to, row.providerID, fmtT(row.at), t.From, t.To, t.ProviderID, fmtT(pc.start))
		}
		if t.From != reconcile.ConfirmationUnknown && t.From != reconcile.Executing || t.To != reconcile.Paid {
			w.violate("I4", n, "illegal edge %s→%s for %s", t.From, t.To, id)
		}
		if read == nil || o == nil {
			w.violate("I4", n, "transition of unknown obligation %s", id)
			continue
		}
		// I5: the row was what the pass read, and no worker held it.
		if read.State == reconcile.Executing && read.LeaseExp.After(pc.start) {
			w.violate("I5", n, "%s marked PAID while its lease was live until %s", id, fmtT(read.LeaseExp))
		}
		if o.State != read.State || !o.LeaseExp.Equal(read.LeaseExp) || id == pc.interleaved {
			w.violate("I5", n, "%s written although it changed since read (%s lease %s, now %s lease %s)",
				id, read.State, fmtT(read.LeaseExp), o.State, fmtT(o.LeaseExp))
		}
		// I1: exactly one succeeded movement of equal money, among what
		// the pass could see and link, and it is the one recorded.
		var succ []*object
		for _, xid := range e.linked[id] {
			if x := e.truth.objs[xid]; x.Status == reconcile.Succeeded {
				succ = append(succ, x)
			}
		}
		if len(succ) != 1 || succ[0].Money != read.Money || succ[0].ID != t.ProviderID {
			w.violate("I1", n, "%s marked PAID by %s without exactly one succeeded movement of %s: %s",
				id, t.ProviderID, read.Money, w.describeObl(e, id))
		}
		// The truth beyond what the pass could link: money may also have
		// moved for it under a fresh key with no metadata, which nothing
		// ties to it (a limit of any reconciliation, reported: the pass
		// shows such an object as an orphan). One it did not even read
		// would be a hole in its coverage.
		var extra, unread []string
		for _, x := range e.truth.objectsFor(id) {
			if x.Status == reconcile.Succeeded && x.ID != t.ProviderID {
				extra = append(extra, x.ID)
				if !e.input[x.ID] && x.Created.Unix() < pc.start.Unix() {
					unread = append(unread, x.ID)
				}
			}
		}
		if len(unread) > 0 {
			w.violate("I9", n, "%s marked PAID by %s, but the pass did not read %v, which moved money for it too: %s",
				id, t.ProviderID, unread, w.describeObl(e, id))
		}
		if len(extra) > 0 {
			w.rep.Unlinkable++
			w.tracef("pass %d: %s marked PAID by %s; %v moved money for it too, under keys nothing ties to it", n, id, t.ProviderID, extra)
		}
		adopt(o, t, pc.start)
	}
	for _, s := range a.Skipped {
		if s.Transition.ObligationID != pc.interleaved {
			w.violate("I5", n, "transition of %s skipped though nothing changed it: %s", s.Transition.ObligationID, s.Reason)
		}
	}
	if pc.interleaved != "" && !slices.ContainsFunc(a.Skipped, func(s store.Skipped) bool { return s.Transition.ObligationID == pc.interleaved }) {
		if _, applied := audit[pc.interleaved]; !applied {
			// The worker's change made the transition moot before Apply
			// looked: nothing to skip.
			w.tracef("pass %d: interleaved %s needed no skip", n, pc.interleaved)
		}
	}
}

// adopt takes a transition the store applied at now into the ledger, as
// the store writes it.
func adopt(o *obligation, t reconcile.Transition, now time.Time) {
	o.State = reconcile.Paid
	if o.ProviderID == "" {
		o.ProviderID = t.ProviderID
	}
	if o.Paid.IsZero() {
		o.Paid = now
	}
	o.Updated = now
}

// checkFindings checks the findings and the outbox rows a pass that
// applied wrote (I2, I3).
// An independent statement of the alert lifecycle; the code's is alerts.Decide.
func (w *world) checkFindings(pc *passCtl, before, after dbState, newOut []outboxRow, newTr []transitionRow) {
	e, n, res := pc.exp, pc.n, pc.result
	for fp, f := range e.findings {
		if a, ok := after.findings[fp]; !ok || a.status != "open" {
			w.violate("I2", n, "true anomaly %s is not an open finding after the pass", f)
		}
	}
	covers := func(f findingRow) bool {
		return e.settles(reconcile.FindingKind(f.kind), f.obligationID, f.providerIDs)
	}
	unsent := map[string]bool{}
	lastSent := map[string]time.Time{}
	for _, r := range before.outbox {
		if !r.sent && r.fingerprint != "" {
			unsent[r.fingerprint] = true
		}
		if r.sent && r.sentAt.After(lastSent[r.fingerprint]) {
			lastSent[r.fingerprint] = r.sentAt
		}
	}
	type notice struct {
		fp      string
		event   string
		changed bool
	}
	var want, allowed []notice
	found := map[string]bool{}
	nNew, nChanged, nResolved := 0, 0, 0
	for _, f := range res.Findings {
		found[f.Fingerprint] = true
		old, known := before.findings[f.Fingerprint]
		switch {
		case !known || old.status == "resolved":
			want = append(want, notice{f.Fingerprint, "firing", false})
			nNew++
		case old.hash != f.ContentHash:
			want = append(want, notice{f.Fingerprint, "firing", true})
			nChanged++
		case old.acked.IsZero() && repeatDue(old.lastAlerted, lastSent[f.Fingerprint], pc.start):
			// A repeat is due; the store may hold it back while an alert
			// about the finding still waits in the outbox.
			if unsent[f.Fingerprint] {
				allowed = append(allowed, notice{f.Fingerprint, "repeat", false})
			} else {
				want = append(want, notice{f.Fingerprint, "repeat", false})
			}
		}
		if a := after.findings[f.Fingerprint]; a.status != "open" || a.hash != f.ContentHash {
			w.violate("I2", n, "finding %s %s is %s after the pass that found it", f.Kind, f.ObligationID, a.status)
		}
	}
	for fp, old := range before.findings {
		if old.status != "open" || found[fp] {
			if got := after.findings[fp]; old.status == "open" && !found[fp] && got.status != "open" {
				w.violate("I2", n, "finding %s resolved although not covered", fp)
			}
			continue
		}
		got := after.findings[fp]
		if covers(old) {
			want = append(want, notice{fp, "resolved", false})
			nResolved++
			if got.status != "resolved" {
				w.violate("I2", n, "finding %s (%s %s) no longer found where the pass looked, but still %s", fp, old.kind, old.obligationID, got.status)
			}
		} else if got.status != "open" {
			w.violate("I2", n, "finding %s (%s %s) resolved by a pass that did not look at it", fp, old.kind, old.obligationID)
		}
	}
	var got []notice
	summaries := 0
	for _, r := range newOut {
		if r.event == string(reconcile.AlertSummary) {
			summaries++
			var s reconcile.RunSummary
			if err := json.Unmarshal([]byte(r.payload), &s); err != nil {
				w.violate("I3", n, "summary payload: %v", err)
				continue
			}
			if s.Confirmed != nConfirmedOf(newTr) {
				w.violate("I3", n, "summary says %d unknown outcomes confirmed and marked PAID; the audit says %d", s.Confirmed, nConfirmedOf(newTr))
			}
			if sum(s.New) != nNew || sum(s.Changed) != nChanged || sum(s.Resolved) != nResolved {
				w.violate("I3", n, "summary says %d new, %d changed, %d resolved; the pass found %d, %d, %d",
					sum(s.New), sum(s.Changed), sum(s.Resolved), nNew, nChanged, nResolved)
			}
			continue
		}
		got = append(got, notice{r.fingerprint, r.event, r.changed})
	}
	// A pass that confirmed an unknown outcome (its audit says
	// CONFIRMATION_UNKNOWN → PAID) tells finance so, even with no finding.
	confirmed := nConfirmedOf(newTr) > 0
	wantSummary := 0
	if nNew+nChanged+nResolved > 0 || confirmed {
		wantSummary = 1
	}
	if summaries != wantSummary {
		w.violate("I3", n, "%d summary alerts queued, want %d", summaries, wantSummary)
	}
	key := func(x notice) string { return fmt.Sprintf("%s %s %t", x.event, x.fp, x.changed) }
	gotSet := map[string]int{}
	for _, x := range got {
		gotSet[key(x)]++
	}
	for _, x := range want {
		if gotSet[key(x)] == 0 {
			f := after.findings[x.fp]
			w.violate("I3", n, "no %s alert queued for finding %s %s", x.event, f.kind, f.obligationID)
			continue
		}
		gotSet[key(x)]--
	}
	for _, x := range allowed {
		if gotSet[key(x)] > 0 {
			gotSet[key(x)]--
		}
	}
	for k, c := range gotSet {
		if c > 0 {
			w.violate("I3", n, "%d unexpected alert(s) queued: %s", c, k)
		}
	}
}

// repeatDue: people were last told about a finding when its last alert
// was queued or, if it waited in the outbox, when Slack took it; a repeat
// is due the repeat interval after that.
func repeatDue(queued, sent, now time.Time) bool {
	last := queued
	if sent.After(last) {
		last = sent
	}
	return last.IsZero() || now.Sub(last) >= repeatInterval
}

func sum(m map[reconcile.FindingKind]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

// checkReturn checks what Run returned against what the pass did.
func (w *world) checkReturn(pc *passCtl) {
	n := pc.n
	if pc.runErr != nil {
		w.errTexts = append(w.errTexts, pc.runErr.Error())
	}
	if pc.outcome != nil && pc.outcome.AlertErr != nil {
		w.errTexts = append(w.errTexts, pc.outcome.AlertErr.Error())
	}
	if pc.outcome != nil && pc.outcome.Sync.Mode != "" {
		s := pc.outcome.Sync
		w.tracef("pass %d read the provider: %s %s (listed %d, mirrored %d, changed %d)", n, s.Mode, s.Reason, s.Listed, s.Mirrored, s.Changed)
		if w.rep.Stats == nil {
			w.rep.Stats = map[string]int{}
		}
		w.rep.Stats["sync_"+s.Mode]++
		if s.Changed > 0 {
			w.rep.Stats["sync_changed"]++
		}
	}
	if !pc.began {
		return
	}
	if pc.outcome != nil && pc.truth != nil {
		// What the pass read is what the provider held when it began,
		// however it read it (listed, retrieved, or from the mirror).
		for _, o := range pc.outcome.Input.Objects {
			x := pc.truth.objs[o.ID]
			switch {
			case x == nil:
				w.violate("M", n, "the pass read provider object %s, which does not exist", o.ID)
			case o.Status != x.Status || o.Money != x.Money:
				w.violate("M", n, "the pass read %s as %s %s; the provider held it %s %s (sync %s)",
					o.ID, o.Money, o.Status, x.Money, x.Status, pc.outcome.Sync.Mode)
			}
		}
	}
	switch {
	case pc.plan.dryRun:
	case pc.applied != nil && pc.killedAt != "apply" && pc.runErr != nil:
		w.violate("I7", n, "the pass applied but Run returned an error: %v", pc.runErr)
	case pc.applied == nil && pc.runErr == nil:
		w.violate("I7", n, "the pass did not apply but Run returned no error")
	case pc.applied != nil && pc.runErr == nil && pc.fired["slack_bad_auth"] && pc.killedAt == "" &&
		!errors.Is(pc.outcome.AlertErr, alerts.ErrPermanent):
		w.violate("I3", n, "Slack refused the token, but the pass does not say alerts cannot be delivered (AlertErr %v)", pc.outcome.AlertErr)
	}
}

// interleave: between the pass's read and its apply, a worker changes an
// obligation that the pass is about to mark PAID. Called under w.mu.
func (w *world) interleave(pc *passCtl, ts []reconcile.Transition) error {
	t := ts[w.rng.IntN(len(ts))]
	o := w.led.obls[t.ObligationID]
	if o == nil {
		return nil
	}
	now := w.clock.Now()
	switch w.rng.IntN(3) {
	case 0: // another worker claims it to retry
		w.led.nextKey++
		o.State, o.LeaseOwner, o.LeaseExp = reconcile.Executing, fmt.Sprintf("worker-%d", w.led.nextKey), now.Add(leaseTerm)
	case 1: // the answer finally arrives
		o.State, o.ProviderID, o.LeaseOwner, o.LeaseExp = reconcile.Paid, t.ProviderID, "", time.Time{}
		if o.Paid.IsZero() {
			o.Paid = now
		}
	default: // a person takes it aside
		o.State, o.LeaseOwner, o.LeaseExp = reconcile.RequiresReview, "", time.Time{}
	}
	pc.interleaved = o.ID
	pc.fired["worker_interleave"] = true
	w.tracef("pass %d: worker changes %s to %s between read and apply", pc.n, o.ID, o.State)
	return w.save(w.ctx, o)
}

// checkSecrets looks for the canaries everywhere a person or a log
// collector could read (I8). An error means it could not look.
func (w *world) checkSecrets() error {
	type place struct{ name, text string }
	places := []place{{"logs", w.logs.String()}}
	for _, m := range w.slack.Messages() {
		places = append(places, place{"slack", m.Text + "\n" + string(m.Blocks) + "\n" + m.Flat})
	}
	for _, e := range w.errTexts {
		places = append(places, place{"error", e})
	}
	// Stored error texts, which `reconcile trace` and `findings` show.
	// (Findings themselves name obligations by the application's ids,
	// which may hold anything; the commands redact them on output.)
	rows, err := w.env.Pool.Query(w.ctx, `SELECT coalesce(last_error, '') FROM reconcile.outbox
		UNION ALL SELECT coalesce(error, '') FROM reconcile.runs`)
	if err != nil {
		return fmt.Errorf("read stored error texts: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read stored error texts: %w", err)
	}
	for _, s := range stored {
		places = append(places, place{"stored error", s})
	}
	// The mirror's metadata at rest, but for the values of the link keys,
	// which are the application's ids and keys and stay exact
	// (docs/design.md, "Untrusted text").
	mk := config.Default().Matcher.MetadataKeys
	rows, err = w.env.Pool.Query(w.ctx, `SELECT m.key || ' ' || CASE WHEN m.key = ANY($1) THEN '' ELSE m.value END
		FROM reconcile.provider_objects p, jsonb_each_text(p.metadata) m`, []string{mk.ObligationID, mk.IdempotencyKey})
	if err != nil {
		return fmt.Errorf("read the mirror's metadata: %w", err)
	}
	mirrored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read the mirror's metadata: %w", err)
	}
	for _, s := range mirrored {
		places = append(places, place{"mirrored metadata", s})
	}
	for _, p := range places {
		for _, c := range canaries() {
			if i := strings.Index(p.text, c); i >= 0 {
				lo, hi := max(0, i-80), min(len(p.text), i+len(c)+40)
				w.violate("I8", 0, "canary %q in %s: …%s…", c, p.name, p.text[lo:hi])
			}
		}
	}
	return nil
}

// nConfirmedOf counts the audit rows that confirmed an unknown outcome
// (CONFIRMATION_UNKNOWN → PAID).
func nConfirmedOf(tr []transitionRow) int {
	n := 0
	for _, t := range tr {
		if t.from == string(reconcile.ConfirmationUnknown) && t.to == string(reconcile.Paid) {
			n++
		}
	}
	return n
}
