package runner_test

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

var debugTwin = false

var (
	incrementalSeeds = flag.Int("incremental.seeds", 16, "histories TestIncrementalEqualsWhole runs")
	incrementalDays  = flag.Int("incremental.days", 5, "days of each history TestIncrementalEqualsWhole runs after its first pass")
	incrementalFirst = flag.Uint64("incremental.first", 0, "the first seed TestIncrementalEqualsWhole runs (histories not yet run)")
)

// twin is two reconcilers given the same history: a matches as nightly
// passes do (incrementally, where it may), b matches everything in scope
// on every pass (--full).
type twin struct {
	a, b *env
	rng  *rand.Rand
	tb   testing.TB
	// what the history holds so far, to pick from
	obls    []reconcile.Obligation
	objs    []reconcile.ProviderObject
	nextObj int
	nextObl int
	// later are obligations whose payments the provider holds already,
	// written into the table on the next day: the workflow wrote the row
	// after the request went out.
	later []reconcile.Obligation
	// plain is, by obligation, the charge that only its provider_id
	// links to it, and that no twin reaches (plainPaid, payment).
	plain map[string]string
	// old are the obligations paid weeks before the first pass (oldPaid),
	// and oldRng the generator that draws them, their retries (oldRetry)
	// and what a new obligation naming an old charge finds around it
	// (oldShape), apart from the rest of the history.
	old    []reconcile.Obligation
	oldRng *rand.Rand
	// refundRng draws an old payment's refunds (oldRefund), and twin the
	// refund the next day repeats: nil when none is drawn.
	refundRng *rand.Rand
	twin      *reconcile.ProviderObject
	// told is, by object, the time of the latest event the provider
	// emitted about it: an update comes after it (update).
	told map[string]time.Time
}

func (w *twin) both(f func(e *env)) { f(w.a); f(w.b) }

var (
	propCustomers = []string{"cus_a", "cus_b", "cus_c"}
	propAmounts   = []int64{1000, 2000, 2500}
)

func (w *twin) money() reconcile.Money {
	return reconcile.Money{Amount: propAmounts[w.rng.IntN(len(propAmounts))], Currency: "usd"}
}

// object adds a provider object created at created, with key evidence key
// ("" none), to both servers.
func (w *twin) object(o reconcile.ProviderObject, key string) reconcile.ProviderObject {
	w.both(func(e *env) { e.add(key, o) })
	w.objs = append(w.objs, o)
	// A refund's events tell of its charge too (charge.refunded), a
	// charge's of its intent.
	for _, id := range []string{o.ID, o.Charge, o.PaymentIntent, o.Target} {
		w.tell(id, o.Created.Time())
	}
	return o
}

// tell records that the provider emitted an event about object id at at.
func (w *twin) tell(id string, at time.Time) {
	if id != "" && at.After(w.told[id]) {
		w.told[id] = at
	}
}

// update changes object id on both servers at at, or, if an event told
// of it later, just after that event: the provider's events about an
// object tell its states in the order they came, and one that shows it
// as it stood before the change is older than the change. An update that
// would fall at before or after is not made (false).
func (w *twin) update(id string, at, before time.Time, change func(*reconcile.ProviderObject)) bool {
	if last := w.told[id]; !at.After(last) {
		at = last.Add(time.Second)
	}
	if !at.Before(before) {
		return false
	}
	w.tell(id, at)
	w.both(func(e *env) { e.update(id, at, change) })
	return true
}

func (w *twin) newObjectID(prefix string) string {
	w.nextObj++
	return prefix + "_p" + strconv.Itoa(w.nextObj)
}

// payment adds what the provider did for obligation o (money moved once,
// twice, failed, still pending, by some route), or, with o nil, money no
// obligation asked for. A payment made as o was created (first) may set
// o's provider_id, which its row is written with; a retry's never does.
func (w *twin) payment(o *reconcile.Obligation, first bool, created time.Time) {
	kind := reconcile.Charge
	if o != nil && o.Kind == reconcile.Refund {
		kind = reconcile.Refund
	}
	x := reconcile.ProviderObject{Kind: kind, Money: w.money(), Status: reconcile.Succeeded, RawStatus: "succeeded",
		Customer: propCustomers[w.rng.IntN(len(propCustomers))], Created: reconcile.StampOf(created)}
	switch r := w.rng.IntN(10); {
	case r == 0:
		x.Status, x.RawStatus = reconcile.Failed, "failed"
	case r == 1:
		x.Status, x.RawStatus = reconcile.Pending, "pending"
	}
	key := ""
	if o != nil {
		x.Money = o.Money
		if w.rng.IntN(12) == 0 {
			x.Money.Amount++
		}
		switch w.rng.IntN(4) {
		case 0:
			key = o.IdempotencyKey
		case 1:
			x.Metadata = map[string]string{"obligation_id": o.ID}
		case 2:
			x.Metadata = map[string]string{"idempotency_key": o.IdempotencyKey}
		}
	}
	switch {
	case kind == reconcile.Refund:
		x.ID = w.newObjectID("re")
		x.Customer = ""
		t := w.pick(reconcile.Charge)
		if o != nil {
			t = o.TargetID
		}
		if t == "" {
			return
		}
		w.refunds(&x, t)
	case w.rng.IntN(4) == 0:
		// An intent and its charge: the intent names the obligation.
		pi := x
		pi.ID, pi.Kind = w.newObjectID("pi"), reconcile.PaymentIntent
		if pi.Status == reconcile.Pending {
			pi.RawStatus = "processing"
		}
		x.ID, x.PaymentIntent, x.Metadata = w.newObjectID("ch"), pi.ID, nil
		pi.Charge = x.ID
		w.object(pi, key)
		key = ""
		if o != nil && o.ProviderID == "" && w.rng.IntN(2) == 0 {
			o.ProviderID = pi.ID
		}
	default:
		x.ID = w.newObjectID("ch")
	}
	bare := x.Kind == reconcile.Charge && x.PaymentIntent == "" && key == "" && x.Metadata == nil
	link := first && o.ProviderID == "" && (bare || w.rng.IntN(2) == 0)
	if link && bare {
		// Only o's provider_id links the charge to o, and no twin
		// reaches it (its customer is its own).
		x.Customer = "cus_" + x.ID
		w.plain[o.ID] = x.ID
	}
	w.object(x, key)
	if link {
		o.ProviderID = x.ID
	}
}

// refunds makes refund x take money back from payment t, a charge or an
// intent, naming it as a refund of an intent's payment may: by its
// charge, by its intent, or by both (as Stripe shows one).
func (w *twin) refunds(x *reconcile.ProviderObject, t string) {
	charge, intent := t, w.find(t).PaymentIntent
	if w.find(t).Kind == reconcile.PaymentIntent {
		charge, intent = w.find(t).Charge, t
	}
	switch r := w.rng.IntN(3); {
	case intent == "" || charge != "" && r == 0:
		x.Target, x.Charge = charge, charge
	case charge == "" || r == 1:
		x.Target, x.PaymentIntent = intent, intent
	default:
		x.Target, x.Charge, x.PaymentIntent = charge, charge, intent
	}
}

// find is the object of id the history holds, the zero object if none.
func (w *twin) find(id string) reconcile.ProviderObject {
	for _, o := range w.objs {
		if o.ID == id {
			return o
		}
	}
	return reconcile.ProviderObject{}
}

// pick is the id of a random object of kind, "" if none.
func (w *twin) pick(kind reconcile.ObjectKind) string {
	var ids []string
	for _, o := range w.objs {
		if o.Kind == kind {
			ids = append(ids, o.ID)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return ids[w.rng.IntN(len(ids))]
}

var propStates = []reconcile.State{reconcile.Paid, reconcile.Paid, reconcile.Paid, reconcile.ConfirmationUnknown,
	reconcile.Executing, reconcile.FailedState, reconcile.Approved, reconcile.PendingApproval}

// obligation adds an obligation created at created and what the provider
// did for it.
func (w *twin) obligation(created time.Time) {
	w.nextObl++
	o := reconcile.Obligation{ID: "charge:p" + strconv.Itoa(w.nextObl), Kind: reconcile.Charge,
		IdempotencyKey: "key-p" + strconv.Itoa(w.nextObl), Money: w.money(), State: propStates[w.rng.IntN(len(propStates))],
		CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)}
	if c := w.pick(reconcile.Charge); c != "" && w.rng.IntN(5) == 0 {
		o.ID, o.Kind, o.TargetID = "refund:p"+strconv.Itoa(w.nextObl), reconcile.Refund, c
		// A workflow may refund a payment by its intent.
		if pi := w.find(c).PaymentIntent; pi != "" && w.rng.IntN(3) == 0 {
			o.TargetID = pi
		}
	}
	if o.State == reconcile.Executing && w.rng.IntN(2) == 0 {
		o.LeaseOwner, o.LeaseExpiresAt = "worker-1", reconcile.StampOf(created.Add(time.Duration(w.rng.IntN(6))*time.Hour))
	}
	for n := w.rng.IntN(3); n > 0; n-- {
		w.payment(&o, true, created.Add(time.Duration(w.rng.IntN(20))*time.Minute))
	}
	if o.State == reconcile.Paid {
		// Marked paid as it was created: the workflow writes updated_at
		// with paid_at (docs/design.md, "Incremental matching").
		o.PaidAt = reconcile.StampOf(created)
	}
	if w.rng.IntN(6) == 0 {
		w.later = append(w.later, o)
		return
	}
	w.both(func(e *env) { pgtest.InsertObligations(e.tb, e.pool, o) })
	w.obls = append(w.obls, o)
}

// plainPaid adds an obligation paid by a charge that carries nothing of
// it (no key, no metadata) and whose customer is its own: only the
// provider_id links them, and no twin reaches the charge. Once the
// provider_id is corrected (day's r == 8), the charge is an orphan, and
// only what the last pass linked tells a nightly pass of it.
func (w *twin) plainPaid(created time.Time) {
	o := w.paidObligation(created)
	id := w.newObjectID("ch")
	w.object(reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: o.Money, Status: reconcile.Succeeded,
		RawStatus: "succeeded", Customer: "cus_" + id, Created: reconcile.StampOf(created)}, "")
	o.ProviderID = id
	w.plain[o.ID] = id
	w.both(func(e *env) { pgtest.InsertObligations(e.tb, e.pool, o) })
	w.obls = append(w.obls, o)
}

// paidObligation is a new charge obligation of the history, created and
// paid at created, naming nothing yet.
func (w *twin) paidObligation(created time.Time) reconcile.Obligation {
	w.nextObl++
	return reconcile.Obligation{ID: "charge:p" + strconv.Itoa(w.nextObl), Kind: reconcile.Charge,
		IdempotencyKey: "key-p" + strconv.Itoa(w.nextObl), Money: w.money(), State: reconcile.Paid,
		CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)}
}

// oldPaid adds a charge obligation paid weeks before the first pass,
// outside every pass's coverage, and its payment. Refunds the history
// asks for later may target its charge, which a pass then retrieves by
// id; it is among the obligations the history retries, moves and
// corrects, so that a new record may name it, and a pass read back to
// it (docs/design.md, "Incremental matching").
func (w *twin) oldPaid(created time.Time) {
	o := w.paidObligation(created)
	w.payment(&o, true, created.Add(time.Duration(w.rng.IntN(20))*time.Minute))
	w.both(func(e *env) { pgtest.InsertObligations(e.tb, e.pool, o) })
	w.obls, w.old = append(w.obls, o), append(w.old, o)
}

