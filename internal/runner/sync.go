package runner

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// Syncer is a Provider that can read incrementally: the objects created
// since a mirror was complete, and the events since it was brought up to
// date (sources.Stripe is one).
type Syncer interface {
	Sync(ctx context.Context, req sources.SyncRequest) (*sources.Sync, error)
}

// Mirror keeps the provider's records between passes (store.Mirror is
// one): what was read, the keys events told, and over which times it is
// complete.
type Mirror interface {
	Cursors(ctx context.Context) (store.SyncCursors, error)
	Objects(ctx context.Context, w reconcile.Window, since time.Time) ([]reconcile.ProviderObject, error)
	Get(ctx context.Context, ids []string, since time.Time) ([]store.MirrorObject, error)
	Keys(ctx context.Context, w reconcile.Window) ([]reconcile.KeyEvidence, error)
	Save(ctx context.Context, u store.MirrorUpdate) error
}

// Sync modes.
const (
	SyncOff         = "off"         // no mirror: every pass reads the window
	SyncFull        = "full"        // the window read from the provider, the mirror refreshed
	SyncIncremental = "incremental" // only what the mirror cannot vouch for read
)

// SyncReport says how a pass read the provider.
type SyncReport struct {
	// Mode is SyncOff, SyncFull or SyncIncremental; Reason says why a
	// mirrored pass read the whole window.
	Mode   string
	Reason string
	// Fresh is the creation-time window listed from the provider (the
	// whole window unless incremental); Events the events read; Older the
	// stretch of an incremental pass's coverage before the mirror's,
	// listed in full.
	Fresh, Events, Older reconcile.Window
	// Mirrored counts the objects and keys taken from the mirror; Changed
	// the mirrored objects an event told a newer state of.
	Mirrored, MirroredKeys, Changed int
	// Read counts what came from the provider: objects and events listed,
	// and objects retrieved by id (named, unsettled or verified).
	Listed, EventsRead, Retrieved int
	// Verified counts the mirrored payment intents retrieved again before
	// the pass reported on them (Stripe tells no event of a payment
	// intent's metadata changing); Refreshed those that had changed.
	Verified, Refreshed int
	// Match is MatchFull or MatchIncremental: whether the pass matched
	// every obligation and object in scope or only what can have changed
	// since the last pass that matched (docs/design.md, "Incremental
	// matching"); MatchReason says why a mirrored pass matched in full;
	// Rematched counts the obligations an incremental match decided on.
	Match, MatchReason string
	Rematched          int
	// Saved is set once the mirror holds this pass's reads; SaveErr says
	// why it does not (the pass itself completed).
	Saved   bool
	SaveErr error
}

// readState is what a pass read, kept to save into the mirror once the
// pass completed.
type readState struct {
	plan syncPlan
	// fresh marks the objects read from the provider in this pass (listed
	// or retrieved); in an incremental pass every other object came from
	// the mirror or from an event. It stays small: a map of the million
	// mirrored ids would cost more than the rest of the bookkeeping.
	fresh map[string]bool
	// changes are the events' newest account of objects created before
	// the fresh listing; fetched the objects retrieved by id this pass.
	changes map[string]sources.Change
	fetched map[string]reconcile.ProviderObject
	save    store.MirrorUpdate
	// keysFrom is where the pass's key evidence is complete from.
	keysFrom time.Time
	// cover is the creation-time window of the provider's records the
	// pass reads (docs/design.md, "Coverage").
	cover reconcile.Window
	// keysRead are the stretches over which listOlder read the key
	// evidence whole, for the mirror's keys cursor (cursorsAfter).
	keysRead []reconcile.Window
	// phases time the pass's steps: the whole pass's clock, shared by
	// every account's share.
	phases *phaseClock
	// shard, when set, is the shard of the account's share this reads
	// (docs/design.md, "Shards").
	shard *shardRead
	// synced is what syncRead read, once.
	synced *synced
	// matched is what the pass matched, for the mirror's links and match
	// mark (docs/design.md, "Incremental matching"); created the count of
	// obligations the mark keeps (nil: not counted, no mark).
	matched *matchedSet
	created *int64
	// census is the obligations table's census while it is read, beside
	// the pass's other reads (incrementalMatch).
	census *censusCall
	// stored are the links the mirror held of the objects an incremental
	// pass read from it by relation (store.Related.Linked), by id. A link
	// found the same is not written again.
	stored map[string]store.ObjectLink
	// unmapped counts, by raw state, the window's obligations in unmapped
	// states, as the table's census counted them (Censor).
	unmapped map[string]int
}

