// Package config holds the reconciler's configuration: built-in defaults,
// one YAML file decoded strictly on top of them, and the environment for
// secrets and endpoints. It is validated once, with errors that name the
// field as it is spelled in the file.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"

	"reconcile"
)

// Config is the effective configuration of one process.
type Config struct {
	// Lookback is the window of a run without --since/--from/--to.
	Lookback time.Duration `yaml:"lookback"`
	// MaxLookback bounds how far back a run reads the provider's records
	// for the obligations it decides on, whatever its window.
	MaxLookback time.Duration `yaml:"max_lookback"`
	// Schedule is the cron spec of `reconcile schedule` (UTC unless it
	// starts with CRON_TZ=).
	Schedule    string                    `yaml:"schedule"`
	Stripe      StripeConfig              `yaml:"stripe"`
	Matcher     MatcherConfig             `yaml:"matcher"`
	Obligations reconcile.ObligationTable `yaml:"obligations"`
	Alerts      AlertsConfig              `yaml:"alerts"`
	Store       StoreConfig               `yaml:"store"`
	Metrics     MetricsConfig             `yaml:"metrics"`
	Serve       ServeConfig               `yaml:"serve"`
	Workers     WorkersConfig             `yaml:"workers"`

	// Env holds the secrets and endpoints from the environment; never in
	// the file.
	Env Env `yaml:"-"`
}

// StripeConfig tunes the provider reader.
type StripeConfig struct {
	Rate           float64       `yaml:"rate"`            // requests per second
	Concurrency    int           `yaml:"concurrency"`     // time slices read at once
	MaxRetries     int           `yaml:"max_retries"`     // per request, for 429, 5xx and network errors
	RequestTimeout time.Duration `yaml:"request_timeout"` // per HTTP request
	// Accounts are the Stripe connected accounts read besides the
	// platform's own (the key's), by id, or the single word all: every
	// account /v1/accounts lists, listed again each run. Empty: the
	// platform's own only (docs/design.md, "Accounts").
	Accounts AccountList `yaml:"accounts"`
}

// AccountList is stripe.accounts: connected account ids, or AllAccounts
// alone.
type AccountList []string

// AllAccounts is the stripe.accounts word for every connected account.
const AllAccounts = "all"

// All reports whether the list is the word all.
func (l AccountList) All() bool { return len(l) == 1 && l[0] == AllAccounts }

func (l AccountList) validate() error {
	seen := map[string]bool{}
	for i, id := range l {
		switch {
		case id == AllAccounts && len(l) > 1:
			return fmt.Errorf("stripe.accounts: %q stands alone, for every connected account; list ids or say all", AllAccounts)
		case id == AllAccounts:
		case !reconcile.ValidAccountID(id):
			return fmt.Errorf("stripe.accounts[%d]: %q is not a connected account id (acct_ and letters or digits)", i, id)
		case seen[id]:
			return fmt.Errorf("stripe.accounts[%d]: %q is listed twice", i, id)
		}
		seen[id] = true
	}
	return nil
}

// MatcherConfig tunes linking and classification.
type MatcherConfig struct {
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	PendingGrace    time.Duration `yaml:"pending_grace"`
	ClockSkew       time.Duration `yaml:"clock_skew"`
	MetadataKeys    MetadataKeys  `yaml:"metadata_keys"`
}

// MetadataKeys are the provider metadata keys that name an obligation.
type MetadataKeys struct {
	ObligationID   string `yaml:"obligation_id"`
	IdempotencyKey string `yaml:"idempotency_key"`
}

// AlertsConfig tunes Slack delivery.
type AlertsConfig struct {
	RepeatInterval     time.Duration `yaml:"repeat_interval"`
	PerChannelInterval time.Duration `yaml:"per_channel_interval"`
	MaxRetries         int           `yaml:"max_retries"`
	Timeout            time.Duration `yaml:"timeout"`
	MaxMessages        int           `yaml:"max_messages"`
}

// StoreConfig tunes the reconciler's own tables.
type StoreConfig struct {
	ApplyAttempts int `yaml:"apply_attempts"`
}

