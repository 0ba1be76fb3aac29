/*
 * The "openai" driver's answer: SSE chunks or one chat.completion into
 * canonical events (what is read: openai.c). The common shapes (a text or
 * reasoning chunk, the usage chunk, a whole answer of text) are read by
 * spans without building a document; anything else goes to jansson, and
 * both readings give the same events (tests/unit/dataplane/drv_openai_test.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "drv_openai_int.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sse.h"

struct oa_parser {
    struct drv_parser base;
    struct gw_buf tmp, tmp2, tmp3, tmp4, tmp5, tmp6; /* decoded strings of the fast paths */
    struct drv_tools tools;
    struct canon_usage pending_usage; /* arrived while a tool call was open */
    int have_finish;
    enum canon_stop stop;
    const char *tier; /* the served tier (canonical, static), once said */
};

struct drv_parser *drv_openai_parser_new(int stream)
{
    struct oa_parser *p = drv_parser_new(sizeof(*p), &drv_openai, stream);
    if (!p)
        return NULL;
    gw_buf_init(&p->tmp, DRV_MAX_EVENT);
    gw_buf_init(&p->tmp2, DRV_MAX_EVENT);
    gw_buf_init(&p->tmp3, 256);
    gw_buf_init(&p->tmp4, 1024);
    gw_buf_init(&p->tmp5, 1024);
    gw_buf_init(&p->tmp6, DRV_MAX_BODY);
    p->tools.interleave = 1; /* each delta names its call (index) */
    return &p->base;
}

void drv_openai_parser_free(struct drv_parser *bp)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    gw_buf_free(&p->tmp);
    gw_buf_free(&p->tmp2);
    gw_buf_free(&p->tmp3);
    gw_buf_free(&p->tmp4);
    gw_buf_free(&p->tmp5);
    gw_buf_free(&p->tmp6);
    drv_tools_free(&p->tools);
    drv_parser_free(bp);
}

/* A provider's token count, kept within [0, CANON_MAX_TOKENS]: a negative
 * or absurd number must not overflow the sums done on it (nor reach the
 * ledger). */
static long long tokens(const json_t *o, const char *key)
{
    long long v = 0;
    if (gw_json_int(o, key, &v) != GW_OK)
        return 0;
    return canon_tokens(v);
}

/* OpenAI usage → canonical. Usage may not arrive inside an open tool call
 * (canon.h): then it waits for the call to close (done()); a later usage
 * replaces a waiting one. */
/* OpenAI's counts → canonical: the prompt includes its cached part, the
 * completion its reasoning. */
static struct canon_usage usage_of(long long prompt, long long completion, long long cached,
                                   long long reasoning)
{
    struct canon_usage cu = {.have = 1};
    if (cached > prompt)
        cached = prompt;
    cu.input = prompt - cached;
    cu.cache_read = cached;
    cu.output = completion;
    cu.reasoning = reasoning > completion ? completion : reasoning;
    return cu;
}

/* Usage waits while a tool call is open (canon.h): done() emits it then. */
static int put_usage(struct oa_parser *p, struct canon_usage cu, const struct canon_sink *s)
{
    p->pending_usage = cu;
    if (p->tools.open)
        return 0;
    p->pending_usage.have = 0;
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = &cu, .service_tier = p->tier};
    return canon_emit(s, &ev);
}

static int emit_usage(struct oa_parser *p, const json_t *u, const struct canon_sink *s)
{
    if (!json_is_object(u))
        return 0;
    long long prompt = tokens(u, "prompt_tokens"), completion = tokens(u, "completion_tokens");
    const json_t *pd = json_object_get(u, "prompt_tokens_details");
    long long cached = json_object_get(pd, "cached_tokens") ? tokens(pd, "cached_tokens")
                                                            : tokens(u, "prompt_cache_hit_tokens");
    long long reasoning =
        tokens(json_object_get(u, "completion_tokens_details"), "reasoning_tokens");
    return put_usage(p, usage_of(prompt, completion, cached, reasoning), s);
}

