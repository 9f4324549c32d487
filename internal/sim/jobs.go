package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile"
	"reconcile/internal/queue"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/workers"
)

// A pass run as jobs (docs/design.md, "Passes as jobs") is driven here by
// the simulation itself, not by River's clients, whose goroutines would
// make a history depend on the machine: the steps the workers drive
// (runner.PlanPass, store.BeginPass, runner.FetchSlice,
// runner.ApplyAccount, store.FinishPass and the drain), with the same
// transactions, one job at a time in a seeded order. Each job completes
// itself in its last write's transaction, as queue.CompleteInStage does:
// the attempt must still be the job's own, and the stage's count in
// reconcile.pass_fanin is decremented there; the completion that brings
// it to zero starts the next stage in the same transaction.
//
// The worker-kill fault: a job's worker dies at a seeded point of an
// attempt — before its transaction, after its writes but before its
// commit (the transaction rolls back), after its commit, or, for an
// apply, after its part's commit but before its mirror save — or stalls, so that
// River's rescuer hands the job on while the stale attempt runs later
// and must change nothing (its completion finds the job no longer its
// own). A job whose attempt died is run again, in a seeded order among
// the other jobs, up to workers.MaxAttempts; one whose last attempt
// returned an error fails its pass (store.FailPass), and one whose last
// attempt died is discarded by River's rescuer.

// jobKind names the jobs of a pass.
const (
	jobFetch = "fetch"
	jobApply = "apply"
	jobDrain = "drain"
)

// drainAttempts bounds a drain's attempts: River's default.
const drainAttempts = 25

// simJob is one job of a pass run as jobs, as River's row holds it.
type simJob struct {
	id      int
	kind    string
	slice   runner.Slice
	account store.PassAccount
	attempt int // the attempts River gave it so far
	max     int
	done    bool // completed
	gone    bool // discarded: its last attempt died or failed
}

func (j *simJob) String() string {
	switch j.kind {
	case jobFetch:
		return fmt.Sprintf("fetch#%d %s..%s", j.id, j.slice.Window.From.Sub(epoch), j.slice.Window.To.Sub(epoch))
	case jobApply:
		return fmt.Sprintf("apply#%d %q", j.id, j.account.Account.ID)
	}
	return fmt.Sprintf("drain#%d", j.id)
}

// runItem is one worker taking a job: a new attempt, or a stale one
// resumed after the rescuer handed the job on.
type runItem struct {
	job     *simJob
	attempt int // for a stale item: the attempt it runs
	stale   bool
}

// jobPass is the driver of one pass run as jobs.
type jobPass struct {
	w    *world
	pc   *passCtl
	rng  *rand.Rand
	r    *runner.Runner
	plan runner.PassPlan

	jobs    []*simJob
	queue   []runItem
	nextID  int
	killAt  string    // this attempt's kill point; "" for none
	cur     runItem   // the attempt running
	next    []*simJob // the next stage's jobs, inserted by the completion running
	thenOK  bool      // the running attempt's completion ran in its transaction
	doneNow bool      // the running attempt's completion committed
	failed  string    // the cause the pass was failed with
	kills   []string  // what the fault did, for the trace
	// crashLoop is a job whose worker dies on every attempt (a job that
	// takes its worker's memory, say), in some passes: River's rescuer
	// discards it after its last attempt.
	crashLoop int
	crashAt   string // where it dies
	// drainErr is what the last drain's delivery returned.
	drainErr error
}

// errNotRunning is queue.ErrNotRunning: a worker whose job is no longer
// its own returns it.
var errNotRunning = queue.ErrNotRunning

// jobsRand draws a history's choices about passes run as jobs apart from
// its own, so that histories with none replay as before.
func (w *world) jobsRand() *rand.Rand {
	if w.jrng == nil {
		w.jrng = rand.New(rand.NewPCG(w.seed, 0x10b5))
	}
	return w.jrng
}

