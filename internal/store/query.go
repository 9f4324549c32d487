package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
)

// FindingStatus is whether a finding is still open.
type FindingStatus string

// The finding statuses.
const (
	FindingOpen     FindingStatus = statusOpen
	FindingResolved FindingStatus = statusResolved
)

// FindingRecord is a finding as the store keeps it: what it says, and its
// history across runs. Zero times and empty strings stand for NULL.
type FindingRecord struct {
	reconcile.Finding
	Status         FindingStatus
	FirstSeenRun   string
	FirstSeenAt    time.Time
	LastSeenRun    string
	LastSeenAt     time.Time
	ResolvedRun    string
	ResolvedAt     time.Time
	AcknowledgedAt time.Time
	AcknowledgedBy string
	AckReason      string
	// LastAlertedAt is when an alert about it was last queued.
	LastAlertedAt time.Time
}

// findingColumns are a row of reconcile.findings as scanFinding reads
// them, in a statement whose only table is reconcile.findings (a SELECT
// or the RETURNING of an UPDATE). The account's name is the one the last
// pass read (SaveAccounts), empty for the platform's: the unqualified
// account in the subquery is the finding's, reconcile.accounts having no
// column of that name.
const findingColumns = `fingerprint, kind, severity, obligation_id, provider_ids, amount, currency,
	at_risk_amount, at_risk_currency, content_hash, detail, status, first_seen_run, first_seen_at,
	last_seen_run, last_seen_at, resolved_run, resolved_at, acknowledged_at, acknowledged_by, ack_reason,
	last_alerted_at, target, paid_out, account,
	coalesce((SELECT a.name FROM reconcile.accounts a WHERE a.id = account), '')`

func scanFinding(row pgx.CollectableRow) (FindingRecord, error) {
	var (
		r                                     FindingRecord
		obligationID, resolvedRun, by, reason *string
		target                                *string
		resolvedAt, ackAt, alertedAt          *time.Time
	)
	err := row.Scan(&r.Fingerprint, &r.Kind, &r.Severity, &obligationID, &r.ProviderIDs, &r.Money.Amount,
		&r.Money.Currency, &r.AtRisk.Amount, &r.AtRisk.Currency, &r.ContentHash, &r.Detail, &r.Status,
		&r.FirstSeenRun, &r.FirstSeenAt, &r.LastSeenRun, &r.LastSeenAt, &resolvedRun, &resolvedAt,
		&ackAt, &by, &reason, &alertedAt, &target, &r.PaidOut, &r.Account, &r.AccountName)
	r.Target = stringOf(target)
	r.ObligationID, r.ResolvedRun, r.AcknowledgedBy, r.AckReason =
		stringOf(obligationID), stringOf(resolvedRun), stringOf(by), stringOf(reason)
	r.ResolvedAt, r.AcknowledgedAt, r.LastAlertedAt = timeOf(resolvedAt), timeOf(ackAt), timeOf(alertedAt)
	return r, err
}

// minPrefix is the shortest fingerprint prefix Ack accepts, so that a
// stray character cannot acknowledge a finding by accident.
const minPrefix = 6

