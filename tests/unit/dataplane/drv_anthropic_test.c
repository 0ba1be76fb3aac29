/* Tests for dataplane/drivers/anthropic.c: the Messages request a canonical
 * request becomes, refusals that name the client's field, the SSE and
 * whole-body parsers (fed whole, byte by byte and in random splits, which
 * must agree), truncated and malformed answers, and error classification.
 * The stream fixtures follow Anthropic's documented streaming examples
 * (thinking with signature_delta, text, tool_use with input_json_delta
 * pieces, message_delta usage) with cache reads and 5m/1h cache writes. */
#include <CUnit/CUnit.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "canon_record.h"
#include "dp_driver.h"
#include "dp_snapshot.h"
#include "gw_error.h"
#include "json_path.h"

/* ------------------------------------------------------------- fixtures */

#define EV(name, json) "event: " name "\ndata: " json "\n\n"

static const char STREAM_FULL[] = EV(
    "message_start",
    "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_01ABC\",\"type\":\"message\","
    "\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":"
    "null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,"
    "\"cache_creation_input_tokens\":1500,\"cache_read_input_tokens\":3000,"
    "\"cache_creation\":{\"ephemeral_5m_input_tokens\":500,\"ephemeral_1h_input_tokens\":1000},"
    "\"output_tokens\":1,\"service_tier\":\"standard\"}}}") EV("content_block_start",
                                                               "{\"type\":\"content_block_start\","
                                                               "\"index\":0,\"content_block\":"
                                                               "{\"type\":\"thinking\","
                                                               "\"thinking\":\"\",\"signature\":"
                                                               "\"\"}}") EV("ping",
                                                                            "{\"type\": \"ping\"}")
    EV("content_block_delta",
       "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
       "\"thinking_delta\","
       "\"thinking\":\"Let me solve this step by step:\\n\\n1. First break "
       "down 27 * 453\"}}") EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":"
                                                      "0,\"delta\":{\"type\":\"thinking_delta\","
                                                      "\"thinking\":\"\\n2. 453 = 400 + 50 + 3\"}}")
        EV("content_block_delta",
           "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\","
           "\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds\"}}")
            EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}") EV(
                "content_block_start",
                "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":"
                "{\"type\":\"text\",\"text\":\"\"}}") EV("content_block_delta",
                                                         "{\"type\":\"content_block_delta\","
                                                         "\"index\":1,\"delta\":{\"type\":\"text_"
                                                         "delta\","
                                                         "\"text\":\"Okay, let's check the "
                                                         "weather\"}}")
                EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
                                          "{\"type\":\"text_delta\","
                                          "\"text\":\" for San Francisco and NYC \\u00e9.\"}}")
                    EV("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":1}") EV(
                        "content_block_start",
                        "{\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":"
                        "\"tool_use\","
                        "\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\","
                        "\"input\":{}}}") EV("content_block_delta",
                                             "{\"type\":\"content_block_delta\",\"index\":2,"
                                             "\"delta\":{\"type\":"
                                             "\"input_json_delta\",\"partial_json\":\"\"}}")
                        EV("content_block_delta",
                           "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":"
                           "\"input_json_delta\",\"partial_json\":\"{\\\"location\\\": "
                           "\\\"San Fra\"}}")
                            EV("content_block_delta",
                               "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":"
                               "\"input_json_delta\",\"partial_json\":\"ncisco, CA\\\", "
                               "\\\"unit\\\": \\\"fah\"}}")
                                EV("content_block_delta",
                                   "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{"
                                   "\"type\":"
                                   "\"input_json_delta\",\"partial_json\":\"renheit\\\"}\"}}")
                                    EV("content_block_stop",
                                       "{\"type\":\"content_block_stop\",\"index\":2}")
                                        EV("content_block_start",
                                           "{\"type\":\"content_block_start\",\"index\":3,"
                                           "\"content_block\":{\"type\":\"tool_use\","
                                           "\"id\":\"toolu_02NYC\",\"name\":\"get_time\",\"input\":"
                                           "{}}}") EV("content_block_delta",
                                                      "{\"type\":\"content_block_delta\",\"index\":"
                                                      "3,\"delta\":{\"type\":"
                                                      "\"input_json_delta\",\"partial_json\":\"{"
                                                      "\\\"timezone\\\": \"}}")
                                            EV("content_block_delta",
                                               "{\"type\":\"content_block_delta\",\"index\":3,"
                                               "\"delta\":{\"type\":"
                                               "\"input_json_delta\",\"partial_json\":"
                                               "\"\\\"America/New_York\\\"}\"}}")
                                                EV("content_block_stop",
                                                   "{\"type\":\"content_block_stop\",\"index\":3}")
                                                    EV("message_delta",
                                                       "{\"type\":\"message_delta\",\"delta\":{"
                                                       "\"stop_reason\":\"tool_use\","
                                                       "\"stop_sequence\":null},\"usage\":{"
                                                       "\"output_tokens\":89}}")
                                                        EV("message_stop",
                                                           "{\"type\":\"message_stop\"}");

static const char STREAM_FULL_T[] =
    "START id=msg_01ABC model=claude-sonnet-4-5\n"
    "USAGE in=25 cr=3000 cw5=500 cw1h=1000 out=1 rs=0\n"
    "REASONING \"Let me solve this step by step:\\n\\n1. First break down 27 * 453\\n2. 453 = "
    "400 + 50 + 3\"\n"
    "REASONING \"\" sig=EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds\n"
    "TEXT \"Okay, let's check the weather\"\" for San Francisco and NYC \xc3\xa9.\"\n"
    "TOOL 0 id=toolu_01T1x1fJ34qAmk2tNTrN7Up6 name=get_weather\n"
    "ARGS 0 {\"location\": \"San Francisco, CA\", \"unit\": \"fahrenheit\"}\n"
    "TOOL_END 0\n"
    "TOOL 1 id=toolu_02NYC name=get_time\n"
    "ARGS 1 {\"timezone\": \"America/New_York\"}\n"
    "TOOL_END 1\n"
    "USAGE in=25 cr=3000 cw5=500 cw1h=1000 out=89 rs=0\n"
    "DONE tool_use\n";

