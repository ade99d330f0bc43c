/* test_safetensors.c — the safetensors writer and reader: bytes equal to the reference writer's golden
 * outputs (safetensors/src/tensor.rs tests), names sorted and the header padded with spaces to 8, round
 * trips with rank 0 and zero-size tensors, the writer's refusals, every corruption the reference reader
 * refuses (each TW_ERR_CORRUPT with file, tensor and byte offset), the quirks it accepts, and a failed
 * write (RLIMIT_FSIZE) leaving the previous file intact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "safetensors.h"

static const char NAME[] = "c.safetensors";

typedef struct {
    uint8_t *data;
    size_t len;
} blob;

/* ---- helpers ---- */

/* A fresh folder under $TW_TEST_TMP (or /tmp); removed with its files by remove_dir. */
static void make_dir(char *out, size_t size) { assert_int_equal(tw_test_mkdtemp(out, size, "safetensors"), 0); }

static void remove_dir(const char *dir) { assert_int_equal(tw_test_rmdir(dir), 0); }

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static blob read_whole(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    blob b = {malloc(1 << 20), 0};
    b.len = fread(b.data, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* The file "<N as u64 LE><header><data_len bytes 0, 1, 2, ...>"; N = strlen(header), no padding. */
static blob make(const char *header, size_t data_len)
{
    size_t n = strlen(header);
    blob b = {malloc(8 + n + data_len + 1), 8 + n + data_len};
    for (int i = 0; i < 8; i++)
        b.data[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b.data + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        b.data[8 + n + i] = (uint8_t)i;
    return b;
}

/* The file offset of needle in header (which make() puts at byte 8). */
static int64_t at(const char *header, const char *needle)
{
    const char *p = strstr(header, needle);
    assert_non_null(p);
    return 8 + (p - header);
}

/* Expects parsing b to fail with status s at byte `offset` (-2: anywhere in the header), with `want`
 * in the message. Frees b. */
static void expect_fail_blob(blob b, tw_status s, int64_t offset, const char *want)
{
    tw_safetensors *st = (tw_safetensors *)1;
    tw_error err;
    tw_status got = tw_safetensors_parse(b.data, b.len, NAME, &st, &err);
    if (got != s)
        fail_msg("status %d, want %d (%s)", got, s, err.message);
    assert_null(st);
    assert_string_equal(err.file, NAME);
    if (offset == -2)
        assert_true(err.offset >= 8 && err.offset <= (int64_t)b.len);
    else if (err.offset != offset)
        fail_msg("offset %lld, want %lld (%s)", (long long)err.offset, (long long)offset,
                 err.message);
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
    free(b.data);
}

static void expect_fail(const char *header, size_t data_len, tw_status s, int64_t offset,
                        const char *want)
{
    expect_fail_blob(make(header, data_len), s, offset, want);
}

static tw_safetensors *parse_ok(const char *header, size_t data_len)
{
    blob b = make(header, data_len);
    tw_safetensors *st;
    tw_error err;
    if (tw_safetensors_parse(b.data, b.len, NAME, &st, &err) != TW_OK)
        fail_msg("parse failed: %s at %lld", err.message, (long long)err.offset);
    free(b.data);
    return st;
}

/* Writes tensors with tw_safetensors_write into dir/name and returns the file's bytes. */
static blob write_and_read(const char *dir, const char *name, const tw_st_tensor *t, size_t n,
                           const tw_st_meta *m, size_t n_meta)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tw_error err;
    if (tw_safetensors_write(path, t, n, m, n_meta, &err) != TW_OK)
        fail_msg("write failed: %s", err.message);
    return read_whole(path);
}

/* Compares b with "<N LE><header padded with spaces to N><data>". */
static void expect_bytes(blob b, const char *header, uint64_t n, const void *data, size_t data_len)
{
    assert_int_equal(b.len, 8 + n + data_len);
    for (int i = 0; i < 8; i++)
        assert_int_equal(b.data[i], (uint8_t)(n >> (8 * i)));
    assert_memory_equal(b.data + 8, header, strlen(header));
    for (size_t i = strlen(header); i < n; i++)
        assert_int_equal(b.data[8 + i], ' ');
    if (data_len)
        assert_memory_equal(b.data + 8 + n, data, data_len);
    free(b.data);
}

/* ---- writer ---- */

static void test_golden_bytes_of_the_reference_writer(void **state)
{
    (void)state;
    char dir[512];
    make_dir(dir, sizeof dir);
    float v[6] = {0, 1, 2, 3, 4, 5};
    tw_st_tensor a = {.name = "attn.0", .data = v, .rank = 3, .shape = {1, 2, 3}};
    expect_bytes(write_and_read(dir, "a", &a, 1, NULL, 0),
                 "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}", 64, v,
                 sizeof v);
    tw_st_tensor b = {.name = "attn0", .data = v, .rank = 4, .shape = {1, 1, 2, 3}};
    expect_bytes(write_and_read(dir, "b", &b, 1, NULL, 0),
                 "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}", 72, v,
                 sizeof v);
    expect_bytes(write_and_read(dir, "c", NULL, 0, NULL, 0), "{}", 8, NULL, 0);
    tw_st_meta m = {"framework", "pt"};
    expect_bytes(write_and_read(dir, "d", NULL, 0, &m, 1), "{\"__metadata__\":{\"framework\":\"pt\"}}",
                 40, NULL, 0);
    remove_dir(dir);
}

static void test_names_sorted_and_header_padded(void **state)
{
    (void)state;
    char dir[512];
    make_dir(dir, sizeof dir);
    float b[2] = {1, 2}, a[1] = {3}, c[3] = {4, 5, 6}, all[6] = {3, 1, 2, 4, 5, 6};
    tw_st_tensor t[] = {{.name = "b", .data = b, .rank = 1, .shape = {2}},
                        {.name = "a", .data = a, .rank = 0},
                        {.name = "c", .data = c, .rank = 2, .shape = {3, 1}}};
    tw_st_meta m[] = {{"z", "1"}, {"k", "v \"q\""}};
    const char *header = "{\"__metadata__\":{\"k\":\"v \\\"q\\\"\",\"z\":\"1\"},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                         "\"c\":{\"dtype\":\"F32\",\"shape\":[3,1],\"data_offsets\":[12,24]}}";
    uint64_t n = (strlen(header) + 7) / 8 * 8;
    assert_true(n > strlen(header)); /* this header does get padding */
    expect_bytes(write_and_read(dir, "x", t, 3, m, 2), header, n, all, sizeof all);
    remove_dir(dir);
}

static void test_round_trip(void **state)
{
    (void)state;
    char dir[512], path[1024];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/r.safetensors", dir);
    float w[12], s = -2.5f;
    for (int i = 0; i < 12; i++)
        w[i] = (float)i / 3.0f;
    tw_st_tensor t[] = {{.name = "w", .data = w, .rank = 2, .shape = {3, 4}},
                        {.name = "scalar", .data = &s, .rank = 0},
                        {.name = "empty", .data = NULL, .rank = 3, .shape = {2, 0, 5}}};
    tw_st_meta m[] = {{"step", "12"}, {"config", "{\"x\": 1}"}};
    tw_error err;
    assert_int_equal(tw_safetensors_write(path, t, 3, m, 2, &err), TW_OK);
    tw_safetensors *st;
    assert_int_equal(tw_safetensors_read(path, &st, &err), TW_OK);
    assert_string_equal(tw_safetensors_name(st), path);
    assert_int_equal(tw_safetensors_header_bytes(st) % 8, 0);
    assert_int_equal(tw_safetensors_count(st), 3);
    const tw_st_info *e = tw_safetensors_at(st, 0); /* offset order: empty [0,0), scalar, w */
    assert_string_equal(e->name, "empty");
    assert_int_equal(e->rank, 3);
    assert_int_equal(e->shape[1], 0);
    assert_int_equal(e->count, 0);
    assert_int_equal(e->nbytes, 0);
    const tw_st_info *sc = tw_safetensors_find(st, "scalar");
    assert_non_null(sc);
    assert_int_equal(sc->rank, 0);
    assert_int_equal(sc->count, 1);
    assert_int_equal(sc->dtype, TW_ST_F32);
    assert_memory_equal(sc->data, &s, 4);
    const tw_st_info *wi = tw_safetensors_find(st, "w");
    assert_int_equal(wi->count, 12);
    assert_int_equal(wi->shape[0], 3);
    assert_int_equal(wi->shape[1], 4);
    assert_int_equal(wi->offset, 8 + tw_safetensors_header_bytes(st) + 4);
    assert_memory_equal(wi->data, w, sizeof w);
    assert_int_equal((uintptr_t)wi->data % 4, 0);
    assert_null(tw_safetensors_find(st, "nope"));
    assert_int_equal(tw_safetensors_meta_count(st), 2);
    assert_string_equal(tw_safetensors_meta_at(st, 0)->key, "config");
    assert_string_equal(tw_safetensors_meta(st, "step"), "12");
    assert_string_equal(tw_safetensors_meta(st, "config"), "{\"x\": 1}");
    assert_null(tw_safetensors_meta(st, "nope"));
    tw_safetensors_free(st);
    tw_safetensors_free(NULL);
    remove_dir(dir);
}

/* Expects tw_safetensors_write to refuse with TW_ERR_INVALID and want in the message, creating
 * nothing. */
static void expect_refused(const char *dir, const tw_st_tensor *t, size_t n, const tw_st_meta *m,
                           size_t n_meta, const char *want)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    tw_error err;
    assert_int_equal(tw_safetensors_write(path, t, n, m, n_meta, &err), TW_ERR_INVALID);
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
    assert_int_equal(count_files(dir), 0);
}

static void test_writer_refusals(void **state)
{
    (void)state;
    char dir[512];
    make_dir(dir, sizeof dir);
    float v[4] = {0};
    tw_st_tensor dup[] = {{.name = "x", .data = v, .rank = 1, .shape = {2}},
                          {.name = "y", .data = v, .rank = 0},
                          {.name = "x", .data = v, .rank = 0}};
    expect_refused(dir, dup, 3, NULL, 0, "duplicate tensor name 'x'");
    tw_st_tensor reserved = {.name = "__metadata__", .data = v, .rank = 0};
    expect_refused(dir, &reserved, 1, NULL, 0, "reserved");
    tw_st_tensor null_name = {.name = NULL, .data = v, .rank = 0};
    expect_refused(dir, &null_name, 1, NULL, 0, "NULL name");
    tw_st_tensor negative = {.name = "n", .data = v, .rank = 2, .shape = {2, -1}};
    expect_refused(dir, &negative, 1, NULL, 0, "dimension 1 (-1)");
    tw_st_tensor huge = {.name = "h", .data = v, .rank = 2, .shape = {INT64_MAX, 4}};
    expect_refused(dir, &huge, 1, NULL, 0, "too large");
    tw_st_tensor deep = {.name = "d", .data = v, .rank = TW_ST_MAX_RANK + 1};
    expect_refused(dir, &deep, 1, NULL, 0, "rank 17");
    tw_st_tensor no_data = {.name = "nd", .data = NULL, .rank = 1, .shape = {1}};
    expect_refused(dir, &no_data, 1, NULL, 0, "no data");
    tw_st_tensor bad_utf8 = {.name = "\xff\xfe", .data = v, .rank = 0};
    expect_refused(dir, &bad_utf8, 1, NULL, 0, "UTF-8");
    tw_st_meta dup_meta[] = {{"k", "1"}, {"k", "2"}};
    expect_refused(dir, NULL, 0, dup_meta, 2, "duplicate metadata key 'k'");
    tw_st_meta bad_meta = {"k", "\xc3"};
    expect_refused(dir, NULL, 0, &bad_meta, 1, "UTF-8");
    tw_st_meta null_meta = {"k", NULL};
    expect_refused(dir, NULL, 0, &null_meta, 1, "NULL");
    remove_dir(dir);
}

/* ---- reader: corruptions ---- */

#define A_OK "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_header_length_corruptions(void **state)
{
    (void)state;
    blob tiny = {malloc(3), 3};
    memcpy(tiny.data, "\x10\0\0", 3);
    expect_fail_blob(tiny, TW_ERR_CORRUPT, 3, "fewer than the 8-byte header length");
    blob past = make("{" A_OK "}", 8);
    past.data[0] = (uint8_t)(past.len - 7); /* N = file size - 7: one byte past the end */
    expect_fail_blob(past, TW_ERR_CORRUPT, 0, "runs past the end of the file");
    blob huge = make("{" A_OK "}", 8);
    memcpy(huge.data, "\0\0\0\0\0\0\0\x80", 8); /* N = 2^63 */
    expect_fail_blob(huge, TW_ERR_CORRUPT, 0, "header length 9223372036854775808 is above the cap");
    blob cap = make("{" A_OK "}", 8);
    memcpy(cap.data, "\x01\xe1\xf5\x05\0\0\0\0", 8); /* N = 100,000,001 */
    expect_fail_blob(cap, TW_ERR_CORRUPT, 0, "above the cap of 100000000");
}

static void test_header_json_corruptions(void **state)
{
    (void)state;
    expect_fail("{\"a\":{\"dtype\":", 0, TW_ERR_CORRUPT, -2, "not valid JSON");
    expect_fail("not json", 0, TW_ERR_CORRUPT, -2, "not valid JSON");
    expect_fail("", 0, TW_ERR_CORRUPT, -2, "not valid JSON");
    expect_fail("[1, 2]", 0, TW_ERR_CORRUPT, 8, "not an object");
    expect_fail("{" A_OK ", " A_OK "}", 8, TW_ERR_CORRUPT, -2, "duplicate object key");
    expect_fail("{\"a\xff\":1}", 0, TW_ERR_CORRUPT, -2, "not valid JSON");
    blob nul = make("{\"a\":1}  ", 0);
    nul.data[8 + 7] = 0;
    expect_fail_blob(nul, TW_ERR_CORRUPT, -2, "not valid JSON");
    expect_fail("{" A_OK "} x", 8, TW_ERR_CORRUPT, -2, "not valid JSON");
}

static void test_entry_corruptions(void **state)
{
    (void)state;
    const char *h;
    h = "{" A_OK ",\"b\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    expect_fail(h, 12, TW_ERR_CORRUPT, at(h, "\"b\""), "tensor 'b': unknown dtype 'F33'");
    h = "{" A_OK ",\"b\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    expect_fail(h, 12, TW_ERR_CORRUPT, at(h, "\"b\""), "unknown dtype 'f32'");
    h = "{" A_OK ",\"b\":{\"shape\":[1],\"data_offsets\":[8,12]}}";
    expect_fail(h, 12, TW_ERR_CORRUPT, at(h, "\"b\""), "\"dtype\" is missing");
    h = "{" A_OK ",\"b\":[1]}";
    expect_fail(h, 8, TW_ERR_CORRUPT, at(h, "\"b\""), "tensor 'b': the entry is not a JSON object");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}";
    expect_fail(h, 4, TW_ERR_CORRUPT, at(h, "\"b\""), "tensor 'b': \"shape\" holds");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}";
    expect_fail(h, 4, TW_ERR_CORRUPT, at(h, "\"b\""), "\"shape\" holds");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}}";
    expect_fail(h, 12, TW_ERR_CORRUPT, at(h, "\"b\""), "\"shape\" is missing or not an array");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
        "\"data_offsets\":[0,4]}}";
    expect_fail(h, 4, TW_ERR_UNSUPPORTED, at(h, "\"b\""), "rank above the supported maximum of 16");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
        "\"data_offsets\":[0,4]}}";
    expect_fail(h, 4, TW_ERR_CORRUPT, at(h, "\"b\""), "overflows");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}";
    expect_fail(h, 4, TW_ERR_CORRUPT, at(h, "\"b\""), "\"data_offsets\" is not [BEGIN, END]");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}";
    expect_fail(h, 4, TW_ERR_CORRUPT, at(h, "\"b\""), "\"data_offsets\" is not [BEGIN, END]");
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}";
    expect_fail(h, 4, TW_ERR_CORRUPT, at(h, "\"b\""), "\"data_offsets\" is not [BEGIN, END]");
    h = "{\"__metadata__\":{\"k\":1}," A_OK "}";
    expect_fail(h, 8, TW_ERR_CORRUPT, 9, "__metadata__ value of 'k' is not a string");
    h = "{" A_OK ",\"__metadata__\":[\"k\"]}";
    expect_fail(h, 8, TW_ERR_CORRUPT, at(h, "\"__metadata__\""), "__metadata__ is not an object");
    h = "{\"b\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}";
    expect_fail(h, 1, TW_ERR_CORRUPT, at(h, "\"b\""), "F4 [3] does not fill a whole number of bytes");
}

