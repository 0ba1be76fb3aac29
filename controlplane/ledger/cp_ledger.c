#include "cp_ledger.h"

#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cp_db.h"
#include "cp_grpc.h"
#include "cp_metrics.h"
#include "gw_error.h"
#include "gw_log.h"
#include "llmgw/v1/control.pb-c.h"

#define MAX_BATCH 1000
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 1000 /* a database back is written to within a second */
#define IDLE_CHECK_MS 1000  /* an idle writer looks at its connection this often */
#define MAX_TEXT 256        /* a text field past this is cut (the row is still stored) */

enum kind { IT_ROW, IT_LEASE_REQ, IT_LEASE_REL };

struct item {
    struct item *next;
    enum kind kind;
    uint64_t stream;
    uint64_t seq;       /* IT_ROW: its seq on the stream */
    int64_t month;      /* IT_ROW: at_ms of its month's first instant (partition) */
    char *json;         /* IT_ROW: the row as JSON */
    const char *reject; /* IT_ROW: why it goes to ledger_rejects at once (its data), or NULL */
    unsigned char *pb;  /* lease messages, packed */
    size_t pblen;
    char replica[128];
};

struct result {
    struct result *next;
    uint64_t stream;
    uint64_t through;  /* 0: none */
    unsigned char *pb; /* a packed LeaseGrant, or NULL */
    size_t pblen;
};

struct cp_ledger {
    struct cp_grpc *grpc;
    struct event *result_ev;
    char *conninfo;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    struct item *head, *tail;
    size_t queued;
    struct result *rhead, *rtail;
    struct cp_ledger_leases leases;
    struct cp_ledger_stats st;
    /* writer thread only */
    struct cp_db *db;
    int64_t months[64]; /* partitions known to exist */
    size_t nmonths;
};

/* ------------------------------------------------------------ main loop */

/* A text column: NULL when empty; cut at MAX_TEXT bytes; bytes that are
 * not valid UTF-8 (protobuf does not check) become '?'. */
static json_t *text(const char *s)
{
    if (!s || !*s)
        return json_null();
    size_t n = strlen(s);
    if (n > MAX_TEXT)
        n = MAX_TEXT;
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    char buf[MAX_TEXT + 1];
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    return json_stringn(buf, n);
}

/* The first instant (Unix ms, UTC) of the month holding ms. */
static int64_t month_of(int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return 0;
    tm.tm_mday = 1;
    tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    return (int64_t)timegm(&tm) * 1000;
}

/* Refuses what the table would refuse, so one bad row cannot stall a
 * stream; NULL names the reason. */
static const char *row_problem(const Llmgw__V1__LedgerRow *r)
{
    if (!r->attempt_id || !*r->attempt_id || strlen(r->attempt_id) > 512)
        return "attempt_id is empty or too long";
    if (!r->provider || !*r->provider || !r->model || !*r->model)
        return "provider and model are required";
    if (r->attempt < 1)
        return "attempt must be 1 or more";
    if (r->at_ms <= 0)
        return "at_ms must be a positive time";
    if (r->input_tokens < 0 || r->cache_read_tokens < 0 || r->cache_write_5m_tokens < 0 ||
        r->cache_write_1h_tokens < 0 || r->output_tokens < 0 || r->reasoning_tokens < 0)
        return "token counts must not be negative";
    if (r->currency && *r->currency && strlen(r->currency) != 3)
        return "currency must be three letters";
    return NULL;
}

