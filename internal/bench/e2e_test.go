package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile"
	"reconcile/internal/config"
	"reconcile/internal/matcher"
	"reconcile/internal/pgtest"
	"reconcile/internal/runner"
	"reconcile/internal/sources"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

const stripeKey = "sk_test_bench_reconcile"

// e2eSizes are the end-to-end benchmarks' history sizes: n obligations and
// about as many provider objects (and a few more events).
var e2eSizes = []struct {
	name string
	n    int
}{{"10k", 10_000}, {"100k", 100_000}, {"1M", 1_000_000}}

// server is a World on the Stripe test server, built once per size and
// shared by the benchmarks of one process. The command benchmark's third
// pass adds a day's new business to it (newDay); added keeps those
// obligations, so that every later fresh database holds what the server
// holds and the objects added are no orphans to the next benchmark.
type server struct {
	world World
	srv   *stripesim.Server
	url   string
	added []reconcile.Obligation
	days  int // new days added, for their ids
}

// sparse is how much sparser than the default World's the findings of
// the sparse command benchmark's World are: at 1M, as many open as the
// default 100k World holds.
const sparse = 10

// serverKey names one World: its size and how many obligations hold one
// of each finding kind.
type serverKey struct{ n, findingsEvery int }

var (
	serversMu sync.Mutex
	servers   = map[serverKey]*server{}
)

// serve is the server of the World of n obligations with one of each
// finding kind in every findingsEvery (0: the default), started on first
// use.
func serve(b *testing.B, n, findingsEvery int) *server {
	b.Helper()
	serversMu.Lock()
	defer serversMu.Unlock()
	key := serverKey{n, findingsEvery}
	if s, ok := servers[key]; ok {
		return s
	}
	start := time.Now()
	// The newest objects two minutes old: a second pass's overlap holds
	// some, as a nightly pass's does.
	w := NewWorldWith(n, time.Now().UTC().Truncate(time.Second), WorldOptions{Newest: 2 * time.Minute, FindingsEvery: findingsEvery})
	srv := stripesim.New(stripeKey)
	keys := w.KeyOf()
	for _, o := range w.Objects {
		if err := srv.Add(o, keys[o.ID]); err != nil {
			b.Fatal(err)
		}
	}
	url, stop, err := srv.Start()
	if err != nil {
		b.Fatal(err)
	}
	// The server outlives this benchmark: the next one of the size reuses
	// it, and the process's end stops it.
	_ = stop
	s := &server{world: w, srv: srv, url: url}
	servers[key] = s
	b.Logf("stripesim with %d objects ready in %s", len(w.Objects), time.Since(start).Round(time.Millisecond))
	return s
}

// database is a fresh database holding the reconcile schema, the World's
// obligations and those of the days added to s since (COPY).
func database(b *testing.B, s *server) (*pgxpool.Pool, string) {
	b.Helper()
	pool, dbURL := obligationsDatabase(b, s.world.Obligations, false)
	if len(s.added) > 0 {
		copyObligations(b, pool, s.added, false)
		b.Logf("and the %d obligations of the %d days added since", len(s.added), s.days)
	}
	return pool, dbURL
}

// newDay adds one day's new business, n clean charges created one to four
// minutes ago, to s's server (each object with its key event) and its
// obligations to the database at pool (COPY, without the VACUUM a fresh
// database gets: a nightly pass finds the day's rows as the application
// left them). The objects fall after the last pass's cursor less the
// incremental listing's 10-minute overlap (runner's plan.go), so that the
// next incremental pass lists them, as it lists what a night brings. The
// obligations fall after the last pass's clock less the matcher's clock
// skew (5 minutes by default), where its census stopped counting: a row
// created before that and written since is one "written with old times"
// (docs/design.md, "Incremental matching"), and the pass would match
// whole. Five minutes back, the second's truncation put the first few
// rows there whenever the last pass had ended within the second.
func newDay(b *testing.B, s *server, pool *pgxpool.Pool, n int) World {
	b.Helper()
	start := time.Now()
	now := start.UTC().Truncate(time.Second)
	day := NewBusiness(n, fmt.Sprintf("new%d-", s.days), now.Add(-4*time.Minute), now.Add(-time.Minute))
	s.days++
	keys := day.KeyOf()
	for _, o := range day.Objects {
		// Safe while the server serves (stripesim.Server: "data may be
		// added while it serves").
		if err := s.srv.Add(o, keys[o.ID]); err != nil {
			b.Fatal(err)
		}
	}
	copyObligations(b, pool, day.Obligations, false)
	s.added = append(s.added, day.Obligations...)
	b.Logf("new day of %d charges added in %s", n, time.Since(start).Round(time.Millisecond))
	return day
}

