/*
 * Fault SPECs and the deterministic parts of an answer.
 *
 * A SPEC ("status=429,retry_after=2") is parsed strictly: an unknown key or
 * a value out of range is an error, because a test whose fault silently did
 * nothing would pass for the wrong reason. The helpers below compute what
 * the mock answers (input word counts, tool arguments) from the request
 * alone, so two runs of the same request always get the same answer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pthread.h>

#include "gw_codec.h"
#include "gw_error.h"
#include "gw_hash.h"
#include "mock.h"

void mock_fault_clear(struct mock_fault *f)
{
    memset(f, 0, sizeof(*f));
    f->retry_after = -1;
    f->chunks = -1;
    f->chunk_delay_ms = -1;
    f->drop_after = -1;
}

struct fault_key {
    const char *name;
    size_t offset;
    int lo;
    int hi;
};

#define FK(name, field, lo, hi)                                                                    \
    {                                                                                              \
        name, offsetof(struct mock_fault, field), lo, hi                                           \
    }

static const struct fault_key fault_keys[] = {
    FK("status", status, 400, 599),
    FK("retry_after", retry_after, 0, 86400),
    FK("ttfb_ms", ttfb_ms, 0, MOCK_MAX_MS),
    FK("chunks", chunks, 0, MOCK_MAX_CHUNKS),
    FK("chunk_delay_ms", chunk_delay_ms, 0, MOCK_MAX_MS),
    FK("drop_after", drop_after, 0, MOCK_MAX_CHUNKS),
    FK("hang", hang, 0, 1),
    FK("empty", empty, 0, 1),
    FK("malformed", malformed, 0, 10 * MOCK_MAX_CHUNKS),
    FK("cache_read", cache_read, 0, 1000000000),
    FK("cache_write", cache_write, 0, 1000000000),
    FK("parallel", parallel, 1, MOCK_MAX_PARALLEL),
    FK("interleave", interleave, 0, 1),
    FK("no_body", no_body, 0, 1),
    FK("multiline", multiline, 0, 1),
    FK("blank_events", blank_events, 0, 1),
    FK("tail_ms", tail_ms, 0, MOCK_MAX_MS),
    FK("reasoning", reasoning, 0, MOCK_MAX_CHUNKS),
    FK("cache_write_1h", cache_write_1h, 0, 1000000000),
    FK("times", times, 1, 1000000000),
    FK("after", after, 1, 1000000000),
};

/* error=KIND names, indexed by enum mock_error_kind. */
static const char *const error_kinds[MOCK_ERR_COUNT] = {
    [MOCK_ERR_CONTEXT_LENGTH] = "context_length",
    [MOCK_ERR_INSUFFICIENT_QUOTA] = "insufficient_quota",
    [MOCK_ERR_CONTENT_FILTER] = "content_filter",
    [MOCK_ERR_UNSUPPORTED] = "unsupported",
    [MOCK_ERR_MODEL_NOT_FOUND] = "model_not_found",
    [MOCK_ERR_OVERLOADED] = "overloaded",
    [MOCK_ERR_NOT_FOUND] = "not_found",
};

