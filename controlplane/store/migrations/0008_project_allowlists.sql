-- Projects carry allowlists like teams (null: any, []: nothing); a key's
-- target must pass its own, its team's and its project's.

ALTER TABLE projects ADD COLUMN allow_routes text[],
  ADD COLUMN allow_providers text[],
  ADD COLUMN allow_models text[];