/* A text answer whose message_delta carries the cumulative input side too
 * (as Anthropic's current streams do), a cache write with no tier object
 * (counted as 5m), CRLF line ends, an unknown event type and a tool call
 * with no arguments. */
static const char STREAM_TEXT[] =
    "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\","
    "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-haiku-4-5\","
    "\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,"
    "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\r\n\r\n"
    "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n"
    "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello!\"}}\r\n\r\n"
    "event: something_new\r\ndata: {\"type\":\"something_new\",\"x\":1}\r\n\r\n"
    "event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n"
    "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":1,"
    "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_3\",\"name\":\"now\",\"input\":{}}}"
    "\r\n\r\n"
    "event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":1}\r\n\r\n"
    "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":2,"
    "\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va3p\"}}\r\n\r\n"
    "event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":2}\r\n\r\n"
    "event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":3,"
    "\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":"
    "\"web_search\",\"input\":{}}}\r\n\r\n"
    "event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":3,"
    "\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\":1}\"}}\r\n\r\n"
    "event: content_block_stop\r\ndata: {\"type\":\"content_block_stop\",\"index\":3}\r\n\r\n"
    "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
    "\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":12,"
    "\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":100,"
    "\"output_tokens\":15}}\r\n\r\n"
    "event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";

static const char STREAM_TEXT_T[] = "START id=msg_2 model=claude-haiku-4-5\n"
                                    "USAGE in=12 cr=0 cw5=0 cw1h=0 out=1 rs=0\n"
                                    "TEXT \"Hello!\"\n"
                                    "TOOL 0 id=toolu_3 name=now\n"
                                    "ARGS 0 {}\n"
                                    "TOOL_END 0\n"
                                    "REDACTED 16 bytes\n"
                                    "USAGE in=12 cr=100 cw5=2048 cw1h=0 out=15 rs=0\n"
                                    "DONE end\n";

static const char WHOLE[] =
    "{\"id\":\"msg_01XFD\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
    "\"claude-opus-4-1\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"The user wants "
    "weather.\",\"signature\":\"sigABC\"},{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgB\"},"
    "{\"type\":\"text\",\"text\":\"I'll check both.\"},{\"type\":\"tool_use\",\"id\":\"toolu_A\","
    "\"name\":\"get_weather\",\"input\":{\"location\":\"Paris\",\"days\":[1,2]}},"
    "{\"type\":\"tool_use\",\"id\":\"toolu_B\",\"name\":\"get_time\",\"input\":{}}],"
    "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":40,"
    "\"cache_creation_input_tokens\":700,\"cache_read_input_tokens\":9000,\"cache_creation\":"
    "{\"ephemeral_5m_input_tokens\":200,\"ephemeral_1h_input_tokens\":500},\"output_tokens\":"
    "120}}";

static const char WHOLE_T[] = "START id=msg_01XFD model=claude-opus-4-1\n"
                              "REASONING \"The user wants weather.\"\n"
                              "REASONING \"\" sig=sigABC\n"
                              "REDACTED 8 bytes\n"
                              "TEXT \"I'll check both.\"\n"
                              "TOOL 0 id=toolu_A name=get_weather\n"
                              "ARGS 0 {\"location\":\"Paris\",\"days\":[1,2]}\n"
                              "TOOL_END 0\n"
                              "TOOL 1 id=toolu_B name=get_time\n"
                              "ARGS 1 {}\n"
                              "TOOL_END 1\n"
                              "USAGE in=40 cr=9000 cw5=200 cw1h=500 out=120 rs=0\n"
                              "DONE tool_use\n";

/* Citations: a text block's citations follow its text, whole or streamed
 * (held to content_block_stop). */
#define CITE "{\"type\":\"web_search_result_location\",\"url\":\"https://e.x/a\",\"title\":\"A\"}"
static const char STREAM_CITE[] =
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
    "\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"Intro. \"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\",\"citations\":[]}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,"
    "\"delta\":{\"type\":\"citations_delta\",\"citation\":" CITE "}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"Cited.\"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
    "\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n"
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
static const char WHOLE_CITE[] =
    "{\"id\":\"m\",\"type\":\"message\",\"model\":\"c\",\"content\":[{\"type\":\"text\","
    "\"text\":\"Intro. \"},{\"type\":\"text\",\"text\":\"Cited.\",\"citations\":[" CITE
    "]}],\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}";
static const char CITE_T[] = "START id=m model=c\n"
                             "USAGE in=3 cr=0 cw5=0 cw1h=0 out=1 rs=0\n"
                             "TEXT \"Intro. \"\"Cited.\"\n"
                             "CITATION " CITE "\n"
                             "USAGE in=3 cr=0 cw5=0 cw1h=0 out=4 rs=0\n"
                             "DONE end\n";
static const char CITE_WHOLE_T[] = "START id=m model=c\n"
                                   "TEXT \"Intro. \"\"Cited.\"\n"
                                   "CITATION " CITE "\n"
                                   "USAGE in=3 cr=0 cw5=0 cw1h=0 out=4 rs=0\n"
                                   "DONE end\n";

/* ------------------------------------------------------------- helpers */

/* Whole, byte by byte and in random splits: all give `want`. */
static void check_all(int stream, const char *body, const char *want)
{
    canon_record_check(&drv_anthropic, stream, body, strlen(body), want);
}

static const char *last_line(const char *t)
{
    size_t n = strlen(t);
    if (n && t[n - 1] == '\n')
        n--;
    while (n && t[n - 1] != '\n')
        n--;
    return t + n;
}

static struct dp_provider prov;

