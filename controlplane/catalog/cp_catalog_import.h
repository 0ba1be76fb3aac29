/*
 * cp_catalog_import: a LiteLLM catalog (cp_litellm.h) into model_catalog,
 * for both the import-catalog subcommand and POST /v1/admin/catalog/import.
 *
 * One transaction: every accepted entry is upserted as the provider-less
 * row of its model id (source 'litellm'; a row whose columns already say
 * the same is left alone and counted unchanged), then the write's audit
 * row, config version bump and pg_notify (cp_resource_record), then COMMIT,
 * so data planes get a snapshot with the new catalog. Rows the document
 * does not mention, provider-specific rows and price_overrides are never
 * touched: an operator's override keeps winning. A rejected entry is not
 * written; each is logged as a warning and listed in the answer.
 */
#ifndef CP_CATALOG_IMPORT_H
#define CP_CATALOG_IMPORT_H

#include <jansson.h>
#include <stddef.h>

struct cp_call;
struct cp_db;
struct cp_db_err;
struct cp_verr;

/*
 * Imports text[0..n) as c->actor on c->db (c->pool holds the statement
 * results). source says where the document came from, for the audit row
 * and the logs: "body", "file:<path>" or "url:<redacted URL>".
 * GW_OK with *answer (the caller owns it):
 *   {"imported": N, "unchanged": N, "rejected": N, "ignored": N,
 *    "config_version": V, "rejections": [{"model","field","message"}...]}
 * GW_EINVAL with e filled (a 400: the text is not a LiteLLM catalog, or has
 * no model entries); GW_EIO with dberr filled (nothing was written).
 */
int cp_catalog_import(struct cp_call *c, const char *source, const char *text, size_t n,
                      json_t **answer, struct cp_verr *e, struct cp_db_err *dberr)
    __attribute__((warn_unused_result));

/* Reads the document (a file, or a blocking bounded fetch of url under the
 * policy fetch_allow, CP_FETCH_ALLOW_* bits) and imports it as actor on
 * db: GW_OK with *answer (as above; the caller owns it), else err says why
 * and nothing was written. For the CLI and the leader's catalog_sync job
 * (its own thread and connection). */
int cp_catalog_import_from(struct cp_db *db, const char *file, const char *url,
                           unsigned fetch_allow, const char *actor, json_t **answer, char *err,
                           size_t errlen) __attribute__((warn_unused_result));

/* llmgw-controlplane import-catalog: exactly one of file and url (fetched
 * under fetch_allow, --catalog-fetch-allow). Prints
 * the answer on stdout (one JSON line); returns the exit status, 0 when the
 * import committed (with or without rejections), 1 otherwise (after a log
 * line saying why). */
int cp_catalog_import_cli(struct cp_db *db, const char *file, const char *url,
                          unsigned fetch_allow);

#endif
