/*
 * dp_router: step 3 of the request path (ARCHITECTURE.md, "Route"). A
 * selector becomes a list of targets: first ordered (the route's strategy,
 * then an affinity rotation, then a session's lead class by rendezvous),
 * then filtered in that order, so every target keeps its place and the
 * attempt loop walks what survives. Every filtered target is recorded with
 * its reason, so a refusal can say what was tried and why nothing was left.
 *
 * Everything works on the stack and on the immutable snapshot; nothing is
 * kept between plans, so every replica plans a request alike.
 *
 * This file is the plan: the selector, the filters and their skips, the
 * refusal. The order (strategies and their scores, affinity, sessions)
 * is dp_router_order.c.
 */
#include "dp_router.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "canon.h"
#include "dp_breaker.h"
#include "dp_driver_catalog.h"
#include "dp_fleet.h"
#include "dp_router_int.h"
#include "dp_tokens.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"

#define MAX_SELECTOR 512
#define ELLIPSIS "\xe2\x80\xa6" /* U+2026 */

/* ------------------------------------------------------------------ names */

const char *dp_skip_name(enum dp_skip_reason r)
{
    static const char *const names[DP_SKIP_COUNT] = {
        [DP_SKIP_NOT_ALLOWED] = "not_allowed",
        [DP_SKIP_INCAPABLE] = "incapable",
        [DP_SKIP_CATALOG] = "catalog",
        [DP_SKIP_CONTEXT] = "context",
        [DP_SKIP_OTHER_MODEL] = "other_model",
        [DP_SKIP_DISABLED] = "disabled",
        [DP_SKIP_NO_CREDENTIAL] = "no_credential",
        [DP_SKIP_BREAKER_OPEN] = "breaker_open",
        [DP_SKIP_FLEET_DOWN] = "fleet_down",
        [DP_SKIP_HIGH_COST_FALLBACK] = "high_cost_fallback",
    };
    return (unsigned)r < DP_SKIP_COUNT ? names[r] : "unknown";
}

static const struct {
    int status;
    const char *code;
} no_routes[] = {
    [DP_NOROUTE_NONE] = {200, NULL},
    [DP_NOROUTE_NOT_CONFIGURED] = {404, "model_not_found"},
    [DP_NOROUTE_INVALID] = {400, "invalid_model"},
    [DP_NOROUTE_AMBIGUOUS] = {400, "ambiguous_model"},
    [DP_NOROUTE_NONE_ALLOWED] = {403, "model_not_allowed"},
    [DP_NOROUTE_NONE_CAPABLE] = {400, "no_capable_target"},
    [DP_NOROUTE_NONE_HEALTHY] = {503, "no_healthy_target"},
};

int dp_no_route_status(enum dp_no_route c)
{
    return (unsigned)c < sizeof(no_routes) / sizeof(*no_routes) ? no_routes[c].status : 500;
}

const char *dp_no_route_code(enum dp_no_route c)
{
    return (unsigned)c < sizeof(no_routes) / sizeof(*no_routes) ? no_routes[c].code : NULL;
}

/* ------------------------------------------------------------------ needs */

void dp_needs_of(const struct canon_req *r, struct dp_needs *n)
{
    memset(n, 0, sizeof(*n));
    int images = 0;
    for (size_t i = 0; i < r->nmessages; i++)
        for (size_t j = 0; j < r->messages[i].nparts; j++) {
            const struct canon_part *pt = &r->messages[i].parts[j];
            images |= pt->type == CANON_PART_IMAGE;
            for (size_t k = 0; pt->type == CANON_PART_TOOL_RESULT && k < pt->ncontent; k++)
                images |= pt->content[k].type == CANON_PART_IMAGE;
        }
    if (images)
        n->caps |= DRV_CAP_VISION;
    if (r->ntools)
        n->caps |= DRV_CAP_TOOLS;
    if (r->format == CANON_FMT_JSON_OBJECT || r->format == CANON_FMT_JSON_SCHEMA)
        n->caps |= DRV_CAP_JSON_MODE;
    if (r->reasoning_effort || r->reasoning_budget)
        n->caps |= DRV_CAP_REASONING;
    n->est_tokens = dp_tokens_request(r);
}

