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
#include "cp_judgement.h"
#include "cp_metrics.h"
#include "cp_secrets.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_log.h"
#include "llmgw/v1/control.pb-c.h"

#define MAX_BATCH 1000
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 1000 /* a database back is written to within a second */
#define IDLE_CHECK_MS 1000  /* an idle writer looks at its connection this often */
#define MAX_TEXT 256        /* a text field past this is cut (the row is still stored) */
/* Rows wait up to this long for others to share their transaction: a
 * batch's statement, trigger and commit cost about what one row's do, so
 * at thousands of rows a second a short wait divides the database's work
 * per row many times. A data plane keeps its rows until they are stored. */
#define LINGER_MS 10

/* Rows and judgements share the writer's queue, its transactions and the
 * stream's seq sequence; lease messages go ahead of them. */
enum kind { IT_ROW, IT_JUDGE, IT_LEASE_REQ, IT_LEASE_REL };

struct item {
    struct item *next;
    enum kind kind;
    uint64_t stream;
    uint64_t seq;  /* IT_ROW, IT_JUDGE: its seq on the stream */
    int64_t month; /* IT_ROW: at_ms of its month's first instant (partition) */
    char *line;    /* IT_ROW: the row as a line of COPY text for ledger_in */
    size_t line_len;
    /* Why it is refused at once (its data), or NULL: a row goes to
     * ledger_rejects, a judgement to the log (reject_judgement). */
    const char *reject;
    int reject_stored; /* it is in ledger_rejects (or logged) */
    unsigned char *pb; /* the message packed: a LedgerRow (for ledger_rejects), a lease one */
    size_t pblen;
    struct cp_judgement *jg; /* IT_JUDGE: the row, its kept text sealed */
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
    struct item *head, *tail;   /* ledger rows, in order */
    struct item *lhead, *ltail; /* lease messages, in order: taken before rows */
    size_t queued, nrows;
    struct timespec head_at; /* when the oldest queued row came */
    struct result *rhead, *rtail;
    struct cp_ledger_leases leases;
    struct cp_ledger_stats st;
    /* Main loop only: seals the text a judgement keeps (cp_judgement). */
    struct cp_master_key key;
    int have_key;
    int text_warned; /* "text not kept: no master key" logged once */
    /* writer thread only */
    struct cp_db *db;
    int64_t months[64]; /* partitions known to exist */
    size_t nmonths;
};

/* ------------------------------------------------------------ main loop */

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

/* ------------------------------------------------------------ COPY text */

/* A text field as the ledger keeps it: cut at MAX_TEXT bytes; when that is
 * not valid UTF-8 (protobuf does not check), bytes past ASCII become '?'
 * (in tmp). *n: its length; NULL when empty (SQL NULL). */
static const char *clean_text(const char *s, char tmp[MAX_TEXT], size_t *n)
{
    if (!s || !*s)
        return NULL;
    size_t len = strnlen(s, MAX_TEXT);
    *n = len;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = gw_utf8_len(u + i, len - i);
        if (!k) {
            for (size_t j = 0; j < len; j++)
                tmp[j] = u[j] < 0x80 ? s[j] : '?';
            return tmp;
        }
        i += k;
    }
    return s;
}

/* A text column in a row's JSON (ledger_rejects): as clean_text keeps
 * it, or null. */
static json_t *text(const char *s)
{
    char tmp[MAX_TEXT];
    size_t n = 0;
    const char *c = clean_text(s, tmp, &n);
    return c ? json_stringn(c, n) : json_null();
}

/* s[0..n) in COPY's text format: backslash, tab, newline and carriage
 * return escaped. */
static int copy_escaped(struct gw_buf *b, const char *s, size_t n)
{
    size_t run = 0;
    int rc = GW_OK;
    for (size_t i = 0; i < n && rc == GW_OK; i++) {
        char e = s[i] == '\\'   ? '\\'
                 : s[i] == '\t' ? 't'
                 : s[i] == '\n' ? 'n'
                 : s[i] == '\r' ? 'r'
                                : 0;
        if (!e)
            continue;
        char esc[2] = {'\\', e};
        if ((rc = gw_buf_append(b, s + run, i - run)) == GW_OK)
            rc = gw_buf_append(b, esc, 2);
        run = i + 1;
    }
    return rc == GW_OK ? gw_buf_append(b, s + run, n - run) : rc;
}

