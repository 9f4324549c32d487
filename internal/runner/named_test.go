package runner

import (
	"slices"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/sources"
)

// What the subject's objects name leaves out the keys of every other
// object, even of one the listing does not hold (an object created as the
// pass began, whose event the reader reads a minute past its window).
func TestNamedIfKeepsOnlyWhatItKeeps(t *testing.T) {
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	l := &sources.Listing{
		Objects: []reconcile.ProviderObject{
			{ID: "ch_in", Created: at, Metadata: map[string]string{"obligation_id": "o-in"}},
			{ID: "ch_out", Created: at.Add(-time.Hour), Metadata: map[string]string{"obligation_id": "o-out"}},
		},
		Keys: []reconcile.KeyEvidence{{ObjectID: "ch_in", Key: "k-in"}, {ObjectID: "ch_out", Key: "k-out"}, {ObjectID: "ch_later", Key: "k-later"}},
	}
	w := reconcile.Window{From: at, To: at.Add(time.Hour)}
	n := namedIf(l, matcher.OptionsFrom(config.Default().Matcher), func(o reconcile.ProviderObject) bool { return w.Contains(o.Created) })
	if !slices.Equal(n.IDs, []string{"o-in"}) || !slices.Equal(n.Keys, []string{"k-in"}) || !slices.Equal(n.ProviderIDs, []string{"ch_in"}) {
		t.Errorf("namedIf(subject) = %+v, want o-in, k-in, ch_in only", n)
	}
	all := Named(l, matcher.OptionsFrom(config.Default().Matcher))
	if !slices.Equal(all.Keys, []string{"k-in", "k-later", "k-out"}) || len(all.IDs) != 2 {
		t.Errorf("Named = %+v, want every id and every key", all)
	}
}
