/*
 * The openai driver: streamed chunks (fast path and full parser agree),
 * usage normalization, tool-call ordering, endings, and request building.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "canon_record.h"
#include "dp_driver.h"
#include "dp_snapshot.h"
#include "gw_error.h"

/* Whole, byte by byte, in random splits and in pieces of 7 bytes: all
 * must give want. */
static void expect(int stream, const char *data, const char *want)
{
    size_t len = strlen(data);
    canon_record_check(&drv_openai, stream, data, len, want);
    char *sevens = canon_record_run(&drv_openai, stream, data, len, 7, 0, 0);
    canon_record_same(sevens, want, "pieces of 7 bytes");
    free(sevens);
}

#define HEAD "{\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":"

static void test_text_and_usage(void)
{
    expect(1,
           "data: " HEAD "{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{\"reasoning_content\":\"hm\"},\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{\"content\":\"a\\\"b\\u00e9\"},\"finish_reason\":null}]}\n\n"
           /* A key spelled with an escape goes to the full parser. */
           "data: " HEAD "{\"\\u0063ontent\":\" c\"},\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{},\"finish_reason\":\"stop\"}]}\n\n"
           "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,"
           "\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":4},"
           "\"completion_tokens_details\":{\"reasoning_tokens\":2}}}\n\n"
           "data: [DONE]\n\n",
           "START id=c1 model=m\n"
           "REASONING \"hm\"\n"
           "TEXT \"a\\\"b\xc3\xa9\"\" c\"\n"
           "USAGE in=6 cr=4 cw5=0 cw1h=0 out=5 rs=2\n"
           "DONE end\n");
}

static void test_deepseek_cache_field(void)
{
    expect(1,
           "data: " HEAD "{\"content\":\"x\"},\"finish_reason\":\"length\"}],"
           "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,"
           "\"prompt_cache_hit_tokens\":3}}\n\ndata: [DONE]\n\n",
           "START id=c1 model=m\nTEXT \"x\"\nUSAGE in=6 cr=3 cw5=0 cw1h=0 out=1 rs=0\n"
           "DONE max_tokens\n");
}

static void test_tool_calls(void)
{
    expect(1,
           "data: " HEAD "{\"tool_calls\":[{\"index\":0,\"id\":\"t0\",\"type\":\"function\","
           "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]},\"finish_reason\":null}]}"
           "\n\n"
           "data: " HEAD "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},"
           "\"finish_reason\":null}]}\n\n"
           "data: " HEAD
           "{\"tool_calls\":[{\"index\":1,\"id\":\"t1\",\"function\":{\"name\":\"g\"}}]},"
           "\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
           "START id=c1 model=m\nTOOL 0 id=t0 name=f\nARGS 0 {\"a\":1}\nTOOL_END 0\n"
           "TOOL 1 id=t1 name=g\nARGS 1 {}\nTOOL_END 1\nDONE tool_use\n");
    /* Deltas for a call already closed (text came between): refused,
     * never spliced. */
    expect(1,
           "data: " HEAD
           "{\"tool_calls\":[{\"index\":0,\"id\":\"t0\",\"function\":{\"name\":\"f\"}}]},"
           "\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{\"content\":\"x\"},\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]},"
           "\"finish_reason\":null}]}\n\n",
           "START id=c1 model=m\nTOOL 0 id=t0 name=f\nARGS 0 {}\nTOOL_END 0\n"
           "TEXT \"x\"\nERROR provider_5xx status=0\n");
}

/* Parallel calls whose argument deltas alternate by index (legal: every
 * delta names its call): both calls whole, in the order they started, the
 * later one held until the earlier ends. */
