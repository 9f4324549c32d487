package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/config"
)

// leaseTerm is how long a worker's claim on an obligation lasts.
const leaseTerm = 5 * time.Minute

// idempotencyTTL is how long Stripe replays the answer to a repeated
// idempotency key; after it a request with the same key creates anew.
const idempotencyTTL = 24 * time.Hour

// weighted picks an index by weight.
func (w *world) weighted(weights ...int) int {
	total := 0
	for _, x := range weights {
		total += x
	}
	n := w.rng.IntN(total)
	for i, x := range weights {
		if n < x {
			return i
		}
		n -= x
	}
	return len(weights) - 1
}

func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

// history runs the seed's actions, then lets everything settle.
func (w *world) history() error {
	if err := w.seedWorld(); err != nil {
		return err
	}
	// Swarm testing: each history leans on some actions and leaves others
	// out, so that rare sequences (a refund settling between two passes,
	// retries piling up on one obligation) are common in some histories.
	weights := []int{18, 18, 10, 8, 4, 6, 2, 4, 16, 16}
	for i := range weights {
		switch f := w.rng.IntN(10); {
		case i == 0 || i == 1 || i == 9: // new, execute and reconcile always happen
			if f >= 7 {
				weights[i] *= 3
			}
		case f < 2:
			weights[i] = 0
		case f >= 7:
			weights[i] *= 3
		}
	}
	steps := 6 + w.rng.IntN(15)
	for range steps {
		w.rep.Steps++
		var err error
		switch w.weighted(weights...) {
		case 0:
			err = w.newObligation()
		case 1:
			err = w.execute()
		case 2:
			err = w.retry()
		case 3:
			err = w.settlePending()
		case 4:
			err = w.approve()
		case 5:
			err = w.review()
		case 6:
			err = w.requeue()
		case 7:
			err = w.manualMovement()
		case 8:
			w.advance()
		case 9:
			err = w.reconcile()
		}
		if err != nil {
			return err
		}
	}
	return w.quiesce()
}

// seedWorld creates the paid charges that refunds can later target, and
// in some histories a bulk of them, so that lists span several pages.
func (w *world) seedWorld() error {
	n, orphans := 2+w.rng.IntN(2), 0
	if w.chance(0.06) {
		// Deep lists: money moved outside the workflow hides on every
		// page, where a reader that stopped early would miss it.
		n += 105 + w.rng.IntN(10)
		orphans = 3 + w.rng.IntN(3)
	}
	for range orphans {
		c := currencies[w.rng.IntN(len(currencies))]
		x := &object{ID: w.led.newObjectID(reconcile.Charge), Kind: reconcile.Charge, Status: reconcile.Succeeded,
			Money:    reconcile.Money{Amount: c.min + w.rng.Int64N(c.max-c.min), Currency: c.code},
			Customer: fmt.Sprintf("cus_old%02d", w.rng.IntN(20)), Meta: map[string]string{"note": "imported"}}
		if err := w.createAt(x, epoch.Add(-time.Duration(1+w.rng.IntN(7200))*time.Second)); err != nil {
			return err
		}
	}
	for range n {
		at := epoch.Add(-time.Duration(1+w.rng.IntN(7200)) * time.Second)
		o := w.newCharge(at)
		o.State = reconcile.Paid
		x := &object{ID: w.led.newObjectID(reconcile.Charge), Kind: reconcile.Charge, Money: o.Money,
			Status: reconcile.Succeeded, For: o.ID, Key: o.Key, Meta: w.metadata(o, o.Key), Customer: o.Customer}
		if err := w.createAt(x, at); err != nil {
			return err
		}
		o.ProviderID, o.Paid, o.Updated = x.ID, at, at
		if err := w.insert(w.ctx, o); err != nil {
			return err
		}
	}
	// What earlier days left behind: obligations in each unsettled state.
	for _, st := range []reconcile.State{reconcile.RequiresReview, reconcile.Executing, reconcile.FailedState, reconcile.ConfirmationUnknown} {
		if !w.chance(0.5) {
			continue
		}
		at := epoch.Add(-time.Duration(1+w.rng.IntN(3600)) * time.Second)
		o := w.newCharge(at)
		o.State = st
		switch st {
		case reconcile.Executing:
			o.LeaseOwner, o.LeaseExp = "worker-0", epoch.Add(time.Duration(w.rng.IntN(600))*time.Second)
		case reconcile.FailedState:
			x := &object{ID: w.led.newObjectID(reconcile.Charge), Kind: reconcile.Charge, Money: o.Money,
				Status: reconcile.Failed, For: o.ID, Key: o.Key, Meta: w.metadata(o, o.Key), Customer: o.Customer}
			if err := w.createAt(x, at); err != nil {
				return err
			}
			o.ProviderID = x.ID
		}
		if err := w.insert(w.ctx, o); err != nil {
			return err
		}
		w.tracef("seed: %s %s", o.ID, st)
	}
	w.tracef("seed: %d paid charges", n)
	return nil
}