static int parse_error_kind(const char *v, size_t vlen, struct mock_fault *f, char *err,
                            size_t errlen)
{
    for (int k = 1; k < MOCK_ERR_COUNT; k++) {
        if (strlen(error_kinds[k]) == vlen && memcmp(error_kinds[k], v, vlen) == 0) {
            f->error = k;
            return 0;
        }
    }
    snprintf(err, errlen,
             "fault error wants one of context_length, insufficient_quota, content_filter, "
             "unsupported, model_not_found, overloaded, not_found");
    return GW_EINVAL;
}

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* One "key=value" item, already trimmed. */
static int parse_item(const char *s, size_t len, struct mock_fault *f, char *err, size_t errlen)
{
    const char *eq = memchr(s, '=', len);
    if (eq == NULL) {
        snprintf(err, errlen, "fault item '%.*s' is not key=value", (int)(len > 64 ? 64 : len), s);
        return GW_EINVAL;
    }
    size_t klen = (size_t)(eq - s);
    const char *v = eq + 1;
    size_t vlen = len - klen - 1;
    if (klen == 5 && memcmp(s, "error", 5) == 0)
        return parse_error_kind(v, vlen, f, err, errlen);
    int only_id = klen == 7 && memcmp(s, "only_id", 7) == 0;
    if ((klen == 3 && memcmp(s, "tag", 3) == 0) || only_id) {
        /* tag: no effect; it makes a SPEC text unique, so a times=N
         * counter is a test's own. only_id: the faults apply to requests
         * whose x-request-id starts with it (a gateway sends its request
         * id upstream), the others are answered as if the SPEC were none:
         * a provider that fails for one client of several. */
        for (size_t j = 0; j < vlen; j++) {
            char ch = v[j];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.')) {
                snprintf(err, errlen,
                         "fault tag and only_id want letters, digits, '-', '_' or '.'");
                return GW_EINVAL;
            }
        }
        if (vlen == 0 || vlen > 64) {
            snprintf(err, errlen, "fault tag and only_id want 1 to 64 characters");
            return GW_EINVAL;
        }
        if (only_id) {
            memcpy(f->only_id, v, vlen);
            f->only_id[vlen] = '\0';
        }
        return 0;
    }
    for (size_t i = 0; i < sizeof(fault_keys) / sizeof(fault_keys[0]); i++) {
        const struct fault_key *k = &fault_keys[i];
        if (strlen(k->name) != klen || memcmp(k->name, s, klen) != 0)
            continue;
        long long val = 0;
        size_t j = 0;
        for (; j < vlen && j < 12 && v[j] >= '0' && v[j] <= '9'; j++)
            val = val * 10 + (v[j] - '0');
        if (vlen == 0 || j != vlen || val < k->lo || val > k->hi) {
            snprintf(err, errlen, "fault %s wants an integer in [%d, %d]", k->name, k->lo, k->hi);
            return GW_EINVAL;
        }
        *(int *)(void *)((char *)f + k->offset) = (int)val;
        return 0;
    }
    snprintf(err, errlen, "unknown fault key '%.*s'", (int)(klen > 64 ? 64 : klen), s);
    return GW_EINVAL;
}

int mock_fault_parse(const char *spec, size_t len, struct mock_fault *f, char *err, size_t errlen)
{
    mock_fault_clear(f);
    size_t i = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && spec[end] != ',')
            end++;
        size_t a = i, b = end;
        while (a < b && is_space(spec[a]))
            a++;
        while (b > a && is_space(spec[b - 1]))
            b--;
        if (b > a && parse_item(spec + a, b - a, f, err, errlen) != 0)
            return GW_EINVAL;
        i = end + 1;
    }
    return 0;
}

/* ---- error=KIND ---- */

/*
 * What each provider answers for each kind, as close to the real text as the
 * providers document or are seen to send (the gateway classifies by status,
 * error type and these phrases). Indexed [kind][family].
 */
