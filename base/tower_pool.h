/* tower_pool.h — persistent worker threads for the towers of a step (tower_pool.c), and for the share of
 * the cores of one CPU tower (cpu_backend.c cuts its GEMMs and updates over a pool of its own).
 *
 * Owns: n - 1 threads created once (tw_tower_pool_create) that wait for work, so a step starts no
 * thread (creating threads every step cost the CPU towers their speed, and every new thread made
 * OpenMP build a new team for oneDNN). Job t = 0 runs on the calling thread, job t on worker t, always
 * the same one, so each tower keeps its thread (and its thread-local state: OpenMP teams, CUDA's current
 * device) from step to step. Does not own: what the jobs do or their errors (the caller's). */
#ifndef TW_TOWER_POOL_H
#define TW_TOWER_POOL_H

#include <stddef.h>

#include "status.h"

typedef struct tw_tower_pool tw_tower_pool;

enum { TW_TOWER_POOL_MAX_JOBS = 64 }; /* the most jobs of one pool */

/* A pool for up to n jobs per run (n >= 1; n = 1 creates no thread). Caller owns *out. Errors: TW_ERR_NOMEM
 * (also when a thread finds no room for its stack: EAGAIN, an address-space limit), TW_ERR_INTERNAL when a
 * thread cannot be created otherwise (naming the error). */
tw_status tw_tower_pool_create(int n, tw_tower_pool **out, tw_error *err);

/* Stops and joins the workers (after the last run has returned). NULL-safe. */
void tw_tower_pool_destroy(tw_tower_pool *p);

/* Runs job(arg, t) for every t in [0, jobs), jobs in 1..n (the pool's), t = 0 on the caller, and
 * returns when all have returned; jobs = 1 (or p NULL) runs on the caller alone, waking no worker. One run
 * at a time per pool (one caller thread). */
void tw_tower_pool_run(tw_tower_pool *p, int jobs, void (*job)(void *arg, int t), void *arg);

/* tw_tower_pool_run for jobs that can fail: job(arg, t, err) returns a status (and sets *err when it
 * fails); returns the first failing job's status (the lowest t), its error in *err (unless NULL). */
tw_status tw_tower_pool_try(tw_tower_pool *p, int jobs, tw_status (*job)(void *arg, int t, tw_error *err),
                            void *arg, tw_error *err);

/* The most jobs per run of p (its n; 1 for NULL, which runs everything on the caller). */
int tw_tower_pool_jobs(const tw_tower_pool *p);

/* Where part p (0..parts) of [0, len) starts when it is cut into `parts` nearly equal parts on multiples
 * of 16 values (64 bytes of fp32), so every part but the last starts and ends aligned: p = 0 gives 0,
 * p = parts gives len, and the cuts never decrease (a part may be empty when len is small). */
size_t tw_tower_pool_cut(size_t len, int parts, int p);

#endif
