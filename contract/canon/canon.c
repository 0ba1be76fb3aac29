#include "canon.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_pool.h"
#include "gw_str.h"
#include "gw_upc.h"

#define DEFAULT_ACC_MAX (32u << 20)

int64_t canon_usage_prompt(const struct canon_usage *u)
{
    return u->input + u->cache_read + u->cache_write_5m + u->cache_write_1h;
}

void canon_usage_clamp(struct canon_usage *u)
{
    u->input = canon_tokens(u->input);
    u->cache_read = canon_tokens(u->cache_read);
    u->cache_write_5m = canon_tokens(u->cache_write_5m);
    u->cache_write_1h = canon_tokens(u->cache_write_1h);
    u->output = canon_tokens(u->output);
    u->reasoning = canon_tokens(u->reasoning);
    if (u->reasoning > u->output)
        u->reasoning = u->output;
}

static const char *const stop_names[] = {
    [CANON_STOP_END] = "end",
    [CANON_STOP_MAX_TOKENS] = "max_tokens",
    [CANON_STOP_TOOL_USE] = "tool_use",
    [CANON_STOP_SEQUENCE] = "stop_sequence",
    [CANON_STOP_CONTENT_FILTER] = "content_filter",
    [CANON_STOP_REFUSAL] = "refusal",
};

const char *canon_stop_name(enum canon_stop s)
{
    return (unsigned)s < sizeof(stop_names) / sizeof(*stop_names) ? stop_names[s] : "end";
}

/* The closed taxonomy and what each class decides. Retrying the same
 * target helps with what passes (a timeout, a dropped connection, a 5xx,
 * a rate limit, an overloaded model, an empty answer); not with a spent
 * quota, refused credentials, or a request this model cannot take. */
static const struct {
    const char *name;
    int status;
    unsigned char advances, counts, retries;
} failures[CANON_FAIL_COUNT] = {
    [CANON_FAIL_TIMEOUT] = {"timeout", 504, 1, 1, 1},
    [CANON_FAIL_NETWORK] = {"network", 502, 1, 1, 1},
    [CANON_FAIL_PROVIDER_5XX] = {"provider_5xx", 502, 1, 1, 1},
    [CANON_FAIL_RATE_LIMITED] = {"rate_limited", 429, 1, 1, 1},
    [CANON_FAIL_MODEL_UNAVAILABLE] = {"model_unavailable", 503, 1, 1, 1},
    [CANON_FAIL_QUOTA_EXHAUSTED] = {"quota_exhausted", 429, 1, 1, 0},
    [CANON_FAIL_AUTH_FAILED] = {"auth_failed", 502, 1, 1, 0},
    [CANON_FAIL_EMPTY_OUTPUT] = {"empty_output", 502, 1, 1, 1},
    [CANON_FAIL_CONTEXT_OVERFLOW] = {"context_overflow", 400, 1, 0, 0},
    [CANON_FAIL_UNSUPPORTED_INPUT] = {"unsupported_input", 400, 1, 0, 0},
    [CANON_FAIL_BAD_REQUEST] = {"bad_request", 400, 0, 0, 0},
    [CANON_FAIL_NOT_FOUND] = {"not_found", 404, 0, 0, 0},
    [CANON_FAIL_PAYLOAD_TOO_LARGE] = {"payload_too_large", 413, 0, 0, 0},
    [CANON_FAIL_CONTENT_FILTERED] = {"content_filtered", 400, 0, 0, 0},
    [CANON_FAIL_CANCELED] = {"canceled", 499, 0, 0, 0},
};

const char *canon_failure_name(enum canon_failure f)
{
    return (unsigned)f < CANON_FAIL_COUNT ? failures[f].name : "provider_5xx";
}

int canon_failure_from_name(const char *name)
{
    for (int f = 0; name && f < CANON_FAIL_COUNT; f++)
        if (strcmp(name, failures[f].name) == 0)
            return f;
    return -1;
}

int canon_failure_status(enum canon_failure f)
{
    return (unsigned)f < CANON_FAIL_COUNT ? failures[f].status : 502;
}

int canon_failure_advances(enum canon_failure f)
{
    return (unsigned)f < CANON_FAIL_COUNT && failures[f].advances;
}

int canon_failure_counts(enum canon_failure f)
{
    return (unsigned)f < CANON_FAIL_COUNT && failures[f].counts;
}

