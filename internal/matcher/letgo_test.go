package matcher

import (
	"runtime"
	"testing"
	"weak"

	"reconcile/internal/config"
)

// MatchThen calls between once, after the rules, when the matcher no
// longer holds the obligations it was given: a caller that held nothing
// else of them finds them collected there. Its result is Match's.
func TestMatchThenLetsGoOfTheObligations(t *testing.T) {
	opts := OptionsFrom(config.Default().Matcher)
	in := benchWorld(1000)
	want := Match(in, propNow, opts)
	held := weak.Make(&in.Obligations[0])
	whole := in
	in.Obligations = nil
	calls, gone := 0, false
	got := MatchThen(whole, propNow, opts, func() {
		calls++
		runtime.GC()
		gone = held.Value() == nil
	})
	if calls != 1 {
		t.Fatalf("between called %d times, want once", calls)
	}
	if !gone {
		t.Error("the obligations were still held when between was called")
	}
	if len(got.Findings) != len(want.Findings) || len(got.Transitions) != len(want.Transitions) || len(got.Links) != len(want.Links) {
		t.Errorf("MatchThen found %d findings, %d transitions, %d links; Match %d, %d, %d",
			len(got.Findings), len(got.Transitions), len(got.Links), len(want.Findings), len(want.Transitions), len(want.Links))
	}
	for i := range min(len(got.Findings), len(want.Findings)) {
		if got.Findings[i].Fingerprint != want.Findings[i].Fingerprint || got.Findings[i].Detail != want.Findings[i].Detail {
			t.Fatalf("finding %d: %+v, Match's %+v", i, got.Findings[i], want.Findings[i])
		}
	}
}
