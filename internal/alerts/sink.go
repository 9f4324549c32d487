package alerts

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"reconcile/internal/redact"

	"github.com/slack-go/slack"
)

// SinkChannel is the channel Sink records rows as sent to.
const SinkChannel = "demo"

// Sink is a deliverer for `reconcile demo`: it writes the messages a drain
// would post, as plain text the way finance would read them in Slack, and
// marks their rows sent. It touches no network.
type Sink struct {
	w    io.Writer
	opts PlanOptions
	seq  int
}

// NewSink returns a Sink writing to w; live chooses the Stripe dashboard
// the links point at.
func NewSink(w io.Writer, live bool) *Sink {
	return &Sink{w: w, opts: PlanOptions{Live: live}}
}

// Drain writes every due alert's message to the Sink's writer and marks
// the rows sent, with ts values made up from now.
func (s *Sink) Drain(ctx context.Context, outbox Outbox, now func() time.Time) (DrainStats, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	send := func(ctx context.Context, m Message, thread string) outcome {
		s.seq++
		ts := fmt.Sprintf("%d.%06d", now().Unix(), s.seq)
		if _, err := io.WriteString(s.w, PlainText(m, thread != "")); err != nil {
			return outcome{status: statusFatal, err: fmt.Errorf("write alert: %w", err), errText: redact.String(err.Error())}
		}
		return outcome{status: statusSent, channel: SinkChannel, ts: ts}
	}
	return drain(ctx, outbox, now, s.opts, 25000, log, send)
}

var (
	mrkdwnLink = regexp.MustCompile(`<(https?://[^|>]+)\|([^>]+)>`)
	mrkdwnBold = regexp.MustCompile(`\*([^*\n]+)\*`)
	emojiCode  = regexp.MustCompile(`:(rotating_light|warning|repeat|white_check_mark|mag): ?`)
)

// PlainText renders a message as a reader sees it in Slack, without the
// markup: for the demo, and for anyone reading alerts in a terminal. A
// reply is indented under its thread.
func PlainText(m Message, reply bool) string {
	var lines []string
	for _, b := range m.Blocks {
		switch b := b.(type) {
		case *slack.HeaderBlock:
			lines = append(lines, plainMarkup(b.Text.Text))
		case *slack.SectionBlock:
			if b.Text != nil {
				lines = append(lines, plainMarkup(b.Text.Text))
			}
		case *slack.ContextBlock:
			var parts []string
			for _, e := range b.ContextElements.Elements {
				if t, ok := e.(*slack.TextBlockObject); ok {
					parts = append(parts, plainMarkup(t.Text))
				}
			}
			lines = append(lines, strings.Join(parts, " · "))
		case *slack.DividerBlock:
			lines = append(lines, "────────")
		}
	}
	if len(lines) == 0 {
		lines = append(lines, plainMarkup(m.Text))
	}
	body := strings.Join(lines, "\n")
	prefix, first := "", "┌ "
	if reply {
		prefix, first = "    │ ", "    ↳ "
	}
	out := strings.Split(body, "\n")
	for i, l := range out {
		if i == 0 {
			out[i] = first + l
		} else if reply {
			out[i] = prefix + l
		} else {
			out[i] = "│ " + l
		}
	}
	return strings.Join(out, "\n") + "\n\n"
}

// plainMarkup drops the markup: a link is its address, after its label
// unless the label only says where it goes ("dashboard").
func plainMarkup(s string) string {
	s = mrkdwnLink.ReplaceAllStringFunc(s, func(l string) string {
		m := mrkdwnLink.FindStringSubmatch(l)
		if m[2] == "dashboard" || m[2] == m[1] {
			return m[1]
		}
		return m[2] + ", " + m[1]
	})
	s = mrkdwnBold.ReplaceAllString(s, "$1")
	s = emojiCode.ReplaceAllString(s, "")
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}
