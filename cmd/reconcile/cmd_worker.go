package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/riverqueue/river"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/queue"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/store"
	"reconcile/internal/workers"
)

// cmdWorker works passes run as River jobs until SIGTERM, then stops
// gracefully: it takes no more jobs and lets those running finish within
// the grace, after which River hands what is left to another worker
// (docs/design.md, "Passes as jobs").
func cmdWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newCommand("worker")
	cfg, err := c.start(args, stdout, getenv)
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
	ws := river.NewWorkers()
	workers.Register(ws, workers.Deps{Runner: r, Store: d.store, Alerts: r.Alerts, Logger: log, Shards: cfg.Workers.Shards})
	host, _ := os.Hostname()
	q, err := openQueue(d, cfg, ws, log, fmt.Sprintf("%s-%d", host, os.Getpid()))
	if err != nil {
		return err
	}
	// Jobs run on a context SIGTERM does not cancel: Stop lets them
	// finish, then cancels them.
	if err := q.Start(context.WithoutCancel(ctx)); err != nil {
		return failed(err)
	}
	log.Info("worker started", "fetchers", cfg.Workers.Fetchers, "appliers", cfg.Workers.Appliers,
		"job_timeout", cfg.Workers.JobTimeout.String(), "rescue_after", cfg.Workers.RescueAfter.String())
	<-ctx.Done()
	log.Info("stopping: letting running jobs finish")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queue.DefaultStopTimeout+10*time.Second)
	defer cancel()
	if err := q.Stop(sctx); err != nil {
		return failed(err)
	}
	log.Info("stopped")
	return nil
}

// openQueue is the River client of the database's schema reconcile, with
// the configuration's limits; ws nil makes one that only inserts.
func openQueue(d *deps, cfg config.Config, ws *river.Workers, log *slog.Logger, id string) (*queue.Queue, error) {
	q, err := queue.Open(d.pool, queue.Config{
		Workers:              ws,
		MaxWorkers:           map[string]int{queue.StageFetch: cfg.Workers.Fetchers, queue.StageApply: cfg.Workers.Appliers},
		JobTimeout:           cfg.Workers.JobTimeout,
		RescueStuckJobsAfter: cfg.Workers.RescueAfter,
		ID:                   id,
		Logger:               log,
	})
	if err != nil {
		return nil, usageError("%v", err)
	}
	return q, nil
}

// enqueue plans a pass and hands it to the workers, returning its plan.
// With req.Wait it waits, as run --wait does for the run lock, while the
// workers are on another pass or a run holds the lock.
func enqueue(ctx context.Context, d *deps, cfg config.Config, r *runner.Runner, log *slog.Logger, req runner.Request) (runner.PassPlan, error) {
	q, err := openQueue(d, cfg, nil, log, "")
	if err != nil {
		return runner.PassPlan{}, err
	}
	plan, err := workers.Enqueue(ctx, d.pool, q, r, d.store, req, cfg.Workers.Slice)
	for req.Wait && (errors.Is(err, store.ErrPassRunning) || errors.Is(err, store.ErrLocked)) {
		select {
		case <-ctx.Done():
			return runner.PassPlan{}, failed(context.Cause(ctx))
		case <-time.After(2 * time.Second):
		}
		plan, err = workers.Enqueue(ctx, d.pool, q, r, d.store, req, cfg.Workers.Slice)
	}
	if errors.Is(err, store.ErrPassRunning) {
		return runner.PassPlan{}, failed(fmt.Errorf("%w: the workers are still on the last one; try again when it ends", err))
	}
	if err != nil {
		return runner.PassPlan{}, failed(err)
	}
	log.Info("pass enqueued", "run_id", plan.Run.ID, "accounts", len(plan.Accounts), "fetch_jobs", len(plan.Slices))
	return plan, nil
}

// awaitPass waits for the workers to end pass runID and deliver its
// alerts, as `run` returns once a pass's alerts went out, and returns
// what it concluded as the store holds it: an Outcome for the same report as a
// one-process pass prints (report.New, report.WriteText).
func awaitPass(ctx context.Context, d *deps, runID string) (*runner.Outcome, error) {
	for {
		// A pass none of whose jobs is left is failed here (RunningPass).
		if _, _, err := d.store.RunningPass(ctx); err != nil {
			return nil, failed(err)
		}
		p, err := d.store.PassResult(ctx, runID)
		if err != nil {
			return nil, failed(err)
		}
		switch {
		case p.Run.Status == reconcile.RunCompleted && p.Drained:
			out := &runner.Outcome{Run: p.Run, Transitions: p.Transitions, Covered: p.Report.Covered, EventsFrom: p.Report.EventsFrom,
				Context: p.Report.Context, Partial: p.Report.Partial, Unmapped: p.Report.Unmapped}
			out.Applied.Skipped, out.Applied.Transitions = p.Skipped, p.Transitions
			if p.AlertsError != "" {
				out.AlertErr = fmt.Errorf("%w: %s", alerts.ErrPermanent, p.AlertsError)
			}
			out.Result = matcher.Result{Conclusions: reconcile.Conclusions{Findings: p.Findings, Transitions: p.Transitions, Counts: p.Run.Counts}}
			for _, a := range p.Accounts {
				out.Accounts = append(out.Accounts, runner.AccountShare{Account: a.Account, Counts: a.Counts, Findings: a.Findings})
			}
			return out, nil
		case p.Run.Status == reconcile.RunFailed:
			return nil, failed(&runner.FailedRunError{RunID: runID, Err: errors.New(p.Error)})
		}
		select {
		case <-ctx.Done():
			return nil, failed(fmt.Errorf("pass %s is still with the workers: %w", runID, context.Cause(ctx)))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// reportEnqueued prints an ended pass's report as run prints a
// one-process pass's.
func reportEnqueued(w io.Writer, out *runner.Outcome, format string) error {
	if format == "json" {
		return writeJSON(w, report.New(out))
	}
	report.WriteText(w, out)
	return nil
}
