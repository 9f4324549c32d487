package alerts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"reconcile/internal/config"
	"reconcile/internal/redact"

	"github.com/slack-go/slack"
)

// NotConfiguredWarning is the one warning to log when no Slack is
// configured: findings stay in the outbox and in the report.
const NotConfiguredWarning = "alerts are not being delivered: set SLACK_BOT_TOKEN and SLACK_CHANNEL or SLACK_WEBHOOK_URL"

// ErrNotConfigured is returned by Drain when neither a bot token nor a
// webhook URL is set.
var ErrNotConfigured = errors.New("slack is not configured")

// ErrPermanent matches, with errors.Is, every error that no retry can fix:
// a bad token, an unknown channel, a removed webhook, and any error code
// of Slack's this version does not know. The run exits 1 and the rows stay
// in the outbox until someone fixes the setting (docs/design.md, "Alert
// lifecycle").
var ErrPermanent = errors.New("slack delivery needs a fix")

// PermanentError is a delivery error that no retry can fix. Its message
// is one line that says what to fix, and holds no secret.
type PermanentError struct {
	// Reason is Slack's error code (a code this version does not know
	// included), "webhook HTTP <status>", or "HTTP <status>".
	Reason string
	// Fix says what someone must change, naming the setting (an
	// environment variable, the Slack app), or that the answer is one
	// this version does not know.
	Fix string
}

func (e *PermanentError) Error() string { return "slack: " + e.Reason + ": " + e.Fix }

// Is makes errors.Is(err, ErrPermanent) true.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// SlackOptions configure delivery. BotToken and WebhookURL are secrets:
// SlackOptions prints and logs them as "<redacted>", and no error or log
// line of this package contains them.
type SlackOptions struct {
	BotToken   string // SLACK_BOT_TOKEN; needs Channel
	Channel    string // SLACK_CHANNEL, an id (C0123456789) or a name
	WebhookURL string // SLACK_WEBHOOK_URL, used when there is no bot token
	APIURL     string // SLACK_API_URL (https://slack.com/api/); required with a bot token
	// PerChannelInterval is the least time between two posts to a channel
	// (alerts.per_channel_interval; Slack allows about one message a
	// second per channel). Zero or negative: no pacing.
	PerChannelInterval time.Duration
	// MaxRetries is how many times one message is tried again after a 429,
	// a 5xx or a network error before the request was written out whole, or
	// Slack's service_unavailable; then the drain stops and the rest waits
	// in the outbox. 0: no retries. A request that may have been acted on is
	// never tried again within a drain (docs/design.md, "Alert lifecycle").
	MaxRetries int
	// Timeout bounds one request (alerts.timeout); required when Slack is
	// configured.
	Timeout    time.Duration
	HTTPClient *http.Client // default: a plain client; Timeout applies per request
	// Live says the Stripe key is a live one (sk_live_, rk_live_), so that
	// dashboard links leave out /test/.
	Live bool
	// Buttons puts Acknowledge buttons on the bot's messages: set when
	// SLACK_SIGNING_SECRET is, so that serve can verify Slack's calls
	// (docs/design.md, "Buttons in Slack"). Ignored for a webhook.
	Buttons bool
	// PublicURL is serve.public_url, which messages link to when there
	// are no buttons.
	PublicURL string
	Logger    *slog.Logger // default: discard

	// BackoffBase is the wait after the first 5xx or network error, doubled
	// per retry up to BackoffMax; defaults 500ms and 10s.
	BackoffBase, BackoffMax time.Duration
	// MaxRetryAfter is the longest 429 Retry-After waited for within a
	// drain; a longer one ends the drain. Default 2m.
	MaxRetryAfter time.Duration
	// BatchSize is how many due rows are planned at once, and so share one
	// MaxMessages budget; default 25,000.
	BatchSize int
	// MaxCritical and MaxMessages bound one drain's messages (PlanOptions).
	MaxCritical, MaxMessages int
	// Sleep waits for d or until ctx ends; default a timer. Tests pass a
	// fake clock's, so that pacing and backoff take no real time.
	Sleep func(ctx context.Context, d time.Duration) error
}

