/* Tests for dataplane/quota/dp_limits.c (with dp_limits_lease.c and
 * dp_limits_sizing.c), with grants driven by hand (the control
 * plane's side is tests/unit/controlplane/leases_test.c): windows, sizing
 * (estimate, worst case, learned output, prices), leases and waiting,
 * charges and the true-up, depletion, the offline policies, stream loss,
 * renewals and idle releases, every refusal and its JSON. A fake clock
 * drives time; an event_base delivers the wake-ups. */
#include <CUnit/CUnit.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_limits.c"
#include "dp_limits_lease.c"
#include "dp_limits_sizing.c"

#include "dp_router.h"

static int64_t fake_wall = 1767225600000LL + 3600000; /* 2026-01-01T01:00:00Z */
static int64_t fake_mono = 1000000;

static int64_t wall_now(void)
{
    return fake_wall;
}

static int64_t mono_now(void)
{
    return fake_mono;
}

/* Single quotes stand for double quotes. */
static const char DOC[] =
    "{'version':1,"
    " 'providers':[{'name':'mock','driver':'openai','base_url':'http://m'},"
    "  {'name':'free','driver':'openai','base_url':'http://f'}],"
    " 'routes':[{'name':'r1','entries':[{'provider':'mock','model':'m1'}]},"
    "  {'name':'r2','entries':[{'provider':'mock','model':'m1'},{'provider':'free','model':'f1'}]},"
    "  {'name':'rf','entries':[{'provider':'free','model':'f1'}]},"
    "  {'name':'r3','entries':[{'provider':'mock','model':'m2'}]},"
    "  "
    "{'name':'r4','entries':[{'provider':'mock','model':'m1'},{'provider':'mock','model':'m2'}]}],"
    " 'catalog':[{'provider':'mock','model':'m1','input_price':10,'output_price':20,"
    "   'max_output_tokens':100},"
    "  {'provider':'mock','model':'m2','input_price':10,'output_price':20,'cache_read_price':1,"
    "   'cache_write_5m_price':12,'max_output_tokens':50}],"
    " 'teams':[{'name':'t1','require_budget':true},{'name':'t2'},{'name':'t3',"
    "   'require_budget':true}],"
    " 'keys':[{'id':'kA','hash':'" /* hashes are never looked up here */
    "0000000000000000000000000000000000000000000000000000000000000000','team':'t1',"
    "   'project':'p1'},"
    "  {'id':'kB','hash':'0000000000000000000000000000000000000000000000000000000000000001',"
    "   'team':'t2'},"
    "  {'id':'kC','hash':'0000000000000000000000000000000000000000000000000000000000000002',"
    "   'team':'t3'},"
    "  {'id':'kD','hash':'0000000000000000000000000000000000000000000000000000000000000003'},"
    "  {'id':'kE','hash':'0000000000000000000000000000000000000000000000000000000000000004'},"
    "  {'id':'kG','hash':'0000000000000000000000000000000000000000000000000000000000000005'},"
    "  {'id':'kH','hash':'0000000000000000000000000000000000000000000000000000000000000006'}],"
    " 'limits':["
    "  {'id':'cost-t1','scope_kind':'team','scope':'t1','metric':'cost','period':'day',"
    "   'amount':1000000,'offline':'fail_closed'},"
    "  {'id':'rpm-kB','scope_kind':'key','scope':'kB','metric':'requests','period':'minute',"
    "   'amount':5},"
    "  {'id':'tpm-kB','scope_kind':'key','scope':'kB','metric':'tokens','period':'minute',"
    "   'amount':10000,'reservation':'worst_case','offline':'fail_closed'},"
    "  {'id':'p1-month','scope_kind':'project','scope':'p1','metric':'tokens','period':'month',"
    "   'amount':50000},"
    "  {'id':'worst-kE','scope_kind':'key','scope':'kE','metric':'cost','period':'day',"
    "   'amount':1000000000,'reservation':'worst_case','offline':'fail_closed'},"
    "  {'id':'open-kG','scope_kind':'key','scope':'kG','metric':'cost','period':'day',"
    "   'amount':1000000},"
    "  {'id':'allow-kH','scope_kind':'key','scope':'kH','metric':'cost','period':'day',"
    "   'amount':1000000,'unpriced':'allow'}]}";

static struct dp_snapshot *snap;
static struct event_base *base;

static struct dp_snapshot *build_doc(const char *text, char *err, size_t errlen)
{
    char *t = strdup(text);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_error_t je;
    json_t *j = json_loads(t, 0, &je);
    if (!j)
        fprintf(stderr, "\n  not JSON (%s): %s\n", je.text, t);
    free(t);
    if (!j) {
        snprintf(err, errlen, "not JSON");
        return NULL;
    }
    struct dp_snapshot *s = dp_snapshot_build(j, err, errlen);
    json_decref(j);
    return s;
}

static int suite_init(void)
{
    char err[256] = "";
    snap = build_doc(DOC, err, sizeof(err));
    if (!snap) {
        fprintf(stderr, "snapshot: %s\n", err);
        return 1;
    }
    base = event_base_new();
    dpl.wall = wall_now;
    dpl.mono = mono_now;
    return base ? 0 : 1;
}

static int suite_clean(void)
{
    dp_snapshot_unref(snap);
    event_base_free(base);
    return 0;
}

/* Forgets every account, lease, release and learned estimate. */
static void reset(void)
{
    while (dpl.accounts) {
        struct account *a = dpl.accounts;
        dpl.accounts = a->next;
        free(a);
    }
    dpl.naccounts = 0;
    while (dpl.leases) {
        struct lease *l = dpl.leases;
        dpl.leases = l->next;
        free(l);
    }
    dpl.up = 0;
    dpl.down_since = 0;
    memset(dpl.learned, 0, sizeof(dpl.learned));
}

static const struct dp_key *key(const char *id)
{
    struct gw_pmap_iter it;
    const struct dp_key *k;
    for (dp_snapshot_iter(&snap->keys, &it); (k = dp_snapshot_next(&it)) != NULL;)
        if (strcmp(k->id, id) == 0)
            return k;
    CU_FAIL_FATAL("no such key");
    return NULL;
}

/* A request through route (its entries as candidates). */
struct req {
    struct dp_candidate cands[4];
    unsigned char drop[4];
    struct dp_limits_ask ask;
    struct dp_limits_hold *hold;
    struct dp_limits_refusal r;
    int called;
    int cb_refused;
    struct dp_limits_refusal cb_r;
};

static void ask_for(struct req *q, const char *key_id, const char *route)
{
    memset(q, 0, sizeof(*q));
    const struct dp_route *rt = dp_snapshot_route(snap, route, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
    for (size_t i = 0; i < rt->nentries; i++) {
        q->cands[i].provider = rt->entries[i].provider;
        q->cands[i].model = rt->entries[i].model;
        q->cands[i].entry = &rt->entries[i];
    }
    q->ask = (struct dp_limits_ask){.snap = snap,
                                    .key = key(key_id),
                                    .cands = q->cands,
                                    .ncands = rt->nentries,
                                    .drop = q->drop,
                                    .est_input_tokens = 100,
                                    .max_input_tokens = 400,
                                    .max_tokens = 0,
                                    .max_tokens_param = "max_tokens"};
}

static void on_decided(void *arg, const struct dp_limits_refusal *r)
{
    struct req *q = arg;
    q->called++;
    q->cb_refused = r != NULL;
    if (r)
        q->cb_r = *r;
}

static enum dp_limits_verdict reserve(struct req *q)
{
    return dp_limits_reserve(&q->ask, base, on_decided, q, &q->hold, &q->r);
}

/* Runs the loop until nothing is ready. */
static void pump(void)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
}