static void provider_reset(const char *base_url, const char *options)
{
    json_decref(prov.options);
    memset(&prov, 0, sizeof(prov));
    prov.name = "claude";
    prov.driver = "anthropic";
    prov.drv = drv_anthropic.info;
    prov.base_url = base_url;
    prov.credential = "sk-ant-test";
    prov.options = json_loads(options ? options : "{}", 0, NULL);
}

static struct drv_target target(void)
{
    struct drv_target t = {.provider = &prov, .model = "claude-sonnet-4-5", .request_id = "req_1"};
    return t;
}

static void req_init(struct canon_req *r)
{
    memset(r, 0, sizeof(*r));
    r->parallel_tool_calls = -1;
    r->format_strict = -1;
}

/* Builds r; on success returns the body as JSON (caller decrefs). */
static json_t *build(const struct canon_req *r, struct drv_request *out, struct canon_err *err,
                     int *rc)
{
    struct drv_target t = target();
    memset(out, 0, sizeof(*out));
    memset(err, 0, sizeof(*err));
    *rc = drv_anthropic.build_chat(&t, r, out, err);
    if (*rc != GW_OK)
        return NULL;
    return json_loadb(out->body, out->body_len, 0, NULL);
}

static int has_header(const struct drv_request *r, const char *line)
{
    for (const struct curl_slist *h = r->headers; h; h = h->next)
        if (strcmp(h->data, line) == 0)
            return 1;
    return 0;
}

/* --------------------------------------------------------------- parse */

static void test_stream_full(void)
{
    check_all(1, STREAM_FULL, STREAM_FULL_T);
}

static void test_stream_text(void)
{
    check_all(1, STREAM_TEXT, STREAM_TEXT_T);
}

static void test_whole(void)
{
    check_all(0, WHOLE, WHOLE_T);
}

static void test_whole_text_and_stops(void)
{
    check_all(0,
              "{\"id\":\"msg_9\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\","
              "\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":\"max_tokens\","
              "\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}",
              "START id=msg_9 model=m\nTEXT \"Hi\"\nUSAGE in=3 cr=0 cw5=0 cw1h=0 out=2 rs=0\n"
              "DONE max_tokens\n");
    check_all(0,
              "{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}],"
              "\"stop_reason\":\"stop_sequence\",\"usage\":{}}",
              "START id=- model=-\nTEXT \"x\"\nUSAGE in=0 cr=0 cw5=0 cw1h=0 out=0 rs=0\n"
              "DONE stop_sequence\n");
    check_all(0,
              "{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"no\"}],"
              "\"stop_reason\":\"refusal\"}",
              "START id=- model=-\nTEXT \"no\"\nDONE refusal\n");
}

static void test_stream_error_event(void)
{
    static const char head[] =
        EV("message_start", "{\"type\":\"message_start\",\"message\":{\"id\":\"m1\","
                            "\"model\":\"c\",\"usage\":{\"input_tokens\":5}}}")
            EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                      "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}")
                EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
                                          "{\"type\":\"text_delta\",\"text\":\"Hel\"}}");
    static const struct {
        const char *type, *cls;
    } cases[] = {
        {"overloaded_error", "provider_5xx"},    {"rate_limit_error", "rate_limited"},
        {"api_error", "provider_5xx"},           {"invalid_request_error", "bad_request"},
        {"authentication_error", "auth_failed"}, {"billing_error", "quota_exhausted"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char body[2048], want[512];
        snprintf(body, sizeof(body),
                 "%sevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"%s\","
                 "\"message\":\"Overloaded\"}}\n\n",
                 head, cases[i].type);
        snprintf(want, sizeof(want),
                 "START id=m1 model=c\nUSAGE in=5 cr=0 cw5=0 cw1h=0 out=0 rs=0\nTEXT \"Hel\"\n"
                 "ERROR %s status=0\n",
                 cases[i].cls);
        check_all(1, body, want);
    }
    /* An error before anything else. */
    check_all(1,
              EV("error", "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
                          "\"message\":\"Overloaded\"}}"),
              "ERROR provider_5xx status=0\n");
}

static void test_truncated(void)
{
    size_t len = strlen(STREAM_FULL);
    const char *md = strstr(STREAM_FULL, "event: message_delta");
    CU_ASSERT_PTR_NOT_NULL_FATAL(md);
    size_t md_off = (size_t)(md - STREAM_FULL);
    for (size_t cut = 0; cut < len; cut++) {
        char *t = canon_record_run(&drv_anthropic, 1, STREAM_FULL, cut, CANON_SPLIT_WHOLE, 0, 0);
        CU_ASSERT_PTR_NULL(strstr(t, "VIOLATION"));
        const char *last = last_line(t);
        if (cut <= md_off) {
            CU_ASSERT_STRING_EQUAL(last, "ERROR network status=0\n");
        } else {
            CU_ASSERT(strcmp(last, "ERROR network status=0\n") == 0 ||
                      strcmp(last, "DONE tool_use\n") == 0);
        }
        free(t);
    }
    /* A whole body cut anywhere is not a message. */
    len = strlen(WHOLE);
    for (size_t cut = 0; cut < len; cut += 7) {
        char *t = canon_record_run(&drv_anthropic, 0, WHOLE, cut, CANON_SPLIT_WHOLE, 0, 0);
        CU_ASSERT_STRING_EQUAL(t, cut ? "ERROR provider_5xx status=0\n"
                                      : "ERROR empty_output status=0\n");
        free(t);
    }
}

