/*
 * GET /v1/admin/usage: the ledger summed over a time range, and
 * GET /v1/admin/ledger: one request's rows (cp_usage.c).
 */
#ifndef CP_USAGE_H
#define CP_USAGE_H

struct cp_call;
struct cp_db;

void cp_usage_handle(struct cp_call *c, struct cp_db *db);

/* GET /v1/admin/ledger?request_id=ID: every ledger row (attempt) of one
 * request, in attempt order: {"request_id", "data": [...]}. */
void cp_usage_ledger_handle(struct cp_call *c, struct cp_db *db);

#endif
