/* convert_source.c — the converter's inputs as sources: IDX, CSV, NumPy and TFRecord readers behind one
 * small table of functions (next, describe, close). See convert_source.h.
 *
 * Owns: turning each reader's items into Examples (the features convert.h lists per source), the
 * per-source checks (paired inputs in step, shapes, non-finite values, the TFRecord schema) and each
 * source's part of the meta ("features", "shape", "dtype"). Does not own: parsing the files (idx.c, csv.c,
 * npy.c, tfrecord.c, example.c), the splits, the output files or the rest of the meta (convert.c).
 * Each Example is built in the caller's reused tw_example_builder whose features point at the reader's
 * item bytes and at scalars in the source struct, so a record costs no allocation and no copy before
 * protobuf-c packs it. A TFRecord source instead hands over each input record as it is, once checked
 * (parsed to compare its features with the first record's, then passed on unchanged: re-serializing could
 * reorder a map TensorFlow wrote). */
#include "convert_source.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csv.h"
#include "idx.h"
#include "npy.h"
#include "tfrecord.h"

static tw_status nomem(tw_error *err)
{
    return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

tw_status tw_convert_put(json_t *obj, const char *key, json_t *value, tw_error *err)
{
    TW_CHECK_FOREIGN(value && json_object_set_new(obj, key, value) == 0, err, TW_ERR_NOMEM,
                     "jansson");
    return TW_OK;
}

static tw_status put_features(json_t *meta, const char *const *names, const char *const *kinds,
                              size_t n, tw_error *err)
{
    json_t *f = json_object();
    TW_TRY(tw_convert_put(meta, "features", f, err));
    for (size_t i = 0; i < n; i++)
        TW_TRY(tw_convert_put(f, names[i], json_string(kinds[i]), err));
    return TW_OK;
}

static const char *label_kind(const tw_convert_src *s) { return s->int_labels ? "int64" : "float"; }

/* Adds the label feature: int64 from label->i, or float from label->f, through the source's slots. */
static tw_status add_label(tw_convert_src *s, tw_example_builder *b, const tw_label_value *label,
                           tw_error *err)
{
    if (s->int_labels) {
        s->label_i = label->i;
        return tw_example_add_int64s(b, "label", &s->label_i, 1, err);
    }
    s->label_f = (float)label->f;
    return tw_example_add_floats(b, "label", &s->label_f, 1, err);
}

/* Advances two readers that hold the same number of items: both end together (the second one's end is
 * still checked for trailing data). a and b are their statuses, b from a call made only if a was OK or
 * TW_END. */
static tw_status lockstep(tw_status a, tw_status b, tw_error *err)
{
    if (b < 0)
        return b;
    if (a != b)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "paired inputs ended apart");
    return a;
}

/* ---- idx ---- */

typedef struct {
    tw_convert_src base;
    tw_idx_reader *images, *labels;
    int64_t dims[4];       /* size, height, width, depth: borrowed by every Example */
} idx_source;

static uint32_t idx_magic(const tw_idx_header *h) { return (uint32_t)h->type << 8 | (uint32_t)h->rank; }

static tw_status idx_next(tw_convert_src *s, tw_example_builder *b, tw_label_value *label, tw_error *err)
{
    idx_source *x = (idx_source *)s;
    const uint8_t *image, *lab;
    tw_status si = tw_idx_next(x->images, &image, err);
    if (si < 0)
        return si;
    TW_TRY(lockstep(si, tw_idx_next(x->labels, &lab, err), err));
    label->i = lab[0];
    label->f = lab[0];
    TW_TRY(tw_example_add_bytes1(b, "image_raw", image, (size_t)x->dims[0], err));
    TW_TRY(add_label(s, b, label, err));
    static const char *const names[4] = {"size", "height", "width", "depth"};
    for (int i = 0; i < 4; i++)
        TW_TRY(tw_example_add_int64s(b, names[i], &x->dims[i], 1, err));
    return TW_OK;
}

static tw_status idx_describe(const tw_convert_src *s, json_t *meta, tw_error *err)
{
    const idx_source *x = (const idx_source *)s;
    static const char *const names[] = {"image_raw", "label", "size", "height", "width", "depth"};
    static const char *const kinds[] = {"bytes", "int64", "int64", "int64", "int64", "int64"};
    TW_TRY(put_features(meta, names, kinds, 6, err));
    TW_TRY(tw_convert_put(meta, "shape", json_pack("[III]", (json_int_t)x->dims[1], (json_int_t)x->dims[2],
                                        (json_int_t)x->dims[3]), err));
    return tw_convert_put(meta, "dtype", json_string("uint8"), err);
}

static void idx_close(tw_convert_src *s)
{
    idx_source *x = (idx_source *)s;
    tw_idx_close(x->images);
    tw_idx_close(x->labels);
    free(x);
}

/* Images must be idx3/idx4, labels idx1, with equal counts. */
static tw_status idx_check(const idx_source *x, tw_error *err)
{
    const tw_idx_header *hi = tw_idx_reader_header(x->images), *hl = tw_idx_reader_header(x->labels);
    if (hi->rank != 3 && hi->rank != 4)
        return tw_error_set(err, TW_ERR_INVALID, tw_idx_reader_name(x->images), 0,
                            "not an IDX images file: magic 0x%08x has %d dimensions (expected "
                            "0x00000803 or 0x00000804)", idx_magic(hi), hi->rank);
    if (hl->rank != 1)
        return tw_error_set(err, TW_ERR_INVALID, tw_idx_reader_name(x->labels), 0,
                            "not an IDX labels file: magic 0x%08x has %d dimensions (expected "
                            "0x00000801)", idx_magic(hl), hl->rank);
    if (hi->count != hl->count)
        return tw_error_set(err, TW_ERR_INVALID, tw_idx_reader_name(x->labels), 4,
                            "the labels file declares %llu labels but the images file %s declares "
                            "%llu images", (unsigned long long)hl->count,
                            tw_idx_reader_name(x->images), (unsigned long long)hi->count);
    return TW_OK;
}

