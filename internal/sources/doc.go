// Package sources holds the reconciler's read-only adapters: Stripe
// (stripe-go) and the obligations table (pgx); they turn foreign records into
// the root package's domain types.
package sources
