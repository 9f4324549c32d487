package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/runner"
	"reconcile/internal/slacktest"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

// errKilled is what a killed pass's process no longer does: every call a
// dead process would make fails with it.
var errKilled = errors.New("sim: the process was killed")

// passPlan is what one pass meets.
type passPlan struct {
	window reconcile.Window
	dryRun bool
	full   bool // run --full: read the whole window even where the mirror could vouch for it

	stripe       stripesim.Faults // while listing
	retrieveFail bool             // every retrieval by id answers 500
	// stripeTimeout lists the listing requests (1-based, in the pass)
	// whose answer never arrives in time: the reader sees a timeout.
	stripeTimeout map[int]bool
	slack         slacktest.Faults
	loseResponse  map[int]bool // Slack requests (1-based, in the pass) accepted whose answer is lost
	loseRequest   map[int]bool // Slack requests lost before they reach Slack

	killAfterPage  int  // kill once this many pages were read; 0: never
	killAfterApply bool // kill once Apply committed, before alerts
	killAfterSend  int  // kill at this MarkSent call (Slack accepted, not yet recorded); 0: never
	interleave     bool // a worker changes an obligation the pass will transition, between read and apply
}

func (p passPlan) String() string {
	var parts []string
	if p.dryRun {
		parts = append(parts, "dry")
	}
	if p.full {
		parts = append(parts, "full")
	}
	parts = append(parts, fmt.Sprintf("window=%s..%s", p.window.From.Sub(epoch), p.window.To.Sub(epoch)))
	f := p.stripe
	if f.RateLimitP > 0 {
		parts = append(parts, fmt.Sprintf("stripe429=%.2f", f.RateLimitP))
	}
	if f.ServerErrorP > 0 {
		parts = append(parts, fmt.Sprintf("stripe500=%.2f", f.ServerErrorP))
	}
	if f.DropP > 0 {
		parts = append(parts, fmt.Sprintf("stripedrop=%.2f", f.DropP))
	}
	if f.FailList != "" {
		parts = append(parts, fmt.Sprintf("faillist=%s@%d", f.FailList, f.FailListAfter))
	}
	if p.retrieveFail {
		parts = append(parts, "lookupfail")
	}
	if len(p.stripeTimeout) > 0 {
		parts = append(parts, fmt.Sprintf("stripetimeout=%v", slices.Sorted(maps.Keys(p.stripeTimeout))))
	}
	s := p.slack
	if s.RateLimit > 0 {
		parts = append(parts, fmt.Sprintf("slack429=%d/%ds", s.RateLimit, s.RetryAfter))
	}
	if s.ServerErr > 0 {
		parts = append(parts, fmt.Sprintf("slack500=%d", s.ServerErr))
	}
	if s.Down {
		parts = append(parts, "slackdown")
	}
	if s.BadAuth {
		parts = append(parts, "slackbadauth")
	}
	if len(p.loseResponse) > 0 {
		parts = append(parts, fmt.Sprintf("loseresp=%v", slices.Sorted(maps.Keys(p.loseResponse))))
	}
	if len(p.loseRequest) > 0 {
		parts = append(parts, fmt.Sprintf("losereq=%v", slices.Sorted(maps.Keys(p.loseRequest))))
	}
	if p.killAfterPage > 0 {
		parts = append(parts, fmt.Sprintf("kill@page%d", p.killAfterPage))
	}
	if p.killAfterApply {
		parts = append(parts, "kill@apply")
	}
	if p.killAfterSend > 0 {
		parts = append(parts, fmt.Sprintf("kill@send%d", p.killAfterSend))
	}
	if p.interleave {
		parts = append(parts, "interleave")
	}
	return strings.Join(parts, " ")
}

// passCtl is one pass: its plan, its kill switch, and what the wrappers
// saw it do, for the oracle.
type passCtl struct {
	w      *world
	n      int // the pass's number in the history, once begun
	plan   passPlan
	ctx    context.Context
	cancel context.CancelFunc
	killed atomic.Bool
	pair   *pair // set for two passes started at once
	jobs   bool  // run as jobs (runJobPass)
	// stuckRun is the run of a pass as jobs left running by a job River
	// discarded (checkJobPass).
	stuckRun string

	// Under w.mu from here.
	began       bool
	killedAt    string
	start       time.Time
	before      dbState
	truth       *ledger // the ledger when the pass began
	exp         *expectation
	failed      map[string]bool // ids whose retrieval failed
	pages       int
	sends       int
	slackReqs   int
	listing     bool // the provider is being listed (not retrieved from)
	stripeReqs  int  // listing requests sent
	result      *reconcile.Conclusions
	applied     *store.Applied
	applyErr    error
	interleaved string // the obligation a worker changed mid-pass
	fired       map[string]bool
	runErr      error
	outcome     *runner.Outcome
	checked     bool
}

