#include "dp_exchange.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "canon.h"
#include "dp_breaker.h"
#include "dp_cost.h"
#include "dp_driver.h"
#include "dp_facade.h"
#include "dp_fleet.h"
#include "dp_ledger.h"
#include "dp_limits.h"
#include "dp_metrics.h"
#include "dp_router.h"
#include "dp_snapshot.h"
#include "dp_worker.h"
#include "fc_util.h"
#include "gw_buf.h"
#include "gw_curlev.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_money.h"
#include "gw_time.h"

/* Pause the upstream when this much is queued for a slow client; resume
 * when 128 KiB of it has drained, so a client that keeps reading, however
 * slowly, keeps the upstream (and the idle watchdog) going: only one that
 * stops reading for an idle timeout is cut as stalled. */
#define OUT_HIGH_WATER (1u << 20)
#define OUT_LOW_WATER (896u << 10)
/* An error answer's body is kept up to this much, to classify it. */
#define MAX_ERROR_BODY (64u << 10)
/* The failover budget: the whole pre-content phase, every attempt and
 * backoff included. A request may set its own (header), within bounds. */
#define DEFAULT_BUDGET_MS 120000L
#define MAX_BUDGET_MS 600000L
/* Retries on one target: one while other candidates remain, up to three
 * on the last. A Retry-After beyond this is not waited for. */
#define RETRIES_MIDDLE 1
#define RETRIES_LAST 3
#define MAX_RETRY_AFTER_US (30LL * 1000000)
#define MAX_BACKOFF_US (10LL * 1000000)
/* Every attempt of a request is remembered for its error answer. */
#define MAX_HIST (DP_MAX_CANDIDATES * (RETRIES_MIDDLE + 1) + RETRIES_LAST)
/* Header values the router keys on (session, affinity) are bounded. */
#define MAX_KEY_HEADER 128

enum kind { KIND_CHAT, KIND_EMBED };

/* Where a request is: an attempt in flight, or waiting (backoff, or the
 * next candidate's turn on the loop). */
enum xstate { X_ATTEMPT, X_WAIT };

/* How an attempt ended, for its log line and its breaker. */
enum verdict {
    V_NONE,     /* still running */
    V_OK,       /* the whole answer reached the client */
    V_FAILED,   /* failed before its first content: the loop decides */
    V_BROKE,    /* failed after its first content: an in-band error */
    V_CANCELED, /* the client left, or the gateway stopped */
};

/* What a request keeps of its plan once it has candidates: the plan's skip
 * records and message (most of its 6 KiB) serve only a no-candidate reply,
 * so they live on the heap while planning and no longer. */
struct choice {
    const struct dp_route *route;
    struct dp_candidate cands[DP_MAX_CANDIDATES];
    size_t ncands;
};

struct hist {
    const char *provider;
    const char *model;
    enum canon_failure failure;
    int status;  /* the upstream's HTTP status, or 0 */
    int refused; /* the driver refused to build it: nothing was sent */
};

struct dp_exchange {
    struct dp_worker *w;
    struct dp_exchange *prev, *next;
    enum kind kind;
    struct gw_http_req *req; /* NULL once the client side has ended */
    struct dp_snapshot *snap;
    const struct dp_key *key;
    char request_id[160];
    /* What attempt ids start with: the request id, made unique when the
     * client chose it (two clients, or one on purpose, may send the same
     * X-Request-Id, and the ledger keys rows by attempt id). */
    char attempt_base[150];
    char cost_currency[4]; /* the currency of cost_total ("" before the first priced attempt) */
    char path[64];
    char session[MAX_KEY_HEADER + 1];
    char agent[MAX_KEY_HEADER + 1];   /* X-LLMGW-Agent: ledger attribution */
    char purpose[MAX_KEY_HEADER + 1]; /* X-LLMGW-Purpose */
    char selector[DP_MAX_MODEL_ID + 1];
    const struct dp_facade *fc; /* chat */
    struct canon_req *creq;     /* chat */
    json_t *eroot;              /* embeddings: the body; ereq points into it */
    struct canon_embed_req ereq;
    int embed_base64;
    int client_stream;

    /* the loop */
    struct choice plan;
    struct dp_limits_hold *hold; /* what the request reserved of its limits (docs/budgets.md) */
    size_t ci;                   /* the current candidate */
    int tries;                   /* attempts on it so far */
    int nattempts, nretries, nfailovers;
    int64_t deadline_us; /* the failover budget's end */
    long budget_ms;
    int budget_out;
    int budget_timer;  /* the watchdog is set for the budget's end, not the provider's */
    struct hist *hist; /* MAX_HIST, allocated at the first failed attempt */
    size_t nhist;
    struct canon_err rerr;     /* the last refusal, when the last attempt was one */
    char last_msg[384];        /* the last failed attempt's message */
    char last_retry_after[32]; /* and its Retry-After */
    enum xstate state;
    struct event *timer; /* X_ATTEMPT: the watchdog; X_WAIT: the next attempt */

    /* the current attempt */
    const struct dp_provider *prov;
    const char *model;
    /* The pass-through (dp_driver.h): the driver whose relay this attempt
     * uses (the client's body went upstream; the answer's bytes come back
     * as they were), or NULL: translated. */
    const struct dp_driver *relay;
    struct gw_buf relay_held; /* a relayed stream's usage event, for its end */
    long long out_cap;        /* > 0: the output cap a worst-case reservation imposed */
    struct drv_request dreq;
    struct drv_parser *parser;
    CURL *easy;
    int running;     /* easy is in the multi handle */
    int probe;       /* admitted as a half-open breaker's probe */
    int fleet_probe; /* admitted as the fleet view's probe (dp_fleet) */
    int status;      /* upstream HTTP status */
    char retry_after[32];
    struct gw_buf coll; /* error bodies; embeddings answers */
    int paused;
    int nevents;   /* events the driver emitted */
    int finishing; /* inside the driver's finish() after a clean end */
    int terminal;  /* DONE or ERROR seen */
    enum verdict verdict;
    enum canon_failure failure; /* V_FAILED, V_BROKE */
    int fail_status;
    char fail_msg[384];
    int64_t ta0, t_first_byte, t_first_content;
    int64_t at_ms;        /* the attempt's start, wall clock (its ledger row) */
    char attempt_id[176]; /* attempt_base "." attempt number: the ledger's key, sent upstream */
    int priced;           /* this attempt's cost is computed (at its usage's end) */
    struct fc_bill bill;  /* this attempt's ledger id and cost, for the client */
    const char *mmodel;   /* the model as a metric label: configured, or "other" */
    char answer_model[128];
    struct canon_usage usage;
    enum canon_stop stop;
    int have_stop;

    /* the answer */
    struct canon_sink sink;
    void *fstate; /* facade stream encoder, created at the first event */
    struct canon_acc acc;
    struct gw_buf out;  /* client bytes not yet written */
    struct gw_buf logb; /* a log line's members */
    struct gw_buf logs; /* whole lines held back, to go out with the request's */
    int committed;      /* a content event arrived: the answer is this attempt's */
    int64_t t0, t_client_first, t_client_end;
    /* For the overhead metric: time spent waiting on upstream attempts and
     * on retry backoffs, and when the current backoff began. */
    int64_t upstream_us, backoff_us, wait_from;
    int stream_counted; /* counted in llmgw_open_streams */
    int64_t cost_total; /* every attempt's cost so far; valid while cost_known */
    int cost_known;
    int final_status;
    const char *outcome;
    const char *error_class;
};

struct dp_exchange *dp_exchange_next(struct dp_exchange *x)
{
    return x->next;
}

static void start_attempt(struct dp_exchange *x);

/* ---------------------------------------------------------------- logs */

static const char *api_name(const struct dp_exchange *x)
{
    return x->kind == KIND_EMBED ? "openai.embeddings" : x->fc->name;
}

/* ,"name":<escaped string> */
static int field_str(struct gw_buf *o, const char *name, const char *v)
{
    int rc = gw_buf_printf(o, ",\"%s\":", name);
    return rc == GW_OK ? gw_json_escape(o, v, strlen(v)) : rc;
}

static int field_ms(struct gw_buf *o, const char *name, int64_t from, int64_t to)
{
    return gw_buf_printf(o, ",\"%s\":%.3f", name, (double)(to - from) / 1000.0);
}

static int field_usage(struct gw_buf *o, const struct canon_usage *u)
{
    return gw_buf_printf(o,
                         ",\"tokens\":{\"input\":%lld,\"cache_read\":%lld,\"cache_write_5m\":%lld,"
                         "\"cache_write_1h\":%lld,\"output\":%lld,\"reasoning\":%lld}",
                         (long long)u->input, (long long)u->cache_read,
                         (long long)u->cache_write_5m, (long long)u->cache_write_1h,
                         (long long)u->output, (long long)u->reasoning);
}

/* The fields both lines start with. */
static int log_head(struct dp_exchange *x, struct gw_buf *o)
{
    int rc = gw_buf_appends(o, "\"request_id\":");
    if (rc == GW_OK)
        rc = gw_json_escape(o, x->request_id, strlen(x->request_id));
    if (rc == GW_OK)
        rc = field_str(o, "route", x->plan.route ? x->plan.route->name : "");
    if (rc == GW_OK && x->prov)
        rc = field_str(o, "provider", x->prov->name);
    if (rc == GW_OK && x->prov)
        rc = field_str(o, "driver", x->prov->driver);
    if (rc == GW_OK && x->model)
        rc = field_str(o, "model", x->model);
    return rc;
}

static const char *const verdict_names[] = {
    [V_NONE] = "running",      [V_OK] = "ok", [V_FAILED] = "failed", [V_BROKE] = "broke",
    [V_CANCELED] = "canceled",
};

/* One line per upstream attempt (failed ones included): fields only,
 * never request or answer text. Its times count from the attempt's start. */
static void log_attempt(struct dp_exchange *x, int64_t end)
{
    struct gw_buf *o = &x->logb;
    gw_buf_reset(o);
    int rc = log_head(x, o);
    if (rc == GW_OK)
        rc = field_str(o, "attempt_id", x->attempt_id);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"attempt\":%d,\"retry\":%s,\"probe\":%s", x->nattempts,
                           x->tries > 1 ? "true" : "false", x->probe ? "true" : "false");
    if (rc == GW_OK && x->fleet_probe)
        rc = gw_buf_printf(o, ",\"fleet_probe\":true");
    if (rc == GW_OK)
        rc = field_str(o, "outcome", verdict_names[x->verdict]);
    if (rc == GW_OK && (x->verdict == V_FAILED || x->verdict == V_BROKE))
        rc = field_str(o, "error_class", canon_failure_name(x->failure));
    if (rc == GW_OK && x->status)
        rc = gw_buf_printf(o, ",\"upstream_status\":%d", x->status);
    if (rc == GW_OK)
        rc = field_ms(o, "latency_ms", x->ta0, end);
    if (rc == GW_OK && x->t_first_byte)
        rc = field_ms(o, "ttfb_ms", x->ta0, x->t_first_byte);
    if (rc == GW_OK && x->t_first_content)
        rc = field_ms(o, "ttfc_ms", x->ta0, x->t_first_content);
    if (rc == GW_OK && x->usage.have)
        rc = field_usage(o, &x->usage);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"snapshot_version\":%lld", (long long)x->snap->version);
    /* The request's last attempt goes out with the request's line, in one
     * write; an attempt the loop goes on from, at once. */
    if (rc == GW_OK && x->verdict == V_FAILED && x->req)
        gw_log_access_fields("attempt", o->data, o->len);
    else if (rc == GW_OK)
        (void)gw_log_access_line(&x->logs, "attempt", o->data, o->len);
}

