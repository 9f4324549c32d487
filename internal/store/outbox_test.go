package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
)

// The outbox as the alerts package drains it: order, threads, attempts.
func TestOutboxDrain(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	dup := newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_2")
	stale := newFinding(reconcile.StaleLease, "refund:2", "", 0)
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf([]reconcile.Finding{dup, stale}, nil), now); err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID      int64
		Event   reconcile.AlertEvent
		Name    string
		Thread  string
		Unknown bool
		Tries   int
	}
	name := map[string]string{dup.Fingerprint: "dup", stale.Fingerprint: "stale"}
	due := func(at time.Time, limit int) []row {
		t.Helper()
		as, err := e.s.Due(t.Context(), at, limit)
		if err != nil {
			t.Fatalf("Due: %v", err)
		}
		var rows []row
		for _, a := range as {
			rows = append(rows, row{a.ID, a.Event, name[a.Finding.Fingerprint], a.ThreadTS, a.UnknownOutcome, a.Attempts})
		}
		return rows
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name  string
		do    func()
		at    time.Time
		limit int
		want  []row
	}{
		{
			name: "summary first, nothing to thread under yet",
			at:   now, limit: 10,
			want: []row{{1, "summary", "", "", false, 0}, {2, "firing", "dup", "", false, 0}, {3, "firing", "stale", "", false, 0}},
		},
		{
			name: "limit takes the oldest",
			at:   now, limit: 1,
			want: []row{{1, "summary", "", "", false, 0}},
		},
		{
			name: "not yet due",
			at:   now.Add(-time.Second), limit: 10,
		},
		{
			name: "firing alerts thread under the sent summary",
			do:   func() { must(e.s.MarkSent(t.Context(), 1, "C1", "100.1", now)) },
			at:   now, limit: 10,
			want: []row{{2, "firing", "dup", "100.1", false, 0}, {3, "firing", "stale", "100.1", false, 0}},
		},
		{
			name: "a timed-out attempt waits, and its unknown outcome sticks",
			do: func() {
				must(e.s.MarkSent(t.Context(), 2, "C1", "100.2", now))
				must(e.s.MarkAttempt(t.Context(), 3, now.Add(time.Minute), true, "post: context deadline exceeded"))
				must(e.s.MarkAttempt(t.Context(), 3, now.Add(2*time.Minute), false, "slack: 429 retry after 60s"))
			},
			at: now.Add(time.Minute), limit: 10,
		},
		{
			name: "due again after the pause",
			at:   now.Add(2 * time.Minute), limit: 10,
			want: []row{{3, "firing", "stale", "100.1", true, 2}},
		},
		{
			name: "repeats thread under the finding's first firing message",
			do: func() {
				must(e.s.MarkSent(t.Context(), 3, "C1", "100.1", now.Add(2*time.Minute)))
				at := now.Add(25 * time.Hour)
				if _, err := e.s.Apply(t.Context(), testRun("run-2", at), resultOf([]reconcile.Finding{dup, stale}, nil), at); err != nil {
					t.Fatal(err)
				}
			},
			at: now.Add(25 * time.Hour), limit: 10,
			want: []row{{4, "repeat", "dup", "100.2", false, 0}, {5, "repeat", "stale", "100.1", false, 0}},
		},
		{
			name: "a resolution threads under the first firing message, after its run's summary",
			do: func() {
				must(e.s.MarkSent(t.Context(), 4, "C1", "200.4", now.Add(25*time.Hour)))
				must(e.s.MarkSent(t.Context(), 5, "C1", "200.5", now.Add(25*time.Hour)))
				at := now.Add(26 * time.Hour)
				if _, err := e.s.Apply(t.Context(), testRun("run-3", at), resultOf([]reconcile.Finding{stale}, nil, "refund:1"), at); err != nil {
					t.Fatal(err)
				}
			},
			at: now.Add(26 * time.Hour), limit: 10,
			want: []row{{6, "summary", "", "", false, 0}, {7, "resolved", "dup", "100.2", false, 0}},
		},
	}
	for _, st := range steps {
		if st.do != nil {
			st.do()
		}
		if diff := cmp.Diff(st.want, due(st.at, st.limit)); diff != "" {
			t.Errorf("%s: Due (-want +got):\n%s", st.name, diff)
		}
	}
	var lastErr string
	if err := e.pool.QueryRow(t.Context(), `SELECT last_error FROM reconcile.outbox WHERE id = 3`).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	if lastErr != "slack: 429 retry after 60s" {
		t.Errorf("last_error = %q, want the latest attempt's", lastErr)
	}
	if err := e.s.MarkSent(t.Context(), 2, "C1", "999.9", now); !errors.Is(err, ErrAlreadySent) {
		t.Errorf("MarkSent twice = %v, want ErrAlreadySent", err)
	}
	if err := e.s.MarkAttempt(t.Context(), 2, now, false, "late"); !errors.Is(err, ErrAlreadySent) {
		t.Errorf("MarkAttempt on a sent row = %v, want ErrAlreadySent", err)
	}
	var ts string
	if err := e.pool.QueryRow(t.Context(), `SELECT slack_ts FROM reconcile.outbox WHERE id = 2`).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	if ts != "100.2" {
		t.Errorf("slack_ts after a second MarkSent = %s, want the first record 100.2", ts)
	}
	if err := e.s.MarkAttempt(t.Context(), 404, now, false, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkAttempt(unknown) = %v, want ErrNotFound", err)
	}
}

// A send's intent: recorded before the request, cleared by its recorded
// outcome; one left unresolved makes the rows' outcome unknown, and stays
// known as unknown after a later attempt fails.
func TestOutboxSendIntent(t *testing.T) {
	t.Parallel()
	now := t0()
	e := newEnv(t, nil)
	dup := newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_2")
	if _, err := e.s.Apply(t.Context(), testRun("run-1", now), resultOf([]reconcile.Finding{dup}, nil), now); err != nil {
		t.Fatal(err)
	}
	unknown := func(id int64) bool {
		t.Helper()
		as, err := e.s.Due(t.Context(), now.Add(time.Hour), 10)
		if err != nil {
			t.Fatalf("Due: %v", err)
		}
		for _, a := range as {
			if a.ID == id {
				return a.UnknownOutcome
			}
		}
		t.Fatalf("alert %d not due", id)
		return false
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if unknown(1) || unknown(2) {
		t.Fatal("fresh rows have an unknown outcome")
	}
	must(e.s.MarkSending(t.Context(), []int64{1, 2}, now))
	if !unknown(1) || !unknown(2) {
		t.Error("rows whose send's outcome was never recorded are not reported unknown")
	}
	must(e.s.MarkSent(t.Context(), 1, "C1", "100.1", now))
	must(e.s.MarkAttempt(t.Context(), 2, now, false, "slack: 503"))
	if unknown(2) {
		t.Error("a refused attempt's recorded outcome left the row unknown")
	}
	// Died mid-send, then the next attempt was refused: the first send
	// may still have arrived.
	must(e.s.MarkSending(t.Context(), []int64{2}, now))
	must(e.s.MarkSending(t.Context(), []int64{2}, now.Add(time.Minute)))
	must(e.s.MarkAttempt(t.Context(), 2, now, false, "slack: 503"))
	if !unknown(2) {
		t.Error("an unresolved earlier send was forgotten by a later refused attempt")
	}
	var sending int
	must(e.pool.QueryRow(t.Context(), `SELECT count(*) FROM reconcile.outbox WHERE sending_since IS NOT NULL`).Scan(&sending))
	if sending != 0 {
		t.Errorf("%d rows keep a send's intent after their outcome was recorded", sending)
	}
}
