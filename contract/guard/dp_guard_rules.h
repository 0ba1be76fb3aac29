/*
 * dp_guard_rules: the prompt-injection rule engine of the guard phase
 * (docs/guardrails.md). A pure module: rules in (the snapshot's
 * "guard_rules", or the built-in defaults), a verdict on a piece of text
 * out; it knows nothing of requests, policies or the exchange, which
 * decides what a match means (min_severity, log or block).
 *
 * Text is matched in a normalized form, so that the usual disguises of the
 * same words meet the same patterns:
 *  - letters are folded to lower-case ASCII: ASCII, Latin-1 and Latin
 *    Extended-A letters to their base ("É" "e", "ß" "ss"), homoglyphs from
 *    Cyrillic and Greek ("і" "i", "ο" "o"), full-width forms, mathematical
 *    alphanumerics ("𝐢𝐠𝐧𝐨𝐫𝐞"), letterlike symbols, circled, squared and
 *    regional-indicator letters;
 *  - invisible characters are removed: zero-width spaces and joiners,
 *    bidirectional controls, the soft hyphen, variation selectors, tag
 *    characters, combining marks ("ig<U+200B>nore" is "ignore"); a text
 *    that has format characters (all of these but the marks and variation
 *    selectors) is also matched in a second form where they separate words
 *    ("ignore<U+200B>all" is "ignoreall" in the first, "ignore all" in it;
 *    a text that uses them both ways at once escapes both forms);
 *  - every run of anything else (punctuation, spaces, other scripts,
 *    emoji, bytes that are not UTF-8) becomes one space;
 *  - letters spaced out one by one ("i g n o r e", "i.g.n.o.r.e": a run of
 *    at least three one-character words) are joined into a word; where
 *    the gaps in such a run differ ("i g n o r e  a l l"), the narrowest
 *    join letters first, then the narrowest of what is left, and so on;
 *  - the result is padded with a space at each end: " ignore all ".
 * A "phrase" rule matches when its own normalized form (" ignore your
 * programming ") occurs in it; a "regex" rule is a POSIX extended regular
 * expression (case-insensitive, no back-references) searched in it.
 *
 * Base64: every run of at least 24 base64 symbols (standard or URL-safe,
 * '=' padding optional; a run may go on across line breaks when the line
 * holds whole quanta, as MIME wraps it) in the original text that decodes
 * to mostly printable UTF-8 (nine code points in ten) is decoded,
 * normalized and matched as well: one level (a blob inside a blob is not
 * decoded), at most DP_GUARD_MAX_BLOBS blobs per text (the first ones).
 *
 * Bounds: a scan reads at most the first DP_GUARD_MAX_SCAN bytes of a text;
 * what lies past them is not scanned (the caller knows the length and may
 * say so). The text is normalized once; one expression made of every rule
 * runs on it (and once on the decoded blobs, when there are any), and only
 * when that matches do the rules run one by one, to name the match. An
 * expression is at most 1 KiB and 4096 nodes once its repetitions are
 * expanded; one with an unbounded repetition of anything but literal
 * characters (".*", "[a-z]+") runs on its own, in a form glibc matches in
 * one pass (an unanchored search retries from every place a match could
 * start, quadratic in the text for such an expression), slower than the
 * others on ordinary text: bounded repetitions ({0,80}) are the fast way
 * to write "a few words".
 *
 * Threads: a compiled set may be scanned from any number of threads at
 * once. It is immutable but for copies of the combined expression, made
 * the first time a thread needs one (up to 8, because glibc serializes the
 * threads that run one compiled expression); the first copy is made with
 * the set.
 *
 * Memory: glibc's matcher keeps the states it builds in each compiled
 * expression for the set's lifetime, so a set grows with the variety of
 * texts it has seen, ever more slowly: the defaults, about 0.8 MB compiled,
 * held 12 MB more after 20,000 texts made of their own words and 16 MB
 * after 100,000 (a few hundred KB after ordinary or random text).
 */
#ifndef DP_GUARD_RULES_H
#define DP_GUARD_RULES_H

#include <jansson.h>
#include <stddef.h>

struct gw_buf;
struct dp_guard_rules;

