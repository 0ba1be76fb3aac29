/*
 * The data plane's ledger queue and its on-disk spool (dp_ledger.h,
 * docs/ledger.md).
 *
 * Every row is packed as a LedgerRow (seq unset) once, when it is
 * recorded, and those bytes are what is spooled, kept in memory and sent:
 * the sender appends the seq field to them (a repeated scalar field
 * appended to a message is the same message with that field set) and wraps
 * them in a ReportMessage by hand, with no unpacking.
 *
 * The spool is a directory of segment files, ledger-<id>.spool, each a
 * sequence of records: "LGR1", the row's length and its CRC-32 (both
 * little-endian 32-bit), the row. Rows are appended to the newest segment,
 * which rolls at SEGMENT_BYTES; a segment whose rows are all acknowledged
 * and that is no longer written to is deleted. At start every segment is
 * read back (a torn last record ends its segment) and its rows are queued
 * again: the ones the control plane had already stored are no-ops there.
 *
 * One mutex guards everything; worker threads append, the control-plane
 * client's thread sends, acknowledges and syncs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fdatasync, O_CLOEXEC */
#endif
#include "dp_ledger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gw_error.h"
#include "gw_eventstream.h" /* gw_es_crc32 */
#include "gw_grpc.h"
#include "gw_log.h"
#include "llmgw/v1/control.pb-c.h"

#define SEGMENT_BYTES (1u << 20)
#define RECORD_HEAD 12
#define MAX_ROW_BYTES (64u << 10)
#define NO_SEGMENT UINT32_MAX
static const unsigned char magic[4] = {'L', 'G', 'R', '1'};
/* A judgement's record (dp_ledger_record_judgement): the same framing. */
static const unsigned char magic_judgement[4] = {'L', 'G', 'J', '1'};

/* What an entry holds: a ledger row, or a judgement riding the same
 * sequence (its seq field and its place in a ReportMessage differ). */
enum entry_kind { E_ROW, E_JUDGEMENT };

struct entry {
    struct entry *next;
    uint64_t seq; /* on the current stream; 0: not sent on it */
    uint32_t seg; /* its segment's id, or NO_SEGMENT (not on disk) */
    uint32_t len; /* of data */
    enum entry_kind kind;
    unsigned char data[]; /* the packed LedgerRow (or Judgement), seq unset */
};

struct seg {
    uint32_t id;
    size_t bytes;
    size_t rows, acked;
};

static struct {
    pthread_mutex_t mu;
    int ready;
    char dir[4096]; /* "" when there is no spool: memory only */
    size_t max_bytes;
    size_t bytes; /* the rows held (on disk, or in memory without a spool) */
    struct entry *head, *tail;
    struct entry *unsent; /* the first not sent on the current stream */
    uint64_t next_seq;
    size_t inflight; /* sent on the current stream, not acknowledged */
    size_t rows;     /* held, not acknowledged */
    struct seg *segs;
    size_t nsegs, capsegs;
    int fd; /* the newest segment, open for appending; -1 none */
    int dirty;
    void (*notify)(void *);
    void *notify_arg;
    struct dp_ledger_stats st;
} L = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* ------------------------------------------------------------ packing */

/* protobuf-c's string fields are `char *`; ours are const. */
static char *pb_str(const char *s)
{
    return (char *)s;
}

/* A new entry of `len` bytes of data, not queued. */
static struct entry *entry_alloc(enum entry_kind kind, size_t len)
{
    struct entry *e = malloc(sizeof(*e) + len);
    if (!e)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    e->len = (uint32_t)len;
    return e;
}

