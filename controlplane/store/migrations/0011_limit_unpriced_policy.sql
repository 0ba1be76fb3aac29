-- A cost limit keeps targets it cannot price out of a key's reach unless
-- it says so (before, its offline policy fail_open let them through free).

ALTER TABLE limits ADD COLUMN unpriced text NOT NULL DEFAULT 'refuse'
  CHECK (unpriced IN ('refuse', 'allow'));
