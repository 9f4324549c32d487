// Package workers runs a pass as River jobs (docs/design.md, "Passes as
// jobs"): the jobs' arguments, their workers, and Enqueue, which plans a
// pass and inserts its first stage. A fetch job per account and time
// slice reads the provider into the mirror (runner.FetchSlice); the last
// of them to complete inserts one match-and-apply job per account, or
// per shard of each (workers.shards; runner.ApplyAccount); the last of those inserts the pass's drain,
// which finishes the pass as one run (store.FinishPass) and delivers its
// alerts. Every job completes itself in the transaction of its last
// write (queue.CompleteInStage), so that what it did and its count in the
// fan-in commit together; a job that fails its last attempt fails the
// pass (store.FailPass). The package is wiring: what a job reads and
// concludes is the runner's, what it writes the store's.
package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/queue"
	"reconcile/internal/runner"
	"reconcile/internal/store"
)

// Pass names a pass run as jobs in every job's arguments: its run, as the
// plan made it.
type Pass struct {
	ID      string            `json:"id" river:"unique"`
	Trigger reconcile.Trigger `json:"trigger"`
	From    time.Time         `json:"from"`
	To      time.Time         `json:"to"`
	Started time.Time         `json:"started"`
}

func passOf(run reconcile.Run) Pass {
	return Pass{ID: run.ID, Trigger: run.Trigger, From: run.Window.From, To: run.Window.To, Started: run.Started}
}

func (p Pass) run() reconcile.Run {
	return reconcile.Run{ID: p.ID, Trigger: p.Trigger, Window: reconcile.Window{From: p.From, To: p.To}, Started: p.Started,
		Status: reconcile.RunRunning}
}

