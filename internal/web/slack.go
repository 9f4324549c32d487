package web

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"reconcile"

	"reconcile/internal/alerts"
	"reconcile/internal/redact"
	"reconcile/internal/store"
)

// Slack's buttons (docs/design.md, "Buttons in Slack"): Slack posts each
// press of an Acknowledge button and each submission of its modal to
// POST /slack/interactions, signed with the app's signing secret. The
// route is not behind the page's sign-in (Slack signs in nowhere) nor its
// cross-origin check (Slack's servers send no browser headers); the
// signature is its authentication.

// SlackStore is what the buttons read and change; *store.Store is one.
type SlackStore interface {
	// SlackMessage returns the recorded message ts of channel, or
	// store.ErrNotFound.
	SlackMessage(ctx context.Context, channel, ts string) (reconcile.SlackMessage, error)
	// SlackMessagesOf returns the recorded messages announcing a finding.
	SlackMessagesOf(ctx context.Context, fingerprint string) ([]reconcile.SlackMessage, error)
	// FindingsOf returns the stored findings of the fingerprints.
	FindingsOf(ctx context.Context, fingerprints []string) ([]store.FindingRecord, error)
	// AckOpen acknowledges those of the findings that are open and not
	// yet acknowledged, and returns what it changed.
	AckOpen(ctx context.Context, fingerprints []string, by, reason string, now time.Time) ([]store.FindingRecord, error)
}

// SlackOptions turn the buttons' endpoint on.
type SlackOptions struct {
	// Client is the bot's Web API client (SLACK_BOT_TOKEN, SLACK_API_URL),
	// for views.open and chat.update.
	Client *slack.Client
	// SigningSecret is SLACK_SIGNING_SECRET, which every request must be
	// signed with. Empty: the endpoint answers 404.
	SigningSecret string
	// PublicURL is serve.public_url, linked from the modal of a message
	// that is not on record; empty: no link.
	PublicURL string
}

const (
	// maxInteraction bounds a request's body: Slack's payloads carry a
	// message's blocks, well under this.
	maxInteraction = 1 << 20
	// replayWindow is how old a signed request may be: slack-go's
	// verifier refuses older timestamps, and the cache of signatures seen
	// needs to remember no longer.
	replayWindow = 5 * time.Minute
	// viewTimeout bounds views.open: its trigger_id expires three seconds
	// after the press, and Slack wants an answer within three too.
	viewTimeout = 2500 * time.Millisecond
	// updateTimeout bounds one chat.update in the background.
	updateTimeout = 10 * time.Second
	// maxReason bounds the reason typed in the modal.
	maxReason = 500
	// reasonBlock and reasonAction name the modal's input.
	reasonBlock, reasonAction = "reason", "reason"
)

// slackButtons answers Slack's interactions and edits its messages.
type slackButtons struct {
	store     SlackStore
	client    *slack.Client
	secret    string
	publicURL string
	now       func() time.Time
	log       *slog.Logger

	mu      sync.Mutex
	seen    map[string]time.Time // signatures verified within replayWindow
	closed  bool
	pending sync.WaitGroup
	// edits are the messages to edit, in the order their findings
	// changed; one worker at a time takes them (editing is true while it
	// runs), so that the last edit of a message shows how it stands last.
	edits   []reconcile.SlackMessage
	editing bool
}

