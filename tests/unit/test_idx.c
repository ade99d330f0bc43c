/* test_idx.c — IDX headers (every error with its status and offset) and the streaming reader over raw
 * and gzip data: items in order, truncation, trailing data, the declared-size budget, real files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "testutil.h"
#include <zlib.h>

#include "idx.h"

typedef struct {
    uint8_t *data;
    size_t len;
} blob;

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* An IDX ubyte file with dims[0..rank) whose byte k of the data is (k * 3 + 1) & 0xff. */
static blob make_idx(int rank, const uint32_t *dims)
{
    size_t data = 1;
    for (int i = 0; i < rank; i++)
        data *= dims[i];
    blob b;
    b.len = 4 + 4 * (size_t)rank + data;
    b.data = malloc(b.len);
    b.data[0] = b.data[1] = 0;
    b.data[2] = 0x08;
    b.data[3] = (uint8_t)rank;
    for (int i = 0; i < rank; i++)
        put_be32(b.data + 4 + 4 * i, dims[i]);
    for (size_t k = 0; k < data; k++)
        b.data[4 + 4 * rank + k] = (uint8_t)(k * 3 + 1);
    return b;
}

static blob gz(const blob *in)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
    blob b;
    b.len = deflateBound(&zs, (uLong)in->len) + 64;
    b.data = malloc(b.len);
    zs.next_in = in->data;
    zs.avail_in = (uInt)in->len;
    zs.next_out = b.data;
    zs.avail_out = (uInt)b.len;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    b.len = zs.total_out;
    deflateEnd(&zs);
    return b;
}

/* Parses a header given as bytes; returns the status and fills err. */
static tw_status parse(const uint8_t *p, size_t n, tw_idx_header *h, tw_error *err)
{
    return tw_idx_parse_header(p, n, "h.idx", h, err);
}

static void test_header_idx3_idx4_idx1(void **state)
{
    (void)state;
    tw_idx_header h;
    tw_error err;
    uint32_t d3[] = {60000, 28, 28};
    blob b = make_idx(3, d3);
    /* only the header is looked at */
    assert_int_equal(parse(b.data, 16, &h, &err), TW_OK);
    assert_int_equal(h.type, TW_IDX_UBYTE);
    assert_int_equal(h.rank, 3);
    assert_int_equal(h.count, 60000);
    assert_int_equal(h.item_bytes, 784);
    assert_int_equal(h.header_bytes, 16);
    assert_int_equal(h.total_bytes, 16 + 60000ull * 784);
    free(b.data);
    uint32_t d4[] = {2, 4, 5, 3};
    b = make_idx(4, d4);
    assert_int_equal(parse(b.data, b.len, &h, &err), TW_OK);
    assert_int_equal(h.item_bytes, 60);
    assert_int_equal(h.dims[3], 3);
    free(b.data);
    uint32_t d1[] = {10};
    b = make_idx(1, d1);
    assert_int_equal(parse(b.data, b.len, &h, &err), TW_OK);
    assert_int_equal(h.item_bytes, 1);
    assert_int_equal(h.count, 10);
    assert_int_equal(h.total_bytes, 18);
    free(b.data);
}

