/* Tests for dataplane/drivers/openai_responses.c: the upstream request built
 * from a canonical request, refusals that name the client's field, and the
 * parser fed realistic Responses streams and bodies whole, byte by byte and
 * in random splits (the transcripts must be identical), plus malformed,
 * oversize and truncated input. */
#include <CUnit/CUnit.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "canon_record.h"
#include "dp_driver.h"
#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_pool.h"

static const struct dp_driver *D = &drv_openai_responses;

/* ------------------------------------------------------------ parse rig */

/* Whole, byte by byte and in random splits: all must give expect. */
static void check(const char *body, int stream, const char *expect)
{
    canon_record_check(D, stream, body, strlen(body), expect);
}

/* One SSE frame as the API sends it: event line and data. */
#define EV(type, json) "event: " type "\ndata: {\"type\":\"" type "\"," json "}\n\n"

#define CREATED                                                                                    \
    EV("response.created", "\"sequence_number\":0,\"response\":{\"id\":\"resp_abc\",\"object\":"   \
                           "\"response\",\"created_at\":1700000000,\"status\":\"in_progress\","    \
                           "\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"usage\":null}")         \
    EV("response.in_progress", "\"sequence_number\":1,\"response\":{\"id\":\"resp_abc\","          \
                               "\"object\":\"response\",\"status\":\"in_progress\",\"model\":"     \
                               "\"gpt-5-2025-08-07\",\"output\":[]}")

/* Reasoning with two summary parts and encrypted content, text, then two
 * function calls whose arguments arrive in pieces; usage with cache reads
 * (cached_tokens) and cache writes (cache_write_tokens), both part of
 * input_tokens. */
