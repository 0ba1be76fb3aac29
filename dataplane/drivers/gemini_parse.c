/*
 * The "gemini" driver's answer: SSE chunks or one GenerateContentResponse
 * into canonical events, and Google's errors as failure classes and a
 * Retry-After (what is read and how: gemini.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "drv_gemini_int.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sse.h"
#include "gw_str.h"

/* ----------------------------------------------------------------- errors */

/* Per-minute or per-second limits, or a retry hint, in a Google error's
 * details: the limit is a rate, not a spent quota. 1 rate, 2 daily quota,
 * 0 unknown. */
static int quota_kind(const json_t *details)
{
    int kind = 0;
    size_t i, j;
    json_t *d, *v;
    json_array_foreach(details, i, d)
    {
        const char *type = gw_json_str(d, "@type");
        if (type && strstr(type, "RetryInfo"))
            kind = kind ? kind : 1;
        json_array_foreach(json_object_get(d, "violations"), j, v)
        {
            const char *q = gw_json_str(v, "quotaId");
            if (!q)
                continue;
            if (strstr(q, "PerDay"))
                return 2;
            if (strstr(q, "PerMinute") || strstr(q, "PerSecond"))
                kind = 1;
        }
    }
    return kind;
}

/* google.rpc.RetryInfo's retryDelay ("30s", "1.5s") as whole seconds,
 * rounded up, so the client's Retry-After says what Google said. */
int drv_gemini_retry_after(const char *body, size_t len, char *out, size_t outlen)
{
    json_t *doc = json_loadb(body ? body : "", len, 0, NULL);
    json_t *details = json_object_get(json_object_get(doc, "error"), "details");
    int rc = 1;
    size_t i;
    json_t *d;
    json_array_foreach(details, i, d)
    {
        const char *type = gw_json_str(d, "@type");
        const char *delay = gw_json_str(d, "retryDelay");
        if (!type || !strstr(type, "RetryInfo") || !delay)
            continue;
        char *end = NULL;
        double secs = strtod(delay, &end);
        if (end == delay || strcmp(end, "s") != 0 || !(secs >= 0) || secs > 86400)
            continue;
        long whole = (long)secs;
        if ((double)whole < secs)
            whole++;
        snprintf(out, outlen, "%ld", whole);
        rc = 0;
        break;
    }
    json_decref(doc);
    return rc;
}

/* A details entry (google.rpc.ErrorInfo) with this reason. */
static int has_reason(const json_t *details, const char *reason)
{
    size_t i;
    json_t *d;
    json_array_foreach(details, i, d)
    {
        const char *r = gw_json_str(d, "reason");
        if (r && strcmp(r, reason) == 0)
            return 1;
    }
    return 0;
}

/*
 * A Google API error → failure class. status is the canonical code name
 * (RESOURCE_EXHAUSTED, INVALID_ARGUMENT, ...); http the HTTP status (0 for
 * an error inside a stream). RESOURCE_EXHAUSTED is a rate limit, unless the
 * details name a daily quota, or, with no details saying it is a rate, the
 * message speaks of quota or billing (Gemini's per-minute 429s say "quota"
 * too, but carry a RetryInfo and a PerMinute quota id).
 */
static enum canon_failure google_failure(int http, const json_t *e, const char *body, size_t len)
{
    const char *st = gw_json_str(e, "status");
    const char *m = gw_json_str(e, "message");
    json_t *details = json_object_get(e, "details");
    if (st) {
        if (strcmp(st, "RESOURCE_EXHAUSTED") == 0) {
            int k = quota_kind(details);
            if (k == 2 || (k == 0 && (gw_str_has(m, "quota") || gw_str_has(m, "billing"))))
                return CANON_FAIL_QUOTA_EXHAUSTED;
            return CANON_FAIL_RATE_LIMITED;
        }
        if (strcmp(st, "UNAUTHENTICATED") == 0 || strcmp(st, "PERMISSION_DENIED") == 0)
            return CANON_FAIL_AUTH_FAILED;
        if (strcmp(st, "INVALID_ARGUMENT") == 0) {
            /* A bad key is a 400 INVALID_ARGUMENT with reason API_KEY_INVALID. */
            if (gw_str_has(m, "API key not valid") || has_reason(details, "API_KEY_INVALID"))
                return CANON_FAIL_AUTH_FAILED;
            if (gw_str_has(m, "exceeds the maximum number of tokens"))
                return CANON_FAIL_CONTEXT_OVERFLOW;
            return canon_classify_http(400, m ? m : "", m ? strlen(m) : 0);
        }
        if (strcmp(st, "NOT_FOUND") == 0)
            return gw_str_has(m, "model") ? CANON_FAIL_MODEL_UNAVAILABLE : CANON_FAIL_NOT_FOUND;
        if (strcmp(st, "FAILED_PRECONDITION") == 0)
            /* "User location is not supported", free tier unavailable in
             * the region: this target cannot serve, another may. */
            return CANON_FAIL_MODEL_UNAVAILABLE;
        if (strcmp(st, "UNAVAILABLE") == 0)
            return gw_str_has(m, "model") || gw_str_has(m, "overloaded")
                       ? CANON_FAIL_MODEL_UNAVAILABLE
                       : CANON_FAIL_PROVIDER_5XX;
        if (strcmp(st, "DEADLINE_EXCEEDED") == 0)
            return CANON_FAIL_TIMEOUT;
        if (strcmp(st, "INTERNAL") == 0 || strcmp(st, "UNKNOWN") == 0)
            return CANON_FAIL_PROVIDER_5XX;
    }
    if (http)
        return canon_classify_http(http, body, len);
    return CANON_FAIL_PROVIDER_5XX;
}

