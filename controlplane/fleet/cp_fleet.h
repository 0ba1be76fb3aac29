/*
 * cp_fleet: the fleet health view on the control plane's main loop
 * (docs/fleet.md). It feeds cp_fleetview with every OutcomeSummary the
 * data planes send on their Report streams, with this replica's connected
 * data planes (cp_grpc's table) and with the other control-plane replicas'
 * blobs (cp_etcd kinds "outcomes" and "dp"); it recomputes the view every
 * second and at once on news (a breaker change, a probe's verdict, a new
 * stream), pushes it to every data plane connected here when it changed
 * and at least every 2 s, and publishes this replica's own blobs.
 *
 * Main loop only.
 */
#ifndef CP_FLEET_H
#define CP_FLEET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "llmgw/v1/control.pb-c.h"

struct event_base;
struct cp_grpc;
struct cp_etcd;
struct cp_fleet;

/* Starts the tick and, with etcd, watches the other replicas' blobs. NULL
 * with a message in err (no memory). */
struct cp_fleet *cp_fleet_new(struct event_base *base, struct cp_grpc *grpc, struct cp_etcd *etcd,
                              char *err, size_t errlen);
/* Before the daemon frees the gRPC server and the fleet thread: no more
 * ticks, reports ignored. Free it last. */
void cp_fleet_stop(struct cp_fleet *f);
void cp_fleet_free(struct cp_fleet *f);

/* An OutcomeSummary that arrived on Report stream stream_id of replica. */
void cp_fleet_report(struct cp_fleet *f, uint64_t stream_id, const char *replica,
                     const Llmgw__V1__OutcomeSummary *s);

/* {"fleet":{...},"replicas":[...]} for GET /v1/admin/health (new
 * reference or NULL). */
json_t *cp_fleet_health(struct cp_fleet *f);

/* Makes the fleet view this process's dp_fleet view (dp_fleet.h), as a
 * data plane that holds no probe would get it: the router then skips a
 * target the fleet says is down, as every data plane but its prober does
 * (GET /v1/admin/plan). GW_OK or GW_ENOMEM. */
#define CP_FLEET_PREVIEW_REPLICA "admin-plan-preview"
int cp_fleet_apply_local(struct cp_fleet *f);

#endif
