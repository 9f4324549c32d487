package alerts

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"time"

	"reconcile/internal/redact"

	"github.com/slack-go/slack"

	"reconcile"
)

// The ids of the Acknowledge button and of what surrounds it
// (docs/design.md, "Buttons in Slack"): serve's /slack/interactions
// answers the action AckActionID, and the modal it opens is AckCallbackID.
const (
	AckBlockID    = "reconcile_ack"
	AckActionID   = "reconcile_ack"
	AckCallbackID = "reconcile_ack"
	// ackedBlockID is the context block that says who acknowledged.
	ackedBlockID = "reconcile_acked"
)

// ackActions is the actions block with the one Acknowledge button.
func ackActions() *slack.ActionBlock {
	b := slack.NewButtonBlockElement(AckActionID, "ack", slack.NewTextBlockObject(slack.PlainTextType, "Acknowledge", false, false))
	return slack.NewActionBlock(AckBlockID, b)
}

// ackAffordance is what a message announcing open findings offers to stop
// their repeats: the Acknowledge button when Slack's buttons are on, else
// a link to the findings page when serve.public_url is set, else nothing
// (the footer's `reconcile ack` says how). link is the page's path and
// query under the public URL.
func ackAffordance(opts PlanOptions, link string) slack.Block {
	switch {
	case opts.Buttons:
		return ackActions()
	case opts.PublicURL != "" && link != "":
		return contextBlock("Acknowledge or look closer: <" + escape(strings.TrimRight(opts.PublicURL, "/")+link) + "|the findings page>")
	}
	return nil
}

// findingLink is a finding's page under the public URL.
func findingLink(fingerprint string) string {
	if fingerprint == "" {
		return ""
	}
	return "/findings/" + url.PathEscape(fingerprint)
}

// causeLink is the findings page narrowed to a cause's kind and target
// (or obligation).
func causeLink(f reconcile.Finding) string {
	q := url.Values{"kind": {string(f.Kind)}}
	switch {
	case f.Target != "":
		q.Set("q", f.Target)
	case f.ObligationID != "":
		q.Set("q", f.ObligationID)
	}
	return "/?" + q.Encode()
}

// withAffordance appends b to blocks when there is one.
func withAffordance(blocks []slack.Block, b slack.Block) []slack.Block {
	if b == nil {
		return blocks
	}
	return append(blocks, b)
}

// Ack is one acknowledgement of findings a message carries.
type Ack struct {
	By, Reason string
	At         time.Time
}

// maxAckReason bounds the reason shown in a message.
const maxAckReason = 300

// Acknowledged is a posted message edited to say who acknowledged its
// findings, when and why, one line per distinct acknowledgement: its
// blocks without the Acknowledge button and without an earlier such line,
// the acknowledgements, and the button again when some of its open
// findings are still not acknowledged (open). The names and reasons are
// outside text: masked, on one line, cut and escaped (docs/design.md,
// "Untrusted text"). The text gets the same lines.
func Acknowledged(blocks []slack.Block, text string, acks []Ack, open bool) ([]slack.Block, string) {
	out := slices.DeleteFunc(slices.Clone(blocks), func(b slack.Block) bool {
		switch b := b.(type) {
		case *slack.ActionBlock:
			return b.BlockID == AckBlockID
		case *slack.ContextBlock:
			return b.BlockID == ackedBlockID
		}
		return false
	})
	var lines []string
	for _, a := range acks {
		line := "Acknowledged by " + clean(a.By, maxAckBy, true) + " at " + formatTime(a.At) + " UTC: " + clean(a.Reason, maxAckReason, true)
		if !slices.Contains(lines, line) {
			lines = append(lines, line)
		}
	}
	if len(lines) > 0 {
		c := contextBlock(lines...)
		c.BlockID = ackedBlockID
		out = append(out, c)
	}
	if open {
		out = append(out, ackActions())
	}
	m := Message{Blocks: out, Text: text}
	if len(lines) > 0 {
		acked := strings.Join(lines, "\n")
		m.Text = truncateEscaped(text, maxText-len(acked)-2) + "\n" + acked
	}
	fit(&m)
	return m.Blocks, m.Text
}

// record is the message as the drain records it once Slack accepted it.
func record(m Message, channel, ts string, blocks []slack.Block, text string, at time.Time) (reconcile.SlackMessage, error) {
	rec := reconcile.SlackMessage{Channel: channel, TS: ts, Kind: string(m.Kind), RunID: m.RunID,
		Fingerprints: m.Fingerprints, Text: text, PostedAt: at}
	if len(blocks) > 0 {
		b, err := json.Marshal(blocks)
		if err != nil {
			return rec, err
		}
		rec.Blocks = b
	}
	return rec, nil
}

// maxAckBy bounds who acknowledged, as shown.
const maxAckBy = 120

// AckPlain says one acknowledgement as the edited message does, for
// plain text (a modal's): masked, on one line, cut as there, unescaped.
func AckPlain(a Ack) string {
	return "Acknowledged by " + truncate(redact.Text(a.By), maxAckBy) + " at " + formatTime(a.At) + " UTC: " +
		truncate(redact.Text(a.Reason), maxAckReason)
}

// Escape escapes what Slack gives meaning to in mrkdwn (&, < and >), for
// the reconciler's own words around an outside value.
func Escape(s string) string { return escape(s) }
