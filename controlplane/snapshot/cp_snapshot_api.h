/*
 * GET /v1/admin/snapshot: what the snapshot builder last built and which
 * version each data-plane replica acknowledged; GET /v1/admin/plan; and
 * /readyz's snapshot half. cp_api dispatches the paths here after
 * authenticating, with the daemon's context (cp_ctx.h): its builder, gRPC
 * server and fleet health view (one control-plane process has one of each;
 * a context without them answers as below). On the API's loop.
 */
#ifndef CP_SNAPSHOT_API_H
#define CP_SNAPSHOT_API_H

struct cp_call;
struct cp_ctx;

/* Serves /v1/admin/snapshot: GET answers {"version","built_at_ms",
 * "last_error","last_error_at_ms","unresolved","skipped_routes","builds",
 * "failed_builds","database","published_version","replicas":[...]} from
 * ctx->builder and ctx->grpc (either NULL: 503 snapshot_unavailable). */
void cp_snapshot_api_handle(struct cp_call *c, const struct cp_ctx *ctx);

/* GET /v1/admin/plan?model=SEL[&capabilities=a,b][&input_tokens=N]
 * [&key_id=ID][&session=S][&affinity=A][&request_id=R]: what the router
 * (dp_router) would try for such a request on the last snapshot built
 * (ctx->builder), with the fleet view (ctx->fleet, when there is one)
 * applied as a data plane that holds no probe sees it:
 * {"snapshot_version","model","via","route","strategy","status","code",
 * "message","order":[...],"candidates":[...],"skips":[...],"note"}
 * (docs/controlplane.md). 503 no_snapshot before the first build. */
void cp_snapshot_api_plan(struct cp_call *c, const struct cp_ctx *ctx);

/* NULL when a first snapshot has been built (and so handed to the gRPC
 * server) and the gRPC server is listening; else why not (for /readyz). */
const char *cp_snapshot_api_unready(const struct cp_ctx *ctx);

#endif
