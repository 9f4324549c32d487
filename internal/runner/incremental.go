package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"reconcile"
	"reconcile/internal/byid"
	"reconcile/internal/matcher"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// Incremental matching (docs/design.md, "Incremental matching"). What the
// matcher concludes of an obligation or an object rests only on what is
// connected to it: the objects linking to it, the rest of their
// movements, their refunds, their possible twins, and the obligations all
// of those name, and so on. A part of the history in which nothing
// changed since the last pass that matched it, and of which no finding is
// open, concludes now what it concluded then: nothing. So a nightly pass
// matches again only the parts holding something that can have changed,
// and keeps the stored conclusions of the rest:
//
//   - the obligations changed or added since the last matching pass
//     reached (by updated_at and created_at: its clock, or its window's
//     end if earlier, less the clock skew; a row whose last change is a
//     transition of a pass whose save succeeded is not changed:
//     MatchMirror.OwnWrites), every EXECUTING and
//     CONFIRMATION_UNKNOWN one, and every one with an open finding;
//   - the objects this pass read from the provider (listed fresh, told
//     of by an event, read again), every one still pending, every one
//     with an open finding, every unlinked payment intent (a pass may
//     verify them), and every object the last pass found linked to an
//     obligation matched again;
//   - and, from those, all that is connected to them, as a shard closes
//     its records (closeRelated), until nothing more is added.

// MatchMirror is a mirror an incremental pass reads by relation, which
// keeps the last matching pass's mark and links (store.Mirror is one).
type MatchMirror interface {
	ShardMirror
	Mark(ctx context.Context) (store.MatchMark, bool, error)
	Open(ctx context.Context, resolvedAfter time.Time) (obligations, objects []string, err error)
	OwnWrites(ctx context.Context, since time.Time) (map[string]time.Time, error)
	NamesBefore(ctx context.Context, w reconcile.Window, before, since time.Time) ([]store.ObjectLink, error)
}

// Match modes of SyncReport.Match.
const (
	MatchFull        = "full"        // every obligation and object in scope matched
	MatchIncremental = "incremental" // only what can have changed matched again
)

// matchedSet is what a pass matched, kept for the mirror: the id of
// every object it matched, sorted (the matcher's result's), side by side
// with the least obligation each links to ("" for none) and how far back
// each names (the result's NamesFrom: nil when none does), and its match
// mark.
type matchedSet struct {
	ids, links []string
	namesFrom  []reconcile.Stamp
	mark       store.MatchMark
}

// link is what the mirror keeps of the set's i-th object.
func (m *matchedSet) link(i int) store.ObjectLink {
	l := store.ObjectLink{ObjectID: m.ids[i], ObligationID: m.links[i]}
	if m.namesFrom != nil {
		l.NamesFrom = m.namesFrom[i].Time()
	}
	return l
}

// linkOf is store.MatchSave.LinkOf over the set.
func (m *matchedSet) linkOf(id string) (store.ObjectLink, bool) {
	i, ok := slices.BinarySearch(m.ids, id)
	if !ok {
		return store.ObjectLink{}, false
	}
	return m.link(i), true
}

// setMatched records, for the mirror, the links of every object the
// match held as res found them (the least obligation each links to) and
// the pass's mark. res is a whole match's result, never a shard's share
// of one (ownShare; a pass run as jobs keeps no links): its ObjectIDs
// are every matched object's id, sorted, each once, and its Links are
// sorted by object id, then obligation id, so that one walk of both
// finds each object's least link (sorting a copy of the million ids and
// searching it for each link cost a first pass 1.1 s of CPU).
//
// Of the objects retrieved by id that the match decided nothing of (skip,
// sorted: matcher.Result's Undecided) it keeps no link: the pass decided nothing
// of them, and the obligations they link to may be ones it never read
// (the mirror's link stays).
func (st *readState) setMatched(res *matcher.Result, run reconcile.Run, now time.Time, digest string, skip []string) {
	if st.created == nil {
		return // no count of the table to mark with
	}
	ids, namesFrom := res.ObjectIDs, res.NamesFrom
	if len(skip) > 0 {
		ids, namesFrom = nil, nil
		for i, id := range res.ObjectIDs {
			if _, out := slices.BinarySearch(skip, id); out {
				continue
			}
			ids = append(ids, id)
			if res.NamesFrom != nil {
				namesFrom = append(namesFrom, res.NamesFrom[i])
			}
		}
	}
	m := &matchedSet{ids: ids, links: make([]string, len(ids)), namesFrom: namesFrom,
		mark: store.MatchMark{RunID: run.ID, MatchedAt: now, Window: run.Window, Digest: digest, Obligations: *st.created}}
	links := res.Links
	for i, id := range m.ids {
		for len(links) > 0 && links[0].ObjectID < id {
			links = links[1:]
		}
		if len(links) > 0 && links[0].ObjectID == id {
			m.links[i] = links[0].ObligationID
		}
	}
	st.matched = m
}

