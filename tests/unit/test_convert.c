/* test_convert.c — conversions end to end on small files: IDX (idx3/idx4, raw/gzip inputs, every output
 * compression), the test pair and the exact seeded fraction split, CSV and NPY features and labels, the
 * meta JSON, option checks, and that every failure leaves no output or temporary file (and an existing
 * output untouched). Outputs are read back with our TFRecord reader and Example parser; TensorFlow reads
 * them in tests/integration/test_convert.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "testutil.h"
#include <jansson.h>
#include <zlib.h>

#include "convert.h"
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
