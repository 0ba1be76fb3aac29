-- The response cache (docs/cache.md). A route's settings: on when
-- cache_ttl_s is set (the data plane's bound, 30 days), whom an answer is
-- shared with, and whether a request without a temperature counts as
-- deterministic. A key's and a team's cache_ttl_s override the routes'
-- (NULL: follow the route, 0: off). A ledger row served from the cache
-- says so, with what the original attempt cost (NULL: unknown, or not a
-- hit); its own cost and tokens are 0.

ALTER TABLE routes ADD COLUMN cache_ttl_s integer
    CHECK (cache_ttl_s BETWEEN 1 AND 2592000),
  ADD COLUMN cache_scope text NOT NULL DEFAULT 'team'
    CHECK (cache_scope IN ('team', 'key', 'project', 'global')),
  ADD COLUMN cache_deterministic boolean NOT NULL DEFAULT false;
ALTER TABLE api_keys ADD COLUMN cache_ttl_s integer
  CHECK (cache_ttl_s BETWEEN 0 AND 2592000);
ALTER TABLE teams ADD COLUMN cache_ttl_s integer
  CHECK (cache_ttl_s BETWEEN 0 AND 2592000);
ALTER TABLE ledger ADD COLUMN cache_hit boolean NOT NULL DEFAULT false,
  ADD COLUMN saved_picodollars bigint CHECK (saved_picodollars >= 0);
