/* convert.c — sources -> Examples -> train/test TFRecords + meta JSON. See convert.h.
 *
 * The sources (convert_source.c) are read through one small table of functions (next, describe, close);
 * the loop in write_source() is the same for all of them. Outputs are tw_atomic_file temporaries that are
 * committed together at the very end. */
#include "convert.h"

#include <fcntl.h>
#include <stddef.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"
#include "convert_source.h"
#include "datafs.h"
#include "tfrecord.h"

enum { MAX_HISTOGRAM = 65536, PATH_BYTES = 4096 };

static const uint64_t DEFAULT_MAX_BYTES = 16ull << 30;
static const uint64_t DEFAULT_MAX_RECORD_BYTES = 64ull << 20;

/* ================================ options ================================ */

void tw_convert_options_default(tw_convert_options *o)
{
    memset(o, 0, sizeof *o);
    o->compression = TW_COMPRESSION_NONE;
    o->test_fraction = -1;
    o->seed = 0;
    o->max_bytes = DEFAULT_MAX_BYTES;
    o->max_record_bytes = DEFAULT_MAX_RECORD_BYTES;
    o->image_channels = 3;
    o->image_fit = TW_CONVERT_FIT_CROP;
}

const char *tw_convert_source_name(tw_convert_source s)
{
    switch (s) {
    case TW_CONVERT_IDX: return "idx";
    case TW_CONVERT_CSV: return "csv";
    case TW_CONVERT_NPY: return "npy";
    case TW_CONVERT_TFRECORD: return "tfrecord";
    case TW_CONVERT_ARCHIVE: return "archive";
    }
    return "?";
}

tw_status tw_convert_meta_path(const char *output, char *buf, size_t size, tw_error *err)
{
    static const char ext[] = ".tfrecord";
    size_t n = strlen(output), e = sizeof ext - 1;
    int strip = n > e && !strcmp(output + n - e, ext);
    int w = snprintf(buf, size, "%.*s.meta.json", (int)(strip ? n - e : n), output);
    if (w < 0 || (size_t)w >= size)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "output path is too long");
    return TW_OK;
}

/* One option pair: both or neither. */
static tw_status need_both(const char *a, const char *a_flag, const char *b, const char *b_flag,
                           tw_error *err)
{
    if (!a != !b)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s needs %s", a ? a_flag : b_flag,
                            a ? b_flag : a_flag);
    return TW_OK;
}

/* An archive's stored size and channels; its class names are its folders'. */
static tw_status check_archive(const tw_convert_options *o, tw_error *err)
{
    if (o->image_height < 1 || o->image_height > 4096 || o->image_width < 1 || o->image_width > 4096)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--image-size HxW is needed with --image-archive, "
                            "each side 1 to 4096 pixels");
    if (o->image_channels != 1 && o->image_channels != 3)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--channels must be 1 (gray) or 3 (RGB), got %d",
                            o->image_channels);
    if (o->class_names)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--class-names: an image archive's classes are its "
                            "folders' names");
    return TW_OK;
}

tw_status tw_convert_shape_parse(const char *text, tw_convert_options *o, tw_error *err)
{
    const char *p = text;
    o->shape_rank = 0;
    while (*p && o->shape_rank < TW_CONVERT_MAX_RANK) {
        char *end;
        long long v = *p >= '0' && *p <= '9' ? strtoll(p, &end, 10) : -1;
        if (v < 1 || v > TW_CONVERT_MAX_DIM || (*end && *end != 'x' && *end != ',') || (*end && !end[1]))
            break;
        o->shape[o->shape_rank++] = v;
        p = *end ? end + 1 : end;
    }
    if (o->shape_rank && !*p)
        return TW_OK;
    o->shape_rank = 0;
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "'%.40s' is not a shape: 1 to %d dimensions joined by x or "
                        "commas (28x28x1), each 1 to %d", text, TW_CONVERT_MAX_RANK, TW_CONVERT_MAX_DIM);
}

/* --shape: only for a TFRecord source; 1 to TW_CONVERT_MAX_RANK dimensions, each and their product at most
 * TW_CONVERT_MAX_DIM. */
