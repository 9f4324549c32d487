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
// counts, queues the summary and then the parts' alerts in the order a
// one-process pass queues them; FailPass ends a pass that cannot finish,
// queueing the alerts of the parts it applied. Every step takes a function run last in its transaction (then),
// where the job completes itself: a step and its job's completion commit
// or roll back together.

// ErrPassEnded is returned (wrapped) by ApplyPart for a pass no longer
// running: it failed, and nothing more of it is applied.
var ErrPassEnded = errors.New("the pass is no longer running")

// stillRunning holds pass runID's row FOR SHARE until tx ends, so that
// FailPass (FOR UPDATE) waits for this transaction or this transaction
// for it, and fails with ErrPassEnded unless the pass is running.
func stillRunning(ctx context.Context, tx pgx.Tx, runID string) error {
	var status string
	err := tx.QueryRow(ctx, `SELECT status FROM reconcile.runs WHERE id = $1 FOR SHARE`, runID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pass %s: no such run: %w", runID, ErrPassEnded)
	}
	if err != nil {
		return err
	}
	if status != string(reconcile.RunRunning) {
		return fmt.Errorf("pass %s is %s: %w", runID, status, ErrPassEnded)
	}
	return nil
}

// ErrPassRunning is returned by BeginPass while another pass is running:
// passes run one at a time, as one-process runs do.
var ErrPassRunning = errors.New("another pass is running")

// passLockKey serialises BeginPass's check for a running pass.
const passLockKey int64 = 0x7265636f_70617373 // "recopass"

// Part names one part of a pass run as jobs (docs/design.md, "Passes as
// jobs"): one Stripe account's share of it, or one shard of that share.
// Shards 0 or 1 is the account unsharded, one part (Shard 0); Shards > 1
// splits the account into that many parts, this one Shard, in
// [0, Shards): the findings owned by reconcile.FindingShard(f, Shards) ==
// Shard are this part's to find and to settle, the others' are not.
type Part struct {
	Account       string
	Shard, Shards int
}

// shards is the number of shards p is one of: 1 for an unsharded part.
func (p Part) shards() int { return max(p.Shards, 1) }

// check refuses a part whose shard is not one of its shards.
func (p Part) check() error {
	if p.Shards < 0 || p.Shard < 0 || p.Shard >= p.shards() {
		return fmt.Errorf("part of account %q: shard %d of %d is not a shard", p.Account, p.Shard, p.Shards)
	}
	return nil
}

// owns reports whether finding f is this part's: every finding is an
// unsharded part's; a shard's are those reconcile.FindingShard gives it.
func (p Part) owns(f reconcile.Finding) bool {
	return p.shards() == 1 || reconcile.FindingShard(f, p.shards()) == p.Shard
}

// passPart is one part of a pass run as jobs, as ApplyPart applies it.
type passPart struct {
	Part
	report PartReport
	then   func(ctx context.Context, tx pgx.Tx) error
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
	// Alerts are the alerts the part decided, in its order.
	Alerts []partAlert `json:"alerts,omitempty"`
	// Report is what the part read, and the findings it found.
	Report PartReport `json:"report"`
}