/* ---------------------------------------------------------------- ledger */

static void metrics_target(const struct dp_exchange *x, struct dp_metrics_target *t);

/* Prices the current attempt once, when its usage is final: at its DONE
 * (so a stream's last event can carry it) or when it ends otherwise. The
 * prices are the snapshot's the attempt ran under. No tokens: exactly 0.
 * Tokens of a class with no price, or an overflow: unknown (NULL in the
 * ledger, counted and warned about), never a guess. */
static void price_attempt(struct dp_exchange *x)
{
    if (x->priced || !x->prov)
        return;
    x->priced = 1;
    const struct canon_usage *u = &x->usage;
    const struct dp_price *p = dp_snapshot_price(x->snap, x->prov->name, x->model);
    int64_t cost = 0;
    int rc = GW_OK;
    if (u->input || u->cache_read || u->cache_write_5m || u->cache_write_1h || u->output)
        rc = p ? dp_cost(p, u, &cost) : GW_ENOENT;
    struct dp_metrics_target mt;
    metrics_target(x, &mt);
    const char *currency = p ? p->currency : "USD";
    if (rc == GW_OK) {
        if (cost > 0)
            dp_metrics_cost(&mt, currency, cost);
        /* Amounts in different currencies are never added: a request that
         * failed over across them has no single total. */
        if (x->cost_known && cost > 0 && x->cost_currency[0] && strcmp(x->cost_currency, currency))
            x->cost_known = 0;
        if (cost > 0 && !x->cost_currency[0])
            snprintf(x->cost_currency, sizeof(x->cost_currency), "%s", currency);
        if (x->cost_known && gw_money_add(x->cost_total, cost, &x->cost_total) != GW_OK)
            x->cost_known = 0;
    } else {
        dp_metrics_unpriced(&mt, rc == GW_ERANGE                ? "overflow"
                                 : !p                           ? "no price for the model"
                                 : dp_cost_unpriced_class(p, u) ? dp_cost_unpriced_class(p, u)
                                                                : "inconsistent usage");
        x->cost_known = 0;
    }
    x->bill = (struct fc_bill){.set = 1,
                               .ledger_id = dp_ledger_enabled() ? x->attempt_id : NULL,
                               .cost_picodollars = rc == GW_OK ? cost : 0,
                               .has_cost = rc == GW_OK,
                               .currency = currency};
}

static void copy_field(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
}

static int64_t ms_since(int64_t from, int64_t to)
{
    return to > from ? (to - from) / 1000 : 0;
}

/* The attempt's ledger row (exactly one per attempt that went upstream). */
static void record_attempt(struct dp_exchange *x, int64_t end)
{
    price_attempt(x);
    /* What the attempt took from each limit: counted here, whether or not
     * a ledger takes the row, so the request's end trues up its leases. */
    struct dp_charge charges[DP_MAX_CHARGES];
    int usd = x->bill.currency && strcmp(x->bill.currency, "USD") == 0; /* budgets are USD */
    size_t ncharges = dp_limits_charges(
        x->hold, x->nattempts, &x->usage, x->bill.cost_picodollars, x->bill.has_cost && usd,
        dp_snapshot_price(x->snap, x->prov->name, x->model), charges, DP_MAX_CHARGES);
    if (!dp_ledger_enabled())
        return;
    struct dp_ledger_row *r = calloc(1, sizeof(*r));
    if (!r) {
        gw_logf(GW_LOG_ERROR, "ledger: out of memory; row not recorded", "{s:s}", "attempt_id",
                x->attempt_id);
        return;
    }
    copy_field(r->request_id, sizeof(r->request_id), x->request_id);
    copy_field(r->attempt_id, sizeof(r->attempt_id), x->attempt_id);
    copy_field(r->key_id, sizeof(r->key_id), x->key ? x->key->id : NULL);
    copy_field(r->team, sizeof(r->team), x->key ? x->key->team : NULL);
    copy_field(r->project, sizeof(r->project), x->key ? x->key->project : NULL);
    copy_field(r->route, sizeof(r->route), x->plan.route ? x->plan.route->name : NULL);
    copy_field(r->provider, sizeof(r->provider), x->prov->name);
    copy_field(r->model, sizeof(r->model), x->model);
    copy_field(r->selector, sizeof(r->selector), x->selector);
    copy_field(r->session, sizeof(r->session), x->session);
    copy_field(r->agent, sizeof(r->agent), x->agent);
    copy_field(r->purpose, sizeof(r->purpose), x->purpose);
    copy_field(r->api, sizeof(r->api), api_name(x));
    copy_field(r->failure_class, sizeof(r->failure_class),
               x->verdict == V_FAILED || x->verdict == V_BROKE ? canon_failure_name(x->failure)
               : x->verdict == V_CANCELED                      ? "canceled"
                                                               : NULL);
    copy_field(r->currency, sizeof(r->currency), x->bill.currency);
    r->attempt = x->nattempts;
    r->status = x->status;
    r->stream = x->client_stream;
    r->has_cost = x->bill.has_cost;
    r->cost_picodollars = x->bill.cost_picodollars;
    r->input_tokens = x->usage.input;
    r->cache_read_tokens = x->usage.cache_read;
    r->cache_write_5m_tokens = x->usage.cache_write_5m;
    r->cache_write_1h_tokens = x->usage.cache_write_1h;
    r->output_tokens = x->usage.output;
    r->reasoning_tokens = x->usage.reasoning;
    r->latency_ms = ms_since(x->ta0, end);
    r->ttfb_ms = x->t_first_byte ? ms_since(x->ta0, x->t_first_byte) : -1;
    r->ttfc_ms = x->t_first_content ? ms_since(x->ta0, x->t_first_content) : -1;
    r->snapshot_version = x->snap->version;
    r->at_ms = x->at_ms;
    memcpy(r->charges, charges, ncharges * sizeof(*charges));
    r->ncharges = ncharges;
    (void)dp_ledger_record(r);
    free(r);
}

/* The request's cost so far, for a whole (non-streaming) answer. */
static void add_cost_headers(struct gw_http_req *req, struct dp_exchange *x)
{
    price_attempt(x);
    char v[32];
    if (x->bill.ledger_id)
        (void)gw_http_add_header(req, "x-llmgw-ledger-id", x->bill.ledger_id);
    if (x->cost_known) {
        snprintf(v, sizeof(v), "%lld", (long long)x->cost_total);
        (void)gw_http_add_header(req, "x-llmgw-cost-picodollars", v);
        (void)gw_http_add_header(req, "x-llmgw-cost-currency",
                                 x->cost_currency[0] ? x->cost_currency
                                 : x->bill.currency  ? x->bill.currency
                                                     : "USD");
    } else {
        /* A token class without a price, or attempts in two currencies:
         * no single exact total (each ledger row still has its own). */
        (void)gw_http_add_header(req, "x-llmgw-cost-picodollars", "unpriced");
    }
}

/* ------------------------------------------------------------- metrics */

static void metrics_target(const struct dp_exchange *x, struct dp_metrics_target *t)
{
    t->route = x->plan.route ? x->plan.route->name : "";
    t->provider = x->prov ? x->prov->name : NULL;
    t->driver = x->prov ? x->prov->driver : NULL;
    t->model = x->prov ? x->mmodel : NULL;
    t->operation = x->kind == KIND_EMBED ? "embeddings" : "chat";
}

/* The request's metrics; end is its answer's end (docs/observability.md
 * defines each measure). */
static void metrics_request(struct dp_exchange *x, int64_t end)
{
    struct dp_metrics_target t;
    metrics_target(x, &t);
    if (x->wait_from) /* the client left during a backoff */
        x->backoff_us += end - x->wait_from;
    int64_t total = end - x->t0;
    int64_t overhead = total - x->upstream_us - x->backoff_us;
    struct dp_metrics_request r = {
        .status = x->final_status,
        .error_class = x->error_class ? x->error_class : x->outcome,
        .duration_s = (double)total / 1e6,
        .ttft_s = -1,
        .tpot_s = -1,
        .overhead_s = (double)(overhead > 0 ? overhead : 0) / 1e6,
    };
    /* Streamed answers only: a whole body's first token and its last reach
     * the client together. */
    int streamed = x->kind == KIND_CHAT && x->client_stream && x->t_client_first;
    if (streamed)
        r.ttft_s = (double)(x->t_client_first - x->t0) / 1e6;
    if (streamed && x->verdict == V_OK && x->usage.output > 1)
        r.tpot_s = (double)(end - x->t_client_first) / 1e6 / (double)(x->usage.output - 1);
    dp_metrics_request(&t, &r);
}

/* The request's line: what the client saw, with the last attempt's target. */
static void log_request(struct dp_exchange *x)
{
    struct gw_buf *o = &x->logb;
    gw_buf_reset(o);
    int64_t end = x->t_client_end ? x->t_client_end : gw_now_us();
    int rc = log_head(x, o);
    if (rc == GW_OK)
        rc = gw_buf_appends(o, ",\"method\":\"POST\"");
    if (rc == GW_OK)
        rc = field_str(o, "path", x->path);
    if (rc == GW_OK)
        rc = field_str(o, "api", api_name(x));
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"status\":%d,\"stream\":%s", x->final_status,
                           x->client_stream ? "true" : "false");
    if (rc == GW_OK)
        rc = field_ms(o, "latency_ms", x->t0, end);
    if (rc == GW_OK && x->t_first_byte)
        rc = field_ms(o, "ttfb_ms", x->t0, x->t_first_byte);
    if (rc == GW_OK && x->t_client_first)
        rc = field_ms(o, "ttfc_ms", x->t0, x->t_client_first);
    if (rc == GW_OK && x->status)
        rc = gw_buf_printf(o, ",\"upstream_status\":%d", x->status);
    if (rc == GW_OK && x->usage.have)
        rc = field_usage(o, &x->usage);
    if (rc == GW_OK && x->have_stop)
        rc = field_str(o, "stop_reason", canon_stop_name(x->stop));
    if (rc == GW_OK)
        rc = field_str(o, "outcome", x->outcome ? x->outcome : "ok");
    if (rc == GW_OK && x->error_class)
        rc = field_str(o, "error_class", x->error_class);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"attempts\":%d,\"retries\":%d,\"failovers\":%d", x->nattempts,
                           x->nretries, x->nfailovers);
    if (rc == GW_OK && x->key)
        rc = field_str(o, "key_id", x->key->id);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"snapshot_version\":%lld", (long long)x->snap->version);
    if (rc == GW_OK)
        rc = gw_log_access_line(&x->logs, "access", o->data, o->len);
    gw_log_access_write(&x->logs);
    metrics_request(x, end);
}

