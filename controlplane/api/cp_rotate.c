#include "cp_rotate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "cp_judgement.h"
#include "cp_resource.h"
#include "cp_secrets.h"
#include "gw_error.h"
#include "gw_pool.h"

static void decref(void *j)
{
    json_decref(j);
}

/* One judgement's kept text (hex) rewrapped for its ref into *out (bytea
 * input text in the pool). */
static int rewrap_text(struct cp_call *c, const struct cp_master_key *old_key,
                       const struct cp_master_key *new_key, const char *request_id,
                       const char *part, const char *hex, const char **out)
{
    char ref[600];
    unsigned char *blob = NULL, *nb = NULL;
    size_t n = 0, nlen = 0;
    if (cp_judgement_ref(ref, sizeof(ref), request_id, part) != 0)
        return GW_EINVAL;
    int rc = cp_db_hex_decode(hex, &blob, &n);
    if (rc != GW_OK)
        return rc;
    rc = cp_secret_rewrap(old_key, new_key, ref, blob, n, &nb, &nlen);
    free(blob);
    if (rc != GW_OK)
        return rc;
    *out = cp_db_bytea_hex_in(c->pool, nb, nlen);
    free(nb);
    return *out ? GW_OK : GW_ENOMEM;
}

/* The text judgements kept (cp_judgement), sealed under the same key:
 * rewrapped in the same transaction, or nothing changes. */
static int rewrap_judgements(struct cp_call *c, const struct cp_master_key *old_key,
                             const struct cp_master_key *new_key, int *rewrapped, char *msg,
                             size_t msglen)
{
    struct cp_db_err err;
    const char *kp[] = {new_key->id};
    PGresult *r = cp_db_exec(c->db, c->pool,
                             "SELECT request_id, encode(prompt_enc, 'hex'), encode(answer_enc, "
                             "'hex'), master_key_id FROM judgements WHERE master_key_id <> $1 "
                             "ORDER BY request_id FOR UPDATE",
                             1, kp, &err);
    if (!r) {
        snprintf(msg, msglen, "cannot read the judgements: %s", err.message);
        return GW_EIO;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        const char *id = PQgetvalue(r, i, 0);
        const char *sealed[2] = {NULL, NULL};
        for (int t = 0; t < 2; t++) {
            if (PQgetisnull(r, i, 1 + t))
                continue;
            int rc = rewrap_text(c, old_key, new_key, id, t ? "answer" : "prompt",
                                 PQgetvalue(r, i, 1 + t), &sealed[t]);
            if (rc != GW_OK) {
                snprintf(msg, msglen,
                         "judgement '%s' (master_key_id %s): its kept text does not open with "
                         "the old key (id %s); nothing was changed",
                         id, PQgetvalue(r, i, 3), old_key->id);
                return rc;
            }
        }
        const char *p[] = {id, sealed[0], sealed[1], new_key->id};
        if (cp_db_cmd(c->db,
                      "UPDATE judgements SET prompt_enc = $2::bytea, answer_enc = $3::bytea, "
                      "master_key_id = $4 WHERE request_id = $1",
                      4, p, &err)) {
            snprintf(msg, msglen, "cannot update judgement '%s': %s", id, err.message);
            return GW_EIO;
        }
        (*rewrapped)++;
    }
    return GW_OK;
}

