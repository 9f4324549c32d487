package store

import (
	"errors"
	"maps"
	"sync"
	"testing"
	"testing/fstest"

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
	want := []string{"00001_init.sql", "00002_mirror.sql", "00003_send_intent.sql", "00004_run_lock.sql", "00005_finding_target.sql", "00007_slack_messages.sql"}
	if diff := cmp.Diff(want, first.Applied); diff != "" || first.Version != 7 {
		t.Errorf("Up applied %v to version %d, want %v to version 7 %s", first.Applied, first.Version, want, diff)
	}
	again, err := Up(t.Context(), url)
	if err != nil {
		t.Fatalf("Up again: %v", err)
	}
	if len(again.Applied) != 0 || again.Version != 7 {
		t.Errorf("Up again applied %v to version %d, want nothing at version 7", again.Applied, again.Version)
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

// The digest changes with a migration's content, a migration added or one
// renamed, and only then: it names the template tests clone.
func TestSchemaDigest(t *testing.T) {
	t.Parallel()
	base := fstest.MapFS{
		"migrations/00001_a.sql": {Data: []byte("CREATE TABLE a ();")},
		"migrations/00002_b.sql": {Data: []byte("CREATE TABLE b ();")},
		"migrations/README":      {Data: []byte("not a migration")},
	}
	with := func(change func(fstest.MapFS)) fstest.MapFS {
		m := maps.Clone(base)
		change(m)
		return m
	}
	if digest(base) != digest(maps.Clone(base)) {
		t.Errorf("the same migrations have two digests")
	}
	if digest(base) != digest(with(func(m fstest.MapFS) { m["migrations/README"] = &fstest.MapFile{Data: []byte("edited")} })) {
		t.Errorf("a file that is no migration changed the digest")
	}
	for name, change := range map[string]func(fstest.MapFS){
		"content": func(m fstest.MapFS) {
			m["migrations/00002_b.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE c ();")}
		},
		"added": func(m fstest.MapFS) { m["migrations/00003_c.sql"] = &fstest.MapFile{Data: []byte("")} },
		"renamed": func(m fstest.MapFS) {
			m["migrations/00003_b.sql"] = m["migrations/00002_b.sql"]
			delete(m, "migrations/00002_b.sql")
		},
		// A boundary moved between two files: each name is hashed with
		// its length.
		"moved": func(m fstest.MapFS) {
			m["migrations/00001_a.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE a ();CREATE")}
			m["migrations/00002_b.sql"] = &fstest.MapFile{Data: []byte(" TABLE b ();")}
		},
	} {
		if digest(base) == digest(with(change)) {
			t.Errorf("migrations %s: the digest did not change", name)
		}
	}
	if SchemaDigest() == digest(fstest.MapFS{}) {
		t.Errorf("SchemaDigest() is the digest of no migrations: it reads none of the embedded ones")
	}
}
