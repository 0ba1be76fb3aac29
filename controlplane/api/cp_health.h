/* GET /v1/admin/health (cp_health.c says what it reports). */
#ifndef CP_HEALTH_H
#define CP_HEALTH_H

#include "cp_call.h"

void cp_health_handle(struct cp_call *c);

/* The fleet thread whose state health reports ("replica_id", "leader",
 * "etcd", "members", "jobs"; etcd down makes the status "degraded"). NULL:
 * none. Call on the API's loop. */
struct cp_etcd;
void cp_health_fleet(struct cp_etcd *e);

/* The fleet health view whose "fleet" and "replicas" health reports
 * (cp_fleet_health). NULL: none. Call on the API's loop. */
struct cp_fleet;
void cp_health_fleetview(struct cp_fleet *f);

#endif