var currencies = []struct {
	code     string
	min, max int64
}{
	{"usd", 100, 20000}, {"usd", 500, 9000}, {"eur", 100, 15000}, {"jpy", 100, 50000}, {"kwd", 1000, 90000},
}

func (w *world) newCharge(at time.Time) *obligation {
	w.led.nextObl++
	c := currencies[w.rng.IntN(len(currencies))]
	return &obligation{
		ID:       fmt.Sprintf("charge:%04d:inv-%d", w.led.nextObl, 7000+w.rng.IntN(1000)),
		Kind:     reconcile.Charge,
		Key:      w.led.newKey(),
		Money:    reconcile.Money{Amount: c.min + w.rng.Int64N(c.max-c.min), Currency: c.code},
		Customer: fmt.Sprintf("cus_sim%02d", w.rng.IntN(4)),
		Meta:     metaStyle(w.weighted(50, 20, 30)),
		State:    reconcile.Approved,
		Created:  at,
		Updated:  at,
	}
}

// refundable lists the succeeded charges that a refund may target.
func (w *world) refundable() []*object {
	var out []*object
	for _, id := range w.led.objIDs {
		if x := w.led.objs[id]; x.Kind == reconcile.Charge && x.Status == reconcile.Succeeded && x.For != "" {
			out = append(out, x)
		}
	}
	return out
}

// newObligation: the application approves (or asks approval of) a payment
// or a refund.
func (w *world) newObligation() error {
	now := w.clock.Now()
	var o *obligation
	if charges := w.refundable(); len(charges) > 0 && w.chance(0.45) {
		ch := charges[w.rng.IntN(len(charges))]
		w.led.nextObl++
		amount := ch.Money.Amount
		if w.chance(0.4) {
			amount = 1 + w.rng.Int64N(amount)
		}
		o = &obligation{
			ID:     fmt.Sprintf("refund:%04d:req-%d", w.led.nextObl, 1+w.rng.IntN(9)),
			Kind:   reconcile.Refund,
			Key:    w.led.newKey(),
			Money:  reconcile.Money{Amount: amount, Currency: ch.Money.Currency},
			Target: ch.ID,
			Meta:   metaStyle(w.weighted(50, 20, 30)),
			State:  reconcile.Approved, Created: now, Updated: now,
		}
	} else {
		o = w.newCharge(now)
	}
	if w.chance(0.25) {
		o.State = reconcile.PendingApproval
	}
	if w.chance(0.06) {
		// Applications put personal data into business ids: Slack and
		// the logs must not repeat it.
		prefix, _, _ := strings.Cut(o.ID, ":")
		o.ID = fmt.Sprintf("%s:%04d:%s", prefix, w.led.nextObl, []string{canaryEmail, canaryPAN}[w.rng.IntN(2)])
	}
	w.tracef("new %s %s %s %s", o.ID, o.Money, o.State, o.Key)
	return w.insert(w.ctx, o)
}

func (w *world) approve() error {
	obs := w.led.byState(reconcile.PendingApproval)
	if len(obs) == 0 {
		return w.newObligation()
	}
	o := obs[w.rng.IntN(len(obs))]
	o.State = reconcile.Approved
	w.tracef("approve %s", o.ID)
	return w.save(w.ctx, o)
}

