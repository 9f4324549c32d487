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

// Unverified is an informational finding kind of the matcher's own
// (DESIGN.md §3 allows them): a PAID obligation to which nothing links,
// where the run could not prove absence either (the listing did not cover
// its time, or the lookup of the object it names failed). Reported only
// when Options.ReportUnverified is set.
const Unverified reconcile.FindingKind = "unverified"

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
// the memory of the per-object arrays at a million objects.
type matcher struct {
	in   *Input
	opts Options
	now  time.Time

	obls    []*reconcile.Obligation // distinct obligations
	oblByID map[string]int32
	oblKey  map[string]int32   // idempotency key → obligation
	dupKeys map[string][]int32 // further obligations sharing a key (bad data)

	oblOrder []int32 // obligations sorted by id

	objs      []*reconcile.ProviderObject // distinct objects
	objByID   map[string]int32
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

	res       Result
	suspected []bool // per obligation: an unlinked movement repeats one of its movements
}

// Match links every provider object of in to the obligations of in,
// classifies every disagreement into findings (DESIGN.md §3) and decides
// the PAID transitions (DESIGN.md §4). It is a pure function of its
// arguments: the result does not depend on the order of any input slice,
// and duplicated input records (the same id twice) count once.
func Match(in Input, now time.Time, opts Options) Result {
	m := &matcher{in: &in, opts: opts, now: now}
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

// indexObligations dedupes obligations by id and indexes them by id and
// idempotency key.
func (m *matcher) indexObligations() {
	n := len(m.in.Obligations)
	m.obls = make([]*reconcile.Obligation, 0, n)
	m.oblByID = make(map[string]int32, n)
	for i := range m.in.Obligations {
		o := &m.in.Obligations[i]
		if j, ok := m.oblByID[o.ID]; ok {
			// Keep the greatest copy under a total order, so that which
			// copy wins does not depend on input order.
			if compareObligations(o, m.obls[j]) > 0 {
				m.obls[j] = o
			}
			continue
		}
		m.oblByID[o.ID] = int32(len(m.obls))
		m.obls = append(m.obls, o)
	}
	// Obligations are evaluated in id order, so that transitions come out
	// sorted and ObligationIDs needs no second sort.
	order := sortedByID(len(m.obls), func(i int32) string { return m.obls[i].ID })
	m.oblOrder = make([]int32, len(order))
	m.res.ObligationIDs = make([]string, len(order))
	for k, e := range order {
		m.oblOrder[k] = e.idx
		m.res.ObligationIDs[k] = m.obls[e.idx].ID
	}
	m.oblKey = make(map[string]int32, len(m.obls))
	for i, o := range m.obls {
		if o.IdempotencyKey == "" {
			continue
		}
		if _, ok := m.oblKey[o.IdempotencyKey]; ok {
			if m.dupKeys == nil {
				m.dupKeys = map[string][]int32{}
			}
			m.dupKeys[o.IdempotencyKey] = append(m.dupKeys[o.IdempotencyKey], int32(i))
			continue
		}
		m.oblKey[o.IdempotencyKey] = int32(i)
	}
	m.suspected = make([]bool, len(m.obls))
}

// indexObjects dedupes provider objects by id.
func (m *matcher) indexObjects() {
	n := len(m.in.Objects)
	m.objs = make([]*reconcile.ProviderObject, 0, n)
	m.objByID = make(map[string]int32, n)
	for i := range m.in.Objects {
		p := &m.in.Objects[i]
		if j, ok := m.objByID[p.ID]; ok {
			if compareObjects(p, m.objs[j]) > 0 {
				m.objs[j] = p
			}
			continue
		}
		m.objByID[p.ID] = int32(len(m.objs))
		m.objs = append(m.objs, p)
	}
}

// groupMovements puts every object into exactly one money movement: an
// intent with its charges (the charge names the intent, or the intent
// names the charge as its latest), every other object on its own.
func (m *matcher) groupMovements() {
	n := len(m.objs)
	m.objMov = make([]int32, n)
	m.next = make([]int32, n)
	m.movs = make([]movement, 0, n)
	// Intents first: each is a movement of its own.
	var named []int32 // intents naming a charge as their latest
	for i, p := range m.objs {
		m.objMov[i] = -1
		m.next[i] = -1
		if p.Kind == reconcile.PaymentIntent {
			m.objMov[i] = m.newMovement(int32(i), clsCharge)
			m.addMember(m.objMov[i], int32(i))
			if p.Charge != "" {
				named = append(named, int32(i))
			}
		}
	}
	// A charge that names no intent joins the intent that names it (the
	// smallest id, should several: bad data, but order must not matter).
	var chargeToPI map[int32]int32
	for _, i := range named {
		j, ok := m.objByID[m.objs[i].Charge]
		if !ok || m.objs[j].Kind != reconcile.Charge || m.objs[j].PaymentIntent != "" {
			continue
		}
		if chargeToPI == nil {
			chargeToPI = map[int32]int32{}
		}
		if cur, ok := chargeToPI[j]; !ok || m.objs[i].ID < m.objs[cur].ID {
			chargeToPI[j] = i
		}
	}
	for j, i := range chargeToPI {
		m.objMov[j] = m.objMov[i]
		m.addMember(m.objMov[j], j)
	}
	for i, p := range m.objs {
		if m.objMov[i] >= 0 {
			continue
		}
		if pi := p.PaymentIntent; pi != "" && p.Kind == reconcile.Charge {
			if j, ok := m.objByID[pi]; ok {
				if m.objs[j].Kind == reconcile.PaymentIntent {
					m.objMov[i] = m.objMov[j]
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
				m.objMov[i] = mv
			}
		}
		if m.objMov[i] < 0 {
			m.objMov[i] = m.newMovement(int32(i), kindClass(p.Kind))
		}
		m.addMember(m.objMov[i], int32(i))
	}
	for k := range m.movs {
		m.summarise(&m.movs[k])
	}
}

// movID is a movement's id: its intent's for a group, else its object's.
func (m *matcher) movID(mv int32) string {
	if r := m.movs[mv].ref; r >= 0 {
		return m.objs[r].ID
	}
	return m.absentIDs[-1-m.movs[mv].ref]
}

// target is what a movement is a suspected duplicate against: a refund's
// refunded movement, a charge's or an intent's customer ("" for none).
func (m *matcher) target(mv int32) string {
	v := &m.movs[mv]
	rep := m.objs[v.rep]
	switch v.class {
	case clsRefund:
		return m.refundTarget(rep)
	case clsCharge:
		if rep.Customer == "" && v.ref >= 0 {
			return m.objs[v.ref].Customer
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
		p := m.objs[j]
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
		if mv.rep < 0 || repBefore(p, m.objs[mv.rep]) {
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
	if i, ok := m.objByID[id]; ok {
		return m.objMov[i]
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
	for i, o := range m.obls {
		if o.ProviderID == "" {
			continue
		}
		if mv := m.movementOf(o.ProviderID); mv >= 0 {
			m.addLink(mv, int32(i), routeProviderID)
		}
	}
	for k := range m.in.Keys {
		ke := &m.in.Keys[k]
		if ke.Key == "" {
			continue
		}
		mv := m.movementOf(ke.ObjectID)
		if mv < 0 {
			continue
		}
		m.linkKey(mv, ke.Key, routeKey)
	}
	idKey, keyKey := m.opts.MetadataObligationID, m.opts.MetadataIdempotencyKey
	for i, p := range m.objs {
		if len(p.Metadata) == 0 {
			continue
		}
		mv := m.objMov[i]
		if idKey != "" {
			if v := p.Metadata[idKey]; v != "" {
				if o, ok := m.oblByID[v]; ok {
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

func (m *matcher) linkKey(mv int32, key string, route uint8) {
	o, ok := m.oblKey[key]
	if !ok {
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
	if v.class == clsNone || kindClass(m.obls[o].Kind) != v.class {
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
	n := len(m.obls)
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

// emit fills the result's buckets, links, ids and counts, sorted.
func (m *matcher) emit() {
	objs := sortedByID(len(m.objs), func(i int32) string { return m.objs[i].ID })

	nLinks := 0
	for k := range m.movs {
		if n := m.nLinks(int32(k)); n > 0 {
			nLinks += n * m.members(int32(k))
		}
	}
	m.res.Buckets = make(map[string]Bucket, len(objs))
	m.res.ObjectIDs = make([]string, len(objs))
	m.res.Links = make([]reconcile.Link, 0, nLinks)
	var more []reconcile.Link
	for k, e := range objs {
		id := m.objs[e.idx].ID
		m.res.ObjectIDs[k] = id
		mv := m.objMov[e.idx]
		v := &m.movs[mv]
		m.res.Buckets[id] = bucketName(v.bucket)
		if v.bucket == bLinked {
			m.res.Counts.Linked++
		}
		if v.link.obl < 0 {
			continue
		}
		first := reconcile.Link{ObjectID: id, ObligationID: m.obls[v.link.obl].ID, Route: routeName(v.link.route)}
		if !v.conflict {
			m.res.Links = append(m.res.Links, first)
			continue
		}
		more = append(more[:0], first)
		for _, l := range m.more[mv] {
			more = append(more, reconcile.Link{ObjectID: id, ObligationID: m.obls[l.obl].ID, Route: routeName(l.route)})
		}
		slices.SortFunc(more, func(a, b reconcile.Link) int { return strings.Compare(a.ObligationID, b.ObligationID) })
		m.res.Links = append(m.res.Links, more...)
	}
	m.res.Counts.Obligations = len(m.obls)
	m.res.Counts.ProviderObjects = len(m.objs)

	// Transitions were decided in obligation id order: already sorted.
	slices.SortFunc(m.res.Findings, compareFindings)
	if m.res.Findings == nil {
		m.res.Findings = []reconcile.Finding{}
	}
	if m.res.Transitions == nil {
		m.res.Transitions = []reconcile.Transition{}
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
