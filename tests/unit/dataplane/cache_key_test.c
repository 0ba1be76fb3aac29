/* Tests for dataplane/cache/dp_cache_key.c: what may be cached, the key (length
 * prefixes, every field in it), and the cached form (encode, replay in the
 * channel's grammar, a damaged blob refused within its bounds). */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "canon_record.h"
#include "dp_cache_key.h"
#include "gw_buf.h"
#include "gw_error.h"

/* ------------------------------------------------------------ fixtures */

/* A request with every field the key reads set, in its own arrays so a
 * test can change any one of them. */
struct fx {
    struct canon_req r;
    struct dp_cache_where w;
    struct canon_part sys[1];
    struct canon_part user[4]; /* text, image, document, audio */
    struct canon_part asst[3]; /* thinking, redacted thinking, tool call */
    struct canon_part res[1];  /* a tool result */
    struct canon_part res_content[1];
    struct canon_message msgs[3];
    struct canon_tool tools[1];
    const char *stop[2];
    json_t *params, *schema;
};

static void fx_init(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    f->params =
        json_pack("{s:s,s:{s:{s:s}}}", "type", "object", "properties", "city", "type", "string");
    f->schema = json_pack("{s:s,s:[s]}", "type", "object", "required", "answer");
    f->w = (struct dp_cache_where){.scope = DP_CACHE_SCOPE_TEAM,
                                   .scope_id = "team-1",
                                   .route = "chat",
                                   .route_fp = "fp-1",
                                   .route_fp_len = 4,
                                   .provider = "openai",
                                   .model = "gpt-x"};
    f->sys[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "be brief"};
    f->user[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "hello"};
    f->user[1] = (struct canon_part){
        .type = CANON_PART_IMAGE, .media_type = "image/png", .data = "iVBORw0", .detail = "low"};
    f->user[2] = (struct canon_part){.type = CANON_PART_DOCUMENT,
                                     .url = "https://example.com/a.pdf",
                                     .media_type = "application/pdf",
                                     .filename = "a.pdf",
                                     .title = "A",
                                     .context = "ctx",
                                     .citations = 1};
    f->user[3] =
        (struct canon_part){.type = CANON_PART_AUDIO, .media_type = "audio/wav", .data = "UklGR"};
    f->asst[0] = (struct canon_part){.type = CANON_PART_THINKING, .text = "hmm", .signature = "s1"};
    f->asst[1] = (struct canon_part){.type = CANON_PART_REDACTED_THINKING, .text = "opaque"};
    f->asst[2] = (struct canon_part){
        .type = CANON_PART_TOOL_CALL, .id = "call_1", .name = "weather", .arguments = "{\"c\":1}"};
    f->res_content[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "sunny"};
    f->res[0] = (struct canon_part){
        .type = CANON_PART_TOOL_RESULT, .id = "call_1", .content = f->res_content, .ncontent = 1};
    f->msgs[0] = (struct canon_message){CANON_ROLE_USER, f->user, 4};
    f->msgs[1] = (struct canon_message){CANON_ROLE_ASSISTANT, f->asst, 3};
    f->msgs[2] = (struct canon_message){CANON_ROLE_USER, f->res, 1};
    f->tools[0] = (struct canon_tool){
        .name = "weather", .description = "the weather", .parameters = f->params, .strict = -1};
    f->stop[0] = "END";
    f->stop[1] = "STOP";
    struct canon_req *r = &f->r;
    r->model = "alias";
    r->system = f->sys;
    r->nsystem = 1;
    r->messages = f->msgs;
    r->nmessages = 3;
    r->tools = f->tools;
    r->ntools = 1;
    r->tool_choice = CANON_TC_NAMED;
    r->tool_choice_name = "weather";
    r->parallel_tool_calls = 1;
    r->has_temperature = 1;
    r->has_top_p = r->has_top_k = r->has_max_tokens = r->has_seed = 1;
    r->has_presence_penalty = r->has_frequency_penalty = 1;
    r->top_p = 0.9;
    r->top_k = 40;
    r->max_tokens = 256;
    r->seed = 7;
    r->presence_penalty = 0.1;
    r->frequency_penalty = 0.2;
    r->stop = f->stop;
    r->nstop = 2;
    r->format = CANON_FMT_JSON_SCHEMA;
    r->format_name = "answer";
    r->format_schema = f->schema;
    r->format_strict = 1;
    r->reasoning_effort = "low";
    r->reasoning_budget = 1024;
    r->service_tier = "priority";
    r->top_logprobs = -1;
}

