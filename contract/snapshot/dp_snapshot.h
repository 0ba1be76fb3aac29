/*
 * dp_snapshot: the immutable configuration a data plane serves from:
 * providers, routes with their ordered entries, and API keys (hashes only).
 *
 * The JSON shape is the one the control plane pushes over its Watch
 * stream (docs/dataplane.md, "Control plane") or loads from a file. A
 * snapshot never changes once built. The current one is swapped atomically
 * (dp_snapshot_publish); every request takes a reference at its start
 * (dp_snapshot_acquire) and serves to its end from that one, so a reload in
 * the middle of a stream never mixes two configurations.
 *
 * Credentials: a provider holds a credential_ref. In file mode "env:NAME"
 * resolves from the environment at load; the plaintext lives only in this
 * in-memory snapshot (ARCHITECTURE invariant 8), never in the file, and a
 * file with an inline "credential" is refused. A document pushed by the
 * control plane (DP_SNAPSHOT_PUSHED) carries each resolved credential
 * inline instead, and its refs are names only: never read from this
 * process's environment.
 */
#ifndef DP_SNAPSHOT_H
#define DP_SNAPSHOT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "dp_cost.h"
#include "gw_pmap.h"
#include "gw_pool.h"

struct dps_item;

struct dp_driver_info;

struct dp_provider {
    const char *name;
    const char *driver;               /* a name from the driver catalog (dp_driver_catalog.h) */
    const struct dp_driver_info *drv; /* its entry (the data plane's driver: dp_driver_of) */
    json_t *options;                  /* driver options object (never NULL; owned by the pool) */
    unsigned caps;                    /* DRV_CAP_* this provider serves: the driver's, narrowed by
                                         options.capabilities (a text-only model, say) */
    const char *base_url;             /* no trailing slash */
    const char *credential_ref;       /* may be NULL */
    const char *credential;           /* resolved, memory only; NULL if none */
    const char **headers;             /* "Name: value" lines, nheaders of them */
    size_t nheaders;
    int enabled;
    long first_byte_timeout_ms;
    long idle_timeout_ms;
};

struct dp_route_entry {
    const struct dp_provider *provider;
    const char *model;
    unsigned weight; /* weighted strategy: share of primaries (default 1; 0: fallback only) */
    int high_cost;   /* may be a primary, never a fallback */
    int tier;        /* auto strategy: lower tiers first (0..9, default 0) */
};

enum dp_strategy {
    DP_STRATEGY_ORDERED,  /* as written */
    DP_STRATEGY_PRICE,    /* cheapest declared price first, success rate weighing in */
    DP_STRATEGY_LATENCY,  /* fastest observed time to first byte first, likewise */
    DP_STRATEGY_AUTO,     /* by tier, then price and latency together */
    DP_STRATEGY_WEIGHTED, /* the primary drawn by weight, deterministic per request id */
};

/* Whom a cached answer is shared with (docs/cache.md). */
enum dp_cache_scope {
    /* The zero value, so a route without cache settings (turned on for a
     * key or team by their cache_ttl_s) never shares beyond the team. */
    DP_CACHE_SCOPE_TEAM, /* the key's team (the default; a key without one: itself) */
    DP_CACHE_SCOPE_KEY,
    DP_CACHE_SCOPE_PROJECT, /* the key's project (a key without one: itself) */
    DP_CACHE_SCOPE_GLOBAL,  /* every caller of the route */
};

/* The longest a cached answer may be kept (s): 30 days. */
#define DP_CACHE_MAX_TTL_S 2592000L

/* A route's response cache (docs/cache.md): off unless ttl_s > 0. */
struct dp_route_cache {
    long ttl_s; /* 0: off; else 1..DP_CACHE_MAX_TTL_S */
    enum dp_cache_scope scope;
    /* A request without a temperature counts as deterministic (the
     * operator says the route's models are, at their defaults). */
    int deterministic;
};

/* The prompt-injection guard (docs/guardrails.md). */
enum dp_guard_policy { DP_GUARD_OFF, DP_GUARD_LOG, DP_GUARD_BLOCK };
/* What the guard reads of a request (a set). */
#define DP_GUARD_INSPECT_LAST_USER 1u /* the latest user turn */
#define DP_GUARD_INSPECT_USER 2u      /* every user turn */
#define DP_GUARD_INSPECT_TOOL 4u      /* tool results (indirect injection) */
#define DP_GUARD_INSPECT_SYSTEM 8u    /* system prompts the client supplied */
/* The longest a classifier may take (ms). */
#define DP_GUARD_MAX_CLASSIFIER_MS 60000L

