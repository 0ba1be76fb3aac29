#include "cp_judgement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "cp_secrets.h"
#include "gw_error.h"
#include "gw_json.h"
#include "llmgw/v1/control.pb-c.h"

#define MAX_TEXT 256                  /* a label, a name: cut past this (the row is still stored) */
#define MAX_REQUEST_ID 512            /* the key is never cut: a longer one is refused */
#define MAX_TIME_MS 253402300799999LL /* 9999-12-31T23:59:59.999Z */

/* The INSERT's parameters, in order ($1..$NPARAMS); NULL is SQL NULL. */
enum {
    P_REQUEST_ID,
    P_ATTEMPT_ID,
    P_JUDGE_REQUEST_ID,
    P_ROUTE,
    P_PROVIDER,
    P_MODEL,
    P_KEY_ID,
    P_TEAM,
    P_PROJECT,
    P_JUDGE_ROUTE,
    P_SCORE,
    P_SCALE_MIN,
    P_SCALE_MAX,
    P_PASS,
    P_LABEL,
    P_AT_MS,
    P_SNAPSHOT_VERSION,
    P_REPLICA,
    P_PROMPT_ENC,
    P_ANSWER_ENC,
    P_MASTER_KEY_ID,
    NPARAMS
};

struct cp_judgement {
    unsigned long long seq;
    char *p[NPARAMS];
};

static const char SQL_INSERT[] =
    "INSERT INTO judgements (request_id, attempt_id, judge_request_id, route, provider, model, "
    "key_id, team, project, judge_route, score, scale_min, scale_max, pass, label, at, "
    "snapshot_version, replica, prompt_enc, answer_enc, master_key_id) VALUES ($1, $2, $3, $4, "
    "$5, $6, $7, $8, $9, $10, $11::int, $12::int, $13::int, $14::boolean, $15, "
    "timestamptz 'epoch' + $16::bigint * interval '1 millisecond', $17::bigint, $18, $19::bytea, "
    "$20::bytea, $21) ON CONFLICT (request_id) DO NOTHING";

int cp_judgement_ref(char *out, size_t n, const char *request_id, const char *part)
{
    int w = snprintf(out, n, "judgement/%s#%s", request_id, part);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* s made valid UTF-8 (an invalid byte becomes '?') and cut at a character
 * boundary to at most max bytes, into a new buffer of *n bytes and a NUL;
 * NULL when s is empty, or on no memory (*oom set). */
static char *clean(const char *s, size_t max, size_t *n, int *oom)
{
    *n = 0;
    if (!s || !*s)
        return NULL;
    size_t len = strlen(s);
    char *out = malloc((len < max ? len : max) + 1);
    if (!out) {
        *oom = 1;
        return NULL;
    }
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = gw_utf8_len(u + i, len - i);
        size_t take = k ? k : 1;
        if (o + take > max)
            break;
        if (k)
            memcpy(out + o, s + i, k);
        else
            out[o] = '?';
        o += take;
        i += take;
    }
    out[o] = '\0';
    *n = o;
    return out;
}

static char *text_param(const char *s, int *oom)
{
    size_t n;
    return clean(s, MAX_TEXT, &n, oom);
}

static char *int_param(long long v, int *oom)
{
    char b[24];
    snprintf(b, sizeof(b), "%lld", v);
    char *s = strdup(b);
    if (!s)
        *oom = 1;
    return s;
}

/* blob as bytea's hex input ("\x..."). */
static char *bytea_hex(const unsigned char *b, size_t n)
{
    char *s = malloc(2 * n + 3);
    if (s)
        cp_db_bytea_hex(b, n, s);
    return s;
}

/* text (kept by the route) sealed for ref into *hex; *hex stays NULL when
 * text is empty. 0, or a GW_E code. The cleaned plaintext copy is wiped. */
static int seal_text(const struct cp_master_key *key, const char *request_id, const char *part,
                     const char *text, char **hex)
{
    *hex = NULL;
    if (!text || !*text)
        return GW_OK;
    char ref[MAX_REQUEST_ID + 32];
    if (cp_judgement_ref(ref, sizeof(ref), request_id, part) != 0)
        return GW_EINVAL;
    size_t n;
    int oom = 0;
    char *pt = clean(text, CP_JUDGEMENT_TEXT_MAX, &n, &oom);
    if (!pt)
        return oom ? GW_ENOMEM : GW_OK;
    unsigned char *blob = NULL;
    size_t bloblen = 0;
    int rc = cp_secret_seal(key, ref, pt, n, &blob, &bloblen);
    cp_secret_free(pt, n);
    if (rc != GW_OK)
        return rc;
    *hex = bytea_hex(blob, bloblen);
    free(blob);
    return *hex ? GW_OK : GW_ENOMEM;
}

