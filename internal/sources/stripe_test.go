package sources

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/stripesim"
)

const testKey = "sk_test_reader0123456789abcdefSECRET"

var (
	t0     = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	window = reconcile.Window{From: t0, To: t0.Add(72 * time.Hour)}
)

// env is a Stripe-compatible server for one test. Every test proves at its
// end that no write reached it.
type env struct {
	srv  *stripesim.Server
	base string
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	srv := stripesim.New(testKey)
	base, stop, err := srv.Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	tb.Cleanup(func() { srv.AssertNoWrites(tb) })
	return &env{srv: srv, base: base}
}

// reader returns a reader of e with test settings (no pacing, millisecond
// backoffs), changed by mod.
func (e *env) reader(tb testing.TB, mod func(*StripeOptions)) *Stripe {
	tb.Helper()
	opts := testOptions()
	opts.BaseURL, opts.Rate = e.base, math.Inf(1)
	opts.RetryBase, opts.RetryMax, opts.RequestTimeout = time.Millisecond, 4*time.Millisecond, 5*time.Second
	if mod != nil {
		mod(&opts)
	}
	s, err := NewStripe(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func (e *env) add(tb testing.TB, key string, o reconcile.ProviderObject) {
	tb.Helper()
	if err := e.srv.Add(o, key); err != nil {
		tb.Fatal(err)
	}
}

// dataset is what populate put on the server and what a listing of window
// must return.
type dataset struct {
	objects []string // "kind/id" of the objects created in window, sorted as Listing sorts
	keys    []string // "id=key" pairs the events must yield
	byKind  map[reconcile.ObjectKind][]reconcile.ProviderObject
}

// populate adds n charges spread over window (one in ten failed, one in
// ten pending), an intent for every fourth, a refund a minute after every
// sixth, each created with key "key-<id>"; and a charge just before the
// window and one at its end, which must not be listed.
func populate(tb testing.TB, e *env, n int) dataset {
	tb.Helper()
	d := dataset{byKind: map[reconcile.ObjectKind][]reconcile.ProviderObject{}}
	step := window.To.Sub(window.From) / time.Duration(n)
	add := func(o reconcile.ProviderObject) {
		e.add(tb, "key-"+o.ID, o)
		if window.Contains(o.Created.Time()) {
			d.byKind[o.Kind] = append(d.byKind[o.Kind], o)
		}
		// Events are read EventGrace (1m by default) past the window.
		if o.Created.Time().Before(window.To.Add(time.Minute)) && !o.Created.Time().Before(window.From) {
			d.keys = append(d.keys, o.ID+"=key-"+o.ID)
		}
	}
	add(reconcile.ProviderObject{ID: "ch_before", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 1, Currency: "usd"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(window.From.Add(-time.Second))})
	add(reconcile.ProviderObject{ID: "ch_atend", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 1, Currency: "usd"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(window.To)})
	for i := range n {
		created := window.From.Add(time.Duration(i) * step).Truncate(time.Second)
		ch := reconcile.ProviderObject{ID: fmt.Sprintf("ch_%05d", i), Kind: reconcile.Charge,
			Money: reconcile.Money{Amount: int64(1000 + i), Currency: "usd"}, Status: reconcile.Succeeded, Created: reconcile.StampOf(created),
			Customer: fmt.Sprintf("cus_%d", i%7), Metadata: map[string]string{"obligation_id": fmt.Sprintf("ob-%d", i)}}
		switch i % 10 {
		case 8:
			ch.Status = reconcile.Pending
		case 9:
			ch.Status = reconcile.Failed
		}
		if i%4 == 0 {
			ch.PaymentIntent = fmt.Sprintf("pi_%05d", i)
		}
		add(ch)
		if i%4 == 0 {
			add(reconcile.ProviderObject{ID: ch.PaymentIntent, Kind: reconcile.PaymentIntent, Money: ch.Money,
				Status: ch.Status, Charge: ch.ID, Customer: ch.Customer, Created: reconcile.StampOf(created)})
		}
		if i%6 == 0 && ch.Status == reconcile.Succeeded {
			add(reconcile.ProviderObject{ID: fmt.Sprintf("re_%05d", i), Kind: reconcile.Refund,
				Money: reconcile.Money{Amount: 100, Currency: "usd"}, Status: reconcile.Succeeded, Target: ch.ID,
				Charge: ch.ID, PaymentIntent: ch.PaymentIntent, Created: reconcile.StampOf(created.Add(time.Minute))})
		}
	}
	var all []reconcile.ProviderObject
	for _, os := range d.byKind {
		all = append(all, os...)
	}
	slices.SortFunc(all, func(a, b reconcile.ProviderObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
	for _, o := range all {
		d.objects = append(d.objects, string(o.Kind)+"/"+o.ID)
	}
	slices.Sort(d.keys)
	return d
}

func objectIDs(l *Listing) []string {
	var out []string
	for _, o := range l.Objects {
		out = append(out, string(o.Kind)+"/"+o.ID)
	}
	return out
}

func keyPairs(l *Listing) []string {
	var out []string
	for _, k := range l.Keys {
		out = append(out, k.ObjectID+"="+k.Key)
	}
	slices.Sort(out)
	return out
}

// checkComplete fails tb unless l holds exactly the objects and keys of d,
// each once.
func checkComplete(tb testing.TB, l *Listing, d dataset) {
	tb.Helper()
	if diff := gocmp.Diff(d.objects, objectIDs(l)); diff != "" {
		tb.Errorf("listed objects (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(d.keys, keyPairs(l)); diff != "" {
		tb.Errorf("key evidence (-want +got):\n%s", diff)
	}
	if got, want := l.Stats.Charges+l.Stats.Refunds+l.Stats.PaymentIntents, len(d.objects); got != want {
		tb.Errorf("Stats objects = %d, want %d", got, want)
	}
}

func TestListPagesEveryObjectOnce(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 300)
	// One worker, one slice: the 300 charges take three pages.
	r := e.reader(t, func(o *StripeOptions) { o.Concurrency = 1 })
	l, err := r.List(t.Context(), window)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, l, d)
	st := e.srv.Stats()
	if st.Pages[ListCharges] < 3 {
		t.Errorf("charges read in %d pages, want at least 3", st.Pages[ListCharges])
	}
	if l.Stats.Slices != 1 || l.Stats.Pages != st.Pages[ListCharges]+st.Pages[ListRefunds]+st.Pages[ListPaymentIntents]+st.Pages[ListEvents] {
		t.Errorf("stats = %+v; server served %v", l.Stats, st.Pages)
	}
	if l.Stats.Requests != st.Requests || l.Stats.Retries != 0 {
		t.Errorf("requests, retries = %d, %d; want %d (as the server counted), 0", l.Stats.Requests, l.Stats.Retries, st.Requests)
	}
}

func TestListConcurrencyDoesNotChangeTheListing(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 400)
	var listings []*Listing
	for _, c := range []int{1, 3, 8} {
		r := e.reader(t, func(o *StripeOptions) { o.Concurrency, o.SliceMin = c, time.Minute })
		l, err := r.List(t.Context(), window)
		if err != nil {
			t.Fatalf("concurrency %d: %v", c, err)
		}
		if l.Stats.Slices != c {
			t.Errorf("concurrency %d: %d slices, want %d", c, l.Stats.Slices, c)
		}
		checkComplete(t, l, d)
		listings = append(listings, l)
	}
	for i, l := range listings[1:] {
		if diff := gocmp.Diff(listings[0].Objects, l.Objects); diff != "" {
			t.Errorf("objects at concurrency 1 vs listing %d (-1 +n):\n%s", i+1, diff)
		}
		if diff := gocmp.Diff(listings[0].Keys, l.Keys); diff != "" {
			t.Errorf("keys at concurrency 1 vs listing %d (-1 +n):\n%s", i+1, diff)
		}
	}
}

func TestListSurvivesTransientFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults stripesim.Faults
		check  func(t *testing.T, st stripesim.Stats, l *Listing)
	}{
		{"429 every 3rd and 500 every 5th", stripesim.Faults{RateLimitEvery: 3, ServerErrorEvery: 5},
			func(t *testing.T, st stripesim.Stats, l *Listing) {
				if st.RateLimited == 0 || st.ServerErrors == 0 {
					t.Errorf("server served %d 429s and %d 500s, want some of each", st.RateLimited, st.ServerErrors)
				}
				if l.Stats.Retries != st.RateLimited+st.ServerErrors {
					t.Errorf("retries = %d, want one per failure served (%d)", l.Stats.Retries, st.RateLimited+st.ServerErrors)
				}
			}},
		{"connection dropped mid-page", stripesim.Faults{DropEvery: 4},
			func(t *testing.T, st stripesim.Stats, l *Listing) {
				if st.Dropped == 0 || l.Stats.Retries != st.Dropped {
					t.Errorf("dropped %d, retried %d: want some, one retry each", st.Dropped, l.Stats.Retries)
				}
			}},
		{"random faults", stripesim.Faults{Seed: 42, RateLimitP: 0.1, ServerErrorP: 0.1, DropP: 0.1},
			func(t *testing.T, st stripesim.Stats, l *Listing) {
				if l.Stats.Retries == 0 {
					t.Error("no retry, want some")
				}
			}},
		// The reader paced a little above the server's limit, as when another
		// client shares the account's limit: the excess is refused, retried
		// and read. The limit is low, so that the reader's opening burst of
		// four requests at once exceeds it however busy the machine is (at
		// 200 a second a loaded machine never reached it).
		{"server rate limit below the reader's pace", stripesim.Faults{RateLimit: 10, RateBurst: 1},
			func(t *testing.T, st stripesim.Stats, l *Listing) {
				if st.RateLimited == 0 {
					t.Error("the server limited nothing; the test proves nothing")
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			d := populate(t, e, 250)
			e.srv.SetFaults(tt.faults)
			r := e.reader(t, func(o *StripeOptions) {
				o.Concurrency, o.SliceMin, o.MaxRetries = 4, time.Minute, 12
				if tt.faults.RateLimit > 0 {
					o.Rate, o.Burst = tt.faults.RateLimit*1.25, 4
				}
			})
			l, err := r.List(t.Context(), window)
			if err != nil {
				t.Fatal(err)
			}
			checkComplete(t, l, d)
			st := e.srv.Stats()
			// Every failed page was retried from its own cursor: the server
			// delivered each entry exactly once.
			delivered := st.Objects[ListCharges] + st.Objects[ListRefunds] + st.Objects[ListPaymentIntents] + st.Objects[ListEvents]
			if read := l.Stats.Charges + l.Stats.Refunds + l.Stats.PaymentIntents + l.Stats.Events; delivered != read {
				t.Errorf("server delivered %d entries, the listing holds %d: pages were read twice", delivered, read)
			}
			tt.check(t, st, l)
		})
	}
}

func TestListFailsRatherThanReturnPartial(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 300)
	// The newest-first order of the window's charges: the first page ends
	// at the 100th.
	charges := slices.Clone(d.byKind[reconcile.Charge])
	slices.SortFunc(charges, func(a, b reconcile.ProviderObject) int {
		return cmp.Or(cmp.Compare(b.Created, a.Created), cmp.Compare(b.ID, a.ID))
	})
	tests := []struct {
		name       string
		faults     stripesim.Faults
		list       string
		cursor     string
		requests   int // to the failing list's path
		wantInText []string
	}{
		{"charges fail from their second page", stripesim.Faults{FailList: ListCharges, FailListAfter: 1},
			ListCharges, charges[99].ID, 1 + 4, []string{"charges", "starting after " + charges[99].ID, "500", "after 4 attempts"}},
		{"events fail from the start", stripesim.Faults{FailList: ListEvents},
			ListEvents, "", 4, []string{"events", "first page"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.srv.SetFaults(tt.faults)
			e.srv.ResetStats()
			r := e.reader(t, func(o *StripeOptions) { o.Concurrency, o.MaxRetries = 1, 3 })
			l, err := r.List(t.Context(), window)
			if l != nil {
				t.Errorf("List returned a listing of %d objects beside the error, want none", len(l.Objects))
			}
			var le *ListError
			if !errors.As(err, &le) {
				t.Fatalf("List error = %v, want a *ListError", err)
			}
			if le.List != tt.list || le.Cursor != tt.cursor {
				t.Errorf("ListError list, cursor = %q, %q, want %q, %q", le.List, le.Cursor, tt.list, tt.cursor)
			}
			for _, s := range tt.wantInText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if got := e.srv.Stats().Paths["/v1/"+tt.list]; got != tt.requests {
				t.Errorf("requests to %s = %d, want %d (retries bounded by MaxRetries)", tt.list, got, tt.requests)
			}
		})
	}
}