// MetricsConfig configures the optional /healthz and /metrics endpoint of
// `reconcile schedule`, and where `reconcile run` leaves its metrics
// (docs/design.md, "Metrics of batch runs").
type MetricsConfig struct {
	Listen string `yaml:"listen"` // e.g. 127.0.0.1:9090; empty: off
	// Pushgateway is the URL of a Prometheus Pushgateway `run` pushes to
	// (http(s)://host:9091, without /metrics/jobs/…); empty: no push.
	Pushgateway string `yaml:"pushgateway"`
	// Instance is the grouping key's instance label of the push; empty:
	// the database's host, port and name from DATABASE_URL.
	Instance string `yaml:"instance"`
	// Textfile is the path of a node_exporter textfile `run` writes
	// (ending in .prom, in an existing directory); empty: none.
	Textfile string `yaml:"textfile"`
}

// WorkersConfig runs passes as River jobs on workers (`reconcile worker`)
// instead of in the process that asks for them (docs/design.md, "Passes
// as jobs").
type WorkersConfig struct {
	// Enabled makes `reconcile schedule` and `run --enqueue` enqueue a
	// pass for the workers rather than run it in-process.
	Enabled bool `yaml:"enabled"`
	// Slice is the stretch of creation times one fetch job reads of one
	// account.
	Slice time.Duration `yaml:"slice"`
	// Fetchers and Appliers are how many fetch and match-and-apply jobs
	// one worker works at once.
	Fetchers int `yaml:"fetchers"`
	Appliers int `yaml:"appliers"`
	// Shards splits each account's match and apply into that many jobs,
	// each holding the obligations whose id hashes to it and what they
	// rest on (docs/design.md, "Shards"): for an account too large for
	// one job's memory. 1: one job an account.
	Shards int `yaml:"shards"`
	// JobTimeout bounds one job; RescueAfter is how long a job may stay
	// running before River hands it to another worker as a dead one's
	// (more than JobTimeout).
	JobTimeout  time.Duration `yaml:"job_timeout"`
	RescueAfter time.Duration `yaml:"rescue_after"`
}

func (w WorkersConfig) validate() error {
	if w.Slice < time.Minute {
		return fmt.Errorf("workers.slice: must be at least 1m (got %s)", w.Slice)
	}
	if w.JobTimeout <= 0 {
		return fmt.Errorf("workers.job_timeout: must be positive (got %s)", w.JobTimeout)
	}
	if w.RescueAfter <= w.JobTimeout {
		return fmt.Errorf("workers.rescue_after: must be longer than workers.job_timeout (%s), got %s", w.JobTimeout, w.RescueAfter)
	}
	return nil
}

// ServeConfig configures `reconcile serve`, finance's findings page
// (docs/design.md, "The findings page").
type ServeConfig struct {
	// Listen is the page's address; a non-loopback one needs an auth.
	Listen string `yaml:"listen"`
	// Auth is none, proxy or basic.
	Auth string `yaml:"auth"`
	// ProxyHeader names the signed-in user (auth proxy).
	ProxyHeader string `yaml:"proxy_header"`
	// TrustedProxies are the addresses or CIDRs whose requests auth proxy
	// believes.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// MaxRunAge is how long after the last completed run /healthz still
	// answers healthy: a nightly run missed makes it fail.
	MaxRunAge time.Duration `yaml:"max_run_age"`
	// UsersFile names the users and their bcrypt hashes (auth basic):
	// basic_auth_users: {alice: $2y$10$...}.
	UsersFile string `yaml:"users_file"`
	// TLSCertFile and TLSKeyFile, both or neither, make serve speak HTTPS.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// PublicURL is where finance reaches the page (https://reconcile.example.com);
	// Slack messages link to a finding's page under it. Empty: no links.
	PublicURL string `yaml:"public_url"`
}

// Env is what comes from the environment (README.md, "Configuration").
type Env struct {
	DatabaseURL     Secret
	StripeAPIKey    Secret
	StripeAPIBase   string
	SlackBotToken   Secret
	SlackChannel    string
	SlackWebhookURL Secret
	SlackAPIURL     string
	// SlackSigningSecret verifies Slack's calls to serve's
	// /slack/interactions; with a bot token it turns the messages'
	// Acknowledge buttons on (docs/design.md, "Buttons in Slack").
	SlackSigningSecret Secret
}

