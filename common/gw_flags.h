/*
 * gw_flags: how both daemons read their settings. Every flag has an
 * LLMGW_* environment variable; the environment is applied first, then the
 * command line, so a flag wins over its variable. "--flag value" and
 * "--flag=value" both work; switches (flags without a value) take "1".
 * Messages go to stderr, prefixed with the program's name.
 */
#ifndef GW_FLAGS_H
#define GW_FLAGS_H

#include <stddef.h>

/* Applies one flag's value to the program's configuration: 0, or GW_EINVAL
 * after printing why. */
typedef int (*gw_flags_apply_cb)(void *cfg, const char *flag, const char *value);

struct gw_flags {
    const char *prog;            /* "llmgw-dataplane": the messages' prefix */
    const char *usage;           /* printed on --help and after a usage error */
    const char *const (*env)[2]; /* {"LLMGW_LISTEN", "--listen"}, ... */
    size_t nenv;
    const char *const *switches; /* flags that take no value; NULL-terminated, or NULL */
    gw_flags_apply_cb apply;
    void *cfg;
};

/* Applies the environment (non-empty variables), then argv[first..argc).
 * Returns 0, 1 after printing the usage for --help, or GW_EINVAL after a
 * message. */
int gw_flags_parse(const struct gw_flags *f, int argc, char **argv, int first);

/* An integer from lo to hi; GW_EINVAL after a message naming the flag. */
int gw_flags_num(const char *prog, const char *flag, const char *v, long long lo, long long hi,
                 long long *out);

/* HOST:PORT (or [v6]:PORT) into host (hostlen bytes) and port 0..65535. */
int gw_flags_hostport(const char *prog, const char *flag, const char *v, char *host, size_t hostlen,
                      int *port);

#endif
