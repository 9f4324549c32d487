package runner_test

import (
	"context"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/stripesim"
)

// accountsEnv is env with a platform and two connected accounts, A and
// B, and an obligations table naming each obligation's account.
type accountsEnv struct {
	*env
	obl *sources.Obligations
}

func newAccountsEnv(t *testing.T) accountsEnv {
	t.Helper()
	e := newEnv(t)
	for _, a := range []stripesim.Account{{ID: "acct_A", DisplayName: "Shop A"}, {ID: "acct_B", Name: "Shop B Ltd"}} {
		if err := e.srv.AddAccount(a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(t.Context(), `ALTER TABLE obligations ADD COLUMN stripe_account text`); err != nil {
		t.Fatal(err)
	}
	table := reconcile.DefaultObligationTable()
	table.Columns.Account = "stripe_account"
	obl, err := sources.NewObligations(e.pool, table)
	if err != nil {
		t.Fatal(err)
	}
	return accountsEnv{env: e, obl: obl}
}

// runner reads every account, each through its own views, the mirror
// kept per account.
func (e accountsEnv) runner() *runner.Runner {
	r := e.env.runner(true)
	r.Obligations = e.obl
	r.Accounts = e.stripe.Accounts
	r.Scope = func(acct string) runner.Readers {
		return runner.Readers{Provider: e.stripe.ForAccount(acct), Obligations: e.obl.ForAccount(acct), Mirror: e.mirror.ForAccount(acct)}
	}
	return r
}

func (e accountsEnv) add(acct, key string, o reconcile.ProviderObject) {
	e.tb.Helper()
	if err := e.srv.As(acct).Add(o, key); err != nil {
		e.tb.Fatal(err)
	}
}

func (e accountsEnv) obligation(acct string, o reconcile.Obligation) {
	e.tb.Helper()
	pgtest.InsertObligations(e.tb, e.pool, o)
	if acct != "" {
		if _, err := e.pool.Exec(context.Background(), `UPDATE obligations SET stripe_account = $1 WHERE id = $2`, acct, o.ID); err != nil {
			e.tb.Fatal(err)
		}
	}
}

// Each account is its own world: an object links only to obligations of
// its own account, even where its id is another account's object's too;
// a connected account's findings carry it and its fingerprint; the
// accounts' names are kept; a second pass reads little from every
// account's mirror and concludes the same (docs/design.md, "Accounts").
func TestPassReadsEveryAccountApart(t *testing.T) {
	e := newAccountsEnv(t)
	usd := func(n int64) reconcile.Money { return reconcile.Money{Amount: n, Currency: "usd"} }
	at := func(h int) time.Time { return t0.Add(-time.Duration(h) * time.Hour) }
	ob := func(id string, kind reconcile.ObjectKind, key, providerID, target string, m reconcile.Money, state reconcile.State, created time.Time) reconcile.Obligation {
		o := reconcile.Obligation{ID: id, Kind: kind, IdempotencyKey: key, Provider: "stripe", ProviderID: providerID, TargetID: target,
			Money: m, State: state, CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created)}
		if state == reconcile.Paid {
			o.PaidAt = reconcile.StampOf(created)
		}
		return o
	}
	charge := func(id string, m reconcile.Money, created time.Time) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: m, Status: reconcile.Succeeded, RawStatus: "succeeded", Created: reconcile.StampOf(created)}
	}
	refund := func(id, ch string, m reconcile.Money, created time.Time) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: reconcile.Refund, Money: m, Status: reconcile.Succeeded, RawStatus: "succeeded",
			Target: ch, Charge: ch, Created: reconcile.StampOf(created)}
	}
	// The platform: ch_1, paid for charge:p1.
	e.obligation("", ob("charge:p1", reconcile.Charge, "k-p1", "ch_1", "", usd(1000), reconcile.Paid, at(30)))
	e.add("", "k-p1", charge("ch_1", usd(1000), at(30)))
	// Shop A: one approved refund, made twice.
	e.obligation("acct_A", ob("charge:a0", reconcile.Charge, "k-a0", "ch_A", "", usd(8900), reconcile.Paid, at(40)))
	e.add("acct_A", "k-a0", charge("ch_A", usd(8900), at(40)))
	e.obligation("acct_A", ob("refund:a1", reconcile.Refund, "refund:a1", "re_2", "ch_A", usd(8900), reconcile.Paid, at(5)))
	e.add("acct_A", "refund:a1", refund("re_1", "ch_A", usd(8900), at(5)))
	e.add("acct_A", "agent-retry", refund("re_2", "ch_A", usd(8900), at(5).Add(2*time.Minute)))
	// Shop B: an unknown outcome its own ch_1 (an id the platform has
	// too, for other money) proves.
	e.obligation("acct_B", ob("charge:b1", reconcile.Charge, "k-b1", "", "", usd(500), reconcile.ConfirmationUnknown, at(3)))
	e.add("acct_B", "k-b1", charge("ch_1", usd(500), at(3)))

	e.clock = t0
	run := func() *runner.Outcome {
		t.Helper()
		out, err := e.runner().Run(t.Context(), runner.Request{Window: reconcile.Window{From: t0.Add(-72 * time.Hour), To: t0},
			Trigger: reconcile.TriggerManual})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := run()
	if n := len(first.Result.Findings); n != 1 {
		t.Fatalf("findings %+v; want the one duplicate of Shop A", first.Result.Findings)
	}
	f := first.Result.Findings[0]
	if f.Kind != reconcile.Duplicate || f.ObligationID != "refund:a1" || f.Account != "acct_A" || f.AccountName != "Shop A" ||
		f.Fingerprint != reconcile.AccountFingerprint("acct_A", reconcile.Duplicate, "refund:a1", "") {
		t.Errorf("finding %+v; want Shop A's duplicate of refund:a1 under its account's fingerprint", f)
	}
	if ts := first.Transitions; len(ts) != 1 || ts[0].ObligationID != "charge:b1" || ts[0].ProviderID != "ch_1" {
		t.Errorf("transitions %+v; want charge:b1 PAID on Shop B's ch_1", ts)
	}
	if c := first.Run.Counts; c.Obligations != 4 || c.ProviderObjects != 5 {
		t.Errorf("counts %+v; want 4 obligations and 5 objects over the three accounts", c)
	}
	stats := e.srv.Stats()
	for _, acct := range []string{"", "acct_A", "acct_B"} {
		if stats.Accounts[acct].Requests == 0 {
			t.Errorf("no request named account %q; stats %+v", acct, stats.Accounts)
		}
	}
	stored, err := e.store.FindingsOf(t.Context(), []string{f.Fingerprint})
	if err != nil || len(stored) != 1 || stored[0].Account != "acct_A" || stored[0].AccountName != "Shop A" {
		t.Errorf("stored findings of refund:a1: %+v, %v; want one of acct_A, named Shop A", stored, err)
	}
	var shopB string
	if err := e.pool.QueryRow(t.Context(), `SELECT name FROM reconcile.accounts WHERE id = 'acct_B'`).Scan(&shopB); err != nil || shopB != "Shop B Ltd" {
		t.Errorf("acct_B's kept name %q, %v; want Shop B Ltd (its business name)", shopB, err)
	}
	e.srv.ResetStats()
	e.clock = t0.Add(time.Hour)
	second := run()
	if n := e.reads(); n > 12 {
		t.Errorf("the second pass read %d things from Stripe; each account's mirror should vouch for its records", n)
	}
	if len(second.Result.Findings) != 1 || second.Result.Findings[0].Fingerprint != f.Fingerprint || len(second.Transitions) != 0 {
		t.Errorf("second pass: findings %+v, transitions %+v; want the same duplicate and nothing to change", second.Result.Findings, second.Transitions)
	}
	if second.Applied.New+second.Applied.Resolved+second.Applied.Changed != 0 {
		t.Errorf("second pass applied %+v; want nothing new, changed or resolved", second.Applied)
	}
}
