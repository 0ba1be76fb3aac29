/*
 * Citations as OpenAI URL annotations (fc_cite.h).
 */
#include <string.h>

#include "fc_cite.h"
#include "gw_buf.h"
#include "gw_json.h"

size_t fc_cite_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

json_t *fc_cite_url_annotation(const json_t *citation, size_t start, size_t end, int flat)
{
    const char *type = gw_json_str(citation, "type");
    const char *url = gw_json_str(citation, "url");
    if (!type || strcmp(type, "web_search_result_location") != 0 || !url)
        return NULL;
    const char *title = gw_json_str(citation, "title");
    json_t *a = json_pack("{s:s,s:s,s:I,s:I}", "url", url, "title", title ? title : "",
                          "start_index", (json_int_t)start, "end_index", (json_int_t)end);
    if (!a)
        return NULL;
    if (flat) {
        json_object_set_new(a, "type", json_string("url_citation"));
        return a;
    }
    return json_pack("{s:s,s:o}", "type", "url_citation", "url_citation", a);
}

json_t *fc_cite_annotations(const struct canon_acc *acc, int flat)
{
    json_t *out = json_array();
    size_t n = json_array_size(acc->citations);
    const char *t = acc->text && acc->text->data ? acc->text->data : "";
    size_t tlen = acc->text ? acc->text->len : 0;
    size_t from = 0, last = 0; /* byte offsets: where the cited span starts, the last offset */
    for (size_t i = 0; out && i < n; i++) {
        json_t *c = json_array_get(acc->citations, i);
        json_int_t at = json_integer_value(json_object_get(c, "at"));
        if (at < (json_int_t)last || at > (json_int_t)tlen)
            continue;
        if ((size_t)at > last)
            from = last;
        last = (size_t)at;
        json_t *a = fc_cite_url_annotation(json_object_get(c, "citation"), fc_cite_chars(t, from),
                                           fc_cite_chars(t, last), flat);
        if (a && json_array_append_new(out, a)) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}
