package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/pgtest"
)

// TestMain doubles as a helper process: the lock and migration tests
// re-execute the test binary with STORE_TEST_HELPER set, so that a real
// process can hold a lock and be killed with SIGKILL.
func TestMain(m *testing.M) {
	if mode := os.Getenv("STORE_TEST_HELPER"); mode != "" {
		os.Exit(helperMain(mode, os.Getenv("STORE_TEST_DB")))
	}
	os.Exit(m.Run())
}

// helperMain prints "ready", waits for a line on stdin, then does its
// mode's work and prints the outcome; a lock holder then holds until
// killed or until stdin closes.
func helperMain(mode, dbURL string) int {
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	switch mode {
	case "lock":
		pool, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		s, err := New(pool, testOptions(nil))
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("ready")
		in.Scan()
		l, err := s.Lock(ctx, false)
		if errors.Is(err, ErrLocked) {
			fmt.Println("busy")
			return 0
		}
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("locked")
		in.Scan()
		if err := l.Release(ctx); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		return 0
	case "migrate":
		fmt.Println("ready")
		in.Scan()
		if err := Migrate(ctx, dbURL); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("migrated")
		return 0
	}
	fmt.Println("error: unknown helper mode", mode)
	return 2
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{} // closed when the process has exited
}

func startHelper(tb testing.TB, mode, dbURL string) *helper {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STORE_TEST_HELPER="+mode, "STORE_TEST_DB="+dbURL)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start helper: %v", err)
	}
	h := &helper{cmd: cmd, stdin: stdin, lines: make(chan string, 10), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		cmd.Wait()
		close(h.done)
	}()
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		<-h.done
	})
	return h
}

// next returns the helper's next line of output.
func (h *helper) next(tb testing.TB) string {
	tb.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			tb.Fatalf("helper %d exited without output", h.cmd.Process.Pid)
		}
		return line
	case <-time.After(time.Minute):
		// A guard against hanging forever, not a measurement.
		tb.Fatalf("helper %d: no output within a minute", h.cmd.Process.Pid)
	}
	return ""
}

func (h *helper) send(tb testing.TB, line string) {
	tb.Helper()
	if _, err := io.WriteString(h.stdin, line+"\n"); err != nil {
		tb.Fatalf("write to helper: %v", err)
	}
}

// t0 is the tests' reference time, whole seconds so that it survives
// PostgreSQL's microsecond timestamps unchanged.
func t0() time.Time { return time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC) }

// env is a migrated database with the reference obligations table and a
// Store on it.
type env struct {
	tb   testing.TB
	pool *pgxpool.Pool
	url  string
	s    *Store
}

// testOptions are the configuration's defaults for a Store, changed by
// change (nil: none).
func testOptions(change func(*Options)) Options {
	o := OptionsFrom(config.Default())
	if change != nil {
		change(&o)
	}
	return o
}

// newEnv is an env whose Store has testOptions(change).
func newEnv(tb testing.TB, change func(*Options)) *env {
	tb.Helper()
	opts := testOptions(change)
	pool, url := pgtest.NewMigrated(tb, SchemaDigest(), Migrate)
	s, err := New(pool, opts)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return &env{tb: tb, pool: pool, url: url, s: s}
}

func (e *env) count(query string, args ...any) int {
	e.tb.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		e.tb.Fatalf("%s: %v", query, err)
	}
	return n
}

func (e *env) exec(query string, args ...any) {
	e.tb.Helper()
	if _, err := e.pool.Exec(context.Background(), query, args...); err != nil {
		e.tb.Fatalf("%s: %v", query, err)
	}
}

// row returns an obligation's row as PostgreSQL prints it.
func (e *env) row(id string) string {
	e.tb.Helper()
	var s string
	err := e.pool.QueryRow(context.Background(), `SELECT o::text FROM obligations o WHERE id = $1`, id).Scan(&s)
	if err != nil {
		e.tb.Fatalf("read obligation %s: %v", id, err)
	}
	return s
}

// stored is the part of an obligation the reconciler may change.
type stored struct {
	State      string
	ProviderID string
	PaidAt     time.Time
	UpdatedAt  time.Time
}

func (e *env) obligation(id string) stored {
	e.tb.Helper()
	var (
		o          stored
		providerID *string
		paidAt     *time.Time
	)
	err := e.pool.QueryRow(context.Background(), `SELECT state, provider_id, paid_at, updated_at FROM obligations WHERE id = $1`, id).
		Scan(&o.State, &providerID, &paidAt, &o.UpdatedAt)
	if err != nil {
		e.tb.Fatalf("read obligation %s: %v", id, err)
	}
	o.ProviderID, o.PaidAt = stringOf(providerID), timeOf(paidAt)
	o.PaidAt, o.UpdatedAt = o.PaidAt.UTC(), o.UpdatedAt.UTC()
	return o
}

// outboxRow is an outbox row in a form tests compare.
type event struct {
	Event       reconcile.AlertEvent
	Fingerprint string
	Changed     bool
}

