package alerts

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"reconcile/internal/redact/redacttest"

	"github.com/slack-go/slack"

	"reconcile"
)

// attacks are the seed corpus (internal/report's FuzzRenderers starts
// from the same list): formatting, a forged line, mentions and links,
// bidirectional and zero-width characters, card numbers hidden from the
// masking, e-mail addresses, spreadsheet formulas, broken UTF-8.
var attacks = []string{
	"*bold*", "_italic_", "~strike~", "`code`", "```block```", "> quoted", "charge:1\n*FAKE* Duplicate payment: USD 1,000,000",
	"re_4821a", "a_b_c", "x_", "_x", "<!channel>", "<@U123|boss> & co", "<https://evil.example|your bank>", "&amp;lt;",
	"id\u202egnp.exe", "\u2066x\u2069\u2067y\u2068z", "a\u200bb\u200cc\u200dd", "\u200e\u200f\u202a\u202b\u202c\u202d\ufeff",
	"line\u2028sep\u2029para", "4242424242424242", "4242 4242 4242 4242", "4242\u200b4242\u200b4242\u200b4242", "5555-5555-5555-4444",
	"jane.doe@example.com", "=HYPERLINK(\"https://evil\")", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "\xff\xfe", "a\x00b\x1b[31mred",
	"sk_live_0123456789abcdefABCDEF", "", " ",
}

// FuzzRenderers renders fuzzed ids, details and currencies through every
// Slack message a finding appears in (its own critical message, and the
// line of a group for firing, changed, repeat and resolved) and checks
// that outside text cannot change what a message does (docs/design.md,
// "Untrusted text"). Each message M is compared with S, the same message
// rendered from stand-ins (plain words that clean and escape to
// themselves, empty where the outside text was empty or cleans to
// nothing). In every text of M, blocks and top-level text alike:
//
//   - the text is valid UTF-8 without format characters (bidi controls,
//     zero-width characters), line or paragraph separators, or control
//     characters but the template's newlines;
//   - every "&" starts &amp;, &lt; or &gt;, and a raw "<" or ">" belongs
//     to one of the template's dashboard links: no mention or link;
//   - outside text adds no newline, no backtick and no formatting
//     character: after the code spans are taken out, M holds no more
//     newlines, backticks, "*", "~" or "_" that could open or close
//     formatting (any "_" not between two ASCII letters or digits) than
//     S, and its backticks pair up;
//   - no line starts a quote ("&gt;" or ">");
//   - no e-mail address shows.
//
// The fragment functions that put outside text into a message are checked
// directly as well: code is one code span, clean and plainID hold no
// backtick and no "*", "~" or "_" that could format, and none holds a
// card-like number (13 to 19 digits passing Luhn). That is checked of the
// fragments rather than of whole messages, where the template's digits
// (an amount's cents) beside an outside run of twelve digits, which is no
// card number, can make one.
//
// The acknowledgement an edited message shows (Acknowledged) is checked as
// the messages are, with the fuzzed detail as who and the obligation as
// why.
func FuzzRenderers(f *testing.F) {
	for i, a := range attacks {
		b := attacks[(i+1)%len(attacks)]
		f.Add(a, b, a+b, "detail: "+a, "usd")
		f.Add(b, a, "re_1", a, a)
	}
	// Long enough for a line to be cut to Slack's limits inside a code
	// span.
	long := strings.Repeat("&", 110) + " *b* c"
	f.Add(long, long, long, long, "usd")
	f.Fuzz(func(t *testing.T, obligation, id1, id2, detail, currency string) {
		for _, s := range []string{obligation, id1, id2, detail, currency} {
			checkFragments(t, s)
		}
		fuzzed := fuzzFinding(obligation, []string{id1, id2}, detail, currency)
		stand := fuzzFinding(standIn(obligation, false), []string{standIn(id1, true), standIn(id2, true)},
			standIn(detail, false), standInCurrency(currency))
		// A critical finding has a message of its own; the others are a
		// line of a group, in each of a group's families.
		repeat := func(r reconcile.Alert) reconcile.Alert { r.Event = reconcile.AlertRepeat; return r }
		resolved := func(r reconcile.Alert) reconcile.Alert { r.Event = reconcile.AlertResolved; return r }
		changed := func(r reconcile.Alert) reconcile.Alert { r.Changed = true; return r }
		same := func(r reconcile.Alert) reconcile.Alert { return r }
		for _, c := range []struct {
			kind reconcile.FindingKind
			row  func(reconcile.Alert) reconcile.Alert
		}{
			{reconcile.Duplicate, same}, {reconcile.Duplicate, changed},
			{reconcile.Orphan, same}, {reconcile.Orphan, changed}, {reconcile.Orphan, repeat}, {reconcile.Orphan, resolved},
		} {
			fz, st := fuzzed, stand
			fz.Kind, fz.Severity, st.Kind, st.Severity = c.kind, c.kind.Severity(), c.kind, c.kind.Severity()
			// Live and test dashboards alike, by the input's length.
			opts := PlanOptions{Live: len(obligation)%2 == 1}
			m := Plan([]reconcile.Alert{c.row(firing(1, fz))}, testNow, opts)
			s := Plan([]reconcile.Alert{c.row(firing(1, st))}, testNow, opts)
			if len(m) != 1 || len(s) != 1 {
				t.Fatalf("%s: %d and %d messages, want one each", c.kind, len(m), len(s))
			}
			checkMessage(t, m[0], s[0])
		}
		// Who acknowledged and why, from Slack or the page, are outside
		// text too, in the message an acknowledgement edits.
		acked := func(by, reason string) Message {
			base := Plan([]reconcile.Alert{firing(1, stand)}, testNow, PlanOptions{Buttons: true})[0]
			blocks, text := Acknowledged(base.Blocks, base.Text, []Ack{{By: by, Reason: reason, At: testNow}}, true)
			return Message{Blocks: blocks, Text: text}
		}
		checkMessage(t, acked(detail, obligation), acked(standIn(detail, false), standIn(obligation, false)))
	})
}