static int emit_start(struct oa_parser *p, const json_t *doc, const struct canon_sink *s)
{
    const char *tier = canon_tier_served(gw_json_str(doc, "service_tier"));
    if (tier)
        p->tier = tier;
    return drv_start_tier(&p->base, gw_json_str(doc, "id"), gw_json_str(doc, "model"), p->tier, s);
}

/* Text with the log probabilities of choice ch (when it has them). */
static int emit_text_lp(struct oa_parser *p, const json_t *ch, const char *text,
                        const struct canon_sink *s)
{
    return drv_emit_text_lp(&p->base, s, text,
                            json_object_get(json_object_get(ch, "logprobs"), "content"));
}

/* A tier member read by spans: a plain short string (else *unsure). */
static const char *span_tier(const struct gw_json_span *v, int *unsure)
{
    char w[16];
    if (!v->p || gw_json_span_is_null(v->p, v->n))
        return NULL;
    if (v->n < 2 || v->n - 2 >= sizeof(w) || v->p[0] != '"' || memchr(v->p, '\\', v->n)) {
        *unsure = 1;
        return NULL;
    }
    memcpy(w, v->p + 1, v->n - 2);
    w[v->n - 2] = 0;
    return canon_tier_served(w);
}

/* An "error" member (an object with a message, or a string) fails the
 * answer; 0 when there is none. */
static int fail_on_error(struct oa_parser *p, const json_t *doc, const struct canon_sink *s)
{
    json_t *e = json_object_get(doc, "error");
    if (!e || json_is_null(e))
        return 0;
    const char *m = json_is_object(e) ? gw_json_str(e, "message") : json_string_value(e);
    return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, m ? m : "the provider reported an error");
}

/* One streamed chunk. */
static int on_chunk(struct oa_parser *p, const json_t *doc, const struct canon_sink *s)
{
    if (fail_on_error(p, doc, s) || emit_start(p, doc, s))
        return 1;
    json_t *ch = json_array_get(json_object_get(doc, "choices"), 0);
    json_t *delta = json_object_get(ch, "delta");
    if (json_is_object(delta)) {
        const char *rs = gw_json_str(delta, "reasoning_content");
        if (!rs)
            rs = gw_json_str(delta, "reasoning");
        if (rs && *rs &&
            (drv_tools_close(&p->tools, s) || drv_emit_text(s, CANON_EV_REASONING, rs)))
            return 1;
        const char *c = gw_json_str(delta, "content");
        if (!c)
            c = gw_json_str(delta, "refusal");
        if (c && *c && (drv_tools_close(&p->tools, s) || emit_text_lp(p, ch, c, s)))
            return 1;
        if (gw_json_str(delta, "refusal"))
            p->stop = CANON_STOP_REFUSAL;
        json_t *tcs = json_object_get(delta, "tool_calls");
        size_t i;
        json_t *tc;
        json_array_foreach(tcs, i, tc)
        {
            long long idx = 0;
            if (gw_json_int(tc, "index", &idx) != GW_OK)
                idx = (long long)i;
            json_t *fn = json_object_get(tc, "function");
            int rc = drv_tools_delta(&p->tools, idx, gw_json_str(tc, "id"), gw_json_str(fn, "name"),
                                     gw_json_str(fn, "arguments"), s);
            if (rc)
                return drv_tools_check(&p->base, s, rc,
                                       "the provider sent more of a tool call it had ended");
        }
    }
    const char *fr = gw_json_str(ch, "finish_reason");
    if (fr) {
        if (drv_tools_close(&p->tools, s))
            return 1;
        p->have_finish = 1;
        if (p->stop != CANON_STOP_REFUSAL)
            p->stop = canon_stop_from_openai(fr);
    }
    json_t *u = json_object_get(doc, "usage");
    if (u && !json_is_null(u) && emit_usage(p, u, s))
        return 1;
    return 0;
}

