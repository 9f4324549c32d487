package store

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"reconcile"
)

// byID sorts objects by id: the mirror returns them in no order.
func byID(objs []reconcile.ProviderObject) {
	slices.SortFunc(objs, func(a, b reconcile.ProviderObject) int { return strings.Compare(a.ID, b.ID) })
}

func mirrorCharge(id string, created time.Time, meta map[string]string) reconcile.ProviderObject {
	return reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Succeeded, RawStatus: "succeeded", Customer: "cus_1", PaymentIntent: "pi_" + id,
		Metadata: meta, Created: reconcile.StampOf(created)}
}

// Save then read back: objects by creation window (whole seconds, as a
// listing), by id, only those seen since the feed began; keys by event
// window; cursors as set.
func TestMirrorRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	m := NewMirror(e.pool)
	ctx := t.Context()
	at := t0()
	a := mirrorCharge("ch_a", at.Add(-2*time.Hour), map[string]string{"obligation_id": "charge:a", "note": "ü"})
	b := mirrorCharge("ch_b", at.Add(-time.Hour), nil)
	r := reconcile.ProviderObject{ID: "re_c", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 100, Currency: "jpy"},
		Status: reconcile.Pending, RawStatus: "pending", Target: "ch_a", Charge: "ch_a", Created: reconcile.StampOf(at.Add(-time.Hour))}
	old := mirrorCharge("ch_old", at.Add(-90*time.Hour), nil)
	keys := []reconcile.KeyEvidence{
		{ObjectID: "ch_a", ObjectKind: reconcile.Charge, Key: "k-a", EventID: "evt_2", EventType: "charge.succeeded", Created: a.Created},
		{ObjectID: "re_c", ObjectKind: reconcile.Refund, Key: "k-c", EventID: "evt_3", EventType: "refund.created", RequestID: "req_c", Created: r.Created},
	}
	cov := reconcile.Window{From: at.Add(-72 * time.Hour), To: at}
	err := m.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at,
		Seen: []SeenObjects{{At: at.Add(-10 * time.Minute), Objects: []reconcile.ProviderObject{a, b, r}}, {At: at.Add(-100 * time.Hour), Objects: []reconcile.ProviderObject{old}}},
		Keys: keys,
		Cursors: SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{reconcile.Charge: cov, reconcile.Refund: cov, reconcile.PaymentIntent: cov},
			Keys: cov, Changes: reconcile.Window{From: at.Add(-10 * time.Minute), To: at.Add(-10 * time.Minute)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	since := at.Add(-10 * time.Minute)
	// The window's start is a fraction of a second after a's creation:
	// a listing of it would not hold a.
	got, err := m.Objects(ctx, reconcile.Window{From: a.Created.Time().Add(time.Millisecond), To: at}, since)
	if err != nil {
		t.Fatal(err)
	}
	byID(got)
	if diff := cmp.Diff([]reconcile.ProviderObject{b, r}, got); diff != "" {
		t.Errorf("Objects (-want +got):\n%s", diff)
	}
	got, err = m.Objects(ctx, reconcile.Window{From: at.Add(-100 * time.Hour), To: at}, since)
	if err != nil {
		t.Fatal(err)
	}
	byID(got)
	if diff := cmp.Diff([]reconcile.ProviderObject{a, b, r}, got); diff != "" {
		t.Errorf("Objects of a window holding a stale object (-want +got):\n%s", diff)
	}
	held, err := m.Get(ctx, []string{"re_c", "ch_old", "ch_none", "ch_a"}, since)
	if err != nil {
		t.Fatal(err)
	}
	want := []MirrorObject{{Object: a, SeenAt: since}, {Object: r, SeenAt: since}}
	if diff := cmp.Diff(want, held); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	gotKeys, err := m.Keys(ctx, reconcile.Window{From: at.Add(-90 * time.Minute), To: at})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(keys[1:], gotKeys); diff != "" {
		t.Errorf("Keys (-want +got):\n%s", diff)
	}
	cur, err := m.Cursors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantCur := SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{reconcile.Charge: cov, reconcile.Refund: cov, reconcile.PaymentIntent: cov},
		Keys: cov, Changes: reconcile.Window{From: since, To: since}, RunID: "run_1"}
	if diff := cmp.Diff(wantCur, cur); diff != "" {
		t.Errorf("Cursors (-want +got):\n%s", diff)
	}
}