/* The next outgoing message, as the client thread would get it. */
static int next(Llmgw__V1__ReportMessage *m, struct dp_limits_out *st)
{
    llmgw__v1__report_message__init(m);
    return dp_limits_next_out(m, st);
}

/* A grant (or an answer to a report) as the control plane gives it: a
 * lease living 60 s (ttl_ms), and its expiry on the control plane's clock,
 * which is off by skew_ms from ours (display only). */
static int64_t skew_ms;
static int64_t ttl_ms = 60000;

static void grant(uint64_t req, const char *limit, int64_t ws, const char *lease, int64_t amount,
                  int64_t remaining, const char *refusal)
{
    Llmgw__V1__LeaseGrant g = LLMGW__V1__LEASE_GRANT__INIT;
    g.req = req;
    g.limit_id = (char *)limit;
    g.window_start_ms = ws;
    g.lease_id = (char *)lease;
    g.amount = amount;
    g.limit = 1000000;
    g.spent = 1000000 - remaining - amount;
    g.remaining = remaining;
    g.expires_at_ms = refusal[0] || (!amount && !ttl_ms) ? 0 : fake_wall + skew_ms + 60000;
    g.ttl_ms = refusal[0] ? 0 : ttl_ms;
    g.refusal = (char *)refusal;
    dp_limits_on_grant(&g);
}

/* Answers a report (want 0) as the control plane does: renewed (ttl) when
 * it was not final. */
static void answer(const Llmgw__V1__LeaseRequest *rq, const char *refusal)
{
    CU_ASSERT_EQUAL_FATAL(rq->want, 0);
    CU_ASSERT_FATAL(rq->lease_id && rq->lease_id[0]);
    int64_t keep = ttl_ms;
    if (rq->final)
        ttl_ms = 0;
    grant(rq->req, rq->limit_id, rq->window_start_ms, rq->lease_id, 0, 100, refusal);
    ttl_ms = keep;
}

static int notified;
static void on_notify(void *arg)
{
    (void)arg;
    notified++;
}

/* ---------------------------------------------------------------- tests */

static void test_windows(void)
{
    int64_t s, e;
    window_of(DP_LIMIT_MINUTE, 1767225600000LL + 61500, &s, &e);
    CU_ASSERT_EQUAL(s, 1767225600000LL + 60000);
    CU_ASSERT_EQUAL(e, 1767225600000LL + 120000);
    window_of(DP_LIMIT_DAY, 1767225600000LL + 86399999, &s, &e);
    CU_ASSERT_EQUAL(s, 1767225600000LL);
    CU_ASSERT_EQUAL(e, 1767225600000LL + 86400000);
    /* December 2025 ends where January 2026 starts (UTC). */
    window_of(DP_LIMIT_MONTH, 1767225600000LL - 1, &s, &e);
    CU_ASSERT_EQUAL(s, 1764547200000LL); /* 2025-12-01 */
    CU_ASSERT_EQUAL(e, 1767225600000LL);
    window_of(DP_LIMIT_MONTH, 1767225600000LL, &s, &e);
    CU_ASSERT_EQUAL(s, 1767225600000LL);
    CU_ASSERT_EQUAL(e, 1769904000000LL); /* 2026-02-01 */
}

static void test_output_estimates(void)
{
    reset();
    uint64_t t = dpl_target_hash("p", "m");
    /* Nothing seen: the default, under the caps. */
    CU_ASSERT_EQUAL(output_estimate(t, 0, 0), DEFAULT_OUTPUT_ESTIMATE);
    CU_ASSERT_EQUAL(output_estimate(t, 40, 0), 40);
    CU_ASSERT_EQUAL(output_estimate(t, 0, 100), 100);
    /* Answers under a cap teach the share of it they use. */
    dpl_learn_answer(t, 50, 100, 0, 0);
    CU_ASSERT_EQUAL(output_estimate(t, 40, 0), 20);
    CU_ASSERT_EQUAL(output_estimate(t, 1000, 0), 500);
    CU_ASSERT_EQUAL(output_estimate(t, 1000, 300), 300);
    CU_ASSERT_EQUAL(output_estimate(t, 0, 0), DEFAULT_OUTPUT_ESTIMATE); /* not yet uncapped */
    dpl_learn_answer(t, 100, 100, 0, 0);                                /* share 1: moves 1/8 */
    CU_ASSERT_EQUAL(output_estimate(t, 1024, 0), 512 + 64);
    /* Uncapped answers teach their length. */
    dpl_learn_answer(t, 30, 0, 0, 0);
    CU_ASSERT_EQUAL(output_estimate(t, 0, 0), 30);
    dpl_learn_answer(t, 110, 0, 0, 0);
    CU_ASSERT_EQUAL(output_estimate(t, 0, 0), 40);
    /* Input: the rough count, corrected by what the provider counted. */
    CU_ASSERT_EQUAL(input_estimate(t, 100), 100 * COLD_INPUT_FACTOR);
    dpl_learn_answer(t, 0, 0, 300, 100);
    CU_ASSERT_EQUAL(input_estimate(t, 100), 300);
    dpl_learn_answer(t, 0, 0, 100, 100); /* 3 → 3 - 2/8 */
    CU_ASSERT_EQUAL(input_estimate(t, 100), 275);
    dpl_learn_answer(t, 0, 0, 1, 1000000); /* clamped at 1/16 */
    CU_ASSERT(input_estimate(t, 1000) > 1000);
    /* Another target is another story. */
    CU_ASSERT_EQUAL(output_estimate(dpl_target_hash("p", "m2"), 0, 0), DEFAULT_OUTPUT_ESTIMATE);
}

/* The input bound: the body's bytes, and what they do not show (an image,
 * a document by URL, also inside a tool result). */
static void test_input_bound(void)
{
    struct canon_part inner[] = {{.type = CANON_PART_IMAGE, .data = "AAAA"}};
    struct canon_part parts[] = {
        {.type = CANON_PART_TEXT, .text = "hi"},
        {.type = CANON_PART_DOCUMENT, .media_type = "application/pdf", .data = "JVBERi0="},
        {.type = CANON_PART_DOCUMENT, .url = "https://example.com/a.pdf"},
        {.type = CANON_PART_TOOL_RESULT, .content = inner, .ncontent = 1},
    };
    struct canon_message m = {.role = CANON_ROLE_USER, .parts = parts, .nparts = 4};
    struct canon_req r = {.messages = &m, .nmessages = 1};
    CU_ASSERT_EQUAL(dp_limits_input_bound(&r, 500),
                    500 + DP_LIMITS_URL_DOCUMENT_TOKENS + DP_LIMITS_IMAGE_TOKENS);
    m.nparts = 2; /* text and a document's bytes: the body bounds them */
    CU_ASSERT_EQUAL(dp_limits_input_bound(&r, 500), 500);
}

static void test_no_limits_and_never_configured(void)
{
    reset();
    struct req q;
    ask_for(&q, "kD", "r1"); /* no team, no limits: a hold that only learns */
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_GO);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q.hold);
    CU_ASSERT_EQUAL(q.hold->n, 0);
    struct dp_charge ch[DP_MAX_CHARGES];
    struct canon_usage u = {.input = 7, .output = 9, .have = 1};
    CU_ASSERT_EQUAL(dp_limits_charges(q.hold, 1, &u, 5, 1, NULL, ch, DP_MAX_CHARGES), 0);
    dp_limits_end(q.hold);
    CU_ASSERT_EQUAL(output_estimate(dpl_target_hash("mock", "m1"), 0, 0), 9);
    ask_for(&q, "kC", "r1"); /* team t3 requires a budget; none applies */
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_EQUAL(q.r.status, 402);
    CU_ASSERT_STRING_EQUAL(q.r.code, "budget_not_configured");
    CU_ASSERT_STRING_EQUAL(q.r.state, "never_configured");
    CU_ASSERT_STRING_EQUAL(q.r.scope, "t3");
    CU_ASSERT_EQUAL(q.r.retry_after_s, 0);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(dp_limits_refusal_json(&q.r, &b), 0);
    json_t *j = json_loadb(b.data, b.len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "scope_kind")), "team");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "metric")), "cost");
    CU_ASSERT(json_is_null(json_object_get(j, "id")));
    CU_ASSERT(json_is_null(json_object_get(j, "period")));
    CU_ASSERT(json_is_null(json_object_get(j, "amount")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "state")), "never_configured");
    json_decref(j);
    gw_buf_free(&b);
    CU_ASSERT_PTR_NULL(dpl.accounts); /* refused before the quota step: nothing touched */
}

