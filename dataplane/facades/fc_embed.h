/*
 * The embeddings facade (OpenAI's format, the only one clients use for
 * embeddings): its request into canon_embed_req, the answer out of
 * canon_embed_resp. No I/O, as for every facade (dp_facade.h).
 */
#ifndef FC_EMBED_H
#define FC_EMBED_H

#include <jansson.h>

#include "canon.h"
#include "gw_buf.h"

/* Fills req from the body root (its inputs point into root, which must
 * outlive req; req->inputs is malloc'd, the caller frees it). GW_EINVAL
 * with err naming the field, or GW_ENOMEM. */
int fc_embed_parse(json_t *root, struct canon_embed_req *req, struct canon_err *err);

/* The answer's body; target_model is named when the provider does not say
 * which model answered. */
int fc_embed_render(const struct canon_embed_resp *e, int base64, const char *target_model,
                    struct gw_buf *o);

#endif
