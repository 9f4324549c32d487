// Package queue runs a pass as River jobs (docs/design.md, "Passes as
// jobs"): a River client over the reconciler's own database, its tables in
// the schema reconcile, one queue per stage of a pass, and the fan-in that
// starts a stage once every job of the one before it is complete. It knows
// nothing of what the jobs do: their workers come in through
// Config.Workers.
//
// # The fan-in
//
// A stage's jobs are inserted in one transaction with a counter row in
// reconcile.pass_fanin holding how many there are (StartStage, or
// InsertStage for both). Each job completes itself with CompleteInStage, in
// a transaction of its worker's: River's JobCompleteTx marks the job
// completed and the counter is decremented in that same transaction, so a
// completion and its count commit or roll back together. A job retried
// after an error, or handed on by River's rescuer after its client died,
// is completed once whoever works it, and counted once: CompleteInStage
// locks the job's row and completes it only if it is still running the
// attempt its worker was given, so a second completion of the same job,
// or one by a worker the rescuer took the job from, fails and counts
// nothing. The completion that brings the counter to zero is told so
// (last), exactly once, and inserts the next stage's jobs in its
// transaction; the drain, last, is a unique job (DrainOpts), one per pass
// however often it is asked for.
//
// # Privileges
//
// `reconcile migrate`, run by the schema's owner, creates River's tables
// with the rest. A role that runs workers needs, besides what a pass needs
// (README.md, "Database privileges"), exactly these on the schema
// reconcile:
//
//	GRANT USAGE ON SCHEMA reconcile TO worker;
//	GRANT SELECT, INSERT, UPDATE, DELETE ON reconcile.river_job, reconcile.river_leader, reconcile.river_queue TO worker;
//	GRANT SELECT ON reconcile.river_migration TO worker;
//	GRANT USAGE ON SEQUENCE reconcile.river_job_id_seq TO worker;
//	GRANT SELECT, INSERT, UPDATE ON reconcile.pass_fanin TO worker;
//
// DELETE on River's tables is for electing a leader, which deletes an
// expired leader's row (and a leader resigning, its own): without it no
// client leads, and nothing rescues a dead client's jobs; and for the
// leader's maintenance, whose cleaners delete finalized jobs past their
// retention and queues unused for a day. SELECT on river_migration is
// CheckSchema's, which asks whether River's migrations are current.
// River's other table, river_notification, serves only its SQLite driver,
// and LISTEN and pg_notify, with which River wakes its clients, need no
// grant. River's reindexer, which would REINDEX the job table's indexes
// nightly, needs their ownership, which a worker's role does not have: it
// is off unless Config.Reindex is set, for a worker that runs as the
// schema's owner. TestLeastPrivilegeFanIn runs a fan-in and River's
// maintenance as a role holding only these grants.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"reconcile/internal/store"
)

// The stages of a pass, each worked from a River queue of its name: fetch
// jobs per account and time slice reading Stripe into the mirror, one
// match-and-apply job per account once every fetch job is complete, then
// one drain of the alerts.
const (
	StageFetch = "fetch"
	StageApply = "apply"
	StageDrain = "drain"
)

// Stages are the stages in the order a pass runs them.
var Stages = []string{StageFetch, StageApply, StageDrain}

// DefaultMaxWorkers is how many jobs of each stage one client works at
// once unless Config.MaxWorkers says otherwise. Fetching waits on Stripe
// and runs a few side by side; an apply job holds a whole account's
// obligations and objects in memory, so one at a time; the drain is one
// per pass.
var DefaultMaxWorkers = map[string]int{StageFetch: 4, StageApply: 1, StageDrain: 1}

// DefaultStopTimeout is how long Stop lets running jobs finish before it
// cancels them, when Config.StopTimeout is zero: short enough that a
// cancelled job still has time to be recorded before a supervisor's own
// grace period ends and it kills the process.
const DefaultStopTimeout = 20 * time.Second