static void test_interleaved_tool_calls(void)
{
#define TC(json) "data: " HEAD "{\"tool_calls\":[" json "]},\"finish_reason\":null}]}\n\n"
    const char *two = TC("{\"index\":0,\"id\":\"t0\",\"type\":\"function\",\"function\":{"
                         "\"name\":\"f\",\"arguments\":\"\"}}")
        TC("{\"index\":1,\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"g\","
           "\"arguments\":\"{\\\"b\\\"\"}}")
            TC("{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\"\"}}") TC(
                "{\"index\":1,\"function\":{\"arguments\":\":2}\"}}")
                TC("{\"index\":0,\"function\":{\"arguments\":\":1}\"}}") "data: " HEAD
                                                                         "{},\"finish_reason\":"
                                                                         "\"tool_calls\"}]}\n\n"
                                                                         "data: "
                                                                         "{\"id\":\"c1\","
                                                                         "\"choices\":[],\"usage\":"
                                                                         "{\"prompt_tokens\":4,"
                                                                         "\"completion_tokens\":6}}"
                                                                         "\n\ndata: [DONE]\n\n";
    expect(1, two,
           "START id=c1 model=m\nTOOL 0 id=t0 name=f\nARGS 0 {\"a\":1}\nTOOL_END 0\n"
           "TOOL 1 id=t1 name=g\nARGS 1 {\"b\":2}\nTOOL_END 1\n"
           "USAGE in=4 cr=0 cw5=0 cw1h=0 out=6 rs=0\nDONE tool_use\n");
    /* Three calls, the third started before the first ended, one delta
     * each in a single chunk; a held call with no arguments gets {}. */
    const char *three = TC(
        "{\"index\":0,\"id\":\"t0\",\"function\":{\"name\":\"f\"}},"
        "{\"index\":1,\"id\":\"t1\",\"function\":{\"name\":\"g\"}},"
        "{\"index\":2,\"id\":\"t2\",\"function\":{\"name\":\"h\",\"arguments\":\"[]\"}}")
        TC("{\"index\":0,\"function\":{\"arguments\":\"{}\"}}") "data: " HEAD
                                                                "{},\"finish_reason\":\"tool_"
                                                                "calls\"}]}\n\ndata: [DONE]\n\n";
    expect(1, three,
           "START id=c1 model=m\nTOOL 0 id=t0 name=f\nARGS 0 {}\nTOOL_END 0\n"
           "TOOL 1 id=t1 name=g\nARGS 1 {}\nTOOL_END 1\n"
           "TOOL 2 id=t2 name=h\nARGS 2 []\nTOOL_END 2\nDONE tool_use\n");
    /* A stream cut while a call is held: broken, nothing held is lost to a
     * leak (the ASan run checks) and nothing partial is passed as whole. */
    expect(1,
           TC("{\"index\":0,\"id\":\"t0\",\"function\":{\"name\":\"f\"}}")
               TC("{\"index\":1,\"id\":\"t1\",\"function\":{\"name\":\"g\","
                  "\"arguments\":\"{\"}}"),
           "START id=c1 model=m\nTOOL 0 id=t0 name=f\nERROR network status=0\n");
#undef TC
}

static void test_endings(void)
{
    /* No [DONE], but the provider said why it stopped: complete. */
    expect(1, "data: " HEAD "{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n",
           "START id=c1 model=m\nTEXT \"x\"\nDONE end\n");
    /* No [DONE] and no finish reason: broken. */
    expect(1, "data: " HEAD "{\"content\":\"x\"},\"finish_reason\":null}]}\n\n",
           "START id=c1 model=m\nTEXT \"x\"\nERROR network status=0\n");
    /* [DONE] before any chunk: no answer, never a DONE without a START
     * (found by tests/fuzz/fuzz_drivers). */
    expect(1, "data: [DONE]\n\n", "ERROR empty_output status=0\n");
    expect(1, ": keep-alive\n\ndata: [DONE]\n\ndata: " HEAD "{\"content\":\"x\"}}]}\n\n",
           "ERROR empty_output status=0\n");
    /* An error event in the stream. */
    expect(1, "data: {\"error\":{\"message\":\"overloaded\"}}\n\n",
           "ERROR provider_5xx status=0\n");
    /* Malformed JSON. */
    expect(1, "data: " HEAD "{\"content\":\"x\"},\"finish_reason\":null}]}\n\ndata: {oops\n\n",
           "START id=c1 model=m\nTEXT \"x\"\nERROR provider_5xx status=0\n");
    /* Whole bodies: empty, not JSON, a complete answer. */
    expect(0, "", "ERROR empty_output status=0\n");
    expect(0, "<html>", "ERROR provider_5xx status=0\n");
    expect(0,
           "{\"id\":\"c2\",\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
           "\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"t\",\"type\":\"function\","
           "\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]},\"finish_reason\":\"tool_calls\"}],"
           "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}",
           "START id=c2 model=m\nTOOL 0 id=t name=f\nARGS 0 {}\nTOOL_END 0\n"
           "USAGE in=3 cr=0 cw5=0 cw1h=0 out=2 rs=0\nDONE tool_use\n");
}

