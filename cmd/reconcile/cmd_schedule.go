package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/metrics"
	"reconcile/internal/runner"
	"reconcile/internal/store"
)

// cmdSchedule runs a pass on the configured cron schedule until the
// context ends (SIGTERM), then waits for a running pass and returns nil.
func cmdSchedule(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("schedule")
	cfg, err := c.start(args, stdout, getenv) // validates the cron spec before anything starts
	if err != nil {
		return err
	}
	log := newLogger(stderr, slog.LevelInfo)
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.close()
	r, err := d.newRunner(ctx, nil, false)
	if err != nil {
		return err
	}
	s := &scheduler{cfg: cfg, runner: r, log: log, metrics: metrics.New(), deps: d}
	return s.serve(ctx)
}

type scheduler struct {
	cfg     config.Config
	runner  *runner.Runner
	log     *slog.Logger
	metrics *metrics.Metrics
	// deps, with workers.enabled, is where passes are enqueued for the
	// workers instead of run here.
	deps *deps
}

func (s *scheduler) serve(ctx context.Context) error {
	sched, err := config.ParseSchedule(s.cfg.Schedule)
	if err != nil { // Validate already checked; this cannot fail but must not panic
		return usageError("schedule: %v", err)
	}
	if s.cfg.Metrics.Listen != "" {
		stop, err := s.metrics.Serve(s.cfg.Metrics.Listen, s.log)
		if err != nil {
			return failed(err)
		}
		defer stop()
	}
	// Passes run on a context that SIGTERM does not cancel: a running pass
	// finishes (its lock, its transaction, its Slack sends) before exit.
	passCtx := context.WithoutCancel(ctx)
	logger := cronLogger{s.log}
	c := cron.New(cron.WithLocation(time.UTC), cron.WithLogger(logger),
		cron.WithChain(cron.Recover(logger), cron.SkipIfStillRunning(logger)))
	c.Schedule(sched, cron.FuncJob(func() { s.pass(passCtx) }))
	c.Start()
	s.log.Info("schedule started", "spec", s.cfg.Schedule, "next", sched.Next(time.Now().UTC()))
	<-ctx.Done()
	s.log.Info("stopping: waiting for a running pass to finish")
	<-c.Stop().Done()
	s.log.Info("stopped")
	return nil
}

// pass runs one scheduled reconciliation over the configured lookback,
// or with workers.enabled hands it to the workers.
func (s *scheduler) pass(ctx context.Context) {
	now := time.Now().UTC().Truncate(time.Second)
	start := time.Now()
	if s.cfg.Workers.Enabled {
		req := runner.Request{Window: reconcile.Window{From: now.Add(-s.cfg.Lookback), To: now}, Trigger: reconcile.TriggerCron}
		_, err := enqueue(ctx, s.deps, s.cfg, s.runner, s.log, req)
		switch {
		case errors.Is(err, store.ErrPassRunning) || errors.Is(err, store.ErrLocked):
			s.log.Info("pass skipped: the workers are still on the last one, or a run holds the lock", "error", err)
		case err != nil:
			s.log.Error("pass not enqueued", "error", err)
		}
		return
	}
	out, err := s.runner.Run(ctx, runner.Request{
		Window:  reconcile.Window{From: now.Add(-s.cfg.Lookback), To: now},
		Trigger: reconcile.TriggerCron,
	})
	s.metrics.Observe(out, err, time.Since(start))
	switch {
	case errors.Is(err, runner.ErrLocked):
		s.log.Info("pass skipped: another replica is running one")
	case err != nil:
		s.log.Error("pass failed", "error", err)
	case errors.Is(out.AlertErr, alerts.ErrPermanent):
		// The pass logged the one error line, with Slack's code, and the
		// metrics count it (docs/design.md, "Alert lifecycle").
		s.log.Info("pass completed; alerts cannot be delivered until someone looks", "run_id", out.Run.ID)
	case out.AlertErr != nil:
		s.log.Error("pass completed; alerts not delivered", "run_id", out.Run.ID, "error", out.AlertErr)
	default:
		s.log.Info("pass completed", "run_id", out.Run.ID, "findings", len(out.Result.Findings),
			"transitions", len(out.Transitions), "duration", time.Since(start).Round(time.Millisecond).String())
	}
}

// cronLogger routes robfig/cron's logging to slog.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append([]any{"error", err}, kv...)...)
}