// Config configures a Queue.
type Config struct {
	// Workers are the jobs' workers, registered by the caller with
	// river.AddWorker. Nil makes a Queue that only inserts jobs, for a
	// command that enqueues a pass and works none: it cannot Start.
	Workers *river.Workers
	// MaxWorkers is how many jobs of a stage this client works at once,
	// by stage; a stage not named gets DefaultMaxWorkers'.
	MaxWorkers map[string]int
	// JobTimeout is how long a job may run before its context is
	// cancelled; zero is River's default (a minute).
	JobTimeout time.Duration
	// RescueStuckJobsAfter is how long a job may stay running before
	// River's rescuer, run by the leader, takes it for the job of a dead
	// client and makes it available again (or discards it after its last
	// attempt). It must not be less than JobTimeout (Open refuses it), and
	// should exceed it, or a job still running within its timeout is
	// rescued and run twice; zero is River's default (an hour, or
	// JobTimeout and an hour when JobTimeout is longer). Tests shorten it
	// to see a rescue.
	RescueStuckJobsAfter time.Duration
	// StopTimeout is how long Stop waits for running jobs to finish before
	// it cancels them; zero is DefaultStopTimeout.
	StopTimeout time.Duration
	// Reindex lets River's leader REINDEX its job table's indexes nightly,
	// which needs their ownership: set it only for a worker that connects
	// as the schema's owner (see the package's Privileges).
	Reindex bool
	// ID names this client among River's; empty is a name River makes
	// unique.
	ID string
	// Logger receives River's log; nil discards it.
	Logger *slog.Logger
}

// Queue is a River client on the schema reconcile.
type Queue struct {
	client      *river.Client[pgx.Tx]
	stopTimeout time.Duration
}

