/* test_convert.c — conversions end to end on small files: IDX (idx3/idx4, raw/gzip inputs, every output
 * compression), the test pair and the exact seeded fraction split, CSV and NPY features and labels,
 * TFRecord inputs (records copied byte for byte, the inferred meta, and every kind of damaged record
 * reported with its index and offset), the meta JSON, option checks, and that every failure leaves no
 * output or temporary file (and an existing output untouched); the meta read back and a run's dataset
 * settings derived from it. Outputs are read back with our TFRecord reader and Example parser; TensorFlow
 * reads them in tests/integration/test_convert.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "testutil.h"
#include <jansson.h>
#include <zlib.h>

#include "convert.h"
#include "crc32c.h"
#include "example.h"
#include "tfrecord.h"

/* ================================ helpers ================================ */

static char dir[700];

/* Makes an empty scratch folder TW_TEST_TMP/convert_<name> and points `dir` at it. */
static void fresh_dir(const char *name)
{
    snprintf(dir, sizeof dir, "%s/convert_%s", tw_test_tmp(), name);
    tw_test_rmdir(dir); /* left over from an earlier run, or absent */
    assert_int_equal(mkdir(dir, 0755), 0);
}

/* Returns dir/name in a rotating static buffer (several may be alive at once). */
static const char *path(const char *name)
{
    static char bufs[8][800];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, 800, "%s/%s", dir, name);
    return b;
}

static int count_files(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void write_file(const char *p, const void *data, size_t n)
{
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void write_gz(const char *p, const void *data, size_t n)
{
    gzFile g = gzopen(p, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, data, (unsigned)n), (int)n);
    gzclose(g);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

/* IDX images [n, h, w(, d)]: image i starts with i as two big-endian bytes, then (i + k) & 0xff. */
static uint8_t *idx_images(uint32_t n, uint32_t h, uint32_t w, uint32_t d, size_t *len)
{
    int rank = d ? 4 : 3;
    size_t item = (size_t)h * w * (d ? d : 1), hdr = 4 + 4 * (size_t)rank;
    *len = hdr + n * item;
    uint8_t *b = malloc(*len);
    uint8_t m[4] = {0, 0, 8, (uint8_t)rank};
    memcpy(b, m, 4);
    put_be32(b + 4, n);
    put_be32(b + 8, h);
    put_be32(b + 12, w);
    if (d)
        put_be32(b + 16, d);
    for (uint32_t i = 0; i < n; i++)
        for (size_t k = 0; k < item; k++)
            b[hdr + i * item + k] = k == 0 ? (uint8_t)(i >> 8) : k == 1 ? (uint8_t)i : (uint8_t)(i + k);
    return b;
}

/* IDX labels [n]: label i = i % 10. */
static uint8_t *idx_labels(uint32_t n, size_t *len)
{
    *len = 8 + n;
    uint8_t *b = malloc(*len);
    uint8_t m[4] = {0, 0, 8, 1};
    memcpy(b, m, 4);
    put_be32(b + 4, n);
    for (uint32_t i = 0; i < n; i++)
        b[8 + i] = (uint8_t)(i % 10);
    return b;
}

/* Writes an images/labels pair (gzip when gz) named <prefix>-images / <prefix>-labels. */
static void write_idx_pair(const char *prefix, uint32_t n, uint32_t nl, uint32_t h, uint32_t w,
                           uint32_t d, int gz)
{
    size_t li, ll;
    uint8_t *im = idx_images(n, h, w, d, &li), *lb = idx_labels(nl, &ll);
    char a[100], b[100];
    snprintf(a, sizeof a, "%s-images", prefix);
    snprintf(b, sizeof b, "%s-labels", prefix);
    (gz ? write_gz : write_file)(path(a), im, li);
    (gz ? write_gz : write_file)(path(b), lb, ll);
    free(im);
    free(lb);
}

typedef struct {
    tw_example *ex[512];
    size_t n;
} records;

static void read_records(const char *p, records *out)
{
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open(p, NULL, &r, &err), TW_OK);
    out->n = 0;
    const uint8_t *data;
    size_t len;
    tw_status s;
    while ((s = tw_tfrecord_read(r, &data, &len, &err)) == TW_OK) {
        assert_true(out->n < 512);
        assert_int_equal(tw_example_parse(data, len, p, -1, &out->ex[out->n++], &err), TW_OK);
    }
    assert_int_equal(s, TW_END);
    tw_tfrecord_reader_close(r);
}

static void free_records(records *r)
{
    for (size_t i = 0; i < r->n; i++)
        tw_example_destroy(r->ex[i]);
    r->n = 0;
}

static int64_t int_feature(const tw_example *ex, const char *name)
{
    tw_feature f;
    assert_true(tw_example_find(ex, name, &f));
    assert_int_equal(f.kind, TW_FEATURE_INT64);
    assert_int_equal(f.count, 1);
    return f.int64s[0];
}

static const uint8_t *bytes_feature(const tw_example *ex, const char *name, size_t *len)
{
    tw_feature f;
    assert_true(tw_example_find(ex, name, &f));
    assert_int_equal(f.kind, TW_FEATURE_BYTES);
    assert_int_equal(f.count, 1);
    return tw_feature_bytes_at(&f, 0, len);
}

/* The example index an IDX image carries in its first two bytes. */
static unsigned image_id(const tw_example *ex)
{
    size_t len;
    const uint8_t *p = bytes_feature(ex, "image_raw", &len);
    return (unsigned)p[0] << 8 | p[1];
}

static json_t *load_json(const char *p)
{
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j)
        fail_msg("%s: %s", p, je.text);
    return j;
}

static void options_idx(tw_convert_options *o, const char *prefix)
{
    char a[100], b[100];
    tw_convert_options_default(o);
    snprintf(a, sizeof a, "%s-images", prefix);
    snprintf(b, sizeof b, "%s-labels", prefix);
    o->images = path(a);
    o->labels = path(b);
    o->output = path("out.tfrecord");
}

/* Runs o expecting failure with status s, message containing want; checks no file was added. */
static void expect_failure(const tw_convert_options *o, tw_status s, const char *want,
                           int files_before)
{
    tw_error err;
    tw_convert_result res;
    assert_int_equal(tw_convert(o, &res, &err), s);
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
    assert_int_equal(count_files(), files_before);
}

/* ================================= tests ================================= */

static void test_meta_path(void **state)
{
    (void)state;
    char buf[64];
    tw_error err;
    assert_int_equal(tw_convert_meta_path("d/train.tfrecord", buf, sizeof buf, &err), TW_OK);
    assert_string_equal(buf, "d/train.meta.json");
    assert_int_equal(tw_convert_meta_path("x.rec", buf, sizeof buf, &err), TW_OK);
    assert_string_equal(buf, "x.rec.meta.json");
    assert_int_equal(tw_convert_meta_path(".tfrecord", buf, sizeof buf, &err), TW_OK);
    assert_string_equal(buf, ".tfrecord.meta.json");
    assert_int_equal(tw_convert_meta_path("a-very-long-name-that-does-not-fit-in-the-buffer.bin",
                                          buf, 40, &err), TW_ERR_INVALID);
}

static void expect_invalid(const tw_convert_options *o, const char *want)
{
    tw_convert_source s;
    tw_error err;
    assert_int_equal(tw_convert_check(o, &s, &err), TW_ERR_INVALID);
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
}

static void test_check_options(void **state)
{
    (void)state;
    tw_convert_options o;
    tw_convert_source s;
    tw_error err;
    tw_convert_options_default(&o);
    assert_int_equal(o.max_bytes, 16ull << 30);
    assert_true(o.test_fraction < 0);
    expect_invalid(&o, "exactly one source");
    o.images = "i";
    expect_invalid(&o, "--images needs --labels");
    o.labels = "l";
    expect_invalid(&o, "-o/--output is required");
    o.output = "o.tfrecord";
    assert_int_equal(tw_convert_check(&o, &s, &err), TW_OK);
    assert_int_equal(s, TW_CONVERT_IDX);
    o.csv = "c";
    expect_invalid(&o, "exactly one source");
    o.csv = NULL;
    o.test_fraction = 0.1;
    expect_invalid(&o, "--test-output is needed");
    o.test_output = "t.tfrecord";
    assert_int_equal(tw_convert_check(&o, &s, &err), TW_OK);
    o.test_images = "ti";
    expect_invalid(&o, "--test-images needs --test-labels");
    o.test_labels = "tl";
    expect_invalid(&o, "exclude each other");
    o.test_fraction = -1;
    assert_int_equal(tw_convert_check(&o, &s, &err), TW_OK);
    o.test_output = "o.tfrecord";
    expect_invalid(&o, "'o.tfrecord' is named twice");
    o.test_output = "t.tfrecord";
    o.meta = "i";
    expect_invalid(&o, "'i' is named twice");
    o.meta = NULL;
    o.test_images = o.test_labels = o.test_output = NULL;
    o.test_output = "t.tfrecord";
    expect_invalid(&o, "--test-output needs");
    o.test_output = NULL;
    o.max_bytes = 0;
    expect_invalid(&o, "--max-bytes");
    tw_convert_options_default(&o);
    o.npy_features = "f";
    o.npy_labels = "l";
    o.output = "o";
    o.test_images = "a";
    o.test_labels = "b";
    o.test_output = "t";
    expect_invalid(&o, "need an IDX source");
    tw_convert_options_default(&o);
    o.csv = "c";
    o.output = "o";
    expect_invalid(&o, "--csv needs --label-column");
    o.label_column = "y";
    o.test_fraction = 1.5;
    o.test_output = "t";
    expect_invalid(&o, "in [0, 1]");
}

