/*
 * Media requests through the pipeline (docs/media.md): transcriptions,
 * translations, speech and images, in OpenAI's format, to drivers that
 * speak it.
 *
 * They take the same phases as chat (admit, plan, reserve, attempt,
 * answer, record) with three differences:
 *  - one target: the plan keeps its first eligible candidate (two models
 *    do not give interchangeable audio or images), and retries stay on it;
 *  - the answer is the provider's own bytes. A JSON or text answer (a
 *    transcription, images) is read whole, so that what it used is known
 *    before the client gets it with its cost headers; audio and event
 *    streams go out as they arrive, from the first byte of a success (the
 *    bright line), with the provider's Content-Type;
 *  - the money: units (seconds of input audio, characters, images) beside
 *    tokens, a reservation bounded from the request (the audio's duration
 *    read from its header, else its size at a declared bit rate; n images
 *    of the dearest price), and the attempt priced from the provider's
 *    tokens when it reports them, else from the units (dp_cost_media).
 *
 * A streamed answer that breaks after its first byte cannot carry an
 * error in audio: its chunked body is cut, which a client sees as a
 * failed read. An event stream gets an error event and its proper end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp_cost.h"
#include "dp_limits.h"
#include "dp_snapshot.h"
#include "exchange.h"
#include "fc_media.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_sse.h"
#include "gw_str.h"
#include "gw_time.h"

/* Bounds for the reservation, where the request cannot say more. */
#define AUDIO_BITRATE_BPS 16000   /* an upload read as this slow (long) when its header is not */
#define AUDIO_TOKENS_PER_S 25     /* audio input tokens a second, at most */
#define TEXT_TOKENS_PER_S 10      /* a transcript's tokens a second of audio, at most */
#define SPEECH_TOKENS_PER_CHAR 4  /* audio output tokens a character of speech, at most */
#define IMAGE_OUTPUT_TOKENS 10000 /* one generated image's tokens, at most */
/* A streamed answer's event is scanned for usage up to this size. */
#define MAX_SCANNED_EVENT (1u << 20)

struct xmedia {
    struct canon_media_req req;
    void *store;       /* fc_media's multipart fields */
    json_t *root;      /* a JSON request's document (req points into it) */
    char ctype[128];   /* the current answer's Content-Type */
    int relaying;      /* a success streams to the client as it arrives */
    struct gw_sse sse; /* an event stream, scanned for its usage */
    int sse_on;
    struct canon_media_usage used; /* what the current attempt's answer says */
};

struct xmedia *x_media_new(const struct canon_media_req *r, void *store, json_t *root)
{
    struct xmedia *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->req = *r;
    m->store = store;
    m->root = root;
    m->used.images = -1;
    return m;
}

void x_media_release(struct xmedia *m)
{
    if (!m)
        return;
    if (m->sse_on)
        gw_sse_free(&m->sse);
    free(m->store);
    json_decref(m->root);
    free(m);
}

void x_media_free(struct dp_exchange *x)
{
    x_media_release(x->media);
    x->media = NULL;
}

const char *x_media_selector(const struct dp_exchange *x)
{
    return x->media->req.selector;
}

unsigned x_media_cap(const struct dp_exchange *x)
{
    switch (x->media->req.op) {
    case CANON_MEDIA_TRANSCRIBE:
    case CANON_MEDIA_TRANSLATE:
        return DRV_CAP_TRANSCRIPTION;
    case CANON_MEDIA_SPEECH:
        return DRV_CAP_SPEECH;
    case CANON_MEDIA_IMAGE:
    case CANON_MEDIA_IMAGE_EDIT:
        return DRV_CAP_IMAGE;
    }
    return DRV_CAP_IMAGE;
}

const char *x_media_api(const struct dp_exchange *x)
{
    return fc_media_api(x->media->req.op);
}

const char *x_media_operation(const struct dp_exchange *x)
{
    switch (x_media_cap(x)) {
    case DRV_CAP_TRANSCRIPTION:
        return "transcription";
    case DRV_CAP_SPEECH:
        return "speech";
    default:
        return "image";
    }
}

/* ------------------------------------------------------------- the money */

static int is_audio_in(const struct canon_media_req *r)
{
    return r->op == CANON_MEDIA_TRANSCRIBE || r->op == CANON_MEDIA_TRANSLATE;
}

/* The input audio's duration: the provider's billed one, else the file's
 * header, else (bound) its size at the declared bit rate. */
static int64_t audio_bound_ms(const struct canon_media_req *r, const struct dp_provider *p)
{
    if (r->audio_ms > 0)
        return r->audio_ms;
    long long bps = p ? json_integer_value(json_object_get(p->options, "audio_bitrate_bps")) : 0;
    if (bps < 1000)
        bps = AUDIO_BITRATE_BPS;
    return r->file_bytes * 8000 / bps + 1;
}

/* The units of an attempt: what the answer says, else what the request
 * does. */
