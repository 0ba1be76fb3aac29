/*
 * Master-key rotation (llmgw-controlplane rotate-master-key): rewraps every
 * builtin secret from old_key to new_key in ONE transaction that locks the
 * rows, bumps each rewrapped row's version, writes one audit row (resource
 * "secrets", id "*master-key*", before/after: the key ids and the names,
 * never values) and bumps the configuration version. Rows already sealed
 * under new_key are skipped (a re-run after a crash is safe). The text
 * judgements kept (cp_judgement.h) is rewrapped in the same transaction
 * (*judgements: the rows). If any row fails to open with old_key, nothing
 * is changed and msg names the row.
 */
#ifndef CP_ROTATE_H
#define CP_ROTATE_H

#include <stddef.h>

struct cp_db;
struct cp_master_key;

int cp_rotate_master_key(struct cp_db *db, const struct cp_master_key *old_key,
                         const struct cp_master_key *new_key, int *rewrapped, int *skipped,
                         int *judgements, char *msg, size_t msglen)
    __attribute__((warn_unused_result));

#endif