/* Everything after BEGIN; GW_OK leaves the transaction open for COMMIT. */
static int rewrap_all(struct cp_call *c, const struct cp_master_key *old_key,
                      const struct cp_master_key *new_key, int *rewrapped, int *skipped,
                      int *judgements, char *msg, size_t msglen)
{
    struct cp_db_err err;
    PGresult *r = cp_db_exec(c->db, c->pool,
                             "SELECT name, encode(ciphertext, 'hex'), master_key_id FROM secrets "
                             "WHERE backend = 'builtin' AND ciphertext IS NOT NULL "
                             "ORDER BY name FOR UPDATE",
                             0, NULL, &err);
    if (!r) {
        snprintf(msg, msglen, "cannot read the secrets: %s", err.message);
        return GW_EIO;
    }
    json_t *names = json_array();
    if (!names || gw_pool_cleanup(c->pool, decref, names) != GW_OK) {
        json_decref(names);
        snprintf(msg, msglen, "out of memory");
        return GW_ENOMEM;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        const char *name = PQgetvalue(r, i, 0);
        const char *hex = PQgetvalue(r, i, 1);
        const char *kid = PQgetisnull(r, i, 2) ? "" : PQgetvalue(r, i, 2);
        if (strcmp(kid, new_key->id) == 0) {
            (*skipped)++; /* already rotated (a re-run after a crash) */
            continue;
        }
        unsigned char *blob = NULL;
        size_t n = 0;
        int rc = cp_db_hex_decode(hex, &blob, &n);
        if (rc != GW_OK) {
            snprintf(msg, msglen, "secret '%s': its stored ciphertext is not readable", name);
            return rc;
        }
        unsigned char *nb = NULL;
        size_t nlen = 0;
        rc = cp_secret_rewrap(old_key, new_key, name, blob, n, &nb, &nlen);
        free(blob);
        if (rc != GW_OK) {
            snprintf(msg, msglen,
                     "secret '%s' (master_key_id %s) does not open with the old key (id %s)%s; "
                     "nothing was changed",
                     name, *kid ? kid : "none", old_key->id,
                     rc == GW_EINVAL ? ": is LLMGW_MASTER_KEY the key that sealed it?" : "");
            return rc;
        }
        char *nbhex = cp_db_bytea_hex_in(c->pool, nb, nlen);
        free(nb);
        const char *p[] = {name, nbhex, new_key->id};
        if (!nbhex || cp_db_cmd(c->db,
                                "UPDATE secrets SET ciphertext = $2::bytea, master_key_id = $3, "
                                "version = version + 1, updated_at = now() WHERE name = $1",
                                3, p, &err)) {
            snprintf(msg, msglen, "cannot update secret '%s': %s", name,
                     nbhex ? err.message : "out of memory");
            return GW_EIO;
        }
        json_array_append_new(names, json_string(name));
        (*rewrapped)++;
    }
    int rc = rewrap_judgements(c, old_key, new_key, judgements, msg, msglen);
    if (rc != GW_OK)
        return rc;
    json_t *before = json_pack("{s:s,s:O}", "master_key_id", old_key->id, "secrets", names);
    json_t *after = json_pack("{s:s,s:O}", "master_key_id", new_key->id, "secrets", names);
    long long version;
    rc = cp_resource_record(c, "secrets", "update", "*master-key*", before, after, &version, &err);
    json_decref(before);
    json_decref(after);
    if (rc) {
        snprintf(msg, msglen, "cannot record the rotation: %s", err.message);
        return GW_EIO;
    }
    return GW_OK;
}

int cp_rotate_master_key(struct cp_db *db, const struct cp_master_key *old_key,
                         const struct cp_master_key *new_key, int *rewrapped, int *skipped,
                         int *judgements, char *msg, size_t msglen)
{
    struct cp_db_err err;
    *rewrapped = *skipped = *judgements = 0;
    msg[0] = '\0';
    if (strcmp(old_key->id, new_key->id) == 0) {
        snprintf(msg, msglen, "the new key is the old key (id %s)", old_key->id);
        return GW_EINVAL;
    }
    struct gw_pool *pool = gw_pool_new(0);
    if (!pool) {
        snprintf(msg, msglen, "out of memory");
        return GW_ENOMEM;
    }
    struct cp_call c = {.pool = pool, .db = db, .actor = "rotate-master-key"};
    int rc = cp_db_begin(db, &err);
    if (rc)
        snprintf(msg, msglen, "cannot begin: %s", err.message);
    else if ((rc = rewrap_all(&c, old_key, new_key, rewrapped, skipped, judgements, msg, msglen)) ==
                 GW_OK &&
             (rc = cp_db_commit(db, &err)) != GW_OK)
        snprintf(msg, msglen, "cannot commit: %s", err.message);
    if (rc) {
        cp_db_rollback(db);
        *rewrapped = *judgements = 0;
    }
    gw_pool_free(pool);
    return rc;
}
