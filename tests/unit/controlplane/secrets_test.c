/*
 * Tests for controlplane/secrets/cp_secrets.c (sealing under the master key)
 * and cp_secret_ref.c's parser: round trips, nonce freshness, the AAD binding
 * to the ref, wrong keys, every flipped bit, truncation, master-key parsing
 * and rotation, and the ref syntax.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "cp_secret_ref.h"
#include "cp_secrets.h"
#include "gw_error.h"

#define HEX_A "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
/* The same 32 bytes in base64. */
#define B64_A "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
#define HEX_B "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"

static void key(struct cp_master_key *k, const char *text)
{
    char err[256];
    CU_ASSERT_EQUAL_FATAL(cp_master_key_parse(text, k, err, sizeof(err)), GW_OK);
}

static void seal(const struct cp_master_key *k, const char *ref, const char *pt,
                 unsigned char **blob, size_t *n)
{
    CU_ASSERT_EQUAL_FATAL(cp_secret_seal(k, ref, pt, strlen(pt), blob, n), GW_OK);
}

static void test_round_trip(void)
{
    struct cp_master_key k;
    key(&k, HEX_A);
    unsigned char *blob;
    size_t n;
    seal(&k, "openai-prod", "sk-live-0123456789", &blob, &n);
    CU_ASSERT_EQUAL(n, strlen("sk-live-0123456789") + CP_SECRET_OVERHEAD);
    CU_ASSERT_EQUAL(blob[0], CP_SECRET_BLOB_V1);
    /* The plaintext does not appear in the blob. */
    CU_ASSERT_PTR_NULL(memmem(blob, n, "sk-live", 7));
    char *pt;
    size_t len;
    CU_ASSERT_EQUAL(cp_secret_open(&k, "openai-prod", blob, n, &pt, &len), GW_OK);
    CU_ASSERT_EQUAL(len, strlen("sk-live-0123456789"));
    CU_ASSERT_STRING_EQUAL(pt, "sk-live-0123456789");
    cp_secret_free(pt, len);
    free(blob);

    /* An empty secret and a binary one survive too. */
    seal(&k, "empty", "", &blob, &n);
    CU_ASSERT_EQUAL(n, CP_SECRET_OVERHEAD);
    CU_ASSERT_EQUAL(cp_secret_open(&k, "empty", blob, n, &pt, &len), GW_OK);
    CU_ASSERT_EQUAL(len, 0);
    CU_ASSERT_STRING_EQUAL(pt, "");
    cp_secret_free(pt, len);
    free(blob);
    const unsigned char bin[] = {0, 1, 2, 0, 255};
    CU_ASSERT_EQUAL(cp_secret_seal(&k, "bin", bin, sizeof(bin), &blob, &n), GW_OK);
    CU_ASSERT_EQUAL(cp_secret_open(&k, "bin", blob, n, &pt, &len), GW_OK);
    CU_ASSERT_EQUAL(len, sizeof(bin));
    CU_ASSERT(memcmp(pt, bin, sizeof(bin)) == 0);
    cp_secret_free(pt, len);
    free(blob);
    cp_master_key_clear(&k);
}

static void test_fresh_nonce(void)
{
    struct cp_master_key k;
    key(&k, HEX_A);
    unsigned char *a, *b;
    size_t na, nb;
    seal(&k, "r", "same plaintext", &a, &na);
    seal(&k, "r", "same plaintext", &b, &nb);
    CU_ASSERT_EQUAL(na, nb);
    CU_ASSERT(memcmp(a + 1, b + 1, CP_SECRET_NONCE_LEN) != 0);
    CU_ASSERT(memcmp(a, b, na) != 0);
    free(a);
    free(b);
}

static void test_aad_binding(void)
{
    struct cp_master_key k;
    key(&k, HEX_A);
    unsigned char *blob;
    size_t n;
    seal(&k, "a", "secret for a", &blob, &n);
    char *pt = (char *)1;
    size_t len = 99;
    /* The row for "a" copied onto row "b" does not open. */
    CU_ASSERT_EQUAL(cp_secret_open(&k, "b", blob, n, &pt, &len), GW_EINVAL);
    CU_ASSERT_PTR_NULL(pt);
    CU_ASSERT_EQUAL(len, 0);
    CU_ASSERT_EQUAL(cp_secret_open(&k, "a ", blob, n, &pt, &len), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_secret_open(&k, "A", blob, n, &pt, &len), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_secret_open(&k, "", blob, n, &pt, &len), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_secret_open(&k, "a", blob, n, &pt, &len), GW_OK);
    cp_secret_free(pt, len);
    free(blob);
}