static void test_size_and_layout_corruptions(void **state)
{
    (void)state;
    const char *h;
    /* the size does not match the shape */
    h = "{" A_OK ",\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,16]}}";
    expect_fail(h, 16, TW_ERR_CORRUPT, at(h, "\"b\""),
                "tensor 'b': data_offsets [8, 16] hold 8 bytes but F32 [3] needs 12");
    h = "{\"b\":{\"dtype\":\"I64\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    expect_fail(h, 16, TW_ERR_CORRUPT, 9, "I64 [2, 2] needs 32");
    /* a gap: b starts at 12 where the data before it ends at 8 */
    h = "{" A_OK ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
    expect_fail(h, 20, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h) + 8),
                "tensor 'b' starts at data byte 12, leaving a gap of 4 bytes");
    /* the data does not start at 0 */
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
    expect_fail(h, 8, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h)), "tensor 'b' starts at data byte 4");
    /* an overlap: b at [4, 12) over a at [0, 8) */
    h = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}," A_OK "}";
    expect_fail(h, 12, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h) + 4),
                "tensor 'b' at data bytes [4, 12) overlaps tensor 'a'");
    /* the same range twice */
    h = "{" A_OK ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_fail(h, 8, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h)), "overlaps tensor 'a'");
    /* trailing bytes after the data */
    h = "{" A_OK "}";
    expect_fail(h, 11, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h) + 8),
                "3 trailing bytes after the data");
    h = "{}";
    expect_fail(h, 1, TW_ERR_CORRUPT, 10, "1 trailing bytes");
    /* truncated data: b needs [8, 16) but the file stops 3 bytes into it */
    h = "{" A_OK ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    expect_fail(h, 11, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h) + 11),
                "tensor 'b' ends at byte");
    expect_fail(h, 11, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h) + 11), "(truncated)");
    /* offsets far past any file */
    h = "{\"b\":{\"dtype\":\"U8\",\"shape\":[1152921504606846976],"
        "\"data_offsets\":[0,1152921504606846976]}}";
    expect_fail(h, 4, TW_ERR_CORRUPT, (int64_t)(8 + strlen(h) + 4), "tensor 'b' ends at byte");
}

