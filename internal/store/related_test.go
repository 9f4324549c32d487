package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
)

// ids are the objects' ids, sorted.
func ids(objs []reconcile.ProviderObject) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.ID
	}
	slices.Sort(out)
	return out
}

// Related finds a shard's closure in the view's account's mirror: by id,
// by intent, by charge or target, and by (customer, amount), the latter
// also for a charge with no customer through its intent's; each object
// once, only those created in the window and seen since, and none of
// another account's. KeysOf finds the keys of the objects asked for told
// in the window, of the view's account alone.
// ever and never bound the pairs of a Related whose creation times do
// not matter.
var ever, never = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMirrorRelated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	since := at.Add(-10 * time.Minute)
	w := reconcile.Window{From: at.Add(-72 * time.Hour), To: at}
	usd := func(n int64) reconcile.Money { return reconcile.Money{Amount: n, Currency: "usd"} }
	obj := func(id string, kind reconcile.ObjectKind, amount int64, customer, pi, charge, target string) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: kind, Money: usd(amount), Status: reconcile.Succeeded, RawStatus: "succeeded",
			Customer: customer, PaymentIntent: pi, Charge: charge, Target: target, Created: reconcile.StampOf(at.Add(-time.Hour))}
	}
	fresh := []reconcile.ProviderObject{
		obj("pi_1", reconcile.PaymentIntent, 5000, "cus_1", "", "", "ch_1"),
		obj("ch_1", reconcile.Charge, 5000, "cus_1", "pi_1", "", ""),
		obj("re_1", reconcile.Refund, 100, "", "", "ch_1", "ch_1"),
		obj("re_2", reconcile.Refund, 200, "", "pi_2", "", ""),
		obj("pi_3", reconcile.PaymentIntent, 7000, "cus_2", "", "", ""),
		obj("ch_2", reconcile.Charge, 7000, "", "pi_3", "", ""), // no customer: its intent's
		obj("ch_3", reconcile.Charge, 7000, "cus_2", "", "", ""),
		obj("ch_4", reconcile.Charge, 100, "cus_2", "", "", ""), // another amount
		obj("pi_4", reconcile.PaymentIntent, 100, "cus_2", "", "", ""),
		obj("ch_5", reconcile.Charge, 7000, "", "pi_4", "", ""), // its intent's amount is not its own, but the pair is
		obj("ch_6", reconcile.Charge, 100, "", "pi_3", "", ""),  // the intent's customer, another amount
	}
	old := obj("ch_old", reconcile.Charge, 5000, "cus_1", "pi_1", "", "")
	old.Created = reconcile.StampOf(at.Add(-100 * time.Hour))
	stale := obj("ch_stale", reconcile.Charge, 5000, "cus_1", "pi_1", "", "")
	// A customer's intent seen before since tells no charge its customer.
	staleIntent := obj("pi_5", reconcile.PaymentIntent, 9000, "cus_3", "", "", "")
	orphanCharge := obj("ch_7", reconcile.Charge, 9000, "", "pi_5", "", "")
	fresh = append(fresh, orphanCharge, old)
	key := func(id string, created time.Time) reconcile.KeyEvidence {
		return reconcile.KeyEvidence{ObjectID: id, ObjectKind: reconcile.Charge, Key: "k-" + id, EventID: "evt_" + id,
			EventType: "charge.succeeded", RequestID: "req_" + id, Created: reconcile.StampOf(created)}
	}
	m := NewMirror(e.pool).ForAccount("acct_1")
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at,
		Seen: []SeenObjects{{At: since, Objects: fresh}, {At: since.Add(-time.Hour), Objects: []reconcile.ProviderObject{stale, staleIntent}}},
		Keys: []reconcile.KeyEvidence{key("ch_1", at.Add(-time.Hour)), key("ch_3", at.Add(-time.Hour)), key("ch_old", old.Created.Time())},
	}); err != nil {
		t.Fatal(err)
	}
	// Another account: the same ids, every term matching.
	other := NewMirror(e.pool).ForAccount("acct_2")
	var theirs []reconcile.ProviderObject
	for _, o := range fresh {
		o.ID += "_2"
		theirs = append(theirs, o)
	}
	theirs = append(theirs, obj("ch_1", reconcile.Charge, 5000, "cus_1", "pi_1", "ch_1", "ch_1"),
		obj("ch_x", reconcile.Charge, 7000, "", "pi_3", "", ""))
	if err := other.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at, Seen: []SeenObjects{{At: since, Objects: theirs}},
		Keys: []reconcile.KeyEvidence{key("ch_1", at.Add(-time.Hour))}}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		q    Related
		want []string
	}{
		{"empty", Related{}, nil},
		{"empty terms", Related{IDs: []string{}, Twins: []CustomerAmount{}}, nil},
		{"ids", Related{IDs: []string{"ch_1", "ch_old", "ch_none", "ch_stale", "ch_1"}}, []string{"ch_1"}},
		{"intents", Related{Intents: []string{"pi_1", "pi_2"}}, []string{"ch_1", "re_2"}},
		{"charges", Related{Charges: []string{"ch_1"}}, []string{"pi_1", "re_1"}},
		{"twins", Related{Twins: []CustomerAmount{{"cus_2", 7000, ever, never}}}, []string{"ch_2", "ch_3", "ch_5", "pi_3"}},
		{"twins created then", Related{Twins: []CustomerAmount{{"cus_2", 7000, at.Add(-time.Hour), at.Add(-time.Hour)}}},
			[]string{"ch_2", "ch_3", "ch_5", "pi_3"}},
		{"twins created before", Related{Twins: []CustomerAmount{{"cus_2", 7000, at.Add(-3 * time.Hour), at.Add(-time.Hour - time.Second)}}}, nil},
		{"twins created after", Related{Twins: []CustomerAmount{{"cus_2", 7000, at.Add(-time.Hour + time.Second), at}}}, nil},
		{"keys", Related{Keys: []string{"k-ch_1", "k-ch_old", "k-none"}}, []string{"ch_1"}},
		{"held not read again", Related{Intents: []string{"pi_1", "pi_2"}, Held: func(id string) bool { return id == "ch_1" }},
			[]string{"re_2"}},
		{"twins through a stale intent", Related{Twins: []CustomerAmount{{"cus_3", 9000, ever, never}}}, nil},
		{"no customer asked for", Related{Twins: []CustomerAmount{{"", 7000, ever, never}}}, nil},
		{"no charge asked for", Related{Charges: []string{""}, Intents: []string{""}}, nil},
		{"all", Related{IDs: []string{"ch_1", "ch_4"}, Intents: []string{"pi_1"}, Charges: []string{"ch_1"},
			Twins: []CustomerAmount{{"cus_2", 7000, ever, never}, {"cus_1", 5000, ever, never}}},
			[]string{"ch_1", "ch_2", "ch_3", "ch_4", "ch_5", "pi_1", "pi_3", "re_1"}},
	} {
		got, err := m.Related(ctx, w, c.q, since)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(c.want, ids(got), cmpEmpty); diff != "" {
			t.Errorf("%s: Related (-want +got):\n%s", c.name, diff)
		}
		for _, o := range got {
			if o.Account != "acct_1" {
				t.Errorf("%s: %s of account %q", c.name, o.ID, o.Account)
			}
		}
	}
	// The objects as Objects reads them.
	got, err := m.Related(ctx, w, Related{IDs: []string{"ch_1", "re_1"}}, since)
	if err != nil {
		t.Fatal(err)
	}
	all, err := m.Objects(ctx, w, since)
	if err != nil {
		t.Fatal(err)
	}
	all = slices.DeleteFunc(all, func(o reconcile.ProviderObject) bool { return o.ID != "ch_1" && o.ID != "re_1" })
	byID(got)
	byID(all)
	if diff := cmp.Diff(all, got); diff != "" {
		t.Errorf("Related's objects (-as Objects reads them +got):\n%s", diff)
	}
	// A window of whole seconds: one starting a fraction after ch_1's
	// creation does not hold it.
	if got, err := m.Related(ctx, reconcile.Window{From: at.Add(-time.Hour + time.Millisecond), To: at}, Related{IDs: []string{"ch_1"}}, since); err != nil || len(got) != 0 {
		t.Errorf("Related of a window starting after ch_1 = %v, %v; want nothing", ids(got), err)
	}

	keys, err := m.KeysOf(ctx, []string{"ch_1", "ch_old", "ch_2"}, reconcile.Window{From: at.Add(-2 * time.Hour), To: at})
	if err != nil {
		t.Fatal(err)
	}
	want := key("ch_1", at.Add(-time.Hour))
	want.Account = "acct_1"
	if diff := cmp.Diff([]reconcile.KeyEvidence{want}, keys); diff != "" {
		t.Errorf("KeysOf (-want +got):\n%s", diff)
	}
	if keys, err := m.KeysOf(ctx, nil, w); err != nil || len(keys) != 0 {
		t.Errorf("KeysOf of no ids = %v, %v; want nothing", keys, err)
	}
	if keys, err := m.KeysOf(ctx, []string{"ch_3"}, reconcile.Window{From: at.Add(-time.Hour).Add(time.Millisecond), To: at}); err != nil || len(keys) != 0 {
		t.Errorf("KeysOf of a window starting after ch_3's event = %v, %v; want nothing", keys, err)
	}
}

