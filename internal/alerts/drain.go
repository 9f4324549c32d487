package alerts

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/slack-go/slack"
)

// DrainStats says what one drain did.
type DrainStats struct {
	Messages    int `json:"messages"`     // messages Slack accepted
	Sent        int `json:"sent"`         // outbox rows marked sent
	Retries     int `json:"retries"`      // requests repeated after a 429, 5xx or network error
	RateLimited int `json:"rate_limited"` // 429 answers
	Unknown     int `json:"unknown"`      // rows whose delivery may or may not have arrived
	Failed      int `json:"failed"`       // rows of messages Slack refused, tried again later
	Deferred    int `json:"deferred"`     // rows left in the outbox for a later drain
	// Stopped says, redacted, why the drain ended before the outbox was
	// empty; empty when it ran to the end.
	Stopped string `json:"stopped,omitempty"`
}

// status is what became of one message.
type status int

const (
	statusSent     status = iota
	statusSkipped         // Slack refused this message only: try it again later, go on
	statusDeferred        // Slack unavailable: stop, the rest waits for the next drain
	statusUnknown         // the request went out and no answer came: stop
	statusFatal           // no retry can help until someone fixes something: stop
)

type outcome struct {
	status      status
	channel, ts string    // statusSent
	retryAt     time.Time // not due again before; zero: at once
	errText     string    // redacted, for MarkAttempt and logs
	err         error     // statusFatal
	// posted is what Slack accepted from the bot (statusSent), to record
	// with the message's ts; nil for a webhook's or the demo's post, which
	// no button can come back to.
	posted *posted
}

// posted is a message as it went out: its blocks, or none when it went
// as text only.
type posted struct {
	blocks []slack.Block
	text   string
}

// sendFunc posts one message, in the thread of threadTS when set.
type sendFunc func(ctx context.Context, m Message, threadTS string) outcome

// bookkeepingTimeout bounds recording a send after the drain's context
// ended: a message Slack accepted must be marked sent even during shutdown.
const bookkeepingTimeout = 10 * time.Second

// drain posts what the outbox has due, batch after batch, until nothing is
// due or delivery must stop. A row is marked sent only after Slack accepted
// the message that carries it.
func drain(ctx context.Context, outbox Outbox, now func() time.Time, popts PlanOptions, batch int,
	log *slog.Logger, send sendFunc) (DrainStats, error) {
	var st DrainStats
	handled := map[int64]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("drain alerts: %w", err)
		}
		rows, err := outbox.Due(ctx, now(), batch)
		if err != nil {
			return st, fmt.Errorf("read due alerts: %w", err)
		}
		// A row handled earlier in this drain and due again (an outbox that
		// ignored a mark) must not loop: stop when nothing is new.
		fresh := 0
		for _, r := range rows {
			if !handled[r.ID] {
				handled[r.ID] = true
				fresh++
			}
		}
		if fresh == 0 {
			return st, nil
		}
		msgs := Plan(rows, now(), popts)
		roots := make([]string, len(msgs))
		for i, m := range msgs {
			thread := m.ThreadTS
			if m.Parent >= 0 && m.Parent < i {
				// The parent was posted just now; if it was refused, this
				// goes top-level rather than waiting.
				thread = roots[m.Parent]
			}
			o, err := deliver(ctx, outbox, m, thread, now, send)
			if err != nil {
				return st, err
			}
			if o.status == statusSent {
				roots[i] = cmpOr(thread, o.ts)
				st.Messages++
				st.Sent += len(m.AlertIDs)
				log.Debug("slack message sent", "kind", string(m.Kind), "alerts", len(m.AlertIDs), "in_thread", thread != "")
				continue
			}
			switch o.status {
			case statusSkipped:
				st.Failed += len(m.AlertIDs)
				log.Warn("slack refused a message; it stays in the outbox", "kind", string(m.Kind), "alerts", len(m.AlertIDs), "error", o.errText)
				continue
			case statusUnknown:
				st.Unknown += len(m.AlertIDs)
			}
			for _, rest := range msgs[i:] {
				st.Deferred += len(rest.AlertIDs)
			}
			st.Stopped = o.errText
			if o.status == statusFatal {
				return st, o.err
			}
			if err := ctx.Err(); err != nil {
				return st, fmt.Errorf("drain alerts: %w", err)
			}
			log.Warn("slack delivery stopped; undelivered alerts stay in the outbox for the next run",
				"reason", o.errText, "deferred", st.Deferred, "outcome_unknown", o.status == statusUnknown)
			return st, nil
		}
		if len(rows) < batch {
			return st, nil
		}
	}
}

// deliver claims, sends and records one message, under the outbox's
// fence from before the claim until the outcome is recorded (see
// Outbox.Fence).
func deliver(ctx context.Context, outbox Outbox, m Message, thread string, now func() time.Time, send sendFunc) (outcome, error) {
	release, err := outbox.Fence(ctx)
	if err != nil {
		return outcome{}, fmt.Errorf("hold the fence for a send: %w", err)
	}
	defer release()
	if err := outbox.MarkSending(ctx, m.AlertIDs, now()); err != nil {
		// Without the intent on record a crash mid-send could post an
		// unmarked repeat later: send nothing.
		return outcome{}, fmt.Errorf("mark alerts sending: %w", err)
	}
	o := send(ctx, m, thread)
	if o.status == statusSent {
		return o, markSent(ctx, outbox, m, o, cmpOr(thread, o.ts), now())
	}
	// Every outcome but a send is recorded, a refusal that no retry can
	// fix included: that clears the send's intent, so the copy sent once
	// the settings are fixed is not called a repeat.
	next := o.retryAt
	if next.IsZero() {
		next = now()
	}
	return o, markAttempt(ctx, outbox, m.AlertIDs, next, o.status == statusUnknown, o.errText)
}

// markSent records that Slack accepted m: its rows are sent under the
// thread root ts, and a message the bot posted is kept as posted, under
// its own ts, for its buttons (docs/design.md, "Buttons in Slack").
func markSent(ctx context.Context, outbox Outbox, m Message, o outcome, ts string, at time.Time) error {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	for _, id := range m.AlertIDs {
		if err := outbox.MarkSent(bctx, id, o.channel, ts, at); err != nil {
			return fmt.Errorf("mark alert %d sent: %w", id, err)
		}
	}
	if o.posted == nil || o.ts == "" {
		return nil
	}
	rec, err := record(m, o.channel, o.ts, o.posted.blocks, o.posted.text, at)
	if err == nil {
		err = outbox.RecordMessage(bctx, rec)
	}
	if err != nil {
		return fmt.Errorf("record the slack message %s: %w", o.ts, err)
	}
	return nil
}

func markAttempt(ctx context.Context, outbox Outbox, ids []int64, next time.Time, unknown bool, errText string) error {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	for _, id := range ids {
		if err := outbox.MarkAttempt(bctx, id, next, unknown, errText); err != nil {
			return fmt.Errorf("mark alert %d attempted: %w", id, err)
		}
	}
	return nil
}
