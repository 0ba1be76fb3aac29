#include "cp_console.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cp_call.h"
#include "gw_http.h"
#include "gw_pool.h"

#define PREFIX "/console"
/* An asset read from --console-dir larger than this is refused (500): the
 * console's files are tens of KiB. */
#define MAX_DISK_ASSET (8u << 20)

/* No inline script or style, nothing from another origin, no framing, no
 * form posts (the console sends everything with fetch). */
static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "img-src 'self' data:; connect-src 'self'; font-src 'self'; "
                          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

static const char *const headers[][2] = {
    {"Content-Security-Policy", csp},
    {"X-Frame-Options", "DENY"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
    {"Cross-Origin-Opener-Policy", "same-origin"},
    {"Cross-Origin-Resource-Policy", "same-origin"},
    {"Cache-Control", "no-cache"},
};

int cp_console_path(const char *path)
{
    return strncmp(path, PREFIX, sizeof(PREFIX) - 1) == 0 &&
           (path[sizeof(PREFIX) - 1] == '\0' || path[sizeof(PREFIX) - 1] == '/');
}

const char *cp_console_type(const char *name)
{
    static const char *const types[][2] = {{".html", "text/html; charset=utf-8"},
                                           {".js", "text/javascript; charset=utf-8"},
                                           {".css", "text/css; charset=utf-8"},
                                           {".svg", "image/svg+xml"}};
    size_t n = strlen(name);
    if (n == 0 || n > 64 || name[0] == '.')
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
              ch == '.'))
            return NULL;
    }
    for (size_t i = 0; i < sizeof(types) / sizeof(*types); i++) {
        size_t sl = strlen(types[i][0]);
        if (n > sl && strcmp(name + n - sl, types[i][0]) == 0)
            return types[i][1];
    }
    return NULL;
}

/* name's bytes from dir into the pool; NULL when absent or unreadable. */
static char *read_disk(struct gw_pool *pool, const char *dir, const char *name, size_t *len)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= MAX_DISK_ASSET)
        buf = gw_pool_alloc(pool, (size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            buf = NULL;
        else
            got += (size_t)r;
    }
    close(fd);
    *len = got;
    return buf;
}

void cp_console_serve(struct cp_call *c, const char *dir)
{
    const char *path = gw_http_req_path(c->req);
    if (!cp_call_method(c, "GET"))
        return;
    for (size_t i = 0; i < sizeof(headers) / sizeof(*headers); i++)
        (void)gw_http_add_header(c->req, headers[i][0], headers[i][1]);
    if (strcmp(path, PREFIX) == 0) {
        (void)gw_http_add_header(c->req, "Location", PREFIX "/");
        c->status = 308;
        return gw_http_respond(c->req, 308, "text/plain; charset=utf-8", "", 0);
    }
    const char *name = path + sizeof(PREFIX);
    if (!*name)
        name = "index.html";
    const char *type = cp_console_type(name);
    const char *body = NULL;
    size_t len = 0;
    if (type && dir)
        body = read_disk(c->pool, dir, name, &len);
    for (const struct cp_console_file *f = cp_console_files; type && !dir && f->name; f++)
        if (strcmp(f->name, name) == 0) {
            body = (const char *)f->data;
            len = f->len;
        }
    if (!body)
        return cp_call_error(c, 404, "not_found", NULL, "the console has no such file");
    c->status = 200;
    gw_http_respond(c->req, 200, type, body, len);
}
