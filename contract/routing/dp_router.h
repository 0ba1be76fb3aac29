/*
 * dp_router: turns a request's model selector into an ordered list of
 * candidate targets, and records every target it skipped and why.
 *
 * Selectors, in this order:
 *   - a route name or alias ("fast", "smart");
 *   - a role ("default", "summarize", "embedding", "vision"): the route that
 *     declares it (at most one per role);
 *   - "provider/model": one target (retries, no failover);
 *   - a bare model id: resolves when exactly one eligible target in the
 *     snapshot's routes carries it; several is an error, never a guess.
 *
 * Order: the route's strategy (ordered, price, latency, auto, weighted),
 * then an affinity key rotates the start, then a session orders the lead
 * class by rendezvous hash. Filters, per target and in this order (the first that fails
 * is the skip reason): allowed for the key; capable (driver and catalog
 * capabilities, context length, embeddings keep one model); enabled and
 * healthy (provider enabled, credential resolved, breaker not open, fleet
 * not down, no high-cost entry after the head of the order).
 *
 * Selector details. A selector is at most 512 bytes of printable ASCII
 * (else DP_NOROUTE_INVALID). "provider/model" splits at the first '/', so
 * the model may hold more '/'; its model part is 1..DP_MAX_MODEL_ID bytes
 * without spaces. When the part before the first '/' is no provider, the
 * whole selector is tried as a bare model id ("meta-llama/Llama-3.3-70B").
 *
 * Allowlists (a key's, its team's and its project's: a target must pass
 * all three, so the lists intersect; NULL lists allow anything, an empty
 * list nothing):
 *   - allow_routes restricts route selectors (name, alias or role) to the
 *     routes it names (by route name). A key with allow_routes but neither
 *     allow_providers nor allow_models may not use exact or bare-model
 *     selectors at all: they would bypass its routes. With either list set,
 *     those lists decide for exact and bare selectors.
 *   - allow_providers must hold the target's provider name;
 *   - allow_models must hold "provider/model" or the bare model id.
 * All that apply must pass, for route entries as for exact targets, and
 * for the key, its team and its project each. When nothing survives, the
 * plan fails closed (DP_NOROUTE_NONE_ALLOWED), and each skip names the key,
 * team or project whose list refused it.
 *
 * Strategies (ties always keep the written order):
 *   - ordered: as written.
 *   - price: ascending score = price * 1000 / max(success_permil, 50), price
 *     being the catalog's input_price + output_price (input_price alone for
 *     embeddings); an unknown price sorts last.
 *   - latency: ascending ttfb_ewma_us * 1000 / max(success_permil, 50); an
 *     unobserved target takes the smallest observed ttfb (so it is tried),
 *     and with no observation at all the written order stands.
 *   - auto: by tier, then by price_rank * latency_rank, where a rank is
 *     1 + the number of the route's entries with a strictly better score
 *     (equal scores share a rank; an unknown price ranks after all known).
 *   - weighted: the primary is drawn by weight from a hash of the request
 *     id (of the affinity key when one is given); the rest follow as
 *     written. With breakers NULL every success rate counts as 1000.
 * Then, except for weighted routes, an affinity key rotates the chain to
 * start at hash(affinity) mod n. Then a session id orders the route's lead
 * class (the members the strategy would as soon make primary: ordered, the
 * head; price and auto, those tied with the head; latency, those within 25%
 * of the head's score; weighted, every member, by weight) by descending
 * rendezvous weight -w / ln(u), u a hash of (session, route fingerprint,
 * provider, model) in (0, 1): the same member on every replica, the next by
 * weight when it is skipped, and a new draw when the route is edited.
 * Positions for the high-cost rule count every entry in this final order,
 * skipped or not.
 *
 * Nothing here blocks, allocates on the heap, or keeps state between plans.
 */
#ifndef DP_ROUTER_H
#define DP_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "dp_snapshot.h"

struct canon_req;
struct dp_breakers;

/* A route has at most this many entries (dp_snapshot enforces it). */
#define DP_MAX_CANDIDATES 32

enum dp_skip_reason {
    DP_SKIP_NOT_ALLOWED,        /* the key's allowlists exclude it */
    DP_SKIP_INCAPABLE,          /* the driver (or provider options) lacks a capability */
    DP_SKIP_CATALOG,            /* the catalog says the model lacks a capability */
    DP_SKIP_CONTEXT,            /* the estimated input exceeds the catalog context window */
    DP_SKIP_OTHER_MODEL,        /* embeddings: not the primary's model */
    DP_SKIP_DISABLED,           /* the provider is disabled */
    DP_SKIP_NO_CREDENTIAL,      /* its credential_ref did not resolve */
    DP_SKIP_BREAKER_OPEN,       /* this process's breaker */
    DP_SKIP_FLEET_DOWN,         /* the fleet health view (control plane) */
    DP_SKIP_HIGH_COST_FALLBACK, /* high_cost entry not at the head of the order */
    DP_SKIP_COUNT
};
const char *dp_skip_name(enum dp_skip_reason r); /* "not_allowed", "breaker_open", ... */

