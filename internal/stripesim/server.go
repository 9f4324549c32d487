// Package stripesim is a simulated Stripe: the provider of the demo, the
// simulation, the benchmarks and the tests. It is a Stripe-compatible read
// API over data built from Go values, shipped in the binary because
// `reconcile demo` serves its sample shop from it.
//
// It serves what the reconciler reads, in Stripe's wire format as stripe-go
// v79 decodes it: the lists of charges, refunds, payment intents and events
// (newest first, cursors, created ranges, event type filters, Stripe's
// parameter errors) and retrieval by id. It refuses and counts every write,
// so that a test can prove the reconciler sent none, and it injects faults
// (rate limits, server errors, latency, dropped connections, 200s whose
// body is malformed) that are deterministic for a seed.
//
// Objects are added as reconcile.ProviderObject values; the server renders
// them as Stripe JSON and generates the events Stripe emits when they are
// created, each carrying the idempotency key of the creating request.
//
// It speaks Connect. Every object, event and idempotency key belongs to
// an account: the platform's own (Add, AddEvent, Update, Object) or a
// connected account added with AddAccount (As(id).Add and the rest). A
// request without a Stripe-Account header sees the platform's data only;
// one with Stripe-Account: acct_X sees acct_X's only, and one naming an
// account never added is refused as Stripe refuses it (403
// account_invalid). Object ids are unique per account, so that the same id
// in two accounts tells whether a reader keys by (account, id).
// /v1/accounts lists the connected accounts (newest first, with Stripe's
// paging) and /v1/accounts/{id} retrieves one. Faults are the key's
// (SetFaults: every request, one rate limit for all accounts, as Stripe's
// limits are per key) and an account's (SetAccountFaults: that account's
// requests only); Stats counts the totals and, in Stats.Accounts, each
// account's.
//
// The package must not import "testing": the demo binary uses it.
package stripesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"reconcile"
)

// The list names, as in the paths /v1/<name>.
const (
	ListCharges        = "charges"
	ListRefunds        = "refunds"
	ListPaymentIntents = "payment_intents"
	ListEvents         = "events"
	ListAccounts       = "accounts"
)

// listNames are the lists every account's book holds.
var listNames = []string{ListCharges, ListRefunds, ListPaymentIntents, ListEvents, ListAccounts}

// Server is the Stripe-compatible read API. It is an http.Handler; Start
// serves it on a loopback port. It is safe for concurrent use, and data may
// be added while it serves.
type Server struct {
	apiKey string

	mu     sync.RWMutex
	books  map[string]*book // by account id, "" the platform's own
	events int              // events emitted, for their ids
	reqs   int              // requests that created objects, for their ids

	faultMu    sync.Mutex
	keyFaults  *faultState            // SetFaults: every request
	acctFaults map[string]*faultState // SetAccountFaults: one account's requests

	seq atomic.Uint64 // requests received, for request ids

	statsMu sync.Mutex
	stats   Stats
}

// New returns an empty server that accepts requests bearing apiKey.
func New(apiKey string) *Server {
	s := &Server{apiKey: apiKey, books: map[string]*book{"": newBook()},
		keyFaults: newFaultState(Faults{}), acctFaults: map[string]*faultState{}}
	s.stats = newStats()
	return s
}

// book is one account's data: its lists and its objects by id. Every
// book has every list; only the platform's list of accounts has entries.
type book struct {
	lists   map[string]*list  // by list name
	objects map[string]*entry // charges, refunds and intents by id
}

func newBook() *book {
	b := &book{lists: map[string]*list{}, objects: map[string]*entry{}}
	for _, name := range listNames {
		b.lists[name] = &list{pos: map[string]int{}}
	}
	return b
}

// Start serves s on 127.0.0.1 at a free port and returns its base URL (to
// pass as STRIPE_API_BASE) and a function that stops it.
func (s *Server) Start() (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("start stripesim server: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns http.ErrServerClosed once stopped
	}()
	var once sync.Once
	return "http://" + ln.Addr().String(), func() {
		once.Do(func() {
			_ = srv.Close()
			<-done
		})
	}, nil
}

