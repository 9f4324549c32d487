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

// clean prepares outside text for a message: redacted, on one line when
// oneLine, cut to max runes, escaped for Slack. It redacts before cutting so
// that a cut never leaves a recognisable fragment of a secret behind.
func clean(s string, max int, oneLine bool) string {
	// Redacting a megabyte to show 200 characters wastes time; a margin of
	// 1,000 keeps any realistic secret that starts in the shown part whole.
	if len(s) > 4*max+1000 {
		s = truncate(s, max+1000)
	}
	s = redact.String(s)
	if oneLine {
		s = strings.Join(strings.Fields(s), " ")
	} else {
		s = strings.TrimSpace(s)
	}
	return escape(truncate(s, max))
}

// code puts an id in a code span; backticks inside it would end the span.
func code(id string) string {
	s := clean(id, 200, true)
	if s == "" {
		return "—"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

// ownCode puts one of the reconciler's own ids (a run id, a fingerprint)
// in a code span. They are not redacted: a hex fingerprint can hold a
// digit run that passes Luhn, and masking it would break the command a
// reader copies.
func ownCode(id string) string {
	s := escape(truncate(strings.Join(strings.Fields(id), " "), 100))
	if s == "" {
		return "—"
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

// plainID is an id for the plain-text fallback: redacted, escaped, short.
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
		return s[:cut] + "…"
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
// entity ("&am") at the end.
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
	return t + "…"
}
