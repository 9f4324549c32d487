package alerts

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"reconcile/internal/redact"

	"github.com/slack-go/slack"

	"reconcile"
)

// traceHint and listHint are the commands a reader runs next.
const (
	traceHint = "reconcile trace OBLIGATION_ID"
	listHint  = "reconcile findings --open"
	ackHint   = `reconcile ack FINGERPRINT --reason "…"`
)

// kindLabel names a finding kind for finance (reconcile.Kinds); a kind
// the table does not know is named by its own words.
func kindLabel(k reconcile.FindingKind) string {
	if l := k.Info().Label; l != "" {
		return l
	}
	s := clean(strings.ReplaceAll(string(k), "_", " "), 60, true)
	if s == "" {
		return "Finding"
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// kindAction is the one line that says what a person does next
// (reconcile.Kinds).
func kindAction(k reconcile.FindingKind) string {
	if d := k.Info().Do; d != "" {
		return d
	}
	return "Review it with `" + traceHint + "`."
}

// money formats an amount for people, by the currency's exponent.
func money(m reconcile.Money) string { return moneyText(m.Major(), m.Currency) }

// sumText formats a sum of money as money does an amount, exactly however
// large.
func sumText(t reconcile.Total) string { return moneyText(t.Major(), t.Currency) }

// moneyText puts an amount already in major units beside its currency:
// before it when it looks like an ISO code, cleaned after it when not.
func moneyText(major, currency string) string {
	if len(currency) == 3 && isAlpha(currency) {
		return strings.ToUpper(currency) + " " + major
	}
	if currency == "" {
		return major
	}
	return major + " " + clean(currency, 12, true)
}

func isAlpha(s string) bool {
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return true
}

// moneyPhrase is what a finding is worth, for a line or a header.
func moneyPhrase(f reconcile.Finding, fam family) string {
	switch {
	case fam == famResolved && f.Money.Amount != 0:
		return money(f.Money)
	case f.AtRisk.Amount != 0:
		return money(f.AtRisk) + " at risk"
	case f.Money.Amount != 0:
		return money(f.Money)
	}
	return "no amount"
}

var stripeID = regexp.MustCompile(`^(ch|py|pi|re|pyr|cus|dp|du|in)_[0-9A-Za-z]+$`)

// DashboardURL links a Stripe object of the platform's own account in the
// dashboard of the key's mode; empty for ids that are not Stripe's or
// that redaction would change.
func DashboardURL(id string, live bool) string { return AccountDashboardURL("", id, live) }

// AccountDashboardURL links a Stripe object of account (empty: the
// platform's own) in the dashboard of the key's mode: a connected
// account's object opens in that account's dashboard, which the
// platform's users may view (docs/design.md, "Accounts"). Empty for ids
// that are not Stripe's or that redaction would change, and for an
// account id that is not one.
func AccountDashboardURL(account, id string, live bool) string {
	if len(id) > 255 || !stripeID.MatchString(id) || redact.String(id) != id {
		return ""
	}
	if account != "" && !reconcile.ValidAccountID(account) {
		return ""
	}
	var section string
	switch id[:strings.IndexByte(id, '_')] {
	case "ch", "py", "pi":
		section = "payments"
	case "re", "pyr":
		section = "refunds"
	case "cus":
		section = "customers"
	case "dp", "du":
		section = "disputes"
	case "in":
		section = "invoices"
	}
	base := "https://dashboard.stripe.com/"
	if account != "" {
		base += account + "/"
	}
	if !live {
		base += "test/"
	}
	return base + section + "/" + url.PathEscape(id)
}

// ConnectedAccountURL links a connected account's page in the platform's
// dashboard; empty for the platform's own account and for an id that is
// not an account's.
func ConnectedAccountURL(account string, live bool) string {
	if !reconcile.ValidAccountID(account) {
		return ""
	}
	base := "https://dashboard.stripe.com/"
	if !live {
		base += "test/"
	}
	return base + "connect/accounts/" + account
}

// accountRef names a finding's connected account, by its display name
// where Stripe gives one, linked to its page; empty on the platform's own
// account, where messages read as they always did.
func accountRef(f reconcile.Finding, live bool) (mrkdwn, plain string) {
	if f.Account == "" {
		return "", ""
	}
	label := reconcile.Account{ID: f.Account, Name: f.AccountName}.Label()
	m := escape(prepare(label, 200, true))
	if u := ConnectedAccountURL(f.Account, live); u != "" {
		m = "<" + u + "|" + m + ">"
	}
	return m, prepare(label, 200, true)
}

// providerRefs lists provider ids in code spans with dashboard links, and
// the same plainly for the text fallback.
func providerRefs(account string, ids []string, limit int, live bool) (mrkdwn, plain string) {
	var ms, ps []string
	for i, id := range ids {
		if i == limit {
			more := fmt.Sprintf("+%d more", len(ids)-limit)
			ms, ps = append(ms, more), append(ps, more)
			break
		}
		m := code(id)
		if u := AccountDashboardURL(account, id, live); u != "" {
			m += " (<" + u + "|dashboard>)"
		}
		ms, ps = append(ms, m), append(ps, plainID(id))
	}
	return strings.Join(ms, ", "), strings.Join(ps, ", ")
}

func obligationRef(id string) (mrkdwn, plain string) {
	if id == "" {
		return "none", "none"
	}
	return code(id), plainID(id)
}

func possibleRepeatLine(rows []reconcile.Alert) string {
	attempt := 0
	for _, r := range rows {
		if r.UnknownOutcome {
			attempt = max(attempt, r.Attempts+1)
		}
	}
	s := "Possible repeat: an earlier delivery of this alert got no clear answer from Slack and may have arrived"
	if attempt > 1 {
		s += " (attempt " + strconv.Itoa(attempt) + ")"
	}
	return s + "."
}

func mrkdwn(s string) *slack.TextBlockObject {
	// verbatim: Slack must not turn words into links or mentions.
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, true)
}

func section(s string) *slack.SectionBlock { return slack.NewSectionBlock(mrkdwn(s), nil, nil) }

func header(s string) *slack.HeaderBlock {
	return slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, truncateEscaped(s, maxHeaderText), true, false))
}

