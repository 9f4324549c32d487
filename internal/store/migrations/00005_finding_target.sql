-- What a finding's money concerns beyond its obligation: the charge or
-- payment intent a refund refunds, or a charge's intent. Alerts group the
-- findings of one kind and one target into one message, and
-- `reconcile findings --target` lists them. NULL where there is none, and
-- for findings written before this column. paid_out tells an orphan that
-- paid money out (a refund) from one that collected it, for the money's
-- meaning (docs/design.md, "Findings").

-- +goose Up
ALTER TABLE reconcile.findings ADD COLUMN target text;
ALTER TABLE reconcile.findings ADD COLUMN paid_out boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE reconcile.findings DROP COLUMN paid_out;
ALTER TABLE reconcile.findings DROP COLUMN target;
