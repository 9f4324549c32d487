package sources

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	stripe "github.com/stripe/stripe-go/v79"
	"golang.org/x/sync/errgroup"

	"reconcile"
	"reconcile/internal/byid"
)

// pageSize is Stripe's largest page.
const pageSize = 100

// Listing is everything List read from one window: complete, or not
// returned at all.
type Listing struct {
	// Objects are the charges, refunds and payment intents created in the
	// window, each once, sorted by kind, creation time and id.
	Objects []reconcile.ProviderObject
	// Keys say which idempotency key created which object, from the
	// window's events (Stripe keeps them EventRetention), one per object
	// and key, sorted by object kind, creation time, object id and key.
	Keys  []reconcile.KeyEvidence
	Stats ListStats
}

// ListStats count what a listing cost and held.
type ListStats struct {
	Slices      int // time slices each list was split into
	Requests    int // HTTP requests sent, retries included
	Retries     int
	RateLimited int // 429 answers, each of which slowed the reader
	Pages       int // pages read
	// Objects per kind, events read, and key evidence kept.
	Charges, Refunds, PaymentIntents, Events, Keys int
	// OutOfRange counts objects the server returned although created
	// outside the range asked for; they are ignored.
	OutOfRange int
}

// Add adds the counts of another read to s.
func (s *ListStats) Add(o ListStats) {
	s.Slices += o.Slices
	s.Requests += o.Requests
	s.Retries += o.Retries
	s.RateLimited += o.RateLimited
	s.Pages += o.Pages
	s.Charges += o.Charges
	s.Refunds += o.Refunds
	s.PaymentIntents += o.PaymentIntents
	s.Events += o.Events
	s.Keys += o.Keys
	s.OutOfRange += o.OutOfRange
}

// ListError says that a list could not be read to its end, so that the
// listing is not complete: which list of which account, which time slice,
// and the cursor (the starting_after id of the page that failed; empty for
// the first page).
type ListError struct {
	List string
	// Account names the connected account listed (acct_…, quoted when the
	// view's id is not one); empty for the platform's own.
	Account string
	// From and To are the slice's creation times; both zero for a list
	// that is not read by creation time (accounts).
	From, To time.Time
	Cursor   string
	Err      error
}

