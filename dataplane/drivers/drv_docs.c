#include "drv_docs.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "drv_util.h"
#include "gw_codec.h"
#include "gw_error.h"

int drv_doc_members(const struct canon_req *r, const char *where, const struct canon_part *p,
                    unsigned can, const char *driver, struct canon_err *err)
{
    const char *member = NULL;
    if (p->title && !(can & DRV_DOC_TITLE))
        member = "title";
    else if (p->context && !(can & DRV_DOC_CONTEXT))
        member = "context";
    else if (p->citations && !(can & DRV_DOC_CITATIONS))
        member = "citations";
    if (!member)
        return GW_OK;
    canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                  "%s: a document's '%s' cannot be sent to %s %s provider (%s)", where, member,
                  drv_a(driver), driver,
                  strcmp(member, "citations") == 0 ? "it gives no citations of documents"
                                                   : "its documents have no such field");
    return GW_EINVAL;
}

int drv_refuse_doc(const struct canon_req *r, const char *where, const struct canon_part *p,
                   const char *driver, const char *why, struct canon_err *err)
{
    const char *kind = p->type == CANON_PART_AUDIO ? "audio input" : "a document";
    const char *fmt = p->text ? "text" : p->url ? "by URL" : p->media_type ? p->media_type : "file";
    canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                  "%s: %s (%s) cannot be sent to %s %s provider: %s", where, kind, fmt,
                  drv_a(driver), driver, why);
    return GW_EINVAL;
}

static const struct {
    const char *media_type;
    const char *ext;
} exts[] = {
    {"application/pdf", "pdf"},
    {"text/plain", "txt"},
    {"text/markdown", "md"},
    {"text/csv", "csv"},
    {"text/html", "html"},
    {"application/msword", "doc"},
    {"application/vnd.openxmlformats-officedocument.wordprocessingml.document", "docx"},
    {"application/vnd.ms-excel", "xls"},
    {"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "xlsx"},
    {"application/json", "json"},
};

const char *drv_doc_ext(const char *media_type)
{
    for (size_t i = 0; media_type && i < sizeof(exts) / sizeof(*exts); i++)
        if (strcasecmp(media_type, exts[i].media_type) == 0)
            return exts[i].ext;
    return NULL;
}

char *drv_doc_filename(const struct canon_part *p)
{
    if (p->filename && *p->filename)
        return strdup(p->filename);
    const char *base = p->title && *p->title ? p->title : "document";
    const char *ext = drv_doc_ext(p->text ? "text/plain" : p->media_type);
    size_t bl = strlen(base), el = ext ? strlen(ext) : 0;
    if (ext && bl > el + 1 && base[bl - el - 1] == '.' && strcasecmp(base + bl - el, ext) == 0)
        ext = NULL; /* "report.pdf" already says it */
    size_t n = bl + (ext ? el + 2 : 1);
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s%s", base, ext ? "." : "", ext ? ext : "");
    return s;
}

void drv_doc_name(const struct canon_part *p, char *buf, size_t n)
{
    const char *src = p->title && *p->title ? p->title : p->filename ? p->filename : "";
    size_t len = strlen(src);
    if (!(p->title && *p->title)) {
        const char *dot = strrchr(src, '.');
        if (dot && dot != src)
            len = (size_t)(dot - src); /* "report.pdf": the format says pdf */
    }
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < n && o < 200; i++) {
        unsigned char c = (unsigned char)src[i];
        if (isspace(c)) {
            if (o && buf[o - 1] != ' ')
                buf[o++] = ' ';
        } else if (isalnum(c) || strchr("-()[]", c)) {
            buf[o++] = (char)c;
        } else if (o == 0 || buf[o - 1] != '-') {
            buf[o++] = '-'; /* a UTF-8 sequence, too, is one hyphen */
        }
    }
    while (o && buf[o - 1] == ' ')
        o--;
    if (o == 0)
        snprintf(buf, n, "document");
    else
        buf[o] = '\0';
}

const char *drv_audio_format(const char *media_type)
{
    if (!media_type)
        return NULL;
    if (strcasecmp(media_type, "audio/wav") == 0 || strcasecmp(media_type, "audio/x-wav") == 0 ||
        strcasecmp(media_type, "audio/wave") == 0)
        return "wav";
    if (strcasecmp(media_type, "audio/mp3") == 0 || strcasecmp(media_type, "audio/mpeg") == 0)
        return "mp3";
    return NULL;
}

json_t *drv_b64_string(const char *text)
{
    size_t n = strlen(text);
    char *s = malloc(gw_b64_len(n) + 1);
    if (!s)
        return NULL;
    gw_b64_encode(text, n, s);
    json_t *j = json_stringn(s, gw_b64_len(n));
    free(s);
    return j;
}

json_t *drv_b64_text(const char *data)
{
    /* Padded standard base64 only: what a data: URL carries. */
    size_t n = data ? strlen(data) : 0;
    if (n == 0 || n % 4)
        return NULL;
    char *d = malloc(n / 4 * 3);
    if (!d)
        return NULL;
    size_t o = 0;
    int bad = gw_b64_decode(data, n, (unsigned char *)d, n / 4 * 3, &o) != GW_OK;
    json_t *s = bad || memchr(d, '\0', o) ? NULL : json_stringn(d, o);
    free(d);
    return s;
}