func contextBlock(parts ...string) *slack.ContextBlock {
	var els []slack.MixedElement
	for _, p := range parts {
		if p != "" && len(els) < maxContextElem {
			els = append(els, mrkdwn(p))
		}
	}
	return slack.NewContextBlock("", els...)
}

func runLabel(id string) string {
	if id == "" {
		return "an unnamed run"
	}
	return "run " + ownCode(id)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return t.UTC().Format("2006-01-02 15:04")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// renderSummary is one run's summary: counts of what is new, changed and
// resolved by kind, money at risk per currency, the window, and how to
// trace a finding. It names no finding, so it re-alerts nothing.
func renderSummary(r reconcile.Alert, opts PlanOptions) Message {
	s := r.Summary
	if s == nil {
		s = &reconcile.RunSummary{RunID: r.RunID}
	}
	runID := cmpOr(s.RunID, r.RunID)
	total := func(m map[reconcile.FindingKind]int) int {
		n := 0
		for _, v := range m {
			n += v
		}
		return n
	}
	nNew, nChanged, nResolved := total(s.New), total(s.Changed), total(s.Resolved)
	var parts []string
	if nNew > 0 {
		parts = append(parts, strconv.Itoa(nNew)+" new")
	}
	if nChanged > 0 {
		parts = append(parts, strconv.Itoa(nChanged)+" changed")
	}
	if nResolved > 0 {
		parts = append(parts, strconv.Itoa(nResolved)+" resolved")
	}
	title := "Reconciliation: nothing new"
	if len(parts) > 0 {
		noun := " findings"
		if nNew+nChanged+nResolved == 1 {
			noun = " finding"
		}
		title = "Reconciliation: " + strings.Join(parts, ", ") + noun
	}

	window := formatTime(s.Window.From) + " → " + formatTime(s.Window.To) + " UTC"
	facts := fmt.Sprintf("*Window* %s\n*Checked* %s against %s (%d linked)\n*Run* %s",
		window, plural(s.Counts.Obligations, "obligation", "obligations"),
		plural(s.Counts.ProviderObjects, "Stripe object", "Stripe objects"), s.Counts.Linked, ownCode(runID))

	kinds := slices.Collect(maps.Keys(s.New))
	for k := range s.Changed {
		kinds = append(kinds, k)
	}
	for k := range s.Resolved {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b reconcile.FindingKind) int {
		if d := a.Order() - b.Order(); d != 0 {
			return d
		}
		return strings.Compare(string(a), string(b))
	})
	kinds = slices.Compact(kinds)
	var kindLines, kindText []string
	for _, k := range kinds {
		var ns []string
		if n := s.New[k]; n > 0 {
			ns = append(ns, strconv.Itoa(n)+" new")
		}
		if n := s.Changed[k]; n > 0 {
			ns = append(ns, strconv.Itoa(n)+" changed")
		}
		if n := s.Resolved[k]; n > 0 {
			ns = append(ns, strconv.Itoa(n)+" resolved")
		}
		if len(ns) == 0 {
			continue
		}
		label := kindLabel(k) + " (" + string(k.Severity()) + ")"
		kindLines = append(kindLines, "• *"+label+"*: "+strings.Join(ns, ", "))
		kindText = append(kindText, label+": "+strings.Join(ns, ", "))
	}

	// Money at risk by what it is: amounts of different meanings are never
	// added up. A summary stored before the split has only the totals.
	var risk, riskText []string
	if s.ByMeaning != nil {
		for _, m := range reconcile.Meanings {
			var ts []string
			for _, t := range s.ByMeaning.Of(m) {
				if t.Sign() != 0 {
					ts = append(ts, sumText(t))
				}
			}
			if len(ts) > 0 {
				risk = append(risk, "• *"+m.Label()+"*: "+strings.Join(ts, " · "))
				riskText = append(riskText, m.Label()+": "+strings.Join(ts, ", "))
			}
		}
	} else {
		var ts []string
		for _, t := range s.AtRisk {
			if t.Sign() != 0 {
				ts = append(ts, sumText(t))
			}
		}
		if len(ts) > 0 {
			risk = append(risk, strings.Join(ts, " · "))
			riskText = append(riskText, strings.Join(ts, ", "))
		}
	}
	var confirmed string
	if s.Confirmed > 0 {
		var ts []string
		for _, t := range s.ConfirmedTotal {
			ts = append(ts, sumText(t))
		}
		confirmed = plural(s.Confirmed, "payment whose outcome was unknown was", "payments whose outcome was unknown were") +
			" confirmed from Stripe's records and marked PAID"
		if len(ts) > 0 {
			confirmed += " (" + strings.Join(ts, ", ") + ")"
		}
		confirmed += "."
	}
	open := 0
	for _, v := range s.Open {
		open += v
	}

	var blocks []slack.Block
	if r.UnknownOutcome {
		blocks = append(blocks, contextBlock(":warning: "+possibleRepeatLine([]reconcile.Alert{r})))
	}
	blocks = append(blocks, header(title), section(facts))
	if len(kindLines) > 0 {
		blocks = append(blocks, section("*By kind*\n"+strings.Join(kindLines, "\n")))
	}
	if len(risk) > 0 {
		blocks = append(blocks, section("*Money at risk* (new and changed findings)\n"+strings.Join(risk, "\n")))
	}
	if confirmed != "" {
		blocks = append(blocks, section(":white_check_mark: "+confirmed))
	}
	blocks = append(blocks, contextBlock(
		"Open after this run: "+strconv.Itoa(open),
		"Trace a finding: `"+traceHint+"`",
		"List open findings: `"+listHint+"`",
	))

	var t strings.Builder
	if r.UnknownOutcome {
		t.WriteString(possibleRepeatLine([]reconcile.Alert{r}) + "\n")
	}
	fmt.Fprintf(&t, "%s. Run %s, window %s.", title, escape(truncate(runID, 100)), window)
	if len(kindText) > 0 {
		t.WriteString(" " + strings.Join(kindText, "; ") + ".")
	}
	if len(riskText) > 0 {
		t.WriteString(" Money at risk: " + strings.Join(riskText, "; ") + ".")
	}
	if confirmed != "" {
		t.WriteString(" " + confirmed)
	}
	t.WriteString(" Trace a finding: " + traceHint + ".")
	return Message{
		Kind: KindSummary, RunID: r.RunID, AlertIDs: []int64{r.ID}, Parent: -1,
		PossibleRepeat: r.UnknownOutcome, Text: t.String(), Blocks: blocks,
	}
}