struct dp_route_guard {
    int set; /* the route has a "guard" object */
    enum dp_guard_policy policy;
    unsigned inspect;       /* DP_GUARD_INSPECT_* */
    int rules;              /* the snapshot's rules apply */
    int min_severity;       /* enum dp_guard_severity: a rule below it only logs */
    const char *classifier; /* a route's name, or NULL: no classifier */
    long classifier_timeout_ms;
    int fail_closed; /* a classifier that fails blocks (policy block), else serves */
};

/* A route's judge (docs/guardrails.md): off unless sample_rate > 0. */
#define DP_JUDGE_MAX_TEMPLATE 8192
struct dp_route_judge {
    double sample_rate; /* 0..1 */
    const char *route;
    const char *rubric; /* with {{prompt}} and {{answer}} */
    int scale_min, scale_max, pass_min;
    int keep_text;
};

struct dp_route {
    const char *name;
    const char **aliases;
    size_t naliases;
    const char *role;       /* "default", "summarize", "embedding", "vision", or NULL */
    const char *capability; /* "chat", "embeddings", "vision" */
    enum dp_strategy strategy;
    struct dp_route_entry *entries;
    size_t nentries;      /* 1..DP_MAX_CANDIDATES (dp_router.h) */
    uint64_t fingerprint; /* changes whenever the route's content does (stickiness) */
    /* The failover budget of a request that sets none (ms, 1 to
     * DP_MAX_FALLBACK_TIMEOUT_MS); 0: the gateway's default. Not part of the
     * fingerprint: it changes how long, not who. */
    long fallback_timeout_ms;
    /* How long one attempt may run, its answer included, however steadily
     * the provider sends (a provider that pings forever holds nothing
     * longer); ms, 1 to DP_MAX_DURATION_MS; 0: DP_DEFAULT_DURATION_MS. */
    long max_duration_ms;
    struct dp_route_cache cache;
    struct dp_route_guard guard;
    struct dp_route_judge judge;
    /* Changes with any edit of the route, cache settings and timeouts
     * included (FNV-1a 64 of its canonical JSON): part of every cache key,
     * so an edited route never serves an answer cached before the edit. */
    uint64_t content_fp;
};

/* The longest failover budget a request or a route may set (ms). */
#define DP_MAX_FALLBACK_TIMEOUT_MS 600000L
/* An attempt's longest run: a route's bound, and the default without one. */
#define DP_MAX_DURATION_MS 86400000L
#define DP_DEFAULT_DURATION_MS 3600000L

/* What the model catalog declares about a target. */
struct dp_catalog_entry {
    const char *provider; /* NULL: any provider serving this model id */
    const char *model;
    long long context_window; /* max input tokens; 0 unknown */
    unsigned caps;            /* DRV_CAP_*; meaningful when has_caps */
    int has_caps;
    struct dp_price price;       /* every class; -1 unknown (dp_cost.h) */
    long long max_output_tokens; /* the most one answer may hold; 0 unknown */
};

/* One principal's allowlists (a key's, a team's or a project's); a NULL
 * list means any, an empty one nothing. A target must pass the lists of the
 * key, of its team and of its project (dp_router.h). */
struct dp_allowlists {
    const char **routes;
    size_t nroutes;
    const char **providers;
    size_t nproviders;
    const char **models; /* "provider/model" or a bare model id */
    size_t nmodels;
};

/* A team: the allowlists every key of the team is intersected with, and
 * whether its keys need a budget. */
struct dp_team {
    const char *name;
    struct dp_allowlists allow;
    int require_budget; /* a key with no cost limit applying is refused */
    /* The response cache for the team's keys, over the route's setting
     * when has_cache_ttl: 0 off; > 0 on, with this TTL (s), on any route
     * (the route's scope and deterministic mark still apply). */
    int has_cache_ttl;
    long cache_ttl_s;
    /* The guard's policy for the team's keys, over the route's. */
    int has_guard_policy;
    enum dp_guard_policy guard_policy;
};

/* A project (of a team): the allowlists every key of the project is
 * intersected with. */
struct dp_project {
    const char *name;
    const char *team; /* or NULL (a file snapshot may leave it out) */
    struct dp_allowlists allow;
};

/* A budget or rate limit (docs/budgets.md): amount of metric per UTC
 * period, for one key, team or project, held fleet-wide through leases. */
enum dp_limit_scope { DP_LIMIT_KEY, DP_LIMIT_TEAM, DP_LIMIT_PROJECT };
enum dp_limit_metric { DP_LIMIT_COST, DP_LIMIT_REQUESTS, DP_LIMIT_TOKENS };
enum dp_limit_period { DP_LIMIT_MINUTE, DP_LIMIT_DAY, DP_LIMIT_MONTH };

