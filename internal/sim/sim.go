// Package sim is a seeded simulation of whole histories of the
// reconciler's world, a deterministic simulator at the scale of
// this project: one seed drives one deterministic history on a virtual
// clock, in which a payment worker creates obligations, claims leases,
// calls the provider, loses answers, retries with fresh keys, records an
// answer copied from another payment (copiedAnswer) and crashes; finance
// refunds, days later, a charge an open finding is about (refundOfOpen);
// the Stripe test server and the Slack fake misbehave; and reconciler
// passes run at random points, two at once, or are killed at a step
// boundary and restarted. An oracle that knows what the provider really
// did checks the invariants I1–I9 after every pass.
//
// Everything real runs: the runner, the stripe-go reader against
// stripesim over HTTP, the obligations reader, the store and the provider
// mirror on PostgreSQL, and the slack-go deliverer against slacktest.
// Faults are injected only at those boundaries, or by wrapping the
// runner's own interfaces (runner.Store, runner.Provider) to kill a pass
// at a step boundary.
//
// What the oracle knows, and what it holds a pass to. It knows every
// object the provider holds, for which obligation (if any) the request
// was made, with which key, and its status at every moment; and every
// write the worker made. It holds a pass only to what the pass could see:
// objects created in the pass's window or named by an obligation in scope
// (and retrieved, unless the fault injector failed that retrieval), key
// evidence from events in the window (for an incremental read, in the
// events it read), and the obligations the pass decides on (docs/design.md, "Coverage"). Money
// that moved with no evidence tying it to its obligation (a fresh key and
// no metadata) is, for the pass, an orphan or a suspected duplicate, and
// the oracle expects exactly that. A pass that did not complete is held
// to having changed nothing (I7). Per completed pass it checks:
//
//   - the pass's scope, objects read (their state as the provider held it
//     when the pass began, however read: listed, retrieved or mirrored),
//     findings and transitions against an independent statement of
//     docs/design.md's rules over the truth (a mismatch is M, or I1, I2, I7 by
//     what it breaks);
//   - I1: every PAID transition has exactly one succeeded movement of
//     equal money among what the pass could see and link, and records it;
//   - I2: every anomaly the oracle expects is an open finding afterwards;
//     no finding is ever deleted; only covered findings are resolved;
//   - I3: the outbox rows written are exactly the notices the findings'
//     changes call for; at the end, after a quiet drain, every row reached
//     Slack, any extra copy said "possible repeat", and extras number no
//     more than the sends whose outcome the sender could not know;
//   - I4: the obligations table holds exactly what the worker wrote plus
//     the verified transitions, each with its audit row and a legal edge;
//   - I5: no transition of a row the pass did not read as it was, or
//     whose lease was live; a row a worker changed mid-pass is skipped;
//   - I6: a rerun at the same moment queues and changes nothing and
//     sends only what was already due; a dry run writes and sends nothing;
//   - I8: no canary (keys, tokens, the database password, card numbers, an
//     e-mail address) in the logs, Slack, returned errors, stored error
//     texts or the mirror's metadata (bar the link keys' values);
//   - I9: window independence (docs/design.md, "Coverage"): for every
//     obligation the pass decided on within reach of max_lookback and
//     Stripe's events, the PAID decision and the critical and high
//     findings of the oracle's pass over the whole history at the same
//     moment; none marked PAID beyond.
package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/redact"
	"reconcile/internal/slacktest"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

// Canaries are secrets and personal data planted in the world. None may
// appear in a log line, a report, a stored finding or a Slack message (I8).
const (
	canaryStripeKey = "sk_test_CANARYsimStripeKey0123456789abcdef"
	canaryBotToken  = "xoxb-CANARY-1111-2222-simBotToken"
	canaryHookToken = "CANARYsimHookSecret77"
	canaryDBPass    = "CANARYsimDBpassword"
	canaryPAN       = "4242424242424242"
	canaryPANSpaced = "4000 0566 5566 5556"
	canaryEmail     = "canary.customer@example.com"
)

// canaries lists what I8 looks for; the card numbers also without
// separators.
func canaries() []string {
	return []string{canaryStripeKey, canaryBotToken, canaryHookToken, canaryDBPass,
		canaryPAN, canaryPANSpaced, strings.ReplaceAll(canaryPANSpaced, " ", ""), canaryEmail}
}

// Env is the database histories run on: the reference obligations table
// and the reconcile schema, migrated. Run empties it first. Its pools
// outlive a history, because a new PostgreSQL connection costs tens of
// milliseconds here and a history makes enough of them already (one per
// pass, for the run lock).
type Env struct {
	// Pool is the oracle's and the payment worker's.
	Pool *pgxpool.Pool
	// runner is the reconciler's, opened with the canary password (trust
	// auth ignores it) so that I8 would see it leak.
	runner *pgxpool.Pool
}