// metadata is what the integration writes on a provider object.
func (w *world) metadata(o *obligation, key string) map[string]string {
	m := map[string]string{}
	switch o.Meta {
	case metaFull:
		m["obligation_id"], m["idempotency_key"] = o.ID, key
	case metaIDOnly:
		m["obligation_id"] = o.ID
	}
	if w.chance(0.2) {
		// Integrations put what they should not into metadata.
		m["note"] = "customer " + canaryEmail + " paid with card " + canaryPAN
	}
	return m
}

// outcome is what became of one call to the provider, as the worker saw it.
type outcome int

const (
	outOK           outcome = iota // the answer arrived
	outDeclined                    // the provider refused: a failed object
	outLostResponse                // the provider acted, the answer was lost
	outLostRequest                 // the request never arrived
	outCrashBefore                 // the worker died before sending
	outCrashAfter                  // the worker died after the provider acted
	outWrongAmount                 // bug: the request carried another amount
	outPaidNoCall                  // bug: marked paid without any call
	outFailedGuess                 // bug: lost answer taken for a failure
)

var outcomeNames = [...]string{"ok", "declined", "lost-response", "lost-request", "crash-before",
	"crash-after", "bug-wrong-amount", "bug-paid-without-call", "bug-failed-guess"}

// execute: a worker claims an approved obligation and calls the provider.
func (w *world) execute() error {
	obs := w.led.byState(reconcile.Approved)
	if len(obs) == 0 {
		return w.newObligation()
	}
	o := obs[w.rng.IntN(len(obs))]
	out := outcome(w.weighted(45, 8, 15, 6, 6, 8, 3, 3, 3))
	return w.attempt(o, o.Key, out)
}

// retry: a worker picks up an obligation whose outcome is unknown or whose
// worker died, and calls again: with the same key (Stripe replays the first
// answer for 24 hours) or, wrongly, with a fresh one.
func (w *world) retry() error {
	cands := w.stuck()
	if len(cands) == 0 {
		return w.execute()
	}
	o := cands[w.rng.IntN(len(cands))]
	key := o.Key
	if w.chance(0.4) {
		key = w.led.newKey()
	}
	out := outcome(w.weighted(55, 6, 18, 5, 4, 6, 0, 0, 2))
	return w.attempt(o, key, out)
}

// attempt claims o and calls the provider with key.
func (w *world) attempt(o *obligation, key string, out outcome) error {
	now := w.clock.Now()
	w.led.nextKey++ // worker names are cheap and distinct
	o.State, o.LeaseOwner, o.LeaseExp = reconcile.Executing, fmt.Sprintf("worker-%d", w.led.nextKey), now.Add(leaseTerm)
	if err := w.save(w.ctx, o); err != nil {
		return err
	}
	// The provider's side: a request that arrives creates an object, or
	// replays the one its key created within the last 24 hours.
	var x *object
	if out != outCrashBefore && out != outLostRequest && out != outPaidNoCall {
		x = w.replay(o, key)
		if x == nil {
			st := reconcile.Succeeded
			switch {
			case out == outDeclined:
				st = reconcile.Failed
			case o.Kind == reconcile.Refund && out == outOK && w.chance(0.45):
				st = reconcile.Pending
			case out == outLostResponse || out == outCrashAfter:
				st = []reconcile.Status{reconcile.Succeeded, reconcile.Succeeded, reconcile.Succeeded,
					reconcile.Succeeded, reconcile.Failed, reconcile.Pending}[w.rng.IntN(6)]
				if st == reconcile.Pending && o.Kind == reconcile.Charge {
					st = reconcile.Succeeded
				}
			}
			money := o.Money
			if out == outWrongAmount {
				money.Amount += 1 + w.rng.Int64N(500)
			}
			x = &object{ID: w.led.newObjectID(o.Kind), Kind: o.Kind, Money: money, Status: st, For: o.ID, Key: key,
				Meta: w.metadata(o, key), Target: o.Target, Customer: o.Customer}
			if err := w.create(x); err != nil {
				return err
			}
		}
	}
	// The worker's side: what it learnt, and what it writes.
	desc := fmt.Sprintf("call %s key=%s %s", o.ID, key, outcomeNames[out])
	if x != nil {
		desc += fmt.Sprintf(" → %s %s %s", x.ID, x.Money, x.Status)
	}
	w.tracef("%s", desc)
	release := func() { o.LeaseOwner, o.LeaseExp = "", time.Time{} }
	switch out {
	case outOK, outDeclined, outWrongAmount:
		release()
		o.ProviderID = x.ID
		switch x.Status {
		case reconcile.Succeeded:
			o.State, o.Paid = reconcile.Paid, now
		case reconcile.Failed:
			o.State = reconcile.FailedState
		default:
			// Pending: the answer names the object; its outcome comes later.
			o.State = reconcile.ConfirmationUnknown
		}
	case outLostResponse, outLostRequest:
		release()
		o.State = reconcile.ConfirmationUnknown
	case outCrashBefore, outCrashAfter:
		return nil // the lease stays until it expires
	case outPaidNoCall:
		release()
		o.State, o.Paid = reconcile.Paid, now
		if w.chance(0.5) {
			w.led.nextObj++
			o.ProviderID = fmt.Sprintf("%s_ghost%06d", map[reconcile.ObjectKind]string{reconcile.Charge: "ch", reconcile.Refund: "re"}[o.Kind], w.led.nextObj)
		}
	case outFailedGuess:
		release()
		o.State = reconcile.FailedState
	}
	return w.save(w.ctx, o)
}

