package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"reconcile"
	"reconcile/internal/alerts"
)

// Applied is what Apply wrote for one run.
type Applied struct {
	// Transitions are those applied, in the order given.
	Transitions []reconcile.Transition
	// Skipped are the transitions whose obligation changed since it was
	// read (a worker got there first); they were not written.
	Skipped []Skipped
	// New counts findings opened by this run; Reopened counts those among
	// them that an earlier run had resolved.
	New, Reopened int
	// Changed counts open findings whose content (money at risk, provider
	// ids) changed; Resolved those this run no longer found in its scope;
	// Repeated those alerted again after the repeat interval.
	Changed, Resolved, Repeated int
	// Alerts is the number of outbox rows written, the summary included.
	Alerts int
	// Summary is the run's summary, whether or not a summary alert was
	// written (it is written only when something is new, changed or
	// resolved).
	Summary reconcile.RunSummary
	// Attempts is how many times the transaction ran (1 unless it lost a
	// serialization race or a deadlock).
	Attempts int
}

// Skipped is a transition that was not applied, and why.
type Skipped struct {
	Transition reconcile.Transition
	Reason     string
}

// Finding statuses in the findings table.
const (
	statusOpen     = "open"
	statusResolved = "resolved"
)

// Apply writes one completed run's conclusions in one transaction: the
// transitions by compare-and-set with their audit rows, the findings (new,
// seen again, changed, reopened, resolved), their alerts in the outbox, and
// the run row. Applying the same result twice writes no second transition
// and no second alert. The run row records run.Counts, or res.Counts when
// run.Counts is zero.
//
// Given a run lock with WithFence, the transaction proves that the lock is
// still the run's and fails with an error wrapping ErrLockLost otherwise;
// nothing is written then.
//
// The transaction runs at REPEATABLE READ. Every outbox row goes with a
// write to its finding's row (or, for the summary, to some finding's row),
// and every transition is a write to its obligation's row, so two
// applies racing over the same rows cannot both commit: the second fails
// with a serialization error, runs again on a fresh snapshot, and finds
// nothing left to do. A worker's concurrent change to an obligation has
// the same effect, and the rerun then skips that transition.
func (s *Store) Apply(ctx context.Context, run reconcile.Run, res reconcile.Conclusions, now time.Time) (Applied, error) {
	return s.applyWith(ctx, run, res, now, nil)
}

// applyWith is Apply, of one account's part of a pass run as jobs when
// part is set (ApplyPart).
func (s *Store) applyWith(ctx context.Context, run reconcile.Run, res reconcile.Conclusions, now time.Time, part *passPart) (Applied, error) {
	in, err := s.prepare(run, res)
	if err != nil {
		return Applied{}, fmt.Errorf("apply run %s: %w", run.ID, err)
	}
	in.part = part
	for attempt := 1; ; attempt++ {
		var out Applied
		// Fenced by the run lock of ctx (WithFence): the check is the
		// transaction's first statement, so its snapshot is taken under
		// the fence, and its last, so a lock lost meanwhile is refused.
		err := inFence(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			var err error
			out, err = s.apply(ctx, tx, in, now)
			return err
		})
		if err == nil {
			out.Attempts = attempt
			return out, nil
		}
		if !retryable(err) || attempt >= s.opts.MaxApplyAttempts {
			return Applied{}, fmt.Errorf("apply run %s (attempt %d): %w", run.ID, attempt, err)
		}
		s.opts.Logger.Info("apply lost a race with a concurrent writer; retrying",
			slog.String("run_id", run.ID), slog.Int("attempt", attempt), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return Applied{}, fmt.Errorf("apply run %s: %w", run.ID, context.Cause(ctx))
		case <-time.After(retryDelay(attempt)):
		}
	}
}

// retryDelay is the pause before attempt n+1 of a transaction that lost a
// serialization race; short, because the winner has already committed.
func retryDelay(n int) time.Duration {
	return time.Duration(n) * 10 * time.Millisecond
}

// applyInput is a run's result checked and arranged once, outside the
// retry loop.
type applyInput struct {
	run         reconcile.Run
	transitions []reconcile.Transition
	findings    []reconcile.Finding
	// part, when set, makes this one account's share of a pass run as
	// jobs (ApplyPart): what the run's summary adds up from it is kept for
	// FinishPass, its alerts are held until then, and the run row is
	// FinishPass's to write.
	part *passPart
	// scope: what this run settled (reconcile.Conclusions.Settled), sorted; an
	// open finding outside it stays open. Sorted slices rather than sets: a run may examine a
	// million obligations, and only the few open findings are looked up.
	obligations []string
	objects     []string
	// decided: every obligation the run decided on (ObligationIDs),
	// sorted: those whose records it did not all read settle only the
	// findings about their outcome.
	decided []string
	// elsewhere: fingerprints a shard found that another shard reports
	// (reconcile.Conclusions.Elsewhere): never resolved by this part.
	elsewhere []string
}