// cmpEmpty takes a nil slice for an empty one.
var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })

// On an account's mirror of 20,000 objects and keys, analysed, Related
// and KeysOf look their terms up by index (migrations 00013 and 00014,
// and provider_keys' primary key): no sequential scan of the mirror.
func TestMirrorRelatedUsesIndexes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	// 20,000 objects of acct_1 and 2,000 of the platform: intents, their
	// charges (every fifth with no customer) and refunds of the charges.
	// Every tenth charge names its obligation in its metadata, every
	// 101st intent links to none, every 997th object is pending, every
	// seventh charge names an obligation settled two minutes before it.
	e.exec(`INSERT INTO reconcile.provider_objects (account, id, kind, amount, currency, status, raw_status, target,
			payment_intent, charge, customer, created, seen_at, metadata, linked_to, names_from)
		SELECT a, k || '_' || n, CASE k WHEN 'pi' THEN 'payment_intent' WHEN 'ch' THEN 'charge' ELSE 'refund' END,
			1000 + n, 'usd', CASE WHEN n % 997 = 0 THEN 'pending' ELSE 'succeeded' END, 'succeeded',
			CASE k WHEN 'pi' THEN 'ch_' || n WHEN 're' THEN 'ch_' || n END,
			CASE k WHEN 're' THEN NULL ELSE CASE WHEN k = 'ch' THEN 'pi_' || n END END,
			CASE k WHEN 're' THEN 'ch_' || n END,
			CASE WHEN k = 'ch' AND n % 5 = 0 THEN NULL WHEN k = 're' THEN NULL ELSE 'cus_' || n % 2000 END,
			$1::timestamptz - (n % 3000) * interval '1 minute', $1::timestamptz,
			CASE WHEN k = 'ch' AND n % 10 = 0 THEN jsonb_build_object('obligation_id', 'charge:' || n) END,
			CASE WHEN k <> 'pi' OR n % 101 <> 0 THEN 'charge:' || n END,
			CASE WHEN k = 'ch' AND n % 7 = 0 THEN $1::timestamptz - (n % 3000 + 2) * interval '1 minute' END
		FROM (VALUES ('acct_1', 6667), ('', 667)) AS acc(a, total), generate_series(1, total) AS n,
			(VALUES ('pi'), ('ch'), ('re')) AS kinds(k)`, at)
	e.exec(`INSERT INTO reconcile.provider_keys (account, object_id, key, object_kind, event_id, event_type, created)
		SELECT 'acct_1', 'ch_' || n, 'k-' || n, 'charge', 'evt_' || n, 'charge.succeeded', $1::timestamptz - (n % 3000) * interval '1 minute'
		FROM generate_series(1, 20000) AS n`, at)
	e.exec(`ANALYZE reconcile.provider_objects`)
	e.exec(`ANALYZE reconcile.provider_keys`)
	if n := e.count(`SELECT count(*) FROM reconcile.provider_objects WHERE account = 'acct_1'`); n < 20000 {
		t.Fatalf("%d objects of acct_1", n)
	}

	m := NewMirror(e.pool).ForAccount("acct_1")
	w := reconcile.Window{From: at.Add(-72 * time.Hour), To: at.Add(time.Second)}
	q := Related{IDs: []string{"ch_7", "pi_8"}, Intents: []string{"pi_9", "pi_10"}, Charges: []string{"ch_11", "ch_12"},
		Twins: []CustomerAmount{{"cus_13", 1013, ever, never}, {"cus_15", 1015, ever, never}}, Keys: []string{"k-16"}}
	got, err := m.Related(ctx, w, q, at)
	if err != nil {
		t.Fatal(err)
	}
	// ch_15 has no customer: its intent pi_15's, cus_15, with its amount.
	want := []string{"ch_10", "ch_13", "ch_15", "ch_16", "ch_7", "ch_9", "pi_11", "pi_12", "pi_13", "pi_15", "pi_8", "re_11", "re_12"}
	slices.Sort(want)
	if diff := cmp.Diff(want, ids(got)); diff != "" {
		t.Errorf("Related (-want +got):\n%s", diff)
	}
	customers, amounts := []string{"cus_13", "cus_15"}, []int64{1013, 1015}
	los, his := []time.Time{ever, ever}, []time.Time{never, never}
	plans := map[string]struct {
		sql     string
		args    []any
		indexes []string
		// customOnly: the statement runs only under force_custom_plan
		// (Related sets it), so its generic plan is not looked at.
		customOnly bool
		// noSeqScan: the plan is read without sequential scans, to show
		// every term has an index path: on 20,000 objects the planner may
		// rather scan the few with metadata, on a million it takes the
		// GIN index.
		noSeqScan bool
	}{
		"Related": {relatedSQL, []any{"acct_1", w.From, w.To, at, q.IDs, q.Intents, q.Charges, customers, amounts, los, his, q.Keys,
			[]string{}, []string{}, false, false},
			[]string{"provider_objects_pkey", "provider_objects_intent_idx", "provider_objects_charge_idx",
				"provider_objects_target_idx", "provider_objects_customer_idx", "provider_objects_bare_charges_idx",
				"provider_keys_key_idx"}, true, false},
		// An incremental pass's terms (migration 00014).
		"Related, incremental": {relatedSQL, []any{"acct_1", w.From, w.To, at, q.IDs, []string{}, []string{}, []string{}, []int64{},
			[]time.Time{}, []time.Time{}, []string{}, []string{"charge:5"}, []string{`{"obligation_id": "charge:6"}`}, true, true},
			[]string{"provider_objects_pkey", "provider_objects_linked_idx", "provider_objects_metadata_idx",
				"provider_objects_pending_idx", "provider_objects_unlinked_intents_idx"}, true, true},
		// What an incremental pass asks of the obligations naming an
		// object it retrieved outside the coverage.
		"Named": {namedSQL, []any{"acct_1", w.From, w.To, []string{"ch_7"}, at, []string{"k-16"}, w.From, w.To,
			[]string{"meta_id:"}, []string{"charge:6"}, []string{`{"obligation_id": "charge:6"}`}, []string{"ch_8"}},
			[]string{"provider_objects_pkey", "provider_keys_key_idx", "provider_objects_metadata_idx"}, false, true},
		// How far back the window's records a nightly pass did not read
		// name (migration 00018).
		"NamesBefore": {namesBeforeSQL, []any{"acct_1", at, w.From, w.To, at}, []string{"provider_objects_names_from_idx"}, false, false},
		"KeysOf": {`SELECT ` + mirrorKeyColumns + ` FROM reconcile.provider_keys WHERE account = $3 AND object_id = ANY($4::text[])
			AND created >= $1 AND created < $2`, []any{w.From, w.To, "acct_1", []string{"ch_1", "ch_2"}},
			[]string{"provider_keys_pkey"}, false, false},
	}
	for name, p := range plans {
		// As planned for these values, and as a prepared statement's
		// generic plan, which pgx may come to run.
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if p.customOnly && mode != "force_custom_plan" {
				continue
			}
			plan := explainPlan(t, e, mode, p.sql, p.args, p.noSeqScan)
			if strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s (%s) scans the mirror sequentially:\n%s", name, mode, plan)
			}
			for _, ix := range p.indexes {
				if !strings.Contains(plan, ix) {
					t.Errorf("%s (%s) does not use %s:\n%s", name, mode, ix, plan)
				}
			}
		}
	}
	keys, err := m.KeysOf(ctx, []string{"ch_1", "ch_2"}, w)
	if err != nil || len(keys) != 2 {
		t.Errorf("KeysOf = %d keys, %v; want 2", len(keys), err)
	}
}

