package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// Lock is the run lock of one database: a session-level advisory lock held
// by a connection of its own, never one of the pool's (a pooled connection
// goes back to the pool still holding a session lock, and the next user
// of it would hold the lock without knowing). PostgreSQL frees the lock
// when the connection ends, so a crashed holder never leaves it behind.
// A Lock is used by one goroutine.
type Lock struct {
	conn *pgx.Conn
}

// Lock takes the run lock of the store's database. With wait false it
// returns an error wrapping ErrLocked at once if another run holds it,
// naming the holder where PostgreSQL lets us see it; with wait true it
// blocks until the lock is free or ctx is done.
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
		return &Lock{conn: conn}, nil
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
	return &Lock{conn: conn}, nil
}

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
// owns the advisory lock. A long run can check it before it writes.
func (l *Lock) Held(ctx context.Context) error {
	if l.conn == nil {
		return errors.New("run lock: released")
	}
	var held bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() AND objsubid = 1
		AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid)`, runLockKey).Scan(&held)
	if err != nil {
		return fmt.Errorf("run lock: %w", err)
	}
	if !held {
		return errors.New("run lock: no longer held")
	}
	return nil
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
