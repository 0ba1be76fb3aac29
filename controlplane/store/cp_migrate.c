#include "cp_migrate.h"

#include <stdio.h>
#include <string.h>

#include "cp_db.h"
#include "dp_guard_rules.h"
#include "gw_error.h"
#include "gw_log.h"

/*
 * Conventions of the schema (docs/controlplane.md has the tables):
 * - names are the keys: a provider, route, team or secret is addressed by
 *   its name, as in the data plane's snapshot, so the snapshot builder maps
 *   rows to snapshot objects one to one and references are plain
 *   foreign keys on names;
 * - every configuration table has version (optimistic concurrency: bumped
 *   by every update) and created_at/updated_at;
 * - money is BIGINT picodollars (10^-12 USD) per token, never a float;
 * - config_state.version counts every configuration write; it is what the
 *   admin API sends with pg_notify('llmgw_config', ...) and what snapshots
 *   will carry.
 */
#define STAMPS                                                                                     \
    "  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),\n"                                   \
    "  created_at timestamptz NOT NULL DEFAULT now(),\n"                                           \
    "  updated_at timestamptz NOT NULL DEFAULT now()"
#define NAME_CHECK(col) "CHECK (" col " <> '' AND " col " !~ '[/[:space:]]')"
#define PICO(col) col " bigint CHECK (" col " BETWEEN 0 AND 1000000000000)"

