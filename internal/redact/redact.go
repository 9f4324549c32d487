// Package redact removes from text what must never leave the reconciler:
// secrets (API keys, tokens, passwords, webhook URLs), e-mail addresses
// and card numbers. Everything that came from outside (provider metadata,
// ids, error texts) passes through it before it is logged, reported,
// stored as an error or posted. Its one marker is Marker.
package redact

import (
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// secretPatterns are applied in order; each replaces what it matches with a
// marker that keeps enough context for a person to see what was there.
// The compiled expressions are never modified after initialisation.
// hints are lower-case substrings of which a match needs one: most text
// holds none, and a substring test is much cheaper than a regexp.
var secretPatterns = []struct {
	hints []string
	re    *regexp.Regexp
	repl  string
}{
	// A password in a URL or DSN: postgres://user:pw@host keeps the user.
	// The password may itself hold "@": the match runs to the last one.
	{[]string{"://"}, regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://)([^\s:/?#@]*):([^\s/?#]+)@`), "${1}${2}:" + Marker + "@"},
	// The same in a Go MySQL DSN: user:pw@tcp(host)/db.
	{[]string{"@"}, regexp.MustCompile(`\b([0-9A-Za-z_.\-]*):([^\s@/]+)@(tcp|unix|udp)\(`), "${1}:" + Marker + "@${3}("},
	// Stripe secret, restricted and publishable keys, webhook signing secrets.
	{[]string{"k_live_", "k_test_"}, regexp.MustCompile(`(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]+`), Marker},
	{[]string{"sk_", "rk_"}, regexp.MustCompile(`\b(?:sk|rk)_[0-9A-Za-z]{16,}`), Marker},
	{[]string{"whsec_"}, regexp.MustCompile(`whsec_[0-9A-Za-z]+`), Marker},
	// Slack tokens (bot, user, app, refresh, configuration).
	{[]string{"xox"}, regexp.MustCompile(`xox[a-z](?:\.xox[a-z])?-[0-9A-Za-z\-]+`), Marker},
	{[]string{"xapp-"}, regexp.MustCompile(`xapp-[0-9A-Za-z\-]+`), Marker},
	// Slack incoming webhooks: the path is the secret, whatever the host.
	{[]string{"hooks.slack"}, regexp.MustCompile(`(?i)hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/[^\s"'<>|]+`), "hooks.slack.com/" + Marker},
	{[]string{"/services/"}, regexp.MustCompile(`/services/T[0-9A-Za-z]+/B[0-9A-Za-z]+/[^\s"'<>|]+`), "/services/" + Marker},
	// Other common credentials that end up in metadata and error text.
	{[]string{"eyj"}, regexp.MustCompile(`\beyJ[0-9A-Za-z_\-]{5,}\.[0-9A-Za-z_\-]{5,}\.[0-9A-Za-z_\-]+`), Marker},
	{[]string{"akia", "asia"}, regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`), Marker},
	{[]string{"gh"}, regexp.MustCompile(`\bgh[pousr]_[0-9A-Za-z]{20,}`), Marker},
	{[]string{"bearer", "basic"}, regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[0-9A-Za-z._~+/=\-]{8,}`), "${1}${2}" + Marker},
	{[]string{"pass", "pwd", "secret", "token", "key"}, regexp.MustCompile(`(?i)\b(password|passwd|pwd|secret|client_secret|token|access_token|refresh_token|api_key|apikey|api-key|sslpassword)(\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s&,;"'<>]+)`), "${1}${2}" + Marker},
	// E-mail addresses: customers' personal data, never for Slack or logs.
	{[]string{"@"}, regexp.MustCompile(`[0-9A-Za-z._%+\-]+@[0-9A-Za-z\-]+(?:\.[0-9A-Za-z\-]+)*\.[A-Za-z]{2,}`), "[email]"},
}

// String removes from s what must never leave the reconciler: API keys and
// tokens (Stripe sk_/rk_/whsec_, Slack xox…-, webhook URLs, bearer tokens,
// passwords in URLs and DSNs, key=value credentials), e-mail addresses, and
// card-like numbers (13 to 19 digits, optionally grouped by spaces or
// hyphens, that pass the Luhn check), of which only the last four digits
// stay: "•••• 4242". Format characters (bidirectional controls such as
// U+202E, zero-width characters, U+FEFF) are removed first, so that none
// can hide a card number from the masking or reorder what a reader sees;
// control characters other than newlines and tabs, and the line and
// paragraph separators U+2028 and U+2029, become spaces. It is for
// anything that came from outside (provider metadata, details, ids, error
// text) before it is logged, reported or posted; it does not escape for
// Slack, and Text is what a line for people takes (docs/design.md,
// "Untrusted text").
func String(s string) string {
	if s == "" {
		return s
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = neutral(s, false)
	lower := strings.ToLower(s)
	for _, p := range secretPatterns {
		if !slices.ContainsFunc(p.hints, func(h string) bool { return strings.Contains(lower, h) }) {
			continue
		}
		if t := p.re.ReplaceAllString(s, p.repl); t != s {
			s, lower = t, strings.ToLower(t)
		}
	}
	// Masking keeps four digits, which could join the digits after them
	// into a new card-like run: repeat until nothing changes.
	for range 5 {
		t := maskCards(s)
		if t == s {
			break
		}
		s = t
	}
	return s
}

// Text is String on one line: a newline, a tab or any other control
// character becomes a space as well. It is what every output for people
// (a terminal, a text report, a CSV cell, a JSON value a person reads)
// shows of outside text, so that an id or a detail cannot start a line of
// its own, move a column, or turn text around (docs/design.md, "Untrusted
// text").
func Text(s string) string {
	// On one line first, then masked: a card number split by newlines or
	// tabs would be joined by the spaces that replace them after the
	// masking had passed it by.
	return String(Line(s))
}

// Line is s on one line without what changes how text shows rather than
// what it says: control characters and line and paragraph separators
// become spaces, format characters (bidirectional controls, zero-width
// characters) are removed, invalid UTF-8 becomes U+FFFD. Nothing is
// masked: it is for the reconciler's own ids (run ids, fingerprints),
// which redaction could break, and for text already redacted.
func Line(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return neutral(s, true)
}

// neutral removes format characters (Unicode category Cf: U+200B–U+200F,
// U+202A–U+202E, U+2060–U+2064, U+2066–U+2069, U+FEFF and the rest) and
// turns control characters (Cc) and the line and paragraph separators
// (U+2028, U+2029) into spaces; newlines and tabs too when oneLine. s is
// valid UTF-8. It returns s itself when nothing changes, as most text
// holds none of them.
func neutral(s string, oneLine bool) string {
	clean := true
	for _, r := range s {
		if r < utf8.RuneSelf {
			if r < 0x20 || r == 0x7f {
				if oneLine || (r != '\n' && r != '\t') {
					clean = false
					break
				}
			}
			continue
		}
		if isFormat(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			if oneLine {
				return ' '
			}
			return r
		case unicode.IsControl(r), r == '\u2028', r == '\u2029':
			return ' '
		case unicode.Is(unicode.Cf, r):
			return -1
		}
		return r
	}, s)
}

// isFormat reports whether a non-ASCII rune is one neutral changes.
func isFormat(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r)
}

