package alerts

import (
	"strconv"
	"time"

	"reconcile"
)

// Stored is what the store holds about one finding when a run's results
// are applied: the part of its row, and of its outbox rows, that decides
// what people are told next. Zero times stand for never.
type Stored struct {
	// Resolved is set when an earlier run resolved the finding; otherwise
	// it is open.
	Resolved bool
	// ContentHash is reconcile.ContentHash of the stored content (money at
	// risk, provider ids); a run that finds another has changed it.
	ContentHash string
	// Acknowledged is set when someone acknowledged the finding.
	Acknowledged bool
	// LastAlerted is when an alert about it was last queued.
	LastAlerted time.Time
	// LastSent is when Slack last accepted an alert about it.
	LastSent time.Time
	// Unsent is set while an alert about it still waits in the outbox.
	Unsent bool
}

// Action is what one run tells people about one finding.
type Action int

// The actions. The zero Action is ActionNone.
const (
	ActionNone     Action = iota // nothing to tell
	ActionFire                   // new, or found again after it was resolved: a firing alert
	ActionChanged                // open and found with other content: a firing alert marked changed
	ActionRepeat                 // open, unchanged and due again: a repeat alert
	ActionResolved               // open, not found where the run settled it: a resolved alert
)

var actionNames = [...]string{"none", "fire", "changed", "repeat", "resolved"}

// String names the action for logs and test failures.
func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// Event returns the outbox event that the action queues and whether that
// alert is marked changed; the event is empty for ActionNone.
func (a Action) Event() (ev reconcile.AlertEvent, changed bool) {
	switch a {
	case ActionFire:
		return reconcile.AlertFiring, false
	case ActionChanged:
		return reconcile.AlertFiring, true
	case ActionRepeat:
		return reconcile.AlertRepeat, false
	case ActionResolved:
		return reconcile.AlertResolved, false
	}
	return "", false
}

// Decision is what Decide concludes about one finding in one run, and what
// the store writes because of it besides the alert. A finding the run
// found stays (or becomes) open with the content found; one decided
// ActionResolved becomes resolved; anything not named here is kept.
type Decision struct {
	// Action is the alert to queue about the finding, if any.
	Action Action
	// ClearAck drops the acknowledgement: whoever acknowledged an earlier
	// episode or content did not see this one.
	ClearAck bool
	// Alerted moves the finding's last alert to now, the start of the
	// next repeat interval.
	Alerted bool
}

// Decide is the alert lifecycle of one finding (docs/design.md, "Alert
// lifecycle"): given what the store holds about it (nil if nothing), what
// this run found of it (nil if nothing), whether the run's scope settled it
// (matcher.Result.Settled; read only when the run did not find it), the
// repeat interval and now, it says what to tell people and what to
// record. Like Alertmanager's needsUpdate it is pure, so that the store
// can apply it inside its transaction and a table test can pin every
// case without a database.
func Decide(stored *Stored, found *reconcile.Finding, settled bool, repeat time.Duration, now time.Time) Decision {
	switch {
	case found == nil:
		// A narrow window proves nothing about what it did not look at:
		// only a run that settled the finding may resolve it.
		if stored != nil && !stored.Resolved && settled {
			return Decision{Action: ActionResolved}
		}
		return Decision{}
	case stored == nil || stored.Resolved:
		return Decision{Action: ActionFire, ClearAck: true, Alerted: true}
	case stored.ContentHash != found.ContentHash:
		return Decision{Action: ActionChanged, ClearAck: true, Alerted: true}
	case !stored.Acknowledged && !stored.Unsent && repeatDue(*stored, repeat, now):
		// An alert still waiting in the outbox (Slack down) is not
		// doubled by a repeat.
		return Decision{Action: ActionRepeat, Alerted: true}
	}
	return Decision{}
}

// repeatDue reports whether the repeat interval has passed since people
// were last told about the finding: since its last alert was queued, or,
// when that alert waited in the outbox (Slack down), since Slack took it.
// Otherwise an alert delivered late would be followed at once by a repeat.
func repeatDue(s Stored, repeat time.Duration, now time.Time) bool {
	last := s.LastAlerted
	if s.LastSent.After(last) {
		last = s.LastSent
	}
	return last.IsZero() || now.Sub(last) >= repeat
}
