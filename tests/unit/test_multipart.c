/* test_multipart.c — the streaming multipart/form-data parser: a body curl 7.88.1 sent, split at every
 * byte; binary part data full of CR, LF, "--" and partial delimiters; the held-back bytes staying under
 * boundary + 4; the boundary rules of the Content-Type (quoted, bad bytes, a NUL as in CVE-2023-27371);
 * each header rule and cap with its offset and message; truncation; callbacks that fail; sticky errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "multipart.h"

/* ================================ helpers ================================ */

/* A growable byte string. */
typedef struct {
    char *p;
    size_t n, cap;
} sb;

static void sb_add(sb *b, const void *data, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sb *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_fmt(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sb *b, const char *fmt, ...)
{
    char tmp[16384];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof tmp);
    sb_add(b, tmp, (size_t)n);
}

static void sb_free(sb *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* What the callbacks saw. meta: "[name|filename|content_type]" per part_begin, "(N)" per part_end with
 * the part's byte count; data: every part's bytes, concatenated. */
typedef struct {
    sb meta, data;
    int in_part;
    size_t part_bytes;
    int begins, ends;
    size_t data_calls;
    size_t max_data_call;
    int fail_begin; /* part number (1-based) whose part_begin fails, 0: none */
    int fail_data;  /* part whose first part_data fails */
    int fail_end;   /* part whose part_end fails */
    int quiet;      /* fail without filling err */
    int calls_after_failure;
    int failed;
} sink;

static tw_status fail_cb(sink *s, tw_error *err, const char *which)
{
    s->failed = 1;
    if (s->quiet)
        return TW_ERR_IO;
    return tw_error_set(err, TW_ERR_IO, "upload.bin", 7, "%s: disk full", which);
}

static tw_status on_begin(void *ctx, const char *name, const char *filename, const char *content_type,
                          tw_error *err)
{
    sink *s = ctx;
    s->calls_after_failure += s->failed;
    assert_false(s->in_part);
    assert_true(name[0] && strlen(name) <= TW_MULTIPART_MAX_NAME);
    assert_true(strlen(filename) <= TW_MULTIPART_MAX_FILENAME);
    s->begins++;
    if (s->begins == s->fail_begin)
        return fail_cb(s, err, "begin");
    s->in_part = 1;
    s->part_bytes = 0;
    sb_fmt(&s->meta, "[%s|%s|%s]", name, filename, content_type);
    return TW_OK;
}

static tw_status on_data(void *ctx, const void *data, size_t n, tw_error *err)
{
    sink *s = ctx;
    s->calls_after_failure += s->failed;
    assert_true(s->in_part);
    assert_true(n > 0);
    if (s->begins == s->fail_data)
        return fail_cb(s, err, "data");
    s->data_calls++;
    if (n > s->max_data_call)
        s->max_data_call = n;
    s->part_bytes += n;
    sb_add(&s->data, data, n);
    return TW_OK;
}

static tw_status on_end(void *ctx, tw_error *err)
{
    sink *s = ctx;
    s->calls_after_failure += s->failed;
    assert_true(s->in_part);
    s->ends++;
    if (s->ends == s->fail_end)
        return fail_cb(s, err, "end");
    s->in_part = 0;
    sb_fmt(&s->meta, "(%zu)", s->part_bytes);
    return TW_OK;
}

static tw_multipart *make(const char *ct, sink *s)
{
    tw_multipart_callbacks cb = {on_begin, on_data, on_end, s};
    tw_multipart *m;
    tw_error err;
    tw_status st = tw_multipart_create(ct, &cb, &m, &err);
    if (st != TW_OK)
        fail_msg("create(%s): %s", ct, err.message);
    return m;
}

/* Feeds body[0, len) to a fresh parser in pieces ending at cuts[0, ncuts) (ascending) and the rest, each
 * piece in its own exact-size allocation (so ASan sees a read past a piece), then finishes. Returns the
 * first non-OK status, with *err. */
static tw_status run_cuts(const char *ct, const void *body, size_t len, const size_t *cuts, size_t ncuts,
                          sink *s, tw_error *err)
{
    tw_multipart *m = make(ct, s);
    tw_status st = TW_OK;
    size_t at = 0;
    for (size_t c = 0; c <= ncuts && st == TW_OK; c++) {
        size_t end = c < ncuts ? cuts[c] : len;
        uint8_t *piece = malloc(end - at + 1);
        assert_non_null(piece);
        memcpy(piece, (const uint8_t *)body + at, end - at);
        st = tw_multipart_feed(m, piece, end - at, err);
        free(piece);
        at = end;
    }
    if (st == TW_OK)
        st = tw_multipart_finish(m, err);
    tw_multipart_destroy(m);
    return st;
}

static tw_status run_one(const char *ct, const void *body, size_t len, sink *s, tw_error *err)
{
    return run_cuts(ct, body, len, NULL, 0, s, err);
}

static tw_status run_bytewise(const char *ct, const void *body, size_t len, sink *s, tw_error *err)
{
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    tw_status st = run_cuts(ct, body, len, cuts, len ? len - 1 : 0, s, err);
    free(cuts);
    return st;
}

static void sink_free(sink *s)
{
    sb_free(&s->meta);
    sb_free(&s->data);
}

/* The outcome of a run, to compare a chunked run with the one-shot run. */
static void assert_same(const sink *a, tw_status sa, const tw_error *ea, const sink *b, tw_status sb_,
                        const tw_error *eb)
{
    assert_int_equal(sa, sb_);
    assert_int_equal(a->meta.n, b->meta.n);
    if (a->meta.n)
        assert_memory_equal(a->meta.p, b->meta.p, a->meta.n);
    assert_int_equal(a->data.n, b->data.n);
    if (a->data.n)
        assert_memory_equal(a->data.p, b->data.p, a->data.n);
    if (sa != TW_OK) {
        assert_int_equal(ea->offset, eb->offset);
        assert_string_equal(ea->message, eb->message);
    }
}

/* Runs body one-shot, byte by byte and split in two at every offset (and, when len <= max3, in three at
 * every pair of offsets); every run must see the same parts, bytes and outcome. Returns the one-shot
 * status; *one (caller frees) holds what it saw. */
static tw_status check_all_splits(const char *ct, const void *body, size_t len, size_t max3, sink *one,
                                  tw_error *err)
{
    memset(one, 0, sizeof *one);
    tw_status s1 = run_one(ct, body, len, one, err);
    sink t = {0};
    tw_error e;
    tw_status st = run_bytewise(ct, body, len, &t, &e);
    assert_same(one, s1, err, &t, st, &e);
    sink_free(&t);
    for (size_t k = 0; k <= len; k++) {
        memset(&t, 0, sizeof t);
        st = run_cuts(ct, body, len, &k, 1, &t, &e);
        assert_same(one, s1, err, &t, st, &e);
        sink_free(&t);
    }
    if (len <= max3)
        for (size_t j = 0; j <= len; j++)
            for (size_t k = j; k <= len; k++) {
                size_t cuts[2] = {j, k};
                memset(&t, 0, sizeof t);
                st = run_cuts(ct, body, len, cuts, 2, &t, &e);
                assert_same(one, s1, err, &t, st, &e);
                sink_free(&t);
            }
    return s1;
}

/* Runs a one-shot body expected to fail with status and a message containing `words`, at `offset`
 * (-2: don't check). */
static void expect_error(const char *ct, const char *body, size_t len, tw_status status, int64_t offset,
                         const char *words)
{
    sink s = {0};
    tw_error err;
    tw_status st = check_all_splits(ct, body, len, 0, &s, &err);
    if (st != status || !strstr(err.message, words))
        fail_msg("status %d '%s' (wanted %d with '%s')", st, st ? err.message : "", status, words);
    assert_int_equal(err.status, status);
    if (offset != -2)
        assert_int_equal(err.offset, offset);
    sink_free(&s);
}

#define CT_B "multipart/form-data; boundary=B"
#define CD(name) "Content-Disposition: form-data; name=\"" name "\"\r\n"

/* ================================ real bodies ================================ */

/* `curl -F a=@f1.txt -F 'b=@f2.bin;filename=we"ird.bin' -F c=value` as curl 7.88.1 sent it. */
static const char CURL_CT[] = "multipart/form-data; boundary=------------------------44266f3ac2947573";
static const char CURL_BODY[] =
    "--------------------------44266f3ac2947573\r\n"
    "Content-Disposition: form-data; name=\"a\"; filename=\"f1.txt\"\r\n"
    "Content-Type: text/plain\r\n"
    "\r\n"
    "hello\r\n--world\n\r\n"
    "--------------------------44266f3ac2947573\r\n"
    "Content-Disposition: form-data; name=\"b\"; filename=\"we%22ird.bin\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "\x00\x01\r\n--\xff\r\n"
    "--------------------------44266f3ac2947573\r\n"
    "Content-Disposition: form-data; name=\"c\"\r\n"
    "\r\n"
    "value\r\n"
    "--------------------------44266f3ac2947573--\r\n";

static void test_curl_body_every_split(void **state)
{
    (void)state;
    assert_int_equal(sizeof CURL_BODY - 1, 453);
    sink s;
    tw_error err;
    assert_int_equal(check_all_splits(CURL_CT, CURL_BODY, sizeof CURL_BODY - 1, 0, &s, &err), TW_OK);
    assert_string_equal(s.meta.p, "[a|f1.txt|text/plain](15)[b|we%22ird.bin|application/octet-stream](7)[c||](5)");
    assert_int_equal(s.data.n, 27);
    assert_memory_equal(s.data.p, "hello\r\n--world\n\x00\x01\r\n--\xffvalue", 27);
    /* One-shot: each part's data comes zero-copy in one call. */
    assert_int_equal(s.data_calls, 3);
    sink_free(&s);
}

/* A browser's shape: WebKit boundary, a preamble-free body, an empty file input and lower-case headers. */
static void test_browser_shape_and_case(void **state)
{
    (void)state;
    const char *ct = "Multipart/Form-Data ; charset=UTF-8;BOUNDARY=----WebKitFormBoundary7MA4YWxkTrZu0gW";
    const char body[] = "------WebKitFormBoundary7MA4YWxkTrZu0gW\r\n"
                        "content-disposition: Form-Data; NAME=\"file\"; FileName=\"\"\r\n"
                        "CONTENT-TYPE:application/octet-stream\r\n"
                        "\r\n"
                        "\r\n"
                        "------WebKitFormBoundary7MA4YWxkTrZu0gW\r\n"
                        "Content-Disposition: form-data; name=label_column\r\n"
                        "X-Unknown: whatever; name=\"nope\"\r\n"
                        "\r\n"
                        "label\r\n"
                        "------WebKitFormBoundary7MA4YWxkTrZu0gW--";
    sink s;
    tw_error err;
    /* "Multipart/Form-Data ;" has a space before ';': OWS is allowed there. */
    assert_int_equal(check_all_splits(ct, body, sizeof body - 1, 0, &s, &err), TW_OK);
    assert_string_equal(s.meta.p, "[file||application/octet-stream](0)[label_column||](5)");
    sink_free(&s);
}

/* ================================ part data ================================ */

/* Data full of near-delimiters: CR, LF, "--", the boundary without CRLF, every proper prefix of the
 * delimiter, CR runs before the real delimiter. Boundary "XyZ": delimiter "\r\n--XyZ". */
static void test_binary_data_with_partial_delimiters(void **state)
{
    (void)state;
    static const char ct[] = "multipart/form-data; boundary=XyZ";
    const char data1[] = "\r\r\n\n--XyZ-\r\n-\r\n--\r\n--X\r\n--Xy\r\r\n--Xy\r\n\r\n--Xz--XyZ\r";
    const char data2[] = "\r\n";
    const char data3[] = "\r\n--Xy";
    sb body = {0};
    sb_str(&body, "preamble --XyZ\r\nnot a delimiter\r\n--XyZ\r\n" CD("one") "\r\n");
    sb_add(&body, data1, sizeof data1 - 1);
    sb_str(&body, "\r\n--XyZ\r\n" CD("two") "\r\n");
    sb_add(&body, data2, sizeof data2 - 1);
    sb_str(&body, "\r\n--XyZ\r\n" CD("three") "\r\n");
    sb_add(&body, data3, sizeof data3 - 1);
    sb_str(&body, "\r\n--XyZ\r\n" CD("four") "\r\n\r\n--XyZ--\r\n\r\n--XyZ\r\nepilogue");
    sink s;
    tw_error err;
    assert_int_equal(check_all_splits(ct, body.p, body.n, 400, &s, &err), TW_OK);
    char want_meta[256];
    snprintf(want_meta, sizeof want_meta, "[one||](%zu)[two||](2)[three||](6)[four||](0)", sizeof data1 - 1);
    assert_string_equal(s.meta.p, want_meta);
    sb want = {0};
    sb_add(&want, data1, sizeof data1 - 1);
    sb_add(&want, data2, sizeof data2 - 1);
    sb_add(&want, data3, sizeof data3 - 1);
    assert_int_equal(s.data.n, want.n);
    assert_memory_equal(s.data.p, want.p, want.n);
    sb_free(&want);
    sb_free(&body);
    sink_free(&s);
}

/* Every byte value in a part, and a 70-byte boundary full of bchars, at every split. */
static void test_all_bytes_long_boundary(void **state)
{
    (void)state;
    char boundary[71];
    const char set[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ";
    for (int i = 0; i < 70; i++)
        boundary[i] = set[i % (sizeof set - 2)]; /* no trailing space */
    boundary[70] = 0;
    char ct[160];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=\"%s\"", boundary);
    uint8_t data[512];
    for (int i = 0; i < 512; i++)
        data[i] = (uint8_t)(i * 7 + (i >> 8));
    sb body = {0};
    sb_fmt(&body, "--%s\r\n" CD("bytes") "Content-Type: application/octet-stream\r\n\r\n", boundary);
    sb_add(&body, data, sizeof data);
    sb_fmt(&body, "\r\n--%.69s", boundary); /* the delimiter but its last byte: data */
    sb_fmt(&body, "\r\n--%s--", boundary);
    sink s;
    tw_error err;
    assert_int_equal(check_all_splits(ct, body.p, body.n, 0, &s, &err), TW_OK);
    assert_string_equal(s.meta.p, "[bytes||application/octet-stream](585)");
    assert_memory_equal(s.data.p, data, sizeof data);
    assert_memory_equal(s.data.p + sizeof data, "\r\n--", 4);
    assert_memory_equal(s.data.p + sizeof data + 4, boundary, 69);
    sb_free(&body);
    sink_free(&s);
}

/* The bytes held back at the end of a feed are a delimiter prefix, never more than boundary + 4, and a
 * part's data is delivered as soon as it cannot be a delimiter. */
static void test_held_back_is_bounded(void **state)
{
    (void)state;
    char boundary[71];
    memset(boundary, 'q', 70);
    boundary[70] = 0;
    char ct[128];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", boundary);
    sink s = {0};
    tw_multipart *m = make(ct, &s);
    tw_error err;
    sb b = {0};
    sb_fmt(&b, "--%s\r\n" CD("f") "\r\nabc", boundary);
    assert_int_equal(tw_multipart_feed(m, b.p, b.n, &err), TW_OK);
    assert_int_equal(s.data.n, 3);
    /* All of the delimiter but its last byte: 73 bytes held. */
    char delim[75];
    snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    assert_int_equal(strlen(delim), 74);
    assert_int_equal(tw_multipart_feed(m, delim, 73, &err), TW_OK);
    assert_int_equal(s.data.n, 3);
    /* A wrong last byte: the 73 bytes and it are data. */
    assert_int_equal(tw_multipart_feed(m, "r", 1, &err), TW_OK);
    assert_int_equal(s.data.n, 3 + 73 + 1);
    assert_memory_equal(s.data.p + 3, delim, 73);
    /* "\r" then "\r": the first CR is data as soon as the second arrives. */
    assert_int_equal(tw_multipart_feed(m, "\r", 1, &err), TW_OK);
    assert_int_equal(s.data.n, 77);
    assert_int_equal(tw_multipart_feed(m, "\r", 1, &err), TW_OK);
    assert_int_equal(s.data.n, 78);
    assert_int_equal(tw_multipart_feed(m, delim + 1, 73, &err), TW_OK); /* completes from the held CR */
    assert_int_equal(s.ends, 1);
    assert_int_equal(s.data.n, 78);
    assert_int_equal(tw_multipart_feed(m, "--", 2, &err), TW_OK);
    assert_int_equal(tw_multipart_finish(m, &err), TW_OK);
    assert_string_equal(s.meta.p, "[f||](78)");
    tw_multipart_destroy(m);
    sb_free(&b);
    sink_free(&s);
}

/* 16 MiB of pseudo-random bytes in odd-sized chunks: all delivered, in order, and each chunk's data in at
 * most two calls (the held bytes, then the chunk's own slice). */
static void test_large_part_streams(void **state)
{
    (void)state;
    const size_t size = 16u << 20;
    static const char ct[] = "multipart/form-data; boundary=------------------------8f3c2a9d0e41b7c5";
    sb body = {0};
    sb_str(&body, "--------------------------8f3c2a9d0e41b7c5\r\n" CD("images")
                  "Content-Type: application/gzip\r\n\r\n");
    size_t head = body.n;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < size; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t v = x;
        if ((i & 0xfff) == 0)
            v = 0x2d2d0a0d2d2d0a0du; /* "\r\n--\r\n--" now and then */
        sb_add(&body, &v, 8);
    }
    sb_str(&body, "\r\n--------------------------8f3c2a9d0e41b7c5--\r\n");
    sink s = {0};
    tw_multipart *m = make(ct, &s);
    tw_error err;
    size_t at = 0, chunks = 0;
    for (size_t step = 65536 + 17; at < body.n; chunks++) {
        size_t n = body.n - at < step ? body.n - at : step;
        assert_int_equal(tw_multipart_feed(m, body.p + at, n, &err), TW_OK);
        at += n;
    }
    assert_int_equal(tw_multipart_finish(m, &err), TW_OK);
    assert_int_equal(s.data.n, size);
    assert_memory_equal(s.data.p, body.p + head, size);
    assert_true(s.data_calls <= 2 * chunks);
    tw_multipart_destroy(m);
    sb_free(&body);
    sink_free(&s);
}

