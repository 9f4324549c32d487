package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/report"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
)

// runFlags are `reconcile run`'s flags.
type runFlags struct {
	since, from, to string
	dryRun, wait    bool
	full, enqueue   bool
	format          *formatFlag
	failOn          string
}

func cmdRun(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	c := newCommand("run")
	var f runFlags
	c.fs.StringVar(&f.since, "since", "", "reconcile the window ending now of this length, e.g. 72h (default: the configured lookback)")
	c.fs.StringVar(&f.from, "from", "", "start of the window (RFC 3339 or a date)")
	c.fs.StringVar(&f.to, "to", "", "end of the window (RFC 3339 or a date; default now)")
	c.fs.BoolVar(&f.dryRun, "dry-run", false, "compute and report; write and post nothing")
	c.fs.BoolVar(&f.wait, "wait", false, "wait for another run's lock instead of exiting 1")
	c.fs.BoolVar(&f.full, "full", false, "read the whole window from Stripe, not only what the mirror of earlier runs lacks")
	c.fs.BoolVar(&f.enqueue, "enqueue", false, "hand the pass to the workers (reconcile worker; needs workers.enabled) and wait for them to end it")
	c.fs.StringVar(&f.failOn, "fail-on", "", "exit 3 when a finding at or above this severity is found: critical, high or warning")
	f.format = c.format("text", "json")
	// A failed run still leaves its record on stdout, where cron keeps
	// it: one JSON object saying so, unless the report was printed (a
	// completed run whose alerts cannot be delivered).
	reported := false
	defer func() {
		if err != nil && !reported && f.format.value == "json" && !errors.Is(err, errHelp) {
			writeFailure(stdout, err)
		}
	}()
	cfg, err := c.start(args, stdout, getenv)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	window, err := f.window(now, cfg.Lookback)
	if err != nil {
		return err
	}
	var failOn reconcile.Severity
	if f.failOn != "" {
		sev, ok := reconcile.ParseSeverity(f.failOn)
		if !ok || sev == reconcile.Info {
			return usageError("run: --fail-on %q: want critical, high or warning", f.failOn)
		}
		failOn = sev
	}

	if f.enqueue && !cfg.Workers.Enabled {
		return usageError("run --enqueue: workers.enabled is not set; set it once workers run (reconcile worker), or drop --enqueue to run the pass here")
	}
	if f.enqueue && f.dryRun {
		return usageError("run: --enqueue and --dry-run: a dry run writes nothing and runs here; drop one")
	}
	log := newLogger(stderr, slog.LevelInfo)
	// From the database on, the run leaves its metrics, completed or
	// failed (docs/design.md, "Metrics of batch runs").
	bm := newBatchMetrics(cfg, log, f.dryRun)
	d, err := openDB(ctx, cfg, log)
	if err != nil {
		// An unset or malformed DATABASE_URL is a usage error, which
		// pushes nothing; an unreachable database is a failed run.
		if ee, ok := errors.AsType[*exitError](err); !ok || ee.code != exitUsage {
			bm.leave(ctx, nil, nil, nil)
		}
		return err
	}
	defer d.close()
	var (
		out     *runner.Outcome
		passErr error
	)
	// Before d.close: the metrics read the store.
	defer func() { bm.leave(ctx, d, out, passErr) }()
	// The pass's own peak memory, its last line however it ended.
	defer func() { logPeak(log, out, passErr) }()
	var progress *progressLine
	if isTerminal(stderr) {
		progress = &progressLine{w: stderr, start: time.Now()}
	}
	r, err := d.newRunner(ctx, progress.update, f.dryRun)
	if err != nil {
		return err
	}
	req := runner.Request{Window: window, DryRun: f.dryRun, Trigger: reconcile.TriggerManual, Wait: f.wait, Full: f.full}
	if f.enqueue {
		// The workers run it (docs/design.md, "Passes as jobs"); the
		// report is the same as a pass run here prints.
		plan, err := enqueue(ctx, d, cfg, r, log, req)
		if err != nil {
			passErr = err
			return err
		}
		out, passErr = awaitPass(ctx, d, plan.Run.ID)
		progress.done()
		if passErr != nil {
			return passErr
		}
		reported = true
		if err := reportEnqueued(stdout, out, f.format.value); err != nil {
			return failed(err)
		}
		return outcomeError(out, failOn)
	}
	out, passErr = r.Run(ctx, req)
	err = passErr
	progress.done()
	if out == nil {
		return failed(err)
	}
	// A pass that lost its run lock after it applied returns its outcome
	// with the error: the reconciliation completed, so its report is
	// printed, and the run still failed.
	reported = true
	if f.format.value == "json" {
		if err := writeJSON(stdout, report.New(out)); err != nil {
			return failed(err)
		}
	} else {
		report.WriteText(stdout, out)
	}
	if err != nil {
		return failed(err)
	}
	return outcomeError(out, failOn)
}

