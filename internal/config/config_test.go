package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func noEnv(string) string { return "" }

// The shipped file documents the defaults; it must decode to exactly them.
func TestShippedFileIsTheDefaults(t *testing.T) {
	got, err := Load(filepath.Join("..", "..", "configs", "reconcile.yaml"), noEnv)
	if err != nil {
		t.Fatalf("Load(configs/reconcile.yaml): %v", err)
	}
	if diff := cmp.Diff(Default(), got); diff != "" {
		t.Errorf("configs/reconcile.yaml differs from Default() (-want +got):\n%s", diff)
	}
}

func TestLoadOverrides(t *testing.T) {
	path := writeFile(t, "lookback: 24h\nstripe:\n  rate: 90\nobligations:\n  states:\n    PAID: paid\n")
	c, err := Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lookback != 24*time.Hour || c.Stripe.Rate != 90 || c.Stripe.Concurrency != 4 {
		t.Errorf("Load = lookback %s rate %v concurrency %d, want 24h 90 4", c.Lookback, c.Stripe.Rate, c.Stripe.Concurrency)
	}
	c2, err := Load(writeFile(t, "serve:\n  auth: proxy\n  trusted_proxies: [10.0.0.0/8, 127.0.0.1]\n"), noEnv)
	if err != nil || c2.Serve.Auth != "proxy" || len(c2.Serve.TrustedProxies) != 2 || c2.Serve.TrustedProxies[1] != "127.0.0.1" ||
		c2.Serve.Listen != "127.0.0.1:8080" {
		t.Errorf("serve override = %+v, %v; want proxy auth with two trusted proxies on the default address", c2.Serve, err)
	}
	if c.Obligations.States["PAID"] != "paid" || c.Obligations.States["FAILED"] != "FAILED" {
		t.Errorf("states = %v, want PAID mapped to paid and the others kept", c.Obligations.States)
	}
}

func TestLoadErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "stripe:\n  rat: 3\n", "stripe.rat: unknown key"},
		{"unknown top key", "lookbak: 3h\n", "lookbak: unknown key"},
		{"bad duration", "lookback: 3d\n", "lookback: \"3d\" is not a duration"},
		{"number as duration", "matcher:\n  pending_grace: 72\n", "matcher.pending_grace: \"72\" is not a duration"},
		{"negative rate", "stripe:\n  rate: -1\n", "stripe.rate: must be"},
		{"zero rate", "stripe:\n  rate: 0\n", "stripe.rate: must be"},
		{"string rate", "stripe:\n  rate: fast\n", "stripe.rate:"},
		{"bad cron", "schedule: \"61 * * * *\"\n", "schedule: invalid cron spec"},
		{"empty cron after tz", "schedule: \"CRON_TZ=UTC\"\n", "schedule:"},
		{"empty cron", "schedule: \"\"\n", "schedule: empty cron spec"},
		{"bad identifier", "obligations:\n  columns:\n    state: \"state; DROP TABLE obligations\"\n", "obligations.columns.state"},
		{"unknown state", "obligations:\n  states:\n    SETTLED: settled\n", "obligations.states"},
		{"duplicate key", "lookback: 3h\nlookback: 4h\n", "lookback: given twice"},
		{"malformed", "stripe: [1, 2\n", "yaml"},
		{"mapping expected", "stripe: 3\n", "stripe: want a mapping"},
		{"list for duration", "lookback: [1]\n", "lookback: want a duration"},
		{"list for scalar", "stripe:\n  rate: [1]\n", "stripe.rate: want a single value"},
		{"concurrency", "stripe:\n  concurrency: 0\n", "stripe.concurrency: must be between"},
		{"serve auth unknown", "serve:\n  auth: sso\n", "serve.auth: must be none, proxy or basic"},
		{"serve auth basic without users", "serve:\n  auth: basic\n", "serve.users_file: serve.auth basic needs"},
		{"serve tls cert alone", "serve:\n  tls_cert_file: c.pem\n", "serve.tls_cert_file, serve.tls_key_file: give both"},
		{"serve tls key alone", "serve:\n  tls_key_file: k.pem\n", "serve.tls_cert_file, serve.tls_key_file: give both"},
		{"serve proxy without proxies", "serve:\n  auth: proxy\n", "serve.trusted_proxies: serve.auth proxy needs"},
		{"serve bad proxy", "serve:\n  auth: proxy\n  trusted_proxies: [nope]\n", `serve.trusted_proxies: "nope"`},
		{"serve no listen", "serve:\n  listen: \"\"\n", "serve.listen: must not be empty"},
		{"serve relative public url", "serve:\n  public_url: reconcile.example.com\n", "serve.public_url: must be an absolute http(s) URL"},
		{"serve ftp public url", "serve:\n  public_url: ftp://reconcile.example.com\n", "serve.public_url: must be an absolute http(s) URL"},
		{"pushgateway not a URL", "metrics:\n  pushgateway: pushgateway:9091\n", "metrics.pushgateway: must be an absolute http(s) URL"},
		{"pushgateway scheme", "metrics:\n  pushgateway: ftp://gw:9091\n", "metrics.pushgateway: must be an absolute http(s) URL"},
		{"pushgateway with job path", "metrics:\n  pushgateway: http://gw:9091/metrics/job/reconcile\n", "metrics.pushgateway: give the gateway's base URL"},
		{"textfile not .prom", "metrics:\n  textfile: /tmp/reconcile.txt\n", "metrics.textfile: \"/tmp/reconcile.txt\" must end in .prom"},
		{"textfile directory missing", "metrics:\n  textfile: /nonexistent-dir/reconcile.prom\n", `metrics.textfile: directory "/nonexistent-dir" does not exist`},
		// docs/design.md, "Errors": refused when wrong, the field named.
		{"negative every", "schedule: \"@every -1h\"\n", "schedule: \"@every -1h\": the interval must be positive"},
		{"zero every", "schedule: \"@every 0s\"\n", "schedule: \"@every 0s\": the interval must be positive"},
		{"zero every with tz", "schedule: \"CRON_TZ=UTC @every 0s\"\n", "the interval must be positive"},
		{"never fires", "schedule: \"0 0 30 2 *\"\n", "schedule: \"0 0 30 2 *\" never fires in the next 366 days"},
		{"second document", "lookback: 3h\n---\nlookback: 4h\n", "want one YAML document, found a second (line 2)"},
		{"empty second document", "lookback: 3h\n---\n", "want one YAML document"},
		{"float for int", "stripe:\n  concurrency: 1.5\n", "stripe.concurrency: want a whole number, got \"1.5\""},
		{"exponent for int", "alerts:\n  max_retries: 1e1\n", "alerts.max_retries: want a whole number"},
		{"string for int", "store:\n  apply_attempts: \"3\"\n", "store.apply_attempts: want a whole number"},
		{"metrics port range", "metrics:\n  listen: 127.0.0.1:99999\n", "metrics.listen: \"127.0.0.1:99999\": port \"99999\" must be a number from 0 to 65535"},
		{"metrics no port", "metrics:\n  listen: localhost\n", "metrics.listen: \"localhost\" is not a host:port"},
		{"metrics bad host", "metrics:\n  listen: \"bad_host!:9090\"\n", "metrics.listen: \"bad_host!:9090\": host \"bad_host!\" is neither"},
		{"metrics bad ipv4", "metrics:\n  listen: 256.1.1.1:9090\n", "metrics.listen: \"256.1.1.1:9090\": host"},
		{"serve port range", "serve:\n  listen: 127.0.0.1:65536\n", "serve.listen: \"127.0.0.1:65536\": port"},
		{"serve named port", "serve:\n  listen: 127.0.0.1:http\n", "serve.listen: \"127.0.0.1:http\": port"},
		{"serve bad host", "serve:\n  listen: \"[::1:8080\"\n", "serve.listen:"},
		{"workers slice", "workers:\n  slice: 10s\n", "workers.slice: must be at least 1m"},
		{"workers rescue", "workers:\n  job_timeout: 2h\n", "workers.rescue_after: must be longer than workers.job_timeout (2h0m0s), got 1h0m0s"},
		{"workers fetchers", "workers:\n  fetchers: 0\n", "workers.fetchers: must be between 1 and 64"},
		// docs/design.md, "Accounts".
		{"accounts bad id", "stripe:\n  accounts: [acct_1, ca_2]\nobligations:\n  columns:\n    account: account\n", `stripe.accounts[1]: "ca_2" is not a connected account id`},
		{"accounts twice", "stripe:\n  accounts: [acct_1, acct_1]\nobligations:\n  columns:\n    account: account\n", `stripe.accounts[1]: "acct_1" is listed twice`},
		{"accounts all and ids", "stripe:\n  accounts: [all, acct_1]\nobligations:\n  columns:\n    account: account\n", `stripe.accounts: "all" stands alone`},
		{"accounts other word", "stripe:\n  accounts: every\n", `stripe.accounts: want a list of connected account ids or the word all, got "every"`},
		{"accounts without column", "stripe:\n  accounts: all\n", "stripe.accounts: connected accounts are read, but obligations.columns.account is not set"},
		{"account column bad", "obligations:\n  columns:\n    account: \"acct; x\"\n", "obligations.columns.account"},
		{"account column twice", "obligations:\n  columns:\n    account: state\n", `obligations.columns.account: "state" is already the column of state`},
	}
	for _, tt := range tests {
		_, err := Load(writeFile(t, tt.yaml), noEnv)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Load() error = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// The batch metrics' keys: a Pushgateway URL (credentials allowed, never
// repeated in an error), an instance, a textfile in a directory that
// exists.
func TestLoadBatchMetrics(t *testing.T) {
	dir := t.TempDir()
	c, err := Load(writeFile(t, "metrics:\n  pushgateway: https://u:pw@gw.example:9091/prefix\n  instance: payments\n  textfile: "+
		filepath.Join(dir, "reconcile.prom")+"\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.Pushgateway != "https://u:pw@gw.example:9091/prefix" || c.Metrics.Instance != "payments" ||
		c.Metrics.Textfile != filepath.Join(dir, "reconcile.prom") {
		t.Errorf("metrics = %+v", c.Metrics)
	}
	_, err = Load(writeFile(t, "metrics:\n  pushgateway: \"gw.example/x?u=1:pw\"\n"), noEnv)
	if err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("a bad pushgateway URL: err = %v, want one that does not repeat it", err)
	}
}

// What must stay accepted beside what is refused (docs/design.md, "Errors").
func TestLoadAcceptsGoodValues(t *testing.T) {
	for _, body := range []string{
		"schedule: \"@every 6h\"\n",
		"schedule: \"0 0 29 * *\"\n",
		"stripe:\n  concurrency: 8\n",
		"stripe:\n  concurrency: 0x8\n",
		"stripe:\n  rate: 2.5\n",
		"metrics:\n  listen: \":9090\"\n",
		"metrics:\n  listen: \"[::1]:9090\"\n",
		"metrics:\n  listen: metrics.internal:9090\n",
		"serve:\n  listen: 127.0.0.1:0\n",
		"---\nlookback: 3h\n",
		"stripe:\n  accounts: all\nobligations:\n  columns:\n    account: account\n",
		"stripe:\n  accounts: [acct_1Nv0FGQ9RKHgCVdK, acct_2]\nobligations:\n  columns:\n    account: account\n",
		"stripe:\n  accounts: []\n",
		"obligations:\n  columns:\n    account: account\n",
	} {
		if _, err := Load(writeFile(t, body), noEnv); err != nil {
			t.Errorf("Load(%q) = %v, want it accepted", body, err)
		}
	}
}

// stripe.accounts decodes as the word all or a list of ids.
func TestLoadAccounts(t *testing.T) {
	all, err := Load(writeFile(t, "stripe:\n  accounts: all\nobligations:\n  columns:\n    account: acct\n"), noEnv)
	if err != nil || !all.Stripe.Accounts.All() || all.Obligations.Columns.Account != "acct" {
		t.Errorf("accounts: all = %v, %v; want All and the column acct", all.Stripe.Accounts, err)
	}
	ids, err := Load(writeFile(t, "stripe:\n  accounts: [acct_b, acct_a]\nobligations:\n  columns:\n    account: acct\n"), noEnv)
	if err != nil || ids.Stripe.Accounts.All() || !slices.Equal(ids.Stripe.Accounts, AccountList{"acct_b", "acct_a"}) {
		t.Errorf("accounts: [acct_b, acct_a] = %v, %v", ids.Stripe.Accounts, err)
	}
	if d := Default(); len(d.Stripe.Accounts) != 0 || d.Obligations.Columns.Account != "" {
		t.Errorf("default accounts %v, column %q; want none: the platform's own only", d.Stripe.Accounts, d.Obligations.Columns.Account)
	}
}

func TestEnv(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":    "postgres://u:hunter2@db/x",
		"STRIPE_API_KEY":  "sk_test_canary",
		"SLACK_BOT_TOKEN": "xoxb-canary",
		// The signing secret verifies Slack's button calls; it prints as
		// the others do.
		"SLACK_SIGNING_SECRET": "signing-canary",
	}
	_, err := Load("", func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "SLACK_CHANNEL") {
		t.Fatalf("bot token without channel: err = %v, want one naming SLACK_CHANNEL", err)
	}
	env["SLACK_CHANNEL"] = "C1"
	c, err := Load("", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	printed := fmt.Sprintf("%v %+v %#v %s", c.Env, c.Env, c.Env, c.Env.StripeAPIKey)
	for _, secret := range []string{"hunter2", "sk_test_canary", "xoxb-canary", "signing-canary"} {
		if strings.Contains(printed, secret) {
			t.Errorf("printing Env leaks %q: %s", secret, printed)
		}
	}
	if c.Env.SlackSigningSecret.Reveal() != "signing-canary" {
		t.Errorf("SlackSigningSecret.Reveal() = %q", c.Env.SlackSigningSecret.Reveal())
	}
	if c.Env.StripeAPIKey.Reveal() != "sk_test_canary" {
		t.Errorf("Reveal() = %q", c.Env.StripeAPIKey.Reveal())
	}
}

func TestValidateSchedule(t *testing.T) {
	for _, ok := range []string{"0 2 * * *", "@daily", "@every 6h", "CRON_TZ=Europe/Berlin 30 4 * * *"} {
		if err := ValidateSchedule(ok); err != nil {
			t.Errorf("ValidateSchedule(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "CRON_TZ=", "CRON_TZ=UTC", "TZ=UTC  ", "CRON_TZ=Mars/Base 0 2 * * *", "* * *", "0 25 * * *", "@weekly2"} {
		if err := ValidateSchedule(bad); err == nil {
			t.Errorf("ValidateSchedule(%q) = nil, want an error", bad)
		}
	}
}

// FuzzDecode: no input makes decoding or validation panic, and whatever
// decodes and validates round-trips through Validate again.
func FuzzDecode(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "reconcile.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("stripe:\n  rate: -1\n"))
	f.Add([]byte("schedule: \"CRON_TZ=UTC\"\n"))
	f.Add([]byte("obligations:\n  states:\n    PAID: PAID\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := Default()
		if err := Decode(in, &c); err != nil {
			return
		}
		_ = c.Validate()
	})
}

// FuzzDecodeRefuses fuzzes the decoder on the classes of configuration
// that must be refused with the field named (docs/design.md, "Errors"):
// each input is one class built around the fuzzed text, and an oracle of
// the test's own says whether that text is bad for it. Nothing panics, a
// bad value is refused naming its field, and whatever is accepted holds
// up: its schedule fires within 366 days, its integer is the text's, its
// addresses split into a host and a port in range.
func FuzzDecodeRefuses(f *testing.F) {
	seeds := []struct {
		class uint8
		s     string
	}{
		{0, "@every -1h"}, {0, "@every 0s"}, {0, "0 0 30 2 *"}, {0, "0 0 31 4 *"}, {0, "@every 6h"}, {0, "0 2 * * *"},
		{0, "CRON_TZ=UTC @every -5m"}, {0, "@every 1ns"},
		{1, "lookback: 4h"}, {1, ""}, {1, "# only a comment"}, {1, "[1, 2]"},
		{2, "1.5"}, {2, "1e1"}, {2, "8"}, {2, "0x8"}, {2, "\"4\""}, {2, "-0.0"}, {2, ".inf"}, {2, "4.0"},
		{3, "127.0.0.1:99999"}, {3, "localhost"}, {3, "bad_host!:1"}, {3, "[::1]:9090"}, {3, ":9090"}, {3, "256.1.1.1:80"},
		{3, "127.0.0.1:-1"}, {3, "host:+80"},
	}
	for _, sd := range seeds {
		f.Add(sd.class, sd.s)
	}
	f.Fuzz(func(t *testing.T, class uint8, s string) {
		if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) || strings.ContainsAny(s, "\"'\\") {
			return // kept on one quoted line: the class, not YAML's quoting, is under test
		}
		var in, field string
		switch class % 4 {
		case 0:
			in, field = "schedule: \""+s+"\"\n", "schedule:"
		case 1:
			in, field = "lookback: 3h\n---\n"+s+"\n", "want one YAML document"
		case 2:
			in, field = "stripe:\n  concurrency: "+s+"\n", "stripe.concurrency:"
		case 3:
			in, field = "metrics:\n  listen: \""+s+"\"\n", "metrics.listen:"
		}
		c := Default()
		err := Decode([]byte(in), &c)
		if err == nil {
			err = c.Validate()
		}
		switch class % 4 {
		case 0:
			if err != nil {
				return
			}
			sched, perr := ParseSchedule(strings.TrimSpace(c.Schedule))
			now := time.Now()
			if perr != nil {
				t.Fatalf("schedule %q accepted but does not parse: %v", s, perr)
			}
			if next := sched.Next(now); next.IsZero() || next.Sub(now) > 367*24*time.Hour {
				t.Fatalf("schedule %q accepted but next fires %s", s, next)
			}
			if rest, ok := strings.CutPrefix(strings.TrimSpace(s), "@every "); ok {
				if d, derr := time.ParseDuration(strings.TrimSpace(rest)); derr == nil && d <= 0 {
					t.Fatalf("schedule %q accepted with a non-positive interval", s)
				}
			}
		case 1:
			// Every second document is refused, whatever it holds, unless
			// YAML reads none there.
			if err == nil && yamlDocuments(t, in) > 1 {
				t.Fatalf("%q accepted with %d documents", in, yamlDocuments(t, in))
			}
			if err != nil && yamlDocuments(t, in) > 1 && !strings.Contains(err.Error(), field) {
				t.Fatalf("%q refused as %v, want %q", in, err, field)
			}
		case 2:
			if err == nil {
				if n, perr := strconv.ParseInt(strings.TrimSpace(s), 0, 64); perr != nil || int(n) != c.Stripe.Concurrency {
					if !isYAMLInt(s) {
						t.Fatalf("concurrency %q accepted as %d, which is not the integer it spells", s, c.Stripe.Concurrency)
					}
				}
				return
			}
			if _, ferr := strconv.ParseFloat(strings.TrimSpace(s), 64); ferr == nil && !isYAMLInt(s) && !strings.Contains(err.Error(), field+" want a whole number") {
				t.Fatalf("concurrency %q refused as %v, want %q naming a whole number", s, err, field)
			}
		case 3:
			if err != nil {
				if !strings.Contains(err.Error(), field) {
					t.Fatalf("listen %q refused as %v, want %q", s, err, field)
				}
				return
			}
			if s == "" {
				return // metrics off
			}
			host, port, serr := net.SplitHostPort(s)
			p, perr := strconv.Atoi(port)
			if serr != nil || perr != nil || p < 0 || p > 65535 || strings.ContainsAny(host, " !_@#$%^&*(){}<>,;/?") {
				t.Fatalf("listen %q accepted (host %q, port %q)", s, host, port)
			}
		}
	})
}

// yamlDocuments counts the documents a YAML stream holds (0 if it does
// not parse).
func yamlDocuments(t *testing.T, in string) int {
	dec := yaml.NewDecoder(strings.NewReader(in))
	n := 0
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err != nil {
			return n
		}
		n++
	}
}

// isYAMLInt reports whether YAML reads s as an integer (0o17, 1_000, +3).
func isYAMLInt(s string) bool {
	var n yaml.Node
	if yaml.Unmarshal([]byte(s), &n) != nil || len(n.Content) != 1 {
		return false
	}
	return n.Content[0].ShortTag() == "!!int"
}

// FuzzValidateSchedule: no spec makes the cron parser panic through us.
func FuzzValidateSchedule(f *testing.F) {
	for _, s := range []string{"0 2 * * *", "CRON_TZ=", "CRON_TZ=UTC ", "TZ=", "@every", "@every -1s", "* * * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		_ = ValidateSchedule(spec)
	})
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "reconcile.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPublicURL(t *testing.T) {
	c, err := Load(writeFile(t, "serve:\n  public_url: https://reconcile.example.com/\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Serve.PublicURL != "https://reconcile.example.com/" {
		t.Errorf("serve.public_url = %q", c.Serve.PublicURL)
	}
}
