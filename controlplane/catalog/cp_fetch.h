/*
 * cp_fetch: one bounded HTTPS GET of a document the control plane imports
 * (a LiteLLM catalog), with a connect timeout, a total timeout and a
 * ceiling on the body, past which the transfer stops.
 *
 * Closed by default, since whoever can set the URL (an operator token, a
 * flag) would otherwise make the control plane fetch from inside its
 * network: https only; no redirect is followed (a 3xx is an error naming
 * it); and the address actually connected to (after DNS, checked as the
 * socket is opened, so a name that resolves somewhere else later is
 * checked again) must be a public one: loopback, private (RFC 1918,
 * 100.64/10, fc00::/7, where cloud IPv6 metadata lives), link-local
 * (169.254/16 with cloud metadata, fe80::/10) each need to be allowed
 * (the allow bits each fetch is given, from --catalog-fetch-allow),
 * plain http too.
 * Multicast, broadcast and reserved addresses are never fetched from.
 * With a proxy from the environment, the address checked is the proxy's. The same easy-handle setup
 * serves the CLI (cp_fetch_run: blocking) and the admin API (the handle goes to the loop's
 * gw_curlev, and cp_fetch_done reads the outcome).
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

/* What a fetch's allow bits may open beyond https to public addresses. */
#define CP_FETCH_ALLOW_HTTP 0x1u
#define CP_FETCH_ALLOW_LOOPBACK 0x2u
#define CP_FETCH_ALLOW_PRIVATE 0x4u
#define CP_FETCH_ALLOW_LINK_LOCAL 0x8u

/* Parses a comma-separated list of http, loopback, private and link-local
 * (or "" / "none") into *allow; GW_EINVAL naming the bad word in err. */
int cp_fetch_parse_allow(const char *list, unsigned *allow, char *err, size_t errlen);

/* An address's class, for the policy. */
enum cp_fetch_addr {
    CP_ADDR_PUBLIC,
    CP_ADDR_LOOPBACK, /* 127/8, ::1, and the unspecified 0/8 and :: */
    CP_ADDR_PRIVATE,
    CP_ADDR_LINK_LOCAL,
    CP_ADDR_NEVER /* multicast, broadcast, reserved, other families */
};
struct sockaddr;
enum cp_fetch_addr cp_fetch_addr_class(const struct sockaddr *sa);

struct cp_fetch {
    CURL *easy;
    struct gw_buf body; /* what arrived; its ceiling is the size cap */
    int over;           /* the body passed its ceiling: the transfer was stopped */
    char url[512];      /* redacted, for messages */
    char curl_err[CURL_ERROR_SIZE];
    char refused[160]; /* why the policy refused an address ("" when it did not) */
    unsigned allow;    /* CP_FETCH_ALLOW_*: the policy this fetch keeps */
};

/*
 * Prepares f to GET url under the policy allow (CP_FETCH_ALLOW_* bits;
 * 0: https to public addresses only), max_bytes: the body's ceiling (0 for
 * CP_FETCH_MAX_BYTES), timeout_ms (0 for CP_FETCH_TIMEOUT_MS). GW_OK, or
 * GW_EINVAL with a message in err when url is not an https URL (or http,
 * when allowed), GW_ENOMEM. On failure f holds nothing to clean up; on success release it
 * with cp_fetch_cleanup.
 */
int cp_fetch_init(struct cp_fetch *f, const char *url, unsigned allow, size_t max_bytes,
                  long timeout_ms, char *err, size_t errlen) __attribute__((warn_unused_result));
/* The outcome of f's transfer (rc from curl): GW_OK when it answered 2xx
 * within the ceiling; otherwise GW_EIO (or GW_ELIMIT: too large; GW_EINVAL:
 * the policy refused the address it resolved to) with a message naming the
 * redacted URL and the cause. */
int cp_fetch_done(struct cp_fetch *f, CURLcode rc, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Blocking: cp_fetch_init, curl_easy_perform, cp_fetch_done. On GW_OK
 * f->body holds the document (release f with cp_fetch_cleanup either way
 * once init succeeded; on an init failure f is empty and cleanup is safe). */
int cp_fetch_run(struct cp_fetch *f, const char *url, unsigned allow, size_t max_bytes,
                 long timeout_ms, char *err, size_t errlen) __attribute__((warn_unused_result));
void cp_fetch_cleanup(struct cp_fetch *f);

/* url without user, password, query and fragment ("https://host/path"),
 * into out; "(not a URL)" when it does not parse. */
void cp_fetch_redact(const char *url, char *out, size_t outlen);

#endif
