package queue_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"reconcile/internal/queue"
)

// Twenty fetch jobs worked by three clients over one database, two of them
// failing their first attempt before completing and two rolling their
// completion back: each counts once, the apply stage is inserted once,
// after all twenty completed, and the drain follows it once.
func TestFanIn(t *testing.T) {
	t.Parallel()
	pool, url := migrated(t)
	h := newHarness()
	h.failFirst[3], h.failFirst[11] = true, true
	h.rollbackFirst[5], h.rollbackFirst[17] = true, true
	const n = 20
	startPass(t, pool, "pass-1", n)
	for range 3 {
		startClient(t, url, h, queue.Config{})
	}
	waitFor(t, "the drain of pass-1", drained(t, pool, "pass-1"))
	checkPass(t, pool, h, "pass-1", n)
	for i := range n {
		want := 1
		if h.failFirst[i] || h.rollbackFirst[i] {
			want = 2
		}
		if got := count(t, pool, `SELECT attempt FROM reconcile.river_job WHERE kind = $1 AND (args->>'i')::int = $2`, fetchArgs{}.Kind(), i); got != want {
			t.Errorf("fetch job %d completed at attempt %d, want %d", i, got, want)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.rolledBack) != 2 {
		t.Errorf("%d completions rolled back, want 2", len(h.rolledBack))
	}
	var clients []string
	for _, ids := range h.workedBy {
		for _, id := range ids {
			if !slices.Contains(clients, id) {
				clients = append(clients, id)
			}
		}
	}
	t.Logf("the fetch jobs were worked by %d clients", len(clients))
}

// A completion rolled back counts nothing, even when it was told it was
// the last: the count outside its transaction is as before, and the
// retry that commits is the stage's last, once.
func TestRolledBackCompletionDoesNotCount(t *testing.T) {
	t.Parallel()
	pool, url := migrated(t)
	h := newHarness()
	h.rollbackFirst[0] = true
	startPass(t, pool, "pass-1", 1)
	startClient(t, url, h, queue.Config{})
	waitFor(t, "the drain of pass-1", drained(t, pool, "pass-1"))
	checkPass(t, pool, h, "pass-1", 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := []rolledBack{{last: true, remaining: 1}}; !slices.Equal(h.rolledBack, want) {
		t.Errorf("rolled-back completions (told last, count after): %+v, want %+v", h.rolledBack, want)
	}
}

// A job already completed cannot be completed and counted again: the
// second completion fails with ErrNotRunning and leaves the count alone.
func TestCompleteTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	pool, url := migrated(t)
	startPass(t, pool, "pass-1", 2)
	type outcome struct {
		first, second error
		last          bool
	}
	got := make(chan outcome, 1)
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(ctx context.Context, job *river.Job[fetchArgs]) error {
		if job.Args.I != 0 {
			<-ctx.Done() // the other job stays running, so the count stays above zero
			return ctx.Err()
		}
		var o outcome
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		o.last, o.first = queue.CompleteInStage(ctx, tx, job.JobRow, "pass-1", queue.StageFetch)
		if o.first == nil {
			o.first = tx.Commit(ctx)
		}
		tx, err = pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		_, o.second = queue.CompleteInStage(ctx, tx, job.JobRow, "pass-1", queue.StageFetch)
		got <- o
		return nil
	}))
	q, err := queue.Open(newPool(t, url), queue.Config{Workers: w, StopTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var o outcome
	select {
	case o = <-got:
	case <-time.After(2 * time.Minute):
		t.Fatal("no job worked within two minutes")
	}
	if err := q.Stop(t.Context()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if o.first != nil || o.last {
		t.Errorf("first completion: last %t, %v; want not last, no error", o.last, o.first)
	}
	if !errors.Is(o.second, queue.ErrNotRunning) {
		t.Errorf("second completion of the same job: %v, want ErrNotRunning", o.second)
	}
	if n := count(t, pool, `SELECT remaining FROM reconcile.pass_fanin WHERE pass_id = 'pass-1' AND stage = $1`, queue.StageFetch); n != 1 {
		t.Errorf("remaining %d after one job completed (once), want 1", n)
	}
}

// A client that dies holding a job (the helper process, killed) leaves it
// running; a client started after, with a short RescueStuckJobsAfter,
// rescues it once it is elected leader, works it, and the pass goes on:
// the job counts once, and the next stage is inserted once.
func TestRescueAfterClientDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and waits for its leadership to lapse")
	}
	t.Parallel()
	pool, url := migrated(t)
	startPass(t, pool, "pass-1", 2)
	cmd := exec.Command(os.Args[0], "-test.run=^TestQueueHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "QUEUE_TEST_HELPER_DB="+url)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	var held int64
	for held == 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the helper exited before it held a job")
			}
			if s, ok := strings.CutPrefix(l, "holding "); ok {
				held, _ = strconv.ParseInt(s, 10, 64)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the helper held no job within two minutes")
		}
	}
	remaining := func() int {
		return count(t, pool, `SELECT remaining FROM reconcile.pass_fanin WHERE pass_id = 'pass-1' AND stage = $1`, queue.StageFetch)
	}
	waitFor(t, "the helper to complete the job it does not hold", func() bool { return remaining() == 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if state := jobState(t, pool, held); state != rivertype.JobStateRunning {
		t.Fatalf("the held job is %s after its client died, want running", state)
	}

	h := newHarness()
	startClient(t, url, h, queue.Config{JobTimeout: time.Second, RescueStuckJobsAfter: 2 * time.Second})
	waitFor(t, "the drain of pass-1", drained(t, pool, "pass-1"))
	checkPass(t, pool, h, "pass-1", 2)
	var attempt int
	var by []string
	if err := pool.QueryRow(t.Context(), `SELECT attempt, attempted_by FROM reconcile.river_job WHERE id = $1`, held).Scan(&attempt, &by); err != nil {
		t.Fatal(err)
	}
	if attempt != 2 || len(by) != 2 || by[0] == by[1] {
		t.Errorf("the rescued job: attempt %d by %v, want the second, by a second client", attempt, by)
	}
}

// TestQueueHelperProcess is the client TestRescueAfterClientDies kills:
// it works the fetch jobs of pass-1, holding job 0 until it is killed.
func TestQueueHelperProcess(t *testing.T) {
	url := os.Getenv("QUEUE_TEST_HELPER_DB")
	if url == "" {
		t.Skip("the helper of TestRescueAfterClientDies")
	}
	h := newHarness()
	h.hold[0] = true
	startClient(t, url, h, queue.Config{})
	select {} // until killed
}

func jobState(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int64) rivertype.JobState {
	t.Helper()
	var state string
	if err := pool.QueryRow(context.Background(), `SELECT state FROM reconcile.river_job WHERE id = $1`, id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return rivertype.JobState(state)
}

// The drain of a pass is inserted once however often it is asked for;
// another pass's is its own.
func TestDrainIsUnique(t *testing.T) {
	t.Parallel()
	pool, _ := migrated(t)
	q, err := queue.Open(pool, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	insert := func(pass string) *rivertype.JobInsertResult {
		t.Helper()
		res, err := q.Client().Insert(t.Context(), drainArgs{Pass: pass}, queue.DrainOpts())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := insert("pass-1")
	if first.UniqueSkippedAsDuplicate || first.Job.Queue != queue.StageDrain {
		t.Errorf("first drain of pass-1: skipped %t, queue %q; want inserted in %q", first.UniqueSkippedAsDuplicate, first.Job.Queue, queue.StageDrain)
	}
	if again := insert("pass-1"); !again.UniqueSkippedAsDuplicate || again.Job.ID != first.Job.ID {
		t.Errorf("second drain of pass-1: skipped %t, job %d; want the first, %d", again.UniqueSkippedAsDuplicate, again.Job.ID, first.Job.ID)
	}
	if other := insert("pass-2"); other.UniqueSkippedAsDuplicate {
		t.Errorf("the drain of pass-2 was skipped as a duplicate of pass-1's")
	}
}

// A stage is started once, with at least one job; Open refuses a stage
// it does not know and a rescue sooner than the job timeout; a completion
// outside a worker fails rather than panic in River.
func TestStageMisuse(t *testing.T) {
	t.Parallel()
	pool, _ := migrated(t)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if err := queue.StartStage(t.Context(), tx, "pass-1", queue.StageFetch, 0); err == nil {
		t.Errorf("a stage of no job started")
	}
	if err := queue.StartStage(t.Context(), tx, "pass-1", queue.StageFetch, 3); err != nil {
		t.Fatal(err)
	}
	if err := queue.StartStage(t.Context(), tx, "pass-1", queue.StageFetch, 3); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Errorf("a stage started twice: %v, want already started", err)
	}
	if _, err := queue.Open(pool, queue.Config{MaxWorkers: map[string]int{"fecth": 2}}); err == nil || !strings.Contains(err.Error(), "fecth") {
		t.Errorf("Open with MaxWorkers of a stage misspelt: %v, want an error naming it", err)
	}
	if _, err := queue.Open(pool, queue.Config{JobTimeout: 2 * time.Second, RescueStuckJobsAfter: time.Second}); err == nil {
		t.Errorf("Open with RescueStuckJobsAfter below JobTimeout succeeded")
	}
	job := &rivertype.JobRow{ID: 1, Kind: fetchArgs{}.Kind(), State: rivertype.JobStateRunning, Attempt: 1}
	if _, err := queue.CompleteInStage(t.Context(), tx, job, "pass-1", queue.StageFetch); err == nil || !strings.Contains(err.Error(), "worker's context") {
		t.Errorf("CompleteInStage outside a worker: %v, want an error saying so", err)
	}
}

// Stop lets a running job finish; one still running when StopTimeout is
// over has its context cancelled, and River puts it back in its queue.
func TestStop(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		timeout   time.Duration
		wantState rivertype.JobState
	}{
		{"finishes within the grace", time.Minute, rivertype.JobStateCompleted},
		{"cancelled after the grace", time.Millisecond, rivertype.JobStateAvailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool, url := migrated(t)
			started, release := make(chan int64), make(chan struct{})
			w := river.NewWorkers()
			river.AddWorker(w, river.WorkFunc(func(ctx context.Context, job *river.Job[drainArgs]) error {
				started <- job.ID
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}))
			q, err := queue.Open(newPool(t, url), queue.Config{Workers: w, StopTimeout: tt.timeout})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Client().Insert(t.Context(), drainArgs{Pass: "pass-1"}, queue.DrainOpts()); err != nil {
				t.Fatal(err)
			}
			id := <-started
			stopped := make(chan error, 1)
			go func() { stopped <- q.Stop(context.Background()) }()
			if tt.wantState == rivertype.JobStateCompleted {
				// Stop is waiting (or about to): the job ends on its own.
				close(release)
			}
			if err := <-stopped; err != nil {
				t.Errorf("Stop: %v", err)
			}
			if got := jobState(t, pool, id); got != tt.wantState {
				t.Errorf("the running job is %s after Stop, want %s", got, tt.wantState)
			}
		})
	}
}

// A worker that ignored its context while the rescuer handed its job on
// counts nothing when it comes back: not while the job runs again at the
// next attempt, nor once that attempt completed it. The job counts once,
// for the attempt that completed it.
func TestRescuedWorkerCountsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a tick of River's rescuer")
	}
	t.Parallel()
	pool, url := migrated(t)
	startPass(t, pool, "pass-1", 1)
	var lasts atomic.Int32
	stale := make(chan [2]error, 1) // the first attempt's two completions
	release := make(chan struct{})
	stateOf := func(ctx context.Context, id int64) (state string, attempt int) {
		if err := pool.QueryRow(ctx, `SELECT state::text, attempt FROM reconcile.river_job WHERE id = $1`, id).Scan(&state, &attempt); err != nil {
			return "unreadable: " + err.Error(), 0
		}
		return state, attempt
	}
	complete := func(ctx context.Context, job *river.Job[fetchArgs]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		last, err := queue.CompleteInStage(ctx, tx, job.JobRow, "pass-1", queue.StageFetch)
		if err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if last {
			lasts.Add(1)
		}
		return nil
	}
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(ctx context.Context, job *river.Job[fetchArgs]) error {
		if job.Attempt > 1 {
			<-release
			return complete(ctx, job)
		}
		// The first attempt outlives its JobTimeout, as a worker stuck in a
		// call that ignores its context would, until the rescued job runs
		// again.
		ctx = context.WithoutCancel(ctx)
		for {
			if state, attempt := stateOf(ctx, job.ID); state == "running" && attempt == 2 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		var errs [2]error
		errs[0] = complete(ctx, job)
		close(release)
		for {
			if state, _ := stateOf(ctx, job.ID); state == "completed" {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		errs[1] = complete(ctx, job)
		stale <- errs
		// Its error, as a worker returns CompleteInStage's: River then
		// leaves the completed job as it is.
		return errs[1]
	}))
	q, err := queue.Open(newPool(t, url), queue.Config{Workers: w, JobTimeout: time.Second, RescueStuckJobsAfter: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	var errs [2]error
	select {
	case errs = <-stale:
	case <-time.After(2 * time.Minute):
		t.Fatal("the job was not rescued and run again within two minutes")
	}
	if !errors.Is(errs[0], queue.ErrNotRunning) || !errors.Is(errs[1], queue.ErrNotRunning) {
		t.Errorf("the rescued attempt's completions: while the next ran %v, after it completed %v; want ErrNotRunning both", errs[0], errs[1])
	}
	if n := count(t, pool, `SELECT remaining FROM reconcile.pass_fanin WHERE pass_id = 'pass-1'`); n != 0 || lasts.Load() != 1 {
		t.Errorf("remaining %d, %d last completions; want 0 and one", n, lasts.Load())
	}
}
