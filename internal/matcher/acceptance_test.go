package matcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"reconcile/internal/config"

	"reconcile"
)

// scenario is the part of the acceptance suite's scenario format that
// concerns the matcher (testdata/acceptance holds verbatim copies).
type scenario struct {
	Name           string       `json:"name"`
	About          string       `json:"about"`
	Obligations    []scenObl    `json:"obligations"`
	Charges        []scenObj    `json:"charges"`
	Refunds        []scenObj    `json:"refunds"`
	PaymentIntents []scenObj    `json:"payment_intents"`
	Expect         scenarioWant `json:"expect"`
}

type scenObl struct {
	ID             string `json:"id"`
	Kind           string `json:"kind"`
	IdempotencyKey string `json:"idempotency_key"`
	ProviderID     string `json:"provider_id"`
	TargetID       string `json:"target_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	State          string `json:"state"`
	LeaseExpiresIn string `json:"lease_expires_in"`
	CreatedAgo     string `json:"created_ago"`
	UpdatedAgo     string `json:"updated_ago"`
}

type scenObj struct {
	ID             string            `json:"id"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	CreatedAgo     string            `json:"created_ago"`
	Metadata       map[string]string `json:"metadata"`
	Charge         string            `json:"charge"`
	PaymentIntent  string            `json:"payment_intent"`
	IdempotencyKey string            `json:"idempotency_key"`
	AmountRefunded int64             `json:"amount_refunded"`
}

type scenarioWant struct {
	Findings []struct {
		Kind               string   `json:"kind"`
		ObligationID       string   `json:"obligation_id"`
		ProviderIDsInclude []string `json:"provider_ids_include"`
	} `json:"findings"`
	AllowKinds []string          `json:"allow_kinds"`
	States     map[string]string `json:"states"`
}

