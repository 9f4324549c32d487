package web

import (
	"reconcile"

	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"reconcile/internal/metrics"
	"reconcile/internal/redact"
	"reconcile/internal/store"
)

// MetricsStore is what /metrics reads beside the findings and the runs;
// *store.Store is one.
type MetricsStore interface {
	// Vitals returns the outbox's backlog and the last completed run.
	Vitals(ctx context.Context) (store.Vitals, error)
}

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 5 * time.Second

// metricsHandler serves /metrics (docs/design.md, "The findings page"):
// the store read on each scrape, within scrapeTimeout, and its figures
// put on a registry of that scrape's own, by internal/metrics as `run`
// pushes them, so that one name means one thing however reconcile runs.
// A read that fails or times out leaves the store's figures out and
// counts it in reconcile_serve_scrape_errors_total: the scrape still
// answers 200. Its sign-in is the pages': it tells money totals, so in
// auth none only loopback may read it.
func (s *server) metricsHandler() http.Handler {
	errs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reconcile_serve_scrape_errors_total",
		Help: "Scrapes of serve's /metrics whose store reads failed or timed out; those scrapes leave the store's figures out.",
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if userOf(r).name == "" {
			http.Error(w, "/metrics answers only signed-in users, or requests from this machine", http.StatusForbidden)
			return
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(errs)
		if err := s.figures(r.Context(), reg); err != nil {
			errs.Inc()
			s.logger.Error("metrics: read the store", "error", redact.String(err.Error()))
			reg = prometheus.NewRegistry()
			reg.MustRegister(errs)
		}
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

// figures reads the store and registers what it holds on reg.
func (s *server) figures(ctx context.Context, reg *prometheus.Registry) error {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	figures, err := metrics.ReadStoreFigures(ctx, s.store, s.now())
	if err != nil {
		return err
	}
	runs, err := s.store.LastRuns(ctx, 2)
	if err != nil {
		return err
	}
	figures.Register(reg)
	// The last run that ended, as healthz tells it: a pass the workers
	// are still running has no status yet.
	if len(runs) > 0 && runs[0].Status == reconcile.RunRunning {
		runs = runs[1:]
	}
	if len(runs) == 0 {
		return nil
	}
	r := runs[0]
	last := metrics.LastRun{Status: string(r.Status), HasDuration: !r.Finished.IsZero()}
	if last.HasDuration {
		last.Duration = r.Finished.Sub(r.Started)
	}
	if r.Stripe != nil {
		last.Stripe = &metrics.StripeFigures{Retries: r.Stripe.Retries, RateLimited: r.Stripe.RateLimited}
	}
	last.Register(reg)
	return nil
}
