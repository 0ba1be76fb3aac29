/*
 * The cache phase (docs/cache.md): after the reservation, before the first
 * attempt. A deterministic request on a route with the cache on is looked
 * up under the key of each planned target (dp_cache_key.h: the tenant
 * scope, the route and its content fingerprint, the target, the request's
 * digest); a hit is replayed through the client's facade as a live answer
 * is, and no upstream call is made. A miss opens a single flight on the
 * first target's key: identical requests that arrive meanwhile wait for
 * its answer (joined) rather than call the provider again, at most for
 * their failover budget, then go upstream themselves.
 *
 * The leader's whole answer is stored under the key of the target that
 * gave it: dp_cache_fill when that is the first target (its waiters get
 * the entry), else dp_cache_put and the flight abandoned (its waiters look
 * the request up again and find it). Every other end of a leader abandons
 * its flight (x_cache_free), so no waiter is left behind.
 *
 * A waiter is woken on the leader's thread (dp_cache.h): its callback
 * keeps the entry and activates an event on the waiter's own loop. A
 * request that ends while its wake-up is on its way leaves the wake-up
 * orphaned, and the event frees it.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_cache.h"
#include "dp_cache_key.h"
#include "dp_metrics.h"
#include "dp_snapshot.h"
#include "exchange.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_log.h"
#include "gw_time.h"

struct xcache {
    struct dp_exchange *x; /* NULL: orphaned (the request ended while woken) */
    unsigned char digest[DP_CACHE_KEY_BYTES];
    unsigned char lead_key[DP_CACHE_KEY_BYTES]; /* the flight's: the first target's */
    int64_t ttl_us;
    int lookup;  /* look the request up (the client did not say no-cache) */
    int leader;  /* a flight is open on lead_key: fill or abandon it */
    int joined;  /* waiting for a leader's answer */
    int storing; /* the answer of this request is to be stored */
    struct dp_cache_waiter w;
    struct event *wake;         /* on the request's loop */
    struct dp_cache_entry *got; /* the leader's answer (the waiter's reference) */
    struct dp_cache_meta meta;  /* a hit's */
};

/* ------------------------------------------------------------ settings */

/* The TTL in force for the request on its route: the key's override, else
 * its team's, else the route's. 0: off. */
static long ttl_for(const struct dp_exchange *x)
{
    const struct dp_route *r = x->plan.route;
    long ttl = r ? r->cache.ttl_s : 0;
    const struct dp_key *k = x->key;
    const struct dp_team *t = k && k->team ? dp_snapshot_team(x->snap, k->team) : NULL;
    if (t && t->has_cache_ttl)
        ttl = t->cache_ttl_s;
    if (k && k->has_cache_ttl)
        ttl = k->cache_ttl_s;
    return ttl;
}

/* Whom the answer is shared with: the route's scope, resolved for the key
 * (a key without a team or project is its own scope). */
static const char *scope_id(const struct dp_exchange *x, enum dp_cache_scope s)
{
    const struct dp_key *k = x->key;
    if (!k)
        return NULL; /* no key (auth none): one tenant */
    switch (s) {
    case DP_CACHE_SCOPE_TEAM:
        return k->team ? k->team : k->id;
    case DP_CACHE_SCOPE_PROJECT:
        return k->project ? k->project : k->id;
    case DP_CACHE_SCOPE_KEY:
        return k->id;
    case DP_CACHE_SCOPE_GLOBAL:
        break;
    }
    return NULL;
}

/* The key of the request's answer from candidate c. */
static int key_of(const struct dp_exchange *x, const struct dp_candidate *c,
                  unsigned char out[DP_CACHE_KEY_BYTES])
{
    const struct dp_route *r = x->plan.route;
    unsigned char fp[8];
    for (int i = 0; i < 8; i++)
        fp[i] = (unsigned char)(r->content_fp >> (8 * i));
    struct dp_cache_where w = {.scope = r->cache.scope,
                               .scope_id = scope_id(x, r->cache.scope),
                               .route = r->name,
                               .route_fp = fp,
                               .route_fp_len = sizeof(fp),
                               .provider = c->provider->name,
                               .model = c->model};
    return dp_cache_key_at(&w, x->cache->digest, out);
}

