/* The retry / failover / give-up decision (dp_decide.h). */
#include <stdlib.h>
#include <string.h>

#include "dp_decide.h"

int64_t dp_retry_after_us(const char *v)
{
    if (!v || !v[0] || v[strspn(v, "0123456789.")] != '\0')
        return -1;
    double s = strtod(v, NULL);
    return s < 0 || s > 86400 ? -1 : (int64_t)(s * 1e6);
}

int64_t dp_backoff_us(long base_ms, int tries, uint64_t random)
{
    int64_t step = (int64_t)base_ms * 1000;
    for (int i = 1; i < tries && step < DP_MAX_BACKOFF_US; i++)
        step *= 2;
    if (step > DP_MAX_BACKOFF_US)
        step = DP_MAX_BACKOFF_US;
    if (step < 0)
        step = 0;
    return step / 2 + (int64_t)(random % (uint64_t)(step / 2 + 1));
}

struct dp_decision dp_decide(const struct dp_failed *f, uint64_t random)
{
    struct dp_decision d = {DP_NEXT_GIVE_UP, 0};
    if (f->budget_out || f->now_us >= f->deadline_us) {
        d.next = DP_NEXT_BUDGET;
        return d;
    }
    if (canon_failure_retries(f->failure) &&
        f->tries <= (f->last ? DP_RETRIES_LAST : DP_RETRIES_MIDDLE)) {
        int64_t delay = dp_backoff_us(f->retry_base_ms, f->tries, random);
        int64_t ra = dp_retry_after_us(f->retry_after);
        /* A provider that asks for longer than we would ever wait is left
         * for the next candidate, not retried early. */
        if (ra <= DP_MAX_RETRY_AFTER_US) {
            if (ra > delay)
                delay = ra;
            if (f->now_us + delay < f->deadline_us) {
                d.next = DP_NEXT_RETRY;
                d.delay_us = delay;
                return d;
            }
        }
    }
    if (canon_failure_advances(f->failure) && !f->last)
        d.next = DP_NEXT_ADVANCE;
    return d;
}