static void test_malformed(void)
{
    static const char start[] = EV("message_start", "{\"type\":\"message_start\",\"message\":"
                                                    "{\"id\":\"m\",\"model\":\"c\"}}");
    /* Not JSON. */
    check_all(1, "event: message_start\ndata: {not json\n\n", "ERROR provider_5xx status=0\n");
    /* Content before message_start. */
    check_all(1,
              EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}"),
              "ERROR provider_5xx status=0\n");
    char body[1024];
    /* A delta for a block that is not open. */
    snprintf(body, sizeof(body), "%s%s", start,
             EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":4,\"delta\":"
                                       "{\"type\":\"text_delta\",\"text\":\"x\"}}"));
    check_all(1, body, "START id=m model=c\nERROR provider_5xx status=0\n");
    /* A text delta inside a tool_use block. */
    snprintf(body, sizeof(body), "%s%s%s", start,
             EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                       "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\","
                                       "\"name\":\"f\",\"input\":{}}}"),
             EV("content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
                                       "{\"type\":\"text_delta\",\"text\":\"x\"}}"));
    check_all(1, body, "START id=m model=c\nTOOL 0 id=t name=f\nERROR provider_5xx status=0\n");
    /* A second message_start. */
    snprintf(body, sizeof(body), "%s%s", start, start);
    check_all(1, body, "START id=m model=c\nERROR provider_5xx status=0\n");
    /* A tool_use with no name. */
    snprintf(body, sizeof(body), "%s%s", start,
             EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                       "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\"}}"));
    check_all(1, body, "START id=m model=c\nERROR provider_5xx status=0\n");
    /* Wrong types everywhere never crash. */
    check_all(1,
              "data: {\"type\":\"message_start\",\"message\":[1]}\n\n"
              "data: {\"type\":\"message_delta\",\"delta\":7,\"usage\":\"x\"}\n\n"
              "data: {\"type\":\"content_block_start\",\"index\":\"0\",\"content_block\":{}}\n\n",
              "START id=- model=-\nERROR provider_5xx status=0\n");
    check_all(1, "data: [1,2]\n\n", "ERROR provider_5xx status=0\n");
    /* A tool_use block never closed before message_delta: the call ends
     * before the usage, never around it (found by tests/fuzz/fuzz_drivers). */
    snprintf(body, sizeof(body), "%s%s%s%s", start,
             EV("content_block_start", "{\"type\":\"content_block_start\",\"index\":0,"
                                       "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\","
                                       "\"name\":\"f\",\"input\":{}}}"),
             EV("message_delta", "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
                                 "\"tool_use\"},\"usage\":{\"output_tokens\":7}}"),
             EV("message_stop", "{\"type\":\"message_stop\"}"));
    check_all(1, body,
              "START id=m model=c\nTOOL 0 id=t name=f\nARGS 0 {}\nTOOL_END 0\n"
              "USAGE in=0 cr=0 cw5=0 cw1h=0 out=7 rs=0\nDONE tool_use\n");
    /* Absurd counts: each brought into [0, CANON_MAX_TOKENS] before the
     * tiers are added (found by tests/fuzz/fuzz_drivers: a signed overflow). */
    check_all(1,
              EV("message_start",
                 "{\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\","
                 "\"usage\":{\"input_tokens\":9223372036854775807,\"output_tokens\":1,"
                 "\"cache_creation_input_tokens\":3,\"cache_creation\":{"
                 "\"ephemeral_5m_input_tokens\":9223372036854775807,"
                 "\"ephemeral_1h_input_tokens\":9223372036854775807}}}}"),
              "START id=m model=c\n"
              "USAGE in=1000000000000 cr=0 cw5=1000000000000 cw1h=1000000000000 out=1 rs=0\n"
              "ERROR network status=0\n");
    /* An oversize event. */
    size_t big = DRV_MAX_EVENT + 64;
    char *huge = malloc(big + 32);
    CU_ASSERT_PTR_NOT_NULL_FATAL(huge);
    memcpy(huge, "data: \"", 7);
    memset(huge + 7, 'a', big);
    memcpy(huge + 7 + big, "\"\n\n", 4);
    char *t = canon_record_run(&drv_anthropic, 1, huge, strlen(huge), CANON_SPLIT_RANDOM, 3, 0);
    CU_ASSERT_STRING_EQUAL(t, "ERROR provider_5xx status=0\n");
    free(t);
    free(huge);
    /* Whole bodies: not a message, an error body, wrong content. */
    check_all(0, "[]", "ERROR provider_5xx status=0\n");
    check_all(0, "{\"type\":\"message\",\"content\":\"hi\"}", "ERROR provider_5xx status=0\n");
    check_all(0, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"O\"}}",
              "ERROR provider_5xx status=0\n");
    check_all(0, "{\"type\":\"message\",\"content\":[{\"type\":\"tool_use\",\"id\":\"x\"}]}",
              "START id=- model=-\nERROR provider_5xx status=0\n");
    check_all(0,
              "{\"type\":\"message\",\"content\":[{\"type\":\"tool_use\",\"id\":\"x\","
              "\"name\":\"f\",\"input\":[1]}]}",
              "START id=- model=-\nERROR provider_5xx status=0\n");
}

static void test_sink_stop(void)
{
    /* A consumer that stops: the parser stops emitting and says so. */
    struct drv_parser *p = drv_anthropic.parser_new(1);
    struct canon_record rec;
    canon_record_init(&rec);
    rec.stop_after = 3;
    struct canon_sink sink = {.emit = canon_record_emit, .arg = &rec};
    int rc = drv_anthropic.parse(p, STREAM_FULL, strlen(STREAM_FULL), &sink);
    CU_ASSERT(rc != 0);
    CU_ASSERT_EQUAL(rec.nevents, 3);
    canon_record_free(&rec);
    drv_anthropic.parser_free(p);
}

/* --------------------------------------------------------------- build */