/* --------------------------------------------------------------- messages */

/* Cuts s (a buffer of size bytes holding a truncated string) back to a
 * UTF-8 boundary that leaves room for the ellipsis, and appends it. */
static void cut_with_ellipsis(char *s, size_t size)
{
    size_t at = strlen(s);
    if (at + sizeof(ELLIPSIS) > size)
        at = size - sizeof(ELLIPSIS);
    while (at > 0 && ((unsigned char)s[at] & 0xc0) == 0x80)
        at--;
    memcpy(s + at, ELLIPSIS, sizeof(ELLIPSIS));
}

/* Appends to a bounded text; once it does not fit, the text ends in an
 * ellipsis and later appends do nothing. */
struct text {
    char *s;
    size_t size;
    size_t len;
    int cut;
};

__attribute__((format(printf, 2, 3))) static void text_add(struct text *t, const char *fmt, ...)
{
    if (t->cut)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s + t->len, t->size - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= t->size - t->len) {
        t->cut = 1;
        cut_with_ellipsis(t->s, t->size);
        return;
    }
    t->len += (size_t)n;
}

__attribute__((format(printf, 2, 3))) static void set_detail(struct dp_skip *sk, const char *fmt,
                                                             ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sk->detail, sizeof(sk->detail), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(sk->detail))
        cut_with_ellipsis(sk->detail, sizeof(sk->detail));
}

/* "vision, tools" for a set of DRV_CAP_* bits. */
static void caps_text(unsigned caps, char *out, size_t size)
{
    struct text t = {out, size, 0, 0};
    out[0] = '\0';
    for (unsigned bit = 1; bit && bit <= caps; bit <<= 1)
        if (caps & bit) {
            const char *name = dp_snapshot_cap_name(bit);
            text_add(&t, "%s%s", t.len ? ", " : "", name ? name : "?");
        }
}

/* ----------------------------------------------------------------- filter */

/* The stages a target passes; a skip records the one it failed. */
enum stage { ST_ALLOWED, ST_CAPABLE, ST_HEALTHY, ST_PASSED };

struct planner {
    const struct dp_snapshot *s;
    const struct dp_needs *n;
    const struct dp_route_ctx *ctx;
    const struct dp_route *route;
    const char *emb_model; /* embeddings: the first eligible candidate's model */
    int reached;           /* the furthest stage any skipped target failed at */
    struct dp_plan *plan;
};

static int in_list(const char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0)
            return 1;
    return 0;
}

/* One principal's allowlists: a key's, its team's or its project's. */
struct allow {
    const char *kind; /* "key", "team", "project": for the skip's detail */
    const char *name;
    const struct dp_allowlists *l;
};

/* allow_models holds "provider/model" or a bare model id. */
static int model_allowed(const struct dp_allowlists *a, const char *provider, const char *model)
{
    size_t pl = strlen(provider);
    for (size_t i = 0; i < a->nmodels; i++) {
        const char *m = a->models[i];
        if (strcmp(m, model) == 0 ||
            (strncmp(m, provider, pl) == 0 && m[pl] == '/' && strcmp(m + pl + 1, model) == 0))
            return 1;
    }
    return 0;
}

/* Which allowlist refuses the target, if any (see dp_router.h for the
 * reading of the allowlists). */
enum refusal { ALLOWED, NOT_ROUTE, NOT_DIRECT, NOT_PROVIDER, NOT_MODEL };

static enum refusal refusal_by(const struct dp_allowlists *a, const struct dp_route *route,
                               const char *provider, const char *model)
{
    if (route && a->routes && !in_list(a->routes, a->nroutes, route->name))
        return NOT_ROUTE;
    if (!route && a->routes && !a->providers && !a->models)
        return NOT_DIRECT;
    if (a->providers && !in_list(a->providers, a->nproviders, provider))
        return NOT_PROVIDER;
    if (a->models && !model_allowed(a, provider, model))
        return NOT_MODEL;
    return ALLOWED;
}

/* The key's lists, then its team's, then its project's: a target must pass
 * all three (the intersection). *who gets the principal that refused. */
