/* test_npy.c — .npy preambles (v1, v2), the strict header dict (every accepted spelling numpy writes, every
 * refusal with status and offset), and the streaming example reader (truncation, trailing data, gzip,
 * budget). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zlib.h>

#include "npy.h"

typedef struct {
    uint8_t *data;
    size_t len;
} blob;

/* A .npy file of version major with header dict `dict` (padded with spaces to a multiple of 64 and
 * ended by '\n', as numpy does) followed by n data bytes. */
static blob make_npy(int major, const char *dict, const void *data, size_t n)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hl = ((pre + dl + 1 + 63) / 64) * 64 - pre;
    blob b;
    b.len = pre + hl + n;
    b.data = malloc(b.len);
    memcpy(b.data, "\x93NUMPY", 6);
    b.data[6] = (uint8_t)major;
    b.data[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        b.data[8 + i] = (uint8_t)(hl >> (8 * i));
    memset(b.data + pre, ' ', hl);
    memcpy(b.data + pre, dict, dl);
    b.data[pre + hl - 1] = '\n';
    if (n)
        memcpy(b.data + pre + hl, data, n);
    return b;
}

static tw_status dict(const char *text, tw_npy_header *h, tw_error *err)
{
    memset(h, 0, sizeof *h);
    return tw_npy_parse_dict(text, strlen(text), "a.npy", 10, h, err);
}

static void test_dict_accepts_numpy_spellings(void **state)
{
    (void)state;
    tw_npy_header h;
    tw_error err;
    assert_int_equal(dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 28, 28), }   \n", &h,
                          &err), TW_OK);
    assert_int_equal(h.dtype, TW_NPY_FLOAT32);
    assert_int_equal(h.rank, 3);
    assert_int_equal(h.count, 3);
    assert_int_equal(h.item_bytes, 28 * 28 * 4);
    assert_int_equal(dict("{\"shape\":(5,),\"descr\":\"|u1\",\"fortran_order\":False}\n", &h, &err),
                     TW_OK);
    assert_int_equal(h.rank, 1);
    assert_int_equal(h.item_bytes, 1);
    assert_int_equal(dict("{'descr': '<i8', 'fortran_order': False, 'shape': (4L, 1L), }\n", &h,
                          &err), TW_OK);
    assert_int_equal(h.shape[1], 1);
    assert_int_equal(h.item_bytes, 8);
    assert_int_equal(dict("{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", &h, &err),
                     TW_OK);
    assert_int_equal(h.rank, 0);
    assert_int_equal(h.count, 1);
    assert_int_equal(dict("{'descr': '<i4', 'fortran_order': False, 'shape': (0, 7), }\n", &h, &err),
                     TW_OK);
    assert_int_equal(h.count, 0);
    assert_string_equal(tw_npy_dtype_name(TW_NPY_INT32), "int32");
    assert_int_equal(tw_npy_dtype_size(TW_NPY_FLOAT64), 8);
}

/* Expects dict(text) to fail with status s at file offset off, with want in the message. */
static void expect_dict_error(const char *text, tw_status s, int64_t off, const char *want)
{
    tw_npy_header h;
    tw_error err;
    assert_int_equal(dict(text, &h, &err), s);
    assert_int_equal(err.offset, off);
    assert_string_equal(err.file, "a.npy");
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
}

