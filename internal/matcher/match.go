package matcher

import (
	"cmp"
	"encoding/binary"
	"maps"
	"slices"
	"strings"
	"time"

	"reconcile"
)

// Unverified is the informational kind reconcile.Unverified: a PAID
// obligation to which nothing links, where the run could not prove absence
// either (the listing did not cover its time, or the lookup of the object
// it names failed). Reported only when Options.ReportUnverified is set.
const Unverified = reconcile.Unverified

// Link routes as small integers, in priority order, so that "keep the
// highest-priority route" is a min.
const (
	routeNone uint8 = iota
	routeProviderID
	routeKey
	routeMetaID
	routeMetaKey
)

func routeName(r uint8) reconcile.Route {
	switch r {
	case routeProviderID:
		return reconcile.RouteProviderID
	case routeKey:
		return reconcile.RouteIdempotencyKey
	case routeMetaID:
		return reconcile.RouteMetadataID
	case routeMetaKey:
		return reconcile.RouteMetadataKey
	}
	return ""
}

// mstatus is a money movement's outcome as far as the run can tell.
type mstatus uint8

const (
	// mFailed: every member failed or was canceled: no money moved.
	mFailed mstatus = iota
	// mSucceeded: some member succeeded: money moved.
	mSucceeded
	// mPendingLive: not final yet, within the grace period.
	mPendingLive
	// mPendingStale: still pending after the grace period: no evidence.
	mPendingStale
)

// class is what a movement or an obligation is, for linking: a charge
// obligation takes charges and intents, a refund obligation refunds.
type class uint8

const (
	clsNone class = iota // an unknown kind: links to nothing
	clsCharge
	clsRefund
)

func kindClass(k reconcile.ObjectKind) class {
	switch k {
	case reconcile.Charge, reconcile.PaymentIntent:
		return clsCharge
	case reconcile.Refund:
		return clsRefund
	}
	return clsNone
}

// The buckets as small integers, named by bucketName.
const (
	bLinked uint8 = iota
	bConflict
	bSuspected
	bOrphan
	bPending
	bIgnored
)

func bucketName(b uint8) Bucket {
	return [...]Bucket{BucketLinked, BucketConflict, BucketSuspected, BucketOrphan, BucketPending, BucketIgnored}[b]
}

// mlink is one obligation a movement reaches, by its best route.
type mlink struct {
	obl   int32
	route uint8
}

// movement is one money movement: a refund, a charge on its own, or a
// payment intent together with its charges (DESIGN.md §3: never a
// duplicate of each other). It holds no pointers, so that a million of
// them cost the garbage collector nothing to scan.
type movement struct {
	first int32 // first member object; members are chained by matcher.next
	rep   int32 // the member whose money and time stand for the movement
	// ref names the movement: the object whose id is its id (the intent
	// of a group), or -1-k for absentIDs[k], an intent only its charges
	// named.
	ref      int32
	link     mlink // first obligation reached; obl -1 when none
	class    class
	status   mstatus
	failed   bool  // some member failed or was canceled
	conflict bool  // more obligations reached, in matcher.more
	bucket   uint8 // set by classifyUnlinked
}

