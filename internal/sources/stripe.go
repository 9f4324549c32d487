// Package sources holds the reconciler's read-only adapters: the provider's
// records (Stripe, through stripe-go) and the application's obligations
// (PostgreSQL, through pgx), translated into the root package's types. No
// foreign type leaves this package.
package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"reconcile"

	"reconcile/internal/config"
	"reconcile/internal/redact"

	stripe "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"
)

// EventRetention is how long Stripe keeps events: key evidence (which
// idempotency key created which object) older than this is gone from the
// provider.
const EventRetention = 30 * 24 * time.Hour

// The lists the reader reads, by their names in Stripe's paths; errors and
// progress name them so.
const (
	ListCharges        = "charges"
	ListRefunds        = "refunds"
	ListPaymentIntents = "payment_intents"
	ListEvents         = "events"
	ListAccounts       = "accounts"
)

// StripeOptions configure a Stripe reader. StripeOptionsFrom takes the
// configurable ones (key, base URL, rate, concurrency, retries, request
// timeout) from the configuration, which alone defines their defaults;
// the reader's own tuning takes the default given beside each field when
// zero.
type StripeOptions struct {
	// APIKey is the secret or restricted key (read access to charges,
	// refunds, payment intents and events is enough). Required. It never
	// appears in an error or a log line.
	APIKey string
	// BaseURL is STRIPE_API_BASE: https://api.stripe.com, stripe-mock or
	// the demo's and tests' server. Required.
	BaseURL string

	// Rate is the most requests a second sent, all lists together
	// (stripe.rate; required). Stripe's test-mode read limit is 25, live
	// mode allows 100.
	// Each 429 halves the pace, down to Rate/16, and answered requests
	// raise it back (see pace): the limit is shared with the account's
	// other clients. math.Inf(1) disables pacing. Burst is how many may go
	// at once after a pause (default 1).
	Rate  float64
	Burst int
	// Concurrency is how many time slices are read at once, and how many
	// retrievals by id run at once (stripe.concurrency; 1 to 64), so that
	// latency does not cap throughput under the rate.
	Concurrency int
	// SliceMin is the shortest time slice a window is split into
	// (default 1h): short windows are read in fewer slices.
	SliceMin time.Duration
	// EventGrace extends the events read past the window's end (default
	// 1m), because an object's creation event may be stamped a second
	// after the object.
	EventGrace time.Duration

	// MaxRetries is how many times one request is retried after a 429, a
	// 5xx or a network error (stripe.max_retries; 0: none). RetryBase is
	// the first backoff
	// (default 500ms), doubled at each retry up to RetryMax (default 20s),
	// half of it jittered. Seed seeds the jitter (default 1), so that runs
	// and tests are reproducible.
	MaxRetries int
	RetryBase  time.Duration
	RetryMax   time.Duration
	Seed       uint64
	// RequestTimeout bounds one attempt of one request
	// (stripe.request_timeout; required).
	RequestTimeout time.Duration

	// HTTPClient carries the requests (default: a client with connections
	// pooled for Concurrency and no overall timeout, RequestTimeout bounds
	// each attempt).
	HTTPClient *http.Client
	// Logger receives the reader's retries (debug) and anomalies (warn),
	// and stripe-go's own messages at debug level, without response
	// bodies (they hold customer data) and with the key redacted; default:
	// discarded.
	Logger *slog.Logger
	// Progress, when set, is called after every page read (never
	// concurrently, whichever views of the key read at once), for a
	// progress line on a terminal.
	Progress func(ProgressEvent)
}

// ProgressEvent reports one page read.
type ProgressEvent struct {
	List    string // the list the page belongs to
	Pages   int    // pages read so far, all lists together
	Items   int    // objects and events read so far
	Retries int    // requests retried so far
}

