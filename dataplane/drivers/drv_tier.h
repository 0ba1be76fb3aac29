/*
 * drv_tier: the drivers' side of service tiers, the end user's identity
 * and log probabilities (docs/canonical.md, "Service tiers", "End-user
 * identity", "Log probabilities"): the asked tier in a provider's word or
 * a refusal that says why, the served tier back in canonical words, and a
 * provider's logprobs as canonical ones.
 */
#ifndef DRV_TIER_H
#define DRV_TIER_H

#include <jansson.h>

#include "canon.h"
#include "dp_driver.h"

/* A provider's words for the canonical tiers, in the order auto, standard,
 * flex, priority, scale: "" leaves the field out (the provider's default
 * is that tier), NULL refuses it with why. */
struct drv_tier_map {
    const char *words[CANON_TIER_COUNT];
    const char *why; /* "... cannot be sent to a <driver> provider: <why>" */
};

/* OpenAI's words (chat completions and Responses), the canonical model's
 * own but standard, which is "default". */
extern const struct drv_tier_map drv_tier_openai;

/* r->service_tier in the provider's word: *word NULL when the request has
 * none or the map says "", else the word. A tier the map refuses is a 400
 * unsupported_parameter naming the client's field and the driver:
 * GW_EINVAL. */
int drv_tier_word(const struct canon_req *r, const char *driver, const struct drv_tier_map *m,
                  const char **word, struct canon_err *err);

/* The end user for a provider with one field for it (Anthropic's
 * metadata.user_id, Bedrock's requestMetadata): safety_identifier, else
 * user; NULL when neither. */
const char *drv_end_user(const struct canon_req *r);

/* A 400 unsupported_parameter naming the client's logprobs field, when
 * the request asks for log probabilities (r->logprobs: every facade sets
 * it when the client asks, top_logprobs alone included) a driver cannot
 * give: GW_EINVAL; GW_OK when it does not ask. */
int drv_refuse_logprobs(const struct canon_req *r, const char *driver, const char *why,
                        struct canon_err *err);

/* A provider's log probabilities as CHUNK logprobs: an array of n tokens
 * (their alternatives in tops), strings borrowed from the JSON they came
 * from. Free with drv_logprobs_free. */
struct drv_logprobs {
    struct canon_logprob *lp;
    size_t n;
    struct canon_logprob *tops;
};
/* OpenAI chat's choices[0].logprobs.content: [{token, logprob,
 * top_logprobs: [{token, logprob}]}]. GW_OK (n 0 when there are none),
 * GW_ENOMEM. */
int drv_logprobs_openai(const json_t *content, struct drv_logprobs *out);
/* Gemini's candidates[0].logprobsResult: chosenCandidates [{token,
 * logProbability}], topCandidates [{candidates: [...]}] by position. */
int drv_logprobs_gemini(const json_t *result, struct drv_logprobs *out);
void drv_logprobs_free(struct drv_logprobs *l);

/* A CHUNK of text (nothing when empty) with the log probabilities in lp,
 * an array in OpenAI's shape (drv_logprobs_openai: chat's
 * logprobs.content, or a Responses output_text's logprobs); none when lp
 * is not a non-empty array. canon_emit's result, or drv_fail's when memory
 * runs out. */
int drv_emit_text_lp(struct drv_parser *p, const struct canon_sink *s, const char *text,
                     const json_t *lp);

#endif
