/*
 * The Responses facade's own pieces, shared by its files and by nothing
 * else: the request parse (responses_parse.c), the stream encoder
 * (responses_stream.c), and what both answers are made of (responses.c).
 */
#ifndef FC_RESPONSES_INT_H
#define FC_RESPONSES_INT_H

#include <jansson.h>

#include "canon.h"
#include "dp_facade.h"
#include "gw_buf.h"

/* Echoed sampling settings read as the client wrote them (0.3, not
 * 0.29999999999999999). */
#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

/* responses_parse.c: the facade's parse. */
int fc_responses_parse(struct canon_req *r, struct canon_err *err);

/* responses_stream.c: the facade's stream_new, stream_event, stream_free. */
void *fc_responses_stream_new(const struct canon_req *r, const struct fc_ctx *ctx);
int fc_responses_stream_event(void *p, const struct canon_event *ev, struct gw_buf *out);
void fc_responses_stream_free(void *p);

/* responses.c: the response object and its output items. */

/* A JSON string of n bytes, invalid UTF-8 as U+FFFD; NULL only when out of
 * memory. */
json_t *fc_responses_jstr(const char *s, size_t n);
/* The request settings every response object repeats. */
json_t *fc_responses_echo_of(const struct canon_req *r);
/* The response object. output is stolen; usage NULL renders null. */
json_t *fc_responses_response_of(const char *id, long long created, const char *model,
                                 const json_t *echo, const char *status, json_t *output,
                                 const struct canon_usage *u, const char *incomplete,
                                 const char *err_code, const char *err_msg);
/* incomplete_details.reason for a stop; NULL when the answer completed. */
const char *fc_responses_incomplete_reason(enum canon_stop s);
json_t *fc_responses_message_item(const char *id, const char *status, const char *text, size_t len,
                                  int with_content);
/* A message item's output_text logprobs become lp (stolen; NULL: kept). */
void fc_responses_set_logprobs(json_t *item, json_t *lp);
json_t *fc_responses_reasoning_item(const char *id, const char *text, size_t len, int with_summary,
                                    const char *sig);
json_t *fc_responses_call_item(const char *id, const char *status, const char *call_id,
                               const char *name, const char *args, size_t len);

#endif
