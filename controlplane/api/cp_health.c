/*
 * GET /v1/admin/health: what an operator needs to know before trusting a
 * snapshot: the database, the configuration version, whether the master
 * key is configured (and its id), and for every provider whether its
 * credential_ref resolves. A builtin secret resolves when its row exists
 * and its ciphertext opens with the current master key under its own name
 * (a ciphertext copied from another row does not); vault and aws secrets
 * are fetched by the snapshot builder, not here (this runs on the event
 * loop), so they are reported as external. With the cluster membership
 * (cp_etcd, the fleet thread) it also says who leads and whether etcd
 * answers (cp_etcd_status): etcd down makes the status "degraded" while
 * snapshots and admin reads go on; with the fleet health view (cp_fleet),
 * what it says of the fleet (cp_fleet_health).
 */
#include <stdlib.h>
#include <string.h>

#include "cp_ctx.h"
#include "cp_db.h"
#include "cp_etcd.h"
#include "cp_fleet.h"
#include "cp_health.h"
#include "cp_secrets.h"
#include "gw_error.h"
#include "gw_pool.h"

/* Whether the builtin secret `name` (ciphertext as hex) opens; *reason
 * says why not. */
static int opens(const struct cp_master_key *k, const char *name, const char *hex,
                 const char *key_id, const char **reason)
{
    if (!k) {
        *reason = "the master key is not configured (LLMGW_MASTER_KEY)";
        return 0;
    }
    if (!hex) {
        *reason = "the secret has no stored value";
        return 0;
    }
    unsigned char *blob = NULL;
    size_t n = 0;
    if (cp_db_hex_decode(hex, &blob, &n) != GW_OK) {
        *reason = "the stored ciphertext is not readable";
        return 0;
    }
    char *plain = NULL;
    size_t len = 0;
    int rc = cp_secret_open(k, name, blob, n, &plain, &len);
    free(blob);
    cp_secret_free(plain, len);
    if (rc == GW_OK)
        return 1;
    if (rc == GW_ENOMEM)
        *reason = "out of memory";
    else if (key_id && strcmp(key_id, k->id) != 0)
        *reason = "sealed with another master key (its master_key_id is not the current key's); "
                  "rotate or restart with the right key";
    else
        *reason = "the ciphertext does not open with the current master key under this name "
                  "(tampered, or copied from another row)";
    return 0;
}

void cp_health_handle(struct cp_call *c, const struct cp_ctx *ctx)
{
    struct cp_etcd *membership = ctx->membership;
    struct cp_fleet *fleet = ctx->fleet;
    struct cp_db_err err;
    PGresult *v =
        cp_db_exec(c->db, c->pool, "SELECT version FROM config_state WHERE id = 1", 0, NULL, &err);
    if (!v)
        return cp_call_db_error(c, &err);
    PGresult *r = cp_db_exec(c->db, c->pool,
                             "SELECT p.name, p.credential_ref, s.name IS NOT NULL, s.backend, "
                             "encode(s.ciphertext, 'hex'), s.master_key_id, p.enabled "
                             "FROM providers p LEFT JOIN secrets s ON s.name = p.credential_ref "
                             "ORDER BY p.name",
                             0, NULL, &err);
    if (!r)
        return cp_call_db_error(c, &err);
    json_t *providers = json_array();
    int unresolved = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *name = PQgetvalue(r, i, 0);
        const char *ref = PQgetisnull(r, i, 1) ? NULL : PQgetvalue(r, i, 1);
        const char *status = "ok", *reason = NULL;
        if (!ref) {
            status = "none";
        } else if (strcmp(PQgetvalue(r, i, 2), "t") != 0) {
            status = "unresolved";
            reason = "no such secret";
        } else if (strcmp(PQgetvalue(r, i, 3), "builtin") != 0) {
            status = "external";
            reason = "external, checked by the snapshot builder";
        } else if (!opens(c->master_key, ref, PQgetisnull(r, i, 4) ? NULL : PQgetvalue(r, i, 4),
                          PQgetisnull(r, i, 5) ? NULL : PQgetvalue(r, i, 5), &reason)) {
            status = "unresolved";
        }
        unresolved += strcmp(status, "unresolved") == 0;
        json_array_append_new(providers,
                              json_pack("{s:s,s:s?,s:b,s:s,s:s?}", "name", name, "credential_ref",
                                        ref, "enabled", strcmp(PQgetvalue(r, i, 6), "t") == 0,
                                        "credential", status, "reason", reason));
    }
    json_t *mk = c->master_key ? json_pack("{s:b,s:s}", "configured", 1, "id", c->master_key->id)
                               : json_pack("{s:b}", "configured", 0);
    json_t *etcd_st = membership ? cp_etcd_status(membership) : NULL;
    int etcd_down = membership && cp_etcd_up(membership) == 0;
    json_t *body =
        json_pack("{s:s,s:s,s:I,s:o,s:o}", "status", unresolved || etcd_down ? "degraded" : "ok",
                  "postgres", "ok", "config_version",
                  (json_int_t)strtoll(cp_db_value(v) ? cp_db_value(v) : "0", NULL, 10),
                  "master_key", mk, "providers", providers);
    if (body && etcd_st)
        json_object_update(body, etcd_st);
    json_decref(etcd_st);
    json_t *fleet_st = fleet ? cp_fleet_health(fleet) : NULL;
    if (body && fleet_st)
        json_object_update(body, fleet_st);
    json_decref(fleet_st);
    cp_call_json(c, 200, body, 0);
}