// matcher holds one Match call's working state. Indexes are int32 to halve
// the memory of the per-object arrays at a million objects, and the
// per-object and per-obligation arrays hold no pointers, so that the
// garbage collector does not scan them.
//
// Obligations are numbered in id order. Objects are numbered in input
// order, the order the sources read them in, so that the passes over
// their fields read memory front to back; objSorted gives id order.
type matcher struct {
	in   *Input
	opts Options
	now  time.Time

	// oblAt maps an obligation's number to its input position; nil when
	// the input was sorted by id without duplicates, as the sources
	// deliver it, and the two are the same.
	oblAt   []int32
	oblCls  []class // per obligation: its kind's class
	oblIdx  index   // id → obligation, built on first use
	keyIdx  index   // idempotency key → obligation
	dupKeys map[string][]int32

	// objAt maps an object's number to its input position and objRank the
	// other way (every copy of a duplicated id to the one number); both
	// nil when the input holds each id once.
	objAt     []int32
	objRank   []int32
	objSorted []int32 // object numbers in id order; nil when that is input order
	objIdx    index   // id → object
	objMov    []int32 // object → movement
	next      []int32 // object → next member of its movement, -1 at the end
	absentPI  map[string]int32
	absentIDs []string

	movs    []movement
	more    map[int32][]mlink // further obligations of conflicting movements
	lookups map[string]reconcile.Lookup

	// oblStart/oblMovs list, per obligation, the movements reaching it
	// (CSR layout: one allocation instead of one slice per obligation).
	oblStart []int32
	oblMovs  []int32

	// oblIDs are the obligations' ids by number.
	oblIDs []string
	// context is, per obligation, whether it was read only to link
	// (Input.Context); nil when none was.
	context []bool
	// subject is the window the run is about: Input.Subject, or Listed.
	subject reconcile.Window

	// partial lists, in id order, the obligations decided on whose records
	// the run did not all read.
	partial []string

	res       Result
	suspected []bool // per obligation: an unlinked movement repeats one of its movements
}

// Match links every provider object of in to the obligations of in,
// classifies every disagreement into findings (DESIGN.md §3) and decides
// the PAID transitions (DESIGN.md §4). It is a pure function of its
// arguments: the result does not depend on the order of any input slice,
// and duplicated input records (the same id twice) count once.
func Match(in Input, now time.Time, opts Options) Result {
	m := &matcher{in: &in, opts: opts, now: now, subject: in.Subject}
	if m.subject == (reconcile.Window{}) {
		m.subject = in.Listed
	}
	m.indexObligations()
	m.indexObjects()
	m.groupMovements()
	m.indexLookups()
	m.linkAll()
	m.buildObligationIndex()
	// Unlinked movements first: a suspected duplicate of an obligation's
	// movement is a duplicate found for it, which keeps it from PAID.
	m.classifyUnlinked()
	m.evaluateObligations()
	m.emit()
	return m.res
}

// obl is obligation number i.
func (m *matcher) obl(i int32) *reconcile.Obligation {
	if m.oblAt != nil {
		return &m.in.Obligations[m.oblAt[i]]
	}
	return &m.in.Obligations[i]
}

// obj is object number k.
func (m *matcher) obj(k int32) *reconcile.ProviderObject {
	if m.objAt != nil {
		return &m.in.Objects[m.objAt[k]]
	}
	return &m.in.Objects[k]
}

// objOf is the number of the object at input position j.
func (m *matcher) objOf(j int) int32 {
	if m.objRank != nil {
		return m.objRank[j]
	}
	return int32(j)
}

func (m *matcher) nObjs() int32 { return int32(len(m.res.ObjectIDs)) }

func (m *matcher) nObls() int32 { return int32(len(m.oblIDs)) }

// indexObligations dedupes obligations by id, numbers them in id order and
// indexes them by idempotency key.
func (m *matcher) indexObligations() {
	obs := m.in.Obligations
	n := len(obs)
	// The sources deliver obligations sorted by id, each once: checking
	// that costs one pass, sorting a million a good deal more.
	m.oblIDs = idsIfSorted(n, func(i int) string { return obs[i].ID })
	if m.oblIDs == nil {
		order := sortedByID(n, func(i int32) string { return obs[i].ID })
		m.oblAt = make([]int32, 0, n)
		m.oblIDs = make([]string, 0, n)
		for p := 0; p < n; {
			// A run of copies of one id: keep the greatest under a total
			// order, so that which copy wins does not depend on input
			// order.
			best := order[p].idx
			q := p + 1
			for ; q < n && order[q].hi == order[p].hi && order[q].lo == order[p].lo && obs[order[q].idx].ID == obs[best].ID; q++ {
				if compareObligations(&obs[order[q].idx], &obs[best]) > 0 {
					best = order[q].idx
				}
			}
			m.oblAt = append(m.oblAt, best)
			m.oblIDs = append(m.oblIDs, obs[best].ID)
			p = q
		}
	}
	nObl := len(m.oblIDs)
	m.oblCls = make([]class, nObl)
	keys := 0
	for i := range int32(nObl) {
		o := m.obl(i)
		m.oblCls[i] = kindClass(o.Kind)
		if o.IdempotencyKey != "" {
			keys++
		}
	}
	m.keyIdx = newIndex(keys)
	keyOf := func(i int32) string { return m.obl(i).IdempotencyKey }
	for i := range int32(nObl) {
		k := m.obl(i).IdempotencyKey
		if k == "" {
			continue
		}
		if _, added := m.keyIdx.add(k, i, keyOf); !added {
			// Obligations sharing a key (bad data) all link by it.
			if m.dupKeys == nil {
				m.dupKeys = map[string][]int32{}
			}
			m.dupKeys[k] = append(m.dupKeys[k], i)
		}
	}
	m.suspected = make([]bool, nObl)
	if len(m.in.Context) > 0 {
		ctx := slices.Sorted(slices.Values(m.in.Context))
		m.context = make([]bool, nObl)
		for i, id := range m.oblIDs {
			_, m.context[i] = slices.BinarySearch(ctx, id)
		}
	}
}

