package workers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/bench"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
	"reconcile/internal/stripesim"
)

// The cases of TestShardEdges* put what a decision rests on in
// different shards of two (shardOf picks the ids), each where a shard
// could read less than the decision needs (docs/design.md, "Shards").
const rvShards = 2

// pick returns prefix+suffix for the first suffix whose shard (of
// rvShards) is want.
func pick(prefix string, want int) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		if reconcile.ShardOf(id, rvShards) == want {
			return id
		}
	}
}

func rvObl(id, providerID string, amount int64, state reconcile.State, created time.Time) reconcile.Obligation {
	return reconcile.Obligation{ID: id, Kind: reconcile.Charge, IdempotencyKey: id + "-key", Provider: "stripe",
		ProviderID: providerID, Money: reconcile.Money{Amount: amount, Currency: "usd"}, State: state, RawState: string(state),
		CreatedAt: reconcile.StampOf(created), UpdatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)}
}

func rvCharge(id string, amount int64, created time.Time, f func(*reconcile.ProviderObject)) reconcile.ProviderObject {
	o := reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: reconcile.Money{Amount: amount, Currency: "usd"},
		Status: reconcile.Succeeded, RawStatus: "succeeded", Created: reconcile.StampOf(created)}
	if f != nil {
		f(&o)
	}
	return o
}