// storeLink records what the mirror kept of an object's link
// (store.Related.Linked).
func (st *readState) storeLink(l store.ObjectLink) {
	if st.stored == nil {
		st.stored = map[string]store.ObjectLink{}
	}
	st.stored[l.ObjectID] = l
}

// Phase is one step of a pass and how long it took.
type Phase struct {
	Name string
	Took time.Duration
}

// phaseClock times a pass's steps on the runner's clock.
type phaseClock struct {
	now    func() time.Time
	last   time.Time
	phases []Phase
	// collected are the steps whose end collected garbage this pass
	// (collectIfGrown): each at most once.
	collected map[string]bool
	// allocs is heapAllocs where the last step that could collect
	// ended, or the pass began.
	allocs uint64
}

func (c *phaseClock) start(now func() time.Time) {
	c.now, c.last, c.allocs = now, now(), heapAllocs()
}

// mark ends the step called name, which began at the previous mark. A
// step every account of a pass takes (plan, provider, …) is one phase,
// the sum of its times, where it first came. Where a step allocated
// much, its end collects the garbage (collectIfGrown), once a pass for
// each step, and the time that takes is the step's: a pass over many
// accounts would otherwise collect at every account's steps, each time
// marking the parts it holds for all the accounts before.
func (c *phaseClock) mark(name string) {
	if c.now == nil {
		return
	}
	c.midStep(name)
	t := c.now()
	took := t.Sub(c.last)
	c.last = t
	for i := range c.phases {
		if c.phases[i].Name == name {
			c.phases[i].Took += took
			return
		}
	}
	c.phases = append(c.phases, Phase{Name: name, Took: took})
}

// midStep collects where a step has let go of much before it ends, by
// the rule of mark: once a pass for each name, when more than
// collectAfter was allocated since the last step that could collect.
// The match lets go of the obligations before it builds its result
// ("match_rules"): collected only where the match ends, they stood under
// the result's arrays, which cannot reuse their pages.
func (c *phaseClock) midStep(name string) {
	if c.now == nil || c.collected[name] {
		return
	}
	if collectIfGrown(c.allocs) {
		if c.collected == nil {
			c.collected = map[string]bool{}
		}
		c.collected[name] = true
	}
	// What a step that may not collect allocated counts towards the
	// next one's.
	c.allocs = heapAllocs()
}

// attrs are the phases as log attributes, in seconds.
func (c *phaseClock) attrs() []any {
	out := make([]any, 0, 2*len(c.phases))
	for _, p := range c.phases {
		out = append(out, p.Name+"_s", p.Took.Seconds())
	}
	return out
}

func (st *readState) markFresh(id string) {
	if st.fresh == nil {
		st.fresh = map[string]bool{}
	}
	st.fresh[id] = true
}

// saveKeys records key evidence for the mirror. A first pass's million
// keys are the listing's own, shared rather than copied: clipped, so that
// neither an append to the listing's keys nor one to the mirror's can
// write over the other's.
func (st *readState) saveKeys(keys []reconcile.KeyEvidence) {
	if len(st.save.Keys) == 0 {
		st.save.Keys = slices.Clip(keys)
		return
	}
	st.save.Keys = append(st.save.Keys, keys...)
}

