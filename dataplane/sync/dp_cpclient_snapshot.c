/*
 * dp_cpclient_snapshot: what the client does with a pushed Snapshot (the
 * Watch stream's messages, dp_cpclient.c): a whole document built and
 * served, a delta applied to the snapshot served (dp_snapshot_apply), and
 * the snapshot cache written from either, debounced after deltas.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_cpclient_int.h"
#include "dp_snapcache.h"
#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_time.h"
#include "llmgw/v1/control.pb-c.h"

/* The snapshot cache is written from deltas at most this often (and at
 * exit): see cache_changed. */
#define CACHE_EVERY_MS 5000
/* A whole document this large gives its parse's heap back (malloc_trim). */
#define TRIM_ABOVE (4u << 20)

/* Writes the snapshot cache from the snapshot served now, rendered back
 * into its document (dp_snapshot_render). */
void dpc_cache_write(struct dp_cpclient *c)
{
    c->cache_dirty = 0;
    c->cache_saved_us = gw_now_us();
    struct dp_snapshot *s = dp_snapshot_acquire();
    size_t len = 0;
    char *text = s ? dp_snapshot_render(s, &len) : NULL;
    json_t *doc = text ? json_loadb(text, len, 0, NULL) : NULL;
    if (text) {
        explicit_bzero(text, len);
        free(text);
    }
    char err[512];
    if (!doc)
        gw_logf(GW_LOG_ERROR, "snapshot cache not written", "{s:s}", "error",
                s ? "cannot render the snapshot (out of memory)" : "no snapshot");
    else if (dp_snapcache_save(c->cfg->snapshot_cache, doc,
                               c->cfg->has_cache_key ? c->cfg->cache_key : NULL, err,
                               sizeof(err)) != GW_OK)
        gw_logf(GW_LOG_ERROR, "snapshot cache not written", "{s:s}", "error", err);
    dp_snapshot_wipe_json(doc);
    json_decref(doc);
    if (s)
        dp_snapshot_unref(s);
}

void dpc_on_cache(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_cpclient *c = arg;
    if (c->cache_dirty)
        dpc_cache_write(c);
}

/* A delta changed the snapshot served: the cache is written from a render
 * of it, at most once every CACHE_EVERY_MS. Rendering and sealing costs
 * O(configuration), the very cost deltas avoid; the cache only has to be
 * recent enough to start from while the control plane is away, and a
 * start from it is followed by a whole document anyway. So the first
 * change after a quiet interval is written at once, later ones when the
 * interval is over (the timer), and what is left at exit by on_stop. */
static void cache_changed(struct dp_cpclient *c)
{
    if (!c->cfg->snapshot_cache)
        return;
    c->cache_dirty = 1;
    int64_t due = c->cache_saved_us + (int64_t)CACHE_EVERY_MS * 1000, now = gw_now_us();
    if (now >= due) {
        evtimer_del(c->cache_ev);
        dpc_cache_write(c);
    } else if (!evtimer_pending(c->cache_ev, NULL)) {
        struct timeval tv = {(time_t)((due - now) / 1000000), (suseconds_t)((due - now) % 1000000)};
        evtimer_add(c->cache_ev, &tv);
    }
}

/* A whole document: built and served, written to the cache at once (it is
 * at hand, and whole documents are rare: a new Watch, a full build). */
