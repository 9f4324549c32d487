// The second of three statements of the matching rules (docs/design.md,
// "Three statements of the rules"): oracle re-derives from the design,
// naively and apart from the matcher, what checkInvariants holds Match to.
// The matcher and the simulation's oracle (internal/sim/oracle.go) are the
// other two; a rule change touches all three and the design, so that one
// stated wrong is caught by the other two.

package matcher

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"reconcile/internal/config"

	"reconcile"
)

// chooser is the source of a generated input's choices: a seeded PRNG for
// the property tests, the fuzzer's bytes for FuzzMatch.
type chooser interface {
	intn(n int) int
}

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

type byteChooser struct {
	b []byte
	i int
}

func (c *byteChooser) intn(n int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % n
}

var propNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// genInput builds a small, adversarial world: ids, keys and targets come
// from small pools so that collisions, duplicates, conflicts, twins and
// intent groups happen often.
func genInput(c chooser) (Input, Options) {
	pick := func(xs ...string) string { return xs[c.intn(len(xs))] }
	objIDs := []string{"ch_1", "ch_2", "ch_3", "ch_4", "pi_1", "pi_2", "pi_3", "re_1", "re_2", "re_3", "re_4"}
	oblIDs := []string{"o1", "o2", "o3", "o4", "o5", "o6"}
	keys := []string{"k1", "k2", "k3", "k4", "k5", "k6", "kx"}
	monies := []reconcile.Money{{Amount: 100, Currency: "usd"}, {Amount: 250, Currency: "usd"}, {Amount: 100, Currency: "eur"}, {Amount: 12000, Currency: "jpy"}}
	offs := []time.Duration{-time.Hour, 30 * time.Minute, 2 * time.Hour, 20 * time.Hour, 30 * time.Hour, 80 * time.Hour, 100 * time.Hour, 800 * time.Hour}
	at := func() time.Time { return propNow.Add(-offs[c.intn(len(offs))]) }

	var in Input
	opts := OptionsFrom(config.Default().Matcher)
	if c.intn(2) == 0 {
		opts.ReportUnverified = true
	}
	if c.intn(4) == 0 {
		opts.DuplicateWindow = time.Hour
	}
	switch c.intn(3) {
	case 0:
		in.Listed = reconcile.Window{From: propNow.Add(-720 * time.Hour), To: propNow}
	case 1:
		in.Listed = reconcile.Window{From: propNow.Add(-50 * time.Hour), To: propNow}
	}
	switch c.intn(3) {
	case 0:
		in.EventsFrom = in.Listed.From
	case 1:
		in.EventsFrom = propNow.Add(-10 * time.Hour)
	}
	if c.intn(3) == 0 {
		// A run about the last day and a half, reading further back.
		in.Subject = reconcile.Window{From: propNow.Add(-36 * time.Hour), To: propNow}
	}

	for range c.intn(9) {
		id := oblIDs[c.intn(len(oblIDs))]
		o := reconcile.Obligation{ID: id, Kind: reconcile.Charge, IdempotencyKey: "k" + id[1:], Provider: "stripe"}
		if c.intn(5) == 0 {
			o.IdempotencyKey = pick(append(keys, "")...)
		}
		if c.intn(5) < 2 {
			o.Kind = reconcile.Refund
		}
		if c.intn(2) == 0 {
			o.ProviderID = pick(append(objIDs, "ch_9", "pi_9")...)
		}
		if o.Kind == reconcile.Refund {
			o.TargetID = pick("ch_1", "pi_1", "ch_2")
		}
		o.Money = monies[c.intn(len(monies))]
		states := append(slices.Clone(reconcile.States), "WEIRD")
		o.State = states[c.intn(len(states))]
		o.RawState = strings.ToLower(string(o.State))
		switch c.intn(3) {
		case 0:
			o.LeaseOwner, o.LeaseExpiresAt = "w", reconcile.StampOf(propNow.Add(-time.Hour))
		case 1:
			o.LeaseOwner, o.LeaseExpiresAt = "w", reconcile.StampOf(propNow.Add(time.Hour))
		}
		o.CreatedAt = reconcile.StampOf(at())
		o.UpdatedAt = o.CreatedAt
		if c.intn(2) == 0 {
			o.UpdatedAt = reconcile.StampOf(at())
		}
		if o.State == reconcile.Paid && c.intn(3) > 0 {
			o.PaidAt = o.UpdatedAt
		}
		in.Obligations = append(in.Obligations, o)
	}
	if c.intn(3) == 0 {
		for _, o := range in.Obligations {
			if c.intn(3) == 0 {
				in.Context = append(in.Context, o.ID)
			}
		}
	}
	// Half the worlds are stories: each obligation spawns the objects its
	// execution would have made (and sometimes a retry), which are then
	// mixed with the noise below.
	if c.intn(2) == 0 {
		for i := range in.Obligations {
			o := &in.Obligations[i]
			for n := range c.intn(3) {
				pool := []string{"ch_1", "ch_2", "ch_3", "pi_1", "pi_2"}
				if o.Kind == reconcile.Refund {
					pool = []string{"re_1", "re_2", "re_3", "re_4"}
				}
				p := reconcile.ProviderObject{ID: pool[c.intn(len(pool))], Money: o.Money, Status: reconcile.Succeeded, Created: reconcile.StampOf(o.CreatedAt.Time().Add(time.Duration(n) * time.Minute))}
				p.Kind = reconcile.ObjectKind(map[string]string{"ch": "charge", "pi": "payment_intent", "re": "refund"}[p.ID[:2]])
				if c.intn(8) == 0 {
					p.Money = monies[c.intn(len(monies))]
				}
				if c.intn(6) == 0 {
					p.Status = reconcile.Status(pick("pending", "failed", "canceled"))
				}
				p.RawStatus = string(p.Status)
				p.Customer = pick("", "cus_1")
				if p.Kind == reconcile.Refund {
					p.Target = o.TargetID
				}
				switch c.intn(4) {
				case 0:
					o.ProviderID = p.ID
				case 1:
					in.Keys = append(in.Keys, reconcile.KeyEvidence{ObjectID: p.ID, Key: o.IdempotencyKey})
				case 2:
					p.Metadata = map[string]string{"obligation_id": o.ID}
				}
				in.Objects = append(in.Objects, p)
			}
		}
	}
	for range c.intn(13) {
		id := objIDs[c.intn(len(objIDs))]
		p := reconcile.ProviderObject{ID: id}
		switch {
		case c.intn(10) == 0:
			p.Kind = reconcile.ObjectKind(pick("charge", "refund", "payment_intent", "dispute"))
		case strings.HasPrefix(id, "ch_"):
			p.Kind = reconcile.Charge
		case strings.HasPrefix(id, "pi_"):
			p.Kind = reconcile.PaymentIntent
		default:
			p.Kind = reconcile.Refund
		}
		p.Status = reconcile.Status(pick("succeeded", "succeeded", "succeeded", "pending", "failed", "canceled", "weird"))
		p.RawStatus = string(p.Status)
		p.Money = monies[c.intn(len(monies))]
		switch p.Kind {
		case reconcile.Charge:
			if c.intn(2) == 0 {
				p.PaymentIntent = pick("pi_1", "pi_2", "pi_3", "pi_7", "ch_1")
			}
			p.Customer = pick("", "cus_1", "cus_2")
			if c.intn(4) == 0 {
				p.AmountRefunded = p.Money.Amount
			}
		case reconcile.PaymentIntent:
			if c.intn(2) == 0 {
				p.Charge = pick("ch_1", "ch_2", "ch_3", "ch_4")
			}
			p.Customer = pick("", "cus_1", "cus_2")
		case reconcile.Refund:
			p.Target = pick("ch_1", "ch_2", "pi_1", "pi_7", "")
			if c.intn(2) == 0 {
				p.Charge = p.Target
			}
			if c.intn(3) == 0 {
				p.PaymentIntent = pick("pi_1", "pi_7")
			}
		}
		switch c.intn(6) {
		case 0:
			p.Metadata = map[string]string{"obligation_id": oblIDs[c.intn(len(oblIDs))]}
		case 1:
			p.Metadata = map[string]string{"idempotency_key": keys[c.intn(len(keys))]}
		case 2:
			p.Metadata = map[string]string{"obligation_id": oblIDs[c.intn(len(oblIDs))], "idempotency_key": keys[c.intn(len(keys))], "order": "x"}
		}
		p.Created = reconcile.StampOf(at())
		in.Objects = append(in.Objects, p)
	}
	for range c.intn(10) {
		in.Keys = append(in.Keys, reconcile.KeyEvidence{ObjectID: pick(append(objIDs, "pi_7")...), Key: keys[c.intn(len(keys))], EventType: "x.created"})
	}
	for range c.intn(4) {
		res := []reconcile.LookupResult{reconcile.LookupFound, reconcile.LookupNotFound, reconcile.LookupFailed}[c.intn(3)]
		l := reconcile.Lookup{ID: pick(append(objIDs, "ch_9", "pi_9")...), Result: res}
		if res == reconcile.LookupFailed {
			l.Err = pick("timeout", "503")
		}
		in.Lookups = append(in.Lookups, l)
	}
	return in, opts
}

