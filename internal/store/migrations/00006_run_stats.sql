-- How each run's reading of Stripe went: the requests it retried and the
-- 429 answers it met, which the runner used to log only. Written for
-- completed and failed runs alike; NULL for runs recorded before this
-- column (docs/design.md, "The schema `reconcile`").

-- +goose Up
ALTER TABLE reconcile.runs ADD COLUMN stripe_retries integer;
ALTER TABLE reconcile.runs ADD COLUMN stripe_rate_limited integer;

-- +goose Down
ALTER TABLE reconcile.runs DROP COLUMN stripe_rate_limited;
ALTER TABLE reconcile.runs DROP COLUMN stripe_retries;
