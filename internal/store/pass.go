package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
)

// A pass run as River jobs is one run (docs/design.md, "Passes as jobs"):
// BeginPass writes its row, running; each account's match-and-apply job
// applies that account's conclusions with ApplyPart, in a transaction of
// its own; FinishPass, the last job, completes the row with every part's
// counts, queues the summary and releases the parts' alerts in the order
// a one-process pass queues them; FailPass ends a pass that cannot
// finish. Every step takes a function run last in its transaction (then),
// where the job completes itself: a step and its job's completion commit
// or roll back together.

// ErrPassRunning is returned by BeginPass while another pass is running:
// passes run one at a time, as one-process runs do.
var ErrPassRunning = errors.New("another pass is running")

// passLockKey serialises BeginPass's check for a running pass.
const passLockKey int64 = 0x7265636f_70617373 // "recopass"

// passPart is one account's share of a pass run as jobs.
type passPart struct {
	account string
	then    func(ctx context.Context, tx pgx.Tx) error
}

// partSummary is what one part adds to its run's summary, as
// pass_parts.summary keeps it.
type partSummary struct {
	New      map[reconcile.FindingKind]int `json:"new,omitempty"`
	Changed  map[reconcile.FindingKind]int `json:"changed,omitempty"`
	Resolved map[reconcile.FindingKind]int `json:"resolved,omitempty"`
	// AtRisk are the new and changed findings' money and what it means.
	AtRisk []partRisk `json:"at_risk,omitempty"`
	// Confirmed are the unknown outcomes confirmed and marked PAID, by
	// obligation, with their money.
	Confirmed []partConfirmed `json:"confirmed,omitempty"`
}

type partConfirmed struct {
	ObligationID string          `json:"obligation_id"`
	Money        reconcile.Money `json:"money"`
}

type partRisk struct {
	Kind    reconcile.FindingKind `json:"kind"`
	PaidOut bool                  `json:"paid_out,omitempty"`
	AtRisk  reconcile.Money       `json:"at_risk"`
}

// PassAccount is one account a pass run as jobs reads, and the coverage
// its fetches read.
type PassAccount struct {
	Account reconcile.Account
	Cover   reconcile.Window
}

// BeginPass writes the row of a pass run as jobs, running, and the
// accounts it reads, in tx: the transaction that inserts the pass's first
// jobs. It fails with ErrPassRunning while another pass is running. A
// pass still running none of whose jobs is left (River's rescuer
// discarded a job whose worker died on its last attempt, and no worker
// was left to fail the pass) is failed first, as FailPass fails it, at
// the new pass's start.
func (s *Store) BeginPass(ctx context.Context, tx pgx.Tx, run reconcile.Run, accounts []PassAccount) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, passLockKey); err != nil {
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
	}
	rows, err := tx.Query(ctx, `SELECT r.id, EXISTS (SELECT 1 FROM reconcile.river_job j
			WHERE j.args @> jsonb_build_object('pass', jsonb_build_object('id', r.id))
			AND j.state NOT IN ('completed', 'discarded', 'cancelled'))
		FROM reconcile.runs r WHERE r.status = 'running' ORDER BY r.id`)
	if err != nil {
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
	}
	type runningRun struct {
		id   string
		live bool
	}
	var (
		others []runningRun
		o      runningRun
	)
	_, err = pgx.ForEachRow(rows, []any{&o.id, &o.live}, func() error {
		others = append(others, o)
		return nil
	})
	if err != nil {
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
	}
	for _, o := range others {
		if o.live {
			return fmt.Errorf("begin pass %s: %w (%s)", run.ID, ErrPassRunning, o.id)
		}
	}
	for _, o := range others {
		if err := failPass(ctx, tx, o.id, "no job of the pass is left: a job was discarded after its last attempt", run.Started); err != nil {
			return fmt.Errorf("begin pass %s: fail pass %s: %w", run.ID, o.id, err)
		}
		s.opts.Logger.Warn("a pass none of whose jobs is left failed", slog.String("run_id", o.id))
	}
	_, err = tx.Exec(ctx, `INSERT INTO reconcile.runs (id, trigger, window_from, window_to, started_at, status)
		VALUES ($1, $2, $3, $4, $5, 'running')`, run.ID, string(run.Trigger), run.Window.From, run.Window.To, run.Started)
	if err != nil {
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
	}
	for _, a := range accounts {
		if _, err := tx.Exec(ctx, `INSERT INTO reconcile.pass_accounts (run_id, account, name, cover_from, cover_to)
			VALUES ($1, $2, $3, $4, $5)`, run.ID, a.Account.ID, a.Account.Name, a.Cover.From, a.Cover.To); err != nil {
			return fmt.Errorf("begin pass %s: account %q: %w", run.ID, a.Account.ID, err)
		}
	}
	return nil
}

