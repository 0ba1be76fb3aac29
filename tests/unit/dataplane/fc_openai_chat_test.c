/*
 * The OpenAI chat facade: what a request becomes, what is refused (and the
 * field each refusal names), and the exact stream and body it writes.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_facade.h"
#include "fc_util.h"
#include "gw_buf.h"
#include "gw_error.h"

static struct canon_req *parse_text(const char *text, struct canon_err *err, int *rc)
{
    json_t *body = json_loads(text, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    struct canon_req *r = canon_req_new(body);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    memset(err, 0, sizeof(*err));
    *rc = fc_openai_chat.parse(r, err);
    return r;
}

static void test_parse_full(void)
{
    struct canon_err err;
    int rc;
    struct canon_req *r = parse_text(
        "{\"model\":\"fast\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"max_completion_tokens\":64,\"temperature\":0.2,\"top_p\":0.5,\"seed\":7,"
        "\"stop\":\"END\",\"user\":\"u1\",\"reasoning_effort\":\"low\",\"n\":1,\"logprobs\":false,"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\","
        "\"schema\":{\"type\":\"object\"},\"strict\":true}},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
        "{\"type\":\"object\"}}}],\"tool_choice\":{\"type\":\"function\",\"function\":"
        "{\"name\":\"f\"}},\"parallel_tool_calls\":false,"
        "\"messages\":[{\"role\":\"developer\",\"content\":\"sys\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"look\"},{\"type\":"
        "\"image_url\",\"image_url\":{\"url\":\"data:image/"
        "png;base64,AAAA\",\"detail\":\"low\"}}]},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hm\",\"tool_calls\":"
        "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"a\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r1\"},"
        "{\"role\":\"system\",\"content\":\"late\"}]}",
        &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_STRING_EQUAL(r->model, "fast");
    CU_ASSERT(r->stream && r->include_usage);
    CU_ASSERT(r->has_max_tokens && r->max_tokens == 64);
    CU_ASSERT(r->has_temperature && r->has_top_p && r->has_seed && r->seed == 7);
    CU_ASSERT_EQUAL(r->nstop, 1);
    CU_ASSERT_STRING_EQUAL(r->user, "u1");
    CU_ASSERT_STRING_EQUAL(r->reasoning_effort, "low");
    CU_ASSERT_EQUAL(r->format, CANON_FMT_JSON_SCHEMA);
    CU_ASSERT_EQUAL(r->format_strict, 1);
    CU_ASSERT_EQUAL(r->ntools, 1);
    CU_ASSERT_EQUAL(r->tool_choice, CANON_TC_NAMED);
    CU_ASSERT_EQUAL(r->parallel_tool_calls, 0);
    /* The leading developer message is the system prompt; the late system
     * message stays in place. */
    CU_ASSERT_EQUAL(r->nsystem, 1);
    CU_ASSERT_EQUAL_FATAL(r->nmessages, 4);
    CU_ASSERT_EQUAL(r->messages[0].role, CANON_ROLE_USER);
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nparts, 2);
    CU_ASSERT_EQUAL(r->messages[0].parts[1].type, CANON_PART_IMAGE);
    CU_ASSERT_STRING_EQUAL(r->messages[0].parts[1].media_type, "image/png");
    CU_ASSERT_STRING_EQUAL(r->messages[0].parts[1].data, "AAAA");
    CU_ASSERT_STRING_EQUAL(r->messages[0].parts[1].detail, "low");
    CU_ASSERT_EQUAL(r->messages[1].role, CANON_ROLE_ASSISTANT);
    CU_ASSERT_EQUAL_FATAL(r->messages[1].nparts, 2);
    CU_ASSERT_EQUAL(r->messages[1].parts[0].type, CANON_PART_THINKING);
    CU_ASSERT_EQUAL(r->messages[1].parts[1].type, CANON_PART_TOOL_CALL);
    CU_ASSERT_STRING_EQUAL(r->messages[1].parts[1].arguments, "{\"a\":1}");
    /* The tool message became a tool result in a user message. */
    CU_ASSERT_EQUAL(r->messages[2].role, CANON_ROLE_USER);
    CU_ASSERT_EQUAL(r->messages[2].parts[0].type, CANON_PART_TOOL_RESULT);
    CU_ASSERT_STRING_EQUAL(r->messages[2].parts[0].id, "c1");
    CU_ASSERT_EQUAL(r->messages[3].role, CANON_ROLE_SYSTEM);
    canon_req_free(r);
}