// Open builds a River client over pool, its tables in the schema reconcile
// (made by `reconcile migrate`), working one queue per stage when
// cfg.Workers is set. It does not connect: Start does.
func Open(pool *pgxpool.Pool, cfg Config) (*Queue, error) {
	for stage := range cfg.MaxWorkers {
		if !slices.Contains(Stages, stage) {
			return nil, fmt.Errorf("queue: MaxWorkers names %q, which is no stage (%v)", stage, Stages)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rc := &river.Config{
		Schema:               store.Schema,
		ID:                   cfg.ID,
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.RescueStuckJobsAfter,
		Logger:               logger,
		Workers:              cfg.Workers,
	}
	if !cfg.Reindex {
		rc.ReindexerIndexNames = []string{} // an empty list: nothing to reindex
	}
	if cfg.Workers != nil {
		rc.Queues = map[string]river.QueueConfig{}
		for _, stage := range Stages {
			n := DefaultMaxWorkers[stage]
			if m, ok := cfg.MaxWorkers[stage]; ok {
				n = m
			}
			rc.Queues[stage] = river.QueueConfig{MaxWorkers: n}
		}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, fmt.Errorf("queue: open river client: %w", err)
	}
	stop := cfg.StopTimeout
	if stop == 0 {
		stop = DefaultStopTimeout
	}
	return &Queue{client: client, stopTimeout: stop}, nil
}

// Client is the River client, for inserting jobs (InsertTx, InsertManyTx)
// and for what this package does not wrap.
func (q *Queue) Client() *river.Client[pgx.Tx] { return q.client }

// Start starts the client working jobs in the background, after a first
// connection to the database has answered. The client runs until Stop;
// ctx ending stops it too, but at once, cancelling running jobs, so a
// worker passes a context that lives as long as the process and stops
// with Stop.
func (q *Queue) Start(ctx context.Context) error {
	if err := q.client.Start(ctx); err != nil {
		return fmt.Errorf("queue: start river client: %w", err)
	}
	return nil
}

// Stop stops the client gracefully: it fetches no more jobs, lets those
// running finish for up to Config.StopTimeout, then cancels their contexts
// and waits for their workers to return until ctx ends. River puts a job
// whose worker returned for that cancellation back in its queue,
// available to another client. A job whose worker ignores its context is
// left running when ctx ends, and River's rescuer hands it on after
// RescueStuckJobsAfter, as it does a dead client's.
func (q *Queue) Stop(ctx context.Context) error {
	soft, cancel := context.WithTimeout(ctx, q.stopTimeout)
	defer cancel()
	err := q.client.Stop(soft)
	if err == nil {
		return nil
	}
	if soft.Err() == nil {
		return fmt.Errorf("queue: stop: %w", err)
	}
	// The grace is over (or ctx ended): cancel what still runs.
	if err := q.client.StopAndCancel(ctx); err != nil {
		return fmt.Errorf("queue: stop: running jobs did not return after their contexts were cancelled: %w", err)
	}
	return nil
}

// StartStage records, in tx, that the stage of the pass has n jobs to
// complete; tx is the transaction that inserts them, so that the count
// exists exactly when they do. n must be positive: a stage with no job
// would never be completed by one, and its caller goes on to the next
// stage at once. A stage is started once per pass.
func StartStage(ctx context.Context, tx pgx.Tx, passID, stage string, n int) error {
	if n <= 0 {
		return fmt.Errorf("queue: start stage %s of pass %s: %d jobs, want at least one", stage, passID, n)
	}
	_, err := tx.Exec(ctx, `INSERT INTO reconcile.pass_fanin (pass_id, stage, remaining) VALUES ($1, $2, $3)`, passID, stage, n)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23505" {
		return fmt.Errorf("queue: start stage %s of pass %s: already started", stage, passID)
	}
	if err != nil {
		return fmt.Errorf("queue: start stage %s of pass %s: %w", stage, passID, err)
	}
	return nil
}

// InsertStage inserts the stage's jobs and its counter (StartStage) in tx.
// A job River skips as a duplicate of a unique one would never complete in
// this stage, so it is refused: the stage's jobs are not unique.
func InsertStage(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, passID, stage string, jobs []river.InsertManyParams) error {
	if err := StartStage(ctx, tx, passID, stage, len(jobs)); err != nil {
		return err
	}
	res, err := client.InsertManyTx(ctx, tx, jobs)
	if err != nil {
		return fmt.Errorf("queue: insert stage %s of pass %s: %w", stage, passID, err)
	}
	for i, r := range res {
		if r.UniqueSkippedAsDuplicate {
			return fmt.Errorf("queue: insert stage %s of pass %s: job %d (%s) is a duplicate of job %d and would never complete in this stage",
				stage, passID, i, r.Job.Kind, r.Job.ID)
		}
	}
	return nil
}

// ErrNotRunning is returned (wrapped) by CompleteInStage when the job is
// no longer running the attempt its worker was given: it was completed
// already, or the rescuer took it from this worker (and another may be
// running it again). The caller rolls tx back, and the job counts for
// whoever completes it.
var ErrNotRunning = errors.New("the job is no longer running")

// CompleteInStage completes job in tx (river.JobCompleteTx) and counts it
// done in the stage of the pass, and says whether it was the stage's last:
// last is true for exactly one job of the stage, the one whose completion
// brought the count to zero, and its caller inserts the next stage's jobs
// in tx before committing. Nothing happens unless tx commits: a
// transaction rolled back has neither completed nor counted the job, and
// the job's retry counts it. ctx must be the worker's, which carries its
// client; job is the worker's job.JobRow.
//
// On an error the worker rolls tx back and returns the error from Work,
// never nil: for a job that is no longer its own (ErrNotRunning) River
// would otherwise complete the job's current run, another worker's,
// without its count, and the stage would never end (docs/design.md,
// "Passes as jobs").
func CompleteInStage(ctx context.Context, tx pgx.Tx, job *rivertype.JobRow, passID, stage string) (last bool, err error) {
	// The job first, locked until tx ends: it must still be running this
	// attempt. JobCompleteTx completes only a running job, but answers
	// with the job's row whatever its state, so on its own it would let a
	// second completion count again: that of a worker whose job was
	// rescued and re-run (or already completed) by another client while
	// it still ran. An attempt is one fetch of the job, so a job running
	// at another attempt is another worker's.
	if _, err := river.ClientFromContextSafely[pgx.Tx](ctx); err != nil {
		// JobCompleteTx would panic.
		return false, fmt.Errorf("queue: complete job %d (%s) in stage %s of pass %s: not in its worker's context: %w", job.ID, job.Kind, stage, passID, err)
	}
	var (
		state   string
		attempt int
	)
	err = tx.QueryRow(ctx, `SELECT state::text, attempt FROM reconcile.river_job WHERE id = $1 FOR UPDATE`, job.ID).Scan(&state, &attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("queue: complete job %d (%s) in stage %s of pass %s: no such job", job.ID, job.Kind, stage, passID)
	}
	if err != nil {
		return false, fmt.Errorf("queue: complete job %d (%s) in stage %s of pass %s: %w", job.ID, job.Kind, stage, passID, err)
	}
	if state != string(rivertype.JobStateRunning) || attempt != job.Attempt {
		return false, fmt.Errorf("queue: complete job %d (%s) in stage %s of pass %s: attempt %d, but the job is %s at attempt %d: %w",
			job.ID, job.Kind, stage, passID, job.Attempt, state, attempt, ErrNotRunning)
	}
	done, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, &river.Job[rowArgs]{JobRow: job})
	if err != nil {
		return false, fmt.Errorf("queue: complete job %d (%s) in stage %s of pass %s: %w", job.ID, job.Kind, stage, passID, err)
	}
	if done.State != rivertype.JobStateCompleted {
		return false, fmt.Errorf("queue: complete job %d (%s) in stage %s of pass %s: the job is %s: %w", job.ID, job.Kind, stage, passID, done.State, ErrNotRunning)
	}
	// The counter's row lock orders the stage's completions: each sees
	// the count its predecessors left, so one alone sees zero.
	var remaining int
	err = tx.QueryRow(ctx, `UPDATE reconcile.pass_fanin SET remaining = remaining - 1
		WHERE pass_id = $1 AND stage = $2 RETURNING remaining`, passID, stage).Scan(&remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("queue: complete job %d in stage %s of pass %s: the stage was never started", job.ID, stage, passID)
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23514" {
		return false, fmt.Errorf("queue: complete job %d in stage %s of pass %s: more jobs completed than the stage started with", job.ID, stage, passID)
	}
	if err != nil {
		return false, fmt.Errorf("queue: complete job %d in stage %s of pass %s: count it: %w", job.ID, stage, passID, err)
	}
	return remaining == 0, nil
}

// rowArgs stands for any job's arguments where JobCompleteTx wants typed
// ones: it decodes the completed job's arguments, which CompleteInStage
// does not read, as they are.
type rowArgs struct{ json.RawMessage }

func (rowArgs) Kind() string { return "" }

// DrainOpts are the insert options of a pass's drain job: its queue, and
// unique by its arguments, so that asking for the drain of a pass again
// while one is waiting, running or completed inserts nothing. The drain's
// arguments must therefore name the pass and nothing that varies between
// two askings (or mark with the struct tag `river:"unique"` the fields
// that name the pass). River forgets a completed job after its retention
// (a day by default), and a discarded one at once: a pass drained again
// later gets a new drain, which finds nothing left to send.
func DrainOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: StageDrain, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// StageOpts are the insert options of a job of the stage: its queue.
func StageOpts(stage string) *river.InsertOpts {
	if stage == StageDrain {
		return DrainOpts()
	}
	return &river.InsertOpts{Queue: stage}
}