static enum refusal refusal_of(const struct dp_snapshot *s, const struct dp_key *k,
                               const struct dp_route *route, const char *provider,
                               const char *model, struct allow *who)
{
    if (!k)
        return ALLOWED;
    const struct dp_team *team = k->team ? dp_snapshot_team(s, k->team) : NULL;
    const struct dp_project *project = k->project ? dp_snapshot_project(s, k->project) : NULL;
    const struct allow principals[] = {
        {"key", k->id, &k->allow},
        {"team", team ? team->name : NULL, team ? &team->allow : NULL},
        {"project", project ? project->name : NULL, project ? &project->allow : NULL},
    };
    for (size_t i = 0; i < sizeof(principals) / sizeof(principals[0]); i++) {
        if (!principals[i].l)
            continue;
        *who = principals[i];
        enum refusal r = refusal_by(principals[i].l, route, provider, model);
        if (r != ALLOWED)
            return r;
    }
    return ALLOWED;
}

int dp_router_allows(const struct dp_snapshot *s, const struct dp_key *k,
                     const struct dp_route *route, const struct dp_provider *provider,
                     const char *model)
{
    struct allow who;
    return refusal_of(s, k, route, provider->name, model, &who) == ALLOWED;
}

static int check_allowed(const struct planner *pl, const struct slot *sl, struct dp_skip *sk)
{
    struct allow a;
    switch (refusal_of(pl->s, pl->ctx->key, pl->route, sl->provider->name, sl->model, &a)) {
    case ALLOWED:
        return 1;
    case NOT_ROUTE:
        set_detail(sk, "%s '%s' may not use route '%s'", a.kind, a.name, pl->route->name);
        return 0;
    case NOT_DIRECT:
        set_detail(sk, "%s '%s' is limited to its routes; direct provider/model use is not allowed",
                   a.kind, a.name);
        return 0;
    case NOT_PROVIDER:
        set_detail(sk, "%s '%s' may not use provider '%s'", a.kind, a.name, sl->provider->name);
        return 0;
    case NOT_MODEL:
        set_detail(sk, "%s '%s' may not use model '%s'", a.kind, a.name, sl->model);
        return 0;
    }
    return 0;
}

static int check_capable(struct planner *pl, const struct slot *sl, struct dp_skip *sk)
{
    const struct dp_needs *n = pl->n;
    const struct dp_provider *p = sl->provider;
    unsigned kind = n->media ? n->media : n->embeddings ? DRV_CAP_EMBEDDINGS : DRV_CAP_CHAT;
    unsigned need = kind | n->caps;
    char names[96];
    /* A route serves one kind of request; chat routes (capability chat or
     * vision) serve chat only. */
    const char *kname = dp_snapshot_cap_name(kind);
    if (pl->route) {
        const char *rc = pl->route->capability;
        int chat_route = strcmp(rc, "chat") == 0 || strcmp(rc, "vision") == 0;
        if (kind == DRV_CAP_CHAT ? !chat_route : strcmp(rc, kname) != 0) {
            sk->reason = DP_SKIP_INCAPABLE;
            sk->missing = kind;
            set_detail(sk, "route '%s' serves %s, not %s", pl->route->name, rc, kname);
            return 0;
        }
    }
    if (need & ~p->caps) {
        sk->reason = DP_SKIP_INCAPABLE;
        sk->missing = need & ~p->caps;
        caps_text(sk->missing, names, sizeof(names));
        set_detail(sk, "provider '%s' lacks %s", p->name, names);
        return 0;
    }
    const struct dp_catalog_entry *c = dp_snapshot_catalog(pl->s, p->name, sl->model);
    if (c && c->has_caps && (need & ~c->caps)) {
        sk->reason = DP_SKIP_CATALOG;
        sk->missing = need & ~c->caps;
        caps_text(sk->missing, names, sizeof(names));
        set_detail(sk, "the catalog says model '%s' lacks %s", sl->model, names);
        return 0;
    }
    if (c && c->context_window > 0 && n->est_tokens > c->context_window) {
        sk->reason = DP_SKIP_CONTEXT;
        set_detail(sk, "about %lld input tokens; the context window is %lld", n->est_tokens,
                   c->context_window);
        return 0;
    }
    /* Vectors from different models live in different spaces: one request's
     * embeddings all come from one model, whichever provider serves it. */
    if (pl->route && n->embeddings && pl->emb_model && strcmp(pl->emb_model, sl->model) != 0) {
        sk->reason = DP_SKIP_OTHER_MODEL;
        set_detail(sk, "embeddings stay on model '%s', the first eligible one", pl->emb_model);
        return 0;
    }
    return 1;
}

