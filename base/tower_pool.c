/* tower_pool.c — persistent worker threads for the towers of a step. See tower_pool.h.
 *
 * One mutex and two condition variables: a run bumps `generation` and wakes the workers; each runs its
 * job, and the last to finish wakes the caller. Workers never miss a run: they compare the generation
 * they last ran with the current one under the mutex. Before sleeping on a condition variable, a worker
 * (for the next run) and the caller (for the workers to finish) poll for SPIN_NS: a futex wake-up across
 * cores costs far more than a poll, and a step's runs follow each other closely (BENCHMARKS.md, "Worker
 * threads"). The poll is bounded, so an idle pool sleeps. */
#include "tower_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_JOBS = TW_TOWER_POOL_MAX_JOBS, SPIN_NS = 200000 };

/* Nanoseconds of CLOCK_MONOTONIC. */
static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ll + t.tv_nsec;
}

/* Polls *v for up to SPIN_NS until (*v == x) == equal. */
static void spin(const atomic_ulong *v, unsigned long x, int equal)
{
    long long end = now_ns() + SPIN_NS;
    do {
        for (int i = 0; i < 64; i++) {
            if ((atomic_load_explicit(v, memory_order_acquire) == x) == equal)
                return;
            __builtin_ia32_pause();
        }
    } while (now_ns() < end);
}

typedef struct {
    struct tw_tower_pool *p;
    int t;
} worker;

struct tw_tower_pool {
    int n, started;            /* the most jobs per run; worker threads running */
    int jobs;                  /* jobs of the current run: workers 1..jobs-1 take part */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    atomic_ulong generation;   /* runs begun (written under mu; read spinning) */
    atomic_ulong pending;      /* workers still busy with this run (likewise) */
    int stop;
    void (*job)(void *, int);
    void *arg;
    pthread_t threads[MAX_JOBS];
    worker workers[MAX_JOBS];
};

static void *worker_main(void *v)
{
    worker *w = v;
    struct tw_tower_pool *p = w->p;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (!p->stop && atomic_load(&p->generation) == seen) {
            pthread_mutex_unlock(&p->mu);
            spin(&p->generation, seen, 0);
            pthread_mutex_lock(&p->mu);
        }
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        if (w->t >= p->jobs)
            continue; /* not in this run */
        pthread_mutex_unlock(&p->mu);
        p->job(p->arg, w->t);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

tw_status tw_tower_pool_create(int n, tw_tower_pool **out, tw_error *err)
{
    if (n < 1 || n > MAX_JOBS)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tower pool: %d jobs outside 1..%d", n,
                            MAX_JOBS);
    tw_tower_pool *p = calloc(1, sizeof *p);
    if (!p)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "tower pool: out of memory");
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int t = 1; t < n; t++) {
        p->workers[t] = (worker){p, t};
        int e = pthread_create(&p->threads[t], NULL, worker_main, &p->workers[t]);
        if (e) {
            tw_tower_pool_destroy(p);
            return tw_error_set(err, e == EAGAIN ? TW_ERR_NOMEM : TW_ERR_INTERNAL, NULL, -1,
                                "tower pool: cannot start thread %d: %s",
                                t, strerror(e));
        }
        p->started = t;
    }
    *out = p;
    return TW_OK;
}

void tw_tower_pool_destroy(tw_tower_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t <= p->started; t++)
        pthread_join(p->threads[t], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* jobs brought into 1..n (1 for a NULL pool). */
static int clamp_jobs(const tw_tower_pool *p, int jobs)
{
    return !p || jobs < 1 ? 1 : jobs > p->n ? p->n : jobs;
}

void tw_tower_pool_run(tw_tower_pool *p, int jobs, void (*job)(void *arg, int t), void *arg)
{
    jobs = clamp_jobs(p, jobs);
    if (jobs == 1) {
        job(arg, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->job = job;
    p->arg = arg;
    p->jobs = jobs;
    p->pending = jobs - 1;
    p->generation++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    job(arg, 0);
    spin(&p->pending, 0, 1);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* The jobs of a tw_tower_pool_try run and what each returned. */
typedef struct {
    tw_status (*job)(void *, int, tw_error *);
    void *arg;
    tw_status status[MAX_JOBS];
    tw_error err[MAX_JOBS];
} tried;

static void try_one(void *v, int t)
{
    tried *r = v;
    r->status[t] = r->job(r->arg, t, &r->err[t]);
}

tw_status tw_tower_pool_try(tw_tower_pool *p, int jobs, tw_status (*job)(void *arg, int t, tw_error *err),
                            void *arg, tw_error *err)
{
    tried r; /* not zeroed (~70 KB of errors): every job sets its status, and its error on failure */
    r.job = job;
    r.arg = arg;
    jobs = clamp_jobs(p, jobs);
    tw_tower_pool_run(p, jobs, try_one, &r);
    for (int t = 0; t < jobs; t++)
        if (r.status[t] != TW_OK) {
            if (err)
                *err = r.err[t];
            return r.status[t];
        }
    return TW_OK;
}

int tw_tower_pool_jobs(const tw_tower_pool *p) { return p ? p->n : 1; }

size_t tw_tower_pool_cut(size_t len, int parts, int p)
{
    if (p >= parts)
        return len;
    size_t n = (size_t)parts, k = (size_t)p;
    size_t at = (len / n * k + len % n * k / n + 8) / 16 * 16; /* floor(len k / n) without overflow, rounded */
    return at < len ? at : len;
}
