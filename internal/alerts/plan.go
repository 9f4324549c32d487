// Package alerts tells finance in Slack what a run found: it plans the
// messages that the alert outbox's due rows call for (pure: the rows and
// now in, messages out), renders them as Block Kit within Slack's limits
// with every outside string redacted and escaped, and delivers them through
// slack-go, marking a row sent only after Slack accepted the message that
// carries it (docs/design.md, "The schema reconcile").
//
// What each finding calls for (first alert, change, repeat after the
// repeat interval, resolution, acknowledgement) is Decide's, the alert
// lifecycle, which the store applies as it writes a run's findings and
// their outbox rows; the planner adds no message of its own, so a rerun
// with nothing due posts nothing.
package alerts

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"reconcile"
)

// Outbox is what delivery needs from the alert outbox: the rows due now,
// and recording what became of a send. The store implements it.
type Outbox interface {
	// Due returns unsent rows due at now, oldest first, a run's summary
	// before its findings, at most limit of them. ThreadTS is filled: for
	// resolved and repeat rows, the ts of the finding's first sent firing
	// message; for firing rows, the ts of its run's summary if that was
	// sent.
	Due(ctx context.Context, now time.Time, limit int) ([]reconcile.Alert, error)
	// Fence is called before each message is claimed (MarkSending) and
	// sent; release is called once its outcome is recorded. An outbox
	// drained by a run that holds the run lock proves here that the lock
	// is still the run's, and keeps another run from beginning until
	// release, so that the next run finds the message sent or not, never
	// in flight. It fails when the lock was lost: nothing is sent then.
	Fence(ctx context.Context) (release func(), err error)
	// MarkSending records, before a message goes out, the intent to send
	// it, so that a process that dies before recording the outcome leaves
	// its rows' outcome unknown: Due then reports UnknownOutcome and the
	// next copy says it may be a repeat.
	MarkSending(ctx context.Context, ids []int64, at time.Time) error
	// MarkSent records that Slack accepted the message carrying row id, in
	// channel, under ts (the ts a later reply about this row threads
	// under: the message's own for a top-level message, its thread's root
	// for a reply).
	MarkSent(ctx context.Context, id int64, channel, ts string, at time.Time) error
	// MarkAttempt records a failed attempt; the row is not due again before
	// next. unknown is set when the request may have been delivered.
	MarkAttempt(ctx context.Context, id int64, next time.Time, unknown bool, errText string) error
	// RecordMessage keeps a message the bot posted and Slack accepted, as
	// posted, with the findings it announces: what a button pressed on it
	// acknowledges (docs/design.md, "Buttons in Slack"). Recording the same
	// channel and ts again keeps the first.
	RecordMessage(ctx context.Context, m reconcile.SlackMessage) error
}

// PlanOptions shape what Plan produces.
type PlanOptions struct {
	// Live makes links point at Stripe's live dashboard instead of /test/.
	Live bool
	// Webhook plans for an incoming webhook: no threads, so everything that
	// would go into a thread is grouped into as few top-level messages.
	Webhook bool
	// MaxCritical is how many critical findings of one drain get a message
	// each; the rest are grouped. Default 10.
	MaxCritical int
	// MaxMessages caps the messages of one drain beyond its runs'
	// summaries, most severe first; what does not fit is counted in one
	// overflow message within the cap. Default 10.
	MaxMessages int
	// MaxThreads is how many distinct finding threads of one drain get a
	// reply of their own; other repeats and resolutions are grouped.
	// Default 10.
	MaxThreads int
	// Buttons puts an Acknowledge button on every message announcing open
	// findings: a bot token and SLACK_SIGNING_SECRET are set, so serve can
	// answer it (docs/design.md, "Buttons in Slack").
	Buttons bool
	// PublicURL is serve.public_url: without buttons, such a message links
	// to the findings' page under it. Empty: no link.
	PublicURL string
}

func (o PlanOptions) withDefaults() PlanOptions {
	if o.MaxCritical <= 0 {
		o.MaxCritical = 10
	}
	if o.MaxMessages <= 0 {
		o.MaxMessages = 10
	}
	if o.MaxThreads <= 0 {
		o.MaxThreads = 10
	}
	return o
}

// MessageKind says what a planned message is.
type MessageKind string