// outcomeError maps a completed pass to its exit status: alerts that no
// retry can deliver are exit 1 (someone must fix the Slack settings, or
// look at an answer this version does not know: docs/design.md, "Alert
// lifecycle"); findings at or above --fail-on are exit 3.
func outcomeError(out *runner.Outcome, failOn reconcile.Severity) error {
	if out.AlertErr != nil && errors.Is(out.AlertErr, alerts.ErrPermanent) {
		return failed(out.AlertErr)
	}
	if failOn != "" && reconcile.Severe(out.Result.Findings, failOn) {
		return &exitError{code: exitFindings}
	}
	return nil
}

// window turns --since / --from / --to into the run's window, truncated
// to whole seconds as Stripe's created times are.
func (f runFlags) window(now time.Time, lookback time.Duration) (reconcile.Window, error) {
	now = now.Truncate(time.Second)
	if f.since != "" && (f.from != "" || f.to != "") {
		return reconcile.Window{}, usageError("run: give --since or --from/--to, not both")
	}
	w := reconcile.Window{From: now.Add(-lookback), To: now}
	if f.since != "" {
		d, err := time.ParseDuration(f.since)
		if err != nil || d <= 0 {
			return reconcile.Window{}, usageError("run: --since %q: want a positive duration such as 72h or 30m", f.since)
		}
		w.From = now.Add(-d)
		return w, nil
	}
	if f.to != "" {
		t, err := parseTime(f.to)
		if err != nil {
			return reconcile.Window{}, usageError("run: --to: %v", err)
		}
		if t.After(now) {
			t = now // nothing is created in the future; a window ending later proves no more
		}
		w.To = t
		w.From = t.Add(-lookback)
	}
	if f.from != "" {
		t, err := parseTime(f.from)
		if err != nil {
			return reconcile.Window{}, usageError("run: --from: %v", err)
		}
		w.From = t
	}
	if !w.From.Before(w.To) {
		return reconcile.Window{}, usageError("run: --from %s is not before --to %s", stamp(w.From), stamp(w.To))
	}
	return w, nil
}

// progressLine shows the long reads on a terminal: objects fetched per
// type, pages and request rate, rewritten in place. A nil *progressLine
// does nothing, so callers need not check.
type progressLine struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	last  time.Time
	shown bool
}

func (p *progressLine) update(ev sources.ProgressEvent) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = now
	rate := float64(ev.Pages+ev.Retries) / max(now.Sub(p.start).Seconds(), 0.001)
	fmt.Fprintf(p.w, "\r\033[Kreading stripe: %d objects and events, %d pages (now %s), %d retries, %.1f req/s",
		ev.Items, ev.Pages, ev.List, ev.Retries, rate)
	p.shown = true
}

func (p *progressLine) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// logPeak logs, for the pass that began (its outcome, or the error
// naming it), the process's peak resident set where the platform tells
// it, so that a run's memory is read from its own log.
func logPeak(log *slog.Logger, out *runner.Outcome, err error) {
	id := ""
	if out != nil {
		id = out.Run.ID
	} else if fe, ok := errors.AsType[*runner.FailedRunError](err); ok {
		id = fe.RunID
	}
	if b, ok := peakRSS(); ok && id != "" {
		log.Info("peak memory", "run_id", id, "peak_rss_bytes", b, "peak_rss_mib", b>>20)
	}
}
