#include "cp_fetch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "gw_error.h"

int cp_fetch_parse_allow(const char *list, unsigned *allow, char *err, size_t errlen)
{
    static const struct {
        const char *word;
        unsigned bit;
    } words[] = {{"http", CP_FETCH_ALLOW_HTTP},
                 {"loopback", CP_FETCH_ALLOW_LOOPBACK},
                 {"private", CP_FETCH_ALLOW_PRIVATE},
                 {"link-local", CP_FETCH_ALLOW_LINK_LOCAL},
                 {"none", 0}};
    *allow = 0;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        size_t i = 0;
        while (i < sizeof(words) / sizeof(*words) &&
               !(strlen(words[i].word) == n && strncmp(words[i].word, p, n) == 0))
            i++;
        if (i == sizeof(words) / sizeof(*words)) {
            snprintf(err, errlen, "'%.*s' is not one of http, loopback, private, link-local, none",
                     (int)(n > 32 ? 32 : n), p);
            return GW_EINVAL;
        }
        *allow |= words[i].bit;
        p += n + (p[n] == ',');
    }
    return GW_OK;
}

static enum cp_fetch_addr class_v4(uint32_t a)
{
    if ((a >> 24) == 127 || (a >> 24) == 0)
        return CP_ADDR_LOOPBACK;
    if ((a >> 24) == 10 || (a >> 20) == (172u << 4 | 1) || (a >> 16) == (192u << 8 | 168) ||
        (a >> 22) == (100u << 2 | 1)) /* 100.64/10 */
        return CP_ADDR_PRIVATE;
    if ((a >> 16) == (169u << 8 | 254))
        return CP_ADDR_LINK_LOCAL;
    if ((a >> 28) >= 14) /* 224/4 multicast, 240/4 reserved and broadcast */
        return CP_ADDR_NEVER;
    return CP_ADDR_PUBLIC;
}

enum cp_fetch_addr cp_fetch_addr_class(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return class_v4(ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6)
        return CP_ADDR_NEVER;
    const unsigned char *b = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(b, mapped, 12) == 0)
        return class_v4((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 |
                        b[15]);
    int zero15 = 1;
    for (int i = 0; i < 15; i++)
        zero15 &= b[i] == 0;
    if (zero15 && (b[15] == 1 || b[15] == 0)) /* ::1 and :: */
        return CP_ADDR_LOOPBACK;
    if ((b[0] & 0xfe) == 0xfc)
        return CP_ADDR_PRIVATE;
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return CP_ADDR_LINK_LOCAL;
    if (b[0] == 0xff)
        return CP_ADDR_NEVER;
    return CP_ADDR_PUBLIC;
}

/* CURLOPT_OPENSOCKETFUNCTION: every address curl is about to connect to,
 * after its own DNS, passes the policy or gets no socket. */
static curl_socket_t open_checked(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)purpose;
    struct cp_fetch *f = arg;
    static const char *const names[] = {"public", "loopback", "private", "link-local",
                                        "multicast, broadcast or reserved"};
    static const char *const words[] = {"", "loopback", "private", "link-local", ""};
    static const unsigned bits[] = {0, CP_FETCH_ALLOW_LOOPBACK, CP_FETCH_ALLOW_PRIVATE,
                                    CP_FETCH_ALLOW_LINK_LOCAL, 0};
    enum cp_fetch_addr k = cp_fetch_addr_class(&a->addr);
    if (k != CP_ADDR_PUBLIC && !(k != CP_ADDR_NEVER && (f->allow & bits[k]))) {
        char ip[INET6_ADDRSTRLEN] = "?";
        if (a->family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)&a->addr)->sin_addr, ip, sizeof(ip));
        else if (a->family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)&a->addr)->sin6_addr, ip,
                      sizeof(ip));
        if (k == CP_ADDR_NEVER)
            snprintf(f->refused, sizeof(f->refused), "the address %s is %s: never fetched from", ip,
                     names[k]);
        else
            snprintf(f->refused, sizeof(f->refused),
                     "the address %s is %s: not fetched from unless allowed "
                     "(--catalog-fetch-allow %s)",
                     ip, names[k], words[k]);
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

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

int cp_fetch_init(struct cp_fetch *f, const char *url, unsigned allow, size_t max_bytes,
                  long timeout_ms, char *err, size_t errlen)
{
    memset(f, 0, sizeof(*f));
    f->allow = allow;
    cp_fetch_redact(url, f->url, sizeof(f->url));
    int http = strncasecmp(url, "http://", 7) == 0;
    if (!http && strncasecmp(url, "https://", 8) != 0) {
        snprintf(err, errlen, "must be an https:// URL");
        return GW_EINVAL;
    }
    if (http && !(allow & CP_FETCH_ALLOW_HTTP)) {
        snprintf(err, errlen,
                 "must be an https:// URL (plain http only with --catalog-fetch-allow http)");
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
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, http ? "http" : "https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, f);
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
    if (rc != CURLE_OK && f->refused[0]) {
        snprintf(err, errlen, "%s: %s", f->url, f->refused);
        return GW_EINVAL;
    }
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s: %s", f->url,
                 f->curl_err[0] ? f->curl_err : curl_easy_strerror(rc));
        return GW_EIO;
    }
    long status = 0;
    curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 && status <= 399) {
        snprintf(err, errlen,
                 "%s: answered HTTP %ld: redirects are not followed (give the final URL)", f->url,
                 status);
        return GW_EIO;
    }
    if (status < 200 || status > 299) {
        snprintf(err, errlen, "%s: answered HTTP %ld", f->url, status);
        return GW_EIO;
    }
    return GW_OK;
}

int cp_fetch_run(struct cp_fetch *f, const char *url, unsigned allow, size_t max_bytes,
                 long timeout_ms, char *err, size_t errlen)
{
    int rc = cp_fetch_init(f, url, allow, max_bytes, timeout_ms, err, errlen);
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