static void check_idx_records(const records *r, uint32_t first, uint32_t h, uint32_t w, uint32_t d)
{
    for (size_t i = 0; i < r->n; i++) {
        const tw_example *ex = r->ex[i];
        uint32_t id = first + (uint32_t)i;
        size_t len;
        const uint8_t *px = bytes_feature(ex, "image_raw", &len);
        assert_int_equal(len, h * w * d);
        assert_int_equal(image_id(ex), id);
        for (size_t k = 2; k < len; k++)
            assert_int_equal(px[k], (uint8_t)(id + k));
        assert_int_equal(int_feature(ex, "label"), id % 10);
        assert_int_equal(int_feature(ex, "size"), h * w * d);
        assert_int_equal(int_feature(ex, "height"), h);
        assert_int_equal(int_feature(ex, "width"), w);
        assert_int_equal(int_feature(ex, "depth"), d);
        assert_int_equal(tw_example_feature_count(ex), 6);
    }
}

static void test_idx_plain(void **state)
{
    (void)state;
    fresh_dir("idx_plain");
    write_idx_pair("a", 50, 50, 4, 3, 0, 0);
    tw_convert_options o;
    options_idx(&o, "a");
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    assert_int_equal(res.source, TW_CONVERT_IDX);
    assert_int_equal(res.train_count, 50);
    assert_false(res.has_test);
    assert_string_equal(res.meta_path, path("out.meta.json"));
    assert_int_equal(count_files(), 4); /* 2 inputs, output, meta: no temporaries */
    records r;
    read_records(o.output, &r);
    assert_int_equal(r.n, 50);
    check_idx_records(&r, 0, 4, 3, 1);
    free_records(&r);

    json_t *m = load_json(res.meta_path);
    assert_int_equal(json_integer_value(json_object_get(m, "format_version")), 1);
    assert_string_equal(json_string_value(json_object_get(m, "source")), "idx");
    assert_string_equal(json_string_value(json_object_get(m, "dtype")), "uint8");
    assert_string_equal(json_string_value(json_object_get(m, "compression")), "none");
    json_t *shape = json_object_get(m, "shape");
    assert_int_equal(json_array_size(shape), 3);
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 4);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 3);
    assert_int_equal(json_integer_value(json_array_get(shape, 2)), 1);
    json_t *feats = json_object_get(m, "features");
    assert_string_equal(json_string_value(json_object_get(feats, "image_raw")), "bytes");
    assert_string_equal(json_string_value(json_object_get(feats, "label")), "int64");
    assert_int_equal(json_object_size(feats), 6);
    json_t *train = json_object_get(json_object_get(m, "splits"), "train");
    assert_string_equal(json_string_value(json_object_get(train, "path")), o.output);
    assert_int_equal(json_integer_value(json_object_get(train, "count")), 50);
    json_t *hist = json_object_get(train, "label_histogram");
    assert_int_equal(json_object_size(hist), 10);
    assert_int_equal(json_integer_value(json_object_get(hist, "7")), 5);
    assert_null(json_object_get(json_object_get(m, "splits"), "test"));
    json_decref(m);
}

static void test_idx4_gzip_inputs_every_compression(void **state)
{
    (void)state;
    static const tw_compression cs[] = {TW_COMPRESSION_NONE, TW_COMPRESSION_GZIP,
                                        TW_COMPRESSION_ZLIB};
    for (size_t k = 0; k < 3; k++) {
        fresh_dir("idx4");
        write_idx_pair("v", 20, 20, 3, 2, 2, 1);
        tw_convert_options o;
        options_idx(&o, "v");
        o.compression = cs[k];
        o.meta = path("described.json");
        tw_convert_result res;
        tw_error err;
        assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
        assert_string_equal(res.meta_path, o.meta);
        assert_int_equal(count_files(), 4);
        tw_tfrecord_reader *rd;
        assert_int_equal(tw_tfrecord_reader_open(o.output, NULL, &rd, &err), TW_OK);
        assert_int_equal(tw_tfrecord_reader_compression(rd), cs[k]);
        tw_tfrecord_reader_close(rd);
        records r;
        read_records(o.output, &r);
        assert_int_equal(r.n, 20);
        check_idx_records(&r, 0, 3, 2, 2);
        free_records(&r);
        json_t *m = load_json(o.meta);
        assert_string_equal(json_string_value(json_object_get(m, "compression")),
                            tw_compression_name(cs[k]));
        assert_int_equal(json_integer_value(json_array_get(json_object_get(m, "shape"), 2)), 2);
        json_decref(m);
    }
}

static void test_idx_test_pair(void **state)
{
    (void)state;
    fresh_dir("idx_pair");
    write_idx_pair("train", 30, 30, 2, 2, 0, 1);
    write_idx_pair("t10k", 12, 12, 2, 2, 0, 0);
    tw_convert_options o;
    options_idx(&o, "train");
    o.test_images = path("t10k-images");
    o.test_labels = path("t10k-labels");
    o.test_output = path("test.tfrecord");
    o.compression = TW_COMPRESSION_GZIP;
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    assert_int_equal(res.train_count, 30);
    assert_int_equal(res.test_count, 12);
    assert_true(res.has_test);
    records r;
    read_records(o.test_output, &r);
    assert_int_equal(r.n, 12);
    check_idx_records(&r, 0, 2, 2, 1);
    free_records(&r);
    json_t *m = load_json(res.meta_path);
    json_t *test = json_object_get(json_object_get(m, "splits"), "test");
    assert_int_equal(json_integer_value(json_object_get(test, "count")), 12);
    json_t *hist = json_object_get(test, "label_histogram");
    assert_int_equal(json_integer_value(json_object_get(hist, "0")), 2);
    assert_int_equal(json_integer_value(json_object_get(hist, "9")), 1);
    json_decref(m);

    /* a test pair of another shape is refused, before any output exists */
    fresh_dir("idx_pair_shape");
    write_idx_pair("train", 30, 30, 2, 2, 0, 0);
    write_idx_pair("t10k", 12, 12, 2, 3, 0, 0);
    options_idx(&o, "train");
    o.test_images = path("t10k-images");
    o.test_labels = path("t10k-labels");
    o.test_output = path("test.tfrecord");
    expect_failure(&o, TW_ERR_INVALID, "test images are 2x3x1 but the training images are 2x2x1",
                   4);
}

/* Converts `n` images with --test-fraction f and seed; returns test ids in order via ids/nid. */
static void fraction_run(uint32_t n, double f, uint64_t seed, unsigned *ids, size_t *nid)
{
    fresh_dir("fraction");
    write_idx_pair("s", n, n, 2, 2, 0, 0);
    tw_convert_options o;
    options_idx(&o, "s");
    o.test_fraction = f;
    o.seed = seed;
    o.test_output = path("test.tfrecord");
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    uint64_t want = (uint64_t)(f * n + 0.5);
    assert_int_equal(res.test_count, want);
    assert_int_equal(res.train_count + res.test_count, n);
    records tr, te;
    read_records(o.output, &tr);
    read_records(o.test_output, &te);
    assert_int_equal(te.n, want);
    unsigned seen[1024] = {0};
    for (size_t i = 0; i < tr.n; i++) {
        seen[image_id(tr.ex[i])]++;
        assert_true(i == 0 || image_id(tr.ex[i]) > image_id(tr.ex[i - 1])); /* order kept */
    }
    for (size_t i = 0; i < te.n; i++) {
        ids[i] = image_id(te.ex[i]);
        seen[ids[i]]++;
    }
    *nid = te.n;
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(seen[i], 1); /* train + test is exactly the source */
    free_records(&tr);
    free_records(&te);
}

