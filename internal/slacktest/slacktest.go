// Package slacktest is a Slack Web API and incoming-webhook endpoint for
// tests, the simulation and the demo: it speaks Slack's wire format
// (chat.postMessage form or JSON bodies, {"ok":…,"ts":…} answers,
// 429 with Retry-After), records what was posted, and injects faults.
package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Message is one message Slack accepted.
type Message struct {
	Method  string // chat.postMessage or webhook
	Channel string
	Thread  string // thread_ts, empty for a top-level message
	TS      string
	Text    string          // the top-level text field
	Blocks  json.RawMessage // the blocks, as posted
	// Flat is the text and every string inside the blocks and
	// attachments, one per line, for assertions on what a reader sees.
	Flat string
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
}

// Server is a fake Slack. The zero value is not usable; use New.
type Server struct {
	Token string

	mu     sync.Mutex
	msgs   []Message
	faults Faults
	ts     int
	reqs   int
}

// New returns a server accepting bearer token (or form field) token.
func New(token string) *Server { return &Server{Token: token} }

// SetFaults replaces the fault plan.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Messages returns what Slack accepted so far.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Requests counts every request received.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs
}

// Start serves on 127.0.0.1; the URL is the SLACK_API_URL base without
// "/api/". Webhooks are posted to URL + "/services/…".
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
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs++
	f := &s.faults
	if f.Down {
		s.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	webhook := strings.HasPrefix(r.URL.Path, "/services/")
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	if f.RateLimit > 0 && method != "auth.test" {
		f.RateLimit--
		ra := f.RetryAfter
		if ra == 0 {
			ra = 1
		}
		s.mu.Unlock()
		w.Header().Set("Retry-After", fmt.Sprint(ra))
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"ok":false,"error":"ratelimited"}`)
		return
	}
	if f.ServerErr > 0 {
		f.ServerErr--
		s.mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if webhook {
		if f.BadAuth || !strings.HasSuffix(r.URL.Path, "/"+s.Token) {
			s.mu.Unlock()
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "invalid_token")
			return
		}
		var p map[string]any
		json.Unmarshal(body, &p)
		text, _ := p["text"].(string)
		blocks, _ := json.Marshal(p["blocks"])
		hang := s.record(Message{Method: "webhook", Text: text, Blocks: blocks, Flat: flatten(body)})
		s.mu.Unlock()
		time.Sleep(hang)
		io.WriteString(w, "ok")
		return
	}
	fields := formOrJSON(r, body)
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		tok = fields["token"]
	}
	w.Header().Set("Content-Type", "application/json")
	if f.BadAuth || tok != s.Token {
		s.mu.Unlock()
		io.WriteString(w, `{"ok":false,"error":"invalid_auth"}`)
		return
	}
	if f.Error != "" && method != "auth.test" {
		e := f.Error
		s.mu.Unlock()
		fmt.Fprintf(w, `{"ok":false,"error":%q}`, e)
		return
	}
	switch method {
	case "auth.test":
		s.mu.Unlock()
		io.WriteString(w, `{"ok":true,"url":"https://fake.slack.com/","team":"fake","user":"reconciler","team_id":"T1","user_id":"U1","bot_id":"B1"}`)
	case "chat.postMessage":
		s.ts++
		ts := fmt.Sprintf("1700000000.%06d", s.ts)
		m := Message{Method: method, Channel: fields["channel"], Thread: fields["thread_ts"], TS: ts,
			Text: fields["text"], Blocks: json.RawMessage(fields["blocks"]),
			Flat: fields["text"] + "\n" + flatten([]byte(fields["blocks"])) + flatten([]byte(fields["attachments"]))}
		hang := s.record(m)
		s.mu.Unlock()
		time.Sleep(hang)
		fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":%q,"message":{"ts":%q}}`, m.Channel, ts, ts)
	default:
		s.mu.Unlock()
		io.WriteString(w, `{"ok":false,"error":"unknown_method"}`)
	}
}

// record appends m and returns how long to hang before answering; the
// caller holds s.mu.
func (s *Server) record(m Message) time.Duration {
	s.msgs = append(s.msgs, m)
	if s.faults.AcceptHang > 0 {
		s.faults.AcceptHang--
		return s.faults.Hang
	}
	return 0
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
