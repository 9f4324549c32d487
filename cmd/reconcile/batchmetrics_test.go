package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"reconcile/internal/config"
	"reconcile/internal/metrics"
	"reconcile/internal/metrics/metricstest"
	"reconcile/internal/pgtest"
	"reconcile/internal/store"
	"reconcile/internal/stripesim"
)

// startPushgateway starts the real Prometheus Pushgateway on a free
// loopback port, in memory (no --persistence.file), and returns its base
// URL. Without the binary (pushgateway, or Debian's
// prometheus-pushgateway) in PATH the test skips, unless
// RECONCILE_REQUIRE_PUSHGATEWAY=1 (CI, which installs it) makes it fail.
func startPushgateway(t *testing.T) string {
	t.Helper()
	var bin string
	for _, name := range []string{"pushgateway", "prometheus-pushgateway"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		if os.Getenv("RECONCILE_REQUIRE_PUSHGATEWAY") == "1" {
			t.Fatal("RECONCILE_REQUIRE_PUSHGATEWAY=1 and no pushgateway in PATH (.ci/run installs it)")
		}
		t.Skip("no pushgateway in PATH (apt-get install prometheus-pushgateway, as .ci/run does)")
	}
	addr := pgtest.ClosedPort(t)
	cmd := exec.Command(bin, "--web.listen-address="+addr)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	base := "http://" + addr
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pushgateway on %s not ready after 20s: %v\n%s", addr, err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatewayGroup scrapes the gateway as Prometheus would and returns the
// families of the group job="reconcile", instance, grouping labels taken
// off; push_time_seconds is the gateway's own.
func gatewayGroup(t *testing.T, base, instance string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	all, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the gateway's /metrics does not parse: %v", err)
	}
	group := map[string]*dto.MetricFamily{}
	for name, mf := range all {
		var ms []*dto.Metric
		for _, m := range mf.GetMetric() {
			var job, inst string
			var rest []*dto.LabelPair
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "job":
					job = l.GetValue()
				case "instance":
					inst = l.GetValue()
				default:
					rest = append(rest, l)
				}
			}
			if job == metrics.Job && inst == instance {
				m.Label = rest
				ms = append(ms, m)
			}
		}
		if len(ms) > 0 {
			mf.Metric = ms
			group[name] = mf
		}
	}
	return group
}

// lastCompleted is the store's newest completed run's finish, in Unix
// seconds as the metrics give it.
func (e *env) lastCompleted() float64 {
	e.t.Helper()
	var at time.Time
	if err := e.pool.QueryRow(e.t.Context(), "SELECT max(finished_at) FROM reconcile.runs WHERE status = 'completed'").Scan(&at); err != nil {
		e.t.Fatal(err)
	}
	return float64(at.UnixNano()) / 1e9
}