/* The row packed as a LedgerRow into a new entry. */
static struct entry *pack_row(const struct dp_ledger_row *r)
{
    Llmgw__V1__LedgerRow m = LLMGW__V1__LEDGER_ROW__INIT;
    Llmgw__V1__Charge ch[DP_MAX_CHARGES];
    Llmgw__V1__Charge *chp[DP_MAX_CHARGES];
    m.request_id = pb_str(r->request_id);
    m.attempt_id = pb_str(r->attempt_id);
    m.key_id = pb_str(r->key_id);
    m.team = pb_str(r->team);
    m.project = pb_str(r->project);
    m.route = pb_str(r->route);
    m.provider = pb_str(r->provider);
    m.model = pb_str(r->model);
    m.selector = pb_str(r->selector);
    m.session = pb_str(r->session);
    m.agent = pb_str(r->agent);
    m.purpose = pb_str(r->purpose);
    m.input_tokens = r->input_tokens;
    m.cache_read_tokens = r->cache_read_tokens;
    m.cache_write_5m_tokens = r->cache_write_5m_tokens;
    m.cache_write_1h_tokens = r->cache_write_1h_tokens;
    m.audio_ms = r->audio_ms;
    m.characters = r->characters;
    m.images = r->images;
    m.output_tokens = r->output_tokens;
    m.reasoning_tokens = r->reasoning_tokens;
    m.latency_ms = r->latency_ms;
    m.ttfb_ms = r->ttfb_ms;
    m.ttfc_ms = r->ttfc_ms;
    m.status = r->status;
    m.failure_class = pb_str(r->failure_class);
    m.cost_picodollars = r->has_cost ? r->cost_picodollars : 0;
    m.has_cost = r->has_cost != 0;
    m.currency = pb_str(r->currency);
    m.snapshot_version = r->snapshot_version;
    m.at_ms = r->at_ms;
    m.attempt = r->attempt;
    m.api = pb_str(r->api);
    m.stream = r->stream != 0;
    m.usage_estimated = r->usage_estimated != 0;
    m.cache_hit = r->cache_hit != 0;
    m.has_saved = r->cache_hit && r->has_saved;
    m.saved_picodollars = m.has_saved ? r->saved_picodollars : 0;
    size_t n = r->ncharges < DP_MAX_CHARGES ? r->ncharges : DP_MAX_CHARGES;
    for (size_t i = 0; i < n; i++) {
        llmgw__v1__charge__init(&ch[i]);
        ch[i].limit_id = pb_str(r->charges[i].limit_id);
        ch[i].window_start_ms = r->charges[i].window_start_ms;
        ch[i].lease_id = pb_str(r->charges[i].lease_id);
        ch[i].amount = r->charges[i].amount;
        chp[i] = &ch[i];
    }
    m.n_charges = n;
    m.charges = n ? chp : NULL;
    size_t len = llmgw__v1__ledger_row__get_packed_size(&m);
    struct entry *e = entry_alloc(E_ROW, len);
    if (e)
        llmgw__v1__ledger_row__pack(&m, e->data);
    return e;
}

/* ------------------------------------------------------------ segments */

static void seg_path(char *out, size_t n, uint32_t id)
{
    snprintf(out, n, "%s/ledger-%08" PRIx32 ".spool", L.dir, id);
}

static struct seg *seg_find(uint32_t id)
{
    for (size_t i = 0; i < L.nsegs; i++)
        if (L.segs[i].id == id)
            return &L.segs[i];
    return NULL;
}

static struct seg *seg_add(uint32_t id)
{
    if (L.nsegs == L.capsegs) {
        size_t cap = L.capsegs ? L.capsegs * 2 : 16;
        struct seg *g = realloc(L.segs, cap * sizeof(*g));
        if (!g)
            return NULL;
        L.segs = g;
        L.capsegs = cap;
    }
    struct seg *g = &L.segs[L.nsegs++];
    memset(g, 0, sizeof(*g));
    g->id = id;
    return g;
}

/* Deletes every segment that is complete, not written to and all acked. */
static void seg_collect(void)
{
    uint32_t cur = L.fd >= 0 && L.nsegs ? L.segs[L.nsegs - 1].id : NO_SEGMENT;
    size_t j = 0;
    for (size_t i = 0; i < L.nsegs; i++) {
        struct seg *g = &L.segs[i];
        if (g->id != cur && g->acked >= g->rows) {
            char p[4200];
            seg_path(p, sizeof(p), g->id);
            if (unlink(p) != 0 && errno != ENOENT)
                gw_logf(GW_LOG_WARN, "ledger spool: cannot delete a segment", "{s:s,s:s}", "path",
                        p, "error", strerror(errno));
            L.bytes -= g->bytes < L.bytes ? g->bytes : L.bytes;
            continue;
        }
        L.segs[j++] = *g;
    }
    L.nsegs = j;
}

static void seg_close_current(void)
{
    if (L.fd < 0)
        return;
    if (L.dirty)
        (void)fdatasync(L.fd);
    close(L.fd);
    L.fd = -1;
    L.dirty = 0;
}