void drv_gemini_classify(int status, const char *body, size_t len, enum canon_failure *f, char *msg,
                         size_t msglen)
{
    drv_classify_default(status, body, len, f, msg, msglen);
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    /* Some front ends answer with a one-element array of the error. */
    if (!e && json_is_array(j))
        e = json_object_get(json_array_get(j, 0), "error");
    if (json_is_object(e)) {
        *f = google_failure(status, e, body, len);
        const char *m = gw_json_str(e, "message");
        if (m)
            snprintf(msg, msglen, "%s", m);
    }
    json_decref(j);
}

/* ------------------------------------------------------------------ parse */

struct gem_parser {
    struct drv_parser base;
    struct drv_tools tools;
    int content;     /* a content event went out */
    int have_finish; /* a finishReason arrived */
    enum canon_stop stop;
    struct canon_usage sent; /* the last USAGE emitted (have 0: none) */
    struct canon_usage last; /* the latest reported */
};

struct drv_parser *drv_gemini_parser_new(int stream)
{
    struct gem_parser *p = drv_parser_new(sizeof(*p), &drv_gemini, stream);
    return p ? &p->base : NULL;
}

static int emit_usage(const struct canon_usage *u, struct gem_parser *p, const struct canon_sink *s)
{
    p->sent = *u;
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = u};
    return canon_emit(s, &ev);
}

static int usage_differs(const struct canon_usage *a, const struct canon_usage *b)
{
    return a->have != b->have || a->input != b->input || a->cache_read != b->cache_read ||
           a->output != b->output || a->reasoning != b->reasoning;
}

/* usageMetadata → canonical. promptTokenCount includes the cached part. */
static int on_usage(struct gem_parser *p, const json_t *um, const struct canon_sink *s)
{
    if (!json_is_object(um))
        return 0;
    long long prompt = 0, cached = 0, cand = 0, thoughts = 0;
    gw_json_int(um, "promptTokenCount", &prompt);
    gw_json_int(um, "cachedContentTokenCount", &cached);
    gw_json_int(um, "candidatesTokenCount", &cand);
    gw_json_int(um, "thoughtsTokenCount", &thoughts);
    prompt = canon_tokens(prompt);
    cached = canon_tokens(cached);
    if (cached > prompt)
        cached = prompt;
    cand = canon_tokens(cand);
    thoughts = canon_tokens(thoughts);
    struct canon_usage u = {.have = 1};
    u.input = prompt - cached;
    u.cache_read = cached;
    u.output = cand + thoughts;
    u.reasoning = thoughts;
    p->last = u;
    /* Before content: say it now (a facade may need input tokens first);
     * after: once more before DONE, so usage never splits content. */
    if (!p->content && usage_differs(&u, &p->sent))
        return emit_usage(&p->last, p, s);
    return 0;
}

static enum canon_stop stop_of(const char *fr)
{
    if (strcmp(fr, "MAX_TOKENS") == 0)
        return CANON_STOP_MAX_TOKENS;
    if (strcmp(fr, "SAFETY") == 0 || strcmp(fr, "RECITATION") == 0 ||
        strcmp(fr, "BLOCKLIST") == 0 || strcmp(fr, "PROHIBITED_CONTENT") == 0 ||
        strcmp(fr, "SPII") == 0 || strcmp(fr, "IMAGE_SAFETY") == 0)
        return CANON_STOP_CONTENT_FILTER;
    return CANON_STOP_END;
}

static int on_function_call(struct gem_parser *p, const json_t *fc, const struct canon_sink *s)
{
    const char *name = gw_json_str(fc, "name");
    if (!name || !*name)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a function call without a name");
    json_t *args = json_object_get(fc, "args");
    if (args && !json_is_null(args) && !json_is_object(args))
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent function call arguments that are not an object");
    char *a = json_is_object(args) ? json_dumps(args, JSON_COMPACT) : NULL;
    if (json_is_object(args) && !a)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "out of memory");
    /* Every functionCall part is a new call, whole. */
    int rc = drv_tools_whole(&p->base, &p->tools, gw_json_str(fc, "id"), name, a, s);
    free(a);
    return rc;
}