static void test_header_errors(void **state)
{
    (void)state;
    tw_idx_header h;
    tw_error err;
    uint8_t p[16] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28};

    assert_int_equal(parse(p, 3, &h, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 3);
    assert_int_equal(parse(p, 11, &h, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 11);
    assert_non_null(strstr(err.message, "IDX header"));

    uint8_t q[16];
    memcpy(q, p, 16);
    q[0] = 0x1f; /* e.g. a gzip header misread, or any other file */
    assert_int_equal(parse(q, 16, &h, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 0);
    assert_non_null(strstr(err.message, "bad magic 0x1f000803"));

    memcpy(q, p, 16);
    q[2] = 0x07;
    assert_int_equal(parse(q, 16, &h, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 2);

    q[2] = 0x0D;
    assert_int_equal(parse(q, 16, &h, &err), TW_ERR_UNSUPPORTED);
    assert_int_equal(err.offset, 2);
    assert_non_null(strstr(err.message, "float32"));

    memcpy(q, p, 16);
    q[3] = 0;
    assert_int_equal(parse(q, 16, &h, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 3);
    q[3] = 9;
    assert_int_equal(parse(q, 16, &h, &err), TW_ERR_UNSUPPORTED);
    assert_int_equal(err.offset, 3);

    memcpy(q, p, 16);
    q[11] = 0; /* rows = 0 */
    assert_int_equal(parse(q, 16, &h, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 8);

    memcpy(q, p, 16);
    put_be32(q + 8, 65536);
    put_be32(q + 12, 65536); /* 4 GiB per item */
    assert_int_equal(parse(q, 16, &h, &err), TW_ERR_TOO_LARGE);
    assert_int_equal(err.offset, 12);
}

static void test_error_format_names_file_and_offset(void **state)
{
    (void)state;
    uint8_t q[4] = {1, 2, 3, 4};
    tw_idx_header h;
    tw_error err;
    assert_int_equal(tw_idx_parse_header(q, 4, "images.idx", &h, &err), TW_ERR_CORRUPT);
    char buf[600];
    tw_error_format(&err, buf, sizeof buf);
    assert_string_equal(buf, "images.idx: at byte 0: bad magic 0x01020304: not an IDX file (it "
                             "must start with two zero bytes)");
}

/* Reads every item of r and checks it against b's data bytes. */
static void expect_items(tw_idx_reader *r, const blob *raw)
{
    const tw_idx_header *h = tw_idx_reader_header(r);
    const uint8_t *item;
    tw_error err;
    for (uint64_t i = 0; i < h->count; i++) {
        assert_int_equal(tw_idx_next(r, &item, &err), TW_OK);
        assert_memory_equal(item, raw->data + h->header_bytes + i * h->item_bytes, h->item_bytes);
    }
    assert_int_equal(tw_idx_reader_items(r), h->count);
    assert_int_equal(tw_idx_next(r, &item, &err), TW_END);
    assert_int_equal(tw_idx_next(r, &item, &err), TW_END);
}

static void test_reader_raw_and_gzip(void **state)
{
    (void)state;
    uint32_t dims[] = {3000, 28, 28}; /* 2.3 MB: items straddle the 1 MiB windows */
    blob raw = make_idx(3, dims);
    tw_idx_reader *r;
    tw_error err;
    assert_int_equal(tw_idx_open_mem(raw.data, raw.len, "raw.idx", 0, &r, &err), TW_OK);
    assert_false(tw_idx_reader_is_gzip(r));
    expect_items(r, &raw);
    tw_idx_close(r);
    blob z = gz(&raw);
    assert_int_equal(tw_idx_open_mem(z.data, z.len, "z.idx.gz", 0, &r, &err), TW_OK);
    assert_true(tw_idx_reader_is_gzip(r));
    assert_string_equal(tw_idx_reader_name(r), "z.idx.gz");
    expect_items(r, &raw);
    tw_idx_close(r);
    free(z.data);
    free(raw.data);
}

static void test_truncated_raw(void **state)
{
    (void)state;
    uint32_t dims[] = {5, 2, 3};
    blob raw = make_idx(3, dims); /* 16 + 30 bytes */
    tw_idx_reader *r;
    tw_error err;
    const uint8_t *item;
    assert_int_equal(tw_idx_open_mem(raw.data, raw.len - 8, "t.idx", 0, &r, &err), TW_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tw_idx_next(r, &item, &err), TW_OK);
    assert_int_equal(tw_idx_next(r, &item, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 38);
    assert_string_equal(err.file, "t.idx");
    assert_non_null(strstr(err.message, "item 4 of 5"));
    tw_idx_close(r);
    /* header cut short */
    assert_int_equal(tw_idx_open_mem(raw.data, 10, "t.idx", 0, &r, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 10);
    assert_null(r);
    assert_int_equal(tw_idx_open_mem(raw.data, 0, "t.idx", 0, &r, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 0);
    free(raw.data);
}

static void test_truncated_inside_gzip_data(void **state)
{
    (void)state;
    uint32_t dims[] = {5, 2, 3};
    blob raw = make_idx(3, dims);
    raw.len -= 8; /* a complete gzip of an IDX that is too short */
    blob z = gz(&raw);
    tw_idx_reader *r;
    tw_error err;
    const uint8_t *item;
    assert_int_equal(tw_idx_open_mem(z.data, z.len, "t.idx.gz", 0, &r, &err), TW_OK);
    tw_status s;
    while ((s = tw_idx_next(r, &item, &err)) == TW_OK)
        ;
    assert_int_equal(s, TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 38);
    assert_non_null(strstr(err.message, "decompressed"));
    tw_idx_close(r);
    free(z.data);
    free(raw.data);
}

static void test_trailing_data(void **state)
{
    (void)state;
    uint32_t dims[] = {4, 2, 2};
    blob raw = make_idx(3, dims);
    raw.data = realloc(raw.data, raw.len + 3);
    memcpy(raw.data + raw.len, "xyz", 3);
    tw_idx_reader *r;
    tw_error err;
    const uint8_t *item;
    assert_int_equal(tw_idx_open_mem(raw.data, raw.len + 3, "x.idx", 0, &r, &err), TW_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(tw_idx_next(r, &item, &err), TW_OK);
    assert_int_equal(tw_idx_next(r, &item, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, (int64_t)raw.len);
    assert_non_null(strstr(err.message, "trailing data after the 4 items"));
    tw_idx_close(r);
    free(raw.data);
}

static void test_declared_size_past_budget(void **state)
{
    (void)state;
    uint8_t p[16] = {0, 0, 8, 3};
    put_be32(p + 4, 60000);
    put_be32(p + 8, 28);
    put_be32(p + 12, 28);
    tw_idx_reader *r;
    tw_error err;
    /* no data at all: the budget check comes first */
    assert_int_equal(tw_idx_open_mem(p, 16, "big.idx", 1000000, &r, &err), TW_ERR_TOO_LARGE);
    assert_int_equal(err.offset, 4);
    assert_non_null(strstr(err.message, "47040016 bytes"));
    assert_non_null(strstr(err.message, "budget of 1000000"));
    assert_int_equal(tw_idx_open_mem(p, 16, "big.idx", 47040016, &r, &err), TW_OK);
    tw_idx_close(r);
}

static void test_zero_items(void **state)
{
    (void)state;
    uint32_t dims[] = {0, 28, 28};
    blob raw = make_idx(3, dims);
    tw_idx_reader *r;
    tw_error err;
    const uint8_t *item;
    assert_int_equal(tw_idx_open_mem(raw.data, raw.len, "e.idx", 0, &r, &err), TW_OK);
    assert_int_equal(tw_idx_next(r, &item, &err), TW_END);
    tw_idx_close(r);
    free(raw.data);
}

static void test_open_file(void **state)
{
    (void)state;
    const char *t = tw_test_tmp();
    char path[600];
    snprintf(path, sizeof path, "%s/idx_test-labels-idx1-ubyte", t);
    uint32_t dims[] = {7};
    blob raw = make_idx(1, dims);
    blob z = gz(&raw);
    FILE *f = fopen(path, "wb"); /* gzip content under a name without .gz */
    assert_non_null(f);
    fwrite(z.data, 1, z.len, f);
    fclose(f);
    tw_idx_reader *r;
    tw_error err;
    assert_int_equal(tw_idx_open(path, 0, &r, &err), TW_OK);
    assert_true(tw_idx_reader_is_gzip(r));
    expect_items(r, &raw);
    tw_idx_close(r);
    remove(path);
    free(z.data);
    free(raw.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_idx3_idx4_idx1),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_error_format_names_file_and_offset),
        cmocka_unit_test(test_reader_raw_and_gzip),
        cmocka_unit_test(test_truncated_raw),
        cmocka_unit_test(test_truncated_inside_gzip_data),
        cmocka_unit_test(test_trailing_data),
        cmocka_unit_test(test_declared_size_past_budget),
        cmocka_unit_test(test_zero_items),
        cmocka_unit_test(test_open_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
