/*
 * The judge: a route may have a share of its answers scored by another
 * route with a rubric (docs/guardrails.md). A request is sampled at the
 * guard (its conversation rendered as text then: a stream gives its
 * request back at the bright line); its answer is kept as it goes by; once
 * the answer was delivered whole, the pair joins the loop's queue (bounded:
 * past it a sample is dropped and counted) and a few at a time go to the
 * judge route as the gateway's own calls (subcall.c), long after the
 * client has its answer. A judge that fails changes nothing but a counter.
 * The score travels to the control plane as a Judgement, on the ledger's
 * queue; the text does only when the route keeps it.
 */
#include <ctype.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_ledger.h"
#include "dp_metrics.h"
#include "dp_snapshot.h"
#include "exchange.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_rand.h"
#include "gw_time.h"

/* The most of a conversation, and of an answer, a judge is sent: a longer
 * answer is not judged (dropped), a longer conversation keeps its end. */
#define JUDGE_MAX_PROMPT (32u << 10)
#define JUDGE_MAX_ANSWER X_JUDGE_MAX_ANSWER
/* The longest judge call's text (the rubric filled in). */
#define JUDGE_MAX_CALL (1u << 20)
/* How long a judge call may take. */
#define JUDGE_TIMEOUT_MS 60000L

/* A sampled request's part. */
struct xjudge {
    struct gw_buf prompt; /* the conversation as text */
    int gave_up;          /* the answer is too long to judge */
};

/* A sampled answer waiting for, or with, its judge. */
struct jjob {
    struct jjob *next, *prev;
    struct xjudges *q;
    struct dp_snapshot *snap; /* the judged request's: the key and the route live in it */
    const struct dp_key *key;
    const struct dp_route_judge *cfg;
    struct dp_judgement j;
    char *prompt, *answer;
    struct xsub *sub;                         /* in flight */
    char traceparent[GW_TRACEPARENT_LEN + 1]; /* the judged request's span ("": no trace) */
};

struct xjudges {
    struct dp_xloop *l;
    /* Runs the queue from the loop: never inside the call that ended a
     * request (a transfer's callback), where no transfer may start. */
    struct event *kick;
    struct jjob *head, *tail; /* waiting */
    struct jjob *running;     /* in flight */
    size_t waiting, nrunning;
};

/* ------------------------------------------------------------ sampling */

static int put_text(struct gw_buf *b, const char *who, const char *text)
{
    if (!text || !*text)
        return GW_OK;
    int rc = gw_buf_printf(b, "%s%s: ", b->len ? "\n\n" : "", who);
    return rc == GW_OK ? gw_buf_appends(b, text) : rc;
}

/* The conversation as "role: text" turns; tool calls and results too. */
static int render_prompt(const struct canon_req *r, struct gw_buf *b)
{
    int rc = GW_OK;
    for (size_t i = 0; i < r->nsystem && rc == GW_OK; i++)
        rc = put_text(b, "system", r->system[i].text);
    for (size_t i = 0; i < r->nmessages && rc == GW_OK; i++) {
        const struct canon_message *m = &r->messages[i];
        const char *who = m->role == CANON_ROLE_ASSISTANT ? "assistant"
                          : m->role == CANON_ROLE_SYSTEM  ? "system"
                                                          : "user";
        for (size_t j = 0; j < m->nparts && rc == GW_OK; j++) {
            const struct canon_part *p = &m->parts[j];
            if (p->type == CANON_PART_TEXT || p->type == CANON_PART_DOCUMENT) {
                rc = put_text(b, who, p->text);
            } else if (p->type == CANON_PART_TOOL_CALL) {
                rc = gw_buf_printf(b, "%sassistant calls %s: ", b->len ? "\n\n" : "",
                                   p->name ? p->name : "a tool");
                if (rc == GW_OK)
                    rc = gw_buf_appends(b, p->arguments ? p->arguments : "{}");
            } else if (p->type == CANON_PART_TOOL_RESULT) {
                for (size_t k = 0; k < p->ncontent && rc == GW_OK; k++)
                    rc = put_text(b, "tool result", p->content[k].text);
            }
        }
    }
    return rc;
}

