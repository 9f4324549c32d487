package runner_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/bench"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/store/storetest"
	"reconcile/internal/stripesim"
)

const testKey = "sk_test_runner0123456789abcdefSECRET"

// t0 is a whole second, as Stripe's created times are.
var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// env is one reconciler's world: the Stripe test server, a database with
// the obligations table and the reconcile schema, and a clock.
type env struct {
	tb     testing.TB
	srv    *stripesim.Server
	pool   *pgxpool.Pool
	clock  time.Time
	stripe *sources.Stripe
	store  *store.Store
	obl    *sources.Obligations
	mirror *store.Mirror
	// provider wraps the reader where a test needs Stripe's event
	// retention; nil uses the reader as it is.
	provider func(*sources.Stripe) runner.Provider
	// noSkew runs the matcher with no clock skew allowed; early ends a
	// pass's window that long before its clock, at the whole second.
	noSkew bool
	early  time.Duration
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	srv := stripesim.New(testKey)
	base, stop, err := srv.Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	tb.Cleanup(func() { srv.AssertNoWrites(tb) })
	pool, _ := pgtest.NewMigrated(tb, store.SchemaDigest(), store.Migrate)
	st, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		tb.Fatal(err)
	}
	obl, err := sources.NewObligations(pool, reconcile.DefaultObligationTable())
	if err != nil {
		tb.Fatal(err)
	}
	so := sources.StripeOptionsFrom(config.Default())
	so.APIKey, so.BaseURL, so.Rate = testKey, base, math.Inf(1)
	so.RetryBase, so.RetryMax, so.RequestTimeout = time.Millisecond, 4*time.Millisecond, 10*time.Second
	stripe, err := sources.NewStripe(so)
	if err != nil {
		tb.Fatal(err)
	}
	return &env{tb: tb, srv: srv, pool: pool, clock: t0, stripe: stripe, store: st, obl: obl, mirror: store.NewMirror(pool)}
}

// runner returns a runner on e's clock, with the mirror or without (a
// pass from scratch).
func (e *env) runner(mirrored bool) *runner.Runner {
	var p runner.Provider = e.stripe
	if e.provider != nil {
		p = e.provider(e.stripe)
	}
	r := &runner.Runner{Provider: p, Obligations: e.obl, Store: e.store, Matcher: matcher.OptionsFrom(config.Default().Matcher),
		Now: func() time.Time { return e.clock }, Logger: slog.New(slog.DiscardHandler)}
	if e.noSkew {
		r.Matcher.ClockSkew = 0
	}
	if mirrored {
		r.Mirror = e.mirror
	}
	return r
}

// pass runs one pass over the 72 hours before the clock (less e.early).
func (e *env) pass(mirrored bool, req runner.Request) *runner.Outcome {
	e.tb.Helper()
	if req.Window == (reconcile.Window{}) {
		to := e.clock.Add(-e.early).Truncate(time.Second)
		req.Window = reconcile.Window{From: to.Add(-72 * time.Hour), To: to}
	}
	if req.Trigger == "" {
		req.Trigger = reconcile.TriggerManual
	}
	out, err := e.runner(mirrored).Run(context.Background(), req)
	if err != nil {
		e.tb.Fatalf("pass at %s (mirror %t, %+v): %v", e.clock.Format(time.RFC3339), mirrored, req, err)
	}
	return out
}

func (e *env) add(key string, objs ...reconcile.ProviderObject) {
	e.tb.Helper()
	for _, o := range objs {
		if err := e.srv.Add(o, key); err != nil {
			e.tb.Fatal(err)
		}
	}
}

func (e *env) update(id string, at time.Time, change func(*reconcile.ProviderObject)) {
	e.tb.Helper()
	if err := e.srv.Update(id, at, change); err != nil {
		e.tb.Fatal(err)
	}
}

// load puts a bench.World on the server and in the obligations table.
func (e *env) load(w bench.World) {
	e.tb.Helper()
	keys := w.KeyOf()
	for _, o := range w.Objects {
		e.add(keys[o.ID], o)
	}
	pgtest.InsertObligations(e.tb, e.pool, w.Obligations...)
}