// entry is one object or event as the server holds it.
type entry struct {
	id      string
	created int64
	body    []byte // rendered JSON

	// Objects only.
	obj reconcile.ProviderObject

	// Filters: an event's type; a refund's charge and intent; a charge's
	// intent; a charge's or intent's customer.
	typ           string
	charge        string
	paymentIntent string
	customer      string
}

// list holds one list's entries, newest first with ties by id descending
// (Stripe's order), sorted lazily after additions.
//
// A benchmark adds a day's objects to a list of a million and reads it
// again: sorting it all and placing every id again took the server longer
// than the reconciler took to read the day. So entries added since the
// last sort are sorted apart and merged in, and an id's place is counted
// from the list's end, which an entry older than every added one keeps.
type list struct {
	entries []*entry
	// pos is an id's place counted from the end (len(entries)-1-index),
	// valid when !dirty.
	pos map[string]int
	// sorted entries lead entries in order; the rest were added since.
	sorted int
	dirty  bool
	// resort: an entry's creation changed, and all is sorted again.
	resort bool
}

func (l *list) add(e *entry) {
	l.entries = append(l.entries, e)
	l.dirty = true
}

// moved marks that an entry's creation changed.
func (l *list) moved() { l.dirty, l.resort = true, true }

// index is the index of id in the sorted entries.
func (l *list) index(id string) (int, bool) {
	p, ok := l.pos[id]
	return len(l.entries) - 1 - p, ok
}

func stripeOrder(a, b *entry) int {
	if a.created != b.created {
		return cmpDesc(a.created, b.created)
	}
	return strings.Compare(b.id, a.id)
}

func (l *list) sort() {
	placed := 0 // entries[:placed] to place again
	if l.resort || l.sorted == 0 {
		slices.SortFunc(l.entries, stripeOrder)
		clear(l.pos)
		placed = len(l.entries)
	} else if tail := l.entries[l.sorted:]; len(tail) > 0 {
		slices.SortFunc(tail, stripeOrder)
		merged := make([]*entry, 0, len(l.entries))
		old := l.entries[:l.sorted]
		i, j := 0, 0
		for i < len(old) || j < len(tail) {
			if j < len(tail) && (i == len(old) || stripeOrder(tail[j], old[i]) < 0) {
				merged = append(merged, tail[j])
				j++
				placed = len(merged)
			} else {
				merged = append(merged, old[i])
				i++
			}
		}
		l.entries = merged
	}
	for i, e := range l.entries[:placed] {
		l.pos[e.id] = len(l.entries) - 1 - i
	}
	l.sorted, l.dirty, l.resort = len(l.entries), false, false
}

