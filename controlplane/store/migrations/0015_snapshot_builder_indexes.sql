-- The snapshot builder reads the audit rows of the versions since its last
-- build (the writes to re-read), and the active keys by expiry (the next
-- one, and those that expired since it last looked): neither scans a
-- table.

CREATE INDEX audit_log_config_version ON audit_log (config_version);
CREATE INDEX api_keys_active_expiry ON api_keys (expires_at) WHERE status = 'active';
