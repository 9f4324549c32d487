package store

import (
	"context"
	"fmt"
	"time"
)

// Vitals are the figures serve's /metrics reads beside the findings and
// the last run (docs/design.md, "The findings page"). Zero times stand for
// none.
type Vitals struct {
	// Undelivered counts the outbox rows Slack has not accepted yet.
	Undelivered int
	// OldestUndelivered is when the oldest of them was queued.
	OldestUndelivered time.Time
	// LastCompleted is when the newest completed run finished.
	LastCompleted time.Time
}

// Vitals reads the outbox's backlog and the last completed run, in one
// statement, so that they agree with each other.
func (s *Store) Vitals(ctx context.Context) (Vitals, error) {
	var (
		v              Vitals
		oldest, lastOK *time.Time
	)
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM reconcile.outbox WHERE sent_at IS NULL),
		(SELECT min(created_at) FROM reconcile.outbox WHERE sent_at IS NULL),
		(SELECT max(finished_at) FROM reconcile.runs WHERE status = 'completed')`).Scan(&v.Undelivered, &oldest, &lastOK)
	if err != nil {
		return Vitals{}, fmt.Errorf("vitals: %w", err)
	}
	v.OldestUndelivered, v.LastCompleted = timeOf(oldest), timeOf(lastOK)
	return v, nil
}