static const char
    m1_schema
        [] =
            "CREATE TABLE config_state (\n"
            "  id integer PRIMARY KEY CHECK (id = 1),\n"
            "  version bigint NOT NULL,\n"
            "  updated_at timestamptz NOT NULL DEFAULT now());\n"
            "INSERT INTO config_state (id, version) VALUES (1, 0);\n"

            "CREATE TABLE secrets (\n"
            "  name text PRIMARY KEY " NAME_CHECK(
                "name") ",\n"
                        "  backend text NOT NULL DEFAULT 'builtin' CHECK (backend IN ('builtin', "
                        "'vault', 'aws')),\n"
                        "  ciphertext bytea,\n"
                        "  master_key_id text,\n"
                        "  backend_ref text,\n" STAMPS ");\n"

                        "CREATE TABLE providers (\n"
                        "  name text PRIMARY KEY " NAME_CHECK(
                            "name") ",\n"
                                    "  driver text NOT NULL,\n"
                                    "  base_url text NOT NULL CHECK (base_url ~ '^https?://'),\n"
                                    "  headers jsonb NOT NULL DEFAULT '{}' CHECK "
                                    "(jsonb_typeof(headers) = 'object'),\n"
                                    "  options jsonb NOT NULL DEFAULT '{}' CHECK "
                                    "(jsonb_typeof(options) = 'object'),\n"
                                    "  credential_ref text REFERENCES secrets (name) ON UPDATE "
                                    "CASCADE,\n"
                                    "  enabled boolean NOT NULL DEFAULT true,\n"
                                    "  first_byte_timeout_ms integer NOT NULL DEFAULT 60000\n"
                                    "    CHECK (first_byte_timeout_ms BETWEEN 1 AND 3600000),\n"
                                    "  idle_timeout_ms integer NOT NULL DEFAULT 60000\n"
                                    "    CHECK (idle_timeout_ms BETWEEN 1 AND 3600000),\n" STAMPS
                                    ");\n"

                                    "CREATE TABLE routes (\n"
                                    "  name text PRIMARY KEY CHECK (name <> '' AND strpos(name, "
                                    "'/') = 0),\n"
                                    "  aliases text[] NOT NULL DEFAULT '{}',\n"
                                    "  role text UNIQUE CHECK (role IN ('default', 'summarize', "
                                    "'embedding', 'vision')),\n"
                                    "  capability text NOT NULL DEFAULT 'chat'\n"
                                    "    CHECK (capability IN ('chat', 'embeddings', 'vision')),\n"
                                    "  strategy text NOT NULL DEFAULT 'ordered'\n"
                                    "    CHECK (strategy IN ('ordered', 'price', 'latency', "
                                    "'auto', 'weighted')),\n" STAMPS ");\n"

                                    "CREATE TABLE route_entries (\n"
                                    "  route text NOT NULL REFERENCES routes (name) ON UPDATE "
                                    "CASCADE ON DELETE CASCADE,\n"
                                    "  position integer NOT NULL CHECK (position BETWEEN 0 AND "
                                    "31),\n"
                                    "  provider text NOT NULL REFERENCES providers (name) ON "
                                    "UPDATE CASCADE,\n"
                                    "  model text NOT NULL CHECK (model <> ''),\n"
                                    "  weight integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 0 "
                                    "AND 1000000),\n"
                                    "  high_cost boolean NOT NULL DEFAULT false,\n"
                                    "  tier smallint NOT NULL DEFAULT 0 CHECK (tier BETWEEN 0 AND "
                                    "9),\n" STAMPS ",\n"
                                    "  PRIMARY KEY (route, position),\n"
                                    "  UNIQUE (route, provider, model));\n"
                                    "CREATE INDEX route_entries_provider ON route_entries "
                                    "(provider);\n"

                                    "CREATE TABLE teams (\n"
                                    "  name text PRIMARY KEY " NAME_CHECK("name") ",\n"
                                                                                  "  description "
                                                                                  "text NOT NULL "
                                                                                  "DEFAULT "
                                                                                  "'',\n" STAMPS
                                                                                  ");\n"

                                                                                  "CREATE TABLE "
                                                                                  "projects (\n"
                                                                                  "  name text "
                                                                                  "PRIMARY "
                                                                                  "KEY " NAME_CHECK("name") ",\n"
                                                                                                            "  team text NOT NULL REFERENCES teams (name) ON UPDATE CASCADE,\n"
                                                                                                            "  description text NOT NULL DEFAULT '',\n" STAMPS
                                                                                                            ");\n"

                                                                                                            "CREATE TABLE api_keys (\n"
                                                                                                            "  id text PRIMARY KEY " NAME_CHECK(
                                                                                                                "id") ",\n"
                                                                                                                      "  name text NOT NULL DEFAULT '',\n"
                                                                                                                      "  prefix text NOT NULL,\n"
                                                                                                                      "  hash text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),\n"
                                                                                                                      "  status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),\n"
                                                                                                                      "  expires_at timestamptz,\n"
                                                                                                                      "  team text REFERENCES teams (name) ON UPDATE CASCADE,\n"
                                                                                                                      "  project text REFERENCES projects (name) ON UPDATE CASCADE,\n"
                                                                                                                      "  allow_routes text[],\n"
                                                                                                                      "  allow_providers text[],\n"
                                                                                                                      "  allow_models text[],\n" STAMPS
                                                                                                                      ");\n"

                                                                                                                      "CREATE TABLE price_overrides (\n"
                                                                                                                      "  provider text NOT NULL REFERENCES providers (name) ON UPDATE CASCADE ON DELETE CASCADE,\n"
                                                                                                                      "  model text NOT NULL CHECK (model <> ''),\n"
                                                                                                                      "  " PICO("input_price") ",\n"
                                                                                                                                               "  " PICO("output_price") ",\n"
                                                                                                                                                                         "  " PICO("cache_read_price") ",\n"
                                                                                                                                                                                                       "  " PICO("cache_write_5m_price") ",\n"
                                                                                                                                                                                                                                         "  " PICO("cache_write_1h_price") ",\n"
                                                                                                                                                                                                                                                                           "  currency text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),\n" STAMPS
                                                                                                                                                                                                                                                                           ",\n"
                                                                                                                                                                                                                                                                           "  PRIMARY KEY (provider, model));\n"

                                                                                                                                                                                                                                                                           "CREATE TABLE model_catalog (\n"
                                                                                                                                                                                                                                                                           "  id bigserial PRIMARY KEY,\n"
                                                                                                                                                                                                                                                                           "  provider text REFERENCES providers (name) ON UPDATE CASCADE ON DELETE CASCADE,\n"
                                                                                                                                                                                                                                                                           "  model text NOT NULL CHECK (model <> ''),\n"
                                                                                                                                                                                                                                                                           "  context_window integer CHECK (context_window > 0),\n"
                                                                                                                                                                                                                                                                           "  max_output_tokens integer CHECK (max_output_tokens > 0),\n"
                                                                                                                                                                                                                                                                           "  capabilities text[],\n"
                                                                                                                                                                                                                                                                           "  " PICO("input_price") ",\n"
                                                                                                                                                                                                                                                                                                    "  " PICO(
                                                                                                                                                                                                                                                                                                        "output_price") ",\n"
                                                                                                                                                                                                                                                                                                                        "  " PICO("cache_read_price") ",\n"
                                                                                                                                                                                                                                                                                                                                                      "  " PICO("cache_write_5m_price") ",\n"
                                                                                                                                                                                                                                                                                                                                                                                        "  " PICO(
                                                                                                                                                                                                                                                                                                                                                                                            "cache_write_1h_price") ",\n"
                                                                                                                                                                                                                                                                                                                                                                                                                    "  currency text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),\n" STAMPS
                                                                                                                                                                                                                                                                                                                                                                                                                    ",\n"
                                                                                                                                                                                                                                                                                                                                                                                                                    "  UNIQUE NULLS NOT DISTINCT (provider, model));\n"

                                                                                                                                                                                                                                                                                                                                                                                                                    "CREATE TABLE admin_tokens (\n"
                                                                                                                                                                                                                                                                                                                                                                                                                    "  id text PRIMARY KEY " NAME_CHECK(
                                                                                                                                                                                                                                                                                                                                                                                                                        "id") ",\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  name text NOT NULL UNIQUE CHECK (name <> ''),\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  hash text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),\n" STAMPS
                                                                                                                                                                                                                                                                                                                                                                                                                              ");\n"

                                                                                                                                                                                                                                                                                                                                                                                                                              "CREATE TABLE audit_log (\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  id bigserial PRIMARY KEY,\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  at timestamptz NOT NULL DEFAULT now(),\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  actor text NOT NULL,\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  action text NOT NULL CHECK (action IN ('create', 'update', 'delete')),\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  resource text NOT NULL,\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  resource_id text NOT NULL,\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  config_version bigint NOT NULL,\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  before jsonb,\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "  after jsonb);\n"
                                                                                                                                                                                                                                                                                                                                                                                                                              "CREATE INDEX audit_log_resource ON audit_log (resource, resource_id);\n";

/* A key the API disables (PATCH status) rather than revokes: the data
 * plane serves only "active" keys, so both stop a key; "disabled" can be
 * undone. */
static const char m2_key_status[] = "ALTER TABLE api_keys DROP CONSTRAINT api_keys_status_check;\n"
                                    "ALTER TABLE api_keys ADD CONSTRAINT api_keys_status_check\n"
                                    "  CHECK (status IN ('active', 'disabled', 'revoked'));\n";

/* The ledger: one row per upstream attempt, partitioned by month of the
 * attempt's start. The primary key (attempt_id, at) makes a re-sent row a
 * no-op (ON CONFLICT DO NOTHING), so a row lands exactly once however often
 * a data plane replays its spool. Partitions are created on demand by
 * llmgw_ledger_partition (the writer calls it for every month a batch
 * touches) and ahead of time by maintenance; there is no default partition,
 * so a month's partition can always be created. charges: what the attempt
 * took from limits (docs/budgets.md), applied by the limits migration's
 * trigger. */
