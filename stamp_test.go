package reconcile_test

import (
	"testing"
	"time"

	"reconcile"
)

// A Stamp holds an instant to the microsecond and gives it back in UTC;
// only the zero time is the zero Stamp (a NULL column), and stamps order
// as their instants.
func TestStampHoldsTheInstant(t *testing.T) {
	if s := reconcile.StampOf(time.Time{}); s != 0 || !s.IsZero() || !s.Time().IsZero() {
		t.Fatalf("the zero time: stamp %d, back %v; want the zero Stamp and the zero time", s, s.Time())
	}
	paris := time.FixedZone("Paris", 3600)
	instants := []time.Time{
		time.Date(-4713, 11, 24, 0, 0, 0, 0, time.UTC), // PostgreSQL's first day
		time.Date(0, 12, 31, 23, 59, 59, 999_999_000, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC), // a microsecond after the zero time
		time.Unix(0, 0).UTC(),                       // the Unix epoch is not NULL
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), // nor PostgreSQL's
		time.Date(2026, 12, 3, 11, 0, 0, 123_456_000, paris),
		time.Date(reconcile.StampRange, 12, 31, 23, 59, 59, 999_999_000, time.UTC),
	}
	for i, want := range instants {
		s := reconcile.StampOf(want)
		if s.IsZero() {
			t.Errorf("%v: the zero Stamp", want)
		}
		if got := s.Time(); !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("%v: back as %v, want the same instant in UTC", want, got)
		}
		if i > 0 && reconcile.StampOf(instants[i-1]) >= s {
			t.Errorf("%v stamps at or after the later %v", instants[i-1], want)
		}
	}
	// A time is held to the microsecond, towards the past.
	at := time.Date(2026, 12, 3, 11, 0, 0, 999, time.UTC)
	if got := reconcile.StampOf(at).Time(); !got.Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("%v: back as %v, want it to the microsecond", at, got)
	}
	before := time.Date(-1, 6, 1, 0, 0, 0, 1999, time.UTC)
	if got := reconcile.StampOf(before).Time(); !got.Equal(time.Date(-1, 6, 1, 0, 0, 0, 1000, time.UTC)) {
		t.Errorf("%v: back as %v, want it to the microsecond towards the past", before, got)
	}
}