/* ================================ structure ================================ */

static void test_preamble_epilogue_padding(void **state)
{
    (void)state;
    /* Preamble with "--B" mid-line (not a delimiter), transport padding, epilogue with delimiters. */
    const char ok[] = "pre --B amble\r\n\r\n--B \t \r\n" CD("x") "\r\nX\r\n--B\t\r\n" CD("y") "\r\nY\r\n--B--"
                      " \r\nepilogue\r\n--B\r\nnot parsed\r\n--B--";
    sink s;
    tw_error err;
    assert_int_equal(check_all_splits(CT_B, ok, sizeof ok - 1, 200, &s, &err), TW_OK);
    assert_string_equal(s.meta.p, "[x||](1)[y||](1)");
    assert_memory_equal(s.data.p, "XY", 2);
    sink_free(&s);
    /* The first delimiter without CRLF only at the very start. */
    const char first[] = "--B\r\n" CD("x") "\r\n\r\n--B--";
    assert_int_equal(check_all_splits(CT_B, first, sizeof first - 1, 0, &s, &err), TW_OK);
    assert_string_equal(s.meta.p, "[x||](0)");
    sink_free(&s);
    /* Padding cap. */
    sb b = {0};
    sb_str(&b, "--B");
    for (int i = 0; i < TW_MULTIPART_MAX_PADDING; i++)
        sb_str(&b, " ");
    sb_str(&b, "\r\n" CD("x") "\r\n\r\n--B--");
    assert_int_equal(check_all_splits(CT_B, b.p, b.n, 0, &s, &err), TW_OK);
    sink_free(&s);
    sb_free(&b);
    sb_str(&b, "--B");
    for (int i = 0; i <= TW_MULTIPART_MAX_PADDING; i++)
        sb_str(&b, " ");
    sb_str(&b, "\r\n" CD("x") "\r\n\r\n--B--");
    expect_error(CT_B, b.p, b.n, TW_ERR_INVALID, 3 + TW_MULTIPART_MAX_PADDING, "padding");
    sb_free(&b);
}