/* One field and its tab: a text column (\N when empty). */
static int copy_text(struct gw_buf *b, const char *s)
{
    char tmp[MAX_TEXT];
    size_t n = 0;
    const char *c = clean_text(s, tmp, &n);
    int rc = c ? copy_escaped(b, c, n) : gw_buf_append(b, "\\N", 2);
    return rc == GW_OK ? gw_buf_append(b, "\t", 1) : rc;
}

static int copy_int(struct gw_buf *b, long long v)
{
    int rc = gw_buf_append_int(b, v);
    return rc == GW_OK ? gw_buf_append(b, "\t", 1) : rc;
}

/* A JSON string of a text field, or null. */
static int json_text(struct gw_buf *b, const char *s)
{
    char tmp[MAX_TEXT];
    size_t n = 0;
    const char *c = clean_text(s, tmp, &n);
    return c ? gw_json_escape(b, c, n) : gw_buf_append(b, "null", 4);
}

/* The charges as the JSON array the ledger's trigger reads. */
static int charges_json(struct gw_buf *j, const Llmgw__V1__LedgerRow *r)
{
    int rc = gw_buf_append(j, "[", 1);
    for (size_t i = 0; rc == GW_OK && i < r->n_charges; i++) {
        const Llmgw__V1__Charge *c = r->charges[i];
        if (rc == GW_OK)
            rc = gw_buf_appends(j, i ? ",{\"limit_id\":" : "{\"limit_id\":");
        if (rc == GW_OK)
            rc = json_text(j, c->limit_id);
        if (rc == GW_OK)
            rc = gw_buf_appends(j, ",\"window_start_ms\":");
        if (rc == GW_OK)
            rc = gw_buf_append_int(j, (long long)c->window_start_ms);
        if (rc == GW_OK)
            rc = gw_buf_appends(j, ",\"lease_id\":");
        if (rc == GW_OK)
            rc = json_text(j, c->lease_id);
        if (rc == GW_OK)
            rc = gw_buf_appends(j, ",\"amount\":");
        if (rc == GW_OK)
            rc = gw_buf_append_int(j, (long long)c->amount);
        if (rc == GW_OK)
            rc = gw_buf_append(j, "}", 1);
    }
    return rc == GW_OK ? gw_buf_append(j, "]", 1) : rc;
}

/* The row as one line of ledger_in (SQL_STAGE's columns, in order). */
static int row_line(struct gw_buf *b, const Llmgw__V1__LedgerRow *r, const char *replica)
{
    const char *texts1[] = {r->attempt_id, r->request_id};
    const char *texts2[] = {replica,  r->key_id,   r->team,    r->project, r->route,   r->provider,
                            r->model, r->selector, r->session, r->agent,   r->purpose, r->api};
    const long long nums[] = {r->input_tokens,
                              r->cache_read_tokens,
                              r->cache_write_5m_tokens,
                              r->cache_write_1h_tokens,
                              r->output_tokens,
                              r->reasoning_tokens,
                              r->latency_ms,
                              r->ttfb_ms,
                              r->ttfc_ms,
                              r->status};
    int rc = copy_int(b, (long long)r->at_ms);
    for (size_t i = 0; rc == GW_OK && i < sizeof(texts1) / sizeof(texts1[0]); i++)
        rc = copy_text(b, texts1[i]);
    if (rc == GW_OK)
        rc = copy_int(b, r->attempt);
    for (size_t i = 0; rc == GW_OK && i < sizeof(texts2) / sizeof(texts2[0]); i++)
        rc = copy_text(b, texts2[i]);
    if (rc == GW_OK)
        rc = gw_buf_append(b, r->stream ? "t\t" : "f\t", 2);
    for (size_t i = 0; rc == GW_OK && i < sizeof(nums) / sizeof(nums[0]); i++)
        rc = copy_int(b, nums[i]);
    if (rc == GW_OK)
        rc = copy_text(b, r->failure_class);
    if (rc == GW_OK)
        rc = r->has_cost ? copy_int(b, (long long)r->cost_picodollars)
                         : gw_buf_append(b, "\\N\t", 3);
    if (rc == GW_OK)
        rc = copy_text(b, r->currency && *r->currency ? r->currency : "USD");
    if (rc == GW_OK)
        rc = copy_int(b, (long long)r->snapshot_version);
    struct gw_buf j;
    gw_buf_init(&j, 0);
    if (rc == GW_OK)
        rc = charges_json(&j, r);
    if (rc == GW_OK)
        rc = copy_escaped(b, j.data, j.len);
    gw_buf_free(&j);
    if (rc == GW_OK)
        rc = gw_buf_append(b, r->usage_estimated ? "\tt\t" : "\tf\t", 3);
    /* A cache hit: what it saved, NULL when unknown (or not a hit). */
    if (rc == GW_OK)
        rc = gw_buf_append(b, r->cache_hit ? "t\t" : "f\t", 2);
    if (rc == GW_OK)
        rc = r->cache_hit && r->has_saved ? gw_buf_append_int(b, (long long)r->saved_picodollars)
                                          : gw_buf_append(b, "\\N", 2);
    /* A media attempt's units (0 for every other). */
    const long long units[] = {r->audio_ms, r->characters, r->images};
    for (size_t i = 0; rc == GW_OK && i < sizeof(units) / sizeof(units[0]); i++) {
        rc = gw_buf_append(b, "\t", 1);
        if (rc == GW_OK)
            rc = gw_buf_append_int(b, units[i]);
    }
    return rc == GW_OK ? gw_buf_append(b, "\n", 1) : rc;
}

