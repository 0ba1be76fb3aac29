/*
 * The record phase: what an attempt and a request leave behind. Each
 * attempt's record is built once (x_record_attempt) and feeds the breaker,
 * the fleet view, its log line, its ledger row, the limits' charges and the
 * metrics; the request's line and metrics follow when it ends. Logs carry
 * fields only, never request or answer text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_breaker.h"
#include "dp_cache_key.h"
#include "dp_cost.h"
#include "dp_fleet.h"
#include "dp_ledger.h"
#include "dp_limits.h"
#include "dp_metrics.h"
#include "dp_snapshot.h"
#include "dp_tokens.h"
#include "exchange.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_money.h"
#include "gw_time.h"

/* One attempt's record, built once when it ends (x_record_attempt): the
 * breaker, the fleet view, the log line, the ledger row, the limits'
 * charges and the metrics all read this one. */
struct attempt_rec {
    struct dp_outcome o; /* the breaker's and the fleet view's */
    struct dp_metrics_target mt;
    const char *verdict;       /* "ok", "failed", "broke", "canceled" */
    const char *failure_class; /* failed or broke: the class; else NULL */
    int64_t end;
};

static const char *api_name(const struct dp_exchange *x)
{
    return x->kind == KIND_EMBED   ? "openai.embeddings"
           : x->kind == KIND_MEDIA ? x_media_api(x)
                                   : x->fc->name;
}

/* ---------------------------------------------------------------- logs */

/* The lines are built member by member without printf: two a request. */

/* ,"name": (name is one of ours: nothing to escape) */
static int field_key(struct gw_buf *o, const char *name)
{
    int rc = gw_buf_appends(o, ",\"");
    if (rc == GW_OK)
        rc = gw_buf_appends(o, name);
    return rc == GW_OK ? gw_buf_appends(o, "\":") : rc;
}

/* ,"name":<escaped string> */
static int field_str(struct gw_buf *o, const char *name, const char *v)
{
    int rc = field_key(o, name);
    return rc == GW_OK ? gw_json_escape(o, v, strlen(v)) : rc;
}

static int field_int(struct gw_buf *o, const char *name, long long v)
{
    int rc = field_key(o, name);
    return rc == GW_OK ? gw_buf_append_int(o, v) : rc;
}

static int field_bool(struct gw_buf *o, const char *name, int v)
{
    int rc = field_key(o, name);
    return rc == GW_OK ? gw_buf_appends(o, v ? "true" : "false") : rc;
}

/* Milliseconds with three decimals, from microseconds. */
static int field_ms(struct gw_buf *o, const char *name, int64_t from, int64_t to)
{
    int64_t us = to - from;
    int rc = field_key(o, name);
    if (rc == GW_OK && us < 0) {
        rc = gw_buf_appends(o, "-");
        us = -us;
    }
    if (rc == GW_OK)
        rc = gw_buf_append_int(o, (long long)(us / 1000));
    char frac[4] = {'.', (char)('0' + us % 1000 / 100), (char)('0' + us % 100 / 10),
                    (char)('0' + us % 10)};
    return rc == GW_OK ? gw_buf_append(o, frac, 4) : rc;
}

static int field_usage(struct gw_buf *o, const struct canon_usage *u)
{
    int rc = gw_buf_appends(o, ",\"tokens\":{\"input\":");
    if (rc == GW_OK)
        rc = gw_buf_append_int(o, (long long)u->input);
    if (rc == GW_OK)
        rc = field_int(o, "cache_read", (long long)u->cache_read);
    if (rc == GW_OK)
        rc = field_int(o, "cache_write_5m", (long long)u->cache_write_5m);
    if (rc == GW_OK)
        rc = field_int(o, "cache_write_1h", (long long)u->cache_write_1h);
    if (rc == GW_OK)
        rc = field_int(o, "output", (long long)u->output);
    if (rc == GW_OK)
        rc = field_int(o, "reasoning", (long long)u->reasoning);
    return rc == GW_OK ? gw_buf_appends(o, "}") : rc;
}

/* ,"order":["provider/model",...]: a route's order before the filters,
 * skipped entries included (docs/router.md). */