static void fx_free(struct fx *f)
{
    json_decref(f->params);
    json_decref(f->schema);
}

/* Changes one field of the fixture: case i of N_MUTATIONS. */
#define M(n, change)                                                                               \
    case n:                                                                                        \
        change;                                                                                    \
        break
static void mutate(struct fx *f, int i)
{
    struct canon_req *r = &f->r;
    switch (i) {
        M(0, f->w.scope = DP_CACHE_SCOPE_KEY);
        M(1, f->w.scope_id = "team-2");
        M(2, f->w.route = "chat2");
        M(3, f->w.route_fp = "fp-2");
        M(4, f->w.provider = "azure");
        M(5, f->w.model = "gpt-y");
        M(6, f->sys[0].text = "be long");
        M(7, r->nsystem = 0);
        M(8, f->user[0].text = "hellO");
        M(9, f->msgs[0].role = CANON_ROLE_SYSTEM);
        M(10, f->user[1].data = "iVBORw1");
        M(11, f->user[1].detail = "high");
        M(12, f->user[1].media_type = "image/jpeg");
        M(13, f->user[2].url = "https://example.com/b.pdf");
        M(14, f->user[2].title = "B");
        M(15, f->user[2].context = "other");
        M(16, f->user[2].citations = 0);
        M(17, f->user[2].filename = "b.pdf");
        M(18, f->user[3].data = "UklGS");
        M(19, f->asst[0].signature = "s2");
        M(20, f->asst[0].text = "hmmm");
        M(21, f->asst[1].text = "opaquE");
        M(22, f->asst[2].id = "call_2");
        M(23, f->asst[2].name = "forecast");
        M(24, f->asst[2].arguments = "{\"c\":2}");
        M(25, f->res[0].id = "call_9");
        M(26, f->res[0].is_error = 1);
        M(27, f->res_content[0].text = "rainy");
        M(28, f->msgs[1].nparts = 2);
        M(29, f->tools[0].name = "forecast");
        M(30, f->tools[0].description = NULL);
        M(31, json_object_set_new(f->params, "additionalProperties", json_false()));
        M(32, f->tools[0].strict = 1);
        M(33, r->tool_choice = CANON_TC_REQUIRED);
        M(34, r->tool_choice_name = "other");
        M(35, r->parallel_tool_calls = 0);
        M(36, r->has_temperature = 0);
        M(37, r->top_p = 0.8);
        M(38, r->top_k = 41);
        M(39, r->max_tokens = 257);
        M(40, r->has_seed = 0);
        M(41, r->seed = 8);
        M(42, r->presence_penalty = 0.3);
        M(43, r->frequency_penalty = 0.4);
        M(44, f->stop[1] = "STOp");
        M(45, r->nstop = 1);
        M(46, r->format = CANON_FMT_JSON_OBJECT);
        M(47, r->format_name = "answer2");
        M(48, json_object_set_new(f->schema, "title", json_string("x")));
        M(49, r->format_strict = 0);
        M(50, r->reasoning_effort = "high");
        M(51, r->reasoning_budget = 2048);
        M(52, r->reasoning_off = 1);
        M(53, r->service_tier = "flex");
        M(54, f->sys[0].cache = CANON_CACHE_5M);
        M(55, f->tools[0].cache = CANON_CACHE_1H);
        M(56, r->ntools = 0);
        M(57, f->user[0].type = CANON_PART_THINKING);
        M(58, r->has_top_p = 0);
        M(59, f->w.scope = DP_CACHE_SCOPE_GLOBAL);
    }
}
#define N_MUTATIONS 60

static void key_of(struct fx *f, unsigned char out[DP_CACHE_KEY_BYTES])
{
    CU_ASSERT_EQUAL_FATAL(dp_cache_key(&f->w, &f->r, out), GW_OK);
}

/* ------------------------------------------------------------ the key */

static void test_key_table(void)
{
    static unsigned char keys[N_MUTATIONS + 1][DP_CACHE_KEY_BYTES];
    struct fx f;
    fx_init(&f);
    key_of(&f, keys[N_MUTATIONS]);
    unsigned char again[DP_CACHE_KEY_BYTES];
    key_of(&f, again);
    CU_ASSERT_EQUAL(memcmp(again, keys[N_MUTATIONS], DP_CACHE_KEY_BYTES), 0);
    fx_free(&f);
    for (int i = 0; i < N_MUTATIONS; i++) {
        fx_init(&f);
        mutate(&f, i);
        key_of(&f, keys[i]);
        fx_free(&f);
    }
    /* Every change gives a key of its own: none equals the base or another. */
    for (int i = 0; i <= N_MUTATIONS; i++)
        for (int j = i + 1; j <= N_MUTATIONS; j++)
            if (memcmp(keys[i], keys[j], DP_CACHE_KEY_BYTES) == 0) {
                fprintf(stderr, "\nmutations %d and %d share a key\n", i, j);
                CU_FAIL("two requests share a key");
            }
}