static const char m3_ledger[] =
    "CREATE TABLE ledger (\n"
    "  at timestamptz NOT NULL,\n"
    "  attempt_id text NOT NULL CHECK (attempt_id <> ''),\n"
    "  request_id text NOT NULL,\n"
    "  attempt integer NOT NULL CHECK (attempt >= 1),\n"
    "  replica text NOT NULL,\n"
    "  key_id text,\n"
    "  team text,\n"
    "  project text,\n"
    "  route text,\n"
    "  provider text NOT NULL,\n"
    "  model text NOT NULL,\n"
    "  selector text,\n"
    "  session text,\n"
    "  agent text,\n"
    "  purpose text,\n"
    "  api text,\n"
    "  stream boolean NOT NULL DEFAULT false,\n"
    "  input_tokens bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),\n"
    "  cache_read_tokens bigint NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),\n"
    "  cache_write_5m_tokens bigint NOT NULL DEFAULT 0 CHECK (cache_write_5m_tokens >= 0),\n"
    "  cache_write_1h_tokens bigint NOT NULL DEFAULT 0 CHECK (cache_write_1h_tokens >= 0),\n"
    "  output_tokens bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),\n"
    "  reasoning_tokens bigint NOT NULL DEFAULT 0 CHECK (reasoning_tokens >= 0),\n"
    "  latency_ms bigint NOT NULL,\n"
    "  ttfb_ms bigint,\n"
    "  ttfc_ms bigint,\n"
    "  status integer NOT NULL,\n"
    "  failure_class text,\n"
    "  cost_picodollars bigint,\n"
    "  currency text NOT NULL DEFAULT 'USD',\n"
    "  snapshot_version bigint NOT NULL,\n"
    "  charges jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(charges) = 'array'),\n"
    "  received_at timestamptz NOT NULL DEFAULT now(),\n"
    "  PRIMARY KEY (attempt_id, at)\n"
    ") PARTITION BY RANGE (at);\n"
    "CREATE INDEX ledger_at ON ledger (at);\n"
    "CREATE INDEX ledger_request ON ledger (request_id);\n"
    "CREATE FUNCTION llmgw_ledger_partition(m timestamptz) RETURNS void LANGUAGE plpgsql AS $$\n"
    "DECLARE\n"
    "  lo timestamptz := date_trunc('month', m AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';\n"
    "  hi timestamptz := (date_trunc('month', m AT TIME ZONE 'UTC') + interval '1 month')\n"
    "                    AT TIME ZONE 'UTC';\n"
    "  n text := 'ledger_' || to_char(m AT TIME ZONE 'UTC', 'YYYY_MM');\n"
    "BEGIN\n"
    "  IF to_regclass(n) IS NOT NULL THEN RETURN; END IF;\n"
    "  PERFORM pg_advisory_xact_lock(7019892171);\n"
    "  IF to_regclass(n) IS NOT NULL THEN RETURN; END IF;\n"
    "  EXECUTE format('CREATE TABLE %I PARTITION OF ledger FOR VALUES FROM (%L) TO (%L)',\n"
    "                 n, lo, hi);\n"
    "END $$;\n"
    "SELECT llmgw_ledger_partition(now());\n"
    "SELECT llmgw_ledger_partition(now() + interval '1 month');\n";

/* A price per reasoning token where a model bills
 * reasoning apart from its other output (NULL: reasoning tokens are output
 * tokens at the output price), and what the LiteLLM import records about a
 * catalog row: who last wrote it ('admin' through the API, 'litellm' by
 * import-catalog), LiteLLM's mode and provider name. An import is audited
 * as its own action. */
static const char m4_catalog_source[] =
    "ALTER TABLE price_overrides ADD COLUMN reasoning_price bigint\n"
    "  CHECK (reasoning_price BETWEEN 0 AND 1000000000000);\n"
    "ALTER TABLE model_catalog ADD COLUMN reasoning_price bigint\n"
    "    CHECK (reasoning_price BETWEEN 0 AND 1000000000000),\n"
    "  ADD COLUMN mode text CHECK (mode <> '' AND length(mode) <= 64),\n"
    "  ADD COLUMN source text NOT NULL DEFAULT 'admin' CHECK (source IN ('admin', 'litellm')),\n"
    "  ADD COLUMN litellm_provider text\n"
    "    CHECK (litellm_provider <> '' AND length(litellm_provider) <= 128);\n"
    "ALTER TABLE audit_log DROP CONSTRAINT audit_log_action_check;\n"
    "ALTER TABLE audit_log ADD CONSTRAINT audit_log_action_check\n"
    "  CHECK (action IN ('create', 'update', 'delete', 'import'));\n";

/* Budgets and rate limits (docs/budgets.md). One uniform limit: a scope (a
 * key, a team or a project), a metric (cost in picodollars, requests or
 * tokens), a UTC period and an amount. Postgres is the only authority:
 * limit_windows holds what was spent in each period, limit_leases the
 * slices of the remainder granted to data-plane replicas, and
 *   remaining = amount - spent - sum(outstanding of live leases)
 * is computed under the window row's lock (cp_leases.c). Neither table has
 * a foreign key to limits: the ledger trigger below must never fail an
 * insert (a ledger row is never lost), so a charge for a limit deleted
 * meanwhile still lands, and the limit's delete trigger sweeps its rows.
 *
 * The ledger trigger applies each row's charges exactly once: the writer's
 * insert is ON CONFLICT DO NOTHING, and a row that is not inserted fires
 * nothing. Charges are applied in (limit, window) order so that two
 * transactions never lock the same window rows in opposite orders; a
 * malformed element is skipped, never an error. (Migration 7 replaces this
 * per-row trigger: a multi-row batch could still lock in opposite orders.) */
