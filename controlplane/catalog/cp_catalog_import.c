#include "cp_catalog_import.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_call.h"
#include "cp_db.h"
#include "cp_fetch.h"
#include "cp_litellm.h"
#include "cp_metrics.h"
#include "cp_resource.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_pool.h"

/* The columns an import writes, as one list: the recordset's types, the
 * insert, the update and the unchanged test all follow it. image_prices
 * is not in LiteLLM's document: an import writes it NULL, like any price
 * the document does not give (an operator's prices by size and quality
 * belong in an override, which an import never touches). */
#define COLUMNS                                                                                    \
    "mode, litellm_provider, context_window, max_output_tokens, capabilities, input_price, "       \
    "output_price, cache_read_price, cache_write_5m_price, cache_write_1h_price, "                 \
    "reasoning_price, audio_second_price, character_price, image_price, media_input_price, "       \
    "media_output_price, image_prices, currency"
#define EXCLUDED_COLUMNS                                                                           \
    "EXCLUDED.mode, EXCLUDED.litellm_provider, EXCLUDED.context_window, "                          \
    "EXCLUDED.max_output_tokens, EXCLUDED.capabilities, EXCLUDED.input_price, "                    \
    "EXCLUDED.output_price, EXCLUDED.cache_read_price, EXCLUDED.cache_write_5m_price, "            \
    "EXCLUDED.cache_write_1h_price, EXCLUDED.reasoning_price, EXCLUDED.audio_second_price, "       \
    "EXCLUDED.character_price, EXCLUDED.image_price, EXCLUDED.media_input_price, "                 \
    "EXCLUDED.media_output_price, EXCLUDED.image_prices, EXCLUDED.currency"
#define TABLE_COLUMNS                                                                              \
    "t.mode, t.litellm_provider, t.context_window, t.max_output_tokens, t.capabilities, "          \
    "t.input_price, t.output_price, t.cache_read_price, t.cache_write_5m_price, "                  \
    "t.cache_write_1h_price, t.reasoning_price, t.audio_second_price, t.character_price, "         \
    "t.image_price, t.media_input_price, t.media_output_price, t.image_prices, t.currency"

/*
 * $1: the rows (cp_litellm). A row changes only when some column differs;
 * RETURNING lists the rows written, (xmax = 0) telling a new row from an
 * updated one. The answer is one JSON object.
 */
static const char SQL_UPSERT[] =
    "WITH r AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(model text, mode text, "
    "litellm_provider text, context_window integer, max_output_tokens integer, capabilities "
    "text[], input_price bigint, output_price bigint, cache_read_price bigint, "
    "cache_write_5m_price bigint, cache_write_1h_price bigint, reasoning_price bigint, "
    "audio_second_price bigint, character_price bigint, image_price bigint, media_input_price "
    "bigint, media_output_price bigint, image_prices jsonb, currency text)), "
    "up AS (INSERT INTO model_catalog AS t (provider, model, source, " COLUMNS ") "
    "SELECT NULL, model, 'litellm', " COLUMNS " FROM r "
    "ON CONFLICT (provider, model) DO UPDATE SET (source, " COLUMNS ") = "
    "(EXCLUDED.source, " EXCLUDED_COLUMNS "), "
    "version = t.version + 1, updated_at = now() "
    "WHERE (t.source, " TABLE_COLUMNS ") IS DISTINCT FROM (EXCLUDED.source, " EXCLUDED_COLUMNS ") "
    "RETURNING t.model, (t.xmax = 0) AS created) "
    "SELECT json_build_object('created', count(*) FILTER (WHERE created), 'updated', "
    "count(*) FILTER (WHERE NOT created), 'models', coalesce(json_agg(model ORDER BY model), "
    "'[]'::json))::text FROM up";

static json_t *rejected_models(const json_t *rejected)
{
    json_t *a = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(rejected, i, r) json_array_append(a, json_object_get(r, "model"));
    return a;
}

