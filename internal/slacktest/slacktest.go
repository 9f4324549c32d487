// Package slacktest is a Slack Web API and incoming-webhook endpoint for
// tests, the simulation and the demo: it speaks Slack's wire format
// (chat.postMessage form or JSON bodies, {"ok":…,"ts":…} answers,
// 429 with Retry-After, webhooks answering "ok" or an error code with an
// HTTP status), records what was posted and when, checks each post against
// Slack's message limits, and injects faults: counted ones, or a script of
// answers one post at a time. StallingTransport is the client's side of one
// fault: an uplink that stops sending a request after its headers.
//
// It also plays Slack's side of an app's buttons (interact.go): it opens
// modals (views.open, with trigger ids that expire as Slack's do and the
// limits of a modal), edits messages (chat.update), and presses buttons
// and submits modals by posting signed interactions to the app, as Slack
// does.
package slacktest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Message is one message Slack accepted.
type Message struct {
	Method  string // chat.postMessage or webhook
	Channel string
	Thread  string // thread_ts, empty for a top-level message
	TS      string
	Text    string          // the top-level text field
	Blocks  json.RawMessage // the blocks, as posted; empty when none were
	// Flat is the text and every string inside the blocks and
	// attachments, one per line, for assertions on what a reader sees.
	Flat string
	// At is when the post arrived, by Server.Now.
	At time.Time
}

// Faults are injected into the next requests. Counters count down.
type Faults struct {
	RateLimit  int           // answer this many posts with 429 Retry-After
	RetryAfter int           // seconds in Retry-After (default 1)
	Down       bool          // answer everything with 503
	ServerErr  int           // answer this many posts with 500
	BadAuth    bool          // answer {"ok":false,"error":"invalid_auth"}
	Error      string        // answer posts with {"ok":false,"error":Error}
	AcceptHang int           // accept this many posts, then hang Hang before answering
	Hang       time.Duration // how long an accepted post hangs
	// Script answers the next posts (chat.postMessage or a webhook), one
	// each and in order, in place of the counters; an empty answer is
	// "ok". See Answer* for what an answer may be.
	Script []string
}

// Scripted answers, besides an HTTP status ("500", "503", "404", …), which
// Slack's edge gives with an HTML page on the Web API and a webhook with
// the error code Slack gives for that status, and besides a Slack error
// code ("channel_not_found", "msg_too_long", …), which the Web API gives as
// {"ok":false,"error":code} and a webhook as the code under the status
// Slack uses for it.
const (
	// AnswerOK accepts the post, as unscripted.
	AnswerOK = "ok"
	// AnswerRateLimited is HTTP 429 with Retry-After (Faults.RetryAfter).
	AnswerRateLimited = "429"
	// AnswerReset accepts the post, then breaks the connection before any
	// answer: the client cannot know the message is in the channel.
	AnswerReset = "reset"
	// AnswerHang accepts the post and answers nothing until the client
	// gives up.
	AnswerHang = "hang"
	// AnswerPosted, put before another answer, shows the post in the
	// channel and then gives that answer, as Slack does when it fails
	// after storing a message: "posted:internal_error" is a message in the
	// channel answered {"ok":false,"error":"internal_error"}, "posted:500"
	// one answered by the edge's 500. A post the answer refuses anyway (a
	// wrong token, blocks that are not JSON) is not shown.
	AnswerPosted = "posted:"
	// AnswerEarly, put before an HTTP status, answers that status as soon
	// as the request's headers have arrived, without reading its body,
	// as an edge that turns a request away does; the connection is closed
	// once the client has closed it. "early:503" over a StallingTransport
	// is a client answered before it wrote its request out whole. The
	// body, never read, is not among Bodies.
	AnswerEarly = "early:"
)

// Server is a fake Slack. The zero value is not usable; use New.
type Server struct {
	Token string
	// Now stamps Message.At; nil means time.Now. Set it before Start.
	Now func() time.Time

	mu         sync.Mutex
	msgs       []Message
	faults     Faults
	ts         int
	reqs       int
	bodies     []string
	violations []string

	// Interactions (interact.go).
	triggers   map[string]trigger
	triggerSeq int
	views      []View
	viewSeq    int
	updates    []Update
}

// New returns a server accepting bearer token (or form field) token.
func New(token string) *Server { return &Server{Token: token} }

// SetFaults replaces the fault plan.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Messages returns what Slack accepted so far, including posts whose
// answer was lost (AnswerReset, AnswerHang): what the channel shows.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// Requests counts every request received, those answered early included.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs
}

