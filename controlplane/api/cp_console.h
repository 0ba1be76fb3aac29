/*
 * cp_console: the operator web console's assets (controlplane/console/,
 * docs/console.md), served at /console/ on the admin listener.
 *
 * The assets are compiled in (controlplane/embed_dir.cmake writes
 * cp_console_files at build time), so the console needs nothing at run time
 * and can never differ from the binary it came with. They are public code
 * and need no token; everything they show comes from the admin API, which
 * does. Every answer carries a strict Content-Security-Policy (scripts,
 * styles and fetches from this origin only, no inline script, no framing).
 *
 * A developer may serve the same names from a folder on disk instead
 * (--console-dir), read on every request: edit, reload, no rebuild.
 */
#ifndef CP_CONSOLE_H
#define CP_CONSOLE_H

#include <stddef.h>

struct cp_call;

/* One embedded asset. The table ends with a row whose name is NULL. */
struct cp_console_file {
    const char *name; /* "index.html", "app.js", ... (no '/') */
    const unsigned char *data;
    size_t len;
};
extern const struct cp_console_file cp_console_files[];

/* Whether path is the console's (/console or under /console/). */
int cp_console_path(const char *path);

/* Answers a console path: /console → 308 to /console/; /console/ →
 * index.html; /console/NAME → that asset; anything else 404. GET only
 * (405 otherwise). dir: serve from that folder instead of the
 * embedded table (NULL: embedded). */
void cp_console_serve(struct cp_call *c, const char *dir);

/* The content type of an asset name by its suffix; NULL for a name the
 * console may not serve. */
const char *cp_console_type(const char *name);

#endif
