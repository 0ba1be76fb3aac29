/* Tests for dataplane/facades/responses.c: requests parsed into the
 * canonical form (and every refusal a 400 naming the field), the stream
 * encoder's exact event sequence, and the non-stream render. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_facade.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"

static const struct dp_facade *F = &fc_responses;

static struct canon_req *parse_ok(const char *body)
{
    json_t *j = json_loads(body, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    struct canon_req *r = canon_req_new(j);
    struct canon_err err = {0};
    int rc = F->parse(r, &err);
    if (rc != GW_OK)
        fprintf(stderr, "\nparse failed: %s (%s)\n", err.message, err.param);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    return r;
}

static void parse_bad(const char *body, const char *param)
{
    json_t *j = json_loads(body, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    struct canon_req *r = canon_req_new(j);
    struct canon_err err = {0};
    int rc = F->parse(r, &err);
    CU_ASSERT_EQUAL(rc, GW_EINVAL);
    CU_ASSERT_EQUAL(err.status, 400);
    if (strcmp(err.param, param) != 0)
        fprintf(stderr, "\n%s\n  param %s, want %s (%s)\n", body, err.param, param, err.message);
    CU_ASSERT_STRING_EQUAL(err.param, param);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, param));
    canon_req_free(r);
}

/* ------------------------------------------------------------------ parse */

static void test_parse_string_input(void)
{
    struct canon_req *r = parse_ok(
        "{\"model\":\"fast\",\"input\":\"Hello\",\"instructions\":\"Be brief.\",\"stream\":true,"
        "\"temperature\":0.2,\"top_p\":0.9,\"max_output_tokens\":100,\"user\":\"u1\","
        "\"store\":false,\"parallel_tool_calls\":false,\"truncation\":\"disabled\","
        "\"text\":{\"format\":{\"type\":\"json_object\"}},\"reasoning\":{\"effort\":\"low\","
        "\"summary\":\"auto\"},\"include\":[\"reasoning.encrypted_content\"],\"background\":"
        "false}");
    CU_ASSERT_STRING_EQUAL(r->model, "fast");
    CU_ASSERT_EQUAL(r->stream, 1);
    CU_ASSERT_EQUAL(r->nsystem, 1);
    CU_ASSERT_STRING_EQUAL(r->system[0].text, "Be brief.");
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 1);
    CU_ASSERT_EQUAL(r->messages[0].role, CANON_ROLE_USER);
    CU_ASSERT_EQUAL(r->messages[0].nparts, 1);
    CU_ASSERT_STRING_EQUAL(r->messages[0].parts[0].text, "Hello");
    CU_ASSERT(r->has_temperature && r->temperature == 0.2);
    CU_ASSERT(r->has_top_p && r->top_p == 0.9);
    CU_ASSERT(r->has_max_tokens && r->max_tokens == 100);
    CU_ASSERT_STRING_EQUAL(r->user, "u1");
    CU_ASSERT_EQUAL(r->parallel_tool_calls, 0);
    CU_ASSERT_EQUAL(r->format, CANON_FMT_JSON_OBJECT);
    CU_ASSERT_STRING_EQUAL(r->reasoning_effort, "low");
    /* Refusals downstream name the client's fields. */
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_MAX_TOKENS), "max_output_tokens");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_RESPONSE_FORMAT), "text.format");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_REASONING), "reasoning.effort");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_MESSAGES), "input");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_SYSTEM), "instructions");
    canon_req_free(r);
}

