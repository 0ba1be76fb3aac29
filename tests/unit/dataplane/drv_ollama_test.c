/* Tests for dataplane/drivers/ollama.c: Ollama /api/chat answers (NDJSON
 * lines and whole objects, shaped as in Ollama's API reference) parse to
 * the same canonical transcript whole, byte by byte and in random splits;
 * broken, oversize and truncated answers end in ERROR; the request body is
 * checked field by field; unsupported input is a 400 naming the field;
 * error bodies classify. (canon_record writes each CHUNK delta of a run as
 * its own quoted string: "a""b".) */
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
    canon_record_check(&drv_ollama, stream, body, strlen(body), want);
}

/* ---------------------------------------------------------------- fixtures */

/* Thinking in two lines, content in two, both tool calls in one line (the
 * second with the id newer servers give), then the done line. */
static const char STREAM[] =
    "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.101Z\",\"message\":"
    "{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\"The user wants\"},\"done\":false}\n"
    "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.142Z\",\"message\":"
    "{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\" two forecasts.\\n\"},"
    "\"done\":false}\n"
    "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.181Z\",\"message\":"
    "{\"role\":\"assistant\",\"content\":\"Checking \"},\"done\":false}\r\n"
    "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.220Z\",\"message\":"
    "{\"role\":\"assistant\",\"content\":\"Paris & Tōkyō.\"},\"done\":false}\n"
    "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:01.930Z\",\"message\":"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":"
    "\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"unit\":\"celsius\"}}},"
    "{\"id\":\"call_k3v9\",\"function\":{\"index\":1,\"name\":\"get_weather\",\"arguments\":"
    "{\"city\":\"Tokyo\",\"days\":[1,2]}}}]},\"done\":false}\n"
    "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:02.004Z\",\"message\":"
    "{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,"
    "\"total_duration\":4883583458,\"load_duration\":1334875,\"prompt_eval_count\":412,"
    "\"prompt_eval_duration\":342546000,\"eval_count\":96,\"eval_duration\":4535599000}\n";

static const char STREAM_WANT[] = "START id=- model=qwen3:8b\n"
                                  "REASONING \"The user wants two forecasts.\\n\"\n"
                                  "TEXT \"Checking \"\"Paris & Tōkyō.\"\n"
                                  "TOOL 0 id=call_0 name=get_weather\n"
                                  "ARGS 0 {\"city\":\"Paris\",\"unit\":\"celsius\"}\n"
                                  "TOOL_END 0\n"
                                  "TOOL 1 id=call_k3v9 name=get_weather\n"
                                  "ARGS 1 {\"city\":\"Tokyo\",\"days\":[1,2]}\n"
                                  "TOOL_END 1\n"
                                  "USAGE in=412 cr=0 cw5=0 cw1h=0 out=96 rs=0\n"
                                  "DONE tool_use\n";

static const char WHOLE_BODY[] =
    "{\n"
    "  \"model\": \"llama3.2\",\n"
    "  \"created_at\": \"2024-07-22T20:33:28.123648Z\",\n"
    "  \"message\": {\n"
    "    \"role\": \"assistant\",\n"
    "    \"content\": \"Let me check.\",\n"
    "    \"thinking\": \"Two lookups.\",\n"
    "    \"tool_calls\": [\n"
    "      {\"function\": {\"name\": \"get_current_weather\", \"arguments\": {\"format\": "
    "\"celsius\", \"location\": \"Paris, FR\"}}},\n"
    "      {\"function\": {\"name\": \"get_time\", \"arguments\": {}}}\n"
    "    ]\n"
    "  },\n"
    "  \"done_reason\": \"stop\",\n"
    "  \"done\": true,\n"
    "  \"total_duration\": 885095291,\n"
    "  \"load_duration\": 3753500,\n"
    "  \"prompt_eval_count\": 122,\n"
    "  \"prompt_eval_duration\": 328493000,\n"
    "  \"eval_count\": 33,\n"
    "  \"eval_duration\": 552222000\n"
    "}\n";