// matchSave is what the mirror keeps of the pass's matching: the links
// of the objects it matched (those it did not read from the provider
// this pass by relinking) and its mark.
func (st *readState) matchSave() *store.MatchSave {
	m := st.matched
	if m == nil {
		return nil
	}
	ms := &store.MatchSave{Mark: m.mark, LinkOf: m.linkOf}
	if st.plan.report.Mode == SyncIncremental {
		for i, id := range m.ids {
			if st.fresh[id] {
				continue // saved whole, its link with it
			}
			l := m.link(i)
			if was, ok := st.stored[id]; ok && was.ObligationID == l.ObligationID && was.NamesFrom.Equal(l.NamesFrom) {
				continue // the mirror holds this link already
			}
			ms.Relinked = append(ms.Relinked, l)
		}
	}
	return ms
}

// matchDigest names what a pass's conclusions rest on besides the data:
// the matcher's options and max_lookback. A stored conclusion reached
// under other options is not kept.
func (r *Runner) matchDigest() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%+v|%s", r.Matcher, r.MaxLookback))
	return hex.EncodeToString(sum[:8])
}

// farFuture bounds the obligations read as changed: every row changed
// since a time, whatever its clock says.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Censor counts the obligations table in one scan (sources.Obligations is
// one): by creation, what tells an incremental pass that rows were
// deleted, or written with old times, since the last pass; and the rows
// in unmapped states, which a pass reading only what changed still
// reports.
type Censor interface {
	Census(ctx context.Context, a, b time.Time, w reconcile.Window, taken func()) (sources.Census, error)
}

// incrementalMatch says whether this share of a pass may match only what
// can have changed, and if not why not ("" when it may). It starts the
// census of the obligations table (st.census), whose count of the
// obligations created before the clock the pass reaches (reached) is the
// mark the pass leaves (st.created). When the pass may match
// incrementally, the census is still being read: readChanged takes it
// after its own scan of the table (takeCensus), and matches whole if it
// tells of rows deleted or written with old times.
func (r *Runner) incrementalMatch(ctx context.Context, req Request, now time.Time, st *readState) (store.MatchMark, string, error) {
	mm, ok := r.Mirror.(MatchMirror)
	cc, counts := r.Obligations.(Censor)
	if !ok || !counts {
		return store.MatchMark{}, "no mirror to match from", nil
	}
	mark, marked, err := mm.Mark(ctx)
	if err != nil {
		return store.MatchMark{}, "", err
	}
	at := r.reached(now, req.Window)
	before := at
	if marked {
		before = earlier(r.reached(mark.MatchedAt, mark.Window), at)
	}
	st.census = startCensus(ctx, cc, before, at, req.Window)
	why := r.wholeBecause(req, st, mark, marked)
	if why == "" {
		return mark, "", nil
	}
	// A census that tells of rows deleted or written with old times is
	// the reason given first.
	if changed, err := st.takeCensus(mark, marked); err != nil || changed != "" {
		return mark, changed, err
	}
	return mark, why, nil
}