// The message kinds.
const (
	KindSummary  MessageKind = "summary"  // one run's summary
	KindFinding  MessageKind = "finding"  // one critical finding
	KindGroup    MessageKind = "group"    // many findings, repeats or resolutions, listed
	KindCause    MessageKind = "cause"    // findings of one kind and one cause, counted with the first few listed
	KindOverflow MessageKind = "overflow" // findings counted, not listed
)

// Message is one Slack message to post and the outbox rows it carries:
// once Slack accepted it, exactly those rows are marked sent.
type Message struct {
	Kind     MessageKind
	RunID    string
	AlertIDs []int64
	// Parent is the index, in the same plan, of the message this one
	// replies to (its ts is known only once that one is sent); -1 if none.
	Parent int
	// ThreadTS is the ts of an earlier message this one replies to; empty
	// for a top-level message. Parent wins when both are set.
	ThreadTS string
	// Fingerprints are the findings the message announces as open (firing
	// or still open), which its Acknowledge button acknowledges; none for
	// a summary, an overflow or resolutions.
	Fingerprints []string
	// PossibleRepeat is set when an earlier delivery of a carried row may
	// have arrived; the message says so.
	PossibleRepeat bool
	// Text is the notification and screen-reader text, carrying the
	// essential ids and amounts; Blocks are what Slack shows.
	Text   string
	Blocks []slack.Block
}

// family is what a listed row announces.
type family int

const (
	famFiring family = iota
	famRepeat
	famResolved
	famAny // webhook: every family in one group
)

// item is one row to list in a group message, rendered once.
type item struct {
	row  reconcile.Alert
	fam  family
	line string // mrkdwn, one line
	text string // plain text, one line
}

type groupKey struct {
	run     string
	fam     family
	parent  int
	ts      string
	unknown bool
}

type group struct {
	key   groupKey
	items []item
}

