package matcher

import (
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/config"
)

// A refund paid twice paid out too much; a charge collected twice
// collected too much from the customer: the duplicate's money means what
// moved (reconcile.Finding.Meaning).
func TestDuplicateMeaningFollowsTheMoney(t *testing.T) {
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	usd := reconcile.Money{Amount: 8900, Currency: "usd"}
	for _, tt := range []struct {
		kind   reconcile.ObjectKind
		prefix string
		want   reconcile.Meaning
	}{
		{reconcile.Refund, "re_", reconcile.PaidOutTooMuch},
		{reconcile.Charge, "ch_", reconcile.CollectedWrong},
	} {
		ob := reconcile.Obligation{ID: "ob-" + string(tt.kind), Kind: tt.kind, IdempotencyKey: "k-1", ProviderID: tt.prefix + "b",
			Money: usd, State: reconcile.Paid, CreatedAt: reconcile.StampOf(now.Add(-3 * time.Hour)), UpdatedAt: reconcile.StampOf(now.Add(-3 * time.Hour)), PaidAt: reconcile.StampOf(now.Add(-3 * time.Hour))}
		if tt.kind == reconcile.Refund {
			ob.TargetID = "ch_t"
		}
		objs := []reconcile.ProviderObject{
			{ID: tt.prefix + "a", Kind: tt.kind, Money: usd, Status: reconcile.Succeeded, Created: reconcile.StampOf(now.Add(-3 * time.Hour)), Metadata: map[string]string{}},
			{ID: tt.prefix + "b", Kind: tt.kind, Money: usd, Status: reconcile.Succeeded, Created: reconcile.StampOf(now.Add(-179 * time.Minute))},
		}
		if tt.kind == reconcile.Refund {
			objs[0].Target, objs[0].Charge, objs[1].Target, objs[1].Charge = "ch_t", "ch_t", "ch_t", "ch_t"
		}
		keys := []reconcile.KeyEvidence{{ObjectID: tt.prefix + "a", ObjectKind: tt.kind, Key: "k-1", EventID: "evt_1", EventType: "x.created", Created: objs[0].Created}}
		in := Input{Obligations: []reconcile.Obligation{ob}, Objects: objs, Keys: keys,
			Listed: reconcile.Window{From: now.Add(-72 * time.Hour), To: now}, EventsFrom: now.Add(-72 * time.Hour)}
		res := Match(in, now, OptionsFrom(config.Default().Matcher))
		var got []reconcile.Meaning
		for _, f := range res.Findings {
			if f.Kind == reconcile.Duplicate {
				got = append(got, f.Meaning())
			}
		}
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s paid twice: duplicates' meanings %v (findings %+v), want [%s]", tt.kind, got, res.Findings, tt.want)
		}
	}
}
