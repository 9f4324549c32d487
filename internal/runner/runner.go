// Package runner runs one reconciliation pass: sources → matcher → store →
// alerts (docs/design.md, "The house"). The command, the scheduler and the simulation all
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
	"reconcile/internal/byid"
	"reconcile/internal/matcher"
	"reconcile/internal/redact"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// Provider reads the provider's records.
type Provider interface {
	List(ctx context.Context, w reconcile.Window) (*sources.Listing, error)
	Retrieve(ctx context.Context, ids []string) ([]reconcile.ProviderObject, []reconcile.Lookup)
}

// Counter is a Provider that counts every request it sent, failed ones
// too (sources.Stripe): a pass's log says what it tried even when the
// listing it would have counted never came back.
type Counter interface {
	RequestCounts() sources.RequestCounts
}

// Obligations reads the application's obligations: those in scope of a
// window, those named by the provider's records, and how old the oldest
// in scope by state and window is (sources.Obligations is one).
type Obligations interface {
	Read(ctx context.Context, w reconcile.Window, named sources.Named) ([]reconcile.Obligation, error)
	ReadNamed(ctx context.Context, named sources.Named) ([]reconcile.Obligation, error)
	Oldest(ctx context.Context, w reconcile.Window) (time.Time, error)
}

// Store is the reconciler's own state.
type Store interface {
	Lock(ctx context.Context, wait bool) (*store.Lock, error)
	Apply(ctx context.Context, run reconcile.Run, res reconcile.Conclusions, now time.Time) (store.Applied, error)
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
	// and an overlap (incremental sync; see plan.go). Nil: every pass
	// reads the whole window.
	Mirror Mirror
	// Accounts, when set, lists the connected accounts a pass reads
	// besides the platform's own, and Scope gives the readers of one
	// account ("" the platform's); the pass reads and matches each
	// account's share apart and applies them together (docs/design.md,
	// "Accounts"). Nil: the platform's own only, read by Provider,
	// Obligations and Mirror themselves. Scope is required with Accounts.
	Accounts func(ctx context.Context) ([]reconcile.Account, error)
	Scope    func(account string) Readers
	// MaxLookback bounds how far before now a pass reads the provider's
	// records for the obligations it decides on (config's max_lookback;
	// zero: no bound); an obligation older than that is never marked PAID
	// on what was read (docs/design.md, "Coverage").
	MaxLookback time.Duration
}

// Request is what one pass is asked to do.
type Request struct {
	// Window is what the pass is about (--since, --from/--to): the
	// obligations created or updated in it, and the provider objects
	// created in it, to explain. What a decision rests on is read
	// whatever the window (docs/design.md, "Coverage").
	Window  reconcile.Window
	DryRun  bool
	Trigger reconcile.Trigger
	// Wait for another run's lock instead of failing at once.
	Wait bool
	// Full reads the whole window from the provider even where the mirror
	// could vouch for it, and refreshes the mirror with it.
	Full bool
	// Accounts, when not nil, are the only accounts the pass reads, by id
	// ("" the platform's own), without listing the connected ones: a
	// trace reads its obligation's account alone.
	Accounts []string
}

// Outcome is what one pass did.
type Outcome struct {
	Run reconcile.Run
	// Input is what the pass read, but for its obligations: the pass lets
	// them go once they are matched and its share of them is taken
	// (Input.Obligations is nil), since nothing after reads them and, at
	// a million, they are the largest array a first pass holds
	// (docs/design.md, "Memory and CPU"). ObligationsRead counts them.
	// Result is what the matcher concluded.
	Input           matcher.Input
	ObligationsRead int
	Result          matcher.Result
	// Transitions are those applied, or on a dry run those that would be.
	Transitions []reconcile.Transition
	Applied     store.Applied
	// Phases time the pass's steps, in order.
	Phases []Phase
	// Covered is the creation-time window of the provider's records the
	// pass read in full, and EventsFrom where its key evidence starts.
	Covered    reconcile.Window
	EventsFrom time.Time
	// Context counts the obligations read only to link the objects read
	// as evidence; Partial those decided on whose records were not all
	// read (never marked PAID; their findings say what was not read).
	Context, Partial int
	Lookups          []reconcile.Lookup
	Stats            sources.ListStats
	// AlertErr is set when alerts could not be delivered; the pass itself
	// completed and its conclusions are stored.
	AlertErr error
	Drained  alerts.DrainStats
	// Sync says how the provider was read: in full or incrementally,
	// what came from the mirror, and whether the mirror was saved.
	Sync SyncReport
	// Accounts are the accounts the pass read, the platform's own first,
	// with what each read and found (docs/design.md, "Accounts").
	Accounts []AccountShare
	// Unmapped counts the obligations read whose state the configuration
	// does not map, by raw state value; they are never transitioned. nil
	// when there are none.
	Unmapped map[string]int
}

// ErrLocked is returned when another run holds the database's run lock.
var ErrLocked = errors.New("another reconcile run holds the run lock on this database; try again when it ends, or pass --wait")