int canon_failure_retries(enum canon_failure f)
{
    return (unsigned)f < CANON_FAIL_COUNT && failures[f].retries;
}

int canon_emit(const struct canon_sink *s, const struct canon_event *ev)
{
    return s->emit(s->arg, ev);
}

int canon_emit_error(const struct canon_sink *s, enum canon_failure f, int status,
                     const char *message)
{
    struct canon_event ev = {
        .type = CANON_EV_ERROR, .failure = f, .status = status, .message = message};
    return s->emit(s->arg, &ev);
}

/* ---------------------------------------------------------------- request */

static const char *const openai_field_names[CANON_F_COUNT] = {
    [CANON_F_MESSAGES] = "messages",
    [CANON_F_SYSTEM] = "messages",
    [CANON_F_TOOLS] = "tools",
    [CANON_F_TOOL_CHOICE] = "tool_choice",
    [CANON_F_PARALLEL_TOOL_CALLS] = "parallel_tool_calls",
    [CANON_F_TEMPERATURE] = "temperature",
    [CANON_F_TOP_P] = "top_p",
    [CANON_F_TOP_K] = "top_k",
    [CANON_F_MAX_TOKENS] = "max_tokens",
    [CANON_F_SEED] = "seed",
    [CANON_F_PRESENCE_PENALTY] = "presence_penalty",
    [CANON_F_FREQUENCY_PENALTY] = "frequency_penalty",
    [CANON_F_STOP] = "stop",
    [CANON_F_RESPONSE_FORMAT] = "response_format",
    [CANON_F_REASONING] = "reasoning_effort",
    [CANON_F_USER] = "user",
    [CANON_F_SERVICE_TIER] = "service_tier",
    [CANON_F_LOGPROBS] = "logprobs",
};

const char *canon_field_name(const struct canon_req *r, enum canon_field f)
{
    if ((unsigned)f >= CANON_F_COUNT)
        return "";
    if (r && r->field_names && r->field_names[f])
        return r->field_names[f];
    return openai_field_names[f];
}