// Ack acknowledges an open finding: it is not repeated any more, until its
// content changes (then it fires again and the acknowledgement is
// cleared). fingerprint may be a unique prefix of at least six characters.
// It returns the finding as acknowledged; ErrNotFound, ErrAmbiguous or
// ErrResolved (wrapped) when there is nothing to acknowledge.
func (s *Store) Ack(ctx context.Context, fingerprint, by, reason string, now time.Time) (FindingRecord, error) {
	fingerprint = strings.TrimSpace(fingerprint)
	if fingerprint == "" {
		return FindingRecord{}, errors.New("ack: no fingerprint")
	}
	if strings.TrimSpace(reason) == "" {
		return FindingRecord{}, fmt.Errorf("ack %s: a reason is required", fingerprint)
	}
	fp, err := s.resolveFingerprint(ctx, fingerprint)
	if err != nil {
		return FindingRecord{}, fmt.Errorf("ack %s: %w", fingerprint, err)
	}
	r, found, err := s.oneFinding(ctx, `UPDATE reconcile.findings
	SET acknowledged_at = $2, acknowledged_by = $3, ack_reason = $4
	WHERE fingerprint = $1 AND status = 'open'
	RETURNING `+findingColumns, fp, now, nullString(by), reason)
	switch {
	case err != nil:
		return FindingRecord{}, fmt.Errorf("ack %s: %w", fp, err)
	case !found:
		// It existed a moment ago, so it was resolved since.
		return FindingRecord{}, fmt.Errorf("ack %s: %w: nothing to acknowledge", fp, ErrResolved)
	}
	return r, nil
}

// oneFinding runs a statement returning at most one finding's columns,
// and says whether it returned one.
func (s *Store) oneFinding(ctx context.Context, sql string, args ...any) (FindingRecord, bool, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return FindingRecord{}, false, err
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanFinding)
	if errors.Is(err, pgx.ErrNoRows) {
		return FindingRecord{}, false, nil
	}
	return r, err == nil, err
}

// resolveFingerprint finds the one open-or-resolved finding that
// fingerprint names exactly or by prefix, and refuses a resolved one.
func (s *Store) resolveFingerprint(ctx context.Context, fingerprint string) (string, error) {
	rows, err := s.pool.Query(ctx, `SELECT fingerprint, status FROM reconcile.findings
	WHERE fingerprint = $1 OR (length($1) >= $2 AND starts_with(fingerprint, $1))
	ORDER BY fingerprint = $1 DESC, fingerprint LIMIT 3`, fingerprint, minPrefix)
	if err != nil {
		return "", err
	}
	type match struct {
		fp     string
		status FindingStatus
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (match, error) {
		var m match
		err := row.Scan(&m.fp, &m.status)
		return m, err
	})
	if err != nil {
		return "", err
	}
	switch {
	case len(ms) == 0:
		if len(fingerprint) < minPrefix {
			return "", fmt.Errorf("%w (a prefix needs at least %d characters)", ErrNotFound, minPrefix)
		}
		return "", ErrNotFound
	case ms[0].fp != fingerprint && len(ms) > 1:
		return "", fmt.Errorf("%w: %s, %s…", ErrAmbiguous, ms[0].fp, ms[1].fp)
	case ms[0].status == FindingResolved:
		return "", fmt.Errorf("%w: nothing to acknowledge", ErrResolved)
	}
	return ms[0].fp, nil
}

// Findings returns the findings, only the open ones if open is set, most
// severe first, then by kind, obligation id and fingerprint.
func (s *Store) Findings(ctx context.Context, open bool) ([]FindingRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+findingColumns+` FROM reconcile.findings
	WHERE status = 'open' OR NOT $1`, open)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	fs, err := pgx.CollectRows(rows, scanFinding)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	sortFindings(fs)
	return fs, nil
}

func sortFindings(fs []FindingRecord) {
	slices.SortFunc(fs, func(a, b FindingRecord) int {
		return cmp.Or(
			cmp.Compare(b.Severity.Rank(), a.Severity.Rank()),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.ObligationID, b.ObligationID),
			cmp.Compare(a.Fingerprint, b.Fingerprint),
		)
	})
}

// TransitionRecord is one row of the audit of transitions.
type TransitionRecord struct {
	ID           int64
	ObligationID string
	From, To     reconcile.State
	ProviderID   string
	RunID        string
	At           time.Time
}

// AlertRecord is one outbox row and how its delivery went.
type AlertRecord struct {
	ID            int64
	RunID         string
	Fingerprint   string // empty for a summary
	Event         reconcile.AlertEvent
	Changed       bool
	CreatedAt     time.Time
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	SentAt        time.Time // zero until Slack accepted it
	SlackChannel  string
	SlackTS       string
	// OutcomeUnknown: a send may have reached Slack without an answer, or
	// a process died mid-send (its intent is still recorded).
	OutcomeUnknown bool
}