static void say(struct dp_exchange *x, const char *result)
{
    if (x->req)
        (void)gw_http_add_header(x->req, "x-llmgw-cache", result);
    dp_metrics_cache(x->plan.route->name, result);
}

/* What the client asked of the cache (Cache-Control, x-llmgw-cache):
 * 1 look up; 0 do not (the answer may still be stored); -1 neither. */
static int client_wants(const struct dp_exchange *x)
{
    const char *cc = gw_http_req_header(x->req, "cache-control");
    const char *ours = gw_http_req_header(x->req, "x-llmgw-cache");
    if (cc && strstr(cc, "no-store"))
        return -1;
    if ((cc && strstr(cc, "no-cache")) || (ours && strcmp(ours, "bypass") == 0))
        return 0;
    return 1;
}

/* ---------------------------------------------------------------- hits */

/* Serves entry e (the request's key at candidate ci) as the answer: its
 * events go through the sink a live answer takes. 0 when served (the
 * request has ended); nonzero when e cannot be (nothing was sent). */
static int serve(struct dp_exchange *x, struct dp_cache_entry *e, size_t ci)
{
    size_t len;
    const unsigned char *blob = dp_cache_entry_data(e, &len);
    struct xcache *xc = x->cache;
    /* Checked whole before anything is said to the client. */
    const char *body = NULL;
    size_t blen = 0;
    if (dp_cache_meta_read(blob, len, &xc->meta) != GW_OK ||
        (x->kind == KIND_CHAT ? dp_cache_replay(blob, len, NULL)
                              : dp_cache_body(blob, len, &body, &blen)) != GW_OK) {
        gw_logf(GW_LOG_ERROR, "cache: an entry failed its checks; not served", "{s:s}",
                "request_id", x->request_id);
        return GW_EINVAL;
    }
    x_set_target(x, &x->plan.cands[ci]);
    x->cache_hit = 1;
    x_name_attempt(x);
    x->ta0 = gw_now_us();
    x->at_ms = gw_wall_ms();
    say(x, "hit");
    char age[24];
    int64_t a = (x->at_ms - xc->meta.created_ms) / 1000;
    snprintf(age, sizeof(age), "%lld", (long long)(a > 0 ? a : 0));
    (void)gw_http_add_header(x->req, "age", age);
    if (x->kind == KIND_EMBED) {
        x_commit(x);
        x_answer_whole(x, body, blen);
    } else if (dp_cache_replay(blob, len, &x->sink) != GW_OK && x->verdict == V_NONE) {
        /* GW_ECLOSED: the sink stopped before DONE (the client is gone). */
        x->verdict = V_CANCELED;
    }
    x_record_hit(x);
    x_end(x);
    return GW_OK;
}

/* The first fresh entry under any planned target's key, in plan order. */
static int serve_any(struct dp_exchange *x)
{
    for (size_t i = 0; i < x->plan.ncands; i++) {
        unsigned char k[DP_CACHE_KEY_BYTES];
        if (key_of(x, &x->plan.cands[i], k) != GW_OK)
            return 1;
        struct dp_cache_entry *e = dp_cache_get(x->l->cache, k, gw_now_us());
        if (!e)
            continue;
        int rc = serve(x, e, i);
        dp_cache_release(e);
        if (rc == GW_OK)
            return 0;
        dp_cache_remove(x->l->cache, k);
    }
    return 1;
}

/* ------------------------------------------------------------- waiting */

static void go_upstream(struct dp_exchange *x)
{
    /* The wait was no attempt: the failover budget starts now. */
    int64_t start = gw_now_us() + (int64_t)x->budget_ms * 1000;
    if (start > x->deadline_us)
        x->deadline_us = start;
    x_start_attempt(x);
}

static void xcache_release(struct xcache *xc)
{
    dp_cache_release(xc->got);
    if (xc->wake)
        event_free(xc->wake);
    free(xc);
}

