package alerts

import (
	"strings"
	"testing"
	"unicode/utf8"

	"reconcile"
)

func TestEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"<!channel>", "&lt;!channel&gt;"},
		{"<!here> now", "&lt;!here&gt; now"},
		{"<http://evil.example|your bank>", "&lt;http://evil.example|your bank&gt;"},
		{"<@U123> & co", "&lt;@U123&gt; &amp; co"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := escape(tt.in); got != tt.want {
			t.Errorf("escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCodeSpan(t *testing.T) {
	tests := []struct{ in, want string }{
		{"re_4821a", "`re_4821a`"},
		{"a`b", "`a'b`"},
		{"x\ny", "`x y`"},
		{"", "—"},
		{"<!channel>", "`&lt;!channel&gt;`"},
	}
	for _, tt := range tests {
		if got := code(tt.in); got != tt.want {
			t.Errorf("code(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTruncateEscapedKeepsEntitiesWhole(t *testing.T) {
	s := strings.Repeat("a", 8) + "&amp;tail"
	got := truncateEscaped(s, 11)
	if got != strings.Repeat("a", 8)+"…" {
		t.Errorf("truncateEscaped(%q, 11) = %q, want the entity dropped whole", s, got)
	}
}

// Outside text cannot format: not as free text (clean, plainID), where
// formatting characters become look-alikes and the "_" inside an id stays,
// nor in a code span (code), where Slack formats nothing and the id shows
// as it is. Neither holds a newline, a bidirectional control or a
// zero-width character (docs/design.md, "Untrusted text").
func TestOutsideTextCannotFormat(t *testing.T) {
	tests := []struct{ in, free, span string }{
		{"re_4821a", "re_4821a", "`re_4821a`"},
		{"*bold*", "＊bold＊", "`*bold*`"},
		{"_it_ ~gone~", "＿it＿ ～gone～", "`_it_ ~gone~`"},
		{"charge:1\n*FAKE* Duplicate payment", "charge:1 ＊FAKE＊ Duplicate payment", "`charge:1 *FAKE* Duplicate payment`"},
		{"> quoted", "＞ quoted", "`&gt; quoted`"},
		{"a > b", "a &gt; b", "`a &gt; b`"},
		{"`code`", "'code'", "`'code'`"},
		{"snake_case_id a_ _b", "snake_case_id a＿ ＿b", "`snake_case_id a_ _b`"},
		{"x\u202egnp.exe\u2066\u2069\u200b\u200e\u200f\u202a\u202b\u202c\u202d\ufeff\u2028\u2029y", "xgnp.exe y", "`xgnp.exe y`"},
		{"<!channel> & <@U1>", "&lt;!channel&gt; &amp; &lt;@U1&gt;", "`&lt;!channel&gt; &amp; &lt;@U1&gt;`"},
		{"card 4242 4242 4242 4242", "card •••• 4242", "`card •••• 4242`"},
		// Folding would join groups the masking passed by: folded first.
		{"4242  4242\u00a04242\n4242", "•••• 4242", "`•••• 4242`"},
	}
	for _, tt := range tests {
		if got := clean(tt.in, 200, true); got != tt.free {
			t.Errorf("clean(%q) = %q, want %q", tt.in, got, tt.free)
		}
		if got := plainID(tt.in); got != tt.free {
			t.Errorf("plainID(%q) = %q, want %q", tt.in, got, tt.free)
		}
		if got := code(tt.in); got != tt.span {
			t.Errorf("code(%q) = %q, want %q", tt.in, got, tt.span)
		}
	}
	// A detail keeps its spacing but not its line breaks.
	if got := clean("line one\n> *line two*", 200, false); got != "line one &gt; ＊line two＊" {
		t.Errorf("clean(multi-line) = %q, want one line that cannot quote or bold", got)
	}
	// A "_" left by a cut stands at a word's edge: a look-alike.
	if got := clean("ab_cd", 3, true); got != "ab…" {
		t.Errorf("clean cut = %q", got)
	}
	if got := clean("abc_d", 5, true); got != "abc_d" {
		t.Errorf("clean uncut = %q", got)
	}
	if got := clean("abc_de", 5, true); got != "abc＿…" {
		t.Errorf("clean cut after _ = %q, want the _ a look-alike", got)
	}
	// The reconciler's own ids are not masked, but are on one line.
	if got := ownCode("4242424242424242\n\u202ex"); got != "`4242424242424242 x`" {
		t.Errorf("ownCode = %q", got)
	}
}

// A cut never leaves a code span or a link open: what follows an open
// span's backtick is read as mrkdwn, and the id inside could format.
func TestTruncateEscapedClosesSpans(t *testing.T) {
	s := "• *Orphan* `a *b* c d e f g`"
	if got := truncateEscaped(s, 20); got != "• *Orphan* …" {
		t.Errorf("truncateEscaped(%q, 20) = %q, want the open span dropped", s, got)
	}
	l := "see <https://dashboard.stripe.com/test/payments/ch_1|dashboard>"
	if got := truncateEscaped(l, 30); got != "see …" {
		t.Errorf("truncateEscaped(%q, 30) = %q, want the open link dropped", l, got)
	}
}

// A kind the table does not know is named by its words, capitalised
// whatever its first character: a look-alike or a letter outside ASCII
// is not cut in half.
func TestKindLabelOfAnUnknownKind(t *testing.T) {
	for in, want := range map[reconcile.FindingKind]string{
		"late_refund": "Late refund",
		"*late*":      "＊late＊",
		"élan":        "Élan",
		"\u202e":      "Finding",
	} {
		got := kindLabel(in)
		if got != want || !utf8.ValidString(got) {
			t.Errorf("kindLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