// reads counts what the server handed out since its stats were reset.
func (e *env) reads() int { return e.srv.Stats().Reads() }

// sameResult fails unless two passes concluded the same.
func sameResult(tb testing.TB, what string, want, got *runner.Outcome) {
	tb.Helper()
	if got.Sync.Match == runner.MatchIncremental {
		sameConclusions(tb, what, want, got)
		return
	}
	if diff := cmp.Diff(want.Result, got.Result); diff != "" {
		tb.Errorf("%s: result differs from a pass from scratch (-scratch +got):\n%s", what, diff)
	}
}

// sameConclusions checks that a pass matching incrementally (got)
// concludes what a pass matching whole (want) concludes: the same findings
// and transitions, and of every object it matched again the same bucket
// and links (docs/design.md, "Incremental matching").
func sameConclusions(tb testing.TB, what string, want, got *runner.Outcome) {
	tb.Helper()
	if diff := cmp.Diff(want.Result.Findings, got.Result.Findings); diff != "" {
		tb.Errorf("%s: findings differ from a whole match's (-whole +incremental):\n%s", what, diff)
	}
	if diff := cmp.Diff(want.Result.Transitions, got.Result.Transitions); diff != "" {
		tb.Errorf("%s: transitions differ from a whole match's (-whole +incremental):\n%s", what, diff)
	}
	for i, id := range got.Result.ObjectIDs {
		if b := bucket(want.Result, id); b != got.Result.Buckets[i] {
			tb.Errorf("%s: %s in bucket %q, in a whole match %q", what, id, got.Result.Buckets[i], b)
		}
	}
	linked := map[reconcile.Link]bool{}
	for _, l := range want.Result.Links {
		linked[l] = true
	}
	for _, l := range got.Result.Links {
		if !linked[l] {
			tb.Errorf("%s: link %+v, not a whole match's", what, l)
		}
	}
}

// forgetMatches drops every account's match mark: the next pass matches
// whole over what it reads, incrementally or not.
func (e *env) forgetMatches() {
	e.tb.Helper()
	if _, err := e.pool.Exec(context.Background(), `DELETE FROM reconcile.match_marks`); err != nil {
		e.tb.Fatal(err)
	}
}

// bucket is the bucket res put the object with id in ("" if none).
func bucket(res matcher.Result, id string) matcher.Bucket {
	b, _ := res.Bucket(id)
	return b
}