// renderFinding is a critical finding's own top-level message.
func renderFinding(r reconcile.Alert, opts PlanOptions) Message {
	f := r.Finding
	label := kindLabel(f.Kind)
	sev := severityOf(f)
	title := ":rotating_light: " + label + ": " + moneyPhrase(f, famFiring)
	if r.Changed {
		title = ":rotating_light: Changed: " + label + ", now " + moneyPhrase(f, famFiring)
	}
	oblM, oblP := obligationRef(f.ObligationID)
	facts := "*Obligation* " + oblM + "\n*Amount* " + money(f.Money)
	if f.AtRisk.Amount != 0 {
		facts += " · *At risk* " + money(f.AtRisk)
	}
	facts += " · *Severity* " + string(sev)
	acctM, acctP := accountRef(f, opts.Live)
	if acctM != "" {
		facts += "\n*Account* " + acctM
	}
	idsM, idsP := providerRefs(f.Account, f.ProviderIDs, 10, opts.Live)
	detail := clean(f.Detail, 1500, false)
	action := kindAction(f.Kind)

	var blocks []slack.Block
	if r.UnknownOutcome {
		blocks = append(blocks, contextBlock(":warning: "+possibleRepeatLine([]reconcile.Alert{r})))
	}
	blocks = append(blocks, header(title), section(facts))
	if idsM != "" {
		blocks = append(blocks, section("*At Stripe* "+idsM))
	}
	if detail != "" {
		blocks = append(blocks, section(detail))
	}
	if r.Changed {
		blocks = append(blocks, section("_This finding was alerted before; the money at risk or the Stripe objects changed since._"))
	}
	blocks = append(blocks, section("*What to do:* "+action))
	trace := ""
	if f.ObligationID != "" {
		trace = "Trace: `reconcile trace " + strings.Trim(code(f.ObligationID), "`") + "`"
	}
	blocks = append(blocks, contextBlock(
		strings.ToUpper(string(sev[:1]))+string(sev[1:])+" · "+runLabel(r.RunID),
		trace,
		"Stop repeats: `reconcile ack "+strings.Trim(ownCode(f.Fingerprint), "`")+` --reason "…"`+"`",
	))
	blocks = withAffordance(blocks, ackAffordance(opts, findingLink(f.Fingerprint)))

	var t strings.Builder
	if r.UnknownOutcome {
		t.WriteString(possibleRepeatLine([]reconcile.Alert{r}) + "\n")
	}
	if r.Changed {
		t.WriteString("Changed: ")
	}
	fmt.Fprintf(&t, "%s (%s): %s. Obligation %s, amount %s.", label, sev, moneyPhrase(f, famFiring), oblP, money(f.Money))
	if acctP != "" {
		t.WriteString(" Account " + acctP + ".")
	}
	if idsP != "" {
		t.WriteString(" Stripe: " + idsP + ".")
	}
	if detail != "" {
		t.WriteString(" " + strings.Join(strings.Fields(detail), " "))
	}
	t.WriteString("\nWhat to do: " + action)
	return Message{
		Kind: KindFinding, RunID: r.RunID, AlertIDs: []int64{r.ID}, Parent: -1, Fingerprints: []string{f.Fingerprint},
		PossibleRepeat: r.UnknownOutcome, Text: t.String(), Blocks: blocks,
	}
}