// Run runs one pass, in the order data flows (docs/design.md, "The
// house"): it reads the provider's records and the obligations (sources),
// concludes from them (matcher), stores the conclusions and the mirror
// (store), and delivers the alerts (alerts).
//
// A pass that could not read everything fails: it reports no findings and
// marks nothing, because a partial listing proves nothing; its failed run
// row says why (docs/design.md, "Runs and the lock"). A pass that began
// and failed returns a *FailedRunError naming it.
//
// A pass that loses its run lock (its connection ended; another run may
// hold it now) writes, records and posts nothing more, and returns an
// error wrapping store.ErrLockLost: before it applied, with nothing
// written (not even a failed run row); after, with its Outcome as well,
// since its conclusions stand, but with the mirror unsaved and its alerts
// left in the outbox for the run that holds the lock.
func (r *Runner) Run(ctx context.Context, req Request) (_ *Outcome, runErr error) {
	if !req.Window.Valid() {
		return nil, fmt.Errorf("empty window %s – %s", req.Window.From.Format(time.RFC3339), req.Window.To.Format(time.RFC3339))
	}
	started := r.Now().UTC()
	run := reconcile.Run{ID: NewRunID(started), Trigger: req.Trigger, Window: req.Window, Started: started}
	log := r.Logger.With("run_id", run.ID)

	// lock is nil on a dry run, which writes nothing and takes no lock.
	var lock *store.Lock
	if !req.DryRun {
		var err error
		if lock, err = r.lock(ctx, req.Wait); err != nil {
			return nil, err
		}
		// Every write of the pass proves in its own transaction that the
		// lock is still this run's (store.WithFence); the checks of Held
		// (lostLock) only stop a run that lost it sooner and more clearly.
		ctx = store.WithFence(ctx, lock)
		log = log.With("lock_epoch", lock.Epoch())
		defer func() {
			// The lock must be released even when ctx was cancelled.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := lock.Release(rctx); err != nil {
				log.Warn("release run lock", "error", err)
			}
		}()
	}
	// The pass has begun. Every step's error ends it here, while the lock
	// is still held: the one failure path.
	defer func() {
		if runErr != nil {
			runErr = r.failed(ctx, log, req.DryRun, run, runErr)
		}
	}()
	log.Info("run started", "trigger", string(req.Trigger), "from", req.Window.From, "to", req.Window.To, "dry_run", req.DryRun)
	out := &Outcome{Run: run}
	clock := &phaseClock{}
	clock.start(r.Now)
	counter, counted := r.Provider.(Counter)
	var sentBefore sources.RequestCounts
	if counted {
		sentBefore = counter.RequestCounts()
	}
	// stripeSoFar is how the pass has read the provider so far: the
	// provider's own counts of every attempt (lists, retrievals, those of
	// a listing that failed and was lost) where it keeps them, else the
	// listing's. The run row keeps it as it stands when the run is
	// recorded, completed or failed (docs/design.md, "The schema
	// `reconcile`"). One key's counts: every account's requests.
	listed := false // the listing, with its own counts, was read
	stripeSoFar := func() {
		if counted {
			sent := counter.RequestCounts().Sub(sentBefore)
			out.Stats.Requests, out.Stats.Retries, out.Stats.RateLimited = sent.Requests, sent.Retries, sent.RateLimited
		} else if !listed {
			return // no counts: none is kept rather than a zero
		}
		run.Stripe = &reconcile.StripeStats{Retries: out.Stats.Retries, RateLimited: out.Stats.RateLimited}
	}
	var parts []*part
	defer func() {
		// How the pass read the provider and what its steps took, however
		// it ends; this runs before a failure is recorded.
		stripeSoFar()
		out.Sync, out.Phases = mergeSync(parts), clock.phases
		log.Info("pass phases", append(clock.attrs(), "stripe_requests", out.Stats.Requests,
			"stripe_retries", out.Stats.Retries, "stripe_rate_limited", out.Stats.RateLimited)...)
	}()

	// Sources and matcher, one account at a time: the provider's records
	// every decision rests on, the obligations, and what they conclude
	// (docs/design.md, "Reading the provider", "Coverage", "Accounts").
	// The clock is read once for the decisions of the whole pass.
	now := started
	accounts, err := r.accounts(ctx, req.Accounts)
	if err != nil {
		return nil, err
	}
	if lock != nil {
		// No pass runs as jobs meanwhile: none is running now, and none
		// can begin while this pass holds the platform's run lock
		// (docs/design.md, "Passes as jobs").
		if err := r.noPassRunning(ctx); err != nil {
			return nil, err
		}
	}
	for _, a := range accounts {
		p := r.part(a, run, clock)
		parts = append(parts, p)
		if err := p.r.readAndMatch(ctx, log, req, now, p); err != nil {
			return nil, p.failed(err)
		}
	}
	listed = true
	mergeParts(out, parts)
	res := out.Result
	run.Counts, run.Finished = res.Counts, r.Now().UTC()
	if req.DryRun {
		run.Status = reconcile.RunDry
		out.Run, out.Transitions = run, res.Transitions
		log.Info("dry run completed", "findings", len(res.Findings), "transitions", len(res.Transitions))
		return out, nil
	}

	// Store: the conclusions of every account in one transaction; then,
	// the pass standing, what each read into its mirror.
	run.Status = reconcile.RunCompleted
	stripeSoFar() // the re-checks of the match read Stripe too
	applied, err := r.apply(ctx, lock, run, res, now, clock)
	if err != nil {
		return nil, err
	}
	out.Run, out.Applied, out.Transitions = run, applied, applied.Transitions
	for _, p := range parts {
		if err = p.r.saveMirror(ctx, log, lock, run.ID, now, p.st); err != nil {
			return out, err
		}
	}
	if err := r.saveAccounts(ctx, log, lock, run.ID, accounts, now); err != nil {
		return out, err
	}
	logApplied(log, res, applied)

	// Alerts: the outbox drained to people (docs/design.md, "Alert
	// lifecycle").
	return out, r.alert(ctx, log, lock, out, clock)
}

