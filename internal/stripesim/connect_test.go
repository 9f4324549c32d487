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
		Money: reconcile.Money{Amount: 100, Currency: "usd"}, Status: reconcile.Succeeded, Target: "ch_a1", Created: reconcile.StampOf(t0.Add(3 * time.Second))})
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
	if o, ok := s.As("acct_B").Object("ch_p1"); !ok || !o.Created.Time().Equal(t0.Add(4*time.Second)) {
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

func TestAccountFaults(t *testing.T) {
	status := func(t *testing.T, base, acct string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/charges", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testKey)
		if acct != "" {
			req.Header.Set("Stripe-Account", acct)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	statuses := func(t *testing.T, base, acct string, n int) []int {
		t.Helper()
		var out []int
		for range n {
			out = append(out, status(t, base, acct))
		}
		return out
	}

	t.Run("one account rate-limited, the others answer", func(t *testing.T) {
		s, base := connectServer(t)
		s.SetAccountFaults("acct_A", Faults{RateLimitEvery: 2})
		for acct, want := range map[string][]int{
			"acct_A": {200, 429, 200, 429},
			"acct_B": {200, 200, 200, 200},
			"":       {200, 200, 200, 200},
		} {
			if got := statuses(t, base, acct, 4); !slices.Equal(got, want) {
				t.Errorf("%q: statuses %v, want %v", acct, got, want)
			}
		}
		st := s.Stats()
		if st.RateLimited != 2 || st.Accounts["acct_A"].RateLimited != 2 || st.Accounts["acct_B"].RateLimited != 0 {
			t.Errorf("429s: total %d, acct_A %d, acct_B %d; want 2, 2, 0", st.RateLimited, st.Accounts["acct_A"].RateLimited, st.Accounts["acct_B"].RateLimited)
		}
		s.SetAccountFaults("acct_A", Faults{})
		if got := statuses(t, base, "acct_A", 2); !slices.Equal(got, []int{200, 200}) {
			t.Errorf("acct_A after its faults were removed: %v, want 200s", got)
		}
	})
	t.Run("the platform's own faults spare connected accounts", func(t *testing.T) {
		s, base := connectServer(t)
		s.SetAccountFaults("", Faults{FailList: ListCharges})
		if got := statuses(t, base, "", 2); !slices.Equal(got, []int{500, 500}) {
			t.Errorf("platform with FailList: %v, want 500s", got)
		}
		if got := statuses(t, base, "acct_B", 2); !slices.Equal(got, []int{200, 200}) {
			t.Errorf("acct_B beside the platform's FailList: %v, want 200s", got)
		}
		if st := s.Stats(); st.ServerErrors != 2 || st.Accounts[""].ServerErrors != 2 || st.Accounts["acct_B"].ServerErrors != 0 {
			t.Errorf("500s: total %d, per account %+v", st.ServerErrors, st.Accounts)
		}
	})
	t.Run("the key's rate limit is one budget for all accounts", func(t *testing.T) {
		s, base := connectServer(t)
		s.SetFaults(Faults{RateLimit: 0.001, RateBurst: 3})
		got := []int{status(t, base, "acct_A"), status(t, base, "acct_B"), status(t, base, ""), status(t, base, "acct_A"), status(t, base, "acct_B")}
		if want := []int{200, 200, 200, 429, 429}; !slices.Equal(got, want) {
			t.Errorf("statuses across accounts = %v, want %v (a burst of 3 shared)", got, want)
		}
		// An account's own limit comes on top of the key's.
		s.SetFaults(Faults{})
		s.SetAccountFaults("acct_B", Faults{RateLimit: 0.001, RateBurst: 1})
		if got := statuses(t, base, "acct_B", 2); !slices.Equal(got, []int{200, 429}) {
			t.Errorf("acct_B with its own limit of one: %v, want 200, 429", got)
		}
		if got := statuses(t, base, "acct_A", 3); !slices.Equal(got, []int{200, 200, 200}) {
			t.Errorf("acct_A beside acct_B's limit: %v, want 200s", got)
		}
	})
	t.Run("an account with faults of its own still meets the key's", func(t *testing.T) {
		s, base := connectServer(t)
		s.SetFaults(Faults{RateLimitEvery: 3})
		s.SetAccountFaults("acct_A", Faults{ServerErrorEvery: 2})
		// Key count: A1 A2 B3 A4 A5 B6; acct_A's own count: A1 A2 A4 A5.
		got := []int{status(t, base, "acct_A"), status(t, base, "acct_A"), status(t, base, "acct_B"),
			status(t, base, "acct_A"), status(t, base, "acct_A"), status(t, base, "acct_B")}
		if want := []int{200, 500, 429, 200, 500, 429}; !slices.Equal(got, want) {
			t.Errorf("statuses = %v, want %v", got, want)
		}
	})
	t.Run("malformed pages for one account through stripe-go", func(t *testing.T) {
		s, base := connectServer(t)
		s.SetAccountFaults("acct_B", Faults{Malformed: ShapeNullData, MalformedList: ListCharges})
		sc := stripeClient(base)
		if got := listCharges(t, sc, "acct_A"); len(got) != 2 {
			t.Errorf("acct_A charges = %v, want its two", got)
		}
		p := &stripe.ChargeListParams{}
		p.SetStripeAccount("acct_B")
		it := sc.Charges.List(p)
		if it.Next() {
			t.Errorf("acct_B's null page yielded %v", it.Charge())
		}
		if st := s.Stats(); st.Malformed != 1 || st.Accounts["acct_B"].Malformed != 1 || st.Accounts["acct_A"].Malformed != 0 {
			t.Errorf("malformed: total %d, per account %+v", st.Malformed, st.Accounts)
		}
	})
}

func TestAccountStats(t *testing.T) {
	s, base := connectServer(t)
	sc := stripeClient(base)
	listCharges(t, sc, "acct_A") // two pages of one charge
	listCharges(t, sc, "")
	p := &stripe.ChargeParams{}
	p.SetStripeAccount("acct_nope")
	_, _ = sc.Charges.Get("ch_1", p)

	st := s.Stats()
	a, plat := st.Accounts["acct_A"], st.Accounts[""]
	if st.Requests != 4 || a.Requests != 2 || plat.Requests != 1 {
		t.Errorf("requests: total %d, acct_A %d, platform %d; want 4, 2, 1", st.Requests, a.Requests, plat.Requests)
	}
	if st.Pages[ListCharges] != 3 || a.Pages[ListCharges] != 2 || a.Objects[ListCharges] != 2 || plat.Pages[ListCharges] != 1 {
		t.Errorf("pages: total %d, acct_A %d (%d charges), platform %d; want 3, 2 (2), 1",
			st.Pages[ListCharges], a.Pages[ListCharges], a.Objects[ListCharges], plat.Pages[ListCharges])
	}
	if _, ok := st.Accounts["acct_nope"]; ok || st.BadRequests != 1 || len(st.Accounts) != 2 {
		t.Errorf("an unknown account is counted in the totals only: %+v", st)
	}
	if _, ok := st.Accounts["acct_B"]; ok {
		t.Error("acct_B has counters without a request")
	}
	// The snapshot is a copy.
	st.Accounts["acct_A"].Pages[ListCharges] = 99
	if got := s.Stats().Accounts["acct_A"].Pages[ListCharges]; got != 2 {
		t.Errorf("Stats shares its maps: acct_A pages = %d after editing a snapshot", got)
	}
	s.ResetStats()
	if st := s.Stats(); st.Requests != 0 || len(st.Accounts) != 0 {
		t.Errorf("after reset: %+v", st)
	}
}

// TestAccountsConcurrently reads twelve accounts at once through stripe-go,
// as the many-accounts reader will, while accounts and objects are still
// being added: each sees only its own, and the per-account counters add up
// to the totals.
func TestAccountsConcurrently(t *testing.T) {
	s := New(testKey)
	const accounts, perAccount = 12, 30
	for i := range accounts {
		id := fmt.Sprintf("acct_%02d", i)
		mustAccount(t, s, Account{ID: id, Created: t0.Add(time.Duration(i) * time.Second)})
		for j := range perAccount {
			mustAddAs(t, s, id, "", charge(fmt.Sprintf("ch_%s_%02d", id, j), t0.Add(time.Duration(j)*time.Second)))
		}
	}
	base := start(t, s)
	sc := stripeClient(base)
	s.SetAccountFaults("acct_05", Faults{RateLimitEvery: 2})

	errs := make(chan error, accounts+1)
	go func() { // more data arriving while the readers read
		for i := range 20 {
			if err := s.AddAccount(Account{ID: fmt.Sprintf("acct_late%02d", i), Created: t0}); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for i := range accounts {
		go func() {
			id := fmt.Sprintf("acct_%02d", i)
			p := &stripe.ChargeListParams{}
			p.Limit = stripe.Int64(5)
			p.SetStripeAccount(id)
			n := 0
			it := sc.Charges.List(p)
			for it.Next() {
				if !strings.HasPrefix(it.Charge().ID, "ch_"+id+"_") {
					errs <- fmt.Errorf("%s listed %s", id, it.Charge().ID)
					return
				}
				n++
			}
			var se *stripe.Error
			switch {
			case id == "acct_05" && (!errors.As(it.Err(), &se) || se.HTTPStatusCode != http.StatusTooManyRequests):
				errs <- fmt.Errorf("acct_05, every second request limited: %v after %d, want a 429", it.Err(), n)
			case id != "acct_05" && (it.Err() != nil || n != perAccount):
				errs <- fmt.Errorf("%s: %d charges, %v; want %d", id, n, it.Err(), perAccount)
			default:
				errs <- nil
			}
		}()
	}
	for range accounts + 1 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	st := s.Stats()
	sum := 0
	for id, a := range st.Accounts {
		sum += a.Requests
		if want := 6; id != "acct_05" && a.Pages[ListCharges] != want {
			t.Errorf("%s: %d pages, want %d", id, a.Pages[ListCharges], want)
		}
	}
	if sum != st.Requests || st.Accounts["acct_05"].RateLimited != 1 || st.RateLimited != 1 {
		t.Errorf("per-account requests sum to %d of %d; 429s %d (acct_05 %d), want 1", sum, st.Requests, st.RateLimited, st.Accounts["acct_05"].RateLimited)
	}
}