/* ---------------------------------------------------------------- lifetime */

/* Gives back the current attempt's upstream resources. */
static void release_upstream(struct dp_exchange *x)
{
    struct dp_worker *w = x->w;
    if (x->running) {
        gw_curlev_remove(w->curl, x->easy);
        x->running = 0;
    }
    if (x->easy) {
        if (w->nidle_easy < DP_IDLE_EASY) {
            curl_easy_reset(x->easy);
            w->idle_easy[w->nidle_easy++] = x->easy;
        } else {
            curl_easy_cleanup(x->easy);
        }
        x->easy = NULL;
    }
    drv_request_free(&x->dreq);
    memset(&x->dreq, 0, sizeof(x->dreq));
    if (x->parser) {
        x->parser->drv->parser_free(x->parser);
        x->parser = NULL;
    }
    gw_buf_reset(&x->coll);
    if (x->timer)
        evtimer_del(x->timer);
    x->paused = 0;
}

static void exchange_free(struct dp_exchange *x)
{
    /* The quota step's end: unused reservations go back (a wait is
     * canceled). Every attempt's charges were taken by then. */
    dp_limits_end(x->hold);
    x->hold = NULL;
    if (x->stream_counted)
        dp_metrics_open_streams(-1);
    release_upstream(x);
    if (x->fstate)
        x->fc->stream_free(x->fstate);
    canon_acc_free(&x->acc);
    canon_req_free(x->creq);
    json_decref(x->eroot);
    free(x->ereq.inputs);
    free(x->hist);
    if (x->timer)
        event_free(x->timer);
    gw_buf_free(&x->coll);
    gw_buf_free(&x->relay_held);
    gw_buf_free(&x->out);
    gw_buf_free(&x->logb);
    gw_buf_free(&x->logs);
    dp_snapshot_unref(x->snap);
    if (x->prev)
        x->prev->next = x->next;
    else
        x->w->exchanges = x->next;
    if (x->next)
        x->next->prev = x->prev;
    free(x);
}

static void exchange_end(struct dp_exchange *x)
{
    log_request(x);
    exchange_free(x);
}

static void set_failure(struct dp_exchange *x, const char *outcome, const char *cls)
{
    if (!x->outcome) {
        x->outcome = outcome;
        x->error_class = cls;
    }
}

/* ---------------------------------------------------------------- client side */

static const struct dp_facade *facade_of(const struct dp_exchange *x)
{
    return x->fc ? x->fc : &fc_openai_chat;
}

/* An error answer in the facade's format; extra (a JSON value, when given)
 * goes into the error object as extra_name: the attempts a request made,
 * or the candidates a router skipped. Error answers are rare enough to
 * take a second pass through jansson. */
static void respond_error(struct gw_http_req *req, const struct dp_facade *fc, int status,
                          const char *type, const char *param, const char *code, const char *msg,
                          const char *extra_name, const struct gw_buf *extra)
{
    size_t n = 0;
    char *body = (fc ? fc : &fc_openai_chat)->error_body(status, type, param, code, msg, &n);
    if (body && extra && extra->len) {
        json_t *root = json_loadb(body, n, 0, NULL);
        json_t *val = json_loadb(extra->data, extra->len, 0, NULL);
        json_t *err = json_object_get(root, "error");
        if (json_is_object(err) && val && json_object_set(err, extra_name, val) == 0) {
            char *full = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (full) {
                free(body);
                body = full;
                n = strlen(full);
            }
        }
        json_decref(val);
        json_decref(root);
    }
    gw_http_respond(req, status, "application/json", body ? body : "", body ? n : 0);
    free(body);
}

static const char *error_type(int status)
{
    return status == 429   ? "rate_limit_error"
           : status == 404 ? "not_found_error"
           : status == 403 ? "permission_error"
           : status < 500  ? "invalid_request_error"
                           : "api_error";
}

static void add_loop_headers(struct gw_http_req *req, const struct dp_exchange *x)
{
    char n[16];
    snprintf(n, sizeof(n), "%d", x->nattempts);
    (void)gw_http_add_header(req, "x-llmgw-attempts", n);
    if (x->plan.route)
        (void)gw_http_add_header(req, "x-llmgw-route", x->plan.route->name);
}

/* The attempts so far as a JSON array, for an error answer. */
static int attempts_json(const struct dp_exchange *x, struct gw_buf *o)
{
    int rc = gw_buf_appends(o, "[");
    for (size_t i = 0; rc == GW_OK && i < x->nhist; i++) {
        const struct hist *h = &x->hist[i];
        rc = gw_buf_appends(o, i ? ",{\"provider\":" : "{\"provider\":");
        if (rc == GW_OK)
            rc = gw_json_escape(o, h->provider, strlen(h->provider));
        if (rc == GW_OK)
            rc = field_str(o, "model", h->model);
        if (rc == GW_OK)
            rc = field_str(o, "class", canon_failure_name(h->failure));
        if (rc == GW_OK)
            rc = gw_buf_printf(o, ",\"status\":%d%s}", h->status,
                               h->refused ? ",\"refused\":true" : "");
    }
    return rc == GW_OK ? gw_buf_appends(o, "]") : rc;
}

/* A plain HTTP error that ends the client side, with the attempts made. */
static void reply_error(struct dp_exchange *x, int status, const char *param, const char *code,
                        const char *msg)
{
    struct gw_http_req *req = x->req;
    if (!req)
        return;
    x->req = NULL;
    x->t_client_end = gw_now_us();
    x->final_status = status;
    if (x->last_retry_after[0] && (status == 429 || status == 503))
        (void)gw_http_add_header(req, "retry-after", x->last_retry_after);
    add_loop_headers(req, x);
    struct gw_buf extra;
    gw_buf_init(&extra, 0);
    int with = x->nhist && attempts_json(x, &extra) == GW_OK;
    respond_error(req, facade_of(x), status, error_type(status), param, code, msg, "attempts",
                  with ? &extra : NULL);
    gw_buf_free(&extra);
}

static int flush_out(struct dp_exchange *x)
{
    if (!x->out.len || !x->req || !x->committed || !x->client_stream)
        return GW_OK;
    int rc = gw_http_write(x->req, x->out.data, x->out.len);
    gw_buf_reset(&x->out);
    return rc;
}

static void on_client_drain(struct gw_http_req *req, void *arg)
{
    (void)req;
    struct dp_exchange *x = arg;
    if (x->paused && x->running) {
        x->paused = 0;
        curl_easy_pause(x->easy, CURLPAUSE_CONT);
    }
}

/* Which provider and model answered, and how many attempts it took:
 * operators and clients both ask. */
static void add_answer_headers(struct gw_http_req *req, const struct dp_exchange *x)
{
    (void)gw_http_add_header(req, "x-llmgw-provider", x->prov->name);
    (void)gw_http_add_header(req, "x-llmgw-model", x->model);
    add_loop_headers(req, x);
}

/* The first content event: the answer is this attempt's from now on (the
 * bright line), and a stream's head goes out. */
static int commit_answer(struct dp_exchange *x)
{
    x->committed = 1;
    x->t_first_content = x->t_client_first = gw_now_us();
    if (!x->client_stream)
        return GW_OK;
    x->stream_counted = 1;
    dp_metrics_open_streams(1);
    add_answer_headers(x->req, x);
    if (dp_ledger_enabled()) /* the cost follows in the stream's last usage event */
        (void)gw_http_add_header(x->req, "x-llmgw-ledger-id", x->attempt_id);
    (void)gw_http_add_header(x->req, "cache-control", "no-cache");
    return gw_http_start(x->req, 200, "text/event-stream; charset=utf-8");
}

/* ---------------------------------------------------------------- events */

static struct fc_ctx make_ctx(struct dp_exchange *x)
{
    struct fc_ctx ctx = {.request_id = x->request_id,
                         .model = x->answer_model[0] ? x->answer_model : x->model,
                         .created = (long long)time(NULL),
                         .bill = &x->bill};
    return ctx;
}

/* A failure before the first content event: held back, for the loop to
 * decide on once the transfer is over. */
static void attempt_failed(struct dp_exchange *x, enum canon_failure f, int status, const char *msg)
{
    x->terminal = 1;
    x->verdict = V_FAILED;
    x->failure = f;
    x->fail_status = status;
    snprintf(x->fail_msg, sizeof(x->fail_msg), "%s",
             msg && *msg ? msg : "the upstream provider failed");
}

/* A failure after the first content event: the answer is this attempt's,
 * so the client learns of it in-band. A non-streaming client still has
 * seen nothing and gets the HTTP error. */
static void answer_broke(struct dp_exchange *x, const struct canon_event *ev)
{
    x->terminal = 1;
    x->verdict = V_BROKE;
    x->failure = ev->failure;
    x->fail_status = ev->status;
    const char *cls = canon_failure_name(ev->failure);
    set_failure(x, ev->failure == CANON_FAIL_CANCELED ? "canceled" : "upstream_error", cls);
    if (!x->req)
        return;
    if (!x->client_stream) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s (provider %s, %s, after the answer started)",
                 ev->message && *ev->message ? ev->message : "the upstream provider failed",
                 x->prov->name, cls);
        reply_error(x, canon_failure_status(ev->failure), NULL, cls, msg);
        return;
    }
    x->t_client_end = gw_now_us();
    x->final_status = 200;
    /* The error event and the stream's end, after what is still queued. If
     * the event cannot be encoded, the connection is cut rather than ended
     * cleanly: a clean end without the error would look like a whole
     * answer. */
    int rc = x->fc->stream_event(x->fstate, ev, &x->out);
    if (rc == GW_OK)
        rc = flush_out(x);
    struct gw_http_req *req = x->req;
    x->req = NULL;
    if (rc == GW_OK)
        gw_http_finish(req);
    else
        gw_http_abort(req);
}

static void fail(struct dp_exchange *x, const struct canon_event *ev)
{
    if (x->committed)
        answer_broke(x, ev);
    else
        attempt_failed(x, ev->failure, ev->status, ev->message);
}

/* An error the gateway itself hit while answering: the client's answer
 * ends (500 or in-band), and no other target is tried. */
