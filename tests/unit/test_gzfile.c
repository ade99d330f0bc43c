/* test_gzfile.c — raw-or-gzip streams: detection by content, concatenated members, truncated and corrupt
 * gzip with file offsets, trailing garbage, the content budget (exact edge, gzip bomb), rewind, sticky
 * errors, and the fixed-size item runs shared by IDX and NPY. */
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

#include "gzfile.h"

typedef struct {
    uint8_t *data;
    size_t len;
} blob;

/* Compresses n bytes as one gzip member (window_bits 31) or zlib stream (15). Caller frees .data. */
static blob deflate_as(const void *data, size_t n, int window_bits)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
    blob b;
    b.len = deflateBound(&zs, (uLong)n) + 64;
    b.data = malloc(b.len);
    zs.next_in = (Bytef *)data;
    zs.avail_in = (uInt)n;
    zs.next_out = b.data;
    zs.avail_out = (uInt)b.len;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    b.len = zs.total_out;
    deflateEnd(&zs);
    return b;
}

static blob gz(const void *data, size_t n) { return deflate_as(data, n, 31); }

/* Reads the whole stream into a fresh buffer; returns the status that ended it. */
static tw_status slurp(tw_gzfile *f, uint8_t **out, size_t *len, tw_error *err)
{
    size_t cap = 1 << 16;
    *out = malloc(cap);
    *len = 0;
    for (;;) {
        const uint8_t *p;
        size_t avail;
        tw_status s = tw_gzfile_peek(f, &p, &avail, err);
        if (s != TW_OK || avail == 0)
            return s;
        if (*len + avail > cap) {
            cap = (*len + avail) * 2;
            *out = realloc(*out, cap);
        }
        memcpy(*out + *len, p, avail);
        *len += avail;
        tw_gzfile_skip(f, avail);
    }
}

static uint8_t *pattern(size_t n)
{
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + (i >> 9));
    return p;
}

