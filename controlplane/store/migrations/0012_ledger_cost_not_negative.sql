-- A ledger row's cost is never negative (a data plane's word is checked
-- by the writer too, cp_ledger.c's row_problem).

ALTER TABLE ledger ADD CONSTRAINT ledger_cost_nonnegative CHECK (cost_picodollars >= 0);