// Bodies returns every request's body as received, decoded: a form's
// fields one name=value a line, a JSON body as sent. The token field is
// left out: the credential belongs in the request, and a test looks for
// secrets that do not.
func (s *Server) Bodies() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

// Violations says how the posts so far broke Slack's limits on a message,
// one line each; see limits. Slack would refuse or cut such a message;
// the server accepts it and says so here, for a test to fail on.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// Start serves on 127.0.0.1; the URL is the SLACK_API_URL base without
// "/api/". Webhooks are posted to URL + "/services/…/" + Token.
func (s *Server) Start() (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("start slacktest server: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	webhook := strings.HasPrefix(r.URL.Path, "/services/")
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	post := webhook || method == "chat.postMessage"
	s.mu.Lock()
	s.reqs++
	f := &s.faults
	var answer string
	switch {
	case f.Down:
		answer = "503"
	case post && len(f.Script) > 0:
		answer, f.Script = f.Script[0], f.Script[1:]
	case f.RateLimit > 0 && method != "auth.test":
		f.RateLimit--
		answer = AnswerRateLimited
	case f.ServerErr > 0:
		f.ServerErr--
		answer = "500"
	}
	retryAfter := cmp.Or(f.RetryAfter, 1)
	s.mu.Unlock()
	if status, ok := strings.CutPrefix(answer, AnswerEarly); ok {
		answerEarly(w, webhook, status)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, decoded(r, body))
	answer, posted := strings.CutPrefix(answer, AnswerPosted)
	if !posted && refusal(answer) && !isCode(answer) {
		// 429 and HTTP statuses come from Slack's edge, before the token
		// or the message is looked at.
		s.mu.Unlock()
		refuse(w, webhook, answer, retryAfter)
		return
	}
	if webhook {
		s.serveWebhook(w, r, body, answer, posted, retryAfter) // unlocks
		return
	}
	s.serveAPI(w, r, body, method, answer, posted, retryAfter) // unlocks
}

// refusal reports whether answer turns a post away (or, after
// AnswerPosted, answers one it showed) rather than accepting it.
func refusal(answer string) bool {
	return answer != "" && answer != AnswerOK && answer != AnswerReset && answer != AnswerHang
}

// isCode reports whether a refusal is a Slack error code, which Slack
// gives after reading the request, rather than 429 or an HTTP status.
func isCode(answer string) bool {
	if answer == AnswerRateLimited {
		return false
	}
	_, err := strconv.Atoi(answer)
	return err != nil
}

// refuse writes a refusal as the Web API (webhook false) or an incoming
// webhook gives it: 429 with Retry-After, an HTTP status (an HTML page
// from the Web API's edge, the status's code from a webhook), or a Slack
// error code.
func refuse(w http.ResponseWriter, webhook bool, answer string, retryAfter int) {
	if answer == AnswerRateLimited {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		if webhook {
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "rate_limited")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"ok":false,"error":"ratelimited"}`)
		return
	}
	if code, err := strconv.Atoi(answer); err == nil {
		if webhook {
			webhookError(w, code, webhookCodes[code])
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(code)
		fmt.Fprintf(w, "<html><body>%d %s</body></html>", code, http.StatusText(code))
		return
	}
	if webhook {
		status, ok := webhookStatus[answer]
		if !ok {
			status = http.StatusBadRequest
		}
		webhookError(w, status, answer)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"ok":false,"error":%q}`, answer)
}

// answerEarly answers status (503 if it is not one) before reading the
// request's body, then reads whatever the client still sends until it
// closes the connection: closing first, on data unread, would reset the
// connection and could lose the answer.
func answerEarly(w http.ResponseWriter, webhook bool, status string) {
	code, err := strconv.Atoi(status)
	if err != nil || code < 100 || code > 999 {
		code = http.StatusServiceUnavailable
	}
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	ctype, page := "text/html", fmt.Sprintf("<html><body>%d %s</body></html>", code, http.StatusText(code))
	if webhook {
		ctype, page = "text/plain", cmp.Or(webhookCodes[code], "service_unavailable")
	}
	fmt.Fprintf(brw, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), ctype, len(page), page)
	if brw.Flush() != nil {
		return
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	io.Copy(io.Discard, brw)
}

