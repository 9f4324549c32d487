package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
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
//
// Each Stripe connected account has a run lock of its own besides the
// platform's (LockAccount): another advisory key, and its own epoch, a row
// of reconcile.account_locks. The platform's is the account "".
type Lock struct {
	conn *pgx.Conn
	// account is the Stripe account whose run lock this is, "" for the
	// platform's; key is its advisory key (lockKey).
	account string
	key     int64
	// epoch is the fencing epoch this holder set.
	epoch int64
	// pid is the lock connection's backend, whose advisory lock a fenced
	// transaction looks for in pg_locks.
	pid uint32
}

// Lock takes the run lock of the store's database, the platform's:
// LockAccount(ctx, "", wait).
func (s *Store) Lock(ctx context.Context, wait bool) (*Lock, error) {
	return s.LockAccount(ctx, "", wait)
}

// LockAccount takes the run lock of one Stripe account: account "" is the
// platform's, the run lock of old (Lock); a connected account's (acct_…,
// see reconcile.ValidAccountID) is independent of the platform's and of
// every other account's. With wait false it returns an error wrapping
// ErrLocked at once if another run holds it, naming the holder where
// PostgreSQL lets us see it; with wait true it blocks until the lock is
// free or ctx is done. Either way, once it has the advisory lock it moves
// the lock's fencing epoch, which waits for any write still in flight
// under the previous holder's epoch to end.
func (s *Store) LockAccount(ctx context.Context, account string, wait bool) (*Lock, error) {
	if account != "" && !reconcile.ValidAccountID(account) {
		return nil, fmt.Errorf("take run lock: %q is not a Stripe connected account's id", account)
	}
	what, key := lockName(account), lockKey(account)
	cfg := s.pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	// Visible in pg_stat_activity, so that whoever finds a run waiting
	// can see who holds the lock (PostgreSQL keeps the first 63 bytes).
	cfg.RuntimeParams["application_name"] = "reconcile run lock"
	if account != "" {
		cfg.RuntimeParams["application_name"] += " " + account
	}
	// On cancellation ask the server to stop waiting for the lock, rather
	// than only dropping the socket: a backend blocked in
	// pg_advisory_lock does not notice a vanished client and would take
	// the lock, for a moment, for no one.
	cfg.BuildContextWatcherHandler = cancelRequestHandler
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("take %s: connect: %w", what, err)
	}
	closeConn := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(ctx)
	}
	if wait {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
			closeConn()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("wait for %s: %w", what, context.Cause(ctx))
			}
			return nil, fmt.Errorf("wait for %s: %w", what, err)
		}
		return newLock(ctx, conn, closeConn, account)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&locked); err != nil {
		closeConn()
		return nil, fmt.Errorf("take %s: %w", what, err)
	}
	if !locked {
		holder := describeHolder(ctx, conn, key)
		closeConn()
		return nil, lockedErr(account, holder)
	}
	return newLock(ctx, conn, closeConn, account)
}

// lockKey is the advisory key of account's run lock: runLockKey for the
// platform's (""); for a connected account, FNV-64a of the account's id
// after a prefix, with the sign bit cleared (the queries below find a key
// in pg_locks as two oids, which they compute from a key that is not
// negative), and moved off the keys of the platform's lock and of migrate
// in the unlikely case it falls on one. Two accounts whose keys collide
// (a chance of about n²/2⁶⁴ among n accounts) exclude each other, which
// costs waiting, forever for one process taking both with wait, and
// nothing else: each lock still has its own epoch.
func lockKey(account string) int64 {
	if account == "" {
		return runLockKey
	}
	h := fnv.New64a()
	h.Write([]byte("reconcile run lock of account "))
	h.Write([]byte(account))
	key := int64(h.Sum64() &^ (1 << 63))
	if key == runLockKey || key == migrateLockKey {
		key ^= 1
	}
	return key
}

// lockName names account's run lock in errors: "run lock" for the
// platform's, as of old.
func lockName(account string) string {
	if account == "" {
		return "run lock"
	}
	return "run lock of account " + account
}

// lockError is a connected account's ErrLocked or ErrLockLost, in words
// that name the account.
type lockError struct {
	sentinel error
	msg      string
}

func (e *lockError) Error() string { return e.msg }
func (e *lockError) Unwrap() error { return e.sentinel }