// oldRetry, in one history in two, retries an old obligation with a
// charge that fails, under its key or its metadata: a record of the
// coverage that names an obligation no rule keeps in scope, which no
// change brings back to a nightly pass after the day it appears, and
// which sends every pass that holds it in its window back to the
// obligation (docs/design.md, "Incremental matching"). It draws from
// oldRng alone.
func (w *twin) oldRetry(at time.Time) {
	if len(w.old) == 0 || w.oldRng.IntN(2) == 0 {
		return
	}
	o := w.old[w.oldRng.IntN(len(w.old))]
	x := reconcile.ProviderObject{ID: w.newObjectID("ch"), Kind: reconcile.Charge, Money: o.Money, Status: reconcile.Failed,
		RawStatus: "failed", Customer: propCustomers[w.oldRng.IntN(len(propCustomers))],
		Created: reconcile.StampOf(at.Add(-time.Duration(1+w.oldRng.IntN(50)) * time.Minute))}
	key := ""
	switch w.oldRng.IntN(3) {
	case 0:
		key = o.IdempotencyKey
	case 1:
		x.Metadata = map[string]string{"obligation_id": o.ID}
	default:
		x.Metadata = map[string]string{"idempotency_key": o.IdempotencyKey}
	}
	w.object(x, key)
}

// oldShape, in one history in two, draws one of the shapes in which a
// nightly pass retrieves an old charge outside its coverage and must read
// around it as a whole pass does (TestIncrementalClosesOverWhatItRetrievesOutside):
// a new obligation names the old charge by its provider_id, and inside the
// coverage key evidence told of the charge under an old obligation's key,
// a new charge of its intent paying another obligation, or a failed
// charge naming the old obligation whose charge it is. It draws from
// oldRng alone.
func (w *twin) oldShape(at time.Time) {
	if len(w.old) == 0 || w.oldRng.IntN(2) == 0 {
		return
	}
	y := w.old[w.oldRng.IntN(len(w.old))]
	recent := func() time.Time { return at.Add(-time.Duration(1+w.oldRng.IntN(50)) * time.Minute) }
	x := reconcile.ProviderObject{ID: w.newObjectID("ch"), Kind: reconcile.Charge, Money: y.Money, Status: reconcile.Succeeded,
		RawStatus: "succeeded", Customer: propCustomers[w.oldRng.IntN(len(propCustomers))],
		Created: reconcile.StampOf(y.CreatedAt.Time().Add(5 * time.Minute))}
	switch w.oldRng.IntN(3) {
	case 0:
		// Key evidence told hours ago links the old charge to y.
		told := recent()
		w.object(x, "")
		w.tell(x.ID, told)
		w.both(func(e *env) {
			if _, err := e.srv.AddEvent(stripesim.Event{Type: "charge.succeeded", ObjectID: x.ID, Created: told,
				Request: &stripesim.Request{ID: "req_" + x.ID, IdempotencyKey: y.IdempotencyKey}}); err != nil {
				w.tb.Fatal(err)
			}
		})
	case 1:
		// The old charge failed; a new one of its intent pays z.
		x.Status, x.RawStatus, x.PaymentIntent = reconcile.Failed, "failed", "pi_"+x.ID
		w.object(x, "")
		again := x
		again.ID, again.Status, again.RawStatus, again.Created = w.newObjectID("ch"), reconcile.Succeeded, "succeeded", reconcile.StampOf(recent())
		w.object(again, "")
		z := w.paidObligation(again.Created.Time())
		z.Money, z.ProviderID = again.Money, again.ID
		w.both(func(e *env) { pgtest.InsertObligations(e.tb, e.pool, z) })
		w.obls = append(w.obls, z)
	default:
		// y's own charge; a failed charge names y in its metadata.
		if !strings.HasPrefix(y.ProviderID, "ch_") {
			return
		}
		x.ID = y.ProviderID
		w.object(reconcile.ProviderObject{ID: w.newObjectID("ch"), Kind: reconcile.Charge, Money: y.Money, Status: reconcile.Failed,
			RawStatus: "failed", Customer: x.Customer, Metadata: map[string]string{"obligation_id": y.ID},
			Created: reconcile.StampOf(recent())}, "")
	}
	w.naming(x.ID, x.Money, recent())
}

// oldRefund, on a day in four, refunds a payment of charge and intent
// from before every coverage: a paid refund obligation naming either
// half, and its refund naming either or both. The next day an unlinked
// refund of the same money, naming either or both (half the time the
// half the first did not name), repeats it: a pass that does not decide
// on the unchanged refund obligation still finds it a suspected
// duplicate's owner only if it knows that the two halves are one
// payment (TestIncrementalRefundTwinsThroughWhatTheyRefund). It draws
// from refundRng alone.
func (w *twin) oldRefund(at time.Time) {
	r := w.refundRng
	recent := func() time.Time { return at.Add(-time.Duration(1+r.IntN(50)) * time.Minute) }
	// names is how a refund of the payment (charge, intent) names it.
	names := func(x *reconcile.ProviderObject, charge, intent string) {
		switch r.IntN(3) {
		case 0:
			x.Target, x.Charge, x.PaymentIntent = charge, charge, ""
		case 1:
			x.Target, x.Charge, x.PaymentIntent = intent, "", intent
		default:
			x.Target, x.Charge, x.PaymentIntent = charge, charge, intent
		}
	}
	if first := w.twin; first != nil {
		w.twin = nil
		charge, intent := w.find(first.Target).Charge, first.Target
		if first.Charge != "" {
			charge, intent = first.Charge, w.find(first.Charge).PaymentIntent
		}
		x := *first
		x.ID, x.Created = w.newObjectID("re"), reconcile.StampOf(recent())
		names(&x, charge, intent)
		if r.IntN(2) == 0 {
			switch {
			case first.PaymentIntent == "":
				x.Target, x.Charge, x.PaymentIntent = intent, "", intent
			case first.Charge == "":
				x.Target, x.Charge, x.PaymentIntent = charge, charge, ""
			}
		}
		w.object(x, "")
		return
	}
	if r.IntN(4) != 0 {
		return
	}
	var paid []reconcile.ProviderObject
	for _, x := range w.objs {
		if x.Kind == reconcile.Charge && x.PaymentIntent != "" && x.Status == reconcile.Succeeded && x.Created.Time().Before(t0.Add(-7*24*time.Hour)) {
			paid = append(paid, x)
		}
	}
	if len(paid) == 0 {
		return
	}
	c := paid[r.IntN(len(paid))]
	created := recent()
	w.nextObl++
	o := reconcile.Obligation{ID: "refund:p" + strconv.Itoa(w.nextObl), Kind: reconcile.Refund,
		IdempotencyKey: "key-p" + strconv.Itoa(w.nextObl), Money: reconcile.Money{Amount: 1 + r.Int64N(c.Money.Amount), Currency: c.Money.Currency},
		State: reconcile.Paid, CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)}
	x := reconcile.ProviderObject{ID: w.newObjectID("re"), Kind: reconcile.Refund, Money: o.Money, Status: reconcile.Succeeded,
		RawStatus: "succeeded", Created: reconcile.StampOf(created.Add(time.Minute))}
	names(&x, c.ID, c.PaymentIntent)
	o.TargetID, o.ProviderID = x.Target, x.ID
	w.object(x, "")
	w.both(func(e *env) { pgtest.InsertObligations(e.tb, e.pool, o) })
	w.obls = append(w.obls, o)
	w.twin = &x
}

// edit changes what a record already there says, at a time within the
// hour before at (an object's after its last event: update), drawing
// from r alone: a charge's metadata comes to name
// another obligation, or none (charge.updated); a payment intent moves on
// (payment_intent.succeeded, .canceled, .processing); the workflow
// corrects an obligation's amount or a refund's target, records a late
// answer (a provider_id naming an intent or a refund), or takes a lease
// on an obligation (EXECUTING until a time that may have passed).
func (w *twin) edit(r *rand.Rand, at time.Time) {
	when := at.Add(-time.Duration(1+r.IntN(50)) * time.Minute)
	of := func(kind reconcile.ObjectKind) (reconcile.ProviderObject, bool) {
		var xs []reconcile.ProviderObject
		for _, x := range w.objs {
			if x.Kind == kind {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			return reconcile.ProviderObject{}, false
		}
		return xs[r.IntN(len(xs))], true
	}
	if len(w.obls) == 0 {
		return
	}
	o := &w.obls[r.IntN(len(w.obls))]
	switch r.IntN(7) {
	case 0:
		x, ok := of(reconcile.Charge)
		if !ok {
			return
		}
		var meta map[string]string
		switch r.IntN(3) {
		case 0:
			meta = map[string]string{"obligation_id": o.ID}
		case 1:
			meta = map[string]string{"idempotency_key": o.IdempotencyKey}
		}
		w.update(x.ID, when, at, func(p *reconcile.ProviderObject) { p.Metadata = meta })
	case 1:
		x, ok := of(reconcile.PaymentIntent)
		if !ok {
			return
		}
		status := []struct {
			s   reconcile.Status
			raw string
		}{{reconcile.Succeeded, "succeeded"}, {reconcile.Failed, "canceled"}, {reconcile.Pending, "processing"}}[r.IntN(3)]
		w.update(x.ID, when, at, func(p *reconcile.ProviderObject) { p.Status, p.RawStatus = status.s, status.raw })
	case 2:
		o.Money.Amount = propAmounts[r.IntN(len(propAmounts))]
		w.both(func(e *env) {
			e.exec(`UPDATE obligations SET amount = $2, updated_at = $3 WHERE id = $1`, o.ID, o.Money.Amount, when)
		})
	case 3:
		if o.Kind != reconcile.Refund {
			return
		}
		// A charge, or the payment intent standing for its charges.
		x, ok := of([]reconcile.ObjectKind{reconcile.Charge, reconcile.PaymentIntent}[r.IntN(2)])
		if !ok {
			return
		}
		o.TargetID = x.ID
		w.both(func(e *env) {
			e.exec(`UPDATE obligations SET target_id = $2, updated_at = $3 WHERE id = $1`, o.ID, o.TargetID, when)
		})
	case 4:
		// The answer arrives late: a charge obligation's provider_id
		// comes to name a payment intent (which stands for its
		// charges), a refund obligation's a refund.
		kind := reconcile.PaymentIntent
		if o.Kind == reconcile.Refund {
			kind = reconcile.Refund
		}
		x, ok := of(kind)
		if !ok {
			return
		}
		o.ProviderID = x.ID
		w.both(func(e *env) {
			e.exec(`UPDATE obligations SET provider_id = $2, updated_at = $3 WHERE id = $1`, o.ID, o.ProviderID, when)
		})
	default:
		if o.State != reconcile.Approved && o.State != reconcile.ConfirmationUnknown && o.State != reconcile.Executing {
			return
		}
		// A lease of up to three hours, taken up to an hour ago: some
		// have run out by the pass.
		until := when.Add(time.Duration(r.IntN(3*60)) * time.Minute)
		o.State, o.LeaseOwner, o.LeaseExpiresAt = reconcile.Executing, "worker-2", reconcile.StampOf(until)
		w.both(func(e *env) {
			e.exec(`UPDATE obligations SET state = $2, lease_owner = $3, lease_expires_at = $4, updated_at = $5 WHERE id = $1`,
				o.ID, string(o.State), o.LeaseOwner, until, when)
		})
	}
}

// naming adds a CONFIRMATION_UNKNOWN charge obligation for money,
// created at created, whose provider_id names the object id.
func (w *twin) naming(id string, money reconcile.Money, created time.Time) {
	w.nextObl++
	o := reconcile.Obligation{ID: "charge:p" + strconv.Itoa(w.nextObl), Kind: reconcile.Charge,
		IdempotencyKey: "key-p" + strconv.Itoa(w.nextObl), ProviderID: id, Money: money,
		State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)}
	w.both(func(e *env) { pgtest.InsertObligations(e.tb, e.pool, o) })
	w.obls = append(w.obls, o)
}