static int on_parts(struct gem_parser *p, const json_t *c, struct drv_logprobs *lp,
                    const struct canon_sink *s);

/* One GenerateContentResponse (a streamed chunk or the whole answer). */
static int on_response(struct gem_parser *p, const json_t *doc, const struct canon_sink *s)
{
    json_t *e = json_object_get(doc, "error");
    if (json_is_object(e)) {
        const char *m = gw_json_str(e, "message");
        return drv_fail(&p->base, s, google_failure(0, e, NULL, 0),
                        m ? m : "the provider reported an error");
    }
    if (drv_start(&p->base, gw_json_str(doc, "responseId"), gw_json_str(doc, "modelVersion"), s))
        return 1;
    if (on_usage(p, json_object_get(doc, "usageMetadata"), s))
        return 1;
    json_t *cands = json_object_get(doc, "candidates");
    json_t *c = json_array_get(cands, 0);
    if (!c) {
        const char *br = gw_json_str(json_object_get(doc, "promptFeedback"), "blockReason");
        if (br)
            return drv_fail(&p->base, s, CANON_FAIL_CONTENT_FILTERED,
                            "the provider blocked the prompt");
        return 0;
    }
    /* The chunk's tokens' log probabilities ride on its first text. */
    struct drv_logprobs lp = {0};
    if (json_is_object(json_object_get(c, "logprobsResult")) &&
        drv_logprobs_gemini(json_object_get(c, "logprobsResult"), &lp) != GW_OK)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "out of memory");
    int rc = on_parts(p, c, &lp, s);
    drv_logprobs_free(&lp);
    if (rc)
        return 1;
    const char *fr = gw_json_str(c, "finishReason");
    if (fr) {
        p->have_finish = 1;
        p->stop = stop_of(fr);
    }
    return 0;
}

/* Candidate c's parts; lp goes with the first text that is not thought. */
static int on_parts(struct gem_parser *p, const json_t *c, struct drv_logprobs *lp,
                    const struct canon_sink *s)
{
    size_t i;
    json_t *part;
    json_array_foreach(json_object_get(json_object_get(c, "content"), "parts"), i, part)
    {
        const char *text = gw_json_str(part, "text");
        json_t *fc = json_object_get(part, "functionCall");
        if (json_is_object(fc)) {
            p->content = 1;
            if (on_function_call(p, fc, s))
                return 1;
        } else if (text && *text) {
            int thought = gw_json_bool(part, "thought", 0, NULL) == 1;
            p->content = 1;
            struct canon_event ev = {.type = thought ? CANON_EV_REASONING : CANON_EV_CHUNK,
                                     .text = text,
                                     .len = strlen(text)};
            if (!thought && lp->n) {
                ev.logprobs = lp->lp;
                ev.nlogprobs = lp->n;
                lp->n = 0;
            }
            if (canon_emit(s, &ev))
                return 1;
        }
    }
    return 0;
}

static int done(struct gem_parser *p, const struct canon_sink *s)
{
    if (drv_tools_close(&p->tools, s))
        return 1;
    if (p->last.have && usage_differs(&p->last, &p->sent) && emit_usage(&p->last, p, s))
        return 1;
    p->base.terminal = 1;
    enum canon_stop stop = p->stop;
    if (stop == CANON_STOP_END && p->tools.count > 0)
        stop = CANON_STOP_TOOL_USE;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = stop};
    canon_emit(s, &ev);
    return 1;
}

static int on_sse(struct drv_parser *bp, const struct gw_sse_event *ev, const json_t *doc,
                  const struct canon_sink *s)
{
    (void)ev;
    return on_response((struct gem_parser *)bp, doc, s);
}

int drv_gemini_parse(struct drv_parser *bp, const char *buf, size_t len, const struct canon_sink *s)
{
    return drv_parse_sse(bp, buf, len, s, drv_sse_skip_empty, on_sse);
}

static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    struct gem_parser *p = (struct gem_parser *)bp;
    if (on_response(p, doc, s))
        return;
    if (!json_array_size(json_object_get(doc, "candidates")))
        drv_fail(&p->base, s, CANON_FAIL_EMPTY_OUTPUT, "the provider's answer has no candidates");
    else
        done(p, s);
}

void drv_gemini_finish(struct drv_parser *bp, const struct canon_sink *s)
{
    struct gem_parser *p = (struct gem_parser *)bp;
    if (drv_finish(bp, s, parse_whole))
        return;
    /* No terminator in this format: complete only after a finishReason. */
    if (p->have_finish)
        done(p, s);
    else
        drv_fail(&p->base, s, CANON_FAIL_NETWORK, "the provider's stream ended before it finished");
}
