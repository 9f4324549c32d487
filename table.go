package reconcile

import (
	"fmt"
	"regexp"
)

// ObligationTable maps the reconciler's view of obligations onto a team's
// own table: its name, its columns and its state values. The defaults are
// reference schema (docs/design.md, "Obligations"). Names are validated here and quoted
// where SQL is built (pgx.Identifier); they are never pasted into SQL raw.
type ObligationTable struct {
	Schema  string            `yaml:"schema" json:"schema"` // empty: the search path
	Table   string            `yaml:"table" json:"table"`
	Columns ObligationColumns `yaml:"columns" json:"columns"`
	// States maps each canonical state to the value the table uses.
	States map[State]string `yaml:"states" json:"states"`
}

// ObligationColumns names the columns of the obligations table.
type ObligationColumns struct {
	ID             string `yaml:"id" json:"id"`
	Kind           string `yaml:"kind" json:"kind"`
	IdempotencyKey string `yaml:"idempotency_key" json:"idempotency_key"`
	Provider       string `yaml:"provider" json:"provider"`
	ProviderID     string `yaml:"provider_id" json:"provider_id"`
	TargetID       string `yaml:"target_id" json:"target_id"`
	Amount         string `yaml:"amount" json:"amount"`
	Currency       string `yaml:"currency" json:"currency"`
	State          string `yaml:"state" json:"state"`
	LeaseOwner     string `yaml:"lease_owner" json:"lease_owner"`
	LeaseExpiresAt string `yaml:"lease_expires_at" json:"lease_expires_at"`
	CreatedAt      string `yaml:"created_at" json:"created_at"`
	UpdatedAt      string `yaml:"updated_at" json:"updated_at"`
	PaidAt         string `yaml:"paid_at" json:"paid_at"`
	// Account, optional, is the column naming the Stripe connected
	// account (acct_…) an obligation moves money on; empty: the table has
	// none, and every obligation is the platform's. A NULL or empty value
	// is the platform's too (docs/design.md, "Accounts").
	Account string `yaml:"account,omitempty" json:"account,omitempty"`
}

// DefaultObligationTable is the reference schema (docs/design.md, "Obligations").
func DefaultObligationTable() ObligationTable {
	states := make(map[State]string, len(States))
	for _, s := range States {
		states[s] = string(s)
	}
	return ObligationTable{
		Table: "obligations",
		Columns: ObligationColumns{
			ID: "id", Kind: "kind", IdempotencyKey: "idempotency_key", Provider: "provider",
			ProviderID: "provider_id", TargetID: "target_id", Amount: "amount", Currency: "currency",
			State: "state", LeaseOwner: "lease_owner", LeaseExpiresAt: "lease_expires_at",
			CreatedAt: "created_at", UpdatedAt: "updated_at", PaidAt: "paid_at",
		},
		States: states,
	}
}

// identifierRE accepts plain SQL identifiers: letters, digits, underscores,
// not starting with a digit, at most 63 bytes (PostgreSQL's NAMEDATALEN-1).
var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidIdentifier reports whether s is acceptable as a table, schema or
// column name from configuration.
func ValidIdentifier(s string) bool { return identifierRE.MatchString(s) }

// Validate checks every name and state value. Errors name the field as it
// is spelled in the configuration file, under prefix (e.g. "obligations").
func (t ObligationTable) Validate(prefix string) error {
	if t.Schema != "" && !ValidIdentifier(t.Schema) {
		return fmt.Errorf("%s.schema: %q is not a valid SQL identifier", prefix, t.Schema)
	}
	if !ValidIdentifier(t.Table) {
		return fmt.Errorf("%s.table: %q is not a valid SQL identifier", prefix, t.Table)
	}
	c := t.Columns
	seen := map[string]string{}
	for _, col := range []struct{ field, name string }{
		{"id", c.ID}, {"kind", c.Kind}, {"idempotency_key", c.IdempotencyKey}, {"provider", c.Provider},
		{"provider_id", c.ProviderID}, {"target_id", c.TargetID}, {"amount", c.Amount}, {"currency", c.Currency},
		{"state", c.State}, {"lease_owner", c.LeaseOwner}, {"lease_expires_at", c.LeaseExpiresAt},
		{"created_at", c.CreatedAt}, {"updated_at", c.UpdatedAt}, {"paid_at", c.PaidAt},
		{"account", c.Account},
	} {
		if col.field == "account" && col.name == "" {
			continue // optional
		}
		if !ValidIdentifier(col.name) {
			return fmt.Errorf("%s.columns.%s: %q is not a valid SQL identifier", prefix, col.field, col.name)
		}
		if other, dup := seen[col.name]; dup {
			return fmt.Errorf("%s.columns.%s: %q is already the column of %s", prefix, col.field, col.name, other)
		}
		seen[col.name] = col.field
	}
	values := map[string]State{}
	for _, s := range States {
		v, ok := t.States[s]
		if !ok || v == "" {
			return fmt.Errorf("%s.states.%s: missing", prefix, s)
		}
		if other, dup := values[v]; dup {
			return fmt.Errorf("%s.states.%s: %q is already the value of %s", prefix, s, v, other)
		}
		values[v] = s
	}
	for s := range t.States {
		if !s.Known() {
			return fmt.Errorf("%s.states: unknown state %q (want one of %v)", prefix, s, States)
		}
	}
	return nil
}

// Known reports whether s is one of the canonical states.
func (s State) Known() bool {
	for _, k := range States {
		if s == k {
			return true
		}
	}
	return false
}

// Canonical maps a value read from the table to its canonical state. A
// value the configuration does not map is never a known state, so that no
// rule of the matcher acts on it and the store never transitions it: it
// maps to itself, or, when it happens to spell a canonical name that the
// configuration maps to another value (a stray "PAID" in a table whose
// PAID is "settled"), to UnmappedPrefix + itself.
func (t ObligationTable) Canonical(raw string) State {
	for s, v := range t.States {
		if v == raw {
			return s
		}
	}
	if s := State(raw); s.Known() {
		return UnmappedPrefix + s
	}
	return State(raw)
}

// UnmappedPrefix marks the canonical state of a value that spells a
// canonical name without being the value the configuration maps it to.
const UnmappedPrefix State = "unmapped:"

// Raw maps a canonical state to the value the table stores.
func (t ObligationTable) Raw(s State) string {
	if v, ok := t.States[s]; ok {
		return v
	}
	return string(s)
}
