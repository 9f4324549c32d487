package runner

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
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
		return reconcile.Obligation{ID: id, State: state, CreatedAt: created, UpdatedAt: updated}
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