func (e *ListError) Error() string {
	at := "at its first page"
	if e.Cursor != "" {
		at = "at the page starting after " + e.Cursor
	}
	what := "list stripe " + e.List
	if e.Account != "" {
		what += " of account " + e.Account
	}
	if !e.From.IsZero() || !e.To.IsZero() {
		what += fmt.Sprintf(" created %s to %s", e.From.Format(time.RFC3339), e.To.Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: stopped %s: %v", what, at, e.Err)
}

func (e *ListError) Unwrap() error { return e.Err }

// span is a time slice in Unix seconds, [from, to): Stripe's created is in
// whole seconds.
type span struct{ from, to int64 }

// ceilUnix is the first whole second at or after t, so that a window
// [From, To) holds exactly the objects created in seconds
// [ceilUnix(From), ceilUnix(To)).
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// spans splits [from, to) into at most n slices of at least minLen
// seconds.
func spans(from, to int64, n int, minLen time.Duration) []span {
	if to <= from {
		return nil
	}
	length := to - from
	step := max(1, int64((minLen+time.Second-1)/time.Second))
	n = int(min(int64(n), max(1, length/step)))
	out := make([]span, n)
	for i := range n {
		out[i] = span{from + length*int64(i)/int64(n), from + length*int64(i+1)/int64(n)}
	}
	return out
}

// page is one page of a list, already translated.
type page struct {
	ids     []string // every entry's id in order (one page's only): the last is the next cursor
	objects []reconcile.ProviderObject
	keys    []reconcile.KeyEvidence
	changes []change // events about objects created outside the listed window (Sync only)
	// events counts the events created in the slice asked for: a server
	// that ignores created ranges returns some in every slice.
	events  int
	hasMore bool
}

// lister fetches one page of one list.
type lister struct {
	name  string
	fetch func(ctx context.Context, sp span, after string) (page, error)
}

// listParams are the parameters of one page of a list: the view's account
// in the Stripe-Account header, pages of pageSize, after the cursor.
func (s *Stripe) listParams(ctx context.Context, after string) stripe.ListParams {
	lp := stripe.ListParams{Context: ctx, Limit: stripe.Int64(pageSize), Single: true, StripeAccount: s.header()}
	if after != "" {
		lp.StartingAfter = stripe.String(after)
	}
	return lp
}

// query is the query of one page of a list created in sp, after the
// cursor.
func (s *Stripe) query(ctx context.Context, sp span, after string) *listQuery {
	return &listQuery{ListParams: s.listParams(ctx, after),
		Created: &stripe.RangeQueryParams{GreaterThanOrEqual: sp.from, LesserThan: sp.to}}
}

// listPlan is what one read lists: the objects created in objects (none
// when it is empty), and the events created in events (plus EventGrace) of
// eventTypes. With changes set, the events about objects created outside
// objects are kept as changes (Sync).
type listPlan struct {
	objects, events reconcile.Window
	eventTypes      []string
	changes         bool
}

// eventsLister reads the events of p: key evidence from the key-bearing
// types, and with p.changes the state of objects created outside
// p.objects.
func (s *Stripe) eventsLister(p listPlan) lister {
	kinds := keyEventKinds()
	types := stripe.StringSlice(p.eventTypes)
	from, to := ceilUnix(p.objects.From), ceilUnix(p.objects.To)
	return lister{ListEvents, func(ctx context.Context, sp span, after string) (page, error) {
		q := s.query(ctx, sp, after)
		q.Types = types
		pr := pageReaders.Get().(*pageReader)
		defer pageReaders.Put(pr)
		res, err := s.fetch("/v1/events", q, pr)
		if err != nil {
			return page{}, err
		}
		pg := page{ids: make([]string, 0, pageSize), keys: make([]reconcile.KeyEvidence, 0, pageSize)}
		var ev lightEvent
		pg.hasMore, err = pr.page(res, func(pr *pageReader) error {
			if err := pr.event(&ev); err != nil {
				return err
			}
			pg.ids = append(pg.ids, ev.ID)
			if ev.Created >= sp.from && ev.Created < sp.to {
				pg.events++
			}
			if k, ok := lightKeyEvidence(&ev, kinds); ok {
				pg.keys = append(pg.keys, k)
			}
			if p.changes {
				// Before the reader reads on: the object's JSON is its buffer's.
				if c, ok := lightChange(&ev, from, to); ok {
					pg.changes = append(pg.changes, c)
				}
			}
			return nil
		})
		if err != nil {
			return page{}, err
		}
		return pg, checkPage(res, eventShape)
	}}
}

// checked is the error of a page's request, or if the page arrived, the
// reason it cannot be believed (checkPage); stripe-go has fetched and
// decoded it by the time its Iter is made.
func checked(err error, res *stripe.APIResponse, sh shape) error {
	if err != nil {
		return err
	}
	return checkPage(res, sh)
}

// objectListers read the charges, payment intents and refunds.
func (s *Stripe) objectListers() []lister {
	return []lister{
		s.objectLister(ListCharges, "/v1/charges", reconcile.Charge, chargeShape),
		s.objectLister(ListPaymentIntents, "/v1/payment_intents", reconcile.PaymentIntent, paymentIntentShape),
		s.objectLister(ListRefunds, "/v1/refunds", reconcile.Refund, refundShape),
	}
}

// objectLister reads the list name of objects of kind at path, each
// entry of shape sh.
func (s *Stripe) objectLister(name, path string, kind reconcile.ObjectKind, sh shape) lister {
	return lister{name, func(ctx context.Context, sp span, after string) (page, error) {
		pr := pageReaders.Get().(*pageReader)
		defer pageReaders.Put(pr)
		res, err := s.fetch(path, s.query(ctx, sp, after), pr)
		if err != nil {
			return page{}, err
		}
		pg := page{ids: make([]string, 0, pageSize), objects: make([]reconcile.ProviderObject, 0, pageSize)}
		pg.hasMore, err = pr.page(res, func(pr *pageReader) error {
			w, err := pr.wireObject(kind)
			if err != nil {
				return err
			}
			pg.ids = append(pg.ids, w.id)
			pg.objects = append(pg.objects, w.object())
			return nil
		})
		if err != nil {
			return page{}, err
		}
		return pg, checkPage(res, sh)
	}}
}

// List reads the charges, refunds and payment intents created in w, and
// the key evidence of the events created in w (and EventGrace after it).
// The window is split into time slices read concurrently; every page goes
// through the rate limiter and the retries. A page is believed only if it
// holds what a page must (see checkPage); one that does not is retried.
// If any list cannot be read to its end, List returns a *ListError naming
// it and its cursor, and no listing: a partial listing would make orphans
// of what it missed.
func (s *Stripe) List(ctx context.Context, w reconcile.Window) (*Listing, error) {
	if w.To.Before(w.From) {
		return nil, fmt.Errorf("list stripe%s: window ends (%s) before it starts (%s)",
			s.ofAccount(), w.To.Format(time.RFC3339), w.From.Format(time.RFC3339))
	}
	l, _, _, err := s.list(ctx, listPlan{objects: w, events: w, eventTypes: keyEventTypes()})
	return l, err
}

// list reads what p asks for, every list of every time slice to its end,
// or fails.
func (s *Stripe) list(ctx context.Context, p listPlan) (*Listing, []Change, []string, error) {
	objSpans := spans(ceilUnix(p.objects.From), ceilUnix(p.objects.To), s.opts.Concurrency, s.opts.SliceMin)
	evSpans := spans(ceilUnix(p.events.From), ceilUnix(p.events.To), s.opts.Concurrency, s.opts.SliceMin)
	if len(evSpans) > 0 {
		// An object's creation event may be stamped a second after it.
		evSpans[len(evSpans)-1].to += int64((s.opts.EventGrace + time.Second - 1) / time.Second)
	}
	type unit struct {
		lister
		sp span
	}
	// Events first: they are the longest list, and starting the longest
	// work first keeps every worker busy to the end.
	var units []unit
	ev := s.eventsLister(p)
	for _, sp := range evSpans {
		units = append(units, unit{ev, sp})
	}
	for _, l := range s.objectListers() {
		for _, sp := range objSpans {
			units = append(units, unit{l, sp})
		}
	}

	var c counters
	prog := s.progress()
	results := make([][]page, len(units))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Concurrency)
	for i, u := range units {
		g.Go(func() error {
			var err error
			results[i], err = s.readSpan(gctx, u.lister, u.sp, &c, prog)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, err
	}
	l := merge(results)
	l.Stats.Slices = len(objSpans)
	if l.Stats.Slices == 0 {
		l.Stats.Slices = len(evSpans)
	}
	l.Stats.Requests, l.Stats.Retries, l.Stats.Pages = int(c.requests.Load()), int(c.retries.Load()), int(c.pages.Load())
	l.Stats.RateLimited = int(c.limited.Load())
	if l.Stats.OutOfRange = int(c.outside.Load()); l.Stats.OutOfRange > 0 {
		s.log.WarnContext(ctx, "stripe listed objects outside the requested creation range; ignored them",
			slog.Int("objects", l.Stats.OutOfRange))
	}
	changes, unsettled := mergeChanges(results)
	return l, changes, unsettled, nil
}

// readSpan reads one list over one slice, page after page, and returns
// the pages as they came. A page that fails is retried from the same
// cursor (the last id read), so nothing is read twice or skipped; when it
// fails for good, so does the slice.
//
// The pages stay apart: a slice of a first pass holds a quarter of a
// million objects of some two hundred bytes each, and gathering them into
// one growing slice copied each about twice before merge copied it again
// (a tenth of a first pass's CPU at a million objects).
func (s *Stripe) readSpan(ctx context.Context, l lister, sp span, c *counters, prog *progress) ([]page, error) {
	var pages []page
	after := ""
	fail := func(err error) ([]page, error) {
		return nil, &ListError{List: l.name, Account: s.label, From: unixUTC(sp.from), To: unixUTC(sp.to), Cursor: after, Err: err}
	}
	for {
		var pg page
		err := s.call(ctx, c, func(ctx context.Context) error {
			var err error
			pg, err = l.fetch(ctx, sp, after)
			return err
		})
		if err != nil {
			return fail(err)
		}
		prog.page(l.name, c, len(pg.ids))
		in := pg.objects[:0]
		for _, o := range pg.objects {
			// Stripe honours created[gte|lt]; a server that did not would
			// hand over objects whose obligations are not in scope, to be
			// mistaken for orphans.
			if cr := o.Created.Time().Unix(); cr < sp.from || cr >= sp.to {
				c.outside.Add(1)
				continue
			}
			o.Account = s.account
			in = append(in, o)
		}
		pg.objects = in
		// What a view read is its account's: ids are unique only within
		// one (docs/design.md, "Reading the provider").
		for i := range pg.keys {
			pg.keys[i].Account = s.account
		}
		for i := range pg.changes {
			pg.changes[i].Object.Account = s.account
		}
		hasMore, last := pg.hasMore, ""
		if len(pg.ids) > 0 {
			last = pg.ids[len(pg.ids)-1]
		}
		pg.ids = nil // the cursor is all that is kept of them
		pages = append(pages, pg)
		if !hasMore {
			return pages, nil
		}
		// An empty id would start the list again from its first page, and
		// again: the checks of pages rule it out, and so does this.
		if last == "" || last == after {
			return fail(errors.New("stripe said has_more but the page did not advance the cursor"))
		}
		after = last
	}
}

// progress serialises Progress calls, those of every view of the key.
type progress struct {
	mu *sync.Mutex
	fn func(ProgressEvent)
}

// progress is the Progress of one read.
func (s *Stripe) progress() *progress {
	return &progress{mu: &s.keyed.progressMu, fn: s.opts.Progress}
}

// page counts one page read and reports it. The count and the report go
// together under the lock, so that concurrent workers report pages in the
// order they counted them.
func (p *progress) page(list string, c *counters, items int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.pages.Add(1)
	c.items.Add(int64(items))
	if p.fn != nil {
		p.fn(ProgressEvent{List: list, Pages: int(c.pages.Load()), Items: int(c.items.Load()), Retries: int(c.retries.Load())})
	}
}

// merge joins the slices' pages: each object once (by id), each (object,
// key) pair once (its earliest event), in an order that does not depend on
// which worker read what.
//
// A million objects and as many events pass through here. Each slice's
// pages come newest first, and the slices are in kind and time order, so
// the objects reversed slice by slice are already in the listing's order
// but for ties within a second, which the sort then costs little; equal
// ids end up side by side, so each object is kept once without a map of
// them all. Events created in disjoint slices are distinct, and their
// count needs no set either. Every object and key is copied once, from
// its page into the listing, and the page lets go of it as it is
// copied: every page lets go of its objects before the keys' room is
// made, and of its keys as they are copied (at a million, the pages'
// copies and the listing's were 940 MB live at once, and the collector
// let the heap grow to twice that before it looked again). merge takes
// the pages' objects, keys and ids; their changes stay for mergeChanges.
func merge(read [][]page) *Listing {
	l := &Listing{}
	nObjects, nKeys := 0, 0
	var runs []kindRun // the keys' kinds, each with its count
	for _, pages := range read {
		for _, r := range pages {
			nObjects += len(r.objects)
			nKeys += len(r.keys)
			l.Stats.Events += r.events
			for i := range r.keys {
				runOf(&runs, r.keys[i].ObjectKind).n++
			}
		}
	}
	l.Objects = make([]reconcile.ProviderObject, 0, nObjects)
	for _, pages := range read {
		for p := len(pages) - 1; p >= 0; p-- {
			objs := pages[p].objects
			for i := len(objs) - 1; i >= 0; i-- {
				l.Objects = append(l.Objects, objs[i])
			}
			pages[p].objects, pages[p].ids = nil, nil
		}
	}
	// The keys go into a run of their kind each, oldest first: sortKeys
	// then sorts only the ties of each second. Events of every kind come
	// in one list, and sorted by kind first they cost a first pass 0.6 s.
	slices.SortFunc(runs, func(a, b kindRun) int { return cmp.Compare(a.kind, b.kind) })
	for i := range runs {
		if i > 0 {
			runs[i].start = runs[i-1].start + runs[i-1].n
		}
		runs[i].end = runs[i].start
	}
	keys := make([]reconcile.KeyEvidence, nKeys)
	for _, pages := range read {
		for p := len(pages) - 1; p >= 0; p-- {
			ks := pages[p].keys
			for i := len(ks) - 1; i >= 0; i-- {
				r := runOf(&runs, ks[i].ObjectKind)
				keys[r.end] = ks[i]
				r.end++
			}
			pages[p].keys = nil
		}
	}
	// The runs fill keys, one after the other.
	l.Keys = dropRepeatedPairs(keys)
	slices.SortFunc(l.Objects, func(a, b reconcile.ProviderObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
	l.Objects = slices.CompactFunc(l.Objects, func(a, b reconcile.ProviderObject) bool { return a.ID == b.ID })
	sortKeys(l.Keys)
	shareIDs(l.Objects, l.Keys)
	for _, o := range l.Objects {
		switch o.Kind {
		case reconcile.Charge:
			l.Stats.Charges++
		case reconcile.Refund:
			l.Stats.Refunds++
		case reconcile.PaymentIntent:
			l.Stats.PaymentIntents++
		}
	}
	l.Stats.Keys = len(l.Keys)
	return l
}

// shareIDs points each key's object id at the listed object's own id
// where the two are copies of one string, so that the pass holds one (a
// million keys' copies are 32 MB, held to the pass's end). Objects and
// keys are sorted alike, by kind, time and id, and the event that tells
// an object's key most often comes in its object's second, so one walk
// through both finds most; a key it does not meet keeps its copy.
func shareIDs(objs []reconcile.ProviderObject, keys []reconcile.KeyEvidence) {
	i := 0
	for k := range keys {
		ke := &keys[k]
		for i < len(objs) && cmp.Or(cmp.Compare(objs[i].Kind, ke.ObjectKind), cmp.Compare(objs[i].Created, ke.Created),
			cmp.Compare(objs[i].ID, ke.ObjectID)) < 0 {
			i++
		}
		if i < len(objs) && objs[i].ID == ke.ObjectID && objs[i].Kind == ke.ObjectKind {
			ke.ObjectID = objs[i].ID
		}
	}
}

// sortKeys sorts keys by kind, time, object id and key. merge's runs
// come in kind and time order already, but for the events of one
// second, which come in the provider's order, not by object: then each
// such tie is sorted alone (at a million keys, sorting them all cost a
// first pass 0.9 s of CPU).
func sortKeys(keys []reconcile.KeyEvidence) {
	byTime := func(a, b *reconcile.KeyEvidence) int {
		return cmp.Or(cmp.Compare(a.ObjectKind, b.ObjectKind), cmp.Compare(a.Created, b.Created))
	}
	byAll := func(a, b reconcile.KeyEvidence) int {
		return cmp.Or(byTime(&a, &b), cmp.Compare(a.ObjectID, b.ObjectID), cmp.Compare(a.Key, b.Key))
	}
	for i := 1; i < len(keys); i++ {
		if byTime(&keys[i-1], &keys[i]) > 0 {
			slices.SortFunc(keys, byAll)
			return
		}
	}
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && byTime(&keys[i], &keys[j]) == 0 {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(keys[i:j], byAll)
		}
		i = j
	}
}

// dropRepeatedPairs returns keys less the repeats of each (object, key)
// pair, closed up in place in the order they are in: of a pair it keeps
// the earliest event's key (the least event id among the earliest; among
// copies of one event the first read, as an object's keys are all in its
// kind's run, in the order read). An object's keys are found side by
// side by sorting their object ids by their heads (byid): a map of a
// million ids and the copies into it cost a first pass 1.4 s of CPU,
// against 1 s.
func dropRepeatedPairs(keys []reconcile.KeyEvidence) []reconcile.KeyEvidence {
	order := byid.Order(len(keys), func(i int32) string { return keys[i].ObjectID })
	drop := make([]bool, len(keys))
	for p := 0; p < len(order); {
		q := p + 1
		for q < len(order) && order[q].SameHead(order[p]) && keys[order[q].Index].ObjectID == keys[order[p].Index].ObjectID {
			q++
		}
		if q-p > 1 {
			// One object's keys: each pair's best first.
			same := order[p:q]
			slices.SortFunc(same, func(a, b byid.Key) int {
				x, y := &keys[a.Index], &keys[b.Index]
				return cmp.Or(cmp.Compare(x.Key, y.Key), cmp.Compare(x.Created, y.Created), cmp.Compare(x.EventID, y.EventID),
					cmp.Compare(a.Index, b.Index))
			})
			for i := 1; i < len(same); i++ {
				drop[same[i].Index] = keys[same[i].Index].Key == keys[same[i-1].Index].Key
			}
		}
		p = q
	}
	kept := 0
	for j := range keys {
		if drop[j] {
			continue
		}
		if kept != j {
			keys[kept] = keys[j]
		}
		kept++
	}
	return keys[:kept]
}

// kindRun is where merge puts one kind's keys: from start, n of them
// read, filled up to end.
type kindRun struct {
	kind          reconcile.ObjectKind
	n, start, end int
}

// runOf is kind's run in runs, added if there is none: a listing's keys
// are of three kinds.
func runOf(runs *[]kindRun, kind reconcile.ObjectKind) *kindRun {
	for i := range *runs {
		if (*runs)[i].kind == kind {
			return &(*runs)[i]
		}
	}
	*runs = append(*runs, kindRun{kind: kind})
	return &(*runs)[len(*runs)-1]
}

// Retrieve looks up by id the objects that obligations name but the
// listing did not return (an old charge is not a missing one), with the
// same pacing and retries as List, Concurrency at a time. Each distinct
// non-empty id gets one Lookup, sorted by id: found, not found (Stripe's
// 404 resource_missing, evidence of absence) or failed (anything else,
// including an id of no known prefix, and an answer without the object's
// id, amount, currency, status or created, retried first: a failure proves
// nothing). The found objects come back sorted by kind, creation time and
// id.
func (s *Stripe) Retrieve(ctx context.Context, ids []string) ([]reconcile.ProviderObject, []reconcile.Lookup) {
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(slices.DeleteFunc(uniq, func(id string) bool { return id == "" }))
	found := make([]*reconcile.ProviderObject, len(uniq))
	lookups := make([]reconcile.Lookup, len(uniq))
	sem := make(chan struct{}, s.opts.Concurrency)
	var c counters
	var wg sync.WaitGroup
	for i, id := range uniq {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			found[i], lookups[i] = s.retrieveOne(ctx, id, &c)
		})
	}
	wg.Wait()
	var objs []reconcile.ProviderObject
	for _, o := range found {
		if o != nil {
			objs = append(objs, *o)
		}
	}
	slices.SortFunc(objs, func(a, b reconcile.ProviderObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
	return objs, lookups
}

func (s *Stripe) retrieveOne(ctx context.Context, id string, c *counters) (*reconcile.ProviderObject, reconcile.Lookup) {
	kind, ok := kindOfID(id)
	if !ok {
		return nil, reconcile.Lookup{ID: id, Result: reconcile.LookupFailed,
			Err: "unknown id prefix: want ch_ or py_ (charge), re_ or pyr_ (refund), pi_ (payment intent)"}
	}
	var o reconcile.ProviderObject
	err := s.call(ctx, c, func(ctx context.Context) error {
		switch kind {
		case reconcile.Charge:
			ch, err := s.api.Charges.Get(id, &stripe.ChargeParams{Params: stripe.Params{Context: ctx, StripeAccount: s.header()}})
			if err != nil {
				return err
			}
			if err := checkRetrieved(ch.LastResponse, chargeShape, id, ch.Created); err != nil {
				return err
			}
			o = chargeObject(ch)
		case reconcile.Refund:
			r, err := s.api.Refunds.Get(id, &stripe.RefundParams{Params: stripe.Params{Context: ctx, StripeAccount: s.header()}})
			if err != nil {
				return err
			}
			if err := checkRetrieved(r.LastResponse, refundShape, id, r.Created); err != nil {
				return err
			}
			o = refundObject(r)
		case reconcile.PaymentIntent:
			p, err := s.api.PaymentIntents.Get(id, &stripe.PaymentIntentParams{Params: stripe.Params{Context: ctx, StripeAccount: s.header()}})
			if err != nil {
				return err
			}
			if err := checkRetrieved(p.LastResponse, paymentIntentShape, id, p.Created); err != nil {
				return err
			}
			o = paymentIntentObject(p)
		}
		return nil
	})
	if err != nil {
		var re *RequestError
		if errors.As(err, &re) && re.NotFound() {
			return nil, reconcile.Lookup{ID: id, Result: reconcile.LookupNotFound}
		}
		return nil, reconcile.Lookup{ID: id, Result: reconcile.LookupFailed, Err: fmt.Sprintf("retrieve %s %s%s: %v", kind, id, s.ofAccount(), err)}
	}
	o.Account = s.account
	return &o, reconcile.Lookup{ID: id, Result: reconcile.LookupFound}
}