/* A tool-calling conversation echoed back the way the SDKs do it. */
static const char CONVERSATION[] =
    "{\"model\":\"m\",\"instructions\":\"Sys.\",\"input\":["
    " {\"role\":\"developer\",\"content\":\"Dev.\"},"
    " {\"type\":\"message\",\"role\":\"user\",\"content\":["
    "  {\"type\":\"input_text\",\"text\":\"Weather in Paris and the time?\"},"
    "  {\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,iVBORw0KGgo=\","
    "   \"detail\":\"high\"},"
    "  {\"type\":\"input_image\",\"image_url\":\"https://example.test/a.jpg\"}]},"
    " {\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":"
    "\"A\"},{\"type\":\"summary_text\",\"text\":\"B\"}],\"encrypted_content\":\"SIG\"},"
    " {\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\","
    "  \"content\":[{\"type\":\"output_text\",\"text\":\"Checking.\",\"annotations\":[],"
    "\"logprobs\":[]}]},"
    " {\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"completed\",\"call_id\":\"call_A\","
    "  \"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
    " {\"type\":\"function_call\",\"call_id\":\"call_B\",\"name\":\"get_time\",\"arguments\":\"\"},"
    " {\"type\":\"function_call_output\",\"call_id\":\"call_A\",\"output\":\"18C\"},"
    " {\"type\":\"function_call_output\",\"call_id\":\"call_B\",\"output\":["
    "  {\"type\":\"input_text\",\"text\":\"12:00\"}]},"
    " {\"role\":\"user\",\"content\":\"Thanks\"},"
    " {\"role\":\"system\",\"content\":\"Be terse.\"},"
    " {\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":\"OPAQUE\"},"
    " {\"type\":\"reasoning\",\"summary\":[]},"
    " {\"role\":\"assistant\",\"content\":\"Bye.\"}],"
    "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather\","
    " \"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}},"
    " \"strict\":true},{\"type\":\"function\",\"name\":\"get_time\",\"parameters\":null}],"
    "\"tool_choice\":{\"type\":\"function\",\"name\":\"get_time\"},"
    "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"out\",\"schema\":{\"type\":"
    "\"object\"},\"strict\":true}},\"reasoning\":{\"effort\":\"none\"},"
    "\"safety_identifier\":\"sid\"}";

static void test_parse_conversation(void)
{
    struct canon_req *r = parse_ok(CONVERSATION);
    CU_ASSERT_EQUAL_FATAL(r->nsystem, 2);
    CU_ASSERT_STRING_EQUAL(r->system[0].text, "Sys.");
    CU_ASSERT_STRING_EQUAL(r->system[1].text, "Dev.");
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 6);
    const struct canon_message *m = r->messages;
    /* user: text + two images */
    CU_ASSERT_EQUAL(m[0].role, CANON_ROLE_USER);
    CU_ASSERT_EQUAL_FATAL(m[0].nparts, 3);
    CU_ASSERT_EQUAL(m[0].parts[1].type, CANON_PART_IMAGE);
    CU_ASSERT_STRING_EQUAL(m[0].parts[1].media_type, "image/png");
    CU_ASSERT_STRING_EQUAL(m[0].parts[1].data, "iVBORw0KGgo=");
    CU_ASSERT_STRING_EQUAL(m[0].parts[1].detail, "high");
    CU_ASSERT_STRING_EQUAL(m[0].parts[2].url, "https://example.test/a.jpg");
    CU_ASSERT_PTR_NULL(m[0].parts[2].detail);
    /* assistant: reasoning, text and two calls merged into one message */
    CU_ASSERT_EQUAL(m[1].role, CANON_ROLE_ASSISTANT);
    CU_ASSERT_EQUAL_FATAL(m[1].nparts, 4);
    CU_ASSERT_EQUAL(m[1].parts[0].type, CANON_PART_THINKING);
    CU_ASSERT_STRING_EQUAL(m[1].parts[0].text, "A\n\nB");
    CU_ASSERT_STRING_EQUAL(m[1].parts[0].signature, "SIG");
    CU_ASSERT_STRING_EQUAL(m[1].parts[1].text, "Checking.");
    CU_ASSERT_EQUAL(m[1].parts[2].type, CANON_PART_TOOL_CALL);
    CU_ASSERT_STRING_EQUAL(m[1].parts[2].id, "call_A");
    CU_ASSERT_STRING_EQUAL(m[1].parts[2].name, "get_weather");
    CU_ASSERT_STRING_EQUAL(m[1].parts[2].arguments, "{\"city\":\"Paris\"}");
    CU_ASSERT_STRING_EQUAL(m[1].parts[3].arguments, "{}");
    /* the two outputs: one user message of tool results */
    CU_ASSERT_EQUAL(m[2].role, CANON_ROLE_USER);
    CU_ASSERT_EQUAL_FATAL(m[2].nparts, 2);
    CU_ASSERT_EQUAL(m[2].parts[0].type, CANON_PART_TOOL_RESULT);
    CU_ASSERT_STRING_EQUAL(m[2].parts[0].id, "call_A");
    CU_ASSERT_EQUAL_FATAL(m[2].parts[0].ncontent, 1);
    CU_ASSERT_STRING_EQUAL(m[2].parts[0].content[0].text, "18C");
    CU_ASSERT_STRING_EQUAL(m[2].parts[1].content[0].text, "12:00");
    CU_ASSERT_EQUAL(m[3].role, CANON_ROLE_USER);
    CU_ASSERT_STRING_EQUAL(m[3].parts[0].text, "Thanks");
    CU_ASSERT_EQUAL(m[4].role, CANON_ROLE_SYSTEM);
    CU_ASSERT_STRING_EQUAL(m[4].parts[0].text, "Be terse.");
    /* encrypted-only reasoning is redacted thinking; an empty item adds
     * nothing */
    CU_ASSERT_EQUAL(m[5].role, CANON_ROLE_ASSISTANT);
    CU_ASSERT_EQUAL_FATAL(m[5].nparts, 2);
    CU_ASSERT_EQUAL(m[5].parts[0].type, CANON_PART_REDACTED_THINKING);
    CU_ASSERT_STRING_EQUAL(m[5].parts[0].text, "OPAQUE");
    CU_ASSERT_STRING_EQUAL(m[5].parts[1].text, "Bye.");
    /* tools and the rest */
    CU_ASSERT_EQUAL_FATAL(r->ntools, 2);
    CU_ASSERT_STRING_EQUAL(r->tools[0].description, "Weather");
    CU_ASSERT_EQUAL(r->tools[0].strict, 1);
    CU_ASSERT_TRUE(json_is_object(r->tools[0].parameters));
    CU_ASSERT_PTR_NULL(r->tools[1].parameters);
    CU_ASSERT_EQUAL(r->tools[1].strict, -1);
    CU_ASSERT_EQUAL(r->tool_choice, CANON_TC_NAMED);
    CU_ASSERT_STRING_EQUAL(r->tool_choice_name, "get_time");
    CU_ASSERT_EQUAL(r->format, CANON_FMT_JSON_SCHEMA);
    CU_ASSERT_STRING_EQUAL(r->format_name, "out");
    CU_ASSERT_EQUAL(r->format_strict, 1);
    CU_ASSERT_EQUAL(r->reasoning_off, 1);
    CU_ASSERT_STRING_EQUAL(r->safety_identifier, "sid");
    CU_ASSERT_PTR_NULL(r->user);
    canon_req_free(r);
}

