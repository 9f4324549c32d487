package stripesim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
)

const testKey = "sk_test_stripesim0123456789"

var t0 = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

// start serves srv for the test and returns its base URL.
func start(tb testing.TB, srv *Server) string {
	tb.Helper()
	u, stop, err := srv.Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return u
}

type response struct {
	status int
	header http.Header
	body   map[string]any
}

func get(tb testing.TB, base, path string, q url.Values) response {
	tb.Helper()
	return do(tb, http.MethodGet, base, path, q, "Bearer "+testKey)
}

func do(tb testing.TB, method, base, path string, q url.Values, auth string) response {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), method, base+path+"?"+q.Encode(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatalf("%s %s: read body: %v", method, path, err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		tb.Fatalf("%s %s: body is not JSON: %v: %s", method, path, err, raw)
	}
	return response{status: res.StatusCode, header: res.Header, body: body}
}

func ids(tb testing.TB, r response) []string {
	tb.Helper()
	if r.status != http.StatusOK {
		tb.Fatalf("status %d, want 200: %v", r.status, r.body)
	}
	if r.body["object"] != "list" {
		tb.Fatalf("object = %v, want list", r.body["object"])
	}
	var out []string
	for _, d := range r.body["data"].([]any) {
		out = append(out, d.(map[string]any)["id"].(string))
	}
	return out
}

func mustAdd(tb testing.TB, s *Server, key string, objs ...reconcile.ProviderObject) {
	tb.Helper()
	mustAddAs(tb, s, "", key, objs...)
}

func charge(id string, created time.Time) reconcile.ProviderObject {
	return reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(created)}
}

