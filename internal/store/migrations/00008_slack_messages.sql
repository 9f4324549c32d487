-- The messages the bot posted and Slack accepted, as posted, with the
-- findings each announces as open: a button pressed on a message finds
-- its findings here by the message's channel and ts, and an
-- acknowledgement on the findings page finds the messages of a finding by
-- its fingerprint, to edit them (docs/design.md, "Buttons in Slack").
-- A webhook's messages have no ts and are not kept.

-- +goose Up
CREATE TABLE reconcile.slack_messages (
  channel      text NOT NULL,
  ts           text NOT NULL,
  kind         text NOT NULL,
  run_id       text NOT NULL,
  fingerprints text[] NOT NULL DEFAULT '{}',
  blocks       jsonb,
  text         text NOT NULL,
  posted_at    timestamptz NOT NULL,
  PRIMARY KEY (channel, ts)
);
CREATE INDEX slack_messages_fingerprints_idx ON reconcile.slack_messages USING gin (fingerprints);

-- +goose Down
DROP TABLE reconcile.slack_messages;
