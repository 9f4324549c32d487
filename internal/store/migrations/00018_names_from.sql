-- Incremental matching (docs/design.md, "Incremental matching"): a pass
-- reads the provider back to the oldest obligation a record of its window
-- names. A nightly pass does not read the records that did not change,
-- so the mirror keeps, per object, how far back it names: the creation
-- time of the oldest obligation it named, when the pass that last matched
-- it read them, that was settled, created and last written before the
-- object was created (NULL: none). Few objects name one: a retry of a
-- settled obligation, a record stamped before its obligation.

-- +goose Up
ALTER TABLE reconcile.provider_objects ADD COLUMN names_from timestamptz;
CREATE INDEX provider_objects_names_from_idx ON reconcile.provider_objects (account, names_from, created)
  WHERE names_from IS NOT NULL;

-- +goose Down
DROP INDEX reconcile.provider_objects_names_from_idx;
ALTER TABLE reconcile.provider_objects DROP COLUMN names_from;
