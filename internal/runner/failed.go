package runner

// FailedRunError is the error of a pass that began and then failed. RunID
// names the pass as its log lines and its failed row in reconcile.runs
// (none for a dry run) do, so that whoever reads the error can find the
// rest. A pass that failed before it began (an empty window, the run lock
// held by another run) returns its error unwrapped: its id is nowhere.
type FailedRunError struct {
	RunID string
	Err   error
}

// Error is the cause's message alone: the run id is a field, for callers
// that print it apart, and stderr's one line stays what it was.
func (e *FailedRunError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, so that errors.Is(err, ErrLocked) and the
// like see through the wrap.
func (e *FailedRunError) Unwrap() error { return e.Err }
