package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
)

// Due returns up to limit unsent alerts whose next attempt is due at now,
// oldest first. Apply writes a run's summary before its findings' alerts,
// so in this order a summary comes before the alerts of its run.
//
// ThreadTS is filled for a repeat or resolved alert with the Slack ts of
// the finding's first sent firing message, and for a firing alert with
// the ts of its run's summary once that was sent.
//
// UnknownOutcome is set for a row whose earlier send may have reached
// Slack: one that timed out after it went out, or one whose intent
// (MarkSending) was recorded and whose outcome never was.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]reconcile.Alert, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT o.id, o.run_id, o.event, o.changed, o.payload, o.created_at,
		o.attempts, o.outcome_unknown OR o.sending_since IS NOT NULL,
		CASE o.event
		WHEN 'summary' THEN NULL
		WHEN 'firing' THEN (SELECT s.slack_ts FROM reconcile.outbox s
			WHERE s.run_id = o.run_id AND s.event = 'summary' AND s.sent_at IS NOT NULL
			ORDER BY s.id LIMIT 1)
		ELSE (SELECT f.slack_ts FROM reconcile.outbox f
			WHERE f.fingerprint = o.fingerprint AND f.event = 'firing' AND f.sent_at IS NOT NULL
			ORDER BY f.sent_at, f.id LIMIT 1)
		END
	FROM reconcile.outbox o
	WHERE o.sent_at IS NULL AND o.next_attempt_at <= $1
	ORDER BY o.id
	LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due alerts: %w", err)
	}
	var (
		alerts  []reconcile.Alert
		a       reconcile.Alert
		payload []byte
		thread  *string
	)
	_, err = pgx.ForEachRow(rows, []any{&a.ID, &a.RunID, &a.Event, &a.Changed, &payload, &a.CreatedAt,
		&a.Attempts, &a.UnknownOutcome, &thread}, func() error {
		a.ThreadTS = stringOf(thread)
		if err := decodePayload(&a, payload); err != nil {
			return err
		}
		alerts = append(alerts, a)
		a = reconcile.Alert{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("due alerts: %w", err)
	}
	return alerts, nil
}

// decodePayload fills the alert's summary or finding from its stored JSON.
func decodePayload(a *reconcile.Alert, payload []byte) error {
	if a.Event == reconcile.AlertSummary {
		var sum reconcile.RunSummary
		if err := json.Unmarshal(payload, &sum); err != nil {
			return fmt.Errorf("decode summary of alert %d: %w", a.ID, err)
		}
		a.Summary = &sum
		return nil
	}
	var f findingJSON
	if err := json.Unmarshal(payload, &f); err != nil {
		return fmt.Errorf("decode finding of alert %d: %w", a.ID, err)
	}
	a.Finding = f.finding()
	return nil
}

// MarkSent records that Slack accepted alert id as message ts in channel.
// It returns ErrNotFound for an unknown id and ErrAlreadySent if the row
// was already recorded as sent (the first record is kept).
func (s *Store) MarkSent(ctx context.Context, id int64, channel, ts string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE reconcile.outbox SET sent_at = $2, slack_channel = $3, slack_ts = $4,
		sending_since = NULL
	WHERE id = $1 AND sent_at IS NULL`, id, at, nullString(channel), nullString(ts))
	if err != nil {
		return fmt.Errorf("mark alert %d sent: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return s.whyUnchanged(ctx, "mark alert sent", id)
}

// MarkSending records the intent to send the message carrying rows ids,
// before the request goes out. Should the process die before MarkSent or
// MarkAttempt records the outcome, the intent stays, Due reports the rows'
// outcome as unknown, and their next message says it may be a repeat. An
// intent left by an earlier send that is still unresolved becomes the
// sticky outcome_unknown flag here, so that a later failed attempt, which
// clears the intent, does not forget it.
//
// The claim is fenced by the run lock of ctx (WithFence), in the same
// transaction: a run whose lock was lost claims nothing, so sends nothing.
// (Fence holds the fence across the whole send; MarkSent and MarkAttempt
// are not fenced, because what Slack did must be recorded whoever holds
// the lock, or the next drain would post the message again.)
func (s *Store) MarkSending(ctx context.Context, ids []int64, at time.Time) error {
	err := inFence(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE reconcile.outbox
		SET outcome_unknown = outcome_unknown OR sending_since IS NOT NULL, sending_since = $2
		WHERE id = ANY($1) AND sent_at IS NULL`, ids, at)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark alerts %v sending: %w", ids, err)
	}
	return nil
}

// maxErrorText bounds the error text kept per attempt.
const maxErrorText = 1000

// MarkAttempt records a failed delivery attempt of alert id: the attempt
// count goes up, the next attempt is due at next, and errText is kept for
// people. unknown is true when the request may have reached Slack (a
// timeout after it went out); once set it stays set, so that a resend can
// say it may be a duplicate. The send's intent (MarkSending) is cleared:
// this attempt's outcome is now recorded. Callers keep secrets out of
// errText.
func (s *Store) MarkAttempt(ctx context.Context, id int64, next time.Time, unknown bool, errText string) error {
	if len(errText) > maxErrorText {
		errText = errText[:maxErrorText] + "…"
	}
	tag, err := s.pool.Exec(ctx, `UPDATE reconcile.outbox SET attempts = attempts + 1, next_attempt_at = $2,
		outcome_unknown = outcome_unknown OR $3, last_error = $4, sending_since = NULL
	WHERE id = $1 AND sent_at IS NULL`, id, next, unknown, nullString(errText))
	if err != nil {
		return fmt.Errorf("mark alert %d attempt: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return s.whyUnchanged(ctx, "mark alert attempt", id)
}

// whyUnchanged tells an unknown outbox id from one already sent.
func (s *Store) whyUnchanged(ctx context.Context, op string, id int64) error {
	var sent bool
	err := s.pool.QueryRow(ctx, `SELECT sent_at IS NOT NULL FROM reconcile.outbox WHERE id = $1`, id).Scan(&sent)
	if err != nil {
		return fmt.Errorf("%s %d: %w", op, id, notFound(err))
	}
	if sent {
		return fmt.Errorf("%s %d: %w", op, id, ErrAlreadySent)
	}
	return fmt.Errorf("%s %d: %w", op, id, errors.New("row unchanged"))
}