// Stripe reads charges, refunds, payment intents and events from Stripe's
// API, read-only, paced under a request rate, retrying what can be retried,
// and failing rather than returning a partial listing.
//
// A Stripe reads the platform's own account, the key's; ForAccount gives
// a view of it that reads one connected account instead, with everything
// that belongs to the key shared (docs/design.md, "Reading the provider").
type Stripe struct {
	api *client.API
	// backend is the API backend of api, which list pages are read
	// through (fetch, stripe_page.go).
	backend *stripe.BackendImplementation
	opts    StripeOptions
	// pace is the key's: Stripe limits requests per key, whatever account
	// they name, so every view of the key goes through this one.
	pace *pace
	log  *slog.Logger
	// keyed is what the views of one key share beside the client and the
	// pace.
	keyed *keyed

	// account is the connected account this view reads (acct_…), sent as
	// the Stripe-Account header of its every request; empty for the
	// platform's own. label names it in messages: the id, quoted when it
	// is not an account id, and badAccount then says why, which every
	// request of the view fails with, unsent.
	account    string
	label      string
	badAccount string
	// platform is the reader of the platform's account that the view was
	// made from (itself, for the platform's).
	platform *Stripe

	// host is STRIPE_API_BASE's host, which errors name (never its path
	// or query, nor the key).
	host string

	// sleep waits between retries; tests keep it real, with millisecond
	// backoffs.
	sleep func(ctx context.Context, d time.Duration) error
}

// keyed is what every view of one key shares (see ForAccount).
type keyed struct {
	rngMu sync.Mutex
	rng   *rand.Rand

	// total counts every attempt the key's readers ever sent, whatever
	// account and operation sent it and however it ended (RequestCounts).
	total counters
	// progressMu serialises the Progress calls of all the views.
	progressMu sync.Mutex
}

// NewStripe validates opts, applies the defaults and returns a reader of
// the platform's account. It sends no request.
func NewStripe(opts StripeOptions) (*Stripe, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("stripe options: %w", err)
	}
	s := &Stripe{
		opts:  o,
		pace:  newPace(o.Rate, o.Burst),
		log:   o.Logger,
		keyed: &keyed{rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5851f42d4c957f2d))},
		sleep: sleepContext,
	}
	s.platform = s
	if u, err := url.Parse(o.BaseURL); err == nil {
		s.host = u.Host
	}
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:        stripe.String(o.BaseURL),
		HTTPClient: o.HTTPClient,
		// The reader retries itself, under its own pacing: stripe-go's
		// retries would hide requests from the limiter and do not cover
		// rate limits.
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripeLogger{log: o.Logger, key: o.APIKey},
		EnableTelemetry:   stripe.Bool(false),
	})
	s.api = client.New(o.APIKey, backends)
	s.backend = backends.API.(*stripe.BackendImplementation)
	return s, nil
}

// StripeOptionsFrom takes a reader's options from the configuration: the
// key and base URL from the environment, the pacing, retries and timeout
// from stripe.*.
func StripeOptionsFrom(c config.Config) StripeOptions {
	return StripeOptions{
		APIKey:         c.Env.StripeAPIKey.Reveal(),
		BaseURL:        c.Env.StripeAPIBase,
		Rate:           c.Stripe.Rate,
		Concurrency:    c.Stripe.Concurrency,
		MaxRetries:     c.Stripe.MaxRetries,
		RequestTimeout: c.Stripe.RequestTimeout,
	}
}