static void test_parse_refusals(void)
{
    /* server-side state */
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"store\":true}", "store");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"resp_1\"}",
              "previous_response_id");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"prompt\":{\"id\":\"p\"}}", "prompt");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"background\":true}", "background");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\","
              "\"file_search_call.results\"]}",
              "include[1]");
    parse_bad("{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}",
              "input[0]");
    /* hosted tools and other item types */
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"},"
              "{\"type\":\"web_search\"}]}",
              "tools[1].type");
    parse_bad("{\"model\":\"m\",\"input\":[{\"type\":\"web_search_call\",\"id\":\"ws\"}]}",
              "input[0]");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"input_file\",\"file_id\":\"f\"}]}]}",
              "input[0].content[0].file_id");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"input_image\",\"file_id\":\"f\"}]}]}",
              "input[0].content[0].file_id");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"assistant\",\"content\":[{\"type\":"
              "\"input_image\",\"image_url\":\"https://x.test/a.png\"}]}]}",
              "input[0].content[0]");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"input_image\",\"image_url\":\"ftp://x\"}]}]}",
              "input[0].content[0].image_url");
    /* shapes and values */
    parse_bad("{\"input\":\"x\"}", "model");
    parse_bad("{\"model\":\"m\"}", "input");
    parse_bad("{\"model\":\"m\",\"input\":[]}", "input");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"system\",\"content\":\"s\"}]}", "input");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"tool\",\"content\":\"s\"}]}", "input[0]");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"user\"}]}", "input[0].content");
    parse_bad("{\"model\":\"m\",\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\","
              "\"name\":\"f\",\"arguments\":\"[1]\"}]}",
              "input[0].arguments");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"type\":"
              "\"function_call_output\",\"output\":\"r\"}]}",
              "input[1].call_id");
    parse_bad("{\"model\":\"m\",\"input\":[{\"type\":\"reasoning\",\"summary\":[{\"type\":"
              "\"text\",\"text\":\"a\"}]}]}",
              "input[0].summary[0]");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"temperature\":3}", "temperature");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"stream\":\"yes\"}", "stream");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}",
              "text.format.type");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"verbosity\":\"low\"}}",
              "text.verbosity");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\","
              "\"name\":\"n\"}}}",
              "text.format.schema");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"effort\":\"extreme\"}}",
              "reasoning.effort");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"summary\":\"detailed\"}}",
              "reasoning.summary");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],"
              "\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"}}",
              "tool_choice.name");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":{\"type\":\"file_search\"}}",
              "tool_choice.type");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":\"required\"}", "tool_choice");
    parse_bad(
        "{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]}",
        "tools[0].name");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\","
              "\"parameters\":{\"type\":\"array\"}}]}",
              "tools[0].parameters");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"metadata\":{\"a\":\"b\"}}", "metadata");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"truncation\":\"auto\"}", "truncation");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"service_tier\":\"standard\"}", "service_tier");
    parse_bad("{\"model\":\"m\",\"input\":\"x\",\"top_logprobs\":21}", "top_logprobs");
}