// String prints the options without their secrets.
func (o SlackOptions) String() string {
	return fmt.Sprintf("{BotToken:%s Channel:%s WebhookURL:%s APIURL:%s Live:%t}",
		secret(o.BotToken), o.Channel, secret(o.WebhookURL), o.APIURL, o.Live)
}

// GoString keeps %#v from printing the secrets.
func (o SlackOptions) GoString() string { return "alerts.SlackOptions" + o.String() }

// LogValue logs the options without their secrets.
func (o SlackOptions) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("bot_token", secret(o.BotToken)),
		slog.String("channel", o.Channel),
		slog.String("webhook_url", secret(o.WebhookURL)),
		slog.String("api_url", o.APIURL),
	)
}

func secret(s string) string {
	if s == "" {
		return ""
	}
	return redact.Marker
}

type mode int

const (
	modeNone mode = iota
	modeBot
	modeWebhook
)

// Deliverer posts the outbox's due alerts to Slack.
type Deliverer struct {
	mode    mode
	opts    SlackOptions
	client  *slack.Client
	http    *http.Client
	log     *slog.Logger
	secrets []string // literal secrets to scrub from error text
}

// SlackOptionsFrom takes delivery's options from the configuration: the
// token, channel, webhook and API URL from the environment, pacing,
// retries and timeout from alerts.*, and whether the Stripe key is live
// (for dashboard links).
func SlackOptionsFrom(c config.Config) SlackOptions {
	e := c.Env
	return SlackOptions{
		BotToken:           e.SlackBotToken.Reveal(),
		Channel:            e.SlackChannel,
		WebhookURL:         e.SlackWebhookURL.Reveal(),
		APIURL:             e.SlackAPIURL,
		PerChannelInterval: c.Alerts.PerChannelInterval,
		MaxRetries:         c.Alerts.MaxRetries,
		Timeout:            c.Alerts.Timeout,
		MaxMessages:        c.Alerts.MaxMessages,
		Live:               e.LiveStripeKey(),
		Buttons:            e.SlackBotToken != "" && e.SlackSigningSecret != "",
		PublicURL:          c.Serve.PublicURL,
	}
}