// decides reports whether the run decides on obligation i: it was not
// read only to link.
func (m *matcher) decides(i int32) bool { return m.context == nil || !m.context[i] }

// idsIfSorted returns the n ids id(0), id(1), … if they are strictly
// ascending, as the sources deliver them, and nil otherwise.
func idsIfSorted(n int, id func(int) string) []string {
	ids := make([]string, n)
	for i := range n {
		ids[i] = id(i)
		if i > 0 && ids[i] <= ids[i-1] {
			return nil
		}
	}
	return ids
}

// oblByID returns the number of the obligation with id, or -1. Only
// metadata names obligations by id, so the index is built on first use.
func (m *matcher) oblByID(id string) int32 {
	ids := m.oblIDs
	if m.oblIdx.slots == nil {
		m.oblIdx = newIndex(len(ids))
		for i, s := range ids {
			m.oblIdx.addNew(s, int32(i))
		}
	}
	return m.oblIdx.find(id, func(i int32) string { return ids[i] })
}

// indexObjects dedupes provider objects by id, orders them by id and
// indexes them by id.
func (m *matcher) indexObjects() {
	objs := m.in.Objects
	n := len(objs)
	m.res.ObjectIDs = idsIfSorted(n, func(i int) string { return objs[i].ID })
	if m.res.ObjectIDs == nil {
		order := sortedByID(n, func(i int32) string { return objs[i].ID })
		dups := false
		for p := 1; p < n && !dups; p++ {
			dups = order[p].hi == order[p-1].hi && order[p].lo == order[p-1].lo && objs[order[p].idx].ID == objs[order[p-1].idx].ID
		}
		if dups {
			m.dedupeObjects(order)
		} else {
			m.objSorted = make([]int32, n)
			m.res.ObjectIDs = make([]string, n)
			for p, e := range order {
				m.objSorted[p] = e.idx
				m.res.ObjectIDs[p] = objs[e.idx].ID
			}
		}
	}
	// Inserted in input order: the ids' bytes are read in the order they
	// were allocated.
	nObj := m.nObjs()
	m.objIdx = newIndex(int(nObj))
	for k := range nObj {
		m.objIdx.addNew(m.obj(k).ID, k)
	}
}

// dedupeObjects keeps one copy of each id, the greatest under a total
// order, so that which copy wins does not depend on input order; order is
// the objects sorted by id. Duplicates are bad data: this path need not be
// fast.
func (m *matcher) dedupeObjects(order []sortKey) {
	objs := m.in.Objects
	n := len(objs)
	type run struct{ from, to, kept int32 } // order[from:to] share an id
	var runs []run
	keep := make([]bool, n)
	for p := 0; p < n; {
		best := order[p].idx
		q := p + 1
		for ; q < n && objs[order[q].idx].ID == objs[best].ID; q++ {
			if compareObjects(&objs[order[q].idx], &objs[best]) > 0 {
				best = order[q].idx
			}
		}
		keep[best] = true
		runs = append(runs, run{int32(p), int32(q), best})
		p = q
	}
	m.objAt = make([]int32, 0, len(runs))
	m.objRank = make([]int32, n)
	for j := range objs {
		if keep[j] {
			m.objRank[j] = int32(len(m.objAt))
			m.objAt = append(m.objAt, int32(j))
		}
	}
	m.objSorted = make([]int32, len(runs))
	m.res.ObjectIDs = make([]string, len(runs))
	for r, ru := range runs {
		k := m.objRank[ru.kept]
		for _, e := range order[ru.from:ru.to] {
			m.objRank[e.idx] = k
		}
		m.objSorted[r] = k
		m.res.ObjectIDs[r] = objs[ru.kept].ID
	}
}

