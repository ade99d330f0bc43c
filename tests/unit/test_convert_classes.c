/* test_convert_classes.c — class names and the stratified fraction split (convert.h): every accepted
 * spelling of a class-names text and every refusal with the position it names; the meta getters
 * (tw_convert_meta_class_names, tw_convert_class_names_of, tw_convert_meta_test_method, tw_convert_meta_find); and the split of
 * NumPy inputs with imbalanced integer labels (exact total, each class within one example of its share,
 * each example once, deterministic per seed) against float labels (unstratified), with the meta's
 * "test_split" and "class_names" and the refusal of names that do not fit the labels. */
#include <setjmp.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "testutil.h"
#include <jansson.h>

#include "convert.h"
#include "example.h"
#include "tfrecord.h"

/* ================================ helpers ================================ */

static char dir[700];

/* Makes an empty scratch folder TW_TEST_TMP/<name> and points `dir` at it. */
static void fresh_dir(const char *name)
{
    snprintf(dir, sizeof dir, "%s/%s", tw_test_tmp(), name);
    tw_test_rmdir(dir); /* left over from an earlier run, or absent */
    assert_int_equal(mkdir(dir, 0755), 0);
}

static const char *path(const char *name)
{
    static char buf[16][800]; /* rotating: options() keeps four alive, tests a few more */
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_file(const char *p, const void *data, size_t n)
{
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* A v1 .npy file of the dict and data. */
static void write_npy(const char *name, const char *descr, const char *shape, const void *data, size_t n)
{
    char head[128];
    int len = snprintf(head, sizeof head, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    size_t total = 10 + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)len + pad + 1;
    uint8_t *b = malloc(10 + hlen + n);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)(hlen & 0xff);
    b[9] = (uint8_t)(hlen >> 8);
    memcpy(b + 10, head, (size_t)len);
    memset(b + 10 + len, ' ', pad);
    b[10 + hlen - 1] = '\n';
    memcpy(b + 10 + hlen, data, n);
    write_file(path(name), b, 10 + hlen + n);
    free(b);
}

enum { N = 301, N_CLASSES = 4 };

/* Features float32 [N, 2] whose first value is the example's id; labels int64 (class of i: 0 for most,
 * then 1, 2, 3 ever rarer) and float32 (i / N). */
static int64_t label_of(int i) { return i % 10 < 6 ? 0 : i % 10 < 9 ? 1 : i % 20 == 9 ? 2 : 3; }

static void write_inputs(void)
{
    float x[N][2];
    int64_t y[N];
    float yf[N];
    for (int i = 0; i < N; i++) {
        x[i][0] = (float)i;
        x[i][1] = 0.5f;
        y[i] = label_of(i);
        yf[i] = (float)i / N;
    }
    char shape[32];
    snprintf(shape, sizeof shape, "(%d, 2)", N);
    write_npy("x.npy", "<f4", shape, x, sizeof x);
    snprintf(shape, sizeof shape, "(%d,)", N);
    write_npy("y.npy", "<i8", shape, y, sizeof y);
    write_npy("yf.npy", "<f4", shape, yf, sizeof yf);
}

/* The ids (first feature value) of the records of a converted file, in order; returns the count. */
static size_t read_ids(const char *p, int *ids)
{
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open(p, &o, &r, &err), TW_OK);
    size_t n = 0;
    const uint8_t *data;
    size_t len;
    while (tw_tfrecord_read(r, &data, &len, &err) == TW_OK) {
        tw_example *ex;
        assert_int_equal(tw_example_parse(data, len, p, -1, &ex, &err), TW_OK);
        tw_feature f;
        assert_true(tw_example_find(ex, "image_raw", &f));
        size_t blen;
        const uint8_t *b = tw_feature_bytes_at(&f, 0, &blen);
        float v;
        memcpy(&v, b, 4);
        ids[n++] = (int)v;
        tw_example_destroy(ex);
    }
    tw_tfrecord_reader_close(r);
    return n;
}

static void options(tw_convert_options *o, const char *labels, double f, uint64_t seed)
{
    tw_convert_options_default(o);
    o->npy_features = path("x.npy");
    o->npy_labels = path(labels);
    o->output = path("train.tfrecord");
    o->test_output = path("test.tfrecord");
    o->test_fraction = f;
    o->seed = seed;
}

static json_t *parsed(const char *text)
{
    json_t *names;
    tw_error err;
    if (tw_convert_class_names_parse(text, strlen(text), &names, &err) != TW_OK)
        fail_msg("'%s' refused: %s", text, err.message);
    return names;
}

