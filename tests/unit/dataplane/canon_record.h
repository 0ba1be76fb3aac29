/*
 * canon_record: a canon_sink for tests that writes the events it receives
 * as a text transcript, one line per run of events:
 *
 *   START id=<id> model=<model>
 *   TEXT "<delta>""<delta>"...     (consecutive CHUNKs, each quoted, so the
 *                                  provider's chunking stays visible)
 *   REASONING "<joined>" sig=<signature or ->
 *   TOOL 0 id=<id> name=<name> args=<joined TOOL_DELTA pieces>
 *   USAGE in=.. cr=.. cw5=.. cw1h=.. out=.. rs=..   (only the last of a run)
 *   DONE <stop>   |   ERROR <class> status=<n>
 *
 * Consecutive argument and reasoning deltas are joined; events do not depend
 * on how the body was split, so a body fed whole and the same body fed byte
 * by byte give the same transcript; the transcript also checks the
 * event contract (one START first, TOOL_DELTA only for the open call,
 * exactly one terminal event, nothing after it) and records a violation as
 * a "VIOLATION ..." line, which no golden file contains.
 *
 * Below the sink, the harness the driver tests share: canon_record_run feeds
 * a body to a driver's parser whole, in pieces of n bytes or in random
 * pieces and returns the transcript; canon_record_splits checks that every
 * way of splitting a body gives the same transcript, canon_record_check
 * that it is the one wanted, and canon_record_stops that a sink which stops
 * early stops the parser cleanly.
 */
#ifndef CANON_RECORD_H
#define CANON_RECORD_H

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_driver.h"
#include "gw_buf.h"
#include "gw_json.h"

struct canon_record {
    struct gw_buf out;
    int run;      /* the event type of the open run, -1 none */
    int started;  /* START seen */
    int terminal; /* DONE/ERROR seen */
    int open_tool;
    int ntools;
    int content; /* a content event was seen */
    struct canon_usage last_usage;
    int stop_after; /* stop (return 1) after this many events; 0 never */
    int nevents;
};

static inline void canon_record_init(struct canon_record *r)
{
    memset(r, 0, sizeof(*r));
    gw_buf_init(&r->out, 0);
    r->run = -1;
    r->open_tool = -1;
}

static inline void canon_record_free(struct canon_record *r)
{
    gw_buf_free(&r->out);
}

static inline void rec_put(struct canon_record *r, const char *s)
{
    (void)!gw_buf_appends(&r->out, s);
}

static inline void rec_close_run(struct canon_record *r)
{
    if (r->run == CANON_EV_USAGE) {
        char line[256];
        const struct canon_usage *u = &r->last_usage;
        snprintf(line, sizeof(line), "USAGE in=%lld cr=%lld cw5=%lld cw1h=%lld out=%lld rs=%lld\n",
                 (long long)u->input, (long long)u->cache_read, (long long)u->cache_write_5m,
                 (long long)u->cache_write_1h, (long long)u->output, (long long)u->reasoning);
        rec_put(r, line);
    } else if (r->run == CANON_EV_CHUNK || r->run == CANON_EV_REASONING ||
               r->run == CANON_EV_TOOL_DELTA) {
        rec_put(r, r->run == CANON_EV_REASONING ? "\"\n" : "\n");
    }
    r->run = -1;
}

