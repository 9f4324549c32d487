// Package demo holds `reconcile demo` but for its wiring: the built-in
// sample data, a few days of a small platform's payments, its own and
// three connected shops', in which every kind of trouble the reconciler
// exists for happens once, next to payments that are fine; and the
// bootstrap that needs no set-up, a throwaway database
// holding the sample's obligations, a Stripe-compatible server holding its
// provider objects, and a Slack that prints.
package demo

import (
	"fmt"
	"time"

	"reconcile"
)

// Object is a provider object and the idempotency key of the request that
// created it ("" for an automatic one).
type Object struct {
	reconcile.ProviderObject
	Key string
}

// Dataset is one consistent history: the obligations table and what the
// provider recorded, on the platform's own account and on its connected
// accounts (each object and obligation names its Account).
type Dataset struct {
	Accounts    []reconcile.Account
	Obligations []reconcile.Obligation
	Objects     []Object
}

// AccountColumn is the demo obligations table's column naming each
// obligation's connected account (obligations.columns.account).
const AccountColumn = "stripe_account"

// The demo platform's connected accounts: three shops.
var (
	Bakery = reconcile.Account{ID: "acct_1DemoBakery", Name: "Corner Bakery"}
	Bikes  = reconcile.Account{ID: "acct_1DemoBikes", Name: "Hill Bikes"}
	Books  = reconcile.Account{ID: "acct_1DemoBooks", Name: "Old Town Books"}
)

// Story tells, for people, what the sample holds.
const Story = `The sample platform's last three days, its own payments and those of three shops
connected to it (Corner Bakery, Hill Bikes, Old Town Books):
  - order 4821 at Corner Bakery: an agent refunded USD 89.00, the response was lost, it retried
    with a fresh idempotency key, and the provider refunded twice (the story this tool exists for);
  - refund 5100: a timeout left it CONFIRMATION_UNKNOWN; the provider's record under the same
    key proves it happened;
  - charge 5400: a worker crashed mid-payment; its lease expired and the provider has nothing;
  - charge 5600: someone refunded USD 10.00 by hand in the dashboard;
  - charge 5700: the provider charged EUR 45.00 where EUR 54.00 was approved;
  - and a dozen payments in USD, EUR, JPY and KWD, on the platform and the shops, that agree
    with the provider.`