/* The fleet health view (dp_fleet) says down, and this replica may not
 * probe the target now: skipped, with the view's reason. */
static int fleet_down(const char *provider, const char *model, int64_t now_us, struct dp_skip *sk)
{
    char why[96];
    if (!dp_fleet_skip(provider, model, now_us, why, sizeof(why)))
        return 0;
    sk->reason = DP_SKIP_FLEET_DOWN;
    set_detail(sk, "the fleet health view says down: %s", why[0] ? why : "no reason given");
    return 1;
}

static int check_healthy(const struct planner *pl, const struct slot *sl, size_t pos,
                         struct dp_skip *sk)
{
    const struct dp_provider *p = sl->provider;
    const struct dp_route_ctx *ctx = pl->ctx;
    if (!p->enabled) {
        sk->reason = DP_SKIP_DISABLED;
        set_detail(sk, "provider '%s' is disabled", p->name);
        return 0;
    }
    if (p->credential_ref && !p->credential) {
        /* The ref's name stays out of a message clients read. */
        sk->reason = DP_SKIP_NO_CREDENTIAL;
        set_detail(sk, "provider '%s' has no credential: its credential_ref did not resolve",
                   p->name);
        return 0;
    }
    if (ctx->breakers &&
        dp_breaker_peek(ctx->breakers, p->name, sl->model, ctx->now_us) == DP_BREAKER_OPEN) {
        struct dp_target_stats st;
        dp_breaker_stats(ctx->breakers, p->name, sl->model, ctx->now_us, &st);
        sk->reason = DP_SKIP_BREAKER_OPEN;
        set_detail(sk, "circuit breaker open (%u of %u recent attempts failed)", st.failures,
                   st.samples);
        return 0;
    }
    if (fleet_down(p->name, sl->model, ctx->now_us, sk))
        return 0;
    /* A high-cost entry serves only where the operator wrote it first, and
     * only as the head of the order: never a fallback, never promoted by a
     * strategy, an affinity rotation, stickiness or a weighted draw. */
    if (sl->entry && sl->entry->high_cost && (pos > 0 || sl->written > 0)) {
        sk->reason = DP_SKIP_HIGH_COST_FALLBACK;
        if (sl->written > 0)
            set_detail(sk,
                       "high-cost entry written at position %zu (order position %zu): it serves "
                       "only as the route's first entry",
                       sl->written + 1, pos + 1);
        else
            set_detail(sk, "high-cost entry moved to position %zu: it may only be first", pos + 1);
        return 0;
    }
    return 1;
}

/* Filters one target at position pos of the order: a candidate, or a skip. */
static void filter(struct planner *pl, const struct slot *sl, size_t pos)
{
    struct dp_plan *plan = pl->plan;
    struct dp_skip *sk = &plan->skips[plan->nskips];
    memset(sk, 0, sizeof(*sk));
    sk->provider = sl->provider;
    sk->model = sl->model;
    enum stage failed = ST_PASSED;
    if (!check_allowed(pl, sl, sk)) {
        sk->reason = DP_SKIP_NOT_ALLOWED;
        failed = ST_ALLOWED;
    } else if (!check_capable(pl, sl, sk)) {
        failed = ST_CAPABLE;
    } else if (!check_healthy(pl, sl, pos, sk)) {
        failed = ST_HEALTHY;
    }
    if (failed != ST_PASSED) {
        plan->nskips++;
        if ((int)failed > pl->reached)
            pl->reached = (int)failed;
        return;
    }
    if (!pl->emb_model)
        pl->emb_model = sl->model;
    struct dp_candidate *c = &plan->cands[plan->ncands++];
    c->provider = sl->provider;
    c->model = sl->model;
    c->entry = sl->entry;
}

