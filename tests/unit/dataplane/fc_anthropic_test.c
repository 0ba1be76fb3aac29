/* Tests for dataplane/facades/anthropic.c: Messages requests parse into the
 * canonical request (or are refused with a 400 naming the field), refusals
 * by a driver name the Anthropic field, a canonical event sequence encodes
 * into Anthropic's exact SSE, and a non-streamed answer renders as a
 * message. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_driver.h"
#include "dp_facade.h"
#include "dp_snapshot.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "json_path.h"

/* ------------------------------------------------------------- helpers */

static struct canon_req *parse_text(const char *text, struct canon_err *err, int *rc)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        fprintf(stderr, "\nbad fixture: %s\n", je.text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    struct canon_req *r = canon_req_new(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    memset(err, 0, sizeof(*err));
    *rc = fc_anthropic.parse(r, err);
    return r;
}

/* --------------------------------------------------------------- parse */

static const char FULL[] =
    "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":1024,\"stream\":true,"
    "\"system\":[{\"type\":\"text\",\"text\":\"Be terse.\"},{\"type\":\"text\",\"text\":\"Big "
    "doc\",\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"1h\"}}],"
    "\"messages\":["
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Look\",\"cache_control\":"
    "{\"type\":\"ephemeral\"}},{\"type\":\"image\",\"source\":{\"type\":\"base64\","
    "\"media_type\":\"image/png\",\"data\":\"iVBOR\"}},{\"type\":\"image\",\"source\":"
    "{\"type\":\"url\",\"url\":\"https://x.example/y.jpg\"}}]},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\","
    "\"signature\":\"s1\"},{\"type\":\"redacted_thinking\",\"data\":\"R\"},{\"type\":\"text\","
    "\"text\":\"Calling\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\","
    "\"input\":{\"city\":\"Paris\"}}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
    "\"content\":[{\"type\":\"text\",\"text\":\"18C\"},{\"type\":\"image\",\"source\":{\"type\":"
    "\"base64\",\"media_type\":\"image/jpeg\",\"data\":\"/9j/\"}}],\"is_error\":false},"
    "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"content\":\"boom\",\"is_error\":"
    "true,\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"5m\"}},{\"type\":\"tool_result\","
    "\"tool_use_id\":\"toolu_3\"}]},"
    "{\"role\":\"assistant\",\"content\":\"Done\"}],"
    "\"tools\":[{\"name\":\"get_weather\",\"description\":\"W\",\"input_schema\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}},\"cache_control\":{\"type\":"
    "\"ephemeral\"}},{\"type\":\"custom\",\"name\":\"get_time\",\"input_schema\":{\"type\":"
    "\"object\"},\"strict\":true}],"
    "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\",\"disable_parallel_tool_use\":"
    "true},"
    "\"temperature\":0.2,\"top_p\":0.8,\"top_k\":5,\"stop_sequences\":[\"###\",\"END\"],"
    "\"metadata\":{\"user_id\":\"u1\"},\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":"
    "2048}}";

static void test_parse_full(void)
{
    struct canon_err err;
    int rc;
    struct canon_req *r = parse_text(FULL, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_STRING_EQUAL(r->model, "claude-sonnet-4-5");
    CU_ASSERT(r->stream);
    CU_ASSERT(r->has_max_tokens);
    CU_ASSERT_EQUAL(r->max_tokens, 1024);
    /* system */
    CU_ASSERT_EQUAL_FATAL(r->nsystem, 2);
    CU_ASSERT_STRING_EQUAL(r->system[0].text, "Be terse.");
    CU_ASSERT_EQUAL(r->system[0].cache, CANON_CACHE_NONE);
    CU_ASSERT_EQUAL(r->system[1].cache, CANON_CACHE_1H);
    /* messages */
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 4);
    const struct canon_message *m = &r->messages[0];
    CU_ASSERT_EQUAL(m->role, CANON_ROLE_USER);
    CU_ASSERT_EQUAL_FATAL(m->nparts, 3);
    CU_ASSERT_EQUAL(m->parts[0].type, CANON_PART_TEXT);
    CU_ASSERT_EQUAL(m->parts[0].cache, CANON_CACHE_5M);
    CU_ASSERT_EQUAL(m->parts[1].type, CANON_PART_IMAGE);
    CU_ASSERT_STRING_EQUAL(m->parts[1].media_type, "image/png");
    CU_ASSERT_STRING_EQUAL(m->parts[1].data, "iVBOR");
    CU_ASSERT_PTR_NULL(m->parts[1].url);
    CU_ASSERT_STRING_EQUAL(m->parts[2].url, "https://x.example/y.jpg");
    m = &r->messages[1];
    CU_ASSERT_EQUAL(m->role, CANON_ROLE_ASSISTANT);
    CU_ASSERT_EQUAL_FATAL(m->nparts, 4);
    CU_ASSERT_EQUAL(m->parts[0].type, CANON_PART_THINKING);
    CU_ASSERT_STRING_EQUAL(m->parts[0].text, "hmm");
    CU_ASSERT_STRING_EQUAL(m->parts[0].signature, "s1");
    CU_ASSERT_EQUAL(m->parts[1].type, CANON_PART_REDACTED_THINKING);
    CU_ASSERT_STRING_EQUAL(m->parts[1].text, "R");
    CU_ASSERT_EQUAL(m->parts[2].type, CANON_PART_TEXT);
    CU_ASSERT_EQUAL(m->parts[3].type, CANON_PART_TOOL_CALL);
    CU_ASSERT_STRING_EQUAL(m->parts[3].id, "toolu_1");
    CU_ASSERT_STRING_EQUAL(m->parts[3].name, "get_weather");
    CU_ASSERT_STRING_EQUAL(m->parts[3].arguments, "{\"city\":\"Paris\"}");
    m = &r->messages[2];
    CU_ASSERT_EQUAL(m->role, CANON_ROLE_USER);
    CU_ASSERT_EQUAL_FATAL(m->nparts, 3);
    CU_ASSERT_EQUAL(m->parts[0].type, CANON_PART_TOOL_RESULT);
    CU_ASSERT_STRING_EQUAL(m->parts[0].id, "toolu_1");
    CU_ASSERT_FALSE(m->parts[0].is_error);
    CU_ASSERT_EQUAL_FATAL(m->parts[0].ncontent, 2);
    CU_ASSERT_STRING_EQUAL(m->parts[0].content[0].text, "18C");
    CU_ASSERT_EQUAL(m->parts[0].content[1].type, CANON_PART_IMAGE);
    CU_ASSERT_STRING_EQUAL(m->parts[0].content[1].media_type, "image/jpeg");
    CU_ASSERT(m->parts[1].is_error);
    CU_ASSERT_EQUAL(m->parts[1].cache, CANON_CACHE_5M);
    CU_ASSERT_EQUAL_FATAL(m->parts[1].ncontent, 1);
    CU_ASSERT_STRING_EQUAL(m->parts[1].content[0].text, "boom");
    CU_ASSERT_EQUAL(m->parts[2].ncontent, 0);
    m = &r->messages[3];
    CU_ASSERT_EQUAL(m->role, CANON_ROLE_ASSISTANT);
    CU_ASSERT_EQUAL_FATAL(m->nparts, 1);
    CU_ASSERT_STRING_EQUAL(m->parts[0].text, "Done");
    /* tools */
    CU_ASSERT_EQUAL_FATAL(r->ntools, 2);
    CU_ASSERT_STRING_EQUAL(r->tools[0].name, "get_weather");
    CU_ASSERT_STRING_EQUAL(r->tools[0].description, "W");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r->tools[0].parameters, "type")),
                           "object");
    CU_ASSERT_EQUAL(r->tools[0].cache, CANON_CACHE_5M);
    CU_ASSERT_EQUAL(r->tools[0].strict, -1);
    CU_ASSERT_EQUAL(r->tools[1].strict, 1);
    CU_ASSERT_PTR_NULL(r->tools[1].description);
    CU_ASSERT_EQUAL(r->tool_choice, CANON_TC_NAMED);
    CU_ASSERT_STRING_EQUAL(r->tool_choice_name, "get_weather");
    CU_ASSERT_EQUAL(r->parallel_tool_calls, 0);
    /* sampling and the rest */
    CU_ASSERT(r->has_temperature && r->has_top_p && r->has_top_k);
    CU_ASSERT_DOUBLE_EQUAL(r->temperature, 0.2, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r->top_p, 0.8, 1e-9);
    CU_ASSERT_EQUAL(r->top_k, 5);
    CU_ASSERT_EQUAL_FATAL(r->nstop, 2);
    CU_ASSERT_STRING_EQUAL(r->stop[1], "END");
    CU_ASSERT_STRING_EQUAL(r->safety_identifier, "u1");
    CU_ASSERT_EQUAL(r->reasoning_budget, 2048);
    CU_ASSERT_FALSE(r->reasoning_off);
    CU_ASSERT_FALSE(r->has_seed);
    CU_ASSERT_EQUAL(r->format, CANON_FMT_UNSET);
    /* the client's field names */
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_STOP), "stop_sequences");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_USER), "metadata.user_id");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_REASONING), "thinking");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_SYSTEM), "system");
    CU_ASSERT_STRING_EQUAL(canon_field_name(r, CANON_F_PARALLEL_TOOL_CALLS),
                           "tool_choice.disable_parallel_tool_use");
    canon_req_free(r);
}