static void expect_names(const char *text, const char *want_json)
{
    json_t *names = parsed(text), *want = json_loads(want_json, 0, NULL);
    assert_non_null(want);
    if (!json_equal(names, want)) {
        char *got = json_dumps(names, 0);
        fail_msg("'%s' gave %s, not %s", text, got, want_json);
    }
    json_decref(names);
    json_decref(want);
}

static void expect_refused(const char *text, size_t len, const char *want)
{
    json_t *names = (json_t *)1;
    tw_error err;
    if (tw_convert_class_names_parse(text, len, &names, &err) != TW_ERR_INVALID)
        fail_msg("'%.40s' was not refused", text);
    assert_null(names);
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
}

/* ================================= tests ================================= */

static void test_class_names_spellings(void **state)
{
    (void)state;
    expect_names("[\"T-shirt/top\", \"Ankle boot\"]", "[\"T-shirt/top\", \"Ankle boot\"]");
    expect_names("  \n [\"a\"]", "[\"a\"]");
    expect_names("cat\ndog\nbird\n", "[\"cat\", \"dog\", \"bird\"]");
    expect_names("cat\r\n dog \r\nbird", "[\"cat\", \"dog\", \"bird\"]");
    expect_names("cat, dog ,bird\n", "[\"cat\", \"dog\", \"bird\"]");
    expect_names("a,b, c", "[\"a\", \"b\", \"c\"]");
    expect_names("one name", "[\"one name\"]");
    expect_names("x, y\nz", "[\"x, y\", \"z\"]"); /* several lines: a comma is part of a name */
    expect_names("caf\xc3\xa9,\xe7\x8c\xab", "[\"caf\\u00e9\", \"\\u732b\"]");
}

static void test_class_names_refusals(void **state)
{
    (void)state;
    expect_refused("", 0, "no class names given");
    expect_refused(" \n\n", 3, "no class names given");
    expect_refused("[]", 2, "no class names given");
    expect_refused("a,b,a", 5, "name 3 ('a') repeats name 1");
    expect_refused("a\nb\n\nc\n", 7, "name 3 is empty");
    expect_refused("a,,b", 4, "name 2 is empty");
    expect_refused("[\"a\", 2]", 8, "name 2 is not a string");
    expect_refused("[\"a\", \"b\"", 9, "not a JSON array of names");
    expect_refused("a,b\x01,c", 7, "name 2 has a control character");
    expect_refused("a,b\x7f", 4, "name 2 has a control character");
    expect_refused("a,\xc2\x85x", 5, "name 2 has a control character"); /* U+0085, C1 */
    expect_refused("a,\xff\xfe", 4, "name 2 is not UTF-8 text");
    expect_refused("[\"a\\u0000b\"]", 12, "not a JSON array of names"); /* jansson refuses a NUL */
    char long_name[TW_CONVERT_MAX_CLASS_NAME + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    expect_refused(long_name, strlen(long_name), "name 1 is 129 bytes long: at most 128");
    long_name[TW_CONVERT_MAX_CLASS_NAME] = '\0';
    json_decref(parsed(long_name)); /* exactly the cap */
    size_t n = (size_t)TW_CONVERT_MAX_CLASS_NAMES + 1, len = 0;
    char *many = malloc(n * 8);
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(many + len, "%zu,", i);
    expect_refused(many, len - 1, "more than 65536 class names");
    free(many);
}

static void test_meta_getters(void **state)
{
    (void)state;
    json_t *meta = json_loads("{\"class_names\": [\"cat\", \"dog\"], \"test_split\": {\"method\": \"fraction\"}}", 0,
                              NULL);
    assert_int_equal(json_array_size(tw_convert_meta_class_names(meta)), 2);
    assert_string_equal(json_string_value(json_array_get(tw_convert_meta_class_names(meta), 1)), "dog");
    assert_string_equal(tw_convert_meta_test_method(meta), "fraction");
    json_decref(meta);
    meta = json_loads("{\"splits\": {\"train\": {\"count\": 3}, \"test\": {\"count\": 1}}}", 0, NULL);
    assert_null(tw_convert_meta_class_names(meta));
    assert_string_equal(tw_convert_meta_test_method(meta), "file"); /* a meta from before "test_split" */
    json_decref(meta);
    meta = json_loads("{\"splits\": {\"train\": {\"count\": 3}}}", 0, NULL);
    assert_string_equal(tw_convert_meta_test_method(meta), "none");
    json_decref(meta);
    assert_null(tw_convert_meta_class_names(NULL));
}

/* Converts with fraction f and seed; fills test ids; checks the union and the exact total. */
static size_t split_run(const char *labels, double f, uint64_t seed, int *test_ids, json_t **meta)
{
    tw_convert_options o;
    options(&o, labels, f, seed);
    tw_convert_result res;
    tw_error err;
    if (tw_convert(&o, &res, &err) != TW_OK)
        fail_msg("%s", err.message);
    int train_ids[N], seen[N] = {0};
    size_t ntr = read_ids(o.output, train_ids), nte = read_ids(o.test_output, test_ids);
    assert_int_equal(nte, (size_t)(f * N + 0.5));
    assert_int_equal(ntr + nte, N);
    for (size_t i = 0; i < ntr; i++)
        seen[train_ids[i]]++;
    for (size_t i = 0; i < nte; i++)
        seen[test_ids[i]]++;
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1); /* every example in exactly one split */
    *meta = json_load_file(path("train.meta.json"), 0, NULL);
    assert_non_null(*meta);
    return nte;
}

