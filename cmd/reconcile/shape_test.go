package main

import (
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// keyShape lists, for every JSON object in v, its path (array indexes
// written []) and its keys, sorted and without repeats: the fields another
// tool can rely on, whatever the values.
func keyShape(name string, v any) []string {
	seen := map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k, e := range v {
				keys = append(keys, k)
				walk(path+"."+k, e)
			}
			slices.Sort(keys)
			seen[name+path+": "+strings.Join(keys, " ")] = true
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("", v)
	lines := make([]string, 0, len(seen))
	for l := range seen {
		lines = append(lines, l)
	}
	slices.Sort(lines)
	return lines
}

// The JSON of `run`, `findings` and `trace` and the CSV header of
// `findings` are contracts that other tools parse: this pins every object's
// keys, in every variant the outputs print (a finding acknowledged,
// resolved or neither; a trace with and without the provider's side), in
// testdata/json_keys.golden, written from the outputs before a finding had
// one JSON type. A field renamed, removed or added where it was
// not printed before fails it.
func TestJSONKeysUnchanged(t *testing.T) {
	e := newEnv(t)
	// A refund whose answer was lost, which the provider confirms: a
	// transition, its audit and a trace that would make it.
	seedUnknownOutcome(t, e)
	seedDoubleRefund(t, e)
	var got []string
	decode := func(name string, args ...string) any {
		t.Helper()
		code, stdout, stderr := e.run(args...)
		if code != 0 {
			t.Fatalf("%s: reconcile %v exited %d: %s", name, args, code, stderr)
		}
		var v any
		if err := json.Unmarshal([]byte(stdout), &v); err != nil {
			t.Fatalf("%s: stdout is not JSON: %v\n%s", name, err, stdout)
		}
		return v
	}
	shape := func(name string, args ...string) {
		t.Helper()
		got = append(got, keyShape(name, decode(name, args...))...)
	}

	shape("trace before a run", "trace", "refund:4821:other", "--format", "json")
	shape("run --dry-run", "run", "--since", "100h", "--dry-run", "--format", "json")
	shape("run", "run", "--since", "100h", "--format", "json")
	var open []map[string]any
	b, _ := json.Marshal(decode("findings", "findings", "--open", "--format", "json"))
	if err := json.Unmarshal(b, &open); err != nil || len(open) != 3 {
		t.Fatalf("findings --open: %v, %d findings; want 3", err, len(open))
	}
	// One finding acknowledged, one resolved (its worker's obligation
	// failed, so its lease is no longer stale), one neither.
	if code, _, stderr := e.run("ack", open[0]["fingerprint"].(string), "--reason", "customer returns it", "--by", "finance@example"); code != 0 {
		t.Fatalf("ack exited %d: %s", code, stderr)
	}
	if _, err := e.pool.Exec(t.Context(), `UPDATE obligations SET state = 'FAILED', lease_owner = NULL, lease_expires_at = NULL
		WHERE id = 'charge:5400'`); err != nil {
		t.Fatal(err)
	}
	shape("run after resolving", "run", "--since", "100h", "--format", "json")
	shape("findings", "findings", "--format", "json")
	shape("findings --open", "findings", "--open", "--format", "json")
	shape("trace", "trace", "refund:4821:approved-request-7", "--format", "json")
	shape("trace transitioned", "trace", "refund:4821:other", "--format", "json")
	shape("trace resolved", "trace", "charge:5400", "--format", "json")
	key := e.vars["STRIPE_API_KEY"]
	e.vars["STRIPE_API_KEY"] = ""
	shape("trace without stripe", "trace", "refund:4821:approved-request-7", "--format", "json")
	e.vars["STRIPE_API_KEY"] = key

	code, stdout, stderr := e.run("findings", "--format", "csv")
	if code != 0 {
		t.Fatalf("findings --format csv exited %d: %s", code, stderr)
	}
	header, err := csv.NewReader(strings.NewReader(stdout)).Read()
	if err != nil {
		t.Fatalf("findings --format csv: %v\n%s", err, stdout)
	}
	got = append(got, fmt.Sprintf("findings csv: %s", strings.Join(header, " ")))

	path := filepath.Join("testdata", "json_keys.golden")
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (go test -update writes it): %v", err)
	}
	if diff := cmp.Diff(string(want), text); diff != "" {
		t.Errorf("JSON keys changed (-want +got):\n%s", diff)
	}
}
