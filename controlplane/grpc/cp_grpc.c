#include "cp_grpc.h"
#include "cp_replicas.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw_buf.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_grpc.h"
#include "gw_log.h"
#include "gw_time.h"
#include "llmgw/v1/control.pb-c.h"

#define WATCH_METHOD "/llmgw.v1.Control/Watch"
#define REPORT_METHOD "/llmgw.v1.Control/Report"
#define MAX_REQUEST_BYTES (1u << 20) /* a WatchRequest or ReportMessage */
/* The recent deltas kept packed: a Watch whose send was still in flight
 * when up to this many were published catches up delta by delta; one
 * further behind gets the whole document. */
#define DELTA_RING 8

enum kind { K_WATCH, K_REPORT };

/* One pending grpc_server_request_registered_call, re-armed on each call. */
struct acceptor {
    struct cp_grpc *srv;
    enum kind kind;
    struct gw_grpc_tag tag;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
};

/* An accepted Watch or Report call. It lives until every batch it started
 * has completed (pending == 0). */
struct stream {
    struct cp_grpc *srv;
    struct stream *prev, *next;
    enum kind kind;
    grpc_call *call;
    struct gw_grpc_tag t_close, t_send, t_recv;
    int pending; /* batches in flight */
    int closed;  /* RECV_CLOSE_ON_SERVER completed */
    int cancelled;
    int sending;     /* a send batch is in flight (at most one) */
    int finished;    /* status sent */
    int half_closed; /* a Report stream's client half-closed: finish once no send is in flight */
    /* A Watch: the version last sent to it (0: none); whether it applies
     * deltas (WatchRequest.accepts_delta); whether its next message must be
     * the whole document (it is new, or a full build was published since). */
    int64_t sent_version;
    int accepts_delta;
    int need_doc;
    grpc_byte_buffer *send_bb, *recv_bb;
    struct cp_replica *rep; /* NULL when the table was full */
    /* Under mutual TLS, the identity its client certificate carries
     * (cert_identity); "" otherwise. */
    char identity[CP_REPLICA_ID_MAX + 1];
    int named;   /* a Report stream's first message named it; later ids are ignored */
    int refused; /* ended by refuse(): its status is on its way */
    uint64_t id; /* names a Report stream to cp_grpc_report_reply */
    /* A Report stream's reply not yet sent: the newest ack, and encoded
     * LeaseGrant fields (key and length included), coalesced into one
     * ReportReply per send. */
    uint64_t ack_through;
    struct gw_buf grants;
    /* The newest FleetView for it not yet sent (encoded), or NULL. */
    unsigned char *view;
    size_t view_len;
};

struct cp_grpc {
    struct gw_grpc_loop *loop;
    grpc_completion_queue *cq;
    grpc_server *server;
    void *watch_m, *report_m;
    struct acceptor acc[2];
    struct stream *streams;
    struct cp_replicas replicas;
    int port;
    int closing;
    int shutdown_done;
    struct gw_grpc_tag t_shutdown;
    /* The newest publish: its version and build time; pub_seq counts
     * publishes (0: none yet). */
    int64_t cur_version, cur_built_ms;
    uint64_t pub_seq;
    /* The recent deltas, each packed once into a Snapshot and sent as the
     * same bytes to every Watch that was last sent its base; oldest
     * overwritten first, emptied by a full build. */
    struct {
        int64_t base, version;
        grpc_byte_buffer *bb; /* NULL: an empty slot */
    } ring[DELTA_RING];
    size_t ring_next;
    /* The whole document, packed once (lazily: only when some Watch needs
     * it) after publish doc_seq and shared by every Watch that needs it.
     * It comes from the document source (cp_grpc_set_document). doc_tried: the publish after which
     * the source was last asked, so a source that fails is asked once per publish. */
    grpc_byte_buffer *doc;
    int64_t doc_version;
    uint64_t doc_seq, doc_tried;
    char *(*document)(void *arg, int64_t *version, size_t *len);
    void *document_arg;
    struct cp_grpc_stats stats;
    uint64_t next_stream_id;
    int64_t refused_log_ms; /* the last "call refused" warning: one a second at most */
    struct cp_grpc_opts o;
};