// interactions is POST /slack/interactions.
func (b *slackButtons) interactions(w http.ResponseWriter, r *http.Request) {
	if b == nil || b.secret == "" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInteraction))
	if err != nil {
		http.Error(w, "the request could not be read (at most 1 MiB)", http.StatusRequestEntityTooLarge)
		return
	}
	sv, err := slack.NewSecretsVerifier(r.Header, b.secret)
	if err == nil {
		_, err = sv.Write(body)
	}
	if err == nil {
		err = sv.Ensure()
	}
	if err != nil {
		// slack-go's errors name what failed (missing headers, a stale
		// timestamp, a bad signature), never the secret.
		http.Error(w, "not signed by Slack: "+redact.Text(err.Error()), http.StatusUnauthorized)
		return
	}
	if !b.firstSight(r.Header.Get("X-Slack-Signature")) {
		http.Error(w, "this request was received before", http.StatusConflict)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "the payload could not be read", http.StatusBadRequest)
		return
	}
	var ic slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &ic); err != nil {
		http.Error(w, "the payload could not be read", http.StatusBadRequest)
		return
	}
	switch {
	case ic.Type == slack.InteractionTypeBlockActions && slices.ContainsFunc(ic.ActionCallback.BlockActions,
		func(a *slack.BlockAction) bool { return a.ActionID == alerts.AckActionID }):
		b.press(w, r, ic)
	case ic.Type == slack.InteractionTypeViewSubmission && ic.View.CallbackID == alerts.AckCallbackID:
		b.submit(w, r, ic)
	default:
		// Another app's action or a closed modal: nothing to do.
		w.WriteHeader(http.StatusOK)
	}
}

// firstSight reports whether a verified signature is new within the
// replay window, and remembers it.
func (b *slackButtons) firstSight(sig string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now() // the verifier's clock, not the acknowledgements'
	for s, at := range b.seen {
		if now.Sub(at) > 2*replayWindow {
			delete(b.seen, s)
		}
	}
	if _, ok := b.seen[sig]; ok {
		return false
	}
	b.seen[sig] = now
	return true
}

// slackUser is who acts in Slack, as recorded: "<name> (Slack <id>)".
func slackUser(u slack.User) string {
	return cmp.Or(strings.TrimSpace(u.Name), "someone") + " (Slack " + u.ID + ")"
}

// target is the message a modal is about, in its private_metadata.
type target struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// press answers a press of the Acknowledge button: a modal asking why,
// or, when there is nothing left to acknowledge, one saying who did and
// why, or that the message is not on record. It answers within Slack's
// three seconds, as the trigger expires then.
func (b *slackButtons) press(w http.ResponseWriter, r *http.Request, ic slack.InteractionCallback) {
	at := target{Channel: ic.Container.ChannelID, TS: ic.Container.MessageTs}
	msg, err := b.store.SlackMessage(r.Context(), at.Channel, at.TS)
	if errors.Is(err, store.ErrNotFound) {
		text := "The findings of this message are not on record here, so they cannot be acknowledged from Slack."
		if b.publicURL != "" {
			text += " Acknowledge them on the findings page: <" + alerts.Escape(strings.TrimRight(b.publicURL, "/")+"/") + "|the findings page>."
		} else {
			text += " Acknowledge them with `reconcile ack`."
		}
		b.openView(w, r, ic.TriggerID, infoView("Not on record", []slack.Block{mrkdwnSection(text)}))
		return
	}
	if err != nil {
		b.fail(w, "read the slack message", err)
		return
	}
	fs, err := b.store.FindingsOf(r.Context(), msg.Fingerprints)
	if err != nil {
		b.fail(w, "read the message's findings", err)
		return
	}
	open, unacked := openOf(fs)
	if unacked > 0 {
		meta, _ := json.Marshal(at)
		b.openView(w, r, ic.TriggerID, ackView(unacked, string(meta)))
		return
	}
	// Nothing left to acknowledge: say who did, and bring the message up
	// to date (it still shows the button).
	var blocks []slack.Block
	if open == 0 {
		blocks = append(blocks, plainSection("The findings of this message are no longer open: a later run resolved them."))
	}
	for _, a := range acksOf(fs) {
		blocks = append(blocks, plainSection(alerts.AckPlain(a)))
	}
	b.openView(w, r, ic.TriggerID, infoView("Already acknowledged", blocks))
	b.refreshLater(msg)
}

