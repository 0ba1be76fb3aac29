/*
 * The driver catalog (dp_driver_catalog.h).
 */
#include "dp_driver_catalog.h"

#include <stdio.h>
#include <string.h>

#define CHAT_ALL                                                                                   \
    (DRV_CAP_CHAT | DRV_CAP_VISION | DRV_CAP_TOOLS | DRV_CAP_JSON_MODE | DRV_CAP_REASONING)

const struct dp_driver_info dp_driver_catalog[DRV_ID_COUNT] = {
    [DRV_ID_OPENAI] = {DRV_ID_OPENAI, "openai", CHAT_ALL | DRV_CAP_EMBEDDINGS | DRV_CAP_MEDIA,
                       "openai.chat"},
    [DRV_ID_GEMINI] = {DRV_ID_GEMINI, "gemini", CHAT_ALL | DRV_CAP_EMBEDDINGS, NULL},
    [DRV_ID_OLLAMA] = {DRV_ID_OLLAMA, "ollama", CHAT_ALL | DRV_CAP_EMBEDDINGS, NULL},
    [DRV_ID_BEDROCK] = {DRV_ID_BEDROCK, "bedrock", CHAT_ALL, NULL},
    [DRV_ID_ANTHROPIC] = {DRV_ID_ANTHROPIC, "anthropic", CHAT_ALL, "anthropic.messages"},
    [DRV_ID_OPENAI_RESPONSES] = {DRV_ID_OPENAI_RESPONSES, "openai-responses",
                                 CHAT_ALL | DRV_CAP_EMBEDDINGS | DRV_CAP_MEDIA, NULL},
};

const struct dp_driver_info *dp_driver_info_find(const char *name)
{
    for (int i = 0; name && i < DRV_ID_COUNT; i++)
        if (strcmp(dp_driver_catalog[i].name, name) == 0)
            return &dp_driver_catalog[i];
    return NULL;
}

void dp_driver_catalog_names(char *out, size_t n)
{
    size_t off = 0;
    if (n)
        out[0] = '\0';
    for (int i = 0; i < DRV_ID_COUNT && off < n; i++) {
        int w = snprintf(out + off, n - off, "%s%s", i ? ", " : "", dp_driver_catalog[i].name);
        off += w > 0 ? (size_t)w : 0;
    }
}