/* Why the table would refuse j, or NULL. */
static const char *problem_of(const Llmgw__V1__Judgement *j)
{
    const char *id = j->request_id;
    size_t len = id ? strlen(id) : 0;
    if (len == 0 || len > MAX_REQUEST_ID)
        return "request_id is empty or longer than 512 bytes";
    const unsigned char *u = (const unsigned char *)id;
    for (size_t i = 0; i < len;) {
        size_t k = gw_utf8_len(u + i, len - i);
        if (!k || u[i] < 0x20 || u[i] == 0x7f)
            return "request_id is not printable UTF-8";
        i += k;
    }
    if (j->scale_min >= j->scale_max)
        return "scale_min must be below scale_max";
    if (j->score < j->scale_min || j->score > j->scale_max)
        return "score is outside [scale_min, scale_max]";
    if (j->at_ms <= 0 || j->at_ms > MAX_TIME_MS)
        return "at_ms must be a positive time";
    return NULL;
}

struct cp_judgement *cp_judgement_new(const Llmgw__V1__Judgement *j, const char *replica_id,
                                      const struct cp_master_key *key, const char **problem,
                                      int *text_dropped)
{
    *problem = NULL;
    *text_dropped = 0;
    struct cp_judgement *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->seq = j->seq;
    int oom = 0;
    *problem = problem_of(j);
    if (*problem) {
        /* What a log line may show of the key: cut and made valid. */
        r->p[P_REQUEST_ID] = text_param(j->request_id, &oom);
        if (oom) {
            cp_judgement_free(r);
            return NULL;
        }
        return r;
    }
    /* The key as sent: a cut key would merge two judgements. */
    r->p[P_REQUEST_ID] = strdup(j->request_id);
    oom = !r->p[P_REQUEST_ID];
    const struct {
        int i;
        const char *s;
    } texts[] = {
        {P_ATTEMPT_ID, j->attempt_id},
        {P_JUDGE_REQUEST_ID, j->judge_request_id},
        {P_ROUTE, j->route},
        {P_PROVIDER, j->provider},
        {P_MODEL, j->model},
        {P_KEY_ID, j->key_id},
        {P_TEAM, j->team},
        {P_PROJECT, j->project},
        {P_JUDGE_ROUTE, j->judge_route},
        {P_LABEL, j->label},
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        r->p[texts[i].i] = text_param(texts[i].s, &oom);
    r->p[P_REPLICA] = text_param(replica_id && *replica_id ? replica_id : "", &oom);
    r->p[P_SCORE] = int_param(j->score, &oom);
    r->p[P_SCALE_MIN] = int_param(j->scale_min, &oom);
    r->p[P_SCALE_MAX] = int_param(j->scale_max, &oom);
    r->p[P_AT_MS] = int_param(j->at_ms, &oom);
    r->p[P_SNAPSHOT_VERSION] = int_param(j->snapshot_version, &oom);
    if (!(r->p[P_PASS] = strdup(j->pass ? "t" : "f")))
        oom = 1;
    int has_text = (j->prompt_text && *j->prompt_text) || (j->answer_text && *j->answer_text);
    if (has_text && !key)
        *text_dropped = 1;
    if (has_text && key && !oom) {
        if (seal_text(key, j->request_id, "prompt", j->prompt_text, &r->p[P_PROMPT_ENC]) != GW_OK ||
            seal_text(key, j->request_id, "answer", j->answer_text, &r->p[P_ANSWER_ENC]) != GW_OK ||
            !(r->p[P_MASTER_KEY_ID] = strdup(key->id)))
            oom = 1;
    }
    if (oom) {
        cp_judgement_free(r);
        return NULL;
    }
    return r;
}

void cp_judgement_free(struct cp_judgement *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < NPARAMS; i++)
        free(r->p[i]);
    free(r);
}

const char *cp_judgement_request_id(const struct cp_judgement *r)
{
    return r->p[P_REQUEST_ID] ? r->p[P_REQUEST_ID] : "";
}

unsigned long long cp_judgement_seq(const struct cp_judgement *r)
{
    return r->seq;
}

int cp_judgement_insert(struct cp_db *db, const struct cp_judgement *r, int *inserted,
                        struct cp_db_err *err)
{
    *inserted = 0;
    PGresult *res = cp_db_exec(db, NULL, SQL_INSERT, NPARAMS, (const char *const *)r->p, err);
    if (!res)
        return GW_EIO;
    *inserted = atoi(PQcmdTuples(res)) > 0;
    PQclear(res);
    return GW_OK;
}