// shuffled returns a copy of in with every slice permuted (and some
// records repeated verbatim): the same world, read in another order.
func shuffled(in Input, r *rand.Rand) Input {
	out := in
	out.Obligations = slices.Clone(in.Obligations)
	out.Objects = slices.Clone(in.Objects)
	out.Keys = slices.Clone(in.Keys)
	out.Lookups = slices.Clone(in.Lookups)
	if len(out.Objects) > 0 && r.IntN(2) == 0 {
		out.Objects = append(out.Objects, out.Objects[r.IntN(len(out.Objects))])
	}
	if len(out.Obligations) > 0 && r.IntN(2) == 0 {
		out.Obligations = append(out.Obligations, out.Obligations[r.IntN(len(out.Obligations))])
	}
	if len(out.Keys) > 0 && r.IntN(2) == 0 {
		out.Keys = append(out.Keys, out.Keys[r.IntN(len(out.Keys))])
	}
	r.Shuffle(len(out.Obligations), func(i, j int) { out.Obligations[i], out.Obligations[j] = out.Obligations[j], out.Obligations[i] })
	r.Shuffle(len(out.Objects), func(i, j int) { out.Objects[i], out.Objects[j] = out.Objects[j], out.Objects[i] })
	r.Shuffle(len(out.Keys), func(i, j int) { out.Keys[i], out.Keys[j] = out.Keys[j], out.Keys[i] })
	r.Shuffle(len(out.Lookups), func(i, j int) { out.Lookups[i], out.Lookups[j] = out.Lookups[j], out.Lookups[i] })
	return out
}

