package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"reconcile/internal/pgtest"
	"reconcile/internal/queue"
	"reconcile/internal/store"
)

// The jobs of a test pass: fetch jobs numbered from 0, an apply job per
// account once they are all complete, then the drain. What they do is
// count themselves: the pass logic is not this package's.
type fetchArgs struct {
	Pass string `json:"pass"`
	I    int    `json:"i"`
}

func (fetchArgs) Kind() string { return "queue_test_fetch" }

type applyArgs struct {
	Pass    string `json:"pass"`
	Account string `json:"account"`
}

func (applyArgs) Kind() string { return "queue_test_apply" }

type drainArgs struct {
	Pass string `json:"pass"`
}

func (drainArgs) Kind() string { return "queue_test_drain" }

var accounts = []string{"acct_a", "acct_b", "acct_c"}

// harness is what a test pass's workers do and what they saw. The maps
// say how the first attempt of a fetch job goes wrong, by its number; they
// are set before any client starts and only read after.
type harness struct {
	// failFirst: the worker returns an error before completing the job.
	failFirst map[int]bool
	// rollbackFirst: the worker completes the job in its transaction,
	// then rolls it back and returns an error.
	rollbackFirst map[int]bool
	// hold: the worker says "holding <job id>" on stdout and never
	// returns (the helper process that is killed holding a job).
	hold map[int]bool

	mu sync.Mutex
	// lasts counts, by stage, the committed completions told they were
	// the stage's last.
	lasts map[string]int
	// fetchDoneAtLast is how many fetch jobs were completed, as the
	// transaction of the fetch stage's last completion saw it.
	fetchDoneAtLast int
	// drains counts the drain jobs worked.
	drains int
	// rolledBack records each rolled-back completion: whether it was told
	// last, and the stage's count read outside its transaction after the
	// rollback.
	rolledBack []rolledBack
	// workedBy are the client ids that worked each fetch job, by number.
	workedBy map[int][]string
}

type rolledBack struct {
	last      bool
	remaining int
}

func newHarness() *harness {
	return &harness{failFirst: map[int]bool{}, rollbackFirst: map[int]bool{}, hold: map[int]bool{},
		lasts: map[string]int{}, workedBy: map[int][]string{}}
}

// workers registers the pass's workers, whose transactions run on pool.
func (h *harness) workers(pool *pgxpool.Pool) *river.Workers {
	w := river.NewWorkers()
	river.AddWorker(w, &fetchWorker{h: h, pool: pool})
	river.AddWorker(w, &applyWorker{h: h, pool: pool})
	river.AddWorker(w, &drainWorker{h: h})
	return w
}

type fetchWorker struct {
	river.WorkerDefaults[fetchArgs]
	h    *harness
	pool *pgxpool.Pool
}

