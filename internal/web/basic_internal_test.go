package web

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func testBasic(t *testing.T, clock *time.Time, cost int) *basicAuth {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), cost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(path, []byte("basic_auth_users:\n  alice: "+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ba, err := loadBasicAuth(path, func() time.Time { return *clock })
	if err != nil {
		t.Fatal(err)
	}
	return ba
}

func basicRequest(user, pw string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pw)
	return r
}

// A verified password is believed for basicCacheTTL without bcrypt (here:
// after its hash changed), and checked again after.
func TestBasicCache(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ba := testBasic(t, &clock, bcrypt.MinCost)
	if u, status, _ := ba.check(basicRequest("alice", "pw")); status != 0 || u.name != "alice" {
		t.Fatalf("alice with her password = %d", status)
	}
	other, _ := bcrypt.GenerateFromPassword([]byte("changed"), bcrypt.MinCost)
	ba.hashes["alice"] = other
	clock = clock.Add(basicCacheTTL - time.Second)
	if _, status, _ := ba.check(basicRequest("alice", "pw")); status != 0 {
		t.Errorf("alice within the cache's life = %d, want the cached verification", status)
	}
	if _, status, _ := ba.check(basicRequest("alice", "pw ")); status != http.StatusUnauthorized {
		t.Errorf("another password = %d, want 401", status)
	}
	clock = clock.Add(time.Second)
	if _, status, _ := ba.check(basicRequest("alice", "pw")); status != http.StatusUnauthorized {
		t.Errorf("alice after the cache's life = %d, want bcrypt's 401 against the new hash", status)
	}
	for i := range 3 * basicCacheSize {
		ba.remember(credentialKey("u", string(rune(i))), clock)
		if len(ba.ok) > basicCacheSize {
			t.Fatalf("the cache holds %d entries, more than %d", len(ba.ok), basicCacheSize)
		}
	}
}

// An unknown user is compared against a dummy hash as dear as the real
// ones, so that the time taken does not say who exists.
func TestBasicDummyCost(t *testing.T) {
	t.Parallel()
	clock := time.Now()
	ba := testBasic(t, &clock, bcrypt.MinCost+2)
	if cost, err := bcrypt.Cost(ba.dummy); err != nil || cost != bcrypt.MinCost+2 {
		t.Errorf("dummy hash cost %d (%v), want %d", cost, err, bcrypt.MinCost+2)
	}
}