// readAndMatch reads one account's share of a pass and concludes from it
// (p.r is the runner with that account's readers).
func (r *Runner) readAndMatch(ctx context.Context, log *slog.Logger, req Request, now time.Time, p *part) error {
	if !p.acct.Platform() {
		log = log.With("account", p.acct.ID)
	}
	in, err := r.read(ctx, log, req, now, p.out, p.st)
	if err != nil {
		return err
	}
	in.Account = p.acct
	// What the pass makes of the obligations it read is taken before the
	// match, which lets them go (match).
	p.out.ObligationsRead = len(in.Obligations)
	incremental := p.st.plan.report.Match == MatchIncremental
	if incremental {
		// An incremental match read only what changed; the rows it never
		// transitions were counted in the table (docs/design.md,
		// "Incremental matching").
		p.out.Unmapped = p.st.unmapped
		warnUnmapped(log, p.out.Unmapped)
	} else {
		own := in.Obligations
		if sh := p.st.shard; sh != nil {
			own = ownObligations(in.Obligations, sh.Shard)
		}
		p.out.Unmapped = unmappedStates(log, own)
	}
	res, err := r.match(ctx, &in, now, p.st)
	if err != nil {
		return err
	}
	if sh := p.st.shard; sh != nil {
		res = ownShare(res, &in, sh.Shard)
	}
	res.Incremental = incremental
	if _, jobs := r.Provider.(*prefetched); !jobs && r.Mirror != nil {
		// What the mirror keeps of this matching, for the next pass's. A
		// pass run as jobs keeps none: its fetches saved what no match
		// had read yet, and its apply saves only what it read itself. Nor
		// does one whose retrieval of a record failed: what it concluded
		// of the obligation naming it rests on nothing read, and the next
		// pass, left no mark, matches whole (docs/design.md, "Incremental
		// matching").
		if lookupFailed(in.Lookups) {
			log.Warn("a retrieval by id failed: this pass leaves no match mark, and the next pass matches everything again")
		} else {
			p.st.setMatched(&res, p.out.Run, now, r.matchDigest(), res.Undecided)
		}
	}
	in.Obligations = nil
	p.out.Input, p.out.Result = in, res
	p.out.Partial = len(res.ObligationIDs) - len(res.Settled.Obligations)
	if p.out.Partial > 0 {
		log.Warn("obligations whose provider records were not all read are not marked PAID; their findings say what was not read",
			"count", p.out.Partial, "covered_from", in.Listed.From, "events_from", in.EventsFrom, "max_lookback", r.MaxLookback.String())
	}
	return nil
}

// lookupFailed reports whether a retrieval of ls failed.
func lookupFailed(ls []reconcile.Lookup) bool {
	return slices.ContainsFunc(ls, func(l reconcile.Lookup) bool { return l.Result == reconcile.LookupFailed })
}

// lock takes the database's run lock, waiting for another run's if wait
// (docs/design.md, "Runs and the lock").
func (r *Runner) lock(ctx context.Context, wait bool) (*store.Lock, error) {
	lock, err := r.Store.Lock(ctx, wait)
	if errors.Is(err, store.ErrLocked) {
		return nil, ErrLocked
	}
	// The store's error says it was taking the run lock.
	return lock, err
}

// failed ends a pass that began and met err: it returns the error naming
// the pass (FailedRunError) and, unless the pass was a dry run (which
// writes nothing) or lost its run lock, records the failed run with err as
// its cause, even when ctx was cancelled. A pass that lost its lock
// writes nothing more (docs/design.md, "Runs and the lock"): before it
// applied, not even a failed run row; after, its completed run row
// stands.
func (r *Runner) failed(ctx context.Context, log *slog.Logger, dryRun bool, run reconcile.Run, err error) error {
	if !dryRun && !errors.Is(err, store.ErrLockLost) {
		run.Status, run.Finished = reconcile.RunFailed, r.Now().UTC()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := r.Store.RecordFailedRun(rctx, run, err.Error()); rerr != nil {
			log.Warn("record failed run", "error", rerr)
		}
	}
	return &FailedRunError{RunID: run.ID, Err: err}
}

// plan is how a pass about w reads the provider: its coverage, and the
// plan planSync makes for it from the mirror's cursors (docs/design.md,
// "Coverage").
func (r *Runner) plan(ctx context.Context, w reconcile.Window, now time.Time, full bool) (reconcile.Window, syncPlan, error) {
	cover, err := r.coverage(ctx, w, now)
	if err != nil {
		return reconcile.Window{}, syncPlan{}, err
	}
	var cur *store.SyncCursors
	if r.Mirror != nil {
		c, err := r.Mirror.Cursors(ctx)
		if err != nil {
			return reconcile.Window{}, syncPlan{}, fmt.Errorf("read the mirror: %w", err)
		}
		cur = &c
	}
	_, canSync := r.Provider.(Syncer)
	return cover, planSync(cur, cover, now, full, canSync), nil
}

// coverage is the creation-time window of the provider's records a pass
// about w reads: back to where the oldest obligation it decides on by
// state and window began (Matcher.CoverFrom), on to now. Obligations that
// only the subject's objects name may reach further back; read extends it
// for them (docs/design.md, "Coverage").
func (r *Runner) coverage(ctx context.Context, w reconcile.Window, now time.Time) (reconcile.Window, error) {
	oldest, err := r.Obligations.Oldest(ctx, w)
	if err != nil {
		return reconcile.Window{}, err
	}
	return reconcile.Window{From: r.Matcher.CoverFrom(w, oldest, now, r.MaxLookback), To: now}, nil
}

