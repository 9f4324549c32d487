// Command reconcile-bench prints the reconciler's performance table side
// by side in one run: (a) the matcher at 10k/100k/1M next to a
// bare hash join over the same data, (b) fetching from the Stripe test
// server paced under the test-mode rate limit and unpaced, (c) applying
// 100k transitions batched and row by row and reading a million
// obligations, (d) the nightly passes: `reconcile run` end to end three
// times over a million obligations and provider objects (-e2e), in full,
// incrementally over the unchanged history and incrementally after 1% new
// objects and their obligations, and the same over 100k (-e2e-small),
// each size in a process of its own, whose unchanged pass divides the
// million's (the table shows only that pass of 100k), the same again over
// a million whose findings are ten times sparser (as much of it open as
// of the 100k history), and, when asked
// for (-only e; about 30 minutes on 2 cores), (e) one pass over a platform
// of 24 Stripe accounts in one process and with 1, 2 and 4 `reconcile
// worker` processes, and one pass as jobs over a single account of a
// million obligations with 1, 2 and 4 shards.
//
// It runs the packages' own benchmarks (BenchmarkMatch, BenchmarkFetch,
// BenchmarkApplyTransitions, BenchmarkReadObligations, BenchmarkEndToEnd,
// BenchmarkWorkers, BenchmarkShards),
// each in a process of its own, so that every row's peak RSS is its own:
// it builds the test binaries with `go test -c` and reads the standard
// benchmark output. From the module root:
//
//	go run ./cmd/reconcile-bench            # the whole table (3 to 15 minutes on 2 cores, by load)
//	go run ./cmd/reconcile-bench -only a,c  # some sections
//	go run ./cmd/reconcile-bench -e2e 100k -e2e-small 10k  # smaller end-to-end histories
//	go run ./cmd/reconcile-bench -only e    # workers (24 accounts × 20k) and shards (1M): about 30 minutes
//	go run ./cmd/reconcile-bench -only e -workers 24x5k -shards 100k
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "reconcile-bench:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	sizes    []string // matcher sizes
	reps     int      // processes per matcher row
	e2e      string   // end-to-end size
	e2eSmall string   // the smaller end-to-end size, the divisor of the nightly pass's cost ratio
	workers  string   // workers platform size
	shards   string   // the single account BenchmarkShards passes over
	sections map[string]bool
	keep     bool
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reconcile-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "10k,100k,1M", "matcher sizes: obligations (and about as many provider objects)")
	reps := fs.Int("reps", 3, "processes per matcher row; the median is shown")
	e2e := fs.String("e2e", "1M", "end-to-end size: 10k, 100k or 1M")
	e2eSmall := fs.String("e2e-small", "100k", "the smaller end-to-end size, whose unchanged nightly pass divides -e2e's and that of -e2e's history with its findings ten times sparser: 10k, 100k or 1M; empty: neither run")
	workers := fs.String("workers", "24x20k", "workers platform: accounts x obligations each, 24x20k, 24x5k or 24x1k")
	shards := fs.String("shards", "1M", "the single account the shards rows of (e) pass over: 1M, 100k or 10k obligations")
	only := fs.String("only", "a,b,c,d", "sections to run: a (matcher), b (fetch), c (apply and read), d (end to end), e (workers and shards; not by default: about 30 minutes)")
	keep := fs.Bool("keep", false, "keep the built test binaries and the raw benchmark output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := options{sizes: strings.Split(*sizes, ","), reps: max(1, *reps), e2e: *e2e, e2eSmall: *e2eSmall, workers: *workers, shards: *shards, sections: map[string]bool{}, keep: *keep}
	for _, s := range strings.Split(*only, ",") {
		o.sections[strings.TrimSpace(s)] = true
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "reconcile-bench-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	b := &bench{ctx: ctx, root: root, dir: dir, log: stderr, getenv: getenv}
	t := &table{started: time.Now(), loadBefore: loadavg(), cpu: cpuModel(), goVersion: runtime.Version(),
		postgres: postgresLine(ctx, getenv)}
	for _, step := range []struct {
		section string
		run     func(*bench, *table, options) error
	}{{"a", matcherRows}, {"b", fetchRows}, {"c", applyRows}, {"d", e2eRows}, {"e", workersRows}} {
		if !o.sections[step.section] {
			continue
		}
		if err := step.run(b, t, o); err != nil {
			return fmt.Errorf("section %s: %w", step.section, err)
		}
	}
	t.loadAfter = loadavg()
	t.finished = time.Now()
	t.write(stdout, o)
	if o.keep {
		fmt.Fprintf(stderr, "binaries and raw output kept in %s\n", dir)
	}
	return nil
}

// moduleRoot is the directory of the reconcile module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run reconcile-bench inside the reconcile module")
	}
	return filepath.Dir(gomod), nil
}

