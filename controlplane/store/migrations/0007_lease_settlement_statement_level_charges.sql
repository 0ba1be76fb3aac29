-- Budgets, the review's fixes (docs/budgets.md):
-- - a lease is answered per (replica, req): req is unique per data-plane
--   process start, so a request sent again (its grant's reply lost with
--   its stream) gets the lease it already has, not a second one;
-- - a lease is settled by its replica's final report, which says what it
--   charged under it: until then, even expired, it stays outstanding (for
--   the control plane's --lease-grace-s past its expiry), so allowance
--   whose charges have not landed is never handed out twice; once settled,
--   only the charges still on their way stay outstanding;
-- - the charges trigger runs once per INSERT statement over its inserted
--   rows (a transition table; ON CONFLICT DO NOTHING leaves replays out):
--   it locks the limits charged (FOR KEY SHARE, in id order, so a limit
--   being deleted waits), then the windows in (limit, window) order, then
--   the leases in id order, each once. Every writer (the ledger's batches,
--   grants, reports, expiry, deletes) takes these rows in that order, so
--   two writers never wait on each other in a cycle;
-- - a charge for a limit that does not exist, or that was created after
--   the attempt began and is not carried by a lease of the limit (it was
--   meant for a deleted namesake), is skipped: a deleted and recreated
--   limit starts from nothing;
-- - sums saturate at the bigint's maximum instead of failing the insert:
--   a window that has spent that much is depleted either way, and a ledger
--   row is never made unstorable by its charges.
-- Windows and leases of limits that no longer exist (the old trigger could
-- recreate them) go.

ALTER TABLE limit_leases ADD COLUMN req bigint,
  ADD COLUMN charged bigint NOT NULL DEFAULT 0,
  ADD COLUMN settled boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX limit_leases_req ON limit_leases (replica, req) WHERE req IS NOT NULL;
DELETE FROM limit_windows w WHERE NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = w.limit_id);
DELETE FROM limit_leases s WHERE NOT EXISTS (SELECT 1 FROM limits l WHERE l.id = s.limit_id);
DROP TRIGGER ledger_charges ON ledger;
DROP FUNCTION llmgw_ledger_charges();
CREATE FUNCTION llmgw_ledger_charges() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
  FOR c IN
    WITH x AS (
      SELECT n.at, e->>'limit_id' AS limit_id,
             CASE WHEN e->>'window_start_ms' ~ '^[0-9]{1,15}$' THEN timestamptz 'epoch'
               + (e->>'window_start_ms')::bigint * interval '1 millisecond' END AS ws,
             nullif(e->>'lease_id', '') AS lease_id,
             CASE WHEN e->>'amount' ~ '^[0-9]{1,18}$' THEN (e->>'amount')::numeric END
               AS amount
        FROM new_rows n, jsonb_array_elements(n.charges) e
       WHERE n.charges <> '[]'::jsonb AND jsonb_typeof(e) = 'object'
         AND coalesce(e->>'limit_id', '') <> ''),
    l AS (SELECT id, created_at FROM limits WHERE id IN (SELECT limit_id FROM x)
           ORDER BY id FOR KEY SHARE),
    v AS (SELECT x.* FROM x JOIN l ON l.id = x.limit_id
           WHERE x.ws IS NOT NULL AND x.amount > 0
             AND (x.at >= l.created_at OR EXISTS (SELECT 1 FROM limit_leases s
                   WHERE s.id = x.lease_id AND s.limit_id = x.limit_id)))
    SELECT 0 AS kind, limit_id, ws, NULL::text AS lease_id,
           least(sum(amount), 9223372036854775807)::bigint AS amount
      FROM v GROUP BY limit_id, ws
    UNION ALL
    SELECT 1, limit_id, ws, lease_id, least(sum(amount), 9223372036854775807)::bigint
      FROM v WHERE lease_id IS NOT NULL GROUP BY lease_id, limit_id, ws
    ORDER BY kind, lease_id, limit_id, ws
  LOOP
    IF c.kind = 0 THEN
      INSERT INTO limit_windows AS w (limit_id, window_start, spent)
        VALUES (c.limit_id, c.ws, c.amount)
        ON CONFLICT (limit_id, window_start) DO UPDATE
        SET spent = least(w.spent::numeric + EXCLUDED.spent, 9223372036854775807)::bigint,
            updated_at = now();
    ELSE
      UPDATE limit_leases SET consumed = least(consumed::numeric + c.amount, 9223372036854775807)::bigint
       WHERE id = c.lease_id AND limit_id = c.limit_id AND window_start = c.ws;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
CREATE TRIGGER ledger_charges AFTER INSERT ON ledger REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION llmgw_ledger_charges();
