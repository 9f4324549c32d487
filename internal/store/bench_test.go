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
	q := s.sql()
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

// applyVariant is one way of applying a run's transitions.
type applyVariant struct {
	name  string
	apply func(ctx context.Context, tx pgx.Tx) (int, error)
}

// applyBench holds 100k CONFIRMATION_UNKNOWN obligations and both ways of
// marking them PAID.
type applyBench struct {
	e        *env
	n        int
	variants []applyVariant
}

func newApplyBench(b *testing.B) *applyBench {
	ab := &applyBench{e: newEnv(b, nil), n: 100_000}
	ts := benchData(b, ab.e, ab.n)
	now := t0()
	ab.variants = []applyVariant{
		{"batched", func(ctx context.Context, tx pgx.Tx) (int, error) {
			applied, _, err := ab.e.s.applyTransitions(ctx, tx, ts, "bench", now)
			return len(applied), err
		}},
		{"row_by_row", func(ctx context.Context, tx pgx.Tx) (int, error) {
			return ab.e.s.applyTransitionsRowByRow(ctx, tx, ts, "bench", now)
		}},
	}
	return ab
}

// reset puts every obligation back before its transition, outside the
// timer.
func (ab *applyBench) reset(b *testing.B) {
	b.StopTimer()
	defer b.StartTimer()
	ab.e.exec(`UPDATE obligations SET state = 'CONFIRMATION_UNKNOWN', provider_id = NULL, paid_at = NULL`)
	ab.e.exec(`TRUNCATE reconcile.transitions`)
	ab.e.exec(`VACUUM ANALYZE obligations`)
}

// run applies every transition in one transaction and returns how long it
// took.
func (ab *applyBench) run(b *testing.B, v applyVariant) time.Duration {
	ctx := context.Background()
	start := time.Now()
	var applied int
	err := pgx.BeginTxFunc(ctx, ab.e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var err error
		applied, err = v.apply(ctx, tx)
		return err
	})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatalf("%s: %v", v.name, err)
	}
	if applied != ab.n {
		b.Fatalf("%s applied %d, want %d", v.name, applied, ab.n)
	}
	return elapsed
}

// BenchmarkApplyTransitions applies 100k transitions in one transaction,
// batched (one UPDATE … FROM unnest with its audit INSERT) and row by row
// (an UPDATE and an INSERT per transition, a round trip each).
// cmd/reconcile-bench reads its batched and row_by_row results.
func BenchmarkApplyTransitions(b *testing.B) {
	ab := newApplyBench(b)
	for _, v := range ab.variants {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				ab.reset(b)
				ab.run(b, v)
			}
			b.ReportMetric(float64(ab.n)*float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
		})
	}
}

// BenchmarkApplyTransitionsInterleaved times both ways in every
// iteration, one right after the other, so that their ratio compares runs
// under the same load on a shared machine; ns/op is their sum.
func BenchmarkApplyTransitionsInterleaved(b *testing.B) {
	ab := newApplyBench(b)
	elapsed := make([]time.Duration, len(ab.variants))
	for range b.N {
		for i, v := range ab.variants {
			ab.reset(b)
			elapsed[i] += ab.run(b, v)
		}
	}
	batched, rowByRow := elapsed[0].Seconds(), elapsed[1].Seconds()
	b.ReportMetric(batched/float64(b.N), "batched-s/op")
	b.ReportMetric(rowByRow/float64(b.N), "row_by_row-s/op")
	b.ReportMetric(rowByRow/batched, "speedup")
}

// The row-by-row variant the benchmark compares with does what the
// batched one does, skips included; otherwise the comparison would be
// meaningless.
func TestRowByRowMatchesBatched(t *testing.T) {
	t.Parallel()
	now := t0()
	outcome := func(rowByRow bool) []string {
		e := newEnv(t, nil)
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
