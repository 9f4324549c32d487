package slacktest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TriggerLife is how long a trigger_id may open a view: Slack's three
// seconds.
const TriggerLife = 3 * time.Second

// User is the Slack user an interaction comes from.
type User struct {
	ID, Username, Name string
}

// View is a modal opened with views.open.
type View struct {
	ID              string
	TriggerID       string
	User            User // who pressed the button whose trigger opened it
	CallbackID      string
	PrivateMetadata string
	Title           string
	// JSON is the view as posted; Flat every string in it, one per line.
	JSON json.RawMessage
	Flat string
	At   time.Time
}

// Update is one chat.update Slack accepted.
type Update struct {
	Channel, TS string
	Text        string
	Blocks      json.RawMessage
	Flat        string
	At          time.Time
}

// Views returns the views opened so far, oldest first.
func (s *Server) Views() []View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.views)
}

// Updates returns every chat.update accepted so far, oldest first; the
// message itself (Messages) shows the last.
func (s *Server) Updates() []Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.updates)
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// openView answers views.open; the caller holds s.mu and this unlocks.
// The trigger must be one the server issued (Press) less than
// TriggerLife ago by Now, as Slack's expire; the view is checked
// against Slack's limits on a modal.
func (s *Server) openView(w http.ResponseWriter, fields map[string]string) {
	fail := func(code string) { s.failUnlock(w, code) }
	tr, ok := s.triggers[fields["trigger_id"]]
	switch {
	case !ok:
		fail("invalid_trigger_id")
		return
	case s.now().Sub(tr.at) >= TriggerLife:
		fail("expired_trigger_id")
		return
	}
	var v struct {
		Type            string          `json:"type"`
		Title           *textObject     `json:"title"`
		Submit          *textObject     `json:"submit"`
		Close           *textObject     `json:"close"`
		Blocks          json.RawMessage `json:"blocks"`
		CallbackID      string          `json:"callback_id"`
		PrivateMetadata string          `json:"private_metadata"`
	}
	raw := json.RawMessage(fields["view"])
	if err := json.Unmarshal(raw, &v); err != nil {
		fail("invalid_arguments")
		return
	}
	s.viewSeq++
	view := View{ID: fmt.Sprintf("V%08d", s.viewSeq), TriggerID: fields["trigger_id"], User: tr.user,
		CallbackID: v.CallbackID, PrivateMetadata: v.PrivateMetadata, JSON: raw, Flat: flatten(raw), At: s.now()}
	if v.Title != nil {
		view.Title = v.Title.Text
	}
	s.views = append(s.views, view)
	for _, msg := range viewLimits(v.Type, v.Title, v.Submit, v.Close, v.Blocks, v.CallbackID, v.PrivateMetadata) {
		s.violations = append(s.violations, fmt.Sprintf("view %d (views.open): %s", len(s.views), msg))
	}
	s.mu.Unlock()
	answer, _ := json.Marshal(map[string]any{"ok": true, "view": map[string]any{
		"id": view.ID, "type": "modal", "callback_id": view.CallbackID, "private_metadata": view.PrivateMetadata}})
	w.Write(answer)
}

// failUnlock answers a Web API call with Slack's error code; the caller
// holds s.mu and this unlocks.
func (s *Server) failUnlock(w http.ResponseWriter, code string) {
	s.mu.Unlock()
	fmt.Fprintf(w, `{"ok":false,"error":%q}`, code)
}

type textObject struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// viewLimits lists how a modal breaks Slack's limits
// (https://docs.slack.dev/reference/views/modal-views): a title, submit
// or close text over 24 characters, over 100 blocks, a callback_id over
// 255 characters, private_metadata over 3,000; and a type other than
// modal.
func viewLimits(typ string, title, submit, close *textObject, blocks json.RawMessage, callbackID, metadata string) []string {
	var v []string
	if typ != "modal" {
		v = append(v, fmt.Sprintf("type %q, want modal", typ))
	}
	if title == nil || title.Text == "" {
		v = append(v, "no title")
	}
	for _, t := range []struct {
		name string
		o    *textObject
	}{{"title", title}, {"submit", submit}, {"close", close}} {
		if t.o == nil {
			continue
		}
		if n := utf8.RuneCountInString(t.o.Text); n > 24 {
			v = append(v, fmt.Sprintf("%s of %d characters", t.name, n))
		}
		if t.o.Type != "plain_text" {
			v = append(v, fmt.Sprintf("%s of type %q, want plain_text", t.name, t.o.Type))
		}
	}
	var bs []json.RawMessage
	if len(blocks) > 0 && json.Unmarshal(blocks, &bs) != nil {
		v = append(v, "blocks are not an array")
	}
	if len(bs) > 100 {
		v = append(v, fmt.Sprintf("%d blocks", len(bs)))
	}
	if n := utf8.RuneCountInString(callbackID); n > 255 {
		v = append(v, fmt.Sprintf("callback_id of %d characters", n))
	}
	if n := utf8.RuneCountInString(metadata); n > 3000 {
		v = append(v, fmt.Sprintf("private_metadata of %d characters", n))
	}
	return v
}

