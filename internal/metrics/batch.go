package metrics

import (
	"context"
	"math/big"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"reconcile"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// Run statuses of reconcile_last_run_status.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// BatchRun is what one `reconcile run` knows when it ends, for the
// metrics it pushes to a Pushgateway or writes as a node_exporter textfile
// (docs/design.md, "Metrics of batch runs"). What it does not know is
// left out. A run that read the store knows the whole picture, the last
// success included, and replaces what an earlier run left; one that could
// not (the database unreachable) replaces only what it knows, leaving the
// findings, the money, the backlog and the last success as they were.
type BatchRun struct {
	// Status is StatusCompleted or StatusFailed.
	Status string
	// Duration is how long the command ran, start to finish.
	Duration time.Duration
	// Stripe is how the pass read Stripe; nil when the runner returned no
	// outcome (a failed pass), so that no zero stands for a count unknown.
	Stripe *sources.ListStats
	// Store is what the store held after the run; nil when it could not be
	// read (the database unreachable).
	Store *StoreFigures
}

// StoreFigures are the store's figures a batch run reports, read after
// the pass, and `reconcile serve`'s /metrics on each scrape.
type StoreFigures struct {
	Vitals store.Vitals
	// Open are the open findings, acknowledged included.
	Open []store.FindingRecord
	// Now is when the store was read (the outbox's oldest age).
	Now time.Time
}

// FigureStore is what the store figures are read from; *store.Store is
// one.
type FigureStore interface {
	Vitals(ctx context.Context) (store.Vitals, error)
	Findings(ctx context.Context, open bool) ([]store.FindingRecord, error)
}

// ReadStoreFigures reads the store's figures at now, for a batch run's
// metrics and serve's /metrics alike.
func ReadStoreFigures(ctx context.Context, s FigureStore, now time.Time) (StoreFigures, error) {
	v, err := s.Vitals(ctx)
	if err != nil {
		return StoreFigures{}, err
	}
	open, err := s.Findings(ctx, true)
	if err != nil {
		return StoreFigures{}, err
	}
	return StoreFigures{Vitals: v, Open: open, Now: now}, nil
}

// LastRun is the most recently started run as the metrics tell it.
type LastRun struct {
	// Status is StatusCompleted or StatusFailed.
	Status string
	// Duration is how long it took; not told when HasDuration is false
	// (a run still under way).
	Duration    time.Duration
	HasDuration bool
	// Stripe is how it read Stripe; nil when it kept no figures.
	// Requests is told only when HasRequests: the store keeps none.
	Stripe *StripeFigures
}

// StripeFigures are a run's requests to Stripe.
type StripeFigures struct {
	Requests             int
	HasRequests          bool
	Retries, RateLimited int
}

// Registry returns the run's metrics on a registry of their own, to push
// or write. Every name and meaning is shared with `reconcile schedule`
// (reconcile_last_success_timestamp_seconds) and `reconcile serve`
// (all of them), so that one alert rule fits however reconcile runs.
func (b BatchRun) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	last := LastRun{Status: b.Status, Duration: b.Duration, HasDuration: true}
	if s := b.Stripe; s != nil {
		last.Stripe = &StripeFigures{Requests: s.Requests, HasRequests: true, Retries: s.Retries, RateLimited: s.RateLimited}
	}
	last.Register(reg)
	if b.Store != nil {
		b.Store.Register(reg)
	}
	return reg
}

// Register puts the run's status, duration and Stripe figures on reg.
func (l LastRun) Register(reg *prometheus.Registry) {
	status := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reconcile_last_run_status", Help: "1 for the status of the most recently started run, 0 for the others.",
	}, []string{"status"})
	for _, s := range []string{StatusCompleted, StatusFailed} {
		status.WithLabelValues(s).Set(boolValue(l.Status == s))
	}
	reg.MustRegister(status)
	if l.HasDuration {
		gauge(reg, "reconcile_last_run_duration_seconds", "How long the most recently started run took, start to finish.", l.Duration.Seconds())
	}
	if s := l.Stripe; s != nil {
		if s.HasRequests {
			gauge(reg, "reconcile_last_run_stripe_requests",
				"HTTP requests the most recently started run sent to Stripe's list endpoints, retries included; absent when the run returned no figures.",
				float64(s.Requests))
		}
		gauge(reg, "reconcile_last_run_stripe_retries",
			"Requests to Stripe the most recently started run retried; absent when that run kept no figures.", float64(s.Retries))
		gauge(reg, "reconcile_last_run_stripe_rate_limited",
			"429 answers Stripe gave the most recently started run; absent when that run kept no figures.", float64(s.RateLimited))
	}
}

// Register puts the store's figures on reg: the last success, the
// outbox's backlog and its oldest row's age, the open findings and their
// money.
func (st StoreFigures) Register(reg *prometheus.Registry) {
	v := st.Vitals
	if !v.LastCompleted.IsZero() {
		gauge(reg, "reconcile_last_success_timestamp_seconds", "Unix time of the last completed pass.",
			float64(v.LastCompleted.UnixNano())/1e9)
	}
	gauge(reg, "reconcile_outbox_backlog", "Alerts in the outbox that Slack has not accepted yet.", float64(v.Undelivered))
	age := 0.0
	if !v.OldestUndelivered.IsZero() {
		age = max(st.Now.Sub(v.OldestUndelivered).Seconds(), 0)
	}
	gauge(reg, "reconcile_outbox_oldest_age_seconds", "Age of the oldest alert Slack has not accepted yet; 0 when none waits.", age)
	reg.MustRegister(openFindings(st.Open), openMoney(st.Open))
}

func gauge(reg *prometheus.Registry, name, help string, v float64) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	g.Set(v)
	reg.MustRegister(g)
}

// openFindings counts the open findings by kind, severity and whether
// someone acknowledged them. Every kind at its severity is reported, zero
// included, so that an alert on a series finds it and resolves.
func openFindings(fs []store.FindingRecord) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reconcile_open_findings",
		Help: "Open findings by kind and severity; acknowledged says whether someone acknowledged them (they still count as open).",
	}, []string{"kind", "severity", "acknowledged"})
	for _, k := range reconcile.Kinds {
		for _, acked := range []bool{false, true} {
			g.WithLabelValues(string(k.Kind), string(k.Severity), strconv.FormatBool(acked)).Set(0)
		}
	}
	for _, f := range fs {
		g.WithLabelValues(string(f.Kind), string(f.Severity), strconv.FormatBool(!f.AcknowledgedAt.IsZero())).Inc()
	}
	return g
}

// openMoney sums the open findings' money at risk per currency and
// meaning, in minor units. A float64 holds every integer up to 2^53
// exactly (about 90 trillion dollars in cents); a sum beyond that is
// rounded to the nearest float64, never wrapped. Currencies are never
// added together.
func openMoney(fs []store.FindingRecord) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reconcile_open_money_minor_units",
		Help: "Money at risk of the open findings (acknowledged included) in the currency's minor units, by currency and meaning " +
			"(paid_out_too_much, collected_wrong, unconfirmed); exact up to 2^53; never add currencies together.",
	}, []string{"currency", "meaning"})
	open := make([]reconcile.Finding, len(fs))
	for i := range fs {
		open[i] = fs[i].Finding
	}
	split := reconcile.SplitAtRisk(open)
	for _, m := range reconcile.Meanings {
		for _, t := range split.Of(m) {
			minor, _ := new(big.Float).SetInt(t.Big()).Float64()
			g.WithLabelValues(t.Currency, string(m)).Set(minor)
		}
	}
	return g
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