// day is what happens at the provider and in the table between two
// passes, all of it before at.
func (w *twin) day(at time.Time) {
	for _, o := range w.later {
		// The row says when it was written.
		o.CreatedAt, o.UpdatedAt = reconcile.StampOf(at.Add(-time.Hour)), reconcile.StampOf(at.Add(-time.Hour))
		if o.State == reconcile.Paid {
			o.PaidAt = o.CreatedAt
		}
		w.both(func(e *env) { pgtest.InsertObligations(e.tb, e.pool, o) })
		w.obls = append(w.obls, o)
	}
	w.later = nil
	for n := 2 + w.rng.IntN(6); n > 0; n-- {
		created := at.Add(-time.Duration(1+w.rng.IntN(50)) * time.Minute)
		switch r := w.rng.IntN(11); {
		case r < 2:
			w.obligation(created)
		case r == 2:
			// A retry or a payment nobody asked for, maybe a twin.
			if len(w.obls) > 0 && w.rng.IntN(2) == 0 {
				o := w.obls[w.rng.IntN(len(w.obls))]
				w.payment(&o, false, created)
			} else {
				w.payment(nil, false, created)
			}
		case r == 3 && len(w.objs) > 0:
			// A change the provider tells an event of.
			x := w.objs[w.rng.IntN(len(w.objs))]
			if x.Kind == reconcile.PaymentIntent {
				continue
			}
			status, raw := reconcile.Succeeded, "succeeded"
			if x.Status == reconcile.Succeeded {
				status, raw = reconcile.Failed, "failed"
			}
			w.update(x.ID, created, at, func(o *reconcile.ProviderObject) { o.Status, o.RawStatus = status, raw })
		case r == 4 && len(w.obls) > 0:
			// The workflow moves an obligation.
			o := &w.obls[w.rng.IntN(len(w.obls))]
			state := propStates[w.rng.IntN(len(propStates))]
			pid := o.ProviderID
			switch w.rng.IntN(4) {
			case 0:
				// Set, or corrected to another charge.
				pid = w.pick(reconcile.Charge)
			case 1:
				pid = ""
			}
			o.State, o.ProviderID = state, pid
			w.both(func(e *env) {
				e.exec(`UPDATE obligations SET state = $2, provider_id = nullif($3, ''), updated_at = $4 WHERE id = $1`,
					o.ID, string(state), pid, created)
			})
		case r == 5 && len(w.obls) > 0 && w.rng.IntN(3) == 0:
			// A row goes away (rarely: the pass then matches whole).
			i := w.rng.IntN(len(w.obls))
			id := w.obls[i].ID
			w.obls = slices.Delete(w.obls, i, i+1)
			w.both(func(e *env) { e.exec(`DELETE FROM obligations WHERE id = $1`, id) })
		case r == 7:
			// A failed attempt under the metadata of an obligation paid
			// by other means, whose row is written tomorrow.
			w.nextObl++
			o := reconcile.Obligation{ID: "charge:p" + strconv.Itoa(w.nextObl), Kind: reconcile.Charge,
				IdempotencyKey: "key-p" + strconv.Itoa(w.nextObl), Money: w.money(), State: reconcile.Paid}
			meta := map[string]string{"obligation_id": o.ID}
			if w.rng.IntN(2) == 0 {
				meta = map[string]string{"idempotency_key": o.IdempotencyKey}
			}
			w.object(reconcile.ProviderObject{ID: w.newObjectID("ch"), Kind: reconcile.Charge, Money: o.Money,
				Status: reconcile.Failed, RawStatus: "failed", Customer: propCustomers[w.rng.IntN(len(propCustomers))],
				Metadata: meta, Created: reconcile.StampOf(created)}, "")
			w.later = append(w.later, o)
		case r == 8:
			// The workflow corrects a provider_id: what it named before
			// links to nothing now. A recent paid one whose charge only
			// its provider_id linked (plain) if there is one: the charge,
			// found linked cleanly by the last pass and no twin of
			// anything, is an orphan now, and only the last pass's link
			// tells a nightly pass of it.
			var named, plain []int
			for i, o := range w.obls {
				if o.ProviderID != "" {
					named = append(named, i)
					if w.plain[o.ID] == o.ProviderID && o.State == reconcile.Paid && created.Sub(o.CreatedAt.Time()) < 48*time.Hour {
						plain = append(plain, i)
					}
				}
			}
			if len(plain) > 0 {
				named = plain
			}
			if len(named) == 0 {
				continue
			}
			o := &w.obls[named[w.rng.IntN(len(named))]]
			o.ProviderID = w.newObjectID("ch_gone")
			w.both(func(e *env) {
				e.exec(`UPDATE obligations SET provider_id = $2, updated_at = $3 WHERE id = $1`, o.ID, o.ProviderID, created)
			})
		case r == 9:
			// What a correction of a provider_id (r == 8) leaves an
			// orphan.
			w.plainPaid(created)
		case r == 6:
			// An obligation appears that names an object already there.
			if id := w.pick(reconcile.Charge); id != "" {
				w.naming(id, w.money(), created)
			}
		default:
			w.payment(nil, false, created)
		}
	}
}

func (e *env) exec(sql string, args ...any) {
	e.tb.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.tb.Fatal(err)
	}
}

// stored is what a reconciler's database holds of its conclusions: every
// finding's fingerprint, status and content, every obligation's row, and
// the link the mirror keeps of every object created before the pass's
// clock (what the next nightly pass reaches obligations by). An object
// created at the clock or after (a payment lands up to 19 minutes after
// its obligation) lies past the window: a nightly pass keeps it if an
// event told of it within the events' grace, a pass that reads the
// provider in full (--full) lists only the window, and the next pass
// lists and compares it either way (all but the last day's). An object
// created before the coverage (from) that the mirror holds linked to
// nothing counts as one it does not hold: a nightly pass keeps what an
// event told of one (Sync keeps events about objects outside the listed
// window), a --full pass lists only the coverage, and either way no pass
// matches it unless it retrieves it, which the mirror's copy answers as
// the provider would. With oldLinks, one linked to an obligation is
// counted (not after an ad hoc pass, adHoc); coveredLinks counts none of
// those; noLinks, no link at all (after a pass whose mirror was not
// saved, unsaved).
func (e *env) stored(from time.Time, links linkRows) []string {
	e.tb.Helper()
	var out []string
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{sql: `SELECT 'finding ' || fingerprint || ' ' || kind || ' ' || severity || ' ' || coalesce(obligation_id, '') || ' ' || status || ' ' ||
			content_hash || ' ' || amount || currency || ' ' || at_risk_amount || at_risk_currency || ' ' || coalesce(target, '') || ' ' ||
			paid_out || ' ' || detail
			FROM reconcile.findings ORDER BY fingerprint`},
		{sql: `SELECT 'obligation ' || id || ' ' || state || ' ' || coalesce(provider_id, '') || ' ' || coalesce(paid_at::text, '')
			FROM obligations ORDER BY id`},
		{sql: `SELECT 'link ' || account || '/' || id || ' ' || coalesce(linked_to, '-')
			FROM reconcile.provider_objects WHERE created < $1 AND (created >= $2 OR (linked_to IS NOT NULL AND $3)) AND $4
			ORDER BY account, id`, args: []any{e.clock, from, links == oldLinks, links != noLinks}},
	} {
		rows, err := e.pool.Query(context.Background(), q.sql, q.args...)
		if err != nil {
			e.tb.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				e.tb.Fatal(err)
			}
			out = append(out, s)
		}
		rows.Close()
	}
	return out
}

// linkRows says which of the mirror's links stored counts.
type linkRows int

const (
	oldLinks linkRows = iota
	coveredLinks
	noLinks
)

// newTwin is two fresh reconcilers whose history seed makes.
func newTwin(tb testing.TB, seed uint64) *twin {
	return &twin{a: newEnv(tb), b: newEnv(tb), rng: rand.New(rand.NewPCG(seed, 0x5eed)), tb: tb, plain: map[string]string{},
		told: map[string]time.Time{}}
}

// passes runs a's nightly pass and b's --full pass at the clock, and says
// how they differ in what they concluded or stored ("" when they do not).
func (w *twin) passes() (nightly *runner.Outcome, differ string) {
	return w.passesSaving(true)
}

// passesSaving is passes, where neither side's save of its mirror
// succeeds unless saved: a trigger refuses the match mark, and the whole
// save rolls back. The pass stands (Runner.saveMirror), and the next
// pass reads from the mirror and its mark as the pass before left them.
// Both sides lose the save: what it would have kept that the provider no
// longer tells (events past Stripe's 30 days) is lost to --full too, and
// the findings say so alike. Their links are not compared; the next
// day's are.
func (w *twin) passesSaving(saved bool) (nightly *runner.Outcome, differ string) {
	links, pass := oldLinks, func(e *env, req runner.Request) *runner.Outcome { return e.pass(true, req) }
	if !saved {
		links, pass = noLinks, func(e *env, req runner.Request) *runner.Outcome {
			defer e.refuseMarks()()
			out := e.pass(true, req)
			if out.Sync.Saved || out.Sync.SaveErr == nil {
				e.tb.Fatalf("the mirror was saved through the trigger refusing its mark")
			}
			return out
		}
	}
	a := pass(w.a, runner.Request{})
	b := pass(w.b, runner.Request{Full: true})
	if diff := diffOutcomes(b, a); diff != "" {
		if debugTwin {
			for _, id := range b.Result.ObligationIDs {
				w.tb.Logf("whole obl %s", id)
			}
			for _, o := range b.Input.Objects {
				w.tb.Logf("whole obj %+v", o)
			}
			for _, id := range a.Result.ObligationIDs {
				w.tb.Logf("nightly obl %s", id)
			}
			for _, o := range a.Input.Objects {
				w.tb.Logf("nightly obj %s", o.ID)
			}
			w.tb.Logf("lookups whole %+v nightly %+v", b.Lookups, a.Lookups)
		}
		return a, "the nightly pass concluded otherwise than --full:\n" + diff
	}
	if sa, sb := w.a.stored(b.Covered.From, links), w.b.stored(b.Covered.From, links); !slices.Equal(sa, sb) {
		return a, fmt.Sprintf("stored state differs:\nnightly %v\n--full  %v", sa, sb)
	}
	return a, ""
}

// refuseMarks makes every save of e's mirror fail, until the returned
// func is called: a trigger refuses the match mark, and the save rolls
// back whole.
func (e *env) refuseMarks() (restore func()) {
	e.exec(`CREATE FUNCTION reconcile.refuse_mark() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$`)
	e.exec(`CREATE TRIGGER refuse_mark BEFORE INSERT OR UPDATE ON reconcile.match_marks FOR EACH ROW EXECUTE FUNCTION reconcile.refuse_mark()`)
	return func() {
		e.exec(`DROP TRIGGER refuse_mark ON reconcile.match_marks`)
		e.exec(`DROP FUNCTION reconcile.refuse_mark()`)
	}
}

