package bench

import (
	"fmt"

	"time"

	"reconcile"
	"reconcile/internal/stripesim"
)

// Platform is a platform's history over several Stripe accounts: the
// platform's own account and connected ones (acct_T01, …), each a World
// of the same size with every finding kind. Each account's obligation
// ids and idempotency keys are its own (prefixed a00-, a01-, …, as one
// obligations table needs them), while its Stripe ids are the same as
// every other account's: ids are unique only within an account.
type Platform struct {
	Accounts    []reconcile.Account // the platform's own first
	Obligations []reconcile.Obligation
	// Objects are each account's provider objects, by account id.
	Objects map[string][]reconcile.ProviderObject
	// Keys are each account's objects' idempotency keys, by account and
	// object id.
	Keys map[string]map[string]string
}

// NewPlatform builds a Platform of accounts accounts (the platform's
// own included) of n obligations each, at now.
func NewPlatform(accounts, n int, now time.Time) Platform {
	p := Platform{Objects: map[string][]reconcile.ProviderObject{}, Keys: map[string]map[string]string{}}
	for i := range accounts {
		a := reconcile.Account{}
		if i > 0 {
			a = reconcile.Account{ID: fmt.Sprintf("acct_T%02d", i), Name: fmt.Sprintf("Shop %02d", i)}
		}
		p.Accounts = append(p.Accounts, a)
		w := NewWorld(n, now)
		prefix := fmt.Sprintf("a%02d-", i)
		keys := map[string]string{}
		for id, k := range w.KeyOf() {
			keys[id] = prefix + k
		}
		for _, o := range w.Objects {
			if id := o.Metadata["obligation_id"]; id != "" {
				o.Metadata = map[string]string{"obligation_id": prefix + id}
			}
			o.Account = a.ID
			p.Objects[a.ID] = append(p.Objects[a.ID], o)
		}
		p.Keys[a.ID] = keys
		for _, o := range w.Obligations {
			o.ID, o.IdempotencyKey, o.Account = prefix+o.ID, prefix+o.IdempotencyKey, a.ID
			p.Obligations = append(p.Obligations, o)
		}
	}
	return p
}

// Serve puts the platform on a Stripe test server: its connected
// accounts, each with its display name, and every account's objects
// under their keys.
func (p Platform) Serve(srv *stripesim.Server) error {
	for _, a := range p.Accounts {
		if a.Platform() {
			continue
		}
		if err := srv.AddAccount(stripesim.Account{ID: a.ID, DisplayName: a.Name}); err != nil {
			return err
		}
	}
	for _, a := range p.Accounts {
		for _, o := range p.Objects[a.ID] {
			if err := srv.As(a.ID).Add(o, p.Keys[a.ID][o.ID]); err != nil {
				return err
			}
		}
	}
	return nil
}