func propertyCases(t *testing.T) int {
	if testing.Short() {
		return 1000
	}
	return 10000
}

// TestProperties checks the matcher's invariants over seeded random worlds:
// the result does not depend on input order or repeated records, every
// object is in exactly one bucket, the links are exactly those a naive
// quadratic linker finds, nothing becomes PAID without exactly one
// succeeded linked movement of equal money, and fingerprints are unique.
func TestProperties(t *testing.T) {
	n := propertyCases(t)
	kinds := map[reconcile.FindingKind]int{}
	transitions, namesFrom := 0, 0
	for seed := range uint64(n) {
		in, opts := genInput(randChooser{rand.New(rand.NewPCG(seed, 1))})
		res := checkOne(t, in, opts, rand.New(rand.NewPCG(seed, 2)))
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
		for _, f := range res.Findings {
			kinds[f.Kind]++
		}
		transitions += len(res.Transitions)
		for _, at := range res.NamesFrom {
			if !at.IsZero() {
				namesFrom++
			}
		}
	}
	// The generator must reach every kind and transitions, or the
	// properties above say little.
	for _, k := range append(slices.Clone(reconcile.FindingKinds), Unverified) {
		if kinds[k] == 0 {
			t.Errorf("no generated case produced a %s finding", k)
		}
	}
	if transitions == 0 {
		t.Error("no generated case produced a transition")
	}
	if namesFrom == 0 {
		t.Error("no generated object names an obligation settled before it")
	}
	t.Logf("%d cases: transitions %d, objects naming from before them %d, findings by kind %v", n, transitions, namesFrom, kinds)
}

// checkOne runs Match on in and on a reordered copy and checks every
// invariant; it returns the first result.
func checkOne(tb testing.TB, in Input, opts Options, r *rand.Rand) Result {
	tb.Helper()
	before := deepCopy(in)
	res := Match(in, propNow, opts)
	if !reflect.DeepEqual(in, before) {
		tb.Errorf("Match modified its input")
	}
	checkInvariants(tb, in, propNow, opts, res)
	again := Match(shuffled(in, r), propNow, opts)
	if !reflect.DeepEqual(res, again) {
		tb.Errorf("Match depends on input order:\n first: %+v\nsecond: %+v", res, again)
	}
	return res
}