// History is everything the store knows about one obligation, for
// `reconcile trace`.
type History struct {
	ObligationID string
	// Findings about the obligation, most severe first.
	Findings []FindingRecord
	// Transitions the reconciler made to it, oldest first.
	Transitions []TransitionRecord
	// Alerts about its findings, oldest first.
	Alerts []AlertRecord
}

// ObligationHistory returns the findings, transitions and alerts of one
// obligation. An obligation the store never saw has an empty history, not
// an error: the obligations table may still know it.
func (s *Store) ObligationHistory(ctx context.Context, obligationID string) (History, error) {
	h := History{ObligationID: obligationID}
	// One snapshot, so that the three lists agree with each other.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+findingColumns+` FROM reconcile.findings WHERE obligation_id = $1`, obligationID)
		if err != nil {
			return err
		}
		if h.Findings, err = pgx.CollectRows(rows, scanFinding); err != nil {
			return err
		}
		sortFindings(h.Findings)
		rows, err = tx.Query(ctx, `SELECT id, obligation_id, from_state, to_state, coalesce(provider_id, ''), run_id, at
		FROM reconcile.transitions WHERE obligation_id = $1 ORDER BY id`, obligationID)
		if err != nil {
			return err
		}
		if h.Transitions, err = pgx.CollectRows(rows, pgx.RowToStructByPos[TransitionRecord]); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+alertColumns+`
		FROM reconcile.outbox o JOIN reconcile.findings f ON f.fingerprint = o.fingerprint
		WHERE f.obligation_id = $1 ORDER BY o.id`, obligationID)
		if err != nil {
			return err
		}
		h.Alerts, err = pgx.CollectRows(rows, scanAlertRecord)
		return err
	})
	if err != nil {
		return History{}, fmt.Errorf("history of obligation %s: %w", obligationID, err)
	}
	return h, nil
}

// alertColumns are an outbox row o's, as scanAlertRecord reads them.
const alertColumns = `o.id, o.run_id, coalesce(o.fingerprint, ''), o.event, o.changed,
	o.created_at, o.attempts, o.next_attempt_at, coalesce(o.last_error, ''), o.sent_at,
	coalesce(o.slack_channel, ''), coalesce(o.slack_ts, ''), o.outcome_unknown OR o.sending_since IS NOT NULL`

func scanAlertRecord(row pgx.CollectableRow) (AlertRecord, error) {
	var (
		a      AlertRecord
		sentAt *time.Time
	)
	err := row.Scan(&a.ID, &a.RunID, &a.Fingerprint, &a.Event, &a.Changed, &a.CreatedAt, &a.Attempts,
		&a.NextAttemptAt, &a.LastError, &sentAt, &a.SlackChannel, &a.SlackTS, &a.OutcomeUnknown)
	a.SentAt = timeOf(sentAt)
	return a, err
}

// RunRecord is a run as recorded, with what it did.
type RunRecord struct {
	reconcile.Run
	Findings    int // findings the run reported
	Transitions int // transitions it applied
	Skipped     int // transitions skipped because the obligation changed
	Error       string
}

