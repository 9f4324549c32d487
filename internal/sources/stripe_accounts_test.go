package sources

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/stripesim"
)

// connectEnv is a platform holding ch_p1 with two connected accounts of
// different data: acct_A with ch_a1, its refund re_a1 and pi_a1, acct_B
// with ch_b1 and a ch_p1 of its own (ids are unique only within one
// account), every object created with key "key-<account>-<id>".
func connectEnv(tb testing.TB) *env {
	tb.Helper()
	e := newEnv(tb)
	for _, a := range []stripesim.Account{
		{ID: "acct_A", Name: "Alpha Shop LLC", DisplayName: "Alpha", Created: t0},
		{ID: "acct_B", Name: "Beta Ltd", Created: t0.Add(time.Hour)},
	} {
		if err := e.srv.AddAccount(a); err != nil {
			tb.Fatal(err)
		}
	}
	add := func(acct string, o reconcile.ProviderObject) {
		tb.Helper()
		if err := e.srv.As(acct).Add(o, "key-"+acct+"-"+o.ID); err != nil {
			tb.Fatal(err)
		}
	}
	usd := func(n int64) reconcile.Money { return reconcile.Money{Amount: n, Currency: "usd"} }
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	add("", reconcile.ProviderObject{ID: "ch_p1", Kind: reconcile.Charge, Money: usd(1000), Status: reconcile.Succeeded, Created: reconcile.StampOf(at(1))})
	add("acct_A", reconcile.ProviderObject{ID: "ch_a1", Kind: reconcile.Charge, Money: usd(2000), Status: reconcile.Succeeded,
		PaymentIntent: "pi_a1", Created: reconcile.StampOf(at(2))})
	add("acct_A", reconcile.ProviderObject{ID: "pi_a1", Kind: reconcile.PaymentIntent, Money: usd(2000), Status: reconcile.Succeeded,
		Charge: "ch_a1", Created: reconcile.StampOf(at(2))})
	add("acct_A", reconcile.ProviderObject{ID: "re_a1", Kind: reconcile.Refund, Money: usd(500), Status: reconcile.Succeeded,
		Target: "ch_a1", Charge: "ch_a1", Created: reconcile.StampOf(at(3))})
	add("acct_B", reconcile.ProviderObject{ID: "ch_b1", Kind: reconcile.Charge, Money: usd(3000), Status: reconcile.Succeeded, Created: reconcile.StampOf(at(4))})
	add("acct_B", reconcile.ProviderObject{ID: "ch_p1", Kind: reconcile.Charge, Money: usd(4000), Status: reconcile.Succeeded, Created: reconcile.StampOf(at(5))})
	return e
}