static void internal_failure(struct dp_exchange *x, const char *msg)
{
    set_failure(x, "internal_error", NULL);
    x->terminal = 1;
    x->verdict = V_CANCELED;
    if (x->committed && x->client_stream) {
        struct canon_event e = {
            .type = CANON_EV_ERROR, .failure = CANON_FAIL_PROVIDER_5XX, .message = msg};
        answer_broke(x, &e);
        x->verdict = V_CANCELED; /* the provider did nothing wrong */
        return;
    }
    reply_error(x, 500, NULL, "internal_error", msg);
}

/* A relayed stream's end: the held usage event, with the gateway's bill
 * when the client asked for usage, and the terminator. */
static int relay_end(struct dp_exchange *x)
{
    json_t *bill = fc_bill_json(&x->bill);
    char *b = bill ? json_dumps(bill, JSON_COMPACT) : NULL;
    json_decref(bill);
    int rc = x->relay->relay_end(&x->relay_held, b, x->creq->include_usage, &x->out);
    free(b);
    return rc;
}

/* One upstream event of a relayed stream, after its canonical events (which
 * committed the answer at its first content): the client's bytes. Nonzero
 * stops the parser. */
static int on_raw(void *arg, const struct gw_sse_event *ev)
{
    struct dp_exchange *x = arg;
    if (!x->relay || x->terminal || !x->req || !x->client_stream)
        return x->terminal || !x->req;
    if (x->relay->relay_event(ev, &x->out, &x->relay_held) == GW_OK)
        return 0;
    struct canon_event e = {.type = CANON_EV_ERROR,
                            .failure = CANON_FAIL_PROVIDER_5XX,
                            .message = "the provider's answer is too large"};
    fail(x, &e);
    return 1;
}

static void finish_answer(struct dp_exchange *x, const struct canon_event *ev)
{
    x->terminal = 1;
    x->stop = ev->stop;
    x->have_stop = 1;
    if (!x->committed) { /* no content event: no answer */
        attempt_failed(x, CANON_FAIL_EMPTY_OUTPUT, 0, "the provider's answer had no content");
        return;
    }
    x->verdict = V_OK;
    if (!x->req)
        return;
    struct gw_http_req *req = x->req;
    x->t_client_end = gw_now_us();
    x->final_status = 200;
    if (x->client_stream) {
        int rc = x->relay ? relay_end(x) : x->fc->stream_event(x->fstate, ev, &x->out);
        if (rc == GW_OK)
            rc = flush_out(x);
        x->req = NULL;
        if (rc == GW_OK)
            gw_http_finish(req);
        else
            gw_http_abort(req);
        return;
    }
    if (x->relay) { /* the provider's whole body, as it came */
        x->req = NULL;
        add_answer_headers(req, x);
        add_cost_headers(req, x);
        const struct gw_buf *b = &x->parser->body;
        gw_http_respond(req, 200, "application/json", b->data ? b->data : "", b->len);
        return;
    }
    struct fc_ctx ctx = make_ctx(x);
    gw_buf_reset(&x->out);
    if (canon_acc_add(&x->acc, ev) != GW_OK ||
        x->fc->render(x->creq, &ctx, &x->acc, &x->out) != GW_OK) {
        internal_failure(x, "could not build the answer");
        return;
    }
    x->req = NULL;
    add_answer_headers(req, x);
    add_cost_headers(req, x);
    gw_http_respond(req, 200, "application/json", x->out.data ? x->out.data : "", x->out.len);
}

/* The sink every driver emits into. Returns nonzero once the attempt is
 * over (terminal event, or the client is gone), which stops the parser. */