static int done(struct oa_parser *p, const struct canon_sink *s)
{
    /* A stream that ends (its [DONE]) before its first chunk has no answer:
     * a DONE before any START would break the event channel (canon.h). */
    if (!p->base.started)
        return drv_fail(&p->base, s, CANON_FAIL_EMPTY_OUTPUT,
                        "the provider's stream ended before it began");
    if (drv_tools_close(&p->tools, s))
        return 1;
    if (p->pending_usage.have) {
        struct canon_usage cu = p->pending_usage;
        struct canon_event u = {.type = CANON_EV_USAGE, .usage = &cu, .service_tier = p->tier};
        p->pending_usage.have = 0;
        if (canon_emit(s, &u))
            return 1;
    }
    p->base.terminal = 1;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = p->stop};
    canon_emit(s, &ev);
    return 1;
}

static int present(const struct gw_json_span *v)
{
    return v->p && !gw_json_span_is_null(v->p, v->n);
}

/* A string member's value decoded into buf; NULL when absent, null or not
 * a string (what jansson would refuse sets *unsure). */
static const char *span_text(struct gw_buf *buf, const struct gw_json_span *v, size_t *len,
                             int *unsure)
{
    if (!v->p || v->n < 2 || v->p[0] != '"')
        return NULL;
    gw_buf_reset(buf);
    if (gw_json_span_string(v->p, v->n, buf) != GW_OK) {
        *unsure = 1;
        return NULL;
    }
    *len = buf->len;
    return buf->data ? buf->data : "";
}

/* A token count as tokens() reads it from jansson: a plain integer (a
 * real, or anything else, is 0); *unsure past 18 digits, where jansson may
 * refuse the whole document. */
static long long span_tokens(const struct gw_json_span *v, int *unsure)
{
    if (!v->p)
        return 0;
    size_t i = v->p[0] == '-';
    if (i >= v->n || v->p[i] < '0' || v->p[i] > '9')
        return 0;
    long long n = 0;
    for (size_t k = i; k < v->n; k++) {
        char c = v->p[k];
        if (c == '.' || c == 'e' || c == 'E')
            return 0;
        if (k - i >= 18) {
            *unsure = 1;
            return 0;
        }
        n = n * 10 + (c - '0');
    }
    return i ? 0 : canon_tokens(n);
}

/* A usage object read by spans as emit_usage reads it from jansson.
 * 1: cu filled; 0: not an object, or in doubt (the full parser's). */
static int span_usage(const struct gw_json_span *u, struct canon_usage *cu)
{
    static const char *const u_keys[] = {"prompt_tokens", "completion_tokens",
                                         "prompt_tokens_details", "completion_tokens_details",
                                         "prompt_cache_hit_tokens"};
    static const char *const cached_key[] = {"cached_tokens"};
    static const char *const reasoning_key[] = {"reasoning_tokens"};
    enum { U_PROMPT, U_COMPLETION, U_PD, U_CD, U_HIT };
    struct gw_json_span m[5], cached = {0}, rt = {0};
    if (!u->p || u->p[0] != '{' || gw_json_span_members(u->p, u->n, u_keys, 5, m) != 1)
        return 0;
    if (m[U_PD].p && m[U_PD].p[0] == '{' &&
        gw_json_span_members(m[U_PD].p, m[U_PD].n, cached_key, 1, &cached) != 1)
        return 0;
    if (m[U_CD].p && m[U_CD].p[0] == '{' &&
        gw_json_span_members(m[U_CD].p, m[U_CD].n, reasoning_key, 1, &rt) != 1)
        return 0;
    int unsure = 0;
    long long prompt = span_tokens(&m[U_PROMPT], &unsure);
    long long completion = span_tokens(&m[U_COMPLETION], &unsure);
    long long cache = cached.p ? span_tokens(&cached, &unsure) : span_tokens(&m[U_HIT], &unsure);
    long long reasoning = span_tokens(&rt, &unsure);
    if (unsure)
        return 0;
    *cu = usage_of(prompt, completion, cache, reasoning);
    return 1;
}

