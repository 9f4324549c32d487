// Package bench is the reconciler's performance suite: the history its
// benchmarks share (World, at any size), the end-to-end and incremental
// sync benchmarks over the Stripe-compatible test server and PostgreSQL,
// and the Table that cmd/reconcile-bench prints side by side.
//
// The non-test part imports the root package only, so that any package's
// benchmarks can build a World (the matcher's do).
package bench

import (
	"fmt"
	"strconv"
	"time"

	"reconcile"
)

// World is a history of n obligations and about as many provider objects,
// with one key event per object that has a key: mostly clean (linked by
// provider id, by intent, by key alone, by metadata alone; refunds;
// unknown outcomes and expired leases that the provider's records mark
// PAID), and in every thousand (WorldOptions.FindingsEvery) one of each
// finding kind.
type World struct {
	Now         time.Time
	Obligations []reconcile.Obligation
	Objects     []reconcile.ProviderObject
	// Keys say which idempotency key created which object.
	Keys []reconcile.KeyEvidence
	// Lookups are the retrievals by id that obligations naming absent
	// objects need (the provider answers 404).
	Lookups []reconcile.Lookup
	// Listed covers every object; EventsFrom every key.
	Listed     reconcile.Window
	EventsFrom time.Time
}

// WorldOptions shape a World.
type WorldOptions struct {
	// Newest is how long before now the newest objects were created
	// (default 30 minutes). Objects spread over 40,000 minutes before it.
	Newest time.Duration
	// FindingsEvery is how many obligations hold one of each finding
	// kind (default 1000; a multiple of 1000). Those findings stay open,
	// and a nightly pass decides on their obligations again, so a World
	// ten times larger with FindingsEvery ten times larger has as much
	// to decide on each night as the smaller one.
	FindingsEvery int
}

// NewWorld builds a World of n obligations at now with the default
// options.
func NewWorld(n int, now time.Time) World {
	return NewWorldWith(n, now, WorldOptions{})
}

// NewWorldWith builds a World of n obligations at now.
func NewWorldWith(n int, now time.Time, opts WorldOptions) World {
	if opts.Newest <= 0 {
		opts.Newest = 30 * time.Minute
	}
	every := opts.FindingsEvery
	if every == 0 {
		every = 1000
	}
	if every < 0 || every%1000 != 0 {
		// The kinds sit at 101, 202, … 909 of every span, where the
		// clean cases above (i % 20) leave them alone.
		panic(fmt.Sprintf("bench: FindingsEvery %d is not a positive multiple of 1000", every))
	}
	w := World{
		Now:         now,
		Obligations: make([]reconcile.Obligation, 0, n),
		Objects:     make([]reconcile.ProviderObject, 0, n+n/100),
		Keys:        make([]reconcile.KeyEvidence, 0, n+n/100),
		Listed:      reconcile.Window{From: now.Add(-720 * time.Hour), To: now},
		EventsFrom:  now.Add(-720 * time.Hour),
	}
	for i := range n {
		s := strconv.Itoa(i)
		money := reconcile.Money{Amount: int64(500 + i%250000), Currency: [...]string{"usd", "eur", "jpy", "gbp"}[i%4]}
		created := now.Add(-opts.Newest - time.Duration(i%40000)*time.Minute).Truncate(time.Second)
		o := reconcile.Obligation{ID: "charge:" + s, Kind: reconcile.Charge, IdempotencyKey: "k-" + s, Provider: "stripe",
			Money: money, State: reconcile.Paid, RawState: "PAID", CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)}
		p := reconcile.ProviderObject{ID: "ch_" + s, Kind: reconcile.Charge, Money: money, Status: reconcile.Succeeded,
			RawStatus: "succeeded", Customer: "cus_" + strconv.Itoa(i%5000), Created: reconcile.StampOf(created)}
		obj, key := true, true
		switch i % 20 {
		case 10, 11: // a refund of the last charge before it
			o.ID, o.Kind, o.IdempotencyKey, o.TargetID = "refund:"+s, reconcile.Refund, "rk-"+s, "ch_"+strconv.Itoa(i-i%20+9)
			p.ID, p.Kind, p.Target, p.Charge, p.Customer = "re_"+s, reconcile.Refund, o.TargetID, o.TargetID, ""
			o.ProviderID = p.ID
		case 12: // an intent and its charge
			o.ProviderID = "pi_" + s
			p.PaymentIntent = o.ProviderID
			w.Objects = append(w.Objects, reconcile.ProviderObject{ID: o.ProviderID, Kind: reconcile.PaymentIntent, Money: money,
				Status: reconcile.Succeeded, RawStatus: "succeeded", Charge: p.ID, Customer: p.Customer, Created: reconcile.StampOf(created)})
		case 13: // the key alone
		case 14: // metadata alone
			p.Metadata = map[string]string{"obligation_id": o.ID}
			key = false
		case 15: // unknown outcome, resolved by key
			o.State, o.RawState = reconcile.ConfirmationUnknown, "CONFIRMATION_UNKNOWN"
		case 16: // a crashed worker, resolved by key
			o.State, o.RawState, o.LeaseOwner, o.LeaseExpiresAt = reconcile.Executing, "EXECUTING", "w", reconcile.StampOf(now.Add(-time.Hour))
		default:
			o.ProviderID = p.ID
		}
		switch i % every {
		case 101: // duplicate: a second charge under a retry's metadata
			w.Objects = append(w.Objects, reconcile.ProviderObject{ID: "ch_dup" + s, Kind: reconcile.Charge, Money: money,
				Status: reconcile.Succeeded, RawStatus: "succeeded", Metadata: map[string]string{"obligation_id": o.ID}, Created: reconcile.StampOf(created)})
		case 202: // orphan
			w.Objects = append(w.Objects, reconcile.ProviderObject{ID: "ch_orphan" + s, Kind: reconcile.Charge, Money: money,
				Status: reconcile.Succeeded, RawStatus: "succeeded", Created: reconcile.StampOf(created)})
		case 303: // suspected duplicate: same customer and money, unlinked
			w.Objects = append(w.Objects, reconcile.ProviderObject{ID: "ch_twin" + s, Kind: reconcile.Charge, Money: money,
				Status: reconcile.Succeeded, RawStatus: "succeeded", Customer: p.Customer, Created: reconcile.StampOf(created.Add(time.Minute))})
		case 404: // paid without evidence: its charge does not exist
			obj, key = false, false
			o.ProviderID = "ch_gone" + s
			w.Lookups = append(w.Lookups, reconcile.Lookup{ID: o.ProviderID, Result: reconcile.LookupNotFound})
		case 505: // amount mismatch
			p.Money.Amount++
		case 606: // status mismatch
			p.Status, p.RawStatus = reconcile.Failed, "failed"
		case 707: // stale lease
			obj, key = false, false
			o.State, o.RawState, o.LeaseExpiresAt = reconcile.Executing, "EXECUTING", 0
		case 808: // unresolved unknown
			obj, key = false, false
			o.State, o.RawState = reconcile.ConfirmationUnknown, "CONFIRMATION_UNKNOWN"
		case 909: // conflict: the object also names another obligation
			p.Metadata = map[string]string{"obligation_id": "charge:" + strconv.Itoa(i-1)}
		}
		w.Obligations = append(w.Obligations, o)
		if obj {
			w.Objects = append(w.Objects, p)
		}
		if key {
			w.Keys = append(w.Keys, reconcile.KeyEvidence{ObjectID: p.ID, ObjectKind: p.Kind, Key: o.IdempotencyKey,
				EventType: keyEventType(p.Kind), Created: reconcile.StampOf(created)})
		}
	}
	return w
}

