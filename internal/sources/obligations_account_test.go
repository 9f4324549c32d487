package sources_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/sources"
)

// oblAccounts are the accounts of oblFixture's rows in the account tests:
// NULL (absent here) and ” are the platform's own. In the window's scope
// are two of acct_A's, one of acct_B's, and the platform's NULL one and ”
// one; named beside them are one of acct_A's, one of acct_B's and two of
// the platform's.
var oblAccounts = map[string]string{
	"z-old-executing": "acct_A", "y-old-unknown": "acct_A", "x-old-paid": "acct_A",
	"r-updated-in-window": "acct_B", "w-old-paid-named": "acct_B",
	"t-created-before-to": "", "o-old-approved": "",
}

// oblAccountNamed names x (acct_A), p (the platform's, NULL), o (the
// platform's, ”) and, by its key, w (acct_B).
var oblAccountNamed = sources.Named{IDs: []string{"x-old-paid", "p-old-failed", "o-old-approved"}, Keys: []string{"key-w"}}

// oblAccountManyNamed names what oblAccountNamed names among more names
// than Read and ReadNamed let the planner weigh: they take statements of
// their own, which must read the same rows.
var oblAccountManyNamed = func() sources.Named {
	n := sources.Named{IDs: slices.Clone(oblAccountNamed.IDs), Keys: slices.Clone(oblAccountNamed.Keys)}
	for i := range 100_001 {
		n.ProviderIDs = append(n.ProviderIDs, fmt.Sprintf("ch_absent_%d", i))
	}
	return n
}()

// oblAccountTable copies the reference table with oblFixture's rows into
// schema, with an account column of type typ holding oblAccounts, and
// returns its mapping.
func oblAccountTable(tb testing.TB, pool *pgxpool.Pool, schema, typ string) reconcile.ObligationTable {
	tb.Helper()
	oblExec(tb, pool, `CREATE SCHEMA `+schema)
	oblExec(tb, pool, `CREATE TABLE `+schema+`.obligations (LIKE public.obligations INCLUDING ALL)`)
	oblExec(tb, pool, `INSERT INTO `+schema+`.obligations SELECT * FROM public.obligations`)
	oblExec(tb, pool, `ALTER TABLE `+schema+`.obligations ADD COLUMN stripe_account `+typ)
	for id, acct := range oblAccounts {
		oblExec(tb, pool, `UPDATE `+schema+`.obligations SET stripe_account = $1 WHERE id = $2`, acct, id)
	}
	table := reconcile.DefaultObligationTable()
	table.Schema = schema
	table.Columns.Account = "stripe_account"
	return table
}

