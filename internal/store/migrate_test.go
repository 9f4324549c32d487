package store

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/rivermigrate"

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
	want := allMigrations(t)
	last := len(want)
	if diff := cmp.Diff(want, first.Applied); diff != "" || int(first.Version) != last {
		t.Errorf("Up applied %v to version %d, want %v to version %d %s", first.Applied, first.Version, want, last, diff)
	}
	var riverWant []int
	for _, m := range riverMigrator(nil).AllVersions() {
		riverWant = append(riverWant, m.Version)
	}
	if len(riverWant) == 0 || !cmp.Equal(first.River, riverWant) {
		t.Errorf("Up applied River's migrations %v, want all of %v", first.River, riverWant)
	}
	again, err := Up(t.Context(), url)
	if err != nil {
		t.Fatalf("Up again: %v", err)
	}
	if len(again.Applied) != 0 || int(again.Version) != last || len(again.River) != 0 {
		t.Errorf("Up again applied %v to version %d and River's %v, want nothing at version %d", again.Applied, again.Version, again.River, last)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema after Migrate = %v", err)
	}
}

// River's tables are made by Migrate in the schema reconcile and nowhere
// else, each River migration recorded once however often Migrate runs.
func TestMigrateRiver(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	for range 2 {
		if err := Migrate(t.Context(), url); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	e := &env{tb: t, pool: pool}
	for _, table := range []string{"river_job", "river_leader", "river_queue", "river_migration"} {
		if n := e.count(`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`, Schema, table); n != 1 {
			t.Errorf("%s.%s: %d tables, want 1", Schema, table, n)
		}
	}
	if n := e.count(`SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname LIKE 'river%' AND n.nspname <> $1`, Schema); n != 0 {
		t.Errorf("%d of River's relations are outside the schema %s", n, Schema)
	}
	if n := e.count(`SELECT count(*) FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		WHERE t.typname = 'river_job_state' AND n.nspname = $1`, Schema); n != 1 {
		t.Errorf("River's type river_job_state is not in the schema %s", Schema)
	}
	all := riverMigrator(nil).AllVersions()
	if n := e.count(`SELECT count(*) FROM reconcile.river_migration`); n != len(all) {
		t.Errorf("reconcile.river_migration holds %d rows after two migrates, want one per River migration, %d", n, len(all))
	}
}

// A database whose own migrations are current but whose River
// migrations are not is outdated: CheckSchema says so, and Migrate
// brings it up.
func TestCheckSchemaRiver(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	if err := Migrate(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	s, err := New(pool, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	all := riverMigrator(nil).AllVersions()
	if _, err := riverMigrator(pool).Migrate(t.Context(), "down", &rivermigrate.MigrateOpts{TargetVersion: all[len(all)-2].Version}); err != nil {
		t.Fatalf("migrate River one down: %v", err)
	}
	if err := s.CheckSchema(t.Context()); !errors.Is(err, ErrSchemaOutdated) {
		t.Errorf("CheckSchema with River's last migration undone = %v, want ErrSchemaOutdated", err)
	}
	rep, err := Up(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{all[len(all)-1].Version}; len(rep.Applied) != 0 || !cmp.Equal(rep.River, want) {
		t.Errorf("Up applied %v and River's %v, want only River's %v", rep.Applied, rep.River, want)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema after Up = %v", err)
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
	if n := e.count(`SELECT count(*) FROM reconcile.river_migration WHERE version = 1`); n != 1 {
		t.Errorf("River's version 1 recorded %d times, want 1", n)
	}
}

// River's migrator takes no lock of its own: migrateRiver's lock keeps
// many at once on a fresh schema from applying a version twice.
func TestMigrateRiverConcurrently(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	e := &env{tb: t, pool: pool}
	e.exec(`CREATE SCHEMA ` + Schema)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = migrateRiver(t.Context(), url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrateRiver %d: %v", i, err)
		}
	}
	if n, want := e.count(`SELECT count(*) FROM reconcile.river_migration`), len(riverMigrator(nil).AllVersions()); n != want {
		t.Errorf("reconcile.river_migration holds %d rows, want one per River migration, %d", n, want)
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

// migratedTo gives url's database the schema of the first v migrations,
// as an existing database left at that version holds it, and returns the
// migrations' provider to go on with; its connection closes when the
// test ends.
func migratedTo(t *testing.T, url string, v int64) *goose.Provider {
	t.Helper()
	p, db, err := newProvider(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := createSchema(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), v); err != nil {
		t.Fatalf("UpTo %d: %v", v, err)
	}
	return p
}

// allMigrations are the migrations this build embeds, in order; they are
// numbered from 1 without a gap, which TestMigrate relies on.
func allMigrations(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		names[i] = path.Base(n)
		if want := fmt.Sprintf("%05d_", i+1); !strings.HasPrefix(names[i], want) {
			t.Fatalf("migration %s is not numbered %s: the migrations are numbered from 1 without a gap", names[i], want)
		}
	}
	return names
}

// Migration 00009 makes the mirror's rows of old the platform's, keys
// the mirror by account, and its Down forgets the connected accounts'
// mirror and keeps the platform's.
func TestMigrateAccounts(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	ctx := t.Context()
	p := migratedTo(t, url, 8)
	e := &env{tb: t, pool: pool}
	e.exec(`INSERT INTO reconcile.provider_objects (id, kind, amount, currency, status, raw_status, created, seen_at)
		VALUES ('ch_1', 'charge', 100, 'usd', 'succeeded', 'succeeded', now(), now())`)
	e.exec(`INSERT INTO reconcile.provider_keys (object_id, key, object_kind, event_id, event_type, created)
		VALUES ('ch_1', 'k', 'charge', 'evt_1', 'charge.succeeded', now())`)
	e.exec(`INSERT INTO reconcile.sync_cursors (name, complete_from, complete_to, run_id, updated_at)
		VALUES ('charge', now(), now(), 'run_1', now())`)
	if _, err := p.UpTo(ctx, 9); err != nil {
		t.Fatalf("UpTo 9: %v", err)
	}
	for _, table := range []string{"provider_objects", "provider_keys", "sync_cursors"} {
		if n := e.count(`SELECT count(*) FROM reconcile.` + table + ` WHERE account = ''`); n != 1 {
			t.Errorf("%s: %d rows of the platform after the migration, want the 1 of old", table, n)
		}
	}
	// The same ids in a connected account are rows of their own.
	e.exec(`INSERT INTO reconcile.provider_objects (account, id, kind, amount, currency, status, raw_status, created, seen_at)
		VALUES ('acct_1', 'ch_1', 'charge', 200, 'usd', 'succeeded', 'succeeded', now(), now())`)
	e.exec(`INSERT INTO reconcile.provider_keys (account, object_id, key, object_kind, event_id, event_type, created)
		VALUES ('acct_1', 'ch_1', 'k', 'charge', 'evt_1', 'charge.succeeded', now())`)
	e.exec(`INSERT INTO reconcile.sync_cursors (account, name, complete_from, complete_to, run_id, updated_at)
		VALUES ('acct_1', 'charge', now(), now(), 'run_1', now())`)
	e.exec(`INSERT INTO reconcile.accounts (id, name, run_id, seen_at) VALUES ('acct_1', 'Shop', 'run_1', now())`)
	if _, err := pool.Exec(ctx, `INSERT INTO reconcile.accounts (id, run_id, seen_at) VALUES ('', 'run_1', now())`); err == nil {
		t.Errorf("reconcile.accounts took a row for the platform")
	}
	if _, err := p.DownTo(ctx, 8); err != nil {
		t.Fatalf("DownTo 8: %v", err)
	}
	for _, table := range []string{"provider_objects", "provider_keys", "sync_cursors"} {
		if n := e.count(`SELECT count(*) FROM reconcile.` + table); n != 1 {
			t.Errorf("%s: %d rows after the Down, want the platform's 1", table, n)
		}
	}
	if n := e.count(`SELECT count(*) FROM reconcile.provider_objects WHERE amount = 100`); n != 1 {
		t.Errorf("the Down kept a connected account's object rather than the platform's")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("Up after the Down: %v", err)
	}
}

// Migration 00013 makes every part of old shard 0 of 1 and keys the
// parts by shard; its Down fails a pass left running, keeps shard 0's
// part of each account and drops the mirror's indexes for shards.
func TestMigrateShards(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	ctx := t.Context()
	p := migratedTo(t, url, 12)
	e := &env{tb: t, pool: pool}
	e.exec(`INSERT INTO reconcile.runs (id, trigger, window_from, window_to, started_at, status)
		VALUES ('run_1', 'manual', now(), now(), now(), 'running')`)
	part := `INSERT INTO reconcile.pass_parts (run_id, account%s, obligations, provider_objects, linked, findings, transitions,
		skipped, summary) VALUES ('run_1', %s, 1, 1, 1, 0, 0, 0, '{}')`
	e.exec(fmt.Sprintf(part, "", "'acct_1'"))
	if _, err := p.UpTo(ctx, 13); err != nil {
		t.Fatalf("UpTo 13: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.pass_parts WHERE shard = 0 AND shards = 1`); n != 1 {
		t.Errorf("%d parts of old are shard 0 of 1, want the 1", n)
	}
	e.exec(fmt.Sprintf(part, ", shard, shards", "'acct_2', 0, 2"))
	e.exec(fmt.Sprintf(part, ", shard, shards", "'acct_2', 1, 2"))
	for _, bad := range []string{"'acct_2', 1, 2", "'acct_3', 2, 2", "'acct_3', -1, 2", "'acct_3', 0, 0"} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(part, ", shard, shards", bad)); err == nil {
			t.Errorf("pass_parts took the part (%s)", bad)
		}
	}
	indexes := `SELECT count(*) FROM pg_indexes WHERE schemaname = 'reconcile' AND indexname IN ('provider_objects_intent_idx',
		'provider_objects_charge_idx', 'provider_objects_target_idx', 'provider_objects_customer_idx')`
	if n := e.count(indexes); n != 4 {
		t.Errorf("%d of the 4 indexes for shards", n)
	}
	if _, err := p.DownTo(ctx, 12); err != nil {
		t.Fatalf("DownTo 12: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.pass_parts`); n != 2 {
		t.Errorf("%d parts after the Down, want one per account, 2", n)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.runs WHERE status = 'failed'`); n != 1 {
		t.Errorf("the running pass was not failed by the Down")
	}
	if n := e.count(indexes); n != 0 {
		t.Errorf("%d indexes for shards after the Down", n)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(part, "", "'acct_1'")); err == nil {
		t.Errorf("after the Down, pass_parts took a second part of one account")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("Up after the Down: %v", err)
	}
}

// Migration 00020 forgets the marks that counted the obligations to their
// pass's clock, so that each account's next pass matches whole.
func TestMigrateForgetsMarksCountedToTheClock(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	p := migratedTo(t, url, 19)
	e := &env{tb: t, pool: pool}
	e.exec(`INSERT INTO reconcile.match_marks (account, run_id, matched_at, window_from, window_to, digest, obligations)
		VALUES ('', 'run_1', now(), now() - interval '30 days', now(), 'd', 7)`)
	if _, err := p.UpTo(t.Context(), 20); err != nil {
		t.Fatalf("UpTo 20: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.match_marks`); n != 0 {
		t.Errorf("%d marks after migration 00020, want none", n)
	}
}
