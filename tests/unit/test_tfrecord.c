/* test_tfrecord.c — TFRecord framing: round trips in every compression, past the writer's writeback hints
 * (to a file, and to a pipe, where the hint is refused and writing goes on), and each way a file can be
 * wrong (clean end vs truncated vs corrupted, with offsets; oversized lengths; gzip bombs). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <zlib.h>

#include "crc32c.h"
#include "tfrecord.h"

typedef struct {
    uint8_t *data;
    size_t len;
} blob;

/* Writes `n` records (record i = i+1 bytes of value i) with compression c into memory via a pipe-less
 * temp file; returns the file's bytes. */
static blob write_records(tw_compression c, int n)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    tw_tfrecord_writer *w;
    tw_error err;
    assert_int_equal(tw_tfrecord_writer_create(fileno(f), c, "mem", &w, &err), TW_OK);
    uint8_t rec[300];
    for (int i = 0; i < n; i++) {
        memset(rec, i & 0xff, sizeof rec);
        assert_int_equal(tw_tfrecord_write(w, rec, (size_t)(i % 300) + 1, &err), TW_OK);
    }
    assert_int_equal(tw_tfrecord_writer_finish(w, &err), TW_OK);
    assert_int_equal(tw_tfrecord_writer_records(w), n);
    tw_tfrecord_writer_destroy(w);
    blob b;
    b.len = (size_t)ftell(f);
    b.data = malloc(b.len + 1);
    rewind(f);
    assert_int_equal(fread(b.data, 1, b.len, f), b.len);
    fclose(f);
    return b;
}

static tw_tfrecord_reader *open_mem(const blob *b, tw_compression c)
{
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    o.compression = c;
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open_mem(b->data, b->len, "t.tfrecord", &o, &r, &err), TW_OK);
    return r;
}

static void expect_records(tw_tfrecord_reader *r, int n)
{
    const uint8_t *data;
    size_t len;
    tw_error err;
    for (int i = 0; i < n; i++) {
        assert_int_equal(tw_tfrecord_read(r, &data, &len, &err), TW_OK);
        assert_int_equal(len, (size_t)(i % 300) + 1);
        assert_int_equal(data[0], i & 0xff);
        assert_int_equal(data[len - 1], i & 0xff);
    }
    assert_int_equal(tw_tfrecord_read(r, &data, &len, &err), TW_END);
    assert_int_equal(tw_tfrecord_read(r, &data, &len, &err), TW_END);
}

static void test_round_trip_all_compressions(void **state)
{
    (void)state;
    const tw_compression kinds[] = {TW_COMPRESSION_NONE, TW_COMPRESSION_GZIP, TW_COMPRESSION_ZLIB};
    for (size_t k = 0; k < 3; k++) {
        blob b = write_records(kinds[k], 2000);
        tw_tfrecord_reader *r = open_mem(&b, kinds[k]);
        expect_records(r, 2000);
        tw_tfrecord_reader_close(r);
        r = open_mem(&b, TW_COMPRESSION_AUTO); /* detection picks the same kind */
        assert_int_equal(tw_tfrecord_reader_compression(r), kinds[k]);
        expect_records(r, 2000);
        tw_tfrecord_reader_close(r);
        free(b.data);
    }
}

enum { BIG = 1 << 20, BIG_RECORDS = 20 }; /* 20 MiB: past the writer's writeback hint (every 8 MiB) twice */

/* Writes BIG_RECORDS records of BIG bytes (record i all i) to fd, uncompressed. */
static void write_big(int fd)
{
    tw_tfrecord_writer *w;
    tw_error err;
    assert_int_equal(tw_tfrecord_writer_create(fd, TW_COMPRESSION_NONE, "big", &w, &err), TW_OK);
    uint8_t *rec = malloc(BIG);
    for (int i = 0; i < BIG_RECORDS; i++) {
        memset(rec, i, BIG);
        assert_int_equal(tw_tfrecord_write(w, rec, BIG, &err), TW_OK);
    }
    assert_int_equal(tw_tfrecord_writer_finish(w, &err), TW_OK);
    tw_tfrecord_writer_destroy(w);
    free(rec);
}

typedef struct {
    int fd[2];
    size_t total; /* bytes the reader got */
} piped;

static void *drain_pipe(void *arg)
{
    piped *p = arg;
    static uint8_t buf[1 << 16];
    for (ssize_t got; (got = read(p->fd[0], buf, sizeof buf)) > 0;)
        p->total += (size_t)got;
    return NULL;
}

/* Past the writeback hints, a file holds every record as written; a pipe (where the hint fails) gets every
 * byte. */