// runJobPass runs plan's pass as jobs to its end and checks it as a
// one-process pass is checked.
func (w *world) runJobPass(plan passPlan) (*passCtl, error) {
	plan.dryRun, plan.killAfterPage, plan.killAfterApply, plan.killAfterSend = false, 0, false, 0
	plan.interleave = false
	pc := w.newPass(plan)
	pc.jobs = true
	r, err := w.newRunner(pc)
	if err != nil {
		return nil, err
	}
	jp := &jobPass{w: w, pc: pc, rng: w.jobsRand(), r: r}
	r.Store = &jobStore{simStore: r.Store.(*simStore), jp: jp}
	r.Mirror = &jobMirror{Mirror: r.Mirror, jp: jp}
	r.Provider = &jobProvider{Provider: r.Provider, jp: jp}
	if err := pc.begin(); err != nil {
		return nil, err
	}
	runErr := jp.run()
	pc.cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	pc.runErr = runErr
	if errors.Is(runErr, errStuck) {
		pc.stuckRun = jp.plan.Run.ID
	}
	if pc.runErr == nil && pc.outcome == nil {
		pc.runErr = errors.New("sim: the pass as jobs completed without an apply")
	}
	if pc.runErr != nil {
		// A pass that failed is held to I7 as a failed pass is; its
		// applied parts' alerts are released (store.FailPass), which the
		// checks below see as the parts' own.
		pc.result, pc.applied = nil, nil
	}
	if pc.outcome != nil {
		pc.outcome.AlertErr = jp.drainErr
	}
	w.tracef("pass %d as jobs: %s", pc.n, strings.Join(jp.kills, ", "))
	w.stat("jobs_passes")
	switch {
	case pc.runErr == nil:
		w.stat("jobs_completed")
	case errors.Is(pc.runErr, errStuck):
		w.stat("jobs_stuck")
	default:
		w.stat("jobs_failed")
	}
	for _, j := range jp.jobs {
		w.statN("jobs_attempts_"+j.kind, j.attempt)
	}
	if err := w.checkPass(pc); err != nil {
		return nil, err
	}
	if err := w.checkJobPass(pc, jp); err != nil {
		return nil, err
	}
	w.checkReturn(pc)
	w.rep.Coverage.add(pc)
	return pc, nil
}

// run plans and enqueues the pass, as workers.Enqueue does, and works its
// jobs until none is left. Its error is the pass's, when it was not
// enqueued, failed, or is still running (errStuck).
func (jp *jobPass) run() error {
	w, pc := jp.w, jp.pc
	ctx := w.ctx
	plan, err := jp.r.PlanPass(ctx, runner.Request{Window: pc.plan.window, Trigger: reconcile.TriggerCron}, jp.sliceLen())
	if err != nil {
		return err
	}
	accounts := make([]store.PassAccount, len(plan.Accounts))
	for i, a := range plan.Accounts {
		accounts[i] = store.PassAccount{Account: a, Cover: plan.Covers[a.ID]}
	}
	var fetches []*simJob
	for _, s := range plan.Slices {
		fetches = append(fetches, jp.newJob(jobFetch, s, store.PassAccount{}))
	}
	err = pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := w.store.BeginPass(ctx, tx, plan.Run, accounts); err != nil {
			return err
		}
		return queue.StartStage(ctx, tx, plan.Run.ID, queue.StageFetch, len(fetches))
	})
	if stuck := w.stuckRun; stuck != "" {
		// A pass left running by a job River discarded is failed when
		// the next pass is enqueued (store.BeginPass).
		w.stuckRun = ""
		var status string
		if qerr := w.env.Pool.QueryRow(ctx, `SELECT status FROM reconcile.runs WHERE id = $1`, stuck).Scan(&status); qerr != nil {
			return qerr
		}
		if status != string(reconcile.RunFailed) {
			w.mu.Lock()
			w.violate("I7", pc.n, "pass %s, none of whose jobs is left, is still %s when the next pass is enqueued (%v)", stuck, status, err)
			w.mu.Unlock()
		}
	}
	if err != nil {
		return fmt.Errorf("enqueue the pass: %w", err)
	}
	jp.plan = plan
	jp.enqueue(fetches)
	if jp.rng.Float64() < 0.05 {
		// The first fetch, or the apply (numbered after the fetches).
		jp.crashLoop = []int{1, len(fetches) + 1}[jp.rng.IntN(2)]
		jp.crashAt = []string{"before", "rollback"}[jp.rng.IntN(2)]
	}
	for len(jp.queue) > 0 {
		i := jp.rng.IntN(len(jp.queue))
		it := jp.queue[i]
		jp.queue = slices.Delete(jp.queue, i, i+1)
		if err := jp.work(it); err != nil {
			return err
		}
	}
	var status string
	if err := w.env.Pool.QueryRow(ctx, `SELECT status FROM reconcile.runs WHERE id = $1`, plan.Run.ID).Scan(&status); err != nil {
		return err
	}
	// The pass's fate is its run row's.
	switch status {
	case string(reconcile.RunCompleted):
		return nil
	case string(reconcile.RunRunning):
		return errStuck
	}
	return fmt.Errorf("sim: the pass is %s: %s", status, jp.failed)
}