func TestShouldRetryHeader(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 10)
	e.srv.SetFaults(stripesim.Faults{ServerErrorEvery: 1, ShouldRetry: "false"})
	r := e.reader(t, func(o *StripeOptions) { o.Concurrency = 1 })

	_, err := r.List(t.Context(), window)
	var re *RequestError
	if !errors.As(err, &re) || re.Status != 500 || re.Attempts != 1 {
		t.Fatalf("List error = %v, want a 500 after one attempt", err)
	}
	if !strings.Contains(err.Error(), "Stripe-Should-Retry: false") {
		t.Errorf("error %q does not say why it was not retried", err)
	}
	_, lookups := r.Retrieve(t.Context(), []string{"ch_00001"})
	if lookups[0].Result != reconcile.LookupFailed {
		t.Errorf("lookup = %+v, want failed", lookups[0])
	}
	if got := e.srv.Stats().Requests; got != 2 {
		t.Errorf("server saw %d requests, want 2 (one list page, one retrieval, no retry)", got)
	}
}

// testOptions are the configuration's defaults with the tests' key.
func testOptions() StripeOptions {
	o := StripeOptionsFrom(config.Default())
	o.APIKey = testKey
	return o
}

func TestTranslateDecidesRetries(t *testing.T) {
	r, err := NewStripe(testOptions())
	if err != nil {
		t.Fatal(err)
	}
	stripeErr := func(status int, code, header string) error {
		h := http.Header{}
		if header != "" {
			h.Set("Stripe-Should-Retry", header)
		}
		return &stripe.Error{HTTPStatusCode: status, Code: stripe.ErrorCode(code), Msg: "m",
			APIResource: stripe.APIResource{LastResponse: &stripe.APIResponse{Header: h}}}
	}
	tests := []struct {
		name  string
		err   error
		retry bool
	}{
		{"429 rate limit", stripeErr(429, "rate_limit", ""), true},
		{"500", stripeErr(500, "", ""), true},
		{"503", stripeErr(503, "", ""), true},
		{"500 should not retry", stripeErr(500, "", "false"), false},
		{"429 should not retry", stripeErr(429, "rate_limit", "false"), false},
		{"409 should retry", stripeErr(409, "lock_timeout", "true"), true},
		{"400", stripeErr(400, "parameter_unknown", ""), false},
		{"401", stripeErr(401, "", ""), false},
		{"404", stripeErr(404, "resource_missing", ""), false},
		{"network", errors.New("read tcp: connection reset by peer"), true},
	}
	for _, tt := range tests {
		if got := r.translate(tt.err).retry; got != tt.retry {
			t.Errorf("translate(%s).retry = %v, want %v", tt.name, got, tt.retry)
		}
	}
}

