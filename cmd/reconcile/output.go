package main

import (
	"encoding/json"
	"errors"
	"io"
	"time"

	"reconcile"
	"reconcile/internal/runner"
)

// failure is what `run --format json` prints instead of the report when
// there is none to print: a run that failed, or never began. RunID is
// there when the pass began (its log lines and its failed run row carry
// it). Error is the line stderr shows, redacted.
type failure struct {
	RunID  string `json:"run_id,omitempty"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

// writeFailure prints err's failure object. Should stdout itself have
// failed, there is nowhere left to say so but stderr, which exitCode does.
func writeFailure(w io.Writer, err error) {
	f := failure{Status: string(reconcile.RunFailed), Error: errorLine(err)}
	var fr *runner.FailedRunError
	if errors.As(err, &fr) {
		f.RunID = fr.RunID
	}
	_ = writeJSON(w, f)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
