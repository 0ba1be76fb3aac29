/*
 * Citations (CANON_EV_CITATION, canon_acc.citations) as the OpenAI formats'
 * URL annotations. Drivers hand over the provider's citation object
 * (Anthropic's shape); only a web search result (type
 * "web_search_result_location", with url and title) has an OpenAI form,
 * url_citation. Other kinds (a document's char/page/block location) have
 * none: docs/canonical.md says why an OpenAI client never gets them.
 */
#ifndef FC_CITE_H
#define FC_CITE_H

#include <jansson.h>
#include <stddef.h>

#include "canon.h"

/* Characters (code points) in s[0..len), the unit of OpenAI's indexes. */
size_t fc_cite_chars(const char *s, size_t len);

/* The url_citation annotation of a citation object's JSON text, spanning
 * characters [start, end): with flat 1 Responses' shape {type, url, title,
 * start_index, end_index}, else chat's {type, url_citation: {...}}. NULL
 * (new reference otherwise) when the citation is not a URL one. */
json_t *fc_cite_url_annotation(const json_t *citation, size_t start, size_t end, int flat);

/* Every URL citation of a whole answer (canon_acc.citations) as an array of
 * annotations, each spanning the text from the previous citation's offset
 * to its own (new reference; an empty array when none). */
json_t *fc_cite_annotations(const struct canon_acc *acc, int flat);

#endif
