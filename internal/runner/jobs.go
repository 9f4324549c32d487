package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// A pass run as jobs (docs/design.md, "Passes as jobs") takes the steps of
// Run apart, for workers on several machines: PlanPass says what to
// fetch, FetchSlice reads one account's time slice from the provider
// into the mirror, ApplyAccount reads one account's share from what the
// fetches mirrored, concludes and applies it (store.ApplyPart), and the
// store finishes the pass as one run (store.FinishPass). Each step
// reads and concludes exactly as Run does, so that the pass concludes
// what a one-process pass concludes.

// PartStore is the store of a pass run as jobs (store.Store is one).
type PartStore interface {
	ApplyPart(ctx context.Context, run reconcile.Run, part store.Part, res reconcile.Conclusions, rep store.PartReport, now time.Time,
		then func(ctx context.Context, tx pgx.Tx) error) (store.Applied, error)
	LockAccount(ctx context.Context, account string, wait bool) (*store.Lock, error)
}

var _ PartStore = (*store.Store)(nil)

// Slice is one fetch job's work: the provider's records of one account
// created in Window.
type Slice struct {
	Account string
	Window  reconcile.Window
}

// PassPlan is what a pass run as jobs will read: its run (running, its
// clock its start), the accounts, each account's coverage, and the slices
// the coverages are fetched in.
type PassPlan struct {
	Run      reconcile.Run
	Accounts []reconcile.Account
	Covers   map[string]reconcile.Window
	Slices   []Slice
}

// PlanPass plans the pass req asks for as jobs: the accounts it reads
// (listed now, as Run lists them) and each one's coverage, as Run would
// read it in full at the pass's start, cut into slices of at most
// slice. It writes nothing.
func (r *Runner) PlanPass(ctx context.Context, req Request, slice time.Duration) (PassPlan, error) {
	if !req.Window.Valid() {
		return PassPlan{}, fmt.Errorf("empty window %s – %s", req.Window.From.Format(time.RFC3339), req.Window.To.Format(time.RFC3339))
	}
	if slice <= 0 {
		return PassPlan{}, errors.New("plan a pass: the slice must be positive")
	}
	started := r.Now().UTC().Truncate(time.Second)
	plan := PassPlan{
		Run:    reconcile.Run{ID: NewRunID(started), Trigger: req.Trigger, Window: req.Window, Started: started, Status: reconcile.RunRunning},
		Covers: map[string]reconcile.Window{},
	}
	accounts, err := r.accounts(ctx, req.Accounts)
	if err != nil {
		return PassPlan{}, err
	}
	plan.Accounts = accounts
	perAccount := make([][]Slice, len(accounts))
	for i, a := range accounts {
		p := r.part(a, plan.Run, &phaseClock{})
		cover, err := p.r.coverage(ctx, req.Window, started)
		if err != nil {
			return PassPlan{}, p.failed(err)
		}
		plan.Covers[a.ID] = cover
		for from := cover.From; from.Before(cover.To); from = from.Add(slice) {
			perAccount[i] = append(perAccount[i], Slice{Account: a.ID, Window: reconcile.Window{From: from, To: earlier(from.Add(slice), cover.To)}})
		}
	}
	// Round the accounts: workers take jobs in insert order, and one
	// account's slices side by side would meet that account's rate limit
	// together while the key's other accounts wait.
	for k := 0; len(plan.Slices) < countSlices(perAccount); k++ {
		for _, ss := range perAccount {
			if k < len(ss) {
				plan.Slices = append(plan.Slices, ss[k])
			}
		}
	}
	return plan, nil
}

func countSlices(perAccount [][]Slice) int {
	n := 0
	for _, ss := range perAccount {
		n += len(ss)
	}
	return n
}