/* The body offset of the byte `after` bytes past the first `marker` in body. */
static int64_t at(const char *body, const char *marker, size_t after)
{
    const char *p = strstr(body, marker);
    assert_non_null(p);
    return (int64_t)(p - body) + (int64_t)after;
}

static void test_delimiter_errors(void **state)
{
    (void)state;
    /* A line that starts with the boundary but is longer: RFC 2046 forbids the boundary in a part. */
    const char in_data[] = "--B\r\n" CD("x") "\r\nab\r\n--Bc\r\n--B--";
    expect_error(CT_B, in_data, sizeof in_data - 1, TW_ERR_INVALID, at(in_data, "--Bc", 3),
                 "multipart part 2: the boundary is followed by byte 0x63");
    const char in_preamble[] = "pre\r\n--Bx\r\n--B\r\n" CD("x") "\r\n\r\n--B--";
    expect_error(CT_B, in_preamble, sizeof in_preamble - 1, TW_ERR_INVALID, at(in_preamble, "--Bx", 3),
                 "followed by byte 0x78");
    const char pad_then_close[] = "--B\r\n" CD("x") "\r\n\r\n--B --";
    expect_error(CT_B, pad_then_close, sizeof pad_then_close - 1, TW_ERR_INVALID, at(pad_then_close, "--B -", 4),
                 "0x2d");
    const char cr_no_lf[] = "--B\rX";
    expect_error(CT_B, cr_no_lf, sizeof cr_no_lf - 1, TW_ERR_INVALID, 4, "CR without LF");
    const char one_dash[] = "--B\r\n" CD("x") "\r\n\r\n--B-x";
    expect_error(CT_B, one_dash, sizeof one_dash - 1, TW_ERR_INVALID, at(one_dash, "--B-x", 4),
                 "'-' and byte 0x78");
    const char no_parts[] = "--B--\r\n";
    expect_error(CT_B, no_parts, sizeof no_parts - 1, TW_ERR_INVALID, 4, "before its first part");
}