// itemLine renders one row as a line of a group message.
func itemLine(r reconcile.Alert, fam family, now time.Time, opts PlanOptions) (line, text string) {
	f := r.Finding
	label := kindLabel(f.Kind)
	sev := string(severityOf(f))
	oblM, oblP := obligationRef(f.ObligationID)
	idsM, idsP := providerRefs(f.Account, f.ProviderIDs, 5, opts.Live)
	acctM, acctP := accountRef(f, opts.Live)
	var m, p strings.Builder
	m.WriteString("• ")
	p.WriteString("- ")
	if fam == famFiring && r.Changed {
		m.WriteString("_Changed:_ ")
		p.WriteString("changed: ")
	}
	m.WriteString("*" + label + "*")
	p.WriteString(label)
	if fam != famResolved {
		m.WriteString(" (" + sev + ")")
		p.WriteString(" (" + sev + ")")
	}
	amount := moneyPhrase(f, fam)
	if f.ObligationID == "" {
		// An orphan has no obligation; its Stripe ids say what it is.
		m.WriteString(" — " + amount)
		p.WriteString(": " + amount)
	} else {
		m.WriteString(" " + oblM + " — " + amount)
		p.WriteString(" " + oblP + ": " + amount)
	}
	if idsM != "" {
		m.WriteString(" · " + idsM)
		p.WriteString("; Stripe " + idsP)
	}
	if acctM != "" {
		m.WriteString(" · account " + acctM)
		p.WriteString("; account " + acctP)
	}
	switch fam {
	case famFiring:
		if d := clean(f.Detail, 140, true); d != "" {
			m.WriteString(" — " + d)
		}
	case famRepeat:
		m.WriteString(" · fingerprint " + ownCode(f.Fingerprint))
	}
	return truncateEscaped(m.String(), maxLine), truncateEscaped(p.String(), maxLine)
}

