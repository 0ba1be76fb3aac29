/*
 * cp_secret_ref: parsing of credential_refs and dispatch to the external
 * backends. The syntax is documented in cp_secret_ref.h and docs/secrets.md.
 */
#include "cp_secret_ref.h"

#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_secret_backend.h"
#include "gw_error.h"

static int parse_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int parse_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return GW_EINVAL;
}

static int is_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int all_in(const char *s, const char *extra)
{
    for (; *s; s++)
        if (!is_alnum((unsigned char)*s) && !strchr(extra, *s))
            return 0;
    return 1;
}

static int has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

/* Vault path segments: non-empty, not "." or "..", printable, no space;
 * each is percent-encoded when the URL is built. */
static int valid_vault_path(const char *p)
{
    if (!*p || has_control(p) || strchr(p, ' ') || strchr(p, '?'))
        return 0;
    const char *s = p;
    for (;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return 0;
        if (!e)
            return 1;
        s = e + 1;
    }
}

int cp_secret_ref_parse(const char *text, struct cp_secret_ref *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!text || !*text)
        return parse_fail(err, errlen, "credential_ref is empty");
    size_t n = strnlen(text, CP_SECRET_REF_MAX + 1);
    if (n > CP_SECRET_REF_MAX)
        return parse_fail(err, errlen, "credential_ref is longer than %d characters",
                          CP_SECRET_REF_MAX);
    if (has_control(text))
        return parse_fail(err, errlen, "credential_ref contains a control character");
    /* Two copies in one allocation: the text as written, then a copy cut
     * into its parts. */
    char *st = malloc(2 * (n + 1));
    if (!st)
        return GW_ENOMEM;
    memcpy(st, text, n + 1);
    char *w = st + n + 1;
    memcpy(w, text, n + 1);
    struct cp_secret_ref r = {.text = st, .storage = st};
    int rc = GW_OK;
    char *colon = strchr(w, ':');
    if (!colon) {
        r.kind = CP_SECRET_BUILTIN;
        r.name = st;
        if (n > CP_SECRET_NAME_MAX || !is_alnum((unsigned char)w[0]) || !all_in(w, "._/-"))
            rc = parse_fail(
                err, errlen,
                "credential_ref '%s' is not a valid secret name: 1 to %d characters "
                "of A-Z a-z 0-9 . _ / - starting with a letter or digit, or a "
                "backend ref (vault:<mount>/<path>#<field>, awssm:<secret-id>[#<field>])",
                text, CP_SECRET_NAME_MAX);
    } else if (strncmp(w, "vault:", 6) == 0) {
        r.kind = CP_SECRET_VAULT;
        char *rest = w + 6, *hash = strchr(rest, '#'), *slash = strchr(rest, '/');
        if (hash)
            *hash = '\0';
        if (!hash || !hash[1])
            rc = parse_fail(err, errlen,
                            "credential_ref '%s': a Vault ref needs a field: "
                            "vault:<mount>/<path>#<field>",
                            text);
        else if (!slash || slash > hash || slash == rest)
            rc = parse_fail(err, errlen,
                            "credential_ref '%s': a Vault ref is vault:<mount>/<path>#<field>",
                            text);
        else {
            *slash = '\0';
            r.mount = rest;
            r.path = slash + 1;
            r.field = hash + 1;
            if (!valid_vault_path(r.mount) || !valid_vault_path(r.path))
                rc = parse_fail(
                    err, errlen,
                    "credential_ref '%s': the Vault mount and path must be '/'-separated "
                    "segments, none empty, '.' or '..', without spaces or '?'",
                    text);
        }
    } else if (strncmp(w, "awssm:", 6) == 0) {
        r.kind = CP_SECRET_AWSSM;
        char *id = w + 6, *hash = strchr(id, '#');
        if (hash) {
            *hash = '\0';
            r.field = hash + 1;
        }
        r.secret_id = id;
        if (!*id || !all_in(id, "/_+=.@:-"))
            rc = parse_fail(err, errlen,
                            "credential_ref '%s': an AWS Secrets Manager secret id is a name or "
                            "ARN of A-Z a-z 0-9 / _ + = . @ : -",
                            text);
        else if (hash && !hash[1])
            rc = parse_fail(err, errlen, "credential_ref '%s': the field after '#' is empty", text);
    } else {
        rc = parse_fail(err, errlen,
                        "credential_ref '%s' names an unknown backend (known: vault:, awssm:; "
                        "a built-in secret name has no ':')",
                        text);
    }
    if (rc != GW_OK) {
        free(st);
        return rc;
    }
    *out = r;
    return GW_OK;
}

void cp_secret_ref_free(struct cp_secret_ref *r)
{
    if (!r)
        return;
    free(r->storage);
    memset(r, 0, sizeof(*r));
}

static const char *env_or_null(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void cp_secret_backend_config_from_env(struct cp_secret_backend_config *c)
{
    memset(c, 0, sizeof(*c));
    c->vault_addr = env_or_null("VAULT_ADDR");
    c->vault_token = env_or_null("VAULT_TOKEN");
    c->vault_namespace = env_or_null("VAULT_NAMESPACE");
    c->aws_region = env_or_null("AWS_REGION");
    if (!c->aws_region)
        c->aws_region = env_or_null("AWS_DEFAULT_REGION");
    c->aws_access_key_id = env_or_null("AWS_ACCESS_KEY_ID");
    c->aws_secret_access_key = env_or_null("AWS_SECRET_ACCESS_KEY");
    c->aws_session_token = env_or_null("AWS_SESSION_TOKEN");
    c->awssm_endpoint = env_or_null("LLMGW_AWSSM_ENDPOINT");
}

int cp_secret_resolve(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                      char **value, size_t *len, char *err, size_t errlen)
{
    *value = NULL;
    *len = 0;
    struct gw_buf v;
    gw_buf_init(&v, CP_SECRET_ANSWER_MAX);
    int rc;
    switch (ref->kind) {
    case CP_SECRET_VAULT:
        rc = cp_secret_vault_fetch(c, ref, &v, err, errlen);
        break;
    case CP_SECRET_AWSSM:
        rc = cp_secret_awssm_fetch(c, ref, &v, err, errlen);
        break;
    default:
        rc = cp_secret_fail(err, errlen, ref, GW_EINVAL,
                            "a built-in secret is read from the store, not resolved here");
        break;
    }
    if (rc == GW_OK && !v.data)
        rc = gw_buf_append(&v, "", 0); /* an empty secret still gets its NUL */
    if (rc != GW_OK) {
        cp_secret_buf_wipe(&v);
        return rc;
    }
    /* Hand over the buffer itself: no further copy of the secret. The bytes
     * past the value (scratch from decoding) are wiped first, since
     * cp_secret_free() only overwrites len + 1. */
    OPENSSL_cleanse(v.data + v.len + 1, v.cap - v.len - 1);
    *value = v.data;
    *len = v.len;
    return GW_OK;
}
