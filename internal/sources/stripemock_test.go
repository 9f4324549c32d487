package sources

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
)

// stripeMock starts Stripe's own mock server (github.com/stripe/stripe-mock,
// built from Stripe's OpenAPI spec) on a free loopback port and returns its
// base URL. The test is skipped, saying how to install it, only when the
// binary is absent.
func stripeMock(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			out, _ := exec.Command("go", "env", "GOPATH").Output()
			gopath = strings.TrimSpace(string(out))
		}
		bin = filepath.Join(gopath, "bin", "stripe-mock")
		if _, err := os.Stat(bin); err != nil {
			tb.Skip("stripe-mock is not installed (not on PATH nor in $(go env GOPATH)/bin); " +
				"install it with: go install github.com/stripe/stripe-mock@v0.203.0")
		}
	}
	// Port 0: stripe-mock picks a free port and prints it, so that
	// parallel test runs cannot collide.
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start stripe-mock: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		const prefix = "Listening for HTTP at address: "
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		tb.Fatal("stripe-mock did not say where it listens within 30s")
	}
	return ""
}

// TestStripeMock runs the reader against a real peer: the fixtures of
// Stripe's OpenAPI spec, through stripe-go, must decode and translate
// without error, and every request must be one stripe-mock validates.
func TestStripeMock(t *testing.T) {
	base := stripeMock(t)
	o := testOptions()
	o.APIKey, o.BaseURL, o.Rate, o.Concurrency = "sk_test_123", base, 100, 2
	o.RetryBase, o.RetryMax, o.MaxRetries = time.Millisecond, 10*time.Millisecond, 2
	r, err := NewStripe(o)
	if err != nil {
		t.Fatal(err)
	}
	// stripe-mock answers every list with one fixture, created
	// 2009-02-13T23:31:30Z, and has_more false, whatever the filters.
	fixtures := reconcile.Window{From: time.Date(2009, 2, 13, 0, 0, 0, 0, time.UTC), To: time.Date(2009, 2, 14, 0, 0, 0, 0, time.UTC)}
	l, err := r.List(t.Context(), fixtures)
	if err != nil {
		t.Fatalf("List against stripe-mock: %v", err)
	}
	// Concurrency 2 over 24h: two slices, each answered with the same
	// fixtures; only the slice holding their creation time keeps them.
	if l.Stats.Charges != 1 || l.Stats.Refunds != 1 || l.Stats.PaymentIntents != 1 || l.Stats.Events != 1 {
		t.Errorf("stats = %+v, want one charge, refund, intent and event (the fixtures)", l.Stats)
	}
	if l.Stats.Slices != 2 || l.Stats.Pages != 8 || l.Stats.Retries != 0 || l.Stats.OutOfRange != 3 {
		t.Errorf("stats = %+v, want 2 slices, one page per list and slice, no retry, 3 fixtures ignored in the other slice", l.Stats)
	}
	for _, o := range l.Objects {
		if o.ID == "" || o.Money.Currency == "" || o.Money.Amount <= 0 || o.Status == "" || o.RawStatus == "" || !fixtures.Contains(o.Created.Time()) {
			t.Errorf("fixture translated with empty fields: %+v", o)
		}
	}
	listed := l.Objects
	// A window that does not hold the fixtures: the server returns them
	// anyway; the reader must not take them for objects of the window.
	l, err = r.List(t.Context(), reconcile.Window{From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Objects) != 0 || l.Stats.OutOfRange != 3 {
		t.Errorf("listing of a window without the fixtures = %d objects, %d ignored; want 0 and 3", len(l.Objects), l.Stats.OutOfRange)
	}

	ids := []string{"ch_mock", "re_mock", "pi_mock", "py_mock", "pyr_mock"}
	objs, lookups := r.Retrieve(t.Context(), ids)
	for _, lk := range lookups {
		if lk.Result != reconcile.LookupFound {
			t.Errorf("lookup %+v, want found (stripe-mock answers any id)", lk)
		}
	}
	if len(objs) != len(ids) {
		t.Errorf("retrieved %d objects, want %d", len(objs), len(ids))
	}
	for _, o := range objs {
		if k, _ := kindOfID(o.ID); o.Kind != k {
			t.Errorf("retrieved %s as a %s", o.ID, o.Kind)
		}
	}
	// A retrieval is decoded by stripe-go, a list page by the reader
	// (stripe_page.go): the same fixture read both ways is the same
	// object, but for the id stripe-mock answers a retrieval with.
	for _, o := range listed {
		i := slices.IndexFunc(objs, func(r reconcile.ProviderObject) bool { return r.Kind == o.Kind })
		if i < 0 {
			t.Errorf("no %s retrieved to compare the listed %s with", o.Kind, o.ID)
			continue
		}
		r := objs[i]
		r.ID = o.ID
		if diff := cmp.Diff(r, o); diff != "" {
			t.Errorf("the %s fixture listed differs from the one retrieved (-stripe-go +reader):\n%s", o.Kind, diff)
		}
	}
}
