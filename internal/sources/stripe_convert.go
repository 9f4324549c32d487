package sources

import (
	"maps"
	"strings"
	"time"
	"unique"

	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
)

// This file is the boundary: stripe-go's types become the root package's
// here and go no further.

func unixUTC(sec int64) time.Time { return time.Unix(sec, 0).UTC() }

// word is the one copy of a word that a million objects repeat (a
// currency, a status): decoded, each object holds a copy of its own, and
// at a million objects those copies are tens of megabytes for the
// collector to keep and sweep (docs/design.md, "Memory and CPU").
func word(s string) string { return unique.Make(s).Value() }

// copyMetadata carries metadata as it is: it may hold anything a caller
// put there (non-UTF-8 bytes, card numbers); the matcher reads two keys,
// nothing prints the rest, and the mirror stores it masked but for those
// two (docs/design.md, "Untrusted text").
func copyMetadata(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// chargeStatus normalises a charge's status. A succeeded charge that is
// not captured is only authorised: no money moved yet, so it is pending.
// An unknown word is treated as not final, which proves nothing either way.
func chargeStatus(status string, captured bool) reconcile.Status {
	switch status {
	case "succeeded":
		if !captured {
			return reconcile.Pending
		}
		return reconcile.Succeeded
	case "failed":
		return reconcile.Failed
	}
	return reconcile.Pending
}

// refundStatus normalises a refund's status; requires_action (the
// customer must act before the money moves) is pending.
func refundStatus(status string) reconcile.Status {
	switch status {
	case "succeeded":
		return reconcile.Succeeded
	case "failed":
		return reconcile.Failed
	case "canceled":
		return reconcile.Canceled
	}
	return reconcile.Pending
}

// paymentIntentStatus normalises an intent's status: processing and every
// requires_* (payment method, confirmation, action, capture) are not final.
func paymentIntentStatus(status string) reconcile.Status {
	switch status {
	case "succeeded":
		return reconcile.Succeeded
	case "canceled":
		return reconcile.Canceled
	}
	return reconcile.Pending
}

// wireObject is what the reader reads of a charge, refund or payment
// intent, however it was decoded: by stripe-go (an object retrieved by id,
// an event's object) or by the reader's own page decoder (a list page,
// stripe_page.go). Its fields are Stripe's members of those names.
type wireObject struct {
	kind           reconcile.ObjectKind
	id             string
	amount         int64
	currency       string
	status         string
	captured       bool // charges
	amountRefunded int64
	metadata       map[string]string
	created        int64
	paymentIntent  string // charges and refunds
	customer       string // charges and intents
	charge         string // refunds
	latestCharge   string // intents
}

// object is what w becomes: the one statement of how Stripe's members
// map to a ProviderObject. metadata is taken as it is: the caller owns it.
func (w *wireObject) object() reconcile.ProviderObject {
	o := reconcile.ProviderObject{
		ID: w.id, Kind: w.kind, Money: reconcile.Money{Amount: w.amount, Currency: word(strings.ToLower(w.currency))},
		RawStatus: word(w.status), Created: reconcile.StampOf(unixUTC(w.created)),
	}
	if len(w.metadata) > 0 {
		o.Metadata = w.metadata
	}
	switch w.kind {
	case reconcile.Charge:
		o.Status, o.AmountRefunded = chargeStatus(w.status, w.captured), w.amountRefunded
		o.PaymentIntent, o.Customer = w.paymentIntent, w.customer
	case reconcile.Refund:
		o.Status = refundStatus(w.status)
		o.Charge, o.PaymentIntent = w.charge, w.paymentIntent
		o.Target = o.Charge
		if o.Target == "" {
			o.Target = o.PaymentIntent
		}
	case reconcile.PaymentIntent:
		o.Status = paymentIntentStatus(w.status)
		o.Charge, o.Customer = w.latestCharge, w.customer
	}
	return o
}

func chargeObject(c *stripe.Charge) reconcile.ProviderObject {
	w := wireObject{kind: reconcile.Charge, id: c.ID, amount: c.Amount, currency: string(c.Currency), status: string(c.Status),
		captured: c.Captured, amountRefunded: c.AmountRefunded, metadata: copyMetadata(c.Metadata), created: c.Created}
	if c.PaymentIntent != nil {
		w.paymentIntent = c.PaymentIntent.ID
	}
	if c.Customer != nil {
		w.customer = c.Customer.ID
	}
	return w.object()
}

func refundObject(r *stripe.Refund) reconcile.ProviderObject {
	w := wireObject{kind: reconcile.Refund, id: r.ID, amount: r.Amount, currency: string(r.Currency), status: string(r.Status),
		metadata: copyMetadata(r.Metadata), created: r.Created}
	if r.Charge != nil {
		w.charge = r.Charge.ID
	}
	if r.PaymentIntent != nil {
		w.paymentIntent = r.PaymentIntent.ID
	}
	return w.object()
}

func paymentIntentObject(p *stripe.PaymentIntent) reconcile.ProviderObject {
	w := wireObject{kind: reconcile.PaymentIntent, id: p.ID, amount: p.Amount, currency: string(p.Currency), status: string(p.Status),
		metadata: copyMetadata(p.Metadata), created: p.Created}
	if p.LatestCharge != nil {
		w.latestCharge = p.LatestCharge.ID
	}
	if p.Customer != nil {
		w.customer = p.Customer.ID
	}
	return w.object()
}

// keyEvents are the event types whose request is the one that created the
// object in data.object, so that the request's idempotency key is the
// creating key of that object; they are the exact names passed as types[]
// (at most 20, no wildcard there).
//
// Deliberately absent: charge.refunded and charge.refund.updated carry the
// request that created a REFUND (same key) while their object is the
// charge, so they would tie the refund's key to the charge; charge.captured
// and charge.updated carry a later request. Reading them would only cost
// pages.
func keyEvents() []keyEvent {
	return []keyEvent{
		{"charge.succeeded", reconcile.Charge},
		{"charge.pending", reconcile.Charge},
		{"charge.failed", reconcile.Charge},

		{"refund.created", reconcile.Refund},
		{"refund.updated", reconcile.Refund}, // only when it carries a request key

		{"payment_intent.created", reconcile.PaymentIntent},
		{"payment_intent.succeeded", reconcile.PaymentIntent},
		{"payment_intent.processing", reconcile.PaymentIntent},
		{"payment_intent.requires_action", reconcile.PaymentIntent},
		{"payment_intent.payment_failed", reconcile.PaymentIntent},
		{"payment_intent.canceled", reconcile.PaymentIntent},
		{"payment_intent.amount_capturable_updated", reconcile.PaymentIntent},
		{"payment_intent.partially_funded", reconcile.PaymentIntent},
	}
}

type keyEvent struct {
	typ  string
	kind reconcile.ObjectKind
}

// keyEventTypes are the names passed as types[].
func keyEventTypes() []string {
	var out []string
	for _, k := range keyEvents() {
		out = append(out, k.typ)
	}
	return out
}

// keyEventKinds maps each type of keyEvents to its entry: the kind of its
// object, and the type's name, which every evidence of the type shares
// rather than holding the copy its event was decoded into.
func keyEventKinds() map[string]keyEvent {
	m := map[string]keyEvent{}
	for _, k := range keyEvents() {
		m[k.typ] = k
	}
	return m
}

// evidence is the key evidence of one event, if it is of a key-bearing
// type, carries a request key, and is about an object of the type's kind.
func evidence(kinds map[string]keyEvent, eventID, typ string, created int64, key, requestID, objectID, object string) (reconcile.KeyEvidence, bool) {
	ke, ok := kinds[typ]
	if !ok || key == "" || objectID == "" || object != string(ke.kind) {
		return reconcile.KeyEvidence{}, false
	}
	return reconcile.KeyEvidence{
		ObjectID: objectID, ObjectKind: ke.kind, Key: key,
		EventID: eventID, EventType: ke.typ, RequestID: requestID, Created: reconcile.StampOf(unixUTC(created)),
	}, true
}

// kindOfID tells an object's kind from its id prefix, which is how Stripe
// names them: ch_ (and py_ for non-card payments) charges, re_ (pyr_)
// refunds, pi_ payment intents.
func kindOfID(id string) (reconcile.ObjectKind, bool) {
	switch {
	case strings.HasPrefix(id, "ch_"), strings.HasPrefix(id, "py_"):
		return reconcile.Charge, true
	case strings.HasPrefix(id, "re_"), strings.HasPrefix(id, "pyr_"):
		return reconcile.Refund, true
	case strings.HasPrefix(id, "pi_"):
		return reconcile.PaymentIntent, true
	}
	return "", false
}
