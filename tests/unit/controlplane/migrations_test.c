/* Tests for controlplane/store/cp_migrate.c's table: the migrations compiled
 * in (controlplane/embed_dir.cmake) are the files of
 * controlplane/store/migrations/ (MIGRATIONS_DIR), byte for byte, in number
 * order, none missing and none extra. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_migrate.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The folder's entries but . and .., sorted; *n receives how many. */
static char **list_dir(size_t *n)
{
    DIR *d = opendir(MIGRATIONS_DIR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    char **names = NULL;
    size_t cap = 0;
    *n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 32;
            names = realloc(names, cap * sizeof(*names));
            CU_ASSERT_PTR_NOT_NULL_FATAL(names);
        }
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, *n, sizeof(*names), by_name);
    return names;
}

/* The whole file; *len receives its length. */
static char *slurp(const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", MIGRATIONS_DIR, name);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    *len = fread(buf, 1, (size_t)size, f);
    fclose(f);
    CU_ASSERT_EQUAL(*len, (size_t)size);
    buf[*len] = 0;
    return buf;
}

static size_t table_len(void)
{
    size_t n = 0;
    while (cp_migrations[n].version)
        n++;
    return n;
}

static void test_embedded_equals_files(void)
{
    size_t nfiles;
    char **files = list_dir(&nfiles);
    size_t n = table_len();
    CU_ASSERT_TRUE(n > 0);
    CU_ASSERT_EQUAL(n, nfiles); /* none missing, none extra */
    for (size_t i = 0; i < n && i < nfiles; i++) {
        const struct cp_migration *m = &cp_migrations[i];
        CU_ASSERT_STRING_EQUAL(m->file, files[i]);
        size_t len;
        char *want = slurp(files[i], &len);
        CU_ASSERT_EQUAL(m->len, len);
        CU_ASSERT_TRUE(m->len == len && memcmp(m->sql, want, len) == 0);
        CU_ASSERT_EQUAL(m->sql[m->len], 0);      /* NUL-terminated, */
        CU_ASSERT_EQUAL(strlen(m->sql), m->len); /* with no NUL inside */
        if (m->len != len || memcmp(m->sql, want, len) != 0)
            fprintf(stderr, "\n%s: the embedded text differs from the file\n", files[i]);
        free(want);
    }
    for (size_t i = 0; i < nfiles; i++)
        free(files[i]);
    free(files);
}

static void test_numbers_and_names(void)
{
    size_t n = table_len();
    for (size_t i = 0; i < n; i++) {
        const struct cp_migration *m = &cp_migrations[i];
        CU_ASSERT_EQUAL(m->version, (int)i + 1); /* 1, 2, 3, ...: no gap, no duplicate */
        char want[256];
        snprintf(want, sizeof(want), "%04d_%s.sql", m->version, m->name);
        for (char *p = want; *p; p++)
            if (*p == ' ')
                *p = '_';
        CU_ASSERT_STRING_EQUAL(m->file, want); /* the name is the slug */
    }
    CU_ASSERT_STRING_EQUAL(cp_migrations[0].name, "initial schema");
    CU_ASSERT_EQUAL(cp_migrate_latest(), (int)n);
}

static CU_TestInfo tests[] = {
    {"the embedded migrations are the files, byte for byte", test_embedded_equals_files},
    {"numbered 1..N, named by their slugs", test_numbers_and_names},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