static void test_fraction_split_exact_and_seeded(void **state)
{
    (void)state;
    unsigned a[512], b[512], c[512];
    size_t na, nb, nc;
    fraction_run(101, 0.3, 7, a, &na);
    assert_int_equal(na, 30);
    fraction_run(101, 0.3, 7, b, &nb);
    assert_int_equal(nb, 30);
    assert_memory_equal(a, b, na * sizeof *a);
    fraction_run(101, 0.3, 8, c, &nc);
    assert_true(memcmp(a, c, na * sizeof *a) != 0);
    fraction_run(200, 0.255, 1, a, &na);
    assert_int_equal(na, 51);
    fraction_run(10, 0.0, 1, a, &na);
    assert_int_equal(na, 0);
    fraction_run(10, 1.0, 1, a, &na);
    assert_int_equal(na, 10);
}

static void test_idx_failures_leave_nothing(void **state)
{
    (void)state;
    tw_convert_options o;
    /* counts disagree */
    fresh_dir("fail_counts");
    write_idx_pair("a", 50, 49, 4, 3, 0, 1);
    options_idx(&o, "a");
    expect_failure(&o, TW_ERR_INVALID, "declares 49 labels but the images file", 2);
    /* labels given as images: wrong magic for the role */
    options_idx(&o, "a");
    o.images = path("a-labels");
    o.labels = path("a-images");
    expect_failure(&o, TW_ERR_INVALID, "not an IDX images file: magic 0x00000801", 2);
    /* truncated raw images: the error comes after output was being written */
    fresh_dir("fail_trunc");
    size_t li, ll;
    uint8_t *im = idx_images(10, 4, 4, 0, &li), *lb = idx_labels(10, &ll);
    write_file(path("a-images"), im, li - 5);
    write_file(path("a-labels"), lb, ll);
    options_idx(&o, "a");
    tw_error err;
    assert_int_equal(tw_convert(&o, NULL, &err), TW_ERR_TRUNCATED);
    assert_string_equal(err.file, path("a-images"));
    assert_int_equal(err.offset, (int64_t)li - 5);
    assert_int_equal(count_files(), 2);
    /* an existing output stays as it was */
    write_file(o.output, "old", 3);
    assert_int_equal(tw_convert(&o, NULL, &err), TW_ERR_TRUNCATED);
    assert_int_equal(count_files(), 3);
    FILE *f = fopen(o.output, "rb");
    char buf[8] = {0};
    assert_int_equal(fread(buf, 1, sizeof buf, f), 3);
    fclose(f);
    assert_string_equal(buf, "old");
    /* budget: the images declare more than --max-bytes */
    write_file(path("a-images"), im, li);
    remove(o.output);
    options_idx(&o, "a");
    o.max_bytes = 100;
    expect_failure(&o, TW_ERR_TOO_LARGE, "past the budget of 100 bytes", 2);
    /* an unwritable test output: the train temporary is removed too */
    options_idx(&o, "a");
    o.test_fraction = 0.5;
    o.test_output = path("no/such/dir/test.tfrecord");
    expect_failure(&o, TW_ERR_IO, "cannot create temporary file", 2);
    free(im);
    free(lb);
}

static void test_csv_int_and_float_labels(void **state)
{
    (void)state;
    fresh_dir("csv");
    const char *csv = "a,\"the label\",b\r\n0.5,1,-2\r\n1e-3,0,3.25\r\n7,1,8\r\n\r\n";
    write_file(path("d.csv"), csv, strlen(csv));
    tw_convert_options o;
    tw_convert_options_default(&o);
    o.csv = path("d.csv");
    o.label_column = "the label";
    o.output = path("d.tfrecord");
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    assert_int_equal(res.train_count, 3);
    records r;
    read_records(o.output, &r);
    assert_int_equal(r.n, 3);
    tw_feature f;
    assert_true(tw_example_find(r.ex[1], "features", &f));
    assert_int_equal(f.kind, TW_FEATURE_FLOAT);
    assert_int_equal(f.count, 2);
    assert_true(f.floats[0] == 1e-3f && f.floats[1] == 3.25f);
    assert_int_equal(int_feature(r.ex[2], "label"), 1);
    free_records(&r);
    json_t *m = load_json(res.meta_path);
    assert_int_equal(json_integer_value(json_object_get(m, "shape")), 2);
    assert_string_equal(json_string_value(json_object_get(m, "label_column")), "the label");
    assert_string_equal(json_string_value(json_object_get(m, "dtype")), "float32");
    json_t *hist = json_object_get(json_object_get(json_object_get(m, "splits"), "train"),
                                   "label_histogram");
    assert_int_equal(json_integer_value(json_object_get(hist, "1")), 2);
    json_decref(m);

    fresh_dir("csv_float");
    csv = "x,y\n1,0.5\n2,2\n3,-1.25\n";
    write_file(path("d.csv"), csv, strlen(csv));
    o.csv = path("d.csv");
    o.label_column = "y";
    o.output = path("d.tfrecord");
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    read_records(o.output, &r);
    assert_true(tw_example_find(r.ex[1], "label", &f));
    assert_int_equal(f.kind, TW_FEATURE_FLOAT);
    assert_true(f.floats[0] == 2.0f);
    free_records(&r);
    m = load_json(res.meta_path);
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "features"), "label")),
                        "float");
    json_t *train = json_object_get(json_object_get(m, "splits"), "train");
    assert_null(json_object_get(train, "label_histogram"));
    json_t *st = json_object_get(train, "label_stats");
    assert_true(json_real_value(json_object_get(st, "min")) == -1.25);
    assert_true(json_real_value(json_object_get(st, "max")) == 2.0);
    assert_true(json_real_value(json_object_get(st, "mean")) == 1.25 / 3);
    json_decref(m);
}

static void test_csv_failures_leave_nothing(void **state)
{
    (void)state;
    fresh_dir("csv_fail");
    const char *csv = "x,y\n1,0\n2,0\nfoo,1\n";
    write_file(path("d.csv"), csv, strlen(csv));
    tw_convert_options o;
    tw_convert_options_default(&o);
    o.csv = path("d.csv");
    o.label_column = "y";
    o.output = path("d.tfrecord");
    o.test_fraction = 0.5;
    o.test_output = path("t.tfrecord");
    tw_error err;
    assert_int_equal(tw_convert(&o, NULL, &err), TW_ERR_INVALID);
    assert_int_equal(err.line, 4);
    char buf[900];
    tw_error_format(&err, buf, sizeof buf);
    char want[900];
    snprintf(want, sizeof want, "%s:4: column 1 ('x'): 'foo' is not a number", o.csv);
    assert_string_equal(buf, want);
    assert_int_equal(count_files(), 1);
    o.label_column = "label";
    expect_failure(&o, TW_ERR_INVALID, "no column named 'label'", 1);
}

/* A v1 .npy with the given dict and data. */
static void write_npy(const char *name, const char *dict, const void *data, size_t n)
{
    size_t dl = strlen(dict), hl = ((10 + dl + 1 + 63) / 64) * 64 - 10;
    uint8_t *b = malloc(10 + hl + n);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)hl;
    b[9] = (uint8_t)(hl >> 8);
    memset(b + 10, ' ', hl);
    memcpy(b + 10, dict, dl);
    b[10 + hl - 1] = '\n';
    memcpy(b + 10 + hl, data, n);
    write_file(path(name), b, 10 + hl + n);
    free(b);
}