// FetchArgs is a fetch job: one account's records created in [From, To).
type FetchArgs struct {
	Pass    Pass      `json:"pass"`
	Account string    `json:"account"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
}

// Kind is the job's kind in River.
func (FetchArgs) Kind() string { return "reconcile_fetch" }

// ApplyArgs is a match-and-apply job: one account's share of the pass,
// its records read from the mirror over Cover.
type ApplyArgs struct {
	Pass        Pass      `json:"pass"`
	Account     string    `json:"account"`
	AccountName string    `json:"account_name,omitempty"`
	CoverFrom   time.Time `json:"cover_from"`
	CoverTo     time.Time `json:"cover_to"`
	// Shard of Shards, when Shards > 1: the job applies that shard of
	// the account's share (docs/design.md, "Shards").
	Shard  int `json:"shard,omitempty"`
	Shards int `json:"shards,omitempty"`
}

// Kind is the job's kind in River.
func (ApplyArgs) Kind() string { return "reconcile_apply" }

// DrainArgs is the pass's drain: unique by its pass (queue.DrainOpts).
type DrainArgs struct {
	Pass Pass `json:"pass"`
}

// Kind is the job's kind in River.
func (DrainArgs) Kind() string { return "reconcile_drain" }

// MaxAttempts is how often a fetch or apply job is tried before it fails
// its pass: River's backoff between attempts rides out a Stripe or
// database outage of some minutes.
const MaxAttempts = 5

// Deps are what the workers work with: the runner (wired as for `run`,
// every account's readers), the store, the deliverer of alerts (nil:
// alerts stay in the outbox), the pool, and the clock.
type Deps struct {
	Runner *runner.Runner
	Store  *store.Store
	Alerts runner.Deliverer
	Logger *slog.Logger
	Now    func() time.Time
	// Shards splits every account's match and apply into that many jobs
	// (workers.shards); 0 or 1 is one job an account.
	Shards int
}

// Register adds the pass's workers to ws.
func Register(ws *river.Workers, d Deps) {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	river.AddWorker(ws, &fetchWorker{d: d})
	river.AddWorker(ws, &applyWorker{d: d})
	river.AddWorker(ws, &drainWorker{d: d})
}

// Enqueue plans the pass req asks for and inserts it: its run row,
// running, its accounts, and its fetch jobs, in one transaction. It
// returns the plan; the pass's run id is plan.Run.ID.
func Enqueue(ctx context.Context, pool *pgxpool.Pool, q *queue.Queue, r *runner.Runner, st *store.Store, req runner.Request, slice time.Duration) (runner.PassPlan, error) {
	plan, err := r.PlanPass(ctx, req, slice)
	if err != nil {
		return runner.PassPlan{}, err
	}
	pass := passOf(plan.Run)
	accounts := make([]store.PassAccount, len(plan.Accounts))
	for i, a := range plan.Accounts {
		accounts[i] = store.PassAccount{Account: a, Cover: plan.Covers[a.ID]}
	}
	jobs := make([]river.InsertManyParams, len(plan.Slices))
	for i, s := range plan.Slices {
		jobs[i] = river.InsertManyParams{Args: FetchArgs{Pass: pass, Account: s.Account, From: s.Window.From, To: s.Window.To},
			InsertOpts: stageOpts(queue.StageFetch)}
	}
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := st.BeginPass(ctx, tx, plan.Run, accounts); err != nil {
			return err
		}
		return queue.InsertStage(ctx, q.Client(), tx, pass.ID, queue.StageFetch, jobs)
	})
	if err != nil {
		return runner.PassPlan{}, fmt.Errorf("enqueue the pass: %w", err)
	}
	return plan, nil
}

func stageOpts(stage string) *river.InsertOpts {
	o := queue.StageOpts(stage)
	if stage != queue.StageDrain {
		o.MaxAttempts = MaxAttempts
	}
	return o
}

// failing fails the job's pass when this was its last attempt, so that
// the run says why rather than staying running; its error is River's to
// record either way.
func failing(ctx context.Context, d Deps, job *rivertype.JobRow, pass Pass, err error) error {
	switch {
	case err == nil || errors.Is(err, queue.ErrNotRunning):
		return err
	case errors.Is(err, store.ErrPassEnded):
		// Its pass failed meanwhile: nothing more of it is done.
		return river.JobCancel(err)
	case job.Attempt < job.MaxAttempts:
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if ferr := d.Store.FailPass(ctx, pass.ID, err.Error(), d.Now().UTC(), func(ctx context.Context, tx pgx.Tx) error {
		// The alerts of the parts applied before it failed go out now.
		_, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, DrainArgs{Pass: pass}, queue.DrainOpts())
		return err
	}); ferr != nil {
		d.Logger.Error("fail the pass", "run_id", pass.ID, "error", ferr)
	}
	d.Logger.Error("pass failed", "run_id", pass.ID, "error", err)
	return err
}

type fetchWorker struct {
	river.WorkerDefaults[FetchArgs]
	d Deps
}

func (w *fetchWorker) Work(ctx context.Context, job *river.Job[FetchArgs]) error {
	a := job.Args
	run := a.Pass.run()
	_, err := w.d.Runner.FetchSlice(ctx, run, runner.Slice{Account: a.Account, Window: reconcile.Window{From: a.From, To: a.To}},
		func(ctx context.Context, tx pgx.Tx) error {
			last, err := queue.CompleteInStage(ctx, tx, job.JobRow, a.Pass.ID, queue.StageFetch)
			if err != nil || !last {
				return err
			}
			// Every fetch is in: one match-and-apply job per account, or
			// per shard of each.
			accounts, err := w.d.Store.PassAccounts(ctx, tx, a.Pass.ID)
			if err != nil {
				return err
			}
			shards := max(w.d.Shards, 1)
			jobs := make([]river.InsertManyParams, 0, len(accounts)*shards)
			for _, pa := range accounts {
				for k := range shards {
					args := ApplyArgs{Pass: a.Pass, Account: pa.Account.ID, AccountName: pa.Account.Name,
						CoverFrom: pa.Cover.From, CoverTo: pa.Cover.To}
					if shards > 1 {
						args.Shard, args.Shards = k, shards
					}
					jobs = append(jobs, river.InsertManyParams{Args: args, InsertOpts: stageOpts(queue.StageApply)})
				}
			}
			return queue.InsertStage(ctx, river.ClientFromContext[pgx.Tx](ctx), tx, a.Pass.ID, queue.StageApply, jobs)
		})
	return failing(ctx, w.d, job.JobRow, a.Pass, err)
}

type applyWorker struct {
	river.WorkerDefaults[ApplyArgs]
	d Deps
}

func (w *applyWorker) Work(ctx context.Context, job *river.Job[ApplyArgs]) error {
	a := job.Args
	run := a.Pass.run()
	acct := reconcile.Account{ID: a.Account, Name: a.AccountName}
	_, err := w.d.Runner.ApplyAccount(ctx, run, acct, reconcile.Window{From: a.CoverFrom, To: a.CoverTo},
		runner.Shard{Index: a.Shard, Of: a.Shards},
		func(ctx context.Context, tx pgx.Tx) error {
			last, err := queue.CompleteInStage(ctx, tx, job.JobRow, a.Pass.ID, queue.StageApply)
			if err != nil || !last {
				return err
			}
			// Every account is applied: the pass's drain finishes it.
			_, err = river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, DrainArgs{Pass: a.Pass}, queue.DrainOpts())
			return err
		})
	return failing(ctx, w.d, job.JobRow, a.Pass, err)
}

type drainWorker struct {
	river.WorkerDefaults[DrainArgs]
	d Deps
}

// Work finishes the pass as one run, then delivers the alerts under the
// platform's run lock, as a one-process pass delivers them, so that no
// other drain or run posts beside it. A drain stopped by its job timeout
// or its worker's death leaves the rest in the outbox, which its rescued
// retry (or the next pass) sends; one that cannot reach Slack leaves
// them for the next (docs/design.md, "Alert lifecycle").
func (w *drainWorker) Work(ctx context.Context, job *river.Job[DrainArgs]) error {
	p := job.Args.Pass
	if _, _, err := w.d.Store.FinishPass(ctx, p.ID, w.d.Now().UTC(), nil); err != nil {
		return err
	}
	if w.d.Alerts == nil {
		return nil
	}
	lock, err := w.d.Store.LockAccount(ctx, "", true)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = lock.Release(rctx)
	}()
	ctx = store.WithFence(ctx, lock)
	_, err = w.d.Alerts.Drain(ctx, w.d.Store, w.d.Now)
	permanent := ""
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, alerts.ErrPermanent) {
			level, permanent = slog.LevelError, err.Error()
		}
		w.d.Logger.Log(ctx, level, "alerts not all delivered; the next drain sends the rest", "run_id", p.ID, "error", err)
	}
	return w.d.Store.RecordAlertsError(ctx, p.ID, permanent)
}