// lockedErr is the error of a run lock another run holds, naming the
// holder when holder is not empty.
func lockedErr(account, holder string) error {
	switch {
	case account == "" && holder == "":
		return ErrLocked
	case account == "":
		return fmt.Errorf("%w (%s)", ErrLocked, holder)
	case holder == "":
		return &lockError{ErrLocked, "another run holds the run lock of account " + account}
	}
	return &lockError{ErrLocked, fmt.Sprintf("another run holds the run lock of account %s (%s)", account, holder)}
}

// lost is the error wrapping ErrLockLost that says why l was lost.
func (l *Lock) lost(why string) error {
	if l.account == "" {
		return fmt.Errorf("%w (%s)", ErrLockLost, why)
	}
	return &lockError{ErrLockLost, fmt.Sprintf("the run lock of account %s was lost (%s)", l.account, why)}
}

// newLock moves the fencing epoch on conn, which holds the advisory lock.
// The update needs the epoch row exclusively, so it waits for every
// transaction that checked the previous holder's epoch (and holds the row
// FOR SHARE) to end: this run reads only what they committed, and any
// later transaction of the previous holder sees the new epoch and is
// refused.
//
// A connected account's epoch is its row of reconcile.account_locks,
// inserted at 1 by the account's first holder and moved by every later
// one; the upsert waits for the row as the update does.
func newLock(ctx context.Context, conn *pgx.Conn, closeConn func(), account string) (*Lock, error) {
	l := &Lock{conn: conn, account: account, key: lockKey(account), pid: conn.PgConn().PID()}
	var err error
	if account == "" {
		err = conn.QueryRow(ctx, `UPDATE reconcile.run_lock SET epoch = epoch + 1 RETURNING epoch`).Scan(&l.epoch)
	} else {
		err = conn.QueryRow(ctx, `INSERT INTO reconcile.account_locks AS a (account, epoch) VALUES ($1, 1)
		ON CONFLICT (account) DO UPDATE SET epoch = a.epoch + 1 RETURNING epoch`, account).Scan(&l.epoch)
	}
	if err != nil {
		closeConn()
		if errors.Is(err, pgx.ErrNoRows) {
			// Created by the migration; a table emptied by hand cannot
			// be fenced, and restarting the epoch could repeat an old one.
			return nil, errors.New("take run lock: reconcile.run_lock has no row (it holds the lock's fencing epoch; restore it with a value above any earlier epoch)")
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("take %s: move the fencing epoch: %w", lockName(account), context.Cause(ctx))
		}
		return nil, fmt.Errorf("take %s: move the fencing epoch: %w", lockName(account), err)
	}
	return l, nil
}

// Epoch is the fencing epoch this holder set: one more than the previous
// holder's of the same account's lock.
func (l *Lock) Epoch() int64 { return l.epoch }

// Account is the Stripe account whose run lock l is, "" for the
// platform's.
func (l *Lock) Account() string { return l.account }

// cancelRequestHandler makes a connection answer a cancelled context with
// a cancel request to the server, and only later with a deadline on the
// socket.
func cancelRequestHandler(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
}

// describeHolder names the session holding the advisory lock key (a run
// lock's, lockKey), best effort: without pg_read_all_stats PostgreSQL
// hides other roles' sessions.
func describeHolder(ctx context.Context, conn *pgx.Conn, key int64) string {
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
	LIMIT 1`, key).Scan(&pid, &app, &started)
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
		return l.lost("it was released")
	}
	var held bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND objsubid = 1
		AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid)`, l.key).Scan(&held)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("check %s: %w", lockName(l.account), context.Cause(ctx))
	case err != nil && l.conn.IsClosed():
		return l.lost(fmt.Sprintf("its database connection ended: %v", err))
	case err != nil:
		return l.lost(fmt.Sprintf("it could not be checked: %v", err))
	case !held:
		return l.lost("its session no longer holds it")
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
//
// A connected account's lock is proved alike, by its own advisory key and
// its row of reconcile.account_locks.
func (l *Lock) fence(ctx context.Context, tx pgx.Tx) error {
	if l.conn == nil {
		return l.lost("it was released")
	}
	var (
		epoch int64
		alive bool
		err   error
	)
	const held = `SELECT epoch, EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid = $1 AND objsubid = 1
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND classid = ($2::bigint >> 32)::oid AND objid = ($2::bigint & 4294967295)::oid)`
	table := "reconcile.run_lock"
	if l.account == "" {
		err = tx.QueryRow(ctx, held+`
	FROM reconcile.run_lock FOR SHARE`, l.pid, l.key).Scan(&epoch, &alive)
	} else {
		table = "reconcile.account_locks"
		err = tx.QueryRow(ctx, held+`
	FROM reconcile.account_locks WHERE account = $3 FOR SHARE`, l.pid, l.key, l.account).Scan(&epoch, &alive)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return l.lost(table + " has no row")
	case err != nil:
		// A serialization failure stays visible to retryable.
		return fmt.Errorf("check %s: %w", lockName(l.account), err)
	case epoch != l.epoch:
		return l.lost(fmt.Sprintf("another run took it: epoch %d, this run's %d", epoch, l.epoch))
	case !alive:
		return l.lost("its database connection ended")
	}
	return nil
}

