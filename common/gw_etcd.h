/*
 * gw_etcd: a small blocking client for etcd v3 through its JSON gateway
 * (etcd 3.4: POST /v3/...), over libcurl easy handles. It is what the
 * control plane's fleet thread (controlplane/fleet/cp_etcd.h) uses for its
 * lease, its leader election and the blobs the replicas share; it never
 * runs on an event loop: every call blocks for at most the client's
 * timeout per endpoint tried.
 *
 * The gateway speaks proto3 JSON: keys and values are base64, int64 values
 * are strings, and default values are left out (no "succeeded" when a txn
 * failed, no "kvs" when a range found nothing, no "TTL" when a keepalive
 * names a lease that has expired). The encode/decode helpers below are
 * public so the unit tests can check them without an etcd.
 *
 * Endpoints are tried in turn: a call goes to the endpoint that answered
 * last, and moves to the next one when it cannot reach it (connect failure,
 * timeout, an HTTP 502/503/504 or a body that is not etcd's). An error that
 * etcd itself answered (a lease not found, a malformed request) is not
 * retried elsewhere: another member would answer the same.
 *
 * Errors: every verb returns GW_OK or
 *   GW_EIO    no endpoint could be reached (err->kind GW_ETCD_UNREACHABLE)
 *   GW_EINVAL etcd answered with an error, or an answer it cannot read
 *             (GW_ETCD_REFUSED with etcd's gRPC code, or GW_ETCD_BADREPLY)
 *   GW_ENOMEM out of memory (GW_ETCD_NOMEM)
 * and fills err (when not NULL) with the kind, the endpoint and a message.
 *
 * Thread-safety: one client per thread. curl_global_init must have run.
 */
#ifndef GW_ETCD_H
#define GW_ETCD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gw_buf;

#define GW_ETCD_MAX_ENDPOINTS 8
/* A ceiling on one answer (a range over a prefix included). */
#define GW_ETCD_ANSWER_MAX (8u << 20)

enum gw_etcd_kind {
    GW_ETCD_NONE = 0,
    GW_ETCD_UNREACHABLE, /* no endpoint answered: etcd is down or cut off */
    GW_ETCD_REFUSED,     /* etcd answered with an error ({"error","message","code"}) */
    GW_ETCD_BADREPLY,    /* an answer that is not what the call expects */
    GW_ETCD_NOMEM,
};

struct gw_etcd_err {
    enum gw_etcd_kind kind;
    int code;         /* GW_ETCD_REFUSED: etcd's gRPC status code (5: not found) */
    long http_status; /* the last HTTP status seen (0: none) */
    char endpoint[128];
    char message[256];
};

/* One key-value pair as etcd holds it. key and value are decoded and
 * NUL-terminated (value may hold other NULs: use value_len). */
struct gw_etcd_kv {
    char *key;
    char *value;
    size_t value_len;
    int64_t create_revision, mod_revision, version, lease;
};

struct gw_etcd_range {
    struct gw_etcd_kv *kvs;
    size_t n;
    int64_t revision; /* the store's revision the answer was read at */
};

/* A txn "create if absent, else read": succeeded is 1 when key was absent
 * and has been put; else kv (when found) is what the key holds now. */
struct gw_etcd_txn {
    int succeeded;
    int found;
    struct gw_etcd_kv kv;
    int64_t revision;
};

struct gw_etcd;

/* A client for endpoints: a comma-separated list of http://host:port (a
 * bare host:port gets http://), at most GW_ETCD_MAX_ENDPOINTS. timeout_ms
 * bounds each call on each endpoint tried (connecting included). NULL with
 * a message in err for an empty or malformed list, or no memory. */
struct gw_etcd *gw_etcd_new(const char *endpoints, long timeout_ms, char *err, size_t errlen);
void gw_etcd_free(struct gw_etcd *c);
/* TLS to https:// endpoints: ca_file (PEM roots that verify etcd's
 * certificate; NULL: the system's), and a client certificate and key
 * (both or neither: etcd's --client-cert-auth). The paths are read at each
 * new connection. GW_OK, GW_ENOMEM, or GW_EINVAL when only one of cert
 * and key is given. The server's certificate and name are always verified. */
