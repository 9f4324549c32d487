package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"reconcile"
	"reconcile/internal/matcher"
	"reconcile/internal/store"
)

// Readers are the readers of one Stripe account's share of a pass: its
// records at the provider, its obligations and its mirror
// (docs/design.md, "Accounts"). Mirror is nil when the runner keeps none.
type Readers struct {
	Provider    Provider
	Obligations Obligations
	Mirror      Mirror
}

// AccountSaver keeps the display names of the accounts a pass read, for
// the pages and messages that name them (store.Store is one).
type AccountSaver interface {
	SaveAccounts(ctx context.Context, runID string, accounts []reconcile.Account, now time.Time) error
}

// AccountShare is what one account's share of a pass read and found.
type AccountShare struct {
	Account  reconcile.Account
	Counts   reconcile.Counts
	Findings int
}

// part is one account's share of a pass: the runner with that account's
// readers, what it read and what it concluded.
type part struct {
	acct reconcile.Account
	r    *Runner
	st   *readState
	out  *Outcome
}

// accounts are the accounts a pass reads: the platform's own first, then
// the connected accounts Runner.Accounts lists, by id; or only those
// given (Request.Accounts), as they are given.
func (r *Runner) accounts(ctx context.Context, only []string) ([]reconcile.Account, error) {
	if only != nil {
		if len(only) == 0 {
			return nil, errors.New("a pass of no account reads nothing")
		}
		var as []reconcile.Account
		for _, id := range only {
			if id != "" && (r.Scope == nil || !reconcile.ValidAccountID(id)) {
				return nil, fmt.Errorf("account %q: not a connected account this reconciler reads", id)
			}
			as = append(as, reconcile.Account{ID: id})
		}
		return as, nil
	}
	all := []reconcile.Account{{}}
	if r.Accounts == nil {
		return all, nil
	}
	if r.Scope == nil {
		return nil, errors.New("runner: Accounts without Scope would read every account with the platform's readers")
	}
	connected, err := r.Accounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the connected accounts: %w", err)
	}
	connected = slices.Clone(connected)
	slices.SortFunc(connected, func(a, b reconcile.Account) int { return strings.Compare(a.ID, b.ID) })
	for i, a := range connected {
		if a.Platform() || (i > 0 && connected[i-1].ID == a.ID) {
			return nil, fmt.Errorf("list the connected accounts: %q listed twice or as the platform's", a.ID)
		}
	}
	return append(all, connected...), nil
}

// noPassRunning refuses a one-process pass while a pass run as jobs is
// running: their alerts and summaries would interleave (docs/design.md,
// "Passes as jobs").
func (r *Runner) noPassRunning(ctx context.Context) error {
	ps, ok := r.Store.(interface {
		RunningPass(ctx context.Context) (string, bool, error)
	})
	if !ok {
		return nil
	}
	id, running, err := ps.RunningPass(ctx)
	if err != nil {
		return err
	}
	if running {
		return fmt.Errorf("%w: the workers are running pass %s", ErrLocked, id)
	}
	return nil
}

// part returns a's share of a pass: a copy of the runner, with a's
// readers when the runner reads accounts apart (Scope).
func (r *Runner) part(a reconcile.Account, run reconcile.Run, clock *phaseClock) *part {
	// A copy either way: a part's readers are its own to wrap (a pass
	// run as jobs reads its fetches through them), and jobs of one
	// worker share the runner.
	c := *r
	if r.Scope != nil {
		rd := r.Scope(a.ID)
		c.Provider, c.Obligations, c.Mirror = rd.Provider, rd.Obligations, rd.Mirror
	}
	return &part{acct: a, r: &c, st: &readState{phases: clock}, out: &Outcome{Run: run}}
}

// failed names the account in the error of a connected account's share.
func (p *part) failed(err error) error {
	if p.acct.Platform() {
		return err
	}
	return fmt.Errorf("account %s: %w", p.acct.Label(), err)
}

// saveAccounts keeps the names of the connected accounts the pass read,
// when the store keeps them. Like the mirror, names cost nothing to the
// pass when they cannot be saved; the error is only a lost run lock's.
func (r *Runner) saveAccounts(ctx context.Context, log *slog.Logger, lock *store.Lock, runID string, accounts []reconcile.Account, now time.Time) error {
	saver, ok := r.Store.(AccountSaver)
	if !ok || len(accounts) < 2 {
		return nil
	}
	err := saver.SaveAccounts(ctx, runID, accounts[1:], now)
	if errors.Is(err, store.ErrLockLost) {
		return stopped(err, "after applying, before sending alerts")
	}
	if err != nil {
		log.Warn("the connected accounts' names were not saved; pages name them by id", "error", err)
	}
	return nil
}