/* ----------------------------------------------------------------- stream */

static const struct fc_ctx CTX = {.request_id = "req1", .model = "gpt-x", .created = 1700000000};

static char *encode(struct canon_req *r, const struct canon_event *evs, size_t n)
{
    void *st = F->stream_new(r, &CTX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(F->stream_event(st, &evs[i], &out), GW_OK);
    F->stream_free(st);
    char *s = strdup(out.data ? out.data : "");
    gw_buf_free(&out);
    return s;
}

static void expect_text(const char *got, const char *want)
{
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "\ngot:\n%s\n", got);
        for (size_t i = 0; got[i] && want[i]; i++)
            if (got[i] != want[i]) {
                fprintf(stderr, "first difference at %zu: ...%.60s\n", i, got + i);
                break;
            }
    }
    CU_ASSERT_STRING_EQUAL(got, want);
}

/* The settings echoed in every response object of this request. */
#define ECHO                                                                                       \
    "\"instructions\":null,\"max_output_tokens\":null,\"parallel_tool_calls\":true,"               \
    "\"previous_response_id\":null,\"reasoning\":{\"effort\":null,\"summary\":null},"              \
    "\"store\":false,\"temperature\":null,\"text\":{\"format\":{\"type\":\"text\"}},"              \
    "\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":null,\"truncation\":\"disabled\","            \
    "\"user\":null,\"metadata\":{}"

#define RESP(status, output, usage)                                                                \
    "{\"id\":\"resp_req1\",\"object\":\"response\",\"created_at\":1700000000,\"status\":\"" status \
    "\",\"error\":null,\"incomplete_details\":null,\"model\":\"gpt-x\",\"output\":[" output        \
    "],\"usage\":" usage "," ECHO "}"

#define HEAD                                                                                       \
    "event: response.created\ndata: {\"type\":\"response.created\",\"response\":" RESP(            \
        "in_progress", "", "null") ",\"sequence_number\":0}\n\n"                                   \
                                   "event: response.in_progress\ndata: "                           \
                                   "{\"type\":\"response.in_progress\",\"response\":" RESP(        \
                                       "in_progress", "", "null") ",\"sequence_number\":1}\n\n"

static void test_stream_text(void)
{
    struct canon_req *r = parse_ok("{\"model\":\"m\",\"input\":\"hi\",\"stream\":true}");
    struct canon_usage u = {
        .input = 5, .cache_read = 3, .cache_write_5m = 1, .output = 2, .have = 1};
    struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "up1", .name = "gpt-x"},
        {.type = CANON_EV_CHUNK, .text = "Hel", .len = 3},
        {.type = CANON_EV_CHUNK, .text = "lo \"x\"", .len = 6},
        {.type = CANON_EV_USAGE, .usage = &u},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_END},
    };
    char *got = encode(r, evs, sizeof(evs) / sizeof(*evs));
#define MSG_DONE                                                                                   \
    "{\"id\":\"msg_req1_0\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\"," \
    "\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":"          \
    "\"Hello \\\"x\\\"\"}]}"
    expect_text(
        got, HEAD
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
        "\"output_index\":0,\"item\":{\"id\":\"msg_req1_0\",\"type\":\"message\",\"status\":"
        "\"in_progress\",\"role\":\"assistant\",\"content\":[]},\"sequence_number\":2}\n\n"
        "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\","
        "\"item_id\":\"msg_req1_0\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":"
        "\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"\"},\"sequence_number\":3}"
        "\n\n"
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
        "\"item_id\":\"msg_req1_0\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hel\","
        "\"logprobs\":[],\"sequence_number\":4}\n\n"
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
        "\"item_id\":\"msg_req1_0\",\"output_index\":0,\"content_index\":0,\"delta\":\"lo "
        "\\\"x\\\"\",\"logprobs\":[],\"sequence_number\":5}\n\n"
        "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\","
        "\"item_id\":\"msg_req1_0\",\"output_index\":0,\"content_index\":0,\"text\":\"Hello "
        "\\\"x\\\"\",\"logprobs\":[],\"sequence_number\":6}\n\n"
        "event: response.content_part.done\ndata: {\"type\":\"response.content_part.done\","
        "\"item_id\":\"msg_req1_0\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":"
        "\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"Hello \\\"x\\\"\"},"
        "\"sequence_number\":7}\n\n"
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\","
        "\"output_index\":0,\"item\":" MSG_DONE ",\"sequence_number\":8}\n\n"
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":" RESP(
            "completed", MSG_DONE,
            "{\"input_tokens\":9,\"input_tokens_details\":{\"cached_tokens\":3,\"cache_write_"
            "tokens\":1},\"output_tokens\":"
            "2,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":11}") ",\"seque"
                                                                                         "nce_"
                                                                                         "number\":"
                                                                                         "9}\n\n");
    free(got);
    canon_req_free(r);
}