// pair coordinates two passes started at once.
type pair struct {
	wait    bool
	plans   []passPlan
	tickets int
	mu      sync.Mutex
	lost    chan struct{} // closed when the other pass found the lock taken
	ctls    []*passCtl
}

func (w *world) newPass(plan passPlan) *passCtl {
	ctx, cancel := context.WithCancel(w.ctx)
	return &passCtl{w: w, plan: plan, ctx: ctx, cancel: cancel, fired: map[string]bool{}, failed: map[string]bool{}}
}

// kill stops the pass's process: its context ends and every later call of
// its store and provider fails. Called under w.mu.
func (pc *passCtl) kill(at string) {
	if pc.killed.Swap(true) {
		return
	}
	pc.killedAt = at
	pc.fired["kill_after_"+at] = true
	pc.cancel()
}

// begin starts the pass under w.mu: it takes its number, sets the faults,
// snapshots the database and computes what the oracle expects.
func (pc *passCtl) begin() error {
	w := pc.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if pc.began {
		return nil
	}
	if pc.pair != nil {
		// Passes of a pair take their plans in the order they got the lock,
		// so that the history does not depend on which goroutine won.
		p := pc.pair
		p.mu.Lock()
		pc.plan = p.plans[p.tickets]
		p.tickets++
		prev := slices.Clone(p.ctls)
		p.ctls = append(p.ctls, pc)
		p.mu.Unlock()
		for _, q := range prev {
			w.checkPass(q) // the earlier pass ended: the lock is free again
		}
	}
	w.passes++
	pc.n = w.passes
	pc.began = true
	pc.start = w.clock.Now()
	w.rep.Passes++
	before, err := w.snapshot(w.ctx)
	if err != nil {
		return err
	}
	pc.before = before
	pc.truth = w.led.clone()
	w.stripe.ResetStats()
	w.slack.SetFaults(pc.plan.slack)
	w.obs.beginPass(pc)
	w.tracef("pass %d begins: %s", pc.n, pc.plan)
	if w.afterBegin != nil {
		return w.afterBegin(pc)
	}
	return nil
}

// simStore wraps the real store: it begins the pass when the lock is
// taken, and kills the pass at the boundaries its plan names.
type simStore struct {
	inner *store.Store
	pc    *passCtl
}