static tw_status check_shape(const tw_convert_options *o, int tfr, tw_error *err)
{
    if (o->shape_rank && !tfr)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--shape is for a TFRecord source (--tfrecord): the "
                            "other sources know their examples' shape");
    if (o->shape_rank > TW_CONVERT_MAX_RANK)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--shape has %zu dimensions; at most %d",
                            o->shape_rank, TW_CONVERT_MAX_RANK);
    uint64_t values = 1;
    for (size_t i = 0; i < o->shape_rank; i++) {
        if (o->shape[i] < 1 || o->shape[i] > TW_CONVERT_MAX_DIM)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--shape: dimension %zu is %lld; each must be 1 to %d",
                                i + 1, (long long)o->shape[i], TW_CONVERT_MAX_DIM);
        if ((values *= (uint64_t)o->shape[i]) > TW_CONVERT_MAX_DIM)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--shape: more than %d values an example",
                                TW_CONVERT_MAX_DIM);
    }
    return TW_OK;
}

static tw_status check_source(const tw_convert_options *o, tw_convert_source *source,
                              tw_error *err)
{
    int idx = o->images || o->labels, csv = o->csv || o->label_column;
    int npy = o->npy_features || o->npy_labels, tfr = o->tfrecord != NULL, arc = o->image_archive != NULL;
    if (idx + csv + npy + tfr + arc != 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "give exactly one source: --images/--labels, --csv/--label-column, "
                            "--npy-features/--npy-labels, --tfrecord or --image-archive");
    if (arc)
        TW_TRY(check_archive(o, err));
    TW_TRY(check_shape(o, tfr, err));
    TW_TRY(need_both(o->images, "--images", o->labels, "--labels", err));
    TW_TRY(need_both(o->csv, "--csv", o->label_column, "--label-column", err));
    TW_TRY(need_both(o->npy_features, "--npy-features", o->npy_labels, "--npy-labels", err));
    TW_TRY(need_both(o->test_images, "--test-images", o->test_labels, "--test-labels", err));
    TW_TRY(need_both(o->test_npy_features, "--test-npy-features", o->test_npy_labels, "--test-npy-labels",
                     err));
    *source = idx ? TW_CONVERT_IDX : csv ? TW_CONVERT_CSV : npy ? TW_CONVERT_NPY : tfr ? TW_CONVERT_TFRECORD
                                                                                  : TW_CONVERT_ARCHIVE;
    return TW_OK;
}

/* The test file options: their spelling and the source kind each needs. */
static const struct {
    size_t offset;
    tw_convert_source needs;
    const char *flags, *source;
} TEST_FILES[] = {
    {offsetof(tw_convert_options, test_images), TW_CONVERT_IDX, "--test-images/--test-labels",
     "an IDX source (--images/--labels)"},
    {offsetof(tw_convert_options, test_csv), TW_CONVERT_CSV, "--test-csv", "a CSV source (--csv)"},
    {offsetof(tw_convert_options, test_npy_features), TW_CONVERT_NPY,
     "--test-npy-features/--test-npy-labels", "a NumPy source (--npy-features/--npy-labels)"},
    {offsetof(tw_convert_options, test_tfrecord), TW_CONVERT_TFRECORD, "--test-tfrecord",
     "a TFRecord source (--tfrecord)"},
};

static tw_status check_split(const tw_convert_options *o, tw_convert_source source, tw_error *err)
{
    const char *pair = NULL;
    for (size_t i = 0; i < sizeof TEST_FILES / sizeof TEST_FILES[0]; i++) {
        if (!*(const char *const *)((const char *)o + TEST_FILES[i].offset))
            continue;
        if (source != TEST_FILES[i].needs)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s need%s %s", TEST_FILES[i].flags,
                                strchr(TEST_FILES[i].flags, '/') ? "" : "s", TEST_FILES[i].source);
        pair = TEST_FILES[i].flags;
    }
    const char *held = o->test_fraction >= 0 ? "--test-fraction"
                       : o->test_first          ? "--test-first"
                       : o->test_last           ? "--test-last"
                                                : NULL;
    int asked = (o->test_fraction >= 0) + (o->test_first > 0) + (o->test_last > 0);
    if (asked > 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "--test-fraction, --test-first and --test-last exclude each other: give one");
    if (pair && held)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s and %s exclude each other", held, pair);
    if (o->test_fraction >= 0 && !(o->test_fraction <= 1))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--test-fraction must be in [0, 1]");
    if ((pair || held) && !o->test_output)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--test-output is needed with %s",
                            held ? held : pair);
    if (o->test_output && !pair && !held)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "--test-output needs a split: --test-fraction, --test-first, --test-last or a test "
                            "file (--test-images, --test-csv, --test-npy-features or --test-tfrecord)");
    return TW_OK;
}

