package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/metrics"
	"reconcile/internal/redact"
	"reconcile/internal/runner"
)

// batchMetrics leaves one `reconcile run`'s metrics behind when it ends:
// pushed to metrics.pushgateway, written to metrics.textfile, or both
// (docs/design.md, "Metrics of batch runs"). Nothing it meets changes the
// run's exit status: a failure is one warning.
type batchMetrics struct {
	cfg   config.Config
	log   *slog.Logger
	start time.Time
	// off: neither sink is configured, or the run is a dry run (which
	// writes and posts nothing).
	off bool
}

func newBatchMetrics(cfg config.Config, log *slog.Logger, dryRun bool) *batchMetrics {
	m := cfg.Metrics
	return &batchMetrics{cfg: cfg, log: log, start: time.Now(), off: dryRun || m.Pushgateway == "" && m.Textfile == ""}
}

// leave reports the run as it ended: out and err as runner.Run returned
// them (out nil and err nil when the run failed before the pass), d nil
// when the database could not be opened. A run that found another
// holding the run lock leaves the metrics to that run.
func (b *batchMetrics) leave(ctx context.Context, d *deps, out *runner.Outcome, err error) {
	if b.off || errors.Is(err, runner.ErrLocked) {
		return
	}
	// SIGTERM ends the pass, not the report of how it ended; each step
	// below has its own timeout.
	ctx = context.WithoutCancel(ctx)
	run := metrics.BatchRun{Status: metrics.StatusFailed, Duration: time.Since(b.start)}
	if out != nil {
		run.Stripe = &out.Stats
		if err == nil && out.Run.Status == reconcile.RunCompleted {
			run.Status = metrics.StatusCompleted
		}
	}
	if d != nil {
		run.Store = b.readStore(ctx, d)
	}
	if url := b.cfg.Metrics.Pushgateway; url != "" {
		instance := pushInstance(b.cfg)
		if err := metrics.Push(ctx, url, instance, run); err != nil {
			b.log.Warn("metrics not pushed; the run's exit status is unchanged", "error", err.Error())
		} else {
			b.log.Info("metrics pushed", "pushgateway", redact.URL(url, false), "instance", instance, "status", run.Status)
		}
	}
	if path := b.cfg.Metrics.Textfile; path != "" {
		if err := metrics.WriteTextfile(path, run); err != nil {
			b.log.Warn("metrics textfile not written; the run's exit status is unchanged", "error", err.Error())
		} else {
			b.log.Info("metrics textfile written", "path", path, "status", run.Status)
		}
	}
}

// readStore reads the figures the metrics take from the store after the
// pass; nil when it cannot (then the sinks keep what they had).
func (b *batchMetrics) readStore(ctx context.Context, d *deps) *metrics.StoreFigures {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := metrics.ReadStoreFigures(ctx, d.store, time.Now())
	if err != nil {
		b.log.Warn("metrics: the store could not be read; its figures keep their last values", "error", redact.Line(err.Error()))
		return nil
	}
	return &st
}

// pushInstance is the push's instance label: metrics.instance, or the
// database reconciled (host:port/dbname, never the user or password),
// which stays the same from run to run and pod to pod. A hostname would
// not: a CronJob's pod is new every night, and each would leave a group
// of its own on the gateway.
func pushInstance(cfg config.Config) string {
	if cfg.Metrics.Instance != "" {
		return cfg.Metrics.Instance
	}
	c, err := pgx.ParseConfig(cfg.Env.DatabaseURL.Reveal())
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}
