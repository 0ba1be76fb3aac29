/*
 * The HashiCorp Vault backend: KV secrets engine version 2.
 *
 *   GET {VAULT_ADDR}/v1/<mount>/data/<path>   X-Vault-Token: {VAULT_TOKEN}
 *   200 {"data":{"data":{"<field>":"<value>",...},"metadata":{...}}}
 *
 * Only the latest version is read. Vault answers 403 for a token without
 * the policy (or an expired one), 404 for a missing or deleted secret, 5xx
 * when sealed or in trouble; each gets its own message.
 */
#include <string.h>

#include "cp_secret_backend.h"
#include "gw_codec.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sigv4.h"

/* Appends the '/'-separated segments of p, each percent-encoded. */
static int append_path(struct gw_buf *url, const char *p)
{
    for (;;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int rc = gw_pct_encode(url, p, n, 0);
        if (rc != GW_OK || !e)
            return rc;
        if ((rc = gw_buf_append(url, "/", 1)) != GW_OK)
            return rc;
        p = e + 1;
    }
}

/* Vault's {"errors":["..."]}: the first message, or "". */
static void vault_error(const struct gw_buf *a, char *out, size_t outlen)
{
    out[0] = '\0';
    const char *vp, *ep;
    size_t vn, en;
    if (!a->data || !gw_json_valid(a->data, a->len, 16) ||
        gw_json_span_member(a->data, a->len, "errors", &vp, &vn) != 1 ||
        gw_json_span_index(vp, vn, 0, &ep, &en) != 1 || en < 2 || ep[0] != '"')
        return;
    cp_secret_excerpt(out, outlen, ep + 1, en - 2);
}

int cp_secret_vault_fetch(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                          struct gw_buf *value, char *err, size_t errlen)
{
    if (!c->vault_addr)
        return cp_secret_fail(err, errlen, ref, GW_EINVAL, "VAULT_ADDR is not set");
    if (!c->vault_token)
        return cp_secret_fail(err, errlen, ref, GW_EINVAL, "VAULT_TOKEN is not set");
    if (strchr(c->vault_token, '\r') || strchr(c->vault_token, '\n') ||
        (c->vault_namespace &&
         (strchr(c->vault_namespace, '\r') || strchr(c->vault_namespace, '\n'))))
        return cp_secret_fail(err, errlen, ref, GW_EINVAL,
                              "VAULT_TOKEN or VAULT_NAMESPACE contains a line break");
    struct gw_buf url, hdr, answer;
    gw_buf_init(&url, 8192);
    gw_buf_init(&hdr, 8192);
    gw_buf_init(&answer, CP_SECRET_ANSWER_MAX);
    struct curl_slist *hs = NULL, *t;
    size_t alen = strlen(c->vault_addr);
    while (alen > 0 && c->vault_addr[alen - 1] == '/')
        alen--;
    int rc = gw_buf_append(&url, c->vault_addr, alen);
    if (rc == GW_OK)
        rc = gw_buf_appends(&url, "/v1/");
    if (rc == GW_OK)
        rc = append_path(&url, ref->mount);
    if (rc == GW_OK)
        rc = gw_buf_appends(&url, "/data/");
    if (rc == GW_OK)
        rc = append_path(&url, ref->path);
    if (rc == GW_OK)
        rc = gw_buf_printf(&hdr, "X-Vault-Token: %s", c->vault_token);
    if (rc == GW_OK)
        rc = (t = curl_slist_append(hs, hdr.data)) ? (hs = t, GW_OK) : GW_ENOMEM;
    if (rc == GW_OK && c->vault_namespace) {
        gw_buf_reset(&hdr);
        rc = gw_buf_printf(&hdr, "X-Vault-Namespace: %s", c->vault_namespace);
        if (rc == GW_OK)
            rc = (t = curl_slist_append(hs, hdr.data)) ? (hs = t, GW_OK) : GW_ENOMEM;
    }
    if (rc == GW_OK)
        rc = (t = curl_slist_append(hs, "Accept: application/json")) ? (hs = t, GW_OK) : GW_ENOMEM;
    cp_secret_buf_wipe(&hdr);
    long status = 0;
    if (rc != GW_OK)
        rc = cp_secret_fail(err, errlen, ref, rc, "the Vault request cannot be built");
    else
        rc = cp_secret_http(c, ref, "Vault", "GET", url.data, hs, NULL, 0, &status, &answer, err,
                            errlen);
    cp_secret_slist_wipe(hs);
    if (rc == GW_OK && status != 200) {
        char why[160];
        vault_error(&answer, why, sizeof(why));
        const char *sep = why[0] ? ": " : "";
        if (status == 403)
            rc = cp_secret_fail(err, errlen, ref, GW_EINVAL,
                                "Vault refused the token (403%s%s): check VAULT_TOKEN, its "
                                "expiry and its policy for %s/data/%s",
                                sep, why, ref->mount, ref->path);
        else if (status == 404)
            rc = cp_secret_fail(err, errlen, ref, GW_ENOTFOUND,
                                "Vault has no secret at %s/data/%s (404: missing, deleted or "
                                "destroyed, or %s is not a KV v2 mount)",
                                ref->mount, ref->path, ref->mount);
        else if (status >= 500)
            rc = cp_secret_fail(err, errlen, ref, GW_EIO,
                                "Vault answered %ld%s%s (sealed, standby or failing)", status, sep,
                                why);
        else
            rc = cp_secret_fail(err, errlen, ref, GW_EINVAL, "Vault answered %ld%s%s", status, sep,
                                why);
    }
    if (rc == GW_OK) {
        const char *k[3] = {"data", "data", ref->field};
        rc = cp_secret_json_string(answer.data ? answer.data : "", answer.len, k, 3, value);
        if (rc == GW_ENOTFOUND)
            cp_secret_fail(err, errlen, ref, rc, "the Vault secret %s/%s has no field '%s'",
                           ref->mount, ref->path, ref->field);
        else if (rc == GW_EINVAL)
            cp_secret_fail(err, errlen, ref, rc,
                           "Vault's answer is not KV v2 JSON, or field '%s' is not a string",
                           ref->field);
        else if (rc != GW_OK)
            cp_secret_fail(err, errlen, ref, rc, "out of memory reading Vault's answer");
    }
    cp_secret_buf_wipe(&answer);
    gw_buf_free(&url);
    return rc;
}