static void test_npy_volumes(void **state)
{
    (void)state;
    fresh_dir("npy");
    float vol[4][2][3];
    for (int i = 0; i < 24; i++)
        (&vol[0][0][0])[i] = (float)i - 3.5f;
    int32_t lab[4] = {3, -1, 0, 2000000000};
    write_npy("x.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2, 3), }", vol,
              sizeof vol);
    write_npy("y.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", lab, sizeof lab);
    tw_convert_options o;
    tw_convert_options_default(&o);
    o.npy_features = path("x.npy");
    o.npy_labels = path("y.npy");
    o.output = path("v.tfrecord");
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    assert_int_equal(res.source, TW_CONVERT_NPY);
    records r;
    read_records(o.output, &r);
    assert_int_equal(r.n, 4);
    for (size_t i = 0; i < 4; i++) {
        size_t len;
        const uint8_t *p = bytes_feature(r.ex[i], "image_raw", &len);
        assert_int_equal(len, 24);
        assert_memory_equal(p, vol[i], 24);
        p = bytes_feature(r.ex[i], "dtype", &len);
        assert_int_equal(len, 7);
        assert_memory_equal(p, "float32", 7);
        tw_feature f;
        assert_true(tw_example_find(r.ex[i], "shape", &f));
        assert_int_equal(f.count, 2);
        assert_int_equal(f.int64s[0], 2);
        assert_int_equal(f.int64s[1], 3);
        assert_int_equal(int_feature(r.ex[i], "label"), lab[i]);
    }
    free_records(&r);
    json_t *m = load_json(res.meta_path);
    assert_string_equal(json_string_value(json_object_get(m, "source")), "npy");
    assert_string_equal(json_string_value(json_object_get(m, "dtype")), "float32");
    assert_int_equal(json_array_size(json_object_get(m, "shape")), 2);
    json_decref(m);

    /* float64 labels of shape (N, 1) become float labels */
    double dl[4] = {0.25, 1, 2, 3};
    write_npy("yf.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 1), }", dl,
              sizeof dl);
    o.npy_labels = path("yf.npy");
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    read_records(o.output, &r);
    tw_feature f;
    assert_true(tw_example_find(r.ex[0], "label", &f));
    assert_int_equal(f.kind, TW_FEATURE_FLOAT);
    assert_true(f.floats[0] == 0.25f);
    free_records(&r);
}

static void test_npy_failures_leave_nothing(void **state)
{
    (void)state;
    fresh_dir("npy_fail");
    uint8_t px[3 * 4] = {0};
    int64_t lab[2] = {0, 1};
    write_npy("x.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 4), }", px, sizeof px);
    write_npy("y.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", lab, sizeof lab);
    write_npy("xi.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1), }", lab, 8);
    write_npy("xf.npy", "{'descr': '|u1', 'fortran_order': True, 'shape': (3, 4), }", px, sizeof px);
    tw_convert_options o;
    tw_convert_options_default(&o);
    o.npy_features = path("x.npy");
    o.npy_labels = path("y.npy");
    o.output = path("v.tfrecord");
    expect_failure(&o, TW_ERR_INVALID, "the labels have 2 rows but the features", 4);
    o.npy_features = path("xi.npy");
    expect_failure(&o, TW_ERR_UNSUPPORTED, "features of dtype int64 are not supported", 4);
    o.npy_features = path("xf.npy");
    expect_failure(&o, TW_ERR_UNSUPPORTED, "fortran_order True", 4);
    o.npy_features = path("x.npy");
    o.npy_labels = path("x.npy");
    expect_failure(&o, TW_ERR_UNSUPPORTED, "labels must have shape (N,) or (N, 1)", 4);
}

/* ---- tfrecord source ---- */

/* A TFRecord file in memory, framed by hand (TensorFlow-written inputs are in the pytest). */
typedef struct {
    uint8_t *data;
    size_t len, cap;
    size_t at[256];  /* byte offset of each record */
    size_t n;
} tfr_buf;

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void tfr_add_len(tfr_buf *t, const void *rec, size_t n, uint64_t declared)
{
    assert_true(t->n < 256);
    if (t->len + n + 16 > t->cap) {
        t->cap = (t->len + n + 16) * 2;
        t->data = realloc(t->data, t->cap);
        assert_non_null(t->data);
    }
    uint8_t *p = t->data + t->len;
    t->at[t->n++] = t->len;
    put_le(p, declared, 8);
    put_le(p + 8, tw_crc32c_mask(tw_crc32c(p, 8)), 4);
    if (n)
        memcpy(p + 12, rec, n);
    put_le(p + 12 + n, tw_crc32c_mask(tw_crc32c(rec, n)), 4);
    t->len += n + 16;
}

static void tfr_add(tfr_buf *t, const void *rec, size_t n) { tfr_add_len(t, rec, n, n); }

/* Payload of record k and its length. */
static const uint8_t *tfr_payload(const tfr_buf *t, size_t k, size_t *len)
{
    size_t end = k + 1 < t->n ? t->at[k + 1] : t->len;
    *len = end - t->at[k] - 16;
    return t->data + t->at[k] + 12;
}

static void tfr_add_example(tfr_buf *t, tw_example_builder *b)
{
    const uint8_t *d;
    size_t n;
    tw_error err;
    assert_int_equal(tw_example_serialize(b, &d, &n, &err), TW_OK);
    tfr_add(t, d, n);
}

/* Example i of an IDX-like set: image_raw [h*w*d] bytes, label i % 10, height, width, depth. */
static void add_image_example(tfr_buf *t, uint32_t i, int64_t h, int64_t w, int64_t d)
{
    tw_example_builder *b;
    tw_error err;
    assert_int_equal(tw_example_builder_create(&b, &err), TW_OK);
    uint8_t px[256];
    size_t n = (size_t)(h * w * d);
    for (size_t k = 0; k < n; k++)
        px[k] = (uint8_t)(i * 7 + k);
    int64_t v[4] = {i % 10, h, w, d};
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, n, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", &v[0], 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "height", &v[1], 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "width", &v[2], 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "depth", &v[3], 1, &err), TW_OK);
    tfr_add_example(t, b);
    tw_example_builder_destroy(b);
}

static void image_set(tfr_buf *t, uint32_t n)
{
    memset(t, 0, sizeof *t);
    for (uint32_t i = 0; i < n; i++)
        add_image_example(t, i, 3, 2, 2);
}

static void options_tfr(tw_convert_options *o, const char *input)
{
    tw_convert_options_default(o);
    o->tfrecord = path(input);
    o->output = path("out.tfrecord");
}

/* Reads every payload of a TFRecord file and checks it equals the input's records `first`.. in
 * order (or those whose index has keep[i] set, when keep is not NULL). Returns how many. */
static size_t same_records(const char *p, const tfr_buf *in, const int *keep, int want_keep)
{
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open(p, NULL, &r, &err), TW_OK);
    const uint8_t *data;
    size_t len, k = 0, n = 0;
    tw_status s;
    while ((s = tw_tfrecord_read(r, &data, &len, &err)) == TW_OK) {
        while (keep && k < in->n && keep[k] != want_keep)
            k++;
        assert_true(k < in->n);
        size_t want_len;
        const uint8_t *want = tfr_payload(in, k++, &want_len);
        assert_int_equal(len, want_len);
        assert_memory_equal(data, want, len);
        n++;
    }
    assert_int_equal(s, TW_END);
    tw_tfrecord_reader_close(r);
    return n;
}

static void test_tfrecord_copies_records(void **state)
{
    (void)state;
    static const tw_compression cs[] = {TW_COMPRESSION_NONE, TW_COMPRESSION_GZIP,
                                        TW_COMPRESSION_ZLIB};
    tfr_buf t;
    image_set(&t, 40);
    for (size_t k = 0; k < 3; k++) {
        fresh_dir("tfr_copy");
        (k == 1 ? write_gz : write_file)(path("in.tfrecord"), t.data, t.len);
        tw_convert_options o;
        options_tfr(&o, "in.tfrecord");
        o.compression = cs[k];
        tw_convert_result res;
        tw_error err;
        assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
        assert_int_equal(res.source, TW_CONVERT_TFRECORD);
        assert_int_equal(res.train_count, 40);
        assert_int_equal(count_files(), 3);
        tw_tfrecord_reader *rd;
        assert_int_equal(tw_tfrecord_reader_open(o.output, NULL, &rd, &err), TW_OK);
        assert_int_equal(tw_tfrecord_reader_compression(rd), cs[k]);
        tw_tfrecord_reader_close(rd);
        assert_int_equal(same_records(o.output, &t, NULL, 0), 40);
        if (cs[k] == TW_COMPRESSION_NONE) { /* re-framed plain output is the input, byte for byte */
            FILE *f = fopen(o.output, "rb");
            uint8_t *got = malloc(t.len + 1);
            assert_int_equal(fread(got, 1, t.len + 1, f), t.len);
            fclose(f);
            assert_memory_equal(got, t.data, t.len);
            free(got);
        }
        json_t *m = load_json(res.meta_path);
        assert_string_equal(json_string_value(json_object_get(m, "source")), "tfrecord");
        assert_string_equal(json_string_value(json_object_get(m, "dtype")), "uint8");
        assert_string_equal(json_string_value(json_object_get(m, "compression")),
                            tw_compression_name(cs[k]));
        json_t *shape = json_object_get(m, "shape");
        assert_int_equal(json_array_size(shape), 3);
        assert_int_equal(json_integer_value(json_array_get(shape, 0)), 3);
        assert_int_equal(json_integer_value(json_array_get(shape, 1)), 2);
        assert_int_equal(json_integer_value(json_array_get(shape, 2)), 2);
        json_t *feats = json_object_get(m, "features");
        assert_int_equal(json_object_size(feats), 5);
        assert_string_equal(json_string_value(json_object_get(feats, "image_raw")), "bytes");
        assert_string_equal(json_string_value(json_object_get(feats, "depth")), "int64");
        const char *key;
        json_t *value;
        static const char *const order[] = {"image_raw", "label", "height", "width", "depth"};
        size_t i = 0;
        json_object_foreach(feats, key, value) /* the first record's order */
            assert_string_equal(key, order[i++]);
        json_t *train = json_object_get(json_object_get(m, "splits"), "train");
        assert_int_equal(json_integer_value(json_object_get(train, "count")), 40);
        json_t *hist = json_object_get(train, "label_histogram");
        assert_int_equal(json_object_size(hist), 10);
        assert_int_equal(json_integer_value(json_object_get(hist, "3")), 4);
        json_decref(m);
    }
    free(t.data);
}

