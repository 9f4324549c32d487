package runner_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/alerts"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
	"reconcile/internal/slacktest"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

const (
	lockStripeKey = "sk_test_locklost0123456789SECRET"
	lockSlackTok  = "xoxb-locklost-SECRET"
)

// lockNow is the clock of both runs: a whole second, as Stripe's are.
var lockNow = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// lockWorld is one database, one Stripe and one Slack shared by two runs,
// as two processes started by cron and by hand would share them.
type lockWorld struct {
	t      *testing.T
	dbURL  string
	pool   *pgxpool.Pool // the test's own, to watch and to kill
	stripe *stripesim.Server
	slack  *slacktest.Server
	// The servers' URLs for the second run; the first run's go through
	// hooks (hooked).
	stripeURL, slackURL string
}

// lockTransitions is how many obligations the world's pass marks PAID.
const lockTransitions = 2

func newLockWorld(t *testing.T) *lockWorld {
	t.Helper()
	pool, dbURL := pgtest.NewMigrated(t, store.SchemaDigest(), store.Migrate)
	w := &lockWorld{t: t, dbURL: dbURL, pool: pool, stripe: stripesim.New(lockStripeKey), slack: slacktest.New(lockSlackTok)}
	var stop func()
	var err error
	if w.stripeURL, stop, err = w.stripe.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if w.slackURL, stop, err = w.slack.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Cleanup(func() { w.stripe.AssertNoWrites(t) })

	usd := func(a int64) reconcile.Money { return reconcile.Money{Amount: a, Currency: "usd"} }
	created := lockNow.Add(-2 * time.Hour)
	// Two answers lost and confirmed by the provider (two transitions), a
	// charge made twice under one key (a critical duplicate: a message of
	// its own) and a charge no obligation accounts for (an orphan, in the
	// summary's thread): three Slack messages.
	pgtest.InsertObligations(t, pool,
		reconcile.Obligation{ID: "charge:1", Kind: reconcile.Charge, IdempotencyKey: "k-1", Money: usd(1000),
			State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created)},
		reconcile.Obligation{ID: "charge:2", Kind: reconcile.Charge, IdempotencyKey: "k-2", Money: usd(2000),
			State: reconcile.ConfirmationUnknown, CreatedAt: reconcile.StampOf(created)},
		reconcile.Obligation{ID: "charge:dup", Kind: reconcile.Charge, IdempotencyKey: "k-dup", ProviderID: "ch_d1",
			Money: usd(3000), State: reconcile.Paid, CreatedAt: reconcile.StampOf(created), PaidAt: reconcile.StampOf(created)},
	)
	for _, o := range []struct {
		id, key string
		amount  int64
	}{{"ch_1", "k-1", 1000}, {"ch_2", "k-2", 2000}, {"ch_d1", "k-dup", 3000}, {"ch_d2", "k-dup", 3000}, {"ch_orphan", "k-none", 4700}} {
		err := w.stripe.Add(reconcile.ProviderObject{ID: o.id, Kind: reconcile.Charge, Money: usd(o.amount),
			Status: reconcile.Succeeded, Created: reconcile.StampOf(created.Add(time.Minute))}, o.key)
		if err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// hooked serves h behind a handler that runs hook once, before the first
// request for which match is true, and counts those requests.
func (w *lockWorld) hooked(h http.Handler, match func(*http.Request) bool, hook func()) (url string, matched *atomic.Int32) {
	var once sync.Once
	matched = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if match(r) {
			matched.Add(1)
			once.Do(hook)
		}
		h.ServeHTTP(rw, r)
	}))
	w.t.Cleanup(srv.Close)
	return srv.URL, matched
}

// countingStore is the real store, with a hook before Apply and a count of
// its calls.
type countingStore struct {
	*store.Store
	applies     atomic.Int32
	beforeApply func()
}

func (s *countingStore) Apply(ctx context.Context, run reconcile.Run, res reconcile.Conclusions, now time.Time) (store.Applied, error) {
	s.applies.Add(1)
	if s.beforeApply != nil {
		s.beforeApply()
	}
	return s.Store.Apply(ctx, run, res, now)
}

// hookedMirror is the real mirror, with a hook before Save.
type hookedMirror struct {
	*store.Mirror
	beforeSave func()
}