// read gathers one pass's input, in steps: the plan; the provider's
// records over the pass's coverage (st.cover: from the mirror where the
// plan lets it vouch for them, listed otherwise); the obligations the pass
// decides on and those the records read as evidence name, reading further
// back for those only the subject names; and by id the objects the former
// name that the records read lack.
func (r *Runner) read(ctx context.Context, log *slog.Logger, req Request, now time.Time, out *Outcome, st *readState) (matcher.Input, error) {
	w := req.Window
	var err error
	st.cover, st.plan, err = r.plan(ctx, w, now, req.Full)
	st.phases.mark("plan")
	if err != nil {
		return matcher.Input{}, err
	}
	cover := st.cover
	st.plan.report.Match = MatchFull
	mark, why, err := r.incrementalMatch(ctx, req, now, st)
	defer st.census.stop() // taken already, unless the pass failed first
	if err != nil {
		return matcher.Input{}, err
	}
	if why == "" {
		// Only what can have changed is matched again (docs/design.md,
		// "Incremental matching").
		in, ok, err := r.readChanged(ctx, log, req, now, mark, out, st)
		if err != nil || ok {
			return in, err
		}
	} else {
		st.plan.report.MatchReason = why
	}
	if st.plan.report.MatchReason != "" {
		log.Info("matched whole", "reason", st.plan.report.MatchReason)
	}
	// keysFrom is where the key evidence read is complete from.
	listing, keysFrom, err := r.readProvider(ctx, log, now, st)
	if err != nil {
		return matcher.Input{}, err
	}

	// The obligations: those in scope of w by state and window and those
	// the subject's objects name are decided on; the others the records
	// read name are read only to link them.
	named := Named(listing, r.Matcher)
	obs, err := r.Obligations.Read(ctx, w, named)
	if err != nil {
		return matcher.Input{}, fmt.Errorf("read obligations: %w", err)
	}
	if obs, err = r.readPartners(ctx, obs, listing.Objects, named.ProviderIDs); err != nil {
		return matcher.Input{}, err
	}
	// The subject is what the listing as first read names, not the
	// stretch read further back below.
	subject := &lazySubject{l: listing, w: w, opts: r.Matcher}
	oldest := time.Time{}
	for i := range obs {
		if subject.decides(&obs[i]) && (oldest.IsZero() || obs[i].CreatedAt.Time().Before(oldest)) {
			oldest = obs[i].CreatedAt.Time()
		}
	}
	if sh := st.shard; sh != nil && !sh.oldest.IsZero() && (oldest.IsZero() || sh.oldest.Before(oldest)) {
		// A shard reads back as far as its whole account does: to the
		// oldest obligation any of the subject's objects names.
		oldest = sh.oldest
	}
	if from := r.Matcher.CoverFrom(w, oldest, now, r.MaxLookback); from.Before(cover.From) {
		// An obligation only the subject names began before the coverage:
		// read back to it, and the obligations that stretch names.
		ext := reconcile.Window{From: from, To: cover.From}
		older, kf, err := r.listOlder(ctx, ext, now, st)
		if err != nil {
			return matcher.Input{}, err
		}
		if pf, ok := r.Provider.(*prefetched); ok && pf.shard != nil {
			// A shard holds what the stretch read further back rests on in
			// what the fetches mirrored: its movements and twins
			// (docs/design.md, "Shards").
			extra, keys, err := pf.closeOver(ctx, older.Objects, listing.Objects)
			if err != nil {
				return matcher.Input{}, err
			}
			older = &sources.Listing{Objects: append(older.Objects, extra...), Keys: append(older.Keys, keys...), Stats: older.Stats}
		}
		listing, keysFrom = join(older, kf, listing, keysFrom, cover.From)
		cover.From, st.cover.From = from, from
		olderNamed := Named(older, r.Matcher)
		listed := append(slices.Clip(named.ProviderIDs), olderNamed.ProviderIDs...)
		byid.Sort(listed)
		named.ProviderIDs = slices.Compact(listed)
		more, err := r.Obligations.ReadNamed(ctx, olderNamed)
		if err != nil {
			return matcher.Input{}, fmt.Errorf("read obligations: %w", err)
		}
		obs = mergeObligations(obs, more)
		if obs, err = r.readPartners(ctx, obs, older.Objects, named.ProviderIDs); err != nil {
			return matcher.Input{}, err
		}
		log.Info("read further back for obligations the window's records name", "from", from, "obligations", len(more))
	}
	decided := make([]bool, len(obs))
	var linkOnly []string // read only to link the records
	out.Context = 0
	for i := range obs {
		// A shard decides on its own obligations only; it reads the
		// others' to link its records (docs/design.md, "Shards").
		own := st.shard == nil || st.shard.owns(obs[i].ID)
		if decided[i] = own && subject.decides(&obs[i]); !decided[i] {
			linkOnly = append(linkOnly, obs[i].ID)
			if own {
				out.Context++
			}
		}
	}
	missing := lacking(named.ProviderIDs, obs, decided)
	// The step ends once the names sent for the obligations are no
	// longer used, so that a collection where it ends frees them (a
	// first pass's two million, about 35 MB).
	st.phases.mark("obligations")
	found, lookups, err := r.retrieve(ctx, log, missing, now, st)
	if err != nil {
		return matcher.Input{}, err
	}
	if len(found) > 0 {
		// Every obligation naming what the pass retrieved is read, to
		// link it, as context where the pass does not decide on it: an
		// obligation out of scope (or a shard's other shards') may claim
		// it too, and the conflict then keeps the one decided on from
		// PAID, as a pass over the whole history finds it
		// (docs/design.md, "Coverage").
		more, err := r.Obligations.ReadNamed(ctx, claimants(&sources.Listing{Objects: found}, r.Matcher))
		if err != nil {
			return matcher.Input{}, fmt.Errorf("read obligations: %w", err)
		}
		more = slices.DeleteFunc(more, func(o reconcile.Obligation) bool {
			_, read := slices.BinarySearchFunc(obs, o.ID, func(x reconcile.Obligation, id string) int { return strings.Compare(x.ID, id) })
			return read
		})
		for i := range more {
			linkOnly = append(linkOnly, more[i].ID)
			if st.shard == nil || st.shard.owns(more[i].ID) {
				out.Context++
			}
		}
		obs = mergeObligations(obs, more)
	}
	objects := append(listing.Objects, found...)
	out.Lookups = lookups
	st.phases.mark("retrieve")
	keysFrom = later(cover.From, keysFrom)
	warnKeysGone(log, keysFrom, cover.From)
	out.Stats, out.Covered, out.EventsFrom = listing.Stats, cover, keysFrom
	return matcher.Input{
		Obligations: obs,
		Objects:     objects,
		Keys:        listing.Keys,
		Lookups:     lookups,
		Listed:      cover,
		EventsFrom:  keysFrom,
		Subject:     w,
		Context:     linkOnly,
	}, nil
}

