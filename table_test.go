package reconcile

import (
	"strings"
	"testing"
)

// A value the configuration does not map is never a known state, even
// when it spells a canonical name that is mapped to another value: no
// rule of the matcher may act on it, and the store refuses to move it.
func TestCanonicalUnmapped(t *testing.T) {
	team := DefaultObligationTable()
	team.States[Paid], team.States[Executing] = "settled", "running"
	for _, tc := range []struct {
		name  string
		table ObligationTable
		raw   string
		want  State
	}{
		{"mapped by default", DefaultObligationTable(), "PAID", Paid},
		{"mapped by the team", team, "settled", Paid},
		{"unknown value", team, "CANCELLED", "CANCELLED"},
		{"trailing blank", DefaultObligationTable(), "CONFIRMATION_UNKNOWN ", "CONFIRMATION_UNKNOWN "},
		{"other case", DefaultObligationTable(), "paid", "paid"},
		{"canonical name mapped elsewhere", team, "PAID", UnmappedPrefix + "PAID"},
		{"canonical name of a moved state", team, "EXECUTING", UnmappedPrefix + "EXECUTING"},
		{"empty", DefaultObligationTable(), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.table.Canonical(tc.raw)
			if got != tc.want {
				t.Errorf("Canonical(%q) = %q, want %q", tc.raw, got, tc.want)
			}
			if got.Known() && tc.table.Raw(got) != tc.raw {
				t.Errorf("Canonical(%q) = %q is known but maps back to %q", tc.raw, got, tc.table.Raw(got))
			}
		})
	}
}

func TestCheckTypes(t *testing.T) {
	table := DefaultObligationTable()
	if err := table.CheckTypes("obligations", ReferenceObligationTypes()); err != nil {
		t.Fatalf("CheckTypes(reference) = %v, want nil", err)
	}
	enum := ColumnType{Name: `"payments"."cmd_state"`, Base: `"payments"."cmd_state"`, Kind: TypeEnum, Display: "payments.cmd_state"}
	uuid := ColumnType{Name: `"pg_catalog"."uuid"`, Base: `"pg_catalog"."uuid"`, Kind: TypeUUID, Display: "uuid"}
	for _, tc := range []struct {
		name   string
		change func(*ObligationTypes)
		want   []string // substrings of the error; nil: none
	}{
		{"enum state", func(ts *ObligationTypes) { ts.State = enum }, nil},
		{"uuid id", func(ts *ObligationTypes) { ts.ID = uuid }, nil},
		{"enum kind, read as text", func(ts *ObligationTypes) { ts.Kind = enum }, nil},
		{"enum id", func(ts *ObligationTypes) { ts.ID = enum },
			[]string{`obligations.columns.id: column "id" is payments.cmd_state`, "string, uuid, integer"}},
		{"uuid provider_id", func(ts *ObligationTypes) { ts.ProviderID = uuid },
			[]string{"obligations.columns.provider_id", "want one of string"}},
		{"text amount", func(ts *ObligationTypes) { ts.Amount = ReferenceObligationTypes().ID },
			[]string{"obligations.columns.amount", "is text"}},
		{"unknown type", func(ts *ObligationTypes) { ts.PaidAt = ColumnType{} },
			[]string{"obligations.columns.paid_at", "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			types := ReferenceObligationTypes()
			tc.change(&types)
			err := table.CheckTypes("obligations", types)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckTypes(%s) = %v, want nil", tc.name, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckTypes(%s) = nil, want an error containing %q", tc.name, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckTypes(%s) = %q, want it to contain %q", tc.name, err, w)
				}
			}
		})
	}
	if err := table.CheckTypes("obligations", ObligationTypes{}); err == nil ||
		strings.Count(err.Error(), "unknown") != 14 {
		t.Errorf("CheckTypes(zero) = %v, want all 14 columns' types unknown", err)
	}
}
