package sources

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"reconcile"
)

// SyncRequest asks for what a mirror of the provider's records lacks: the
// objects created since it was complete, and the events since it was last
// brought up to date, which tell both the idempotency keys of the new
// objects and the changes to the old ones.
type SyncRequest struct {
	// Objects is the creation-time window whose charges, refunds and
	// payment intents are listed, as List lists them; an empty window
	// lists none.
	Objects reconcile.Window
	// Events is the creation-time window of the events read (EventGrace
	// is added past its end): key evidence as List gives it, and changes.
	Events reconcile.Window
}

// Change is what the newest event about one provider object says the
// object now is. Stripe's events carry the whole object as it stood after
// the change, so the newest one is the object's state unless something
// changed it without an event.
type Change struct {
	Object    reconcile.ProviderObject
	EventID   string
	EventType string
	At        time.Time // the event's creation
}

// Sync is what an incremental read returned: complete, or not at all.
type Sync struct {
	// Listing holds the objects created in SyncRequest.Objects and the key
	// evidence of every event read.
	Listing
	// Changes are, one per object and sorted by object id, the newest
	// state told by the events read of each object created outside
	// SyncRequest.Objects.
	Changes []Change
	// Unsettled are the ids of objects whose newest events disagree within
	// one second (the order they apply in is unknown) or whose event could
	// not be read as an object: retrieve them by id. Sorted.
	Unsettled []string
}

// changeEventTypes are the event types that tell of a change to an
// existing object without being key evidence (keyEvents are read as well,
// and tell changes too: a payment intent succeeding, a charge failing).
// Stripe emits no event when a payment intent's metadata is edited; the
// caller must not take a payment intent's metadata from a mirror on trust.
func changeEventTypes() []string {
	return []string{"charge.captured", "charge.refunded", "charge.updated", "charge.refund.updated"}
}

// syncEventTypes are the names passed as types[] by Sync: at most 20.
func syncEventTypes() []string {
	return append(keyEventTypes(), changeEventTypes()...)
}

// Sync reads what SyncRequest asks for, with List's pacing, retries and
// slices, and fails rather than return part of it: the objects created in
// req.Objects and, from the events created in req.Events, the key evidence
// and the newest state of every other object they are about.
func (s *Stripe) Sync(ctx context.Context, req SyncRequest) (*Sync, error) {
	if req.Objects.To.Before(req.Objects.From) || req.Events.To.Before(req.Events.From) {
		return nil, fmt.Errorf("sync stripe%s: a window ends before it starts (objects %s – %s, events %s – %s)",
			s.ofAccount(), req.Objects.From.Format(time.RFC3339), req.Objects.To.Format(time.RFC3339),
			req.Events.From.Format(time.RFC3339), req.Events.To.Format(time.RFC3339))
	}
	l, changes, unsettled, err := s.list(ctx, listPlan{objects: req.Objects, events: req.Events,
		eventTypes: syncEventTypes(), changes: true})
	if err != nil {
		return nil, err
	}
	return &Sync{Listing: *l, Changes: changes, Unsettled: unsettled}, nil
}

// change is one event's account of one object; ok is false when the event
// names an object it could not be read as.
type change struct {
	id string
	Change
	ok bool
}

// mergeChanges keeps the newest account of each object. Two events of the
// newest second that disagree leave the object unsettled: which came last
// is unknown.
func mergeChanges(read [][]page) ([]Change, []string) {
	type state struct {
		c         change
		unsettled bool
	}
	newest := map[string]*state{}
	for _, pages := range read {
		for _, r := range pages {
			for _, c := range r.changes {
				st, seen := newest[c.id]
				switch {
				case !seen:
					newest[c.id] = &state{c: c, unsettled: !c.ok}
				case c.At.After(st.c.At):
					*st = state{c: c, unsettled: !c.ok}
				case c.At.Equal(st.c.At):
					if !c.ok || !st.c.ok || !SameObject(c.Object, st.c.Object) {
						st.unsettled = true
					}
					if c.EventID < st.c.EventID {
						st.c.EventID, st.c.EventType = c.EventID, c.EventType
					}
				}
			}
		}
	}
	var changes []Change
	var unsettled []string
	for id, st := range newest {
		if st.unsettled {
			unsettled = append(unsettled, id)
			continue
		}
		changes = append(changes, st.c.Change)
	}
	slices.SortFunc(changes, func(a, b Change) int { return cmp.Compare(a.Object.ID, b.Object.ID) })
	slices.Sort(unsettled)
	return changes, unsettled
}

// SameObject reports whether two accounts of a provider object agree in
// every field.
func SameObject(a, b reconcile.ProviderObject) bool {
	return a.ID == b.ID && a.Account == b.Account && a.Kind == b.Kind && a.Money == b.Money && a.Status == b.Status &&
		a.RawStatus == b.RawStatus && a.AmountRefunded == b.AmountRefunded && a.Target == b.Target &&
		a.PaymentIntent == b.PaymentIntent && a.Charge == b.Charge && a.Customer == b.Customer &&
		a.Created == b.Created && maps.Equal(a.Metadata, b.Metadata)
}
