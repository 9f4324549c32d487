package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbState is everything the oracle reads back from the database.
type dbState struct {
	obligations map[string]oblRow
	findings    map[string]findingRow
	outbox      map[int64]outboxRow
	maxOutbox   int64
	transitions []transitionRow
	runs        map[string]runRow
	// mirror digests the provider mirror: its objects and its cursors.
	mirror string
	// cursors digests the mirror's cursors alone.
	cursors string
}

type oblRow struct {
	state, providerID, leaseOwner string
	leaseExp, updated, paid       time.Time
}

// findingRow is a stored finding.
type findingRow struct {
	kind, obligationID, status, hash, detail, lastSeenRun string
	providerIDs                                           []string
	lastAlerted, acked                                    time.Time
	lastSeen                                              time.Time
}

type outboxRow struct {
	id                 int64
	fingerprint, event string
	changed, unknown   bool
	payload            string
	sent               bool
	sentAt             time.Time
	attempts           int
}

type transitionRow struct {
	id                     int64
	obligationID, from, to string
	providerID             string
	at                     time.Time
}

type runRow struct{ status string }

func (w *world) snapshot(ctx context.Context) (dbState, error) {
	s := dbState{obligations: map[string]oblRow{}, findings: map[string]findingRow{},
		outbox: map[int64]outboxRow{}, runs: map[string]runRow{}}
	// One round trip for the five tables.
	b := &pgx.Batch{}
	b.Queue(`SELECT id, state, coalesce(provider_id, ''), coalesce(lease_owner, ''),
		lease_expires_at, updated_at, paid_at FROM obligations`)
	b.Queue(`SELECT fingerprint, kind, coalesce(obligation_id, ''), provider_ids, status, content_hash,
		detail, last_seen_run, last_seen_at, last_alerted_at, acknowledged_at FROM reconcile.findings`)
	b.Queue(`SELECT id, coalesce(fingerprint, ''), event, changed, outcome_unknown, payload::text,
		sent_at, attempts FROM reconcile.outbox`)
	b.Queue(`SELECT id, obligation_id, from_state, to_state, coalesce(provider_id, ''), at
		FROM reconcile.transitions ORDER BY id`)
	b.Queue(`SELECT id, status FROM reconcile.runs`)
	b.Queue(`SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY t.account, t.id)), '') || '/' ||
		coalesce((SELECT md5(string_agg(c::text, ',' ORDER BY c.account, c.name)) FROM reconcile.sync_cursors c), '') ||
		coalesce((SELECT md5(string_agg(k::text, ',' ORDER BY k.account, k.object_id, k.key)) FROM reconcile.provider_keys k), ''),
		coalesce((SELECT md5(string_agg(c::text, ',' ORDER BY c.account, c.name)) FROM reconcile.sync_cursors c), '')
		FROM reconcile.provider_objects t`)
	br := w.env.Pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return s, fmt.Errorf("snapshot obligations: %w", err)
	}
	var (
		id             string
		o              oblRow
		leaseExp, paid *time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &o.state, &o.providerID, &o.leaseOwner, &leaseExp, &o.updated, &paid}, func() error {
		o.leaseExp, o.paid = deref(leaseExp), deref(paid)
		o.updated = o.updated.UTC()
		s.obligations[id] = o
		return nil
	}); err != nil {
		return s, fmt.Errorf("snapshot obligations: %w", err)
	}

	rows, err = br.Query()
	if err != nil {
		return s, fmt.Errorf("snapshot findings: %w", err)
	}
	var (
		fp           string
		f            findingRow
		alerted, ack *time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&fp, &f.kind, &f.obligationID, &f.providerIDs, &f.status, &f.hash,
		&f.detail, &f.lastSeenRun, &f.lastSeen, &alerted, &ack}, func() error {
		f.lastAlerted, f.acked = deref(alerted), deref(ack)
		s.findings[fp] = f
		f = findingRow{}
		return nil
	}); err != nil {
		return s, fmt.Errorf("snapshot findings: %w", err)
	}

	rows, err = br.Query()
	if err != nil {
		return s, fmt.Errorf("snapshot outbox: %w", err)
	}
	var (
		r      outboxRow
		sentAt *time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&r.id, &r.fingerprint, &r.event, &r.changed, &r.unknown, &r.payload,
		&sentAt, &r.attempts}, func() error {
		r.sentAt = deref(sentAt)
		r.sent = sentAt != nil
		s.outbox[r.id] = r
		s.maxOutbox = max(s.maxOutbox, r.id)
		return nil
	}); err != nil {
		return s, fmt.Errorf("snapshot outbox: %w", err)
	}

	rows, err = br.Query()
	if err != nil {
		return s, fmt.Errorf("snapshot transitions: %w", err)
	}
	var t transitionRow
	if _, err := pgx.ForEachRow(rows, []any{&t.id, &t.obligationID, &t.from, &t.to, &t.providerID, &t.at}, func() error {
		t.at = t.at.UTC()
		s.transitions = append(s.transitions, t)
		return nil
	}); err != nil {
		return s, fmt.Errorf("snapshot transitions: %w", err)
	}

	rows, err = br.Query()
	if err != nil {
		return s, fmt.Errorf("snapshot runs: %w", err)
	}
	var run runRow
	if _, err := pgx.ForEachRow(rows, []any{&id, &run.status}, func() error {
		s.runs[id] = run
		return nil
	}); err != nil {
		return s, fmt.Errorf("snapshot runs: %w", err)
	}
	if err := br.QueryRow().Scan(&s.mirror, &s.cursors); err != nil {
		return s, fmt.Errorf("snapshot mirror: %w", err)
	}
	return s, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// sameBut tells whether a finding is as it was, delivery bookkeeping
// (lastAlerted) aside.
func (f findingRow) sameBut(o findingRow) bool {
	return f.kind == o.kind && f.obligationID == o.obligationID && f.status == o.status && f.hash == o.hash &&
		f.detail == o.detail && f.lastSeenRun == o.lastSeenRun && f.lastSeen.Equal(o.lastSeen) &&
		f.acked.Equal(o.acked) && slices.Equal(f.providerIDs, o.providerIDs)
}