// An older account of an object never replaces a newer one, in one save
// or across saves; of two events telling one key, the earliest is kept;
// cursors not given are left as they were.
func TestMirrorKeepsTheNewestState(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	m := NewMirror(e.pool)
	ctx := t.Context()
	at := t0()
	pending := reconcile.ProviderObject{ID: "re_1", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 100, Currency: "usd"},
		Status: reconcile.Pending, RawStatus: "pending", Created: reconcile.StampOf(at.Add(-time.Hour))}
	done := pending
	done.Status, done.RawStatus = reconcile.Succeeded, "succeeded"
	cov := reconcile.Window{From: at.Add(-time.Hour), To: at}
	save := func(u MirrorUpdate) {
		t.Helper()
		u.RunID, u.Now = "run", at
		if err := m.Save(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	save(MirrorUpdate{
		Seen: []SeenObjects{{At: at.Add(-time.Minute), Objects: []reconcile.ProviderObject{done}}, {At: at.Add(-2 * time.Minute), Objects: []reconcile.ProviderObject{pending}}},
		Keys: []reconcile.KeyEvidence{
			{ObjectID: "re_1", ObjectKind: reconcile.Refund, Key: "k", EventID: "evt_9", EventType: "refund.updated", Created: reconcile.StampOf(at.Add(-time.Minute))},
		},
		Cursors: SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{reconcile.Refund: cov}, Keys: cov},
	})
	save(MirrorUpdate{Seen: []SeenObjects{{At: at.Add(-30 * time.Minute), Objects: []reconcile.ProviderObject{pending}}},
		Keys: []reconcile.KeyEvidence{
			{ObjectID: "re_1", ObjectKind: reconcile.Refund, Key: "k", EventID: "evt_5", EventType: "refund.created", Created: reconcile.StampOf(at.Add(-time.Hour))},
		}})
	save(MirrorUpdate{Keys: []reconcile.KeyEvidence{
		{ObjectID: "re_1", ObjectKind: reconcile.Refund, Key: "k", EventID: "evt_7", EventType: "refund.updated", Created: reconcile.StampOf(at.Add(-30 * time.Minute))},
	}})
	held, err := m.Get(ctx, []string{"re_1"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]MirrorObject{{Object: done, SeenAt: at.Add(-time.Minute)}}, held); diff != "" {
		t.Errorf("Get after older accounts (-want +got):\n%s", diff)
	}
	keys, err := m.Keys(ctx, reconcile.Window{From: at.Add(-2 * time.Hour), To: at})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].EventID != "evt_5" {
		t.Errorf("Keys = %+v, want the one of evt_5", keys)
	}
	cur, err := m.Cursors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Objects[reconcile.Refund] != cov || cur.Keys != cov || !cur.Changes.To.IsZero() || len(cur.Objects) != 1 {
		t.Errorf("Cursors = %+v, want the refund and keys cursors only", cur)
	}
}

// A save that cannot finish saves nothing: its objects, keys and cursors
// go together.
func TestMirrorSaveIsAtomic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	m := NewMirror(e.pool)
	at := t0()
	err := m.Save(t.Context(), MirrorUpdate{RunID: "run", Now: at,
		Seen: []SeenObjects{{At: at, Objects: []reconcile.ProviderObject{mirrorCharge("ch_1", at.Add(-time.Hour), nil)}}},
		Keys: []reconcile.KeyEvidence{{ObjectID: "ch_1", ObjectKind: reconcile.Charge, Key: "k", EventID: "evt_1", EventType: "charge.succeeded", Created: reconcile.StampOf(at)}},
		Cursors: SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{
			reconcile.Charge: {From: at.Add(-time.Hour), To: at}, "customer": {From: at.Add(-time.Hour), To: at}}},
	})
	if err == nil {
		t.Fatal("Save with a cursor of no object kind succeeded")
	}
	for _, table := range []string{"provider_objects", "provider_keys", "sync_cursors"} {
		if n := e.count(`SELECT count(*) FROM reconcile.` + table); n != 0 {
			t.Errorf("%s holds %d rows after a failed save, want 0", table, n)
		}
	}
}

// Saves of one account side by side (a pass's fetch jobs, whose
// slices' events overlap) carry the same keys; each save succeeds and
// the mirror keeps each key once, from its earliest event.
func TestMirrorSavesSideBySide(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	m := NewMirror(e.pool).ForAccount("acct_1")
	at := t0()
	keys := func(evt string, created time.Time) []reconcile.KeyEvidence {
		ks := make([]reconcile.KeyEvidence, 500)
		for i := range ks {
			ks[i] = reconcile.KeyEvidence{ObjectID: fmt.Sprintf("ch_%d", i), ObjectKind: reconcile.Charge, Key: fmt.Sprintf("k-%d", i),
				EventID: evt, EventType: "charge.succeeded", Created: reconcile.StampOf(created)}
		}
		return ks
	}
	for round := range 10 {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				created := at.Add(time.Duration(g-round) * time.Second)
				errs[g] = m.Save(t.Context(), MirrorUpdate{RunID: "run", Now: at, Keys: keys(fmt.Sprintf("evt_%d_%d", round, g), created)})
			}()
		}
		wg.Wait()
		for g, err := range errs {
			if err != nil {
				t.Fatalf("round %d, save %d: %v", round, g, err)
			}
		}
	}
	if n := e.count(`SELECT count(*) FROM reconcile.provider_keys`); n != 500 {
		t.Errorf("%d keys kept, want 500", n)
	}
	// The earliest event of all: round 9's first save, 9 s before at.
	if n := e.count(`SELECT count(*) FROM reconcile.provider_keys WHERE event_id = 'evt_9_0'`); n != 500 {
		t.Errorf("%d keys from the earliest event, want 500", n)
	}
}