// submit records the modal's reason against every open, not yet
// acknowledged finding of the message, as the Slack user, answers with an
// empty body (which closes the modal), and then edits the message. A
// second submission, or the same one delivered again, changes nothing.
func (b *slackButtons) submit(w http.ResponseWriter, r *http.Request, ic slack.InteractionCallback) {
	var at target
	if err := json.Unmarshal([]byte(ic.View.PrivateMetadata), &at); err != nil || at.Channel == "" || at.TS == "" {
		http.Error(w, "the modal does not say which message it is about", http.StatusBadRequest)
		return
	}
	var reason string
	if ic.View.State != nil {
		reason = strings.TrimSpace(ic.View.State.Values[reasonBlock][reasonAction].Value)
	}
	if reason == "" || len([]rune(reason)) > maxReason {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"response_action": "errors",
			"errors": map[string]string{reasonBlock: fmt.Sprintf("Say why, in at most %d characters.", maxReason)}})
		return
	}
	msg, err := b.store.SlackMessage(r.Context(), at.Channel, at.TS)
	if err != nil {
		b.fail(w, "read the slack message", err)
		return
	}
	if _, err := b.store.AckOpen(r.Context(), msg.Fingerprints, slackUser(ic.User), reason, b.now().UTC()); err != nil {
		b.fail(w, "acknowledge from slack", err)
		return
	}
	w.WriteHeader(http.StatusOK)
	b.refreshLater(msg)
}

// acknowledged is called once the page acknowledged a finding: every
// recorded message announcing it is edited to say so.
func (b *slackButtons) acknowledged(ctx context.Context, fingerprint string) {
	if b == nil || b.client == nil {
		return
	}
	msgs, err := b.store.SlackMessagesOf(ctx, fingerprint)
	if err != nil {
		b.log.Error("slack: find the messages of an acknowledged finding", "error", redact.String(err.Error()))
		return
	}
	for _, m := range msgs {
		b.refreshLater(m)
	}
}

// refreshLater edits msg in the background, tracked so that Close waits
// for it. Edits run one after another in the order asked: two edits of a
// message at once (an ack, then a reopening) could land in either order
// and leave it showing the older state.
func (b *slackButtons) refreshLater(msg reconcile.SlackMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.edits = append(b.edits, msg)
	if !b.editing {
		b.editing = true
		b.pending.Go(b.edit)
	}
}

// edit makes the queued edits until none is left.
func (b *slackButtons) edit() {
	for {
		b.mu.Lock()
		if len(b.edits) == 0 {
			b.editing = false
			b.mu.Unlock()
			return
		}
		msg := b.edits[0]
		b.edits = b.edits[1:]
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), updateTimeout)
		if err := b.refresh(ctx, msg); err != nil {
			b.log.Error("slack: update an acknowledged message", "ts", msg.TS, "error", redact.String(err.Error()))
		}
		cancel()
	}
}

// refresh edits msg as its findings stand: its blocks as posted without
// the button, who acknowledged when and why, and the button again while
// some of its open findings are not acknowledged (and it had one).
func (b *slackButtons) refresh(ctx context.Context, msg reconcile.SlackMessage) error {
	fs, err := b.store.FindingsOf(ctx, msg.Fingerprints)
	if err != nil {
		return err
	}
	var blocks slack.Blocks
	if len(msg.Blocks) > 0 {
		if err := json.Unmarshal(msg.Blocks, &blocks); err != nil {
			return fmt.Errorf("blocks of %s: %w", msg.TS, err)
		}
	}
	_, unacked := openOf(fs)
	hadButton := slices.ContainsFunc(blocks.BlockSet, func(bl slack.Block) bool {
		a, ok := bl.(*slack.ActionBlock)
		return ok && a.BlockID == alerts.AckBlockID
	})
	set, text := alerts.Acknowledged(blocks.BlockSet, msg.Text, acksOf(fs), hadButton && unacked > 0)
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if len(set) > 0 {
		opts = append(opts, slack.MsgOptionBlocks(set...))
	}
	_, _, _, err = b.client.UpdateMessageContext(ctx, msg.Channel, msg.TS, opts...)
	return err
}

