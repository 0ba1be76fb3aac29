-- How long one attempt may run, answer included (NULL: the data plane's
-- default); the data plane's bound.

ALTER TABLE routes ADD COLUMN max_duration_ms integer
  CHECK (max_duration_ms BETWEEN 1 AND 86400000);