static void test_wrong_key(void)
{
    struct cp_master_key ka, kb;
    key(&ka, HEX_A);
    key(&kb, HEX_B);
    unsigned char *blob;
    size_t n;
    seal(&ka, "r", "value", &blob, &n);
    char *pt;
    size_t len;
    CU_ASSERT_EQUAL(cp_secret_open(&kb, "r", blob, n, &pt, &len), GW_EINVAL);
    CU_ASSERT_PTR_NULL(pt);
    free(blob);
}

static void test_every_bit_flip(void)
{
    struct cp_master_key k;
    key(&k, HEX_A);
    unsigned char *blob;
    size_t n;
    seal(&k, "flip", "tiny", &blob, &n);
    size_t failures = 0, tried = 0;
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit++) {
            blob[i] ^= (unsigned char)(1u << bit);
            char *pt = NULL;
            size_t len;
            int rc = cp_secret_open(&k, "flip", blob, n, &pt, &len);
            tried++;
            if (rc == GW_EINVAL && pt == NULL)
                failures++;
            else
                cp_secret_free(pt, len);
            blob[i] ^= (unsigned char)(1u << bit);
        }
    }
    CU_ASSERT_EQUAL(tried, n * 8);
    CU_ASSERT_EQUAL(failures, tried);
    /* Restored, it opens again. */
    char *pt;
    size_t len;
    CU_ASSERT_EQUAL(cp_secret_open(&k, "flip", blob, n, &pt, &len), GW_OK);
    cp_secret_free(pt, len);
    free(blob);
}

static void test_truncated(void)
{
    struct cp_master_key k;
    key(&k, HEX_A);
    unsigned char *blob;
    size_t n;
    seal(&k, "t", "some secret", &blob, &n);
    for (size_t cut = 0; cut < n; cut++) {
        /* A copy of exactly cut bytes, so ASan sees any overread. */
        unsigned char *c = malloc(cut ? cut : 1);
        memcpy(c, blob, cut);
        char *pt = (char *)1;
        size_t len;
        CU_ASSERT_EQUAL(cp_secret_open(&k, "t", c, cut, &pt, &len), GW_EINVAL);
        CU_ASSERT_PTR_NULL(pt);
        free(c);
    }
    /* An extra byte fails too (the tag moves). */
    unsigned char *longer = malloc(n + 1);
    memcpy(longer, blob, n);
    longer[n] = 0;
    char *pt;
    size_t len;
    CU_ASSERT_EQUAL(cp_secret_open(&k, "t", longer, n + 1, &pt, &len), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_secret_open(&k, "t", NULL, 0, &pt, &len), GW_EINVAL);
    free(longer);
    free(blob);
}

static void test_refusals(void)
{
    struct cp_master_key k;
    key(&k, HEX_A);
    unsigned char *blob = (unsigned char *)1;
    size_t n = 7;
    CU_ASSERT_EQUAL(cp_secret_seal(&k, "", "x", 1, &blob, &n), GW_EINVAL);
    CU_ASSERT_PTR_NULL(blob);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(cp_secret_seal(&k, NULL, "x", 1, &blob, &n), GW_EINVAL);
    char *big = calloc(1, CP_SECRET_MAX_PLAINTEXT + 1);
    CU_ASSERT_EQUAL(cp_secret_seal(&k, "r", big, CP_SECRET_MAX_PLAINTEXT + 1, &blob, &n),
                    GW_EINVAL);
    CU_ASSERT_EQUAL(cp_secret_seal(&k, "r", big, CP_SECRET_MAX_PLAINTEXT, &blob, &n), GW_OK);
    free(blob);
    free(big);
    char *longref = malloc(CP_SECRET_REF_MAX + 2);
    memset(longref, 'r', CP_SECRET_REF_MAX + 1);
    longref[CP_SECRET_REF_MAX + 1] = '\0';
    CU_ASSERT_EQUAL(cp_secret_seal(&k, longref, "x", 1, &blob, &n), GW_EINVAL);
    free(longref);
}

