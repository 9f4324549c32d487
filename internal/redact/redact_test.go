package redact

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"stripe live secret key", "key sk_live_51H8abcDEF0123456789", "key <redacted>"},
		{"stripe test secret key", "sk_test_acceptanceSECRET4f9a1c failed", "<redacted> failed"},
		{"stripe restricted key", "used rk_live_0123456789abcdefXYZ here", "used <redacted> here"},
		{"stripe webhook secret", "whsec_abcDEF123", "<redacted>"},
		{"slack bot token", "token xoxb-1234-5678-abcdEFGH", "token <redacted>"},
		{"slack user token", "xoxp-1-2-3-abc", "<redacted>"},
		{"slack token with SECRET", "xoxb-acceptance-SECRET-77aa", "<redacted>"},
		{"slack app token", "xapp-1-A0-123-abc", "<redacted>"},
		{"slack webhook", "post https://hooks.slack.com/services/T000/B000/XXXXyyyy: 404", "post https://hooks.slack.com/<redacted> 404"},
		{"webhook path on another host", "http://127.0.0.1:9/services/T0ACC/B0ACC/abc123 refused", "http://127.0.0.1:9/services/<redacted> refused"},
		{"postgres dsn password", "dial postgres://app:hunter2@db.internal:5432/pay", "dial postgres://app:<redacted>@db.internal:5432/pay"},
		{"dsn password with @", "postgres://app:p@ss@db/pay", "postgres://app:<redacted>@db/pay"},
		{"mysql dsn", "app:s3cret@tcp(10.0.0.1:3306)/pay", "app:<redacted>@tcp(10.0.0.1:3306)/pay"},
		{"password field", "password=hunter2 host=db", "password=<redacted> host=db"},
		{"quoted secret field", `api_key: "abc def"`, "api_key: <redacted>"},
		{"bearer", "Authorization: Bearer abcdefghijkl", "Authorization: Bearer <redacted>"},
		{"email", "refund for jane.doe+shop@example.co.uk today", "refund for [email] today"},
		{"card plain", "card 4242424242424242 used", "card •••• 4242 used"},
		{"card spaced", "pan 4111 1111 1111 1111.", "pan •••• 1111."},
		{"card hyphens", "5555-5555-5555-4444", "•••• 4444"},
		{"amex 15 digits", "378282246310005", "•••• 0005"},
		{"card among other groups", "order 12 4242424242424242 ok", "order 12 •••• 4242 ok"},
		{"not luhn", "4242424242424241", "4242424242424241"},
		{"too short", "424242424242", "424242424242"},
		{"too long without separators", "42424242424242424242", "42424242424242424242"},
		{"ids untouched", "refund:4821:approved-request-7 re_4821a ch_3MmlLrLkdIwHu7ix0snN0B15", "refund:4821:approved-request-7 re_4821a ch_3MmlLrLkdIwHu7ix0snN0B15"},
		{"money untouched", "USD 89.00, JPY 12,000", "USD 89.00, JPY 12,000"},
		{"control characters", "a\x00b\x1bc\nd", "a b c\nd"},
		{"bidi and zero-width removed", "re_1\u202egnp.exe\u2066x\u2069\u200b\u200e\u200f\u202a\u202d\ufeff", "re_1gnp.exex"},
		{"line separators", "a\u2028b\u2029c\u0085d", "a b c d"},
		{"zero-width inside a card number", "4242\u200b4242\u200d4242\u20604242", "•••• 4242"},
		{"slack markup is not redaction's job", "<!channel> & <@U123>", "<!channel> & <@U123>"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzRedact checks Redact's invariants on any input: it is idempotent, and
// no card-like run that passes Luhn survives it.
func FuzzString(f *testing.F) {
	for _, s := range []string{
		"4242424242424242", "4242 4242 4242 4242 4242424242424", "sk_live_abc", "a@b.co",
		"1 4242424242424242 1", "postgres://u:p@h/db", "xoxb-1-2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := String(s)
		if again := String(got); again != got {
			t.Errorf("String(String(%q)) = %q, want %q", s, again, got)
		}
		if run, ok := cardLike(got); ok {
			t.Errorf("String(%q) = %q, still holds card-like %q", s, got, run)
		}
	})
}

// cardLike finds a maximal run of digits (single spaces or hyphens between
// them) of 13 to 19 digits that passes Luhn.
func cardLike(s string) (string, bool) {
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		if !unicode.IsDigit(rs[i]) || rs[i] > '9' || (i > 0 && rs[i-1] >= '0' && rs[i-1] <= '9') {
			continue
		}
		j := i
		for j < len(rs) && (rs[j] >= '0' && rs[j] <= '9' ||
			(rs[j] == ' ' || rs[j] == '-') && j+1 < len(rs) && rs[j+1] >= '0' && rs[j+1] <= '9' && rs[j-1] >= '0' && rs[j-1] <= '9') {
			j++
		}
		run := string(rs[i:j])
		d := digitsOf(run)
		if len(d) >= 13 && len(d) <= 19 && luhn(d) {
			return run, true
		}
		i = j
	}
	return "", false
}

