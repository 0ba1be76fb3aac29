/*
 * GET /v1/admin/usage: the ledger summed over a time range (cp_usage.c).
 */
#ifndef CP_USAGE_H
#define CP_USAGE_H

struct cp_call;
struct cp_db;

void cp_usage_handle(struct cp_call *c, struct cp_db *db);

#endif