static void test_dict_refusals(void **state)
{
    (void)state;
    expect_dict_error("{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }\n",
                      TW_ERR_UNSUPPORTED, 20, "dtype '>f4' is not supported");
    expect_dict_error("{'descr': '<c16', 'fortran_order': False, 'shape': (3,), }\n",
                      TW_ERR_UNSUPPORTED, 20, "'<c16'");
    expect_dict_error("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (3,), }\n",
                      TW_ERR_UNSUPPORTED, 20, "structured");
    expect_dict_error("{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }\n",
                      TW_ERR_UNSUPPORTED, 44, "fortran_order True");
    expect_dict_error("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }\n", TW_ERR_CORRUPT, 44,
                      "True or False");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }\n", TW_ERR_CORRUPT,
                      63, "trailing comma");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': [3], }\n", TW_ERR_CORRUPT,
                      60, "tuple");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, x), }\n",
                      TW_ERR_CORRUPT, 64, "integer");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}\n",
                      TW_ERR_CORRUPT, 66, "unknown key 'x'");
    expect_dict_error("{'descr': '<f4', 'descr': '<f4', 'shape': (3,), }\n", TW_ERR_CORRUPT, 27,
                      "duplicate key 'descr'");
    expect_dict_error("{'descr': '<f4', 'shape': (3,), }\n", TW_ERR_CORRUPT, 10,
                      "missing key 'fortran_order'");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", TW_ERR_CORRUPT,
                      67, "newline");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } x\n",
                      TW_ERR_CORRUPT, 68, "newline");
    expect_dict_error("{'descr': '<f4' 'fortran_order': False}\n", TW_ERR_CORRUPT, 26,
                      "expected ',' or '}'");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 0), }\n",
                      TW_ERR_UNSUPPORTED, 60, "dimension is 0");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 100000, 100000), }\n",
                      TW_ERR_TOO_LARGE, 60, "larger than 256 MiB");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,),"
                      " }\n", TW_ERR_TOO_LARGE, 79, "2^62");
    expect_dict_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,"
                      "1,1,1,1,1), }\n", TW_ERR_UNSUPPORTED, 93, "more dimensions");
}

static void test_preamble(void **state)
{
    (void)state;
    tw_npy_header h;
    tw_error err;
    size_t dl;
    uint8_t p[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0x76, 0};
    assert_int_equal(tw_npy_parse_preamble(p, 10, "a.npy", &h, &dl, &err), TW_OK);
    assert_int_equal(dl, 0x76);
    assert_int_equal(h.header_bytes, 128);
    p[6] = 2;
    p[10] = p[11] = 0;
    assert_int_equal(tw_npy_parse_preamble(p, 10, "a.npy", &h, &dl, &err), TW_ERR_TRUNCATED);
    assert_int_equal(tw_npy_parse_preamble(p, 12, "a.npy", &h, &dl, &err), TW_OK);
    assert_int_equal(h.header_bytes, 12 + 0x76);
    p[6] = 3;
    assert_int_equal(tw_npy_parse_preamble(p, 12, "a.npy", &h, &dl, &err), TW_ERR_UNSUPPORTED);
    assert_int_equal(err.offset, 6);
    p[6] = 2;
    p[10] = 1; /* 64 KiB + 0x76 */
    assert_int_equal(tw_npy_parse_preamble(p, 12, "a.npy", &h, &dl, &err), TW_ERR_TOO_LARGE);
    assert_int_equal(err.offset, 8);
    p[1] = 'n';
    assert_int_equal(tw_npy_parse_preamble(p, 12, "a.npy", &h, &dl, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 0);
    assert_non_null(strstr(err.message, "bad magic"));
    assert_int_equal(tw_npy_parse_preamble(p, 1, "a.npy", &h, &dl, &err), TW_ERR_TRUNCATED);
}

static void test_reader_v1_v2(void **state)
{
    (void)state;
    float vals[2 * 3 * 2];
    for (int i = 0; i < 12; i++)
        vals[i] = (float)i * 0.5f;
    for (int major = 1; major <= 2; major++) {
        blob b = make_npy(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 2), }",
                          vals, sizeof vals);
        tw_npy_reader *r;
        tw_error err;
        assert_int_equal(tw_npy_open_mem(b.data, b.len, "v.npy", 0, &r, &err), TW_OK);
        const tw_npy_header *h = tw_npy_reader_header(r);
        assert_int_equal(h->major, major);
        assert_int_equal(h->count, 2);
        assert_int_equal(h->item_bytes, 24);
        assert_int_equal(h->header_bytes, 128); /* 10 or 12 + the dict padded to 64-byte lines */
        assert_int_equal(h->total_bytes, 128 + 48);
        const uint8_t *item;
        assert_int_equal(tw_npy_next(r, &item, &err), TW_OK);
        assert_memory_equal(item, vals, 24);
        assert_int_equal(tw_npy_next(r, &item, &err), TW_OK);
        assert_memory_equal(item, vals + 6, 24);
        assert_int_equal(tw_npy_next(r, &item, &err), TW_END);
        assert_string_equal(tw_npy_reader_name(r), "v.npy");
        tw_npy_close(r);
        free(b.data);
    }
}

