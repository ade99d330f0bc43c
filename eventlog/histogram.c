/* histogram.c — TF default buckets, Add and EncodeToProto. See histogram.h.
 *
 * The limits table is built once by the same loop TensorFlow runs (InitDefaultBucketsInner), in
 * double arithmetic, so every limit is bit-identical to TF's. */
#include "histogram.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

enum { HALF = TW_HISTOGRAM_BUCKETS / 2 }; /* 775: index of 0.0, and the count of positive limits */

static double g_limits[TW_HISTOGRAM_BUCKETS];
static pthread_once_t g_limits_once = PTHREAD_ONCE_INIT;

/* Positives 1e-12 × 1.1ⁿ while < 1e20, then DBL_MAX, at HALF+1..; negatives mirrored below 0.0. */
static void build_limits(void)
{
    size_t k = 0;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1, k++) {
        assert(k < HALF - 1);
        g_limits[HALF + 1 + k] = v;
        g_limits[HALF - 1 - k] = -v;
    }
    assert(k == HALF - 1);
    g_limits[TW_HISTOGRAM_BUCKETS - 1] = DBL_MAX;
    g_limits[0] = -DBL_MAX;
    g_limits[HALF] = 0.0;
}

const double *tw_histogram_limits(void)
{
    pthread_once(&g_limits_once, build_limits);
    return g_limits;
}

void tw_histogram_clear(tw_histogram *h)
{
    memset(h, 0, sizeof *h);
    h->min = DBL_MAX;
    h->max = -DBL_MAX;
}

void tw_histogram_init(tw_histogram *h)
{
    tw_histogram_limits();
    tw_histogram_clear(h);
}

/* std::upper_bound: index of the first limit strictly greater than x, clamped to the last bucket
 * (only x = DBL_MAX itself would fall past it), in O(1): the limits grow by 1.1 from 1e-12, so
 * log(|x| / 1e-12) / log(1.1) lands within a bucket of the answer, and comparing with the table's own
 * limits settles it exactly (the table, not the logarithm, decides a value equal to a limit). */
static size_t bucket_of(const double *limits, double x)
{
    const double a = fabs(x);
    size_t i = HALF;
    if (a >= 1.0e-12) {
        double k = floor(log(a / 1.0e-12) / log(1.1)); /* 1e-12 * 1.1^k <= a, about */
        size_t n = k < (double)(HALF - 2) ? (size_t)k : HALF - 2;
        i = x > 0 ? HALF + 2 + n : HALF - 1 - n;
    }
    while (i > 0 && limits[i - 1] > x)
        i--;
    while (i < TW_HISTOGRAM_BUCKETS && limits[i] <= x)
        i++;
    return i < TW_HISTOGRAM_BUCKETS ? i : TW_HISTOGRAM_BUCKETS - 1;
}

static void add_one(tw_histogram *h, const double *limits, double x)
{
    h->counts[bucket_of(limits, x)] += 1.0;
    if (h->min > x)
        h->min = x;
    if (h->max < x)
        h->max = x;
    h->num += 1.0;
    h->sum += x;
    h->sum_squares += x * x;
}

tw_status tw_histogram_add_floats(tw_histogram *h, const float *values, size_t n, const char *tag,
                                  tw_error *err)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(values[i]))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "%s in summary histogram for: %s (value %zu of %zu)",
                                isnan(values[i]) ? "NaN" : "Infinity", tag ? tag : "(no tag)", i,
                                n);
    const double *limits = tw_histogram_limits();
    for (size_t i = 0; i < n; i++)
        add_one(h, limits, (double)values[i]);
    return TW_OK;
}

void tw_histogram_encode(const tw_histogram *h, tw_histogram_proto *out)
{
    const double *limits = tw_histogram_limits();
    Twpb__HistogramProto *p = &out->proto;
    twpb__histogram_proto__init(p);
    p->min = h->min;
    p->max = h->max;
    p->num = h->num;
    p->sum = h->sum;
    p->sum_squares = h->sum_squares;
    /* TF adds a lone (DBL_MAX, 0) when nothing was emitted; with 1551 buckets the loop always emits
     * at least one entry, and an empty histogram's single run already ends at DBL_MAX. */
    size_t n = 0;
    for (size_t i = 0; i < TW_HISTOGRAM_BUCKETS;) {
        double end = limits[i], count = h->counts[i];
        i++;
        if (count <= 0.0) {
            while (i < TW_HISTOGRAM_BUCKETS && h->counts[i] <= 0.0) {
                end = limits[i];
                count = h->counts[i];
                i++;
            }
        }
        out->limits[n] = end;
        out->counts[n] = count;
        n++;
    }
    p->n_bucket_limit = p->n_bucket = n;
    p->bucket_limit = out->limits;
    p->bucket = out->counts;
}