// Sample returns the demo history relative to now.
func Sample(now time.Time) Dataset {
	ago := func(d time.Duration) time.Time { return now.Add(-d).Truncate(time.Second) }
	ds := Dataset{Accounts: []reconcile.Account{Bakery, Bikes, Books}}
	// acct is the account the helpers below put what they make on.
	acct := ""
	ob := func(id string, kind reconcile.ObjectKind, key, providerID, target string, m reconcile.Money, state reconcile.State, created time.Duration) *reconcile.Obligation {
		o := reconcile.Obligation{ID: id, Account: acct, Kind: kind, IdempotencyKey: key, Provider: "stripe", ProviderID: providerID,
			TargetID: target, Money: m, State: state, RawState: string(state), CreatedAt: reconcile.StampOf(ago(created)), UpdatedAt: reconcile.StampOf(ago(created - time.Minute))}
		if state == reconcile.Paid {
			o.PaidAt = o.UpdatedAt
		}
		ds.Obligations = append(ds.Obligations, o)
		return &ds.Obligations[len(ds.Obligations)-1]
	}
	charge := func(id string, m reconcile.Money, created time.Duration, key string, meta map[string]string) {
		ds.Objects = append(ds.Objects, Object{Key: key, ProviderObject: reconcile.ProviderObject{
			ID: id, Account: acct, Kind: reconcile.Charge, Money: m, Status: reconcile.Succeeded, RawStatus: "succeeded",
			Customer: "cus_demo" + id[3:], Metadata: meta, Created: reconcile.StampOf(ago(created))}})
	}
	refund := func(id, ch string, m reconcile.Money, created time.Duration, key string) {
		ds.Objects = append(ds.Objects, Object{Key: key, ProviderObject: reconcile.ProviderObject{
			ID: id, Account: acct, Kind: reconcile.Refund, Money: m, Status: reconcile.Succeeded, RawStatus: "succeeded",
			Target: ch, Charge: ch, Created: reconcile.StampOf(ago(created))}})
	}
	usd := func(a int64) reconcile.Money { return reconcile.Money{Amount: a, Currency: "usd"} }
	eur := func(a int64) reconcile.Money { return reconcile.Money{Amount: a, Currency: "eur"} }

	// Order 4821 at Corner Bakery: paid, then refunded twice for one
	// approved refund.
	acct = Bakery.ID
	ob("charge:4821", reconcile.Charge, "k-charge-4821", "ch_4821", "", usd(17800), reconcile.Paid, 70*time.Hour)
	charge("ch_4821", usd(17800), 70*time.Hour, "k-charge-4821", map[string]string{"order": "4821"})
	ob("refund:4821:approved-request-7", reconcile.Refund, "refund:4821:approved-request-7", "re_4821b", "ch_4821",
		usd(8900), reconcile.Paid, 3*time.Hour)
	refund("re_4821a", "ch_4821", usd(8900), 3*time.Hour-time.Minute, "refund:4821:approved-request-7")
	refund("re_4821b", "ch_4821", usd(8900), 3*time.Hour-3*time.Minute, "agent-retry-5b1e")

	// The platform's own payments.
	acct = ""
	// Refund 5100: the answer was lost; the provider did it under the same key.
	ob("charge:5100", reconcile.Charge, "k-charge-5100", "ch_5100", "", usd(4300), reconcile.Paid, 60*time.Hour)
	charge("ch_5100", usd(4300), 60*time.Hour, "k-charge-5100", nil)
	ob("refund:5100:1", reconcile.Refund, "refund:5100:1", "", "ch_5100", usd(4300), reconcile.ConfirmationUnknown, 2*time.Hour)
	refund("re_5100", "ch_5100", usd(4300), 2*time.Hour-time.Minute, "refund:5100:1")

	// Charge 5400: the worker crashed; its lease ran out three hours ago.
	o := ob("charge:5400", reconcile.Charge, "k-charge-5400", "", "", usd(700), reconcile.Executing, 4*time.Hour)
	o.LeaseOwner, o.LeaseExpiresAt = "worker-7", reconcile.StampOf(ago(3*time.Hour))

	// Charge 5600: refunded by hand, outside the workflow.
	ob("charge:5600", reconcile.Charge, "k-charge-5600", "ch_5600", "", usd(3100), reconcile.Paid, 50*time.Hour)
	charge("ch_5600", usd(3100), 50*time.Hour, "k-charge-5600", nil)
	refund("re_5600x", "ch_5600", usd(1000), 6*time.Hour, "")

	// Charge 5700: the provider charged a different amount.
	ob("charge:5700", reconcile.Charge, "k-charge-5700", "ch_5700", "", eur(5400), reconcile.Paid, 30*time.Hour)
	charge("ch_5700", eur(4500), 30*time.Hour, "k-charge-5700", nil)

	// Payments that agree with the provider, linked by each route, on
	// the platform and every shop.
	currencies := []reconcile.Money{usd(2500), eur(1200), {Amount: 12000, Currency: "jpy"}, {Amount: 1500, Currency: "kwd"}}
	accounts := []string{"", Bakery.ID, Bikes.ID, Books.ID}
	for i := range 12 {
		acct = accounts[(i+i/4)%len(accounts)]
		m := currencies[i%len(currencies)]
		m.Amount += int64(i * 100)
		id := fmt.Sprintf("charge:%d", 6000+i)
		ch := fmt.Sprintf("ch_%d", 6000+i)
		created := time.Duration(5+i*5) * time.Hour
		switch i % 3 {
		case 0: // the provider id was stored
			ob(id, reconcile.Charge, "k-"+id, ch, "", m, reconcile.Paid, created)
			charge(ch, m, created, "k-"+id, nil)
		case 1: // only the idempotency key ties them
			ob(id, reconcile.Charge, "k-"+id, "", "", m, reconcile.Paid, created)
			charge(ch, m, created, "k-"+id, nil)
		case 2: // metadata names the obligation
			ob(id, reconcile.Charge, "k-"+id, "", "", m, reconcile.Paid, created)
			charge(ch, m, created, "", map[string]string{"obligation_id": id})
		}
	}
	return ds
}
