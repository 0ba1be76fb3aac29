/* Tests for common/gw_pmap.c: the persistent hash trie against a plain
 * array, over random sequences, with every value's references counted. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_pmap.h"

#define NAMES 600

struct val {
    int refs;
    int name; /* 0..NAMES-1 */
    int gen;  /* which write made it */
};

static int live; /* values with references */

static void retain(void *v)
{
    struct val *x = v;
    if (x->refs++ == 0)
        live++;
}

static void release(void *v)
{
    struct val *x = v;
    CU_ASSERT_FATAL(x->refs > 0);
    if (--x->refs == 0) {
        live--;
        free(x);
    }
}

static int eq(const void *v, const void *key)
{
    return ((const struct val *)v)->name == *(const int *)key;
}

static const struct gw_pmap_ops ops = {retain, release, eq};

/* hash_bits 64: a spread hash; small: many equal hashes (collision nodes)
 * and long shared prefixes. */
static int hash_bits;
static uint64_t hash_of(int name)
{
    char s[16];
    snprintf(s, sizeof(s), "n%d", name);
    uint64_t h = gw_pmap_hash_str(s);
    return hash_bits == 64 ? h : h & ((1ULL << hash_bits) - 1);
}

static struct val *val_new(int name, int gen)
{
    struct val *v = calloc(1, sizeof(*v));
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    v->name = name;
    v->gen = gen;
    return v;
}

/* One version: the map and what it must hold. */
struct version {
    struct gw_pmap m;
    int gen[NAMES]; /* 0: absent */
};

static void check(const struct version *v)
{
    size_t n = 0;
    for (int i = 0; i < NAMES; i++) {
        struct val *x = gw_pmap_get(&v->m, hash_of(i), &i, &ops);
        if (v->gen[i]) {
            CU_ASSERT_PTR_NOT_NULL_FATAL(x);
            CU_ASSERT_EQUAL(x->gen, v->gen[i]);
            n++;
        } else {
            CU_ASSERT_PTR_NULL(x);
        }
    }
    CU_ASSERT_EQUAL(v->m.count, n);
    struct gw_pmap_iter it;
    gw_pmap_iter_init(&v->m, &it);
    size_t seen = 0;
    char once[NAMES] = {0};
    for (struct val *x; (x = gw_pmap_next(&it)) != NULL; seen++) {
        CU_ASSERT_EQUAL(x->gen, v->gen[x->name]);
        CU_ASSERT_EQUAL(once[x->name], 0);
        once[x->name] = 1;
    }
    CU_ASSERT_EQUAL(seen, n);
}

static void random_sequences(int bits)
{
    hash_bits = bits;
    srand(7 + (unsigned)bits);
    enum { KEEP = 8, STEPS = 6000 };
    struct version *vs = calloc(KEEP, sizeof(*vs)); /* a ring of older versions, still live */
    CU_ASSERT_PTR_NOT_NULL_FATAL(vs);
    int cur = 0, gen = 0;
    for (int step = 0; step < STEPS; step++) {
        struct version *a = &vs[cur], *b = &vs[(cur + 1) % KEEP];
        gw_pmap_release(&b->m, &ops); /* the oldest goes */
        memcpy(b->gen, a->gen, sizeof(b->gen));
        int name = rand() % NAMES;
        if (rand() % 3 == 0) {
            CU_ASSERT_EQUAL_FATAL(gw_pmap_del(&a->m, hash_of(name), &name, &ops, &b->m), 0);
            b->gen[name] = 0;
        } else {
            struct val *x = val_new(name, ++gen);
            retain(x); /* the test's own hold while it sets */
            CU_ASSERT_EQUAL_FATAL(gw_pmap_set(&a->m, hash_of(name), &name, x, &ops, &b->m), 0);
            release(x);
            b->gen[name] = gen;
        }
        cur = (cur + 1) % KEEP;
        if (step % 97 == 0)
            for (int k = 0; k < KEEP; k++)
                check(&vs[k]); /* older versions are unchanged */
    }
    for (int k = 0; k < KEEP; k++)
        check(&vs[k]);
    for (int k = 0; k < KEEP; k++)
        gw_pmap_release(&vs[k].m, &ops);
    CU_ASSERT_EQUAL(live, 0); /* every value freed exactly once */
    free(vs);
}

