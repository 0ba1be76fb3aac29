/*
 * drv_docs: what the drivers share to send documents and audio
 * (CANON_PART_DOCUMENT / CANON_PART_AUDIO, canon.h) in their provider's
 * terms, and to refuse what their provider cannot take, naming the target
 * and the format (docs/canonical.md, "Documents and audio", has the table
 * of forms per format and what each driver refuses).
 */
#ifndef DRV_DOCS_H
#define DRV_DOCS_H

#include <jansson.h>

#include "canon.h"

/* The optional members of a document a target can carry. */
enum {
    DRV_DOC_TITLE = 1,     /* title (a name the model is shown) */
    DRV_DOC_CONTEXT = 2,   /* context (Anthropic's, Bedrock's) */
    DRV_DOC_CITATIONS = 4, /* the citations flag */
};

/* Refuses the first of p's title, context and citations that is set and not
 * in can: a 400 unsupported_content naming the member, the target (driver)
 * and why, e.g. "message 0 part 1: a document's 'context' cannot be sent
 * to a gemini provider (its file parts have no such field)". GW_OK when
 * none is. */
int drv_doc_members(const struct canon_req *r, const char *where, const struct canon_part *p,
                    unsigned can, const char *driver, struct canon_err *err);

/* Refuses a document or audio part the provider cannot take: 400
 * unsupported_content, "<where>: a document (<format>) cannot be sent to
 * a <driver> provider: <why>" (or "audio input (...)"). GW_EINVAL. */
int drv_refuse_doc(const struct canon_req *r, const char *where, const struct canon_part *p,
                   const char *driver, const char *why, struct canon_err *err);

/* The usual file extension of a document media type: pdf, txt, md, csv,
 * html, doc, docx, xls, xlsx, json; NULL for any other (or NULL). */
const char *drv_doc_ext(const char *media_type);

/* A file name for p, for targets whose file parts want one: its filename,
 * else its title with the extension of its media type appended (when it
 * does not already end in it), else "document" with that extension. The
 * result is malloc'd (the caller frees it); NULL when out of memory. */
char *drv_doc_filename(const struct canon_part *p);

/* Bedrock's document name (1-200 of alphanumerics, single whitespace,
 * hyphens, parentheses and square brackets): p's title, else its filename
 * without the extension, with every other character a hyphen and runs of
 * whitespace one space; "document" when nothing is left. Written to buf
 * (n > 1). */
void drv_doc_name(const struct canon_part *p, char *buf, size_t n);

/* OpenAI's input_audio format word of an audio media type: "wav"
 * (audio/wav, audio/x-wav, audio/wave), "mp3" (audio/mp3, audio/mpeg);
 * NULL for any other. */
const char *drv_audio_format(const char *media_type);

/* text as a JSON string of its standard base64 (with padding), for targets
 * that take a text document only as bytes. NULL when out of memory. */
json_t *drv_b64_string(const char *text);

/* A base64 document's bytes as a JSON string when they are UTF-8 text
 * (a text/plain file sent as bytes, to a target that takes text); NULL when
 * they are not base64, not UTF-8, or memory ran out. */
json_t *drv_b64_text(const char *data);

#endif
