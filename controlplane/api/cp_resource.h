/*
 * cp_resource: the admin API's resources as declarations.
 *
 * A resource is a table whose rows are addressed by a text key (a name, as
 * in the data plane's snapshot) and a list of fields: each with a JSON type,
 * flags, a default, bounds, allowed values and an optional check. One
 * generic handler (cp_resource_handle) serves every resource the same way:
 *
 *   GET    /v1/admin/<resource>        list, ordered by key
 *   POST   /v1/admin/<resource>        create (201)
 *   GET    /v1/admin/<resource>/<key>  one row, with ETag: "<version>"
 *   PUT    /v1/admin/<resource>/<key>  replace (absent fields take defaults)
 *   PATCH  /v1/admin/<resource>/<key>  merge onto the current row
 *   DELETE /v1/admin/<resource>/<key>  204
 *
 * Writes are optimistic: a body "version" that is not the row's is a 409,
 * an If-Match that is not the row's ETag a 412 (either is optional). Every
 * write runs in one transaction that also bumps config_state.version,
 * inserts an audit_log row (before/after, hidden fields left out) and
 * sends pg_notify('llmgw_config', <config version>), so a write is seen
 * whole or not at all, by every control-plane replica.
 *
 * Adding a resource is a file of its own, cp_res_<name>.c (its field
 * table and its checks; cp_res.h has the checks they share), and an entry
 * in cp_resources[] (cp_res.c).
 */
#ifndef CP_RESOURCE_H
#define CP_RESOURCE_H

#include <jansson.h>
#include <stddef.h>

#include "cp_call.h"

enum cp_ftype {
    CP_T_STRING,
    CP_T_BOOL,
    CP_T_INT,
    CP_T_OBJECT,
    CP_T_STRLIST, /* an array of non-empty strings (a Postgres text[]) */
    CP_T_ARRAY,   /* any JSON array (checked by the field's check) */
    CP_T_MONEY,   /* integer picodollars per token (or per the unit the
                     field's rule names), 0..10^12; an exact decimal string of
                     USD ("0.000002", "2e-6": gw_money_parse) is accepted and
                     converted */
};

#define CP_F_REQUIRED 0x1u /* absent on create or replace: 400 */
#define CP_F_NULLABLE 0x2u /* null is a value (SQL NULL) */
#define CP_F_NAME 0x4u     /* 1-128 characters, no '/', no whitespace or control bytes */
#define CP_F_KEY 0x8u      /* the row's key: set on create, never changed */
#define CP_F_HIDDEN                                                                                \
    0x10u /* secret material, or a column a prepare hook derives from a                            \
             virtual field (shown through extra_sql): never in a body,                             \
             never returned as itself, never audited */
#define CP_F_SERVER                                                                                \
    0x20u /* set by the server only: shown, ignored in a body, written                             \
             only when a prepare hook puts it in the object */
#define CP_F_VIRTUAL                                                                               \
    0x40u                    /* accepted in a body, not a column (a route's entries, a             \
                                secret's value): a prepare/after_write hook uses it */
#define CP_F_WRITEONLY 0x80u /* with CP_F_VIRTUAL: never echoed, never audited */

/* A check after the type rules pass: 0, or GW_EINVAL with e filled. v is
 * the field's value (JSON null for a nullable field set to null). Runs
 * inside the write's transaction, so it may query c->db. */
typedef int (*cp_field_check_cb)(struct cp_call *c, const char *field, const json_t *v,
                                 struct cp_verr *e);
/* A check on the whole object (fields that depend on each other). */
typedef int (*cp_object_check_cb)(struct cp_call *c, const json_t *obj, struct cp_verr *e);
/* Refuses a delete while something depends on the row (fills e: a 409). */
typedef int (*cp_delete_check_cb)(struct cp_call *c, const char *key, struct cp_verr *e);

struct cp_field {
    const char *name; /* JSON member and column */
    enum cp_ftype type;
    unsigned flags;
    const char *def;            /* JSON text used when absent on create/replace; NULL: none */
    long long min, max;         /* CP_T_INT bounds; CP_T_STRING max length (0: 2048) */
    const char *const *choices; /* CP_T_STRING: NULL-terminated allowed values */
    const char *rule;           /* the rule, in words, for choices or a check;
                                   CP_T_MONEY: the unit priced (NULL: token) */
    cp_field_check_cb check;
};

/* After validation, before the row is written (inside the transaction):
 * may change obj (derive stored columns from virtual fields, fill server
 * fields). before is the locked row on update, NULL on create. */
typedef int (*cp_prepare_cb)(struct cp_call *c, json_t *obj, const json_t *before,
                             struct cp_verr *e);
/* After the row is written (children: a route's entries), same transaction. */
typedef int (*cp_after_write_cb)(struct cp_call *c, const json_t *obj, const char *key,
                                 struct cp_verr *e);

struct cp_resource {
    const char *name;     /* URL segment and audit_log.resource: "providers" */
    const char *singular; /* for messages: "provider" */
    const char *table;    /* its table; fields[0] is the key column */
    const struct cp_field *fields;
    size_t nfields;
    cp_object_check_cb check;
    cp_delete_check_cb before_delete;
    cp_prepare_cb prepare;
    cp_after_write_cb after_write;
    /* SQL (over the row alias t) added to the row's JSON: '{"entries":...}'
     * as a jsonb expression; NULL: none. */
    const char *extra_sql;
    /* The row's key as a text SQL expression over t; NULL: t.<fields[0]>.
     * With two CP_F_KEY fields the key is "<first>/<second>" (split at the
     * first '/', so the second may hold '/'). */
    const char *key_sql;
    /* A create without the key field gets "<key_prefix><16 hex>". */
    const char *key_prefix;
    /* Nonzero: every create, update and delete takes
     * pg_advisory_xact_lock(write_lock) first, so the resource's writes
     * serialize (checks that read other rows, such as a route's names and
     * aliases, cannot race a write through another replica). */
    long long write_lock;
};

/* Every resource, NULL-terminated (cp_res.c). */
extern const struct cp_resource *const cp_resources[];
/* A price: an integer count of picodollars, or a decimal string of USD
 * that is an exact number of them (gw_money_parse), 0 to 10^12. GW_OK and
 * *out, or GW_EINVAL. */
int cp_money_value(const json_t *v, long long *out);

/* Serves one request for r; key is NULL for the collection. Ends the
 * request. */
void cp_resource_handle(struct cp_call *c, const struct cp_resource *r, const char *key);

/* The write's bookkeeping, shared with resources that are not a plain
 * table (secrets, keys): bumps config_state.version, inserts the audit
 * row and sends the notification, inside the caller's transaction. before
 * and after may be NULL; *version receives the new config version. The
 * audit row's id and the version are also set in c (for its span), and a
 * traced write's span is remembered for the version (cp_trace.h). */
int cp_resource_record(struct cp_call *c, const char *resource, const char *action, const char *id,
                       const json_t *before, const json_t *after, long long *version,
                       struct cp_db_err *err) __attribute__((warn_unused_result));
/* After the rollback of a write cp_resource_record recorded (its COMMIT
 * failed): the trace forgets the version, c names neither. */
void cp_resource_rolled_back(struct cp_call *c);

#endif