// events returns the outbox rows with ids above after, in id order, and
// the highest id seen.
func (e *env) events(after int64) ([]event, int64) {
	e.tb.Helper()
	rows, err := e.pool.Query(context.Background(),
		`SELECT id, event, coalesce(fingerprint, ''), changed FROM reconcile.outbox WHERE id > $1 ORDER BY id`, after)
	if err != nil {
		e.tb.Fatal(err)
	}
	var (
		evs  []event
		id   int64
		ev   event
		last = after
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &ev.Event, &ev.Fingerprint, &ev.Changed}, func() error {
		evs = append(evs, ev)
		last = id
		return nil
	}); err != nil {
		e.tb.Fatal(err)
	}
	return evs, last
}

// markAllSent records every unsent outbox row as delivered.
func (e *env) markAllSent(at time.Time) {
	e.tb.Helper()
	e.exec(`UPDATE reconcile.outbox SET sent_at = $1, slack_channel = 'C1', slack_ts = id::text WHERE sent_at IS NULL`, at)
}

// obligation returns a CONFIRMATION_UNKNOWN refund obligation.
func unknownRefund(id string) reconcile.Obligation {
	return reconcile.Obligation{
		ID: id, Kind: reconcile.Refund, IdempotencyKey: "key-" + id, TargetID: "ch_target_" + id,
		Money: reconcile.Money{Amount: 8900, Currency: "usd"}, State: reconcile.ConfirmationUnknown,
		CreatedAt: reconcile.StampOf(t0().Add(-2 * time.Hour)),
	}
}

// markPaid is the transition the matcher decides for o given proof.
func markPaid(o reconcile.Obligation, providerID string) reconcile.Transition {
	return reconcile.Transition{
		ObligationID: o.ID, From: o.State, To: reconcile.Paid, FromRaw: string(o.State),
		FromLeaseExpiresAt: o.LeaseExpiresAt.Time(), ProviderID: providerID,
	}
}

func testRun(id string, now time.Time) reconcile.Run {
	return reconcile.Run{
		ID: id, Trigger: reconcile.TriggerManual, Window: reconcile.Window{From: now.Add(-72 * time.Hour), To: now},
		Started: now, Finished: now, Status: reconcile.RunCompleted,
		Counts: reconcile.Counts{Obligations: 3, ProviderObjects: 4, Linked: 2},
	}
}

// newFinding builds a finding as the matcher would.
func newFinding(kind reconcile.FindingKind, obligationID, objectID string, atRisk int64, providerIDs ...string) reconcile.Finding {
	f := reconcile.Finding{
		Kind: kind, Severity: kind.Severity(), ObligationID: obligationID, ProviderIDs: providerIDs,
		Money:       reconcile.Money{Amount: 8900, Currency: "usd"},
		AtRisk:      reconcile.Money{Amount: atRisk, Currency: "usd"},
		Fingerprint: reconcile.Fingerprint(kind, obligationID, objectID),
		Detail:      fmt.Sprintf("%s about %s%s", kind, obligationID, objectID),
	}
	f.ContentHash = reconcile.ContentHash(f.AtRisk, f.ProviderIDs)
	// As the matcher sets it: money that moved out, for a refund's.
	f.PaidOut = strings.HasPrefix(obligationID, "refund:")
	return f
}

// resultOf is a matcher result whose scope covers the findings' and
// transitions' obligations and objects, plus any extra ids given.
func resultOf(fs []reconcile.Finding, ts []reconcile.Transition, scope ...string) reconcile.Conclusions {
	res := reconcile.Conclusions{Findings: fs, Transitions: ts}
	for _, f := range fs {
		if f.ObligationID != "" {
			res.ObligationIDs = append(res.ObligationIDs, f.ObligationID)
		}
		res.ObjectIDs = append(res.ObjectIDs, f.ProviderIDs...)
	}
	for _, t := range ts {
		res.ObligationIDs = append(res.ObligationIDs, t.ObligationID)
	}
	for _, id := range scope {
		if strings.HasPrefix(id, "re_") || strings.HasPrefix(id, "ch_") || strings.HasPrefix(id, "pi_") {
			res.ObjectIDs = append(res.ObjectIDs, id)
		} else {
			res.ObligationIDs = append(res.ObligationIDs, id)
		}
	}
	res.Settled = reconcile.Settled{Obligations: res.ObligationIDs, Objects: res.ObjectIDs}
	return res
}

// waitForLockWaiter returns once some session of the database is blocked
// waiting for a lock (a row, a transaction or an advisory lock). It fails
// the test as soon as ended is closed (nil: never): the work that was to
// wait ended without waiting, an error as a rule, which would otherwise
// keep the test waiting for the minute.
func (e *env) waitForLockWaiter(appName string, ended <-chan struct{}) {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		var n int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND ($1 = '' OR application_name = $1)`, appName).Scan(&n)
		if err != nil {
			e.tb.Fatalf("wait for a blocked session: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ended:
			e.tb.Fatal("what was to wait for a lock ended without waiting")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
