/*
 * dp_cpclient: the data plane's control-plane client. One thread, with its
 * own event loop and gRPC completion queue (gw_grpc), keeps a Watch open to
 * --control-plane and a Report stream beside it:
 *
 *  - each pushed Snapshot is built (dp_snapshot_build_ex, DP_SNAPSHOT_PUSHED:
 *    the same JSON and validator as file mode), published atomically (requests
 *    in flight finish on the snapshot they started with), written to the
 *    snapshot cache (dp_snapcache: no plaintext credential on disk), and
 *    acknowledged with an Ack {version} on the Report stream;
 *  - after the first whole document of a Watch, a control plane that knows
 *    deltas (WatchRequest.accepts_delta, which this client sets) sends only
 *    what changed: a delta is applied to the snapshot served
 *    (dp_snapshot_apply), published and acknowledged the same way, and the
 *    cache is written from it at most every few seconds and at exit; a delta
 *    on another base, or refused, opens the Watch again (have_version: the
 *    version served) and the control plane sends the whole document;
 *  - a document that does not build is refused: the last good snapshot keeps
 *    serving and the reason is logged (never the document);
 *  - when either call ends the session is torn down and reopened after an
 *    exponential backoff with jitter (100 ms doubling to 5 s; reset once a
 *    session delivered a snapshot). Calls wait for the channel to be ready,
 *    and the channel pings every 10 s to notice a dead peer.
 */
#ifndef DP_CPCLIENT_H
#define DP_CPCLIENT_H

#include "dp_config.h"

struct dp_cpclient;

/* Starts the client thread. have_version: the version served now (from the
 * cache), 0 for none. NULL on failure (logged). */
struct dp_cpclient *dp_cpclient_start(const struct dp_config *cfg, long long have_version);
/* Waits, up to timeout_ms, while the Report stream is up and ledger rows
 * are not yet acknowledged (a drained gateway leaves an empty spool when
 * it can). */
void dp_cpclient_flush(struct dp_cpclient *c, long timeout_ms);
/* Thread-safe: cancels the calls, drains, joins the thread and frees. */
void dp_cpclient_stop(struct dp_cpclient *c);

#endif
