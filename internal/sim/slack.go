package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/alerts"
)

// observer knows, for every outbox row, how often Slack accepted a message
// carrying it, whether each copy after the first said it may be a repeat,
// and how many sends of it ended with an outcome unknown to the sender.
// It learns which rows a message carries by planning the due rows exactly
// as the deliverer does (alerts.Plan is pure) and matching the text that
// reaches Slack.
type observer struct {
	w     *world
	popts alerts.PlanOptions
	pc    *passCtl
	plan  []alerts.Message
	// next is the first planned message not yet accepted: the deliverer
	// sends in plan order, so two messages of the same text (a critical
	// finding alerted, resolved and alerted again) are told apart by
	// their place.
	next int
	rows map[int64]*rowLog
	// planOf holds each pass's planned messages.
	planOf map[int][]alerts.Message
}

type rowLog struct {
	accepted int
	// unmarked counts copies accepted after the first that did not say
	// they may be a repeat.
	unmarked int
	// unknown counts sends whose outcome the sender could not know: an
	// answer lost after Slack accepted, or the process killed before it
	// recorded what Slack accepted.
	unknown int
	killed  int // of unknown, those of a kill after acceptance
}

func newObserver(w *world) *observer {
	return &observer{w: w, rows: map[int64]*rowLog{}, planOf: map[int][]alerts.Message{}}
}

func (o *observer) beginPass(pc *passCtl) { o.pc, o.plan, o.next = pc, nil, 0 }

func (o *observer) row(id int64) *rowLog {
	r := o.rows[id]
	if r == nil {
		r = &rowLog{}
		o.rows[id] = r
	}
	return r
}

// due records the rows a drain got and the plan the deliverer makes of
// them.
func (o *observer) due(pc *passCtl, rows []reconcile.Alert, now time.Time) {
	o.w.mu.Lock()
	defer o.w.mu.Unlock()
	msgs := alerts.Plan(rows, now, o.popts)
	o.plan = append(o.plan, msgs...)
	o.planOf[pc.n] = append(o.planOf[pc.n], msgs...)
}

// message finds the planned message whose text reached Slack: the first
// not yet accepted with that text (or, for a text cut short by the
// deliverer's plain-text fallback, that beginning).
func (o *observer) message(text string) (alerts.Message, bool) {
	cut, short := strings.CutSuffix(text, "…")
	for i := o.next; i < len(o.plan); i++ {
		m := o.plan[i]
		if m.Text == text || short && cut != "" && strings.HasPrefix(m.Text, cut) {
			o.next = i + 1
			return m, true
		}
	}
	return alerts.Message{}, false
}

// accepted records that Slack accepted a message with text; lost says the
// sender will not learn it. Called under w.mu.
func (o *observer) accepted(pc *passCtl, text string, lost bool) {
	m, ok := o.message(text)
	if !ok {
		o.w.violate("I3", pc.n, "Slack accepted a message that no due outbox row called for: %.120q", text)
		return
	}
	if m.PossibleRepeat && !strings.Contains(text, "Possible repeat") && !strings.Contains(text, "may repeat") {
		o.w.violate("I3", pc.n, "a message planned as a possible repeat does not say so: %.120q", text)
	}
	for _, id := range m.AlertIDs {
		r := o.row(id)
		if r.accepted > 0 && !m.PossibleRepeat {
			r.unmarked++
		}
		r.accepted++
		if lost {
			r.unknown++
		}
	}
}

// killedAfterSend records that the process died after Slack accepted the
// message carrying row id, before recording it. Called under w.mu.
func (o *observer) killedAfterSend(id int64) {
	for i := len(o.plan) - 1; i >= 0; i-- {
		m := o.plan[i]
		for _, a := range m.AlertIDs {
			if a == id {
				for _, b := range m.AlertIDs {
					r := o.row(b)
					r.unknown++
					r.killed++
				}
				return
			}
		}
	}
}

// errLostAnswer is what the deliverer sees when the transport loses
// Slack's answer: Slack posted the message, the sender cannot know.
var errLostAnswer = errors.New("read tcp 127.0.0.1: i/o timeout (sim: answer lost after Slack accepted)")

// errLostRequest is a connection that broke before the request went out.
var errLostRequest = errors.New("dial tcp 127.0.0.1: connection reset by peer (sim: request lost)")

// slackTransport carries the deliverer's requests to the Slack fake,
// losing some requests before they go out and some answers after Slack
// accepted, as the plan says, and reports what Slack accepted. Losing an
// answer here, rather than hanging the fake, keeps histories deterministic
// and free of real timeouts.
type slackTransport struct {
	pc   *passCtl
	base http.RoundTripper
}

func (t *slackTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pc, w := t.pc, t.pc.w
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	w.mu.Lock()
	pc.slackReqs++
	n := pc.slackReqs
	loseReq, loseResp := pc.plan.loseRequest[n], pc.plan.loseResponse[n]
	if loseReq {
		pc.fired["slack_lost_request"] = true
	}
	w.mu.Unlock()
	if loseReq {
		return nil, errLostRequest
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	rb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	webhook := strings.Contains(req.URL.Path, "/services/")
	accepted := resp.StatusCode == http.StatusOK && (webhook && string(rb) == "ok" || !webhook && bytes.Contains(rb, []byte(`"ok":true`)))
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		pc.fired["slack_429"] = true
	case resp.StatusCode == http.StatusServiceUnavailable:
		pc.fired["slack_down"] = true
	case resp.StatusCode >= 500:
		pc.fired["slack_5xx"] = true
	case resp.StatusCode == http.StatusForbidden || bytes.Contains(rb, []byte("invalid_auth")):
		pc.fired["slack_bad_auth"] = true
	}
	if !accepted {
		return resp, nil
	}
	w.obs.accepted(pc, messageText(body, webhook), loseResp)
	if loseResp {
		pc.fired["slack_lost_response"] = true
		return nil, errLostAnswer
	}
	return resp, nil
}

// messageText is the text field of a chat.postMessage form or a webhook's
// JSON body.
func messageText(body []byte, webhook bool) string {
	if webhook {
		var m struct {
			Text string `json:"text"`
		}
		json.Unmarshal(body, &m)
		return m.Text
	}
	v, _ := url.ParseQuery(string(body))
	return v.Get("text")
}
