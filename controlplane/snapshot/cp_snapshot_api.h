/*
 * GET /v1/admin/snapshot: what the snapshot builder last built and which
 * version each data-plane replica acknowledged. cp_api dispatches the path
 * here after authenticating; the daemon registers its builder and gRPC
 * server at start-up (one control-plane process has one of each).
 */
#ifndef CP_SNAPSHOT_API_H
#define CP_SNAPSHOT_API_H

struct cp_call;
struct cp_snapshot;
struct cp_grpc;
struct cp_fleet;

/* Makes b and g what the resource reports (either may be NULL: a process
 * without them answers 503 snapshot_unavailable). Call on the API's loop. */
void cp_snapshot_api_register(struct cp_snapshot *b, struct cp_grpc *g);

/* Serves /v1/admin/snapshot: GET answers {"version","built_at_ms",
 * "last_error","last_error_at_ms","unresolved","skipped_routes","builds",
 * "failed_builds","database","published_version","replicas":[...]}. */
void cp_snapshot_api_handle(struct cp_call *c);

/* The fleet view GET /v1/admin/plan applies (NULL: none). */
void cp_snapshot_api_fleet(struct cp_fleet *f);

/* GET /v1/admin/plan?model=SEL[&capabilities=a,b][&input_tokens=N]
 * [&key_id=ID][&session=S][&affinity=A][&request_id=R]: what the router
 * (dp_router) would try for such a request on the last snapshot built,
 * with the fleet view applied as a data plane that holds no probe sees it:
 * {"snapshot_version","model","via","route","strategy","status","code",
 * "message","order":[...],"candidates":[...],"skips":[...],"note"}
 * (docs/controlplane.md). 503 no_snapshot before the first build. */
void cp_snapshot_api_plan(struct cp_call *c);

/* NULL when a first snapshot has been built (and so handed to the gRPC
 * server) and the gRPC server is listening; else why not (for /readyz). */
const char *cp_snapshot_api_unready(void);

#endif
