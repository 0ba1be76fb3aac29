/*
 * drv_docs: the names, extensions and encodings the drivers give documents
 * and audio, and the refusal of a member a target has no field for.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "drv_docs.h"
#include "gw_error.h"

static void test_names(void)
{
    struct canon_part p = {.type = CANON_PART_DOCUMENT, .media_type = "application/pdf"};
    char buf[256];
    drv_doc_name(&p, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "document");
    p.filename = "Q3 report.final.pdf";
    drv_doc_name(&p, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "Q3 report-final");
    p.title = "  Sky  report (v2) [draft] \xc3\xa9t\xc3\xa9 ";
    drv_doc_name(&p, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "Sky report (v2) [draft] -t-");
    p.title = "...";
    drv_doc_name(&p, buf, sizeof(buf));
    CU_ASSERT_STRING_EQUAL(buf, "-");
    char longt[400];
    memset(longt, 'a', sizeof(longt) - 1);
    longt[sizeof(longt) - 1] = '\0';
    p.title = longt;
    drv_doc_name(&p, buf, sizeof(buf));
    CU_ASSERT_EQUAL(strlen(buf), 200);

    struct canon_part q = {.type = CANON_PART_DOCUMENT, .media_type = "application/pdf"};
    char *f = drv_doc_filename(&q);
    CU_ASSERT_STRING_EQUAL(f, "document.pdf");
    free(f);
    q.title = "Annual report";
    f = drv_doc_filename(&q);
    CU_ASSERT_STRING_EQUAL(f, "Annual report.pdf");
    free(f);
    q.title = "annual.PDF";
    f = drv_doc_filename(&q);
    CU_ASSERT_STRING_EQUAL(f, "annual.PDF");
    free(f);
    q.filename = "a.bin";
    f = drv_doc_filename(&q);
    CU_ASSERT_STRING_EQUAL(f, "a.bin");
    free(f);
    struct canon_part u = {.type = CANON_PART_DOCUMENT, .media_type = "application/x-unknown"};
    f = drv_doc_filename(&u);
    CU_ASSERT_STRING_EQUAL(f, "document");
    free(f);
}

static void test_formats(void)
{
    CU_ASSERT_STRING_EQUAL(drv_doc_ext("application/pdf"), "pdf");
    CU_ASSERT_STRING_EQUAL(drv_doc_ext("TEXT/CSV"), "csv");
    CU_ASSERT_STRING_EQUAL(
        drv_doc_ext("application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        "docx");
    CU_ASSERT_PTR_NULL(drv_doc_ext("image/png"));
    CU_ASSERT_PTR_NULL(drv_doc_ext(NULL));
    CU_ASSERT_STRING_EQUAL(drv_audio_format("audio/wav"), "wav");
    CU_ASSERT_STRING_EQUAL(drv_audio_format("audio/mpeg"), "mp3");
    CU_ASSERT_PTR_NULL(drv_audio_format("audio/ogg"));
}

static void test_base64(void)
{
    json_t *s = drv_b64_string("hello");
    CU_ASSERT_STRING_EQUAL(json_string_value(s), "aGVsbG8=");
    json_decref(s);
    s = drv_b64_text("aGVsbG8=");
    CU_ASSERT_STRING_EQUAL(json_string_value(s), "hello");
    json_decref(s);
    CU_ASSERT_PTR_NULL(drv_b64_text("/w==")); /* 0xff: not UTF-8 */
    CU_ASSERT_PTR_NULL(drv_b64_text("AA==")); /* a NUL byte */
    CU_ASSERT_PTR_NULL(drv_b64_text("not base64"));
}

static void test_members(void)
{
    struct canon_req r = {0};
    struct canon_err err = {0};
    struct canon_part p = {
        .type = CANON_PART_DOCUMENT, .data = "x", .media_type = "application/pdf"};
    CU_ASSERT_EQUAL(drv_doc_members(&r, "message 0 part 1", &p, 0, "gemini", &err), GW_OK);
    p.title = "T";
    CU_ASSERT_EQUAL(drv_doc_members(&r, "message 0 part 1", &p, DRV_DOC_TITLE, "gemini", &err),
                    GW_OK);
    p.context = "C";
    CU_ASSERT_EQUAL(drv_doc_members(&r, "message 0 part 1", &p, DRV_DOC_TITLE, "openai", &err),
                    GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.code, "unsupported_content");
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "'context'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "an openai provider"));
    CU_ASSERT_EQUAL(
        drv_refuse_doc(&r, "message 2",
                       &(struct canon_part){.type = CANON_PART_DOCUMENT, .url = "https://x"},
                       "bedrock", "bytes only", &err),
        GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(err.message,
                           "message 2: a document (by URL) cannot be sent to a bedrock provider: "
                           "bytes only");
}

static CU_TestInfo tests[] = {
    {"names: Bedrock's document name, a file name", test_names},
    {"formats: extensions, audio words", test_formats},
    {"base64: text to and from", test_base64},
    {"members: refusing what a target has no field for", test_members},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
