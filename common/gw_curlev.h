/*
 * gw_curlev: one libcurl multi handle driven by one libevent loop. All the
 * glue between the two lives here (curl's socket and timer callbacks mapped
 * onto events), so callers only add easy handles and get one completion
 * callback per transfer.
 *
 * The multi handles keep the connection cache, so upstream connections are
 * reused across requests made on the same loop. A loop runs up to 64 of
 * them, 256 transfers each at most, filled in order: libcurl 7.88's walks
 * of its connection cache stay bounded however many streams are open; one
 * past the first that stays empty for 5 s is closed (gw_curlev.c).
 *
 * gw_curlev owns CURLOPT_PRIVATE of every handle it runs. The completion
 * callback runs from the event loop after curl has finished with the handle
 * (it is already removed from the multi); the callee owns the easy handle
 * again and may clean it up or add new transfers. gw_curlev_remove() must
 * not be called from inside one of the easy handle's own callbacks (write,
 * header): return an error from the callback instead.
 */
#ifndef GW_CURLEV_H
#define GW_CURLEV_H

#include <curl/curl.h>
#include <stddef.h>

struct event_base;
struct gw_curlev;

typedef void (*gw_curlev_done_cb)(CURL *easy, CURLcode result, void *arg);

/* NULL on failure. curl_global_init must have run. */
struct gw_curlev *gw_curlev_new(struct event_base *base);
/* Cancels every running transfer without callbacks; their easy handles are
 * left to their owners. */
void gw_curlev_free(struct gw_curlev *m);
/* Starts a transfer. On failure the callback is never called. */
int gw_curlev_add(struct gw_curlev *m, CURL *easy, gw_curlev_done_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* Cancels a running transfer; its callback is never called. */
void gw_curlev_remove(struct gw_curlev *m, CURL *easy);
/* Transfers running. */
size_t gw_curlev_running(const struct gw_curlev *m);

/* Easy handles for the loop's transfers: a reset one kept from an earlier
 * transfer when there is one (creating a handle per request costs an
 * allocation and its initialisation on the hot path), else a new one; NULL
 * when out of memory. Put gives a handle that is not running back: reset
 * and kept (up to GW_CURLEV_IDLE_EASY), or cleaned up. */
#define GW_CURLEV_IDLE_EASY 64
CURL *gw_curlev_easy_get(struct gw_curlev *m);
void gw_curlev_easy_put(struct gw_curlev *m, CURL *easy);

#endif
