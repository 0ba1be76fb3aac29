/*
 * dp_tokens: the gateway's one token estimator, for what it must know
 * before a provider has counted: a request's input tokens (the router's
 * context-window check, the limits' reservation, count_tokens when no
 * provider counts for us, the ledger row of an answer cut before its
 * usage came) and the output of such an answer. One rule, everywhere:
 *
 *   text                   a token per 4 bytes of UTF-8, plus one per
 *                          piece (a message part, a tool's name, its
 *                          description, its schema as compact JSON, an
 *                          embedding input, an answer's content)
 *   a message              4 more (its role and framing)
 *   an image               1,000
 *   a document             its text as text; base64 data a token per 8
 *                          bytes; by URL 1,000
 *   audio as base64        a token per 1,000 bytes (25-32 tokens a second)
 *
 * Estimates are rough by design: the limits correct them per target from
 * the counts providers return (dp_limits_sizing.c). Where a limit may not
 * be overshot at all (worst_case), the limits hold an upper bound instead
 * (dp_limits_input_bound), not an estimate.
 */
#ifndef DP_TOKENS_H
#define DP_TOKENS_H

#include <stddef.h>
#include <stdint.h>

struct canon_req;

/* Text of `bytes` bytes: bytes / 4 + 1. */
int64_t dp_tokens_text(size_t bytes);
/* A chat request's input, by the rule above. */
int64_t dp_tokens_request(const struct canon_req *r);

#endif