static void test_no_control_plane(void)
{
    reset();
    /* Never connected: each limit's offline policy at once. */
    struct req q;
    ask_for(&q, "kA", "r1"); /* cost-t1 fails closed; p1-month fails open */
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_EQUAL(q.r.status, 402);
    CU_ASSERT_STRING_EQUAL(q.r.code, "budget_unallocated");
    CU_ASSERT_STRING_EQUAL(q.r.state, "unallocated");
    CU_ASSERT_STRING_EQUAL(q.r.limit_id, "cost-t1");
    CU_ASSERT_EQUAL(q.r.retry_after_s, UNALLOCATED_RETRY_S);
    CU_ASSERT_EQUAL(q.r.amount, 1000000);
    CU_ASSERT_EQUAL(q.r.spent, -1);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(dp_limits_refusal_json(&q.r, &b), 0);
    json_t *j = json_loadb(b.data, b.len, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "id")), "cost-t1");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "period")), "day");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "amount")), 1000000);
    CU_ASSERT(json_is_null(json_object_get(j, "spent")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "unit")), "picodollars");
    json_decref(j);
    gw_buf_free(&b);

    /* kB's limits: rpm fails open (unmetered), tpm fails closed. */
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 50;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_EQUAL(q.r.status, 429);
    CU_ASSERT_STRING_EQUAL(q.r.code, "rate_limited");
    CU_ASSERT_STRING_EQUAL(q.r.state, "unallocated");
    CU_ASSERT_STRING_EQUAL(q.r.limit_id, "tpm-kB");
    /* Nothing is left held by the refused request. */
    for (struct account *a = dpl.accounts; a; a = a->next)
        CU_ASSERT_EQUAL(a->holders, 0);
}

static void test_lease_wait_grant_charge_settle(void)
{
    reset();
    dp_limits_set_notify(on_notify, NULL);
    notified = 0;
    dp_limits_on_stream(1);
    struct req q;
    ask_for(&q, "kA", "r1");
    /* cost: 100 in × 2 (nothing learned: lean high) × 10 + 100 out (the
     * catalog's cap) × 20 = 4000; p1-month tokens: 200 + 100 = 300. Both
     * wait for a lease. */
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q.hold);
    CU_ASSERT(notified > 0);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    uint64_t reqs[2] = {0, 0};
    int64_t ws_day = 0, ws_month = 0;
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL_FATAL(next(&m, &st), 1);
        CU_ASSERT_EQUAL_FATAL(m.body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST);
        const Llmgw__V1__LeaseRequest *rq = m.lease_request;
        if (strcmp(rq->limit_id, "cost-t1") == 0) {
            CU_ASSERT_EQUAL(rq->need, 4000);
            CU_ASSERT_EQUAL(rq->want, 4000 * WANT_FACTOR);
            CU_ASSERT_EQUAL(rq->window_start_ms, 1767225600000LL);
            reqs[0] = rq->req;
            ws_day = rq->window_start_ms;
        } else {
            CU_ASSERT_STRING_EQUAL(rq->limit_id, "p1-month");
            CU_ASSERT_EQUAL(rq->need, 300);
            reqs[1] = rq->req;
            ws_month = rq->window_start_ms;
        }
    }
    CU_ASSERT_EQUAL(next(&m, &st), 0); /* each asked once */
    grant(reqs[0], "cost-t1", ws_day, "ls_day", 24000, 976000, "");
    pump();
    CU_ASSERT_EQUAL(q.called, 0); /* the other limit still waits */
    grant(reqs[1], "p1-month", ws_month, "ls_month", 1000, 40000, "");
    pump();
    CU_ASSERT_EQUAL(q.called, 1);
    CU_ASSERT_EQUAL(q.cb_refused, 0);

    /* Attempt 1 fails without usage, attempt 2 answers. */
    struct dp_charge ch[DP_MAX_CHARGES];
    struct canon_usage none = {0};
    CU_ASSERT_EQUAL(dp_limits_charges(q.hold, 1, &none, 0, 0, NULL, ch, DP_MAX_CHARGES), 0);
    struct canon_usage u = {.input = 80, .cache_read = 10, .output = 40, .have = 1};
    size_t n = dp_limits_charges(q.hold, 2, &u, 1900, 1, NULL, ch, DP_MAX_CHARGES);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ch[i].limit_id, "cost-t1") == 0) {
            CU_ASSERT_EQUAL(ch[i].amount, 1900);
            CU_ASSERT_STRING_EQUAL(ch[i].lease_id, "ls_day");
            CU_ASSERT_EQUAL(ch[i].window_start_ms, ws_day);
        } else {
            CU_ASSERT_EQUAL(ch[i].amount, 130);
            CU_ASSERT_STRING_EQUAL(ch[i].lease_id, "ls_month");
        }
    }
    struct account *day = account_find("cost-t1", ws_day);
    CU_ASSERT_EQUAL(day->balance, 24000 - 4000);
    dp_limits_end(q.hold);
    CU_ASSERT_EQUAL(day->balance, 24000 - 1900); /* the true-up */
    CU_ASSERT_EQUAL(day->holders, 0);
    CU_ASSERT_EQUAL(next(&m, &st), 0);

    /* The next request reserves from the balance at once, and its
     * estimates have learned from the last answer: 40 output tokens, and
     * a provider that counted 90 input tokens where the estimate said 100. */
    ask_for(&q, "kA", "r1");
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_GO);
    CU_ASSERT_EQUAL(day->balance, 24000 - 1900 - (90 * 10 + 40 * 20));
    /* Worse than reserved: the excess comes out of the balance. */
    u.output = 500;
    CU_ASSERT_EQUAL(dp_limits_charges(q.hold, 1, &u, 10000, 1, NULL, ch, DP_MAX_CHARGES), 2);
    dp_limits_end(q.hold);
    CU_ASSERT_EQUAL(day->balance, 24000 - 1900 - 10000);
    CU_ASSERT_EQUAL(next(&m, &st), 0);
}

