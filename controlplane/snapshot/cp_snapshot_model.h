/*
 * cp_snapshot_model: the snapshot builder's picture of its last good build
 * (cp_snapshot.c), kept so that a write costs what it changed, not what the
 * configuration holds. Per kind of resource a map from name (or id) to that
 * resource's object, serialized exactly as the full document carries it,
 * plus the catalog and guard_rules arrays (each serialized whole: each
 * changes whole) and the version. The whole document is assembled from these texts on demand,
 * without parsing or serializing anything.
 *
 * Entries are kept in strcmp order of their names, in balanced trees
 * (tsearch): put and delete cost O(log n), and the document lists each kind
 * sorted by name. Provider texts hold credentials: every text is wiped when
 * it is replaced or freed. Not thread-safe: the builder locks around it.
 */
#ifndef CP_SNAPSHOT_MODEL_H
#define CP_SNAPSHOT_MODEL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum cp_kind { CP_K_PROVIDERS, CP_K_ROUTES, CP_K_KEYS, CP_K_TEAMS, CP_K_PROJECTS, CP_K_LIMITS };
#define CP_NKINDS 6

/* "providers", ...: the document's member for each kind. */
extern const char *const cp_kind_names[CP_NKINDS];
/* "name" or "id": the member of an object that names it. */
extern const char *const cp_kind_ids[CP_NKINDS];

struct cp_model {
    void *root[CP_NKINDS];
    size_t count[CP_NKINDS];
    size_t bytes;  /* the entries' names and texts, for sizing the document */
    char *catalog; /* the catalog array, serialized; NULL: "[]" */
    size_t catalog_len;
    char *guard_rules; /* the guard_rules array, serialized; NULL: "[]" */
    size_t guard_rules_len;
    int64_t version; /* the document's "version"; -1: no build yet */
};

void cp_model_init(struct cp_model *m);
/* Frees (and wipes) everything; m is empty again (version -1). */
void cp_model_clear(struct cp_model *m);

/* The text of kind's entry name, or NULL; its length in *len. */
const char *cp_model_get(const struct cp_model *m, int kind, const char *name, size_t *len);
/* Adds or replaces kind's entry name with text (taken over: wiped and freed
 * by the model, also when this fails). GW_OK or GW_ENOMEM. */
int cp_model_put(struct cp_model *m, int kind, const char *name, char *text, size_t len);
/* Removes kind's entry name, if there is one. */
void cp_model_del(struct cp_model *m, int kind, const char *name);
/* Replaces the catalog text (taken over). */
void cp_model_set_catalog(struct cp_model *m, char *text, size_t len);
/* Replaces the guard_rules text (taken over). */
void cp_model_set_guard_rules(struct cp_model *m, char *text, size_t len);

/* Fills the empty m from a whole document (the full build's), each object
 * serialized once. GW_OK, GW_EINVAL (an object without its name) or
 * GW_ENOMEM; m is left empty on failure. */
int cp_model_from_doc(struct cp_model *m, const json_t *doc);

/* Where a and b differ (versions aside): bit k for kind k, bit
 * CP_DIFF_CATALOG for the catalog, CP_DIFF_GUARD_RULES for the guard
 * rules; 0 when they hold the same document. */
#define CP_DIFF_CATALOG CP_NKINDS
#define CP_DIFF_GUARD_RULES (CP_NKINDS + 1)
unsigned cp_model_diff(const struct cp_model *a, const struct cp_model *b);

/* The whole document (malloc'd, NUL-terminated, holds credentials), its
 * length in *len; NULL without memory. O(the document). */
char *cp_model_document(const struct cp_model *m, size_t *len);

#endif