/* No output may share its path with another output or with an input. */
static tw_status check_paths(const tw_convert_options *o, const char *meta, tw_error *err)
{
    const char *outs[] = {o->output, o->test_output, meta};
    const char *all[] = {o->output, o->test_output, meta, o->images, o->labels, o->test_images,
                         o->test_labels, o->csv, o->test_csv, o->npy_features, o->npy_labels,
                         o->test_npy_features, o->test_npy_labels, o->tfrecord, o->test_tfrecord,
                         o->image_archive};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = i + 1; j < sizeof all / sizeof all[0]; j++)
            if (outs[i] && all[j] && !strcmp(outs[i], all[j]))
                return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                    "'%s' is named twice: every output needs a path of its own",
                                    outs[i]);
    return TW_OK;
}

tw_status tw_convert_check(const tw_convert_options *o, tw_convert_source *source, tw_error *err)
{
    TW_TRY(check_source(o, source, err));
    TW_TRY(check_split(o, *source, err));
    if (!o->output || !o->output[0])
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "-o/--output is required");
    if (o->max_bytes == 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--max-bytes must be positive");
    if (o->max_record_bytes == 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--max-record-bytes must be positive");
    if (o->class_names && tw_convert_class_names_check(o->class_names, err) != TW_OK) {
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "%s", err ? err->message : "");
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--class-names: %.480s", msg);
    }
    char meta[PATH_BYTES];
    if (!o->meta)
        TW_TRY(tw_convert_meta_path(o->output, meta, sizeof meta, err));
    return check_paths(o, o->meta ? o->meta : meta, err);
}

static tw_status nomem(tw_error *err)
{
    return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}


typedef struct {
    int64_t *keys;     /* [cap] distinct integer labels, ascending */
    uint64_t *counts;  /* [cap] examples per key */
    size_t n, cap;
    int overflow;      /* more than MAX_HISTOGRAM distinct labels: histogram dropped */
    double min, max, sum;
} label_stats;

typedef struct {
    const char *path;            /* borrowed from the options */
    tw_atomic_file *file;
    tw_tfrecord_writer *writer;
    uint64_t count;
    label_stats stats;
} split;

/* The index of the first of st's keys that is >= key (st->n when none is). */
static size_t lower_bound(const label_stats *st, int64_t key)
{
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Counts one integer label; past MAX_HISTOGRAM distinct values the histogram is dropped. */
static tw_status histogram_add(label_stats *st, int64_t key, tw_error *err)
{
    size_t lo = lower_bound(st, key);
    if (lo < st->n && st->keys[lo] == key) {
        st->counts[lo]++;
        return TW_OK;
    }
    if (st->n == MAX_HISTOGRAM) {
        st->overflow = 1;
        return TW_OK;
    }
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 16;
        int64_t *k = realloc(st->keys, cap * sizeof *k);
        if (k)
            st->keys = k;
        uint64_t *c = k ? realloc(st->counts, cap * sizeof *c) : NULL;
        if (!c)
            return nomem(err);
        st->counts = c;
        st->cap = cap;
    }
    memmove(st->keys + lo + 1, st->keys + lo, (st->n - lo) * sizeof *st->keys);
    memmove(st->counts + lo + 1, st->counts + lo, (st->n - lo) * sizeof *st->counts);
    st->keys[lo] = key;
    st->counts[lo] = 1;
    st->n++;
    return TW_OK;
}

static tw_status stats_add(label_stats *st, uint64_t seen, int int_labels, const tw_label_value *l,
                           tw_error *err)
{
    if (seen == 0 || l->f < st->min)
        st->min = l->f;
    if (seen == 0 || l->f > st->max)
        st->max = l->f;
    st->sum += l->f;
    return int_labels && !st->overflow ? histogram_add(st, l->i, err) : TW_OK;
}

static tw_status split_open(split *sp, const char *path, tw_compression c, tw_error *err)
{
    sp->path = path;
    TW_TRY(tw_atomic_file_create(path, &sp->file, err));
    return tw_tfrecord_writer_create(tw_atomic_file_fd(sp->file), c, path, &sp->writer, err);
}

/* Appends one serialized Example (data[len]) of src, with its label l. */
static tw_status split_write(split *sp, const tw_convert_src *src, const uint8_t *data, size_t len,
                             const tw_label_value *l, tw_error *err)
{
    TW_TRY(tw_tfrecord_write(sp->writer, data, len, err));
    if (!src->no_labels)
        TW_TRY(stats_add(&sp->stats, sp->count, src->int_labels, l, err));
    sp->count++;
    return TW_OK;
}