static void test_depleted(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q;
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 50;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    uint64_t rpm = 0, tpm = 0;
    int64_t ws = 0;
    while (next(&m, &st)) {
        if (strcmp(m.lease_request->limit_id, "rpm-kB") == 0) {
            rpm = m.lease_request->req;
            CU_ASSERT_EQUAL(m.lease_request->need, 1);
        } else {
            tpm = m.lease_request->req;
            CU_ASSERT_EQUAL(m.lease_request->need, 400 + 50); /* the worst case */
        }
        ws = m.lease_request->window_start_ms;
    }
    CU_ASSERT_EQUAL(ws, fake_wall - fake_wall % 60000);
    grant(tpm, "tpm-kB", ws, "ls_t", 900, 9100, "");
    grant(rpm, "rpm-kB", ws, "", 0, 0, "depleted");
    pump();
    CU_ASSERT_EQUAL_FATAL(q.called, 1);
    CU_ASSERT_EQUAL(q.cb_refused, 1);
    CU_ASSERT_EQUAL(q.cb_r.status, 429);
    CU_ASSERT_STRING_EQUAL(q.cb_r.code, "rate_limited");
    CU_ASSERT_STRING_EQUAL(q.cb_r.state, "depleted");
    CU_ASSERT_STRING_EQUAL(q.cb_r.limit_id, "rpm-kB");
    CU_ASSERT_EQUAL(q.cb_r.remaining, 0);
    /* The window ends in 60 s minus what has gone of it. */
    CU_ASSERT_EQUAL(q.cb_r.retry_after_s, (ws + 60000 - fake_wall + 999) / 1000);
    dp_limits_end(q.hold);
    /* What the refused request held of the other limit went back. */
    CU_ASSERT_EQUAL(account_find("tpm-kB", ws)->balance, 900);
    /* Right after, a request is refused here without asking again. */
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 50;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_STRING_EQUAL(q.r.state, "depleted");
    CU_ASSERT_EQUAL(account_find("tpm-kB", ws)->balance, 900);
    CU_ASSERT_EQUAL(next(&m, &st), 0);
    /* A second later it asks again. */
    fake_mono += DEPLETED_MEMORY_MS;
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 50;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(next(&m, &st), 1);
    dp_limits_end(q.hold); /* the client left: canceled */
    CU_ASSERT_EQUAL(q.called, 0);
    pump();
    CU_ASSERT_EQUAL(q.called, 0);
}

static void test_worst_case_bounds(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q;
    /* No max_tokens: the catalog's max_output_tokens (100) bounds it. */
    ask_for(&q, "kB", "r1");
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    int seen = 0;
    while (next(&m, &st))
        if (strcmp(m.lease_request->limit_id, "tpm-kB") == 0) {
            CU_ASSERT_EQUAL(m.lease_request->need, 400 + 100);
            seen = 1;
        }
    CU_ASSERT(seen);
    dp_limits_end(q.hold);
    /* A target without a catalog cap and no max_tokens cannot be bounded. */
    ask_for(&q, "kB", "rf");
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_EQUAL(q.r.status, 400);
    CU_ASSERT_STRING_EQUAL(q.r.code, "max_tokens_required");
    CU_ASSERT_STRING_EQUAL(q.r.param, "max_tokens");
    /* With max_tokens it can. */
    ask_for(&q, "kB", "rf");
    q.ask.max_tokens = 7;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    dp_limits_end(q.hold);
}

/* A key's unpriced fallback (route r2) is dropped and a route with nothing
 * priced (rf) refused by its cost limit. */
static void expect_unpriced_refused(const char *key_id, const char *limit_id)
{
    struct req q;
    ask_for(&q, key_id, "r2");
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(q.drop[0], 0);
    CU_ASSERT_EQUAL(q.drop[1], 1);
    dp_limits_end(q.hold);
    ask_for(&q, key_id, "rf");
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_EQUAL(q.r.status, 402);
    CU_ASSERT_STRING_EQUAL(q.r.code, "budget_unpriced");
    CU_ASSERT_STRING_EQUAL(q.r.limit_id, limit_id);
    CU_ASSERT_PTR_NOT_NULL(strstr(q.r.message, "\"unpriced\" to \"allow\""));
}

static void test_unpriced(void)
{
    reset();
    dp_limits_on_stream(1);
    /* cost-t1 fails closed; the offline policy is no way past the price
     * either: open-kG fails open and refuses them all the same. */
    expect_unpriced_refused("kA", "cost-t1");
    expect_unpriced_refused("kG", "open-kG");
    /* Unless the limit says "unpriced": "allow": served, nothing dropped. */
    struct req q;
    ask_for(&q, "kH", "rf");
    CU_ASSERT_NOT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_EQUAL(q.drop[0], 0);
    dp_limits_end(q.hold);
}

static void test_stream_loss_and_deadline(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q;
    ask_for(&q, "kA", "r1");
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    while (next(&m, &st))
        ;
    /* The stream goes: the requests wait, and go again when it is back. */
    dp_limits_on_stream(0);
    CU_ASSERT_EQUAL(next(&m, &st), 0);
    dp_limits_on_stream(1);
    int again = 0;
    while (next(&m, &st))
        again++;
    CU_ASSERT_EQUAL(again, 2);
    /* No answer by the deadline: cost-t1 fails closed. */
    on_hold_event(-1, EV_TIMEOUT, q.hold);
    CU_ASSERT_EQUAL(q.called, 1);
    CU_ASSERT_EQUAL(q.cb_refused, 1);
    CU_ASSERT_STRING_EQUAL(q.cb_r.code, "budget_unallocated");
    dp_limits_end(q.hold);

    /* Fail open: the request goes, charged without a lease. */
    reset();
    dp_limits_on_stream(1);
    ask_for(&q, "kB", "r1"); /* rpm-kB fails open; tpm-kB gets a lease */
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    uint64_t tpm = 0;
    int64_t ws = 0;
    while (next(&m, &st))
        if (strcmp(m.lease_request->limit_id, "tpm-kB") == 0) {
            tpm = m.lease_request->req;
            ws = m.lease_request->window_start_ms;
        }
    grant(tpm, "tpm-kB", ws, "ls_t", 5000, 5000, "");
    on_hold_event(-1, EV_TIMEOUT, q.hold);
    CU_ASSERT_EQUAL(q.called, 1);
    CU_ASSERT_EQUAL(q.cb_refused, 0);
    struct dp_charge ch[DP_MAX_CHARGES];
    struct canon_usage u = {.input = 3, .output = 4, .have = 1};
    CU_ASSERT_EQUAL(dp_limits_charges(q.hold, 1, &u, 0, 0, NULL, ch, DP_MAX_CHARGES), 2);
    for (int i = 0; i < 2; i++)
        CU_ASSERT_STRING_EQUAL(ch[i].lease_id, strcmp(ch[i].limit_id, "rpm-kB") == 0 ? "" : "ls_t");
    dp_limits_end(q.hold);
    /* A grant nobody asked for is given back at once: a final report,
     * all of it released, nothing charged. */
    while (next(&m, &st))
        ;
    grant(987654321, "tpm-kB", ws, "ls_stray", 300, 100, "");
    CU_ASSERT_EQUAL(next(&m, &st), 1);
    CU_ASSERT_EQUAL(m.body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST);
    CU_ASSERT_STRING_EQUAL(m.lease_request->lease_id, "ls_stray");
    CU_ASSERT_EQUAL(m.lease_request->want, 0);
    CU_ASSERT_EQUAL(m.lease_request->released, 300);
    CU_ASSERT_EQUAL(m.lease_request->final, 1);
    CU_ASSERT_EQUAL(m.lease_request->charged, 0);
    answer(m.lease_request, "");
    CU_ASSERT_PTR_NULL(lease_find("ls_stray")); /* settled: forgotten */

    /* Down for longer than the wait: the policy decides at once. */
    dp_limits_on_stream(0);
    fake_mono += DP_LIMITS_WAIT_MS;
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_GO); /* tpm from its lease, rpm open */
    dp_limits_end(q.hold);
}

/* The lease requests of kB's two limits (tpm-kB, rpm-kB) going out; their
 * window start. */
static int64_t kb_requests(uint64_t *tpm, uint64_t *rpm)
{
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    int64_t ws = 0;
    while (next(&m, &st)) {
        ws = m.lease_request->window_start_ms;
        if (strcmp(m.lease_request->limit_id, "tpm-kB") == 0)
            *tpm = m.lease_request->req;
        else
            *rpm = m.lease_request->req;
    }
    return ws;
}

