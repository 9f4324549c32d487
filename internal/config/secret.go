package config

import (
	"net/url"
)

// Secret is a value that must never be printed: its String, GoString,
// JSON and YAML forms are "<redacted>" (empty stays empty, so that "not
// set" is visible). Reveal gives the value to the one place that needs it.
type Secret string

const redacted = "<redacted>"

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

// RedactURL shows where a URL points without its secrets: the password of
// a DSN is replaced; a URL whose path is itself the secret (a Slack
// webhook) keeps only its scheme and host. Unparseable input is redacted
// whole.
func RedactURL(raw string, pathIsSecret bool) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" && u.Scheme == "" {
		return redacted
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "REDACTED")
		}
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "password", "sslpassword", "token", "key":
			q.Set(k, "REDACTED")
		}
	}
	u.RawQuery = q.Encode()
	if pathIsSecret && u.Path != "" {
		u.Path, u.RawPath, u.RawQuery = "/"+redacted, "", ""
	}
	s := u.String()
	return s
}