static void units_of(const struct dp_exchange *x, struct dp_media_units *u)
{
    const struct xmedia *m = x->media;
    const struct canon_media_req *r = &m->req;
    *u = (struct dp_media_units){.size = r->size,
                                 .quality = r->quality,
                                 .media_in = m->used.media_in,
                                 .media_out = m->used.media_out};
    if (is_audio_in(r))
        u->audio_ms = m->used.audio_ms > 0 ? m->used.audio_ms : audio_bound_ms(r, x->prov);
    else if (r->op == CANON_MEDIA_SPEECH)
        u->characters = r->characters;
    else
        u->images = m->used.images >= 0 ? m->used.images : r->images;
}

void x_media_units(const struct dp_exchange *x, int64_t *audio_ms, int64_t *characters,
                   int64_t *images)
{
    *audio_ms = *characters = *images = 0;
    /* Units are what an answer delivered: an attempt that failed before
     * its first byte has none. */
    if (!x->media || !x->prov || !x->committed)
        return;
    struct dp_media_units u;
    units_of(x, &u);
    *audio_ms = u.audio_ms;
    *characters = u.characters;
    *images = u.images;
}

int x_media_cost(const struct dp_exchange *x, const struct dp_price *p, int64_t *cost)
{
    if (!x->committed) {
        *cost = 0; /* nothing was delivered: nothing is billed */
        return GW_OK;
    }
    struct dp_media_units u;
    units_of(x, &u);
    return dp_cost_media(p, &x->usage, &u, cost);
}

/* The most the request may use on its target, in tokens and units. */
static void bounds(const struct dp_exchange *x, const struct dp_provider *p, struct canon_usage *t,
                   struct dp_media_units *u)
{
    const struct canon_media_req *r = &x->media->req;
    *t = (struct canon_usage){.have = 1, .input = r->prompt_bytes};
    *u = (struct dp_media_units){.size = r->size, .quality = r->quality};
    if (is_audio_in(r)) {
        u->audio_ms = audio_bound_ms(r, p);
        int64_t s = u->audio_ms / 1000 + 1;
        u->media_in = s * AUDIO_TOKENS_PER_S;
        t->output = s * TEXT_TOKENS_PER_S + 16;
    } else if (r->op == CANON_MEDIA_SPEECH) {
        u->characters = r->characters;
        t->output = u->media_out = r->characters * SPEECH_TOKENS_PER_CHAR;
    } else {
        u->images = r->images;
        u->media_in = r->input_images * DP_LIMITS_IMAGE_TOKENS;
        t->output = u->media_out = r->images * IMAGE_OUTPUT_TOKENS;
    }
    t->input += u->media_in;
}

void x_media_ask(struct dp_exchange *x, struct dp_limits_ask *ask, int64_t *costs)
{
    for (size_t i = 0; i < x->plan.ncands; i++) {
        const struct dp_candidate *c = &x->plan.cands[i];
        struct canon_usage t;
        struct dp_media_units u;
        bounds(x, c->provider, &t, &u);
        const struct dp_price *p = dp_snapshot_price(x->snap, c->provider->name, c->model);
        int rc = dp_cost_media_bound(p, &t, &u, &costs[i]);
        if (rc == GW_ERANGE)
            costs[i] = INT64_MAX;
        else if (rc != GW_OK)
            costs[i] = -1;
        if (i == 0) {
            ask->est_input_tokens = ask->max_input_tokens = t.input;
            ask->max_tokens = t.output;
        }
    }
    ask->media_cost = costs;
}

/* ---------------------------------------------------------- the attempt */

int x_media_build(struct dp_exchange *x, const struct drv_target *t, struct canon_err *err)
{
    const struct dp_driver *d = dp_driver_of(x->prov);
    struct xmedia *m = x->media;
    m->ctype[0] = '\0';
    m->relaying = 0;
    memset(&m->used, 0, sizeof(m->used));
    m->used.images = -1;
    if (m->sse_on) {
        gw_sse_free(&m->sse);
        m->sse_on = 0;
    }
    if (!d->build_media) {
        canon_err_set(err, 400, "model", "unsupported_operation",
                      "driver '%s' (provider '%s') does not serve %s", d->info->name, x->prov->name,
                      fc_media_api(m->req.op));
        return GW_EINVAL;
    }
    m->req.model = x->model;
    return d->build_media(t, &m->req, &x->dreq, err);
}