static void test_lease_replaced_and_released(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req a, b;
    ask_for(&a, "kB", "r1");
    a.ask.max_tokens = 100; /* tpm need 500 */
    CU_ASSERT_EQUAL(reserve(&a), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    uint64_t tpm = 0, rpm = 0;
    int64_t ws = kb_requests(&tpm, &rpm);
    grant(rpm, "rpm-kB", ws, "ls_r", 5, 0, "");
    grant(tpm, "tpm-kB", ws, "ls_1", 700, 9300, "");
    pump();
    CU_ASSERT_EQUAL(a.called, 1);
    struct account *t = account_find("tpm-kB", ws);
    CU_ASSERT_EQUAL(t->balance, 200);
    /* b needs 500 too: a new lease replaces ls_1, whose 200 go back. */
    ask_for(&b, "kB", "r1");
    b.ask.max_tokens = 100;
    CU_ASSERT_EQUAL(reserve(&b), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(next(&m, &st), 1);
    grant(m.lease_request->req, "tpm-kB", ws, "ls_2", 1000, 8300, "");
    pump();
    CU_ASSERT_EQUAL(b.called, 1);
    CU_ASSERT_STRING_EQUAL(t->lease->id, "ls_2");
    CU_ASSERT_EQUAL(t->balance, 500);
    /* ls_1's balance goes back in a report on it (not final: a holds
     * part of it). */
    CU_ASSERT_EQUAL(next(&m, &st), 1);
    CU_ASSERT_EQUAL(m.body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST);
    CU_ASSERT_STRING_EQUAL(m.lease_request->lease_id, "ls_1");
    CU_ASSERT_EQUAL(m.lease_request->released, 200);
    CU_ASSERT_EQUAL(m.lease_request->final, 0);
    answer(m.lease_request, "");
    /* a settles against ls_1: its unused part goes back to the control
     * plane, not into ls_2's balance, in ls_1's final report with what
     * was charged under it. */
    struct dp_charge ch[DP_MAX_CHARGES];
    struct canon_usage u = {.input = 100, .output = 50, .have = 1};
    CU_ASSERT_EQUAL(dp_limits_charges(a.hold, 1, &u, 0, 0, NULL, ch, DP_MAX_CHARGES), 2);
    dp_limits_end(a.hold);
    CU_ASSERT_EQUAL(next(&m, &st), 1);
    CU_ASSERT_STRING_EQUAL(m.lease_request->lease_id, "ls_1");
    CU_ASSERT_EQUAL(m.lease_request->released, 200 + 500 - 150);
    CU_ASSERT_EQUAL(m.lease_request->final, 1);
    CU_ASSERT_EQUAL(m.lease_request->charged, 150);
    CU_ASSERT_EQUAL(dp_limits_pending(), 1);
    answer(m.lease_request, "");
    CU_ASSERT_EQUAL(dp_limits_pending(), 0);
    CU_ASSERT_PTR_NULL(lease_find("ls_1"));
    CU_ASSERT_EQUAL(t->balance, 500);
    dp_limits_end(b.hold);
    CU_ASSERT_EQUAL(t->balance, 1000);
    CU_ASSERT_EQUAL(next(&m, &st), 0);
}

static void test_renewal_idle_release_expiry(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q;
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    int64_t ws = 0;
    while (next(&m, &st)) {
        ws = m.lease_request->window_start_ms;
        grant(m.lease_request->req, m.lease_request->limit_id, ws,
              strcmp(m.lease_request->limit_id, "tpm-kB") ? "ls_r" : "ls_t", 1000, 100, "");
    }
    pump();
    CU_ASSERT_EQUAL(q.called, 1);
    struct account *t = account_find("tpm-kB", ws);
    int64_t life = 60000 - EXPIRY_MARGIN_MS;
    CU_ASSERT_EQUAL(t->lease_until, fake_mono + life);
    /* Held past half its life: renewed (a report on it, not final). */
    fake_mono += life / 2 + 1;
    fake_wall += life / 2 + 1;
    int renewals = 0;
    while (next(&m, &st)) {
        CU_ASSERT_EQUAL(m.body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST);
        CU_ASSERT_EQUAL(m.lease_request->want, 0);
        CU_ASSERT_EQUAL(m.lease_request->final, 0);
        renewals++;
        answer(m.lease_request, "");
    }
    CU_ASSERT_EQUAL(renewals, 2);
    CU_ASSERT_EQUAL(t->lease_until, fake_mono + life);
    dp_limits_end(q.hold);
    /* Idle past half its life: given back instead (final reports). */
    fake_mono += life / 2 + 1;
    int released = 0;
    while (next(&m, &st)) {
        CU_ASSERT_EQUAL(m.body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST);
        CU_ASSERT_EQUAL(m.lease_request->final, 1);
        CU_ASSERT_EQUAL(m.lease_request->released, 1000);
        released++;
    }
    CU_ASSERT_EQUAL(released, 2);
    CU_ASSERT_PTR_NULL(t->lease);
    /* A window that ended is forgotten. */
    fake_wall += 120000;
    fake_mono += 120000;
    CU_ASSERT_EQUAL(next(&m, &st), 0);
    CU_ASSERT_PTR_NULL(account_find("tpm-kB", ws));
}

/* Without a control plane nothing calls next_out: reservations still
 * forget ended windows. */
static void test_windows_forgotten_without_stream(void)
{
    reset();
    struct req q;
    for (int i = 0; i < 10; i++) {
        ask_for(&q, "kB", "r1");
        q.ask.max_tokens = 10;
        CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED); /* tpm-kB fails closed */
        fake_wall += 60000;
        fake_mono += 60000;
    }
    CU_ASSERT(dpl.naccounts <= 2);
}

static void test_release_all(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q;
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    while (next(&m, &st))
        grant(m.lease_request->req, m.lease_request->limit_id, m.lease_request->window_start_ms,
              strcmp(m.lease_request->limit_id, "tpm-kB") ? "ls_r" : "ls_t", 1000, 100, "");
    pump();
    dp_limits_end(q.hold);
    dp_limits_release_all();
    int64_t total = 0;
    while (next(&m, &st)) {
        CU_ASSERT_EQUAL(m.lease_request->final, 1);
        total += m.lease_request->released;
    }
    CU_ASSERT_EQUAL(total, 2000);
}

/* Sends what is due; the request for limit among it: its number, window
 * and need. */
static int take_request(const char *limit, uint64_t *req, int64_t *ws, int64_t *need)
{
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    int found = 0;
    while (next(&m, &st))
        if (m.lease_request->want > 0 && strcmp(m.lease_request->limit_id, limit) == 0) {
            *req = m.lease_request->req;
            *ws = m.lease_request->window_start_ms;
            *need = m.lease_request->need;
            found = 1;
        }
    return found;
}

/* With far more left in the window than a lease, the next lease is asked
 * for once the balance is below a quarter of the current one, while
 * reservations still go from the balance: none waits on the control
 * plane. Asked again within seconds of the last grant, it is twice as
 * large. Near the limit nothing is asked ahead of need. */
static void test_lease_prefetch(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q[12];
    ask_for(&q[0], "kB", "r1");
    q[0].ask.max_tokens = 100; /* tpm need 500 */
    CU_ASSERT_EQUAL(reserve(&q[0]), DP_LIMITS_WAIT);
    uint64_t tpm = 0, rpm = 0;
    int64_t ws = kb_requests(&tpm, &rpm);
    grant(rpm, "rpm-kB", ws, "ls_r", 100, 0, ""); /* nothing more left: never ahead */
    grant(tpm, "tpm-kB", ws, "ls_1", 2000, 900000, "");
    pump();
    CU_ASSERT_EQUAL(q[0].called, 1);
    struct account *t = account_find("tpm-kB", ws);
    CU_ASSERT_EQUAL(t->balance, 1500);
    /* Down to 500 (a quarter): not yet. */
    for (int i = 1; i <= 2; i++) {
        ask_for(&q[i], "kB", "r1");
        q[i].ask.max_tokens = 100;
        CU_ASSERT_EQUAL(reserve(&q[i]), DP_LIMITS_GO);
    }
    uint64_t req = 0;
    int64_t need = 0, ws2 = 0;
    CU_ASSERT_FALSE(take_request("tpm-kB", &req, &ws2, &need));
    /* Below it: the next lease is asked for, and this one still goes. */
    ask_for(&q[3], "kB", "r1");
    q[3].ask.max_tokens = 100;
    CU_ASSERT_EQUAL(reserve(&q[3]), DP_LIMITS_GO);
    CU_ASSERT_EQUAL(t->balance, 0);
    CU_ASSERT_TRUE_FATAL(take_request("tpm-kB", &req, &ws2, &need));
    CU_ASSERT_EQUAL(need, 500);
    CU_ASSERT_EQUAL(t->req_want, 4000); /* twice ls_1: it went within seconds */
    CU_ASSERT_FALSE(take_request("rpm-kB", &req, &ws2, &need));
    /* The new lease replaces ls_1 (whose balance, 0, is reported). With
     * 10,000 left, less than 16 leases' worth, nothing is asked ahead. */
    grant(req, "tpm-kB", ws, "ls_2", 4000, 10000, "");
    pump();
    CU_ASSERT_STRING_EQUAL(t->lease->id, "ls_2");
    CU_ASSERT_EQUAL(t->balance, 4000);
    for (int i = 4; i <= 10; i++) {
        ask_for(&q[i], "kB", "r1");
        q[i].ask.max_tokens = 100;
        CU_ASSERT_EQUAL(reserve(&q[i]), DP_LIMITS_GO);
    }
    CU_ASSERT_EQUAL(t->balance, 500);
    CU_ASSERT_FALSE(take_request("tpm-kB", &req, &ws2, &need));
    for (int i = 0; i <= 10; i++)
        dp_limits_end(q[i].hold);
    CU_ASSERT_EQUAL(t->balance, 4000);
}

/* An attempt whose exact cost is unknown (a class without a price, an
 * overflow) is charged an upper bound against budgets; the ledger's cost
 * stays unknown. */
static void test_partly_priced_charges(void)
{
    struct dp_price p = {.input = 10,
                         .output = 20,
                         .cache_read = 1,
                         .cache_write_5m = 12,
                         .cache_write_1h = -1,
                         .reasoning = -1,
                         .currency = "USD"};
    struct canon_usage u = {.input = 100, .cache_write_1h = 50, .output = 30, .have = 1};
    int64_t cost = 0;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_ENOENT); /* the ledger: NULL */
    /* 1h writes at the entry's dearest price (output's, 20). */
    CU_ASSERT_EQUAL(dp_limits_cost_bound(&p, &u), 100 * 10 + 50 * 20 + 30 * 20);
    p.reasoning = 50; /* dearer reasoning: every output token at it, and the dearest is 50 */
    u.reasoning = 10;
    CU_ASSERT_EQUAL(dp_limits_cost_bound(&p, &u), 100 * 10 + 50 * 50 + 30 * 50);
    u.output = INT64_MAX / 2; /* an overflow: saturated, never wrapped */
    struct dp_price all = p;
    all.cache_write_1h = 24;
    CU_ASSERT_EQUAL(dp_cost(&all, &u, &cost), GW_ERANGE);
    CU_ASSERT_EQUAL(dp_limits_cost_bound(&all, &u), SAT_MAX);
    CU_ASSERT_EQUAL(dp_limits_cost_bound(&p, &u), SAT_MAX);
    CU_ASSERT_EQUAL(dp_limits_cost_bound(NULL, &u), -1);
    snprintf(p.currency, sizeof(p.currency), "EUR");
    CU_ASSERT_EQUAL(dp_limits_cost_bound(&p, &u), -1);

    /* Through a hold: kE's worst-case budget on m2 (no 1h price). The
     * worst case reserves the input at the dearest price (an unpriced
     * class may be charged at it): 400 x 20 + 10 x 20. */
    reset();
    dp_limits_on_stream(1);
    struct req q;
    ask_for(&q, "kE", "r3");
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    uint64_t rq = 0;
    int64_t ws = 0, need = 0;
    CU_ASSERT_FATAL(take_request("worst-kE", &rq, &ws, &need));
    CU_ASSERT_EQUAL(need, 400 * 20 + 10 * 20);
    grant(rq, "worst-kE", ws, "ls_w", 100000, 0, "");
    pump();
    CU_ASSERT_EQUAL_FATAL(q.called, 1);
    const struct dp_price *m2 = dp_snapshot_price(snap, "mock", "m2");
    struct canon_usage cw = {.input = 100, .cache_write_1h = 50, .output = 10, .have = 1};
    struct dp_charge ch[DP_MAX_CHARGES];
    CU_ASSERT_EQUAL_FATAL(dp_limits_charges(q.hold, 1, &cw, 0, 0, m2, ch, DP_MAX_CHARGES), 1);
    CU_ASSERT_EQUAL(ch[0].amount, 100 * 10 + 50 * 20 + 10 * 20);
    CU_ASSERT(ch[0].amount <= 400 * 20 + 10 * 20); /* within what was reserved */
    /* An exact cost is charged as it is. */
    CU_ASSERT_EQUAL(dp_limits_charges(q.hold, 2, &cw, 777, 1, m2, ch, DP_MAX_CHARGES), 1);
    CU_ASSERT_EQUAL(ch[0].amount, 777);
    dp_limits_end(q.hold);

    /* A request that asks for a 1h cache write: under a fail_closed
     * budget, candidates without a 1h price leave; none is left here. */
    ask_for(&q, "kE", "r4");
    q.ask.max_tokens = 10;
    q.ask.cache_marks = DP_LIMITS_CACHE_1H;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_STRING_EQUAL(q.r.code, "budget_unpriced");
    /* A 5m write: m1 has no price for it, m2 has. */
    ask_for(&q, "kE", "r4");
    q.ask.max_tokens = 10;
    q.ask.cache_marks = DP_LIMITS_CACHE_5M;
    CU_ASSERT_NOT_EQUAL(reserve(&q), DP_LIMITS_REFUSED);
    CU_ASSERT_EQUAL(q.drop[0], 1);
    CU_ASSERT_EQUAL(q.drop[1], 0);
    dp_limits_end(q.hold);
}

