// Package storetest helps tests prove what the store wrote, or that
// nothing was written at all (a dry run).
package storetest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"reconcile"
)

// Querier is what Take reads through: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Snapshot is the content of every table of the reconcile schema and of the
// obligations table, and the positions of the reconcile schema's
// sequences. Two snapshots compare with cmp.Diff or reflect.DeepEqual.
type Snapshot struct {
	// Tables maps a table's qualified name to its rows, each as PostgreSQL's
	// text form of the row, sorted.
	Tables map[string][]string
	// Sequences maps a sequence's qualified name to its last value (0 if
	// never used). Sequences are not transactional: a rolled-back insert
	// still moves them, so compare them only where nothing was attempted.
	Sequences map[string]int64
}

// Take snapshots the database behind q. obligations names the obligations
// table; its zero value means the reference table.
func Take(tb testing.TB, q Querier, obligations reconcile.ObligationTable) Snapshot {
	tb.Helper()
	ctx := context.Background()
	if obligations.Table == "" {
		obligations = reconcile.DefaultObligationTable()
	}
	tables := []pgx.Identifier{{obligations.Table}}
	if obligations.Schema != "" {
		tables[0] = pgx.Identifier{obligations.Schema, obligations.Table}
	}
	rows, err := q.Query(ctx, `SELECT schemaname, tablename FROM pg_tables WHERE schemaname = 'reconcile' ORDER BY 2`)
	if err != nil {
		tb.Fatalf("storetest: list tables: %v", err)
	}
	var schema, table string
	if _, err := pgx.ForEachRow(rows, []any{&schema, &table}, func() error {
		tables = append(tables, pgx.Identifier{schema, table})
		return nil
	}); err != nil {
		tb.Fatalf("storetest: list tables: %v", err)
	}
	snap := Snapshot{Tables: map[string][]string{}, Sequences: map[string]int64{}}
	for _, t := range tables {
		name := t.Sanitize()
		rows, err := q.Query(ctx, `SELECT t::text FROM `+name+` t ORDER BY 1`)
		if err != nil {
			tb.Fatalf("storetest: read %s: %v", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			tb.Fatalf("storetest: read %s: %v", name, err)
		}
		snap.Tables[name] = lines
	}
	rows, err = q.Query(ctx, `SELECT schemaname || '.' || sequencename, coalesce(last_value, 0)
		FROM pg_sequences WHERE schemaname = 'reconcile'`)
	if err != nil {
		tb.Fatalf("storetest: read sequences: %v", err)
	}
	var (
		seq  string
		last int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&seq, &last}, func() error {
		snap.Sequences[seq] = last
		return nil
	}); err != nil {
		tb.Fatalf("storetest: read sequences: %v", err)
	}
	return snap
}
