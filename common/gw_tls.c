#include "gw_tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"
#include "gw_log.h"

struct gw_tls {
    pthread_mutex_t lock; /* guards ctx: swapped by a reload */
    SSL_CTX *ctx;
    char *cert_file, *key_file;
};

/* ALPN: HTTP/1.1 is all these servers speak. */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    static const unsigned char h11[] = "\x08http/1.1";
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, h11, sizeof(h11) - 1, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static void openssl_error(const char *what, const char *path, char *err, size_t errlen)
{
    char e[256] = "";
    unsigned long code = ERR_get_error();
    if (code)
        ERR_error_string_n(code, e, sizeof(e));
    ERR_clear_error();
    snprintf(err, errlen, "%s '%s': %s", what, path, e[0] ? e : "cannot be read");
}

static SSL_CTX *build(const char *cert, const char *key, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "TLS: out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        openssl_error("TLS certificate", cert, err, errlen);
    } else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        unsigned long code = ERR_peek_last_error();
        if (ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH) {
            ERR_clear_error();
            snprintf(err, errlen, "TLS key '%s' does not match the certificate '%s'", key, cert);
        } else {
            openssl_error("TLS key", key, err, errlen);
        }
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        snprintf(err, errlen, "TLS key '%s' does not match the certificate '%s'", key, cert);
    } else {
        return ctx;
    }
    SSL_CTX_free(ctx);
    return NULL;
}

struct gw_tls *gw_tls_new(const char *cert_file, const char *key_file, char *err, size_t errlen)
{
    struct gw_tls *t = calloc(1, sizeof(*t));
    if (t)
        pthread_mutex_init(&t->lock, NULL);
    if (!t || !(t->cert_file = strdup(cert_file)) || !(t->key_file = strdup(key_file))) {
        snprintf(err, errlen, "TLS: out of memory");
        gw_tls_free(t);
        return NULL;
    }
    t->ctx = build(cert_file, key_file, err, errlen);
    if (!t->ctx) {
        gw_tls_free(t);
        return NULL;
    }
    return t;
}

int gw_tls_reload(struct gw_tls *t)
{
    char err[512];
    SSL_CTX *ctx = build(t->cert_file, t->key_file, err, sizeof(err));
    if (!ctx) {
        gw_logf(GW_LOG_ERROR, "TLS reload failed; keeping the current certificate", "{s:s}",
                "error", err);
        return GW_EINVAL;
    }
    pthread_mutex_lock(&t->lock);
    SSL_CTX *old = t->ctx;
    t->ctx = ctx;
    pthread_mutex_unlock(&t->lock);
    SSL_CTX_free(old); /* connections made from it hold their own references */
    gw_tls_log(t, "TLS certificate reloaded");
    return GW_OK;
}

SSL *gw_tls_ssl_new(struct gw_tls *t)
{
    pthread_mutex_lock(&t->lock);
    SSL *ssl = SSL_new(t->ctx);
    pthread_mutex_unlock(&t->lock);
    return ssl;
}

void gw_tls_log(struct gw_tls *t, const char *msg)
{
    char out[400] = "";
    size_t outlen = sizeof(out);
    pthread_mutex_lock(&t->lock);
    X509 *x = SSL_CTX_get0_certificate(t->ctx);
    if (x) {
        char subject[256] = "";
        X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof(subject));
        char until[64] = "";
        BIO *b = BIO_new(BIO_s_mem());
        if (b && ASN1_TIME_print(b, X509_get0_notAfter(x)) == 1) {
            int n = BIO_read(b, until, (int)sizeof(until) - 1);
            until[n > 0 ? n : 0] = '\0';
        }
        BIO_free(b);
        snprintf(out, outlen, "%s, valid until %s", subject, until);
    }
    pthread_mutex_unlock(&t->lock);
    gw_logf(GW_LOG_INFO, msg, "{s:s,s:s}", "certificate", out, "file", t->cert_file);
}

void gw_tls_free(struct gw_tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx); /* NULL is a no-op */
    pthread_mutex_destroy(&t->lock);
    free(t->cert_file);
    free(t->key_file);
    free(t);
}
