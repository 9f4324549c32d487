package sources

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"reconcile"
)

// merge keeps each object once and each (object, key) pair once, from
// its earliest event (the least event id among the earliest), whichever
// slice and page brought it: an object may carry several keys, and two
// objects the same key. The keys come out by kind, then time, whatever
// kinds the events list interleaved.
func TestMergeKeepsEachPairOnce(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ch := func(id string, s int) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Created: reconcile.StampOf(at(s))}
	}
	key := func(obj, k, evt string, s int) reconcile.KeyEvidence {
		return reconcile.KeyEvidence{ObjectID: obj, ObjectKind: reconcile.Charge, Key: k, EventID: evt, Created: reconcile.StampOf(at(s))}
	}
	refund := func(obj, k, evt string, s int) reconcile.KeyEvidence {
		r := key(obj, k, evt, s)
		r.ObjectKind = reconcile.Refund
		return r
	}
	read := [][]page{
		{ // a slice, newest page first
			{objects: []reconcile.ProviderObject{ch("ch_b", 5), ch("ch_a", 1)},
				keys: []reconcile.KeyEvidence{key("ch_a", "k1", "evt_9", 9), key("ch_b", "k1", "evt_5", 5)}},
			{objects: []reconcile.ProviderObject{ch("ch_a", 1)},
				keys: []reconcile.KeyEvidence{key("ch_a", "k2", "evt_4", 4), key("ch_a", "k1", "evt_3", 3)}},
		},
		{
			{keys: []reconcile.KeyEvidence{key("ch_a", "k1", "evt_2", 3), refund("re_c", "k3", "evt_7", 7), key("ch_a", "k2", "evt_8", 8)}},
			{keys: []reconcile.KeyEvidence{refund("re_c", "k3", "evt_6", 6), refund("re_d", "k4", "evt_1", 1)}},
		},
	}
	l := merge(read)
	if got, want := l.Objects, []reconcile.ProviderObject{ch("ch_a", 1), ch("ch_b", 5)}; !slices.EqualFunc(got, want,
		func(a, b reconcile.ProviderObject) bool { return a.ID == b.ID && a.Created == b.Created }) {
		t.Errorf("objects %+v, want %+v", got, want)
	}
	want := []reconcile.KeyEvidence{key("ch_a", "k1", "evt_2", 3), key("ch_a", "k2", "evt_4", 4), key("ch_b", "k1", "evt_5", 5),
		refund("re_d", "k4", "evt_1", 1), refund("re_c", "k3", "evt_6", 6)}
	if !slices.Equal(l.Keys, want) {
		t.Errorf("keys\n%+v\nwant\n%+v", l.Keys, want)
	}
}

// sortKeys orders keys as one sort by kind, time, object id and key
// would, whether they come in time order with each second's ties in the
// provider's order (sorted tie by tie) or out of time order (sorted
// whole).
func TestSortKeysAsOneSort(t *testing.T) {
	byAll := func(a, b reconcile.KeyEvidence) int {
		return cmp.Or(cmp.Compare(a.ObjectKind, b.ObjectKind), cmp.Compare(a.Created, b.Created),
			cmp.Compare(a.ObjectID, b.ObjectID), cmp.Compare(a.Key, b.Key))
	}
	kinds := []reconcile.ObjectKind{reconcile.Charge, reconcile.PaymentIntent, reconcile.Refund}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		keys := make([]reconcile.KeyEvidence, rng.IntN(60))
		for i := range keys {
			keys[i] = reconcile.KeyEvidence{ObjectKind: kinds[rng.IntN(len(kinds))], Created: reconcile.StampOf(t0.Add(time.Duration(rng.IntN(4)) * time.Second)),
				ObjectID: fmt.Sprintf("ch_%d", rng.IntN(8)), Key: fmt.Sprintf("k%d", rng.IntN(3))}
		}
		if round%2 == 0 {
			// In time order, each tie shuffled.
			slices.SortFunc(keys, func(a, b reconcile.KeyEvidence) int {
				return cmp.Or(cmp.Compare(a.ObjectKind, b.ObjectKind), cmp.Compare(a.Created, b.Created))
			})
		}
		want := slices.Clone(keys)
		slices.SortFunc(want, byAll)
		sortKeys(keys)
		if !slices.Equal(keys, want) {
			t.Fatalf("round %d: sortKeys gave\n%v\nwant\n%v", round, keys, want)
		}
	}
}

// Two objects whose ids share their first sixteen bytes, as Stripe's
// ids of one second may, are two objects: the same key on both is two
// pairs, and only each pair's repeat goes.
func TestMergeTellsApartIDsOfOneHead(t *testing.T) {
	const a, b = "ch_3PxYzAbCdEfGhIj0001", "ch_3PxYzAbCdEfGhIj0002"
	key := func(obj, evt string, s int) reconcile.KeyEvidence {
		return reconcile.KeyEvidence{ObjectID: obj, ObjectKind: reconcile.Charge, Key: "k-same", EventID: evt,
			Created: reconcile.StampOf(t0.Add(time.Duration(s) * time.Second))}
	}
	l := merge([][]page{{{keys: []reconcile.KeyEvidence{key(b, "evt_4", 2), key(a, "evt_3", 1), key(b, "evt_2", 1), key(a, "evt_1", 1)}}}})
	want := []reconcile.KeyEvidence{key(a, "evt_1", 1), key(b, "evt_2", 1)}
	if !slices.Equal(l.Keys, want) {
		t.Errorf("merged keys %v, want %v", l.Keys, want)
	}
}

// merge keeps one string of an id a key and its object both carry: the
// key's object id becomes the object's own where the walk through both
// meets it (the key in its object's second); elsewhere the key keeps
// its copy, equal all the same.
func TestMergeSharesTheObjectsIDs(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	obj := func(id string, kind reconcile.ObjectKind, s int) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: strings.Clone(id), Kind: kind, Created: reconcile.StampOf(at(s))}
	}
	key := func(id string, kind reconcile.ObjectKind, k string, s int) reconcile.KeyEvidence {
		return reconcile.KeyEvidence{ObjectID: strings.Clone(id), ObjectKind: kind, Key: k, EventID: "evt_" + k, Created: reconcile.StampOf(at(s))}
	}
	read := [][]page{{{
		objects: []reconcile.ProviderObject{obj("ch_a", reconcile.Charge, 1), obj("ch_b", reconcile.Charge, 1),
			obj("ch_c", reconcile.Charge, 2), obj("re_a", reconcile.Refund, 1)},
		keys: []reconcile.KeyEvidence{key("ch_a", reconcile.Charge, "k1", 1), key("ch_a", reconcile.Charge, "k2", 1),
			key("ch_b", reconcile.Charge, "k3", 1), key("ch_c", reconcile.Charge, "k4", 5),
			key("ch_x", reconcile.Charge, "k5", 2), key("re_a", reconcile.Refund, "k6", 1)},
	}}}
	l := merge(read)
	own := map[string]*byte{}
	for _, o := range l.Objects {
		own[o.ID] = unsafe.StringData(o.ID)
	}
	shared := map[string]bool{"k1": true, "k2": true, "k3": true, "k6": true}
	if len(l.Keys) != 6 {
		t.Fatalf("%d keys, want 6", len(l.Keys))
	}
	for _, k := range l.Keys {
		if got := unsafe.StringData(k.ObjectID) == own[k.ObjectID]; got != shared[k.Key] {
			t.Errorf("key %s of %s shares its object's id: %v, want %v", k.Key, k.ObjectID, got, shared[k.Key])
		}
	}
}
