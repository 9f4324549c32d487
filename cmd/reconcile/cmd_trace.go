package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"reconcile/internal/config"
	"reconcile/internal/runner"
	"reconcile/internal/trace"
)

// cmdTrace shows everything known about one obligation (trace.Assemble),
// named by its id or by a Stripe id that leads to it (trace.Resolve): its
// row, what the provider holds for it and how each object links, the
// idempotency keys seen in events, the audit of transitions, its findings
// and their alerts. It writes nothing anywhere.
func cmdTrace(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("trace")
	format := c.format("text", "json")
	pos, cfg, err := c.startWith(args, stdout, getenv, "OBLIGATION_ID")
	if err != nil {
		return err
	}
	log := newLogger(stderr, slog.LevelInfo)
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.close()
	id, err := trace.Resolve(ctx, d.obligations, d.findingsNamer(ctx), pos[0])
	if err != nil {
		return failed(err)
	}
	t, err := d.trace(ctx, cfg, id)
	if err != nil {
		return failed(err)
	}
	if format.value == "json" {
		return writeJSON(stdout, t)
	}
	trace.WriteText(stdout, t)
	return nil
}

// findingsNamer is the store when its schema is current, so that a
// Stripe id may lead to an obligation through a stored finding; nil (the
// obligations table alone) before the first run.
func (d *deps) findingsNamer(ctx context.Context) trace.FindingsNamer {
	if d.store.CheckSchema(ctx) != nil {
		return nil
	}
	return d.store
}

// trace assembles obligation id's trace, for `trace` and the findings
// page. The runner is built only once the obligation and its history are
// read, so that a trace of an unknown obligation checks nothing else;
// whatever stops the provider's side is shown in the trace, not fatal.
func (d *deps) trace(ctx context.Context, cfg config.Config, id string) (trace.Trace, error) {
	provider := trace.PassFunc(func(ctx context.Context, req runner.Request) (*runner.Outcome, error) {
		if cfg.Env.StripeAPIKey == "" {
			return nil, errors.New("STRIPE_API_KEY is not set: the provider's side is not shown")
		}
		r, err := d.newRunner(ctx, nil, req.DryRun)
		if err != nil {
			return nil, err
		}
		r.Alerts = nil // a trace sends nothing
		return r.Run(ctx, req)
	})
	return trace.Assemble(ctx, trace.Deps{
		Obligations:     d.obligations,
		History:         d.store,
		Provider:        provider,
		DuplicateWindow: cfg.Matcher.DuplicateWindow,
		Now:             time.Now,
	}, id)
}
