package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"reconcile"
)

// FaultKinds are the rows of the coverage table: the faults injected and
// the step boundaries passes were killed at, in the order printed.
var FaultKinds = []string{
	"stripe_429", "stripe_5xx", "stripe_drop", "stripe_timeout", "stripe_missing_page", "stripe_malformed", "stripe_lookup_fail",
	"slack_429", "slack_5xx", "slack_down", "slack_bad_auth", "slack_lost_response", "slack_lost_request",
	"kill_after_page", "kill_after_apply", "kill_after_send",
	"two_at_once_nowait", "two_at_once_wait", "worker_interleave",
}

// JobFaultKinds are the faults of passes run as jobs (jobs.go), printed
// after FaultKinds: rarer, since only some passes run as jobs, so a
// default run requires each to fire, but the 10,000-seed run no least
// cell of them.
var JobFaultKinds = []string{
	"job_kill_before", "job_kill_mirror", "job_kill_rollback", "job_kill_after", "job_kill_stall", "job_kill_stale", "job_failed",
}

// Coverage counts, per fault kind and obligation state, the passes in
// which the fault fired while an obligation in that state was in the
// pass's scope.
type Coverage map[string]map[reconcile.State]int

func newCoverage() Coverage {
	c := Coverage{}
	for _, f := range FaultKinds {
		c[f] = map[reconcile.State]int{}
	}
	return c
}

// add counts one checked pass.
func (c Coverage) add(pc *passCtl) {
	if pc.exp == nil {
		return
	}
	states := map[reconcile.State]bool{}
	for id := range pc.exp.scope {
		states[pc.exp.truth.obls[id].State] = true
	}
	for f := range pc.fired {
		row := c[f]
		if row == nil {
			row = map[reconcile.State]int{}
			c[f] = row
		}
		for s := range states {
			row[s]++
		}
	}
}

// Merge adds other's counts to c.
func (c Coverage) Merge(other Coverage) {
	for f, row := range other {
		if c[f] == nil {
			c[f] = map[reconcile.State]int{}
		}
		for s, n := range row {
			c[f][s] += n
		}
	}
}

// Min is the smallest cell of the table.
func (c Coverage) Min() int {
	least := -1
	for _, f := range FaultKinds {
		for _, s := range reconcile.States {
			if n := c[f][s]; least < 0 || n < least {
				least = n
			}
		}
	}
	return least
}

// String prints the table: fault kinds down, states across.
func (c Coverage) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s", "fault \\ state")
	abbrev := map[reconcile.State]string{reconcile.PendingApproval: "PEND_APPR", reconcile.Approved: "APPROVED",
		reconcile.Executing: "EXECUTING", reconcile.ConfirmationUnknown: "CONF_UNKN", reconcile.Paid: "PAID",
		reconcile.FailedState: "FAILED", reconcile.RequiresReview: "REVIEW"}
	for _, s := range reconcile.States {
		fmt.Fprintf(&b, " %10s", abbrev[s])
	}
	b.WriteByte('\n')
	kinds := slices.Clone(FaultKinds)
	for _, f := range slices.Sorted(maps.Keys(c)) {
		if !slices.Contains(kinds, f) {
			kinds = append(kinds, f)
		}
	}
	for _, f := range kinds {
		fmt.Fprintf(&b, "%-20s", f)
		for _, s := range reconcile.States {
			fmt.Fprintf(&b, " %10d", c[f][s])
		}
		b.WriteByte('\n')
	}
	return b.String()
}