static const char m5_limits[] =
    "ALTER TABLE teams ADD COLUMN allow_routes text[],\n"
    "  ADD COLUMN allow_providers text[],\n"
    "  ADD COLUMN allow_models text[],\n"
    "  ADD COLUMN require_budget boolean NOT NULL DEFAULT false;\n"
    "CREATE TABLE limits (\n"
    "  id text PRIMARY KEY CHECK (id <> '' AND id !~ '[/[:space:]]' AND length(id) <= 63),\n"
    "  scope_kind text NOT NULL CHECK (scope_kind IN ('key', 'team', 'project')),\n"
    "  scope text NOT NULL CHECK (scope <> ''),\n"
    "  metric text NOT NULL CHECK (metric IN ('cost', 'requests', 'tokens')),\n"
    "  period text NOT NULL CHECK (period IN ('minute', 'day', 'month')),\n"
    "  amount bigint NOT NULL CHECK (amount > 0),\n"
    "  reservation text NOT NULL DEFAULT 'estimate'\n"
    "    CHECK (reservation IN ('estimate', 'worst_case')),\n"
    "  offline text NOT NULL DEFAULT 'fail_open' CHECK (offline IN ('fail_open', "
    "'fail_closed')),\n"
    "  currency text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),\n"
    "  enabled boolean NOT NULL DEFAULT true,\n"
    "  description text NOT NULL DEFAULT '',\n"
    "  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),\n"
    "  created_at timestamptz NOT NULL DEFAULT now(),\n"
    "  updated_at timestamptz NOT NULL DEFAULT now());\n"
    "CREATE INDEX limits_scope ON limits (scope_kind, scope);\n"
    "CREATE TABLE limit_windows (\n"
    "  limit_id text NOT NULL,\n"
    "  window_start timestamptz NOT NULL,\n"
    "  spent bigint NOT NULL DEFAULT 0,\n"
    "  updated_at timestamptz NOT NULL DEFAULT now(),\n"
    "  PRIMARY KEY (limit_id, window_start));\n"
    "CREATE TABLE limit_leases (\n"
    "  id text PRIMARY KEY,\n"
    "  limit_id text NOT NULL,\n"
    "  window_start timestamptz NOT NULL,\n"
    "  replica text NOT NULL,\n"
    "  granted bigint NOT NULL CHECK (granted >= 0),\n"
    "  consumed bigint NOT NULL DEFAULT 0,\n"
    "  released bigint NOT NULL DEFAULT 0,\n"
    "  created_at timestamptz NOT NULL DEFAULT now(),\n"
    "  expires_at timestamptz NOT NULL,\n"
    "  expired boolean NOT NULL DEFAULT false);\n"
    "CREATE INDEX limit_leases_window ON limit_leases (limit_id, window_start) WHERE NOT "
    "expired;\n"
    "CREATE FUNCTION llmgw_limit_deleted() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  DELETE FROM limit_windows WHERE limit_id = OLD.id;\n"
    "  DELETE FROM limit_leases WHERE limit_id = OLD.id;\n"
    "  RETURN NULL;\n"
    "END $$;\n"
    "CREATE TRIGGER limits_deleted AFTER DELETE ON limits FOR EACH ROW\n"
    "  EXECUTE FUNCTION llmgw_limit_deleted();\n"
    "CREATE FUNCTION llmgw_ledger_charges() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    "DECLARE c record;\n"
    "BEGIN\n"
    "  FOR c IN\n"
    "    SELECT x->>'limit_id' AS limit_id,\n"
    "           timestamptz 'epoch' + (x->>'window_start_ms')::bigint * interval '1 "
    "millisecond'\n"
    "             AS ws,\n"
    "           nullif(x->>'lease_id', '') AS lease_id,\n"
    "           (x->>'amount')::bigint AS amount\n"
    "      FROM jsonb_array_elements(NEW.charges) x\n"
    "     WHERE jsonb_typeof(x) = 'object' AND coalesce(x->>'limit_id', '') <> ''\n"
    "       AND coalesce(x->>'window_start_ms', '') ~ '^[0-9]{1,15}$'\n"
    "       AND coalesce(x->>'amount', '') ~ '^[0-9]{1,18}$'\n"
    "     ORDER BY 1, 2\n"
    "  LOOP\n"
    "    CONTINUE WHEN c.amount <= 0;\n"
    "    INSERT INTO limit_windows AS w (limit_id, window_start, spent)\n"
    "      VALUES (c.limit_id, c.ws, c.amount)\n"
    "      ON CONFLICT (limit_id, window_start)\n"
    "      DO UPDATE SET spent = w.spent + EXCLUDED.spent, updated_at = now();\n"
    "    IF c.lease_id IS NOT NULL THEN\n"
    "      UPDATE limit_leases SET consumed = consumed + c.amount\n"
    "       WHERE id = c.lease_id AND limit_id = c.limit_id;\n"
    "    END IF;\n"
    "  END LOOP;\n"
    "  RETURN NULL;\n"
    "END $$;\n"
    "CREATE TRIGGER ledger_charges AFTER INSERT ON ledger FOR EACH ROW\n"
    "  WHEN (NEW.charges <> '[]'::jsonb) EXECUTE FUNCTION llmgw_ledger_charges();\n";

/* Ledger rows the table refused (their data, a month whose partition was
 * detached, a charge the trigger could not apply), kept whole with the
 * reason, so the writer can acknowledge them without losing money: an
 * operator fixes and re-inserts them (docs/ledger.md). */