// A second pass over an unchanged history reads at most 1% of what the
// first read, and concludes what a pass from scratch concludes.
func TestSecondPassReadsLittle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.load(bench.NewWorldWith(4000, t0, bench.WorldOptions{Newest: 2 * time.Minute}))

	e.srv.ResetStats()
	first := e.pass(true, runner.Request{})
	firstReads := e.reads()
	if first.Sync.Mode != runner.SyncFull || !first.Sync.Saved {
		t.Fatalf("first pass: mode %q (%s), saved %t; want full and saved", first.Sync.Mode, first.Sync.Reason, first.Sync.Saved)
	}

	e.clock = t0.Add(time.Minute)
	e.srv.ResetStats()
	second := e.pass(true, runner.Request{})
	secondReads := e.reads()
	if second.Sync.Mode != runner.SyncIncremental || !second.Sync.Saved {
		t.Fatalf("second pass: mode %q (%s), saved %t; want incremental and saved", second.Sync.Mode, second.Sync.Reason, second.Sync.Saved)
	}
	if secondReads*100 > firstReads {
		t.Errorf("second pass read %d objects and events, first %d: want at most 1%%", secondReads, firstReads)
	}
	if second.Sync.Match != runner.MatchIncremental || second.Sync.Rematched*10 > 4000 {
		t.Errorf("second pass: match %q (%s), %d obligations matched again; want incremental, a few",
			second.Sync.Match, second.Sync.MatchReason, second.Sync.Rematched)
	}
	// What the first pass's retrievals found absent the second takes from
	// the mirror, and finds absent still: it asks Stripe for none of it.
	absent := func(out *runner.Outcome) []string {
		var ids []string
		for _, l := range out.Lookups {
			if l.Result == reconcile.LookupNotFound {
				ids = append(ids, l.ID)
			}
		}
		return ids
	}
	if a1, a2 := absent(first), absent(second); len(a1) == 0 || !slices.Equal(a1, a2) || second.Sync.Retrieved != 0 {
		t.Errorf("absent ids: first pass %v, second %v, second retrieved %d; want the same, some, none retrieved",
			a1, a2, second.Sync.Retrieved)
	}
	t.Logf("first pass read %d, second %d (%.2f%%): %+v", firstReads, secondReads,
		100*float64(secondReads)/float64(firstReads), second.Sync)

	e.clock = t0.Add(2 * time.Minute)
	scratch := e.pass(false, runner.Request{DryRun: true})
	incremental := e.pass(true, runner.Request{DryRun: true})
	if incremental.Sync.Mode != runner.SyncIncremental {
		t.Errorf("dry run: mode %q (%s), want incremental", incremental.Sync.Mode, incremental.Sync.Reason)
	}
	sameResult(t, "incremental dry run", scratch, incremental)
	// Matched whole over what the mirror holds, it concludes the same,
	// taking nearly everything from the mirror.
	e.forgetMatches()
	whole := e.pass(true, runner.Request{DryRun: true})
	if whole.Sync.Mode != runner.SyncIncremental || whole.Sync.Match != runner.MatchFull || whole.Sync.Mirrored < 3900 {
		t.Errorf("without a match mark: mode %q, match %q, %d objects from the mirror; want incremental, full, nearly all",
			whole.Sync.Mode, whole.Sync.Match, whole.Sync.Mirrored)
	}
	sameResult(t, "whole match of an incremental read", scratch, whole)
	if len(scratch.Result.Findings) == 0 || len(first.Transitions) == 0 {
		t.Errorf("the world gave %d findings and %d transitions: the comparison proves little",
			len(scratch.Result.Findings), len(first.Transitions))
	}
}

// A refund pending at one pass and succeeded by the next is seen
// succeeded, although it is older than the overlap: the event of its
// change is read.
func TestPendingRefundSucceedsLater(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := t0.Add(-3 * time.Hour)
	charge := reconcile.ProviderObject{ID: "ch_4821", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(created.Add(-time.Hour))}
	refund := reconcile.ProviderObject{ID: "re_4821", Kind: reconcile.Refund, Money: reconcile.Money{Amount: 8900, Currency: "usd"},
		Status: reconcile.Pending, Target: "ch_4821", Charge: "ch_4821", Created: reconcile.StampOf(created)}
	e.add("key-charge-4821", charge)
	e.add("key-refund-4821", refund)
	pgtest.InsertObligations(t, e.pool,
		reconcile.Obligation{ID: "charge:4821", Kind: reconcile.Charge, IdempotencyKey: "key-charge-4821", ProviderID: "ch_4821",
			Money: charge.Money, State: reconcile.Paid, CreatedAt: reconcile.StampOf(charge.Created.Time()), PaidAt: reconcile.StampOf(charge.Created.Time())},
		reconcile.Obligation{ID: "refund:4821", Kind: reconcile.Refund, IdempotencyKey: "key-refund-4821", TargetID: "ch_4821",
			Money: refund.Money, State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created)})

	first := e.pass(true, runner.Request{})
	if len(first.Transitions) != 0 || len(first.Result.Findings) != 0 {
		t.Fatalf("first pass: %d transitions, findings %v; want none while the refund is pending", len(first.Transitions), first.Result.Findings)
	}
	e.update("re_4821", t0.Add(30*time.Minute), func(o *reconcile.ProviderObject) {
		o.Status, o.RawStatus = reconcile.Succeeded, "succeeded"
	})
	e.clock = t0.Add(time.Hour)
	e.srv.ResetStats()
	second := e.pass(true, runner.Request{})
	if second.Sync.Mode != runner.SyncIncremental {
		t.Fatalf("second pass: mode %q (%s), want incremental", second.Sync.Mode, second.Sync.Reason)
	}
	if second.Sync.Listed != 0 || second.Sync.Changed != 1 {
		t.Errorf("second pass listed %d objects and changed %d, want 0 and 1 (the refund, from its event)", second.Sync.Listed, second.Sync.Changed)
	}
	want := []reconcile.Transition{{ObligationID: "refund:4821", From: reconcile.ConfirmationUnknown, To: reconcile.Paid,
		FromRaw: "CONFIRMATION_UNKNOWN", ProviderID: "re_4821", Money: reconcile.Money{Amount: 8900, Currency: "usd"}}}
	if diff := cmp.Diff(want, second.Transitions); diff != "" {
		t.Errorf("second pass transitions (-want +got):\n%s", diff)
	}
	// The mirror keeps the succeeded state: the next pass needs no event
	// (matched whole, it reads the refund from the mirror).
	e.clock = t0.Add(2 * time.Hour)
	e.forgetMatches()
	third := e.pass(true, runner.Request{DryRun: true})
	if bucket(third.Result, "re_4821") != matcher.BucketLinked || third.Sync.Changed != 0 {
		t.Errorf("third pass: refund in bucket %q, %d changed; want linked from the mirror, none changed",
			bucket(third.Result, "re_4821"), third.Sync.Changed)
	}
}