func TestListEmptyWindows(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 20)
	r := e.reader(t, nil)
	tests := []struct {
		name     string
		w        reconcile.Window
		requests bool
	}{
		{"nothing was created then", reconcile.Window{From: t0.AddDate(0, -1, 0), To: t0.AddDate(0, -1, 3)}, true},
		{"zero length", reconcile.Window{From: t0, To: t0}, false},
		{"within one second", reconcile.Window{From: t0.Add(100 * time.Millisecond), To: t0.Add(900 * time.Millisecond)}, false},
	}
	for _, tt := range tests {
		e.srv.ResetStats()
		l, err := r.List(t.Context(), tt.w)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if len(l.Objects) != 0 || len(l.Keys) != 0 {
			t.Errorf("%s: %d objects, %d keys, want none", tt.name, len(l.Objects), len(l.Keys))
		}
		if got := e.srv.Stats().Requests > 0; got != tt.requests {
			t.Errorf("%s: sent requests = %v, want %v", tt.name, got, tt.requests)
		}
	}
	if _, err := r.List(t.Context(), reconcile.Window{From: t0, To: t0.Add(-time.Hour)}); err == nil {
		t.Error("List of an inverted window = nil error, want one")
	}
}

func TestListWindowBoundsAreHalfOpen(t *testing.T) {
	e := newEnv(t)
	for _, s := range []int{10, 20, 30} {
		e.add(t, "", reconcile.ProviderObject{ID: fmt.Sprintf("ch_%d", s), Kind: reconcile.Charge,
			Money: reconcile.Money{Amount: 1, Currency: "usd"}, Status: reconcile.Succeeded, Created: reconcile.StampOf(t0.Add(time.Duration(s) * time.Second))})
	}
	r := e.reader(t, nil)
	tests := []struct {
		from, to time.Duration
		want     []string
	}{
		{10 * time.Second, 30 * time.Second, []string{"charge/ch_10", "charge/ch_20"}},
		{10500 * time.Millisecond, 30500 * time.Millisecond, []string{"charge/ch_20", "charge/ch_30"}},
		{20 * time.Second, 20001 * time.Millisecond, []string{"charge/ch_20"}},
	}
	for _, tt := range tests {
		l, err := r.List(t.Context(), reconcile.Window{From: t0.Add(tt.from), To: t0.Add(tt.to)})
		if err != nil {
			t.Fatal(err)
		}
		if got := objectIDs(l); !slices.Equal(got, tt.want) {
			t.Errorf("List [%v, %v) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

func TestKeyEvidenceEndToEnd(t *testing.T) {
	e := newEnv(t)
	ch := reconcile.ProviderObject{ID: "ch_1", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(t0.Add(time.Hour))}
	e.add(t, "key-charge", ch)
	// Two refunds of one charge: each refund.created and charge.refunded
	// carries the refund's key; neither may link the charge.
	for i, key := range []string{"key-refund-1", "key-refund-2"} {
		e.add(t, key, reconcile.ProviderObject{ID: fmt.Sprintf("re_%d", i+1), Kind: reconcile.Refund,
			Money: reconcile.Money{Amount: 8900, Currency: "usd"}, Status: reconcile.Pending, Target: "ch_1",
			Created: reconcile.StampOf(t0.Add(2 * time.Hour))})
	}
	if err := e.srv.Update("re_1", t0.Add(3*time.Hour), func(o *reconcile.ProviderObject) { o.Status = reconcile.Succeeded }); err != nil {
		t.Fatal(err)
	}
	// A refund.updated sent by a request (a metadata update) carries that
	// request's key; a charge.captured carries the capture's, not the
	// creation's.
	if _, err := e.srv.AddEvent(stripesim.Event{Type: "refund.updated", Created: t0.Add(4 * time.Hour), ObjectID: "re_2",
		Request: &stripesim.Request{ID: "req_upd", IdempotencyKey: "key-update"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.AddEvent(stripesim.Event{Type: "charge.captured", Created: t0.Add(4 * time.Hour), ObjectID: "ch_1",
		Request: &stripesim.Request{ID: "req_cap", IdempotencyKey: "key-capture"}}); err != nil {
		t.Fatal(err)
	}
	l, err := e.reader(t, nil).List(t.Context(), window)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ch_1=key-charge", "re_1=key-refund-1", "re_2=key-refund-2", "re_2=key-update"}
	if diff := gocmp.Diff(want, keyPairs(l)); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if k := l.Keys[0]; k.ObjectKind != reconcile.Charge || k.EventType != "charge.succeeded" || k.Created != ch.Created || k.EventID == "" {
		t.Errorf("charge evidence = %+v", k)
	}
}

func TestKeyEvidenceFromEvents(t *testing.T) {
	kinds := keyEventKinds()
	ev := func(typ, objectType, id, key string) *stripe.Event {
		e := &stripe.Event{ID: "evt_1", Type: stripe.EventType(typ), Created: t0.Unix(),
			Data: &stripe.EventData{Object: map[string]any{"id": id, "object": objectType}}}
		if key != "-" {
			e.Request = &stripe.EventRequest{ID: "req_1", IdempotencyKey: key}
		}
		return e
	}
	tests := []struct {
		name string
		ev   *stripe.Event
		want string // "id=key", or "" for no evidence
	}{
		{"charge succeeded", ev("charge.succeeded", "charge", "ch_1", "k"), "ch_1=k"},
		{"charge pending", ev("charge.pending", "charge", "ch_1", "k"), "ch_1=k"},
		{"charge failed", ev("charge.failed", "charge", "ch_1", "k"), "ch_1=k"},
		{"charge refunded carries the refund's key", ev("charge.refunded", "charge", "ch_1", "k"), ""},
		{"charge refund updated", ev("charge.refund.updated", "refund", "re_1", "k"), ""},
		{"charge captured", ev("charge.captured", "charge", "ch_1", "k"), ""},
		{"refund created", ev("refund.created", "refund", "re_1", "k"), "re_1=k"},
		{"refund updated by a request", ev("refund.updated", "refund", "re_1", "k"), "re_1=k"},
		{"refund updated automatically", ev("refund.updated", "refund", "re_1", ""), ""},
		{"null request", ev("refund.created", "refund", "re_1", "-"), ""},
		{"intent created", ev("payment_intent.created", "payment_intent", "pi_1", "k"), "pi_1=k"},
		{"intent succeeded", ev("payment_intent.succeeded", "payment_intent", "pi_1", "k"), "pi_1=k"},
		{"intent processing", ev("payment_intent.processing", "payment_intent", "pi_1", "k"), "pi_1=k"},
		{"object of another kind", ev("charge.succeeded", "refund", "re_1", "k"), ""},
		{"no object id", ev("charge.succeeded", "charge", "", "k"), ""},
		{"other family", ev("customer.created", "customer", "cus_1", "k"), ""},
	}
	for _, tt := range tests {
		got := ""
		if k, ok := keyEvidence(tt.ev, kinds); ok {
			got = k.ObjectID + "=" + k.Key
		}
		if got != tt.want {
			t.Errorf("keyEvidence(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
	types := keyEventTypes()
	if len(types) > 20 || slices.ContainsFunc(types, func(s string) bool { return strings.Contains(s, "*") }) {
		t.Errorf("types[] = %v: Stripe takes at most 20 exact names", types)
	}
}

func TestStatusNormalisation(t *testing.T) {
	tests := []struct {
		kind     reconcile.ObjectKind
		raw      string
		captured bool
		want     reconcile.Status
	}{
		{reconcile.Charge, "succeeded", true, reconcile.Succeeded},
		{reconcile.Charge, "succeeded", false, reconcile.Pending}, // authorised, not captured
		{reconcile.Charge, "pending", false, reconcile.Pending},
		{reconcile.Charge, "failed", false, reconcile.Failed},
		{reconcile.Charge, "something_new", true, reconcile.Pending},
		{reconcile.Refund, "succeeded", false, reconcile.Succeeded},
		{reconcile.Refund, "pending", false, reconcile.Pending},
		{reconcile.Refund, "requires_action", false, reconcile.Pending},
		{reconcile.Refund, "failed", false, reconcile.Failed},
		{reconcile.Refund, "canceled", false, reconcile.Canceled},
		{reconcile.PaymentIntent, "succeeded", false, reconcile.Succeeded},
		{reconcile.PaymentIntent, "processing", false, reconcile.Pending},
		{reconcile.PaymentIntent, "requires_payment_method", false, reconcile.Pending},
		{reconcile.PaymentIntent, "requires_confirmation", false, reconcile.Pending},
		{reconcile.PaymentIntent, "requires_action", false, reconcile.Pending},
		{reconcile.PaymentIntent, "requires_capture", false, reconcile.Pending},
		{reconcile.PaymentIntent, "canceled", false, reconcile.Canceled},
	}
	for _, tt := range tests {
		var got reconcile.Status
		switch tt.kind {
		case reconcile.Charge:
			got = chargeStatus(tt.raw, tt.captured)
		case reconcile.Refund:
			got = refundStatus(tt.raw)
		case reconcile.PaymentIntent:
			got = paymentIntentStatus(tt.raw)
		}
		if got != tt.want {
			t.Errorf("%s status %q (captured %v) = %s, want %s", tt.kind, tt.raw, tt.captured, got, tt.want)
		}
	}
}

// TestObjectsTranslated reads one object of each shape through the wire
// and checks every field the matcher uses.
func TestObjectsTranslated(t *testing.T) {
	e := newEnv(t)
	meta := map[string]string{"obligation_id": "refund:4821:approved-7", "note": "card 4242 4242 4242 4242 ✓"}
	objs := []reconcile.ProviderObject{
		{ID: "ch_auth", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 12000, Currency: "jpy"}, Status: reconcile.Pending,
			RawStatus: "succeeded", PaymentIntent: "pi_1", Customer: "cus_1", Metadata: meta, Created: reconcile.StampOf(t0.Add(time.Hour))},
		{ID: "ch_paid", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 8900, Currency: "usd"}, Status: reconcile.Succeeded,
			RawStatus: "succeeded", AmountRefunded: 8900, Created: reconcile.StampOf(t0.Add(time.Hour))},
		{ID: "pi_1", Kind: reconcile.PaymentIntent, Money: reconcile.Money{Amount: 12000, Currency: "jpy"}, Status: reconcile.Pending,
			RawStatus: "requires_capture", Charge: "ch_auth", Customer: "cus_1", Created: reconcile.StampOf(t0.Add(time.Hour))},
		{ID: "re_charge", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 8900, Currency: "usd"}, Status: reconcile.Succeeded,
			RawStatus: "succeeded", Target: "ch_paid", Charge: "ch_paid", Created: reconcile.StampOf(t0.Add(2 * time.Hour))},
		{ID: "re_intent", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 1000, Currency: "kwd"}, Status: reconcile.Pending,
			RawStatus: "requires_action", Target: "pi_1", PaymentIntent: "pi_1", Created: reconcile.StampOf(t0.Add(2 * time.Hour))},
	}
	for _, o := range objs {
		e.add(t, "", o)
	}
	r := e.reader(t, nil)
	l, err := r.List(t.Context(), window)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(objs)
	slices.SortFunc(want, func(a, b reconcile.ProviderObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
	if diff := gocmp.Diff(want, l.Objects); diff != "" {
		t.Errorf("listed objects (-want +got):\n%s", diff)
	}
	got, _ := r.Retrieve(t.Context(), []string{"ch_auth", "ch_paid", "pi_1", "re_charge", "re_intent"})
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("retrieved objects (-want +got):\n%s", diff)
	}
}

func TestRetrieve(t *testing.T) {
	e := newEnv(t)
	d := populate(t, e, 30)
	r := e.reader(t, func(o *StripeOptions) { o.MaxRetries = 2 })

	objs, lookups := r.Retrieve(t.Context(), []string{"re_00000", "ch_00001", "pi_00004", "ch_missing", "re_missing",
		"xx_1", "", "ch_00001", "ch_before"})
	wantLookups := []string{"ch_00001 found", "ch_before found", "ch_missing not_found", "pi_00004 found",
		"re_00000 found", "re_missing not_found", "xx_1 failed"}
	var gotLookups []string
	for _, l := range lookups {
		gotLookups = append(gotLookups, l.ID+" "+string(l.Result))
	}
	if diff := gocmp.Diff(wantLookups, gotLookups); diff != "" {
		t.Errorf("lookups (-want +got):\n%s", diff)
	}
	for _, l := range lookups {
		if (l.Err != "") != (l.Result == reconcile.LookupFailed) {
			t.Errorf("lookup %+v: Err set iff failed", l)
		}
		if l.ID == "xx_1" && !strings.Contains(l.Err, "prefix") {
			t.Errorf("lookup of xx_1 says %q, want the unknown prefix named", l.Err)
		}
	}
	if got := len(objs); got != 4 {
		t.Errorf("retrieved %d objects, want 4", got)
	}
	for _, o := range objs {
		if o.ID == "ch_00001" && (o.Money.Amount != d.byKind[reconcile.Charge][1].Money.Amount || o.Kind != reconcile.Charge) {
			t.Errorf("ch_00001 = %+v", o)
		}
	}

	t.Run("500 forever fails, never not found", func(t *testing.T) {
		e.srv.SetFaults(stripesim.Faults{ServerErrorEvery: 1})
		defer e.srv.SetFaults(stripesim.Faults{})
		e.srv.ResetStats()
		_, lookups := r.Retrieve(t.Context(), []string{"ch_00001", "ch_missing"})
		for _, l := range lookups {
			if l.Result != reconcile.LookupFailed || !strings.Contains(l.Err, "500") || !strings.Contains(l.Err, l.ID) {
				t.Errorf("lookup = %+v, want failed, naming the id and the 500", l)
			}
		}
		if got := e.srv.Stats().Requests; got != 2*3 {
			t.Errorf("requests = %d, want 6 (two ids, three attempts each)", got)
		}
	})
	t.Run("a timeout fails, never not found", func(t *testing.T) {
		e.srv.SetFaults(stripesim.Faults{Latency: 200 * time.Millisecond})
		defer e.srv.SetFaults(stripesim.Faults{})
		slow := e.reader(t, func(o *StripeOptions) { o.RequestTimeout, o.MaxRetries = 20*time.Millisecond, 1 })
		_, lookups := slow.Retrieve(t.Context(), []string{"ch_missing"})
		if l := lookups[0]; l.Result != reconcile.LookupFailed || !strings.Contains(l.Err, "deadline exceeded") || !strings.Contains(l.Err, "2 attempts") {
			t.Errorf("lookup = %+v, want failed after 2 attempts that timed out", l)
		}
	})
	t.Run("a 404 that is not resource_missing proves nothing", func(t *testing.T) {
		wrongBase := e.reader(t, func(o *StripeOptions) { o.BaseURL = e.base + "/proxy" })
		_, lookups := wrongBase.Retrieve(t.Context(), []string{"ch_missing"})
		if lookups[0].Result != reconcile.LookupFailed {
			t.Errorf("lookup through a wrong base URL = %+v, want failed", lookups[0])
		}
	})
}

func TestKeyNeverInErrorsOrLogs(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 10)
	const wrongKey = "sk_test_WRONGwrongWRONG98765"
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	r := e.reader(t, func(o *StripeOptions) { o.APIKey, o.Logger, o.Concurrency = wrongKey, logger, 1 })
	_, err := r.List(t.Context(), window)
	var re *RequestError
	if !errors.As(err, &re) || re.Status != http.StatusUnauthorized || re.Attempts != 1 {
		t.Fatalf("List with a wrong key = %v, want a 401 after one attempt", err)
	}
	_, lookups := r.Retrieve(t.Context(), []string{"ch_00001"})

	good := e.reader(t, func(o *StripeOptions) { o.Logger, o.MaxRetries = logger, 1 })
	e.srv.SetFaults(stripesim.Faults{ServerErrorEvery: 1})
	_, err2 := good.List(t.Context(), window)
	if err2 == nil {
		t.Fatal("List against a failing server = nil error")
	}
	texts := map[string]string{"401 error": err.Error(), "lookup": lookups[0].Err, "500 error": err2.Error(), "logs": logs.String()}
	for name, text := range texts {
		for _, key := range []string{wrongKey, testKey} {
			if strings.Contains(text, key) || strings.Contains(text, key[len(key)-12:]) {
				t.Errorf("%s holds an API key: %s", name, text)
			}
		}
	}
	if !strings.Contains(logs.String(), "retried") {
		t.Errorf("debug logs do not mention the retries:\n%s", logs.String())
	}
}

func TestScrubSecret(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Invalid API Key provided: " + testKey, "Invalid API Key provided: <redacted>"},
		{"Couldn't deserialize JSON (response status: 200, body sample: '{\"metadata\":{\"card\":\"4242 4242 4242 4242\"}'): unexpected end of JSON input",
			"malformed response: undecodable JSON: unexpected end of JSON input"},
		{"plain", "plain"},
		// stripe-go's message for an error response without a Stripe
		// error is the whole body.
		{`{"customer": {"email": "jane@example.com"}}`, "an answer that is not a Stripe error (body not shown)"},
		{" <html><body>card 4242 4242 4242 4242</body></html>", "an answer that is not a Stripe error (body not shown)"},
	}
	for _, tt := range tests {
		if got := scrubSecret(tt.in, testKey); got != tt.want {
			t.Errorf("scrubSecret(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A gateway's error page, or a JSON error answer without Stripe's "error",
// reaches no error text: stripe-go makes the whole body the message.
func TestForeignErrorBodyIsNotShown(t *testing.T) {
	for _, body := range []string{`{"detail": {"email": "jane@example.com", "card": "4242424242424242"}}`,
		"<html>upstream for jane@example.com failed</html>"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, body)
		}))
		o := testOptions()
		o.BaseURL, o.Rate, o.MaxRetries, o.RetryBase, o.RetryMax = srv.URL, math.Inf(1), 1, time.Millisecond, time.Millisecond
		r, err := NewStripe(o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.List(t.Context(), window)
		srv.Close()
		if err == nil {
			t.Fatalf("List against a 502 = nil error")
		}
		if msg := err.Error(); strings.Contains(msg, "jane@") || strings.Contains(msg, "4242") {
			t.Errorf("List against a 502 with body %q: error %q", body, msg)
		}
	}
}

func TestListCanceled(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 10)
	e.srv.SetFaults(stripesim.Faults{ServerErrorEvery: 1})
	ctx, cancel := context.WithCancel(t.Context())
	r := e.reader(t, func(o *StripeOptions) {
		o.RetryBase, o.RetryMax = time.Hour, time.Hour
		o.Progress = func(ProgressEvent) {}
	})
	r.sleep = func(ctx context.Context, d time.Duration) error { cancel(); return sleepContext(ctx, d) }
	_, err := r.List(ctx, window)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("List canceled during a backoff = %v, want context.Canceled", err)
	}
}

func TestProgress(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 250)
	var got []ProgressEvent
	r := e.reader(t, func(o *StripeOptions) { o.Progress = func(p ProgressEvent) { got = append(got, p) } })
	l, err := r.List(t.Context(), window)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != l.Stats.Pages {
		t.Fatalf("%d progress events, want one per page (%d)", len(got), l.Stats.Pages)
	}
	for i, p := range got {
		if p.Pages != i+1 || (i > 0 && p.Items < got[i-1].Items) || p.List == "" {
			t.Errorf("progress %d = %+v, want pages counting up and items never down", i, p)
		}
	}
	if last := got[len(got)-1]; last.Items != l.Stats.Charges+l.Stats.Refunds+l.Stats.PaymentIntents+l.Stats.Events {
		t.Errorf("last progress %+v, want every item read (%+v)", last, l.Stats)
	}
}

func TestNewStripeValidates(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*StripeOptions)
		want string // in the error; "" for no error
	}{
		{"defaults", func(*StripeOptions) {}, ""},
		{"no key", func(o *StripeOptions) { o.APIKey = " " }, "APIKey"},
		{"no rate", func(o *StripeOptions) { o.Rate = 0 }, "Rate"},
		{"negative rate", func(o *StripeOptions) { o.Rate = -1 }, "Rate"},
		{"NaN rate", func(o *StripeOptions) { o.Rate = math.NaN() }, "Rate"},
		{"unlimited rate", func(o *StripeOptions) { o.Rate = math.Inf(1) }, ""},
		{"negative burst", func(o *StripeOptions) { o.Burst = -1 }, "Burst"},
		{"no concurrency", func(o *StripeOptions) { o.Concurrency = 0 }, "Concurrency"},
		{"huge concurrency", func(o *StripeOptions) { o.Concurrency = 1000 }, "Concurrency"},
		{"no retries", func(o *StripeOptions) { o.MaxRetries = 0 }, ""},
		{"negative retries", func(o *StripeOptions) { o.MaxRetries = -1 }, "MaxRetries"},
		{"max below base", func(o *StripeOptions) { o.RetryBase, o.RetryMax = time.Second, time.Millisecond }, "RetryMax"},
		{"negative timeout", func(o *StripeOptions) { o.RequestTimeout = -time.Second }, "RequestTimeout"},
		{"no timeout", func(o *StripeOptions) { o.RequestTimeout = 0 }, "RequestTimeout"},
		{"no base URL", func(o *StripeOptions) { o.BaseURL = "" }, "STRIPE_API_BASE"},
		{"base URL without scheme", func(o *StripeOptions) { o.BaseURL = "api.stripe.com" }, "STRIPE_API_BASE"},
		{"base URL of another scheme", func(o *StripeOptions) { o.BaseURL = "ftp://x" }, "BaseURL"},
	}
	for _, tt := range tests {
		opts := testOptions()
		tt.mod(&opts)
		_, err := NewStripe(opts)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("NewStripe(%s) = %v, want no error", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("NewStripe(%s) = %v, want an error naming %s", tt.name, err, tt.want)
		case err != nil && strings.Contains(err.Error(), testKey):
			t.Errorf("NewStripe(%s) error holds the key: %v", tt.name, err)
		}
	}
}

// TestNoRetriesMeansNone: stripe.max_retries: 0 is a choice, not a
// missing value (it once became 8).
func TestNoRetriesMeansNone(t *testing.T) {
	o := testOptions()
	o.MaxRetries = 0
	r, err := NewStripe(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.opts.MaxRetries != 0 {
		t.Errorf("MaxRetries 0 became %d", r.opts.MaxRetries)
	}
}

func TestSpans(t *testing.T) {
	tests := []struct {
		name     string
		from, to int64
		n        int
		min      time.Duration
		want     []span
	}{
		{"empty", 10, 10, 4, time.Second, nil},
		{"even", 0, 400, 4, time.Second, []span{{0, 100}, {100, 200}, {200, 300}, {300, 400}}},
		{"uneven", 0, 10, 3, time.Second, []span{{0, 3}, {3, 6}, {6, 10}}},
		{"short window, long minimum", 0, 5400, 4, time.Hour, []span{{0, 5400}}},
		{"more slices than seconds", 0, 2, 8, time.Nanosecond, []span{{0, 1}, {1, 2}}},
	}
	for _, tt := range tests {
		if got := spans(tt.from, tt.to, tt.n, tt.min); !slices.Equal(got, tt.want) {
			t.Errorf("spans(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestBackoffIsBoundedAndSeeded(t *testing.T) {
	mk := func(seed uint64) *Stripe {
		o := testOptions()
		o.RetryBase, o.RetryMax, o.Seed = 100*time.Millisecond, time.Second, seed
		r, err := NewStripe(o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := mk(3), mk(3)
	for attempt := 1; attempt <= 40; attempt++ {
		da, db := a.backoff(attempt), b.backoff(attempt)
		if da != db {
			t.Errorf("attempt %d: seed 3 gave %v then %v", attempt, da, db)
		}
		ceiling := min(time.Second, 100*time.Millisecond<<min(attempt-1, 20))
		if da < ceiling/2 || da > ceiling {
			t.Errorf("attempt %d: backoff %v outside [%v, %v]", attempt, da, ceiling/2, ceiling)
		}
	}
}

// keyEvidence reads from a decoded stripe.Event which idempotency key
// created which object, through evidence as the reader's scanner does:
// the tests state evidence's rules over whole events.
// kinds is keyEventKinds().
func keyEvidence(ev *stripe.Event, kinds map[string]keyEvent) (reconcile.KeyEvidence, bool) {
	if ev.Request == nil || ev.Data == nil {
		return reconcile.KeyEvidence{}, false
	}
	id, _ := ev.Data.Object["id"].(string)
	object, _ := ev.Data.Object["object"].(string)
	return evidence(kinds, ev.ID, string(ev.Type), ev.Created, ev.Request.IdempotencyKey, ev.Request.ID, id, object)
}

// RequestCounts counts every attempt the reader sent, as the server
// counted them: lists, retrievals, and a list that failed for good, whose
// listing (and its Stats) never comes back (docs/design.md, "Errors").
func TestRequestCountsEveryAttempt(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 30)
	// One slice at a time: a failing list then stops where it failed,
	// rather than with requests of other slices abandoned in flight,
	// which the reader started but the server may never have seen.
	r := e.reader(t, func(o *StripeOptions) { o.MaxRetries, o.Concurrency = 2, 1 })
	w := reconcile.Window{From: time.Now().Add(-100 * time.Hour), To: time.Now()}
	steps := []struct {
		name   string
		faults stripesim.Faults
		do     func()
	}{
		{"a list with retries", stripesim.Faults{ServerErrorEvery: 3}, func() {
			if _, err := r.List(t.Context(), w); err != nil {
				t.Fatal(err)
			}
		}},
		{"a list that fails", stripesim.Faults{ServerErrorEvery: 1}, func() {
			if _, err := r.List(t.Context(), w); err == nil {
				t.Fatal("List succeeded against a server answering 500 to everything")
			}
		}},
		{"retrievals", stripesim.Faults{ServerErrorEvery: 2}, func() { r.Retrieve(t.Context(), []string{"ch_00001", "ch_missing", "re_missing"}) }},
		{"a probe", stripesim.Faults{}, func() {
			if _, err := r.Probe(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, st := range steps {
		e.srv.SetFaults(st.faults)
		e.srv.ResetStats()
		before := r.RequestCounts()
		st.do()
		got := r.RequestCounts().Sub(before)
		if server := e.srv.Stats().Requests; got.Requests != server || server == 0 {
			t.Errorf("%s: RequestCounts says %d requests, the server received %d", st.name, got.Requests, server)
		}
		if (got.Retries > 0) != (st.faults.ServerErrorEvery != 0) {
			t.Errorf("%s: %d retries under faults %+v", st.name, got.Retries, st.faults)
		}
	}
	e.srv.SetFaults(stripesim.Faults{})
}

// A call whose last attempt had no answer, after earlier ones were
// answered (here a 503, then a dropped connection), does not say Stripe
// gave no answer: it did.
func TestAnsweredThenUnansweredIsNotNoAnswer(t *testing.T) {
	var (
		calls atomic.Int64
		mu    sync.Mutex
		seen  = map[string]bool{} // each list's first request is answered
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		mu.Lock()
		first := !seen[r.URL.Path]
		seen[r.URL.Path] = true
		mu.Unlock()
		if first {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"type":"api_error","message":"try again"}}`)
			return
		}
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	e := &env{base: srv.URL}
	// One slice: each list's calls are one after another, so each list's
	// first call is the one the server answers.
	r := e.reader(t, func(o *StripeOptions) { o.MaxRetries, o.Concurrency = 2, 1 })
	_, err := r.List(t.Context(), window)
	if err == nil {
		t.Fatal("List over a failing server succeeded")
	}
	if calls.Load() < 2 {
		t.Fatalf("the server saw %d requests, want the 503 and a dropped one", calls.Load())
	}
	if strings.Contains(err.Error(), "no answer from Stripe") {
		t.Errorf("error %q says Stripe gave no answer, though it answered 503 first", err)
	}
}