static int seg_open_new(void)
{
    uint32_t id = L.nsegs ? L.segs[L.nsegs - 1].id + 1 : 1;
    char p[4200];
    seg_path(p, sizeof(p), id);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        gw_logf(GW_LOG_ERROR, "ledger spool: cannot create a segment", "{s:s,s:s}", "path", p,
                "error", strerror(errno));
        return GW_EIO;
    }
    if (!seg_add(id)) {
        close(fd);
        unlink(p);
        return GW_ENOMEM;
    }
    /* The new name itself must survive a power loss, not only its data. */
    int dfd = open(L.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    L.fd = fd;
    return GW_OK;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Appends one record to the newest segment; its id, or NO_SEGMENT. One
 * writev of the head and the row: O_APPEND keeps a record whole. */
static uint32_t seg_append(const struct entry *e)
{
    if (L.fd >= 0 && L.nsegs && L.segs[L.nsegs - 1].bytes >= SEGMENT_BYTES)
        seg_close_current();
    if (L.fd < 0 && seg_open_new() != GW_OK)
        return NO_SEGMENT;
    struct seg *g = &L.segs[L.nsegs - 1];
    unsigned char head[RECORD_HEAD];
    memcpy(head, e->kind == E_JUDGEMENT ? magic_judgement : magic, 4);
    put32(head + 4, e->len);
    put32(head + 8, gw_es_crc32(0, e->data, e->len));
    struct iovec iov[2] = {{head, RECORD_HEAD}, {(void *)e->data, e->len}};
    size_t want = RECORD_HEAD + e->len;
    ssize_t w;
    do
        w = writev(L.fd, iov, 2);
    while (w < 0 && errno == EINTR);
    if (w < 0 || (size_t)w != want) {
        gw_logf(GW_LOG_ERROR, "ledger spool: write failed; the row is held in memory only", "{s:s}",
                "error", w < 0 ? strerror(errno) : "short write");
        /* A torn record ends the segment when it is read back. */
        g->bytes += w > 0 ? (size_t)w : 0;
        seg_close_current();
        return NO_SEGMENT;
    }
    g->bytes += want;
    g->rows++;
    L.dirty = 1;
    return g->id;
}

/* ------------------------------------------------------------ queue */

static void enqueue(struct entry *e)
{
    e->next = NULL;
    if (L.tail)
        L.tail->next = e;
    else
        L.head = e;
    L.tail = e;
    if (!L.unsent)
        L.unsent = e;
    L.rows++;
}

/* Reads one segment back into the queue. */
static void load_segment(uint32_t id)
{
    char p[4200];
    seg_path(p, sizeof(p), id);
    FILE *f = fopen(p, "rbe");
    if (!f) {
        gw_logf(GW_LOG_ERROR, "ledger spool: cannot read a segment", "{s:s,s:s}", "path", p,
                "error", strerror(errno));
        return;
    }
    struct seg *g = seg_add(id);
    if (!g) {
        fclose(f);
        return;
    }
    unsigned char head[RECORD_HEAD];
    unsigned char *buf = malloc(MAX_ROW_BYTES);
    int torn = 0;
    while (buf && fread(head, 1, RECORD_HEAD, f) == RECORD_HEAD) {
        uint32_t len = get32(head + 4);
        int judgement = memcmp(head, magic_judgement, 4) == 0;
        if ((!judgement && memcmp(head, magic, 4) != 0) || len == 0 || len > MAX_ROW_BYTES ||
            fread(buf, 1, len, f) != len || gw_es_crc32(0, buf, len) != get32(head + 8)) {
            torn = 1;
            break;
        }
        struct entry *e = entry_alloc(judgement ? E_JUDGEMENT : E_ROW, len);
        if (!e)
            break;
        memcpy(e->data, buf, len);
        e->seg = id;
        enqueue(e);
        g->rows++;
        g->bytes += RECORD_HEAD + len;
    }
    free(buf);
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && (size_t)sb.st_size > g->bytes)
        g->bytes = (size_t)sb.st_size; /* the torn tail still takes room until deleted */
    fclose(f);
    L.bytes += g->bytes;
    if (torn)
        gw_logf(GW_LOG_WARN, "ledger spool: a segment ends in a torn record; read up to it",
                "{s:s,s:I}", "path", p, "rows", (json_int_t)g->rows);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int dp_ledger_init(const char *spool_dir, size_t max_bytes)
{
    pthread_mutex_lock(&L.mu);
    L.max_bytes = max_bytes;
    L.next_seq = 1;
    L.dir[0] = 0;
    int rc = GW_OK;
    if (spool_dir && *spool_dir) {
        snprintf(L.dir, sizeof(L.dir), "%s", spool_dir);
        if (mkdir(L.dir, 0700) != 0 && errno != EEXIST) {
            gw_logf(GW_LOG_ERROR, "ledger spool: cannot create the directory", "{s:s,s:s}", "path",
                    L.dir, "error", strerror(errno));
            rc = GW_EIO;
        }
        DIR *d = rc == GW_OK ? opendir(L.dir) : NULL;
        uint32_t *ids = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            unsigned id;
            char tail[8];
            if (sscanf(de->d_name, "ledger-%8x.%7s", &id, tail) != 2 || strcmp(tail, "spool"))
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 32;
                uint32_t *g = realloc(ids, cap * sizeof(*g));
                if (!g)
                    break;
                ids = g;
            }
            ids[n++] = id;
        }
        if (d)
            closedir(d);
        else if (rc == GW_OK) {
            gw_logf(GW_LOG_ERROR, "ledger spool: cannot open the directory", "{s:s,s:s}", "path",
                    L.dir, "error", strerror(errno));
            rc = GW_EIO;
        }
        if (n)
            qsort(ids, n, sizeof(*ids), cmp_u32);
        for (size_t i = 0; i < n; i++)
            load_segment(ids[i]);
        free(ids);
        if (L.rows)
            gw_logf(GW_LOG_INFO, "ledger spool: rows to replay", "{s:I,s:I,s:s}", "rows",
                    (json_int_t)L.rows, "bytes", (json_int_t)L.bytes, "path", L.dir);
        seg_collect(); /* empty segments */
    }
    L.st.spooled_rows = L.rows;
    L.ready = 1;
    pthread_mutex_unlock(&L.mu);
    return rc;
}

