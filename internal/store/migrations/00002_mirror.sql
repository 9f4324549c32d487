-- The provider mirror of incremental sync: a copy of the provider objects
-- read, of the idempotency keys that events told (Stripe keeps events 30
-- days; this keeps the keys as long as the objects), and cursors saying
-- over which times the copy is complete. A pass then reads from Stripe
-- only what the mirror cannot vouch for. Nothing here is the source of
-- truth: a pass with --full re-reads the window and overwrites it.

-- +goose Up
CREATE TABLE reconcile.provider_objects (
  id              text PRIMARY KEY,
  kind            text NOT NULL CHECK (kind IN ('charge', 'refund', 'payment_intent')),
  amount          bigint NOT NULL,   -- minor units
  currency        text NOT NULL,
  status          text NOT NULL,     -- normalised: succeeded, pending, failed, canceled
  raw_status      text NOT NULL,
  amount_refunded bigint NOT NULL DEFAULT 0,
  target          text,
  payment_intent  text,
  charge          text,
  customer        text,
  metadata        jsonb,
  created         timestamptz NOT NULL,
  -- When the provider last showed the object in this state: a listing or
  -- a retrieval (the pass's start), or the event that told the change.
  seen_at         timestamptz NOT NULL
);
CREATE INDEX provider_objects_created_idx ON reconcile.provider_objects (created);

-- Which idempotency key created which object, from events: one row per
-- object and key, the earliest event that told it.
CREATE TABLE reconcile.provider_keys (
  object_id   text NOT NULL,
  key         text NOT NULL,
  object_kind text NOT NULL,
  event_id    text NOT NULL,
  event_type  text NOT NULL,
  created     timestamptz NOT NULL,  -- the event's creation
  PRIMARY KEY (object_id, key)
);
CREATE INDEX provider_keys_created_idx ON reconcile.provider_keys (created);

-- What the mirror is complete for, one row per cursor:
--   charge, refund, payment_intent: every object of that kind created in
--     [complete_from, complete_to) is in provider_objects;
--   keys: every key told by an event created in [complete_from,
--     complete_to) is in provider_keys;
--   changes: every change the provider's events told from complete_from
--     to complete_to was applied to the objects seen since complete_from
--     (an object seen before it may be stale and is not used).
-- Cursors advance only in the transaction that saves a completed pass's
-- reads.
CREATE TABLE reconcile.sync_cursors (
  name          text PRIMARY KEY CHECK (name IN ('charge', 'refund', 'payment_intent', 'keys', 'changes')),
  complete_from timestamptz NOT NULL,
  complete_to   timestamptz NOT NULL CHECK (complete_to >= complete_from),
  run_id        text NOT NULL,
  updated_at    timestamptz NOT NULL
);

-- +goose Down
DROP TABLE reconcile.sync_cursors;
DROP TABLE reconcile.provider_keys;
DROP TABLE reconcile.provider_objects;