// groupMovements puts every object into exactly one money movement: an
// intent with its charges (the charge names the intent, or the intent
// names the charge as its latest), every other object on its own.
func (m *matcher) groupMovements() {
	n := m.nObjs()
	m.objMov = make([]int32, n)
	m.next = make([]int32, n)
	m.movs = make([]movement, 0, n)
	// Intents first: each is a movement of its own.
	var named []int32 // intents naming a charge as their latest
	for k := range n {
		p := m.obj(k)
		m.objMov[k] = -1
		m.next[k] = -1
		if p.Kind == reconcile.PaymentIntent {
			m.objMov[k] = m.newMovement(k, clsCharge)
			m.addMember(m.objMov[k], k)
			if p.Charge != "" {
				named = append(named, k)
			}
		}
	}
	// A charge that names no intent joins the intent that names it (the
	// smallest id, should several: bad data, but order must not matter).
	var chargeToPI map[int32]int32
	for _, i := range named {
		j := m.objByID(m.obj(i).Charge)
		if j < 0 || m.obj(j).Kind != reconcile.Charge || m.obj(j).PaymentIntent != "" {
			continue
		}
		if chargeToPI == nil {
			chargeToPI = map[int32]int32{}
		}
		if cur, ok := chargeToPI[j]; !ok || m.obj(i).ID < m.obj(cur).ID {
			chargeToPI[j] = i
		}
	}
	for j, i := range chargeToPI {
		m.objMov[j] = m.objMov[i]
		m.addMember(m.objMov[j], j)
	}
	for k := range n {
		if m.objMov[k] >= 0 {
			continue
		}
		p := m.obj(k)
		if pi := p.PaymentIntent; pi != "" && p.Kind == reconcile.Charge {
			if j := m.objByID(pi); j >= 0 {
				if m.obj(j).Kind == reconcile.PaymentIntent {
					m.objMov[k] = m.objMov[j]
				}
			} else {
				// The intent was not listed; its charges still move
				// money once, together.
				if m.absentPI == nil {
					m.absentPI = map[string]int32{}
				}
				mv, ok := m.absentPI[pi]
				if !ok {
					m.absentIDs = append(m.absentIDs, pi)
					mv = m.newMovement(int32(-len(m.absentIDs)), clsCharge)
					m.absentPI[pi] = mv
				}
				m.objMov[k] = mv
			}
		}
		if m.objMov[k] < 0 {
			m.objMov[k] = m.newMovement(k, kindClass(p.Kind))
		}
		m.addMember(m.objMov[k], k)
	}
	for k := range m.movs {
		m.summarise(&m.movs[k])
	}
}

// objByID returns the number of the object with id, or -1.
func (m *matcher) objByID(id string) int32 {
	return m.objIdx.find(id, func(k int32) string { return m.obj(k).ID })
}

// movID is a movement's id: its intent's for a group, else its object's.
func (m *matcher) movID(mv int32) string {
	if r := m.movs[mv].ref; r >= 0 {
		return m.obj(r).ID
	}
	return m.absentIDs[-1-m.movs[mv].ref]
}

// target is what a movement is a suspected duplicate against: a refund's
// refunded movement, a charge's or an intent's customer ("" for none).
func (m *matcher) target(mv int32) string {
	v := &m.movs[mv]
	rep := m.obj(v.rep)
	switch v.class {
	case clsRefund:
		return m.refundTarget(rep)
	case clsCharge:
		if rep.Customer == "" && v.ref >= 0 {
			return m.obj(v.ref).Customer
		}
		return rep.Customer
	}
	return ""
}

