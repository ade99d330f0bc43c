/* test_alloc_failures.c — SQLite's out-of-memory loop over the file-format parsers of eventlog/: for every N,
 * the Nth allocation of ours fails (malloc, calloc, realloc, strdup: wrapped at link time by
 * tests/unit/CMakeLists.txt, so the libraries' own allocations are untouched) and the parser must answer
 * TW_ERR_NOMEM, free what it took and leave nothing behind (the ASan build's leak check at exit); the loop
 * ends at the first N the parse survives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "csv.h"
#include "idx.h"
#include "npy.h"
#include "safetensors.h"

static long fail_at = -1, seen; /* the allocation to fail (-1: none), and how many were made */

static int fails(void) { return fail_at >= 0 && seen++ == fail_at; }

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n) { return fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fails() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return fails() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fails() ? NULL : __real_strdup(s); }

typedef tw_status (*parse_fn)(void);

/* Runs parse with the Nth allocation failing for N = 0, 1, ... until it succeeds; every failure must be
 * TW_ERR_NOMEM. Returns how many allocations the successful parse made. */
static long oom_loop(parse_fn parse)
{
    for (long n = 0;; n++) {
        fail_at = n;
        seen = 0;
        tw_status s = parse();
        fail_at = -1;
        if (s == TW_OK)
            return seen;
        if (s != TW_ERR_NOMEM)
            fail_msg("allocation %ld failing gave status %d, not TW_ERR_NOMEM", n, (int)s);
    }
}

static const char CSV[] = "a,b,\"label, quoted\"\n1,2,0\n3,4,1\n\"5\",6,0\n";

static tw_status parse_csv(void)
{
    tw_csv_reader *r;
    tw_error err;
    tw_status s = tw_csv_open_mem(CSV, sizeof CSV - 1, "t.csv", 0, &r, &err);
    if (s != TW_OK)
        return s;
    char *const *fields;
    size_t n;
    while (s == TW_OK)
        s = tw_csv_next_row(r, &fields, &n, &err);
    tw_csv_close(r);
    return s == TW_END ? TW_OK : s;
}

/* A safetensors file: 8-byte header length, the JSON header, 8 bytes of data (two F32). */
static tw_status parse_safetensors(void)
{
    static const char header[] = "{\"__metadata__\":{\"step\":\"7\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                                 "\"data_offsets\":[0,8]}}";
    uint8_t file[8 + sizeof header - 1 + 8] = {0};
    uint64_t len = sizeof header - 1;
    memcpy(file, &len, 8); /* little-endian, as the machines Tower runs on */
    memcpy(file + 8, header, len);
    tw_safetensors *st;
    tw_error err;
    tw_status s = tw_safetensors_parse(file, sizeof file, "t.safetensors", &st, &err);
    if (s == TW_OK)
        tw_safetensors_free(st);
    return s;
}

static tw_status parse_npy(void)
{
    static const char dict[] = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }";
    uint8_t file[128] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    size_t head = 10 + sizeof dict - 1, pad = (64 - (head + 1) % 64) % 64;
    file[8] = (uint8_t)(sizeof dict - 1 + pad + 1);
    memcpy(file + 10, dict, sizeof dict - 1);
    memset(file + head, ' ', pad);
    file[head + pad] = '\n';
    size_t n = head + pad + 1 + 6;
    tw_npy_reader *r;
    tw_error err;
    tw_status s = tw_npy_open_mem(file, n, "t.npy", 0, &r, &err);
    if (s != TW_OK)
        return s;
    const uint8_t *item;
    while (s == TW_OK)
        s = tw_npy_next(r, &item, &err);
    tw_npy_close(r);
    return s == TW_END ? TW_OK : s;
}

static tw_status parse_idx(void)
{
    static const uint8_t file[] = {0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8};
    tw_idx_reader *r;
    tw_error err;
    tw_status s = tw_idx_open_mem(file, sizeof file, "t-idx3-ubyte", 0, &r, &err);
    if (s != TW_OK)
        return s;
    const uint8_t *item;
    while (s == TW_OK)
        s = tw_idx_next(r, &item, &err);
    tw_idx_close(r);
    return s == TW_END ? TW_OK : s;
}

static void test_csv(void **state) { (void)state; assert_true(oom_loop(parse_csv) > 0); }
static void test_safetensors(void **state) { (void)state; assert_true(oom_loop(parse_safetensors) > 0); }
static void test_npy(void **state) { (void)state; assert_true(oom_loop(parse_npy) > 0); }
static void test_idx(void **state) { (void)state; assert_true(oom_loop(parse_idx) > 0); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_safetensors),
        cmocka_unit_test(test_npy),
        cmocka_unit_test(test_idx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