// partAlert is an alert a part decided, kept with the part until the
// pass's end queues it in the outbox.
type partAlert struct {
	Seq         int                  `json:"seq"`
	Fingerprint string               `json:"fingerprint"`
	Event       reconcile.AlertEvent `json:"event"`
	Changed     bool                 `json:"changed,omitempty"`
	Payload     json.RawMessage      `json:"payload"`
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

// RunningPass is the id of the pass run as jobs that is running, if any:
// a one-process pass does not run beside it (docs/design.md, "Passes as
// jobs").
//
// A running pass none of whose jobs is left to run is failed first
// (reapPasses).
func (s *Store) RunningPass(ctx context.Context) (string, bool, error) {
	var id string
	found := false
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := reapPasses(ctx, tx, time.Now().UTC()); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT id FROM reconcile.runs WHERE status = 'running' ORDER BY started_at LIMIT 1`).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return "", false, fmt.Errorf("look for a running pass: %w", err)
	}
	return id, found, nil
}

// PassAccount is one account a pass run as jobs reads, and the coverage
// its fetches read.
type PassAccount struct {
	Account reconcile.Account
	Cover   reconcile.Window
}

// BeginPass writes the row of a pass run as jobs, running, and the
// accounts it reads, in tx: the transaction that inserts the pass's first
// jobs. It fails with ErrPassRunning while another pass is running.
func (s *Store) BeginPass(ctx context.Context, tx pgx.Tx, run reconcile.Run, accounts []PassAccount) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, passLockKey); err != nil {
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
	}
	// Not while a one-process pass (or the last pass's drain) holds the
	// platform's run lock: a pass as jobs never interleaves with one.
	var free bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, runLockKey).Scan(&free); err != nil {
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
	}
	if !free {
		return fmt.Errorf("begin pass %s: %w (a one-process run, or the last pass's drain, holds the platform's run lock)", run.ID, ErrLocked)
	}
	if err := reapPasses(ctx, tx, run.Started); err != nil {
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
	}
	var other string
	err := tx.QueryRow(ctx, `SELECT id FROM reconcile.runs WHERE status = 'running' LIMIT 1`).Scan(&other)
	switch {
	case err == nil:
		return fmt.Errorf("begin pass %s: %w (%s)", run.ID, ErrPassRunning, other)
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("begin pass %s: %w", run.ID, err)
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

// PartReport is what one part read, for the pass's report: its coverage
// and key evidence, the obligations it read only to link or decided on
// without all their records, and the unmapped states it met.
type PartReport struct {
	Covered    reconcile.Window `json:"covered"`
	EventsFrom time.Time        `json:"events_from"`
	Context    int              `json:"context,omitempty"`
	Partial    int              `json:"partial,omitempty"`
	Unmapped   map[string]int   `json:"unmapped,omitempty"`
	Skipped    []partSkipped    `json:"skipped,omitempty"`
	Found      []string         `json:"found,omitempty"`
}

type partSkipped struct {
	ObligationID string          `json:"obligation_id"`
	From         reconcile.State `json:"from"`
	Reason       string          `json:"reason"`
}

// ApplyPart applies one part's conclusions of the running pass run (one
// account's, or one shard of it: Part) as Apply applies a whole run's, in
// one fenced transaction at REPEATABLE READ, with these differences: the
// alerts it decides are kept with the part until FinishPass queues them,
// what the summary adds up from it is kept for FinishPass instead of a
// summary of its own, and the run row is left to FinishPass. then runs
// last in the transaction. Each part of a pass is applied once: a second
// ApplyPart of the same account and shard fails.
//
// A shard (part.Shards > 1) settles only the stored findings it owns
// (Part): another shard's open finding is left as it stands, whatever
// res.Settled names, since that shard decides it. The findings res holds
// must all be the shard's own (the runner keeps only those); one that is
// not is refused, and nothing is applied.
func (s *Store) ApplyPart(ctx context.Context, run reconcile.Run, part Part, res reconcile.Conclusions, rep PartReport, now time.Time,
	then func(ctx context.Context, tx pgx.Tx) error) (Applied, error) {
	if err := part.check(); err != nil {
		return Applied{}, fmt.Errorf("apply run %s: %w", run.ID, err)
	}
	for _, f := range res.Findings {
		if !part.owns(f) {
			return Applied{}, fmt.Errorf("apply run %s: finding %s belongs to shard %d of %d, not to the part's shard %d",
				run.ID, f.Fingerprint, reconcile.FindingShard(f, part.shards()), part.shards(), part.Shard)
		}
	}
	return s.applyWith(ctx, run, res, now, &passPart{Part: part, report: rep, then: then})
}

// stagePart keeps what a part's apply adds to its pass in pass_parts:
// the summary's figures, its alerts and its counts.
func (s *Store) stagePart(ctx context.Context, tx pgx.Tx, in applyInput, p findingPlan, out *Applied) error {
	// Empty maps are left out of the JSON as nil ones are.
	sum := partSummary{New: p.newKinds, Changed: p.changedKinds, Resolved: p.resolvedKinds}
	for _, f := range p.atRisk {
		sum.AtRisk = append(sum.AtRisk, partRisk{Kind: f.Kind, PaidOut: f.PaidOut, AtRisk: f.AtRisk})
	}
	for _, t := range out.Transitions {
		if t.From == reconcile.ConfirmationUnknown && t.To == reconcile.Paid {
			sum.Confirmed = append(sum.Confirmed, partConfirmed{ObligationID: t.ObligationID, Money: t.Money})
		}
	}
	sum.Report = in.part.report
	for _, f := range in.findings {
		sum.Report.Found = append(sum.Report.Found, f.Fingerprint)
	}
	for _, sk := range out.Skipped {
		sum.Report.Skipped = append(sum.Report.Skipped, partSkipped{ObligationID: sk.Transition.ObligationID, From: sk.Transition.From, Reason: sk.Reason})
	}
	for i, a := range p.alerts {
		sum.Alerts = append(sum.Alerts, partAlert{Seq: i, Fingerprint: a.fingerprint, Event: a.event, Changed: a.changed,
			Payload: json.RawMessage(a.payload)})
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return fmt.Errorf("encode the part's summary: %w", err)
	}
	c := in.run.Counts
	_, err = tx.Exec(ctx, `INSERT INTO reconcile.pass_parts (run_id, account, shard, shards, obligations, provider_objects, linked,
		findings, transitions, skipped, summary) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		in.run.ID, in.part.Account, in.part.Shard, in.part.shards(), c.Obligations, c.ProviderObjects, c.Linked,
		len(in.findings), len(out.Transitions), len(out.Skipped), string(b))
	if err != nil {
		return fmt.Errorf("keep the part of account %q, shard %d of %d: %w", in.part.Account, in.part.Shard, in.part.shards(), err)
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
// alerts are queued after it in the order a one-process pass queues
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
		rows, err := passAlerts(parts)
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
		if err := insertAlerts(ctx, tx, rows, runID, run.Started); err != nil {
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
// more of it is applied. The alerts its applied parts decided are queued,
// due at once, since their findings are stored: a finding applied is
// never left untold; the run has no summary. A pass no longer running is
// left as it is. then runs last in the transaction.
func (s *Store) FailPass(ctx context.Context, runID, cause string, finished time.Time, then func(ctx context.Context, tx pgx.Tx) error) error {
	if len(cause) > maxCause {
		cause = cause[:maxCause] + "…"
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := failPass(ctx, tx, runID, cause, finished); err != nil {
			return err
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

// failPass is FailPass's work, in tx.
func failPass(ctx context.Context, tx pgx.Tx, runID, cause string, finished time.Time) error {
	_, running, err := runningPass(ctx, tx, runID)
	if err != nil || !running {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE reconcile.runs SET status = 'failed', error = $2, finished_at = $3 WHERE id = $1`,
		runID, cause, finished); err != nil {
		return err
	}
	parts, err := readParts(ctx, tx, runID)
	if err != nil {
		return err
	}
	rows, err := passAlerts(parts)
	if err != nil {
		return err
	}
	return insertAlerts(ctx, tx, rows, runID, finished)
}

// reapPasses fails, in tx, every running pass none of whose jobs is left
// to run: River discarded or cancelled the last of them without its
// worker failing the pass (a job whose worker died on its last attempt
// is discarded by the rescuer unworked). Every stage of a live pass has a
// job waiting or running, since each stage's jobs are inserted in the
// transaction that completes the last of the stage before, so such a
// pass can never end otherwise (docs/design.md, "Passes as jobs").
func reapPasses(ctx context.Context, tx pgx.Tx, now time.Time) error {
	rows, err := tx.Query(ctx, `SELECT r.id FROM reconcile.runs r WHERE r.status = 'running'
		AND NOT EXISTS (SELECT 1 FROM reconcile.river_job j WHERE j.args->'pass'->>'id' = r.id
			AND j.state NOT IN ('completed', 'discarded', 'cancelled'))`)
	if err != nil {
		return fmt.Errorf("look for passes whose jobs all ended: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("look for passes whose jobs all ended: %w", err)
	}
	for _, id := range ids {
		if err := failPass(ctx, tx, id, "its jobs ended without finishing it: a job was discarded or cancelled (see reconcile.river_job)", now); err != nil {
			return fmt.Errorf("fail pass %s: %w", id, err)
		}
	}
	return nil
}

// runningPass reads the row of pass runID, locked for the transaction,
// and whether it is still running.
func runningPass(ctx context.Context, tx pgx.Tx, runID string) (reconcile.Run, bool, error) {
	return readPass(ctx, tx, runID, " FOR UPDATE")
}

// mergeReport adds a part's report to a pass's.
func mergeReport(into *PartReport, p PartReport, first bool) {
	if first {
		into.Covered, into.EventsFrom = p.Covered, p.EventsFrom
	}
	if p.Covered.From.After(into.Covered.From) {
		into.Covered.From = p.Covered.From
	}
	if p.Covered.To.Before(into.Covered.To) {
		into.Covered.To = p.Covered.To
	}
	if p.EventsFrom.After(into.EventsFrom) {
		into.EventsFrom = p.EventsFrom
	}
	into.Context += p.Context
	into.Partial += p.Partial
	for raw, n := range p.Unmapped {
		if into.Unmapped == nil {
			into.Unmapped = map[string]int{}
		}
		into.Unmapped[raw] += n
	}
	into.Found = append(into.Found, p.Found...)
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
	account                        string
	shard                          int
	counts                         reconcile.Counts
	findings, transitions, skipped int
	sum                            partSummary
}

func readParts(ctx context.Context, tx pgx.Tx, runID string) ([]storedPart, error) {
	rows, err := tx.Query(ctx, `SELECT account, shard, obligations, provider_objects, linked, findings, transitions, skipped, summary
		FROM reconcile.pass_parts WHERE run_id = $1 ORDER BY account, shard`, runID)
	if err != nil {
		return nil, fmt.Errorf("read the pass's parts: %w", err)
	}
	var (
		parts []storedPart
		p     storedPart
		raw   []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&p.account, &p.shard, &p.counts.Obligations, &p.counts.ProviderObjects, &p.counts.Linked,
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

// passAlerts are the alerts the parts of a pass decided, in the order one
// Apply of the whole pass queues them: those about findings the pass
// found, by reconcile.CompareFindings, then its resolutions, by
// fingerprint (the account, the shard and a part's own order break ties
// between a finding's alerts, so that the order is one however many
// shards an account is split into: a finding is one shard's).
func passAlerts(parts []storedPart) ([]outboxRow, error) {
	type held struct {
		account string
		shard   int
		a       partAlert
		f       reconcile.Finding
	}
	var hs []held
	for _, p := range parts {
		for _, a := range p.sum.Alerts {
			var j findingJSON
			if err := json.Unmarshal(a.Payload, &j); err != nil {
				return nil, fmt.Errorf("decode an alert of account %q: %w", p.account, err)
			}
			hs = append(hs, held{account: p.account, shard: p.shard, a: a, f: j.finding()})
		}
	}
	resolved := func(h held) bool { return h.a.Event == reconcile.AlertResolved }
	slices.SortStableFunc(hs, func(a, b held) int {
		ra, rb := resolved(a), resolved(b)
		switch {
		case ra != rb:
			if ra {
				return 1
			}
			return -1
		case ra:
			return cmp.Or(strings.Compare(a.a.Fingerprint, b.a.Fingerprint), strings.Compare(a.account, b.account),
				cmp.Compare(a.shard, b.shard), cmp.Compare(a.a.Seq, b.a.Seq))
		}
		return cmp.Or(reconcile.CompareFindings(a.f, b.f), strings.Compare(a.account, b.account),
			cmp.Compare(a.shard, b.shard), cmp.Compare(a.a.Seq, b.a.Seq))
	})
	out := make([]outboxRow, len(hs))
	for i, h := range hs {
		out[i] = outboxRow{fingerprint: h.a.Fingerprint, event: h.a.Event, changed: h.a.Changed, payload: string(h.a.Payload)}
	}
	return out, nil
}

// PassResult is what a pass run as jobs concluded, as the store keeps it:
// its run row, the findings it found (last seen by it), most severe
// first, its transitions (the audit, with the money of the unknown
// outcomes it confirmed) and each account's counts. It serves the report
// of `run --enqueue`, which reads the same as a one-process pass's.
type PassResult struct {
	// Report merges the parts' reports as a one-process pass reads all
	// accounts: the coverage every account was read over (the latest
	// start, the earliest end), the rest summed.
	Report PartReport
	// Skipped are the transitions a worker's change made the pass skip.
	Skipped []Skipped
	Run     reconcile.Run
	// Drained is set once the pass's drain job (docs/design.md, "Passes
	// as jobs") is no longer waiting or running; AlertsError says why it
	// could not deliver, where no retry helps (RecordAlertsError).
	Drained     bool
	AlertsError string
	Error       string
	Findings    []reconcile.Finding
	Transitions []reconcile.Transition
	Accounts    []PassAccountResult
}

// PassAccountResult is one account's share of a pass: its parts' (one
// per shard) counts and findings summed.
type PassAccountResult struct {
	Account  reconcile.Account
	Counts   reconcile.Counts
	Findings int
}

// RecordAlertsError keeps on pass runID's row why its drain could not
// deliver its alerts where no retry helps (alerts.ErrPermanent), so that
// `run --enqueue` exits as `run` does; empty clears it.
func (s *Store) RecordAlertsError(ctx context.Context, runID, cause string) error {
	if len(cause) > maxCause {
		cause = cause[:maxCause] + "…"
	}
	if _, err := s.pool.Exec(ctx, `UPDATE reconcile.runs SET alerts_error = nullif($2, '') WHERE id = $1`, runID, cause); err != nil {
		return fmt.Errorf("record pass %s's alerts error: %w", runID, err)
	}
	return nil
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
		var alertsErr *string
		if err := tx.QueryRow(ctx, `SELECT finished_at, obligations, provider_objects, linked, error, alerts_error FROM reconcile.runs WHERE id = $1`, runID).
			Scan(&finished, &r.Run.Counts.Obligations, &r.Run.Counts.ProviderObjects, &r.Run.Counts.Linked, &cause, &alertsErr); err != nil {
			return err
		}
		r.AlertsError = stringOf(alertsErr)
		r.Run.Finished, r.Error = timeOf(finished).UTC(), stringOf(cause)
		if r.Run.Status != reconcile.RunCompleted {
			return nil
		}
		if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM reconcile.river_job WHERE kind = 'reconcile_drain'
			AND args->'pass'->>'id' = $1 AND state NOT IN ('completed', 'discarded', 'cancelled'))`, runID).Scan(&r.Drained); err != nil {
			return err
		}
		confirmed := map[string]reconcile.Money{}
		parts, err := tx.Query(ctx, `SELECT p.account, coalesce(a.name, ''), p.obligations, p.provider_objects, p.linked, p.findings, p.summary
			FROM reconcile.pass_parts p LEFT JOIN reconcile.pass_accounts a USING (run_id, account)
			WHERE p.run_id = $1 ORDER BY p.account, p.shard`, runID)
		if err != nil {
			return err
		}
		var (
			a     PassAccountResult
			raw   []byte
			first = true
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
			mergeReport(&r.Report, sum.Report, first)
			first = false
			for _, sk := range sum.Report.Skipped {
				r.Skipped = append(r.Skipped, Skipped{Transition: reconcile.Transition{ObligationID: sk.ObligationID, From: sk.From}, Reason: sk.Reason})
			}
			// An account's shards, in a row: one account's share.
			if n := len(r.Accounts); n > 0 && r.Accounts[n-1].Account.ID == a.Account.ID {
				last := &r.Accounts[n-1]
				last.Counts.Obligations += a.Counts.Obligations
				last.Counts.ProviderObjects += a.Counts.ProviderObjects
				last.Counts.Linked += a.Counts.Linked
				last.Findings += a.Findings
				return nil
			}
			r.Accounts = append(r.Accounts, a)
			return nil
		})
		if err != nil {
			return err
		}
		// The findings the parts found, as the store holds them now.
		rows, err := tx.Query(ctx, `SELECT `+findingColumns+` FROM reconcile.findings WHERE fingerprint = ANY($1::text[])`, r.Report.Found)
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