static void test_stratified_split(void **state)
{
    (void)state;
    fresh_dir("convert_classes_split");
    write_inputs();
    int a[N], b[N], c[N];
    json_t *meta;
    for (double f = 0.05; f <= 0.5; f += 0.15) {
        size_t n = split_run("y.npy", f, 7, a, &meta);
        int per[N_CLASSES] = {0}, total[N_CLASSES] = {0};
        for (size_t i = 0; i < n; i++)
            per[label_of(a[i])]++;
        for (int i = 0; i < N; i++)
            total[label_of(i)]++;
        for (int k = 0; k < N_CLASSES; k++)
            if (!(fabs(per[k] - f * total[k]) < 1))
                fail_msg("f %.2f: class %d has %d of %d in the test split", f, k, per[k], total[k]);
        json_t *split = json_object_get(meta, "test_split");
        assert_string_equal(json_string_value(json_object_get(split, "method")), "fraction");
        assert_true(json_is_true(json_object_get(split, "stratified")));
        assert_int_equal(json_integer_value(json_object_get(split, "seed")), 7);
        json_decref(meta);
    }
    size_t na = split_run("y.npy", 0.2, 3, a, &meta);
    json_decref(meta);
    size_t nb = split_run("y.npy", 0.2, 3, b, &meta);
    json_decref(meta);
    split_run("y.npy", 0.2, 4, c, &meta);
    json_decref(meta);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a); /* deterministic */
    assert_true(memcmp(a, c, na * sizeof *a) != 0); /* the seed matters */
    split_run("yf.npy", 0.2, 3, a, &meta); /* float labels: one sampler over all */
    assert_true(json_is_false(json_object_get(json_object_get(meta, "test_split"), "stratified")));
    json_decref(meta);
}

static void test_class_names_in_the_meta(void **state)
{
    (void)state;
    fresh_dir("convert_classes_meta");
    write_inputs();
    tw_convert_options o;
    options(&o, "y.npy", -1, 0);
    o.test_output = NULL;
    json_t *names = parsed("zero,one,two,three");
    o.class_names = names;
    tw_error err;
    assert_int_equal(tw_convert(&o, NULL, &err), TW_OK);
    json_t *meta;
    assert_int_equal(tw_convert_meta_find(o.output, &meta, &err), TW_OK);
    assert_string_equal(tw_convert_meta_test_method(meta), "none");
    json_decref(meta);
    json_t *got = tw_convert_class_names_of(o.output); /* what evaluation and prediction name classes by */
    assert_int_equal(json_array_size(got), 4);
    assert_string_equal(json_string_value(json_array_get(got, 3)), "three");
    json_decref(got);
    assert_null(tw_convert_class_names_of(path("no-such.tfrecord")));
    json_decref(names);
    o.output = path("other.tfrecord");
    names = parsed("zero,one,two");
    o.class_names = names;
    assert_int_equal(tw_convert(&o, NULL, &err), TW_ERR_INVALID);
    if (!strstr(err.message, "3 class names given, but the labels are 0 to 3: 4 classes"))
        fail_msg("%s", err.message);
    struct stat st;
    assert_int_not_equal(stat(o.output, &st), 0); /* nothing written */
    json_decref(names);
    names = parsed("a,b,c,d");
    o.npy_labels = path("yf.npy");
    o.class_names = names;
    assert_int_equal(tw_convert(&o, NULL, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "class names need integer class labels"));
    json_decref(names);
    names = json_loads("[\"a\", \"a\"]", 0, NULL);
    o.class_names = names;
    tw_convert_source src;
    assert_int_equal(tw_convert_check(&o, &src, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "--class-names: name 2 ('a') repeats name 1"));
    json_decref(names);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_names_spellings),
        cmocka_unit_test(test_class_names_refusals),
        cmocka_unit_test(test_meta_getters),
        cmocka_unit_test(test_stratified_split),
        cmocka_unit_test(test_class_names_in_the_meta),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
