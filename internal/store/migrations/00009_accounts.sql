-- Stripe Connect accounts. A pass reads the platform's own
-- account and its connected accounts, and Stripe's ids are unique only
-- within an account: the mirror's objects, keys and cursors are keyed by
-- (account, id), and each finding says its account. The platform's
-- account is '' everywhere, so that every row written before this
-- migration is the platform's and keeps its meaning, and a reconciler
-- that reads only the platform writes what it wrote before
-- (docs/design.md, "Reading the provider", "The schema `reconcile`").
--
-- accounts holds each connected account's display name as the last pass
-- read it, for people (findings, alerts); the platform is not in it.

-- +goose Up
ALTER TABLE reconcile.provider_objects ADD COLUMN account text NOT NULL DEFAULT '';
ALTER TABLE reconcile.provider_objects DROP CONSTRAINT provider_objects_pkey, ADD PRIMARY KEY (account, id);
DROP INDEX reconcile.provider_objects_created_idx;
CREATE INDEX provider_objects_created_idx ON reconcile.provider_objects (account, created);

ALTER TABLE reconcile.provider_keys ADD COLUMN account text NOT NULL DEFAULT '';
ALTER TABLE reconcile.provider_keys DROP CONSTRAINT provider_keys_pkey, ADD PRIMARY KEY (account, object_id, key);
DROP INDEX reconcile.provider_keys_created_idx;
CREATE INDEX provider_keys_created_idx ON reconcile.provider_keys (account, created);

-- Each account's mirror is complete over its own times: a connected
-- account read late, or refused, leaves the others' cursors as they are.
ALTER TABLE reconcile.sync_cursors ADD COLUMN account text NOT NULL DEFAULT '';
ALTER TABLE reconcile.sync_cursors DROP CONSTRAINT sync_cursors_pkey, ADD PRIMARY KEY (account, name);

-- The fingerprint stays the key: reconcile.AccountFingerprint already
-- tells the accounts apart, and is the platform's fingerprint of old for
-- the platform's findings.
ALTER TABLE reconcile.findings ADD COLUMN account text NOT NULL DEFAULT '';
CREATE INDEX findings_open_account_idx ON reconcile.findings (account, kind) WHERE status = 'open';

CREATE TABLE reconcile.accounts (
  id      text PRIMARY KEY CHECK (id <> ''),  -- acct_…; never the platform's ''
  name    text NOT NULL DEFAULT '',           -- empty when Stripe gives none
  run_id  text NOT NULL,                      -- the pass that last read it
  seen_at timestamptz NOT NULL
);

-- +goose Down
-- The mirror is no source of truth: what it held of connected accounts,
-- which the keys of old cannot hold apart from the platform's, is
-- forgotten, and a pass reads it again. Findings are never deleted; those
-- of connected accounts keep their fingerprints and lose their account.
DROP TABLE reconcile.accounts;

DROP INDEX reconcile.findings_open_account_idx;
ALTER TABLE reconcile.findings DROP COLUMN account;

DELETE FROM reconcile.sync_cursors WHERE account <> '';
ALTER TABLE reconcile.sync_cursors DROP CONSTRAINT sync_cursors_pkey, ADD PRIMARY KEY (name);
ALTER TABLE reconcile.sync_cursors DROP COLUMN account;

DELETE FROM reconcile.provider_keys WHERE account <> '';
DROP INDEX reconcile.provider_keys_created_idx;
ALTER TABLE reconcile.provider_keys DROP CONSTRAINT provider_keys_pkey, ADD PRIMARY KEY (object_id, key);
CREATE INDEX provider_keys_created_idx ON reconcile.provider_keys (created);
ALTER TABLE reconcile.provider_keys DROP COLUMN account;

DELETE FROM reconcile.provider_objects WHERE account <> '';
DROP INDEX reconcile.provider_objects_created_idx;
ALTER TABLE reconcile.provider_objects DROP CONSTRAINT provider_objects_pkey, ADD PRIMARY KEY (id);
CREATE INDEX provider_objects_created_idx ON reconcile.provider_objects (created);
ALTER TABLE reconcile.provider_objects DROP COLUMN account;