/* A replica's name: what it says, else its peer address without the port.
 * The stream holds the entry (not evictable) until it ends. Under mutual
 * TLS the name is bound to the first certificate identity that used it:
 * another identity gets *refused set and NULL. */
static struct cp_replica *replica_for(struct stream *st, const char *id, int *refused)
{
    struct cp_grpc *s = st->srv;
    char name[CP_REPLICA_ID_MAX + 1];
    *refused = 0;
    if (id && *id) {
        snprintf(name, sizeof(name), "%s", id);
    } else {
        char *peer = grpc_call_get_peer(st->call);
        cp_replicas_peer_name(peer, name, sizeof(name));
        gpr_free(peer);
    }
    struct cp_replica *r = cp_replicas_get(&s->replicas, name, gw_wall_ms());
    if (!r)
        return NULL;
    if (st->identity[0]) {
        if (!r->identity[0]) {
            memcpy(r->identity, st->identity, sizeof(r->identity));
        } else if (strcmp(r->identity, st->identity) != 0) {
            *refused = 1;
            return NULL;
        }
    }
    r->streams++;
    return r;
}

/* The identity of the call's client certificate: its peer identity as the
 * TLS layer reports it (the first subject alternative name, else the
 * common name); "" without one. */
static void cert_identity(grpc_call *call, char *out, size_t outlen)
{
    out[0] = '\0';
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    if (!ctx)
        return;
    grpc_auth_property_iterator it = grpc_auth_context_peer_identity(ctx);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p && p->value && p->value_length > 0)
        snprintf(out, outlen, "%.*s",
                 (int)(p->value_length < outlen - 1 ? p->value_length : outlen - 1), p->value);
    grpc_auth_context_release(ctx);
}

/* Ends a call that may not go on, with status and a reason the data plane
 * logs; the warning here is rate limited (a caller can retry in a loop). */
static void refuse(struct cp_grpc *s, grpc_call *call, grpc_status_code status, const char *why,
                   const char *replica_id)
{
    int64_t now = gw_wall_ms();
    if (now - s->refused_log_ms >= 1000) {
        s->refused_log_ms = now;
        char *peer = grpc_call_get_peer(call);
        gw_logf(GW_LOG_WARN, "grpc: call refused", "{s:s,s:s,s:s?}", "reason", why, "peer",
                peer ? peer : "?", "replica_id", replica_id);
        gpr_free(peer);
    }
    grpc_call_cancel_with_status(call, status, why, NULL);
}

/* ------------------------------------------------------------- streams */

static void stream_maybe_free(struct stream *st)
{
    if (st->pending > 0)
        return;
    struct cp_grpc *s = st->srv;
    if (st->prev)
        st->prev->next = st->next;
    else
        s->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    if (st->rep) {
        if (st->kind == K_WATCH && st->rep->watches > 0 && --st->rep->watches == 0 &&
            s->o.on_disconnect)
            s->o.on_disconnect(s->o.arg, st->rep->id);
        if (st->rep->streams > 0)
            st->rep->streams--;
        st->rep->seen_ms = gw_wall_ms();
    }
    if (st->send_bb)
        grpc_byte_buffer_destroy(st->send_bb);
    if (st->recv_bb)
        grpc_byte_buffer_destroy(st->recv_bb);
    gw_buf_free(&st->grants);
    free(st->view);
    grpc_call_unref(st->call);
    free(st);
}

static int start(struct stream *st, const grpc_op *ops, size_t n, struct gw_grpc_tag *tag)
{
    grpc_call_error e = grpc_call_start_batch(st->call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        gw_logf(GW_LOG_ERROR, "grpc: cannot start a batch", "{s:i}", "error", (int)e);
        return GW_EIO;
    }
    st->pending++;
    return GW_OK;
}

static void report_finish(struct stream *st);

static grpc_byte_buffer *whole_document(struct cp_grpc *s, int64_t *version);

/* Sends a Watch what it is missing, when no send is in flight: the delta
 * from the version it was last sent (one of the ring's, shared bytes) when
 * it takes deltas, else the whole document (shared too). A Watch already
 * at or past the newest version gets nothing. Its cost does not depend on
 * the number of Watches: nothing is packed per Watch. */