static tw_status idx_open(const char *images, const char *labels, uint64_t max_bytes,
                          tw_convert_src **out, tw_error *err)
{
    idx_source *x = calloc(1, sizeof *x);
    if (!x)
        return nomem(err);
    x->base = (tw_convert_src){"idx", 0, 1, idx_next, idx_describe, idx_close, 0, 0, 0, NULL, 0, NULL};
    *out = &x->base;
    TW_TRY(tw_idx_open(images, max_bytes, &x->images, err));
    TW_TRY(tw_idx_open(labels, max_bytes, &x->labels, err));
    TW_TRY(idx_check(x, err));
    const tw_idx_header *h = tw_idx_reader_header(x->images);
    x->base.count = h->count;
    x->dims[0] = (int64_t)h->item_bytes;
    x->dims[1] = h->dims[1];
    x->dims[2] = h->dims[2];
    x->dims[3] = h->rank == 4 ? h->dims[3] : 1;
    return TW_OK;
}

/* The test pair must hold images of the training images' shape. */
static tw_status idx_same_shape(const tw_convert_src *train, const tw_convert_src *test, tw_error *err)
{
    const idx_source *a = (const idx_source *)train, *b = (const idx_source *)test;
    if (!memcmp(a->dims, b->dims, sizeof a->dims))
        return TW_OK;
    return tw_error_set(err, TW_ERR_INVALID, tw_idx_reader_name(b->images), 8,
                        "test images are %lldx%lldx%lld but the training images are "
                        "%lldx%lldx%lld", (long long)b->dims[1], (long long)b->dims[2],
                        (long long)b->dims[3], (long long)a->dims[1], (long long)a->dims[2],
                        (long long)a->dims[3]);
}

/* ---- csv ---- */

typedef struct {
    tw_convert_src base;
    tw_csv_reader *r;
    tw_csv_schema schema;
    float *features;   /* [schema.n_features] the current row, borrowed by the Example */
    uint64_t rows;     /* rows yielded in pass 2 */
} csv_source;

static tw_status csv_changed(const csv_source *x, tw_error *err)
{
    return tw_error_set_line(err, TW_ERR_INVALID, tw_csv_name(x->r), tw_csv_line(x->r),
                             "the file changed between the validation pass and the writing pass");
}

static tw_status csv_next(tw_convert_src *s, tw_example_builder *b, tw_label_value *label, tw_error *err)
{
    csv_source *x = (csv_source *)s;
    tw_csv_label cell;
    tw_status st = tw_csv_next_example(x->r, &x->schema, x->features, &cell, err);
    if (st == TW_END)
        return x->rows == x->schema.rows ? TW_END : csv_changed(x, err);
    TW_TRY(st);
    if (++x->rows > x->schema.rows || (s->int_labels && !cell.is_int))
        return csv_changed(x, err);
    label->i = cell.i;
    label->f = cell.f;
    TW_TRY(tw_example_add_floats(b, "features", x->features, x->schema.n_features, err));
    return add_label(s, b, label, err);
}

static tw_status csv_describe(const tw_convert_src *s, json_t *meta, tw_error *err)
{
    const csv_source *x = (const csv_source *)s;
    const char *const names[] = {"features", "label"};
    const char *const kinds[] = {"float", label_kind(s)};
    TW_TRY(put_features(meta, names, kinds, 2, err));
    TW_TRY(tw_convert_put(meta, "shape", json_integer((json_int_t)x->schema.n_features), err));
    TW_TRY(tw_convert_put(meta, "dtype", json_string("float32"), err));
    json_t *columns = json_array(); /* the feature columns' names, in the order of the features list */
    for (size_t c = 0; columns && c < x->schema.n_features + 1; c++) {
        if (c == x->schema.label_column)
            continue;
        json_t *name = json_string(tw_csv_column_name(x->r, c)); /* NULL: not UTF-8 */
        json_array_append_new(columns, name ? name : json_sprintf("column %zu", c + 1));
    }
    TW_TRY(tw_convert_put(meta, "feature_names", columns, err));
    return tw_convert_put(meta, "label_column",
               json_string(tw_csv_column_name(x->r, x->schema.label_column)), err);
}

static void csv_close(tw_convert_src *s)
{
    csv_source *x = (csv_source *)s;
    tw_csv_close(x->r);
    free(x->features);
    free(x);
}

static tw_status csv_open(const char *path, const char *label_column, uint64_t max_bytes,
                          int allow_nonfinite, tw_convert_src **out, tw_error *err)
{
    csv_source *x = calloc(1, sizeof *x);
    if (!x)
        return nomem(err);
    x->base = (tw_convert_src){"csv", 0, 1, csv_next, csv_describe, csv_close, 0, 0, 0, NULL, 0, NULL};
    *out = &x->base;
    TW_TRY(tw_csv_open(path, max_bytes, &x->r, err));
    tw_csv_allow_nonfinite(x->r, allow_nonfinite);
    TW_TRY(tw_csv_scan(x->r, label_column, &x->schema, err));
    if (!(x->features = malloc(x->schema.n_features * sizeof *x->features)))
        return nomem(err);
    x->base.count = x->schema.rows;
    x->base.int_labels = x->schema.int_labels;
    return TW_OK;
}

/* The test CSV has the training CSV's header (same names, same order); its labels are written with the
 * training file's label kind (integer labels in a float-labelled dataset become floats). */