// explainPlan is the plan PostgreSQL chooses for sql with args, in text,
// under plan_cache_mode mode: prepared by name and executed, so that a
// generic plan is the one a prepared statement runs.
func explainPlan(tb testing.TB, e *env, mode, sql string, args []any, noSeqScan bool) string {
	tb.Helper()
	ctx := context.Background()
	var lines []string
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Release()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode); err != nil {
			return err
		}
		if noSeqScan {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "PREPARE explained AS "+sql); err != nil {
			return err
		}
		params := make([]string, len(args))
		for i := range args {
			params[i] = fmt.Sprintf("$%d", i+1)
		}
		// EXECUTE takes no bound parameters: pgx writes them in.
		rows, err := tx.Query(ctx, "EXPLAIN EXECUTE explained("+strings.Join(params, ", ")+")",
			append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
		if err != nil {
			return err
		}
		if lines, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DEALLOCATE explained")
		return err
	})
	if err != nil {
		tb.Fatalf("explain (%s): %v", mode, err)
	}
	return strings.Join(lines, "\n")
}

// Named tells which names the view's account's records hold: objects by
// id and by either metadata key, created in the window and seen since,
// and keys told in the keys' window; nothing of another account's, of an
// object seen before since or created outside the window, nor a metadata
// value under another key, nor an object the asker holds.
func TestMirrorNamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	since := at.Add(-10 * time.Minute)
	ch := func(id string, created time.Time, meta map[string]string) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: reconcile.Charge, Money: reconcile.Money{Amount: 100, Currency: "usd"},
			Status: reconcile.Succeeded, RawStatus: "succeeded", Metadata: meta, Created: reconcile.StampOf(created)}
	}
	key := func(id, k string, created time.Time) reconcile.KeyEvidence {
		return reconcile.KeyEvidence{ObjectID: id, ObjectKind: reconcile.Charge, Key: k, EventID: "evt_" + k,
			EventType: "charge.succeeded", Created: reconcile.StampOf(created)}
	}
	hour := at.Add(-time.Hour)
	m := NewMirror(e.pool).ForAccount("acct_1")
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at,
		Seen: []SeenObjects{
			{At: since, Objects: []reconcile.ProviderObject{
				ch("ch_1", hour, map[string]string{"obligation_id": "charge:1", "idempotency_key": "key-9"}),
				ch("ch_2", hour, map[string]string{"note": "charge:note", "obligation_id": "charge:2 "}),
				ch("ch_old", at.Add(-100*time.Hour), map[string]string{"obligation_id": "charge:old"}),
			}},
			{At: since.Add(-time.Hour), Objects: []reconcile.ProviderObject{ch("ch_stale", hour, map[string]string{"obligation_id": "charge:stale"})}},
		},
		Keys: []reconcile.KeyEvidence{key("ch_1", "k-1", hour), key("ch_old", "k-old", at.Add(-100*time.Hour))},
	}); err != nil {
		t.Fatal(err)
	}
	if err := NewMirror(e.pool).ForAccount("acct_2").Save(ctx, MirrorUpdate{RunID: "run_1", Now: at,
		Seen: []SeenObjects{{At: since, Objects: []reconcile.ProviderObject{ch("ch_9", hour, map[string]string{"obligation_id": "charge:9"})}}},
		Keys: []reconcile.KeyEvidence{key("ch_9", "k-9", hour)},
	}); err != nil {
		t.Fatal(err)
	}
	w, kw := reconcile.Window{From: at.Add(-72 * time.Hour), To: at}, reconcile.Window{From: at.Add(-2 * time.Hour), To: at}
	n := Naming{
		IDs:       []string{"ch_1", "ch_old", "ch_stale", "ch_9", "ch_none"},
		Keys:      []string{"k-1", "k-old", "k-9", "k-none"},
		MetaIDs:   []string{"charge:1", "charge:old", "charge:stale", "charge:9", "charge:note", "charge:2", "key-9"},
		MetaKeys:  []string{"key-9", "charge:1"},
		MetaIDKey: "obligation_id", MetaKeyKey: "idempotency_key",
	}
	got, err := m.Named(ctx, w, kw, since, n)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"id:ch_1": true, "key:k-1": true, "meta_id:charge:1": true, "meta_key:key-9": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Named (-want +got):\n%s", diff)
	}
	// An object the asker holds is not asked of the mirror, by id or
	// metadata: its copy there may be older. Its key evidence stands.
	n.Held = []string{"ch_1", "ch_none"}
	if got, err = m.Named(ctx, w, kw, since, n); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"key:k-1": true}, got); diff != "" {
		t.Errorf("Named of what ch_1's holder does not hold (-want +got):\n%s", diff)
	}
	n.Held = nil
	// No metadata key configured: no metadata asked.
	n.MetaIDKey, n.MetaKeyKey = "", ""
	if got, err = m.Named(ctx, w, kw, since, n); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"id:ch_1": true, "key:k-1": true}, got); diff != "" {
		t.Errorf("Named without metadata keys (-want +got):\n%s", diff)
	}
}