// errStuck: every job of the pass ended, but the pass is still running.
var errStuck = errors.New("sim: no job of the pass is left, and the pass is still running")

// sliceLen cuts the coverage into a few slices: a day, or less.
func (jp *jobPass) sliceLen() time.Duration {
	return []time.Duration{24 * time.Hour, 12 * time.Hour, 30 * time.Hour, 72 * time.Hour}[jp.rng.IntN(4)]
}

// newJob is a job to insert; enqueue numbers it once its insert commits.
func (jp *jobPass) newJob(kind string, s runner.Slice, a store.PassAccount) *simJob {
	j := &simJob{kind: kind, slice: s, account: a, max: workers.MaxAttempts}
	if kind == jobDrain {
		j.max = drainAttempts
	}
	return j
}

// enqueue makes jobs whose insert committed available to the workers.
func (jp *jobPass) enqueue(js []*simJob) {
	for _, j := range js {
		jp.nextID++
		j.id = jp.nextID
		jp.jobs = append(jp.jobs, j)
		jp.queue = append(jp.queue, runItem{job: j})
	}
}

// drawKill draws where this attempt's worker dies, if it does: at a
// modest rate, so that most attempts complete.
func (jp *jobPass) drawKill(j *simJob) string {
	if j.id == jp.crashLoop && j.kind != jobDrain {
		return jp.crashAt
	}
	if jp.rng.Float64() >= 0.2 {
		return ""
	}
	switch j.kind {
	case jobFetch:
		return []string{"before", "rollback", "after", "stall"}[jp.rng.IntN(4)]
	case jobApply:
		return []string{"before", "mirror", "rollback", "after", "stall"}[jp.rng.IntN(5)]
	}
	return []string{"before", "rollback", "after", "send"}[jp.rng.IntN(4)]
}