static void test_parse_refusals_name_the_field(void)
{
    static const struct {
        const char *body, *param, *code;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model", NULL},
        {"{\"model\":\"m\",\"messages\":[]}", "messages", NULL},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "n",
         "unsupported_parameter"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{}}",
         "logit_bias", "unsupported_parameter"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}",
         "temperature", NULL},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":\"y\"}",
         "stream", NULL},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}"
         "]"
         "}]}",
         "messages[0].content[0].input_audio", "unsupported_content"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
         "\"image_url\":{\"url\":\"file:///etc/passwd\"}}]}]}",
         "messages[0].content[0].image_url.url", "invalid_image"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"bob\"}]}",
         "messages[0].name", "unsupported_parameter"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{"
         "\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"array\"}}}]"
         "}",
         "tools[0].function.parameters", "invalid_tool_schema"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{"
         "\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\"}}]}",
         "tools[1].function.name", NULL},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
         "\"required\"}",
         "tool_choice", NULL},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
         "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
         "messages[0].tool_calls[0]", NULL},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"reasoning_effort\":\"max\"}",
         "reasoning_effort", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct canon_err err;
        int rc;
        struct canon_req *r = parse_text(cases[i].body, &err, &rc);
        int ok = rc == GW_EINVAL && err.status == 400 && strcmp(err.param, cases[i].param) == 0 &&
                 (!cases[i].code || strcmp(err.code, cases[i].code) == 0) && err.message[0];
        if (!ok)
            fprintf(stderr, "\n  case %zu: rc %d, param '%s', code '%s': %s\n", i, rc, err.param,
                    err.code, err.message);
        CU_ASSERT(ok);
        canon_req_free(r);
    }
}

static const struct fc_ctx CTX = {.request_id = "req_1", .model = "m1", .created = 5};

static void test_stream_exact(void)
{
    struct canon_err err;
    int rc;
    struct canon_req *r = parse_text("{\"model\":\"m\",\"stream\":true,\"stream_options\":{"
                                     "\"include_usage\":true},\"messages\":[{\"role\":\"user\","
                                     "\"content\":\"x\"}]}",
                                     &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    struct canon_usage u = {.input = 2, .cache_read = 3, .output = 4, .reasoning = 1, .have = 1};
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "up", .name = "m1"},
        {.type = CANON_EV_REASONING, .text = "r", .len = 1},
        {.type = CANON_EV_CHUNK, .text = "a\"b", .len = 3},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "c", .name = "f"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{}", .len = 2},
        {.type = CANON_EV_TOOL_END, .index = 0},
        {.type = CANON_EV_USAGE, .usage = &u},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_TOOL_USE},
    };
    void *st = fc_openai_chat.stream_new(r, &CTX);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    for (size_t i = 0; i < sizeof(evs) / sizeof(*evs); i++)
        CU_ASSERT_EQUAL(fc_openai_chat.stream_event(st, &evs[i], &out), GW_OK);
#define H                                                                                          \
    "data: {\"id\":\"chatcmpl-req_1\",\"object\":\"chat.completion.chunk\",\"created\":5,"         \
    "\"model\":\"m1\",\"choices\":[{\"index\":0,\"delta\":"
    const char *want =
        H "{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n" H
          "{\"reasoning_content\":\"r\"},\"finish_reason\":null}]}\n\n" H
          "{\"content\":\"a\\\"b\"},\"finish_reason\":null}]}\n\n" H
          "{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":"
          "\"f\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n" H
          "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]},\"finish_reason\":"
          "null}]}\n\n" H "{},\"finish_reason\":\"tool_calls\"}]}\n\n"
          "data: {\"id\":\"chatcmpl-req_1\",\"object\":\"chat.completion.chunk\",\"created\":5,"
          "\"model\":\"m1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4,"
          "\"total_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":3},"
          "\"completion_tokens_details\":{\"reasoning_tokens\":1}}}\n\n"
          "data: [DONE]\n\n";
#undef H
    CU_ASSERT_STRING_EQUAL(out.data, want);
    if (strcmp(out.data, want) != 0)
        fprintf(stderr, "\n--- got\n%s--- want\n%s", out.data, want);
    /* An error after the start: an in-band error event, then [DONE]. */
    gw_buf_reset(&out);
    struct canon_event e = {
        .type = CANON_EV_ERROR, .failure = CANON_FAIL_TIMEOUT, .message = "slow"};
    CU_ASSERT_EQUAL(fc_openai_chat.stream_event(st, &e, &out), GW_OK);
    CU_ASSERT_STRING_EQUAL(out.data,
                           "data: {\"error\":{\"message\":\"slow\",\"type\":\"api_error\","
                           "\"code\":\"timeout\"}}\n\ndata: [DONE]\n\n");
    fc_openai_chat.stream_free(st);
    gw_buf_free(&out);
    canon_req_free(r);
}