/*
 * The common streamed chunk (the first one with its id and model, a text
 * or reasoning delta, a finish reason) read without building a document:
 * most of a stream is such chunks. Each object is read once (its members
 * in one pass). Returns 0 when the chunk needs the full path (usage,
 * errors, tool calls, refusals, escaped keys, anything unusual), else 1
 * with *stop set when the sink stopped. Nothing is emitted before the
 * chunk is known to be a simple one.
 */
static int fast_chunk(struct oa_parser *p, const char *d, size_t n, const struct canon_sink *s,
                      int *stop)
{
    static const char *const top_keys[] = {"usage", "error", "choices",
                                           "id",    "model", "service_tier"};
    static const char *const ch_keys[] = {"delta", "finish_reason", "logprobs"};
    static const char *const d_keys[] = {"tool_calls", "refusal",   "function_call",
                                         "content",    "reasoning", "reasoning_content"};
    enum { T_USAGE, T_ERROR, T_CHOICES, T_ID, T_MODEL, T_TIER };
    enum { C_DELTA, C_FINISH, C_LOGPROBS };
    enum { D_TOOLS, D_REFUSAL, D_FUNCTION, D_CONTENT, D_REASONING, D_REASONING_CONTENT };
    struct gw_json_span t[6], c[3], dl[6];
    const char *ch, *x;
    size_t chn, xn;
    *stop = 0;
    if (gw_json_span_doc(d, n, top_keys, 6, t) != 1 || present(&t[T_ERROR]) || !t[T_CHOICES].p)
        return 0;
    int tier_unsure = 0;
    const char *tier = span_tier(&t[T_TIER], &tier_unsure);
    if (tier_unsure)
        return 0;
    if (tier)
        p->tier = tier;
    if (present(&t[T_USAGE])) {
        /* The usage chunk, with no choice beside it (the stream's last). */
        struct canon_usage cu;
        if (!p->base.started || t[T_CHOICES].p[0] != '[' ||
            gw_json_span_first(t[T_CHOICES].p, t[T_CHOICES].n, &x, &xn) != 0 ||
            !span_usage(&t[T_USAGE], &cu))
            return 0;
        *stop = put_usage(p, cu, s);
        return 1;
    }
    if (gw_json_span_first(t[T_CHOICES].p, t[T_CHOICES].n, &ch, &chn) != 1 ||
        gw_json_span_members(ch, chn, ch_keys, 3, c) != 1 || present(&c[C_LOGPROBS]) ||
        !c[C_DELTA].p || c[C_DELTA].p[0] != '{' ||
        gw_json_span_members(c[C_DELTA].p, c[C_DELTA].n, d_keys, 6, dl) != 1 ||
        present(&dl[D_TOOLS]) || present(&dl[D_REFUSAL]) || present(&dl[D_FUNCTION]))
        return 0;
    /* Decode everything before emitting anything: any doubt on the way
     * sends the whole chunk to the full parser. */
    int unsure = 0;
    size_t rlen = 0, clen = 0, len = 0, idn = 0, mn = 0;
    const char *rs = span_text(
        &p->tmp, present(&dl[D_REASONING_CONTENT]) ? &dl[D_REASONING_CONTENT] : &dl[D_REASONING],
        &rlen, &unsure);
    const char *ct = span_text(&p->tmp2, &dl[D_CONTENT], &clen, &unsure);
    const char *fr = span_text(&p->tmp3, &c[C_FINISH], &len, &unsure);
    const char *id = NULL, *model = NULL;
    if (!p->base.started) {
        id = span_text(&p->tmp4, &t[T_ID], &idn, &unsure);
        model = span_text(&p->tmp5, &t[T_MODEL], &mn, &unsure);
    }
    if (unsure)
        return 0;
    if (!p->base.started && (*stop = drv_start_tier(&p->base, id, model, p->tier, s)))
        return 1;
    if (rs && rlen) {
        struct canon_event ev = {.type = CANON_EV_REASONING, .text = rs, .len = rlen};
        if ((*stop = drv_tools_close(&p->tools, s) || canon_emit(s, &ev)))
            return 1;
    }
    if (ct && clen) {
        struct canon_event ev = {.type = CANON_EV_CHUNK, .text = ct, .len = clen};
        if ((*stop = drv_tools_close(&p->tools, s) || canon_emit(s, &ev)))
            return 1;
    }
    if (fr) {
        if ((*stop = drv_tools_close(&p->tools, s)))
            return 1;
        p->have_finish = 1;
        if (p->stop != CANON_STOP_REFUSAL)
            p->stop = canon_stop_from_openai(fr);
    }
    return 1;
}

