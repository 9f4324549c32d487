package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// A shard is one part of one account's share of a pass run as jobs
// (docs/design.md, "Shards"), so that a match-and-apply job of a very
// large account holds a part of it: the obligations whose id hashes to
// the shard (reconcile.ShardOf), every provider object that could link to
// one of them, the objects whose own id hashes to it, and what a decision
// about any of those rests on (the rest of their movements, their
// suspected-duplicate twins, the obligations those name). Over that the
// matcher concludes as over the whole account; the shard keeps only what
// is its own: the findings about its obligations and, of those about
// objects alone, the ones whose least object is its, and the counts of its
// obligations and objects. The shards of an account together conclude
// what the account's one share concludes.

// Shard is shard Index of Of of an account's share; Of ≤ 1 is the whole.
type Shard struct {
	Index, Of int
}

// Whole is the unsharded share.
func (s Shard) whole() bool { return s.Of <= 1 }

func (s Shard) owns(id string) bool { return reconcile.ShardOf(id, s.Of) == s.Index }

// ShardMirror is a mirror a shard reads from by relation, with indexed
// queries (store.Mirror is one).
type ShardMirror interface {
	Mirror
	Related(ctx context.Context, w reconcile.Window, q store.Related, since time.Time) ([]reconcile.ProviderObject, error)
	Halves(ctx context.Context, ids []string) ([]string, error)
	KeysOf(ctx context.Context, ids []string, w reconcile.Window) ([]reconcile.KeyEvidence, error)
	Named(ctx context.Context, w, kw reconcile.Window, since time.Time, n store.Naming) (map[string]bool, error)
}

// ShardObligations reads a shard's own obligations in scope
// (sources.Obligations is one).
type ShardObligations interface {
	Obligations
	ReadShard(ctx context.Context, w reconcile.Window, shard, shards int) ([]reconcile.Obligation, error)
}

// shardRead is what a shard's reading learns for its matching: its own
// obligations in scope (read once), and the oldest creation among the
// obligations the subject's objects name in the whole account, which the
// whole share would decide on and read back to.
type shardRead struct {
	Shard
	own    []reconcile.Obligation
	oldest time.Time
	// reached are other shards' obligations the whole share reads that
	// the shard's charges of an unlisted intent link to (absentIntents).
	reached []reconcile.Obligation
}

// shardScan is how much of the mirror a shard's routing reads at once.
const shardScan = 24 * time.Hour

// ownNames are the names by which an object reaches one of a shard's
// obligations (docs/design.md, "Linking"): their provider and target ids,
// their ids and their idempotency keys.
type ownNames struct {
	providerIDs, ids, keys map[string]struct{}
}

func (n *ownNames) add(o *reconcile.Obligation) {
	if n.providerIDs == nil {
		n.providerIDs, n.ids, n.keys = map[string]struct{}{}, map[string]struct{}{}, map[string]struct{}{}
	}
	for set, v := range map[*map[string]struct{}]string{&n.ids: o.ID, &n.keys: o.IdempotencyKey} {
		if v != "" {
			(*set)[v] = struct{}{}
		}
	}
	for _, v := range []string{o.ProviderID, o.TargetID} {
		if v != "" {
			n.providerIDs[v] = struct{}{}
		}
	}
}

func has(set map[string]struct{}, v string) bool {
	_, ok := set[v]
	return v != "" && ok
}

// reaches reports whether object o names one of the shard's obligations:
// by its id, its intent's or, of an intent, its latest charge's (a charge
// and its intent are one payment), or by its metadata.
func (n *ownNames) reaches(o *reconcile.ProviderObject, opts matcher.Options) bool {
	return has(n.providerIDs, o.ID) || has(n.providerIDs, o.PaymentIntent) ||
		o.Kind == reconcile.PaymentIntent && has(n.providerIDs, o.Charge) ||
		has(n.ids, o.Metadata[opts.MetadataObligationID]) || has(n.keys, o.Metadata[opts.MetadataIdempotencyKey])
}