static const char WHOLE_WANT[] = "START id=- model=llama3.2\n"
                                 "REASONING \"Two lookups.\"\n"
                                 "TEXT \"Let me check.\"\n"
                                 "TOOL 0 id=call_0 name=get_current_weather\n"
                                 "ARGS 0 {\"format\":\"celsius\",\"location\":\"Paris, FR\"}\n"
                                 "TOOL_END 0\n"
                                 "TOOL 1 id=call_1 name=get_time\n"
                                 "ARGS 1 {}\n"
                                 "TOOL_END 1\n"
                                 "USAGE in=122 cr=0 cw5=0 cw1h=0 out=33 rs=0\n"
                                 "DONE tool_use\n";

static void test_stream(void)
{
    check_parse(1, STREAM, STREAM_WANT);
}

static void test_whole(void)
{
    check_parse(0, WHOLE_BODY, WHOLE_WANT);
}

static void test_stop_reasons(void)
{
    check_parse(1,
                "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"Once\"},"
                "\"done\":false}\n"
                "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},"
                "\"done_reason\":\"length\",\"done\":true,\"prompt_eval_count\":5,"
                "\"eval_count\":1}\n",
                "START id=- model=m\nTEXT \"Once\"\nUSAGE in=5 cr=0 cw5=0 cw1h=0 out=1 rs=0\n"
                "DONE max_tokens\n");
    /* The done line without its newline at the end of the body; no usage. */
    check_parse(1,
                "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},"
                "\"done\":false}\n"
                "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},"
                "\"done_reason\":\"stop\",\"done\":true}",
                "START id=- model=m\nTEXT \"Hi\"\nDONE end\n");
    /* Blank lines are skipped; data after the done line is not read. */
    check_parse(1,
                "\n{\"model\":\"m\",\"message\":{\"content\":\"a\"},\"done\":false}\n\n"
                "{\"model\":\"m\",\"done\":true,\"eval_count\":1}\n{garbage\n",
                "START id=- model=m\nTEXT \"a\"\nUSAGE in=0 cr=0 cw5=0 cw1h=0 out=1 rs=0\n"
                "DONE end\n");
    /* Arguments as an object in a string are the same call. */
    check_parse(
        0,
        "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\","
        "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]},"
        "\"done\":true,\"done_reason\":\"stop\"}",
        "START id=- model=m\nTOOL 0 id=call_0 name=f\nARGS 0 {\"a\":1}\nTOOL_END 0\n"
        "DONE tool_use\n");
}

static void test_broken(void)
{
    /* Truncated: no done line. */
    const char *end = strstr(STREAM, "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:"
                                     "02.004Z\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(end);
    char *cut = strndup(STREAM, (size_t)(end - STREAM));
    check_parse(1, cut,
                "START id=- model=qwen3:8b\n"
                "REASONING \"The user wants two forecasts.\\n\"\n"
                "TEXT \"Checking \"\"Paris & Tōkyō.\"\n"
                "TOOL 0 id=call_0 name=get_weather\n"
                "ARGS 0 {\"city\":\"Paris\",\"unit\":\"celsius\"}\n"
                "TOOL_END 0\n"
                "TOOL 1 id=call_k3v9 name=get_weather\n"
                "ARGS 1 {\"city\":\"Tokyo\",\"days\":[1,2]}\n"
                "TOOL_END 1\n"
                "ERROR network status=0\n");
    free(cut);
    /* Cut inside the done line: a line the connection cut. */
    cut = strndup(STREAM, strlen(STREAM) - 30);
    char *t = canon_record_run(&drv_ollama, 1, cut, strlen(cut), CANON_SPLIT_RANDOM, 3, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "TOOL_END 1\nERROR network status=0\n"));
    free(t);
    free(cut);
    /* An error line in the stream. */
    check_parse(1,
                "{\"model\":\"m\",\"message\":{\"content\":\"a\"},\"done\":false}\n"
                "{\"error\":\"an error was encountered while running the model: unexpected "
                "EOF\"}\n",
                "START id=- model=m\nTEXT \"a\"\nERROR provider_5xx status=0\n");
    check_parse(1, "{\"error\":\"model 'llama9' not found\"}\n",
                "ERROR model_unavailable status=0\n");
    /* Malformed and non-object lines. */
    check_parse(1, "{\"model\":\"m\",\"message\":{\"content\":\"a\"}}\n{\"model\":\n",
                "START id=- model=m\nTEXT \"a\"\nERROR provider_5xx status=0\n");
    check_parse(1, "[1]\n", "ERROR provider_5xx status=0\n");
    check_parse(1,
                "{\"model\":\"m\",\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"f\","
                "\"arguments\":[1]}}]}}\n",
                "START id=- model=m\nERROR provider_5xx status=0\n");
    check_parse(1, "{\"model\":\"m\",\"message\":{\"tool_calls\":[{\"function\":{}}]}}\n",
                "START id=- model=m\nERROR provider_5xx status=0\n");
    /* Empty bodies; a whole answer that is not done. */
    check_parse(1, "", "ERROR network status=0\n");
    check_parse(0, "", "ERROR empty_output status=0\n");
    check_parse(0, "not json", "ERROR provider_5xx status=0\n");
    check_parse(0, "{\"model\":\"m\",\"message\":{\"content\":\"a\"},\"done\":false}",
                "START id=- model=m\nTEXT \"a\"\nERROR provider_5xx status=0\n");
    check_parse(0, "{\"error\":\"model requires more system memory (12 GiB) than is available\"}",
                "ERROR provider_5xx status=0\n");
}