/* What the key leaves out: delivery, the selector, the end user. */
static void test_key_ignores(void)
{
    struct fx f;
    fx_init(&f);
    unsigned char base[DP_CACHE_KEY_BYTES], k[DP_CACHE_KEY_BYTES];
    key_of(&f, base);
    f.r.stream = 1;
    f.r.include_usage = 1;
    f.r.model = "another-alias";
    f.r.user = "u1";
    f.r.safety_identifier = "s1";
    key_of(&f, k);
    CU_ASSERT_EQUAL(memcmp(base, k, DP_CACHE_KEY_BYTES), 0);
    /* A global scope ignores the id it may have been given. */
    f.w.scope = DP_CACHE_SCOPE_GLOBAL;
    key_of(&f, base);
    f.w.scope_id = "whatever";
    key_of(&f, k);
    CU_ASSERT_EQUAL(memcmp(base, k, DP_CACHE_KEY_BYTES), 0);
    /* An unset parameter's stale value does not count. */
    f.r.has_seed = 0;
    key_of(&f, base);
    f.r.seed = 99;
    key_of(&f, k);
    CU_ASSERT_EQUAL(memcmp(base, k, DP_CACHE_KEY_BYTES), 0);
    fx_free(&f);
}

/* ["ab","c"] and ["a","bc"]: the same bytes joined, different lists. */
static void test_key_boundaries(void)
{
    const char *ab_c[] = {"ab", "c"}, *a_bc[] = {"a", "bc"};
    unsigned char k1[DP_CACHE_KEY_BYTES], k2[DP_CACHE_KEY_BYTES];
    struct fx f;
    fx_init(&f);
    f.r.stop = ab_c;
    key_of(&f, k1);
    f.r.stop = a_bc;
    key_of(&f, k2);
    CU_ASSERT_NOT_EQUAL(memcmp(k1, k2, DP_CACHE_KEY_BYTES), 0);
    /* As text parts of a message. */
    struct canon_part p1[2] = {{.type = CANON_PART_TEXT, .text = "ab"},
                               {.type = CANON_PART_TEXT, .text = "c"}};
    struct canon_part p2[2] = {{.type = CANON_PART_TEXT, .text = "a"},
                               {.type = CANON_PART_TEXT, .text = "bc"}};
    f.msgs[0].parts = p1;
    f.msgs[0].nparts = 2;
    key_of(&f, k1);
    f.msgs[0].parts = p2;
    key_of(&f, k2);
    CU_ASSERT_NOT_EQUAL(memcmp(k1, k2, DP_CACHE_KEY_BYTES), 0);
    /* Across fields: route "ab" + provider "c" vs route "a" + provider "bc". */
    f.w.route = "ab";
    f.w.provider = "c";
    key_of(&f, k1);
    f.w.route = "a";
    f.w.provider = "bc";
    key_of(&f, k2);
    CU_ASSERT_NOT_EQUAL(memcmp(k1, k2, DP_CACHE_KEY_BYTES), 0);
    /* An absent string is not an empty one. */
    f.w.route = NULL;
    key_of(&f, k1);
    f.w.route = "";
    key_of(&f, k2);
    CU_ASSERT_NOT_EQUAL(memcmp(k1, k2, DP_CACHE_KEY_BYTES), 0);
    fx_free(&f);
    /* Embeddings. */
    struct dp_cache_where w = {.scope = DP_CACHE_SCOPE_KEY, .scope_id = "k", .route = "emb"};
    struct canon_embed_req e1 = {.model = "m", .inputs = ab_c, .ninputs = 2};
    struct canon_embed_req e2 = {.model = "m", .inputs = a_bc, .ninputs = 2};
    CU_ASSERT_EQUAL(dp_cache_key_embed(&w, &e1, k1), GW_OK);
    CU_ASSERT_EQUAL(dp_cache_key_embed(&w, &e2, k2), GW_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(k1, k2, DP_CACHE_KEY_BYTES), 0);
}

