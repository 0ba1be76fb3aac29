/*
 * The driver catalog: the drivers a provider may name, and what each can
 * serve and speak. Both planes read it: the control plane to check a
 * provider as it is written (its driver, the capabilities it claims), the
 * snapshot to resolve a provider's driver, the router to match a
 * request's needs. The drivers themselves (the wire adapters, the data
 * plane's dataplane/drivers/) are behind it: each takes its catalog entry
 * by id (dp_driver.h), so what a driver is called and can do is written
 * once, here.
 */
#ifndef DP_DRIVER_CATALOG_H
#define DP_DRIVER_CATALOG_H

#include <stddef.h>

/* Capabilities a driver declares, for the router's checks. */
enum {
    DRV_CAP_CHAT = 1u << 0,
    DRV_CAP_EMBEDDINGS = 1u << 1,
    DRV_CAP_VISION = 1u << 2,
    DRV_CAP_TOOLS = 1u << 3,
    DRV_CAP_JSON_MODE = 1u << 4,
    DRV_CAP_REASONING = 1u << 5,
    /* Media (docs/media.md): audio in, text out (transcriptions and
     * translations); text in, audio out; images generated or edited. */
    DRV_CAP_TRANSCRIPTION = 1u << 6,
    DRV_CAP_SPEECH = 1u << 7,
    DRV_CAP_IMAGE = 1u << 8,
};
#define DRV_CAP_MEDIA (DRV_CAP_TRANSCRIPTION | DRV_CAP_SPEECH | DRV_CAP_IMAGE)

/* The drivers, by id: an entry's place in dp_driver_catalog. */
enum dp_driver_id {
    DRV_ID_OPENAI,
    DRV_ID_GEMINI,
    DRV_ID_OLLAMA,
    DRV_ID_BEDROCK,
    DRV_ID_ANTHROPIC,
    DRV_ID_OPENAI_RESPONSES,
    DRV_ID_COUNT,
};

struct dp_driver_info {
    enum dp_driver_id id;
    const char *name; /* what a provider's "driver" says */
    unsigned caps;    /* DRV_CAP_* */
    /* The client format it speaks as is (a facade's wire), for the
     * same-protocol pass-through (docs/relay.md); NULL: none. */
    const char *wire;
};

/* Every driver, in id order. */
extern const struct dp_driver_info dp_driver_catalog[DRV_ID_COUNT];
/* The entry named name, or NULL. */
const struct dp_driver_info *dp_driver_info_find(const char *name);
/* "openai, gemini, ..." into out (n bytes, cut to fit), for the error that
 * names an unknown driver. */
void dp_driver_catalog_names(char *out, size_t n);

#endif