// What a matching pass kept of how far back each object names comes back
// by NamesBefore, of the objects created in the window and seen since,
// of the view's account alone; a later save rewrites it for the objects
// its pass matched, whether it saves them whole or only relinks them, and
// leaves it for those it did not match. Related tells it with the link.
func TestMirrorNamesBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	since, hour := at.Add(-10*time.Minute), at.Add(-time.Hour)
	old1, old2 := at.Add(-40*24*time.Hour), at.Add(-30*24*time.Hour)
	w := reconcile.Window{From: at.Add(-72 * time.Hour), To: at}
	mark := MatchMark{RunID: "run_1", MatchedAt: at, Window: w, Digest: "d"}
	saved := func(links ...ObjectLink) func(string) (ObjectLink, bool) {
		return func(id string) (ObjectLink, bool) {
			i := slices.IndexFunc(links, func(l ObjectLink) bool { return l.ObjectID == id })
			if i < 0 {
				return ObjectLink{}, false
			}
			return links[i], true
		}
	}
	m, other := NewMirror(e.pool).ForAccount("acct_1"), NewMirror(e.pool).ForAccount("acct_2")
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at,
		Seen: []SeenObjects{
			{At: since, Objects: []reconcile.ProviderObject{mirrorCharge("ch_a", hour, nil), mirrorCharge("ch_b", hour, nil),
				mirrorCharge("ch_c", hour, nil), mirrorCharge("ch_out", at.Add(-100*time.Hour), nil)}},
			{At: since.Add(-time.Hour), Objects: []reconcile.ProviderObject{mirrorCharge("ch_stale", hour, nil)}},
		},
		Match: &MatchSave{Mark: mark, LinkOf: saved(ObjectLink{ObjectID: "ch_a", ObligationID: "charge:a", NamesFrom: old1},
			ObjectLink{ObjectID: "ch_b", NamesFrom: old2}, ObjectLink{ObjectID: "ch_c", ObligationID: "charge:c"},
			ObjectLink{ObjectID: "ch_out", NamesFrom: old1}, ObjectLink{ObjectID: "ch_stale", NamesFrom: old1})},
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at,
		Seen:  []SeenObjects{{At: since, Objects: []reconcile.ProviderObject{mirrorCharge("ch_9", hour, nil)}}},
		Match: &MatchSave{Mark: mark, LinkOf: saved(ObjectLink{ObjectID: "ch_9", NamesFrom: old1})},
	}); err != nil {
		t.Fatal(err)
	}
	namesBefore := func(before time.Time) []ObjectLink {
		t.Helper()
		got, err := m.NamesBefore(ctx, w, before, since)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b ObjectLink) int { return strings.Compare(a.ObjectID, b.ObjectID) })
		return got
	}
	if diff := cmp.Diff([]ObjectLink{{ObjectID: "ch_a", NamesFrom: old1}, {ObjectID: "ch_b", NamesFrom: old2}}, namesBefore(at)); diff != "" {
		t.Errorf("NamesBefore (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]ObjectLink{{ObjectID: "ch_a", NamesFrom: old1}}, namesBefore(old2)); diff != "" {
		t.Errorf("NamesBefore the second's (-want +got):\n%s", diff)
	}
	// The next pass matched ch_a and ch_c again from the mirror and saved
	// ch_b whole without matching it.
	mark.RunID = "run_2"
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_2", Now: at,
		Seen:  []SeenObjects{{At: at, Objects: []reconcile.ProviderObject{mirrorCharge("ch_b", hour, nil)}}},
		Match: &MatchSave{Mark: mark, LinkOf: saved(), Relinked: []ObjectLink{{ObjectID: "ch_a", ObligationID: "charge:a"}, {ObjectID: "ch_c", NamesFrom: old2}}},
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ObjectLink{{ObjectID: "ch_b", NamesFrom: old2}, {ObjectID: "ch_c", NamesFrom: old2}}, namesBefore(at)); diff != "" {
		t.Errorf("NamesBefore after the second save (-want +got):\n%s", diff)
	}
	var told []ObjectLink
	if _, err := m.Related(ctx, w, Related{IDs: []string{"ch_a", "ch_c"}, Linked: func(l ObjectLink) { told = append(told, l) }}, since); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(told, func(a, b ObjectLink) int { return strings.Compare(a.ObjectID, b.ObjectID) })
	if diff := cmp.Diff([]ObjectLink{{ObjectID: "ch_a", ObligationID: "charge:a"}, {ObjectID: "ch_c", NamesFrom: old2}}, told); diff != "" {
		t.Errorf("Related told (-want +got):\n%s", diff)
	}
}