static void test_tfrecord_fraction_and_test_file(void **state)
{
    (void)state;
    fresh_dir("tfr_split");
    tfr_buf t, u;
    image_set(&t, 41);
    write_file(path("in.tfrecord"), t.data, t.len);
    tw_convert_options o;
    options_tfr(&o, "in.tfrecord");
    o.test_fraction = 0.25;
    o.seed = 3;
    o.test_output = path("test.tfrecord");
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    assert_int_equal(res.test_count, 10);
    assert_int_equal(res.train_count, 31);
    /* which records went where: the example index is in the first pixel (i * 7) */
    int in_test[41] = {0};
    records r;
    read_records(o.test_output, &r);
    for (size_t i = 0; i < r.n; i++) {
        size_t len;
        const uint8_t *px = bytes_feature(r.ex[i], "image_raw", &len);
        for (uint32_t k = 0; k < 41; k++)
            if (px[0] == (uint8_t)(k * 7))
                in_test[k] = 1;
    }
    free_records(&r);
    assert_int_equal(same_records(o.test_output, &t, in_test, 1), 10);
    assert_int_equal(same_records(o.output, &t, in_test, 0), 31);
    json_t *m = load_json(res.meta_path);
    json_t *test = json_object_get(json_object_get(m, "splits"), "test");
    assert_int_equal(json_integer_value(json_object_get(test, "count")), 10);
    json_decref(m);

    /* a test file: all of it goes to the test split, checked against the training file's features */
    fresh_dir("tfr_test_file");
    image_set(&u, 7);
    write_file(path("in.tfrecord"), t.data, t.len);
    write_file(path("t10k.tfrecord"), u.data, u.len);
    options_tfr(&o, "in.tfrecord");
    o.test_tfrecord = path("t10k.tfrecord");
    o.test_output = path("test.tfrecord");
    o.compression = TW_COMPRESSION_GZIP;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    assert_int_equal(res.train_count, 41);
    assert_int_equal(res.test_count, 7);
    assert_int_equal(same_records(o.test_output, &u, NULL, 0), 7);
    m = load_json(res.meta_path);
    json_t *hist = json_object_get(json_object_get(json_object_get(m, "splits"), "test"),
                                   "label_histogram");
    assert_int_equal(json_object_size(hist), 7);
    json_decref(m);

    /* a test file with other features is refused at its first record */
    tw_example_builder *b;
    assert_int_equal(tw_example_builder_create(&b, &err), TW_OK);
    float x = 1;
    assert_int_equal(tw_example_add_floats(b, "image_raw", &x, 1, &err), TW_OK);
    free(u.data);
    memset(&u, 0, sizeof u);
    tfr_add_example(&u, b);
    tw_example_builder_destroy(b);
    fresh_dir("tfr_test_other");
    write_file(path("in.tfrecord"), t.data, t.len);
    write_file(path("t10k.tfrecord"), u.data, u.len);
    options_tfr(&o, "in.tfrecord");
    o.test_tfrecord = path("t10k.tfrecord");
    o.test_output = path("test.tfrecord");
    assert_int_equal(tw_convert(&o, &res, &err), TW_ERR_INVALID);
    assert_string_equal(err.file, o.test_tfrecord);
    assert_int_equal(err.offset, 0);
    char want[900];
    snprintf(want, sizeof want, "record 0: feature 'image_raw' is float but bytes in the first "
             "record of %s", o.tfrecord);
    assert_string_equal(err.message, want);
    assert_int_equal(count_files(), 2);
    free(t.data);
    free(u.data);
}

/* Writes a file of n examples with the features each make() call adds for example i. */
typedef void (*example_maker)(tw_example_builder *b, uint32_t i, void *scratch);

static void write_made(const char *name, uint32_t n, example_maker make)
{
    tfr_buf t;
    memset(&t, 0, sizeof t);
    tw_example_builder *b;
    tw_error err;
    assert_int_equal(tw_example_builder_create(&b, &err), TW_OK);
    for (uint32_t i = 0; i < n; i++) {
        int64_t scratch[64] = {0}; /* aligned for any element type */
        tw_example_builder_reset(b);
        make(b, i, scratch);
        tfr_add_example(&t, b);
    }
    tw_example_builder_destroy(b);
    write_file(path(name), t.data, t.len);
    free(t.data);
}

/* "features": 5 floats, "label": a float (regression, like a CSV with float labels) */
static void make_csv_like(tw_example_builder *b, uint32_t i, void *scratch)
{
    float *v = scratch;
    for (int k = 0; k < 6; k++)
        v[k] = (float)i + (float)k / 4;
    tw_error err;
    assert_int_equal(tw_example_add_floats(b, "features", v, 5, &err), TW_OK);
    assert_int_equal(tw_example_add_floats(b, "label", v + 5, 1, &err), TW_OK);
}

/* "shape" [2, 3] and a float32 image_raw of 24 bytes; no label */
static void make_npy_like(tw_example_builder *b, uint32_t i, void *scratch)
{
    int64_t *shape = scratch;
    uint8_t *px = (uint8_t *)scratch + 16;
    shape[0] = 2;
    shape[1] = 3;
    memset(px, (int)i, 24);
    tw_error err;
    assert_int_equal(tw_example_add_int64s(b, "shape", shape, 2, &err), TW_OK);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, 24, &err), TW_OK);
}

/* height/width of the IDX kind but the size changes at example 3; multi-valued int64 labels */
static void make_ragged(tw_example_builder *b, uint32_t i, void *scratch)
{
    int64_t *v = scratch;
    v[0] = i < 3 ? 2 : 3;
    v[1] = 2;
    v[2] = i;
    v[3] = i + 1;
    uint8_t *px = (uint8_t *)scratch + 64;
    tw_error err;
    assert_int_equal(tw_example_add_int64s(b, "height", &v[0], 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "width", &v[1], 1, &err), TW_OK);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, (size_t)(v[0] * v[1]), &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", &v[2], 2, &err), TW_OK);
}

static void test_tfrecord_meta_layouts(void **state)
{
    (void)state;
    fresh_dir("tfr_layouts");
    write_made("csv.tfrecord", 4, make_csv_like);
    write_made("npy.tfrecord", 3, make_npy_like);
    write_made("ragged.tfrecord", 5, make_ragged);
    tw_convert_options o;
    tw_convert_result res;
    tw_error err;

    options_tfr(&o, "csv.tfrecord");
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    json_t *m = load_json(res.meta_path);
    assert_int_equal(json_array_size(json_object_get(m, "shape")), 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(m, "shape"), 0)), 5);
    assert_string_equal(json_string_value(json_object_get(m, "dtype")), "float32");
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "features"), "label")),
                        "float");
    json_t *train = json_object_get(json_object_get(m, "splits"), "train");
    assert_null(json_object_get(train, "label_histogram"));
    json_t *st = json_object_get(train, "label_stats");
    assert_true(json_real_value(json_object_get(st, "min")) == 1.25);
    assert_true(json_real_value(json_object_get(st, "max")) == 4.25);
    assert_true(json_real_value(json_object_get(st, "mean")) == 2.75);
    json_decref(m);

    options_tfr(&o, "npy.tfrecord");
    o.output = path("npy-out.tfrecord");
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    m = load_json(res.meta_path);
    json_t *shape = json_object_get(m, "shape");
    assert_int_equal(json_array_size(shape), 2);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 3);
    assert_string_equal(json_string_value(json_object_get(m, "dtype")), "float32");
    train = json_object_get(json_object_get(m, "splits"), "train");
    assert_int_equal(json_integer_value(json_object_get(train, "count")), 3);
    assert_null(json_object_get(train, "label_histogram")); /* no label feature: neither */
    assert_null(json_object_get(train, "label_stats"));
    json_decref(m);

    options_tfr(&o, "ragged.tfrecord");
    o.output = path("ragged-out.tfrecord");
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    m = load_json(res.meta_path);
    assert_true(json_is_null(json_object_get(m, "shape"))); /* records disagree */
    assert_true(json_is_null(json_object_get(m, "dtype")));
    train = json_object_get(json_object_get(m, "splits"), "train");
    assert_null(json_object_get(train, "label_histogram")); /* two values per label */
    assert_null(json_object_get(train, "label_stats"));
    json_decref(m);
}

