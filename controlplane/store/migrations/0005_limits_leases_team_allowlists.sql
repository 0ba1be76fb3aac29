-- Budgets and rate limits (docs/budgets.md). One uniform limit: a scope (a
-- key, a team or a project), a metric (cost in picodollars, requests or
-- tokens), a UTC period and an amount. Postgres is the only authority:
-- limit_windows holds what was spent in each period, limit_leases the
-- slices of the remainder granted to data-plane replicas, and
--   remaining = amount - spent - sum(outstanding of live leases)
-- is computed under the window row's lock (cp_leases.c). Neither table has
-- a foreign key to limits: the ledger trigger below must never fail an
-- insert (a ledger row is never lost), so a charge for a limit deleted
-- meanwhile still lands, and the limit's delete trigger sweeps its rows.
--
-- The ledger trigger applies each row's charges exactly once: the writer's
-- insert is ON CONFLICT DO NOTHING, and a row that is not inserted fires
-- nothing. Charges are applied in (limit, window) order so that two
-- transactions never lock the same window rows in opposite orders; a
-- malformed element is skipped, never an error. (Migration 7 replaces this
-- per-row trigger: a multi-row batch could still lock in opposite orders.)

ALTER TABLE teams ADD COLUMN allow_routes text[],
  ADD COLUMN allow_providers text[],
  ADD COLUMN allow_models text[],
  ADD COLUMN require_budget boolean NOT NULL DEFAULT false;
CREATE TABLE limits (
  id text PRIMARY KEY CHECK (id <> '' AND id !~ '[/[:space:]]' AND length(id) <= 63),
  scope_kind text NOT NULL CHECK (scope_kind IN ('key', 'team', 'project')),
  scope text NOT NULL CHECK (scope <> ''),
  metric text NOT NULL CHECK (metric IN ('cost', 'requests', 'tokens')),
  period text NOT NULL CHECK (period IN ('minute', 'day', 'month')),
  amount bigint NOT NULL CHECK (amount > 0),
  reservation text NOT NULL DEFAULT 'estimate'
    CHECK (reservation IN ('estimate', 'worst_case')),
  offline text NOT NULL DEFAULT 'fail_open' CHECK (offline IN ('fail_open', 'fail_closed')),
  currency text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$'),
  enabled boolean NOT NULL DEFAULT true,
  description text NOT NULL DEFAULT '',
  version bigint NOT NULL DEFAULT 1 CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX limits_scope ON limits (scope_kind, scope);
CREATE TABLE limit_windows (
  limit_id text NOT NULL,
  window_start timestamptz NOT NULL,
  spent bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (limit_id, window_start));
CREATE TABLE limit_leases (
  id text PRIMARY KEY,
  limit_id text NOT NULL,
  window_start timestamptz NOT NULL,
  replica text NOT NULL,
  granted bigint NOT NULL CHECK (granted >= 0),
  consumed bigint NOT NULL DEFAULT 0,
  released bigint NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  expired boolean NOT NULL DEFAULT false);
CREATE INDEX limit_leases_window ON limit_leases (limit_id, window_start) WHERE NOT expired;
CREATE FUNCTION llmgw_limit_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM limit_windows WHERE limit_id = OLD.id;
  DELETE FROM limit_leases WHERE limit_id = OLD.id;
  RETURN NULL;
END $$;
CREATE TRIGGER limits_deleted AFTER DELETE ON limits FOR EACH ROW
  EXECUTE FUNCTION llmgw_limit_deleted();
CREATE FUNCTION llmgw_ledger_charges() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
  FOR c IN
    SELECT x->>'limit_id' AS limit_id,
           timestamptz 'epoch' + (x->>'window_start_ms')::bigint * interval '1 millisecond'
             AS ws,
           nullif(x->>'lease_id', '') AS lease_id,
           (x->>'amount')::bigint AS amount
      FROM jsonb_array_elements(NEW.charges) x
     WHERE jsonb_typeof(x) = 'object' AND coalesce(x->>'limit_id', '') <> ''
       AND coalesce(x->>'window_start_ms', '') ~ '^[0-9]{1,15}$'
       AND coalesce(x->>'amount', '') ~ '^[0-9]{1,18}$'
     ORDER BY 1, 2
  LOOP
    CONTINUE WHEN c.amount <= 0;
    INSERT INTO limit_windows AS w (limit_id, window_start, spent)
      VALUES (c.limit_id, c.ws, c.amount)
      ON CONFLICT (limit_id, window_start)
      DO UPDATE SET spent = w.spent + EXCLUDED.spent, updated_at = now();
    IF c.lease_id IS NOT NULL THEN
      UPDATE limit_leases SET consumed = consumed + c.amount
       WHERE id = c.lease_id AND limit_id = c.limit_id;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
CREATE TRIGGER ledger_charges AFTER INSERT ON ledger FOR EACH ROW
  WHEN (NEW.charges <> '[]'::jsonb) EXECUTE FUNCTION llmgw_ledger_charges();