// serveWebhook answers an incoming webhook's post; the caller holds s.mu.
// A posted answer is given after the post was recorded.
func (s *Server) serveWebhook(w http.ResponseWriter, r *http.Request, body []byte, answer string, posted bool, retryAfter int) {
	if s.faults.BadAuth || !strings.HasSuffix(r.URL.Path, "/"+s.Token) {
		s.mu.Unlock()
		webhookError(w, http.StatusForbidden, "invalid_token")
		return
	}
	var p struct {
		Text     string          `json:"text"`
		Blocks   json.RawMessage `json:"blocks"`
		ThreadTS string          `json:"thread_ts"`
	}
	if err := json.Unmarshal(body, &p); err != nil || !validBlocks(p.Blocks) {
		s.mu.Unlock()
		webhookError(w, http.StatusBadRequest, "invalid_payload")
		return
	}
	if refusal(answer) && !posted {
		s.mu.Unlock()
		refuse(w, true, answer, retryAfter)
		return
	}
	hang := s.record(Message{Method: "webhook", Thread: p.ThreadTS, Text: p.Text, Blocks: blocksOrNone(p.Blocks), Flat: flatten(body)})
	s.mu.Unlock()
	if refusal(answer) {
		refuse(w, true, answer, retryAfter)
		return
	}
	if s.lose(w, r, answer) {
		return
	}
	time.Sleep(hang)
	io.WriteString(w, "ok")
}

// serveAPI answers a Web API call; the caller holds s.mu. A posted answer
// is given after the post was recorded.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, body []byte, method, answer string, posted bool, retryAfter int) {
	fields := formOrJSON(r, body)
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		tok = fields["token"]
	}
	w.Header().Set("Content-Type", "application/json")
	fail := func(code string) { s.failUnlock(w, code) }
	switch {
	case s.faults.BadAuth || tok != s.Token:
		fail("invalid_auth")
		return
	case s.faults.Error != "" && method != "auth.test":
		fail(s.faults.Error)
		return
	case refusal(answer) && !posted:
		fail(answer)
		return
	}
	switch method {
	case "auth.test":
		s.mu.Unlock()
		io.WriteString(w, `{"ok":true,"url":"https://fake.slack.com/","team":"fake","user":"reconciler","team_id":"T1","user_id":"U1","bot_id":"B1"}`)
	case "chat.postMessage":
		blocks := json.RawMessage(fields["blocks"])
		if !validBlocks(blocks) {
			fail("invalid_blocks_format")
			return
		}
		s.ts++
		ts := fmt.Sprintf("1700000000.%06d", s.ts)
		m := Message{Method: method, Channel: fields["channel"], Thread: fields["thread_ts"], TS: ts,
			Text: fields["text"], Blocks: blocksOrNone(blocks),
			Flat: fields["text"] + "\n" + flatten(blocks) + flatten([]byte(fields["attachments"]))}
		hang := s.record(m)
		s.mu.Unlock()
		if refusal(answer) {
			refuse(w, false, answer, retryAfter)
			return
		}
		if s.lose(w, r, answer) {
			return
		}
		time.Sleep(hang)
		fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":%q,"message":{"ts":%q}}`, m.Channel, ts, ts)
	case "views.open":
		s.openView(w, fields) // unlocks
	case "chat.update":
		s.updateMessage(w, fields) // unlocks
	default:
		fail("unknown_method")
	}
}

// lose loses the answer to an accepted post if answer says so, and
// reports whether it did.
func (s *Server) lose(w http.ResponseWriter, r *http.Request, answer string) bool {
	switch answer {
	case AnswerHang:
		<-r.Context().Done()
		return true
	case AnswerReset:
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return true
	}
	return false
}

// record appends m, stamped, with its limit violations, and returns how
// long to hang before answering; the caller holds s.mu.
func (s *Server) record(m Message) time.Duration {
	if s.Now != nil {
		m.At = s.Now()
	} else {
		m.At = time.Now()
	}
	s.msgs = append(s.msgs, m)
	for _, v := range limits(m) {
		s.violations = append(s.violations, fmt.Sprintf("message %d (%s): %s", len(s.msgs), m.Method, v))
	}
	if s.faults.AcceptHang > 0 {
		s.faults.AcceptHang--
		return s.faults.Hang
	}
	return 0
}

// Incoming webhooks answer errors as plain text under an HTTP status:
// webhookStatus is the status of the codes they give, webhookCodes the
// code a status is given with when a test scripts only the status.
var (
	webhookStatus = map[string]int{
		"invalid_payload": 400, "user_not_found": 400, "too_many_attachments": 400, "no_text": 400,
		"invalid_token": 403, "action_prohibited": 403, "posting_to_general_channel_denied": 403,
		"channel_not_found": 404, "no_service": 404, "team_disabled": 404,
		"channel_is_archived": 410,
		"rollup_error":        500,
	}
	webhookCodes = map[int]string{
		400: "invalid_payload", 403: "invalid_token", 404: "no_service", 410: "channel_is_archived", 500: "rollup_error",
	}
)

