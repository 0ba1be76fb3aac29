#include "cp_catalog_api.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cp_call.h"
#include "cp_catalog_import.h"
#include "cp_db.h"
#include "cp_fetch.h"
#include "gw_curlev.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_log.h"
#include "gw_pool.h"

/* An import waiting on its URL. Lives in the request's pool. */
struct pending {
    struct cp_call *c; /* the deferred copy (cp_call_defer) */
    struct gw_curlev *curl;
    struct cp_fetch f;
    int running; /* the transfer is on the multi */
};

static void fetch_cleanup(void *arg)
{
    cp_fetch_cleanup(arg);
}

/* Imports text and answers. from_url: a document that is not a catalog is
 * the URL's fault (502), not the request's (400). */
static void import_and_answer(struct cp_call *c, const char *source, const char *text, size_t n,
                              int from_url)
{
    json_t *answer = NULL;
    struct cp_verr e = {0};
    struct cp_db_err dberr;
    int rc = cp_catalog_import(c, source, text, n, &answer, &e, &dberr);
    if (rc == GW_OK)
        return cp_call_json(c, 200, answer, 0);
    if (rc == GW_EIO)
        return cp_call_db_error(c, &dberr);
    if (rc == GW_EINVAL && from_url)
        return cp_call_error(c, 502, "invalid_document", "url", "url: %s: %s", source + 4,
                             e.message);
    cp_call_fail(c, &e);
}

static void on_done(CURL *easy, CURLcode result, void *arg)
{
    (void)easy;
    struct pending *pd = arg;
    pd->running = 0;
    gw_http_req_on_close(pd->c->req, NULL, NULL);
    char err[768], source[600];
    int rc = cp_fetch_done(&pd->f, result, err, sizeof(err));
    if (rc == GW_EINVAL) /* the URL led somewhere the policy refuses */
        return cp_call_error(pd->c, 400, "invalid_value", "url", "url: %s", err);
    if (rc != GW_OK) {
        gw_logf(GW_LOG_WARN, "catalog import: the URL fetch failed", "{s:s}", "error", err);
        return cp_call_error(pd->c, 502, "fetch_failed", "url", "url: %s", err);
    }
    snprintf(source, sizeof(source), "url:%s", pd->f.url);
    import_and_answer(pd->c, source, pd->f.body.data ? pd->f.body.data : "", pd->f.body.len, 1);
}

/* The client went away: the transfer stops, the request ends. */
static void on_close(struct gw_http_req *req, void *arg)
{
    (void)req;
    struct pending *pd = arg;
    if (!pd->running)
        return;
    gw_curlev_remove(pd->curl, pd->f.easy);
    pd->running = 0;
    cp_call_error(pd->c, 499, "client_closed", NULL,
                  "the client closed the connection; nothing was imported");
}

static void import_url(struct cp_call *c, struct gw_curlev *curl, unsigned fetch_allow,
                       const char *url)
{
    char err[512];
    struct pending *pd = gw_pool_calloc(c->pool, sizeof(*pd));
    if (!pd)
        return cp_call_error(c, 500, "internal", NULL, "out of memory");
    int rc = cp_fetch_init(&pd->f, url, fetch_allow, 0, 0, err, sizeof(err));
    if (rc == GW_EINVAL)
        return cp_call_error(c, 400, "invalid_value", "url", "url: %s", err);
    if (rc != GW_OK)
        return cp_call_error(c, 500, "internal", NULL, "%s", err);
    if (gw_pool_cleanup(c->pool, fetch_cleanup, &pd->f) != GW_OK) {
        cp_fetch_cleanup(&pd->f);
        return cp_call_error(c, 500, "internal", NULL, "out of memory");
    }
    pd->curl = curl;
    if (!curl || !(pd->c = cp_call_defer(c)))
        return cp_call_error(c, 500, "internal", NULL, "out of memory");
    if (gw_curlev_add(curl, pd->f.easy, on_done, pd) != GW_OK)
        return cp_call_error(pd->c, 500, "internal", NULL, "cannot start the fetch");
    pd->running = 1;
    gw_http_req_on_close(c->req, on_close, pd);
}

void cp_catalog_api_import(struct cp_call *c, struct gw_curlev *curl, unsigned fetch_allow)
{
    if (!cp_call_method(c, "POST"))
        return;
    size_t len;
    const char *body = gw_http_req_body(c->req, &len);
    /* Which of the two bodies is it? jansson's doubles are fine for that;
     * the document itself is read again by the import, numbers as text. */
    json_error_t je;
    json_t *j = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!j) {
        if (!len)
            return cp_call_error(c, 400, "invalid_json", NULL,
                                 "the body must be a LiteLLM catalog or {\"url\": ...} (it is "
                                 "empty)");
        return cp_call_error(c, 400, "invalid_json", NULL,
                             "the body must be a JSON object: malformed JSON at line %d, column %d",
                             je.line, je.column);
    }
    json_t *url = json_object_get(j, "url");
    if (url && !json_is_object(url)) {
        /* {"url": ...}: a model entry is an object, so a "url" that is not
         * one asks for a fetch, and must come alone. */
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
        {
            if (strcmp(k, "url") != 0) {
                cp_call_error(c, 400, "unknown_field", k,
                              "%s: unknown field (a body with \"url\" holds nothing else)", k);
                json_decref(j);
                return;
            }
        }
        if (!json_is_string(url)) {
            json_decref(j);
            return cp_call_error(c, 400, "invalid_type", "url",
                                 "url: must be a string (an https:// URL)");
        }
        import_url(c, curl, fetch_allow, json_string_value(url));
        json_decref(j);
        return;
    }
    json_decref(j);
    import_and_answer(c, "body", body, len, 0);
}