// input builds what the sources would read from the acceptance harness's
// simulated Stripe: one event per object carrying its idempotency key (or
// an automatic one), charge.refunded events about a refunded charge with
// the refund's key, an intent's latest charge, a 720h window.
func (sc *scenario) input(tb testing.TB, now time.Time) Input {
	tb.Helper()
	ago := func(s string) time.Time {
		if s == "" {
			return now.Add(-time.Hour)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			tb.Fatalf("scenario %s: bad duration %q", sc.Name, s)
		}
		return now.Add(-d)
	}
	status := func(s string) reconcile.Status {
		switch s {
		case "", "succeeded":
			return reconcile.Succeeded
		case "failed":
			return reconcile.Failed
		case "canceled":
			return reconcile.Canceled
		}
		return reconcile.Pending
	}
	in := Input{Listed: reconcile.Window{From: now.Add(-720 * time.Hour), To: now}, EventsFrom: now.Add(-720 * time.Hour)}
	for _, o := range sc.Obligations {
		ob := reconcile.Obligation{ID: o.ID, Kind: reconcile.ObjectKind(o.Kind), IdempotencyKey: o.IdempotencyKey, Provider: "stripe",
			ProviderID: o.ProviderID, TargetID: o.TargetID, Money: reconcile.Money{Amount: o.Amount, Currency: o.Currency},
			State: reconcile.State(o.State), RawState: o.State, CreatedAt: reconcile.StampOf(ago(o.CreatedAgo)), UpdatedAt: reconcile.StampOf(ago(o.CreatedAgo))}
		if o.UpdatedAgo != "" {
			ob.UpdatedAt = reconcile.StampOf(ago(o.UpdatedAgo))
		}
		if o.LeaseExpiresIn != "" {
			d, err := time.ParseDuration(o.LeaseExpiresIn)
			if err != nil {
				tb.Fatalf("scenario %s: bad lease %q", sc.Name, o.LeaseExpiresIn)
			}
			ob.LeaseOwner, ob.LeaseExpiresAt = "worker-7", reconcile.StampOf(now.Add(d))
		}
		if ob.State == reconcile.Paid {
			ob.PaidAt = ob.UpdatedAt
		}
		in.Obligations = append(in.Obligations, ob)
	}
	ev := 0
	key := func(obj string, k string, typ string, created time.Time) {
		ev++
		if k == "" {
			k = fmt.Sprintf("auto-%d-%d", created.Unix(), ev)
		}
		in.Keys = append(in.Keys, reconcile.KeyEvidence{ObjectID: obj, Key: k, EventID: fmt.Sprintf("evt_%06d", ev), EventType: typ, Created: reconcile.StampOf(created)})
	}
	for _, c := range sc.Charges {
		p := reconcile.ProviderObject{ID: c.ID, Kind: reconcile.Charge, Money: reconcile.Money{Amount: c.Amount, Currency: c.Currency},
			Status: status(c.Status), RawStatus: cmpOr(c.Status, "succeeded"), AmountRefunded: c.AmountRefunded,
			PaymentIntent: c.PaymentIntent, Metadata: c.Metadata, Created: reconcile.StampOf(ago(c.CreatedAgo))}
		in.Objects = append(in.Objects, p)
		key(c.ID, c.IdempotencyKey, "charge."+p.RawStatus, p.Created.Time())
	}
	for _, pi := range sc.PaymentIntents {
		p := reconcile.ProviderObject{ID: pi.ID, Kind: reconcile.PaymentIntent, Money: reconcile.Money{Amount: pi.Amount, Currency: pi.Currency},
			Status: status(pi.Status), RawStatus: pi.Status, Metadata: pi.Metadata, Created: reconcile.StampOf(ago(pi.CreatedAgo))}
		for _, c := range sc.Charges {
			if c.PaymentIntent == pi.ID {
				p.Charge = c.ID
			}
		}
		in.Objects = append(in.Objects, p)
		key(pi.ID, pi.IdempotencyKey, "payment_intent.created", p.Created.Time())
		if p.Status == reconcile.Succeeded {
			key(pi.ID, pi.IdempotencyKey, "payment_intent.succeeded", p.Created.Time())
		}
	}
	for _, r := range sc.Refunds {
		p := reconcile.ProviderObject{ID: r.ID, Kind: reconcile.Refund, Money: reconcile.Money{Amount: r.Amount, Currency: r.Currency},
			Status: status(r.Status), RawStatus: cmpOr(r.Status, "succeeded"), Target: cmpOr(r.Charge, r.PaymentIntent), Charge: r.Charge,
			PaymentIntent: r.PaymentIntent, Metadata: r.Metadata, Created: reconcile.StampOf(ago(r.CreatedAgo))}
		in.Objects = append(in.Objects, p)
		key(r.ID, r.IdempotencyKey, "refund.created", p.Created.Time())
		if p.Status == reconcile.Succeeded && slices.ContainsFunc(sc.Charges, func(c scenObj) bool { return c.ID == r.Charge }) {
			// The charge.refunded event is about the charge but carries
			// the refund request's key.
			key(r.Charge, r.IdempotencyKey, "charge.refunded", p.Created.Time())
		}
	}
	return in
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// check applies the acceptance harness's rules to a result: exactly the
// expected findings above info (kind, obligation, included provider ids),
// and the expected obligation states once the transitions are applied.
func (sc *scenario) check(tb testing.TB, in Input, res Result) {
	tb.Helper()
	used := make([]bool, len(res.Findings))
	for _, w := range sc.Expect.Findings {
		found := false
		for i, f := range res.Findings {
			if used[i] || string(f.Kind) != w.Kind || w.ObligationID != "" && f.ObligationID != w.ObligationID {
				continue
			}
			if !includesAll(f.ProviderIDs, w.ProviderIDsInclude) {
				continue
			}
			used[i], found = true, true
			break
		}
		if !found {
			tb.Errorf("%s: no %s finding for %q with %v in %+v", sc.Name, w.Kind, w.ObligationID, w.ProviderIDsInclude, res.Findings)
		}
	}
	for i, f := range res.Findings {
		if !used[i] && f.Severity.Rank() > reconcile.Info.Rank() && !slices.Contains(sc.Expect.AllowKinds, string(f.Kind)) {
			tb.Errorf("%s: unexpected %s %s finding for %q: %s", sc.Name, f.Severity, f.Kind, f.ObligationID, f.Detail)
		}
	}
	states := map[string]string{}
	for _, o := range in.Obligations {
		states[o.ID] = string(o.State)
	}
	for _, t := range res.Transitions {
		if states[t.ObligationID] != string(t.From) {
			tb.Errorf("%s: transition of %s from %s, but it is %s", sc.Name, t.ObligationID, t.From, states[t.ObligationID])
		}
		states[t.ObligationID] = string(t.To)
	}
	for id, want := range sc.Expect.States {
		if states[id] != want {
			tb.Errorf("%s: state of %s = %s, want %s", sc.Name, id, states[id], want)
		}
	}
}

func includesAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// TestAcceptanceScenarios runs the acceptance harness's scenarios through
// the matcher, checks their expectations, and compares the whole result
// with testdata/acceptance/*.golden (-update rewrites those).
func TestAcceptanceScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "acceptance", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found %d acceptance scenarios, want the five acceptance scenarios", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var sc scenario
			if err := json.Unmarshal(raw, &sc); err != nil {
				t.Fatalf("decode %s: %v", file, err)
			}
			in := sc.input(t, goldenNow)
			res := Match(in, goldenNow, OptionsFrom(config.Default().Matcher))
			checkInvariants(t, in, goldenNow, OptionsFrom(config.Default().Matcher), res)
			sc.check(t, in, res)
			golden := strings.TrimSuffix(file, ".json") + ".golden"
			got := marshal(t, summarise(res))
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (run with -update to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Match(%s) differs from %s (-update rewrites it):\n got: %s\nwant: %s", name, golden, got, want)
			}
		})
	}
}