// NewSlack validates the options and returns a Deliverer. A bot token
// needs a channel; a webhook URL alone is enough; with both, the bot token
// is used (it can thread). With neither, the Deliverer is not Configured
// and Drain returns ErrNotConfigured. Errors never repeat a secret.
func NewSlack(opts SlackOptions) (*Deliverer, error) {
	opts.BotToken = strings.TrimSpace(opts.BotToken)
	opts.WebhookURL = strings.TrimSpace(opts.WebhookURL)
	opts.Channel = strings.TrimSpace(opts.Channel)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.BotToken != "" || opts.APIURL != "" {
		if u, err := url.Parse(opts.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errors.New("slack: SLACK_API_URL must be an absolute http(s) URL such as https://slack.com/api/")
		}
		if !strings.HasSuffix(opts.APIURL, "/") {
			opts.APIURL += "/"
		}
	}
	if opts.Timeout <= 0 && (opts.BotToken != "" || opts.WebhookURL != "") {
		return nil, fmt.Errorf("slack: request timeout %s: want a positive duration (alerts.timeout)", opts.Timeout)
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = 500 * time.Millisecond
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 10 * time.Second
	}
	if opts.MaxRetryAfter <= 0 {
		opts.MaxRetryAfter = 2 * time.Minute
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 25000
	}
	if opts.MaxRetries < 0 {
		opts.MaxRetries = 0
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	d := &Deliverer{opts: opts, http: opts.HTTPClient, log: opts.Logger}
	switch {
	case opts.BotToken != "":
		if opts.Channel == "" {
			return nil, errors.New("slack: SLACK_CHANNEL must be set with SLACK_BOT_TOKEN (the id of the channel alerts go to, e.g. C0123456789)")
		}
		d.mode = modeBot
		d.client = slack.New(opts.BotToken, slack.OptionAPIURL(opts.APIURL), slack.OptionHTTPClient(opts.HTTPClient))
		d.secrets = []string{opts.BotToken}
	case opts.WebhookURL != "":
		u, err := url.Parse(opts.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errors.New("slack: SLACK_WEBHOOK_URL must be an absolute http(s) URL (an incoming webhook, https://hooks.slack.com/services/…)")
		}
		d.mode = modeWebhook
		// The path is the secret; error text may carry it raw or escaped.
		d.secrets = []string{opts.WebhookURL, u.String(), u.EscapedPath(), u.Path}
	}
	return d, nil
}

// Configured reports whether Slack delivery is set up; when it is not, the
// caller logs NotConfiguredWarning once and leaves the outbox alone.
func (d *Deliverer) Configured() bool { return d != nil && d.mode != modeNone }

// String describes the deliverer without its secrets.
func (d *Deliverer) String() string {
	switch d.mode {
	case modeBot:
		return "slack bot to channel " + d.opts.Channel
	case modeWebhook:
		return "slack incoming webhook"
	}
	return "slack (not configured)"
}

// GoString keeps %#v from printing the secrets.
func (d *Deliverer) GoString() string { return d.String() }

// PlanOptions are the options Drain plans with.
func (d *Deliverer) PlanOptions() PlanOptions {
	return PlanOptions{Live: d.opts.Live, Webhook: d.mode == modeWebhook,
		MaxCritical: d.opts.MaxCritical, MaxMessages: d.opts.MaxMessages,
		Buttons: d.opts.Buttons && d.mode == modeBot, PublicURL: d.opts.PublicURL}
}

// Drain posts every alert the outbox has due, in planned messages, at most
// one a PerChannelInterval, and marks each row sent once Slack accepted
// the message carrying it. Slack unavailable (429 past MaxRetryAfter, and
// after MaxRetries a 5xx or network error before the request was written
// out whole) ends the drain with the rest left in the outbox and a nil
// error: the next drain sends it. A request Slack may have acted on (no
// answer after it went out whole, a 5xx after that, internal_error,
// fatal_error, request_timeout) ends the drain too, recorded as of
// unknown outcome, so that the next copy says it may be a repeat. Errors:
// ErrNotConfigured; an error matching ErrPermanent (a setting to fix, or
// an error code this version does not know: the rows stay unsent, the
// refusal recorded); the outbox's errors; the context's. See
// docs/design.md, "Alert lifecycle".
func (d *Deliverer) Drain(ctx context.Context, outbox Outbox, now func() time.Time) (DrainStats, error) {
	if !d.Configured() {
		return DrainStats{}, ErrNotConfigured
	}
	p := &pacer{interval: d.opts.PerChannelInterval, now: now, sleep: d.opts.Sleep, last: map[string]time.Time{}}
	var st DrainStats
	send := func(ctx context.Context, m Message, thread string) outcome {
		return d.send(ctx, m, thread, p, now, &st)
	}
	got, err := drain(ctx, outbox, now, d.PlanOptions(), d.opts.BatchSize, d.log, send)
	got.Retries, got.RateLimited = st.Retries, st.RateLimited
	return got, err
}

// pacer keeps posts to one channel at least interval apart.
type pacer struct {
	interval time.Duration
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
	last     map[string]time.Time
}

func (p *pacer) wait(ctx context.Context, channel string) error {
	last, ok := p.last[channel]
	if !ok || p.interval <= 0 {
		return nil
	}
	if d := last.Add(p.interval).Sub(p.now()); d > 0 {
		return p.sleep(ctx, d)
	}
	return nil
}

func (p *pacer) posted(channel string) { p.last[channel] = p.now() }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// class is how an attempt ended (docs/design.md, "Alert lifecycle").
type class int

const (
	classOK          class = iota
	classRateLimited       // 429: wait Retry-After, then again
	classTransient         // not acted on: a 5xx or network error before the request was written whole, service_unavailable
	classUnknown           // perhaps acted on: no answer or a 5xx after it was written whole, internal_error, fatal_error, request_timeout
	classRefused           // this message was refused; another might not be
	classNoThread          // the thread to reply to is gone
	classFatal             // no retry can help: a setting to fix, or an answer this version does not know
	classCanceled          // the drain's context ended
)

type attempt struct {
	class      class
	retryAfter time.Duration
	err        error // classFatal: a *PermanentError
	text       string
}

// send tries one message until Slack accepts it or retrying stops making
// sense. It never repeats a request that may have arrived.
func (d *Deliverer) send(ctx context.Context, m Message, thread string, p *pacer, now func() time.Time, st *DrainStats) outcome {
	channel := d.channelKey()
	textOnly := false
	for try := 0; ; try++ {
		if err := p.wait(ctx, channel); err != nil {
			return outcome{status: statusDeferred, errText: "drain interrupted: " + err.Error()}
		}
		ch, ts, err, written := d.post(ctx, m, thread, textOnly)
		p.posted(channel)
		a := d.classify(ctx, err, written)
		retryable := try < d.opts.MaxRetries
		var wait time.Duration
		switch a.class {
		case classOK:
			o := outcome{status: statusSent, channel: cmpOr(ch, channel), ts: ts}
			if d.mode == modeBot {
				o.posted = &posted{blocks: m.Blocks, text: m.Text}
				if textOnly {
					o.posted = &posted{text: truncateEscaped(m.Text, textOnlyMax)}
				}
			}
			return o
		case classRateLimited:
			st.RateLimited++
			wait = a.retryAfter
			if !retryable || wait > d.opts.MaxRetryAfter {
				return outcome{status: statusDeferred, retryAt: now().Add(wait), errText: a.text}
			}
			d.log.Info("slack rate limited; waiting as asked", "retry_after", wait, "attempt", try+1)
		case classTransient:
			if !retryable {
				return outcome{status: statusDeferred, errText: a.text}
			}
			wait = min(d.opts.BackoffBase<<min(try, 20), d.opts.BackoffMax)
			d.log.Info("slack unavailable; retrying", "error", a.text, "wait", wait, "attempt", try+1)
		case classRefused:
			if textOnly {
				return outcome{status: statusSkipped, retryAt: now().Add(time.Hour), errText: a.text}
			}
			// Try the same alerts as plain text, which no block rule can refuse.
			textOnly = true
			continue
		case classNoThread:
			if thread == "" {
				return outcome{status: statusSkipped, retryAt: now().Add(time.Hour), errText: a.text}
			}
			thread = ""
			continue
		case classUnknown:
			return outcome{status: statusUnknown, errText: a.text}
		case classCanceled:
			if written && err != nil {
				return outcome{status: statusUnknown, errText: a.text}
			}
			return outcome{status: statusDeferred, errText: a.text}
		default:
			return outcome{status: statusFatal, err: a.err, errText: a.text}
		}
		st.Retries++
		if err := d.opts.Sleep(ctx, wait); err != nil {
			return outcome{status: statusDeferred, errText: "drain interrupted: " + err.Error()}
		}
	}
}

func (d *Deliverer) channelKey() string {
	if d.mode == modeWebhook {
		return "webhook"
	}
	return d.opts.Channel
}

// textOnlyMax bounds the text of a message sent again as text only.
const textOnlyMax = 3500

// writeReportWait bounds how long post waits, once an answer came, for
// net/http to report how writing the request ended.
const writeReportWait = time.Second

// post makes one request and reports whether it was written out whole, so
// that a failure after that point is known to be of unknown outcome.
// net/http reports a request written once its last bytes are handed to the
// connection's buffer, which errs on the side of "written". An answer can
// come before that report (an edge that answers before reading the body),
// so post waits for the report once an answer came.
func (d *Deliverer) post(ctx context.Context, m Message, thread string, textOnly bool) (channel, ts string, err error, written bool) {
	actx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	var wrote, answered atomic.Bool
	var once sync.Once
	reported := make(chan struct{})
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
			once.Do(func() { close(reported) })
		},
		GotFirstResponseByte: func() { answered.Store(true) },
	})
	text, blocks := m.Text, m.Blocks
	if textOnly {
		text, blocks = truncateEscaped(text, textOnlyMax), nil
	}
	switch d.mode {
	case modeBot:
		opts := []slack.MsgOption{
			slack.MsgOptionText(text, false), // escaped already
			slack.MsgOptionDisableLinkUnfurl(),
			slack.MsgOptionDisableMediaUnfurl(),
		}
		if len(blocks) > 0 {
			opts = append(opts, slack.MsgOptionBlocks(blocks...))
		}
		if thread != "" {
			opts = append(opts, slack.MsgOptionTS(thread))
		}
		channel, ts, err = d.client.PostMessageContext(actx, d.opts.Channel, opts...)
	default:
		no := false
		msg := &slack.WebhookMessage{Text: text, UnfurlLinks: &no, UnfurlMedia: &no}
		if len(blocks) > 0 {
			msg.Blocks = &slack.Blocks{BlockSet: blocks}
		}
		err = slack.PostWebhookCustomHTTPContext(actx, d.opts.WebhookURL, d.http, msg)
	}
	if err != nil && answered.Load() {
		t := time.NewTimer(writeReportWait)
		select {
		case <-reported:
		case <-t.C:
		}
		t.Stop()
	}
	return channel, ts, err, wrote.Load()
}