static const char STREAM_FULL[] = CREATED EV(
    "response.output_item.added",
    "\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":"
    "\"rs_1\",\"type\":\"reasoning\",\"summary\":[]}") EV("response.reasoning_summary_part.added",
                                                          "\"sequence_number\":3,\"item_id\":\"rs_"
                                                          "1\",\"output_index\":0,\"summary_"
                                                          "index\":0,"
                                                          "\"part\":{\"type\":\"summary_text\","
                                                          "\"text\":\"\"}") EV("response.reasoning_"
                                                                               "summary_text.delta",
                                                                               "\"sequence_"
                                                                               "number\":4,\"item_"
                                                                               "id\":\"rs_1\","
                                                                               "\"output_index\":0,"
                                                                               "\"summary_index\":"
                                                                               "0,"
                                                                               "\"delta\":\"**"
                                                                               "Weather** I should "
                                                                               "\"")
    EV("response.reasoning_summary_text.delta",
       "\"sequence_number\":5,\"item_id\":\"rs_1\",\"output_index\":0,\"summary_index\":0,"
       "\"delta\":\"check both cities.\"") EV("response.reasoning_summary_text.done",
                                              "\"sequence_number\":6,\"item_id\":\"rs_1\",\"output_"
                                              "index\":0,\"summary_index\":0,"
                                              "\"text\":\"**Weather** I should check both "
                                              "cities.\"") EV("response.reasoning_summary_part."
                                                              "added",
                                                              "\"sequence_number\":7,\"item_id\":"
                                                              "\"rs_1\",\"output_index\":0,"
                                                              "\"summary_index\":1,"
                                                              "\"part\":{\"type\":\"summary_text\","
                                                              "\"text\":\"\"}")
        EV("response.reasoning_summary_text.delta",
           "\"sequence_number\":8,\"item_id\":\"rs_1\","
           "\"output_index\":0,\"summary_index\":1,"
           "\"delta\":\"Calling in parallel.\"") EV("response.output_item.done",
                                                    "\"sequence_number\":9,\"output_index\":0,"
                                                    "\"item\":{\"id\":\"rs_1\",\"type\":"
                                                    "\"reasoning\",\"encrypted_content\":\"gAAAAB-"
                                                    "enc==\",\"summary\":[{\"type\":"
                                                    "\"summary_text\",\"text\":\"**Weather** I "
                                                    "should check both cities.\"},{\"type\":"
                                                    "\"summary_text\",\"text\":\"Calling in "
                                                    "parallel.\"}]}")
            EV("response.output_item.added",
               "\"sequence_number\":10,\"output_index\":1,\"item\":{\"id\":\"msg_1\",\"type\":"
               "\"message\","
               "\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}")
                EV("response.content_part.added",
                   "\"sequence_number\":11,\"item_id\":\"msg_1\",\"output_index\":1,\"content_"
                   "index\":0,"
                   "\"part\":{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":"
                   "\"\"}") EV("response.output_text.delta",
                               "\"sequence_number\":12,\"item_id\":\"msg_1\","
                               "\"output_index\":1,\"content_index\":0,\"delta\":\"Let me "
                               "look \\u00e9t\\u00e9 \",\"logprobs\":[]")
                    EV("response.output_text.delta",
                       "\"sequence_number\":13,\"item_id\":\"msg_1\","
                       "\"output_index\":1,\"content_index\":0,\"delta\":\"that "
                       "up.\",\"logprobs\":[]") EV("response.output_text.done",
                                                   "\"sequence_number\":14,\"item_id\":\"msg_1\","
                                                   "\"output_index\":1,\"content_index\":0,"
                                                   "\"text\":\"Let me "
                                                   "look \\u00e9t\\u00e9 that "
                                                   "up.\",\"logprobs\":[]")
                        EV("response.content_part.done",
                           "\"sequence_number\":15,\"item_id\":\"msg_1\",\"output_index\":1,"
                           "\"content_index\":0,"
                           "\"part\":{\"type\":\"output_text\",\"annotations\":[],\"text\":\"Let "
                           "me look that up.\"}") EV("response.output_item.done",
                                                     "\"sequence_number\":16,\"output_index\":1,"
                                                     "\"item\":{\"id\":\"msg_1\",\"type\":"
                                                     "\"message\","
                                                     "\"status\":\"completed\",\"content\":[{"
                                                     "\"type\":\"output_text\",\"annotations\":[],"
                                                     "\"text\":\"Let me look \\u00e9t\\u00e9 that "
                                                     "up.\"}],\"role\":\"assistant\"}")
                            EV("response.output_item.added",
                               "\"sequence_number\":17,\"output_index\":2,\"item\":{\"id\":\"fc_"
                               "1\",\"type\":"
                               "\"function_call\",\"status\":\"in_progress\",\"arguments\":\"\","
                               "\"call_id\":\"call_A\","
                               "\"name\":\"get_weather\"}") EV("response.function_call_arguments."
                                                               "delta",
                                                               "\"sequence_number\":18,\"item_id\":"
                                                               "\"fc_1\",\"output_index\":2,"
                                                               "\"delta\":\"{\\\"city\\\"\"")
                                EV("response.function_call_arguments.delta",
                                   "\"sequence_number\":19,\"item_id\":\"fc_1\",\"output_index\":2,"
                                   "\"delta\":\":\\\"Paris\\\"}"
                                   "\"") EV("response.function_call_arguments.done",
                                            "\"sequence_number\":20,\"item_id\":\"fc_1\",\"output_"
                                            "index\":2,\"arguments\":"
                                            "\"{\\\"city\\\":\\\"Paris\\\"}\"")
                                    EV("response.output_item.done",
                                       "\"sequence_number\":21,\"output_index\":2,\"item\":{\"id\":"
                                       "\"fc_1\",\"type\":"
                                       "\"function_call\",\"status\":\"completed\",\"arguments\":"
                                       "\"{\\\"city\\\":\\\"Paris\\\"}\","
                                       "\"call_id\":\"call_A\",\"name\":\"get_weather\"}")
                                        EV("response.output_item.added",
                                           "\"sequence_number\":22,\"output_index\":3,\"item\":{"
                                           "\"id\":\"fc_2\",\"type\":"
                                           "\"function_call\",\"status\":\"in_progress\","
                                           "\"arguments\":\"\",\"call_id\":\"call_B\","
                                           "\"name\":\"get_time\"}")
                                            EV("response.function_call_arguments.delta",
                                               "\"sequence_number\":23,\"item_id\":\"fc_2\","
                                               "\"output_index\":3,\"delta\":\"{\\\"tz\\\":\"")
                                                EV("response.function_call_arguments.delta",
                                                   "\"sequence_number\":24,\"item_id\":\"fc_2\","
                                                   "\"output_index\":3,\"delta\":\"\\\"Europe/"
                                                   "Paris\\\"}\"")
                                                    EV("response.output_item.done",
                                                       "\"sequence_number\":25,\"output_index\":3,"
                                                       "\"item\":{\"id\":\"fc_2\",\"type\":"
                                                       "\"function_call\",\"status\":\"completed\","
                                                       "\"arguments\":\"{\\\"tz\\\":\\\"Europe/"
                                                       "Paris\\\"}\",\"call_id\":\"call_B\","
                                                       "\"name\":\"get_time\"}")
                                                        EV("response.completed",
                                                           "\"sequence_number\":26,\"response\":{"
                                                           "\"id\":\"resp_abc\",\"object\":"
                                                           "\"response\","
                                                           "\"status\":\"completed\",\"model\":"
                                                           "\"gpt-5-2025-08-07\",\"output\":[],"
                                                           "\"usage\":{"
                                                           "\"input_tokens\":1200,\"input_tokens_"
                                                           "details\":{\"cached_tokens\":1024,"
                                                           "\"cache_write_tokens\":100},"
                                                           "\"output_tokens\":300,\"output_tokens_"
                                                           "details\":{\"reasoning_tokens\":128},"
                                                           "\"total_tokens\":1500}}");

/* canon_record quotes each CHUNK on its own, so a stream's text shows its
 * delta boundaries ("a""b") where a whole body has one chunk. */
#define FULL_TRANSCRIPT(text)                                                                      \
    "START id=resp_abc model=gpt-5-2025-08-07\n"                                                   \
    "REASONING \"**Weather** I should check both cities.\\n\\nCalling in parallel.\"\n"            \
    "REASONING \"\" sig=gAAAAB-enc==\n"                                                            \
    "TEXT " text "\n"                                                                              \
    "TOOL 0 id=call_A name=get_weather\n"                                                          \
    "ARGS 0 {\"city\":\"Paris\"}\n"                                                                \
    "TOOL_END 0\n"                                                                                 \
    "TOOL 1 id=call_B name=get_time\n"                                                             \
    "ARGS 1 {\"tz\":\"Europe/Paris\"}\n"                                                           \
    "TOOL_END 1\n"                                                                                 \
    "USAGE in=76 cr=1024 cw5=100 cw1h=0 out=300 rs=128\n"                                          \
    "DONE tool_use\n"

static void test_stream_full(void)
{
    check(STREAM_FULL, 1, FULL_TRANSCRIPT("\"Let me look été \"\"that up.\""));
}

