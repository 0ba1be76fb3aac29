/*
 * Tests for controlplane/ledger/cp_judgement.c (a Judgement made into a
 * judgements row, without a database): what the table would refuse, the
 * key kept as sent, text fields cut and made valid UTF-8, the kept text
 * sealed under its own ref (it opens as "judgement/<id>#prompt", not as
 * the answer) and cut at a character boundary past 64 KiB, and no text
 * kept without a master key. Includes the .c to read the row's parameters.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "cp_judgement.c"

#define HEX_A "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static struct cp_master_key the_key(void)
{
    struct cp_master_key k;
    char err[128];
    CU_ASSERT_EQUAL_FATAL(cp_master_key_parse(HEX_A, &k, err, sizeof(err)), GW_OK);
    return k;
}

static Llmgw__V1__Judgement base(void)
{
    Llmgw__V1__Judgement j = LLMGW__V1__JUDGEMENT__INIT;
    j.request_id = (char *)"req-1";
    j.route = (char *)"chat";
    j.provider = (char *)"mock";
    j.model = (char *)"m1";
    j.score = 4;
    j.scale_min = 1;
    j.scale_max = 5;
    j.pass = 1;
    j.at_ms = 1764547200000;
    j.seq = 9;
    return j;
}

/* Opens the row's sealed parameter (bytea hex) for request_id#part. */
static char *open_param(const struct cp_master_key *k, const char *hex, const char *id,
                        const char *part, size_t *n)
{
    CU_ASSERT_FATAL(hex != NULL && hex[0] == '\\' && hex[1] == 'x');
    unsigned char *blob;
    size_t bl;
    CU_ASSERT_EQUAL_FATAL(cp_db_hex_decode(hex + 2, &blob, &bl), GW_OK);
    char ref[600];
    CU_ASSERT_EQUAL_FATAL(cp_judgement_ref(ref, sizeof(ref), id, part), 0);
    char *pt = NULL;
    int rc = cp_secret_open(k, ref, blob, bl, &pt, n);
    free(blob);
    return rc == GW_OK ? pt : NULL;
}