static void test_plain_memory(void **state)
{
    (void)state;
    uint8_t *src = pattern(3000000);
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(src, 3000000, "p.bin", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    assert_int_equal(tw_gzfile_compression(f), TW_COMPRESSION_NONE);
    assert_string_equal(tw_gzfile_name(f), "p.bin");
    uint8_t *got;
    size_t len;
    assert_int_equal(slurp(f, &got, &len, &err), TW_OK);
    assert_int_equal(len, 3000000);
    assert_memory_equal(got, src, len);
    assert_int_equal(tw_gzfile_offset(f), 3000000);
    free(got);
    tw_gzfile_close(f);
    free(src);
}

static void test_gzip_detected_by_content(void **state)
{
    (void)state;
    uint8_t *src = pattern(2500000);
    blob z = gz(src, 2500000);
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(z.data, z.len, "x.idx", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    assert_int_equal(tw_gzfile_compression(f), TW_COMPRESSION_GZIP);
    uint8_t buf[10];
    size_t got;
    assert_int_equal(tw_gzfile_read(f, buf, 10, &got, &err), TW_OK);
    assert_int_equal(got, 10);
    assert_memory_equal(buf, src, 10);
    uint8_t *rest;
    size_t len;
    assert_int_equal(slurp(f, &rest, &len, &err), TW_OK);
    assert_int_equal(len, 2500000 - 10);
    assert_memory_equal(rest, src + 10, len);
    free(rest);
    tw_gzfile_close(f);
    free(z.data);
    free(src);
}

static void test_concatenated_members(void **state)
{
    (void)state;
    blob a = gz("hello ", 6), b = gz("world", 5);
    uint8_t *both = malloc(a.len + b.len);
    memcpy(both, a.data, a.len);
    memcpy(both + a.len, b.data, b.len);
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(both, a.len + b.len, "c.gz", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    uint8_t *got;
    size_t len;
    assert_int_equal(slurp(f, &got, &len, &err), TW_OK);
    assert_int_equal(len, 11);
    assert_memory_equal(got, "hello world", 11);
    free(got);
    tw_gzfile_close(f);
    free(both);
    free(a.data);
    free(b.data);
}

static void test_truncated_gzip(void **state)
{
    (void)state;
    uint8_t *src = pattern(100000);
    blob z = gz(src, 100000);
    size_t cut = z.len / 2;
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(z.data, cut, "t.gz", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    uint8_t *got;
    size_t len;
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, (int64_t)cut); /* the compressed file's end */
    assert_string_equal(err.file, "t.gz");
    assert_non_null(strstr(err.message, "truncated gzip stream"));
    /* sticky */
    const uint8_t *p;
    size_t avail;
    assert_int_equal(tw_gzfile_peek(f, &p, &avail, &err), TW_ERR_TRUNCATED);
    /* cut inside the 8-byte trailer: all data decodes, the check still fails */
    tw_gzfile_close(f);
    free(got);
    assert_int_equal(tw_gzfile_open_mem(z.data, z.len - 3, "t.gz", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_TRUNCATED);
    free(got);
    tw_gzfile_close(f);
    free(z.data);
    free(src);
}

static void test_corrupt_gzip(void **state)
{
    (void)state;
    uint8_t *src = pattern(5000);
    blob z = gz(src, 5000);
    z.data[z.len - 6] ^= 0x55; /* the CRC-32 in the trailer */
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(z.data, z.len, "k.gz", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    uint8_t *got;
    size_t len;
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "invalid gzip data"));
    free(got);
    tw_gzfile_close(f);
    free(z.data);
    free(src);
}

static void test_trailing_garbage_after_gzip(void **state)
{
    (void)state;
    blob z = gz("abc", 3);
    uint8_t *more = malloc(z.len + 4);
    memcpy(more, z.data, z.len);
    memcpy(more + z.len, "JUNK", 4);
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(more, z.len + 4, "g.gz", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    uint8_t *got;
    size_t len;
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, (int64_t)z.len);
    assert_non_null(strstr(err.message, "trailing bytes"));
    free(got);
    tw_gzfile_close(f);
    free(more);
    free(z.data);
}

static void test_budget_exact_edge(void **state)
{
    (void)state;
    uint8_t *src = pattern(1000);
    tw_gzfile *f;
    tw_error err;
    uint8_t *got;
    size_t len;
    assert_int_equal(tw_gzfile_open_mem(src, 1000, "b", TW_COMPRESSION_AUTO,
                                        1000, &f, &err), TW_OK);
    assert_int_equal(slurp(f, &got, &len, &err), TW_OK);
    assert_int_equal(len, 1000);
    free(got);
    tw_gzfile_close(f);
    assert_int_equal(tw_gzfile_open_mem(src, 1000, "b", TW_COMPRESSION_AUTO, 999, &f, &err), TW_OK);
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_TOO_LARGE);
    assert_int_equal(len, 999);
    assert_int_equal(err.offset, 999);
    free(got);
    tw_gzfile_close(f);
    free(src);
}

static void test_gzip_bomb_stops_at_budget(void **state)
{
    (void)state;
    size_t n = 64u << 20;
    uint8_t *zeros = calloc(1, n);
    blob z = gz(zeros, n);
    free(zeros);
    assert_true(z.len < 200000);
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(z.data, z.len, "bomb.gz", TW_COMPRESSION_AUTO,
                                        1u << 20, &f, &err), TW_OK);
    uint8_t *got;
    size_t len;
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_TOO_LARGE);
    assert_int_equal(len, 1u << 20);
    assert_int_equal(err.offset, 1 << 20);
    assert_non_null(strstr(err.message, "after decompression"));
    free(got);
    tw_gzfile_close(f);
    free(z.data);
}

static void test_rewind(void **state)
{
    (void)state;
    blob z = gz("0123456789", 10);
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open_mem(z.data, z.len, "r.gz", TW_COMPRESSION_AUTO,
                                        0, &f, &err), TW_OK);
    uint8_t buf[16];
    size_t got;
    assert_int_equal(tw_gzfile_read(f, buf, 16, &got, &err), TW_OK);
    assert_int_equal(got, 10);
    assert_int_equal(tw_gzfile_rewind(f, &err), TW_OK);
    assert_int_equal(tw_gzfile_offset(f), 0);
    assert_int_equal(tw_gzfile_read(f, buf, 4, &got, &err), TW_OK);
    assert_memory_equal(buf, "0123", 4);
    tw_gzfile_close(f);
    free(z.data);
}

static void test_file_open_and_missing(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/gzfile_test.gz", tw_test_tmp());
    blob z = gz("file body", 9);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fwrite(z.data, 1, z.len, fp);
    fclose(fp);
    tw_gzfile *f;
    tw_error err;
    assert_int_equal(tw_gzfile_open(path, TW_COMPRESSION_AUTO, 0, &f, &err), TW_OK);
    uint8_t buf[20];
    size_t got;
    assert_int_equal(tw_gzfile_read(f, buf, 20, &got, &err), TW_OK);
    assert_int_equal(got, 9);
    assert_memory_equal(buf, "file body", 9);
    assert_int_equal(tw_gzfile_rewind(f, &err), TW_OK);
    assert_int_equal(tw_gzfile_read(f, buf, 20, &got, &err), TW_OK);
    assert_int_equal(got, 9);
    tw_gzfile_close(f);
    remove(path);
    free(z.data);
    assert_int_equal(tw_gzfile_open("/nonexistent/x.gz", TW_COMPRESSION_AUTO,
                                    0, &f, &err), TW_ERR_IO);
    assert_null(f);
    assert_string_equal(err.file, "/nonexistent/x.gz");
}

