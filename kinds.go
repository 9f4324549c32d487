package reconcile

// KindInfo is everything the house says about one finding kind, in one
// place (docs/design.md, "Findings"): its severity, the name finance reads,
// what it means in plain words, and what a person does next. The matcher
// decides when a kind is found; everything that shows a finding (Slack,
// the reports, CSV, metrics) reads its words and order from here. Adding a
// kind is one entry here plus its rule in the matcher.
type KindInfo struct {
	Kind     FindingKind
	Severity Severity
	// Label is finance's name of the kind: "Duplicate payment".
	Label string
	// Means says when the kind is found, in plain words.
	Means string
	// Do is the one line that says what a person does next.
	Do string
}

// Kinds lists every finding kind in its display order: most severe first,
// and within a severity the order people act in.
var Kinds = []KindInfo{
	{Kind: Duplicate, Severity: Critical, Label: "Duplicate payment",
		Means: "one obligation is linked to two or more succeeded provider objects: money moved more than once",
		Do:    "Confirm with the customer and recover the extra money; do not retry the obligation."},
	{Kind: PaidWithoutEvidence, Severity: Critical, Label: "Paid without evidence",
		Means: "the obligation is PAID but the provider has no record of it (its records were all read, or the id it names does not exist)",
		Do:    "Look for the payment in the Stripe dashboard before anyone tells the customer it is paid; if there is none, send the obligation back for review."},
	{Kind: StatusMismatch, Severity: Critical, Label: "Status mismatch",
		Means: "PAID but the provider's object failed or was canceled; or FAILED, APPROVED, PENDING_APPROVAL, REQUIRES_REVIEW or a state the configuration does not map, although money moved",
		Do:    "Compare the obligation's state with Stripe's record and correct the obligation by hand; do not retry it until they agree."},
	{Kind: SuspectedDuplicate, Severity: High, Label: "Suspected duplicate",
		Means: "an unlinked succeeded object has the same kind, target and money as a linked one within the duplicate window",
		Do:    "Check whether this second movement of the same amount was intended; if not, recover it from the customer's account and record why."},
	{Kind: Orphan, Severity: High, Label: "Money moved without an obligation",
		Means: "a succeeded provider object that no obligation accounts for (a refund made by hand in the dashboard, a charge from another system)",
		Do:    "Find who moved this money outside the workflow; record it against an obligation or reverse it."},
	{Kind: AmountMismatch, Severity: High, Label: "Amount mismatch",
		Means: "linked, but amount or currency differ",
		Do:    "Compare the two amounts and settle the difference with the customer; correct the obligation if it is the one that is wrong."},
	{Kind: ConflictingLink, Severity: High, Label: "Conflicting link",
		Means: "one provider object links to two different obligations; neither is changed",
		Do:    "One Stripe object is linked to two obligations: decide which one it belongs to and correct the other's provider id or metadata."},
	{Kind: StaleLease, Severity: Warning, Label: "Stalled payment (stale lease)",
		Means: "EXECUTING, the worker's lease expired, and the provider has no succeeded object yet (or not all its records were read to confirm the one it has)",
		Do:    "A worker stopped mid-payment: check Stripe before anyone retries, then let the workflow resume or fail the obligation."},
	{Kind: UnresolvedUnknown, Severity: Warning, Label: "Outcome still unknown",
		Means: "CONFIRMATION_UNKNOWN and the provider shows no success (the detail says if it shows only failures, or which records were not read)",
		Do:    "Stripe shows no successful payment for it yet: confirm with Stripe before retrying, and retry only with the same idempotency key."},
	{Kind: Unverified, Severity: Info, Label: "Unverified",
		Means: "PAID, nothing links to it, and its absence could not be proved either (reported only when asked for)",
		Do:    "Review it with `reconcile trace OBLIGATION_ID`."},
}

// Unverified is an informational kind: a PAID obligation to which nothing
// links, where the run could not prove absence either. The matcher reports
// it only when asked (matcher.Options.ReportUnverified).
const Unverified FindingKind = "unverified"

// FindingKinds lists the kinds of the design's table (every kind of Kinds
// but the informational ones), in display order.
var FindingKinds = func() []FindingKind {
	var ks []FindingKind
	for _, k := range Kinds {
		if k.Severity != Info {
			ks = append(ks, k.Kind)
		}
	}
	return ks
}()

// Info returns the kind's entry of Kinds; a kind not in it is
// informational, labelled by its name.
func (k FindingKind) Info() KindInfo {
	for _, i := range Kinds {
		if i.Kind == k {
			return i
		}
	}
	return KindInfo{Kind: k, Severity: Info}
}

// Severity is the kind's fixed severity (Kinds); unknown kinds are
// informational.
func (k FindingKind) Severity() Severity { return k.Info().Severity }

// Order is the kind's place in Kinds, for display; unknown kinds come
// last.
func (k FindingKind) Order() int {
	for i, info := range Kinds {
		if info.Kind == k {
			return i
		}
	}
	return len(Kinds)
}