static int on_event(void *arg, const struct canon_event *ev)
{
    struct dp_exchange *x = arg;
    if (x->terminal)
        return 1;
    if (ev->type == CANON_EV_ERROR) {
        if (x->finishing && x->nevents == 0 && ev->failure == CANON_FAIL_NETWORK) {
            /* A success status and a body that ended cleanly with nothing
             * in it: no answer at all, not a broken connection. */
            struct canon_event e = *ev;
            e.failure = CANON_FAIL_EMPTY_OUTPUT;
            e.message = "the provider's answer is empty";
            fail(x, &e);
            return 1;
        }
        fail(x, ev);
        return 1;
    }
    x->nevents++;
    /* Usage is kept even when the client has left: the provider bills it. */
    if (ev->type == CANON_EV_USAGE)
        x->usage = *ev->usage;
    if (ev->type == CANON_EV_DONE) {
        price_attempt(x); /* the usage is final: the stream's last event carries the cost */
        finish_answer(x, ev);
        return 1;
    }
    if (!x->req)
        return 1;
    if (ev->type == CANON_EV_START && ev->name)
        snprintf(x->answer_model, sizeof(x->answer_model), "%s", ev->name);
    if (x->client_stream && !x->fstate) {
        struct fc_ctx ctx = make_ctx(x);
        x->fstate = x->fc->stream_new(x->creq, &ctx);
        if (!x->fstate) {
            internal_failure(x, "out of memory");
            return 1;
        }
    }
    if (canon_is_content(ev->type) && !x->committed && commit_answer(x) != GW_OK) {
        x->terminal = 1;
        x->verdict = V_CANCELED;
        set_failure(x, "client_closed", "canceled");
        struct gw_http_req *req = x->req;
        x->req = NULL;
        gw_http_abort(req);
        return 1;
    }
    /* Relayed, the provider's own bytes are the answer (on_raw). */
    int rc = x->relay           ? GW_OK
             : x->client_stream ? x->fc->stream_event(x->fstate, ev, &x->out)
                                : canon_acc_add(&x->acc, ev);
    if (rc != GW_OK) {
        struct canon_event e = {.type = CANON_EV_ERROR,
                                .failure = CANON_FAIL_PROVIDER_5XX,
                                .message = rc == GW_ELIMIT
                                               ? "the provider's answer is too large"
                                               : "the provider's answer broke the event order"};
        fail(x, &e);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- upstream */

/* The watchdog: ms from now, but before the answer started never past the
 * failover budget. */
static void arm_watchdog(struct dp_exchange *x, long ms)
{
    int64_t us = (int64_t)ms * 1000;
    x->budget_timer = 0;
    if (!x->committed) {
        int64_t left = x->deadline_us - gw_now_us();
        if (left <= us) {
            us = left > 1000 ? left : 1000;
            x->budget_timer = 1;
        }
    }
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    evtimer_add(x->timer, &tv);
}

static size_t on_header(char *buf, size_t size, size_t nmemb, void *arg)
{
    struct dp_exchange *x = arg;
    size_t n = size * nmemb;
    if (!x->t_first_byte) {
        x->t_first_byte = gw_now_us();
        arm_watchdog(x, x->prov->idle_timeout_ms);
    }
    if (n > 5 && strncmp(buf, "HTTP/", 5) == 0) {
        /* A new status line (after 100 Continue or a redirect) resets. */
        const char *sp = memchr(buf, ' ', n);
        x->status = sp ? atoi(sp + 1) : 0;
        x->retry_after[0] = '\0';
        return n;
    }
    if (n > 12 && strncasecmp(buf, "retry-after:", 12) == 0) {
        const char *v = buf + 12;
        size_t vl = n - 12;
        while (vl && (*v == ' ' || *v == '\t')) {
            v++;
            vl--;
        }
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        /* Copied into our own response head: only plain values. */
        int clean = vl < sizeof(x->retry_after);
        for (size_t i = 0; clean && i < vl; i++)
            clean = (unsigned char)v[i] > 0x20 && v[i] != 0x7f;
        if (clean) {
            memcpy(x->retry_after, v, vl);
            x->retry_after[vl] = '\0';
        }
    }
    return n;
}

static int ok_status(const struct dp_exchange *x)
{
    return x->status >= 200 && x->status < 300;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *arg)
{
    struct dp_exchange *x = arg;
    size_t n = size * nmemb;
    if (!x->req)
        return x->terminal && x->verdict == V_OK ? n : 0; /* after the answer, drain; else stop */
    arm_watchdog(x, x->prov->idle_timeout_ms);
    if (x->committed && x->client_stream && gw_http_pending(x->req) > OUT_HIGH_WATER) {
        x->paused = 1;
        gw_http_on_drain(x->req, OUT_LOW_WATER, on_client_drain, x);
        return CURL_WRITEFUNC_PAUSE;
    }
    if (x->terminal)
        return 0; /* a failed attempt: nothing more is wanted from it */
    if (x->kind == KIND_EMBED || !ok_status(x)) {
        /* Kept whole (error bodies only up to a bound, to classify). */
        if (gw_buf_append(&x->coll, buf, n) != GW_OK && x->kind == KIND_EMBED) {
            attempt_failed(x, CANON_FAIL_PROVIDER_5XX, x->status,
                           "the provider's answer is too large");
            return 0;
        }
        return n;
    }
    x->parser->drv->parse(x->parser, buf, n, &x->sink);
    if (x->terminal)
        return x->verdict == V_OK || x->verdict == V_BROKE ? n : 0;
    if (!x->req)
        return 0;
    return flush_out(x) == GW_OK ? n : 0;
}

static void emit_failure(struct dp_exchange *x, enum canon_failure f, int status, const char *msg)
{
    struct canon_event ev = {
        .type = CANON_EV_ERROR, .failure = f, .status = status, .message = msg};
    on_event(x, &ev);
}

static void upstream_error_status(struct dp_exchange *x)
{
    enum canon_failure f;
    char msg[384];
    const struct dp_driver *d = x->prov->drv;
    (d->classify ? d->classify : drv_classify_default)(x->status, x->coll.data, x->coll.len, &f,
                                                       msg, sizeof(msg));
    if (!msg[0])
        snprintf(msg, sizeof(msg), "the provider answered HTTP %d", x->status);
    if (!x->retry_after[0] && d->retry_after)
        (void)d->retry_after(x->coll.data, x->coll.len, x->retry_after, sizeof(x->retry_after));
    emit_failure(x, f, x->status, msg);
}

static void finish_embed(struct dp_exchange *x);
static void attempt_over(struct dp_exchange *x);

static void on_done(CURL *easy, CURLcode rc, void *arg)
{
    (void)easy;
    struct dp_exchange *x = arg;
    x->running = 0;
    if (x->terminal) {
        /* decided already */
    } else if (rc == CURLE_OK && !ok_status(x)) {
        upstream_error_status(x);
    } else if (rc == CURLE_OK && x->kind == KIND_EMBED) {
        finish_embed(x);
    } else if (rc == CURLE_OK) {
        x->finishing = 1;
        x->parser->drv->finish(x->parser, &x->sink);
        if (!x->terminal)
            emit_failure(x, CANON_FAIL_PROVIDER_5XX, 0,
                         "the provider's answer ended without a terminator");
    } else {
        char msg[256];
        snprintf(msg, sizeof(msg), "the provider could not be reached or broke off: %s",
                 curl_easy_strerror(rc));
        emit_failure(x, canon_classify_curl(rc), 0, msg);
    }
    attempt_over(x);
}

/* The watchdog of an attempt in flight: until the first byte it is the
 * provider's first-byte timeout; after it, the idle timeout, re-armed by
 * every piece of body; before the answer started, never past the failover
 * budget; while the upstream is paused for a slow client, the same idle
 * timeout bounds how long that client may stall. */
static void watchdog(struct dp_exchange *x)
{
    if (x->running) {
        gw_curlev_remove(x->w->curl, x->easy);
        x->running = 0;
    }
    if (x->terminal && !x->req) {
        /* The client has its whole answer; only the upstream's tail
         * stalled. Nothing failed that the client could see. */
    } else if (x->paused) {
        /* The client stopped reading: it cannot be told anything. */
        set_failure(x, "client_stalled", "canceled");
        struct gw_http_req *req = x->req;
        x->req = NULL;
        x->final_status = 499;
        x->terminal = 1;
        x->verdict = V_CANCELED;
        if (req)
            gw_http_abort(req);
    } else if (!x->committed && (x->budget_timer || gw_now_us() >= x->deadline_us)) {
        /* The timer may fire a little before the deadline it was set for:
         * which wait it was set for decides, not the clock. */
        char msg[160];
        snprintf(msg, sizeof(msg), "the failover budget (%ld ms) ran out before an answer started",
                 x->budget_ms);
        x->budget_out = 1;
        emit_failure(x, CANON_FAIL_TIMEOUT, 0, msg);
    } else {
        emit_failure(x, CANON_FAIL_TIMEOUT, 0,
                     x->t_first_byte ? "the provider stopped sending before the answer was complete"
                                     : "the provider did not answer within its first-byte timeout");
    }
    attempt_over(x);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_exchange *x = arg;
    if (x->state == X_WAIT && x->wait_from) {
        x->backoff_us += gw_now_us() - x->wait_from;
        x->wait_from = 0;
    }
    if (x->state == X_WAIT)
        start_attempt(x);
    else
        watchdog(x);
}

/* Seconds in a Retry-After value, in microseconds; -1 when it is not a
 * number of seconds (an HTTP date is rare from these APIs, and ignored). */
static int64_t retry_after_us(const char *v)
{
    if (!v[0] || v[strspn(v, "0123456789.")] != '\0')
        return -1;
    double s = strtod(v, NULL);
    return s < 0 || s > 86400 ? -1 : (int64_t)(s * 1e6);
}

/* Exponential backoff with equal jitter: half the step fixed, half random. */
static int64_t backoff_us(struct dp_exchange *x)
{
    int64_t step = (int64_t)x->w->retry_base_ms * 1000;
    for (int i = 1; i < x->tries && step < MAX_BACKOFF_US; i++)
        step *= 2;
    if (step > MAX_BACKOFF_US)
        step = MAX_BACKOFF_US;
    return step / 2 + (int64_t)(dp_worker_rand(x->w) % (uint64_t)(step / 2 + 1));
}

static void schedule(struct dp_exchange *x, int64_t delay_us)
{
    x->state = X_WAIT;
    x->wait_from = delay_us > 0 ? gw_now_us() : 0;
    struct timeval tv = {(time_t)(delay_us / 1000000), (suseconds_t)(delay_us % 1000000)};
    evtimer_add(x->timer, &tv);
}

/* The loop is over without an answer: the client gets the last attempt's
 * failure (or the refusal, or the budget's end), with every attempt. */
static void give_up(struct dp_exchange *x)
{
    char msg[640];
    const struct hist *last = x->nhist ? &x->hist[x->nhist - 1] : NULL;
    if (x->budget_out) {
        set_failure(x, "upstream_error", "timeout");
        snprintf(msg, sizeof(msg), "%s (after %d attempts)", x->last_msg, x->nattempts);
        reply_error(x, 504, NULL, "timeout", msg);
    } else if (last && last->refused) {
        set_failure(x, x->rerr.status >= 500 ? "provider_misconfigured" : "refused",
                    canon_failure_name(last->failure));
        int status = x->rerr.status ? x->rerr.status : 400;
        reply_error(x, status, x->rerr.param[0] ? x->rerr.param : NULL, x->rerr.code,
                    x->rerr.message);
    } else if (last) {
        enum canon_failure f = last->failure;
        const char *cls = canon_failure_name(f);
        set_failure(x, "upstream_error", cls);
        int status = canon_failure_status(f);
        /* A provider's 4xx about the request is the client's to see. */
        if ((f == CANON_FAIL_BAD_REQUEST || f == CANON_FAIL_NOT_FOUND) && last->status >= 400 &&
            last->status < 500)
            status = last->status;
        if (x->nattempts > 1)
            snprintf(msg, sizeof(msg), "%s (provider %s, %s; %d attempts, all failed)", x->last_msg,
                     last->provider, cls, x->nattempts);
        else
            snprintf(msg, sizeof(msg), "%s (provider %s, %s)", x->last_msg, last->provider, cls);
        reply_error(x, status, NULL, cls, msg);
    } else {
        /* Every candidate's breaker opened while this request waited. */
        set_failure(x, "no_route", NULL);
        dp_metrics_no_route("no_healthy_target");
        snprintf(msg, sizeof(msg), "no candidate is healthy for '%.100s' any more",
                 x->kind == KIND_CHAT ? x->creq->model : gw_json_str(x->eroot, "model"));
        reply_error(x, 503, "model", "no_healthy_target", msg);
    }
    exchange_end(x);
}

/* After a failed attempt: retry the target, move to the next, or stop.
 * The class decides (canon_failure_retries/advances), the position sizes
 * the retries, and the failover budget bounds it all. */
static void decide_next(struct dp_exchange *x)
{
    enum canon_failure f = x->failure;
    int last = x->ci + 1 >= x->plan.ncands;
    int64_t now = gw_now_us();
    if (x->budget_out || now >= x->deadline_us) {
        if (!x->budget_out) {
            x->budget_out = 1;
            snprintf(x->last_msg, sizeof(x->last_msg),
                     "the failover budget (%ld ms) ran out before an answer started", x->budget_ms);
        }
        give_up(x);
        return;
    }
    if (canon_failure_retries(f) && x->tries <= (last ? RETRIES_LAST : RETRIES_MIDDLE)) {
        int64_t delay = backoff_us(x);
        int64_t ra = retry_after_us(x->retry_after);
        if (ra <= MAX_RETRY_AFTER_US) {
            if (ra > delay)
                delay = ra;
            if (now + delay < x->deadline_us) {
                schedule(x, delay);
                return;
            }
        }
    }
    if (canon_failure_advances(f) && !last) {
        x->ci++;
        x->tries = 0;
        /* On the next turn of the loop, not inside curl's callback. */
        schedule(x, 0);
        return;
    }
    give_up(x);
}

static void remember(struct dp_exchange *x, enum canon_failure f, int status, int refused)
{
    if (!refused) {
        memcpy(x->last_msg, x->fail_msg, sizeof(x->last_msg));
        memcpy(x->last_retry_after, x->retry_after, sizeof(x->last_retry_after));
    }
    if (!x->hist && !(x->hist = malloc(MAX_HIST * sizeof(*x->hist))))
        return; /* the error answer lists fewer attempts */
    if (x->nhist < MAX_HIST)
        x->hist[x->nhist++] = (struct hist){x->prov->name, x->model, f, status, refused};
}

/* An attempt's transfer is over: its verdict goes to the breaker and the
 * log, its resources back to the worker; then the request ends, or the
 * loop goes on. */
static void attempt_over(struct dp_exchange *x)
{
    int64_t now = gw_now_us();
    if (x->verdict == V_NONE)
        x->verdict = V_CANCELED;
    struct dp_outcome o = {.provider = x->prov->name,
                           .model = x->model,
                           .ok = x->verdict == V_OK,
                           /* A request's own budget running out says nothing
                            * about the provider: no verdict. */
                           .failure =
                               (x->verdict == V_FAILED || x->verdict == V_BROKE) && !x->budget_out
                                   ? x->failure
                                   : CANON_FAIL_CANCELED,
                           .latency_us = now - x->ta0,
                           .ttfb_us = x->t_first_byte ? x->t_first_byte - x->ta0 : 0,
                           .at_us = now};
    dp_breaker_record(x->w->breakers, &o, x->probe);
    dp_fleet_record(&o, x->fleet_probe);
    log_attempt(x, now);
    record_attempt(x, now);
    /* Upstream time: until the transfer ended, or the client's answer did
     * when the upstream's tail outlived it. */
    int64_t upto = x->t_client_end > x->ta0 && x->t_client_end < now ? x->t_client_end : now;
    x->upstream_us += upto - x->ta0;
    struct dp_metrics_target mt;
    metrics_target(x, &mt);
    dp_metrics_attempt(
        &mt, verdict_names[x->verdict],
        x->verdict == V_FAILED || x->verdict == V_BROKE ? canon_failure_name(x->failure) : NULL,
        &x->usage);
    if (x->verdict == V_OK && x->plan.route && x->session[0])
        dp_router_sticky_set(x->plan.route, x->session, x->prov, now);
    release_upstream(x);
    if (x->verdict == V_FAILED) {
        remember(x, x->failure, x->fail_status, 0);
        if (x->req) {
            decide_next(x);
            return;
        }
    }
    exchange_end(x);
}

/* Ends a request at once (drain deadline passed): an open stream gets an
 * in-band error event and its terminator. */
void dp_exchange_shutdown(struct dp_exchange *x)
{
    if (x->running) {
        gw_curlev_remove(x->w->curl, x->easy);
        x->running = 0;
    }
    if (x->req) {
        set_failure(x, "shutdown", "canceled");
        if (!x->committed || !x->client_stream) {
            reply_error(x, 503, NULL, "gateway_shutdown", "the gateway is shutting down");
        } else {
            struct canon_event ev = {.type = CANON_EV_ERROR,
                                     .failure = CANON_FAIL_CANCELED,
                                     .message = "the gateway is shutting down"};
            answer_broke(x, &ev);
        }
    }
    x->terminal = 1;
    if (x->verdict == V_NONE)
        x->verdict = V_CANCELED;
    if (x->state == X_ATTEMPT)
        attempt_over(x); /* the client side has ended: no loop after it */
    else
        exchange_end(x);
}

/* ---------------------------------------------------------------- attempts */

static int start_upstream(struct dp_exchange *x)
{
    x->easy = x->w->nidle_easy > 0 ? x->w->idle_easy[--x->w->nidle_easy] : curl_easy_init();
    if (!x->easy)
        return GW_ENOMEM;
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_URL, x->dreq.url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->dreq.body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->dreq.body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->dreq.headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* Loopback never goes through a proxy; other hosts follow the usual
     * proxy environment, which operators may rely on. */
    curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.0/8,::1");
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    /* curl's receive buffer is allocated per transfer: 16 KiB by default, a
     * quarter of that keeps an open stream (an event is a few hundred
     * bytes) small; a big whole body only takes more callbacks. */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 4096L);
    /* No total timeout on streams: a stall between bytes is the failure,
     * and the watchdog measures it exactly. */
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (gw_curlev_add(x->w->curl, e, on_done, x) != GW_OK)
        return GW_ENOMEM;
    x->running = 1;
    x->state = X_ATTEMPT;
    arm_watchdog(x, x->prov->first_byte_timeout_ms);
    return GW_OK;
}

/* Forgets the previous attempt's partial answer: nothing of it reached
 * the client (it failed before its first content event). */
static void reset_attempt(struct dp_exchange *x, const struct dp_candidate *c)
{
    x->prov = c->provider;
    x->model = c->model;
    x->relay = NULL;
    gw_buf_reset(&x->relay_held);
    x->mmodel = c->entry ? c->model : dp_metrics_model(x->snap, c->provider->name, c->model);
    x->status = 0;
    x->retry_after[0] = '\0';
    x->probe = 0;
    x->fleet_probe = 0;
    x->nevents = x->finishing = x->terminal = 0;
    x->verdict = V_NONE;
    x->fail_status = 0;
    x->fail_msg[0] = '\0';
    x->t_first_byte = x->t_first_content = 0;
    x->answer_model[0] = '\0';
    memset(&x->usage, 0, sizeof(x->usage));
    x->have_stop = 0;
    x->priced = 0;
    memset(&x->bill, 0, sizeof(x->bill));
    if (x->fstate) {
        x->fc->stream_free(x->fstate);
        x->fstate = NULL;
    }
    canon_acc_free(&x->acc);
    canon_acc_init(&x->acc, 0);
    gw_buf_reset(&x->out);
}

/* Whether the current attempt passes the client's request through: the
 * driver speaks the client's wire format, and the provider has not asked
 * for translation (options.passthrough false). */
static int relays(const struct dp_exchange *x, const struct dp_driver *d)
{
    return x->kind == KIND_CHAT && d->relay_build && d->wire && x->fc->wire &&
           strcmp(d->wire, x->fc->wire) == 0 &&
           !json_is_false(json_object_get(x->prov->options, "passthrough"));
}

/* The driver's upstream request for the current candidate. */
static int build(struct dp_exchange *x, struct canon_err *err)
{
    /* The attempt's id goes upstream as its x-request-id: the provider's
     * own log then names the ledger row. */
    snprintf(x->attempt_id, sizeof(x->attempt_id), "%s.%d", x->attempt_base, x->nattempts + 1);
    struct drv_target dt = {.provider = x->prov, .model = x->model, .request_id = x->attempt_id};
    const struct dp_driver *d = x->prov->drv;
    if (x->kind == KIND_EMBED) {
        x->ereq.model = x->model;
        return d->build_embed(&dt, &x->ereq, &x->dreq, err);
    }
    int rc;
    if (relays(x, d)) {
        size_t len;
        const char *body = gw_http_req_body(x->req, &len);
        struct drv_relay_edits ed = {.stream = x->client_stream, .max_tokens = x->out_cap};
        x->relay = d;
        dt.client_beta = gw_http_req_header(x->req, "anthropic-beta");
        rc = d->relay_build(&dt, body, len, &ed, &x->dreq, err);
    } else if (x->creq->opaque.status) {
        *err = x->creq->opaque; /* what only the client's own format can carry */
        rc = GW_EINVAL;
    } else {
        rc = d->build_chat(&dt, x->creq, &x->dreq, err);
    }
    if (rc == GW_OK && !(x->parser = d->parser_new(x->dreq.stream)))
        rc = GW_ENOMEM;
    return rc;
}

/* The fleet view (dp_fleet) may have turned the target down while the
 * request waited: 0 skips it. When this replica holds its probe, the
 * attempt becomes the probe (x->fleet_probe). */
static int fleet_admit(struct dp_exchange *x, int64_t now)
{
    enum dp_admit ad = dp_fleet_admit(x->prov->name, x->model, now);
    if (ad == DP_ADMIT_NO)
        gw_logf(GW_LOG_INFO, "candidate skipped", "{s:s,s:s,s:s,s:s}", "request_id", x->request_id,
                "provider", x->prov->name, "model", x->model, "reason", "fleet_down");
    x->fleet_probe = ad == DP_ADMIT_PROBE;
    return ad != DP_ADMIT_NO;
}

/* The fleet's probe slot back when the local breaker refused the attempt. */
static void fleet_unadmit(struct dp_exchange *x)
{
    if (x->fleet_probe)
        dp_fleet_unadmit(x->prov->name, x->model);
    x->fleet_probe = 0;
}

/* Starts the current candidate, moving past those that cannot be tried:
 * a driver that refuses the request (the next one may take it), a breaker
 * that opened while the request waited. */
static void start_attempt(struct dp_exchange *x)
{
    for (; x->ci < x->plan.ncands; x->ci++, x->tries = 0) {
        reset_attempt(x, &x->plan.cands[x->ci]);
        struct canon_err err = {0};
        int rc = build(x, &err);
        if (rc == GW_EINVAL) {
            /* Nothing was sent: a refusal names the client's field (4xx),
             * or the provider's configuration (5xx). */
            x->rerr = err;
            remember(x, err.status >= 500 ? CANON_FAIL_AUTH_FAILED : CANON_FAIL_UNSUPPORTED_INPUT,
                     0, 1);
            release_upstream(x);
            continue;
        }
        if (rc != GW_OK) {
            release_upstream(x);
            internal_failure(x, "the gateway could not build the upstream request");
            exchange_end(x);
            return;
        }
        int64_t now = gw_now_us();
        if (!fleet_admit(x, now)) {
            release_upstream(x);
            continue;
        }
        enum dp_admit ad = dp_breaker_admit(x->w->breakers, x->prov->name, x->model, now);
        if (ad == DP_ADMIT_NO) {
            fleet_unadmit(x);
            gw_logf(GW_LOG_INFO, "candidate skipped", "{s:s,s:s,s:s,s:s}", "request_id",
                    x->request_id, "provider", x->prov->name, "model", x->model, "reason",
                    "breaker_open");
            release_upstream(x);
            continue;
        }
        x->probe = ad == DP_ADMIT_PROBE;
        /* Counted when they happen: a retry or a failover that a breaker
         * or a refusal prevented is none. */
        struct dp_metrics_target mt;
        metrics_target(x, &mt);
        if (x->tries > 0) {
            x->nretries++;
            dp_metrics_retry(&mt);
        } else if (x->nattempts > 0) {
            x->nfailovers++;
            dp_metrics_failover(mt.route);
        }
        x->tries++;
        x->nattempts++;
        x->ta0 = now;
        x->at_ms = gw_wall_ms();
        if (start_upstream(x) != GW_OK) {
            x->verdict = V_CANCELED;
            struct dp_outcome o = {.provider = x->prov->name,
                                   .model = x->model,
                                   .failure = CANON_FAIL_CANCELED,
                                   .at_us = now};
            dp_breaker_record(x->w->breakers, &o, x->probe);
            dp_fleet_record(&o, x->fleet_probe);
            record_attempt(x, now);
            dp_metrics_attempt(&mt, "canceled", NULL, NULL);
            release_upstream(x);
            internal_failure(x, "the gateway could not start the upstream request");
            exchange_end(x);
        }
        return;
    }
    give_up(x);
}

/* ---------------------------------------------------------------- setup */

static void reply_early(struct gw_http_req *req, const struct dp_facade *fc, const char *id,
                        int status, const char *param, const char *code, const char *msg)
{
    dp_reply_error_fc(req, fc, id, status, error_type(status), param, code, msg);
}

/* Parses the body as one JSON object with unique keys. NULL after replying. */
static json_t *load_body(struct gw_http_req *req, const struct dp_facade *fc, const char *id)
{
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    /* What the tree may cost is bounded before it is built: a small body of
     * many tiny values is tens of times its size in jansson (gw_json.h). A
     * malformed body goes to jansson, for its error, only as far as the
     * scan counted: jansson would skip a NUL after a number and parse on. */
    char lim[256];
    size_t spent = 0;
    struct gw_json_count c;
    int rc = gw_json_bound(body, len, "the request body", &spent, &c, lim, sizeof(lim));
    if (rc == GW_ELIMIT) {
        reply_early(req, fc, id, 413, NULL, "request_too_complex", lim);
        return NULL;
    }
    if (rc == GW_EINVAL && c.stop < len)
        len = c.stop + 1;
    json_error_t je;
    /* Duplicate keys are refused: parsers disagree on which one wins, and
     * the gateway must route on the same model the provider will read. */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (json_is_object(root) && rc == GW_OK)
        return root;
    char msg[512];
    if (json_is_object(root)) /* not expected: jansson took what the scan refused */
        snprintf(msg, sizeof(msg), "the request body is not valid JSON (byte %zu)", c.stop);
    else if (root)
        snprintf(msg, sizeof(msg), "the request body must be a JSON object");
    else
        snprintf(msg, sizeof(msg), "the request body is not valid JSON: %s (line %d, column %d)",
                 je.text, je.line, je.column);
    json_decref(root);
    reply_early(req, fc, id, 400, NULL, "invalid_json", msg);
    return NULL;
}

/* The routing headers: a session id (stickiness), an affinity key and a
 * failover budget. Each is checked; returns nonzero after replying. */
static int read_route_headers(struct dp_exchange *x, const char **affinity)
{
    static const char *const keyed[] = {"x-llmgw-session-id", "x-llmgw-affinity-key",
                                        "x-llmgw-agent", "x-llmgw-purpose"};
    char *const dest[] = {x->session, NULL, x->agent, x->purpose};
    for (size_t i = 0; i < 4; i++) {
        const char *v = gw_http_req_header(x->req, keyed[i]);
        size_t n = v ? strlen(v) : 0;
        int ok = n <= MAX_KEY_HEADER;
        for (size_t j = 0; ok && j < n; j++)
            ok = (unsigned char)v[j] > 0x20 && (unsigned char)v[j] < 0x7f;
        if (!ok) {
            char msg[160];
            snprintf(msg, sizeof(msg), "the %s header must be 1 to %d visible ASCII characters",
                     keyed[i], MAX_KEY_HEADER);
            reply_early(x->req, x->fc, x->request_id, 400, keyed[i], "invalid_header", msg);
            return 1;
        }
        if (dest[i] && n)
            memcpy(dest[i], v, n + 1);
        if (i == 1)
            *affinity = n ? v : NULL;
    }
    x->budget_ms = DEFAULT_BUDGET_MS;
    const char *b = gw_http_req_header(x->req, "x-llmgw-fallback-timeout-ms");
    if (b) {
        char *end;
        long v = b[0] >= '0' && b[0] <= '9' ? strtol(b, &end, 10) : 0;
        if (v < 1 || v > MAX_BUDGET_MS || *end) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "the x-llmgw-fallback-timeout-ms header must be an integer from 1 to %ld",
                     MAX_BUDGET_MS);
            reply_early(x->req, x->fc, x->request_id, 400, "x-llmgw-fallback-timeout-ms",
                        "invalid_header", msg);
            return 1;
        }
        x->budget_ms = v;
    }
    x->deadline_us = x->t0 + (int64_t)x->budget_ms * 1000;
    return 0;
}

