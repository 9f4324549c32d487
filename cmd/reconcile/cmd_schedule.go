package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/robfig/cron/v3"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/runner"
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
	r, err := d.newRunner(ctx, nil)
	if err != nil {
		return err
	}
	s := &scheduler{cfg: cfg, runner: r, log: log, metrics: newMetrics()}
	return s.serve(ctx)
}

type scheduler struct {
	cfg     config.Config
	runner  *runner.Runner
	log     *slog.Logger
	metrics *metrics
}

func (s *scheduler) serve(ctx context.Context) error {
	sched, err := config.ParseSchedule(s.cfg.Schedule)
	if err != nil { // Validate already checked; this cannot fail but must not panic
		return usageError("schedule: %v", err)
	}
	if s.cfg.Metrics.Listen != "" {
		stop, err := s.metrics.serve(s.cfg.Metrics.Listen, s.log)
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

// pass runs one scheduled reconciliation over the configured lookback.
func (s *scheduler) pass(ctx context.Context) {
	now := time.Now().UTC().Truncate(time.Second)
	start := time.Now()
	out, err := s.runner.Run(ctx, runner.Request{
		Window:  reconcile.Window{From: now.Add(-s.cfg.Lookback), To: now},
		Trigger: reconcile.TriggerCron,
	})
	s.metrics.observe(out, err, time.Since(start))
	switch {
	case errors.Is(err, runner.ErrLocked):
		s.log.Info("pass skipped: another replica is running one")
	case err != nil:
		s.log.Error("pass failed", "err", err)
	case out.AlertErr != nil:
		s.log.Error("pass completed; alerts not delivered", "run_id", out.Run.ID, "err", out.AlertErr)
	default:
		s.log.Info("pass completed", "run_id", out.Run.ID, "findings", len(out.Result.Findings),
			"transitions", len(out.Transitions), "duration", time.Since(start).Round(time.Millisecond).String())
	}
}

// cronLogger routes robfig/cron's logging to slog.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append([]any{"err", err}, kv...)...)
}

// metrics are the scheduler's Prometheus metrics, on a registry of its own
// (no global state).
type metrics struct {
	reg         *prometheus.Registry
	runs        *prometheus.CounterVec
	duration    prometheus.Histogram
	findings    *prometheus.GaugeVec
	objects     prometheus.Counter
	lastSuccess prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconcile_runs_total", Help: "Reconciliation passes by outcome (completed, failed, skipped).",
		}, []string{"status"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "reconcile_run_duration_seconds", Help: "Duration of reconciliation passes.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reconcile_findings", Help: "Findings of the last completed pass by kind and severity.",
		}, []string{"kind", "severity"}),
		objects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reconcile_provider_objects_fetched_total", Help: "Provider objects read from Stripe.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reconcile_last_success_timestamp_seconds", Help: "Unix time of the last completed pass.",
		}),
	}
	m.reg.MustRegister(m.runs, m.duration, m.findings, m.objects, m.lastSuccess)
	return m
}

func (m *metrics) observe(out *runner.Outcome, err error, d time.Duration) {
	switch {
	case errors.Is(err, runner.ErrLocked):
		m.runs.WithLabelValues("skipped").Inc()
		return
	case err != nil:
		m.runs.WithLabelValues("failed").Inc()
		m.duration.Observe(d.Seconds())
		return
	}
	m.runs.WithLabelValues("completed").Inc()
	m.duration.Observe(d.Seconds())
	m.objects.Add(float64(out.Run.Counts.ProviderObjects))
	m.lastSuccess.Set(float64(out.Run.Finished.Unix()))
	m.findings.Reset()
	for _, k := range reconcile.FindingKinds {
		m.findings.WithLabelValues(string(k), string(k.Severity())).Set(0)
	}
	for _, f := range out.Result.Findings {
		m.findings.WithLabelValues(string(f.Kind), string(f.Severity)).Inc()
	}
}

// serve exposes /metrics and /healthz on addr until stop is called.
func (m *metrics) serve(addr string, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}, nil
}
