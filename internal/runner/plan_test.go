package runner

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/store"
)

// planNow is the planner tests' clock; day and minute keep their windows
// readable.
var planNow = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

const (
	day    = 24 * time.Hour
	minute = time.Minute
)

// ago is planNow less d.
func ago(d time.Duration) time.Time { return planNow.Add(-d) }

// span is the window from planNow less from to planNow less to.
func span(from, to time.Duration) reconcile.Window {
	return reconcile.Window{From: ago(from), To: ago(to)}
}

// cursors are a mirror's: every object kind mirrored over objects, the
// keys over keys, the change feed over changes.
func cursors(objects, keys, changes reconcile.Window) store.SyncCursors {
	return store.SyncCursors{
		Objects: map[reconcile.ObjectKind]reconcile.Window{reconcile.Charge: objects, reconcile.Refund: objects, reconcile.PaymentIntent: objects},
		Keys:    keys,
		Changes: changes,
	}
}

// planned is what a test states of a plan.
type planned struct {
	Mode, Reason         string
	Fresh, Events, Older reconcile.Window
	Since, Seen          time.Time
	FeedOK               bool
	KeysFrom             time.Time
}

// TestPlanSync pins every reason a mirrored pass reads its coverage in
// full, and what an incremental pass lists, from where and since when
// (docs/design.md, "Reading the provider", "Coverage").
func TestPlanSync(t *testing.T) {
	// nightly is a mirror brought up to date a day ago, complete over the
	// 90 days before, its feed running for 60.
	nightly := cursors(span(90*day, day), span(90*day, day), span(60*day, day))
	// A feed a day inside Stripe's retention less the overlap still counts; a second
	// older does not.
	atMargin := cursors(span(90*day, day), span(90*day, day), span(60*day, 29*day-10*minute))
	pastMargin := cursors(span(90*day, day), span(90*day, day), span(60*day, 29*day-10*minute+time.Second))
	oneKindMissing := nightly
	oneKindMissing.Objects = map[reconcile.ObjectKind]reconcile.Window{reconcile.Charge: span(90*day, day), reconcile.Refund: span(90*day, day)}

	for _, tt := range []struct {
		name string
		// cur nil: the runner keeps no mirror.
		cur           *store.SyncCursors
		cover         reconcile.Window
		full, canSync bool
		want          planned
	}{
		{
			name:  "no mirror: every pass reads its coverage, nothing else planned",
			cover: span(10*day, 0), canSync: true,
			want: planned{Mode: SyncOff, Fresh: span(10*day, 0)},
		},
		{
			name: "a full read asked for", cur: &nightly,
			cover: span(10*day, 0), full: true, canSync: true,
			want: planned{Mode: SyncFull, Reason: "a full read was asked for", Fresh: span(10*day, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			name: "the provider cannot sync", cur: &nightly,
			cover: span(10*day, 0),
			want: planned{Mode: SyncFull, Reason: "the provider reader cannot read incrementally", Fresh: span(10*day, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			name: "an empty mirror", cur: &store.SyncCursors{},
			cover: span(10*day, 0), canSync: true,
			want: planned{Mode: SyncFull, Reason: "the mirror is empty", Fresh: span(10*day, 0),
				Since: ago(10 * minute), Seen: ago(10 * minute)},
		},
		{
			name: "a mirror that never held one kind of object", cur: &oneKindMissing,
			cover: span(10*day, 0), canSync: true,
			want: planned{Mode: SyncFull, Reason: "the mirror is empty", Fresh: span(10*day, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			name: "a feed last brought up to date a second past Stripe's retention less the margin", cur: &pastMargin,
			cover: span(40*day, 0), canSync: true,
			want: planned{Mode: SyncFull, Reason: "the mirror was last brought up to date before Stripe's oldest events", Fresh: span(40*day, 0),
				Since: ago(10 * minute), Seen: ago(10 * minute), KeysFrom: ago(90 * day)},
		},
		{
			name: "a feed exactly at the margin: incremental, the events read from where the feed ends", cur: &atMargin,
			cover: span(40*day, 0), canSync: true,
			want: planned{Mode: SyncIncremental, Fresh: span(day+10*minute, 0), Events: span(29*day, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			name:  "keys that stop before Stripe's retention",
			cur:   new(cursors(span(90*day, day), span(90*day, 29*day), span(60*day, day))),
			cover: span(10*day, 0), canSync: true,
			want: planned{Mode: SyncFull, Reason: "the mirror's idempotency keys stop before Stripe's oldest events", Fresh: span(10*day, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true},
		},
		{
			name: "a coverage that starts where the mirror ends, less the overlap", cur: &nightly,
			cover: span(day+10*minute, 0), canSync: true,
			want: planned{Mode: SyncFull, Reason: "the window starts after the mirror ends", Fresh: span(day+10*minute, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			name:  "a mirror holding less than the overlap",
			cur:   new(cursors(span(day+5*minute, day), span(90*day, day), span(60*day, day))),
			cover: span(10*day, 0), canSync: true,
			want: planned{Mode: SyncFull, Reason: "the window starts after the mirror ends", Fresh: span(10*day, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			// A full pass moved the objects and keys to an hour ago and
			// left the feed ten days behind: the events since outnumber
			// three days' objects.
			name:  "a coverage shorter than the time since the feed was brought up to date",
			cur:   new(cursors(span(90*day, time.Hour), span(90*day, time.Hour), span(60*day, 10*day))),
			cover: span(3*day, 0), canSync: true,
			want: planned{Mode: SyncFull, Reason: "the window is shorter than the time since the mirror was brought up to date", Fresh: span(3*day, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			name: "incremental inside the mirror: what is new and the events since, less the overlap", cur: &nightly,
			cover: span(10*day, 0), canSync: true,
			want: planned{Mode: SyncIncremental, Fresh: span(day+10*minute, 0), Events: span(day+10*minute, 0),
				Since: ago(60 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(90 * day)},
		},
		{
			name:  "incremental, with the stretch before the mirror listed in full",
			cur:   new(cursors(span(20*day, day), span(20*day, day), span(20*day, day))),
			cover: span(40*day, 0), canSync: true,
			want: planned{Mode: SyncIncremental, Fresh: span(day+10*minute, 0), Events: span(day+10*minute, 0), Older: span(40*day, 20*day),
				Since: ago(20 * day), Seen: ago(10 * minute), FeedOK: true, KeysFrom: ago(20 * day)},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := planSync(tt.cur, tt.cover, planNow, tt.full, tt.canSync)
			got := planned{Mode: p.report.Mode, Reason: p.report.Reason, Fresh: p.report.Fresh, Events: p.report.Events,
				Older: p.report.Older, Since: p.since, Seen: p.seen, FeedOK: p.feedOK, KeysFrom: p.keysFrom}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			// The stretch the pass lists before the mirror is the one it
			// reports, and the plan keeps the cursors it was made from.
			if p.older != p.report.Older {
				t.Errorf("plan lists %v before the mirror, reports %v", p.older, p.report.Older)
			}
			var cur store.SyncCursors
			if tt.cur != nil {
				cur = *tt.cur
			}
			if diff := cmp.Diff(cur, p.cur); diff != "" {
				t.Errorf("plan's cursors (-given +kept):\n%s", diff)
			}
		})
	}
}

// TestCursorsAfter pins where a completed pass leaves the mirror's
// cursors: which windows it joins to the old ones, which it starts anew,
// and which it leaves (docs/design.md, "Reading the provider").
func TestCursorsAfter(t *testing.T) {
	// The plans state only what cursorsAfter reads of them.
	nightly := cursors(span(90*day, day), span(90*day, day), span(60*day, day))
	incremental := syncPlan{report: SyncReport{Mode: SyncIncremental, Events: span(day+10*minute, 0)}, cur: nightly,
		seen: ago(10 * minute), feedOK: true}
	for _, tt := range []struct {
		name     string
		plan     syncPlan
		cover    reconcile.Window
		keysRead []reconcile.Window
		// objects is every kind's window; a zero keys or changes window
		// leaves that cursor as it is.
		objects, keys, changes reconcile.Window
	}{
		{
			name: "incremental: objects and keys joined up to now, the feed brought up to now",
			plan: incremental, cover: span(10*day, 0),
			objects: span(90*day, 0), keys: span(90*day, 0), changes: span(60*day, 0),
		},
		{
			name: "full without a feed gap: objects and keys joined, the feed left",
			plan: syncPlan{report: SyncReport{Mode: SyncFull}, cur: nightly, seen: ago(10 * minute), feedOK: true}, cover: span(10*day, 0),
			objects: span(90*day, 0), keys: span(90*day, 0),
		},
		{
			// The old objects meet the coverage, yet a gap may have left
			// them stale; the keys do not go stale, but Stripe keeps none
			// of the events before its retention, so the keys read do not
			// meet the old ones.
			name: "full after a feed gap: the objects start over, the feed starts at seen",
			plan: syncPlan{report: SyncReport{Mode: SyncFull}, cur: cursors(span(60*day, 40*day), span(90*day, 40*day), span(60*day, 40*day)),
				seen: ago(10 * minute)},
			cover:   span(45*day, 0),
			objects: span(45*day, 0), keys: span(30*day, 0), changes: span(10*minute, 10*minute),
		},
		{
			name: "full after a feed gap, keys that meet: the keys joined",
			plan: syncPlan{report: SyncReport{Mode: SyncFull}, cur: cursors(span(60*day, 40*day), span(90*day, 5*day), span(60*day, 40*day)),
				seen: ago(10 * minute)},
			cover:   span(10*day, 0),
			objects: span(10*day, 0), keys: span(90*day, 0), changes: span(10*minute, 10*minute),
		},
		{
			name: "incremental with the stretch before the mirror listed: its keys join",
			plan: syncPlan{report: SyncReport{Mode: SyncIncremental, Events: span(day+10*minute, 0)},
				cur: cursors(span(20*day, day), span(20*day, day), span(20*day, day)), seen: ago(10 * minute), feedOK: true},
			cover: span(40*day, 0), keysRead: []reconcile.Window{span(30*day, 20*day)},
			objects: span(40*day, 0), keys: span(30*day, 0), changes: span(20*day, 0),
		},
		{
			// The runner moved the coverage back from 10 days to 40 for
			// an obligation only the subject named, and listed the stretch.
			name: "the keys of a stretch listed further back, for an obligation only the subject named, join too",
			plan: syncPlan{report: SyncReport{Mode: SyncIncremental, Events: span(day+10*minute, 0)},
				cur: cursors(span(90*day, day), span(20*day, day), span(60*day, day)), seen: ago(10 * minute), feedOK: true},
			cover: span(40*day, 0), keysRead: []reconcile.Window{span(30*day, 10*day)},
			objects: span(90*day, 0), keys: span(30*day, 0), changes: span(60*day, 0),
		},
		{
			name: "a pass that does not meet the old coverage, after it, keeps its own",
			plan: syncPlan{report: SyncReport{Mode: SyncFull}, cur: cursors(span(90*day, 50*day), span(90*day, 50*day), span(60*day, day)),
				seen: ago(10 * minute), feedOK: true},
			cover:   span(10*day, 0),
			objects: span(10*day, 0), keys: span(10*day, 0),
		},
		{
			// Its events are all gone from Stripe: the keys cursor is left.
			name: "a pass over an old window that does not meet the old coverage keeps the later one",
			plan: syncPlan{report: SyncReport{Mode: SyncFull}, cur: cursors(span(20*day, day), span(20*day, day), span(20*day, day)),
				seen: ago(10 * minute), feedOK: true},
			cover:   span(60*day, 40*day),
			objects: span(20*day, day),
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := cursorsAfter(tt.plan, tt.cover, planNow, tt.keysRead)
			want := cursors(tt.objects, tt.keys, tt.changes)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("cursors (-want +got):\n%s", diff)
			}
		})
	}
}