// A pass that saw an object before the mirror did (it listed it minutes
// back, and a pass minutes before it retrieved it since) keeps the
// mirror's later state of it and still leaves its link: the next pass
// reaches obligations by it.
func TestMirrorKeepsTheLinkOfAnObjectItSawLater(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	w := reconcile.Window{From: at.Add(-72 * time.Hour), To: at}
	m := NewMirror(e.pool).ForAccount("acct_1")
	failed := mirrorCharge("ch_a", at.Add(-time.Hour), nil)
	failed.Status, failed.RawStatus = reconcile.Failed, "failed"
	// The ad hoc pass retrieved ch_a at its clock, failed, and matched it
	// to nothing.
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at,
		Seen:  []SeenObjects{{At: at, Objects: []reconcile.ProviderObject{failed}}},
		Match: &MatchSave{Mark: MatchMark{RunID: "run_1", MatchedAt: at, Window: w, Digest: "d"}, LinkOf: func(id string) (ObjectLink, bool) { return ObjectLink{ObjectID: id}, true }},
	}); err != nil {
		t.Fatal(err)
	}
	// The nightly pass five minutes later listed it as seen ten minutes
	// before its clock, succeeded, and linked it to charge:a.
	later := at.Add(5 * time.Minute)
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_2", Now: later,
		Seen: []SeenObjects{{At: later.Add(-10 * time.Minute), Objects: []reconcile.ProviderObject{mirrorCharge("ch_a", at.Add(-time.Hour), nil)}}},
		Match: &MatchSave{Mark: MatchMark{RunID: "run_2", MatchedAt: later, Window: w, Digest: "d"},
			LinkOf: func(id string) (ObjectLink, bool) { return ObjectLink{ObjectID: id, ObligationID: "charge:a"}, true }},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := m.Get(ctx, []string{"ch_a"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Object.Status != reconcile.Failed || !got[0].SeenAt.Equal(at) {
		t.Errorf("the mirror holds %+v, want ch_a failed, seen at %s", got, at)
	}
	var told []ObjectLink
	if _, err := m.Related(ctx, w, Related{IDs: []string{"ch_a"}, Linked: func(l ObjectLink) { told = append(told, l) }}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]ObjectLink{{ObjectID: "ch_a", ObligationID: "charge:a"}}, told); diff != "" {
		t.Errorf("Related told (-want +got):\n%s", diff)
	}
}