// wholeBecause is why this share of a pass matches whole, the census
// aside ("" when nothing else stops it matching incrementally).
func (r *Runner) wholeBecause(req Request, st *readState, mark store.MatchMark, marked bool) string {
	switch {
	case st.shard != nil:
		return "a shard matches its part whole"
	case req.Full:
		return "--full"
	case st.plan.report.Mode != SyncIncremental:
		return "the provider is read in full"
	case st.plan.older.Valid():
		return "the coverage begins before the mirror"
	case r.Matcher.ReportUnverified:
		return "report_unverified is on: its findings come and go with the window"
	case !marked:
		return "no completed pass matched what the mirror holds"
	case mark.Digest != r.matchDigest():
		return "the matcher's options changed since the last pass"
	case req.Window.From.Before(mark.Window.From):
		return "the window begins before the last pass's"
	case req.Window.To.Before(r.reached(mark.MatchedAt, mark.Window)):
		// An obligation written after it and before the last pass may be
		// out of scope and still named by a record of it: no mark tells
		// of that (NamesFrom), nor does its row (changed before the last
		// pass).
		return "the window ends before the last pass's clock"
	case st.plan.report.Fresh.From.After(mark.Window.To):
		// The last pass matched the records of its coverage after its
		// window only as context (its findings are about its window):
		// this pass matches again only those it lists afresh.
		return "the last pass's window ended before what this pass lists afresh"
	}
	return ""
}

// reached is how far a matching pass's reading of the obligations table
// vouches for every change: to its clock, or to its window's end if that
// is earlier (a row written between the two was in no scope of it), less
// the clock skew. The nightly command's window ends at or before the
// whole second the pass's clock is in: it is taken first, then the
// database is opened and the runner built.
func (r *Runner) reached(clock time.Time, w reconcile.Window) time.Time {
	return earlier(clock, w.To).Add(-r.Matcher.ClockSkew)
}

// censusCall is the census of the obligations table, read beside the
// pass's other reads: it scans the whole table, a third of a second at a
// million rows, and an incremental pass's scan of what changed scans it
// too (docs/design.md, "Incremental matching"). taken closes once the
// census's view of the table is fixed (or it failed): the scan of what
// changed begins after it, so that it sees every row the census counts.
type censusCall struct {
	taken, done chan struct{}
	cancel      context.CancelFunc
	census      sources.Census
	err         error
}

func startCensus(ctx context.Context, cc Censor, a, b time.Time, w reconcile.Window) *censusCall {
	ctx, cancel := context.WithCancel(ctx)
	c := &censusCall{taken: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(c.done)
		var once sync.Once
		fixed := func() { once.Do(func() { close(c.taken) }) }
		defer fixed()
		c.census, c.err = cc.Census(ctx, a, b, w, fixed)
	}()
	return c
}

// stop ends a census no one will take, and waits for it.
func (c *censusCall) stop() {
	if c != nil {
		c.cancel()
		<-c.done
	}
}

// takeCensus waits for the census, keeps its counts for the pass
// (st.created, st.unmapped), and says why the pass must match whole if
// the obligations created before where the marked pass reached (reached)
// are not those the mark counted ("" when they are).
func (st *readState) takeCensus(mark store.MatchMark, marked bool) (string, error) {
	c := st.census
	<-c.done
	c.cancel()
	if c.err != nil {
		return "", c.err
	}
	st.created, st.unmapped = &c.census.CreatedB, c.census.Unmapped
	if marked && c.census.CreatedA != mark.Obligations {
		return fmt.Sprintf("the obligations created before the last pass were %d then and are %d now: rows were deleted or written with old times",
			mark.Obligations, c.census.CreatedA), nil
	}
	return "", nil
}