static inline int canon_record_emit(void *arg, const struct canon_event *ev)
{
    struct canon_record *r = arg;
    char line[512];
    r->nevents++;
    if (r->terminal) {
        rec_put(r, "VIOLATION event after terminal\n");
        return 1;
    }
    if (ev->type != CANON_EV_START && ev->type != CANON_EV_ERROR && !r->started)
        rec_put(r, "VIOLATION event before START\n");
    int joinable = ev->type == CANON_EV_CHUNK || ev->type == CANON_EV_TOOL_DELTA ||
                   ev->type == CANON_EV_USAGE ||
                   (ev->type == CANON_EV_REASONING && !ev->signature && !ev->redacted);
    if (!(joinable && r->run == (int)ev->type))
        rec_close_run(r);
    switch (ev->type) {
    case CANON_EV_START:
        if (r->started)
            rec_put(r, "VIOLATION second START\n");
        r->started = 1;
        snprintf(line, sizeof(line), "START id=%s model=%s\n", ev->id ? ev->id : "-",
                 ev->name ? ev->name : "-");
        rec_put(r, line);
        break;
    case CANON_EV_CHUNK:
        r->content = 1;
        if (r->open_tool >= 0)
            rec_put(r, "VIOLATION text inside an open tool call\n");
        if (ev->len == 0)
            rec_put(r, "VIOLATION empty CHUNK\n");
        if (r->run != CANON_EV_CHUNK)
            rec_put(r, "TEXT ");
        (void)!gw_json_escape(&r->out, ev->text, ev->len);
        r->run = CANON_EV_CHUNK;
        return r->stop_after && r->nevents >= r->stop_after;
    case CANON_EV_REASONING:
        r->content = 1;
        if (ev->redacted) {
            snprintf(line, sizeof(line), "REDACTED %zu bytes\n", ev->len);
            rec_put(r, line);
            return r->stop_after && r->nevents >= r->stop_after;
        }
        if (r->run != CANON_EV_REASONING) {
            rec_put(r, "REASONING \"");
            r->run = CANON_EV_REASONING;
        }
        {
            struct gw_buf tmp;
            gw_buf_init(&tmp, 0);
            (void)!gw_json_escape(&tmp, ev->text ? ev->text : "", ev->len);
            if (tmp.len >= 2)
                (void)!gw_buf_append(&r->out, tmp.data + 1, tmp.len - 2);
            gw_buf_free(&tmp);
        }
        if (ev->signature) {
            snprintf(line, sizeof(line), "\" sig=%s\n", ev->signature);
            rec_put(r, line);
            r->run = -1;
        }
        return r->stop_after && r->nevents >= r->stop_after;
    case CANON_EV_TOOL_START:
        r->content = 1;
        if (r->open_tool >= 0)
            rec_put(r, "VIOLATION TOOL_START while a call is open\n");
        if (ev->index != r->ntools)
            rec_put(r, "VIOLATION tool index out of order\n");
        r->open_tool = ev->index;
        r->ntools++;
        snprintf(line, sizeof(line), "TOOL %d id=%s name=%s", ev->index, ev->id ? ev->id : "(null)",
                 ev->name ? ev->name : "(null)");
        rec_put(r, line);
        rec_put(r, "\n");
        break;
    case CANON_EV_TOOL_DELTA:
        if (ev->index != r->open_tool)
            rec_put(r, "VIOLATION TOOL_DELTA for a call that is not open\n");
        if (r->run != CANON_EV_TOOL_DELTA) {
            snprintf(line, sizeof(line), "ARGS %d ", ev->index);
            rec_put(r, line);
        }
        (void)!gw_buf_append(&r->out, ev->text, ev->len);
        r->run = CANON_EV_TOOL_DELTA;
        return r->stop_after && r->nevents >= r->stop_after;
    case CANON_EV_TOOL_END:
        if (ev->index != r->open_tool)
            rec_put(r, "VIOLATION TOOL_END for a call that is not open\n");
        r->open_tool = -1;
        snprintf(line, sizeof(line), "TOOL_END %d\n", ev->index);
        rec_put(r, line);
        break;
    case CANON_EV_USAGE:
        if (r->open_tool >= 0)
            rec_put(r, "VIOLATION USAGE inside an open tool call\n");
        r->last_usage = *ev->usage;
        r->run = CANON_EV_USAGE;
        return r->stop_after && r->nevents >= r->stop_after;
    case CANON_EV_DONE:
        if (r->open_tool >= 0)
            rec_put(r, "VIOLATION DONE with a tool call open\n");
        r->terminal = 1;
        snprintf(line, sizeof(line), "DONE %s\n", canon_stop_name(ev->stop));
        rec_put(r, line);
        return 1;
    case CANON_EV_ERROR:
        r->terminal = 1;
        snprintf(line, sizeof(line), "ERROR %s status=%d\n", canon_failure_name(ev->failure),
                 ev->status);
        rec_put(r, line);
        return 1;
    case CANON_EV_CITATION:
        if (!ev->citation)
            rec_put(r, "VIOLATION CITATION without its object\n");
        rec_put(r, "CITATION ");
        rec_put(r, ev->citation ? ev->citation : "");
        rec_put(r, "\n");
        break;
    }
    return r->stop_after && r->nevents >= r->stop_after;
}

