package reconcile

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Severity orders findings by how urgently a person must act.
type Severity string

// The severities, most urgent first.
const (
	Critical Severity = "critical"
	High     Severity = "high"
	Warning  Severity = "warning"
	Info     Severity = "info"
)

// Rank is larger for more urgent severities; unknown ones rank lowest.
func (s Severity) Rank() int {
	switch s {
	case Critical:
		return 4
	case High:
		return 3
	case Warning:
		return 2
	case Info:
		return 1
	}
	return 0
}

// ParseSeverity accepts the severity names of --fail-on.
func ParseSeverity(s string) (Severity, bool) {
	sev := Severity(strings.ToLower(strings.TrimSpace(s)))
	return sev, sev.Rank() > 0
}

// FindingKind names one kind of disagreement; Kinds says everything else
// about each (docs/design.md, "Findings").
type FindingKind string

// The finding kinds.
const (
	Duplicate           FindingKind = "duplicate"
	SuspectedDuplicate  FindingKind = "suspected_duplicate"
	Orphan              FindingKind = "orphan"
	PaidWithoutEvidence FindingKind = "paid_without_evidence"
	AmountMismatch      FindingKind = "amount_mismatch"
	StatusMismatch      FindingKind = "status_mismatch"
	StaleLease          FindingKind = "stale_lease"
	UnresolvedUnknown   FindingKind = "unresolved_unknown"
	ConflictingLink     FindingKind = "conflicting_link"
)

// SettledByObject reports whether a run that decided on one of the
// objects of a finding of kind k settles it, and not only one that
// decided on its obligation: an orphan (it has none), and a suspected
// duplicate (reported for its nearest twin's obligation, which the run
// may not decide on). Every other finding is found only of an obligation
// the run decides on, and an object may link to it and also to one the
// run decides on (a conflict): it is settled by its obligation alone
// (docs/design.md, "Coverage").
func (k FindingKind) SettledByObject() bool {
	return k == Orphan || k == SuspectedDuplicate
}

// AboutOutcome reports whether a finding of kind k is about an
// obligation's unknown outcome (a stale lease, an unresolved unknown). A
// run that decides on the obligation decides it even where it did not
// read all of the obligation's records: a record a fuller read adds can
// only take such a finding away, never bring one (docs/design.md,
// "Coverage").
func (k FindingKind) AboutOutcome() bool {
	return k == StaleLease || k == UnresolvedUnknown
}

// Finding is one disagreement between the obligations and the provider.
type Finding struct {
	// Account is the Stripe account of the finding's obligation and
	// objects: empty for the platform's own (see ProviderObject.Account);
	// AccountName is its display name when Stripe gives one, for people.
	Account, AccountName string
	Kind                 FindingKind
	Severity             Severity
	ObligationID         string   // empty when no obligation is involved (an orphan)
	ProviderIDs          []string // sorted
	// Money is the obligation's money, or the provider object's when there
	// is no obligation.
	Money Money
	// AtRisk is the money that may have moved wrongly or not at all: the
	// extra refunds of a duplicate, an orphan's amount, a difference.
	AtRisk Money
	// Fingerprint identifies the disagreement across runs: the same problem
	// has the same fingerprint on every run, whatever the input order.
	Fingerprint string
	// ContentHash changes when what the finding says (money at risk,
	// provider ids) changes, so that a changed finding is alerted again.
	ContentHash string
	// Detail is one sentence for a finance reader.
	Detail string
	// Target is what the finding's money concerns beyond its obligation:
	// the charge or payment intent a refund refunds, or a charge's intent;
	// empty when there is none. Alerts group findings of one kind and one
	// target (docs/design.md, "Alert lifecycle").
	Target string
	// PaidOut is set on a finding whose money moved out (a refund) rather
	// than in: an orphan, a duplicate or a suspected one; Meaning reads
	// it.
	PaidOut bool
}

// Fingerprint is the stable identity of a finding (docs/design.md, "Findings"): its kind and
// obligation id, plus the provider object's id where the finding is about
// an object rather than an obligation (orphan, suspected duplicate,
// conflict). Pass objectID empty for the others.
func Fingerprint(kind FindingKind, obligationID, objectID string) string {
	return hashParts(string(kind), obligationID, objectID)
}

// AccountFingerprint is Fingerprint within one Stripe account: the same
// as Fingerprint on the platform's own (account empty), so that the
// findings of a reconciler that read only the platform keep their
// identity, and apart for each connected account, whose obligations and
// objects are its own (docs/design.md, "Accounts").
func AccountFingerprint(account string, kind FindingKind, obligationID, objectID string) string {
	if account == "" {
		return Fingerprint(kind, obligationID, objectID)
	}
	return hashParts(string(kind), obligationID, objectID, "account", account)
}

// ContentHash hashes what a finding says, to tell when it changed.
func ContentHash(atRisk Money, providerIDs []string) string {
	ids := slices.Clone(providerIDs)
	slices.Sort(ids)
	parts := append([]string{strconv.FormatInt(atRisk.Amount, 10), atRisk.Currency}, ids...)
	return hashParts(parts...)
}

func hashParts(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		// Length-prefixed so that ("ab","c") and ("a","bc") differ.
		h.Write([]byte(strconv.Itoa(len(p))))
		h.Write([]byte{':'})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// Transition is one state change the reconciler decided, with what it was
// decided from, for the store's compare-and-set, and its evidence.
type Transition struct {
	ObligationID string
	From         State
	To           State
	// FromRaw and FromLeaseExpiresAt are the values read: the store updates
	// the row only if they are still there.
	FromRaw            string
	FromLeaseExpiresAt time.Time // zero when NULL
	// ProviderID is the provider object that proves the change; the store
	// fills obligation.provider_id with it only where that was NULL.
	ProviderID string
	// Money is the obligation's, for the reports; the store writes none.
	Money Money
}

// Route is how a provider object was linked to an obligation.
type Route string

// The link routes, in priority order.
const (
	RouteProviderID     Route = "provider_id"
	RouteIdempotencyKey Route = "idempotency_key"
	RouteMetadataID     Route = "metadata_obligation_id"
	RouteMetadataKey    Route = "metadata_idempotency_key"
)

// Link ties one provider object to one obligation.
type Link struct {
	ObjectID     string
	ObligationID string
	Route        Route
}

// CompareFindings orders findings most severe first, then by kind,
// obligation id and fingerprint (unique within a result: a total order):
// the order of a pass's findings, and of the alerts it queues about them.
func CompareFindings(a, b Finding) int {
	return cmp.Or(
		cmp.Compare(b.Severity.Rank(), a.Severity.Rank()),
		strings.Compare(string(a.Kind), string(b.Kind)),
		strings.Compare(a.ObligationID, b.ObligationID),
		strings.Compare(a.Fingerprint, b.Fingerprint),
	)
}

// Severe reports whether any finding is at or above the given severity.
func Severe(fs []Finding, min Severity) bool {
	for _, f := range fs {
		if f.Severity.Rank() >= min.Rank() {
			return true
		}
	}
	return false
}