/* Reasoning (signed), text, two calls; then the same cut by max tokens and
 * by an error. */
static void test_stream_items(void)
{
    struct canon_req *r = parse_ok("{\"model\":\"m\",\"input\":\"hi\",\"stream\":true}");
    struct canon_event evs[] = {
        {.type = CANON_EV_START},
        {.type = CANON_EV_REASONING, .text = "Think", .len = 5},
        {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = "SIG"},
        {.type = CANON_EV_CHUNK, .text = "Ok", .len = 2},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "call_A", .name = "f"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"a\":", .len = 5},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "1}", .len = 2},
        {.type = CANON_EV_TOOL_END, .index = 0},
        {.type = CANON_EV_TOOL_START, .index = 1, .id = "call_B", .name = "g"},
        {.type = CANON_EV_TOOL_DELTA, .index = 1, .text = "{}", .len = 2},
        {.type = CANON_EV_TOOL_END, .index = 1},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_TOOL_USE},
    };
    char *got = encode(r, evs, sizeof(evs) / sizeof(*evs));
#define RS_DONE                                                                                    \
    "{\"id\":\"rs_req1_0\",\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\","        \
    "\"text\":\"Think\"}],\"encrypted_content\":\"SIG\"}"
#define OK_DONE                                                                                    \
    "{\"id\":\"msg_req1_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\"," \
    "\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"Ok\"}]}"
#define FA_DONE                                                                                    \
    "{\"id\":\"fc_req1_2\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":"     \
    "\"{\\\"a\\\":1}\",\"call_id\":\"call_A\",\"name\":\"f\"}"