// Plan turns due outbox rows into the messages to post, in order: the runs'
// summaries, one message per critical finding (up to MaxCritical), then
// groups (high and warning findings in their run summary's thread, repeats
// and resolutions in their finding's thread), then, beyond MaxMessages, one
// overflow message that counts the rest. Every row is carried by exactly
// one message. Plan adds nothing that is not due and is pure: the same rows,
// now and options give the same messages.
func Plan(rows []reconcile.Alert, now time.Time, opts PlanOptions) []Message {
	opts = opts.withDefaults()
	var summaries []Message
	summaryAt := map[string]int{}
	for _, r := range rows {
		if r.Event != reconcile.AlertSummary {
			continue
		}
		if _, ok := summaryAt[r.RunID]; !ok {
			summaryAt[r.RunID] = len(summaries)
		}
		summaries = append(summaries, renderSummary(r, opts))
	}

	// Firing findings of one kind and one cause (the charge or payment
	// intent they concern, else their obligation) go into one message;
	// a cause with one finding is a critical's own message or a line of
	// its run's digest.
	type causeKey struct {
		run     string
		kind    reconcile.FindingKind
		cause   string
		unknown bool
	}
	var causeOrder []causeKey
	byCause := map[causeKey][]reconcile.Alert{}
	for _, r := range rows {
		switch r.Event {
		case reconcile.AlertSummary, reconcile.AlertRepeat, reconcile.AlertResolved:
			continue
		}
		k := causeKey{r.RunID, r.Finding.Kind, causeOf(r.Finding), r.UnknownOutcome}
		if _, ok := byCause[k]; !ok {
			causeOrder = append(causeOrder, k)
		}
		byCause[k] = append(byCause[k], r)
	}
	var crits []reconcile.Alert
	var causes []*group
	lone := map[int64]bool{} // firing rows listed in their run's digest
	for _, k := range causeOrder {
		rs := byCause[k]
		switch {
		case len(rs) > 1:
			g := &group{key: groupKey{run: k.run, fam: famFiring, parent: -1, unknown: k.unknown}}
			if severityOf(rs[0].Finding) != reconcile.Critical && !opts.Webhook {
				if i, ok := summaryAt[k.run]; ok {
					g.key.parent = i
				} else {
					g.key.ts = rs[0].ThreadTS
				}
			}
			for _, r := range rs {
				line, text := itemLine(r, famFiring, now, opts)
				g.items = append(g.items, item{row: r, fam: famFiring, line: line, text: text})
			}
			slices.SortStableFunc(g.items, compareItems)
			causes = append(causes, g)
		case severityOf(rs[0].Finding) == reconcile.Critical && len(crits) < opts.MaxCritical:
			crits = append(crits, rs[0])
		default:
			lone[rs[0].ID] = true
		}
	}
	slices.SortStableFunc(causes, func(a, b *group) int {
		return cmp.Compare(severityOf(b.items[0].row.Finding).Rank(), severityOf(a.items[0].row.Finding).Rank())
	})

	var groups []*group
	byKey := map[groupKey]*group{}
	threads := map[string]bool{}
	for _, r := range rows {
		var fam family
		switch r.Event {
		case reconcile.AlertSummary:
			continue
		case reconcile.AlertRepeat:
			fam = famRepeat
		case reconcile.AlertResolved:
			fam = famResolved
		default: // firing, or an event this version does not know: announce it
			fam = famFiring
			if !lone[r.ID] {
				continue // its own message, or its cause's
			}
		}
		k := groupKey{run: r.RunID, fam: fam, parent: -1, unknown: r.UnknownOutcome}
		if opts.Webhook {
			k.fam = famAny
		} else {
			i, hasSummary := summaryAt[r.RunID]
			switch {
			case fam == famFiring && hasSummary:
				k.parent = i
			case fam == famFiring:
				k.ts = r.ThreadTS
			case r.ThreadTS != "" && (threads[r.ThreadTS] || len(threads) < opts.MaxThreads):
				threads[r.ThreadTS] = true
				k.ts = r.ThreadTS
			case hasSummary:
				k.parent = i
			}
		}
		g := byKey[k]
		if g == nil {
			g = &group{key: k}
			byKey[k] = g
			groups = append(groups, g)
		}
		line, text := itemLine(r, fam, now, opts)
		g.items = append(g.items, item{row: r, fam: fam, line: line, text: text})
	}
	for _, g := range groups {
		slices.SortStableFunc(g.items, compareItems)
	}

	// Keep within MaxMessages beyond the summaries: criticals, then causes
	// most severe first, then the digests; one group is one message, its
	// lines cut to what fits and the rest counted. What does not fit is
	// counted in one overflow message.
	// When every finding row is of one run whose summary is in this plan,
	// what does not fit is counted in that summary, not a message of its
	// own.
	foldAt, foldable := -1, false
	for _, r := range rows {
		if r.Event == reconcile.AlertSummary {
			continue
		}
		i, ok := summaryAt[r.RunID]
		if !ok || foldAt >= 0 && i != foldAt {
			foldable = false
			break
		}
		foldAt, foldable = i, true
	}
	var overflow []item
	if len(crits)+len(causes)+len(groups) > opts.MaxMessages {
		room := opts.MaxMessages - 1
		if foldable {
			room = opts.MaxMessages
		}
		if len(crits) > room {
			for _, r := range crits[room:] {
				overflow = append(overflow, item{row: r, fam: famFiring})
			}
			crits = crits[:room]
		}
		room -= len(crits)
		if len(causes) > room {
			for _, g := range causes[room:] {
				overflow = append(overflow, g.items...)
			}
			causes = causes[:room]
		}
		room -= len(causes)
		if len(groups) > room {
			for _, g := range groups[room:] {
				overflow = append(overflow, g.items...)
			}
			groups = groups[:room]
		}
	}

	msgs := summaries
	for _, r := range crits {
		msgs = append(msgs, renderFinding(r, opts))
	}
	for _, g := range causes {
		msgs = append(msgs, renderCause(g, opts))
	}
	for _, g := range groups {
		msgs = append(msgs, renderGroup(g, now, opts))
	}
	switch {
	case len(overflow) > 0 && foldable:
		foldOverflow(&msgs[foldAt], renderOverflow(overflow, -1))
	case len(overflow) > 0:
		parent := -1
		if i, ok := summaryAt[overflow[0].row.RunID]; ok && !opts.Webhook {
			parent = i
		}
		msgs = append(msgs, renderOverflow(overflow, parent))
	}
	for i := range msgs {
		fit(&msgs[i])
	}
	return msgs
}

