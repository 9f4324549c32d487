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
			{ID: "ch_in", Created: reconcile.StampOf(at), Metadata: map[string]string{"obligation_id": "o-in"}},
			{ID: "ch_out", Created: reconcile.StampOf(at.Add(-time.Hour)), Metadata: map[string]string{"obligation_id": "o-out"}},
		},
		Keys: []reconcile.KeyEvidence{{ObjectID: "ch_in", Key: "k-in"}, {ObjectID: "ch_out", Key: "k-out"}, {ObjectID: "ch_later", Key: "k-later"}},
	}
	w := reconcile.Window{From: at, To: at.Add(time.Hour)}
	n := namedIf(l, matcher.OptionsFrom(config.Default().Matcher), func(o reconcile.ProviderObject) bool { return w.Contains(o.Created.Time()) })
	if !slices.Equal(n.IDs, []string{"o-in"}) || !slices.Equal(n.Keys, []string{"k-in"}) || !slices.Equal(n.ProviderIDs, []string{"ch_in"}) {
		t.Errorf("namedIf(subject) = %+v, want o-in, k-in, ch_in only", n)
	}
	all := Named(l, matcher.OptionsFrom(config.Default().Matcher))
	if !slices.Equal(all.Keys, []string{"k-in", "k-later", "k-out"}) || len(all.IDs) != 2 {
		t.Errorf("Named = %+v, want every id and every key", all)
	}
}

// The subject is listed only when an obligation out of scope by state and
// window is looked at, and then decides as decides does: named by an
// object created in the window, by id, key, provider id or target id.
func TestLazySubjectListsOnlyWhenNeeded(t *testing.T) {
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	w := reconcile.Window{From: at, To: at.Add(time.Hour)}
	l := &sources.Listing{
		Objects: []reconcile.ProviderObject{
			{ID: "ch_in", Created: reconcile.StampOf(at), Metadata: map[string]string{"obligation_id": "o-named"}},
			{ID: "ch_out", Created: reconcile.StampOf(at.Add(-time.Hour)), Metadata: map[string]string{"obligation_id": "o-named-before"}},
		},
		Keys: []reconcile.KeyEvidence{{ObjectID: "ch_in", Key: "k-in"}},
	}
	s := &lazySubject{l: l, w: w, opts: matcher.OptionsFrom(config.Default().Matcher)}
	old := at.Add(-24 * time.Hour)
	for _, o := range []reconcile.Obligation{
		{ID: "o-created", State: reconcile.Paid, CreatedAt: reconcile.StampOf(at), UpdatedAt: reconcile.StampOf(at)},
		{ID: "o-updated", State: reconcile.Paid, CreatedAt: reconcile.StampOf(old), UpdatedAt: reconcile.StampOf(at)},
		{ID: "o-executing", State: reconcile.Executing, CreatedAt: reconcile.StampOf(old), UpdatedAt: reconcile.StampOf(old)},
		{ID: "o-unknown", State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(old), UpdatedAt: reconcile.StampOf(old)},
	} {
		if !s.decides(&o) {
			t.Errorf("%s in scope: not decided on", o.ID)
		}
	}
	if s.named != nil {
		t.Fatalf("the subject was listed with every obligation in scope: %+v", *s.named)
	}
	for _, tt := range []struct {
		o    reconcile.Obligation
		want bool
	}{
		{reconcile.Obligation{ID: "o-named"}, true},
		{reconcile.Obligation{ID: "o-key", IdempotencyKey: "k-in"}, true},
		{reconcile.Obligation{ID: "o-provider", ProviderID: "ch_in"}, true},
		{reconcile.Obligation{ID: "o-target", TargetID: "ch_in"}, true},
		{reconcile.Obligation{ID: "o-named-before"}, false},
		{reconcile.Obligation{ID: "o-other", ProviderID: "ch_out"}, false},
	} {
		tt.o.State, tt.o.CreatedAt, tt.o.UpdatedAt = reconcile.Paid, reconcile.StampOf(old), reconcile.StampOf(old)
		if got := s.decides(&tt.o); got != tt.want {
			t.Errorf("%s out of scope: decided on %v, want %v", tt.o.ID, got, tt.want)
		}
	}
	if s.named == nil {
		t.Error("the subject was never listed")
	}
}