static void test_past_writeback_hints(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    write_big(fileno(f));
    blob b = {.len = (size_t)ftell(f)};
    b.data = malloc(b.len);
    rewind(f);
    assert_int_equal(fread(b.data, 1, b.len, f), b.len);
    fclose(f);
    tw_tfrecord_reader *r = open_mem(&b, TW_COMPRESSION_NONE);
    const uint8_t *rec;
    size_t len;
    tw_error err;
    for (int i = 0; i < BIG_RECORDS; i++) {
        assert_int_equal(tw_tfrecord_read(r, &rec, &len, &err), TW_OK);
        assert_int_equal(len, BIG);
        assert_true(rec[0] == i && rec[BIG - 1] == i);
    }
    assert_int_equal(tw_tfrecord_read(r, &rec, &len, &err), TW_END);
    tw_tfrecord_reader_close(r);
    free(b.data);
    piped p = {.total = 0};
    assert_int_equal(pipe(p.fd), 0);
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, drain_pipe, &p), 0);
    write_big(p.fd[1]);
    close(p.fd[1]);
    pthread_join(reader, NULL);
    close(p.fd[0]);
    assert_int_equal(p.total, (size_t)BIG_RECORDS * (BIG + TW_TFRECORD_HEADER_BYTES + TW_TFRECORD_FOOTER_BYTES));
}

/* The exact bytes of one record: docs/formats.md §1.2's vector. */
static void test_framing_bytes(void **state)
{
    (void)state;
    const char payload[] = "\x1a\x11" "CRC test, one two";
    FILE *f = tmpfile();
    tw_tfrecord_writer *w;
    assert_int_equal(tw_tfrecord_writer_create(fileno(f), TW_COMPRESSION_NONE, "m", &w, NULL), TW_OK);
    assert_int_equal(tw_tfrecord_write(w, payload, 19, NULL), TW_OK);
    assert_int_equal(tw_tfrecord_writer_finish(w, NULL), TW_OK);
    tw_tfrecord_writer_destroy(w);
    uint8_t got[35];
    rewind(f);
    assert_int_equal(fread(got, 1, sizeof got, f), 35);
    fclose(f);
    const uint8_t head[12] = {19, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0x91, 0x32, 0x1b};
    assert_memory_equal(got, head, 12);
    assert_memory_equal(got + 12, payload, 19);
    const uint8_t foot[4] = {0x8a, 0xd0, 0x94, 0x57};
    assert_memory_equal(got + 31, foot, 4);
}

static void expect_error(blob *b, tw_compression c, int good, tw_status want, int64_t offset,
                         const char *needle)
{
    tw_tfrecord_reader *r = open_mem(b, c);
    const uint8_t *data;
    size_t len;
    tw_error err;
    for (int i = 0; i < good; i++)
        assert_int_equal(tw_tfrecord_read(r, &data, &len, &err), TW_OK);
    assert_int_equal(tw_tfrecord_read(r, &data, &len, &err), want);
    if (offset >= 0)
        assert_int_equal(err.offset, offset);
    assert_non_null(strstr(err.message, needle));
    assert_string_equal(err.file, "t.tfrecord");
    assert_int_equal(tw_tfrecord_read(r, &data, &len, &err), want); /* stays failed */
    tw_tfrecord_reader_close(r);
}

/* Records 0,1,2 have 1,2,3 payload bytes: offsets 0, 17, 35, and the file ends at 54. */
static void test_truncations(void **state)
{
    (void)state;
    blob b = write_records(TW_COMPRESSION_NONE, 3);
    assert_int_equal(b.len, 54);
    b.len = 35 + 5; /* inside the third header */
    expect_error(&b, TW_COMPRESSION_NONE, 2, TW_ERR_TRUNCATED, 35, "header has 5 of 12");
    b.len = 35 + 12 + 2; /* inside the third payload */
    expect_error(&b, TW_COMPRESSION_NONE, 2, TW_ERR_TRUNCATED, 35, "truncated record");
    b.len = 35 + 12; /* header only */
    expect_error(&b, TW_COMPRESSION_NONE, 2, TW_ERR_TRUNCATED, 35, "truncated record");
    b.len = 35; /* clean end after two records */
    tw_tfrecord_reader *r = open_mem(&b, TW_COMPRESSION_NONE);
    const uint8_t *d;
    size_t n;
    assert_int_equal(tw_tfrecord_read(r, &d, &n, NULL), TW_OK);
    assert_int_equal(tw_tfrecord_read(r, &d, &n, NULL), TW_OK);
    assert_int_equal(tw_tfrecord_reader_offset(r), 35);
    assert_int_equal(tw_tfrecord_read(r, &d, &n, NULL), TW_END);
    tw_tfrecord_reader_close(r);
    free(b.data);
}

static void test_corruptions(void **state)
{
    (void)state;
    blob b = write_records(TW_COMPRESSION_NONE, 3);
    b.data[17 + 12] ^= 1; /* payload of record 1 */
    expect_error(&b, TW_COMPRESSION_NONE, 1, TW_ERR_CORRUPT, 17, "data CRC");
    b.data[17 + 12] ^= 1;
    b.data[35 + 9] ^= 0x40; /* length CRC of record 2 */
    expect_error(&b, TW_COMPRESSION_NONE, 2, TW_ERR_CORRUPT, 35, "length CRC");
    b.data[35 + 9] ^= 0x40;
    b.data[0] ^= 0x80; /* first length: hint that this may not be a TFRecord */
    expect_error(&b, TW_COMPRESSION_NONE, 0, TW_ERR_CORRUPT, 0, "is this a TFRecord");
    free(b.data);
}

