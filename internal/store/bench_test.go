package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
)

// applyTransitionsRowByRow is the naive alternative to applyTransitions:
// one compare-and-set and one audit insert per transition, a round trip
// each. It exists only to measure what batching buys.
func (s *Store) applyTransitionsRowByRow(ctx context.Context, tx pgx.Tx, ts []reconcile.Transition, runID string, now time.Time) (int, error) {
	q := s.ob
	update := `UPDATE ` + q.table + ` SET ` + q.state + ` = $2,
		` + q.providerID + ` = COALESCE(` + q.providerID + `, $5),
		` + q.paidAt + ` = CASE WHEN $2::text = $6::text THEN COALESCE(` + q.paidAt + `, $7) ELSE ` + q.paidAt + ` END,
		` + q.updatedAt + ` = $7
	WHERE ` + q.id + ` = $1 AND ` + q.state + ` = $3 AND ` + q.leaseExpiresAt + ` IS NOT DISTINCT FROM $4::timestamptz`
	insert := `INSERT INTO reconcile.transitions (obligation_id, from_state, to_state, provider_id, run_id, at)
	VALUES ($1, $2, $3, $4, $5, $6)`
	applied := 0
	for _, t := range ts {
		fromRaw := t.FromRaw
		if fromRaw == "" {
			fromRaw = s.table.Raw(t.From)
		}
		tag, err := tx.Exec(ctx, update, t.ObligationID, s.table.Raw(t.To), fromRaw, nullTime(t.FromLeaseExpiresAt),
			nullString(t.ProviderID), s.table.Raw(reconcile.Paid), now)
		if err != nil {
			return applied, err
		}
		if tag.RowsAffected() == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, insert, t.ObligationID, string(t.From), string(t.To), nullString(t.ProviderID), runID, now); err != nil {
			return applied, err
		}
		applied++
	}
	return applied, nil
}

// benchData is n CONFIRMATION_UNKNOWN obligations, loaded with COPY, and
// the transitions marking each PAID.
func benchData(tb testing.TB, e *env, n int) []reconcile.Transition {
	tb.Helper()
	rows := make([][]any, n)
	ts := make([]reconcile.Transition, n)
	for i := range n {
		id := fmt.Sprintf("refund:%07d", i)
		rows[i] = []any{id, "refund", "key-" + id, int64(8900), "usd", "CONFIRMATION_UNKNOWN"}
		ts[i] = reconcile.Transition{ObligationID: id, From: reconcile.ConfirmationUnknown, FromRaw: "CONFIRMATION_UNKNOWN",
			To: reconcile.Paid, ProviderID: fmt.Sprintf("re_%07d", i)}
	}
	_, err := e.pool.CopyFrom(context.Background(), pgx.Identifier{"obligations"},
		[]string{"id", "kind", "idempotency_key", "amount", "currency", "state"}, pgx.CopyFromRows(rows))
	if err != nil {
		tb.Fatalf("copy obligations: %v", err)
	}
	e.exec(`INSERT INTO reconcile.runs (id, trigger, window_from, window_to, started_at, status)
		VALUES ('bench', 'manual', $1, $2, $2, 'completed')`, t0().Add(-time.Hour), t0())
	return ts
}

// BenchmarkApplyTransitions applies 100k transitions in one transaction,
// batched (one UPDATE … FROM unnest with its audit INSERT) and row by row
// (an UPDATE and an INSERT per transition). Each iteration times both,
// one after the other, so that the ratio compares runs under the same
// load on a shared machine; ns/op is their sum.
func BenchmarkApplyTransitions(b *testing.B) {
	const n = 100_000
	e := newEnv(b, Options{})
	ts := benchData(b, e, n)
	now := t0()
	ctx := context.Background()
	variants := []struct {
		name    string
		apply   func(ctx context.Context, tx pgx.Tx) (int, error)
		elapsed time.Duration
	}{
		{name: "batched", apply: func(ctx context.Context, tx pgx.Tx) (int, error) {
			applied, _, err := e.s.applyTransitions(ctx, tx, ts, "bench", now)
			return len(applied), err
		}},
		{name: "row_by_row", apply: func(ctx context.Context, tx pgx.Tx) (int, error) {
			return e.s.applyTransitionsRowByRow(ctx, tx, ts, "bench", now)
		}},
	}
	for range b.N {
		for i := range variants {
			v := &variants[i]
			b.StopTimer()
			e.exec(`UPDATE obligations SET state = 'CONFIRMATION_UNKNOWN', provider_id = NULL, paid_at = NULL`)
			e.exec(`TRUNCATE reconcile.transitions`)
			e.exec(`VACUUM ANALYZE obligations`)
			b.StartTimer()
			start := time.Now()
			var applied int
			err := pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
				var err error
				applied, err = v.apply(ctx, tx)
				return err
			})
			v.elapsed += time.Since(start)
			if err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			if applied != n {
				b.Fatalf("%s applied %d, want %d", v.name, applied, n)
			}
		}
	}
	batched, rowByRow := variants[0].elapsed.Seconds(), variants[1].elapsed.Seconds()
	b.ReportMetric(batched/float64(b.N), "batched-s/op")
	b.ReportMetric(rowByRow/float64(b.N), "row_by_row-s/op")
	b.ReportMetric(n*float64(b.N)/batched, "batched-transitions/s")
	b.ReportMetric(n*float64(b.N)/rowByRow, "row_by_row-transitions/s")
	b.ReportMetric(rowByRow/batched, "speedup")
}

// The row-by-row variant the benchmark compares with does what the
// batched one does, skips included; otherwise the comparison would be
// meaningless.
func TestRowByRowMatchesBatched(t *testing.T) {
	t.Parallel()
	now := t0()
	outcome := func(rowByRow bool) []string {
		e := newEnv(t, Options{})
		ts := benchData(t, e, 50)
		// A worker got to some first; another holds a lease.
		e.exec(`UPDATE obligations SET state = 'PAID', provider_id = 're_worker' WHERE id IN ('refund:0000003', 'refund:0000017')`)
		e.exec(`UPDATE obligations SET lease_expires_at = '2026-11-30T07:00:00Z' WHERE id = 'refund:0000021'`)
		e.exec(`UPDATE obligations SET provider_id = 're_known' WHERE id = 'refund:0000030'`)
		err := pgx.BeginTxFunc(t.Context(), e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			if rowByRow {
				_, err := e.s.applyTransitionsRowByRow(t.Context(), tx, ts, "bench", now)
				return err
			}
			_, _, err := e.s.applyTransitions(t.Context(), tx, ts, "bench", now)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := e.pool.Query(t.Context(), `SELECT concat_ws(' ', id, state, coalesce(provider_id, '-'),
			coalesce(paid_at::text, '-'), coalesce(lease_expires_at::text, '-'), updated_at = $1)
			FROM obligations ORDER BY id`, now)
		if err != nil {
			t.Fatal(err)
		}
		obs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		rows, err = e.pool.Query(t.Context(), `SELECT concat_ws(' ', obligation_id, from_state, to_state, provider_id, run_id, at)
			FROM reconcile.transitions ORDER BY obligation_id`)
		if err != nil {
			t.Fatal(err)
		}
		audit, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(audit) != 47 {
			t.Errorf("audit rows = %d, want 47 (50 less 3 skipped)", len(audit))
		}
		return append(obs, audit...)
	}
	if diff := cmp.Diff(outcome(false), outcome(true)); diff != "" {
		t.Errorf("batched vs row by row (-batched +row by row):\n%s", diff)
	}
}