static void test_key_embed(void)
{
    const char *in[] = {"one", "two"};
    struct dp_cache_where w = {.scope = DP_CACHE_SCOPE_PROJECT, .scope_id = "p", .route = "emb"};
    struct canon_embed_req e = {.model = "m", .inputs = in, .ninputs = 2, .dimensions = 256};
    unsigned char base[DP_CACHE_KEY_BYTES], k[DP_CACHE_KEY_BYTES];
    CU_ASSERT_EQUAL_FATAL(dp_cache_key_embed(&w, &e, base), GW_OK);
    CU_ASSERT_EQUAL(dp_cache_key_embed(&w, &e, k), GW_OK);
    CU_ASSERT_EQUAL(memcmp(base, k, DP_CACHE_KEY_BYTES), 0);
    e.user = "u";
    e.model = "alias";
    CU_ASSERT_EQUAL(dp_cache_key_embed(&w, &e, k), GW_OK);
    CU_ASSERT_EQUAL(memcmp(base, k, DP_CACHE_KEY_BYTES), 0);
    for (int i = 0; i < 5; i++) {
        struct canon_embed_req x = e;
        struct dp_cache_where y = w;
        if (i == 0)
            x.dimensions = 512;
        else if (i == 1)
            x.base64 = 1;
        else if (i == 2)
            x.ninputs = 1;
        else if (i == 3)
            y.scope_id = "q";
        else
            y.model = "text-embedding-3";
        CU_ASSERT_EQUAL(dp_cache_key_embed(&y, &x, k), GW_OK);
        CU_ASSERT_NOT_EQUAL(memcmp(base, k, DP_CACHE_KEY_BYTES), 0);
    }
    /* A chat request with nothing in it is not an embedding with nothing. */
    struct canon_req empty = {0};
    struct canon_embed_req none = {0};
    CU_ASSERT_EQUAL(dp_cache_key(&w, &empty, base), GW_OK);
    CU_ASSERT_EQUAL(dp_cache_key_embed(&w, &none, k), GW_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(base, k, DP_CACHE_KEY_BYTES), 0);
}

/* ----------------------------------------------------------- cacheable */

static void test_cacheable(void)
{
    struct canon_req r = {.top_logprobs = -1};
    const char *why = "x";
    /* temperature absent: only on a deterministic route */
    CU_ASSERT_FALSE(dp_cache_cacheable(&r, 0, &why));
    CU_ASSERT_PTR_NOT_NULL(why);
    CU_ASSERT_TRUE(dp_cache_cacheable(&r, 1, &why));
    CU_ASSERT_PTR_NULL(why);
    r.has_top_p = 1;
    r.top_p = 0.5;
    CU_ASSERT_FALSE(dp_cache_cacheable(&r, 0, &why));
    CU_ASSERT_STRING_EQUAL(why, "top_p < 1 without temperature");
    /* temperature 0: deterministic anywhere */
    r.has_temperature = 1;
    r.temperature = 0;
    CU_ASSERT_TRUE(dp_cache_cacheable(&r, 0, &why));
    r.temperature = 0.2;
    CU_ASSERT_FALSE(dp_cache_cacheable(&r, 1, &why));
    CU_ASSERT_STRING_EQUAL(why, "temperature > 0");
    r.temperature = 0;
    r.logprobs = 1;
    CU_ASSERT_FALSE(dp_cache_cacheable(&r, 1, &why));
    CU_ASSERT_STRING_EQUAL(why, "logprobs asked");
    r.logprobs = 0;
    r.top_logprobs = 3;
    CU_ASSERT_FALSE(dp_cache_cacheable(&r, 1, NULL));
    r.top_logprobs = -1;
    r.opaque.status = 400; /* the lenient parse left something out */
    CU_ASSERT_FALSE(dp_cache_cacheable(&r, 1, &why));
    r.opaque.status = 0;
    CU_ASSERT_TRUE(dp_cache_cacheable(&r, 1, NULL));
}

/* ------------------------------------------------------------- the blob */

/* A sink that records the transcript and accumulates the answer. */
struct both {
    struct canon_record rec;
    struct canon_acc acc;
    int bad;
};

static int both_emit(void *arg, const struct canon_event *ev)
{
    struct both *b = arg;
    if (canon_acc_add(&b->acc, ev) != GW_OK)
        b->bad = 1;
    return canon_record_emit(&b->rec, ev);
}

static void feed(struct canon_acc *a, const struct canon_event *evs, size_t n)
{
    canon_acc_init(a, 0);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(canon_acc_add(a, &evs[i]), GW_OK);
}

