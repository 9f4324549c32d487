package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/store/storetest"
)

// killLock terminates l's lock connection from another session and waits
// until its backend is gone (and its advisory lock with it).
func (e *env) killLock(l *Lock) {
	e.tb.Helper()
	var ok bool
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, int32(l.pid)).Scan(&ok); err != nil || !ok {
		e.tb.Fatalf("pg_terminate_backend(%d) = %v, %v", l.pid, ok, err)
	}
}

// lockWaitsForRow reports, polling, whether a run lock connection of the
// database blocks on a row (the epoch row, held FOR SHARE by a fenced
// transaction) rather than on the advisory lock; false if taken is closed
// first, i.e. the new holder got through without waiting.
func (e *env) lockWaitsForRow(taken <-chan struct{}) bool {
	e.tb.Helper()
	return e.accountLockWaitsForRow("", taken)
}

// accountLockWaitsForRow is lockWaitsForRow for the run lock of account.
func (e *env) accountLockWaitsForRow(account string, taken <-chan struct{}) bool {
	e.tb.Helper()
	app := "reconcile run lock"
	if account != "" {
		app += " " + account
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		select {
		case <-taken:
			return false
		default:
		}
		var waiting bool
		err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1
				AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple'))`, app).Scan(&waiting)
		if err != nil {
			e.tb.Fatalf("poll for the lock waiting on the epoch row: %v", err)
		}
		if waiting {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// takeLockAsync takes the run lock, waiting, in a goroutine: taken is
// closed once Lock returned, with its result in *l and *err.
func (e *env) takeLockAsync(l **Lock, err *error) (taken chan struct{}) {
	return e.takeAccountLockAsync("", l, err)
}

// takeAccountLockAsync is takeLockAsync for the run lock of account.
func (e *env) takeAccountLockAsync(account string, l **Lock, err *error) (taken chan struct{}) {
	taken = make(chan struct{})
	go func() {
		defer close(taken)
		*l, *err = e.s.LockAccount(context.Background(), account, true)
	}()
	return taken
}

// fencedWrite is one of the store's fenced writes, made with ctx.
type fencedWrite struct {
	name  string
	write func(ctx context.Context, e *env) error
}

// fencedWrites are every write of the store that WithFence fences, each
// as a pass makes it (see fenceTestEnv for the rows they need).
func fencedWrites(now time.Time) []fencedWrite {
	return []fencedWrite{
		{"Apply", func(ctx context.Context, e *env) error {
			o := unknownRefund("refund:1")
			res := resultOf([]reconcile.Finding{newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_1b")},
				[]reconcile.Transition{markPaid(o, "re_1")})
			_, err := e.s.Apply(ctx, testRun("run-stale", now), res, now)
			return err
		}},
		{"Mirror.Save", func(ctx context.Context, e *env) error {
			return NewMirror(e.pool).Save(ctx, MirrorUpdate{RunID: "run-stale", Now: now,
				Seen: []SeenObjects{{At: now, Objects: []reconcile.ProviderObject{mirrorCharge("ch_1", now.Add(-time.Hour), nil)}}},
				Cursors: SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{
					reconcile.Charge: {From: now.Add(-time.Hour), To: now}}}})
		}},
		{"Mirror.ForAccount.Save", func(ctx context.Context, e *env) error {
			return NewMirror(e.pool).ForAccount("acct_1").Save(ctx, MirrorUpdate{RunID: "run-stale", Now: now,
				Seen: []SeenObjects{{At: now, Objects: []reconcile.ProviderObject{mirrorCharge("ch_1", now.Add(-time.Hour), nil)}}},
				Cursors: SyncCursors{Objects: map[reconcile.ObjectKind]reconcile.Window{
					reconcile.Charge: {From: now.Add(-time.Hour), To: now}}}})
		}},
		{"SaveAccounts", func(ctx context.Context, e *env) error {
			return e.s.SaveAccounts(ctx, "run-stale", []reconcile.Account{{ID: "acct_1", Name: "Shop"}}, now)
		}},
		{"RecordFailedRun", func(ctx context.Context, e *env) error {
			return e.s.RecordFailedRun(ctx, testRun("run-stale", now), "the provider could not be read")
		}},
		{"MarkSending", func(ctx context.Context, e *env) error {
			return e.s.MarkSending(ctx, []int64{1, 2}, now)
		}},
		{"Fence", func(ctx context.Context, e *env) error {
			release, err := e.s.Fence(ctx)
			if err == nil {
				release()
			}
			return err
		}},
	}
}

// fenceTestEnv is a new database with what fencedWrites need: an
// obligation for Apply to mark, two unsent alerts for MarkSending to claim.
func fenceTestEnv(t *testing.T, now time.Time) *env {
	t.Helper()
	e := newEnv(t, nil)
	pgtest.InsertObligations(t, e.pool, unknownRefund("refund:1"))
	if _, err := e.s.Apply(t.Context(), testRun("run-0", now.Add(-time.Hour)),
		resultOf([]reconcile.Finding{newFinding(reconcile.StaleLease, "refund:9", "", 0)}, nil), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	return e
}

// checkLoss checks fenced write w after the lock stale was lost, next
// being the lock taken since (nil when none was): under stale, w is
// refused with ErrLockLost, its message holding naming, and writes
// nothing; under next, one epoch on, the new holder writes as usual.
func checkLoss(t *testing.T, e *env, w fencedWrite, stale, next *Lock, naming string) {
	t.Helper()
	if next != nil {
		defer next.Release(context.Background())
		if next.Epoch() != stale.Epoch()+1 {
			t.Errorf("epochs: stale %d, next %d; want next one more", stale.Epoch(), next.Epoch())
		}
	}
	before := storetest.Take(t, e.pool, reconcile.ObligationTable{})
	err := w.write(WithFence(t.Context(), stale), e)
	if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), naming) {
		t.Fatalf("%s under a lost lock = %v, want ErrLockLost (its message holding %q)", w.name, err, naming)
	}
	after := storetest.Take(t, e.pool, reconcile.ObligationTable{})
	if diff := cmp.Diff(before.Tables, after.Tables); diff != "" {
		t.Errorf("%s under a lost lock wrote (-before +after):\n%s", w.name, diff)
	}
	if next != nil {
		if err := w.write(WithFence(t.Context(), next), e); err != nil {
			t.Errorf("%s under the new holder's lock: %v", w.name, err)
		}
	}
}

// Every fenced write of a holder whose lock was lost is refused, whether
// another run took the lock since, or no one has yet, or (as a reused
// backend pid would let it look) the session seems alive but the epoch
// moved: the checks inside the write's own transaction refuse it, without
// Held being asked.
func TestFenceRefusesStaleHolder(t *testing.T) {
	t.Parallel()
	now := t0()
	writes := fencedWrites(now)
	losses := []struct {
		name string
		// lose makes stale's lock lost; it returns the lock taken since,
		// if any.
		lose func(e *env, stale *Lock) *Lock
	}{
		{"taken by another run", func(e *env, stale *Lock) *Lock {
			e.killLock(stale)
			next, err := e.s.Lock(context.Background(), false)
			if err != nil {
				e.tb.Fatalf("Lock after the holder's connection died: %v", err)
			}
			return next
		}},
		{"connection ended, no one took it", func(e *env, stale *Lock) *Lock {
			e.killLock(stale)
			return nil
		}},
		{"epoch moved, session alive", func(e *env, stale *Lock) *Lock {
			e.exec(`UPDATE reconcile.run_lock SET epoch = epoch + 1`)
			return nil
		}},
	}
	for _, loss := range losses {
		for _, w := range writes {
			t.Run(loss.name+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				e := fenceTestEnv(t, now)
				stale, err := e.s.Lock(t.Context(), false)
				if err != nil {
					t.Fatal(err)
				}
				defer stale.Release(context.Background())
				checkLoss(t, e, w, stale, loss.lose(e, stale), "")
			})
		}
	}
}

// The race the fence closes: the lock's connection dies while Apply's
// transaction is in flight and a second run takes the lock. The second
// run's move of the epoch waits for the in-flight transaction, which,
// checking the lock again last, rolls back: the second run reads only
// after it, and nothing of the first remains.
func TestFenceHoldsOffTheNextHolderDuringApply(t *testing.T) {
	t.Parallel()
	now := t0()
	for _, stage := range []string{"transitions", "outbox"} {
		t.Run("after "+stage, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			o := unknownRefund("refund:1")
			pgtest.InsertObligations(t, e.pool, o)
			first, err := e.s.Lock(t.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Release(context.Background())
			before := storetest.Take(t, e.pool, reconcile.ObligationTable{})

			var (
				second    *Lock
				secondErr error
				taken     chan struct{}
			)
			s, err := New(e.pool, testOptions(nil))
			if err != nil {
				t.Fatal(err)
			}
			s.hook = func(ctx context.Context, at string, tx pgx.Tx) error {
				if at != stage || taken != nil {
					return nil
				}
				e.killLock(first)
				taken = e.takeLockAsync(&second, &secondErr)
				if !e.lockWaitsForRow(taken) {
					t.Errorf("the second run took the lock (%v) while the first's apply was in flight", secondErr)
				}
				return nil
			}
			res := resultOf([]reconcile.Finding{newFinding(reconcile.Duplicate, "refund:1", "", 8900, "re_1", "re_1b")},
				[]reconcile.Transition{markPaid(o, "re_1")})
			_, err = s.Apply(WithFence(t.Context(), first), testRun("run-1", now), res, now)
			if !errors.Is(err, ErrLockLost) {
				t.Errorf("Apply whose lock died mid-transaction = %v, want ErrLockLost", err)
			}
			if taken == nil {
				t.Fatalf("the hook never reached stage %s", stage)
			}
			<-taken
			if secondErr != nil {
				t.Fatalf("second Lock: %v", secondErr)
			}
			defer second.Release(context.Background())
			if second.Epoch() != first.Epoch()+1 {
				t.Errorf("epochs: first %d, second %d; want the second one more", first.Epoch(), second.Epoch())
			}
			after := storetest.Take(t, e.pool, reconcile.ObligationTable{})
			delete(after.Tables, `"reconcile"."run_lock"`)
			delete(before.Tables, `"reconcile"."run_lock"`)
			if diff := cmp.Diff(before.Tables, after.Tables); diff != "" {
				t.Errorf("the refused apply left (-before +after):\n%s", diff)
			}
			got, err := e.s.Apply(WithFence(t.Context(), second), testRun("run-2", now), res, now)
			if err != nil || len(got.Transitions) != 1 {
				t.Errorf("the second run's Apply = %d transitions, %v; want 1", len(got.Transitions), err)
			}
		})
	}
}

// A send's fence keeps the next holder out until it is released: a Slack
// message in flight when the lock dies is sent and recorded before the
// next run can see it unsent.
func TestFenceHoldsOffTheNextHolderDuringASend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	first, err := e.s.Lock(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(context.Background())
	release, err := e.s.Fence(WithFence(t.Context(), first))
	if err != nil {
		t.Fatalf("Fence: %v", err)
	}
	e.killLock(first)
	var (
		second    *Lock
		secondErr error
	)
	taken := e.takeLockAsync(&second, &secondErr)
	if !e.lockWaitsForRow(taken) {
		t.Errorf("the second run took the lock (%v) while the first's send was fenced", secondErr)
	}
	release()
	<-taken
	if secondErr != nil {
		t.Fatalf("second Lock: %v", secondErr)
	}
	second.Release(context.Background())
	if _, err := e.s.Fence(WithFence(t.Context(), first)); !errors.Is(err, ErrLockLost) {
		t.Errorf("Fence of the old holder after the new one took the lock = %v, want ErrLockLost", err)
	}
}

// Held says plainly why a lock is lost.
func TestHeldAfterTheConnectionDied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	l, err := e.s.Lock(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if err := l.Held(t.Context()); err != nil {
		t.Fatalf("Held: %v", err)
	}
	e.killLock(l)
	err = l.Held(t.Context())
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Held after the connection died = %v, want ErrLockLost", err)
	}
	t.Logf("Held: %v", err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Held(ctx); errors.Is(err, ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Held with a cancelled context = %v, want context.Canceled, not a lost lock", err)
	}
}

// An existing database at the previous schema gets the epoch table from
// `reconcile migrate`, and runs are fenced from then on.
func TestMigrateAddsRunLock(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewObligations(t)
	migratedTo(t, url, 3)
	s, err := New(pool, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); !errors.Is(err, ErrSchemaOutdated) {
		t.Errorf("CheckSchema at version 3 = %v, want ErrSchemaOutdated", err)
	}
	rep, err := Up(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(allMigrations(t)[3:], rep.Applied); diff != "" {
		t.Errorf("Up on version 3 applied %v, want the run lock and what came after", rep.Applied)
	}
	e := &env{tb: t, pool: pool, url: url, s: s}
	if n := e.count(`SELECT count(*) FROM reconcile.run_lock`); n != 1 {
		t.Errorf("reconcile.run_lock holds %d rows, want 1", n)
	}
	l, err := s.Lock(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if l.Epoch() != 1 {
		t.Errorf("first epoch %d, want 1", l.Epoch())
	}
}
