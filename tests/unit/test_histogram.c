/* test_histogram.c — TF's default bucket limits (count, ends, the values docs/formats.md §4.1 lists),
 * Histogram::Add semantics (upper_bound, statistics in double, NaN/Inf refused whole) and
 * EncodeToProto's merging of empty runs on hand-computed cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "histogram.h"

enum { ZERO = 775 }; /* index of the 0.0 limit */

static void *read_limits(void *arg)
{
    (void)arg;
    return (void *)tw_histogram_limits();
}

/* Runs first: several threads race to build the table; all must see the same, complete one. */
static void test_limits_built_once_across_threads(void **state)
{
    (void)state;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, read_limits, NULL), 0);
    for (int i = 0; i < 8; i++) {
        void *got;
        assert_int_equal(pthread_join(t[i], &got), 0);
        assert_ptr_equal(got, tw_histogram_limits());
        assert_true(((const double *)got)[TW_HISTOGRAM_BUCKETS - 1] == DBL_MAX);
    }
}

static void test_default_limits(void **state)
{
    (void)state;
    const double *l = tw_histogram_limits();
    assert_int_equal(TW_HISTOGRAM_BUCKETS, 1551);
    assert_true(l[0] == -DBL_MAX);
    assert_true(l[1550] == DBL_MAX);
    assert_true(l[ZERO] == 0.0);
    assert_true(l[ZERO + 1] == 1e-12);
    assert_true(l[ZERO + 2] == 1.1000000000000002e-12);
    assert_true(l[ZERO + 3] == 1.2100000000000003e-12);
    assert_true(l[1549] == 9.920775621859783e19); /* last finite limit, docs/formats.md §4.1 */
    assert_true(l[1] == -9.920775621859783e19);
    assert_true(l[ZERO - 1] == -1e-12);
    for (int i = 1; i < TW_HISTOGRAM_BUCKETS; i++)
        assert_true(l[i - 1] < l[i]);
    for (int i = 0; i < TW_HISTOGRAM_BUCKETS; i++)
        assert_true(l[i] == -l[TW_HISTOGRAM_BUCKETS - 1 - i]);
}

static void test_empty_histogram(void **state)
{
    (void)state;
    tw_histogram h;
    tw_histogram_init(&h);
    tw_histogram_proto p;
    tw_histogram_encode(&h, &p);
    assert_true(p.proto.min == DBL_MAX);
    assert_true(p.proto.max == -DBL_MAX);
    assert_true(p.proto.num == 0.0 && p.proto.sum == 0.0 && p.proto.sum_squares == 0.0);
    assert_int_equal(p.proto.n_bucket_limit, 1);
    assert_int_equal(p.proto.n_bucket, 1);
    assert_true(p.proto.bucket_limit[0] == DBL_MAX);
    assert_true(p.proto.bucket[0] == 0.0);
}

static void test_statistics_in_double(void **state)
{
    (void)state;
    tw_histogram h;
    tw_histogram_init(&h);
    const float v[] = {1.5f, -2.5f, 0.0f};
    tw_error err;
    assert_int_equal(tw_histogram_add_floats(&h, v, 3, "t", &err), TW_OK);
    assert_true(h.min == -2.5 && h.max == 1.5);
    assert_true(h.num == 3.0 && h.sum == -1.0 && h.sum_squares == 8.5);
    const float big[] = {3e38f, 3e38f}; /* the sum overflows float but not double */
    assert_int_equal(tw_histogram_add_floats(&h, big, 2, "t", &err), TW_OK);
    assert_true(isfinite(h.sum) && h.sum > 6e38);
    tw_histogram_clear(&h);
    assert_true(h.num == 0.0 && h.min == DBL_MAX && h.max == -DBL_MAX);
}

/* upper_bound: a value equal to a limit goes to the bucket above it. */
static void test_bucket_is_upper_bound(void **state)
{
    (void)state;
    tw_histogram h;
    tw_histogram_init(&h);
    const float zero = 0.0f, minus = -1e-12f, tiny = 1.2e-12f;
    tw_error err;
    assert_int_equal(tw_histogram_add_floats(&h, &zero, 1, "t", &err), TW_OK);
    assert_true(h.counts[ZERO + 1] == 1.0); /* [0, 1e-12), not the bucket ending at 0.0 */
    assert_true(h.counts[ZERO] == 0.0);
    assert_int_equal(tw_histogram_add_floats(&h, &minus, 1, "t", &err), TW_OK);
    assert_true(h.counts[ZERO] == 1.0);     /* [-1e-12, 0) */
    assert_int_equal(tw_histogram_add_floats(&h, &tiny, 1, "t", &err), TW_OK);
    assert_true(h.counts[ZERO + 3] == 1.0); /* [1.1e-12, 1.21e-12) */
    const float huge[] = {FLT_MAX, -FLT_MAX};
    assert_int_equal(tw_histogram_add_floats(&h, huge, 2, "t", &err), TW_OK);
    assert_true(h.counts[1550] == 1.0);     /* [9.9e19, DBL_MAX) */
    assert_true(h.counts[1] == 1.0);        /* [-DBL_MAX, -9.9e19) */
}

