-- The reference obligations table (docs/design.md, "Obligations"). The payment workflow
-- writes it; the reconciler reads it and only ever changes state,
-- provider_id, paid_at and updated_at, by compare-and-set.
CREATE TABLE obligations (
  id               text PRIMARY KEY,     -- business identity, e.g. refund:4821:approved-request-7
  kind             text NOT NULL CHECK (kind IN ('charge', 'refund')),
  idempotency_key  text NOT NULL UNIQUE, -- sent to the provider on every attempt
  provider         text NOT NULL DEFAULT 'stripe',
  provider_id      text,                 -- ch_/py_/pi_/re_ id once an answer arrived; NULL if none did
  target_id        text,                 -- refunds: the charge (ch_) or payment intent (pi_) refunded
  amount           bigint NOT NULL CHECK (amount > 0),  -- minor units, as Stripe (JPY has none)
  currency         text NOT NULL,        -- ISO 4217, lower case, as Stripe
  state            text NOT NULL,
  lease_owner      text,                 -- the worker executing it
  lease_expires_at timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  paid_at          timestamptz
);

-- What the reconciler looks rows up by (docs/design.md, "Coverage" and
-- "Incremental matching"): the names provider objects give (id and
-- idempotency_key have their keys) and the creation it counts by. No
-- index on state or updated_at: the reconciler's compare-and-set and the
-- workflow change both on every transition, and an index on either makes
-- every such UPDATE write each index (no HOT update); reading what
-- changed since a time scans the table instead.
CREATE INDEX obligations_provider_id_idx ON obligations (provider_id) WHERE provider_id IS NOT NULL;
CREATE INDEX obligations_target_id_idx ON obligations (target_id) WHERE target_id IS NOT NULL;
CREATE INDEX obligations_created_at_idx ON obligations (created_at);