/* Runs o expecting status s about record `index` at byte `at` of file `bad`, the message starting
 * "record <index>: " and containing want; checks that no file was added. */
static void expect_record_error(const tw_convert_options *o, tw_status s, const char *bad,
                                uint64_t index, size_t at, const char *want, int files_before)
{
    tw_error err;
    tw_convert_result res;
    assert_int_equal(tw_convert(o, &res, &err), s);
    assert_string_equal(err.file, bad);
    assert_int_equal(err.offset, (int64_t)at);
    uint64_t got = 12345;
    assert_true(tw_convert_error_record(&err, &got));
    assert_int_equal(got, index);
    char prefix[40];
    snprintf(prefix, sizeof prefix, "record %llu: ", (unsigned long long)index);
    if (strncmp(err.message, prefix, strlen(prefix)) || !strstr(err.message, want))
        fail_msg("message '%s' lacks '%s' or '%s'", err.message, prefix, want);
    assert_int_equal(count_files(), files_before);
}

/* Writes t with the edit applied: bytes [0, cut) then `extra`, then the rest from skip. */
static void write_edited(const char *name, const tfr_buf *t, size_t cut, const void *extra,
                         size_t n_extra, size_t skip)
{
    size_t rest = skip < t->len ? t->len - skip : 0;
    uint8_t *b = malloc(cut + n_extra + rest + 1);
    memcpy(b, t->data, cut);
    if (n_extra)
        memcpy(b + cut, extra, n_extra);
    if (rest)
        memcpy(b + cut + n_extra, t->data + skip, rest);
    write_file(path(name), b, cut + n_extra + rest);
    free(b);
}

static void test_tfrecord_corrupt_inputs(void **state)
{
    (void)state;
    fresh_dir("tfr_corrupt");
    tfr_buf t;
    image_set(&t, 10);
    const char *in = path("in.tfrecord");
    tw_convert_options o;
    for (int split = 0; split < 2; split++) {
        options_tfr(&o, "in.tfrecord");
        o.compression = TW_COMPRESSION_GZIP;
        if (split) {
            o.test_fraction = 0.5;
            o.test_output = path("test.tfrecord");
        }
        /* bad length CRC of record 3 */
        uint8_t byte = t.data[t.at[3] + 9] ^ 0x40;
        write_edited("in.tfrecord", &t, t.at[3] + 9, &byte, 1, t.at[3] + 10);
        expect_record_error(&o, TW_ERR_CORRUPT, in, 3, t.at[3], "length CRC mismatch", 1);
        /* bad data CRC of record 2: one payload byte flipped */
        byte = t.data[t.at[2] + 20] ^ 1;
        write_edited("in.tfrecord", &t, t.at[2] + 20, &byte, 1, t.at[2] + 21);
        expect_record_error(&o, TW_ERR_CORRUPT, in, 2, t.at[2], "data CRC mismatch", 1);
        /* a length field of 2^40 with a valid length CRC: refused before any allocation */
        tfr_buf big;
        memset(&big, 0, sizeof big);
        tfr_add_len(&big, "x", 1, 1ull << 40);
        write_edited("in.tfrecord", &t, t.at[4], big.data, 12, t.len);
        expect_record_error(&o, TW_ERR_TOO_LARGE, in, 4, t.at[4],
                            "record length 1099511627776 exceeds the cap of 67108864 bytes", 1);
        free(big.data);
        /* torn tail: the last record cut in its payload */
        write_edited("in.tfrecord", &t, t.len - 9, NULL, 0, t.len);
        expect_record_error(&o, TW_ERR_TRUNCATED, in, 9, t.at[9], "truncated record", 1);
        /* trailing garbage: a partial header, then 20 bytes that are no header */
        write_edited("in.tfrecord", &t, t.len, "junk!", 5, t.len);
        expect_record_error(&o, TW_ERR_TRUNCATED, in, 10, t.len, "header has 5 of 12 bytes", 1);
        write_edited("in.tfrecord", &t, t.len, "twenty bytes of junk", 20, t.len);
        expect_record_error(&o, TW_ERR_CORRUPT, in, 10, t.len, "length CRC mismatch", 1);
        /* the cap given as an option */
        write_file(in, t.data, t.len);
        o.max_record_bytes = 30;
        expect_record_error(&o, TW_ERR_TOO_LARGE, in, 0, 0, "exceeds the cap of 30 bytes", 1);
        o.max_record_bytes = 64 << 20;
        /* a truncated gzip input: the gzip layer's error, labelled with the record */
        gzFile g = gzopen(in, "wb");
        gzwrite(g, t.data, (unsigned)t.len);
        gzclose(g);
        FILE *f = fopen(in, "rb");
        uint8_t gz[4096];
        size_t gn = fread(gz, 1, sizeof gz, f);
        fclose(f);
        write_file(in, gz, gn - 12);
        tw_error err;
        assert_int_equal(tw_convert(&o, NULL, &err), TW_ERR_TRUNCATED);
        uint64_t index;
        assert_true(tw_convert_error_record(&err, &index));
        assert_int_equal(err.offset, (int64_t)t.at[index]);
        assert_true(strstr(err.message, "gzip") != NULL);
        assert_int_equal(count_files(), 1);
    }
    free(t.data);
}

static void test_tfrecord_not_examples(void **state)
{
    (void)state;
    fresh_dir("tfr_schema");
    const char *in = path("in.tfrecord");
    tw_convert_options o;
    options_tfr(&o, "in.tfrecord");
    tw_error err;
    tw_example_builder *b;
    assert_int_equal(tw_example_builder_create(&b, &err), TW_OK);
    uint8_t px[12] = {0};
    int64_t v[2] = {1, 2};
    float fl = 0.5f;
    char want[900];

    /* a record that is no protobuf at record 5 */
    tfr_buf t;
    image_set(&t, 5);
    tfr_add(&t, "\xff\xff\xff\xff", 4);
    add_image_example(&t, 6, 3, 2, 2);
    write_file(in, t.data, t.len);
    expect_record_error(&o, TW_ERR_CORRUPT, in, 5, t.at[5],
                        "not a tf.train.Example: its 4 bytes do not parse as one", 1);
    free(t.data);

    /* an extra feature at record 6 */
    image_set(&t, 6);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, 12, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "height", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "width", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "depth", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "extra", v, 1, &err), TW_OK);
    tfr_add_example(&t, b);
    write_file(in, t.data, t.len);
    snprintf(want, sizeof want, "feature 'extra' is not in the first record of %s", in);
    expect_record_error(&o, TW_ERR_INVALID, in, 6, t.at[6], want, 1);
    free(t.data);

    /* a missing feature at record 2, a changed kind at record 1 */
    image_set(&t, 2);
    tw_example_builder_reset(b);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, 12, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "depth", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "width", v, 1, &err), TW_OK);
    tfr_add_example(&t, b);
    write_file(in, t.data, t.len);
    snprintf(want, sizeof want, "feature 'height' (int64) of the first record of %s is missing", in);
    expect_record_error(&o, TW_ERR_INVALID, in, 2, t.at[2], want, 1);
    free(t.data);
    image_set(&t, 1);
    tw_example_builder_reset(b);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, 12, &err), TW_OK);
    assert_int_equal(tw_example_add_floats(b, "label", &fl, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "height", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "width", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "depth", v, 1, &err), TW_OK);
    tfr_add_example(&t, b);
    write_file(in, t.data, t.len);
    expect_record_error(&o, TW_ERR_INVALID, in, 1, t.at[1],
                        "feature 'label' is float but int64 in the first record", 1);
    free(t.data);

    /* a label with two values where the first record has one */
    image_set(&t, 3);
    tw_example_builder_reset(b);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, 12, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", v, 2, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "height", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "width", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "depth", v, 1, &err), TW_OK);
    tfr_add_example(&t, b);
    write_file(in, t.data, t.len);
    expect_record_error(&o, TW_ERR_INVALID, in, 3, t.at[3], "feature 'label' has 2 values", 1);
    free(t.data);

    /* a float label that is not a number */
    memset(&t, 0, sizeof t);
    for (int i = 0; i < 3; i++) {
        float y = i == 2 ? NAN : (float)i;
        tw_example_builder_reset(b);
        assert_int_equal(tw_example_add_floats(b, "label", &y, 1, &err), TW_OK);
        tfr_add_example(&t, b);
    }
    write_file(in, t.data, t.len);
    expect_record_error(&o, TW_ERR_INVALID, in, 2, t.at[2],
                        "feature 'label' is nan: labels must be finite numbers", 1);
    free(t.data);

    /* a name twice in one record */
    memset(&t, 0, sizeof t);
    tw_example_builder_reset(b);
    assert_int_equal(tw_example_add_int64s(b, "a", v, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "a", v, 1, &err), TW_OK);
    tfr_add_example(&t, b);
    write_file(in, t.data, t.len);
    expect_record_error(&o, TW_ERR_INVALID, in, 0, 0, "feature 'a' appears twice", 1);
    free(t.data);

    /* an Example without features (an empty record parses as one) */
    memset(&t, 0, sizeof t);
    tfr_add(&t, "", 0);
    write_file(in, t.data, t.len);
    expect_record_error(&o, TW_ERR_INVALID, in, 0, 0, "has no features", 1);
    free(t.data);

    /* an empty file, plain or gzip */
    write_file(in, "", 0);
    expect_failure(&o, TW_ERR_INVALID, "no records", 1);
    assert_int_equal(tw_convert(&o, NULL, &err), TW_ERR_INVALID);
    assert_string_equal(err.file, in);
    assert_false(tw_convert_error_record(&err, NULL));
    write_gz(in, "", 0);
    expect_failure(&o, TW_ERR_INVALID, "no records", 1);
    tw_example_builder_destroy(b);
}