// cleanMix is the acceptance suite's generator of n settled obligations in
// the shapes a real Stripe integration produces (ids, intents, metadata,
// keys only, partial refunds, two equal refunds of one charge,
// zero-decimal money), none of which is a finding. Ported verbatim.
func cleanMix(sc *scenario, n int) {
	cur := []string{"usd", "eur", "gbp", "jpy", "chf"}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("mix:%06d", i)
		c := cur[i%len(cur)]
		amt := int64(500 + (i*7919)%250000)
		ago := fmt.Sprintf("%dm", 30+(i*37)%34000) // spread over about 24 days
		ch := fmt.Sprintf("ch_mix%06d", i)
		paid := scenObl{ID: "charge:" + id, Kind: "charge", IdempotencyKey: "k-" + id, Amount: amt, Currency: c, State: "PAID", CreatedAgo: ago}
		switch i % 5 {
		case 0: // provider id stored; key in events
			paid.ProviderID = ch
			sc.Charges = append(sc.Charges, scenObj{ID: ch, Amount: amt, Currency: c, CreatedAgo: ago, IdempotencyKey: "k-" + id})
		case 1: // payment intent stored; its charge carries an automatic key
			pi := fmt.Sprintf("pi_mix%06d", i)
			paid.ProviderID = pi
			sc.PaymentIntents = append(sc.PaymentIntents, scenObj{ID: pi, Amount: amt, Currency: c, Status: "succeeded", CreatedAgo: ago, IdempotencyKey: "k-" + id})
			sc.Charges = append(sc.Charges, scenObj{ID: ch, Amount: amt, Currency: c, CreatedAgo: ago, PaymentIntent: pi})
		case 2: // no provider id: metadata names the obligation
			sc.Charges = append(sc.Charges, scenObj{ID: ch, Amount: amt, Currency: c, CreatedAgo: ago, Metadata: map[string]string{"obligation_id": paid.ID, "order": id}})
		case 3: // a charge, then a partial refund of it with its own obligation
			paid.ProviderID = ch
			ref := amt * 3 / 10
			if ref == 0 {
				ref = 1
			}
			sc.Charges = append(sc.Charges, scenObj{ID: ch, Amount: amt, Currency: c, CreatedAgo: ago, IdempotencyKey: "k-" + id, AmountRefunded: ref})
			re := fmt.Sprintf("re_mix%06d", i)
			sc.Obligations = append(sc.Obligations, scenObl{ID: "refund:" + id, Kind: "refund", IdempotencyKey: "rk-" + id,
				ProviderID: re, TargetID: ch, Amount: ref, Currency: c, State: "PAID", CreatedAgo: "20m"})
			sc.Refunds = append(sc.Refunds, scenObj{ID: re, Charge: ch, Amount: ref, Currency: c, CreatedAgo: "20m", IdempotencyKey: "rk-" + id})
			if i%50 == 3 { // a second, equal, legitimate refund of the same charge minutes later
				re2 := re + "b"
				sc.Obligations = append(sc.Obligations, scenObl{ID: "refund:" + id + ":b", Kind: "refund", IdempotencyKey: "rk-" + id + "-b",
					ProviderID: re2, TargetID: ch, Amount: ref, Currency: c, State: "PAID", CreatedAgo: "15m"})
				sc.Refunds = append(sc.Refunds, scenObj{ID: re2, Charge: ch, Amount: ref, Currency: c, CreatedAgo: "15m", IdempotencyKey: "rk-" + id + "-b"})
				sc.Charges[len(sc.Charges)-1].AmountRefunded = 2 * ref
			}
		case 4: // no provider id, no metadata: the idempotency key alone links it
			sc.Charges = append(sc.Charges, scenObj{ID: ch, Amount: amt, Currency: c, CreatedAgo: ago, IdempotencyKey: "k-" + id})
		}
		sc.Obligations = append(sc.Obligations, paid)
	}
}

