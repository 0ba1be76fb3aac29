#include "cp_replicas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_log.h"

void cp_replicas_init(struct cp_replicas *t, size_t cap)
{
    memset(t, 0, sizeof(*t));
    t->cap = cap ? cap : CP_REPLICAS_CAP;
}

/* Unlinks and frees the entry without open streams seen longest ago; 0 when
 * every entry has one. */
static int evict_one(struct cp_replicas *t)
{
    struct cp_replica **victim = NULL;
    for (struct cp_replica **pp = &t->head; *pp; pp = &(*pp)->next)
        if ((*pp)->streams == 0 && (!victim || (*pp)->seen_ms < (*victim)->seen_ms))
            victim = pp;
    if (!victim)
        return 0;
    struct cp_replica *r = *victim;
    *victim = r->next;
    free(r);
    t->n--;
    return 1;
}

struct cp_replica *cp_replicas_get(struct cp_replicas *t, const char *id, int64_t now_ms)
{
    char name[CP_REPLICA_ID_MAX + 1];
    snprintf(name, sizeof(name), "%s", id);
    for (struct cp_replica *r = t->head; r; r = r->next)
        if (strcmp(r->id, name) == 0) {
            r->seen_ms = now_ms;
            return r;
        }
    if (t->n >= t->cap && !evict_one(t)) {
        if (!t->full_logged)
            gw_logf(GW_LOG_WARN,
                    "grpc: the replica table is full and every entry has an open stream; "
                    "new replicas are served but not tracked",
                    "{s:i}", "cap", (int)t->cap);
        t->full_logged = 1;
        return NULL;
    }
    struct cp_replica *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    memcpy(r->id, name, sizeof(name));
    r->seen_ms = now_ms;
    r->next = t->head;
    t->head = r;
    t->n++;
    t->full_logged = 0;
    return r;
}

void cp_replicas_peer_name(const char *peer, char *out, size_t outlen)
{
    if (!peer || !*peer) {
        snprintf(out, outlen, "peer:?");
        return;
    }
    /* "ipv4:10.0.0.1:5000", "ipv6:[::1]:5000": drop ":port" when the text
     * after the last colon is all digits and that colon is not the scheme's. */
    size_t len = strlen(peer);
    const char *colon = strrchr(peer, ':');
    const char *first = strchr(peer, ':');
    if (colon && colon != first && colon[1]) {
        const char *d = colon + 1;
        while (*d >= '0' && *d <= '9')
            d++;
        if (!*d)
            len = (size_t)(colon - peer);
    }
    snprintf(out, outlen, "peer:%.*s", (int)len, peer);
}

void cp_replicas_clear(struct cp_replicas *t)
{
    while (t->head) {
        struct cp_replica *r = t->head;
        t->head = r->next;
        free(r);
    }
    t->n = 0;
}
