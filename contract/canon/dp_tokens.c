/*
 * The token estimator (dp_tokens.h): the rule, in one place.
 */
#include "dp_tokens.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"

#define IMAGE_TOKENS 1000
#define URL_DOCUMENT_TOKENS 1000
#define MESSAGE_TOKENS 4
#define BYTES_PER_TOKEN 4
#define BASE64_PDF_BYTES_PER_TOKEN 8
#define BASE64_AUDIO_BYTES_PER_TOKEN 1000

int64_t dp_tokens_text(size_t bytes)
{
    return (int64_t)(bytes / BYTES_PER_TOKEN) + 1;
}

static int64_t str_tokens(const char *s)
{
    return s ? dp_tokens_text(strlen(s)) : 0;
}

static int64_t part_tokens(const struct canon_part *p)
{
    int64_t n = 0;
    switch (p->type) {
    case CANON_PART_TEXT:
    case CANON_PART_THINKING:
        n += str_tokens(p->text);
        break;
    case CANON_PART_IMAGE:
        n += IMAGE_TOKENS;
        break;
    case CANON_PART_TOOL_CALL:
        n += str_tokens(p->arguments) + str_tokens(p->name);
        break;
    case CANON_PART_TOOL_RESULT:
        for (size_t i = 0; i < p->ncontent; i++)
            n += part_tokens(&p->content[i]);
        break;
    case CANON_PART_DOCUMENT:
        /* A PDF page is some 1,500-3,000 tokens in 10-100 KB: a token per
         * ~8 bytes of base64 leans high for text-heavy pages and low for
         * scans. A URL's size is unknown. */
        if (p->text)
            n += str_tokens(p->text);
        else if (p->data)
            n += (int64_t)(strlen(p->data) / BASE64_PDF_BYTES_PER_TOKEN) + 1;
        else
            n += URL_DOCUMENT_TOKENS;
        break;
    case CANON_PART_AUDIO:
        /* 16 kHz 16-bit WAV is 32 KB a second, some 25-32 tokens. */
        n += p->data ? (int64_t)(strlen(p->data) / BASE64_AUDIO_BYTES_PER_TOKEN) + 1 : 0;
        break;
    case CANON_PART_REDACTED_THINKING:
        break;
    }
    return n;
}

int64_t dp_tokens_request(const struct canon_req *r)
{
    int64_t n = 0;
    for (size_t i = 0; i < r->nsystem; i++)
        n += part_tokens(&r->system[i]);
    for (size_t i = 0; i < r->nmessages; i++) {
        n += MESSAGE_TOKENS;
        for (size_t j = 0; j < r->messages[i].nparts; j++)
            n += part_tokens(&r->messages[i].parts[j]);
    }
    for (size_t i = 0; i < r->ntools; i++) {
        n += str_tokens(r->tools[i].name) + str_tokens(r->tools[i].description);
        if (r->tools[i].parameters) {
            char *s = json_dumps(r->tools[i].parameters, JSON_COMPACT);
            n += str_tokens(s);
            free(s);
        }
    }
    return n;
}