static tw_status csv_same_columns(const tw_convert_src *train, tw_convert_src *test, tw_error *err)
{
    const csv_source *a = (const csv_source *)train, *b = (const csv_source *)test;
    size_t n = tw_csv_columns(a->r);
    for (size_t i = 0; i < n || i < tw_csv_columns(b->r); i++) {
        const char *x = i < n ? tw_csv_column_name(a->r, i) : "(none)";
        const char *y = i < tw_csv_columns(b->r) ? tw_csv_column_name(b->r, i) : "(none)";
        if (strcmp(x, y))
            return tw_error_set_line(err, TW_ERR_INVALID, tw_csv_name(b->r), 1,
                                     "column %zu is '%s' but '%s' in the training CSV %s", i + 1, y, x,
                                     tw_csv_name(a->r));
    }
    if (train->int_labels && !test->int_labels)
        return tw_error_set(err, TW_ERR_INVALID, tw_csv_name(b->r), -1,
                            "the labels are not all integers, but the training CSV's are");
    test->int_labels = train->int_labels;
    return TW_OK;
}

/* ---- npy ---- */

typedef struct {
    tw_convert_src base;
    tw_npy_reader *features, *labels;
    int64_t shape[TW_NPY_MAX_RANK]; /* per-example dims, borrowed by every Example */
    size_t rank;                    /* per-example rank (features rank - 1) */
    const char *dtype;              /* "uint8" or "float32", borrowed by every Example */
    int allow_nonfinite;            /* float32 features may hold NaN / Inf */
    uint64_t row;                   /* examples read so far */
} npy_source;

static uint64_t get_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

/* Decodes one little-endian label element of dtype d. */
static void npy_label(tw_npy_dtype d, const uint8_t *p, tw_label_value *out)
{
    uint64_t bits = get_le(p, tw_npy_dtype_size(d));
    uint32_t b32 = (uint32_t)bits;
    float f32;
    double f64;
    switch (d) {
    case TW_NPY_UINT8: out->i = (int64_t)bits; break;
    case TW_NPY_INT32: out->i = (int32_t)b32; break;
    case TW_NPY_INT64: out->i = (int64_t)bits; break;
    case TW_NPY_FLOAT32: memcpy(&f32, &b32, 4); out->f = f32; return;
    case TW_NPY_FLOAT64: memcpy(&f64, &bits, 8); out->f = f64; return;
    }
    out->f = (double)out->i;
}

/* The end of every refusal of a non-finite feature, and how the value is named in it. */
#define NONFINITE_REFUSED "non-finite features are refused unless allowed (--allow-nonfinite)"