static void test_build_full(void)
{
    provider_reset("https://api.anthropic.com", "{\"anthropic_beta\":\"fine-grained-tool-"
                                                "streaming-2025-05-14\"}");
    struct canon_req r;
    req_init(&r);
    r.stream = 1;
    struct canon_part sys[2] = {
        {.type = CANON_PART_TEXT, .text = "You are terse."},
        {.type = CANON_PART_TEXT, .text = "Long cached context.", .cache = CANON_CACHE_1H},
    };
    r.system = sys;
    r.nsystem = 2;
    struct canon_part u0[3] = {
        {.type = CANON_PART_TEXT, .text = "What is in these?", .cache = CANON_CACHE_5M},
        {.type = CANON_PART_IMAGE, .media_type = "image/png", .data = "iVBORw0KGgo="},
        {.type = CANON_PART_IMAGE, .url = "https://example.com/a.jpg", .detail = "auto"},
    };
    struct canon_part a1[4] = {
        {.type = CANON_PART_THINKING, .text = "Two tools.", .signature = "sig1"},
        {.type = CANON_PART_TEXT, .text = "Checking."},
        {.type = CANON_PART_TOOL_CALL,
         .id = "toolu_1",
         .name = "get_weather",
         .arguments = "{\"city\":\"Paris\"}"},
        {.type = CANON_PART_TOOL_CALL, .id = "toolu_2", .name = "get_time", .arguments = ""},
    };
    struct canon_part res_content[2] = {
        {.type = CANON_PART_TEXT, .text = "18C"},
        {.type = CANON_PART_IMAGE, .media_type = "image/jpeg", .data = "/9j/"},
    };
    struct canon_part res2_content[1] = {{.type = CANON_PART_TEXT, .text = "no clock"}};
    struct canon_part u2[3] = {
        {.type = CANON_PART_TEXT, .text = "Thanks."},
        {.type = CANON_PART_TOOL_RESULT, .id = "toolu_1", .content = res_content, .ncontent = 2},
        {.type = CANON_PART_TOOL_RESULT,
         .id = "toolu_2",
         .content = res2_content,
         .ncontent = 1,
         .is_error = 1,
         .cache = CANON_CACHE_5M},
    };
    struct canon_part a3[2] = {
        {.type = CANON_PART_THINKING, .text = "unsigned, from another provider"},
        {.type = CANON_PART_REDACTED_THINKING, .text = "opaque=="},
    };
    struct canon_message msgs[4] = {
        {.role = CANON_ROLE_USER, .parts = u0, .nparts = 3},
        {.role = CANON_ROLE_ASSISTANT, .parts = a1, .nparts = 4},
        {.role = CANON_ROLE_USER, .parts = u2, .nparts = 3},
        {.role = CANON_ROLE_ASSISTANT, .parts = a3, .nparts = 2},
    };
    r.messages = msgs;
    r.nmessages = 4;
    json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                                "\"string\"}},\"required\":[\"city\"]}",
                                0, NULL);
    struct canon_tool tools[2] = {
        {.name = "get_weather", .description = "Weather", .parameters = schema, .strict = 1},
        {.name = "get_time", .strict = -1, .cache = CANON_CACHE_1H},
    };
    r.tools = tools;
    r.ntools = 2;
    r.tool_choice = CANON_TC_NAMED;
    r.tool_choice_name = "get_weather";
    r.parallel_tool_calls = 0;
    r.has_temperature = r.has_top_p = r.has_top_k = r.has_max_tokens = 1;
    r.temperature = 0.5;
    r.top_p = 0.9;
    r.top_k = 40;
    r.max_tokens = 1000;
    const char *stops[] = {"###", "END"};
    r.stop = stops;
    r.nstop = 2;
    r.user = "user-42";

    struct drv_request out;
    struct canon_err err;
    int rc;
    json_t *doc = build(&r, &out, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    CU_ASSERT_STRING_EQUAL(out.url, "https://api.anthropic.com/v1/messages");
    CU_ASSERT(out.stream);
    CU_ASSERT(has_header(&out, "x-api-key: sk-ant-test"));
    CU_ASSERT(has_header(&out, "anthropic-version: 2023-06-01"));
    CU_ASSERT(has_header(&out, "anthropic-beta: fine-grained-tool-streaming-2025-05-14"));
    CU_ASSERT(has_header(&out, "Content-Type: application/json"));
    CU_ASSERT(has_header(&out, "x-request-id: req_1"));

    CU_ASSERT_STRING_EQUAL(jstr(doc, "model"), "claude-sonnet-4-5");
    CU_ASSERT_EQUAL(json_integer_value(jget(doc, "max_tokens")), 1000);
    CU_ASSERT(json_is_true(jget(doc, "stream")));
    /* system */
    CU_ASSERT_EQUAL(json_array_size(jget(doc, "system")), 2);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "system.0.type"), "text");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "system.0.text"), "You are terse.");
    CU_ASSERT_PTR_NULL(jget(doc, "system.0.cache_control"));
    CU_ASSERT_STRING_EQUAL(jstr(doc, "system.1.cache_control.type"), "ephemeral");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "system.1.cache_control.ttl"), "1h");
    /* message 0: text (5m cache, no ttl), base64 image, url image */
    CU_ASSERT_EQUAL(json_array_size(jget(doc, "messages")), 4);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.role"), "user");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.content.0.cache_control.type"), "ephemeral");
    CU_ASSERT_PTR_NULL(jget(doc, "messages.0.content.0.cache_control.ttl"));
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.content.1.type"), "image");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.content.1.source.type"), "base64");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.content.1.source.media_type"), "image/png");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.content.1.source.data"), "iVBORw0KGgo=");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.content.2.source.type"), "url");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.0.content.2.source.url"),
                           "https://example.com/a.jpg");
    /* message 1: thinking with signature, text, two tool_use with objects */
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.role"), "assistant");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.0.type"), "thinking");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.0.thinking"), "Two tools.");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.0.signature"), "sig1");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.1.text"), "Checking.");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.2.type"), "tool_use");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.2.id"), "toolu_1");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.2.name"), "get_weather");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.1.content.2.input.city"), "Paris");
    CU_ASSERT(json_is_object(jget(doc, "messages.1.content.3.input")));
    CU_ASSERT_EQUAL(json_object_size(jget(doc, "messages.1.content.3.input")), 0);
    /* message 2: tool results first, then the text */
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.0.type"), "tool_result");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.0.tool_use_id"), "toolu_1");
    CU_ASSERT_PTR_NULL(jget(doc, "messages.2.content.0.is_error"));
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.0.content.0.text"), "18C");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.0.content.1.type"), "image");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.0.content.1.source.media_type"),
                           "image/jpeg");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.1.tool_use_id"), "toolu_2");
    CU_ASSERT(json_is_true(jget(doc, "messages.2.content.1.is_error")));
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.1.cache_control.type"), "ephemeral");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.2.type"), "text");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.2.content.2.text"), "Thanks.");
    /* message 3: the unsigned thinking is left out, redacted kept */
    CU_ASSERT_EQUAL(json_array_size(jget(doc, "messages.3.content")), 1);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.3.content.0.type"), "redacted_thinking");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "messages.3.content.0.data"), "opaque==");
    /* tools */
    CU_ASSERT_STRING_EQUAL(jstr(doc, "tools.0.name"), "get_weather");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "tools.0.description"), "Weather");
    CU_ASSERT(json_equal(jget(doc, "tools.0.input_schema"), schema));
    CU_ASSERT(json_is_true(jget(doc, "tools.0.strict")));
    CU_ASSERT_PTR_NULL(jget(doc, "tools.0.cache_control"));
    CU_ASSERT_STRING_EQUAL(jstr(doc, "tools.1.input_schema.type"), "object");
    CU_ASSERT_PTR_NULL(jget(doc, "tools.1.strict"));
    CU_ASSERT_STRING_EQUAL(jstr(doc, "tools.1.cache_control.ttl"), "1h");
    /* tool_choice */
    CU_ASSERT_STRING_EQUAL(jstr(doc, "tool_choice.type"), "tool");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "tool_choice.name"), "get_weather");
    CU_ASSERT(json_is_true(jget(doc, "tool_choice.disable_parallel_tool_use")));
    /* sampling */
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(jget(doc, "temperature")), 0.5, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(jget(doc, "top_p")), 0.9, 1e-9);
    CU_ASSERT_EQUAL(json_integer_value(jget(doc, "top_k")), 40);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "stop_sequences.0"), "###");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "stop_sequences.1"), "END");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "metadata.user_id"), "user-42");
    CU_ASSERT_PTR_NULL(jget(doc, "thinking"));
    json_decref(doc);
    json_decref(schema);
    drv_request_free(&out);
}