int dp_ledger_enabled(void)
{
    pthread_mutex_lock(&L.mu);
    int r = L.ready;
    pthread_mutex_unlock(&L.mu);
    return r;
}

void dp_ledger_set_notify(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&L.mu);
    L.notify = fn;
    L.notify_arg = arg;
    pthread_mutex_unlock(&L.mu);
}

/* Queues the packed entry e (spooled unless memory_only), taking it; then
 * wakes the sender. GW_ELIMIT when the spool is full (dropped, counted). */
static int queue_entry(struct entry *e, int memory_only)
{
    pthread_mutex_lock(&L.mu);
    int rc = GW_OK;
    size_t need = RECORD_HEAD + e->len;
    if (!L.ready) {
        rc = GW_EINVAL;
    } else if (e->len > MAX_ROW_BYTES || L.bytes + need > L.max_bytes) {
        rc = GW_ELIMIT;
        L.st.dropped_rows++;
    } else {
        e->seg = L.dir[0] && !memory_only ? seg_append(e) : NO_SEGMENT;
        L.bytes += need;
        enqueue(e);
        L.st.recorded_rows++;
        if (e->seg != NO_SEGMENT)
            L.st.spooled_rows++;
        e = NULL;
    }
    void (*fn)(void *) = L.notify;
    void *arg = L.notify_arg;
    pthread_mutex_unlock(&L.mu);
    free(e); /* not queued */
    if (rc == GW_OK && fn)
        fn(arg);
    return rc;
}

int dp_ledger_record(const struct dp_ledger_row *r)
{
    struct entry *e = pack_row(r);
    int rc = GW_ENOMEM;
    if (e) {
        rc = queue_entry(e, 0);
    } else {
        pthread_mutex_lock(&L.mu);
        L.st.dropped_rows++;
        pthread_mutex_unlock(&L.mu);
    }
    if (rc != GW_OK && rc != GW_EINVAL)
        /* Nothing of the prompt: the row's identity and its money, so the
         * loss is on record and can be billed by hand. */
        gw_logf(GW_LOG_ERROR,
                rc == GW_ENOMEM ? "ledger: row dropped (out of memory)"
                                : "ledger: row dropped (spool full)",
                "{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:b}", "attempt_id", r->attempt_id, "key_id",
                r->key_id, "provider", r->provider, "model", r->model, "input_tokens",
                (json_int_t)r->input_tokens, "output_tokens", (json_int_t)r->output_tokens,
                "cost_picodollars", (json_int_t)r->cost_picodollars, "has_cost", r->has_cost);
    return rc;
}

