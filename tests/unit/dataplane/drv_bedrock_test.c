/* Tests for dataplane/drivers/bedrock.c: ConverseStream event-stream bodies
 * parse to the same transcript whole, byte by byte and in random splits;
 * corruption, exceptions and truncation end in the right ERROR; a whole
 * Converse body gives the same events; build_chat writes the Converse JSON,
 * refuses what Converse cannot honor, and signs exactly the bytes it sends. */
#include <CUnit/CUnit.h>
#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "canon_record.h"
#include "dp_driver.h"
#include "dp_snapshot.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_eventstream.h"
#include "gw_json.h"
#include "gw_sigv4.h"
#include "json_path.h"

static void must(int rc)
{
    if (rc != GW_OK)
        abort();
}

/* ------------------------------------------------------------ fixtures */

/* One ConverseStream event as Bedrock frames it: string headers
 * :event-type, :content-type, :message-type, and the JSON payload (with
 * Bedrock's "p" padding member, which the parser must ignore). */
static void ev(struct gw_buf *out, const char *type, const char *json)
{
    struct gw_es_header h[] = {
        GW_ES_HSTR(":event-type", type),
        GW_ES_HSTR(":content-type", "application/json"),
        GW_ES_HSTR(":message-type", "event"),
    };
    must(gw_es_encode(out, h, 3, json, strlen(json)));
}

static void exc(struct gw_buf *out, const char *type, const char *json)
{
    struct gw_es_header h[] = {
        GW_ES_HSTR(":exception-type", type),
        GW_ES_HSTR(":content-type", "application/json"),
        GW_ES_HSTR(":message-type", "exception"),
    };
    must(gw_es_encode(out, h, 3, json, strlen(json)));
}

/* The full answer: reasoning with a signature, text, two tool calls with
 * their input split across deltas, messageStop, metadata with cache usage.
 * Offsets of two messages are kept for the corruption test. */
static size_t off_text2; /* start of the second text delta */

static void full_stream(struct gw_buf *b, const char *metadata)
{
    ev(b, "messageStart", "{\"p\":\"abcdefgh\",\"role\":\"assistant\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"text\":\"Let me \"}},"
       "\"p\":\"abc\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"text\":\"think.\"}},\"p\":"
       "\"a\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":{\"signature\":\"c2lnLTEyMw==\"}},"
       "\"p\":\"abcd\"}");
    ev(b, "contentBlockStop", "{\"contentBlockIndex\":0,\"p\":\"abcdefghij\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":1,\"delta\":{\"text\":\"Hello\"},\"p\":\"abcdefghijklm\"}");
    off_text2 = b->len;
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":1,\"delta\":{\"text\":\", w\\u00f6rld\"},\"p\":\"ab\"}");
    ev(b, "contentBlockStop", "{\"contentBlockIndex\":1,\"p\":\"abcdefghij\"}");
    ev(b, "contentBlockStart",
       "{\"contentBlockIndex\":2,\"start\":{\"toolUse\":{\"toolUseId\":\"tooluse_A1\","
       "\"name\":\"get_weather\"}},\"p\":\"abc\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":2,\"delta\":{\"toolUse\":{\"input\":\"{\\\"city\\\":\"}},\"p\":"
       "\"ab\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":2,\"delta\":{\"toolUse\":{\"input\":\" "
       "\\\"Paris\\\"}\"}},\"p\":\"a\"}");
    ev(b, "contentBlockStop", "{\"contentBlockIndex\":2,\"p\":\"abcdefghij\"}");
    ev(b, "contentBlockStart",
       "{\"contentBlockIndex\":3,\"start\":{\"toolUse\":{\"toolUseId\":\"tooluse_B2\","
       "\"name\":\"get_time\"}},\"p\":\"abc\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":3,\"delta\":{\"toolUse\":{\"input\":\"{\\\"tz\\\"\"}},\"p\":"
       "\"ab\"}");
    ev(b, "contentBlockDelta",
       "{\"contentBlockIndex\":3,\"delta\":{\"toolUse\":{\"input\":\":\\\"CET\\\"}\"}},\"p\":"
       "\"a\"}");
    ev(b, "contentBlockStop", "{\"contentBlockIndex\":3,\"p\":\"abcdefghij\"}");
    ev(b, "messageStop", "{\"p\":\"abcdef\",\"stopReason\":\"tool_use\"}");
    if (metadata)
        ev(b, "metadata", metadata);
}

#define METADATA                                                                                   \
    "{\"metrics\":{\"latencyMs\":812},\"p\":\"abcdefghijklmnop\",\"usage\":{\"inputTokens\":12,"   \
    "\"outputTokens\":57,\"totalTokens\":2117,\"cacheReadInputTokens\":1536,"                      \
    "\"cacheWriteInputTokens\":512}}"

static const char *const FULL_TRANSCRIPT = "START id=- model=-\n"
                                           "REASONING \"Let me think.\"\n"
                                           "REASONING \"\" sig=c2lnLTEyMw==\n"
                                           "TEXT \"Hello\"\", w\xc3\xb6rld\"\n"
                                           "TOOL 0 id=tooluse_A1 name=get_weather\n"
                                           "ARGS 0 {\"city\": \"Paris\"}\n"
                                           "TOOL_END 0\n"
                                           "TOOL 1 id=tooluse_B2 name=get_time\n"
                                           "ARGS 1 {\"tz\":\"CET\"}\n"
                                           "TOOL_END 1\n"
                                           "USAGE in=12 cr=1536 cw5=512 cw1h=0 out=57 rs=0\n"
                                           "DONE tool_use\n";

/* Runs body whole, byte by byte and in random splits and checks each
 * against want. */
static void check_all(const char *body, size_t len, int stream, const char *want)
{
    canon_record_check(&drv_bedrock, stream, body, len, want);
}

/* ------------------------------------------------------------ stream tests */

static void test_stream_full(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    full_stream(&b, METADATA);
    check_all(b.data, b.len, 1, FULL_TRANSCRIPT);
    gw_buf_free(&b);
}