/* On the leader's thread (dp_cache.h): keep the answer, wake the request. */
static void on_filled(struct dp_cache_waiter *w, struct dp_cache_entry *e)
{
    struct xcache *xc = w->arg;
    xc->got = e;
    event_active(xc->wake, EV_TIMEOUT, 0);
}

/* On the request's loop: the leader answered (got) or gave up (NULL). */
static void on_woken(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct xcache *xc = arg;
    struct dp_exchange *x = xc->x;
    if (!x) {
        xcache_release(xc);
        return;
    }
    xc->joined = 0;
    evtimer_del(x->timer);
    struct dp_cache_entry *e = xc->got;
    xc->got = NULL;
    if (e) {
        int rc = serve(x, e, 0);
        dp_cache_release(e);
        if (rc == GW_OK)
            return;
    }
    /* The leader's answer went under another target's key, or none: look
     * again, once, without joining. */
    if (serve_any(x) == 0)
        return;
    say(x, "miss");
    go_upstream(x);
}

/* The failover budget ran out while waiting (x_on_timer, XP_CACHE). */
void x_cache_timeout(struct dp_exchange *x)
{
    struct xcache *xc = x->cache;
    if (!xc || !xc->joined)
        return;
    if (dp_cache_unjoin(x->l->cache, &xc->w) != GW_OK)
        return; /* the answer is on its way: on_woken comes next */
    xc->joined = 0;
    gw_logf(GW_LOG_INFO, "cache: stopped waiting for an identical request's answer", "{s:s}",
            "request_id", x->request_id);
    say(x, "miss");
    go_upstream(x);
}

/* ------------------------------------------------------------- the phase */

/* Whether and how the request uses the cache; NULL when it does not. */
static struct xcache *setup(struct dp_exchange *x)
{
    /* Media answers are not cached (docs/media.md). */
    if (!x->l->cache || !x->plan.route || !x->plan.ncands || x->kind == KIND_MEDIA ||
        (x->kind == KIND_CHAT && !x->creq))
        return NULL;
    long ttl = ttl_for(x);
    if (ttl <= 0)
        return NULL;
    int wants = client_wants(x);
    const char *why = NULL;
    /* Embeddings are deterministic. */
    if (wants < 0 || (x->kind == KIND_CHAT &&
                      !dp_cache_cacheable(x->creq, x->plan.route->cache.deterministic, &why))) {
        say(x, "bypass");
        return NULL;
    }
    struct xcache *xc = calloc(1, sizeof(*xc));
    if (!xc)
        return NULL;
    xc->x = x;
    xc->ttl_us = (int64_t)ttl * 1000000;
    xc->lookup = wants > 0;
    xc->storing = 1;
    xc->w.cb = on_filled;
    xc->w.arg = xc;
    if ((x->kind == KIND_CHAT ? dp_cache_digest(x->creq, xc->digest)
                              : dp_cache_digest_embed(&x->ereq, xc->digest)) != GW_OK ||
        !(xc->wake = event_new(x->l->base, -1, 0, on_woken, xc))) {
        xcache_release(xc);
        return NULL;
    }
    return xc;
}

void x_cache_phase(struct dp_exchange *x)
{
    x_set_phase(x, XP_CACHE);
    struct xcache *xc = x->cache = setup(x);
    if (!xc) {
        x_start_attempt(x);
        return;
    }
    if (!xc->lookup) {
        say(x, "bypass");
        x_start_attempt(x);
        return;
    }
    if (serve_any(x) == 0)
        return;
    struct dp_cache_entry *e = NULL;
    enum dp_cache_claim c = DP_CACHE_BYPASS;
    if (key_of(x, &x->plan.cands[0], xc->lead_key) == GW_OK)
        c = dp_cache_claim(x->l->cache, xc->lead_key, gw_now_us(), &xc->w, &e);
    switch (c) {
    case DP_CACHE_HIT: /* filled since serve_any looked */
        if (serve(x, e, 0) == GW_OK) {
            dp_cache_release(e);
            return;
        }
        dp_cache_release(e);
        break;
    case DP_CACHE_JOINED:
        xc->joined = 1;
        dp_metrics_cache_joined(x->plan.route->name);
        struct timeval tv = {(time_t)(x->budget_ms / 1000),
                             (suseconds_t)(x->budget_ms % 1000) * 1000};
        evtimer_add(x->timer, &tv);
        return;
    case DP_CACHE_LEADER:
        xc->leader = 1;
        break;
    case DP_CACHE_BYPASS:
        break;
    }
    say(x, "miss");
    x_start_attempt(x);
}

