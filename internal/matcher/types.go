// Package matcher links provider objects to obligations and classifies
// every disagreement (docs/design.md, "Linking", "Findings", "The PAID rule"). It is pure: standard library only,
// no I/O, no clock (now comes in), no randomness. Every decision is a
// function of Match's arguments.
//
// This package is one of three statements of the matching rules, on
// purpose (docs/design.md, "Three statements of the rules"): the property
// test's naive oracle (property_test.go) and the simulation's oracle
// (internal/sim/oracle.go) state them again, apart from this one, so that
// one stated wrong is caught by the other two. A rule change touches all
// three and the design.
//
// The unit of judgement is the money movement: a refund, a charge on its
// own, or a payment intent with its charges (linked by the charge's
// payment_intent or the intent's latest charge), which together move money
// once. An obligation's provider id links the whole movement of the object
// it names (an intent's id stands for its charges, a charge's id for its
// intent); keys and metadata link the movement of the object carrying them.
// A movement reaching two obligations is a conflict for each.
//
// Where each rule lives, one file a family, each opening with its rule:
// link.go (linking and conflicts), duplicates.go (duplicates and suspected
// duplicates), orphans.go, evidence.go (the PAID decision, mismatches of
// money and state, paid without evidence), outcomes.go (stale leases and
// unknown outcomes). world.go numbers and indexes the input so that a rule
// asks its question in a word; match.go runs the rules in order and
// builds the result; words.go names movements for the sentences, which
// are reconcile's Detail functions, beside the kinds table (detail.go and
// kinds.go of package reconcile).
//
// Decisions the design leaves open, taken here:
//   - Unlinked succeeded objects created outside Input.Subject are not
//     orphans: they were read as evidence for the obligations the run
//     decides on (the coverage before and after the subject, or retrieved
//     by id), and the obligations that could claim them were not all
//     read. They land in BucketIgnored, unless they repeat a movement of
//     an obligation the run decides on (a suspected duplicate).
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

	"reconcile/internal/config"

	"reconcile"
)

// Input is everything one run read, of one Stripe account: a pass over
// several matches each account's apart, since an object links only to
// obligations of its own account (docs/design.md, "Accounts").
type Input struct {
	// Account is the account whose records and obligations these are:
	// the zero Account for the platform's own. Its findings carry it, and
	// their fingerprints include it.
	Account reconcile.Account
	// Obligations in scope (docs/design.md, "Coverage"): every EXECUTING and
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
	// refunds and payment intents are complete: the run's coverage. A
	// decision about an obligation rests on it only where it reaches back
	// to Options.RecordsFrom of the obligation's creation and on to now
	// (docs/design.md, "Coverage"); elsewhere the obligation is not marked PAID and
	// its findings say what was not read. A zero window proves no absence.
	Listed reconcile.Window
	// EventsFrom is where key evidence starts to be complete (Stripe keeps
	// events 30 days; the mirror keeps what they told); it runs to
	// Listed.To. Zero means no events were read, so no obligation's
	// records are complete.
	EventsFrom time.Time
	// Subject is the creation-time window the run is about (--since,
	// --from/--to): an unlinked object created in it is an orphan. Objects
	// listed outside it are evidence only. Zero means Listed.
	Subject reconcile.Window
	// Context holds the ids of obligations read only so that the objects
	// naming them link correctly (a conflict, a twin's owner): the run
	// decides nothing about them, reports nothing of them and does not
	// count them as examined. Any order.
	Context []string
}

// Options are the matcher's tunables; OptionsFrom takes them from the
// configuration.
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
	// proved either (an informational kind, reconcile.Unverified). Off by
	// default: such findings come and go with the window and are not for
	// finance.
	ReportUnverified bool
}

// RecordsFrom is the earliest creation time of a provider record that can
// bear on a decision about an obligation created at created: its own
// records begin at created less the clock skew; a suspected duplicate of
// one of them may come a duplicate window earlier; and whether that
// suspect repeats this obligation's movement or a nearer twin's takes
// another duplicate window to tell (docs/design.md, "Coverage").
func (o Options) RecordsFrom(created time.Time) time.Time {
	return created.Add(-o.ClockSkew - 2*o.DuplicateWindow)
}

// NamedBefore is the inverse of RecordsFrom: an obligation created before
// it has records from before from.
func (o Options) NamedBefore(from time.Time) time.Time {
	return from.Add(o.ClockSkew + 2*o.DuplicateWindow)
}

// CoverFrom is where a run about subject must begin to read the
// provider's records: a duplicate window before the subject, so that the
// subject's objects find their twins, and back to RecordsFrom of the
// oldest obligation the run decides on (oldest; zero if none), so that
// every decision rests on the whole of its obligation's life — but not
// before now less maxLookback, unless the subject itself begins earlier
// (docs/design.md, "Coverage").
func (o Options) CoverFrom(subject reconcile.Window, oldest, now time.Time, maxLookback time.Duration) time.Time {
	from := subject.From.Add(-o.DuplicateWindow)
	if !oldest.IsZero() {
		if r := o.RecordsFrom(oldest); r.Before(from) {
			from = r
		}
	}
	if limit := now.Add(-maxLookback); maxLookback > 0 && from.Before(limit) {
		from = limit
	}
	if subject.From.Before(from) {
		from = subject.From
	}
	return from
}

// OptionsFrom takes the matcher's tunables from the configuration;
// config.Default holds their defaults, the one place they are defined.
func OptionsFrom(c config.MatcherConfig) Options {
	return Options{
		DuplicateWindow:        c.DuplicateWindow,
		PendingGrace:           c.PendingGrace,
		ClockSkew:              c.ClockSkew,
		MetadataObligationID:   c.MetadataKeys.ObligationID,
		MetadataIdempotencyKey: c.MetadataKeys.IdempotencyKey,
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

// Result is what one run concludes: the Conclusions the store applies,
// and how every object was linked and classified.
type Result struct {
	// Findings are sorted by severity (most severe first), kind,
	// obligation id and fingerprint; Transitions by obligation id;
	// ObligationIDs are the obligations decided on and ObjectIDs every
	// object read, sorted.
	reconcile.Conclusions
	// Links are sorted by object id, then obligation id.
	Links []reconcile.Link
	// Buckets holds every input object's bucket: Buckets[i] is the bucket
	// of ObjectIDs[i] (a slice rather than a map by id: at a million
	// objects the map cost a fifth of the run). Bucket looks one up by id.
	Buckets []Bucket
	// NamesFrom[i], when NamesFrom is not nil, is the creation time of
	// the oldest obligation read that ObjectIDs[i] names and that was
	// settled, created and last written before the object was created;
	// zero when none (docs/design.md, "Incremental matching").
	NamesFrom []reconcile.Stamp
	// Undecided are the objects retrieved by id (created outside
	// Input.Listed) that link to no obligation the run decided on, sorted:
	// the run decided nothing of them (Settled leaves them out), and a
	// pass keeps no link of them for the mirror.
	Undecided []string
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