// work runs one attempt of a job, as a worker does, with the fault the
// seed draws for it, and hands the job on as River would.
func (jp *jobPass) work(it runItem) error {
	w, pc, j := jp.w, jp.pc, it.job
	if !it.stale {
		if j.done || j.gone {
			return nil
		}
		j.attempt++
		it.attempt = j.attempt
	}
	kill := ""
	if !it.stale {
		kill = jp.drawKill(j)
	}
	if kill == "stall" {
		// The worker stalls before its transaction; the rescuer takes
		// the job from it (discarding it after its last attempt), and the
		// stale attempt resumes later.
		jp.note(pc, j, it, "stall")
		jp.queue = append(jp.queue, runItem{job: j, attempt: it.attempt, stale: true})
		jp.rescue(j)
		return nil
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.mu.Lock()
	pc.ctx, pc.cancel = ctx, cancel
	pc.killed.Store(false)
	jp.killAt, jp.cur, jp.next, jp.thenOK, jp.doneNow = kill, it, nil, false, false
	if kill == "send" {
		pc.plan.killAfterSend = pc.sends + 1 + jp.rng.IntN(2)
	} else {
		pc.plan.killAfterSend = 0
	}
	w.mu.Unlock()
	var err error
	switch j.kind {
	case jobFetch:
		_, err = jp.r.FetchSlice(ctx, jp.plan.Run, j.slice, jp.then(j, queue.StageFetch))
	case jobApply:
		var out *runner.Outcome
		out, err = jp.r.ApplyAccount(ctx, jp.plan.Run, j.account.Account, j.account.Cover, runner.Shard{}, jp.then(j, queue.StageApply))
		if err == nil && !it.stale {
			w.mu.Lock()
			pc.outcome = out
			w.mu.Unlock()
		}
	case jobDrain:
		err = jp.drain(ctx)
	}
	cancel()
	w.mu.Lock()
	died := pc.killed.Load()
	if died && pc.killedAt == "send" {
		kill = "send"
		pc.killedAt = ""
		delete(pc.fired, "kill_after_send")
	}
	pc.plan.killAfterSend = 0
	w.mu.Unlock()
	if jp.doneNow {
		j.done = true
		jp.enqueue(jp.next)
	}
	switch {
	case it.stale:
		// A stale attempt's completion must find the job no longer its own.
		jp.note(pc, j, it, "stale")
		switch {
		case jp.doneNow:
			w.violate("I4", pc.n, "the stale attempt %d of %s completed it", it.attempt, j)
		case err != nil && !errors.Is(err, errNotRunning):
			w.tracef("pass %d: stale attempt %d of %s: %s", pc.n, it.attempt, j, short(err))
			// Its worker fails the pass if that was the last attempt
			// (workers: failing), as any worker does.
			if it.attempt >= j.max {
				return jp.fail(err)
			}
		}
		return nil
	case died:
		jp.note(pc, j, it, kill)
		// A job that completed itself before its worker died is done; a
		// drain completes only when its worker returns: River hands it on.
		if !j.done {
			jp.rescue(j)
		}
		return nil
	case err == nil && (j.done || j.kind == jobDrain):
		j.done = true
		return nil
	case err == nil:
		return fmt.Errorf("sim: %s returned without completing itself", j)
	}
	// The attempt failed: River retries it, and its last attempt fails
	// the pass (workers: failing).
	w.errTexts = append(w.errTexts, err.Error())
	jp.kills = append(jp.kills, fmt.Sprintf("%s attempt %d failed", j, it.attempt))
	if j.attempt < j.max || errors.Is(err, errNotRunning) {
		jp.queue = append(jp.queue, runItem{job: j})
		return nil
	}
	j.gone = true
	if j.kind == jobDrain {
		return nil
	}
	return jp.fail(err)
}

// fail fails the pass with err's cause, as a job's last failed attempt
// does (workers: failing).
func (jp *jobPass) fail(err error) error {
	w := jp.w
	if ferr := w.store.FailPass(context.WithoutCancel(w.ctx), jp.plan.Run.ID, err.Error(), w.clock.Now().UTC(), nil); ferr != nil {
		return ferr
	}
	if jp.failed == "" {
		jp.failed = err.Error()
	}
	w.mu.Lock()
	jp.pc.fired["job_failed"] = true
	w.mu.Unlock()
	return nil
}

// rescue hands a job whose worker died or stalled on, as River's rescuer
// does: available again, or discarded after its last attempt.
func (jp *jobPass) rescue(j *simJob) {
	if j.attempt >= j.max {
		j.gone = true
		jp.kills = append(jp.kills, fmt.Sprintf("%s discarded after attempt %d", j, j.attempt))
		jp.w.stat("jobs_discarded")
		return
	}
	jp.queue = append(jp.queue, runItem{job: j})
}

func (jp *jobPass) note(pc *passCtl, j *simJob, it runItem, what string) {
	jp.kills = append(jp.kills, fmt.Sprintf("%s attempt %d %s", j, it.attempt, what))
	jp.w.mu.Lock()
	pc.fired["job_kill_"+what] = true
	jp.w.mu.Unlock()
}

// die kills the running attempt's worker at point, if the attempt's
// fault is there: its context ends and its every later call fails.
func (jp *jobPass) die(point string) bool {
	if jp.killAt != point || jp.cur.stale {
		return false
	}
	pc := jp.pc
	jp.w.mu.Lock()
	pc.killed.Store(true)
	jp.w.mu.Unlock()
	pc.cancel()
	return true
}

// then is the job's completion, run last in its step's transaction, as
// the workers' is (queue.CompleteInStage and the next stage's insert).
func (jp *jobPass) then(j *simJob, stage string) func(ctx context.Context, tx pgx.Tx) error {
	it := jp.cur
	return func(ctx context.Context, tx pgx.Tx) error {
		if it.stale || j.done || j.gone || it.attempt != j.attempt {
			return fmt.Errorf("sim: %s attempt %d: %w", j, it.attempt, errNotRunning)
		}
		var remaining int
		if err := tx.QueryRow(ctx, `UPDATE reconcile.pass_fanin SET remaining = remaining - 1
			WHERE pass_id = $1 AND stage = $2 RETURNING remaining`, jp.plan.Run.ID, stage).Scan(&remaining); err != nil {
			return fmt.Errorf("sim: count %s: %w", j, err)
		}
		var next []*simJob
		if remaining == 0 {
			switch stage {
			case queue.StageFetch:
				accounts, err := jp.w.store.PassAccounts(ctx, tx, jp.plan.Run.ID)
				if err != nil {
					return err
				}
				if err := queue.StartStage(ctx, tx, jp.plan.Run.ID, queue.StageApply, len(accounts)); err != nil {
					return err
				}
				for _, a := range accounts {
					next = append(next, jp.newJob(jobApply, runner.Slice{}, a))
				}
			case queue.StageApply:
				next = append(next, jp.newJob(jobDrain, runner.Slice{}, store.PassAccount{}))
			}
		}
		if jp.die("rollback") {
			return errKilled
		}
		jp.next, jp.thenOK = next, true
		return nil
	}
}

// committed records that the running attempt's completion committed.
func (jp *jobPass) committed() {
	jp.doneNow = jp.thenOK
}

// drain is the drain job's work (workers: drainWorker.Work): finish the
// pass as one run, then deliver the alerts under the platform's run lock.
func (jp *jobPass) drain(ctx context.Context) error {
	w := jp.w
	if jp.die("before") {
		return errKilled
	}
	_, _, err := w.store.FinishPass(ctx, jp.plan.Run.ID, w.clock.Now().UTC(), func(ctx context.Context, tx pgx.Tx) error {
		if jp.die("rollback") {
			return errKilled
		}
		return nil
	})
	if err != nil {
		return err
	}
	if jp.die("after") {
		return errKilled
	}
	st := jp.r.Store.(*jobStore)
	lock, err := st.LockAccount(ctx, "", true)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = lock.Release(rctx)
	}()
	ctx = store.WithFence(ctx, lock)
	_, jp.drainErr = jp.r.Alerts.Drain(ctx, st.simStore, w.clock.Now)
	if jp.pc.killed.Load() {
		return errKilled
	}
	return nil
}

