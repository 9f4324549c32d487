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
	// Meaning is what the money at risk of such a finding is.
	Meaning Meaning
}

// Kinds lists every finding kind in its display order: most severe first,
// and within a severity the order people act in. The words are finance's:
// what happened to the money and what to do, never how the code found it.
var Kinds = []KindInfo{
	{Kind: Duplicate, Severity: Critical, Meaning: PaidOutTooMuch, Label: "Paid twice",
		Means: "One approved payment or refund moved money two or more times at Stripe.",
		Do:    "Undo the extra one: refund an extra charge to the customer, or recover an extra refund; do not pay this obligation again."},
	{Kind: PaidWithoutEvidence, Severity: Critical, Meaning: Unconfirmed, Label: "Marked paid, not found at Stripe",
		Means: "Our records say paid, but Stripe has no completed payment for it.",
		Do:    "Find the payment in Stripe before anyone tells the customer it is paid; if there is none, send it back for review."},
	{Kind: StatusMismatch, Severity: Critical, Meaning: CollectedWrong, Label: "Our status disagrees with Stripe",
		Means: "Our records say paid and Stripe says it failed, or our records say not paid and Stripe moved the money.",
		Do:    "Compare our status with Stripe's and correct ours by hand; nobody retries it until they agree."},
	{Kind: SuspectedDuplicate, Severity: High, Meaning: PaidOutTooMuch, Label: "Possible duplicate payment",
		Means: "A second payment or refund of the same amount to the same place, soon after the first, that no approval accounts for.",
		Do:    "Check whether the second one was meant; if not, refund or recover it and note why."},
	{Kind: Orphan, Severity: High, Meaning: PaidOutTooMuch, Label: "Money moved outside the workflow",
		Means: "Money moved at Stripe that no approved payment accounts for, such as a refund made by hand in the dashboard.",
		Do:    "Find who moved it and why; record it against an approval or reverse it."},
	{Kind: AmountMismatch, Severity: High, Meaning: CollectedWrong, Label: "Wrong amount",
		Means: "Stripe moved a different amount or currency than was approved.",
		Do:    "Settle the difference with the customer, and correct our record if it is the one that is wrong."},
	{Kind: ConflictingLink, Severity: High, Meaning: CollectedWrong, Label: "One Stripe payment, two approvals",
		Means: "One Stripe payment matches two approved payments, so neither is marked paid.",
		Do:    "Decide which approval the payment belongs to and correct the other one's Stripe reference."},
	{Kind: StaleLease, Severity: Warning, Meaning: Unconfirmed, Label: "Payment stuck mid-way",
		Means: "The system stopped while making this payment, and Stripe shows no completed payment yet, or one that could not be confirmed because not all its records were read.",
		Do:    "Check Stripe before anyone retries; then let the payment finish or cancel it."},
	{Kind: UnresolvedUnknown, Severity: Warning, Meaning: Unconfirmed, Label: "Payment outcome unknown",
		Means: "We asked Stripe to pay but never heard back, and Stripe shows no completed payment yet, or one that could not be confirmed because not all its records were read.",
		Do:    "Do not pay again yet: confirm in Stripe first, and retry only with the same idempotency key."},
	{Kind: Unverified, Severity: Info, Meaning: Unconfirmed, Label: "Not confirmed",
		Means: "Marked paid, and Stripe's records could not confirm it either way (reported only when asked for).",
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