// familyHeading introduces a family's lines in a group message; it says
// "resolved" for resolutions, which is how a reader tells them apart.
func familyHeading(fam family) string {
	switch fam {
	case famRepeat:
		return ":repeat: *Still open* past the repeat interval and not acknowledged:"
	case famResolved:
		return ":white_check_mark: *Resolved*: no longer found:"
	}
	return ":mag: *To check*:"
}

func familyPlain(fam family) string {
	switch fam {
	case famRepeat:
		return "Still open past the repeat interval and not acknowledged:"
	case famResolved:
		return "Resolved, no longer found:"
	}
	return "To check:"
}

// renderGroup lists a group's rows in one message: as many lines as fit,
// the rest counted with the command that lists them all. It carries every
// row of the group.
func renderGroup(g *group, now time.Time, opts PlanOptions) Message {
	rows := make([]reconcile.Alert, len(g.items))
	ids := make([]int64, len(g.items))
	fams := map[family]int{}
	for i, it := range g.items {
		rows[i], ids[i] = it.row, it.row.ID
		fams[it.fam]++
	}
	k := g.key
	n := len(g.items)
	shown := fitItems(g.items)
	if shown < n {
		shown = max(shown-1, 1) // room for the line that counts the rest
	}
	var title string
	switch {
	case len(fams) > 1:
		title = "*" + plural(n, "finding", "findings") + "* from " + runLabel(k.run)
	case fams[famResolved] > 0:
		title = ":white_check_mark: *" + plural(n, "finding", "findings") + " resolved*: " + runLabel(k.run) + " no longer finds them"
	case fams[famRepeat] > 0:
		title = ":repeat: *" + plural(n, "finding", "findings") + " still open* at " + formatTime(now) + " UTC, past the repeat interval (" + runLabel(k.run) + ")"
	default:
		title = "*" + plural(n, "finding", "findings") + " to check* from " + runLabel(k.run)
	}
	plainTitle := strings.NewReplacer("*", "", "`", "", ":white_check_mark: ", "", ":repeat: ", "").Replace(title)

	var lines, text []string
	var kinds []reconcile.FindingKind
	fam := family(-1)
	for i, it := range g.items[:shown] {
		if i == 0 || it.fam != fam {
			fam = it.fam
			// A one-family group's title says it already; pack counted the
			// heading anyway, which only errs on the safe side.
			if len(fams) > 1 {
				lines = append(lines, familyHeading(fam))
				text = append(text, familyPlain(fam))
			}
		}
		lines = append(lines, it.line)
		text = append(text, it.text)
	}
	if rest := n - shown; rest > 0 {
		more := "…and " + formatCount(rest) + " more: `" + listHint + "`"
		lines = append(lines, more)
		text = append(text, strings.ReplaceAll(more, "`", ""))
	}
	for _, it := range g.items {
		if it.fam != famResolved && !slices.Contains(kinds, it.row.Finding.Kind) {
			kinds = append(kinds, it.row.Finding.Kind)
		}
	}
	slices.SortFunc(kinds, func(a, b reconcile.FindingKind) int { return a.Order() - b.Order() })

	var blocks []slack.Block
	possible := k.unknown || anyUnknown(rows)
	if possible {
		blocks = append(blocks, contextBlock(":warning: "+possibleRepeatLine(rows)))
	}
	blocks = append(blocks, section(title))
	for _, s := range sectionize(lines) {
		blocks = append(blocks, section(s))
	}
	var todo []string
	for _, kd := range kinds {
		todo = append(todo, "• *"+kindLabel(kd)+"*: "+kindAction(kd))
	}
	if len(todo) > 0 {
		blocks = append(blocks, section("*What to do*\n"+strings.Join(todo, "\n")))
	}
	foot := []string{"Trace a finding: `" + traceHint + "`"}
	if fams[famRepeat] > 0 {
		foot = append(foot, "Stop repeats: `"+ackHint+"`")
	}
	blocks = append(blocks, contextBlock(foot...))
	// Only findings still open can be acknowledged; the page lists them all.
	var fps []string
	for _, it := range g.items {
		if it.row.Event != reconcile.AlertResolved && it.row.Finding.Fingerprint != "" {
			fps = append(fps, it.row.Finding.Fingerprint)
		}
	}
	if len(fps) > 0 {
		blocks = withAffordance(blocks, ackAffordance(opts, "/"))
	}

	var t strings.Builder
	if possible {
		t.WriteString(possibleRepeatLine(rows) + "\n")
	}
	// The text carries the ids and amounts; what to do is in the blocks,
	// as the text has room for little more.
	t.WriteString(plainTitle + "\n" + strings.Join(text, "\n"))
	return Message{
		Kind: KindGroup, RunID: k.run, AlertIDs: ids, Parent: k.parent, ThreadTS: k.ts, Fingerprints: fps,
		PossibleRepeat: possible, Text: t.String(), Blocks: blocks,
	}
}