/* ---- reader: what the reference reader accepts ---- */

static void test_accepts_what_the_reference_accepts(void **state)
{
    (void)state;
    tw_safetensors *st = parse_ok("  {\"__metadata__\":null,\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                                  "\"data_offsets\":[0,8],\"extra\":[1]}}  ",
                                  8);
    assert_int_equal(tw_safetensors_count(st), 1);
    assert_int_equal(tw_safetensors_meta_count(st), 0);
    tw_safetensors_free(st);
    st = parse_ok("{}", 0);
    assert_int_equal(tw_safetensors_count(st), 0);
    tw_safetensors_free(st);
    /* a U8 tensor of 3 bytes puts the F32 after it at data byte 3, and N is not a multiple of 8:
     * the data buffer is still 8-aligned in memory, and the F32 bytes are where the offsets say */
    const char *h = "{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                    "\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[3,7]}}";
    st = parse_ok(h, 7);
    assert_int_equal((uintptr_t)tw_safetensors_at(st, 0)->data % 8, 0);
    const tw_st_info *f = tw_safetensors_find(st, "");
    assert_non_null(f);
    assert_int_equal(f->offset, 8 + strlen(h) + 3);
    uint8_t want[4] = {3, 4, 5, 6};
    assert_memory_equal(f->data, want, 4);
    assert_int_equal(tw_safetensors_find(st, "u")->dtype, TW_ST_U8);
    tw_safetensors_free(st);
    /* zero-size tensors share their offsets; every dtype name parses, sub-byte ones by bits */
    st = parse_ok("{\"z\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[0,0]},"
                  "\"y\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,0],\"data_offsets\":[0,0]},"
                  "\"x\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]},"
                  "\"w\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[2,5]}}",
                  5);
    assert_int_equal(tw_safetensors_count(st), 4);
    assert_string_equal(tw_safetensors_at(st, 0)->name, "y"); /* ties broken by name */
    assert_string_equal(tw_safetensors_at(st, 1)->name, "z");
    assert_int_equal(tw_safetensors_find(st, "x")->count, 4);
    tw_safetensors_free(st);
}

