package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/pgtest"
)

// ownedBy is the first id of prefix+n, n = 1, 2, …, that shard of shards
// owns (reconcile.ShardOf).
func ownedBy(prefix string, shard, shards int) string {
	for n := 1; ; n++ {
		if id := fmt.Sprintf("%s%d", prefix, n); reconcile.ShardOf(id, shards) == shard {
			return id
		}
	}
}

// shardOf is the part of c that shard of shards finds: its findings
// (reconcile.FindingShard), its obligations' transitions, and the counts
// given. Settled is all of c's: each shard is told everything was
// examined, and must still leave the other's findings alone.
func shardOf(c reconcile.Conclusions, shard, shards int, counts reconcile.Counts) reconcile.Conclusions {
	out := reconcile.Conclusions{Settled: c.Settled, Counts: counts}
	for _, f := range c.Findings {
		if reconcile.FindingShard(f, shards) == shard {
			out.Findings = append(out.Findings, f)
		}
	}
	for _, t := range c.Transitions {
		if reconcile.ShardOf(t.ObligationID, shards) == shard {
			out.Transitions = append(out.Transitions, t)
		}
	}
	return out
}

// beginPass begins run as a pass run as jobs in e.
func beginPass(t *testing.T, e *env, run reconcile.Run) reconcile.Run {
	t.Helper()
	begin := run
	begin.Counts, begin.Finished, begin.Status = reconcile.Counts{}, time.Time{}, reconcile.RunRunning
	if err := pgx.BeginTxFunc(t.Context(), e.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return e.s.BeginPass(t.Context(), tx, begin, []PassAccount{{Account: reconcile.Account{ID: "acct_1", Name: "Shop"},
			Cover: run.Window}})
	}); err != nil {
		t.Fatal(err)
	}
	return begin
}