static void test_render(void)
{
    struct canon_usage u = {.input = 1, .cache_write_5m = 2, .output = 3, .have = 1};
    const struct canon_event evs[] = {
        {.type = CANON_EV_START, .id = "up", .name = "m1"},
        {.type = CANON_EV_CHUNK, .text = "hi", .len = 2},
        {.type = CANON_EV_TOOL_START, .index = 0, .id = "c0", .name = "f"},
        {.type = CANON_EV_TOOL_DELTA, .index = 0, .text = "{\"x\":1}", .len = 7},
        {.type = CANON_EV_TOOL_END, .index = 0},
        {.type = CANON_EV_TOOL_START, .index = 1, .id = "c1", .name = "g"},
        {.type = CANON_EV_TOOL_DELTA, .index = 1, .text = "{}", .len = 2},
        {.type = CANON_EV_TOOL_END, .index = 1},
        {.type = CANON_EV_USAGE, .usage = &u},
        {.type = CANON_EV_DONE, .stop = CANON_STOP_TOOL_USE},
    };
    struct canon_acc acc;
    canon_acc_init(&acc, 0);
    for (size_t i = 0; i < sizeof(evs) / sizeof(*evs); i++)
        CU_ASSERT_EQUAL(canon_acc_add(&acc, &evs[i]), GW_OK);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL_FATAL(fc_openai_chat.render(NULL, &CTX, &acc, &out), GW_OK);
    json_t *got = json_loadb(out.data, out.len, JSON_REJECT_DUPLICATES, NULL);
    json_t *want = json_loads(
        "{\"id\":\"chatcmpl-req_1\",\"object\":\"chat.completion\",\"created\":5,\"model\":\"m1\","
        "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\","
        "\"refusal\":null,\"tool_calls\":[{\"id\":\"c0\",\"type\":\"function\",\"function\":{"
        "\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}},{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]},\"logprobs\":null,"
        "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3,"
        "\"total_tokens\":6,\"prompt_tokens_details\":{\"cached_tokens\":0},"
        "\"completion_tokens_details\":{\"reasoning_tokens\":0}}}",
        0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT(json_equal(got, want));
    if (!json_equal(got, want))
        fprintf(stderr, "\n  got %s\n", out.data);
    json_decref(got);
    json_decref(want);
    gw_buf_free(&out);
    canon_acc_free(&acc);
}

/* Tool call arguments are JSON inside strings, which the body's bound
 * counts as one value each: the facade counts what they hold, across all
 * calls of the request, before it parses them. */
static void test_parse_bounds_arguments(void)
{
    /* Each call's arguments hold 60,001 values: one call is within the
     * limit, the second passes it in all. */
    size_t per = 60000, cap = 2 * (2 * per + 64) + 512;
    char *body = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    for (int calls = 1; calls <= 2; calls++) {
        size_t n = (size_t)snprintf(body, cap,
                                    "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\","
                                    "\"tool_calls\":[");
        for (int c = 0; c < calls; c++) {
            n += (size_t)snprintf(body + n, cap - n,
                                  "%s{\"id\":\"c%d\",\"type\":\"function\",\"function\":{"
                                  "\"name\":\"f\",\"arguments\":\"{\\\"a\\\":[",
                                  c ? "," : "", c);
            for (size_t i = 0; i < per; i++) {
                if (i)
                    body[n++] = ',';
                body[n++] = '0';
            }
            n += (size_t)snprintf(body + n, cap - n, "]}\"}}");
        }
        n += (size_t)snprintf(body + n, cap - n, "]},{\"role\":\"user\",\"content\":\"x\"}]}");
        CU_ASSERT_FATAL(n < cap);
        struct canon_err err;
        int rc;
        struct canon_req *r = parse_text(body, &err, &rc);
        if (rc != (calls == 1 ? GW_OK : GW_ELIMIT))
            fprintf(stderr, "\n  %d calls: rc %d, %s: %s\n", calls, rc, err.param, err.message);
        if (calls == 1) {
            CU_ASSERT_EQUAL(rc, GW_OK);
            CU_ASSERT_EQUAL(r->args_values, per + 2);
        } else {
            CU_ASSERT_EQUAL(rc, GW_ELIMIT);
            CU_ASSERT_EQUAL(err.status, 413);
            CU_ASSERT_STRING_EQUAL(err.code, "request_too_complex");
            CU_ASSERT_STRING_EQUAL(err.param, "messages[0].tool_calls[1].function.arguments");
            CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "more than 100000 JSON values"));
        }
        canon_req_free(r);
    }
    free(body);
}