// nLinks is how many obligations movement mv reaches.
func (m *matcher) nLinks(mv int32) int {
	v := &m.movs[mv]
	switch {
	case v.link.obl < 0:
		return 0
	case v.conflict:
		return 1 + len(m.more[mv])
	}
	return 1
}

func (m *matcher) newMovement(ref int32, c class) int32 {
	m.movs = append(m.movs, movement{first: -1, rep: -1, ref: ref, class: c, link: mlink{obl: -1}})
	return int32(len(m.movs) - 1)
}

func (m *matcher) addMember(mv, obj int32) {
	m.next[obj] = m.movs[mv].first
	m.movs[mv].first = obj
}

// summarise sets a movement's status and representative member.
func (m *matcher) summarise(mv *movement) {
	succ, live, stale := false, false, false
	for j := mv.first; j >= 0; j = m.next[j] {
		p := m.obj(j)
		switch p.Status {
		case reconcile.Succeeded:
			succ = true
		case reconcile.Failed, reconcile.Canceled:
			mv.failed = true
		default:
			// Pending, and any status the sources did not normalise:
			// not final until the grace period has passed.
			if m.now.Sub(p.Created) < m.opts.PendingGrace {
				live = true
			} else {
				stale = true
			}
		}
		if mv.rep < 0 || repBefore(p, m.obj(mv.rep)) {
			mv.rep = j
		}
	}
	switch {
	case succ:
		mv.status = mSucceeded
	case live:
		mv.status = mPendingLive
	case stale && !mv.failed:
		mv.status = mPendingStale
	default:
		mv.status = mFailed
	}
}

// repBefore orders the members of a movement: the one whose money counts
// comes first (a succeeded intent, then a succeeded charge, then the
// intent), ties broken by id so that input order never matters.
func repBefore(a, b *reconcile.ProviderObject) bool {
	ra, rb := repRank(a), repRank(b)
	if ra != rb {
		return ra < rb
	}
	return a.ID < b.ID
}

func repRank(p *reconcile.ProviderObject) int {
	r := 3
	if p.Kind == reconcile.PaymentIntent {
		r = 1
	}
	if p.Status != reconcile.Succeeded {
		r += 2
	}
	return r
}

// refundTarget is the movement a refund takes money back from: a refund
// of an intent and a refund of that intent's charge have the same target.
func (m *matcher) refundTarget(r *reconcile.ProviderObject) string {
	t := cmp.Or(r.Target, r.Charge, r.PaymentIntent)
	if t == "" {
		return ""
	}
	if mv := m.movementOf(t); mv >= 0 {
		return m.movID(mv)
	}
	if r.PaymentIntent != "" {
		return r.PaymentIntent
	}
	return t
}

// movementOf finds the movement of an object id, or of an intent id that
// only its charges named; -1 if none.
func (m *matcher) movementOf(id string) int32 {
	if k := m.objByID(id); k >= 0 {
		return m.objMov[k]
	}
	if mv, ok := m.absentPI[id]; ok {
		return mv
	}
	return -1
}

// indexLookups merges the retrievals by id. Several results for one id
// (bad data) merge conservatively: found beats failed beats not found, so
// absence is claimed only when every retrieval said so.
func (m *matcher) indexLookups() {
	m.lookups = make(map[string]reconcile.Lookup, len(m.in.Lookups))
	rank := func(r reconcile.LookupResult) int {
		switch r {
		case reconcile.LookupFound:
			return 3
		case reconcile.LookupFailed:
			return 2
		case reconcile.LookupNotFound:
			return 1
		}
		return 0
	}
	for _, l := range m.in.Lookups {
		cur, ok := m.lookups[l.ID]
		if !ok || rank(l.Result) > rank(cur.Result) ||
			rank(l.Result) == rank(cur.Result) && l.Err < cur.Err {
			m.lookups[l.ID] = l
		}
	}
}

