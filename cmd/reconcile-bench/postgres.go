package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"reconcile/internal/embeddedpg"
	"reconcile/internal/pgtest"
)

// postgresLine says which PostgreSQL the benchmarks ran against, by
// version, and the settings that move their figures: with autovacuum off
// (as on a CI machine), a pass after one that wrote many rows sets their
// hint bits and prunes their old versions itself; shared_buffers and
// work_mem decide what stays cached and what spills. It never names the
// server's address or credentials.
func postgresLine(ctx context.Context, getenv func(string) string) string {
	url, where := getenv("TEST_DATABASE_URL"), "TEST_DATABASE_URL's"
	if url == "" {
		// The local server the benchmarks' processes use when it answers
		// (pgtest.AdminURL).
		url, where = embeddedpg.LocalURL(pgtest.DefaultAdminURL, getenv), "the local"
		if !embeddedpg.Answers(ctx, embeddedpg.LocalAddr(getenv)) {
			return "PostgreSQL: none answers locally; each benchmark process starts an embedded server of its own (internal/embeddedpg: " +
				"fsync, synchronous_commit and full_page_writes off, otherwise PostgreSQL's defaults, autovacuum on)."
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Sprintf("PostgreSQL: %s server could not be asked for its settings.", where)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version, autovacuum, buffers, workMem string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum'),
		current_setting('shared_buffers'), current_setting('work_mem')`).Scan(&version, &autovacuum, &buffers, &workMem)
	if err != nil {
		return fmt.Sprintf("PostgreSQL: %s server could not be asked for its settings.", where)
	}
	if f := strings.Fields(version); len(f) > 0 {
		version = f[0] // "15.20", not its packager's "(Debian …)"
	}
	line := fmt.Sprintf("PostgreSQL %s (%s server): autovacuum %s, shared_buffers %s, work_mem %s.", version, where, autovacuum, buffers, workMem)
	if autovacuum != "on" {
		line += " Without autovacuum, a pass after one that wrote many rows sets their hint bits and prunes their old versions itself."
	}
	return line
}