/* Found in review: usage while a call is open waits, and a later usage
 * replaces it; what jansson refuses fails the same in any chunk; absurd
 * token counts are kept in range. */
static void test_review_cases(void)
{
    expect(1,
           "data: " HEAD "{\"tool_calls\":[{\"index\":0,\"id\":\"t0\",\"function\":{\"name\":\"f\","
           "\"arguments\":\"{\"}}]},\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":5,"
           "\"completion_tokens\":1}}\n\n"
           "data: " HEAD "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"}\"}}]},"
           "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,"
           "\"completion_tokens\":50}}\n\ndata: [DONE]\n\n",
           "START id=c1 model=m\nTOOL 0 id=t0 name=f\nARGS 0 {}\nTOOL_END 0\n"
           "USAGE in=5 cr=0 cw5=0 cw1h=0 out=50 rs=0\nDONE tool_use\n");
    /* A NUL escape: jansson refuses it, so the fast path must not take it. */
    expect(1,
           "data: " HEAD "{\"content\":\"a\"},\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{\"content\":\"b\\u0000c\"},\"finish_reason\":null}]}\n\n",
           "START id=c1 model=m\nTEXT \"a\"\nERROR provider_5xx status=0\n");
    /* A duplicate key: refused like the full parser does. */
    expect(1,
           "data: " HEAD "{\"content\":\"a\"},\"finish_reason\":null}]}\n\n"
           "data: " HEAD "{\"content\":\"b\",\"content\":\"c\"},\"finish_reason\":null}]}\n\n",
           "START id=c1 model=m\nTEXT \"a\"\nERROR provider_5xx status=0\n");
    expect(1,
           "data: " HEAD "{\"content\":\"x\"},\"finish_reason\":\"stop\"}],"
           "\"usage\":{\"prompt_tokens\":9223372036854775807,\"completion_tokens\":-5,"
           "\"prompt_tokens_details\":{\"cached_tokens\":-1}}}\n\ndata: [DONE]\n\n",
           "START id=c1 model=m\nTEXT \"x\"\nUSAGE in=1000000000000 cr=0 cw5=0 cw1h=0 out=0 rs=0\n"
           "DONE end\n");
}

static void test_build(void)
{
    json_t *body = json_loads(
        "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", 0, NULL);
    struct canon_req *r = canon_req_new(body);
    struct canon_message m = {.role = CANON_ROLE_USER};
    struct canon_part parts[2] = {
        {.type = CANON_PART_TOOL_RESULT, .id = "t1", .is_error = 1},
        {.type = CANON_PART_TEXT, .text = "next"},
    };
    struct canon_part inner = {.type = CANON_PART_TEXT, .text = "boom"};
    parts[0].content = &inner;
    parts[0].ncontent = 1;
    m.parts = parts;
    m.nparts = 2;
    r->messages = &m;
    r->nmessages = 1;
    r->stream = 1;
    r->has_max_tokens = 1;
    r->max_tokens = 7;
    struct dp_provider p = {.name = "p",
                            .driver = "openai",
                            .drv = drv_openai.info,
                            .base_url = "http://h/v1",
                            .credential = "k"};
    p.options = json_pack("{s:s}", "max_tokens_field", "max_completion_tokens");
    struct drv_target t = {.provider = &p, .model = "gpt", .request_id = "rid"};
    struct drv_request out = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(drv_openai.build_chat(&t, r, &out, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(out.url, "http://h/v1/chat/completions");
    json_t *j = json_loadb(out.body, out.body_len, 0, NULL);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "max_completion_tokens")), 7);
    CU_ASSERT(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
    json_t *msgs = json_object_get(j, "messages");
    CU_ASSERT_EQUAL(json_array_size(msgs), 2);
    /* The tool result first (it answers the previous turn), its error flag
     * kept as a marker, then the user's text. */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(msgs, 0), "role")),
                           "tool");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(msgs, 0), "content")),
                           "[tool error] boom");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(msgs, 1), "content")),
                           "next");
    json_decref(j);
    drv_request_free(&out);
    /* top_k cannot be honored: refused, naming the client's field. */
    r->has_top_k = 1;
    r->top_k = 5;
    CU_ASSERT_EQUAL(drv_openai.build_chat(&t, r, &out, &err), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.param, "top_k");
    CU_ASSERT_EQUAL(err.status, 400);
    drv_request_free(&out);
    r->messages = NULL;
    r->nmessages = 0;
    canon_req_free(r);
    json_decref(p.options);
}

