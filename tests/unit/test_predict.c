/* test_predict.c — the input rules of a prediction (engine/predict.c) on a batch made by hand (the model's
 * shape, scale and width, as tw_predict_batch_init fills them from a checkpoint): JSON arrays flat and nested,
 * base64 files with and without padding and as data: URLs, .npy dtypes and row sizes, images for a model that
 * does not take them, the batch caps, and every refusal naming the input. The forward pass and the top-k are
 * checked against NumPy by tests/integration/test_predict.py. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "predict.h"

/* A batch for a model of input shape [2, 2, 1] (4 values) and scale 0.5, or [4] (flat). */
static tw_predict_batch batch(int flat)
{
    tw_predict_batch b = {.shape = {2, 2, 1}, .rank = 3, .scale = 0.5f, .width = 4, .labels = json_array()};
    if (flat) {
        b.shape[0] = 4;
        b.rank = 1;
    }
    return b;
}

/* A .npy v1 file with header dict `dict` and n data bytes; *len receives its size; caller frees. */
static char *make_npy(const char *dict, const void *data, size_t n, size_t *len)
{
    size_t dl = strlen(dict), hl = ((10 + dl + 1 + 63) / 64) * 64 - 10;
    char *p = malloc(10 + hl + n);
    memcpy(p, "\x93NUMPY\x01\x00", 8);
    p[8] = (char)(hl & 0xff);
    p[9] = (char)(hl >> 8);
    memset(p + 10, ' ', hl);
    memcpy(p + 10, dict, dl);
    p[10 + hl - 1] = '\n';
    memcpy(p + 10 + hl, data, n);
    *len = 10 + hl + n;
    return p;
}

static char *b64(const unsigned char *s, size_t n, int pad)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = calloc(n / 3 * 4 + 8, 1), *o = out;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        int chars = i + 2 < n ? 4 : i + 1 < n ? 3 : 2;
        for (int k = 0; k < 4; k++)
            if (k < chars || pad)
                *o++ = k < chars ? A[(v >> (18 - 6 * k)) & 63] : '=';
    }
    return out;
}

static void json_arrays(void **state)
{
    (void)state;
    tw_predict_batch b = batch(0);
    tw_error err;
    json_t *in = json_loads("[[1, 2, 3, 4], [[5, 6], [7, 8]], [[[0.25], [0.5]], [[1e3], [-2]]]]", 0, NULL);
    assert_int_equal(tw_predict_add_json(&b, in, &err), TW_OK);
    json_decref(in);
    assert_int_equal(b.rows, 3);
    const float want[12] = {1, 2, 3, 4, 5, 6, 7, 8, 0.25f, 0.5f, 1e3f, -2}; /* taken as they are: no scale */
    assert_memory_equal(b.x, want, sizeof want);
    assert_string_equal(json_string_value(json_array_get(b.labels, 2)), "inputs[2]");
    static const struct {
        const char *json, *words;
    } bad[] = {
        {"[[1, 2, 3]]", "3 values, the model takes 4"},
        {"[[1, 2, 3, 4, 5]]", "more than 4 values"},
        {"[[1, \"a\", 3, 4]]", "an input is an array"},
        {"[[[[[[1]]]]]]", "nested at most 4"},
        {"[]", "non-empty"},
        {"[\"@@@\"]", "base64"},
        {"[\"AAAA\"]", "not a PNG or JPEG image nor a .npy"},
        {"[[1, 2, 3, 1e39]]", "not a finite float32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        in = json_loads(bad[i].json, 0, NULL);
        assert_non_null(in);
        tw_status st = tw_predict_add_json(&b, in, &err);
        json_decref(in);
        if (st != TW_ERR_INVALID || !strstr(err.message, bad[i].words))
            fail_msg("%s: status %d, '%s'", bad[i].json, st, err.message);
        assert_true(!strncmp(err.file, "inputs", 6));
    }
    tw_predict_batch_cleanup(&b);
}

static void base64_files(void **state)
{
    (void)state;
    const uint8_t px[8] = {0, 2, 4, 6, 8, 10, 12, 14};
    size_t n;
    char *file = make_npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 2, 1), }", px, 8, &n);
    tw_predict_batch b = batch(0);
    tw_error err;
    assert_true(n % 3 != 0); /* so that the base64 has padding to write or leave out */
    for (int pad = 0; pad < 2; pad++) {
        char *text = b64((const unsigned char *)file, n, pad);
        char url[4096];
        snprintf(url, sizeof url, "data:application/octet-stream;base64,%s", text);
        json_t *in = json_pack("[s, s]", text, url);
        assert_int_equal(tw_predict_add_json(&b, in, &err), TW_OK);
        json_decref(in);
        free(text);
    }
    assert_int_equal(b.rows, 8); /* 2 forms x 2 paddings x 2 rows */
    for (int i = 0; i < 4; i++) /* uint8 values times the scale */
        assert_true(b.x[i] == (float)px[i] * 0.5f && b.x[4 + i] == (float)px[4 + i] * 0.5f);
    assert_string_equal(json_string_value(json_array_get(b.labels, 1)), "inputs[0][1]");
    free(file);
    tw_predict_batch_cleanup(&b);
}