// updateMessage answers chat.update; the caller holds s.mu and this
// unlocks. The message must be in the channel; the new content is checked
// against the limits of a post, replaces the message's and is kept in
// Updates.
func (s *Server) updateMessage(w http.ResponseWriter, fields map[string]string) {
	fail := func(code string) { s.failUnlock(w, code) }
	channel, ts := fields["channel"], fields["ts"]
	i := slices.IndexFunc(s.msgs, func(m Message) bool { return m.Method != "webhook" && m.Channel == channel && m.TS == ts })
	if i < 0 {
		fail("message_not_found")
		return
	}
	blocks := json.RawMessage(fields["blocks"])
	if !validBlocks(blocks) {
		fail("invalid_blocks_format")
		return
	}
	m := &s.msgs[i]
	m.Text, m.Blocks = fields["text"], blocksOrNone(blocks)
	m.Flat = fields["text"] + "\n" + flatten(blocks)
	u := Update{Channel: channel, TS: ts, Text: m.Text, Blocks: m.Blocks, Flat: m.Flat, At: s.now()}
	s.updates = append(s.updates, u)
	for _, v := range limits(*m) {
		s.violations = append(s.violations, fmt.Sprintf("update %d (chat.update): %s", len(s.updates), v))
	}
	s.mu.Unlock()
	fmt.Fprintf(w, `{"ok":true,"channel":%q,"ts":%q,"text":%q}`, channel, ts, m.Text)
}

type trigger struct {
	at   time.Time
	user User
}

// issueTrigger returns a new trigger_id, valid for TriggerLife from Now.
// The caller holds s.mu.
func (s *Server) issueTrigger(u User) string {
	s.triggerSeq++
	id := fmt.Sprintf("%d.%d.faketrigger%04d", s.now().Unix(), 1, s.triggerSeq)
	if s.triggers == nil {
		s.triggers = map[string]trigger{}
	}
	s.triggers[id] = trigger{at: s.now(), user: u}
	return id
}

// Interaction is a request as Slack sends it to an app's interactivity
// request URL: a form with one field, payload, signed with the app's
// signing secret. Post sends it (again, for a replay).
type Interaction struct {
	Body   string
	Header http.Header
}

// Sign signs body as Slack does, at the time at (Unix seconds in
// X-Slack-Request-Timestamp; X-Slack-Signature is "v0=" and the hex of
// HMAC-SHA256(secret, "v0:"+timestamp+":"+body)). Slack stamps the real
// time; a verifier checks it against its own clock, so pass time.Now,
// or an older time for a stale request.
func Sign(secret string, at time.Time, body string) Interaction {
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	io.WriteString(mac, "v0:"+ts+":"+body)
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return Interaction{Body: body, Header: h}
}

// Post sends the interaction to url and returns the answer's status and
// body.
func (in Interaction) Post(ctx context.Context, url string) (status int, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(in.Body))
	if err != nil {
		return 0, "", err
	}
	req.Header = in.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// ErrNoButton is PressPayload's error when the message shows no element
// with that action_id: nobody can press it.
var ErrNoButton = errors.New("slacktest: the message has no such button")

