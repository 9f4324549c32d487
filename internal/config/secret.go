package config

import "reconcile/internal/redact"

// Secret is a value that must never be printed: its String, GoString,
// JSON and YAML forms are "<redacted>" (empty stays empty, so that "not
// set" is visible). Reveal gives the value to the one place that needs it.
type Secret string

const redacted = redact.Marker

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer, so %#v does not leak either.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// MarshalJSON implements json.Marshaler.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// MarshalYAML implements yaml.Marshaler.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }
