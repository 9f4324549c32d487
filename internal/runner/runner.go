// Package runner runs one reconciliation pass: sources → matcher → store →
// alerts (DESIGN.md §7). The command, the scheduler and the simulation all
// run passes through it, so there is one way through the house.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/matcher"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// Provider reads the provider's records.
type Provider interface {
	List(ctx context.Context, w reconcile.Window) (*sources.Listing, error)
	Retrieve(ctx context.Context, ids []string) ([]reconcile.ProviderObject, []reconcile.Lookup)
}

// Obligations reads the application's obligations in scope.
type Obligations interface {
	Read(ctx context.Context, w reconcile.Window, named sources.Named) ([]reconcile.Obligation, error)
}

// Store is the reconciler's own state.
type Store interface {
	Lock(ctx context.Context, wait bool) (*store.Lock, error)
	Apply(ctx context.Context, run reconcile.Run, res matcher.Result, now time.Time) (store.Applied, error)
	RecordFailedRun(ctx context.Context, run reconcile.Run, cause string) error
	alerts.Outbox
}

// Deliverer drains the alert outbox to people.
type Deliverer interface {
	Drain(ctx context.Context, outbox alerts.Outbox, now func() time.Time) (alerts.DrainStats, error)
}

// Runner holds a pass's dependencies.
type Runner struct {
	Provider    Provider
	Obligations Obligations
	Store       Store
	// Alerts is nil when no Slack is configured: findings stay in the
	// outbox and the report, and a warning says so.
	Alerts  Deliverer
	Matcher matcher.Options
	Now     func() time.Time
	Logger  *slog.Logger
	// Mirror, when set, keeps the provider's records between passes, so
	// that a pass reads from the provider only what is new, what changed
	// and an overlap (incremental sync; see sync.go). Nil: every pass
	// reads the whole window.
	Mirror Mirror
	// Overlap is how far behind the mirror's cursors a pass reads again
	// (default DefaultOverlap).
	Overlap time.Duration
}

// Request is what one pass is asked to do.
type Request struct {
	Window  reconcile.Window
	DryRun  bool
	Trigger reconcile.Trigger
	// Wait for another run's lock instead of failing at once.
	Wait bool
	// Full reads the whole window from the provider even where the mirror
	// could vouch for it, and refreshes the mirror with it.
	Full bool
}

// Outcome is what one pass did.
type Outcome struct {
	Run reconcile.Run
	// Input is what the pass read; Result what the matcher concluded.
	Input  matcher.Input
	Result matcher.Result
	// Transitions are those applied, or on a dry run those that would be.
	Transitions []reconcile.Transition
	Applied     store.Applied
	// Phases time the pass's steps, in order.
	Phases []Phase
	// EventsFrom is where key evidence from events starts.
	EventsFrom time.Time
	Lookups    []reconcile.Lookup
	Stats      sources.ListStats
	// AlertErr is set when alerts could not be delivered; the pass itself
	// completed and its conclusions are stored.
	AlertErr error
	Drained  alerts.DrainStats
	// Sync says how the provider was read: in full or incrementally,
	// what came from the mirror, and whether the mirror was saved.
	Sync SyncReport
}

// ErrLocked is returned when another run holds the database's run lock.
var ErrLocked = errors.New("another reconcile run holds the run lock on this database; try again when it ends, or pass --wait")

// Run runs one pass. A pass that could not read everything fails: it
// reports no findings and marks nothing, because a partial listing proves
// nothing.
//
// A pass that loses its run lock (its connection ended; another run may
// hold it now) writes, records and posts nothing more, and returns an
// error wrapping store.ErrLockLost: before it applied, with nothing
// written (not even a failed run row); after, with its Outcome as well,
// since its conclusions stand, but with the mirror unsaved and its alerts
// left in the outbox for the run that holds the lock.
func (r *Runner) Run(ctx context.Context, req Request) (*Outcome, error) {
	if !req.Window.Valid() {
		return nil, fmt.Errorf("empty window %s – %s", req.Window.From.Format(time.RFC3339), req.Window.To.Format(time.RFC3339))
	}
	started := r.Now().UTC()
	run := reconcile.Run{ID: NewRunID(started), Trigger: req.Trigger, Window: req.Window, Started: started}
	log := r.Logger.With("run_id", run.ID)
	out := &Outcome{Run: run}

	// lock is nil on a dry run, which writes nothing and takes no lock.
	var lock *store.Lock
	if !req.DryRun {
		var err error
		lock, err = r.Store.Lock(ctx, req.Wait)
		if errors.Is(err, store.ErrLocked) {
			return nil, ErrLocked
		}
		if err != nil {
			return nil, fmt.Errorf("take the run lock: %w", err)
		}
		// Every write of the pass proves in its own transaction that the
		// lock is still this run's (store.WithFence); the checks of Held
		// below only stop a run that lost it sooner and more clearly.
		ctx = store.WithFence(ctx, lock)
		log = log.With("lock_epoch", lock.Epoch())
		defer func() {
			// The lock must be released even when ctx was cancelled.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := lock.Release(rctx); err != nil {
				log.Warn("release run lock", "err", err)
			}
		}()
	}
	log.Info("run started", "trigger", string(req.Trigger), "from", req.Window.From, "to", req.Window.To, "dry_run", req.DryRun)
	var err error

	st := &readState{}
	st.phases.start(r.Now)
	defer func() {
		out.Phases = st.phases.phases
		log.Info("pass phases", append(st.phases.attrs(), "stripe_requests", out.Stats.Requests,
			"stripe_retries", out.Stats.Retries, "stripe_rate_limited", out.Stats.RateLimited)...)
	}()
	st.plan, err = r.plan(ctx, req.Window, started, req.Full)
	st.phases.mark("plan")
	var in matcher.Input
	if err == nil {
		in, err = r.read(ctx, log, req.Window, started, out, st)
	}
	out.Sync = st.plan.report
	if err != nil {
		run.Status, run.Finished = reconcile.RunFailed, r.Now().UTC()
		if !req.DryRun {
			r.recordFailed(ctx, log, run, err)
		}
		return nil, err
	}

	// The clock is read once for the decisions of the whole pass.
	now := started
	res := matcher.Match(in, now, r.Matcher)
	st.phases.mark("match")
	if st.plan.report.Mode == SyncIncremental {
		// What the pass reports on from the mirror is checked first.
		changed, err := r.verify(ctx, &in, res, now, st)
		if err != nil {
			run.Status, run.Finished = reconcile.RunFailed, r.Now().UTC()
			out.Sync = st.plan.report
			if !req.DryRun {
				r.recordFailed(ctx, log, run, err)
			}
			return nil, err
		}
		if changed {
			res = matcher.Match(in, now, r.Matcher)
		}
		st.phases.mark("verify")
		out.Sync = st.plan.report
	}
	out.Input, out.Result = in, res
	warnOlderThanWindow(log, in, res, r.Matcher.ClockSkew)
	run.Counts = res.Counts
	run.Finished = r.Now().UTC()

	if req.DryRun {
		run.Status = reconcile.RunDry
		out.Run = run
		out.Transitions = res.Transitions
		log.Info("dry run completed", "findings", len(res.Findings), "transitions", len(res.Transitions))
		return out, nil
	}
	run.Status = reconcile.RunCompleted
	if err := lostLock(ctx, lock); err != nil {
		return nil, stopped(err, "before applying")
	}
	applied, err := r.Store.Apply(ctx, run, res, now)
	st.phases.mark("apply")
	if errors.Is(err, store.ErrLockLost) {
		return nil, stopped(err, "before applying")
	}
	if err != nil {
		// Nothing of the pass was applied; the run row says why, as for
		// a read that failed.
		run.Status, run.Finished = reconcile.RunFailed, r.Now().UTC()
		r.recordFailed(ctx, log, run, err)
		return nil, fmt.Errorf("apply: %w", err)
	}
	out.Run, out.Applied, out.Transitions = run, applied, applied.Transitions
	if r.Mirror != nil {
		if err := lostLock(ctx, lock); err != nil {
			return out, stopped(err, "after applying, before saving the mirror and sending alerts")
		}
		// Only a completed pass moves the mirror's cursors. A mirror that
		// could not be saved costs the next pass more reading, nothing
		// else: the pass stands.
		err := r.Mirror.Save(ctx, r.finishSave(req.Window, now, run.ID, st))
		if errors.Is(err, store.ErrLockLost) {
			return out, stopped(err, "after applying, before saving the mirror and sending alerts")
		}
		if err != nil {
			st.plan.report.SaveErr = err
			log.Warn("the provider mirror was not saved; the next pass reads more", "err", err)
		} else {
			st.plan.report.Saved = true
		}
		st.phases.mark("mirror_save")
		out.Sync = st.plan.report
	}
	for _, s := range applied.Skipped {
		log.Warn("transition skipped: the obligation changed since it was read",
			"obligation_id", s.Transition.ObligationID, "from", string(s.Transition.From), "reason", s.Reason)
	}
	log.Info("run applied", "findings", len(res.Findings), "new", applied.New, "changed", applied.Changed,
		"resolved", applied.Resolved, "transitions", len(applied.Transitions), "skipped", len(applied.Skipped))

	if r.Alerts == nil {
		log.Warn("alerts are not being delivered: set SLACK_BOT_TOKEN and SLACK_CHANNEL, or SLACK_WEBHOOK_URL; findings stay in the outbox")
		return out, nil
	}
	if err := lostLock(ctx, lock); err != nil {
		return out, stopped(err, "after applying, before sending alerts")
	}
	stats, err := r.Alerts.Drain(ctx, r.Store, r.Now)
	st.phases.mark("alerts")
	out.Drained = stats
	if errors.Is(err, store.ErrLockLost) {
		return out, stopped(err, "while sending alerts (the rest stay in the outbox)")
	}
	if err != nil {
		out.AlertErr = err
		if errors.Is(err, alerts.ErrPermanent) {
			log.Error("alerts cannot be delivered", "err", err)
		} else {
			log.Warn("alerts not all delivered; the next run sends the rest", "err", err)
		}
	}
	return out, nil
}