// Close stops new background edits and waits for those under way, or
// until ctx ends.
func (b *slackButtons) Close(ctx context.Context) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		b.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("slack: edits still under way: %w", ctx.Err())
	}
}

func (b *slackButtons) openView(w http.ResponseWriter, r *http.Request, trigger string, v slack.ModalViewRequest) {
	ctx, cancel := context.WithTimeout(r.Context(), viewTimeout)
	defer cancel()
	if _, err := b.client.OpenViewContext(ctx, trigger, v); err != nil {
		b.log.Error("slack: open a modal", "error", redact.String(err.Error()))
	}
	// Slack needs its 200 whatever became of the modal.
	w.WriteHeader(http.StatusOK)
}

func (b *slackButtons) fail(w http.ResponseWriter, what string, err error) {
	b.log.Error("slack: "+what, "error", redact.String(err.Error()))
	http.Error(w, "the findings could not be read; see the server's log", http.StatusInternalServerError)
}

// openOf counts the open findings and the open ones not acknowledged.
func openOf(fs []store.FindingRecord) (open, unacked int) {
	for _, f := range fs {
		if f.Status != store.FindingOpen {
			continue
		}
		open++
		if f.AcknowledgedAt.IsZero() {
			unacked++
		}
	}
	return open, unacked
}

// acksOf are the acknowledgements of the open findings, oldest first.
func acksOf(fs []store.FindingRecord) []alerts.Ack {
	var acks []alerts.Ack
	for _, f := range fs {
		if f.Status == store.FindingOpen && !f.AcknowledgedAt.IsZero() {
			acks = append(acks, alerts.Ack{By: f.AcknowledgedBy, Reason: f.AckReason, At: f.AcknowledgedAt})
		}
	}
	slices.SortStableFunc(acks, func(a, b alerts.Ack) int { return a.At.Compare(b.At) })
	return acks
}

func plainText(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// plainSection shows outside text as plain text, where Slack formats
// nothing and makes no mention or link.
func plainSection(s string) *slack.SectionBlock {
	return slack.NewSectionBlock(plainText(s), nil, nil)
}

// mrkdwnSection is the reconciler's own words, with its own links.
func mrkdwnSection(s string) *slack.SectionBlock {
	return slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, s, false, true), nil, nil)
}

// ackView asks why n findings are acknowledged.
func ackView(n int, meta string) slack.ModalViewRequest {
	what := "the finding of this message"
	if n > 1 {
		what = fmt.Sprintf("the %d open findings of this message", n)
	}
	input := slack.NewPlainTextInputBlockElement(plainText("e.g. refunded by hand, ticket FIN-123"), reasonAction)
	input.Multiline = true
	input.MaxLength = maxReason
	reason := slack.NewInputBlock(reasonBlock, plainText("Why"), nil, input)
	return slack.ModalViewRequest{
		Type: slack.VTModal, CallbackID: alerts.AckCallbackID, PrivateMetadata: meta,
		Title: plainText("Acknowledge"), Submit: plainText("Acknowledge"), Close: plainText("Cancel"),
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			plainSection("Acknowledge " + what + ": it is not repeated until what it says changes. Your name and the reason are recorded."),
			reason,
		}},
	}
}

// infoView says something and offers only to close.
func infoView(title string, blocks []slack.Block) slack.ModalViewRequest {
	if len(blocks) > 20 {
		blocks = append(blocks[:19:19], plainSection("…and more: see the findings page or `reconcile findings`."))
	}
	return slack.ModalViewRequest{Type: slack.VTModal, Title: plainText(title), Close: plainText("Close"),
		Blocks: slack.Blocks{BlockSet: blocks}}
}