// causeShown is how many findings a cause's message lists; the rest are
// counted, with the command that lists them all.
const causeShown = 5

// renderCause is one message for the findings of one kind and one cause:
// how many, their money at risk per currency, the first few, how to list
// them all, and what to do. A critical cause is its own top-level message;
// another goes in its run summary's thread.
func renderCause(g *group, opts PlanOptions) Message {
	rows := make([]reconcile.Alert, len(g.items))
	ids := make([]int64, len(g.items))
	var risk []reconcile.Money
	for i, it := range g.items {
		rows[i], ids[i] = it.row, it.row.ID
		risk = append(risk, reconcile.Money{Amount: it.row.Finding.AtRisk.Amount, Currency: strings.ToLower(it.row.Finding.AtRisk.Currency)})
	}
	f := g.items[0].row.Finding
	k := f.Kind
	sev := severityOf(f)
	n := len(g.items)
	var totals []string
	for _, t := range reconcile.SumByCurrency(risk) {
		if t.Sign() != 0 {
			totals = append(totals, sumText(t))
		}
	}
	on, onPlain, filter := "", "", "--kind "+string(k)
	switch {
	case f.Target != "":
		on, onPlain = " on "+code(f.Target), " on "+plainID(f.Target)
		filter += " --target " + strings.Trim(code(f.Target), "`")
	case f.ObligationID != "":
		on, onPlain = " for "+code(f.ObligationID), " for "+plainID(f.ObligationID)
		filter += " --target " + strings.Trim(code(f.ObligationID), "`")
	}
	worth := "no amount at risk"
	if len(totals) > 0 {
		worth = strings.Join(totals, " + ") + " at risk"
	}
	icon := ""
	if sev == reconcile.Critical {
		icon = ":rotating_light: "
	}
	title := icon + "*" + formatCount(n) + " × " + kindLabel(k) + "*" + on + " — " + worth
	plainTitle := formatCount(n) + " × " + kindLabel(k) + onPlain + " (" + string(sev) + "): " + worth
	var lines, text []string
	for _, it := range g.items[:min(n, causeShown)] {
		lines, text = append(lines, it.line), append(text, it.text)
	}
	list := "reconcile findings --open " + filter
	if rest := n - min(n, causeShown); rest > 0 {
		lines = append(lines, "…and "+formatCount(rest)+" more: `"+list+"`")
		text = append(text, "…and "+formatCount(rest)+" more: "+list)
	}
	action := kindAction(k)

	var blocks []slack.Block
	possible := g.key.unknown || anyUnknown(rows)
	if possible {
		blocks = append(blocks, contextBlock(":warning: "+possibleRepeatLine(rows)))
	}
	blocks = append(blocks, section(title))
	for _, s := range sectionize(lines) {
		blocks = append(blocks, section(s))
	}
	blocks = append(blocks, section("*What to do:* "+action))
	blocks = append(blocks, contextBlock(
		strings.ToUpper(string(sev[:1]))+string(sev[1:])+" · "+runLabel(g.key.run),
		"List them all: `"+list+"`",
	))
	blocks = withAffordance(blocks, ackAffordance(opts, causeLink(f)))
	fps := make([]string, 0, len(g.items))
	for _, it := range g.items {
		fps = append(fps, it.row.Finding.Fingerprint)
	}
	var t strings.Builder
	if possible {
		t.WriteString(possibleRepeatLine(rows) + "\n")
	}
	t.WriteString(plainTitle + ".\nWhat to do: " + action + "\n" + strings.Join(text, "\n"))
	return Message{
		Kind: KindCause, RunID: g.key.run, AlertIDs: ids, Parent: g.key.parent, ThreadTS: g.key.ts, Fingerprints: fps,
		PossibleRepeat: possible, Text: t.String(), Blocks: blocks,
	}
}

