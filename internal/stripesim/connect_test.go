package stripesim

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	stripe "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"reconcile"
)

// stripeClient is the reconciler's client, stripe-go, pointed at base with
// no retries.
func stripeClient(base string) *client.API {
	return client.New(testKey, stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(base), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: stripe.Int64(0),
	}))
}

func mustAccount(tb testing.TB, s *Server, accts ...Account) {
	tb.Helper()
	for _, a := range accts {
		if err := s.AddAccount(a); err != nil {
			tb.Fatal(err)
		}
	}
}

func mustAddAs(tb testing.TB, s *Server, acct, key string, objs ...reconcile.ProviderObject) {
	tb.Helper()
	for _, o := range objs {
		if err := s.As(acct).Add(o, key); err != nil {
			tb.Fatal(err)
		}
	}
}

// connectServer is a platform with ch_p1 and two connected accounts:
// acct_A with ch_a1, ch_a2 and a refund of ch_a1, acct_B with ch_b1 and
// its own ch_p1 (ids are unique per account, as the reconciler must key
// them).
func connectServer(tb testing.TB) (*Server, string) {
	tb.Helper()
	s := New(testKey)
	mustAccount(tb, s,
		Account{ID: "acct_A", Name: "Alpha Shop LLC", DisplayName: "Alpha", Created: t0},
		Account{ID: "acct_B", DisplayName: "Beta", Created: t0.Add(time.Hour), Type: "express"})
	mustAdd(tb, s, "k-p1", charge("ch_p1", t0))
	mustAddAs(tb, s, "acct_A", "k-a1", charge("ch_a1", t0.Add(time.Second)))
	mustAddAs(tb, s, "acct_A", "", charge("ch_a2", t0.Add(2*time.Second)))
	mustAddAs(tb, s, "acct_A", "k-ra1", reconcile.ProviderObject{ID: "re_a1", Kind: reconcile.Refund,
		Money: reconcile.Money{Amount: 100, Currency: "usd"}, Status: reconcile.Succeeded, Target: "ch_a1", Created: t0.Add(3 * time.Second)})
	mustAddAs(tb, s, "acct_B", "k-b1", charge("ch_b1", t0.Add(time.Second)))
	mustAddAs(tb, s, "acct_B", "k-bp1", charge("ch_p1", t0.Add(4*time.Second)))
	return s, start(tb, s)
}

func listCharges(tb testing.TB, sc *client.API, acct string) []string {
	tb.Helper()
	p := &stripe.ChargeListParams{}
	p.Limit = stripe.Int64(1) // a page per charge: the header must ride every page
	if acct != "" {
		p.SetStripeAccount(acct)
	}
	var out []string
	it := sc.Charges.List(p)
	for it.Next() {
		out = append(out, it.Charge().ID)
	}
	if err := it.Err(); err != nil {
		tb.Fatalf("list charges of %q: %v", acct, err)
	}
	return out
}

