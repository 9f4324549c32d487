package web

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// BasicChallenge is the WWW-Authenticate header of a request auth basic
// refuses.
const BasicChallenge = `Basic realm="reconcile", charset="UTF-8"`

// The cache of verified credentials (docs/design.md, "The findings page"):
// a page and its stylesheet cost one bcrypt comparison, not one each, for
// basicCacheTTL; at most basicCacheSize pairs are remembered.
const (
	basicCacheTTL  = time.Minute
	basicCacheSize = 1024
)

// basicAuth checks Basic credentials against the bcrypt hashes of a users
// file, as Prometheus's web configuration does. Hashes stay here: no error,
// log line or page ever shows one.
type basicAuth struct {
	hashes map[string][]byte
	// dummy is compared against for a user the file does not name, so
	// that an unknown user costs what a known one does and the time taken
	// does not tell who exists.
	dummy []byte
	now   func() time.Time

	mu sync.Mutex
	// ok maps sha256(user, password) of credentials bcrypt accepted to
	// when that stops being believed.
	ok map[[sha256.Size]byte]time.Time
}

// usersFile is a users file: `basic_auth_users: {alice: $2y$10$...}`.
type usersFile struct {
	Users map[string]string `yaml:"basic_auth_users"`
}

// bcryptHash is the form of a bcrypt hash: $2a$, $2b$ or $2y$, a two-digit
// cost, and 53 characters of bcrypt's base64 (salt and digest).
var bcryptHash = regexp.MustCompile(`^\$2[aby]?\$[0-9]{2}\$[./A-Za-z0-9]{53}$`)

var yamlLine = regexp.MustCompile(`line [0-9]+`)

// loadBasicAuth reads the users file at path. It refuses a file it cannot
// read, one that is not a mapping of users to hashes, a malformed hash
// (naming the user, never the hash) and a file without users.
func loadBasicAuth(path string, now func() time.Time) (*basicAuth, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("web: auth basic needs serve.users_file")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("web: users file: %w", err)
	}
	var f usersFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file
		// yaml's message may quote a value, which may be a hash: only
		// where it is said.
		where := ""
		if l := yamlLine.FindString(err.Error()); l != "" {
			where = " (" + l + ")"
		}
		return nil, fmt.Errorf("web: users file %s: want basic_auth_users: a mapping of user names to bcrypt hashes%s", path, where)
	}
	if len(f.Users) == 0 {
		return nil, fmt.Errorf("web: users file %s: names no user under basic_auth_users", path)
	}
	ba := &basicAuth{hashes: map[string][]byte{}, now: now, ok: map[[sha256.Size]byte]time.Time{}}
	maxCost := bcrypt.MinCost
	for name, h := range f.Users {
		if strings.TrimSpace(name) != name || name == "" || strings.ContainsAny(name, ":\r\n") {
			return nil, fmt.Errorf("web: users file %s: user %q: a user name is non-empty, without a colon or surrounding blanks", path, name)
		}
		cost, err := bcrypt.Cost([]byte(h))
		if err != nil || !bcryptHash.MatchString(h) {
			return nil, fmt.Errorf("web: users file %s: user %q: the hash is not a bcrypt hash (make one with htpasswd -nbBC 10)", path, name)
		}
		maxCost = max(maxCost, cost)
		ba.hashes[name] = []byte(h)
	}
	// The dummy costs what the dearest real hash does.
	if ba.dummy, err = bcrypt.GenerateFromPassword([]byte("no such user"), maxCost); err != nil {
		return nil, fmt.Errorf("web: users file %s: %w", path, err)
	}
	return ba, nil
}

// check returns the user whose Basic credentials r carries, or 401.
func (ba *basicAuth) check(r *http.Request) (user, int, string) {
	name, pw, ok := r.BasicAuth()
	if !ok {
		return user{}, http.StatusUnauthorized, "sign in with your reconcile user name and password"
	}
	key := credentialKey(name, pw)
	now := ba.now()
	if ba.cached(key, now) {
		return user{name: name}, 0, ""
	}
	hash, known := ba.hashes[name]
	if !known {
		hash = ba.dummy
	}
	if err := bcrypt.CompareHashAndPassword(hash, []byte(pw)); err != nil || !known {
		return user{}, http.StatusUnauthorized, "wrong user name or password"
	}
	ba.remember(key, now)
	return user{name: name}, 0, ""
}

// credentialKey is what the cache keeps of a user and password: their
// digest, never the password.
func credentialKey(name, pw string) [sha256.Size]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s:%s", len(name), name, pw)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func (ba *basicAuth) cached(key [sha256.Size]byte, now time.Time) bool {
	ba.mu.Lock()
	defer ba.mu.Unlock()
	until, ok := ba.ok[key]
	if ok && !now.Before(until) {
		delete(ba.ok, key)
	}
	return ok && now.Before(until)
}

func (ba *basicAuth) remember(key [sha256.Size]byte, now time.Time) {
	ba.mu.Lock()
	defer ba.mu.Unlock()
	if len(ba.ok) >= basicCacheSize {
		for k, until := range ba.ok {
			if !now.Before(until) {
				delete(ba.ok, k)
			}
		}
	}
	if len(ba.ok) >= basicCacheSize {
		clear(ba.ok)
	}
	ba.ok[key] = now.Add(basicCacheTTL)
}