static void test_master_key_parse(void)
{
    struct cp_master_key a, b;
    char err[512];
    key(&a, HEX_A);
    key(&b, B64_A);
    CU_ASSERT(memcmp(a.key, b.key, CP_MASTER_KEY_LEN) == 0);
    CU_ASSERT_EQUAL(a.key[0], 0x00);
    CU_ASSERT_EQUAL(a.key[31], 0x1f);
    CU_ASSERT_EQUAL(strlen(a.id), 8);
    CU_ASSERT_STRING_EQUAL(a.id, b.id);
    /* sha256 of bytes 00..1f */
    CU_ASSERT_STRING_EQUAL(a.id, "630dcd29");
    struct cp_master_key c;
    key(&c, "FFEEDDCCBBAA99887766554433221100FFEEDDCCBBAA99887766554433221100");
    struct cp_master_key d;
    key(&d, HEX_B "\n");
    CU_ASSERT(memcmp(c.key, d.key, CP_MASTER_KEY_LEN) == 0);
    CU_ASSERT_STRING_NOT_EQUAL(c.id, a.id);
    key(&d, "  " B64_A "  \n");

    /* The syntax is gw_key32_parse's (codec_test.c has the full list); here,
     * that a refusal says what was expected and never quotes the value. */
    const char *bad[] = {
        "",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e", /* 31 bytes */
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=",                   /* non-canonical bits */
        "correct horse battery staple correct horse battery staple12345",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        memset(&d, 0x55, sizeof(d));
        CU_ASSERT_EQUAL(cp_master_key_parse(bad[i], &d, err, sizeof(err)), GW_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "LLMGW_MASTER_KEY"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "64 hex digits"));
        /* The message never quotes the value. */
        if (strlen(bad[i]) > 4)
            CU_ASSERT_PTR_NULL(strstr(err, bad[i]));
        CU_ASSERT_EQUAL(d.key[0], 0);
        CU_ASSERT_EQUAL(d.id[0], 0);
    }
    CU_ASSERT_EQUAL(cp_master_key_parse(NULL, &d, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_EQUAL(
        cp_master_key_parse("0000000000000000000000000000000000000000000000000000000000000000", &d,
                            err, sizeof(err)),
        GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "placeholder"));
    CU_ASSERT_EQUAL(
        cp_master_key_parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", &d, err, sizeof(err)),
        GW_EINVAL);

    setenv(CP_MASTER_KEY_ENV, B64_A, 1);
    CU_ASSERT_EQUAL(cp_master_key_from_env(&d, err, sizeof(err)), GW_OK);
    CU_ASSERT(memcmp(d.key, a.key, CP_MASTER_KEY_LEN) == 0);
    unsetenv(CP_MASTER_KEY_ENV);
    CU_ASSERT_EQUAL(cp_master_key_from_env(&d, err, sizeof(err)), GW_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not set"));
    cp_master_key_clear(&a);
    for (size_t i = 0; i < sizeof(a); i++)
        CU_ASSERT_EQUAL_FATAL(((unsigned char *)&a)[i], 0);
}

static void test_rewrap(void)
{
    struct cp_master_key old_k, new_k;
    key(&old_k, HEX_A);
    key(&new_k, HEX_B);
    unsigned char *blob, *nb;
    size_t n, nn;
    seal(&old_k, "anthropic", "sk-ant-xyz", &blob, &n);
    CU_ASSERT_EQUAL(cp_secret_rewrap(&old_k, &new_k, "anthropic", blob, n, &nb, &nn), GW_OK);
    CU_ASSERT_EQUAL(nn, n);
    char *pt;
    size_t len;
    CU_ASSERT_EQUAL(cp_secret_open(&new_k, "anthropic", nb, nn, &pt, &len), GW_OK);
    CU_ASSERT_STRING_EQUAL(pt, "sk-ant-xyz");
    cp_secret_free(pt, len);
    CU_ASSERT_EQUAL(cp_secret_open(&old_k, "anthropic", nb, nn, &pt, &len), GW_EINVAL);
    /* The input blob is untouched and still opens under the old key. */
    CU_ASSERT_EQUAL(cp_secret_open(&old_k, "anthropic", blob, n, &pt, &len), GW_OK);
    cp_secret_free(pt, len);
    /* Rewrapping with the wrong old key, or for another ref, fails. */
    unsigned char *x = (unsigned char *)1;
    size_t xn;
    CU_ASSERT_EQUAL(cp_secret_rewrap(&new_k, &old_k, "anthropic", blob, n, &x, &xn), GW_EINVAL);
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_EQUAL(cp_secret_rewrap(&old_k, &new_k, "openai", blob, n, &x, &xn), GW_EINVAL);
    free(nb);
    free(blob);
}

static void parse_ok(const char *text, enum cp_secret_kind kind, const char *a, const char *b,
                     const char *field)
{
    struct cp_secret_ref r;
    char err[512] = "";
    int rc = cp_secret_ref_parse(text, &r, err, sizeof(err));
    CU_ASSERT_EQUAL(rc, GW_OK);
    if (rc != GW_OK) {
        fprintf(stderr, "\n%s: %s\n", text, err);
        return;
    }
    CU_ASSERT_EQUAL(r.kind, kind);
    CU_ASSERT_STRING_EQUAL(r.text, text);
    switch (kind) {
    case CP_SECRET_BUILTIN:
        CU_ASSERT_STRING_EQUAL(r.name, a);
        break;
    case CP_SECRET_VAULT:
        CU_ASSERT_STRING_EQUAL(r.mount, a);
        CU_ASSERT_STRING_EQUAL(r.path, b);
        break;
    case CP_SECRET_AWSSM:
        CU_ASSERT_STRING_EQUAL(r.secret_id, a);
        break;
    }
    if (field) {
        CU_ASSERT(r.field && strcmp(r.field, field) == 0);
    } else {
        CU_ASSERT_PTR_NULL(r.field);
    }
    cp_secret_ref_free(&r);
}

static void parse_bad(const char *text, const char *why)
{
    struct cp_secret_ref r;
    char err[512] = "";
    CU_ASSERT_EQUAL(cp_secret_ref_parse(text, &r, err, sizeof(err)), GW_EINVAL);
    if (!strstr(err, why)) {
        fprintf(stderr, "\n'%s': message '%s' lacks '%s'\n", text ? text : "(null)", err, why);
        CU_FAIL("message");
    }
}

static void test_ref_parse(void)
{
    parse_ok("openai-prod", CP_SECRET_BUILTIN, "openai-prod", NULL, NULL);
    parse_ok("team.a/openai_key-2", CP_SECRET_BUILTIN, "team.a/openai_key-2", NULL, NULL);
    parse_ok("vault:secret/llm/openai#api_key", CP_SECRET_VAULT, "secret", "llm/openai", "api_key");
    parse_ok("vault:kv/openai#key", CP_SECRET_VAULT, "kv", "openai", "key");
}

static void test_ref_parse_bad(void)
{
    parse_bad(NULL, "empty");
    parse_bad("", "empty");
    parse_bad("-leading-dash", "not a valid secret name");
    parse_bad("has space", "not a valid secret name");
    parse_bad("gcpsm:projects/x", "unknown backend");
    parse_bad("vault:secret/llm/openai", "needs a field");
    parse_bad("vault:secret/llm/openai#", "needs a field");
    parse_bad("vault:openai#key", "vault:<mount>/<path>#<field>");
    parse_bad("vault:/openai#key", "vault:<mount>/<path>#<field>");
    parse_bad("vault:secret/#key", "segments");
    parse_bad("vault:secret/a//b#key", "segments");
    parse_bad("vault:secret/../sys/raw#key", "segments");
    parse_bad("vault:secret/a b#key", "segments");
    parse_bad("vault:secret/a?x=1#key", "segments");
    parse_bad("awssm:", "secret id");
    parse_bad("awssm:#field", "secret id");
    parse_bad("awssm:prod openai", "secret id");
    parse_bad("awssm:prod/openai#", "empty");
    parse_bad("name\nwith-newline", "control character");
    char *longname = malloc(CP_SECRET_NAME_MAX + 2);
    memset(longname, 'n', CP_SECRET_NAME_MAX + 1);
    longname[CP_SECRET_NAME_MAX + 1] = '\0';
    parse_bad(longname, "not a valid secret name");
    longname[CP_SECRET_NAME_MAX] = '\0';
    parse_ok(longname, CP_SECRET_BUILTIN, longname, NULL, NULL);
    free(longname);
}

static void test_ref_parse_awssm(void)
{
    parse_ok("awssm:prod/openai", CP_SECRET_AWSSM, "prod/openai", NULL, NULL);
    parse_ok("awssm:prod/llm#openai_key", CP_SECRET_AWSSM, "prod/llm", NULL, "openai_key");
    parse_ok("awssm:arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/llm-AbCdEf#k",
             CP_SECRET_AWSSM,
             "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/llm-AbCdEf", NULL, "k");
    /* The field may hold anything printable, '#' included after the first. */
    parse_ok("awssm:x#a#b c", CP_SECRET_AWSSM, "x", NULL, "a#b c");
    parse_ok("vault:secret/a.b/c-d_e#f g", CP_SECRET_VAULT, "secret", "a.b/c-d_e", "f g");
}

static CU_TestInfo tests[] = {
    {"seal/open round trip", test_round_trip},
    {"two seals differ (fresh nonce)", test_fresh_nonce},
    {"AAD binds the blob to its ref", test_aad_binding},
    {"wrong key fails", test_wrong_key},
    {"every flipped bit fails", test_every_bit_flip},
    {"truncated and extended blobs fail", test_truncated},
    {"seal refuses bad input", test_refusals},
    {"master key parse (hex, base64, junk)", test_master_key_parse},
    {"rewrap for rotation", test_rewrap},
    {"ref parse", test_ref_parse},
    {"ref parse refusals", test_ref_parse_bad},
    {"ref parse: AWS and odd fields", test_ref_parse_awssm},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