void canon_err_set(struct canon_err *e, int status, const char *param, const char *code,
                   const char *fmt, ...)
{
    e->status = status;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    snprintf(e->code, sizeof(e->code), "%s", code ? code : "invalid_request");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

struct canon_req *canon_req_new(json_t *body)
{
    struct gw_pool *pool = gw_pool_new(4096);
    if (!pool) {
        json_decref(body);
        return NULL;
    }
    struct canon_req *r = gw_pool_calloc(pool, sizeof(*r));
    if (!r) {
        gw_pool_free(pool);
        json_decref(body);
        return NULL;
    }
    r->pool = pool;
    r->body = body;
    r->parallel_tool_calls = -1;
    r->format_strict = -1;
    r->top_logprobs = -1;
    return r;
}

void canon_req_free(struct canon_req *r)
{
    if (!r)
        return;
    json_decref(r->body);
    gw_pool_free(r->pool);
}

void canon_embed_resp_free(struct canon_embed_resp *e)
{
    free(e->values);
    e->values = NULL;
}

/* ------------------------------------------------------------- accumulator */

static struct gw_buf *new_buf(size_t max)
{
    struct gw_buf *b = malloc(sizeof(*b));
    if (b)
        gw_buf_init(b, max);
    return b;
}

static void free_buf(struct gw_buf *b)
{
    if (b) {
        gw_buf_free(b);
        free(b);
    }
}

void canon_acc_init(struct canon_acc *a, size_t max_bytes)
{
    memset(a, 0, sizeof(*a));
    a->max_bytes = max_bytes ? max_bytes : DEFAULT_ACC_MAX;
}

void canon_acc_free(struct canon_acc *a)
{
    free(a->response_id);
    free(a->model);
    free(a->signature);
    free_buf(a->text);
    free_buf(a->reasoning);
    for (size_t i = 0; i < a->ntools; i++) {
        free(a->tools[i].id);
        free(a->tools[i].name);
        free_buf(a->tools[i].args);
    }
    free(a->tools);
    for (size_t i = 0; i < a->nthinks; i++) {
        free_buf(a->thinks[i].text);
        free(a->thinks[i].signature);
    }
    free(a->thinks);
    free(a->service_tier);
    json_decref(a->logprobs);
    json_decref(a->citations);
    memset(a, 0, sizeof(*a));
}

static int append_to(struct canon_acc *a, struct gw_buf **b, const char *s, size_t n)
{
    if (!*b && !(*b = new_buf(a->max_bytes)))
        return GW_ENOMEM;
    return gw_buf_append(*b, s, n);
}

/* Reasoning goes to the joined text and to its block: a new block when
 * none is open (the last one was signed or redacted). */
static int add_reasoning(struct canon_acc *a, const struct canon_event *ev)
{
    struct canon_acc_think *t = a->nthinks ? &a->thinks[a->nthinks - 1] : NULL;
    if (!t || t->signature || t->redacted || ev->redacted) {
        if (a->nthinks >= 256)
            return GW_ELIMIT;
        struct canon_acc_think *n = realloc(a->thinks, (a->nthinks + 1) * sizeof(*n));
        if (!n)
            return GW_ENOMEM;
        a->thinks = n;
        t = &n[a->nthinks++];
        memset(t, 0, sizeof(*t));
        t->redacted = ev->redacted;
    }
    int rc = append_to(a, &t->text, ev->len ? ev->text : "", ev->len);
    if (rc != GW_OK || ev->redacted)
        return rc;
    if (ev->signature) {
        free(a->signature);
        if (!(a->signature = strdup(ev->signature)) || !(t->signature = strdup(ev->signature)))
            return GW_ENOMEM;
    }
    return append_to(a, &a->reasoning, ev->len ? ev->text : "", ev->len);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static json_t *logprob_json(const struct canon_logprob *lp)
{
    return json_pack("{s:s%,s:f}", "token", lp->token ? lp->token : "", lp->token ? lp->len : 0,
                     "logprob", lp->logprob);
}

json_t *canon_logprobs_json(const struct canon_logprob *lp, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = logprob_json(&lp[i]);
        json_t *top = json_array();
        for (size_t j = 0; o && top && j < lp[i].ntop; j++)
            if (json_array_append_new(top, logprob_json(&lp[i].top[j])) != 0)
                json_decref(top), top = NULL;
        if (!o || !top || json_object_set_new(o, "top", top) != 0 ||
            json_array_append_new(arr, o) != 0) {
            if (!top || !o)
                json_decref(top), json_decref(o);
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* The tier a START or USAGE reported, kept (the last one wins). */
static int keep_tier(struct canon_acc *a, const char *tier)
{
    if (!tier)
        return GW_OK;
    free(a->service_tier);
    return (a->service_tier = strdup(tier)) ? GW_OK : GW_ENOMEM;
}

static int add_chunk(struct canon_acc *a, const struct canon_event *ev)
{
    if (ev->nlogprobs) {
        json_t *lp = canon_logprobs_json(ev->logprobs, ev->nlogprobs);
        if (!lp)
            return GW_ENOMEM;
        if (!a->logprobs)
            a->logprobs = lp;
        else if (json_array_extend(a->logprobs, lp) != 0) {
            json_decref(lp);
            return GW_ENOMEM;
        } else
            json_decref(lp);
    }
    return append_to(a, &a->text, ev->text, ev->len);
}

static int add_citation(struct canon_acc *a, const struct canon_event *ev)
{
    json_t *c = ev->citation ? json_loads(ev->citation, 0, NULL) : NULL;
    if (!json_is_object(c)) {
        json_decref(c);
        return GW_EINVAL;
    }
    if (!a->citations && !(a->citations = json_array())) {
        json_decref(c);
        return GW_ENOMEM;
    }
    size_t at = a->text ? a->text->len : 0;
    return json_array_append_new(a->citations,
                                 json_pack("{s:I,s:o}", "at", (json_int_t)at, "citation", c)) == 0
               ? GW_OK
               : GW_ENOMEM;
}

int canon_acc_add(struct canon_acc *a, const struct canon_event *ev)
{
    switch (ev->type) {
    case CANON_EV_START:
        free(a->response_id);
        free(a->model);
        a->response_id = dup_or_null(ev->id);
        a->model = dup_or_null(ev->name);
        return keep_tier(a, ev->service_tier);
    case CANON_EV_CHUNK:
        return add_chunk(a, ev);
    case CANON_EV_REASONING:
        return add_reasoning(a, ev);
    case CANON_EV_TOOL_START: {
        if (ev->index != (int)a->ntools)
            return GW_EINVAL;
        if (a->ntools == a->tools_cap) {
            size_t cap = a->tools_cap ? a->tools_cap * 2 : 4;
            if (cap > 1024)
                return GW_ELIMIT;
            struct canon_acc_tool *t = realloc(a->tools, cap * sizeof(*t));
            if (!t)
                return GW_ENOMEM;
            a->tools = t;
            a->tools_cap = cap;
        }
        struct canon_acc_tool *t = &a->tools[a->ntools];
        memset(t, 0, sizeof(*t));
        t->id = strdup(ev->id ? ev->id : "");
        t->name = strdup(ev->name ? ev->name : "");
        t->args = new_buf(a->max_bytes);
        a->ntools++;
        return t->id && t->name && t->args ? GW_OK : GW_ENOMEM;
    }
    case CANON_EV_TOOL_DELTA:
        if (ev->index < 0 || (size_t)ev->index >= a->ntools)
            return GW_EINVAL;
        return gw_buf_append(a->tools[ev->index].args, ev->text, ev->len);
    case CANON_EV_TOOL_END:
        return ev->index >= 0 && (size_t)ev->index < a->ntools ? GW_OK : GW_EINVAL;
    case CANON_EV_USAGE:
        a->usage = *ev->usage;
        return keep_tier(a, ev->service_tier);
    case CANON_EV_CITATION:
        return add_citation(a, ev);
    case CANON_EV_DONE:
        a->stop = ev->stop;
        a->done = 1;
        return GW_OK;
    case CANON_EV_ERROR:
        return GW_EINVAL;
    }
    return GW_EINVAL;
}

/* ---------------------------------------------------------------- helpers */

enum canon_stop canon_stop_from_openai(const char *s)
{
    if (!s)
        return CANON_STOP_END;
    if (strcmp(s, "length") == 0)
        return CANON_STOP_MAX_TOKENS;
    if (strcmp(s, "tool_calls") == 0 || strcmp(s, "function_call") == 0)
        return CANON_STOP_TOOL_USE;
    if (strcmp(s, "content_filter") == 0)
        return CANON_STOP_CONTENT_FILTER;
    return CANON_STOP_END;
}

enum canon_stop canon_stop_from_anthropic(const char *s)
{
    if (!s)
        return CANON_STOP_END;
    if (strcmp(s, "max_tokens") == 0 || strcmp(s, "model_context_window_exceeded") == 0)
        return CANON_STOP_MAX_TOKENS;
    if (strcmp(s, "tool_use") == 0)
        return CANON_STOP_TOOL_USE;
    if (strcmp(s, "stop_sequence") == 0)
        return CANON_STOP_SEQUENCE;
    if (strcmp(s, "refusal") == 0)
        return CANON_STOP_REFUSAL;
    return CANON_STOP_END;
}

const char *canon_stop_to_openai(enum canon_stop s)
{
    switch (s) {
    case CANON_STOP_MAX_TOKENS:
        return "length";
    case CANON_STOP_TOOL_USE:
        return "tool_calls";
    case CANON_STOP_CONTENT_FILTER:
    case CANON_STOP_REFUSAL:
        return "content_filter";
    case CANON_STOP_END:
    case CANON_STOP_SEQUENCE:
        break;
    }
    return "stop";
}

const char *canon_stop_to_anthropic(enum canon_stop s)
{
    switch (s) {
    case CANON_STOP_MAX_TOKENS:
        return "max_tokens";
    case CANON_STOP_TOOL_USE:
        return "tool_use";
    case CANON_STOP_SEQUENCE:
        return "stop_sequence";
    case CANON_STOP_CONTENT_FILTER:
    case CANON_STOP_REFUSAL:
        return "refusal";
    case CANON_STOP_END:
        break;
    }
    return "end_turn";
}

enum canon_failure canon_classify_transport(int upc_result)
{
    return upc_result == GW_UPC_ETIMEOUT ? CANON_FAIL_TIMEOUT : CANON_FAIL_NETWORK;
}

enum canon_failure canon_classify_http(int status, const char *body, size_t len)
{
    if (len > 65536)
        len = 65536;
    if (status == 400 || status == 422 || status == 413) {
        if (gw_mem_has(body, len, "context length") || gw_mem_has(body, len, "context_length") ||
            gw_mem_has(body, len, "context window") || gw_mem_has(body, len, "too many tokens") ||
            gw_mem_has(body, len, "prompt is too long") ||
            gw_mem_has(body, len, "input is too long") ||
            gw_mem_has(body, len, "maximum context") ||
            /* Anthropic: "input length and `max_tokens` exceed context limit" */
            gw_mem_has(body, len, "context limit"))
            return CANON_FAIL_CONTEXT_OVERFLOW;
        if (status == 413)
            return CANON_FAIL_PAYLOAD_TOO_LARGE;
        /* Anthropic answers a spent prepaid balance with a 400
         * invalid_request_error: "Your credit balance is too low ...". */
        if (gw_mem_has(body, len, "credit balance"))
            return CANON_FAIL_QUOTA_EXHAUSTED;
        /* Bedrock: "This model doesn't support tool use."; OpenAI, an image
         * to a text model: "image_url is only supported by certain models". */
        if (gw_mem_has(body, len, "does not support") || gw_mem_has(body, len, "not supported") ||
            gw_mem_has(body, len, "unsupported") || gw_mem_has(body, len, "doesn't support") ||
            gw_mem_has(body, len, "only supported"))
            return CANON_FAIL_UNSUPPORTED_INPUT;
        if (gw_mem_has(body, len, "content filter") || gw_mem_has(body, len, "content_filter") ||
            gw_mem_has(body, len, "content management policy"))
            return CANON_FAIL_CONTENT_FILTERED;
        return CANON_FAIL_BAD_REQUEST;
    }
    if (status == 401 || status == 403)
        return CANON_FAIL_AUTH_FAILED;
    if (status == 402)
        return CANON_FAIL_QUOTA_EXHAUSTED;
    if (status == 404) {
        /* A provider that does not know the model is a target problem. */
        if (gw_mem_has(body, len, "model"))
            return CANON_FAIL_MODEL_UNAVAILABLE;
        return CANON_FAIL_NOT_FOUND;
    }
    if (status == 408)
        return CANON_FAIL_TIMEOUT;
    if (status == 429) {
        /* A rate limit's message may point at billing too (OpenAI's free
         * tier: "add a payment method ... account/billing"; Groq: "Upgrade
         * ... settings/billing"), and Vertex's per-minute limits say "Quota
         * exceeded": the rate wording wins over those, not over OpenAI's
         * insufficient_quota code nor a daily limit (OpenAI's "requests per
         * day (RPD)"), which no retry within the request outlives. */
        if (gw_mem_has(body, len, "insufficient_quota") || gw_mem_has(body, len, "per day") ||
            gw_mem_has(body, len, "per_day"))
            return CANON_FAIL_QUOTA_EXHAUSTED;
        if (gw_mem_has(body, len, "rate limit") || gw_mem_has(body, len, "rate_limit") ||
            gw_mem_has(body, len, "per min") || gw_mem_has(body, len, "per_min"))
            return CANON_FAIL_RATE_LIMITED;
        if (gw_mem_has(body, len, "quota exceeded") || gw_mem_has(body, len, "billing"))
            return CANON_FAIL_QUOTA_EXHAUSTED;
        return CANON_FAIL_RATE_LIMITED;
    }
    if (status == 504 || status == 524)
        return CANON_FAIL_TIMEOUT;
    if (status == 503 || status == 529)
        return gw_mem_has(body, len, "model") ? CANON_FAIL_MODEL_UNAVAILABLE
                                              : CANON_FAIL_PROVIDER_5XX;
    if (status >= 500)
        return CANON_FAIL_PROVIDER_5XX;
    return CANON_FAIL_BAD_REQUEST;
}

int canon_parse_data_url(struct gw_pool *pool, const char *url, const char **media_type,
                         const char **data)
{
    if (strncmp(url, "data:", 5) != 0)
        return GW_EINVAL;
    const char *semi = strstr(url + 5, ";base64,");
    if (!semi || semi == url + 5)
        return GW_EINVAL;
    const char *comma = semi + 7;
    *media_type = gw_pool_strndup(pool, url + 5, (size_t)(semi - (url + 5)));
    *data = comma + 1;
    return *media_type ? GW_OK : GW_ENOMEM;
}

const char *canon_tier_served(const char *s)
{
    static const char *const words[][2] = {
        {"default", "standard"},  {"standard", "standard"}, {"flex", "flex"},
        {"priority", "priority"}, {"scale", "scale"},       {"batch", "batch"},
    };
    for (size_t i = 0; s && i < sizeof(words) / sizeof(*words); i++)
        if (strcmp(s, words[i][0]) == 0)
            return words[i][1];
    return NULL;
}

const char *const canon_tier_words[CANON_TIER_COUNT] = {"auto", "standard", "flex", "priority",
                                                        "scale"};