// LastRuns returns the n most recently started runs, newest first.
func (s *Store) LastRuns(ctx context.Context, n int) ([]RunRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, trigger, window_from, window_to, started_at, finished_at, status,
		obligations, provider_objects, linked, findings, transitions, skipped, coalesce(error, ''),
		stripe_retries, stripe_rate_limited
	FROM reconcile.runs ORDER BY started_at DESC, id DESC LIMIT $1`, max(n, 0))
	if err != nil {
		return nil, fmt.Errorf("last runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunRecord, error) {
		var (
			r                    RunRecord
			finished             *time.Time
			retries, rateLimited *int
		)
		err := row.Scan(&r.ID, &r.Trigger, &r.Window.From, &r.Window.To, &r.Started, &finished, &r.Status,
			&r.Counts.Obligations, &r.Counts.ProviderObjects, &r.Counts.Linked, &r.Findings, &r.Transitions,
			&r.Skipped, &r.Error, &retries, &rateLimited)
		r.Finished = timeOf(finished)
		if retries != nil && rateLimited != nil {
			r.Stripe = &reconcile.StripeStats{Retries: *retries, RateLimited: *rateLimited}
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("last runs: %w", err)
	}
	return runs, nil
}

// Reopen clears an open finding's acknowledgement: it is repeated again
// past the repeat interval, as if it had never been acknowledged
// (docs/design.md, "Alert lifecycle"). fingerprint must be exact. It
// returns the finding as reopened; ErrNotFound or ErrResolved (wrapped)
// when there is nothing to reopen. Reopening a finding nobody
// acknowledged changes nothing.
func (s *Store) Reopen(ctx context.Context, fingerprint string) (FindingRecord, error) {
	r, found, err := s.oneFinding(ctx, `UPDATE reconcile.findings
	SET acknowledged_at = NULL, acknowledged_by = NULL, ack_reason = NULL
	WHERE fingerprint = $1 AND status = 'open'
	RETURNING `+findingColumns, fingerprint)
	if err != nil {
		return FindingRecord{}, fmt.Errorf("reopen %s: %w", fingerprint, err)
	}
	if !found {
		if _, err := s.Finding(ctx, fingerprint); err != nil {
			return FindingRecord{}, fmt.Errorf("reopen: %w", err)
		}
		return FindingRecord{}, fmt.Errorf("reopen %s: %w: nothing to reopen", fingerprint, ErrResolved)
	}
	return r, nil
}

// Finding returns the finding of exactly that fingerprint, open or
// resolved; an error wrapping ErrNotFound when there is none.
func (s *Store) Finding(ctx context.Context, fingerprint string) (FindingRecord, error) {
	r, found, err := s.oneFinding(ctx, `SELECT `+findingColumns+` FROM reconcile.findings WHERE fingerprint = $1`, fingerprint)
	switch {
	case err != nil:
		return FindingRecord{}, fmt.Errorf("finding %s: %w", fingerprint, err)
	case !found:
		return FindingRecord{}, fmt.Errorf("finding %s: %w", fingerprint, ErrNotFound)
	}
	return r, nil
}

// FindingAlerts returns the alerts about one finding, oldest first.
func (s *Store) FindingAlerts(ctx context.Context, fingerprint string) ([]AlertRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+alertColumns+`
	FROM reconcile.outbox o WHERE o.fingerprint = $1 ORDER BY o.id`, fingerprint)
	if err != nil {
		return nil, fmt.Errorf("alerts of finding %s: %w", fingerprint, err)
	}
	as, err := pgx.CollectRows(rows, scanAlertRecord)
	if err != nil {
		return nil, fmt.Errorf("alerts of finding %s: %w", fingerprint, err)
	}
	return as, nil
}

// FindingsNaming returns the findings, open or resolved, that name
// provider id among their Stripe ids or as their target, most severe
// first: how `reconcile trace` finds the obligation of a Stripe id that
// is no obligation's provider_id (a duplicate's second refund).
func (s *Store) FindingsNaming(ctx context.Context, id string) ([]FindingRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+findingColumns+` FROM reconcile.findings
	WHERE $1 = ANY(provider_ids) OR target = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("findings naming %s: %w", id, err)
	}
	fs, err := pgx.CollectRows(rows, scanFinding)
	if err != nil {
		return nil, fmt.Errorf("findings naming %s: %w", id, err)
	}
	sortFindings(fs)
	return fs, nil
}
