-- The API request (req_…) that created an object, as the event telling
-- its idempotency key says: the request id Stripe's support and logs
-- know it by, shown in a trace beside the event. NULL where the event
-- told none, and for keys mirrored before this column.

-- +goose Up
ALTER TABLE reconcile.provider_keys ADD COLUMN request_id text;

-- +goose Down
ALTER TABLE reconcile.provider_keys DROP COLUMN request_id;