// lacking returns the provider ids and target ids that the decided
// obligations of obs name and listed (every listed object's id, sorted)
// lacks. An obligation's copy of an id listed holds gives way to the
// listing's own, so that the pass holds one string of it (a first
// pass's million provider ids, about 30 MB).
func lacking(listed []string, obs []reconcile.Obligation, decided []bool) []string {
	var missing []string
	for i := range obs {
		if !decided[i] {
			continue
		}
		o := &obs[i]
		for _, id := range []*string{&o.ProviderID, &o.TargetID} {
			if *id == "" {
				continue
			}
			if j, ok := slices.BinarySearch(listed, *id); ok {
				*id = listed[j]
			} else {
				missing = append(missing, *id)
			}
		}
	}
	return missing
}

// warnKeysGone warns when the key evidence read begins after the
// coverage.
func warnKeysGone(log *slog.Logger, keysFrom, coverFrom time.Time) {
	if keysFrom.After(coverFrom) {
		log.Warn("the provider's events before events_from are gone (Stripe keeps them 30 days) and the mirror kept none: "+
			"obligations created before then are not marked PAID", "events_from", keysFrom, "covered_from", coverFrom)
	}
}

// readProvider reads the provider's records over the pass's coverage as
// planned: an incremental pass takes what the mirror holds, with what is
// new and the stretch before the mirror (if any) listed; any other pass
// lists the coverage whole. It returns where the key evidence read is
// complete from.
func (r *Runner) readProvider(ctx context.Context, log *slog.Logger, now time.Time, st *readState) (*sources.Listing, time.Time, error) {
	p, cover := &st.plan, st.cover
	if p.report.Mode != SyncIncremental {
		listing, keysFrom, err := r.listOlder(ctx, cover, now, st)
		if err != nil {
			return nil, time.Time{}, err
		}
		st.phases.mark("provider")
		return listing, keysFrom, nil
	}
	mirrored := reconcile.Window{From: later(cover.From, p.older.To), To: cover.To}
	listing, err := r.readIncremental(ctx, log, mirrored, now, st)
	if err != nil {
		return nil, time.Time{}, err
	}
	keysFrom := later(mirrored.From, st.keysFrom)
	if p.older.Valid() {
		older, kf, err := r.listOlder(ctx, p.older, now, st)
		if err != nil {
			return nil, time.Time{}, err
		}
		listing, keysFrom = join(older, kf, listing, keysFrom, mirrored.From)
		st.phases.mark("provider_older")
	}
	return listing, keysFrom, nil
}

// listOlder lists from the provider the objects and events created in w,
// with the mirror's keys for what Stripe's events no longer tell, keeping
// what it read for the mirror. It returns where the key evidence is
// complete from over w (w.To when nowhere).
func (r *Runner) listOlder(ctx context.Context, w reconcile.Window, now time.Time, st *readState) (*sources.Listing, time.Time, error) {
	p := &st.plan
	l, err := r.Provider.List(ctx, w)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read the provider: %w", err)
	}
	p.report.Listed += len(l.Objects)
	p.report.EventsRead += l.Stats.Events
	keysFrom := earlier(later(w.From, now.Add(-sources.EventRetention)), w.To)
	if r.Mirror == nil {
		return l, keysFrom, nil
	}
	st.saw(p.seen, l.Objects...)
	st.saveKeys(l.Keys)
	if keysFrom.After(w.From) {
		// Stripe keeps events 30 days; the mirror keeps the keys they told
		// for longer. Every kept key links; key evidence is complete from
		// further back only where the mirror's keys join the events read.
		old, err := r.Mirror.Keys(ctx, reconcile.Window{From: w.From, To: keysFrom})
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("read the mirror: %w", err)
		}
		p.report.MirroredKeys += len(old)
		if len(old) > 0 {
			l = &sources.Listing{Objects: l.Objects, Keys: append(old, l.Keys...), Stats: l.Stats}
		}
		if !p.keysFrom.IsZero() && p.keysFrom.Before(keysFrom) && !p.cur.Keys.To.Before(keysFrom) {
			keysFrom = later(w.From, p.keysFrom)
		}
	}
	if ev := later(w.From, now.Add(-sources.EventRetention)); ev.Before(w.To) {
		st.keysRead = append(st.keysRead, reconcile.Window{From: ev, To: w.To})
	}
	return l, keysFrom, nil
}

