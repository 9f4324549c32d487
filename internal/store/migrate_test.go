package store

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"reconcile/internal/pgtest"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	s, err := New(pool, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); !errors.Is(err, ErrSchemaOutdated) {
		t.Errorf("CheckSchema before Migrate = %v, want ErrSchemaOutdated", err)
	}
	first, err := Up(t.Context(), url)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	want := []string{"00001_init.sql", "00002_mirror.sql", "00003_send_intent.sql", "00004_run_lock.sql"}
	if diff := cmp.Diff(want, first.Applied); diff != "" || first.Version != 4 {
		t.Errorf("Up applied %v to version %d, want %v to version 4 %s", first.Applied, first.Version, want, diff)
	}
	again, err := Up(t.Context(), url)
	if err != nil {
		t.Fatalf("Up again: %v", err)
	}
	if len(again.Applied) != 0 || again.Version != 4 {
		t.Errorf("Up again applied %v to version %d, want nothing at version 4", again.Applied, again.Version)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema after Migrate = %v", err)
	}
}

// Migrating a fresh database from many goroutines at once: all succeed
// and each migration is recorded once. The goroutines race on creating
// the schema itself too.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = Migrate(t.Context(), url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
	}
	e := &env{tb: t, pool: pool}
	if n := e.count(`SELECT count(*) FROM reconcile.goose_db_version WHERE version_id = 1`); n != 1 {
		t.Errorf("version 1 recorded %d times, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.run_lock`); n != 1 {
		t.Errorf("reconcile.run_lock holds %d rows, want the one epoch", n)
	}
}

// Two processes migrate the same fresh database at once.
func TestMigrateAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	hs := []*helper{startHelper(t, "migrate", url), startHelper(t, "migrate", url)}
	for _, h := range hs {
		if got := h.next(t); got != "ready" {
			t.Fatalf("helper said %q, want ready", got)
		}
	}
	for _, h := range hs {
		h.send(t, "go")
	}
	for _, h := range hs {
		if got := h.next(t); got != "migrated" {
			t.Errorf("helper said %q, want migrated", got)
		}
	}
	e := &env{tb: t, pool: pool}
	if n := e.count(`SELECT count(*) FROM reconcile.goose_db_version WHERE version_id = 1`); n != 1 {
		t.Errorf("version 1 recorded %d times, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.run_lock`); n != 1 {
		t.Errorf("reconcile.run_lock holds %d rows, want the one epoch", n)
	}
}