// read gathers one pass's input: the provider's listing of the window (or,
// incrementally, what the mirror lacks of it and the rest from the
// mirror), the obligations in scope, and by id the objects they name that
// the listing did not return.
func (r *Runner) read(ctx context.Context, log *slog.Logger, w reconcile.Window, now time.Time, out *Outcome, st *readState) (matcher.Input, error) {
	p := &st.plan
	var listing *sources.Listing
	var err error
	eventsFrom := later(w.From, now.Add(-sources.EventRetention))
	if p.report.Mode == SyncIncremental {
		listing, err = r.readIncremental(ctx, log, w, now, st)
		if err != nil {
			return matcher.Input{}, err
		}
		eventsFrom = later(w.From, st.keysFrom)
	} else {
		listing, err = r.Provider.List(ctx, w)
		st.phases.mark("provider")
		if err != nil {
			return matcher.Input{}, fmt.Errorf("read the provider: %w", err)
		}
		p.report.Listed, p.report.EventsRead = len(listing.Objects), listing.Stats.Events
		if r.Mirror != nil {
			st.saw(p.seen, listing.Objects...)
			st.save.Keys = listing.Keys
			// Stripe keeps events 30 days; the mirror keeps the keys they
			// told for longer. Every kept key links; key evidence is
			// complete from further back only where the mirror's keys join
			// the events just read.
			if eventsFrom.After(w.From) {
				old, err := r.Mirror.Keys(ctx, reconcile.Window{From: w.From, To: eventsFrom})
				if err != nil {
					return matcher.Input{}, fmt.Errorf("read the mirror: %w", err)
				}
				p.report.MirroredKeys = len(old)
				listing = &sources.Listing{Objects: listing.Objects, Keys: append(old, listing.Keys...), Stats: listing.Stats}
				if !p.keysFrom.IsZero() && p.keysFrom.Before(eventsFrom) && !p.cur.Keys.To.Before(eventsFrom) {
					eventsFrom = later(w.From, p.keysFrom)
				}
			}
		}
	}
	out.Stats = listing.Stats
	named := Named(listing, r.Matcher)
	obs, err := r.Obligations.Read(ctx, w, named)
	st.phases.mark("obligations")
	if err != nil {
		return matcher.Input{}, fmt.Errorf("read obligations: %w", err)
	}
	objects := listing.Objects
	// named.ProviderIDs holds every listed object's id, sorted.
	var missing []string
	for _, o := range obs {
		for _, id := range []string{o.ProviderID, o.TargetID} {
			if _, listed := slices.BinarySearch(named.ProviderIDs, id); id != "" && !listed {
				missing = append(missing, id)
			}
		}
	}
	var lookups []reconcile.Lookup
	if len(missing) > 0 {
		slices.Sort(missing)
		missing = slices.Compact(missing)
		var found []reconcile.ProviderObject
		asked := len(missing)
		if p.report.Mode == SyncIncremental {
			found, lookups, missing, err = r.namedFromMirror(ctx, missing, st)
			if err != nil {
				return matcher.Input{}, err
			}
		}
		failed := 0
		if len(missing) > 0 {
			var got []reconcile.ProviderObject
			var ls []reconcile.Lookup
			if r.Mirror != nil {
				got, ls = r.fetch(ctx, missing, now, st)
			} else {
				got, ls = r.Provider.Retrieve(ctx, missing)
			}
			found, lookups = append(found, got...), append(lookups, ls...)
			slices.SortFunc(lookups, func(a, b reconcile.Lookup) int { return strings.Compare(a.ID, b.ID) })
			for _, l := range ls {
				if l.Result == reconcile.LookupFailed {
					failed++
				}
			}
		}
		objects = append(objects, found...)
		log.Info("looked up objects named outside the window", "ids", asked, "found", len(found),
			"from_mirror", asked-len(missing), "failed", failed)
	}
	out.Lookups = lookups
	st.phases.mark("retrieve")
	if eventsFrom.After(w.From) {
		log.Warn("the window reaches past Stripe's 30 days of events: key evidence before then comes only from metadata",
			"events_from", eventsFrom)
	}
	out.EventsFrom = eventsFrom
	return matcher.Input{
		Obligations: obs,
		Objects:     objects,
		Keys:        listing.Keys,
		Lookups:     lookups,
		Listed:      w,
		EventsFrom:  eventsFrom,
	}, nil
}