static void test_parse_minimal(void)
{
    struct canon_err err;
    int rc;
    struct canon_req *r = parse_text(
        "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
        "\"hi\"},{\"role\":\"user\",\"content\":\"again\"}],\"system\":\"S\",\"thinking\":"
        "{\"type\":\"disabled\"},\"tool_choice\":{\"type\":\"auto\","
        "\"disable_parallel_tool_use\":false},\"metadata\":{},\"stream\":null}",
        &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_FALSE(r->stream);
    CU_ASSERT_EQUAL(r->nmessages, 2); /* same-role turns stay as sent */
    CU_ASSERT_EQUAL(r->nsystem, 1);
    CU_ASSERT_STRING_EQUAL(r->system[0].text, "S");
    CU_ASSERT(r->reasoning_off);
    CU_ASSERT_EQUAL(r->tool_choice, CANON_TC_AUTO);
    CU_ASSERT_EQUAL(r->parallel_tool_calls, 1);
    CU_ASSERT_PTR_NULL(r->safety_identifier);
    canon_req_free(r);
}

static void test_parse_invalid(void)
{
    static const struct {
        const char *body;
        const char *param;
    } cases[] = {
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "max_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "max_tokens"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "model"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", "messages"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "temperature"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"top_k\":-1,\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "top_k"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"stream\":\"yes\",\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "stream"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"response_format\":{\"type\":\"json_object\"},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "response_format"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
         "{\"role\":\"system\",\"content\":\"x\"}]}",
         "messages[1].role"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[]}]}",
         "messages[0].content"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\","
         "\"name\":\"bob\"}]}",
         "messages[0].name"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/"
         "bmp\",\"data\":\"x\"}}]}]"
         "}",
         "messages[0].content[0].source.media_type"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"image\",\"source\":{\"type\":\"url\",\"url\":\"ftp://x\"}}]}]}",
         "messages[0].content[0].source.url"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"document\",\"source\":{\"type\":\"text\",\"data\":\"x\"}}]}]}",
         "messages[0].content[0].source.media_type"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"text\",\"text\":\"a\",\"citations\":[]}]}]}",
         "messages[0].content[0].citations"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"text\",\"text\":\"a\",\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"2h\"}}]}]}",
         "messages[0].content[0].cache_control.ttl"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}]}]}",
         "messages[0].content[0]"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
         "\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":[1]}]}]}",
         "messages[0].content[0].input"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"tool_result\",\"tool_use_id\":\"t\",\"is_error\":\"yes\"}]}]}",
         "messages[0].content[0].is_error"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{"
         "\"type\":"
         "\"tool_result\",\"tool_use_id\":\"t\",\"content\":[{\"type\":\"document\"}]}]}]}",
         "messages[0].content[0].content[0]"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{"
         "\"type\":\"thinking\",\"thinking\":\"x\"}]}]}",
         "messages[0].content[0].signature"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"system\":7,\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "system"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[{"
         "\"role\":\"user\",\"content\":\"hi\"}]}",
         "system[0].type"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":"
         "\"web_search\"}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "tools[0].type"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\"}],\"messages\":[{\"role\":"
         "\"user\",\"content\":\"hi\"}]}",
         "tools[0].input_schema"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"a b\",\"input_schema\":{}}],"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "tools[0].name"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":"
         "\"string\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "tools[0].input_schema"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{},"
         "\"eager_input_streaming\":true}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "tools[0].eager_input_streaming"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],"
         "\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "tool_choice.name"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"any\"},\"messages\":[{"
         "\"role\":\"user\",\"content\":\"hi\"}]}",
         "tool_choice"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"none\","
         "\"disable_parallel_tool_use\":true},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
         "}",
         "tool_choice.disable_parallel_tool_use"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":\"auto\",\"messages\":[{\"role\":"
         "\"user\",\"content\":\"hi\"}]}",
         "tool_choice.type"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":"
         "500},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "thinking.budget_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"adaptive\"},\"messages\":[{"
         "\"role\":\"user\",\"content\":\"hi\"}]}",
         "thinking.type"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"metadata\":{\"user_id\":\"u\",\"foo\":1},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "metadata.foo"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":\"###\",\"messages\":[{\"role\":"
         "\"user\",\"content\":\"hi\"}]}",
         "stop_sequences"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"service_tier\":\"priority\",\"messages\":[{"
         "\"role\":\"user\",\"content\":\"hi\"}]}",
         "service_tier"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct canon_err err;
        int rc;
        struct canon_req *r = parse_text(cases[i].body, &err, &rc);
        CU_ASSERT_EQUAL(rc, GW_EINVAL);
        CU_ASSERT_EQUAL(err.status, 400);
        CU_ASSERT_STRING_EQUAL(err.param, cases[i].param);
        CU_ASSERT(strlen(err.message) > 0);
        if (rc != GW_EINVAL || strcmp(err.param, cases[i].param) != 0)
            fprintf(stderr, "\ncase %zu: rc %d param '%s' (%s)\n", i, rc, err.param, err.message);
        canon_req_free(r);
    }
}

