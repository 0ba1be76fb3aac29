/* GET /v1/admin/health (cp_health.c says what it reports). */
#ifndef CP_HEALTH_H
#define CP_HEALTH_H

#include "cp_call.h"

void cp_health_handle(struct cp_call *c);

#endif
