// Package metrics holds the Prometheus metrics of `reconcile schedule` and
// the HTTP handler that serves them beside a health check. The metrics
// live on a registry of their own, made by New, so that nothing is global
// and two schedulers in one process (or two tests) do not share counters.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/runner"
)

// Metrics are the scheduler's collectors on their own registry.
type Metrics struct {
	reg         *prometheus.Registry
	runs        *prometheus.CounterVec
	duration    prometheus.Histogram
	findings    *prometheus.GaugeVec
	objects     prometheus.Counter
	lastSuccess prometheus.Gauge
	undelivered *prometheus.CounterVec
}

// New returns the metrics, registered on a new registry.
func New() *Metrics {
	m := &Metrics{
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
		undelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reconcile_alert_delivery_failures_total",
			Help: "Completed passes whose Slack delivery stopped until someone fixes it (a setting, or an answer this version does not know), by Slack's error code or HTTP status.",
		}, []string{"code"}),
	}
	m.reg.MustRegister(m.runs, m.duration, m.findings, m.objects, m.lastSuccess, m.undelivered)
	return m
}

// Observe records one pass that took d: out and err as runner.Run
// returned them. A pass skipped for another's lock counts as skipped and
// is not timed; a failed one leaves the findings of the last completed
// pass standing. A completed pass sets every kind's gauge, to zero for the
// kinds it did not find, so that an alert on a kind resolves when the kind
// goes away instead of going stale; one whose alerts cannot be delivered
// until someone looks (alerts.PermanentError) counts a delivery failure
// under Slack's code (docs/design.md, "Alert lifecycle").
func (m *Metrics) Observe(out *runner.Outcome, err error, d time.Duration) {
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
	if pe, ok := errors.AsType[*alerts.PermanentError](out.AlertErr); ok {
		m.undelivered.WithLabelValues(pe.Reason).Inc()
	}
}

// Handler serves the metrics on /metrics and "ok" on /healthz.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Serve listens on addr and serves Handler until stop is called, which
// waits up to five seconds for requests in flight. It fails only when addr
// cannot be listened on; a server that stops later logs why.
func (m *Metrics) Serve(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "error", err)
		}
	}()
	log.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}, nil
}