static const char *nonfinite_name(float v) { return isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf"; }

/* "(row, i1, i2, ...)": the NumPy index of element k of example `row` (per-example dims x->shape). */
static void npy_index_text(const npy_source *x, uint64_t row, uint64_t k, char *buf, size_t size)
{
    uint64_t idx[TW_NPY_MAX_RANK];
    for (size_t d = x->rank; d-- > 0;) {
        idx[d] = k % (uint64_t)x->shape[d];
        k /= (uint64_t)x->shape[d];
    }
    int n = snprintf(buf, size, "(%llu", (unsigned long long)row);
    for (size_t d = 0; d < x->rank && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, ", %llu", (unsigned long long)idx[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ")");
}

/* Refuses the first NaN or Inf among the item's float32 values, naming its row, element and byte. */
static tw_status npy_finite(const npy_source *x, const uint8_t *item, tw_error *err)
{
    const tw_npy_header *h = tw_npy_reader_header(x->features);
    for (uint64_t k = 0; k < h->item_bytes / 4; k++) {
        uint32_t bits = (uint32_t)get_le(item + 4 * k, 4);
        float v;
        memcpy(&v, &bits, 4);
        if (isfinite(v))
            continue;
        char index[TW_NPY_MAX_RANK * 22 + 4];
        npy_index_text(x, x->row, k, index, sizeof index);
        return tw_error_set(err, TW_ERR_INVALID, tw_npy_reader_name(x->features),
                            (int64_t)(h->header_bytes + x->row * h->item_bytes + 4 * k),
                            "row %llu, element %llu (index %s) is %s; " NONFINITE_REFUSED,
                            (unsigned long long)x->row, (unsigned long long)k, index,
                            nonfinite_name(v));
    }
    return TW_OK;
}

static tw_status npy_next(tw_convert_src *s, tw_example_builder *b, tw_label_value *label, tw_error *err)
{
    npy_source *x = (npy_source *)s;
    const uint8_t *item, *lab;
    tw_status sf = tw_npy_next(x->features, &item, err);
    if (sf < 0)
        return sf;
    TW_TRY(lockstep(sf, tw_npy_next(x->labels, &lab, err), err));
    const tw_npy_header *hf = tw_npy_reader_header(x->features);
    if (hf->dtype == TW_NPY_FLOAT32 && !x->allow_nonfinite)
        TW_TRY(npy_finite(x, item, err));
    const tw_npy_header *hl = tw_npy_reader_header(x->labels);
    npy_label(hl->dtype, lab, label);
    if (!isfinite(label->f))
        return tw_error_set(err, TW_ERR_INVALID, tw_npy_reader_name(x->labels),
                            (int64_t)(hl->header_bytes + x->row * hl->item_bytes),
                            "row %llu: the label is %g: labels must be finite numbers",
                            (unsigned long long)x->row, label->f);
    x->row++;
    TW_TRY(tw_example_add_bytes1(b, "image_raw", item, (size_t)hf->item_bytes, err));
    TW_TRY(tw_example_add_int64s(b, "shape", x->shape, x->rank, err));
    TW_TRY(tw_example_add_bytes1(b, "dtype", x->dtype, strlen(x->dtype), err));
    return add_label(s, b, label, err);
}

static tw_status npy_describe(const tw_convert_src *s, json_t *meta, tw_error *err)
{
    const npy_source *x = (const npy_source *)s;
    const char *const names[] = {"image_raw", "shape", "dtype", "label"};
    const char *const kinds[] = {"bytes", "int64", "bytes", label_kind(s)};
    TW_TRY(put_features(meta, names, kinds, 4, err));
    json_t *shape = json_array();
    TW_TRY(tw_convert_put(meta, "shape", shape, err));
    for (size_t i = 0; i < x->rank; i++)
        TW_CHECK_FOREIGN(json_array_append_new(shape, json_integer(x->shape[i])) == 0, err,
                         TW_ERR_NOMEM, "jansson");
    return tw_convert_put(meta, "dtype", json_string(x->dtype), err);
}

static void npy_close(tw_convert_src *s)
{
    npy_source *x = (npy_source *)s;
    tw_npy_close(x->features);
    tw_npy_close(x->labels);
    free(x);
}

static int64_t dict_offset(const tw_npy_header *h) { return h->major == 1 ? 10 : 12; }

/* Features: uint8 or float32, rank >= 1. Labels: one number per example. Equal first dimensions. */
static tw_status npy_check(const npy_source *x, tw_error *err)
{
    const tw_npy_header *hf = tw_npy_reader_header(x->features);
    const tw_npy_header *hl = tw_npy_reader_header(x->labels);
    const char *nf = tw_npy_reader_name(x->features), *nl = tw_npy_reader_name(x->labels);
    if (hf->dtype != TW_NPY_UINT8 && hf->dtype != TW_NPY_FLOAT32)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, nf, dict_offset(hf),
                            "features of dtype %s are not supported (uint8 '|u1' or float32 '<f4')",
                            tw_npy_dtype_name(hf->dtype));
    if (hl->rank > 2 || (hl->rank == 2 && hl->shape[1] != 1))
        return tw_error_set(err, TW_ERR_UNSUPPORTED, nl, dict_offset(hl),
                            "labels must have shape (N,) or (N, 1): one number per example");
    if (hf->count != hl->count)
        return tw_error_set(err, TW_ERR_INVALID, nl, dict_offset(hl),
                            "the labels have %llu rows but the features %s have %llu",
                            (unsigned long long)hl->count, nf, (unsigned long long)hf->count);
    return TW_OK;
}

static tw_status npy_open(const char *features, const char *labels, uint64_t max_bytes,
                          int allow_nonfinite, tw_convert_src **out, tw_error *err)
{
    npy_source *x = calloc(1, sizeof *x);
    if (!x)
        return nomem(err);
    x->base = (tw_convert_src){"npy", 0, 1, npy_next, npy_describe, npy_close, 0, 0, 0, NULL, 0, NULL};
    *out = &x->base;
    TW_TRY(tw_npy_open(features, max_bytes, &x->features, err));
    TW_TRY(tw_npy_open(labels, max_bytes, &x->labels, err));
    TW_TRY(npy_check(x, err));
    const tw_npy_header *hf = tw_npy_reader_header(x->features);
    tw_npy_dtype dl = tw_npy_reader_header(x->labels)->dtype;
    x->base.count = hf->count;
    x->base.int_labels = dl != TW_NPY_FLOAT32 && dl != TW_NPY_FLOAT64;
    x->rank = (size_t)hf->rank - 1;
    for (size_t i = 0; i < x->rank; i++)
        x->shape[i] = (int64_t)hf->shape[i + 1];
    x->dtype = tw_npy_dtype_name(hf->dtype);
    x->allow_nonfinite = allow_nonfinite;
    return TW_OK;
}

/* The test pair holds examples of the training features' per-example shape and dtype, and labels of
 * the same kind (integer labels in a float-labelled dataset become floats). */
static tw_status npy_same_shape(const tw_convert_src *train, tw_convert_src *test, tw_error *err)
{
    const npy_source *a = (const npy_source *)train, *b = (const npy_source *)test;
    const tw_npy_header *hb = tw_npy_reader_header(b->features);
    if (a->rank != b->rank || memcmp(a->shape, b->shape, a->rank * sizeof *a->shape) ||
        strcmp(a->dtype, b->dtype))
        return tw_error_set(err, TW_ERR_INVALID, tw_npy_reader_name(b->features), dict_offset(hb),
                            "the test features are %s of another per-example shape or dtype than the "
                            "training features %s (%s)", b->dtype, tw_npy_reader_name(a->features), a->dtype);
    if (train->int_labels && !test->int_labels)
        return tw_error_set(err, TW_ERR_INVALID, tw_npy_reader_name(b->labels), -1,
                            "the test labels are floats, but the training labels are integers");
    test->int_labels = train->int_labels;
    return TW_OK;
}

/* ---- tfrecord ----
 * The records are validated and passed through as they are. The first record of the training file is
 * the schema: its features, sorted by name for lookups, which every record (the test file's too) must
 * have exactly, each once, with the same kinds. It also gives the label kind and the layout (shape and
 * dtype) the meta reports, which holds only if every record agrees. */

enum { MAX_RANK = TW_CONVERT_MAX_RANK };

/* The features the layout and the labels are read from, by name and kind. */
typedef enum {
    ROLE_OTHER, ROLE_LABEL, ROLE_HEIGHT, ROLE_WIDTH, ROLE_DEPTH, ROLE_SHAPE, ROLE_FEATURES,
    ROLE_IMAGE, ROLE_SIZE, N_ROLES
} feature_role;

static feature_role role_of(const char *name, tw_feature_kind kind)
{
    static const struct {
        const char *name;
        tw_feature_kind kind;
        feature_role role;
    } roles[] = {
        {"label", TW_FEATURE_INT64, ROLE_LABEL},     {"label", TW_FEATURE_FLOAT, ROLE_LABEL},
        {"height", TW_FEATURE_INT64, ROLE_HEIGHT},   {"width", TW_FEATURE_INT64, ROLE_WIDTH},
        {"depth", TW_FEATURE_INT64, ROLE_DEPTH},     {"shape", TW_FEATURE_INT64, ROLE_SHAPE},
        {"features", TW_FEATURE_FLOAT, ROLE_FEATURES}, {"image_raw", TW_FEATURE_BYTES, ROLE_IMAGE},
        {"image_raw", TW_FEATURE_FLOAT, ROLE_IMAGE}, {"size", TW_FEATURE_INT64, ROLE_SIZE},
    };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (roles[i].kind == kind && !strcmp(roles[i].name, name))
            return roles[i].role;
    return ROLE_OTHER;
}

/* The shape and dtype one record shows (see convert.h). */
typedef struct {
    int known;             /* a shape was found */
    size_t rank;
    int64_t dims[MAX_RANK];
    const char *dtype;     /* "uint8", "float32" or NULL */
    char rule[128];        /* which rule gave the shape, in words (the meta's "shape_rule") */
} layout;

static int one_int64(const tw_feature *f) { return f->kind == TW_FEATURE_INT64 && f->count == 1; }

/* The largest s with s * s <= n (n >= 0). */
static int64_t isqrt(int64_t n)
{
    int64_t s = (int64_t)sqrt((double)n);
    while (s * s > n)
        s--;
    while ((s + 1) * (s + 1) <= n)
        s++;
    return s;
}

/* n values as a shape: a square of one or of three channels, else a vector (see "TFRecord shapes" in
 * convert.h); `from` says where n came from. */
static void layout_of_count(layout *l, int64_t n, const char *from)
{
    int64_t c = 1, s = n > 0 && n <= (INT64_C(1) << 60) ? isqrt(n) : 0;
    if (s && s * s != n && n % 3 == 0) {
        c = 3;
        s = isqrt(n / 3);
    }
    if (s && s * s * c == n) {
        *l = (layout){.rank = 3, .dims = {s, s, c}};
        snprintf(l->rule, sizeof l->rule, "%s: %lld = %s%lld x %lld, a square image of %s", from, (long long)n,
                 c == 3 ? "3 x " : "", (long long)s, (long long)s, c == 3 ? "three channels" : "one channel");
        return;
    }
    *l = (layout){.rank = 1, .dims = {n}};
    snprintf(l->rule, sizeof l->rule, "%s: %lld is no square image, so a vector of %lld values", from,
             (long long)n, (long long)n);
}

/* The shape rules before the size rule: height/width(/depth), an int64 list shape, a float list
 * features. Returns 0 when none applies. */
static int layout_of_features(const tw_feature got[N_ROLES], layout *l)
{
    const tw_feature *h = &got[ROLE_HEIGHT], *w = &got[ROLE_WIDTH], *d = &got[ROLE_DEPTH];
    const tw_feature *shape = &got[ROLE_SHAPE], *fl = &got[ROLE_FEATURES];
    if (one_int64(h) && one_int64(w) && (d->kind == TW_FEATURE_NONE || one_int64(d))) {
        *l = (layout){.rank = 3, .dims = {h->int64s[0], w->int64s[0], d->kind == TW_FEATURE_NONE ? 1 : d->int64s[0]}};
        snprintf(l->rule, sizeof l->rule, "the features height, width%s", d->kind == TW_FEATURE_NONE
                                                                              ? " (depth 1)" : " and depth");
    } else if (shape->kind == TW_FEATURE_INT64 && shape->count <= MAX_RANK) {
        *l = (layout){.rank = shape->count};
        if (l->rank)
            memcpy(l->dims, shape->int64s, l->rank * sizeof *l->dims);
        snprintf(l->rule, sizeof l->rule, "the int64 list feature shape");
    } else if (fl->kind == TW_FEATURE_FLOAT) {
        *l = (layout){.rank = 1, .dims = {(int64_t)fl->count}};
        snprintf(l->rule, sizeof l->rule, "the length of the float list feature features");
    } else {
        return 0;
    }
    return 1;
}

/* got[role]: the record's feature of each role (kind TW_FEATURE_NONE where it has none); given: the
 * conversion's options, whose shape (--shape) is taken when it has one, else the shape is inferred. */
static void layout_of(const tw_feature got[N_ROLES], const tw_convert_options *given, layout *l)
{
    const tw_feature *im = &got[ROLE_IMAGE], *size = &got[ROLE_SIZE];
    size_t len = 0;
    if (im->kind == TW_FEATURE_BYTES && im->count == 1)
        tw_feature_bytes_at(im, 0, &len);
    memset(l, 0, sizeof *l);
    if (given->shape_rank) {
        l->rank = given->shape_rank;
        memcpy(l->dims, given->shape, l->rank * sizeof *l->dims);
        snprintf(l->rule, sizeof l->rule, "given");
    } else if (!layout_of_features(got, l)) {
        if (one_int64(size))
            layout_of_count(l, size->int64s[0], "the feature size");
        else if (im->kind == TW_FEATURE_BYTES && im->count == 1 && len > 0 && len <= INT64_MAX)
            layout_of_count(l, (int64_t)len, "image_raw's length in bytes");
        else
            return;
    }
    uint64_t n = 1; /* product of the dims; 4 * n cannot overflow */
    for (size_t i = 0; i < l->rank; i++) {
        if (l->dims[i] < 0 || (l->dims[i] && n > (UINT64_MAX / 4) / (uint64_t)l->dims[i]))
            return;
        n *= (uint64_t)l->dims[i];
    }
    l->known = 1;
    const tw_feature *fl = &got[ROLE_FEATURES];
    if (im->kind == TW_FEATURE_BYTES && im->count == 1 && len == n)
        l->dtype = "uint8";
    else if ((im->kind == TW_FEATURE_BYTES && im->count == 1 && len == 4 * n) ||
             (im->kind == TW_FEATURE_FLOAT && im->count == n) ||
             (fl->kind == TW_FEATURE_FLOAT && fl->count == n))
        l->dtype = "float32";
}

static int layout_equal(const layout *a, const layout *b)
{
    return a->known == b->known && a->rank == b->rank &&
           !memcmp(a->dims, b->dims, a->rank * sizeof *a->dims) &&
           (a->dtype && b->dtype ? !strcmp(a->dtype, b->dtype) : a->dtype == b->dtype);
}

typedef struct {
    const char *name;      /* borrowed from schema.first */
    tw_feature_kind kind;
    feature_role role;
    uint64_t stamp;        /* the last record (schema.stamp) it was seen in */
} schema_entry;

typedef struct {
    const char *path;      /* the file of the first record (borrowed from the options) */
    tw_example *first;     /* owned: the training file's first record */
    size_t n;              /* features per record */
    schema_entry *sorted;  /* [n] by name */
    const char **names;    /* [n] in the first record's order, for the meta; strings borrowed */
    const char **kinds;    /* [n] likewise */
    uint64_t stamp;        /* records matched so far */
    tw_feature_kind labels; /* INT64 or FLOAT: one label value per record; NONE: no label stats */
    layout first_layout;
    int same_layout;       /* every record so far had first_layout */
} schema;

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const schema_entry *)a)->name, ((const schema_entry *)b)->name);
}

