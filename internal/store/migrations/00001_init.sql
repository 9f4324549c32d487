-- The reconciler's own tables. The schema itself is created by Migrate
-- before goose runs, because goose keeps its version table in it.
--
-- Room is left for the provider mirror of incremental sync: it
-- will add its own tables in a later migration (for example
-- provider_objects, provider_keys, sync_cursors); nothing here uses those
-- names.

-- +goose Up
CREATE TABLE reconcile.runs (
  id               text PRIMARY KEY,
  trigger          text NOT NULL CHECK (trigger IN ('cron', 'manual', 'demo')),
  window_from      timestamptz NOT NULL,
  window_to        timestamptz NOT NULL,
  started_at       timestamptz NOT NULL,
  finished_at      timestamptz,
  status           text NOT NULL CHECK (status IN ('completed', 'failed', 'dry_run')),
  -- Inputs (reconcile.Counts) and outcomes of the run.
  obligations      integer NOT NULL DEFAULT 0,
  provider_objects integer NOT NULL DEFAULT 0,
  linked           integer NOT NULL DEFAULT 0,
  findings         integer NOT NULL DEFAULT 0,
  transitions      integer NOT NULL DEFAULT 0,
  skipped          integer NOT NULL DEFAULT 0,
  error            text  -- why a failed run failed
);
CREATE INDEX runs_started_idx ON reconcile.runs (started_at DESC, id);

-- Findings are never deleted: a resolved finding keeps its history and
-- reopens under the same fingerprint if it comes back.
CREATE TABLE reconcile.findings (
  fingerprint      text PRIMARY KEY,
  kind             text NOT NULL,
  severity         text NOT NULL,
  obligation_id    text,
  provider_ids     text[] NOT NULL DEFAULT '{}',
  amount           bigint NOT NULL,   -- minor units
  currency         text NOT NULL,
  at_risk_amount   bigint NOT NULL,   -- minor units
  at_risk_currency text NOT NULL,
  content_hash     text NOT NULL,
  detail           text NOT NULL,
  status           text NOT NULL CHECK (status IN ('open', 'resolved')),
  -- The run rows are written last in Apply's transaction, so references
  -- to them are checked at commit.
  first_seen_run   text NOT NULL REFERENCES reconcile.runs DEFERRABLE INITIALLY DEFERRED,
  first_seen_at    timestamptz NOT NULL,
  last_seen_run    text NOT NULL REFERENCES reconcile.runs DEFERRABLE INITIALLY DEFERRED,
  last_seen_at     timestamptz NOT NULL,
  resolved_run     text REFERENCES reconcile.runs DEFERRABLE INITIALLY DEFERRED,
  resolved_at      timestamptz,
  acknowledged_at  timestamptz,
  acknowledged_by  text,
  ack_reason       text,
  -- When an alert about this finding was last queued in the outbox; a
  -- repeat is due RepeatInterval after it.
  last_alerted_at  timestamptz,
  CHECK ((status = 'resolved') = (resolved_at IS NOT NULL))
);
CREATE INDEX findings_open_idx ON reconcile.findings (kind) WHERE status = 'open';
CREATE INDEX findings_obligation_idx ON reconcile.findings (obligation_id);

-- The audit of every state change the reconciler made. run_id has no
-- foreign key on purpose: Apply writes the run row in the same
-- transaction, and a key checked per audit row at commit costs about a
-- fifth of a 100k-transition apply.
CREATE TABLE reconcile.transitions (
  id            bigserial PRIMARY KEY,
  obligation_id text NOT NULL,
  from_state    text NOT NULL,  -- canonical state names
  to_state      text NOT NULL,
  provider_id   text,
  run_id        text NOT NULL,
  at            timestamptz NOT NULL
);
CREATE INDEX transitions_obligation_idx ON reconcile.transitions (obligation_id, id);

-- The alert outbox, written in the same transaction as the findings and
-- drained to Slack afterwards.
CREATE TABLE reconcile.outbox (
  id              bigserial PRIMARY KEY,
  run_id          text NOT NULL REFERENCES reconcile.runs DEFERRABLE INITIALLY DEFERRED,
  fingerprint     text REFERENCES reconcile.findings DEFERRABLE INITIALLY DEFERRED,
  event           text NOT NULL CHECK (event IN ('summary', 'firing', 'repeat', 'resolved')),
  changed         boolean NOT NULL DEFAULT false,
  payload         jsonb NOT NULL,  -- the finding or the run summary as it stood
  created_at      timestamptz NOT NULL,
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  last_error      text,
  sent_at         timestamptz,
  slack_channel   text,
  slack_ts        text,
  -- Set when an attempt may have reached Slack without an answer; sticky.
  outcome_unknown boolean NOT NULL DEFAULT false,
  CHECK ((event = 'summary') = (fingerprint IS NULL))
);
CREATE INDEX outbox_unsent_idx ON reconcile.outbox (id) WHERE sent_at IS NULL;
CREATE INDEX outbox_fingerprint_idx ON reconcile.outbox (fingerprint, event, id) WHERE fingerprint IS NOT NULL;
CREATE INDEX outbox_summary_idx ON reconcile.outbox (run_id) WHERE event = 'summary';

-- +goose Down
DROP TABLE reconcile.outbox;
DROP TABLE reconcile.transitions;
DROP TABLE reconcile.findings;
DROP TABLE reconcile.runs;
