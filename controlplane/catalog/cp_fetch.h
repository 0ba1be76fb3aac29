/*
 * cp_fetch: one bounded HTTP(S) GET of a document the control plane imports
 * (a LiteLLM catalog): http and https only (redirects too, at most 3),
 * a connect timeout and a total timeout, and a ceiling on the body, past
 * which the transfer stops. The same easy-handle setup serves the CLI
 * (cp_fetch_run: blocking) and the admin API (the handle goes to the
 * loop's gw_curlev, and cp_fetch_done reads the outcome).
 *
 * Messages name the URL without its user, password, query or fragment
 * (cp_fetch_redact): an operator may put a token there.
 */
#ifndef CP_FETCH_H
#define CP_FETCH_H

#include <curl/curl.h>
#include <stddef.h>

#include "gw_buf.h"

#define CP_FETCH_MAX_BYTES (16u << 20) /* the body's ceiling */
#define CP_FETCH_CONNECT_MS 10000L
#define CP_FETCH_TIMEOUT_MS 60000L

struct cp_fetch {
    CURL *easy;
    struct gw_buf body; /* what arrived; its ceiling is the size cap */
    int over;           /* the body passed its ceiling: the transfer was stopped */
    char url[512];      /* redacted, for messages */
    char curl_err[CURL_ERROR_SIZE];
};

/*
 * Prepares f to GET url (max_bytes: the body's ceiling; 0 for
 * CP_FETCH_MAX_BYTES; timeout_ms 0 for CP_FETCH_TIMEOUT_MS). GW_OK, or
 * GW_EINVAL with a message in err when url is not an http or https URL,
 * GW_ENOMEM. On failure f holds nothing to clean up; on success release it
 * with cp_fetch_cleanup.
 */
int cp_fetch_init(struct cp_fetch *f, const char *url, size_t max_bytes, long timeout_ms, char *err,
                  size_t errlen) __attribute__((warn_unused_result));
/* The outcome of f's transfer (rc from curl): GW_OK when it answered 2xx
 * within the ceiling; otherwise GW_EIO (or GW_ELIMIT: too large) with a
 * message naming the redacted URL and the cause. */
int cp_fetch_done(struct cp_fetch *f, CURLcode rc, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Blocking: cp_fetch_init, curl_easy_perform, cp_fetch_done. On GW_OK
 * f->body holds the document (release f with cp_fetch_cleanup either way
 * once init succeeded; on an init failure f is empty and cleanup is safe). */
int cp_fetch_run(struct cp_fetch *f, const char *url, size_t max_bytes, long timeout_ms, char *err,
                 size_t errlen) __attribute__((warn_unused_result));
void cp_fetch_cleanup(struct cp_fetch *f);

/* url without user, password, query and fragment ("https://host/path"),
 * into out; "(not a URL)" when it does not parse. */
void cp_fetch_redact(const char *url, char *out, size_t outlen);

#endif