/* A driver's refusal names the Anthropic field the client sent. */
/* The lenient parse (the pass-through's): a tool_choice it cannot read is
 * the opaque note, and no tool choice at all in the canonical request, not
 * a named one without its name (found by tests/fuzz/fuzz_facades). */
static void test_parse_lenient_tool_choice(void)
{
    json_t *j = json_loads("{\"model\":\"c\",\"max_tokens\":8,\"messages\":[{\"role\":"
                           "\"user\",\"content\":\"hi\"}],\"tools\":[{\"name\":\"f\","
                           "\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{"
                           "\"type\":\"tool\",\"nam\":\"f\"}}",
                           JSON_REJECT_DUPLICATES, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    struct canon_req *r = canon_req_new(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    r->lenient = 1;
    struct canon_err err = {0};
    CU_ASSERT_EQUAL(fc_anthropic.parse(r, &err), GW_OK);
    CU_ASSERT_EQUAL(r->opaque.status, 400);
    CU_ASSERT_STRING_EQUAL(r->opaque.param, "tool_choice.nam");
    CU_ASSERT_EQUAL(r->tool_choice, CANON_TC_UNSET);
    CU_ASSERT_PTR_NULL(r->tool_choice_name);
    CU_ASSERT_EQUAL(r->ntools, 1);
    canon_req_free(r);
}

static void test_driver_refusals_name_fields(void)
{
    struct dp_provider prov = {
        .name = "p", .base_url = "http://127.0.0.1:9", .options = json_object()};
    struct drv_target t = {.provider = &prov, .model = "x", .request_id = "r"};
    struct canon_err err;
    int rc;
    struct canon_req *r = parse_text("{\"model\":\"m\",\"max_tokens\":3000,\"thinking\":{\"type\":"
                                     "\"enabled\",\"budget_tokens\":5000},\"messages\":[{\"role\":"
                                     "\"user\",\"content\":\"hi\"}]}",
                                     &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    struct drv_request out = {0};
    memset(&err, 0, sizeof(err));
    CU_ASSERT_EQUAL(drv_anthropic.build_chat(&t, r, &out, &err), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.param, "thinking");
    drv_request_free(&out);
    canon_req_free(r);

    r = parse_text("{\"model\":\"m\",\"max_tokens\":30,\"top_k\":3,\"messages\":[{\"role\":"
                   "\"user\",\"content\":\"hi\"}]}",
                   &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    memset(&err, 0, sizeof(err));
    CU_ASSERT_EQUAL(drv_openai.build_chat(&t, r, &out, &err), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.param, "top_k");
    drv_request_free(&out);
    canon_req_free(r);
    json_decref(prov.options);
}

/* -------------------------------------------------------------- stream */

static const struct fc_ctx CTX = {.request_id = "req_abc", .model = "claude-x", .created = 0};

static char *encode(const struct canon_event *evs, size_t n)
{
    struct gw_buf out;
    gw_buf_init(&out, 0);
    void *st = fc_anthropic.stream_new(NULL, &CTX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(fc_anthropic.stream_event(st, &evs[i], &out), GW_OK);
    fc_anthropic.stream_free(st);
    char *s = strdup(out.data ? out.data : "");
    gw_buf_free(&out);
    return s;
}

/* The expected stream: frames joined. */
static void check_stream(const struct canon_event *evs, size_t n, const char *const *frames)
{
    struct gw_buf want;
    gw_buf_init(&want, 0);
    for (const char *const *f = frames; *f; f++)
        CU_ASSERT_EQUAL(gw_buf_appends(&want, *f), GW_OK);
    char *got = encode(evs, n);
    CU_ASSERT_STRING_EQUAL(got, want.data ? want.data : "");
    if (strcmp(got, want.data ? want.data : "") != 0)
        fprintf(stderr, "\n--- got:\n%s--- want:\n%s", got, want.data ? want.data : "");
    free(got);
    gw_buf_free(&want);
}

static const char *const FULL_FRAMES[] = {
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_req_abc\","
    "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],"
    "\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,"
    "\"cache_creation_input_tokens\":70,\"cache_read_input_tokens\":20,\"cache_creation\":"
    "{\"ephemeral_5m_input_tokens\":30,\"ephemeral_1h_input_tokens\":40},\"output_tokens\":1}}}"
    "\n\n",
    "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
    "{\"type\":\"thinking_delta\",\"thinking\":\"Let me\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
    "{\"type\":\"thinking_delta\",\"thinking\":\" think\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
    "{\"type\":\"signature_delta\",\"signature\":\"sig1\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
    "{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
    "{\"type\":\"text_delta\",\"text\":\" \\\"w\\\"\\n\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,"
    "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\","
    "\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
    "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\":\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
    "{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"Paris\\\"}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":3,"
    "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"get_time\","
    "\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":"
    "{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":3}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
    "\"tool_use\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":10,"
    "\"cache_creation_input_tokens\":70,\"cache_read_input_tokens\":20,\"output_tokens\":50}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    NULL,
};

static void test_stream_full(void)
{
    struct canon_usage u0 = {.input = 10,
                             .cache_read = 20,
                             .cache_write_5m = 30,
                             .cache_write_1h = 40,
                             .output = 1,
                             .have = 1};
    struct canon_usage u1 = u0;
    u1.output = 50;
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "msg_up", .name = "claude-x"},
        {.type = CANON_EV_USAGE, .usage = &u0},
        {.type = CANON_EV_REASONING, .text = "Let me", .len = 6},
        {.type = CANON_EV_REASONING, .text = " think", .len = 6},
        {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = "sig1"},
        {.type = CANON_EV_CHUNK, .text = "Hello", .len = 5},
        {.type = CANON_EV_CHUNK, .text = " \"w\"\n", .len = 5},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "toolu_1", .name = "get_weather"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"city\":", .len = 8},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "\"Paris\"}", .len = 8},
        {.type = CANON_EV_TOOL_END, .index = 0},
        {.type = CANON_EV_TOOL_START, .index = 1, .id = "toolu_2", .name = "get_time"},
        {.type = CANON_EV_TOOL_DELTA, .index = 1, .text = "{}", .len = 2},
        {.type = CANON_EV_TOOL_END, .index = 1},
        {.type = CANON_EV_USAGE, .usage = &u1},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_TOOL_USE},
    };
    check_stream(evs, sizeof(evs) / sizeof(*evs), FULL_FRAMES);
}

