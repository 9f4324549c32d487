package alerts

import (
	"testing"
	"time"

	"reconcile"
)

// Every row of the lifecycle's truth table, in the order of
// docs/design.md, "Alert lifecycle". The repeat interval is a day.
func TestDecide(t *testing.T) {
	const day = 24 * time.Hour
	now := testNow
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	same := &reconcile.Finding{Kind: reconcile.Duplicate, ObligationID: "refund:1", Fingerprint: "fp1", ContentHash: "h1"}
	other := &reconcile.Finding{Kind: reconcile.Duplicate, ObligationID: "refund:1", Fingerprint: "fp1", ContentHash: "h2"}
	var (
		none     = Decision{}
		fire     = Decision{Action: ActionFire, ClearAck: true, Alerted: true}
		changed  = Decision{Action: ActionChanged, ClearAck: true, Alerted: true}
		repeat   = Decision{Action: ActionRepeat, Alerted: true}
		resolved = Decision{Action: ActionResolved}
	)
	tests := []struct {
		name    string
		stored  *Stored
		found   *reconcile.Finding
		settled bool
		want    Decision
	}{
		// Unknown.
		{name: "unknown, found", found: same, want: fire},
		{name: "unknown, found where the run settled it", found: same, settled: true, want: fire},
		{name: "unknown, not found", settled: true, want: none},

		// Resolved, found again: a new episode, whatever came before.
		{name: "resolved, found again with the same content",
			stored: &Stored{Resolved: true, ContentHash: "h1", LastAlerted: ago(time.Hour)}, found: same, want: fire},
		{name: "resolved, found again with other content",
			stored: &Stored{Resolved: true, ContentHash: "h1", LastAlerted: ago(time.Hour)}, found: other, want: fire},
		{name: "resolved and acknowledged, found again",
			stored: &Stored{Resolved: true, ContentHash: "h1", Acknowledged: true, LastAlerted: ago(time.Hour)}, found: same, want: fire},
		{name: "resolved, found again while its resolved alert is unsent",
			stored: &Stored{Resolved: true, ContentHash: "h1", LastAlerted: ago(time.Hour), Unsent: true}, found: same, want: fire},

		// Resolved, not found: nothing to resolve again.
		{name: "resolved, not found, settled",
			stored: &Stored{Resolved: true, ContentHash: "h1", LastAlerted: ago(2 * day)}, settled: true, want: none},
		{name: "resolved, not found, not settled",
			stored: &Stored{Resolved: true, ContentHash: "h1", LastAlerted: ago(2 * day)}, want: none},

		// Open, found with the same content: a repeat, when due.
		{name: "open, same content, repeat not due",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(day - time.Minute)}, found: same, want: none},
		{name: "open, same content, repeat due",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(day + time.Minute)}, found: same, want: repeat},
		{name: "open, same content, exactly one interval since alerted",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(day)}, found: same, want: repeat},
		{name: "open, same content, never alerted",
			stored: &Stored{ContentHash: "h1"}, found: same, want: repeat},
		{name: "open, same content, repeat due, settled",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(2 * day)}, found: same, settled: true, want: repeat},
		{name: "open, same content, repeat due, acknowledged",
			stored: &Stored{ContentHash: "h1", Acknowledged: true, LastAlerted: ago(2 * day)}, found: same, want: none},
		{name: "open, same content, repeat not due, acknowledged",
			stored: &Stored{ContentHash: "h1", Acknowledged: true, LastAlerted: ago(time.Hour)}, found: same, want: none},
		{name: "open, same content, repeat due, an alert unsent",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(2 * day), Unsent: true}, found: same, want: none},
		{name: "open, same content, repeat due, acknowledged and an alert unsent",
			stored: &Stored{ContentHash: "h1", Acknowledged: true, LastAlerted: ago(2 * day), Unsent: true}, found: same, want: none},
		{name: "open, same content, alerted long ago but sent just now",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(2 * day), LastSent: ago(time.Hour)}, found: same, want: none},
		{name: "open, same content, sent later than alerted, an interval since sent",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(3 * day), LastSent: ago(day)}, found: same, want: repeat},
		{name: "open, same content, sent long before alerted, alerted just now",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(time.Hour), LastSent: ago(3 * day)}, found: same, want: none},
		{name: "open, same content, sent just now, never alerted",
			stored: &Stored{ContentHash: "h1", LastSent: ago(time.Hour)}, found: same, want: none},

		// Open, found with other content: fire again as changed.
		{name: "open, changed content",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(2 * day)}, found: other, want: changed},
		{name: "open, changed content, acknowledged",
			stored: &Stored{ContentHash: "h1", Acknowledged: true, LastAlerted: ago(2 * day)}, found: other, want: changed},
		{name: "open, changed content, repeat not due",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(time.Hour)}, found: other, want: changed},
		{name: "open, changed content, an alert unsent",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(time.Hour), Unsent: true}, found: other, want: changed},

		// Open, not found: resolved only where the run settled it.
		{name: "open, not found, settled",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(time.Hour)}, settled: true, want: resolved},
		{name: "open and acknowledged, not found, settled",
			stored: &Stored{ContentHash: "h1", Acknowledged: true, LastAlerted: ago(time.Hour)}, settled: true, want: resolved},
		{name: "open, not found, settled, an alert unsent",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(time.Hour), Unsent: true}, settled: true, want: resolved},
		{name: "open, not found, not settled",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(time.Hour)}, want: none},
		{name: "open, not found, not settled, repeat due",
			stored: &Stored{ContentHash: "h1", LastAlerted: ago(2 * day)}, want: none},
	}
	for _, tt := range tests {
		if got := Decide(tt.stored, tt.found, tt.settled, day, now); got != tt.want {
			t.Errorf("Decide(%s) = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// The store writes what a Decision says without second-guessing it, so
// its parts must agree for every input: only a found finding is alerted as
// firing or repeated, only one not found is resolved, and the
// acknowledgement and last alert follow the action.
func TestDecideConsistent(t *testing.T) {
	const day = 24 * time.Hour
	now := testNow
	times := []time.Time{{}, now.Add(-time.Hour), now.Add(-day), now.Add(-2 * day)}
	founds := []*reconcile.Finding{nil, {ContentHash: "h1"}, {ContentHash: "h2"}}
	storeds := []*Stored{nil}
	for _, resolved := range []bool{false, true} {
		for _, acked := range []bool{false, true} {
			for _, unsent := range []bool{false, true} {
				for _, alerted := range times {
					for _, sent := range times {
						storeds = append(storeds, &Stored{Resolved: resolved, ContentHash: "h1", Acknowledged: acked,
							LastAlerted: alerted, LastSent: sent, Unsent: unsent})
					}
				}
			}
		}
	}
	for _, s := range storeds {
		for _, f := range founds {
			for _, settled := range []bool{false, true} {
				d := Decide(s, f, settled, day, now)
				alerted := d.Action == ActionFire || d.Action == ActionChanged || d.Action == ActionRepeat
				fresh := d.Action == ActionFire || d.Action == ActionChanged
				var bad string
				switch {
				case f == nil && alerted:
					bad = "alerts as firing or repeat a finding the run did not find"
				case f != nil && d.Action == ActionResolved:
					bad = "resolves a finding the run found"
				case d.Alerted != alerted:
					bad = "moves the last alert without a firing or repeat alert, or the other way round"
				case d.ClearAck != fresh:
					bad = "clears the acknowledgement other than on a new episode or changed content"
				}
				if bad != "" {
					t.Errorf("Decide(%+v, %+v, settled %t) = %+v: %s", s, f, settled, d, bad)
				}
			}
		}
	}
}

func TestActionEvent(t *testing.T) {
	tests := []struct {
		a           Action
		wantEvent   reconcile.AlertEvent
		wantChanged bool
		wantName    string
	}{
		{ActionNone, "", false, "none"},
		{ActionFire, reconcile.AlertFiring, false, "fire"},
		{ActionChanged, reconcile.AlertFiring, true, "changed"},
		{ActionRepeat, reconcile.AlertRepeat, false, "repeat"},
		{ActionResolved, reconcile.AlertResolved, false, "resolved"},
		{Action(9), "", false, "Action(9)"},
	}
	for _, tt := range tests {
		ev, changed := tt.a.Event()
		if ev != tt.wantEvent || changed != tt.wantChanged {
			t.Errorf("%s.Event() = %q, %t, want %q, %t", tt.wantName, ev, changed, tt.wantEvent, tt.wantChanged)
		}
		if got := tt.a.String(); got != tt.wantName {
			t.Errorf("Action(%d).String() = %q, want %q", int(tt.a), got, tt.wantName)
		}
	}
}
