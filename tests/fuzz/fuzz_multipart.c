/* fuzz_multipart.c — libFuzzer harness for the streaming multipart/form-data parser.
 *
 * Input: one flags byte, then (when a '\n' comes within the next 128 bytes) the Content-Type up to it,
 * else "multipart/form-data; boundary=X", then the body. The flags pick the largest chunk (1 to 4096
 * bytes) and a callback (part_begin, part_data or part_end of part 1..8) that fails. The body is parsed
 * three ways: in one feed, in chunks whose sizes come from a generator seeded with a hash of the input, and
 * (up to 4 KiB) byte by byte; every piece lives in its own exact-size allocation so ASan sees a read past it.
 * The invariant: every way sees the same parts (names, file names, content types, byte counts), the same
 * concatenated part data, and the same outcome (status, offset, message). Also checked: callbacks come in
 * begin/data/end order, part_data never gets 0 bytes, names respect their caps, no callback runs after a
 * failure, and an error is sticky. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multipart.h"

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void buf_add(buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

typedef struct {
    buf meta, data;
    int in_part, begins, ends, failed;
    uint64_t part_bytes;
    int fail_which; /* 0 none, 1 begin, 2 data, 3 end */
    int fail_part;
} sink;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_multipart: check failed: %s (line %d)\n", #cond, __LINE__);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static tw_status on_begin(void *ctx, const char *name, const char *filename, const char *content_type,
                          tw_error *err)
{
    sink *s = ctx;
    CHECK(!s->failed && !s->in_part);
    size_t nl = strlen(name), fl = strlen(filename);
    CHECK(nl >= 1 && nl <= TW_MULTIPART_MAX_NAME && fl <= TW_MULTIPART_MAX_FILENAME);
    for (size_t i = 0; i < nl; i++)
        CHECK((unsigned char)name[i] >= 0x20 && name[i] != 0x7f);
    s->begins++;
    if (s->fail_which == 1 && s->begins == s->fail_part) {
        s->failed = 1;
        return tw_error_set(err, TW_ERR_IO, NULL, -1, "begin failed");
    }
    s->in_part = 1;
    s->part_bytes = 0;
    buf_add(&s->meta, "B", 1);
    buf_add(&s->meta, name, nl + 1);
    buf_add(&s->meta, filename, fl + 1);
    buf_add(&s->meta, content_type, strlen(content_type) + 1);
    return TW_OK;
}

static tw_status on_data(void *ctx, const void *data, size_t n, tw_error *err)
{
    sink *s = ctx;
    CHECK(!s->failed && s->in_part && n > 0);
    if (s->fail_which == 2 && s->begins == s->fail_part) {
        s->failed = 1;
        return tw_error_set(err, TW_ERR_IO, NULL, -1, "data failed");
    }
    s->part_bytes += n;
    buf_add(&s->data, data, n);
    return TW_OK;
}

static tw_status on_end(void *ctx, tw_error *err)
{
    sink *s = ctx;
    CHECK(!s->failed && s->in_part);
    s->ends++;
    if (s->fail_which == 3 && s->ends == s->fail_part) {
        s->failed = 1;
        return TW_ERR_IO; /* err left for the parser to fill */
    }
    (void)err;
    s->in_part = 0;
    buf_add(&s->meta, "E", 1);
    buf_add(&s->meta, &s->part_bytes, sizeof s->part_bytes);
    return TW_OK;
}

typedef struct {
    sink s;
    tw_status status;
    tw_error err;
} outcome;

/* Parses body in pieces of 1..max_chunk bytes drawn by an xorshift seeded with seed (max_chunk 0: one
 * piece) into *o (caller releases). */
static void parse(const char *ct, const uint8_t *body, size_t len, uint64_t seed, size_t max_chunk, int fail_which,
                  int fail_part, outcome *o)
{
    memset(o, 0, sizeof *o);
    o->s.fail_which = fail_which;
    o->s.fail_part = fail_part;
    tw_multipart_callbacks cb = {on_begin, on_data, on_end, &o->s};
    tw_multipart *m;
    o->status = tw_multipart_create(ct, &cb, &m, &o->err);
    CHECK(o->status == TW_OK || m == NULL);
    if (o->status != TW_OK)
        return;
    uint64_t x = seed | 1;
    size_t at = 0;
    while (at < len && o->status == TW_OK) {
        size_t n = len - at;
        if (max_chunk) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t want = 1 + (size_t)(x % max_chunk);
            if (want < n)
                n = want;
        }
        uint8_t *piece = malloc(n);
        if (!piece)
            abort();
        memcpy(piece, body + at, n);
        o->status = tw_multipart_feed(m, piece, n, &o->err);
        free(piece);
        at += n;
    }
    if (o->status == TW_OK)
        o->status = tw_multipart_finish(m, &o->err);
    if (o->status != TW_OK) {
        tw_error again;
        CHECK(tw_multipart_feed(m, "--", 2, &again) == o->status);
        CHECK(again.offset == o->err.offset && !strcmp(again.message, o->err.message));
        CHECK(tw_multipart_finish(m, &again) == o->status);
    }
    CHECK(tw_multipart_parts(m) <= TW_MULTIPART_MAX_PARTS);
    tw_multipart_destroy(m);
}

static void same(const outcome *a, const outcome *b)
{
    CHECK(a->status == b->status);
    CHECK(a->s.meta.n == b->s.meta.n && (!a->s.meta.n || !memcmp(a->s.meta.p, b->s.meta.p, a->s.meta.n)));
    CHECK(a->s.data.n == b->s.data.n && (!a->s.data.n || !memcmp(a->s.data.p, b->s.data.p, a->s.data.n)));
    if (a->status != TW_OK) {
        CHECK(a->err.offset == b->err.offset);
        CHECK(!strcmp(a->err.message, b->err.message));
    }
}

static void release(outcome *o)
{
    free(o->s.meta.p);
    free(o->s.data.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t chunk_caps[8] = {1, 2, 3, 8, 17, 64, 512, 4096};
    uint8_t flags = data[0];
    size_t max_chunk = chunk_caps[flags & 7];
    int fail_which = (flags >> 3) & 3;
    int fail_part = 1 + (flags >> 5);
    data++, size--;

    char ct[129] = "multipart/form-data; boundary=X";
    const uint8_t *nl = memchr(data, '\n', size < 128 ? size : 128);
    if (nl) {
        size_t n = (size_t)(nl - data);
        memcpy(ct, data, n);
        ct[n] = 0;
        data += n + 1;
        size -= n + 1;
    }
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a of the body: the chunking seed */
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3u;

    outcome one, chunked;
    parse(ct, data, size, 0, 0, fail_which, fail_part, &one);
    parse(ct, data, size, h, max_chunk, fail_which, fail_part, &chunked);
    same(&one, &chunked);
    release(&chunked);
    if (size <= 4096) {
        outcome bytes;
        parse(ct, data, size, 0, 1, fail_which, fail_part, &bytes);
        same(&one, &bytes);
        release(&bytes);
    }
    release(&one);
    return 0;
}
