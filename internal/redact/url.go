package redact

import (
	"net/url"
	"strings"
)

// URL shows where a URL points without its secrets: the password of a DSN
// and the values of credential query parameters become Marker; a URL
// whose path is itself the secret (a Slack webhook) keeps only its scheme
// and host. Input that does not parse as a URL is Marker whole.
func URL(raw string, pathIsSecret bool) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" && u.Scheme == "" {
		return Marker
	}
	// Marker's "<" and ">" would be escaped by the URL encoder: a stand-in
	// made of letters takes its places and is swapped back at the end.
	const stand = "REDACTED"
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), stand)
		}
	}
	q := u.Query()
	for k := range q {
		switch strings.ToLower(k) {
		case "password", "sslpassword", "token", "key":
			q.Set(k, stand)
		}
	}
	u.RawQuery = q.Encode()
	if pathIsSecret && u.Path != "" {
		u.Path, u.RawPath, u.RawQuery = "/"+stand, "", ""
	}
	return strings.ReplaceAll(u.String(), stand, Marker)
}
