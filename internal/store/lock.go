package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lock is the run lock of one database: a session-level advisory lock held
// by a connection of its own, never one of the pool's (a pooled connection
// goes back to the pool still holding a session lock, and the next user
// of it would hold the lock without knowing). PostgreSQL frees the lock
// when the connection ends, so a crashed holder never leaves it behind.
//
// That same connection can end while the run goes on (a network blip, a
// terminated backend), and the run learns of it only when it next uses
// the connection; meanwhile another run may take the lock. So the lock
// also fences: each holder moves the epoch of reconcile.run_lock on its
// lock connection right after it takes the lock and before the run reads
// anything, and every write of the run, given the lock with WithFence,
// checks in its own transaction that the epoch is still the holder's (see
// fence). A Lock is used by one goroutine.
type Lock struct {
	conn *pgx.Conn
	// epoch is the fencing epoch this holder set.
	epoch int64
	// pid is the lock connection's backend, whose advisory lock a fenced
	// transaction looks for in pg_locks.
	pid uint32
}

// Lock takes the run lock of the store's database. With wait false it
// returns an error wrapping ErrLocked at once if another run holds it,
// naming the holder where PostgreSQL lets us see it; with wait true it
// blocks until the lock is free or ctx is done. Either way, once it has
// the advisory lock it moves the fencing epoch, which waits for any write
// still in flight under the previous holder's epoch to end.
func (s *Store) Lock(ctx context.Context, wait bool) (*Lock, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	// Visible in pg_stat_activity, so that whoever finds a run waiting
	// can see who holds the lock.
	cfg.RuntimeParams["application_name"] = "reconcile run lock"
	// On cancellation ask the server to stop waiting for the lock, rather
	// than only dropping the socket: a backend blocked in
	// pg_advisory_lock does not notice a vanished client and would take
	// the lock, for a moment, for no one.
	cfg.BuildContextWatcherHandler = cancelRequestHandler
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("take run lock: connect: %w", err)
	}
	closeConn := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(ctx)
	}
	if wait {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, runLockKey); err != nil {
			closeConn()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("wait for run lock: %w", context.Cause(ctx))
			}
			return nil, fmt.Errorf("wait for run lock: %w", err)
		}
		return newLock(ctx, conn, closeConn)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, runLockKey).Scan(&locked); err != nil {
		closeConn()
		return nil, fmt.Errorf("take run lock: %w", err)
	}
	if !locked {
		holder := describeHolder(ctx, conn)
		closeConn()
		if holder != "" {
			return nil, fmt.Errorf("%w (%s)", ErrLocked, holder)
		}
		return nil, ErrLocked
	}
	return newLock(ctx, conn, closeConn)
}