static void test_stream_cache_ttl_split(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    ev(&b, "contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"ok\"}}");
    ev(&b, "contentBlockStop", "{\"contentBlockIndex\":0}");
    ev(&b, "messageStop", "{\"stopReason\":\"max_tokens\"}");
    ev(&b, "metadata",
       "{\"usage\":{\"inputTokens\":3,\"outputTokens\":1,\"totalTokens\":1004,"
       "\"cacheReadInputTokens\":0,\"cacheWriteInputTokens\":1000,\"cacheDetails\":["
       "{\"ttl\":\"1h\",\"inputTokens\":600},{\"ttl\":\"5m\",\"inputTokens\":400}]}}");
    check_all(b.data, b.len, 1,
              "START id=- model=-\nTEXT \"ok\"\n"
              "USAGE in=3 cr=0 cw5=400 cw1h=600 out=1 rs=0\nDONE max_tokens\n");
    gw_buf_free(&b);
}

static void test_stream_stop_reasons(void)
{
    static const struct {
        const char *reason, *want;
    } cases[] = {
        {"end_turn", "DONE end\n"},
        {"stop_sequence", "DONE stop_sequence\n"},
        {"max_tokens", "DONE max_tokens\n"},
        {"model_context_window_exceeded", "DONE max_tokens\n"},
        {"content_filtered", "DONE content_filter\n"},
        {"guardrail_intervened", "DONE content_filter\n"},
        {"malformed_tool_use", "ERROR provider_5xx status=0\n"},
        {"malformed_model_output", "ERROR provider_5xx status=0\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gw_buf b;
        gw_buf_init(&b, 0);
        char stop[128];
        snprintf(stop, sizeof(stop), "{\"stopReason\":\"%s\"}", cases[i].reason);
        ev(&b, "messageStart", "{\"role\":\"assistant\"}");
        ev(&b, "contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"x\"}}");
        ev(&b, "messageStop", stop);
        ev(&b, "metadata", "{\"usage\":{\"inputTokens\":1,\"outputTokens\":1,\"totalTokens\":2}}");
        char want[256];
        int err = cases[i].want[0] == 'E';
        snprintf(want, sizeof(want), "START id=- model=-\nTEXT \"x\"\n%s%s",
                 err ? "" : "USAGE in=1 cr=0 cw5=0 cw1h=0 out=1 rs=0\n", cases[i].want);
        check_all(b.data, b.len, 1, want);
        gw_buf_free(&b);
    }
}

/* A flipped byte in the second text delta: the events before it, then an
 * ERROR; never a crash, never the rest of the stream. */
static void test_stream_corrupt_crc(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    full_stream(&b, METADATA);
    b.data[off_text2 + 40] ^= 0x20; /* inside the headers/payload: message CRC fails */
    check_all(b.data, b.len, 1,
              "START id=- model=-\n"
              "REASONING \"Let me think.\"\n"
              "REASONING \"\" sig=c2lnLTEyMw==\n"
              "TEXT \"Hello\"\n"
              "ERROR provider_5xx status=0\n");
    /* A corrupt prelude is caught as soon as its 12 bytes are in. */
    gw_buf_reset(&b);
    full_stream(&b, METADATA);
    b.data[off_text2 + 2] ^= 0x01;
    check_all(b.data, b.len, 1,
              "START id=- model=-\n"
              "REASONING \"Let me think.\"\n"
              "REASONING \"\" sig=c2lnLTEyMw==\n"
              "TEXT \"Hello\"\n"
              "ERROR provider_5xx status=0\n");
    gw_buf_free(&b);
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A frame that announces more than DRV_MAX_EVENT: refused at its prelude. */
static void test_stream_oversize(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    unsigned char pre[12];
    put32(pre, DRV_MAX_EVENT + 1024);
    put32(pre + 4, 0);
    put32(pre + 8, gw_es_crc32(0, pre, 8));
    must(gw_buf_append(&b, pre, 12));
    must(gw_buf_append(&b, "xxxxxxxxxxxxxxxx", 16));
    check_all(b.data, b.len, 1, "START id=- model=-\nERROR provider_5xx status=0\n");
    gw_buf_free(&b);
}

static void test_stream_exceptions(void)
{
    static const struct {
        const char *type, *payload, *cls;
    } cases[] = {
        {"throttlingException", "{\"message\":\"Too many requests, please wait.\"}",
         "rate_limited"},
        {"modelStreamErrorException",
         "{\"message\":\"The model stream failed\",\"originalStatusCode\":500}", "provider_5xx"},
        {"internalServerException", "{\"message\":\"Internal error\"}", "provider_5xx"},
        {"serviceUnavailableException", "{\"message\":\"Service unavailable\"}", "provider_5xx"},
        {"validationException", "{\"message\":\"Malformed input request\"}", "bad_request"},
        {"validationException", "{\"message\":\"Input is too long for requested model.\"}",
         "context_overflow"},
        {"modelTimeoutException", "{\"Message\":\"timed out\"}", "timeout"},
        {"somethingNewException", "{}", "provider_5xx"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gw_buf b;
        gw_buf_init(&b, 0);
        ev(&b, "messageStart", "{\"role\":\"assistant\"}");
        ev(&b, "contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"Hi\"}}");
        exc(&b, cases[i].type, cases[i].payload);
        ev(&b, "contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"never\"}}");
        char want[256];
        snprintf(want, sizeof(want), "START id=- model=-\nTEXT \"Hi\"\nERROR %s status=0\n",
                 cases[i].cls);
        check_all(b.data, b.len, 1, want);
        gw_buf_free(&b);
    }
    /* An exception before anything else: only the ERROR. */
    struct gw_buf b;
    gw_buf_init(&b, 0);
    exc(&b, "throttlingException", "{\"message\":\"slow down\"}");
    check_all(b.data, b.len, 1, "ERROR rate_limited status=0\n");
    gw_buf_free(&b);
}

/* An event-stream level error message (:message-type error). */
static void test_stream_error_message(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    struct gw_es_header h[] = {
        GW_ES_HSTR(":message-type", "error"),
        GW_ES_HSTR(":error-code", "InternalFailure"),
        GW_ES_HSTR(":error-message", "boom"),
    };
    must(gw_es_encode(&b, h, 3, "", 0));
    check_all(b.data, b.len, 1, "START id=- model=-\nERROR provider_5xx status=0\n");
    gw_buf_free(&b);
}

static void test_stream_truncated(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    /* messageStop but no metadata: complete, without usage. */
    full_stream(&b, NULL);
    check_all(b.data, b.len, 1,
              "START id=- model=-\n"
              "REASONING \"Let me think.\"\n"
              "REASONING \"\" sig=c2lnLTEyMw==\n"
              "TEXT \"Hello\"\", w\xc3\xb6rld\"\n"
              "TOOL 0 id=tooluse_A1 name=get_weather\n"
              "ARGS 0 {\"city\": \"Paris\"}\n"
              "TOOL_END 0\n"
              "TOOL 1 id=tooluse_B2 name=get_time\n"
              "ARGS 1 {\"tz\":\"CET\"}\n"
              "TOOL_END 1\n"
              "DONE tool_use\n");
    /* Cut in the middle of a message, before messageStop: a network error. */
    gw_buf_reset(&b);
    full_stream(&b, METADATA);
    check_all(b.data, off_text2 + 20, 1,
              "START id=- model=-\n"
              "REASONING \"Let me think.\"\n"
              "REASONING \"\" sig=c2lnLTEyMw==\n"
              "TEXT \"Hello\"\n"
              "ERROR network status=0\n");
    /* Nothing at all. */
    check_all("", 0, 1, "ERROR network status=0\n");
    /* A tool call open at the cut: closed before nothing else, then ERROR. */
    gw_buf_reset(&b);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    ev(&b, "contentBlockStart",
       "{\"contentBlockIndex\":0,\"start\":{\"toolUse\":{\"toolUseId\":\"t1\",\"name\":\"f\"}}}");
    ev(&b, "contentBlockDelta",
       "{\"contentBlockIndex\":0,\"delta\":{\"toolUse\":{\"input\":\"{\\\"a\\\":\"}}}");
    check_all(b.data, b.len, 1,
              "START id=- model=-\nTOOL 0 id=t1 name=f\nARGS 0 {\"a\":\nERROR network status=0\n");
    gw_buf_free(&b);
}

static void test_stream_malformed(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    ev(&b, "contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":");
    check_all(b.data, b.len, 1, "START id=- model=-\nERROR provider_5xx status=0\n");
    /* Tool input with no contentBlockStart for it. */
    gw_buf_reset(&b);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    ev(&b, "contentBlockDelta",
       "{\"contentBlockIndex\":4,\"delta\":{\"toolUse\":{\"input\":\"{}\"}}}");
    check_all(b.data, b.len, 1, "START id=- model=-\nERROR provider_5xx status=0\n");
    /* A tool block started again after it closed (interleaving). */
    gw_buf_reset(&b);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    ev(&b, "contentBlockStart",
       "{\"contentBlockIndex\":0,\"start\":{\"toolUse\":{\"toolUseId\":\"t1\",\"name\":\"f\"}}}");
    ev(&b, "contentBlockStop", "{\"contentBlockIndex\":0}");
    ev(&b, "contentBlockStart",
       "{\"contentBlockIndex\":1,\"start\":{\"toolUse\":{\"toolUseId\":\"t2\",\"name\":\"g\"}}}");
    ev(&b, "contentBlockDelta",
       "{\"contentBlockIndex\":0,\"delta\":{\"toolUse\":{\"input\":\"{}\"}}}");
    check_all(b.data, b.len, 1,
              "START id=- model=-\nTOOL 0 id=t1 name=f\nARGS 0 {}\nTOOL_END 0\n"
              "TOOL 1 id=t2 name=g\nERROR provider_5xx status=0\n");
    /* Garbage that is no event stream at all. */
    static const char junk[] = "{\"message\":\"not an event stream\"}";
    check_all(junk, sizeof(junk) - 1, 1, "ERROR provider_5xx status=0\n");
    gw_buf_free(&b);
}

/* A tool call with no input deltas gets "{}"; unknown events and blocks are
 * passed over. */
static void test_stream_tool_without_input(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    ev(&b, "messageStart", "{\"role\":\"assistant\"}");
    ev(&b, "contentBlockStart",
       "{\"contentBlockIndex\":0,\"start\":{\"toolUse\":{\"toolUseId\":\"t1\",\"name\":\"now\"}}}");
    ev(&b, "contentBlockStop", "{\"contentBlockIndex\":0}");
    ev(&b, "somethingNew", "{\"x\":1}");
    ev(&b, "contentBlockDelta",
       "{\"contentBlockIndex\":1,\"delta\":{\"reasoningContent\":{\"redactedContent\":\"AAAA\"}}}");
    ev(&b, "messageStop", "{\"stopReason\":\"tool_use\"}");
    ev(&b, "metadata", "{\"usage\":{\"inputTokens\":5,\"outputTokens\":2,\"totalTokens\":7}}");
    check_all(b.data, b.len, 1,
              "START id=- model=-\nTOOL 0 id=t1 name=now\nARGS 0 {}\nTOOL_END 0\n"
              "REDACTED 4 bytes\nUSAGE in=5 cr=0 cw5=0 cw1h=0 out=2 rs=0\nDONE tool_use\n");
    gw_buf_free(&b);
}

/* ------------------------------------------------------------ whole tests */

static const char WHOLE[] =
    "{\"metrics\":{\"latencyMs\":1234},\"output\":{\"message\":{\"role\":\"assistant\","
    "\"content\":[{\"reasoningContent\":{\"reasoningText\":{\"text\":\"Let me think.\","
    "\"signature\":\"c2lnLTEyMw==\"}}},{\"text\":\"Hello, w\\u00f6rld\"},"
    "{\"toolUse\":{\"toolUseId\":\"tooluse_A1\",\"name\":\"get_weather\",\"input\":{\"city\":"
    "\"Paris\"}}},{\"toolUse\":{\"toolUseId\":\"tooluse_B2\",\"name\":\"get_time\",\"input\":{}}}]}"
    "},"
    "\"stopReason\":\"tool_use\",\"usage\":{\"inputTokens\":12,\"outputTokens\":57,"
    "\"totalTokens\":2117,\"cacheReadInputTokens\":1536,\"cacheWriteInputTokens\":512}}";

static void test_whole(void)
{
    check_all(WHOLE, sizeof(WHOLE) - 1, 0,
              "START id=- model=-\n"
              "REASONING \"Let me think.\"\n"
              "REASONING \"\" sig=c2lnLTEyMw==\n"
              "TEXT \"Hello, w\xc3\xb6rld\"\n"
              "TOOL 0 id=tooluse_A1 name=get_weather\n"
              "ARGS 0 {\"city\":\"Paris\"}\n"
              "TOOL_END 0\n"
              "TOOL 1 id=tooluse_B2 name=get_time\n"
              "ARGS 1 {}\n"
              "TOOL_END 1\n"
              "USAGE in=12 cr=1536 cw5=512 cw1h=0 out=57 rs=0\n"
              "DONE tool_use\n");
}

static void test_whole_malformed(void)
{
    check_all("", 0, 0, "ERROR empty_output status=0\n");
    check_all("{\"output\":", 10, 0, "ERROR provider_5xx status=0\n");
    static const char noout[] = "{\"message\":\"something went wrong\"}";
    check_all(noout, sizeof(noout) - 1, 0, "ERROR provider_5xx status=0\n");
    static const char badtool[] =
        "{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":[{\"toolUse\":"
        "{\"toolUseId\":\"t\",\"name\":\"f\",\"input\":\"oops\"}}]}},\"stopReason\":\"tool_use\"}";
    check_all(badtool, sizeof(badtool) - 1, 0, "START id=- model=-\nERROR provider_5xx status=0\n");
    static const char malformed[] =
        "{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":[{\"text\":\"x\"}]}},"
        "\"stopReason\":\"malformed_model_output\"}";
    check_all(malformed, sizeof(malformed) - 1, 0,
              "START id=- model=-\nTEXT \"x\"\nERROR provider_5xx status=0\n");
}

/* ------------------------------------------------------------ build tests */

static struct dp_provider provider(const char *base, const char *cred, json_t *opts)
{
    struct dp_provider p = {.name = "bedrock",
                            .driver = "bedrock",
                            .drv = drv_bedrock.info,
                            .options = opts,
                            .base_url = base,
                            .credential = cred,
                            .enabled = 1};
    return p;
}

/* The value of header `name` in the request, or NULL (first match). */
static const char *header(const struct drv_request *rq, const char *name)
{
    size_t n = strlen(name);
    for (const struct curl_slist *l = rq->headers; l; l = l->next)
        if (strncasecmp(l->data, name, n) == 0 && l->data[n] == ':')
            return l->data + n + 1 + (l->data[n + 1] == ' ');
    return NULL;
}

static int count_header(const struct drv_request *rq, const char *name)
{
    int c = 0;
    size_t n = strlen(name);
    for (const struct curl_slist *l = rq->headers; l; l = l->next)
        c += strncasecmp(l->data, name, n) == 0 && l->data[n] == ':';
    return c;
}

/* Re-signs what the driver sent with the date it used and compares the
 * Authorization header: the signature covers exactly the bytes sent. */
static void check_signature(const struct drv_request *rq, const char *akid, const char *secret,
                            const char *token, const char *region)
{
    const char *date = header(rq, "X-Amz-Date");
    const char *host = header(rq, "Host");
    CU_ASSERT_FATAL(date != NULL && host != NULL);
    const char *path = strstr(rq->url, "://");
    CU_ASSERT_FATAL(path != NULL);
    path = strchr(path + 3, '/');
    CU_ASSERT_FATAL(path != NULL);
    struct gw_sigv4_params sp = {.access_key = akid,
                                 .secret_key = secret,
                                 .session_token = token,
                                 .region = region,
                                 .service = "bedrock",
                                 .amz_date = date};
    struct gw_sigv4_header hs[] = {{"host", host}, {"content-type", "application/json"}};
    struct gw_sigv4_result res;
    gw_sigv4_result_init(&res);
    CU_ASSERT_EQUAL_FATAL(gw_sigv4_sign(&sp, "POST", path, "", hs, 2, rq->body, rq->body_len, &res),
                          GW_OK);
    CU_ASSERT_PTR_NOT_NULL(header(rq, "Authorization"));
    if (header(rq, "Authorization"))
        CU_ASSERT_STRING_EQUAL(header(rq, "Authorization"), res.authorization.data);
    CU_ASSERT_EQUAL(count_header(rq, "Authorization"), 1);
    if (token) {
        CU_ASSERT_PTR_NOT_NULL(header(rq, "X-Amz-Security-Token"));
        if (header(rq, "X-Amz-Security-Token"))
            CU_ASSERT_STRING_EQUAL(header(rq, "X-Amz-Security-Token"), token);
    } else {
        CU_ASSERT_PTR_NULL(header(rq, "X-Amz-Security-Token"));
    }
    /* And it is not merely self-consistent: a changed body fails. */
    struct gw_sigv4_result res2;
    gw_sigv4_result_init(&res2);
    CU_ASSERT_EQUAL(gw_sigv4_sign(&sp, "POST", path, "", hs, 2, rq->body, rq->body_len - 1, &res2),
                    GW_OK);
    CU_ASSERT_STRING_NOT_EQUAL(res2.authorization.data, res.authorization.data);
    gw_sigv4_result_free(&res2);
    gw_sigv4_result_free(&res);
}

/* A canonical request with everything Converse can carry. The arrays live
 * in the caller's frame (the request only points at them). */
struct full_req {
    struct canon_req *r;
    struct canon_part sys[2];
    struct canon_part u1[2], a1[4], tr_content[2], u2[3], u3[1];
    struct canon_message msgs[4];
    struct canon_tool tools[2];
    const char *stop[2];
    json_t *schema0, *schema1;
};

static void full_req_init(struct full_req *f)
{
    memset(f, 0, sizeof(*f));
    f->r = canon_req_new(json_object());
    struct canon_req *r = f->r;
    r->model = "bedrock/anthropic.claude-sonnet-4-20250514-v1:0";
    r->stream = 1;
    f->sys[0] = (struct canon_part){
        .type = CANON_PART_TEXT, .text = "You are terse.", .cache = CANON_CACHE_5M};
    f->sys[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Answer in English."};
    r->system = f->sys;
    r->nsystem = 2;
    f->u1[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "What is in this image?"};
    f->u1[1] = (struct canon_part){.type = CANON_PART_IMAGE,
                                   .media_type = "image/png",
                                   .data = "iVBORw0KGgo=",
                                   .cache = CANON_CACHE_1H};
    f->a1[0] = (struct canon_part){
        .type = CANON_PART_THINKING, .text = "The user wants...", .signature = "c2ln"};
    f->a1[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Let me check."};
    f->a1[2] = (struct canon_part){.type = CANON_PART_TOOL_CALL,
                                   .id = "tooluse_1",
                                   .name = "get_weather",
                                   .arguments = "{\"city\":\"Paris\"}"};
    f->a1[3] = (struct canon_part){
        .type = CANON_PART_TOOL_CALL, .id = "tooluse_2", .name = "get_time", .arguments = ""};
    f->tr_content[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "18C, sunny"};
    f->tr_content[1] =
        (struct canon_part){.type = CANON_PART_IMAGE, .media_type = "image/jpeg", .data = "/9j/"};
    f->u2[0] = (struct canon_part){
        .type = CANON_PART_TOOL_RESULT, .id = "tooluse_1", .content = f->tr_content, .ncontent = 2};
    f->u2[1] = (struct canon_part){.type = CANON_PART_TOOL_RESULT,
                                   .id = "tooluse_2",
                                   .content = f->tr_content,
                                   .ncontent = 1,
                                   .is_error = 1};
    f->u2[2] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Thanks."};
    f->u3[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "And tomorrow?"};
    f->msgs[0] = (struct canon_message){CANON_ROLE_USER, f->u1, 2};
    f->msgs[1] = (struct canon_message){CANON_ROLE_ASSISTANT, f->a1, 4};
    f->msgs[2] = (struct canon_message){CANON_ROLE_USER, f->u2, 3};
    f->msgs[3] = (struct canon_message){CANON_ROLE_USER, f->u3, 1}; /* merged into the one before */
    r->messages = f->msgs;
    r->nmessages = 4;
    f->schema0 = json_pack("{s:s,s:{s:{s:s}},s:[s]}", "type", "object", "properties", "city",
                           "type", "string", "required", "city");
    f->schema1 = json_pack("{s:s,s:{}}", "type", "object", "properties");
    f->tools[0] = (struct canon_tool){.name = "get_weather",
                                      .description = "Weather for a city",
                                      .parameters = f->schema0,
                                      .strict = 1};
    f->tools[1] = (struct canon_tool){.name = "get_time",
                                      .description = "",
                                      .parameters = f->schema1,
                                      .strict = -1,
                                      .cache = CANON_CACHE_5M};
    r->tools = f->tools;
    r->ntools = 2;
    r->tool_choice = CANON_TC_NAMED;
    r->tool_choice_name = "get_weather";
    r->parallel_tool_calls = 1;
    r->has_temperature = 1;
    r->temperature = 0.5;
    r->has_top_p = 1;
    r->top_p = 0.9;
    r->has_top_k = 1;
    r->top_k = 40;
    r->has_max_tokens = 1;
    r->max_tokens = 30000;
    f->stop[0] = "END";
    f->stop[1] = "\n\nHuman:";
    r->stop = f->stop;
    r->nstop = 2;
    r->format = CANON_FMT_TEXT;
    r->reasoning_effort = "medium";
    r->user = "user-42@example.com";
}

static void full_req_free(struct full_req *f)
{
    json_decref(f->schema0);
    json_decref(f->schema1);
    canon_req_free(f->r);
}

/* A json_schema response format: Converse's outputConfig.textFormat, the
 * schema as a JSON string. */
static void test_build_output_config(void)
{
    struct full_req f;
    full_req_init(&f);
    f.r->format = CANON_FMT_JSON_SCHEMA;
    f.r->format_name = "weather";
    f.r->format_schema = f.schema0;
    json_t *opts = json_pack("{s:s}", "auth", "bearer");
    struct dp_provider pv =
        provider("https://bedrock-runtime.us-west-2.amazonaws.com", "key", opts);
    struct drv_target t = {.provider = &pv, .model = "m", .request_id = "req-1"};
    struct drv_request rq = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(drv_bedrock.build_chat(&t, f.r, &rq, &err), GW_OK);
    json_t *doc = json_loadb(rq.body, rq.body_len, 0, NULL);
    json_t *tf = json_object_get(json_object_get(doc, "outputConfig"), "textFormat");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(tf, "type")), "json_schema");
    json_t *js = json_object_get(json_object_get(tf, "structure"), "jsonSchema");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(js, "name")), "weather");
    json_t *sch = json_loads(json_string_value(json_object_get(js, "schema")), 0, NULL);
    CU_ASSERT(json_equal(sch, f.schema0));
    json_decref(sch);
    json_decref(doc);
    json_decref(opts);
    drv_request_free(&rq);
    full_req_free(&f);
}

static void test_build_full(void)
{
    struct full_req f;
    full_req_init(&f);
    json_t *opts = json_pack("{s:s}", "region", "us-west-2");
    struct dp_provider pv = provider("https://bedrock-runtime.us-west-2.amazonaws.com",
                                     "AKIDEXAMPLE:secretKEY/+x:TOKEN123", opts);
    struct drv_target t = {
        .provider = &pv, .model = "anthropic.claude-sonnet-4-20250514-v1:0", .request_id = "req-1"};
    struct drv_request rq = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(drv_bedrock.build_chat(&t, f.r, &rq, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(rq.url, "https://bedrock-runtime.us-west-2.amazonaws.com/model/"
                                   "anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream");
    CU_ASSERT_EQUAL(rq.stream, 1);
    CU_ASSERT_STRING_EQUAL(header(&rq, "Host"), "bedrock-runtime.us-west-2.amazonaws.com");
    CU_ASSERT_STRING_EQUAL(header(&rq, "Accept"), "application/vnd.amazon.eventstream");
    CU_ASSERT_STRING_EQUAL(header(&rq, "Content-Type"), "application/json");
    CU_ASSERT_STRING_EQUAL(header(&rq, "x-request-id"), "req-1");
    check_signature(&rq, "AKIDEXAMPLE", "secretKEY/+x", "TOKEN123", "us-west-2");
    CU_ASSERT_PTR_NOT_NULL(strstr(header(&rq, "Authorization"), "Credential=AKIDEXAMPLE/"));
    CU_ASSERT_PTR_NOT_NULL(strstr(header(&rq, "Authorization"),
                                  "/us-west-2/bedrock/aws4_request, "
                                  "SignedHeaders=content-type;host;"
                                  "x-amz-date;x-amz-security-token,"));

    json_t *doc = json_loadb(rq.body, rq.body_len, 0, NULL);
    CU_ASSERT_FATAL(json_is_object(doc));
    expect_json(doc, "system",
                "[{\"text\":\"You are terse.\"},{\"cachePoint\":{\"type\":\"default\"}},"
                "{\"text\":\"Answer in English.\"}]");
    expect_json(doc, "messages.0",
                "{\"role\":\"user\",\"content\":[{\"text\":\"What is in this image?\"},"
                "{\"image\":{\"format\":\"png\",\"source\":{\"bytes\":\"iVBORw0KGgo=\"}}},"
                "{\"cachePoint\":{\"type\":\"default\",\"ttl\":\"1h\"}}]}");
    expect_json(doc, "messages.1",
                "{\"role\":\"assistant\",\"content\":["
                "{\"reasoningContent\":{\"reasoningText\":{\"text\":\"The user wants...\","
                "\"signature\":\"c2ln\"}}},"
                "{\"text\":\"Let me check.\"},"
                "{\"toolUse\":{\"toolUseId\":\"tooluse_1\",\"name\":\"get_weather\","
                "\"input\":{\"city\":\"Paris\"}}},"
                "{\"toolUse\":{\"toolUseId\":\"tooluse_2\",\"name\":\"get_time\",\"input\":{}}}]}");
    expect_json(
        doc, "messages.2",
        "{\"role\":\"user\",\"content\":["
        "{\"toolResult\":{\"toolUseId\":\"tooluse_1\",\"content\":[{\"text\":\"18C, sunny\"},"
        "{\"image\":{\"format\":\"jpeg\",\"source\":{\"bytes\":\"/9j/\"}}}]}},"
        "{\"toolResult\":{\"toolUseId\":\"tooluse_2\",\"content\":[{\"text\":\"18C, sunny\"}],"
        "\"status\":\"error\"}},"
        "{\"text\":\"Thanks.\"},{\"text\":\"And tomorrow?\"}]}");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(doc, "messages")), 3);
    expect_json(doc, "toolConfig",
                "{\"tools\":[{\"toolSpec\":{\"name\":\"get_weather\",\"description\":"
                "\"Weather for a city\",\"inputSchema\":{\"json\":{\"type\":\"object\","
                "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}},"
                "\"strict\":true}},"
                "{\"toolSpec\":{\"name\":\"get_time\",\"inputSchema\":{\"json\":{\"type\":"
                "\"object\",\"properties\":{}}}}},{\"cachePoint\":{\"type\":\"default\"}}],"
                "\"toolChoice\":{\"tool\":{\"name\":\"get_weather\"}}}");
    expect_json(doc, "inferenceConfig",
                "{\"maxTokens\":30000,\"temperature\":0.5,\"topP\":0.9,"
                "\"stopSequences\":[\"END\",\"\\n\\nHuman:\"]}");
    expect_json(doc, "additionalModelRequestFields",
                "{\"top_k\":40,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":8192}}");
    expect_json(doc, "requestMetadata", "{\"user\":\"user-42@example.com\"}");
    CU_ASSERT_EQUAL(json_object_size(doc), 6);
    json_decref(doc);
    drv_request_free(&rq);
    json_decref(opts);
    full_req_free(&f);
}

static int build(struct full_req *f, const char *base, const char *cred, json_t *opts,
                 const char *model, struct drv_request *rq, struct canon_err *err)
{
    struct dp_provider pv = provider(base, cred, opts);
    struct drv_target t = {.provider = &pv, .model = model, .request_id = NULL};
    memset(rq, 0, sizeof(*rq));
    memset(err, 0, sizeof(*err));
    return drv_bedrock.build_chat(&t, f->r, rq, err);
}

/* Non-stream, no session token, region read from the host, an ARN model
 * id, tool choices, reasoning budget without max_tokens. */
static void test_build_variants(void)
{
    struct full_req f;
    full_req_init(&f);
    f.r->stream = 0;
    f.r->has_max_tokens = 0;
    f.r->reasoning_effort = NULL;
    f.r->reasoning_budget = 3000;
    f.r->has_top_k = 0;
    f.r->user = NULL;
    f.r->tool_choice = CANON_TC_REQUIRED;
    json_t *opts = json_object();
    struct drv_request rq;
    struct canon_err err;
    const char *arn = "arn:aws:bedrock:eu-west-3:123456789012:inference-profile/"
                      "eu.anthropic.claude-3-7-sonnet-20250219-v1:0";
    CU_ASSERT_EQUAL_FATAL(build(&f, "https://bedrock-runtime.eu-west-3.amazonaws.com",
                                "AKID2:SECRET2", opts, arn, &rq, &err),
                          GW_OK);
    CU_ASSERT_STRING_EQUAL(rq.url, "https://bedrock-runtime.eu-west-3.amazonaws.com/model/"
                                   "arn%3Aaws%3Abedrock%3Aeu-west-3%3A123456789012%3A"
                                   "inference-profile%2Feu.anthropic.claude-3-7-sonnet-20250219-v1"
                                   "%3A0/converse");
    CU_ASSERT_EQUAL(rq.stream, 0);
    CU_ASSERT_STRING_EQUAL(header(&rq, "Accept"), "application/json");
    check_signature(&rq, "AKID2", "SECRET2", NULL, "eu-west-3");
    CU_ASSERT_PTR_NOT_NULL(strstr(header(&rq, "Authorization"), "/eu-west-3/bedrock/aws4_request"));
    json_t *doc = json_loadb(rq.body, rq.body_len, 0, NULL);
    expect_json(doc, "toolConfig.toolChoice", "{\"any\":{}}");
    expect_json(doc, "inferenceConfig.maxTokens", "7096");
    expect_json(doc, "additionalModelRequestFields",
                "{\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":3000}}");
    CU_ASSERT_PTR_NULL(json_object_get(doc, "requestMetadata"));
    json_decref(doc);
    drv_request_free(&rq);

    /* auto, a path prefix behind a proxy on loopback, region by option */
    f.r->tool_choice = CANON_TC_AUTO;
    f.r->reasoning_budget = 0;
    f.r->reasoning_off = 1;
    json_object_set_new(opts, "region", json_string("us-east-1"));
    CU_ASSERT_EQUAL_FATAL(build(&f, "http://127.0.0.1:19551/bedrock", "AK:SK", opts,
                                "amazon.nova-pro-v1:0", &rq, &err),
                          GW_OK);
    CU_ASSERT_STRING_EQUAL(rq.url,
                           "http://127.0.0.1:19551/bedrock/model/amazon.nova-pro-v1%3A0/converse");
    CU_ASSERT_STRING_EQUAL(header(&rq, "Host"), "127.0.0.1:19551");
    check_signature(&rq, "AK", "SK", NULL, "us-east-1");
    doc = json_loadb(rq.body, rq.body_len, 0, NULL);
    expect_json(doc, "toolConfig.toolChoice", "{\"auto\":{}}");
    CU_ASSERT_PTR_NULL(json_object_get(doc, "additionalModelRequestFields"));
    CU_ASSERT_PTR_NULL(jget(doc, "inferenceConfig.maxTokens"));
    json_decref(doc);
    drv_request_free(&rq);

    /* Bearer auth (a Bedrock API key): no signature at all. */
    json_object_set_new(opts, "auth", json_string("bearer"));
    char key[3000];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    memcpy(key, "ABSK", 4);
    CU_ASSERT_EQUAL_FATAL(
        build(&f, "https://bedrock-runtime.us-east-1.amazonaws.com", key, opts, "m", &rq, &err),
        GW_OK);
    CU_ASSERT_PTR_NOT_NULL(header(&rq, "Authorization"));
    CU_ASSERT_EQUAL(strncmp(header(&rq, "Authorization"), "Bearer ABSKkkk", 14), 0);
    CU_ASSERT_EQUAL(strlen(header(&rq, "Authorization")), 7 + strlen(key));
    CU_ASSERT_PTR_NULL(header(&rq, "X-Amz-Date"));
    drv_request_free(&rq);
    json_decref(opts);
    full_req_free(&f);
}

/* Each parameter Converse cannot honor is a 400 naming the client's field. */
static void test_build_refusals(void)
{
    static const char *const names[CANON_F_COUNT] = {
        [CANON_F_MESSAGES] = "messages",
        [CANON_F_SYSTEM] = "system",
        [CANON_F_TOOL_CHOICE] = "tool_choice",
        [CANON_F_PARALLEL_TOOL_CALLS] = "parallel_x",
        [CANON_F_SEED] = "seed",
        [CANON_F_PRESENCE_PENALTY] = "presence_penalty",
        [CANON_F_FREQUENCY_PENALTY] = "freq_x",
        [CANON_F_RESPONSE_FORMAT] = "text.format",
        [CANON_F_USER] = "metadata.user_id",
    };
    json_t *opts = json_pack("{s:s}", "region", "us-east-1");
    const char *base = "https://bedrock-runtime.us-east-1.amazonaws.com";
    struct drv_request rq;
    struct canon_err err;
    for (int c = 0; c < 12; c++) {
        struct full_req f;
        full_req_init(&f);
        f.r->field_names = names;
        const char *want = NULL;
        switch (c) {
        case 0:
            f.r->has_seed = 1, want = "seed";
            break;
        case 1:
            f.r->has_presence_penalty = 1, want = "presence_penalty";
            break;
        case 2:
            f.r->has_frequency_penalty = 1, want = "freq_x";
            break;
        case 3:
            f.r->format = CANON_FMT_JSON_OBJECT, want = "text.format";
            break;
        case 4: /* structured output needs a schema */
            f.r->format = CANON_FMT_JSON_OBJECT, want = "text.format";
            break;
        case 5:
            f.r->parallel_tool_calls = 0, want = "parallel_x";
            break;
        case 6:
            f.r->tool_choice = CANON_TC_NONE, want = "tool_choice";
            break;
        case 7:
            f.msgs[2].role = CANON_ROLE_SYSTEM, want = "messages";
            break;
        case 8:
            f.u1[1].data = NULL, f.u1[1].media_type = NULL;
            f.u1[1].url = "https://example.com/cat.png", want = "messages";
            break;
        case 9:
            f.u1[1].media_type = "image/bmp", want = "messages";
            break;
        case 10:
            f.r->user = "user<script>", want = "metadata.user_id";
            break;
        case 11:
            f.a1[2].arguments = "[1,2]", want = "messages";
            break;
        }
        int rc = build(&f, base, "AK:SK", opts, "m", &rq, &err);
        CU_ASSERT_EQUAL(rc, GW_EINVAL);
        CU_ASSERT_EQUAL(err.status, 400);
        CU_ASSERT_STRING_EQUAL(err.param, want);
        if (rc != GW_EINVAL || strcmp(err.param, want) != 0)
            fprintf(stderr, "\ncase %d: rc %d param '%s' (%s)\n", c, rc, err.param, err.message);
        drv_request_free(&rq);
        full_req_free(&f);
    }
    /* tool_choice required/named with no tools; none and auto without tools
     * are fine. */
    struct full_req f;
    full_req_init(&f);
    f.r->ntools = 0;
    f.r->tool_choice = CANON_TC_REQUIRED;
    CU_ASSERT_EQUAL(build(&f, base, "AK:SK", opts, "m", &rq, &err), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.param, "tool_choice");
    drv_request_free(&rq);
    f.r->tool_choice = CANON_TC_NONE;
    CU_ASSERT_EQUAL(build(&f, base, "AK:SK", opts, "m", &rq, &err), GW_OK);
    json_t *doc = json_loadb(rq.body, rq.body_len, 0, NULL);
    CU_ASSERT_PTR_NULL(json_object_get(doc, "toolConfig"));
    json_decref(doc);
    drv_request_free(&rq);
    full_req_free(&f);
    json_decref(opts);
}

/* A provider that cannot sign: 500 provider_misconfigured naming the option. */
static void test_build_misconfigured(void)
{
    static const struct {
        const char *base, *cred, *opts, *needle;
    } cases[] = {
        {"https://bedrock-runtime.us-east-1.amazonaws.com", NULL, "{}", "credential"},
        {"https://bedrock-runtime.us-east-1.amazonaws.com", "onlyakid", "{}", "credential"},
        {"https://bedrock-runtime.us-east-1.amazonaws.com", ":secret", "{}", "credential"},
        {"http://127.0.0.1:19551", "AK:SK", "{}", "'region'"},
        {"https://example.com/bedrock-runtime", "AK:SK", "{}", "'region'"},
        {"https://bedrock-runtime.us-east-1.amazonaws.com", "AK:SK", "{\"auth\":\"hmac\"}",
         "'auth'"},
        {"https://bedrock-runtime.us-east-1.amazonaws.com", NULL, "{\"auth\":\"bearer\"}",
         "credential"},
        {"https://bedrock-runtime.us-east-1.amazonaws.com", "AK:SK", "{\"region\":\"US EAST\"}",
         "'region'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct full_req f;
        full_req_init(&f);
        json_t *opts = json_loads(cases[i].opts, 0, NULL);
        struct drv_request rq;
        struct canon_err err;
        int rc = build(&f, cases[i].base, cases[i].cred, opts, "m", &rq, &err);
        CU_ASSERT_EQUAL(rc, GW_EINVAL);
        CU_ASSERT_EQUAL(err.status, 500);
        CU_ASSERT_STRING_EQUAL(err.code, "provider_misconfigured");
        CU_ASSERT_PTR_NOT_NULL(strstr(err.message, cases[i].needle));
        CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "provider 'bedrock'"));
        if (!strstr(err.message, cases[i].needle))
            fprintf(stderr, "\ncase %zu: %s\n", i, err.message);
        drv_request_free(&rq);
        json_decref(opts);
        full_req_free(&f);
    }
}

/* ------------------------------------------------------------ classify */

static void test_classify(void)
{
    static const struct {
        int status;
        const char *body, *cls, *msg;
    } cases[] = {
        {429, "{\"message\":\"Too many tokens, please wait before trying again.\"}", "rate_limited",
         "Too many tokens, please wait before trying again."},
        {429, "{\"message\":\"Model is not ready, try again later.\"}", "model_unavailable", NULL},
        {400, "{\"message\":\"ThrottlingException: rate exceeded\"}", "rate_limited", NULL},
        {403, "{\"message\":\"The security token included in the request is invalid.\"}",
         "auth_failed", "The security token included in the request is invalid."},
        {403, "{\"Message\":\"User is not authorized\"}", "auth_failed", "User is not authorized"},
        {424, "{\"message\":\"Received error from model\"}", "provider_5xx", NULL},
        {400, "{\"message\":\"Input is too long for requested model.\"}", "context_overflow", NULL},
        {400,
         "{\"message\":\"Too many input tokens. Max input tokens: 8192, request input token "
         "count: 9000\"}",
         "context_overflow", NULL},
        {400, "{\"message\":\"The provided model identifier is invalid.\"}", "model_unavailable",
         NULL},
        {400,
         "{\"message\":\"Invocation of model ID x with on-demand throughput isn't supported.\"}",
         "model_unavailable", NULL},
        {400, "{\"message\":\"Malformed input request: #: extraneous key [foo]\"}", "bad_request",
         NULL},
        {404,
         "{\"message\":\"Could not resolve the foundation model from the provided model "
         "identifier.\"}",
         "model_unavailable", NULL},
        {404, "{}", "model_unavailable", NULL},
        {408, "{\"message\":\"Model has timed out\"}", "timeout", NULL},
        {500, "{\"message\":\"InternalServerException\"}", "provider_5xx", NULL},
        {503, "{\"message\":\"Service Unavailable\"}", "provider_5xx", NULL},
        {502, "<html>bad gateway</html>", "provider_5xx", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum canon_failure f;
        char msg[384];
        drv_bedrock.classify(cases[i].status, cases[i].body, strlen(cases[i].body), &f, msg,
                             sizeof(msg));
        CU_ASSERT_STRING_EQUAL(canon_failure_name(f), cases[i].cls);
        if (strcmp(canon_failure_name(f), cases[i].cls) != 0)
            fprintf(stderr, "\ncase %zu: %s\n", i, canon_failure_name(f));
        if (cases[i].msg)
            CU_ASSERT_STRING_EQUAL(msg, cases[i].msg);
    }
}

static void test_registered(void)
{
    CU_ASSERT_PTR_EQUAL(dp_driver_find("bedrock"), &drv_bedrock);
    CU_ASSERT(drv_bedrock.info->caps & DRV_CAP_CHAT);
    CU_ASSERT(drv_bedrock.info->caps & DRV_CAP_VISION);
    CU_ASSERT(drv_bedrock.info->caps & DRV_CAP_TOOLS);
    CU_ASSERT(drv_bedrock.info->caps & DRV_CAP_REASONING);
    CU_ASSERT_FALSE(drv_bedrock.info->caps & DRV_CAP_EMBEDDINGS);
    CU_ASSERT(drv_bedrock.info->caps & DRV_CAP_JSON_MODE); /* json_schema: outputConfig */
}

static CU_TestInfo tests[] = {
    {"stream: full answer whole, bytewise, random splits", test_stream_full},
    {"stream: cache writes split by TTL", test_stream_cache_ttl_split},
    {"stream: stop reasons", test_stream_stop_reasons},
    {"stream: corrupt CRC mid-stream", test_stream_corrupt_crc},
    {"stream: oversize frame", test_stream_oversize},
    {"stream: exceptions", test_stream_exceptions},
    {"stream: event-stream error message", test_stream_error_message},
    {"stream: truncated", test_stream_truncated},
    {"stream: malformed", test_stream_malformed},
    {"stream: tool without input, unknown events", test_stream_tool_without_input},
    {"whole: Converse body", test_whole},
    {"whole: malformed bodies", test_whole_malformed},
    {"build: full request, signed", test_build_full},
    {"build: json_schema as outputConfig", test_build_output_config},
    {"build: variants (ARN, bearer, prefix, region)", test_build_variants},
    {"build: refusals name the client field", test_build_refusals},
    {"build: misconfigured provider", test_build_misconfigured},
    {"classify", test_classify},
    {"registered", test_registered},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
