#include "dp_driver.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_json.h"

const struct dp_driver *const dp_drivers[DRV_ID_COUNT] = {
    [DRV_ID_OPENAI] = &drv_openai,       [DRV_ID_GEMINI] = &drv_gemini,
    [DRV_ID_OLLAMA] = &drv_ollama,       [DRV_ID_BEDROCK] = &drv_bedrock,
    [DRV_ID_ANTHROPIC] = &drv_anthropic, [DRV_ID_OPENAI_RESPONSES] = &drv_openai_responses,
};

const struct dp_driver *dp_driver_find(const char *name)
{
    const struct dp_driver_info *i = dp_driver_info_find(name);
    return i ? dp_drivers[i->id] : NULL;
}

const struct dp_driver *dp_driver_of(const struct dp_provider *p)
{
    return p && p->drv ? dp_drivers[p->drv->id] : NULL;
}

void drv_request_free(struct drv_request *r)
{
    free(r->url);
    curl_slist_free_all(r->headers);
    free(r->body);
    free(r->iov);
    memset(r, 0, sizeof(*r));
}

int drv_header(struct drv_request *r, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line))
        return GW_EINVAL;
    struct curl_slist *l = curl_slist_append(r->headers, line);
    if (!l)
        return GW_ENOMEM;
    r->headers = l;
    return GW_OK;
}

int drv_common_headers(struct drv_request *r, const struct drv_target *t)
{
    return drv_common_headers_as(r, t, "application/json");
}

int drv_common_headers_as(struct drv_request *r, const struct drv_target *t,
                          const char *content_type)
{
    /* No Expect: 100-continue: gw_upc never waits for one. */
    int rc = drv_header(r, "Content-Type: %s", content_type);
    if (rc == GW_OK && t->request_id)
        rc = drv_header(r, "x-request-id: %s", t->request_id);
    if (rc == GW_OK && t->traceparent)
        rc = drv_header(r, "traceparent: %s", t->traceparent);
    if (rc == GW_OK && t->tracestate)
        rc = drv_header(r, "tracestate: %s", t->tracestate);
    for (size_t i = 0; rc == GW_OK && i < t->provider->nheaders; i++)
        rc = drv_header(r, "%s", t->provider->headers[i]);
    return rc;
}

char *drv_url(const struct drv_target *t, const char *path)
{
    size_t n = strlen(t->provider->base_url) + strlen(path) + 1;
    char *u = malloc(n);
    if (u)
        snprintf(u, n, "%s%s", t->provider->base_url, path);
    return u;
}

const char *drv_opt_str(const struct drv_target *t, const char *key, const char *def)
{
    const char *v = gw_json_str(t->provider->options, key);
    return v ? v : def;
}

long long drv_opt_int(const struct drv_target *t, const char *key, long long def)
{
    long long v;
    return gw_json_int(t->provider->options, key, &v) == GW_OK ? v : def;
}

int drv_body_json(struct drv_request *out, json_t *doc)
{
    if (!doc)
        return GW_ENOMEM;
    /* 15 significant digits: a client's 0.9 goes upstream as 0.9, not as
     * 0.90000000000000002 (the same double, spelled as typed). */
    out->body = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(doc);
    if (!out->body)
        return GW_ENOMEM;
    out->body_len = strlen(out->body);
    return GW_OK;
}

/* The provider's own words, from the usual error shapes; never the
 * request's text (providers do not echo prompts in error messages). */
static void error_message(const char *body, size_t len, char *msg, size_t msglen)
{
    msg[0] = '\0';
    if (!body || len == 0)
        return;
    json_t *j = json_loadb(body, len, 0, NULL);
    if (!j)
        return;
    const char *m = NULL;
    json_t *e = json_object_get(j, "error");
    if (json_is_string(e))
        m = json_string_value(e);
    else if (json_is_object(e))
        m = gw_json_str(e, "message");
    if (!m)
        m = gw_json_str(j, "message");
    if (!m)
        m = gw_json_str(j, "Message");
    if (m)
        snprintf(msg, msglen, "%s", m);
    json_decref(j);
}

void drv_classify_default(int status, const char *body, size_t len, enum canon_failure *f,
                          char *msg, size_t msglen)
{
    *f = canon_classify_http(status, body, len);
    error_message(body, len, msg, msglen);
}
