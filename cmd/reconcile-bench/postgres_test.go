package main

import (
	"os"
	"strings"
	"testing"
)

// The table names the server's settings that move its figures, and
// never the address or credentials it was reached by.
func TestPostgresLine(t *testing.T) {
	line := postgresLine(t.Context(), os.Getenv)
	if !strings.Contains(line, "autovacuum ") && !strings.Contains(line, "embedded server") {
		t.Errorf("postgresLine = %q, want the server's autovacuum setting", line)
	}
	bad := postgresLine(t.Context(), func(k string) string {
		if k == "TEST_DATABASE_URL" {
			return "postgres://someone:pw-not-shown@127.0.0.1:1/db?sslmode=disable"
		}
		return ""
	})
	if !strings.Contains(bad, "could not be asked") || strings.Contains(bad, "pw-not-shown") || strings.Contains(bad, "someone") ||
		strings.Contains(bad, "127.0.0.1") {
		t.Errorf("postgresLine of an unreachable server = %q, want it said without its URL", bad)
	}
}