static void split_cleanup(split *sp)
{
    tw_tfrecord_writer_destroy(sp->writer);
    tw_atomic_file_destroy(sp->file); /* removes the temporary unless committed */
    free(sp->stats.keys);
    free(sp->stats.counts);
}

/* ========================= selection sampling ========================= */

/* Knuth's Algorithm S (TAOCP vol. 2, 3.4.2): example t of N is selected with probability
 * (n - selected) / (N - t), which selects exactly n with every subset equally likely. */
typedef struct {
    uint64_t total, want;      /* N and n */
    uint64_t seen, selected;
    uint64_t *state;           /* splitmix64, shared by the samplers of one split */
} sampler;

/* A split of one source: the examples [lo, hi) in input order (positional), or a fraction: one sampler
 * over every example, or (stratified) one per class. */
typedef struct {
    int positional;            /* --test-first / --test-last */
    uint64_t lo, hi, index;    /* positional: the test examples' indices, the next example's */
    uint64_t state;            /* the splitmix64 stream, from the seed */
    sampler all;               /* unstratified */
    label_stats classes;       /* stratified: the classes (keys ascending) and their counts N_c */
    sampler *per;              /* [classes.n] stratified, else NULL */
} split_plan;

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int sampler_pick(sampler *s)
{
    uint64_t left = s->total - s->seen++;
    int pick = splitmix64(s->state) % left < s->want - s->selected;
    s->selected += (uint64_t)pick;
    return pick;
}

/* The index of key among st's keys, or st->n when absent. */
static size_t class_index(const label_stats *st, int64_t key)
{
    size_t lo = lower_bound(st, key);
    return lo < st->n && st->keys[lo] == key ? lo : st->n;
}

typedef struct {
    double remainder;          /* F·N_c - floor(F·N_c) */
    size_t c;                  /* the class's index */
} share;

/* Largest remainder first; ties: the smaller class index. */
static int by_remainder(const void *a, const void *b)
{
    const share *x = a, *y = b;
    return x->remainder > y->remainder ? -1 : x->remainder < y->remainder ? 1 : (x->c > y->c) - (x->c < y->c);
}

/* Test examples per class (per[c].want): floor(F·N_c), then one more for the largest remainders until
 * the total is `total` (see "Fraction splits" in convert.h). */
static tw_status allot(split_plan *p, double f, uint64_t total, tw_error *err)
{
    size_t n = p->classes.n;
    share *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return nomem(err);
    uint64_t given = 0, room = 0;
    for (size_t c = 0; c < n; c++) {
        double exact = f * (double)p->classes.counts[c];
        p->per[c] = (sampler){p->classes.counts[c], (uint64_t)exact, 0, 0, &p->state};
        given += p->per[c].want;
        room += p->per[c].total - p->per[c].want;
        order[c] = (share){exact - (double)p->per[c].want, c};
    }
    qsort(order, n, sizeof *order, by_remainder);
    for (size_t k = 0; given < total && room; k = (k + 1) % n) { /* room: never an endless loop */
        sampler *c = &p->per[order[k].c];
        if (c->want < c->total) {
            c->want++;
            given++;
            room--;
        }
    }
    free(order);
    return TW_OK;
}

/* Picks the destination of the next example (label l): 1 for the test split. */
static tw_status plan_pick(split_plan *p, const tw_label_value *l, int *test, tw_error *err)
{
    if (p->positional) {
        *test = p->index >= p->lo && p->index < p->hi;
        p->index++;
        return TW_OK;
    }
    if (!p->per) {
        *test = sampler_pick(&p->all);
        return TW_OK;
    }
    size_t c = class_index(&p->classes, l->i);
    if (c == p->classes.n || p->per[c].seen == p->per[c].total)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "the input changed between the class-counting pass and the writing pass");
    *test = sampler_pick(&p->per[c]);
    return TW_OK;
}

static void plan_cleanup(split_plan *p)
{
    free(p->classes.keys);
    free(p->classes.counts);
    free(p->per);
}

/* ============================== conversion ============================== */

