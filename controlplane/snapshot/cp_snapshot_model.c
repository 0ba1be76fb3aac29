#include "cp_snapshot_model.h"

#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot.h"
#include "gw_error.h"

const char *const cp_kind_names[CP_NKINDS] = {"providers", "routes",   "keys",
                                              "teams",     "projects", "limits"};
const char *const cp_kind_ids[CP_NKINDS] = {"name", "name", "id", "name", "name", "id"};

struct mentry {
    char *name;
    char *text; /* the object, compact JSON */
    size_t len;
};

static int cmp(const void *a, const void *b)
{
    return strcmp(((const struct mentry *)a)->name, ((const struct mentry *)b)->name);
}

static void wipe_free(char *p, size_t len)
{
    if (!p)
        return;
    explicit_bzero(p, len);
    free(p);
}

static void entry_free(void *p)
{
    struct mentry *e = p;
    wipe_free(e->text, e->len);
    free(e->name);
    free(e);
}

void cp_model_init(struct cp_model *m)
{
    memset(m, 0, sizeof(*m));
    m->version = -1;
}

void cp_model_clear(struct cp_model *m)
{
    for (int k = 0; k < CP_NKINDS; k++)
        tdestroy(m->root[k], entry_free);
    wipe_free(m->catalog, m->catalog_len);
    wipe_free(m->guard_rules, m->guard_rules_len);
    cp_model_init(m);
}

static struct mentry *find(const struct cp_model *m, int kind, const char *name)
{
    struct mentry key = {.name = (char *)name};
    void *const *node = tfind(&key, &m->root[kind], cmp);
    return node ? *(struct mentry *const *)node : NULL;
}

const char *cp_model_get(const struct cp_model *m, int kind, const char *name, size_t *len)
{
    struct mentry *e = find(m, kind, name);
    if (!e)
        return NULL;
    *len = e->len;
    return e->text;
}

int cp_model_put(struct cp_model *m, int kind, const char *name, char *text, size_t len)
{
    struct mentry *e = find(m, kind, name);
    if (e) {
        m->bytes = m->bytes - e->len + len;
        wipe_free(e->text, e->len);
        e->text = text;
        e->len = len;
        return GW_OK;
    }
    e = calloc(1, sizeof(*e));
    if (!e || !(e->name = strdup(name))) {
        free(e);
        wipe_free(text, len);
        return GW_ENOMEM;
    }
    e->text = text;
    e->len = len;
    if (!tsearch(e, &m->root[kind], cmp)) {
        entry_free(e);
        return GW_ENOMEM;
    }
    m->count[kind]++;
    m->bytes += strlen(name) + len;
    return GW_OK;
}

void cp_model_del(struct cp_model *m, int kind, const char *name)
{
    struct mentry *e = find(m, kind, name);
    if (!e)
        return;
    tdelete(e, &m->root[kind], cmp);
    m->count[kind]--;
    m->bytes -= strlen(e->name) + e->len;
    entry_free(e);
}

void cp_model_set_catalog(struct cp_model *m, char *text, size_t len)
{
    wipe_free(m->catalog, m->catalog_len);
    m->catalog = text;
    m->catalog_len = len;
}

void cp_model_set_guard_rules(struct cp_model *m, char *text, size_t len)
{
    wipe_free(m->guard_rules, m->guard_rules_len);
    m->guard_rules = text;
    m->guard_rules_len = len;
}

int cp_model_from_doc(struct cp_model *m, const json_t *doc)
{
    for (int k = 0; k < CP_NKINDS; k++) {
        size_t i;
        json_t *o;
        json_array_foreach(json_object_get(doc, cp_kind_names[k]), i, o)
        {
            const char *name = json_string_value(json_object_get(o, cp_kind_ids[k]));
            size_t len = 0;
            char *text = name ? dp_snapshot_dump(o, JSON_COMPACT, &len) : NULL;
            int rc = !name ? GW_EINVAL : text ? cp_model_put(m, k, name, text, len) : GW_ENOMEM;
            if (rc != GW_OK) {
                cp_model_clear(m);
                return rc;
            }
        }
    }
    json_t *cat = json_object_get(doc, "catalog");
    if (cat) {
        char *text = json_dumps(cat, JSON_COMPACT);
        if (!text) {
            cp_model_clear(m);
            return GW_ENOMEM;
        }
        cp_model_set_catalog(m, text, strlen(text));
    }
    json_t *rules = json_object_get(doc, "guard_rules");
    if (rules) {
        char *text = json_dumps(rules, JSON_COMPACT);
        if (!text) {
            cp_model_clear(m);
            return GW_ENOMEM;
        }
        cp_model_set_guard_rules(m, text, strlen(text));
    }
    json_t *v = json_object_get(doc, "version");
    m->version = json_is_integer(v) ? json_integer_value(v) : 0;
    return GW_OK;
}