func cmpDesc(a, b int64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func listOf(kind reconcile.ObjectKind) (string, bool) {
	switch kind {
	case reconcile.Charge:
		return ListCharges, true
	case reconcile.Refund:
		return ListRefunds, true
	case reconcile.PaymentIntent:
		return ListPaymentIntents, true
	}
	return "", false
}

func errUnknownKind(k reconcile.ObjectKind) error {
	return fmt.Errorf("unknown object kind %q (want charge, refund or payment_intent)", k)
}

// Add adds a charge, refund or payment intent, created by a request that
// carried idempotencyKey (an automatic key when empty, as stripe-go sends
// one with every POST), and the events Stripe emits for its creation:
//
//   - a charge: charge.succeeded, charge.pending or charge.failed;
//   - a payment intent: payment_intent.created, then payment_intent.succeeded
//     or payment_intent.processing when it is so;
//   - a refund: refund.created, and charge.refunded about the refunded
//     charge (when the server holds it: add charges before their refunds)
//     with the refund's request and key.
//
// The events are created at the object's creation time. The object and
// its events are the platform's own; As(account).Add adds them to a
// connected account.
func (s *Server) Add(o reconcile.ProviderObject, idempotencyKey string) error {
	return s.As("").Add(o, idempotencyKey)
}

// Acting is the data of one account, the platform's own ("") or a
// connected account's (As): what requests bearing its Stripe-Account
// header see. Its methods are the Server's, for that account.
type Acting struct {
	s       *Server
	account string
}

// As is the data of account: "" for the platform's own, else a connected
// account added with AddAccount (every method fails for one not added).
func (s *Server) As(account string) Acting { return Acting{s: s, account: account} }

// book is a's book; s.mu must be held.
func (a Acting) book() (*book, error) {
	b, ok := a.s.books[a.account]
	if !ok {
		return nil, fmt.Errorf("no account %q (add it with AddAccount)", a.account)
	}
	return b, nil
}

// in names a's account in errors: "" for the platform.
func (a Acting) in() string {
	if a.account == "" {
		return ""
	}
	return " in " + a.account
}

// Add is Server.Add for a's account. Object ids are unique per account.
func (a Acting) Add(o reconcile.ProviderObject, idempotencyKey string) error {
	if err := a.add(o, idempotencyKey); err != nil {
		return fmt.Errorf("add %s %q%s: %w", o.Kind, o.ID, a.in(), err)
	}
	return nil
}

func (a Acting) add(o reconcile.ProviderObject, key string) error {
	s := a.s
	name, ok := listOf(o.Kind)
	if !ok {
		return errUnknownKind(o.Kind)
	}
	if o.ID == "" {
		return errors.New("empty id")
	}
	o.Metadata = maps.Clone(o.Metadata)
	body, err := render(o)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := a.book()
	if err != nil {
		return err
	}
	if _, dup := b.objects[o.ID]; dup {
		return errors.New("duplicate id")
	}
	e := &entry{id: o.ID, created: o.Created.Time().Unix(), body: body}
	e.setObject(o, body)
	b.lists[name].add(e)
	b.objects[o.ID] = e

	s.reqs++
	req := &Request{ID: fmt.Sprintf("req_create%08d", s.reqs), IdempotencyKey: key}
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = autoKey(o, s.reqs)
	}
	raw := RawStatus(o)
	switch o.Kind {
	case reconcile.Charge:
		typ := "charge.updated"
		switch raw {
		case "succeeded", "pending", "failed":
			typ = "charge." + raw
		}
		s.emit(b, typ, e.created, body, req)
	case reconcile.PaymentIntent:
		s.emit(b, "payment_intent.created", e.created, body, req)
		switch raw {
		case "succeeded", "processing":
			s.emit(b, "payment_intent."+raw, e.created, body, req)
		}
	case reconcile.Refund:
		s.emit(b, "refund.created", e.created, body, req)
		if ch := b.refundedCharge(o); ch != nil && raw != "failed" && raw != "canceled" {
			s.emit(b, "charge.refunded", e.created, ch.body, req)
		}
	}
	return nil
}

func (e *entry) setObject(o reconcile.ProviderObject, body []byte) {
	e.obj, e.body = o, body
	e.customer = o.Customer
	switch o.Kind {
	case reconcile.Refund:
		e.charge, e.paymentIntent = refundCharge(o), refundIntent(o)
	case reconcile.Charge:
		e.paymentIntent = o.PaymentIntent
	}
}

// refundedCharge is the charge a refund refunds, directly or through its
// payment intent's latest charge, if the book holds it.
func (b *book) refundedCharge(o reconcile.ProviderObject) *entry {
	if id := refundCharge(o); id != "" {
		if e, ok := b.objects[id]; ok && e.obj.Kind == reconcile.Charge {
			return e
		}
		return nil
	}
	if pi, ok := b.objects[refundIntent(o)]; ok && pi.obj.Kind == reconcile.PaymentIntent {
		if e, ok := b.objects[pi.obj.Charge]; ok && e.obj.Kind == reconcile.Charge {
			return e
		}
	}
	return nil
}