#define FB_DONE                                                                                    \
    "{\"id\":\"fc_req1_3\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":"     \
    "\"{}\",\"call_id\":\"call_B\",\"name\":\"g\"}"
    expect_text(
        got, HEAD
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
        "\"output_index\":0,\"item\":{\"id\":\"rs_req1_0\",\"type\":\"reasoning\",\"summary\":[]},"
        "\"sequence_number\":2}\n\n"
        "event: response.reasoning_summary_part.added\ndata: {\"type\":"
        "\"response.reasoning_summary_part.added\",\"item_id\":\"rs_req1_0\",\"output_index\":0,"
        "\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"\"},"
        "\"sequence_number\":3}\n\n"
        "event: response.reasoning_summary_text.delta\ndata: {\"type\":"
        "\"response.reasoning_summary_text.delta\",\"item_id\":\"rs_req1_0\",\"output_index\":0,"
        "\"summary_index\":0,\"delta\":\"Think\",\"sequence_number\":4}\n\n"
        "event: response.reasoning_summary_text.done\ndata: {\"type\":"
        "\"response.reasoning_summary_text.done\",\"item_id\":\"rs_req1_0\",\"output_index\":0,"
        "\"summary_index\":0,\"text\":\"Think\",\"sequence_number\":5}\n\n"
        "event: response.reasoning_summary_part.done\ndata: {\"type\":"
        "\"response.reasoning_summary_part.done\",\"item_id\":\"rs_req1_0\",\"output_index\":0,"
        "\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"Think\"},"
        "\"sequence_number\":6}\n\n"
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\","
        "\"output_index\":0,\"item\":" RS_DONE ",\"sequence_number\":7}\n\n"
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
        "\"output_index\":1,\"item\":{\"id\":\"msg_req1_1\",\"type\":\"message\",\"status\":"
        "\"in_progress\",\"role\":\"assistant\",\"content\":[]},\"sequence_number\":8}\n\n"
        "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\","
        "\"item_id\":\"msg_req1_1\",\"output_index\":1,\"content_index\":0,\"part\":{\"type\":"
        "\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"\"},\"sequence_number\":9}"
        "\n\n"
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\","
        "\"item_id\":\"msg_req1_1\",\"output_index\":1,\"content_index\":0,\"delta\":\"Ok\","
        "\"logprobs\":[],\"sequence_number\":10}\n\n"
        "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\","
        "\"item_id\":\"msg_req1_1\",\"output_index\":1,\"content_index\":0,\"text\":\"Ok\","
        "\"logprobs\":[],\"sequence_number\":11}\n\n"
        "event: response.content_part.done\ndata: {\"type\":\"response.content_part.done\","
        "\"item_id\":\"msg_req1_1\",\"output_index\":1,\"content_index\":0,\"part\":{\"type\":"
        "\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"Ok\"},"
        "\"sequence_number\":12}\n\n"
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\","
        "\"output_index\":1,\"item\":" OK_DONE ",\"sequence_number\":13}\n\n"
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
        "\"output_index\":2,\"item\":{\"id\":\"fc_req1_2\",\"type\":\"function_call\",\"status\":"
        "\"in_progress\",\"arguments\":\"\",\"call_id\":\"call_A\",\"name\":\"f\"},"
        "\"sequence_number\":14}\n\n"
        "event: response.function_call_arguments.delta\ndata: {\"type\":"
        "\"response.function_call_arguments.delta\",\"item_id\":\"fc_req1_2\",\"output_index\":2,"
        "\"delta\":\"{\\\"a\\\":\",\"sequence_number\":15}\n\n"
        "event: response.function_call_arguments.delta\ndata: {\"type\":"
        "\"response.function_call_arguments.delta\",\"item_id\":\"fc_req1_2\",\"output_index\":2,"
        "\"delta\":\"1}\",\"sequence_number\":16}\n\n"
        "event: response.function_call_arguments.done\ndata: {\"type\":"
        "\"response.function_call_arguments.done\",\"item_id\":\"fc_req1_2\",\"output_index\":2,"
        "\"arguments\":\"{\\\"a\\\":1}\",\"name\":\"f\",\"sequence_number\":17}\n\n"
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\","
        "\"output_index\":2,\"item\":" FA_DONE ",\"sequence_number\":18}\n\n"
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
        "\"output_index\":3,\"item\":{\"id\":\"fc_req1_3\",\"type\":\"function_call\",\"status\":"
        "\"in_progress\",\"arguments\":\"\",\"call_id\":\"call_B\",\"name\":\"g\"},"
        "\"sequence_number\":19}\n\n"
        "event: response.function_call_arguments.delta\ndata: {\"type\":"
        "\"response.function_call_arguments.delta\",\"item_id\":\"fc_req1_3\",\"output_index\":3,"
        "\"delta\":\"{}\",\"sequence_number\":20}\n\n"
        "event: response.function_call_arguments.done\ndata: {\"type\":"
        "\"response.function_call_arguments.done\",\"item_id\":\"fc_req1_3\",\"output_index\":3,"
        "\"arguments\":\"{}\",\"name\":\"g\",\"sequence_number\":21}\n\n"
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\","
        "\"output_index\":3,\"item\":" FB_DONE ",\"sequence_number\":22}\n\n"
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":" RESP(
            "completed", RS_DONE "," OK_DONE "," FA_DONE "," FB_DONE,
            "null") ",\"sequence_number\":23}\n\n");
    free(got);

    /* Cut by the output limit: the open message is incomplete. */
    struct canon_event cut[] = {
        {.type = CANON_EV_START},
        {.type = CANON_EV_CHUNK, .text = "Ok", .len = 2},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_MAX_TOKENS},
    };
    got = encode(r, cut, 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(
        got, "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{"
             "\"id\":\"resp_req1\",\"object\":\"response\",\"created_at\":1700000000,\"status\":"
             "\"incomplete\",\"error\":null,\"incomplete_details\":{\"reason\":"
             "\"max_output_tokens\"},\"model\":\"gpt-x\",\"output\":[{\"id\":\"msg_req1_0\","
             "\"type\":\"message\",\"status\":\"incomplete\""));
    CU_ASSERT_PTR_NULL(strstr(got, "response.completed"));
    free(got);

    /* An error mid-call: response.failed with the call cut short. */
    struct canon_event fail[] = {
        {.type = CANON_EV_START},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "call_A", .name = "f"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"a\"", .len = 4},
        {.type = CANON_EV_ERROR,
         .failure = CANON_FAIL_NETWORK,
         .message = "the provider's stream ended"},
    };
    got = encode(r, fail, 4);
    const char *tail = strstr(got, "event: response.failed\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(tail);
    expect_text(tail,
                "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":"
                "\"resp_req1\",\"object\":\"response\",\"created_at\":1700000000,\"status\":"
                "\"failed\",\"error\":{\"code\":\"network\",\"message\":\"the provider's stream "
                "ended\"},\"incomplete_details\":null,\"model\":\"gpt-x\",\"output\":[{\"id\":"
                "\"fc_req1_0\",\"type\":\"function_call\",\"status\":\"incomplete\",\"arguments\":"
                "\"{\\\"a\\\"\",\"call_id\":\"call_A\",\"name\":\"f\"}],\"usage\":null," ECHO
                "},\"sequence_number\":4}\n\n");
    free(got);

    /* Out of order: a delta with no call open. */
    void *st = F->stream_new(r, &CTX);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    struct canon_event bad = {.type = CANON_EV_TOOL_DELTA, .text = "{}", .len = 2};
    CU_ASSERT_NOT_EQUAL(F->stream_event(st, &bad, &out), GW_OK);
    F->stream_free(st);
    gw_buf_free(&out);
    canon_req_free(r);
}

