package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
)

// SaveAccounts records the display names of the connected accounts a
// pass read, as it read them, in reconcile.accounts (migration 00009):
// findings and alerts name an account for people by it, and a name
// Stripe no longer gives is forgotten rather than kept stale. The
// platform's own account (ID empty) is not stored: it has no name to
// keep. Of an account given twice, the last is kept. Accounts not given
// are left as they stand: a pass that could not read one says nothing of
// its name.
//
// Like the mirror's save, it is fenced by the run lock of ctx
// (WithFence): a run whose lock was lost writes nothing and gets an error
// wrapping ErrLockLost.
func (s *Store) SaveAccounts(ctx context.Context, runID string, accounts []reconcile.Account, now time.Time) error {
	if runID == "" {
		return errors.New("save accounts: no run id")
	}
	var ids, names []string
	at := map[string]int{}
	for _, a := range accounts {
		if a.Platform() {
			continue
		}
		if i, ok := at[a.ID]; ok {
			names[i] = a.Name
			continue
		}
		at[a.ID] = len(ids)
		ids, names = append(ids, a.ID), append(names, a.Name)
	}
	err := inFence(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if len(ids) == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO reconcile.accounts (id, name, run_id, seen_at)
			SELECT u.id, u.name, $3, $4 FROM unnest($1::text[], $2::text[]) AS u(id, name)
			ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, run_id = EXCLUDED.run_id, seen_at = EXCLUDED.seen_at`,
			ids, names, runID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("save accounts: %w", err)
	}
	return nil
}