static void test_tfrecord_options(void **state)
{
    (void)state;
    tw_convert_options o;
    tw_convert_source s;
    tw_error err;
    tw_convert_options_default(&o);
    assert_int_equal(o.max_record_bytes, 64 << 20);
    o.tfrecord = "in";
    o.output = "o";
    assert_int_equal(tw_convert_check(&o, &s, &err), TW_OK);
    assert_int_equal(s, TW_CONVERT_TFRECORD);
    assert_string_equal(tw_convert_source_name(s), "tfrecord");
    o.csv = "c";
    o.label_column = "y";
    expect_invalid(&o, "exactly one source");
    o.csv = o.label_column = NULL;
    o.test_tfrecord = "t";
    expect_invalid(&o, "--test-output is needed");
    o.test_output = "to";
    assert_int_equal(tw_convert_check(&o, &s, &err), TW_OK);
    o.test_fraction = 0.5;
    expect_invalid(&o, "--test-fraction and --test-tfrecord exclude each other");
    o.test_fraction = -1;
    o.test_output = "t";
    expect_invalid(&o, "'t' is named twice");
    o.test_output = "to";
    o.max_record_bytes = 0;
    expect_invalid(&o, "--max-record-bytes must be positive");
    tw_convert_options_default(&o);
    o.images = "i";
    o.labels = "l";
    o.output = "o";
    o.test_tfrecord = "t";
    o.test_output = "to";
    expect_invalid(&o, "--test-tfrecord needs a TFRecord source");
    tw_convert_options_default(&o);
    o.test_tfrecord = "t";
    o.output = "o";
    expect_invalid(&o, "exactly one source");

    /* reading a record error back */
    uint64_t index = 0;
    tw_error_set(&err, TW_ERR_CORRUPT, "f", 123, "record 17: corrupted record: data CRC mismatch");
    assert_true(tw_convert_error_record(&err, &index));
    assert_int_equal(index, 17);
    assert_true(tw_convert_error_record(&err, NULL));
    static const char *const no[] = {"record : x", "record 1x: y", "record 12", "records 1: x",
                                     "record 99999999999999999999: x", "the record 1: x", ""};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        tw_error_set(&err, TW_ERR_CORRUPT, "f", 1, "%s", no[i]);
        assert_false(tw_convert_error_record(&err, &index));
    }
}

/* ================================ the meta, read back ================================ */

/* Derives a run's dataset settings for folder "/d/7" from meta; checks train, test (NULL: null), the
 * image feature and the shape's first dimension and size. */
static void expect_run_dataset(const json_t *meta, const char *train, const char *test, const char *image,
                               json_int_t dim0, size_t rank)
{
    const char *why = "unset";
    json_t *ds = tw_convert_meta_run_dataset(meta, "/d/7", &why);
    assert_non_null(ds);
    assert_null(why);
    assert_string_equal(json_string_value(json_object_get(ds, "train")), train);
    if (test)
        assert_string_equal(json_string_value(json_object_get(ds, "test")), test);
    else
        assert_true(json_is_null(json_object_get(ds, "test")));
    assert_string_equal(json_string_value(json_object_get(ds, "image_feature")), image);
    assert_string_equal(json_string_value(json_object_get(ds, "label_feature")), "label");
    json_t *shape = json_object_get(ds, "shape");
    assert_int_equal(json_array_size(shape), rank);
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), dim0);
    json_decref(ds);
}

static void expect_no_run_dataset(const char *meta_text, const char *want)
{
    json_t *meta = json_loads(meta_text, 0, NULL);
    assert_non_null(meta);
    const char *why = NULL;
    assert_null(tw_convert_meta_run_dataset(meta, "/d/7", &why));
    assert_non_null(why);
    assert_non_null(strstr(why, want));
    json_decref(meta);
}

/* --test-first / --test-last N: the test split is exactly the first / last N examples, in order, and the
 * training split the rest, in order; N past the source's count is refused. */
static void test_positional_split(void **state)
{
    (void)state;
    for (int last = 0; last < 2; last++) {
        fresh_dir(last ? "split_last" : "split_first");
        write_idx_pair("s", 40, 40, 2, 2, 0, 0);
        tw_convert_options o;
        options_idx(&o, "s");
        o.test_output = path("test.tfrecord");
        *(last ? &o.test_last : &o.test_first) = 15;
        tw_convert_result res;
        tw_error err;
        assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
        records tr, te;
        read_records(o.output, &tr);
        read_records(o.test_output, &te);
        assert_int_equal(te.n, 15);
        assert_int_equal(tr.n, 25);
        for (size_t i = 0; i < te.n; i++)
            assert_int_equal(image_id(te.ex[i]), (last ? 25 : 0) + i);
        for (size_t i = 0; i < tr.n; i++)
            assert_int_equal(image_id(tr.ex[i]), (last ? 0 : 15) + i);
        free_records(&tr);
        free_records(&te);
        json_t *m = load_json(res.meta_path), *split = json_object_get(m, "test_split");
        assert_string_equal(json_string_value(json_object_get(split, "method")), last ? "last" : "first");
        assert_int_equal(json_integer_value(json_object_get(split, "count")), 15);
        json_decref(m);
        *(last ? &o.test_last : &o.test_first) = 41;
        expect_failure(&o, TW_ERR_INVALID, last ? "the last 41 examples: the source holds only 40"
                                                : "the first 41 examples: the source holds only 40", 5);
    }
    tw_convert_options o;
    options_idx(&o, "s");
    o.test_output = path("test.tfrecord");
    o.test_last = 3;
    o.test_fraction = 0.5;
    expect_invalid(&o, "--test-fraction, --test-first and --test-last exclude each other");
    o.test_fraction = -1;
    o.test_output = NULL;
    expect_invalid(&o, "--test-output is needed with --test-last");
}

/* The seed converter's layout: size, label, image_raw (n bytes); the values live in scratch (the builder
 * borrows them until the record is serialized). */
static void make_sized(tw_example_builder *b, uint32_t i, void *scratch, int64_t n)
{
    tw_error err;
    int64_t *v = scratch;
    uint8_t *px = (uint8_t *)(v + 2);
    v[0] = n;
    v[1] = i % 10;
    for (int64_t k = 0; k < n; k++)
        px[k] = (uint8_t)(i + k);
    assert_int_equal(tw_example_add_int64s(b, "size", &v[0], 1, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", &v[1], 1, &err), TW_OK);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", px, (size_t)n, &err), TW_OK);
}

static void make_sized_16(tw_example_builder *b, uint32_t i, void *s) { make_sized(b, i, s, 16); }
static void make_sized_75(tw_example_builder *b, uint32_t i, void *s) { make_sized(b, i, s, 75); }
static void make_sized_10(tw_example_builder *b, uint32_t i, void *s) { make_sized(b, i, s, 10); }

