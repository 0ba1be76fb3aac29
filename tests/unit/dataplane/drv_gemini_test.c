/* Tests for dataplane/drivers/gemini.c: Gemini API answers (streamed SSE
 * chunks and whole GenerateContentResponse bodies, shaped as in the API
 * reference) parse to the same canonical transcript whole, byte by byte and
 * in random splits; broken, oversize and truncated answers end in ERROR;
 * the request body is checked field by field; unsupported input is a 400
 * naming the field; Google error bodies classify. */
#include <CUnit/CUnit.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "canon_record.h"
#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_refusal.h"
#include "gw_error.h"
#include "json_path.h"

/* ---------------------------------------------------------------- harness */

/* Whole, byte by byte and in random splits: all must give want. */
static void check_parse(int stream, const char *body, const char *want)
{
    canon_record_check(&drv_gemini, stream, body, strlen(body), want);
}

/* ---------------------------------------------------------------- fixtures */

/* A streamed answer: two thought chunks, text in two chunks, then two
 * parallel function calls in one chunk with the finishReason. usageMetadata
 * comes with every chunk, cumulative, with implicit cache hits. */
static const char STREAM[] =
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"**Planning** the lookup\","
    "\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": "
    "{\"promptTokenCount\": 1240,\"totalTokenCount\": 1262,\"cachedContentTokenCount\": 1024,"
    "\"thoughtsTokenCount\": 22,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\":"
    " 1240}],\"cacheTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 1024}]},"
    "\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"mKQbaO2XMtbgz7IP4pnN2AQ\"}\r\n\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" for two cities.\\n\","
    "\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": "
    "{\"promptTokenCount\": 1240,\"totalTokenCount\": 1288,\"cachedContentTokenCount\": 1024,"
    "\"thoughtsTokenCount\": 48},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": "
    "\"mKQbaO2XMtbgz7IP4pnN2AQ\"}\r\n\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Checking the weather \"}],"
    "\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 1240,"
    "\"candidatesTokenCount\": 4,\"totalTokenCount\": 1292,\"cachedContentTokenCount\": 1024,"
    "\"thoughtsTokenCount\": 48},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": "
    "\"mKQbaO2XMtbgz7IP4pnN2AQ\"}\r\n\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"in Paris and Tōkyō "
    "\\\"now\\\".\"}"
    "],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 1240,"
    "\"candidatesTokenCount\": 11,\"totalTokenCount\": 1299,\"cachedContentTokenCount\": 1024,"
    "\"thoughtsTokenCount\": 48},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": "
    "\"mKQbaO2XMtbgz7IP4pnN2AQ\"}\r\n\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": "
    "\"get_weather\",\"args\": {\"city\": \"Paris\",\"unit\": \"celsius\"}},"
    "\"thoughtSignature\": \"CiQBcsjafDq1HNs0pWzQ9hKd\"},{\"functionCall\": {\"name\": "
    "\"get_weather\",\"args\": {\"city\": \"Tokyo\",\"days\": [1, 2],\"detail\": {\"hourly\": "
    "true}}}}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\":"
    " {\"promptTokenCount\": 1240,\"candidatesTokenCount\": 57,\"totalTokenCount\": 1345,"
    "\"cachedContentTokenCount\": 1024,\"thoughtsTokenCount\": 48},\"modelVersion\": "
    "\"gemini-2.5-flash\",\"responseId\": \"mKQbaO2XMtbgz7IP4pnN2AQ\"}\r\n\r\n";

static const char STREAM_WANT[] =
    "START id=mKQbaO2XMtbgz7IP4pnN2AQ model=gemini-2.5-flash\n"
    "USAGE in=216 cr=1024 cw5=0 cw1h=0 out=22 rs=22\n"
    "REASONING \"**Planning** the lookup for two cities.\\n\"\n"
    "TEXT \"Checking the weather \"\"in Paris and Tōkyō \\\"now\\\".\"\n"
    "TOOL 0 id=call_0 name=get_weather\n"
    "ARGS 0 {\"city\":\"Paris\",\"unit\":\"celsius\"}\n"
    "TOOL_END 0\n"
    "TOOL 1 id=call_1 name=get_weather\n"
    "ARGS 1 {\"city\":\"Tokyo\",\"days\":[1,2],\"detail\":{\"hourly\":true}}\n"
    "TOOL_END 1\n"
    "USAGE in=216 cr=1024 cw5=0 cw1h=0 out=105 rs=48\n"
    "DONE tool_use\n";