static void test_row(void)
{
    Llmgw__V1__Judgement j = base();
    j.label = (char *)"good";
    const char *problem;
    int dropped;
    struct cp_judgement *r = cp_judgement_new(&j, "dp-1", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_PTR_NULL(problem);
    CU_ASSERT_EQUAL(dropped, 0);
    CU_ASSERT_STRING_EQUAL(cp_judgement_request_id(r), "req-1");
    CU_ASSERT_EQUAL(cp_judgement_seq(r), 9);
    CU_ASSERT_STRING_EQUAL(r->p[P_ROUTE], "chat");
    CU_ASSERT_STRING_EQUAL(r->p[P_SCORE], "4");
    CU_ASSERT_STRING_EQUAL(r->p[P_PASS], "t");
    CU_ASSERT_STRING_EQUAL(r->p[P_AT_MS], "1764547200000");
    CU_ASSERT_STRING_EQUAL(r->p[P_REPLICA], "dp-1");
    CU_ASSERT_STRING_EQUAL(r->p[P_LABEL], "good");
    /* Empty strings are NULLs; no text, no key id. */
    CU_ASSERT_PTR_NULL(r->p[P_TEAM]);
    CU_ASSERT_PTR_NULL(r->p[P_PROMPT_ENC]);
    CU_ASSERT_PTR_NULL(r->p[P_ANSWER_ENC]);
    CU_ASSERT_PTR_NULL(r->p[P_MASTER_KEY_ID]);
    cp_judgement_free(r);
}

static void test_problems(void)
{
    const char *problem;
    int dropped;
    Llmgw__V1__Judgement j = base();
    j.score = 6;
    struct cp_judgement *r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_PTR_NOT_NULL(strstr(problem ? problem : "", "score"));
    CU_ASSERT_STRING_EQUAL(cp_judgement_request_id(r), "req-1");
    cp_judgement_free(r);
    j = base();
    j.scale_min = 5;
    r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL(strstr(problem ? problem : "", "scale_min"));
    cp_judgement_free(r);
    j = base();
    j.at_ms = 0;
    r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL(strstr(problem ? problem : "", "at_ms"));
    cp_judgement_free(r);
    j = base();
    j.request_id = (char *)"";
    r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL(strstr(problem ? problem : "", "request_id"));
    CU_ASSERT_STRING_EQUAL(cp_judgement_request_id(r), "");
    cp_judgement_free(r);
    /* A key with a control character, or invalid UTF-8, is refused, not
     * changed: a changed key could merge two judgements. */
    const char *bad_ids[] = {"a\tb", "a\xff", "a\x7f"};
    for (size_t i = 0; i < 3; i++) {
        j = base();
        j.request_id = (char *)bad_ids[i];
        r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
        CU_ASSERT_PTR_NOT_NULL(strstr(problem ? problem : "", "request_id"));
        cp_judgement_free(r);
    }
    char longid[600];
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    j = base();
    j.request_id = longid;
    r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL(problem);
    cp_judgement_free(r);
    longid[512] = '\0'; /* 512 bytes: accepted, kept whole */
    r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NULL(problem);
    CU_ASSERT_EQUAL(strlen(cp_judgement_request_id(r)), 512);
    cp_judgement_free(r);
}

static void test_text_fields_cleaned(void)
{
    char route[400];
    memset(route, 'r', sizeof(route) - 1);
    route[sizeof(route) - 1] = '\0';
    /* 255 ASCII bytes then a 2-byte character: cut before it, at 255. */
    memcpy(route + 255, "\xc3\xa9", 2);
    Llmgw__V1__Judgement j = base();
    j.route = route;
    j.model = (char *)"m\xff\xfe-1 caf\xc3\xa9";
    const char *problem;
    int dropped;
    struct cp_judgement *r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(strlen(r->p[P_ROUTE]), 255);
    CU_ASSERT_STRING_EQUAL(r->p[P_MODEL], "m?"
                                          "?-1 caf\xc3\xa9");
    cp_judgement_free(r);
}

static void test_text_sealed(void)
{
    struct cp_master_key k = the_key();
    Llmgw__V1__Judgement j = base();
    j.prompt_text = (char *)"the prompt \xe2\x9c\x93";
    j.answer_text = (char *)"the answer";
    const char *problem;
    int dropped;
    struct cp_judgement *r = cp_judgement_new(&j, "dp", &k, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(dropped, 0);
    CU_ASSERT_STRING_EQUAL(r->p[P_MASTER_KEY_ID], k.id);
    CU_ASSERT_PTR_NULL(strstr(r->p[P_PROMPT_ENC], "prompt"));
    size_t n;
    char *pt = open_param(&k, r->p[P_PROMPT_ENC], "req-1", "prompt", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pt);
    CU_ASSERT_STRING_EQUAL(pt, "the prompt \xe2\x9c\x93");
    cp_secret_free(pt, n);
    pt = open_param(&k, r->p[P_ANSWER_ENC], "req-1", "answer", &n);
    CU_ASSERT_STRING_EQUAL(pt ? pt : "", "the answer");
    cp_secret_free(pt, n);
    /* Bound to its row and part. */
    CU_ASSERT_PTR_NULL(open_param(&k, r->p[P_PROMPT_ENC], "req-1", "answer", &n));
    CU_ASSERT_PTR_NULL(open_param(&k, r->p[P_PROMPT_ENC], "req-2", "prompt", &n));
    cp_judgement_free(r);

    /* Only an answer: the prompt stays NULL. */
    j = base();
    j.answer_text = (char *)"only";
    r = cp_judgement_new(&j, "dp", &k, &problem, &dropped);
    CU_ASSERT_PTR_NULL(r->p[P_PROMPT_ENC]);
    CU_ASSERT_PTR_NOT_NULL(r->p[P_ANSWER_ENC]);
    cp_judgement_free(r);
    cp_master_key_clear(&k);
}

static void test_text_cut(void)
{
    struct cp_master_key k = the_key();
    /* 64 KiB - 1 of 'a', then a 3-byte character, then more: cut before
     * the character (it does not fit whole). */
    size_t len = CP_JUDGEMENT_TEXT_MAX + 100;
    char *big = malloc(len + 1);
    memset(big, 'a', len);
    memcpy(big + CP_JUDGEMENT_TEXT_MAX - 1, "\xe2\x9c\x93", 3);
    big[len] = '\0';
    Llmgw__V1__Judgement j = base();
    j.prompt_text = big;
    const char *problem;
    int dropped;
    struct cp_judgement *r = cp_judgement_new(&j, "dp", &k, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    size_t n;
    char *pt = open_param(&k, r->p[P_PROMPT_ENC], "req-1", "prompt", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pt);
    CU_ASSERT_EQUAL(n, CP_JUDGEMENT_TEXT_MAX - 1);
    CU_ASSERT_EQUAL(pt[n - 1], 'a');
    cp_secret_free(pt, n);
    cp_judgement_free(r);
    free(big);
    cp_master_key_clear(&k);
}

static void test_no_key(void)
{
    Llmgw__V1__Judgement j = base();
    j.prompt_text = (char *)"kept?";
    const char *problem;
    int dropped;
    struct cp_judgement *r = cp_judgement_new(&j, "dp", NULL, &problem, &dropped);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(dropped, 1);
    CU_ASSERT_PTR_NULL(r->p[P_PROMPT_ENC]);
    CU_ASSERT_PTR_NULL(r->p[P_MASTER_KEY_ID]);
    CU_ASSERT_STRING_EQUAL(r->p[P_SCORE], "4");
    cp_judgement_free(r);
}

static CU_TestInfo tests[] = {
    {"a judgement into its row", test_row},
    {"what the table would refuse", test_problems},
    {"text fields cut and made valid UTF-8", test_text_fields_cleaned},
    {"kept text sealed for its row and part", test_text_sealed},
    {"kept text cut at 64 KiB on a character boundary", test_text_cut},
    {"no master key: no text, said so", test_no_key},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
