#include "gw_flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

int gw_flags_num(const char *prog, const char *flag, const char *v, long long lo, long long hi,
                 long long *out)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi) {
        fprintf(stderr, "%s: %s: '%s' is not an integer from %lld to %lld\n", prog, flag, v, lo,
                hi);
        return GW_EINVAL;
    }
    *out = n;
    return GW_OK;
}

int gw_flags_hostport(const char *prog, const char *flag, const char *v, char *host, size_t hostlen,
                      int *port)
{
    const char *colon = strrchr(v, ':');
    long long p;
    if (!colon || colon == v || (size_t)(colon - v) >= hostlen) {
        fprintf(stderr, "%s: %s: '%s' is not HOST:PORT\n", prog, flag, v);
        return GW_EINVAL;
    }
    if (gw_flags_num(prog, flag, colon + 1, 0, 65535, &p))
        return GW_EINVAL;
    size_t hl = (size_t)(colon - v);
    const char *h = v;
    if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') { /* [::1]:8080 */
        h++;
        hl -= 2;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return GW_OK;
}

static int is_switch(const struct gw_flags *f, const char *flag)
{
    for (const char *const *s = f->switches; s && *s; s++)
        if (strcmp(*s, flag) == 0)
            return 1;
    return 0;
}

int gw_flags_parse(const struct gw_flags *f, int argc, char **argv, int first)
{
    for (size_t i = 0; i < f->nenv; i++) {
        const char *v = getenv(f->env[i][0]);
        if (v && *v && f->apply(f->cfg, f->env[i][1], v))
            return GW_EINVAL;
    }
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(f->usage, stdout);
            return 1;
        }
        const char *flag = argv[i];
        const char *eq = strchr(flag, '=');
        char name[64];
        const char *v;
        if (eq && (size_t)(eq - flag) < sizeof(name)) {
            memcpy(name, flag, (size_t)(eq - flag));
            name[eq - flag] = '\0';
            flag = name;
            v = eq + 1;
        } else if (is_switch(f, flag)) {
            v = "1";
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "%s: %s needs a value\n%s", f->prog, flag, f->usage);
            return GW_EINVAL;
        }
        if (f->apply(f->cfg, flag, v))
            return GW_EINVAL;
    }
    return GW_OK;
}
