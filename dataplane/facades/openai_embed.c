/*
 * POST /v1/embeddings in OpenAI's wire format: the request's fields, and
 * the answer as the official SDK reads it (floats, or base64 of
 * little-endian float32 when encoding_format asks for it). Every driver
 * that embeds maps its provider's answer into canon_embed_resp.
 */
#include <stdlib.h>
#include <string.h>

#include "fc_embed.h"
#include "gw_codec.h"
#include "gw_error.h"
#include "gw_json.h"

int fc_embed_parse(json_t *root, struct canon_embed_req *req, struct canon_err *err)
{
    static const char *const keys[] = {"model",           "input", "dimensions",
                                       "encoding_format", "user",  NULL};
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        int ok = json_is_null(v);
        for (const char *const *kk = keys; *kk && !ok; kk++)
            ok = strcmp(*kk, k) == 0;
        if (!ok) {
            canon_err_set(err, 400, k, "unsupported_parameter", "'%s' is not supported", k);
            return GW_EINVAL;
        }
    }
    json_t *in = json_object_get(root, "input");
    size_t n = json_is_string(in) ? 1 : json_is_array(in) ? json_array_size(in) : 0;
    if (n == 0 || n > 2048) {
        canon_err_set(err, 400, "input", "invalid_request",
                      "'input' must be a string or an array of 1 to 2048 strings");
        return GW_EINVAL;
    }
    req->inputs = calloc(n, sizeof(char *));
    if (!req->inputs)
        return GW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(in) ? in : json_array_get(in, i);
        if (!json_is_string(s) || json_string_length(s) == 0) {
            canon_err_set(err, 400, "input", "invalid_request",
                          "'input' must hold non-empty strings (token arrays are not supported)");
            return GW_EINVAL;
        }
        req->inputs[req->ninputs++] = json_string_value(s);
    }
    json_t *dim = json_object_get(root, "dimensions");
    if (dim && !json_is_null(dim)) {
        if (!json_is_integer(dim) || json_integer_value(dim) < 1 ||
            json_integer_value(dim) > 65536) {
            canon_err_set(err, 400, "dimensions", "invalid_request",
                          "'dimensions' must be an integer from 1 to 65536");
            return GW_EINVAL;
        }
        req->dimensions = json_integer_value(dim);
    }
    const char *ef = gw_json_str(root, "encoding_format");
    if (ef && strcmp(ef, "float") && strcmp(ef, "base64")) {
        canon_err_set(err, 400, "encoding_format", "invalid_request",
                      "'encoding_format' must be float or base64");
        return GW_EINVAL;
    }
    req->base64 = ef && strcmp(ef, "base64") == 0;
    req->user = gw_json_str(root, "user");
    return GW_OK;
}

static int b64_floats(struct gw_buf *out, const double *v, size_t n)
{
    size_t len = n * 4;
    unsigned char *raw = malloc(len ? len : 1);
    if (!raw)
        return GW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        float f = (float)v[i];
        memcpy(raw + i * 4, &f, 4); /* little-endian, as OpenAI sends it */
    }
    int rc = gw_b64_append(out, raw, len);
    free(raw);
    return rc;
}

int fc_embed_render(const struct canon_embed_resp *e, int base64, const char *target_model,
                    struct gw_buf *o)
{
    int rc = gw_buf_appends(o, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; rc == GW_OK && i < e->nvec; i++) {
        rc = gw_buf_printf(
            o, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
        const double *v = e->values + i * e->dim;
        if (rc == GW_OK && base64) {
            rc = gw_buf_appends(o, "\"");
            if (rc == GW_OK)
                rc = b64_floats(o, v, e->dim);
            if (rc == GW_OK)
                rc = gw_buf_appends(o, "\"");
        } else {
            for (size_t j = 0; rc == GW_OK && j < e->dim; j++)
                rc = gw_buf_printf(o, "%s%.9g", j ? "," : "[", v[j]);
            if (rc == GW_OK)
                rc = gw_buf_appends(o, "]");
        }
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "}");
    }
    if (rc == GW_OK)
        rc = gw_buf_appends(o, "],\"model\":");
    /* The model that answered, as for chat; the target's when the provider
     * does not say. */
    const char *model = e->model[0] ? e->model : target_model;
    if (rc == GW_OK)
        rc = gw_json_escape(o, model, strlen(model));
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}",
                           (long long)e->usage.input, (long long)e->usage.input);
    return rc;
}
