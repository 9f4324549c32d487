-- A pass run as River jobs (docs/design.md, "Passes as jobs") is one run
-- however many jobs apply it: its runs row is written when it is planned,
-- running, and completed or failed by its last job. Each account's
-- match-and-apply job applies its conclusions in a transaction of its
-- own; what the run's summary adds up from them, and the alerts they
-- decide, wait in pass_parts until the pass's last job queues the
-- summary first and the alerts in the order a one-process pass queues
-- them. A failed pass queues its applied parts' alerts: a finding applied
-- is never left untold.

-- +goose Up
ALTER TABLE reconcile.runs DROP CONSTRAINT runs_status_check;
ALTER TABLE reconcile.runs ADD CONSTRAINT runs_status_check
  CHECK (status IN ('completed', 'failed', 'dry_run', 'running'));
-- Why a pass run as jobs could not deliver its alerts, where no retry
-- helps (a setting to fix): what `run --enqueue` exits 1 for, as `run`
-- does.
ALTER TABLE reconcile.runs ADD COLUMN alerts_error text;

CREATE TABLE reconcile.pass_parts (
  run_id           text NOT NULL REFERENCES reconcile.runs DEFERRABLE INITIALLY DEFERRED,
  account          text NOT NULL,
  obligations      integer NOT NULL,
  provider_objects integer NOT NULL,
  linked           integer NOT NULL,
  findings         integer NOT NULL,
  transitions      integer NOT NULL,
  skipped          integer NOT NULL,
  -- What the part adds to the run's summary (the kinds it opened,
  -- changed and resolved, the findings whose money is at risk, the
  -- unknown outcomes it confirmed) and the alerts it decided.
  summary          jsonb NOT NULL,
  PRIMARY KEY (run_id, account)
);

-- The accounts a pass reads, each with the coverage its fetches read:
-- what the pass's last fetch job enqueues an apply job for.
CREATE TABLE reconcile.pass_accounts (
  run_id     text NOT NULL REFERENCES reconcile.runs DEFERRABLE INITIALLY DEFERRED,
  account    text NOT NULL,
  name       text NOT NULL DEFAULT '',
  cover_from timestamptz NOT NULL,
  cover_to   timestamptz NOT NULL,
  PRIMARY KEY (run_id, account)
);

-- +goose Down
ALTER TABLE reconcile.runs DROP COLUMN alerts_error;
DROP TABLE reconcile.pass_accounts;
DROP TABLE reconcile.pass_parts;
UPDATE reconcile.runs SET status = 'failed', finished_at = coalesce(finished_at, now()),
  error = 'a pass run as jobs, left unfinished by a downgrade' WHERE status = 'running';
ALTER TABLE reconcile.runs DROP CONSTRAINT runs_status_check;
ALTER TABLE reconcile.runs ADD CONSTRAINT runs_status_check CHECK (status IN ('completed', 'failed', 'dry_run'));