/* The same answer as one response object. */
static const char WHOLE_FULL[] =
    "{\"id\":\"resp_abc\",\"object\":\"response\",\"created_at\":1700000000,\"status\":"
    "\"completed\",\"error\":null,\"incomplete_details\":null,\"model\":\"gpt-5-2025-08-07\","
    "\"output\":[{\"id\":\"rs_1\",\"type\":\"reasoning\",\"encrypted_content\":\"gAAAAB-enc==\","
    "\"summary\":[{\"type\":\"summary_text\",\"text\":\"**Weather** I should check both "
    "cities.\"},{\"type\":\"summary_text\",\"text\":\"Calling in parallel.\"}]},{\"id\":\"msg_1\","
    "\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":"
    "\"output_text\",\"annotations\":[],\"text\":\"Let me look \\u00e9t\\u00e9 that up.\"}]},"
    "{\"id\":\"fc_1\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":"
    "\"{\\\"city\\\":\\\"Paris\\\"}\",\"call_id\":\"call_A\",\"name\":\"get_weather\"},{\"id\":"
    "\"fc_2\",\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":\"{\\\"tz\\\":"
    "\\\"Europe/Paris\\\"}\",\"call_id\":\"call_B\",\"name\":\"get_time\"}],\"usage\":{"
    "\"input_tokens\":1200,\"input_tokens_details\":{\"cached_tokens\":1024,\"cache_write_tokens\":"
    "100},\"output_tokens\":300,"
    "\"output_tokens_details\":{\"reasoning_tokens\":128},\"total_tokens\":1500}}";

static void test_whole_full(void)
{
    check(WHOLE_FULL, 0, FULL_TRANSCRIPT("\"Let me look été that up.\""));
}

/* gpt-oss style raw reasoning (reasoning_text), then text cut by the limit. */
static void test_stream_incomplete(void)
{
    static const char body[] = CREATED EV("response.output_item.added",
                                          "\"sequence_number\":2,\"output_index\":0,\"item\":{"
                                          "\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[],"
                                          "\"content\":[]}")
        EV("response.reasoning_text.delta",
           "\"sequence_number\":3,\"item_id\":\"rs_1\",\"output_index\":0,\"content_index\":0,"
           "\"delta\":\"User wants a poem.\"")
            EV("response.output_item.done",
               "\"sequence_number\":4,\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":"
               "\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":"
               "\"User "
               "wants a poem.\"}]}") EV("response.output_item.added",
                                        "\"sequence_number\":5,\"output_index\":1,\"item\":{"
                                        "\"id\":\"msg_1\",\"type\":\"message\",\"role\":"
                                        "\"assistant\",\"content\":[]}")
                EV("response.output_text.delta",
                   "\"sequence_number\":6,\"item_id\":\"msg_1\","
                   "\"output_index\":1,\"content_index\":0,\"delta\":\"Roses "
                   "are\"")
                    EV("response.incomplete",
                       "\"sequence_number\":7,\"response\":{\"id\":\"resp_abc\",\"status\":"
                       "\"incomplete\","
                       "\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{"
                       "\"input_tokens\":"
                       "20,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":16,"
                       "\"output_tokens_details\":{\"reasoning_tokens\":10},\"total_tokens\":36}}");
    check(body, 1,
          "START id=resp_abc model=gpt-5-2025-08-07\n"
          "REASONING \"User wants a poem.\"\n"
          "TEXT \"Roses are\"\n"
          "USAGE in=20 cr=0 cw5=0 cw1h=0 out=16 rs=10\n"
          "DONE max_tokens\n");
}

