/*
 * cp_authfail: failed admin authentications, counted per client address.
 *
 * Each address has a window (CP_AUTHFAIL_WINDOW_MS) and a budget of
 * failures in it (CP_AUTHFAIL_MAX). Once an address has spent its budget,
 * its requests are refused (429) until the window ends without a token
 * lookup, so guessing costs the database nothing and the log a line per
 * window: the first CP_AUTHFAIL_LOGGED failures of a window are logged
 * one by one, then one line says the address is limited.
 *
 * The table is small and fixed (CP_AUTHFAIL_SLOTS addresses): a new
 * address takes the slot whose window is oldest. An attacker with many
 * addresses can push one out of the table early, which only gives that one
 * a fresh budget sooner. The bootstrap token is still accepted from a
 * limited address (it is checked without the database), so the operator
 * is never locked out by a neighbour behind the same proxy.
 *
 * Single-threaded: the admin API's event loop owns it.
 */
#ifndef CP_AUTHFAIL_H
#define CP_AUTHFAIL_H

#include <stdint.h>

#define CP_AUTHFAIL_SLOTS 256
#define CP_AUTHFAIL_MAX 20
#define CP_AUTHFAIL_LOGGED 5
#define CP_AUTHFAIL_WINDOW_MS 60000
#define CP_AUTHFAIL_ADDR_MAX 64

struct cp_authfail_slot {
    char addr[CP_AUTHFAIL_ADDR_MAX];
    int64_t window_ms; /* when this address's window began */
    int fails;         /* failures in the window */
};

struct cp_authfail {
    struct cp_authfail_slot slots[CP_AUTHFAIL_SLOTS];
};

/* How a failure should be logged. */
enum cp_authfail_log { CP_AUTHFAIL_LOG, CP_AUTHFAIL_LOG_LIMITED, CP_AUTHFAIL_QUIET };

/* 0 when addr may try a token now; else the milliseconds until it may
 * again (its budget is spent). */
int64_t cp_authfail_blocked(const struct cp_authfail *t, const char *addr, int64_t now_ms);

/* Counts a failure from addr: whether to log it (each of the first
 * CP_AUTHFAIL_LOGGED in a window), log that the address is now limited
 * (the failure that spends the budget), or say nothing. */
enum cp_authfail_log cp_authfail_record(struct cp_authfail *t, const char *addr, int64_t now_ms);

#endif