// classNames are the names by which an object links to an obligation of
// its own class (docs/design.md, "Linking": a charge obligation takes
// charges and intents, a refund obligation refunds): provider ids, ids
// and idempotency keys, each with the classes of the obligations holding
// it. A target id links nothing.
type classNames struct {
	providerIDs, ids, keys map[string]uint8
}

// objectClass is what a kind links as: 1 a charge or an intent, 2 a
// refund (an obligation's kind is one of the first and the last).
func objectClass(k reconcile.ObjectKind) uint8 {
	switch k {
	case reconcile.Refund:
		return 2
	case reconcile.Charge, reconcile.PaymentIntent:
		return 1
	}
	return 0
}

func (n *classNames) add(o *reconcile.Obligation) {
	if n.ids == nil {
		n.providerIDs, n.ids, n.keys = map[string]uint8{}, map[string]uint8{}, map[string]uint8{}
	}
	c := objectClass(o.Kind)
	for set, v := range map[*map[string]uint8]string{&n.providerIDs: o.ProviderID, &n.ids: o.ID, &n.keys: o.IdempotencyKey} {
		if v != "" {
			(*set)[v] |= c
		}
	}
}

// links reports whether object o surely links to one of n's obligations:
// by its id, its intent's or, of an intent, its latest charge's, or by
// its metadata. Key evidence is not
// looked at (an object's events may be told on another day): an object
// linked by its key alone reads as unlinked here, and is read by its own
// id's shard too.
func (n *classNames) links(o *reconcile.ProviderObject, opts matcher.Options) bool {
	c := objectClass(o.Kind)
	in := func(set map[string]uint8, v string) bool { return v != "" && set[v]&c != 0 }
	return c != 0 && (in(n.providerIDs, o.ID) || o.Kind == reconcile.Charge && in(n.providerIDs, o.PaymentIntent) ||
		o.Kind == reconcile.PaymentIntent && in(n.providerIDs, o.Charge) ||
		in(n.ids, o.Metadata[opts.MetadataObligationID]) || in(n.keys, o.Metadata[opts.MetadataIdempotencyKey]))
}

