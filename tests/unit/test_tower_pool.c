/* test_tower_pool.c — the towers' persistent threads (base/tower_pool.h): every job of a run runs once,
 * job 0 on the caller, job t > 0 on a thread of its own that stays the same from run to run (no thread
 * is created per step), and a one-job pool starts no thread; the cuts of a range into parts. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tower_pool.h"

enum { JOBS = 4, RUNS = 50 };

typedef struct {
    pthread_t self[JOBS]; /* the thread each job ran on in this run */
    int count[JOBS];      /* times each job ran, over all runs */
} record;

static void job(void *arg, int t)
{
    record *r = arg;
    r->self[t] = pthread_self();
    r->count[t]++;
}

static void test_same_threads_every_run(void **state)
{
    (void)state;
    tw_tower_pool *p;
    tw_error err;
    assert_int_equal(tw_tower_pool_create(JOBS, &p, &err), TW_OK);
    record r = {0};
    pthread_t first[JOBS];
    for (int run = 0; run < RUNS; run++) {
        tw_tower_pool_run(p, JOBS, job, &r);
        for (int t = 0; t < JOBS; t++) {
            assert_int_equal(r.count[t], run + 1); /* every job ran, once, before run returned */
            if (run == 0)
                first[t] = r.self[t];
            assert_true(pthread_equal(r.self[t], first[t])); /* the same thread as the first run */
        }
    }
    assert_true(pthread_equal(first[0], pthread_self()));
    for (int t = 1; t < JOBS; t++) {
        assert_false(pthread_equal(first[t], pthread_self()));
        for (int u = 1; u < t; u++)
            assert_false(pthread_equal(first[t], first[u]));
    }
    tw_tower_pool_destroy(p);
}

static void test_one_job_on_caller(void **state)
{
    (void)state;
    tw_tower_pool *p;
    tw_error err;
    assert_int_equal(tw_tower_pool_create(1, &p, &err), TW_OK);
    record r = {0};
    tw_tower_pool_run(p, 1, job, &r);
    assert_int_equal(r.count[0], 1);
    assert_true(pthread_equal(r.self[0], pthread_self()));
    tw_tower_pool_destroy(p);
    assert_int_equal(tw_tower_pool_create(0, &p, &err), TW_ERR_INVALID);
    tw_tower_pool_destroy(NULL);
}

/* A run of fewer jobs than the pool holds runs exactly those, on their own threads; one job runs on
 * the caller; a full run afterwards still reaches every worker (none missed a generation). */
static void test_runs_of_fewer_jobs(void **state)
{
    (void)state;
    tw_tower_pool *p;
    tw_error err;
    assert_int_equal(tw_tower_pool_create(JOBS, &p, &err), TW_OK);
    record r = {0};
    tw_tower_pool_run(p, 2, job, &r);
    assert_int_equal(r.count[0], 1);
    assert_int_equal(r.count[1], 1);
    for (int t = 2; t < JOBS; t++)
        assert_int_equal(r.count[t], 0);
    assert_false(pthread_equal(r.self[1], pthread_self()));
    tw_tower_pool_run(p, 1, job, &r);
    assert_int_equal(r.count[0], 2);
    assert_int_equal(r.count[1], 1);
    tw_tower_pool_run(p, JOBS, job, &r);
    assert_int_equal(r.count[0], 3);
    assert_int_equal(r.count[1], 2);
    for (int t = 2; t < JOBS; t++)
        assert_int_equal(r.count[t], 1);
    tw_tower_pool_destroy(p);
}

/* tw_tower_pool_cut: parts from 0 to len, never decreasing, starts on multiples of 16 (but the end),
 * each part within 16 of len / parts; a NULL pool runs one job, on the caller. */
static void test_cuts(void **state)
{
    (void)state;
    const size_t lens[] = {0, 1, 15, 16, 100, 500, 784, 1001, 397510};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        for (int parts = 1; parts <= 5; parts++) {
            size_t len = lens[i];
            assert_int_equal(tw_tower_pool_cut(len, parts, 0), 0);
            assert_int_equal(tw_tower_pool_cut(len, parts, parts), len);
            for (int p = 0; p < parts; p++) {
                size_t lo = tw_tower_pool_cut(len, parts, p), hi = tw_tower_pool_cut(len, parts, p + 1);
                assert_true(lo <= hi);
                assert_true(lo % 16 == 0 || lo == len);
                double even = (double)len / parts;
                assert_true((double)(hi - lo) <= even + 16 && (double)(hi - lo) + 16 >= even);
            }
        }
    assert_int_equal(tw_tower_pool_jobs(NULL), 1);
    record r = {0};
    tw_tower_pool_run(NULL, 2, job, &r);
    assert_int_equal(r.count[0], 1);
    assert_int_equal(r.count[1], 0);
    assert_true(pthread_equal(r.self[0], pthread_self()));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_threads_every_run),
        cmocka_unit_test(test_one_job_on_caller),
        cmocka_unit_test(test_runs_of_fewer_jobs),
        cmocka_unit_test(test_cuts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