func TestStripeAccountIsolation(t *testing.T) {
	s, base := connectServer(t)
	sc := stripeClient(base)

	for acct, want := range map[string][]string{
		"":       {"ch_p1"},
		"acct_A": {"ch_a2", "ch_a1"},
		"acct_B": {"ch_p1", "ch_b1"},
	} {
		if diff := cmp.Diff(want, listCharges(t, sc, acct)); diff != "" {
			t.Errorf("charges of %q (-want +got):\n%s", acct, diff)
		}
	}

	// Retrieval: an account's own object, never another's.
	get := func(acct, id string) (*stripe.Charge, error) {
		p := &stripe.ChargeParams{}
		if acct != "" {
			p.SetStripeAccount(acct)
		}
		return sc.Charges.Get(id, p)
	}
	if ch, err := get("acct_A", "ch_a1"); err != nil || ch.ID != "ch_a1" {
		t.Errorf("acct_A's ch_a1 = %+v, %v", ch, err)
	}
	if ch, err := get("acct_B", "ch_p1"); err != nil || ch.Created != t0.Add(4*time.Second).Unix() {
		t.Errorf("acct_B's own ch_p1 = %+v, %v; want the one created at +4s", ch, err)
	}
	for _, tt := range []struct{ acct, id string }{{"acct_A", "ch_b1"}, {"acct_B", "ch_a1"}, {"", "ch_a1"}, {"acct_A", "ch_p1"}} {
		_, err := get(tt.acct, tt.id)
		var se *stripe.Error
		if !errors.As(err, &se) || se.HTTPStatusCode != http.StatusNotFound || se.Code != stripe.ErrorCodeResourceMissing {
			t.Errorf("%q retrieving %s: %v, want 404 resource_missing", tt.acct, tt.id, err)
		}
	}

	// Events, and the keys they tell, are the account's own.
	evs := func(acct string) []string {
		p := &stripe.EventListParams{}
		if acct != "" {
			p.SetStripeAccount(acct)
		}
		var out []string
		it := sc.Events.List(p)
		for it.Next() {
			ev := it.Event()
			key := ""
			if ev.Request != nil {
				key = ev.Request.IdempotencyKey
			}
			out = append(out, fmt.Sprintf("%s %s %s", ev.Type, ev.Data.Object["id"], key))
		}
		if err := it.Err(); err != nil {
			t.Fatalf("events of %q: %v", acct, err)
		}
		slices.Reverse(out)
		return out
	}
	if diff := cmp.Diff([]string{"charge.succeeded ch_p1 k-p1"}, evs("")); diff != "" {
		t.Errorf("platform events (-want +got):\n%s", diff)
	}
	a := evs("acct_A")
	if len(a) != 4 || a[0] != "charge.succeeded ch_a1 k-a1" || a[2] != "refund.created re_a1 k-ra1" || a[3] != "charge.refunded ch_a1 k-ra1" {
		t.Errorf("acct_A events = %q, want ch_a1's, ch_a2's, then re_a1's two with k-ra1", a)
	}
	if diff := cmp.Diff([]string{"charge.succeeded ch_b1 k-b1", "charge.succeeded ch_p1 k-bp1"}, evs("acct_B")); diff != "" {
		t.Errorf("acct_B events (-want +got):\n%s", diff)
	}

	// The Go side sees the same separation.
	if o, ok := s.As("acct_B").Object("ch_p1"); !ok || !o.Created.Equal(t0.Add(4*time.Second)) {
		t.Errorf("As(acct_B).Object(ch_p1) = %+v, %t", o, ok)
	}
	if _, ok := s.Object("ch_a1"); ok {
		t.Error("the platform's Object finds acct_A's ch_a1")
	}
	s.AssertNoWrites(t)
}