static const char m6_ledger_rejects[] = "CREATE TABLE ledger_rejects (\n"
                                        "  id bigserial PRIMARY KEY,\n"
                                        "  received_at timestamptz NOT NULL DEFAULT now(),\n"
                                        "  replica text NOT NULL,\n"
                                        "  attempt_id text,\n"
                                        "  sqlstate text,\n"
                                        "  error text NOT NULL,\n"
                                        "  row jsonb NOT NULL);\n"
                                        "CREATE INDEX ledger_rejects_attempt ON ledger_rejects "
                                        "(attempt_id);\n";

/* Budgets, the review's fixes (docs/budgets.md):
 * - a lease is answered per (replica, req): req is unique per data-plane
 *   process start, so a request sent again (its grant's reply lost with
 *   its stream) gets the lease it already has, not a second one;
 * - a lease is settled by its replica's final report, which says what it
 *   charged under it: until then, even expired, it stays outstanding (for
 *   the control plane's --lease-grace-s past its expiry), so allowance
 *   whose charges have not landed is never handed out twice; once settled,
 *   only the charges still on their way stay outstanding;
 * - the charges trigger runs once per INSERT statement over its inserted
 *   rows (a transition table; ON CONFLICT DO NOTHING leaves replays out):
 *   it locks the limits charged (FOR KEY SHARE, in id order, so a limit
 *   being deleted waits), then the windows in (limit, window) order, then
 *   the leases in id order, each once. Every writer (the ledger's batches,
 *   grants, reports, expiry, deletes) takes these rows in that order, so
 *   two writers never wait on each other in a cycle;
 * - a charge for a limit that does not exist, or that was created after
 *   the attempt began and is not carried by a lease of the limit (it was
 *   meant for a deleted namesake), is skipped: a deleted and recreated
 *   limit starts from nothing;
 * - sums saturate at the bigint's maximum instead of failing the insert:
 *   a window that has spent that much is depleted either way, and a ledger
 *   row is never made unstorable by its charges.
 * Windows and leases of limits that no longer exist (the old trigger could
 * recreate them) go. */
#define BIGMAX "9223372036854775807"
static const char m7_lease_settlement[] =
    "ALTER TABLE limit_leases ADD COLUMN req bigint,\n"
    "  ADD COLUMN charged bigint NOT NULL DEFAULT 0,\n"
    "  ADD COLUMN settled boolean NOT NULL DEFAULT false;\n"
    "CREATE UNIQUE INDEX limit_leases_req ON limit_leases (replica, req) WHERE req IS NOT NULL;\n"
    "DELETE FROM limit_windows w WHERE NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = "
    "w.limit_id);\n"
    "DELETE FROM limit_leases s WHERE NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = "
    "s.limit_id);\n"
    "DROP TRIGGER ledger_charges ON ledger;\n"
    "DROP FUNCTION llmgw_ledger_charges();\n"
    "CREATE FUNCTION llmgw_ledger_charges() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    "DECLARE c record;\n"
    "BEGIN\n"
    "  FOR c IN\n"
    "    WITH x AS (\n"
    "      SELECT n.at, e->>'limit_id' AS limit_id,\n"
    "             CASE WHEN e->>'window_start_ms' ~ '^[0-9]{1,15}$' THEN timestamptz 'epoch'\n"
    "               + (e->>'window_start_ms')::bigint * interval '1 millisecond' END AS ws,\n"
    "             nullif(e->>'lease_id', '') AS lease_id,\n"
    "             CASE WHEN e->>'amount' ~ '^[0-9]{1,18}$' THEN (e->>'amount')::numeric END\n"
    "               AS amount\n"
    "        FROM new_rows n, jsonb_array_elements(n.charges) e\n"
    "       WHERE n.charges <> '[]'::jsonb AND jsonb_typeof(e) = 'object'\n"
    "         AND coalesce(e->>'limit_id', '') <> ''),\n"
    "    l AS (SELECT id, created_at FROM limits WHERE id IN (SELECT limit_id FROM x)\n"
    "           ORDER BY id FOR KEY SHARE),\n"
    "    v AS (SELECT x.* FROM x JOIN l ON l.id = x.limit_id\n"
    "           WHERE x.ws IS NOT NULL AND x.amount > 0\n"
    "             AND (x.at >= l.created_at OR EXISTS (SELECT 1 FROM limit_leases s\n"
    "                   WHERE s.id = x.lease_id AND s.limit_id = x.limit_id)))\n"
    "    SELECT 0 AS kind, limit_id, ws, NULL::text AS lease_id,\n"
    "           least(sum(amount), " BIGMAX ")::bigint AS amount\n"
    "      FROM v GROUP BY limit_id, ws\n"
    "    UNION ALL\n"
    "    SELECT 1, limit_id, ws, lease_id, least(sum(amount), " BIGMAX ")::bigint\n"
    "      FROM v WHERE lease_id IS NOT NULL GROUP BY lease_id, limit_id, ws\n"
    "    ORDER BY kind, lease_id, limit_id, ws\n"
    "  LOOP\n"
    "    IF c.kind = 0 THEN\n"
    "      INSERT INTO limit_windows AS w (limit_id, window_start, spent)\n"
    "        VALUES (c.limit_id, c.ws, c.amount)\n"
    "        ON CONFLICT (limit_id, window_start) DO UPDATE\n"
    "        SET spent = least(w.spent::numeric + EXCLUDED.spent, " BIGMAX ")::bigint,\n"
    "            updated_at = now();\n"
    "    ELSE\n"
    "      UPDATE limit_leases SET consumed = least(consumed::numeric + c.amount, " BIGMAX
    ")::bigint\n"
    "       WHERE id = c.lease_id AND limit_id = c.limit_id AND window_start = c.ws;\n"
    "    END IF;\n"
    "  END LOOP;\n"
    "  RETURN NULL;\n"
    "END $$;\n"
    "CREATE TRIGGER ledger_charges AFTER INSERT ON ledger REFERENCING NEW TABLE AS new_rows\n"
    "  FOR EACH STATEMENT EXECUTE FUNCTION llmgw_ledger_charges();\n";