// saw records objects for the mirror as the provider showed them at at.
func (st *readState) saw(at time.Time, objs ...reconcile.ProviderObject) {
	if len(objs) > 0 {
		st.save.Seen = append(st.save.Seen, store.SeenObjects{At: at, Objects: objs})
	}
}

// fetch retrieves objects by id: a retrieval is read at once, unlike a
// listing, so what it returns is as the provider showed it now.
func (r *Runner) fetch(ctx context.Context, ids []string, now time.Time, st *readState) ([]reconcile.ProviderObject, []reconcile.Lookup) {
	found, lookups := r.Provider.Retrieve(ctx, ids)
	st.plan.report.Retrieved += len(ids)
	for _, l := range lookups {
		if l.Result == reconcile.LookupNotFound {
			st.save.Absent = append(st.save.Absent, l.ID)
		}
	}
	if st.fetched == nil {
		st.fetched = map[string]reconcile.ProviderObject{}
	}
	for _, o := range found {
		st.fetched[o.ID] = o
		st.markFresh(o.ID)
	}
	st.saw(now, found...)
	return found, lookups
}

// synced is what an incremental pass read from the provider since the
// mirror: the fresh listing and the events, the changes applied to the
// objects they tell of, and the objects read again because their events
// disagree. An incremental pass reads it once, whether it then takes the
// rest from the mirror whole (readIncremental) or only what can have
// changed (readChanged).
type synced struct {
	sync *sources.Sync
	// changed are the objects the events told a newer state of, as they
	// now are (the mirror's own where it saw them later), created before
	// the fresh listing.
	changed []reconcile.ProviderObject
	// newer are those of changed whose event is the newer account of them.
	newer map[string]reconcile.ProviderObject
	// prior are the mirror's states of changed, as the last passes read
	// them: what they named then.
	prior []reconcile.ProviderObject
	// again are the objects retrieved because their events disagree
	// within one second.
	again []reconcile.ProviderObject
}

// syncRead reads from the provider what the mirror lacks, once per
// account's share: the objects created since it was complete, the events
// since it was brought up to date, and again by id the objects whose
// events disagree.
func (r *Runner) syncRead(ctx context.Context, log *slog.Logger, now time.Time, st *readState) (*synced, error) {
	if st.synced != nil {
		return st.synced, nil
	}
	p := &st.plan
	sync, err := r.Provider.(Syncer).Sync(ctx, sources.SyncRequest{Objects: p.report.Fresh, Events: p.report.Events})
	if err != nil {
		return nil, fmt.Errorf("read the provider since the mirror: %w", err)
	}
	st.phases.mark("provider")
	p.report.Listed = len(sync.Objects)
	p.report.EventsRead = sync.Stats.Events
	st.saw(p.seen, sync.Objects...)
	st.saveKeys(sync.Keys)
	for _, o := range sync.Objects {
		st.markFresh(o.ID)
	}
	out := &synced{sync: sync, newer: map[string]reconcile.ProviderObject{}}
	// The events' account of objects created before the fresh listing
	// replaces what the mirror saw before it.
	st.changes = make(map[string]sources.Change, len(sync.Changes))
	var changedIDs []string
	for _, c := range sync.Changes {
		st.changes[c.Object.ID] = c
		changedIDs = append(changedIDs, c.Object.ID)
		st.saw(c.At, c.Object)
	}
	if len(changedIDs) > 0 {
		prior, err := r.Mirror.Get(ctx, changedIDs, time.Time{})
		if err != nil {
			return nil, fmt.Errorf("read the mirror: %w", err)
		}
		seenAt := make(map[string]time.Time, len(prior))
		mirrored := make(map[string]reconcile.ProviderObject, len(prior))
		for _, m := range prior {
			seenAt[m.Object.ID], mirrored[m.Object.ID] = m.SeenAt, m.Object
			out.prior = append(out.prior, m.Object)
		}
		for _, c := range sync.Changes {
			if at, ok := seenAt[c.Object.ID]; ok && c.At.Before(at) {
				out.changed = append(out.changed, mirrored[c.Object.ID])
			} else {
				out.changed, out.newer[c.Object.ID] = append(out.changed, c.Object), c.Object
			}
		}
	}
	// Objects whose events disagree within one second are read again, all
	// of them, so that the mirror never keeps a state the feed moved past.
	if len(sync.Unsettled) > 0 {
		found, lookups := r.fetch(ctx, sync.Unsettled, now, st)
		for _, l := range lookups {
			if l.Result == reconcile.LookupFailed {
				return nil, fmt.Errorf("retrieve %s, which events changed within one second: %s", l.ID, l.Err)
			}
		}
		out.again = found
	}
	// Key evidence is complete where the mirror's keys and the events read
	// join; Stripe kept none of what lies before its retention.
	evFrom := later(p.report.Events.From, now.Add(-sources.EventRetention))
	st.keysFrom = evFrom
	if !p.keysFrom.IsZero() && !p.cur.Keys.To.Before(evFrom) {
		st.keysFrom = earlier(p.keysFrom, evFrom)
	}
	st.synced = out
	log.Info("read the provider incrementally", "fresh_from", p.report.Fresh.From, "events_from", p.report.Events.From,
		"listed", len(sync.Objects), "events", sync.Stats.Events, "changes", len(sync.Changes), "unsettled", len(sync.Unsettled))
	return out, nil
}