/* A worst case is sized with the output cap the request is then sent
 * with: the client's, else the smallest catalog cap of the candidates;
 * an explicit thinking budget counts beside it. */
static void test_worst_case_output_cap(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q;
    int64_t cap = -1;
    ask_for(&q, "kE", "r4"); /* m1 (cap 100) and m2 (cap 50) */
    q.ask.out_cap = &cap;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(cap, 50);
    uint64_t rq = 0;
    int64_t ws = 0, need = 0;
    CU_ASSERT_FATAL(take_request("worst-kE", &rq, &ws, &need));
    CU_ASSERT_EQUAL(need, 400 * 20 + 50 * 20);
    dp_limits_end(q.hold);
    /* The thinking budget is reserved too. */
    reset();
    dp_limits_on_stream(1);
    ask_for(&q, "kE", "r4");
    q.ask.out_cap = &cap;
    q.ask.reasoning_budget = 30;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(cap, 50);
    CU_ASSERT(take_request("worst-kE", &rq, &ws, &need));
    CU_ASSERT_EQUAL(need, 400 * 20 + (50 + 30) * 20);
    dp_limits_end(q.hold);
    /* The client's cap is the cap. */
    ask_for(&q, "kE", "r4");
    q.ask.out_cap = &cap;
    q.ask.max_tokens = 7;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(cap, 7);
    dp_limits_end(q.hold);
    /* A candidate without a catalog cap is sent the others' (tpm-kB, a
     * worst-case tokens limit, on m1 and the capless f1). */
    reset();
    dp_limits_on_stream(1);
    ask_for(&q, "kB", "r2");
    q.ask.out_cap = &cap;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(cap, 100);
    CU_ASSERT(take_request("tpm-kB", &rq, &ws, &need));
    CU_ASSERT_EQUAL(need, 400 + 100);
    dp_limits_end(q.hold);
    /* No worst case, no cap to send. */
    ask_for(&q, "kA", "r1");
    q.ask.out_cap = &cap;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    CU_ASSERT_EQUAL(cap, 0);
    dp_limits_end(q.hold);
}