static void test_truncated(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        const char *words;
    } cases[] = {
        {"", "before its first delimiter"},
        {"just a preamble\r\n--", "before its first delimiter"},
        {"--B", "part 1: body ended inside a delimiter line"},
        {"--B\r", "part 1: body ended inside a delimiter line"},
        {"--B-", "part 1: body ended inside a delimiter line"},
        {"--B\r\n", "part 1: body ended inside the header block"},
        {"--B\r\n" CD("x"), "part 1: body ended inside the header block"},
        {"--B\r\n" CD("x") "\r", "part 1: body ended inside the header block"},
        {"--B\r\n" CD("x") "\r\n", "part 1: body ended inside the part's data"},
        {"--B\r\n" CD("x") "\r\ndata\r\n--", "part 1: body ended inside the part's data"},
        {"--B\r\n" CD("x") "\r\ndata\r\n--B", "part 2: body ended inside a delimiter line"},
        {"--B\r\n" CD("x") "\r\ndata\r\n--B\r\n", "part 2: body ended inside the header block"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].body);
        expect_error(CT_B, cases[i].body, n, TW_ERR_TRUNCATED, (int64_t)n, cases[i].words);
    }
    /* Data before the truncation was delivered; part_end was not called. */
    sink s = {0};
    tw_error err;
    const char body[] = "--B\r\n" CD("x") "\r\ndata\r\n-";
    assert_int_equal(run_one(CT_B, body, sizeof body - 1, &s, &err), TW_ERR_TRUNCATED);
    assert_int_equal(s.ends, 0);
    assert_int_equal(s.data.n, 4); /* "\r\n-" is held: it may begin the delimiter */
    sink_free(&s);
}