func TestUnknownAccountRefused(t *testing.T) {
	s, base := connectServer(t)
	sc := stripeClient(base)
	p := &stripe.ChargeParams{}
	p.SetStripeAccount("acct_nope")
	_, err := sc.Charges.Get("ch_a1", p)
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != http.StatusForbidden || se.Code != "account_invalid" ||
		se.Type != stripe.ErrorTypeInvalidRequest {
		t.Fatalf("unknown account: %v, want 403 account_invalid", err)
	}
	if want := "does not have access to account 'acct_nope' (or that account does not exist)"; !containsAll(se.Msg, want, "sk_test_") ||
		containsAll(se.Msg, "stripesim0123") {
		t.Errorf("message %q, want Stripe's, naming the account and the masked key", se.Msg)
	}
	lp := &stripe.EventListParams{}
	lp.SetStripeAccount("acct_nope")
	it := sc.Events.List(lp)
	if it.Next() || !errors.As(it.Err(), &se) || se.HTTPStatusCode != http.StatusForbidden {
		t.Errorf("events of an unknown account: %v, want 403", it.Err())
	}
	if _, err := sc.Accounts.GetByID("acct_nope", nil); !errors.As(err, &se) || se.HTTPStatusCode != http.StatusForbidden || se.Code != "account_invalid" {
		t.Errorf("GET /v1/accounts/acct_nope: %v, want 403 account_invalid", err)
	}
	if err := s.As("acct_nope").Add(charge("ch_x", t0), ""); err == nil {
		t.Error("Add to an account never added = nil, want an error")
	}
	if st := s.Stats(); st.BadRequests != 3 {
		t.Errorf("BadRequests = %d, want the 3 refusals", st.BadRequests)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestAccountsList(t *testing.T) {
	s := New(testKey)
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("acct_%02d", i)
		mustAccount(t, s, Account{ID: id, Name: "Shop " + id, DisplayName: "shop " + id, Created: t0.Add(time.Duration(i) * time.Minute)})
		want = append(want, id)
	}
	// Two connected in the same second: ties order by id, descending.
	mustAccount(t, s, Account{ID: "acct_24b", Created: t0.Add(24 * time.Minute)})
	want = append(want, "acct_24b")
	slices.Reverse(want)
	want[0], want[1] = "acct_24b", "acct_24"
	base := start(t, s)
	sc := stripeClient(base)

	p := &stripe.AccountListParams{}
	p.Limit = stripe.Int64(10)
	it := sc.Accounts.List(p)
	var got []string
	var first *stripe.Account
	for it.Next() {
		a := it.Account()
		if first == nil {
			first = a
		}
		got = append(got, a.ID)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("accounts (-want +got):\n%s", diff)
	}
	if st := s.Stats(); st.Pages[ListAccounts] != 3 || st.Objects[ListAccounts] != 26 {
		t.Errorf("pages, accounts served = %d, %d; want 3 pages of 10, 10, 6", st.Pages[ListAccounts], st.Objects[ListAccounts])
	}
	if first.Object != "account" || first.Created != t0.Add(24*time.Minute).Unix() || first.BusinessProfile == nil ||
		first.BusinessProfile.Name != "" || first.Settings == nil || first.Settings.Dashboard.DisplayName != "" || first.Type != "standard" {
		t.Errorf("acct_24b decoded as %+v", first)
	}

	a, err := sc.Accounts.GetByID("acct_07", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.BusinessProfile.Name != "Shop acct_07" || a.Settings.Dashboard.DisplayName != "shop acct_07" ||
		a.Created != t0.Add(7*time.Minute).Unix() || a.Controller == nil || a.Controller.Type != "account" {
		t.Errorf("acct_07 decoded as %+v", a)
	}

	// The raw pages: the url, has_more, ending_before and the limits.
	r := get(t, base, "/v1/accounts", nil)
	if got := ids(t, r); len(got) != 10 || r.body["has_more"] != true || r.body["url"] != "/v1/accounts" {
		t.Errorf("default page: %d accounts, has_more %v, url %v; want 10, true, /v1/accounts", len(got), r.body["has_more"], r.body["url"])
	}
	r = get(t, base, "/v1/accounts", map[string][]string{"limit": {"3"}, "ending_before": {"acct_20"}})
	if diff := cmp.Diff([]string{"acct_23", "acct_22", "acct_21"}, ids(t, r)); diff != "" || r.body["has_more"] != true {
		t.Errorf("ending_before acct_20 (-want +got):\n%s\nhas_more %v", diff, r.body["has_more"])
	}
	r = get(t, base, "/v1/accounts", map[string][]string{"limit": {"100"}, "starting_after": {"acct_02"}})
	if diff := cmp.Diff([]string{"acct_01", "acct_00"}, ids(t, r)); diff != "" || r.body["has_more"] != false {
		t.Errorf("starting_after acct_02 (-want +got):\n%s\nhas_more %v", diff, r.body["has_more"])
	}
	for _, q := range []map[string][]string{{"limit": {"0"}}, {"limit": {"101"}}, {"starting_after": {"acct_nope"}}, {"type": {"standard"}}} {
		if r := get(t, base, "/v1/accounts", q); r.status != http.StatusBadRequest {
			t.Errorf("GET /v1/accounts?%v = %d, want 400", q, r.status)
		}
	}

	// A connected account has no connected accounts of its own, and
	// retrieves only itself.
	lp := &stripe.AccountListParams{}
	lp.SetStripeAccount("acct_03")
	if it := sc.Accounts.List(lp); it.Next() || it.Err() != nil {
		t.Errorf("accounts listed as acct_03: %v, %v; want none", it.Account(), it.Err())
	}
	ap := &stripe.AccountParams{}
	ap.SetStripeAccount("acct_03")
	if a, err := sc.Accounts.GetByID("acct_03", ap); err != nil || a.ID != "acct_03" {
		t.Errorf("acct_03 retrieving itself: %v, %v", a, err)
	}
	var se *stripe.Error
	if _, err := sc.Accounts.GetByID("acct_04", ap); !errors.As(err, &se) || se.HTTPStatusCode != http.StatusForbidden {
		t.Errorf("acct_03 retrieving acct_04: %v, want 403", err)
	}
}

func TestAddAccountRefusesBadAccounts(t *testing.T) {
	s := New(testKey)
	mustAccount(t, s, Account{ID: "acct_1"})
	for name, a := range map[string]Account{
		"duplicate":    {ID: "acct_1"},
		"no prefix":    {ID: "ch_1"},
		"bare prefix":  {ID: "acct_"},
		"unknown type": {ID: "acct_2", Type: "platform"},
	} {
		if err := s.AddAccount(a); err == nil {
			t.Errorf("AddAccount(%s) = nil, want an error", name)
		}
	}
	if _, err := s.As("acct_9").AddEvent(Event{Type: "charge.updated", Data: []byte(`{}`)}); err == nil {
		t.Error("AddEvent to an account never added = nil, want an error")
	}
	if err := s.As("acct_9").Update("ch_1", t0, func(*reconcile.ProviderObject) {}); err == nil {
		t.Error("Update in an account never added = nil, want an error")
	}
}