// Each view of the key lists its own account's objects and events, and
// only those, stamped with the account; the platform's reader lists the
// platform's. Every request of a view names its account: the platform's
// counters at the server stay at zero while the views read.
func TestForAccountReadsItsOwnAccount(t *testing.T) {
	e := connectEnv(t)
	r := e.reader(t, nil)
	if r.ForAccount("") != r || r.ForAccount("acct_A").ForAccount("") != r {
		t.Error(`ForAccount("") is not the platform's reader`)
	}
	for _, tt := range []struct {
		acct          string
		objects, keys []string
	}{
		{"", []string{"charge/ch_p1"}, []string{"ch_p1=key--ch_p1"}},
		{"acct_A", []string{"charge/ch_a1", "payment_intent/pi_a1", "refund/re_a1"},
			[]string{"ch_a1=key-acct_A-ch_a1", "pi_a1=key-acct_A-pi_a1", "re_a1=key-acct_A-re_a1"}},
		{"acct_B", []string{"charge/ch_b1", "charge/ch_p1"}, []string{"ch_b1=key-acct_B-ch_b1", "ch_p1=key-acct_B-ch_p1"}},
	} {
		e.srv.ResetStats()
		v := r.ForAccount(tt.acct)
		l, err := v.List(t.Context(), window)
		if err != nil {
			t.Fatalf("list %q: %v", tt.acct, err)
		}
		if diff := gocmp.Diff(tt.objects, objectIDs(l)); diff != "" {
			t.Errorf("objects of %q (-want +got):\n%s", tt.acct, diff)
		}
		if diff := gocmp.Diff(tt.keys, keyPairs(l)); diff != "" {
			t.Errorf("keys of %q (-want +got):\n%s", tt.acct, diff)
		}
		for _, o := range l.Objects {
			if o.Account != tt.acct {
				t.Errorf("%q listed %s with Account %q", tt.acct, o.ID, o.Account)
			}
		}
		for _, k := range l.Keys {
			if k.Account != tt.acct {
				t.Errorf("%q's key evidence of %s has Account %q", tt.acct, k.ObjectID, k.Account)
			}
		}
		objs, lookups := v.Retrieve(t.Context(), []string{"ch_p1", "ch_a1", "ch_b1"})
		found := map[string]reconcile.LookupResult{}
		for _, lk := range lookups {
			found[lk.ID] = lk.Result
		}
		want := map[string]reconcile.LookupResult{"ch_p1": reconcile.LookupNotFound, "ch_a1": reconcile.LookupNotFound, "ch_b1": reconcile.LookupNotFound}
		for _, id := range tt.objects {
			if _, ok := want[strings.TrimPrefix(id, "charge/")]; ok {
				want[strings.TrimPrefix(id, "charge/")] = reconcile.LookupFound
			}
		}
		if diff := gocmp.Diff(want, found); diff != "" {
			t.Errorf("lookups of %q (-want +got):\n%s", tt.acct, diff)
		}
		for _, o := range objs {
			if o.Account != tt.acct {
				t.Errorf("%q retrieved %s with Account %q", tt.acct, o.ID, o.Account)
			}
			if tt.acct == "acct_B" && o.ID == "ch_p1" && o.Money.Amount != 4000 {
				t.Errorf("acct_B retrieved the platform's ch_p1 (%d), want its own (4000)", o.Money.Amount)
			}
		}
		st := e.srv.Stats()
		if got := st.Accounts[tt.acct].Requests; got != st.Requests || st.Requests == 0 {
			t.Errorf("%q: %d of the %d requests named it, want all", tt.acct, got, st.Requests)
		}
	}

	// Sync tells changes of the account's objects, stamped too.
	s, err := r.ForAccount("acct_A").Sync(t.Context(), SyncRequest{Objects: reconcile.Window{From: window.To, To: window.To}, Events: window})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Changes) == 0 {
		t.Fatal("acct_A's sync told no change, want those of ch_a1, pi_a1 and re_a1")
	}
	for _, c := range s.Changes {
		if c.Object.Account != "acct_A" || !strings.HasSuffix(c.Object.ID, "_a1") {
			t.Errorf("acct_A's sync told %s of account %q", c.Object.ID, c.Object.Account)
		}
	}
}

// The views of one key share its pace: a 429 to one account's reader
// slows every account's, since Stripe limits the key, and the request
// counts of any view are the key's.
func TestForAccountSharesThePace(t *testing.T) {
	e := connectEnv(t)
	e.srv.SetAccountFaults("acct_A", stripesim.Faults{RateLimitEvery: 2})
	r := e.reader(t, func(o *StripeOptions) { o.Rate, o.Burst, o.MaxRetries = 1000, 8, 10 })
	a, b := r.ForAccount("acct_A"), r.ForAccount("acct_B")
	if _, err := a.List(t.Context(), window); err != nil {
		t.Fatal(err)
	}
	if st := e.srv.Stats(); st.Accounts["acct_A"].RateLimited == 0 {
		t.Fatalf("acct_A met no 429: %+v", st.Accounts["acct_A"])
	}
	for name, v := range map[string]*Stripe{"acct_B": b, "platform": r} {
		if got := float64(v.pace.lim.Limit()); got >= 1000 {
			t.Errorf("%s's reader paces at %v after acct_A's 429s, want below 1000", name, got)
		}
	}
	all := r.RequestCounts()
	if all.RateLimited == 0 || a.RequestCounts() != all || b.RequestCounts() != all {
		t.Errorf("request counts: platform %+v, acct_A %+v, acct_B %+v; want the key's, with the 429s", all, a.RequestCounts(), b.RequestCounts())
	}
	if _, err := b.List(t.Context(), window); err != nil {
		t.Fatal(err)
	}
	if got := r.RequestCounts(); got.Requests != e.srv.Stats().Requests {
		t.Errorf("the key's counts hold %d requests, the server saw %d", got.Requests, e.srv.Stats().Requests)
	}
}

