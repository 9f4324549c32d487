package runner

// The sync planner. A pass reads the provider's records over its coverage
// (docs/design.md, "Coverage"). Where the mirror can vouch for a stretch
// it reads only what is new, the events since the mirror's last pass and
// the stretch of the coverage before the mirror, and takes the rest from
// the mirror; the mirror vouches where it holds every charge, refund and
// payment intent, its change feed has no gap that Stripe's 30 days of
// events cannot fill, and its idempotency keys reach as far (docs/design.md,
// "Reading the provider"). Otherwise, or when reading what is new would
// cost more than reading the window, the pass lists the whole coverage and
// refreshes the mirror, saying why. Once a pass completed, what it read
// moves the mirror's cursors.
//
// Both decisions are pure, and table-tested in plan_test.go: planSync
// decides from the cursors the runner read, cursorsAfter says where the
// cursors stand once the pass completed; the runner does the reading and
// the saving.

import (
	"time"

	"reconcile"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// overlap is how far behind its cursors an incremental pass reads again:
// Stripe's lists are eventually consistent, so an object created just
// before a listing may appear only after it.
const overlap = 10 * time.Minute

// feedMargin keeps an incremental pass clear of the edge of Stripe's event
// retention: a change feed must start a day inside it.
const feedMargin = 24 * time.Hour

// syncPlan is how one pass reads the provider.
type syncPlan struct {
	report SyncReport
	cur    store.SyncCursors
	// since: mirrored objects seen at or after it are current.
	since time.Time
	// seen is when this pass's reads are as the provider showed them: the
	// pass's start less the overlap (a listing may lag a change).
	seen time.Time
	// feedOK: the change feed ran without a gap and its events still exist.
	feedOK bool
	// keysFrom is where the mirror's keys are complete from, if they join
	// what this pass reads; zero otherwise.
	keysFrom time.Time
	// older is the stretch of an incremental pass's coverage before the
	// mirror's, listed in full; empty when the mirror reaches back far
	// enough.
	older reconcile.Window
}

// planSync plans a pass over the coverage w at now from the mirror's
// cursors (nil when the runner keeps no mirror). The pass may be
// incremental only when no full read was asked for, the provider can sync
// (canSync: it is a Syncer), the mirror is complete over the window up to
// its last pass, its change feed has no gap that Stripe's 30 days of events
// cannot fill, its keys reach as far, and reading what is new costs less
// than reading the window. Otherwise the plan reads w in full and its
// report says why.
func planSync(cursors *store.SyncCursors, w reconcile.Window, now time.Time, full, canSync bool) syncPlan {
	p := syncPlan{report: SyncReport{Mode: SyncOff, Fresh: w}}
	if cursors == nil {
		return p
	}
	cur := *cursors
	horizon := now.Add(-sources.EventRetention + feedMargin)
	p.cur, p.seen = cur, now.Add(-overlap)
	p.feedOK = !cur.Changes.To.IsZero() && !cur.Changes.To.Add(-overlap).Before(horizon)
	p.since = cur.Changes.From
	if !p.feedOK {
		p.since = p.seen
	}
	if !cur.Keys.To.IsZero() && !cur.Keys.To.Add(-overlap).Before(horizon) {
		p.keysFrom = cur.Keys.From
	}
	p.report.Mode = SyncFull
	cov, covered := objectCoverage(cur)
	switch {
	case full:
		p.report.Reason = "a full read was asked for"
	case !canSync:
		p.report.Reason = "the provider reader cannot read incrementally"
	case cur.Changes.To.IsZero() || !covered:
		p.report.Reason = "the mirror is empty"
	case !p.feedOK:
		p.report.Reason = "the mirror was last brought up to date before Stripe's oldest events"
	case p.keysFrom.IsZero():
		p.report.Reason = "the mirror's idempotency keys stop before Stripe's oldest events"
	case !cov.To.Add(-overlap).After(w.From) || !cov.To.Add(-overlap).After(cov.From):
		p.report.Reason = "the window starts after the mirror ends"
	}
	if p.report.Reason != "" {
		return p
	}
	// The stretch before the mirror is listed; the mirror vouches for the
	// rest, bar what is new.
	if cov.From.After(w.From) {
		p.older = reconcile.Window{From: w.From, To: cov.From}
	}
	mirrored := reconcile.Window{From: later(w.From, cov.From), To: w.To}
	fresh := reconcile.Window{From: later(mirrored.From, cov.To.Add(-overlap)), To: w.To}
	if fresh.From.After(fresh.To) {
		fresh.From = fresh.To
	}
	evFrom := earlier(fresh.From, earlier(cur.Changes.To, cur.Keys.To).Add(-overlap))
	evFrom = later(evFrom, now.Add(-sources.EventRetention))
	if now.Sub(evFrom) > mirrored.To.Sub(mirrored.From) {
		// A narrow window (an incident, a trace) long after the last pass:
		// its own objects are fewer than the events since.
		p.report.Reason = "the window is shorter than the time since the mirror was brought up to date"
		p.older = reconcile.Window{}
		return p
	}
	p.report.Mode, p.report.Fresh, p.report.Events = SyncIncremental, fresh, reconcile.Window{From: evFrom, To: now}
	p.report.Older = p.older
	return p
}

// objectCoverage is where the mirror holds every charge, refund and
// payment intent.
func objectCoverage(cur store.SyncCursors) (reconcile.Window, bool) {
	var cov reconcile.Window
	for i, k := range []reconcile.ObjectKind{reconcile.Charge, reconcile.Refund, reconcile.PaymentIntent} {
		w, ok := cur.Objects[k]
		if !ok || !w.Valid() {
			return reconcile.Window{}, false
		}
		if i == 0 {
			cov = w
			continue
		}
		cov = reconcile.Window{From: later(cov.From, w.From), To: earlier(cov.To, w.To)}
	}
	return cov, cov.Valid()
}

// cursorsAfter are the mirror's cursors once a pass planned as p completed
// at now, having read the provider's records over cover and listed with
// their events whole the stretches keysRead (an incremental pass's stretch
// before the mirror, or further back for an obligation only its subject
// named). A zero window leaves its cursor as it is (store.MirrorUpdate):
//
//   - objects: cover, joined to the old coverage only while the change feed
//     has no gap (objects seen before a gap may be stale);
//   - keys: where the pass read Stripe's events (no further back than their
//     retention), joined to the old keys and to keysRead;
//   - changes: an incremental pass brings the feed up to now; a full pass
//     after a gap starts it at p.seen; a full pass without one leaves it.
func cursorsAfter(p syncPlan, cover reconcile.Window, now time.Time, keysRead []reconcile.Window) store.SyncCursors {
	var c store.SyncCursors
	c.Objects = map[reconcile.ObjectKind]reconcile.Window{}
	for _, k := range []reconcile.ObjectKind{reconcile.Charge, reconcile.Refund, reconcile.PaymentIntent} {
		cov := cover
		if old, ok := p.cur.Objects[k]; ok && p.feedOK {
			// Objects seen before a gap in the change feed may be stale:
			// only a feed without gaps keeps the old coverage.
			cov = extend(old, cover)
		}
		c.Objects[k] = cov
	}
	read := reconcile.Window{From: later(cover.From, now.Add(-sources.EventRetention)), To: cover.To}
	if p.report.Mode == SyncIncremental {
		read = reconcile.Window{From: later(p.report.Events.From, now.Add(-sources.EventRetention)), To: now}
	}
	if read.Valid() {
		c.Keys = read
		if p.cur.Keys.Valid() {
			c.Keys = extend(p.cur.Keys, read)
		}
		// The stretches an incremental pass listed before the mirror's
		// (or further back, for an obligation only its subject named)
		// join the keys the mirror holds.
		for _, kr := range keysRead {
			c.Keys = extend(c.Keys, kr)
		}
	}
	switch {
	case p.report.Mode == SyncIncremental:
		c.Changes = reconcile.Window{From: p.cur.Changes.From, To: now}
	case !p.feedOK:
		// The feed starts here: what this pass read is as the provider
		// showed it at seen.
		c.Changes = reconcile.Window{From: p.seen, To: p.seen}
	}
	return c
}

// extend joins what a pass read to an old coverage; when the two do not
// meet, the later one is kept (a pass over an old window does not cost the
// nightly pass its coverage).
func extend(old, read reconcile.Window) reconcile.Window {
	if un, ok := union(old, read); ok {
		return un
	}
	if old.To.After(read.To) {
		return old
	}
	return read
}

// union joins two windows that overlap or touch.
func union(a, b reconcile.Window) (reconcile.Window, bool) {
	if a.To.Before(b.From) || b.To.Before(a.From) {
		return reconcile.Window{}, false
	}
	return reconcile.Window{From: earlier(a.From, b.From), To: later(a.To, b.To)}, true
}
