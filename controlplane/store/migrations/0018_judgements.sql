-- Judgements (docs/ledger.md, "Judgements"): a sampled answer's score from
-- its route's judge, one per judged request, sent by the data planes on the
-- Report stream and stored by the ledger writer idempotently by request_id.
-- prompt_enc and answer_enc are the text a route chose to keep, sealed
-- like secrets (cp_secrets, AAD "judgement/<request_id>#prompt" or
-- "#answer") under the master key master_key_id names; NULL when nothing
-- was kept.

CREATE TABLE judgements (
  request_id text PRIMARY KEY CHECK (request_id <> ''),
  attempt_id text,
  judge_request_id text,
  route text,
  provider text,
  model text,
  key_id text,
  team text,
  project text,
  judge_route text,
  score integer NOT NULL,
  scale_min integer NOT NULL,
  scale_max integer NOT NULL,
  pass boolean NOT NULL,
  label text,
  at timestamptz NOT NULL,
  snapshot_version bigint NOT NULL DEFAULT 0,
  replica text NOT NULL DEFAULT '',
  prompt_enc bytea,
  answer_enc bytea,
  master_key_id text,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT judgements_scale CHECK (scale_min < scale_max
    AND score BETWEEN scale_min AND scale_max),
  CONSTRAINT judgements_sealed CHECK ((prompt_enc IS NULL AND answer_enc IS NULL)
    OR master_key_id IS NOT NULL));
CREATE INDEX judgements_route_at ON judgements (route, at);
CREATE INDEX judgements_model_at ON judgements (model, at);
CREATE INDEX judgements_at ON judgements (at);