static const struct mock_error_text error_texts[MOCK_ERR_COUNT][MOCK_FAM_COUNT] = {
    [MOCK_ERR_CONTEXT_LENGTH] =
        {
            [MOCK_FAM_OPENAI] = {400, "invalid_request_error", "context_length_exceeded",
                                 "messages",
                                 "This model's maximum context length is 128000 tokens. However, "
                                 "your messages resulted in 131072 tokens. Please reduce the "
                                 "length of the messages. (mock fault)"},
            [MOCK_FAM_ANTHROPIC] = {400, "invalid_request_error", NULL, NULL,
                                    "prompt is too long: 210000 tokens > 200000 maximum (mock "
                                    "fault)"},
            [MOCK_FAM_BEDROCK] = {400, "ValidationException", NULL, NULL,
                                  "Input is too long for requested model. (mock fault)"},
            [MOCK_FAM_GEMINI] = {400, "INVALID_ARGUMENT", NULL, NULL,
                                 "The input token count (1200000) exceeds the maximum number of "
                                 "tokens allowed (1048576). (mock fault)"},
            [MOCK_FAM_OLLAMA] = {400, NULL, NULL, NULL,
                                 "the input length exceeds the context length (mock fault)"},
        },
    [MOCK_ERR_INSUFFICIENT_QUOTA] =
        {
            [MOCK_FAM_OPENAI] = {429, "insufficient_quota", "insufficient_quota", NULL,
                                 "You exceeded your current quota, please check your plan and "
                                 "billing details. (mock fault)"},
            [MOCK_FAM_ANTHROPIC] = {402, "billing_error", NULL, NULL,
                                    "Your credit balance is too low to access the Anthropic API. "
                                    "Please go to Plans & Billing to upgrade or purchase credits. "
                                    "(mock fault)"},
            [MOCK_FAM_BEDROCK] = {400, "ServiceQuotaExceededException", NULL, NULL,
                                  "Your request exceeds the service quota for your account. "
                                  "(mock fault)"},
            [MOCK_FAM_GEMINI] = {429, "RESOURCE_EXHAUSTED",
                                 "GenerateRequestsPerDayPerProjectPerModel-FreeTier", NULL,
                                 "You exceeded your current quota, please check your plan and "
                                 "billing details. (mock fault)"},
            [MOCK_FAM_OLLAMA] = {429, NULL, NULL, NULL,
                                 "you have reached your usage quota, please upgrade your plan "
                                 "(mock fault)"},
        },
    [MOCK_ERR_CONTENT_FILTER] =
        {
            [MOCK_FAM_OPENAI] = {400, "invalid_request_error", "content_filter", "prompt",
                                 "The response was filtered due to the prompt triggering Azure "
                                 "OpenAI's content management policy. Please modify your prompt "
                                 "and retry. (mock fault)"},
            [MOCK_FAM_ANTHROPIC] = {400, "invalid_request_error", NULL, NULL,
                                    "Output blocked by content filtering policy (mock fault)"},
            [MOCK_FAM_BEDROCK] = {400, "ValidationException", NULL, NULL,
                                  "The request was blocked by the content filter. (mock fault)"},
            [MOCK_FAM_GEMINI] = {400, "INVALID_ARGUMENT", NULL, NULL,
                                 "The prompt was blocked by the content filter. (mock fault)"},
            [MOCK_FAM_OLLAMA] = {400, NULL, NULL, NULL,
                                 "the request was blocked by the content filter (mock fault)"},
        },
    [MOCK_ERR_UNSUPPORTED] =
        {
            [MOCK_FAM_OPENAI] = {400, "invalid_request_error", NULL, "messages",
                                 "The model `%s` does not support image inputs. (mock fault)"},
            [MOCK_FAM_ANTHROPIC] = {400, "invalid_request_error", NULL, NULL,
                                    "'%s' does not support image input. (mock fault)"},
            [MOCK_FAM_BEDROCK] = {400, "ValidationException", NULL, NULL,
                                  "This model doesn't support the image content block that you "
                                  "provided; the model %s does not support image input. (mock "
                                  "fault)"},
            [MOCK_FAM_GEMINI] = {400, "INVALID_ARGUMENT", NULL, NULL,
                                 "models/%s does not support image input. (mock fault)"},
            [MOCK_FAM_OLLAMA] = {400, NULL, NULL, NULL,
                                 "registry.ollama.ai/library/%s does not support tools (mock "
                                 "fault)"},
        },
    [MOCK_ERR_MODEL_NOT_FOUND] =
        {
            [MOCK_FAM_OPENAI] = {404, "invalid_request_error", "model_not_found", NULL,
                                 "The model `%s` does not exist or you do not have access to it. "
                                 "(mock fault)"},
            [MOCK_FAM_ANTHROPIC] = {404, "not_found_error", NULL, NULL, "model: %s (mock fault)"},
            [MOCK_FAM_BEDROCK] = {404, "ResourceNotFoundException", NULL, NULL,
                                  "Could not resolve the foundation model from the provided model "
                                  "identifier %s. (mock fault)"},
            [MOCK_FAM_GEMINI] = {404, "NOT_FOUND", NULL, NULL,
                                 "models/%s is not found for API version v1beta, or is not "
                                 "supported for generateContent. (mock fault)"},
            [MOCK_FAM_OLLAMA] = {404, NULL, NULL, NULL,
                                 "model \"%s\" not found, try pulling it first (mock fault)"},
        },
    [MOCK_ERR_OVERLOADED] =
        {
            [MOCK_FAM_OPENAI] = {503, "server_error", NULL, NULL,
                                 "That model is currently overloaded with other requests. You "
                                 "can retry your request. (mock fault)"},
            [MOCK_FAM_ANTHROPIC] = {529, "overloaded_error", NULL, NULL, "Overloaded (mock fault)"},
            [MOCK_FAM_BEDROCK] = {503, "ServiceUnavailableException", NULL, NULL,
                                  "Bedrock is unable to process your request. (mock fault)"},
            [MOCK_FAM_GEMINI] = {503, "UNAVAILABLE", NULL, NULL,
                                 "The model is overloaded. Please try again later. (mock fault)"},
            [MOCK_FAM_OLLAMA] = {503, NULL, NULL, NULL,
                                 "server busy, please try again.  maximum pending requests "
                                 "exceeded (mock fault)"},
        },
    [MOCK_ERR_NOT_FOUND] =
        {
            [MOCK_FAM_OPENAI] = {404, "invalid_request_error", NULL, NULL,
                                 "Invalid URL (POST /v1/chat/completions) (mock fault)"},
            [MOCK_FAM_ANTHROPIC] = {404, "not_found_error", NULL, NULL, "Not Found (mock fault)"},
            [MOCK_FAM_BEDROCK] = {404, "ResourceNotFoundException", NULL, NULL,
                                  "The requested resource was not found. (mock fault)"},
            [MOCK_FAM_GEMINI] = {404, "NOT_FOUND", NULL, NULL,
                                 "Requested entity was not found. (mock fault)"},
            [MOCK_FAM_OLLAMA] = {404, NULL, NULL, NULL, "404 page not found (mock fault)"},
        },
};