/* [DONE] ends the stream; the common chunk takes the fast path. */
static enum drv_sse_step raw_event(struct drv_parser *bp, const struct gw_sse_event *ev,
                                   const struct canon_sink *s)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    if (ev->data_len == 6 && memcmp(ev->data, "[DONE]", 6) == 0)
        return done(p, s) ? DRV_SSE_STOP : DRV_SSE_SKIP;
    int stop;
    if (fast_chunk(p, ev->data, ev->data_len, s, &stop))
        return stop ? DRV_SSE_STOP : DRV_SSE_SKIP;
    return DRV_SSE_JSON;
}

static int on_event(struct drv_parser *bp, const struct gw_sse_event *ev, const json_t *doc,
                    const struct canon_sink *s)
{
    (void)ev;
    return on_chunk((struct oa_parser *)bp, doc, s);
}

int drv_openai_parse(struct drv_parser *bp, const char *buf, size_t len, const struct canon_sink *s)
{
    return drv_parse_sse(bp, buf, len, s, raw_event, on_event);
}

/* A whole chat.completion body → the same events a stream would give. */
static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    if (fail_on_error(p, doc, s) || emit_start(p, doc, s))
        return;
    json_t *ch = json_array_get(json_object_get(doc, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    const char *rs = gw_json_str(msg, "reasoning_content");
    if (!rs)
        rs = gw_json_str(msg, "reasoning");
    const char *c = gw_json_str(msg, "content");
    const char *refusal = gw_json_str(msg, "refusal");
    if (!c || !*c)
        c = refusal;
    if (drv_emit_text(s, CANON_EV_REASONING, rs) || emit_text_lp(p, ch, c, s))
        return;
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc)
    {
        json_t *fn = json_object_get(tc, "function");
        const char *args = gw_json_str(fn, "arguments");
        if (drv_tools_delta(&p->tools, (long long)i, gw_json_str(tc, "id"), gw_json_str(fn, "name"),
                            args && *args ? args : "{}", s))
            return;
    }
    p->stop =
        refusal ? CANON_STOP_REFUSAL : canon_stop_from_openai(gw_json_str(ch, "finish_reason"));
    if (emit_usage(p, json_object_get(doc, "usage"), s))
        return;
    done(p, s);
}

/*
 * The common whole chat.completion (text, reasoning or a refusal; a finish
 * reason; usage) read without building a document, as parse_whole would
 * read it: the events, the stop and the usage are the same. Anything else
 * (an error member, tool calls, a string jansson would refuse, a shape in
 * doubt) returns 0 for the full parser. As for streamed chunks, a key
 * repeated, or a number too large for jansson, in a member it does not
 * read is not its concern (jansson would call the whole answer malformed).
 */
