/* clock.c — monotonic condition variables and deadlines (see clock.h). */
#include "clock.h"

int tw_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

struct timespec tw_mono_after(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)seconds;
    t.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}