static int buf_eq(const struct gw_buf *a, const struct gw_buf *b)
{
    size_t la = a && a->data ? a->len : 0, lb = b && b->data ? b->len : 0;
    return la == lb && (la == 0 || memcmp(a->data, b->data, la) == 0);
}

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* The replayed answer equals the original (but for the response id). */
static void acc_same(const struct canon_acc *a, const struct canon_acc *b)
{
    CU_ASSERT_TRUE(str_eq(a->model, b->model));
    CU_ASSERT_TRUE(buf_eq(a->text, b->text));
    CU_ASSERT_TRUE(buf_eq(a->reasoning, b->reasoning));
    CU_ASSERT_TRUE(str_eq(a->signature, b->signature));
    CU_ASSERT_EQUAL_FATAL(a->nthinks, b->nthinks);
    for (size_t i = 0; i < a->nthinks; i++) {
        CU_ASSERT_TRUE(buf_eq(a->thinks[i].text, b->thinks[i].text));
        CU_ASSERT_TRUE(str_eq(a->thinks[i].signature, b->thinks[i].signature));
        CU_ASSERT_EQUAL(a->thinks[i].redacted, b->thinks[i].redacted);
    }
    CU_ASSERT_EQUAL_FATAL(a->ntools, b->ntools);
    for (size_t i = 0; i < a->ntools; i++) {
        CU_ASSERT_TRUE(str_eq(a->tools[i].id, b->tools[i].id));
        CU_ASSERT_TRUE(str_eq(a->tools[i].name, b->tools[i].name));
        CU_ASSERT_TRUE(buf_eq(a->tools[i].args, b->tools[i].args));
    }
    /* Field by field: the struct has padding. */
    CU_ASSERT_EQUAL(a->usage.input, b->usage.input);
    CU_ASSERT_EQUAL(a->usage.cache_read, b->usage.cache_read);
    CU_ASSERT_EQUAL(a->usage.cache_write_5m, b->usage.cache_write_5m);
    CU_ASSERT_EQUAL(a->usage.cache_write_1h, b->usage.cache_write_1h);
    CU_ASSERT_EQUAL(a->usage.output, b->usage.output);
    CU_ASSERT_EQUAL(a->usage.reasoning, b->usage.reasoning);
    CU_ASSERT_EQUAL(a->usage.have, b->usage.have);
    CU_ASSERT_EQUAL(a->stop, b->stop);
    CU_ASSERT_EQUAL(a->done, b->done);
    CU_ASSERT_TRUE(str_eq(a->service_tier, b->service_tier));
    CU_ASSERT_TRUE((!a->citations && !b->citations) || json_equal(a->citations, b->citations));
}

/* Encodes the answer the events make, replays it: the same answer, in the
 * grammar, and want as its transcript. Returns the blob (malloc'd). */
static unsigned char *round_trip(const struct canon_event *evs, size_t n, const char *want,
                                 size_t *len)
{
    struct canon_acc orig;
    feed(&orig, evs, n);
    unsigned char *blob = NULL;
    CU_ASSERT_EQUAL_FATAL(dp_cache_encode(&orig, NULL, 0, &blob, len), GW_OK);
    struct both b = {.bad = 0};
    canon_record_init(&b.rec);
    canon_acc_init(&b.acc, 0);
    struct canon_sink s = {.emit = both_emit, .arg = &b};
    CU_ASSERT_EQUAL(dp_cache_replay(blob, *len, &s), GW_OK);
    CU_ASSERT_FALSE(b.bad);
    acc_same(&orig, &b.acc);
    const char *t = canon_record_text(&b.rec);
    CU_ASSERT_PTR_NULL(strstr(t, "VIOLATION"));
    if (want)
        canon_record_same(t, want, "replay");
    canon_record_free(&b.rec);
    canon_acc_free(&b.acc);
    canon_acc_free(&orig);
    return blob;
}

static const struct canon_usage USAGE = {.input = 100,
                                         .cache_read = 2000,
                                         .cache_write_5m = 30,
                                         .cache_write_1h = 4,
                                         .output = 50,
                                         .reasoning = 20,
                                         .have = 1};

static void test_replay_text(void)
{
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "resp_1", .name = "gpt-x-2025", .service_tier = "default"},
        {.type = CANON_EV_CHUNK, .text = "Hel", .len = 3},
        {.type = CANON_EV_CHUNK, .text = "lo, \xc3\xa9\"", .len = 7},
        {.type = CANON_EV_USAGE, .usage = &USAGE, .service_tier = "priority"},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_SEQUENCE},
    };
    size_t len;
    free(round_trip(evs, 5,
                    "START id=- model=gpt-x-2025\n"
                    "USAGE in=100 cr=2000 cw5=30 cw1h=4 out=50 rs=20\n"
                    "TEXT \"Hello, \xc3\xa9\\\"\"\n"
                    "USAGE in=100 cr=2000 cw5=30 cw1h=4 out=50 rs=20\n"
                    "DONE stop_sequence\n",
                    &len));
}

