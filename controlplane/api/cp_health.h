/* GET /v1/admin/health (cp_health.c says what it reports). */
#ifndef CP_HEALTH_H
#define CP_HEALTH_H

#include "cp_call.h"

struct cp_ctx;

/* Answers c. From ctx (on the API's loop): ctx->membership, the cluster
 * membership whose state health reports ("replica_id", "leader", "etcd",
 * "members", "jobs"; etcd down makes the status "degraded"), and
 * ctx->fleet, the fleet health view whose "fleet" and "replicas" it
 * reports (cp_fleet_health); either may be NULL (not reported). */
void cp_health_handle(struct cp_call *c, const struct cp_ctx *ctx);

#endif
