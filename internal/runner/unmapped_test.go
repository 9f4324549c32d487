package runner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"reconcile"
)

// Obligations in states the configuration does not map are counted by
// raw value and warned about once per value, the value quoted so that a
// trailing blank shows.
func TestUnmappedStates(t *testing.T) {
	table := reconcile.DefaultObligationTable()
	table.States[reconcile.Paid] = "settled" // and a stray "PAID" is unmapped
	ob := func(id, raw string) reconcile.Obligation {
		return reconcile.Obligation{ID: id, State: table.Canonical(raw), RawState: raw}
	}
	obs := []reconcile.Obligation{
		ob("a", "settled"), ob("b", "CANCELLED"), ob("c", "CONFIRMATION_UNKNOWN "), ob("d", "CANCELLED"),
		ob("e", "EXECUTING"), ob("f", "CANCELLED"), ob("g", "PAID"),
	}
	var buf bytes.Buffer
	got := unmappedStates(slog.New(slog.NewJSONHandler(&buf, nil)), obs)
	want := map[string]int{"CANCELLED": 3, "CONFIRMATION_UNKNOWN ": 1, "PAID": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unmappedStates (-want +got):\n%s", diff)
	}
	type line struct {
		Level string
		State string
		Count int
	}
	var lines []line
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	wantLines := []line{{"WARN", `"CANCELLED"`, 3}, {"WARN", `"CONFIRMATION_UNKNOWN "`, 1}, {"WARN", `"PAID"`, 1}}
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	buf.Reset()
	if got := unmappedStates(slog.New(slog.NewJSONHandler(&buf, nil)), obs[:1]); got != nil || buf.Len() != 0 {
		t.Errorf("unmappedStates(all mapped) = %v, logged %q; want nil and nothing", got, buf.String())
	}
}
