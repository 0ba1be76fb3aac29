/*
 * The "bedrock" driver's request signing: where the request goes (the host
 * and path prefix of base_url), the region it is signed for (option or
 * host), the credential, and the SigV4 headers over the exact body (the
 * options and what a misconfiguration says: bedrock.c).
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_bedrock_int.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_sigv4.h"

int drv_bedrock_misconfigured(const struct drv_target *t, struct canon_err *err, const char *what)
{
    canon_err_set(err, 500, NULL, "provider_misconfigured", "provider '%s' (driver bedrock): %s",
                  t->provider->name, what);
    return GW_EINVAL;
}

/* The host ("name[:port]") and the path prefix of base_url. */
int drv_bedrock_split_base(const char *base, const char **host, size_t *hostlen,
                           const char **prefix)
{
    const char *u = base;
    if (strncmp(u, "https://", 8) == 0)
        u += 8;
    else if (strncmp(u, "http://", 7) == 0)
        u += 7;
    else
        return GW_EINVAL;
    if (strpbrk(u, "?#"))
        return GW_EINVAL;
    const char *end = u + strcspn(u, "/");
    const char *at = NULL;
    for (const char *c = u; c < end; c++)
        if (*c == '@')
            at = c;
    if (at)
        u = at + 1;
    if (end == u)
        return GW_EINVAL;
    *host = u;
    *hostlen = (size_t)(end - u);
    *prefix = end;
    return GW_OK;
}

/* The region from a bedrock-runtime[-fips].<region>.amazonaws.com[.cn]
 * host; 0 and region filled, or GW_ENOTFOUND. */
static int region_from_host(const char *host, size_t n, char *region, size_t cap)
{
    const char *colon = memchr(host, ':', n);
    if (colon)
        n = (size_t)(colon - host);
    const char *p = host, *end = host + n;
    while (p < end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot)
            break;
        size_t l = (size_t)(dot - p);
        if ((l == 15 && strncmp(p, "bedrock-runtime", 15) == 0) ||
            (l == 20 && strncmp(p, "bedrock-runtime-fips", 20) == 0)) {
            const char *r = dot + 1;
            const char *rd = memchr(r, '.', (size_t)(end - r));
            if (!rd || rd == r || (size_t)(rd - r) >= cap)
                return GW_ENOTFOUND;
            const char *rest = rd + 1;
            size_t rl = (size_t)(end - rest);
            /* amazonaws.com, amazonaws.com.cn, vpce.amazonaws.com, ... */
            if (!(rl >= 13 && strncmp(rest, "amazonaws.com", 13) == 0) &&
                !strstr(rest, ".amazonaws.com"))
                return GW_ENOTFOUND;
            for (const char *c = r; c < rd; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
                    return GW_ENOTFOUND;
            memcpy(region, r, (size_t)(rd - r));
            region[rd - r] = '\0';
            return GW_OK;
        }
        p = dot + 1;
    }
    return GW_ENOTFOUND;
}

/* "Name: value" without drv_header's line limit: session tokens and API
 * keys can be long. */
int drv_bedrock_add_header(struct drv_request *out, const char *name, const char *prefix,
                           const char *value)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = gw_buf_printf(&b, "%s: %s%s", name, prefix, value);
    if (rc == GW_OK) {
        struct curl_slist *l = curl_slist_append(out->headers, b.data);
        if (l)
            out->headers = l;
        else
            rc = GW_ENOMEM;
    }
    gw_buf_free(&b);
    return rc;
}

/* Signs out (url, body already set) with SigV4 and adds the headers. */
int drv_bedrock_sign_request(const struct drv_target *t, const char *host, const char *path,
                             struct drv_request *out, struct canon_err *err)
{
    const char *cred = t->provider->credential;
    if (!cred || !*cred)
        return drv_bedrock_misconfigured(t, err,
                                         "no credential: credential_ref must resolve to "
                                         "ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]");
    char *c = strdup(cred);
    if (!c)
        return GW_ENOMEM;
    char *secret = strchr(c, ':');
    char *token = secret ? strchr(secret + 1, ':') : NULL;
    if (secret)
        *secret++ = '\0';
    if (token)
        *token++ = '\0';
    if (!secret || !*c || !*secret) {
        free(c);
        return drv_bedrock_misconfigured(t, err,
                                         "the credential is not ACCESS_KEY_ID:SECRET_ACCESS_KEY"
                                         "[:SESSION_TOKEN]");
    }
    char region[64];
    const char *opt_region = drv_opt_str(t, "region", NULL);
    if (opt_region) {
        size_t n = strlen(opt_region);
        if (n == 0 || n >= sizeof(region) ||
            strspn(opt_region, "abcdefghijklmnopqrstuvwxyz"
                               "0123456789-") != n) {
            free(c);
            return drv_bedrock_misconfigured(
                t, err, "option 'region' must be an AWS region such as us-east-1");
        }
        memcpy(region, opt_region, n + 1);
    } else if (region_from_host(host, strlen(host), region, sizeof(region)) != GW_OK) {
        free(c);
        return drv_bedrock_misconfigured(t, err,
                                         "option 'region' is not set and base_url's host is not "
                                         "bedrock-runtime.<region>.amazonaws.com");
    }
    struct gw_sigv4_params sp = {.access_key = c,
                                 .secret_key = secret,
                                 .session_token = token,
                                 .region = region,
                                 .service = "bedrock"};
    struct gw_sigv4_header hs[] = {{"host", host}, {"content-type", "application/json"}};
    struct gw_sigv4_result res;
    gw_sigv4_result_init(&res);
    int rc = gw_sigv4_sign(&sp, "POST", path, "", hs, 2, out->body, out->body_len, &res);
    if (rc == GW_EINVAL) {
        rc = drv_bedrock_misconfigured(
            t, err,
            "the request cannot be signed: check the credential's format and "
            "option 'region'");
    }
    for (size_t i = 0; rc == GW_OK && i < res.nadd; i++)
        rc = drv_bedrock_add_header(out, res.add[i].name, "", res.add[i].value);
    gw_sigv4_result_free(&res);
    /* The secret does not linger in freed memory (explicit_bzero: a memset
     * right before free is a store the compiler may drop). */
    explicit_bzero(c, strlen(cred));
    free(c);
    return rc;
}