void x_media_header(struct dp_exchange *x, const char *line, size_t len)
{
    struct xmedia *m = x->media;
    if (len > 5 && strncmp(line, "HTTP/", 5) == 0) {
        m->ctype[0] = '\0';
        return;
    }
    if (len <= 13 || strncasecmp(line, "content-type:", 13) != 0)
        return;
    const char *v = line + 13;
    size_t n = len - 13;
    while (n && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    /* Copied into our own head: printable bytes only, else left out. */
    int clean = n < sizeof(m->ctype);
    for (size_t i = 0; clean && i < n; i++)
        clean = (unsigned char)v[i] >= 0x20 && v[i] != 0x7f;
    if (clean) {
        memcpy(m->ctype, v, n);
        m->ctype[n] = '\0';
    }
}

static int ctype_is(const struct xmedia *m, const char *prefix)
{
    return strncasecmp(m->ctype, prefix, strlen(prefix)) == 0;
}

/* One event of a streamed answer: the one that carries usage says what the
 * attempt used. */
static void scan_events(struct dp_exchange *x, const char *buf, size_t len)
{
    struct xmedia *m = x->media;
    if (!m->sse_on)
        return;
    for (;;) {
        struct gw_sse_event ev;
        int rc = gw_sse_next(&m->sse, &buf, &len, &ev);
        if (rc == GW_OK) {
            if (ev.data_len && gw_mem_has(ev.data, ev.data_len, "\"usage\""))
                dp_driver_of(x->prov)->media_usage(&m->req, ev.data, ev.data_len, &m->used);
            continue;
        }
        if (rc != GW_EAGAIN) { /* past its bound: the usage stays unknown */
            gw_sse_free(&m->sse);
            m->sse_on = 0;
        }
        return;
    }
}

/* The first byte of a success that streams: the bright line. */
static int start_relay(struct dp_exchange *x)
{
    struct xmedia *m = x->media;
    m->relaying = 1;
    x->client_stream = 1;
    if (ctype_is(m, "text/event-stream")) {
        gw_sse_init(&m->sse, MAX_SCANNED_EVENT);
        m->sse_on = 1;
    }
    return x_commit_stream_as(x, m->ctype[0] ? m->ctype : "application/octet-stream");
}

size_t x_media_body(struct dp_exchange *x, const char *buf, size_t len)
{
    struct xmedia *m = x->media;
    /* Audio and events stream; a JSON or text answer is read whole. */
    if (!x->committed && (ctype_is(m, "audio/") || ctype_is(m, "text/event-stream") ||
                          ctype_is(m, "application/octet-stream"))) {
        if (start_relay(x) != GW_OK) {
            x_gone_at_commit(x);
            return 0;
        }
    }
    if (!m->relaying) {
        if (gw_buf_append(&x->coll, buf, len) != GW_OK) {
            x_attempt_failed(x, CANON_FAIL_PROVIDER_5XX, x->status,
                             "the provider's answer is too large");
            return 0;
        }
        return len;
    }
    x->out_bytes += (int64_t)len;
    scan_events(x, buf, len);
    return gw_http_write(x->req, buf, len) == GW_OK ? len : 0;
}

void x_media_done(struct dp_exchange *x)
{
    struct xmedia *m = x->media;
    x->terminal = 1;
    if (m->relaying) {
        x->verdict = V_OK;
        x->usage = m->used.tokens;
        canon_usage_clamp(&x->usage);
        x->t_client_end = gw_now_us();
        x->final_status = 200;
        x_price(x);
        struct gw_http_req *req = x->req;
        x->req = NULL;
        gw_http_finish(req);
        return;
    }
    if (x->coll.len == 0) {
        x_attempt_failed(x, CANON_FAIL_EMPTY_OUTPUT, x->status, "the provider's answer is empty");
        return;
    }
    if (ctype_is(m, "application/json"))
        dp_driver_of(x->prov)->media_usage(&m->req, x->coll.data, x->coll.len, &m->used);
    /* A whole answer, though the client may have asked for a stream (a
     * provider that does not stream this model): it goes out whole. */
    x->client_stream = 0;
    x_commit(x);
    x->usage = m->used.tokens;
    canon_usage_clamp(&x->usage);
    x->verdict = V_OK; /* priced as delivered */
    x_price(x);
    x_answer_whole_as(x, m->ctype[0] ? m->ctype : "application/json",
                      x->coll.data ? x->coll.data : "", x->coll.len);
}

void x_media_broke(struct dp_exchange *x, const struct canon_event *ev)
{
    struct xmedia *m = x->media;
    x->t_client_end = gw_now_us();
    x->final_status = 200;
    x->usage = m->used.tokens;
    canon_usage_clamp(&x->usage);
    struct gw_http_req *req = x->req;
    x->req = NULL;
    if (!m->sse_on && !ctype_is(m, "text/event-stream")) {
        gw_http_abort(req); /* audio has no error of its own: the body is cut */
        return;
    }
    /* An event stream ends with an error event, as a chat stream does. */
    struct gw_buf b;
    gw_buf_init(&b, 0);
    const char *cls = canon_failure_name(ev->failure);
    int rc = gw_buf_appends(&b, "event: error\ndata: {\"type\":\"error\",\"error\":{\"message\":");
    const char *msg = ev->message && *ev->message ? ev->message : "the upstream provider failed";
    if (rc == GW_OK)
        rc = gw_json_escape(&b, msg, strlen(msg));
    if (rc == GW_OK)
        rc = gw_buf_printf(&b, ",\"type\":\"api_error\",\"code\":\"%s\"}}\n\n", cls);
    if (rc == GW_OK)
        (void)gw_http_finish_with(req, b.data, b.len);
    else
        gw_http_abort(req);
    gw_buf_free(&b);
}