// runnerApp is the application_name of the reconciler's pool; its run
// lock connection calls itself "reconcile run lock".
const runnerApp = "sim reconciler"

// NewEnv opens the pools of an Env on dbURL, an already migrated database.
func NewEnv(ctx context.Context, dbURL string) (*Env, error) {
	open := func(app, password string) (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			return nil, fmt.Errorf("parse database url: %w", err)
		}
		if cfg.ConnConfig.Password == "" {
			cfg.ConnConfig.Password = password
		}
		cfg.MaxConns = 3
		// A history tests no durability: commits need not wait for the disk.
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		// Named, so that a test can kill the reconciler's sessions only.
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		return pgxpool.NewWithConfig(ctx, cfg)
	}
	p, err := open("sim oracle", "")
	if err != nil {
		return nil, err
	}
	r, err := open(runnerApp, canaryDBPass)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &Env{Pool: p, runner: r}, nil
}

// Close closes the pools.
func (e *Env) Close() {
	e.Pool.Close()
	e.runner.Close()
}

// Options configure one history.
type Options struct {
	Seed uint64
	// Trace receives the history's trace lines as they happen; nil: none.
	Trace io.Writer
}

// Violation is one broken invariant.
type Violation struct {
	Invariant string // I1…I8, or M (the model disagrees with the matcher's result)
	Pass      int    // the pass after which it was found; 0 at the end of the history
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s (pass %d): %s", v.Invariant, v.Pass, v.Detail)
}

// Report is what one history did and found.
type Report struct {
	Seed       uint64
	Steps      int // actions of the history, passes included
	Passes     int // reconciler passes run (dry, killed and locked out included)
	Violations []Violation
	Coverage   Coverage
	// Digest hashes the trace: two runs of a seed must give the same.
	Digest string
	// Trace is the history, one line per event, run ids left out.
	Trace []string
	// Unlinkable counts PAID transitions that the pass's evidence
	// justified while money had also moved for the obligation in an object
	// nothing ties to it (a fresh key and no metadata), which the pass read
	// and reported as an orphan: a limit of any reconciliation, not a bug.
	Unlinkable int
	// Known counts known deviations by id (see known).
	Known map[string]int
	// Stats counts what passes did (how they read the provider).
	Stats map[string]int
}

// world is one history.
type world struct {
	ctx  context.Context
	env  *Env
	seed uint64
	rng  *rand.Rand
	jrng *rand.Rand // the choices about passes run as jobs (jobsRand)
	crng *rand.Rand // the answers copied from another payment (copiedAnswer)
	orng *rand.Rand // the refunds of what an open finding is about (refundOfOpen)
	// refundsOfOpen counts them: two a history at most.
	refundsOfOpen int
	// stuckRun is a pass as jobs left running until the next is
	// enqueued (checkJobPass).
	stuckRun string
	clock    *clock

	stripe    *stripesim.Server
	stripeURL string
	slack     *slacktest.Server
	slackURL  string
	webhook   bool // Slack through an incoming webhook instead of the bot API
	mirror    bool // passes keep a mirror of the provider and read incrementally, as the command does
	// maxLookback bounds how far back passes read: the default, or in
	// some histories a few days, so that obligations outlive it.
	maxLookback time.Duration

	pool        *pgxpool.Pool // the runner's pool
	store       *store.Store
	obligations *sources.Obligations
	logs        *lockedBuffer
	log         *slog.Logger

	// mu guards what passes running in goroutines share with the history:
	// the ledger, the Slack observer, the report.
	mu       sync.Mutex
	led      *ledger
	obs      *observer
	rep      *Report
	trace    io.Writer
	passes   int      // passes begun, for their numbers
	errTexts []string // what passes returned as errors, for I8
	closers  []func()
	// afterBegin, when set (by tests), runs once a pass has begun: its
	// snapshot taken, before it reads anything.
	afterBegin func(*passCtl) error
}

// Run runs the history of opts.Seed on env and reports what it found. An
// error means the history could not run (the database is unreachable),
// not that an invariant broke.
func Run(ctx context.Context, env *Env, opts Options) (*Report, error) {
	w, err := newWorld(ctx, env, opts)
	if err != nil {
		return nil, err
	}
	defer w.close()
	if err := w.history(); err != nil {
		return nil, err
	}
	if err := w.checkSecrets(); err != nil {
		return nil, err
	}
	sum := sha256.New()
	for _, l := range w.rep.Trace {
		io.WriteString(sum, l)
		sum.Write([]byte{'\n'})
	}
	w.rep.Digest = hex.EncodeToString(sum.Sum(nil))[:16]
	return w.rep, nil
}

