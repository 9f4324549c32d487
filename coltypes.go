package reconcile

import (
	"fmt"
	"slices"
	"strings"
)

// TypeKind is the family of a column's type once domains are looked
// through. It decides how the column is read, compared and written: a
// team's table may use an enum or a uuid where the reference table has
// text, and SQL that compared everything as text would fail on the enum
// and could not use the team's indexes.
type TypeKind string

// The type families the reader and the store handle.
const (
	// TypeString is text, varchar, char, name and the like: any string
	// is a value of the type.
	TypeString TypeKind = "string"
	// TypeEnum is a PostgreSQL enum: only its labels are values.
	TypeEnum TypeKind = "enum"
	// TypeUUID is uuid.
	TypeUUID TypeKind = "uuid"
	// TypeInteger is int2, int4 or int8.
	TypeInteger TypeKind = "integer"
	// TypeNumeric is numeric, whatever its precision and scale.
	TypeNumeric TypeKind = "numeric"
	// TypeTimestamp is timestamp without time zone, read and written as
	// UTC whatever the session's TimeZone.
	TypeTimestamp TypeKind = "timestamp"
	// TypeTimestamptz is timestamp with time zone.
	TypeTimestamptz TypeKind = "timestamptz"
	// TypeOther is any other type; only columns read as text accept it.
	TypeOther TypeKind = "other"
)

// ColumnType is one column's type as the catalogue describes it. The names
// are built from the catalogue's own schema and type names, quoted as
// identifiers: they may be pasted into SQL as a cast target, which no
// string from the configuration ever is.
type ColumnType struct {
	// Name is the column's type, schema-qualified and quoted, without a
	// modifier ("pg_catalog"."varchar", "payments"."cmd_state"): what a
	// value written to the column is cast to. Without the modifier, so
	// that a cast never truncates a value to a varchar's length.
	Name string
	// Base is Name, or for a domain the type under it (through nested
	// domains): what a value compared with the column is cast to. A
	// comparison needs no domain check, untrusted input (ids named by
	// the provider) must not fail one, and the column's indexes are on
	// the base type's operators.
	Base string
	// Kind is Base's family.
	Kind TypeKind
	// Display is the type as PostgreSQL prints it, modifier included
	// ("character varying(20)"), for messages.
	Display string
}

// ObligationTypes are the types of the obligations table's columns, one
// per field of ObligationColumns. The reader (sources.Obligations.Check)
// reads them from the catalogue once; the store is handed the same value
// rather than reading the catalogue a second time.
type ObligationTypes struct {
	ID             ColumnType
	Kind           ColumnType
	IdempotencyKey ColumnType
	Provider       ColumnType
	ProviderID     ColumnType
	TargetID       ColumnType
	Amount         ColumnType
	Currency       ColumnType
	State          ColumnType
	LeaseOwner     ColumnType
	LeaseExpiresAt ColumnType
	CreatedAt      ColumnType
	UpdatedAt      ColumnType
	PaidAt         ColumnType
}

// ReferenceObligationTypes are the types of configs/obligations.sql: text,
// bigint and timestamptz. They are what SQL is built for until the
// catalogue has been read.
func ReferenceObligationTypes() ObligationTypes {
	text := ColumnType{Name: `"pg_catalog"."text"`, Base: `"pg_catalog"."text"`, Kind: TypeString, Display: "text"}
	tz := ColumnType{Name: `"pg_catalog"."timestamptz"`, Base: `"pg_catalog"."timestamptz"`, Kind: TypeTimestamptz,
		Display: "timestamp with time zone"}
	return ObligationTypes{
		ID: text, Kind: text, IdempotencyKey: text, Provider: text, ProviderID: text, TargetID: text,
		Amount:   ColumnType{Name: `"pg_catalog"."int8"`, Base: `"pg_catalog"."int8"`, Kind: TypeInteger, Display: "bigint"},
		Currency: text, State: text, LeaseOwner: text,
		LeaseExpiresAt: tz, CreatedAt: tz, UpdatedAt: tz, PaidAt: tz,
	}
}

// ColumnTypeRule is what one column of the obligations table may be: its
// configuration field, its column name, the type read, and the families
// accepted (nil: any, the column being only ever read as text).
type ColumnTypeRule struct {
	Field  string // as under obligations.columns: "amount", "paid_at"
	Column string
	Type   *ColumnType
	Kinds  []TypeKind
}

// idKinds are the families of a column compared with ids the provider
// names (metadata, events): a value that cannot be of the type is left out
// of the comparison, which only string, uuid and integer types allow for
// here.
var idKinds = []TypeKind{TypeString, TypeUUID, TypeInteger}

// TypeRules pairs every column of t with its type in types and the
// families it may have. provider_id is written with the provider's ids
// (re_…, ch_…), so it must hold any string; state is compared and written
// with the configured values, so it is a string or an enum.
func (t ObligationTable) TypeRules(types *ObligationTypes) []ColumnTypeRule {
	c := t.Columns
	times := []TypeKind{TypeTimestamp, TypeTimestamptz}
	return []ColumnTypeRule{
		{"id", c.ID, &types.ID, idKinds},
		{"kind", c.Kind, &types.Kind, nil},
		{"idempotency_key", c.IdempotencyKey, &types.IdempotencyKey, idKinds},
		{"provider", c.Provider, &types.Provider, nil},
		{"provider_id", c.ProviderID, &types.ProviderID, []TypeKind{TypeString}},
		{"target_id", c.TargetID, &types.TargetID, idKinds},
		{"amount", c.Amount, &types.Amount, []TypeKind{TypeInteger, TypeNumeric}},
		{"currency", c.Currency, &types.Currency, nil},
		{"state", c.State, &types.State, []TypeKind{TypeString, TypeEnum}},
		{"lease_owner", c.LeaseOwner, &types.LeaseOwner, nil},
		{"lease_expires_at", c.LeaseExpiresAt, &types.LeaseExpiresAt, times},
		{"created_at", c.CreatedAt, &types.CreatedAt, times},
		{"updated_at", c.UpdatedAt, &types.UpdatedAt, times},
		{"paid_at", c.PaidAt, &types.PaidAt, times},
	}
}

// CheckTypes reports every column whose type the reader or the store
// cannot handle, each named by its configuration field under prefix
// ("obligations.columns.amount: column "amount" is text, want one of
// integer, numeric"). A type never read from the catalogue (no Name) is
// an error too.
func (t ObligationTable) CheckTypes(prefix string, types ObligationTypes) error {
	var problems []string
	for _, r := range t.TypeRules(&types) {
		switch {
		case r.Type.Name == "" || r.Type.Base == "" || r.Type.Kind == "":
			problems = append(problems, fmt.Sprintf("%s.columns.%s: the type of column %q is unknown", prefix, r.Field, r.Column))
		case r.Kinds != nil && !slices.Contains(r.Kinds, r.Type.Kind):
			names := make([]string, len(r.Kinds))
			for i, k := range r.Kinds {
				names[i] = string(k)
			}
			problems = append(problems, fmt.Sprintf("%s.columns.%s: column %q is %s, want one of %s (or a domain over one)",
				prefix, r.Field, r.Column, r.Type.Display, strings.Join(names, ", ")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}
