package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"reconcile"
)

// metaStyle is what an integration writes into the metadata of the
// provider objects it creates.
type metaStyle int

const (
	metaFull   metaStyle = iota // obligation_id and idempotency_key
	metaIDOnly                  // obligation_id only
	metaNone                    // nothing: only the key (from events) or provider_id can link
)

// obligation is the truth about one row of the obligations table: what the
// payment worker (and people) wrote, and, once verified by the oracle, what
// the reconciler wrote.
type obligation struct {
	ID       string
	Kind     reconcile.ObjectKind
	Key      string
	Money    reconcile.Money
	Target   string // refunds: the charge refunded
	Customer string // charges: the customer charged
	Meta     metaStyle

	State      reconcile.State
	ProviderID string
	LeaseOwner string
	LeaseExp   time.Time
	Created    time.Time
	Updated    time.Time
	Paid       time.Time
}

// object is the truth about one provider object: what the provider did,
// for which obligation the request was made (empty for money moved outside
// the workflow), and with which idempotency key.
type object struct {
	ID       string
	Kind     reconcile.ObjectKind
	Money    reconcile.Money
	Status   reconcile.Status
	Created  time.Time
	For      string // the obligation the request was made for; "" for none
	Key      string // the idempotency key of the creating request
	Meta     map[string]string
	Target   string // refunds: the charge
	Customer string // charges
}

func (o *object) provider() reconcile.ProviderObject {
	p := reconcile.ProviderObject{
		ID: o.ID, Kind: o.Kind, Money: o.Money, Status: o.Status, Created: reconcile.StampOf(o.Created),
		Customer: o.Customer, Metadata: maps.Clone(o.Meta),
	}
	if o.Kind == reconcile.Refund {
		p.Target, p.Charge = o.Target, o.Target
	}
	return p
}

// ledger is the truth of one history.
type ledger struct {
	obls    map[string]*obligation
	oblIDs  []string // in creation order
	objs    map[string]*object
	objIDs  []string // in creation order
	nextObl int
	nextObj int
	nextKey int
}

func newLedger() *ledger {
	return &ledger{obls: map[string]*obligation{}, objs: map[string]*object{}}
}

// byState lists the obligations in state s, in creation order.
func (l *ledger) byState(states ...reconcile.State) []*obligation {
	var out []*obligation
	for _, id := range l.oblIDs {
		if o := l.obls[id]; slices.Contains(states, o.State) {
			out = append(out, o)
		}
	}
	return out
}

// objectsFor lists the objects created for obligation id, in creation
// order.
// start is when the history's first record was created (epoch if none).
func (l *ledger) start() time.Time {
	t := epoch
	for _, o := range l.obls {
		if o.Created.Before(t) {
			t = o.Created
		}
	}
	for _, x := range l.objs {
		if x.Created.Before(t) {
			t = x.Created
		}
	}
	return t
}

func (l *ledger) objectsFor(id string) []*object {
	var out []*object
	for _, oid := range l.objIDs {
		if o := l.objs[oid]; o.For == id {
			out = append(out, o)
		}
	}
	return out
}

// clone copies the ledger, for the oracle's view of a pass's start.
func (l *ledger) clone() *ledger {
	c := &ledger{obls: make(map[string]*obligation, len(l.obls)), objs: make(map[string]*object, len(l.objs)),
		oblIDs: slices.Clone(l.oblIDs), objIDs: slices.Clone(l.objIDs)}
	for id, o := range l.obls {
		cp := *o
		c.obls[id] = &cp
	}
	for id, o := range l.objs {
		cp := *o
		cp.Meta = maps.Clone(o.Meta)
		c.objs[id] = &cp
	}
	return c
}

// insert writes a new obligation to the table.
func (w *world) insert(ctx context.Context, o *obligation) error {
	_, err := w.env.Pool.Exec(ctx, `INSERT INTO obligations (id, kind, idempotency_key, provider, provider_id, target_id,
		amount, currency, state, lease_owner, lease_expires_at, created_at, updated_at, paid_at)
		VALUES ($1, $2, $3, 'stripe', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		o.ID, string(o.Kind), o.Key, nullString(o.ProviderID), nullString(o.Target), o.Money.Amount, o.Money.Currency,
		string(o.State), nullString(o.LeaseOwner), nullTime(o.LeaseExp), o.Created, o.Updated, nullTime(o.Paid))
	if err != nil {
		return fmt.Errorf("insert obligation %s: %w", o.ID, err)
	}
	w.led.obls[o.ID] = o
	w.led.oblIDs = append(w.led.oblIDs, o.ID)
	return nil
}

// save writes what the worker (or a person) changed on o, as the
// application does: the whole row, no compare-and-set (the worker owns
// the row while it holds the lease; people override).
func (w *world) save(ctx context.Context, o *obligation) error {
	o.Updated = w.clock.Now()
	_, err := w.env.Pool.Exec(ctx, `UPDATE obligations SET state = $2, provider_id = $3, lease_owner = $4,
		lease_expires_at = $5, updated_at = $6, paid_at = $7 WHERE id = $1`,
		o.ID, string(o.State), nullString(o.ProviderID), nullString(o.LeaseOwner), nullTime(o.LeaseExp), o.Updated, nullTime(o.Paid))
	if err != nil {
		return fmt.Errorf("update obligation %s: %w", o.ID, err)
	}
	return nil
}

// create makes the provider create an object, as a request carrying key
// would, at the current virtual time.
func (w *world) create(o *object) error { return w.createAt(o, w.clock.Now()) }

// createAt puts o at the provider as created at at, with its key.
func (w *world) createAt(o *object, at time.Time) error {
	o.Created = at
	if err := w.stripe.Add(o.provider(), o.Key); err != nil {
		return err
	}
	w.led.objs[o.ID] = o
	w.led.objIDs = append(w.led.objIDs, o.ID)
	return nil
}

// finalize settles a pending object at the provider, as Stripe does later.
func (w *world) finalize(o *object, st reconcile.Status) error {
	o.Status = st
	return w.stripe.Update(o.ID, w.clock.Now(), func(p *reconcile.ProviderObject) {
		p.Status = st
		p.RawStatus = "" // the server words it for the kind
	})
}

func (l *ledger) newKey() string {
	l.nextKey++
	return fmt.Sprintf("key_%06d", l.nextKey)
}

func (l *ledger) newObjectID(kind reconcile.ObjectKind) string {
	l.nextObj++
	if kind == reconcile.Refund {
		return fmt.Sprintf("re_sim%06d", l.nextObj)
	}
	return fmt.Sprintf("ch_sim%06d", l.nextObj)
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
