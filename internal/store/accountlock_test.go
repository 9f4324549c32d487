package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"reconcile"
	"reconcile/internal/pgtest"
	"reconcile/internal/store/storetest"
)

// The run locks of two connected accounts are held at once, each apart
// from the platform's; one account's is exclusive, and a waiter for it
// blocks until its holder releases; each account's epoch moves on its
// own.
func TestLockAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	a, err := e.s.LockAccount(ctx, "acct_a", false)
	if err != nil {
		t.Fatalf("LockAccount acct_a: %v", err)
	}
	defer a.Release(context.Background())
	b, err := e.s.LockAccount(ctx, "acct_b", false)
	if err != nil {
		t.Fatalf("LockAccount acct_b while acct_a's is held: %v", err)
	}
	defer b.Release(context.Background())
	platform, err := e.s.Lock(ctx, false)
	if err != nil {
		t.Fatalf("Lock (the platform's) while two accounts' are held: %v", err)
	}
	defer platform.Release(context.Background())
	for _, l := range []*Lock{a, b, platform} {
		if err := l.Held(ctx); err != nil {
			t.Errorf("Held of %q: %v", l.Account(), err)
		}
		if l.Epoch() != 1 {
			t.Errorf("first epoch of %q = %d, want 1", l.Account(), l.Epoch())
		}
	}
	if a.Account() != "acct_a" || b.Account() != "acct_b" || platform.Account() != "" {
		t.Errorf("Account() = %q, %q, %q; want acct_a, acct_b and the platform's \"\"", a.Account(), b.Account(), platform.Account())
	}
	// Taking an account's lock leaves the platform's epoch alone.
	if got := storetest.Take(t, e.pool, reconcile.ObligationTable{}).Tables[`"reconcile"."run_lock"`]; !cmp.Equal(got, []string{"(t,1)"}) {
		t.Errorf("run_lock = %v, want the platform's epoch 1", got)
	}

	// The same account's lock is exclusive, and says whose it is.
	_, err = e.s.LockAccount(ctx, "acct_a", false)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "run lock of account acct_a") ||
		!strings.Contains(err.Error(), "reconcile run lock acct_a") {
		t.Errorf("second LockAccount acct_a = %v, want ErrLocked naming the account and its holder", err)
	}
	// The platform's lock, held, refuses as it always did.
	if _, err := e.s.Lock(ctx, false); !errors.Is(err, ErrLocked) || strings.Contains(err.Error(), "acct_") {
		t.Errorf("second Lock = %v, want ErrLocked, naming no account", err)
	}

	// A waiter for acct_a blocks until its holder releases, whatever
	// acct_b's holder and the platform's do meanwhile.
	got := make(chan error, 1)
	var next *Lock
	go func() {
		var err error
		next, err = e.s.LockAccount(context.Background(), "acct_a", true)
		got <- err
	}()
	e.waitForLockWaiter("reconcile run lock acct_a", nil)
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release acct_b: %v", err)
	}
	if err := platform.Release(ctx); err != nil {
		t.Fatalf("Release the platform's: %v", err)
	}
	e.waitForLockWaiter("reconcile run lock acct_a", nil)
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release acct_a: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting LockAccount acct_a: %v", err)
	}
	defer next.Release(context.Background())
	if next.Epoch() != a.Epoch()+1 {
		t.Errorf("epochs of acct_a: first %d, next %d; want next one more", a.Epoch(), next.Epoch())
	}
	if err := a.Held(ctx); !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "acct_a") {
		t.Errorf("Held after Release = %v, want ErrLockLost naming acct_a", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
	again, err := e.s.LockAccount(ctx, "acct_b", false)
	if err != nil {
		t.Fatalf("LockAccount acct_b after its release: %v", err)
	}
	defer again.Release(context.Background())
	if again.Epoch() != 2 {
		t.Errorf("second epoch of acct_b = %d, want 2", again.Epoch())
	}
	if n := e.count(`SELECT count(*) FROM reconcile.account_locks`); n != 2 {
		t.Errorf("reconcile.account_locks holds %d rows, want one per account locked, 2", n)
	}
	if n := e.count(`SELECT epoch FROM reconcile.run_lock`); n != 1 {
		t.Errorf("the platform's epoch is %d after the accounts' locks, want 1", n)
	}
}

// Only a Stripe connected account's id names an account's lock.
func TestLockAccountRefusesOtherIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	for _, id := range []string{"acct_", "ch_1", "acct_a b", "acct_a'; --"} {
		l, err := e.s.LockAccount(t.Context(), id, false)
		if err == nil {
			l.Release(t.Context())
			t.Errorf("LockAccount(%q) took a lock, want it refused", id)
		} else if errors.Is(err, ErrLocked) {
			t.Errorf("LockAccount(%q) = %v, want a refusal, not ErrLocked", id, err)
		}
	}
	if n := e.count(`SELECT count(*) FROM reconcile.account_locks`); n != 0 {
		t.Errorf("reconcile.account_locks holds %d rows after refusals, want 0", n)
	}
}