typedef struct {
    const tw_convert_options *o;
    tw_convert_source kind;
    tw_convert_src *train_src, *test_src; /* test_src: the --test-images pair, --test-tfrecord, or NULL */
    tw_example_builder *builder;
    split train, test;
    int has_test;
    int stratified;        /* the fraction split was stratified by class */
    char meta_path[PATH_BYTES];
    tw_atomic_file *meta;
    char shape[192], shape_rule[192]; /* tw_convert_result's, from the meta */
} conversion;

/* Writes every example of src into `to`, or, with a plan, the sampled ones into c->test. */
static tw_status write_source(conversion *c, tw_convert_src *src, split *to, split_plan *plan, tw_error *err)
{
    for (;;) {
        tw_label_value label = {0, 0};
        tw_example_builder_reset(c->builder);
        src->record = NULL;
        tw_status s = src->next(src, c->builder, &label, err);
        if (s == TW_END)
            return TW_OK;
        TW_TRY(s);
        const uint8_t *data = src->record;
        size_t len = src->record_len;
        if (!data)
            TW_TRY(tw_example_serialize(c->builder, &data, &len, err));
        int test = 0;
        if (plan)
            TW_TRY(plan_pick(plan, &label, &test, err));
        split *dest = test ? &c->test : to;
        TW_TRY(split_write(dest, src, data, len, &label, err));
        uint64_t done = c->train.count + c->test.count;
        if (c->o->progress && done % TW_CONVERT_PROGRESS_EVERY == 0)
            c->o->progress(done, c->o->progress_ctx);
    }
}

/* The class counts N_c of the training source, from a pass over a second instance of it. */
static tw_status count_classes(conversion *c, label_stats *st, tw_error *err)
{
    tw_convert_src *src = NULL, *none = NULL;
    tw_status s = tw_convert_src_open(c->o, c->kind, &src, &none, err);
    for (uint64_t seen = 0; s == TW_OK; seen++) {
        tw_label_value label = {0, 0};
        tw_example_builder_reset(c->builder);
        s = src->next_label ? src->next_label(src, &label, err) : src->next(src, c->builder, &label, err);
        if (s == TW_OK)
            s = stats_add(st, seen, 1, &label, err);
    }
    if (none)
        none->close(none);
    if (src)
        src->close(src);
    return s == TW_END ? TW_OK : s;
}

/* Plans a fraction split of the training source: stratified with integer labels (see convert.h). */
static tw_status plan_fraction(conversion *c, split_plan *p, tw_error *err)
{
    const tw_convert_options *o = c->o;
    uint64_t n = c->train_src->count, want = (uint64_t)(o->test_fraction * (double)n + 0.5); /* round */
    p->state = o->seed;
    p->all = (sampler){n, want, 0, 0, &p->state};
    if (!c->train_src->int_labels || c->train_src->no_labels)
        return TW_OK;
    TW_TRY(count_classes(c, &p->classes, err));
    if (p->classes.overflow)
        return TW_OK;
    if (!(p->per = calloc(p->classes.n ? p->classes.n : 1, sizeof *p->per)))
        return nomem(err);
    c->stratified = 1;
    return allot(p, o->test_fraction, want, err);
}

/* Plans --test-first N (the examples [0, N)) or --test-last N ([count - N, count)). */
static tw_status plan_position(conversion *c, split_plan *p, tw_error *err)
{
    const tw_convert_options *o = c->o;
    uint64_t n = c->train_src->count, want = o->test_first ? o->test_first : o->test_last;
    if (want > n)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "a test split of the %s %llu examples: the source holds "
                            "only %llu", o->test_first ? "first" : "last", (unsigned long long)want,
                            (unsigned long long)n);
    p->positional = 1;
    p->lo = o->test_first ? 0 : n - want;
    p->hi = o->test_first ? want : n;
    return TW_OK;
}

static tw_status write_all(conversion *c, tw_error *err)
{
    const tw_convert_options *o = c->o;
    if (o->test_fraction >= 0 || o->test_first || o->test_last) {
        split_plan plan;
        memset(&plan, 0, sizeof plan);
        tw_status s = o->test_fraction >= 0 ? plan_fraction(c, &plan, err) : plan_position(c, &plan, err);
        if (s == TW_OK)
            s = write_source(c, c->train_src, &c->train, &plan, err);
        plan_cleanup(&plan);
        return s;
    }
    TW_TRY(write_source(c, c->train_src, &c->train, NULL, err));
    return c->test_src ? write_source(c, c->test_src, &c->test, NULL, err) : TW_OK;
}

/* ================================== meta ================================== */