/* The field a no-capable-target error names: the one in the request that
 * no candidate can take, when there is one such capability; else model. */
static const char *missing_param(const struct dp_exchange *x, const struct dp_plan *p)
{
    unsigned m = 0;
    for (size_t i = 0; i < p->nskips; i++)
        m |= p->skips[i].missing;
    if (p->cause != DP_NOROUTE_NONE_CAPABLE || x->kind != KIND_CHAT)
        return "model";
    static const struct {
        unsigned cap;
        enum canon_field field;
    } fields[] = {{DRV_CAP_VISION, CANON_F_MESSAGES},
                  {DRV_CAP_TOOLS, CANON_F_TOOLS},
                  {DRV_CAP_JSON_MODE, CANON_F_RESPONSE_FORMAT},
                  {DRV_CAP_REASONING, CANON_F_REASONING}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(*fields); i++)
        if (m == fields[i].cap)
            return canon_field_name(x->creq, fields[i].field);
    return "model";
}

/* Plans the request; with no candidate, replies with every skipped one and
 * returns nonzero. */
static int plan(struct dp_exchange *x, const char *selector, const struct dp_needs *n)
{
    snprintf(x->selector, sizeof(x->selector), "%s", selector ? selector : "");
    const char *affinity = NULL;
    if (read_route_headers(x, &affinity))
        return 1;
    if (!selector || !*selector) {
        reply_early(x->req, x->fc, x->request_id, 400, "model", "missing_required_parameter",
                    "you must provide a model parameter (a route, an alias, a role, or "
                    "provider/model)");
        return 1;
    }
    struct dp_route_ctx ctx = {.key = x->key,
                               .request_id = x->request_id,
                               .session = x->session[0] ? x->session : NULL,
                               .affinity = affinity,
                               .breakers = x->w->breakers,
                               .now_us = gw_now_us()};
    struct dp_plan *p = malloc(sizeof(*p));
    if (!p || dp_router_plan(x->snap, selector, n, &ctx, p) != GW_OK) {
        free(p);
        reply_early(x->req, x->fc, x->request_id, 500, NULL, "internal_error", "out of memory");
        return 1;
    }
    if (p->ncands > 0) {
        x->plan.route = p->route;
        x->plan.ncands = p->ncands;
        memcpy(x->plan.cands, p->cands, p->ncands * sizeof(p->cands[0]));
        free(p);
        return 0;
    }
    int status = dp_no_route_status(p->cause);
    const char *code = dp_no_route_code(p->cause);
    dp_metrics_no_route(code);
    dp_log_simple(x->req, x->request_id, status, code);
    (void)gw_http_add_header(x->req, "x-llmgw-attempts", "0");
    struct gw_buf skips;
    gw_buf_init(&skips, 0);
    int with = p->nskips && dp_plan_skips_json(p, &skips) == GW_OK;
    respond_error(x->req, facade_of(x), status, error_type(status), missing_param(x, p), code,
                  p->message, "candidates", with ? &skips : NULL);
    gw_buf_free(&skips);
    free(p);
    return 1;
}