// adHoc runs an ad hoc pass at the clock, as the on-call engineer runs
// one during an incident: a's as it comes (incrementally where it may),
// b's --full, over a window that ends between two hours before the last
// pass's clock (last) and the clock, or (a third of them, drawn from
// atClock) at the clock, and begins 72 hours before its end or only a
// few hours before it (half of them; a quarter of those at the clock, so
// that the nightly pass after one more often matches from its mark). It
// says whether a's matched incrementally, and how the two differ in what
// they concluded or stored ("" when they do not).
func (w *twin) adHoc(r, atClock *rand.Rand, last time.Time) (bool, string) {
	lo := last.Add(-2 * time.Hour)
	to := lo.Add(time.Duration(r.Int64N(int64(w.a.clock.Sub(lo))))).Truncate(time.Second)
	now := atClock.IntN(3) == 0
	if now {
		to = w.a.clock.Truncate(time.Second) // as the nightly's ends
	}
	from := to.Add(-72 * time.Hour)
	if r.IntN(2) == 0 && (!now || atClock.IntN(2) == 0) {
		from = to.Add(-time.Duration(1+r.IntN(6)) * time.Hour)
	}
	win := reconcile.Window{From: from, To: to}
	a := w.a.pass(true, runner.Request{Window: win})
	b := w.b.pass(true, runner.Request{Window: win, Full: true})
	inc := a.Sync.Match == runner.MatchIncremental
	if diff := diffOutcomes(b, a); diff != "" {
		return inc, fmt.Sprintf("window %s (%s match: %s) concluded otherwise than --full:\n%s", win, a.Sync.Match, a.Sync.MatchReason, diff)
	}
	// Its links of objects before the coverage are not compared: it
	// matches the records after its window only as context, and a --full
	// pass follows their names beyond the coverage (a retry, after the
	// window, of an obligation weeks old, which names a charge of then),
	// an incremental one does not. No pass lists such an object, and one
	// that retrieves it matches it again: the next nightly pass, whole
	// after such a window or not, leaves the same links on both sides,
	// and that comparison counts them.
	if sa, sb := w.a.stored(b.Covered.From, coveredLinks), w.b.stored(b.Covered.From, coveredLinks); !slices.Equal(sa, sb) {
		return inc, fmt.Sprintf("window %s (%s match: %s): stored state differs:\nnightly %v\n--full  %v", win, a.Sync.Match, a.Sync.MatchReason, sa, sb)
	}
	if !inc {
		w.tb.Logf("ad hoc window %s matched whole: %s", win, a.Sync.MatchReason)
	}
	return inc, ""
}

// runTwin runs one random history: a first pass, then days, each followed
// by a nightly pass of a and a --full pass of b; after each, both must
// have concluded and stored the same. It returns how many passes each
// side ran, and how many of a's matched incrementally: a nightly pass
// after an ad hoc one whose window ended before what it lists afresh
// matches whole by design, and is not counted.
func runTwin(tb testing.TB, seed uint64, days int, fail func(format string, args ...any)) (passes, incremental int) {
	tb.Helper()
	w := newTwin(tb, seed)
	// A third of the histories allow no clock skew, and end each pass's
	// window up to three minutes before its clock, where the day's
	// writes fall: from a generator of their own, so that the rest draw
	// what they drew before.
	if r := rand.New(rand.NewPCG(seed, 0x5ce)); r.IntN(3) == 0 {
		early := time.Duration(r.IntN(4)) * time.Minute
		for _, e := range []*env{w.a, w.b} {
			e.noSkew, e.early = true, early
		}
	}
	for range 10 + w.rng.IntN(15) {
		w.obligation(t0.Add(-time.Duration(w.rng.IntN(60*60)) * time.Minute))
	}
	for range w.rng.IntN(6) {
		w.payment(nil, false, t0.Add(-time.Duration(w.rng.IntN(60*60))*time.Minute))
	}
	// Weeks back, from a generator of their own: the rest of the history
	// draws the numbers it drew before (what it picks among the objects
	// may differ, as there are more to pick from).
	rest := w.rng
	w.rng = rand.New(rand.NewPCG(seed, 0x01d))
	for range w.rng.IntN(4) {
		w.oldPaid(t0.Add(-time.Duration(30*24*60+w.rng.IntN(10*24*60)) * time.Minute))
	}
	w.rng, w.oldRng = rest, w.rng
	w.refundRng = rand.New(rand.NewPCG(seed, 0x4ef))
	// A quarter of the days bring an ad hoc pass before the nightly one,
	// from a generator of their own (adHoc).
	adHocRng, adHocAt := rand.New(rand.NewPCG(seed, 0xad0c)), rand.New(rand.NewPCG(seed, 0xad0d))
	// A fifth of the days without an ad hoc pass, neither nightly pass
	// can save its mirror (passesSaving), again from a generator of
	// their own.
	saveRng := rand.New(rand.NewPCG(seed, 0x5a7e))
	// A third of the days edit what a record already there says (edit),
	// again from a generator of their own.
	editRng := rand.New(rand.NewPCG(seed, 0xed17))
	afterAdHoc := false
	for d := 0; d <= days; d++ {
		if d > 0 {
			last := w.a.clock
			afterAdHoc = false
			at := w.a.clock.Add(time.Duration(1+w.rng.IntN(20)) * time.Hour)
			w.day(at)
			if editRng.IntN(3) == 0 {
				w.edit(editRng, at)
			}
			if d == days-1 {
				// The nightly pass of the day it appears reads it; only
				// the last day's does not.
				w.oldRetry(at)
			}
			if d == days {
				// After the day's draws, so that they draw what they
				// drew before.
				w.oldShape(at)
			}
			w.oldRefund(at)
			w.a.clock, w.b.clock = at, at
			if adHocRng.IntN(4) == 0 {
				inc, differ := w.adHoc(adHocRng, adHocAt, last)
				if differ != "" {
					fail("seed %d day %d, ad hoc pass: %s", seed, d, differ)
					return passes, incremental
				}
				passes++
				if inc {
					incremental++
				}
				afterAdHoc = true
				// The nightly pass runs a few minutes after it.
				at = at.Add(time.Duration(1+adHocRng.IntN(10)) * time.Minute)
				w.a.clock, w.b.clock = at, at
			}
		}
		// Not after an ad hoc pass: each day brings one of the two.
		refused := saveRng.IntN(5) == 0
		saved := d == 0 || afterAdHoc || !refused
		if !saved {
			tb.Logf("day %d: neither side's mirror is saved", d)
		}
		a, differ := w.passesSaving(saved)
		byDesign := afterAdHoc && a.Sync.MatchReason == "the last pass's window ended before what this pass lists afresh"
		if !byDesign {
			passes++
		}
		if a.Sync.Match == runner.MatchIncremental {
			incremental++
		} else if d > 0 {
			tb.Logf("day %d matched whole: %s", d, a.Sync.MatchReason)
		}
		if differ != "" {
			fail("seed %d day %d (%s match: %s): %s", seed, d, a.Sync.Match, a.Sync.MatchReason, differ)
			return passes, incremental
		}
	}
	return passes, incremental
}

// diffOutcomes says how an incremental pass's conclusions differ from a
// whole match's: findings (with their fingerprints and content) and
// transitions.
func diffOutcomes(whole, got *runner.Outcome) string {
	var diff string
	// Every field: what a finding says (its detail, the money at risk, its
	// target) is finance's, and a nightly pass must say it as --full does,
	// not only find the same problem.
	fp := func(fs []reconcile.Finding) []string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%+v", f))
		}
		return out
	}
	if a, b := fp(whole.Result.Findings), fp(got.Result.Findings); !slices.Equal(a, b) {
		diff += fmt.Sprintf("findings: --full %v\n          nightly %v\n", a, b)
	}
	tr := func(ts []reconcile.Transition) []string {
		var out []string
		for _, t := range ts {
			out = append(out, fmt.Sprintf("%s %s→%s (%q, lease %s) %s %s", t.ObligationID, t.From, t.To, t.FromRaw,
				t.FromLeaseExpiresAt.UTC().Format(time.RFC3339Nano), t.ProviderID, t.Money))
		}
		return out
	}
	if a, b := tr(whole.Transitions), tr(got.Transitions); !slices.Equal(a, b) {
		diff += fmt.Sprintf("transitions: --full %v\n             nightly %v\n", a, b)
	}
	return diff
}

// For random histories and days of changes (new payments, retries,
// twins, events changing a status, obligations moved, added naming what
// exists, and deleted, records edited: a charge's metadata, an intent's
// status, an obligation's amount, a refund's target, a late answer's
// provider_id, a lease), a reconciler whose nightly passes (and the ad hoc
// passes of some days) match incrementally concludes and stores, pass
// after pass, exactly what one matching everything on every pass does
// (docs/design.md, "Incremental matching").
func TestIncrementalEqualsWhole(t *testing.T) {
	t.Parallel()
	total, inc := 0, 0
	for seed := *incrementalFirst; seed < *incrementalFirst+uint64(*incrementalSeeds); seed++ {
		// A subtest each, so that each history's databases and servers go
		// when it ends.
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			passes, incremental := runTwin(t, seed, *incrementalDays, t.Errorf)
			total, inc = total+passes, inc+incremental
		})
	}
	t.Logf("%d seeds, %d passes counted on each side, %d of a's matched incrementally", *incrementalSeeds, total, inc)
	if inc*2 < total {
		t.Errorf("only %d of %d of a's passes matched incrementally: the comparison proves little", inc, total)
	}
}

// Each way of leaving something out of the dirty set is caught by the
// comparison TestIncrementalEqualsWhole makes, in one of the histories it
// runs: the property test, as it runs, can fail.
func TestIncrementalCatchesABrokenDirtySet(t *testing.T) {
	dirty := func(f func(q *store.Related, obs *[]reconcile.Obligation)) func() func() {
		return func() func() { return runner.SetDirtyFault(f) }
	}
	faults := map[string]func() (restore func()){
		// What the last pass linked to an obligation that changed.
		"no stale links": dirty(func(q *store.Related, _ *[]reconcile.Obligation) {
			if q != nil {
				q.LinkedTo = nil
			}
		}),
		// The objects naming a changed obligation in their metadata.
		"no metadata": dirty(func(q *store.Related, _ *[]reconcile.Obligation) {
			if q != nil {
				q.Metadata = nil
			}
		}),
		// Obligations changed since the last pass, but for the first one
		// of each round.
		"obligations dropped": dirty(func(_ *store.Related, obs *[]reconcile.Obligation) {
			if obs != nil && len(*obs) > 1 {
				*obs = (*obs)[:1]
			}
		}),
		// What a round retrieved by id, and the obligations naming it,
		// not closed over.
		"retrieved not closed over": runner.SetRetrievedFault,
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			restore := fault()
			defer restore()
			// TestIncrementalEqualsWhole's histories, three side by side
			// (each mostly waits on its databases and servers), until one
			// catches the fault: up to four times as many, as the shape
			// a fault needs may come rarely.
			var caught atomic.Bool
			var wg sync.WaitGroup
			sem := make(chan struct{}, 3)
			for seed := range uint64(4 * *incrementalSeeds) {
				sem <- struct{}{}
				if caught.Load() {
					break
				}
				wg.Go(func() {
					defer func() { <-sem }()
					t.Run(fmt.Sprint(seed), func(t *testing.T) {
						runTwin(t, seed, 5, func(string, ...any) {
							if !caught.Swap(true) {
								t.Logf("caught at seed %d", seed)
							}
						})
					})
				})
			}
			wg.Wait()
			if !caught.Load() {
				t.Errorf("%d histories of TestIncrementalEqualsWhole, with the dirty set broken (%s), concluded as --full: the property test cannot fail",
					4**incrementalSeeds, name)
			}
		})
	}
}

