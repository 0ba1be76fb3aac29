#include "cp_snapshot_api.h"

#include <string.h>

#include "cp_call.h"
#include "cp_grpc.h"
#include "cp_snapshot.h"
#include "gw_http.h"

static struct cp_snapshot *builder;
static struct cp_grpc *server;

void cp_snapshot_api_register(struct cp_snapshot *b, struct cp_grpc *g)
{
    builder = b;
    server = g;
}

void cp_snapshot_api_handle(struct cp_call *c)
{
    if (!cp_call_method(c, "GET"))
        return;
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

const char *cp_snapshot_api_unready(void)
{
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