// autoKey is an idempotency key shaped like the ones stripe-go makes for
// every POST (nanoseconds, an underscore, six random characters); here
// derived from the object so that data sets are reproducible.
func autoKey(o reconcile.ProviderObject, n int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", o.ID, n)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	sum := h.Sum64()
	var b [6]byte
	for i := range b {
		b[i] = alphabet[sum%64]
		sum /= 64
	}
	return fmt.Sprintf("%d_%s", o.Created.Time().UnixNano()+int64(n), b[:])
}

// Request is the API request an event names: Stripe's event.request. An
// empty field is rendered as null.
type Request struct {
	ID             string
	IdempotencyKey string
}

// emit appends an event to b; s.mu must be held.
func (s *Server) emit(b *book, typ string, created int64, object []byte, req *Request) string {
	s.events++
	id := fmt.Sprintf("evt_%010d", s.events)
	ev := eventJSON{
		ID: id, Object: "event", APIVersion: apiVersion, Created: created,
		Data: eventDataJSON{Object: object}, Type: typ,
	}
	if req != nil {
		ev.Request = requestJSON{ID: nullable(req.ID), IdempotencyKey: nullable(req.IdempotencyKey)}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		// The parts are JSON the server rendered itself or that AddEvent
		// checked, so this cannot happen.
		panic(fmt.Sprintf("stripesim: render event: %v", err))
	}
	b.lists[ListEvents].add(&entry{id: id, created: created, body: body, typ: typ})
	return id
}

// Event is a raw event to add with AddEvent.
type Event struct {
	// ID defaults to the next generated event id.
	ID   string
	Type string
	// Created is the event's creation time.
	Created time.Time
	// Data is data.object verbatim; when nil, ObjectID names a stored
	// object whose current form is rendered.
	Data     []byte
	ObjectID string
	// Request is event.request; nil renders {"id": null,
	// "idempotency_key": null}, as for Stripe's automatic events.
	Request *Request
}

// AddEvent adds a raw event to the platform's events and returns its id.
func (s *Server) AddEvent(ev Event) (string, error) { return s.As("").AddEvent(ev) }

// AddEvent is Server.AddEvent for a's account: ObjectID names an object of
// that account, and event ids are unique per account.
func (a Acting) AddEvent(ev Event) (string, error) {
	if ev.Type == "" {
		return "", errors.New("add event: empty type")
	}
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := a.book()
	if err != nil {
		return "", fmt.Errorf("add event %s: %w", ev.Type, err)
	}
	data := ev.Data
	if data == nil {
		o, ok := b.objects[ev.ObjectID]
		if !ok {
			return "", fmt.Errorf("add event %s: no object %q%s", ev.Type, ev.ObjectID, a.in())
		}
		data = o.body
	} else if !json.Valid(data) {
		return "", fmt.Errorf("add event %s: data is not JSON", ev.Type)
	}
	if ev.ID == "" {
		return s.emit(b, ev.Type, ev.Created.Unix(), data, ev.Request), nil
	}
	if _, dup := b.lists[ListEvents].posOf(ev.ID); dup {
		return "", fmt.Errorf("add event %s: duplicate id %q", ev.Type, ev.ID)
	}
	rendered := eventJSON{ID: ev.ID, Object: "event", APIVersion: apiVersion, Created: ev.Created.Unix(),
		Data: eventDataJSON{Object: data}, Type: ev.Type}
	if ev.Request != nil {
		rendered.Request = requestJSON{ID: nullable(ev.Request.ID), IdempotencyKey: nullable(ev.Request.IdempotencyKey)}
	}
	body, err := json.Marshal(rendered)
	if err != nil {
		return "", fmt.Errorf("add event %s: %w", ev.Type, err)
	}
	b.lists[ListEvents].add(&entry{id: ev.ID, created: ev.Created.Unix(), body: body, typ: ev.Type})
	return ev.ID, nil
}

