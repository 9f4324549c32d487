-- What Stripe answered it has no such object for (docs/design.md,
-- "Incremental matching"): an id an obligation names, retrieved by id and
-- answered 404. Stripe never gives an id to an object later, so a nightly
-- pass takes the answer from here rather than asking again every night
-- (at a million obligations, three thousand requests a pass); a pass
-- reading the provider in full asks again. A row outlives the object's
-- appearing only as a row the mirror's own object overrides.

-- +goose Up
CREATE TABLE reconcile.provider_absent (
  account text NOT NULL,
  id      text NOT NULL,
  -- When the provider last answered that it has no such object.
  seen_at timestamptz NOT NULL,
  PRIMARY KEY (account, id)
);

-- +goose Down
DROP TABLE reconcile.provider_absent;