static struct dp_exchange *exchange_new(struct dp_worker *w, struct gw_http_req *req,
                                        struct dp_snapshot *snap, const struct dp_key *key,
                                        const char *request_id, enum kind kind,
                                        const struct dp_facade *fc)
{
    struct dp_exchange *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->w = w;
    x->req = req;
    x->snap = snap;
    x->key = key;
    x->kind = kind;
    x->fc = fc;
    x->state = X_WAIT;
    x->cost_known = 1;
    x->t0 = gw_http_req_start_us(req);
    snprintf(x->request_id, sizeof(x->request_id), "%s", request_id);
    const char *given = gw_http_req_header(req, "x-request-id");
    if (given && strcmp(given, request_id) == 0)
        snprintf(x->attempt_base, sizeof(x->attempt_base), "%.128s~%08x", request_id,
                 (unsigned)(dp_worker_rand(w) >> 32));
    else
        snprintf(x->attempt_base, sizeof(x->attempt_base), "%.149s", request_id);
    snprintf(x->path, sizeof(x->path), "%s", gw_http_req_path(req));
    x->sink.emit = on_event;
    x->sink.raw = on_raw;
    x->sink.arg = x;
    gw_buf_init(&x->relay_held, DRV_MAX_EVENT);
    canon_acc_init(&x->acc, 0);
    gw_buf_init(&x->out, 0);
    gw_buf_init(&x->logb, 0);
    gw_buf_init(&x->logs, 0);
    gw_buf_init(&x->coll, kind == KIND_EMBED ? DRV_MAX_BODY : MAX_ERROR_BODY);
    x->next = w->exchanges;
    if (w->exchanges)
        w->exchanges->prev = x;
    w->exchanges = x;
    x->timer = evtimer_new(w->base, on_timer, x);
    if (!x->timer) {
        exchange_free(x);
        return NULL;
    }
    return x;
}

static void on_client_close(struct gw_http_req *req, void *arg)
{
    struct dp_exchange *x = arg;
    x->req = NULL;
    gw_http_abort(req);
    set_failure(x, "client_closed", "canceled");
    x->final_status = 499;
    if (x->state == X_ATTEMPT) {
        /* Removing the transfer closes it: the upstream sees the close. */
        x->terminal = 1;
        if (x->verdict == V_NONE)
            x->verdict = V_CANCELED;
        attempt_over(x);
    } else {
        exchange_end(x);
    }
}

/* ---------------------------------------------------------------- quota */

/* A refusal of the quota step: the facade's error with the limit, its
 * state and when to retry (docs/budgets.md). Ends the client side. */
static void reply_quota(struct dp_exchange *x, const struct dp_limits_refusal *r)
{
    struct gw_http_req *req = x->req;
    if (!req)
        return;
    x->req = NULL;
    x->t_client_end = gw_now_us();
    x->final_status = r->status;
    set_failure(x, "limit", r->code);
    dp_metrics_limit_refusal(r);
    char v[24];
    if (r->retry_after_s > 0) {
        snprintf(v, sizeof(v), "%lld", (long long)r->retry_after_s);
        (void)gw_http_add_header(req, "retry-after", v);
    }
    (void)gw_http_add_header(req, "x-llmgw-attempts", "0");
    size_t n = 0;
    char *body = facade_of(x)->error_body(r->status, r->type, r->param, r->code, r->message, &n);
    json_t *root = body ? json_loadb(body, n, 0, NULL) : NULL;
    json_t *err = json_object_get(root, "error");
    struct gw_buf lim;
    gw_buf_init(&lim, 0);
    if (json_is_object(err) && r->has_limit && dp_limits_refusal_json(r, &lim) == GW_OK)
        json_object_set_new(err, "limit", json_loadb(lim.data, lim.len, 0, NULL));
    if (json_is_object(err))
        json_object_set_new(err, "retry_after_s",
                            r->retry_after_s > 0 ? json_integer(r->retry_after_s) : json_null());
    char *full = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (full) {
        free(body);
        body = full;
        n = strlen(full);
    }
    gw_http_respond(req, r->status, "application/json", body ? body : "", body ? n : 0);
    free(body);
    json_decref(root);
    gw_buf_free(&lim);
}

/* Candidates no price can be put on under a fail_closed budget leave the
 * plan (dp_limits marked them). */
static void drop_candidates(struct dp_exchange *x, const unsigned char *drop)
{
    size_t k = 0;
    for (size_t i = 0; i < x->plan.ncands; i++)
        if (!drop[i])
            x->plan.cands[k++] = x->plan.cands[i];
    x->plan.ncands = k;
}

static void on_reserved(void *arg, const struct dp_limits_refusal *r)
{
    struct dp_exchange *x = arg;
    if (r) {
        reply_quota(x, r);
        exchange_end(x);
        return;
    }
    start_attempt(x);
}

/* The quota step, after routing and before the first dispatch: every limit
 * of the key, its team and its project reserves the request's need (an
 * estimate, or the worst case), or the request is refused having consumed
 * nothing. A reservation may wait for a grant: on_reserved goes on. */
static void reserve_then_start(struct dp_exchange *x)
{
    unsigned char drop[DP_MAX_CANDIDATES] = {0};
    int64_t out_cap = 0;
    struct dp_limits_ask ask = {.snap = x->snap,
                                .key = x->key,
                                .cands = x->plan.cands,
                                .ncands = x->plan.ncands,
                                .drop = drop,
                                .embeddings = x->kind == KIND_EMBED,
                                .out_cap = &out_cap};
    if (x->kind == KIND_CHAT) {
        size_t body_len = 0;
        (void)gw_http_req_body(x->req, &body_len);
        ask.est_input_tokens = canon_estimate_tokens(x->creq);
        ask.max_input_tokens = dp_limits_input_bound(x->creq, body_len);
        ask.max_tokens = x->creq->has_max_tokens ? x->creq->max_tokens : 0;
        ask.max_tokens_param = canon_field_name(x->creq, CANON_F_MAX_TOKENS);
        ask.reasoning_budget = x->creq->reasoning_off ? 0 : x->creq->reasoning_budget;
        ask.cache_marks = dp_limits_cache_marks(x->creq);
    } else {
        for (size_t i = 0; i < x->ereq.ninputs; i++) {
            int64_t len = (int64_t)strlen(x->ereq.inputs[i]);
            ask.est_input_tokens += len / 4 + 1;
            ask.max_input_tokens += len;
        }
    }
    struct dp_limits_refusal r;
    enum dp_limits_verdict v = dp_limits_reserve(&ask, x->w->base, on_reserved, x, &x->hold, &r);
    if (v == DP_LIMITS_REFUSED) {
        reply_quota(x, &r);
        exchange_end(x);
        return;
    }
    drop_candidates(x, drop);
    /* A worst case was sized with this output cap: the providers get it,
     * so no answer can be longer than what was reserved. */
    if (out_cap > 0 && x->kind == KIND_CHAT) {
        x->creq->has_max_tokens = 1;
        x->creq->max_tokens = out_cap;
        x->out_cap = out_cap;
    }
    if (v == DP_LIMITS_GO)
        start_attempt(x);
}