/* The echo carries the client's settings. */
static void test_stream_echo(void)
{
    struct canon_req *r = parse_ok(
        "{\"model\":\"m\",\"input\":\"hi\",\"instructions\":\"I\",\"max_output_tokens\":9,"
        "\"temperature\":0.3,\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":"
        "\"required\",\"text\":{\"format\":{\"type\":\"json_object\"}},\"reasoning\":{\"effort\":"
        "\"high\",\"summary\":\"auto\"},\"user\":\"u\",\"parallel_tool_calls\":false}");
    struct canon_event evs[] = {{.type = CANON_EV_START}};
    char *got = encode(r, evs, 1);
    const char *data = strstr(got, "data: ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(data);
    json_t *j = json_loadb(data + 6, strcspn(data + 6, "\n"), 0, NULL);
    json_t *resp = json_object_get(j, "response");
    CU_ASSERT_STRING_EQUAL(gw_json_str(resp, "instructions"), "I");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(resp, "max_output_tokens")), 9);
    CU_ASSERT_EQUAL(json_real_value(json_object_get(resp, "temperature")), 0.3);
    CU_ASSERT_PTR_NOT_NULL(strstr(got, "\"temperature\":0.3,"));
    CU_ASSERT_STRING_EQUAL(gw_json_str(resp, "tool_choice"), "required");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(resp, "tools")), 1);
    CU_ASSERT_STRING_EQUAL(
        gw_json_str(json_object_get(json_object_get(resp, "text"), "format"), "type"),
        "json_object");
    CU_ASSERT_STRING_EQUAL(gw_json_str(json_object_get(resp, "reasoning"), "effort"), "high");
    CU_ASSERT_STRING_EQUAL(gw_json_str(json_object_get(resp, "reasoning"), "summary"), "auto");
    CU_ASSERT_STRING_EQUAL(gw_json_str(resp, "user"), "u");
    CU_ASSERT_TRUE(json_is_false(json_object_get(resp, "parallel_tool_calls")));
    json_decref(j);
    free(got);
    canon_req_free(r);
}

/* ----------------------------------------------------------------- render */