// FetchSlice reads the provider's records of one slice of pass run into
// its account's mirror, seen at the pass's start, moving no cursor: the
// account's apply reads them from there (prefetched). then runs last in
// the save's transaction.
func (r *Runner) FetchSlice(ctx context.Context, run reconcile.Run, s Slice, then func(ctx context.Context, tx pgx.Tx) error) (int, error) {
	p := r.part(reconcile.Account{ID: s.Account}, run, &phaseClock{})
	if p.r.Mirror == nil {
		return 0, errors.New("fetch: a pass run as jobs needs the mirror")
	}
	l, err := p.r.Provider.List(ctx, s.Window)
	if err != nil {
		return 0, p.failed(fmt.Errorf("read the provider: %w", err))
	}
	err = p.r.Mirror.Save(ctx, store.MirrorUpdate{RunID: run.ID, Now: run.Started,
		Seen: []store.SeenObjects{{At: run.Started, Objects: l.Objects}}, Keys: l.Keys, LinkKeys: r.linkKeys(), Then: then})
	if err != nil {
		return 0, p.failed(err)
	}
	return len(l.Objects) + len(l.Keys), nil
}

// ApplyAccount is one account's share of pass run, as Run takes it, on
// the pass's clock (its start): under the account's run lock, it reads
// the account's records from what the pass's fetches mirrored over cover
// (the rest, as Run would, from the provider), its obligations, and
// concludes; it applies its conclusions as the pass's part
// (store.ApplyPart), then running last in that transaction, and then
// saves what it read into the mirror, moving the account's cursors.
func (r *Runner) ApplyAccount(ctx context.Context, run reconcile.Run, a reconcile.Account, cover reconcile.Window, sh Shard,
	then func(ctx context.Context, tx pgx.Tx) error) (*Outcome, error) {
	ps, ok := r.Store.(PartStore)
	if !ok {
		return nil, errors.New("apply: the store cannot apply a pass in parts")
	}
	lock, err := ps.LockAccount(ctx, a.ID, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = lock.Release(rctx)
	}()
	ctx = store.WithFence(ctx, lock)
	log := r.Logger.With("run_id", run.ID, "lock_epoch", lock.Epoch())
	clock := &phaseClock{}
	clock.start(r.Now)
	p := r.part(a, run, clock)
	if p.r.Mirror == nil {
		return nil, errors.New("apply: a pass run as jobs needs the mirror")
	}
	pf := &prefetched{inner: p.r.Provider, mirror: p.r.Mirror, cover: cover, since: run.Started, now: run.Started}
	if !sh.whole() {
		// One shard of the account (docs/design.md, "Shards").
		if err := shardReaders(Readers{Mirror: p.r.Mirror, Obligations: p.r.Obligations}); err != nil {
			return nil, err
		}
		p.st.shard = &shardRead{Shard: sh}
		pf.shard, pf.obligations, pf.subject, pf.opts = p.st.shard, p.r.Obligations.(ShardObligations), run.Window, r.Matcher
		p.r.Obligations = shardObligations{Obligations: p.r.Obligations, sh: p.st.shard}
	}
	p.r.Provider = pf
	now := run.Started
	req := Request{Window: run.Window, Trigger: run.Trigger, Full: true}
	if err := p.r.readAndMatch(ctx, log, req, now, p); err != nil {
		return nil, p.failed(err)
	}
	out := p.out
	if !sh.whole() {
		// What the shard held, against what is its own: the cost of
		// reading what its decisions rest on (docs/design.md, "Shards").
		log.Info("shard read", "account", a.ID, "shard", sh.Index, "shards", sh.Of,
			"obligations_read", out.ObligationsRead, "obligations_decided", out.Result.Counts.Obligations,
			"objects_read", len(out.Input.Objects), "objects_own", out.Result.Counts.ProviderObjects)
	}
	part := run
	part.Counts = out.Result.Counts
	rep := store.PartReport{Covered: out.Covered, EventsFrom: out.EventsFrom, Context: out.Context, Partial: out.Partial, Unmapped: out.Unmapped}
	applied, err := ps.ApplyPart(ctx, part, store.Part{Account: a.ID, Shard: sh.Index, Shards: sh.Of}, acrossAccounts(a.ID, out.Result.Conclusions), rep, now, then)
	clock.mark("apply")
	if err != nil {
		return nil, p.failed(fmt.Errorf("apply: %w", err))
	}
	// The part standing, what it read into the mirror, as Run saves it
	// after its apply: only a part applied moves the cursors, so that an
	// attempt that dies before its part commits, in a pass that then
	// fails, vouches for nothing (docs/design.md, "Passes as jobs"). A
	// worker that dies between the two costs the next pass more reading.
	// The job completed itself with its part: what fails after it (a run
	// lock lost) is logged, never returned, lest the job's last attempt
	// fail a pass whose part stands.
	err = p.r.saveMirror(ctx, log, lock, run.ID, now, p.st)
	if err == nil && !a.Platform() {
		err = r.saveAccounts(ctx, log, lock, run.ID, []reconcile.Account{{}, a}, now)
	}
	if err != nil {
		log.Warn("the part is applied; its mirror or account names were not saved", "account", a.ID, "error", p.failed(err))
	}
	out.Applied, out.Transitions, out.Phases = applied, applied.Transitions, clock.phases
	out.Accounts = []AccountShare{{Account: a, Counts: out.Result.Counts, Findings: len(out.Result.Findings)}}
	logApplied(log.With("account", a.ID), out.Result, applied)
	return out, nil
}