/* A lease's life is counted on our monotonic clock from when its request
 * was sent, whatever the control plane's clock says; a renewal that
 * renewed nothing ends the lease here too. */
static void test_lease_life_own_clock(void)
{
    reset();
    dp_limits_on_stream(1);
    fake_wall = fake_wall - fake_wall % 60000 + 60000 + 1000; /* a minute's first second */
    struct req q;
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    uint64_t rq = 0;
    int64_t ws = 0, need = 0;
    int64_t sent = fake_mono;
    CU_ASSERT_FATAL(take_request("tpm-kB", &rq, &ws, &need));
    /* Answered 10 s later, by a control plane whose clock is an hour
     * behind ours. */
    fake_mono += 10000;
    fake_wall += 10000;
    skew_ms = -3600000;
    grant(rq, "tpm-kB", ws, "ls_t", 5000, 5000, "");
    skew_ms = 0;
    struct account *t = account_find("tpm-kB", ws);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t->lease);
    CU_ASSERT_EQUAL(t->lease_until, sent + 60000 - EXPIRY_MARGIN_MS);
    dp_limits_end(q.hold);
    /* Half its life on: a renewal, which the control plane could not
     * make (ttl 0): the lease is over, and its final report goes. */
    fake_mono = sent + 35000;
    fake_wall += 25000;
    ask_for(&q, "kB", "r1"); /* in use */
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT); /* rpm-kB has no lease yet */
    CU_ASSERT_EQUAL(q.hold->items[1].st, I_HELD); /* tpm-kB from ls_t */
    int renewals = 0;
    while (next(&m, &st))
        if (m.lease_request->want == 0) {
            CU_ASSERT_STRING_EQUAL(m.lease_request->lease_id, "ls_t");
            CU_ASSERT_EQUAL(m.lease_request->final, 0);
            renewals += t->lease != NULL;
            int64_t keep = ttl_ms;
            ttl_ms = 0;
            grant(m.lease_request->req, "tpm-kB", ws, "ls_t", 0, 100, "");
            ttl_ms = keep;
        }
    CU_ASSERT_EQUAL(renewals, 1);
    CU_ASSERT_PTR_NULL(t->lease);
    dp_limits_end(q.hold);
    int final = 0;
    while (next(&m, &st))
        if (m.lease_request->want == 0 && m.lease_request->final &&
            strcmp(m.lease_request->lease_id, "ls_t") == 0)
            final++;
    CU_ASSERT_EQUAL(final, 1);
}

/* Lease messages survive a lost stream: a report is kept until answered
 * and sent again on the next stream; a lease request goes again with its
 * number, and a second answer for a lease already held is not given
 * back. */
static void test_lease_messages_survive_stream_loss(void)
{
    reset();
    dp_limits_on_stream(1);
    struct req q;
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL_FATAL(reserve(&q), DP_LIMITS_WAIT);
    Llmgw__V1__ReportMessage m;
    struct dp_limits_out st;
    uint64_t rq[2] = {0, 0}, again[2] = {0, 0};
    int64_t ws = 0;
    while (next(&m, &st)) {
        rq[strcmp(m.lease_request->limit_id, "tpm-kB") == 0] = m.lease_request->req;
        ws = m.lease_request->window_start_ms;
    }
    dp_limits_on_stream(0);
    dp_limits_on_stream(1);
    while (next(&m, &st))
        again[strcmp(m.lease_request->limit_id, "tpm-kB") == 0] = m.lease_request->req;
    /* The same numbers: the same leases if they were granted. */
    CU_ASSERT_EQUAL(again[0], rq[0]);
    CU_ASSERT_EQUAL(again[1], rq[1]);
    grant(rq[1], "tpm-kB", ws, "ls_t", 5000, 5000, "");
    grant(rq[1], "tpm-kB", ws, "ls_t", 5000, 5000, ""); /* answered twice */
    grant(rq[0], "rpm-kB", ws, "ls_r", 5, 0, "");
    CU_ASSERT_EQUAL(next(&m, &st), 0); /* ls_t is not given back */
    pump();
    CU_ASSERT_EQUAL(q.called, 1);
    CU_ASSERT_EQUAL(account_find("tpm-kB", ws)->balance, 5000 - 410);
    dp_limits_end(q.hold);
    /* Shutdown: final reports; the stream goes before they are answered;
     * they go again on the next, and once answered they are done. */
    dp_limits_release_all();
    int first = 0;
    while (next(&m, &st))
        first++;
    CU_ASSERT_EQUAL(first, 2);
    CU_ASSERT_EQUAL(dp_limits_pending(), 2);
    dp_limits_on_stream(0);
    CU_ASSERT_EQUAL(next(&m, &st), 0);
    CU_ASSERT_EQUAL(dp_limits_pending(), 2);
    dp_limits_on_stream(1);
    int second = 0;
    while (next(&m, &st)) {
        CU_ASSERT_EQUAL(m.lease_request->final, 1);
        CU_ASSERT_EQUAL(m.lease_request->released,
                        strcmp(m.lease_request->lease_id, "ls_t") == 0 ? 5000 : 5);
        answer(m.lease_request, "");
        second++;
    }
    CU_ASSERT_EQUAL(second, 2);
    CU_ASSERT_EQUAL(dp_limits_pending(), 0);
    CU_ASSERT_PTR_NULL(dpl.leases);
    /* A report the control plane could not take goes again a moment later. */
    ask_for(&q, "kB", "r1");
    q.ask.max_tokens = 10;
    CU_ASSERT_EQUAL(reserve(&q), DP_LIMITS_WAIT);
    while (next(&m, &st))
        grant(m.lease_request->req, m.lease_request->limit_id, m.lease_request->window_start_ms,
              strcmp(m.lease_request->limit_id, "tpm-kB") ? "ls_r2" : "ls_t2", 1000, 100, "");
    pump();
    dp_limits_end(q.hold);
    dp_limits_release_all();
    CU_ASSERT_EQUAL(next(&m, &st), 1);
    answer(m.lease_request, "unallocated");
    CU_ASSERT_EQUAL(next(&m, &st), 1); /* the other lease's */
    answer(m.lease_request, "");
    CU_ASSERT_EQUAL(next(&m, &st), 0);
    CU_ASSERT_EQUAL(dp_limits_pending(), 1);
    fake_mono += REPORT_RETRY_MS;
    CU_ASSERT_EQUAL(next(&m, &st), 1);
    answer(m.lease_request, "");
    CU_ASSERT_EQUAL(dp_limits_pending(), 0);
}