// readChanged gathers an incremental match's input: what the provider
// showed since the mirror, what the obligations table changed since the
// last matching pass, what is open, and all that is connected to them
// (docs/design.md, "Incremental matching"). ok is false, with the
// reason in the report, when the pass must match whole after all: the
// census tells of rows deleted or written with old times, or its
// coverage is not the one a whole read would have (an obligation it
// decides on began before it and the mirror does not hold the stretch
// back to it, readBack; or the mirror's names it read back for are no
// longer what it decides on). The whole read then reuses the provider's
// news, and looks up by id again what it needs.
func (r *Runner) readChanged(ctx context.Context, log *slog.Logger, req Request, now time.Time, mark store.MatchMark,
	out *Outcome, st *readState) (matcher.Input, bool, error) {
	w, cover, p := req.Window, st.cover, &st.plan
	mm := r.Mirror.(MatchMirror)
	sd, err := r.syncRead(ctx, log, now, st)
	if err != nil {
		return matcher.Input{}, false, err
	}
	// As far back as a whole read reads for the obligations the window's
	// records name, where the mirror holds that stretch (st.cover takes
	// it only if the pass goes on incrementally: a whole read plans its
	// own).
	planned := cover
	var namesBefore []store.ObjectLink
	if cover.From, namesBefore, err = r.readBack(ctx, mm, w, cover, now, p); err != nil {
		return matcher.Input{}, false, err
	}
	// What this pass read from the provider, as it now stands (an object
	// read again over what its events told).
	var kept []reconcile.ProviderObject
	took := map[string]bool{}
	for _, group := range [][]reconcile.ProviderObject{sd.again, sd.sync.Objects, sd.changed} {
		for _, o := range group {
			if !took[o.ID] && cover.Contains(o.Created.Time()) {
				took[o.ID] = true
				kept = append(kept, o)
			}
		}
	}
	read := len(kept)
	// Counted into the report only if this pass matches incrementally: a
	// pass that goes on to match whole counts them as it reads.
	changedObjects := 0
	for id, o := range sd.newer {
		if !slices.ContainsFunc(sd.again, func(a reconcile.ProviderObject) bool { return a.ID == id }) && cover.Contains(o.Created.Time()) {
			changedObjects++
		}
	}

	// The obligations changed since the last matching pass, and those of
	// the open findings, in one scan of the table: read by id after it,
	// ten thousand open findings' rows cost 0.4 s at a million rows. A
	// finding a pass after the mark resolved counts as open: that pass's
	// links, on which it resolved it, no mirror holds.
	since := r.reached(mark.MatchedAt, mark.Window)
	openObl, openObj, err := mm.Open(ctx, mark.MatchedAt)
	if err != nil {
		return matcher.Input{}, false, err
	}
	openSet := make(map[string]bool, len(openObl))
	for _, id := range openObl {
		openSet[id] = true
	}
	// The census's view of the table is fixed before this scan begins:
	// a row it counts that no pass read would otherwise stand counted in
	// the mark, and no later census would tell of it.
	<-st.census.taken
	scanned, err := r.Obligations.Read(ctx, reconcile.Window{From: since, To: farFuture}, sources.Named{IDs: sortedSet(openObl)})
	if err != nil {
		return matcher.Input{}, false, fmt.Errorf("read obligations: %w", err)
	}
	own, err := mm.OwnWrites(ctx, since)
	if err != nil {
		return matcher.Input{}, false, err
	}
	changed, opened := splitScanned(scanned, since, own, openSet)
	// marked: an incremental pass follows a marked one (wholeBecause).
	if why, err := st.takeCensus(mark, true); err != nil || why != "" {
		p.report.MatchReason = why
		return matcher.Input{}, false, err
	}
	st.phases.mark("changes")

	byID := map[string]reconcile.Obligation{}
	var fresh []reconcile.Obligation // added to byID since the last closure
	add := func(obs []reconcile.Obligation) {
		for _, o := range obs {
			if _, ok := byID[o.ID]; !ok {
				byID[o.ID] = o
				fresh = append(fresh, o)
			}
		}
	}
	add(changed)
	// Of an obligation the pass decides on whatever names it (in scope),
	// only a changed row can have new names: what linked to any other
	// when the last pass matched it is linked to it in the mirror
	// (linked_to), and what is new is read already. An EXECUTING or
	// CONFIRMATION_UNKNOWN row is read whatever its age, and is changed
	// only when it was created or updated since. Of one out of scope,
	// whether the pass decides on it rests on every record naming it,
	// and a record may name an obligation without linking to it (a
	// refund's target; a charge whose metadata or key names a refund
	// obligation): all of them are asked.
	rows := make(map[string]bool, len(changed))
	for _, o := range changed {
		if touchedSince(&o, since) {
			rows[o.ID] = true
		}
	}
	asksAll := func(o *reconcile.Obligation) bool { return rows[o.ID] || !inScope(o, w) }
	add(opened)
	// An object told of by an event may no longer name what it named
	// when the last pass linked it (its metadata edited): the obligations
	// in scope that its mirrored state named are decided on again, as a
	// whole read decides on every one in scope. One out of scope a whole
	// read reads only if a record names it now.
	if len(sd.prior) > 0 {
		// Named, not claimants: the payment an object is part of never
		// changes, and the closure reads the obligations naming it.
		named, err := r.Obligations.ReadNamed(ctx, Named(&sources.Listing{Objects: sd.prior}, r.Matcher))
		if err != nil {
			return matcher.Input{}, false, fmt.Errorf("read obligations: %w", err)
		}
		add(slices.DeleteFunc(named, func(o reconcile.Obligation) bool { return !inScope(&o, w) }))
	}
	seed := store.Related{Pending: true, UnlinkedIntents: true, Linked: st.storeLink}
	ids := map[string]struct{}{}
	for _, id := range openObj {
		ids[id] = struct{}{}
	}
	kw := reconcile.Window{From: cover.From, To: p.report.Events.From}
	var keys []reconcile.KeyEvidence
	var found []reconcile.ProviderObject
	var lookups []reconcile.Lookup
	asked := map[string]bool{}
	// Each key holder's keys and each name's obligations are read once a
	// pass, however many rounds of the closure reach them: asked again
	// every round, the open findings' eleven thousand names and objects
	// cost 0.3 to 0.6 s a round at a million.
	keysAsked, namesAsked, terms := map[string]bool{}, newAskedNames(), newClosure()
	for closed := false; ; {
		// What the provider showed is closed over even when no obligation
		// changed.
		for ; !closed || len(fresh) > 0; closed = true {
			r.seedOf(fresh, asksAll, &seed, ids)
			fresh = nil
			if kept, err = closeRelated(ctx, mm, cover, p.since, 2*r.Matcher.DuplicateWindow, kept, ids, seed, terms); err != nil {
				return matcher.Input{}, false, fmt.Errorf("read the mirror: %w", err)
			}
			seed, ids = store.Related{Linked: st.storeLink}, map[string]struct{}{}
			more, err := r.keysOfChanged(ctx, mm, kept, sd.sync.Keys, kw, keysAsked)
			if err != nil {
				return matcher.Input{}, false, err
			}
			keys = append(keys, more...)
			named, err := r.Obligations.ReadNamed(ctx, namesAsked.unasked(claimants(&sources.Listing{Objects: kept, Keys: keys}, r.Matcher)))
			if err != nil {
				return matcher.Input{}, false, fmt.Errorf("read obligations: %w", err)
			}
			add(named)
		}
		subject := namedIf(&sources.Listing{Objects: kept, Keys: keys}, r.Matcher, func(o reconcile.ProviderObject) bool { return w.Contains(o.Created.Time()) })
		if r.beforeCoverage(byID, w, subject, time.Time{}, now, cover) {
			// The whole read retrieves what it needs itself.
			p.report.MatchReason = "an obligation to decide on began before the coverage"
			return matcher.Input{}, false, nil
		}
		// The objects that obligations to decide on name and no record
		// read holds are looked up by id, as a whole read looks them up,
		// and the obligations naming what is found join (below).
		held := make(map[string]struct{}, len(kept))
		for i := range kept {
			held[kept[i].ID] = struct{}{}
		}
		var missing []string
		for _, o := range byID {
			if !decides(&o, w, subject) {
				continue
			}
			for _, id := range []string{o.ProviderID, o.TargetID} {
				if _, ok := held[id]; id != "" && !ok && !asked[id] {
					asked[id] = true
					missing = append(missing, id)
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		got, ls, err := r.retrieve(ctx, log, missing, now, st)
		if err != nil {
			return matcher.Input{}, false, err
		}
		found, lookups = append(found, got...), append(lookups, ls...)
		if len(got) == 0 {
			break
		}
		// As a whole read, every obligation naming a retrieved record
		// joins, to link it (as context where the pass decides nothing of
		// it): one inside the coverage a whole read lists, and reads
		// whatever its listing names; one outside it retrieves, and reads
		// every obligation naming it, so that a conflict over it keeps
		// the one decided on from PAID (docs/design.md, "Incremental
		// matching"). Their names count as asked, so that a later round
		// does not read them again.
		namers, err := r.Obligations.ReadNamed(ctx, namesAsked.unasked(claimants(&sources.Listing{Objects: got}, r.Matcher)))
		if err != nil {
			return matcher.Input{}, false, fmt.Errorf("read obligations: %w", err)
		}
		add(namers)
		// Whatever the coverage, the closure goes on over what was
		// retrieved, as over what was read first: a whole read holds the
		// coverage's key evidence, movements and twins of it, and reads
		// the obligations those name.
		kept, closed = append(kept, got...), retrievedFault
	}
	if err := dropUnlisted(ctx, mm, byID, opened, kept, found, keys, w, cover, kw, p.since, r.Matcher); err != nil {
		return matcher.Input{}, false, err
	}
	slices.SortFunc(lookups, func(a, b reconcile.Lookup) int { return strings.Compare(a.ID, b.ID) })
	p.report.Mirrored, p.report.MirroredKeys = len(kept)-read-len(found), len(keys)
	st.phases.mark("related")

	obs := make([]reconcile.Obligation, 0, len(byID))
	for _, o := range byID {
		obs = append(obs, o)
	}
	slices.SortFunc(obs, func(a, b reconcile.Obligation) int { return strings.Compare(a.ID, b.ID) })
	subject := namedIf(&sources.Listing{Objects: kept, Keys: keys}, r.Matcher, func(o reconcile.ProviderObject) bool { return w.Contains(o.Created.Time()) })
	unread := namedFromUnread(namesBefore, kept)
	// The coverage is the one a whole read would read: the planned one,
	// or as far back as an obligation it decides on needs.
	switch want := earlier(planned.From, r.coverFor(byID, w, subject, unread, now)); {
	case want.Before(cover.From):
		// One that only a retrieved object connects, or a record of the
		// window this pass did not read.
		p.report.MatchReason = "an obligation to decide on began before the coverage"
		return matcher.Input{}, false, nil
	case want.After(cover.From):
		// The mirror's names were the last pass's: a record read since
		// may no longer name what it named.
		p.report.MatchReason = "the mirror's records named an obligation from before the coverage that the pass does not decide on"
		return matcher.Input{}, false, nil
	}
	st.cover = cover
	var linkOnly []string
	for i := range obs {
		if !decides(&obs[i], w, subject) {
			linkOnly = append(linkOnly, obs[i].ID)
		}
	}
	out.Context = len(linkOnly)
	keysFrom := later(cover.From, st.keysFrom)
	warnKeysGone(log, keysFrom, cover.From)
	p.report.Match, p.report.Rematched = MatchIncremental, len(obs)-len(linkOnly)
	p.report.Changed += changedObjects
	out.Stats, out.Covered, out.EventsFrom, out.Lookups = sd.sync.Stats, cover, keysFrom, lookups
	log.Info("matched incrementally", "since", since, "last_run_id", mark.RunID, "changed_obligations", len(changed),
		"open_obligations", len(opened), "provider_read", read, "objects", len(kept), "obligations", len(obs),
		"decided", len(obs)-len(linkOnly), "retrieved", len(found))
	return matcher.Input{
		Obligations: obs,
		Objects:     kept,
		Keys:        keys,
		Lookups:     lookups,
		Listed:      cover,
		EventsFrom:  keysFrom,
		Subject:     w,
		Context:     linkOnly,
	}, true, nil
}

// dropUnlisted takes out of byID the obligations of opened (read because
// a finding about them is open) that a pass about w does not decide on
// and that no record of the coverage names, of those kept and keys hold
// or of the mirror's others, nor any it retrieved (found): a whole read
// does not read them (docs/design.md, "Incremental matching").
func dropUnlisted(ctx context.Context, mm MatchMirror, byID map[string]reconcile.Obligation, opened []reconcile.Obligation,
	kept, found []reconcile.ProviderObject, keys []reconcile.KeyEvidence, w, cover, kw reconcile.Window, since time.Time,
	opts matcher.Options) error {
	var unnamed []reconcile.Obligation
	for _, o := range opened {
		if !inScope(&o, w) {
			unnamed = append(unnamed, o)
		}
	}
	if len(unnamed) == 0 {
		return nil
	}
	covered, retrieved := coverNames(kept, keys, cover, opts), claimants(&sources.Listing{Objects: found}, opts)
	unnamed = slices.DeleteFunc(unnamed, func(o reconcile.Obligation) bool {
		return decides(&o, w, covered) || decides(&o, w, retrieved)
	})
	mirrored, err := namedInMirror(ctx, mm, cover, kw, since, opts, unnamed, kept)
	if err != nil {
		return fmt.Errorf("read the mirror: %w", err)
	}
	for _, o := range unnamed {
		if !decides(&o, w, mirrored) {
			delete(byID, o.ID)
		}
	}
	return nil
}

// splitScanned tells apart the rows of readChanged's scan: those changed
// since (in Read's scope by state, creation or update, less those whose
// last change is a transition of a pass whose save succeeded, own) and
// those read because an open finding names them (open). A row of such a
// transition that an open finding names is the latter.
func splitScanned(scanned []reconcile.Obligation, since time.Time, own map[string]time.Time,
	open map[string]bool) (changed, opened []reconcile.Obligation) {
	for _, o := range scanned {
		inScope := o.Unsettled() || touchedSince(&o, since)
		at, ownWrite := own[o.ID]
		ownWrite = ownWrite && o.UpdatedAt.Time().Equal(at) && o.CreatedAt.Time().Before(since) && !o.Unsettled()
		switch {
		case inScope && !ownWrite:
			changed = append(changed, o)
		case open[o.ID]:
			opened = append(opened, o)
		}
	}
	return changed, opened
}

// touchedSince reports whether o's row was created or updated at or
// after since.
func touchedSince(o *reconcile.Obligation, since time.Time) bool {
	return !o.CreatedAt.Time().Before(since) || !o.UpdatedAt.Time().Before(since)
}

// beforeCoverage reports whether an obligation of obs that a pass about
// w decides on, or one created at oldest (zero: none), began before what
// cover reads back to: the whole read reads further back for it
// (docs/design.md, "Coverage").
func (r *Runner) beforeCoverage(obs map[string]reconcile.Obligation, w reconcile.Window, subject sources.Named, oldest, now time.Time,
	cover reconcile.Window) bool {
	return r.coverFor(obs, w, subject, oldest, now).Before(cover.From)
}

// coverFor is where the records a pass about w reads begin for the
// obligations of obs it decides on and one created at oldest (zero:
// none).
func (r *Runner) coverFor(obs map[string]reconcile.Obligation, w reconcile.Window, subject sources.Named, oldest, now time.Time) time.Time {
	for _, o := range obs {
		if decides(&o, w, subject) && (oldest.IsZero() || o.CreatedAt.Time().Before(oldest)) {
			oldest = o.CreatedAt.Time()
		}
	}
	return r.Matcher.CoverFrom(w, oldest, now, r.MaxLookback)
}

// readBack is how far back a nightly pass reads for the obligations that
// records of w the mirror holds name from before cover (named, read once
// a pass: Mirror.NamesBefore): as far as a whole read reads back for them
// (docs/design.md, "Incremental matching"), when the mirror holds every
// record and key event of that stretch, as the whole pass that first
// read back for them left it; cover.From otherwise.
func (r *Runner) readBack(ctx context.Context, mm MatchMirror, w, cover reconcile.Window, now time.Time,
	p *syncPlan) (from time.Time, named []store.ObjectLink, err error) {
	named, err = mm.NamesBefore(ctx, w, r.Matcher.NamedBefore(cover.From), p.since)
	if err != nil || len(named) == 0 {
		return cover.From, nil, err
	}
	oldest := named[0].NamesFrom
	for _, l := range named[1:] {
		oldest = earlier(oldest, l.NamesFrom)
	}
	from = r.Matcher.CoverFrom(w, oldest, now, r.MaxLookback)
	held, ok := objectCoverage(p.cur)
	if !from.Before(cover.From) || !ok || held.From.After(from) || p.keysFrom.IsZero() || p.keysFrom.After(from) {
		return cover.From, named, nil
	}
	return from, named, nil
}

// namedFromUnread is the creation of the oldest obligation that a record
// of named (the window's records naming from before the planned
// coverage, readBack) that kept lacks names, as the pass that last
// matched the record kept it (zero: none). A whole read reads the
// record, decides on the obligation and reads back to it; a pass that
// read the record itself knows this from the obligations it read
// (docs/design.md, "Incremental matching").
func namedFromUnread(named []store.ObjectLink, kept []reconcile.ProviderObject) time.Time {
	if len(named) == 0 {
		return time.Time{}
	}
	held := make(map[string]bool, len(kept))
	for i := range kept {
		held[kept[i].ID] = true
	}
	oldest := time.Time{}
	for _, l := range named {
		if !held[l.ObjectID] && (oldest.IsZero() || l.NamesFrom.Before(oldest)) {
			oldest = l.NamesFrom
		}
	}
	return oldest
}

// dirtyFault, set by tests alone, breaks the dirty set on purpose: the
// property test must catch it (TestIncrementalCatchesABrokenDirtySet).
// It is called with the obligations to seed from (q nil), then with the
// seeds (obs nil).
var dirtyFault func(q *store.Related, obs *[]reconcile.Obligation)

// retrievedFault, set by tests alone, leaves out of the closure what a
// round retrieved by id and the obligations naming it
// (TestIncrementalCatchesABrokenDirtySet).
var retrievedFault bool

// seedOf adds to q and ids what reaches obligations obs in the mirror:
// what the last matching pass linked to them and, for those of which all
// is asked (asksAll: a row changed since, or one out of the pass's
// scope), every record naming them: their provider and target ids (and
// an intent's charges), their keys' key evidence and the metadata naming
// them.
func (r *Runner) seedOf(obs []reconcile.Obligation, asksAll func(*reconcile.Obligation) bool, q *store.Related, ids map[string]struct{}) {
	if dirtyFault != nil {
		dirtyFault(nil, &obs)
		defer dirtyFault(q, nil)
	}
	for i := range obs {
		o := &obs[i]
		q.LinkedTo = append(q.LinkedTo, o.ID)
		if !asksAll(o) {
			continue
		}
		for _, id := range []string{o.ProviderID, o.TargetID} {
			if id != "" {
				ids[id] = struct{}{}
			}
		}
		q.Metadata = append(q.Metadata, store.MetadataPair{Key: r.Matcher.MetadataObligationID, Value: o.ID})
		if o.IdempotencyKey != "" {
			q.Keys = append(q.Keys, o.IdempotencyKey)
			q.Metadata = append(q.Metadata, store.MetadataPair{Key: r.Matcher.MetadataIdempotencyKey, Value: o.IdempotencyKey})
		}
	}
}

// keysOfChanged is the key evidence of objs and of their charges' intents
// that asked lacks (and then holds): the mirror's told in kw, and what
// this pass's events told.
func (r *Runner) keysOfChanged(ctx context.Context, mm MatchMirror, objs []reconcile.ProviderObject, told []reconcile.KeyEvidence,
	kw reconcile.Window, asked map[string]bool) ([]reconcile.KeyEvidence, error) {
	ids := slices.DeleteFunc(keyHolders(objs), func(id string) bool {
		was := asked[id]
		asked[id] = true
		return was
	})
	if len(ids) == 0 {
		return nil, nil
	}
	var keys []reconcile.KeyEvidence
	if kw.Valid() {
		var err error
		if keys, err = mm.KeysOf(ctx, ids, kw); err != nil {
			return nil, fmt.Errorf("read the mirror: %w", err)
		}
	}
	for _, k := range told {
		if _, ok := slices.BinarySearch(ids, k.ObjectID); ok {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// coverNames is what the records of objs and keys that cover holds name:
// the objects created in it (and the other halves of their payments,
// partners), and key evidence told in it, about whatever object.
func coverNames(objs []reconcile.ProviderObject, keys []reconcile.KeyEvidence, cover reconcile.Window, opts matcher.Options) sources.Named {
	in := func(o reconcile.ProviderObject) bool { return cover.Contains(o.Created.Time()) }
	n := namedIf(&sources.Listing{Objects: objs}, opts, in)
	n.ProviderIDs = append(n.ProviderIDs, partners(objs, n.ProviderIDs, in)...)
	byid.Sort(n.ProviderIDs)
	for _, k := range keys {
		if cover.Contains(k.Created.Time()) {
			n.Keys = append(n.Keys, k.Key)
		}
	}
	byid.Sort(n.Keys)
	n.Keys = slices.Compact(n.Keys)
	return n
}

// askedNames are the names an incremental pass asked the obligations
// table for already.
type askedNames struct{ ids, keys, providerIDs map[string]bool }

func newAskedNames() askedNames {
	return askedNames{ids: map[string]bool{}, keys: map[string]bool{}, providerIDs: map[string]bool{}}
}

// unasked is what of n was not asked yet, now asked.
func (a askedNames) unasked(n sources.Named) sources.Named {
	keep := func(list []string, asked map[string]bool) []string {
		return slices.DeleteFunc(list, func(v string) bool {
			was := asked[v]
			asked[v] = true
			return was
		})
	}
	return sources.Named{IDs: keep(n.IDs, a.ids), Keys: keep(n.Keys, a.keys), ProviderIDs: keep(n.ProviderIDs, a.providerIDs)}
}

// sortedSet is ids sorted, each once.
func sortedSet(ids []string) []string {
	slices.Sort(ids)
	return slices.Compact(ids)
}