// An account the key cannot reach is refused 403 account_invalid: not
// retried, and said so in words naming the account, not Stripe's (which
// quote the key masked). An id that is not an account id is never sent.
func TestForAccountUnreachable(t *testing.T) {
	e := connectEnv(t)
	r := e.reader(t, func(o *StripeOptions) { o.MaxRetries = 5; o.Concurrency = 1 })
	v := r.ForAccount("acct_nope")
	_, err := v.List(t.Context(), window)
	var le *ListError
	var re *RequestError
	if !errors.As(err, &le) || !errors.As(err, &re) {
		t.Fatalf("list of acct_nope: %v, want a *ListError of a *RequestError", err)
	}
	if re.Status != http.StatusForbidden || re.Code != "account_invalid" || re.Attempts != 1 || re.Account != "acct_nope" {
		t.Errorf("RequestError %+v, want one attempt answered 403 account_invalid for acct_nope", re)
	}
	msg := err.Error()
	for _, want := range []string{"list stripe events of account acct_nope", "the key cannot reach account acct_nope"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "sk_test") || strings.Contains(msg, testKey[len(testKey)-4:]) {
		t.Errorf("error %q quotes the key", msg)
	}
	if c := r.RequestCounts(); c.Retries != 0 || c.Requests != 1 {
		t.Errorf("counts %+v, want the one request, no retry", c)
	}
	_, lookups := v.Retrieve(t.Context(), []string{"ch_a1"})
	if len(lookups) != 1 || lookups[0].Result != reconcile.LookupFailed || !strings.Contains(lookups[0].Err, "ch_a1 of account acct_nope") ||
		!strings.Contains(lookups[0].Err, "cannot reach account acct_nope") {
		t.Errorf("lookup of acct_nope's ch_a1 = %+v, want failed, naming the account", lookups)
	}
	if _, err := v.Probe(t.Context()); err == nil || !strings.Contains(err.Error(), "probe account acct_nope") {
		t.Errorf("probe of acct_nope: %v, want an error naming it", err)
	}

	e.srv.ResetStats()
	before := r.RequestCounts()
	bad := r.ForAccount("acct_X\r\nStripe-Account: acct_A")
	_, err = bad.List(t.Context(), window)
	if err == nil || !strings.Contains(err.Error(), `"acct_X\r\nStripe-Account: acct_A" is not a Stripe account id`) {
		t.Errorf("list of a bad account id: %v, want it refused, quoted", err)
	}
	if n := e.srv.Stats().Requests; n != 0 || r.RequestCounts() != before {
		t.Errorf("%d requests reached the server for a bad account id, want none", n)
	}
}

// A view's errors name its account.
func TestForAccountErrorsNameTheAccount(t *testing.T) {
	e := connectEnv(t)
	e.srv.SetAccountFaults("acct_A", stripesim.Faults{FailList: ListRefunds})
	r := e.reader(t, func(o *StripeOptions) { o.MaxRetries = 1 })
	if _, err := r.ForAccount("acct_B").List(t.Context(), window); err != nil {
		t.Errorf("acct_B beside acct_A's failing refunds: %v", err)
	}
	_, err := r.ForAccount("acct_A").List(t.Context(), window)
	if err == nil || !strings.HasPrefix(err.Error(), "list stripe refunds of account acct_A created ") {
		t.Errorf("acct_A's failing refunds: %v, want an error naming the list and the account", err)
	}
	if _, err := r.List(t.Context(), window); err != nil {
		t.Errorf("the platform beside acct_A's failing refunds: %v", err)
	}
	if _, err := r.ForAccount("acct_A").List(t.Context(), reconcile.Window{From: window.To, To: window.From}); err == nil ||
		!strings.Contains(err.Error(), "list stripe of account acct_A: window ends") {
		t.Errorf("a reversed window: %v, want an error naming the account", err)
	}
}

// addAccounts connects n accounts to e's platform, acct_000 to acct_<n-1>,
// one a minute (/v1/accounts lists the newest first): every third with a display name and a business name, the
// next with a business name alone, the next with neither. It returns what
// Accounts must list.
func addAccounts(tb testing.TB, e *env, n int) []reconcile.Account {
	tb.Helper()
	var want []reconcile.Account
	for i := range n {
		a := stripesim.Account{ID: fmt.Sprintf("acct_%03d", i), Created: t0.Add(time.Duration(i) * time.Minute)}
		name := ""
		switch i % 3 {
		case 0:
			a.DisplayName, a.Name, name = fmt.Sprintf("Shop %d", i), fmt.Sprintf("Shop %d LLC", i), fmt.Sprintf("Shop %d", i)
		case 1:
			a.Name, name = fmt.Sprintf("Shop %d LLC", i), fmt.Sprintf("Shop %d LLC", i)
		}
		if err := e.srv.AddAccount(a); err != nil {
			tb.Fatal(err)
		}
		want = append(want, reconcile.Account{ID: a.ID, Name: name})
	}
	return want
}

// Accounts pages through every connected account, names each as Stripe
// names it for people, and sorts them by id, whichever view asks.
func TestAccountsListsEveryAccount(t *testing.T) {
	e := newEnv(t)
	want := addAccounts(t, e, 250)
	r := e.reader(t, nil)
	got, err := r.Accounts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("accounts (-want +got):\n%s", diff)
	}
	st := e.srv.Stats()
	if st.Pages[ListAccounts] != 3 || st.Objects[ListAccounts] != 250 {
		t.Errorf("read in %d pages of %d accounts in all, want 3 pages of 100, 100 and 50", st.Pages[ListAccounts], st.Objects[ListAccounts])
	}
	if got, err := r.ForAccount("acct_007").Accounts(t.Context()); err != nil || len(got) != 250 {
		t.Errorf("accounts asked by acct_007's view: %d, %v; want the platform's 250", len(got), err)
	}
	if st := e.srv.Stats(); st.Accounts["acct_007"].Requests != 0 {
		t.Errorf("acct_007's view listed accounts as acct_007 (%d requests), want as the platform", st.Accounts["acct_007"].Requests)
	}

	empty := newEnv(t)
	if got, err := empty.reader(t, nil).Accounts(t.Context()); err != nil || len(got) != 0 {
		t.Errorf("a platform with no connected account: %v, %v; want none", got, err)
	}
}

