package runner

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/store"
)

// The rows of an incremental pass's one scan are told apart as Read's
// scope and the open findings put them in it: a row created or updated
// since, or EXECUTING or CONFIRMATION_UNKNOWN, is changed, unless its last
// change is the reconciler's own transition; a row an open finding names
// is read as that, the reconciler's own transition included.
func TestSplitScanned(t *testing.T) {
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	old, after := since.Add(-24*time.Hour), since.Add(time.Hour)
	ob := func(id string, state reconcile.State, created, updated time.Time) reconcile.Obligation {
		return reconcile.Obligation{ID: id, State: state, CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(updated)}
	}
	scanned := []reconcile.Obligation{
		ob("created", reconcile.Approved, after, after),
		ob("updated", reconcile.Paid, old, after),
		ob("updated-at-since", reconcile.Paid, old, since),
		ob("executing", reconcile.Executing, old, old),
		ob("unknown-own", reconcile.ConfirmationUnknown, old, after),
		ob("own", reconcile.Paid, old, after),
		ob("own-open", reconcile.Paid, old, after),
		ob("own-later-changed", reconcile.Paid, old, after.Add(time.Minute)),
		ob("created-own", reconcile.Paid, after, after),
		ob("open", reconcile.Paid, old, old),
	}
	own := map[string]time.Time{"unknown-own": after, "own": after, "own-open": after, "own-later-changed": after, "created-own": after}
	open := map[string]bool{"own-open": true, "open": true, "created": true}
	changed, opened := splitScanned(scanned, since, own, open)
	ids := func(obs []reconcile.Obligation) []string {
		out := []string{}
		for _, o := range obs {
			out = append(out, o.ID)
		}
		return out
	}
	if diff := cmp.Diff([]string{"created", "updated", "updated-at-since", "executing", "unknown-own", "own-later-changed", "created-own"},
		ids(changed)); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"own-open", "open"}, ids(opened)); diff != "" {
		t.Errorf("opened (-want +got):\n%s", diff)
	}
}

// setMatched keeps, of each matched object, the least obligation it
// links to ("" for none), and knows no object the match did not hold.
func TestSetMatchedKeepsTheLeastLink(t *testing.T) {
	created := int64(3)
	t0 := time.Date(2026, 10, 20, 9, 0, 0, 0, time.UTC)
	st := &readState{created: &created}
	res := matcher.Result{
		Conclusions: reconcile.Conclusions{ObjectIDs: []string{"ch_a", "ch_b", "ch_c", "ch_d"}},
		Links: []reconcile.Link{
			{ObjectID: "ch_a", ObligationID: "o1"},
			{ObjectID: "ch_c", ObligationID: "o2"}, {ObjectID: "ch_c", ObligationID: "o3"},
			{ObjectID: "ch_d", ObligationID: "o4"},
		},
		NamesFrom: []reconcile.Stamp{0, 0, reconcile.StampOf(t0), 0},
	}
	st.setMatched(&res, reconcile.Run{ID: "run_1"}, time.Now(), "digest", nil)
	for _, c := range []struct {
		id, want string
		ok       bool
	}{{"ch_a", "o1", true}, {"ch_b", "", true}, {"ch_c", "o2", true}, {"ch_d", "o4", true}, {"ch_0", "", false}, {"ch_e", "", false}} {
		if got, ok := st.matched.linkOf(c.id); got.ObligationID != c.want || ok != c.ok {
			t.Errorf("linkOf(%q) = %q, %v; want %q, %v", c.id, got.ObligationID, ok, c.want, c.ok)
		}
	}
	if got, _ := st.matched.linkOf("ch_c"); !got.NamesFrom.Equal(t0) {
		t.Errorf("linkOf(ch_c) names from %v, want %v", got.NamesFrom, t0)
	}
	if m := st.matched.mark; m.RunID != "run_1" || m.Obligations != created || m.Digest != "digest" {
		t.Errorf("mark %+v", m)
	}
	// An incremental pass saves again the links it did not read whole
	// nor find stored as they are now: ch_c names from further back now.
	st.plan.report.Mode = SyncIncremental
	st.fresh = map[string]bool{"ch_a": true}
	st.stored = map[string]store.ObjectLink{"ch_b": {ObjectID: "ch_b"}, "ch_c": {ObjectID: "ch_c", ObligationID: "o2"},
		"ch_d": {ObjectID: "ch_d", ObligationID: "o9"}}
	want := []store.ObjectLink{{ObjectID: "ch_c", ObligationID: "o2", NamesFrom: t0}, {ObjectID: "ch_d", ObligationID: "o4"}}
	if got := st.matchSave().Relinked; !slices.Equal(got, want) {
		t.Errorf("relinked %+v, want %+v", got, want)
	}
}