// lostLock returns Held's error if lock (nil on a dry run) was lost. Other
// errors of the check (ctx done) are left to the step that follows, which
// meets them too.
func lostLock(ctx context.Context, lock *store.Lock) error {
	if lock == nil {
		return nil
	}
	if err := lock.Held(ctx); errors.Is(err, store.ErrLockLost) {
		return err
	}
	return nil
}

// stopped says where a pass that lost its run lock stopped.
func stopped(err error, where string) error {
	return fmt.Errorf("%w: this run stopped %s; another run may hold it now", err, where)
}

// recordFailed records a pass that failed, even when ctx was cancelled.
func (r *Runner) recordFailed(ctx context.Context, log *slog.Logger, run reconcile.Run, cause error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.Store.RecordFailedRun(rctx, run, cause.Error()); err != nil {
		log.Warn("record failed run", "err", err)
	}
}

// Named lists what the listed objects name, so that the obligations they
// belong to are read whatever their age: metadata ids and keys, the keys of
// events, and the object ids themselves (an obligation's provider_id or
// target_id).
func Named(l *sources.Listing, opts matcher.Options) sources.Named {
	var n sources.Named
	for _, o := range l.Objects {
		n.ProviderIDs = append(n.ProviderIDs, o.ID)
		if id := o.Metadata[opts.MetadataObligationID]; id != "" {
			n.IDs = append(n.IDs, id)
		}
		if k := o.Metadata[opts.MetadataIdempotencyKey]; k != "" {
			n.Keys = append(n.Keys, k)
		}
	}
	for _, k := range l.Keys {
		n.Keys = append(n.Keys, k.Key)
	}
	for _, s := range []*[]string{&n.IDs, &n.Keys, &n.ProviderIDs} {
		slices.Sort(*s)
		*s = slices.Compact(*s)
	}
	return n
}

// warnOlderThanWindow says when a PAID decision rests on a window that
// began after the obligation was created: a retry that moved money before
// the window is invisible to the pass, so "exactly one" holds only for
// what it read. The decision stands (DESIGN.md §4); the log says how far
// back to look.
func warnOlderThanWindow(log *slog.Logger, in matcher.Input, res matcher.Result, skew time.Duration) {
	created := make(map[string]time.Time, len(res.Transitions))
	for _, t := range res.Transitions {
		created[t.ObligationID] = time.Time{}
	}
	if len(created) == 0 {
		return
	}
	for _, o := range in.Obligations {
		if _, ok := created[o.ID]; ok {
			created[o.ID] = o.CreatedAt
		}
	}
	var older []string
	oldest := in.Listed.From
	for _, t := range res.Transitions {
		if c := created[t.ObligationID]; c.Add(-skew).Before(in.Listed.From) {
			older = append(older, t.ObligationID)
			if c.Before(oldest) {
				oldest = c
			}
		}
	}
	if len(older) > 0 {
		log.Warn("obligations marked PAID were created before the window began: a payout before it would be unseen; widen --since to check",
			"count", len(older), "first", older[0], "oldest_created", oldest.UTC(), "window_from", in.Listed.From.UTC())
	}
}

// NewRunID returns a sortable, unique run id: run_20261130T020000Z_1a2b3c4d.
func NewRunID(t time.Time) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "run_" + t.UTC().Format("20060102T150405Z") + "_" + hex.EncodeToString(b)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