// One pass over 72h; the platform's account alone, in 2 shards: an
// obligation naming an intent the listing lacks whose charge comes on an
// earlier day than what names the obligation (S3); an old obligation
// only the subject names, its charge read further back and its twin in
// the mirror (S1); two unknown outcomes of two shards naming one charge
// found only by id (S4); a refund whose charge only a retrieval by id
// finds (S5); an unknown outcome naming one half of an old payment found
// only by id, an old obligation of the other shard naming the other
// half (S6 names the charge, S7 the intent).
func TestShardEdgesOnePass(t *testing.T) {
	w := reconcile.Window{From: t0.Add(-72 * time.Hour), To: t0}
	opts := matcher.OptionsFrom(config.Default().Matcher)
	var coverFrom time.Time
	add := func(p *bench.Platform) {
		var oldest time.Time
		for _, o := range p.Obligations {
			if o.Account != "" {
				continue
			}
			if o.State == reconcile.Executing || o.State == reconcile.ConfirmationUnknown || w.Contains(o.CreatedAt.Time()) || w.Contains(o.UpdatedAt.Time()) {
				if oldest.IsZero() || o.CreatedAt.Time().Before(oldest) {
					oldest = o.CreatedAt.Time()
				}
			}
		}
		coverFrom = opts.CoverFrom(w, oldest, t0, config.Default().MaxLookback)
		t.Logf("cover from %s (oldest in scope %s)", coverFrom, oldest)
		old := t0.Add(-21 * 24 * time.Hour)

		// S3: an obligation naming an intent the listing lacks; its
		// charge on an earlier day than the subject's retry naming it.
		o3 := pick("rvw3-obl", 0)
		ch3a := pick("ch_rvw3a", 1)
		p.Obligations = append(p.Obligations, rvObl(o3, "pi_rvw3abs", 5151, reconcile.Paid, old))
		p.Objects[""] = append(p.Objects[""],
			rvCharge(ch3a, 5151, t0.Add(-60*time.Hour), func(o *reconcile.ProviderObject) { o.PaymentIntent = "pi_rvw3abs" }),
			rvCharge("ch_rvw3b", 5151, t0.Add(-2*time.Hour), func(o *reconcile.ProviderObject) {
				o.Metadata = map[string]string{"obligation_id": o3}
			}))

		// S1: an old obligation only the subject names; its charge in the
		// stretch read further back, its twin just after the coverage.
		o1 := pick("rvw1-obl", 0)
		sus1 := pick("ch_rvw1sus", 1)
		p.Obligations = append(p.Obligations, rvObl(o1, "ch_rvw1old", 6161, reconcile.Paid, old))
		p.Objects[""] = append(p.Objects[""],
			rvCharge("ch_rvw1old", 6161, coverFrom.Add(-time.Hour), func(o *reconcile.ProviderObject) { o.Customer = "cus_rvw1" }),
			rvCharge(sus1, 6161, coverFrom.Add(time.Hour), func(o *reconcile.ProviderObject) { o.Customer = "cus_rvw1" }),
			rvCharge("ch_rvw1late", 6161, t0.Add(-2*time.Hour), func(o *reconcile.ProviderObject) {
				o.Metadata = map[string]string{"obligation_id": o1}
			}))

		// S4: two unknown outcomes of different shards naming one charge
		// that only a retrieval by id finds.
		o4a, o4b := pick("rvw4a-obl", 0), pick("rvw4b-obl", 1)
		p.Obligations = append(p.Obligations,
			rvObl(o4a, "ch_rvw4anc", 8181, reconcile.ConfirmationUnknown, t0.Add(-10*time.Hour)),
			rvObl(o4b, "ch_rvw4anc", 8181, reconcile.ConfirmationUnknown, t0.Add(-10*time.Hour)))
		p.Objects[""] = append(p.Objects[""], rvCharge("ch_rvw4anc", 8181, t0.Add(-200*24*time.Hour), nil))

		// S5: a refund whose refunded charge only a retrieval by id
		// finds, and links to no obligation: it is the shard's of the
		// refund's obligation, not of its own id.
		o5, ch5 := pick("rvw5-obl", 0), pick("ch_rvw5old", 1)
		refund := rvObl(o5, "re_rvw5", 9191, reconcile.Paid, t0.Add(-5*time.Hour))
		refund.Kind, refund.TargetID = reconcile.Refund, ch5
		p.Obligations = append(p.Obligations, refund)
		p.Objects[""] = append(p.Objects[""], rvCharge(ch5, 20000, t0.Add(-200*24*time.Hour), nil),
			reconcile.ProviderObject{ID: "re_rvw5", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 9191, Currency: "usd"},
				Status: reconcile.Succeeded, RawStatus: "succeeded", Target: ch5, Charge: ch5, Created: reconcile.StampOf(t0.Add(-5 * time.Hour))})

		// S6, S7: an unknown outcome naming one half of an old payment
		// (a charge and its intent) that only a retrieval by id finds,
		// an old paid obligation of the other shard naming the other
		// half: a conflict, whichever half each names.
		for i, names := range [][2]string{{"ch", "pi"}, {"pi", "ch"}} {
			n := fmt.Sprint(6 + i)
			ch, pi := "ch_rvw"+n, "pi_rvw"+n
			id := map[string]string{"ch": ch, "pi": pi}
			unknown, paid := pick("rvw"+n+"u-obl", 0), pick("rvw"+n+"p-obl", 1)
			p.Obligations = append(p.Obligations,
				rvObl(unknown, id[names[0]], 3131, reconcile.ConfirmationUnknown, t0.Add(-10*time.Hour)),
				rvObl(paid, id[names[1]], 3131, reconcile.Paid, old))
			created := t0.Add(-200 * 24 * time.Hour)
			p.Objects[""] = append(p.Objects[""],
				rvCharge(ch, 3131, created, func(o *reconcile.ProviderObject) { o.PaymentIntent = pi }),
				rvCharge(pi, 3131, created, func(o *reconcile.ProviderObject) {
					o.Kind, o.Charge = reconcile.PaymentIntent, ch
				}))
		}
	}
	p := newPlatform(t, 1, 300, add)
	one, dist := platformPair(t, p)
	q := workersOn(t, dist, 2, rvShards)
	req := runner.Request{Window: w, Trigger: reconcile.TriggerManual, Full: true}
	out, err := one.runner.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range out.Transitions {
		if strings.HasPrefix(tr.ObligationID, "rvw6") || strings.HasPrefix(tr.ObligationID, "rvw7") {
			t.Errorf("marked %+v on a payment an old obligation claims through its other half", tr)
		}
	}
	plan := completePass(t, dist, q, req, 24*time.Hour)
	t.Logf("one: covered %v context %d partial %d", out.Covered, out.Context, out.Partial)
	res, err := dist.store.PassResult(t.Context(), plan.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shards: covered %v context %d partial %d", res.Report.Covered, res.Report.Context, res.Report.Partial)
	sameState(t, one, dist, []string{out.Run.ID}, []string{plan.Run.ID})
}

