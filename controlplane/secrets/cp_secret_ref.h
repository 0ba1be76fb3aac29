/*
 * cp_secret_ref: what a provider's credential_ref names, and how the
 * external backends resolve it. The one place the ref syntax lives.
 *
 *   name                          the built-in store: the row named `name`,
 *                                 sealed with cp_secrets (the store looks it
 *                                 up; this module only parses the name)
 *   vault:<mount>/<path>#<field>  HashiCorp Vault KV v2: data.data[field] of
 *                                 GET {VAULT_ADDR}/v1/<mount>/data/<path>
 *   awssm:<secret-id>[#<field>]   AWS Secrets Manager GetSecretValue:
 *                                 SecretString, or SecretString's JSON member
 *                                 `field` when given
 *
 * A built-in name is 1 to 128 characters of [A-Za-z0-9._/-] starting with a
 * letter or digit; it has no ':', so any ref with a ':' names a backend.
 * docs/secrets.md describes the formats, the environment and the errors.
 *
 * Resolution is synchronous (libcurl easy, bounded by a connect and a total
 * timeout): call it from the snapshot builder's thread, never from an event
 * loop that serves requests. The daemon calls curl_global_init() once at
 * start-up, before it starts threads. Errors name the ref and the cause and never
 * contain the secret.
 */
#ifndef CP_SECRET_REF_H
#define CP_SECRET_REF_H

#include <stddef.h>

enum cp_secret_kind { CP_SECRET_BUILTIN, CP_SECRET_VAULT, CP_SECRET_AWSSM };

#define CP_SECRET_NAME_MAX 128
#define CP_SECRET_REF_MAX 2048
/* Largest backend answer read (the whole HTTP body). */
#define CP_SECRET_ANSWER_MAX (64 * 1024)

struct cp_secret_ref {
    enum cp_secret_kind kind;
    /* Every string below points into storage owned by the ref. */
    const char *text;      /* the ref as written */
    const char *name;      /* CP_SECRET_BUILTIN: the row name (== text) */
    const char *mount;     /* CP_SECRET_VAULT: the KV v2 mount ("secret") */
    const char *path;      /* CP_SECRET_VAULT: the secret's path under it */
    const char *secret_id; /* CP_SECRET_AWSSM: a name or an ARN */
    const char *field;     /* VAULT: required; AWSSM: NULL when absent */
    char *storage;
};

/*
 * Parses text into *out. On success the caller owns *out and releases it
 * with cp_secret_ref_free(). On failure (GW_EINVAL, with a message in err
 * naming the rule broken; GW_ENOMEM) *out needs no freeing.
 */
int cp_secret_ref_parse(const char *text, struct cp_secret_ref *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void cp_secret_ref_free(struct cp_secret_ref *r);

/*
 * Where the backends are and who we are to them. Strings are borrowed (from
 * the environment or the caller) and must outlive the calls that use them.
 */
struct cp_secret_backend_config {
    const char *vault_addr;            /* VAULT_ADDR: "https://vault:8200" */
    const char *vault_token;           /* VAULT_TOKEN */
    const char *vault_namespace;       /* VAULT_NAMESPACE (Enterprise); NULL: none */
    const char *aws_region;            /* AWS_REGION, else AWS_DEFAULT_REGION */
    const char *aws_access_key_id;     /* AWS_ACCESS_KEY_ID */
    const char *aws_secret_access_key; /* AWS_SECRET_ACCESS_KEY */
    const char *aws_session_token;     /* AWS_SESSION_TOKEN; NULL: none */
    /* LLMGW_AWSSM_ENDPOINT; NULL: https://secretsmanager.<region>.amazonaws.com/ */
    const char *awssm_endpoint;
    long connect_timeout_ms; /* 0: 5000 */
    long timeout_ms;         /* 0: 10000 (the whole exchange) */
};

/* Fills *c from the environment variables named above (getenv pointers:
 * do not change those variables while *c is in use). */
void cp_secret_backend_config_from_env(struct cp_secret_backend_config *c);

/*
 * Fetches the value an external ref names. On success *value is malloc'd,
 * *len bytes plus a NUL, owned by the caller, released with
 * cp_secret_free(*value, *len) (cp_secrets.h), which overwrites it.
 *
 * Errors, each with a message in err that names the ref and the cause:
 * GW_ENOTFOUND  the secret, its version or its field does not exist (Vault
 *               404, ResourceNotFoundException, no such field);
 * GW_EINVAL     a built-in ref (the store resolves those), missing or
 *               refused configuration or credentials (Vault 403, AWS
 *               access or signature errors), an answer that is not what
 *               the API documents, a field that is not a string;
 * GW_EIO        the backend cannot be reached, timed out, or answered 5xx;
 * GW_ELIMIT     the answer passed CP_SECRET_ANSWER_MAX;
 * GW_ENOMEM.
 * On failure *value is NULL.
 */
int cp_secret_resolve(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                      char **value, size_t *len, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