static void test_reader_errors(void **state)
{
    (void)state;
    uint8_t data[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    const char *d = "{'descr': '|u1', 'fortran_order': False, 'shape': (5, 2), }";
    blob b = make_npy(1, d, data, 10);
    int64_t hb = (int64_t)b.len - 10; /* header bytes */
    tw_npy_reader *r;
    tw_error err;
    const uint8_t *item;
    /* truncated data */
    assert_int_equal(tw_npy_open_mem(b.data, b.len - 3, "t.npy", 0, &r, &err), TW_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tw_npy_next(r, &item, &err), TW_OK);
    assert_int_equal(tw_npy_next(r, &item, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, hb + 7);
    assert_non_null(strstr(err.message, "item 4 of 5"));
    tw_npy_close(r);
    /* truncated header */
    assert_int_equal(tw_npy_open_mem(b.data, 40, "t.npy", 0, &r, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 40);
    assert_null(r);
    /* trailing data */
    blob t = make_npy(1, d, data, 10);
    t.data = realloc(t.data, t.len + 1);
    t.data[t.len] = 0;
    assert_int_equal(tw_npy_open_mem(t.data, t.len + 1, "x.npy", 0, &r, &err), TW_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(tw_npy_next(r, &item, &err), TW_OK);
    assert_int_equal(tw_npy_next(r, &item, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, hb + 10);
    tw_npy_close(r);
    /* budget: the header declares hb + 10 bytes */
    assert_int_equal(tw_npy_open_mem(b.data, b.len, "t.npy", (uint64_t)hb + 9, &r, &err),
                     TW_ERR_TOO_LARGE);
    assert_int_equal(err.offset, 10);
    /* 0-d arrays have no examples */
    blob z = make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", data, 8);
    assert_int_equal(tw_npy_open_mem(z.data, z.len, "s.npy", 0, &r, &err), TW_ERR_UNSUPPORTED);
    /* bad magic */
    b.data[0] = 'P';
    assert_int_equal(tw_npy_open_mem(b.data, b.len, "m.npy", 0, &r, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 0);
    char buf[600];
    tw_error_format(&err, buf, sizeof buf);
    assert_string_equal(buf, "m.npy: at byte 0: bad magic: not a .npy file (it must start with "
                             "\\x93NUMPY)");
    free(z.data);
    free(t.data);
    free(b.data);
}

static void test_reader_gzip(void **state)
{
    (void)state;
    int64_t labels[3] = {7, -1, 1LL << 40};
    blob b = make_npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", labels,
                      sizeof labels);
    uint8_t z[512];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = b.data;
    zs.avail_in = (uInt)b.len;
    zs.next_out = z;
    zs.avail_out = sizeof z;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    size_t zlen = zs.total_out;
    deflateEnd(&zs);
    tw_npy_reader *r;
    tw_error err;
    assert_int_equal(tw_npy_open_mem(z, zlen, "l.npy.gz", 0, &r, &err), TW_OK);
    const uint8_t *item;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tw_npy_next(r, &item, &err), TW_OK);
        assert_memory_equal(item, &labels[i], 8);
    }
    assert_int_equal(tw_npy_next(r, &item, &err), TW_END);
    tw_npy_close(r);
    /* a truncated gzip is reported at the compressed file's end */
    assert_int_equal(tw_npy_open_mem(z, zlen - 12, "l.npy.gz", 0, &r, &err) == TW_OK, 1);
    tw_status s;
    while ((s = tw_npy_next(r, &item, &err)) == TW_OK)
        ;
    assert_int_equal(s, TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, (int64_t)zlen - 12);
    tw_npy_close(r);
    free(b.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dict_accepts_numpy_spellings),
        cmocka_unit_test(test_dict_refusals),
        cmocka_unit_test(test_preamble),
        cmocka_unit_test(test_reader_v1_v2),
        cmocka_unit_test(test_reader_errors),
        cmocka_unit_test(test_reader_gzip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