static void test_random_spread(void)
{
    random_sequences(64);
}

static void test_random_collisions(void)
{
    random_sequences(6); /* 64 distinct hashes for 600 names */
}

static void test_share_and_empty(void)
{
    hash_bits = 64;
    struct gw_pmap a = {0}, b, c;
    int k = 1;
    CU_ASSERT_PTR_NULL(gw_pmap_get(&a, hash_of(k), &k, &ops));
    CU_ASSERT_EQUAL(gw_pmap_del(&a, hash_of(k), &k, &ops, &b), 0);
    CU_ASSERT_EQUAL(b.count, 0);
    struct val *x = val_new(1, 1);
    retain(x);
    CU_ASSERT_EQUAL(gw_pmap_set(&a, hash_of(k), &k, x, &ops, &b), 0);
    release(x);
    gw_pmap_share(&b, &c);
    gw_pmap_release(&b, &ops);
    CU_ASSERT_PTR_EQUAL(gw_pmap_get(&c, hash_of(k), &k, &ops), x);
    struct gw_pmap d;
    CU_ASSERT_EQUAL(gw_pmap_del(&c, hash_of(k), &k, &ops, &d), 0);
    CU_ASSERT_EQUAL(d.count, 0);
    CU_ASSERT_PTR_NULL(d.root);
    CU_ASSERT_EQUAL(live, 1); /* c still holds it */
    gw_pmap_release(&c, &ops);
    CU_ASSERT_EQUAL(live, 0);
}

/* A map built in place (gw_pmap_set_owned), with copies taken now and
 * then: the copies never change, the map ends right. */
static void owned_sequence(int bits)
{
    hash_bits = bits;
    srand(11 + (unsigned)bits);
    enum { KEEP = 6 };
    struct version *cur = calloc(1, sizeof(*cur));
    struct version *kept = calloc(KEEP, sizeof(*kept));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cur);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kept);
    int gen = 0, nkept = 0;
    for (int step = 0; step < 5000; step++) {
        int name = rand() % NAMES;
        struct val *x = val_new(name, ++gen);
        retain(x);
        CU_ASSERT_EQUAL_FATAL(gw_pmap_set_owned(&cur->m, hash_of(name), &name, x, &ops), 0);
        release(x);
        cur->gen[name] = gen;
        if (step % 331 == 0) { /* a copy shares the nodes from here on */
            struct version *k = &kept[nkept++ % KEEP];
            gw_pmap_release(&k->m, &ops);
            gw_pmap_share(&cur->m, &k->m);
            memcpy(k->gen, cur->gen, sizeof(k->gen));
        }
        if (step % 97 == 0)
            for (int i = 0; i < KEEP; i++)
                check(&kept[i]);
    }
    check(cur);
    for (int i = 0; i < KEEP; i++) {
        check(&kept[i]);
        gw_pmap_release(&kept[i].m, &ops);
    }
    gw_pmap_release(&cur->m, &ops);
    CU_ASSERT_EQUAL(live, 0);
    free(cur);
    free(kept);
}

static void test_owned_spread(void)
{
    owned_sequence(64);
}

static void test_owned_collisions(void)
{
    owned_sequence(6);
}

static CU_TestInfo tests[] = {
    {"random sets and deletes, older versions unchanged", test_random_spread},
    {"the same with most hashes equal (collision nodes)", test_random_collisions},
    {"share, delete the last entry, release in any order", test_share_and_empty},
    {"built in place, copies taken meanwhile unchanged", test_owned_spread},
    {"the same with most hashes equal", test_owned_collisions},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