// classify decides what an attempt's error means for the message.
func (d *Deliverer) classify(ctx context.Context, err error, written bool) attempt {
	if err == nil {
		return attempt{class: classOK}
	}
	text := d.errText(err)
	if ctx.Err() != nil {
		return attempt{class: classCanceled, text: text}
	}
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		return attempt{class: classRateLimited, retryAfter: max(rl.RetryAfter, time.Second), text: text}
	}
	if ne, ok := errors.AsType[*strconv.NumError](err); ok && ne.Func == "ParseInt" {
		// slack-go could not read a 429's Retry-After (an HTTP date, not
		// seconds): still a rate limit, not a lost answer.
		return attempt{class: classRateLimited, retryAfter: time.Second, text: text}
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok {
		return d.classifyStatus(sc.Code, written, text)
	}
	if se, ok := errors.AsType[slack.SlackErrorResponse](err); ok {
		return classifyCode(se.Err, text)
	}
	if written {
		// Timeout, reset or garbage after the whole request went out: Slack
		// may have posted it. Never send it again unmarked.
		return attempt{class: classUnknown, text: text}
	}
	return attempt{class: classTransient, text: text}
}

// classifyStatus sorts an HTTP status other than 200 (docs/design.md,
// "Alert lifecycle"); written says the request was written out whole.
func (d *Deliverer) classifyStatus(code int, written bool, text string) attempt {
	switch {
	case code == http.StatusTooManyRequests:
		return attempt{class: classRateLimited, retryAfter: time.Second, text: text}
	case code >= 500 && written:
		// Slack, or an edge or proxy before it, failed with the whole
		// request in hand: Slack may have posted it. Never again unmarked.
		return attempt{class: classUnknown, text: text}
	case code >= 500:
		// Answered before the request was written out whole: no one
		// acted on a message that never arrived whole.
		return attempt{class: classTransient, text: text}
	}
	reason := fmt.Sprintf("HTTP %d", code)
	if d.mode == modeWebhook {
		switch code {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fatal("webhook "+reason, "the webhook URL is revoked or may not post there; set SLACK_WEBHOOK_URL to a working incoming webhook URL", text)
		case http.StatusNotFound:
			return fatal("webhook "+reason, "the webhook URL is wrong or was removed; set SLACK_WEBHOOK_URL to a working incoming webhook URL", text)
		case http.StatusGone:
			return fatal("webhook "+reason, "the webhook's channel is archived or gone; create a new incoming webhook and set SLACK_WEBHOOK_URL to it", text)
		}
		return attempt{class: classRefused, text: text}
	}
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusGone, http.StatusMethodNotAllowed:
		return fatal(reason, "the Slack API refused the request outright; check SLACK_API_URL (Slack's is https://slack.com/api/)", text)
	}
	return attempt{class: classRefused, text: text}
}