static void watch_pump(struct stream *st)
{
    struct cp_grpc *s = st->srv;
    if (st->closed || st->sending || s->closing || !s->pub_seq)
        return;
    if (!st->need_doc && st->sent_version >= s->cur_version)
        return;
    grpc_byte_buffer *bb = NULL;
    int64_t version = 0;
    int delta = 0;
    if (!st->need_doc && st->accepts_delta) {
        for (size_t i = 0; i < DELTA_RING && !bb; i++) {
            size_t k = (s->ring_next + DELTA_RING - 1 - i) % DELTA_RING; /* newest first */
            if (s->ring[k].bb && s->ring[k].base == st->sent_version) {
                bb = s->ring[k].bb;
                version = s->ring[k].version;
                delta = 1;
            }
        }
    }
    if (!bb) {
        bb = whole_document(s, &version);
        /* No document to be had (the source failed), or one no newer than
         * what it has: the next publish tries again. */
        if (!bb || (!st->need_doc && version <= st->sent_version))
            return;
    }
    st->send_bb = grpc_byte_buffer_copy(bb); /* shares the slices: no copy of the bytes */
    grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
    op.data.send_message.send_message = st->send_bb;
    if (start(st, &op, 1, &st->t_send) == GW_OK) {
        st->sending = 1;
        st->sent_version = version;
        st->need_doc = 0;
        if (delta)
            s->stats.deltas_sent++;
        else
            s->stats.documents_sent++;
    }
}

/* Sends a Report stream's pending reply; 1 when a send started. */
static int reply_pump(struct stream *st)
{
    if (st->closed || st->sending || st->finished || st->srv->closing ||
        (!st->ack_through && !st->grants.len && !st->view))
        return 0;
    unsigned char head[48], vhead[20];
    size_t hn = st->ack_through ? gw_pb_field_varint(head, 2, st->ack_through) : 0;
    if (st->srv->o.ledger_batch_max)
        hn += gw_pb_field_varint(head + hn, 4, st->srv->o.ledger_batch_max);
    size_t vn = st->view ? gw_pb_field_len(vhead, 10, st->view_len) : 0;
    size_t total = hn + st->grants.len + vn + (st->view ? st->view_len : 0);
    unsigned char *m = malloc(total + 1);
    if (!m)
        return 0;
    memcpy(m, head, hn);
    if (st->grants.len)
        memcpy(m + hn, st->grants.data, st->grants.len);
    if (st->view) {
        memcpy(m + hn + st->grants.len, vhead, vn);
        memcpy(m + hn + st->grants.len + vn, st->view, st->view_len);
    }
    st->send_bb = gw_grpc_raw(m, total);
    free(m);
    if (!st->send_bb)
        return 0;
    st->ack_through = 0;
    gw_buf_reset(&st->grants);
    free(st->view);
    st->view = NULL;
    st->view_len = 0;
    grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
    op.data.send_message.send_message = st->send_bb;
    if (start(st, &op, 1, &st->t_send) != GW_OK)
        return 0;
    st->sending = 1;
    return 1;
}

static void on_send(void *arg, int ok)
{
    struct stream *st = arg;
    st->pending--;
    st->sending = 0;
    if (st->send_bb) {
        grpc_byte_buffer_destroy(st->send_bb);
        st->send_bb = NULL;
    }
    if (ok && st->kind == K_WATCH)
        watch_pump(st);
    /* The client half-closed while this send was in flight: report_finish
     * had to wait for it (one send at a time), so finish the call now;
     * replies still pending are dropped (the data plane sends its
     * unacknowledged rows again on its next stream). */
    if (st->kind == K_REPORT && !(ok && reply_pump(st)) && st->half_closed)
        report_finish(st);
    stream_maybe_free(st);
}

static void on_close(void *arg, int ok)
{
    struct stream *st = arg;
    st->pending--;
    st->closed = 1;
    stream_maybe_free(st);
}

/* Sends the Report call's OK status. While another send is in flight it
 * cannot start (one SEND at a time); on_send calls it again then, as
 * half_closed is set. */