/* Reasoning blocks with signatures, a redacted block, text, parallel tool
 * calls (one without arguments), usage with cache counts. */
static const struct canon_event FULL[] = {
    {.type = CANON_EV_START, .id = "msg_1", .name = "claude-x"},
    {.type = CANON_EV_USAGE, .usage = &USAGE},
    {.type = CANON_EV_REASONING, .text = "Let me ", .len = 7},
    {.type = CANON_EV_REASONING, .text = "think.", .len = 6},
    {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = "sig-A"},
    {.type = CANON_EV_REASONING, .text = "\x01\x02opaque\x00z", .len = 10, .redacted = 1},
    {.type = CANON_EV_REASONING, .text = "More.", .len = 5},
    {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = "sig-B"},
    {.type = CANON_EV_CHUNK, .text = "Checking two cities.", .len = 20},
    {.type = CANON_EV_TOOL_START, .index = 0, .id = "toolu_1", .name = "weather"},
    {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"city\":", .len = 8},
    {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "\"Paris\"}", .len = 8},
    {.type = CANON_EV_TOOL_END, .index = 0},
    {.type = CANON_EV_TOOL_START, .index = 1, .id = "toolu_2", .name = "weather"},
    {.type = CANON_EV_TOOL_DELTA, .index = 1, .text = "{\"city\":\"Oslo\"}", .len = 15},
    {.type = CANON_EV_TOOL_END, .index = 1},
    {.type = CANON_EV_TOOL_START, .index = 2, .id = "toolu_3", .name = "now"},
    {.type = CANON_EV_TOOL_END, .index = 2},
    {.type = CANON_EV_USAGE, .usage = &USAGE, .service_tier = "standard"},
    {.type = CANON_EV_DONE, .stop = CANON_STOP_TOOL_USE},
};
#define NFULL (sizeof(FULL) / sizeof(FULL[0]))

static void test_replay_full(void)
{
    size_t len;
    free(round_trip(FULL, NFULL,
                    "START id=- model=claude-x\n"
                    "USAGE in=100 cr=2000 cw5=30 cw1h=4 out=50 rs=20\n"
                    "REASONING \"Let me think.\"\n"
                    "REASONING \"\" sig=sig-A\n"
                    "REDACTED 10 bytes\n"
                    "REASONING \"More.\"\n"
                    "REASONING \"\" sig=sig-B\n"
                    "TEXT \"Checking two cities.\"\n"
                    "TOOL 0 id=toolu_1 name=weather\n"
                    "ARGS 0 {\"city\":\"Paris\"}\n"
                    "TOOL_END 0\n"
                    "TOOL 1 id=toolu_2 name=weather\n"
                    "ARGS 1 {\"city\":\"Oslo\"}\n"
                    "TOOL_END 1\n"
                    "TOOL 2 id=toolu_3 name=now\n"
                    "TOOL_END 2\n"
                    "USAGE in=100 cr=2000 cw5=30 cw1h=4 out=50 rs=20\n"
                    "DONE tool_use\n",
                    &len));
}

/* No usage, no model, an empty answer; citations split the text. */
static void test_replay_edges(void)
{
    const struct canon_event empty[] = {
        {.type = CANON_EV_START},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_CONTENT_FILTER},
    };
    size_t len;
    free(round_trip(empty, 2, "START id=- model=-\nDONE content_filter\n", &len));
    const struct canon_event cited[] = {
        {.type = CANON_EV_START, .name = "m"},
        {.type = CANON_EV_CITATION, .citation = "{\"n\":0}"},
        {.type = CANON_EV_CHUNK, .text = "Paris is ", .len = 9},
        {.type = CANON_EV_CHUNK, .text = "big.", .len = 4},
        {.type = CANON_EV_CITATION, .citation = "{\"n\":1}"},
        {.type = CANON_EV_CHUNK, .text = " End.", .len = 5},
        {.type = CANON_EV_DONE},
    };
    free(round_trip(cited, 7,
                    "START id=- model=m\n"
                    "CITATION {\"n\":0}\n"
                    "TEXT \"Paris is big.\"\n"
                    "CITATION {\"n\":1}\n"
                    "TEXT \" End.\"\n"
                    "DONE end\n",
                    &len));
}

