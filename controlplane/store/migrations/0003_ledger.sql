-- The ledger: one row per upstream attempt, partitioned by month of the
-- attempt's start. The primary key (attempt_id, at) makes a re-sent row a
-- no-op (ON CONFLICT DO NOTHING), so a row lands exactly once however often
-- a data plane replays its spool. Partitions are created on demand by
-- llmgw_ledger_partition (the writer calls it for every month a batch
-- touches) and ahead of time by maintenance; there is no default partition,
-- so a month's partition can always be created. charges: what the attempt
-- took from limits (docs/budgets.md), applied by the limits migration's
-- trigger.

CREATE TABLE ledger (
  at timestamptz NOT NULL,
  attempt_id text NOT NULL CHECK (attempt_id <> ''),
  request_id text NOT NULL,
  attempt integer NOT NULL CHECK (attempt >= 1),
  replica text NOT NULL,
  key_id text,
  team text,
  project text,
  route text,
  provider text NOT NULL,
  model text NOT NULL,
  selector text,
  session text,
  agent text,
  purpose text,
  api text,
  stream boolean NOT NULL DEFAULT false,
  input_tokens bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
  cache_read_tokens bigint NOT NULL DEFAULT 0 CHECK (cache_read_tokens >= 0),
  cache_write_5m_tokens bigint NOT NULL DEFAULT 0 CHECK (cache_write_5m_tokens >= 0),
  cache_write_1h_tokens bigint NOT NULL DEFAULT 0 CHECK (cache_write_1h_tokens >= 0),
  output_tokens bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
  reasoning_tokens bigint NOT NULL DEFAULT 0 CHECK (reasoning_tokens >= 0),
  latency_ms bigint NOT NULL,
  ttfb_ms bigint,
  ttfc_ms bigint,
  status integer NOT NULL,
  failure_class text,
  cost_picodollars bigint,
  currency text NOT NULL DEFAULT 'USD',
  snapshot_version bigint NOT NULL,
  charges jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(charges) = 'array'),
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (attempt_id, at)
) PARTITION BY RANGE (at);
CREATE INDEX ledger_at ON ledger (at);
CREATE INDEX ledger_request ON ledger (request_id);
CREATE FUNCTION llmgw_ledger_partition(m timestamptz) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  lo timestamptz := date_trunc('month', m AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
  hi timestamptz := (date_trunc('month', m AT TIME ZONE 'UTC') + interval '1 month')
                    AT TIME ZONE 'UTC';
  n text := 'ledger_' || to_char(m AT TIME ZONE 'UTC', 'YYYY_MM');
BEGIN
  IF to_regclass(n) IS NOT NULL THEN RETURN; END IF;
  PERFORM pg_advisory_xact_lock(7019892171);
  IF to_regclass(n) IS NOT NULL THEN RETURN; END IF;
  EXECUTE format('CREATE TABLE %I PARTITION OF ledger FOR VALUES FROM (%L) TO (%L)',
                 n, lo, hi);
END $$;
SELECT llmgw_ledger_partition(now());
SELECT llmgw_ledger_partition(now() + interval '1 month');
