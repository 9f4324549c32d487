package matcher

import (
	"cmp"
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

// mlink is one obligation a movement reaches, by its best route.
type mlink struct {
	obl   int32
	route uint8
}

// movement is one money movement: a refund, a charge on its own, or a
// payment intent together with its charges (DESIGN.md §3: never a
// duplicate of each other).
type movement struct {
	id     string // the intent's id for an intent's group, else the object's
	first  int32  // first member object; members are chained by matcher.next
	rep    int32  // the member whose money and time stand for the movement
	class  reconcile.ObjectKind
	status mstatus
	failed bool // some member failed or was canceled
	target string
	link   mlink   // first obligation reached; obl -1 when none
	more   []mlink // further obligations reached: a conflict (rare)
	bucket Bucket
}

func (mv *movement) nLinks() int {
	if mv.link.obl < 0 {
		return 0
	}
	return 1 + len(mv.more)
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

	objs     []*reconcile.ProviderObject // distinct objects
	objByID  map[string]int32
	objMov   []int32 // object → movement
	next     []int32 // object → next member of its movement, -1 at the end
	absentPI map[string]int32

	movs    []movement
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
	var chargeToPI map[string]string
	for i, p := range m.objs {
		m.objMov[i] = -1
		m.next[i] = -1
		if p.Kind == reconcile.PaymentIntent {
			m.objMov[i] = m.newMovement(p.ID, reconcile.Charge)
			m.addMember(m.objMov[i], int32(i))
			if p.Charge != "" {
				if chargeToPI == nil {
					chargeToPI = map[string]string{}
				}
				// Several intents naming one charge is bad data; the
				// smallest id wins, whatever the order.
				if cur, ok := chargeToPI[p.Charge]; !ok || p.ID < cur {
					chargeToPI[p.Charge] = p.ID
				}
			}
		}
	}
	for i, p := range m.objs {
		if m.objMov[i] >= 0 {
			continue
		}
		class := p.Kind
		if class != reconcile.Charge && class != reconcile.Refund {
			class = "" // an unknown kind links to nothing
		}
		if p.Kind == reconcile.Charge {
			pi := p.PaymentIntent
			if pi == "" {
				pi = chargeToPI[p.ID]
			}
			if pi != "" {
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
						mv = m.newMovement(pi, reconcile.Charge)
						m.absentPI[pi] = mv
					}
					m.objMov[i] = mv
				}
			}
		}
		if m.objMov[i] < 0 {
			m.objMov[i] = m.newMovement(p.ID, class)
		}
		m.addMember(m.objMov[i], int32(i))
	}
	for k := range m.movs {
		m.summarise(&m.movs[k])
	}
	// Targets need every movement grouped: a refund's target is the
	// movement of the charge or intent it refunds.
	for k := range m.movs {
		mv := &m.movs[k]
		rep := m.objs[mv.rep]
		switch mv.class {
		case reconcile.Refund:
			mv.target = m.refundTarget(rep)
		case reconcile.Charge:
			mv.target = rep.Customer
			if mv.target == "" {
				if j, ok := m.objByID[mv.id]; ok {
					mv.target = m.objs[j].Customer
				}
			}
		}
	}
}

func (m *matcher) newMovement(id string, class reconcile.ObjectKind) int32 {
	m.movs = append(m.movs, movement{id: id, first: -1, rep: -1, class: class, link: mlink{obl: -1}})
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
		return m.movs[mv].id
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
	if v.class == "" || oblClass(m.obls[o].Kind) != v.class {
		return
	}
	switch {
	case v.link.obl < 0:
		v.link = mlink{o, r}
	case v.link.obl == o:
		v.link.route = min(v.link.route, r)
	default:
		for k := range v.more {
			if v.more[k].obl == o {
				v.more[k].route = min(v.more[k].route, r)
				return
			}
		}
		v.more = append(v.more, mlink{o, r})
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
		for _, l := range v.more {
			m.oblStart[l.obl+1]++
		}
		total += 1 + len(v.more)
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
		for _, l := range v.more {
			put(l.obl, int32(k))
		}
	}
}

// emit fills the result's buckets, links, ids and counts, sorted.
func (m *matcher) emit() {
	type idIdx struct {
		id  string
		idx int32
	}
	objs := make([]idIdx, len(m.objs))
	for i, p := range m.objs {
		objs[i] = idIdx{p.ID, int32(i)}
	}
	slices.SortFunc(objs, func(a, b idIdx) int { return strings.Compare(a.id, b.id) })

	nLinks := 0
	for k := range m.movs {
		if n := m.movs[k].nLinks(); n > 0 {
			nLinks += n * m.members(int32(k))
		}
	}
	m.res.Buckets = make(map[string]Bucket, len(objs))
	m.res.ObjectIDs = make([]string, len(objs))
	m.res.Links = make([]reconcile.Link, 0, nLinks)
	var more []reconcile.Link
	for k, e := range objs {
		m.res.ObjectIDs[k] = e.id
		v := &m.movs[m.objMov[e.idx]]
		m.res.Buckets[e.id] = v.bucket
		if v.bucket == BucketLinked {
			m.res.Counts.Linked++
		}
		if v.link.obl < 0 {
			continue
		}
		if len(v.more) == 0 {
			m.res.Links = append(m.res.Links, reconcile.Link{ObjectID: e.id, ObligationID: m.obls[v.link.obl].ID, Route: routeName(v.link.route)})
			continue
		}
		more = more[:0]
		more = append(more, reconcile.Link{ObjectID: e.id, ObligationID: m.obls[v.link.obl].ID, Route: routeName(v.link.route)})
		for _, l := range v.more {
			more = append(more, reconcile.Link{ObjectID: e.id, ObligationID: m.obls[l.obl].ID, Route: routeName(l.route)})
		}
		slices.SortFunc(more, func(a, b reconcile.Link) int { return strings.Compare(a.ObligationID, b.ObligationID) })
		m.res.Links = append(m.res.Links, more...)
	}

	m.res.ObligationIDs = make([]string, len(m.obls))
	for i, o := range m.obls {
		m.res.ObligationIDs[i] = o.ID
	}
	slices.Sort(m.res.ObligationIDs)
	m.res.Counts.Obligations = len(m.obls)
	m.res.Counts.ProviderObjects = len(m.objs)

	slices.SortFunc(m.res.Findings, compareFindings)
	slices.SortFunc(m.res.Transitions, func(a, b reconcile.Transition) int {
		return strings.Compare(a.ObligationID, b.ObligationID)
	})
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

// oblClass is the movement class an obligation of kind k links to. The
// schema allows only charge and refund; an intent is read as a charge.
func oblClass(k reconcile.ObjectKind) reconcile.ObjectKind {
	if k == reconcile.PaymentIntent {
		return reconcile.Charge
	}
	return k
}