/* Adds splits[name] = {"path", "count", "label_histogram" | "label_stats"} (neither when src has no
 * labels). */
static tw_status split_json(json_t *splits, const char *name, const split *sp, const tw_convert_src *src,
                            tw_error *err)
{
    json_t *j = json_object();
    TW_TRY(tw_convert_put(splits, name, j, err));
    TW_TRY(tw_convert_put(j, "path", json_string(sp->path), err));
    TW_TRY(tw_convert_put(j, "count", json_integer((json_int_t)sp->count), err));
    const label_stats *st = &sp->stats;
    if (src->no_labels)
        return TW_OK;
    if (src->int_labels && !st->overflow) {
        json_t *h = json_object();
        TW_TRY(tw_convert_put(j, "label_histogram", h, err));
        for (size_t i = 0; i < st->n; i++) {
            char key[24];
            snprintf(key, sizeof key, "%lld", (long long)st->keys[i]);
            TW_TRY(tw_convert_put(h, key, json_integer((json_int_t)st->counts[i]), err));
        }
        return TW_OK;
    }
    json_t *stats = sp->count ? json_pack("{s:f, s:f, s:f}", "min", st->min, "max", st->max, "mean",
                                          st->sum / (double)sp->count)
                              : json_pack("{s:n, s:n, s:n}", "min", "max", "mean");
    return tw_convert_put(j, "label_stats", stats, err);
}

/* "test_split": how the test split was made (see tw_convert). */
static json_t *test_split_json(const conversion *c)
{
    const tw_convert_options *o = c->o;
    if (o->test_first || o->test_last)
        return json_pack("{s:s, s:I}", "method", o->test_first ? "first" : "last", "count",
                         (json_int_t)(o->test_first ? o->test_first : o->test_last));
    if (o->test_fraction < 0)
        return json_pack("{s:s}", "method", c->test_src ? "file" : "none");
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    return json_pack("{s:s, s:f, s:o, s:b}", "method", "fraction", "fraction", o->test_fraction, "seed",
                     o->seed <= INT64_MAX ? json_integer((json_int_t)o->seed) : json_string(seed),
                     "stratified", c->stratified);
}

/* Class names fit the labels written: integer labels 0 .. K-1 with K the number of names. */
static tw_status check_class_names(const conversion *c, tw_error *err)
{
    size_t k = json_array_size(c->o->class_names);
    if (!c->o->class_names)
        return TW_OK;
    if (c->train_src->no_labels || !c->train_src->int_labels)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "class names need integer class labels, but the labels are %s",
                            c->train_src->no_labels ? "absent" : "floats (a regression dataset)");
    const split *sp[2] = {&c->train, &c->test};
    double lo = 0, hi = -1;
    for (int i = 0; i < 2; i++) {
        if (!sp[i]->count)
            continue;
        lo = sp[i]->stats.min < lo ? sp[i]->stats.min : lo;
        hi = sp[i]->stats.max > hi ? sp[i]->stats.max : hi;
    }
    if (lo < 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "class names name the labels 0, 1, ...; but a label is %.0f", lo);
    if (hi + 1 != (double)k)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "%zu class names given, but the labels are 0 to %.0f: %.0f classes", k, hi,
                            hi + 1);
    return TW_OK;
}

static tw_status build_meta(const conversion *c, json_t *meta, tw_error *err)
{
    TW_TRY(tw_convert_put(meta, "format_version", json_integer(1), err));
    TW_TRY(tw_convert_put(meta, "source", json_string(tw_convert_source_name(c->kind)), err));
    TW_TRY(c->train_src->describe(c->train_src, meta, err));
    TW_TRY(tw_convert_put(meta, "compression", json_string(tw_compression_name(c->o->compression)), err));
    TW_TRY(tw_convert_put(meta, "test_split", test_split_json(c), err));
    if (c->o->class_names)
        TW_TRY(tw_convert_put(meta, "class_names", json_deep_copy(c->o->class_names), err));
    json_t *splits = json_object();
    TW_TRY(tw_convert_put(meta, "splits", splits, err));
    TW_TRY(split_json(splits, "train", &c->train, c->train_src, err));
    return c->has_test ? split_json(splits, "test", &c->test, c->train_src, err) : TW_OK;
}