/* The same kind of answer, not streamed, with call ids (as Gemini 3 gives). */
static const char WHOLE_BODY[] =
    "{\n"
    "  \"candidates\": [\n"
    "    {\n"
    "      \"content\": {\n"
    "        \"parts\": [\n"
    "          {\"text\": \"The user wants two forecasts.\", \"thought\": true},\n"
    "          {\"text\": \"Let me look both up.\"},\n"
    "          {\"functionCall\": {\"id\": \"fc-7a1\", \"name\": \"get_weather\", \"args\": "
    "{\"city\": \"Paris\"}}, \"thoughtSignature\": \"EpYBCpMBAdHtim9\"},\n"
    "          {\"functionCall\": {\"id\": \"fc-7a2\", \"name\": \"get_time\"}}\n"
    "        ],\n"
    "        \"role\": \"model\"\n"
    "      },\n"
    "      \"finishReason\": \"STOP\",\n"
    "      \"index\": 0\n"
    "    }\n"
    "  ],\n"
    "  \"usageMetadata\": {\n"
    "    \"promptTokenCount\": 310,\n"
    "    \"candidatesTokenCount\": 31,\n"
    "    \"totalTokenCount\": 469,\n"
    "    \"cachedContentTokenCount\": 256,\n"
    "    \"thoughtsTokenCount\": 128\n"
    "  },\n"
    "  \"modelVersion\": \"gemini-3-pro-preview\",\n"
    "  \"responseId\": \"q0FwaLr2Ce2Mz7IPnv2o4Q0\"\n"
    "}\n";

static const char WHOLE_WANT[] = "START id=q0FwaLr2Ce2Mz7IPnv2o4Q0 model=gemini-3-pro-preview\n"
                                 "USAGE in=54 cr=256 cw5=0 cw1h=0 out=159 rs=128\n"
                                 "REASONING \"The user wants two forecasts.\"\n"
                                 "TEXT \"Let me look both up.\"\n"
                                 "TOOL 0 id=fc-7a1 name=get_weather\n"
                                 "ARGS 0 {\"city\":\"Paris\"}\n"
                                 "TOOL_END 0\n"
                                 "TOOL 1 id=fc-7a2 name=get_time\n"
                                 "ARGS 1 {}\n"
                                 "TOOL_END 1\n"
                                 "DONE tool_use\n";

static void test_stream(void)
{
    check_parse(1, STREAM, STREAM_WANT);
}

static void test_whole(void)
{
    check_parse(0, WHOLE_BODY, WHOLE_WANT);
}

/* Counts past any real answer (or below zero) are brought into
 * [0, 10^12] before they are added: no overflow, nothing negative. */
static void test_usage_bounds(void)
{
    check_parse(0,
                "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"},"
                "\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":"
                "-5,\"cachedContentTokenCount\":9223372036854775807,\"candidatesTokenCount\":"
                "9223372036854775807,\"thoughtsTokenCount\":9223372036854775807}}",
                "START id=- model=-\n"
                "USAGE in=0 cr=0 cw5=0 cw1h=0 out=2000000000000 rs=1000000000000\n"
                "TEXT \"Hi\"\n"
                "DONE end\n");
}

static void test_stop_reasons(void)
{
    check_parse(1,
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Once upon\"}],"
                "\"role\":\"model\"},\"finishReason\":\"MAX_TOKENS\",\"index\":0}],"
                "\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":2,"
                "\"totalTokenCount\":7},\"modelVersion\":\"gemini-2.0-flash\","
                "\"responseId\":\"r1\"}\n\n",
                "START id=r1 model=gemini-2.0-flash\n"
                "USAGE in=5 cr=0 cw5=0 cw1h=0 out=2 rs=0\n"
                "TEXT \"Once upon\"\n"
                "DONE max_tokens\n");
    check_parse(
        1,
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Sure\"}],"
        "\"role\":\"model\"},\"index\":0}],\"modelVersion\":\"m\",\"responseId\":\"r2\"}\n\n"
        "data: {\"candidates\":[{\"finishReason\":\"SAFETY\",\"index\":0,"
        "\"safetyRatings\":[{\"category\":\"HARM_CATEGORY_DANGEROUS_CONTENT\","
        "\"probability\":\"HIGH\",\"blocked\":true}]}],\"usageMetadata\":"
        "{\"promptTokenCount\":9,\"candidatesTokenCount\":1,\"totalTokenCount\":10},"
        "\"modelVersion\":\"m\",\"responseId\":\"r2\"}\n\n",
        "START id=r2 model=m\n"
        "TEXT \"Sure\"\n"
        "USAGE in=9 cr=0 cw5=0 cw1h=0 out=1 rs=0\n"
        "DONE content_filter\n");
    check_parse(0,
                "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi.\"}],\"role\":\"model\"},"
                "\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":3,"
                "\"candidatesTokenCount\":2,\"totalTokenCount\":5},\"modelVersion\":\"m\","
                "\"responseId\":\"r3\"}",
                "START id=r3 model=m\n"
                "USAGE in=3 cr=0 cw5=0 cw1h=0 out=2 rs=0\n"
                "TEXT \"Hi.\"\n"
                "DONE end\n");
}

