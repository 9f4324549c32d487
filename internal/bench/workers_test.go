//go:build unix

package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile/internal/stripesim"
)

// workersSizes are the platforms BenchmarkWorkers passes over: accounts
// (the platform's own included) × obligations per account.
var workersSizes = []struct {
	name        string
	accounts, n int
}{{"24x20k", 24, 20_000}, {"24x5k", 24, 5_000}, {"24x1k", 24, 1_000}}

// The Stripe test server's faults in BenchmarkWorkers: every response
// after 50 ms, and each account (the platform's own included) limited to
// 25 requests a second, 429 above.
const (
	workersLatency      = 50 * time.Millisecond
	workersAccountLimit = 25
)

// workersConfig is the configuration every process of BenchmarkWorkers
// reads. stripe.rate is the live key's read limit, 100 requests/s: the
// pacer is the key's, one per process (the test server enforces only the
// per-account limit, so a fleet of N workers may together send N × 100/s,
// more than one live key would be allowed). stripe.concurrency is the
// default, 4.
const workersConfig = `stripe:
  rate: 100
  accounts: all
obligations:
  columns:
    account: stripe_account
workers:
  enabled: true
  slice: 120h
  fetchers: 4
  appliers: 2
`

// workersSince is the window of every pass: the history (20,000 minutes
// back from half an hour ago, about 334 h) with a margin, so that no fetch
// slice is wholly empty.
const workersSince = "360h"

// BenchmarkWorkers runs one pass over a platform of accounts × n
// obligations (and about as many provider objects each) on the Stripe
// test server with 50 ms latency and 25 requests/s per account, each on a
// fresh database:
//
//   - one: the built `reconcile run` in one process;
//   - w1, w2, w4: `reconcile run --enqueue` with 1, 2 and 4 `reconcile
//     worker` processes started (and ready) beforehand.
//
// Reported per row: the pass's wall time (for the workers, from the
// enqueue to run --enqueue's exit), its ratio to the one-process run's,
// the peak RSS (VmHWM) of the one process and of each worker, the
// requests the server answered and the 429s among them, and the fetch
// and apply jobs each worker completed.
//
// Run: go test ./internal/bench -run '^$' -bench '^BenchmarkWorkers$/^24x20k$' -benchtime 1x -timeout 0
func BenchmarkWorkers(b *testing.B) {
	for _, size := range workersSizes {
		b.Run(size.name, func(b *testing.B) {
			start := time.Now()
			p := NewPlatform(size.accounts, size.n, time.Now().UTC().Truncate(time.Second))
			srv, url := servePlatform(b, p)
			objects := 0
			for _, objs := range p.Objects {
				objects += len(objs)
			}
			b.Logf("platform of %d accounts, %d obligations, %d objects on stripesim in %s", len(p.Accounts), len(p.Obligations),
				objects, time.Since(start).Round(time.Millisecond))
			bin := command(b)
			cfg := filepath.Join(b.TempDir(), "reconcile.yaml")
			if err := os.WriteFile(cfg, []byte(workersConfig), 0o600); err != nil {
				b.Fatal(err)
			}
			faults := func() {
				srv.SetFaults(stripesim.Faults{Latency: workersLatency})
				for _, a := range p.Accounts {
					srv.SetAccountFaults(a.ID, stripesim.Faults{RateLimit: workersAccountLimit})
				}
				srv.ResetStats()
			}
			for b.Loop() {
				b.StopTimer()
				_, dbURL := platformDatabase(b, p)
				env := workersEnv(dbURL, url)
				faults()
				b.StartTimer()
				one := runPass(b, bin, env, cfg, workersSince, false)
				b.StopTimer()
				one.served(srv)
				b.ReportMetric(one.wall.Seconds(), "one_s")
				b.ReportMetric(one.rssMB, "one_rss_MB")
				b.ReportMetric(float64(one.requests), "one_requests")
				b.ReportMetric(float64(one.limited), "one_429s")
				for phase, secs := range one.phases {
					b.ReportMetric(secs, "one_"+phase+"_phase_s")
				}
				b.Logf("one process: %s, %.0f MB, %d requests, %d 429s", one.wall.Round(time.Millisecond), one.rssMB, one.requests, one.limited)
				for _, n := range []int{1, 2, 4} {
					pool, dbURL := platformDatabase(b, p)
					env := workersEnv(dbURL, url)
					fleet := startWorkers(b, bin, env, cfg, n)
					faults()
					b.StartTimer()
					r := runPass(b, bin, env, cfg, workersSince, true)
					b.StopTimer()
					r.served(srv)
					peaks := fleet.peaks()
					jobs := jobsBy(b, pool)
					st := stagesOf(b, pool)
					fleet.stop()
					name := fmt.Sprintf("w%d", n)
					b.ReportMetric(r.wall.Seconds(), name+"_s")
					b.ReportMetric(one.wall.Seconds()/r.wall.Seconds(), name+"_speedup")
					b.ReportMetric(float64(r.requests), name+"_requests")
					b.ReportMetric(float64(r.limited), name+"_429s")
					b.ReportMetric(r.rssMB, name+"_enqueue_rss_MB")
					for i, kb := range peaks {
						b.ReportMetric(float64(kb)/1024, fmt.Sprintf("%s_rss%d_MB", name, i))
						j := jobs[fleet.ids[i]]
						b.ReportMetric(float64(j.fetch), fmt.Sprintf("%s_fetch%d", name, i))
						b.ReportMetric(float64(j.apply), fmt.Sprintf("%s_apply%d", name, i))
					}
					b.ReportMetric(float64(slices.Max(peaks))/1024, name+"_rss_max_MB")
					for _, kind := range []string{"fetch", "apply", "drain"} {
						b.ReportMetric(st[kind].span.Seconds(), name+"_"+kind+"_stage_s")
						b.ReportMetric(st[kind].mean.Seconds(), name+"_"+kind+"_job_s")
					}
					b.Logf("%d workers: %s (%.2f× one process), worker peaks %v kB, jobs %v, %d requests, %d 429s", n,
						r.wall.Round(time.Millisecond), one.wall.Seconds()/r.wall.Seconds(), peaks, jobs, r.requests, r.limited)
				}
				b.ReportMetric(float64(len(p.Accounts)), "accounts")
				b.ReportMetric(float64(len(p.Obligations)), "obligations")
				b.ReportMetric(float64(objects), "objects")
				b.StartTimer()
			}
		})
	}
}

