package sources

import (
	"errors"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/stripesim"
)

// Sync lists the objects of its object window and, from the events of its
// event window, keys and the newest state of older objects: one per
// object, the newest event's; unsettled where two events of one second
// disagree; none for objects of the listed window, which the listing has
// as they are.
func TestSyncTellsChanges(t *testing.T) {
	e := newEnv(t)
	day := 24 * time.Hour
	old := reconcile.ProviderObject{ID: "ch_old", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(t0.Add(time.Hour))}
	pending := reconcile.ProviderObject{ID: "re_pending", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Pending, Target: "ch_old", Charge: "ch_old", Created: reconcile.StampOf(t0.Add(2 * time.Hour))}
	twice := reconcile.ProviderObject{ID: "re_twice", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 100, Currency: "usd"},
		Status: reconcile.Pending, Created: reconcile.StampOf(t0.Add(3 * time.Hour)), PaymentIntent: "pi_x", Target: "pi_x"}
	quiet := reconcile.ProviderObject{ID: "pi_quiet", Kind: reconcile.PaymentIntent, Money: reconcile.Money{Amount: 5, Currency: "eur"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(t0.Add(4 * time.Hour))}
	fresh := reconcile.ProviderObject{ID: "ch_fresh", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 1, Currency: "usd"},
		Status: reconcile.Pending, Created: reconcile.StampOf(t0.Add(2*day + time.Hour))}
	for _, o := range []reconcile.ProviderObject{old, pending, twice, quiet, fresh} {
		e.add(t, "key-"+o.ID, o)
	}
	at := t0.Add(2*day + 2*time.Hour)
	update := func(id string, at time.Time, f func(*reconcile.ProviderObject)) {
		t.Helper()
		if err := e.srv.Update(id, at, f); err != nil {
			t.Fatal(err)
		}
	}
	// The pending refund fails, then succeeds; the charge gets metadata;
	// the other refund changes twice within one second; the intent's
	// metadata is edited (Stripe tells no event of it); the fresh charge
	// is captured.
	update("re_pending", at, func(o *reconcile.ProviderObject) { o.Status = reconcile.Failed })
	update("re_pending", at.Add(time.Minute), func(o *reconcile.ProviderObject) { o.Status = reconcile.Succeeded })
	update("ch_old", at, func(o *reconcile.ProviderObject) { o.Metadata = map[string]string{"obligation_id": "charge:old"} })
	update("re_twice", at, func(o *reconcile.ProviderObject) { o.Status = reconcile.Failed })
	update("re_twice", at, func(o *reconcile.ProviderObject) { o.Status = reconcile.Succeeded })
	update("pi_quiet", at, func(o *reconcile.ProviderObject) { o.Metadata = map[string]string{"obligation_id": "charge:q"} })
	update("ch_fresh", at, func(o *reconcile.ProviderObject) { o.Status = reconcile.Succeeded })

	r := e.reader(t, nil)
	s, err := r.Sync(t.Context(), SyncRequest{
		Objects: reconcile.Window{From: t0.Add(2 * day), To: t0.Add(3 * day)},
		Events:  reconcile.Window{From: t0.Add(2 * day), To: t0.Add(3 * day)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := objectIDs(&s.Listing); !slices.Equal(got, []string{"charge/ch_fresh"}) {
		t.Errorf("listed %v, want the fresh charge only", got)
	}
	if got := s.Objects[0].Status; got != reconcile.Succeeded {
		t.Errorf("fresh charge listed %s, want succeeded (as it is now)", got)
	}
	var got []string
	for _, c := range s.Changes {
		got = append(got, c.Object.ID+" "+string(c.Object.Status)+" "+c.Object.Metadata["obligation_id"]+" "+c.At.Format(time.RFC3339))
	}
	want := []string{
		"ch_old succeeded charge:old " + at.Format(time.RFC3339),
		"re_pending succeeded  " + at.Add(time.Minute).Format(time.RFC3339),
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff([]string{"re_twice"}, s.Unsettled); diff != "" {
		t.Errorf("unsettled (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff([]string{"ch_fresh=key-ch_fresh"}, keyPairs(&s.Listing)); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if n := len(syncEventTypes()); n > 20 {
		t.Errorf("Sync asks for %d event types, Stripe takes at most 20", n)
	}
}

// A Sync that cannot read every event fails whole: a partial feed would
// leave changes unseen.
func TestSyncFailsWhole(t *testing.T) {
	e := newEnv(t)
	populate(t, e, 200)
	e.srv.SetFaults(stripesim.Faults{FailList: ListEvents, FailListAfter: 1})
	r := e.reader(t, func(o *StripeOptions) { o.Concurrency = 1; o.MaxRetries = 1 })
	s, err := r.Sync(t.Context(), SyncRequest{Objects: reconcile.Window{From: window.To, To: window.To}, Events: window})
	var le *ListError
	if err == nil || s != nil || !errors.As(err, &le) || le.List != ListEvents {
		t.Fatalf("Sync with events failing = %v, %v; want a *ListError of the events and nothing", s, err)
	}
}
