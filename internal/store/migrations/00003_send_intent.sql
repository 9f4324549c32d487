-- A send's intent, recorded before each Slack request: a process that
-- dies after Slack accepted a message and before it recorded so leaves
-- this set, and the next drain marks its copy as a possible repeat
-- instead of posting an unmarked duplicate.

-- +goose Up
ALTER TABLE reconcile.outbox ADD COLUMN sending_since timestamptz;

-- +goose Down
ALTER TABLE reconcile.outbox DROP COLUMN sending_since;