// keyEventType is the event that tells the key of an object's creation.
func keyEventType(k reconcile.ObjectKind) string {
	if k == reconcile.Refund {
		return "refund.created"
	}
	return "charge.succeeded"
}

// KeyOf maps each object with key evidence to its key, for a server that
// emits the events itself.
func (w *World) KeyOf() map[string]string {
	m := make(map[string]string, len(w.Keys))
	for _, k := range w.Keys {
		m[k.ObjectID] = k.Key
	}
	return m
}

// NewBusiness is a day's new business on top of a World: n clean charges,
// each an obligation linked by provider id to its object with the key
// event of its creation (the World's default case), created from from
// toward to, spread evenly by the second. Their ids and keys are prefixed
// by prefix ("new0-": charge:new0-7, ch_new0-7, k-new0-7), so that several
// days on one server do not collide with each other or with the World's.
func NewBusiness(n int, prefix string, from, to time.Time) World {
	w := World{
		Now:         to,
		Obligations: make([]reconcile.Obligation, 0, n),
		Objects:     make([]reconcile.ProviderObject, 0, n),
		Keys:        make([]reconcile.KeyEvidence, 0, n),
		Listed:      reconcile.Window{From: from, To: to},
		EventsFrom:  from,
	}
	span := to.Sub(from)
	for i := range n {
		s := prefix + strconv.Itoa(i)
		money := reconcile.Money{Amount: int64(500 + i%250000), Currency: [...]string{"usd", "eur", "jpy", "gbp"}[i%4]}
		created := from.Add(span * time.Duration(i) / time.Duration(n)).Truncate(time.Second)
		o := reconcile.Obligation{ID: "charge:" + s, Kind: reconcile.Charge, IdempotencyKey: "k-" + s, Provider: "stripe",
			ProviderID: "ch_" + s, Money: money, State: reconcile.Paid, RawState: "PAID", CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created),
			PaidAt: reconcile.StampOf(created)}
		p := reconcile.ProviderObject{ID: o.ProviderID, Kind: reconcile.Charge, Money: money, Status: reconcile.Succeeded,
			RawStatus: "succeeded", Customer: "cus_" + strconv.Itoa(i%5000), Created: reconcile.StampOf(created)}
		w.Obligations = append(w.Obligations, o)
		w.Objects = append(w.Objects, p)
		w.Keys = append(w.Keys, reconcile.KeyEvidence{ObjectID: p.ID, ObjectKind: p.Kind, Key: o.IdempotencyKey,
			EventType: keyEventType(p.Kind), Created: reconcile.StampOf(created)})
	}
	return w
}
