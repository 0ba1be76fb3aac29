-- Admin tokens carry a scope: read (GET only), operator (everything but
-- admin tokens), admin (everything). Tokens made before scopes keep the
-- power they had.

ALTER TABLE admin_tokens ADD COLUMN scope text NOT NULL DEFAULT 'admin'
  CHECK (scope IN ('read', 'operator', 'admin'));
ALTER TABLE admin_tokens ALTER COLUMN scope DROP DEFAULT;