struct dp_limit {
    const char *id; /* at most 63 bytes (it travels in a dp_charge) */
    enum dp_limit_scope scope_kind;
    const char *scope; /* the key id, team or project name */
    enum dp_limit_metric metric;
    enum dp_limit_period period;
    long long amount;   /* picodollars, requests or tokens; > 0 */
    int worst_case;     /* reserve the worst case (zero overshoot), not an estimate */
    int fail_closed;    /* refuse while no allowance can be had (control plane away) */
    int unpriced_allow; /* cost: serve targets it cannot price ("unpriced": "allow");
                           default "refuse": they leave the plan */
    const char *currency;
};

struct dp_key {
    const char *id;
    char hash[65];         /* sha256 hex of the plaintext */
    const char *status;    /* "active", "disabled", ... */
    int64_t expires_at_ms; /* Unix ms after which it is refused; 0: never */
    const char *team;      /* or NULL; its entry: dp_snapshot_team */
    const char *project;   /* or NULL; its entry: dp_snapshot_project */
    struct dp_allowlists allow;
    /* As dp_team's, and they win over the team's. */
    int has_cache_ttl;
    long cache_ttl_s;
    int has_guard_policy;
    enum dp_guard_policy guard_policy;
};

/* The roles a route may take (dp_route.role), in this order. */
#define DP_NROLES 4

/* The collections are persistent maps (gw_pmap.h) of individually counted
 * items (dp_snapshot_int.h): a snapshot made by dp_snapshot_apply shares
 * every item and map node the change does not touch with the one it came
 * from. Read them through the lookups and iterators below, never directly. */
struct dp_guard_rules;
struct dp_snapshot {
    long long version;
    const char *source; /* "file", "control_plane" or "cache" (static strings) */
    struct gw_pmap providers, routes, keys, teams, projects,
        limits;                  /* by name (keys, limits: id) */
    struct gw_pmap selectors;    /* every route name and alias -> its route */
    struct gw_pmap key_hashes;   /* keys by hash (the first 64 bits of the SHA-256) */
    struct gw_pmap limit_scopes; /* the limits of each key, team and project */
    size_t nproviders, nroutes, nkeys, nteams, nprojects, nlimits;
    const struct dp_route *roles[DP_NROLES]; /* the route holding each role, or NULL */
    /* The catalog: one array, replaced whole. */
    const struct dp_catalog_entry *catalog;
    size_t ncatalog;
    struct dps_item *catalog_item;
    /* Which optional arrays the document had (DPS_HAS_*): a key's team is
     * checked against the teams only when the document lists teams. */
    unsigned present;
    /* "auth": "none" in the document: every request is served without a
     * key (the operator opened the gateway). Otherwise, the default, every
     * /v1/ request needs an active key, and none are served while the
     * snapshot has no key at all: closed by default. */
    int auth_open;
    /* The prompt-injection rules ("guard_rules", replaced whole), or NULL:
     * the document has none, and the built-in defaults apply
     * (dp_snapshot_guard_rules). */
    const struct dp_guard_rules *guard_rules;
    struct dps_item *guard_rules_item;
    int refs; /* atomic */
};

/* The guard's rules in force: the document's, else the defaults. */
const struct dp_guard_rules *dp_snapshot_guard_rules(const struct dp_snapshot *s);

/*
 * Builds a snapshot from JSON. On failure returns NULL and writes a message
 * naming the offending field (e.g. "routes[0].entries[1].provider: no
 * provider named 'x'") into err. The result has one reference.
 */
struct dp_snapshot *dp_snapshot_build(const json_t *root, char *err, size_t errlen);

/* Where a document comes from decides what it may hold. */
enum {
    DP_SNAPSHOT_PUSHED = 1, /* pushed (or cached): providers[i].credential is accepted */
};
/* dp_snapshot_build with flags (DP_SNAPSHOT_*); dp_snapshot_build is
 * flags 0, the file rules. */
struct dp_snapshot *dp_snapshot_build_ex(const json_t *root, unsigned flags, char *err,
                                         size_t errlen);
/*
 * Applies a delta document (docs/dataplane.md, "Control plane", Deltas) to
 * base, which it
 * does not change: a new snapshot with one reference, equal to building
 * base's document with the delta applied, sharing every resource the delta
 * does not name. Costs the size of the change, not of the configuration
 * (a provider's change or removal also re-checks the routes and catalog that
 * name it; a team's or project's, the keys). NULL with an error naming the
 * field ("keys['k1'].team: no team named 'x' in teams") when refused,
 * including a base_version that is not base's version.
 */
struct dp_snapshot *dp_snapshot_apply(const struct dp_snapshot *base, const json_t *delta,
                                      unsigned flags, char *err, size_t errlen);