static void report_finish(struct stream *st)
{
    st->half_closed = 1;
    if (st->finished || st->closed || st->srv->closing || st->sending)
        return;
    grpc_op op = {.op = GRPC_OP_SEND_STATUS_FROM_SERVER};
    op.data.send_status_from_server.status = GRPC_STATUS_OK;
    if (start(st, &op, 1, &st->t_send) == GW_OK) {
        st->finished = 1;
        st->sending = 1;
    }
}

static void report_recv(struct stream *st);

/* 0, or nonzero when the message was not taken (the stream must end). */
static int handle_report(struct stream *st, const Llmgw__V1__ReportMessage *m)
{
    struct cp_grpc *s = st->srv;
    /* The first message names the stream's replica; a later message cannot
     * rename it (nor make it hold another table entry). */
    if (!st->named) {
        int refused;
        st->named = 1;
        st->rep = replica_for(st, m->replica_id, &refused);
        if (refused) {
            st->refused = 1;
            refuse(s, st->call, GRPC_STATUS_PERMISSION_DENIED,
                   "this replica id is bound to another client certificate", m->replica_id);
            return 1;
        }
    } else if (st->rep) {
        st->rep->seen_ms = gw_wall_ms();
    }
    if (m->body_case == LLMGW__V1__REPORT_MESSAGE__BODY_ACK && m->ack && st->rep) {
        st->rep->acked_version = m->ack->version;
        st->rep->acked_at_ms = gw_wall_ms();
        if (s->o.on_ack)
            s->o.on_ack(s->o.arg, st->rep->id, m->ack->version);
    }
    if (s->o.on_report)
        return s->o.on_report(s->o.arg, st->id, st->rep ? st->rep->id : "", m);
    return 0;
}

static void on_recv(void *arg, int ok)
{
    struct stream *st = arg;
    st->pending--;
    grpc_byte_buffer *bb = st->recv_bb;
    st->recv_bb = NULL;
    if (!ok || !bb) {
        /* The data plane half-closed its side (or the call is gone). */
        report_finish(st);
    } else {
        ProtobufCMessage *m =
            gw_grpc_unpack(&llmgw__v1__report_message__descriptor, bb, MAX_REQUEST_BYTES);
        grpc_byte_buffer_destroy(bb);
        int taken = m && handle_report(st, (const Llmgw__V1__ReportMessage *)m) == 0;
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
        if (!taken && st->refused) {
            /* refused by handle_report: the status is on its way */
        } else if (!taken) {
            /* Acks are cumulative: a message skipped here (a ledger row that
             * did not parse, or could not be queued) must not be covered by
             * the ack of a later one. The stream ends, and the data plane
             * sends everything unacknowledged again on its next. */
            gw_log(GW_LOG_WARN,
                   "grpc: a Report message could not be taken; ending the stream (the data plane "
                   "sends again)",
                   NULL);
            grpc_call_cancel(st->call, NULL);
        } else {
            report_recv(st);
        }
    }
    stream_maybe_free(st);
}

static void report_recv(struct stream *st)
{
    if (st->closed || st->srv->closing)
        return;
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
    op.data.recv_message.recv_message = &st->recv_bb;
    (void)start(st, &op, 1, &st->t_recv);
}