// prefetched reads the provider's records of one account of a pass run
// as jobs: those created within cover from the mirror, as the pass's
// fetches saved them (seen since the pass began), the rest, and every
// retrieval by id, from the provider, as Run reads them.
type prefetched struct {
	inner      Provider
	mirror     Mirror
	cover      reconcile.Window
	since, now time.Time
	// shard, when set, makes the records read from the mirror those of
	// one shard (shardListing), routed by the obligations the account's
	// records name (obligations), decided on over subject.
	shard       *shardRead
	obligations ShardObligations
	subject     reconcile.Window
	opts        matcher.Options
}

func (p *prefetched) List(ctx context.Context, w reconcile.Window) (*sources.Listing, error) {
	mid := reconcile.Window{From: later(w.From, p.cover.From), To: earlier(w.To, p.cover.To)}
	if !mid.Valid() {
		return p.inner.List(ctx, w)
	}
	// The key evidence a listing of mid holds: its events (and a
	// minute's grace after it), as far back as Stripe keeps them.
	kw := reconcile.Window{From: later(mid.From, p.now.Add(-sources.EventRetention)), To: mid.To.Add(time.Minute)}
	var (
		objs []reconcile.ProviderObject
		keys []reconcile.KeyEvidence
		err  error
	)
	switch {
	case p.shard != nil:
		if objs, keys, err = p.shardListing(ctx, mid, kw); err != nil {
			return nil, err
		}
	default:
		if objs, err = p.mirror.Objects(ctx, mid, p.since); err != nil {
			return nil, fmt.Errorf("read the pass's fetches: %w", err)
		}
		if kw.Valid() {
			if keys, err = p.mirror.Keys(ctx, kw); err != nil {
				return nil, fmt.Errorf("read the pass's fetches: %w", err)
			}
		}
	}
	l := &sources.Listing{Objects: objs, Keys: keys}
	for _, outside := range []reconcile.Window{{From: w.From, To: mid.From}, {From: mid.To, To: w.To}} {
		if !outside.Valid() {
			continue
		}
		o, err := p.inner.List(ctx, outside)
		if err != nil {
			return nil, err
		}
		l.Objects, l.Keys = append(l.Objects, o.Objects...), append(l.Keys, o.Keys...)
		l.Stats.Add(o.Stats)
	}
	return l, nil
}

func (p *prefetched) Retrieve(ctx context.Context, ids []string) ([]reconcile.ProviderObject, []reconcile.Lookup) {
	return p.inner.Retrieve(ctx, ids)
}