// mutate changes a history the way a day at the provider does: new
// payments and a dashboard refund; a charge's metadata set afterwards; a
// refund that fails after it succeeded; an intent that finishes
// processing; and an intent's metadata edited, of which Stripe tells no
// event.
func mutate(e *env, day int, at time.Time) {
	e.tb.Helper()
	d := "d" + string(rune('0'+day))
	for i := range 5 {
		id := d + "-" + string(rune('a'+i))
		created := at.Add(-time.Duration(i+1) * time.Minute)
		ch := reconcile.ProviderObject{ID: "ch_" + id, Kind: reconcile.Charge, Money: reconcile.Money{Amount: int64(1000 + i), Currency: "usd"},
			Status: reconcile.Succeeded, Customer: "cus_" + id, Created: reconcile.StampOf(created)}
		e.add("key-"+id, ch)
		pgtest.InsertObligations(e.tb, e.pool, reconcile.Obligation{ID: "charge:" + id, Kind: reconcile.Charge,
			IdempotencyKey: "key-" + id, Money: ch.Money, State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created)})
	}
	e.add("", reconcile.ProviderObject{ID: "re_dash_" + d, Kind: reconcile.Refund, Money: reconcile.Money{Amount: 500, Currency: "usd"},
		Status: reconcile.Succeeded, Target: "ch_100", Charge: "ch_100", Created: reconcile.StampOf(at.Add(-30 * time.Minute))})
	switch day {
	case 1:
		e.update("ch_orphan202", at, func(o *reconcile.ProviderObject) {
			o.Metadata = map[string]string{"obligation_id": "charge:202"}
		})
		e.update("re_10", at, func(o *reconcile.ProviderObject) { o.Status, o.RawStatus = reconcile.Failed, "failed" })
		e.update("pi_late", at, func(o *reconcile.ProviderObject) { o.Status, o.RawStatus = reconcile.Succeeded, "succeeded" })
	case 2:
		e.update("pi_quiet", at, func(o *reconcile.ProviderObject) {
			o.Metadata = map[string]string{"obligation_id": "charge:quiet"}
		})
	}
}

