/*
 * fc_tier: the facades' side of service tiers and log probabilities
 * (docs/canonical.md, "Service tiers" and "Log probabilities"): the
 * client's tier word into the canonical one and the served tier back into
 * the client's, and OpenAI's logprobs object rendered from canonical ones.
 */
#ifndef FC_TIER_H
#define FC_TIER_H

#include <jansson.h>

#include "canon.h"
#include "gw_buf.h"

/* A client's tier words: words[i] is the client's word for the canonical
 * one at the same place of canon ("auto", "standard", "flex", "priority",
 * "scale"); NULL: the client's format has no word for it. */
struct fc_tier_words {
    const char *words[CANON_TIER_COUNT];
    const char *list; /* for the message: "\"auto\", \"default\", ..." */
};
extern const struct fc_tier_words fc_tier_openai;    /* chat and Responses */
extern const struct fc_tier_words fc_tier_anthropic; /* Messages */

/* The body's "service_tier", when given, into r->service_tier; anything
 * that is not one of the client's words is a 400 naming service_tier. */
int fc_service_tier(struct canon_req *r, const json_t *body, const struct fc_tier_words *w,
                    struct canon_err *err);

/* A served tier (canonical: standard, priority, flex, batch, scale) in
 * OpenAI's words ("standard" is "default"); NULL stays NULL. */
const char *fc_tier_served_openai(const char *tier);

/* OpenAI's logprobs object, {"content":[{token, logprob, bytes,
 * top_logprobs:[{token, logprob, bytes}]}]}, from a CHUNK's log
 * probabilities (appended as text) or from canon_acc's array (a new
 * object; NULL when acc is NULL or memory ran out). */
int fc_logprobs_openai_text(struct gw_buf *out, const struct canon_logprob *lp, size_t n)
    __attribute__((warn_unused_result));
json_t *fc_logprobs_openai_json(const json_t *acc);
/* The Responses shape: the array [{token, logprob, bytes, top_logprobs}]. */
json_t *fc_logprobs_responses_json(const json_t *acc);
json_t *fc_logprobs_responses_of(const struct canon_logprob *lp, size_t n);

#endif
