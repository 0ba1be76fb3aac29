-- The schema's first version. Migrations are numbered files, applied in
-- order, each once, in its own transaction (controlplane/store/cp_migrate.c,
-- docs/controlplane.md, "Migrations"); a released one is never edited: a
-- change is a new file with the next number.
--
-- Conventions of the schema (docs/controlplane.md has the tables):
-- - names are the keys: a provider, route, team or secret is addressed by
--   its name, as in the data plane's snapshot, so the snapshot builder maps
--   rows to snapshot objects one to one and references are plain
--   foreign keys on names;
-- - every configuration table has version (optimistic concurrency: bumped
--   by every update) and created_at/updated_at;
-- - money is BIGINT picodollars (10^-12 USD) per token, never a float;
-- - names are non-empty, with no '/' and no whitespace (a CHECK, and the
--   admin API's rule);
-- - config_state.version counts every configuration write; it is what the
--   admin API sends with pg_notify('llmgw_config', ...) and what snapshots
--   will carry.

CREATE TABLE config_state (
  id integer PRIMARY KEY CHECK (id = 1),
  version bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO config_state (id, version) VALUES (1, 0);
CREATE TABLE secrets (
  name text PRIMARY KEY CHECK (name <> '' AND name !~ '[/[:space:]]'),
  backend text NOT NULL DEFAULT 'builtin' CHECK (backend IN ('builtin', 'vault', 'aws')),
  ciphertext bytea,
  master_key_id text,
  backend_ref text,
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE providers (
  name text PRIMARY KEY CHECK (name <> '' AND name !~ '[/[:space:]]'),
  driver text NOT NULL,
  base_url text NOT NULL CHECK (base_url ~ '^https?://'),
  headers jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
  options jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
  credential_ref text REFERENCES secrets (name) ON UPDATE CASCADE,
  enabled boolean NOT NULL DEFAULT true,
  first_byte_timeout_ms integer NOT NULL DEFAULT 60000
    CHECK (first_byte_timeout_ms BETWEEN 1 AND 3600000),
  idle_timeout_ms integer NOT NULL DEFAULT 60000
    CHECK (idle_timeout_ms BETWEEN 1 AND 3600000),
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE routes (
  name text PRIMARY KEY CHECK (name <> '' AND strpos(name, '/') = 0),
  aliases text[] NOT NULL DEFAULT '{}',
  role text UNIQUE CHECK (role IN ('default', 'summarize', 'embedding', 'vision')),
  capability text NOT NULL DEFAULT 'chat'
    CHECK (capability IN ('chat', 'embeddings', 'vision')),
  strategy text NOT NULL DEFAULT 'ordered'
    CHECK (strategy IN ('ordered', 'price', 'latency', 'auto', 'weighted')),
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE route_entries (
  route text NOT NULL REFERENCES routes (name) ON UPDATE CASCADE ON DELETE CASCADE,
  position integer NOT NULL CHECK (position BETWEEN 0 AND 31),
  provider text NOT NULL REFERENCES providers (name) ON UPDATE CASCADE,
  model text NOT NULL CHECK (model <> ''),
  weight integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 0 AND 1000000),
  high_cost boolean NOT NULL DEFAULT false,
  tier smallint NOT NULL DEFAULT 0 CHECK (tier BETWEEN 0 AND 9),
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (route, position),
  UNIQUE (route, provider, model));
CREATE INDEX route_entries_provider ON route_entries (provider);
CREATE TABLE teams (
  name text PRIMARY KEY CHECK (name <> '' AND name !~ '[/[:space:]]'),
  description text NOT NULL DEFAULT '',
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE projects (
  name text PRIMARY KEY CHECK (name <> '' AND name !~ '[/[:space:]]'),
  team text NOT NULL REFERENCES teams (name) ON UPDATE CASCADE,
  description text NOT NULL DEFAULT '',
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE api_keys (
  id text PRIMARY KEY CHECK (id <> '' AND id !~ '[/[:space:]]'),
  name text NOT NULL DEFAULT '',
  prefix text NOT NULL,
  hash text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),
  status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
  expires_at timestamptz,
  team text REFERENCES teams (name) ON UPDATE CASCADE,
  project text REFERENCES projects (name) ON UPDATE CASCADE,
  allow_routes text[],
  allow_providers text[],
  allow_models text[],
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE price_overrides (
  provider text NOT NULL REFERENCES providers (name) ON UPDATE CASCADE ON DELETE CASCADE,
  model text NOT NULL CHECK (model <> ''),
  input_price bigint CHECK (input_price BETWEEN 0 AND 1000000000000),
  output_price bigint CHECK (output_price BETWEEN 0 AND 1000000000000),
  cache_read_price bigint CHECK (cache_read_price BETWEEN 0 AND 1000000000000),
  cache_write_5m_price bigint CHECK (cache_write_5m_price BETWEEN 0 AND 1000000000000),
  cache_write_1h_price bigint CHECK (cache_write_1h_price BETWEEN 0 AND 1000000000000),
  currency text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (provider, model));
CREATE TABLE model_catalog (
  id bigserial PRIMARY KEY,
  provider text REFERENCES providers (name) ON UPDATE CASCADE ON DELETE CASCADE,
  model text NOT NULL CHECK (model <> ''),
  context_window integer CHECK (context_window > 0),
  max_output_tokens integer CHECK (max_output_tokens > 0),
  capabilities text[],
  input_price bigint CHECK (input_price BETWEEN 0 AND 1000000000000),
  output_price bigint CHECK (output_price BETWEEN 0 AND 1000000000000),
  cache_read_price bigint CHECK (cache_read_price BETWEEN 0 AND 1000000000000),
  cache_write_5m_price bigint CHECK (cache_write_5m_price BETWEEN 0 AND 1000000000000),
  cache_write_1h_price bigint CHECK (cache_write_1h_price BETWEEN 0 AND 1000000000000),
  currency text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE NULLS NOT DISTINCT (provider, model));
CREATE TABLE admin_tokens (
  id text PRIMARY KEY CHECK (id <> '' AND id !~ '[/[:space:]]'),
  name text NOT NULL UNIQUE CHECK (name <> ''),
  hash text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE audit_log (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  actor text NOT NULL,
  action text NOT NULL CHECK (action IN ('create', 'update', 'delete')),
  resource text NOT NULL,
  resource_id text NOT NULL,
  config_version bigint NOT NULL,
  before jsonb,
  after jsonb);
CREATE INDEX audit_log_resource ON audit_log (resource, resource_id);