/* The meta's shape ("28x28x1") and "shape_rule" into c->shape, c->shape_rule when it has a rule. */
static void shape_text(conversion *c, const json_t *meta)
{
    const char *rule = json_string_value(json_object_get(meta, "shape_rule"));
    const json_t *shape = json_object_get(meta, "shape");
    size_t at = 0, i;
    json_t *d;
    if (!rule)
        return;
    snprintf(c->shape_rule, sizeof c->shape_rule, "%s", rule);
    json_array_foreach(shape, i, d)
        if (at < sizeof c->shape)
            at += (size_t)snprintf(c->shape + at, sizeof c->shape - at, "%s%lld", i ? "x" : "",
                                   (long long)json_integer_value(d));
}

/* Writes the meta JSON to its temporary file (committed with the outputs). */
static tw_status write_meta(conversion *c, tw_error *err)
{
    json_t *meta = json_object();
    if (!meta)
        return nomem(err);
    tw_status s = build_meta(c, meta, err);
    if (s == TW_OK)
        shape_text(c, meta);
    char *text = s == TW_OK ? json_dumps(meta, JSON_INDENT(2)) : NULL;
    json_decref(meta);
    if (s == TW_OK && !text)
        s = nomem(err);
    if (s == TW_OK)
        s = tw_atomic_file_create(c->meta_path, &c->meta, err);
    if (s == TW_OK)
        s = tw_write_all(tw_atomic_file_fd(c->meta), text, strlen(text), c->meta_path, err);
    if (s == TW_OK)
        s = tw_write_all(tw_atomic_file_fd(c->meta), "\n", 1, c->meta_path, err);
    free(text);
    return s;
}

/* ============================== conversion ============================== */

/* Renames every output into place; if one fails, removes those already renamed. */
static tw_status commit_all(conversion *c, tw_error *err)
{
    tw_atomic_file *files[3] = {c->train.file, c->has_test ? c->test.file : NULL, c->meta};
    for (size_t i = 0; i < 3; i++) {
        if (!files[i])
            continue;
        tw_status s = tw_atomic_file_commit(files[i], err);
        if (s == TW_OK)
            continue;
        for (size_t j = 0; j < i; j++)
            if (files[j])
                tw_fs_unlink(tw_atomic_file_path(files[j]));
        return s;
    }
    return TW_OK;
}

static tw_status finish(conversion *c, tw_error *err)
{
    TW_TRY(tw_tfrecord_writer_finish(c->train.writer, err));
    if (c->has_test)
        TW_TRY(tw_tfrecord_writer_finish(c->test.writer, err));
    TW_TRY(check_class_names(c, err));
    TW_TRY(write_meta(c, err));
    return commit_all(c, err);
}

/* Opens the sources: inputs are checked against each other before any output exists. */
static tw_status open_sources(conversion *c, tw_error *err)
{
    return tw_convert_src_open(c->o, c->kind, &c->train_src, &c->test_src, err);
}

static tw_status run(conversion *c, tw_error *err)
{
    const tw_convert_options *o = c->o;
    TW_TRY(tw_convert_check(o, &c->kind, err));
    if (!o->meta)
        TW_TRY(tw_convert_meta_path(o->output, c->meta_path, sizeof c->meta_path, err));
    else if (snprintf(c->meta_path, sizeof c->meta_path, "%s", o->meta) >= (int)sizeof c->meta_path)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "--meta path is too long");
    TW_TRY(open_sources(c, err));
    TW_TRY(tw_example_builder_create(&c->builder, err));
    c->has_test = o->test_output != NULL;
    TW_TRY(split_open(&c->train, o->output, o->compression, err));
    if (c->has_test)
        TW_TRY(split_open(&c->test, o->test_output, o->compression, err));
    TW_TRY(write_all(c, err));
    return finish(c, err);
}

tw_status tw_convert(const tw_convert_options *o, tw_convert_result *res, tw_error *err)
{
    conversion c;
    memset(&c, 0, sizeof c);
    c.o = o;
    tw_status s = run(&c, err);
    if (s == TW_OK && res) {
        memset(res, 0, sizeof *res);
        res->source = c.kind;
        res->train_count = c.train.count;
        res->test_count = c.test.count;
        res->has_test = c.has_test;
        snprintf(res->meta_path, sizeof res->meta_path, "%s", c.meta_path);
        memcpy(res->shape, c.shape, sizeof res->shape);
        memcpy(res->shape_rule, c.shape_rule, sizeof res->shape_rule);
    }
    split_cleanup(&c.train);
    split_cleanup(&c.test);
    tw_atomic_file_destroy(c.meta);
    tw_example_builder_destroy(c.builder);
    if (c.test_src) /* first: a TFRecord test source borrows the training source's schema */
        c.test_src->close(c.test_src);
    if (c.train_src)
        c.train_src->close(c.train_src);
    return s;
}

