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

#include "gw_error.h"
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
    FK("no_body", no_body, 0, 1),
    FK("multiline", multiline, 0, 1),
    FK("blank_events", blank_events, 0, 1),
    FK("tail_ms", tail_ms, 0, MOCK_MAX_MS),
};

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
            const char *type = json_string_value(json_object_get(prop, "type"));
            json_t *val;
            if (type == NULL)
                val = json_null();
            else if (strcmp(type, "string") == 0)
                val = json_string("mock");
            else if (strcmp(type, "number") == 0 || strcmp(type, "integer") == 0)
                val = json_integer(42);
            else if (strcmp(type, "boolean") == 0)
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

int mock_append_tokens(struct gw_buf *b, int from, int to)
{
    /* Rendered by hand in a stack buffer and appended in a few large
     * pieces: this is on the benchmark path, and printf per token was a
     * visible share of it. */
    char tmp[512];
    size_t t = 0;
    for (int k = from; k < to; k++) {
        if (t > sizeof(tmp) - 24) {
            if (gw_buf_append(b, tmp, t) != 0)
                return GW_ELIMIT;
            t = 0;
        }
        if (k > 0)
            tmp[t++] = ' ';
        memcpy(tmp + t, "tok", 3);
        t += 3;
        char digits[12];
        int nd = 0;
        for (unsigned v = (unsigned)k + 1; v > 0; v /= 10)
            digits[nd++] = (char)('0' + v % 10);
        while (nd > 0)
            tmp[t++] = digits[--nd];
    }
    return gw_buf_append(b, tmp, t);
}

const char *mock_pick_tools(struct mock_call *c, json_t *tools, const char *named,
                            mock_tool_get_fn get)
{
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