// fenceKey is the context key of the Locks a run's writes are fenced by.
type fenceKey struct{}

// WithFence returns a context carrying locks, in place of any ctx
// carried. Every write of the store called with it (Apply, Mirror.Save,
// RecordFailedRun, MarkSending, Fence) checks in its own transaction that
// each of them still holds its run lock, and fails with an error wrapping
// ErrLockLost otherwise. Without a lock in the context (a dry run, the ack
// command, tests) writes are not fenced; nil locks are left out.
//
// A run holds one lock, the platform's; a pass over many accounts in one
// process holds the platform's and each connected account's, and each of
// its writes proves all of them. The checks go in one order, the
// platform's epoch row first and then the accounts' by id, so that two
// fenced transactions never each hold a row the other waits for behind a
// new holder's move of the epoch.
//
// The lock travels in the context, as a deadline does, because it must
// reach each write of the run through layers that know nothing of locks
// (the alerts drain, the runner's Store and Mirror interfaces and their
// wrappers), and a run's context covers exactly the writes it fences.
func WithFence(ctx context.Context, locks ...*Lock) context.Context {
	var fence []*Lock
	for _, l := range locks {
		if l != nil && !slices.Contains(fence, l) {
			fence = append(fence, l)
		}
	}
	slices.SortStableFunc(fence, func(a, b *Lock) int { return strings.Compare(a.account, b.account) })
	return context.WithValue(ctx, fenceKey{}, fence)
}

// fenceOf returns the Locks of ctx, in the order they are checked; none
// if ctx carries none.
func fenceOf(ctx context.Context) []*Lock {
	fence, _ := ctx.Value(fenceKey{}).([]*Lock)
	return fence
}

// checkFence proves every lock of fence inside tx (see fence), in order.
func checkFence(ctx context.Context, tx pgx.Tx, fence []*Lock) error {
	for _, l := range fence {
		if err := l.fence(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// inFence runs f in a transaction on pool that proves, first and last, the
// run locks of ctx (see fence); without one, f runs in a plain transaction.
func inFence(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions, f func(pgx.Tx) error) error {
	fence := fenceOf(ctx)
	return pgx.BeginTxFunc(ctx, pool, opts, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx, fence); err != nil {
			return err
		}
		if err := f(tx); err != nil {
			return err
		}
		return checkFence(ctx, tx, fence)
	})
}

// Fence holds the run lock's fence (see WithFence) for one Slack send,
// from before its claim (MarkSending) until its outcome is recorded, when
// the caller calls release. It checks the fence in a transaction that
// keeps the epoch rows locked FOR SHARE until release, so that a run
// taking a lock meanwhile waits for the send and its record instead of
// finding the message in flight and posting it again. It fails, wrapping
// ErrLockLost, when a lock was lost; then nothing may be sent. Without a
// lock in ctx it holds nothing.
func (s *Store) Fence(ctx context.Context) (release func(), err error) {
	fence := fenceOf(ctx)
	if len(fence) == 0 {
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
	if err := checkFence(ctx, tx, fence); err != nil {
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
	what := lockName(l.account)
	var released bool
	err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, l.key).Scan(&released)
	// Closing the connection frees the lock in any case.
	closeErr := conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("release %s: %w", what, err)
	}
	if closeErr != nil {
		return fmt.Errorf("release %s: %w", what, closeErr)
	}
	if !released {
		return fmt.Errorf("release %s: it was not held", what)
	}
	return nil
}
