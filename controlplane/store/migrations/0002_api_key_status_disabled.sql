-- A key the API disables (PATCH status) rather than revokes: the data
-- plane serves only "active" keys, so both stop a key; "disabled" can be
-- undone.

ALTER TABLE api_keys DROP CONSTRAINT api_keys_status_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_status_check
  CHECK (status IN ('active', 'disabled', 'revoked'));
