package sources_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/sources"
)

// oblBenchRows is the size of the benchmark's obligations table.
const oblBenchRows = 1_000_000

// oblBenchStart is when the benchmark's obligations begin: one every 10s,
// so a million span about 116 days.
var oblBenchStart = time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)

// BenchmarkReadObligations reads a table of a million obligations (1 in
// 1,000 EXECUTING, the rest PAID; a third refunds naming their charge):
//   - all: a window covering the whole table, a million rows returned;
//   - all_named_1M: the same with every row's id, key and provider id
//     named too, as a pass over the whole window names them;
//   - window_3d_named_300k: a three-day window plus 100k ids, 100k keys and
//     100k provider ids named (a quarter of them absent), as a busy night's
//     listing names them;
//   - named_300k_generic_plan: the same through a pool whose sessions force
//     generic plans, under which = ANY(array) would compare every row with
//     every name; Read's SET LOCAL keeps it hashed.
//
// The table is written once with COPY. Run with
//
//	go test ./internal/sources -run '^$' -bench ReadObligations -benchtime 5x
func BenchmarkReadObligations(b *testing.B) {
	pool, dbURL := pgtest.NewObligations(b)
	ctx := context.Background()
	n, err := pool.CopyFrom(ctx, pgx.Identifier{"obligations"},
		[]string{"id", "kind", "idempotency_key", "provider", "provider_id", "target_id", "amount", "currency",
			"state", "lease_owner", "lease_expires_at", "created_at", "updated_at", "paid_at"},
		pgx.CopyFromSlice(oblBenchRows, oblBenchRow))
	if err != nil || n != oblBenchRows {
		b.Fatalf("copy obligations: %d rows, %v", n, err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE obligations"); err != nil {
		b.Fatalf("vacuum analyze: %v", err)
	}

	var named sources.Named
	for i := range 100_000 {
		// Every 3rd obligation by id, the next by key, the next by provider
		// id; i ≥ 75,000 names nothing that exists.
		g := i * 3
		if i >= 75_000 {
			g += 2 * oblBenchRows
		}
		named.IDs = append(named.IDs, oblBenchID(g))
		named.Keys = append(named.Keys, "key:"+oblBenchID(g+1))
		named.ProviderIDs = append(named.ProviderIDs, fmt.Sprintf("py_%d", g+2))
	}
	// What a pass over the whole table names: every obligation's id, key
	// and provider id, as a listing of the whole window finds them.
	var everything sources.Named
	for g := range oblBenchRows {
		everything.IDs = append(everything.IDs, oblBenchID(g))
		everything.Keys = append(everything.Keys, "key:"+oblBenchID(g))
		everything.ProviderIDs = append(everything.ProviderIDs, fmt.Sprintf("py_%d", g))
	}
	all := reconcile.Window{From: oblBenchStart, To: oblBenchStart.Add(oblBenchRows * 10 * time.Second)}
	threeDays := reconcile.Window{From: oblBenchStart.AddDate(0, 0, 50), To: oblBenchStart.AddDate(0, 0, 53)}

	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		b.Fatalf("parse url: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	generic, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatalf("generic pool: %v", err)
	}
	b.Cleanup(generic.Close)

	for _, bc := range []struct {
		name  string
		pool  *pgxpool.Pool
		w     reconcile.Window
		named sources.Named
	}{
		{"all", pool, all, sources.Named{}},
		{"all_named_1M", pool, all, everything},
		{"window_3d_named_300k", pool, threeDays, named},
		{"named_300k_generic_plan", generic, threeDays, named},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r, err := sources.NewObligations(bc.pool, reconcile.DefaultObligationTable())
			if err != nil {
				b.Fatal(err)
			}
			// As a pass does, before its reads: the catalogue is read once,
			// outside the timing.
			if err := r.Check(b.Context()); err != nil {
				b.Fatalf("Check: %v", err)
			}
			rows, iters := 0, 0
			for b.Loop() {
				obs, err := r.Read(b.Context(), bc.w, bc.named)
				if err != nil {
					b.Fatalf("Read: %v", err)
				}
				rows += len(obs)
				iters++
			}
			b.ReportMetric(float64(rows/iters), "rows/op")
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
		})
	}
}

func oblBenchID(g int) string {
	if g%3 == 0 {
		return fmt.Sprintf("refund:%08d:approved-request-1", g)
	}
	return fmt.Sprintf("charge:%08d:invoice", g)
}

// oblBenchRow is obligation g as COPY values, in the column order above.
func oblBenchRow(g int) ([]any, error) {
	id := oblBenchID(g)
	kind, target := "charge", any(nil)
	if g%3 == 0 {
		kind, target = "refund", fmt.Sprintf("ch_%d", g)
	}
	created := oblBenchStart.Add(time.Duration(g) * 10 * time.Second)
	state, paid := "PAID", any(created.Add(time.Minute))
	var owner, lease any
	if g%1000 == 0 {
		state, paid = "EXECUTING", nil
		owner, lease = "worker-7", created.Add(5*time.Minute)
	}
	return []any{id, kind, "key:" + id, "stripe", fmt.Sprintf("py_%d", g), target, int64(100 + g%100_000), "usd",
		state, owner, lease, created, created.Add(time.Minute), paid}, nil
}