/* Why nothing is left (ncands == 0). */
enum dp_no_route {
    DP_NOROUTE_NONE = 0,       /* there are candidates */
    DP_NOROUTE_NOT_CONFIGURED, /* 404 model_not_found: nothing by that name */
    DP_NOROUTE_INVALID,        /* 400 invalid_model: not a plausible selector */
    DP_NOROUTE_AMBIGUOUS,      /* 400 ambiguous_model: a bare id several targets carry */
    DP_NOROUTE_NONE_ALLOWED,   /* 403 model_not_allowed */
    DP_NOROUTE_NONE_CAPABLE,   /* 400 no_capable_target */
    DP_NOROUTE_NONE_HEALTHY,   /* 503 no_healthy_target: none enabled or healthy */
};
/* The HTTP status and error code of a cause (DP_NOROUTE_NONE: 200, NULL). */
int dp_no_route_status(enum dp_no_route c);
const char *dp_no_route_code(enum dp_no_route c);

/* What a request needs from a target. */
struct dp_needs {
    int embeddings;       /* 0: chat */
    unsigned caps;        /* DRV_CAP_* besides chat/embeddings: tools, vision, ... */
    long long est_tokens; /* estimated input tokens (0: unknown) */
    unsigned media;       /* a media request: DRV_CAP_TRANSCRIPTION, _SPEECH or _IMAGE; 0: none */
};
/* Derives the needs of a chat request. */
void dp_needs_of(const struct canon_req *r, struct dp_needs *n);

struct dp_route_ctx {
    const struct dp_key *key;     /* NULL: no key (open gateway), everything allowed */
    const char *request_id;       /* weighted strategy: the split is a hash of it */
    const char *session;          /* X-LLMGW-Session-Id, or NULL */
    const char *affinity;         /* X-LLMGW-Affinity-Key, or NULL */
    struct dp_breakers *breakers; /* NULL: no breaker filtering or scoring */
    int64_t now_us;
};

struct dp_candidate {
    const struct dp_provider *provider;
    const char *model;                  /* points into the snapshot, or the selector */
    const struct dp_route_entry *entry; /* NULL for an exact or bare selector */
};

struct dp_skip {
    const struct dp_provider *provider;
    const char *model;
    enum dp_skip_reason reason;
    unsigned missing; /* INCAPABLE/CATALOG: the DRV_CAP_* bits lacking */
    char detail[128]; /* a sentence for people */
};

struct dp_plan {
    const struct dp_route *route; /* NULL for an exact or bare selector */
    const char *via;              /* "route", "alias", "role", "exact", "model" */
    struct dp_candidate cands[DP_MAX_CANDIDATES];
    size_t ncands;
    struct dp_skip skips[DP_MAX_CANDIDATES];
    size_t nskips;
    enum dp_no_route cause;
    /* A route's order before the filters, skipped entries included: the
     * written index of each position (route->entries[order[i]]). */
    uint8_t order[DP_MAX_CANDIDATES];
    size_t norder;
    const char *scored_by; /* "fleet", "local", "mixed"; NULL: not a scored strategy */
    char message[512];     /* when cause != NONE: names every skipped candidate */
};

/*
 * Plans a request. Returns GW_OK (plan->ncands > 0, or 0 with plan->cause
 * and plan->message set). The plan points into s and into selector, which
 * must outlive it. n NULL: a plain chat request; ctx NULL: no key, no
 * breakers, no session or affinity. Messages quote at most 100 bytes of the
 * selector and never a selector with control or non-ASCII bytes.
 */
int dp_router_plan(const struct dp_snapshot *s, const char *selector, const struct dp_needs *n,
                   const struct dp_route_ctx *ctx, struct dp_plan *plan);

/* Whether key k (NULL: any) may use provider/model through route (NULL:
 * by an exact or bare selector): the key's and its team's allowlists
 * alone, nothing else. */
int dp_router_allows(const struct dp_snapshot *s, const struct dp_key *k,
                     const struct dp_route *route, const struct dp_provider *provider,
                     const char *model);

/* The skips as a JSON array text ([{"provider","model","reason","detail"}]),
 * appended to out. 0, or the gw_buf error (out may then hold part of it). */
struct gw_buf;
int dp_plan_skips_json(const struct dp_plan *plan, struct gw_buf *out);

#endif