// posOf reports whether id is in the list, sorted or not.
func (l *list) posOf(id string) (int, bool) {
	if !l.dirty {
		return l.index(id)
	}
	i := slices.IndexFunc(l.entries, func(e *entry) bool { return e.id == id })
	return i, i >= 0
}

// Update changes a stored object in place, as the provider does after the
// fact (a pending refund succeeding or failing, an intent finishing
// processing, a charge captured or refunded), and emits the events Stripe
// emits for such a change, at time at and with no request (null request id
// and key): refund.updated (plus charge.refund.updated when it names a
// charge) for a refund; charge.succeeded, charge.failed, charge.captured,
// charge.refunded or charge.updated for a charge; payment_intent.succeeded,
// .processing, .canceled, .payment_failed or .requires_action for an intent
// whose status changed. The id and kind cannot change. The object is the
// platform's; As(account).Update changes a connected account's.
func (s *Server) Update(id string, at time.Time, change func(*reconcile.ProviderObject)) error {
	return s.As("").Update(id, at, change)
}

// Update is Server.Update for a's account.
func (a Acting) Update(id string, at time.Time, change func(*reconcile.ProviderObject)) error {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := a.book()
	if err != nil {
		return fmt.Errorf("update %q: %w", id, err)
	}
	e, ok := b.objects[id]
	if !ok {
		return fmt.Errorf("update %q%s: no such object", id, a.in())
	}
	old := e.obj
	o := old
	o.Metadata = maps.Clone(old.Metadata)
	change(&o)
	if o.ID != old.ID || o.Kind != old.Kind {
		return fmt.Errorf("update %q: the id and kind cannot change", id)
	}
	o.Metadata = maps.Clone(o.Metadata)
	body, err := render(o)
	if err != nil {
		return fmt.Errorf("update %q: %w", id, err)
	}
	e.setObject(o, body)
	if c := o.Created.Time().Unix(); c != e.created {
		e.created = c
		name, _ := listOf(o.Kind)
		b.lists[name].moved()
	}
	for _, typ := range updateEvents(old, o, e.charge != "") {
		s.emit(b, typ, at.Unix(), body, nil)
	}
	return nil
}

// updateEvents are the event types Stripe emits when old becomes o.
func updateEvents(old, o reconcile.ProviderObject, refundHasCharge bool) []string {
	was, is := RawStatus(old), RawStatus(o)
	switch o.Kind {
	case reconcile.Refund:
		if refundHasCharge {
			return []string{"refund.updated", "charge.refund.updated"}
		}
		return []string{"refund.updated"}
	case reconcile.Charge:
		var types []string
		switch {
		case was != is && (is == "succeeded" || is == "failed" || is == "pending"):
			types = append(types, "charge."+is)
		case old.Status == reconcile.Pending && o.Status == reconcile.Succeeded && is == "succeeded":
			types = append(types, "charge.captured")
		}
		if o.AmountRefunded != old.AmountRefunded {
			types = append(types, "charge.refunded")
		}
		if len(types) == 0 {
			types = append(types, "charge.updated")
		}
		return types
	case reconcile.PaymentIntent:
		if was == is {
			return nil
		}
		switch is {
		case "succeeded", "processing", "canceled", "requires_action":
			return []string{"payment_intent." + is}
		case "requires_payment_method":
			return []string{"payment_intent.payment_failed"}
		}
	}
	return nil
}

// Object returns the platform's stored object with id as it stands now.
func (s *Server) Object(id string) (reconcile.ProviderObject, bool) { return s.As("").Object(id) }

// Object is Server.Object for a's account.
func (a Acting) Object(id string) (reconcile.ProviderObject, bool) {
	a.s.mu.RLock()
	defer a.s.mu.RUnlock()
	b, err := a.book()
	if err != nil {
		return reconcile.ProviderObject{}, false
	}
	e, ok := b.objects[id]
	if !ok {
		return reconcile.ProviderObject{}, false
	}
	o := e.obj
	o.Metadata = maps.Clone(o.Metadata)
	return o, true
}
