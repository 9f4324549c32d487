package web

import (
	"context"
	"log/slog"
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"reconcile"

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

// The metrics of serve's /metrics (docs/design.md, "The findings page"),
// read from the store on every scrape. Money is a float64 gauge of minor
// units, exact up to 2^53 (about 90 trillion dollars in cents); totals are
// per currency and meaning, never summed across currencies.
var (
	descBacklog = prometheus.NewDesc("reconcile_outbox_backlog",
		"Alerts in the outbox that Slack has not accepted yet.", nil, nil)
	descOldest = prometheus.NewDesc("reconcile_outbox_oldest_age_seconds",
		"Age of the oldest alert Slack has not accepted yet; 0 when none waits.", nil, nil)
	descFindings = prometheus.NewDesc("reconcile_open_findings",
		"Open findings by kind and severity; acknowledged says whether someone acknowledged them (they still count as open).",
		[]string{"kind", "severity", "acknowledged"}, nil)
	descMoney = prometheus.NewDesc("reconcile_open_money_minor_units",
		"Money at risk of the open findings (acknowledged included) in the currency's minor units, by currency and meaning "+
			"(paid_out_too_much, collected_wrong, unconfirmed); exact up to 2^53; never add currencies together.",
		[]string{"currency", "meaning"}, nil)
	descRunStatus = prometheus.NewDesc("reconcile_last_run_status",
		"1 for the status of the most recently started run, 0 for the others.", []string{"status"}, nil)
	descRunDuration = prometheus.NewDesc("reconcile_last_run_duration_seconds",
		"How long the most recently started run took, start to finish.", nil, nil)
	descLastCompleted = prometheus.NewDesc("reconcile_last_completed_run_timestamp_seconds",
		"Unix time the newest completed run finished.", nil, nil)
	descRateLimited = prometheus.NewDesc("reconcile_last_run_stripe_rate_limited",
		"429 answers Stripe gave the most recently started run; absent when that run kept no figures.", nil, nil)
	descRetries = prometheus.NewDesc("reconcile_last_run_stripe_retries",
		"Requests to Stripe the most recently started run retried; absent when that run kept no figures.", nil, nil)
)

// runStatuses are the statuses reconcile_last_run_status reports on.
var runStatuses = []reconcile.RunStatus{reconcile.RunCompleted, reconcile.RunFailed}

// collector reads the store on Collect. A read that fails or times out
// leaves the store's metrics out of that scrape and counts it in
// reconcile_serve_scrape_errors_total: the scrape still answers 200.
type collector struct {
	store  Store
	now    func() time.Time
	logger *slog.Logger
	errors prometheus.Counter
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBacklog, descOldest, descFindings, descMoney, descRunStatus,
		descRunDuration, descLastCompleted, descRateLimited, descRetries} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	v, err := c.store.Vitals(ctx)
	var (
		fs   []store.FindingRecord
		runs []store.RunRecord
	)
	if err == nil {
		fs, err = c.store.Findings(ctx, true)
	}
	if err == nil {
		runs, err = c.store.LastRuns(ctx, 1)
	}
	if err != nil {
		c.errors.Inc()
		c.logger.Error("metrics: read the store", "error", redact.String(err.Error()))
		return
	}
	gauge := func(d *prometheus.Desc, value float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, value, labels...)
	}
	gauge(descBacklog, float64(v.Undelivered))
	age := 0.0
	if !v.OldestUndelivered.IsZero() {
		age = max(c.now().Sub(v.OldestUndelivered).Seconds(), 0)
	}
	gauge(descOldest, age)
	if !v.LastCompleted.IsZero() {
		gauge(descLastCompleted, float64(v.LastCompleted.UnixNano())/1e9)
	}

	type group struct {
		kind     reconcile.FindingKind
		severity reconcile.Severity
		acked    bool
	}
	// Every kind at its severity is reported, zero included, so that an
	// alert on a series finds it; a finding of another severity adds its
	// own.
	counts := map[group]int{}
	for _, k := range reconcile.Kinds {
		counts[group{k.Kind, k.Severity, false}] = 0
		counts[group{k.Kind, k.Severity, true}] = 0
	}
	open := make([]reconcile.Finding, 0, len(fs))
	for _, f := range fs {
		counts[group{f.Kind, f.Severity, !f.AcknowledgedAt.IsZero()}]++
		open = append(open, f.Finding)
	}
	for g, n := range counts {
		gauge(descFindings, float64(n), string(g.kind), string(g.severity), strconv.FormatBool(g.acked))
	}
	split := reconcile.SplitAtRisk(open)
	for _, m := range reconcile.Meanings {
		for _, t := range split.Of(m) {
			minor, _ := new(big.Float).SetInt(t.Big()).Float64()
			gauge(descMoney, minor, t.Currency, string(m))
		}
	}

	if len(runs) == 0 {
		return
	}
	last := runs[0]
	for _, s := range runStatuses {
		gauge(descRunStatus, map[bool]float64{true: 1}[last.Status == s], string(s))
	}
	if !last.Finished.IsZero() {
		gauge(descRunDuration, last.Finished.Sub(last.Started).Seconds())
	}
	if last.Stripe != nil {
		gauge(descRateLimited, float64(last.Stripe.RateLimited))
		gauge(descRetries, float64(last.Stripe.Retries))
	}
}

// metricsHandler serves /metrics from a registry of its own. Its sign-in
// is the pages' (docs/design.md, "The findings page"): it tells money
// totals, so in auth none only loopback may read it.
func (s *server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	errs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reconcile_serve_scrape_errors_total",
		Help: "Scrapes of serve's /metrics whose store reads failed or timed out; those scrapes leave the store's figures out.",
	})
	reg.MustRegister(errs, &collector{store: s.store, now: s.now, logger: s.logger, errors: errs})
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if userOf(r).name == "" {
			http.Error(w, "/metrics answers only signed-in users, or requests from this machine", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
