#include "cp_fetch.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gw_error.h"

void cp_fetch_redact(const char *url, char *out, size_t outlen)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL;
    if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        (void)curl_url_get(u, CURLUPART_PORT, &port, 0);
        (void)curl_url_get(u, CURLUPART_PATH, &path, 0);
        snprintf(out, outlen, "%s://%s%s%s%s", scheme, host, port ? ":" : "", port ? port : "",
                 path ? path : "");
    } else {
        snprintf(out, outlen, "(not a URL)");
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_url_cleanup(u);
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
    struct cp_fetch *f = arg;
    size_t n = size * nmemb;
    if (gw_buf_append(&f->body, p, n) != GW_OK) {
        f->over = 1;
        return 0; /* stops the transfer (CURLE_WRITE_ERROR) */
    }
    return n;
}

int cp_fetch_init(struct cp_fetch *f, const char *url, size_t max_bytes, long timeout_ms, char *err,
                  size_t errlen)
{
    memset(f, 0, sizeof(*f));
    cp_fetch_redact(url, f->url, sizeof(f->url));
    if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0) {
        snprintf(err, errlen, "must be an http:// or https:// URL");
        return GW_EINVAL;
    }
    if (strcmp(f->url, "(not a URL)") == 0) {
        snprintf(err, errlen, "is not a valid URL");
        return GW_EINVAL;
    }
    f->easy = curl_easy_init();
    if (!f->easy) {
        snprintf(err, errlen, "out of memory (curl)");
        return GW_ENOMEM;
    }
    gw_buf_init(&f->body, max_bytes ? max_bytes : CP_FETCH_MAX_BYTES);
    CURL *e = f->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, f->curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 3L);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, ""); /* what this libcurl decodes */
    /* A size announced up front is refused before any byte (the ceiling
     * still bounds a body sent without one). */
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->body.max);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.0/8,::1");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CP_FETCH_CONNECT_MS);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : CP_FETCH_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "llmgw-controlplane");
    return GW_OK;
}

int cp_fetch_done(struct cp_fetch *f, CURLcode rc, char *err, size_t errlen)
{
    if (f->over || rc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(err, errlen, "%s: the document is larger than %zu bytes", f->url, f->body.max);
        return GW_ELIMIT;
    }
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", f->url,
                 f->curl_err[0] ? f->curl_err : curl_easy_strerror(rc));
        return GW_EIO;
    }
    long status = 0;
    curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299) {
        snprintf(err, errlen, "%s: answered HTTP %ld", f->url, status);
        return GW_EIO;
    }
    return GW_OK;
}

int cp_fetch_run(struct cp_fetch *f, const char *url, size_t max_bytes, long timeout_ms, char *err,
                 size_t errlen)
{
    int rc = cp_fetch_init(f, url, max_bytes, timeout_ms, err, errlen);
    if (rc != GW_OK)
        return rc;
    return cp_fetch_done(f, curl_easy_perform(f->easy), err, errlen);
}

void cp_fetch_cleanup(struct cp_fetch *f)
{
    if (f->easy)
        curl_easy_cleanup(f->easy);
    f->easy = NULL;
    gw_buf_free(&f->body);
}