// linkAll links movements to obligations by every route. Priority decides
// only the route a link is recorded with: an object that reaches two
// obligations by different routes is a conflict, never a silent pick.
func (m *matcher) linkAll() {
	for i := range m.nObls() {
		o := m.obl(i)
		if o.ProviderID == "" {
			continue
		}
		if mv := m.movementOf(o.ProviderID); mv >= 0 {
			m.addLink(mv, i, routeProviderID)
		}
	}
	objs := m.in.Objects
	at := 0 // input position of the object the last key named
	for k := range m.in.Keys {
		ke := &m.in.Keys[k]
		if ke.Key == "" {
			continue
		}
		// The sources sort keys as they sort objects (by kind, creation
		// and id), so the object a key names is most often the one the
		// last key named or the next: two comparisons there save a lookup
		// by hash, which misses the cache.
		mv := int32(-1)
		switch {
		case at < len(objs) && objs[at].ID == ke.ObjectID:
			mv = m.objMov[m.objOf(at)]
		case at+1 < len(objs) && objs[at+1].ID == ke.ObjectID:
			at++
			mv = m.objMov[m.objOf(at)]
		default:
			if o := m.objByID(ke.ObjectID); o >= 0 {
				mv = m.objMov[o]
				at = m.inputOf(o)
			} else if v, ok := m.absentPI[ke.ObjectID]; ok {
				mv = v
			}
		}
		if mv < 0 {
			continue
		}
		m.linkKey(mv, ke.Key, routeKey)
	}
	idKey, keyKey := m.opts.MetadataObligationID, m.opts.MetadataIdempotencyKey
	for k := range m.nObjs() {
		p := m.obj(k)
		if len(p.Metadata) == 0 {
			continue
		}
		mv := m.objMov[k]
		if idKey != "" {
			if v := p.Metadata[idKey]; v != "" {
				if o := m.oblByID(v); o >= 0 {
					m.addLink(mv, o, routeMetaID)
				}
			}
		}
		if keyKey != "" {
			if v := p.Metadata[keyKey]; v != "" {
				m.linkKey(mv, v, routeMetaKey)
			}
		}
	}
}

// inputOf is the input position of object number k.
func (m *matcher) inputOf(k int32) int {
	if m.objAt != nil {
		return int(m.objAt[k])
	}
	return int(k)
}

func (m *matcher) linkKey(mv int32, key string, route uint8) {
	o := m.keyIdx.find(key, func(i int32) string { return m.obl(i).IdempotencyKey })
	if o < 0 {
		return
	}
	m.addLink(mv, o, route)
	for _, o := range m.dupKeys[key] {
		m.addLink(mv, o, route)
	}
}

// addLink records that movement mv reaches obligation o by route r, if the
// kinds fit: a charge obligation takes charges and intents, a refund
// obligation refunds. (A refund's request also emits charge.refunded with
// its key about the charge; the kinds keep that from linking the charge.)
func (m *matcher) addLink(mv, o int32, r uint8) {
	v := &m.movs[mv]
	if v.class == clsNone || m.oblCls[o] != v.class {
		return
	}
	switch {
	case v.link.obl < 0:
		v.link = mlink{o, r}
	case v.link.obl == o:
		v.link.route = min(v.link.route, r)
	default:
		if m.more == nil {
			m.more = map[int32][]mlink{}
		}
		more := m.more[mv]
		for k := range more {
			if more[k].obl == o {
				more[k].route = min(more[k].route, r)
				return
			}
		}
		m.more[mv] = append(more, mlink{o, r})
		v.conflict = true
	}
}

// buildObligationIndex lists, per obligation, the movements reaching it.
func (m *matcher) buildObligationIndex() {
	n := m.nObls()
	m.oblStart = make([]int32, n+1)
	total := 0
	for k := range m.movs {
		v := &m.movs[k]
		if v.link.obl < 0 {
			continue
		}
		m.oblStart[v.link.obl+1]++
		total++
		if v.conflict {
			for _, l := range m.more[int32(k)] {
				m.oblStart[l.obl+1]++
				total++
			}
		}
	}
	for i := range n {
		m.oblStart[i+1] += m.oblStart[i]
	}
	m.oblMovs = make([]int32, total)
	fill := make([]int32, n)
	copy(fill, m.oblStart[:n])
	put := func(o int32, mv int32) {
		m.oblMovs[fill[o]] = mv
		fill[o]++
	}
	for k := range m.movs {
		v := &m.movs[k]
		if v.link.obl < 0 {
			continue
		}
		put(v.link.obl, int32(k))
		if v.conflict {
			for _, l := range m.more[int32(k)] {
				put(l.obl, int32(k))
			}
		}
	}
}

