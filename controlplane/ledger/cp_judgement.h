/*
 * cp_judgement: a Judgement from the Report stream, made ready for the
 * judgements table (docs/ledger.md, "Judgements"). The ledger writer
 * (cp_ledger) queues it in the stream's order with the ledger rows,
 * inserts it in the same transaction as the rows of its run and
 * acknowledges it with them: one seq sequence, one cumulative ack.
 *
 * The row is built on the main loop, when the message arrives: its text
 * fields are cut and made valid UTF-8, and the prompt and answer text a
 * route chose to keep are sealed at once with the master key (cp_secrets,
 * AAD "judgement/<request_id>#prompt" and "#answer"), so that no plaintext
 * waits in the writer's queue, reaches PostgreSQL or a log. Without a
 * master key the text is not stored (the caller says so once).
 */
#ifndef CP_JUDGEMENT_H
#define CP_JUDGEMENT_H

#include <stddef.h>

struct cp_db;
struct cp_db_err;
struct cp_master_key;
struct Llmgw__V1__Judgement;

/* The most text kept of each of the prompt and the answer: a longer one is
 * cut (at a character boundary) to what cp_secret_seal takes. */
#define CP_JUDGEMENT_TEXT_MAX (64 * 1024)

/* The AAD a kept text is sealed under ("judgement/<request_id>#<part>",
 * part "prompt" or "answer") into out; 0, or -1 when it does not fit. */
int cp_judgement_ref(char *out, size_t n, const char *request_id, const char *part);

struct cp_judgement;

/*
 * Builds the row of j (not kept) from replica_id. *problem: NULL, or why
 * the table would refuse it (the row is still returned, so that the caller
 * can log it by request id and acknowledge it). key NULL: text is not
 * kept, and *text_dropped is set when j carried some. NULL when memory ran
 * out or sealing failed (the caller ends the stream: the data plane sends
 * it again). The caller owns the row (cp_judgement_free).
 */
struct cp_judgement *cp_judgement_new(const struct Llmgw__V1__Judgement *j, const char *replica_id,
                                      const struct cp_master_key *key, const char **problem,
                                      int *text_dropped);
void cp_judgement_free(struct cp_judgement *r);

/* The row's request id (its key, as sent) and its seq on the stream. */
const char *cp_judgement_request_id(const struct cp_judgement *r);
unsigned long long cp_judgement_seq(const struct cp_judgement *r);

/* INSERT ... ON CONFLICT (request_id) DO NOTHING, in the caller's
 * transaction: *inserted 1 when it was new, 0 when it was already stored.
 * 0, or GW_EIO with err filled. */
int cp_judgement_insert(struct cp_db *db, const struct cp_judgement *r, int *inserted,
                        struct cp_db_err *err) __attribute__((warn_unused_result));

#endif
