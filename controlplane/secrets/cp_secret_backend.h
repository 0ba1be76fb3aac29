/*
 * Internal to controlplane/secrets/: the backends behind cp_secret_resolve()
 * and the glue they share (one synchronous HTTP exchange, JSON member
 * lookup into a wiped buffer, error messages that name the ref).
 */
#ifndef CP_SECRET_BACKEND_H
#define CP_SECRET_BACKEND_H

#include <curl/curl.h>
#include <stddef.h>

#include "cp_secret_ref.h"
#include "gw_buf.h"

int cp_secret_vault_fetch(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                          struct gw_buf *value, char *err, size_t errlen)
    __attribute__((warn_unused_result));
int cp_secret_awssm_fetch(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                          struct gw_buf *value, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Writes "secret ref '<ref>': <message>" into err and returns rc. */
int cp_secret_fail(char *err, size_t errlen, const struct cp_secret_ref *ref, int rc,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/*
 * One request, synchronously: method "GET" or "POST" (body sent as is),
 * headers owned by the caller. The answer's body goes to *answer (bounded by
 * CP_SECRET_ANSWER_MAX), its status to *status. Transport failures return
 * GW_EIO / GW_ELIMIT / GW_ENOMEM with the message written through
 * cp_secret_fail(); any HTTP status is GW_OK here.
 */
int cp_secret_http(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                   const char *backend, const char *method, const char *url,
                   const struct curl_slist *headers, const char *body, size_t body_len,
                   long *status, struct gw_buf *answer, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * Walks keys[0..nkeys) down nested objects of the JSON text s[0..n) and
 * puts the string found there, decoded, into out, which must be empty.
 * GW_ENOTFOUND when a key
 * is absent (or an object on the way is null), GW_EINVAL when s is not JSON
 * or the value is not a string, GW_ENOMEM/GW_ELIMIT.
 */
int cp_secret_json_string(const char *s, size_t n, const char *const *keys, size_t nkeys,
                          struct gw_buf *out) __attribute__((warn_unused_result));

/* Overwrites a buffer's whole allocation, then frees it. */
void cp_secret_buf_wipe(struct gw_buf *b);
/* Overwrites every string of a header list, then frees it. */
void cp_secret_slist_wipe(struct curl_slist *l);
/* Appends a short, printable excerpt of an error text (a backend's own
 * message) to err-bound storage: control bytes dropped, at most max bytes. */
void cp_secret_excerpt(char *dst, size_t dstlen, const char *s, size_t n);

#endif