// shardListing reads shard sh's records of mid (within the pass's
// coverage, from what its fetches mirrored) and their key evidence told
// in kw. It scans the mirror a day at a time, keeping only the objects
// whose own id is the shard's or that name one of its obligations (the
// obligations every day's objects name are read to tell), then closes
// what it kept over movements and twins with indexed queries.
func (p *prefetched) shardListing(ctx context.Context, mid, kw reconcile.Window) ([]reconcile.ProviderObject, []reconcile.KeyEvidence, error) {
	sh, mirror, obls := p.shard, p.mirror.(ShardMirror), p.obligations
	own, err := obls.ReadShard(ctx, p.subject, sh.Index, sh.Of)
	if err != nil {
		return nil, nil, fmt.Errorf("read obligations: %w", err)
	}
	sh.own = own
	var names ownNames
	for i := range own {
		names.add(&own[i])
	}
	var kept []reconcile.ProviderObject
	keyed := map[string]struct{}{} // objects whose key evidence names one
	for from := mid.From; from.Before(mid.To); from = from.Add(shardScan) {
		day := reconcile.Window{From: from, To: earlier(from.Add(shardScan), mid.To)}
		objs, err := p.mirror.Objects(ctx, day, p.since)
		if err != nil {
			return nil, nil, fmt.Errorf("read the pass's fetches: %w", err)
		}
		// The key evidence told in this day of kw; the last day takes
		// kw's tail after mid.
		kd := reconcile.Window{From: later(day.From, kw.From), To: earlier(day.To, kw.To)}
		if !day.To.Before(mid.To) {
			kd.To = kw.To
		}
		var keys []reconcile.KeyEvidence
		if kd.Valid() {
			if keys, err = p.mirror.Keys(ctx, kd); err != nil {
				return nil, nil, fmt.Errorf("read the pass's fetches: %w", err)
			}
		}
		l := &sources.Listing{Objects: objs, Keys: keys}
		named, err := obls.ReadNamed(ctx, claimants(l, p.opts))
		if err != nil {
			return nil, nil, fmt.Errorf("read named obligations: %w", err)
		}
		subject := namedIf(l, p.opts, func(o reconcile.ProviderObject) bool { return p.subject.Contains(o.Created.Time()) })
		var any classNames // every obligation the day names, of any shard, by class
		for i := range named {
			o := &named[i]
			if decides(o, p.subject, subject) && (sh.oldest.IsZero() || o.CreatedAt.Time().Before(sh.oldest)) {
				sh.oldest = o.CreatedAt.Time()
			}
			if sh.owns(o.ID) {
				names.add(o)
			}
			any.add(o)
		}
		for i := range objs {
			// An object that links to an obligation is its obligation's
			// shard's; one that may link to none (by what its day tells),
			// its own id's, which reads it for its orphan.
			if names.reaches(&objs[i], p.opts) || sh.owns(objs[i].ID) && !any.links(&objs[i], p.opts) {
				kept = append(kept, objs[i])
			}
		}
		for _, k := range keys {
			if has(names.keys, k.Key) {
				keyed[k.ObjectID] = struct{}{}
			}
		}
	}
	// What names the shard's obligations, whichever day told it: the day
	// an obligation became known as the shard's may come after the day
	// of an object reaching it through its intent or its key evidence.
	for id := range names.providerIDs {
		keyed[id] = struct{}{}
	}
	byKey := make([]string, 0, len(names.keys))
	for k := range names.keys {
		byKey = append(byKey, k)
	}
	// A twin is within the duplicate window of its suspect, and the
	// suspect within it of the kept object's movement.
	kept, err = closeShard(ctx, mirror, mid, p.since, 2*p.opts.DuplicateWindow, kept, keyed, byKey)
	if err != nil {
		return nil, nil, fmt.Errorf("read the pass's fetches: %w", err)
	}
	keys, err := p.keysOf(ctx, kept, kw)
	if err != nil {
		return nil, nil, err
	}
	if sh.reached, err = p.absentIntents(ctx, mid, kw, kept); err != nil {
		return nil, nil, err
	}
	return kept, keys, nil
}

// absentIntents are the obligations of other shards that the shard's
// charges of an intent no record holds link to (an intent's id stands
// for its charges), where the whole share reads them: in scope, or named
// by one of the account's records. No name of the charges themselves
// tells them, so the shard asks for them by the intent's id.
func (p *prefetched) absentIntents(ctx context.Context, mid, kw reconcile.Window, kept []reconcile.ProviderObject) ([]reconcile.Obligation, error) {
	held := make(map[string]struct{}, len(kept))
	for i := range kept {
		held[kept[i].ID] = struct{}{}
	}
	var absent []string
	for i := range kept {
		if pi := kept[i].PaymentIntent; pi != "" && kept[i].Kind == reconcile.Charge {
			if _, ok := held[pi]; !ok {
				absent = append(absent, pi)
			}
		}
	}
	if len(absent) == 0 {
		return nil, nil
	}
	slices.Sort(absent)
	cands, err := p.obligations.ReadNamed(ctx, sources.Named{ProviderIDs: slices.Compact(absent)})
	if err != nil {
		return nil, fmt.Errorf("read named obligations: %w", err)
	}
	cands = slices.DeleteFunc(cands, func(o reconcile.Obligation) bool { return p.shard.owns(o.ID) })
	if len(cands) == 0 {
		return nil, nil
	}
	named, err := namedInMirror(ctx, p.mirror.(ShardMirror), mid, kw, p.since, p.opts, cands, nil)
	if err != nil {
		return nil, fmt.Errorf("read the pass's fetches: %w", err)
	}
	return slices.DeleteFunc(cands, func(o reconcile.Obligation) bool { return !decides(&o, p.subject, named) }), nil
}