// lostAnswer: a worker's call moves money and loses the answer, so that
// the next pass has an obligation to mark PAID.
func (w *world) lostAnswer() error {
	obs := w.led.byState(reconcile.Approved)
	if len(obs) == 0 {
		if err := w.newObligation(); err != nil {
			return err
		}
		if obs = w.led.byState(reconcile.Approved); len(obs) == 0 {
			return nil
		}
	}
	o := obs[w.rng.IntN(len(obs))]
	return w.attempt(o, o.Key, outLostResponse)
}

// copiedAnswer: now and then, before a reconciler step, the workflow
// records as an unknown outcome's answer the id of a charge another
// obligation collected, created before it (an id copied from the wrong
// payment). The charge is then claimed twice, a conflict, and a pass
// whose window leaves out the charge and its owner must still see it:
// retrieved by id, it links to both. Drawn from a generator of its own,
// so that histories without it replay as before.
func (w *world) copiedAnswer() error {
	if w.crng == nil {
		w.crng = rand.New(rand.NewPCG(w.seed, 0xc0b1))
	}
	if w.crng.IntN(8) != 0 {
		return nil
	}
	var unknown []*obligation
	for _, o := range w.led.byState(reconcile.ConfirmationUnknown) {
		if o.Kind == reconcile.Charge && o.ProviderID == "" {
			unknown = append(unknown, o)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	o := unknown[w.crng.IntN(len(unknown))]
	var charges []*object
	for _, x := range w.refundable() {
		if x.For != o.ID && x.Created.Before(o.Created) && x.Money == o.Money {
			charges = append(charges, x)
		}
	}
	if len(charges) == 0 {
		// Of other money too: a conflict whatever the amount.
		for _, x := range w.refundable() {
			if x.For != o.ID && x.Created.Before(o.Created) {
				charges = append(charges, x)
			}
		}
	}
	if len(charges) == 0 {
		return nil
	}
	x := charges[w.crng.IntN(len(charges))]
	o.ProviderID = x.ID
	w.tracef("copied answer: %s names %s, %s's charge", o.ID, x.ID, x.For)
	return w.save(w.ctx, o)
}

// refundOfOpen: now and then, before a reconciler step, finance approves
// a refund of the oldest succeeded charge an open finding is about, its
// obligation's or its own (a duplicate given back, money moved outside
// the workflow returned). Once the charge is older than what a pass
// covers, the pass retrieves it by the refund's target, with every
// obligation that names it: the open finding must stand or go as a pass
// over the whole history decides. Days pass before it, so that the charge
// is that old. Drawn from a generator of its own, so that histories
// without it replay as before.
func (w *world) refundOfOpen() error {
	if w.orng == nil {
		w.orng = rand.New(rand.NewPCG(w.seed, 0x0bef))
	}
	if w.refundsOfOpen == 2 || w.orng.IntN(2) != 0 {
		return nil
	}
	rows, err := w.env.Pool.Query(w.ctx, `SELECT coalesce(obligation_id, ''), provider_ids
		FROM reconcile.findings WHERE status = 'open'`)
	if err != nil {
		return fmt.Errorf("read open findings: %w", err)
	}
	open := map[string]bool{}
	var (
		obl  string
		objs []string
	)
	if _, err := pgx.ForEachRow(rows, []any{&obl, &objs}, func() error {
		if obl != "" {
			open[obl] = true
		}
		for _, id := range objs {
			open[id] = true
		}
		return nil
	}); err != nil {
		return fmt.Errorf("read open findings: %w", err)
	}
	var ch *object
	for _, id := range w.led.objIDs {
		x := w.led.objs[id]
		if x.Kind != reconcile.Charge || x.Status != reconcile.Succeeded || !open[x.ID] && !open[x.For] {
			continue
		}
		if ch == nil || x.Created.Before(ch.Created) {
			ch = x
		}
	}
	if ch == nil {
		return nil
	}
	// Days pass first, unless they have: the charge leaves the window
	// and, in half the histories whose max_lookback is short, what any
	// pass covers.
	age := lookback + time.Duration(1+w.orng.IntN(48*3600))*time.Second
	if w.maxLookback < config.Default().MaxLookback && w.orng.IntN(2) == 0 {
		age = w.maxLookback + time.Duration(1+w.orng.IntN(24*3600))*time.Second
	}
	if d := ch.Created.Add(age).Sub(w.clock.Now()); d > 0 {
		w.clock.Advance(d)
		w.tracef("advance %s", d)
	}
	now := w.clock.Now()
	w.led.nextObl++
	amount := ch.Money.Amount
	if w.orng.IntN(3) == 0 {
		amount = 1 + w.orng.Int64N(amount)
	}
	o := &obligation{
		ID:     fmt.Sprintf("refund:%04d:req-%d", w.led.nextObl, 1+w.orng.IntN(9)),
		Kind:   reconcile.Refund,
		Key:    w.led.newKey(),
		Money:  reconcile.Money{Amount: amount, Currency: ch.Money.Currency},
		Target: ch.ID,
		Meta:   metaStyle(w.orng.IntN(3)),
		State:  reconcile.Approved, Created: now, Updated: now,
	}
	w.refundsOfOpen++
	w.tracef("refund of open: %s refunds %s (%s's, created %s)", o.ID, ch.ID, ch.For, ch.Created.Format(time.RFC3339))
	switch old := now.Sub(ch.Created); {
	case old > w.maxLookback:
		w.stat("refund of an open finding's charge, past max_lookback")
	case old > lookback:
		w.stat("refund of an open finding's charge, before the window")
	default:
		w.stat("refund of an open finding's charge, in the window")
	}
	return w.insert(w.ctx, o)
}

// replay is the object that key created for o within Stripe's idempotency
// window, which a repeated request gets back instead of a new one.
func (w *world) replay(o *obligation, key string) *object {
	now := w.clock.Now()
	for _, x := range slices.Backward(w.led.objectsFor(o.ID)) {
		if x.Key == key && now.Sub(x.Created) < idempotencyTTL {
			return x
		}
	}
	return nil
}

// settlePending: the provider settles a pending refund; sometimes the
// application's webhook handler records the outcome too.
func (w *world) settlePending() error {
	var pending []*object
	for _, id := range w.led.objIDs {
		if x := w.led.objs[id]; x.Status == reconcile.Pending {
			pending = append(pending, x)
		}
	}
	if len(pending) == 0 {
		return w.execute()
	}
	x := pending[w.rng.IntN(len(pending))]
	st := reconcile.Succeeded
	if w.chance(0.3) {
		st = reconcile.Failed
	}
	if err := w.finalize(x, st); err != nil {
		return err
	}
	w.tracef("settle %s %s", x.ID, st)
	o := w.led.obls[x.For]
	if o == nil || o.State != reconcile.ConfirmationUnknown || o.ProviderID != x.ID || !w.chance(0.5) {
		return nil
	}
	if st == reconcile.Succeeded {
		o.State, o.Paid = reconcile.Paid, w.clock.Now()
	} else {
		o.State = reconcile.FailedState
	}
	w.tracef("webhook %s %s", o.ID, o.State)
	return w.save(w.ctx, o)
}

// stuck lists obligations nobody is working on that await an outcome.
func (w *world) stuck() []*obligation {
	now := w.clock.Now()
	var out []*obligation
	for _, o := range w.led.byState(reconcile.ConfirmationUnknown, reconcile.Executing) {
		if o.State == reconcile.ConfirmationUnknown || !o.LeaseExp.After(now) {
			out = append(out, o)
		}
	}
	return out
}

// review: a person takes a stuck obligation aside for review.
func (w *world) review() error {
	obs := w.stuck()
	if len(obs) == 0 {
		return w.newObligation()
	}
	o := obs[w.rng.IntN(len(obs))]
	o.State, o.LeaseOwner, o.LeaseExp = reconcile.RequiresReview, "", time.Time{}
	w.tracef("review %s", o.ID)
	return w.save(w.ctx, o)
}

// requeue: an operator sends a stalled obligation back to be executed
// again, whether or not money moved (the reconciler must say so).
func (w *world) requeue() error {
	var obs []*obligation
	for _, o := range w.stuck() {
		if o.State == reconcile.Executing {
			obs = append(obs, o)
		}
	}
	if len(obs) == 0 {
		return w.review()
	}
	o := obs[w.rng.IntN(len(obs))]
	o.State, o.LeaseOwner, o.LeaseExp = reconcile.Approved, "", time.Time{}
	w.tracef("requeue %s", o.ID)
	return w.save(w.ctx, o)
}

// manualMovement: someone moves money in the dashboard, outside the
// workflow: a refund of a customer's charge, or a charge of a customer,
// often of an amount some obligation also moved.
func (w *world) manualMovement() error {
	charges := w.refundable()
	x := &object{Meta: map[string]string{"note": "manual, see ticket; card " + canaryPANSpaced}}
	if w.chance(0.3) {
		// A support tool that writes a card number where an id belongs.
		x.Meta["obligation_id"] = canaryPAN
	}
	if w.chance(0.5) && len(charges) > 0 {
		ch := charges[w.rng.IntN(len(charges))]
		x.Kind, x.Target, x.Money = reconcile.Refund, ch.ID, ch.Money
		for _, id := range w.led.objIDs {
			if r := w.led.objs[id]; r.Kind == reconcile.Refund && r.Target == ch.ID && w.chance(0.7) {
				x.Money = r.Money
			}
		}
	} else {
		x.Kind = reconcile.Charge
		x.Customer = fmt.Sprintf("cus_sim%02d", w.rng.IntN(4))
		c := currencies[w.rng.IntN(len(currencies))]
		x.Money = reconcile.Money{Amount: c.min + w.rng.Int64N(c.max-c.min), Currency: c.code}
		for _, id := range w.led.oblIDs {
			if o := w.led.obls[id]; o.Kind == reconcile.Charge && o.Customer == x.Customer && w.chance(0.6) {
				x.Money = o.Money
			}
		}
	}
	x.ID, x.Status = w.led.newObjectID(x.Kind), reconcile.Succeeded
	if err := w.create(x); err != nil {
		return err
	}
	w.tracef("manual %s %s %s", x.Kind, x.ID, x.Money)
	return nil
}

// advance lets time pass: seconds, minutes, hours, sometimes days (past
// leases, the 24-hour repeat and idempotency windows, the 72-hour grace).
func (w *world) advance() {
	var d time.Duration
	switch w.weighted(25, 30, 25, 15, 5) {
	case 0:
		d = time.Duration(1+w.rng.IntN(59)) * time.Second
	case 1:
		d = time.Duration(60+w.rng.IntN(540)) * time.Second
	case 2:
		d = time.Duration(600+w.rng.IntN(3*3600)) * time.Second
	case 3:
		d = time.Duration(3*3600+w.rng.IntN(27*3600)) * time.Second
	default:
		d = time.Duration(48*3600+w.rng.IntN(48*3600)) * time.Second
	}
	w.clock.Advance(d)
	w.tracef("advance %s", d)
}