/* The transcript so far (closes the open run). */
static inline const char *canon_record_text(struct canon_record *r)
{
    rec_close_run(r);
    return r->out.data ? r->out.data : "";
}

/* ---------------------------------------------------------- the harness */

/* How canon_record_run splits a body: CANON_SPLIT_WHOLE in one piece, a
 * byte count n in pieces of n bytes, CANON_SPLIT_RANDOM in pieces of 1 to
 * 97 bytes drawn from the seed (one seed, always the same pieces). */
#define CANON_SPLIT_WHOLE ((size_t)0)
#define CANON_SPLIT_RANDOM SIZE_MAX

/* How many random splits canon_record_splits tries. */
#define CANON_RECORD_SPLITS 20

/* Feeds len bytes of body to a fresh parser of driver d, split as above,
 * then finishes it unless parse said it was done. stop_after: the sink
 * stops after that many events (0 never). Returns the transcript
 * (malloc'd). */
static inline char *canon_record_run(const struct dp_driver *d, int stream, const char *body,
                                     size_t len, size_t split, unsigned seed, int stop_after)
{
    struct drv_parser *p = d->parser_new(stream);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    struct canon_record rec;
    canon_record_init(&rec);
    rec.stop_after = stop_after;
    struct canon_sink sink = {.emit = canon_record_emit, .arg = &rec};
    size_t off = 0;
    int stopped = 0;
    while (off < len && !stopped) {
        size_t n = split == CANON_SPLIT_WHOLE ? len - off : split;
        if (split == CANON_SPLIT_RANDOM) {
            seed = seed * 1103515245u + 12345u;
            n = 1 + (seed >> 8) % 97;
        }
        if (n > len - off)
            n = len - off;
        stopped = d->parse(p, body + off, n, &sink);
        off += n;
    }
    if (!stopped)
        d->finish(p, &sink);
    d->parser_free(p);
    char *t = strdup(canon_record_text(&rec));
    canon_record_free(&rec);
    return t;
}

/* Asserts got == want; on a difference shows both, saying which run. */
static inline void canon_record_same(const char *got, const char *want, const char *what)
{
    CU_ASSERT_STRING_EQUAL(got, want);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "\n--- %s, got:\n%s--- want:\n%s", what, got, want);
}

/* Runs body whole, byte by byte and in CANON_RECORD_SPLITS random splits:
 * each must give the whole body's transcript, which must hold no
 * VIOLATION. Returns that transcript (malloc'd). */
static inline char *canon_record_splits(const struct dp_driver *d, int stream, const char *body,
                                        size_t len)
{
    char *whole = canon_record_run(d, stream, body, len, CANON_SPLIT_WHOLE, 0, 0);
    char *t = canon_record_run(d, stream, body, len, 1, 0, 0);
    canon_record_same(t, whole, "byte by byte");
    free(t);
    for (unsigned i = 1; i <= CANON_RECORD_SPLITS; i++) {
        char what[64];
        snprintf(what, sizeof(what), "random split, seed %u", i * 7919u);
        t = canon_record_run(d, stream, body, len, CANON_SPLIT_RANDOM, i * 7919u, 0);
        canon_record_same(t, whole, what);
        free(t);
    }
    CU_ASSERT_PTR_NULL(strstr(whole, "VIOLATION"));
    return whole;
}

/* The sink stopping after the 1st, 2nd, ... nstops-th event, the body split
 * as canon_record_run does: the parser must stop cleanly (no VIOLATION). */
static inline void canon_record_stops(const struct dp_driver *d, int stream, const char *body,
                                      size_t len, size_t split, unsigned seed, int nstops)
{
    for (int k = 1; k <= nstops; k++) {
        char *t = canon_record_run(d, stream, body, len, split, seed, k);
        CU_ASSERT_PTR_NULL(strstr(t, "VIOLATION"));
        free(t);
    }
}

/* canon_record_splits, and the transcript must be want. */
static inline void canon_record_check(const struct dp_driver *d, int stream, const char *body,
                                      size_t len, const char *want)
{
    char *whole = canon_record_splits(d, stream, body, len);
    canon_record_same(whole, want, d->info->name);
    free(whole);
}

#endif
