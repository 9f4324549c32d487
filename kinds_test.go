package reconcile

import "testing"

// Every kind has one entry, with words for finance, in severity order.
func TestKinds(t *testing.T) {
	all := []FindingKind{Duplicate, SuspectedDuplicate, Orphan, PaidWithoutEvidence, AmountMismatch,
		StatusMismatch, StaleLease, UnresolvedUnknown, ConflictingLink, Unverified}
	seen := map[FindingKind]bool{}
	for i, k := range Kinds {
		if seen[k.Kind] {
			t.Errorf("%s appears twice in Kinds", k.Kind)
		}
		seen[k.Kind] = true
		if k.Label == "" || k.Means == "" || k.Do == "" || k.Severity.Rank() == 0 {
			t.Errorf("Kinds[%d] (%s) lacks a label, meaning, action or severity: %+v", i, k.Kind, k)
		}
		if i > 0 && Kinds[i-1].Severity.Rank() < k.Severity.Rank() {
			t.Errorf("Kinds[%d] (%s, %s) after %s (%s): want most severe first", i, k.Kind, k.Severity, Kinds[i-1].Kind, Kinds[i-1].Severity)
		}
		if k.Kind.Order() != i || k.Kind.Info() != k {
			t.Errorf("%s: Order %d, Info %+v; want %d and its entry", k.Kind, k.Kind.Order(), k.Kind.Info(), i)
		}
	}
	for _, k := range all {
		if !seen[k] {
			t.Errorf("%s has no entry in Kinds", k)
		}
	}
	if got := FindingKind("dispute").Severity(); got != Info {
		t.Errorf("an unknown kind's severity = %s, want info", got)
	}
	if len(FindingKinds) != len(all)-1 {
		t.Errorf("FindingKinds = %v, want every kind but the informational one", FindingKinds)
	}
}
