package main

import (
	"context"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"reconcile/internal/config"
	"reconcile/internal/redact"
)

// cmdConfig is `reconcile config check`: the effective configuration with
// secrets redacted, after the same validation a run does; with --connect,
// a line per connection a run makes, each checked (checkConnections).
func cmdConfig(ctx context.Context, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	c := newCommand("config")
	connect := c.fs.Bool("connect", false, "also check the database (and a run's privileges), Stripe (one read) and Slack (auth.test; nothing is posted)")
	pos, cfg, err := c.startWith(args, stdout, getenv, "check")
	if err != nil {
		return err
	}
	if pos[0] != "check" {
		return usageError("config: want \"reconcile config check\"")
	}
	if err := printConfig(stdout, cfg, c.configPath); err != nil {
		return err
	}
	if *connect {
		return checkConnections(ctx, stdout, cfg)
	}
	return nil
}

func printConfig(w io.Writer, cfg config.Config, path string) error {
	source := "built-in defaults"
	if path != "" {
		source = path + " on top of the built-in defaults"
	}
	fmt.Fprintf(w, "# effective configuration: %s\n", source)
	// The only key of the file that may carry a secret (basic auth).
	cfg.Metrics.Pushgateway = redact.URL(cfg.Metrics.Pushgateway, false)
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("print configuration: %w", err)
	}
	w.Write(b)
	e := cfg.Env
	show := func(s string) string {
		if s == "" {
			return "(not set)"
		}
		return s
	}
	fmt.Fprintln(w, "# environment (secrets redacted)")
	fmt.Fprintf(w, "DATABASE_URL: %s\n", show(redact.URL(e.DatabaseURL.Reveal(), false)))
	fmt.Fprintf(w, "STRIPE_API_KEY: %s\n", show(keyKind(e.StripeAPIKey.Reveal())))
	fmt.Fprintf(w, "STRIPE_API_BASE: %s\n", show(redact.URL(e.StripeAPIBase, false)))
	fmt.Fprintf(w, "SLACK_BOT_TOKEN: %s\n", show(e.SlackBotToken.String()))
	fmt.Fprintf(w, "SLACK_CHANNEL: %s\n", show(e.SlackChannel))
	fmt.Fprintf(w, "SLACK_WEBHOOK_URL: %s\n", show(redact.URL(e.SlackWebhookURL.Reveal(), true)))
	fmt.Fprintf(w, "SLACK_API_URL: %s\n", show(redact.URL(e.SlackAPIURL, false)))
	fmt.Fprintf(w, "SLACK_SIGNING_SECRET: %s\n", show(e.SlackSigningSecret.String()))
	return nil
}

// keyKind tells which kind of Stripe key is set without showing it.
func keyKind(key string) string {
	if key == "" {
		return ""
	}
	for _, p := range []string{"sk_live_", "sk_test_", "rk_live_", "rk_test_"} {
		if len(key) > len(p) && key[:len(p)] == p {
			return p + "… " + redact.Marker
		}
	}
	return redact.Marker
}