// Default is the built-in configuration; configs/reconcile.yaml documents
// the same values.
func Default() Config {
	return Config{
		Lookback:    72 * time.Hour,
		MaxLookback: 90 * 24 * time.Hour,
		Schedule:    "0 2 * * *",
		Stripe: StripeConfig{
			Rate:           25,
			Concurrency:    4,
			MaxRetries:     8,
			RequestTimeout: 30 * time.Second,
		},
		Matcher: MatcherConfig{
			DuplicateWindow: 24 * time.Hour,
			PendingGrace:    72 * time.Hour,
			ClockSkew:       5 * time.Minute,
			MetadataKeys:    MetadataKeys{ObligationID: "obligation_id", IdempotencyKey: "idempotency_key"},
		},
		Obligations: reconcile.DefaultObligationTable(),
		Alerts: AlertsConfig{
			RepeatInterval:     24 * time.Hour,
			PerChannelInterval: time.Second,
			MaxRetries:         5,
			Timeout:            10 * time.Second,
			MaxMessages:        10,
		},
		Store:   StoreConfig{ApplyAttempts: 5},
		Serve:   ServeConfig{Listen: "127.0.0.1:8080", Auth: "none", ProxyHeader: "X-Forwarded-Email", MaxRunAge: 26 * time.Hour},
		Workers: WorkersConfig{Slice: 6 * time.Hour, Fetchers: 4, Appliers: 1, Shards: 1, JobTimeout: 30 * time.Minute, RescueAfter: time.Hour},
		Env: Env{
			StripeAPIBase: "https://api.stripe.com",
			SlackAPIURL:   "https://slack.com/api/",
		},
	}
}

// Load returns the defaults with the file at path decoded strictly on top
// (path empty: defaults only) and the environment read through getenv,
// validated.
func Load(path string, getenv func(string) string) (Config, error) {
	c := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if err := Decode(b, &c); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
	}
	c.Env.read(getenv)
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// LiveStripeKey reports whether the Stripe key is a live one (sk_live_,
// rk_live_), so that dashboard links leave out /test/.
func (e Env) LiveStripeKey() bool {
	k := e.StripeAPIKey.Reveal()
	return strings.HasPrefix(k, "sk_live_") || strings.HasPrefix(k, "rk_live_")
}

func (e *Env) read(getenv func(string) string) {
	set := func(dst *string, name string) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			*dst = v
		}
	}
	set((*string)(&e.DatabaseURL), "DATABASE_URL")
	set((*string)(&e.StripeAPIKey), "STRIPE_API_KEY")
	set(&e.StripeAPIBase, "STRIPE_API_BASE")
	set((*string)(&e.SlackBotToken), "SLACK_BOT_TOKEN")
	set(&e.SlackChannel, "SLACK_CHANNEL")
	set((*string)(&e.SlackWebhookURL), "SLACK_WEBHOOK_URL")
	set(&e.SlackAPIURL, "SLACK_API_URL")
	set((*string)(&e.SlackSigningSecret), "SLACK_SIGNING_SECRET")
}

// Decode decodes YAML onto c strictly: an unknown key, a duplicate key or a
// value of the wrong type is an error naming the field (stripe.rate).
func Decode(b []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) { // empty file
			return nil
		}
		return err
	}
	// A second document would be silently ignored: refuse it, whatever
	// it holds (docs/design.md, "Errors").
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			return fmt.Errorf("the top level: want one YAML document, found more after the first: %v", cleanYAMLError(err))
		}
		return fmt.Errorf("the top level: want one YAML document, found a second (line %d)", line)
	}
	if doc.Kind == 0 {
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return errors.New("want one YAML document")
	}
	return decodeNode(doc.Content[0], reflect.ValueOf(c).Elem(), "")
}

var (
	durationType    = reflect.TypeOf(time.Duration(0))
	accountListType = reflect.TypeOf(AccountList(nil))
)