#define MAX_TOKENS 1000000000000LL

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
    /* No answer is a trillion tokens: a count past it is a bug or a lie,
     * and sums of such counts would overflow. */
    if (r->input_tokens > MAX_TOKENS || r->cache_read_tokens > MAX_TOKENS ||
        r->cache_write_5m_tokens > MAX_TOKENS || r->cache_write_1h_tokens > MAX_TOKENS ||
        r->output_tokens > MAX_TOKENS || r->reasoning_tokens > MAX_TOKENS)
        return "token counts out of range (at most 10^12 each)";
    if (r->audio_ms < 0 || r->characters < 0 || r->images < 0)
        return "media units (audio_ms, characters, images) must not be negative";
    if (r->audio_ms > MAX_TOKENS || r->characters > MAX_TOKENS || r->images > MAX_TOKENS)
        return "media units out of range (at most 10^12 each)";
    if (r->has_cost && r->cost_picodollars < 0)
        return "a cost must not be negative";
    if (r->cache_hit && r->has_saved && r->saved_picodollars < 0)
        return "a saved cost must not be negative";
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
    if (o && r->usage_estimated)
        json_object_set_new(o, "usage_estimated", json_true());
    if (o && r->audio_ms)
        json_object_set_new(o, "audio_ms", json_integer((json_int_t)r->audio_ms));
    if (o && r->characters)
        json_object_set_new(o, "characters", json_integer((json_int_t)r->characters));
    if (o && r->images)
        json_object_set_new(o, "images", json_integer((json_int_t)r->images));
    if (o && r->cache_hit) {
        json_object_set_new(o, "cache_hit", json_true());
        json_object_set_new(o, "saved_picodollars",
                            r->has_saved ? json_integer((json_int_t)r->saved_picodollars)
                                         : json_null());
    }
    if (!o)
        return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static void free_items(struct item *it);

static struct item *item_new(uint64_t stream_id, const char *replica_id, enum kind kind)
{
    struct item *it = calloc(1, sizeof(*it));
    if (!it)
        return NULL;
    it->stream = stream_id;
    it->kind = kind;
    snprintf(it->replica, sizeof(it->replica), "%s", replica_id ? replica_id : "");
    return it;
}

static struct item *row_item(uint64_t stream_id, const char *replica_id,
                             const Llmgw__V1__LedgerRow *r)
{
    struct item *it = r ? item_new(stream_id, replica_id, IT_ROW) : NULL;
    if (!it)
        return NULL;
    it->seq = r->seq;
    /* A row the table would refuse goes to ledger_rejects whole: sending
     * it again cannot help, and dropping it would lose money. */
    it->reject = row_problem(r);
    if (!it->reject)
        it->month = month_of(r->at_ms);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    it->pblen = llmgw__v1__ledger_row__get_packed_size(r);
    if ((it->pb = malloc(it->pblen + 1)) != NULL)
        llmgw__v1__ledger_row__pack(r, it->pb);
    if (!it->pb || (!it->reject && row_line(&b, r, it->replica) != GW_OK)) {
        gw_buf_free(&b);
        free(it->pb);
        free(it);
        return NULL;
    }
    it->line = b.data;
    it->line_len = b.len;
    return it;
}