void x_judge_sample(struct dp_exchange *x)
{
    if (!x->plan.route)
        return; /* an exact provider/model selector: no route, no judge */
    const struct dp_route_judge *jc = &x->plan.route->judge;
    if (jc->sample_rate <= 0 || !x->l->judge_queue_max || x->internal || x->kind != KIND_CHAT)
        return;
    /* 53 random bits against the rate: 1 samples every request. */
    double u = gw_rand_unit(&x->l->rng);
    if (u >= jc->sample_rate)
        return;
    struct xjudge *j = calloc(1, sizeof(*j));
    if (!j)
        return;
    gw_buf_init(&j->prompt, 0);
    if (render_prompt(x->creq, &j->prompt) != GW_OK) {
        gw_buf_free(&j->prompt);
        free(j);
        return;
    }
    if (j->prompt.len > JUDGE_MAX_PROMPT) { /* the conversation's end matters most */
        size_t cut = j->prompt.len - JUDGE_MAX_PROMPT;
        while (cut < j->prompt.len && ((unsigned char)j->prompt.data[cut] & 0xC0) == 0x80)
            cut++; /* not inside a character */
        gw_buf_consume(&j->prompt, cut);
    }
    x->judge = j;
    dp_metrics_judge(x->plan.route->name, "sampled");
}

int x_judge_accumulates(const struct dp_exchange *x)
{
    return x->judge && !x->judge->gave_up && !x->cache_hit && (x->client_stream || x->relay);
}

void x_judge_give_up(struct dp_exchange *x)
{
    if (x->judge && !x->judge->gave_up) {
        x->judge->gave_up = 1;
        dp_metrics_judge(x->plan.route->name, "dropped");
    }
}

void x_judge_free(struct dp_exchange *x)
{
    struct xjudge *j = x->judge;
    if (!j)
        return;
    x->judge = NULL;
    gw_buf_free(&j->prompt);
    free(j);
}

/* ------------------------------------------------------------ the queue */

static void job_free(struct jjob *b)
{
    if (b->prompt)
        memset(b->prompt, 0, strlen(b->prompt));
    if (b->answer)
        memset(b->answer, 0, strlen(b->answer));
    free(b->prompt);
    free(b->answer);
    dp_snapshot_unref(b->snap);
    free(b);
    dp_metrics_judge_queue(-1);
}

static void unlink_running(struct jjob *b)
{
    struct xjudges *q = b->q;
    if (b->prev)
        b->prev->next = b->next;
    else
        q->running = b->next;
    if (b->next)
        b->next->prev = b->prev;
    q->nrunning--;
}

/* tmpl with every {{prompt}} and {{answer}} replaced. */
static int fill_rubric(const char *tmpl, const char *prompt, const char *answer, struct gw_buf *o)
{
    int rc = GW_OK;
    const char *p = tmpl;
    while (rc == GW_OK && *p) {
        const char *a = strstr(p, "{{prompt}}"), *b = strstr(p, "{{answer}}");
        const char *at = a && (!b || a < b) ? a : b;
        if (!at)
            return gw_buf_appends(o, p);
        rc = gw_buf_append(o, p, (size_t)(at - p));
        if (rc == GW_OK)
            rc = gw_buf_appends(o, at == a ? prompt : answer);
        p = at + 10;
    }
    return rc;
}

/* The judge's answer: a JSON object, nothing around it but space, with an
 * integer score within the scale and an optional short label. */