// A row deleted, or written with old times, since the last pass leaves
// no updated_at to read: the census, read beside the nightly pass's scan
// of what changed, tells of it, and the pass matches whole.
func TestIncrementalSeesRowsNoUpdateTellsOf(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	obl := func(n int, at time.Time) reconcile.Obligation {
		return reconcile.Obligation{ID: "charge:c" + strconv.Itoa(n), Kind: reconcile.Charge, IdempotencyKey: "key-c" + strconv.Itoa(n),
			Money: reconcile.Money{Amount: 1000 + int64(n), Currency: "usd"}, State: reconcile.FailedState, CreatedAt: reconcile.StampOf(at), UpdatedAt: reconcile.StampOf(at)}
	}
	pgtest.InsertObligations(t, e.pool, obl(1, t0.Add(-2*time.Hour)), obl(2, t0.Add(-time.Hour)))
	// A charge still pending, whose event tells of it on a later day.
	e.add("key-p9", reconcile.ProviderObject{ID: "ch_p9", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 900, Currency: "usd"},
		Status: reconcile.Pending, RawStatus: "pending", Created: reconcile.StampOf(t0.Add(-90 * time.Minute))})
	e.pass(true, runner.Request{})
	for _, step := range []struct {
		name, why string
		change    func()
	}{
		{"nothing changed", "", func() {}},
		{"a row deleted", "were 2 then and are 1 now", func() {
			e.exec(`DELETE FROM obligations WHERE id = 'charge:c1'`)
			e.update("ch_p9", e.clock.Add(30*time.Minute), func(o *reconcile.ProviderObject) {
				o.Status, o.RawStatus = reconcile.Succeeded, "succeeded"
			})
		}},
		{"a row written with old times", "were 1 then and are 2 now", func() {
			pgtest.InsertObligations(t, e.pool, obl(3, t0.Add(-3*time.Hour)))
		}},
	} {
		step.change()
		e.clock = e.clock.Add(time.Hour)
		out := e.pass(true, runner.Request{})
		switch {
		case step.why == "" && out.Sync.Match != runner.MatchIncremental:
			t.Errorf("%s: matched %s (%s), want incrementally", step.name, out.Sync.Match, out.Sync.MatchReason)
		case step.why != "" && (out.Sync.Match != runner.MatchFull || !strings.Contains(out.Sync.MatchReason, step.why)):
			t.Errorf("%s: matched %s (%q), want whole because the obligations created before the last pass %s", step.name,
				out.Sync.Match, out.Sync.MatchReason, step.why)
		}
		// The charge its event told of counts once, though the pass
		// began to match incrementally before the census turned it.
		if want := strings.Count(step.name, "deleted"); out.Sync.Changed != want {
			t.Errorf("%s: %d objects changed, want %d", step.name, out.Sync.Changed, want)
		}
	}
}

// An object a nightly pass reaches only by retrieving what an obligation
// it decides on names (here the charge an open refund targets, which the
// last pass linked to another obligation) is linked as a whole read
// links it: the coverage holds it, so a whole read lists it with its key
// evidence and reads every obligation naming it or its keys, and the
// nightly pass reads them too, whether the other obligation names the
// charge by its provider_id or only its idempotency key does.
func TestIncrementalLinksWhatItRetrieves(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		byKey   bool          // charge:a names nothing; only the key its request sent links it
		created time.Duration // charge:a and ch_a, before t0
	}{
		{name: "provider_id", created: 10 * time.Hour},
		{name: "key", byKey: true, created: 10 * time.Hour},
		// Outside the coverage a whole read retrieves the charge and reads
		// no obligation it does not decide on that nothing else names:
		// nor does the nightly pass.
		{name: "outside", created: 40 * 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newTwin(t, 0)
			paid := propPaid("charge:a", t0.Add(-c.created))
			paid.ProviderID = "ch_a"
			key := ""
			if c.byKey {
				paid.ProviderID, key = "", paid.IdempotencyKey
			}
			refund := propUnknown("refund:r", t0.Add(-5*time.Hour))
			refund.Kind, refund.TargetID = reconcile.Refund, "ch_a"
			w.object(propCharge("ch_a", t0.Add(-c.created+5*time.Minute)), key)
			w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, paid, refund) })
			w.retrievalDays(t, "ch_a", nil)
		})
	}
}

// A charge outside the coverage that an obligation a nightly pass decides
// on names is closed over as what the pass read first: a whole read
// holds what the coverage holds of it and reads what that names.
func TestIncrementalClosesOverWhatItRetrievesOutside(t *testing.T) {
	t.Parallel()
	old := t0.Add(-40 * 24 * time.Hour)
	for _, c := range []struct {
		name string
		// setup writes the history, and nightly (when set) what happens
		// before day 1; lookup is the charge the nightly pass must
		// retrieve, which day 1's new obligation charge:o names.
		setup   func(t *testing.T, w *twin)
		nightly func(t *testing.T, w *twin, at time.Time)
		lookup  string
	}{{
		// Key evidence told inside the coverage (a request's key, hours
		// ago) links the old charge to charge:x.
		name:   "key evidence",
		lookup: "ch_a",
		setup: func(t *testing.T, w *twin) {
			w.object(propCharge("ch_a", old.Add(5*time.Minute)), "")
			w.both(func(e *env) {
				if _, err := e.srv.AddEvent(stripesim.Event{Type: "charge.succeeded", ObjectID: "ch_a", Created: t0.Add(-3 * time.Hour),
					Request: &stripesim.Request{ID: "req_x", IdempotencyKey: "key-x"}}); err != nil {
					t.Fatal(err)
				}
				pgtest.InsertObligations(t, e.pool, propPaid("charge:x", old))
			})
		},
	}, {
		// The same evidence told by the nightly pass's own events, of a
		// charge whose metadata carries charge:x's key too: the mirror
		// holds none of it yet.
		name:   "key evidence told tonight",
		lookup: "ch_a",
		setup: func(t *testing.T, w *twin) {
			paid := propCharge("ch_a", old.Add(5*time.Minute))
			paid.Metadata = map[string]string{"idempotency_key": "key-x"}
			w.object(paid, "")
			w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, propPaid("charge:x", old)) })
		},
		nightly: func(t *testing.T, w *twin, at time.Time) {
			w.both(func(e *env) {
				if _, err := e.srv.AddEvent(stripesim.Event{Type: "charge.succeeded", ObjectID: "ch_a", Created: at.Add(-3 * time.Hour),
					Request: &stripesim.Request{ID: "req_x", IdempotencyKey: "key-x"}}); err != nil {
					t.Fatal(err)
				}
			})
		},
	}, {
		// A second charge of the old charge's intent lies inside the
		// coverage, paying charge:z: one movement reaching two
		// obligations, a conflict.
		name:   "movement",
		lookup: "ch_old",
		setup: func(t *testing.T, w *twin) {
			failed := propCharge("ch_old", old)
			failed.Status, failed.RawStatus, failed.PaymentIntent = reconcile.Failed, "failed", "pi_old"
			w.object(failed, "")
			again := propCharge("ch_new", t0.Add(-10*time.Hour))
			again.PaymentIntent = "pi_old"
			w.object(again, "")
			z := propPaid("charge:z", t0.Add(-10*time.Hour))
			z.ProviderID = "ch_new"
			w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, z) })
		},
	}, {
		// charge:y, old and paid, names the old charge too; no rule
		// decides on it, but a failed charge inside the coverage names it
		// in its metadata, so a whole read reads it and finds the charge
		// claimed by two obligations.
		name:   "named by the coverage",
		lookup: "ch_a",
		setup:  namedByCoverage,
	}, {
		// The same, but tonight the failed charge's metadata is changed
		// and names charge:y no more: the mirror's copy, saved by the last
		// pass, still does. A whole read does not read charge:y, and
		// charge:o alone claims the old charge.
		name:   "named by the coverage until tonight",
		lookup: "ch_a",
		setup:  namedByCoverage,
		nightly: func(t *testing.T, w *twin, at time.Time) {
			w.both(func(e *env) {
				e.update("ch_l", at.Add(-time.Hour), func(o *reconcile.ProviderObject) { o.Metadata = map[string]string{"note": "retry"} })
			})
		},
	}, {
		// charge:y, paid without evidence on day 0, has left the window
		// with its finding open, which a nightly pass reads it for; only
		// the old charge's metadata names it. A whole read does not read
		// it, and charge:o alone claims the old charge.
		name:   "open finding named only outside",
		lookup: "ch_a",
		setup: func(t *testing.T, w *twin) {
			a := propCharge("ch_a", old.Add(5*time.Minute))
			a.Metadata = map[string]string{"obligation_id": "charge:y"}
			w.object(a, "")
			y := propPaid("charge:y", t0.Add(-10*time.Hour))
			y.ProviderID = "ch_gone"
			w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, y) })
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newTwin(t, 0)
			c.setup(t, w)
			w.retrievalDays(t, c.lookup, func(at time.Time) {
				if c.nightly != nil {
					c.nightly(t, w, at)
				}
				o := propUnknown("charge:o", at.Add(-10*time.Hour))
				o.ProviderID = c.lookup
				w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, o) })
			})
		})
	}
}

// A record of the window that no change brings back to a nightly pass may
// name an old obligation, settled weeks before the record was created: a
// whole read decides on it and reads the provider back to it, and so
// does the nightly pass, from how far back the mirror says the record
// names. A new payment without evidence on day 1 quotes that coverage.
// Where the mirror holds the records and key events of that stretch (the
// first pass read them back, within Stripe's 30 days of events), the
// nightly pass reads them from it and matches incrementally; older, it
// matches whole, as a whole read joins the mirror's keys to the events.
func TestIncrementalReadsBackForWhatUnreadRecordsName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		names func(q *reconcile.Obligation, s *reconcile.ProviderObject) (key string)
		age   time.Duration
	}{
		{"provider_id", func(q *reconcile.Obligation, s *reconcile.ProviderObject) string { q.ProviderID = s.ID; return "" }, 40 * 24 * time.Hour},
		{"metadata", func(q *reconcile.Obligation, s *reconcile.ProviderObject) string {
			s.Metadata = map[string]string{"obligation_id": q.ID}
			return ""
		}, 40 * 24 * time.Hour},
		{"key", func(q *reconcile.Obligation, s *reconcile.ProviderObject) string { return q.IdempotencyKey }, 40 * 24 * time.Hour},
		{"metadata within the events", func(q *reconcile.Obligation, s *reconcile.ProviderObject) string {
			s.Metadata = map[string]string{"obligation_id": q.ID}
			return ""
		}, 10 * 24 * time.Hour},
		{"key within the events", func(q *reconcile.Obligation, s *reconcile.ProviderObject) string { return q.IdempotencyKey },
			10 * 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newTwin(t, 0)
			q := propPaid("charge:q", t0.Add(-c.age))
			s := propCharge("ch_s", t0.Add(-time.Hour))
			w.object(s, c.names(&q, &s))
			w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, q) })
			for d, at := range []time.Time{t0, t0.Add(60 * time.Hour)} {
				if d == 1 {
					p := propPaid("charge:p", at.Add(-10*time.Hour))
					p.Money.Amount = 1000
					w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, p) })
				}
				w.a.clock, w.b.clock = at, at
				a, differ := w.passes()
				if differ != "" {
					t.Errorf("day %d: %s", d, differ)
				}
				if d == 0 && !a.Covered.From.Before(t0.Add(-c.age)) {
					t.Errorf("day 0 covered from %s: the first pass should read back to charge:q", a.Covered.From)
				}
				switch fromMirror := c.age < sources.EventRetention; {
				case d == 1 && !fromMirror && a.Sync.MatchReason != "an obligation to decide on began before the coverage":
					t.Errorf("day 1 matched %s (%q): the nightly pass should read back to charge:q", a.Sync.Match, a.Sync.MatchReason)
				case d == 1 && fromMirror && (a.Sync.Match != runner.MatchIncremental || !a.Covered.From.Before(t0.Add(-c.age))):
					t.Errorf("day 1 matched %s (%q), covered %+v: the nightly pass should read back to charge:q from the mirror, incrementally",
						a.Sync.Match, a.Sync.MatchReason, a.Covered)
				}
			}
		})
	}
}