func (m *hookedMirror) Save(ctx context.Context, u store.MirrorUpdate) error {
	if m.beforeSave != nil {
		m.beforeSave()
	}
	return m.Mirror.Save(ctx, u)
}

// pass is one run's process: its own pool (named, to be found in
// pg_stat_activity), store, mirror, Stripe reader and Slack deliverer.
type pass struct {
	store  *countingStore
	mirror *hookedMirror
	r      *runner.Runner
}

func (w *lockWorld) newPass(app, stripeURL, slackURL string) *pass {
	w.t.Helper()
	cfg, err := pgxpool.ParseConfig(w.dbURL)
	if err != nil {
		w.t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(pool.Close)
	st, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		w.t.Fatal(err)
	}
	obl, err := sources.NewObligations(pool, reconcile.DefaultObligationTable())
	if err != nil {
		w.t.Fatal(err)
	}
	so := sources.StripeOptionsFrom(config.Default())
	so.APIKey, so.BaseURL, so.Rate = lockStripeKey, stripeURL, math.Inf(1)
	so.RetryBase, so.RetryMax = time.Millisecond, 4*time.Millisecond
	reader, err := sources.NewStripe(so)
	if err != nil {
		w.t.Fatal(err)
	}
	ao := alerts.SlackOptionsFrom(config.Default())
	ao.BotToken, ao.Channel, ao.APIURL, ao.PerChannelInterval, ao.Timeout = lockSlackTok, "C0FINANCE", slackURL+"/api/", 0, 30*time.Second
	d, err := alerts.NewSlack(ao)
	if err != nil {
		w.t.Fatal(err)
	}
	p := &pass{store: &countingStore{Store: st}, mirror: &hookedMirror{Mirror: store.NewMirror(pool)}}
	p.r = &runner.Runner{Provider: reader, Obligations: obl, Store: p.store, Alerts: d, Mirror: p.mirror,
		Matcher: matcher.OptionsFrom(config.Default().Matcher), Now: func() time.Time { return lockNow }, Logger: slog.New(slog.DiscardHandler)}
	return p
}

// running is a run under way: done is closed once Run returned out and
// err.
type running struct {
	done chan struct{}
	out  *runner.Outcome
	err  error
}

func (p *pass) start(wait bool) *running {
	r := &running{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.out, r.err = p.r.Run(context.Background(), runner.Request{
			Window: reconcile.Window{From: lockNow.Add(-72 * time.Hour), To: lockNow}, Trigger: reconcile.TriggerManual, Wait: wait})
	}()
	return r
}

// killLock terminates the run lock's connection of the database (there
// is one: the first run's) and waits until its backend is gone.
func (w *lockWorld) killLock() {
	w.t.Helper()
	var killed int
	err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'reconcile run lock') t`).Scan(&killed)
	if err != nil || killed != 1 {
		w.t.Errorf("terminated %d run lock sessions (%v), want 1", killed, err)
	}
}

// await polls query, which returns one boolean, until it is true; false
// if run (when not nil) ended first, or a minute, a guard against hanging,
// passed.
func (w *lockWorld) await(run *running, query string, args ...any) bool {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ended <-chan struct{}
	if run != nil {
		ended = run.done
	}
	for ctx.Err() == nil {
		select {
		case <-ended:
			w.t.Errorf("the run ended (%v) before %q", run.err, query)
			return false
		default:
		}
		var ok bool
		if err := w.pool.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			w.t.Errorf("poll %q: %v", query, err)
			return false
		}
		if ok {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	w.t.Errorf("never: %q", query)
	return false
}

// The second run took the lock and moved the epoch past the first's.
const epochMoved = `SELECT epoch > 1 FROM reconcile.run_lock`

// The second run took the advisory lock and waits to move the epoch: a
// transaction of the first holds the epoch row.
const waitsForFirst = `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
	WHERE datname = current_database() AND application_name = 'reconcile run lock'
		AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple'))`

