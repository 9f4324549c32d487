// Package embeddedpg starts a throwaway PostgreSQL server of the calling
// user's own, for `reconcile demo` and the test helpers (internal/pgtest)
// on a machine where no server answers: github.com/fergusstrange/
// embedded-postgres runs initdb and pg_ctl on a free loopback port with
// the data in a temporary directory (docs/design.md, "Where the demo and
// the tests find PostgreSQL").
//
// The server outlives its parent by nature: pg_ctl detaches the
// postmaster into a session of its own. So Start also starts a watchdog,
// a shell that waits for end of file on a pipe whose only writer is this
// process; when the process ends, however it ends (even by SIGKILL), the
// pipe closes and the watchdog stops the server and removes the
// directory. Stop does the same at once and waits for it.
package embeddedpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

// Environment variables this package reads (through the getenv it is
// given).
const (
	// BinariesEnv names a PostgreSQL installation to run: the directory
	// holding bin/pg_ctl (Debian: /usr/lib/postgresql/15), or its bin/.
	// Unset, the library's cached download is used, fetched once when
	// missing.
	BinariesEnv = "RECONCILE_PG_BINARIES"
	// LocalAddrEnv is where the local server is looked for (host:port),
	// 127.0.0.1:5432 when unset.
	LocalAddrEnv = "RECONCILE_LOCAL_PG_ADDR"
)

// DefaultLocalAddr is where the local server is looked for by default.
const DefaultLocalAddr = "127.0.0.1:5432"

// Version is the PostgreSQL release downloaded when no BinariesEnv is
// given: the major version CI tests against (Debian 12's).
const Version = embeddedpostgres.V15

// The account initdb makes (the library's defaults, spelled out because
// URLs are built from them).
const (
	user     = "postgres"
	password = "postgres"
)

// LocalAddr is where the local server is looked for: LocalAddrEnv, else
// DefaultLocalAddr.
func LocalAddr(getenv func(string) string) string {
	if a := strings.TrimSpace(getenv(LocalAddrEnv)); a != "" {
		return a
	}
	return DefaultLocalAddr
}

// LocalURL is u (a postgres:// URL naming 127.0.0.1:5432) with its host
// and port replaced by LocalAddr's.
func LocalURL(u string, getenv func(string) string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Host = LocalAddr(getenv)
	return p.String()
}

