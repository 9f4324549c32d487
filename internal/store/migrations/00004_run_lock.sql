-- The run lock's fencing epoch. The run lock (an advisory lock on a
-- connection of its own) ends with its connection, and the run holding it
-- learns of that only when it next uses the connection: without more, a
-- run whose lock connection died carries on and writes while the next run
-- takes the lock. Each holder therefore moves this epoch on its lock
-- connection right after it takes the lock, before it reads anything, and
-- every write a run makes (Apply, the mirror's save, each Slack send's
-- claim) first locks this row FOR SHARE and checks that the epoch is still
-- its own. The next holder's move of the epoch waits for those writes to
-- end, and a write begun after the move sees the new epoch and is refused.

-- +goose Up
CREATE TABLE reconcile.run_lock (
  -- One row: the key is always true.
  id    boolean PRIMARY KEY DEFAULT true CHECK (id),
  epoch bigint NOT NULL
);
INSERT INTO reconcile.run_lock (id, epoch) VALUES (true, 0);

-- +goose Down
DROP TABLE reconcile.run_lock;