// namedInMirror is what of obs's names the records the mirror holds name,
// as a whole read's listing names what it reads: an object created in w
// and seen at or after since, by its id or its metadata; key evidence
// told in kw, by its key (store.Mirror.Named); none of held, the objects
// the asker holds as they are now. decides reads it as it reads a
// listing's names.
func namedInMirror(ctx context.Context, mirror ShardMirror, w, kw reconcile.Window, since time.Time, opts matcher.Options,
	obs []reconcile.Obligation, held []reconcile.ProviderObject) (sources.Named, error) {
	if len(obs) == 0 {
		return sources.Named{}, nil
	}
	n := store.Naming{MetaIDKey: opts.MetadataObligationID, MetaKeyKey: opts.MetadataIdempotencyKey}
	for i := range held {
		n.Held = append(n.Held, held[i].ID)
	}
	for i := range obs {
		o := &obs[i]
		for _, id := range []string{o.ProviderID, o.TargetID} {
			if id != "" {
				n.IDs = append(n.IDs, id)
			}
		}
		n.MetaIDs = append(n.MetaIDs, o.ID)
		if o.IdempotencyKey != "" {
			n.Keys, n.MetaKeys = append(n.Keys, o.IdempotencyKey), append(n.MetaKeys, o.IdempotencyKey)
		}
	}
	named, err := mirror.Named(ctx, w, kw, since, n)
	if err != nil {
		return sources.Named{}, err
	}
	var out sources.Named
	for v := range named {
		kind, value, _ := strings.Cut(v, ":")
		switch kind {
		case "id":
			out.ProviderIDs = append(out.ProviderIDs, value)
		case "meta_id":
			out.IDs = append(out.IDs, value)
		case "key", "meta_key":
			out.Keys = append(out.Keys, value)
		}
	}
	for _, list := range []*[]string{&out.ProviderIDs, &out.IDs, &out.Keys} {
		*list = sortedSet(*list)
	}
	return out, nil
}

// keysOf is the key evidence told in kw of objs and of the intents their
// charges name, listed or not (a key may link an absent intent's
// charges).
func (p *prefetched) keysOf(ctx context.Context, objs []reconcile.ProviderObject, kw reconcile.Window) ([]reconcile.KeyEvidence, error) {
	if !kw.Valid() || len(objs) == 0 {
		return nil, nil
	}
	keys, err := p.mirror.(ShardMirror).KeysOf(ctx, keyHolders(objs), kw)
	if err != nil {
		return nil, fmt.Errorf("read the pass's fetches: %w", err)
	}
	return keys, nil
}

// keyHolders are the ids whose key evidence links objs, sorted, each
// once: each object's own and the intent its charge belongs to, listed
// or not (a key may link an absent intent's charges).
func keyHolders(objs []reconcile.ProviderObject) []string {
	ids := make([]string, 0, len(objs))
	for i := range objs {
		ids = append(ids, objs[i].ID)
		if pi := objs[i].PaymentIntent; pi != "" {
			ids = append(ids, pi)
		}
	}
	return sortedSet(ids)
}

// closeOver is what a decision about any of seeds (objects listed from
// the provider for the shard, outside what the fetches mirrored) rests on
// in the mirror's records of the coverage, less what have holds, with its
// key evidence: their movements and twins, as shardListing closes its own.
func (p *prefetched) closeOver(ctx context.Context, seeds, have []reconcile.ProviderObject) ([]reconcile.ProviderObject, []reconcile.KeyEvidence, error) {
	if len(seeds) == 0 || !p.cover.Valid() {
		return nil, nil, nil
	}
	got, err := closeShard(ctx, p.mirror.(ShardMirror), p.cover, p.since, 2*p.opts.DuplicateWindow, slices.Clone(seeds), nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("read the pass's fetches: %w", err)
	}
	skip := map[string]struct{}{}
	for _, s := range [][]reconcile.ProviderObject{seeds, have} {
		for i := range s {
			skip[s[i].ID] = struct{}{}
		}
	}
	var extra []reconcile.ProviderObject
	for _, o := range got {
		if _, ok := skip[o.ID]; !ok {
			skip[o.ID] = struct{}{}
			extra = append(extra, o)
		}
	}
	kw := reconcile.Window{From: later(p.cover.From, p.now.Add(-sources.EventRetention)), To: p.cover.To.Add(time.Minute)}
	keys, err := p.keysOf(ctx, extra, kw)
	return extra, keys, err
}

