#include "cp_authfail.h"

#include <stdio.h>
#include <string.h>

static int same(const struct cp_authfail_slot *s, const char *addr)
{
    return s->window_ms != 0 && strncmp(s->addr, addr, sizeof(s->addr) - 1) == 0;
}

static const struct cp_authfail_slot *find(const struct cp_authfail *t, const char *addr)
{
    for (size_t i = 0; i < CP_AUTHFAIL_SLOTS; i++)
        if (same(&t->slots[i], addr))
            return &t->slots[i];
    return NULL;
}

int64_t cp_authfail_blocked(const struct cp_authfail *t, const char *addr, int64_t now_ms)
{
    const struct cp_authfail_slot *s = find(t, addr);
    if (!s || s->fails < CP_AUTHFAIL_MAX)
        return 0;
    int64_t left = s->window_ms + CP_AUTHFAIL_WINDOW_MS - now_ms;
    return left > 0 ? left : 0;
}

enum cp_authfail_log cp_authfail_record(struct cp_authfail *t, const char *addr, int64_t now_ms)
{
    struct cp_authfail_slot *s = (struct cp_authfail_slot *)find(t, addr);
    if (!s) {
        /* A free slot, else the one whose window began longest ago. */
        s = &t->slots[0];
        for (size_t i = 0; i < CP_AUTHFAIL_SLOTS && s->window_ms != 0; i++)
            if (t->slots[i].window_ms < s->window_ms)
                s = &t->slots[i];
        snprintf(s->addr, sizeof(s->addr), "%s", addr);
        s->window_ms = now_ms ? now_ms : 1;
        s->fails = 0;
    } else if (now_ms - s->window_ms >= CP_AUTHFAIL_WINDOW_MS) {
        s->window_ms = now_ms ? now_ms : 1;
        s->fails = 0;
    }
    if (s->fails >= CP_AUTHFAIL_MAX)
        return CP_AUTHFAIL_QUIET; /* already limited (and said so) */
    if (++s->fails == CP_AUTHFAIL_MAX)
        return CP_AUTHFAIL_LOG_LIMITED;
    return s->fails <= CP_AUTHFAIL_LOGGED ? CP_AUTHFAIL_LOG : CP_AUTHFAIL_QUIET;
}