#undef BIGMAX

/* Projects carry allowlists like teams (null: any, []: nothing); a key's
 * target must pass its own, its team's and its project's. */
static const char m8_project_allowlists[] = "ALTER TABLE projects ADD COLUMN allow_routes text[],\n"
                                            "  ADD COLUMN allow_providers text[],\n"
                                            "  ADD COLUMN allow_models text[];\n";

/* A route's failover budget for requests that set none (NULL: the data
 * plane's default); the data plane's bound is the same. */
static const char m9_route_fallback_timeout[] =
    "ALTER TABLE routes ADD COLUMN fallback_timeout_ms integer\n"
    "  CHECK (fallback_timeout_ms BETWEEN 1 AND 600000);\n";

/* An attempt whose answer was cut before the provider's usage came is
 * billed from the gateway's estimate; the row says so. */
static const char m10_ledger_usage_estimated[] =
    "ALTER TABLE ledger ADD COLUMN usage_estimated boolean NOT NULL DEFAULT false;\n";

/* How long one attempt may run, answer included (NULL: the data plane's
 * default); the data plane's bound. */
static const char m13_route_max_duration[] =
    "ALTER TABLE routes ADD COLUMN max_duration_ms integer\n"
    "  CHECK (max_duration_ms BETWEEN 1 AND 86400000);\n";

/* A ledger row's cost is never negative (a data plane's word is checked
 * by the writer too, cp_ledger.c's row_problem). */
static const char m12_ledger_cost_check[] =
    "ALTER TABLE ledger ADD CONSTRAINT ledger_cost_nonnegative CHECK (cost_picodollars >= 0);\n";

/* A cost limit keeps targets it cannot price out of a key's reach unless
 * it says so (before, its offline policy fail_open let them through free). */
static const char m11_limit_unpriced[] =
    "ALTER TABLE limits ADD COLUMN unpriced text NOT NULL DEFAULT 'refuse'\n"
    "  CHECK (unpriced IN ('refuse', 'allow'));\n";

/* Admin tokens carry a scope: read (GET only), operator (everything but
 * admin tokens), admin (everything). Tokens made before scopes keep the
 * power they had. */
static const char m14_admin_token_scope[] =
    "ALTER TABLE admin_tokens ADD COLUMN scope text NOT NULL DEFAULT 'admin'\n"
    "  CHECK (scope IN ('read', 'operator', 'admin'));\n"
    "ALTER TABLE admin_tokens ALTER COLUMN scope DROP DEFAULT;\n";

/* The snapshot builder reads the audit rows of the versions since its last
 * build (the writes to re-read), and the active keys by expiry (the next
 * one, and those that expired since it last looked): neither scans a
 * table. */
static const char m15_snapshot_incremental[] =
    "CREATE INDEX audit_log_config_version ON audit_log (config_version);\n"
    "CREATE INDEX api_keys_active_expiry ON api_keys (expires_at) WHERE status = 'active';\n";

/* The response cache (docs/cache.md). A route's settings: on when
 * cache_ttl_s is set (the data plane's bound, 30 days), whom an answer is
 * shared with, and whether a request without a temperature counts as
 * deterministic. A key's and a team's cache_ttl_s override the routes'
 * (NULL: follow the route, 0: off). A ledger row served from the cache
 * says so, with what the original attempt cost (NULL: unknown, or not a
 * hit); its own cost and tokens are 0. */
static const char m16_response_cache[] =
    "ALTER TABLE routes ADD COLUMN cache_ttl_s integer\n"
    "    CHECK (cache_ttl_s BETWEEN 1 AND 2592000),\n"
    "  ADD COLUMN cache_scope text NOT NULL DEFAULT 'team'\n"
    "    CHECK (cache_scope IN ('team', 'key', 'project', 'global')),\n"
    "  ADD COLUMN cache_deterministic boolean NOT NULL DEFAULT false;\n"
    "ALTER TABLE api_keys ADD COLUMN cache_ttl_s integer\n"
    "  CHECK (cache_ttl_s BETWEEN 0 AND 2592000);\n"
    "ALTER TABLE teams ADD COLUMN cache_ttl_s integer\n"
    "  CHECK (cache_ttl_s BETWEEN 0 AND 2592000);\n"
    "ALTER TABLE ledger ADD COLUMN cache_hit boolean NOT NULL DEFAULT false,\n"
    "  ADD COLUMN saved_picodollars bigint CHECK (saved_picodollars >= 0);\n";

/* Guardrails (docs/guardrails.md). The prompt-injection rules as data:
 * each one an id, a severity, a description, and a phrase or a POSIX
 * extended regular expression matched against the normalized text (the
 * admin API checks that a regex compiles and holds no back-reference). A
 * disabled rule stays in the table and out of the snapshot. The table is
 * seeded once, here, from common/guard_rules.json as compiled in (m17_seed
 * with it as $1): deleting or disabling a default is the operator's right,
 * and a later release's defaults do not come back on their own. A route's
 * guard and judge settings are one jsonb object each (NULL: off), checked
 * by the admin API (cp_res_routes.c); a key's and a team's guard_policy
 * overrides the route's (NULL: the route's). */
