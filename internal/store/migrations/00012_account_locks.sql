-- The fencing epochs of the connected accounts' run locks. A
-- pass run as jobs has one match-and-apply job per account, which holds
-- the run lock of its account alone: an advisory lock of its own per
-- connected account (store.LockAccount), fenced as the platform's is
-- (00004) by an epoch of its own, one row per account ever locked. The
-- holder inserts the row, or moves its epoch, on its lock connection
-- right after it takes the lock; every write it makes locks the row FOR
-- SHARE and checks that the epoch is still its own. The platform's lock
-- keeps its epoch in run_lock and has no row here. A row is never
-- deleted: an epoch begun again could repeat one an old holder carries.

-- +goose Up
CREATE TABLE reconcile.account_locks (
  account text PRIMARY KEY CHECK (account <> ''),  -- acct_…; never the platform's ''
  epoch   bigint NOT NULL
);

-- +goose Down
DROP TABLE reconcile.account_locks;