func (s *Store) prepare(run reconcile.Run, res reconcile.Conclusions) (applyInput, error) {
	if run.ID == "" {
		return applyInput{}, errors.New("run has no id")
	}
	if run.Status == reconcile.RunDry {
		return applyInput{}, errors.New("a dry run writes nothing")
	}
	switch run.Trigger {
	case reconcile.TriggerCron, reconcile.TriggerManual, reconcile.TriggerDemo:
	default:
		return applyInput{}, fmt.Errorf("unknown trigger %q", run.Trigger)
	}
	if run.Counts == (reconcile.Counts{}) {
		run.Counts = res.Counts
	}
	in := applyInput{
		run:         run,
		transitions: res.Transitions,
		findings:    make([]reconcile.Finding, 0, len(res.Findings)),
		obligations: sortedIDs(res.Settled.Obligations),
		objects:     sortedIDs(res.Settled.Objects),
		decided:     sortedIDs(res.ObligationIDs),
		elsewhere:   sortedIDs(res.Elsewhere),
	}
	seen := make(map[string]bool, len(res.Transitions))
	for _, t := range res.Transitions {
		if t.ObligationID == "" {
			return applyInput{}, errors.New("transition without an obligation id")
		}
		if seen[t.ObligationID] {
			return applyInput{}, fmt.Errorf("obligation %s has two transitions", t.ObligationID)
		}
		seen[t.ObligationID] = true
		if !t.To.Known() {
			return applyInput{}, fmt.Errorf("obligation %s: unknown target state %q", t.ObligationID, t.To)
		}
		// Defence in depth: the matcher never proposes to move a row whose
		// state the configuration does not map (CANCELLED, or a value
		// with a stray blank), and the store refuses to, rather than
		// overwrite a state whose meaning nobody configured.
		raw := cmp.Or(t.FromRaw, s.table.Raw(t.From))
		from := s.table.Canonical(raw)
		if !from.Known() {
			return applyInput{}, fmt.Errorf("obligation %s: state %q is not mapped in obligations.states; it is never transitioned",
				t.ObligationID, raw)
		}
		if t.From != "" && t.From != from {
			return applyInput{}, fmt.Errorf("obligation %s: from state %s disagrees with the value read, %q (%s under obligations.states)",
				t.ObligationID, t.From, raw, from)
		}
	}
	clear(seen)
	for _, f := range res.Findings {
		if f.Fingerprint == "" {
			return applyInput{}, fmt.Errorf("%s finding of %q has no fingerprint", f.Kind, f.ObligationID)
		}
		if seen[f.Fingerprint] {
			return applyInput{}, fmt.Errorf("fingerprint %s appears twice", f.Fingerprint)
		}
		seen[f.Fingerprint] = true
		if f.Severity == "" {
			f.Severity = f.Kind.Severity()
		}
		if f.ContentHash == "" {
			f.ContentHash = reconcile.ContentHash(f.AtRisk, f.ProviderIDs)
		}
		f.ProviderIDs = slices.Clone(f.ProviderIDs)
		in.findings = append(in.findings, f)
	}
	return in, nil
}

// sortedIDs returns ids sorted, without copying them when they already are
// (the matcher sorts them).
func sortedIDs(ids []string) []string {
	if slices.IsSorted(ids) {
		return ids
	}
	return slices.Sorted(slices.Values(ids))
}

// apply is one attempt of Apply's transaction.
func (s *Store) apply(ctx context.Context, tx pgx.Tx, in applyInput, now time.Time) (Applied, error) {
	var out Applied
	if in.part != nil {
		// A part of a pass that ended (failed) applies nothing: FailPass
		// told what was applied before it, and nothing after it would be.
		if err := stillRunning(ctx, tx, in.run.ID); err != nil {
			return out, err
		}
	}
	// Every statement of an apply is a lookup or a write of the run's own
	// rows; the planner's estimate of the findings' read (a subquery per
	// open finding) passes JIT's threshold, and compiling it took longer
	// than running it (0.2 s of 0.37 s at ten thousand open findings).
	if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
		return out, err
	}
	// Read first: the snapshot every later decision is taken against.
	stored, err := readFindings(ctx, tx, in.findings)
	if err != nil {
		return out, err
	}
	out.Transitions, out.Skipped, err = s.applyTransitions(ctx, tx, in.transitions, in.run.ID, now)
	if err != nil {
		return out, err
	}
	if err := s.runHook(ctx, "transitions", tx); err != nil {
		return out, err
	}

	plan, err := s.planFindings(in, stored, now)
	if err != nil {
		return out, err
	}
	out.New, out.Reopened, out.Changed, out.Resolved, out.Repeated =
		plan.new, plan.reopened, plan.changed, len(plan.resolve), plan.repeated
	if err := upsertFindings(ctx, tx, plan.upserts, in.run.ID, now); err != nil {
		return out, err
	}
	if err := seeFindings(ctx, tx, plan.seen, in.run.ID, now); err != nil {
		return out, err
	}
	if err := resolveFindings(ctx, tx, plan.resolve, in.run.ID, now); err != nil {
		return out, err
	}
	if err := s.runHook(ctx, "findings", tx); err != nil {
		return out, err
	}

	out.Summary, err = summarize(ctx, tx, in, plan, out.Transitions)
	if err != nil {
		return out, err
	}
	alerts := plan.alerts
	if in.part != nil {
		return out, s.stagePart(ctx, tx, in, plan, &out)
	}
	if len(out.Summary.New)+len(out.Summary.Changed)+len(out.Summary.Resolved)+out.Summary.Confirmed > 0 {
		// The summary goes first so that it has the smallest id of its
		// run: Due hands rows out in id order.
		payload, err := json.Marshal(out.Summary)
		if err != nil {
			return out, fmt.Errorf("encode run summary: %w", err)
		}
		alerts = slices.Insert(alerts, 0, outboxRow{event: reconcile.AlertSummary, payload: string(payload)})
	}
	if err := insertAlerts(ctx, tx, alerts, in.run.ID, now); err != nil {
		return out, err
	}
	out.Alerts = len(alerts)
	if err := s.runHook(ctx, "outbox", tx); err != nil {
		return out, err
	}
	if err := upsertRun(ctx, tx, in.run, reconcile.RunCompleted, len(in.findings), len(out.Transitions), len(out.Skipped)); err != nil {
		return out, err
	}
	return out, nil
}