// Answers reports whether something accepts TCP connections at addr
// within a second: a server that answers is used (and its errors
// reported); only when none does is an embedded one started.
func Answers(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Server is a running embedded PostgreSQL.
type Server struct {
	// URL is the admin connection (the postgres database, as the
	// superuser initdb made), on 127.0.0.1.
	URL string
	// Binaries is the installation it runs ("" for the library's
	// download).
	Binaries string
	// Dir is the temporary directory holding its data, removed at Stop
	// or when this process ends.
	Dir string

	pg      *embeddedpostgres.EmbeddedPostgres
	release *os.File // the watchdog's pipe; closing it stops the server
	wd      *exec.Cmd
	log     string // the library's log file, which it leaves behind
}

// String says what the server is, for a person.
func (s *Server) String() string {
	from := "downloaded binaries of PostgreSQL " + string(Version)
	if s.Binaries != "" {
		from = s.Binaries
	}
	u, _ := url.Parse(s.URL)
	return fmt.Sprintf("an embedded PostgreSQL (%s) on %s, data in %s, removed at exit", from, u.Host, s.Dir)
}

// Start starts a server, reading BinariesEnv through getenv. It fails at
// once, in one line, for root (initdb refuses to run as root), for a
// BinariesEnv without bin/pg_ctl, and for a missing download that cannot
// be fetched.
func Start(ctx context.Context, getenv func(string) string) (*Server, error) {
	if os.Geteuid() == 0 {
		return nil, errors.New("embedded PostgreSQL: initdb refuses to run as root; run as an unprivileged user, or point DATABASE_URL/TEST_DATABASE_URL at a server")
	}
	bin, err := Binaries(getenv)
	if err != nil {
		return nil, err
	}
	if bin == "" {
		if err := canDownload(ctx); err != nil {
			return nil, err
		}
	}
	for try := 1; ; try++ {
		s, err := start(bin)
		// A free port may be taken by another process before the server
		// binds it; any other failure would only repeat.
		if err == nil || try == 3 || ctx.Err() != nil || !portTaken(err) {
			return s, err
		}
	}
}

// portTaken tells the library's and the postmaster's complaints about a
// port in use.
func portTaken(err error) bool {
	m := err.Error()
	return strings.Contains(m, "already listening on port") || strings.Contains(m, "Address already in use")
}

func start(bin string) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	dir, err := os.MkdirTemp("", "reconcile-pg-")
	if err != nil {
		return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
	}
	s := &Server{Binaries: bin, Dir: dir,
		URL: fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", user, password, port)}
	runtimeDir := filepath.Join(dir, "run")
	cfg := embeddedpostgres.DefaultConfig().
		Version(Version).
		Port(uint32(port)).
		Username(user).Password(password).Database("postgres").
		RuntimePath(runtimeDir).
		DataPath(filepath.Join(dir, "data")).
		Locale("C").Encoding("UTF8").
		StartTimeout(60 * time.Second).
		Logger(nil). // its log is the error's text when it fails
		StartParameters(map[string]string{
			"listen_addresses": "127.0.0.1",
			// Not /var/run/postgresql, which only the postgres account may write.
			"unix_socket_directories": dir,
			// Throwaway data: durability only costs time.
			"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
			"max_connections": "200",
		})
	if bin != "" {
		cfg = cfg.BinariesPath(bin)
	}
	pgCtl := filepath.Join(bin, "bin", "pg_ctl")
	if bin == "" {
		pgCtl = filepath.Join(runtimeDir, "bin", "pg_ctl") // the library extracts its download there
	}
	if err := s.watch(pgCtl); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.pg = embeddedpostgres.NewDatabase(cfg)
	if err := s.pg.Start(); err != nil {
		s.pg = nil
		s.Stop()
		return nil, fmt.Errorf("embedded PostgreSQL: %s", oneLine(err.Error()))
	}
	s.log = postmasterLog(filepath.Join(dir, "data"))
	return s, nil
}

// postmasterLog is the file the postmaster of data directory data writes
// its standard error to, the library's log file (in TMPDIR, which it
// never removes), read through /proc; "" where it cannot be told.
func postmasterLog(data string) string {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return ""
	}
	pid, _, _ := strings.Cut(string(b), "\n")
	log, err := os.Readlink("/proc/" + strings.TrimSpace(pid) + "/fd/2")
	if err != nil || !strings.Contains(filepath.Base(log), "embedded_postgres_log") {
		return ""
	}
	return log
}

// watchdog waits for end of file on its standard input (a pipe only this
// process writes), then stops the server of data directory $2 with pg_ctl
// $1, and removes the library's log file (the postmaster's standard error,
// found through /proc where there is one) and the directory $3.
const watchdog = `read _
log=$(readlink "/proc/$(head -n 1 "$2/postmaster.pid" 2>/dev/null)/fd/2" 2>/dev/null)
"$1" stop -D "$2" -m immediate -w >/dev/null 2>&1
case "$log" in */embedded_postgres_log*) rm -f "$log" ;; esac
rm -rf "$3"`

// watch starts the watchdog of s.
func (s *Server) watch(pgCtl string) error {
	r, w, err := os.Pipe() // close-on-exec: no other child holds the write end
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: watchdog: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdog, "watchdog", pgCtl, filepath.Join(s.Dir, "data"), s.Dir)
	cmd.Stdin = r
	cmd.SysProcAttr = ownProcessGroup()
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("embedded PostgreSQL: watchdog: %w", err)
	}
	s.release, s.wd = w, cmd
	return nil
}