/* A new call: watch for its end, send initial metadata, then its kind's work. */
static void stream_open(struct cp_grpc *s, enum kind kind, grpc_call *call, grpc_byte_buffer *req)
{
    struct stream *st = calloc(1, sizeof(*st));
    if (!st) {
        grpc_call_cancel(call, NULL);
        grpc_call_unref(call);
        return;
    }
    st->srv = s;
    st->kind = kind;
    st->call = call;
    st->id = ++s->next_stream_id;
    gw_buf_init(&st->grants, 1u << 20);
    st->next = s->streams;
    if (s->streams)
        s->streams->prev = st;
    s->streams = st;
    gw_grpc_tag_init(&st->t_close, on_close, st);
    gw_grpc_tag_init(&st->t_send, on_send, st);
    gw_grpc_tag_init(&st->t_recv, on_recv, st);
    if (s->o.tls_client_ca_file)
        cert_identity(call, st->identity, sizeof(st->identity));

    grpc_op close_op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
    close_op.data.recv_close_on_server.cancelled = &st->cancelled;
    if (start(st, &close_op, 1, &st->t_close) != GW_OK) {
        grpc_call_cancel(call, NULL);
        stream_maybe_free(st);
        return;
    }
    if (kind == K_WATCH) {
        Llmgw__V1__WatchRequest *w = (Llmgw__V1__WatchRequest *)gw_grpc_unpack(
            &llmgw__v1__watch_request__descriptor, req, MAX_REQUEST_BYTES);
        int refused;
        st->rep = replica_for(st, w ? w->replica_id : NULL, &refused);
        if (refused) {
            refuse(s, call, GRPC_STATUS_PERMISSION_DENIED,
                   "this replica id is bound to another client certificate",
                   w ? w->replica_id : NULL);
            if (w)
                protobuf_c_message_free_unpacked(&w->base, NULL);
            return;
        }
        if (st->rep)
            st->rep->watches++;
        /* A new Watch starts with the whole document, whatever version it
         * says it has: the version names a document, but this control
         * plane cannot tell that the data plane's is the one it holds. */
        st->need_doc = 1;
        st->accepts_delta = w && w->accepts_delta;
        gw_logf(GW_LOG_INFO, "grpc: watch opened", "{s:s,s:I,s:b}", "replica_id",
                st->rep ? st->rep->id : "?", "have_version", (json_int_t)(w ? w->have_version : 0),
                "accepts_delta", st->accepts_delta);
        if (w)
            protobuf_c_message_free_unpacked(&w->base, NULL);
    }
    /* Initial metadata goes out at once, so the client's RECV_INITIAL_METADATA
     * completes even before there is a snapshot to send. */
    grpc_op md = {.op = GRPC_OP_SEND_INITIAL_METADATA};
    if (start(st, &md, 1, &st->t_send) == GW_OK)
        st->sending = 1;
    if (kind == K_REPORT)
        report_recv(st);
}

/* ----------------------------------------------------------- acceptors */

static void arm(struct acceptor *a)
{
    struct cp_grpc *s = a->srv;
    grpc_metadata_array_init(&a->md);
    a->call = NULL;
    a->payload = NULL;
    grpc_call_error e = grpc_server_request_registered_call(
        s->server, a->kind == K_WATCH ? s->watch_m : s->report_m, &a->call, &a->deadline, &a->md,
        a->kind == K_WATCH ? &a->payload : NULL, s->cq, s->cq, &a->tag);
    if (e != GRPC_CALL_OK)
        gw_logf(GW_LOG_ERROR, "grpc: cannot request a call", "{s:i}", "error", (int)e);
}

/* 1 when the call's metadata carries "authorization: Bearer <token>" with
 * the fleet's token (compared in constant time). */
static int fleet_token_ok(const char *token, const grpc_metadata_array *md)
{
    size_t tn = strlen(token);
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        if (!grpc_slice_str_cmp(m->key, "authorization")) {
            const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
            size_t vn = GRPC_SLICE_LENGTH(m->value);
            return vn == 7 + tn && strncasecmp(v, "Bearer ", 7) == 0 &&
                   gw_ct_equal(v + 7, token, tn);
        }
    }
    return 0;
}

static void on_accept(void *arg, int ok)
{
    struct acceptor *a = arg;
    struct cp_grpc *s = a->srv;
    int authorized = !s->o.fleet_token || fleet_token_ok(s->o.fleet_token, &a->md);
    grpc_metadata_array_destroy(&a->md);
    if (ok && a->call && !s->closing && !authorized) {
        refuse(s, a->call, GRPC_STATUS_UNAUTHENTICATED,
               "missing or wrong fleet token (authorization: Bearer, LLMGW_FLEET_TOKEN)", NULL);
        grpc_call_unref(a->call);
    } else if (ok && a->call && !s->closing)
        stream_open(s, a->kind, a->call, a->payload);
    else if (a->call)
        grpc_call_unref(a->call);
    if (a->payload)
        grpc_byte_buffer_destroy(a->payload);
    a->call = NULL;
    a->payload = NULL;
    if (ok && !s->closing)
        arm(a);
}

static void on_shutdown(void *arg, int ok)
{
    (void)ok;
    struct cp_grpc *s = arg;
    s->shutdown_done = 1;
}

/* ------------------------------------------------------------ lifecycle */

