/*
 * GET /v1/admin/judgements and GET /v1/admin/judgements/summary: the
 * scores the routes' judges gave sampled answers (docs/ledger.md,
 * "Judgements"; docs/openapi.yaml).
 *
 * Filters, on both: route, model, provider, request_id (exact matches),
 * from and to (RFC 3339 or Unix milliseconds; from <= at < to, at being
 * when the judged request ended). The list: newest first, limit (1 to
 * 1000, default 100) and offset; include_text=true adds the prompt and
 * answer a route kept, opened with the master key (a token of scope admin
 * only). The summary: group_by, a comma list of route, model, provider,
 * day (UTC), each at most once; per group count, mean_score, pass_rate and
 * mean_normalized (each score as (score - scale_min) / (scale_max -
 * scale_min)). A parameter that is unknown, repeated or malformed is a 400
 * naming it.
 */
#ifndef CP_JUDGEMENTS_API_H
#define CP_JUDGEMENTS_API_H

struct cp_call;
struct cp_db;

void cp_judgements_list(struct cp_call *c, struct cp_db *db);
void cp_judgements_summary(struct cp_call *c, struct cp_db *db);

#endif
