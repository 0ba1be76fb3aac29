/* Tests for dp_tokens.h: the one token estimator, worked by hand from its
 * rule (a token per 4 bytes of text plus one per piece, 4 per message,
 * 1,000 per image or document by URL, base64 PDF a token per 8 bytes,
 * base64 audio a token per 1,000). */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <string.h>

#include "canon.h"
#include "dp_tokens.h"

static void test_text(void)
{
    CU_ASSERT_EQUAL(dp_tokens_text(0), 1);
    CU_ASSERT_EQUAL(dp_tokens_text(3), 1);
    CU_ASSERT_EQUAL(dp_tokens_text(4), 2);
    CU_ASSERT_EQUAL(dp_tokens_text(400), 101);
    /* UTF-8 counts in bytes: "héllo" is 6. */
    CU_ASSERT_EQUAL(dp_tokens_text(strlen("h\xc3\xa9llo")), 2);
}

static void test_messages_and_parts(void)
{
    struct canon_req empty = {0};
    CU_ASSERT_EQUAL(dp_tokens_request(&empty), 0);
    /* 20 bytes of text: 6; the message: 4. */
    struct canon_part text = {.type = CANON_PART_TEXT, .text = "hello there, general"};
    struct canon_message msg = {.role = CANON_ROLE_USER, .parts = &text, .nparts = 1};
    struct canon_req r = {.messages = &msg, .nmessages = 1};
    CU_ASSERT_EQUAL(dp_tokens_request(&r), 4 + 6);
    /* A system part counts as text, without a message's 4. */
    struct canon_part sys = {.type = CANON_PART_TEXT, .text = "be brief"};
    r.system = &sys;
    r.nsystem = 1;
    CU_ASSERT_EQUAL(dp_tokens_request(&r), 3 + 4 + 6);
    r.system = NULL;
    r.nsystem = 0;
    /* An image, a document by URL, base64 PDF (16 bytes: 3), a document's
     * text (8 bytes: 3), audio (2,500 bytes of base64: 3), a tool call
     * (arguments 9 bytes: 3, name 3 bytes: 1), a tool result holding an
     * image, and redacted thinking (nothing). */
    struct canon_part img = {.type = CANON_PART_IMAGE, .url = "https://x/y.png"};
    char audio[2501];
    memset(audio, 'A', 2500);
    audio[2500] = 0;
    struct canon_part parts[] = {
        {.type = CANON_PART_IMAGE, .url = "https://x/y.png"},
        {.type = CANON_PART_DOCUMENT, .url = "https://x/y.pdf"},
        {.type = CANON_PART_DOCUMENT, .data = "JVBERi0xLjQKJcfs"},
        {.type = CANON_PART_DOCUMENT, .text = "a page.."},
        {.type = CANON_PART_AUDIO, .data = audio},
        {.type = CANON_PART_TOOL_CALL, .name = "get", .arguments = "{\"q\":\"x\"}"},
        {.type = CANON_PART_TOOL_RESULT, .content = &img, .ncontent = 1},
        {.type = CANON_PART_REDACTED_THINKING},
        {.type = CANON_PART_THINKING, .text = "hmm"},
    };
    msg.parts = parts;
    msg.nparts = sizeof(parts) / sizeof(parts[0]);
    CU_ASSERT_EQUAL(dp_tokens_request(&r), 4 + 1000 + 1000 + 3 + 3 + 3 + (3 + 1) + 1000 + 0 + 1);
}

static void test_tools(void)
{
    json_t *schema = json_pack("{s:s}", "type", "object"); /* {"type":"object"}: 17 bytes */
    struct canon_tool tools[] = {
        {.name = "get_weather", .description = "the weather", .parameters = schema},
        {.name = "x"},
    };
    struct canon_req r = {.tools = tools, .ntools = 2};
    /* get_weather 11: 3; "the weather" 11: 3; the schema 17: 5; "x": 1. */
    CU_ASSERT_EQUAL(dp_tokens_request(&r), 3 + 3 + 5 + 1);
    json_decref(schema);
}

static CU_TestInfo tests[] = {
    {"text: a token per 4 bytes plus one", test_text},
    {"messages and every kind of part", test_messages_and_parts},
    {"tools: name, description, schema", test_tools},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