static char *read_pem(const char *path, char *err, size_t errlen, const char *what)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1 << 20) &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        fclose(f);
        return buf;
    }
    free(buf);
    if (f)
        fclose(f);
    snprintf(err, errlen, "%s: cannot read '%s'", what, path);
    return NULL;
}

static grpc_server_credentials *server_creds(const struct cp_grpc_opts *o, char *err, size_t errlen)
{
    if (!o->tls_cert_file && !o->tls_key_file) {
        if (!o->insecure) {
            snprintf(err, errlen,
                     "grpc: no TLS certificate and key configured, and plaintext is not allowed");
            return NULL;
        }
        return grpc_insecure_server_credentials_create();
    }
    if (!o->tls_cert_file || !o->tls_key_file) {
        snprintf(err, errlen, "grpc: TLS needs both a certificate and a key");
        return NULL;
    }
    char *cert = read_pem(o->tls_cert_file, err, errlen, "grpc TLS certificate");
    char *key = cert ? read_pem(o->tls_key_file, err, errlen, "grpc TLS key") : NULL;
    char *ca = key && o->tls_client_ca_file
                   ? read_pem(o->tls_client_ca_file, err, errlen, "grpc TLS client CA")
                   : NULL;
    grpc_server_credentials *c = NULL;
    if (cert && key && (ca || !o->tls_client_ca_file)) {
        grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
        c = grpc_ssl_server_credentials_create_ex(
            ca, &pair, 1,
            ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        if (!c)
            snprintf(err, errlen, "grpc: the TLS certificate or key is not valid");
    }
    if (key)
        memset(key, 0, strlen(key));
    free(cert);
    free(key);
    free(ca);
    return c;
}

struct cp_grpc *cp_grpc_new(struct event_base *base, const struct cp_grpc_opts *o, char *err,
                            size_t errlen)
{
    struct cp_grpc *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = *o;
    cp_replicas_init(&s->replicas, CP_REPLICAS_CAP);
    s->loop = gw_grpc_loop_new(base);
    if (!s->loop) {
        snprintf(err, errlen, "grpc: cannot start the completion queue");
        free(s);
        return NULL;
    }
    s->cq = gw_grpc_loop_cq(s->loop);
    /* The data plane pings every 10 s (dp_cpclient_conn.c): allow pings down to
     * 5 s apart, even between calls, or the server answers "too many pings"
     * and drops the connection (STACK.md pitfall 5). The server pings too,
     * to notice a data plane that vanished without a FIN. */
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
         .value.integer = 5000},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
         .value.integer = 1},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_KEEPALIVE_TIME_MS, .value.integer = 20000},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS, .value.integer = 10000},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, .value.integer = -1},
    };
    grpc_channel_args ca = {.num_args = sizeof(args) / sizeof(*args), .args = args};
    s->server = grpc_server_create(&ca, NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    s->watch_m = grpc_server_register_method(s->server, WATCH_METHOD, NULL,
                                             GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    s->report_m =
        grpc_server_register_method(s->server, REPORT_METHOD, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
    grpc_server_credentials *creds = server_creds(o, err, errlen);
    if (creds) {
        s->port = grpc_server_add_http2_port(s->server, o->listen, creds);
        grpc_server_credentials_release(creds);
        if (s->port <= 0)
            snprintf(err, errlen, "grpc: cannot listen on '%s'", o->listen);
    }
    if (!creds || s->port <= 0) {
        /* A server never started is destroyed without a shutdown. */
        grpc_server_destroy(s->server);
        gw_grpc_loop_free(s->loop);
        free(s);
        return NULL;
    }
    grpc_server_start(s->server);
    for (int k = 0; k < 2; k++) {
        s->acc[k].srv = s;
        s->acc[k].kind = (enum kind)k;
        gw_grpc_tag_init(&s->acc[k].tag, on_accept, &s->acc[k]);
        arm(&s->acc[k]);
    }
    return s;
}

int cp_grpc_port(const struct cp_grpc *s)
{
    return s->port;
}

int64_t cp_grpc_version(const struct cp_grpc *s)
{
    return s->cur_version;
}

static void cleanse_free(void *p, size_t len)
{
    explicit_bzero(p, len);
    free(p);
}

/* Like gw_grpc_pack, but the packed bytes (the document holds plaintext
 * provider credentials) are overwritten when the last reference to them is
 * released: by the server (its shared document or delta ring), a Watch's
 * copy, or the transport. gRPC's own
 * framing and TLS buffers are not covered. */
static grpc_byte_buffer *pack_cleansed(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *p = malloc(n ? n : 1);
    if (!p)
        return NULL;
    protobuf_c_message_pack(m, p);
    grpc_slice sl = grpc_slice_new_with_len(p, n, cleanse_free);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* A Snapshot message packed once: the whole document (delta NULL), or a
 * delta from base. */
static grpc_byte_buffer *pack_snapshot(int64_t version, int64_t built_at_ms, int64_t base,
                                       const void *doc, size_t doc_len, const void *delta,
                                       size_t delta_len)
{
    Llmgw__V1__Snapshot m = LLMGW__V1__SNAPSHOT__INIT;
    m.version = version;
    m.built_at_ms = built_at_ms;
    m.base_version = base;
    m.document.data = (uint8_t *)doc;
    m.document.len = doc_len;
    m.delta.data = (uint8_t *)delta;
    m.delta.len = delta_len;
    return pack_cleansed(&m.base);
}

static void drop_document(struct cp_grpc *s)
{
    if (s->doc)
        grpc_byte_buffer_destroy(s->doc);
    s->doc = NULL;
}

/* The whole document for Watches that need one, packed once after each
 * publish: asked of the document source only when the first such Watch
 * comes. NULL when there is none to be had. */
static grpc_byte_buffer *whole_document(struct cp_grpc *s, int64_t *version)
{
    if (s->doc && s->doc_seq == s->pub_seq) {
        *version = s->doc_version;
        return s->doc;
    }
    if (!s->document || s->doc_tried == s->pub_seq)
        return NULL;
    s->doc_tried = s->pub_seq;
    int64_t v = 0;
    size_t len = 0;
    char *d = s->document(s->document_arg, &v, &len);
    if (!d) {
        gw_logf(GW_LOG_ERROR, "grpc: no whole document to send; the watches that need one wait",
                "{s:I}", "version", (json_int_t)s->cur_version);
        return NULL;
    }
    s->stats.documents_packed++;
    /* The source's document may be newer than the last publish (the
     * builder runs ahead of the loop): it is sent under its own version,
     * and the deltas up to it are skipped by the Watches that get it. */
    grpc_byte_buffer *bb = pack_snapshot(v, s->cur_built_ms, 0, d, len, NULL, 0);
    explicit_bzero(d, len);
    free(d);
    if (!bb)
        return NULL;
    drop_document(s);
    s->doc = bb;
    s->doc_version = v;
    s->doc_seq = s->pub_seq;
    *version = v;
    return bb;
}

static void ring_clear(struct cp_grpc *s)
{
    for (size_t i = 0; i < DELTA_RING; i++) {
        if (s->ring[i].bb)
            grpc_byte_buffer_destroy(s->ring[i].bb);
        s->ring[i].bb = NULL;
    }
}

/* Makes version the newest publish and pushes to every Watch. delta_bb:
 * the packed delta from base (ring takes it), or NULL for a full build,
 * after which every Watch needs the whole document. */
static void publish_version(struct cp_grpc *s, int64_t version, int64_t built_at_ms, int64_t base,
                            grpc_byte_buffer *delta_bb)
{
    s->pub_seq++;
    s->cur_version = version;
    s->cur_built_ms = built_at_ms;
    if (delta_bb) {
        size_t k = s->ring_next;
        if (s->ring[k].bb)
            grpc_byte_buffer_destroy(s->ring[k].bb);
        s->ring[k].base = base;
        s->ring[k].version = version;
        s->ring[k].bb = delta_bb;
        s->ring_next = (k + 1) % DELTA_RING;
    } else {
        ring_clear(s);
    }
    for (struct stream *st = s->streams; st; st = st->next) {
        if (st->kind != K_WATCH)
            continue;
        if (!delta_bb)
            st->need_doc = 1;
        watch_pump(st);
    }
}

void cp_grpc_set_document(struct cp_grpc *s,
                          char *(*document)(void *arg, int64_t *version, size_t *len), void *arg)
{
    s->document = document;
    s->document_arg = arg;
}

int cp_grpc_publish_version(struct cp_grpc *s, int64_t version, int64_t built_at_ms,
                            int64_t base_version, const void *delta, size_t delta_len)
{
    grpc_byte_buffer *bb = NULL;
    if (base_version > 0 && delta) {
        bb = pack_snapshot(version, built_at_ms, base_version, NULL, 0, delta, delta_len);
        if (!bb)
            return GW_ENOMEM;
    }
    /* The document packed for an older publish is stale now (its bytes
     * hold credentials: let them go at once). */
    drop_document(s);
    publish_version(s, version, built_at_ms, base_version, bb);
    return GW_OK;
}

void cp_grpc_stats(const struct cp_grpc *s, struct cp_grpc_stats *out)
{
    *out = s->stats;
}

json_t *cp_grpc_replicas(const struct cp_grpc *s)
{
    json_t *a = json_array();
    json_t *o = json_pack("{s:I,s:o}", "version", (json_int_t)s->cur_version, "replicas", a);
    if (!o)
        return NULL;
    for (const struct cp_replica *r = s->replicas.head; r; r = r->next) {
        json_t *j =
            json_pack("{s:s,s:I,s:I,s:b,s:i,s:I,s:s?}", "replica_id", r->id, "acked_version",
                      (json_int_t)r->acked_version, "acked_at_ms", (json_int_t)r->acked_at_ms,
                      "connected", r->watches > 0, "watches", r->watches, "last_seen_ms",
                      (json_int_t)r->seen_ms, "cert_identity", r->identity[0] ? r->identity : NULL);
        if (!j || json_array_append_new(a, j)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

void cp_grpc_free(struct cp_grpc *s)
{
    if (!s)
        return;
    /* Open streams would hold the shutdown forever: cancel them (STACK.md
     * pitfall 3), wait for the notification, then drain the queue. */
    s->closing = 1;
    gw_grpc_tag_init(&s->t_shutdown, on_shutdown, s);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
    grpc_server_cancel_all_calls(s->server);
    gw_grpc_loop_run_until(s->loop, &s->shutdown_done);
    gw_grpc_loop_shutdown(s->loop);
    grpc_server_destroy(s->server);
    gw_grpc_loop_free(s->loop);
    drop_document(s);
    ring_clear(s);
    cp_replicas_clear(&s->replicas);
    free(s);
}

int cp_grpc_report_reply(struct cp_grpc *s, uint64_t stream_id, uint64_t acked_through,
                         const Llmgw__V1__LeaseGrant *const *grants, size_t ngrants)
{
    struct stream *st = s->streams;
    while (st && !(st->kind == K_REPORT && st->id == stream_id))
        st = st->next;
    if (!st || st->closed || st->finished)
        return GW_ECLOSED;
    if (acked_through > st->ack_through)
        st->ack_through = acked_through;
    for (size_t i = 0; i < ngrants; i++) {
        size_t n = llmgw__v1__lease_grant__get_packed_size(grants[i]);
        unsigned char head[20];
        size_t hn = gw_pb_field_len(head, 3, n);
        unsigned char *b = malloc(n + 1);
        if (!b)
            return GW_ENOMEM;
        llmgw__v1__lease_grant__pack(grants[i], b);
        int rc = gw_buf_append(&st->grants, head, hn);
        if (rc == GW_OK)
            rc = gw_buf_append(&st->grants, b, n);
        free(b);
        if (rc != GW_OK)
            return rc;
    }
    (void)reply_pump(st);
    return GW_OK;
}

int cp_grpc_report_view(struct cp_grpc *s, uint64_t stream_id, const void *view, size_t len)
{
    struct stream *st = s->streams;
    while (st && !(st->kind == K_REPORT && st->id == stream_id))
        st = st->next;
    if (!st || st->closed || st->finished)
        return GW_ECLOSED;
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy)
        return GW_ENOMEM;
    memcpy(copy, view, len);
    free(st->view); /* the newest view wins */
    st->view = copy;
    st->view_len = len;
    (void)reply_pump(st);
    return GW_OK;
}