static int fast_whole(struct oa_parser *p, const char *d, size_t n, const struct canon_sink *s)
{
    static const char *const top_keys[] = {"usage", "error", "choices",
                                           "id",    "model", "service_tier"};
    static const char *const ch_keys[] = {"message", "finish_reason", "logprobs"};
    static const char *const m_keys[] = {"tool_calls", "refusal", "content", "reasoning",
                                         "reasoning_content"};
    enum { T_USAGE, T_ERROR, T_CHOICES, T_ID, T_MODEL, T_TIER };
    enum { C_MESSAGE, C_FINISH, C_LOGPROBS };
    enum { M_TOOLS, M_REFUSAL, M_CONTENT, M_REASONING, M_REASONING_CONTENT };
    struct gw_json_span t[6], c[3] = {{0}}, m[5] = {{0}};
    struct canon_usage cu;
    const char *ch = NULL;
    size_t chn = 0;
    if (gw_json_span_doc(d, n, top_keys, 6, t) != 1 || present(&t[T_ERROR]))
        return 0;
    int has_ch = t[T_CHOICES].p && t[T_CHOICES].p[0] == '[' &&
                 gw_json_span_first(t[T_CHOICES].p, t[T_CHOICES].n, &ch, &chn) > 0;
    if (has_ch && ch[0] == '{' && gw_json_span_members(ch, chn, ch_keys, 3, c) != 1)
        return 0;
    if (present(&c[C_LOGPROBS]))
        return 0; /* log probabilities: the full parser's */
    if (c[C_MESSAGE].p && c[C_MESSAGE].p[0] == '{' &&
        gw_json_span_members(c[C_MESSAGE].p, c[C_MESSAGE].n, m_keys, 5, m) != 1)
        return 0;
    int has_u = t[T_USAGE].p && t[T_USAGE].p[0] == '{';
    if (has_u && !span_usage(&t[T_USAGE], &cu))
        return 0;
    if (m[M_TOOLS].p && m[M_TOOLS].p[0] == '[' && m[M_TOOLS].n > 2)
        return 0; /* tool calls: the full parser's (a [] has none) */
    /* Decode everything before emitting anything. */
    int unsure = 0;
    size_t l = 0;
    const char *rs = span_text(&p->tmp, &m[M_REASONING_CONTENT], &l, &unsure);
    struct gw_buf *rb = &p->tmp;
    if (!rs) {
        rs = span_text(&p->tmp2, &m[M_REASONING], &l, &unsure);
        rb = &p->tmp2;
    }
    const char *ct = span_text(&p->tmp6, &m[M_CONTENT], &l, &unsure);
    const char *refusal = span_text(&p->tmp3, &m[M_REFUSAL], &l, &unsure);
    const char *fr = span_text(&p->tmp4, &c[C_FINISH], &l, &unsure);
    enum canon_stop st = refusal ? CANON_STOP_REFUSAL : canon_stop_from_openai(fr);
    const char *id = span_text(&p->tmp5, &t[T_ID], &l, &unsure);
    const char *mo = span_text(&p->tmp4, &t[T_MODEL], &l, &unsure); /* fr is read */
    const char *tier = span_tier(&t[T_TIER], &unsure);
    if (unsure)
        return 0;
    if (tier)
        p->tier = tier;
    /* Decoded strings are C strings, as jansson's are (gw_buf keeps a NUL
     * after its bytes, and gw_json_span_string refuses \u0000, as jansson
     * does). */
    if (drv_start_tier(&p->base, id, mo, p->tier, s))
        return 1;
    const char *text = ct && p->tmp6.len ? ct : refusal;
    size_t tlen = ct && p->tmp6.len ? p->tmp6.len : refusal ? p->tmp3.len : 0;
    if (rs && rb->len) {
        struct canon_event ev = {.type = CANON_EV_REASONING, .text = rs, .len = rb->len};
        if (canon_emit(s, &ev))
            return 1;
    }
    if (text && tlen) {
        struct canon_event ev = {.type = CANON_EV_CHUNK, .text = text, .len = tlen};
        if (canon_emit(s, &ev))
            return 1;
    }
    p->stop = st;
    if (has_u && put_usage(p, cu, s))
        return 1;
    done(p, s);
    return 1;
}

void drv_openai_finish(struct drv_parser *bp, const struct canon_sink *s)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    if (!bp->stream && !bp->terminal && bp->body.len &&
        fast_whole(p, bp->body.data, bp->body.len, s))
        return;
    if (drv_finish(bp, s, parse_whole))
        return;
    /* No [DONE]: complete only if the provider had said why it stopped. */
    if (p->have_finish)
        done(p, s);
    else
        drv_fail(bp, s, CANON_FAIL_NETWORK, "the provider's stream ended before it finished");
}