static void apply_document(struct dp_cpclient *c, const Llmgw__V1__Snapshot *m)
{
    json_error_t je;
    char err[512];
    json_t *doc =
        json_loadb((const char *)m->document.data, m->document.len, JSON_REJECT_DUPLICATES, &je);
    struct dp_snapshot *s = NULL;
    if (!doc) {
        /* The position only: the text may hold credentials. */
        snprintf(err, sizeof(err), "document: not JSON (line %d column %d)", je.line, je.column);
    } else if (json_integer_value(json_object_get(doc, "version")) != m->version) {
        snprintf(err, sizeof(err), "version: the document says %lld, the message %lld",
                 (long long)json_integer_value(json_object_get(doc, "version")),
                 (long long)m->version);
    } else {
        s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    }
    if (!s) {
        gw_logf(GW_LOG_ERROR, "pushed snapshot refused; keeping the last good one", "{s:I,s:I,s:s}",
                "version", (json_int_t)m->version, "serving", (json_int_t)c->served, "error", err);
        dp_snapshot_wipe_json(doc);
        json_decref(doc);
        return;
    }
    dp_snapshot_publish(s);
    c->served = m->version;
    c->got_snapshot = 1;
    gw_logf(GW_LOG_INFO, "snapshot loaded", "{s:I,s:s,s:b}", "version", (json_int_t)m->version,
            "source", "control_plane", "delta", 0);
    if (c->cfg->snapshot_cache) {
        evtimer_del(c->cache_ev);
        c->cache_dirty = 0;
        c->cache_saved_us = gw_now_us();
        if (dp_snapcache_save(c->cfg->snapshot_cache, doc,
                              c->cfg->has_cache_key ? c->cfg->cache_key : NULL, err,
                              sizeof(err)) != GW_OK)
            gw_logf(GW_LOG_ERROR, "snapshot cache not written", "{s:s}", "error", err);
    }
    dp_snapshot_wipe_json(doc);
    json_decref(doc);
    /* The parsed document was several times its text; freed, it would
     * stay in the heap and in RSS for good, the snapshot itself needing a
     * fraction of it (at 100,000 keys, 310 MiB held against 117). Only for
     * a large one: trimming takes every arena's lock. */
    if (m->document.len >= TRIM_ABOVE)
        malloc_trim(0);
    c->ack_pending = m->version;
    dpc_report_pump(c);
}

/* Ends the Watch and opens another at once, with the version served as
 * have_version: the control plane answers a new Watch with the whole
 * document. The Report stream stays. */
static void watch_reopen(struct dp_cpclient *c)
{
    if (!c->watch || c->rewatch)
        return;
    c->rewatch = 1;
    grpc_call_cancel(c->watch->call, NULL);
}

/* A delta: applied to the snapshot served (dp_snapshot_apply), which must
 * be the delta's base. One that cannot be applied (another base: a
 * version this data plane refused, say; or a result that does not build)
 * leaves the served snapshot as it is and asks for the whole document. */
static void apply_delta(struct dp_cpclient *c, const Llmgw__V1__Snapshot *m)
{
    json_error_t je;
    char err[512];
    struct dp_snapshot *base = dp_snapshot_acquire(), *s = NULL;
    json_t *delta =
        json_loadb((const char *)m->delta.data, m->delta.len, JSON_REJECT_DUPLICATES, &je);
    if (!base || base->version != m->base_version) {
        snprintf(err, sizeof(err), "base_version %lld is not the version served, %lld",
                 (long long)m->base_version, base ? base->version : 0LL);
    } else if (!delta) {
        snprintf(err, sizeof(err), "delta: not JSON (line %d column %d)", je.line, je.column);
    } else if (json_integer_value(json_object_get(delta, "version")) != m->version ||
               json_integer_value(json_object_get(delta, "base_version")) != m->base_version) {
        snprintf(err, sizeof(err),
                 "version: the delta says %lld from %lld, the message %lld from %lld",
                 (long long)json_integer_value(json_object_get(delta, "version")),
                 (long long)json_integer_value(json_object_get(delta, "base_version")),
                 (long long)m->version, (long long)m->base_version);
    } else {
        s = dp_snapshot_apply(base, delta, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    }
    if (base)
        dp_snapshot_unref(base);
    dp_snapshot_wipe_json(delta);
    json_decref(delta);
    if (!s) {
        gw_logf(GW_LOG_WARN, "pushed snapshot delta not applied; asking for the whole document",
                "{s:I,s:I,s:I,s:s}", "version", (json_int_t)m->version, "base_version",
                (json_int_t)m->base_version, "serving", (json_int_t)c->served, "error", err);
        watch_reopen(c);
        return;
    }
    dp_snapshot_publish(s);
    c->served = m->version;
    c->got_snapshot = 1;
    gw_logf(GW_LOG_INFO, "snapshot loaded", "{s:I,s:s,s:b,s:I}", "version", (json_int_t)m->version,
            "source", "control_plane", "delta", 1, "base_version", (json_int_t)m->base_version);
    cache_changed(c);
    c->ack_pending = m->version;
    dpc_report_pump(c);
}

void dpc_apply_snapshot(struct dp_cpclient *c, const Llmgw__V1__Snapshot *m)
{
    if (m->delta.len > 0)
        apply_delta(c, m);
    else
        apply_document(c, m);
}