const struct mock_error_text *mock_error_text(int kind, enum mock_family fam)
{
    if (kind <= MOCK_ERR_NONE || kind >= MOCK_ERR_COUNT || fam < 0 || fam >= MOCK_FAM_COUNT)
        return NULL;
    return &error_texts[kind][fam];
}

const char *mock_error_message(struct mock_call *c, const struct mock_error_text *t)
{
    const char *model = c->model != NULL ? c->model : "mock";
    size_t n = strlen(t->fmt) + strlen(model) + 1;
    char *out = gw_pool_alloc(c->pool, n);
    if (out == NULL)
        return t->fmt;
    const char *pct = strstr(t->fmt, "%s");
    if (pct == NULL) {
        memcpy(out, t->fmt, strlen(t->fmt) + 1);
    } else {
        size_t head = (size_t)(pct - t->fmt);
        memcpy(out, t->fmt, head);
        memcpy(out + head, model, strlen(model));
        memcpy(out + head + strlen(model), pct + 2, strlen(pct + 2) + 1);
    }
    return out;
}

/* ---- times=N ---- */

#define TIMES_BUCKETS 4096
#define TIMES_MAX_SPECS 200000

struct times_node {
    struct times_node *next;
    long long count;
    char spec[];
};

struct mock_times {
    pthread_mutex_t mu;
    size_t n;
    struct times_node *buckets[TIMES_BUCKETS];
};

struct mock_times *mock_times_new(void)
{
    struct mock_times *t = calloc(1, sizeof(*t));
    if (t != NULL && pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return NULL;
    }
    return t;
}

