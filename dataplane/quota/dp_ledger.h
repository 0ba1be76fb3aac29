/*
 * dp_ledger: the data plane's side of the ledger. Every upstream attempt,
 * failed ones included, becomes exactly one row (struct dp_ledger_row). A
 * row is appended to a bounded on-disk spool before anything else happens
 * to it, travels to the control plane on the Report stream, and leaves the
 * spool only once the control plane acknowledges it stored (a cumulative
 * ack per stream). Rows not acknowledged when a stream ends are sent again
 * on the next; the control plane's insert is idempotent by attempt id, so a
 * row lands exactly once however often it is sent. A restart replays the
 * spool (docs/ledger.md).
 */
#ifndef DP_LEDGER_H
#define DP_LEDGER_H

#include <stddef.h>
#include <stdint.h>

/* What one attempt took from one limit's window (docs/budgets.md). */
#define DP_MAX_CHARGES 8
struct dp_charge {
    char limit_id[64];
    int64_t window_start_ms; /* UTC start of the limit's period */
    char lease_id[40];       /* "" when taken with no lease (fail-open) */
    int64_t amount;          /* picodollars, tokens or requests */
};

/* Text fields are bounded copies: a row owns its bytes. */
struct dp_ledger_row {
    char request_id[160];
    char attempt_id[176]; /* request id + "." + attempt number */
    char key_id[128];
    char team[128];
    char project[128];
    char route[128];
    char provider[128];
    char model[257];
    char selector[257];
    char session[129];
    char agent[129];
    char purpose[129];
    char api[32];
    char failure_class[32]; /* "" on success */
    char currency[4];
    int32_t attempt; /* 1-based */
    int32_t status;  /* the attempt's HTTP status; 0 when no answer came */
    int stream;
    int has_cost;        /* 0: no price was known: cost NULL, never zero */
    int usage_estimated; /* the tokens are the gateway's estimate (an answer cut early) */
    /* Served from the response cache (docs/cache.md): no upstream call;
     * cost 0, tokens 0, and what the original attempt cost as saved
     * (has_saved 0: its cost was unknown). */
    int cache_hit;
    int has_saved;
    int64_t saved_picodollars;
    int64_t input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
        output_tokens, reasoning_tokens;
    int64_t latency_ms, ttfb_ms, ttfc_ms; /* -1: no byte / no content came */
    int64_t cost_picodollars;
    /* Media (docs/media.md): the units beside the tokens. */
    int64_t audio_ms, characters, images;
    int64_t snapshot_version;
    int64_t at_ms; /* the attempt's start, Unix ms */
    struct dp_charge charges[DP_MAX_CHARGES];
    size_t ncharges;
};

/* A judged answer's score (docs/guardrails.md): it rides the same queue,
 * spool and sequence as the rows, as a Judgement. */
struct dp_judgement {
    char request_id[160];       /* the judged request */
    char attempt_id[176];       /* its answer's ledger row */
    char judge_request_id[176]; /* the judge's own call */
    char route[128];
    char provider[128];
    char model[257];
    char key_id[128];
    char team[128];
    char project[128];
    char judge_route[128];
    int32_t score, scale_min, scale_max;
    int pass;
    char label[65];
    int64_t at_ms;
    int64_t snapshot_version;
    /* The route keeps text (judge.keep_text): sent to be stored encrypted,
     * held in memory only (never in the spool's files); else NULL. */
    const char *prompt_text;
    const char *answer_text;
};

struct dp_ledger_stats {
    uint64_t recorded_rows; /* since start */
    uint64_t acked_rows;    /* acknowledged stored by the control plane */
    uint64_t dropped_rows;  /* not recorded: the spool was full (each one logged) */
    size_t pending_rows;    /* held, not acknowledged (sent or not) */
    size_t inflight_rows;   /* sent on the current stream, not acknowledged */
    size_t spooled_rows;    /* of the pending, the ones on disk */
    size_t spool_bytes;
};

/* Once, before any row: reads back what spool_dir (created 0700 if
 * missing; NULL or "": no spool, rows are held in memory only) holds and
 * queues it. max_bytes bounds what is held; a row past it is dropped,
 * counted and logged with its identity and money. GW_EIO when the spool
 * cannot be used (rows are then held in memory). */
int dp_ledger_init(const char *spool_dir, size_t max_bytes);
void dp_ledger_shutdown(void);
/* Rows are being taken (init was called). */
int dp_ledger_enabled(void);

/* Called (from the recording thread, outside the lock) after each row is
 * queued: the sender's wake-up. */
void dp_ledger_set_notify(void (*fn)(void *), void *arg);

/* Any thread: packs the row, appends it to the spool and queues it.
 * GW_ELIMIT when the spool is full (dropped), GW_EINVAL before init. */
int dp_ledger_record(const struct dp_ledger_row *r);

/* Any thread: queues a judgement as dp_ledger_record does a row;
 * GW_ERANGE when it is larger than a record may be (64 KiB: its kept
 * text), not queued. */
int dp_ledger_record_judgement(const struct dp_judgement *j);

/* The sender's side (one thread). A new Report stream starts over: every
 * held row is unsent and seqs count from 1 again. */
void dp_ledger_stream_reset(void);
/* The next rows as a whole encoded ReportMessage (malloc'd, *out), each
 * with its seq on this stream: one row as a LedgerRow, or up to max_rows
 * (the most the control plane said it takes; 0 or 1: one) in a
 * LedgerBatch, never past `window` rows in flight. Returns the number of
 * rows, 0 when nothing is to be sent, -1 when out of memory. */
int dp_ledger_next(const char *replica_id, size_t window, size_t max_rows, unsigned char **out,
                   size_t *outlen);
/* The control plane stored every row of this stream with seq <= through. */
void dp_ledger_acked(uint64_t through);
/* fdatasync of the segment being written, when it has new rows. */
void dp_ledger_sync(void);

void dp_ledger_stats(struct dp_ledger_stats *st);
size_t dp_ledger_pending(void);

#endif
