/*
 * The media facade (docs/media.md): OpenAI's audio and image endpoints, the
 * only format clients use for them. It reads what the gateway must know of
 * a request (the model, the upload, the units a reservation bounds) and
 * refuses, naming the field, what it cannot carry; every other field goes
 * to the provider as the client wrote it. No I/O, as for every facade.
 */
#ifndef FC_MEDIA_H
#define FC_MEDIA_H

#include <jansson.h>
#include <stddef.h>

#include "canon.h"

/* The parts of a multipart request (the most a request may have) and the
 * images an edit may send. */
#define FC_MEDIA_MAX_PARTS 64
#define FC_MEDIA_MAX_IMAGES 16
/* An upload's default bound (a file part), per endpoint. */
#define FC_MEDIA_DEFAULT_UPLOAD (25u << 20)

/* The client-facing API of an operation, for the ledger ("openai.audio.speech"). */
const char *fc_media_api(enum canon_media_op op);

/* A multipart request (transcriptions, translations, image edits) whose
 * body is body[0..len) and Content-Type content_type; a file part may hold
 * at most max_file bytes. Fills r, whose fields live in *store (malloc'd,
 * the caller frees it, after r) and point into body. GW_EINVAL with err (a
 * 400 naming the field, or a 413 naming the part over its bound),
 * GW_ENOMEM. */
int fc_media_parse_multipart(enum canon_media_op op, const char *content_type, const char *body,
                             size_t len, size_t max_file, struct canon_media_req *r, void **store,
                             struct canon_err *err);

/* A JSON request (speech, image generations): root is body[0..len) parsed;
 * r points into both. GW_EINVAL with err. */
int fc_media_parse_json(enum canon_media_op op, const json_t *root, const char *body, size_t len,
                        struct canon_media_req *r, struct canon_err *err);

#endif