static schema_entry *schema_find(const schema *sc, const char *name)
{
    const schema_entry key = {name, TW_FEATURE_NONE, ROLE_OTHER, 0};
    return bsearch(&key, sc->sorted, sc->n, sizeof key, entry_cmp);
}

/* Takes ownership of first. Errors (TW_ERR_INVALID, TW_ERR_NOMEM) carry no file or offset: the
 * caller labels them with the record. */
static tw_status schema_init(schema *sc, const char *path, tw_example *first, tw_error *err)
{
    sc->path = path;
    sc->first = first;
    sc->n = tw_example_feature_count(first);
    if (sc->n == 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "the first Example has no features: nothing to train on");
    sc->sorted = calloc(sc->n, sizeof *sc->sorted);
    sc->names = calloc(sc->n, sizeof *sc->names);
    sc->kinds = calloc(sc->n, sizeof *sc->kinds);
    if (!sc->sorted || !sc->names || !sc->kinds)
        return nomem(err);
    for (size_t i = 0; i < sc->n; i++) {
        tw_feature f;
        tw_example_feature_at(first, i, &f);
        json_t *probe = json_string(f.name); /* the meta needs UTF-8 names */
        if (!probe)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "feature %zu has a name that is not UTF-8 text", i);
        json_decref(probe);
        sc->names[i] = f.name;
        sc->kinds[i] = tw_feature_kind_name(f.kind);
        sc->sorted[i] = (schema_entry){f.name, f.kind, role_of(f.name, f.kind), 0};
    }
    qsort(sc->sorted, sc->n, sizeof *sc->sorted, entry_cmp);
    for (size_t i = 1; i < sc->n; i++)
        if (!strcmp(sc->sorted[i - 1].name, sc->sorted[i].name))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "feature '%s' appears twice",
                                sc->sorted[i].name);
    tw_feature label;
    sc->labels = tw_example_find(first, "label", &label) && label.count == 1 &&
                         role_of("label", label.kind) == ROLE_LABEL
                     ? label.kind
                     : TW_FEATURE_NONE;
    return TW_OK;
}