// Stop stops the server and removes its directory, and returns when both
// are done. It may be called more than once.
func (s *Server) Stop() {
	if s.pg != nil {
		s.pg.Stop() // gracefully; the watchdog makes sure
		s.pg = nil
	}
	if s.release != nil {
		s.release.Close()
		s.wd.Wait()
		s.release = nil
	}
	os.RemoveAll(s.Dir)
	if s.log != "" {
		os.Remove(s.log)
	}
}

// Binaries is the installation BinariesEnv names, the directory holding
// bin/pg_ctl, or "" when it is unset; an error when it holds none.
func Binaries(getenv func(string) string) (string, error) {
	dir := strings.TrimSpace(getenv(BinariesEnv))
	if dir == "" {
		return "", nil
	}
	for _, d := range []string{dir, filepath.Dir(filepath.Clean(dir))} { // the installation, or its bin/
		if isInstallation(d) {
			abs, err := filepath.Abs(d)
			if err != nil {
				return "", fmt.Errorf("%s=%s: %w", BinariesEnv, dir, err)
			}
			return abs, nil
		}
	}
	hint := ""
	if found := Installed(func(string) string { return "" }); found != "" {
		hint = " (this machine has one at " + found + ")"
	}
	return "", fmt.Errorf("%s=%s: no bin/pg_ctl, bin/initdb and bin/postgres there; name the directory that holds PostgreSQL's bin/%s",
		BinariesEnv, dir, hint)
}

func isInstallation(dir string) bool {
	for _, p := range []string{"pg_ctl", "initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, "bin", p)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// Installed finds a PostgreSQL installation on this machine, for
// BinariesEnv: the one BinariesEnv names, else that of pg_config on PATH,
// else the newest of Debian's /usr/lib/postgresql/N; "" when there is
// none.
func Installed(getenv func(string) string) string {
	if d, err := Binaries(getenv); err == nil && d != "" {
		return d
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := filepath.Dir(strings.TrimSpace(string(out))); isInstallation(d) {
			return d
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*")
	sort.Slice(dirs, func(i, j int) bool { // 9.6 < 15 < 16
		a, _ := strconv.ParseFloat(filepath.Base(dirs[i]), 64)
		b, _ := strconv.ParseFloat(filepath.Base(dirs[j]), 64)
		return a > b
	})
	for _, d := range dirs {
		if isInstallation(d) {
			return d
		}
	}
	return ""
}

// canDownload fails, naming BinariesEnv, when the library would have to
// download PostgreSQL and cannot reach where it downloads from; the
// library's own fetch has no time limit.
func canDownload(ctx context.Context) error {
	if cached() {
		return nil
	}
	hint := "set " + BinariesEnv + " to an installed PostgreSQL (the directory holding bin/pg_ctl)"
	if found := Installed(func(string) string { return "" }); found != "" {
		hint = "set " + BinariesEnv + "=" + found + " (an installed PostgreSQL found here)"
	}
	const host = "repo1.maven.org:443" // the library's BinaryRepositoryURL
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("embedded PostgreSQL: no binaries cached and %s cannot be reached to download them (%v): %s",
			host, err, hint)
	}
	c.Close()
	return nil
}

// cached reports whether the library's download cache
// (~/.embedded-postgres-go) holds this Version for this system.
func cached() bool {
	home, err := os.UserHomeDir()
	if err != nil {
		return false
	}
	m, _ := filepath.Glob(filepath.Join(home, ".embedded-postgres-go",
		"embedded-postgres-binaries-"+runtime.GOOS+"-*-"+string(Version)+".txz"))
	return len(m) > 0
}

// FreePort is a loopback port nothing listens on: one the system just
// gave out and this process closed again.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// oneLine keeps the library's error to its first line and the log's
// lines that say what went wrong (initdb's and postgres's own).
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	out := []string{strings.TrimSpace(lines[0])}
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if strings.Contains(l, "FATAL") || strings.Contains(l, "error:") || strings.Contains(l, "ERROR") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}