// An account's conclusions applied as two shards, each its own part,
// write what they write applied as one part: the same findings, run row
// and outbox rows in the same order, and PassResult reads one share of
// the account, its shards' counts and findings summed (docs/design.md,
// "Passes as jobs").
func TestShardedPartsEqualOnePart(t *testing.T) {
	t.Parallel()
	one, sharded := newEnv(t, nil), newEnv(t, nil)
	u1, u2 := unknownRefund(ownedBy("refund:u", 0, 2)), unknownRefund(ownedBy("refund:u", 1, 2))
	for _, e := range []*env{one, sharded} {
		pgtest.InsertObligations(t, e.pool, u1, u2)
	}
	d0, d1 := ownedBy("refund:d", 0, 2), ownedBy("refund:d", 1, 2)
	x0, x1 := ownedBy("re_x", 0, 2), ownedBy("re_x", 1, 2)
	pass := func(n int) reconcile.Conclusions {
		fs := []reconcile.Finding{
			newFinding(reconcile.Duplicate, d0, "", 8900, "re_"+d0+"a", "re_"+d0+"b"),
			newFinding(reconcile.Duplicate, d1, "", 8900, "re_"+d1+"a", "re_"+d1+"b"),
			newFinding(reconcile.Orphan, "", x1, 700, x1),
		}
		var ts []reconcile.Transition
		switch n {
		case 1:
			fs = append(fs, newFinding(reconcile.Orphan, "", x0, 500, x0),
				newFinding(reconcile.UnresolvedUnknown, u2.ID, "", 8900))
			ts = []reconcile.Transition{markPaid(u1, "re_u1")}
			ts[0].Money = u1.Money
		case 2: // x0's orphan and d1's duplicate are gone; u2 is confirmed
			fs = []reconcile.Finding{fs[0], fs[2]}
			ts = []reconcile.Transition{markPaid(u2, "re_u2")}
			ts[0].Money = u2.Money
		}
		c := accountPart("acct_1", fs, ts)
		c.Settled.Obligations = append(c.Settled.Obligations, d1, u2.ID)
		c.Settled.Objects = append(c.Settled.Objects, reconcile.AccountObject("acct_1", x0))
		c.Settled.Obligations, c.Settled.Objects = sortedIDs(c.Settled.Obligations), sortedIDs(c.Settled.Objects)
		return c
	}
	ctx := t.Context()
	for n := 1; n <= 2; n++ {
		now := t0().Add(time.Duration(n) * time.Hour)
		run := testRun(fmt.Sprintf("run-%d", n), now)
		c := pass(n)
		counts := [2]reconcile.Counts{{Obligations: 3, ProviderObjects: 4, Linked: 3}, {Obligations: 2, ProviderObjects: 3, Linked: 1}}
		whole := c
		whole.Counts = reconcile.Counts{Obligations: 5, ProviderObjects: 7, Linked: 4}

		r := beginPass(t, one, run)
		r.Counts = whole.Counts
		if _, err := one.s.ApplyPart(ctx, r, Part{Account: "acct_1"}, whole, PartReport{}, now, nil); err != nil {
			t.Fatal(err)
		}
		r = beginPass(t, sharded, run)
		// Shard 1 first: jobs finish in any order.
		for _, shard := range []int{1, 0} {
			part := shardOf(c, shard, 2, counts[shard])
			if len(part.Findings) == 0 {
				t.Fatalf("pass %d: shard %d finds nothing; the test wants both to", n, shard)
			}
			r.Counts = part.Counts
			if _, err := sharded.s.ApplyPart(ctx, r, Part{Account: "acct_1", Shard: shard, Shards: 2}, part, PartReport{}, now, nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := sharded.count(`SELECT count(*) FROM reconcile.pass_parts WHERE run_id = $1 AND shards = 2`, run.ID); n != 2 {
			t.Errorf("pass_parts holds %d parts of 2 shards, want 2", n)
		}
		for _, e := range []*env{one, sharded} {
			if _, done, err := e.s.FinishPass(ctx, run.ID, now, nil); err != nil || !done {
				t.Fatalf("FinishPass = done %t, %v", done, err)
			}
		}
		if diff := cmp.Diff(one.outbox(), sharded.outbox()); diff != "" {
			t.Errorf("pass %d: outbox (-one part +two shards):\n%s", n, diff)
		}
		if diff := cmp.Diff(one.findingsState(), sharded.findingsState()); diff != "" {
			t.Errorf("pass %d: findings (-one part +two shards):\n%s", n, diff)
		}
		if a, b := one.runRow(run.ID), sharded.runRow(run.ID); a != b {
			t.Errorf("pass %d: run row %q of two shards, %q of one part", n, b, a)
		}
		a, err := one.s.PassResult(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sharded.s.PassResult(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []PassAccountResult{{Account: reconcile.Account{ID: "acct_1", Name: "Shop"}, Counts: whole.Counts, Findings: len(c.Findings)}}
		if diff := cmp.Diff(want, b.Accounts); diff != "" {
			t.Errorf("pass %d: PassResult's accounts of two shards (-want +got):\n%s", n, diff)
		}
		if diff := cmp.Diff(a.Accounts, b.Accounts); diff != "" {
			t.Errorf("pass %d: PassResult's accounts (-one part +two shards):\n%s", n, diff)
		}
		if diff := cmp.Diff(a.Findings, b.Findings); diff != "" {
			t.Errorf("pass %d: PassResult's findings (-one part +two shards):\n%s", n, diff)
		}
		if diff := cmp.Diff(a.Run, b.Run); diff != "" {
			t.Errorf("pass %d: PassResult's run (-one part +two shards):\n%s", n, diff)
		}
		for _, e := range []*env{one, sharded} {
			e.markAllSent(now)
		}
	}
	if a, b := one.obligation(u2.ID), sharded.obligation(u2.ID); a != b || a.State != string(reconcile.Paid) {
		t.Errorf("%s: %+v of two shards, %+v of one part; want PAID in both", u2.ID, b, a)
	}
}

// A stored open finding is its shard's to settle: another shard's part
// leaves it open even when that part's Settled names its obligation and
// objects, and its own shard's part resolves it. A shard refuses a found
// finding that is not its own, and a shard that is not one of its
// shards.
func TestShardSettlesOnlyItsOwnFindings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	d1 := ownedBy("refund:d", 1, 2)
	dup := accountPart("acct_1", []reconcile.Finding{newFinding(reconcile.Duplicate, d1, "", 8900, "re_a", "re_b")}, nil)
	fp := dup.Findings[0].Fingerprint
	status := func() string {
		t.Helper()
		var s string
		if err := e.pool.QueryRow(ctx, `SELECT status FROM reconcile.findings WHERE fingerprint = $1`, fp).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	shard := func(n int) Part { return Part{Account: "acct_1", Shard: n, Shards: 2} }

	now := t0()
	run := beginPass(t, e, testRun("run-1", now))
	if _, err := e.s.ApplyPart(ctx, run, shard(0), dup, PartReport{}, now, nil); err == nil || !strings.Contains(err.Error(), "belongs to shard 1") {
		t.Errorf("shard 0 applied shard 1's finding: %v; want it refused", err)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.findings`) + e.count(`SELECT count(*) FROM reconcile.pass_parts`); n != 0 {
		t.Errorf("a refused part wrote %d rows", n)
	}
	for _, p := range []Part{{Account: "acct_1", Shard: 2, Shards: 2}, {Account: "acct_1", Shard: -1, Shards: 2},
		{Account: "acct_1", Shard: 1}, {Account: "acct_1", Shards: -1}} {
		if _, err := e.s.ApplyPart(ctx, run, p, reconcile.Conclusions{}, PartReport{}, now, nil); err == nil {
			t.Errorf("ApplyPart of %+v: applied; want it refused", p)
		}
	}
	if _, err := e.s.ApplyPart(ctx, run, shard(1), dup, PartReport{}, now, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.ApplyPart(ctx, run, shard(1), dup, PartReport{}, now, nil); err == nil {
		t.Errorf("the same shard's part applied twice")
	}
	if _, done, err := e.s.FinishPass(ctx, run.ID, now, nil); err != nil || !done {
		t.Fatalf("FinishPass = done %t, %v", done, err)
	}
	if s := status(); s != statusOpen {
		t.Fatalf("the duplicate is %s, want open", s)
	}
	e.markAllSent(now)

	// The next pass finds nothing: both shards are told the duplicate's
	// obligation and objects were examined.
	now = now.Add(time.Hour)
	run = beginPass(t, e, testRun("run-2", now))
	gone := dup
	gone.Findings = nil
	applied, err := e.s.ApplyPart(ctx, run, shard(0), gone, PartReport{}, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := status(); s != statusOpen || applied.Resolved != 0 {
		t.Errorf("after shard 0's part the duplicate is %s, %d resolved; want it open, shard 1's to settle", s, applied.Resolved)
	}
	if applied, err = e.s.ApplyPart(ctx, run, shard(1), gone, PartReport{}, now, nil); err != nil {
		t.Fatal(err)
	}
	if s := status(); s != statusResolved || applied.Resolved != 1 {
		t.Errorf("after shard 1's part the duplicate is %s, %d resolved; want it resolved", s, applied.Resolved)
	}
	if _, done, err := e.s.FinishPass(ctx, run.ID, now, nil); err != nil || !done {
		t.Fatalf("FinishPass = done %t, %v", done, err)
	}
	var resolved []string
	for _, o := range e.outbox() {
		if o.Event == reconcile.AlertResolved {
			resolved = append(resolved, o.Fingerprint)
		}
	}
	if diff := cmp.Diff([]string{fp}, resolved); diff != "" {
		t.Errorf("resolved alerts (-want +got):\n%s", diff)
	}
}

// An orphan is its least object's shard's, and that object may change
// between passes: the shard it left finds it still, and leaves the stored
// row as it stands (Conclusions.Elsewhere) rather than resolve what the
// shard it moved to reports.
func TestShardLeavesWhatItFoundForAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	// The orphan's least object was ch_…, shard 0's; it becomes a_…,
	// shard 1's, once a charge of smaller id succeeds.
	was, now1 := ownedBy("ch_orphan", 0, 2), ownedBy("a_orphan", 1, 2) // a_… sorts first
	shard := func(n int) Part { return Part{Account: "acct_1", Shard: n, Shards: 2} }
	orphan := newFinding(reconcile.Orphan, "", "", 4200, was)
	first := accountPart("acct_1", []reconcile.Finding{orphan}, nil)
	fp := first.Findings[0].Fingerprint
	at := t0()
	run := beginPass(t, e, testRun("run-1", at))
	if _, err := e.s.ApplyPart(ctx, run, shard(0), first, PartReport{}, at, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.ApplyPart(ctx, run, shard(1), accountPart("acct_1", nil, nil), PartReport{}, at, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.s.FinishPass(ctx, run.ID, at, nil); err != nil {
		t.Fatal(err)
	}
	e.markAllSent(at)

	at = at.Add(time.Hour)
	run = beginPass(t, e, testRun("run-2", at))
	moved := first.Findings[0]
	moved.ProviderIDs = []string{now1, was}
	moved.ContentHash = ""
	// Shard 0, first, examined the orphan's objects, found it, and
	// leaves it to shard 1.
	left := accountPart("acct_1", nil, nil)
	left.Settled.Objects = []string{reconcile.AccountObject("acct_1", was), reconcile.AccountObject("acct_1", now1)}
	left.Elsewhere = []string{fp}
	applied, err := e.s.ApplyPart(ctx, run, shard(0), left, PartReport{}, at, nil)
	if err != nil {
		t.Fatal(err)
	}
	if applied.Resolved != 0 {
		t.Errorf("shard 0 resolved %d findings; want the orphan left to shard 1", applied.Resolved)
	}
	found := accountPart("acct_1", []reconcile.Finding{moved}, nil)
	found.Findings[0].Fingerprint = fp // the movement's, whatever its least object
	if _, err := e.s.ApplyPart(ctx, run, shard(1), found, PartReport{}, at, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.s.FinishPass(ctx, run.ID, at, nil); err != nil {
		t.Fatal(err)
	}
	events := map[reconcile.AlertEvent]int{}
	for _, o := range e.outbox() {
		if o.Fingerprint == fp && !o.Changed { // a change of its objects is told as one
			events[o.Event]++
		}
	}
	if events[reconcile.AlertResolved] != 0 || events[reconcile.AlertFiring] != 1 {
		t.Errorf("the orphan's alerts over both passes: %v; want it fired once and never resolved", events)
	}
}
