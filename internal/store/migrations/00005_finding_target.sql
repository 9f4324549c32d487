-- What a finding's money concerns beyond its obligation: the charge or
-- payment intent a refund refunds, or a charge's intent. Alerts group the
-- findings of one kind and one target into one message, and
-- `reconcile findings --target` lists them. NULL where there is none, and
-- for findings written before this column.

-- +goose Up
ALTER TABLE reconcile.findings ADD COLUMN target text;

-- +goose Down
ALTER TABLE reconcile.findings DROP COLUMN target;