static void test_render(void)
{
    struct canon_req *r = parse_ok("{\"model\":\"m\",\"input\":\"hi\"}");
    struct canon_acc acc;
    canon_acc_init(&acc, 0);
    struct canon_usage u = {.input = 10,
                            .cache_read = 90,
                            .cache_write_1h = 5,
                            .output = 40,
                            .reasoning = 30,
                            .have = 1};
    struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "x", .name = "gpt-x"},
        {.type = CANON_EV_REASONING, .text = "Hmm", .len = 3},
        {.type = CANON_EV_REASONING, .text = "", .signature = "SIG"},
        {.type = CANON_EV_CHUNK, .text = "Hi", .len = 2},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "call_A", .name = "f"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"a\":1}", .len = 7},
        {.type = CANON_EV_TOOL_END, .index = 0},
        {.type = CANON_EV_USAGE, .usage = &u},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_TOOL_USE},
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(*evs); i++)
        CU_ASSERT_EQUAL(canon_acc_add(&acc, &evs[i]), GW_OK);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL_FATAL(F->render(r, &CTX, &acc, &out), GW_OK);
    json_t *got = json_loadb(out.data, out.len, 0, NULL);
    json_t *want = json_loads(
        RESP("completed",
             "{\"id\":\"rs_req1_0\",\"type\":\"reasoning\",\"summary\":[{\"type\":"
             "\"summary_text\",\"text\":\"Hmm\"}],\"encrypted_content\":\"SIG\"},"
             "{\"id\":\"msg_req1_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":"
             "\"assistant\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],"
             "\"logprobs\":[],\"text\":\"Hi\"}]},"
             "{\"id\":\"fc_req1_2\",\"type\":\"function_call\",\"status\":\"completed\","
             "\"arguments\":\"{\\\"a\\\":1}\",\"call_id\":\"call_A\",\"name\":\"f\"}",
             "{\"input_tokens\":105,\"input_tokens_details\":{\"cached_tokens\":90,\"cache_write_"
             "tokens\":5},"
             "\"output_tokens\":40,\"output_tokens_details\":{\"reasoning_tokens\":30},"
             "\"total_tokens\":145}"),
        0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    if (!json_equal(got, want))
        fprintf(stderr, "\ngot: %s\n", out.data);
    CU_ASSERT_TRUE(json_equal(got, want));
    json_decref(got);
    json_decref(want);
    canon_acc_free(&acc);

    /* Incomplete: status and reason; text only. */
    canon_acc_init(&acc, 0);
    struct canon_event cut[] = {
        {.type = CANON_EV_START},
        {.type = CANON_EV_CHUNK, .text = "Hi", .len = 2},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_MAX_TOKENS},
    };
    for (size_t i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(canon_acc_add(&acc, &cut[i]), GW_OK);
    gw_buf_reset(&out);
    CU_ASSERT_EQUAL_FATAL(F->render(r, &CTX, &acc, &out), GW_OK);
    got = json_loadb(out.data, out.len, 0, NULL);
    CU_ASSERT_STRING_EQUAL(gw_json_str(got, "status"), "incomplete");
    CU_ASSERT_STRING_EQUAL(gw_json_str(json_object_get(got, "incomplete_details"), "reason"),
                           "max_output_tokens");
    json_t *out0 = json_array_get(json_object_get(got, "output"), 0);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(got, "output")), 1);
    CU_ASSERT_STRING_EQUAL(gw_json_str(out0, "status"), "incomplete");
    CU_ASSERT_TRUE(json_is_null(json_object_get(got, "usage")));
    json_decref(got);
    canon_acc_free(&acc);
    gw_buf_free(&out);
    canon_req_free(r);
}

static void test_error_body(void)
{
    size_t n = 0;
    char *b = F->error_body(400, "invalid_request_error", "store", "unsupported_parameter",
                            "no \"state\"", &n);
    json_t *j = json_loadb(b, n, 0, NULL);
    json_t *e = json_object_get(j, "error");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "message"), "no \"state\"");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "type"), "invalid_request_error");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "param"), "store");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "code"), "unsupported_parameter");
    json_decref(j);
    free(b);
    CU_ASSERT_STRING_EQUAL(F->name, "openai.responses");
}

static void test_parse_input_file(void)
{
    struct canon_req *r =
        parse_ok("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":["
                 "{\"type\":\"input_file\",\"filename\":\"a.pdf\",\"file_data\":"
                 "\"data:application/pdf;base64,JVBE\"},"
                 "{\"type\":\"input_file\",\"file_url\":\"https://x.test/b.pdf\"}]}]}");
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nparts, 2);
    const struct canon_part *d = &r->messages[0].parts[0], *u = &r->messages[0].parts[1];
    CU_ASSERT_EQUAL(d->type, CANON_PART_DOCUMENT);
    CU_ASSERT_STRING_EQUAL(d->media_type, "application/pdf");
    CU_ASSERT_STRING_EQUAL(d->data, "JVBE");
    CU_ASSERT_STRING_EQUAL(d->filename, "a.pdf");
    CU_ASSERT_EQUAL(u->type, CANON_PART_DOCUMENT);
    CU_ASSERT_STRING_EQUAL(u->url, "https://x.test/b.pdf");
    CU_ASSERT_PTR_NULL(u->media_type);
    canon_req_free(r);
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"input_file\",\"file_data\":\"JVBE\"}]}]}",
              "input[0].content[0].file_data");
    parse_bad("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"input_file\"}]}]}",
              "input[0].content[0]");
}

static CU_TestInfo tests[] = {
    {"parse: input_file parts", test_parse_input_file},
    {"parse: string input and settings", test_parse_string_input},
    {"parse: a tool-calling conversation", test_parse_conversation},
    {"parse: refusals name the field", test_parse_refusals},
    {"stream: text, exact frames", test_stream_text},
    {"stream: reasoning, text, two calls; incomplete; failed", test_stream_items},
    {"stream: the response echoes the settings", test_stream_echo},
    {"render", test_render},
    {"error body", test_error_body},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