func (s *simStore) Lock(ctx context.Context, wait bool) (*store.Lock, error) {
	if s.pc.killed.Load() {
		return nil, errKilled
	}
	l, err := s.inner.Lock(ctx, wait)
	if err != nil {
		if p := s.pc.pair; p != nil && errors.Is(err, store.ErrLocked) {
			close(p.lost)
		}
		return nil, err
	}
	if err := s.pc.begin(); err != nil {
		l.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return l, nil
}

func (s *simStore) Apply(ctx context.Context, run reconcile.Run, res reconcile.Conclusions, now time.Time) (store.Applied, error) {
	pc, w := s.pc, s.pc.w
	if pc.killed.Load() {
		return store.Applied{}, errKilled
	}
	w.mu.Lock()
	pc.result = &res
	if pc.plan.interleave && len(res.Transitions) > 0 {
		if err := w.interleave(pc, res.Transitions); err != nil {
			w.mu.Unlock()
			return store.Applied{}, err
		}
	}
	w.mu.Unlock()
	applied, err := s.inner.Apply(ctx, run, res, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		pc.applyErr = err
		return applied, err
	}
	pc.applied = &applied
	if pc.plan.killAfterApply {
		pc.kill("apply")
		return store.Applied{}, errKilled
	}
	return applied, nil
}

func (s *simStore) RecordFailedRun(ctx context.Context, run reconcile.Run, cause string) error {
	if s.pc.killed.Load() {
		return errKilled
	}
	return s.inner.RecordFailedRun(ctx, run, cause)
}

func (s *simStore) Due(ctx context.Context, now time.Time, limit int) ([]reconcile.Alert, error) {
	if s.pc.killed.Load() {
		return nil, errKilled
	}
	rows, err := s.inner.Due(ctx, now, limit)
	if err != nil {
		return nil, err
	}
	s.pc.w.obs.due(s.pc, rows, now)
	return rows, nil
}

func (s *simStore) Fence(ctx context.Context) (func(), error) {
	if s.pc.killed.Load() {
		return nil, errKilled
	}
	return s.inner.Fence(ctx)
}

func (s *simStore) MarkSending(ctx context.Context, ids []int64, at time.Time) error {
	if s.pc.killed.Load() {
		return errKilled
	}
	return s.inner.MarkSending(ctx, ids, at)
}

func (s *simStore) MarkSent(ctx context.Context, id int64, channel, ts string, at time.Time) error {
	pc, w := s.pc, s.pc.w
	if pc.killed.Load() {
		return errKilled
	}
	w.mu.Lock()
	pc.sends++
	if pc.plan.killAfterSend > 0 && pc.sends == pc.plan.killAfterSend {
		// Slack has the message; the process dies before recording it.
		w.obs.killedAfterSend(id)
		pc.kill("send")
		w.mu.Unlock()
		return errKilled
	}
	w.mu.Unlock()
	return s.inner.MarkSent(ctx, id, channel, ts, at)
}

func (s *simStore) RecordMessage(ctx context.Context, m reconcile.SlackMessage) error {
	if s.pc.killed.Load() {
		return errKilled
	}
	return s.inner.RecordMessage(ctx, m)
}

func (s *simStore) MarkAttempt(ctx context.Context, id int64, next time.Time, unknown bool, errText string) error {
	if s.pc.killed.Load() {
		return errKilled
	}
	return s.inner.MarkAttempt(ctx, id, next, unknown, errText)
}

// simProvider wraps the real Stripe reader: it sets the plan's faults
// around each phase, so that faults meet the same requests on every run
// of a seed, and counts which faults fired.
type simProvider struct {
	inner *sources.Stripe
	pc    *passCtl
}

func (p *simProvider) List(ctx context.Context, win reconcile.Window) (*sources.Listing, error) {
	var l *sources.Listing
	err := p.read(func() error {
		var err error
		l, err = p.inner.List(ctx, win)
		return err
	})
	return l, err
}

// Sync makes simProvider a runner.Syncer, as the Stripe reader is, so
// that passes with a mirror read incrementally.
func (p *simProvider) Sync(ctx context.Context, req sources.SyncRequest) (*sources.Sync, error) {
	var s *sources.Sync
	err := p.read(func() error {
		var err error
		s, err = p.inner.Sync(ctx, req)
		return err
	})
	return s, err
}

// read runs one listing under the plan's faults.
func (p *simProvider) read(list func() error) error {
	pc, w := p.pc, p.pc.w
	if err := pc.begin(); err != nil { // a dry run takes no lock
		return err
	}
	if pc.killed.Load() {
		return errKilled
	}
	w.stripe.SetFaults(pc.plan.stripe)
	w.mu.Lock()
	pc.listing = true
	w.mu.Unlock()
	err := list()
	w.stripe.SetFaults(stripesim.Faults{})
	st := w.stripe.Stats()
	w.mu.Lock()
	pc.listing = false
	defer w.mu.Unlock()
	if st.RateLimited > 0 {
		pc.fired["stripe_429"] = true
	}
	if st.ServerErrors > 0 {
		if pc.plan.stripe.FailList != "" {
			pc.fired["stripe_missing_page"] = true
		} else {
			pc.fired["stripe_5xx"] = true
		}
	}
	if st.Dropped > 0 {
		pc.fired["stripe_drop"] = true
	}
	if st.Malformed > 0 {
		pc.fired["stripe_malformed"] = true
	}
	if pc.killed.Load() {
		return errKilled
	}
	return err
}

func (p *simProvider) Retrieve(ctx context.Context, ids []string) ([]reconcile.ProviderObject, []reconcile.Lookup) {
	pc, w := p.pc, p.pc.w
	if pc.killed.Load() {
		ls := make([]reconcile.Lookup, len(ids))
		for i, id := range ids {
			ls[i] = reconcile.Lookup{ID: id, Result: reconcile.LookupFailed, Err: errKilled.Error()}
		}
		return nil, ls
	}
	if pc.plan.retrieveFail {
		// Every retrieval fails, whatever order the reader sends them in.
		w.stripe.SetFaults(stripesim.Faults{ServerErrorEvery: 1})
	}
	objs, ls := p.inner.Retrieve(ctx, ids)
	w.stripe.SetFaults(stripesim.Faults{})
	w.mu.Lock()
	for _, l := range ls {
		if l.Result == reconcile.LookupFailed {
			pc.failed[l.ID] = true
		}
	}
	if pc.plan.retrieveFail && len(ids) > 0 {
		pc.fired["stripe_lookup_fail"] = true
	}
	w.mu.Unlock()
	return objs, ls
}

// onPage is the Stripe reader's progress callback: the place to kill a
// pass after a page.
func (pc *passCtl) onPage(sources.ProgressEvent) {
	w := pc.w
	w.mu.Lock()
	defer w.mu.Unlock()
	pc.pages++
	if pc.plan.killAfterPage > 0 && pc.pages == pc.plan.killAfterPage {
		pc.kill("page")
	}
}

// newRunner wires a pass as cmd/reconcile does, against the fakes, with
// small retry backoffs, no pacing and the virtual clock.
func (w *world) newRunner(pc *passCtl) (*runner.Runner, error) {
	st, err := sources.NewStripe(sources.StripeOptions{
		APIKey:      canaryStripeKey,
		BaseURL:     w.stripeURL,
		Rate:        math.Inf(1),
		Concurrency: 1, // one request at a time: faults meet the same requests on every run
		MaxRetries:  3,
		RetryBase:   20 * time.Microsecond,
		RetryMax:    200 * time.Microsecond,
		Seed:        w.seed | 1,
		// Generous: a request is never timed out by the machine's load,
		// which would make a history depend on it.
		RequestTimeout: 30 * time.Second,
		Logger:         w.log,
		Progress:       pc.onPage,
		HTTPClient:     &http.Client{Transport: &stripeTransport{pc: pc, base: http.DefaultTransport}},
	})
	if err != nil {
		return nil, err
	}
	opts := alerts.SlackOptions{
		APIURL:             w.slackURL + "/api/",
		PerChannelInterval: 0, // no pacing: the virtual clock
		MaxRetries:         2,
		Timeout:            30 * time.Second,
		HTTPClient:         &http.Client{Transport: &slackTransport{pc: pc, base: http.DefaultTransport}},
		Logger:             w.log,
		BackoffBase:        time.Microsecond,
		BackoffMax:         time.Microsecond,
		MaxRetryAfter:      2 * time.Minute,
		Sleep:              backoffSleep,
	}
	if w.webhook {
		opts.WebhookURL = w.slackURL + "/services/T0SIM/B0SIM/" + canaryHookToken
	} else {
		opts.BotToken, opts.Channel = canaryBotToken, "C0SIMFIN"
	}
	d, err := alerts.NewSlack(opts)
	if err != nil {
		return nil, err
	}
	w.obs.popts = d.PlanOptions()
	r := &runner.Runner{
		Provider:    &simProvider{inner: st, pc: pc},
		Obligations: w.obligations,
		Store:       &simStore{inner: w.store, pc: pc},
		Alerts:      d,
		Matcher:     matcher.OptionsFrom(config.Default().Matcher),
		Now:         w.clock.Now,
		Logger:      w.log,
		MaxLookback: w.maxLookback,
	}
	if w.mirror {
		r.Mirror = store.NewMirror(w.pool)
	}
	return r, nil
}

// runPass runs one pass to its end and checks it.
func (w *world) runPass(plan passPlan) (*passCtl, error) {
	pc := w.newPass(plan)
	r, err := w.newRunner(pc)
	if err != nil {
		return nil, err
	}
	out, err := r.Run(pc.ctx, runner.Request{Window: plan.window, DryRun: plan.dryRun, Full: plan.full, Trigger: reconcile.TriggerManual})
	pc.cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	pc.outcome, pc.runErr = out, err
	if !pc.began {
		// The pass failed before it reached the lock or the provider.
		return pc, fmt.Errorf("pass did not begin: %w", err)
	}
	if err := w.checkPass(pc); err != nil {
		return nil, err
	}
	w.checkReturn(pc)
	w.rep.Coverage.add(pc)
	return pc, nil
}

// runPair starts two passes at once. Without wait, one finds the lock
// taken and does nothing; with wait, the second runs once the first is
// done. Either way the first to hold the lock waits until the other has
// tried it, so that the two really meet.
func (w *world) runPair(plans []passPlan, wait bool) error {
	p := &pair{wait: wait, plans: plans, lost: make(chan struct{})}
	ctls := []*passCtl{w.newPass(passPlan{}), w.newPass(passPlan{})}
	outs := make([]*runner.Outcome, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, pc := range ctls {
		pc.pair = p
		r, err := w.newRunner(pc)
		if err != nil {
			return err
		}
		r.Provider = &pairProvider{simProvider: r.Provider.(*simProvider), w: w}
		wg.Go(func() {
			outs[i], errs[i] = r.Run(pc.ctx, runner.Request{Window: plans[0].window, Trigger: reconcile.TriggerCron, Wait: wait})
			pc.cancel()
		})
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	locked := 0
	for i, pc := range ctls {
		pc.outcome, pc.runErr = outs[i], errs[i]
		if errors.Is(errs[i], runner.ErrLocked) {
			locked++
			if pc.began {
				w.violate("I5", pc.n, "a pass that found the lock taken had begun")
			}
			continue
		}
		if !pc.began {
			return fmt.Errorf("pass of a pair did not begin: %w", errs[i])
		}
	}
	if !wait && locked != 1 {
		w.violate("I5", w.passes, "two passes at once without --wait: %d found the lock taken, want exactly 1", locked)
	}
	if wait && locked != 0 {
		w.violate("I5", w.passes, "two passes at once with --wait: %d found the lock taken, want none", locked)
	}
	w.tracef("pair wait=%t: %d locked out", wait, locked)
	for _, pc := range p.ctls {
		if pc.checked {
			continue
		}
		if err := w.checkPass(pc); err != nil {
			return err
		}
	}
	for _, pc := range p.ctls {
		pc.fired[map[bool]string{false: "two_at_once_nowait", true: "two_at_once_wait"}[wait]] = true
		w.checkReturn(pc)
		w.rep.Coverage.add(pc)
	}
	if locked == 1 {
		w.rep.Passes++ // the pass locked out counts too
	}
	return nil
}

// pairProvider holds the first pass of a pair at the provider until the
// other pass has met the lock.
type pairProvider struct {
	*simProvider
	w *world
}

func (p *pairProvider) List(ctx context.Context, win reconcile.Window) (*sources.Listing, error) {
	if err := p.hold(ctx); err != nil {
		return nil, err
	}
	return p.simProvider.List(ctx, win)
}

func (p *pairProvider) Sync(ctx context.Context, req sources.SyncRequest) (*sources.Sync, error) {
	if err := p.hold(ctx); err != nil {
		return nil, err
	}
	return p.simProvider.Sync(ctx, req)
}

// hold keeps the first pass of the pair until the other met the lock.
func (p *pairProvider) hold(ctx context.Context) error {
	pc := p.pc
	if err := pc.begin(); err != nil {
		return err
	}
	pr := pc.pair
	pr.mu.Lock()
	first := pr.ctls[0] == pc
	pr.mu.Unlock()
	if !first {
		return nil
	}
	if pr.wait {
		return p.w.awaitLockWaiter(ctx)
	}
	select {
	case <-pr.lost:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitLockWaiter returns once some session waits for an advisory lock in
// the database: the other pass of a pair, blocked on the run lock.
func (w *world) awaitLockWaiter(ctx context.Context) error {
	ok, err := pollUntil(ctx, w.env.Pool, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`)
	if err == nil && !ok {
		err = errors.New("sim: the second pass never waited for the run lock")
	}
	return err
}

// pollUntil runs query, which returns one boolean, every millisecond or
// two until it returns true, for about a minute (a loaded machine is
// slow); false if it never did.
func pollUntil(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) (bool, error) {
	for range 30000 {
		var ok bool
		if err := pool.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
		time.Sleep(time.Millisecond)
	}
	return false, nil
}

// stripeTransport carries the Stripe reader's requests to stripesim and
// turns the answers of the listing requests the plan names into timeouts:
// the server answered, the reader never saw it. Retrievals are left
// alone, since the reader sends them in no fixed order.
type stripeTransport struct {
	pc   *passCtl
	base http.RoundTripper
}

func (t *stripeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pc, w := t.pc, t.pc.w
	w.mu.Lock()
	timeout := false
	if pc.listing {
		pc.stripeReqs++
		if timeout = pc.plan.stripeTimeout[pc.stripeReqs]; timeout {
			pc.fired["stripe_timeout"] = true
		}
	}
	w.mu.Unlock()
	resp, err := t.base.RoundTrip(req)
	if err != nil || !timeout {
		return resp, err
	}
	resp.Body.Close()
	return nil, fmt.Errorf("sim: no answer in time: %w", os.ErrDeadlineExceeded)
}