// compareItems orders a group's lines: by family, most severe first, by
// kind in the order of reconcile.Kinds, then by ids, so that a plan does not depend on
// the order the outbox returned rows in.
func compareItems(a, b item) int {
	return cmp.Or(
		cmp.Compare(a.fam, b.fam),
		cmp.Compare(severityOf(b.row.Finding).Rank(), severityOf(a.row.Finding).Rank()),
		cmp.Compare(a.row.Finding.Kind.Order(), b.row.Finding.Kind.Order()),
		strings.Compare(string(a.row.Finding.Kind), string(b.row.Finding.Kind)),
		strings.Compare(a.row.Finding.ObligationID, b.row.Finding.ObligationID),
		slices.Compare(a.row.Finding.ProviderIDs, b.row.Finding.ProviderIDs),
		cmp.Compare(a.row.ID, b.row.ID),
	)
}

func severityOf(f reconcile.Finding) reconcile.Severity {
	if f.Severity.Rank() > 0 {
		return f.Severity
	}
	return f.Kind.Severity()
}

// Slack's limits (https://docs.slack.dev/reference/block-kit/blocks): 50
// blocks, 3,000 characters a section, 150 a header, 10 context elements,
// and a top-level text truncated past 40,000. chat.postMessage is stricter
// than documented: it answers msg_too_long for a text much over 4,000
// characters and msg_blocks_too_long when the texts of all blocks add up
// to about 12,000 (slackapi/bolt-js#2509). Plans keep under those.
const (
	maxBlocks      = 50
	maxSectionText = 3000
	maxHeaderText  = 150
	maxContextElem = 10
	maxText        = 4000
	maxBlocksText  = 12000

	sectionBudget    = 2900
	groupFixedBlocks = 4    // possible repeat, title, what to do, footer
	groupLinesText   = 3400 // of maxText, for a group's listed lines
	groupLinesBlocks = 8600 // of maxBlocksText, the rest for title, what to do, footer
	maxLine          = 600  // one listed line, mrkdwn or plain
)

// fitItems is how many of a group's sorted items one message lists within
// Slack's limits, laid out exactly as renderGroup does; the rest are
// counted.
func fitItems(items []item) int {
	var lay layout
	for i, it := range items {
		if lay.add(it, i == 0) && i > 0 {
			return i
		}
	}
	return len(items)
}

// causeOf is what a finding is about beyond its kind: the charge or
// payment intent its money concerns, else its obligation, else its first
// provider object. A connected account's objects are its own: the same
// id on two accounts is two causes.
func causeOf(f reconcile.Finding) string {
	switch {
	case f.Target != "":
		return "target " + reconcile.AccountObject(f.Account, f.Target)
	case f.ObligationID != "":
		return "obligation " + f.ObligationID
	case len(f.ProviderIDs) > 0:
		return "object " + reconcile.AccountObject(f.Account, f.ProviderIDs[0])
	}
	return ""
}

// layout counts how a group message's lines fill sections, the blocks'
// total and the text.
type layout struct {
	sections, secLen, chars, text int
	fam                           family
}

// add places one item, with its family's heading when the family changes,
// and reports whether that overflowed the message.
func (l *layout) add(it item, first bool) (over bool) {
	if first || it.fam != l.fam {
		h := familyHeading(it.fam)
		l.line(runeLen(h))
		l.text += runeLen(familyPlain(it.fam)) + 1
		l.fam = it.fam
	}
	l.line(runeLen(it.line))
	l.text += runeLen(it.text) + 1
	return l.sections > maxBlocks-groupFixedBlocks || l.text > groupLinesText || l.chars > groupLinesBlocks
}

func (l *layout) line(n int) {
	l.chars += n + 1
	switch {
	case l.sections == 0 || l.secLen+1+n > sectionBudget:
		l.sections++
		l.secLen = n
	default:
		l.secLen += 1 + n
	}
}

// sectionize joins lines into section texts the way layout counts them.
func sectionize(lines []string) []string {
	var out []string
	var cur strings.Builder
	n := 0
	for _, ln := range lines {
		l := runeLen(ln)
		if cur.Len() > 0 && n+1+l > sectionBudget {
			out = append(out, cur.String())
			cur.Reset()
			n = 0
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
			n++
		}
		cur.WriteString(ln)
		n += l
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// foldOverflow names in a run's summary what did not fit in the drain's
// messages: its counts join the summary's blocks and text, and its rows
// are carried by the summary.
func foldOverflow(sum *Message, ov Message) {
	sum.AlertIDs = append(sum.AlertIDs, ov.AlertIDs...)
	sum.PossibleRepeat = sum.PossibleRepeat || ov.PossibleRepeat
	sum.Blocks = append(sum.Blocks, ov.Blocks...)
	sum.Text += "\n" + ov.Text
}
