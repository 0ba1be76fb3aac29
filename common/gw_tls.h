/*
 * gw_tls: a server-side TLS context for gw_http's listeners (the data
 * plane's API port, the control plane's admin port), reloadable while
 * serving.
 *
 * The context is built from a PEM certificate chain and a PEM private key:
 * TLS 1.2 and 1.3 only, no renegotiation, ALPN "http/1.1" (the servers
 * speak HTTP/1.1 only: a client offering only h2 is refused in the
 * handshake). gw_tls_reload reads the same files again (a renewed
 * certificate): new connections get the new context, open ones keep the
 * one they started with; a reload that fails keeps the current context.
 *
 * Thread-safety: gw_tls_ssl_new and gw_tls_reload may be called from any
 * thread (the workers accept, the main thread reloads on SIGHUP).
 */
#ifndef GW_TLS_H
#define GW_TLS_H

#include <stddef.h>

typedef struct ssl_st SSL;
struct gw_tls;

/* NULL with a message in err when a file cannot be read or the key does
 * not match the certificate. */
struct gw_tls *gw_tls_new(const char *cert_file, const char *key_file, char *err, size_t errlen);
/* Reads the files again (SIGHUP). Logs the outcome: "TLS certificate
 * reloaded" with its subject and expiry, or an error saying the current
 * one stays. GW_OK or GW_EINVAL. */
int gw_tls_reload(struct gw_tls *t);
/* A new server-side SSL for one accepted connection; NULL: out of memory. */
SSL *gw_tls_ssl_new(struct gw_tls *t);
/* Logs msg (info) with the current certificate's subject and expiry. */
void gw_tls_log(struct gw_tls *t, const char *msg);
void gw_tls_free(struct gw_tls *t);

#endif