/* s as a whole document (the shape dp_snapshot_build_ex takes, each
 * resource as it was given), serialized: malloc'd, NUL-terminated, length
 * in *len; NULL without memory. Holds credentials when s does: wipe it. */
char *dp_snapshot_render(const struct dp_snapshot *s, size_t *len);

/* o serialized into a buffer of exactly its size (malloc'd, NUL-terminated,
 * length in *len; NULL on failure). Unlike json_dumps, which grows its
 * buffer by copies and frees them unwiped, it leaves no piece of a
 * credential behind in freed memory. */
char *dp_snapshot_dump(const json_t *o, size_t flags, size_t *len);

/* Overwrites in place (explicit_bzero) the secrets a whole document or a
 * delta holds, its providers' "credential" strings and header values,
 * before jansson frees them. NULL is a no-op. */
void dp_snapshot_wipe_json(json_t *doc);

/* Reads and builds a snapshot file. */
struct dp_snapshot *dp_snapshot_load(const char *path, char *err, size_t errlen);

void dp_snapshot_ref(struct dp_snapshot *s);
void dp_snapshot_unref(struct dp_snapshot *s);

/* Process-wide current snapshot. publish takes over the caller's reference
 * and drops the previous one's; acquire returns a new reference (or NULL
 * before the first publish). Thread-safe. */
void dp_snapshot_publish(struct dp_snapshot *s);
struct dp_snapshot *dp_snapshot_acquire(void);
/* When the current snapshot was published (gw_wall_ms), 0 before. */
int64_t dp_snapshot_published_ms(void);

/* The longest model id an exact provider/model selector may carry. */
#define DP_MAX_MODEL_ID 256

/* The route a selector names: by name or alias, else by role; NULL when
 * none. via (may be NULL) gets "route", "alias" or "role". */
const struct dp_route *dp_snapshot_route(const struct dp_snapshot *s, const char *selector,
                                         const char **via);

/* The catalog entry for provider/model: the provider's own, else one for
 * any provider; NULL when the catalog says nothing. */
const struct dp_catalog_entry *dp_snapshot_catalog(const struct dp_snapshot *s,
                                                   const char *provider, const char *model);

/* The snapshot format's name of one DRV_CAP_* bit ("vision"), or NULL. */
const char *dp_snapshot_cap_name(unsigned bit);
/* A catalog entry's image_prices (docs/media.md): at most this many, each
 * keyed by a size ("1024x1024": 1 to 5 digits, x, 1 to 5 digits; or
 * "auto") or a quality of 1 to 16 lowercase letters, '/' and a size
 * ("hd/1024x1024"); nonzero when k is such a key. The control plane checks
 * with the same function. */
#define DP_MAX_IMAGE_PRICES 64
int dp_snapshot_image_key_ok(const char *k);

/* The provider named by the first len bytes of name, or NULL. */
const struct dp_provider *dp_snapshot_provider(const struct dp_snapshot *s, const char *name,
                                               size_t len);
/* The limit with this id, or NULL. */
const struct dp_limit *dp_snapshot_limit(const struct dp_snapshot *s, const char *id);
/* The limits whose scope is (kind, scope): their count, the array in *out
 * (valid while s is). */
size_t dp_snapshot_limits_of(const struct dp_snapshot *s, enum dp_limit_scope kind,
                             const char *scope, const struct dp_limit *const **out);

/* Iteration over one collection, in no particular order:
 *     struct gw_pmap_iter it;
 *     for (dp_snapshot_iter(&s->routes, &it); (r = dp_snapshot_next(&it));)
 * gives each route (likewise providers, keys, teams, projects, limits). */
void dp_snapshot_iter(const struct gw_pmap *collection, struct gw_pmap_iter *it);
const void *dp_snapshot_next(struct gw_pmap_iter *it);

/* The team named name, or NULL. */
const struct dp_team *dp_snapshot_team(const struct dp_snapshot *s, const char *name);
/* The project named name, or NULL. */
const struct dp_project *dp_snapshot_project(const struct dp_snapshot *s, const char *name);

/* Names of the limit enums as the snapshot (and the admin API) spell them. */
const char *dp_limit_scope_name(enum dp_limit_scope k);
const char *dp_limit_metric_name(enum dp_limit_metric m);
const char *dp_limit_period_name(enum dp_limit_period p);

/* The key with this id, or NULL. */
const struct dp_key *dp_snapshot_key(const struct dp_snapshot *s, const char *id);
/* A strategy's name as the snapshot spells it ("ordered", ...). */
const char *dp_strategy_name(enum dp_strategy st);

/* The key whose hash is sha256(plaintext), or NULL. */
const struct dp_key *dp_snapshot_find_key(const struct dp_snapshot *s, const char *plaintext,
                                          size_t len);

#endif
