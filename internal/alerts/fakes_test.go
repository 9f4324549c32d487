package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

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

// fakeSlack speaks Slack's Web API (chat.postMessage, form-encoded, JSON
// answers) and incoming webhooks, checks every posted message against
// Slack's limits on the wire, and answers as scripted.
type fakeSlack struct {
	tb     testing.TB
	srv    *httptest.Server
	token  string
	clock  *fakeClock
	mu     sync.Mutex
	script []string // one behaviour per request, then "ok"
	down   bool     // 503 to everything
	// posts are the messages Slack accepted, or received before the
	// connection broke ("reset", "hang"): what a channel would show.
	posts    []fakePost
	requests int
	bodies   []string // every request body, decoded, without the bot token
	limits   []string // limit violations seen on the wire
	ts       int
}

type fakePost struct {
	Method, Channel, Thread, Text string
	Blocks                        []map[string]any
	At                            time.Time
	Answered                      bool
}

func newFakeSlack(tb testing.TB, token string, clock *fakeClock) *fakeSlack {
	tb.Helper()
	f := &fakeSlack{tb: tb, token: token, clock: clock}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	tb.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSlack) apiURL() string     { return f.srv.URL + "/api/" }
func (f *fakeSlack) webhookURL() string { return f.srv.URL + "/services/T0ACC/B0ACC/" + f.token }

func (f *fakeSlack) setScript(s ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = s
}

func (f *fakeSlack) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeSlack) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests++
	behaviour := "ok"
	if len(f.script) > 0 {
		behaviour, f.script = f.script[0], f.script[1:]
	}
	if f.down {
		behaviour = "503"
	}
	webhook := strings.HasPrefix(r.URL.Path, "/services/")
	var p fakePost
	if webhook {
		if r.URL.Path != "/services/T0ACC/B0ACC/"+f.token {
			behaviour = "404"
		}
		var m struct {
			Text     string           `json:"text"`
			Blocks   []map[string]any `json:"blocks"`
			ThreadTS string           `json:"thread_ts"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			f.tb.Errorf("webhook body is not JSON: %v", err)
		}
		p = fakePost{Method: "webhook", Text: m.Text, Blocks: m.Blocks, Thread: m.ThreadTS}
		f.bodies = append(f.bodies, string(body))
	} else {
		form, _ := url.ParseQuery(string(body))
		tok := cmpOr(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), form.Get("token"))
		if tok != f.token && behaviour == "ok" {
			behaviour = "invalid_auth"
		}
		if r.URL.Path != "/api/chat.postMessage" {
			f.tb.Errorf("unexpected Slack method %s", r.URL.Path)
		}
		// Everything but the credential, which belongs in the request.
		form.Del("token")
		for k, vs := range form {
			f.bodies = append(f.bodies, k+"="+strings.Join(vs, ","))
		}
		p = fakePost{Method: "chat.postMessage", Channel: form.Get("channel"), Thread: form.Get("thread_ts"), Text: form.Get("text")}
		if b := form.Get("blocks"); b != "" {
			if err := json.Unmarshal([]byte(b), &p.Blocks); err != nil {
				f.tb.Errorf("blocks are not JSON: %v", err)
			}
		}
	}
	if f.clock != nil {
		p.At = f.clock.Now()
	}
	f.limits = append(f.limits, wireLimits(p)...)
	f.mu.Unlock()

	switch behaviour {
	case "ok":
		f.mu.Lock()
		f.ts++
		ts := fmt.Sprintf("1700000000.%06d", f.ts)
		p.Answered = true
		f.posts = append(f.posts, p)
		f.mu.Unlock()
		if webhook {
			fmt.Fprint(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":%q,"message":{"ts":%q}}`, p.Channel, ts, ts)
	case "429":
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"ok":false,"error":"ratelimited"}`)
	case "503", "500", "504", "404", "403", "410", "400":
		var code int
		fmt.Sscan(behaviour, &code)
		w.WriteHeader(code)
		fmt.Fprint(w, "<html>unavailable</html>")
	case "reset", "hang":
		// Slack got the whole request (and posts it), then the answer is
		// lost: the connection breaks, or no answer comes before timeout.
		f.mu.Lock()
		f.posts = append(f.posts, p)
		f.mu.Unlock()
		if behaviour == "hang" {
			<-r.Context().Done()
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.tb.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	default: // a Slack error code
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":false,"error":%q}`, behaviour)
	}
}

// wireLimits checks a posted message against Slack's limits as Slack would,
// from the JSON on the wire.
func wireLimits(p fakePost) []string {
	var v []string
	if n := utf8.RuneCountInString(p.Text); n > 4000 {
		v = append(v, fmt.Sprintf("text of %d characters", n))
	}
	if len(p.Blocks) > 50 {
		v = append(v, fmt.Sprintf("%d blocks", len(p.Blocks)))
	}
	textOf := func(m any) string {
		t, _ := m.(map[string]any)
		s, _ := t["text"].(string)
		return s
	}
	// chat.postMessage refuses blocks whose texts add up to much over
	// 12,000 characters (msg_blocks_too_long).
	total := 0
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			if s, ok := t["text"].(string); ok {
				total += utf8.RuneCountInString(s)
			}
			for _, e := range t {
				walk(e)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	for _, b := range p.Blocks {
		walk(b)
	}
	if total > 12000 {
		v = append(v, fmt.Sprintf("blocks hold %d characters", total))
	}
	for _, b := range p.Blocks {
		switch b["type"] {
		case "header":
			if n := utf8.RuneCountInString(textOf(b["text"])); n > 150 {
				v = append(v, fmt.Sprintf("header of %d characters", n))
			}
		case "section":
			if n := utf8.RuneCountInString(textOf(b["text"])); n > 3000 {
				v = append(v, fmt.Sprintf("section of %d characters", n))
			}
		case "context":
			els, _ := b["elements"].([]any)
			if len(els) > 10 {
				v = append(v, fmt.Sprintf("context of %d elements", len(els)))
			}
		}
	}
	return v
}

func (f *fakeSlack) snapshot() (posts []fakePost, requests int, limits []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.posts), f.requests, slices.Clone(f.limits)
}

func (f *fakeSlack) allBodies() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.bodies, "\n")
}

// flat is everything a post shows, as the acceptance test reads it.
func (p fakePost) flat() string {
	b, _ := json.Marshal(p.Blocks)
	return p.Text + "\n" + string(b)
}