static void schema_cleanup(schema *sc)
{
    tw_example_destroy(sc->first);
    free(sc->sorted);
    free(sc->names);
    free(sc->kinds);
}

/* Checks that ex has exactly the schema's features (names once each, kinds equal) and fills
 * got[role] with its features of each role. Errors: TW_ERR_INVALID, without file or offset. */
static tw_status schema_match(schema *sc, const tw_example *ex, tw_feature got[N_ROLES],
                              tw_error *err)
{
    memset(got, 0, N_ROLES * sizeof *got);
    uint64_t stamp = ++sc->stamp;
    size_t n = tw_example_feature_count(ex);
    for (size_t i = 0; i < n; i++) {
        tw_feature f;
        tw_example_feature_at(ex, i, &f);
        schema_entry *e = schema_find(sc, f.name);
        if (!e)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "feature '%s' is not in the first record of %s", f.name, sc->path);
        if (e->stamp == stamp)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "feature '%s' appears twice",
                                f.name);
        if (f.kind != e->kind)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "feature '%s' is %s but %s in the first record of %s", f.name,
                                tw_feature_kind_name(f.kind), tw_feature_kind_name(e->kind),
                                sc->path);
        e->stamp = stamp;
        got[e->role] = f;
    }
    if (n < sc->n)
        for (size_t j = 0; j < sc->n; j++)
            if (sc->sorted[j].stamp != stamp)
                return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                    "feature '%s' (%s) of the first record of %s is missing",
                                    sc->sorted[j].name, tw_feature_kind_name(sc->sorted[j].kind),
                                    sc->path);
    return TW_OK;
}

typedef struct {
    tw_convert_src base;
    const char *path;            /* borrowed from the options */
    tw_tfrecord_options ropts;
    tw_tfrecord_reader *r;
    schema *sch;                 /* &own, or the training file's schema for the test file */
    schema own;
    tw_example *ex;              /* owned: the current record, parsed */
    uint64_t index;              /* records read in this pass */
    int counted;                 /* base.count comes from a counting pass */
    int allow_nonfinite;         /* float lists may hold NaN / Inf */
    const tw_convert_options *given; /* borrowed: the shape given (--shape), if any */
} tfr_source;

