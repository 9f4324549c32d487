-- The fan-in of a pass's stages: one row per pass and stage, counting the
-- stage's jobs not yet completed. The row is inserted in the transaction
-- that inserts the stage's jobs, and each job's completion decrements it
-- in the transaction that marks the job completed (river.JobCompleteTx),
-- so the job that brings it to zero is known exactly once, and it inserts
-- the next stage's jobs in that same transaction (docs/design.md,
-- "Passes as jobs").

-- +goose Up
CREATE TABLE reconcile.pass_fanin (
  pass_id   text NOT NULL,
  stage     text NOT NULL,
  remaining integer NOT NULL CHECK (remaining >= 0),
  PRIMARY KEY (pass_id, stage)
);

-- +goose Down
DROP TABLE reconcile.pass_fanin;