static const char m17_guard[] =
    "CREATE TABLE guard_rules (\n"
    "  id text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),\n"
    "  severity text NOT NULL CHECK (severity IN ('low', 'medium', 'high')),\n"
    "  description text NOT NULL DEFAULT '' CHECK (octet_length(description) <= 500),\n"
    "  kind text NOT NULL CHECK (kind IN ('phrase', 'regex')),\n"
    "  pattern text NOT NULL CHECK (octet_length(pattern) BETWEEN 1 AND 1024),\n"
    "  enabled boolean NOT NULL DEFAULT true,\n" STAMPS ");\n"
    "ALTER TABLE routes ADD COLUMN guard jsonb CHECK (jsonb_typeof(guard) = 'object'),\n"
    "  ADD COLUMN judge jsonb CHECK (jsonb_typeof(judge) = 'object');\n"
    "ALTER TABLE api_keys ADD COLUMN guard_policy text\n"
    "  CHECK (guard_policy IN ('off', 'log', 'block'));\n"
    "ALTER TABLE teams ADD COLUMN guard_policy text\n"
    "  CHECK (guard_policy IN ('off', 'log', 'block'));\n";
static const char m17_seed[] =
    "INSERT INTO guard_rules (id, severity, description, kind, pattern)\n"
    "SELECT r->>'id', r->>'severity', coalesce(r->>'description', ''), r->>'kind', "
    "r->>'pattern'\n"
    "FROM jsonb_array_elements($1::jsonb -> 'rules') AS r";

/* common/guard_rules.json as the data plane's rule engine embeds it. */
static const char *guard_rules_json(void)
{
    return dp_guard_rules_default_json(NULL);
}

/* Data a migration loads once its statements ran, in its transaction: sql
 * with param as $1 (data compiled in, too big or too structured for the
 * migration's text). */
static const struct {
    int version;
    const char *sql;
    const char *(*param)(void);
} seeds[] = {{17, m17_seed, guard_rules_json}};

/* Judgements (docs/ledger.md, "Judgements"): a sampled answer's score from
 * its route's judge, one per judged request, sent by the data planes on the
 * Report stream and stored by the ledger writer idempotently by request_id.
 * prompt_enc and answer_enc are the text a route chose to keep, sealed
 * like secrets (cp_secrets, AAD "judgement/<request_id>#prompt" or
 * "#answer") under the master key master_key_id names; NULL when nothing
 * was kept. */
static const char m18_judgements[] =
    "CREATE TABLE judgements (\n"
    "  request_id text PRIMARY KEY CHECK (request_id <> ''),\n"
    "  attempt_id text,\n"
    "  judge_request_id text,\n"
    "  route text,\n"
    "  provider text,\n"
    "  model text,\n"
    "  key_id text,\n"
    "  team text,\n"
    "  project text,\n"
    "  judge_route text,\n"
    "  score integer NOT NULL,\n"
    "  scale_min integer NOT NULL,\n"
    "  scale_max integer NOT NULL,\n"
    "  pass boolean NOT NULL,\n"
    "  label text,\n"
    "  at timestamptz NOT NULL,\n"
    "  snapshot_version bigint NOT NULL DEFAULT 0,\n"
    "  replica text NOT NULL DEFAULT '',\n"
    "  prompt_enc bytea,\n"
    "  answer_enc bytea,\n"
    "  master_key_id text,\n"
    "  created_at timestamptz NOT NULL DEFAULT now(),\n"
    "  CONSTRAINT judgements_scale CHECK (scale_min < scale_max\n"
    "    AND score BETWEEN scale_min AND scale_max),\n"
    "  CONSTRAINT judgements_sealed CHECK ((prompt_enc IS NULL AND answer_enc IS NULL)\n"
    "    OR master_key_id IS NOT NULL));\n"
    "CREATE INDEX judgements_route_at ON judgements (route, at);\n"
    "CREATE INDEX judgements_model_at ON judgements (model, at);\n"
    "CREATE INDEX judgements_at ON judgements (at);\n";

/* Media (docs/pricing.md, docs/ledger.md). Prices beside the token ones,
 * each picodollars, 0..10^12, NULL unpriced: per second of input audio
 * (transcription), per input character (speech), per output image (the
 * default when image_prices names neither the image's quality and size nor
 * its size), and per input and output token that is audio or image.
 * image_prices: {"<size>" | "<quality>/<size>": picodollars}, checked by
 * the admin API as the data plane checks it. A ledger row's media units:
 * input audio in milliseconds, speech characters, images answered. Added
 * to the partitioned parent (PostgreSQL 11+ adds them to every partition;
 * a constant default rewrites nothing); the writer refuses negative units
 * (cp_ledger.c's row_problem), so no CHECK has to scan the ledger. Routes
 * may now serve the media capabilities. */
#define MEDIA_PRICES                                                                               \
    "  ADD COLUMN audio_second_price bigint CHECK (audio_second_price BETWEEN 0 AND "              \
    "1000000000000),\n"                                                                            \
    "  ADD COLUMN character_price bigint CHECK (character_price BETWEEN 0 AND 1000000000000),\n"   \
    "  ADD COLUMN image_price bigint CHECK (image_price BETWEEN 0 AND 1000000000000),\n"           \
    "  ADD COLUMN media_input_price bigint CHECK (media_input_price BETWEEN 0 AND "                \
    "1000000000000),\n"                                                                            \
    "  ADD COLUMN media_output_price bigint CHECK (media_output_price BETWEEN 0 AND "              \
    "1000000000000),\n"                                                                            \
    "  ADD COLUMN image_prices jsonb CHECK (jsonb_typeof(image_prices) = 'object');\n"