static void test_build_choices(void)
{
    provider_reset("http://127.0.0.1:9/v1/", NULL);
    struct canon_part up[1] = {{.type = CANON_PART_TEXT, .text = "hi"}};
    struct canon_message m[1] = {{.role = CANON_ROLE_USER, .parts = up, .nparts = 1}};
    struct canon_tool tools[1] = {{.name = "f", .strict = -1}};
    static const struct {
        enum canon_tool_choice tc;
        int parallel;
        const char *type;
        int disable;
    } cases[] = {
        {CANON_TC_UNSET, -1, NULL, 0},  {CANON_TC_UNSET, 0, "auto", 1},
        {CANON_TC_AUTO, -1, "auto", 0}, {CANON_TC_REQUIRED, 0, "any", 1},
        {CANON_TC_NONE, 0, "none", 0},  {CANON_TC_AUTO, 1, "auto", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct canon_req r;
        req_init(&r);
        r.messages = m;
        r.nmessages = 1;
        r.tools = tools;
        r.ntools = 1;
        r.tool_choice = cases[i].tc;
        r.parallel_tool_calls = cases[i].parallel;
        struct drv_request out;
        struct canon_err err;
        int rc;
        json_t *doc = build(&r, &out, &err, &rc);
        CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
        /* base_url ending in /v1/: not doubled */
        CU_ASSERT_STRING_EQUAL(out.url, "http://127.0.0.1:9/v1/messages");
        CU_ASSERT_PTR_NULL(jget(doc, "stream"));
        CU_ASSERT_EQUAL(json_integer_value(jget(doc, "max_tokens")), 4096);
        if (cases[i].type) {
            CU_ASSERT_STRING_EQUAL(jstr(doc, "tool_choice.type"), cases[i].type);
        } else {
            CU_ASSERT_PTR_NULL(jget(doc, "tool_choice"));
        }
        CU_ASSERT_EQUAL(json_is_true(jget(doc, "tool_choice.disable_parallel_tool_use")),
                        cases[i].disable);
        json_decref(doc);
        drv_request_free(&out);
    }
    /* Without tools: auto/none need not be said, a forced call is refused. */
    struct canon_req r;
    req_init(&r);
    r.messages = m;
    r.nmessages = 1;
    r.tool_choice = CANON_TC_NONE;
    struct drv_request out;
    struct canon_err err;
    int rc;
    json_t *doc = build(&r, &out, &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_OK);
    CU_ASSERT_PTR_NULL(jget(doc, "tool_choice"));
    CU_ASSERT_PTR_NULL(jget(doc, "tools"));
    json_decref(doc);
    drv_request_free(&out);
    r.tool_choice = CANON_TC_REQUIRED;
    build(&r, &out, &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.param, "tool_choice");
    drv_request_free(&out);
}

static void test_build_thinking_and_max_tokens(void)
{
    struct canon_part up[1] = {{.type = CANON_PART_TEXT, .text = "hi"}};
    struct canon_message m[1] = {{.role = CANON_ROLE_USER, .parts = up, .nparts = 1}};
    static const struct {
        const char *options;
        const char *effort;
        long long budget, max; /* max 0: unset */
        int off;
        long long want_max, want_budget; /* want_budget 0: no thinking */
    } cases[] = {
        {NULL, NULL, 0, 0, 0, 4096, 0},
        {"{\"default_max_tokens\":1000}", NULL, 0, 0, 0, 1000, 0},
        {NULL, "minimal", 0, 0, 0, 4096, 2048},
        {NULL, "low", 0, 0, 0, 4096, 2048},
        {NULL, "medium", 0, 0, 0, 8192 + 4096, 8192},
        {NULL, "high", 0, 0, 0, 24576 + 4096, 24576},
        {NULL, "high", 0, 8000, 0, 8000, 7999},
        {NULL, NULL, 5000, 0, 0, 5000 + 4096, 5000},
        {NULL, NULL, 5000, 6000, 0, 6000, 5000},
        {NULL, "high", 0, 0, 1, 4096, 0},
        {"{\"anthropic_beta\":\"interleaved-thinking-2025-05-14\"}", NULL, 5000, 2000, 0, 2000,
         5000},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        provider_reset("https://api.anthropic.com/", cases[i].options);
        struct canon_req r;
        req_init(&r);
        r.messages = m;
        r.nmessages = 1;
        r.reasoning_effort = cases[i].effort;
        r.reasoning_budget = cases[i].budget;
        r.reasoning_off = cases[i].off;
        r.has_max_tokens = cases[i].max > 0;
        r.max_tokens = cases[i].max;
        struct drv_request out;
        struct canon_err err;
        int rc;
        json_t *doc = build(&r, &out, &err, &rc);
        CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
        CU_ASSERT_STRING_EQUAL(out.url, "https://api.anthropic.com/v1/messages");
        CU_ASSERT_EQUAL(json_integer_value(jget(doc, "max_tokens")), cases[i].want_max);
        if (cases[i].want_budget) {
            CU_ASSERT_STRING_EQUAL(jstr(doc, "thinking.type"), "enabled");
            CU_ASSERT_EQUAL(json_integer_value(jget(doc, "thinking.budget_tokens")),
                            cases[i].want_budget);
        } else {
            CU_ASSERT_PTR_NULL(jget(doc, "thinking"));
        }
        json_decref(doc);
        drv_request_free(&out);
    }
}

/* Names as a facade other than OpenAI chat would set them. */
static const char *const client_names[CANON_F_COUNT] = {
    [CANON_F_MESSAGES] = "input",
    [CANON_F_SYSTEM] = "instructions",
    [CANON_F_TEMPERATURE] = "x_temperature",
    [CANON_F_SEED] = "x_seed",
    [CANON_F_REASONING] = "reasoning.effort",
};

static void test_refusals(void)
{
    provider_reset("https://api.anthropic.com", NULL);
    struct canon_part up[1] = {{.type = CANON_PART_TEXT, .text = "hi"}};
    struct canon_part low_img[1] = {
        {.type = CANON_PART_IMAGE, .url = "https://x/y.png", .detail = "low"}};
    struct canon_part bad_args[1] = {
        {.type = CANON_PART_TOOL_CALL, .id = "c", .name = "f", .arguments = "[1]"}};
    struct canon_message m[3] = {
        {.role = CANON_ROLE_USER, .parts = up, .nparts = 1},
        {.role = CANON_ROLE_SYSTEM, .parts = up, .nparts = 1},
        {.role = CANON_ROLE_USER, .parts = up, .nparts = 1},
    };
    for (int c = 0; c < 14; c++) {
        struct canon_req r;
        req_init(&r);
        r.messages = m;
        r.nmessages = 1;
        const char *want = NULL;
        switch (c) {
        case 0:
            r.has_seed = 1;
            want = "seed";
            break;
        case 1:
            r.has_presence_penalty = 1;
            want = "presence_penalty";
            break;
        case 2:
            r.has_frequency_penalty = 1;
            want = "frequency_penalty";
            break;
        case 3:
            r.format = CANON_FMT_JSON_OBJECT;
            want = "response_format";
            break;
        case 4: /* structured output needs a schema; json_object has none */
            r.format = CANON_FMT_JSON_OBJECT;
            r.format_schema = NULL;
            want = "response_format";
            break;
        case 5:
            r.nmessages = 3;
            want = "messages";
            break;
        case 6:
            r.has_temperature = 1;
            r.temperature = 1.5;
            want = "temperature";
            break;
        case 7:
            r.has_temperature = 1;
            r.temperature = 1.5;
            r.field_names = client_names;
            want = "x_temperature";
            break;
        case 8:
            r.has_seed = 1;
            r.field_names = client_names;
            want = "x_seed";
            break;
        case 9:
            m[2].parts = low_img;
            r.nmessages = 3;
            r.messages = m + 2;
            r.nmessages = 1;
            want = "messages";
            break;
        case 10:
            r.reasoning_budget = 500;
            r.field_names = client_names;
            want = "reasoning.effort";
            break;
        case 11:
            r.reasoning_budget = 5000;
            r.has_max_tokens = 1;
            r.max_tokens = 3000;
            want = "reasoning_effort";
            break;
        case 13:
            r.reasoning_effort = "low";
            r.has_max_tokens = 1;
            r.max_tokens = 1000;
            want = "reasoning_effort";
            break;
        case 12: {
            static struct canon_message am[1];
            am[0].role = CANON_ROLE_ASSISTANT;
            am[0].parts = bad_args;
            am[0].nparts = 1;
            r.messages = am;
            r.field_names = client_names;
            want = "input";
            break;
        }
        }
        struct drv_request out;
        struct canon_err err;
        int rc;
        json_t *doc = build(&r, &out, &err, &rc);
        CU_ASSERT_EQUAL(rc, GW_EINVAL);
        CU_ASSERT_PTR_NULL(doc);
        CU_ASSERT_EQUAL(err.status, 400);
        CU_ASSERT_STRING_EQUAL(err.param, want);
        if (strcmp(err.param, want) != 0)
            fprintf(stderr, "\ncase %d: param '%s' (%s)\n", c, err.param, err.message);
        CU_ASSERT(strlen(err.message) > 0);
        json_decref(doc);
        drv_request_free(&out);
        m[2].parts = up;
    }
    /* temperature 1 is allowed, JSON text format is the default anyway */
    struct canon_req r;
    req_init(&r);
    r.messages = m;
    r.nmessages = 1;
    r.has_temperature = 1;
    r.temperature = 1.0;
    r.format = CANON_FMT_TEXT;
    struct drv_request out;
    struct canon_err err;
    int rc;
    json_t *doc = build(&r, &out, &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_OK);
    CU_ASSERT_PTR_NULL(jget(doc, "response_format"));
    CU_ASSERT_PTR_NULL(jget(doc, "output_config"));
    json_decref(doc);
    drv_request_free(&out);
    /* json_schema: native structured output, output_config.format */
    json_t *schema = json_pack("{s:s,s:{s:{s:s}},s:[s]}", "type", "object", "properties", "a",
                               "type", "string", "required", "a");
    r.format = CANON_FMT_JSON_SCHEMA;
    r.format_name = "thing";
    r.format_schema = schema;
    doc = build(&r, &out, &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_OK);
    json_t *f = json_object_get(json_object_get(doc, "output_config"), "format");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(f, "type")), "json_schema");
    CU_ASSERT(json_equal(json_object_get(f, "schema"), schema));
    json_decref(doc);
    json_decref(schema);
    drv_request_free(&out);
}