// newWorld sets up an empty world for opts.Seed; close it.
func newWorld(ctx context.Context, env *Env, opts Options) (*world, error) {
	w := &world{
		ctx:   ctx,
		env:   env,
		seed:  opts.Seed,
		rng:   rand.New(rand.NewPCG(opts.Seed, 0x5eed5eed)),
		clock: newClock(),
		led:   newLedger(),
		rep:   &Report{Seed: opts.Seed, Coverage: newCoverage()},
		trace: opts.Trace,
		logs:  &lockedBuffer{},
	}
	w.obs = newObserver(w)
	if err := w.setUp(); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// setUp empties the database and starts the fakes.
func (w *world) setUp() error {
	// DELETE rather than TRUNCATE: a handful of rows, and TRUNCATE's new
	// files cost a tenth of a second per history.
	if _, err := w.env.Pool.Exec(w.ctx, `DELETE FROM reconcile.outbox; DELETE FROM reconcile.findings;
		DELETE FROM reconcile.pass_parts; DELETE FROM reconcile.pass_accounts; DELETE FROM reconcile.pass_fanin;
		DELETE FROM reconcile.transitions; DELETE FROM reconcile.runs; DELETE FROM obligations;
		DELETE FROM reconcile.provider_objects; DELETE FROM reconcile.provider_keys; DELETE FROM reconcile.sync_cursors;
		DELETE FROM reconcile.accounts;
		ALTER SEQUENCE reconcile.outbox_id_seq RESTART; ALTER SEQUENCE reconcile.transitions_id_seq RESTART`); err != nil {
		return fmt.Errorf("empty the database: %w", err)
	}
	w.webhook = w.rng.IntN(4) == 0
	w.mirror = w.rng.IntN(8) != 0
	// Drawn apart from the history's own choices, which stay those of
	// the seed.
	w.maxLookback = config.Default().MaxLookback
	if r := rand.New(rand.NewPCG(w.seed, 0x100cbac)); r.IntN(4) == 0 {
		w.maxLookback = time.Duration(50+r.IntN(5*24)) * time.Hour
	}
	w.stripe = stripesim.New(canaryStripeKey)
	u, stop, err := w.stripe.Start()
	if err != nil {
		return err
	}
	w.stripeURL = u
	w.closers = append(w.closers, stop)
	token := canaryBotToken
	if w.webhook {
		token = canaryHookToken
	}
	w.slack = slacktest.New(token)
	u, stop, err = w.slack.Start()
	if err != nil {
		return err
	}
	w.slackURL = u
	w.closers = append(w.closers, stop)

	w.log = slog.New(slog.NewJSONHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: redact.Attr}))
	w.pool = w.env.runner
	opts := store.OptionsFrom(config.Default())
	opts.Logger = w.log
	w.store, err = store.New(w.pool, opts)
	if err != nil {
		return err
	}
	w.obligations, err = sources.NewObligations(w.pool, reconcile.DefaultObligationTable())
	return err
}

func (w *world) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// tracef records one line of the history.
func (w *world) tracef(format string, args ...any) {
	line := fmt.Sprintf("%s %s", w.clock.Now().Sub(epoch).String(), fmt.Sprintf(format, args...))
	w.rep.Trace = append(w.rep.Trace, line)
	if w.trace != nil {
		fmt.Fprintln(w.trace, line)
	}
}

// known records a known deviation: a behaviour reported to the owning
// package, counted apart from violations.
func (w *world) known(id string, pass int, format string, args ...any) {
	if w.rep.Known == nil {
		w.rep.Known = map[string]int{}
	}
	w.rep.Known[id]++
	w.tracef("KNOWN %s (pass %d): %s", id, pass, fmt.Sprintf(format, args...))
}

// violate records a broken invariant.
func (w *world) violate(inv string, pass int, format string, args ...any) {
	v := Violation{Invariant: inv, Pass: pass, Detail: fmt.Sprintf(format, args...)}
	w.rep.Violations = append(w.rep.Violations, v)
	w.tracef("VIOLATION %s", v)
}

// lockedBuffer is a bytes.Buffer safe for the loggers of concurrent passes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// backoffSleep stands in for the Slack deliverer's waits: the virtual
// clock stands still during a pass, so a retry after Retry-After or a
// backoff happens at once.
func backoffSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