// TestCleanMix: the legitimate shapes of the acceptance harness produce no
// finding and no transition, and every object links.
func TestCleanMix(t *testing.T) {
	sc := scenario{Name: "clean-mix"}
	cleanMix(&sc, 2000)
	in := sc.input(t, goldenNow)
	opts := OptionsFrom(config.Default().Matcher)
	opts.ReportUnverified = true // not even an info finding
	res := Match(in, goldenNow, opts)
	for _, f := range res.Findings {
		t.Errorf("clean mix: %s %s finding for %q: %s", f.Severity, f.Kind, f.ObligationID, f.Detail)
	}
	if len(res.Transitions) != 0 {
		t.Errorf("clean mix: %d transitions, want none (everything is PAID)", len(res.Transitions))
	}
	if res.Counts.Linked != res.Counts.ProviderObjects || res.Counts.Obligations != len(in.Obligations) {
		t.Errorf("clean mix: counts %+v, want every one of %d objects linked and %d obligations", res.Counts, len(in.Objects), len(in.Obligations))
	}
	// The same shapes, unsettled: every CONFIRMATION_UNKNOWN obligation is
	// marked PAID, nothing else changes.
	for i := range in.Obligations {
		in.Obligations[i].State, in.Obligations[i].RawState = reconcile.ConfirmationUnknown, "CONFIRMATION_UNKNOWN"
	}
	res = Match(in, goldenNow, opts)
	for _, f := range res.Findings {
		t.Errorf("clean mix, unknown: %s %s finding for %q: %s", f.Severity, f.Kind, f.ObligationID, f.Detail)
	}
	if len(res.Transitions) != len(in.Obligations) {
		t.Errorf("clean mix, unknown: %d transitions, want %d", len(res.Transitions), len(in.Obligations))
	}
	for _, tr := range res.Transitions {
		if tr.ProviderID == "" || tr.To != reconcile.Paid {
			t.Errorf("clean mix, unknown: transition %+v", tr)
		}
		if strings.Contains(tr.ObligationID, "mix:000001") && tr.ProviderID != "pi_mix000001" {
			t.Errorf("transition of %s has evidence %s, want the intent it names", tr.ObligationID, tr.ProviderID)
		}
	}
}