/* Makes *err (status s) about record `index` at byte `at` of path: "record N: " + its message. */
static tw_status at_record(tw_status s, tw_error *err, const char *path, uint64_t index,
                           uint64_t at)
{
    if (!err)
        return s;
    char msg[sizeof err->message];
    snprintf(msg, sizeof msg, "%s", err->message);
    int errno_value = err->errno_value;
    tw_error_set(err, s, path, (int64_t)at, "record %llu: %s", (unsigned long long)index, msg);
    err->errno_value = errno_value;
    err->record = (int64_t)index;
    return s;
}

/* The error for a record whose image_raw does not hold the --shape given (l: its layout). */
static tw_status shape_refused(const layout *l, const tw_feature *im, tw_error *err)
{
    char dims[MAX_RANK * 21] = "";
    uint64_t n = 1;
    for (size_t i = 0, at = 0; i < l->rank; i++) {
        at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%lld", i ? "x" : "", (long long)l->dims[i]);
        n *= (uint64_t)l->dims[i];
    }
    size_t len = 0;
    if (im->kind == TW_FEATURE_BYTES && im->count == 1)
        tw_feature_bytes_at(im, 0, &len);
    char got[96];
    if (im->kind == TW_FEATURE_NONE)
        snprintf(got, sizeof got, "it has no image_raw");
    else if (im->kind == TW_FEATURE_BYTES && im->count == 1)
        snprintf(got, sizeof got, "its image_raw holds %zu bytes", len);
    else
        snprintf(got, sizeof got, "its image_raw is a list of %zu %s", im->count,
                 im->kind == TW_FEATURE_BYTES ? "byte strings" : "floats");
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                        "the shape given, %s, is %llu values: image_raw must hold %llu bytes (uint8) or %llu (float32), "
                        "but %s", dims, (unsigned long long)n, (unsigned long long)n, (unsigned long long)(4 * n),
                        got);
}

/* Parses and checks the record just read; fills *label. */
static tw_status tfr_check(tfr_source *x, const uint8_t *data, size_t len, tw_label_value *label,
                           tw_error *err)
{
    schema *sc = x->sch;
    tw_example *ex;
    tw_example_destroy(x->ex);
    x->ex = NULL;
    tw_status s = tw_example_parse(data, len, NULL, -1, &ex, err);
    if (s == TW_ERR_CORRUPT)
        return tw_error_set(err, s, NULL, -1,
                            "not a tf.train.Example: its %zu bytes do not parse as one", len);
    TW_TRY(s);
    if (!sc->first)
        TW_TRY(schema_init(sc, x->path, ex, err));
    else
        x->ex = ex;
    tw_feature got[N_ROLES];
    TW_TRY(schema_match(sc, x->ex ? x->ex : sc->first, got, err));
    layout l;
    layout_of(got, x->given, &l);
    if (x->given->shape_rank && !l.dtype)
        return shape_refused(&l, &got[ROLE_IMAGE], err);
    if (sc->stamp == 1) {
        sc->first_layout = l;
        sc->same_layout = 1;
    } else if (!layout_equal(&l, &sc->first_layout)) {
        sc->same_layout = 0;
    }
    if (sc->labels == TW_FEATURE_NONE)
        return TW_OK;
    const tw_feature *f = &got[ROLE_LABEL];
    if (f->count != 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "feature 'label' has %zu values; the first record of %s has one",
                            f->count, sc->path);
    label->i = f->kind == TW_FEATURE_INT64 ? f->int64s[0] : 0;
    label->f = f->kind == TW_FEATURE_INT64 ? (double)f->int64s[0] : f->floats[0];
    if (!isfinite(label->f))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "feature 'label' is %g: labels must be finite numbers", label->f);
    return TW_OK;
}

/* Refuses the first NaN or Inf in the float lists of the record just checked, naming the feature and
 * the value's index in it (the caller adds the record). */
static tw_status tfr_finite(const tfr_source *x, tw_error *err)
{
    const tw_example *ex = x->ex ? x->ex : x->sch->first;
    for (size_t i = 0; i < tw_example_feature_count(ex); i++) {
        tw_feature f;
        tw_example_feature_at(ex, i, &f);
        for (size_t k = 0; f.kind == TW_FEATURE_FLOAT && k < f.count; k++)
            if (!isfinite(f.floats[k]))
                return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                    "feature '%s' value %zu is %s; " NONFINITE_REFUSED, f.name, k,
                                    nonfinite_name(f.floats[k]));
    }
    return TW_OK;
}

/* Reads, parses and checks the next record; TW_END at the clean end of the file. */
static tw_status tfr_read(tfr_source *x, tw_label_value *label, tw_error *err)
{
    uint64_t index = x->index, at = tw_tfrecord_reader_offset(x->r);
    const uint8_t *data;
    size_t len;
    tw_status s = tw_tfrecord_read(x->r, &data, &len, err);
    if (s == TW_END)
        return TW_END;
    if (s == TW_OK)
        s = tfr_check(x, data, len, label, err);
    if (s == TW_OK && !x->allow_nonfinite)
        s = tfr_finite(x, err);
    if (s != TW_OK)
        return at_record(s, err, x->path, index, at);
    x->index++;
    x->base.record = data;
    x->base.record_len = len;
    return TW_OK;
}

static tw_status tfr_next(tw_convert_src *s, tw_example_builder *b, tw_label_value *label, tw_error *err)
{
    (void)b;
    tfr_source *x = (tfr_source *)s;
    uint64_t at = tw_tfrecord_reader_offset(x->r);
    tw_status st = tfr_read(x, label, err);
    if (st < 0 || !x->counted || (st == TW_END ? x->index == s->count : x->index <= s->count))
        return st;
    return tw_error_set(err, TW_ERR_INVALID, x->path, (int64_t)at,
                        "record %llu: the file changed between the counting pass (%llu records) "
                        "and the writing pass",
                        (unsigned long long)(st == TW_END ? x->index : x->index - 1),
                        (unsigned long long)s->count);
}