// closeShard adds to kept, from the mirror's records of w, the objects of
// ids (and the charges of those that are intents), those whose key
// evidence tells one of keys, and what a decision about any kept object
// rests on, until nothing
// more is added: the rest of its movement (an intent's charges, a charge's
// intent, a refund's refunded movement), the refunds of its movement, and
// its possible twins (docs/design.md, "Findings": the same class, target
// and money, created within the duplicate window), found by customer and
// amount created within twinReach of it, a refund's by its movement.
func closeShard(ctx context.Context, mirror ShardMirror, w reconcile.Window, since time.Time, twinReach time.Duration,
	kept []reconcile.ProviderObject, ids map[string]struct{}, keys []string) ([]reconcile.ProviderObject, error) {
	return closeRelated(ctx, mirror, w, since, twinReach, kept, ids, store.Related{Keys: keys}, nil)
}

// closure is what a closure asked of the mirror already: every id asked
// for, as an id, an intent or a charge (a bit each), and every pair. An
// incremental pass keeps one across its rounds, so that what an earlier
// round asked of the objects it held is not asked again.
type closure struct {
	asked     map[string]uint8
	pairs     map[closurePair]struct{}
	customers map[string]string // an intent's customer, for its charges that name none
}

type closurePair struct {
	customer        string
	amount, created int64
}

func newClosure() *closure {
	return &closure{asked: map[string]uint8{}, pairs: map[closurePair]struct{}{}, customers: map[string]string{}}
}

// closeRelated is closeShard starting from seed's terms besides ids: what
// an incremental pass asks of the mirror for the obligations it matches
// again (docs/design.md, "Incremental matching"). c, when set, is what an
// earlier call asked already (and then what this one asked too).
func closeRelated(ctx context.Context, mirror ShardMirror, w reconcile.Window, since time.Time, twinReach time.Duration,
	kept []reconcile.ProviderObject, ids map[string]struct{}, seed store.Related, c *closure) ([]reconcile.ProviderObject, error) {
	have := make(map[string]struct{}, len(kept))
	for i := range kept {
		have[kept[i].ID] = struct{}{}
	}
	if c == nil {
		c = newClosure()
	}
	asked, pairs, customers := c.asked, c.pairs, c.customers
	type pair = closurePair
	const asID, asIntent, asCharge, asHalves = 1, 2, 4, 8
	ask := func(list *[]string, as uint8, v string) {
		if v != "" && asked[v]&as == 0 {
			asked[v] |= as
			*list = append(*list, v)
		}
	}
	q := seed
	for id := range ids {
		if _, ok := have[id]; !ok {
			ask(&q.IDs, asID, id)
		}
		// The charges of an intent named, listed or not.
		ask(&q.Intents, asIntent, id)
	}
	frontier := kept
	var halves []string
	for {
		for i := range kept {
			if o := &kept[i]; o.Kind == reconcile.PaymentIntent && o.Customer != "" {
				customers[o.ID] = o.Customer
			}
		}
		for i := range frontier {
			o := &frontier[i]
			switch o.Kind {
			case reconcile.PaymentIntent:
				ask(&q.Intents, asIntent, o.ID)
				ask(&q.IDs, asID, o.Charge)
			case reconcile.Charge:
				ask(&q.Charges, asCharge, o.ID)
				ask(&q.IDs, asID, o.PaymentIntent)
				ask(&q.Intents, asIntent, o.PaymentIntent)
			case reconcile.Refund:
				for _, t := range []string{o.Target, o.Charge, o.PaymentIntent} {
					ask(&q.IDs, asID, t)
					ask(&q.Charges, asCharge, t)
					ask(&q.Intents, asIntent, t)
					// Naming both halves, or one the pass holds (whose
					// object names the other), it leaves none unknown.
					if _, held := have[t]; !held && (o.Charge == "" || o.PaymentIntent == "") {
						ask(&halves, asHalves, t)
					}
				}
			}
		}
		// A refund naming one half of its payment may have twins naming
		// the other, which the coverage may not hold (an old charge): the
		// mirror tells which that is, and what of the coverage names it
		// is asked too.
		if len(halves) > 0 {
			other, err := mirror.Halves(ctx, halves)
			if err != nil {
				return nil, err
			}
			halves = halves[:0]
			for _, h := range other {
				ask(&q.IDs, asID, h)
				ask(&q.Charges, asCharge, h)
				ask(&q.Intents, asIntent, h)
			}
		}
		// Pairs from every kept object: an intent read later gives its
		// charges without a customer the one they move money for.
		for i := range kept {
			o := &kept[i]
			if o.Kind == reconcile.Refund {
				continue
			}
			c := o.Customer
			if c == "" {
				c = customers[o.PaymentIntent]
			}
			if c == "" {
				continue
			}
			key := pair{c, o.Money.Amount, o.Created.Time().Unix()}
			if _, ok := pairs[key]; !ok {
				pairs[key] = struct{}{}
				q.Twins = append(q.Twins, store.CustomerAmount{Customer: c, Amount: o.Money.Amount,
					From: o.Created.Time().Add(-twinReach), To: o.Created.Time().Add(twinReach)})
			}
		}
		if len(q.IDs)+len(q.Intents)+len(q.Charges)+len(q.Twins)+len(q.Keys)+len(q.LinkedTo)+len(q.Metadata) == 0 &&
			!q.Pending && !q.UnlinkedIntents {
			return kept, nil
		}
		q.Held = func(id string) bool { _, ok := have[id]; return ok }
		q.Linked = seed.Linked
		got, err := mirror.Related(ctx, w, q, since)
		if err != nil {
			return nil, err
		}
		q = store.Related{}
		n := len(kept)
		for _, o := range got {
			if _, ok := have[o.ID]; !ok {
				have[o.ID] = struct{}{}
				kept = append(kept, o)
			}
		}
		frontier = kept[n:]
	}
}