enum dp_guard_severity { DP_GUARD_LOW, DP_GUARD_MEDIUM, DP_GUARD_HIGH };

#define DP_GUARD_MAX_SCAN ((size_t)64 * 1024) /* bytes of each text scanned */
#define DP_GUARD_MAX_BLOBS 16                 /* base64 blobs matched per text */
#define DP_GUARD_MAX_PATTERN 1024             /* bytes of a rule's pattern */

/* "low", "medium", "high"; and back (-1 for anything else). */
const char *dp_guard_severity_name(enum dp_guard_severity s);
int dp_guard_severity_parse(const char *s);

/*
 * Compiles a JSON array of rules, each an object {"id", "severity",
 * "description", "kind": "phrase" | "regex", "pattern"} (other members are
 * ignored, so the file's "example" and "near_miss" may stay). The id is
 * [a-z0-9][a-z0-9_-]{0,62}, unique in the array; the pattern 1 to
 * DP_GUARD_MAX_PATTERN bytes: a phrase with some letter or digit, an
 * expression that compiles (regcomp with REG_EXTENDED | REG_ICASE |
 * REG_NOSUB), holds no back-reference and is at most 4096 nodes once its
 * repetitions are expanded ("(a{0,100}){0,100}" is not). The caller owns
 * the result (dp_guard_rules_free); arr is not kept. NULL on failure, with
 * a message in err naming the rule and the field, e.g.
 * "guard_rules[3].pattern: does not compile: Unmatched ( or \( (rule 'x')".
 */
struct dp_guard_rules *dp_guard_rules_compile(const json_t *arr, char *err, size_t errlen);
void dp_guard_rules_free(struct dp_guard_rules *r);
size_t dp_guard_rules_count(const struct dp_guard_rules *r);

/*
 * One rule's pattern checked on its own, as dp_guard_rules_compile checks
 * it (for the admin API, which names the field itself): 0, or -1 with a
 * message without a field name in err ("does not compile: ...", "may not
 * hold a back-reference (\1)"). kind is "phrase" or "regex".
 */
int dp_guard_pattern_check(const char *kind, const char *pattern, char *err, size_t errlen);

/* 1 when id is a rule's id: [a-z0-9][a-z0-9_-]{0,62}. */
int dp_guard_rule_id_valid(const char *id);

/*
 * The built-in defaults: common/guard_rules.json, compiled into the binary
 * at build time (its "rules" member), compiled on first use (thread-safe)
 * and never freed. NULL only when the embedded file is broken, which
 * tests/unit/contract/guard_rules_test.c rules out.
 */
const struct dp_guard_rules *dp_guard_rules_default(void);
/* The embedded file itself (NUL-terminated, *len without the NUL): the
 * control plane seeds its guard_rules table from it. */
const char *dp_guard_rules_default_json(size_t *len);

/*
 * Appends the normalized form of the len bytes at text (above) to out: at
 * most len + 2 bytes, NUL-terminated as gw_buf always is. GW_OK, or
 * GW_ENOMEM / GW_ELIMIT (out's ceiling) with out as it was.
 */
int dp_guard_normalize(const char *text, size_t len, struct gw_buf *out)
    __attribute__((warn_unused_result));

struct dp_guard_match {
    const char *rule_id; /* owned by the rule set: valid while it lives */
    enum dp_guard_severity severity;
    int via_base64; /* 1: the rule matched only a decoded base64 blob */
};

/*
 * Scans the first DP_GUARD_MAX_SCAN bytes of text (UTF-8 or not: bytes
 * that are not UTF-8 separate words like punctuation). 1 and *m the match
 * of highest severity, in the text itself or in a decoded blob (of rules
 * of equal severity, the first in the array; via_base64 is 1 when that
 * rule matched only inside a blob); 0 when no rule matches, *m untouched;
 * GW_ENOMEM when memory runs out (the caller cannot tell whether the text
 * is clean). Every match is reported whatever its severity: the caller
 * applies its min_severity. r NULL or empty: 0.
 */
int dp_guard_scan(const struct dp_guard_rules *r, const char *text, size_t len,
                  struct dp_guard_match *m) __attribute__((warn_unused_result));

#endif