static tw_status tfr_describe(const tw_convert_src *s, json_t *meta, tw_error *err)
{
    const schema *sc = ((const tfr_source *)s)->sch;
    TW_TRY(put_features(meta, (const char *const *)sc->names, (const char *const *)sc->kinds, sc->n,
                        err));
    const layout *l = &sc->first_layout;
    int known = sc->same_layout && l->known;
    json_t *shape = known ? json_array() : json_null();
    TW_TRY(tw_convert_put(meta, "shape", shape, err));
    for (size_t i = 0; known && i < l->rank; i++)
        TW_CHECK_FOREIGN(json_array_append_new(shape, json_integer((json_int_t)l->dims[i])) == 0, err,
                         TW_ERR_NOMEM, "jansson");
    if (known)
        TW_TRY(tw_convert_put(meta, "shape_rule", json_string(l->rule), err));
    return tw_convert_put(meta, "dtype", known && l->dtype ? json_string(l->dtype) : json_null(), err);
}

static void tfr_close(tw_convert_src *s)
{
    tfr_source *x = (tfr_source *)s;
    tw_tfrecord_reader_close(x->r);
    tw_example_destroy(x->ex);
    schema_cleanup(&x->own);
    free(x);
}

/* Opens path for reading from its first record (again). */
static tw_status tfr_rewind(tfr_source *x, tw_error *err)
{
    tw_tfrecord_reader_close(x->r);
    x->r = NULL;
    x->index = 0;
    return tw_tfrecord_reader_open(x->path, &x->ropts, &x->r, err);
}

/* Opens a TFRecord source and checks its first record (it becomes the schema unless `shared`, the
 * training file's schema, is given: a test file is checked against that). With need_count, every
 * record is read and checked once to count them. */
static tw_status tfr_open(const char *path, const tw_convert_options *o, schema *shared,
                          int need_count, tw_convert_src **out, tw_error *err)
{
    tfr_source *x = calloc(1, sizeof *x);
    if (!x)
        return nomem(err);
    x->base = (tw_convert_src){"tfrecord", 0, 1, tfr_next, tfr_describe, tfr_close, 0, 0, 0, NULL, 0, NULL};
    *out = &x->base;
    x->path = path;
    x->allow_nonfinite = o->allow_nonfinite;
    x->given = o;
    x->sch = shared ? shared : &x->own;
    tw_tfrecord_options_default(&x->ropts);
    x->ropts.compression = TW_COMPRESSION_AUTO;
    x->ropts.max_record_bytes = o->max_record_bytes;
    x->ropts.max_total_bytes = o->max_bytes;
    TW_TRY(tfr_rewind(x, err));
    tw_label_value label;
    tw_status s = tfr_read(x, &label, err);
    if (s == TW_END)
        return tw_error_set(err, TW_ERR_INVALID, path, -1,
                            "no records: the file holds no tf.train.Example");
    TW_TRY(s);
    x->base.int_labels = x->sch->labels == TW_FEATURE_INT64;
    x->base.no_labels = x->sch->labels == TW_FEATURE_NONE;
    if (need_count) {
        while ((s = tfr_read(x, &label, err)) == TW_OK)
            continue;
        if (s < 0)
            return s;
        x->base.count = x->index;
        x->counted = 1;
    }
    return tfr_rewind(x, err);
}

int tw_convert_error_record(const tw_error *err, uint64_t *index)
{
    static const char prefix[] = "record ";
    const char *p = err->message + sizeof prefix - 1;
    if (strncmp(err->message, prefix, sizeof prefix - 1) || *p < '0' || *p > '9')
        return 0;
    uint64_t n = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (n > (UINT64_MAX - 9) / 10)
            return 0;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    if (p[0] != ':' || p[1] != ' ')
        return 0;
    if (index)
        *index = n;
    return 1;
}

/* ================================ splits ================================ */

/* ================================ opening ================================ */

static tw_status open_source(const tw_convert_options *o, tw_convert_source kind, tw_convert_src **out,
                             tw_error *err)
{
    switch (kind) {
    case TW_CONVERT_IDX: return idx_open(o->images, o->labels, o->max_bytes, out, err);
    case TW_CONVERT_CSV:
        return csv_open(o->csv, o->label_column, o->max_bytes, o->allow_nonfinite, out, err);
    case TW_CONVERT_NPY:
        return npy_open(o->npy_features, o->npy_labels, o->max_bytes, o->allow_nonfinite, out, err);
    case TW_CONVERT_TFRECORD: /* a fraction or positional split needs the count up front */
        return tfr_open(o->tfrecord, o, NULL, o->test_fraction >= 0 || o->test_first || o->test_last, out, err);
    case TW_CONVERT_ARCHIVE: return tw_convert_archive_open(o, out, err);
    }
    return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "unknown source %d", (int)kind);
}

tw_status tw_convert_src_open(const tw_convert_options *o, tw_convert_source kind, tw_convert_src **train,
                          tw_convert_src **test, tw_error *err)
{
    TW_TRY(open_source(o, kind, train, err));
    if (o->test_tfrecord)
        return tfr_open(o->test_tfrecord, o, ((tfr_source *)*train)->sch, 0, test, err);
    if (o->test_csv) {
        TW_TRY(csv_open(o->test_csv, o->label_column, o->max_bytes, o->allow_nonfinite, test, err));
        return csv_same_columns(*train, *test, err);
    }
    if (o->test_npy_features) {
        TW_TRY(npy_open(o->test_npy_features, o->test_npy_labels, o->max_bytes, o->allow_nonfinite, test, err));
        return npy_same_shape(*train, *test, err);
    }
    if (!o->test_images)
        return TW_OK;
    TW_TRY(idx_open(o->test_images, o->test_labels, o->max_bytes, test, err));
    return idx_same_shape(*train, *test, err);
}
