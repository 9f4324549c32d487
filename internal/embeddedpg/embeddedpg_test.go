//go:build unix

package embeddedpg_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile/internal/embeddedpg"
	"reconcile/internal/pgtest"
)

// TestMain doubles as the helper the tests run as an unprivileged user:
// with EMBEDDEDPG_HELPER set it starts a server, prints its URL and
// directory, and holds it until killed or told to stop.
func TestMain(m *testing.M) {
	if mode := os.Getenv("EMBEDDEDPG_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

func helper(mode string) int {
	s, err := embeddedpg.Start(context.Background(), os.Getenv)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("url", s.URL)
	fmt.Println("dir", s.Dir)
	fmt.Println("ready")
	bufio.NewScanner(os.Stdin).Scan() // until told, or killed
	if mode == "stop" {
		s.Stop()
		fmt.Println("stopped")
	}
	return 0
}

func TestRootRefusedInOneLine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the refusal is root's")
	}
	_, err := embeddedpg.Start(t.Context(), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "initdb refuses to run as root") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Start as root = %v, want one line saying initdb refuses root", err)
	}
}

func TestBinariesNamed(t *testing.T) {
	inst := embeddedpg.Installed(os.Getenv)
	if inst == "" {
		t.Skip("no PostgreSQL installation on this machine")
	}
	for _, dir := range []string{inst, filepath.Join(inst, "bin"), inst + "/bin/"} {
		got, err := embeddedpg.Binaries(func(string) string { return dir })
		if err != nil || got != inst {
			t.Errorf("%s=%s: %q, %v; want %s", embeddedpg.BinariesEnv, dir, got, err, inst)
		}
	}
	_, err := embeddedpg.Binaries(func(string) string { return t.TempDir() })
	if err == nil || !strings.Contains(err.Error(), embeddedpg.BinariesEnv) || !strings.Contains(err.Error(), "bin/pg_ctl") {
		t.Errorf("a directory without PostgreSQL: %v, want an error naming %s and bin/pg_ctl", err, embeddedpg.BinariesEnv)
	}
}

func TestLocalAddr(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == embeddedpg.LocalAddrEnv {
				return v
			}
			return ""
		}
	}
	if got := embeddedpg.LocalAddr(env("")); got != embeddedpg.DefaultLocalAddr {
		t.Errorf("default local address %s, want %s", got, embeddedpg.DefaultLocalAddr)
	}
	got := embeddedpg.LocalURL("postgres://root@127.0.0.1:5432/postgres?sslmode=disable", env("127.0.0.1:1"))
	if got != "postgres://root@127.0.0.1:1/postgres?sslmode=disable" {
		t.Errorf("LocalURL = %s", got)
	}
	if embeddedpg.Answers(t.Context(), pgtest.ClosedPort(t)) {
		t.Error("a closed port answers")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !embeddedpg.Answers(t.Context(), ln.Addr().String()) {
		t.Errorf("a listening port %s does not answer", ln.Addr())
	}
}

// A server starts, takes connections as the superuser on loopback, and
// Stop removes it and its directory; a server whose process is killed
// with SIGKILL is stopped and removed by the watchdog.
func TestStartStopAndKilled(t *testing.T) {
	inst := embeddedpg.Installed(os.Getenv)
	if inst == "" {
		pgtest.SkipOrFail(t, "no PostgreSQL installation on this machine (set "+embeddedpg.BinariesEnv+")")
	}
	for _, mode := range []string{"stop", "kill"} {
		t.Run(mode, func(t *testing.T) {
			cmd, tmp := helperCommand(t, mode, inst)
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			lines := bufio.NewScanner(out)
			got := map[string]string{}
			for lines.Scan() && lines.Text() != "ready" {
				k, v, _ := strings.Cut(lines.Text(), " ")
				got[k] = v
				if k == "error:" {
					t.Fatalf("helper: %s", v)
				}
			}
			conn, err := pgx.Connect(t.Context(), got["url"])
			if err != nil {
				t.Fatalf("connect to the embedded server: %v", err)
			}
			var version string
			if err := conn.QueryRow(t.Context(), "SHOW server_version").Scan(&version); err != nil {
				t.Fatal(err)
			}
			conn.Close(t.Context())
			t.Logf("embedded PostgreSQL %s at %s", version, got["dir"])
			start := time.Now()
			if mode == "stop" {
				in.Write([]byte("stop\n"))
				if lines.Scan(); lines.Text() != "stopped" {
					t.Fatalf("helper said %q, want stopped", lines.Text())
				}
				if _, err := os.Stat(got["dir"]); !os.IsNotExist(err) {
					t.Errorf("after Stop, %s: %v, want it removed", got["dir"], err)
				}
			} else {
				cmd.Process.Kill()
			}
			cmd.Wait()
			for {
				_, err := os.Stat(got["dir"])
				c, cerr := pgx.Connect(t.Context(), got["url"])
				if cerr == nil {
					c.Close(t.Context())
				}
				if os.IsNotExist(err) && cerr != nil {
					break
				}
				if time.Since(start) > 30*time.Second {
					t.Fatalf("30 s after the helper's %s, the server answers (%v) or %s is left (%v)", mode, cerr == nil, got["dir"], err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("gone %s after the %s", time.Since(start).Round(time.Millisecond), mode)
			if left, _ := os.ReadDir(tmp); len(left) > 0 {
				t.Errorf("left in TMPDIR after the %s: %v", mode, left)
			}
		})
	}
}

// helperCommand runs this test binary as the helper, with RECONCILE_PG_BINARIES
// set to inst, as nobody when the test runs as root; tmp is its TMPDIR.
func helperCommand(t *testing.T, mode, inst string) (cmd *exec.Cmd, tmp string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"EMBEDDEDPG_HELPER=" + mode, embeddedpg.BinariesEnv + "=" + inst, "PATH=" + os.Getenv("PATH")}
	if os.Geteuid() != 0 {
		tmp = t.TempDir()
		cmd = exec.Command(exe)
		cmd.Env = append(env, "HOME="+t.TempDir(), "TMPDIR="+tmp)
		return cmd, tmp
	}
	u := pgtest.Unprivileged(t)
	cmd = exec.Command(u.Copy(t, exe))
	cmd.Env = append(env, "HOME="+u.Home, "TMPDIR="+u.Tmp)
	cmd.SysProcAttr = u.Attr()
	return cmd, u.Tmp
}