// Metadata is stored masked, keys and values, but for the values of the
// link keys a save names, kept exact however they look; what is read
// back is what was stored (docs/design.md, "Untrusted text").
func TestMirrorMasksMetadataAtRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	m := NewMirror(e.pool)
	at := t0()
	meta := map[string]string{"obligation_id": "charge:4242424242424242", "idempotency_key": "k-jane@example.com",
		"note": "card 4242-4242-4242-4242, jane@example.com", "4111111111111111": "as a key"}
	a := mirrorCharge("ch_a", at.Add(-time.Hour), meta)
	b := mirrorCharge("ch_b", at.Add(-time.Hour), meta)
	for _, u := range []MirrorUpdate{
		{Seen: []SeenObjects{{At: at, Objects: []reconcile.ProviderObject{a}}}, LinkKeys: []string{"obligation_id", "idempotency_key"}},
		{Seen: []SeenObjects{{At: at, Objects: []reconcile.ProviderObject{b}}}},
	} {
		u.RunID, u.Now = "run", at
		if err := m.Save(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	if a.Metadata["note"] != meta["note"] {
		t.Fatalf("Save changed the pass's own object: %q", a.Metadata)
	}
	held, err := m.Get(t.Context(), []string{"ch_a", "ch_b"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"obligation_id": "charge:4242424242424242", "idempotency_key": "k-jane@example.com",
			"note": "card •••• 4242, [email]", "•••• 1111": "as a key"},
		// A save naming no link keys keeps nothing readable.
		{"obligation_id": "charge:•••• 4242", "idempotency_key": "[email]",
			"note": "card •••• 4242, [email]", "•••• 1111": "as a key"},
	}
	if len(held) != 2 {
		t.Fatalf("Get = %d objects, want 2", len(held))
	}
	for i, h := range held {
		if diff := cmp.Diff(want[i], h.Object.Metadata); diff != "" {
			t.Errorf("%s: metadata read back (-want +got):\n%s", h.Object.ID, diff)
		}
	}
	var raw string
	if err := e.pool.QueryRow(t.Context(), `SELECT string_agg(metadata::text, ' ') FROM reconcile.provider_objects`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	// Only the link keys' values of the save that named them stay readable.
	for _, leak := range []string{"4242-4242", "4111111111111111", "jane@example.com,"} {
		if strings.Contains(raw, leak) {
			t.Errorf("the mirror holds %q at rest: %s", leak, raw)
		}
	}
}

// Each account's view of the mirror sees and saves its own objects, keys
// and cursors only: the platform and two connected accounts holding
// objects and keys of the same ids keep them apart, each read back
// carrying its account, and a cursor moved for one account moves no
// other's.
func TestMirrorAccountsApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	platform := NewMirror(e.pool)
	views := map[string]*Mirror{"": platform, "acct_1": platform.ForAccount("acct_1"), "acct_2": platform.ForAccount("acct_2")}
	cov := map[string]reconcile.Window{
		"":       {From: at.Add(-3 * time.Hour), To: at},
		"acct_1": {From: at.Add(-2 * time.Hour), To: at},
		"acct_2": {From: at.Add(-time.Hour), To: at},
	}
	// The same ids in every account, told apart by their amounts and keys.
	objects := func(account string, amount int64) []reconcile.ProviderObject {
		a, b := mirrorCharge("ch_same", at.Add(-30*time.Minute), nil), mirrorCharge("ch_b", at.Add(-20*time.Minute), nil)
		a.Money.Amount, a.Account, b.Account = amount, account, account
		return []reconcile.ProviderObject{b, a}
	}
	key := func(account string) reconcile.KeyEvidence {
		return reconcile.KeyEvidence{Account: account, ObjectID: "ch_same", ObjectKind: reconcile.Charge,
			Key: "k-" + account, EventID: "evt_same", EventType: "charge.succeeded", Created: reconcile.StampOf(at.Add(-30 * time.Minute))}
	}
	amounts := map[string]int64{"": 100, "acct_1": 200, "acct_2": 300}
	for _, account := range []string{"", "acct_1", "acct_2"} {
		objs := objects(account, amounts[account])
		k := key(account)
		if account == "acct_2" {
			// Objects and keys that name no account are the view's.
			for i := range objs {
				objs[i].Account = ""
			}
			k.Account = ""
		}
		err := views[account].Save(ctx, MirrorUpdate{RunID: "run_" + account, Now: at,
			Seen: []SeenObjects{{At: at, Objects: objs}}, Keys: []reconcile.KeyEvidence{k},
			Cursors: SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{reconcile.Charge: cov[account]},
				Keys: cov[account]}})
		if err != nil {
			t.Fatalf("save of %q: %v", account, err)
		}
	}
	// A second save of one account changes only its own.
	bumped := objects("acct_1", 250)
	if err := views["acct_1"].Save(ctx, MirrorUpdate{RunID: "run_acct_1b", Now: at.Add(time.Minute),
		Seen: []SeenObjects{{At: at.Add(time.Minute), Objects: bumped[1:]}}}); err != nil {
		t.Fatal(err)
	}
	amounts["acct_1"] = 250
	if n := e.count(`SELECT count(*) FROM reconcile.provider_objects`); n != 6 {
		t.Errorf("provider_objects holds %d rows, want 6: two ids in each of three accounts", n)
	}
	for account, m := range views {
		want := objects(account, amounts[account])
		byID(want)
		got, err := m.Objects(ctx, reconcile.Window{From: at.Add(-4 * time.Hour), To: at}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		byID(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q: Objects (-want +got):\n%s", account, diff)
		}
		held, err := m.Get(ctx, []string{"ch_same"}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 1 || held[0].Object.Account != account || held[0].Object.Money.Amount != amounts[account] {
			t.Errorf("%q: Get = %+v, want its own ch_same of %d", account, held, amounts[account])
		}
		keys, err := m.Keys(ctx, reconcile.Window{From: at.Add(-4 * time.Hour), To: at})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]reconcile.KeyEvidence{key(account)}, keys); diff != "" {
			t.Errorf("%q: Keys (-want +got):\n%s", account, diff)
		}
		cur, err := m.Cursors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Objects[reconcile.Charge] != cov[account] || cur.Keys != cov[account] || len(cur.Objects) != 1 {
			t.Errorf("%q: Cursors = %+v, want its own charge and keys cursors of %v", account, cur, cov[account])
		}
	}
	// A view refuses what belongs to another account, and saves nothing.
	before := e.count(`SELECT count(*) FROM reconcile.provider_objects`)
	for _, u := range []MirrorUpdate{
		{Seen: []SeenObjects{{At: at, Objects: objects("acct_1", 1)}}},
		{Keys: []reconcile.KeyEvidence{key("acct_1")}},
	} {
		u.RunID, u.Now = "run_wrong", at
		if err := views["acct_2"].Save(ctx, u); err == nil {
			t.Errorf("acct_2's view saved another account's reads")
		}
	}
	if after := e.count(`SELECT count(*) FROM reconcile.provider_objects`); after != before {
		t.Errorf("a refused save wrote: %d objects, were %d", after, before)
	}
}