func (w *fetchWorker) Work(ctx context.Context, job *river.Job[fetchArgs]) error {
	h, a := w.h, job.Args
	client := river.ClientFromContext[pgx.Tx](ctx)
	h.mu.Lock()
	h.workedBy[a.I] = append(h.workedBy[a.I], client.ID())
	h.mu.Unlock()
	if h.hold[a.I] {
		fmt.Printf("holding %d\n", job.ID)
		select {} // until the process is killed
	}
	if h.failFirst[a.I] && job.Attempt == 1 {
		return errors.New("planned failure before completing")
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	last, err := queue.CompleteInStage(ctx, tx, job.JobRow, a.Pass, queue.StageFetch)
	if err != nil {
		return err
	}
	if h.rollbackFirst[a.I] && job.Attempt == 1 {
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		var remaining int
		if err := w.pool.QueryRow(ctx, `SELECT remaining FROM reconcile.pass_fanin WHERE pass_id = $1 AND stage = $2`,
			a.Pass, queue.StageFetch).Scan(&remaining); err != nil {
			return err
		}
		h.mu.Lock()
		h.rolledBack = append(h.rolledBack, rolledBack{last: last, remaining: remaining})
		h.mu.Unlock()
		return errors.New("planned rollback after completing")
	}
	var done int
	if last {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM reconcile.river_job WHERE kind = $1 AND args->>'pass' = $2 AND state = 'completed'`,
			fetchArgs{}.Kind(), a.Pass).Scan(&done); err != nil {
			return err
		}
		var jobs []river.InsertManyParams
		for _, acct := range accounts {
			jobs = append(jobs, river.InsertManyParams{Args: applyArgs{Pass: a.Pass, Account: acct}, InsertOpts: queue.StageOpts(queue.StageApply)})
		}
		if err := queue.InsertStage(ctx, client, tx, a.Pass, queue.StageApply, jobs); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if last {
		h.mu.Lock()
		h.lasts[queue.StageFetch]++
		h.fetchDoneAtLast = done
		h.mu.Unlock()
	}
	return nil
}

type applyWorker struct {
	river.WorkerDefaults[applyArgs]
	h    *harness
	pool *pgxpool.Pool
}

func (w *applyWorker) Work(ctx context.Context, job *river.Job[applyArgs]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	last, err := queue.CompleteInStage(ctx, tx, job.JobRow, job.Args.Pass, queue.StageApply)
	if err != nil {
		return err
	}
	if last {
		if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, drainArgs{Pass: job.Args.Pass}, queue.DrainOpts()); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if last {
		w.h.mu.Lock()
		w.h.lasts[queue.StageApply]++
		w.h.mu.Unlock()
	}
	return nil
}

type drainWorker struct {
	river.WorkerDefaults[drainArgs]
	h *harness
}

func (w *drainWorker) Work(ctx context.Context, job *river.Job[drainArgs]) error {
	w.h.mu.Lock()
	w.h.drains++
	w.h.mu.Unlock()
	return nil
}

// migrated is a fresh database holding what `reconcile migrate` makes.
func migrated(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	return pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
}

// newPool is a pool of its own on the database at url, closed at cleanup:
// each client a pool, as each worker process would have.
func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// startClient opens and starts a client working h's jobs on a pool of
// its own on url; it is stopped at cleanup, before its pool is closed.
func startClient(t *testing.T, url string, h *harness, cfg queue.Config) *queue.Queue {
	t.Helper()
	pool := newPool(t, url)
	cfg.Workers = h.workers(pool)
	q, err := queue.Open(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Not t.Context: it ends before cleanup, and its end would stop the
	// client at once.
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := q.Stop(ctx); err != nil {
			t.Errorf("stop client: %v", err)
		}
	})
	return q
}

// startPass inserts the fetch stage of pass, n jobs, in one transaction,
// through an insert-only client on pool.
func startPass(t *testing.T, pool *pgxpool.Pool, pass string, n int) {
	t.Helper()
	q, err := queue.Open(pool, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	var jobs []river.InsertManyParams
	for i := range n {
		jobs = append(jobs, river.InsertManyParams{Args: fetchArgs{Pass: pass, I: i}, InsertOpts: queue.StageOpts(queue.StageFetch)})
	}
	if err := queue.InsertStage(t.Context(), q.Client(), tx, pass, queue.StageFetch, jobs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test after a deadline
// generous enough never to be met by a pass that works: a guard against
// hanging, not a measurement.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting, after two minutes, for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// drained says whether pass's drain job has completed.
func drained(t *testing.T, pool *pgxpool.Pool, pass string) func() bool {
	return func() bool {
		return count(t, pool, `SELECT count(*) FROM reconcile.river_job WHERE kind = $1 AND args->>'pass' = $2 AND state = 'completed'`,
			drainArgs{}.Kind(), pass) == 1
	}
}

// checkPass checks that pass ran each stage once, in order: n fetch jobs
// all completed before the apply stage was inserted, once; one apply job
// per account, all completed; one drain, worked once; both counts at zero.
func checkPass(t *testing.T, pool *pgxpool.Pool, h *harness, pass string, n int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lasts[queue.StageFetch] != 1 || h.lasts[queue.StageApply] != 1 {
		t.Errorf("last completions committed: %v, want one per stage", h.lasts)
	}
	if h.fetchDoneAtLast != n {
		t.Errorf("the fetch stage's last completion saw %d fetch jobs completed, want all %d", h.fetchDoneAtLast, n)
	}
	if h.drains != 1 {
		t.Errorf("the drain was worked %d times, want once", h.drains)
	}
	for _, c := range []struct {
		kind string
		want int
	}{{fetchArgs{}.Kind(), n}, {applyArgs{}.Kind(), len(accounts)}, {drainArgs{}.Kind(), 1}} {
		all := count(t, pool, `SELECT count(*) FROM reconcile.river_job WHERE kind = $1 AND args->>'pass' = $2`, c.kind, pass)
		done := count(t, pool, `SELECT count(*) FROM reconcile.river_job WHERE kind = $1 AND args->>'pass' = $2 AND state = 'completed'`, c.kind, pass)
		if all != c.want || done != c.want {
			t.Errorf("%s: %d jobs, %d completed; want %d, all completed", c.kind, all, done, c.want)
		}
	}
	rows, err := pool.Query(context.Background(), `SELECT stage, remaining FROM reconcile.pass_fanin WHERE pass_id = $1 ORDER BY stage`, pass)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	var (
		stage     string
		remaining int
	)
	if _, err := pgx.ForEachRow(rows, []any{&stage, &remaining}, func() error { counts[stage] = remaining; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{queue.StageFetch: 0, queue.StageApply: 0}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("pass_fanin of %s: %v, want %v", pass, counts, want)
	}
}

// logBuffer collects a client's log, for the test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