// readIncremental lists what the mirror lacks and takes the rest from it.
// It returns the listing a full read would have returned, as far as the
// mirror can prove it.
func (r *Runner) readIncremental(ctx context.Context, log *slog.Logger, w reconcile.Window, now time.Time, st *readState) (*sources.Listing, error) {
	p := &st.plan
	sd, err := r.syncRead(ctx, log, now, st)
	if err != nil {
		return nil, err
	}
	sync := sd.sync
	mirrored, err := r.Mirror.Objects(ctx, reconcile.Window{From: w.From, To: p.report.Fresh.From}, p.since)
	if err != nil {
		return nil, fmt.Errorf("read the mirror: %w", err)
	}
	keys, err := r.Mirror.Keys(ctx, reconcile.Window{From: w.From, To: p.report.Events.From})
	if err != nil {
		return nil, fmt.Errorf("read the mirror: %w", err)
	}
	p.report.Mirrored, p.report.MirroredKeys = len(mirrored), len(keys)
	st.phases.mark("mirror_read")

	if len(sd.newer) > 0 {
		for i := range mirrored {
			if o, ok := sd.newer[mirrored[i].ID]; ok {
				mirrored[i] = o
				p.report.Changed++
			}
		}
	}
	objects := append(mirrored, sync.Objects...)
	if len(sd.again) > 0 {
		objects = slices.DeleteFunc(objects, func(o reconcile.ProviderObject) bool {
			_, again := st.fetched[o.ID]
			return again
		})
		for _, o := range sd.again {
			if w.Contains(o.Created.Time()) {
				objects = append(objects, o)
			}
		}
	}
	keys = append(keys, sync.Keys...)
	log.Info("read the mirror whole", "mirrored", len(mirrored), "mirrored_keys", p.report.MirroredKeys, "changed", p.report.Changed)
	return &sources.Listing{Objects: objects, Keys: keys, Stats: sync.Stats}, nil
}