func deepCopy(in Input) Input {
	out := in
	out.Obligations = slices.Clone(in.Obligations)
	out.Objects = slices.Clone(in.Objects)
	for i := range out.Objects {
		out.Objects[i].Metadata = maps.Clone(out.Objects[i].Metadata)
	}
	out.Keys = slices.Clone(in.Keys)
	out.Lookups = slices.Clone(in.Lookups)
	return out
}

// oracle is a naive, quadratic re-derivation of the links and money
// movements, written from docs/design.md independently of the hash joins.
type oracle struct {
	now   time.Time
	opts  Options
	obls  []*reconcile.Obligation
	objs  []*reconcile.ProviderObject
	keys  []reconcile.KeyEvidence
	mov   map[string]string // object id → movement id
	links map[string]map[string]reconcile.Route
	// Memos of the linear scans below, so the race detector's run stays
	// fast; they change nothing the scans decide.
	memb map[string][]*reconcile.ProviderObject
}

// namesFrom is the creation of the oldest obligation p names (by its id
// as the obligation's provider or target id, its metadata, its key
// evidence) that was settled, created and last written before p was
// created; zero if none.
func (o *oracle) namesFrom(p *reconcile.ProviderObject) reconcile.Stamp {
	var oldest reconcile.Stamp
	for _, ob := range o.obls {
		named := ob.ProviderID == p.ID || ob.TargetID == p.ID ||
			o.opts.MetadataObligationID != "" && p.Metadata[o.opts.MetadataObligationID] == ob.ID
		if k := ob.IdempotencyKey; k != "" && !named {
			named = o.opts.MetadataIdempotencyKey != "" && p.Metadata[o.opts.MetadataIdempotencyKey] == k ||
				slices.ContainsFunc(o.keys, func(ke reconcile.KeyEvidence) bool { return ke.ObjectID == p.ID && ke.Key == k })
		}
		if named && !ob.Unsettled() && !ob.CreatedAt.IsZero() && ob.CreatedAt < p.Created && ob.UpdatedAt < p.Created &&
			(oldest.IsZero() || ob.CreatedAt < oldest) {
			oldest = ob.CreatedAt
		}
	}
	return oldest
}

func newOracle(in Input, now time.Time, opts Options) *oracle {
	o := &oracle{now: now, opts: opts, keys: in.Keys, mov: map[string]string{}, links: map[string]map[string]reconcile.Route{}}
	// The canonical copy of a repeated id is the greatest under the total
	// order; any fixed rule would do, the matcher's is this one.
	for i := range in.Obligations {
		p := &in.Obligations[i]
		if k := slices.IndexFunc(o.obls, func(q *reconcile.Obligation) bool { return q.ID == p.ID }); k >= 0 {
			if compareObligations(p, o.obls[k]) > 0 {
				o.obls[k] = p
			}
			continue
		}
		o.obls = append(o.obls, p)
	}
	for i := range in.Objects {
		p := &in.Objects[i]
		if k := slices.IndexFunc(o.objs, func(q *reconcile.ProviderObject) bool { return q.ID == p.ID }); k >= 0 {
			if compareObjects(p, o.objs[k]) > 0 {
				o.objs[k] = p
			}
			continue
		}
		o.objs = append(o.objs, p)
	}
	for _, p := range o.objs {
		o.mov[p.ID] = o.movementID(p)
	}
	o.memb = map[string][]*reconcile.ProviderObject{}
	for _, p := range o.objs {
		o.memb[o.mov[p.ID]] = append(o.memb[o.mov[p.ID]], p)
	}
	for _, p := range o.objs {
		for _, ob := range o.obls {
			if r := o.route(ob, o.mov[p.ID]); r != "" {
				if o.links[p.ID] == nil {
					o.links[p.ID] = map[string]reconcile.Route{}
				}
				o.links[p.ID][ob.ID] = r
			}
		}
	}
	return o
}

func (o *oracle) find(id string) *reconcile.ProviderObject {
	for _, p := range o.objs {
		if p.ID == id {
			return p
		}
	}
	return nil
}

func (o *oracle) movementID(p *reconcile.ProviderObject) string {
	if p.Kind != reconcile.Charge {
		return p.ID
	}
	pi := p.PaymentIntent
	if pi == "" {
		for _, q := range o.objs {
			if q.Kind == reconcile.PaymentIntent && q.Charge == p.ID && (pi == "" || q.ID < pi) {
				pi = q.ID
			}
		}
	}
	if pi == "" {
		return p.ID
	}
	if q := o.find(pi); q != nil && q.Kind != reconcile.PaymentIntent {
		return p.ID
	}
	return pi
}