// Each view reads exactly its account's obligations, filled with the
// account: a connected account's where the column holds its id, the
// platform's where it is NULL or empty; the reader itself reads them all.
// So for every text-like type of the column.
func TestObligationsForAccount(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	pgtest.InsertObligations(t, pool, oblFixture()...)
	oblExec(t, pool, `CREATE DOMAIN acct_id AS varchar(64) CHECK (VALUE = '' OR VALUE LIKE 'acct\_%')`)
	w := reconcile.Window{From: oblFrom, To: oblTo}
	whole := []string{"o-old-approved", "p-old-failed", "r-updated-in-window", "t-created-before-to", "v-created-at-from",
		"w-old-paid-named", "x-old-paid", "y-old-unknown", "z-old-executing"}
	for i, typ := range []string{"text", "varchar(40)", "char(40)", "acct_id"} {
		t.Run(typ, func(t *testing.T) {
			schema := fmt.Sprintf("acct_%d", i)
			r := newObligationsReader(t, pool, oblAccountTable(t, pool, schema, typ))
			// States the configuration does not map, for Census: two in the
			// window (the platform's t, acct_B's r), one before it.
			oblExec(t, pool, `UPDATE `+schema+`.obligations SET state = 'CANCELLED' WHERE id IN ('t-created-before-to', 'r-updated-in-window')`)
			oblExec(t, pool, `UPDATE `+schema+`.obligations SET state = 'VOID' WHERE id = 'p-old-failed'`)
			// The views come first: the first of them reads the catalogue,
			// for the reader and the others as well.
			views := map[string]*sources.Obligations{}
			for _, acct := range []string{"", "acct_A", "acct_B", "acct_C"} {
				views[acct] = r.ForAccount(acct)
			}
			if (r.Types() != reconcile.ObligationTypes{}) {
				t.Fatal("the reader read the catalogue before any call")
			}
			for _, tt := range []struct {
				acct        string
				read, named []string
				oldest      time.Time
				census      sources.Census
			}{
				{"", []string{"o-old-approved", "p-old-failed", "t-created-before-to", "v-created-at-from"},
					[]string{"o-old-approved", "p-old-failed"}, oblFrom,
					sources.Census{CreatedA: 6, CreatedB: 8, Unmapped: map[string]int{"CANCELLED": 1}}},
				{"acct_A", []string{"x-old-paid", "y-old-unknown", "z-old-executing"}, []string{"x-old-paid"}, oblOld,
					sources.Census{CreatedA: 3, CreatedB: 3}},
				{"acct_B", []string{"r-updated-in-window", "w-old-paid-named"}, []string{"w-old-paid-named"}, oblOld,
					sources.Census{CreatedA: 2, CreatedB: 2, Unmapped: map[string]int{"CANCELLED": 1}}},
				{"acct_C", []string{}, []string{}, time.Time{}, sources.Census{}},
			} {
				v := views[tt.acct]
				got, err := v.Read(t.Context(), w, oblAccountNamed)
				if err != nil {
					t.Fatalf("Read of %q: %v", tt.acct, err)
				}
				if diff := cmp.Diff(tt.read, oblIDs(got)); diff != "" {
					t.Errorf("Read of %q (-want +got):\n%s", tt.acct, diff)
				}
				for _, o := range got {
					if o.Account != tt.acct {
						t.Errorf("Read of %q: %s has Account %q", tt.acct, o.ID, o.Account)
					}
				}
				got, err = v.ReadNamed(t.Context(), oblAccountNamed)
				if err != nil {
					t.Fatalf("ReadNamed of %q: %v", tt.acct, err)
				}
				if diff := cmp.Diff(tt.named, oblIDs(got)); diff != "" {
					t.Errorf("ReadNamed of %q (-want +got):\n%s", tt.acct, diff)
				}
				if got, err = v.Read(t.Context(), w, oblAccountManyNamed); err != nil {
					t.Fatalf("Read of %q, many names: %v", tt.acct, err)
				}
				if diff := cmp.Diff(tt.read, oblIDs(got)); diff != "" {
					t.Errorf("Read of %q, many names (-want +got):\n%s", tt.acct, diff)
				}
				if got, err = v.ReadNamed(t.Context(), oblAccountManyNamed); err != nil {
					t.Fatalf("ReadNamed of %q, many names: %v", tt.acct, err)
				}
				if diff := cmp.Diff(tt.named, oblIDs(got)); diff != "" {
					t.Errorf("ReadNamed of %q, many names (-want +got):\n%s", tt.acct, diff)
				}
				oldest, err := v.Oldest(t.Context(), w)
				if err != nil || !oldest.Equal(tt.oldest) {
					t.Errorf("Oldest of %q = %v, %v; want %v", tt.acct, oldest, err, tt.oldest)
				}
				// Created before the window and before its end; unmapped in
				// it, by state.
				c, err := v.Census(t.Context(), oblFrom, oblTo, w, nil)
				if err != nil {
					t.Fatalf("Census of %q: %v", tt.acct, err)
				}
				if diff := cmp.Diff(tt.census, c); diff != "" {
					t.Errorf("Census of %q (-want +got):\n%s", tt.acct, diff)
				}
			}
			c, err := r.Census(t.Context(), oblFrom, oblTo, w, nil)
			if diff := cmp.Diff(sources.Census{CreatedA: 11, CreatedB: 13, Unmapped: map[string]int{"CANCELLED": 2}}, c); err != nil || diff != "" {
				t.Errorf("the reader's Census: %v (-want +got):\n%s", err, diff)
			}
			if r.Types().ID.Name == "" {
				t.Error("the views' Check left the reader without the column types: they do not share them")
			}

			all, err := r.Read(t.Context(), w, oblAccountNamed)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(whole, oblIDs(all)); diff != "" {
				t.Errorf("the reader's Read (-want +got):\n%s", diff)
			}
			for _, o := range all {
				if o.Account != oblAccounts[o.ID] {
					t.Errorf("the reader read %s with Account %q, want %q", o.ID, o.Account, oblAccounts[o.ID])
				}
			}
			// Get is global, from a view too.
			if o, err := views["acct_A"].Get(t.Context(), "w-old-paid-named"); err != nil || o.Account != "acct_B" {
				t.Errorf("acct_A's view's Get of acct_B's w-old-paid-named = %+v, %v; want it, with its account", o, err)
			}
		})
	}
}