struct equal_walk {
    const struct cp_model *other;
    int kind;
    int equal;
};

static void equal_visit(const void *node, VISIT which, void *arg)
{
    struct equal_walk *w = arg;
    if (!w->equal || (which != postorder && which != leaf))
        return;
    const struct mentry *e = *(struct mentry *const *)node;
    size_t len;
    const char *t = cp_model_get(w->other, w->kind, e->name, &len);
    if (!t || len != e->len || memcmp(t, e->text, len) != 0)
        w->equal = 0;
}

unsigned cp_model_diff(const struct cp_model *a, const struct cp_model *b)
{
    unsigned diff = 0;
    const char *ca = a->catalog ? a->catalog : "[]", *cb = b->catalog ? b->catalog : "[]";
    if (strcmp(ca, cb) != 0)
        diff |= 1u << CP_DIFF_CATALOG;
    const char *ga = a->guard_rules ? a->guard_rules : "[]";
    const char *gb = b->guard_rules ? b->guard_rules : "[]";
    if (strcmp(ga, gb) != 0)
        diff |= 1u << CP_DIFF_GUARD_RULES;
    for (int k = 0; k < CP_NKINDS; k++) {
        struct equal_walk w = {b, k, a->count[k] == b->count[k]};
        twalk_r(a->root[k], equal_visit, &w);
        if (!w.equal)
            diff |= 1u << k;
    }
    return diff;
}

struct doc_walk {
    char *p, *end;
    int first;
};

static void doc_visit(const void *node, VISIT which, void *arg)
{
    struct doc_walk *w = arg;
    if (which != postorder && which != leaf)
        return;
    const struct mentry *e = *(struct mentry *const *)node;
    if (!w->first)
        *w->p++ = ',';
    w->first = 0;
    memcpy(w->p, e->text, e->len);
    w->p += e->len;
}

char *cp_model_document(const struct cp_model *m, size_t *len)
{
    const char *cat = m->catalog ? m->catalog : "[]";
    size_t catlen = m->catalog ? m->catalog_len : 2;
    const char *rules = m->guard_rules ? m->guard_rules : "[]";
    size_t ruleslen = m->guard_rules ? m->guard_rules_len : 2;
    /* Every entry's text and a comma, each kind's member, the version. */
    size_t n = m->bytes + catlen + ruleslen + 96, nentries = 0;
    for (int k = 0; k < CP_NKINDS; k++) {
        nentries += m->count[k];
        n += strlen(cp_kind_names[k]) + 8;
    }
    n += nentries;
    char *doc = malloc(n + 1);
    if (!doc)
        return NULL;
    struct doc_walk w = {doc, doc + n, 1};
    w.p += snprintf(w.p, (size_t)(w.end - w.p), "{\"version\":%lld",
                    (long long)(m->version < 0 ? 0 : m->version));
    for (int k = 0; k < CP_NKINDS; k++) {
        w.p += snprintf(w.p, (size_t)(w.end - w.p), ",\"%s\":[", cp_kind_names[k]);
        w.first = 1;
        twalk_r(m->root[k], doc_visit, &w);
        *w.p++ = ']';
    }
    memcpy(w.p, ",\"catalog\":", 11);
    w.p += 11;
    memcpy(w.p, cat, catlen);
    w.p += catlen;
    memcpy(w.p, ",\"guard_rules\":", 15);
    w.p += 15;
    memcpy(w.p, rules, ruleslen);
    w.p += ruleslen;
    *w.p++ = '}';
    *w.p = '\0';
    *len = (size_t)(w.p - doc);
    return doc;
}