// emit fills the result's buckets, links and counts in object id order.
func (m *matcher) emit() {
	nLinks := 0
	for k := range m.movs {
		if n := m.nLinks(int32(k)); n > 0 {
			nLinks += n * m.members(int32(k))
		}
	}
	ids := m.res.ObjectIDs
	m.res.Buckets = make([]Bucket, len(ids))
	m.res.Links = make([]reconcile.Link, 0, nLinks)
	var more []reconcile.Link
	for p, id := range ids {
		k := int32(p)
		if m.objSorted != nil {
			k = m.objSorted[p]
		}
		mv := m.objMov[k]
		v := &m.movs[mv]
		m.res.Buckets[p] = bucketName(v.bucket)
		if v.bucket == bLinked {
			m.res.Counts.Linked++
		}
		if v.link.obl < 0 {
			continue
		}
		first := reconcile.Link{ObjectID: id, ObligationID: m.oblIDs[v.link.obl], Route: routeName(v.link.route)}
		if !v.conflict {
			m.res.Links = append(m.res.Links, first)
			continue
		}
		more = append(more[:0], first)
		for _, l := range m.more[mv] {
			more = append(more, reconcile.Link{ObjectID: id, ObligationID: m.oblIDs[l.obl], Route: routeName(l.route)})
		}
		slices.SortFunc(more, func(a, b reconcile.Link) int { return strings.Compare(a.ObligationID, b.ObligationID) })
		m.res.Links = append(m.res.Links, more...)
	}
	m.settle()
	m.res.Counts.Obligations = len(m.res.ObligationIDs)
	m.res.Counts.ProviderObjects = len(ids)

	// Transitions were decided in obligation id order: already sorted.
	slices.SortFunc(m.res.Findings, compareFindings)
	if m.res.Findings == nil {
		m.res.Findings = []reconcile.Finding{}
	}
	if m.res.Transitions == nil {
		m.res.Transitions = []reconcile.Transition{}
	}
}

// settle fills the result's lists of what the run decided on and settled:
// obligations not read only to link, those of them whose records were all
// read, and the objects created in the subject or outside the listing (a
// retrieval by id). They share the id slices where nothing is left out.
func (m *matcher) settle() {
	decided := m.oblIDs
	if m.context != nil {
		decided = make([]string, 0, len(m.oblIDs))
		for i, id := range m.oblIDs {
			if !m.context[i] {
				decided = append(decided, id)
			}
		}
	}
	m.res.ObligationIDs = decided
	m.res.Settled.Obligations = decided
	if len(m.partial) > 0 {
		m.res.Settled.Obligations = make([]string, 0, len(decided)-len(m.partial))
		for _, id := range decided {
			if _, partial := slices.BinarySearch(m.partial, id); !partial {
				m.res.Settled.Obligations = append(m.res.Settled.Obligations, id)
			}
		}
	}
	ids := m.res.ObjectIDs
	m.res.Settled.Objects = ids
	if m.subject == m.in.Listed {
		return
	}
	// Objects read as evidence: listed, but outside the subject.
	evidence := func(p *reconcile.ProviderObject) bool {
		return m.in.Listed.Contains(p.Created) && !m.subject.Contains(p.Created)
	}
	n := 0
	for k := range m.nObjs() {
		if evidence(m.obj(k)) {
			n++
		}
	}
	if n == 0 {
		return
	}
	m.res.Settled.Objects = make([]string, 0, len(ids)-n)
	for p, id := range ids {
		k := int32(p)
		if m.objSorted != nil {
			k = m.objSorted[p]
		}
		if !evidence(m.obj(k)) {
			m.res.Settled.Objects = append(m.res.Settled.Objects, id)
		}
	}
}