func (s *Store) runHook(ctx context.Context, stage string, tx pgx.Tx) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(ctx, stage, tx)
}

// applyTransitions compare-and-sets every transition in one statement and
// explains each one skipped.
func (s *Store) applyTransitions(ctx context.Context, tx pgx.Tx, ts []reconcile.Transition, runID string, now time.Time) (applied []reconcile.Transition, skipped []Skipped, err error) {
	if len(ts) == 0 {
		return nil, nil, nil
	}
	// The transitions go to a temporary table by COPY (sending them as
	// arrays of parameters cost 0.4 s more at a hundred thousand), each
	// naming its move by number; the moves go as parameters.
	var m transitionMoves
	if _, err := tx.Exec(ctx, s.sql().staging); err != nil {
		return nil, nil, fmt.Errorf("apply transitions: %w", err)
	}
	i := 0
	err = copyBinary(ctx, tx, pgx.Identifier{"pg_temp", "transitions_in"}, []string{"id", "lease", "provider_id", "move"},
		func(b []byte) ([]byte, bool, error) {
			if i == len(ts) {
				return b, false, nil
			}
			t := &ts[i]
			i++
			fromRaw := t.FromRaw
			if fromRaw == "" {
				fromRaw = s.table.Raw(t.From)
			}
			from := t.From
			if from == "" {
				from = s.table.Canonical(t.FromRaw)
			}
			b = appendFields(b, 4)
			b = appendText(b, t.ObligationID)
			if t.FromLeaseExpiresAt.IsZero() {
				b = appendNull(b)
			} else {
				// A timestamp without time zone holds the wall clock in
				// UTC, as the reader read it; either type's binary form is
				// microseconds since 2000.
				b = appendTimestamptz(b, t.FromLeaseExpiresAt)
			}
			b = appendTextOrNull(b, t.ProviderID)
			return appendInt4(b, m.number(fromRaw, s.table.Raw(t.To), string(from), string(t.To))), true, nil
		})
	if err != nil {
		return nil, nil, fmt.Errorf("apply transitions: copy: %w", err)
	}
	if len(ts) >= bigBatch {
		// Keep the join's hash in memory rather than spilling it to
		// disk; for this transaction only.
		if _, err := tx.Exec(ctx, `SELECT set_config('work_mem', '64MB', true)`); err != nil {
			return nil, nil, fmt.Errorf("apply transitions: %w", err)
		}
	}
	at := now.UTC()
	rows, err := tx.Query(ctx, s.sql().cas, m.fromRaw, m.toRaw, m.fromState, m.toState, string(reconcile.Paid), at, runID, at, at)
	if err != nil {
		return nil, nil, fmt.Errorf("apply transitions: %w", err)
	}
	missed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("apply transitions: %w", err)
	}
	if len(missed) == 0 {
		return ts, nil, nil
	}
	notApplied := make(map[string]bool, len(missed))
	for _, id := range missed {
		notApplied[id] = true
	}
	reasons, err := s.skipReasons(ctx, tx, ts, missed)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range ts {
		if notApplied[t.ObligationID] {
			skipped = append(skipped, Skipped{Transition: t, Reason: reasons[t.ObligationID]})
		} else {
			applied = append(applied, t)
		}
	}
	return applied, skipped, nil
}

// transitionMoves are the distinct moves of a batch of transitions, by
// their raw and canonical states, each sent once with the compare-and-set
// (obligationSQL.cas).
type transitionMoves struct {
	fromRaw, toRaw, fromState, toState []string
}

// number is the move's number among m's, counted from 1 as WITH
// ORDINALITY counts, added when it is new.
func (m *transitionMoves) number(fromRaw, toRaw, fromState, toState string) int32 {
	for i := range m.fromRaw {
		if m.fromRaw[i] == fromRaw && m.toRaw[i] == toRaw && m.fromState[i] == fromState && m.toState[i] == toState {
			return int32(i + 1)
		}
	}
	m.fromRaw, m.toRaw = append(m.fromRaw, fromRaw), append(m.toRaw, toRaw)
	m.fromState, m.toState = append(m.fromState, fromState), append(m.toState, toState)
	return int32(len(m.fromRaw))
}

// bigBatch is the number of transitions from which applyTransitions
// raises work_mem for its transaction.
const bigBatch = 10_000