static const char m19_media[] =
    "ALTER TABLE model_catalog\n" MEDIA_PRICES "ALTER TABLE price_overrides\n" MEDIA_PRICES
    "ALTER TABLE ledger ADD COLUMN audio_ms bigint NOT NULL DEFAULT 0,\n"
    "  ADD COLUMN characters bigint NOT NULL DEFAULT 0,\n"
    "  ADD COLUMN images bigint NOT NULL DEFAULT 0;\n"
    "ALTER TABLE routes DROP CONSTRAINT routes_capability_check;\n"
    "ALTER TABLE routes ADD CONSTRAINT routes_capability_check\n"
    "  CHECK (capability IN ('chat', 'embeddings', 'vision', 'transcription', 'speech', "
    "'image'));\n";

const struct cp_migration cp_migrations[] = {
    {1, "initial schema", m1_schema},
    {2, "api key status disabled", m2_key_status},
    {3, "ledger", m3_ledger},
    {4, "catalog reasoning price and source", m4_catalog_source},
    {5, "limits, leases, team allowlists", m5_limits},
    {6, "ledger rejects", m6_ledger_rejects},
    {7, "lease settlement, statement-level charges", m7_lease_settlement},
    {8, "project allowlists", m8_project_allowlists},
    {9, "route failover budget", m9_route_fallback_timeout},
    {10, "ledger usage estimated", m10_ledger_usage_estimated},
    {11, "limit unpriced policy", m11_limit_unpriced},
    {12, "ledger cost not negative", m12_ledger_cost_check},
    {13, "route max duration", m13_route_max_duration},
    {14, "admin token scope", m14_admin_token_scope},
    {15, "snapshot builder indexes", m15_snapshot_incremental},
    {16, "response cache", m16_response_cache},
    {17, "guard", m17_guard},
    {18, "judgements", m18_judgements},
    {19, "media prices and units", m19_media},
};
const size_t cp_nmigrations = sizeof(cp_migrations) / sizeof(cp_migrations[0]);

int cp_migrate_latest(void)
{
    return cp_migrations[cp_nmigrations - 1].version;
}

/* Takes the lock inside the current transaction; released at its end. The
 * connection's statement and lock timeouts (cp_db_connect) are lifted for
 * this transaction: another replica may hold the lock through a long
 * migration, and a migration may rewrite a big table. */
static int lock(struct cp_db *db, struct cp_db_err *err)
{
    char key[32];
    snprintf(key, sizeof(key), "%lld", CP_MIGRATE_LOCK_KEY);
    const char *p[] = {key};
    if (cp_db_cmd(db, "SET LOCAL statement_timeout = 0", 0, NULL, err) ||
        cp_db_cmd(db, "SET LOCAL lock_timeout = 0", 0, NULL, err))
        return GW_EIO;
    return cp_db_cmd(db, "SELECT pg_advisory_xact_lock($1::bigint)", 1, p, err);
}

static int apply_one(struct cp_db *db, const struct cp_migration *m, int *applied,
                     struct cp_db_err *err)
{
    char v[16];
    snprintf(v, sizeof(v), "%d", m->version);
    const char *p[] = {v};
    if (cp_db_begin(db, err) || lock(db, err))
        goto fail;
    PGresult *r =
        cp_db_exec(db, NULL, "SELECT 1 FROM schema_migrations WHERE version = $1", 1, p, err);
    if (!r)
        goto fail;
    int done = PQntuples(r) > 0;
    PQclear(r);
    if (done) {
        cp_db_rollback(db);
        return GW_OK;
    }
    /* The simple-query protocol: a migration may hold several statements. */
    r = PQexec(cp_db_conn(db), m->sql);
    ExecStatusType st = PQresultStatus(r); /* the last statement's: it may be a SELECT */
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", PQerrorMessage(cp_db_conn(db)));
        snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", state ? state : "");
        snprintf(err->message, sizeof(err->message), "migration %d (%s): %s", m->version, m->name,
                 msg);
        PQclear(r);
        cp_db_rollback(db);
        return GW_EIO;
    }
    PQclear(r);
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        const char *seed[] = {seeds[i].param()};
        if (seeds[i].version != m->version || !cp_db_cmd(db, seeds[i].sql, 1, seed, err))
            continue;
        char msg[sizeof(err->message)];
        snprintf(msg, sizeof(msg), "%s", err->message);
        snprintf(err->message, sizeof(err->message), "migration %d (%s), its seed: %.400s",
                 m->version, m->name, msg);
        goto fail;
    }
    if (cp_db_cmd(db, "INSERT INTO schema_migrations (version) VALUES ($1)", 1, p, err) ||
        cp_db_commit(db, err))
        goto fail;
    gw_logf(GW_LOG_INFO, "migration applied", "{s:i,s:s}", "version", m->version, "name", m->name);
    (*applied)++;
    return GW_OK;
fail:
    cp_db_rollback(db);
    return GW_EIO;
}

int cp_migrate_run(struct cp_db *db, int *applied, struct cp_db_err *err)
{
    int n = 0;
    if (applied)
        *applied = 0;
    /* CREATE TABLE IF NOT EXISTS races with itself (a duplicate pg_type
     * row), so even the bookkeeping table is created under the lock. */
    if (cp_db_begin(db, err) || lock(db, err) ||
        cp_db_cmd(db,
                  "CREATE TABLE IF NOT EXISTS schema_migrations (\n"
                  "  version integer PRIMARY KEY,\n"
                  "  applied_at timestamptz NOT NULL DEFAULT now())",
                  0, NULL, err) ||
        cp_db_commit(db, err)) {
        cp_db_rollback(db);
        return GW_EIO;
    }
    for (size_t i = 0; i < cp_nmigrations; i++)
        if (apply_one(db, &cp_migrations[i], &n, err) != GW_OK) {
            if (applied)
                *applied = n;
            return GW_EIO;
        }
    if (applied)
        *applied = n;
    return GW_OK;
}
