package matcher

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/byid"
)

// world is one Match call's input, numbered and indexed, so that a rule
// asks its question in a word (movementsOf an obligation, movementOf an
// id, oblByID, obl and obj by number) and the answer costs little at a
// million records. Indexes are int32 to halve the memory of the
// per-object arrays, and the per-object and per-obligation arrays hold no
// pointers, so that the garbage collector does not scan them.
//
// Obligations are numbered in id order. Objects are numbered in input
// order, the order the sources read them in, so that the passes over
// their fields read memory front to back; objSorted gives id order.
type world struct {
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
	// oblIDs are the obligations' ids by number.
	oblIDs []string
	// context is, per obligation, whether it was read only to link
	// (Input.Context); nil when none was.
	context []bool

	// objAt maps an object's number to its input position and objRank the
	// other way (every copy of a duplicated id to the one number); both
	// nil when the input holds each id once.
	objAt     []int32
	objRank   []int32
	objSorted []int32  // object numbers in id order; nil when that is input order
	objIDs    []string // the objects' ids, sorted
	objIdx    index    // id → object
	objMov    []int32  // object → movement
	next      []int32  // object → next member of its movement, -1 at the end
	absentPI  map[string]int32
	absentIDs []string
	// absentCh maps the latest charge an intent read names, itself not
	// read, to the intent's movement: an obligation naming it claims
	// that payment (docs/design.md, "Linking").
	absentCh map[string]int32

	movs    []movement
	more    map[int32][]mlink // further obligations of conflicting movements
	lookups map[string]reconcile.Lookup

	// oblStart/oblMovs list, per obligation, the movements reaching it
	// (CSR layout: one allocation instead of one slice per obligation).
	oblStart []int32
	oblMovs  []int32

	// subject is the window the run is about: Input.Subject, or Listed.
	subject reconcile.Window
}

// movementsOf lists the movements that reach obligation i, by any route.
func (w *world) movementsOf(i int32) []int32 { return w.oblMovs[w.oblStart[i]:w.oblStart[i+1]] }