// platformDatabase is a fresh database holding the reconcile schema
// (River's tables included) and the platform's obligations, each naming
// its account in the column stripe_account (COPY).
func platformDatabase(b *testing.B, p Platform) (*pgxpool.Pool, string) {
	b.Helper()
	return obligationsDatabase(b, p.Obligations, true)
}

// servePlatform puts p on a Stripe test server started for the benchmark
// and returns it with its base URL; it stops when the benchmark ends.
func servePlatform(b *testing.B, p Platform) (*stripesim.Server, string) {
	b.Helper()
	srv := stripesim.New(stripeKey)
	if err := p.Serve(srv); err != nil {
		b.Fatal(err)
	}
	url, stop, err := srv.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return srv, url
}

func workersEnv(dbURL, stripeURL string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + dbURL, "STRIPE_API_KEY=" + stripeKey, "STRIPE_API_BASE=" + stripeURL}
	for _, k := range []string{"GODEBUG", "GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// pass is what one `reconcile run` (or run --enqueue) cost.
type pass struct {
	wall              time.Duration
	rssMB             float64 // the run process's own peak
	requests, limited int     // answered by the server, and 429s among them
	phases            map[string]float64
}

func (p *pass) served(srv *stripesim.Server) {
	st := srv.Stats()
	p.requests, p.limited = st.Requests, st.RateLimited
}

// runPass runs `reconcile run --since since` (or run --enqueue) once and
// waits for it.
func runPass(b *testing.B, bin string, env []string, cfg, since string, enqueue bool) pass {
	b.Helper()
	args := []string{"run", "--config", cfg, "--since", since, "--format", "json"}
	if enqueue {
		args = append(args, "--enqueue")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	wall, peak, err := runMeasured(cmd)
	if err != nil {
		b.Fatalf("reconcile %v: %v\n%s", args, err, tail(stderr.String(), 3000))
	}
	if dir := os.Getenv("RECONCILE_BENCH_LOGS"); dir != "" {
		name := filepath.Join(dir, fmt.Sprintf("workers-pass-%s.log", time.Now().Format("150405.000")))
		_ = os.WriteFile(name, stderr.Bytes(), 0o600)
	}
	return pass{wall: wall, rssMB: float64(peak) / 1024, phases: phasesOf(stderr.String())}
}

// fleet is n `reconcile worker` processes.
type fleet struct {
	b     *testing.B
	procs []*exec.Cmd
	ids   []string // River client ids: host-pid
	logs  []*syncBuffer
}

// startWorkers starts n workers and waits until each has started its
// River client.
func startWorkers(b *testing.B, bin string, env []string, cfg string, n int) *fleet {
	b.Helper()
	host, _ := os.Hostname()
	f := &fleet{b: b}
	for range n {
		cmd := exec.Command(bin, "worker", "--config", cfg)
		cmd.Env = env
		log := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		f.procs = append(f.procs, cmd)
		f.ids = append(f.ids, fmt.Sprintf("%s-%d", host, cmd.Process.Pid))
		f.logs = append(f.logs, log)
	}
	deadline := time.Now().Add(time.Minute)
	for i, log := range f.logs {
		for !strings.Contains(log.String(), "worker started") {
			if time.Now().After(deadline) {
				f.stop()
				b.Fatalf("worker %d did not start within a minute:\n%s", i, tail(log.String(), 3000))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return f
}

// peaks are the workers' VmHWM (KiB): the high-water mark of each
// process's resident set since it started, which never decreases, read
// once the pass is over.
func (f *fleet) peaks() []int64 {
	out := make([]int64, len(f.procs))
	for i, cmd := range f.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if err != nil {
			f.b.Fatalf("worker %d: %v", i, err)
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				out[i], _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			}
		}
	}
	return out
}

// stop stops the workers with SIGTERM, as a Deployment does, and waits.
func (f *fleet) stop() {
	for _, cmd := range f.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, cmd := range f.procs {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				f.b.Logf("worker %d: %v\n%s", i, err, tail(f.logs[i].String(), 2000))
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
		if dir := os.Getenv("RECONCILE_BENCH_LOGS"); dir != "" {
			name := filepath.Join(dir, fmt.Sprintf("worker-%s-%d.log", time.Now().Format("150405.000"), i))
			_ = os.WriteFile(name, []byte(f.logs[i].String()), 0o600)
		}
	}
	f.procs = nil
}

// jobCounts are the jobs one worker completed.
type jobCounts struct{ fetch, apply int }

// jobsBy counts the completed fetch and apply jobs by the River client
// that completed them.
func jobsBy(b *testing.B, pool *pgxpool.Pool) map[string]jobCounts {
	b.Helper()
	rows, err := pool.Query(context.Background(), `SELECT attempted_by[array_length(attempted_by, 1)], kind, count(*)
		FROM reconcile.river_job WHERE state = 'completed' GROUP BY 1, 2`)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]jobCounts{}
	var (
		client, kind string
		n            int
	)
	if _, err := pgx.ForEachRow(rows, []any{&client, &kind, &n}, func() error {
		c := out[client]
		switch kind {
		case "reconcile_fetch":
			c.fetch += n
		case "reconcile_apply":
			c.apply += n
		}
		out[client] = c
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return out
}

// stage is when a pass's jobs of one kind ran: from the first's start to
// the last's end, and one job's mean time.
type stage struct{ span, mean time.Duration }

// stagesOf are the completed jobs' stages by kind (fetch, apply, drain).
func stagesOf(b *testing.B, pool *pgxpool.Pool) map[string]stage {
	b.Helper()
	rows, err := pool.Query(context.Background(), `SELECT replace(kind, 'reconcile_', ''),
		extract(epoch FROM max(finalized_at) - min(attempted_at))::float8,
		extract(epoch FROM avg(finalized_at - attempted_at))::float8
		FROM reconcile.river_job WHERE state = 'completed' GROUP BY 1`)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]stage{}
	var (
		kind       string
		span, mean float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&kind, &span, &mean}, func() error {
		out[kind] = stage{time.Duration(span * float64(time.Second)), time.Duration(mean * float64(time.Second))}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the
// benchmark's reads at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
