// Package reconcile holds the domain of the reconciler: obligations, the
// provider's records of money movements, money itself, and what a run
// concludes from comparing them (findings and transitions).
//
// It is the bottom of the house: every other package speaks these types and
// this one imports the standard library only. Data flows one way:
// sources → matcher → store → alerts (docs/design.md, "The house").
package reconcile

import (
	"strings"
	"time"
)

// ObjectKind is the kind of a provider object, and of an obligation (which is
// a charge or a refund only).
type ObjectKind string

// The provider object kinds the reconciler reads.
const (
	Charge        ObjectKind = "charge"
	Refund        ObjectKind = "refund"
	PaymentIntent ObjectKind = "payment_intent"
)

// Status is a provider object's status normalised across object kinds.
type Status string

// The normalised statuses. Pending covers every not-yet-final status
// (a refund pending or requiring action, an intent processing or requiring
// confirmation, a charge authorised but not captured).
const (
	Succeeded Status = "succeeded"
	Pending   Status = "pending"
	Failed    Status = "failed"
	Canceled  Status = "canceled"
)

// ProviderObject is one money movement as the provider records it: a
// charge, a refund or a payment intent. Stripe types never leave the
// sources package; this is what they become.
type ProviderObject struct {
	ID string
	// Account is the Stripe account the object belongs to: empty for the
	// platform's own (the key's), else a connected account's id (acct_…).
	// Ids are unique within an account (docs/design.md, "Accounts").
	Account   string
	Kind      ObjectKind
	Money     Money
	Status    Status
	RawStatus string // the provider's own status word, for people
	// AmountRefunded is, for a charge, how much of it was refunded since;
	// a charge's Money is never net of refunds.
	AmountRefunded int64
	// Target is, for a refund, the charge it refunds, or its payment intent
	// when the refund names no charge.
	Target string
	// PaymentIntent is the intent a charge or refund belongs to, if any.
	PaymentIntent string
	// Charge is, for a refund, the refunded charge; for a payment intent,
	// its latest charge.
	Charge   string
	Customer string
	Metadata map[string]string
	Created  Stamp
}

// KeyEvidence says that the request which created object ObjectID carried
// idempotency key Key. Stripe tells this only in events
// (event.request.idempotency_key), and keeps events for 30 days.
type KeyEvidence struct {
	// Account is the account of the event and of the object (see
	// ProviderObject.Account).
	Account    string
	ObjectID   string
	ObjectKind ObjectKind
	Key        string
	EventID    string
	EventType  string
	// RequestID is the API request that created the object (req_…), as
	// the event tells it; empty when it did not, and for keys mirrored
	// before it was kept.
	RequestID string
	Created   Stamp
}

// LookupResult is the outcome of retrieving one provider object by id.
type LookupResult string

// A lookup either found the object, proved it absent (404), or failed
// (timeout, 5xx, an id of no known kind): a failure proves nothing.
const (
	LookupFound    LookupResult = "found"
	LookupNotFound LookupResult = "not_found"
	LookupFailed   LookupResult = "failed"
)

// Lookup records one retrieval by id of an object that an obligation names
// but the window's listing did not return.
type Lookup struct {
	ID     string
	Result LookupResult
	Err    string // why it failed, for people; empty unless Failed
}

// State is an obligation's state, by its canonical name. Teams whose table
// spells states differently map them in the configuration; the sources and
// the store translate at the boundary, so the rest of the code sees these.
type State string

// The canonical obligation states (docs/design.md, "States and who moves them").
const (
	PendingApproval     State = "PENDING_APPROVAL"
	Approved            State = "APPROVED"
	Executing           State = "EXECUTING"
	ConfirmationUnknown State = "CONFIRMATION_UNKNOWN"
	Paid                State = "PAID"
	FailedState         State = "FAILED"
	RequiresReview      State = "REQUIRES_REVIEW"
)

// States lists the canonical states in their lifecycle order.
var States = []State{PendingApproval, Approved, Executing, ConfirmationUnknown, Paid, FailedState, RequiresReview}

// Obligation is one approved business action that must move money exactly
// once: an invoice payment (Kind Charge) or an approved refund (Kind Refund).
type Obligation struct {
	ID string
	// Account is the Stripe account the obligation moves money on, from
	// the table's mapped account column: empty (NULL, or no such column)
	// for the platform's own. Provider objects link only to obligations
	// of their own account (docs/design.md, "Accounts").
	Account        string
	Kind           ObjectKind
	IdempotencyKey string
	Provider       string
	ProviderID     string // empty when NULL: no answer arrived
	TargetID       string // refunds: the charge or payment intent refunded
	Money          Money
	// State is canonical; RawState is the table's own value, which the
	// store's compare-and-set must match.
	State          State
	RawState       string
	LeaseOwner     string
	LeaseExpiresAt Stamp // zero when NULL
	CreatedAt      Stamp
	UpdatedAt      Stamp
	PaidAt         Stamp // zero when NULL
}

