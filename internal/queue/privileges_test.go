package queue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile/internal/config"
	"reconcile/internal/queue"
	"reconcile/internal/store"
)

// docGrants are the GRANT statements of package queue's doc comment, the
// grants a worker's role needs: the test grants what the doc says, so
// that the doc stays true.
func docGrants(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("queue.go")
	if err != nil {
		t.Fatal(err)
	}
	var grants []string
	for _, l := range strings.Split(string(b), "\n") {
		if g, ok := strings.CutPrefix(l, "//\tGRANT "); ok {
			grants = append(grants, "GRANT "+g)
		}
	}
	if len(grants) == 0 {
		t.Fatal("package queue's doc comment names no GRANT")
	}
	return strings.Join(grants, "\n")
}

var workerWord = regexp.MustCompile(`\bworker\b`)

// newWorkerRole creates a login role holding exactly grants (SQL naming
// the role "worker") on the database of admin at dbURL, dropped at
// cleanup, and returns dbURL as that role.
func newWorkerRole(t *testing.T, admin *pgxpool.Pool, dbURL, grants string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "worker_" + hex.EncodeToString(b)
	rand.Read(b)
	// A password of its own: a server that asks for one refuses a role
	// with none; under trust it is not asked.
	password := hex.EncodeToString(b)
	if _, err := admin.Exec(t.Context(), "CREATE ROLE "+name+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// In the test's database, before pgtest drops it: DROP OWNED
		// revokes what was granted there.
		if _, err := admin.Exec(context.Background(), "DROP OWNED BY "+name+"; DROP ROLE "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	if _, err := admin.Exec(t.Context(), workerWord.ReplaceAllString(grants, name)); err != nil {
		t.Fatalf("grant: %v\n%s", err, grants)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	return u.String()
}

// A role holding only the grants package queue's doc names (and SELECT on
// goose's version table, which CheckSchema reads for a pass too) inserts a
// pass, works it over two clients, and runs River's maintenance: the
// leader rescues a job a dead client left running, deletes a finalized
// job past its retention and a queue unused for days, and resigns when
// stopped. River logs no permission denied, and CheckSchema succeeds. The
// reindexer is off, since REINDEX needs ownership the role lacks.
func TestLeastPrivilegeFanIn(t *testing.T) {
	t.Parallel()
	fanInAs(t, docGrants(t)+"\nGRANT SELECT ON reconcile.goose_db_version TO worker;")
}

// readmeGrants are README.md's grants for a pass (its block granting on
// schema reconcile) and for the workers (its block granting DELETE on
// River's tables), for a role named worker.
func readmeGrants(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, block := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(block[1], "ON ALL TABLES IN SCHEMA reconcile") || strings.Contains(block[1], "ON reconcile.river_job") {
			for _, l := range strings.Split(block[1], "\n") {
				if strings.HasPrefix(l, "GRANT") && !strings.Contains(l, " ON obligations ") {
					out = append(out, strings.ReplaceAll(l, "reconciler", "worker"))
				}
			}
		}
	}
	if len(out) < 4 {
		t.Fatalf("README.md grants %q; want the pass's grants on schema reconcile and the workers' on River's tables", out)
	}
	return strings.Join(out, "\n")
}

// The grants README.md tells a platform to give the workers' role are
// enough for a fan-in and River's maintenance.
func TestReadmeGrantsRunWorkers(t *testing.T) {
	t.Parallel()
	fanInAs(t, readmeGrants(t))
}

// fanInAs runs TestLeastPrivilegeFanIn's fan-in as a role holding grants.
func fanInAs(t *testing.T, grants string) {
	admin, adminURL := migrated(t)
	workerURL := newWorkerRole(t, admin, adminURL, grants)
	pool := newPool(t, workerURL)

	const n = 6
	startPass(t, pool, "pass-1", n)
	// What a dead client left, and what has outlived River's retention.
	old, err := queue.Open(pool, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Client().Insert(t.Context(), drainArgs{Pass: "long-ago"}, queue.DrainOpts()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE reconcile.river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour',
			attempted_by = ARRAY['a-dead-client'] WHERE kind = 'queue_test_fetch' AND args->>'i' = '0'`,
		`UPDATE reconcile.river_job SET state = 'completed', attempt = 1, attempted_at = now() - interval '2 days',
			finalized_at = now() - interval '2 days' WHERE args->>'pass' = 'long-ago'`,
		`INSERT INTO reconcile.river_queue (name, created_at, metadata, updated_at)
			VALUES ('gone', now() - interval '2 days', '{}', now() - interval '2 days')`,
	} {
		if _, err := admin.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	var log logBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("River's log:\n%s", log.String())
		}
	})
	h := newHarness()
	var clients []*queue.Queue
	for range 2 {
		clients = append(clients, startClient(t, workerURL, h, queue.Config{RescueStuckJobsAfter: 10 * time.Minute, Logger: log.logger()}))
	}
	waitFor(t, "the drain of pass-1", drained(t, admin, "pass-1"))
	waitFor(t, "the cleaner to delete the finalized job of two days ago", func() bool {
		return count(t, admin, `SELECT count(*) FROM reconcile.river_job WHERE args->>'pass' = 'long-ago'`) == 0
	})
	waitFor(t, "the cleaner to delete the queue unused for two days", func() bool {
		return count(t, admin, `SELECT count(*) FROM reconcile.river_queue WHERE name = 'gone'`) == 0
	})
	checkPass(t, admin, h, "pass-1", n)
	if got := count(t, admin, `SELECT attempt FROM reconcile.river_job WHERE kind = 'queue_test_fetch' AND args->>'i' = '0'`); got != 2 {
		t.Errorf("the job the dead client left completed at attempt %d, want 2 (rescued once)", got)
	}

	s, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSchema(t.Context()); err != nil {
		t.Errorf("CheckSchema as the worker's role: %v", err)
	}
	for _, q := range clients {
		if err := q.Stop(t.Context()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	if n := count(t, admin, `SELECT count(*) FROM reconcile.river_leader`); n != 0 {
		t.Errorf("%d leaders left after every client stopped, want none (the leader resigns)", n)
	}
	if l := log.String(); strings.Contains(l, "permission denied") {
		t.Errorf("River was denied something the role's grants do not give:\n%s", l)
	}
	if _, err := pool.Exec(t.Context(), `REINDEX INDEX CONCURRENTLY reconcile.river_job_args_index`); err == nil ||
		!strings.Contains(err.Error(), "must be owner") {
		t.Errorf("REINDEX as the worker's role: %v; want refused, which is why Open turns River's reindexer off", err)
	}
}