// decodeNode walks structs key by key so that every error carries the path
// of the field it is about; leaves are decoded by yaml itself.
func decodeNode(n *yaml.Node, v reflect.Value, path string) error {
	name := path
	if name == "" {
		name = "the top level"
	}
	if v.Kind() == reflect.Struct {
		if n.Kind != yaml.MappingNode {
			if n.Tag == "!!null" {
				return nil
			}
			return fmt.Errorf("%s: want a mapping (line %d)", name, n.Line)
		}
		fields := map[string]reflect.Value{}
		t := v.Type()
		for i := range t.NumField() {
			tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			fields[tag] = v.Field(i)
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			child := join(path, key)
			if seen[key] {
				return fmt.Errorf("%s: given twice (line %d)", child, n.Content[i].Line)
			}
			seen[key] = true
			f, ok := fields[key]
			if !ok {
				return fmt.Errorf("%s: unknown key (line %d)", child, n.Content[i].Line)
			}
			if err := decodeNode(n.Content[i+1], f, child); err != nil {
				return err
			}
		}
		return nil
	}
	if v.Type() == durationType {
		var s string
		if n.Kind != yaml.ScalarNode || n.Decode(&s) != nil {
			return fmt.Errorf("%s: want a duration such as 72h or 30m (line %d)", name, n.Line)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration such as 72h or 30m (line %d)", name, s, n.Line)
		}
		v.SetInt(int64(d))
		return nil
	}
	// stripe.accounts takes the word all as well as a list.
	if v.Type() == accountListType && n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		if n.Value != AllAccounts {
			return fmt.Errorf("%s: want a list of connected account ids or the word %s, got %q (line %d)", name, AllAccounts, n.Value, n.Line)
		}
		v.Set(reflect.ValueOf(AccountList{AllAccounts}))
		return nil
	}
	// A map replaces the default wholesale only for the keys given: merge.
	if v.Kind() == reflect.Map && n.Kind == yaml.MappingNode {
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := reflect.New(v.Type().Key()).Elem()
			val := reflect.New(v.Type().Elem()).Elem()
			child := join(path, n.Content[i].Value)
			if err := n.Content[i].Decode(key.Addr().Interface()); err != nil {
				return fmt.Errorf("%s: %v", child, cleanYAMLError(err))
			}
			if err := decodeNode(n.Content[i+1], val, child); err != nil {
				return err
			}
			v.SetMapIndex(key, val)
		}
		return nil
	}
	// A list (serve.trusted_proxies) replaces the default, item by item
	// decoded as a single value.
	if v.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode {
		list := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decodeNode(item, list.Index(i), fmt.Sprintf("%s[%d]", name, i)); err != nil {
				return err
			}
		}
		v.Set(list)
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s: want a single value (line %d)", name, n.Line)
	}
	// yaml truncates a float into an integer field (1.5 becomes 1): an
	// integer field takes an integer only.
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.ShortTag() != "!!int" {
			return fmt.Errorf("%s: want a whole number, got %q (line %d)", name, n.Value, n.Line)
		}
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return fmt.Errorf("%s: %v", name, cleanYAMLError(err))
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// cleanYAMLError drops yaml's "yaml: unmarshal errors:" preamble, keeping
// the line and the reason.
func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "yaml: unmarshal errors:\n")
	return strings.TrimSpace(s)
}

