package reconcile

import "time"

// Trigger is what started a run.
type Trigger string

// The run triggers.
const (
	TriggerCron   Trigger = "cron"
	TriggerManual Trigger = "manual"
	TriggerDemo   Trigger = "demo"
)

// RunStatus is how a run ended.
type RunStatus string

// The run statuses. A dry run is recorded nowhere; the status exists for
// reports.
const (
	RunCompleted RunStatus = "completed"
	RunFailed    RunStatus = "failed"
	RunDry       RunStatus = "dry_run"
	// RunRunning is a pass run as jobs between its plan and its last job
	// (docs/design.md, "Passes as jobs"); a one-process pass is recorded
	// only once it ends.
	RunRunning RunStatus = "running"
)

// Counts are the sizes of a run's inputs and of what linked.
type Counts struct {
	Obligations     int `json:"obligations"`
	ProviderObjects int `json:"provider_objects"`
	Linked          int `json:"linked"`
}

// Run is one reconciliation pass.
type Run struct {
	ID       string
	Trigger  Trigger
	Window   Window
	Started  time.Time
	Finished time.Time
	Status   RunStatus
	Counts   Counts
	// Stripe is how reading the provider went; nil where it is not known
	// (a run recorded before the figures were kept).
	Stripe *StripeStats
}

// StripeStats are a run's requests to Stripe that were retried and the
// 429 answers among them (docs/design.md, "The schema `reconcile`").
type StripeStats struct {
	Retries     int
	RateLimited int
}

// AlertEvent is why an alert is sent.
type AlertEvent string

// The alert events. A summary is one per run that found anything new,
// changed or resolved; the others are about one finding.
const (
	AlertSummary  AlertEvent = "summary"
	AlertFiring   AlertEvent = "firing"
	AlertRepeat   AlertEvent = "repeat"
	AlertResolved AlertEvent = "resolved"
)

// Alert is one row of the alert outbox: written in the same transaction as
// the findings it announces, drained to Slack afterwards, marked sent only
// once Slack accepted it.
type Alert struct {
	ID    int64
	RunID string
	Event AlertEvent
	// Finding is the finding as it stood when the row was written; zero for
	// a summary.
	Finding Finding
	// Changed is set on a firing alert for a finding that was alerted
	// before and whose content (money at risk, provider ids) changed since.
	Changed bool
	// Summary is set for Event == AlertSummary.
	Summary   *RunSummary
	CreatedAt time.Time
	Attempts  int
	// ThreadTS is the Slack ts of the message that first announced this
	// finding, where a resolved notice or a repeat replies; empty if none.
	ThreadTS string
	// UnknownOutcome is set when an earlier attempt timed out after the
	// request went out: Slack may have shown it, so a resend says so.
	UnknownOutcome bool
}

// SlackMessage is a message Slack accepted from the bot, as posted: what
// the channel shows under Channel and TS, and the findings it alerts about
// as open, so that a button pressed on it, or an acknowledgement on the
// findings page, can find them (docs/design.md, "Buttons in Slack").
type SlackMessage struct {
	Channel, TS string
	Kind        string // alerts' message kind: finding, cause, group, summary, overflow
	RunID       string
	// Fingerprints are the findings the message announces as open (firing
	// or still open); none for a summary, an overflow or resolutions.
	Fingerprints []string
	Blocks       []byte // Block Kit JSON as posted; nil when posted as text only
	Text         string
	PostedAt     time.Time
}

// RunSummary is what a run's summary message says. It names only what is
// new, changed or resolved in that run, so that it never re-alerts an old
// finding by the back door.
type RunSummary struct {
	RunID  string `json:"run_id"`
	Window Window `json:"window"`
	Counts Counts `json:"counts"`
	// New, Changed and Resolved count this run's findings by kind.
	New      map[FindingKind]int `json:"new,omitempty"`
	Changed  map[FindingKind]int `json:"changed,omitempty"`
	Resolved map[FindingKind]int `json:"resolved,omitempty"`
	// AtRisk sums the money at risk of the new and changed findings, one
	// entry per currency, sorted by currency. The sums are exact however
	// large; a stored summary written when these were Money decodes as
	// before (see Total's JSON).
	AtRisk []Total `json:"at_risk,omitempty"`
	// Open counts every finding open after the run, by kind.
	Open map[FindingKind]int `json:"open,omitempty"`
	// ByMeaning splits AtRisk by what the money is; nil in a summary
	// stored before it existed.
	ByMeaning *AtRiskByMeaning `json:"by_meaning,omitempty"`
	// Confirmed counts the unknown outcomes this run confirmed from the
	// provider's records and marked PAID; ConfirmedTotal is their money.
	Confirmed      int     `json:"confirmed_paid,omitempty"`
	ConfirmedTotal []Total `json:"confirmed_paid_total,omitempty"`
}

// Conclusions are what one pass concluded, as the store applies them:
// its findings and PAID transitions, its counts, what it decided on and
// read, and what it settled.
type Conclusions struct {
	Findings    []Finding
	Transitions []Transition
	Counts      Counts
	// ObligationIDs are the obligations the pass decided on, and
	// ObjectIDs every provider object it read, sorted.
	ObligationIDs []string
	ObjectIDs     []string
	// Settled is what the pass settled: a finding of an earlier run whose
	// obligation or objects are in it and which this pass did not find
	// again is resolved.
	Settled Settled
	// Elsewhere holds, sorted, the fingerprints of findings a shard of a
	// pass concluded that are another shard's to report
	// (reconcile.FindingShard): the part leaves them as they stand
	// rather than resolve them, since they were found (docs/design.md,
	// "Shards").
	Elsewhere []string
	// Incremental is set when the pass matched only what can have changed
	// since the last pass that matched (docs/design.md, "Incremental
	// matching"): ObligationIDs and ObjectIDs then hold what it matched
	// again, and the stored conclusions of the rest stand.
	Incremental bool
}

// Settled is what one pass settled, sorted: the obligations it decided on
// whose records it read in full, and the objects created in its subject
// or retrieved by id and linked to an obligation it decided on
// (docs/design.md, "Coverage"). An obligation whose records were not all
// read, an object read only as evidence outside the subject, and one
// retrieved for an obligation it does not link to (a refund's target)
// could hide what an earlier run found; their findings are left as they
// stand, but for those about a decided obligation's outcome
// (FindingKind.AboutOutcome), which Conclusions.ObligationIDs settles. A
// finding is settled by its obligation alone, but for an orphan and a
// suspected duplicate (FindingKind.SettledByObject): by its objects too.
//
// Objects holds each object's identity across accounts,
// AccountObject(account, id): its id alone on the platform's account, as
// a platform-only reconciler wrote it, else account/id, since Stripe's ids
// are unique only within an account. Obligations holds plain ids: an
// obligation's id is unique across accounts.
type Settled struct {
	Obligations []string
	Objects     []string
}
