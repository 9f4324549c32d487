package sources

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	stripe "github.com/stripe/stripe-go/v79"

	"reconcile"
)

// accountShape is what an entry of /v1/accounts must hold: its id, which
// the reader reads the account by. Its names are optional (null when the
// account set none).
var accountShape = shape{"account", mID}

// Accounts lists the connected accounts of the key's platform
// (/v1/accounts), each with its id and display name (the dashboard's
// display name, else the business profile's name, else empty), sorted by
// id. The list is paged as the other lists are (pages of 100,
// starting_after), through the same pace and retries, and its pages are
// checked as theirs are: a malformed page, or an entry whose id is not an
// account id, is retried and then fails the call. It returns every
// account or, with a *ListError, none: a partial list would leave an
// account's money unread without saying so. Whichever view it is called
// on, it asks as the platform, whose the accounts are (docs/design.md,
// "Reading the provider").
func (s *Stripe) Accounts(ctx context.Context) ([]reconcile.Account, error) {
	p := s.platform
	var c counters
	prog := p.progress()
	var out []reconcile.Account
	after := ""
	fail := func(err error) ([]reconcile.Account, error) {
		return nil, &ListError{List: ListAccounts, Cursor: after, Err: err}
	}
	for {
		var (
			pg      []reconcile.Account
			hasMore bool
		)
		err := p.call(ctx, &c, func(ctx context.Context) error {
			pg, hasMore = pg[:0], false
			it := p.api.Accounts.List(&stripe.AccountListParams{ListParams: p.listParams(ctx, after)})
			res := it.AccountList().LastResponse
			if err := checked(it.Err(), res, accountShape); err != nil {
				return err
			}
			for n := 1; it.Next(); n++ {
				a := it.Account()
				if !reconcile.ValidAccountID(a.ID) {
					// The id goes into every request header and message
					// about the account: one of another shape is not
					// taken, nor shown.
					return malformed(res, fmt.Sprintf("malformed account #%d of the page: its id is not an account id (acct_ followed by letters and digits)", n))
				}
				pg = append(pg, reconcile.Account{ID: a.ID, Name: accountName(a)})
			}
			hasMore = it.Meta().HasMore
			return nil
		})
		if err != nil {
			return fail(err)
		}
		prog.page(ListAccounts, &c, len(pg))
		out = append(out, pg...)
		if !hasMore {
			break
		}
		last := ""
		if len(pg) > 0 {
			last = pg[len(pg)-1].ID
		}
		// As in readSpan: a cursor that does not advance would read the
		// first page again, and again.
		if last == "" || last == after {
			return fail(errors.New("stripe said has_more but the page did not advance the cursor"))
		}
		after = last
	}
	slices.SortFunc(out, func(a, b reconcile.Account) int { return cmp.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b reconcile.Account) bool { return a.ID == b.ID }), nil
}

// accountName is the name Stripe gives an account for people: the
// dashboard's display name, else the business profile's name; empty when
// it gives neither. It is the account owner's text, kept as text.
func accountName(a *stripe.Account) string {
	if a.Settings != nil && a.Settings.Dashboard != nil {
		if n := strings.TrimSpace(a.Settings.Dashboard.DisplayName); n != "" {
			return n
		}
	}
	if a.BusinessProfile != nil {
		return strings.TrimSpace(a.BusinessProfile.Name)
	}
	return ""
}
