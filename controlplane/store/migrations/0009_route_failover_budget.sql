-- A route's failover budget for requests that set none (NULL: the data
-- plane's default); the data plane's bound is the same.

ALTER TABLE routes ADD COLUMN fallback_timeout_ms integer
  CHECK (fallback_timeout_ms BETWEEN 1 AND 600000);
