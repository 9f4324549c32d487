package runner

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	"reconcile"
)

// lacking names what the decided obligations name and the listing
// lacks, and each of their ids the listing holds becomes the listing's
// own string; an obligation read only to link is left as it was.
func TestLackingSharesTheListingsIDs(t *testing.T) {
	listed := []string{strings.Clone("ch_a"), strings.Clone("ch_b"), strings.Clone("pi_c")}
	obs := []reconcile.Obligation{
		{ID: "o1", ProviderID: strings.Clone("ch_a")},
		{ID: "o2", ProviderID: strings.Clone("ch_z"), TargetID: strings.Clone("pi_c")},
		{ID: "o3", ProviderID: strings.Clone("ch_b")},
		{ID: "o4"},
	}
	missing := lacking(listed, obs, []bool{true, true, false, true})
	if want := []string{"ch_z"}; !slices.Equal(missing, want) {
		t.Errorf("missing %q, want %q", missing, want)
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	for _, c := range []struct {
		name       string
		got, in    string
		wantShared bool
	}{
		{"o1's provider id", obs[0].ProviderID, listed[0], true},
		{"o2's target id", obs[1].TargetID, listed[2], true},
		{"o3's provider id (read only to link)", obs[2].ProviderID, listed[1], false},
	} {
		if shared := same(c.got, c.in); shared != c.wantShared || c.got != c.in {
			t.Errorf("%s: %q, shares the listing's string: %v, want %v", c.name, c.got, shared, c.wantShared)
		}
	}
	if obs[1].ProviderID != "ch_z" || obs[3].ProviderID != "" || obs[3].TargetID != "" {
		t.Errorf("ids the listing lacks changed: %+v", obs)
	}
}