func anyUnknown(rows []reconcile.Alert) bool {
	return slices.ContainsFunc(rows, func(r reconcile.Alert) bool { return r.UnknownOutcome })
}

// renderOverflow counts what did not fit in a drain's message budget: a
// flood of findings is a reason to look at the report, not to fill the
// channel.
func renderOverflow(items []item, parent int) Message {
	ids := make([]int64, len(items))
	rows := make([]reconcile.Alert, len(items))
	type key struct {
		fam  family
		kind reconcile.FindingKind
	}
	counts := map[key]int{}
	var atRisk []reconcile.Money
	var runs []string
	for i, it := range items {
		ids[i], rows[i] = it.row.ID, it.row
		counts[key{it.fam, it.row.Finding.Kind}]++
		if m := it.row.Finding.AtRisk; it.fam != famResolved {
			// Summed in one case of the currency, as "USD" and "usd" are one.
			atRisk = append(atRisk, reconcile.Money{Amount: m.Amount, Currency: strings.ToLower(m.Currency)})
		}
		if !slices.Contains(runs, it.row.RunID) {
			runs = append(runs, it.row.RunID)
		}
	}
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b key) int {
		if a.fam != b.fam {
			return int(a.fam - b.fam)
		}
		if d := a.kind.Order() - b.kind.Order(); d != 0 {
			return d
		}
		return strings.Compare(string(a.kind), string(b.kind))
	})
	var lines, plain []string
	for _, k := range keys {
		word := "to check"
		switch k.fam {
		case famRepeat:
			word = "still open"
		case famResolved:
			word = "resolved"
		}
		s := fmt.Sprintf("%s %s (%s)", formatCount(counts[k]), kindLabel(k.kind), word)
		lines = append(lines, "• "+s)
		plain = append(plain, s)
		if len(lines) == 40 {
			break
		}
	}
	var riskS []string
	// Exact however many findings of however much: a sum past int64 must
	// not wrap around to a negative amount.
	for _, t := range reconcile.SumByCurrency(atRisk) {
		if t.Sign() != 0 {
			riskS = append(riskS, sumText(t))
		}
	}
	var runLabels []string
	for i, r := range runs {
		if i == 5 {
			runLabels = append(runLabels, fmt.Sprintf("+%d more", len(runs)-5))
			break
		}
		runLabels = append(runLabels, ownCode(r))
	}
	title := "*" + formatCount(len(items)) + " more alerts* are counted here instead of listed, to keep this channel readable (runs " + strings.Join(runLabels, ", ") + "):"

	var blocks []slack.Block
	possible := anyUnknown(rows)
	if possible {
		blocks = append(blocks, contextBlock(":warning: Some of these may repeat: an earlier delivery got no clear answer from Slack and may have arrived."))
	}
	blocks = append(blocks, section(title+"\n"+strings.Join(lines, "\n")))
	if len(riskS) > 0 {
		blocks = append(blocks, section("*Money at risk* among them: "+strings.Join(riskS, " · ")))
	}
	blocks = append(blocks, contextBlock("List them all: `"+listHint+"`", "Trace a finding: `"+traceHint+"`"))

	var t strings.Builder
	if possible {
		t.WriteString("Some of these may repeat: an earlier delivery got no clear answer from Slack and may have arrived.\n")
	}
	t.WriteString(formatCount(len(items)) + " more alerts, counted instead of listed: " + strings.Join(plain, "; ") + ".")
	if len(riskS) > 0 {
		t.WriteString(" Money at risk among them: " + strings.Join(riskS, ", ") + ".")
	}
	t.WriteString(" List them all: " + listHint + ".")
	run := ""
	if len(runs) == 1 {
		run = runs[0]
	}
	return Message{
		Kind: KindOverflow, RunID: run, AlertIDs: ids, Parent: parent,
		PossibleRepeat: possible, Text: t.String(), Blocks: blocks,
	}
}

