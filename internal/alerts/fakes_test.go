package alerts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"reconcile"
)

// fakeOutbox is the outbox as the store keeps it, in memory: unsent rows
// due by next attempt time, ThreadTS filled from what was sent.
type fakeOutbox struct {
	mu     sync.Mutex
	rows   []*fakeRow
	nextID int64
	dueErr error
	// sendingErr fails MarkSending; dieAfterSend fails the next MarkSent
	// without recording it, as a process killed after Slack accepted.
	sendingErr   error
	dieAfterSend bool
	// fenceFailAt fails the Fence call of that number (1-based) with
	// errFenceLost; fences counts Fence calls, held those not yet
	// released, and unfenced names the marks made outside a fence.
	fenceFailAt int
	fences      int
	held        int
	unfenced    []string
	// recorded are the bot's messages RecordMessage kept.
	recorded []reconcile.SlackMessage
}

// errFenceLost is what a fake Fence fails with.
var errFenceLost = errors.New("fake: the run lock was lost")

// Fence holds a counted fence until release; a second release is an
// error of the drain, caught by held going below zero.
func (o *fakeOutbox) Fence(ctx context.Context) (func(), error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fences++
	if o.fences == o.fenceFailAt {
		return nil, errFenceLost
	}
	o.held++
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.held--
	}, nil
}

// mark notes a mark made outside a fence. Called under o.mu.
func (o *fakeOutbox) mark(what string, id int64) {
	if o.held <= 0 {
		o.unfenced = append(o.unfenced, fmt.Sprintf("%s %d", what, id))
	}
}

type fakeRow struct {
	alert       reconcile.Alert
	sent        bool
	sentCount   int
	channel, ts string
	next        time.Time
	errs        []string
	sending     bool // a send's intent recorded and its outcome not yet
}

func (o *fakeOutbox) add(as ...reconcile.Alert) []int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ids []int64
	for _, a := range as {
		o.nextID++
		a.ID = o.nextID
		o.rows = append(o.rows, &fakeRow{alert: a})
		ids = append(ids, a.ID)
	}
	return ids
}

func (o *fakeOutbox) Due(ctx context.Context, now time.Time, limit int) ([]reconcile.Alert, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dueErr != nil {
		return nil, o.dueErr
	}
	// The ts of each run's sent summary, and of each finding's first sent
	// firing message.
	summaryTS, firingTS := map[string]string{}, map[string]string{}
	for _, s := range o.rows {
		switch {
		case !s.sent:
		case s.alert.Event == reconcile.AlertSummary:
			summaryTS[s.alert.RunID] = s.ts
		case s.alert.Event == reconcile.AlertFiring:
			if _, ok := firingTS[s.alert.Finding.Fingerprint]; !ok {
				firingTS[s.alert.Finding.Fingerprint] = s.ts
			}
		}
	}
	var out []reconcile.Alert
	for _, r := range o.rows {
		if r.sent || r.next.After(now) {
			continue
		}
		a := r.alert
		a.UnknownOutcome = a.UnknownOutcome || r.sending
		switch a.Event {
		case reconcile.AlertResolved, reconcile.AlertRepeat:
			a.ThreadTS = firingTS[a.Finding.Fingerprint]
		case reconcile.AlertFiring:
			a.ThreadTS = summaryTS[a.RunID]
		}
		out = append(out, a)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// MarkSending keeps what the store keeps: an intent left unresolved by an
// earlier send makes the outcome unknown.
func (o *fakeOutbox) MarkSending(ctx context.Context, ids []int64, at time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sendingErr != nil {
		return o.sendingErr
	}
	for _, id := range ids {
		r := o.row(id)
		if r == nil {
			return fmt.Errorf("no alert %d", id)
		}
		o.mark("MarkSending", id)
		if r.sending {
			r.alert.UnknownOutcome = true
		}
		r.sending = true
	}
	return nil
}

func (o *fakeOutbox) MarkSent(ctx context.Context, id int64, channel, ts string, at time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.row(id)
	if r == nil {
		return fmt.Errorf("no alert %d", id)
	}
	if o.dieAfterSend {
		o.dieAfterSend = false
		return errors.New("process killed")
	}
	o.mark("MarkSent", id)
	r.sentCount++
	r.sending = false
	if !r.sent {
		r.sent, r.channel, r.ts = true, channel, ts
	}
	return nil
}

func (o *fakeOutbox) MarkAttempt(ctx context.Context, id int64, next time.Time, unknown bool, errText string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.row(id)
	if r == nil {
		return fmt.Errorf("no alert %d", id)
	}
	o.mark("MarkAttempt", id)
	r.alert.Attempts++
	r.alert.UnknownOutcome = r.alert.UnknownOutcome || unknown
	r.sending = false
	r.next = next
	r.errs = append(r.errs, errText)
	return nil
}

// RecordMessage keeps the bot's messages as the store does: the first
// record of a channel and ts stands.
func (o *fakeOutbox) RecordMessage(ctx context.Context, m reconcile.SlackMessage) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.recorded {
		if r.Channel == m.Channel && r.TS == m.TS {
			return nil
		}
	}
	o.mark("RecordMessage", 0)
	o.recorded = append(o.recorded, m)
	return nil
}

func (o *fakeOutbox) row(id int64) *fakeRow {
	// Ids are assigned in order from 1.
	if id < 1 || id > int64(len(o.rows)) {
		return nil
	}
	return o.rows[id-1]
}

func (o *fakeOutbox) get(id int64) fakeRow {
	o.mu.Lock()
	defer o.mu.Unlock()
	return *o.row(id)
}

// unsent counts rows not yet sent.
func (o *fakeOutbox) unsent() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.rows {
		if !r.sent {
			n++
		}
	}
	return n
}

// checkSentOnce fails unless every row was marked sent exactly once.
func (o *fakeOutbox) checkSentOnce(tb testing.TB) {
	tb.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.rows {
		if r.sentCount != 1 {
			tb.Errorf("alert %d marked sent %d times, want 1", r.alert.ID, r.sentCount)
		}
	}
}

// fakeClock advances only when slept on, so pacing and backoff cost no
// time and can be checked exactly.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{t: testNow} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.slept = append(c.slept, d)
	return ctx.Err()
}

func (c *fakeClock) sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.slept)
}