/* The bill as text (a relayed stream's end) is byte for byte what
 * jansson renders of fc_bill_json, null cost and escapes included. */
static void test_bill_text(void)
{
    struct fc_bill bills[] = {
        {.set = 1,
         .ledger_id = "req-1~ab.1",
         .cost_picodollars = 123456789,
         .has_cost = 1,
         .currency = "USD"},
        {.set = 1, .ledger_id = NULL, .has_cost = 0, .currency = NULL},
        {.set = 1,
         .ledger_id = "q\"\\\x01",
         .cost_picodollars = -5,
         .has_cost = 1,
         .currency = "EUR"},
    };
    for (size_t i = 0; i < sizeof(bills) / sizeof(bills[0]); i++) {
        struct gw_buf b;
        gw_buf_init(&b, 0);
        CU_ASSERT_EQUAL_FATAL(fc_bill_text(&bills[i], &b), GW_OK);
        json_t *j = fc_bill_json(&bills[i]);
        char *want = json_dumps(j, JSON_COMPACT);
        CU_ASSERT_STRING_EQUAL(b.data, want);
        free(want);
        json_decref(j);
        gw_buf_free(&b);
    }
    struct fc_bill none = {0};
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(fc_bill_text(&none, &b), GW_OK);
    CU_ASSERT_EQUAL(b.len, 0);
    gw_buf_free(&b);
}

/* file and input_audio parts become DOCUMENT and AUDIO; a file id (only
 * OpenAI can read it) is refused, and under the lenient parse noted as
 * opaque and left out. */
static void test_parse_documents_audio(void)
{
    static const char body[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":["
        "{\"type\":\"file\",\"file\":{\"filename\":\"a.pdf\",\"file_data\":"
        "\"data:application/pdf;base64,JVBE\"}},"
        "{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"UklG\",\"format\":\"mp3\"}}]}]}";
    struct canon_err err;
    int rc;
    struct canon_req *r = parse_text(body, &err, &rc);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    CU_ASSERT_EQUAL_FATAL(r->messages[0].nparts, 2);
    const struct canon_part *d = &r->messages[0].parts[0], *a = &r->messages[0].parts[1];
    CU_ASSERT_EQUAL(d->type, CANON_PART_DOCUMENT);
    CU_ASSERT_STRING_EQUAL(d->media_type, "application/pdf");
    CU_ASSERT_STRING_EQUAL(d->data, "JVBE");
    CU_ASSERT_STRING_EQUAL(d->filename, "a.pdf");
    CU_ASSERT_EQUAL(a->type, CANON_PART_AUDIO);
    CU_ASSERT_STRING_EQUAL(a->media_type, "audio/mp3");
    CU_ASSERT_STRING_EQUAL(a->data, "UklG");
    canon_req_free(r);

    static const char by_id[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":["
        "{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"file\",\"file\":{\"file_id\":\"f1\"}}]}]}";
    r = parse_text(by_id, &err, &rc);
    CU_ASSERT_EQUAL(rc, GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.param, "messages[0].content[1].file.file_id");
    CU_ASSERT_STRING_EQUAL(err.code, "unsupported_content");
    canon_req_free(r);
    json_t *b = json_loads(by_id, 0, NULL);
    r = canon_req_new(b);
    r->lenient = 1;
    memset(&err, 0, sizeof(err));
    CU_ASSERT_EQUAL(fc_openai_chat.parse(r, &err), GW_OK);
    CU_ASSERT_EQUAL(r->messages[0].nparts, 1);
    CU_ASSERT_STRING_EQUAL(r->opaque.param, "messages[0].content[1].file.file_id");
    canon_req_free(r);
}

static CU_TestInfo tests[] = {
    {"parse: file and input_audio parts; a file id is opaque", test_parse_documents_audio},
    {"bill: as text, as jansson renders it", test_bill_text},
    {"parse: tool call arguments are bounded in all", test_parse_bounds_arguments},
    {"parse: a full request", test_parse_full},
    {"parse: refusals name the field", test_parse_refusals_name_the_field},
    {"stream: exact frames, usage chunk, in-band error", test_stream_exact},
    {"render: text and two tool calls", test_render},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