// TestLockLostMidRun kills the first run's lock connection at each step of
// its pass while a second run with Wait starts: the two never both apply
// or alert, nothing is posted twice, the first stops with ErrLockLost and
// the second completes.
func TestLockLostMidRun(t *testing.T) {
	t.Parallel()
	// A step's hooks: where the first run's Stripe and Slack requests go,
	// and what runs before its Apply and its mirror save.
	type hooks struct {
		stripeURL, slackURL     string
		beforeApply, beforeSave func()
		// firstPosts counts the first run's Slack posts, where the step
		// hooks them.
		firstPosts *atomic.Int32
	}
	steps := []struct {
		name string
		// arrange returns the hooks that kill the first run's lock at the
		// step and start the second run (second).
		arrange func(w *lockWorld, second func() *running) hooks
		// firstApplied: the lock was lost after the first run's apply.
		firstApplied bool
	}{
		{
			name: "during the provider read",
			arrange: func(w *lockWorld, second func() *running) hooks {
				url, _ := w.hooked(w.stripe, func(*http.Request) bool { return true }, func() {
					w.killLock()
					w.await(second(), epochMoved)
				})
				return hooks{stripeURL: url, slackURL: w.slackURL}
			},
		},
		{
			name: "between match and apply",
			arrange: func(w *lockWorld, second func() *running) hooks {
				return hooks{stripeURL: w.stripeURL, slackURL: w.slackURL, beforeApply: func() {
					w.killLock()
					w.await(second(), epochMoved)
				}}
			},
		},
		{
			name: "inside the apply transaction",
			arrange: func(w *lockWorld, second func() *running) hooks {
				// The first run's Apply writes its run row last; a SHARE
				// lock on the runs table holds it there, everything else
				// written and uncommitted.
				conn, err := w.pool.Acquire(context.Background())
				if err != nil {
					w.t.Fatal(err)
				}
				tx, err := conn.Begin(context.Background())
				if err != nil {
					w.t.Fatal(err)
				}
				if _, err := tx.Exec(context.Background(), `LOCK TABLE reconcile.runs IN SHARE MODE`); err != nil {
					w.t.Fatal(err)
				}
				return hooks{stripeURL: w.stripeURL, slackURL: w.slackURL, beforeApply: func() {
					go func() {
						defer conn.Release()
						defer tx.Rollback(context.Background())
						if !w.await(nil, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
							AND application_name = 'lock-test-first' AND wait_event_type = 'Lock' AND wait_event = 'relation')`) {
							return
						}
						w.killLock()
						if !w.await(second(), waitsForFirst) {
							w.t.Errorf("the second run did not wait for the first's apply transaction")
						}
					}()
				}}
			},
		},
		{
			name:         "between apply and the mirror save",
			firstApplied: true,
			arrange: func(w *lockWorld, second func() *running) hooks {
				return hooks{stripeURL: w.stripeURL, slackURL: w.slackURL, beforeSave: func() {
					w.killLock()
					w.await(second(), epochMoved)
				}}
			},
		},
		{
			name:         "during the drain",
			firstApplied: true,
			arrange: func(w *lockWorld, second func() *running) hooks {
				url, posts := w.hooked(w.slack, func(r *http.Request) bool { return r.URL.Path == "/api/chat.postMessage" }, func() {
					// The first message is in flight: the second run must
					// wait for it to be recorded, not post it again.
					w.killLock()
					if !w.await(second(), waitsForFirst) {
						w.t.Errorf("the second run did not wait for the first's message in flight")
					}
				})
				return hooks{stripeURL: w.stripeURL, slackURL: url, firstPosts: posts}
			},
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			w := newLockWorld(t)
			second := w.newPass("lock-test-second", w.stripeURL, w.slackURL)
			// The hooks start the second run on goroutines of their own
			// (an HTTP handler's, the first run's); the mutex orders that
			// with the test's reading of it.
			var (
				mu      sync.Mutex
				started *running
			)
			h := step.arrange(w, func() *running {
				mu.Lock()
				defer mu.Unlock()
				if started == nil {
					started = second.start(true)
				}
				return started
			})
			first := w.newPass("lock-test-first", h.stripeURL, h.slackURL)
			first.store.beforeApply, first.mirror.beforeSave = h.beforeApply, h.beforeSave

			r1 := first.start(false)
			<-r1.done
			mu.Lock()
			r2 := started
			mu.Unlock()
			if r2 == nil {
				t.Fatal("the hook never ran: the second run never started")
			}
			<-r2.done

			if !errors.Is(r1.err, store.ErrLockLost) || !strings.Contains(r1.err.Error(), "this run stopped") {
				t.Errorf("the first run returned %v, want an error wrapping ErrLockLost saying where it stopped", r1.err)
			}
			t.Logf("first run: %v", r1.err)
			if (r1.out != nil) != step.firstApplied {
				t.Errorf("the first run returned an outcome: %t, want %t (it applied before it lost the lock)", r1.out != nil, step.firstApplied)
			}
			if step.name == "during the provider read" && first.store.applies.Load() != 0 {
				t.Errorf("the first run reached Apply after it lost the lock during the read; Held should have stopped it")
			}
			if h.firstPosts != nil && h.firstPosts.Load() != 1 {
				t.Errorf("the first run posted %d messages, want only the one in flight when its lock was lost", h.firstPosts.Load())
			}
			if r2.err != nil {
				t.Fatalf("the second run: %v", r2.err)
			}
			if r2.out.AlertErr != nil {
				t.Errorf("the second run's alerts: %v", r2.out.AlertErr)
			}

			// Exactly one of them applied.
			applied1 := 0
			if r1.out != nil {
				applied1 = len(r1.out.Applied.Transitions)
			}
			applied2 := len(r2.out.Applied.Transitions)
			if want1 := map[bool]int{true: lockTransitions}[step.firstApplied]; applied1 != want1 || applied1+applied2 != lockTransitions {
				t.Errorf("transitions applied: first %d, second %d; want %d by the %s only", applied1, applied2, lockTransitions,
					map[bool]string{true: "first", false: "second"}[step.firstApplied])
			}
			var audit, twice, firingTwice int
			if err := w.pool.QueryRow(t.Context(), `SELECT
				(SELECT count(*) FROM reconcile.transitions),
				(SELECT count(*) FROM (SELECT obligation_id FROM reconcile.transitions GROUP BY 1 HAVING count(*) > 1) x),
				(SELECT count(*) FROM (SELECT fingerprint FROM reconcile.outbox WHERE event = 'firing' GROUP BY 1 HAVING count(*) > 1) y)`).
				Scan(&audit, &twice, &firingTwice); err != nil {
				t.Fatal(err)
			}
			if audit != lockTransitions || twice != 0 || firingTwice != 0 {
				t.Errorf("%d audit rows (%d obligations twice), %d findings alerted twice; want %d, none, none", audit, twice, firingTwice, lockTransitions)
			}
			// The first run's row only if it applied; never a failed one.
			var runs []string
			rows, err := w.pool.Query(t.Context(), `SELECT CASE id WHEN $1 THEN 'second' ELSE 'first' END || ' ' || status
				FROM reconcile.runs ORDER BY started_at, 1`, r2.out.Run.ID)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				runs = append(runs, s)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			want := "[second completed]"
			if step.firstApplied {
				want = "[first completed second completed]"
			}
			if got := "[" + strings.Join(runs, " ") + "]"; got != want {
				t.Errorf("run rows %s, want %s", got, want)
			}

			// Slack got each message once: the summary, the duplicate,
			// the orphan in the summary's thread.
			msgs := w.slack.Messages()
			seen := map[string]bool{}
			for _, m := range msgs {
				if seen[m.Flat] {
					t.Errorf("posted twice:\n%s", m.Flat)
				}
				seen[m.Flat] = true
				if strings.Contains(m.Flat, "may repeat") || strings.Contains(m.Flat, "Possible repeat") {
					t.Errorf("a message is marked as a possible repeat:\n%s", m.Flat)
				}
			}
			if len(msgs) != 3 {
				t.Errorf("%d Slack messages, want 3", len(msgs))
			}
			var unsent, unknown int
			if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE sent_at IS NULL),
				count(*) FILTER (WHERE outcome_unknown OR sending_since IS NOT NULL) FROM reconcile.outbox`).Scan(&unsent, &unknown); err != nil {
				t.Fatal(err)
			}
			if unsent+unknown != 0 {
				t.Errorf("outbox: %d rows unsent, %d of unknown outcome; want none", unsent, unknown)
			}
		})
	}
}