// maskCards replaces card-like digit runs that pass the Luhn check by
// "•••• " and their last four digits. A run is digits with single spaces
// or hyphens between them (4242 4242 4242 4242); within a longer run of
// groups, any consecutive groups holding 13 to 19 digits are considered.
func maskCards(s string) string {
	if countDigits(s) < 13 {
		return s
	}
	type group struct{ start, end int } // byte offsets of a run of digits
	var b strings.Builder
	last := 0
	i := 0
	for i < len(s) {
		if !isDigit(s[i]) || (i > 0 && isDigit(s[i-1])) {
			i++
			continue
		}
		// Collect the run of groups starting at i.
		var gs []group
		j := i
		for {
			k := j
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			gs = append(gs, group{j, k})
			if k+1 < len(s) && (s[k] == ' ' || s[k] == '-') && isDigit(s[k+1]) {
				j = k + 1
				continue
			}
			j = k
			break
		}
		for a := 0; a < len(gs); {
			// The longest span of whole groups from a that is card-like;
			// spans end by 19 digits, which keeps this linear.
			best, n := -1, 0
			for z := a; z < len(gs); z++ {
				n += gs[z].end - gs[z].start
				if n > 19 {
					break
				}
				if n >= 13 && luhn(digitsOf(s[gs[a].start:gs[z].end])) {
					best = z
				}
			}
			if best < 0 {
				a++
				continue
			}
			digits := digitsOf(s[gs[a].start:gs[best].end])
			b.WriteString(s[last:gs[a].start])
			b.WriteString("•••• ")
			b.WriteString(digits[len(digits)-4:])
			last = gs[best].end
			a = best + 1
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digitsOf(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// luhn reports whether the digit string passes the Luhn checksum that every
// payment card number carries.
func luhn(digits string) bool {
	sum := 0
	double := false
	for i := len(digits) - 1; i >= 0; i-- {
		d := int(digits[i] - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

func countDigits(s string) int {
	n := 0
	for i := range len(s) {
		if isDigit(s[i]) {
			n++
		}
	}
	return n
}

// Attr is a slog.HandlerOptions.ReplaceAttr that passes every string
// value, errors and Stringers through String, so that no log line carries
// a secret, a card number or an e-mail address.
func Attr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, String(a.Value.String()))
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			return slog.String(a.Key, String(v.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, String(v.String()))
		}
	}
	return a
}

// Marker stands where something was removed, in logs, errors, reports
// and messages alike.
const Marker = "<redacted>"
