// Package matcher links provider objects to obligations and classifies
// every disagreement (DESIGN.md §3–4). It is pure: standard library only,
// no I/O, no clock (now comes in), no randomness. Every decision is a
// function of Match's arguments.
//
// The unit of judgement is the money movement: a refund, a charge on its
// own, or a payment intent with its charges (linked by the charge's
// payment_intent or the intent's latest charge), which together move money
// once. An obligation's provider id links the whole movement of the object
// it names (an intent's id stands for its charges, a charge's id for its
// intent); keys and metadata link the movement of the object carrying them.
// A movement reaching two obligations is a conflict for each.
//
// Decisions DESIGN.md leaves open, taken here:
//   - Unlinked succeeded objects created outside Input.Listed are not
//     orphans: they were retrieved by id as evidence, and the obligations
//     that could claim them were never read. They land in BucketIgnored.
//   - A suspected duplicate is a duplicate found for its twin's obligation:
//     it keeps that obligation from PAID.
//   - duplicate and amount_mismatch are reported whatever the state, a
//     live lease included (money moved twice whoever holds the lease);
//     a live lease only silences the findings about its outcome.
//   - A PAID obligation whose records are all still pending after the
//     grace period is paid_without_evidence; all failed or canceled is
//     status_mismatch.
//   - A movement is proof of an obligation's money only if every succeeded
//     member moved exactly that money.
package matcher

import (
	"slices"
	"time"

	"reconcile"
)

// Input is everything one run read.
type Input struct {
	// Obligations in scope (DESIGN.md §3): every EXECUTING and
	// CONFIRMATION_UNKNOWN one, those created or updated in the window, and
	// those that a listed object names.
	Obligations []reconcile.Obligation
	// Objects are the provider objects listed in the window plus those
	// retrieved by id because an obligation names them.
	Objects []reconcile.ProviderObject
	// Keys says which idempotency key created which object (from events).
	Keys []reconcile.KeyEvidence
	// Lookups are the retrievals by id, found, not found or failed.
	Lookups []reconcile.Lookup
	// Listed is the creation-time window in which the listings of charges,
	// refunds and payment intents are complete. A zero window proves no
	// absence: no paid_without_evidence except by a not-found lookup.
	Listed reconcile.Window
	// EventsFrom is where key evidence starts to be complete (Stripe keeps
	// events 30 days); it runs to Listed.To. Zero means no events were
	// read, so a PAID obligation without a provider id is never reported
	// as without evidence.
	EventsFrom time.Time
}

// Options are the matcher's tunables; DefaultOptions gives DESIGN's values.
type Options struct {
	// DuplicateWindow bounds how far apart in time an unlinked object and
	// its linked twin may be to be a suspected duplicate.
	DuplicateWindow time.Duration
	// PendingGrace is how long a pending provider object is given to become
	// final before it counts as no evidence.
	PendingGrace time.Duration
	// ClockSkew is allowed between the application's clock and the
	// provider's when deciding whether a listing covered an obligation.
	ClockSkew time.Duration
	// MetadataObligationID and MetadataIdempotencyKey are the metadata keys
	// that name an obligation's id and its idempotency key.
	MetadataObligationID   string
	MetadataIdempotencyKey string
	// ReportUnverified adds an info finding of kind Unverified for every
	// PAID obligation to which nothing links but whose absence could not be
	// proved either (DESIGN.md §3 allows informational kinds). Off by
	// default: such findings come and go with the window and are not for
	// finance.
	ReportUnverified bool
}

// DefaultOptions returns DESIGN.md's defaults.
func DefaultOptions() Options {
	return Options{
		DuplicateWindow:        24 * time.Hour,
		PendingGrace:           72 * time.Hour,
		ClockSkew:              5 * time.Minute,
		MetadataObligationID:   "obligation_id",
		MetadataIdempotencyKey: "idempotency_key",
	}
}

// Bucket is where one provider object landed. Every object lands in
// exactly one.
type Bucket string

// The buckets.
const (
	BucketLinked    Bucket = "linked"    // linked to one obligation
	BucketConflict  Bucket = "conflict"  // reached two or more obligations
	BucketSuspected Bucket = "suspected" // unlinked twin of a linked object
	BucketOrphan    Bucket = "orphan"    // unlinked and succeeded
	BucketPending   Bucket = "pending"   // unlinked, pending within the grace period
	BucketIgnored   Bucket = "ignored"   // unlinked and failed, canceled or long pending (no money moved), or created outside the listed window
)

// Result is what one run concludes.
type Result struct {
	// Findings are sorted by severity (most severe first), kind,
	// obligation id and fingerprint.
	Findings []reconcile.Finding
	// Transitions are sorted by obligation id.
	Transitions []reconcile.Transition
	// Links are sorted by object id, then obligation id.
	Links []reconcile.Link
	// Buckets holds every input object's bucket: Buckets[i] is the bucket
	// of ObjectIDs[i] (a slice rather than a map by id: at a million
	// objects the map cost a fifth of the run). Bucket looks one up by id.
	Buckets []Bucket
	Counts  reconcile.Counts
	// ObligationIDs and ObjectIDs are what this run examined, sorted: a
	// finding of an earlier run whose obligation or objects are among them
	// and which this run did not find again is resolved.
	ObligationIDs []string
	ObjectIDs     []string
}

// Bucket returns the bucket of the object with id, and false if the run
// did not examine it.
func (r *Result) Bucket(id string) (Bucket, bool) {
	i, ok := slices.BinarySearch(r.ObjectIDs, id)
	if !ok || i >= len(r.Buckets) {
		return "", false
	}
	return r.Buckets[i], true
}