/* No usage before the content (an OpenAI-style upstream): message_start
 * reports zeros; text, then a second thinking run after a signature opens
 * a new block; an error after the start is an error event and the end. */
static const char *const ERROR_FRAMES[] = {
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_req_abc\","
    "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"gpt-x\",\"content\":[],"
    "\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,"
    "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"cache_creation\":"
    "{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":0},\"output_tokens\":0}}}\n\n",
    "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
    "{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"
    "\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
    "{\"type\":\"thinking_delta\",\"thinking\":\"a\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":"
    "{\"type\":\"signature_delta\",\"signature\":\"S1\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,"
    "\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":"
    "{\"type\":\"thinking_delta\",\"thinking\":\"b\"}}\n\n",
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
    "\"message\":\"slow down\"}}\n\n",
    NULL,
};

static void test_stream_error(void)
{
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "chatcmpl-1", .name = "gpt-x"},
        {.type = CANON_EV_CHUNK, .text = "Hi", .len = 2},
        {.type = CANON_EV_REASONING, .text = "a", .len = 1, .signature = "S1"},
        {.type = CANON_EV_REASONING, .text = "b", .len = 1},
        {.type = CANON_EV_ERROR,
         .failure = CANON_FAIL_RATE_LIMITED,
         .status = 429,
         .message = "slow down"},
    };
    check_stream(evs, sizeof(evs) / sizeof(*evs), ERROR_FRAMES);

    /* Error types by failure class. */
    static const struct {
        enum canon_failure f;
        const char *type;
    } cases[] = {
        {CANON_FAIL_PROVIDER_5XX, "api_error"},
        {CANON_FAIL_MODEL_UNAVAILABLE, "overloaded_error"},
        {CANON_FAIL_TIMEOUT, "timeout_error"},
        {CANON_FAIL_CONTEXT_OVERFLOW, "invalid_request_error"},
        {CANON_FAIL_NETWORK, "api_error"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct canon_event ev = {.type = CANON_EV_ERROR, .failure = cases[i].f};
        char *got = encode(&ev, 1);
        char want[256];
        snprintf(want, sizeof(want),
                 "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"%s\","
                 "\"message\":\"the upstream failed\"}}\n\n",
                 cases[i].type);
        CU_ASSERT_STRING_EQUAL(got, want);
        free(got);
    }
}

