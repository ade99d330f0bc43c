/* histogram.h — TensorFlow's default-bucket histogram and its HistogramProto encoding.
 *
 * Owns: the 1551 default bucket limits of tsl/lib/histogram/histogram.cc (docs/formats.md §4.1:
 * positives 1e-12 × 1.1ⁿ while < 1e20, then DBL_MAX; negatives mirrored; 0.0 between), adding
 * values the way Histogram::Add does (bucket = first limit strictly greater than x; min, max, num,
 * sum, sum_squares in double), and EncodeToProto(preserve_zero_buckets = false): every run of
 * consecutive empty buckets is collapsed into one zero-count entry whose limit is the last limit of
 * the run (docs/formats.md §4.2).
 * Does not own: writing the proto into an event file (events.c) or any re-binning for display.
 * Written here because no C library computes TF's buckets; it is a loop and a binary search.
 *
 * A tw_histogram is plain memory with no heap pointers (~12 KiB): embed it or put it on the heap,
 * call tw_histogram_init before use; there is nothing to clean up. One histogram belongs to one
 * thread at a time; tw_histogram_limits is thread-safe (computed once, under pthread_once). */
#ifndef TW_HISTOGRAM_H
#define TW_HISTOGRAM_H

#include <stddef.h>

#include "event.pb-c.h"
#include "status.h"

enum { TW_HISTOGRAM_BUCKETS = 1551 };

/* The default limits, ascending: limits[0] = -DBL_MAX, limits[775] = 0.0, limits[1550] = DBL_MAX.
 * Borrowed: a static table, valid for the life of the process. */
const double *tw_histogram_limits(void);

typedef struct {
    double min;                           /* DBL_MAX while empty */
    double max;                           /* -DBL_MAX while empty */
    double num;                           /* values added */
    double sum;
    double sum_squares;
    double counts[TW_HISTOGRAM_BUCKETS];  /* [1551] counts[i] covers [limits[i-1], limits[i]) */
} tw_histogram;

/* Prepares h (same as clear; also computes the shared limits table on first use). */
void tw_histogram_init(tw_histogram *h);

/* Forgets every value: min = DBL_MAX, max = -DBL_MAX, all counts and sums 0. */
void tw_histogram_clear(tw_histogram *h);

/* Adds n values (borrowed during the call), each converted to double. All or nothing: a NaN or an
 * infinity anywhere adds none and returns TW_ERR_INVALID naming `tag` (may be NULL) and the index,
 * as TensorFlow's HistogramSummary refuses them. */
tw_status tw_histogram_add_floats(tw_histogram *h, const float *values, size_t n, const char *tag,
                                  tw_error *err);

/* Storage for an encoded histogram: `proto` points into `limits` and `counts` of the same struct,
 * so the struct must not be copied or moved while proto is in use. Caller owns it (stack or heap,
 * ~25 KiB); nothing inside is heap-allocated and there is nothing to free. */
typedef struct {
    Twpb__HistogramProto proto;
    double limits[TW_HISTOGRAM_BUCKETS];  /* [proto.n_bucket_limit] used */
    double counts[TW_HISTOGRAM_BUCKETS];  /* [proto.n_bucket] used */
} tw_histogram_proto;

/* Encodes h into out->proto exactly as TF's EncodeToProto(preserve_zero_buckets = false). Never
 * fails. An empty histogram encodes as min = DBL_MAX, max = -DBL_MAX and the single bucket
 * (DBL_MAX, 0). */
void tw_histogram_encode(const tw_histogram *h, tw_histogram_proto *out);

#endif