/* A gzip file larger than the prefetch ring: read part, rewind while the producer waits on a full ring,
 * read all, and close mid-stream. */
static void test_file_prefetch_rewind_and_close(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/gzfile_big.gz", tw_test_tmp());
    size_t n = 9u << 20;
    uint8_t *src = pattern(n);
    blob z = gz(src, n);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fwrite(z.data, 1, z.len, fp);
    fclose(fp);
    tw_gzfile *f;
    tw_error err;
    uint8_t *got;
    size_t len;
    assert_int_equal(tw_gzfile_open(path, TW_COMPRESSION_AUTO, 0, &f, &err), TW_OK);
    uint8_t *part = malloc(1500000);
    assert_int_equal(tw_gzfile_read(f, part, 1500000, &len, &err), TW_OK);
    assert_int_equal(len, 1500000);
    assert_memory_equal(part, src, len);
    assert_int_equal(tw_gzfile_rewind(f, &err), TW_OK);
    assert_int_equal(slurp(f, &got, &len, &err), TW_OK);
    assert_int_equal(len, n);
    assert_memory_equal(got, src, n);
    free(got);
    assert_int_equal(tw_gzfile_rewind(f, &err), TW_OK);
    assert_int_equal(tw_gzfile_read(f, part, 10, &len, &err), TW_OK);
    tw_gzfile_close(f);
    /* the budget applies to the prefetched stream too */
    assert_int_equal(tw_gzfile_open(path, TW_COMPRESSION_AUTO, 5000000, &f, &err), TW_OK);
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_TOO_LARGE);
    assert_int_equal(len, 5000000);
    free(got);
    tw_gzfile_close(f);
    /* a truncated file: the producer's error reaches the reader with the file offset */
    fp = fopen(path, "wb");
    fwrite(z.data, 1, z.len / 2, fp);
    fclose(fp);
    assert_int_equal(tw_gzfile_open(path, TW_COMPRESSION_AUTO, 0, &f, &err), TW_OK);
    assert_int_equal(slurp(f, &got, &len, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, (int64_t)(z.len / 2));
    free(got);
    tw_gzfile_close(f);
    remove(path);
    free(part);
    free(z.data);
    free(src);
}