void mock_times_free(struct mock_times *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < TIMES_BUCKETS; i++) {
        for (struct times_node *n = t->buckets[i], *next; n != NULL; n = next) {
            next = n->next;
            free(n);
        }
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

long long mock_times_take(struct mock_times *t, const char *spec)
{
    size_t len = strlen(spec);
    size_t b = (size_t)(mock_embed_hash(spec, len) % TIMES_BUCKETS);
    long long count = -1;
    pthread_mutex_lock(&t->mu);
    struct times_node *n = t->buckets[b];
    while (n != NULL && strcmp(n->spec, spec) != 0)
        n = n->next;
    if (n == NULL && t->n < TIMES_MAX_SPECS && (n = malloc(sizeof(*n) + len + 1)) != NULL) {
        memcpy(n->spec, spec, len + 1);
        n->count = 0;
        n->next = t->buckets[b];
        t->buckets[b] = n;
        t->n++;
    }
    if (n != NULL)
        count = ++n->count;
    pthread_mutex_unlock(&t->mu);
    return count;
}

/* ---- deterministic answer helpers ---- */

int mock_count_words(const char *s, size_t len)
{
    int words = 0, in_word = 0;
    for (size_t i = 0; i < len; i++) {
        if (is_space(s[i])) {
            in_word = 0;
        } else if (!in_word) {
            in_word = 1;
            words++;
        }
    }
    return words;
}

/* Depth-limited: request bodies are bounded, but nesting is not, and the
 * recursion must not let a hostile body exhaust the stack. */
static int count_text_depth(json_t *v, int depth)
{
    if (v == NULL || depth > 16)
        return 0;
    if (json_is_string(v))
        return mock_count_words(json_string_value(v), json_string_length(v));
    int n = 0;
    if (json_is_array(v)) {
        size_t i;
        json_t *part;
        json_array_foreach(v, i, part) n += count_text_depth(part, depth + 1);
    } else if (json_is_object(v)) {
        json_t *text = json_object_get(v, "text");
        if (json_is_string(text))
            n += mock_count_words(json_string_value(text), json_string_length(text));
        json_t *content = json_object_get(v, "content");
        if (content != NULL)
            n += count_text_depth(content, depth + 1);
    }
    return n;
}

int mock_count_text(json_t *v)
{
    return count_text_depth(v, 0);
}

char *mock_tool_args(struct gw_pool *pool, json_t *schema, size_t *len)
{
    json_t *args = json_object();
    if (args == NULL)
        return NULL;
    json_t *props = json_is_object(schema) ? json_object_get(schema, "properties") : NULL;
    const char *key;
    json_t *prop;
    if (json_is_object(props)) {
        json_object_foreach(props, key, prop)
        {
            /* Gemini's schemas spell types in capitals ("STRING"). */
            const char *type = json_string_value(json_object_get(prop, "type"));
            json_t *val;
            if (type == NULL)
                val = json_null();
            else if (strcasecmp(type, "string") == 0)
                val = json_string("mock");
            else if (strcasecmp(type, "number") == 0 || strcasecmp(type, "integer") == 0)
                val = json_integer(42);
            else if (strcasecmp(type, "boolean") == 0)
                val = json_true();
            else
                val = json_null();
            if (json_object_set_new(args, key, val) != 0) {
                json_decref(args);
                return NULL;
            }
        }
    }
    char *text = json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(args);
    if (text == NULL)
        return NULL;
    *len = strlen(text);
    char *copy = gw_pool_strndup(pool, text, *len);
    free(text);
    return copy;
}

/* "<word>1 <word>2 ..." from..to-1 (0-based). */
static int append_words(struct gw_buf *b, const char *word, size_t wlen, int from, int to)
{
    /* Rendered by hand in a stack buffer and appended in a few large
     * pieces: this is on the benchmark path, and printf per token was a
     * visible share of it. */
    char tmp[512];
    size_t t = 0;
    for (int k = from; k < to; k++) {
        if (t > sizeof(tmp) - 32) {
            if (gw_buf_append(b, tmp, t) != 0)
                return GW_ELIMIT;
            t = 0;
        }
        if (k > 0)
            tmp[t++] = ' ';
        memcpy(tmp + t, word, wlen);
        t += wlen;
        char digits[12];
        int nd = 0;
        for (unsigned v = (unsigned)k + 1; v > 0; v /= 10)
            digits[nd++] = (char)('0' + v % 10);
        while (nd > 0)
            tmp[t++] = digits[--nd];
    }
    return gw_buf_append(b, tmp, t);
}

int mock_append_tokens(struct gw_buf *b, int from, int to)
{
    return append_words(b, "tok", 3, from, to);
}

int mock_append_reasoning(struct gw_buf *b, int from, int to)
{
    return append_words(b, "reason", 6, from, to);
}

void mock_seen_turn(struct mock_call *c, int results_before)
{
    c->seen.tail_tool_result = c->seen.tool_results > results_before;
}

const char *mock_pick_tools(struct mock_call *c, json_t *tools, const char *named, int forced,
                            mock_tool_get_fn get)
{
    /* After a tool's result a model answers it, in text. */
    if (c->seen.tail_tool_result && !forced && named == NULL && c->f.parallel == 0)
        return NULL;
    int want = c->f.parallel > 0 ? c->f.parallel : 1;
    if (c->f.parallel > 0)
        named = NULL;
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool)
    {
        const char *name;
        json_t *schema;
        if (!get(tool, &name, &schema))
            continue;
        if (named != NULL && strcmp(name, named) != 0)
            continue;
        struct mock_tool *t = &c->tools[c->ntools];
        t->name = name;
        t->sent = 0;
        t->args = mock_tool_args(c->pool, schema, &t->args_len);
        if (t->args == NULL)
            return "mock: out of memory";
        if (++c->ntools == want)
            break;
    }
    if (named != NULL && c->ntools == 0)
        return "tool_choice: names a tool that is not in tools";
    if (c->ntools > 0)
        c->finish = MOCK_FINISH_TOOLS;
    return NULL;
}