/* ================================ Content-Type ================================ */

static void test_content_type(void **state)
{
    (void)state;
    static const struct {
        const char *ct;
        tw_status status;
        const char *boundary; /* when OK: what delimits the body */
    } cases[] = {
        {"multipart/form-data; boundary=simple", TW_OK, "simple"},
        {"multipart/form-data;boundary=\"quoted:with=odd?chars, and spaces\"", TW_OK,
         "quoted:with=odd?chars, and spaces"},
        {"multipart/form-data; boundary=\"esc\\aped\"", TW_OK, "escaped"},
        {"  MULTIPART/FORM-DATA;; boundary=x ;charset=utf-8;  ", TW_OK, "x"},
        {"multipart/form-data; foo=\"a;boundary=no\"; boundary=yes", TW_OK, "yes"},
        {NULL, TW_ERR_UNSUPPORTED, NULL},
        {"", TW_ERR_UNSUPPORTED, NULL},
        {"application/json", TW_ERR_UNSUPPORTED, NULL},
        {"multipart/mixed; boundary=x", TW_ERR_UNSUPPORTED, NULL},
        {"multipart/form-data2; boundary=x", TW_ERR_UNSUPPORTED, NULL},
        {"multipart/form-data,text/plain; boundary=x", TW_ERR_UNSUPPORTED, NULL},
        {"form-data; boundary=x", TW_ERR_UNSUPPORTED, NULL},
        {"multipart/form-data", TW_ERR_INVALID, NULL},
        {"multipart/form-data; charset=utf-8", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary = x", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"unterminated", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"ends in backslash\\", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=a; boundary=a", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=a{b", TW_ERR_INVALID, NULL},   /* not a token */
        {"multipart/form-data; boundary=\"a{b\"", TW_ERR_INVALID, NULL}, /* not a bchar */
        {"multipart/form-data; boundary=\"a\"b", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"a\\\"b\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"trailing space \"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"ctl\x01\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"tab\there\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"del\x7f\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"utf8\xc3\xa9\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"cr\r\nlf\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=\"\\\x01\"", TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=" /* 71 */
         "01234567890123456789012345678901234567890123456789012345678901234567890",
         TW_ERR_INVALID, NULL},
        {"multipart/form-data; boundary=" /* 70 */
         "0123456789012345678901234567890123456789012345678901234567890123456789",
         TW_OK, "0123456789012345678901234567890123456789012345678901234567890123456789"},
    };
    tw_multipart_callbacks cb = {on_begin, on_data, on_end, NULL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tw_multipart *m = (tw_multipart *)(void *)&cb; /* any non-NULL value: failure must reset it */
        tw_error err;
        tw_status st = tw_multipart_create(cases[i].ct, &cb, &m, &err);
        if (st != cases[i].status)
            fail_msg("'%s': %d (%s), wanted %d", cases[i].ct ? cases[i].ct : "(null)", st, st ? err.message : "",
                     cases[i].status);
        if (st != TW_OK) {
            assert_null(m);
            assert_int_equal(err.status, st);
            assert_true(err.message[0]);
            continue;
        }
        tw_multipart_destroy(m);
        sink s = {0};
        sb b = {0};
        sb_fmt(&b, "--%s\r\n" CD("f") "\r\nv\r\n--%s--", cases[i].boundary, cases[i].boundary);
        assert_int_equal(run_one(cases[i].ct, b.p, b.n, &s, &err), TW_OK);
        assert_string_equal(s.meta.p, "[f||](1)");
        sb_free(&b);
        sink_free(&s);
    }
}

/* CVE-2023-27371: a NUL in the boundary made libmicrohttpd's PostProcessor read out of bounds. The
 * Content-Type is a C string here, so the NUL ends it: what remains is refused, never an empty delimiter. */
static void test_boundary_with_nul(void **state)
{
    (void)state;
    tw_multipart_callbacks cb = {on_begin, on_data, on_end, NULL};
    static const char quoted[] = "multipart/form-data; boundary=\"\0abc\"";
    static const char bare[] = "multipart/form-data; boundary=\0abc";
    static const char inner[] = "multipart/form-data; boundary=\"ab\0c\"";
    const char *cts[] = {quoted, bare, inner};
    for (size_t i = 0; i < 3; i++) {
        tw_multipart *m;
        tw_error err;
        assert_int_equal(tw_multipart_create(cts[i], &cb, &m, &err), TW_ERR_INVALID);
        assert_null(m);
    }
}

/* ================================ headers ================================ */

static void test_header_values(void **state)
{
    (void)state;
    char name64[65], file255[256];
    memset(name64, 'n', 64);
    name64[64] = 0;
    memset(file255, 'f', 255);
    file255[255] = 0;
    sb b = {0};
    sb_fmt(&b, "--B\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n\r\n\r\n", name64, file255);
    sb_str(&b, "--B\r\nContent-Disposition:form-data;name=token_form-1.2;filename*=UTF-8''x;creation-date=\"x\"\r\n"
               "Content-Type:   text/csv; charset=\"utf-8\"   \r\n\r\n\r\n");
    sb_str(&b, "--B\r\nContent-Disposition: form-data; name=\"q\\\"uo\\\\te\"; filename=\"caf\xc3\xa9 \\a.csv\"\r\n"
               "\r\n\r\n--B--");
    sink s;
    tw_error err;
    assert_int_equal(check_all_splits(CT_B, b.p, b.n, 0, &s, &err), TW_OK);
    sb want = {0};
    sb_fmt(&want, "[%s|%s|](0)[token_form-1.2||text/csv; charset=\"utf-8\"](0)[q\"uo\\te|caf\xc3\xa9 a.csv|](0)",
           name64, file255);
    assert_string_equal(s.meta.p, want.p);
    sb_free(&want);
    sb_free(&b);
    sink_free(&s);
}

static void test_header_errors(void **state)
{
    (void)state;
#define H(s) s, sizeof s - 1
    static const struct {
        const char *headers; /* the first part's header lines (each with CRLF), before the blank line */
        size_t len;
        tw_status status;
        int64_t offset; /* in the body; the header block starts at 5 */
        const char *words;
    } cases[] = {
        {H("Content-Type: text/plain\r\n"), TW_ERR_INVALID, 5, "part 1: no Content-Disposition"},
        {H(""), TW_ERR_INVALID, 5, "no Content-Disposition"},
        {H("Content-Disposition: form-data; filename=\"x\"\r\n"), TW_ERR_INVALID, 5,
         "without a name parameter"},
        {H("Content-Disposition: form-data\r\n"), TW_ERR_INVALID, 5, "without a name parameter"},
        {H("Content-Disposition: form-data; name=\"\"\r\n"), TW_ERR_INVALID, 5, "empty field name"},
        {H("Content-Disposition: form-data; name="
           "\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\"\r\n"),
         TW_ERR_INVALID, 5, "field name over 64 bytes"},
        {H("Content-Disposition: attachment; name=\"x\"\r\n"), TW_ERR_INVALID, 5, "is 'attachment', not form-data"},
        {H("Content-Disposition: form-data-x; name=\"x\"\r\n"), TW_ERR_INVALID, 5, "not form-data"},
        {H("Content-Disposition: form-data; name=\"x\"\r\nContent-Disposition: form-data; name=\"y\"\r\n"),
         TW_ERR_INVALID, 47, "Content-Disposition appears twice"},
        {H("Content-Disposition: form-data; name=\"x\"; name=\"y\"\r\n"), TW_ERR_INVALID, 5, "name parameter twice"},
        {H("Content-Disposition: form-data; name=\"x\"; filename=a; filename=b\r\n"), TW_ERR_INVALID, 5,
         "filename parameter twice"},
        {H("Content-Type: a\r\n" CD("x") "Content-Type: b\r\n"), TW_ERR_INVALID, 64, "Content-Type appears twice"},
        {H("Content-Disposition: form-data; name=\"x\n"), TW_ERR_INVALID, 44, "LF without CR"},
        {H("Content-Disposition: form-data; name=\"x\"\nX: y\r\n"), TW_ERR_INVALID, 45, "LF without CR"},
        {H("Content-Disposition: form-data; name=\"x\r\"\r\n"), TW_ERR_INVALID, 44, "CR without LF"},
        {H("Content-Disposition: form-data; name=\"x\0\"\r\n"), TW_ERR_INVALID, 44, "NUL byte"},
        {H("Content-Disposition: form-data;\r\n name=\"x\"\r\n"), TW_ERR_INVALID, 38, "folded header line"},
        {H(CD("x") "no colon here\r\n"), TW_ERR_INVALID, 47, "not 'Name: value'"},
        {H(CD("x") "X-Space : y\r\n"), TW_ERR_INVALID, 47, "not 'Name: value'"},
        {H(CD("x") ": empty name\r\n"), TW_ERR_INVALID, 47, "not 'Name: value'"},
        {H("Content-Disposition: form-data; name=\"x\r\n"), TW_ERR_INVALID, 5, "unterminated quoted string"},
        {H("Content-Disposition: form-data; name=\"x\\\"\r\n"), TW_ERR_INVALID, 5, "unterminated quoted string"},
        {H("Content-Disposition: form-data; name=x y\r\n"), TW_ERR_INVALID, 5, "expected ';'"},
        {H("Content-Disposition: form-data; name=\r\n"), TW_ERR_INVALID, 5, "empty unquoted value"},
        {H("Content-Disposition: form-data; name\r\n"), TW_ERR_INVALID, 5, "without '='"},
        {H("Content-Disposition: form-data; =x\r\n"), TW_ERR_INVALID, 5, "without a name"},
        {H("Content-Disposition: form-data; name=\"x\"; filename=\"a\x01.bin\"\r\n"), TW_ERR_INVALID, 5,
         "file name holds control byte 0x01"},
        {H("Content-Disposition: form-data; name=\"a\tb\"\r\n"), TW_ERR_INVALID, 5,
         "field name holds control byte 0x09"},
        {H("Content-Disposition: form-data; name=\"a\x7f\"\r\n"), TW_ERR_INVALID, 5, "control byte 0x7f"},
    };
#undef H
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb b = {0};
        sb_str(&b, "--B\r\n");
        sb_add(&b, cases[i].headers, cases[i].len);
        sb_str(&b, "\r\ndata\r\n--B--");
        sink s = {0};
        tw_error err;
        tw_status st = check_all_splits(CT_B, b.p, b.n, 0, &s, &err);
        if (st != cases[i].status || !strstr(err.message, cases[i].words) || err.offset != cases[i].offset)
            fail_msg("case %zu: %d at %lld '%s' (wanted %d at %lld with '%s')", i, st, (long long)err.offset,
                     err.message, cases[i].status, (long long)cases[i].offset, cases[i].words);
        assert_int_equal(s.begins, 0);
        sb_free(&b);
        sink_free(&s);
    }
    /* A 256-byte file name. */
    sb b = {0};
    sb_str(&b, "--B\r\nContent-Disposition: form-data; name=f; filename=\"");
    for (int i = 0; i < 256; i++)
        sb_str(&b, "f");
    sb_str(&b, "\"\r\n\r\n\r\n--B--");
    expect_error(CT_B, b.p, b.n, TW_ERR_INVALID, 5, "part 1: file name over 255 bytes");
    sb_free(&b);
}

/* A header block of exactly 8192 bytes (blank line included) passes; one more byte is TOO_LARGE at the
 * byte past the cap, in whichever part. */
static void test_header_block_cap(void **state)
{
    (void)state;
    for (int extra = 0; extra <= 1; extra++)
        for (int part = 1; part <= 2; part++) {
            sb b = {0};
            if (part == 2)
                sb_str(&b, "--B\r\n" CD("first") "\r\n1");
            sb_str(&b, part == 2 ? "\r\n--B\r\n" : "--B\r\n");
            int64_t start = (int64_t)b.n;
            sb_str(&b, CD("big") "X-Pad: ");
            size_t fixed = strlen(CD("big") "X-Pad: ") + 4; /* the pad line's CRLF and the blank line */
            for (size_t i = 0; i < TW_MULTIPART_MAX_HEADER_BYTES - fixed + (size_t)extra; i++)
                sb_str(&b, "p");
            sb_str(&b, "\r\n\r\nv\r\n--B--");
            sink s;
            tw_error err;
            tw_status st = check_all_splits(CT_B, b.p, b.n, 0, &s, &err);
            if (!extra) {
                assert_int_equal(st, TW_OK);
                assert_int_equal(s.begins, part);
            } else {
                char words[64];
                snprintf(words, sizeof words, "multipart part %d: header block over 8192 bytes", part);
                assert_int_equal(st, TW_ERR_TOO_LARGE);
                assert_string_equal(err.message, words);
                assert_int_equal(err.offset, start + TW_MULTIPART_MAX_HEADER_BYTES);
                assert_int_equal(s.begins, part - 1);
            }
            sb_free(&b);
            sink_free(&s);
        }
}

static void test_part_cap(void **state)
{
    (void)state;
    for (int n = TW_MULTIPART_MAX_PARTS; n <= TW_MULTIPART_MAX_PARTS + 1; n++) {
        sb b = {0};
        int64_t last = 0;
        for (int i = 1; i <= n; i++) {
            sb_str(&b, i == 1 ? "--B\r\n" : "\r\n--B\r\n");
            last = (int64_t)b.n;
            sb_fmt(&b, "Content-Disposition: form-data; name=\"p%d\"\r\n\r\n%d", i, i % 10);
        }
        sb_str(&b, "\r\n--B--\r\n");
        sink s = {0};
        tw_error err;
        tw_status st = run_one(CT_B, b.p, b.n, &s, &err);
        if (n == TW_MULTIPART_MAX_PARTS) {
            assert_int_equal(st, TW_OK);
            assert_int_equal(s.ends, TW_MULTIPART_MAX_PARTS);
        } else {
            assert_int_equal(st, TW_ERR_TOO_LARGE);
            assert_string_equal(err.message, "multipart part 65: more than 64 parts");
            assert_int_equal(err.offset, last);
            assert_int_equal(s.ends, TW_MULTIPART_MAX_PARTS);
            sink_free(&s);
            memset(&s, 0, sizeof s);
            assert_int_equal(run_bytewise(CT_B, b.p, b.n, &s, &err), TW_ERR_TOO_LARGE);
            assert_int_equal(err.offset, last);
        }
        sb_free(&b);
        sink_free(&s);
    }
}

/* ================================ callbacks, stickiness ================================ */

static void test_callback_errors(void **state)
{
    (void)state;
    const char body[] = "--B\r\n" CD("a") "\r\nAAAA\r\n--B\r\n" CD("b") "\r\nBBBB\r\n--B--";
    for (int which = 0; which < 3; which++)
        for (int quiet = 0; quiet <= 1; quiet++) {
            sink s = {0};
            s.quiet = quiet;
            if (which == 0)
                s.fail_begin = 2;
            else if (which == 1)
                s.fail_data = 2;
            else
                s.fail_end = 2;
            tw_multipart *m = make(CT_B, &s);
            tw_error err;
            tw_status st = tw_multipart_feed(m, body, sizeof body - 1, &err);
            assert_int_equal(st, TW_ERR_IO);
            assert_int_equal(err.status, TW_ERR_IO);
            static const char *const names[] = {"begin", "data", "end"};
            static const char *const cbs[] = {"part_begin", "part_data", "part_end"};
            char want[128];
            if (quiet)
                snprintf(want, sizeof want, "multipart part 2: %s callback failed (IO_ERROR)", cbs[which]);
            else
                snprintf(want, sizeof want, "%s: disk full", names[which]);
            assert_string_equal(err.message, want);
            if (!quiet) {
                assert_string_equal(err.file, "upload.bin"); /* the callback's error, untouched */
                assert_int_equal(err.offset, 7);
            }
            /* Sticky: the same error again, and no callback runs. */
            tw_error again;
            assert_int_equal(tw_multipart_feed(m, "x", 1, &again), TW_ERR_IO);
            assert_string_equal(again.message, want);
            assert_int_equal(tw_multipart_finish(m, &again), TW_ERR_IO);
            assert_string_equal(again.message, want);
            assert_int_equal(tw_multipart_feed(m, NULL, 0, NULL), TW_ERR_IO);
            assert_int_equal(s.calls_after_failure, 0);
            assert_int_equal(s.data.n, which == 2 ? 8 : 4);
            tw_multipart_destroy(m);
            sink_free(&s);
        }
}

static void test_errors_are_sticky(void **state)
{
    (void)state;
    sink s = {0};
    tw_multipart *m = make(CT_B, &s);
    tw_error err, again;
    const char bad[] = "--B\r\nContent-Disposition: form-data\r\n\r\n";
    assert_int_equal(tw_multipart_feed(m, bad, sizeof bad - 1, &err), TW_ERR_INVALID);
    const char good[] = CD("x") "\r\n\r\n--B--";
    assert_int_equal(tw_multipart_feed(m, good, sizeof good - 1, &again), TW_ERR_INVALID);
    assert_string_equal(again.message, err.message);
    assert_int_equal(again.offset, err.offset);
    assert_int_equal(tw_multipart_finish(m, &again), TW_ERR_INVALID);
    assert_int_equal(again.offset, err.offset);
    tw_multipart_destroy(m);
    /* Truncation is sticky too, and finish after a clean close is idempotent. */
    m = make(CT_B, &s);
    assert_int_equal(tw_multipart_finish(m, &err), TW_ERR_TRUNCATED);
    assert_int_equal(tw_multipart_feed(m, "--B", 3, &again), TW_ERR_TRUNCATED);
    tw_multipart_destroy(m);
    sink_free(&s);
    memset(&s, 0, sizeof s);
    m = make(CT_B, &s);
    const char ok[] = "--B\r\n" CD("x") "\r\n\r\n--B--";
    assert_int_equal(tw_multipart_feed(m, ok, sizeof ok - 1, &err), TW_OK);
    assert_int_equal(tw_multipart_parts(m), 1);
    assert_int_equal(tw_multipart_finish(m, &err), TW_OK);
    assert_int_equal(tw_multipart_finish(m, &err), TW_OK);
    assert_int_equal(tw_multipart_feed(m, "more epilogue", 13, &err), TW_OK);
    tw_multipart_destroy(m);
    tw_multipart_destroy(NULL);
    sink_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_curl_body_every_split),
        cmocka_unit_test(test_browser_shape_and_case),
        cmocka_unit_test(test_binary_data_with_partial_delimiters),
        cmocka_unit_test(test_all_bytes_long_boundary),
        cmocka_unit_test(test_held_back_is_bounded),
        cmocka_unit_test(test_large_part_streams),
        cmocka_unit_test(test_preamble_epilogue_padding),
        cmocka_unit_test(test_delimiter_errors),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_content_type),
        cmocka_unit_test(test_boundary_with_nul),
        cmocka_unit_test(test_header_values),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_header_block_cap),
        cmocka_unit_test(test_part_cap),
        cmocka_unit_test(test_callback_errors),
        cmocka_unit_test(test_errors_are_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