// `reconcile run` with metrics.pushgateway and metrics.textfile set pushes
// its metrics to a real Pushgateway, grouped by job and instance, and
// writes the same figures to the textfile, which Prometheus's text parser
// reads. A pass that failed pushes its status without moving the last
// success; a run whose database is down adds what it knows and keeps the
// rest; a push that fails is one warning and leaves the exit status alone.
func TestRunPushesMetrics(t *testing.T) {
	gw := startPushgateway(t)
	e := newEnv(t)
	seedDoubleRefund(t, e)
	dir := t.TempDir()
	textfile := filepath.Join(dir, "reconcile.prom")
	writeConfig := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := writeConfig("c.yaml", fmt.Sprintf("stripe:\n  max_retries: 3\nmetrics:\n  pushgateway: %s\n  instance: payments-test\n  textfile: %s\n", gw, textfile))

	// Every third request to Stripe is refused with 429: the counts must
	// be every attempt, as the Stripe side counted them.
	e.stripe.SetFaults(stripesim.Faults{RateLimitEvery: 3})
	e.stripe.ResetStats()
	code, _, stderr := e.run("run", "--config", cfg, "--since", "100h")
	if code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	st := e.stripe.Stats()
	if st.RateLimited == 0 {
		t.Fatalf("Stripe refused nothing (%+v); the test proves nothing", st)
	}
	success := e.lastCompleted()
	completed := []metricstest.Want{
		metricstest.W("reconcile_last_run_status", 1, "status", "completed"),
		metricstest.W("reconcile_last_run_status", 0, "status", "failed"),
		metricstest.W("reconcile_last_success_timestamp_seconds", success),
		metricstest.W("reconcile_last_run_stripe_requests", float64(st.Requests)),
		metricstest.W("reconcile_last_run_stripe_retries", float64(st.RateLimited)),
		metricstest.W("reconcile_last_run_stripe_rate_limited", float64(st.RateLimited)),
		// The duplicate refund (USD 89.00 paid out twice), the stale lease
		// of charge:5400 (USD 7.00 unconfirmed) and the charge ch_4821 that
		// no obligation accounts for (USD 178.00 collected).
		metricstest.W("reconcile_open_findings", 1, "kind", "duplicate", "severity", "critical", "acknowledged", "false"),
		metricstest.W("reconcile_open_findings", 1, "kind", "stale_lease", "severity", "warning", "acknowledged", "false"),
		metricstest.W("reconcile_open_findings", 1, "kind", "orphan", "severity", "high", "acknowledged", "false"),
		metricstest.W("reconcile_open_findings", 0, "kind", "amount_mismatch", "severity", "high", "acknowledged", "false"),
		metricstest.W("reconcile_open_money_minor_units", 8900, "currency", "usd", "meaning", "paid_out_too_much"),
		metricstest.W("reconcile_open_money_minor_units", 17800, "currency", "usd", "meaning", "collected_wrong"),
		metricstest.W("reconcile_open_money_minor_units", 700, "currency", "usd", "meaning", "unconfirmed"),
		// Slack took every message.
		metricstest.W("reconcile_outbox_backlog", 0),
		metricstest.W("reconcile_outbox_oldest_age_seconds", 0),
	}
	pushed := gatewayGroup(t, gw, "payments-test")
	metricstest.Check(t, "gateway after a completed run", pushed, completed)
	if d, ok := metricstest.Sample(pushed, "reconcile_last_run_duration_seconds"); !ok || d <= 0 || d > 120 {
		t.Errorf("duration = %v (present %t), want the run's seconds", d, ok)
	}
	if _, ok := metricstest.Sample(pushed, "push_time_seconds"); !ok {
		t.Errorf("the gateway shows no push_time_seconds for the group: %v", pushed)
	}
	file, err := metrics.ParseText(textfile)
	if err != nil {
		t.Fatalf("Prometheus's text parser refuses the textfile: %v", err)
	}
	metricstest.Check(t, "textfile after a completed run", file, completed)
	if fi, err := os.Stat(textfile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("textfile mode %v (%v), want 0644", fi.Mode().Perm(), err)
	}

	// A pass that fails reading Stripe: the status says so, the last
	// success stays, the findings are the store's still; the runner returns
	// no Stripe figures for a failed pass, so they are gone, not stale.
	e.stripe.SetFaults(stripesim.Faults{FailList: stripesim.ListRefunds})
	if code, _, stderr := e.run("run", "--config", cfg, "--since", "100h"); code != 1 {
		t.Fatalf("run against a failing Stripe exited %d, want 1: %s", code, stderr)
	}
	e.stripe.SetFaults(stripesim.Faults{})
	failed := []metricstest.Want{
		metricstest.W("reconcile_last_run_status", 0, "status", "completed"),
		metricstest.W("reconcile_last_run_status", 1, "status", "failed"),
		metricstest.W("reconcile_last_success_timestamp_seconds", success),
		metricstest.W("reconcile_open_findings", 1, "kind", "duplicate", "severity", "critical", "acknowledged", "false"),
		metricstest.W("reconcile_open_money_minor_units", 8900, "currency", "usd", "meaning", "paid_out_too_much"),
	}
	pushed = gatewayGroup(t, gw, "payments-test")
	metricstest.Check(t, "gateway after a failed pass", pushed, failed)
	if file, err = metrics.ParseText(textfile); err != nil {
		t.Fatal(err)
	}
	metricstest.Check(t, "textfile after a failed pass", file, failed)
	for _, fams := range []map[string]*dto.MetricFamily{pushed, file} {
		if _, ok := metricstest.Sample(fams, "reconcile_last_run_stripe_requests"); ok {
			t.Errorf("a failed pass left Stripe requests behind: %v", fams["reconcile_last_run_stripe_requests"])
		}
	}

	// The database down: the run fails before the pass and adds what it
	// knows; the last success and the store's figures stay as they were.
	down := e.vars["DATABASE_URL"]
	closed := pgtest.ClosedPort(t)
	e.vars["DATABASE_URL"] = "postgres://reconcile:dbpw@" + closed + "/payments?sslmode=disable"
	if code, _, stderr := e.run("run", "--config", cfg, "--since", "100h"); code != 1 {
		t.Fatalf("run without a database exited %d, want 1: %s", code, stderr)
	}
	e.vars["DATABASE_URL"] = down
	pushed = gatewayGroup(t, gw, "payments-test")
	metricstest.Check(t, "gateway after a run without its database", pushed, failed)
	if file, err = metrics.ParseText(textfile); err != nil {
		t.Fatal(err)
	}
	metricstest.Check(t, "textfile after a run without its database", file, failed)

	// A dry run writes and posts nothing, metrics included.
	if code, _, stderr := e.run("run", "--config", cfg, "--since", "100h", "--dry-run"); code != 0 {
		t.Fatalf("dry run exited %d: %s", code, stderr)
	}
	metricstest.Check(t, "gateway after a dry run", gatewayGroup(t, gw, "payments-test"), failed)

	// A run that finds another holding the run lock leaves the metrics to
	// the holder.
	lock := e.holdRunLock(t)
	if code, _, stderr := e.run("run", "--config", cfg, "--since", "100h"); code != 1 || strings.Contains(stderr, "metrics pushed") {
		t.Errorf("run with the lock held: exit %d, want 1 and no push:\n%s", code, stderr)
	}
	lock.Release(t.Context())
	metricstest.Check(t, "gateway after a run that found the lock held", gatewayGroup(t, gw, "payments-test"), failed)

	// The instance defaults to the database (host:port/name), the same
	// from run to run, never its user or password.
	def := writeConfig("default-instance.yaml", "metrics:\n  pushgateway: "+gw+"\n")
	if code, _, stderr := e.run("run", "--config", def, "--since", "100h"); code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	inst := pushInstance(configWith(t, e, def))
	if strings.Contains(inst, "@") || !strings.Contains(inst, ":") || !strings.Contains(inst, "/") {
		t.Errorf("default instance %q, want host:port/dbname", inst)
	}
	metricstest.Check(t, "gateway, default instance", gatewayGroup(t, gw, inst), []metricstest.Want{
		metricstest.W("reconcile_last_run_status", 1, "status", "completed"),
		metricstest.W("reconcile_last_success_timestamp_seconds", e.lastCompleted()),
	})

	// A gateway that is down: one warning, the password nowhere, and the
	// exit status the run's own.
	gone := pgtest.ClosedPort(t)
	bad := writeConfig("bad.yaml", "metrics:\n  pushgateway: http://pusher:gwCANARYpw@"+gone+"\n")
	code, _, stderr = e.run("run", "--config", bad, "--since", "100h")
	if code != 0 {
		t.Errorf("run with its gateway down exited %d, want 0: %s", code, stderr)
	}
	if n := strings.Count(stderr, "metrics not pushed"); n != 1 {
		t.Errorf("%d warnings that the metrics were not pushed, want 1:\n%s", n, stderr)
	}
	if strings.Contains(stderr, "gwCANARYpw") {
		t.Errorf("the gateway's password is in the log:\n%s", stderr)
	}
	code, _, _ = e.run("run", "--config", bad, "--since", "100h", "--fail-on", "critical")
	if code != 3 {
		t.Errorf("--fail-on critical with the gateway down exited %d, want 3 as without metrics", code)
	}
}

