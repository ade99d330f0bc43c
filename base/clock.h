/* clock.h — timed waits on the monotonic clock, for the threads that sleep until a deadline or a signal
 * (the event writer's flusher, the server's change wait and connection watchdog).
 * Owns: a condition variable whose timed waits count on CLOCK_MONOTONIC (a wall-clock step neither
 * stretches nor cuts them short) and the absolute deadline such a wait takes. */
#ifndef TW_CLOCK_H
#define TW_CLOCK_H

#include <pthread.h>
#include <time.h>

/* Initialises *cv with CLOCK_MONOTONIC as its clock. Returns 0, or the pthread error number. */
int tw_cond_init_mono(pthread_cond_t *cv);

/* The monotonic time `seconds` (>= 0) from now, for pthread_cond_timedwait on such a condition variable. */
struct timespec tw_mono_after(double seconds);

#endif