static void test_dtype_table(void **state)
{
    (void)state;
    assert_string_equal(tw_st_dtype_name(TW_ST_F32), "F32");
    assert_int_equal(tw_st_dtype_bits(TW_ST_F32), 32);
    assert_string_equal(tw_st_dtype_name(TW_ST_BF16), "BF16");
    assert_int_equal(tw_st_dtype_bits(TW_ST_C64), 64);
    assert_int_equal(tw_st_dtype_bits(TW_ST_F4), 4);
    assert_int_equal(tw_st_dtype_bits(TW_ST_F6_E3M2), 6);
    assert_string_equal(tw_st_dtype_name(TW_ST_F8_E5M2FNUZ), "F8_E5M2FNUZ");
    assert_string_equal(tw_st_dtype_name((tw_st_dtype)99), "?");
    char buf[32];
    uint64_t shape[3] = {2, 0, 7};
    tw_st_shape_text(shape, 3, buf, sizeof buf);
    assert_string_equal(buf, "[2, 0, 7]");
    tw_st_shape_text(shape, 0, buf, sizeof buf);
    assert_string_equal(buf, "[]");
    tw_st_shape_text(shape, 3, buf, 4);
    assert_string_equal(buf, "[2,");
}

/* ---- reader: files ---- */

static void test_read_file_errors(void **state)
{
    (void)state;
    char dir[512], path[1024];
    make_dir(dir, sizeof dir);
    tw_safetensors *st;
    tw_error err;
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    assert_int_equal(tw_safetensors_read(path, &st, &err), TW_ERR_IO);
    assert_int_equal(err.errno_value, ENOENT);
    assert_string_equal(err.file, path);
    assert_int_equal(tw_safetensors_read(dir, &st, &err), TW_ERR_IO);
    blob b = make("{" A_OK "}", 8);
    b.data[0] = (uint8_t)(b.len); /* N past the end, caught before any allocation */
    snprintf(path, sizeof path, "%s/past.safetensors", dir);
    FILE *f = fopen(path, "wb");
    fwrite(b.data, 1, b.len, f);
    fclose(f);
    free(b.data);
    assert_int_equal(tw_safetensors_read(path, &st, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, 0);
    assert_string_equal(err.file, path);
    b = make("{" A_OK "}", 5);
    f = fopen(path, "wb");
    fwrite(b.data, 1, b.len, f);
    fclose(f);
    free(b.data);
    assert_int_equal(tw_safetensors_read(path, &st, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, (int64_t)(8 + strlen("{" A_OK "}") + 5));
    assert_non_null(strstr(err.message, "tensor 'a'"));
    assert_null(st);
    remove_dir(dir);
}

static void test_failed_write_keeps_previous_file(void **state)
{
    (void)state;
    char dir[512], path[1024];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float small[4] = {1, 2, 3, 4}, *big = calloc(4096, sizeof *big);
    tw_st_tensor t = {.name = "w", .data = small, .rank = 1, .shape = {4}};
    tw_error err;
    assert_int_equal(tw_safetensors_write(path, &t, 1, NULL, 0, &err), TW_OK);
    blob before = read_whole(path);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 1024;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    t = (tw_st_tensor){.name = "w", .data = big, .rank = 2, .shape = {64, 64}};
    tw_status s = tw_safetensors_write(path, &t, 1, NULL, 0, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);

    assert_int_equal(s, TW_ERR_IO);
    assert_int_equal(err.errno_value, EFBIG);
    assert_string_equal(err.file, path);
    assert_int_equal(count_files(dir), 1); /* no temporary left */
    blob after = read_whole(path);
    assert_int_equal(after.len, before.len);
    assert_memory_equal(after.data, before.data, before.len);
    free(after.data);
    free(before.data);
    free(big);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_bytes_of_the_reference_writer),
        cmocka_unit_test(test_names_sorted_and_header_padded),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_writer_refusals),
        cmocka_unit_test(test_header_length_corruptions),
        cmocka_unit_test(test_header_json_corruptions),
        cmocka_unit_test(test_entry_corruptions),
        cmocka_unit_test(test_size_and_layout_corruptions),
        cmocka_unit_test(test_accepts_what_the_reference_accepts),
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_read_file_errors),
        cmocka_unit_test(test_failed_write_keeps_previous_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