/* Why nothing was left, naming every skipped target. */
static void explain(const struct planner *pl, const char *selector)
{
    struct dp_plan *plan = pl->plan;
    plan->cause = pl->reached == ST_HEALTHY   ? DP_NOROUTE_NONE_HEALTHY
                  : pl->reached == ST_CAPABLE ? DP_NOROUTE_NONE_CAPABLE
                                              : DP_NOROUTE_NONE_ALLOWED;
    struct text t = {plan->message, sizeof(plan->message), 0, 0};
    text_add(&t, "no candidate for '%.100s': ", selector);
    for (size_t i = 0; i < plan->nskips; i++) {
        const struct dp_skip *sk = &plan->skips[i];
        text_add(&t, "%s%s/%s: %s (%s)", i ? "; " : "", sk->provider->name, sk->model,
                 dp_skip_name(sk->reason), sk->detail);
    }
}

__attribute__((format(printf, 3, 4))) static void refuse(struct dp_plan *plan, enum dp_no_route c,
                                                         const char *fmt, ...)
{
    plan->cause = c;
    plan->ncands = 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(plan->message, sizeof(plan->message), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(plan->message))
        cut_with_ellipsis(plan->message, sizeof(plan->message));
}

/* ---------------------------------------------------------------- plan */

/* A selector is client text: bounded, printable ASCII (spaces allowed in
 * route names), and an exact form has both parts. */
static int valid_selector(const char *sel, struct dp_plan *plan)
{
    if (!sel || !*sel) {
        refuse(plan, DP_NOROUTE_INVALID,
               "the model must name a route, an alias, a role, provider/model or a model id");
        return 0;
    }
    size_t len = 0;
    for (const unsigned char *c = (const unsigned char *)sel; *c; c++, len++)
        if (*c < 0x20 || *c > 0x7e) {
            refuse(plan, DP_NOROUTE_INVALID,
                   "the model selector contains control or non-ASCII characters");
            return 0;
        }
    if (len > MAX_SELECTOR) {
        refuse(plan, DP_NOROUTE_INVALID,
               "the model selector '%.100s" ELLIPSIS "' is longer than %d bytes", sel,
               MAX_SELECTOR);
        return 0;
    }
    const char *slash = strchr(sel, '/');
    if (!slash)
        return 1;
    if (slash == sel || !slash[1]) {
        refuse(plan, DP_NOROUTE_INVALID,
               "the model '%.100s' must be provider/model with both parts non-empty", sel);
        return 0;
    }
    /* The model part is sent upstream and logged: it must look like a
     * model id, never like a prompt. */
    size_t ml = strlen(slash + 1);
    int visible = ml <= DP_MAX_MODEL_ID && !strchr(slash + 1, ' ');
    if (!visible) {
        refuse(plan, DP_NOROUTE_INVALID,
               "the model id in '%.100s' must be 1 to %d visible ASCII characters", sel,
               DP_MAX_MODEL_ID);
        return 0;
    }
    return 1;
}

static void plan_route(struct planner *pl)
{
    const struct dp_route *r = pl->route;
    struct slot v[DP_MAX_CANDIDATES];
    size_t nv = r->nentries < DP_MAX_CANDIDATES ? r->nentries : DP_MAX_CANDIDATES;
    for (size_t i = 0; i < nv; i++)
        v[i] = (struct slot){r->entries[i].provider, r->entries[i].model, &r->entries[i], i, 0, 0};
    pl->plan->scored_by = dpr_order(pl->s, r, pl->n, pl->ctx, v, nv);
    for (size_t i = 0; i < nv; i++) {
        pl->plan->order[i] = (uint8_t)v[i].written;
        filter(pl, &v[i], i);
    }
    pl->plan->norder = nv;
}

/* A bare model id: every distinct target the routes carry it on. Exactly
 * one eligible is an answer; several is a question back to the client. */