static void test_stream_filter_and_refusal(void)
{
    static const char filtered[] = CREATED EV(
        "response.output_text.delta", "\"sequence_number\":2,\"item_id\":\"msg_1\","
                                      "\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"")
        EV("response.incomplete", "\"sequence_number\":3,\"response\":{\"status\":\"incomplete\","
                                  "\"incomplete_details\":{\"reason\":\"content_filter\"}}");
    check(filtered, 1,
          "START id=resp_abc model=gpt-5-2025-08-07\nTEXT \"Hi\"\nDONE content_filter\n");
    static const char refusal[] = CREATED EV(
        "response.output_item.added", "\"sequence_number\":2,\"output_index\":0,\"item\":{"
                                      "\"id\":\"msg_1\",\"type\":\"message\",\"content\":[]}")
        EV("response.refusal.delta", "\"sequence_number\":3,\"item_id\":\"msg_1\","
                                     "\"output_index\":0,\"content_index\":0,\"delta\":\"I can't "
                                     "help with that.\"")
            EV("response.output_item.done",
               "\"sequence_number\":4,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":"
               "\"message\",\"content\":[{\"type\":\"refusal\",\"refusal\":\"I can't help with "
               "that.\"}]}") EV("response.completed",
                                "\"sequence_number\":5,\"response\":{\"status\":\"completed\"}");
    check(refusal, 1,
          "START id=resp_abc model=gpt-5-2025-08-07\nTEXT \"I can't help with that.\"\n"
          "DONE refusal\n");
}

/* A compatible server that puts content only in the finished items, sends
 * no response.created, and adds [DONE]. */
static void test_stream_items_only(void)
{
    static const char body[] =
        "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":"
        "\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":"
        "\"Hello\"}]}}\n\n"
        "data: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"type\":"
        "\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"\"}}\n\n"
        "data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":"
        "{\"input_tokens\":3,\"output_tokens\":2}}}\n\n"
        "data: [DONE]\n\n";
    check(body, 1,
          "START id=- model=-\nTEXT \"Hello\"\nTOOL 0 id=c1 name=f\nARGS 0 {}\nTOOL_END 0\n"
          "USAGE in=3 cr=0 cw5=0 cw1h=0 out=2 rs=0\nDONE tool_use\n");
    /* Counts out of range are brought into [0, CANON_MAX_TOKENS] (found by
     * tests/fuzz/fuzz_drivers: a negative output passed through). */
    check("data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n"
          "data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\","
          "\"usage\":{\"input_tokens\":9223372036854775807,\"output_tokens\":-2,"
          "\"input_tokens_details\":{\"cached_tokens\":5},"
          "\"output_tokens_details\":{\"reasoning_tokens\":-1}}}}\n\n",
          1,
          "START id=- model=-\nTEXT \"x\"\nUSAGE in=999999999995 cr=5 cw5=0 cw1h=0 out=0 rs=0\n"
          "DONE end\n");
}

static void test_stream_errors(void)
{
    /* response.failed after text. */
    static const char failed[] = CREATED EV(
        "response.output_text.delta", "\"sequence_number\":2,\"item_id\":\"m\","
                                      "\"output_index\":0,\"content_index\":0,\"delta\":\"Par\"")
        EV("response.failed", "\"sequence_number\":3,\"response\":{\"id\":\"resp_abc\",\"status\":"
                              "\"failed\",\"error\":{\"code\":\"server_error\",\"message\":"
                              "\"The model failed.\"}}");
    check(failed, 1,
          "START id=resp_abc model=gpt-5-2025-08-07\nTEXT \"Par\"\nERROR provider_5xx status=0\n");
    /* An error event, top-level fields, before anything. */
    static const char err[] =
        "event: error\ndata: {\"type\":\"error\",\"sequence_number\":0,\"code\":"
        "\"rate_limit_exceeded\",\"message\":\"Slow down\",\"param\":null}\n\n";
    check(err, 1, "ERROR rate_limited status=0\n");
    /* The nested shape some servers send. */
    static const char nested[] =
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
        "\"code\":\"context_length_exceeded\",\"message\":\"too long\"}}\n\n";
    check(nested, 1, "ERROR context_overflow status=0\n");
    /* A gateway's own class passes through. */
    check("data: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{"
          "\"code\":\"quota_exhausted\",\"message\":\"q\"}}}\n\n",
          1, "ERROR quota_exhausted status=0\n");
    /* Truncated: no terminal event. */
    static const char trunc[] = CREATED EV(
        "response.output_text.delta", "\"sequence_number\":2,\"item_id\":\"m\","
                                      "\"output_index\":0,\"content_index\":0,\"delta\":\"Par\"");
    check(trunc, 1,
          "START id=resp_abc model=gpt-5-2025-08-07\nTEXT \"Par\"\nERROR network status=0\n");
    check("", 1, "ERROR network status=0\n");
    /* Truncated inside an event. */
    check("event: response.created\ndata: {\"type\":\"resp", 1, "ERROR network status=0\n");
    /* Malformed JSON. */
    check(CREATED "data: {not json}\n\n", 1,
          "START id=resp_abc model=gpt-5-2025-08-07\nERROR provider_5xx status=0\n");
    /* Arguments for a call never started. */
    check(CREATED EV("response.function_call_arguments.delta",
                     "\"item_id\":\"fc\",\"output_index\":4,\"delta\":\"{}\""),
          1, "START id=resp_abc model=gpt-5-2025-08-07\nERROR provider_5xx status=0\n");
    /* Arguments for a call after its item was done: refused, never
     * spliced. */
    check(CREATED EV("response.output_item.added",
                     "\"output_index\":0,\"item\":{\"type\":\"function_call\",\"call_id\":\"a\","
                     "\"name\":\"f\",\"arguments\":\"\"}")
              EV("response.output_item.done",
                 "\"output_index\":0,\"item\":{\"type\":\"function_call\",\"call_id\":\"a\","
                 "\"name\":\"f\",\"arguments\":\"{}\"}")
                  EV("response.function_call_arguments.delta",
                     "\"item_id\":\"fc\",\"output_index\":0,\"delta\":\"{}\""),
          1,
          "START id=resp_abc model=gpt-5-2025-08-07\nTOOL 0 id=a name=f\nARGS 0 {}\nTOOL_END 0\n"
          "ERROR provider_5xx status=0\n");
}

/* Two function calls whose argument deltas alternate by output_index: both
 * whole, in the order their items were added; the later one is held until
 * the earlier item is done, then streams live. */
static void test_stream_interleaved_calls(void)
{
#define ADDED(oi, id, name)                                                                        \
    EV("response.output_item.added",                                                               \
       "\"output_index\":" oi ",\"item\":{\"type\":"                                               \
       "\"function_call\",\"call_id\":\"" id "\",\"name\":\"" name "\",\"arguments\":\"\"}")
#define ARGS(oi, d)                                                                                \
    EV("response.function_call_arguments.delta", "\"output_index\":" oi ",\"delta\":" d)
#define DONE(oi, id, name, a)                                                                      \
    EV("response.output_item.done",                                                                \
       "\"output_index\":" oi ",\"item\":{\"type\":"                                               \
       "\"function_call\",\"call_id\":\"" id "\",\"name\":\"" name "\",\"arguments\":" a "}")
    check(CREATED ADDED("0", "a", "f") ADDED("1", "b", "g") ARGS("1", "\"{\\\"y\\\"\"")
              ARGS("0", "\"{\\\"x\\\":1}\"") DONE("0", "a", "f", "\"{\\\"x\\\":1}\"")
                  ARGS("1", "\":2}\"") DONE("1", "b", "g", "\"{\\\"y\\\":2}\"")
                      EV("response.completed",
                         "\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":3,"
                         "\"output_tokens\":2}}"),
          1,
          "START id=resp_abc model=gpt-5-2025-08-07\nTOOL 0 id=a name=f\nARGS 0 {\"x\":1}\n"
          "TOOL_END 0\nTOOL 1 id=b name=g\nARGS 1 {\"y\":2}\nTOOL_END 1\n"
          "USAGE in=3 cr=0 cw5=0 cw1h=0 out=2 rs=0\nDONE tool_use\n");
    /* The later call's item done before the earlier's: it waits, whole. */
    check(CREATED ADDED("0", "a", "f") ADDED("1", "b", "g") ARGS("1", "\"[]\"")
              DONE("1", "b", "g", "\"[]\"") ARGS("0", "\"{}\"") DONE("0", "a", "f", "\"{}\"")
                  EV("response.completed",
                     "\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":3,"
                     "\"output_tokens\":2}}"),
          1,
          "START id=resp_abc model=gpt-5-2025-08-07\nTOOL 0 id=a name=f\nARGS 0 {}\n"
          "TOOL_END 0\nTOOL 1 id=b name=g\nARGS 1 []\nTOOL_END 1\n"
          "USAGE in=3 cr=0 cw5=0 cw1h=0 out=2 rs=0\nDONE tool_use\n");
#undef ADDED
#undef ARGS
#undef DONE
}

static void test_stream_oversize(void)
{
    size_t n = DRV_MAX_EVENT + 1024;
    char *body = malloc(n + 64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    memcpy(body, "data: {\"type\":\"response.output_text.delta\",\"delta\":\"", 52);
    memset(body + 52, 'a', n);
    memcpy(body + 52 + n, "\"}\n\n", 5);
    char *got = canon_record_run(D, 1, body, strlen(body), CANON_SPLIT_WHOLE, 0, 0);
    CU_ASSERT_STRING_EQUAL(got, "ERROR provider_5xx status=0\n");
    free(got);
    free(body);
    /* A whole body past DRV_MAX_BODY. */
    size_t big = DRV_MAX_BODY + 16;
    body = calloc(1, big);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    memset(body, ' ', big - 1);
    got = canon_record_run(D, 0, body, big - 1, CANON_SPLIT_WHOLE, 0, 0);
    CU_ASSERT_STRING_EQUAL(got, "ERROR provider_5xx status=0\n");
    free(got);
    free(body);
}

static void test_whole_errors(void)
{
    /* Inconsistent usage is clamped, never negative. */
    check("{\"id\":\"r\",\"model\":\"m\",\"status\":\"completed\",\"output\":[{\"type\":"
          "\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"a\"}]}],\"usage\":{"
          "\"input_tokens\":5,\"input_tokens_details\":{\"cached_tokens\":9,"
          "\"cache_write_tokens\":3},\"output_tokens\":1,\"output_tokens_details\":{"
          "\"reasoning_tokens\":4}}}",
          0, "START id=r model=m\nTEXT \"a\"\nUSAGE in=0 cr=5 cw5=0 cw1h=0 out=1 rs=1\nDONE end\n");
    check("", 0, "ERROR empty_output status=0\n");
    check("{\"id\":", 0, "ERROR provider_5xx status=0\n");
    check("[1,2]", 0, "ERROR provider_5xx status=0\n");
    check("{\"id\":\"r\",\"status\":\"failed\",\"error\":{\"code\":\"invalid_prompt\",\"message\":"
          "\"flagged\"},\"output\":[]}",
          0, "ERROR content_filtered status=0\n");
    check("{\"id\":\"r\",\"status\":\"completed\"}", 0, "ERROR provider_5xx status=0\n");
    check("{\"id\":\"r\",\"model\":\"m\",\"status\":\"incomplete\",\"incomplete_details\":{"
          "\"reason\":\"max_output_tokens\"},\"output\":[{\"type\":\"message\",\"content\":[{"
          "\"type\":\"output_text\",\"text\":\"cut\"}]}],\"usage\":{\"input_tokens\":5,"
          "\"output_tokens\":9}}",
          0,
          "START id=r model=m\nTEXT \"cut\"\nUSAGE in=5 cr=0 cw5=0 cw1h=0 out=9 rs=0\nDONE "
          "max_tokens\n");
}

/* A sink that stops after the first event: the parser stops and reports. */
static void test_sink_stops(void)
{
    struct drv_parser *p = D->parser_new(1);
    struct canon_record rec;
    canon_record_init(&rec);
    rec.stop_after = 2;
    struct canon_sink s = {.emit = canon_record_emit, .arg = &rec};
    static const char body[] =
        CREATED EV("response.output_text.delta", "\"output_index\":0,\"delta\":\"a\"")
            EV("response.output_text.delta", "\"output_index\":0,\"delta\":\"b\"");
    /* START returns 0 (not joinable), the first CHUNK stops. */
    int rc = D->parse(p, body, strlen(body), &s);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(canon_record_text(&rec), "START id=resp_abc model=gpt-5-2025-08-07\n"
                                                    "TEXT \"a\"\n");
    canon_record_free(&rec);
    D->parser_free(p);
}

/* ------------------------------------------------------------------ build */

static struct dp_provider prov;

static struct drv_target target(void)
{
    memset(&prov, 0, sizeof(prov));
    prov.name = "oa";
    prov.driver = "openai-responses";
    prov.drv = D->info;
    prov.options = json_object();
    prov.base_url = "https://api.example.test/v1";
    prov.credential = "sk-secret";
    struct drv_target t = {.provider = &prov, .model = "gpt-5", .request_id = "req-1"};
    return t;
}

static struct canon_part *parts(struct canon_req *r, size_t n)
{
    return gw_pool_calloc(r->pool, n * sizeof(struct canon_part));
}

static const char *const field_names[CANON_F_COUNT] = {
    [CANON_F_MESSAGES] = "input",
    [CANON_F_TOP_K] = "top_k",
    [CANON_F_SEED] = "seed",
    [CANON_F_STOP] = "stop_sequences",
    [CANON_F_PRESENCE_PENALTY] = "pp",
    [CANON_F_FREQUENCY_PENALTY] = "fp",
    [CANON_F_MAX_TOKENS] = "max_tokens_x",
};

/* system; user text + image (data URL) ; assistant thinking (signed), text
 * and two tool calls; user with two tool results (one an error) and text;
 * a mid-conversation system message; redacted thinking. */
static struct canon_req *full_request(json_t *params)
{
    struct canon_req *r = canon_req_new(json_object());
    r->model = "sel";
    r->stream = 1;
    r->nsystem = 2;
    r->system = parts(r, 2);
    r->system[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Be brief."};
    r->system[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Use metric."};
    r->nmessages = 5;
    r->messages = gw_pool_calloc(r->pool, 5 * sizeof(struct canon_message));
    struct canon_message *m = r->messages;
    m[0].role = CANON_ROLE_USER;
    m[0].nparts = 3;
    m[0].parts = parts(r, 3);
    m[0].parts[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Weather?"};
    m[0].parts[1] = (struct canon_part){
        .type = CANON_PART_IMAGE, .media_type = "image/png", .data = "iVBORw0KGgo="};
    m[0].parts[2] = (struct canon_part){
        .type = CANON_PART_IMAGE, .url = "https://example.test/a.jpg", .detail = "low"};
    m[1].role = CANON_ROLE_ASSISTANT;
    m[1].nparts = 5;
    m[1].parts = parts(r, 5);
    m[1].parts[0] =
        (struct canon_part){.type = CANON_PART_THINKING, .text = "Think.", .signature = "ENC1"};
    m[1].parts[1] = (struct canon_part){.type = CANON_PART_THINKING, .text = "unsigned"};
    m[1].parts[2] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Checking."};
    m[1].parts[3] = (struct canon_part){.type = CANON_PART_TOOL_CALL,
                                        .id = "call_A",
                                        .name = "get_weather",
                                        .arguments = "{\"city\":\"Paris\"}"};
    m[1].parts[4] = (struct canon_part){
        .type = CANON_PART_TOOL_CALL, .id = "call_B", .name = "get_time", .arguments = "{}"};
    m[2].role = CANON_ROLE_USER;
    m[2].nparts = 3;
    m[2].parts = parts(r, 3);
    struct canon_part *c1 = parts(r, 1);
    c1[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "18C"};
    struct canon_part *c2 = parts(r, 1);
    c2[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "no tz db"};
    m[2].parts[0] = (struct canon_part){
        .type = CANON_PART_TOOL_RESULT, .id = "call_A", .content = c1, .ncontent = 1};
    m[2].parts[1] = (struct canon_part){.type = CANON_PART_TOOL_RESULT,
                                        .id = "call_B",
                                        .content = c2,
                                        .ncontent = 1,
                                        .is_error = 1};
    m[2].parts[2] = (struct canon_part){.type = CANON_PART_TEXT, .text = "And?"};
    m[3].role = CANON_ROLE_SYSTEM;
    m[3].nparts = 1;
    m[3].parts = parts(r, 1);
    m[3].parts[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Answer now."};
    m[4].role = CANON_ROLE_ASSISTANT;
    m[4].nparts = 2;
    m[4].parts = parts(r, 2);
    m[4].parts[0] = (struct canon_part){.type = CANON_PART_REDACTED_THINKING, .text = "ENC2"};
    m[4].parts[1] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Sunny."};
    r->ntools = 2;
    r->tools = gw_pool_calloc(r->pool, 2 * sizeof(struct canon_tool));
    r->tools[0] = (struct canon_tool){.name = "get_weather",
                                      .description = "Weather by city",
                                      .parameters = params,
                                      .strict = -1};
    r->tools[1] = (struct canon_tool){.name = "get_time", .strict = 1};
    r->tool_choice = CANON_TC_NAMED;
    r->tool_choice_name = "get_weather";
    r->parallel_tool_calls = 1;
    r->has_temperature = 1;
    r->temperature = 0.5;
    r->has_top_p = 1;
    r->top_p = 0.25;
    r->has_max_tokens = 1;
    r->max_tokens = 512;
    r->format = CANON_FMT_JSON_SCHEMA;
    r->format_name = "answer";
    r->format_schema = json_object_get(params, "x-fmt");
    r->format_strict = 1;
    r->reasoning_budget = 8000;
    r->user = "u-42";
    return r;
}

static const char *header(const struct drv_request *q, const char *prefix)
{
    for (const struct curl_slist *l = q->headers; l; l = l->next)
        if (strncmp(l->data, prefix, strlen(prefix)) == 0)
            return l->data;
    return NULL;
}

static void test_build_full(void)
{
    json_t *params = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                                "\"string\"}},\"x-fmt\":{\"type\":\"object\"}}",
                                0, NULL);
    struct canon_req *r = full_request(params);
    struct drv_target t = target();
    struct drv_request q = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(D->build_chat(&t, r, &q, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(q.url, "https://api.example.test/v1/responses");
    CU_ASSERT_EQUAL(q.stream, 1);
    CU_ASSERT_PTR_NOT_NULL(header(&q, "Authorization: Bearer sk-secret"));
    CU_ASSERT_PTR_NOT_NULL(header(&q, "Content-Type: application/json"));
    CU_ASSERT_PTR_NOT_NULL(header(&q, "x-request-id: req-1"));
    json_t *got = json_loadb(q.body, q.body_len, 0, NULL);
    json_t *want = json_loads(
        "{\"model\":\"gpt-5\",\"stream\":true,\"store\":false,"
        "\"instructions\":\"Be brief.\\n\\nUse metric.\","
        "\"input\":["
        " {\"type\":\"message\",\"role\":\"user\",\"content\":["
        "  {\"type\":\"input_text\",\"text\":\"Weather?\"},"
        "  {\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,iVBORw0KGgo=\","
        "   \"detail\":\"auto\"},"
        "  {\"type\":\"input_image\",\"image_url\":\"https://example.test/a.jpg\",\"detail\":"
        "\"low\"}]},"
        " {\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"Think.\"}],"
        "  \"encrypted_content\":\"ENC1\"},"
        " {\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
        "  \"text\":\"Checking.\",\"annotations\":[]}]},"
        " {\"type\":\"function_call\",\"call_id\":\"call_A\",\"name\":\"get_weather\","
        "  \"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
        " {\"type\":\"function_call\",\"call_id\":\"call_B\",\"name\":\"get_time\","
        "  \"arguments\":\"{}\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"call_A\",\"output\":\"18C\"},"
        " {\"type\":\"function_call_output\",\"call_id\":\"call_B\",\"output\":\"[tool error] no "
        "tz db\"},"
        " {\"type\":\"message\",\"role\":\"user\",\"content\":\"And?\"},"
        " {\"type\":\"message\",\"role\":\"system\",\"content\":\"Answer now.\"},"
        " {\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":\"ENC2\"},"
        " {\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
        "  \"text\":\"Sunny.\",\"annotations\":[]}]}],"
        "\"tools\":["
        " {\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather by city\","
        "  \"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
        "   \"x-fmt\":{\"type\":\"object\"}},\"strict\":false},"
        " {\"type\":\"function\",\"name\":\"get_time\",\"parameters\":null,\"strict\":true}],"
        "\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"},"
        "\"parallel_tool_calls\":true,\"temperature\":0.5,\"top_p\":0.25,"
        "\"max_output_tokens\":512,"
        "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"answer\",\"schema\":{\"type\":"
        "\"object\"},\"strict\":true}},"
        "\"reasoning\":{\"effort\":\"medium\"},"
        "\"include\":[\"reasoning.encrypted_content\"],"
        "\"user\":\"u-42\"}",
        0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    if (!json_equal(got, want)) {
        char *s = json_dumps(got, JSON_INDENT(1));
        fprintf(stderr, "\ngot:\n%s\n", s);
        free(s);
    }
    CU_ASSERT_TRUE(json_equal(got, want));
    json_decref(got);
    json_decref(want);
    drv_request_free(&q);
    canon_req_free(r);
    json_decref(params);
    json_decref(prov.options);
}

/* A plain request: no include, no reasoning; options add summaries. */
static void test_build_plain_and_options(void)
{
    struct canon_req *r = canon_req_new(json_object());
    r->nmessages = 1;
    r->messages = gw_pool_calloc(r->pool, sizeof(struct canon_message));
    r->messages[0].role = CANON_ROLE_USER;
    r->messages[0].nparts = 1;
    r->messages[0].parts = parts(r, 1);
    r->messages[0].parts[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Hi"};
    r->format = CANON_FMT_JSON_OBJECT;
    struct drv_target t = target();
    struct drv_request q = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(D->build_chat(&t, r, &q, &err), GW_OK);
    json_t *got = json_loadb(q.body, q.body_len, 0, NULL);
    json_t *want = json_loads("{\"model\":\"gpt-5\",\"stream\":false,\"store\":false,\"input\":["
                              "{\"type\":\"message\",\"role\":\"user\",\"content\":\"Hi\"}],"
                              "\"text\":{\"format\":{\"type\":\"json_object\"}}}",
                              0, NULL);
    CU_ASSERT_TRUE(json_equal(got, want));
    CU_ASSERT_EQUAL(q.stream, 0);
    json_decref(got);
    json_decref(want);
    drv_request_free(&q);

    json_object_set_new(prov.options, "reasoning_summary", json_string("auto"));
    json_object_set_new(prov.options, "encrypted_reasoning", json_integer(1));
    r->reasoning_effort = "high";
    CU_ASSERT_EQUAL_FATAL(D->build_chat(&t, r, &q, &err), GW_OK);
    got = json_loadb(q.body, q.body_len, 0, NULL);
    CU_ASSERT_STRING_EQUAL(gw_json_str(json_object_get(got, "reasoning"), "effort"), "high");
    CU_ASSERT_STRING_EQUAL(gw_json_str(json_object_get(got, "reasoning"), "summary"), "auto");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(got, "include")), 1);
    json_decref(got);
    drv_request_free(&q);

    /* Turned off: no include even with an effort. */
    json_object_set_new(prov.options, "encrypted_reasoning", json_integer(0));
    CU_ASSERT_EQUAL_FATAL(D->build_chat(&t, r, &q, &err), GW_OK);
    got = json_loadb(q.body, q.body_len, 0, NULL);
    CU_ASSERT_PTR_NULL(json_object_get(got, "include"));
    json_decref(got);
    drv_request_free(&q);
    canon_req_free(r);
    json_decref(prov.options);
}

static void refused(void (*set)(struct canon_req *), const char *param)
{
    struct canon_req *r = canon_req_new(json_object());
    r->field_names = field_names;
    r->nmessages = 1;
    r->messages = gw_pool_calloc(r->pool, sizeof(struct canon_message));
    r->messages[0].role = CANON_ROLE_USER;
    r->messages[0].nparts = 1;
    r->messages[0].parts = parts(r, 1);
    r->messages[0].parts[0] = (struct canon_part){.type = CANON_PART_TEXT, .text = "Hi"};
    set(r);
    struct drv_target t = target();
    struct drv_request q = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL(D->build_chat(&t, r, &q, &err), GW_EINVAL);
    CU_ASSERT_EQUAL(err.status, 400);
    CU_ASSERT_STRING_EQUAL(err.param, param);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, param));
    drv_request_free(&q);
    canon_req_free(r);
    json_decref(prov.options);
}

static void set_top_k(struct canon_req *r)
{
    r->has_top_k = 1;
    r->top_k = 40;
}
static void set_seed(struct canon_req *r)
{
    r->has_seed = 1;
}
static void set_stop(struct canon_req *r)
{
    static const char *stop[] = {"END"};
    r->stop = stop;
    r->nstop = 1;
}
static void set_pp(struct canon_req *r)
{
    r->has_presence_penalty = 1;
}
static void set_fp(struct canon_req *r)
{
    r->has_frequency_penalty = 1;
}
static void set_image_in_assistant(struct canon_req *r)
{
    r->messages[0].role = CANON_ROLE_ASSISTANT;
    r->messages[0].parts[0] =
        (struct canon_part){.type = CANON_PART_IMAGE, .media_type = "image/png", .data = "AAAA"};
}
static void set_image_in_error_result(struct canon_req *r)
{
    struct canon_part *c = parts(r, 1);
    c[0] = (struct canon_part){.type = CANON_PART_IMAGE, .url = "https://x.test/a.png"};
    r->messages[0].parts[0] = (struct canon_part){
        .type = CANON_PART_TOOL_RESULT, .id = "c", .content = c, .ncontent = 1, .is_error = 1};
}

static void test_build_refusals(void)
{
    refused(set_top_k, "top_k");
    refused(set_seed, "seed");
    refused(set_stop, "stop_sequences");
    refused(set_pp, "pp");
    refused(set_fp, "fp");
    refused(set_image_in_assistant, "input");
    refused(set_image_in_error_result, "input");
}

static void test_embed(void)
{
    struct drv_target t = target();
    const char *inputs[] = {"a", "b"};
    struct canon_embed_req er = {.model = "e", .inputs = inputs, .ninputs = 2, .dimensions = 8};
    struct drv_request q = {0};
    struct canon_err err = {0};
    CU_ASSERT_EQUAL_FATAL(D->build_embed(&t, &er, &q, &err), GW_OK);
    CU_ASSERT_STRING_EQUAL(q.url, "https://api.example.test/v1/embeddings");
    json_t *got = json_loadb(q.body, q.body_len, 0, NULL);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(got, "dimensions")), 8);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(got, "input")), 2);
    json_decref(got);
    drv_request_free(&q);
    json_decref(prov.options);
    static const char body[] = "{\"data\":[{\"embedding\":[0.5,1]},{\"embedding\":[2,3]}],"
                               "\"model\":\"e-1\",\"usage\":{\"prompt_tokens\":4}}";
    struct canon_embed_resp e = {0};
    char msg[128];
    CU_ASSERT_EQUAL(D->parse_embed(body, strlen(body), &e, msg, sizeof(msg)), GW_OK);
    CU_ASSERT_EQUAL(e.nvec, 2);
    CU_ASSERT_EQUAL(e.dim, 2);
    CU_ASSERT_EQUAL(e.usage.input, 4);
    CU_ASSERT_STRING_EQUAL(e.model, "e-1");
    canon_embed_resp_free(&e);
}

static void test_registered(void)
{
    CU_ASSERT_PTR_EQUAL(dp_driver_find("openai-responses"), &drv_openai_responses);
}

static CU_TestInfo tests[] = {
    {"stream: reasoning, text, two calls, usage", test_stream_full},
    {"whole body: the same answer", test_whole_full},
    {"stream: raw reasoning, incomplete", test_stream_incomplete},
    {"stream: content filter, refusal", test_stream_filter_and_refusal},
    {"stream: content only in finished items", test_stream_items_only},
    {"stream: function calls interleaved by output_index", test_stream_interleaved_calls},
    {"stream: failures, truncation, malformed", test_stream_errors},
    {"stream and body: oversize", test_stream_oversize},
    {"whole body: failures", test_whole_errors},
    {"a stopping sink stops the parser", test_sink_stops},
    {"build: full request", test_build_full},
    {"build: plain request, options", test_build_plain_and_options},
    {"build: refusals name the client field", test_build_refusals},
    {"embeddings", test_embed},
    {"registered", test_registered},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
