package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"reconcile/internal/config"
	"reconcile/internal/redact"
	"reconcile/internal/store"
	"reconcile/internal/trace"
	"reconcile/internal/web"
)

// cmdServe serves finance's findings page until ctx ends (docs/design.md,
// "The findings page").
func cmdServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("serve")
	var listen string
	c.fs.StringVar(&listen, "listen", "", "address to listen on (default: serve.listen, 127.0.0.1:8080)")
	cfg, err := c.start(args, stdout, getenv)
	if err != nil {
		return err
	}
	if err := listenOn(&cfg, listen); err != nil {
		return err
	}
	if cfg.Serve.Auth == web.AuthNone && !loopback(cfg.Serve.Listen) {
		return usageError("serve: %s is not a loopback address, and serve.auth is none: anyone who reaches it could act as finance (set serve.auth: proxy or basic, or listen on 127.0.0.1)",
			cfg.Serve.Listen)
	}
	log := newLogger(stderr, slog.LevelInfo)
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.close()
	if err := d.store.CheckSchema(ctx); err != nil {
		return failed(err)
	}
	return serveFindings(ctx, cfg, d, log, stdout)
}

// serveFindings serves the findings page over d's database on
// cfg.Serve.Listen until ctx ends, for `serve` and `demo --serve`.
func serveFindings(ctx context.Context, cfg config.Config, d *deps, log *slog.Logger, stdout io.Writer) error {
	h, err := web.New(web.Options{
		Store: d.store,
		// A finding's page traces its obligation as `reconcile trace` does,
		// reading Stripe by a dry pass when a key is set.
		Trace:  func(ctx context.Context, id string) (trace.Trace, error) { return d.trace(ctx, cfg, id) },
		Mirror: store.NewMirror(d.pool),
		Auth: web.Auth{Mode: cfg.Serve.Auth, Header: cfg.Serve.ProxyHeader, TrustedProxies: cfg.Serve.TrustedProxies,
			UsersFile: cfg.Serve.UsersFile},
		// The dashboard links follow the key's mode, as Slack's do; without
		// a key they open the test dashboard.
		Live:      cfg.Env.LiveStripeKey(),
		Logger:    log,
		MaxRunAge: cfg.Serve.MaxRunAge,
		Slack:     slackButtons(cfg, log),
	})
	if err != nil {
		return usageError("%v", err)
	}
	tlsConfig, err := serveTLS(cfg.Serve)
	if err != nil {
		return usageError("%v", err)
	}
	warnClearPasswords(log, cfg.Serve)
	ln, err := net.Listen("tcp", cfg.Serve.Listen)
	if err != nil {
		return failed(fmt.Errorf("serve: %w", err))
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), TLSConfig: tlsConfig}
	scheme, serve := serveOn(srv, ln)
	fmt.Fprintf(stdout, "serving the findings page on %s://%s/ (auth %s)\n", scheme, ln.Addr(), cfg.Serve.Auth)
	done := make(chan error, 1)
	go func() { done <- serve() }()
	select {
	case err := <-done:
		return failed(fmt.Errorf("serve: %s", redact.String(err.Error())))
	case <-ctx.Done():
	}
	// Requests under way finish; new ones are refused.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return failed(fmt.Errorf("serve: shutdown: %w", err))
	}
	// Slack's messages being edited after an acknowledgement are edited.
	if err := h.Close(sctx); err != nil {
		return failed(fmt.Errorf("serve: shutdown: %w", err))
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return failed(fmt.Errorf("serve: %s", redact.String(err.Error())))
	}
	return nil
}

// slackButtons are the options of Slack's buttons: the bot's client from
// SLACK_BOT_TOKEN and SLACK_API_URL, and SLACK_SIGNING_SECRET, which
// verifies Slack's calls. Without both the buttons are off, and serve says
// so once (docs/design.md, "Buttons in Slack").
func slackButtons(cfg config.Config, log *slog.Logger) web.SlackOptions {
	e := cfg.Env
	switch {
	case e.SlackSigningSecret == "":
		log.Info("slack buttons are off: set SLACK_SIGNING_SECRET (and SLACK_BOT_TOKEN) to acknowledge from Slack")
		return web.SlackOptions{}
	case e.SlackBotToken == "":
		log.Warn("slack buttons are off: SLACK_SIGNING_SECRET is set but SLACK_BOT_TOKEN is not")
		return web.SlackOptions{}
	}
	client := slack.New(e.SlackBotToken.Reveal(), slack.OptionAPIURL(strings.TrimRight(e.SlackAPIURL, "/")+"/"),
		slack.OptionHTTPClient(&http.Client{Timeout: cfg.Alerts.Timeout}))
	return web.SlackOptions{Client: client, SigningSecret: e.SlackSigningSecret.Reveal(), PublicURL: cfg.Serve.PublicURL}
}

// loopback says addr (host:port) listens on loopback only: a loopback IP
// or localhost. An empty host listens everywhere.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// listenOn puts --listen, when given, in place of serve.listen, refused
// as the configuration's address would be (docs/design.md, "Errors").
func listenOn(cfg *config.Config, listen string) error {
	if listen == "" {
		return nil
	}
	if err := config.CheckListen(listen); err != nil {
		return usageError("--listen: %v", err)
	}
	cfg.Serve.Listen = listen
	return nil
}