/* ============================ the meta, read back ============================ */

tw_status tw_convert_meta_load(const char *path, json_t **meta, tw_error *err)
{
    int fd = tw_fs_open(path, O_RDONLY, 0);
    if (fd < 0)
        return tw_fs_error(err, path, "cannot open the meta file");
    json_error_t je;
    *meta = json_loadfd(fd, 0, &je);
    close(fd);
    if (json_is_object(*meta))
        return TW_OK;
    json_decref(*meta);
    *meta = NULL;
    return tw_error_set_line(err, TW_ERR_CORRUPT, path, je.line, "not a meta file: %s", je.text);
}

json_t *tw_convert_meta_split(const json_t *meta, const char *split, const char *key)
{
    return json_object_get(json_object_get(json_object_get(meta, "splits"), split), key);
}

json_t *tw_convert_meta_shape(const json_t *meta)
{
    json_t *shape = json_object_get(meta, "shape");
    if (json_is_integer(shape))
        return json_pack("[O]", shape);
    return json_is_array(shape) && json_array_size(shape) ? json_copy(shape) : NULL;
}

/* dir/<the file name of the split's recorded path> into buf[size]; 0 when the meta records none. */
static int split_file(const json_t *meta, const char *split, const char *dir, char *buf, size_t size)
{
    const char *p = json_string_value(tw_convert_meta_split(meta, split, "path"));
    if (!p || !*p)
        return 0;
    const char *name = strrchr(p, '/');
    int n = snprintf(buf, size, "%s/%s", dir, name ? name + 1 : p);
    return n > 0 && (size_t)n < size;
}

json_t *tw_convert_meta_run_dataset(const json_t *meta, const char *dir, const char **why)
{
    char train[PATH_BYTES], test[PATH_BYTES];
    json_t *count = tw_convert_meta_split(meta, "test", "count");
    int has_test = json_is_integer(count) && json_integer_value(count) > 0;
    json_t *shape = tw_convert_meta_shape(meta);
    *why = !shape ? "the dataset has no known per-example shape"
           : !split_file(meta, "train", dir, train, sizeof train) ||
                   (has_test && !split_file(meta, "test", dir, test, sizeof test))
               ? "the dataset's meta names no training or test file"
               : NULL;
    if (*why) {
        json_decref(shape);
        return NULL;
    }
    const json_t *features = json_object_get(meta, "features");
    const char *image = json_object_get(features, "image_raw") ? "image_raw" : "features";
    return json_pack("{s:s, s:s?, s:s, s:s, s:o}", "train", train, "test", has_test ? test : NULL,
                     "image_feature", image, "label_feature", "label", "shape", shape);
}

const json_t *tw_convert_meta_class_names(const json_t *meta)
{
    const json_t *names = json_object_get(meta, "class_names");
    return json_is_array(names) && json_array_size(names) ? names : NULL;
}

const char *tw_convert_meta_test_method(const json_t *meta)
{
    const char *m = json_string_value(json_object_get(json_object_get(meta, "test_split"), "method"));
    if (m)
        return m;
    return tw_convert_meta_split(meta, "test", "count") ? "file" : "none";
}

tw_status tw_convert_meta_find(const char *train_path, json_t **meta, tw_error *err)
{
    char path[4096];
    struct stat st;
    TW_TRY(tw_convert_meta_path(train_path, path, sizeof path, err));
    if (tw_fs_stat(path, &st) != 0) {
        const char *slash = strrchr(train_path, '/');
        int n = slash ? (int)(slash - train_path) : 1;
        int w = snprintf(path, sizeof path, "%.*s/meta.json", n, slash ? train_path : ".");
        if (w < 0 || (size_t)w >= sizeof path)
            return tw_error_set(err, TW_ERR_INVALID, train_path, -1, "the path is too long");
    }
    return tw_convert_meta_load(path, meta, err);
}

json_t *tw_convert_class_names_of(const char *data_path)
{
    json_t *meta = NULL;
    if (tw_convert_meta_find(data_path, &meta, NULL) != TW_OK)
        return NULL; /* no meta: the classes go by their indices */
    json_t *names = (json_t *)tw_convert_meta_class_names(meta);
    json_incref(names);
    json_decref(meta);
    return names;
}