/* A USAGE right after START lands in message_start even when content comes
 * later; a text-only answer ends with end_turn. */
static void test_stream_lazy_start(void)
{
    struct canon_usage u0 = {.input = 7, .output = 1, .have = 1};
    struct canon_usage u1 = {.input = 7, .output = 3, .have = 1};
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "x", .name = "claude-x"},
        {.type = CANON_EV_USAGE, .usage = &u0},
        {.type = CANON_EV_CHUNK, .text = "ok", .len = 2},
        {.type = CANON_EV_USAGE, .usage = &u1},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_END},
    };
    char *got = encode(evs, sizeof(evs) / sizeof(*evs));
    CU_ASSERT_PTR_NOT_NULL(strstr(got, "\"usage\":{\"input_tokens\":7,"));
    CU_ASSERT_PTR_NOT_NULL(strstr(got, "\"output_tokens\":1}}}\n\nevent: ping\n"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(got, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}"
                    "\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{"
                    "\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{"
                    "\"input_tokens\":7,\"cache_creation_input_tokens\":0,"
                    "\"cache_read_input_tokens\":0,\"output_tokens\":3}}\n\n"));
    /* Every data line is one JSON object whose type matches its event. */
    char *save = NULL;
    const char *ev = NULL;
    int frames = 0;
    for (char *line = strtok_r(got, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "event: ", 7) == 0) {
            ev = line + 7;
        } else {
            CU_ASSERT_EQUAL_FATAL(strncmp(line, "data: ", 6), 0);
            json_t *d = json_loads(line + 6, 0, NULL);
            CU_ASSERT(json_is_object(d));
            CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(d, "type")), ev);
            json_decref(d);
            frames++;
        }
    }
    CU_ASSERT_EQUAL(frames, 7);
    free(got);
}

