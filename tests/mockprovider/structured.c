/*
 * Structured output and citations, for every wire format's mock: a request
 * that asks for JSON matching a schema is answered with the smallest object
 * that has the schema's required keys (each a placeholder of its type:
 * "x", 0, true, [], {}), as the whole text of the answer; a request that
 * asks for citations is answered with one (mock_call.cite). Deterministic,
 * so tests can assert the exact answer.
 */
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"
#include "mock.h"

static json_t *placeholder(const json_t *prop)
{
    const char *t = json_string_value(json_object_get(prop, "type"));
    if (!t)
        return json_null();
    if (strcmp(t, "string") == 0)
        return json_string("x");
    if (strcmp(t, "integer") == 0 || strcmp(t, "number") == 0)
        return json_integer(0);
    if (strcmp(t, "boolean") == 0)
        return json_true();
    if (strcmp(t, "array") == 0)
        return json_array();
    if (strcmp(t, "object") == 0)
        return json_object();
    return json_null();
}

void mock_plan_json(struct mock_call *c, const json_t *schema)
{
    if (!json_is_object(schema) || c->ntext == 0)
        return;
    json_t *obj = json_object();
    json_t *props = json_object_get(schema, "properties");
    json_t *req = json_object_get(schema, "required");
    size_t i;
    json_t *k;
    json_array_foreach(req, i, k)
    {
        const char *key = json_string_value(k);
        if (key && obj)
            json_object_set_new(obj, key, placeholder(json_object_get(props, key)));
    }
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (s) {
        c->json_text = gw_pool_strdup(c->pool, s);
        c->ntext = 1; /* one text delta carries the whole JSON */
    }
    free(s);
}

int mock_append_answer(struct gw_buf *b, const struct mock_call *c, int from, int to)
{
    if (!c->json_text)
        return mock_append_tokens(b, from, to);
    if (from > 0 || to <= from)
        return GW_OK;
    struct gw_buf tmp;
    gw_buf_init(&tmp, 0);
    int rc = gw_json_escape(&tmp, c->json_text, strlen(c->json_text));
    if (rc == GW_OK && tmp.len >= 2)
        rc = gw_buf_append(b, tmp.data + 1, tmp.len - 2); /* without the quotes */
    gw_buf_free(&tmp);
    return rc;
}

const char *mock_citation_json(const struct mock_call *c)
{
    if (c->cite == MOCK_CITE_WEB)
        return "{\"type\":\"web_search_result_location\",\"url\":\"https://example.com/mock\","
               "\"title\":\"Mock source\",\"encrypted_index\":\"bW9jaw==\",\"cited_text\":"
               "\"mock cited text\"}";
    if (c->cite == MOCK_CITE_DOCUMENT)
        return "{\"type\":\"char_location\",\"cited_text\":\"mock\",\"document_index\":0,"
               "\"document_title\":null,\"start_char_index\":0,\"end_char_index\":4}";
    return NULL;
}