// What a pass found absent is absent for the next, as of when it was
// found, for the account it was found of, until the mirror holds the
// object itself.
func TestMirrorAbsent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	m, other := NewMirror(e.pool), NewMirror(e.pool).ForAccount("acct_1Other")
	ctx := t.Context()
	at := t0()
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at, Absent: []string{"ch_gone", "re_gone", "ch_gone"}}); err != nil {
		t.Fatal(err)
	}
	asked := []string{"ch_gone", "re_gone", "ch_unasked"}
	if got, err := m.Absent(ctx, asked, at); err != nil || !slices.Equal(got, []string{"ch_gone", "re_gone"}) {
		t.Errorf("Absent = %v, %v; want ch_gone and re_gone", got, err)
	}
	if got, err := m.Absent(ctx, asked, at.Add(time.Second)); err != nil || len(got) != 0 {
		t.Errorf("Absent since after it was found = %v, %v; want none", got, err)
	}
	if got, err := other.Absent(ctx, asked, at); err != nil || len(got) != 0 {
		t.Errorf("Absent of another account = %v, %v; want none", got, err)
	}
	// Found again later: the later answer stands. An object of the id
	// saved since overrides the answer.
	later := at.Add(time.Hour)
	err := m.Save(ctx, MirrorUpdate{RunID: "run_2", Now: later, Absent: []string{"re_gone"},
		Seen: []SeenObjects{{At: later, Objects: []reconcile.ProviderObject{mirrorCharge("ch_gone", at, nil)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Absent(ctx, asked, at.Add(time.Minute)); err != nil || !slices.Equal(got, []string{"re_gone"}) {
		t.Errorf("Absent after the second save = %v, %v; want re_gone alone", got, err)
	}
}
