/*
 * GET /v1/admin/usage: the ledger summed over a time range, and
 * GET /v1/admin/ledger: one request's rows (cp_usage.c).
 */
#ifndef CP_USAGE_H
#define CP_USAGE_H

struct cp_call;
struct cp_db;

void cp_usage_handle(struct cp_call *c, struct cp_db *db);

/* GET /v1/admin/ledger: ledger rows (an attempt each), filtered by any of
 * request_id, key_id, route, provider, model, status (each equal), paged
 * by limit (1..1000, default 100) and offset. With request_id: that
 * request's rows in attempt order, {"request_id", "data": [...]}; without:
 * the newest first, {"data": [...]}. */
void cp_usage_ledger_handle(struct cp_call *c, struct cp_db *db);

/* GET /v1/admin/limit-windows: every limit with what its current UTC
 * window has spent, {"data": [{"id","scope_kind","scope","metric",
 * "period","amount","currency","enabled","offline","window_start",
 * "spent"}]}, by id. spent counts the ledger rows stored; what leases hold
 * but have not charged is not in it (docs/budgets.md). */
void cp_usage_windows_handle(struct cp_call *c, struct cp_db *db);

#endif