// skipReasons says, for people, what changed on each obligation whose
// compare-and-set matched nothing.
func (s *Store) skipReasons(ctx context.Context, tx pgx.Tx, ts []reconcile.Transition, missed []string) (map[string]string, error) {
	type current struct {
		state string
		lease *time.Time
	}
	rows, err := tx.Query(ctx, s.sql().current, missed)
	if err != nil {
		return nil, fmt.Errorf("read skipped obligations: %w", err)
	}
	now := make(map[string]current, len(missed))
	var (
		id string
		c  current
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &c.state, &c.lease}, func() error {
		now[id] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read skipped obligations: %w", err)
	}
	reasons := make(map[string]string, len(missed))
	for _, t := range ts {
		c, found := now[t.ObligationID]
		from := t.FromRaw
		if from == "" {
			from = s.table.Raw(t.From)
		}
		switch {
		case !found:
			reasons[t.ObligationID] = "obligation not found"
		case c.state != from:
			reasons[t.ObligationID] = fmt.Sprintf("changed since read: state is now %s, was %s", c.state, from)
		case !timeOf(c.lease).Equal(t.FromLeaseExpiresAt):
			reasons[t.ObligationID] = fmt.Sprintf("changed since read: lease now expires %s, was %s",
				formatLease(timeOf(c.lease)), formatLease(t.FromLeaseExpiresAt))
		default:
			// Unreachable under REPEATABLE READ: the row matched what was
			// read, yet was not updated. Say so rather than guess.
			reasons[t.ObligationID] = "changed since read"
		}
	}
	return reasons, nil
}