static int parse_score(const char *content, const struct dp_route_judge *cfg, int *score,
                       char *label, size_t labellen)
{
    json_error_t je;
    json_t *o = content ? json_loads(content, JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *s = json_object_get(o, "score");
    json_t *l = json_object_get(o, "label");
    int ok = json_is_object(o) && json_is_integer(s) && json_integer_value(s) >= cfg->scale_min &&
             json_integer_value(s) <= cfg->scale_max && (!l || json_is_string(l));
    label[0] = '\0';
    if (ok) {
        *score = (int)json_integer_value(s);
        const char *v = l ? json_string_value(l) : "";
        size_t k = 0;
        for (; v[k] && k + 1 < labellen; k++)
            label[k] = isprint((unsigned char)v[k]) ? v[k] : '?';
        label[k] = '\0';
    }
    json_decref(o);
    return ok;
}

static void on_judged(void *arg, const struct xsub_result *r)
{
    struct jjob *b = arg;
    b->sub = NULL;
    unlink_running(b);
    const struct dp_route_judge *cfg = b->cfg;
    const char *route = b->j.route;
    int score;
    if (!r->ok) {
        dp_metrics_judge(route, "failed");
        gw_logf(GW_LOG_WARN, "judge: the call failed", "{s:s,s:s,s:s,s:s}", "request_id",
                b->j.request_id, "route", route, "judge_route", b->j.judge_route, "why",
                r->why ? r->why : "");
    } else if (!parse_score(r->content, cfg, &score, b->j.label, sizeof(b->j.label))) {
        dp_metrics_judge(route, "invalid");
        gw_logf(GW_LOG_WARN, "judge: the answer holds no usable score", "{s:s,s:s,s:s}",
                "request_id", b->j.request_id, "route", route, "judge_route", b->j.judge_route);
    } else {
        b->j.score = score;
        b->j.pass = score >= cfg->pass_min;
        if (cfg->keep_text) {
            b->j.prompt_text = b->prompt;
            b->j.answer_text = b->answer;
        }
        dp_metrics_judge(route, "scored");
        dp_metrics_judge_score(
            route, (double)(score - cfg->scale_min) / (double)(cfg->scale_max - cfg->scale_min),
            b->j.pass);
        if (dp_ledger_enabled() && dp_ledger_record_judgement(&b->j) == GW_ERANGE &&
            b->j.prompt_text) {
            /* Too long to travel with its text: the score goes without. */
            gw_logf(GW_LOG_WARN,
                    "judge: the kept text is too long to send; the score goes without it",
                    "{s:s,s:s}", "request_id", b->j.request_id, "route", route);
            b->j.prompt_text = b->j.answer_text = NULL;
            (void)dp_ledger_record_judgement(&b->j);
        }
    }
    struct xjudges *q = b->q;
    job_free(b);
    event_active(q->kick, EV_TIMEOUT, 1);
}

static const char JUDGE_SYSTEM[] =
    "llmgw answer judge. Score the answer in the text below by the rubric it gives. Reply with "
    "only a JSON object, nothing before or after it: {\"score\": <an integer from %d to %d>, "
    "\"label\": \"<one or two words>\"}.";

static void start(struct xjudges *q, struct jjob *b)
{
    b->next = q->running;
    b->prev = NULL;
    if (q->running)
        q->running->prev = b;
    q->running = b;
    q->nrunning++;
    /* Bounded: a template may name each placeholder more than once. */
    struct gw_buf user;
    gw_buf_init(&user, JUDGE_MAX_CALL);
    char system[sizeof(JUDGE_SYSTEM) + 16];
    snprintf(system, sizeof(system), JUDGE_SYSTEM, b->cfg->scale_min, b->cfg->scale_max);
    struct xsub_call c = {.route = b->cfg->route,
                          .request_id = b->j.judge_request_id,
                          .purpose = "judge",
                          .system = system,
                          .max_tokens = 200,
                          .timeout_ms = JUDGE_TIMEOUT_MS,
                          .traceparent = b->traceparent[0] ? b->traceparent : NULL};
    if (fill_rubric(b->cfg->rubric, b->prompt, b->answer, &user) == GW_OK) {
        c.user = user.data;
        b->sub = x_sub_start(q->l, b->snap, b->key, &c, on_judged, b);
    }
    if (user.data)
        memset(user.data, 0, user.len);
    gw_buf_free(&user);
    if (!b->sub) {
        struct xsub_result r = {.why = "the call could not be made"};
        on_judged(b, &r);
    }
}

static void pump(struct xjudges *q)
{
    /* on_judged may run inside start (no call could be made): its kick
     * comes back here on the next turn. */
    size_t most = q->l->judge_concurrency ? q->l->judge_concurrency : 1;
    while (q->head && q->nrunning < most) {
        struct jjob *b = q->head;
        q->head = b->next;
        if (!q->head)
            q->tail = NULL;
        q->waiting--;
        start(q, b);
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pump(arg);
}

/* The answer as text: its text, and its tool calls. */
static char *answer_text(const struct canon_acc *a)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = GW_OK;
    if (a->text && a->text->len)
        rc = gw_buf_append(&b, a->text->data, a->text->len);
    for (size_t i = 0; i < a->ntools && rc == GW_OK; i++) {
        rc = gw_buf_printf(&b, "%s[calls %s: ", b.len ? "\n" : "",
                           a->tools[i].name ? a->tools[i].name : "a tool");
        if (rc == GW_OK && a->tools[i].args)
            rc = gw_buf_append(&b, a->tools[i].args->data, a->tools[i].args->len);
        if (rc == GW_OK)
            rc = gw_buf_appends(&b, "]");
    }
    if (rc != GW_OK || gw_buf_append(&b, "", 1) != GW_OK) { /* NUL-terminated */
        gw_buf_free(&b);
        return NULL;
    }
    return b.data;
}

void x_judge_submit(struct dp_exchange *x)
{
    struct xjudge *sj = x->judge;
    if (!sj || sj->gave_up || x->verdict != V_OK || x->final_status != 200 || x->cache_hit ||
        !x->prov)
        return; /* no whole answer to judge */
    struct dp_xloop *l = x->l;
    const char *route = x->plan.route->name;
    if (l->judges_closed) { /* the loop is stopping: no new call */
        dp_metrics_judge(route, "dropped");
        return;
    }
    if (!l->judges && (l->judges = calloc(1, sizeof(*l->judges))) != NULL) {
        l->judges->l = l;
        if (!(l->judges->kick = event_new(l->base, -1, 0, on_kick, l->judges))) {
            free(l->judges);
            l->judges = NULL;
        }
    }
    struct xjudges *q = l->judges;
    struct jjob *b = q && q->waiting < l->judge_queue_max ? calloc(1, sizeof(*b)) : NULL;
    char *answer = b ? answer_text(&x->acc) : NULL;
    char *prompt = answer ? strndup(sj->prompt.data ? sj->prompt.data : "", sj->prompt.len) : NULL;
    if (!prompt || strlen(answer) > JUDGE_MAX_ANSWER) {
        free(answer);
        free(prompt);
        free(b);
        dp_metrics_judge(route, "dropped");
        return;
    }
    dp_metrics_judge_queue(1);
    b->q = q;
    b->prompt = prompt;
    b->answer = answer;
    b->snap = x->snap;
    dp_snapshot_ref(b->snap);
    b->key = x->key;
    b->cfg = &x->plan.route->judge;
    (void)x_trace_request_parent(x, b->traceparent); /* the judge's call joins the trace */
    struct dp_judgement *j = &b->j;
    snprintf(j->request_id, sizeof(j->request_id), "%s", x->request_id);
    snprintf(j->attempt_id, sizeof(j->attempt_id), "%s", x->attempt_id);
    snprintf(j->judge_request_id, sizeof(j->judge_request_id), "%.150s.judge", x->request_id);
    snprintf(j->route, sizeof(j->route), "%s", route);
    snprintf(j->provider, sizeof(j->provider), "%s", x->prov->name);
    snprintf(j->model, sizeof(j->model), "%s", x->model);
    if (x->key) {
        snprintf(j->key_id, sizeof(j->key_id), "%s", x->key->id);
        snprintf(j->team, sizeof(j->team), "%s", x->key->team ? x->key->team : "");
        snprintf(j->project, sizeof(j->project), "%s", x->key->project ? x->key->project : "");
    }
    snprintf(j->judge_route, sizeof(j->judge_route), "%s", b->cfg->route);
    j->scale_min = b->cfg->scale_min;
    j->scale_max = b->cfg->scale_max;
    j->at_ms = gw_wall_ms();
    j->snapshot_version = x->snap->version;
    if (q->tail)
        q->tail->next = b;
    else
        q->head = b;
    q->tail = b;
    q->waiting++;
    event_active(q->kick, EV_TIMEOUT, 1);
}

void x_judges_shutdown(struct dp_xloop *l)
{
    struct xjudges *q = l->judges;
    l->judges_closed = 1; /* what ends after this is not judged */
    if (!q)
        return;
    l->judges = NULL;
    while (q->head) {
        struct jjob *b = q->head;
        q->head = b->next;
        job_free(b);
    }
    while (q->running) {
        struct jjob *b = q->running;
        q->running = b->next;
        x_sub_cancel(b->sub);
        job_free(b);
    }
    event_free(q->kick);
    free(q);
}
