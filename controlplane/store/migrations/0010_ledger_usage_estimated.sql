-- An attempt whose answer was cut before the provider's usage came is
-- billed from the gateway's estimate; the row says so.

ALTER TABLE ledger ADD COLUMN usage_estimated boolean NOT NULL DEFAULT false;