/* -------------------------------------------------------------- render */

static void acc_feed(struct canon_acc *acc, const struct canon_event *evs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CU_ASSERT_EQUAL(canon_acc_add(acc, &evs[i]), GW_OK);
}

static void test_render(void)
{
    struct canon_usage u = {.input = 40,
                            .cache_read = 9000,
                            .cache_write_5m = 200,
                            .cache_write_1h = 500,
                            .output = 120,
                            .have = 1};
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "msg_up", .name = "claude-x"},
        {.type = CANON_EV_REASONING, .text = "Think", .len = 5},
        {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = "sigZ"},
        {.type = CANON_EV_CHUNK, .text = "Here", .len = 4},
        {.type = CANON_EV_CHUNK, .text = " you go", .len = 7},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "toolu_1", .name = "get_weather"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"city\":", .len = 8},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "\"Paris\"}", .len = 8},
        {.type = CANON_EV_TOOL_END, .index = 0},
        {.type = CANON_EV_TOOL_START, .index = 1, .id = "toolu_2", .name = "get_time"},
        {.type = CANON_EV_TOOL_DELTA, .index = 1, .text = "{}", .len = 2},
        {.type = CANON_EV_TOOL_END, .index = 1},
        {.type = CANON_EV_USAGE, .usage = &u},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_TOOL_USE},
    };
    struct canon_acc acc;
    canon_acc_init(&acc, 0);
    acc_feed(&acc, evs, sizeof(evs) / sizeof(*evs));
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL_FATAL(fc_anthropic.render(NULL, &CTX, &acc, &out), GW_OK);
    json_t *doc = json_loadb(out.data, out.len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "id"), "msg_req_abc");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "type"), "message");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "role"), "assistant");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "model"), "claude-x");
    CU_ASSERT_EQUAL(json_array_size(jget(doc, "content")), 4);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.0.type"), "thinking");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.0.thinking"), "Think");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.0.signature"), "sigZ");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.1.type"), "text");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.1.text"), "Here you go");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.2.type"), "tool_use");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.2.id"), "toolu_1");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.2.name"), "get_weather");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.2.input.city"), "Paris");
    CU_ASSERT(json_is_object(jget(doc, "content.3.input")));
    CU_ASSERT_STRING_EQUAL(jstr(doc, "stop_reason"), "tool_use");
    CU_ASSERT(json_is_null(jget(doc, "stop_sequence")));
    CU_ASSERT_EQUAL(jint(doc, "usage.input_tokens"), 40);
    CU_ASSERT_EQUAL(jint(doc, "usage.cache_creation_input_tokens"), 700);
    CU_ASSERT_EQUAL(jint(doc, "usage.cache_read_input_tokens"), 9000);
    CU_ASSERT_EQUAL(jint(doc, "usage.cache_creation.ephemeral_5m_input_tokens"), 200);
    CU_ASSERT_EQUAL(jint(doc, "usage.cache_creation.ephemeral_1h_input_tokens"), 500);
    CU_ASSERT_EQUAL(jint(doc, "usage.output_tokens"), 120);
    json_decref(doc);
    canon_acc_free(&acc);

    /* Text only: one text block, end_turn, zero usage when none came. */
    const struct canon_event evs2[] = {
        {.type = CANON_EV_START},
        {.type = CANON_EV_CHUNK, .text = "x", .len = 1},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_MAX_TOKENS},
    };
    canon_acc_init(&acc, 0);
    acc_feed(&acc, evs2, 3);
    gw_buf_reset(&out);
    CU_ASSERT_EQUAL_FATAL(fc_anthropic.render(NULL, &CTX, &acc, &out), GW_OK);
    doc = json_loadb(out.data, out.len, 0, NULL);
    CU_ASSERT_EQUAL(json_array_size(jget(doc, "content")), 1);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.0.text"), "x");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "stop_reason"), "max_tokens");
    CU_ASSERT_EQUAL(jint(doc, "usage.output_tokens"), 0);
    json_decref(doc);
    canon_acc_free(&acc);

    /* Arguments that are not a JSON object: no invented input. */
    const struct canon_event evs3[] = {
        {.type = CANON_EV_START},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "c", .name = "f"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"a\":", .len = 5},
        {.type = CANON_EV_TOOL_END, .index = 0},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_MAX_TOKENS},
    };
    canon_acc_init(&acc, 0);
    acc_feed(&acc, evs3, 5);
    gw_buf_reset(&out);
    CU_ASSERT_NOT_EQUAL(fc_anthropic.render(NULL, &CTX, &acc, &out), GW_OK);
    canon_acc_free(&acc);
    gw_buf_free(&out);
}