func fuzzFinding(obligation string, ids []string, detail, currency string) reconcile.Finding {
	return reconcile.Finding{ObligationID: obligation, ProviderIDs: ids, Detail: detail,
		Money: reconcile.Money{Amount: 8900, Currency: currency}, AtRisk: reconcile.Money{Amount: 8900, Currency: currency},
		Fingerprint: "c83330dc6b3c018abc15"}
}

// standIn is a plain word for outside text s: empty if s is, blank if s
// cleans to nothing, and otherwise "x"; a provider id that links to the
// dashboard stands for itself, as its link is the template's.
func standIn(s string, id bool) string {
	switch {
	case s == "":
		return ""
	case id && DashboardURL(s, false) != "":
		return s
	case prepare(s, 200, true) == "" || prepare(s, 1500, false) == "":
		return " "
	}
	return "x"
}

// standInCurrency keeps a currency shown as an ISO code, which is
// printed upper-cased without cleaning, and stands in for the others.
func standInCurrency(c string) string {
	if len(c) == 3 && isAlpha(c) {
		return c
	}
	return standIn(c, false)
}

var (
	dashboardLink = regexp.MustCompile(`<https://dashboard\.stripe\.com/[^<>|\s]+\|dashboard>`)
	entity        = regexp.MustCompile(`&(amp|lt|gt);`)
	emailLike     = regexp.MustCompile(`[0-9A-Za-z._%+\-]+@[0-9A-Za-z\-]+(?:\.[0-9A-Za-z\-]+)*\.[A-Za-z]{2,}`)
)

// checkFragments checks the fragment functions on one outside string.
func checkFragments(t *testing.T, s string) {
	t.Helper()
	if c := code(s); c != "—" {
		if len(c) < 3 || c[0] != '`' || c[len(c)-1] != '`' || strings.Count(c, "`") != 2 {
			t.Fatalf("code(%q) = %q, want one code span", s, c)
		}
		checkText(t, "code", c, false, true)
	}
	for name, v := range map[string]string{"clean": clean(s, 200, true), "clean multi-line": clean(s, 1500, false), "plainID": plainID(s)} {
		checkText(t, name, v, false, true)
		if strings.Contains(v, "`") || strings.HasPrefix(v, "&gt;") || formatting(v, '*')+formatting(v, '~')+formatting(v, '_') > 0 {
			t.Fatalf("%s(%q) = %q can format", name, s, v)
		}
	}
}