// An account's advisory key is its own: never the platform's or
// migrate's, never negative (pg_locks shows a key as two oids, which the
// lock's queries compute from it), the same in every process.
func TestLockKey(t *testing.T) {
	t.Parallel()
	if lockKey("") != runLockKey {
		t.Fatalf("lockKey(\"\") = %#x, want runLockKey", lockKey(""))
	}
	seen := map[int64]string{}
	for i := range 10000 {
		id := fmt.Sprintf("acct_%d", i)
		k := lockKey(id)
		switch {
		case k < 0:
			t.Errorf("lockKey(%s) = %d, negative", id, k)
		case k == runLockKey || k == migrateLockKey:
			t.Errorf("lockKey(%s) = %#x, another lock's key", id, k)
		case seen[k] != "":
			t.Errorf("lockKey(%s) = lockKey(%s)", id, seen[k])
		case k != lockKey(id):
			t.Errorf("lockKey(%s) changes between calls", id)
		}
		seen[k] = id
	}
}

// Every fenced write under a connected account's lock that was lost is
// refused, as under the platform's (TestFenceRefusesStaleHolder), and
// says whose lock it was.
func TestFenceRefusesStaleAccountHolder(t *testing.T) {
	t.Parallel()
	now := t0()
	const account = "acct_1"
	losses := []struct {
		name string
		lose func(e *env, stale *Lock) *Lock
	}{
		{"taken by another run", func(e *env, stale *Lock) *Lock {
			e.killLock(stale)
			next, err := e.s.LockAccount(context.Background(), account, false)
			if err != nil {
				e.tb.Fatalf("LockAccount after the holder's connection died: %v", err)
			}
			return next
		}},
		{"connection ended, no one took it", func(e *env, stale *Lock) *Lock {
			e.killLock(stale)
			return nil
		}},
		{"epoch moved, session alive", func(e *env, stale *Lock) *Lock {
			e.exec(`UPDATE reconcile.account_locks SET epoch = epoch + 1 WHERE account = $1`, account)
			return nil
		}},
	}
	for _, loss := range losses {
		for _, w := range fencedWrites(now) {
			t.Run(loss.name+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				e := fenceTestEnv(t, now)
				// Another account's lock, held throughout, is no proof.
				other, err := e.s.LockAccount(t.Context(), "acct_2", false)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Release(context.Background())
				stale, err := e.s.LockAccount(t.Context(), account, false)
				if err != nil {
					t.Fatal(err)
				}
				defer stale.Release(context.Background())
				checkLoss(t, e, w, stale, loss.lose(e, stale), "run lock of account "+account)
			})
		}
	}
}