// movementOf is the movement an id stands for: its object's, an unlisted
// intent's that its charges name, or, for an unlisted charge, the
// movement of the least intent naming it its latest.
func (o *oracle) movementOf(id string) string {
	if mv, ok := o.mov[id]; ok {
		return mv
	}
	if len(o.memb[id]) > 0 {
		return id
	}
	pi := ""
	for _, q := range o.objs {
		if q.Kind == reconcile.PaymentIntent && q.Charge == id && (pi == "" || q.ID < pi) {
			pi = q.ID
		}
	}
	if pi != "" {
		return o.mov[pi]
	}
	return ""
}

func (o *oracle) members(mv string) []*reconcile.ProviderObject { return o.memb[mv] }

func (o *oracle) class(mv string) reconcile.ObjectKind {
	for _, p := range o.members(mv) {
		if p.Kind == reconcile.PaymentIntent || p.Kind == reconcile.Charge {
			return reconcile.Charge
		}
		if p.Kind == reconcile.Refund {
			return reconcile.Refund
		}
	}
	return ""
}

// route is the best route by which obligation ob reaches movement mv, or
// "" if none.
func (o *oracle) route(ob *reconcile.Obligation, mv string) reconcile.Route {
	want := ob.Kind
	if want == reconcile.PaymentIntent {
		want = reconcile.Charge
	}
	if c := o.class(mv); c == "" || c != want {
		return ""
	}
	if ob.ProviderID != "" && o.movementOf(ob.ProviderID) == mv {
		return reconcile.RouteProviderID
	}
	if ob.IdempotencyKey != "" {
		for _, k := range o.keys {
			if k.Key == ob.IdempotencyKey && o.movementOf(k.ObjectID) == mv {
				return reconcile.RouteIdempotencyKey
			}
		}
	}
	for _, p := range o.members(mv) {
		if v := p.Metadata[o.opts.MetadataObligationID]; o.opts.MetadataObligationID != "" && v != "" && v == ob.ID {
			return reconcile.RouteMetadataID
		}
	}
	for _, p := range o.members(mv) {
		if v := p.Metadata[o.opts.MetadataIdempotencyKey]; o.opts.MetadataIdempotencyKey != "" && v != "" && v == ob.IdempotencyKey {
			return reconcile.RouteMetadataKey
		}
	}
	return ""
}

func (o *oracle) succeeded(mv string) bool {
	return slices.ContainsFunc(o.members(mv), func(p *reconcile.ProviderObject) bool { return p.Status == reconcile.Succeeded })
}

func (o *oracle) pendingLive(mv string) bool {
	if o.succeeded(mv) {
		return false
	}
	return slices.ContainsFunc(o.members(mv), func(p *reconcile.ProviderObject) bool {
		final := p.Status == reconcile.Failed || p.Status == reconcile.Canceled
		return !final && o.now.Sub(p.Created.Time()) < o.opts.PendingGrace
	})
}

func (o *oracle) listed(w reconcile.Window, mv string) bool {
	return slices.ContainsFunc(o.members(mv), func(p *reconcile.ProviderObject) bool { return w.Contains(p.Created.Time()) })
}

// movementsOf lists the distinct movements that obligation id reaches.
func (o *oracle) movementsOf(id string) []string {
	var out []string
	for objID, l := range o.links {
		if _, ok := l[id]; ok && !slices.Contains(out, o.mov[objID]) {
			out = append(out, o.mov[objID])
		}
	}
	return out
}