// jobStore is the store of a pass run as jobs: simStore, with the parts'
// steps, killing the running attempt where its fault says.
type jobStore struct {
	*simStore
	jp *jobPass
}

func (s *jobStore) LockAccount(ctx context.Context, account string, wait bool) (*store.Lock, error) {
	if s.jp.cur.job != nil && s.jp.cur.job.kind == jobApply && s.jp.die("before") {
		return nil, errKilled
	}
	if s.pc.killed.Load() {
		return nil, errKilled
	}
	return s.inner.LockAccount(ctx, account, wait)
}

func (s *jobStore) ApplyPart(ctx context.Context, run reconcile.Run, part store.Part, res reconcile.Conclusions, rep store.PartReport, now time.Time,
	then func(ctx context.Context, tx pgx.Tx) error) (store.Applied, error) {
	jp, pc, w := s.jp, s.pc, s.pc.w
	if pc.killed.Load() {
		return store.Applied{}, errKilled
	}
	applied, err := s.inner.ApplyPart(ctx, run, part, res, rep, now, then)
	if err != nil {
		return applied, err
	}
	jp.committed()
	w.mu.Lock()
	if !jp.cur.stale {
		pc.result, pc.applied = &res, &applied
	}
	w.mu.Unlock()
	// A worker that dies after the commit does nothing more but log:
	// what ApplyAccount returns is what the part applied.
	jp.die("after")
	return applied, nil
}

// jobProvider is the provider of a pass run as jobs: a fetch's worker
// that dies before its transaction dies before it reads, since reading
// writes nothing.
type jobProvider struct {
	runner.Provider
	jp *jobPass
}