// Validate checks the whole configuration once. Errors name the field.
func (c Config) Validate() error {
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"lookback", c.Lookback},
		{"max_lookback", c.MaxLookback},
		{"stripe.request_timeout", c.Stripe.RequestTimeout},
		{"matcher.duplicate_window", c.Matcher.DuplicateWindow},
		{"alerts.repeat_interval", c.Alerts.RepeatInterval},
		{"alerts.timeout", c.Alerts.Timeout},
		{"serve.max_run_age", c.Serve.MaxRunAge},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("%s: must be positive (got %s)", p.name, p.d)
		}
	}
	nonNegative := []struct {
		name string
		d    time.Duration
	}{
		{"matcher.pending_grace", c.Matcher.PendingGrace},
		{"matcher.clock_skew", c.Matcher.ClockSkew},
		{"alerts.per_channel_interval", c.Alerts.PerChannelInterval},
	}
	for _, p := range nonNegative {
		if p.d < 0 {
			return fmt.Errorf("%s: must not be negative (got %s)", p.name, p.d)
		}
	}
	if c.MaxLookback < c.Lookback {
		return fmt.Errorf("max_lookback: must be at least lookback (%s), got %s", c.Lookback, c.MaxLookback)
	}
	// A decision rests on the records from an obligation's creation less
	// two duplicate windows and the clock skew: a shorter reach could
	// never mark anything PAID.
	if margin := 2*c.Matcher.DuplicateWindow + c.Matcher.ClockSkew; c.MaxLookback <= margin {
		return fmt.Errorf("max_lookback: must be longer than twice matcher.duplicate_window plus matcher.clock_skew (%s), got %s",
			margin, c.MaxLookback)
	}
	if !(c.Stripe.Rate > 0) || c.Stripe.Rate > 10000 {
		return fmt.Errorf("stripe.rate: must be a number of requests per second above 0 and at most 10000 (got %v)", c.Stripe.Rate)
	}
	ints := []struct {
		name      string
		v, lo, hi int
	}{
		{"stripe.concurrency", c.Stripe.Concurrency, 1, 64},
		{"stripe.max_retries", c.Stripe.MaxRetries, 0, 20},
		{"alerts.max_retries", c.Alerts.MaxRetries, 0, 20},
		{"alerts.max_messages", c.Alerts.MaxMessages, 1, 50},
		{"store.apply_attempts", c.Store.ApplyAttempts, 1, 20},
		{"workers.fetchers", c.Workers.Fetchers, 1, 64},
		{"workers.appliers", c.Workers.Appliers, 1, 16},
		{"workers.shards", c.Workers.Shards, 1, 256},
	}
	for _, i := range ints {
		if i.v < i.lo || i.v > i.hi {
			return fmt.Errorf("%s: must be between %d and %d (got %d)", i.name, i.lo, i.hi, i.v)
		}
	}
	if err := c.Workers.validate(); err != nil {
		return err
	}
	if err := c.Stripe.Accounts.validate(); err != nil {
		return err
	}
	if len(c.Stripe.Accounts) > 0 && c.Obligations.Columns.Account == "" {
		// Every object of a connected account would be an orphan: no
		// obligation could be of its account.
		return errors.New("stripe.accounts: connected accounts are read, but obligations.columns.account is not set: " +
			"name the column that holds each obligation's account (NULL for the platform's own)")
	}
	if err := ValidateSchedule(c.Schedule); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	if c.Matcher.MetadataKeys.ObligationID == "" {
		return errors.New("matcher.metadata_keys.obligation_id: must not be empty")
	}
	if c.Matcher.MetadataKeys.IdempotencyKey == "" {
		return errors.New("matcher.metadata_keys.idempotency_key: must not be empty")
	}
	if err := c.Obligations.Validate("obligations"); err != nil {
		return err
	}
	if err := c.Serve.validate(); err != nil {
		return err
	}
	for _, u := range []struct{ name, v string }{
		{"STRIPE_API_BASE", c.Env.StripeAPIBase},
		{"SLACK_API_URL", c.Env.SlackAPIURL},
	} {
		if err := checkURL(u.v); err != nil {
			return fmt.Errorf("%s: %w", u.name, err)
		}
	}
	if c.Env.SlackWebhookURL != "" {
		if err := checkURL(string(c.Env.SlackWebhookURL)); err != nil {
			return fmt.Errorf("SLACK_WEBHOOK_URL: %w", err)
		}
	}
	if c.Env.SlackBotToken != "" && c.Env.SlackChannel == "" {
		return errors.New("SLACK_CHANNEL: must be set when SLACK_BOT_TOKEN is (the channel id alerts go to, e.g. C0123456789)")
	}
	return c.Metrics.validate()
}

func (m MetricsConfig) validate() error {
	if m.Listen != "" {
		if err := CheckListen(m.Listen); err != nil {
			return fmt.Errorf("metrics.listen: %w", err)
		}
	}
	if m.Pushgateway != "" {
		if err := checkURL(m.Pushgateway); err != nil {
			return fmt.Errorf("metrics.pushgateway: %w", err)
		}
		if strings.Contains(m.Pushgateway, "/metrics/job") {
			return errors.New("metrics.pushgateway: give the gateway's base URL, without /metrics/job/… (the job and instance are added)")
		}
	}
	if m.Textfile != "" {
		// node_exporter reads only *.prom; a missing directory is a typo
		// best found by `config check`, not at the end of a run.
		if filepath.Ext(m.Textfile) != ".prom" {
			return fmt.Errorf("metrics.textfile: %q must end in .prom (node_exporter's textfile collector reads no other)", m.Textfile)
		}
		dir := filepath.Dir(m.Textfile)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("metrics.textfile: directory %q does not exist", dir)
		}
	}
	return nil
}

// checkURL accepts absolute http(s) URLs. Its errors never repeat the URL,
// which may carry a secret.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an absolute http(s) URL")
	}
	return nil
}