// join puts an older stretch's listing (its key evidence complete from
// olderKeys) before a later one that begins at at (complete from
// laterKeys): the key evidence of both is complete from olderKeys if the
// later's is complete from its start.
func join(older *sources.Listing, olderKeys time.Time, l *sources.Listing, laterKeys, at time.Time) (*sources.Listing, time.Time) {
	joined := &sources.Listing{
		// The pass owns both listings: appending in place copies no
		// more than the older stretch.
		Objects: append(l.Objects, older.Objects...),
		Keys:    append(l.Keys, older.Keys...),
		Stats:   l.Stats,
	}
	joined.Stats.Add(older.Stats)
	if laterKeys.After(at) {
		return joined, laterKeys
	}
	return joined, olderKeys
}

// decides reports whether a pass about w decides on o: it is EXECUTING or
// CONFIRMATION_UNKNOWN, was created or updated in w, or the objects
// created in w name it (subject). The obligations the other records read
// name are read only to link them (docs/design.md,
// "Coverage").
func decides(o *reconcile.Obligation, w reconcile.Window, subject sources.Named) bool {
	if inScope(o, w) {
		return true
	}
	in := func(list []string, v string) bool {
		_, ok := slices.BinarySearch(list, v)
		return v != "" && ok
	}
	return in(subject.IDs, o.ID) || in(subject.Keys, o.IdempotencyKey) ||
		in(subject.ProviderIDs, o.ProviderID) || in(subject.ProviderIDs, o.TargetID)
}

// inScope reports whether a pass about w decides on o whatever the
// records name: it is unsettled, or was created or updated in w.
func inScope(o *reconcile.Obligation, w reconcile.Window) bool {
	return o.Unsettled() || w.Contains(o.CreatedAt.Time()) || w.Contains(o.UpdatedAt.Time())
}

// lazySubject tells, as decides does, whether a pass about w decides on an
// obligation, with the subject (what l's objects created in w name)
// listed the first time an obligation out of scope needs it: sorted lists
// of up to a million names each, 1.7 s of a first pass's CPU, in which
// every obligation is in scope.
type lazySubject struct {
	l     *sources.Listing
	w     reconcile.Window
	opts  matcher.Options
	named *sources.Named // nil until listed
}

func (s *lazySubject) decides(o *reconcile.Obligation) bool {
	if inScope(o, s.w) {
		return true
	}
	if s.named == nil {
		n := namedIf(s.l, s.opts, func(o reconcile.ProviderObject) bool { return s.w.Contains(o.Created.Time()) })
		s.named = &n
	}
	return decides(o, s.w, *s.named)
}

// mergeObligations adds to obs (sorted by id) those of more it lacks,
// keeping the order.
func mergeObligations(obs, more []reconcile.Obligation) []reconcile.Obligation {
	n := len(obs)
	for _, o := range more {
		if _, dup := slices.BinarySearchFunc(obs[:n], o.ID, func(a reconcile.Obligation, id string) int { return strings.Compare(a.ID, id) }); !dup {
			obs = append(obs, o)
		}
	}
	if len(obs) > n {
		slices.SortFunc(obs, func(a, b reconcile.Obligation) int { return strings.Compare(a.ID, b.ID) })
	}
	return obs
}

