/*
 * Tool calls as the drivers receive them (drv_util.h, "tool calls"): the
 * call that started first streams, later ones are held whole until it ends,
 * so the event channel never interleaves two calls (docs/canonical.md).
 */
#include <stdlib.h>
#include <string.h>

#include "drv_util.h"
#include "gw_error.h"

/* The open call ends (a call that had no arguments gets "{}"). */
static int close_open(struct drv_tools *t, const struct canon_sink *s)
{
    if (!t->open)
        return 0;
    t->open = 0;
    int idx = t->count - 1;
    if (!t->open_args) {
        struct canon_event d = {.type = CANON_EV_TOOL_DELTA, .index = idx, .text = "{}", .len = 2};
        if (canon_emit(s, &d))
            return 1;
    }
    struct canon_event ev = {.type = CANON_EV_TOOL_END, .index = idx};
    return canon_emit(s, &ev) ? 1 : 0;
}

/* Call key starts: it is the open call, with the next canonical index. */
static int open_call(struct drv_tools *t, long long key, const char *id, const char *name,
                     const struct canon_sink *s)
{
    char gen[32];
    if (!id || !*id) {
        snprintf(gen, sizeof(gen), "call_%d", t->count);
        id = gen;
    }
    t->keys[t->count] = key;
    struct canon_event ev = {
        .type = CANON_EV_TOOL_START, .index = t->count, .id = id, .name = name ? name : ""};
    t->count++;
    t->open = 1;
    t->open_key = key;
    t->open_args = 0;
    return canon_emit(s, &ev);
}

static int open_args(struct drv_tools *t, const char *args, size_t len, const struct canon_sink *s)
{
    if (!len)
        return 0;
    t->open_args = 1;
    struct canon_event ev = {
        .type = CANON_EV_TOOL_DELTA, .index = t->count - 1, .text = args, .len = len};
    return canon_emit(s, &ev);
}

static struct drv_tool_held *held_of(const struct drv_tools *t, long long key)
{
    for (int i = 0; i < t->nheld; i++)
        if (t->held[i].key == key)
            return &t->held[i];
    return NULL;
}

static void held_drop_first(struct drv_tools *t)
{
    struct drv_tool_held *h = &t->held[0];
    t->held_bytes -= h->args.len;
    free(h->id);
    free(h->name);
    gw_buf_free(&h->args);
    memmove(t->held, t->held + 1, (size_t)(t->nheld - 1) * sizeof(*t->held));
    t->nheld--;
}

/* With no call open, the held calls take their turns: each is emitted with
 * what it has, and closed when it has ended (or all: every call ends). The
 * first that has not ended stays open. */
static int promote(struct drv_tools *t, int all, const struct canon_sink *s)
{
    while (!t->open && t->nheld) {
        struct drv_tool_held *h = &t->held[0];
        int ended = h->ended || all;
        int stop = open_call(t, h->key, h->id, h->name, s) ||
                   open_args(t, h->args.data, h->args.len, s) || (ended && close_open(t, s));
        held_drop_first(t);
        if (stop)
            return 1;
    }
    return 0;
}

int drv_tools_close(struct drv_tools *t, const struct canon_sink *s)
{
    return close_open(t, s) || promote(t, 1, s);
}

int drv_tools_end(struct drv_tools *t, long long key, const struct canon_sink *s)
{
    if (t->open && t->open_key == key)
        return close_open(t, s) || promote(t, 0, s);
    struct drv_tool_held *h = held_of(t, key);
    if (h)
        h->ended = 1;
    return 0;
}

int drv_tools_live(const struct drv_tools *t, long long key)
{
    const struct drv_tool_held *h = held_of(t, key);
    return (t->open && t->open_key == key) || (h && !h->ended);
}

int drv_tools_has_args(const struct drv_tools *t, long long key)
{
    if (t->open && t->open_key == key)
        return t->open_args;
    const struct drv_tool_held *h = held_of(t, key);
    return h && h->args.len > 0;
}

void drv_tools_free(struct drv_tools *t)
{
    while (t->nheld)
        held_drop_first(t);
    free(t->held);
    t->held = NULL;
    t->held_cap = 0;
}

/* A call that starts while another is open waits behind it. */
static int hold(struct drv_tools *t, long long key, const char *id, const char *name)
{
    if (t->nheld == t->held_cap) {
        int cap = t->held_cap ? t->held_cap * 2 : 4;
        struct drv_tool_held *n = realloc(t->held, (size_t)cap * sizeof(*n));
        if (!n)
            return GW_ENOMEM;
        t->held = n;
        t->held_cap = cap;
    }
    struct drv_tool_held *h = &t->held[t->nheld];
    *h = (struct drv_tool_held){.key = key};
    h->id = id && *id ? strdup(id) : NULL;
    h->name = name ? strdup(name) : NULL;
    gw_buf_init(&h->args, DRV_MAX_BODY);
    if ((id && *id && !h->id) || (name && !h->name)) {
        free(h->id);
        free(h->name);
        return GW_ENOMEM;
    }
    t->nheld++;
    return GW_OK;
}

int drv_tools_delta(struct drv_tools *t, long long key, const char *id, const char *name,
                    const char *args, const struct canon_sink *s)
{
    size_t alen = args ? strlen(args) : 0;
    if (t->open && t->open_key == key)
        return open_args(t, args, alen, s) ? 1 : 0;
    struct drv_tool_held *h = held_of(t, key);
    if (!h) {
        for (int i = 0; i < t->count; i++)
            if (t->keys[i] == key)
                return GW_EINVAL; /* a call already closed: never spliced */
        if (t->count + t->nheld >= DRV_MAX_TOOL_CALLS)
            return GW_ELIMIT;
        if (!t->interleave && close_open(t, s))
            return 1;
        if (!t->open)
            return open_call(t, key, id, name, s) || open_args(t, args, alen, s) ? 1 : 0;
        int rc = hold(t, key, id, name);
        if (rc != GW_OK)
            return rc;
        h = &t->held[t->nheld - 1];
    }
    if (h->ended)
        return GW_EINVAL; /* arguments after the provider ended the call */
    if (alen > DRV_MAX_BODY - t->held_bytes)
        return GW_ELIMIT;
    if (alen && gw_buf_append(&h->args, args, alen) != GW_OK)
        return GW_ENOMEM;
    t->held_bytes += alen;
    return 0;
}

int drv_tools_check(struct drv_parser *p, const struct canon_sink *s, int rc, const char *what)
{
    if (rc == GW_EINVAL)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX, what);
    if (rc == GW_ELIMIT)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider made more tool calls than the gateway takes (128 calls, "
                        "32 MiB of arguments held while calls interleave)");
    if (rc == GW_ENOMEM)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX, "out of memory holding a tool call");
    return rc ? 1 : 0;
}

int drv_tools_whole(struct drv_parser *p, struct drv_tools *t, const char *id, const char *name,
                    const char *args, const struct canon_sink *s)
{
    int rc = drv_tools_delta(t, t->count, id, name, args ? args : "{}", s);
    if (rc)
        return drv_tools_check(p, s, rc, "the provider made too many tool calls");
    return drv_tools_close(t, s);
}