static void test_error_body(void)
{
    static const struct {
        int status;
        const char *param, *type, *msg;
    } cases[] = {
        {400, "max_tokens", "invalid_request_error", "max_tokens: 'max_tokens' is required"},
        {401, NULL, "authentication_error", "bad key"},
        {402, NULL, "billing_error", "bad key"},
        {403, NULL, "permission_error", "bad key"},
        {404, "model", "not_found_error", "model: bad key"},
        {413, NULL, "request_too_large", "bad key"},
        {429, NULL, "rate_limit_error", "bad key"},
        {503, NULL, "overloaded_error", "bad key"},
        {529, NULL, "overloaded_error", "bad key"},
        {500, NULL, "api_error", "bad key"},
        {502, NULL, "api_error", "bad key"},
        {504, NULL, "timeout_error", "bad key"},
        {405, NULL, "invalid_request_error", "bad key"},
        {422, NULL, "invalid_request_error", "bad key"},
        {499, NULL, "api_error", "bad key"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        size_t n = 0;
        const char *m = i == 0 ? "'max_tokens' is required" : "bad key";
        char *s = fc_anthropic.error_body(cases[i].status, "invalid_request_error", cases[i].param,
                                          "code", m, &n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        CU_ASSERT_EQUAL(n, strlen(s));
        json_t *doc = json_loads(s, 0, NULL);
        CU_ASSERT_STRING_EQUAL(jstr(doc, "type"), "error");
        CU_ASSERT_STRING_EQUAL(jstr(doc, "error.type"), cases[i].type);
        CU_ASSERT_STRING_EQUAL(jstr(doc, "error.message"), cases[i].msg);
        CU_ASSERT_PTR_NULL(jget(doc, "error.param"));
        json_decref(doc);
        free(s);
    }
    CU_ASSERT_STRING_EQUAL(fc_anthropic.name, "anthropic.messages");
}

/* Redacted thinking and several signed blocks keep their boundaries, in
 * the stream and in the whole message, and never show in an OpenAI answer. */
static void test_redacted_and_blocks(void)
{
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "m", .name = "claude-x"},
        {.type = CANON_EV_REASONING, .text = "one", .len = 3},
        {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = "s1"},
        {.type = CANON_EV_REASONING, .text = "OPAQUE", .len = 6, .redacted = 1},
        {.type = CANON_EV_REASONING, .text = "two", .len = 3},
        {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = "s2"},
        {.type = CANON_EV_CHUNK, .text = "hi", .len = 2},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_END},
    };
    size_t n = sizeof(evs) / sizeof(*evs);
    char *sse = encode(evs, n);
    CU_ASSERT_PTR_NOT_NULL(strstr(sse, "\"content_block\":{\"type\":\"redacted_thinking\","
                                       "\"data\":\"OPAQUE\"}"));
    /* Blocks 0 (thinking), 1 (redacted), 2 (thinking), 3 (text). */
    CU_ASSERT_PTR_NOT_NULL(strstr(sse, "\"index\":3,\"content_block\":{\"type\":\"text\""));
    free(sse);

    struct canon_acc acc;
    canon_acc_init(&acc, 0);
    acc_feed(&acc, evs, n);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL_FATAL(fc_anthropic.render(NULL, &CTX, &acc, &out), GW_OK);
    json_t *doc = json_loadb(out.data, out.len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    CU_ASSERT_EQUAL(json_array_size(jget(doc, "content")), 4);
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.0.thinking"), "one");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.0.signature"), "s1");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.1.type"), "redacted_thinking");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.1.data"), "OPAQUE");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.2.thinking"), "two");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.2.signature"), "s2");
    CU_ASSERT_STRING_EQUAL(jstr(doc, "content.3.text"), "hi");
    json_decref(doc);
    /* OpenAI chat: the readable reasoning only. */
    gw_buf_reset(&out);
    CU_ASSERT_EQUAL_FATAL(fc_openai_chat.render(NULL, &CTX, &acc, &out), GW_OK);
    CU_ASSERT_PTR_NULL(strstr(out.data, "OPAQUE"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "\"reasoning_content\":\"onetwo\""));
    gw_buf_free(&out);
    canon_acc_free(&acc);
}