static void test_encode_refuses(void)
{
    struct canon_acc a;
    unsigned char *blob = (unsigned char *)"x";
    size_t len = 9;
    feed(&a, FULL, NFULL - 1); /* no DONE */
    CU_ASSERT_EQUAL(dp_cache_encode(&a, NULL, 0, &blob, &len), GW_EINVAL);
    CU_ASSERT_PTR_NULL(blob);
    CU_ASSERT_EQUAL(len, 0);
    canon_acc_free(&a);
    feed(&a, FULL, NFULL);
    CU_ASSERT_EQUAL(dp_cache_encode(&a, NULL, 64, &blob, &len), GW_ELIMIT);
    CU_ASSERT_PTR_NULL(blob);
    CU_ASSERT_EQUAL(dp_cache_encode(&a, NULL, 0, &blob, &len), GW_OK);
    size_t whole = len;
    free(blob);
    CU_ASSERT_EQUAL(dp_cache_encode(&a, NULL, whole, &blob, &len), GW_OK);
    free(blob);
    CU_ASSERT_EQUAL(dp_cache_encode(&a, NULL, whole - 1, &blob, &len), GW_ELIMIT);
    a.logprobs = json_array(); /* never cacheable */
    CU_ASSERT_EQUAL(dp_cache_encode(&a, NULL, 0, &blob, &len), GW_EINVAL);
    canon_acc_free(&a);
}

static int count_emit(void *arg, const struct canon_event *ev)
{
    (void)ev;
    (*(int *)arg)++;
    return 0;
}

/* Replays a copy of exactly len bytes (so ASan sees a read past its end):
 * must be refused with nothing emitted. */
