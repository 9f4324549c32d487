package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// freshKey is a key no template has been built for, and drops its
// template when tb ends, so that tests leave the server's templates as
// they found them.
func freshKey(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	key := "pgtest's own test " + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			tb.Errorf("drop the test's template: %v", err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock($1)`, templateLockKey); err != nil {
			tb.Errorf("drop the test's template: %v", err)
			return
		}
		var exists bool
		if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, templateName(key)).Scan(&exists); err != nil {
			tb.Errorf("drop the test's template: %v", err)
		} else if exists {
			if err := dropTemplate(ctx, admin, templateName(key)); err != nil {
				tb.Errorf("drop the test's template: %v", err)
			}
		}
	})
	return key
}

// oneRow is a setup that creates table t holding one row and counts its
// calls.
func oneRow(calls *atomic.Int32) func(ctx context.Context, url string) error {
	return func(ctx context.Context, url string) error {
		calls.Add(1)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `CREATE TABLE t (x int); INSERT INTO t VALUES (1)`)
		return err
	}
}

func isTemplate(t *testing.T, name string) (exists, template bool) {
	t.Helper()
	admin, err := pgx.Connect(t.Context(), AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(t.Context())
	if err := admin.QueryRow(t.Context(), `SELECT count(*) > 0, coalesce(bool_or(datistemplate), false) FROM pg_database WHERE datname = $1`,
		name).Scan(&exists, &template); err != nil {
		t.Fatal(err)
	}
	return exists, template
}

// Clones asked for at once share one build of the template, and each holds
// what setup made, apart from the others.
func TestTemplateBuiltOnce(t *testing.T) {
	key := freshKey(t)
	var calls atomic.Int32
	t.Run("clones", func(t *testing.T) {
		for i := range 4 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				pool, _ := NewFromTemplate(t, key, oneRow(&calls))
				if _, err := pool.Exec(t.Context(), `INSERT INTO t VALUES (2)`); err != nil {
					t.Fatal(err)
				}
				var n int
				if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM t`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 2 {
					t.Errorf("the clone holds %d rows after one insert, want 2: clones share nothing", n)
				}
			})
		}
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("setup ran %d times for four clones, want once", n)
	}
	if exists, template := isTemplate(t, templateName(key)); !exists || !template {
		t.Errorf("template %s exists %t, marked IS_TEMPLATE %t; want both", templateName(key), exists, template)
	}
	if templateName(key) == templateName(key+" changed") {
		t.Errorf("two keys name one template")
	}
}

// A database of the template's name not marked IS_TEMPLATE is what a
// builder killed half way left: it is built again.
func TestTemplateHalfBuiltIsRebuilt(t *testing.T) {
	key := freshKey(t)
	admin, err := pgx.Connect(t.Context(), AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(t.Context())
	if _, err := admin.Exec(t.Context(), "CREATE DATABASE "+pgx.Identifier{templateName(key)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	pool, _ := NewFromTemplate(t, key, oneRow(&calls))
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 || calls.Load() != 1 {
		t.Errorf("clone of a half-built template: %d rows (%v), setup ran %d times; want 1 row from one build", n, err, calls.Load())
	}
}

// A setup that fails leaves no template behind, and says why.
func TestTemplateSetupFails(t *testing.T) {
	key := freshKey(t)
	admin, err := pgx.Connect(t.Context(), AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(t.Context())
	boom := errors.New("boom")
	err = clone(t.Context(), t, admin, "CREATE DATABASE never_made", templateName(key),
		func(ctx context.Context, url string) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("clone with a failing setup = %v, want its error", err)
	}
	if exists, _ := isTemplate(t, templateName(key)); exists {
		t.Errorf("a failed build left %s behind", templateName(key))
	}
}

// Test processes run at once (go test runs packages so) build a template
// once between them.
func TestTemplateAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	key := freshKey(t)
	log := filepath.Join(t.TempDir(), "setups")
	cmds := make([]*exec.Cmd, 3)
	outs := make([]strings.Builder, len(cmds))
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestTemplateHelperProcess$", "-test.count=1")
		// On this process's server: each would otherwise start an embedded one.
		cmds[i].Env = append(os.Environ(), "PGTEST_HELPER_KEY="+key, "PGTEST_HELPER_LOG="+log, "TEST_DATABASE_URL="+AdminURL())
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil || !strings.Contains(outs[i].String(), "PASS") {
			t.Errorf("helper %d: %v\n%s", i, err, outs[i].String())
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "setup\n"); n != 1 {
		t.Errorf("three processes ran setup %d times, want once", n)
	}
}

// TestTemplateHelperProcess is one process of TestTemplateAcrossProcesses.
func TestTemplateHelperProcess(t *testing.T) {
	key := os.Getenv("PGTEST_HELPER_KEY")
	if key == "" {
		t.Skip("a helper of TestTemplateAcrossProcesses")
	}
	pool, _ := NewFromTemplate(t, key, func(ctx context.Context, url string) error {
		f, err := os.OpenFile(os.Getenv("PGTEST_HELPER_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString("setup\n"); err != nil {
			return err
		}
		var calls atomic.Int32
		return oneRow(&calls)(ctx, url)
	})
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the clone holds %d rows (%v), want the template's 1", n, err)
	}
}