func (p *jobProvider) List(ctx context.Context, win reconcile.Window) (*sources.Listing, error) {
	if j := p.jp.cur.job; j != nil && j.kind == jobFetch && p.jp.die("before") {
		return nil, errKilled
	}
	return p.Provider.List(ctx, win)
}

// jobMirror is the mirror of a pass run as jobs, killing the running
// attempt around its saves where its fault says.
type jobMirror struct {
	runner.Mirror
	jp *jobPass
}

func (m *jobMirror) Save(ctx context.Context, u store.MirrorUpdate) error {
	jp := m.jp
	if u.Then == nil {
		// An apply's save of what it read, moving the cursors, once its
		// part committed: a worker that dies before it leaves the cursors
		// where they were.
		if jp.die("mirror") || jp.pc.killed.Load() {
			return errKilled
		}
		return m.Mirror.Save(ctx, u)
	}
	if jp.pc.killed.Load() {
		return errKilled
	}
	if err := m.Mirror.Save(ctx, u); err != nil {
		return err
	}
	jp.committed()
	if jp.die("after") {
		return errKilled
	}
	return nil
}

// checkJobPass holds a pass run as jobs to what store.FinishPass and
// store.FailPass promise (docs/design.md, "Passes as jobs"): once it
// ends, no alert of it is held back; a completed pass has one part per
// account; a failed pass releases its applied parts' alerts, due at
// once, and queues no summary; and a pass whose jobs all ended is not
// left running, unless River discarded one of them after its worker died
// on its last attempt, when the next pass enqueued fails it
// (store.BeginPass), releasing its parts' alerts then. With the
// platform's account alone, the one part is the pass's last job but the
// drain, so a failed pass applied nothing: checkPass holds it to I7
// (nothing changed but what its fetches mirrored, no cursor moved).
// Called under w.mu.
func (w *world) checkJobPass(pc *passCtl, jp *jobPass) error {
	if jp.plan.Run.ID == "" {
		return nil
	}
	id := jp.plan.Run.ID
	var status string
	var held, parts, summaries int
	err := w.env.Pool.QueryRow(w.ctx, `SELECT status,
		(SELECT count(*) FROM reconcile.pass_parts p, jsonb_array_elements(coalesce(p.summary->'alerts', '[]'::jsonb)) a
			WHERE p.run_id = $1 AND NOT EXISTS (SELECT 1 FROM reconcile.outbox o
				WHERE o.run_id = $1 AND o.fingerprint = a->>'fingerprint' AND o.event = a->>'event')),
		(SELECT count(*) FROM reconcile.pass_parts WHERE run_id = $1),
		(SELECT count(*) FROM reconcile.outbox WHERE run_id = $1 AND event = 'summary')
		FROM reconcile.runs WHERE id = $1`, id).Scan(&status, &held, &parts, &summaries)
	if err != nil {
		return fmt.Errorf("read pass %s: %w", id, err)
	}
	switch {
	case status == string(reconcile.RunRunning) && pc.stuckRun == id:
		// River's rescuer discarded a job whose worker died on its last
		// attempt: no worker is left to fail the pass. It stays running,
		// and holds its alerts, until the next pass is enqueued.
		w.stuckRun = id
		w.tracef("pass %d as jobs left running: a job was discarded", pc.n)
	case status == string(reconcile.RunRunning):
		w.violate("I7", pc.n, "no job of pass %s is left (%s), and the pass is still running", id, strings.Join(jp.kills, ", "))
	case held > 0:
		w.violate("I3", pc.n, "pass %s ended %s holding %d alerts back", id, status, held)
	case status == string(reconcile.RunCompleted) && parts != len(jp.plan.Accounts):
		w.violate("I4", pc.n, "pass %s completed with %d parts for %d accounts", id, parts, len(jp.plan.Accounts))
	case status == string(reconcile.RunFailed) && summaries > 0:
		w.violate("I3", pc.n, "failed pass %s queued a summary", id)
	}
	return nil
}

// stat counts one event in the report's statistics.
func (w *world) stat(name string) { w.statN(name, 1) }

func (w *world) statN(name string, n int) {
	if w.rep.Stats == nil {
		w.rep.Stats = map[string]int{}
	}
	w.rep.Stats[name] += n
}