// holdRunLock takes e's database's run lock as another run would.
func (e *env) holdRunLock(t *testing.T) *store.Lock {
	t.Helper()
	s, err := store.New(e.pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := s.Lock(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	return lock
}

// configWith loads path with e's environment, as the command does.
func configWith(t *testing.T, e *env, path string) config.Config {
	t.Helper()
	c, err := config.Load(path, func(k string) string { return e.vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// `config check` shows where the metrics go without the gateway's
// password, and refuses a textfile in a directory that does not exist.
func TestConfigCheckMetrics(t *testing.T) {
	e := &env{t: t, vars: map[string]string{}}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	body := "metrics:\n  pushgateway: https://pusher:gwCANARYpw@gw.example:9091\n  textfile: " + filepath.Join(dir, "r.prom") + "\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := e.run("config", "check", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "pushgateway: https://pusher:<redacted>@gw.example:9091") {
		t.Errorf("config check exited %d (%s) printing:\n%s\nwant the gateway with its password masked", code, stderr, stdout)
	}
	missing := filepath.Join(dir, "missing.yaml")
	os.WriteFile(missing, []byte("metrics:\n  textfile: "+filepath.Join(dir, "nope", "r.prom")+"\n"), 0o600)
	if code, _, stderr := e.run("config", "check", "--config", missing); code != 2 || !strings.Contains(stderr, "metrics.textfile: directory") {
		t.Errorf("a textfile in no directory: exit %d, %s; want 2 naming metrics.textfile", code, stderr)
	}
}
