/* Clocks: monotonic for durations, realtime for timestamps in records. */
#ifndef GW_TIME_H
#define GW_TIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t gw_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t gw_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