// obligationsDatabase is a fresh database holding the reconcile schema
// (River's tables included) and obs (COPY), each naming its account in
// the column stripe_account when withAccount.
func obligationsDatabase(b *testing.B, obs []reconcile.Obligation, withAccount bool) (*pgxpool.Pool, string) {
	b.Helper()
	start := time.Now()
	pool, dbURL := pgtest.NewMigrated(b, store.SchemaDigest(), store.Migrate)
	ctx := context.Background()
	if withAccount {
		if _, err := pool.Exec(ctx, `ALTER TABLE obligations ADD COLUMN stripe_account text`); err != nil {
			b.Fatal(err)
		}
	}
	n := copyObligations(b, pool, obs, withAccount)
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE obligations"); err != nil {
		b.Fatal(err)
	}
	b.Logf("database with %d obligations ready in %s", n, time.Since(start).Round(time.Millisecond))
	return pool, dbURL
}

// copyObligations appends obs to the obligations table at pool (COPY),
// each naming its account in the column stripe_account when withAccount,
// and returns how many rows it wrote.
func copyObligations(b *testing.B, pool *pgxpool.Pool, obs []reconcile.Obligation, withAccount bool) int {
	b.Helper()
	cols := []string{"id", "kind", "idempotency_key", "provider", "provider_id", "target_id", "amount", "currency",
		"state", "lease_owner", "lease_expires_at", "created_at", "updated_at", "paid_at"}
	if withAccount {
		cols = append(cols, "stripe_account")
	}
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	nullTime := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	n, err := pool.CopyFrom(context.Background(), pgx.Identifier{"obligations"}, cols, pgx.CopyFromSlice(len(obs), func(i int) ([]any, error) {
		o := &obs[i]
		row := []any{o.ID, string(o.Kind), o.IdempotencyKey, "stripe", null(o.ProviderID), null(o.TargetID), o.Money.Amount,
			o.Money.Currency, o.RawState, null(o.LeaseOwner), nullTime(o.LeaseExpiresAt.Time()), o.CreatedAt.Time(), o.UpdatedAt.Time(), nullTime(o.PaidAt.Time())}
		if withAccount {
			row = append(row, null(o.Account))
		}
		return row, nil
	}))
	if err != nil || int(n) != len(obs) {
		b.Fatalf("copy obligations: %d rows, %v", n, err)
	}
	return int(n)
}

// reads counts what the server handed out since its stats were reset.
func reads(s *stripesim.Server) (entries, requests int) {
	st := s.Stats()
	return st.Reads(), st.Requests
}

var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

// TestMain removes the built command when the benchmarks are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// command builds cmd/reconcile once per process.
func command(b *testing.B) string {
	b.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "reconcile-bench-cmd-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir, binPath = dir, filepath.Join(dir, "reconcile")
		out, err := exec.Command("go", "build", "-o", binPath, "reconcile/cmd/reconcile").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return binPath
}

// passResult is what one run of the command cost.
type passResult struct {
	wall     time.Duration
	cpu      time.Duration // user + system
	rssMB    float64       // peak resident set
	reads    int           // list entries and retrievals served
	requests int
	stderr   string
	// phases are the pass's steps in seconds, from its "pass phases" log
	// line.
	phases map[string]float64
}

// phasesOf reads the "pass phases" line of a pass's JSON log.
func phasesOf(stderr string) map[string]float64 {
	m := logLine(stderr, "pass phases")
	if m == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range m {
		if f, ok := v.(float64); ok && strings.HasSuffix(k, "_s") {
			out[strings.TrimSuffix(k, "_s")] = f
		}
	}
	return out
}

// logLine is the first line of a pass's JSON log whose message is msg,
// decoded; nil when there is none.
func logLine(stderr, msg string) map[string]any {
	quoted, _ := json.Marshal(msg)
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.Contains(line, string(quoted)) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] != msg {
			continue
		}
		return m
	}
	return nil
}

// findingsOf is the number of findings a pass applied, from its "run
// applied" log line; -1 when the line is missing.
func findingsOf(stderr string) int {
	if f, ok := logLine(stderr, "run applied")["findings"].(float64); ok {
		return int(f)
	}
	return -1
}