// A record may name an obligation without linking to it: a refund
// obligation names the charge it refunds (target_id), and a charge may
// carry a refund obligation's id in its metadata or have been created
// under its key (a workflow's mistake), but a refund obligation takes
// only refunds. Here the charge links to the
// obligation it paid, and the paid refund obligation it names has no
// evidence. Once the refund's row has left the window and the charge has
// not, a whole read still decides on the refund, as the charge names it;
// so does a nightly pass, which reads the refund for its open finding
// and asks the mirror for every record naming it (seedOf), as it asks
// for what linked to it.
func TestIncrementalHoldsWhatNamesAnOpenFinding(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		names func(w *twin, r *reconcile.Obligation, ch *reconcile.ProviderObject)
	}{
		{"target", func(_ *twin, r *reconcile.Obligation, ch *reconcile.ProviderObject) { r.TargetID = ch.ID }},
		{"metadata", func(_ *twin, r *reconcile.Obligation, ch *reconcile.ProviderObject) {
			ch.Metadata = map[string]string{"obligation_id": r.ID}
		}},
		{"key", func(w *twin, r *reconcile.Obligation, ch *reconcile.ProviderObject) {
			w.both(func(e *env) {
				if _, err := e.srv.AddEvent(stripesim.Event{Type: "charge.succeeded", ObjectID: ch.ID, Created: ch.Created.Time(),
					Request: &stripesim.Request{ID: "req_r", IdempotencyKey: r.IdempotencyKey}}); err != nil {
					w.tb.Fatal(err)
				}
			})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newTwin(t, 0)
			ch := propCharge("ch_t", t0.Add(-time.Hour))
			p := propPaid("charge:c", t0.Add(-time.Hour))
			p.ProviderID = ch.ID
			// Paid, and nothing the provider holds belongs to it: its
			// finding stays open.
			r := propPaid("refund:r", t0.Add(-10*time.Hour))
			r.Kind = reconcile.Refund
			if c.name != "key" {
				c.names(w, &r, &ch)
			}
			w.object(ch, "")
			if c.name == "key" {
				c.names(w, &r, &ch)
			}
			w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, p, r) })
			for d, at := range []time.Time{t0, t0.Add(66 * time.Hour)} {
				w.a.clock, w.b.clock = at, at
				a, differ := w.passes()
				if differ != "" {
					t.Fatalf("day %d: %s", d, differ)
				}
				if d == 0 {
					continue
				}
				if a.Sync.Match != runner.MatchIncremental {
					t.Errorf("day 1 matched %s (%q), not incrementally", a.Sync.Match, a.Sync.MatchReason)
				}
				if !slices.ContainsFunc(a.Result.Findings, func(f reconcile.Finding) bool {
					return f.Kind == reconcile.PaidWithoutEvidence && f.ObligationID == r.ID
				}) {
					t.Errorf("day 1 found %+v: no payment without evidence of %s", a.Result.Findings, r.ID)
				}
			}
		})
	}
}

// A pass that marks an obligation PAID and then fails to save its mirror
// left the link it made unsaved: the transition is the reconciler's own
// write, but not one whose conclusions the mark holds. The next nightly
// pass, which reads changes since the last saved mark, must read the row
// again and store the link, as --full does.
func TestIncrementalRereadsWhatAnUnsavedPassWrote(t *testing.T) {
	t.Parallel()
	w := newTwin(t, 0)
	// Nothing links ch_x to charge:u until the late answer names it.
	w.object(propCharge("ch_x", t0.Add(-time.Hour)), "")
	u := propUnknown("charge:u", t0.Add(-2*time.Hour))
	w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, u) })
	w.a.clock, w.b.clock = t0, t0
	if _, differ := w.passes(); differ != "" {
		t.Fatalf("day 0: %s", differ)
	}
	w.both(func(e *env) {
		e.exec(`UPDATE obligations SET provider_id = 'ch_x', updated_at = $2 WHERE id = $1`, u.ID, t0.Add(23*time.Hour))
	})
	w.a.clock, w.b.clock = t0.Add(24*time.Hour), t0.Add(24*time.Hour)
	if _, differ := w.passesSaving(false); differ != "" {
		t.Fatalf("day 1: %s", differ)
	}
	var state string
	if err := w.a.pool.QueryRow(context.Background(), `SELECT state FROM obligations WHERE id = $1`, u.ID).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != string(reconcile.Paid) {
		t.Fatalf("day 1 left %s %s, want it marked PAID: the test no longer tests an unsaved pass's write", u.ID, state)
	}
	w.a.clock, w.b.clock = t0.Add(48*time.Hour), t0.Add(48*time.Hour)
	a, differ := w.passes()
	if a.Sync.Match != runner.MatchIncremental {
		t.Errorf("day 2 matched %s (%q), not incrementally", a.Sync.Match, a.Sync.MatchReason)
	}
	if differ != "" {
		t.Errorf("day 2: %s", differ)
	}
}

// namedByCoverage is the history of the "named by the coverage" cases of
// TestIncrementalClosesOverWhatItRetrievesOutside: the old paid
// charge:y names the old charge ch_a, and the failed charge ch_l, inside
// the coverage, names charge:y in its metadata.
func namedByCoverage(t *testing.T, w *twin) {
	old := t0.Add(-40 * 24 * time.Hour)
	w.object(propCharge("ch_a", old.Add(5*time.Minute)), "")
	named := propCharge("ch_l", t0.Add(-10*time.Hour))
	named.Status, named.RawStatus, named.Customer = reconcile.Failed, "failed", "cus_b"
	named.Metadata = map[string]string{"obligation_id": "charge:y"}
	w.object(named, "")
	y := propPaid("charge:y", old)
	y.ProviderID = "ch_a"
	w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, y) })
}

// retrievalDays runs a first pass at t0 and, after nightly (when set),
// a nightly pass 70 hours later. It fails where the nightly pass did not
// match incrementally or did not look lookup up (the test would no longer
// test a retrieval), or where either pass concluded or stored otherwise
// than --full.
func (w *twin) retrievalDays(t *testing.T, lookup string, nightly func(at time.Time)) {
	t.Helper()
	for d, at := range []time.Time{t0, t0.Add(70 * time.Hour)} {
		if d > 0 && nightly != nil {
			nightly(at)
		}
		w.a.clock, w.b.clock = at, at
		a, differ := w.passes()
		if d > 0 && a.Sync.Match != runner.MatchIncremental {
			t.Fatalf("day %d matched %s (%s), want incrementally", d, a.Sync.Match, a.Sync.MatchReason)
		}
		if d > 0 && !slices.ContainsFunc(a.Lookups, func(l reconcile.Lookup) bool { return l.ID == lookup }) {
			t.Fatalf("day %d: the nightly pass did not look %s up (lookups %+v): the test no longer tests a retrieval", d, lookup, a.Lookups)
		}
		if differ != "" {
			t.Errorf("day %d: %s", d, differ)
		}
	}
}

// propCharge is a succeeded charge of USD 25.00 to cus_a.
func propCharge(id string, created time.Time) reconcile.ProviderObject {
	return reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: reconcile.Money{Amount: 2500, Currency: "usd"},
		Status: reconcile.Succeeded, RawStatus: "succeeded", Customer: "cus_a", Created: reconcile.StampOf(created)}
}

// propPaid is a charge obligation of USD 25.00, key key-<id's tail>,
// created and paid at created, naming no provider object.
func propPaid(id string, created time.Time) reconcile.Obligation {
	o := propUnknown(id, created)
	o.State, o.PaidAt = reconcile.Paid, reconcile.StampOf(created)
	return o
}

// propUnknown is propPaid's obligation in CONFIRMATION_UNKNOWN.
func propUnknown(id string, created time.Time) reconcile.Obligation {
	return reconcile.Obligation{ID: id, Kind: reconcile.Charge, IdempotencyKey: "key-" + id[strings.IndexByte(id, ':')+1:],
		Money: reconcile.Money{Amount: 2500, Currency: "usd"}, State: reconcile.ConfirmationUnknown,
		CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)}
}

// A window that ends before the last pass's clock may leave out of scope
// an obligation written between the two that a record of it names, which
// no mark tells of: the pass matches whole. One that ends at its own
// clock matches incrementally.
func TestIncrementalWholeForAWindowEndingEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pgtest.InsertObligations(t, e.pool, propPaid("charge:a", t0.Add(-2*time.Hour)))
	e.pass(true, runner.Request{})
	e.clock = e.clock.Add(time.Hour)
	if now := e.pass(true, runner.Request{}); now.Sync.Match != runner.MatchIncremental {
		t.Errorf("a window ending at the clock: matched %s (%q), want incrementally", now.Sync.Match, now.Sync.MatchReason)
	}
	e.clock = e.clock.Add(time.Hour)
	early := e.pass(true, runner.Request{Window: reconcile.Window{From: t0.Add(-71 * time.Hour), To: t0.Add(30 * time.Minute)}})
	if early.Sync.Match != runner.MatchFull || early.Sync.MatchReason != "the window ends before the last pass's clock" {
		t.Errorf("a window ending before the last pass: matched %s (%q)", early.Sync.Match, early.Sync.MatchReason)
	}
	// The early pass matched the records after its window only as
	// context, and the next pass lists afresh only the last ten minutes.
	e.clock = e.clock.Add(time.Hour)
	if next := e.pass(true, runner.Request{}); next.Sync.Match != runner.MatchFull ||
		next.Sync.MatchReason != "the last pass's window ended before what this pass lists afresh" {
		t.Errorf("after a pass whose window ended early: matched %s (%q)", next.Sync.Match, next.Sync.MatchReason)
	}
}

// With no clock skew allowed, a nightly pass still matches incrementally
// after one whose window ended at the whole second its clock was in, and
// reads what was written between the two, which no scope of that pass
// held: here a row created PAID without evidence.
func TestIncrementalUnderNoClockSkew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.noSkew, e.clock = true, t0.Add(400*time.Millisecond)
	pgtest.InsertObligations(t, e.pool, propPaid("charge:a", t0.Add(-2*time.Hour)),
		propPaid("charge:gap", t0.Add(200*time.Millisecond)))
	if first := e.pass(true, runner.Request{}); slices.Contains(first.Result.ObligationIDs, "charge:gap") {
		t.Fatalf("the first pass read charge:gap, created after its window")
	}
	e.clock = e.clock.Add(24 * time.Hour)
	next := e.pass(true, runner.Request{})
	if next.Sync.Match != runner.MatchIncremental {
		t.Errorf("matched %s (%q), want incrementally", next.Sync.Match, next.Sync.MatchReason)
	}
	if !slices.ContainsFunc(next.Result.Findings, func(f reconcile.Finding) bool { return f.ObligationID == "charge:gap" }) {
		t.Errorf("no finding on charge:gap, written after the last pass's window and before its clock: %+v", next.Result.Findings)
	}
}