// matcher is one Match call: the world it judges, and what its rules
// concluded.
type matcher struct {
	*world
	// partial lists, in id order, the obligations decided on whose records
	// the run did not all read.
	partial   []string
	res       Result
	suspected []bool // per obligation: an unlinked movement repeats one of its movements
	// twins indexes the linked movements the suspects could repeat
	// (indexTwins).
	twins map[twinKey][]int32
	// namesFrom is, per object, Result.NamesFrom's; nil while none is
	// set.
	namesFrom []reconcile.Stamp
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

// movement is one money movement: a refund, a charge on its own, or a
// payment intent together with its charges (docs/design.md, "Linking": never a
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

// obl is obligation number i.
func (w *world) obl(i int32) *reconcile.Obligation {
	if w.oblAt != nil {
		return &w.in.Obligations[w.oblAt[i]]
	}
	return &w.in.Obligations[i]
}

// obj is object number k.
func (w *world) obj(k int32) *reconcile.ProviderObject {
	if w.objAt != nil {
		return &w.in.Objects[w.objAt[k]]
	}
	return &w.in.Objects[k]
}

// objOf is the number of the object at input position j.
func (w *world) objOf(j int) int32 {
	if w.objRank != nil {
		return w.objRank[j]
	}
	return int32(j)
}

func (w *world) nObjs() int32 { return int32(len(w.objIDs)) }

func (w *world) nObls() int32 { return int32(len(w.oblIDs)) }

// indexObligations dedupes obligations by id, numbers them in id order and
// indexes them by idempotency key.
func (w *world) indexObligations() {
	obs := w.in.Obligations
	n := len(obs)
	// The sources deliver obligations sorted by id, each once: checking
	// that costs one pass, sorting a million a good deal more.
	w.oblIDs = idsIfSorted(n, func(i int) string { return obs[i].ID })
	if w.oblIDs == nil {
		order := byid.Order(n, func(i int32) string { return obs[i].ID })
		w.oblAt = make([]int32, 0, n)
		w.oblIDs = make([]string, 0, n)
		for p := 0; p < n; {
			// A run of copies of one id: keep the greatest under a total
			// order, so that which copy wins does not depend on input
			// order.
			best := order[p].Index
			q := p + 1
			for ; q < n && order[q].SameHead(order[p]) && obs[order[q].Index].ID == obs[best].ID; q++ {
				if compareObligations(&obs[order[q].Index], &obs[best]) > 0 {
					best = order[q].Index
				}
			}
			w.oblAt = append(w.oblAt, best)
			w.oblIDs = append(w.oblIDs, obs[best].ID)
			p = q
		}
	}
	nObl := len(w.oblIDs)
	w.oblCls = make([]class, nObl)
	keys := 0
	for i := range int32(nObl) {
		o := w.obl(i)
		w.oblCls[i] = kindClass(o.Kind)
		if o.IdempotencyKey != "" {
			keys++
		}
	}
	w.keyIdx = newIndex(keys)
	keyOf := func(i int32) string { return w.obl(i).IdempotencyKey }
	for i := range int32(nObl) {
		k := w.obl(i).IdempotencyKey
		if k == "" {
			continue
		}
		if _, added := w.keyIdx.add(k, i, keyOf); !added {
			// Obligations sharing a key (bad data) all link by it.
			if w.dupKeys == nil {
				w.dupKeys = map[string][]int32{}
			}
			w.dupKeys[k] = append(w.dupKeys[k], i)
		}
	}
	if len(w.in.Context) > 0 {
		ctx := slices.Sorted(slices.Values(w.in.Context))
		w.context = make([]bool, nObl)
		for i, id := range w.oblIDs {
			_, w.context[i] = slices.BinarySearch(ctx, id)
		}
	}
}

// decides reports whether the run decides on obligation i: it was not
// read only to link.
func (w *world) decides(i int32) bool { return w.context == nil || !w.context[i] }

// idsIfSorted returns the n ids id(0), id(1), … if they are strictly
// ascending, as the sources deliver them, and nil otherwise.
func idsIfSorted(n int, id func(int) string) []string {
	// Checked before the room is made: a provider's listing comes in
	// time order, not by id, and its million ids took 16 MB for nothing.
	prev := ""
	for i := range n {
		s := id(i)
		if i > 0 && s <= prev {
			return nil
		}
		prev = s
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = id(i)
	}
	return ids
}

// oblByID returns the number of the obligation with id, or -1. Only
// metadata names obligations by id, so the index is built on first use.
func (w *world) oblByID(id string) int32 {
	ids := w.oblIDs
	if w.oblIdx.slots == nil {
		w.oblIdx = newIndex(len(ids))
		for i, s := range ids {
			w.oblIdx.addNew(s, int32(i))
		}
	}
	return w.oblIdx.find(id, func(i int32) string { return ids[i] })
}

// indexObjects dedupes provider objects by id, orders them by id and
// indexes them by id.
func (w *world) indexObjects() {
	objs := w.in.Objects
	n := len(objs)
	w.objIDs = idsIfSorted(n, func(i int) string { return objs[i].ID })
	if w.objIDs == nil {
		order := byid.Order(n, func(i int32) string { return objs[i].ID })
		dups := false
		for p := 1; p < n && !dups; p++ {
			dups = order[p].SameHead(order[p-1]) && objs[order[p].Index].ID == objs[order[p-1].Index].ID
		}
		if dups {
			w.dedupeObjects(order)
		} else {
			w.objSorted = make([]int32, n)
			w.objIDs = make([]string, n)
			for p, e := range order {
				w.objSorted[p] = e.Index
				w.objIDs[p] = objs[e.Index].ID
			}
		}
	}
	// Inserted in input order: the ids' bytes are read in the order they
	// were allocated.
	nObj := w.nObjs()
	w.objIdx = newIndex(int(nObj))
	for k := range nObj {
		w.objIdx.addNew(w.obj(k).ID, k)
	}
}

// dedupeObjects keeps one copy of each id, the greatest under a total
// order, so that which copy wins does not depend on input order; order is
// the objects sorted by id. Duplicates are bad data: this path need not be
// fast.
func (w *world) dedupeObjects(order []byid.Key) {
	objs := w.in.Objects
	n := len(objs)
	type run struct{ from, to, kept int32 } // order[from:to] share an id
	var runs []run
	keep := make([]bool, n)
	for p := 0; p < n; {
		best := order[p].Index
		q := p + 1
		for ; q < n && objs[order[q].Index].ID == objs[best].ID; q++ {
			if compareObjects(&objs[order[q].Index], &objs[best]) > 0 {
				best = order[q].Index
			}
		}
		keep[best] = true
		runs = append(runs, run{int32(p), int32(q), best})
		p = q
	}
	w.objAt = make([]int32, 0, len(runs))
	w.objRank = make([]int32, n)
	for j := range objs {
		if keep[j] {
			w.objRank[j] = int32(len(w.objAt))
			w.objAt = append(w.objAt, int32(j))
		}
	}
	w.objSorted = make([]int32, len(runs))
	w.objIDs = make([]string, len(runs))
	for r, ru := range runs {
		k := w.objRank[ru.kept]
		for _, e := range order[ru.from:ru.to] {
			w.objRank[e.Index] = k
		}
		w.objSorted[r] = k
		w.objIDs[r] = objs[ru.kept].ID
	}
}

// groupMovements puts every object into exactly one money movement: an
// intent with its charges (the charge names the intent, or the intent
// names the charge as its latest), every other object on its own.
func (w *world) groupMovements() {
	n := w.nObjs()
	w.objMov = make([]int32, n)
	w.next = make([]int32, n)
	w.movs = make([]movement, 0, n)
	// Intents first: each is a movement of its own.
	var named []int32 // intents naming a charge as their latest
	for k := range n {
		p := w.obj(k)
		w.objMov[k] = -1
		w.next[k] = -1
		if p.Kind == reconcile.PaymentIntent {
			w.objMov[k] = w.newMovement(k, clsCharge)
			w.addMember(w.objMov[k], k)
			if p.Charge != "" {
				named = append(named, k)
			}
		}
	}
	// A charge that names no intent joins the intent that names it (the
	// smallest id, should several: bad data, but order must not matter).
	var chargeToPI map[int32]int32
	for _, i := range named {
		c := w.obj(i).Charge
		j := w.objByID(c)
		if j < 0 {
			// A latest charge not read is its intent's payment all the
			// same (the smallest intent's, should several name it).
			if w.absentCh == nil {
				w.absentCh = map[string]int32{}
			}
			if cur, ok := w.absentCh[c]; !ok || w.obj(i).ID < w.movID(cur) {
				w.absentCh[c] = w.objMov[i]
			}
			continue
		}
		if w.obj(j).Kind != reconcile.Charge || w.obj(j).PaymentIntent != "" {
			continue
		}
		if chargeToPI == nil {
			chargeToPI = map[int32]int32{}
		}
		if cur, ok := chargeToPI[j]; !ok || w.obj(i).ID < w.obj(cur).ID {
			chargeToPI[j] = i
		}
	}
	for j, i := range chargeToPI {
		w.objMov[j] = w.objMov[i]
		w.addMember(w.objMov[j], j)
	}
	for k := range n {
		if w.objMov[k] >= 0 {
			continue
		}
		p := w.obj(k)
		if pi := p.PaymentIntent; pi != "" && p.Kind == reconcile.Charge {
			if j := w.objByID(pi); j >= 0 {
				if w.obj(j).Kind == reconcile.PaymentIntent {
					w.objMov[k] = w.objMov[j]
				}
			} else {
				// The intent was not listed; its charges still move
				// money once, together.
				if w.absentPI == nil {
					w.absentPI = map[string]int32{}
				}
				mv, ok := w.absentPI[pi]
				if !ok {
					w.absentIDs = append(w.absentIDs, pi)
					mv = w.newMovement(int32(-len(w.absentIDs)), clsCharge)
					w.absentPI[pi] = mv
				}
				w.objMov[k] = mv
			}
		}
		if w.objMov[k] < 0 {
			w.objMov[k] = w.newMovement(k, kindClass(p.Kind))
		}
		w.addMember(w.objMov[k], k)
	}
	for k := range w.movs {
		w.summarise(&w.movs[k])
	}
}

// objByID returns the number of the object with id, or -1.
func (w *world) objByID(id string) int32 {
	return w.objIdx.find(id, func(k int32) string { return w.obj(k).ID })
}

// movID is a movement's id: its intent's for a group, else its object's.
func (w *world) movID(mv int32) string {
	if r := w.movs[mv].ref; r >= 0 {
		return w.obj(r).ID
	}
	return w.absentIDs[-1-w.movs[mv].ref]
}

// nLinks is how many obligations movement mv reaches.
func (w *world) nLinks(mv int32) int {
	v := &w.movs[mv]
	switch {
	case v.link.obl < 0:
		return 0
	case v.conflict:
		return 1 + len(w.more[mv])
	}
	return 1
}

func (w *world) newMovement(ref int32, c class) int32 {
	w.movs = append(w.movs, movement{first: -1, rep: -1, ref: ref, class: c, link: mlink{obl: -1}})
	return int32(len(w.movs) - 1)
}

func (w *world) addMember(mv, obj int32) {
	w.next[obj] = w.movs[mv].first
	w.movs[mv].first = obj
}

// summarise sets a movement's status and representative member.
func (w *world) summarise(mv *movement) {
	succ, live, stale := false, false, false
	for j := mv.first; j >= 0; j = w.next[j] {
		p := w.obj(j)
		switch p.Status {
		case reconcile.Succeeded:
			succ = true
		case reconcile.Failed, reconcile.Canceled:
			mv.failed = true
		default:
			// Pending, and any status the sources did not normalise:
			// not final until the grace period has passed.
			if w.now.Sub(p.Created.Time()) < w.opts.PendingGrace {
				live = true
			} else {
				stale = true
			}
		}
		if mv.rep < 0 || repBefore(p, w.obj(mv.rep)) {
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

// movementOf finds the movement of an object id, or of an intent id that
// only its charges named; -1 if none.
func (w *world) movementOf(id string) int32 {
	_, mv := w.objectOf(id)
	return mv
}

// objectOf finds the object with id (k; -1 if none) and its movement, or
// the movement of an intent id that only its charges named or of a
// charge id that only its intent named (mv; -1 if none).
func (w *world) objectOf(id string) (k, mv int32) {
	if k := w.objByID(id); k >= 0 {
		return k, w.objMov[k]
	}
	return -1, w.absentMov(id)
}

// absentMov is the movement of an object not read that a read one names
// as the other half of its payment (an intent its charges name, the
// latest charge its intent names), or -1.
func (w *world) absentMov(id string) int32 {
	if mv, ok := w.absentPI[id]; ok {
		return mv
	}
	if mv, ok := w.absentCh[id]; ok {
		return mv
	}
	return -1
}

// indexLookups merges the retrievals by id. Several results for one id
// (bad data) merge conservatively: found beats failed beats not found, so
// absence is claimed only when every retrieval said so.
func (w *world) indexLookups() {
	w.lookups = make(map[string]reconcile.Lookup, len(w.in.Lookups))
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
	for _, l := range w.in.Lookups {
		cur, ok := w.lookups[l.ID]
		if !ok || rank(l.Result) > rank(cur.Result) ||
			rank(l.Result) == rank(cur.Result) && l.Err < cur.Err {
			w.lookups[l.ID] = l
		}
	}
}

// buildObligationIndex lists, per obligation, the movements reaching it.
func (w *world) buildObligationIndex() {
	n := w.nObls()
	w.oblStart = make([]int32, n+1)
	total := 0
	for k := range w.movs {
		v := &w.movs[k]
		if v.link.obl < 0 {
			continue
		}
		w.oblStart[v.link.obl+1]++
		total++
		if v.conflict {
			for _, l := range w.more[int32(k)] {
				w.oblStart[l.obl+1]++
				total++
			}
		}
	}
	for i := range n {
		w.oblStart[i+1] += w.oblStart[i]
	}
	w.oblMovs = make([]int32, total)
	fill := make([]int32, n)
	copy(fill, w.oblStart[:n])
	put := func(o int32, mv int32) {
		w.oblMovs[fill[o]] = mv
		fill[o]++
	}
	for k := range w.movs {
		v := &w.movs[k]
		if v.link.obl < 0 {
			continue
		}
		put(v.link.obl, int32(k))
		if v.conflict {
			for _, l := range w.more[int32(k)] {
				put(l.obl, int32(k))
			}
		}
	}
}

// inputOf is the input position of object number k.
func (w *world) inputOf(k int32) int {
	if w.objAt != nil {
		return int(w.objAt[k])
	}
	return int(k)
}

func (w *world) members(mv int32) int {
	n := 0
	for j := w.movs[mv].first; j >= 0; j = w.next[j] {
		n++
	}
	return n
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
		cmp.Compare(a.Created, b.Created),
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
		cmp.Compare(a.LeaseExpiresAt, b.LeaseExpiresAt),
		cmp.Compare(a.CreatedAt, b.CreatedAt),
		cmp.Compare(a.UpdatedAt, b.UpdatedAt),
		cmp.Compare(a.PaidAt, b.PaidAt),
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
