-- A price per reasoning token where a model bills
-- reasoning apart from its other output (NULL: reasoning tokens are output
-- tokens at the output price), and what the LiteLLM import records about a
-- catalog row: who last wrote it ('admin' through the API, 'litellm' by
-- import-catalog), LiteLLM's mode and provider name. An import is audited
-- as its own action.

ALTER TABLE price_overrides ADD COLUMN reasoning_price bigint
  CHECK (reasoning_price BETWEEN 0 AND 1000000000000);
ALTER TABLE model_catalog ADD COLUMN reasoning_price bigint
    CHECK (reasoning_price BETWEEN 0 AND 1000000000000),
  ADD COLUMN mode text CHECK (mode <> '' AND length(mode) <= 64),
  ADD COLUMN source text NOT NULL DEFAULT 'admin' CHECK (source IN ('admin', 'litellm')),
  ADD COLUMN litellm_provider text
    CHECK (litellm_provider <> '' AND length(litellm_provider) <= 128);
ALTER TABLE audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_action_check
  CHECK (action IN ('create', 'update', 'delete', 'import'));