func (m *matcher) members(mv int32) int {
	n := 0
	for j := m.movs[mv].first; j >= 0; j = m.next[j] {
		n++
	}
	return n
}

// compareFindings orders findings most severe first, then by kind,
// obligation id and fingerprint (unique within a result: a total order).
func compareFindings(a, b reconcile.Finding) int {
	return cmp.Or(
		cmp.Compare(b.Severity.Rank(), a.Severity.Rank()),
		strings.Compare(string(a.Kind), string(b.Kind)),
		strings.Compare(a.ObligationID, b.ObligationID),
		strings.Compare(a.Fingerprint, b.Fingerprint),
	)
}

// compareObjects is a total order on provider objects, used only to pick
// one of several input copies of one id whatever their order.
func compareObjects(a, b *reconcile.ProviderObject) int {
	return cmp.Or(
		strings.Compare(a.ID, b.ID),
		strings.Compare(string(a.Kind), string(b.Kind)),
		strings.Compare(string(a.Status), string(b.Status)),
		strings.Compare(a.RawStatus, b.RawStatus),
		cmp.Compare(a.Money.Amount, b.Money.Amount),
		strings.Compare(a.Money.Currency, b.Money.Currency),
		cmp.Compare(a.AmountRefunded, b.AmountRefunded),
		strings.Compare(a.Target, b.Target),
		strings.Compare(a.PaymentIntent, b.PaymentIntent),
		strings.Compare(a.Charge, b.Charge),
		strings.Compare(a.Customer, b.Customer),
		a.Created.Compare(b.Created),
		compareMaps(a.Metadata, b.Metadata),
	)
}

// compareObligations is a total order on obligations, for the same reason.
func compareObligations(a, b *reconcile.Obligation) int {
	return cmp.Or(
		strings.Compare(a.ID, b.ID),
		strings.Compare(string(a.Kind), string(b.Kind)),
		strings.Compare(a.IdempotencyKey, b.IdempotencyKey),
		strings.Compare(a.Provider, b.Provider),
		strings.Compare(a.ProviderID, b.ProviderID),
		strings.Compare(a.TargetID, b.TargetID),
		cmp.Compare(a.Money.Amount, b.Money.Amount),
		strings.Compare(a.Money.Currency, b.Money.Currency),
		strings.Compare(string(a.State), string(b.State)),
		strings.Compare(a.RawState, b.RawState),
		strings.Compare(a.LeaseOwner, b.LeaseOwner),
		a.LeaseExpiresAt.Compare(b.LeaseExpiresAt),
		a.CreatedAt.Compare(b.CreatedAt),
		a.UpdatedAt.Compare(b.UpdatedAt),
		a.PaidAt.Compare(b.PaidAt),
	)
}

func compareMaps(a, b map[string]string) int {
	if c := cmp.Compare(len(a), len(b)); c != 0 || len(a) == 0 {
		return c
	}
	ka, kb := slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b))
	for i := range ka {
		if c := cmp.Or(strings.Compare(ka[i], kb[i]), strings.Compare(a[ka[i]], b[kb[i]])); c != 0 {
			return c
		}
	}
	return 0
}

// sortKey orders ids without touching their bytes in most comparisons:
// the first 16 bytes, big-endian and zero-padded, order exactly as the
// strings do unless they tie, when the strings themselves decide. The
// keys hold no pointers, so sorting a million of them moves no pointers
// and needs no write barriers.
type sortKey struct {
	hi, lo uint64
	idx    int32
}

func makeSortKey(id string, idx int32) sortKey {
	var b [16]byte
	copy(b[:], id)
	return sortKey{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]), idx}
}

// sortedByID returns 0..n-1 ordered by id(i).
func sortedByID(n int, id func(int32) string) []sortKey {
	keys := make([]sortKey, n)
	for i := range keys {
		keys[i] = makeSortKey(id(int32(i)), int32(i))
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		if a.lo != b.lo {
			return cmp.Compare(a.lo, b.lo)
		}
		return strings.Compare(id(a.idx), id(b.idx))
	})
	return keys
}
