// Command reconcile proves that every approved payment obligation moved
// money exactly once at the provider, and nothing else moved.
//
//	reconcile migrate                      create/upgrade the reconciler's schema
//	reconcile run [--since 72h | --from T --to T] [--dry-run] [--format text|json] [--fail-on critical|high|warning]
//	reconcile schedule                     run on the configured cron schedule until SIGTERM
//	reconcile trace OBLIGATION_ID          everything known about one obligation
//	reconcile findings [--open] [--format text|json|csv]
//	reconcile ack FINGERPRINT --reason "…" stop repeats of an open finding
//	reconcile serve [--listen ADDR]         finance's findings page over HTTP
//	reconcile config check [--connect]     the effective configuration, secrets redacted; --connect checks each connection
//	reconcile demo                         the whole flow on built-in sample data
//
// Exit status: 0 completed; 1 failed (or alerts cannot be delivered until
// someone fixes the Slack settings or looks at an answer of Slack's this
// version does not know); 2 usage or configuration error; 3 completed with
// findings at or above --fail-on.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"reconcile/internal/redact"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// The exit statuses (docs/design.md, "Runs and the lock").
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitFindings = 3
)

// exitError carries an exit status with its cause. A nil cause means the
// reason was already reported (the findings of exit 3).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

func failed(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitFailed, err: err}
}

// exitCode prints err as one line on stderr and maps it to an exit status.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	code := exitFailed
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil {
			return code
		}
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "reconcile: "+errorLine(err))
		return exitFailed
	}
	fmt.Fprintf(stderr, "reconcile: %s\n", errorLine(err))
	return code
}

// errorLine is err as one line, for stderr and for run's failure object:
// drivers' multi-line errors are folded, and whatever secret an error from
// outside carries is redacted.
func errorLine(err error) string {
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return redact.String(strings.Join(strings.Fields(err.Error()), " "))
}

const usage = `usage: reconcile <command> [flags]

commands:
  migrate                      create or upgrade the reconciler's schema
  run                          reconcile once: [--since 72h | --from T --to T] [--dry-run]
                               [--format text|json] [--fail-on critical|high|warning] [--wait]
                               [--enqueue: hand it to the workers and wait, with workers.enabled]
  schedule                     run on the configured cron schedule until SIGTERM
                               (with workers.enabled: enqueue each pass for the workers)
  worker                       work passes run as jobs until SIGTERM (workers.enabled)
  trace OBLIGATION_ID          everything known about one obligation [--format text|json]
  findings                     findings for finance [--open] [--format text|json|csv]
  ack FINGERPRINT --reason R   stop repeats of an open finding
  serve                        finance's findings page over HTTP [--listen 127.0.0.1:8080]
  config check                 print the effective configuration, secrets redacted
                               [--connect: check the database and its privileges, Stripe, Slack]
  demo                         the whole flow on built-in sample data

Every command takes --config FILE (default: built-in defaults; see configs/reconcile.yaml).
Environment: DATABASE_URL, STRIPE_API_KEY, STRIPE_API_BASE, SLACK_BOT_TOKEN + SLACK_CHANNEL
or SLACK_WEBHOOK_URL, SLACK_API_URL.
`

// run is the whole program behind main, so that tests drive the real code
// path: args without the program name, the environment through getenv.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: exitUsage}
	}
	err := dispatch(ctx, args[0], args[1:], getenv, stdout, stderr)
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

func dispatch(ctx context.Context, cmd string, rest []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch cmd {
	case "migrate":
		return cmdMigrate(ctx, rest, getenv, stdout, stderr)
	case "run":
		return cmdRun(ctx, rest, getenv, stdout, stderr)
	case "schedule":
		return cmdSchedule(ctx, rest, getenv, stdout, stderr)
	case "worker":
		return cmdWorker(ctx, rest, getenv, stdout, stderr)
	case "trace":
		return cmdTrace(ctx, rest, getenv, stdout, stderr)
	case "findings":
		return cmdFindings(ctx, rest, getenv, stdout, stderr)
	case "ack":
		return cmdAck(ctx, rest, getenv, stdout, stderr)
	case "serve":
		return cmdServe(ctx, rest, getenv, stdout, stderr)
	case "config":
		return cmdConfig(ctx, rest, getenv, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, rest, getenv, stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return usageError("unknown command %q (see reconcile help)", cmd)
}
