/*
 * cp_leases and the limits migrations against a real PostgreSQL: grants,
 * shrinking slices, depletion, the ledger trigger's exactly-once charges,
 * releases, expiry and its grace, renewal, reports and settlement, grants
 * answered once per request, charges of deleted limits, saturation,
 * batches that never deadlock, and concurrent grants through several
 * connections never handing out more than the amount.
 *
 * Needs LLMGW_TEST_DATABASE_URL (an empty database it may migrate and
 * write); tests/integration/limits_db.test.mjs starts one and runs this.
 * Not a ctest test: without a database it exits 77 (skipped).
 */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "cp_leases.h"
#include "cp_migrate.h"
#include "gw_error.h"

static const char *url;
static struct cp_db *db;

static void sql(const char *q)
{
    struct cp_db_err err;
    int rc = cp_db_cmd(db, q, 0, NULL, &err);
    if (rc)
        fprintf(stderr, "SQL failed: %s: %s\n", q, err.message);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static long long val(const char *q)
{
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, NULL, q, 0, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    const char *v = cp_db_value(r);
    long long n = v ? strtoll(v, NULL, 10) : -1;
    PQclear(r);
    return n;
}

/* The current window's start of a period, in Unix ms. */
static long long window_now(const char *period)
{
    char q[200];
    snprintf(q, sizeof(q),
             "SELECT (extract(epoch FROM date_trunc('%s', now() AT TIME ZONE 'UTC') AT TIME "
             "ZONE 'UTC') * 1000)::bigint",
             period);
    return val(q);
}

struct grant {
    Llmgw__V1__LeaseGrant g;
    struct cp_lease_strings st;
    int rc;
};

static uint64_t req_seq = 1ULL << 62; /* as a data plane numbers them */
/* The grace every grant and expiry here counts leases with (the daemon's
 * --lease-grace-s). */
static long long grace_ms = CP_LEASES_GRACE_MS;

/* The grant's strings point into out->st: out must stay where it is. Each
 * request has a req of its own (as a data plane numbers them). */
static void ask_req(struct grant *out, struct cp_db *d, const char *replica, const char *limit,
                    long long ws, long long want, long long need, uint64_t req)
{
    Llmgw__V1__LeaseRequest rq = LLMGW__V1__LEASE_REQUEST__INIT;
    rq.req = req;
    rq.limit_id = (char *)limit;
    rq.window_start_ms = ws;
    rq.want = want;
    rq.need = need;
    out->rc = cp_leases_grant(d, grace_ms, replica, &rq, &out->g, &out->st);
}

static void ask_into(struct grant *out, struct cp_db *d, const char *replica, const char *limit,
                     long long ws, long long want, long long need)
{
    ask_req(out, d, replica, limit, ws, want, need,
            __atomic_add_fetch(&req_seq, 1, __ATOMIC_RELAXED));
}

/* A report on a lease (want 0): totals released and, final, charged. */
static void report(struct grant *out, const char *replica, const char *limit, long long ws,
                   const char *lease, long long released, int final, long long charged)
{
    Llmgw__V1__LeaseRequest rq = LLMGW__V1__LEASE_REQUEST__INIT;
    rq.req = __atomic_add_fetch(&req_seq, 1, __ATOMIC_RELAXED);
    rq.limit_id = (char *)limit;
    rq.window_start_ms = ws;
    rq.lease_id = (char *)lease;
    rq.released = released;
    rq.final = final;
    rq.charged = charged;
    out->rc = cp_leases_grant(db, grace_ms, replica, &rq, &out->g, &out->st);
}

static void release(const char *replica, const char *lease, long long amount)
{
    Llmgw__V1__LeaseRelease rl = LLMGW__V1__LEASE_RELEASE__INIT;
    rl.lease_id = (char *)lease;
    rl.amount = amount;
    CU_ASSERT_EQUAL(cp_leases_release(db, replica, &rl), 0);
}

static int attempt_seq;

/* A ledger row carrying one charge, inserted as the writer does (ON
 * CONFLICT DO NOTHING); attempt_id "" makes a new one. Its attempt began
 * just after the limit was created (a fixed time: a row sent again is the
 * same row). */
static void ledger(const char *attempt_id, const char *limit, long long ws, const char *lease,
                   long long amount)
{
    char id[64], q[1024];
    if (!attempt_id || !*attempt_id) {
        snprintf(id, sizeof(id), "req%d.1", ++attempt_seq);
        attempt_id = id;
    }
    snprintf(
        q, sizeof(q),
        "INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, provider, model, "
        "latency_ms, status, snapshot_version, charges) VALUES (coalesce((SELECT created_at FROM "
        "limits WHERE id = '%s') + interval '1 millisecond', now()), '%s', 'r', 1, 'dp-a', "
        "'p', 'm', 1, 200, 1, "
        "jsonb_build_array(jsonb_build_object('limit_id', '%s', 'window_start_ms', %lld, "
        "'lease_id', '%s', 'amount', %lld))) ON CONFLICT DO NOTHING",
        limit, attempt_id, limit, ws, lease, amount);
    sql(q);
}

static long long spent_of(const char *limit, long long ws)
{
    char q[256];
    snprintf(q, sizeof(q),
             "SELECT spent FROM limit_windows WHERE limit_id = '%s' AND window_start = "
             "timestamptz 'epoch' + %lld * interval '1 millisecond'",
             limit, ws);
    return val(q);
}

static int suite_init(void)
{
    url = getenv("LLMGW_TEST_DATABASE_URL");
    if (!url || !*url) {
        fprintf(stderr, "LLMGW_TEST_DATABASE_URL is not set: skipped\n");
        exit(77);
    }
    struct cp_db_err err;
    db = cp_db_connect(url, "leases test", &err);
    if (!db) {
        fprintf(stderr, "connect: %s\n", err.message);
        return 1;
    }
    int applied;
    if (cp_migrate_run(db, &applied, &err)) {
        fprintf(stderr, "migrate: %s\n", err.message);
        return 1;
    }
    return 0;
}

static int suite_clean(void)
{
    cp_db_free(db);
    return 0;
}

static void limit_row(const char *id, const char *metric, const char *period, long long amount)
{
    char q[512];
    snprintf(q, sizeof(q),
             "INSERT INTO limits (id, scope_kind, scope, metric, period, amount) VALUES ('%s', "
             "'team', 't', '%s', '%s', %lld)",
             id, metric, period, amount);
    sql(q);
}

static void test_grants_shrink(void)
{
    limit_row("rpd", "requests", "day", 1000);
    long long ws = window_now("day");
    struct grant a;
    ask_into(&a, db, "dp-a", "rpd", ws, 100, 1);
    CU_ASSERT_EQUAL(a.rc, 0);
    CU_ASSERT_STRING_EQUAL(a.g.refusal, "");
    CU_ASSERT_EQUAL(a.g.amount, 100); /* want < a quarter of 1000 */
    CU_ASSERT_EQUAL(a.g.limit, 1000);
    CU_ASSERT_EQUAL(a.g.remaining, 900);
    CU_ASSERT_EQUAL(strncmp(a.g.lease_id, "ls_", 3), 0);
    CU_ASSERT(a.g.expires_at_ms > ws);
    struct grant b;
    ask_into(&b, db, "dp-b", "rpd", ws, 100000, 1);
    CU_ASSERT_EQUAL(b.g.amount, 225); /* a quarter of 900 */
    CU_ASSERT_EQUAL(b.g.remaining, 675);
    struct grant c;
    ask_into(&c, db, "dp-b", "rpd", ws, 100000, 500);
    CU_ASSERT_EQUAL(c.g.amount, 500); /* the need wins over the quarter */
    CU_ASSERT_EQUAL(c.g.remaining, 175);
    struct grant d;
    ask_into(&d, db, "dp-a", "rpd", ws, 1000, 176);
    CU_ASSERT_STRING_EQUAL(d.g.refusal, "depleted");
    CU_ASSERT_EQUAL(d.g.amount, 0);
    CU_ASSERT_STRING_EQUAL(d.g.lease_id, "");
    CU_ASSERT_EQUAL(d.g.remaining, 175);
    /* Slices shrink towards the end: 175 -> 43 -> 33 -> ... never past 0. */
    long long total = 0, last = 1 << 30;
    for (int i = 0; i < 200; i++) {
        struct grant e;
        ask_into(&e, db, "dp-a", "rpd", ws, 100000, 1);
        if (e.g.refusal[0]) {
            CU_ASSERT_STRING_EQUAL(e.g.refusal, "depleted");
            break;
        }
        CU_ASSERT(e.g.amount <= last);
        last = e.g.amount;
        total += e.g.amount;
    }
    CU_ASSERT_EQUAL(total, 175);
}

static void test_ledger_exactly_once(void)
{
    limit_row("cost", "cost", "month", 1000000);
    long long ws = window_now("month");
    struct grant a;
    ask_into(&a, db, "dp-a", "cost", ws, 400000, 1000);
    CU_ASSERT_EQUAL(a.g.amount, 250000);
    CU_ASSERT_EQUAL(a.g.remaining, 750000);
    /* A charge moves its amount from the lease's outstanding to spent:
     * remaining stays. */
    ledger("once.1", "cost", ws, a.g.lease_id, 1000);
    CU_ASSERT_EQUAL(spent_of("cost", ws), 1000);
    struct grant s;
    ask_into(&s, db, "dp-a", "cost", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.spent, 1000);
    CU_ASSERT_EQUAL(s.g.remaining, 750000);
    /* The same row again (a replayed spool): nothing. */
    ledger("once.1", "cost", ws, a.g.lease_id, 1000);
    ledger("once.1", "cost", ws, a.g.lease_id, 1000);
    CU_ASSERT_EQUAL(spent_of("cost", ws), 1000);
    char q[256];
    snprintf(q, sizeof(q), "SELECT consumed FROM limit_leases WHERE id = '%s'", a.g.lease_id);
    CU_ASSERT_EQUAL(val(q), 1000);
    /* A charge without a lease (fail-open) counts in spent and shrinks
     * remaining. */
    ledger(NULL, "cost", ws, "", 5000);
    CU_ASSERT_EQUAL(spent_of("cost", ws), 6000);
    ask_into(&s, db, "dp-a", "cost", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.remaining, 745000);
    /* More than reserved (the estimate was low): the lease's outstanding
     * floors at 0, spent takes all of it. */
    ledger(NULL, "cost", ws, a.g.lease_id, 300000);
    ask_into(&s, db, "dp-a", "cost", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.spent, 306000);
    CU_ASSERT_EQUAL(s.g.remaining, 1000000 - 306000);
    /* Malformed charges are skipped; the row still lands. */
    sql("INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, provider, model, "
        "latency_ms, status, snapshot_version, charges) VALUES (now(), 'bad.1', 'r', 1, 'x', "
        "'p', 'm', 1, 200, 1, '[1, {\"limit_id\":\"cost\"}, {\"limit_id\":\"cost\", "
        "\"window_start_ms\":\"x\", \"amount\":5}, {\"limit_id\":\"cost\", "
        "\"window_start_ms\":1, \"amount\":-5}]')");
    CU_ASSERT_EQUAL(val("SELECT count(*) FROM ledger WHERE attempt_id = 'bad.1'"), 1);
    CU_ASSERT_EQUAL(spent_of("cost", ws), 306000);
}

static void test_release_and_expiry(void)
{
    limit_row("tpm", "tokens", "minute", 10000);
    long long ws = window_now("minute");
    struct grant a;
    ask_into(&a, db, "dp-a", "tpm", ws, 2000, 10);
    CU_ASSERT_EQUAL(a.g.amount, 2000);
    CU_ASSERT_EQUAL(a.g.remaining, 8000);
    release("dp-a", a.g.lease_id, 500);
    struct grant s;
    ask_into(&s, db, "dp-a", "tpm", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.remaining, 8500);
    release("dp-b", a.g.lease_id, 1000); /* not dp-b's lease */
    ask_into(&s, db, "dp-a", "tpm", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.remaining, 8500);
    release("dp-a", a.g.lease_id, 99999); /* at most what was granted */
    ask_into(&s, db, "dp-a", "tpm", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.remaining, 10000);
    /* An expired lease its replica has not settled still counts (charges
     * under it may be on their way) for the grace past its expiry; a
     * renewal keeps a lease live. */
    struct grant b;
    ask_into(&b, db, "dp-b", "tpm", ws, 1000, 10);
    struct grant c;
    ask_into(&c, db, "dp-c", "tpm", ws, 1000, 10);
    CU_ASSERT_EQUAL(b.g.remaining, 9000);
    CU_ASSERT_EQUAL(c.g.remaining, 8000);
    sql("UPDATE limit_leases SET expires_at = now() + interval '1 second' WHERE replica IN "
        "('dp-b', 'dp-c') AND limit_id = 'tpm'");
    struct grant r;
    ask_into(&r, db, "dp-b", "tpm", ws, 0, 0); /* dp-b renews (as an older data plane) */
    CU_ASSERT_STRING_EQUAL(r.g.refusal, "");
    CU_ASSERT_EQUAL(r.g.ttl_ms, CP_LEASES_TTL_MS);
    CU_ASSERT(r.g.expires_at_ms - val("SELECT (extract(epoch FROM now()) * 1000)::bigint") >
              CP_LEASES_TTL_MS - 5000);
    sql("SELECT pg_sleep(1.2)");
    ask_into(&s, db, "dp-a", "tpm", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.remaining, 8000); /* dp-c's expired, and still counts */
    CU_ASSERT_EQUAL(cp_leases_expire(db, grace_ms), 0);
    grace_ms = 100; /* 200 ms past its expiry, past a grace of 100 ms */
    ask_into(&s, db, "dp-a", "tpm", ws, 0, 0);
    CU_ASSERT_EQUAL(s.g.remaining, 10000 - 1000); /* dp-c's went back, dp-b's stays */
    CU_ASSERT_EQUAL(cp_leases_expire(db, grace_ms), 1);
    CU_ASSERT_EQUAL(cp_leases_expire(db, grace_ms), 0);
    grace_ms = CP_LEASES_GRACE_MS;
}

/* Reports on a lease: totals (idempotent), renewal, the final one settles
 * it: then only the charges its replica made and that have not landed
 * stay outstanding. */
static void test_reports_and_settlement(void)
{
    limit_row("rep", "tokens", "day", 10000);
    long long ws = window_now("day");
    struct grant a, r;
    ask_into(&a, db, "dp-a", "rep", ws, 1000, 10);
    CU_ASSERT_EQUAL_FATAL(a.g.amount, 1000);
    CU_ASSERT_EQUAL(a.g.ttl_ms, CP_LEASES_TTL_MS);
    report(&r, "dp-a", "rep", ws, a.g.lease_id, 0, 0, 0);
    CU_ASSERT_STRING_EQUAL(r.g.refusal, "");
    CU_ASSERT_STRING_EQUAL(r.g.lease_id, a.g.lease_id);
    CU_ASSERT_EQUAL(r.g.ttl_ms, CP_LEASES_TTL_MS); /* renewed */
    CU_ASSERT_EQUAL(r.g.remaining, 9000);
    for (int i = 0; i < 2; i++) { /* the same totals twice: once */
        report(&r, "dp-a", "rep", ws, a.g.lease_id, 300, 0, 0);
        CU_ASSERT_EQUAL(r.g.remaining, 9300);
    }
    report(&r, "dp-a", "rep", ws, a.g.lease_id, 100, 0, 0); /* totals never go back */
    CU_ASSERT_EQUAL(r.g.remaining, 9300);
    ledger(NULL, "rep", ws, a.g.lease_id, 200);
    /* Final: 500 charged under it, 300 of them not landed yet; 500 given
     * back. Only the 300 on their way stay outstanding. */
    for (int i = 0; i < 2; i++) {
        report(&r, "dp-a", "rep", ws, a.g.lease_id, 500, 1, 500);
        CU_ASSERT_STRING_EQUAL(r.g.refusal, "");
        CU_ASSERT_EQUAL(r.g.ttl_ms, 0); /* final: not renewed */
        CU_ASSERT_EQUAL(r.g.spent, 200);
        CU_ASSERT_EQUAL(r.g.remaining, 10000 - 200 - 300);
    }
    CU_ASSERT_EQUAL(cp_leases_expire(db, grace_ms), 0);
    ledger(NULL, "rep", ws, a.g.lease_id, 300);
    report(&r, "dp-a", "rep", ws, a.g.lease_id, 500, 1, 500);
    CU_ASSERT_EQUAL(r.g.remaining, 10000 - 500);
    CU_ASSERT_EQUAL(cp_leases_expire(db, grace_ms), 1); /* settled, every charge landed */
    /* A report on a lease past its expiry renews nothing: the data plane
     * learns it is over. */
    struct grant b;
    ask_into(&b, db, "dp-a", "rep", ws, 1000, 10);
    char q[256];
    snprintf(q, sizeof(q),
             "UPDATE limit_leases SET expires_at = now() - interval '1 second' "
             "WHERE id = '%s'",
             b.g.lease_id);
    sql(q);
    report(&r, "dp-a", "rep", ws, b.g.lease_id, 0, 0, 0);
    CU_ASSERT_STRING_EQUAL(r.g.refusal, "");
    CU_ASSERT_EQUAL(r.g.ttl_ms, 0);
    CU_ASSERT_EQUAL(r.g.remaining, 10000 - 500 - b.g.amount); /* still held: not settled */
    /* Another replica's lease, or none: unknown_lease, nothing changes. */
    report(&r, "dp-z", "rep", ws, b.g.lease_id, 1000, 1, 0);
    CU_ASSERT_STRING_EQUAL(r.g.refusal, "unknown_lease");
    CU_ASSERT_EQUAL(r.g.remaining, 10000 - 500 - b.g.amount);
    report(&r, "dp-a", "rep", ws, "ls_nope", 0, 0, 0);
    CU_ASSERT_STRING_EQUAL(r.g.refusal, "unknown_lease");
}

/* A request sent again (its answer lost with a stream) gets the lease it
 * already has; another replica's request of the same number does not. */
static void test_same_request_same_lease(void)
{
    limit_row("idem", "requests", "day", 1000);
    long long ws = window_now("day");
    struct grant a, b, c;
    uint64_t n = (1ULL << 62) + 4242;
    ask_req(&a, db, "dp-a", "idem", ws, 100, 1, n);
    CU_ASSERT_EQUAL_FATAL(a.g.amount, 100);
    CU_ASSERT_EQUAL(a.g.remaining, 900);
    ask_req(&b, db, "dp-a", "idem", ws, 100, 1, n);
    CU_ASSERT_STRING_EQUAL(b.g.refusal, "");
    CU_ASSERT_STRING_EQUAL(b.g.lease_id, a.g.lease_id);
    CU_ASSERT_EQUAL(b.g.amount, 100);
    CU_ASSERT_EQUAL(b.g.remaining, 900);
    CU_ASSERT(b.g.ttl_ms > CP_LEASES_TTL_MS - 5000 && b.g.ttl_ms <= CP_LEASES_TTL_MS);
    ask_req(&c, db, "dp-b", "idem", ws, 100, 1, n);
    CU_ASSERT_STRING_NOT_EQUAL(c.g.lease_id, a.g.lease_id);
    CU_ASSERT_EQUAL(c.g.remaining, 800);
    /* An older data plane's small numbers repeat at every start: never
     * remembered. */
    struct grant d, e;
    ask_req(&d, db, "dp-a", "idem", ws, 100, 1, 7);
    ask_req(&e, db, "dp-a", "idem", ws, 100, 1, 7);
    CU_ASSERT_STRING_NOT_EQUAL(d.g.lease_id, e.g.lease_id);
    CU_ASSERT_EQUAL(e.g.remaining, 600);
    CU_ASSERT_EQUAL(val("SELECT count(*) FROM limit_leases WHERE limit_id = 'idem'"), 4);
}

/* A row as the writer inserts it, its attempt begun at now() + offset. */
static void ledger_at(const char *offset, const char *limit, long long ws, const char *lease,
                      long long amount)
{
    char q[1024];
    snprintf(q, sizeof(q),
             "INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, provider, model, "
             "latency_ms, status, snapshot_version, charges) VALUES (now() + interval '%s', "
             "'req%d.1', 'r', 1, 'dp-a', 'p', 'm', 1, 200, 1, "
             "jsonb_build_array(jsonb_build_object('limit_id', '%s', 'window_start_ms', %lld, "
             "'lease_id', '%s', 'amount', %lld)))",
             offset, ++attempt_seq, limit, ws, lease, amount);
    sql(q);
}

/* A deleted limit's charges still on their way land nowhere: neither
 * under the deleted limit nor under a new one of the same name. */
static void test_deleted_limit_charges(void)
{
    limit_row("gone", "cost", "day", 1000000);
    long long ws = window_now("day");
    struct grant a;
    ask_into(&a, db, "dp-a", "gone", ws, 1000, 10);
    ledger(NULL, "gone", ws, a.g.lease_id, 100);
    CU_ASSERT_EQUAL(spent_of("gone", ws), 100);
    sql("DELETE FROM limits WHERE id = 'gone'");
    ledger(NULL, "gone", ws, a.g.lease_id, 100); /* a spooled row, landing late */
    ledger(NULL, "gone", ws, "", 100);
    ledger(NULL, "nothing-of-the-sort", ws, "", 100);
    CU_ASSERT_EQUAL(val("SELECT count(*) FROM limit_windows WHERE limit_id IN ('gone', "
                        "'nothing-of-the-sort')"),
                    0);
    limit_row("gone", "cost", "day", 1000000);
    ledger_at("-1 minute", "gone", ws, a.g.lease_id, 100); /* the old lease's */
    ledger_at("-1 minute", "gone", ws, "", 100);           /* begun before it existed */
    CU_ASSERT_EQUAL(val("SELECT count(*) FROM limit_windows WHERE limit_id = 'gone'"), 0);
    ledger(NULL, "gone", ws, "", 70);
    struct grant b;
    ask_into(&b, db, "dp-a", "gone", ws, 1000, 10);
    CU_ASSERT_EQUAL(b.g.spent, 70);
    ledger_at("-1 minute", "gone", ws, b.g.lease_id, 30); /* its own lease: a clock behind */
    CU_ASSERT_EQUAL(spent_of("gone", ws), 100);
}

/* Sums past a bigint saturate; the row still lands. */
static void test_charges_saturate(void)
{
    limit_row("sat", "tokens", "day", 1000);
    long long ws = window_now("day");
    for (int i = 0; i < 10; i++)
        ledger(NULL, "sat", ws, "", 999999999999999999LL);
    sql("INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, provider, model, "
        "latency_ms, status, snapshot_version, charges) SELECT now(), 'sat.' || g, 'r', 1, 'x', "
        "'p', 'm', 1, 200, 1, jsonb_build_array(c, c, c, c, c, c, c, c, c, c) FROM "
        "generate_series(1, 3) g, (SELECT jsonb_build_object('limit_id', 'sat', "
        "'window_start_ms', (extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC') AT "
        "TIME ZONE 'UTC') * 1000)::bigint, 'amount', 999999999999999999) c) x");
    CU_ASSERT_EQUAL(val("SELECT count(*) FROM ledger WHERE attempt_id LIKE 'sat.%'"), 3);
    CU_ASSERT_EQUAL(spent_of("sat", ws), INT64_MAX);
    struct grant g;
    ask_into(&g, db, "dp-a", "sat", ws, 10, 1);
    CU_ASSERT_STRING_EQUAL(g.g.refusal, "depleted");
}

/* Two writers inserting batches whose rows charge the same windows and
 * leases in opposite orders: the trigger takes them in one order, so
 * neither waits on the other in a cycle (no 40P01). */
#define BATCHES 1000
struct writer {
    int id;
    long long ws;
    const char *first, *second;
    const char *lease_first, *lease_second;
    int deadlocks, errors;
};

static void *write_batches(void *arg)
{
    struct writer *w = arg;
    struct cp_db_err err;
    struct cp_db *d = cp_db_connect(url, "leases test", &err);
    if (!d) {
        w->errors++;
        return NULL;
    }
    for (int i = 0; i < BATCHES; i++) {
        char q[2048];
        snprintf(q, sizeof(q),
                 "INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, provider, "
                 "model, latency_ms, status, snapshot_version, charges) VALUES "
                 "(now(), 'dl%d-%d-a', 'r', 1, 'x', 'p', 'm', 1, 200, 1, '[{\"limit_id\":\"%s\","
                 "\"window_start_ms\":%lld,\"lease_id\":\"%s\",\"amount\":1}]'), "
                 "(now(), 'dl%d-%d-b', 'r', 1, 'x', 'p', 'm', 1, 200, 1, '[{\"limit_id\":\"%s\","
                 "\"window_start_ms\":%lld,\"lease_id\":\"%s\",\"amount\":1}]')",
                 w->id, i, w->first, w->ws, w->lease_first, w->id, i, w->second, w->ws,
                 w->lease_second);
        if (cp_db_cmd(d, q, 0, NULL, &err)) {
            if (strcmp(err.sqlstate, "40P01") == 0)
                w->deadlocks++;
            else
                w->errors++;
        }
    }
    cp_db_free(d);
    return NULL;
}

static void test_batches_never_deadlock(void)
{
    limit_row("dl-a", "tokens", "day", 1000000000);
    limit_row("dl-b", "tokens", "day", 1000000000);
    long long ws = window_now("day");
    struct grant la, lb;
    ask_into(&la, db, "dp-a", "dl-a", ws, 1000000, 10);
    ask_into(&lb, db, "dp-a", "dl-b", ws, 1000000, 10);
    struct writer w[2] = {
        {0, ws, "dl-a", "dl-b", la.g.lease_id, lb.g.lease_id, 0, 0},
        {1, ws, "dl-b", "dl-a", lb.g.lease_id, la.g.lease_id, 0, 0},
    };
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, write_batches, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("\n  %d batches by 2 writers in opposite orders: %d deadlocks, %d errors\n", 2 * BATCHES,
           w[0].deadlocks + w[1].deadlocks, w[0].errors + w[1].errors);
    CU_ASSERT_EQUAL(w[0].deadlocks + w[1].deadlocks, 0);
    CU_ASSERT_EQUAL(w[0].errors + w[1].errors, 0);
    CU_ASSERT_EQUAL(spent_of("dl-a", ws), 2 * BATCHES);
    CU_ASSERT_EQUAL(spent_of("dl-b", ws), 2 * BATCHES);
}

static void test_refusals(void)
{
    long long ws = window_now("day");
    struct grant a;
    ask_into(&a, db, "dp-a", "nope", ws, 10, 1);
    CU_ASSERT_STRING_EQUAL(a.g.refusal, "unknown_limit");
    limit_row("off", "requests", "day", 10);
    sql("UPDATE limits SET enabled = false WHERE id = 'off'");
    ask_into(&a, db, "dp-a", "off", ws, 10, 1);
    CU_ASSERT_STRING_EQUAL(a.g.refusal, "unknown_limit");
    ask_into(&a, db, "dp-a", "rpd", ws + 1000, 10, 1); /* not a day's start */
    CU_ASSERT_STRING_EQUAL(a.g.refusal, "invalid_window");
    ask_into(&a, db, "dp-a", "rpd", ws + 5LL * 86400000, 10, 1); /* a day far ahead */
    CU_ASSERT_STRING_EQUAL(a.g.refusal, "invalid_window");
    ask_into(&a, db, "dp-a", "rpd", ws - 86400000, 10, 1); /* yesterday: within skew */
    CU_ASSERT_STRING_EQUAL(a.g.refusal, "");
    CU_ASSERT_EQUAL(a.g.amount, 10);
    /* Deleting a limit sweeps its windows and leases. */
    sql("DELETE FROM limits WHERE id = 'rpd'");
    CU_ASSERT_EQUAL(val("SELECT count(*) FROM limit_windows WHERE limit_id = 'rpd'"), 0);
    CU_ASSERT_EQUAL(val("SELECT count(*) FROM limit_leases WHERE limit_id = 'rpd'"), 0);
}

/* Connections granting at once (as several control-plane replicas would)
 * never hand out more than the amount together. */
#define NTHREADS 6
struct racer {
    long long ws, got;
    int grants, failures;
    char name[16];
};

static void *race(void *arg)
{
    struct racer *rc = arg;
    struct cp_db_err err;
    struct cp_db *d = cp_db_connect(url, "leases test", &err);
    if (!d) {
        rc->failures++;
        return NULL;
    }
    for (;;) {
        struct grant g;
        ask_into(&g, d, rc->name, "race", rc->ws, 7, 3);
        if (g.rc) {
            rc->failures++;
            break;
        }
        if (g.g.refusal[0])
            break;
        rc->got += g.g.amount;
        rc->grants++;
    }
    cp_db_free(d);
    return NULL;
}

static void test_concurrent_grants(void)
{
    limit_row("race", "tokens", "day", 1000);
    long long ws = window_now("day");
    struct racer r[NTHREADS];
    pthread_t t[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].ws = ws;
        snprintf(r[i].name, sizeof(r[i].name), "dp-%d", i);
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    long long total = 0;
    int grants = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(r[i].failures, 0);
        total += r[i].got;
        grants += r[i].grants;
    }
    /* 3 is the need: the last grant may leave 1 or 2 that no one can use. */
    CU_ASSERT(total <= 1000);
    CU_ASSERT(total >= 998);
    CU_ASSERT_EQUAL(val("SELECT sum(granted) FROM limit_leases WHERE limit_id = 'race'"), total);
    printf("\n  %d grants by %d connections, %lld of 1000 granted\n", grants, NTHREADS, total);
}

static CU_TestInfo tests[] = {
    {"grants take a shrinking slice and stop at the amount", test_grants_shrink},
    {"the ledger trigger charges exactly once", test_ledger_exactly_once},
    {"releases, renewals, expiry and its grace", test_release_and_expiry},
    {"reports on a lease: totals, renewal, settlement", test_reports_and_settlement},
    {"a request asked again gets the same lease", test_same_request_same_lease},
    {"a deleted limit's late charges land nowhere", test_deleted_limit_charges},
    {"charges saturate instead of failing the row", test_charges_saturate},
    {"batches charging in opposite orders never deadlock", test_batches_never_deadlock},
    {"unknown, disabled and deleted limits, foreign windows", test_refusals},
    {"concurrent grants never exceed the amount", test_concurrent_grants},
    CU_TEST_INFO_NULL,
};

#define UNIT_SUITE_INIT suite_init
#define UNIT_SUITE_CLEAN suite_clean
#include "unit_main.h"