static void test_blocked_prompt(void)
{
    check_parse(1,
                "data: {\"promptFeedback\": {\"blockReason\": \"PROHIBITED_CONTENT\"},"
                "\"usageMetadata\": {\"promptTokenCount\": 12,\"totalTokenCount\": 12},"
                "\"modelVersion\": \"gemini-2.5-pro\",\"responseId\": \"b1\"}\r\n\r\n",
                "START id=b1 model=gemini-2.5-pro\n"
                "USAGE in=12 cr=0 cw5=0 cw1h=0 out=0 rs=0\n"
                "ERROR content_filtered status=0\n");
    check_parse(0, "{\"promptFeedback\": {\"blockReason\": \"SAFETY\"}}",
                "START id=- model=-\n"
                "ERROR content_filtered status=0\n");
}

static void test_broken(void)
{
    /* Truncated: the stream ends before the chunk with the finishReason. */
    const char *end = strstr(STREAM, "data: {\"candidates\": [{\"content\": {\"parts\": "
                                     "[{\"functionCall\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(end);
    char *cut = strndup(STREAM, (size_t)(end - STREAM));
    check_parse(1, cut,
                "START id=mKQbaO2XMtbgz7IP4pnN2AQ model=gemini-2.5-flash\n"
                "USAGE in=216 cr=1024 cw5=0 cw1h=0 out=22 rs=22\n"
                "REASONING \"**Planning** the lookup for two cities.\\n\"\n"
                "TEXT \"Checking the weather \"\"in Paris and Tōkyō \\\"now\\\".\"\n"
                "ERROR network status=0\n");
    free(cut);
    /* Cut inside the last event: it is never dispatched. */
    cut = strndup(STREAM, strlen(STREAM) - 40);
    char *t = canon_record_run(&drv_gemini, 1, cut, strlen(cut), CANON_SPLIT_WHOLE, 0, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "TEXT \"Checking"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "ERROR network status=0\n"));
    CU_ASSERT_PTR_NULL(strstr(t, "TOOL"));
    free(t);
    free(cut);
    /* Malformed JSON in an event. */
    check_parse(1,
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],"
                "\"responseId\":\"x\",\"modelVersion\":\"m\"}\n\n"
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\n\n",
                "START id=x model=m\nTEXT \"a\"\nERROR provider_5xx status=0\n");
    /* Not an object. */
    check_parse(1, "data: [1,2]\n\n", "ERROR provider_5xx status=0\n");
    /* Function call args that are not an object. */
    check_parse(1,
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\","
                "\"args\":\"x\"}}]}}]}\n\n",
                "START id=- model=-\nERROR provider_5xx status=0\n");
    /* An error object inside the stream. */
    check_parse(1,
                "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\n\n"
                "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\","
                "\"status\":\"UNAVAILABLE\"}}\n\n",
                "START id=- model=-\nTEXT \"a\"\nERROR model_unavailable status=0\n");
    /* Empty and non-JSON whole bodies; a body with no candidates. */
    check_parse(0, "", "ERROR empty_output status=0\n");
    check_parse(0, "<html>502</html>", "ERROR provider_5xx status=0\n");
    check_parse(0, "{\"modelVersion\":\"m\"}", "START id=- model=m\nERROR empty_output status=0\n");
    /* Empty stream body. */
    check_parse(1, "", "ERROR network status=0\n");
}