// checkText checks what holds of every text a message carries: UTF-8,
// no format, separator or control character (but newlines where
// newlines may be), entities whole, no raw "<" or ">" but in a dashboard
// link, no e-mail address, and where cards, no card-like number.
func checkText(t *testing.T, what, s string, newlines, cards bool) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("%s: not UTF-8: %q", what, s)
	}
	for _, r := range s {
		if r == '\n' && newlines {
			continue
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			t.Fatalf("%s holds %U: %q", what, r, s)
		}
	}
	bare := dashboardLink.ReplaceAllString(s, "")
	if strings.ContainsAny(bare, "<>") {
		t.Fatalf("%s holds a raw < or > outside a dashboard link: %q", what, s)
	}
	if strings.Count(bare, "&") != len(entity.FindAllString(bare, -1)) {
		t.Fatalf("%s holds an unescaped &: %q", what, s)
	}
	if run, ok := redacttest.CardLike(s); ok && cards {
		t.Fatalf("%s shows card-like %q: %q", what, run, s)
	}
	if e := emailLike.FindString(s); e != "" {
		t.Fatalf("%s shows e-mail address %q: %q", what, e, s)
	}
}

// checkMessage checks message m against its stand-in s.
func checkMessage(t *testing.T, m, s Message) {
	t.Helper()
	mt, st := messageTexts(m), messageTexts(s)
	if len(mt) != len(st) {
		t.Fatalf("the message has %d texts, its stand-in %d: outside text changed its shape\n%q\n%q", len(mt), len(st), mt, st)
	}
	for i := range mt {
		if mt[i].kind != st[i].kind {
			t.Fatalf("text %d is %s, its stand-in's %s", i, mt[i].kind, st[i].kind)
		}
		checkText(t, mt[i].kind, mt[i].text, true, false)
		if mt[i].kind == "header" {
			if strings.Contains(mt[i].text, "\n") {
				t.Fatalf("header holds a newline: %q", mt[i].text)
			}
			continue // plain_text: Slack formats nothing in it
		}
		mc, sc := outsideCode(mt[i].text), outsideCode(st[i].text)
		if strings.Count(mt[i].text, "`")%2 != 0 {
			t.Fatalf("%s: a code span is left open: %q", mt[i].kind, mt[i].text)
		}
		for _, c := range []string{"\n", "`"} {
			if strings.Count(mt[i].text, c) > strings.Count(st[i].text, c) {
				t.Fatalf("%s: outside text added %q:\n%q\nstand-in:\n%q", mt[i].kind, c, mt[i].text, st[i].text)
			}
		}
		for _, c := range []rune{'*', '~', '_'} {
			if formatting(mc, c) > formatting(sc, c) {
				t.Fatalf("%s: outside text can format with %q:\n%q\nstand-in:\n%q", mt[i].kind, c, mt[i].text, st[i].text)
			}
		}
		for _, line := range strings.Split(mt[i].text, "\n") {
			if strings.HasPrefix(line, "&gt;") || strings.HasPrefix(line, ">") {
				t.Fatalf("%s: a line starts a quote: %q", mt[i].kind, mt[i].text)
			}
		}
	}
	// The terminal's rendering of a message, for the demo: no control or
	// format character either.
	checkTerminal(t, PlainText(m, false))
}

func checkTerminal(t *testing.T, s string) {
	t.Helper()
	for _, r := range s {
		if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029') {
			t.Fatalf("PlainText holds %U: %q", r, s)
		}
	}
}

type messageText struct{ kind, text string }

// messageTexts are the texts of a message in order: the top-level text,
// then each block's.
func messageTexts(m Message) []messageText {
	out := []messageText{{"text", m.Text}}
	for _, b := range m.Blocks {
		switch b := b.(type) {
		case *slack.HeaderBlock:
			out = append(out, messageText{"header", b.Text.Text})
		case *slack.SectionBlock:
			if b.Text != nil {
				out = append(out, messageText{"section", b.Text.Text})
			}
		case *slack.ContextBlock:
			for _, e := range b.ContextElements.Elements {
				if tx, ok := e.(*slack.TextBlockObject); ok {
					out = append(out, messageText{"context", tx.Text})
				}
			}
		default:
			out = append(out, messageText{"other block", ""})
		}
	}
	return out
}

// outsideCode is s without its code spans.
func outsideCode(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+1:], '`')
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		s = s[i+1+j+1:]
	}
	b.WriteString(s)
	return b.String()
}

// formatting counts the characters c in s that could open or close
// formatting: a "_" between two ASCII letters or digits cannot, as Slack
// formats only at a word's edge; every "*" and "~" is counted.
func formatting(s string, c rune) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if rune(s[i]) != c {
			continue
		}
		if c == '_' && i > 0 && i+1 < len(s) && isAlnum(s[i-1]) && isAlnum(s[i+1]) {
			continue
		}
		n++
	}
	return n
}
