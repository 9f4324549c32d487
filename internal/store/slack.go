package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
)

// RecordMessage keeps a message the bot posted and Slack accepted, as
// posted, with the findings it announces as open (docs/design.md, "Buttons
// in Slack"). It is bookkeeping of what Slack did, like MarkSent, so it is
// not fenced. The first record of a channel and ts stands.
func (s *Store) RecordMessage(ctx context.Context, m reconcile.SlackMessage) error {
	fps := m.Fingerprints
	if fps == nil {
		fps = []string{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO reconcile.slack_messages
		(channel, ts, kind, run_id, fingerprints, blocks, text, posted_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (channel, ts) DO NOTHING`,
		m.Channel, m.TS, m.Kind, m.RunID, fps, jsonOrNull(m.Blocks), m.Text, m.PostedAt)
	if err != nil {
		return fmt.Errorf("record slack message %s: %w", m.TS, err)
	}
	return nil
}

func jsonOrNull(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

const slackMessageColumns = `channel, ts, kind, run_id, fingerprints, blocks, text, posted_at`

func scanSlackMessage(row pgx.CollectableRow) (reconcile.SlackMessage, error) {
	var m reconcile.SlackMessage
	err := row.Scan(&m.Channel, &m.TS, &m.Kind, &m.RunID, &m.Fingerprints, &m.Blocks, &m.Text, &m.PostedAt)
	return m, err
}

// SlackMessage returns the recorded message ts of channel; ErrNotFound
// (wrapped) when none was recorded.
func (s *Store) SlackMessage(ctx context.Context, channel, ts string) (reconcile.SlackMessage, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+slackMessageColumns+` FROM reconcile.slack_messages
	WHERE channel = $1 AND ts = $2`, channel, ts)
	if err != nil {
		return reconcile.SlackMessage{}, fmt.Errorf("slack message %s: %w", ts, err)
	}
	m, err := pgx.CollectExactlyOneRow(rows, scanSlackMessage)
	if err != nil {
		return reconcile.SlackMessage{}, fmt.Errorf("slack message %s: %w", ts, notFound(err))
	}
	return m, nil
}

// SlackMessagesOf returns the recorded messages that announce the finding
// fingerprint, oldest first.
func (s *Store) SlackMessagesOf(ctx context.Context, fingerprint string) ([]reconcile.SlackMessage, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+slackMessageColumns+` FROM reconcile.slack_messages
	WHERE fingerprints @> ARRAY[$1::text] ORDER BY posted_at, channel, ts`, fingerprint)
	if err != nil {
		return nil, fmt.Errorf("slack messages of %s: %w", fingerprint, err)
	}
	ms, err := pgx.CollectRows(rows, scanSlackMessage)
	if err != nil {
		return nil, fmt.Errorf("slack messages of %s: %w", fingerprint, err)
	}
	return ms, nil
}

// FindingsOf returns the findings of the fingerprints that exist, open or
// resolved, most severe first.
func (s *Store) FindingsOf(ctx context.Context, fingerprints []string) ([]FindingRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+findingColumns+` FROM reconcile.findings
	WHERE fingerprint = ANY($1)`, fingerprints)
	if err != nil {
		return nil, fmt.Errorf("findings of %d fingerprints: %w", len(fingerprints), err)
	}
	fs, err := pgx.CollectRows(rows, scanFinding)
	if err != nil {
		return nil, fmt.Errorf("findings of %d fingerprints: %w", len(fingerprints), err)
	}
	sortFindings(fs)
	return fs, nil
}

// AckOpen acknowledges, as by for reason, those of the fingerprints'
// findings that are open and not yet acknowledged, and returns what it
// changed: a second call, or a retried delivery of the same request,
// changes nothing and returns none, so the first acknowledgement's time
// and reason stand. Unlike Ack (the command's), it takes exact
// fingerprints only and never overwrites an acknowledgement.
func (s *Store) AckOpen(ctx context.Context, fingerprints []string, by, reason string, now time.Time) ([]FindingRecord, error) {
	if reason == "" {
		return nil, errors.New("ack: a reason is required")
	}
	rows, err := s.pool.Query(ctx, `UPDATE reconcile.findings
	SET acknowledged_at = $2, acknowledged_by = $3, ack_reason = $4
	WHERE fingerprint = ANY($1) AND status = 'open' AND acknowledged_at IS NULL
	RETURNING `+findingColumns, fingerprints, now, nullString(by), reason)
	if err != nil {
		return nil, fmt.Errorf("ack %d findings: %w", len(fingerprints), err)
	}
	fs, err := pgx.CollectRows(rows, scanFinding)
	if err != nil {
		return nil, fmt.Errorf("ack %d findings: %w", len(fingerprints), err)
	}
	sortFindings(fs)
	return fs, nil
}