/* image_raw of 36 bytes and no other layout feature. */
static void make_bare_36(tw_example_builder *b, uint32_t i, void *scratch)
{
    tw_error err;
    int64_t *label = scratch;
    *label = i % 3;
    memset(label + 1, (int)i, 36);
    assert_int_equal(tw_example_add_bytes1(b, "image_raw", label + 1, 36, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", label, 1, &err), TW_OK);
}

/* Converts name and checks the meta's shape [a, b, c] (c 0: [a]) and that shape_rule contains rule. */
static void expect_shape(const char *name, const tw_convert_options *given, int64_t a, int64_t b, int64_t c,
                         const char *rule)
{
    tw_convert_options o;
    if (given)
        o = *given;
    else
        options_tfr(&o, name);
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    json_t *m = load_json(res.meta_path), *shape = json_object_get(m, "shape");
    int64_t want[3] = {a, b, c};
    assert_int_equal(json_array_size(shape), c ? 3 : 1);
    for (size_t i = 0; i < json_array_size(shape); i++)
        assert_int_equal(json_integer_value(json_array_get(shape, i)), want[i]);
    assert_string_equal(json_string_value(json_object_get(m, "dtype")), "uint8");
    const char *got = json_string_value(json_object_get(m, "shape_rule"));
    if (!got || !strstr(got, rule))
        fail_msg("shape_rule '%s' lacks '%s'", got ? got : "(none)", rule);
    assert_string_equal(res.shape_rule, got);
    json_decref(m);
}

static void test_tfrecord_shape_rules(void **state)
{
    (void)state;
    fresh_dir("tfr_shape_rules");
    write_made("sq.tfrecord", 4, make_sized_16);
    write_made("rgb.tfrecord", 4, make_sized_75);
    write_made("vec.tfrecord", 4, make_sized_10);
    write_made("bare.tfrecord", 4, make_bare_36);
    expect_shape("sq.tfrecord", NULL, 4, 4, 1, "the feature size: 16 = 4 x 4, a square image of one channel");
    expect_shape("rgb.tfrecord", NULL, 5, 5, 3, "the feature size: 75 = 3 x 5 x 5, a square image of three channels");
    expect_shape("vec.tfrecord", NULL, 10, 0, 0, "the feature size: 10 is no square image, so a vector of 10 values");
    expect_shape("bare.tfrecord", NULL, 6, 6, 1, "image_raw's length in bytes: 36 = 6 x 6");
    tw_convert_options o;
    options_tfr(&o, "sq.tfrecord");
    tw_error err;
    assert_int_equal(tw_convert_shape_parse("2x8x1", &o, &err), TW_OK);
    expect_shape(NULL, &o, 2, 8, 1, "given");
    assert_int_equal(tw_convert_shape_parse("16", &o, &err), TW_OK);
    expect_shape(NULL, &o, 16, 0, 0, "given");
    /* a shape the records do not hold is refused, naming the record and what it holds */
    int before = count_files();
    assert_int_equal(tw_convert_shape_parse("4,4,2", &o, &err), TW_OK);
    expect_record_error(&o, TW_ERR_INVALID, o.tfrecord, 0, 0,
                        "the shape given, 4x4x2, is 32 values: image_raw must hold 32 bytes (uint8) or 128 "
                        "(float32), but its image_raw holds 16 bytes", before);
    /* malformed shapes, and a shape for a source that knows its own */
    static const char *const BAD[] = {"", "x", "28x", "28xx1", "0x4", "4x-1", "1x2x3x4x5x6x7x8x9", "16777217", "a"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        assert_int_equal(tw_convert_shape_parse(BAD[i], &o, &err), TW_ERR_INVALID);
        assert_int_equal(o.shape_rank, 0);
        assert_non_null(strstr(err.message, "is not a shape: 1 to 8 dimensions joined by x or commas"));
    }
    options_idx(&o, "s");
    assert_int_equal(tw_convert_shape_parse("4x4", &o, &err), TW_OK);
    expect_invalid(&o, "--shape is for a TFRecord source (--tfrecord)");
    options_tfr(&o, "sq.tfrecord");
    assert_int_equal(tw_convert_shape_parse("4096x4096x2", &o, &err), TW_OK);
    expect_invalid(&o, "--shape: more than 16777216 values an example");
}

static void test_meta_run_dataset(void **state)
{
    (void)state;
    fresh_dir("meta_run");
    write_idx_pair("train", 30, 30, 2, 3, 0, 0);
    write_idx_pair("t10k", 12, 12, 2, 3, 0, 0);
    tw_convert_options o;
    options_idx(&o, "train");
    o.test_images = path("t10k-images");
    o.test_labels = path("t10k-labels");
    o.test_output = path("held-out.tfrecord");
    tw_convert_result res;
    tw_error err;
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    json_t *m = NULL;
    assert_int_equal(tw_convert_meta_load(res.meta_path, &m, &err), TW_OK);
    /* the file names the meta records, in the folder given; [h, w, d] */
    expect_run_dataset(m, "/d/7/out.tfrecord", "/d/7/held-out.tfrecord", "image_raw", 2, 3);
    json_t *shape = tw_convert_meta_shape(m);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 3);
    json_decref(shape);
    assert_int_equal(json_integer_value(tw_convert_meta_split(m, "test", "count")), 12);
    assert_null(tw_convert_meta_split(m, "validation", "count"));
    assert_null(tw_convert_meta_split(NULL, "train", "count"));
    json_decref(m);

    /* CSV: the feature count is the shape; no test split: "test" is null */
    const char *csv = "a,label,b\n0.5,1,-2\n1,0,3\n";
    write_file(path("d.csv"), csv, strlen(csv));
    tw_convert_options_default(&o);
    o.csv = path("d.csv");
    o.label_column = "label";
    o.output = path("train.tfrecord");
    assert_int_equal(tw_convert(&o, &res, &err), TW_OK);
    assert_int_equal(tw_convert_meta_load(res.meta_path, &m, &err), TW_OK);
    expect_run_dataset(m, "/d/7/train.tfrecord", NULL, "features", 2, 1);
    json_decref(m);

    /* a test split without examples is no test split */
    m = json_loads("{\"shape\": [4], \"features\": {\"features\": \"float\"}, \"splits\": {\"train\": "
                   "{\"path\": \"train.tfrecord\", \"count\": 3}, \"test\": {\"path\": \"t\", \"count\": 0}}}",
                   0, NULL);
    expect_run_dataset(m, "/d/7/train.tfrecord", NULL, "features", 4, 1);
    json_decref(m);
    expect_no_run_dataset("{\"shape\": null, \"splits\": {\"train\": {\"path\": \"x\"}}}", "shape");
    expect_no_run_dataset("{\"shape\": [], \"splits\": {\"train\": {\"path\": \"x\"}}}", "shape");
    expect_no_run_dataset("{\"shape\": [2], \"splits\": {\"train\": {\"count\": 1}}}", "no training");
    expect_no_run_dataset("{\"shape\": [2], \"splits\": {\"train\": {\"path\": \"x\"}, \"test\": {\"count\": 1}}}",
                          "test file");

    /* a missing meta file, and one that is not a JSON object */
    assert_int_equal(tw_convert_meta_load(path("absent.json"), &m, &err), TW_ERR_IO);
    write_file(path("bad.json"), "[1, 2]", 6);
    assert_int_equal(tw_convert_meta_load(path("bad.json"), &m, &err), TW_ERR_CORRUPT);
    assert_null(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meta_path),
        cmocka_unit_test(test_check_options),
        cmocka_unit_test(test_idx_plain),
        cmocka_unit_test(test_idx4_gzip_inputs_every_compression),
        cmocka_unit_test(test_idx_test_pair),
        cmocka_unit_test(test_fraction_split_exact_and_seeded),
        cmocka_unit_test(test_idx_failures_leave_nothing),
        cmocka_unit_test(test_csv_int_and_float_labels),
        cmocka_unit_test(test_csv_failures_leave_nothing),
        cmocka_unit_test(test_npy_volumes),
        cmocka_unit_test(test_npy_failures_leave_nothing),
        cmocka_unit_test(test_tfrecord_copies_records),
        cmocka_unit_test(test_tfrecord_fraction_and_test_file),
        cmocka_unit_test(test_tfrecord_meta_layouts),
        cmocka_unit_test(test_tfrecord_corrupt_inputs),
        cmocka_unit_test(test_tfrecord_not_examples),
        cmocka_unit_test(test_tfrecord_options),
        cmocka_unit_test(test_meta_run_dataset),
        cmocka_unit_test(test_positional_split),
        cmocka_unit_test(test_tfrecord_shape_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