/* The common start of chat and embeddings once the exchange exists: plan,
 * then the quota step, then the first attempt. Takes over x. */
static void route_and_start(struct dp_exchange *x, const char *selector, const struct dp_needs *n)
{
    if (plan(x, selector, n)) {
        x->req = NULL;
        exchange_free(x);
        return;
    }
    gw_http_req_on_close(x->req, on_client_close, x);
    reserve_then_start(x);
}

void dp_exchange_chat(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                      const struct dp_key *key, const char *request_id, const struct dp_facade *fc)
{
    json_t *root = load_body(req, fc, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    struct canon_req *cr = canon_req_new(root);
    struct dp_exchange *x = cr ? exchange_new(w, req, snap, key, request_id, KIND_CHAT, fc) : NULL;
    if (!x) {
        reply_early(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
        canon_req_free(cr);
        dp_snapshot_unref(snap);
        return;
    }
    x->creq = cr;
    /* A facade whose format a driver speaks parses leniently: what only
     * that format carries goes to such a target untouched (build). */
    cr->lenient = fc->wire != NULL;
    struct canon_err err = {0};
    if (fc->parse(cr, &err) != GW_OK) {
        if (!err.status)
            canon_err_set(&err, 500, NULL, "internal_error", "out of memory");
        reply_early(req, fc, request_id, err.status, err.param[0] ? err.param : NULL, err.code,
                    err.message);
        x->req = NULL;
        exchange_free(x);
        return;
    }
    x->client_stream = cr->stream;
    struct dp_needs n;
    dp_needs_of(cr, &n);
    route_and_start(x, cr->model, &n);
}

/* ------------------------------------------------- embeddings: request, answer */

static int parse_embed_req(struct dp_exchange *x, json_t *root, struct canon_err *err)
{
    static const char *const keys[] = {"model",           "input", "dimensions",
                                       "encoding_format", "user",  NULL};
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        int ok = json_is_null(v);
        for (const char *const *kk = keys; *kk && !ok; kk++)
            ok = strcmp(*kk, k) == 0;
        if (!ok) {
            canon_err_set(err, 400, k, "unsupported_parameter", "'%s' is not supported", k);
            return GW_EINVAL;
        }
    }
    json_t *in = json_object_get(root, "input");
    size_t n = json_is_string(in) ? 1 : json_is_array(in) ? json_array_size(in) : 0;
    if (n == 0 || n > 2048) {
        canon_err_set(err, 400, "input", "invalid_request",
                      "'input' must be a string or an array of 1 to 2048 strings");
        return GW_EINVAL;
    }
    x->ereq.inputs = calloc(n, sizeof(char *));
    if (!x->ereq.inputs)
        return GW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(in) ? in : json_array_get(in, i);
        if (!json_is_string(s) || json_string_length(s) == 0) {
            canon_err_set(err, 400, "input", "invalid_request",
                          "'input' must hold non-empty strings (token arrays are not supported)");
            return GW_EINVAL;
        }
        x->ereq.inputs[x->ereq.ninputs++] = json_string_value(s);
    }
    json_t *dim = json_object_get(root, "dimensions");
    if (dim && !json_is_null(dim)) {
        if (!json_is_integer(dim) || json_integer_value(dim) < 1 ||
            json_integer_value(dim) > 65536) {
            canon_err_set(err, 400, "dimensions", "invalid_request",
                          "'dimensions' must be an integer from 1 to 65536");
            return GW_EINVAL;
        }
        x->ereq.dimensions = json_integer_value(dim);
    }
    const char *ef = gw_json_str(root, "encoding_format");
    if (ef && strcmp(ef, "float") && strcmp(ef, "base64")) {
        canon_err_set(err, 400, "encoding_format", "invalid_request",
                      "'encoding_format' must be float or base64");
        return GW_EINVAL;
    }
    x->embed_base64 = ef && strcmp(ef, "base64") == 0;
    x->ereq.user = gw_json_str(root, "user");
    return GW_OK;
}

static int b64_floats(struct gw_buf *out, const double *v, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = n * 4;
    unsigned char *raw = malloc(len ? len : 1);
    if (!raw)
        return GW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        float f = (float)v[i];
        memcpy(raw + i * 4, &f, 4); /* little-endian, as OpenAI sends it */
    }
    int rc = GW_OK;
    for (size_t i = 0; rc == GW_OK && i < len; i += 3) {
        unsigned x = (unsigned)raw[i] << 16;
        if (i + 1 < len)
            x |= (unsigned)raw[i + 1] << 8;
        if (i + 2 < len)
            x |= raw[i + 2];
        char q[4] = {tbl[(x >> 18) & 63], tbl[(x >> 12) & 63],
                     i + 1 < len ? tbl[(x >> 6) & 63] : '=', i + 2 < len ? tbl[x & 63] : '='};
        rc = gw_buf_append(out, q, 4);
    }
    free(raw);
    return rc;
}

static int render_embed(struct dp_exchange *x, const struct canon_embed_resp *e, struct gw_buf *o)
{
    int rc = gw_buf_appends(o, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; rc == GW_OK && i < e->nvec; i++) {
        rc = gw_buf_printf(
            o, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
        const double *v = e->values + i * e->dim;
        if (rc == GW_OK && x->embed_base64) {
            rc = gw_buf_appends(o, "\"");
            if (rc == GW_OK)
                rc = b64_floats(o, v, e->dim);
            if (rc == GW_OK)
                rc = gw_buf_appends(o, "\"");
        } else {
            for (size_t j = 0; rc == GW_OK && j < e->dim; j++)
                rc = gw_buf_printf(o, "%s%.9g", j ? "," : "[", v[j]);
            if (rc == GW_OK)
                rc = gw_buf_appends(o, "]");
        }
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "}");
    }
    if (rc == GW_OK)
        rc = gw_buf_appends(o, "],\"model\":");
    /* The model that answered, as for chat; the target's when the provider
     * does not say. */
    const char *model = e->model[0] ? e->model : x->model;
    if (rc == GW_OK)
        rc = gw_json_escape(o, model, strlen(model));
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}",
                           (long long)e->usage.input, (long long)e->usage.input);
    return rc;
}

/* -------------------------------------------------------------- embeddings */

static void finish_embed(struct dp_exchange *x)
{
    struct canon_embed_resp e = {0};
    char msg[256] = "";
    int rc = x->prov->drv->parse_embed(x->coll.data ? x->coll.data : "", x->coll.len, &e, msg,
                                       sizeof(msg));
    if (rc != GW_OK || e.nvec != x->ereq.ninputs) {
        attempt_failed(x, CANON_FAIL_PROVIDER_5XX, x->status,
                       rc != GW_OK
                           ? (msg[0] ? msg : "the provider's embeddings answer is malformed")
                           : "the provider returned a different number of embeddings "
                             "than inputs");
        canon_embed_resp_free(&e);
        return;
    }
    x->terminal = 1;
    x->committed = 1;
    x->t_first_content = x->t_client_first = gw_now_us();
    x->usage = e.usage;
    gw_buf_reset(&x->out);
    rc = render_embed(x, &e, &x->out);
    canon_embed_resp_free(&e);
    if (rc != GW_OK) {
        internal_failure(x, "could not build the answer");
        return;
    }
    x->verdict = V_OK;
    struct gw_http_req *req = x->req;
    x->req = NULL;
    x->t_client_end = gw_now_us();
    x->final_status = 200;
    add_answer_headers(req, x);
    add_cost_headers(req, x);
    gw_http_respond(req, 200, "application/json", x->out.data, x->out.len);
}

void dp_exchange_embed(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                       const struct dp_key *key, const char *request_id)
{
    json_t *root = load_body(req, NULL, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    struct dp_exchange *x = exchange_new(w, req, snap, key, request_id, KIND_EMBED, NULL);
    if (!x) {
        json_decref(root);
        reply_early(req, NULL, request_id, 500, NULL, "internal_error", "out of memory");
        dp_snapshot_unref(snap);
        return;
    }
    /* The inputs point into the body, which every attempt's build reads. */
    x->eroot = root;
    struct canon_err err = {0};
    int rc = parse_embed_req(x, root, &err);
    if (rc != GW_OK) {
        if (rc == GW_EINVAL)
            reply_early(req, NULL, request_id, err.status, err.param[0] ? err.param : NULL,
                        err.code, err.message);
        else
            reply_early(req, NULL, request_id, 500, NULL, "internal_error", "out of memory");
        x->req = NULL;
        exchange_free(x);
        return;
    }
    struct dp_needs n = {.embeddings = 1};
    route_and_start(x, gw_json_str(root, "model"), &n);
}

/* ------------------------------------------------------------ count_tokens */

void dp_exchange_count_tokens(struct dp_worker *w, struct gw_http_req *req,
                              struct dp_snapshot *snap, const struct dp_key *key,
                              const char *request_id, const struct dp_facade *fc)
{
    (void)w;
    json_t *root = load_body(req, fc, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    /* count_tokens takes a messages request without max_tokens. */
    if (!json_object_get(root, "max_tokens"))
        json_object_set_new(root, "max_tokens", json_integer(1));
    struct canon_req *cr = canon_req_new(root);
    struct canon_err err = {0};
    struct dp_plan *p = calloc(1, sizeof(*p));
    if (!cr || !p) {
        reply_early(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
    } else if (fc->parse(cr, &err) != GW_OK) {
        reply_early(req, fc, request_id, err.status ? err.status : 500,
                    err.param[0] ? err.param : NULL, err.code[0] ? err.code : "internal_error",
                    err.message[0] ? err.message : "out of memory");
    } else {
        /* The selector must name something this key may use; health does
         * not matter to an estimate. */
        struct dp_needs n;
        dp_needs_of(cr, &n);
        struct dp_route_ctx ctx = {.key = key, .request_id = request_id, .now_us = gw_now_us()};
        if (!cr->model || !*cr->model) {
            reply_early(req, fc, request_id, 400, "model", "missing_required_parameter",
                        "you must provide a model parameter");
        } else if (dp_router_plan(snap, cr->model, &n, &ctx, p) != GW_OK) {
            reply_early(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
        } else if (p->ncands == 0) {
            reply_early(req, fc, request_id, dp_no_route_status(p->cause), "model",
                        dp_no_route_code(p->cause), p->message);
        } else {
            char body[160];
            /* No provider counts for us: this is the gateway's estimate, and
             * says so, rather than a number that looks exact. */
            int len = snprintf(body, sizeof(body), "{\"input_tokens\":%lld,\"estimated\":true}",
                               canon_estimate_tokens(cr));
            (void)gw_http_add_header(req, "x-llmgw-estimate", "true");
            dp_log_simple(req, request_id, 200, NULL);
            gw_http_respond(req, 200, "application/json", body, (size_t)len);
        }
    }
    free(p);
    canon_req_free(cr);
    dp_snapshot_unref(snap);
}