int cp_catalog_import(struct cp_call *c, const char *source, const char *text, size_t n,
                      json_t **answer, struct cp_verr *e, struct cp_db_err *dberr)
{
    struct cp_litellm l;
    char msg[256];
    *answer = NULL;
    int rc = cp_litellm_parse(text, n, &l, msg, sizeof(msg));
    if (rc == GW_ENOMEM) {
        cp_verr_set(e, 500, "internal", NULL, "out of memory");
        return GW_ENOMEM;
    }
    if (rc != GW_OK)
        return cp_verr_set(e, 400, "invalid_document", NULL,
                           "%s (expected LiteLLM's model_prices_and_context_window.json: an "
                           "object of model entries)",
                           msg);
    size_t nrows = json_array_size(l.rows), nrej = json_array_size(l.rejected);
    if (nrows + nrej == 0) {
        cp_litellm_free(&l);
        return cp_verr_set(e, 400, "invalid_document", NULL,
                           "the document has no model entries (expected LiteLLM's "
                           "model_prices_and_context_window.json: an object of model entries)");
    }
    size_t i;
    json_t *r;
    json_array_foreach(l.rejected, i, r)
    {
        /* The entry's model and field; no request content is involved. */
        gw_logf(GW_LOG_WARN, "catalog entry rejected", "{s:s,s:s?,s:s?,s:s?}", "source", source,
                "model", json_string_value(json_object_get(r, "model")), "field",
                json_string_value(json_object_get(r, "field")), "reason",
                json_string_value(json_object_get(r, "message")));
    }
    char *rows = json_dumps(l.rows, JSON_COMPACT);
    const char *p[] = {rows};
    json_t *written = NULL, *after = NULL;
    long long version = 0;
    rc = GW_EIO;
    if (!rows) {
        snprintf(dberr->sqlstate, sizeof(dberr->sqlstate), "%s", "");
        snprintf(dberr->message, sizeof(dberr->message), "out of memory");
        goto out;
    }
    if (cp_db_begin(c->db, dberr))
        goto out;
    PGresult *res = cp_db_exec(c->db, c->pool, SQL_UPSERT, 1, p, dberr);
    const char *v = res ? cp_db_value(res) : NULL;
    written = v ? json_loads(v, 0, NULL) : NULL;
    if (!written) {
        if (res) {
            snprintf(dberr->sqlstate, sizeof(dberr->sqlstate), "%s", "XX000");
            snprintf(dberr->message, sizeof(dberr->message), "the upsert answered no summary");
        }
        cp_db_rollback(c->db);
        goto out;
    }
    long long created = json_integer_value(json_object_get(written, "created"));
    long long updated = json_integer_value(json_object_get(written, "updated"));
    after = json_pack("{s:s,s:I,s:I,s:I,s:I,s:O,s:o}", "source", source, "created",
                      (json_int_t)created, "updated", (json_int_t)updated, "unchanged",
                      (json_int_t)((long long)nrows - created - updated), "rejected",
                      (json_int_t)nrej, "models", json_object_get(written, "models"),
                      "rejected_models", rejected_models(l.rejected));
    if (cp_resource_record(c, "catalog", "import", source, NULL, after, &version, dberr) ||
        cp_db_commit(c->db, dberr)) {
        cp_db_rollback(c->db);
        cp_resource_rolled_back(c);
        goto out;
    }
    cp_metrics_audit_rows(1);
    *answer = json_pack("{s:I,s:I,s:I,s:I,s:I,s:O}", "imported", (json_int_t)(created + updated),
                        "unchanged", (json_int_t)((long long)nrows - created - updated), "rejected",
                        (json_int_t)nrej, "ignored", (json_int_t)l.ignored, "config_version",
                        (json_int_t)version, "rejections", l.rejected);
    gw_logf(GW_LOG_INFO, "catalog imported", "{s:s,s:I,s:I,s:I,s:I,s:I}", "source", source,
            "created", (json_int_t)created, "updated", (json_int_t)updated, "unchanged",
            (json_int_t)((long long)nrows - created - updated), "rejected", (json_int_t)nrej,
            "config_version", (json_int_t)version);
    rc = *answer ? GW_OK : GW_ENOMEM;
    if (rc != GW_OK)
        cp_verr_set(e, 500, "internal", NULL, "out of memory (the import was committed)");
out:
    free(rows);
    json_decref(written);
    json_decref(after);
    cp_litellm_free(&l);
    return rc;
}

/* The whole file, at most max bytes. */
static int read_file(const char *path, struct gw_buf *out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return GW_EIO;
    }
    char chunk[65536];
    size_t k;
    int rc = GW_OK;
    while (rc == GW_OK && (k = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = gw_buf_append(out, chunk, k);
    if (rc == GW_OK && ferror(f)) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        rc = GW_EIO;
    } else if (rc != GW_OK)
        snprintf(err, errlen, "%s is larger than %zu bytes", path, out->max);
    fclose(f);
    return rc;
}

int cp_catalog_import_from(struct cp_db *db, const char *file, const char *url,
                           unsigned fetch_allow, const char *actor, json_t **answer, char *err,
                           size_t errlen)
{
    struct cp_fetch f = {0};
    struct gw_buf doc;
    char why[768];
    int rc;
    const char *text;
    size_t n;
    char source[600];
    *answer = NULL;
    gw_buf_init(&doc, CP_FETCH_MAX_BYTES);
    if (file) {
        snprintf(source, sizeof(source), "file:%s", file);
        rc = read_file(file, &doc, why, sizeof(why));
        text = doc.data ? doc.data : "";
        n = doc.len;
    } else {
        rc = cp_fetch_run(&f, url, fetch_allow, 0, 0, why, sizeof(why));
        snprintf(source, sizeof(source), "url:%s", f.url);
        text = f.body.data ? f.body.data : "";
        n = f.body.len;
    }
    if (rc != GW_OK) {
        snprintf(err, errlen, "%s: cannot read the document: %s", source, why);
        cp_fetch_cleanup(&f);
        gw_buf_free(&doc);
        return rc;
    }
    struct gw_pool *pool = gw_pool_new(0);
    struct cp_call c = {.pool = pool, .db = db, .actor = actor};
    struct cp_verr e = {0};
    struct cp_db_err dberr = {{0}, {0}};
    rc = pool ? cp_catalog_import(&c, source, text, n, answer, &e, &dberr) : GW_ENOMEM;
    if (rc != GW_OK)
        snprintf(err, errlen, "%s: %s", source,
                 rc == GW_EIO   ? dberr.message
                 : e.message[0] ? e.message
                                : "out of memory");
    gw_pool_free(pool);
    cp_fetch_cleanup(&f);
    gw_buf_free(&doc);
    return rc;
}

int cp_catalog_import_cli(struct cp_db *db, const char *file, const char *url, unsigned fetch_allow)
{
    json_t *answer = NULL;
    char err[1024];
    int rc = cp_catalog_import_from(db, file, url, fetch_allow, "import-catalog", &answer, err,
                                    sizeof(err));
    if (rc == GW_OK) {
        char *s = json_dumps(answer, JSON_COMPACT);
        if (s)
            printf("%s\n", s);
        free(s);
        fflush(stdout);
    } else {
        gw_logf(GW_LOG_ERROR, "import-catalog failed, nothing was written", "{s:s}", "error", err);
    }
    json_decref(answer);
    return rc == GW_OK ? 0 : 1;
}