// A write fenced by several locks (the platform's and a connected
// account's, as a one-process pass over many accounts holds) proves every
// one of them, in whatever order they were given: it is refused when
// either was lost to another holder, and goes through when all are held.
func TestFenceWithSeveralLocks(t *testing.T) {
	t.Parallel()
	now := t0()
	const account = "acct_1"
	for _, lost := range []string{"", account} {
		for _, order := range []string{"platform first", "account first"} {
			for _, w := range fencedWrites(now) {
				name := fmt.Sprintf("lost %q/%s/%s", lost, order, w.name)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					e := fenceTestEnv(t, now)
					platform, err := e.s.Lock(t.Context(), false)
					if err != nil {
						t.Fatal(err)
					}
					defer platform.Release(context.Background())
					acct, err := e.s.LockAccount(t.Context(), account, false)
					if err != nil {
						t.Fatal(err)
					}
					defer acct.Release(context.Background())
					fence := func(locks ...*Lock) context.Context {
						if order == "account first" {
							locks[0], locks[1] = locks[1], locks[0]
						}
						return WithFence(t.Context(), locks...)
					}
					stale := map[string]*Lock{"": platform, account: acct}[lost]
					e.killLock(stale)
					next, err := e.s.LockAccount(t.Context(), lost, false)
					if err != nil {
						t.Fatalf("LockAccount(%q) after its holder's connection died: %v", lost, err)
					}
					defer next.Release(context.Background())

					before := storetest.Take(t, e.pool, reconcile.ObligationTable{})
					err = w.write(fence(platform, acct), e)
					if !errors.Is(err, ErrLockLost) {
						t.Fatalf("%s with %q's lock lost = %v, want ErrLockLost", w.name, lost, err)
					}
					if lost != "" && !strings.Contains(err.Error(), account) {
						t.Errorf("%s with %s's lock lost = %v, want the account named", w.name, account, err)
					}
					after := storetest.Take(t, e.pool, reconcile.ObligationTable{})
					if diff := cmp.Diff(before.Tables, after.Tables); diff != "" {
						t.Errorf("%s under a lost lock wrote (-before +after):\n%s", w.name, diff)
					}
					// With the lost lock replaced by its new holder's, the
					// write proves both and goes through.
					held := map[string]*Lock{"": platform, account: acct}
					held[lost] = next
					if err := w.write(fence(held[""], held[account]), e); err != nil {
						t.Errorf("%s with both locks held: %v", w.name, err)
					}
				})
			}
		}
	}
}

// A send fenced by the platform's lock and an account's keeps the
// account's next holder out until it is released, as it keeps out the
// platform's (TestFenceHoldsOffTheNextHolderDuringASend).
func TestFenceHoldsOffTheNextAccountHolderDuringASend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const account = "acct_1"
	platform, err := e.s.Lock(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer platform.Release(context.Background())
	first, err := e.s.LockAccount(t.Context(), account, false)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(context.Background())
	release, err := e.s.Fence(WithFence(t.Context(), platform, first))
	if err != nil {
		t.Fatalf("Fence: %v", err)
	}
	e.killLock(first)
	var (
		second    *Lock
		secondErr error
	)
	taken := e.takeAccountLockAsync(account, &second, &secondErr)
	if !e.accountLockWaitsForRow(account, taken) {
		t.Errorf("the account's second holder took its lock (%v) while the first's send was fenced", secondErr)
	}
	release()
	<-taken
	if secondErr != nil {
		t.Fatalf("second LockAccount: %v", secondErr)
	}
	defer second.Release(context.Background())
	if second.Epoch() != first.Epoch()+1 {
		t.Errorf("epochs: first %d, second %d; want the second one more", first.Epoch(), second.Epoch())
	}
	if stale, err := e.s.Fence(WithFence(t.Context(), platform, first)); !errors.Is(err, ErrLockLost) {
		t.Errorf("Fence of the old holder after the new one took the lock = %v, want ErrLockLost", err)
		if err == nil {
			stale()
		}
	}
	release, err = e.s.Fence(WithFence(t.Context(), platform, second))
	if err != nil {
		t.Fatalf("Fence of the platform's and the account's holders: %v", err)
	}
	release()
}

// An existing database at the previous schema gets the accounts' epoch
// table from `reconcile migrate`, and accounts' locks from then on.
func TestMigrateAddsAccountLocks(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewObligations(t)
	migratedTo(t, url, 11)
	s, err := New(pool, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); !errors.Is(err, ErrSchemaOutdated) {
		t.Errorf("CheckSchema at version 11 = %v, want ErrSchemaOutdated", err)
	}
	rep, err := Up(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Applied) == 0 || rep.Applied[0] != "00012_account_locks.sql" {
		t.Errorf("Up on version 11 applied %v, want the account locks first", rep.Applied)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema after Up: %v", err)
	}
	l, err := s.LockAccount(t.Context(), "acct_1", false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if l.Epoch() != 1 {
		t.Errorf("first epoch %d, want 1", l.Epoch())
	}
}