func fatal(reason, fix, text string) attempt {
	return attempt{class: classFatal, err: &PermanentError{Reason: reason, Fix: fix}, text: "slack: " + reason + ": " + fix}
}

// workspaceFix is the fix of the codes that say a Slack admin's settings
// keep the bot from posting.
const workspaceFix = "the workspace does not let the bot post in SLACK_CHANNEL; ask a Slack admin, or set SLACK_CHANNEL to a channel where it may post"

// permanentFixes are the error codes of Slack's known to need someone to
// change a setting, each with what to do (docs/design.md, "Alert
// lifecycle"). A code in no list of classifyCode is permanent too.
var permanentFixes = map[string]string{
	"invalid_auth":                             "the bot token is wrong or revoked; set SLACK_BOT_TOKEN to a valid xoxb- token",
	"not_authed":                               "Slack received no bot token; set SLACK_BOT_TOKEN to a valid xoxb- token",
	"token_revoked":                            "the bot token was revoked; reinstall the Slack app and set SLACK_BOT_TOKEN to its new xoxb- token",
	"token_expired":                            "the bot token expired; set SLACK_BOT_TOKEN to a fresh xoxb- token",
	"account_inactive":                         "the bot's Slack account or workspace is deactivated; reinstall the app and set SLACK_BOT_TOKEN to its new xoxb- token",
	"not_allowed_token_type":                   "SLACK_BOT_TOKEN is not a bot token (a user, app-level or legacy one); set it to the app's xoxb- bot token",
	"missing_scope":                            "the bot token lacks the chat:write scope; add it to the Slack app, reinstall it and update SLACK_BOT_TOKEN",
	"accesslimited":                            "the Slack app only accepts SLACK_BOT_TOKEN from allowed IP addresses; add this host's address to the app's allowed ranges, or run from an allowed host",
	"channel_not_found":                        "SLACK_CHANNEL names no channel the bot can see; set it to the channel's id (C…) and invite the bot there",
	"not_in_channel":                           "the bot is not a member of SLACK_CHANNEL; invite it there (/invite @the-bot)",
	"is_archived":                              "SLACK_CHANNEL is archived; unarchive it or set SLACK_CHANNEL to another channel",
	"posting_to_general_channel_denied":        "only admins may post in the workspace's #general; set SLACK_CHANNEL to another channel, or ask a Slack admin to let the bot post there",
	"messages_tab_disabled":                    "SLACK_CHANNEL is a direct message to the bot, whose Messages tab is off; set SLACK_CHANNEL to a channel's id (C…), or turn the Messages tab on in the app's App Home settings",
	"team_not_found":                           "the bot token's workspace is gone; set SLACK_BOT_TOKEN to a token of a live workspace",
	"method_deprecated":                        "Slack has retired the method this version of reconcile posts with; upgrade reconcile, and check that SLACK_API_URL is Slack's https://slack.com/api/",
	"deprecated_endpoint":                      "Slack has retired the endpoint this version of reconcile posts to; upgrade reconcile, and check that SLACK_API_URL is Slack's https://slack.com/api/",
	"unknown_method":                           "SLACK_API_URL does not serve chat.postMessage; set it to Slack's https://slack.com/api/",
	"restricted_action":                        workspaceFix,
	"restricted_action_read_only_channel":      workspaceFix,
	"restricted_action_thread_only_channel":    workspaceFix,
	"restricted_action_non_threadable_channel": workspaceFix,
	"ekm_access_denied":                        workspaceFix,
	"access_denied":                            workspaceFix,
	"no_permission":                            workspaceFix,
	"team_access_not_granted":                  workspaceFix,
	"org_login_required":                       workspaceFix,
	"enterprise_is_restricted":                 workspaceFix,
	"two_factor_setup_required":                workspaceFix,
}