func formatLease(t time.Time) string {
	if t.IsZero() {
		return "never (no lease)"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// storedFinding is a finding's row as Apply's snapshot saw it.
type storedFinding struct {
	f           reconcile.Finding
	status      string
	ackAt       *time.Time
	ackBy       *string
	ackReason   *string
	lastAlerted *time.Time
	unsent      bool // an alert about it is still waiting in the outbox
	// lastSent is when Slack last accepted an alert about it.
	lastSent *time.Time
}

func readFindings(ctx context.Context, tx pgx.Tx, fs []reconcile.Finding) (map[string]storedFinding, error) {
	fps := make([]string, len(fs))
	for i, f := range fs {
		fps[i] = f.Fingerprint
	}
	rows, err := tx.Query(ctx, `SELECT f.fingerprint, f.kind, f.severity, f.obligation_id, f.provider_ids,
		f.amount, f.currency, f.at_risk_amount, f.at_risk_currency, f.content_hash, f.detail, f.status,
		f.acknowledged_at, f.acknowledged_by, f.ack_reason, f.last_alerted_at,
		EXISTS (SELECT 1 FROM reconcile.outbox o WHERE o.fingerprint = f.fingerprint AND o.sent_at IS NULL),
		(SELECT max(o.sent_at) FROM reconcile.outbox o WHERE o.fingerprint = f.fingerprint),
		f.account, coalesce((SELECT a.name FROM reconcile.accounts a WHERE a.id = f.account), ''),
		coalesce(f.target, ''), f.paid_out
	FROM reconcile.findings f
	WHERE f.fingerprint = ANY($1::text[]) OR f.status = 'open'`, fps)
	if err != nil {
		return nil, fmt.Errorf("read findings: %w", err)
	}
	stored := map[string]storedFinding{}
	var (
		sf           storedFinding
		obligationID *string
	)
	_, err = pgx.ForEachRow(rows, []any{&sf.f.Fingerprint, &sf.f.Kind, &sf.f.Severity, &obligationID, &sf.f.ProviderIDs,
		&sf.f.Money.Amount, &sf.f.Money.Currency, &sf.f.AtRisk.Amount, &sf.f.AtRisk.Currency, &sf.f.ContentHash,
		&sf.f.Detail, &sf.status, &sf.ackAt, &sf.ackBy, &sf.ackReason, &sf.lastAlerted, &sf.unsent, &sf.lastSent,
		&sf.f.Account, &sf.f.AccountName, &sf.f.Target, &sf.f.PaidOut}, func() error {
		sf.f.ObligationID = stringOf(obligationID)
		stored[sf.f.Fingerprint] = sf
		sf = storedFinding{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read findings: %w", err)
	}
	return stored, nil
}

// findingPlan is what Apply will write about findings, decided in Go from
// one snapshot.
type findingPlan struct {
	upserts []findingRow
	// seen are the fingerprints of the open findings found again as they
	// are stored: only when they were last seen is written.
	seen    []string
	resolve []reconcile.Finding
	alerts  []outboxRow
	// by kind, for the summary
	newKinds, changedKinds, resolvedKinds map[reconcile.FindingKind]int
	atRisk                                []reconcile.Finding // the new and changed findings

	new, reopened, changed, repeated int
}

// findingRow is one row for the findings upsert: the finding and the
// columns Apply decides (acknowledgement, last alert).
type findingRow struct {
	f           reconcile.Finding
	ackAt       *time.Time
	ackBy       *string
	ackReason   *string
	lastAlerted *time.Time
}

// outboxRow is one alert to queue.
type outboxRow struct {
	fingerprint string // empty for a summary
	event       reconcile.AlertEvent
	changed     bool
	payload     string // JSON
}

// planFindings asks alerts.Decide what becomes of every finding this run
// found and of every open finding it did not, and gathers what to write
// because of it; the lifecycle's rules are Decide's alone.
func (s *Store) planFindings(in applyInput, stored map[string]storedFinding, now time.Time) (findingPlan, error) {
	p := findingPlan{
		newKinds:      map[reconcile.FindingKind]int{},
		changedKinds:  map[reconcile.FindingKind]int{},
		resolvedKinds: map[reconcile.FindingKind]int{},
	}
	var payloadErr error
	// record counts what was decided about f for Applied and the summary,
	// and queues its alert.
	record := func(f reconcile.Finding, a alerts.Action) {
		switch a {
		case alerts.ActionNone:
			return
		case alerts.ActionFire:
			p.new++
			p.newKinds[f.Kind]++
			p.atRisk = append(p.atRisk, f)
		case alerts.ActionChanged:
			p.changed++
			p.changedKinds[f.Kind]++
			p.atRisk = append(p.atRisk, f)
		case alerts.ActionRepeat:
			p.repeated++
		case alerts.ActionResolved:
			p.resolve = append(p.resolve, f)
			p.resolvedKinds[f.Kind]++
		}
		ev, changed := a.Event()
		payload, err := findingPayload(f)
		payloadErr = cmp.Or(payloadErr, err) // keep the first
		p.alerts = append(p.alerts, outboxRow{fingerprint: f.Fingerprint, event: ev, changed: changed, payload: payload})
	}
	found := make(map[string]bool, len(in.findings))
	for _, f := range in.findings {
		found[f.Fingerprint] = true
		old, known := stored[f.Fingerprint]
		var life *alerts.Stored
		if known {
			life = old.lifecycle()
		}
		d := alerts.Decide(life, &f, in.covers(f), s.opts.RepeatInterval, now)
		row := findingRow{f: f, ackAt: old.ackAt, ackBy: old.ackBy, ackReason: old.ackReason, lastAlerted: old.lastAlerted}
		if d.ClearAck {
			row.ackAt, row.ackBy, row.ackReason = nil, nil, nil
		}
		if d.Alerted {
			row.lastAlerted = &now
		}
		if known && old.holds(row) {
			p.seen = append(p.seen, f.Fingerprint)
		} else {
			p.upserts = append(p.upserts, row)
		}
		if d.Action == alerts.ActionFire && known {
			p.reopened++
		}
		record(f, d.Action)
	}
	// The stored findings this run did not find (readFindings reads every
	// open one), in fingerprint order so that their alerts are queued in
	// the same order every time.
	for _, fp := range slices.Sorted(maps.Keys(stored)) {
		if found[fp] {
			continue
		}
		old := stored[fp]
		record(old.f, alerts.Decide(old.lifecycle(), nil, in.covers(old.f), s.opts.RepeatInterval, now).Action)
	}
	return p, payloadErr
}

// holds reports whether the stored row is open and holds every value the
// upsert of r would write but when the finding was last seen: an
// unchanged finding found again, as most are every night. At ten thousand
// open findings the upsert of all of them cost 0.2 to 0.36 s and its
// arrays as long again to encode.
func (sf storedFinding) holds(r findingRow) bool {
	a, b := sf.f, r.f
	return sf.status == statusOpen && a.Kind == b.Kind && a.Severity == b.Severity && a.ObligationID == b.ObligationID &&
		slices.Equal(orEmpty(a.ProviderIDs), orEmpty(b.ProviderIDs)) && a.Money == b.Money && a.AtRisk == b.AtRisk &&
		a.ContentHash == b.ContentHash && a.Detail == b.Detail && a.Target == b.Target && a.PaidOut == b.PaidOut &&
		a.Account == b.Account && sameTime(sf.ackAt, r.ackAt) && sameString(sf.ackBy, r.ackBy) &&
		sameString(sf.ackReason, r.ackReason) && sameTime(sf.lastAlerted, r.lastAlerted)
}

func sameTime(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}

func sameString(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// lifecycle is what alerts.Decide reads of the stored row.
func (sf storedFinding) lifecycle() *alerts.Stored {
	return &alerts.Stored{
		Resolved:     sf.status == statusResolved,
		ContentHash:  sf.f.ContentHash,
		Acknowledged: sf.ackAt != nil,
		LastAlerted:  timeOf(sf.lastAlerted),
		LastSent:     timeOf(sf.lastSent),
		Unsent:       sf.unsent,
	}
}

// covers reports whether the run examined what the finding is about
// (docs/design.md, "Coverage"): its obligation, decided on with all its
// records read (or with some, for a finding about its outcome:
// FindingKind.AboutOutcome), or, for an orphan or a suspected duplicate
// (FindingKind.SettledByObject), one of its objects. Obligation ids are
// unique across accounts; a provider id is not, so the finding's objects
// are looked up in its own account (reconcile.AccountObject, as
// Settled.Objects holds them): settling ch_1 on the platform settles
// nothing of a connected account's ch_1.
//
// A shard's part (Part) covers only the findings it owns: another shard's
// are that shard's to settle, whatever this one examined.
func (in applyInput) covers(f reconcile.Finding) bool {
	if in.part != nil && !in.part.owns(f) {
		return false
	}
	if _, found := slices.BinarySearch(in.elsewhere, f.Fingerprint); found {
		return false
	}
	if f.ObligationID != "" {
		if _, ok := slices.BinarySearch(in.obligations, f.ObligationID); ok {
			return true
		}
		if _, ok := slices.BinarySearch(in.decided, f.ObligationID); ok && f.Kind.AboutOutcome() {
			return true
		}
		if !f.Kind.SettledByObject() {
			// Deciding on one of its objects decides nothing of an
			// obligation the run read only as context, or whose
			// records it did not all read.
			return false
		}
	}
	return slices.ContainsFunc(f.ProviderIDs, func(id string) bool {
		_, ok := slices.BinarySearch(in.objects, reconcile.AccountObject(f.Account, id))
		return ok
	})
}

func upsertFindings(ctx context.Context, tx pgx.Tx, rows []findingRow, runID string, now time.Time) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	var (
		fps, kinds, severities   = make([]string, n), make([]string, n), make([]string, n)
		obligationIDs, targets   = make([]*string, n), make([]*string, n)
		accounts                 = make([]string, n)
		paidOut                  = make([]bool, n)
		providerIDs, currencies  = make([]string, n), make([]string, n)
		amounts, atRiskAmounts   = make([]int64, n), make([]int64, n)
		atRiskCurrencies, hashes = make([]string, n), make([]string, n)
		details                  = make([]string, n)
		ackAts, lastAlerted      = make([]*time.Time, n), make([]*time.Time, n)
		ackBys, ackReasons       = make([]*string, n), make([]*string, n)
	)
	for i, r := range rows {
		f := r.f
		fps[i], kinds[i], severities[i] = f.Fingerprint, string(f.Kind), string(f.Severity)
		obligationIDs[i], targets[i], paidOut[i] = nullString(f.ObligationID), nullString(f.Target), f.PaidOut
		accounts[i] = f.Account
		// unnest would flatten a two-dimensional array, so each row's ids
		// travel as one JSON array.
		ids, err := json.Marshal(orEmpty(f.ProviderIDs))
		if err != nil {
			return fmt.Errorf("encode provider ids: %w", err)
		}
		providerIDs[i] = string(ids)
		amounts[i], currencies[i] = f.Money.Amount, f.Money.Currency
		atRiskAmounts[i], atRiskCurrencies[i] = f.AtRisk.Amount, f.AtRisk.Currency
		hashes[i], details[i] = f.ContentHash, f.Detail
		ackAts[i], ackBys[i], ackReasons[i], lastAlerted[i] = r.ackAt, r.ackBy, r.ackReason, r.lastAlerted
	}
	// Every column but first_seen_* is set from the values decided in Go;
	// under REPEATABLE READ a row changed since the snapshot (an ack, a
	// racing apply) fails the statement instead of being overwritten.
	_, err := tx.Exec(ctx, `INSERT INTO reconcile.findings (fingerprint, kind, severity, obligation_id, provider_ids,
		amount, currency, at_risk_amount, at_risk_currency, content_hash, detail, status,
		first_seen_run, first_seen_at, last_seen_run, last_seen_at, resolved_run, resolved_at,
		acknowledged_at, acknowledged_by, ack_reason, last_alerted_at, target, paid_out, account)
	SELECT u.fingerprint, u.kind, u.severity, u.obligation_id,
		ARRAY(SELECT e FROM jsonb_array_elements_text(u.provider_ids::jsonb) WITH ORDINALITY AS x(e, n) ORDER BY x.n),
		u.amount, u.currency, u.at_risk_amount, u.at_risk_currency, u.content_hash, u.detail, 'open',
		$16, $17, $16, $17, NULL, NULL, u.ack_at, u.ack_by, u.ack_reason, u.last_alerted, u.target, u.paid_out, u.account
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::text[], $8::int8[],
		$9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::text[], $14::text[], $15::timestamptz[], $18::text[], $19::bool[],
		$20::text[])
		AS u(fingerprint, kind, severity, obligation_id, provider_ids, amount, currency, at_risk_amount,
		at_risk_currency, content_hash, detail, ack_at, ack_by, ack_reason, last_alerted, target, paid_out, account)
	ON CONFLICT (fingerprint) DO UPDATE SET
		kind = EXCLUDED.kind, severity = EXCLUDED.severity, obligation_id = EXCLUDED.obligation_id,
		provider_ids = EXCLUDED.provider_ids, amount = EXCLUDED.amount, currency = EXCLUDED.currency,
		at_risk_amount = EXCLUDED.at_risk_amount, at_risk_currency = EXCLUDED.at_risk_currency,
		content_hash = EXCLUDED.content_hash, detail = EXCLUDED.detail, status = 'open',
		last_seen_run = EXCLUDED.last_seen_run, last_seen_at = EXCLUDED.last_seen_at,
		resolved_run = NULL, resolved_at = NULL,
		acknowledged_at = EXCLUDED.acknowledged_at, acknowledged_by = EXCLUDED.acknowledged_by,
		ack_reason = EXCLUDED.ack_reason, last_alerted_at = EXCLUDED.last_alerted_at, target = EXCLUDED.target,
		paid_out = EXCLUDED.paid_out, account = EXCLUDED.account`,
		fps, kinds, severities, obligationIDs, providerIDs, amounts, currencies, atRiskAmounts,
		atRiskCurrencies, hashes, details, ackAts, ackBys, ackReasons, lastAlerted, runID, now, targets, paidOut,
		accounts)
	if err != nil {
		return fmt.Errorf("write findings: %w", err)
	}
	return nil
}

// seeFindings writes when the open findings of fps were last seen; under
// REPEATABLE READ a row changed since the snapshot fails the statement,
// as it fails the upsert.
func seeFindings(ctx context.Context, tx pgx.Tx, fps []string, runID string, now time.Time) error {
	if len(fps) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, `UPDATE reconcile.findings SET last_seen_run = $2, last_seen_at = $3
	WHERE fingerprint = ANY($1::text[]) AND status = 'open'`, fps, runID, now)
	if err != nil {
		return fmt.Errorf("write findings: %w", err)
	}
	if int(tag.RowsAffected()) != len(fps) {
		return fmt.Errorf("write findings: %d of %d were still open", tag.RowsAffected(), len(fps))
	}
	return nil
}

func resolveFindings(ctx context.Context, tx pgx.Tx, fs []reconcile.Finding, runID string, now time.Time) error {
	if len(fs) == 0 {
		return nil
	}
	fps := make([]string, len(fs))
	for i, f := range fs {
		fps[i] = f.Fingerprint
	}
	tag, err := tx.Exec(ctx, `UPDATE reconcile.findings SET status = 'resolved', resolved_at = $2, resolved_run = $3
	WHERE fingerprint = ANY($1::text[]) AND status = 'open'`, fps, now, runID)
	if err != nil {
		return fmt.Errorf("resolve findings: %w", err)
	}
	if int(tag.RowsAffected()) != len(fps) {
		// Cannot happen under REPEATABLE READ (a concurrent change fails
		// the statement); refuse to queue resolved alerts for rows that
		// were not resolved.
		return fmt.Errorf("resolve findings: %d of %d were still open", tag.RowsAffected(), len(fps))
	}
	return nil
}

func summarize(ctx context.Context, tx pgx.Tx, in applyInput, p findingPlan, applied []reconcile.Transition) (reconcile.RunSummary, error) {
	sum := reconcile.RunSummary{
		RunID:  in.run.ID,
		Window: in.run.Window,
		Counts: in.run.Counts,
	}
	if len(p.newKinds) > 0 {
		sum.New = p.newKinds
	}
	if len(p.changedKinds) > 0 {
		sum.Changed = p.changedKinds
	}
	if len(p.resolvedKinds) > 0 {
		sum.Resolved = p.resolvedKinds
	}
	risk := make([]reconcile.Money, len(p.atRisk))
	for i, f := range p.atRisk {
		risk[i] = f.AtRisk
	}
	sum.AtRisk = reconcile.SumByCurrency(risk)
	if by := reconcile.SplitAtRisk(p.atRisk); !by.Empty() {
		sum.ByMeaning = &by
	}
	sum.Confirmed, sum.ConfirmedTotal = reconcile.Confirmed(applied)
	rows, err := tx.Query(ctx, `SELECT kind, count(*) FROM reconcile.findings WHERE status = 'open' GROUP BY kind`)
	if err != nil {
		return sum, fmt.Errorf("count open findings: %w", err)
	}
	var (
		kind  reconcile.FindingKind
		count int
	)
	open := map[reconcile.FindingKind]int{}
	if _, err := pgx.ForEachRow(rows, []any{&kind, &count}, func() error {
		open[kind] = count
		return nil
	}); err != nil {
		return sum, fmt.Errorf("count open findings: %w", err)
	}
	if len(open) > 0 {
		sum.Open = open
	}
	return sum, nil
}

// insertAlerts queues alerts in the order given, due at now.
func insertAlerts(ctx context.Context, tx pgx.Tx, alerts []outboxRow, runID string, now time.Time) error {
	if len(alerts) == 0 {
		return nil
	}
	n := len(alerts)
	fps, events, payloads, changed := make([]*string, n), make([]string, n), make([]string, n), make([]bool, n)
	for i, a := range alerts {
		fps[i], events[i], changed[i], payloads[i] = nullString(a.fingerprint), string(a.event), a.changed, a.payload
	}
	// ORDER BY the array position so that ids follow the order given.
	_, err := tx.Exec(ctx, `INSERT INTO reconcile.outbox (run_id, fingerprint, event, changed, payload, created_at, next_attempt_at)
	SELECT $1, u.fingerprint, u.event, u.changed, u.payload::jsonb, $2, $2
	FROM unnest($3::text[], $4::text[], $5::bool[], $6::text[]) WITH ORDINALITY AS u(fingerprint, event, changed, payload, n)
	ORDER BY u.n`, runID, now, fps, events, changed, payloads)
	if err != nil {
		return fmt.Errorf("queue alerts: %w", err)
	}
	return nil
}

func upsertRun(ctx context.Context, tx pgx.Tx, run reconcile.Run, status reconcile.RunStatus, findings, transitions, skipped int) error {
	retries, rateLimited := stripeColumns(run.Stripe)
	// A run applied twice adds up its transitions (each apply's are
	// distinct audit rows), so that the second does not hide the first.
	_, err := tx.Exec(ctx, `INSERT INTO reconcile.runs (id, trigger, window_from, window_to, started_at, finished_at,
		status, obligations, provider_objects, linked, findings, transitions, skipped, stripe_retries, stripe_rate_limited)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
	ON CONFLICT (id) DO UPDATE SET trigger = EXCLUDED.trigger, window_from = EXCLUDED.window_from,
		window_to = EXCLUDED.window_to, started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
		status = EXCLUDED.status, obligations = EXCLUDED.obligations,
		provider_objects = EXCLUDED.provider_objects, linked = EXCLUDED.linked, findings = EXCLUDED.findings,
		transitions = reconcile.runs.transitions + EXCLUDED.transitions, skipped = EXCLUDED.skipped,
		stripe_retries = EXCLUDED.stripe_retries, stripe_rate_limited = EXCLUDED.stripe_rate_limited,
		error = NULL`,
		run.ID, string(run.Trigger), run.Window.From, run.Window.To, run.Started, nullTime(run.Finished),
		string(status), run.Counts.Obligations, run.Counts.ProviderObjects, run.Counts.Linked,
		findings, transitions, skipped, retries, rateLimited)
	if err != nil {
		return fmt.Errorf("write run: %w", err)
	}
	return nil
}

// stripeColumns are a run's Stripe figures as the columns stripe_retries
// and stripe_rate_limited: NULL where they are not known.
func stripeColumns(st *reconcile.StripeStats) (retries, rateLimited *int) {
	if st == nil {
		return nil, nil
	}
	return &st.Retries, &st.RateLimited
}

// maxCause bounds the failure text kept for a failed run.
const maxCause = 4000

// RecordFailedRun records a run that could not read everything (or
// otherwise failed before Apply) as failed, with its cause. Nothing else is
// written: a partial reading proves nothing. A run already recorded as
// completed is not overwritten.
// Like Apply, it is fenced by the run lock of ctx (WithFence): a run
// whose lock was lost records nothing.
func (s *Store) RecordFailedRun(ctx context.Context, run reconcile.Run, cause string) error {
	if run.ID == "" {
		return errors.New("record failed run: run has no id")
	}
	if len(cause) > maxCause {
		cause = cause[:maxCause] + "…"
	}
	retries, rateLimited := stripeColumns(run.Stripe)
	var tag pgconn.CommandTag
	err := inFence(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		tag, err = tx.Exec(ctx, `INSERT INTO reconcile.runs (id, trigger, window_from, window_to, started_at,
			finished_at, status, obligations, provider_objects, linked, error, stripe_retries, stripe_rate_limited)
		VALUES ($1, $2, $3, $4, $5, $6, 'failed', $7, $8, $9, $10, $11, $12)
		ON CONFLICT (id) DO UPDATE SET finished_at = EXCLUDED.finished_at, error = EXCLUDED.error,
			stripe_retries = EXCLUDED.stripe_retries, stripe_rate_limited = EXCLUDED.stripe_rate_limited
		WHERE reconcile.runs.status = 'failed'`,
			run.ID, string(run.Trigger), run.Window.From, run.Window.To, run.Started, nullTime(run.Finished),
			run.Counts.Obligations, run.Counts.ProviderObjects, run.Counts.Linked, cause, retries, rateLimited)
		return err
	})
	if err != nil {
		return fmt.Errorf("record failed run %s: %w", run.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("record failed run %s: already recorded as completed", run.ID)
	}
	return nil
}

// findingJSON is a finding as the outbox payload stores it. A platform
// finding's payload names no account, as before accounts were read.
type findingJSON struct {
	Account      string                `json:"account,omitempty"`
	AccountName  string                `json:"account_name,omitempty"`
	Kind         reconcile.FindingKind `json:"kind"`
	Severity     reconcile.Severity    `json:"severity"`
	ObligationID string                `json:"obligation_id,omitempty"`
	ProviderIDs  []string              `json:"provider_ids"`
	Money        reconcile.Money       `json:"money"`
	AtRisk       reconcile.Money       `json:"at_risk"`
	Fingerprint  string                `json:"fingerprint"`
	ContentHash  string                `json:"content_hash"`
	Detail       string                `json:"detail"`
	Target       string                `json:"target,omitempty"`
	PaidOut      bool                  `json:"paid_out,omitempty"`
}

func findingPayload(f reconcile.Finding) (string, error) {
	b, err := json.Marshal(findingJSON{
		Account: f.Account, AccountName: f.AccountName, Kind: f.Kind, Severity: f.Severity, ObligationID: f.ObligationID,
		ProviderIDs: orEmpty(f.ProviderIDs), Money: f.Money, AtRisk: f.AtRisk,
		Fingerprint: f.Fingerprint, ContentHash: f.ContentHash, Detail: f.Detail, Target: f.Target,
		PaidOut: f.PaidOut,
	})
	if err != nil {
		return "", fmt.Errorf("encode finding %s: %w", f.Fingerprint, err)
	}
	return string(b), nil
}

// orEmpty makes a nil slice an empty one, so that JSON says [] not null.
func orEmpty(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}

func (j findingJSON) finding() reconcile.Finding {
	return reconcile.Finding{
		Account: j.Account, AccountName: j.AccountName, Kind: j.Kind, Severity: j.Severity, ObligationID: j.ObligationID, ProviderIDs: j.ProviderIDs,
		Money: j.Money, AtRisk: j.AtRisk, Fingerprint: j.Fingerprint, ContentHash: j.ContentHash, Detail: j.Detail,
		Target: j.Target, PaidOut: j.PaidOut,
	}
}
