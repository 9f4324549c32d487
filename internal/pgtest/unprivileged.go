//go:build unix

package pgtest

import (
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// RequireEmbeddedEnv, when set (CI sets it), makes a test that runs an
// embedded PostgreSQL as an unprivileged user fail where it would skip
// (not root, no PostgreSQL installation).
const RequireEmbeddedEnv = "RECONCILE_REQUIRE_EMBEDDED_PG"

// SkipOrFail skips tb saying why, or fails it when RequireEmbeddedEnv is
// set.
func SkipOrFail(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv(RequireEmbeddedEnv) != "" {
		tb.Fatalf("%s (%s is set: this test must run)", why, RequireEmbeddedEnv)
	}
	tb.Skip(why)
}

// User is the unprivileged account nobody, and a directory of its own
// for a test: Dir (readable by it, removed at cleanup) holding its Home
// and Tmp, which it owns.
type User struct {
	UID, GID       uint32
	Dir, Home, Tmp string
}

// Unprivileged returns nobody's User; the test must run as root to
// become it (SkipOrFail otherwise).
func Unprivileged(tb testing.TB) *User {
	tb.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(tb, "not root: cannot run as nobody")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		SkipOrFail(tb, "no user nobody: "+err.Error())
	}
	uid, _ := strconv.ParseUint(nobody.Uid, 10, 32)
	gid, _ := strconv.ParseUint(nobody.Gid, 10, 32)
	// Not t.TempDir: it is private to root.
	dir, err := os.MkdirTemp("", "reconcile-nobody-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	u := &User{UID: uint32(uid), GID: uint32(gid), Dir: dir, Home: filepath.Join(dir, "home"), Tmp: filepath.Join(dir, "tmp")}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, d := range []string{u.Home, u.Tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chown(d, int(u.UID), int(u.GID)); err != nil {
			tb.Fatal(err)
		}
	}
	return u
}

// Attr runs a command as u, with no supplementary groups.
func (u *User) Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}}
}

// Copy copies the executable at path into u.Dir, where u may run it, and
// returns the copy's path.
func (u *User) Copy(tb testing.TB, path string) string {
	tb.Helper()
	in, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(u.Dir, filepath.Base(path))
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
	return dst
}