// checkInvariants checks what must hold of every result.
func checkInvariants(tb testing.TB, in Input, now time.Time, opts Options, res Result) {
	tb.Helper()
	or := newOracle(in, now, opts)

	// Every object in exactly one bucket; ids sorted and distinct.
	var objIDs, oblIDs []string
	for _, p := range or.objs {
		objIDs = append(objIDs, p.ID)
	}
	for _, ob := range or.obls {
		if !slices.Contains(in.Context, ob.ID) {
			oblIDs = append(oblIDs, ob.ID)
		}
	}
	subject := in.Subject
	if subject == (reconcile.Window{}) {
		subject = in.Listed
	}
	slices.Sort(objIDs)
	slices.Sort(oblIDs)
	if !slices.Equal(res.ObjectIDs, objIDs) && len(objIDs)+len(res.ObjectIDs) > 0 {
		tb.Errorf("ObjectIDs = %v, want %v", res.ObjectIDs, objIDs)
	}
	if !slices.Equal(res.ObligationIDs, oblIDs) && len(oblIDs)+len(res.ObligationIDs) > 0 {
		tb.Errorf("ObligationIDs = %v, want %v", res.ObligationIDs, oblIDs)
	}
	if len(res.Buckets) != len(objIDs) {
		tb.Errorf("%d buckets for %d objects", len(res.Buckets), len(objIDs))
	}
	for _, p := range or.objs {
		var got reconcile.Stamp
		if i, ok := slices.BinarySearch(res.ObjectIDs, p.ID); ok && res.NamesFrom != nil {
			got = res.NamesFrom[i]
		}
		if want := or.namesFrom(p); got != want {
			tb.Errorf("object %s names from %v, want %v", p.ID, got, want)
		}
	}
	want := reconcile.Counts{Obligations: len(oblIDs), ProviderObjects: len(objIDs)}
	for _, id := range objIDs {
		b, ok := res.Bucket(id)
		if !ok {
			tb.Errorf("object %s has no bucket", id)
			continue
		}
		n := len(or.links[id])
		switch {
		case n == 1:
			want.Linked++
			if b != BucketLinked {
				tb.Errorf("object %s links to one obligation but is in bucket %s", id, b)
			}
		case n > 1:
			if b != BucketConflict {
				tb.Errorf("object %s links to %d obligations but is in bucket %s", id, n, b)
			}
		case b == BucketOrphan && !or.listed(subject, or.mov[id]):
			tb.Errorf("object %s is an orphan but was not created in the run's subject", id)
		case b == BucketOrphan || b == BucketSuspected:
			if !or.succeeded(or.mov[id]) || !or.listed(in.Listed, or.mov[id]) {
				tb.Errorf("object %s is in bucket %s but no money moved or it was not listed", id, b)
			}
		case b == BucketPending:
			if !or.pendingLive(or.mov[id]) {
				tb.Errorf("object %s is in bucket pending but is not pending within the grace period", id)
			}
		case b == BucketIgnored:
			if or.succeeded(or.mov[id]) && or.listed(subject, or.mov[id]) && or.listed(in.Listed, or.mov[id]) || or.pendingLive(or.mov[id]) {
				tb.Errorf("object %s is ignored but is a movement of money of the run's subject or is pending", id)
			}
		default:
			tb.Errorf("unlinked object %s is in bucket %q", id, b)
		}
	}
	if res.Counts != want {
		tb.Errorf("Counts = %+v, want %+v", res.Counts, want)
	}

	// Links: exactly the naive linker's, sorted.
	var links []reconcile.Link
	for _, id := range objIDs {
		for _, oid := range slices.Sorted(maps.Keys(or.links[id])) {
			links = append(links, reconcile.Link{ObjectID: id, ObligationID: oid, Route: or.links[id][oid]})
		}
	}
	if !slices.Equal(res.Links, links) && len(links)+len(res.Links) > 0 {
		tb.Errorf("Links = %v, want %v", res.Links, links)
	}

	// Findings: well formed, sorted, fingerprints unique.
	seen := map[string]bool{}
	byObl := map[string][]reconcile.FindingKind{}
	inBucket := map[string]reconcile.FindingKind{}
	for i, f := range res.Findings {
		if seen[f.Fingerprint] {
			tb.Errorf("fingerprint %s appears twice (%s %s)", f.Fingerprint, f.Kind, f.ObligationID)
		}
		seen[f.Fingerprint] = true
		if i > 0 && reconcile.CompareFindings(res.Findings[i-1], f) >= 0 {
			tb.Errorf("findings not sorted at %d: %s %s after %s %s", i, f.Kind, f.ObligationID, res.Findings[i-1].Kind, res.Findings[i-1].ObligationID)
		}
		if f.Severity != f.Kind.Severity() {
			tb.Errorf("%s has severity %s, want %s", f.Kind, f.Severity, f.Kind.Severity())
		}
		if f.ProviderIDs == nil || !slices.IsSorted(f.ProviderIDs) || len(slices.Compact(slices.Clone(f.ProviderIDs))) != len(f.ProviderIDs) {
			tb.Errorf("%s %s: provider ids %v not sorted, distinct and non-nil", f.Kind, f.ObligationID, f.ProviderIDs)
		}
		if f.ContentHash != reconcile.ContentHash(f.AtRisk, f.ProviderIDs) {
			tb.Errorf("%s %s: content hash does not hash at-risk and provider ids", f.Kind, f.ObligationID)
		}
		if f.Detail == "" || strings.Contains(f.Detail, "%!") {
			tb.Errorf("%s %s: bad detail %q", f.Kind, f.ObligationID, f.Detail)
		}
		switch f.Kind {
		case reconcile.Orphan:
			if f.ObligationID != "" {
				tb.Errorf("orphan with obligation %s", f.ObligationID)
			}
			for _, id := range f.ProviderIDs {
				inBucket[id] = f.Kind
			}
		case reconcile.SuspectedDuplicate:
			suspectInSubject := false
			for _, id := range f.ProviderIDs {
				if b, _ := res.Bucket(id); b == BucketSuspected {
					inBucket[id] = f.Kind
					suspectInSubject = suspectInSubject || or.listed(subject, or.mov[id])
				}
			}
			// A suspect of the subject is reported whoever owns its twin;
			// one read as evidence only for an obligation decided on.
			if !slices.Contains(oblIDs, f.ObligationID) && !(suspectInSubject && slices.Contains(in.Context, f.ObligationID)) {
				tb.Errorf("%s names obligation %q, which the run does not decide on", f.Kind, f.ObligationID)
			}
		case reconcile.ConflictingLink:
			if !slices.Contains(oblIDs, f.ObligationID) {
				tb.Errorf("%s names obligation %q not in the input", f.Kind, f.ObligationID)
			}
		default:
			if !slices.Contains(oblIDs, f.ObligationID) {
				tb.Errorf("%s names obligation %q not in the input", f.Kind, f.ObligationID)
			}
			if f.Fingerprint != reconcile.Fingerprint(f.Kind, f.ObligationID, "") {
				tb.Errorf("%s %s: fingerprint is not the kind and obligation's", f.Kind, f.ObligationID)
			}
		}
		if f.Kind == reconcile.Orphan || f.Kind == reconcile.SuspectedDuplicate || f.Kind == reconcile.ConflictingLink {
			// About an object: the fingerprint carries the id of the
			// money movement it is about.
			ok := false
			for _, id := range f.ProviderIDs {
				ok = ok || f.Fingerprint == reconcile.Fingerprint(f.Kind, f.ObligationID, or.mov[id])
			}
			if !ok {
				tb.Errorf("%s %s: fingerprint carries none of the movements of %v", f.Kind, f.ObligationID, f.ProviderIDs)
			}
		}
		byObl[f.ObligationID] = append(byObl[f.ObligationID], f.Kind)
	}
	// An orphan or suspected object's movement is named by a finding of
	// that kind (which names its succeeded members only).
	for _, id := range objIDs {
		switch b, _ := res.Bucket(id); b {
		case BucketOrphan, BucketSuspected:
			var k reconcile.FindingKind
			for _, p := range or.members(or.mov[id]) {
				k = cmp.Or(k, inBucket[p.ID])
			}
			if (b == BucketOrphan) != (k == reconcile.Orphan) || k == "" {
				tb.Errorf("object %s in bucket %s: its movement is named by finding kind %q", id, b, k)
			}
		}
	}

	// Live leases: untouched, and no finding about their outcome.
	for _, ob := range or.obls {
		if ob.State != reconcile.Executing || !ob.LeaseLive(now) {
			continue
		}
		for _, k := range byObl[ob.ID] {
			if k == reconcile.StaleLease || k == reconcile.StatusMismatch || k == reconcile.PaidWithoutEvidence || k == reconcile.UnresolvedUnknown {
				tb.Errorf("live lease %s has a %s finding", ob.ID, k)
			}
		}
	}

	// Transitions: only →PAID, only from CONFIRMATION_UNKNOWN or an
	// expired EXECUTING, only on exactly one succeeded linked movement of
	// equal money with nothing pending, conflicting or mismatched.
	for i, tr := range res.Transitions {
		if i > 0 && res.Transitions[i-1].ObligationID >= tr.ObligationID {
			tb.Errorf("transitions not sorted and distinct at %s", tr.ObligationID)
		}
		k := slices.IndexFunc(or.obls, func(o *reconcile.Obligation) bool { return o.ID == tr.ObligationID })
		if k < 0 {
			tb.Errorf("transition of unknown obligation %s", tr.ObligationID)
			continue
		}
		ob := or.obls[k]
		if tr.To != reconcile.Paid || tr.From != ob.State || tr.FromRaw != ob.RawState || !tr.FromLeaseExpiresAt.Equal(ob.LeaseExpiresAt.Time()) {
			tb.Errorf("transition %+v does not match obligation %+v", tr, ob)
		}
		if ob.State != reconcile.ConfirmationUnknown && (ob.State != reconcile.Executing || ob.LeaseLive(now)) {
			tb.Errorf("transition of %s from %s (lease %v)", ob.ID, ob.State, ob.LeaseExpiresAt)
		}
		// Only on the whole of its records: listed and keyed from its
		// creation less the skew and two duplicate windows, on to now.
		if from := ob.CreatedAt.Time().Add(-opts.ClockSkew - 2*opts.DuplicateWindow); !in.Listed.Valid() || in.Listed.From.After(from) ||
			in.Listed.To.Before(now) || in.EventsFrom.IsZero() || in.EventsFrom.After(from) {
			tb.Errorf("%s marked PAID, but the records read (%v, events from %v) do not reach back to %v", ob.ID, in.Listed, in.EventsFrom, from)
		}
		var succ []string
		for _, mv := range or.movementsOf(ob.ID) {
			if or.pendingLive(mv) {
				tb.Errorf("%s marked PAID while %s is pending", ob.ID, mv)
			}
			for _, p := range or.members(mv) {
				if len(or.links[p.ID]) > 1 {
					tb.Errorf("%s marked PAID although %s links to several obligations", ob.ID, p.ID)
				}
			}
			if or.succeeded(mv) {
				succ = append(succ, mv)
				for _, p := range or.members(mv) {
					if p.Status == reconcile.Succeeded && !sameMoney(p.Money, ob.Money) {
						tb.Errorf("%s (%s) marked PAID on %s of %s", ob.ID, ob.Money, p.ID, p.Money)
					}
				}
			}
		}
		if len(succ) != 1 {
			tb.Errorf("%s marked PAID on %d succeeded movements %v", ob.ID, len(succ), succ)
		} else if or.movementOf(tr.ProviderID) != succ[0] {
			tb.Errorf("%s marked PAID with evidence %s, not of movement %s", ob.ID, tr.ProviderID, succ[0])
		}
		for _, k := range byObl[ob.ID] {
			if k != Unverified {
				tb.Errorf("%s marked PAID despite a %s finding", ob.ID, k)
			}
		}
	}
}