// mergeParts puts the accounts' shares of a pass together in out: their
// conclusions, as one Apply takes them, and what they read. A pass over
// the platform alone is exactly its one share. Objects are identified
// across accounts by reconcile.AccountObject, as the store compares
// them: the same id may be two accounts' objects.
func mergeParts(out *Outcome, parts []*part) {
	for _, p := range parts {
		out.Accounts = append(out.Accounts, AccountShare{Account: p.acct, Counts: p.out.Result.Counts, Findings: len(p.out.Result.Findings)})
	}
	if len(parts) == 1 {
		p := parts[0].out
		out.Input, out.ObligationsRead, out.Result, out.Covered, out.EventsFrom = p.Input, p.ObligationsRead, p.Result, p.Covered, p.EventsFrom
		out.Context, out.Partial, out.Lookups, out.Stats, out.Unmapped = p.Context, p.Partial, p.Lookups, p.Stats, p.Unmapped
		return
	}
	in, res := &out.Input, &out.Result
	type bucketed struct {
		id string
		b  matcher.Bucket
	}
	var objects []bucketed
	for i, pt := range parts {
		p := pt.out
		acct := pt.acct.ID
		if i == 0 {
			out.Covered, out.EventsFrom = p.Covered, p.EventsFrom
		}
		// What every account was read over: the latest start, the
		// earliest end; each account's own is in its share.
		out.Covered.From = later(out.Covered.From, p.Covered.From)
		out.Covered.To = earlier(out.Covered.To, p.Covered.To)
		out.EventsFrom = later(out.EventsFrom, p.EventsFrom)
		out.Context += p.Context
		out.Partial += p.Partial
		out.Lookups = append(out.Lookups, p.Lookups...)
		out.Stats.Add(p.Stats)
		for raw, n := range p.Unmapped {
			if out.Unmapped == nil {
				out.Unmapped = map[string]int{}
			}
			out.Unmapped[raw] += n
		}

		out.ObligationsRead += p.ObligationsRead
		in.Objects = append(in.Objects, p.Input.Objects...)
		in.Keys = append(in.Keys, p.Input.Keys...)
		in.Lookups = append(in.Lookups, p.Input.Lookups...)
		in.Context = append(in.Context, p.Input.Context...)

		c := p.Result.Conclusions
		res.Findings = append(res.Findings, c.Findings...)
		res.Transitions = append(res.Transitions, c.Transitions...)
		res.Counts.Obligations += c.Counts.Obligations
		res.Counts.ProviderObjects += c.Counts.ProviderObjects
		res.Counts.Linked += c.Counts.Linked
		res.ObligationIDs = append(res.ObligationIDs, c.ObligationIDs...)
		res.Settled.Obligations = append(res.Settled.Obligations, c.Settled.Obligations...)
		res.Settled.Objects = append(res.Settled.Objects, acrossAccounts(acct, c).Settled.Objects...)
		for j, id := range c.ObjectIDs {
			objects = append(objects, bucketed{reconcile.AccountObject(acct, id), p.Result.Buckets[j]})
		}
		res.Links = append(res.Links, p.Result.Links...)
		res.Incremental = res.Incremental || c.Incremental
	}
	in.Listed, in.EventsFrom, in.Subject = out.Covered, out.EventsFrom, parts[0].out.Input.Subject
	slices.SortFunc(out.Lookups, func(a, b reconcile.Lookup) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(res.Findings, reconcile.CompareFindings)
	slices.SortFunc(res.Transitions, func(a, b reconcile.Transition) int { return strings.Compare(a.ObligationID, b.ObligationID) })
	slices.SortFunc(res.Links, func(a, b reconcile.Link) int {
		return cmp.Or(strings.Compare(a.ObjectID, b.ObjectID), strings.Compare(a.ObligationID, b.ObligationID))
	})
	slices.Sort(res.ObligationIDs)
	slices.Sort(res.Settled.Obligations)
	slices.Sort(res.Settled.Objects)
	slices.SortFunc(objects, func(a, b bucketed) int { return strings.Compare(a.id, b.id) })
	res.ObjectIDs, res.Buckets = make([]string, len(objects)), make([]matcher.Bucket, len(objects))
	for i, o := range objects {
		res.ObjectIDs[i], res.Buckets[i] = o.id, o.b
	}
}

// acrossAccounts is an account's conclusions as the store compares them
// with other accounts' stored findings: the objects it settled named
// across accounts (reconcile.AccountObject).
func acrossAccounts(account string, c reconcile.Conclusions) reconcile.Conclusions {
	if account == "" {
		return c
	}
	objs := make([]string, len(c.Settled.Objects))
	for i, id := range c.Settled.Objects {
		objs[i] = reconcile.AccountObject(account, id)
	}
	slices.Sort(objs)
	c.Settled.Objects = objs
	return c
}

// mergeSync is how the pass read the provider, all accounts together:
// the platform's mode and reason (each account's are logged with it),
// the counts summed, saved only if every account's mirror was.
func mergeSync(parts []*part) SyncReport {
	if len(parts) == 0 {
		return SyncReport{}
	}
	s := parts[0].st.plan.report
	for _, p := range parts[1:] {
		o := p.st.plan.report
		s.Mirrored += o.Mirrored
		s.MirroredKeys += o.MirroredKeys
		s.Changed += o.Changed
		s.Listed += o.Listed
		s.EventsRead += o.EventsRead
		s.Retrieved += o.Retrieved
		s.Verified += o.Verified
		s.Refreshed += o.Refreshed
		s.Rematched += o.Rematched
		if o.Match == MatchFull {
			s.Match, s.MatchReason = o.Match, cmp.Or(s.MatchReason, o.MatchReason)
		}
		s.Saved = s.Saved && o.Saved
		s.SaveErr = cmp.Or(s.SaveErr, o.SaveErr)
	}
	return s
}