// OwnWrites counts the transitions of the passes whose matching the
// account's mirror holds, saved with their marks, and of no other: not
// those of a pass whose save failed, nor another account's, nor those of
// passes a week older than the newest mark.
func TestOwnWritesAreThoseOfSavedPasses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	w := reconcile.Window{From: at.Add(-72 * time.Hour), To: at}
	m := NewMirror(e.pool).ForAccount("acct_1")
	save := func(mm *Mirror, run string, when time.Time) {
		t.Helper()
		mark := MatchMark{RunID: run, MatchedAt: when, Window: w, Digest: "d"}
		if err := mm.Save(ctx, MirrorUpdate{RunID: run, Now: when,
			Match: &MatchSave{Mark: mark, LinkOf: func(string) (ObjectLink, bool) { return ObjectLink{}, false }}}); err != nil {
			t.Fatal(err)
		}
	}
	save(m, "run_1", at)
	save(m, "run_2", at.Add(time.Minute))
	save(NewMirror(e.pool).ForAccount("acct_2"), "run_4", at.Add(3*time.Minute))
	for _, tr := range []struct {
		obligation, run string
		at              time.Time
	}{
		{"charge:1", "run_1", at},
		{"charge:2", "run_2", at.Add(time.Minute)},
		{"charge:3", "run_3", at.Add(2 * time.Minute)}, // its save failed
		{"charge:4", "run_1", at},
		{"charge:4", "run_3", at.Add(2 * time.Minute)},
		{"charge:5", "run_4", at.Add(3 * time.Minute)}, // another account's pass
	} {
		if _, err := e.pool.Exec(ctx, `INSERT INTO reconcile.transitions (obligation_id, from_state, to_state, run_id, at)
			VALUES ($1, 'CONFIRMATION_UNKNOWN', 'PAID', $2, $3)`, tr.obligation, tr.run, tr.at); err != nil {
			t.Fatal(err)
		}
	}
	own := func() map[string]time.Time {
		t.Helper()
		got, err := m.OwnWrites(ctx, at.Add(-10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := map[string]time.Time{"charge:1": at, "charge:2": at.Add(time.Minute), "charge:4": at}
	if diff := cmp.Diff(want, own()); diff != "" {
		t.Errorf("own writes (-want +got):\n%s", diff)
	}
	save(m, "run_9", at.Add(8*24*time.Hour))
	if got := own(); len(got) != 0 {
		t.Errorf("own writes after a mark eight days later: %v, want none (run_1 and run_2 forgotten)", got)
	}
}

// Halves tells the other half of a payment from whatever the view's
// account's mirror saw of it, however old and whenever seen: a charge's
// intent, an intent's charges (by their own field and by its latest
// charge). A refund is no half; another account's payments are not the
// view's.
func TestMirrorHalves(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	at := t0()
	obj := func(id string, kind reconcile.ObjectKind, pi, charge string, created time.Time) reconcile.ProviderObject {
		return reconcile.ProviderObject{ID: id, Kind: kind, Money: reconcile.Money{Amount: 5000, Currency: "usd"},
			Status: reconcile.Succeeded, RawStatus: "succeeded", PaymentIntent: pi, Charge: charge, Created: reconcile.StampOf(created)}
	}
	recent, old := at.Add(-time.Hour), at.Add(-400*24*time.Hour)
	m := NewMirror(e.pool).ForAccount("acct_1")
	if err := m.Save(ctx, MirrorUpdate{RunID: "run_1", Now: at, Seen: []SeenObjects{
		{At: at, Objects: []reconcile.ProviderObject{
			obj("pi_1", reconcile.PaymentIntent, "", "ch_2", recent),
			obj("ch_2", reconcile.Charge, "pi_1", "", recent),
			obj("re_1", reconcile.Refund, "pi_1", "ch_2", recent),
			obj("pi_3", reconcile.PaymentIntent, "", "", recent),
		}},
		// A failed attempt of pi_1's, old and seen long ago; and a charge
		// of an intent the mirror never saw.
		{At: old, Objects: []reconcile.ProviderObject{
			obj("ch_1", reconcile.Charge, "pi_1", "", old),
			obj("ch_4", reconcile.Charge, "pi_4", "", old),
		}},
	}}); err != nil {
		t.Fatal(err)
	}
	other := NewMirror(e.pool).ForAccount("acct_2")
	if err := other.Save(ctx, MirrorUpdate{RunID: "run_2", Now: at, Seen: []SeenObjects{{At: at, Objects: []reconcile.ProviderObject{
		obj("ch_9", reconcile.Charge, "pi_3", "", recent),
		obj("pi_9", reconcile.PaymentIntent, "", "ch_2", recent),
	}}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		ids, want []string
	}{
		{"none", nil, nil},
		{"a charge's intent", []string{"ch_2"}, []string{"pi_1"}},
		{"an old charge's intent", []string{"ch_1"}, []string{"pi_1"}},
		{"an intent's charges", []string{"pi_1"}, []string{"ch_1", "ch_2"}},
		{"an intent the mirror never saw", []string{"pi_4"}, []string{"ch_4"}},
		{"an intent with no charge", []string{"pi_3"}, nil},
		{"a refund is no half", []string{"re_1"}, nil},
		{"unknown and empty ids", []string{"ch_none", ""}, nil},
		{"several", []string{"ch_2", "pi_1", "ch_4"}, []string{"ch_1", "ch_2", "pi_1", "pi_4"}},
	} {
		got, err := m.Halves(ctx, c.ids)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: Halves(%q) = %q, want %q", c.name, c.ids, got, c.want)
		}
	}
}