static void test_snapshot_validation(void)
{
    static const struct {
        const char *doc, *err;
    } cases[] = {
        {"{'version':1,'providers':[],'routes':[],'limits':[{'id':'x','scope_kind':'org',"
         "'scope':'s','metric':'cost','period':'day','amount':1}]}",
         "limits[0].scope_kind: must be one of key, team, project"},
        {"{'version':1,'providers':[],'routes':[],'limits':[{'id':'x','scope_kind':'key',"
         "'scope':'s','metric':'cost','period':'week','amount':1}]}",
         "limits[0].period: must be one of minute, day, month"},
        {"{'version':1,'providers':[],'routes':[],'limits':[{'id':'x','scope_kind':'key',"
         "'scope':'s','metric':'cost','period':'day','amount':0}]}",
         "limits[0].amount: required, an integer from 1 to 4000000000000000000 (picodollars "
         "for cost)"},
        {"{'version':1,'providers':[],'routes':[],'limits':[{'id':'x','scope_kind':'key',"
         "'scope':'s','metric':'cost','period':'day','amount':1,'offline':'maybe'}]}",
         "limits[0].offline: must be one of fail_open, fail_closed"},
        {"{'version':1,'providers':[],'routes':[],'limits':[{'id':'x','scope_kind':'key',"
         "'scope':'s','metric':'cost','period':'day','amount':1,'unpriced':'free'}]}",
         "limits[0].unpriced: must be one of refuse, allow"},
        {"{'version':1,'providers':[],'routes':[],'limits':[{'id':'x','scope_kind':'key',"
         "'scope':'s','metric':'cost','period':'day','amount':1},{'id':'x','scope_kind':'key',"
         "'scope':'s','metric':'tokens','period':'day','amount':1}]}",
         "limits[1].id: duplicate limit 'x' (also limits[0])"},
        {"{'version':1,'providers':[],'routes':[],'limits':[{'id':'x','scope_kind':'key',"
         "'metric':'cost','period':'day','amount':1}]}",
         "limits[0].scope: required, a non-empty string"},
        {"{'version':1,'providers':[],'routes':[],'teams':[{'name':'a'},{'name':'a'}]}",
         "teams[1].name: duplicate team 'a' (also teams[0])"},
        {"{'version':1,'providers':[],'routes':[],'teams':[{'name':'a','allow_models':[1]}]}",
         "teams[0].allow_models[0]: must be a non-empty string"},
        {"{'version':1,'providers':[],'routes':[],'teams':[{'name':'a'}],'keys':[{'id':'k',"
         "'hash':'0000000000000000000000000000000000000000000000000000000000000000',"
         "'team':'b'}]}",
         "keys[0].team: no team named 'b' in teams"},
        {"{'version':1,'providers':[],'routes':[],'projects':[{'name':'p'},{'name':'p'}]}",
         "projects[1].name: duplicate project 'p' (also projects[0])"},
        {"{'version':1,'providers':[],'routes':[],'projects':[{'name':'p','allow_routes':'r'}]}",
         "projects[0].allow_routes: must be an array of non-empty strings"},
        {"{'version':1,'providers':[],'routes':[],'teams':[{'name':'a'}],"
         "'projects':[{'name':'p','team':'b'}]}",
         "projects[0].team: no team named 'b' in teams"},
        {"{'version':1,'providers':[],'routes':[],'projects':[{'name':'p'}],'keys':[{'id':'k',"
         "'hash':'0000000000000000000000000000000000000000000000000000000000000000',"
         "'project':'q'}]}",
         "keys[0].project: no project named 'q' in projects"},
        {"{'version':1,'providers':[],'routes':[],'teams':[{'name':'a'},{'name':'b'}],"
         "'projects':[{'name':'p','team':'a'}],'keys':[{'id':'k',"
         "'hash':'0000000000000000000000000000000000000000000000000000000000000000',"
         "'team':'b','project':'p'}]}",
         "keys[0].project: 'p' belongs to team 'a', the key to 'b'"},
        {"{'version':1,'providers':[],'routes':[],'keys':[{'id':'k','hash':"
         "'0000000000000000000000000000000000000000000000000000000000000000',"
         "'expires_at_ms':-1}]}",
         "keys[0].expires_at_ms: must be an integer from 0 to 4503599627370496 (Unix ms)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char err[256] = "";
        struct dp_snapshot *s = build_doc(cases[i].doc, err, sizeof(err));
        CU_ASSERT_PTR_NULL(s);
        if (strcmp(err, cases[i].err) != 0)
            fprintf(stderr, "\n  case %zu: got '%s'\n", i, err);
        CU_ASSERT_STRING_EQUAL(err, cases[i].err);
        dp_snapshot_unref(s);
    }
    /* The good document's pieces. */
    CU_ASSERT_EQUAL(snap->nteams, 3);
    CU_ASSERT_EQUAL(snap->nlimits, 7);
    CU_ASSERT_EQUAL(dp_snapshot_limit(snap, "cost-t1")->unpriced_allow, 0); /* the default */
    CU_ASSERT_EQUAL(dp_snapshot_limit(snap, "allow-kH")->unpriced_allow, 1);
    const struct dp_limit *l = dp_snapshot_limit(snap, "tpm-kB");
    CU_ASSERT_STRING_EQUAL(l->id, "tpm-kB");
    CU_ASSERT_EQUAL(l->scope_kind, DP_LIMIT_KEY);
    CU_ASSERT_EQUAL(l->metric, DP_LIMIT_TOKENS);
    CU_ASSERT_EQUAL(l->period, DP_LIMIT_MINUTE);
    CU_ASSERT_EQUAL(l->worst_case, 1);
    CU_ASSERT_EQUAL(l->fail_closed, 1);
    CU_ASSERT_EQUAL(dp_snapshot_limit(snap, "rpm-kB")->worst_case, 0);
    CU_ASSERT_EQUAL(dp_snapshot_limit(snap, "rpm-kB")->fail_closed, 0);
    CU_ASSERT_STRING_EQUAL(dp_snapshot_limit(snap, "cost-t1")->currency, "USD");
    const struct dp_key *k = key("kA");
    CU_ASSERT_STRING_EQUAL(k->team, "t1");
    CU_ASSERT_STRING_EQUAL(k->project, "p1");
    CU_ASSERT_EQUAL(dp_snapshot_team(snap, k->team)->require_budget, 1);
    CU_ASSERT_PTR_NULL(key("kD")->team);
    CU_ASSERT_EQUAL(dp_snapshot_catalog(snap, "mock", "m1")->max_output_tokens, 100);
}

static CU_TestInfo tests[] = {
    {"UTC windows: minute, day, month", test_windows},
    {"output estimates learn answers' length and share of max_tokens", test_output_estimates},
    {"the input bound counts images and documents by URL", test_input_bound},
    {"no limits; a team that requires a budget and has none", test_no_limits_and_never_configured},
    {"no control plane: fail_closed refuses, fail_open goes", test_no_control_plane},
    {"wait for a lease, charge per attempt, true up at the end",
     test_lease_wait_grant_charge_settle},
    {"depleted: refused with the window's end, remembered a second", test_depleted},
    {"worst case: max_tokens or the catalog's cap, else 400", test_worst_case_bounds},
    {"unpriced targets: refused by default, fail_open or not; allowed when said", test_unpriced},
    {"stream loss, re-sent requests, the deadline's policy", test_stream_loss_and_deadline},
    {"a replaced lease settles and releases on its own", test_lease_replaced_and_released},
    {"renewal while in use, release when idle, windows forgotten",
     test_renewal_idle_release_expiry},
    {"release_all gives back every balance", test_release_all},
    {"without a stream, ended windows are forgotten", test_windows_forgotten_without_stream},
    {"an attempt without an exact cost is charged an upper bound", test_partly_priced_charges},
    {"worst case: the output cap reserved is the one sent", test_worst_case_output_cap},
    {"a lease lives by our clock from its request's sending", test_lease_life_own_clock},
    {"lease messages survive a lost stream", test_lease_messages_survive_stream_loss},
    {"the next lease is asked for ahead of need, not near the limit", test_lease_prefetch},
    {"snapshot: teams and limits, validation names the field", test_snapshot_validation},
    CU_TEST_INFO_NULL,
};

#define UNIT_SUITE_INIT suite_init
#define UNIT_SUITE_CLEAN suite_clean
#include "unit_main.h"
