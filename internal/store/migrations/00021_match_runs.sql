-- Incremental matching (docs/design.md, "Incremental matching"): the
-- passes whose matching each account's mirror holds, saved with their
-- mark. A row whose last change is a transition of one of them is not a
-- change someone else made: the pass that made it saved the link it
-- made it on. A pass whose save failed made transitions whose links no
-- mirror holds, and the next pass reads those rows again. Rows a week
-- older than the account's newest are dropped as each is saved: a
-- transition that old is older than any pass's changes since.

-- +goose Up
CREATE TABLE reconcile.match_runs (
  account    text NOT NULL,
  run_id     text NOT NULL,
  matched_at timestamptz NOT NULL,
  PRIMARY KEY (account, run_id)
);

-- +goose Down
DROP TABLE reconcile.match_runs;