/* The reference: std::upper_bound by bisection over the limits. */
static size_t upper_bound(const double *limits, double x)
{
    size_t lo = 0, hi = TW_HISTOGRAM_BUCKETS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (limits[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < TW_HISTOGRAM_BUCKETS ? lo : TW_HISTOGRAM_BUCKETS - 1;
}

/* The bucket of one value, through the public add. */
static size_t bucket_added(float x)
{
    static tw_histogram h;
    tw_histogram_init(&h);
    assert_int_equal(tw_histogram_add_floats(&h, &x, 1, "t", NULL), TW_OK);
    for (size_t i = 0; i < TW_HISTOGRAM_BUCKETS; i++)
        if (h.counts[i] == 1.0)
            return i;
    fail_msg("value %g counted nowhere", (double)x);
    return 0;
}

/* The O(1) bucketing picks what bisection picks: at every limit a float can hold, one float either side
 * of it, and over values spread across the whole range. */
static void test_bucket_matches_bisection(void **state)
{
    (void)state;
    const double *limits = tw_histogram_limits();
    for (size_t i = 1; i + 1 < TW_HISTOGRAM_BUCKETS; i++) {
        float at = (float)limits[i];
        const float xs[] = {at, nextafterf(at, INFINITY), nextafterf(at, -INFINITY)};
        for (int j = 0; j < 3; j++)
            if (bucket_added(xs[j]) != upper_bound(limits, (double)xs[j]))
                fail_msg("value %.9g (near limit %zu): bucket %zu, bisection %zu", (double)xs[j], i,
                         bucket_added(xs[j]), upper_bound(limits, (double)xs[j]));
    }
    uint32_t s = 12345;
    for (int n = 0; n < 200000; n++) {
        s = s * 1664525u + 1013904223u;
        float x;
        memcpy(&x, &s, sizeof x); /* every exponent and sign; skip NaN and Inf */
        if (!isfinite(x))
            continue;
        assert_int_equal(bucket_added(x), upper_bound(limits, (double)x));
    }
}

static void expect_buckets(const tw_histogram_proto *p, const double *limits, const double *counts,
                           size_t n)
{
    assert_int_equal(p->proto.n_bucket_limit, n);
    assert_int_equal(p->proto.n_bucket, n);
    for (size_t i = 0; i < n; i++) {
        assert_true(p->proto.bucket_limit[i] == limits[i]);
        assert_true(p->proto.bucket[i] == counts[i]);
    }
}

/* Values 0, 0, -1e-12f, 1.2e-12f fill buckets 775 (x1), 776 (x2) and 778 (x1); 777 stays empty.
 * EncodeToProto: the run 0..774 collapses to (limits[774] = -1e-12, 0); then (0.0, 1), (1e-12, 2);
 * the lone empty bucket 777 is kept as (limits[777], 0) — merged, not dropped; (limits[778], 1);
 * the run 779..1550 collapses to (DBL_MAX, 0). */
static void test_encode_merges_empty_runs(void **state)
{
    (void)state;
    tw_histogram h;
    tw_histogram_init(&h);
    const float v[] = {0.0f, 0.0f, -1e-12f, 1.2e-12f};
    tw_error err;
    assert_int_equal(tw_histogram_add_floats(&h, v, 4, "t", &err), TW_OK);
    tw_histogram_proto p;
    tw_histogram_encode(&h, &p);
    const double limits[] = {-1e-12, 0.0, 1e-12, 1.1000000000000002e-12, 1.2100000000000003e-12,
                             DBL_MAX};
    const double counts[] = {0, 1, 2, 0, 1, 0};
    expect_buckets(&p, limits, counts, 6);
    assert_true(p.proto.min == (double)-1e-12f);
    assert_true(p.proto.max == (double)1.2e-12f);
    assert_true(p.proto.num == 4.0);
}

/* Values in bucket 1 and in the last bucket: the empty bucket 0 is an entry of its own, the run
 * 2..1549 one entry, and nothing follows the filled DBL_MAX bucket. */
static void test_encode_full_ends(void **state)
{
    (void)state;
    tw_histogram h;
    tw_histogram_init(&h);
    const float v[] = {-FLT_MAX, FLT_MAX};
    tw_error err;
    assert_int_equal(tw_histogram_add_floats(&h, v, 2, "t", &err), TW_OK);
    tw_histogram_proto p;
    tw_histogram_encode(&h, &p);
    const double *l = tw_histogram_limits();
    const double limits[] = {l[0], l[1], l[1549], DBL_MAX};
    const double counts[] = {0, 1, 0, 1};
    expect_buckets(&p, limits, counts, 4);
}

static void test_nan_and_inf_refused_whole(void **state)
{
    (void)state;
    tw_histogram h;
    tw_histogram_init(&h);
    tw_error err;
    const float with_nan[] = {1.0f, NAN, 2.0f};
    assert_int_equal(tw_histogram_add_floats(&h, with_nan, 3, "layer1/weights", &err),
                     TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "NaN"));
    assert_non_null(strstr(err.message, "layer1/weights"));
    assert_true(h.num == 0.0 && h.counts[ZERO + 1] == 0.0 && h.sum == 0.0);
    const float with_inf[] = {-INFINITY};
    assert_int_equal(tw_histogram_add_floats(&h, with_inf, 1, "w", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "Infinity"));
    assert_true(h.num == 0.0 && h.min == DBL_MAX);
    assert_int_equal(tw_histogram_add_floats(&h, NULL, 0, "w", &err), TW_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_built_once_across_threads),
        cmocka_unit_test(test_default_limits),
        cmocka_unit_test(test_bucket_matches_bisection),
        cmocka_unit_test(test_empty_histogram),
        cmocka_unit_test(test_statistics_in_double),
        cmocka_unit_test(test_bucket_is_upper_bound),
        cmocka_unit_test(test_encode_merges_empty_runs),
        cmocka_unit_test(test_encode_full_ends),
        cmocka_unit_test(test_nan_and_inf_refused_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