// bench builds and runs test binaries.
type bench struct {
	ctx    context.Context
	root   string
	dir    string
	log    io.Writer
	getenv func(string) string
	built  map[string]string
}

// binary builds the test binary of a package once.
func (b *bench) binary(pkg string) (string, error) {
	if bin, ok := b.built[pkg]; ok {
		return bin, nil
	}
	bin := filepath.Join(b.dir, strings.ReplaceAll(pkg, "/", "_")+".test")
	fmt.Fprintf(b.log, "building %s\n", pkg)
	cmd := exec.CommandContext(b.ctx, "go", "test", "-c", "-o", bin, "./"+pkg)
	cmd.Dir = b.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c ./%s: %w\n%s", pkg, err, out)
	}
	if b.built == nil {
		b.built = map[string]string{}
	}
	b.built[pkg] = bin
	return bin, nil
}

// result is one benchmark line: its metrics by unit, and the process it
// ran in.
type result struct {
	name    string
	n       int
	metrics map[string]float64
	rssMB   float64 // the whole process's peak
	wall    time.Duration
}

// run runs the benchmarks of pkg matching pattern in a process of their
// own (in the package's directory, as go test does) and parses their
// lines.
func (b *bench) run(pkg, pattern, benchtime string) ([]result, error) {
	bin, err := b.binary(pkg)
	if err != nil {
		return nil, err
	}
	args := []string{"-test.run", "^$", "-test.bench", pattern, "-test.benchtime", benchtime, "-test.benchmem", "-test.timeout", "0"}
	fmt.Fprintf(b.log, "%s %s %s\n", time.Now().Format("15:04:05"), pkg, strings.Join(args, " "))
	cmd := exec.CommandContext(b.ctx, bin, args...)
	cmd.Dir = filepath.Join(b.root, pkg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	raw := filepath.Join(b.dir, strings.ReplaceAll(pkg, "/", "_")+".out")
	if f, ferr := os.OpenFile(raw, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); ferr == nil {
		fmt.Fprintf(f, "$ %s %s\n%s\n", bin, strings.Join(args, " "), out.Bytes())
		f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("%s -test.bench %s: %w\n%s", pkg, pattern, err, lastLines(out.String(), 30))
	}
	var rss float64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = float64(ru.Maxrss) / 1024 // kilobytes on Linux
	}
	res := parse(out.String())
	if len(res) == 0 {
		return nil, fmt.Errorf("%s -test.bench %s: no benchmark ran\n%s", pkg, pattern, lastLines(out.String(), 30))
	}
	for i := range res {
		res[i].rssMB, res[i].wall = rss, wall
	}
	return res, nil
}

// parse reads Go benchmark lines: name, iterations, then value–unit pairs.
func parse(out string) []result {
	var res []result
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		r := result{name: trimProcs(f[0]), n: n, metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			r.metrics[f[i+1]] = v
		}
		res = append(res, r)
	}
	return res
}

// trimProcs drops the -GOMAXPROCS suffix of a benchmark name.
func trimProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// median is the result of median wall ns/object among reps.
func median(rs []result, metric string) result {
	slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.metrics[metric], b.metrics[metric]) })
	return rs[len(rs)/2]
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