/* ------------------------------------------------------------- classify */

static void test_citations(void)
{
    check_all(1, STREAM_CITE, CITE_T);
    check_all(0, WHOLE_CITE, CITE_WHOLE_T);
}

static void test_classify(void)
{
    static const struct {
        int status;
        const char *body;
        enum canon_failure f;
        const char *msg;
    } cases[] = {
        {529,
         "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}"
         "}",
         CANON_FAIL_PROVIDER_5XX, "Overloaded"},
        {529, "<html>busy, the model is</html>", CANON_FAIL_PROVIDER_5XX, ""},
        {429,
         "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Number of "
         "request tokens has exceeded your per-minute rate limit\"}}",
         CANON_FAIL_RATE_LIMITED,
         "Number of request tokens has exceeded your per-minute rate limit"},
        {400,
         "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt "
         "is too long: 208310 tokens > 200000 maximum\"},\"request_id\":\"req_011\"}",
         CANON_FAIL_CONTEXT_OVERFLOW, "prompt is too long: 208310 tokens > 200000 maximum"},
        {400,
         "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
         "\"messages: roles must alternate\"}}",
         CANON_FAIL_BAD_REQUEST, "messages: roles must alternate"},
        {401,
         "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid "
         "x-api-key\"}}",
         CANON_FAIL_AUTH_FAILED, "invalid x-api-key"},
        {403, "{\"type\":\"error\",\"error\":{\"type\":\"permission_error\",\"message\":\"no\"}}",
         CANON_FAIL_AUTH_FAILED, "no"},
        {404,
         "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"model: "
         "claude-9\"}}",
         CANON_FAIL_MODEL_UNAVAILABLE, "model: claude-9"},
        {413,
         "{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\",\"message\":\"Request "
         "exceeds the maximum allowed number of bytes.\"}}",
         CANON_FAIL_PAYLOAD_TOO_LARGE, "Request exceeds the maximum allowed number of bytes."},
        {402, "{\"type\":\"error\",\"error\":{\"type\":\"billing_error\",\"message\":\"pay\"}}",
         CANON_FAIL_QUOTA_EXHAUSTED, "pay"},
        {500, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal\"}}",
         CANON_FAIL_PROVIDER_5XX, "Internal"},
        {504, "{\"type\":\"error\",\"error\":{\"type\":\"timeout_error\",\"message\":\"slow\"}}",
         CANON_FAIL_TIMEOUT, "slow"},
        {502, "not json", CANON_FAIL_PROVIDER_5XX, ""},
        {503, "", CANON_FAIL_PROVIDER_5XX, ""},
        {418, "{\"type\":\"error\",\"error\":{\"message\":\"teapot\"}}", CANON_FAIL_BAD_REQUEST,
         "teapot"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        enum canon_failure f = CANON_FAIL_COUNT;
        char msg[128];
        drv_anthropic.classify(cases[i].status, cases[i].body, strlen(cases[i].body), &f, msg,
                               sizeof(msg));
        CU_ASSERT_EQUAL(f, cases[i].f);
        CU_ASSERT_STRING_EQUAL(msg, cases[i].msg);
        if (f != cases[i].f)
            fprintf(stderr, "\ncase %zu: %s\n", i, canon_failure_name(f));
    }
    CU_ASSERT_PTR_NOT_NULL(dp_driver_find("anthropic"));
    CU_ASSERT(drv_anthropic.info->caps & DRV_CAP_JSON_MODE); /* json_schema: output_config */
    CU_ASSERT(drv_anthropic.info->caps & DRV_CAP_REASONING);
}

static int clean(void)
{
    json_decref(prov.options);
    prov.options = NULL;
    return 0;
}
#define UNIT_SUITE_CLEAN clean

static CU_TestInfo tests[] = {
    {"stream: thinking, text, two tool calls, cache usage", test_stream_full},
    {"stream: CRLF, cumulative message_delta usage", test_stream_text},
    {"whole message body", test_whole},
    {"whole body stop reasons", test_whole_text_and_stops},
    {"error events", test_stream_error_event},
    {"truncated streams and bodies", test_truncated},
    {"malformed and oversize input", test_malformed},
    {"a sink that stops", test_sink_stop},
    {"build: full request", test_build_full},
    {"build: tool_choice and base_url", test_build_choices},
    {"build: thinking and max_tokens", test_build_thinking_and_max_tokens},
    {"build: refusals name the client's field", test_refusals},
    {"citations follow the text they cite", test_citations},
    {"classify", test_classify},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