/* The pass-through's request: the client's bytes, but for the gateway's
 * edits (the model, include_usage when streaming, a cap), each a splice. */
static void test_relay_build(void)
{
    struct dp_provider p = {
        .name = "p", .driver = "openai", .drv = drv_openai.info, .base_url = "http://h/v1"};
    /* An option naming the cap's field is an operator's text: escaped. */
    p.options = json_pack("{s:s}", "max_tokens_field", "max\"tokens");
    struct drv_target t = {.provider = &p, .model = "gpt-4o", .request_id = "rid"};
    const char *body = "{\"model\":\"fast\", \"messages\":[{\"role\":\"user\",\"content\":"
                       "\"q\\u00e9\"}],\"new_thing\":1.0,\"stream\":true,"
                       "\"stream_options\":{\"x\":1}}";
    struct drv_relay_edits ed = {.stream = 1, .max_tokens = 9};
    struct drv_request out = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(drv_openai.relay_build(&t, body, strlen(body), &ed, &out, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(out.body, "{\"model\":\"gpt-4o\", \"messages\":[{\"role\":\"user\","
                                     "\"content\":\"q\\u00e9\"}],\"new_thing\":1.0,\"stream\":true,"
                                     "\"stream_options\":{\"x\":1,\"include_usage\":true},"
                                     "\"max\\\"tokens\":9}");
    CU_ASSERT(out.stream);
    json_t *j = json_loadb(out.body, out.body_len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL(j);
    json_decref(j);
    drv_request_free(&out);
    /* include_usage already true and no cap: untouched but for the model. */
    const char *b2 = "{\"stream_options\":{\"include_usage\":true},\"model\":\"fast\"}";
    ed.max_tokens = 0;
    memset(&out, 0, sizeof(out));
    CU_ASSERT_EQUAL_FATAL(drv_openai.relay_build(&t, b2, strlen(b2), &ed, &out, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(out.body,
                           "{\"stream_options\":{\"include_usage\":true},\"model\":\"gpt-4o\"}");
    drv_request_free(&out);
    /* A model key spelled with escapes cannot be edited for sure: refused. */
    const char *b3 = "{\"\\u006dodel\":\"fast\"}";
    memset(&out, 0, sizeof(out));
    CU_ASSERT_EQUAL(drv_openai.relay_build(&t, b3, strlen(b3), &ed, &out, &err), GW_EINVAL);
    drv_request_free(&out);
    json_decref(p.options);
}

/* A whole answer read by spans (fast_whole) against the full parser: each
 * body, and the same body with its "id" key spelled \u0069d (which sends
 * it to jansson: a key with an escape may be any key in disguise), give the
 * same transcript; so does every split. The last case shows the span path
 * ran: a duplicate key outside what it reads is jansson's refusal only. */
static void test_whole_fast_and_full_agree(void)
{
    static const char *const bodies[] = {
        "{\"id\":\"c1\",\"object\":\"chat.completion\",\"model\":\"m\",\"choices\":[{"
        "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"a\\\"b\\u00e9 \\ud83d"
        "\\ude00\",\"refusal\":null,\"annotations\":[]},\"finish_reason\":\"stop\"}],"
        "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"prompt_tokens_details\":"
        "{\"cached_tokens\":4},\"completion_tokens_details\":{\"reasoning_tokens\":2}}}\n",
        /* reasoning by either name; DeepSeek's cache field; a length stop */
        "{\"id\":\"c2\",\"model\":\"m\",\"choices\":[{\"message\":{\"reasoning_content\":"
        "\"hm\",\"content\":\"x\"},\"finish_reason\":\"length\"}],\"usage\":{"
        "\"prompt_tokens\":9,\"completion_tokens\":1,\"prompt_cache_hit_tokens\":3}}",
        "{\"id\":\"c3\",\"choices\":[{\"message\":{\"reasoning\":\"r\",\"content\":null,"
        "\"tool_calls\":[]},\"finish_reason\":\"stop\"}]}",
        /* a refusal; counts that are not plain integers, or negative */
        "{\"id\":\"c4\",\"model\":\"m\",\"choices\":[{\"message\":{\"content\":\"\","
        "\"refusal\":\"no\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1.0,"
        "\"completion_tokens\":-3,\"completion_tokens_details\":{\"reasoning_tokens\":7e0}}}",
        /* shapes with no answer in them */
        "{\"id\":\"c5\",\"choices\":[]}",
        "{\"id\":\"c6\",\"choices\":[{\"message\":null,\"finish_reason\":null}],"
        "\"usage\":null}",
        "{\"id\":\"c7\",\"choices\":{\"0\":1},\"usage\":[1]}",
        /* what the span path leaves to jansson: tool calls, an error, a
         * count past 18 digits, deep nesting */
        "{\"id\":\"c8\",\"choices\":[{\"message\":{\"tool_calls\":[{\"id\":\"t\",\"function\":"
        "{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
        "{\"id\":\"c9\",\"error\":{\"message\":\"overloaded\"}}",
        "{\"id\":\"c10\",\"choices\":[{\"message\":{\"content\":\"y\"}}],\"usage\":"
        "{\"prompt_tokens\":1234567890123456789,\"completion_tokens\":1}}",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(*bodies); i++) {
        const char *b = bodies[i];
        const char *at = strstr(b, "\"id\"");
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        char esc[2048];
        int n = snprintf(esc, sizeof(esc), "%.*s\"\\u0069d\"%s", (int)(at - b), b, at + 4);
        CU_ASSERT_FATAL(n > 0 && (size_t)n < sizeof(esc));
        char *fast = canon_record_splits(&drv_openai, 0, b, strlen(b));
        char *full = canon_record_run(&drv_openai, 0, esc, (size_t)n, CANON_SPLIT_WHOLE, 0, 0);
        canon_record_same(fast, full, b);
        free(fast);
        free(full);
    }
    const char dup[] = "{\"id\":\"d\",\"x\":1,\"x\":2,\"choices\":[{\"message\":{\"content\":"
                       "\"z\"},\"finish_reason\":\"stop\"}]}";
    char *t = canon_record_run(&drv_openai, 0, dup, strlen(dup), CANON_SPLIT_WHOLE, 0, 0);
    canon_record_same(t, "START id=d model=-\nTEXT \"z\"\nDONE end\n", "a duplicate key");
    free(t);
}

static CU_TestInfo tests[] = {
    {"the pass-through's request", test_relay_build},
    {"text, reasoning and usage; fast path and full parser agree", test_text_and_usage},
    {"parallel tool calls interleaved by index", test_interleaved_tool_calls},
    {"DeepSeek's cache-hit field", test_deepseek_cache_field},
    {"tool calls in order; interleaving refused", test_tool_calls},
    {"endings: with and without [DONE], errors, whole bodies", test_endings},
    {"whole answers: the span path and the full parser agree", test_whole_fast_and_full_agree},
    {"request building", test_build},
    {"cases found in review", test_review_cases},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
