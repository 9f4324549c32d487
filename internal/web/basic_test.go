package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"reconcile/internal/web"
)

// hashOf is a bcrypt hash of pw at the cheapest cost, for tests.
func hashOf(t *testing.T, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// usersFile writes a users file holding body and returns its path.
func usersFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func basicHandler(t *testing.T, s web.Store, users string) (http.Handler, error) {
	t.Helper()
	return web.New(web.Options{Store: s, Now: func() time.Time { return now.Add(time.Hour) },
		Auth: web.Auth{Mode: web.AuthBasic, UsersFile: usersFile(t, users)}})
}

// basicDo sends a request from another machine, with Basic credentials
// unless user is empty.
func basicDo(h http.Handler, method, target, user, pw string, form url.Values) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if form != nil {
		r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	r.RemoteAddr = "192.0.2.50:41000"
	if user != "" {
		r.SetBasicAuth(user, pw)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// auth basic lets in the users of the file with their passwords, and
// acknowledges as them; anyone else is asked to sign in.
func TestBasicAuth(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	h, err := basicHandler(t, sd.s, "basic_auth_users:\n  alice: "+hashOf(t, "correct horse")+"\n  bob: "+hashOf(t, "battery")+"\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, user, pw string }{
		{"wrong password", "alice", "battery"},
		{"unknown user", "mallory", "correct horse"},
		{"unknown user with the dummy's password", "mallory", "no such user"},
		{"no credentials", "", ""},
		{"empty password", "alice", ""},
	} {
		for _, target := range []string{"/", "/runs", "/findings.csv", "/static/style.css"} {
			w := basicDo(h, http.MethodGet, target, tt.user, tt.pw, nil)
			if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != `Basic realm="reconcile", charset="UTF-8"` {
				t.Errorf("%s: GET %s = %d, WWW-Authenticate %q; want 401 with the Basic challenge",
					tt.name, target, w.Code, w.Header().Get("WWW-Authenticate"))
			}
			if strings.Contains(w.Body.String(), "$2") {
				t.Errorf("%s: GET %s shows a hash: %s", tt.name, target, w.Body)
			}
		}
	}
	// The right password, twice (the second from the cache).
	for range 2 {
		w := basicDo(h, http.MethodGet, "/", "alice", "correct horse", nil)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "Signed in as alice") {
			t.Fatalf("GET / as alice = %d:\n%s", w.Code, w.Body)
		}
	}
	if w := basicDo(h, http.MethodGet, "/", "bob", "correct horse", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("bob with alice's password = %d, want 401", w.Code)
	}
	if w := basicDo(h, http.MethodGet, "/healthz", "", "", nil); w.Code != http.StatusOK {
		t.Errorf("GET /healthz without credentials = %d, want 200", w.Code)
	}
	form := url.Values{"fingerprint": {sd.dup.Fingerprint}, "reason": {"refund reversed by hand"}}
	if w := basicDo(h, http.MethodPost, "/ack", "mallory", "x", form); w.Code != http.StatusUnauthorized {
		t.Errorf("POST /ack as an unknown user = %d, want 401", w.Code)
	}
	if w := basicDo(h, http.MethodPost, "/ack", "alice", "correct horse", form); w.Code != http.StatusSeeOther {
		t.Fatalf("POST /ack as alice = %d: %s", w.Code, w.Body)
	}
	fs, err := sd.s.Findings(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if want := map[bool]string{true: "alice"}[f.Fingerprint == sd.dup.Fingerprint]; f.AcknowledgedBy != want {
			t.Errorf("finding %s acknowledged by %q, want %q", f.Fingerprint, f.AcknowledgedBy, want)
		}
	}
}

// A users file serve cannot use refuses to start, naming the file and the
// user, never the hash.
func TestBasicAuthUsersFileErrors(t *testing.T) {
	t.Parallel()
	sd := seed(t)
	good := hashOf(t, "pw")
	const secretish = "$2y$10$notAhashButSecretishXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"
	for _, tt := range []struct{ name, body, want string }{
		{"no users", "basic_auth_users: {}\n", "names no user"},
		{"empty file", "", "names no user"},
		{"not yaml", "basic_auth_users: [alice\n", "want basic_auth_users"},
		{"a list", "basic_auth_users: [alice]\n", "want basic_auth_users"},
		{"unknown key", "users:\n  alice: " + good + "\n", "want basic_auth_users"},
		{"malformed hash", "basic_auth_users:\n  alice: " + good + "\n  carol: " + secretish + "\n", `user "carol": the hash is not a bcrypt hash`},
		{"plain password", "basic_auth_users:\n  carol: hunter2\n", `user "carol": the hash is not a bcrypt hash`},
		{"colon in name", "basic_auth_users:\n  \"a:b\": " + good + "\n", `user "a:b"`},
	} {
		_, err := basicHandler(t, sd.s, tt.body)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "users.yaml") {
			t.Errorf("%s: New = %v, want an error naming users.yaml and saying %q", tt.name, err, tt.want)
			continue
		}
		for _, secret := range []string{secretish, good, "hunter2", "notAhash"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error shows a hash or password: %v", tt.name, err)
			}
		}
	}
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	if _, err := web.New(web.Options{Store: sd.s, Auth: web.Auth{Mode: web.AuthBasic, UsersFile: missing}}); err == nil ||
		!strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("New with a missing users file = %v, want an error naming it", err)
	}
	if _, err := web.New(web.Options{Store: sd.s, Auth: web.Auth{Mode: web.AuthBasic}}); err == nil ||
		!strings.Contains(err.Error(), "serve.users_file") {
		t.Errorf("New with no users file = %v, want an error naming serve.users_file", err)
	}
}