static void plan_bare(struct planner *pl, const char *model)
{
    const struct dp_snapshot *s = pl->s;
    struct dp_plan *plan = pl->plan;
    struct slot v[DP_MAX_CANDIDATES];
    size_t nv = 0;
    struct gw_pmap_iter it;
    const struct dp_route *r;
    for (dp_snapshot_iter(&s->routes, &it); (r = dp_snapshot_next(&it)) != NULL;)
        for (size_t j = 0; j < r->nentries; j++) {
            const struct dp_route_entry *e = &r->entries[j];
            if (strcmp(e->model, model) != 0)
                continue;
            size_t k = 0;
            while (k < nv && v[k].provider != e->provider)
                k++;
            if (k < nv)
                continue;
            if (nv == DP_MAX_CANDIDATES) {
                refuse(plan, DP_NOROUTE_AMBIGUOUS,
                       "the model '%.100s' is served by more than %d targets: name one as "
                       "provider/model",
                       model, DP_MAX_CANDIDATES);
                return;
            }
            v[nv] = (struct slot){e->provider, e->model, NULL, nv, 0, 0};
            nv++;
        }
    if (nv == 0) {
        refuse(plan, DP_NOROUTE_NOT_CONFIGURED,
               "the model '%.100s' does not exist: use a route, an alias, a role, provider/model "
               "or a model id a route carries",
               model);
        return;
    }
    plan->via = "model";
    for (size_t i = 0; i < nv; i++)
        filter(pl, &v[i], 0);
    if (plan->ncands > 1) {
        struct text t = {plan->message, sizeof(plan->message), 0, 0};
        text_add(&t, "the model '%.100s' is served by several targets (", model);
        for (size_t i = 0; i < plan->ncands; i++)
            text_add(&t, "%s%s/%s", i ? ", " : "", plan->cands[i].provider->name,
                     plan->cands[i].model);
        text_add(&t, "): name one as provider/model");
        plan->cause = DP_NOROUTE_AMBIGUOUS;
        plan->ncands = 0;
    }
}

int dp_router_plan(const struct dp_snapshot *s, const char *selector, const struct dp_needs *n,
                   const struct dp_route_ctx *ctx, struct dp_plan *plan)
{
    static const struct dp_needs chat;
    static const struct dp_route_ctx none;
    memset(plan, 0, sizeof(*plan));
    struct planner pl = {s, n ? n : &chat, ctx ? ctx : &none, NULL, NULL, -1, plan};
    if (!valid_selector(selector, plan))
        return GW_OK;
    pl.route = dp_snapshot_route(s, selector, &plan->via);
    if (pl.route) {
        plan->route = pl.route;
        plan_route(&pl);
    } else if (strchr(selector, '/')) {
        const char *slash = strchr(selector, '/');
        const struct dp_provider *p = dp_snapshot_provider(s, selector, (size_t)(slash - selector));
        if (p) {
            plan->via = "exact";
            struct slot sl = {p, slash + 1, NULL, 0, 0, 0};
            filter(&pl, &sl, 0);
        } else {
            /* Not a provider: perhaps a model id with a '/' in it
             * ("meta-llama/Llama-3.3-70B") that a route carries. */
            plan_bare(&pl, selector);
        }
    } else {
        plan_bare(&pl, selector);
    }
    if (plan->ncands == 0 && plan->cause == DP_NOROUTE_NONE)
        explain(&pl, selector);
    return GW_OK;
}

int dp_plan_skips_json(const struct dp_plan *plan, struct gw_buf *out)
{
    int rc = gw_buf_appends(out, "[");
    for (size_t i = 0; i < plan->nskips && rc == GW_OK; i++) {
        const struct dp_skip *sk = &plan->skips[i];
        rc = gw_buf_appends(out, i ? ",{\"provider\":" : "{\"provider\":");
        if (rc == GW_OK)
            rc = gw_json_escape(out, sk->provider->name, strlen(sk->provider->name));
        if (rc == GW_OK)
            rc = gw_buf_appends(out, ",\"model\":");
        if (rc == GW_OK)
            rc = gw_json_escape(out, sk->model, strlen(sk->model));
        if (rc == GW_OK)
            rc = gw_buf_printf(out, ",\"reason\":\"%s\",\"detail\":", dp_skip_name(sk->reason));
        if (rc == GW_OK)
            rc = gw_json_escape(out, sk->detail, strlen(sk->detail));
        if (rc == GW_OK)
            rc = gw_buf_appends(out, "}");
    }
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "]");
    return rc;
}