static int field_order(struct gw_buf *o, const struct choice *p)
{
    int rc = gw_buf_appends(o, ",\"order\":[");
    for (size_t i = 0; i < p->norder && rc == GW_OK; i++) {
        const struct dp_route_entry *e = &p->route->entries[p->order[i]];
        char t[DP_MAX_MODEL_ID + 160];
        int n = snprintf(t, sizeof(t), "%s/%s", e->provider->name, e->model);
        if (i)
            rc = gw_buf_appends(o, ",");
        if (rc == GW_OK)
            rc = gw_json_escape(o, t, n > 0 && (size_t)n < sizeof(t) ? (size_t)n : strlen(t));
    }
    return rc == GW_OK ? gw_buf_appends(o, "]") : rc;
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
static void log_attempt(struct dp_exchange *x, const struct attempt_rec *a)
{
    struct gw_buf *o = &x->logb;
    gw_buf_reset(o);
    int rc = log_head(x, o);
    if (rc == GW_OK)
        rc = field_str(o, "attempt_id", x->attempt_id);
    if (rc == GW_OK)
        rc = field_int(o, "attempt", x->nattempts);
    if (rc == GW_OK)
        rc = field_bool(o, "retry", x->tries > 1);
    if (rc == GW_OK)
        rc = field_bool(o, "probe", x->probe);
    if (rc == GW_OK && x->fleet_probe)
        rc = field_bool(o, "fleet_probe", 1);
    if (rc == GW_OK)
        rc = field_str(o, "outcome", a->verdict);
    if (rc == GW_OK && a->failure_class)
        rc = field_str(o, "error_class", a->failure_class);
    if (rc == GW_OK && x->status)
        rc = field_int(o, "upstream_status", x->status);
    if (rc == GW_OK)
        rc = field_ms(o, "latency_ms", x->ta0, a->end);
    if (rc == GW_OK && x->t_first_byte)
        rc = field_ms(o, "ttfb_ms", x->ta0, x->t_first_byte);
    if (rc == GW_OK && x->t_first_content)
        rc = field_ms(o, "ttfc_ms", x->ta0, x->t_first_content);
    if (rc == GW_OK && x->usage.have)
        rc = field_usage(o, &x->usage);
    if (rc == GW_OK && x->usage_estimated)
        rc = field_bool(o, "usage_estimated", 1);
    if (rc == GW_OK)
        rc = field_int(o, "snapshot_version", (long long)x->snap->version);
    /* The request's last attempt goes out with the request's line, in one
     * write; an attempt the loop goes on from, at once. */
    if (rc == GW_OK && x->verdict == V_FAILED && x->req)
        gw_log_access_fields("attempt", o->data, o->len);
    else if (rc == GW_OK)
        (void)gw_log_access_line(&x->logs, "attempt", o->data, o->len);
}

/* ---------------------------------------------------------------- ledger */

/* Prices the current attempt once, when its usage is final: at its DONE
 * (so a stream's last event can carry it) or when it ends otherwise. The
 * prices are the snapshot's the attempt ran under. No tokens: exactly 0.
 * Tokens of a class with no price, or an overflow: unknown (NULL in the
 * ledger, counted and warned about), never a guess. */
void x_price(struct dp_exchange *x)
{
    if (x->priced || !x->prov)
        return;
    x->priced = 1;
    const struct dp_cache_meta *hit = x_cache_meta(x);
    if (hit) { /* no upstream call: nothing to pay, and what was saved */
        x->bill = (struct fc_bill){.set = 1,
                                   .ledger_id = dp_ledger_enabled() ? x->attempt_id : NULL,
                                   .has_cost = 1,
                                   .currency = hit->currency[0] ? hit->currency : "USD",
                                   .cache_hit = 1,
                                   .has_saved = hit->has_cost,
                                   .saved_picodollars = hit->cost_picodollars};
        return;
    }
    const struct canon_usage *u = &x->usage;
    const struct dp_price *p = dp_snapshot_price(x->snap, x->prov->name, x->model);
    int64_t cost = 0;
    int rc = GW_OK;
    if (x->kind == KIND_MEDIA)
        rc = x_media_cost(x, p, &cost);
    else if (u->input || u->cache_read || u->cache_write_5m || u->cache_write_1h || u->output)
        rc = p ? dp_cost(p, u, &cost) : GW_ENOENT;
    struct dp_metrics_target mt;
    x_metrics_target(x, &mt);
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
                                 : x->kind == KIND_MEDIA        ? "no price for the media units"
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

/* The attempt's charges on the request's limits, and its ledger row
 * (exactly one per attempt that went upstream). */
static void charge_and_ledger(struct dp_exchange *x, const struct attempt_rec *a)
{
    /* What the attempt took from each limit: counted here, whether or not
     * a ledger takes the row, so the request's end trues up its leases. A
     * cached answer took no tokens and cost nothing: it counts as a
     * request only. */
    static const struct canon_usage none;
    const struct canon_usage *u = x->cache_hit ? &none : &x->usage;
    struct dp_charge charges[DP_MAX_CHARGES];
    int usd = x->bill.currency && strcmp(x->bill.currency, "USD") == 0; /* budgets are USD */
    size_t ncharges = dp_limits_charges(x->hold, x->cache_hit ? 1 : x->nattempts, u,
                                        x->bill.cost_picodollars, x->bill.has_cost && usd,
                                        dp_snapshot_price(x->snap, x->prov->name, x->model),
                                        charges, DP_MAX_CHARGES);
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
               a->failure_class           ? a->failure_class
               : x->verdict == V_CANCELED ? "canceled"
                                          : NULL);
    copy_field(r->currency, sizeof(r->currency), x->bill.currency);
    r->attempt = x->cache_hit ? 1 : x->nattempts;
    r->status = x->cache_hit ? x->final_status : x->status;
    r->cache_hit = x->cache_hit;
    r->has_saved = x->cache_hit && x->bill.has_saved;
    r->saved_picodollars = r->has_saved ? x->bill.saved_picodollars : 0;
    r->stream = x->client_stream;
    r->has_cost = x->bill.has_cost;
    r->usage_estimated = x->usage_estimated;
    r->cost_picodollars = x->bill.cost_picodollars;
    r->input_tokens = u->input;
    r->cache_read_tokens = u->cache_read;
    r->cache_write_5m_tokens = u->cache_write_5m;
    r->cache_write_1h_tokens = u->cache_write_1h;
    r->output_tokens = u->output;
    r->reasoning_tokens = u->reasoning;
    x_media_units(x, &r->audio_ms, &r->characters, &r->images);
    r->latency_ms = ms_since(x->ta0, a->end);
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
void x_add_cost_headers(struct gw_http_req *req, struct dp_exchange *x)
{
    x_price(x);
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

void x_metrics_target(const struct dp_exchange *x, struct dp_metrics_target *t)
{
    t->route = x->plan.route ? x->plan.route->name : "";
    t->provider = x->prov ? x->prov->name : NULL;
    t->driver = x->prov ? x->prov->driver : NULL;
    t->model = x->prov ? x->mmodel : NULL;
    t->operation = x_operation(x);
}

const char *x_operation(const struct dp_exchange *x)
{
    return x->kind == KIND_EMBED   ? "embeddings"
           : x->kind == KIND_MEDIA ? x_media_operation(x)
                                   : "chat";
}

/* The request's metrics; end is its answer's end (docs/observability.md
 * defines each measure). */
static void metrics_request(struct dp_exchange *x, int64_t end)
{
    struct dp_metrics_target t;
    x_metrics_target(x, &t);
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
void x_log_request(struct dp_exchange *x)
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
        rc = field_int(o, "status", x->final_status);
    if (rc == GW_OK)
        rc = field_bool(o, "stream", x->client_stream);
    if (rc == GW_OK)
        rc = field_ms(o, "latency_ms", x->t0, end);
    if (rc == GW_OK && x->t_first_byte)
        rc = field_ms(o, "ttfb_ms", x->t0, x->t_first_byte);
    if (rc == GW_OK && x->t_client_first)
        rc = field_ms(o, "ttfc_ms", x->t0, x->t_client_first);
    if (rc == GW_OK && x->status)
        rc = field_int(o, "upstream_status", x->status);
    if (rc == GW_OK && x->usage.have)
        rc = field_usage(o, &x->usage);
    if (rc == GW_OK && x->usage_estimated)
        rc = field_bool(o, "usage_estimated", 1);
    if (rc == GW_OK && x->have_stop)
        rc = field_str(o, "stop_reason", canon_stop_name(x->stop));
    if (rc == GW_OK && x->cache_hit) /* its tokens are the original's */
        rc = field_str(o, "cache", "hit");
    if (rc == GW_OK)
        rc = field_str(o, "outcome", x->outcome ? x->outcome : "ok");
    if (rc == GW_OK && x->error_class)
        rc = field_str(o, "error_class", x->error_class);
    if (rc == GW_OK)
        rc = field_int(o, "attempts", x->nattempts);
    if (rc == GW_OK)
        rc = field_int(o, "retries", x->nretries);
    if (rc == GW_OK)
        rc = field_int(o, "failovers", x->nfailovers);
    if (rc == GW_OK && x->plan.route && x->plan.norder > 1)
        rc = field_order(o, &x->plan);
    if (rc == GW_OK && x->plan.scored_by)
        rc = field_str(o, "scored_by", x->plan.scored_by);
    if (rc == GW_OK && x->key)
        rc = field_str(o, "key_id", x->key->id);
    if (rc == GW_OK)
        rc = field_int(o, "snapshot_version", (long long)x->snap->version);
    if (rc == GW_OK)
        rc = gw_log_access_line(&x->logs, "access", o->data, o->len);
    gw_log_batch_add(x->l->access, &x->logs);
    metrics_request(x, end);
}

/* ------------------------------------------------------------ attempts */

/* The attempts so far as a JSON array, for an error answer. */
int x_attempts_json(const struct dp_exchange *x, struct gw_buf *o)
{
    int rc = gw_buf_appends(o, "[");
    for (size_t i = 0; rc == GW_OK && x->fails && i < x->fails->nfailed; i++) {
        const struct failed_attempt *h = &x->fails->failed[i];
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

struct xfail *x_fails(struct dp_exchange *x)
{
    if (!x->fails)
        x->fails = calloc(1, sizeof(*x->fails));
    return x->fails; /* NULL: the error answer says less */
}

void x_remember(struct dp_exchange *x, enum canon_failure f, int status, int refused)
{
    struct xfail *fl = x_fails(x);
    if (!fl)
        return;
    if (!refused) {
        memcpy(fl->last_msg, fl->fail_msg, sizeof(fl->last_msg));
        memcpy(fl->last_retry_after, x->retry_after, sizeof(fl->last_retry_after));
    }
    if (fl->nfailed < X_MAX_FAILED)
        fl->failed[fl->nfailed++] =
            (struct failed_attempt){x->prov->name, x->model, f, status, refused};
}

/* ------------------------------------------------------------- the record */

/* What a client received is paid for. An answer cut after its first
 * content (the client left, the upstream broke or went quiet) ends before
 * the provider's usage, which most formats send last; the provider bills
 * what it generated all the same. So the gateway fills in what is missing:
 * the input from the request's estimate (the reservation's), the output
 * from the content bytes the provider sent (about four a token, as the
 * input estimate counts), and marks the attempt's usage as estimated (its
 * ledger row, its log line). A count the provider did report stands where
 * it is the larger. */
static void estimate_usage(struct dp_exchange *x)
{
    if (!x->t_first_content || x->verdict == V_OK || x->priced)
        return;
    if (x->kind == KIND_MEDIA) {
        /* A media answer cut before it said what it used is priced by the
         * request's units (media.c): the gateway's account, flagged. */
        x->usage_estimated = 1;
        return;
    }
    struct canon_usage *u = &x->usage;
    int est = 0;
    if (canon_usage_prompt(u) == 0 && x->est_input > 0) {
        u->input = x->est_input;
        est = 1;
    }
    int64_t out = dp_tokens_text((size_t)x->out_bytes);
    if (u->output < out) {
        u->output = out;
        est = 1;
    }
    if (est) {
        u->have = 1;
        x->usage_estimated = 1;
    }
}

void x_record_attempt(struct dp_exchange *x, int64_t end)
{
    if (x->verdict == V_NONE)
        x->verdict = V_CANCELED;
    estimate_usage(x);
    x_price(x);
    int failed = x->verdict == V_FAILED || x->verdict == V_BROKE;
    struct attempt_rec a = {
        .o = {.provider = x->prov->name,
              .model = x->model,
              .ok = x->verdict == V_OK,
              /* A request's own budget running out says nothing about the
               * provider: no verdict. */
              .failure = failed && !x->budget_out ? x->failure : CANON_FAIL_CANCELED,
              .latency_us = end - x->ta0,
              .ttfb_us = x->t_first_byte ? x->t_first_byte - x->ta0 : 0,
              .ttfc_us = x->t_first_content ? x->t_first_content - x->ta0 : 0,
              .at_us = end},
        .verdict = verdict_names[x->verdict],
        .failure_class = failed ? canon_failure_name(x->failure) : NULL,
        .end = end,
    };
    x_metrics_target(x, &a.mt);
    dp_breaker_record(x->l->breakers, &a.o, x->probe);
    dp_fleet_record(&a.o, x->fleet_probe);
    log_attempt(x, &a);
    charge_and_ledger(x, &a);
    dp_metrics_attempt(&a.mt, a.verdict, a.failure_class, &x->usage);
    x_trace_attempt(x, a.failure_class, end);
}

/* A cached answer's record: no breaker, fleet or attempt metrics (no
 * provider was asked); its ledger row (cost 0, the saved cost) and its
 * charge on the limits (the request, nothing else). */
void x_record_hit(struct dp_exchange *x)
{
    x_price(x);
    struct attempt_rec a = {.verdict = verdict_names[x->verdict], .end = gw_now_us()};
    charge_and_ledger(x, &a);
}