// A 500 or a malformed page mid-listing is retried from the same cursor;
// one that persists fails the call, which then returns no accounts.
func TestAccountsRetriesThenFails(t *testing.T) {
	for _, tt := range []struct {
		name   string
		faults stripesim.Faults
		fails  string // "" when the retries mend it
	}{
		{"a 500 on every other request", stripesim.Faults{ServerErrorEvery: 2}, ""},
		{"every other page without has_more", stripesim.Faults{Malformed: stripesim.ShapeNoHasMore, MalformedList: ListAccounts, MalformedEvery: 2}, ""},
		{"500s from the second page on", stripesim.Faults{FailList: ListAccounts, FailListAfter: 1},
			"list stripe accounts: stopped at the page starting after acct_150: stripe answered 500"},
		{"every page null", stripesim.Faults{Malformed: stripesim.ShapeNullData, MalformedList: ListAccounts},
			"list stripe accounts: stopped at its first page: stripe answered 200: malformed list page: no data"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			want := addAccounts(t, e, 250)
			e.srv.SetFaults(tt.faults)
			r := e.reader(t, func(o *StripeOptions) { o.MaxRetries = 3 })
			got, err := r.Accounts(t.Context())
			if tt.fails == "" {
				if err != nil {
					t.Fatal(err)
				}
				if diff := gocmp.Diff(want, got); diff != "" {
					t.Errorf("accounts (-want +got):\n%s", diff)
				}
				if c := r.RequestCounts(); c.Retries == 0 {
					t.Errorf("counts %+v, want retries", c)
				}
				return
			}
			var le *ListError
			if got != nil || !errors.As(err, &le) || !strings.HasPrefix(err.Error(), tt.fails) {
				t.Errorf("Accounts = %d accounts, %v; want none and an error beginning %q", len(got), err, tt.fails)
			}
			if c := r.RequestCounts(); c.Retries != 3 {
				t.Errorf("counts %+v, want the 3 retries", c)
			}
		})
	}
}

// An entry whose id is not an account id is not taken: it would go into
// request headers and messages.
func TestAccountsRefusesForeignIDs(t *testing.T) {
	e := newEnv(t)
	addAccounts(t, e, 3)
	if err := e.srv.AddAccount(stripesim.Account{ID: "acct_x-y", Created: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := e.reader(t, func(o *StripeOptions) { o.MaxRetries = 1 }).Accounts(t.Context())
	if got != nil || err == nil || !strings.Contains(err.Error(), "its id is not an account id") || strings.Contains(err.Error(), "acct_x-y") {
		t.Errorf("Accounts = %v, %v; want none, and an error that does not quote the id", got, err)
	}
}

// Progress is called one page at a time across the views of a key, as it
// is within one listing: two accounts read at once report to one
// terminal line.
func TestForAccountProgressNeverConcurrent(t *testing.T) {
	e := connectEnv(t)
	for _, acct := range []string{"acct_A", "acct_B"} {
		for i := range 400 {
			o := reconcile.ProviderObject{ID: fmt.Sprintf("ch_%s_%03d", acct, i), Kind: reconcile.Charge,
				Money: reconcile.Money{Amount: 100, Currency: "usd"}, Status: reconcile.Succeeded, Created: reconcile.StampOf(t0.Add(time.Duration(i) * time.Minute))}
			if err := e.srv.As(acct).Add(o, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	var inside, overlaps, calls atomic.Int32
	r := e.reader(t, func(o *StripeOptions) {
		o.Concurrency = 4
		o.Progress = func(ProgressEvent) {
			calls.Add(1)
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			// Long enough for another view's page to arrive meanwhile.
			time.Sleep(time.Millisecond)
			inside.Add(-1)
		}
	})
	var wg sync.WaitGroup
	for _, acct := range []string{"acct_A", "acct_B"} {
		wg.Go(func() {
			if _, err := r.ForAccount(acct).List(t.Context(), window); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if calls.Load() < 20 || overlaps.Load() != 0 {
		t.Errorf("%d Progress calls, %d while another ran; want many, none at once", calls.Load(), overlaps.Load())
	}
}