// After incremental passes over a changing history, an incremental pass,
// a --full pass and a pass from scratch conclude the same; and a --full
// pass that is applied leaves a mirror from which the next incremental
// pass concludes the same again.
func TestFullAfterIncrementalFindsWhatScratchFinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.load(bench.NewWorldWith(2000, t0, bench.WorldOptions{Newest: 2 * time.Hour}))
	// An intent still processing, and one nobody links to until its
	// metadata is edited (no event tells that).
	late := reconcile.ProviderObject{ID: "pi_late", Kind: reconcile.PaymentIntent, Money: reconcile.Money{Amount: 7000, Currency: "eur"},
		Status: reconcile.Pending, RawStatus: "processing", Created: reconcile.StampOf(t0.Add(-5 * time.Hour))}
	quiet := reconcile.ProviderObject{ID: "pi_quiet", Kind: reconcile.PaymentIntent, Money: reconcile.Money{Amount: 4200, Currency: "eur"},
		Status: reconcile.Succeeded, RawStatus: "succeeded", Created: reconcile.StampOf(t0.Add(-6 * time.Hour))}
	e.add("key-late", late)
	e.add("", quiet)
	pgtest.InsertObligations(t, e.pool,
		reconcile.Obligation{ID: "charge:late", Kind: reconcile.Charge, IdempotencyKey: "key-late", Money: late.Money,
			State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(late.Created.Time())},
		reconcile.Obligation{ID: "charge:quiet", Kind: reconcile.Charge, IdempotencyKey: "key-quiet", Money: quiet.Money,
			State: reconcile.Paid, CreatedAt: reconcile.StampOf(quiet.Created.Time()), PaidAt: reconcile.StampOf(quiet.Created.Time())})

	e.pass(true, runner.Request{})
	for day := 1; day <= 2; day++ {
		e.clock = t0.Add(time.Duration(day) * 24 * time.Hour)
		mutate(e, day, e.clock.Add(-2*time.Hour))
		out := e.pass(true, runner.Request{})
		if out.Sync.Mode != runner.SyncIncremental {
			t.Fatalf("day %d: mode %q (%s), want incremental", day, out.Sync.Mode, out.Sync.Reason)
		}
		if day == 2 && (out.Sync.Verified == 0 || out.Sync.Refreshed != 1) {
			t.Errorf("day 2: verified %d, refreshed %d mirrored intents; want pi_quiet refreshed", out.Sync.Verified, out.Sync.Refreshed)
		}
		if b := bucket(out.Result, "pi_quiet"); day == 2 && b != matcher.BucketLinked {
			t.Errorf("day 2: pi_quiet in bucket %q, want linked by its edited metadata", b)
		}
	}

	e.clock = e.clock.Add(time.Hour)
	scratch := e.pass(false, runner.Request{DryRun: true})
	incremental := e.pass(true, runner.Request{DryRun: true})
	full := e.pass(true, runner.Request{DryRun: true, Full: true})
	if incremental.Sync.Mode != runner.SyncIncremental || full.Sync.Mode != runner.SyncFull {
		t.Fatalf("modes %q and %q, want incremental and full", incremental.Sync.Mode, full.Sync.Mode)
	}
	sameResult(t, "incremental", scratch, incremental)
	sameResult(t, "--full", scratch, full)
	e.forgetMatches()
	whole := e.pass(true, runner.Request{DryRun: true})
	sameResult(t, "incremental read, whole match", scratch, whole)
	for _, id := range []string{"ch_orphan202", "re_10", "pi_late", "pi_quiet"} {
		if bucket(whole.Result, id) != bucket(scratch.Result, id) {
			t.Errorf("%s: bucket %q, from scratch %q", id, bucket(whole.Result, id), bucket(scratch.Result, id))
		}
	}

	applied := e.pass(true, runner.Request{Full: true})
	if applied.Sync.Mode != runner.SyncFull || !applied.Sync.Saved {
		t.Fatalf("--full pass: mode %q, saved %t", applied.Sync.Mode, applied.Sync.Saved)
	}
	e.clock = e.clock.Add(time.Hour)
	again := e.pass(true, runner.Request{DryRun: true})
	if again.Sync.Mode != runner.SyncIncremental {
		t.Fatalf("after --full: mode %q (%s), want incremental", again.Sync.Mode, again.Sync.Reason)
	}
	sameResult(t, "incremental after --full", e.pass(false, runner.Request{DryRun: true}), again)
}