static void test_items_truncated_and_trailing(void **state)
{
    (void)state;
    const char data[] = "HDRaaaabbbbcc"; /* 3-byte header, then items of 4 */
    tw_gzfile *f;
    tw_error err;
    tw_gzfile_items it;
    const uint8_t *item;
    assert_int_equal(tw_gzfile_open_mem(data, 13, "i", TW_COMPRESSION_AUTO, 0, &f, &err), TW_OK);
    uint8_t hdr[3];
    size_t got;
    assert_int_equal(tw_gzfile_read(f, hdr, 3, &got, &err), TW_OK);
    assert_int_equal(tw_gzfile_items_init(&it, f, 3, 4, 15, 0, &err), TW_OK);
    assert_int_equal(tw_gzfile_next_item(f, &it, &item, &err), TW_OK);
    assert_memory_equal(item, "aaaa", 4);
    assert_int_equal(tw_gzfile_next_item(f, &it, &item, &err), TW_OK);
    assert_int_equal(tw_gzfile_next_item(f, &it, &item, &err), TW_ERR_TRUNCATED);
    assert_int_equal(err.offset, 13);
    assert_non_null(strstr(err.message, "item 3 of 3"));
    tw_gzfile_items_cleanup(&it);
    tw_gzfile_close(f);

    assert_int_equal(tw_gzfile_open_mem(data, 13, "i", TW_COMPRESSION_AUTO, 0, &f, &err), TW_OK);
    assert_int_equal(tw_gzfile_read(f, hdr, 3, &got, &err), TW_OK);
    assert_int_equal(tw_gzfile_items_init(&it, f, 2, 4, 11, 0, &err), TW_OK);
    assert_int_equal(tw_gzfile_next_item(f, &it, &item, &err), TW_OK);
    assert_int_equal(tw_gzfile_next_item(f, &it, &item, &err), TW_OK);
    assert_memory_equal(item, "bbbb", 4);
    assert_int_equal(tw_gzfile_next_item(f, &it, &item, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 11);
    assert_non_null(strstr(err.message, "trailing data"));
    tw_gzfile_items_cleanup(&it);
    tw_gzfile_close(f);

    /* declared size past the budget: refused before any data is read */
    assert_int_equal(tw_gzfile_open_mem(data, 13, "i", TW_COMPRESSION_AUTO, 12, &f, &err), TW_OK);
    assert_int_equal(tw_gzfile_items_init(&it, f, 3, 4, 15, 4, &err), TW_ERR_TOO_LARGE);
    assert_int_equal(err.offset, 4);
    tw_gzfile_items_cleanup(&it);
    tw_gzfile_close(f);
}

/* ZLIB is never detected, only asked for: it reads back, must end the file, and may not be truncated.
 * An empty file is an empty stream in every mode. */
static void test_zlib_mode_and_empty_files(void **state)
{
    (void)state;
    const char text[] = "zlib-wrapped content, as TensorFlow's ZLIB TFRecords are";
    blob z = deflate_as(text, sizeof text, 15);
    blob more = {malloc(z.len + 1), z.len + 1};
    memcpy(more.data, z.data, z.len);
    more.data[z.len] = 0x78;
    tw_gzfile *f;
    tw_error err;
    char got[sizeof text];
    size_t n;
    assert_int_equal(tw_gzfile_open_mem(z.data, z.len, "z", TW_COMPRESSION_ZLIB, 0, &f, &err), TW_OK);
    assert_int_equal(tw_gzfile_read(f, got, sizeof got, &n, &err), TW_OK);
    assert_int_equal(n, sizeof text);
    assert_string_equal(got, text);
    assert_int_equal(tw_gzfile_read(f, got, 1, &n, &err), TW_OK);
    assert_int_equal(n, 0);
    tw_gzfile_close(f);
    assert_int_equal(tw_gzfile_open_mem(more.data, more.len, "z", TW_COMPRESSION_ZLIB, 0, &f, &err),
                     TW_OK);
    assert_int_equal(tw_gzfile_read(f, got, sizeof got, &n, &err), TW_OK);
    assert_int_equal(tw_gzfile_read(f, got, 1, &n, &err), TW_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "trailing bytes after the end of the zlib stream"));
    tw_gzfile_close(f);
    assert_int_equal(tw_gzfile_open_mem(z.data, z.len - 2, "z", TW_COMPRESSION_ZLIB, 0, &f, &err),
                     TW_OK);
    assert_int_equal(tw_gzfile_read(f, got, sizeof got, &n, &err), TW_OK); /* the data is whole */
    assert_int_equal(tw_gzfile_read(f, got, 1, &n, &err), TW_ERR_TRUNCATED); /* its trailer is not */
    assert_non_null(strstr(err.message, "truncated zlib stream"));
    tw_gzfile_close(f);
    const tw_compression modes[] = {TW_COMPRESSION_NONE, TW_COMPRESSION_GZIP, TW_COMPRESSION_ZLIB,
                                    TW_COMPRESSION_AUTO};
    for (size_t k = 0; k < 4; k++) {
        assert_int_equal(tw_gzfile_open_mem("", 0, "e", modes[k], 0, &f, &err), TW_OK);
        assert_int_equal(tw_gzfile_read(f, got, 1, &n, &err), TW_OK);
        assert_int_equal(n, 0);
        tw_gzfile_close(f);
    }
    free(more.data);
    free(z.data);
}

static void test_compression_parse(void **state)
{
    (void)state;
    tw_compression c;
    tw_error err;
    assert_int_equal(tw_compression_parse("GZIP", 0, &c, &err), TW_OK);
    assert_int_equal(c, TW_COMPRESSION_GZIP);
    assert_int_equal(tw_compression_parse("", 0, &c, &err), TW_OK);
    assert_int_equal(c, TW_COMPRESSION_NONE);
    assert_int_equal(tw_compression_parse("auto", 0, &c, &err), TW_ERR_INVALID);
    assert_int_equal(tw_compression_parse("auto", 1, &c, &err), TW_OK);
    assert_int_equal(c, TW_COMPRESSION_AUTO);
    assert_int_equal(tw_compression_parse("snappy", 1, &c, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "snappy"));
    assert_string_equal(tw_compression_name(TW_COMPRESSION_ZLIB), "zlib");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_memory),
        cmocka_unit_test(test_zlib_mode_and_empty_files),
        cmocka_unit_test(test_compression_parse),
        cmocka_unit_test(test_gzip_detected_by_content),
        cmocka_unit_test(test_concatenated_members),
        cmocka_unit_test(test_truncated_gzip),
        cmocka_unit_test(test_corrupt_gzip),
        cmocka_unit_test(test_trailing_garbage_after_gzip),
        cmocka_unit_test(test_budget_exact_edge),
        cmocka_unit_test(test_gzip_bomb_stops_at_budget),
        cmocka_unit_test(test_rewind),
        cmocka_unit_test(test_file_open_and_missing),
        cmocka_unit_test(test_file_prefetch_rewind_and_close),
        cmocka_unit_test(test_items_truncated_and_trailing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