// newLock moves the fencing epoch on conn, which holds the advisory lock.
// The update needs the epoch row exclusively, so it waits for every
// transaction that checked the previous holder's epoch (and holds the row
// FOR SHARE) to end: this run reads only what they committed, and any
// later transaction of the previous holder sees the new epoch and is
// refused.
func newLock(ctx context.Context, conn *pgx.Conn, closeConn func()) (*Lock, error) {
	l := &Lock{conn: conn, pid: conn.PgConn().PID()}
	err := conn.QueryRow(ctx, `UPDATE reconcile.run_lock SET epoch = epoch + 1 RETURNING epoch`).Scan(&l.epoch)
	if err != nil {
		closeConn()
		if errors.Is(err, pgx.ErrNoRows) {
			// Created by the migration; a table emptied by hand cannot
			// be fenced, and restarting the epoch could repeat an old one.
			return nil, errors.New("take run lock: reconcile.run_lock has no row (it holds the lock's fencing epoch; restore it with a value above any earlier epoch)")
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("take run lock: move the fencing epoch: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("take run lock: move the fencing epoch: %w", err)
	}
	return l, nil
}

// Epoch is the fencing epoch this holder set: one more than the previous
// holder's.
func (l *Lock) Epoch() int64 { return l.epoch }

// cancelRequestHandler makes a connection answer a cancelled context with
// a cancel request to the server, and only later with a deadline on the
// socket.
func cancelRequestHandler(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
}

// describeHolder names the session holding the run lock, best effort:
// without pg_read_all_stats PostgreSQL hides other roles' sessions.
func describeHolder(ctx context.Context, conn *pgx.Conn) string {
	var (
		pid     int32
		app     string
		started time.Time
	)
	// A bigint advisory key appears in pg_locks split into classid (high
	// 32 bits) and objid (low 32 bits), with objsubid 1.
	err := conn.QueryRow(ctx, `SELECT a.pid, coalesce(a.application_name, ''), a.backend_start
	FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = ($1::bigint >> 32)::oid AND l.objid = ($1::bigint & 4294967295)::oid
	LIMIT 1`, runLockKey).Scan(&pid, &app, &started)
	if err != nil || started.IsZero() {
		return ""
	}
	return fmt.Sprintf("held by PostgreSQL backend %d (%s) connected since %s", pid, app, started.UTC().Format(time.RFC3339))
}

// Held returns nil if the lock is still held: its connection is alive and
// owns the advisory lock; otherwise an error wrapping ErrLockLost (or the
// context's error when ctx is done). A run checks it before each step
// that writes, for a quick and clear stop; the proof that counts is the
// fence inside each write's transaction, since the lock can be lost
// between this check and the write.
func (l *Lock) Held(ctx context.Context) error {
	if l.conn == nil {
		return fmt.Errorf("%w (it was released)", ErrLockLost)
	}
	var held bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND objsubid = 1
		AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid)`, runLockKey).Scan(&held)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("check run lock: %w", context.Cause(ctx))
	case err != nil && l.conn.IsClosed():
		return fmt.Errorf("%w (its database connection ended: %v)", ErrLockLost, err)
	case err != nil:
		return fmt.Errorf("%w (it could not be checked: %v)", ErrLockLost, err)
	case !held:
		return fmt.Errorf("%w (its session no longer holds it)", ErrLockLost)
	}
	return nil
}

// fence proves, inside tx, that l is still the newest holder of the run
// lock: the epoch is l's, and l's session still holds the advisory lock.
// It locks the epoch row FOR SHARE until tx ends, so a new holder's move
// of the epoch (newLock) waits for tx to commit or roll back; a
// transaction begun after that move sees the new epoch and is refused
// (at REPEATABLE READ, a move committed after tx's snapshot fails the
// lock with a serialization error, and Apply's retry then sees it). The
// epoch is what makes this safe; the session check, which pg_locks
// answers live rather than from tx's snapshot, refuses a write whose
// lock died before anyone else took it, so that such a run stops rather
// than commits. A transaction calls fence first, and again last before it
// commits.
func (l *Lock) fence(ctx context.Context, tx pgx.Tx) error {
	if l.conn == nil {
		return fmt.Errorf("%w (it was released)", ErrLockLost)
	}
	var (
		epoch int64
		alive bool
	)
	err := tx.QueryRow(ctx, `SELECT epoch, EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid = $1 AND objsubid = 1
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND classid = ($2::bigint >> 32)::oid AND objid = ($2::bigint & 4294967295)::oid)
	FROM reconcile.run_lock FOR SHARE`, l.pid, runLockKey).Scan(&epoch, &alive)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w (reconcile.run_lock has no row)", ErrLockLost)
	case err != nil:
		// A serialization failure stays visible to retryable.
		return fmt.Errorf("check run lock: %w", err)
	case epoch != l.epoch:
		return fmt.Errorf("%w (another run took it: epoch %d, this run's %d)", ErrLockLost, epoch, l.epoch)
	case !alive:
		return fmt.Errorf("%w (its database connection ended)", ErrLockLost)
	}
	return nil
}

// fenceKey is the context key of the Lock a run's writes are fenced by.
type fenceKey struct{}

// WithFence returns a context carrying l. Every write of the store called
// with it (Apply, Mirror.Save, RecordFailedRun, MarkSending, Fence) checks
// in its own transaction that l still holds the run lock, and fails with
// an error wrapping ErrLockLost otherwise. Without a lock in the context
// (a dry run, the ack command, tests) writes are not fenced.
//
// The lock travels in the context, as a deadline does, because it must
// reach each write of the run through layers that know nothing of locks
// (the alerts drain, the runner's Store and Mirror interfaces and their
// wrappers), and a run's context covers exactly the writes it fences.
func WithFence(ctx context.Context, l *Lock) context.Context {
	return context.WithValue(ctx, fenceKey{}, l)
}

// fenceOf returns the Lock of ctx, nil if none.
func fenceOf(ctx context.Context) *Lock {
	l, _ := ctx.Value(fenceKey{}).(*Lock)
	return l
}

// inFence runs f in a transaction on pool that proves, first and last, the
// run lock of ctx (see fence); without one, f runs in a plain transaction.
func inFence(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions, f func(pgx.Tx) error) error {
	l := fenceOf(ctx)
	return pgx.BeginTxFunc(ctx, pool, opts, func(tx pgx.Tx) error {
		if l != nil {
			if err := l.fence(ctx, tx); err != nil {
				return err
			}
		}
		if err := f(tx); err != nil {
			return err
		}
		if l != nil {
			return l.fence(ctx, tx)
		}
		return nil
	})
}

// Fence holds the run lock's fence (see WithFence) for one Slack send,
// from before its claim (MarkSending) until its outcome is recorded, when
// the caller calls release. It checks the fence in a transaction that
// keeps the epoch row locked FOR SHARE until release, so that a run
// taking the lock meanwhile waits for the send and its record instead of
// finding the message in flight and posting it again. It fails, wrapping
// ErrLockLost, when the lock was lost; then nothing may be sent. Without a
// lock in ctx it holds nothing.
func (s *Store) Fence(ctx context.Context) (release func(), err error) {
	l := fenceOf(ctx)
	if l == nil {
		return func() {}, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("hold run lock fence: %w", err)
	}
	release = func() {
		// Nothing was written: rolling back only lets go of the row,
		// even once ctx is done.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		tx.Rollback(rctx)
	}
	if err := l.fence(ctx, tx); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// Release frees the lock and closes its connection. Releasing twice is
// harmless.
func (l *Lock) Release(ctx context.Context) error {
	if l.conn == nil {
		return nil
	}
	conn := l.conn
	l.conn = nil
	var released bool
	err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, runLockKey).Scan(&released)
	// Closing the connection frees the lock in any case.
	closeErr := conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("release run lock: %w", err)
	}
	if closeErr != nil {
		return fmt.Errorf("release run lock: %w", closeErr)
	}
	if !released {
		return errors.New("release run lock: it was not held")
	}
	return nil
}