func (o StripeOptions) withDefaults() (StripeOptions, error) {
	if strings.TrimSpace(o.APIKey) == "" {
		return o, errors.New("APIKey is required (STRIPE_API_KEY)")
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return o, fmt.Errorf("BaseURL (STRIPE_API_BASE) %q: want an http or https URL such as https://api.stripe.com", o.BaseURL)
	}
	o.BaseURL = strings.TrimSuffix(o.BaseURL, "/")
	checks := []struct {
		name string
		bad  bool
		want string
	}{
		{"Rate", !(o.Rate > 0), "a positive number of requests a second"},
		{"Burst", o.Burst < 0, "at least 1"},
		{"Concurrency", o.Concurrency < 1 || o.Concurrency > 64, "between 1 and 64"},
		{"SliceMin", o.SliceMin < 0, "a positive duration"},
		{"EventGrace", o.EventGrace < 0, "a positive duration"},
		{"MaxRetries", o.MaxRetries < 0 || o.MaxRetries > 30, "between 0 and 30"},
		{"RetryBase", o.RetryBase < 0, "a positive duration"},
		{"RetryMax", o.RetryMax < 0 || (o.RetryMax > 0 && o.RetryMax < o.RetryBase), "a positive duration, at least RetryBase"},
		{"RequestTimeout", o.RequestTimeout <= 0, "a positive duration"},
	}
	for _, c := range checks {
		if c.bad {
			return o, fmt.Errorf("%s: want %s", c.name, c.want)
		}
	}
	o.Burst = orDefault(o.Burst, 1)
	o.SliceMin = orDefault(o.SliceMin, time.Hour)
	o.EventGrace = orDefault(o.EventGrace, time.Minute)
	o.RetryBase = orDefault(o.RetryBase, 500*time.Millisecond)
	o.RetryMax = orDefault(o.RetryMax, max(20*time.Second, o.RetryBase))
	o.Seed = orDefault(o.Seed, 1)
	if o.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = max(8, 2*o.Concurrency)
		o.HTTPClient = &http.Client{Transport: tr}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RequestError is a Stripe request that failed for good: after its
// retries, or at once when no retry can help (a bad key, a bad parameter,
// Stripe-Should-Retry: false). Its text never holds the API key nor any
// part of a response body.
type RequestError struct {
	// Status is the HTTP status; 0 when no response arrived.
	Status int
	// Type and Code are Stripe's error type and code (rate_limit,
	// resource_missing, …), when it answered one.
	Type, Code string
	// Message says what went wrong, the key and response bodies removed.
	Message   string
	RequestID string
	Attempts  int
	// Account is the connected account the request named (acct_…); empty
	// for the platform's own. The errors that wrap a view's RequestError
	// (ListError, a Lookup's, Probe's) name it.
	Account string
	// Host is STRIPE_API_BASE's host and Elapsed how long the attempts
	// took, from the first to the last answer or error: an error that
	// had no answer says where it looked and for how long
	// (docs/design.md, "Errors").
	Host    string
	Elapsed time.Duration

	retry     bool
	malformed bool
	answered  bool  // an earlier attempt of the same call got an answer
	cause     error // a context error, kept for errors.Is
}

func (e *RequestError) Error() string {
	var b strings.Builder
	if e.Unanswered() {
		// One line that says where Stripe was looked for and what was
		// tried (docs/design.md, "Errors").
		fmt.Fprintf(&b, "no answer from Stripe (STRIPE_API_BASE host %s): %s", e.Host, attempts(e.Attempts))
		if d := e.Elapsed.Round(100 * time.Millisecond); d > 0 {
			fmt.Fprintf(&b, " over %s", d)
		}
		b.WriteString(", the last: " + e.Message)
		return b.String()
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, "stripe answered %d", e.Status)
		if e.Type != "" {
			b.WriteString(" " + e.Type)
		}
		if e.Code != "" {
			b.WriteString("/" + e.Code)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	return b.String()
}

// Unanswered reports whether no answer came from Stripe at all: the
// connection failed or timed out on every attempt (not a context that
// ended, nor an answer the reader could not believe, nor a last attempt
// unanswered after earlier ones were answered).
func (e *RequestError) Unanswered() bool {
	return e.Status == 0 && e.Host != "" && e.Attempts > 0 && !e.malformed && !e.answered && e.cause == nil
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// RequestCounts are the attempts a reader sent: every HTTP request,
// retries included, of every list, sync and retrieval, those that failed
// for good too. An attempt abandoned in flight, when a failing slice ends
// its listing's others, counts as sent.
type RequestCounts struct {
	Requests, Retries, RateLimited int
}

// Sub is what was sent since before was taken.
func (c RequestCounts) Sub(before RequestCounts) RequestCounts {
	return RequestCounts{c.Requests - before.Requests, c.Retries - before.Retries, c.RateLimited - before.RateLimited}
}

// RequestCounts returns every attempt the reader sent since it was made,
// so that a pass that failed still says what it tried (the counts of a
// listing are lost with the listing a failure never returns). They are
// the key's: every view of it (ForAccount) counts, and returns, the
// attempts of all.
func (s *Stripe) RequestCounts() RequestCounts {
	t := &s.keyed.total
	return RequestCounts{int(t.requests.Load()), int(t.retries.Load()), int(t.limited.Load())}
}

// Unwrap gives errors.Is a context error that ended the request.
func (e *RequestError) Unwrap() error { return e.cause }

// NotFound reports whether Stripe said the object does not exist, which
// is evidence of absence (a timeout or a 5xx is not).
func (e *RequestError) NotFound() bool {
	return e.Status == http.StatusNotFound && e.Code == string(stripe.ErrorCodeResourceMissing)
}

// Malformed reports whether Stripe answered something the reader could not
// take for what it asked: a body that is not JSON of the right shape, or a
// page or an object without a member the reader relies on (see
// stripe_strict.go). Such an answer is retried, as a 5xx is.
func (e *RequestError) Malformed() bool { return e.malformed }

// translate turns what stripe-go returned into a RequestError, deciding
// whether a retry can help.
func (s *Stripe) translate(err error) *RequestError {
	var re *RequestError
	if errors.As(err, &re) {
		return re // the reader's own check of a response (malformed)
	}
	var se *stripe.Error
	if errors.As(err, &se) {
		re := &RequestError{
			Status: se.HTTPStatusCode, Type: string(se.Type), Code: string(se.Code),
			Message: s.scrub(se.Msg), RequestID: se.RequestID,
			retry: se.HTTPStatusCode == http.StatusTooManyRequests || se.HTTPStatusCode >= 500,
		}
		if se.Code == codeAccountInvalid {
			// Stripe's own words quote the key, masked; these say what
			// an operator must look at. No retry reaches the account.
			re.Message = "the key cannot reach account " + s.accountLabel() +
				" (not connected to the platform, or its access was revoked)"
			re.retry = false
			return re
		}
		if se.LastResponse != nil {
			switch se.LastResponse.Header.Get("Stripe-Should-Retry") {
			case "false":
				re.retry = false
				re.Message += " (Stripe-Should-Retry: false)"
			case "true":
				re.retry = true
			}
		}
		if re.Message == "" {
			re.Message = http.StatusText(re.Status)
		}
		return re
	}
	// No Stripe error: the request or the response broke on the way (a
	// reset, a timeout, a body cut short), or the body was not JSON of the
	// right shape. Retrying is the cure.
	text := err.Error()
	if ue, ok := errors.AsType[*url.Error](err); ok {
		// The request's URL says nothing STRIPE_API_BASE's host does not
		// (Error names it) and its query runs long enough to push the
		// cause out of the message: keep the cause.
		text = ue.Err.Error()
	}
	msg := s.scrub(text)
	return &RequestError{Message: msg, retry: true, malformed: strings.HasPrefix(msg, undecodable)}
}

// codeAccountInvalid is Stripe's code for a Stripe-Account header naming an
// account the key cannot reach: not connected, or no longer.
const codeAccountInvalid = "account_invalid"

// undecodable begins the message of a body stripe-go could not decode.
const undecodable = "malformed response: undecodable JSON"

// scrub removes the API key and response bodies from a message bound for
// an error or a log.
func (s *Stripe) scrub(msg string) string {
	return scrubSecret(msg, s.opts.APIKey)
}

func scrubSecret(msg, key string) string {
	if key != "" {
		msg = strings.ReplaceAll(msg, key, redact.Marker)
	}
	// stripe-go quotes up to 500 bytes of an undecodable body, which may
	// hold metadata (card numbers, e-mails): keep only the decoder's word.
	if strings.HasPrefix(msg, "Couldn't deserialize JSON") {
		why := ""
		if i := strings.LastIndex(msg, "): "); i >= 0 {
			why = ": " + msg[i+3:]
		}
		msg = undecodable + why
	}
	// stripe-go hands over a whole error response's body as the message
	// when it holds no Stripe error (a proxy's page, a JSON without
	// "error"): it is another party's data, so none of it is kept.
	if t := strings.TrimSpace(msg); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") || strings.HasPrefix(t, "<") {
		msg = "an answer that is not a Stripe error (body not shown)"
	}
	const most = 400
	if len(msg) > most {
		msg = msg[:most] + "…"
	}
	return msg
}

// counters are one operation's request statistics, shared by its workers.
type counters struct {
	requests, retries, limited, pages, items, outside atomic.Int64
}

// call sends one request through the limiter, retrying 429s, 5xx and
// network errors with bounded exponential backoff and jitter. do receives
// a context bounded by RequestTimeout.
func (s *Stripe) call(ctx context.Context, c *counters, do func(ctx context.Context) error) error {
	return s.callRetrying(ctx, c, s.opts.MaxRetries, do)
}

// callRetrying is call with retries retries at most.
func (s *Stripe) callRetrying(ctx context.Context, c *counters, retries int, do func(ctx context.Context) error) error {
	if s.badAccount != "" {
		return &RequestError{Message: s.badAccount, Account: s.account}
	}
	var first time.Time
	answered := false // some attempt got an answer, of any status
	for attempt := 1; ; attempt++ {
		if err := s.pace.lim.Wait(ctx); err != nil {
			return &RequestError{Message: "waiting for the rate limiter: " + err.Error(), Attempts: attempt - 1, Account: s.account, cause: ctxErr(ctx, err)}
		}
		c.requests.Add(1)
		s.keyed.total.requests.Add(1)
		actx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
		sent := time.Now()
		if attempt == 1 {
			first = sent
		}
		err := do(actx)
		cancel()
		if err == nil {
			s.pace.answered()
			return nil
		}
		if ctx.Err() != nil {
			return &RequestError{Message: "canceled: " + ctx.Err().Error(), Attempts: attempt, Account: s.account, cause: ctx.Err()}
		}
		re := s.translate(err)
		re.Attempts, re.Host, re.Elapsed, re.answered = attempt, s.host, time.Since(first), answered
		re.Account = s.account
		answered = answered || re.Status != 0 || re.malformed
		if re.Status == http.StatusTooManyRequests {
			c.limited.Add(1)
			s.keyed.total.limited.Add(1)
			if now, changed := s.pace.limited(sent, time.Now()); changed {
				s.log.InfoContext(ctx, "stripe rate-limited the reader; slowing down", slog.Float64("requests_per_second", now))
			}
		}
		if !re.retry || attempt > retries {
			return re
		}
		c.retries.Add(1)
		s.keyed.total.retries.Add(1)
		wait := s.backoff(attempt)
		if re.malformed {
			// Retried like a 5xx, but a sign of a fault at Stripe or on
			// the way that an operator should see even when a retry
			// mends it. The message names what is missing, never a value.
			s.log.WarnContext(ctx, "stripe answered a malformed response; retrying", slog.Int("attempt", attempt),
				slog.String("problem", re.Message), slog.String("request_id", re.RequestID))
		}
		s.log.DebugContext(ctx, "stripe request retried", slog.Int("attempt", attempt),
			slog.Int("status", re.Status), slog.String("code", re.Code), slog.Duration("backoff", wait))
		if err := s.sleep(ctx, wait); err != nil {
			return &RequestError{Message: "canceled: " + err.Error(), Attempts: attempt, Account: s.account, cause: err}
		}
	}
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// backoff is the wait before retry number attempt (1-based): RetryBase
// doubled per attempt, capped at RetryMax, its upper half jittered so that
// workers that failed together do not retry together.
func (s *Stripe) backoff(attempt int) time.Duration {
	d := s.opts.RetryMax
	if shift := attempt - 1; shift < 30 && s.opts.RetryBase<<shift < d {
		d = s.opts.RetryBase << shift
	}
	half := d / 2
	s.keyed.rngMu.Lock()
	j := time.Duration(s.keyed.rng.Int64N(int64(half) + 1))
	s.keyed.rngMu.Unlock()
	return d - half + j
}

// stripeLogger routes stripe-go's messages to slog at debug level. It
// drops stripe-go's debug messages (whole response bodies, which hold
// customer data) and redacts the key from the rest.
type stripeLogger struct {
	log *slog.Logger
	key string
}

func (l *stripeLogger) Debugf(string, ...any) {}

func (l *stripeLogger) Infof(format string, v ...any) { l.emit(format, v) }

func (l *stripeLogger) Warnf(format string, v ...any) { l.emit(format, v) }

func (l *stripeLogger) Errorf(format string, v ...any) { l.emit(format, v) }

func (l *stripeLogger) emit(format string, v []any) {
	if !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l.log.Debug(scrubSecret(fmt.Sprintf(format, v...), l.key), slog.String("component", "stripe-go"))
}

// Probe reads one page of one charge, once, with no retry: whether
// STRIPE_API_BASE answers and takes the key, for `config check --connect`.
// It returns how many charges the page held (0 or 1); its error is a
// *RequestError naming the host and what was tried, wrapped in one that
// names the account for a view of a connected account.
func (s *Stripe) Probe(ctx context.Context) (int, error) {
	var c counters
	n := 0
	err := s.callRetrying(ctx, &c, 0, func(ctx context.Context) error {
		lp := stripe.ListParams{Context: ctx, Limit: stripe.Int64(1), Single: true, StripeAccount: s.header()}
		it := s.api.Charges.List(&stripe.ChargeListParams{ListParams: lp})
		if err := checked(it.Err(), it.ChargeList().LastResponse, chargeShape); err != nil {
			return err
		}
		for it.Next() {
			n++
		}
		return nil
	})
	if err != nil && s.label != "" {
		return n, fmt.Errorf("probe account %s: %w", s.accountLabel(), err)
	}
	return n, err
}

// ForAccount returns a reader of connected account id (acct_…), or of
// the platform's own account for "" (the reader s was made from). The
// view shares everything that belongs to the key with s: the client,
// the pace (Stripe's rate limits are per key, so a 429 to one account's
// reader slows every account's), the retries' jitter and the request
// counts (RequestCounts of any view are the key's). Every request it
// sends names the account in the Stripe-Account header; the objects and
// key evidence it returns carry Account = id, and its errors name the
// account. An id that is not an account id (see reconcile.ValidAccountID) gives a
// view whose every call fails, sending nothing (docs/design.md, "Reading
// the provider").
func (s *Stripe) ForAccount(id string) *Stripe {
	if id == "" {
		return s.platform
	}
	p := s.platform
	v := &Stripe{
		api: p.api, backend: p.backend, opts: p.opts, pace: p.pace, keyed: p.keyed, platform: p, host: p.host, sleep: p.sleep,
		account: id, label: id, log: p.log.With(slog.String("account", id)),
	}
	if !reconcile.ValidAccountID(id) {
		// Untrusted text stays text: quoted wherever it is named, and
		// never sent.
		v.account, v.label, v.log = "", strconv.Quote(id), p.log
		v.badAccount = v.label + " is not a Stripe account id (want acct_ followed by letters and digits)"
	}
	return v
}

// header is the Stripe-Account header of the view's requests: none for the
// platform's own account.
func (s *Stripe) header() *string {
	if s.account == "" {
		return nil
	}
	return stripe.String(s.account)
}

// accountLabel names the view's account in messages.
func (s *Stripe) accountLabel() string {
	if s.label == "" {
		return "platform"
	}
	return s.label
}

// ofAccount is the phrase naming the view's account in a message: empty
// for the platform's own, so that its messages read as they always did.
func (s *Stripe) ofAccount() string {
	if s.label == "" {
		return ""
	}
	return " of account " + s.label
}
