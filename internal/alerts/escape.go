package alerts

import (
	"strings"

	"reconcile/internal/redact"
)

// escape makes text safe inside Slack mrkdwn and the top-level text: the
// three characters Slack gives meaning to become entities, so that
// "<!channel>", "<@U123>" and "<http://x|click>" from outside show as text
// instead of notifying a channel or disguising a link.
func escape(s string) string {
	if !strings.ContainsAny(s, "&<>") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// clean prepares outside text for a message, as free text (a detail, a
// currency, an id in the plain-text fallback): masked and on one line,
// with all whitespace folded into single spaces when fold, cut to max
// runes, unable to format (unformat) and escaped for Slack. It masks
// before cutting so that a cut never leaves a recognisable fragment of a
// secret behind (docs/design.md, "Untrusted text").
func clean(s string, max int, fold bool) string {
	return escape(unformat(prepare(s, max, fold)))
}

// prepare is outside text on one line (no newline, control or format
// character), trimmed, folded when fold, masked (redact.Text) and cut to
// max runes. It folds before it masks: a card number whose groups are
// apart by two spaces or a no-break space is one the masking passes by,
// and folding would join it.
func prepare(s string, max int, fold bool) string {
	// Redacting a megabyte to show 200 characters wastes time; a margin of
	// 1,000 keeps any realistic secret that starts in the shown part whole.
	if len(s) > 4*max+1000 {
		s = truncate(s, max+1000)
	}
	s = redact.Line(s)
	if fold {
		s = strings.Join(strings.Fields(s), " ")
	} else {
		s = strings.TrimSpace(s)
	}
	return truncate(redact.Text(s), max)
}

// Look-alikes stand for the characters of outside text that mrkdwn would
// read as formatting. Slack has no backslash escape, and a zero-width
// character to break the markup would be removed as every other is; a
// code span around free text would make a detail unreadable. So the
// characters are shown as their full-width forms, which read the same
// and format nothing (docs/design.md, "Untrusted text").
const (
	lookAsterisk   = '＊' // U+FF0A for *, bold
	lookUnderscore = '＿' // U+FF3F for _, italics
	lookTilde      = '～' // U+FF5E for ~, strike
	lookQuote      = '＞' // U+FF1E for a leading >, a quote
)

// unformat makes prepared outside text unable to format in mrkdwn: every
// "*" and "~" becomes its look-alike, and so does a "_" unless it stands
// between two ASCII letters or digits, where Slack never reads it as
// italics (formatting starts and ends only at a word's edge): the "_" of
// ids such as re_4821a stays, so that the id reads and copies as it is. A
// backtick, which would open a code span, becomes "'"; a leading ">",
// which would quote the line, its look-alike. s holds no newline.
func unformat(s string) string {
	if !strings.ContainsAny(s, "*_~`") && !strings.HasPrefix(s, ">") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*':
			b.WriteRune(lookAsterisk)
		case '~':
			b.WriteRune(lookTilde)
		case '`':
			b.WriteByte('\'')
		case '_':
			if i > 0 && i+1 < len(s) && isAlnum(s[i-1]) && isAlnum(s[i+1]) {
				b.WriteByte(c)
			} else {
				b.WriteRune(lookUnderscore)
			}
		case '>':
			if i == 0 {
				b.WriteRune(lookQuote)
			} else {
				b.WriteByte(c)
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// code puts an id in a code span, where Slack formats nothing, so the id
// shows as it is: masked, on one line (prepare), escaped. A backtick
// inside it would end the span and becomes "'".
func code(id string) string {
	s := escape(prepare(id, 200, true))
	if s == "" {
		return "—"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

// ownCode puts one of the reconciler's own ids (a run id, a fingerprint)
// in a code span. They are not masked: a hex fingerprint can hold a digit
// run that passes Luhn, and masking it would break the command a reader
// copies. They are put on one line all the same (redact.Line).
func ownCode(id string) string {
	s := escape(truncate(strings.Join(strings.Fields(redact.Line(id)), " "), 100))
	if s == "" {
		return "—"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

// plainID is an id for the plain-text fallback, as free text: masked, on
// one line, unable to format, escaped, short.
func plainID(id string) string {
	s := clean(id, 200, true)
	if s == "" {
		return "—"
	}
	return s
}

// truncate cuts s to at most max runes, ending with "…" when it cut.
func truncate(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	if cut := runeCut(s, max-1); cut >= 0 {
		t := s[:cut]
		// A sentence is cut between words where one ends near the limit,
		// so that a reader is not left with half a word.
		if sp := strings.LastIndexByte(t, ' '); sp > 0 && len(t)-sp <= 24 {
			t = strings.TrimRight(t[:sp], " ,;:")
		}
		return t + "…"
	}
	return s
}

// runeCut returns the byte offset after the first n runes of s, or -1 if
// s has at most n+1 runes and so fits without a cut.
func runeCut(s string, n int) int {
	count, cut := 0, -1
	for i := range s {
		if count == n {
			cut = i
		}
		count++
		if count > n+1 {
			return cut
		}
	}
	return -1
}

// truncateEscaped cuts already-escaped text without leaving half an
// entity ("&am") at the end, nor an open code span or link: the rest of a
// span cut open would be read as mrkdwn, and an id shown exact inside it
// could format.
func truncateEscaped(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := runeCut(s, max-1)
	if cut < 0 {
		return s
	}
	t := s[:cut]
	if amp := strings.LastIndexByte(t, '&'); amp >= 0 && amp > len(t)-6 && !strings.Contains(t[amp:], ";") {
		t = t[:amp]
	}
	if strings.Count(t, "`")%2 == 1 {
		t = t[:strings.LastIndexByte(t, '`')]
	}
	if lt := strings.LastIndexByte(t, '<'); lt >= 0 && !strings.Contains(t[lt:], ">") {
		t = t[:lt]
	}
	return t + "…"
}