static void test_oversize(void)
{
    size_t n = DRV_MAX_EVENT + 64;
    char *big = malloc(n + 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memcpy(big, "{\"x\":\"", 6);
    memset(big + 6, 'a', n - 6);
    big[n] = '\n';
    big[n + 1] = '\0';
    static const size_t splits[] = {CANON_SPLIT_WHOLE, CANON_SPLIT_RANDOM};
    for (size_t i = 0; i < sizeof(splits) / sizeof(*splits); i++) {
        char *t = canon_record_run(&drv_ollama, 1, big, n + 1, splits[i], 5, 0);
        CU_ASSERT_STRING_EQUAL(t, "ERROR provider_5xx status=0\n");
        free(t);
    }
    /* Without the newline too. */
    char *t = canon_record_run(&drv_ollama, 1, big, n, CANON_SPLIT_RANDOM, 9, 0);
    CU_ASSERT_STRING_EQUAL(t, "ERROR provider_5xx status=0\n");
    free(t);
    free(big);
    size_t m = DRV_MAX_BODY + 16;
    char *huge = malloc(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(huge);
    memset(huge, ' ', m);
    t = canon_record_run(&drv_ollama, 0, huge, m, CANON_SPLIT_WHOLE, 0, 0);
    CU_ASSERT_STRING_EQUAL(t, "ERROR provider_5xx status=0\n");
    free(t);
    free(huge);
}

static void test_sink_stops(void)
{
    canon_record_stops(&drv_ollama, 1, STREAM, strlen(STREAM), CANON_SPLIT_RANDOM, 13, 12);
    canon_record_stops(&drv_ollama, 0, WHOLE_BODY, strlen(WHOLE_BODY), CANON_SPLIT_WHOLE, 0, 12);
}

/* ------------------------------------------------------------------ build */

struct fixture {
    struct dp_provider prov;
    struct drv_target t;
    struct canon_req *r;
    struct canon_part sys[2];
    struct canon_part u1[4];
    struct canon_part a1[5];
    struct canon_part res_ok[2], res_err;
    struct canon_part u2[3];
    struct canon_part s3;
    struct canon_message msgs[4];
    struct canon_tool tools[2];
    json_t *schema, *fschema;
};

static const char *STOPS[] = {"END", "\n\n"};

static void fixture_init(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    f->prov.name = "local";
    f->prov.driver = "ollama";
    f->prov.base_url = "http://localhost:11434";
    f->prov.options = json_object();
    f->t.provider = &f->prov;
    f->t.model = "qwen3:8b";
    f->t.request_id = "req-7";
    f->r = canon_req_new(json_object());
    CU_ASSERT_PTR_NOT_NULL_FATAL(f->r);
    struct canon_req *r = f->r;
    f->sys[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "You are terse."};
    f->sys[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Use metric units."};
    r->system = f->sys;
    r->nsystem = 2;
    f->u1[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "What is in this image?"};
    f->u1[1] = (struct canon_part){
        .type = CANON_PART_IMAGE, .media_type = "image/png", .data = "iVBORw0KGgo="};
    f->u1[2] = (struct canon_part){.type = CANON_PART_TEXT, .text = "And the weather?"};
    f->u1[3] = (struct canon_part){
        .type = CANON_PART_IMAGE, .media_type = "image/jpeg", .data = "/9j/4AAQ"};
    f->a1[0] = (struct canon_part){.type = CANON_PART_THINKING, .text = "A cat. Then weather."};
    f->a1[1] = (struct canon_part){.type = CANON_PART_REDACTED_THINKING, .text = "opaque"};
    f->a1[2] = (struct canon_part){.type = CANON_PART_TEXT, .text = "A cat."};
    f->a1[3] = (struct canon_part){.type = CANON_PART_TOOL_CALL,
                                   .id = "call_a",
                                   .name = "get_weather",
                                   .arguments = "{\"city\":\"Paris\"}"};
    f->a1[4] = (struct canon_part){
        .type = CANON_PART_TOOL_CALL, .id = "call_b", .name = "get_time", .arguments = ""};
    f->res_ok[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "18C, "};
    f->res_ok[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "clear"};
    f->res_err = (struct canon_part){.type = CANON_PART_TEXT, .text = "service down"};
    f->u2[0] = (struct canon_part){
        .type = CANON_PART_TOOL_RESULT, .id = "call_a", .content = f->res_ok, .ncontent = 2};
    f->u2[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Summarize."};
    f->u2[2] = (struct canon_part){.type = CANON_PART_TOOL_RESULT,
                                   .id = "call_b",
                                   .content = &f->res_err,
                                   .ncontent = 1,
                                   .is_error = 1};
    f->s3 = (struct canon_part){.type = CANON_PART_TEXT, .text = "Answer in French."};
    f->msgs[0] = (struct canon_message){CANON_ROLE_USER, f->u1, 4};
    f->msgs[1] = (struct canon_message){CANON_ROLE_ASSISTANT, f->a1, 5};
    f->msgs[2] = (struct canon_message){CANON_ROLE_USER, f->u2, 3};
    f->msgs[3] = (struct canon_message){CANON_ROLE_SYSTEM, &f->s3, 1};
    r->messages = f->msgs;
    r->nmessages = 4;
    f->schema = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                           "\"required\":[\"city\"]}",
                           0, NULL);
    f->tools[0] = (struct canon_tool){.name = "get_weather",
                                      .description = "Current weather",
                                      .parameters = f->schema,
                                      .strict = -1};
    f->tools[1] = (struct canon_tool){.name = "get_time", .strict = -1};
    r->tools = f->tools;
    r->ntools = 2;
    r->tool_choice = CANON_TC_AUTO;
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
    r->format_schema = f->fschema;
    r->reasoning_effort = "medium";
    r->user = "end-user-1";
}

static void fixture_free(struct fixture *f)
{
    canon_req_free(f->r);
    json_decref(f->prov.options);
    json_decref(f->schema);
    json_decref(f->fschema);
}

static int has_header(const struct drv_request *q, const char *prefix)
{
    for (const struct curl_slist *l = q->headers; l; l = l->next)
        if (strncmp(l->data, prefix, strlen(prefix)) == 0)
            return 1;
    return 0;
}

static json_t *build(struct fixture *f, struct drv_request *q, struct canon_err *err, int *rc)
{
    memset(q, 0, sizeof(*q));
    memset(err, 0, sizeof(*err));
    *rc = drv_ollama.build_chat(&f->t, f->r, q, err);
    if (*rc != GW_OK)
        return NULL;
    json_t *doc = json_loadb(q->body, q->body_len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL(doc);
    return doc;
}

static void test_build_chat(void)
{
    struct fixture f;
    fixture_init(&f);
    struct drv_request q;
    struct canon_err err;
    int rc;
    json_t *doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_STRING_EQUAL(q.url, "http://localhost:11434/api/chat");
    CU_ASSERT_EQUAL(q.stream, 0);
    CU_ASSERT(has_header(&q, "Content-Type: application/json"));
    CU_ASSERT(has_header(&q, "x-request-id: req-7"));
    CU_ASSERT(!has_header(&q, "Authorization"));
    expect_json(doc, "model", "\"qwen3:8b\"");
    expect_json(doc, "stream", "false");
    expect_json(doc, "messages",
                "["
                "{\"role\":\"system\",\"content\":\"You are terse.\\n\\nUse metric units.\"},"
                "{\"role\":\"user\",\"content\":\"What is in this image?\\n\\nAnd the weather?\","
                "\"images\":[\"iVBORw0KGgo=\",\"/9j/4AAQ\"]},"
                "{\"role\":\"assistant\",\"content\":\"A cat.\",\"thinking\":"
                "\"A cat. Then weather.\",\"tool_calls\":["
                "{\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}},"
                "{\"function\":{\"name\":\"get_time\",\"arguments\":{}}}]},"
                "{\"role\":\"tool\",\"tool_name\":\"get_weather\",\"content\":\"18C, clear\"},"
                "{\"role\":\"tool\",\"tool_name\":\"get_time\",\"content\":"
                "\"[tool error] service down\"},"
                "{\"role\":\"user\",\"content\":\"Summarize.\"},"
                "{\"role\":\"system\",\"content\":\"Answer in French.\"}]");
    expect_json(doc, "tools",
                "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
                "\"Current weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                "{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
                "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":"
                "{\"type\":\"object\",\"properties\":{}}}}]");
    expect_json(doc, "options",
                "{\"num_predict\":1000,\"temperature\":0.5,\"top_p\":0.25,\"top_k\":40,"
                "\"stop\":[\"END\",\"\\n\\n\"],\"seed\":7,\"presence_penalty\":0.125,"
                "\"frequency_penalty\":-0.5}");
    expect_json(doc, "format",
                "{\"type\":\"object\",\"properties\":{\"summary\":{\"type\":\"string\"}}}");
    expect_json(doc, "think", "true");
    CU_ASSERT_PTR_NULL(json_object_get(doc, "tool_choice"));
    CU_ASSERT_PTR_NULL(json_object_get(doc, "user"));
    json_decref(doc);
    drv_request_free(&q);

    /* Streaming, json_object, thinking off, a credential, effort levels. */
    f.r->stream = 1;
    f.r->format = CANON_FMT_JSON_OBJECT;
    f.r->reasoning_effort = NULL;
    f.r->reasoning_off = 1;
    f.r->tool_choice = CANON_TC_UNSET;
    f.prov.credential = "olk-1";
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_EQUAL(q.stream, 1);
    CU_ASSERT(has_header(&q, "Authorization: Bearer olk-1"));
    expect_json(doc, "stream", "true");
    expect_json(doc, "format", "\"json\"");
    expect_json(doc, "think", "false");
    json_decref(doc);
    drv_request_free(&q);
    json_object_set_new(f.prov.options, "think_levels", json_true());
    f.r->reasoning_off = 0;
    f.r->reasoning_budget = 20000;
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    expect_json(doc, "think", "\"high\"");
    json_decref(doc);
    drv_request_free(&q);

    /* Nothing optional: no options, format, think or tools. */
    f.r->ntools = 0;
    f.r->has_temperature = f.r->has_top_p = f.r->has_top_k = f.r->has_max_tokens = 0;
    f.r->has_seed = f.r->has_presence_penalty = f.r->has_frequency_penalty = 0;
    f.r->nstop = 0;
    f.r->format = CANON_FMT_TEXT;
    f.r->reasoning_budget = 0;
    f.r->nsystem = 0;
    f.r->nmessages = 1;
    f.u1[1].type = f.u1[3].type = CANON_PART_TEXT;
    f.u1[1].text = f.u1[3].text = "";
    doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    char *s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    CU_ASSERT_STRING_EQUAL(s, "{\"messages\":[{\"content\":\"What is in this image?\\n\\nAnd the "
                              "weather?\",\"role\":\"user\"}],\"model\":\"qwen3:8b\",\"stream\":"
                              "true}");
    free(s);
    json_decref(doc);
    drv_request_free(&q);
    fixture_free(&f);
}

static void test_refusals(void)
{
    struct fixture f;
    fixture_init(&f);
    f.r->tool_choice = CANON_TC_REQUIRED;
    expect_refusal(&drv_ollama, &f.t, f.r, "tool_choice", "force a tool call");
    f.r->tool_choice = CANON_TC_NAMED;
    f.r->tool_choice_name = "get_weather";
    expect_refusal(&drv_ollama, &f.t, f.r, "tool_choice", "force a tool call");
    /* none is honoured: no tools are offered. */
    f.r->tool_choice = CANON_TC_NONE;
    struct drv_request q;
    struct canon_err err;
    int rc;
    json_t *doc = build(&f, &q, &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_OK);
    CU_ASSERT_PTR_NOT_NULL(doc);
    CU_ASSERT_PTR_NULL(json_object_get(doc, "tools"));
    json_decref(doc);
    drv_request_free(&q);
    f.r->tool_choice = CANON_TC_AUTO;

    f.r->parallel_tool_calls = 0;
    expect_refusal(&drv_ollama, &f.t, f.r, "parallel_tool_calls", "one tool call per turn");
    f.r->parallel_tool_calls = 1;

    f.u1[1].url = "https://example.com/cat.png";
    expect_refusal(&drv_ollama, &f.t, f.r, "messages", "http(s) URL");
    f.u1[1].url = NULL;

    f.u2[2].id = "call_nope";
    expect_refusal(&drv_ollama, &f.t, f.r, "messages", "call_nope");
    f.u2[2].id = "call_b";

    f.u2[0].content = &f.u1[1];
    f.u2[0].ncontent = 1;
    expect_refusal(&drv_ollama, &f.t, f.r, "messages", "only text in tool results");
    f.u2[0].content = f.res_ok;
    f.u2[0].ncontent = 2;

    f.a1[3].arguments = "\"x\"";
    expect_refusal(&drv_ollama, &f.t, f.r, "messages", "JSON object");
    f.a1[3].arguments = "{}";

    static const char *const names[CANON_F_COUNT] = {[CANON_F_TOOL_CHOICE] = "tool_choice.type"};
    f.r->field_names = names;
    f.r->tool_choice = CANON_TC_REQUIRED;
    expect_refusal(&drv_ollama, &f.t, f.r, "tool_choice.type", "force a tool call");
    fixture_free(&f);
}

/* ---------------------------------------------------------------- classify */

static enum canon_failure cls(int status, const char *body, char *msg, size_t msglen)
{
    enum canon_failure f = CANON_FAIL_COUNT;
    drv_ollama.classify(status, body, strlen(body), &f, msg, msglen);
    return f;
}

static void test_classify(void)
{
    char msg[256];
    CU_ASSERT_EQUAL(cls(404, "{\"error\":\"model \\\"llama9\\\" not found, try pulling it first\"}",
                        msg, sizeof(msg)),
                    CANON_FAIL_MODEL_UNAVAILABLE);
    CU_ASSERT_STRING_EQUAL(msg, "model \"llama9\" not found, try pulling it first");
    CU_ASSERT_EQUAL(cls(400, "{\"error\":\"gemma:2b does not support tools\"}", msg, sizeof(msg)),
                    CANON_FAIL_UNSUPPORTED_INPUT);
    CU_ASSERT_EQUAL(cls(400, "{\"error\":\"invalid options: num_predictt\"}", msg, sizeof(msg)),
                    CANON_FAIL_BAD_REQUEST);
    CU_ASSERT_EQUAL(cls(500,
                        "{\"error\":\"model requires more system memory (12.0 GiB) than is "
                        "available (8.0 GiB)\"}",
                        msg, sizeof(msg)),
                    CANON_FAIL_PROVIDER_5XX);
    CU_ASSERT_EQUAL(cls(401, "{\"error\":\"unauthorized\"}", msg, sizeof(msg)),
                    CANON_FAIL_AUTH_FAILED);
    CU_ASSERT_EQUAL(cls(429, "{\"error\":\"too many requests\"}", msg, sizeof(msg)),
                    CANON_FAIL_RATE_LIMITED);
    CU_ASSERT_EQUAL(cls(502, "", msg, sizeof(msg)), CANON_FAIL_PROVIDER_5XX);
}

/* -------------------------------------------------------------- embeddings */

static void test_embeddings(void)
{
    struct dp_provider prov = {.name = "local",
                               .driver = "ollama",
                               .base_url = "http://127.0.0.1:11434",
                               .options = json_object()};
    struct drv_target t = {.provider = &prov, .model = "all-minilm"};
    const char *inputs[] = {"Why is the sky blue?", "Why is the grass green?"};
    struct canon_embed_req er = {.model = "x", .inputs = inputs, .ninputs = 2, .dimensions = 3};
    struct drv_request q = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(drv_ollama.build_embed(&t, &er, &q, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(q.url, "http://127.0.0.1:11434/api/embed");
    json_t *doc = json_loads(q.body, 0, NULL);
    json_t *want = json_loads("{\"model\":\"all-minilm\",\"input\":[\"Why is the sky blue?\","
                              "\"Why is the grass green?\"],\"dimensions\":3}",
                              0, NULL);
    CU_ASSERT(json_equal(doc, want));
    json_decref(doc);
    json_decref(want);
    drv_request_free(&q);

    const char *body = "{\"model\":\"all-minilm\",\"embeddings\":[[0.010071029,-0.0017594862,"
                       "0.05007221],[-0.0098027075,0.06042469,0.025257962]],"
                       "\"total_duration\":14143917,\"load_duration\":1019500,"
                       "\"prompt_eval_count\":8}";
    struct canon_embed_resp e = {0};
    char msg[128];
    CU_ASSERT_EQUAL_FATAL(drv_ollama.parse_embed(body, strlen(body), &e, msg, sizeof(msg)), GW_OK);
    CU_ASSERT_EQUAL(e.nvec, 2);
    CU_ASSERT_EQUAL(e.dim, 3);
    CU_ASSERT_DOUBLE_EQUAL(e.values[4], 0.06042469, 1e-9);
    CU_ASSERT_EQUAL(e.usage.have, 1);
    CU_ASSERT_EQUAL(e.usage.input, 8);
    CU_ASSERT_STRING_EQUAL(e.model, "all-minilm");
    canon_embed_resp_free(&e);
    body = "{\"embeddings\":[]}";
    CU_ASSERT_EQUAL(drv_ollama.parse_embed(body, strlen(body), &e, msg, sizeof(msg)), GW_EINVAL);
    json_decref(prov.options);
}

static void test_registered(void)
{
    CU_ASSERT_PTR_EQUAL(dp_driver_find("ollama"), &drv_ollama);
    unsigned want = DRV_CAP_CHAT | DRV_CAP_EMBEDDINGS | DRV_CAP_VISION | DRV_CAP_TOOLS |
                    DRV_CAP_JSON_MODE | DRV_CAP_REASONING;
    CU_ASSERT_EQUAL(drv_ollama.info->caps, want);
}

static CU_TestInfo tests[] = {
    {"stream: thinking, content, two calls, done", test_stream},
    {"whole: the same from one object", test_whole},
    {"done reasons and line edges", test_stop_reasons},
    {"broken and truncated answers", test_broken},
    {"oversize answers", test_oversize},
    {"the sink stops", test_sink_stops},
    {"build_chat body", test_build_chat},
    {"refusals name the field", test_refusals},
    {"classify error bodies", test_classify},
    {"embeddings", test_embeddings},
    {"registered", test_registered},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