static void npy_dtypes_and_rows(void **state)
{
    (void)state;
    tw_predict_batch b = batch(1);
    tw_error err;
    size_t n;
    const float f[4] = {0.5f, -1, 2, 3};
    char *file = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4), }", f, sizeof f, &n);
    assert_int_equal(tw_predict_add_file(&b, file, n, "f.npy", &err), TW_OK);
    free(file);
    assert_memory_equal(b.x, f, sizeof f); /* floats as they are */
    const double d[4] = {1, 2, 3, 4};
    file = make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 4), }", d, sizeof d, &n);
    assert_int_equal(tw_predict_add_file(&b, file, n, "d.npy", &err), TW_OK);
    free(file);
    assert_true(b.rows == 2 && b.x[4] == 1 && b.x[7] == 4);
    const int64_t q[4] = {0};
    file = make_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 4), }", q, sizeof q, &n);
    assert_int_equal(tw_predict_add_file(&b, file, n, "q.npy", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "int64"));
    free(file);
    file = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", f, sizeof f, &n);
    assert_int_equal(tw_predict_add_file(&b, file, n, "w.npy", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "2 values, the model takes 4"));
    free(file);
    file = make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f, sizeof f, &n);
    assert_int_equal(tw_predict_add_file(&b, file, n, "v.npy", &err), TW_ERR_INVALID);
    free(file);
    assert_int_equal(tw_predict_add_file(&b, "\x93NUMPY", 6, "cut.npy", &err), TW_ERR_TRUNCATED);
    assert_int_equal(tw_predict_add_file(&b, "\x93NUMPY\x01", 7, "cut.npy", &err), TW_ERR_TRUNCATED);
    assert_int_equal(b.rows, 2);
    /* an image for a flat model */
    assert_int_equal(tw_predict_add_file(&b, "\x89PNG\r\n\x1a\n", 8, "i.png", &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "not images"));
    tw_predict_batch_cleanup(&b);
}

static void caps(void **state)
{
    (void)state;
    tw_predict_batch b = batch(1);
    tw_error err;
    size_t n, rows = TW_PREDICT_MAX_INPUTS + 1;
    uint8_t *px = calloc(rows, 4);
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': (%zu, 4), }", rows);
    char *file = make_npy(dict, px, rows * 4, &n);
    assert_int_equal(tw_predict_add_file(&b, file, n, "many.npy", &err), TW_ERR_TOO_LARGE);
    assert_non_null(strstr(err.message, "1024"));
    assert_string_equal(err.file, "many.npy[1024]");
    assert_int_equal(b.rows, TW_PREDICT_MAX_INPUTS);
    free(file);
    free(px);
    tw_predict_batch_cleanup(&b);
    tw_predict_batch_cleanup(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_arrays),
        cmocka_unit_test(base64_files),
        cmocka_unit_test(npy_dtypes_and_rows),
        cmocka_unit_test(caps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
