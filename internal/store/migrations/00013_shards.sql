-- Shards (docs/design.md, "Passes as jobs"): one very large account's
-- match-and-apply may be split into parts, shard `shard` of `shards`
-- (reconcile.ShardOf), each applied in a transaction of its own and kept
-- as a part of its own until the pass's last job merges them. An
-- unsharded account's part is shard 0 of 1, as every part written before.
--
-- A shard reads only what its closure needs of the account's mirror
-- (store.Mirror.Related): the objects naming an intent, a charge or a
-- (customer, amount) it asks about, looked up by index rather than by
-- reading the account's whole copy. The mirror stores an absent target,
-- payment intent, charge or customer as NULL, never '' (saveObjects), so
-- the partial indexes skip the objects that name none. The keys are
-- looked up by (account, object_id), provider_keys' primary key's
-- prefix, and by (account, key): the objects whose events name a shard's
-- obligations' keys.

-- +goose Up
ALTER TABLE reconcile.pass_parts
  ADD COLUMN shard  integer NOT NULL DEFAULT 0,
  ADD COLUMN shards integer NOT NULL DEFAULT 1,
  ADD CONSTRAINT pass_parts_shard_check CHECK (shards >= 1 AND shard >= 0 AND shard < shards),
  DROP CONSTRAINT pass_parts_pkey,
  ADD PRIMARY KEY (run_id, account, shard);

CREATE INDEX provider_objects_intent_idx ON reconcile.provider_objects (account, payment_intent)
  WHERE payment_intent IS NOT NULL;
CREATE INDEX provider_objects_charge_idx ON reconcile.provider_objects (account, charge)
  WHERE charge IS NOT NULL;
CREATE INDEX provider_objects_target_idx ON reconcile.provider_objects (account, target)
  WHERE target IS NOT NULL;
CREATE INDEX provider_objects_customer_idx ON reconcile.provider_objects (account, customer, amount)
  WHERE customer IS NOT NULL;
CREATE INDEX provider_keys_key_idx ON reconcile.provider_keys (account, key);

-- +goose Down
DROP INDEX reconcile.provider_keys_key_idx;
DROP INDEX reconcile.provider_objects_customer_idx;
DROP INDEX reconcile.provider_objects_target_idx;
DROP INDEX reconcile.provider_objects_charge_idx;
DROP INDEX reconcile.provider_objects_intent_idx;
-- A pass left running cannot merge its shards without them: it fails, as
-- 00011's Down fails it; the parts of shards other than 0 go, so that
-- each account keeps one part.
UPDATE reconcile.runs SET status = 'failed', finished_at = coalesce(finished_at, now()),
  error = 'a pass run as jobs, left unfinished by a downgrade' WHERE status = 'running';
DELETE FROM reconcile.pass_parts WHERE shard <> 0;
ALTER TABLE reconcile.pass_parts
  DROP CONSTRAINT pass_parts_pkey,
  ADD PRIMARY KEY (run_id, account),
  DROP CONSTRAINT pass_parts_shard_check,
  DROP COLUMN shards,
  DROP COLUMN shard;