// Text is String on one line: nothing of what it shows starts a line of
// its own, moves a column or turns text around.
func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"charge:1\n*FAKE* paid", "charge:1 *FAKE* paid"},
		{"a\tb\rc\x00d", "a b c d"},
		{"card 4242 4242 4242 4242 of jane@example.com", "card •••• 4242 of [email]"},
		{"\u202eevil\u2069", "evil"},
		{"bad \xff utf-8", "bad \ufffd utf-8"},
		{"4242\n4242\t4242\r4242", "•••• 4242"},
		{"ids untouched re_4821a refund:4821:x", "ids untouched re_4821a refund:4821:x"},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Line neutralises what Text does and masks nothing: a fingerprint whose
// digits pass Luhn stays whole.
func TestLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"4242424242424242", "4242424242424242"},
		{"run_1\n\u202ex", "run_1 x"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := Line(tt.in); got != tt.want {
			t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzText: Text's output holds no control, format or separator
// character, is valid UTF-8, and is its own Text.
func FuzzText(f *testing.F) {
	for _, s := range []string{"a\nb", "\u202e4242424242424242", "4242\n4242\n4242\n4242", "x\u2028y", "\xff\x00", "a@b.co\tz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Text(%q) = %q, not UTF-8", s, got)
		}
		for _, r := range got {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("Text(%q) = %q holds %U", s, got, r)
			}
		}
		if again := Text(got); again != got {
			t.Errorf("Text(Text(%q)) = %q, want %q", s, again, got)
		}
		if run, ok := cardLike(got); ok {
			t.Errorf("Text(%q) = %q, still holds card-like %q", s, got, run)
		}
	})
}

// Metadata masks every value but those linking reads, which must stay
// what they are even when they look like a card number: the obligation
// they name has that id.
func TestMetadata(t *testing.T) {
	m := map[string]string{
		"obligation_id":    "charge:4242424242424242",
		"idempotency_key":  "jane@example.com-1",
		"note":             "card 4242 4242 4242 4242 of jane@example.com",
		"plain":            "refund by hand",
		"4111111111111111": "a card number as a key",
	}
	orig := maps.Clone(m)
	got := Metadata(m, "obligation_id", "idempotency_key")
	want := map[string]string{
		"obligation_id":   "charge:4242424242424242",
		"idempotency_key": "jane@example.com-1",
		"note":            "card •••• 4242 of [email]",
		"plain":           "refund by hand",
		"•••• 1111":       "a card number as a key",
	}
	if !maps.Equal(got, want) {
		t.Errorf("Metadata = %q, want %q", got, want)
	}
	if !maps.Equal(m, orig) {
		t.Errorf("Metadata changed its argument: %q", m)
	}
	// Nothing to mask: the same map, not a copy.
	plain := map[string]string{"obligation_id": "4242424242424242", "note": "ok"}
	if got := Metadata(plain, "obligation_id"); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", plain) {
		t.Errorf("Metadata copied metadata that needs no masking")
	}
	// A key that masks to a linking key's name is left out rather than
	// read as one; an empty key names no key to keep.
	got = Metadata(map[string]string{"obligation\u200b_id": "charge:1", "": "4242424242424242"}, "obligation_id", "")
	if want := map[string]string{"": "•••• 4242"}; !maps.Equal(got, want) {
		t.Errorf("Metadata of look-alike keys = %q, want %q", got, want)
	}
	if got := Metadata(nil, "obligation_id"); got != nil {
		t.Errorf("Metadata(nil) = %q, want nil", got)
	}
}

func TestAttr(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: Attr}))
	log.Info("paying with 4242424242424242",
		"error", errors.New("stripe said no to sk_test_CANARY1234567890abcd"),
		"who", "jane.doe@example.com",
		"url", stringer("postgres://app:CANARYpw@db/x"),
		"n", 7)
	out := buf.String()
	for _, leak := range []string{"4242424242424242", "sk_test_CANARY", "jane.doe@example.com", "CANARYpw"} {
		if strings.Contains(out, leak) {
			t.Errorf("log line leaks %q: %s", leak, out)
		}
	}
	if !strings.Contains(out, `"n":7`) || !strings.Contains(out, "4242") {
		t.Errorf("log line lost what is not secret: %s", out)
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestURL(t *testing.T) {
	tests := []struct {
		in, want   string
		pathSecret bool
	}{
		{"postgres://u:hunter2@db:5432/x?sslmode=disable", "postgres://u:<redacted>@db:5432/x?sslmode=disable", false},
		{"postgres://root@127.0.0.1/x", "postgres://root@127.0.0.1/x", false},
		{"https://hooks.slack.com/services/T0/B0/secretpart", "https://hooks.slack.com/<redacted>", true},
		{"host=db password=hunter2", "<redacted>", false},
		{"postgres://db/x?sslpassword=hunter2&sslmode=require", "postgres://db/x?sslmode=require&sslpassword=<redacted>", false},
	}
	for _, tt := range tests {
		if got := URL(tt.in, tt.pathSecret); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