// retrieve returns the objects of ids, which obligations the pass decides
// on name but the records read lack, and how each was looked up: an
// incremental pass takes those the mirror holds from it, and the rest are
// retrieved by id (docs/design.md, "Reading the provider": a 404 is
// evidence of absence, a timeout is not).
func (r *Runner) retrieve(ctx context.Context, log *slog.Logger, ids []string, now time.Time, st *readState) ([]reconcile.ProviderObject, []reconcile.Lookup, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	slices.Sort(ids)
	missing := slices.Compact(ids)
	var found []reconcile.ProviderObject
	var lookups []reconcile.Lookup
	asked := len(missing)
	if st.plan.report.Mode == SyncIncremental {
		var err error
		found, lookups, missing, err = r.namedFromMirror(ctx, missing, st)
		if err != nil {
			return nil, nil, err
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
	log.Info("looked up objects named outside the records read", "ids", asked, "found", len(found),
		"from_mirror", asked-len(missing), "failed", failed)
	return found, lookups, nil
}

// match concludes the pass from what it read: matcher.Match, called here
// only (docs/design.md, "Findings", "The PAID rule").
//
// An incremental pass then verifies what it took from the mirror before it
// reports on it: Stripe tells no event of a payment intent's metadata
// being edited, so a mirrored intent may name an obligation now that it
// did not when it was read (verify). Which mirrored intents to retrieve
// again is decided by the conclusions: those the matcher left unlinked
// (orphans, suspected duplicates, conflicts; every unlinked one where an
// obligation is paid without evidence). What links to what is the
// matcher's rule alone (docs/design.md, "Linking"): choosing the intents
// before matching would restate it in the runner, and so would patching
// the conclusions for an intent that changed, which may now link,
// repeat, conflict or settle an obligation. So when a verified intent
// changed or is gone, the pass matches once more, over the refreshed
// input; it verifies only once, the first conclusions.
func (r *Runner) match(ctx context.Context, in *matcher.Input, now time.Time, st *readState) (matcher.Result, error) {
	incremental := st.plan.report.Mode == SyncIncremental
	var res matcher.Result
	for verified := false; ; verified = true {
		whole := *in
		if !incremental && st.shard == nil {
			// Matched once, and whole: the matcher's copy alone holds
			// the obligations, so that they die when it lets them go,
			// before it builds its result (matcher.MatchThen). A
			// shard's share keeps them: which shard counts an object
			// retrieved by id depends on the obligations naming it
			// (ownShare).
			in.Obligations = nil
		}
		// What the rules alone read is collected before the result is
		// built (phaseClock.midStep).
		res = matcher.MatchThen(whole, now, r.Matcher, func() { st.phases.midStep("match_rules") })
		if !verified {
			st.phases.mark("match")
		}
		if verified || !incremental {
			break
		}
		changed, err := r.verify(ctx, in, res, now, st)
		if err != nil {
			return matcher.Result{}, err
		}
		if !changed {
			break
		}
	}
	if incremental {
		st.phases.mark("verify")
	}
	return res, nil
}

// apply stores the pass's conclusions in one transaction (store.Apply),
// unless the pass lost its run lock (docs/design.md, "Runs and the lock").
func (r *Runner) apply(ctx context.Context, lock *store.Lock, run reconcile.Run, res matcher.Result, now time.Time, clock *phaseClock) (store.Applied, error) {
	if err := lostLock(ctx, lock); err != nil {
		return store.Applied{}, stopped(err, "before applying")
	}
	applied, err := r.Store.Apply(ctx, run, res.Conclusions, now)
	clock.mark("apply")
	if errors.Is(err, store.ErrLockLost) {
		return store.Applied{}, stopped(err, "before applying")
	}
	if err != nil {
		// Nothing of the pass was applied; the failed run row says why.
		return store.Applied{}, fmt.Errorf("apply: %w", err)
	}
	return applied, nil
}

// saveMirror keeps what a completed pass read in the mirror and moves the
// mirror's cursors (cursorsAfter); only a completed pass moves them. A
// mirror that could not be saved costs the next pass more reading; where
// this pass read key events from before the mirror's keys (a stretch
// before the mirror, or a full read), also those of them that Stripe
// drops before a later pass reads them again (its 30 days move on): that
// pass's findings say from when it read them. The pass stands, and its
// error is only that of a lost run lock.
func (r *Runner) saveMirror(ctx context.Context, log *slog.Logger, lock *store.Lock, runID string, now time.Time, st *readState) error {
	if r.Mirror == nil {
		return nil
	}
	const where = "after applying, before saving the mirror and sending alerts"
	if err := lostLock(ctx, lock); err != nil {
		return stopped(err, where)
	}
	u := st.save
	u.RunID, u.Now, u.Cursors = runID, now, cursorsAfter(st.plan, st.cover, now, st.keysRead)
	u.LinkKeys = r.linkKeys()
	u.Match = st.matchSave()
	err := r.Mirror.Save(ctx, u)
	if errors.Is(err, store.ErrLockLost) {
		return stopped(err, where)
	}
	if err != nil {
		st.plan.report.SaveErr = err
		if cur := st.plan.cur.Keys; u.Cursors.Keys.Valid() && (!cur.Valid() || u.Cursors.Keys.From.Before(cur.From)) {
			log.Warn("the provider mirror was not saved: the next pass reads more, and the key events this pass read before the mirror's are lost where Stripe drops them first (after 30 days)",
				"error", err, "keys_read_from", u.Cursors.Keys.From, "mirror_keys_from", cur.From)
		} else {
			log.Warn("the provider mirror was not saved: the next pass reads more", "error", err)
		}
	} else {
		st.plan.report.Saved = true
	}
	st.phases.mark("mirror_save")
	return nil
}

// linkKeys are the metadata keys the matcher links by: the mirror keeps
// their values exact and masks the rest (docs/design.md, "Untrusted
// text").
func (r *Runner) linkKeys() []string {
	return []string{r.Matcher.MetadataObligationID, r.Matcher.MetadataIdempotencyKey}
}

// asMirrored is o as the mirror keeps it, its metadata masked but for the
// link keys: what a fresh object is compared as with a mirrored one, so
// that masking never reads as a change.
func (r *Runner) asMirrored(o reconcile.ProviderObject) reconcile.ProviderObject {
	o.Metadata = redact.Metadata(o.Metadata, r.linkKeys()...)
	return o
}

// logApplied logs what the pass's apply did, and each transition a worker's
// change since the read made it skip.
func logApplied(log *slog.Logger, res matcher.Result, applied store.Applied) {
	for _, s := range applied.Skipped {
		log.Warn("transition skipped: the obligation changed since it was read",
			"obligation_id", s.Transition.ObligationID, "from", string(s.Transition.From), "reason", s.Reason)
	}
	log.Info("run applied", "findings", len(res.Findings), "new", applied.New, "changed", applied.Changed,
		"resolved", applied.Resolved, "transitions", len(applied.Transitions), "skipped", len(applied.Skipped))
}

// alert drains the outbox to people (docs/design.md, "Alert lifecycle").
// Alerts that could not be delivered leave the pass completed, with
// out.AlertErr saying why: nothing is lost, and the next run sends the
// rest. Its error is only that of a lost run lock.
func (r *Runner) alert(ctx context.Context, log *slog.Logger, lock *store.Lock, out *Outcome, clock *phaseClock) error {
	if r.Alerts == nil {
		log.Warn("alerts are not being delivered: set SLACK_BOT_TOKEN and SLACK_CHANNEL, or SLACK_WEBHOOK_URL; findings stay in the outbox")
		return nil
	}
	if err := lostLock(ctx, lock); err != nil {
		return stopped(err, "after applying, before sending alerts")
	}
	stats, err := r.Alerts.Drain(ctx, r.Store, r.Now)
	clock.mark("alerts")
	out.Drained = stats
	if errors.Is(err, store.ErrLockLost) {
		return stopped(err, "while sending alerts (the rest stay in the outbox)")
	}
	if err != nil {
		out.AlertErr = err
		if errors.Is(err, alerts.ErrPermanent) {
			// The one loud line of a delivery that stopped until someone
			// looks: a setting to fix, or an answer of Slack's this version
			// does not know (docs/design.md, "Alert lifecycle").
			attrs := []any{"error", err}
			if pe, ok := errors.AsType[*alerts.PermanentError](err); ok {
				attrs = append([]any{"code", pe.Reason}, attrs...)
			}
			log.Error("alerts cannot be delivered", attrs...)
		} else {
			log.Warn("alerts not all delivered; the next run sends the rest", "error", err)
		}
	}
	return nil
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

// Named lists what the listed objects name, so that the obligations they
// belong to are read whatever their age: metadata ids and keys, the keys of
// events, and the object ids themselves (an obligation's provider_id or
// target_id).
func Named(l *sources.Listing, opts matcher.Options) sources.Named {
	return namedIf(l, opts, nil)
}

// claimants is what l's objects and keys name (Named) and the payments
// the objects are tied to (partners): every name an obligation claiming
// one of them, or deciding what they are, may hold.
func claimants(l *sources.Listing, opts matcher.Options) sources.Named {
	n := Named(l, opts)
	if extra := partners(l.Objects, n.ProviderIDs, nil); len(extra) > 0 {
		n.ProviderIDs = append(n.ProviderIDs, extra...)
		byid.Sort(n.ProviderIDs)
	}
	return n
}

// partners returns the ids of the payments that the objects of objs keep
// keeps (all, keep nil) are tied to and held (sorted) lacks: a charge's
// intent, an intent's latest charge, what a refund refunds.
//
// The matcher takes a charge and its intent for one payment whichever of
// the two a pass read (docs/design.md, "Linking"), so an obligation
// naming the half not read claims the payment as surely as one naming the
// half read: out of scope, it is read to link them, so that the conflict
// keeps the one decided on from PAID, as a pass over the whole history
// finds it (docs/design.md, "Coverage"). What a refund refunds is read
// where an obligation decided on names it (a refund's target_id), and
// tells which payment the refund takes money back from: its twins and the
// words of its findings. A pass that matches only what changed reads the
// obligations naming it, so that it reads the refunded payment where a
// whole read would (docs/design.md, "Incremental matching").
func partners(objs []reconcile.ProviderObject, held []string, keep func(reconcile.ProviderObject) bool) []string {
	var out []string
	add := func(p string) {
		if _, ok := slices.BinarySearch(held, p); p != "" && !ok {
			out = append(out, p)
		}
	}
	for i := range objs {
		o := &objs[i]
		if keep != nil && !keep(*o) {
			continue
		}
		switch o.Kind {
		case reconcile.Charge:
			add(o.PaymentIntent)
		case reconcile.PaymentIntent:
			add(o.Charge)
		case reconcile.Refund:
			add(o.Target)
			add(o.Charge)
			add(o.PaymentIntent)
		}
	}
	byid.Sort(out)
	return slices.Compact(out)
}

// readPartners adds to obs (sorted by id) the obligations naming the
// payments objs are tied to that held (sorted) lacks (partners), read to
// link them.
func (r *Runner) readPartners(ctx context.Context, obs []reconcile.Obligation, objs []reconcile.ProviderObject, held []string) ([]reconcile.Obligation, error) {
	extra := partners(objs, held, nil)
	if len(extra) == 0 {
		return obs, nil
	}
	more, err := r.Obligations.ReadNamed(ctx, sources.Named{ProviderIDs: extra})
	if err != nil {
		return nil, fmt.Errorf("read obligations: %w", err)
	}
	return mergeObligations(obs, more), nil
}

// namedIf is what the listed objects that keep keeps name, and the keys
// of the events about them; with keep nil, what every object and every
// event names.
func namedIf(l *sources.Listing, opts matcher.Options, keep func(reconcile.ProviderObject) bool) sources.Named {
	var n sources.Named
	all := keep == nil
	if all {
		n.ProviderIDs = make([]string, 0, len(l.Objects))
		n.Keys = make([]string, 0, len(l.Keys))
	}
	for _, o := range l.Objects {
		if !all && !keep(o) {
			continue
		}
		n.ProviderIDs = append(n.ProviderIDs, o.ID)
		if id := o.Metadata[opts.MetadataObligationID]; id != "" {
			n.IDs = append(n.IDs, id)
		}
		if k := o.Metadata[opts.MetadataIdempotencyKey]; k != "" {
			n.Keys = append(n.Keys, k)
		}
	}
	byid.Sort(n.ProviderIDs)
	n.ProviderIDs = slices.Compact(n.ProviderIDs)
	for _, k := range l.Keys {
		if all {
			n.Keys = append(n.Keys, k.Key)
		} else if _, kept := slices.BinarySearch(n.ProviderIDs, k.ObjectID); kept {
			n.Keys = append(n.Keys, k.Key)
		}
	}
	for _, s := range []*[]string{&n.IDs, &n.Keys} {
		byid.Sort(*s)
		*s = slices.Compact(*s)
	}
	return n
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
