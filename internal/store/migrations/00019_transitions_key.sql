-- The audit's key is what it is read by (docs/design.md, "The schema reconcile"):
-- an obligation's transitions in order (the trace, the web page). The
-- serial id alone had its own unique index, which nothing reads by and
-- every audit row wrote: at a hundred thousand transitions that index
-- was 0.1 s of the apply's 0.45 s of audit inserts. The id stays unique
-- by its sequence and orders an obligation's rows within the key.
-- Rebuilding the key reads the audit once.

-- +goose Up
ALTER TABLE reconcile.transitions DROP CONSTRAINT transitions_pkey;
DROP INDEX reconcile.transitions_obligation_idx;
ALTER TABLE reconcile.transitions ADD CONSTRAINT transitions_pkey PRIMARY KEY (obligation_id, id);

-- +goose Down
ALTER TABLE reconcile.transitions DROP CONSTRAINT transitions_pkey;
ALTER TABLE reconcile.transitions ADD CONSTRAINT transitions_pkey PRIMARY KEY (id);
CREATE INDEX transitions_obligation_idx ON reconcile.transitions (obligation_id, id);
