package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
)

// PrivilegeError names every privilege a pass needs that the database role
// lacks (docs/design.md, "Privileges").
type PrivilegeError struct {
	Role string
	// Missing are the privileges, each as GRANT would name it:
	// "UPDATE (paid_at) on public.obligations".
	Missing []string
}

func (e *PrivilegeError) Error() string {
	return fmt.Sprintf("database role %q lacks what a run needs: %s (README.md, \"Database privileges\", gives the GRANT statements)",
		e.Role, strings.Join(e.Missing, "; "))
}

// Writable are the obligations columns a pass that is not a dry run
// updates (docs/design.md, "States and who moves them").
func Writable(c reconcile.ObligationColumns) []string {
	return []string{c.State, c.ProviderID, c.PaidAt, c.UpdatedAt}
}

// readable are every mapped column: a pass reads them all, the account
// column too when one is mapped (it is optional: a table without one is
// the platform's alone).
func readable(c reconcile.ObligationColumns) []string {
	cols := []string{c.ID, c.Kind, c.IdempotencyKey, c.Provider, c.ProviderID, c.TargetID, c.Amount, c.Currency,
		c.State, c.LeaseOwner, c.LeaseExpiresAt, c.CreatedAt, c.UpdatedAt, c.PaidAt}
	if c.Account != "" {
		cols = append(cols, c.Account)
	}
	return cols
}

// CheckPrivileges asks the catalogue (has_table_privilege and its kin)
// whether the connected role holds every privilege a pass needs, before
// the pass makes any provider call (docs/design.md, "Privileges"): SELECT
// on every mapped column of the obligations table (the account column
// among them when one is mapped) and USAGE on its
// schema; unless dryRun, UPDATE on its state, provider id, paid-at and
// updated-at columns; USAGE on the schema reconcile, SELECT on its tables
// and, unless dryRun, INSERT and UPDATE on them (goose's and River's
// version tables but read) and USAGE on its sequences. River's other
// tables are the job queue's, whose workers need grants of their own
// (package queue names them); a pass does not touch them. Unless dryRun,
// TEMPORARY on the database: a pass stages rows in temporary tables,
// dropped at commit. Otherwise a pass deletes nothing and creates
// nothing: DELETE and CREATE are migrate's, not its.
//
// What does not exist is not reported here: the checks of the table
// (sources.Obligations.Check) and of the schema (CheckSchema) that follow
// say so in their own words.
func CheckPrivileges(ctx context.Context, pool *pgxpool.Pool, t reconcile.ObligationTable, dryRun bool) error {
	var role string
	if err := pool.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		return fmt.Errorf("check privileges: %w", err)
	}
	var missing []string
	m, err := obligationPrivileges(ctx, pool, t, dryRun)
	if err != nil {
		return fmt.Errorf("check privileges: %w", err)
	}
	missing = append(missing, m...)
	m, err = schemaPrivileges(ctx, pool, dryRun)
	if err != nil {
		return fmt.Errorf("check privileges: %w", err)
	}
	missing = append(missing, m...)
	if !dryRun {
		// The mirror's save and the apply stage their rows in temporary
		// tables, dropped at commit. PostgreSQL grants TEMPORARY to every
		// role by default; a database that revoked it fails here rather
		// than after the provider calls.
		var db string
		var temp bool
		if err := pool.QueryRow(ctx, `SELECT current_database(), has_database_privilege(current_database(), 'TEMPORARY')`).Scan(&db, &temp); err != nil {
			return fmt.Errorf("check privileges: %w", err)
		}
		if !temp {
			missing = append(missing, "TEMPORARY on database "+pgx.Identifier{db}.Sanitize())
		}
	}
	if len(missing) > 0 {
		return &PrivilegeError{Role: role, Missing: missing}
	}
	return nil
}