static void refused(const unsigned char *p, size_t len)
{
    unsigned char *copy = malloc(len ? len : 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
    if (len)
        memcpy(copy, p, len);
    int n = 0;
    struct canon_sink s = {.emit = count_emit, .arg = &n};
    CU_ASSERT_EQUAL(dp_cache_replay(copy, len, &s), GW_EINVAL);
    CU_ASSERT_EQUAL(n, 0);
    free(copy);
}

static void test_damaged_blob(void)
{
    size_t len;
    unsigned char *blob = round_trip(FULL, NFULL, NULL, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(blob);
    /* Every prefix, and the blob with a byte more. */
    for (size_t n = 0; n < len; n++)
        refused(blob, n);
    unsigned char *longer = malloc(len + 1);
    memcpy(longer, blob, len);
    longer[len] = 0;
    refused(longer, len + 1);
    free(longer);
    CU_ASSERT_EQUAL(dp_cache_replay(NULL, 0, NULL), GW_EINVAL);
    /* Every byte changed (by a drawn non-zero mask), then random pairs. */
    unsigned seed = 12345;
    unsigned char *bad = malloc(len);
    for (size_t i = 0; i < len; i++) {
        memcpy(bad, blob, len);
        seed = seed * 1103515245u + 12345u;
        bad[i] ^= (unsigned char)(1 + (seed >> 8) % 255);
        refused(bad, len);
    }
    for (int k = 0; k < 2000; k++) {
        memcpy(bad, blob, len);
        for (int j = 0; j < 2; j++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 4) % len;
            seed = seed * 1103515245u + 12345u;
            bad[at] ^= (unsigned char)(1 + (seed >> 8) % 255);
        }
        if (memcmp(bad, blob, len) != 0)
            refused(bad, len);
    }
    free(bad);
    free(blob);
}

/* A blob whose checksum is right but whose lengths lie: the structure
 * check refuses it, still within the bounds. */
static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void test_lying_lengths(void)
{
    size_t len;
    unsigned char *blob = round_trip(FULL, NFULL, NULL, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(blob);
    unsigned char *bad = malloc(len);
    unsigned seed = 777;
    for (size_t i = 5; i < len - 8; i++) {
        memcpy(bad, blob, len);
        seed = seed * 1103515245u + 12345u;
        bad[i] ^= (unsigned char)(1 + (seed >> 8) % 255);
        uint64_t h = fnv(bad, len - 8);
        for (int j = 0; j < 8; j++)
            bad[len - 8 + (size_t)j] = (unsigned char)(h >> (8 * j));
        /* Some of these are valid blobs of other answers (a changed text
         * byte); the rest must be refused before any event. Either way
         * nothing is read past the end (ASan) and a replay is whole. */
        struct canon_record rec;
        canon_record_init(&rec);
        struct canon_sink s = {.emit = canon_record_emit, .arg = &rec};
        int rc = dp_cache_replay(bad, len, &s);
        CU_ASSERT(rc == GW_OK || rc == GW_EINVAL);
        if (rc == GW_EINVAL)
            CU_ASSERT_EQUAL(rec.nevents, 0);
        if (rc == GW_OK)
            CU_ASSERT_PTR_NULL(strstr(canon_record_text(&rec), "VIOLATION"));
        canon_record_free(&rec);
    }
    free(bad);
    free(blob);
}

/* A sink that stops early stops the replay. */
static void test_sink_stops(void)
{
    size_t len;
    unsigned char *blob = round_trip(FULL, NFULL, NULL, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(blob);
    for (int k = 1; k < 17; k++) {
        struct canon_record rec;
        canon_record_init(&rec);
        rec.stop_after = k;
        struct canon_sink s = {.emit = canon_record_emit, .arg = &rec};
        CU_ASSERT_EQUAL(dp_cache_replay(blob, len, &s), GW_ECLOSED);
        CU_ASSERT_EQUAL(rec.nevents, k);
        canon_record_free(&rec);
    }
    free(blob);
}

/* The meta-data survives the blob; the two-step key equals the one-step
 * key, and the target is in it. */
static void test_meta_and_digest(void)
{
    struct canon_acc a;
    canon_acc_init(&a, 0);
    struct canon_event evs[] = {{.type = CANON_EV_START, .name = "m"},
                                {.type = CANON_EV_CHUNK, .text = "hi", .len = 2},
                                {.type = CANON_EV_DONE}};
    for (size_t i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(canon_acc_add(&a, &evs[i]), GW_OK);
    struct dp_cache_meta m = {.created_ms = 1764800000123LL,
                              .cost_picodollars = 4200000,
                              .has_cost = 1,
                              .currency = "EUR"},
                         back;
    unsigned char *blob = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(dp_cache_encode(&a, &m, 0, &blob, &len), GW_OK);
    CU_ASSERT_EQUAL(dp_cache_meta_read(blob, len, &back), GW_OK);
    CU_ASSERT_EQUAL(back.created_ms, m.created_ms);
    CU_ASSERT_EQUAL(back.cost_picodollars, m.cost_picodollars);
    CU_ASSERT_EQUAL(back.has_cost, 1);
    CU_ASSERT_STRING_EQUAL(back.currency, "EUR");
    blob[6] ^= 1; /* inside created_ms: the checksum refuses it */
    CU_ASSERT_EQUAL(dp_cache_meta_read(blob, len, &back), GW_EINVAL);
    free(blob);
    canon_acc_free(&a);

    struct canon_req r = {0};
    struct dp_cache_where w = {.scope = DP_CACHE_SCOPE_TEAM,
                               .scope_id = "t",
                               .route = "r",
                               .provider = "p",
                               .model = "m1"};
    unsigned char d[DP_CACHE_KEY_BYTES], k1[DP_CACHE_KEY_BYTES], k2[DP_CACHE_KEY_BYTES];
    CU_ASSERT_EQUAL(dp_cache_key(&w, &r, k1), GW_OK);
    CU_ASSERT_EQUAL(dp_cache_digest(&r, d), GW_OK);
    CU_ASSERT_EQUAL(dp_cache_key_at(&w, d, k2), GW_OK);
    CU_ASSERT_EQUAL(memcmp(k1, k2, sizeof(k1)), 0);
    w.model = "m2";
    CU_ASSERT_EQUAL(dp_cache_key_at(&w, d, k2), GW_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(k1, k2, sizeof(k1)), 0);
}

static CU_TestInfo tests[] = {
    {"the key: a change of any one field changes it", test_key_table},
    {"the key: delivery, selector and end user are not in it", test_key_ignores},
    {"the key: length prefixes ([\"ab\",\"c\"] vs [\"a\",\"bc\"])", test_key_boundaries},
    {"the embeddings key", test_key_embed},
    {"cacheable: deterministic requests only", test_cacheable},
    {"replay: text, usage, tier", test_replay_text},
    {"replay: signed and redacted reasoning, parallel tool calls", test_replay_full},
    {"replay: empty answer, citations", test_replay_edges},
    {"encode: refuses an unfinished answer, logprobs, past max", test_encode_refuses},
    {"a truncated or damaged blob is refused", test_damaged_blob},
    {"lengths that lie under a good checksum", test_lying_lengths},
    {"a sink that stops stops the replay", test_sink_stops},
    {"the blob keeps its meta; the key is the digest at a target", test_meta_and_digest},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