// The mirror keeps no card number or e-mail address readable in metadata
// (docs/design.md, "Untrusted text"), except in the values linking reads,
// which stay exact: an obligation id holding 16 digits that pass Luhn
// still links from the mirror as it does fresh, and masking a mirrored
// intent's note is not taken for a change when it is verified.
func TestMirrorMasksMetadataButLinkKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const note = "card 4242 4242 4242 4242 of jane@example.com"
	created := t0.Add(-3 * time.Hour)
	usd := reconcile.Money{Amount: 8900, Currency: "usd"}
	byID := reconcile.ProviderObject{ID: "ch_pan", Kind: reconcile.Charge, Money: usd, Status: reconcile.Succeeded,
		RawStatus: "succeeded", Metadata: map[string]string{"obligation_id": "charge:4242424242424242", "note": note}, Created: reconcile.StampOf(created)}
	byKey := reconcile.ProviderObject{ID: "pi_mail", Kind: reconcile.PaymentIntent, Money: usd, Status: reconcile.Succeeded,
		RawStatus: "succeeded", Metadata: map[string]string{"idempotency_key": "key-jane@example.com", "note": note}, Created: reconcile.StampOf(created)}
	// Linked to nothing: verified again on every incremental pass.
	orphan := reconcile.ProviderObject{ID: "pi_orphan", Kind: reconcile.PaymentIntent, Money: usd, Status: reconcile.Succeeded,
		RawStatus: "succeeded", Metadata: map[string]string{"note": note}, Created: reconcile.StampOf(created)}
	e.add("", byID, byKey, orphan)
	pgtest.InsertObligations(t, e.pool,
		reconcile.Obligation{ID: "charge:4242424242424242", Kind: reconcile.Charge, IdempotencyKey: "key-pan", Money: usd,
			State: reconcile.Paid, CreatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)},
		reconcile.Obligation{ID: "charge:mail", Kind: reconcile.Charge, IdempotencyKey: "key-jane@example.com", Money: usd,
			State: reconcile.Paid, CreatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)})

	first := e.pass(true, runner.Request{})
	if !first.Sync.Saved {
		t.Fatalf("first pass: mirror not saved (%v)", first.Sync.SaveErr)
	}
	rows, err := e.pool.Query(t.Context(), `SELECT id, metadata FROM reconcile.provider_objects WHERE metadata IS NOT NULL ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"id": "ch_pan", "metadata": map[string]any{"obligation_id": "charge:4242424242424242", "note": "card •••• 4242 of [email]"}},
		{"id": "pi_mail", "metadata": map[string]any{"idempotency_key": "key-jane@example.com", "note": "card •••• 4242 of [email]"}},
		{"id": "pi_orphan", "metadata": map[string]any{"note": "card •••• 4242 of [email]"}},
	}
	if diff := cmp.Diff(want, stored); diff != "" {
		t.Errorf("metadata at rest (-want +got):\n%s", diff)
	}

	e.clock = t0.Add(time.Hour)
	scratch := e.pass(false, runner.Request{DryRun: true})
	sameResult(t, "incremental match over masked metadata", scratch, e.pass(true, runner.Request{DryRun: true}))
	e.forgetMatches()
	incremental := e.pass(true, runner.Request{DryRun: true})
	if incremental.Sync.Mode != runner.SyncIncremental || incremental.Sync.Mirrored < 3 {
		t.Fatalf("second pass: mode %q (%s), %d from the mirror; want incremental, all three", incremental.Sync.Mode,
			incremental.Sync.Reason, incremental.Sync.Mirrored)
	}
	sameResult(t, "incremental over masked metadata", scratch, incremental)
	wantLinks := []reconcile.Link{
		{ObjectID: "ch_pan", ObligationID: "charge:4242424242424242", Route: reconcile.RouteMetadataID},
		{ObjectID: "pi_mail", ObligationID: "charge:mail", Route: reconcile.RouteMetadataKey},
	}
	if diff := cmp.Diff(wantLinks, incremental.Result.Links); diff != "" {
		t.Errorf("links from the mirror (-want +got):\n%s", diff)
	}
	if incremental.Sync.Verified == 0 || incremental.Sync.Refreshed != 0 {
		t.Errorf("verified %d, refreshed %d mirrored intents; want pi_orphan verified and not taken for changed",
			incremental.Sync.Verified, incremental.Sync.Refreshed)
	}
}

// A dry run reads the mirror and writes nothing, mirror included.
func TestDryRunWritesNoMirror(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.load(bench.NewWorldWith(200, t0, bench.WorldOptions{}))
	before := storetest.Take(t, e.pool, reconcile.ObligationTable{})
	if out := e.pass(true, runner.Request{DryRun: true}); out.Sync.Saved {
		t.Errorf("dry run on an empty mirror: saved")
	}
	if diff := cmp.Diff(before, storetest.Take(t, e.pool, reconcile.ObligationTable{})); diff != "" {
		t.Errorf("dry run on an empty mirror wrote (-before +after):\n%s", diff)
	}
	e.pass(true, runner.Request{})
	e.clock = t0.Add(time.Hour)
	mutate(e, 3, e.clock.Add(-10*time.Minute))
	before = storetest.Take(t, e.pool, reconcile.ObligationTable{})
	if out := e.pass(true, runner.Request{DryRun: true}); out.Sync.Mode != runner.SyncIncremental || out.Sync.Saved {
		t.Errorf("dry run: mode %q, saved %t; want incremental, not saved", out.Sync.Mode, out.Sync.Saved)
	}
	if diff := cmp.Diff(before, storetest.Take(t, e.pool, reconcile.ObligationTable{})); diff != "" {
		t.Errorf("incremental dry run wrote (-before +after):\n%s", diff)
	}
}

// A pass that fails moves no cursor and saves nothing.
func TestFailedPassKeepsTheMirror(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.load(bench.NewWorldWith(200, t0, bench.WorldOptions{}))
	e.pass(true, runner.Request{})
	want, err := e.mirror.Cursors(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e.clock = t0.Add(time.Hour)
	mutate(e, 3, e.clock.Add(-10*time.Minute))
	var objects int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM reconcile.provider_objects`).Scan(&objects); err != nil {
		t.Fatal(err)
	}
	e.srv.SetFaults(stripesim.Faults{FailList: stripesim.ListEvents, FailListAfter: 0})
	if _, err := e.runner(true).Run(t.Context(), runner.Request{Window: reconcile.Window{From: e.clock.Add(-72 * time.Hour), To: e.clock},
		Trigger: reconcile.TriggerManual}); err == nil {
		t.Fatal("pass with the events list failing succeeded")
	}
	got, err := e.mirror.Cursors(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cursors after a failed pass (-before +after):\n%s", diff)
	}
	var after int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM reconcile.provider_objects`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != objects {
		t.Errorf("mirror holds %d objects after a failed pass, %d before", after, objects)
	}
}

// retaining is Stripe's event retention, which the test server does not
// have: key evidence from events older than 30 days is gone.
type retaining struct {
	*sources.Stripe
	now func() time.Time
}

func (p retaining) keep(keys []reconcile.KeyEvidence) []reconcile.KeyEvidence {
	var out []reconcile.KeyEvidence
	for _, k := range keys {
		if !k.Created.Time().Before(p.now().Add(-sources.EventRetention)) {
			out = append(out, k)
		}
	}
	return out
}

func (p retaining) List(ctx context.Context, w reconcile.Window) (*sources.Listing, error) {
	l, err := p.Stripe.List(ctx, w)
	if err == nil {
		l.Keys = p.keep(l.Keys)
	}
	return l, err
}

func (p retaining) Sync(ctx context.Context, req sources.SyncRequest) (*sources.Sync, error) {
	s, err := p.Stripe.Sync(ctx, req)
	if err == nil {
		s.Keys = p.keep(s.Keys)
	}
	return s, err
}

// The mirror keeps the idempotency keys that events told after Stripe has
// dropped the events: a window reaching 40 days back links by key what a
// pass from scratch reports as an orphan, and key evidence is complete as
// far back as the mirror's keys reach.
func TestKeysOutliveStripeEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = func(s *sources.Stripe) runner.Provider {
		return retaining{Stripe: s, now: func() time.Time { return e.clock }}
	}
	day := 24 * time.Hour
	created := t0.Add(-35*day - time.Hour)
	old := reconcile.ProviderObject{ID: "ch_old", Kind: reconcile.Charge, Money: reconcile.Money{Amount: 12000, Currency: "jpy"},
		Status: reconcile.Succeeded, Created: reconcile.StampOf(created)}
	e.add("key-old", old)
	pgtest.InsertObligations(t, e.pool, reconcile.Obligation{ID: "charge:old", Kind: reconcile.Charge, IdempotencyKey: "key-old",
		Money: old.Money, State: reconcile.Paid, CreatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)})

	e.clock = t0.Add(-35 * day)
	first := e.pass(true, runner.Request{Window: reconcile.Window{From: t0.Add(-36 * day), To: e.clock}})
	e.clock = t0.Add(-10 * day)
	mid := e.pass(true, runner.Request{Window: reconcile.Window{From: t0.Add(-36 * day), To: e.clock}})
	if mid.Sync.Mode != runner.SyncIncremental {
		t.Fatalf("pass at day -10: mode %q (%s), want incremental", mid.Sync.Mode, mid.Sync.Reason)
	}

	e.clock = t0
	w := reconcile.Window{From: t0.Add(-40 * day), To: t0}
	scratch := e.pass(false, runner.Request{Window: w, DryRun: true})
	mirrored := e.pass(true, runner.Request{Window: w, DryRun: true})
	if got := bucket(scratch.Result, "ch_old"); got != matcher.BucketOrphan {
		t.Errorf("from scratch ch_old is in bucket %q, want orphan (its key event is gone)", got)
	}
	if got := bucket(mirrored.Result, "ch_old"); got != matcher.BucketLinked {
		t.Errorf("with the mirror ch_old is in bucket %q, want linked by its kept key", got)
	}
	// The first pass read back past its window, to where the obligations
	// it decided on began (less the margins of docs/design.md, "Coverage").
	if want := first.Covered.From; !want.Before(t0.Add(-36*day)) || !mirrored.EventsFrom.Equal(want) ||
		!scratch.EventsFrom.Equal(t0.Add(-sources.EventRetention)) {
		t.Errorf("key evidence from %s with the mirror, %s from scratch; want %s and %s", mirrored.EventsFrom, scratch.EventsFrom,
			want, t0.Add(-sources.EventRetention))
	}
}

// failingApply is the store with Apply refused, as a serialization race
// that outlasted its retries would refuse it.
type failingApply struct{ *store.Store }

func (failingApply) Apply(context.Context, reconcile.Run, reconcile.Conclusions, time.Time) (store.Applied, error) {
	return store.Applied{}, errors.New("could not serialize access")
}

// A pass whose apply fails leaves a failed run row saying why, as a pass
// whose read fails does.
func TestApplyFailureRecordsTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.runner(false)
	r.Store = failingApply{e.store}
	_, err := r.Run(context.Background(), runner.Request{Window: reconcile.Window{From: e.clock.Add(-72 * time.Hour), To: e.clock},
		Trigger: reconcile.TriggerManual})
	if err == nil || !strings.Contains(err.Error(), "could not serialize") {
		t.Fatalf("Run = %v, want the apply's error", err)
	}
	var status, cause string
	if err := e.pool.QueryRow(context.Background(), `SELECT status, error FROM reconcile.runs`).Scan(&status, &cause); err != nil {
		t.Fatalf("the failed run left no row: %v", err)
	}
	if status != "failed" || !strings.Contains(cause, "could not serialize") {
		t.Errorf("run row %s %q, want failed with the apply's error", status, cause)
	}
}
