/* Control-plane settings from the command line and the environment. */
#ifndef CP_CONFIG_H
#define CP_CONFIG_H

enum cp_command { CP_CMD_SERVE, CP_CMD_MIGRATE, CP_CMD_ROTATE_MASTER_KEY };

struct cp_listen {
    char host[256];
    int port;
};

struct cp_config {
    enum cp_command command;
    const char *database_url; /* a libpq conninfo string or URI; may hold a password:
                                 never logged */
    struct cp_listen admin;   /* the admin REST API */
    struct cp_listen grpc;    /* the Watch/Report server (parsed and kept for it) */
    const char *admin_token;  /* LLMGW_ADMIN_TOKEN (environment only); NULL when unset */
};

/* Fills cfg from defaults, then LLMGW_* variables, then argv (an optional
 * subcommand, "serve" or "migrate", then flags). The strings point into
 * argv or the environment. Returns 0, or GW_EINVAL after printing a message
 * naming the flag; 1 after --help. */
int cp_config_parse(struct cp_config *cfg, int argc, char **argv);

#endif