// ValidateSchedule checks a cron spec as `reconcile schedule` parses it
// (five fields or a descriptor, an optional CRON_TZ= or TZ= prefix) without
// letting the parser panic: robfig/cron v3.0.1 indexes past the end of an
// empty spec that follows a time-zone prefix.
func ValidateSchedule(spec string) (err error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return errors.New("empty cron spec (want e.g. \"0 2 * * *\")")
	}
	if strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=") {
		tz, rest, _ := strings.Cut(spec, " ")
		if strings.TrimSpace(rest) == "" {
			return fmt.Errorf("%q names a time zone but no schedule after it", spec)
		}
		if _, err := time.LoadLocation(strings.SplitN(tz, "=", 2)[1]); err != nil {
			return fmt.Errorf("unknown time zone in %q", tz)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("invalid cron spec %q", spec)
		}
	}()
	if err := checkEvery(spec); err != nil {
		return err
	}
	sched, err := ParseSchedule(spec)
	if err != nil {
		return fmt.Errorf("invalid cron spec %q: %w", spec, err)
	}
	// The parser accepts dates that never come (0 0 30 2 *): its Next is
	// then the zero time, and `schedule` would wait forever.
	now := time.Now()
	if next := sched.Next(now); next.IsZero() || next.Sub(now) > scheduleHorizon {
		return fmt.Errorf("%q never fires in the next 366 days", spec)
	}
	return nil
}

// scheduleHorizon is how soon a schedule must fire next to be accepted.
const scheduleHorizon = 366 * 24 * time.Hour

// checkEvery refuses an @every interval that is not positive: the parser
// rounds it up to a second, which would run a pass every second.
func checkEvery(spec string) error {
	rest := spec
	if strings.HasPrefix(rest, "CRON_TZ=") || strings.HasPrefix(rest, "TZ=") {
		_, rest, _ = strings.Cut(rest, " ")
	}
	arg, ok := strings.CutPrefix(strings.TrimSpace(rest), "@every ")
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(arg))
	if err != nil {
		return fmt.Errorf("invalid cron spec %q: %q is not a duration such as 6h", spec, strings.TrimSpace(arg))
	}
	if d <= 0 {
		return fmt.Errorf("%q: the interval must be positive (got %s)", spec, d)
	}
	return nil
}

// ParseSchedule parses a cron spec the way `reconcile schedule` runs it:
// standard five fields or a descriptor (@daily, @every 1h).
func ParseSchedule(spec string) (cron.Schedule, error) {
	return cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(spec)
}

func (s ServeConfig) validate() error {
	if strings.TrimSpace(s.Listen) == "" {
		return errors.New("serve.listen: must not be empty (e.g. 127.0.0.1:8080)")
	}
	if err := CheckListen(s.Listen); err != nil {
		return fmt.Errorf("serve.listen: %w", err)
	}
	if s.PublicURL != "" {
		if err := checkURL(s.PublicURL); err != nil {
			return fmt.Errorf("serve.public_url: %w (e.g. https://reconcile.example.com)", err)
		}
	}
	switch s.Auth {
	case "none":
	case "proxy":
		if strings.TrimSpace(s.ProxyHeader) == "" {
			return errors.New("serve.proxy_header: must not be empty with serve.auth proxy")
		}
		if len(s.TrustedProxies) == 0 {
			return errors.New("serve.trusted_proxies: serve.auth proxy needs the proxy's addresses or CIDRs")
		}
		for _, p := range s.TrustedProxies {
			if _, err := netip.ParsePrefix(p); err == nil {
				continue
			}
			if _, err := netip.ParseAddr(p); err != nil {
				return fmt.Errorf("serve.trusted_proxies: %q is neither an address nor a CIDR", p)
			}
		}
	case "basic":
		if strings.TrimSpace(s.UsersFile) == "" {
			return errors.New("serve.users_file: serve.auth basic needs the file of users and bcrypt hashes")
		}
	default:
		return fmt.Errorf("serve.auth: must be none, proxy or basic (got %q)", s.Auth)
	}
	if (strings.TrimSpace(s.TLSCertFile) == "") != (strings.TrimSpace(s.TLSKeyFile) == "") {
		return errors.New("serve.tls_cert_file, serve.tls_key_file: give both (HTTPS) or neither")
	}
	return nil
}