// A pass whose mirror is not saved warns so, and says key events are
// lost only where it read them from before the mirror's keys: a first
// pass does, a nightly one over the mirror does not.
func TestWarnsOfAMirrorNotSaved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pgtest.InsertObligations(t, e.pool, propPaid("charge:a", t0.Add(-2*time.Hour)))
	refused := func() string {
		t.Helper()
		defer e.refuseMarks()()
		var logs bytes.Buffer
		r := e.runner(true)
		r.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		to := e.clock.Truncate(time.Second)
		out, err := r.Run(context.Background(), runner.Request{Window: reconcile.Window{From: to.Add(-72 * time.Hour), To: to}, Trigger: reconcile.TriggerManual})
		if err != nil {
			t.Fatal(err)
		}
		if out.Sync.Saved {
			t.Fatal("the mirror was saved through the trigger refusing its mark")
		}
		return logs.String()
	}
	const lost = "are lost where Stripe drops them first"
	if got := refused(); !strings.Contains(got, "the provider mirror was not saved") || !strings.Contains(got, lost) {
		t.Errorf("a first pass not saved warned %q, want the key events it read said lost", got)
	}
	e.pass(true, runner.Request{}) // saved
	e.clock = e.clock.Add(24 * time.Hour)
	if got := refused(); !strings.Contains(got, "the provider mirror was not saved: the next pass reads more") || strings.Contains(got, lost) {
		t.Errorf("a nightly pass over the mirror not saved warned %q, want no key events said lost", got)
	}
}

// A pass that retrieves by id a charge its coverage does not hold, for an
// obligation naming it, settles nothing of the obligation the charge
// belongs to, out of the pass's scope: its open duplicate finding stays
// open.
//
//   - target: a refund obligation names the charge as its target, and
//     the charge does not link to it. The pass decides nothing of the
//     charge, and the mirror keeps the charge's link to its owner. A
//     whole pass resolved the duplicate, and stored the charge linked to
//     nothing, which the next nightly pass would have reached
//     obligations by.
//   - claimed: a new obligation names the charge as its provider_id
//     (a conflict with the owner its metadata names, which the pass
//     reads only as context). The charge is settled, but a finding
//     about an obligation is settled only by deciding on that
//     obligation: the duplicate, not found again since nothing is
//     decided of context, was once resolved because the charge was
//     settled.
func TestRetrievedTargetSettlesNothingOfItsOwner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		names func(o *reconcile.Obligation)
		link  bool // the mirror keeps ch_d1's link to charge:d
	}{
		{"target", func(o *reconcile.Obligation) { o.Kind, o.TargetID = reconcile.Refund, "ch_d1"; o.ID = "refund:r" }, true},
		{"claimed", func(o *reconcile.Obligation) { o.ProviderID = "ch_d1" }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			retrievedSettlesNothingOfItsOwner(t, c.names, c.link)
		})
	}
}

func retrievedSettlesNothingOfItsOwner(t *testing.T, names func(o *reconcile.Obligation), link bool) {
	e := newEnv(t)
	d := propPaid("charge:d", t0.Add(-10*time.Hour))
	for _, id := range []string{"ch_d1", "ch_d2"} {
		ch := propCharge(id, t0.Add(-9*time.Hour))
		ch.Metadata = map[string]string{"obligation_id": d.ID}
		e.add("", ch)
	}
	pgtest.InsertObligations(t, e.pool, d)
	open := func(when string) {
		t.Helper()
		var status string
		if err := e.pool.QueryRow(context.Background(), `SELECT status FROM reconcile.findings
			WHERE obligation_id = $1 AND kind = 'duplicate'`, d.ID).Scan(&status); err != nil || status != "open" {
			t.Fatalf("%s: charge:d's duplicate is %q (%v), want open", when, status, err)
		}
		if !link && when != "the first pass" {
			return
		}
		var to *string
		if err := e.pool.QueryRow(context.Background(), `SELECT linked_to FROM reconcile.provider_objects WHERE id = 'ch_d1'`).
			Scan(&to); err != nil || to == nil || *to != d.ID {
			t.Fatalf("%s: the mirror links ch_d1 to %v (%v), want %s", when, to, err, d.ID)
		}
	}
	e.pass(true, runner.Request{})
	open("the first pass")
	// Days later, an obligation naming ch_d1 is approved: charge:d has
	// left the window and ch_d1 the coverage.
	e.clock = t0.Add(100 * time.Hour)
	r := propUnknown("charge:r", e.clock.Add(-time.Hour))
	r.State = reconcile.Approved
	names(&r)
	pgtest.InsertObligations(t, e.pool, r)
	out := e.pass(true, runner.Request{Full: true})
	if !slices.ContainsFunc(out.Lookups, func(l reconcile.Lookup) bool { return l.ID == "ch_d1" }) {
		t.Fatalf("the pass did not retrieve ch_d1 (lookups %+v): the test proves nothing", out.Lookups)
	}
	open("a whole pass that retrieved ch_d1")
}

// A charge retrieved by id that links to an obligation the pass decides on
// is settled: its orphan finding of an earlier pass, which claimed nothing
// then, is resolved now that an obligation claims it.
func TestRetrievedAndClaimedSettlesItsOrphan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.add("", propCharge("ch_o", t0.Add(-9*time.Hour)))
	status := func() string {
		t.Helper()
		var s string
		if err := e.pool.QueryRow(context.Background(), `SELECT status FROM reconcile.findings WHERE kind = 'orphan'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	e.pass(true, runner.Request{})
	if s := status(); s != "open" {
		t.Fatalf("after the first pass ch_o's orphan is %s, want open", s)
	}
	// Days later the workflow records ch_o as the answer of an obligation
	// created now.
	e.clock = t0.Add(100 * time.Hour)
	c := propUnknown("charge:c", e.clock.Add(-time.Hour))
	c.ProviderID = "ch_o"
	pgtest.InsertObligations(t, e.pool, c)
	out := e.pass(true, runner.Request{Full: true})
	if !slices.ContainsFunc(out.Lookups, func(l reconcile.Lookup) bool { return l.ID == "ch_o" }) {
		t.Fatalf("the pass did not retrieve ch_o (lookups %+v): the test proves nothing", out.Lookups)
	}
	if s := status(); s != "resolved" {
		t.Errorf("after a pass that retrieved ch_o for charge:c, ch_o's orphan is %s, want resolved", s)
	}
}

// A charge two obligations claim is a conflict of each. Days later a
// third, unknown outcome names it as its provider_id, and a pass
// retrieves the charge for the third alone, the first two out of its
// scope. It reads them too, as context, to link the charge: the charge
// is the third's only in a history without the first two, so the third
// is not marked PAID on it, and its conflict is found, as a pass over the
// whole history finds it. A pass that read only what it decided on
// marked the third PAID. The first two's conflicts, which the pass does
// not find again (nothing is decided of context), stay open: a finding
// about an obligation is settled by that obligation alone. The nightly
// pass concludes and stores what --full does.
func TestRetrievedConflictIsSeen(t *testing.T) {
	t.Parallel()
	w := newTwin(t, 0)
	ch := propCharge("ch_c", t0.Add(-60*time.Hour))
	ch.Metadata = map[string]string{"obligation_id": "charge:d"}
	w.object(ch, "")
	d := propPaid("charge:d", t0.Add(-61*time.Hour))
	x := propPaid("charge:x", t0.Add(-61*time.Hour))
	x.ProviderID = ch.ID
	w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, d, x) })
	conflicts := func(e *env) []string {
		t.Helper()
		rows, err := e.pool.Query(context.Background(), `SELECT obligation_id || ' ' || status FROM reconcile.findings
			WHERE kind = 'conflicting_link' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	w.a.clock, w.b.clock = t0, t0
	if _, differ := w.passes(); differ != "" {
		t.Fatalf("day 0: %s", differ)
	}
	if got, want := conflicts(w.b), []string{"charge:d open", "charge:x open"}; !slices.Equal(got, want) {
		t.Fatalf("the first pass left the conflicts %q, want %q", got, want)
	}
	a := w.lateAnswer(t, t0.Add(70*time.Hour), ch.ID)
	if a.Sync.Match != runner.MatchIncremental {
		t.Errorf("day 1 matched %s (%q), not incrementally", a.Sync.Match, a.Sync.MatchReason)
	}
	if len(a.Result.Transitions) > 0 {
		t.Errorf("the pass marked %+v on a charge two others claim", a.Result.Transitions)
	}
	if got, want := conflicts(w.b), []string{"charge:d open", "charge:r open", "charge:x open"}; !slices.Equal(got, want) {
		t.Errorf("after a pass that retrieved ch_c for charge:r, the conflicts are %q, want %q", got, want)
	}
}

// dayZero records obs on both sides and runs both sides' first passes at
// t0, which must agree.
func (w *twin) dayZero(t *testing.T, obs ...reconcile.Obligation) {
	t.Helper()
	w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, obs...) })
	w.a.clock, w.b.clock = t0, t0
	if _, differ := w.passes(); differ != "" {
		t.Fatalf("day 0: %s", differ)
	}
}

// dayOne runs both sides' passes at at (they must agree, the nightly one
// matching incrementally) and returns the nightly one's outcome.
func (w *twin) dayOne(t *testing.T, at time.Time) *runner.Outcome {
	t.Helper()
	w.a.clock, w.b.clock = at, at
	a, differ := w.passes()
	if differ != "" {
		t.Errorf("day 1: %s", differ)
	}
	if a.Sync.Match != runner.MatchIncremental {
		t.Errorf("day 1 matched %s (%q), not incrementally: the test proves nothing", a.Sync.Match, a.Sync.MatchReason)
	}
	return a
}

// lateAnswer records, an hour before at, the unknown outcome charge:r
// whose late answer names the old record id, outside every listing, and
// runs both sides' passes at at (they must agree): the nightly one's
// outcome, which retrieved id.
func (w *twin) lateAnswer(t *testing.T, at time.Time, id string) *runner.Outcome {
	t.Helper()
	r := propUnknown("charge:r", at.Add(-time.Hour))
	r.ProviderID = id
	w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, r) })
	w.a.clock, w.b.clock = at, at
	a, differ := w.passes()
	if differ != "" {
		t.Errorf("day 1: %s", differ)
	}
	if !slices.ContainsFunc(a.Lookups, func(l reconcile.Lookup) bool { return l.ID == id }) {
		t.Fatalf("the pass did not retrieve %s (lookups %+v): the test proves nothing", id, a.Lookups)
	}
	return a
}

// What a pass concludes of an obligation whose record it could not
// retrieve (a lookup failed) rests on nothing read: the next pass may not
// keep it as its own. Here the nightly pass after the one whose lookup
// failed must find the amount mismatch a pass over the whole history
// finds; keeping the last pass's conclusion, it found nothing, and went
// on finding nothing while the row stood still.
func TestIncrementalAfterAFailedLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A charge from before every window, of other money.
	old := propCharge("ch_old", t0.Add(-100*time.Hour))
	old.Money.Amount = 2000
	e.add("", old)
	e.clock = t0
	e.pass(true, runner.Request{})

	paid := propPaid("charge:g", t0.Add(time.Hour))
	paid.ProviderID = old.ID
	pgtest.InsertObligations(t, e.pool, paid)
	e.clock = t0.Add(2 * time.Hour)
	// Every charge served lacks its amount, as from a faulty deploy at
	// the provider: the retrieval fails; the nightly pass's listing of
	// the charges created since the mirror is empty, and stands.
	e.srv.SetFaults(stripesim.Faults{Malformed: stripesim.Without("amount"), MalformedList: stripesim.ListCharges})
	out := e.pass(true, runner.Request{})
	e.srv.SetFaults(stripesim.Faults{})
	if !slices.ContainsFunc(out.Lookups, func(l reconcile.Lookup) bool { return l.ID == old.ID && l.Result == reconcile.LookupFailed }) {
		t.Fatalf("the lookup of %s did not fail (lookups %+v): the test proves nothing", old.ID, out.Lookups)
	}
	if slices.ContainsFunc(out.Result.Findings, func(f reconcile.Finding) bool { return f.ObligationID == paid.ID }) {
		t.Fatalf("a pass that could not read %s found %+v", old.ID, out.Result.Findings)
	}

	e.clock = t0.Add(3 * time.Hour)
	out = e.pass(true, runner.Request{})
	if out.Sync.Match != runner.MatchFull {
		t.Errorf("the pass after a failed lookup matched %s (%q), want whole", out.Sync.Match, out.Sync.MatchReason)
	}
	if !slices.ContainsFunc(out.Result.Findings, func(f reconcile.Finding) bool {
		return f.ObligationID == paid.ID && f.Kind == reconcile.AmountMismatch
	}) {
		t.Errorf("the nightly pass after the failed lookup (matched %s, %q) found %+v, want charge:g's amount mismatch",
			out.Sync.Match, out.Sync.MatchReason, out.Result.Findings)
	}
}