// Two passes over 24h: a stored suspected duplicate of a context
// obligation, whose suspect is linked by the second pass.
func TestShardEdgesSettle(t *testing.T) {
	o2, sus := pick("rvw2-obl", 0), pick("ch_rvw2sus", 1)
	add := func(p *bench.Platform) {
		p.Obligations = append(p.Obligations, rvObl(o2, "ch_rvw2twin", 7171, reconcile.Paid, t0.Add(-30*time.Hour)))
		p.Objects[""] = append(p.Objects[""],
			rvCharge("ch_rvw2twin", 7171, t0.Add(-30*time.Hour), func(o *reconcile.ProviderObject) { o.Customer = "cus_rvw2" }),
			rvCharge(sus, 7171, t0.Add(-10*time.Hour), func(o *reconcile.ProviderObject) { o.Customer = "cus_rvw2" }))
	}
	p := newPlatform(t, 1, 300, add)
	one, dist := platformPair(t, p)
	q := workersOn(t, dist, 2, rvShards)
	req := runner.Request{Window: reconcile.Window{From: t0.Add(-24 * time.Hour), To: t0}, Trigger: reconcile.TriggerManual, Full: true}
	var oneIDs, distIDs []string
	for pass := range 2 {
		if pass == 1 {
			// The application records the suspect's obligation after all.
			late := rvObl("rvw2-late", sus, 7171, reconcile.Paid, t0.Add(-10*time.Hour))
			for _, rc := range []*reconciler{one, dist} {
				pgtest.InsertObligations(t, rc.pool, late)
			}
		}
		oneID, distID := passBoth(t, one, dist, q, req, 12*time.Hour)
		oneIDs, distIDs = append(oneIDs, oneID), append(distIDs, distID)
	}
	sameState(t, one, dist, oneIDs, distIDs)
}

// S2: an unknown outcome linked only by the key evidence of an intent
// the listing lacks (its event told in the window, the intent not
// listed), its charge carrying another key.
func TestShardEdgesAbsentIntentKey(t *testing.T) {
	o5, ch5 := pick("rvw5-obl", 0), pick("ch_rvw5", 1)
	p := &platform{Platform: bench.NewPlatform(1, 300, t0)}
	ob := rvObl(o5, "", 9191, reconcile.ConfirmationUnknown, t0.Add(-10*time.Hour))
	p.Obligations = append(p.Obligations, ob)
	p.Objects[""] = append(p.Objects[""], rvCharge(ch5, 9191, t0.Add(-9*time.Hour), func(o *reconcile.ProviderObject) { o.PaymentIntent = "pi_rvw5abs" }))
	srv := stripesim.New(testKey)
	if err := p.Serve(srv); err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf(`{"id":"pi_rvw5abs","object":"payment_intent","amount":9191,"currency":"usd","status":"succeeded","created":%d,"metadata":{}}`,
		t0.Add(-9*time.Hour).Unix())
	if _, err := srv.AddEvent(stripesim.Event{Type: "payment_intent.succeeded", Created: t0.Add(-9 * time.Hour), Data: []byte(data),
		Request: &stripesim.Request{ID: "req_rvw5", IdempotencyKey: ob.IdempotencyKey}}); err != nil {
		t.Fatal(err)
	}
	base, stop, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	p.base = base
	one, dist := platformPair(t, p)
	q := workersOn(t, dist, 2, rvShards)
	req := runner.Request{Window: reconcile.Window{From: t0.Add(-24 * time.Hour), To: t0}, Trigger: reconcile.TriggerManual, Full: true}
	oneID, distID := passBoth(t, one, dist, q, req, 12*time.Hour)
	sameState(t, one, dist, []string{oneID}, []string{distID})
}
