//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"reconcile/internal/embeddedpg"
	"reconcile/internal/pgtest"
)

// A newcomer's machine without a PostgreSQL server: the built command's
// demo, run as nobody with no DATABASE_URL and nothing answering where the
// local server is looked for, starts an embedded PostgreSQL on the
// machine's own installation (RECONCILE_PG_BINARIES), finds the double
// refund of order 4821, and leaves no server and no files behind. CI runs
// it as root and fails rather than skips (RECONCILE_REQUIRE_EMBEDDED_PG).
func TestDemoOnEmbeddedPostgresAsNobody(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and starts a PostgreSQL server")
	}
	u := pgtest.Unprivileged(t)
	inst := embeddedpg.Installed(os.Getenv)
	if inst == "" {
		pgtest.SkipOrFail(t, "no PostgreSQL installation found (set "+embeddedpg.BinariesEnv+" to the directory holding bin/pg_ctl)")
	}
	bin := filepath.Join(u.Dir, "reconcile")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo")
	cmd.Dir = u.Home
	// Nothing of the caller's: no DATABASE_URL, TEST_DATABASE_URL or config.
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + u.Home,
		"TMPDIR=" + u.Tmp,
		embeddedpg.BinariesEnv + "=" + inst,
		embeddedpg.LocalAddrEnv + "=" + pgtest.ClosedPort(t),
	}
	cmd.SysProcAttr = u.Attr()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("demo as nobody on %s: %s", inst, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("demo as nobody: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	out := stdout.String()
	for _, want := range []string{"the demo runs on an embedded PostgreSQL (" + inst + ")", "refund:4821:approved-request-7", "Paid twice"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}

	// Gone: the server (its port answers no more) and every file in TMPDIR.
	m := regexp.MustCompile(`on (127\.0\.0\.1:\d+), data in`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the demo does not say where its server listened:\n%s", out)
	}
	if embeddedpg.Answers(t.Context(), m[1]) {
		t.Errorf("the embedded server on %s still answers after the demo ended", m[1])
	}
	if left, _ := os.ReadDir(u.Tmp); len(left) > 0 {
		t.Errorf("the demo left in TMPDIR: %v", left)
	}

	// --keep has nothing to keep on a server that stops with the demo: it
	// says so (exit 2) rather than print a DATABASE_URL that will not answer.
	keep := exec.CommandContext(ctx, bin, "demo", "--keep")
	keep.Dir, keep.Env, keep.SysProcAttr = u.Home, cmd.Env, u.Attr()
	got, err := keep.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(got), "there is no database to keep") ||
		strings.Contains(string(got), "export DATABASE_URL") {
		t.Errorf("demo --keep on an embedded server: %v\n%s", err, got)
	}
	if left, _ := os.ReadDir(u.Tmp); len(left) > 0 {
		t.Errorf("demo --keep left in TMPDIR: %v", left)
	}
}