// namedFromMirror returns, of the ids obligations name outside the
// listing, those the mirror holds as they are now (with what this pass
// learned of them since), and the rest, to retrieve.
func (r *Runner) namedFromMirror(ctx context.Context, ids []string, st *readState) ([]reconcile.ProviderObject, []reconcile.Lookup, []string, error) {
	held, err := r.Mirror.Get(ctx, ids, st.plan.since)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the mirror: %w", err)
	}
	have := make(map[string]bool, len(held))
	var objs []reconcile.ProviderObject
	var lookups []reconcile.Lookup
	for _, m := range held {
		o := m.Object
		if f, ok := st.fetched[o.ID]; ok {
			o = f
		} else if c, ok := st.changes[o.ID]; ok && !c.At.Before(m.SeenAt) {
			o = c.Object
		}
		have[o.ID] = true
		objs = append(objs, o)
		lookups = append(lookups, reconcile.Lookup{ID: o.ID, Result: reconcile.LookupFound})
	}
	var rest []string
	for _, id := range ids {
		if !have[id] {
			rest = append(rest, id)
		}
	}
	st.plan.report.Mirrored += len(objs)
	if am, ok := r.Mirror.(AbsenceMirror); ok && len(rest) > 0 {
		// What the provider answered an earlier pass it has no object of
		// is absent still: a 404 is evidence of absence, and Stripe never
		// gives an id to an object later (docs/design.md, "Incremental
		// matching").
		absent, err := am.Absent(ctx, rest, st.plan.since)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("read the mirror: %w", err)
		}
		for _, id := range absent {
			lookups = append(lookups, reconcile.Lookup{ID: id, Result: reconcile.LookupNotFound})
		}
		rest = slices.DeleteFunc(rest, func(id string) bool { _, ok := slices.BinarySearch(absent, id); return ok })
	}
	return objs, lookups, rest, nil
}

// AbsenceMirror also keeps which ids the provider answered it has no
// object of (store.Mirror is one).
type AbsenceMirror interface {
	Absent(ctx context.Context, ids []string, since time.Time) ([]string, error)
}

// verify retrieves again the mirrored payment intents the pass is about to
// report on: Stripe emits no event when a payment intent's metadata is
// edited, so a mirrored intent may name an obligation it did not when it
// was read. An unlinked one (an orphan, a suspected duplicate, a conflict)
// is always checked; when the pass found paid obligations without
// evidence, every unlinked mirrored intent is, since one of them might now
// name such an obligation. It reports whether any changed.
func (r *Runner) verify(ctx context.Context, in *matcher.Input, res matcher.Result, now time.Time, st *readState) (bool, error) {
	pwe := slices.ContainsFunc(res.Findings, func(f reconcile.Finding) bool { return f.Kind == reconcile.PaidWithoutEvidence })
	var ids []string
	var at []int // their places in in.Objects
	for i, o := range in.Objects {
		if o.Kind != reconcile.PaymentIntent || st.fresh[o.ID] {
			continue
		}
		switch b, _ := res.Bucket(o.ID); b {
		case matcher.BucketOrphan, matcher.BucketSuspected, matcher.BucketConflict:
		case matcher.BucketPending, matcher.BucketIgnored:
			if !pwe {
				continue
			}
		default:
			continue
		}
		ids, at = append(ids, o.ID), append(at, i)
	}
	if len(ids) == 0 {
		return false, nil
	}
	p := &st.plan.report
	p.Verified += len(ids)
	found, lookups := r.fetch(ctx, ids, now, st)
	gone := map[string]bool{}
	for _, l := range lookups {
		switch l.Result {
		case reconcile.LookupFailed:
			return false, fmt.Errorf("verify mirrored payment intent %s: %s", l.ID, l.Err)
		case reconcile.LookupNotFound:
			gone[l.ID] = true
		}
	}
	fresh := make(map[string]reconcile.ProviderObject, len(found))
	for _, o := range found {
		fresh[o.ID] = o
	}
	// in.Objects is the pass's own (the mirror's read, not a view saved
	// for the mirror): refresh in place, and copy only to drop.
	changed := false
	for _, i := range at {
		// Compared as the mirror keeps them: in.Objects[i] came from it,
		// its metadata masked, unless an event told of it since.
		if f, ok := fresh[in.Objects[i].ID]; ok && !sources.SameObject(r.asMirrored(f), r.asMirrored(in.Objects[i])) {
			in.Objects[i] = f
			changed = true
			p.Refreshed++
		}
	}
	if len(gone) > 0 {
		in.Objects = slices.DeleteFunc(in.Objects, func(o reconcile.ProviderObject) bool { return gone[o.ID] })
		changed = true
	}
	return changed, nil
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
