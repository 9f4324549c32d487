package matcher

import (
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/config"
)

// The same history on a connected account finds the same problems, each
// carrying the account and a fingerprint of its own; on the platform's
// account the fingerprints are those a reconciler reading the platform
// alone always gave (docs/design.md, "Accounts").
func TestFindingsCarryTheirAccount(t *testing.T) {
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	usd := reconcile.Money{Amount: 8900, Currency: "usd"}
	ob := reconcile.Obligation{ID: "refund:1", Kind: reconcile.Refund, IdempotencyKey: "k-1", ProviderID: "re_b", TargetID: "ch_t",
		Money: usd, State: reconcile.Paid, CreatedAt: reconcile.StampOf(now.Add(-3 * time.Hour)), UpdatedAt: reconcile.StampOf(now.Add(-3 * time.Hour)), PaidAt: reconcile.StampOf(now.Add(-3 * time.Hour))}
	objs := []reconcile.ProviderObject{
		{ID: "re_a", Kind: reconcile.Refund, Money: usd, Status: reconcile.Succeeded, Target: "ch_t", Charge: "ch_t", Created: reconcile.StampOf(now.Add(-3 * time.Hour))},
		{ID: "re_b", Kind: reconcile.Refund, Money: usd, Status: reconcile.Succeeded, Target: "ch_t", Charge: "ch_t", Created: reconcile.StampOf(now.Add(-179 * time.Minute))},
		{ID: "re_x", Kind: reconcile.Refund, Money: usd, Status: reconcile.Succeeded, Target: "ch_o", Charge: "ch_o", Created: reconcile.StampOf(now.Add(-2 * time.Hour))},
	}
	keys := []reconcile.KeyEvidence{{ObjectID: "re_a", ObjectKind: reconcile.Refund, Key: "k-1", EventID: "evt_1", EventType: "refund.created", Created: objs[0].Created}}
	match := func(acct reconcile.Account) []reconcile.Finding {
		in := Input{Account: acct, Obligations: []reconcile.Obligation{ob}, Objects: objs, Keys: keys,
			Listed: reconcile.Window{From: now.Add(-72 * time.Hour), To: now}, EventsFrom: now.Add(-72 * time.Hour)}
		return Match(in, now, OptionsFrom(config.Default().Matcher)).Findings
	}
	platform := match(reconcile.Account{})
	connected := match(reconcile.Account{ID: "acct_1", Name: "Shop"})
	if len(platform) != 2 || len(connected) != len(platform) {
		t.Fatalf("findings: platform %+v, connected %+v; want a duplicate and an orphan on each", platform, connected)
	}
	for i, p := range platform {
		c := connected[i]
		obj := ""
		if p.Kind == reconcile.Orphan {
			obj = "re_x"
		}
		if p.Account != "" || p.Fingerprint != reconcile.Fingerprint(p.Kind, p.ObligationID, obj) {
			t.Errorf("platform %s: account %q, fingerprint %s; want none and the platform's fingerprint", p.Kind, p.Account, p.Fingerprint)
		}
		if c.Kind != p.Kind || c.Account != "acct_1" || c.AccountName != "Shop" || c.Fingerprint == p.Fingerprint ||
			c.Fingerprint != reconcile.AccountFingerprint("acct_1", c.Kind, c.ObligationID, obj) {
			t.Errorf("connected %s: %+v; want acct_1 (Shop) and a fingerprint of its own", c.Kind, c)
		}
		if c.ContentHash != p.ContentHash {
			t.Errorf("%s: content hash %s on the account, %s on the platform; what it says is the same", p.Kind, c.ContentHash, p.ContentHash)
		}
	}
}