static void test_oversize(void)
{
    size_t n = DRV_MAX_EVENT + 64;
    char *big = malloc(n + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memcpy(big, "data: {\"x\":\"", 12);
    memset(big + 12, 'a', n - 12);
    big[n] = '\0';
    char *t = canon_record_run(&drv_gemini, 1, big, n, CANON_SPLIT_WHOLE, 0, 0);
    CU_ASSERT_STRING_EQUAL(t, "ERROR provider_5xx status=0\n");
    free(t);
    t = canon_record_run(&drv_gemini, 1, big, n, CANON_SPLIT_RANDOM, 5, 0);
    CU_ASSERT_STRING_EQUAL(t, "ERROR provider_5xx status=0\n");
    free(t);
    /* A whole body past DRV_MAX_BODY. */
    size_t m = DRV_MAX_BODY + 16;
    char *huge = malloc(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(huge);
    memset(huge, ' ', m);
    t = canon_record_run(&drv_gemini, 0, huge, m, CANON_SPLIT_WHOLE, 0, 0);
    CU_ASSERT_STRING_EQUAL(t, "ERROR provider_5xx status=0\n");
    free(t);
    free(huge);
    free(big);
}

/* The sink stopping at any event stops the parser cleanly. */
static void test_sink_stops(void)
{
    canon_record_stops(&drv_gemini, 1, STREAM, strlen(STREAM), CANON_SPLIT_RANDOM, 11, 12);
    canon_record_stops(&drv_gemini, 0, WHOLE_BODY, strlen(WHOLE_BODY), CANON_SPLIT_WHOLE, 0, 12);
}

/* ------------------------------------------------------------------ build */

struct fixture {
    struct dp_provider prov;
    struct drv_target t;
    struct canon_req *r;
    struct canon_part sys[2];
    struct canon_part u1[3];
    struct canon_part a1[4];
    struct canon_part res_ok, res_err;
    struct canon_part u2[3];
    struct canon_message msgs[3];
    struct canon_tool tools[2];
    json_t *schema, *fschema;
};

static const char *STOPS[] = {"END", "\n\n"};

static void fixture_init(struct fixture *f, const char *model)
{
    memset(f, 0, sizeof(*f));
    f->prov.name = "gem";
    f->prov.driver = "gemini";
    f->prov.base_url = "https://generativelanguage.googleapis.com/v1beta";
    f->prov.credential = "AIza-test-key";
    f->prov.options = json_object();
    f->t.provider = &f->prov;
    f->t.model = model;
    f->t.request_id = "req-42";
    f->r = canon_req_new(json_object());
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->r);
    struct canon_req *r = f->r;
    r->model = "gem/x";
    f->sys[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "You are terse."};
    f->sys[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Use metric units."};
    r->system = f->sys;
    r->nsystem = 2;
    f->u1[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Weather in Paris and Tokyo?"};
    f->u1[1] = (struct canon_part){
        .type = CANON_PART_IMAGE, .media_type = "image/png", .data = "iVBORw0KGgo="};
    f->u1[2] = (struct canon_part){.type = CANON_PART_TEXT, .text = ""};
    f->a1[0] =
        (struct canon_part){.type = CANON_PART_THINKING, .text = "two calls", .signature = "s"};
    f->a1[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Looking up."};
    f->a1[2] = (struct canon_part){.type = CANON_PART_TOOL_CALL,
                                   .id = "call_a",
                                   .name = "get_weather",
                                   .arguments = "{\"city\":\"Paris\"}"};
    f->a1[3] = (struct canon_part){.type = CANON_PART_TOOL_CALL,
                                   .id = "call_b",
                                   .name = "get_time",
                                   .arguments = "{\"tz\":\"Asia/Tokyo\",\"fmt\":[24]}"};
    f->res_ok = (struct canon_part){.type = CANON_PART_TEXT, .text = "18C, clear"};
    f->res_err = (struct canon_part){.type = CANON_PART_TEXT, .text = "timezone service down"};
    f->u2[0] = (struct canon_part){.type = CANON_PART_TOOL_RESULT,
                                   .id = "call_b",
                                   .content = &f->res_err,
                                   .ncontent = 1,
                                   .is_error = 1};
    f->u2[1] = (struct canon_part){
        .type = CANON_PART_TOOL_RESULT, .id = "call_a", .content = &f->res_ok, .ncontent = 1};
    f->u2[2] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Summarize."};
    f->msgs[0] = (struct canon_message){CANON_ROLE_USER, f->u1, 3};
    f->msgs[1] = (struct canon_message){CANON_ROLE_ASSISTANT, f->a1, 4};
    f->msgs[2] = (struct canon_message){CANON_ROLE_USER, f->u2, 3};
    r->messages = f->msgs;
    r->nmessages = 3;
    f->schema = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
                           "\"minLength\":1}},\"required\":[\"city\"],"
                           "\"additionalProperties\":false}",
                           0, NULL);
    f->tools[0] = (struct canon_tool){.name = "get_weather",
                                      .description = "Current weather",
                                      .parameters = f->schema,
                                      .strict = 1};
    f->tools[1] = (struct canon_tool){.name = "get_time", .strict = -1};
    r->tools = f->tools;
    r->ntools = 2;
    r->tool_choice = CANON_TC_NAMED;
    r->tool_choice_name = "get_weather";
    r->parallel_tool_calls = 1;
    r->has_temperature = r->has_top_p = r->has_top_k = r->has_max_tokens = r->has_seed = 1;
    r->has_presence_penalty = r->has_frequency_penalty = 1;
    r->temperature = 0.5;
    r->top_p = 0.25;
    r->top_k = 40;
    r->max_tokens = 1000;
    r->seed = 7;
    r->presence_penalty = 0.125;
    r->frequency_penalty = -0.5;
    r->stop = STOPS;
    r->nstop = 2;
    f->fschema = json_loads("{\"type\":\"object\",\"properties\":{\"summary\":{\"type\":"
                            "\"string\"}}}",
                            0, NULL);
    r->format = CANON_FMT_JSON_SCHEMA;
    r->format_name = "summary";
    r->format_schema = f->fschema;
    r->reasoning_effort = "high";
    r->user = "end-user-1";
}

static void fixture_free(struct fixture *f)
{
    canon_req_free(f->r);
    json_decref(f->prov.options);
    json_decref(f->schema);
    json_decref(f->fschema);
}

static int has_header(const struct drv_request *q, const char *line)
{
    for (const struct curl_slist *l = q->headers; l; l = l->next)
        if (strcmp(l->data, line) == 0)
            return 1;
    return 0;
}

static json_t *build(struct fixture *f, struct drv_request *q, struct canon_err *err, int *rc)
{
    memset(q, 0, sizeof(*q));
    memset(err, 0, sizeof(*err));
    *rc = drv_gemini.build_chat(&f->t, f->r, q, err);
    if (*rc != GW_OK)
        return NULL;
    json_t *doc = json_loadb(q->body, q->body_len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL(doc);
    return doc;
}

static void test_build_chat(void)
{
    struct fixture f;
    fixture_init(&f, "gemini-2.5-flash");
    struct drv_request q;
    struct canon_err err;
    int rc;
    json_t *doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_EQUAL(q.stream, 0);
    CU_ASSERT_STRING_EQUAL(q.url, "https://generativelanguage.googleapis.com/v1beta/models/"
                                  "gemini-2.5-flash:generateContent");
    CU_ASSERT(has_header(&q, "x-goog-api-key: AIza-test-key"));
    CU_ASSERT(has_header(&q, "Content-Type: application/json"));
    CU_ASSERT(has_header(&q, "x-request-id: req-42"));
    expect_json(doc, "systemInstruction",
                "{\"parts\":[{\"text\":\"You are terse.\"},{\"text\":\"Use metric units.\"}]}");
    expect_json(doc, "contents.0",
                "{\"role\":\"user\",\"parts\":[{\"text\":\"Weather in Paris and Tokyo?\"},"
                "{\"inlineData\":{\"mimeType\":\"image/png\",\"data\":\"iVBORw0KGgo=\"}}]}");
    /* Earlier thinking is not replayed; no signature sentinel for 2.5. */
    expect_json(doc, "contents.1",
                "{\"role\":\"model\",\"parts\":[{\"text\":\"Looking up.\"},"
                "{\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"city\":\"Paris\"}}},"
                "{\"functionCall\":{\"name\":\"get_time\",\"args\":{\"tz\":\"Asia/Tokyo\","
                "\"fmt\":[24]}}}]}");
    /* Results by name, in the client's order, error flagged; text after. */
    expect_json(doc, "contents.2",
                "{\"role\":\"user\",\"parts\":["
                "{\"functionResponse\":{\"name\":\"get_time\",\"response\":{\"error\":"
                "\"timezone service down\"}}},"
                "{\"functionResponse\":{\"name\":\"get_weather\",\"response\":{\"output\":"
                "\"18C, clear\"}}},"
                "{\"text\":\"Summarize.\"}]}");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(doc, "contents")), 3);
    expect_json(doc, "tools",
                "[{\"functionDeclarations\":["
                "{\"name\":\"get_weather\",\"description\":\"Current weather\","
                "\"parametersJsonSchema\":{\"type\":\"object\",\"properties\":{\"city\":"
                "{\"type\":\"string\",\"minLength\":1}},\"required\":[\"city\"],"
                "\"additionalProperties\":false}},"
                "{\"name\":\"get_time\"}]}]");
    expect_json(doc, "toolConfig",
                "{\"functionCallingConfig\":{\"mode\":\"ANY\",\"allowedFunctionNames\":"
                "[\"get_weather\"]}}");
    expect_json(doc, "generationConfig",
                "{\"maxOutputTokens\":1000,\"temperature\":0.5,\"topP\":0.25,\"topK\":40,"
                "\"stopSequences\":[\"END\",\"\\n\\n\"],\"seed\":7,\"presencePenalty\":0.125,"
                "\"frequencyPenalty\":-0.5,\"responseMimeType\":\"application/json\","
                "\"responseJsonSchema\":{\"type\":\"object\",\"properties\":{\"summary\":"
                "{\"type\":\"string\"}}},"
                "\"thinkingConfig\":{\"thinkingBudget\":24576,\"includeThoughts\":true}}");
    CU_ASSERT_PTR_NULL(json_object_get(doc, "user"));
    json_decref(doc);
    drv_request_free(&q);

    /* Streaming: the SSE method. Gemini 3: replayed calls get the sentinel. */
    f.r->stream = 1;
    f.t.model = "models/gemini-3-pro-preview";
    f.r->tool_choice = CANON_TC_REQUIRED;
    f.r->reasoning_effort = NULL;
    f.r->reasoning_budget = 2000;
    f.r->format = CANON_FMT_JSON_OBJECT;
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_EQUAL(q.stream, 1);
    CU_ASSERT_STRING_EQUAL(q.url, "https://generativelanguage.googleapis.com/v1beta/models/"
                                  "gemini-3-pro-preview:streamGenerateContent?alt=sse");
    expect_json(doc, "contents.1.parts.1.thoughtSignature", "\"skip_thought_signature_validator\"");
    expect_json(doc, "contents.1.parts.2.thoughtSignature", "\"skip_thought_signature_validator\"");
    expect_json(doc, "toolConfig", "{\"functionCallingConfig\":{\"mode\":\"ANY\"}}");
    expect_json(doc, "generationConfig.responseMimeType", "\"application/json\"");
    CU_ASSERT_PTR_NULL(jget(doc, "generationConfig.responseJsonSchema"));
    expect_json(doc, "generationConfig.thinkingConfig",
                "{\"thinkingBudget\":2000,\"includeThoughts\":true}");
    json_decref(doc);
    drv_request_free(&q);

    /* Option: never the sentinel; thinking as a level. */
    json_object_set_new(f.prov.options, "thought_signature", json_string("never"));
    json_object_set_new(f.prov.options, "thinking", json_string("level"));
    f.r->tool_choice = CANON_TC_NONE;
    f.r->reasoning_budget = 0;
    f.r->reasoning_effort = "low";
    f.r->format = CANON_FMT_TEXT;
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_PTR_NULL(jget(doc, "contents.1.parts.1.thoughtSignature"));
    expect_json(doc, "toolConfig", "{\"functionCallingConfig\":{\"mode\":\"NONE\"}}");
    expect_json(doc, "generationConfig.responseMimeType", "\"text/plain\"");
    expect_json(doc, "generationConfig.thinkingConfig",
                "{\"thinkingLevel\":\"low\",\"includeThoughts\":true}");
    json_decref(doc);
    drv_request_free(&q);

    /* Level mode cannot turn thinking off. */
    f.r->reasoning_effort = NULL;
    f.r->reasoning_off = 1;
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_EINVAL);
    CU_ASSERT_EQUAL(err.status, 400);
    CU_ASSERT_STRING_EQUAL(err.param, "reasoning_effort");
    drv_request_free(&q);
    /* Budget mode: off is budget 0, no thoughts asked for. */
    json_object_del(f.prov.options, "thinking");
    f.r->tool_choice = CANON_TC_AUTO;
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    expect_json(doc, "generationConfig.thinkingConfig", "{\"thinkingBudget\":0}");
    expect_json(doc, "toolConfig", "{\"functionCallingConfig\":{\"mode\":\"AUTO\"}}");
    json_decref(doc);
    drv_request_free(&q);
    fixture_free(&f);

    /* A bare request: no generationConfig, toolConfig or tools at all. */
    fixture_init(&f, "gemini-2.0-flash");
    struct canon_part hi = {.type = CANON_PART_TEXT, .text = "hi"};
    struct canon_message m = {CANON_ROLE_USER, &hi, 1};
    f.r->nsystem = 0;
    f.r->messages = &m;
    f.r->nmessages = 1;
    f.r->ntools = 0;
    f.r->tool_choice = CANON_TC_UNSET;
    f.r->parallel_tool_calls = -1;
    f.r->has_temperature = f.r->has_top_p = f.r->has_top_k = f.r->has_max_tokens = 0;
    f.r->has_seed = f.r->has_presence_penalty = f.r->has_frequency_penalty = 0;
    f.r->nstop = 0;
    f.r->format = CANON_FMT_UNSET;
    f.r->reasoning_effort = NULL;
    f.prov.credential = NULL;
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    char *s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    CU_ASSERT_STRING_EQUAL(s, "{\"contents\":[{\"parts\":[{\"text\":\"hi\"}],\"role\":\"user\"}]}");
    free(s);
    for (const struct curl_slist *l = q.headers; l; l = l->next)
        CU_ASSERT(strncmp(l->data, "x-goog-api-key", 14) != 0);
    json_decref(doc);
    drv_request_free(&q);
    fixture_free(&f);
}

static void test_refusals(void)
{
    struct fixture f;
    fixture_init(&f, "gemini-2.5-flash");
    f.u1[1].url = "https://example.com/cat.png";
    expect_refusal(&drv_gemini, &f.t, f.r, "messages", "http(s) URL");
    f.u1[1].url = NULL;

    f.u2[1].id = "call_zzz";
    expect_refusal(&drv_gemini, &f.t, f.r, "messages", "call_zzz");
    f.u2[1].id = "call_a";

    struct canon_part img = {.type = CANON_PART_IMAGE, .media_type = "image/png", .data = "AA=="};
    f.u2[1].content = &img;
    expect_refusal(&drv_gemini, &f.t, f.r, "messages", "only text in tool results");
    f.u2[1].content = &f.res_ok;

    f.a1[3].arguments = "[1]";
    expect_refusal(&drv_gemini, &f.t, f.r, "messages", "JSON object");
    f.a1[3].arguments = "{}";

    f.msgs[1].role = CANON_ROLE_SYSTEM;
    expect_refusal(&drv_gemini, &f.t, f.r, "messages", "system");
    f.msgs[1].role = CANON_ROLE_ASSISTANT;

    f.r->parallel_tool_calls = 0;
    expect_refusal(&drv_gemini, &f.t, f.r, "parallel_tool_calls", "one tool call per turn");
    f.r->parallel_tool_calls = -1;

    /* The facade's own names for fields are used. */
    static const char *const names[CANON_F_COUNT] = {[CANON_F_PARALLEL_TOOL_CALLS] =
                                                         "tool_choice.disable_parallel_tool_use"};
    f.r->field_names = names;
    f.r->parallel_tool_calls = 0;
    expect_refusal(&drv_gemini, &f.t, f.r, "tool_choice.disable_parallel_tool_use",
                   "one tool call per turn");
    fixture_free(&f);
}

/* ---------------------------------------------------------------- classify */

static enum canon_failure cls(int status, const char *body, char *msg, size_t msglen)
{
    enum canon_failure f = CANON_FAIL_COUNT;
    drv_gemini.classify(status, body, strlen(body), &f, msg, msglen);
    return f;
}

static void test_classify(void)
{
    char msg[256];
    /* A per-minute limit: Gemini says "quota" but gives a RetryInfo. */
    CU_ASSERT_EQUAL(
        cls(429,
            "{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota, please "
            "check your plan and billing details.\",\"status\":\"RESOURCE_EXHAUSTED\","
            "\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\","
            "\"violations\":[{\"quotaMetric\":\"generativelanguage.googleapis.com/"
            "generate_content_free_tier_requests\",\"quotaId\":"
            "\"GenerateRequestsPerMinutePerProjectPerModel-FreeTier\"}]},"
            "{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"36s\"}]}}",
            msg, sizeof(msg)),
        CANON_FAIL_RATE_LIMITED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "exceeded your current quota"));
    /* A daily quota is spent. */
    CU_ASSERT_EQUAL(
        cls(429,
            "{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota.\","
            "\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":"
            "\"type.googleapis.com/google.rpc.QuotaFailure\",\"violations\":[{\"quotaId\":"
            "\"GenerateRequestsPerDayPerProjectPerModel-FreeTier\"}]},{\"@type\":"
            "\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"3600s\"}]}}",
            msg, sizeof(msg)),
        CANON_FAIL_QUOTA_EXHAUSTED);
    /* No details: the message decides. */
    CU_ASSERT_EQUAL(cls(429,
                        "{\"error\":{\"code\":429,\"message\":\"Quota exceeded for billing "
                        "account.\",\"status\":\"RESOURCE_EXHAUSTED\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_QUOTA_EXHAUSTED);
    CU_ASSERT_EQUAL(cls(429,
                        "{\"error\":{\"code\":429,\"message\":\"Resource has been exhausted.\","
                        "\"status\":\"RESOURCE_EXHAUSTED\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_RATE_LIMITED);
    CU_ASSERT_EQUAL(
        cls(400,
            "{\"error\":{\"code\":400,\"message\":\"API key not valid. Please pass a valid API "
            "key.\",\"status\":\"INVALID_ARGUMENT\",\"details\":[{\"@type\":"
            "\"type.googleapis.com/google.rpc.ErrorInfo\",\"reason\":\"API_KEY_INVALID\","
            "\"domain\":\"googleapis.com\"}]}}",
            msg, sizeof(msg)),
        CANON_FAIL_AUTH_FAILED);
    CU_ASSERT_STRING_EQUAL(msg, "API key not valid. Please pass a valid API key.");
    CU_ASSERT_EQUAL(cls(400,
                        "{\"error\":{\"code\":400,\"message\":\"The input token count (1200000) "
                        "exceeds the maximum number of tokens allowed (1048576).\",\"status\":"
                        "\"INVALID_ARGUMENT\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_CONTEXT_OVERFLOW);
    CU_ASSERT_EQUAL(cls(400,
                        "{\"error\":{\"code\":400,\"message\":\"* GenerateContentRequest.contents:"
                        " contents is not specified\\n\",\"status\":\"INVALID_ARGUMENT\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_BAD_REQUEST);
    CU_ASSERT_EQUAL(cls(403,
                        "{\"error\":{\"code\":403,\"message\":\"Method doesn't allow unregistered "
                        "callers.\",\"status\":\"PERMISSION_DENIED\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_AUTH_FAILED);
    CU_ASSERT_EQUAL(cls(404,
                        "{\"error\":{\"code\":404,\"message\":\"models/gemini-9 is not found for "
                        "API version v1beta, or is not supported for generateContent.\","
                        "\"status\":\"NOT_FOUND\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_MODEL_UNAVAILABLE);
    CU_ASSERT_EQUAL(cls(503,
                        "{\"error\":{\"code\":503,\"message\":\"The model is overloaded. Please "
                        "try again later.\",\"status\":\"UNAVAILABLE\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_MODEL_UNAVAILABLE);
    CU_ASSERT_EQUAL(cls(500,
                        "{\"error\":{\"code\":500,\"message\":\"An internal error has occurred.\","
                        "\"status\":\"INTERNAL\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_PROVIDER_5XX);
    CU_ASSERT_EQUAL(cls(504,
                        "{\"error\":{\"code\":504,\"message\":\"Deadline expired.\",\"status\":"
                        "\"DEADLINE_EXCEEDED\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_TIMEOUT);
    CU_ASSERT_EQUAL(cls(400,
                        "{\"error\":{\"code\":400,\"message\":\"User location is not supported "
                        "for the API use.\",\"status\":\"FAILED_PRECONDITION\"}}",
                        msg, sizeof(msg)),
                    CANON_FAIL_MODEL_UNAVAILABLE);
    /* Not Google's shape: the default rules. */
    CU_ASSERT_EQUAL(cls(502, "<html>bad gateway</html>", msg, sizeof(msg)),
                    CANON_FAIL_PROVIDER_5XX);
    CU_ASSERT_EQUAL(cls(429, "", msg, sizeof(msg)), CANON_FAIL_RATE_LIMITED);
}

/* -------------------------------------------------------------- embeddings */

static void test_embeddings(void)
{
    struct dp_provider prov = {.name = "gem",
                               .driver = "gemini",
                               .base_url = "https://generativelanguage.googleapis.com/v1beta",
                               .credential = "k",
                               .options = json_object()};
    struct drv_target t = {.provider = &prov, .model = "gemini-embedding-001"};
    const char *inputs[] = {"hello", "world"};
    struct canon_embed_req er = {
        .model = "x", .inputs = inputs, .ninputs = 2, .dimensions = 768, .user = "u"};
    struct drv_request q = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(drv_gemini.build_embed(&t, &er, &q, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(q.url, "https://generativelanguage.googleapis.com/v1beta/models/"
                                  "gemini-embedding-001:batchEmbedContents");
    CU_ASSERT(has_header(&q, "x-goog-api-key: k"));
    json_t *doc = json_loads(q.body, 0, NULL);
    json_t *want = json_loads(
        "{\"requests\":[{\"model\":\"models/gemini-embedding-001\",\"content\":{\"parts\":"
        "[{\"text\":\"hello\"}]},\"outputDimensionality\":768},{\"model\":"
        "\"models/gemini-embedding-001\",\"content\":{\"parts\":[{\"text\":\"world\"}]},"
        "\"outputDimensionality\":768}]}",
        0, NULL);
    CU_ASSERT(json_equal(doc, want));
    json_decref(doc);
    json_decref(want);
    drv_request_free(&q);
    /* The model is a path segment: percent-encoded. */
    t.model = "models/my model#1";
    CU_ASSERT_EQUAL_FATAL(drv_gemini.build_embed(&t, &er, &q, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(q.url, "https://generativelanguage.googleapis.com/v1beta/models/"
                                  "my%20model%231:batchEmbedContents");
    CU_ASSERT_PTR_NOT_NULL(strstr(q.body, "\"models/my model#1\""));
    drv_request_free(&q);

    const char *body = "{\"embeddings\":[{\"values\":[0.25,-0.5,1]},{\"values\":[0,0.125,2]}]}";
    struct canon_embed_resp e = {0};
    char msg[128];
    CU_ASSERT_EQUAL_FATAL(drv_gemini.parse_embed(body, strlen(body), &e, msg, sizeof(msg)), GW_OK);
    CU_ASSERT_EQUAL(e.nvec, 2);
    CU_ASSERT_EQUAL(e.dim, 3);
    CU_ASSERT_DOUBLE_EQUAL(e.values[1], -0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(e.values[5], 2.0, 1e-12);
    CU_ASSERT_EQUAL(e.usage.have, 0);
    canon_embed_resp_free(&e);
    body = "{\"embeddings\":[{\"values\":[1,2]},{\"values\":[1]}]}";
    CU_ASSERT_EQUAL(drv_gemini.parse_embed(body, strlen(body), &e, msg, sizeof(msg)), GW_EINVAL);
    CU_ASSERT_EQUAL(drv_gemini.parse_embed("nope", 4, &e, msg, sizeof(msg)), GW_EINVAL);
    json_decref(prov.options);
}

static void test_registered(void)
{
    CU_ASSERT_PTR_EQUAL(dp_driver_find("gemini"), &drv_gemini);
    unsigned want = DRV_CAP_CHAT | DRV_CAP_EMBEDDINGS | DRV_CAP_VISION | DRV_CAP_TOOLS |
                    DRV_CAP_JSON_MODE | DRV_CAP_REASONING;
    CU_ASSERT_EQUAL(drv_gemini.info->caps, want);
}

static CU_TestInfo tests[] = {
    {"stream: thoughts, text, two calls, cached usage", test_stream},
    {"whole: the same from one response", test_whole},
    {"usage counts bounded before they are added", test_usage_bounds},
    {"finish reasons", test_stop_reasons},
    {"blocked prompt", test_blocked_prompt},
    {"broken and truncated answers", test_broken},
    {"oversize answers", test_oversize},
    {"the sink stops", test_sink_stops},
    {"build_chat body", test_build_chat},
    {"refusals name the field", test_refusals},
    {"classify Google errors", test_classify},
    {"embeddings", test_embeddings},
    {"registered", test_registered},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
