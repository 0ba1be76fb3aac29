-- Guardrails (docs/guardrails.md). The prompt-injection rules as data:
-- each one an id, a severity, a description, and a phrase or a POSIX
-- extended regular expression matched against the normalized text (the
-- admin API checks that a regex compiles and holds no back-reference). A
-- disabled rule stays in the table and out of the snapshot. The table is
-- seeded once, by migration 17, from common/guard_rules.json as compiled in
-- (cp_migrate.c's seed, run after this file in the same transaction):
-- deleting or disabling a default is the operator's right, and a later
-- release's defaults do not come back on their own. A route's
-- guard and judge settings are one jsonb object each (NULL: off), checked
-- by the admin API (cp_res_routes.c); a key's and a team's guard_policy
-- overrides the route's (NULL: the route's).

CREATE TABLE guard_rules (
  id text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
  severity text NOT NULL CHECK (severity IN ('low', 'medium', 'high')),
  description text NOT NULL DEFAULT '' CHECK (octet_length(description) <= 500),
  kind text NOT NULL CHECK (kind IN ('phrase', 'regex')),
  pattern text NOT NULL CHECK (octet_length(pattern) BETWEEN 1 AND 1024),
  enabled boolean NOT NULL DEFAULT true,
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
ALTER TABLE routes ADD COLUMN guard jsonb CHECK (jsonb_typeof(guard) = 'object'),
  ADD COLUMN judge jsonb CHECK (jsonb_typeof(judge) = 'object');
ALTER TABLE api_keys ADD COLUMN guard_policy text
  CHECK (guard_policy IN ('off', 'log', 'block'));
ALTER TABLE teams ADD COLUMN guard_policy text
  CHECK (guard_policy IN ('off', 'log', 'block'));