// Unsettled reports whether o is EXECUTING or CONFIRMATION_UNKNOWN: a
// pass about any window decides on it (docs/design.md, "Coverage").
func (o *Obligation) Unsettled() bool {
	return o.State == Executing || o.State == ConfirmationUnknown
}

// LeaseLive reports whether a worker still owns the obligation at now.
func (o Obligation) LeaseLive(now time.Time) bool {
	return !o.LeaseExpiresAt.IsZero() && o.LeaseExpiresAt.Time().After(now)
}

// Stamp is an instant to the microsecond, as PostgreSQL keeps one, in 8
// bytes where a time.Time takes 24: an obligation holds four, and a
// first pass a million obligations (docs/design.md, "Memory and CPU").
// It counts microseconds from the zero time.Time (January 1, year 1,
// UTC), so that the zero Stamp is the zero time: a NULL column. Stamps
// order as their instants do. It reaches years -290,000 to 290,000
// (StampRange); PostgreSQL's timestamps reach a little further.
type Stamp int64

// StampRange bounds the years a Stamp holds: a time beyond them is
// refused where it is read, never wrapped around.
const StampRange = 290_000

// StampHolds reports whether t lies within the years a Stamp holds.
func StampHolds(t time.Time) bool {
	y := t.Year()
	return -StampRange <= y && y <= StampRange
}

// zeroUnix is the zero time.Time in Unix seconds.
const zeroUnix = -62135596800

// StampOf is t to the microsecond, towards the past.
func StampOf(t time.Time) Stamp {
	return Stamp((t.Unix()-zeroUnix)*1_000_000 + int64(t.Nanosecond()/1000))
}

// Time is the instant s, in UTC; the zero time for the zero Stamp.
func (s Stamp) Time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	// time.Unix takes a negative remainder before the zero time as it is.
	return time.Unix(int64(s)/1_000_000+zeroUnix, int64(s)%1_000_000*1000).UTC()
}

// IsZero reports whether s is the zero time.
func (s Stamp) IsZero() bool { return s == 0 }

// String is s as time.Time prints it.
func (s Stamp) String() string { return s.Time().String() }

// Account is one Stripe account a pass reads: the platform's own, whose
// key the reconciler holds (ID empty), or one of its connected accounts
// (ID acct_…), read with the Stripe-Account header (docs/design.md,
// "Accounts").
type Account struct {
	ID string
	// Name is the account's display name as Stripe gives it (the
	// dashboard's display name, else the business profile's name); empty
	// when it gives none.
	Name string
}

// Platform reports whether a is the platform's own account.
func (a Account) Platform() bool { return a.ID == "" }

// Label names the account for people: its display name and id, its id
// alone when Stripe gives no name, "platform" for the platform's own.
func (a Account) Label() string {
	switch {
	case a.ID == "":
		return "platform"
	case a.Name == "":
		return a.ID
	}
	return a.Name + " (" + a.ID + ")"
}

// ValidAccountID reports whether id has the shape of a Stripe connected
// account's id: acct_ followed by at most 64 letters and digits. The
// configuration's stripe.accounts and the obligations' account column are
// checked with it before an id reaches a Stripe-Account header, an error
// or a dashboard link. It runs once per row of an obligations table with
// an account column, so it is a loop, not a regular expression.
func ValidAccountID(id string) bool {
	rest, ok := strings.CutPrefix(id, "acct_")
	if !ok || rest == "" || len(rest) > 64 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return true
}

// AccountObject is the identity of provider object id of account across
// accounts: the id itself on the platform's account, so that what a
// platform-only reconciler stored keeps its identity, else account/id
// (Stripe ids hold no slash).
func AccountObject(account, id string) string {
	if account == "" {
		return id
	}
	return account + "/" + id
}

// Window is a half-open interval of creation times [From, To).
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Contains reports whether t falls in the window.
func (w Window) Contains(t time.Time) bool {
	return !t.Before(w.From) && t.Before(w.To)
}

// Covers reports whether the whole of [from, to] lies inside the window.
func (w Window) Covers(from, to time.Time) bool {
	return !from.Before(w.From) && !to.After(w.To)
}

// Valid reports whether the window is non-empty.
func (w Window) Valid() bool { return w.From.Before(w.To) }