int dp_ledger_record_judgement(const struct dp_judgement *j)
{
    Llmgw__V1__Judgement m = LLMGW__V1__JUDGEMENT__INIT;
    m.request_id = pb_str(j->request_id);
    m.attempt_id = pb_str(j->attempt_id);
    m.judge_request_id = pb_str(j->judge_request_id);
    m.route = pb_str(j->route);
    m.provider = pb_str(j->provider);
    m.model = pb_str(j->model);
    m.key_id = pb_str(j->key_id);
    m.team = pb_str(j->team);
    m.project = pb_str(j->project);
    m.judge_route = pb_str(j->judge_route);
    m.score = j->score;
    m.scale_min = j->scale_min;
    m.scale_max = j->scale_max;
    m.pass = j->pass != 0;
    m.label = pb_str(j->label);
    m.at_ms = j->at_ms;
    m.snapshot_version = j->snapshot_version;
    m.prompt_text = pb_str(j->prompt_text ? j->prompt_text : "");
    m.answer_text = pb_str(j->answer_text ? j->answer_text : "");
    size_t len = llmgw__v1__judgement__get_packed_size(&m);
    if (len > MAX_ROW_BYTES)
        return GW_ERANGE; /* larger than a record may be (its text) */
    struct entry *e = entry_alloc(E_JUDGEMENT, len);
    if (!e)
        return GW_ENOMEM;
    llmgw__v1__judgement__pack(&m, e->data);
    /* Kept text never goes to the spool's files: it is stored only
     * encrypted, by the control plane. */
    int rc = queue_entry(e, j->prompt_text || j->answer_text);
    if (rc != GW_OK && rc != GW_EINVAL)
        gw_logf(GW_LOG_ERROR, "ledger: judgement dropped (spool full)", "{s:s,s:s}", "request_id",
                j->request_id, "route", j->route);
    return rc;
}

void dp_ledger_stream_reset(void)
{
    pthread_mutex_lock(&L.mu);
    for (struct entry *e = L.head; e; e = e->next)
        e->seq = 0;
    L.unsent = L.head;
    L.next_seq = 1;
    L.inflight = 0;
    pthread_mutex_unlock(&L.mu);
}

/* A batch stops before this many bytes of rows (a row is a few hundred;
 * the control plane takes messages up to 1 MiB). */
#define BATCH_MAX_BYTES (256u * 1024)

/* LedgerRow { <row>, 32: seq } (a Judgement: 19: seq) of e: its length,
 * and its bytes at out (when not NULL). */
static size_t row_frame(const struct entry *e, unsigned char *out)
{
    unsigned char seqf[24];
    size_t seqn = gw_pb_field_varint(seqf, e->kind == E_JUDGEMENT ? 19 : 32, e->seq);
    if (out) {
        memcpy(out, e->data, e->len);
        memcpy(out + e->len, seqf, seqn);
    }
    return e->len + seqn;
}

int dp_ledger_next(const char *replica_id, size_t window, size_t max_rows, unsigned char **out,
                   size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    pthread_mutex_lock(&L.mu);
    struct entry *first = L.unsent;
    if (!first || L.inflight >= window) {
        pthread_mutex_unlock(&L.mu);
        return 0;
    }
    /* The rows that go: up to max_rows, within the window and the bytes. */
    size_t k = 0, rows_len = 0;
    struct entry *e = first;
    uint64_t seq = L.next_seq;
    size_t lim = max_rows > 1 ? max_rows : 1;
    enum entry_kind last = E_ROW;
    for (; e && k < lim && L.inflight + k < window; e = e->next, k++) {
        /* A batch is rows, then judgements (they travel in two lists: the
         * seqs must rise across them as they do on the wire). */
        if (e->kind == E_ROW && last == E_JUDGEMENT)
            break;
        last = e->kind;
        e->seq = seq + k;
        size_t f = row_frame(e, NULL) + 12; /* with its field header, at most */
        if (k && rows_len + f > BATCH_MAX_BYTES) {
            e->seq = 0;
            break;
        }
        rows_len += f;
    }
    /* ReportMessage { 1: replica_id, 3: LedgerRow } for one row, or
     * { 1: replica_id, 7: LedgerBatch { 1: LedgerRow, ... } }. */
    size_t rlen = strlen(replica_id);
    unsigned char *m = malloc(24 + rlen + 12 + rows_len);
    if (!m) {
        for (struct entry *x = first; x != e; x = x->next)
            x->seq = 0; /* not sent after all: they go on the next try */
        pthread_mutex_unlock(&L.mu);
        return -1;
    }
    size_t n = gw_pb_field_len(m, 1, rlen);
    memcpy(m + n, replica_id, rlen);
    n += rlen;
    /* A judgement is ReportMessage field 11, or LedgerBatch field 2. */
    if (k == 1) {
        n += gw_pb_field_len(m + n, first->kind == E_JUDGEMENT ? 11 : 3, row_frame(first, NULL));
        n += row_frame(first, m + n);
    } else {
        size_t inner = 0;
        for (struct entry *x = first; x != e; x = x->next) {
            unsigned char hd[12];
            size_t f = row_frame(x, NULL);
            inner += gw_pb_field_len(hd, x->kind == E_JUDGEMENT ? 2 : 1, f) + f;
        }
        n += gw_pb_field_len(m + n, 7, inner);
        for (struct entry *x = first; x != e; x = x->next) {
            n += gw_pb_field_len(m + n, x->kind == E_JUDGEMENT ? 2 : 1, row_frame(x, NULL));
            n += row_frame(x, m + n);
        }
    }
    L.next_seq += k;
    L.unsent = e;
    L.inflight += k;
    pthread_mutex_unlock(&L.mu);
    *out = m;
    *outlen = n;
    return (int)k;
}