/* A judgement, its kept text sealed now (main loop): no plaintext waits in
 * the queue. One the table would refuse is marked (it->reject) to be
 * logged and acknowledged, like a row, without stalling its stream. */
static struct item *judge_item(struct cp_ledger *l, uint64_t stream_id, const char *replica_id,
                               const Llmgw__V1__Judgement *j)
{
    struct item *it = j ? item_new(stream_id, replica_id, IT_JUDGE) : NULL;
    if (!it)
        return NULL;
    it->seq = j->seq;
    int dropped = 0;
    it->jg = cp_judgement_new(j, it->replica, l->have_key ? &l->key : NULL, &it->reject, &dropped);
    if (!it->jg) {
        free(it);
        return NULL;
    }
    if (dropped) {
        pthread_mutex_lock(&l->mu);
        l->st.judgement_texts_dropped++;
        pthread_mutex_unlock(&l->mu);
        if (!l->text_warned) {
            l->text_warned = 1;
            gw_log(GW_LOG_WARN,
                   "judgements: a route keeps judged text, but LLMGW_MASTER_KEY is not set: "
                   "the text is not stored (scores are)",
                   NULL);
        }
    }
    return it;
}

static struct item *lease_msg_item(uint64_t stream_id, const char *replica_id,
                                   const Llmgw__V1__ReportMessage *m)
{
    int req = m->body_case == LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST;
    const ProtobufCMessage *pm = req ? &m->lease_request->base : &m->lease_release->base;
    struct item *it = item_new(stream_id, replica_id, req ? IT_LEASE_REQ : IT_LEASE_REL);
    if (!it)
        return NULL;
    it->pblen = protobuf_c_message_get_packed_size(pm);
    if (!(it->pb = malloc(it->pblen + 1))) {
        free(it);
        return NULL;
    }
    protobuf_c_message_pack(pm, it->pb);
    return it;
}

static int is_lease(const struct item *it)
{
    return it->kind == IT_LEASE_REQ || it->kind == IT_LEASE_REL;
}

/* Queues the list of items (rows and judgements, or one lease message)
 * for the writer; body: the Report message's. */