// PressPayload is the form body of a block_actions interaction, as Slack
// sends it when user presses the button actionID of the message channel,
// ts as the channel shows it now. It issues the trigger_id the payload
// carries, valid for TriggerLife.
func (s *Server) PressPayload(channel, ts, actionID string, u User) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.msgs, func(m Message) bool { return m.Channel == channel && m.TS == ts })
	if i < 0 {
		return "", fmt.Errorf("slacktest: no message %s in %s", ts, channel)
	}
	m := s.msgs[i]
	var blocks []map[string]any
	if len(m.Blocks) > 0 {
		if err := json.Unmarshal(m.Blocks, &blocks); err != nil {
			return "", fmt.Errorf("slacktest: blocks of %s: %w", ts, err)
		}
	}
	var action map[string]any
	for _, b := range blocks {
		if b["type"] != "actions" {
			continue
		}
		els, _ := b["elements"].([]any)
		for _, e := range els {
			el, _ := e.(map[string]any)
			if el["action_id"] == actionID {
				action = map[string]any{"action_id": actionID, "block_id": b["block_id"], "type": el["type"],
					"text": el["text"], "value": el["value"], "action_ts": s.actionTS()}
			}
		}
	}
	if action == nil {
		return "", ErrNoButton
	}
	p := map[string]any{
		"type":       "block_actions",
		"user":       map[string]any{"id": u.ID, "username": u.Username, "name": u.Name, "team_id": "T1"},
		"api_app_id": "A1",
		"token":      "deprecated-verification-token",
		"container":  map[string]any{"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": false},
		"trigger_id": s.issueTrigger(u),
		"team":       map[string]any{"id": "T1", "domain": "fake"},
		"channel":    map[string]any{"id": channel, "name": "finance"},
		"message": map[string]any{"type": "message", "ts": ts, "text": m.Text, "blocks": blocks,
			"bot_id": "B1", "user": "U1"},
		"response_url": "https://hooks.slack.invalid/actions/T1/1/response",
		"actions":      []any{action},
	}
	return form(p)
}

// SubmitPayload is the form body of a view_submission interaction, as
// Slack sends it when user submits the view viewID with values (block_id
// to action_id to the value typed).
func (s *Server) SubmitPayload(viewID string, values map[string]map[string]string, u User) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.views, func(v View) bool { return v.ID == viewID })
	if i < 0 {
		return "", fmt.Errorf("slacktest: no view %s was opened", viewID)
	}
	v := s.views[i]
	var view map[string]any
	if err := json.Unmarshal(v.JSON, &view); err != nil {
		return "", fmt.Errorf("slacktest: view %s: %w", viewID, err)
	}
	state := map[string]any{}
	for block, acts := range values {
		st := map[string]any{}
		for action, value := range acts {
			st[action] = map[string]any{"type": "plain_text_input", "value": value}
		}
		state[block] = st
	}
	view["id"], view["team_id"], view["app_id"], view["bot_id"] = v.ID, "T1", "A1", "B1"
	view["state"] = map[string]any{"values": state}
	view["hash"] = fmt.Sprintf("%d.hash", s.now().Unix())
	p := map[string]any{
		"type":       "view_submission",
		"user":       map[string]any{"id": u.ID, "username": u.Username, "name": u.Name, "team_id": "T1"},
		"api_app_id": "A1",
		"token":      "deprecated-verification-token",
		"trigger_id": s.issueTrigger(u),
		"team":       map[string]any{"id": "T1", "domain": "fake"},
		"view":       view,
	}
	return form(p)
}

func (s *Server) actionTS() string {
	s.ts++
	return fmt.Sprintf("1700000000.%06d", s.ts)
}

func form(p map[string]any) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	return url.Values{"payload": {string(b)}}.Encode(), nil
}

// Press presses the button actionID of message channel, ts as user, the
// way Slack does: it posts the signed block_actions payload to url (the
// app's interactivity request URL). It returns the interaction, to
// replay, and the answer.
func (s *Server) Press(ctx context.Context, url, secret, channel, ts, actionID string, u User) (Interaction, int, string, error) {
	body, err := s.PressPayload(channel, ts, actionID, u)
	return signAndPost(ctx, url, secret, body, err)
}

// Submit submits the view viewID with values as user, the way Slack
// does: it posts the signed view_submission payload to url.
func (s *Server) Submit(ctx context.Context, url, secret, viewID string, values map[string]map[string]string, u User) (Interaction, int, string, error) {
	body, err := s.SubmitPayload(viewID, values, u)
	return signAndPost(ctx, url, secret, body, err)
}

func signAndPost(ctx context.Context, url, secret, body string, err error) (Interaction, int, string, error) {
	if err != nil {
		return Interaction{}, 0, "", err
	}
	in := Sign(secret, time.Now(), body)
	status, answer, err := in.Post(ctx, url)
	return in, status, answer, err
}