void dp_ledger_acked(uint64_t through)
{
    pthread_mutex_lock(&L.mu);
    size_t n = 0;
    while (L.head && L.head->seq != 0 && L.head->seq <= through) {
        struct entry *e = L.head;
        L.head = e->next;
        if (!L.head)
            L.tail = NULL;
        if (L.unsent == e) /* cannot happen: acked rows were sent */
            L.unsent = L.head;
        struct seg *g = e->seg != NO_SEGMENT ? seg_find(e->seg) : NULL;
        if (g)
            g->acked++;
        else
            L.bytes -= RECORD_HEAD + e->len <= L.bytes ? RECORD_HEAD + e->len : L.bytes;
        L.rows--;
        L.inflight = L.inflight ? L.inflight - 1 : 0;
        free(e);
        n++;
    }
    L.st.acked_rows += n;
    if (n && L.dir[0]) {
        /* The newest segment, once wholly acknowledged, goes too (a new one
         * is opened by the next row): an idle gateway keeps no spool. */
        struct seg *cur = L.fd >= 0 && L.nsegs ? &L.segs[L.nsegs - 1] : NULL;
        if (cur && cur->acked >= cur->rows)
            seg_close_current();
        seg_collect();
    }
    pthread_mutex_unlock(&L.mu);
}

void dp_ledger_sync(void)
{
    pthread_mutex_lock(&L.mu);
    if (L.fd >= 0 && L.dirty) {
        if (fdatasync(L.fd) != 0)
            gw_logf(GW_LOG_WARN, "ledger spool: fdatasync failed", "{s:s}", "error",
                    strerror(errno));
        L.dirty = 0;
    }
    pthread_mutex_unlock(&L.mu);
}

void dp_ledger_stats(struct dp_ledger_stats *st)
{
    pthread_mutex_lock(&L.mu);
    *st = L.st;
    st->pending_rows = L.rows;
    st->inflight_rows = L.inflight;
    st->spool_bytes = L.dir[0] ? L.bytes : 0;
    size_t spooled = 0;
    for (size_t i = 0; i < L.nsegs; i++)
        spooled += L.segs[i].rows - L.segs[i].acked;
    st->spooled_rows = spooled;
    pthread_mutex_unlock(&L.mu);
}

size_t dp_ledger_pending(void)
{
    pthread_mutex_lock(&L.mu);
    size_t n = L.rows;
    pthread_mutex_unlock(&L.mu);
    return n;
}

void dp_ledger_shutdown(void)
{
    pthread_mutex_lock(&L.mu);
    seg_close_current();
    if (L.dir[0])
        seg_collect();
    struct entry *e = L.head;
    while (e) {
        struct entry *nx = e->next;
        free(e);
        e = nx;
    }
    L.head = L.tail = L.unsent = NULL;
    L.rows = L.inflight = 0;
    free(L.segs);
    L.segs = NULL;
    L.nsegs = L.capsegs = 0;
    L.bytes = 0;
    L.ready = 0;
    pthread_mutex_unlock(&L.mu);
}