// runCommand runs `reconcile run` once against s and dbURL.
func runCommand(b *testing.B, s *server, dbURL string, args ...string) passResult {
	b.Helper()
	cfg := filepath.Join(b.TempDir(), "reconcile.yaml")
	// No pacing against the local server: it has no rate limit.
	if err := os.WriteFile(cfg, []byte("stripe:\n  rate: 10000\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(command(b), append([]string{"run", "--config", cfg, "--since", "720h", "--format", "json"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dbURL, "STRIPE_API_KEY=" + stripeKey, "STRIPE_API_BASE=" + s.url}
	// The runtime's knobs pass through, for experiments (GODEBUG=gctrace=1).
	for _, k := range []string{"GODEBUG", "GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	s.srv.ResetStats()
	wall, peak, err := runMeasured(cmd)
	if err != nil {
		b.Fatalf("reconcile run %v: %v\n%s", args, err, tail(stderr.String(), 2000))
	}
	if dir := os.Getenv("RECONCILE_BENCH_LOGS"); dir != "" {
		// Each pass's log (and, with GODEBUG=gctrace=1, the collector's).
		name := filepath.Join(dir, fmt.Sprintf("pass-%s.log", time.Now().Format("150405.000")))
		if err := os.WriteFile(name, stderr.Bytes(), 0o600); err != nil {
			b.Logf("keep the pass's log: %v", err)
		}
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	entries, requests := reads(s.srv)
	return passResult{wall: wall, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), rssMB: float64(peak) / 1024,
		reads: entries, requests: requests, stderr: stderr.String(), phases: phasesOf(stderr.String())}
}

// runMeasured runs cmd to its end, and returns how long it took and its
// peak resident set (KiB, pollPeakRSS).
func runMeasured(cmd *exec.Cmd) (time.Duration, int64, error) {
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	done := make(chan struct{})
	polled := make(chan int64)
	go func() { polled <- pollPeakRSS(cmd.Process.Pid, done) }()
	err := cmd.Wait()
	close(done)
	peak := <-polled
	return time.Since(start), peak, err
}

// pollPeakRSS returns the highest VmHWM (peak resident set, KiB) of
// process pid read from /proc until done is closed. The child's own
// rusage cannot tell: os/exec starts it with vfork, and Linux carries the
// parent's high-water mark (this benchmark's, a server holding a million
// objects) into the child's ru_maxrss at exec. VmHWM is the new image's
// alone and never decreases, so a poll every 20 ms misses at most the
// growth of the last 20 ms.
func pollPeakRSS(pid int, done <-chan struct{}) int64 {
	var peak int64
	path := fmt.Sprintf("/proc/%d/status", pid)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			for line := range strings.Lines(string(b)) {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
						peak = max(peak, kb)
					}
				}
			}
		}
		select {
		case <-done:
			return peak
		case <-tick.C:
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// BenchmarkEndToEnd runs whole passes over a World of n obligations and
// about as many provider objects, the objects on the Stripe test server in
// this process (no latency, no rate limit), the obligations in a fresh
// PostgreSQL database:
//
//   - command: the built `reconcile run --since 720h` binary, three
//     times, the nightly passes of reconcile-bench's section (d): the
//     first pass reads the whole window and fills the mirror; the second
//     runs over the unchanged history and reads only what the mirror lacks
//     (incremental sync); the third runs after a day's new business, n/100
//     clean charges created one to four minutes before it, added to the
//     server and their obligations to the database (newDay), and reads
//     incrementally too, the new objects among what it reads.
//     Reported per pass (first_, second_, third_): wall time, peak RSS and
//     CPU of the reconcile process, objects and events the server handed
//     out, requests, and the pass's phases from its log; read_pct is the
//     second pass's reads over the first's, new_vs_unchanged the third
//     pass's wall time over the second's.
//   - sparse: command's passes over a World whose findings are ten times
//     sparser (WorldOptions.FindingsEvery 10,000): at 1M, a history ten
//     times the default 100k's with as much of it open, so that its
//     nightly pass divided by 100k's shows what the history's size alone
//     costs.
//   - inprocess: the first two passes through runner.Runner wired as the
//     command wires it, in this process, so that -cpuprofile sees them
//     (the profile holds the server's work too).
//
// The command benchmarks leave their new days on the server, and every
// later fresh database of the World holds their obligations
// (server.added).
//
// Run: go test ./internal/bench -run '^$' -bench 'EndToEnd/1M/command' -benchtime 1x -timeout 0
func BenchmarkEndToEnd(b *testing.B) {
	for _, size := range e2eSizes {
		b.Run(size.name+"/command", func(b *testing.B) {
			commandPasses(b, serve(b, size.n, 0))
		})
		b.Run(size.name+"/sparse", func(b *testing.B) {
			commandPasses(b, serve(b, size.n, sparse*1000))
		})
		b.Run(size.name+"/inprocess", func(b *testing.B) {
			s := serve(b, size.n, 0)
			for b.Loop() {
				b.StopTimer()
				pool, _ := database(b, s)
				b.StartTimer()
				first := runInProcess(b, s, pool)
				second := runInProcess(b, s, pool)
				b.StopTimer()
				if second.Sync.Mode != runner.SyncIncremental {
					b.Errorf("second pass: mode %s (%s), want incremental", second.Sync.Mode, second.Sync.Reason)
				}
				b.Logf("first pass %+v", first.Sync)
				b.Logf("second pass %+v", second.Sync)
				b.StartTimer()
			}
		})
	}
}

// commandPasses runs the command benchmark's three passes over s's World
// on a fresh database each iteration, checks that the nightly ones were
// incremental and reports them (reportPasses).
func commandPasses(b *testing.B, s *server) {
	command(b)
	for b.Loop() {
		b.StopTimer()
		pool, dbURL := database(b, s)
		b.StartTimer()
		first := runCommand(b, s, dbURL)
		second := runCommand(b, s, dbURL)
		b.StopTimer()
		day := newDay(b, s, pool, len(s.world.Obligations)/100)
		b.StartTimer()
		third := runCommand(b, s, dbURL)
		b.StopTimer()
		reportPasses(b, len(s.world.Objects), len(day.Objects), first, second, third)
		for _, p := range []struct {
			name string
			r    passResult
		}{{"second", second}, {"third", third}} {
			if !strings.Contains(p.r.stderr, "read the provider incrementally") {
				b.Errorf("the %s pass did not read incrementally:\n%s", p.name, tail(p.r.stderr, 2000))
			}
			// A nightly figure of a pass that matched whole would
			// measure the wrong pass.
			if m := logLine(p.r.stderr, "matched whole"); m != nil {
				b.Errorf("the %s pass matched whole: %v", p.name, m["reason"])
			}
		}
		// Each new object and its key event are list entries the third
		// pass must have been handed; fewer means the incremental listing
		// missed the day.
		if want := 2 * len(day.Objects); third.reads < want {
			b.Errorf("the third pass read %d entries, want at least the new day's %d objects and key events", third.reads, want)
		}
		// The day is clean business: matched, it adds no finding.
		if f2, f3 := findingsOf(second.stderr), findingsOf(third.stderr); f2 < 0 || f3 != f2 {
			b.Errorf("findings: second pass %d, third pass %d; want the same (the new day is clean)", f2, f3)
		}
		pool.Close()
		b.StartTimer()
	}
}

// reportPasses reports the three command passes' metrics; objects is the
// World's, added the new day's.
func reportPasses(b *testing.B, objects, added int, first, second, third passResult) {
	passes := []struct {
		name string
		r    passResult
	}{{"first", first}, {"second", second}, {"third", third}}
	for _, p := range passes {
		b.ReportMetric(p.r.wall.Seconds(), p.name+"_s")
		b.ReportMetric(p.r.cpu.Seconds(), p.name+"_cpu_s")
		b.ReportMetric(p.r.rssMB, p.name+"_rss_MB")
		b.ReportMetric(float64(p.r.reads), p.name+"_reads")
		b.ReportMetric(float64(p.r.requests), p.name+"_requests")
		for phase, secs := range p.r.phases {
			b.ReportMetric(secs, p.name+"_"+phase+"_s")
		}
		// What an incremental match re-evaluated, from its log: the
		// obligations it decided on, of them those open (of an open
		// finding, or not yet final) and those changed since the last
		// pass.
		m := logLine(p.r.stderr, "matched incrementally")
		for _, k := range []string{"decided", "open_obligations", "changed_obligations"} {
			if v, ok := m[k].(float64); ok {
				b.ReportMetric(v, p.name+"_"+k)
			}
		}
	}
	b.ReportMetric(100*float64(second.reads)/float64(first.reads), "read_pct")
	b.ReportMetric(third.wall.Seconds()/second.wall.Seconds(), "new_vs_unchanged")
	b.ReportMetric(float64(objects), "objects")
	b.ReportMetric(float64(added), "new_objects")
}

// runInProcess runs one pass through a runner wired as cmd/reconcile
// wires it.
func runInProcess(b *testing.B, s *server, pool *pgxpool.Pool) *runner.Outcome {
	b.Helper()
	st, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		b.Fatal(err)
	}
	obl, err := sources.NewObligations(pool, reconcile.DefaultObligationTable())
	if err != nil {
		b.Fatal(err)
	}
	so := sources.StripeOptionsFrom(config.Default())
	so.APIKey, so.BaseURL, so.Rate = stripeKey, s.url, 10000
	stripe, err := sources.NewStripe(so)
	if err != nil {
		b.Fatal(err)
	}
	r := &runner.Runner{Provider: stripe, Obligations: obl, Store: st, Matcher: matcher.OptionsFrom(config.Default().Matcher),
		Now: time.Now, Logger: slog.New(slog.DiscardHandler), Mirror: store.NewMirror(pool)}
	now := time.Now().UTC().Truncate(time.Second)
	out, err := r.Run(context.Background(), runner.Request{Window: reconcile.Window{From: now.Add(-720 * time.Hour), To: now},
		Trigger: reconcile.TriggerManual})
	if err != nil {
		b.Fatal(err)
	}
	return out
}
