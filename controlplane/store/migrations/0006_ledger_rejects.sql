-- Ledger rows the table refused (their data, a month whose partition was
-- detached, a charge the trigger could not apply), kept whole with the
-- reason, so the writer can acknowledge them without losing money: an
-- operator fixes and re-inserts them (docs/ledger.md).

CREATE TABLE ledger_rejects (
  id bigserial PRIMARY KEY,
  received_at timestamptz NOT NULL DEFAULT now(),
  replica text NOT NULL,
  attempt_id text,
  sqlstate text,
  error text NOT NULL,
  row jsonb NOT NULL);
CREATE INDEX ledger_rejects_attempt ON ledger_rejects (attempt_id);
