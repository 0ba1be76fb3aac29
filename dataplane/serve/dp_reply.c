#include "dp_reply.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "dp_facade.h"
#include "dp_metrics.h"
#include "gw_buf.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"

void dp_reply_error(struct gw_http_req *req, int status, const char *type, const char *param,
                    const char *code, const char *message)
{
    size_t n = 0;
    char *body = gw_json_error_body(message, type, param, code, &n);
    gw_http_respond(req, status, "application/json", body ? body : "", body ? n : 0);
    free(body);
}

void dp_log_simple(struct gw_http_req *req, const char *id, int status, const char *code)
{
    json_t *f = json_pack("{s:s,s:s,s:s,s:i}", "request_id", id ? id : "", "method",
                          gw_http_req_method(req), "path", gw_http_req_path(req), "status", status);
    if (f && code)
        json_object_set_new(f, "error_code", json_string(code));
    gw_log_access(f);
    dp_metrics_request_simple(status, code);
}

void dp_reply_error_logged(struct gw_http_req *req, const char *id, int status, const char *type,
                           const char *param, const char *code, const char *msg)
{
    /* Log first: replying ends the request and frees its strings. */
    dp_log_simple(req, id, status, code);
    dp_reply_error(req, status, type, param, code, msg);
}

void dp_reply_error_fc(struct gw_http_req *req, const struct dp_facade *fc, const char *id,
                       int status, const char *type, const char *param, const char *code,
                       const char *msg)
{
    if (!fc) {
        dp_reply_error_logged(req, id, status, type, param, code, msg);
        return;
    }
    dp_log_simple(req, id, status, code);
    dp_respond_error(req, fc, status, type, param, code, msg, NULL, NULL);
}

const char *dp_error_type(int status)
{
    return status == 429   ? "rate_limit_error"
           : status == 404 ? "not_found_error"
           : status == 403 ? "permission_error"
           : status < 500  ? "invalid_request_error"
                           : "api_error";
}

void dp_reply_fc(struct gw_http_req *req, const struct dp_facade *fc, const char *id, int status,
                 const char *param, const char *code, const char *msg)
{
    dp_reply_error_fc(req, fc, id, status, dp_error_type(status), param, code, msg);
}

void dp_respond_error(struct gw_http_req *req, const struct dp_facade *fc, int status,
                      const char *type, const char *param, const char *code, const char *msg,
                      const char *extra_name, const struct gw_buf *extra)
{
    size_t n = 0;
    char *body = (fc ? fc : &fc_openai_chat)->error_body(status, type, param, code, msg, &n);
    if (body && extra && extra->len) {
        json_t *root = json_loadb(body, n, 0, NULL);
        json_t *val = json_loadb(extra->data, extra->len, 0, NULL);
        json_t *err = json_object_get(root, "error");
        if (json_is_object(err) && val && json_object_set(err, extra_name, val) == 0) {
            char *full = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (full) {
                free(body);
                body = full;
                n = strlen(full);
            }
        }
        json_decref(val);
        json_decref(root);
    }
    gw_http_respond(req, status, "application/json", body ? body : "", body ? n : 0);
    free(body);
}
