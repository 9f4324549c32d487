package trace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"reconcile"
	"reconcile/internal/redact"
	"reconcile/internal/sources"
	"reconcile/internal/store"
)

// Namer reads the obligations that name provider ids as their provider_id
// or target_id (sources.Obligations is one).
type Namer interface {
	Obligations
	ReadNamed(ctx context.Context, named sources.Named) ([]reconcile.Obligation, error)
}

// FindingsNamer returns the stored findings that name a provider id
// (store.Store is one).
type FindingsNamer interface {
	FindingsNaming(ctx context.Context, id string) ([]store.FindingRecord, error)
}

// ErrAmbiguous is returned (wrapped) by Resolve when a Stripe id leads to
// more than one obligation.
var ErrAmbiguous = errors.New("more than one obligation")

// Resolve turns what someone asked to trace into an obligation id: an
// obligation id as it is; otherwise a Stripe id, by the obligation whose
// provider_id it is, else the one obligation that targets it or that a
// stored finding naming it concerns (a duplicate's second refund is no
// obligation's provider_id). It fails with ErrNotFound when nothing leads
// anywhere (naming the orphan findings that name the id, if any) and with
// ErrAmbiguous, listing them, when several obligations do.
func Resolve(ctx context.Context, obs Namer, findings FindingsNamer, id string) (string, error) {
	_, err := obs.Get(ctx, id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, sources.ErrNotFound) {
		return "", err
	}
	named, err := obs.ReadNamed(ctx, sources.Named{ProviderIDs: []string{id}})
	if err != nil {
		return "", err
	}
	var paid, others []string
	for _, o := range named {
		if o.ProviderID == id {
			paid = append(paid, o.ID)
		} else {
			others = append(others, o.ID)
		}
	}
	if len(paid) == 1 {
		return paid[0], nil
	}
	var orphans []string
	if findings != nil {
		fs, err := findings.FindingsNaming(ctx, id)
		if err != nil {
			return "", err
		}
		for _, f := range fs {
			if f.ObligationID == "" {
				orphans = append(orphans, f.Fingerprint)
			} else {
				others = append(others, f.ObligationID)
			}
		}
	}
	cands := append(paid, others...)
	slices.Sort(cands)
	cands = slices.Compact(cands)
	switch {
	case len(cands) == 1:
		return cands[0], nil
	case len(cands) > 1:
		shown := cands[:min(len(cands), 5)]
		more := ""
		if len(cands) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(cands)-len(shown))
		}
		return "", fmt.Errorf("trace %s: %w: %s%s; trace one of them", redact.Text(id), ErrAmbiguous,
			redact.Text(strings.Join(shown, ", ")), more)
	case len(orphans) > 0:
		return "", fmt.Errorf("trace %s: %w: no obligation links to it; it is named by finding %s (no obligation): reconcile findings --target %s",
			redact.Text(id), ErrNotFound, strings.Join(orphans[:min(len(orphans), 3)], ", "), redact.Text(id))
	}
	return "", notFoundError{id: id, named: true}
}
