/* Tests for the driver catalog (contract/catalog/dp_driver_catalog.h): one
 * entry per id, in id order, found by name, named in an error's list. */
#include <CUnit/CUnit.h>
#include <string.h>

#include "dp_driver_catalog.h"

static void test_entries(void)
{
    static const char *const names[DRV_ID_COUNT] = {
        [DRV_ID_OPENAI] = "openai",       [DRV_ID_GEMINI] = "gemini",
        [DRV_ID_OLLAMA] = "ollama",       [DRV_ID_BEDROCK] = "bedrock",
        [DRV_ID_ANTHROPIC] = "anthropic", [DRV_ID_OPENAI_RESPONSES] = "openai-responses"};
    for (int i = 0; i < DRV_ID_COUNT; i++) {
        const struct dp_driver_info *d = &dp_driver_catalog[i];
        CU_ASSERT_EQUAL(d->id, i);
        CU_ASSERT_STRING_EQUAL(d->name, names[i]);
        CU_ASSERT_PTR_EQUAL(dp_driver_info_find(names[i]), d);
        /* Every driver serves chat; media only the OpenAI pair. */
        CU_ASSERT(d->caps & DRV_CAP_CHAT);
        CU_ASSERT_EQUAL((d->caps & DRV_CAP_MEDIA) != 0,
                        i == DRV_ID_OPENAI || i == DRV_ID_OPENAI_RESPONSES);
    }
    /* The pass-through: the two that speak a client's format as is. */
    CU_ASSERT_STRING_EQUAL(dp_driver_catalog[DRV_ID_OPENAI].wire, "openai.chat");
    CU_ASSERT_STRING_EQUAL(dp_driver_catalog[DRV_ID_ANTHROPIC].wire, "anthropic.messages");
    CU_ASSERT_PTR_NULL(dp_driver_catalog[DRV_ID_BEDROCK].wire);
    CU_ASSERT_PTR_NULL(dp_driver_info_find("OpenAI"));
    CU_ASSERT_PTR_NULL(dp_driver_info_find(""));
    CU_ASSERT_PTR_NULL(dp_driver_info_find(NULL));
}

static void test_names(void)
{
    char out[256];
    dp_driver_catalog_names(out, sizeof(out));
    CU_ASSERT_STRING_EQUAL(out, "openai, gemini, ollama, bedrock, anthropic, openai-responses");
    char small[10];
    dp_driver_catalog_names(small, sizeof(small)); /* cut, terminated */
    CU_ASSERT_STRING_EQUAL(small, "openai, g");
    dp_driver_catalog_names(out, 0); /* nothing written */
}

static CU_TestInfo tests[] = {
    {"one entry per id, found by name", test_entries},
    {"the names, for an unknown driver's error", test_names},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