/* A length of 2^40 with a valid length CRC is refused before any allocation. */
static void test_huge_length_is_capped(void **state)
{
    (void)state;
    uint8_t rec[16] = {0};
    uint64_t n = 1ull << 40;
    memcpy(rec, &n, 8);
    uint32_t crc = tw_crc32c_mask(tw_crc32c(rec, 8));
    memcpy(rec + 8, &crc, 4);
    blob b = {rec, sizeof rec};
    expect_error(&b, TW_COMPRESSION_NONE, 0, TW_ERR_TOO_LARGE, 0, "exceeds the cap");
}

static void test_gzip_truncated_and_concatenated(void **state)
{
    (void)state;
    blob a = write_records(TW_COMPRESSION_GZIP, 5);
    blob cut = {a.data, a.len - 6}; /* loses part of the gzip trailer */
    tw_tfrecord_reader *r = open_mem(&cut, TW_COMPRESSION_GZIP);
    const uint8_t *d;
    size_t n;
    tw_error err;
    tw_status s;
    while ((s = tw_tfrecord_read(r, &d, &n, &err)) == TW_OK)
        ;
    assert_int_equal(s, TW_ERR_TRUNCATED);
    assert_non_null(strstr(err.message, "truncated gzip"));
    tw_tfrecord_reader_close(r);

    blob two = {malloc(2 * a.len), 2 * a.len}; /* two gzip members back to back: 10 records */
    memcpy(two.data, a.data, a.len);
    memcpy(two.data + a.len, a.data, a.len);
    r = open_mem(&two, TW_COMPRESSION_AUTO);
    int count = 0;
    while (tw_tfrecord_read(r, &d, &n, &err) == TW_OK)
        count++;
    assert_int_equal(count, 10);
    tw_tfrecord_reader_close(r);
    free(two.data);
    free(a.data);
}

/* A gzip stream that inflates past max_total_bytes stops at the budget. */
static void test_gzip_budget(void **state)
{
    (void)state;
    blob b = write_records(TW_COMPRESSION_GZIP, 3000); /* ~ 500 KB inflated */
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    o.max_total_bytes = 100000;
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open_mem(b.data, b.len, "t.tfrecord", &o, &r, &err), TW_OK);
    const uint8_t *d;
    size_t n;
    tw_status s;
    while ((s = tw_tfrecord_read(r, &d, &n, &err)) == TW_OK)
        ;
    assert_int_equal(s, TW_ERR_TOO_LARGE);
    assert_non_null(strstr(err.message, "budget"));
    tw_tfrecord_reader_close(r);
    free(b.data);
}

static void test_trailing_garbage_after_zlib(void **state)
{
    (void)state;
    blob a = write_records(TW_COMPRESSION_ZLIB, 4);
    blob b = {malloc(a.len + 3), a.len + 3};
    memcpy(b.data, a.data, a.len);
    memcpy(b.data + a.len, "xyz", 3);
    tw_tfrecord_reader *r = open_mem(&b, TW_COMPRESSION_ZLIB);
    const uint8_t *d;
    size_t n;
    tw_error err;
    tw_status s;
    while ((s = tw_tfrecord_read(r, &d, &n, &err)) == TW_OK)
        ;
    assert_int_equal(s, TW_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "trailing"));
    tw_tfrecord_reader_close(r);
    free(a.data);
    free(b.data);
}

static void test_file_reader_streams_big_records(void **state)
{
    (void)state;
    char path[] = "/tmp/tw_tfrecord_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    tw_tfrecord_writer *w;
    assert_int_equal(tw_tfrecord_writer_create(fd, TW_COMPRESSION_NONE, path, &w, NULL), TW_OK);
    size_t big = 3 * 256 * 1024 + 17; /* larger than the I/O buffer */
    uint8_t *rec = malloc(big);
    for (size_t i = 0; i < big; i++)
        rec[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tw_tfrecord_write(w, rec, big - (size_t)i, NULL), TW_OK);
    assert_int_equal(tw_tfrecord_writer_finish(w, NULL), TW_OK);
    tw_tfrecord_writer_destroy(w);
    close(fd);
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open(path, NULL, &r, &err), TW_OK);
    const uint8_t *d;
    size_t n;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tw_tfrecord_read(r, &d, &n, &err), TW_OK);
        assert_int_equal(n, big - (size_t)i);
        assert_memory_equal(d, rec, n);
    }
    assert_int_equal(tw_tfrecord_read(r, &d, &n, &err), TW_END);
    tw_tfrecord_reader_close(r);
    unlink(path);
    free(rec);
    assert_int_equal(tw_tfrecord_reader_open(path, NULL, &r, &err), TW_ERR_IO);
    assert_string_equal(err.file, path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_all_compressions),
        cmocka_unit_test(test_past_writeback_hints),
        cmocka_unit_test(test_framing_bytes),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_corruptions),
        cmocka_unit_test(test_huge_length_is_capped),
        cmocka_unit_test(test_gzip_truncated_and_concatenated),
        cmocka_unit_test(test_gzip_budget),
        cmocka_unit_test(test_trailing_garbage_after_zlib),
        cmocka_unit_test(test_file_reader_streams_big_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