// fiveCharges adds ch_1..ch_5 one second apart, plus ch_3b in the same
// second as ch_3 (ties order by id, descending).
func fiveCharges(tb testing.TB, s *Server) {
	tb.Helper()
	for i := 1; i <= 5; i++ {
		mustAdd(tb, s, "", charge(fmt.Sprintf("ch_%d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	mustAdd(tb, s, "", charge("ch_3b", t0.Add(3*time.Second)))
}

func TestListOrderCursorsAndFilters(t *testing.T) {
	s := New(testKey)
	fiveCharges(t, s)
	base := start(t, s)
	sec := func(i int) string { return fmt.Sprint(t0.Unix() + int64(i)) }

	tests := []struct {
		name string
		q    url.Values
		want []string
		more bool
	}{
		{"default", nil, []string{"ch_5", "ch_4", "ch_3b", "ch_3", "ch_2", "ch_1"}, false},
		{"limit", url.Values{"limit": {"2"}}, []string{"ch_5", "ch_4"}, true},
		{"starting after", url.Values{"limit": {"2"}, "starting_after": {"ch_4"}}, []string{"ch_3b", "ch_3"}, true},
		{"starting after the tie", url.Values{"limit": {"2"}, "starting_after": {"ch_3b"}}, []string{"ch_3", "ch_2"}, true},
		{"last page", url.Values{"limit": {"2"}, "starting_after": {"ch_3"}}, []string{"ch_2", "ch_1"}, false},
		{"ending before", url.Values{"limit": {"2"}, "ending_before": {"ch_2"}}, []string{"ch_3b", "ch_3"}, true},
		{"ending before, first page", url.Values{"limit": {"2"}, "ending_before": {"ch_4"}}, []string{"ch_5"}, false},
		{"gte lt", url.Values{"created[gte]": {sec(2)}, "created[lt]": {sec(4)}}, []string{"ch_3b", "ch_3", "ch_2"}, false},
		{"gt lte", url.Values{"created[gt]": {sec(2)}, "created[lte]": {sec(4)}}, []string{"ch_4", "ch_3b", "ch_3"}, false},
		{"plain created", url.Values{"created": {sec(3)}}, []string{"ch_3b", "ch_3"}, false},
		{"cursor outside the range", url.Values{"created[lt]": {sec(3)}, "starting_after": {"ch_5"}}, []string{"ch_2", "ch_1"}, false},
		{"empty range", url.Values{"created[gte]": {sec(9)}}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get(t, base, "/v1/charges", tt.q)
			if diff := cmp.Diff(tt.want, ids(t, r)); diff != "" {
				t.Errorf("GET /v1/charges?%s ids (-want +got):\n%s", tt.q.Encode(), diff)
			}
			if got := r.body["has_more"]; got != tt.more {
				t.Errorf("has_more = %v, want %v", got, tt.more)
			}
			if got := r.body["url"]; got != "/v1/charges" {
				t.Errorf("url = %v, want /v1/charges", got)
			}
		})
	}
	s.AssertNoWrites(t)
}

// Objects added after the lists were read are merged into their order,
// newer and older alike, and every cursor finds its place again: the list
// paged two at a time is the whole list in Stripe's order, after each of
// each addition: newer ones, one between the others, and an older one.
func TestAddingAfterReading(t *testing.T) {
	s := New(testKey)
	fiveCharges(t, s)
	base := start(t, s)
	page := func() []string {
		var all []string
		q := url.Values{"limit": {"2"}}
		for {
			r := get(t, base, "/v1/charges", q)
			got := ids(t, r)
			all = append(all, got...)
			if r.body["has_more"] != true {
				return all
			}
			q.Set("starting_after", got[len(got)-1])
		}
	}
	if diff := cmp.Diff([]string{"ch_5", "ch_4", "ch_3b", "ch_3", "ch_2", "ch_1"}, page()); diff != "" {
		t.Fatalf("before (-want +got):\n%s", diff)
	}
	// Newer ones, the usual day's business, and one between the others.
	mustAdd(t, s, "", charge("ch_7", t0.Add(7*time.Second)), charge("ch_6", t0.Add(6*time.Second)),
		charge("ch_2b", t0.Add(2*time.Second)))
	if diff := cmp.Diff([]string{"ch_7", "ch_6", "ch_5", "ch_4", "ch_3b", "ch_3", "ch_2b", "ch_2", "ch_1"}, page()); diff != "" {
		t.Errorf("after adding (-want +got):\n%s", diff)
	}
	r := get(t, base, "/v1/charges", url.Values{"limit": {"2"}, "ending_before": {"ch_2b"}})
	if diff := cmp.Diff([]string{"ch_3b", "ch_3"}, ids(t, r)); diff != "" {
		t.Errorf("ending before ch_2b (-want +got):\n%s", diff)
	}
	// An older one: every place before it moves.
	mustAdd(t, s, "", charge("ch_0", t0))
	if diff := cmp.Diff([]string{"ch_7", "ch_6", "ch_5", "ch_4", "ch_3b", "ch_3", "ch_2b", "ch_2", "ch_1", "ch_0"}, page()); diff != "" {
		t.Errorf("after adding an older one (-want +got):\n%s", diff)
	}
	if r := get(t, base, "/v1/charges/ch_2b", nil); r.status != http.StatusOK || r.body["id"] != "ch_2b" {
		t.Errorf("retrieve ch_2b: %d %v", r.status, r.body["id"])
	}
}

func TestParameterErrors(t *testing.T) {
	s := New(testKey)
	fiveCharges(t, s)
	base := start(t, s)
	tests := []struct {
		name  string
		path  string
		q     url.Values
		param string
	}{
		{"limit zero", "/v1/charges", url.Values{"limit": {"0"}}, "limit"},
		{"limit 101", "/v1/charges", url.Values{"limit": {"101"}}, "limit"},
		{"limit not a number", "/v1/charges", url.Values{"limit": {"ten"}}, "limit"},
		{"created not a number", "/v1/charges", url.Values{"created[gte]": {"yesterday"}}, "created[gte]"},
		{"unknown parameter", "/v1/charges", url.Values{"status": {"succeeded"}}, "status"},
		{"types on charges", "/v1/charges", url.Values{"types[0]": {"charge.succeeded"}}, "types[0]"},
		{"wildcard in types", "/v1/events", url.Values{"types[0]": {"charge.*"}}, "types[0]"},
		{"type and types", "/v1/events", url.Values{"type": {"charge.*"}, "types[0]": {"refund.created"}}, "types"},
		{"two wildcards", "/v1/events", url.Values{"type": {"*.*"}}, "type"},
		{"unknown cursor", "/v1/charges", url.Values{"starting_after": {"ch_nope"}}, "starting_after"},
		{"both cursors", "/v1/charges", url.Values{"starting_after": {"ch_1"}, "ending_before": {"ch_5"}}, "ending_before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get(t, base, tt.path, tt.q)
			if r.status != http.StatusBadRequest {
				t.Fatalf("GET %s?%s status = %d, want 400", tt.path, tt.q.Encode(), r.status)
			}
			e, _ := r.body["error"].(map[string]any)
			if e["type"] != "invalid_request_error" || e["param"] != tt.param || e["message"] == "" {
				t.Errorf("error = %v, want invalid_request_error about %s with a message", e, tt.param)
			}
		})
	}
	var types url.Values = url.Values{}
	for i := range 21 {
		types.Set(fmt.Sprintf("types[%d]", i), fmt.Sprintf("charge.t%d", i))
	}
	if r := get(t, base, "/v1/events", types); r.status != http.StatusBadRequest {
		t.Errorf("21 types: status = %d, want 400", r.status)
	}
	if got := s.Stats().BadRequests; got != len(tests)+1 {
		t.Errorf("BadRequests = %d, want %d", got, len(tests)+1)
	}
}

func TestRetrieve(t *testing.T) {
	s := New(testKey)
	fiveCharges(t, s)
	base := start(t, s)
	if r := get(t, base, "/v1/charges/ch_2", nil); r.status != 200 || r.body["id"] != "ch_2" || r.body["object"] != "charge" {
		t.Errorf("GET ch_2 = %d %v, want the charge", r.status, r.body)
	}
	for _, path := range []string{"/v1/charges/ch_nope", "/v1/refunds/ch_2", "/v1/payment_intents/pi_x"} {
		r := get(t, base, path, nil)
		e, _ := r.body["error"].(map[string]any)
		if r.status != http.StatusNotFound || e["code"] != "resource_missing" || e["type"] != "invalid_request_error" {
			t.Errorf("GET %s = %d %v, want 404 resource_missing", path, r.status, r.body)
		}
	}
	if r := get(t, base, "/v1/balance_transactions", nil); r.status != http.StatusNotFound {
		t.Errorf("unknown path status = %d, want 404", r.status)
	}
}

func TestAuthAndWrites(t *testing.T) {
	s := New(testKey)
	fiveCharges(t, s)
	base := start(t, s)
	for _, auth := range []string{"", "Bearer sk_test_wrongwrongwrong1234", "Basic " + "c2tfdGVzdA=="} {
		r := do(t, http.MethodGet, base, "/v1/charges", nil, auth)
		e, _ := r.body["error"].(map[string]any)
		if r.status != http.StatusUnauthorized || e["type"] != "invalid_request_error" {
			t.Errorf("auth %q: %d %v, want 401 invalid_request_error", auth, r.status, r.body)
		}
		if msg, _ := e["message"].(string); strings.Contains(msg, "wrongwrong") {
			t.Errorf("401 message %q echoes the key", msg)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodDelete} {
		if r := do(t, m, base, "/v1/refunds", nil, "Bearer "+testKey); r.status != http.StatusForbidden {
			t.Errorf("%s status = %d, want 403", m, r.status)
		}
	}
	st := s.Stats()
	if st.Writes != 2 || st.Unauthorized != 3 {
		t.Errorf("writes, unauthorized = %d, %d, want 2, 3", st.Writes, st.Unauthorized)
	}
	if want := []string{"POST /v1/refunds", "DELETE /v1/refunds"}; !slices.Equal(st.WriteRequests, want) {
		t.Errorf("WriteRequests = %v, want %v", st.WriteRequests, want)
	}
	var rec recorder
	s.AssertNoWrites(&rec)
	if len(rec.errs) != 1 {
		t.Errorf("AssertNoWrites after two writes reported %d errors, want 1", len(rec.errs))
	}
}

type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

type eventView struct {
	Type, Object, Key string
	HasRequest        bool
}

func events(tb testing.TB, base string, q url.Values) []eventView {
	tb.Helper()
	if q == nil {
		q = url.Values{}
	}
	q.Set("limit", "100")
	r := get(tb, base, "/v1/events", q)
	ids(tb, r)
	var out []eventView
	for _, d := range r.body["data"].([]any) {
		ev := d.(map[string]any)
		req := ev["request"].(map[string]any)
		key, _ := req["idempotency_key"].(string)
		obj := ev["data"].(map[string]any)["object"].(map[string]any)
		out = append(out, eventView{Type: ev["type"].(string), Object: obj["id"].(string), Key: key, HasRequest: req["id"] != nil})
	}
	slices.Reverse(out) // oldest first reads like the story
	return out
}

func TestCreationAndUpdateEvents(t *testing.T) {
	s := New(testKey)
	mustAdd(t, s, "k-charge", charge("ch_1", t0))
	mustAdd(t, s, "k-pi", reconcile.ProviderObject{ID: "pi_1", Kind: reconcile.PaymentIntent, Money: reconcile.Money{Amount: 500, Currency: "eur"},
		Status: reconcile.Succeeded, Charge: "ch_1", Created: reconcile.StampOf(t0.Add(time.Second))})
	mustAdd(t, s, "k-refund", reconcile.ProviderObject{ID: "re_1", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 100, Currency: "usd"},
		Status: reconcile.Pending, Target: "ch_1", Created: reconcile.StampOf(t0.Add(2 * time.Second))})
	mustAdd(t, s, "", reconcile.ProviderObject{ID: "ch_2", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 1, Currency: "jpy"},
		Status: reconcile.Failed, Created: reconcile.StampOf(t0.Add(3 * time.Second))})
	if err := s.Update("re_1", t0.Add(time.Hour), func(o *reconcile.ProviderObject) { o.Status = reconcile.Succeeded }); err != nil {
		t.Fatal(err)
	}
	base := start(t, s)

	got := events(t, base, nil)
	autoKey := got[5].Key
	want := []eventView{
		{"charge.succeeded", "ch_1", "k-charge", true},
		{"payment_intent.created", "pi_1", "k-pi", true},
		{"payment_intent.succeeded", "pi_1", "k-pi", true},
		{"refund.created", "re_1", "k-refund", true},
		{"charge.refunded", "ch_1", "k-refund", true},
		{"charge.failed", "ch_2", autoKey, true},
		{"refund.updated", "re_1", "", false},
		{"charge.refund.updated", "re_1", "", false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if !strings.Contains(autoKey, "_") || len(autoKey) < 8 {
		t.Errorf("automatic key %q, want one shaped like stripe-go's", autoKey)
	}

	filters := []struct {
		name string
		q    url.Values
		want []string
	}{
		{"type family", url.Values{"type": {"charge.*"}}, []string{"charge.succeeded", "charge.refunded", "charge.failed", "charge.refund.updated"}},
		{"type exact", url.Values{"type": {"refund.created"}}, []string{"refund.created"}},
		{"types", url.Values{"types[0]": {"refund.created"}, "types[1]": {"payment_intent.created"}}, []string{"payment_intent.created", "refund.created"}},
		{"types[]", url.Values{"types[]": {"charge.failed", "refund.updated"}}, []string{"charge.failed", "refund.updated"}},
	}
	for _, tt := range filters {
		var types []string
		for _, e := range events(t, base, tt.q) {
			types = append(types, e.Type)
		}
		if diff := cmp.Diff(tt.want, types); diff != "" {
			t.Errorf("%s: event types (-want +got):\n%s", tt.name, diff)
		}
	}

	r := get(t, base, "/v1/refunds", url.Values{"charge": {"ch_1"}})
	if got := ids(t, r); !slices.Equal(got, []string{"re_1"}) {
		t.Errorf("refunds of ch_1 = %v, want [re_1]", got)
	}
	r = get(t, base, "/v1/refunds", url.Values{"payment_intent": {"pi_1"}})
	if got := ids(t, r); len(got) != 0 {
		t.Errorf("refunds of pi_1 = %v, want none (re_1 names only its charge)", got)
	}
	if r := get(t, base, "/v1/refunds/re_1", nil); r.body["status"] != "succeeded" {
		t.Errorf("re_1 status after update = %v, want succeeded", r.body["status"])
	}
}

// TestStripeGoDecodes reads the rendered objects through stripe-go, the
// client the reconciler uses, so that a field the wire format gets wrong
// fails here rather than in the reader.
func TestStripeGoDecodes(t *testing.T) {
	s := New(testKey)
	uncaptured := charge("ch_auth", t0)
	uncaptured.Status, uncaptured.RawStatus = reconcile.Pending, "succeeded"
	uncaptured.Customer, uncaptured.PaymentIntent = "cus_1", "pi_1"
	uncaptured.Metadata = map[string]string{"obligation_id": "ob-1"}
	mustAdd(t, s, "", uncaptured)
	mustAdd(t, s, "", reconcile.ProviderObject{ID: "pi_1", Kind: reconcile.PaymentIntent, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Pending, Charge: "ch_auth", Customer: "cus_1", Created: reconcile.StampOf(t0)})
	mustAdd(t, s, "", reconcile.ProviderObject{ID: "re_1", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 100, Currency: "usd"},
		Status: reconcile.Canceled, Target: "pi_1", Created: reconcile.StampOf(t0)})
	base := start(t, s)

	sc := stripeClient(base)
	ch, err := sc.Charges.Get("ch_auth", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Status != "succeeded" || ch.Captured || ch.Amount != 8900 || ch.Currency != "usd" || ch.Customer.ID != "cus_1" ||
		ch.PaymentIntent.ID != "pi_1" || ch.Metadata["obligation_id"] != "ob-1" || ch.Created != t0.Unix() {
		t.Errorf("charge decoded as %+v", ch)
	}
	pi, err := sc.PaymentIntents.Get("pi_1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pi.Status != "processing" || pi.LatestCharge.ID != "ch_auth" {
		t.Errorf("payment intent status, latest charge = %s, %v", pi.Status, pi.LatestCharge)
	}
	it := sc.Refunds.List(&stripe.RefundListParams{PaymentIntent: stripe.String("pi_1")})
	var refunds []*stripe.Refund
	for it.Next() {
		refunds = append(refunds, it.Refund())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(refunds) != 1 || refunds[0].Status != "canceled" || refunds[0].Charge != nil || refunds[0].PaymentIntent.ID != "pi_1" {
		t.Errorf("refunds of pi_1 = %+v", refunds)
	}
	_, err = sc.Refunds.Get("re_nope", nil)
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 404 || se.Code != stripe.ErrorCodeResourceMissing {
		t.Errorf("missing refund error = %v, want a 404 resource_missing stripe.Error", err)
	}
	s.AssertNoWrites(t)
}

func TestFaults(t *testing.T) {
	newServer := func(t *testing.T, f Faults) (*Server, string) {
		s := New(testKey)
		fiveCharges(t, s)
		s.SetFaults(f)
		return s, start(t, s)
	}
	t.Run("every third is a 429 with the header asked for", func(t *testing.T) {
		s, base := newServer(t, Faults{RateLimitEvery: 3, ShouldRetry: "false"})
		var statuses []int
		for range 6 {
			r := get(t, base, "/v1/charges", nil)
			statuses = append(statuses, r.status)
			if r.status == 429 {
				e := r.body["error"].(map[string]any)
				if e["code"] != "rate_limit" || r.header.Get("Stripe-Should-Retry") != "false" {
					t.Errorf("429 = %v, header %q; want code rate_limit and Stripe-Should-Retry: false", e, r.header.Get("Stripe-Should-Retry"))
				}
			}
		}
		if want := []int{200, 200, 429, 200, 200, 429}; !slices.Equal(statuses, want) {
			t.Errorf("statuses = %v, want %v", statuses, want)
		}
		if got := s.Stats().RateLimited; got != 2 {
			t.Errorf("RateLimited = %d, want 2", got)
		}
	})
	t.Run("fail list", func(t *testing.T) {
		_, base := newServer(t, Faults{FailList: ListCharges, FailListAfter: 1})
		if r := get(t, base, "/v1/charges", nil); r.status != 200 {
			t.Errorf("first request to a list failing after one = %d, want 200", r.status)
		}
		for range 2 {
			if r := get(t, base, "/v1/charges", nil); r.status != 500 || r.body["error"].(map[string]any)["type"] != "api_error" {
				t.Errorf("failing list = %d %v, want 500 api_error", r.status, r.body)
			}
		}
		if r := get(t, base, "/v1/charges/ch_1", nil); r.status != 200 {
			t.Errorf("retrieve beside a failing list = %d, want 200", r.status)
		}
	})
	t.Run("probabilities are reproducible for a seed", func(t *testing.T) {
		run := func(seed uint64) []int {
			_, base := newServer(t, Faults{Seed: seed, ServerErrorP: 0.3, RateLimitP: 0.2})
			var out []int
			for range 30 {
				out = append(out, get(t, base, "/v1/charges/ch_1", nil).status)
			}
			return out
		}
		a, b, c := run(7), run(7), run(8)
		if !slices.Equal(a, b) {
			t.Errorf("seed 7 twice: %v then %v", a, b)
		}
		if slices.Equal(a, c) {
			t.Errorf("seeds 7 and 8 gave the same faults %v", a)
		}
		if !slices.Contains(a, 500) || !slices.Contains(a, 429) || !slices.Contains(a, 200) {
			t.Errorf("statuses %v, want a mix of 200, 429 and 500", a)
		}
	})
	t.Run("dropped connection", func(t *testing.T) {
		s, base := newServer(t, Faults{DropEvery: 1})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/charges", nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		if err == nil {
			t.Fatal("reading a dropped response succeeded, want an error")
		}
		if got := s.Stats().Dropped; got != 1 {
			t.Errorf("Dropped = %d, want 1", got)
		}
	})
	t.Run("rate limit", func(t *testing.T) {
		s, base := newServer(t, Faults{RateLimit: 1, RateBurst: 2})
		var statuses []int
		for range 4 {
			statuses = append(statuses, get(t, base, "/v1/charges/ch_1", nil).status)
		}
		// A burst of two, then at most one a second: the 4 requests take
		// milliseconds, so the last two are refused.
		if want := []int{200, 200, 429, 429}; !slices.Equal(statuses, want) {
			t.Errorf("statuses = %v, want %v", statuses, want)
		}
		if got := s.Stats().RateLimited; got != 2 {
			t.Errorf("RateLimited = %d, want 2", got)
		}
	})
}

func TestCounters(t *testing.T) {
	s := New(testKey)
	fiveCharges(t, s)
	base := start(t, s)
	get(t, base, "/v1/charges", url.Values{"limit": {"4"}})
	get(t, base, "/v1/charges", url.Values{"limit": {"4"}, "starting_after": {"ch_3"}})
	get(t, base, "/v1/charges/ch_1", nil)
	st := s.Stats()
	if st.Requests != 3 || st.Paths["/v1/charges"] != 2 || st.Pages[ListCharges] != 2 || st.Objects[ListCharges] != 6 {
		t.Errorf("stats = %+v, want 3 requests, 2 pages of charges holding 6", st)
	}
	s.ResetStats()
	if st := s.Stats(); st.Requests != 0 || len(st.Pages) != 0 {
		t.Errorf("after reset: %+v", st)
	}
}

func TestAddRefusesBadObjects(t *testing.T) {
	s := New(testKey)
	mustAdd(t, s, "", charge("ch_1", t0))
	for name, o := range map[string]reconcile.ProviderObject{
		"duplicate":    charge("ch_1", t0),
		"empty id":     charge("", t0),
		"unknown kind": {ID: "tr_1", Kind: "transfer"},
	} {
		if err := s.Add(o, ""); err == nil {
			t.Errorf("Add(%s) = nil, want an error", name)
		}
	}
	if err := s.Update("ch_1", t0, func(o *reconcile.ProviderObject) { o.ID = "ch_2" }); err == nil {
		t.Error("Update changing the id = nil, want an error")
	}
	if _, err := s.AddEvent(Event{Type: "charge.updated", ObjectID: "ch_nope"}); err == nil {
		t.Error("AddEvent about an unknown object = nil, want an error")
	}
}

// rawGet returns a response's status, Content-Length header and body as
// sent.
func rawGet(tb testing.TB, base, path string) (int, string, []byte) {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodGet, base+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatalf("GET %s: read body: %v", path, err)
	}
	return res.StatusCode, res.Header.Get("Content-Length"), body
}

func TestMalformed(t *testing.T) {
	newServer := func(t *testing.T, f Faults) (*Server, string) {
		s := New(testKey)
		fiveCharges(t, s)
		s.SetFaults(f)
		return s, start(t, s)
	}
	// members decodes a body's top-level members, or fails.
	members := func(t *testing.T, body []byte) map[string]json.RawMessage {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("malformed body is not JSON: %v: %s", err, body)
		}
		return m
	}
	entries := func(t *testing.T, body []byte) []map[string]json.RawMessage {
		t.Helper()
		var out []map[string]json.RawMessage
		if err := json.Unmarshal(members(t, body)["data"], &out); err != nil || len(out) == 0 {
			t.Fatalf("data = %s, %v; want entries", members(t, body)["data"], err)
		}
		return out
	}
	tests := []struct {
		shape Shape
		check func(t *testing.T, page []byte)
	}{
		{ShapeEmpty, func(t *testing.T, page []byte) {
			if m := members(t, page); len(m) != 0 {
				t.Errorf("page = %s, want {}", page)
			}
		}},
		{ShapeNoData, func(t *testing.T, page []byte) {
			m := members(t, page)
			if _, ok := m["data"]; ok || string(m["object"]) != `"list"` || string(m["has_more"]) != "false" {
				t.Errorf("page = %s, want a list without data", page)
			}
		}},
		{ShapeNullData, func(t *testing.T, page []byte) {
			if m := members(t, page); string(m["data"]) != "null" || string(m["object"]) != `"list"` {
				t.Errorf("page = %s, want a list with data null", page)
			}
		}},
		{ShapeNoHasMore, func(t *testing.T, page []byte) {
			m := members(t, page)
			if _, ok := m["has_more"]; ok || len(entries(t, page)) != 6 {
				t.Errorf("page = %s, want the six charges and no has_more", page)
			}
		}},
		{ShapeNotList, func(t *testing.T, page []byte) {
			if m := members(t, page); string(m["object"]) != `"search_result"` || len(entries(t, page)) != 6 {
				t.Errorf("page = %s, want the six charges in a search_result", page)
			}
		}},
		{Without("amount"), func(t *testing.T, page []byte) {
			for _, e := range entries(t, page) {
				if _, ok := e["amount"]; ok || e["currency"] == nil || e["id"] == nil || e["amount_refunded"] == nil {
					t.Errorf("entry = %v, want every member but amount", e)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.shape), func(t *testing.T) {
			s, base := newServer(t, Faults{Malformed: tt.shape, MalformedList: ListCharges})
			status, _, page := rawGet(t, base, "/v1/charges")
			if status != http.StatusOK {
				t.Fatalf("status = %d, want 200", status)
			}
			tt.check(t, page)
			// Other lists are served as they are.
			if r := get(t, base, "/v1/events", nil); r.body["object"] != "list" || r.body["has_more"] != false {
				t.Errorf("events beside malformed charges = %v", r.body)
			}
			if st := s.Stats(); st.Malformed != 1 || st.Pages[ListCharges] != 0 || st.Objects[ListCharges] != 0 {
				t.Errorf("stats = %+v, want one malformed page, none of charges delivered", st)
			}
		})
	}

	t.Run("every other page of one list", func(t *testing.T) {
		s, base := newServer(t, Faults{Malformed: ShapeNullData, MalformedList: ListCharges, MalformedEvery: 2})
		var shapes []string
		for range 4 {
			get(t, base, "/v1/charges/ch_1", nil) // page shapes spare retrievals, which do not count
			r := get(t, base, "/v1/charges", nil)
			if r.body["data"] == nil {
				shapes = append(shapes, "null")
			} else {
				shapes = append(shapes, "list")
			}
		}
		if want := []string{"list", "null", "list", "null"}; !slices.Equal(shapes, want) {
			t.Errorf("pages = %v, want %v", shapes, want)
		}
		if got := s.Stats().Malformed; got != 2 {
			t.Errorf("Malformed = %d, want 2", got)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		_, plain := newServer(t, Faults{})
		_, whole, full := rawGet(t, plain, "/v1/charges")
		_, base := newServer(t, Faults{Malformed: ShapeTruncated})
		for _, path := range []string{"/v1/charges", "/v1/charges/ch_1"} {
			status, length, body := rawGet(t, base, path)
			if status != http.StatusOK || length != fmt.Sprint(len(body)) || json.Valid(body) || len(body) == 0 {
				t.Errorf("GET %s = %d, Content-Length %s, %d bytes, valid JSON %t; want 200, cut JSON, its length announced",
					path, status, length, len(body), json.Valid(body))
			}
			if path == "/v1/charges" && (!bytes.HasPrefix(full, body) || fmt.Sprint(2*len(body)) != whole && fmt.Sprint(2*len(body)+1) != whole) {
				t.Errorf("truncated page = %d bytes, want the first half of the %s bytes", len(body), whole)
			}
		}
	})
	t.Run("retrievals and events", func(t *testing.T) {
		s := New(testKey)
		mustAdd(t, s, "k", charge("ch_1", t0))
		base := start(t, s)
		s.SetFaults(Faults{Malformed: Without("currency")})
		if r := get(t, base, "/v1/charges/ch_1", nil); r.body["id"] != "ch_1" || r.body["currency"] != nil || r.body["amount"] == nil {
			t.Errorf("charge without currency = %v", r.body)
		}
		s.SetFaults(Faults{Malformed: ShapeEmpty, MalformedList: ListCharges})
		if r := get(t, base, "/v1/charges/ch_1", nil); len(r.body) != 0 {
			t.Errorf("empty charge = %v, want {}", r.body)
		}
		s.SetFaults(Faults{Malformed: Without("data.object"), MalformedList: ListEvents})
		_, _, page := rawGet(t, base, "/v1/events")
		for _, e := range entries(t, page) {
			var data map[string]json.RawMessage
			if err := json.Unmarshal(e["data"], &data); err != nil || len(data) != 0 || e["type"] == nil {
				t.Errorf("event %s: type %s, data %s; want its type and data {}", e["id"], e["type"], e["data"])
			}
		}
		// A member nothing has changes nothing: served, not counted.
		s.SetFaults(Faults{Malformed: Without("amount"), MalformedList: ListEvents})
		s.ResetStats()
		if r := get(t, base, "/v1/events", nil); len(ids(t, r)) != 1 || s.Stats().Malformed != 0 {
			t.Errorf("events without an amount they never had: %v, stats %+v", r.body, s.Stats())
		}
	})
	t.Run("unknown shape panics", func(t *testing.T) {
		for _, sh := range []Shape{"nonsense", Without(""), Without("data.")} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("SetFaults(Malformed: %q) did not panic", sh)
					}
				}()
				New(testKey).SetFaults(Faults{Malformed: sh})
			}()
		}
	})
}