// FuzzMatch checks the invariants of TestProperties on worlds built from
// the fuzzer's bytes.
func FuzzMatch(f *testing.F) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 9))
		b := make([]byte, 200)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, opts := genInput(&byteChooser{b: data})
		var seed uint64
		for _, c := range data {
			seed = seed*31 + uint64(c)
		}
		checkOne(t, in, opts, rand.New(rand.NewPCG(seed, 3)))
	})
}

// TestOracleSelf guards the oracle: on a hand-made world its links are
// the obvious ones.
func TestOracleSelf(t *testing.T) {
	in := Input{
		Obligations: []reconcile.Obligation{{ID: "o1", Kind: reconcile.Charge, IdempotencyKey: "k1", ProviderID: "pi_1"}},
		Objects: []reconcile.ProviderObject{
			{ID: "pi_1", Kind: reconcile.PaymentIntent, Status: reconcile.Succeeded},
			{ID: "ch_1", Kind: reconcile.Charge, PaymentIntent: "pi_1", Status: reconcile.Succeeded},
			{ID: "ch_2", Kind: reconcile.Charge, Status: reconcile.Succeeded},
		},
		Keys: []reconcile.KeyEvidence{{ObjectID: "ch_2", Key: "k1"}},
	}
	or := newOracle(in, propNow, OptionsFrom(config.Default().Matcher))
	got := fmt.Sprint(or.links["pi_1"], or.links["ch_1"], or.links["ch_2"])
	want := "map[o1:provider_id] map[o1:provider_id] map[o1:idempotency_key]"
	if got != want {
		t.Errorf("oracle links = %s, want %s", got, want)
	}
	if mv := or.movementsOf("o1"); len(mv) != 2 {
		t.Errorf("oracle movements of o1 = %v, want two", mv)
	}
}