func webhookError(w http.ResponseWriter, status int, code string) {
	if code == "" {
		code = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	io.WriteString(w, code)
}

// validBlocks reports whether posted blocks are absent or a JSON array.
func validBlocks(b json.RawMessage) bool {
	if len(b) == 0 || string(b) == "null" {
		return true
	}
	var arr []json.RawMessage
	return json.Unmarshal(b, &arr) == nil
}

func blocksOrNone(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

// limits lists how m breaks Slack's limits on a message: text over 4,000
// characters (Slack's advice; it cuts at 40,000), over 50 blocks, block
// texts over 12,000 characters in all (msg_blocks_too_long), a header
// over 150 characters, a section's text over 3,000, a context of over 10
// elements (invalid_blocks).
func limits(m Message) []string {
	var v []string
	if n := utf8.RuneCountInString(m.Text); n > 4000 {
		v = append(v, fmt.Sprintf("text of %d characters", n))
	}
	var blocks []map[string]any
	if len(m.Blocks) > 0 {
		json.Unmarshal(m.Blocks, &blocks)
	}
	if len(blocks) > 50 {
		v = append(v, fmt.Sprintf("%d blocks", len(blocks)))
	}
	textOf := func(m any) string {
		t, _ := m.(map[string]any)
		s, _ := t["text"].(string)
		return s
	}
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
	for _, b := range blocks {
		walk(b)
	}
	if total > 12000 {
		v = append(v, fmt.Sprintf("blocks hold %d characters", total))
	}
	for _, b := range blocks {
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

// decoded is a request body for Bodies.
func decoded(r *http.Request, body []byte) string {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		vals, err := url.ParseQuery(string(body))
		if err == nil {
			vals.Del("token")
			var lines []string
			for k, vs := range vals {
				lines = append(lines, k+"="+strings.Join(vs, ","))
			}
			slices.Sort(lines)
			return strings.Join(lines, "\n")
		}
	}
	return string(body)
}

func formOrJSON(r *http.Request, body []byte) map[string]string {
	fields := map[string]string{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]any
		json.Unmarshal(body, &m)
		for k, v := range m {
			if sv, ok := v.(string); ok {
				fields[k] = sv
			} else {
				b, _ := json.Marshal(v)
				fields[k] = string(b)
			}
		}
		return fields
	}
	vals, _ := url.ParseQuery(string(body))
	for k := range vals {
		fields[k] = vals.Get(k)
	}
	return fields
}

// flatten pulls every string out of a JSON document, one per line.
func flatten(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	var sb strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			sb.WriteString(t)
			sb.WriteByte('\n')
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(v)
	return sb.String()
}

// StallingTransport is a client's transport whose first n requests stall
// after their headers: the connection sends nothing more of the request
// until it is closed, as over an uplink that stopped. Every request has a
// connection of its own, and a write buffer of a few bytes: net/http
// reports a request written (httptrace's WroteRequest) once its last bytes
// are in that buffer, so a small one lets a stalled request be still
// unwritten when the answer comes. Answered early (AnswerEarly), such a
// request was answered before the client wrote it out whole; answered
// otherwise, it waits for the client's timeout.
func StallingTransport(n int) *http.Transport {
	var left atomic.Int64
	left.Store(int64(n))
	dialer := &net.Dialer{}
	return &http.Transport{
		DisableKeepAlives: true,
		WriteBufferSize:   16,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil || left.Add(-1) < 0 {
				return c, err
			}
			return &stallingConn{Conn: c, closed: make(chan struct{})}, nil
		},
	}
}

// stallingConn writes through the end of the first request's headers,
// then blocks every write until it is closed.
type stallingConn struct {
	net.Conn
	tail   []byte // the last bytes written, up to three, to find "\r\n\r\n" across writes
	headed bool   // the headers are out: write nothing more
	once   sync.Once
	closed chan struct{}
}

var headersEnd = []byte("\r\n\r\n")

func (c *stallingConn) Write(p []byte) (int, error) {
	if c.headed {
		<-c.closed
		return 0, net.ErrClosed
	}
	seen := append(slices.Clone(c.tail), p...)
	i := bytes.Index(seen, headersEnd)
	if i < 0 {
		if len(seen) > len(headersEnd)-1 {
			seen = seen[len(seen)-len(headersEnd)+1:]
		}
		c.tail = seen
		return c.Conn.Write(p)
	}
	end := i + len(headersEnd) - len(c.tail) // of p, the bytes through the headers' end
	c.headed = true
	n, err := c.Conn.Write(p[:end])
	if err != nil {
		return n, err
	}
	<-c.closed
	return n, net.ErrClosed
}

func (c *stallingConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