/* --------------------------------------------------------------- store */

/* The current attempt's answer is whole: a chat answer in x->acc (DONE
 * applied), an embeddings answer as its body in x->out. Stored under its
 * target's key, and given to the flight's waiters. */
void x_cache_store(struct dp_exchange *x)
{
    struct xcache *xc = x->cache;
    if (!xc || !xc->storing || x->cache_hit)
        return;
    xc->storing = 0;
    struct dp_cache *c = x->l->cache;
    struct dp_cache_meta m = {.created_ms = gw_wall_ms(),
                              .cost_picodollars = x->bill.cost_picodollars,
                              .has_cost = x->bill.has_cost};
    snprintf(m.currency, sizeof(m.currency), "%s", x->bill.currency ? x->bill.currency : "USD");
    unsigned char *blob = NULL;
    size_t len = 0;
    unsigned char k[DP_CACHE_KEY_BYTES];
    int64_t now = gw_now_us();
    size_t max = x->l->cache_max_entry;
    int rc = x->kind == KIND_CHAT
                 ? dp_cache_encode(&x->acc, &m, max, &blob, &len)
                 : dp_cache_encode_body(x->out.data, x->out.len, &m, max, &blob, &len);
    if (rc == GW_OK && key_of(x, &x->plan.cands[x->ci], k) == GW_OK) {
        if (xc->leader && memcmp(k, xc->lead_key, sizeof(k)) == 0) {
            xc->leader = 0;
            rc = dp_cache_fill(c, k, blob, len, now + xc->ttl_us, now);
        } else {
            rc = dp_cache_put(c, k, blob, len, now + xc->ttl_us, now);
        }
    }
    if (rc == GW_ELIMIT) /* the blob past the largest entry, or the store's bound */
        dp_metrics_cache_too_large();
    free(blob);
    if (xc->leader) { /* another target answered, or it could not be kept */
        xc->leader = 0;
        dp_cache_abandon(c, xc->lead_key);
    }
}

/* Whether the current attempt's events are to be kept in x->acc for the
 * store: a stream or a relay does not otherwise accumulate them. */
int x_cache_accumulates(const struct dp_exchange *x)
{
    const struct xcache *xc = x->cache;
    return xc && xc->storing && !x->cache_hit && (x->client_stream || x->relay);
}

/* The answer will not be kept (too_large: past the largest entry): the
 * flight's waiters need not wait for its end. */
void x_cache_give_up_store(struct dp_exchange *x, int too_large)
{
    struct xcache *xc = x->cache;
    if (!xc)
        return;
    if (too_large && xc->storing)
        dp_metrics_cache_too_large();
    xc->storing = 0;
    if (xc->leader) {
        xc->leader = 0;
        dp_cache_abandon(x->l->cache, xc->lead_key);
    }
}

const struct dp_cache_meta *x_cache_meta(const struct dp_exchange *x)
{
    return x->cache && x->cache_hit ? &x->cache->meta : NULL;
}

void x_cache_free(struct dp_exchange *x)
{
    struct xcache *xc = x->cache;
    if (!xc)
        return;
    x->cache = NULL;
    if (xc->leader)
        dp_cache_abandon(x->l->cache, xc->lead_key);
    if (xc->joined && dp_cache_unjoin(x->l->cache, &xc->w) != GW_OK) {
        xc->x = NULL; /* the wake-up is on its way: on_woken frees it */
        return;
    }
    xcache_release(xc);
}