// slackCode is the shape of Slack's error codes; an answer of another
// shape is not repeated in an error or a metric's label.
var slackCode = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// classifyCode sorts the error codes of Slack's {"ok":false} answers
// (docs/design.md, "Alert lifecycle"). Slack read the request to answer so.
func classifyCode(code, text string) attempt {
	switch code {
	case "ratelimited", "rate_limited":
		return attempt{class: classRateLimited, retryAfter: time.Second, text: text}
	case "internal_error", "fatal_error", "request_timeout":
		// Slack says of internal_error and fatal_error that some of the
		// call may have succeeded: the message may be in the channel.
		// request_timeout (the post's data arrived missing or truncated,
		// Slack says) is taken as unknown too: a repeat marked as possible
		// costs a word, an unmarked one a second alert finance may act on.
		return attempt{class: classUnknown, text: text}
	case "service_unavailable", "team_added_to_org":
		// Slack says the service is temporarily unavailable (or the
		// workspace is migrating): the call was not processed, so it is
		// tried again like a 5xx that never arrived.
		return attempt{class: classTransient, text: text}
	case "invalid_blocks", "invalid_blocks_format", "msg_too_long", "msg_blocks_too_long", "too_many_attachments",
		"no_text", "invalid_attachments", "invalid_arguments", "invalid_form_data", "markdown_text_conflict",
		"invalid_charset", "invalid_post_type", "missing_post_type", "invalid_arg_name", "invalid_array_arg":
		return attempt{class: classRefused, text: text}
	case "thread_not_found", "invalid_thread_ts", "cannot_reply_to_message":
		return attempt{class: classNoThread, text: text}
	}
	if fix, ok := permanentFixes[code]; ok {
		return fatal(code, fix, text)
	}
	// A code this version does not know: retrying it blindly could repeat
	// forever, or repeat a message unmarked. Stop and tell someone.
	if !slackCode.MatchString(code) {
		code = "unrecognized_answer"
	}
	return fatal(code, "Slack answered "+code+", which this version of reconcile does not know; delivery stops until someone checks "+
		"what Slack means by it (the Slack app, SLACK_BOT_TOKEN, SLACK_CHANNEL) and fixes it, or upgrades reconcile", text)
}

// where names the setting requests go to and its host, never a webhook's
// path (its secret) nor a token.
func (d *Deliverer) where() string {
	if d.mode == modeWebhook {
		return "SLACK_WEBHOOK_URL host " + hostOf(d.opts.WebhookURL) + ", path " + redact.Marker
	}
	return "SLACK_API_URL host " + hostOf(d.opts.APIURL)
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	return u.Host
}

// errText is err as a line safe to log and store: no token, no webhook
// path, no secret of any kind.
func (d *Deliverer) errText(err error) string {
	s := err.Error()
	if ue, ok := errors.AsType[*url.Error](err); ok {
		// The URL of a webhook is its secret: the setting and its host say
		// where Slack was looked for (docs/design.md, "Errors").
		s = "post to slack (" + d.where() + "): " + ue.Err.Error()
	} else if !strings.HasPrefix(s, "slack") {
		s = "slack: " + s
	}
	for _, sec := range d.secrets {
		if sec != "" && sec != "/" {
			s = strings.ReplaceAll(s, sec, redact.Marker)
		}
	}
	return redact.String(s)
}
