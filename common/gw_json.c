#include "gw_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

const char *gw_json_str(const json_t *obj, const char *key)
{
    if (!json_is_object(obj))
        return NULL;
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int gw_json_int(const json_t *obj, const char *key, long long *out)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v))
        return GW_ENOTFOUND;
    if (!json_is_integer(v))
        return GW_EINVAL;
    *out = json_integer_value(v);
    return GW_OK;
}

int gw_json_bool(const json_t *obj, const char *key, int def, int *err)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (err)
        *err = GW_OK;
    if (!v || json_is_null(v))
        return def;
    if (!json_is_boolean(v)) {
        if (err)
            *err = GW_EINVAL;
        return def;
    }
    return json_is_true(v);
}

/* Length of a valid UTF-8 sequence starting at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* Reject overlong forms, surrogates and values past U+10FFFF. */
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
        (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int gw_json_escape(struct gw_buf *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    int rc = gw_buf_append(b, "\"", 1);
    size_t run = 0; /* bytes copied verbatim, flushed in one append */
    for (size_t i = 0; i < n && !rc;) {
        unsigned char c = s[i];
        const char *esc = NULL;
        char ubuf[8];
        size_t adv = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20) {
            snprintf(ubuf, sizeof(ubuf), "\\u%04x", c);
            esc = ubuf;
        } else if (c >= 0x80) {
            adv = utf8_len(s + i, n - i);
            if (adv == 0) {
                esc = "\xEF\xBF\xBD";
                adv = 1;
            }
        }
        if (!esc) {
            run += adv;
            i += adv;
            continue;
        }
        if (run)
            rc = gw_buf_append(b, s + i - run, run);
        run = 0;
        if (!rc)
            rc = gw_buf_appends(b, esc);
        i += adv;
    }
    if (!rc && run)
        rc = gw_buf_append(b, s + n - run, run);
    if (!rc)
        rc = gw_buf_append(b, "\"", 1);
    return rc;
}

char *gw_json_error_body(const char *message, const char *type, const char *param,
                         const char *code, size_t *len)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message",
                          message ? message : "", "type", type ? type : "api_error",
                          "param", param, "code", code);
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (s && len)
        *len = strlen(s);
    return s;
}