/* Document blocks of each source become DOCUMENT parts with their
 * members; a content source is only an Anthropic provider's (opaque). */
static void test_parse_documents(void)
{
    struct canon_err err;
    int rc;
    struct canon_req *r = parse_text(
        "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":["
        "{\"type\":\"document\",\"source\":{\"type\":\"base64\",\"media_type\":"
        "\"application/pdf\",\"data\":\"JVBE\"},\"title\":\"T\",\"context\":\"C\","
        "\"citations\":{\"enabled\":true},\"cache_control\":{\"type\":\"ephemeral\"}},"
        "{\"type\":\"document\",\"source\":{\"type\":\"url\",\"url\":\"https://x.test/a.pdf\"}},"
        "{\"type\":\"document\",\"source\":{\"type\":\"text\",\"media_type\":\"text/plain\","
        "\"data\":\"hello\"}}]}]}",
        &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nparts, 3);
    const struct canon_part *p = r->messages[0].parts;
    CU_ASSERT_EQUAL(p[0].type, CANON_PART_DOCUMENT);
    CU_ASSERT_STRING_EQUAL(p[0].media_type, "application/pdf");
    CU_ASSERT_STRING_EQUAL(p[0].data, "JVBE");
    CU_ASSERT_STRING_EQUAL(p[0].title, "T");
    CU_ASSERT_STRING_EQUAL(p[0].context, "C");
    CU_ASSERT_EQUAL(p[0].citations, 1);
    CU_ASSERT_EQUAL(p[0].cache, CANON_CACHE_5M);
    CU_ASSERT_STRING_EQUAL(p[1].url, "https://x.test/a.pdf");
    CU_ASSERT_STRING_EQUAL(p[1].media_type, "application/pdf");
    CU_ASSERT_STRING_EQUAL(p[2].text, "hello");
    CU_ASSERT_PTR_NULL(p[2].data);
    canon_req_free(r);
    r = parse_text("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
                   "\"content\":[{\"type\":\"document\",\"source\":{\"type\":\"content\","
                   "\"content\":[]}}]}]}",
                   &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.code, "unsupported_content");
    CU_ASSERT_STRING_EQUAL(err.param, "messages[0].content[0].source");
    canon_req_free(r);
}

static CU_TestInfo tests[] = {
    {"parse: document blocks", test_parse_documents},
    {"redacted thinking and block boundaries", test_redacted_and_blocks},
    {"parse: a full request", test_parse_full},
    {"parse: a minimal request", test_parse_minimal},
    {"parse: invalid requests name the field", test_parse_invalid},
    {"parse: lenient, a tool_choice it cannot read", test_parse_lenient_tool_choice},
    {"drivers' refusals name Anthropic fields", test_driver_refusals_name_fields},
    {"stream: thinking, text, two tools, usage", test_stream_full},
    {"stream: error after start, thinking blocks", test_stream_error},
    {"stream: lazy message_start", test_stream_lazy_start},
    {"render", test_render},
    {"error bodies", test_error_body},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
