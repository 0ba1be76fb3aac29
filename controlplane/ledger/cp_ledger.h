/*
 * cp_ledger: the control plane's ledger writer (docs/ledger.md).
 *
 * Report messages that need the database (ledger rows, lease requests and
 * releases) are queued here from the main loop, in each stream's order, and
 * a thread with its own PostgreSQL connection works through them: rows
 * are inserted in one transaction per batch (INSERT ... ON CONFLICT DO
 * NOTHING on (attempt_id, at): a row sent again is a no-op), a batch being
 * up to 1,000 rows gathered for at most 10 ms, the month partitions a
 * batch needs created first; lease messages go ahead of queued rows (a
 * reservation may be waiting on the grant) to the handlers installed with
 * cp_ledger_set_leases. The order of the two does not matter to the
 * accounting: a window's remaining does not move when a charge lands
 * (cp_leases.h). Results (the highest stored seq per stream, lease grants)
 * come back to the main loop, which replies on the stream.
 *
 * Judgements (a sampled answer's score, cp_judgement.h) ride with the rows:
 * one alone in a Report message or after the rows of a LedgerBatch, each
 * with a seq from the rows' sequence; they are queued, inserted (ON
 * CONFLICT (request_id) DO NOTHING) in the same transaction as the rows
 * of their run, and acknowledged by the same cumulative ack.
 *
 * While PostgreSQL is down the batch is retried with backoff; nothing is
 * acknowledged, and each data plane holds its rows (bounded by its send
 * window) and its spool. A row the database refuses (its data, or a month
 * whose partition was detached) is stored whole in ledger_rejects with the
 * reason, then acknowledged: nothing is dropped, nothing stalls a stream.
 */
#ifndef CP_LEDGER_H
#define CP_LEDGER_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct cp_db;
struct cp_grpc;
struct Llmgw__V1__ReportMessage;
struct Llmgw__V1__LeaseRequest;
struct Llmgw__V1__LeaseRelease;
struct Llmgw__V1__LeaseGrant;
struct cp_master_key;

struct cp_ledger;

/* Starts the writer thread (it connects on its own). Replies go out
 * through grpc on base's loop. NULL with err filled on failure. */
struct cp_ledger *cp_ledger_new(struct event_base *base, const char *conninfo, struct cp_grpc *grpc,
                                char *err, size_t errlen);
void cp_ledger_free(struct cp_ledger *l);

/* The rows a LedgerBatch may carry (cp_grpc_opts.ledger_batch_max). */
#define CP_LEDGER_BATCH_MAX 256

/* The master key that seals the text a judgement keeps (copied; NULL:
 * none, and such text is not stored). Main loop, before the first
 * message. */
void cp_ledger_set_master_key(struct cp_ledger *l, const struct cp_master_key *key);

/* Main loop: a Report message (cp_grpc_opts.on_report). Rows and
 * judgements (one, or a LedgerBatch's) and lease messages are queued;
 * anything else is ignored. GW_ENOMEM when one could not be queued: the
 * caller ends the stream, so a later cumulative ack cannot cover it. */
int cp_ledger_submit(struct cp_ledger *l, uint64_t stream_id, const char *replica_id,
                     const struct Llmgw__V1__ReportMessage *m);

/* Lease handlers, called on the writer thread with its connection, in the
 * order the lease messages came, ahead of the rows queued. grant fills g
 * (strings it sets must stay valid until the next call on this thread);
 * it gets arg, which must outlive the writer. Without handlers, a
 * LeaseRequest is refused as "unallocated". */
struct cp_ledger_leases {
    int (*grant)(void *arg, struct cp_db *db, const char *replica,
                 const struct Llmgw__V1__LeaseRequest *rq, struct Llmgw__V1__LeaseGrant *g);
    int (*release)(struct cp_db *db, const char *replica, const struct Llmgw__V1__LeaseRelease *rl);
    void *arg;
};
void cp_ledger_set_leases(struct cp_ledger *l, const struct cp_ledger_leases *h);

struct cp_ledger_stats {
    uint64_t inserted;                /* rows stored */
    uint64_t duplicates;              /* rows that were already stored (replays) */
    uint64_t errors;                  /* failed batches (each retried) */
    uint64_t rejected;                /* rows put in ledger_rejects */
    uint64_t row_msgs;                /* Report messages with one LedgerRow */
    uint64_t batch_msgs;              /* Report messages with a LedgerBatch */
    uint64_t judgement_msgs;          /* Report messages with one Judgement */
    uint64_t judgements_inserted;     /* judgements stored */
    uint64_t judgements_duplicate;    /* already stored (replays) */
    uint64_t judgements_rejected;     /* refused (logged by request id, acknowledged) */
    uint64_t judgement_texts_dropped; /* kept text not stored: no master key */
    size_t queued; /* items waiting for the writer (rows, judgements, lease messages) */
    int db_up;
};
void cp_ledger_stats(struct cp_ledger *l, struct cp_ledger_stats *st);

#endif