// oldPayment adds a payment from before every coverage: charge ch of
// USD 25.00 and its intent pi. It returns the charge.
func (w *twin) oldPayment(ch, pi string) reconcile.ProviderObject {
	c := propCharge(ch, t0.Add(-100*time.Hour))
	c.PaymentIntent = pi
	w.object(c, "")
	intent := c
	intent.ID, intent.Kind, intent.PaymentIntent, intent.Charge = pi, reconcile.PaymentIntent, "", ch
	w.object(intent, "")
	return c
}

// A charge and its payment intent are one payment, whichever of the two
// a pass read, and an obligation naming either claims it (docs/design.md,
// "Linking"). Here an unknown outcome's late answer names one half of an
// old payment whose other half an old paid obligation recorded: a pass
// over the whole history sees two claims and marks nothing; a pass that
// read only the obligations naming the half it retrieved marked the
// unknown outcome PAID on money the other approval collected.
func TestRetrievedPaymentIsClaimedThroughItsOtherHalf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		answer, other string
	}{
		{"the answer names the charge, the old obligation its intent", "ch_o", "pi_o"},
		{"the answer names the intent, the old obligation its charge", "pi_o", "ch_o"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newTwin(t, 0)
			w.oldPayment("ch_o", "pi_o")
			o := propPaid("charge:o", t0.Add(-101*time.Hour))
			o.ProviderID = c.other
			w.dayZero(t, o)
			a := w.lateAnswer(t, t0.Add(20*time.Hour), c.answer)
			if len(a.Result.Transitions) > 0 {
				t.Errorf("the pass marked %+v on a payment another obligation recorded", a.Result.Transitions)
			}
			if !slices.ContainsFunc(a.Result.Findings, func(f reconcile.Finding) bool {
				return f.Kind == reconcile.ConflictingLink && f.ObligationID == "charge:r"
			}) {
				t.Errorf("no conflicting link for charge:r among %+v", a.Result.Findings)
			}
		})
	}
}

// A refund tells which payment it takes money back from, and what a pass
// read of that payment chooses its twins and its findings' words: a
// refund of an old charge of an intent is "on payment pi_t" where the
// charge was read, and a whole read reads the charge where an obligation
// it decides on names it (here a late answer recorded in the window). A
// nightly pass that reads a new refund of it must read the charge too,
// though the obligation naming it did not change: it read neither, and
// said "on charge ch_t" (TestIncrementalEqualsWhole's seed 441).
func TestIncrementalReadsWhatARefundRefundsAsWholeDoes(t *testing.T) {
	t.Parallel()
	w := newTwin(t, 0)
	ch := propCharge("ch_t", t0.Add(-100*time.Hour))
	ch.PaymentIntent = "pi_t"
	w.object(ch, "")
	refund := func(id string, created time.Time, amount int64) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: reconcile.Refund, Money: reconcile.Money{Amount: amount, Currency: "usd"},
			Status: reconcile.Succeeded, RawStatus: "succeeded", Target: ch.ID, Charge: ch.ID, Created: reconcile.StampOf(created)}
	}
	// A late answer recorded in the window names the old charge.
	z := propPaid("charge:z", t0.Add(-2*time.Hour))
	z.ProviderID = ch.ID
	w.dayZero(t, z)
	at := t0.Add(20 * time.Hour)
	w.object(refund("re_n", at.Add(-time.Hour), 700), "")
	a := w.dayOne(t, at)
	if !slices.ContainsFunc(a.Result.Findings, func(f reconcile.Finding) bool {
		return f.Kind == reconcile.Orphan && f.Target == "pi_t"
	}) {
		t.Errorf("no orphan refund on pi_t among %+v", a.Result.Findings)
	}
}

// Two refunds of one payment are twins whichever half of it each names
// (docs/design.md, "Findings": a refund's target is the payment it takes
// money back from). Here a paid refund obligation's refund and a later
// one of the same money, with no key or metadata to link it, name an old
// payment by its charge, its intent or both. The payment is older than
// the coverage: a pass reads it because the refund obligation, in the
// window, names it, and, in some cases, a late answer recorded in the
// window too. Whatever each names, the nightly pass must find the
// suspected duplicate --full finds: it found an orphan where the paid
// refund named the charge and the new one the intent, the two tied only
// by the old charge, which it did not read (it did not decide on the
// unchanged refund obligation).
func TestIncrementalRefundTwinsThroughWhatTheyRefund(t *testing.T) {
	t.Parallel()
	names := map[string][2]string{ // charge, payment intent
		"charge": {"ch_t", ""}, "intent": {"", "pi_t"}, "both": {"ch_t", "pi_t"},
	}
	for _, first := range []string{"charge", "intent", "both"} {
		for _, second := range []string{"charge", "intent", "both"} {
			for _, late := range []bool{false, true} {
				name := fmt.Sprintf("paid_names_%s/new_names_%s/late_answer_%t", first, second, late)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					refundTwins(t, names[first], names[second], late)
				})
			}
		}
	}
}

// refundTwins runs one case of TestIncrementalRefundTwinsThroughWhatTheyRefund:
// the paid refund names first, the new one second (each a charge and a
// payment intent, either empty).
func refundTwins(t *testing.T, first, second [2]string, late bool) {
	w := newTwin(t, 0)
	ch := w.oldPayment("ch_t", "pi_t")
	refund := func(id string, created time.Time, of [2]string) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: reconcile.Refund, Money: reconcile.Money{Amount: 700, Currency: "usd"},
			Status: reconcile.Succeeded, RawStatus: "succeeded", Target: cmp.Or(of[0], of[1]), Charge: of[0], PaymentIntent: of[1],
			Created: reconcile.StampOf(created)}
	}
	paid := t0.Add(-2 * time.Hour)
	f := reconcile.Obligation{ID: "refund:f", Kind: reconcile.Refund, IdempotencyKey: "key-f", ProviderID: "re_a",
		TargetID: cmp.Or(first[0], first[1]), Money: reconcile.Money{Amount: 700, Currency: "usd"}, State: reconcile.Paid,
		CreatedAt: reconcile.StampOf(paid.Add(-time.Hour)), UpdatedAt: reconcile.StampOf(paid), PaidAt: reconcile.StampOf(paid)}
	w.object(refund("re_a", paid, first), "")
	w.dayZero(t, f)
	at := t0.Add(20 * time.Hour)
	w.object(refund("re_b", at.Add(-time.Hour), second), "")
	var a *runner.Outcome
	if late {
		a = w.lateAnswer(t, at, ch.ID)
		if a.Sync.Match != runner.MatchIncremental {
			t.Errorf("day 1 matched %s (%q), not incrementally: the test proves nothing", a.Sync.Match, a.Sync.MatchReason)
		}
	} else {
		a = w.dayOne(t, at)
	}
	if !slices.ContainsFunc(a.Result.Findings, func(f reconcile.Finding) bool {
		return f.Kind == reconcile.SuspectedDuplicate && f.ObligationID == "refund:f" && slices.Contains(f.ProviderIDs, "re_b")
	}) {
		t.Errorf("re_b is not a suspected duplicate of refund:f among %+v", a.Result.Findings)
	}
}

// A record whose metadata is edited may no longer name the obligation the
// last pass linked it to: that obligation is decided on again, as --full
// decides on every one in scope. Here a paid obligation's only evidence
// is a charge whose metadata names its key; the metadata is then edited
// to name nothing of it, and the obligation is paid without evidence. The
// nightly pass read the edited charge but not the obligation it named
// before, and kept the last pass's "nothing to report"
// (TestIncrementalEqualsWhole's seed 1210 at twelve days).
func TestIncrementalRedecidesWhatAnEditedRecordNamed(t *testing.T) {
	t.Parallel()
	w := newTwin(t, 0)
	p := propPaid("charge:e", t0.Add(-2*time.Hour))
	ch := propCharge("ch_e", t0.Add(-time.Hour))
	ch.Metadata = map[string]string{"idempotency_key": p.IdempotencyKey}
	w.object(ch, "")
	w.dayZero(t, p)
	at := t0.Add(20 * time.Hour)
	if !w.update(ch.ID, at.Add(-time.Hour), at, func(o *reconcile.ProviderObject) {
		o.Metadata = map[string]string{"order": "o-1"}
	}) {
		t.Fatal("the edit did not happen")
	}
	a := w.dayOne(t, at)
	if !slices.ContainsFunc(a.Result.Findings, func(f reconcile.Finding) bool {
		return f.Kind == reconcile.PaidWithoutEvidence && f.ObligationID == p.ID
	}) {
		t.Errorf("no paid_without_evidence for %s among %+v", p.ID, a.Result.Findings)
	}
}

// A pass whose mirror save failed applied its findings all the same, on
// links no mirror holds. A finding it resolved is the next pass's to
// decide on again. Here a charge only a provider_id links is an orphan;
// an obligation written the next day names it, and that day's passes
// resolve the orphan without saving their mirrors; the day after, the
// obligation's provider_id is corrected, and the charge is an orphan
// again. The nightly pass read the corrected row, but asked the mirror
// for what the last saved pass linked to it (nothing) and kept the
// orphan resolved (TestIncrementalEqualsWhole's seed 1298 at twelve
// days).
func TestIncrementalRedecidesWhatAnUnsavedPassResolved(t *testing.T) {
	t.Parallel()
	w := newTwin(t, 0)
	ch := propCharge("ch_u", t0.Add(-time.Hour))
	ch.Customer = "cus_" + ch.ID // no twin reaches it
	w.object(ch, "")
	w.dayZero(t)
	day := func(d int, at time.Time, saved bool, kind reconcile.FindingKind) {
		t.Helper()
		w.a.clock, w.b.clock = at, at
		a, differ := w.passesSaving(saved)
		if differ != "" {
			t.Errorf("day %d: %s", d, differ)
		}
		if a.Sync.Match != runner.MatchIncremental {
			t.Errorf("day %d matched %s (%q), not incrementally: the test proves nothing", d, a.Sync.Match, a.Sync.MatchReason)
		}
		orphan := slices.ContainsFunc(a.Result.Findings, func(f reconcile.Finding) bool {
			return f.Kind == reconcile.Orphan && slices.Contains(f.ProviderIDs, ch.ID)
		})
		if orphan != (kind == reconcile.Orphan) {
			t.Errorf("day %d: orphan %s found %t, want %t (findings %+v)", d, ch.ID, orphan, !orphan, a.Result.Findings)
		}
	}
	at := t0.Add(20 * time.Hour)
	u := propPaid("charge:u", at.Add(-time.Hour))
	u.ProviderID, u.Money = ch.ID, ch.Money
	w.both(func(e *env) { pgtest.InsertObligations(t, e.pool, u) })
	day(1, at, false, "")
	at = at.Add(20 * time.Hour)
	w.both(func(e *env) {
		e.exec(`UPDATE obligations SET provider_id = NULL, updated_at = $2 WHERE id = $1`, u.ID, at.Add(-time.Hour))
	})
	day(2, at, true, reconcile.Orphan)
}