int mock_json_int(json_t *obj, const char *key, long long lo, long long hi, long long *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return -1;
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return -1;
    *out = x;
    return 1;
}

/* ---- embeddings ---- */

uint64_t mock_embed_hash_more(const void *p, size_t len, uint64_t h)
{
    return gw_fnv1a(h, p, len);
}

uint64_t mock_embed_hash(const void *p, size_t len)
{
    return gw_fnv1a(GW_FNV1A_INIT, p, len);
}

/* splitmix64: its increment, then the finalizer the gateway shares. */
static uint64_t splitmix64(uint64_t x)
{
    return gw_mix64(x + 0x9e3779b97f4a7c15ULL);
}

int mock_base64_append(struct gw_buf *b, const unsigned char *p, size_t len)
{
    return gw_b64_append(b, p, len);
}

/* Newton's method: enough for normalizing, and it keeps the mock off libm. */
static double root2(double x)
{
    if (x <= 0)
        return 0;
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 64; i++) {
        double next = 0.5 * (r + x / r);
        if (next >= r)
            break;
        r = next;
    }
    return r;
}

/* A unit vector derived from the input's hash: equal inputs get equal
 * vectors, and base64 decoding sees little-endian float32s. */
int mock_append_vector(struct gw_buf *b, int dims, uint64_t h, int base64)
{
    float v[MOCK_MAX_DIMENSIONS];
    if (dims < 1 || dims > MOCK_MAX_DIMENSIONS)
        return GW_EINVAL;
    double norm = 0;
    for (int j = 0; j < dims; j++) {
        uint64_t r = splitmix64(h + (uint64_t)j);
        v[j] = (float)((double)(r >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
        norm += (double)v[j] * v[j];
    }
    norm = norm > 0 ? root2(norm) : 1;
    for (int j = 0; j < dims; j++)
        v[j] = (float)(v[j] / norm);
    if (base64) {
        unsigned char bytes[MOCK_MAX_DIMENSIONS * 4];
        for (int j = 0; j < dims; j++) {
            uint32_t u;
            memcpy(&u, &v[j], 4);
            bytes[4 * j] = (unsigned char)u;
            bytes[4 * j + 1] = (unsigned char)(u >> 8);
            bytes[4 * j + 2] = (unsigned char)(u >> 16);
            bytes[4 * j + 3] = (unsigned char)(u >> 24);
        }
        int rc = gw_buf_appends(b, "\"");
        rc |= mock_base64_append(b, bytes, (size_t)dims * 4);
        rc |= gw_buf_appends(b, "\"");
        return rc;
    }
    int rc = gw_buf_appends(b, "[");
    for (int j = 0; j < dims; j++)
        rc |= gw_buf_printf(b, j ? ",%.8g" : "%.8g", (double)v[j]);
    rc |= gw_buf_appends(b, "]");
    return rc;
}

/* ---- CRC-32, URLs ---- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

uint32_t mock_crc32(uint32_t crc, const void *p, size_t len)
{
    /* The reflected IEEE polynomial (zlib's), table built once. */
    pthread_once(&crc_once, crc_init);
    const unsigned char *s = p;
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = crc_table[(crc ^ s[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

char *mock_url_decode(struct gw_pool *pool, const char *s, size_t len)
{
    char *out = gw_pool_alloc(pool, len + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            out[o++] = s[i];
            continue;
        }
        int hi = i + 2 < len ? gw_hex_digit((unsigned char)s[i + 1]) : -1;
        int lo = i + 2 < len ? gw_hex_digit((unsigned char)s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return NULL;
        out[o++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[o] = '\0';
    return out;
}

const char *mock_query_param(const char *query, const char *name, size_t *vlen)
{
    size_t nlen = strlen(name);
    const char *p = query;
    while (p != NULL && *p != '\0') {
        const char *amp = strchr(p, '&');
        size_t plen = amp ? (size_t)(amp - p) : strlen(p);
        if (plen > nlen && memcmp(p, name, nlen) == 0 && p[nlen] == '=') {
            *vlen = plen - nlen - 1;
            return p + nlen + 1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return NULL;
}