static void enqueue(struct cp_ledger *l, struct item *first, struct item *last, size_t n,
                    Llmgw__V1__ReportMessage__BodyCase body)
{
    pthread_mutex_lock(&l->mu);
    int wake = 1;
    if (body == LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_BATCH)
        l->st.batch_msgs++;
    else if (body == LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_ROW)
        l->st.row_msgs++;
    else if (body == LLMGW__V1__REPORT_MESSAGE__BODY_JUDGEMENT)
        l->st.judgement_msgs++;
    if (is_lease(first)) {
        if (l->ltail)
            l->ltail->next = first;
        else
            l->lhead = first;
        l->ltail = last;
    } else {
        if (l->tail) {
            l->tail->next = first;
        } else {
            l->head = first;
            clock_gettime(CLOCK_MONOTONIC, &l->head_at);
        }
        l->tail = last;
        /* The writer waits for a lease message, a first row (its linger
         * starts), or a full batch. */
        wake = l->nrows == 0 || (l->nrows < MAX_BATCH && l->nrows + n >= MAX_BATCH);
        l->nrows += n;
    }
    l->queued += n;
    if (wake)
        pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int cp_ledger_submit(struct cp_ledger *l, uint64_t stream_id, const char *replica_id,
                     const Llmgw__V1__ReportMessage *m)
{
    if (!l)
        return GW_OK;
    struct item *first = NULL, *last = NULL;
    size_t n = 0;
    switch (m->body_case) {
    case LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_ROW:
        first = last = row_item(stream_id, replica_id, m->ledger_row);
        n = 1;
        break;
    case LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_BATCH: {
        /* All of the batch or none: an ack covers rows by seq. Its
         * judgements come after its rows (their seqs follow the rows'). */
        const Llmgw__V1__LedgerBatch *b = m->ledger_batch;
        size_t nrows = b ? b->n_rows : 0, total = b ? b->n_rows + b->n_judgements : 0;
        if (total == 0)
            return GW_OK;
        for (size_t i = 0; i < total; i++) {
            struct item *it = i < nrows
                                  ? row_item(stream_id, replica_id, b->rows[i])
                                  : judge_item(l, stream_id, replica_id, b->judgements[i - nrows]);
            if (!it) {
                free_items(first);
                first = NULL;
                break;
            }
            if (last)
                last->next = it;
            else
                first = it;
            last = it;
            n++;
        }
        break;
    }
    case LLMGW__V1__REPORT_MESSAGE__BODY_JUDGEMENT:
        first = last = judge_item(l, stream_id, replica_id, m->judgement);
        n = 1;
        break;
    case LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST:
    case LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_RELEASE:
        first = last = lease_msg_item(stream_id, replica_id, m);
        n = 1;
        break;
    default:
        return GW_OK;
    }
    if (!first) {
        gw_log(GW_LOG_ERROR, "ledger: out of memory; the data plane sends the message again", NULL);
        return GW_ENOMEM;
    }
    enqueue(l, first, last, n, m->body_case);
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

/* ts plus ms. */
static struct timespec ts_plus(struct timespec ts, long ms)
{
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static int ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static struct timespec deadline_in(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts_plus(ts, ms);
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

/* A batch is copied (COPY's text format, row_line) into this table of the
 * writer's session, then moved into the ledger by SQL_INSERT in the same
 * transaction, which empties it at the end: COPY is the cheapest way into
 * PostgreSQL, and the INSERT keeps what a plain COPY into the ledger could
 * not (ON CONFLICT for rows sent again, the conversions). */
#define STAGE_COLUMNS                                                                              \
    "at_ms, attempt_id, request_id, attempt, replica, key_id, team, project, route, provider, "    \
    "model, selector, session, agent, purpose, api, stream, input_tokens, cache_read_tokens, "     \
    "cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, reasoning_tokens, latency_ms, "  \
    "ttfb_ms, ttfc_ms, status, failure_class, cost_picodollars, currency, snapshot_version, "      \
    "charges, usage_estimated, cache_hit, saved_picodollars, audio_ms, characters, images"
static const char SQL_STAGE[] =
    "CREATE TEMP TABLE IF NOT EXISTS ledger_in (at_ms bigint, attempt_id text, request_id text, "
    "attempt int, replica text, key_id text, team text, project text, route text, provider text, "
    "model text, selector text, session text, agent text, purpose text, api text, stream boolean, "
    "input_tokens bigint, cache_read_tokens bigint, cache_write_5m_tokens bigint, "
    "cache_write_1h_tokens bigint, output_tokens bigint, reasoning_tokens bigint, latency_ms "
    "bigint, ttfb_ms bigint, ttfc_ms bigint, status int, failure_class text, cost_picodollars "
    "bigint, currency text, snapshot_version bigint, charges jsonb, usage_estimated boolean, "
    "cache_hit boolean, saved_picodollars bigint, audio_ms bigint, characters bigint, images "
    "bigint) ON COMMIT DELETE ROWS";
static const char SQL_COPY[] = "COPY ledger_in (" STAGE_COLUMNS ") FROM STDIN";
static const char SQL_INSERT[] =
    "WITH ins AS (INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, key_id, team, "
    "project, route, provider, model, selector, session, agent, purpose, api, stream, "
    "input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, "
    "output_tokens, reasoning_tokens, latency_ms, ttfb_ms, ttfc_ms, status, failure_class, "
    "cost_picodollars, currency, snapshot_version, charges, usage_estimated, cache_hit, "
    "saved_picodollars, audio_ms, characters, images) "
    "SELECT timestamptz 'epoch' + at_ms * interval '1 millisecond', attempt_id, "
    "coalesce(request_id, ''), attempt, coalesce(replica, ''), key_id, team, project, route, "
    "provider, model, selector, session, agent, purpose, api, stream, input_tokens, "
    "cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, "
    "reasoning_tokens, latency_ms, nullif(ttfb_ms, -1), nullif(ttfc_ms, -1), status, "
    "failure_class, cost_picodollars, currency, snapshot_version, charges, usage_estimated, "
    "cache_hit, saved_picodollars, audio_ms, characters, images FROM ledger_in "
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

/* What a run stored: rows and judgements sent, and of them the new ones
 * (the rest were stored before: replays). */
struct stored {
    size_t rows, rows_new, judgements, judgements_new;
};

/* Inserts the rows and judgements of [a, b) in one transaction: the rows
 * through COPY and one INSERT, each judgement with an INSERT of its own
 * (judgements are a sample of the requests). */
static int insert_rows(struct cp_ledger *l, struct item *a, struct item *b, struct stored *st,
                       struct cp_db_err *err)
{
    struct gw_buf data;
    gw_buf_init(&data, 0);
    size_t n = 0, nj = 0;
    memset(st, 0, sizeof(*st));
    for (struct item *it = a; it != b; it = it->next) {
        if (it->reject)
            continue;
        if (it->kind == IT_JUDGE) {
            nj++;
            continue;
        }
        if (gw_buf_append(&data, it->line, it->line_len) != GW_OK) {
            gw_buf_free(&data);
            snprintf(err->message, sizeof(err->message), "out of memory");
            return GW_ENOMEM;
        }
        n++;
    }
    if (n == 0 && nj == 0)
        return GW_OK;
    int rc = cp_db_begin(l->db, err);
    for (struct item *it = a; rc == GW_OK && it != b; it = it->next)
        if (!it->reject && it->kind == IT_ROW)
            rc = ensure_partition(l, it->month, err);
    if (rc == GW_OK && n)
        rc = cp_db_cmd(l->db, SQL_STAGE, 0, NULL, err);
    if (rc == GW_OK && n)
        rc = cp_db_copy_in(l->db, SQL_COPY, data.data, data.len, err);
    PGresult *r = NULL;
    if (rc == GW_OK && n) {
        r = cp_db_exec(l->db, NULL, SQL_INSERT, 0, NULL, err);
        rc = r ? GW_OK : GW_EIO;
    }
    for (int i = 0; rc == GW_OK && r && i < PQntuples(r); i++)
        st->rows_new += (size_t)strtoull(PQgetvalue(r, i, 0), NULL, 10);
    for (struct item *it = a; rc == GW_OK && it != b; it = it->next) {
        if (it->reject || it->kind != IT_JUDGE)
            continue;
        int fresh = 0;
        rc = cp_judgement_insert(l->db, it->jg, &fresh, err);
        st->judgements_new += (size_t)fresh;
    }
    if (rc == GW_OK)
        rc = cp_db_commit(l->db, err);
    if (rc == GW_OK && r)
        count_cost(r);
    if (r)
        PQclear(r);
    if (rc != GW_OK) {
        cp_db_rollback(l->db);
        l->nmonths = 0; /* a partition created in the rolled-back transaction is gone */
        st->rows_new = st->judgements_new = 0;
    }
    st->rows = n;
    st->judgements = nj;
    gw_buf_free(&data);
    return rc;
}

/* A judgement the table refuses: logged by request id (never its text)
 * and counted, then acknowledged. Unlike a row it carries no money, and
 * sending it again cannot help. */
static void reject_judgement(struct cp_ledger *l, struct item *it, const char *sqlstate,
                             const char *why)
{
    gw_logf(GW_LOG_ERROR, "judgements: judgement refused; not stored", "{s:s,s:s,s:s,s:s}",
            "replica_id", it->replica, "request_id", cp_judgement_request_id(it->jg), "sqlstate",
            sqlstate, "error", why);
    pthread_mutex_lock(&l->mu);
    l->st.judgements_rejected++;
    pthread_mutex_unlock(&l->mu);
}

/* Stores a row the ledger refused in ledger_rejects, whole, with the
 * reason (a judgement: reject_judgement). */
static int reject_row(struct cp_ledger *l, struct item *it, const char *sqlstate, const char *why,
                      struct cp_db_err *err)
{
    if (it->kind == IT_JUDGE) {
        reject_judgement(l, it, sqlstate, why);
        return GW_OK;
    }
    Llmgw__V1__LedgerRow *r = llmgw__v1__ledger_row__unpack(NULL, it->pblen, it->pb);
    char *json = r ? row_json(r, it->replica) : NULL;
    if (r)
        llmgw__v1__ledger_row__free_unpacked(r, NULL);
    if (!json) {
        snprintf(err->message, sizeof(err->message), "out of memory");
        return GW_ENOMEM;
    }
    const char *p[] = {it->replica, json, sqlstate, why};
    int rc = cp_db_cmd(l->db,
                       "INSERT INTO ledger_rejects (replica, attempt_id, row, sqlstate, error) "
                       "VALUES ($1, $2::jsonb->>'attempt_id', $2::jsonb, nullif($3, ''), $4)",
                       4, p, err);
    free(json);
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

/* The run's rows refused at once for their data (row_problem), each to
 * ledger_rejects, once: a retry of the run skips those already there. */
static int store_rejects(struct cp_ledger *l, struct item *a, struct item *b, struct cp_db_err *err)
{
    for (struct item *it = a; it != b; it = it->next) {
        if (!it->reject || it->reject_stored)
            continue;
        int rc = reject_row(l, it, "", it->reject, err);
        if (rc != GW_OK)
            return rc;
        it->reject_stored = 1;
    }
    return GW_OK;
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
        struct stored done = {0};
        int rc = db_ready(l, &err);
        if (rc == GW_OK)
            rc = store_rejects(l, a, b, &err);
        if (rc == GW_OK)
            rc = insert_rows(l, a, b, &done, &err);
        if (rc == GW_OK) {
            pthread_mutex_lock(&l->mu);
            l->st.inserted += done.rows_new;
            l->st.duplicates += done.rows - done.rows_new;
            l->st.judgements_inserted += done.judgements_new;
            l->st.judgements_duplicate += done.judgements - done.judgements_new;
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
    if (!up || !l->leases.grant ||
        l->leases.grant(l->leases.arg, l->db, it->replica, rq, &g) != GW_OK) {
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
        free(it->line);
        free(it->pb);
        cp_judgement_free(it->jg);
        free(it);
        it = nx;
    }
}

/* Takes the next work under l->mu: every queued lease message (a
 * reservation may be waiting on its grant; the accounting does not depend
 * on their order with rows, since a window's remaining does not move when
 * a charge lands), else up to MAX_BATCH rows once a batch is full or its
 * oldest row has lingered LINGER_MS. NULL when stopping. */
static struct item *take(struct cp_ledger *l, int *rows)
{
    for (;;) {
        if (l->stop)
            return NULL;
        if (l->lhead) {
            struct item *first = l->lhead;
            size_t n = 0;
            for (struct item *it = first; it; it = it->next)
                n++;
            l->lhead = l->ltail = NULL;
            l->queued -= n;
            *rows = 0;
            return first;
        }
        struct timespec now, due;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (l->head) {
            due = ts_plus(l->head_at, LINGER_MS);
            if (l->nrows >= MAX_BATCH || !ts_before(&now, &due)) {
                struct item *first = l->head, *last = first;
                size_t n = 1;
                while (last->next && n < MAX_BATCH) {
                    last = last->next;
                    n++;
                }
                l->head = last->next;
                if (!l->head)
                    l->tail = NULL;
                else
                    l->head_at = now; /* the rest waits no longer than it did */
                last->next = NULL;
                l->queued -= n;
                l->nrows -= n;
                *rows = 1;
                return first;
            }
        } else {
            due = ts_plus(now, IDLE_CHECK_MS);
        }
        int idle = !l->head;
        if (pthread_cond_timedwait(&l->cv, &l->mu, &due) == ETIMEDOUT && idle && !l->stop &&
            !l->head && !l->lhead) {
            pthread_mutex_unlock(&l->mu);
            idle_check(l);
            pthread_mutex_lock(&l->mu);
        }
    }
}

static void *run(void *arg)
{
    struct cp_ledger *l = arg;
    for (;;) {
        int rows = 0;
        pthread_mutex_lock(&l->mu);
        struct item *first = take(l, &rows);
        pthread_mutex_unlock(&l->mu);
        if (!first)
            break;
        if (rows)
            flush_rows(l, first, NULL);
        else
            for (struct item *it = first; it; it = it->next)
                lease_item(l, it);
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
    /* The writer's waits (a batch's 10 ms, the idle check, the backoff)
     * are on the monotonic clock: a wall clock stepped back must not hold
     * rows for as long. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
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

void cp_ledger_set_master_key(struct cp_ledger *l, const struct cp_master_key *key)
{
    cp_master_key_clear(&l->key);
    l->have_key = key != NULL;
    if (key)
        l->key = *key;
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
    free_items(l->lhead);
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
    cp_master_key_clear(&l->key);
    free(l->conninfo);
    free(l);
}
