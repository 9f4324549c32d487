package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	first, err := e.s.Lock(t.Context(), false)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := first.Held(t.Context()); err != nil {
		t.Errorf("Held: %v", err)
	}
	_, err = e.s.Lock(t.Context(), false)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "reconcile run lock") {
		t.Errorf("second Lock = %v, want ErrLocked naming the holder", err)
	}
	// The pool's own connections are not the lock's: the pool can be
	// closed, or reused by everyone, without touching the lock.
	if n := e.count(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`); n != 0 {
		t.Errorf("a pooled connection holds %d advisory locks, want 0", n)
	}

	// A waiter blocks until the holder releases.
	got := make(chan error, 1)
	var second *Lock
	go func() {
		var err error
		second, err = e.s.Lock(context.Background(), true)
		got <- err
	}()
	e.waitForLockWaiter("reconcile run lock", nil)
	if err := first.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting Lock: %v", err)
	}
	if err := first.Held(t.Context()); err == nil {
		t.Error("Held after Release = nil, want an error")
	}
	if err := first.Release(t.Context()); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}

	// A waiter whose context ends gives up and leaves nothing behind: once
	// the holder releases, the lock is free for anyone.
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		_, err := e.s.Lock(ctx, true)
		got <- err
	}()
	e.waitForLockWaiter("reconcile run lock", nil)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context = %v, want context.Canceled", err)
	}
	if n := e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`); n != 0 {
		t.Errorf("%d sessions still wait for the lock after the waiter gave up", n)
	}
	if err := second.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	third, err := e.s.Lock(t.Context(), false)
	if err != nil {
		t.Fatalf("Lock after everyone left = %v, want the lock", err)
	}
	third.Release(t.Context())
}

// Two processes start at once: exactly one gets the lock. When that
// process is killed with SIGKILL, PostgreSQL frees its lock.
func TestLockAcrossProcesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a, b := startHelper(t, "lock", e.url), startHelper(t, "lock", e.url)
	for _, h := range []*helper{a, b} {
		if got := h.next(t); got != "ready" {
			t.Fatalf("helper said %q, want ready", got)
		}
	}
	a.send(t, "go")
	b.send(t, "go")
	outcomes := map[string]*helper{}
	for _, h := range []*helper{a, b} {
		outcomes[h.next(t)] = h
	}
	holder, ok := outcomes["locked"]
	if len(outcomes) != 2 || !ok || outcomes["busy"] == nil {
		t.Fatalf("helpers said %v, want one locked and one busy", keys(outcomes))
	}
	if _, err := e.s.Lock(t.Context(), false); !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock while a process holds it = %v, want ErrLocked", err)
	}
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-holder.done
	// The server notices the dead client at once; waiting covers the
	// moment before it does.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	l, err := e.s.Lock(ctx, true)
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	l.Release(t.Context())
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
