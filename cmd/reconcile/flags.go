package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"reconcile/internal/config"
)

// command is one subcommand's flags, parsed interspersed with its
// positional arguments (reconcile trace ID --format json works).
type command struct {
	name       string
	fs         *flag.FlagSet
	configPath string
}

func newCommand(name string) *command {
	c := &command{name: name, fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard)
	c.fs.StringVar(&c.configPath, "config", "", "configuration file (default: built-in defaults)")
	return c
}

// errHelp reports that -h was asked for and the usage was printed.
var errHelp = errors.New("help requested")

// parse returns the positional arguments. Flag errors are usage errors.
func (c *command) parse(args []string, stdout io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.printUsage(stdout)
				return nil, errHelp
			}
			return nil, usageError("%s: %v (see reconcile %s -h)", c.name, err, c.name)
		}
		args = c.fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (c *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: reconcile %s [flags]\n", c.name)
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// start parses a command that takes no positional argument and loads the
// configuration.
func (c *command) start(args []string, stdout io.Writer, getenv func(string) string) (config.Config, error) {
	_, cfg, err := c.startWith(args, stdout, getenv)
	return cfg, err
}

// startWith parses args, wanting one positional argument per name in want,
// and loads the configuration. Every problem is a usage error (exit 2);
// -h prints the usage and returns errHelp, which run turns into exit 0.
func (c *command) startWith(args []string, stdout io.Writer, getenv func(string) string, want ...string) ([]string, config.Config, error) {
	pos, err := c.parse(args, stdout)
	if err != nil {
		return nil, config.Config{}, err
	}
	switch {
	case len(want) == 0 && len(pos) > 0:
		return nil, config.Config{}, usageError("%s: unexpected argument %q", c.name, pos[0])
	case len(pos) != len(want):
		return nil, config.Config{}, usageError("%s: want %s", c.name, strings.Join(want, " "))
	}
	cfg, err := config.Load(c.configPath, getenv)
	if err != nil {
		return nil, config.Config{}, &exitError{code: exitUsage, err: err}
	}
	return pos, cfg, nil
}

// formatFlag is a --format restricted to a set of values.
type formatFlag struct {
	value   string
	allowed []string
}

func (f *formatFlag) String() string { return f.value }

func (f *formatFlag) Set(s string) error {
	for _, a := range f.allowed {
		if s == a {
			f.value = s
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(f.allowed, ", "))
}

func (c *command) format(allowed ...string) *formatFlag {
	f := &formatFlag{value: allowed[0], allowed: allowed}
	c.fs.Var(f, "format", "output format: "+strings.Join(allowed, ", "))
	return f
}

// parseTime accepts RFC 3339 or a plain date (UTC midnight).
func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (want RFC 3339 such as 2026-11-27T00:00:00Z, or a date 2026-11-27)", s)
}