// formatCount groups thousands: 10000 → "10,000".
func formatCount(n int) string {
	return reconcile.Money{Amount: int64(n), Currency: "jpy"}.Major()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }

// fit is the last guard on Slack's limits: whatever rendering produced, the
// message is cut to fit rather than rejected by Slack.
func fit(m *Message) {
	const note = "Not all of this fits in one Slack message; see `" + listHint + "`."
	// The Acknowledge button survives any cut: it is set apart and put
	// back last.
	var actions []slack.Block
	m.Blocks = slices.DeleteFunc(m.Blocks, func(b slack.Block) bool {
		if _, ok := b.(*slack.ActionBlock); ok {
			actions = append(actions, b)
			return true
		}
		return false
	})
	defer func() { m.Blocks = append(m.Blocks, actions...) }()
	if limit := maxBlocks - len(actions); len(m.Blocks) > limit {
		m.Blocks = append(m.Blocks[:limit-1:limit-1], contextBlock(note))
	}
	for _, b := range m.Blocks {
		switch b := b.(type) {
		case *slack.HeaderBlock:
			if b.Text != nil {
				b.Text.Text = truncateEscaped(b.Text.Text, maxHeaderText)
			}
		case *slack.SectionBlock:
			if b.Text != nil {
				b.Text.Text = truncateEscaped(b.Text.Text, maxSectionText)
			}
		case *slack.ContextBlock:
			els := b.ContextElements.Elements
			if len(els) > maxContextElem {
				b.ContextElements.Elements = els[:maxContextElem]
			}
			for _, e := range b.ContextElements.Elements {
				if t, ok := e.(*slack.TextBlockObject); ok {
					t.Text = truncateEscaped(t.Text, maxSectionText)
				}
			}
		}
	}
	if blocksText(m.Blocks) > maxBlocksText {
		// Drop blocks from the end until the rest and the note fit.
		for len(m.Blocks) > 1 && blocksText(m.Blocks)+len(note) > maxBlocksText {
			m.Blocks = m.Blocks[:len(m.Blocks)-1]
		}
		m.Blocks = append(m.Blocks, contextBlock(note))
	}
	m.Text = truncateEscaped(m.Text, maxText)
}

// blocksText adds up the characters of every text in the blocks, which is
// what Slack's msg_blocks_too_long counts.
func blocksText(blocks []slack.Block) int {
	n := 0
	for _, b := range blocks {
		switch b := b.(type) {
		case *slack.HeaderBlock:
			n += runeLen(b.Text.Text)
		case *slack.SectionBlock:
			if b.Text != nil {
				n += runeLen(b.Text.Text)
			}
		case *slack.ContextBlock:
			for _, e := range b.ContextElements.Elements {
				if t, ok := e.(*slack.TextBlockObject); ok {
					n += runeLen(t.Text)
				}
			}
		}
	}
	return n
}
