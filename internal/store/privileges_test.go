package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/pgtest"
)

var roleWordRE = regexp.MustCompile(`\breconciler\b`)

// rolePool creates a login role of its own on pool's database (dburl),
// holding exactly grants (SQL naming the role "reconciler"), dropped at
// cleanup, and returns a pool connected as it.
func rolePool(t *testing.T, pool *pgxpool.Pool, dburl, grants string) *pgxpool.Pool {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	name := "reconciler_" + hex.EncodeToString(b[:4])
	// A password of its own: a server that asks for one refuses a role
	// with none; under trust it is not asked.
	password := hex.EncodeToString(b[4:])
	sql := "CREATE ROLE " + name + " LOGIN PASSWORD '" + password + "';\n" + roleWordRE.ReplaceAllString(grants, name)
	if _, err := pool.Exec(t.Context(), sql); err != nil {
		t.Fatalf("grant: %v\n%s", err, sql)
	}
	t.Cleanup(func() {
		// In the test's database, before pgtest drops it: DROP OWNED
		// revokes what was granted there.
		if _, err := pool.Exec(context.Background(), "DROP OWNED BY "+name+"; DROP ROLE "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(dburl)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	rp, err := pgxpool.New(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rp.Close)
	return rp
}

// An account column, when one is mapped, is read by every pass: SELECT on
// it is asked for with the other mapped columns' (docs/design.md,
// "Privileges"); unmapped, it is not asked for.
func TestCheckPrivilegesAccountColumn(t *testing.T) {
	pool, dburl := pgtest.NewMigrated(t, SchemaDigest(), Migrate)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "ALTER TABLE obligations ADD COLUMN stripe_account text"); err != nil {
		t.Fatal(err)
	}
	// Every reference column, for reading and for the four a pass writes,
	// and what a pass needs of the schema reconcile; not the account.
	const grants = `GRANT SELECT (id, kind, idempotency_key, provider, provider_id, target_id, amount, currency,
			state, lease_owner, lease_expires_at, created_at, updated_at, paid_at) ON obligations TO reconciler;
		GRANT UPDATE (state, provider_id, paid_at, updated_at) ON obligations TO reconciler;
		GRANT USAGE ON SCHEMA reconcile TO reconciler;
		GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA reconcile TO reconciler;
		GRANT USAGE ON ALL SEQUENCES IN SCHEMA reconcile TO reconciler;`
	role := rolePool(t, pool, dburl, grants)

	plain := reconcile.DefaultObligationTable()
	mapped := plain
	mapped.Columns.Account = "stripe_account"
	for _, dryRun := range []bool{false, true} {
		if err := CheckPrivileges(ctx, role, plain, dryRun); err != nil {
			t.Errorf("no account column mapped, dry run %t: %v; want nil", dryRun, err)
		}
		err := CheckPrivileges(ctx, role, mapped, dryRun)
		var pe *PrivilegeError
		if !errors.As(err, &pe) || !slices.Equal(pe.Missing, []string{"SELECT (stripe_account) on public.obligations"}) {
			t.Errorf("account column mapped without its grant, dry run %t: %v; want SELECT (stripe_account) missing alone", dryRun, err)
		}
	}

	role = rolePool(t, pool, dburl, grants+"\nGRANT SELECT (stripe_account) ON obligations TO reconciler;")
	if err := CheckPrivileges(ctx, role, mapped, false); err != nil {
		t.Errorf("account column mapped and granted: %v; want nil", err)
	}
}

// A pass that writes stages rows in temporary tables (the mirror's save,
// the apply): a database that revoked TEMPORARY from PUBLIC fails the
// check, naming it, unless the role holds it itself; a dry run does not
// need it.
func TestCheckPrivilegesTemporary(t *testing.T) {
	pool, dburl := pgtest.NewMigrated(t, SchemaDigest(), Migrate)
	ctx := t.Context()
	var db string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "REVOKE TEMPORARY ON DATABASE "+pgx.Identifier{db}.Sanitize()+" FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	const grants = `GRANT SELECT ON obligations TO reconciler;
		GRANT UPDATE (state, provider_id, paid_at, updated_at) ON obligations TO reconciler;
		GRANT USAGE ON SCHEMA reconcile TO reconciler;
		GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA reconcile TO reconciler;
		GRANT USAGE ON ALL SEQUENCES IN SCHEMA reconcile TO reconciler;`
	role := rolePool(t, pool, dburl, grants)
	table := reconcile.DefaultObligationTable()
	if err := CheckPrivileges(ctx, role, table, true); err != nil {
		t.Errorf("dry run without TEMPORARY: %v; want nil", err)
	}
	err := CheckPrivileges(ctx, role, table, false)
	var pe *PrivilegeError
	if want := []string{"TEMPORARY on database " + pgx.Identifier{db}.Sanitize()}; !errors.As(err, &pe) || !slices.Equal(pe.Missing, want) {
		t.Errorf("without TEMPORARY: %v; want %q missing alone", err, want)
	}

	role = rolePool(t, pool, dburl, grants+"\nGRANT TEMPORARY ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO reconciler;")
	if err := CheckPrivileges(ctx, role, table, false); err != nil {
		t.Errorf("TEMPORARY granted to the role: %v; want nil", err)
	}
}