// obligationPrivileges are those of the obligations table the role lacks.
func obligationPrivileges(ctx context.Context, pool *pgxpool.Pool, t reconcile.ObligationTable, dryRun bool) ([]string, error) {
	var missing []string
	if t.Schema != "" {
		var exists, usage bool
		err := pool.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL,
			COALESCE(has_schema_privilege(to_regnamespace($1), 'USAGE'), false)`, pgx.Identifier{t.Schema}.Sanitize()).Scan(&exists, &usage)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, nil
		}
		if !usage {
			// Nothing in the schema can be reached without it; the
			// columns' grants are asked once it is given.
			return []string{"USAGE on schema " + t.Schema}, nil
		}
	}
	name := pgx.Identifier{t.Table}
	if t.Schema != "" {
		name = pgx.Identifier{t.Schema, t.Table}
	}
	var (
		oid   *uint32
		table string
	)
	err := pool.QueryRow(ctx, `SELECT c.oid, n.nspname || '.' || c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, name.Sanitize()).Scan(&oid, &table)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cols := readable(t.Columns)
	rows, err := pool.Query(ctx, `SELECT a.attname, has_column_privilege($1::oid, a.attnum, 'SELECT'),
		has_column_privilege($1::oid, a.attnum, 'UPDATE')
		FROM pg_attribute a WHERE a.attrelid = $1::oid AND a.attname = ANY($2) AND a.attnum > 0 AND NOT a.attisdropped`, *oid, cols)
	if err != nil {
		return nil, err
	}
	canSelect, canUpdate := map[string]bool{}, map[string]bool{}
	var (
		col    string
		sel, u bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&col, &sel, &u}, func() error {
		canSelect[col], canUpdate[col] = sel, u
		return nil
	}); err != nil {
		return nil, err
	}
	lacking := func(want []string, has map[string]bool) []string {
		var out []string
		for _, c := range want {
			if ok, exists := has[c]; exists && !ok && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
		return out
	}
	if l := lacking(cols, canSelect); len(l) > 0 {
		missing = append(missing, fmt.Sprintf("SELECT (%s) on %s", strings.Join(l, ", "), table))
	}
	if !dryRun {
		if l := lacking(Writable(t.Columns), canUpdate); len(l) > 0 {
			missing = append(missing, fmt.Sprintf("UPDATE (%s) on %s", strings.Join(l, ", "), table))
		}
	}
	return missing, nil
}

// River's relations in the schema reconcile all begin with riverPrefix;
// riverMigrationTable is River's version table, which CheckSchema reads
// as it reads goose's.
const (
	riverPrefix         = "river_"
	riverMigrationTable = "river_migration"
)

// schemaPrivileges are those of the schema reconcile the role lacks: of
// the reconciler's tables, and SELECT on River's version table, which
// CheckSchema reads (docs/design.md, "Privileges").
func schemaPrivileges(ctx context.Context, pool *pgxpool.Pool, dryRun bool) ([]string, error) {
	var exists, usage bool
	if err := pool.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL,
		COALESCE(has_schema_privilege(to_regnamespace($1), 'USAGE'), false)`, Schema).Scan(&exists, &usage); err != nil {
		return nil, err
	}
	if !exists {
		return nil, nil // not migrated: CheckSchema says so
	}
	if !usage {
		return []string{"USAGE on schema " + Schema}, nil
	}
	// Tables, and the sequences of their bigserial ids. goose's version
	// table is only read by a pass.
	rows, err := pool.Query(ctx, `SELECT c.relname, c.relkind::text,
		CASE WHEN c.relkind <> 'S' THEN has_table_privilege(c.oid, 'SELECT') END IS NOT FALSE,
		CASE WHEN c.relkind <> 'S' THEN has_table_privilege(c.oid, 'INSERT') END IS NOT FALSE,
		CASE WHEN c.relkind <> 'S' THEN has_table_privilege(c.oid, 'UPDATE') END IS NOT FALSE,
		CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'USAGE') END IS NOT FALSE
		FROM pg_class c WHERE c.relnamespace = to_regnamespace($1) AND c.relkind IN ('r', 'p', 'S')
		ORDER BY c.relkind DESC, c.relname`, Schema)
	if err != nil {
		return nil, err
	}
	byPriv := map[string][]string{}
	var (
		rel, kind           string
		sel, ins, upd, uses bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&rel, &kind, &sel, &ins, &upd, &uses}, func() error {
		if strings.HasPrefix(rel, riverPrefix) && rel != riverMigrationTable {
			// River's job queue is the workers', whose grants package
			// queue names; a pass does not touch it.
			return nil
		}
		if kind == "S" {
			// goose's own id sequence is migrate's.
			if !dryRun && !uses && !strings.HasPrefix(Schema+"."+rel, versionTable+"_") {
				byPriv["USAGE on sequence"] = append(byPriv["USAGE on sequence"], Schema+"."+rel)
			}
			return nil
		}
		if !sel {
			byPriv["SELECT on"] = append(byPriv["SELECT on"], Schema+"."+rel)
		}
		if dryRun || Schema+"."+rel == versionTable || rel == riverMigrationTable {
			return nil
		}
		if !ins {
			byPriv["INSERT on"] = append(byPriv["INSERT on"], Schema+"."+rel)
		}
		if !upd {
			byPriv["UPDATE on"] = append(byPriv["UPDATE on"], Schema+"."+rel)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var missing []string
	for _, p := range []string{"SELECT on", "INSERT on", "UPDATE on", "USAGE on sequence"} {
		if rels := byPriv[p]; len(rels) > 0 {
			missing = append(missing, p+" "+strings.Join(rels, ", "))
		}
	}
	return missing, nil
}