static char *row_json(const Llmgw__V1__LedgerRow *r, const char *replica)
{
    json_t *charges = json_array();
    for (size_t i = 0; charges && i < r->n_charges; i++) {
        const Llmgw__V1__Charge *c = r->charges[i];
        json_array_append_new(charges, json_pack("{s:o,s:I,s:o,s:I}", "limit_id", text(c->limit_id),
                                                 "window_start_ms", (json_int_t)c->window_start_ms,
                                                 "lease_id", text(c->lease_id), "amount",
                                                 (json_int_t)c->amount));
    }
    json_t *o = json_pack(
        "{s:I,s:o,s:o,s:i,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:b,"
        "s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:o,s:o,s:o,s:I,s:o}",
        "at_ms", (json_int_t)r->at_ms, "attempt_id", text(r->attempt_id), "request_id",
        text(r->request_id), "attempt", (int)r->attempt, "replica", text(replica), "key_id",
        text(r->key_id), "team", text(r->team), "project", text(r->project), "route",
        text(r->route), "provider", text(r->provider), "model", text(r->model), "selector",
        text(r->selector), "session", text(r->session), "agent", text(r->agent), "purpose",
        text(r->purpose), "api", text(r->api), "stream", (int)r->stream, "input_tokens",
        (json_int_t)r->input_tokens, "cache_read_tokens", (json_int_t)r->cache_read_tokens,
        "cache_write_5m_tokens", (json_int_t)r->cache_write_5m_tokens, "cache_write_1h_tokens",
        (json_int_t)r->cache_write_1h_tokens, "output_tokens", (json_int_t)r->output_tokens,
        "reasoning_tokens", (json_int_t)r->reasoning_tokens, "latency_ms",
        (json_int_t)r->latency_ms, "ttfb_ms", (json_int_t)r->ttfb_ms, "ttfc_ms",
        (json_int_t)r->ttfc_ms, "status", (int)r->status, "failure_class", text(r->failure_class),
        "cost_picodollars",
        r->has_cost ? json_integer((json_int_t)r->cost_picodollars) : json_null(), "currency",
        text(r->currency && *r->currency ? r->currency : "USD"), "snapshot_version",
        (json_int_t)r->snapshot_version, "charges", charges ? charges : json_array());
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

int cp_ledger_submit(struct cp_ledger *l, uint64_t stream_id, const char *replica_id,
                     const Llmgw__V1__ReportMessage *m)
{
    if (!l)
        return GW_OK;
    struct item *it = calloc(1, sizeof(*it));
    if (!it) {
        gw_log(GW_LOG_ERROR, "ledger: out of memory; the data plane sends the row again", NULL);
        return GW_ENOMEM;
    }
    it->stream = stream_id;
    snprintf(it->replica, sizeof(it->replica), "%s", replica_id ? replica_id : "");
    switch (m->body_case) {
    case LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_ROW: {
        const Llmgw__V1__LedgerRow *r = m->ledger_row;
        it->kind = IT_ROW;
        it->seq = r->seq;
        /* A row the table would refuse goes to ledger_rejects whole:
         * sending it again cannot help, and dropping it would lose money. */
        it->reject = row_problem(r);
        if (!it->reject)
            it->month = month_of(r->at_ms);
        it->json = row_json(r, it->replica);
        if (!it->json) {
            free(it);
            return GW_ENOMEM;
        }
        break;
    }
    case LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST:
    case LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_RELEASE: {
        const ProtobufCMessage *pm = m->body_case == LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST
                                         ? &m->lease_request->base
                                         : &m->lease_release->base;
        it->kind = m->body_case == LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST ? IT_LEASE_REQ
                                                                                 : IT_LEASE_REL;
        it->pblen = protobuf_c_message_get_packed_size(pm);
        it->pb = malloc(it->pblen + 1);
        if (!it->pb) {
            free(it);
            return GW_ENOMEM;
        }
        protobuf_c_message_pack(pm, it->pb);
        break;
    }
    default:
        free(it);
        return GW_OK;
    }
    pthread_mutex_lock(&l->mu);
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->queued++;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return GW_OK;
}

/* Main loop: what the writer finished goes back on the streams. */
static void on_results(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_ledger *l = arg;
    pthread_mutex_lock(&l->mu);
    struct result *r = l->rhead;
    l->rhead = l->rtail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (r) {
        struct result *nx = r->next;
        Llmgw__V1__LeaseGrant *g =
            r->pb ? llmgw__v1__lease_grant__unpack(NULL, r->pblen, r->pb) : NULL;
        const Llmgw__V1__LeaseGrant *gs[1] = {g};
        (void)cp_grpc_report_reply(l->grpc, r->stream, r->through, gs, g ? 1 : 0);
        if (g)
            llmgw__v1__lease_grant__free_unpacked(g, NULL);
        free(r->pb);
        free(r);
        r = nx;
    }
}

/* ------------------------------------------------------------ writer */

static void post(struct cp_ledger *l, struct result *r)
{
    pthread_mutex_lock(&l->mu);
    if (l->rtail)
        l->rtail->next = r;
    else
        l->rhead = r;
    l->rtail = r;
    pthread_mutex_unlock(&l->mu);
    event_active(l->result_ev, 0, 0);
}

static void post_ack(struct cp_ledger *l, uint64_t stream, uint64_t through)
{
    struct result *r = calloc(1, sizeof(*r));
    if (!r)
        return; /* the data plane sends the rows again on its next stream */
    r->stream = stream;
    r->through = through;
    post(l, r);
}

static struct timespec deadline_in(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static int sleep_ms(struct cp_ledger *l, long ms)
{
    struct timespec ts = deadline_in(ms);
    pthread_mutex_lock(&l->mu);
    while (!l->stop && pthread_cond_timedwait(&l->cv, &l->mu, &ts) == 0)
        ;
    int stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

static int db_ready(struct cp_ledger *l, struct cp_db_err *err)
{
    if (!l->db) {
        l->db = cp_db_connect(l->conninfo, "ledger writer", err);
        if (!l->db)
            return GW_EIO;
        l->nmonths = 0;
    }
    return cp_db_check(l->db, err);
}

/* Nothing to write for IDLE_CHECK_MS: notice a lost connection now rather
 * than at the next row (cp_db_alive reads what the server sent, no round
 * trip), and reconnect, so that the status and the first row after an
 * outage do not wait on it. */
static void idle_check(struct cp_ledger *l)
{
    if (!l->db)
        return;
    int up = cp_db_alive(l->db);
    if (!up) {
        struct cp_db_err err;
        up = cp_db_check(l->db, &err) == GW_OK;
        if (up)
            l->nmonths = 0; /* partitions may have changed while it was away */
    }
    pthread_mutex_lock(&l->mu);
    l->st.db_up = up;
    pthread_mutex_unlock(&l->mu);
}

static int ensure_partition(struct cp_ledger *l, int64_t month, struct cp_db_err *err)
{
    for (size_t i = 0; i < l->nmonths; i++)
        if (l->months[i] == month)
            return GW_OK;
    char v[32];
    snprintf(v, sizeof(v), "%lld", (long long)month);
    const char *p[] = {v};
    if (cp_db_cmd(l->db,
                  "SELECT llmgw_ledger_partition(timestamptz 'epoch' + $1::bigint * interval "
                  "'1 millisecond')",
                  1, p, err))
        return GW_EIO;
    if (l->nmonths == sizeof(l->months) / sizeof(l->months[0]))
        l->nmonths = 0;
    l->months[l->nmonths++] = month;
    return GW_OK;
}

static const char SQL_INSERT[] =
    "WITH ins AS (INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, key_id, team, "
    "project, route, provider, model, selector, session, agent, purpose, api, stream, "
    "input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, "
    "output_tokens, reasoning_tokens, latency_ms, ttfb_ms, ttfc_ms, status, failure_class, "
    "cost_picodollars, currency, snapshot_version, charges) "
    "SELECT timestamptz 'epoch' + (r->>'at_ms')::bigint * interval '1 millisecond', "
    "r->>'attempt_id', coalesce(r->>'request_id', ''), (r->>'attempt')::int, "
    "coalesce(r->>'replica', ''), r->>'key_id', r->>'team', r->>'project', r->>'route', "
    "r->>'provider', r->>'model', r->>'selector', r->>'session', r->>'agent', r->>'purpose', "
    "r->>'api', (r->>'stream')::boolean, (r->>'input_tokens')::bigint, "
    "(r->>'cache_read_tokens')::bigint, (r->>'cache_write_5m_tokens')::bigint, "
    "(r->>'cache_write_1h_tokens')::bigint, (r->>'output_tokens')::bigint, "
    "(r->>'reasoning_tokens')::bigint, (r->>'latency_ms')::bigint, "
    "nullif((r->>'ttfb_ms')::bigint, -1), nullif((r->>'ttfc_ms')::bigint, -1), "
    "(r->>'status')::int, r->>'failure_class', (r->>'cost_picodollars')::bigint, "
    "r->>'currency', (r->>'snapshot_version')::bigint, r->'charges' "
    "FROM jsonb_array_elements($1::jsonb) AS r "
    "ON CONFLICT (attempt_id, at) DO NOTHING RETURNING team, route, currency, cost_picodollars) "
    "SELECT count(*), coalesce(team, ''), coalesce(route, ''), coalesce(currency, ''), "
    "coalesce(sum(cost_picodollars), 0) FROM ins GROUP BY 2, 3, 4";

/* The committed rows' cost per (team, route, currency), from SQL_INSERT's
 * groups: only rows stored for the first time are in them, so the counter
 * counts each attempt once however often it is replayed. A sum past 2^64
 * (MAX_BATCH costs near INT64_MAX) is left out rather than wrapped. */
static void count_cost(const PGresult *r)
{
    for (int i = 0; i < PQntuples(r); i++) {
        const char *sum = PQgetvalue(r, i, 4);
        errno = 0;
        char *end = NULL;
        unsigned long long v = strtoull(sum, &end, 10);
        if (errno || !end || *end || sum[0] == '-' || v == 0)
            continue;
        cp_metrics_ledger_cost(PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
                               (uint64_t)v);
    }
}

/* Inserts rows [a, b) (IT_ROW items with JSON) in one transaction. */
static int insert_rows(struct cp_ledger *l, struct item *a, struct item *b, size_t *inserted,
                       size_t *nrows, struct cp_db_err *err)
{
    size_t len = 2, n = 0;
    for (struct item *it = a; it != b; it = it->next)
        if (!it->reject)
            len += strlen(it->json) + 1;
    *inserted = *nrows = 0;
    char *arr = malloc(len + 1);
    if (!arr) {
        snprintf(err->message, sizeof(err->message), "out of memory");
        return GW_ENOMEM;
    }
    size_t o = 0;
    arr[o++] = '[';
    for (struct item *it = a; it != b; it = it->next) {
        if (it->reject)
            continue;
        if (n++)
            arr[o++] = ',';
        size_t k = strlen(it->json);
        memcpy(arr + o, it->json, k);
        o += k;
    }
    arr[o++] = ']';
    arr[o] = 0;
    if (n == 0) {
        free(arr);
        return GW_OK;
    }
    int rc = cp_db_begin(l->db, err);
    for (struct item *it = a; rc == GW_OK && it != b; it = it->next)
        if (!it->reject)
            rc = ensure_partition(l, it->month, err);
    PGresult *r = NULL;
    if (rc == GW_OK) {
        const char *p[] = {arr};
        r = cp_db_exec(l->db, NULL, SQL_INSERT, 1, p, err);
        rc = r ? GW_OK : GW_EIO;
    }
    if (rc == GW_OK) {
        for (int i = 0; i < PQntuples(r); i++)
            *inserted += (size_t)strtoull(PQgetvalue(r, i, 0), NULL, 10);
        rc = cp_db_commit(l->db, err);
    }
    if (rc == GW_OK)
        count_cost(r);
    if (r)
        PQclear(r);
    if (rc != GW_OK) {
        cp_db_rollback(l->db);
        l->nmonths = 0; /* a partition created in the rolled-back transaction is gone */
    }
    *nrows = n;
    free(arr);
    return rc;
}

/* Stores a row the ledger refused in ledger_rejects, whole, with the
 * reason. */
static int reject_row(struct cp_ledger *l, struct item *it, const char *sqlstate, const char *why,
                      struct cp_db_err *err)
{
    const char *p[] = {it->replica, it->json, sqlstate, why};
    int rc = cp_db_cmd(l->db,
                       "INSERT INTO ledger_rejects (replica, attempt_id, row, sqlstate, error) "
                       "VALUES ($1, $2::jsonb->>'attempt_id', $2::jsonb, nullif($3, ''), $4)",
                       4, p, err);
    if (rc == GW_OK) {
        gw_logf(GW_LOG_ERROR, "ledger: row refused; kept in ledger_rejects", "{s:s,s:s,s:s}",
                "replica_id", it->replica, "sqlstate", sqlstate, "error", why);
        pthread_mutex_lock(&l->mu);
        l->st.rejected++;
        pthread_mutex_unlock(&l->mu);
    }
    return rc;
}

/* Data the table refuses (class 22: data exception; 23: integrity, such as
 * a month whose partition was detached), as opposed to a database that is
 * away. */
static int data_error(const struct cp_db_err *err)
{
    return err->sqlstate[0] == '2' && (err->sqlstate[1] == '2' || err->sqlstate[1] == '3');
}

/* A run of rows: stored (retrying while the database is down), then each
 * stream's highest seq among them acknowledged. A run the table refuses
 * goes row by row, and a refused row to ledger_rejects: a row is
 * acknowledged only once it is stored somewhere. */
static void flush_rows(struct cp_ledger *l, struct item *a, struct item *b)
{
    long backoff = BACKOFF_MIN_MS;
    for (;;) {
        struct cp_db_err err = {0};
        size_t ins = 0, n = 0;
        int rc = db_ready(l, &err);
        if (rc == GW_OK && a->next == b && a->reject)
            rc = reject_row(l, a, "", a->reject, &err);
        else if (rc == GW_OK)
            rc = insert_rows(l, a, b, &ins, &n, &err);
        if (rc == GW_OK) {
            pthread_mutex_lock(&l->mu);
            l->st.inserted += ins;
            l->st.duplicates += n - ins;
            l->st.db_up = 1;
            pthread_mutex_unlock(&l->mu);
            break;
        }
        int data = data_error(&err);
        pthread_mutex_lock(&l->mu);
        l->st.errors++;
        l->st.db_up = data;
        pthread_mutex_unlock(&l->mu);
        if (data && a->next != b) {
            for (struct item *it = a; it != b; it = it->next)
                flush_rows(l, it, it->next);
            return; /* each acknowledged its own row */
        }
        if (data) {
            struct cp_db_err rerr = {0};
            if (reject_row(l, a, err.sqlstate, err.message, &rerr) == GW_OK)
                break;
            err = rerr;
        }
        if (backoff == BACKOFF_MIN_MS) /* once per run: a long outage is one line */
            gw_logf(GW_LOG_WARN, "ledger: insert failed; retrying", "{s:s,s:s,s:i}", "sqlstate",
                    err.sqlstate, "error", err.message, "retry_max_ms", BACKOFF_MAX_MS);
        if (sleep_ms(l, backoff))
            return; /* stopping: nothing acknowledged, the data planes send again */
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    /* One ack per stream: the last seq of each stream in the run. */
    for (struct item *it = a; it != b; it = it->next) {
        int last = 1;
        for (struct item *j = it->next; j != b; j = j->next)
            if (j->stream == it->stream) {
                last = 0;
                break;
            }
        if (last)
            post_ack(l, it->stream, it->seq);
    }
}

static void lease_item(struct cp_ledger *l, struct item *it)
{
    struct cp_db_err err = {0};
    int up = db_ready(l, &err) == GW_OK;
    if (it->kind == IT_LEASE_REL) {
        Llmgw__V1__LeaseRelease *rl = llmgw__v1__lease_release__unpack(NULL, it->pblen, it->pb);
        if (rl && up && l->leases.release)
            (void)l->leases.release(l->db, it->replica, rl);
        if (rl)
            llmgw__v1__lease_release__free_unpacked(rl, NULL);
        return;
    }
    Llmgw__V1__LeaseRequest *rq = llmgw__v1__lease_request__unpack(NULL, it->pblen, it->pb);
    if (!rq)
        return;
    Llmgw__V1__LeaseGrant g = LLMGW__V1__LEASE_GRANT__INIT;
    g.req = rq->req;
    g.limit_id = rq->limit_id;
    g.window_start_ms = rq->window_start_ms;
    if (!up || !l->leases.grant || l->leases.grant(l->db, it->replica, rq, &g) != GW_OK) {
        g.lease_id = (char *)"";
        g.amount = 0;
        g.refusal = (char *)"unallocated";
    }
    cp_metrics_lease(g.refusal && *g.refusal ? g.refusal : rq->want > 0 ? "granted" : "renewed");
    struct result *r = calloc(1, sizeof(*r));
    if (r) {
        r->stream = it->stream;
        r->pblen = llmgw__v1__lease_grant__get_packed_size(&g);
        r->pb = malloc(r->pblen + 1);
        if (r->pb) {
            llmgw__v1__lease_grant__pack(&g, r->pb);
            post(l, r);
        } else {
            free(r);
        }
    }
    llmgw__v1__lease_request__free_unpacked(rq, NULL);
}

static void free_items(struct item *it)
{
    while (it) {
        struct item *nx = it->next;
        free(it->json);
        free(it->pb);
        free(it);
        it = nx;
    }
}

static void *run(void *arg)
{
    struct cp_ledger *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->stop && !l->head) {
            struct timespec ts = deadline_in(IDLE_CHECK_MS);
            if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT && !l->stop && !l->head) {
                pthread_mutex_unlock(&l->mu);
                idle_check(l);
                pthread_mutex_lock(&l->mu);
            }
        }
        if (l->stop) {
            pthread_mutex_unlock(&l->mu);
            break;
        }
        /* Up to MAX_BATCH items, in order. */
        struct item *first = l->head, *last = first;
        size_t n = 1;
        while (last->next && n < MAX_BATCH) {
            last = last->next;
            n++;
        }
        l->head = last->next;
        if (!l->head)
            l->tail = NULL;
        last->next = NULL;
        l->queued -= n;
        pthread_mutex_unlock(&l->mu);
        struct item *it = first;
        while (it) {
            if (it->kind != IT_ROW) {
                lease_item(l, it);
                it = it->next;
                continue;
            }
            struct item *end = it;
            while (end && end->kind == IT_ROW)
                end = end->next;
            flush_rows(l, it, end);
            it = end;
        }
        free_items(first);
    }
    return NULL;
}

/* ------------------------------------------------------------ lifetime */

struct cp_ledger *cp_ledger_new(struct event_base *base, const char *conninfo, struct cp_grpc *grpc,
                                char *err, size_t errlen)
{
    struct cp_ledger *l = calloc(1, sizeof(*l));
    if (!l || !(l->conninfo = strdup(conninfo ? conninfo : ""))) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->grpc = grpc;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->result_ev = event_new(base, -1, 0, on_results, l);
    if (!l->result_ev || pthread_create(&l->thread, NULL, run, l) != 0) {
        snprintf(err, errlen, "cannot start the ledger writer");
        if (l->result_ev)
            event_free(l->result_ev);
        free(l->conninfo);
        free(l);
        return NULL;
    }
    return l;
}

void cp_ledger_set_leases(struct cp_ledger *l, const struct cp_ledger_leases *h)
{
    pthread_mutex_lock(&l->mu);
    l->leases = *h;
    pthread_mutex_unlock(&l->mu);
}

void cp_ledger_stats(struct cp_ledger *l, struct cp_ledger_stats *st)
{
    pthread_mutex_lock(&l->mu);
    *st = l->st;
    st->queued = l->queued;
    pthread_mutex_unlock(&l->mu);
}

void cp_ledger_free(struct cp_ledger *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    free_items(l->head);
    struct result *r = l->rhead;
    while (r) {
        struct result *nx = r->next;
        free(r->pb);
        free(r);
        r = nx;
    }
    event_free(l->result_ev);
    if (l->db)
        cp_db_free(l->db);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->conninfo);
    free(l);
}
