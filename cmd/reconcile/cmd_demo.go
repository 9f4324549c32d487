package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/demo"
	"reconcile/internal/embeddedpg"
	"reconcile/internal/redact"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/web"
)

// cmdDemo runs the whole flow on built-in sample data with no set-up: a
// throwaway database, the in-repo Stripe-compatible server, and Slack
// messages printed as finance would see them (demo.Start, demo.Printer).
// The passes run through the same wiring as `reconcile run`.
func cmdDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("demo")
	format := c.format("text", "json")
	var serve, keep bool
	var listen string
	c.fs.BoolVar(&keep, "keep", false, "leave the demo's database afterwards and print its DATABASE_URL, to try trace, findings, ack and serve on it")
	c.fs.BoolVar(&serve, "serve", false, "then keep the demo's data and serve its findings page until interrupted")
	c.fs.StringVar(&listen, "listen", "", "with --serve: the page's address (default: serve.listen, 127.0.0.1:8080)")
	cfg, err := c.start(args, stdout, getenv)
	if err != nil {
		return err
	}
	if err := listenOn(&cfg, listen); err != nil {
		return err
	}
	if serve && format.value == "json" {
		return usageError("demo --serve: the page follows the text report; drop --format json")
	}
	if serve && !loopback(cfg.Serve.Listen) {
		return usageError("demo --serve: %s is not a loopback address; the demo's page has no sign-in", cfg.Serve.Listen)
	}
	log := newLogger(stderr, slog.LevelWarn) // the demo's story is on stdout; only trouble goes to stderr

	if keep && cfg.Env.DatabaseURL == "" && !embeddedpg.Answers(ctx, embeddedpg.LocalAddr(getenv)) {
		// Said before an embedded server is started only to be dropped.
		return usageError("demo --keep: DATABASE_URL is unset and nothing answers on %s, so the demo would run on an embedded PostgreSQL, which stops with it: there is no database to keep; set DATABASE_URL to a server you may create databases on, or look at the data with demo --serve",
			embeddedpg.LocalAddr(getenv))
	}
	now := time.Now().UTC().Truncate(time.Second)
	env, err := demo.Start(ctx, cfg.Env.DatabaseURL.Reveal(), demo.Sample(now))
	if err != nil {
		return failed(err)
	}
	defer env.Close()
	if keep {
		env.Keep()
		// Said once the demo is over, whichever way it ends.
		out := stdout
		if format.value == "json" {
			out = stderr // stdout holds the JSON report only
		}
		defer printKept(out, env.DatabaseURL)
	}

	// The demo's own environment: nothing of the caller's leaks in.
	cfg.Env.DatabaseURL = config.Secret(env.DatabaseURL)
	cfg.Env.StripeAPIKey = config.Secret(demo.Key)
	cfg.Env.StripeAPIBase = env.StripeURL
	cfg.Env.SlackBotToken, cfg.Env.SlackWebhookURL, cfg.Env.SlackChannel = "", "", ""
	// A platform: its own account and every connected shop, listed from
	// Stripe as a platform's nightly run lists them (docs/design.md,
	// "Accounts").
	cfg.Stripe.Accounts = config.AccountList{config.AllAccounts}
	cfg.Obligations.Columns.Account = demo.AccountColumn
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.close()
	r, err := d.newRunner(ctx, nil, false)
	if err != nil {
		return err
	}
	var sink io.Writer = stdout
	if format.value == "json" {
		sink = stderr // stdout holds the JSON report only
	}
	r.Alerts = demo.Printer(sink)

	if env.Embedded != "" {
		fmt.Fprintf(sink, "DATABASE_URL is unset and nothing answers on %s: the demo runs on %s.\n\n",
			embeddedpg.LocalAddr(getenv), env.Embedded)
	}
	fmt.Fprintf(sink, "%s\n\nSlack, as finance sees it:\n\n", demo.Story)
	window := reconcile.Window{From: now.Add(-cfg.Lookback), To: now}
	out, err := r.Run(ctx, runner.Request{Window: window, Trigger: reconcile.TriggerDemo})
	if err != nil {
		return failed(err)
	}
	if format.value == "json" {
		return writeJSON(stdout, report.New(out))
	}
	fmt.Fprintln(stdout, "\nThe report:")
	fmt.Fprintln(stdout)
	report.WriteText(stdout, out)

	// A second pass over the same history: nothing new, nothing changed,
	// nothing sent. This is what makes it safe to run from cron.
	again, err := r.Run(ctx, runner.Request{Window: window, Trigger: reconcile.TriggerDemo})
	if err != nil {
		return failed(err)
	}
	fmt.Fprintf(stdout, "\nA second run over the same data: %d findings still open, %d new alerts, %d transitions.\n",
		len(again.Result.Findings), again.Applied.Alerts, len(again.Transitions))
	if !serve && !keep {
		fmt.Fprintln(stdout, "Trace one obligation end to end with: reconcile trace refund:4821:approved-request-7 (against your own database, or the demo's with demo --keep).")
	}
	if !serve {
		return nil
	}
	// The page over the demo's database, signed in as nobody: only this
	// machine may look and acknowledge. Interrupting drops the database.
	fmt.Fprintln(stdout, "\nThe demo's findings page (Ctrl-C stops it and drops the demo's database):")
	cfg.Serve.Auth = web.AuthNone
	return serveFindings(ctx, cfg, d, log, stdout)
}

// printKept tells where the kept demo database is and what to try on it.
// A password in the URL (from the caller's DATABASE_URL) is not printed.
func printKept(w io.Writer, dbURL string) {
	shown := redact.URL(dbURL, false)
	fmt.Fprintf(w, "\nThe demo's database is kept. Try, against it:\n\n")
	fmt.Fprintf(w, "  export DATABASE_URL='%s'\n", shown)
	if shown != dbURL {
		fmt.Fprintln(w, "  (with your DATABASE_URL's password in place of the redacted one)")
	}
	fmt.Fprintln(w, "  reconcile findings --open")
	fmt.Fprintln(w, "  unset STRIPE_API_KEY   # the demo's Stripe stopped with it; with a key, trace would read that key's account")
	fmt.Fprintln(w, "  reconcile trace refund:4821:approved-request-7")
	fmt.Fprintln(w, "  reconcile serve")
	if u, err := url.Parse(dbURL); err == nil {
		fmt.Fprintf(w, "Drop it when done: dropdb %s (on the same server)\n", strings.TrimPrefix(u.Path, "/"))
	}
}
