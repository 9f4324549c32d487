package demo

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"reconcile/internal/config"
	"reconcile/internal/pgtest"
	"reconcile/internal/store"
)

// Start leaves a database holding the reconciler's schema and every
// obligation of the sample, and a Stripe-compatible server holding its
// objects for Key; Close stops the server and drops the database.
func TestStartAndClose(t *testing.T) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	data := Sample(now)
	env, err := Start(ctx, pgtest.AdminURL(), data)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			env.Close()
		}
	}()

	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatalf("connect to the demo database: %v", err)
	}
	var name string
	var obligations int
	if err := conn.QueryRow(ctx, "SELECT current_database(), (SELECT count(*) FROM obligations)").Scan(&name, &obligations); err != nil {
		t.Fatal(err)
	}
	if obligations != len(data.Obligations) {
		t.Errorf("demo database holds %d obligations, want the sample's %d", obligations, len(data.Obligations))
	}
	var lease *time.Time
	if err := conn.QueryRow(ctx, "SELECT lease_expires_at FROM obligations WHERE id = 'charge:5400'").Scan(&lease); err != nil ||
		lease == nil || !lease.Equal(now.Add(-3*time.Hour)) {
		t.Errorf("charge:5400's lease = %v (%v), want it expired three hours ago", lease, err)
	}
	conn.Close(ctx)
	pool, err := pgxpool.New(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(pool, store.OptionsFrom(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CheckSchema(ctx); err != nil {
		t.Errorf("demo database's reconcile schema: %v", err)
	}
	pool.Close()

	// Every account's charges, the platform's own and each shop's, behind
	// its Stripe-Account header.
	charges := map[string]int{}
	for _, o := range data.Objects {
		if strings.HasPrefix(o.ID, "ch_") {
			charges[o.Account]++
		}
	}
	for _, acct := range []string{"", Bakery.ID, Bikes.ID, Books.ID} {
		if charges[acct] == 0 {
			t.Errorf("the sample has no charge on account %q", acct)
		}
		if got := listCharges(t, env.StripeURL, acct); got != charges[acct] {
			t.Errorf("demo Stripe lists %d charges of account %q, want the sample's %d", got, acct, charges[acct])
		}
	}

	env.Close()
	closed = true
	admin, err := pgx.Connect(ctx, pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil || exists {
		t.Errorf("database %s exists after Close: %t (%v), want it dropped", name, exists, err)
	}
	if _, err := http.Get(env.StripeURL + "/v1/charges"); err == nil {
		t.Errorf("demo Stripe still answers after Close")
	}
}

// A demo with no PostgreSQL to create its database on says so in one line
// that names the server and not its password, and leaves nothing behind.
func TestStartWithoutPostgreSQL(t *testing.T) {
	_, err := Start(t.Context(), "postgres://demo:SECRETpw@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", Sample(time.Now()))
	if err == nil {
		t.Fatal("Start with no PostgreSQL succeeded")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "demo: no PostgreSQL to create a throwaway database on (") ||
		!strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "SECRETpw") {
		t.Errorf("Start error = %q, want one naming the server, without the password", msg)
	}
	if _, err := Start(t.Context(), "not a url", Sample(time.Now())); err == nil || !strings.Contains(err.Error(), "postgres:// URL") {
		t.Errorf("Start(not a url) = %v, want it to ask for a postgres:// URL", err)
	}
}

func listCharges(t *testing.T, baseURL, account string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, baseURL+"/v1/charges?limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+Key)
	if account != "" {
		req.Header.Set("Stripe-Account", account)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("list demo charges: %v", err)
	}
	defer resp.Body.Close()
	var page struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK || page.HasMore {
		t.Fatalf("list demo charges: %d, %v, has_more %t", resp.StatusCode, err, page.HasMore)
	}
	return len(page.Data)
}
