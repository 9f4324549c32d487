-- Incremental matching (docs/design.md, "Incremental matching"): a nightly
-- pass re-matches only the parts of the history that can have changed,
-- and keeps what the last pass concluded of the rest. It needs to know,
-- of each account, which completed pass last matched it and how
-- (match_marks), and, of each mirrored object, the obligation it linked
-- to then (linked_to: the least of them; NULL when it linked to none or
-- was never matched), so that an obligation that changed or went away
-- brings back the objects it held.

-- +goose Up
CREATE TABLE reconcile.match_marks (
  account     text PRIMARY KEY,
  run_id      text NOT NULL,
  -- The pass's clock: rows of the obligations table changed after it
  -- (less the clock skew allowed) are the next pass's to match again.
  matched_at  timestamptz NOT NULL,
  window_from timestamptz NOT NULL,
  window_to   timestamptz NOT NULL,
  -- What the conclusions rest on besides the data: the matcher's
  -- options and max_lookback.
  digest      text NOT NULL,
  -- How many of the account's obligations were created before matched_at
  -- less the clock skew: fewer or more of them later means rows were
  -- deleted or written with old times, which no updated_at tells.
  obligations bigint NOT NULL
);

ALTER TABLE reconcile.provider_objects ADD COLUMN linked_to text;
CREATE INDEX provider_objects_linked_idx ON reconcile.provider_objects (account, linked_to)
  WHERE linked_to IS NOT NULL;
-- A pass that finds an obligation paid without evidence verifies every
-- unlinked mirrored payment intent (Stripe tells no event of an intent's
-- metadata changing).
CREATE INDEX provider_objects_unlinked_intents_idx ON reconcile.provider_objects (account, created)
  WHERE kind = 'payment_intent' AND linked_to IS NULL;
-- What is still pending is judged again until it is final or its grace
-- has passed.
CREATE INDEX provider_objects_pending_idx ON reconcile.provider_objects (account, created)
  WHERE status = 'pending';
-- The objects whose metadata names an obligation (its id or its key).
-- Without GIN's pending list: a nightly pass looks up thousands of
-- documents, and each lookup would scan the list a first pass's inserts
-- left (until a vacuum merges it) from start to end.
CREATE INDEX provider_objects_metadata_idx ON reconcile.provider_objects USING gin (metadata jsonb_path_ops)
  WITH (fastupdate = off)
  WHERE metadata IS NOT NULL;
-- The reconciler's own writes since a time: not a change someone else
-- made.
CREATE INDEX transitions_at_idx ON reconcile.transitions (at);

-- +goose Down
DROP INDEX reconcile.transitions_at_idx;
DROP INDEX reconcile.provider_objects_metadata_idx;
DROP INDEX reconcile.provider_objects_pending_idx;
DROP INDEX reconcile.provider_objects_unlinked_intents_idx;
DROP INDEX reconcile.provider_objects_linked_idx;
ALTER TABLE reconcile.provider_objects DROP COLUMN linked_to;
DROP TABLE reconcile.match_marks;