int gw_etcd_set_tls(struct gw_etcd *c, const char *ca_file, const char *cert_file,
                    const char *key_file) __attribute__((warn_unused_result));
size_t gw_etcd_endpoint_count(const struct gw_etcd *c);
const char *gw_etcd_endpoint(const struct gw_etcd *c, size_t i);

/* Leases. grant: a new lease of ttl_s seconds (etcd's minimum is 2) in
 * *id. keepalive: renews it; *ttl_s receives the TTL granted, 0 when the
 * lease has expired or never existed (etcd answers that with no error).
 * revoke: ends it now (its keys are deleted); an unknown lease is GW_OK. */
int gw_etcd_lease_grant(struct gw_etcd *c, int64_t ttl_s, int64_t *id, struct gw_etcd_err *err)
    __attribute__((warn_unused_result));
int gw_etcd_lease_keepalive(struct gw_etcd *c, int64_t id, int64_t *ttl_s, struct gw_etcd_err *err)
    __attribute__((warn_unused_result));
int gw_etcd_lease_revoke(struct gw_etcd *c, int64_t id, struct gw_etcd_err *err)
    __attribute__((warn_unused_result));

/* Puts key = value (len bytes), bound to lease (0: none). */
int gw_etcd_put(struct gw_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                struct gw_etcd_err *err) __attribute__((warn_unused_result));

/* Reads key, or with prefix set every key starting with key. *out is
 * filled (free with gw_etcd_range_free) on GW_OK only. */
int gw_etcd_get(struct gw_etcd *c, const char *key, int prefix, struct gw_etcd_range *out,
                struct gw_etcd_err *err) __attribute__((warn_unused_result));
void gw_etcd_range_free(struct gw_etcd_range *r);

/* Deletes key (or, with prefix, every key under it); *deleted (may be
 * NULL) receives how many. */
int gw_etcd_delete(struct gw_etcd *c, const char *key, int prefix, int64_t *deleted,
                   struct gw_etcd_err *err) __attribute__((warn_unused_result));

/* The election primitive: one txn comparing key's create_revision with 0;
 * on success it puts key = value bound to lease, on failure it reads key.
 * *out is filled on GW_OK (free with gw_etcd_txn_free). */
int gw_etcd_create_or_get(struct gw_etcd *c, const char *key, const void *value, size_t len,
                          int64_t lease, struct gw_etcd_txn *out, struct gw_etcd_err *err)
    __attribute__((warn_unused_result));
void gw_etcd_txn_free(struct gw_etcd_txn *t);

/* A short description of err ("unreachable: ...", "etcd error 5: ...")
 * into buf. Returns buf. */
const char *gw_etcd_strerror(const struct gw_etcd_err *err, char *buf, size_t len);

/* --- The JSON encoding, public for the unit tests --- */

/* The range_end that makes [key, end) the keys starting with key: key with
 * its last byte that is not 0xff incremented, the rest dropped ("a/" ->
 * "a0"); "\0" (every key) when there is none. *end is malloc'd. */
int gw_etcd_prefix_end(const char *key, char **end, size_t *len)
    __attribute__((warn_unused_result));
/* An int64 that proto3 JSON sends as a string (or, leniently, a number);
 * absent is 0. GW_EINVAL for anything else. */
int gw_etcd_json_int64(const json_t *obj, const char *name, int64_t *out)
    __attribute__((warn_unused_result));
/* Decodes one kv object of a range answer into kv (free with
 * gw_etcd_kv_free). GW_EINVAL naming nothing: the caller reports. */
int gw_etcd_kv_decode(const json_t *obj, struct gw_etcd_kv *kv) __attribute__((warn_unused_result));
void gw_etcd_kv_free(struct gw_etcd_kv *kv);
/* Reads an answer body: GW_OK with *root (new reference) for an object
 * that is not an error, GW_EINVAL with err filled (REFUSED with etcd's code
 * and message, or BADREPLY). A keepalive answer's {"result":{...}} wrapper
 * and a streamed {"error":{...}} are unwrapped. */
int gw_etcd_answer_parse(const char *body, size_t len, json_t **root, struct gw_etcd_err *err)
    __attribute__((warn_unused_result));

#endif