// A row whose account is neither NULL, empty nor an account id would be
// read by no view: the read fails, naming the row and the field.
func TestObligationsRefusesForeignAccount(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	pgtest.InsertObligations(t, pool, oblFixture()...)
	table := oblAccountTable(t, pool, "foreign_acct", "text")
	oblExec(t, pool, `UPDATE foreign_acct.obligations SET stripe_account = 'acct_A ' WHERE id = 'v-created-at-from'`)
	_, err := newObligationsReader(t, pool, table).Read(t.Context(), reconcile.Window{From: oblFrom, To: oblTo}, sources.Named{})
	if err == nil || !strings.Contains(err.Error(), `obligation "v-created-at-from": obligations.columns.account: "acct_A " is not a Stripe account id`) {
		t.Errorf("Read = %v, want the row refused", err)
	}
}

// The account column must exist and be text-like; the error names the
// field, as the other columns' do.
func TestObligationsCheckAccountColumn(t *testing.T) {
	pool, _ := pgtest.NewObligations(t)
	for i, tc := range []struct {
		typ, column string
		want        []string
	}{
		{"integer", "stripe_account", []string{"obligations.columns.account", `column "stripe_account" is integer, want one of text, varchar, char`}},
		{"uuid", "stripe_account", []string{"obligations.columns.account", `"stripe_account" is uuid`}},
		{"text", "account_id", []string{"obligations.columns.account", `column "account_id" does not exist`}},
	} {
		t.Run(tc.typ+" "+tc.column, func(t *testing.T) {
			schema := fmt.Sprintf("acctcheck_%d", i)
			oblExec(t, pool, `CREATE SCHEMA `+schema)
			oblExec(t, pool, `CREATE TABLE `+schema+`.obligations (LIKE public.obligations INCLUDING ALL)`)
			oblExec(t, pool, `ALTER TABLE `+schema+`.obligations ADD COLUMN stripe_account `+tc.typ)
			table := reconcile.DefaultObligationTable()
			table.Schema, table.Columns.Account = schema, tc.column
			r := newObligationsReader(t, pool, table)
			for name, check := range map[string]func() error{
				"Check": func() error { return r.Check(t.Context()) },
				"a view's Read": func() error {
					_, err := r.ForAccount("acct_A").Read(t.Context(), reconcile.Window{}, sources.Named{})
					return err
				},
				"the platform's Read": func() error {
					_, err := r.ForAccount("").Read(t.Context(), reconcile.Window{}, sources.Named{})
					return err
				},
			} {
				err := check()
				for _, w := range tc.want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("%s = %v, want it to contain %q", name, err, w)
					}
				}
			}
		})
	}
}

// With no account column mapped every obligation is the platform's: the
// platform's view reads the whole table, a connected account's reads
// nothing and asks the database nothing (its pool here is closed).
func TestObligationsForAccountWithoutColumn(t *testing.T) {
	pool, url := pgtest.NewObligations(t)
	pgtest.InsertObligations(t, pool, oblFixture()...)
	w := reconcile.Window{From: oblFrom, To: oblTo}
	r := newObligationsReader(t, pool, reconcile.DefaultObligationTable())
	want, err := r.Read(t.Context(), w, oblAccountNamed)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.ForAccount("").Read(t.Context(), w, oblAccountNamed)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" || len(got) != len(oblInScope)+4 {
		t.Errorf("the platform's view of a table without an account column (-reader +view):\n%s", diff)
	}

	closed, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	c := newObligationsReader(t, closed, reconcile.DefaultObligationTable())
	v := c.ForAccount("acct_A")
	if obs, err := v.Read(t.Context(), w, oblAccountNamed); obs != nil || err != nil {
		t.Errorf("acct_A's Read = %v, %v; want nothing, asked of nobody", obs, err)
	}
	if obs, err := v.ReadNamed(t.Context(), oblAccountNamed); obs != nil || err != nil {
		t.Errorf("acct_A's ReadNamed = %v, %v; want nothing", obs, err)
	}
	if oldest, err := v.Oldest(t.Context(), w); !oldest.IsZero() || err != nil {
		t.Errorf("acct_A's Oldest = %v, %v; want the zero time", oldest, err)
	}
	if _, err := c.ForAccount("").Read(t.Context(), w, oblAccountNamed); err == nil {
		t.Error("the platform's Read on a closed pool succeeded: the test proves nothing of acct_A's")
	}
}