// shardObligations reads a shard's obligations: its own in scope (read
// once, by the routing) and every one the shard's records name, whatever
// its shard, so that each of those records links as it links in the
// whole account.
type shardObligations struct {
	Obligations
	sh *shardRead
}

func (o shardObligations) Read(ctx context.Context, w reconcile.Window, named sources.Named) ([]reconcile.Obligation, error) {
	if o.sh.own == nil {
		own, err := o.Obligations.(ShardObligations).ReadShard(ctx, w, o.sh.Index, o.sh.Of)
		if err != nil {
			return nil, err
		}
		o.sh.own = own
	}
	more, err := o.ReadNamed(ctx, named)
	if err != nil {
		return nil, err
	}
	in := make(map[string]struct{}, len(more))
	for i := range more {
		in[more[i].ID] = struct{}{}
	}
	for _, r := range o.sh.reached {
		if _, dup := in[r.ID]; !dup {
			more = append(more, r)
		}
	}
	return mergeObligations(slices.Clone(o.sh.own), more), nil
}

// ownShare keeps of res, concluded over shard sh's records, what is the
// shard's own: the findings reconcile.FindingShard gives it, its
// obligations' transitions, and its objects (their own id its, or
// retrieved by id for one of its obligations) with their links and
// counts (docs/design.md, "Shards").
func ownShare(res matcher.Result, in *matcher.Input, sh Shard) matcher.Result {
	out := res
	out.Findings, out.Elsewhere = nil, nil
	for _, f := range res.Findings {
		if reconcile.FindingShard(f, sh.Of) == sh.Index {
			out.Findings = append(out.Findings, f)
		} else {
			// Found here, another's to report: an orphan whose least
			// object changed may still be stored as this shard's.
			out.Elsewhere = append(out.Elsewhere, f.Fingerprint)
		}
	}
	if out.Findings == nil {
		out.Findings = []reconcile.Finding{}
	}
	slices.Sort(out.Elsewhere)
	out.Transitions = slices.DeleteFunc(slices.Clone(res.Transitions), func(t reconcile.Transition) bool { return !sh.owns(t.ObligationID) })
	ownObl := func(ids []string) []string {
		return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !sh.owns(id) })
	}
	out.ObligationIDs, out.Settled.Obligations = ownObl(res.ObligationIDs), ownObl(res.Settled.Obligations)
	retrieved := map[string]struct{}{}
	for _, l := range in.Lookups {
		retrieved[l.ID] = struct{}{}
	}
	// An object linked is the shard's of the least obligation it links
	// to, one linked to none its own id's (shardListing reads each in
	// that shard).
	linkedTo := map[string]string{}
	for _, l := range res.Links {
		if cur, ok := linkedTo[l.ObjectID]; !ok || l.ObligationID < cur {
			linkedTo[l.ObjectID] = l.ObligationID
		}
	}
	// One retrieved by id and linked to none is the shard's of the least
	// obligation in scope (or the shard's own decided on) naming it: each
	// shard that retrieved it holds those (read); the whole share counts
	// it once.
	decided := map[string]struct{}{}
	for _, id := range res.ObligationIDs {
		decided[id] = struct{}{}
	}
	namer := map[string]string{}
	for i := range in.Obligations {
		o := &in.Obligations[i]
		_, d := decided[o.ID]
		if !d && !decides(o, in.Subject, sources.Named{}) {
			continue
		}
		for _, id := range []string{o.ProviderID, o.TargetID} {
			if _, r := retrieved[id]; r && id != "" {
				if cur, ok := namer[id]; !ok || o.ID < cur {
					namer[id] = o.ID
				}
			}
		}
	}
	// A retrieved one goes by its namers first: it may link to an
	// obligation of another shard that never reads it (one out of scope
	// claiming it through its metadata or the other half of its payment).
	ownObj := func(id string) bool {
		if _, r := retrieved[id]; r {
			if obl, ok := namer[id]; ok {
				return sh.owns(obl)
			}
		}
		if obl, ok := linkedTo[id]; ok {
			return sh.owns(obl)
		}
		return sh.owns(id)
	}
	out.ObjectIDs, out.Buckets, out.Counts = nil, nil, reconcile.Counts{}
	for i, id := range res.ObjectIDs {
		if ownObj(id) {
			out.ObjectIDs = append(out.ObjectIDs, id)
			out.Buckets = append(out.Buckets, res.Buckets[i])
			if res.Buckets[i] == matcher.BucketLinked {
				out.Counts.Linked++
			}
		}
	}
	// Every object the shard read settles what it is about: the store
	// lets a part resolve only its shard's findings (store.Part), and a
	// finding of the shard's obligation may be about another shard's
	// object (a suspect the pass now finds linked).
	out.Settled.Objects = res.Settled.Objects
	out.Links = slices.DeleteFunc(slices.Clone(res.Links), func(l reconcile.Link) bool { return !ownObj(l.ObjectID) })
	out.Counts.Obligations, out.Counts.ProviderObjects = len(out.ObligationIDs), len(out.ObjectIDs)
	return out
}

// ownObligations are those of obs that are shard sh's.
func ownObligations(obs []reconcile.Obligation, sh Shard) []reconcile.Obligation {
	if sh.whole() {
		return obs
	}
	return slices.DeleteFunc(slices.Clone(obs), func(o reconcile.Obligation) bool { return !sh.owns(o.ID) })
}

// shardReaders checks that a's readers can read shards.
func shardReaders(rd Readers) error {
	if _, ok := rd.Mirror.(ShardMirror); !ok {
		return errors.New("apply: a sharded pass needs a mirror that reads related objects")
	}
	if _, ok := rd.Obligations.(ShardObligations); !ok {
		return errors.New("apply: a sharded pass needs obligations read by shard")
	}
	return nil
}
