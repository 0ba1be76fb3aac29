#include "cp_snapshot_api.h"

#include <stdlib.h>
#include <string.h>

#include "cp_call.h"
#include "cp_ctx.h"
#include "cp_fleet.h"
#include "cp_grpc.h"
#include "cp_snapshot.h"
#include "dp_driver_catalog.h"
#include "dp_router.h"
#include "dp_snapshot.h"
#include "gw_http.h"
#include "gw_time.h"

void cp_snapshot_api_handle(struct cp_call *c, const struct cp_ctx *ctx)
{
    if (!cp_call_method(c, "GET"))
        return;
    struct cp_snapshot *builder = ctx->builder;
    struct cp_grpc *server = ctx->grpc;
    if (!builder || !server)
        return cp_call_error(c, 503, "snapshot_unavailable", NULL,
                             "this process does not build snapshots");
    json_t *st = cp_snapshot_status(builder);
    json_t *reps = cp_grpc_replicas(server);
    if (!st || !reps) {
        json_decref(st);
        json_decref(reps);
        return cp_call_error(c, 500, "internal_error", NULL, "out of memory");
    }
    json_object_set_new(st, "published_version", json_integer(cp_grpc_version(server)));
    json_t *arr = json_object_get(reps, "replicas");
    json_object_set_new(st, "replicas", arr ? json_incref(arr) : json_array());
    json_decref(reps);
    cp_call_json(c, 200, st, 0);
}

const char *cp_snapshot_api_unready(const struct cp_ctx *ctx)
{
    struct cp_snapshot *builder = ctx->builder;
    struct cp_grpc *server = ctx->grpc;
    if (!builder || !server)
        return "this process does not build snapshots";
    if (cp_grpc_port(server) <= 0)
        return "the gRPC server is not listening";
    /* The first good build always differs from nothing: built_at_ms is set
     * then, even for version 0 (an empty configuration). */
    json_t *st = cp_snapshot_status(builder);
    if (!st)
        return "out of memory";
    json_int_t built = json_integer_value(json_object_get(st, "built_at_ms"));
    json_decref(st);
    if (built <= 0)
        return "no snapshot has been built yet";
    return NULL;
}

/* The capabilities a sample request needs ("tools,vision"), into n; -1
 * at the first name that is none. */
static int parse_needs(const char *list, struct dp_needs *n)
{
    for (const char *p = list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        unsigned bit = 0;
        for (unsigned b = 1; b && !bit; b <<= 1) {
            const char *name = dp_snapshot_cap_name(b);
            if (name && strlen(name) == len && strncmp(name, p, len) == 0)
                bit = b;
        }
        if (!bit)
            return -1;
        if (bit == DRV_CAP_EMBEDDINGS)
            n->embeddings = 1;
        else if (bit & DRV_CAP_MEDIA)
            n->media = bit;
        else if (bit != DRV_CAP_CHAT)
            n->caps |= bit;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

static json_t *target_json(const struct dp_provider *p, const char *model,
                           const struct dp_route_entry *e)
{
    json_t *o = json_pack("{s:s,s:s}", "provider", p->name, "model", model);
    if (o && e)
        json_object_update_new(o, json_pack("{s:i,s:i,s:b}", "weight", (int)e->weight, "tier",
                                            e->tier, "high_cost", e->high_cost));
    return o;
}

void cp_snapshot_api_plan(struct cp_call *c, const struct cp_ctx *ctx)
{
    if (!cp_call_method(c, "GET"))
        return;
    static const char *const names[] = {"model",   "capabilities", "input_tokens", "key_id",
                                        "session", "affinity",     "request_id",   NULL};
    const char *v[sizeof(names) / sizeof(*names)];
    if (cp_call_query(c, names, v) != 0)
        return;
    if (!v[0] || !*v[0])
        return cp_call_error(c, 400, "invalid_value", "model",
                             "model: required, the selector a request would send");
    struct dp_needs needs = {0};
    if (v[1] && parse_needs(v[1], &needs) != 0)
        return cp_call_error(c, 400, "invalid_value", "capabilities",
                             "capabilities: a comma list of capability names (chat, embeddings, "
                             "vision, tools, json_mode, reasoning, transcription, speech, image)");
    if (cp_call_query_int(c, "input_tokens", v[2], 0, 0, 1LL << 40, &needs.est_tokens))
        return;
    struct dp_snapshot *s = ctx->builder ? cp_snapshot_acquire(ctx->builder) : NULL;
    if (!s)
        return cp_call_error(c, 503, "no_snapshot", NULL, "no snapshot has been built yet");
    const struct dp_key *key = v[3] ? dp_snapshot_key(s, v[3]) : NULL;
    if (v[3] && !key) {
        dp_snapshot_unref(s);
        return cp_call_error(c, 400, "invalid_value", "key_id",
                             "key_id: no active key %s in the snapshot (a disabled or expired "
                             "key is refused before routing)",
                             v[3]);
    }
    /* As a data plane that holds no probe sees the fleet. Breakers are each
     * data plane's own: none here. */
    if (ctx->fleet)
        (void)cp_fleet_apply_local(ctx->fleet);
    struct dp_route_ctx route_ctx = {.key = key,
                                     .request_id = v[6] ? v[6] : "admin-plan-preview",
                                     .session = v[4],
                                     .affinity = v[5],
                                     .now_us = gw_now_us()};
    struct dp_plan *plan = calloc(1, sizeof(*plan));
    json_t *order = json_array(), *cands = json_array(), *skips = json_array();
    if (!plan || dp_router_plan(s, v[0], &needs, &route_ctx, plan) != GW_OK) {
        free(plan);
        json_decref(order);
        json_decref(cands);
        json_decref(skips);
        dp_snapshot_unref(s);
        return cp_call_error(c, 500, "internal_error", NULL, "out of memory");
    }
    const struct dp_route *rt = plan->route;
    for (size_t i = 0; rt && i < plan->norder; i++) {
        const struct dp_route_entry *e = &rt->entries[plan->order[i]];
        json_array_append_new(order, target_json(e->provider, e->model, e));
    }
    for (size_t i = 0; i < plan->ncands; i++)
        json_array_append_new(cands, target_json(plan->cands[i].provider, plan->cands[i].model,
                                                 plan->cands[i].entry));
    for (size_t i = 0; i < plan->nskips; i++) {
        const struct dp_skip *k = &plan->skips[i];
        json_array_append_new(skips, json_pack("{s:s,s:s,s:s,s:s}", "provider", k->provider->name,
                                               "model", k->model, "reason", dp_skip_name(k->reason),
                                               "detail", k->detail));
    }
    int none = plan->cause != DP_NOROUTE_NONE;
    json_t *out = json_pack(
        "{s:I,s:s,s:s?,s:s?,s:s?,s:i,s:s?,s:s?,s:o,s:o,s:o,s:s}", "snapshot_version",
        (json_int_t)s->version, "model", v[0], "via", plan->via, "route", rt ? rt->name : NULL,
        "strategy", rt ? dp_strategy_name(rt->strategy) : NULL, "status",
        dp_no_route_status(plan->cause), "code", none ? dp_no_route_code(plan->cause) : NULL,
        "message", none ? plan->message : NULL, "order", order, "candidates", cands, "skips", skips,
        "note",
        "circuit breakers are each data plane's own and not seen here; the fleet health view is");
    free(plan);
    dp_snapshot_unref(s);
    cp_call_json(c, 200, out, 0);
}