// PassAccounts are the accounts pass runID reads, by id, as BeginPass
// wrote them, read in tx (the last fetch job's).
func (s *Store) PassAccounts(ctx context.Context, tx pgx.Tx, runID string) ([]PassAccount, error) {
	rows, err := tx.Query(ctx, `SELECT account, name, cover_from, cover_to FROM reconcile.pass_accounts WHERE run_id = $1 ORDER BY account`, runID)
	if err != nil {
		return nil, fmt.Errorf("read the accounts of pass %s: %w", runID, err)
	}
	var (
		as []PassAccount
		a  PassAccount
	)
	_, err = pgx.ForEachRow(rows, []any{&a.Account.ID, &a.Account.Name, &a.Cover.From, &a.Cover.To}, func() error {
		a.Cover.From, a.Cover.To = a.Cover.From.UTC(), a.Cover.To.UTC()
		as = append(as, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the accounts of pass %s: %w", runID, err)
	}
	return as, nil
}

// ApplyPart applies one account's conclusions of the running pass run as
// Apply applies a whole run's, in one fenced transaction at REPEATABLE
// READ, with these differences: the alerts it queues are held until
// FinishPass, what the summary adds up from it is kept for FinishPass
// instead of a summary of its own, and the run row is left to FinishPass.
// then runs last in the transaction. Each account of a pass is applied
// once: a second ApplyPart of the same account fails.
func (s *Store) ApplyPart(ctx context.Context, run reconcile.Run, account string, res reconcile.Conclusions, now time.Time,
	then func(ctx context.Context, tx pgx.Tx) error) (Applied, error) {
	return s.applyWith(ctx, run, res, now, &passPart{account: account, then: then})
}

// stagePart keeps what a part's apply adds to its pass: the summary's
// figures and counts in pass_parts, the alerts held in the outbox.
func (s *Store) stagePart(ctx context.Context, tx pgx.Tx, in applyInput, p findingPlan, out *Applied, now time.Time) error {
	var sum partSummary
	if len(p.newKinds) > 0 {
		sum.New = p.newKinds
	}
	if len(p.changedKinds) > 0 {
		sum.Changed = p.changedKinds
	}
	if len(p.resolvedKinds) > 0 {
		sum.Resolved = p.resolvedKinds
	}
	for _, f := range p.atRisk {
		sum.AtRisk = append(sum.AtRisk, partRisk{Kind: f.Kind, PaidOut: f.PaidOut, AtRisk: f.AtRisk})
	}
	for _, t := range out.Transitions {
		if t.From == reconcile.ConfirmationUnknown && t.To == reconcile.Paid {
			sum.Confirmed = append(sum.Confirmed, partConfirmed{ObligationID: t.ObligationID, Money: t.Money})
		}
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return fmt.Errorf("encode the part's summary: %w", err)
	}
	c := in.run.Counts
	_, err = tx.Exec(ctx, `INSERT INTO reconcile.pass_parts (run_id, account, obligations, provider_objects, linked,
		findings, transitions, skipped, summary) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		in.run.ID, in.part.account, c.Obligations, c.ProviderObjects, c.Linked,
		len(in.findings), len(out.Transitions), len(out.Skipped), string(b))
	if err != nil {
		return fmt.Errorf("keep the part of account %q: %w", in.part.account, err)
	}
	if err := insertAlerts(ctx, tx, p.alerts, in.run.ID, now, true); err != nil {
		return err
	}
	out.Alerts = len(p.alerts)
	if in.part.then != nil {
		return in.part.then(ctx, tx)
	}
	return nil
}

// FinishPass completes the running pass runID as one run: its row gets
// every part's counts, completed at finished; its summary, when anything
// is new, changed, resolved or confirmed, is queued first; and the parts'
// held alerts are queued after it in the order a one-process pass queues
// them (the findings it found, most severe first by
// reconcile.CompareFindings, then those it resolved, by fingerprint), due
// at once. A pass no longer running (finished or failed already) is left
// as it is, and done is false. then runs last in the transaction, either
// way.
func (s *Store) FinishPass(ctx context.Context, runID string, finished time.Time,
	then func(ctx context.Context, tx pgx.Tx) error) (sum reconcile.RunSummary, done bool, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		run, running, err := runningPass(ctx, tx, runID)
		if err != nil || !running {
			if err == nil && then != nil {
				err = then(ctx, tx)
			}
			return err
		}
		run.Finished = finished
		parts, err := readParts(ctx, tx, runID)
		if err != nil {
			return err
		}
		var (
			p                              = findingPlan{newKinds: map[reconcile.FindingKind]int{}, changedKinds: map[reconcile.FindingKind]int{}, resolvedKinds: map[reconcile.FindingKind]int{}}
			confirmed                      []reconcile.Transition
			findings, transitions, skipped int
		)
		for _, pt := range parts {
			run.Counts.Obligations += pt.counts.Obligations
			run.Counts.ProviderObjects += pt.counts.ProviderObjects
			run.Counts.Linked += pt.counts.Linked
			findings, transitions, skipped = findings+pt.findings, transitions+pt.transitions, skipped+pt.skipped
			for k, n := range pt.sum.New {
				p.newKinds[k] += n
			}
			for k, n := range pt.sum.Changed {
				p.changedKinds[k] += n
			}
			for k, n := range pt.sum.Resolved {
				p.resolvedKinds[k] += n
			}
			for _, r := range pt.sum.AtRisk {
				p.atRisk = append(p.atRisk, reconcile.Finding{Kind: r.Kind, PaidOut: r.PaidOut, AtRisk: r.AtRisk})
			}
			for _, c := range pt.sum.Confirmed {
				confirmed = append(confirmed, reconcile.Transition{ObligationID: c.ObligationID, From: reconcile.ConfirmationUnknown,
					To: reconcile.Paid, Money: c.Money})
			}
		}
		if sum, err = summarize(ctx, tx, applyInput{run: run}, p, confirmed); err != nil {
			return err
		}
		rows, err := heldAlerts(ctx, tx, runID)
		if err != nil {
			return err
		}
		if len(sum.New)+len(sum.Changed)+len(sum.Resolved)+sum.Confirmed > 0 {
			payload, err := json.Marshal(sum)
			if err != nil {
				return fmt.Errorf("encode run summary: %w", err)
			}
			rows = slices.Insert(rows, 0, outboxRow{event: reconcile.AlertSummary, payload: string(payload)})
		}
		if _, err := tx.Exec(ctx, `DELETE FROM reconcile.outbox WHERE run_id = $1 AND sent_at IS NULL AND next_attempt_at = 'infinity'`, runID); err != nil {
			return fmt.Errorf("finish pass %s: %w", runID, err)
		}
		if err := insertAlerts(ctx, tx, rows, runID, run.Started, false); err != nil {
			return err
		}
		if err := upsertRun(ctx, tx, run, reconcile.RunCompleted, findings, transitions, skipped); err != nil {
			return err
		}
		done = true
		if then != nil {
			return then(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return reconcile.RunSummary{}, false, fmt.Errorf("finish pass %s: %w", runID, err)
	}
	if done {
		s.opts.Logger.Info("pass finished", slog.String("run_id", runID))
	}
	return sum, done, nil
}

// FailPass ends the running pass runID as failed, with its cause: nothing
// more of it is applied. The alerts its applied parts queued are released,
// due at once, since their findings are stored: a finding applied is
// never left untold; the run has no summary. A pass no longer running is
// left as it is. then runs last in the transaction.
func (s *Store) FailPass(ctx context.Context, runID, cause string, finished time.Time, then func(ctx context.Context, tx pgx.Tx) error) error {
	if len(cause) > maxCause {
		cause = cause[:maxCause] + "…"
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, running, err := runningPass(ctx, tx, runID)
		if err != nil {
			return err
		}
		if running {
			if err := failPass(ctx, tx, runID, cause, finished); err != nil {
				return err
			}
		}
		if then != nil {
			return then(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fail pass %s: %w", runID, err)
	}
	return nil
}

// failPass fails the running pass runID in tx: its row failed with its
// cause, its applied parts' held alerts released, due at finished.
func failPass(ctx context.Context, tx pgx.Tx, runID, cause string, finished time.Time) error {
	if len(cause) > maxCause {
		cause = cause[:maxCause] + "…"
	}
	if _, err := tx.Exec(ctx, `UPDATE reconcile.runs SET status = 'failed', error = $2, finished_at = $3 WHERE id = $1`,
		runID, cause, finished); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE reconcile.outbox SET next_attempt_at = $2
		WHERE run_id = $1 AND sent_at IS NULL AND next_attempt_at = 'infinity'`, runID, finished)
	return err
}

// runningPass reads the row of pass runID, locked for the transaction,
// and whether it is still running.
func runningPass(ctx context.Context, tx pgx.Tx, runID string) (reconcile.Run, bool, error) {
	return readPass(ctx, tx, runID, " FOR UPDATE")
}

// readPass reads the row of pass runID, with lock its locking clause.
func readPass(ctx context.Context, tx pgx.Tx, runID, lock string) (reconcile.Run, bool, error) {
	run := reconcile.Run{ID: runID}
	var trigger, status string
	err := tx.QueryRow(ctx, `SELECT trigger, window_from, window_to, started_at, status FROM reconcile.runs WHERE id = $1`+lock,
		runID).Scan(&trigger, &run.Window.From, &run.Window.To, &run.Started, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return run, false, fmt.Errorf("no pass %s", runID)
	}
	if err != nil {
		return run, false, err
	}
	run.Trigger, run.Status = reconcile.Trigger(trigger), reconcile.RunStatus(status)
	run.Window.From, run.Window.To, run.Started = run.Window.From.UTC(), run.Window.To.UTC(), run.Started.UTC()
	return run, run.Status == reconcile.RunRunning, nil
}

type storedPart struct {
	counts                         reconcile.Counts
	findings, transitions, skipped int
	sum                            partSummary
}

func readParts(ctx context.Context, tx pgx.Tx, runID string) ([]storedPart, error) {
	rows, err := tx.Query(ctx, `SELECT obligations, provider_objects, linked, findings, transitions, skipped, summary
		FROM reconcile.pass_parts WHERE run_id = $1 ORDER BY account`, runID)
	if err != nil {
		return nil, fmt.Errorf("read the pass's parts: %w", err)
	}
	var (
		parts []storedPart
		p     storedPart
		raw   []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&p.counts.Obligations, &p.counts.ProviderObjects, &p.counts.Linked,
		&p.findings, &p.transitions, &p.skipped, &raw}, func() error {
		if err := json.Unmarshal(raw, &p.sum); err != nil {
			return fmt.Errorf("decode a part's summary: %w", err)
		}
		parts = append(parts, p)
		p = storedPart{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the pass's parts: %w", err)
	}
	return parts, nil
}

// heldAlerts are the alerts the parts of pass runID queued and hold, in
// the order one Apply of the whole pass queues them: those about findings
// the pass found, by reconcile.CompareFindings, then its resolutions, by
// fingerprint (the ids break ties between a finding's own alerts).
func heldAlerts(ctx context.Context, tx pgx.Tx, runID string) ([]outboxRow, error) {
	rows, err := tx.Query(ctx, `SELECT id, fingerprint, event, changed, payload FROM reconcile.outbox
		WHERE run_id = $1 AND sent_at IS NULL AND next_attempt_at = 'infinity' ORDER BY id`, runID)
	if err != nil {
		return nil, fmt.Errorf("read the pass's alerts: %w", err)
	}
	type held struct {
		id  int64
		row outboxRow
		f   reconcile.Finding
	}
	var (
		hs      []held
		h       held
		fp      *string
		event   string
		payload []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&h.id, &fp, &event, &h.row.changed, &payload}, func() error {
		var j findingJSON
		if err := json.Unmarshal(payload, &j); err != nil {
			return fmt.Errorf("decode alert %d: %w", h.id, err)
		}
		h.row.fingerprint, h.row.event, h.row.payload, h.f = stringOf(fp), reconcile.AlertEvent(event), string(payload), j.finding()
		hs = append(hs, h)
		h = held{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the pass's alerts: %w", err)
	}
	resolved := func(h held) bool { return h.row.event == reconcile.AlertResolved }
	slices.SortStableFunc(hs, func(a, b held) int {
		ra, rb := resolved(a), resolved(b)
		switch {
		case ra != rb:
			if ra {
				return 1
			}
			return -1
		case ra:
			return cmp.Or(strings.Compare(a.row.fingerprint, b.row.fingerprint), cmp.Compare(a.id, b.id))
		}
		return cmp.Or(reconcile.CompareFindings(a.f, b.f), cmp.Compare(a.id, b.id))
	})
	out := make([]outboxRow, len(hs))
	for i, h := range hs {
		out[i] = h.row
	}
	return out, nil
}

// PassResult is what a pass run as jobs concluded, as the store keeps it:
// its run row, the findings it found (last seen by it), most severe
// first, its transitions (the audit, with the money of the unknown
// outcomes it confirmed) and each account's counts. It serves the report
// of `run --enqueue`, which reads the same as a one-process pass's.
type PassResult struct {
	Run reconcile.Run
	// Drained is set once the pass's drain job (docs/design.md, "Passes
	// as jobs") is no longer waiting or running.
	Drained     bool
	Error       string
	Findings    []reconcile.Finding
	Transitions []reconcile.Transition
	Accounts    []PassAccountResult
}

// PassAccountResult is one account's share of a pass.
type PassAccountResult struct {
	Account  reconcile.Account
	Counts   reconcile.Counts
	Findings int
}

// PassResult reads the pass runID as it stands (Run.Status says whether
// it ended; Drained whether its drain job is done too).
func (s *Store) PassResult(ctx context.Context, runID string) (PassResult, error) {
	var r PassResult
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		run, _, err := readPass(ctx, tx, runID, "")
		if err != nil {
			return err
		}
		r.Run = run
		var finished *time.Time
		var cause *string
		if err := tx.QueryRow(ctx, `SELECT finished_at, obligations, provider_objects, linked, error FROM reconcile.runs WHERE id = $1`, runID).
			Scan(&finished, &r.Run.Counts.Obligations, &r.Run.Counts.ProviderObjects, &r.Run.Counts.Linked, &cause); err != nil {
			return err
		}
		r.Run.Finished, r.Error = timeOf(finished).UTC(), stringOf(cause)
		if r.Run.Status != reconcile.RunCompleted {
			return nil
		}
		if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM reconcile.river_job WHERE kind = 'reconcile_drain'
			AND args->'pass'->>'id' = $1 AND state NOT IN ('completed', 'discarded', 'cancelled'))`, runID).Scan(&r.Drained); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+findingColumns+` FROM reconcile.findings WHERE last_seen_run = $1`, runID)
		if err != nil {
			return err
		}
		recs, err := pgx.CollectRows(rows, scanFinding)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			r.Findings = append(r.Findings, rec.Finding)
		}
		slices.SortFunc(r.Findings, reconcile.CompareFindings)
		confirmed := map[string]reconcile.Money{}
		parts, err := tx.Query(ctx, `SELECT p.account, coalesce(a.name, ''), p.obligations, p.provider_objects, p.linked, p.findings, p.summary
			FROM reconcile.pass_parts p LEFT JOIN reconcile.pass_accounts a USING (run_id, account)
			WHERE p.run_id = $1 ORDER BY p.account`, runID)
		if err != nil {
			return err
		}
		var (
			a   PassAccountResult
			raw []byte
		)
		_, err = pgx.ForEachRow(parts, []any{&a.Account.ID, &a.Account.Name, &a.Counts.Obligations, &a.Counts.ProviderObjects,
			&a.Counts.Linked, &a.Findings, &raw}, func() error {
			var sum partSummary
			if err := json.Unmarshal(raw, &sum); err != nil {
				return fmt.Errorf("decode a part's summary: %w", err)
			}
			for _, c := range sum.Confirmed {
				confirmed[c.ObligationID] = c.Money
			}
			r.Accounts = append(r.Accounts, a)
			return nil
		})
		if err != nil {
			return err
		}
		trs, err := tx.Query(ctx, `SELECT obligation_id, from_state, to_state, coalesce(provider_id, '') FROM reconcile.transitions
			WHERE run_id = $1 ORDER BY obligation_id`, runID)
		if err != nil {
			return err
		}
		var t reconcile.Transition
		_, err = pgx.ForEachRow(trs, []any{&t.ObligationID, &t.From, &t.To, &t.ProviderID}, func() error {
			t.Money = confirmed[t.ObligationID]
			r.Transitions = append(r.Transitions, t)
			return nil
		})
		return err
	})
	if err != nil {
		return PassResult{}, fmt.Errorf("read pass %s: %w", runID, err)
	}
	return r, nil
}
