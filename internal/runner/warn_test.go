package runner

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/matcher"
)

// A PAID decision about an obligation older than the window is logged with
// how far back to look; one inside the window is not.
func TestWarnOlderThanWindow(t *testing.T) {
	from := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	in := matcher.Input{
		Listed: reconcile.Window{From: from, To: from.Add(72 * time.Hour)},
		Obligations: []reconcile.Obligation{
			{ID: "refund:old", CreatedAt: from.Add(-50 * time.Hour)},
			{ID: "refund:new", CreatedAt: from.Add(time.Hour)},
			{ID: "refund:edge", CreatedAt: from.Add(2 * time.Minute)}, // within the clock skew of the start: counted
		},
	}
	for _, tc := range []struct {
		name  string
		paid  []string
		count int
	}{
		{"older", []string{"refund:new", "refund:old", "refund:edge"}, 2},
		{"inside", []string{"refund:new"}, 0},
		{"none", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res matcher.Result
			for _, id := range tc.paid {
				res.Transitions = append(res.Transitions, reconcile.Transition{ObligationID: id, To: reconcile.Paid})
			}
			var buf bytes.Buffer
			warnOlderThanWindow(slog.New(slog.NewJSONHandler(&buf, nil)), in, res, 5*time.Minute)
			if tc.count == 0 {
				if buf.Len() != 0 {
					t.Errorf("logged %s, want nothing", buf.String())
				}
				return
			}
			var line struct {
				Level  string
				Count  int
				Oldest time.Time `json:"oldest_created"`
			}
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("log %q: %v", buf.String(), err)
			}
			if line.Level != "WARN" || line.Count != tc.count || !line.Oldest.Equal(from.Add(-50*time.Hour)) {
				t.Errorf("logged %s; want a warning of %d, the oldest created 50h before the window", buf.String(), tc.count)
			}
		})
	}
}
