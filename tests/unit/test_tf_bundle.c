/* test_tf_bundle.c — the TensorFlow checkpoint V2 writer (eventlog/tf_bundle.h) and the ustar writer
 * (eventlog/tar.h), read back by an independent reader written here from the table format (footer, magic,
 * block handles, block trailers with masked CRC32C, prefix-compressed entries, restart points, the index
 * block) and protobuf-c: every key sorted and found, the header first, each entry's dtype, shape, offset,
 * size and checksum matching the data file; the same input in any order giving the same bytes; refused
 * input leaving nothing; the state file's text; the files written; the tar headers' checksums and padding.
 * TensorFlow itself reads the files in tests/integration/test_export.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "crc32c.h"
#include "tar.h"
#include "tensor_bundle.pb-c.h"
#include "tf_bundle.h"

/* ---- a reader of the table, independent of the writer ---- */

static uint64_t varint(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        assert_true(*p < end);
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    fail_msg("varint too long");
    return 0;
}

static uint32_t u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

typedef struct {
    char key[128];
    const uint8_t *value;
    size_t value_len;
} entry;

/* The entries of the block at (off, size) of file, after checking its trailer; returns the count. */
static size_t read_block(const uint8_t *file, size_t len, uint64_t off, uint64_t size, entry *out, size_t max)
{
    assert_true(off + size + 5 <= len);
    const uint8_t *b = file + off;
    assert_int_equal(b[size], 0); /* no compression */
    uint32_t crc = tw_crc32c_extend(tw_crc32c(b, size), b + size, 1);
    assert_int_equal(u32(b + size + 1), tw_crc32c_mask(crc));
    assert_true(size >= 4);
    uint32_t n_restarts = u32(b + size - 4);
    assert_true(n_restarts >= 1 && 4 + 4 * (uint64_t)n_restarts <= size);
    const uint8_t *restarts = b + size - 4 - 4 * n_restarts, *p = b;
    size_t n = 0, r = 0;
    char prev[128] = "";
    while (p < restarts) {
        int at_restart = r < n_restarts && (size_t)(p - b) == u32(restarts + 4 * r);
        r += at_restart;
        uint64_t shared = varint(&p, restarts), fresh = varint(&p, restarts), vlen = varint(&p, restarts);
        if (at_restart)
            assert_int_equal(shared, 0);
        assert_true(shared <= strlen(prev) && shared + fresh < sizeof prev && p + fresh + vlen <= restarts);
        assert_true(n < max);
        memcpy(out[n].key, prev, shared);
        memcpy(out[n].key + shared, p, fresh);
        out[n].key[shared + fresh] = '\0';
        out[n].value = p + fresh;
        out[n].value_len = vlen;
        p += fresh + vlen;
        strcpy(prev, out[n].key);
        n++;
    }
    if (n == 0) /* an empty block keeps its one restart point, at 0 */
        assert_true(n_restarts == 1 && u32(restarts) == 0);
    else
        assert_int_equal(r, n_restarts); /* every restart point is an entry's start */
    return n;
}

/* Reads the whole table: returns the data block's entries (checked sorted, header first). */
static size_t read_table(const tw_bundle_bytes *b, entry *out, size_t max)
{
    const uint8_t *f = b->index;
    assert_true(b->index_len >= 48);
    const uint8_t *footer = f + b->index_len - 48;
    assert_int_equal(u32(footer + 40), 0x8b80fb57u);
    assert_int_equal(u32(footer + 44), 0xdb477524u);
    const uint8_t *p = footer;
    uint64_t meta_off = varint(&p, footer + 40), meta_size = varint(&p, footer + 40);
    uint64_t index_off = varint(&p, footer + 40), index_size = varint(&p, footer + 40);
    entry meta[1], index[2];
    assert_int_equal(read_block(f, b->index_len, meta_off, meta_size, meta, 1), 0);
    assert_int_equal(read_block(f, b->index_len, index_off, index_size, index, 2), 1);
    const uint8_t *h = index[0].value, *hend = h + index[0].value_len;
    uint64_t data_off = varint(&h, hend), data_size = varint(&h, hend);
    size_t n = read_block(f, b->index_len, data_off, data_size, out, max);
    assert_true(n >= 1);
    assert_string_equal(out[0].key, "");
    for (size_t i = 1; i < n; i++)
        assert_true(strcmp(out[i - 1].key, out[i].key) < 0);
    assert_true(strcmp(index[0].key, out[n - 1].key) >= 0); /* the separator covers the block */
    return n;
}

/* ---- tests ---- */

enum { N = 40, T = N + 2 }; /* N float tensors, an int64 and an int32 scalar */

typedef struct {
    char names[N][64];
    float values[N][6];
    int64_t step;
    int32_t step32;
    tw_bundle_tensor t[T];
} fixture;

/* N float tensors sharing prefixes (so keys are prefix-compressed across several restart points), an int64
 * scalar and an int32 one (the step as a TF1 graph's tf.Variable(0) declares it). */
static void make(fixture *f)
{
    for (int i = 0; i < N; i++) {
        snprintf(f->names[i], sizeof f->names[i], "layer%d/%s%s", i / 4, i % 2 ? "biases" : "weights",
                 i % 4 >= 2 ? "/ExponentialMovingAverage" : "");
        for (int k = 0; k < 6; k++)
            f->values[i][k] = (float)(i * 10 + k) / 7.0f;
        f->t[i] = (tw_bundle_tensor){.name = f->names[i], .dtype = TW_BUNDLE_FLOAT, .rank = i % 2 ? 1 : 2,
                                     .shape = {i % 2 ? 6 : 2, 3}, .data = f->values[i]};
    }
    f->step = 1234567890123ll;
    f->t[N] = (tw_bundle_tensor){.name = "global_step", .dtype = TW_BUNDLE_INT64, .rank = 0, .data = &f->step};
    f->step32 = 2147483647;
    f->t[N + 1] = (tw_bundle_tensor){.name = "Variable", .dtype = TW_BUNDLE_INT32, .rank = 0, .data = &f->step32};
}

static const tw_bundle_tensor *find(const fixture *f, const char *name)
{
    for (int i = 0; i < T; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}

static void test_round_trip(void **state)
{
    (void)state;
    static fixture f;
    make(&f);
    tw_bundle_bytes b;
    tw_error err;
    assert_int_equal(tw_bundle_build(f.t, T, &b, &err), TW_OK);
    static entry e[T + 1];
    assert_int_equal(read_table(&b, e, T + 1), T + 1);
    Twpb__BundleHeaderProto *h = twpb__bundle_header_proto__unpack(NULL, e[0].value_len, e[0].value);
    assert_non_null(h);
    assert_int_equal(h->num_shards, 1);
    assert_int_equal(h->endianness, TWPB__BUNDLE_HEADER_PROTO__ENDIANNESS__LITTLE);
    assert_non_null(h->version);
    assert_int_equal(h->version->producer, 1);
    twpb__bundle_header_proto__free_unpacked(h, NULL);
    size_t covered = 0;
    for (size_t i = 1; i < T + 1; i++) {
        const tw_bundle_tensor *t = find(&f, e[i].key);
        assert_non_null(t);
        Twpb__BundleEntryProto *be = twpb__bundle_entry_proto__unpack(NULL, e[i].value_len, e[i].value);
        assert_non_null(be);
        assert_int_equal(be->dtype, t->dtype);
        assert_int_equal(be->shard_id, 0);
        assert_int_equal(be->shape ? be->shape->n_dim : 0, (size_t)t->rank);
        size_t bytes = t->dtype == TW_BUNDLE_INT64 ? 8 : 4;
        for (int d = 0; d < t->rank; d++) {
            assert_int_equal(be->shape->dim[d]->size, t->shape[d]);
            bytes *= (size_t)t->shape[d];
        }
        assert_int_equal(be->size, bytes);
        assert_true((size_t)be->offset + bytes <= b.data_len);
        assert_memory_equal(b.data + be->offset, t->data, bytes);
        assert_int_equal(be->crc32c, tw_crc32c_mask(tw_crc32c(t->data, bytes)));
        covered += bytes;
        twpb__bundle_entry_proto__free_unpacked(be, NULL);
    }
    assert_int_equal(covered, b.data_len); /* back to back, nothing else */
    tw_bundle_bytes_free(&b);
    assert_null(b.index);
}

static void test_order_does_not_matter(void **state)
{
    (void)state;
    static fixture f, g;
    make(&f);
    make(&g);
    for (int i = 0; i < T; i++) /* reversed */
        g.t[i] = f.t[T - 1 - i];
    tw_bundle_bytes a, b;
    tw_error err;
    assert_int_equal(tw_bundle_build(f.t, T, &a, &err), TW_OK);
    assert_int_equal(tw_bundle_build(g.t, T, &b, &err), TW_OK);
    assert_int_equal(a.index_len, b.index_len);
    assert_memory_equal(a.index, b.index, a.index_len);
    assert_int_equal(a.data_len, b.data_len);
    assert_memory_equal(a.data, b.data, a.data_len);
    tw_bundle_bytes_free(&a);
    tw_bundle_bytes_free(&b);
}

static void test_empty_bundle_has_only_the_header(void **state)
{
    (void)state;
    tw_bundle_bytes b;
    tw_error err;
    assert_int_equal(tw_bundle_build(NULL, 0, &b, &err), TW_OK);
    entry e[2];
    assert_int_equal(read_table(&b, e, 2), 1);
    assert_int_equal(b.data_len, 0);
    tw_bundle_bytes_free(&b);
}

static void expect_refused(tw_bundle_tensor *t, size_t n, const char *says)
{
    tw_bundle_bytes b = {(uint8_t *)1, 1, (uint8_t *)1, 1};
    tw_error err;
    assert_int_equal(tw_bundle_build(t, n, &b, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, says));
    assert_null(b.index);
    assert_null(b.data);
}

static void test_refusals(void **state)
{
    (void)state;
    float v[2] = {1, 2};
    tw_bundle_tensor t[2] = {{.name = "a", .dtype = TW_BUNDLE_FLOAT, .rank = 1, .shape = {2}, .data = v},
                             {.name = "a", .dtype = TW_BUNDLE_FLOAT, .rank = 1, .shape = {2}, .data = v}};
    expect_refused(t, 2, "named twice");
    t[1].name = "";
    expect_refused(t, 2, "no name");
    t[1] = (tw_bundle_tensor){.name = "b", .dtype = TW_BUNDLE_FLOAT, .rank = 9, .data = v};
    expect_refused(t, 2, "rank 9");
    t[1] = (tw_bundle_tensor){.name = "b", .dtype = TW_BUNDLE_FLOAT, .rank = 1, .shape = {-1}, .data = v};
    expect_refused(t, 2, "dimension 0");
    t[1] = (tw_bundle_tensor){.name = "b", .dtype = TW_BUNDLE_FLOAT, .rank = 1, .shape = {2}, .data = NULL};
    expect_refused(t, 2, "no data");
    t[1] = (tw_bundle_tensor){.name = "b", .dtype = (tw_bundle_dtype)7, .rank = 0, .data = v};
    expect_refused(t, 2, "dtype 7");
}

static void test_state_text_escapes(void **state)
{
    (void)state;
    char *s = tw_bundle_state_text("model.ckpt-5");
    assert_string_equal(s, "model_checkpoint_path: \"model.ckpt-5\"\nall_model_checkpoint_paths: \"model.ckpt-5\"\n");
    free(s);
    s = tw_bundle_state_text("a\"b\\c");
    assert_string_equal(s, "model_checkpoint_path: \"a\\\"b\\\\c\"\nall_model_checkpoint_paths: \"a\\\"b\\\\c\"\n");
    free(s);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*len + 1);
    assert_int_equal(fread(p, 1, *len, f), *len);
    fclose(f);
    return p;
}

static void assert_file_is(const char *path, const void *data, size_t len)
{
    size_t n;
    uint8_t *p = slurp(path, &n);
    assert_int_equal(n, len);
    assert_memory_equal(p, data, len);
    free(p);
}

static void test_write_files(void **state)
{
    (void)state;
    const char *tmp = getenv("TW_TEST_TMP") ? getenv("TW_TEST_TMP") : "/tmp";
    char dir[512], prefix[600], path[700];
    snprintf(dir, sizeof dir, "%s/tf_bundle.%d", tmp, (int)getpid());
    mkdir(tmp, 0755);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(prefix, sizeof prefix, "%s/model.ckpt-7", dir);
    static fixture f;
    make(&f);
    tw_bundle_bytes b;
    tw_error err;
    assert_int_equal(tw_bundle_build(f.t, T, &b, &err), TW_OK);
    assert_int_equal(tw_bundle_write(prefix, &b, &err), TW_OK);
    snprintf(path, sizeof path, "%s.index", prefix);
    assert_file_is(path, b.index, b.index_len);
    snprintf(path, sizeof path, "%s.data-00000-of-00001", prefix);
    assert_file_is(path, b.data, b.data_len);
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    char *text = tw_bundle_state_text("model.ckpt-7");
    assert_file_is(path, text, strlen(text));
    free(text);
    snprintf(path, sizeof path, "%s/", dir);
    assert_int_equal(tw_bundle_write(path, &b, &err), TW_ERR_INVALID); /* a folder, not a prefix */
    tw_bundle_bytes_free(&b);
}

/* ---- tar ---- */

static unsigned long octal(const uint8_t *p, size_t n)
{
    char buf[16] = {0};
    memcpy(buf, p, n);
    return strtoul(buf, NULL, 8);
}

static void test_tar_headers(void **state)
{
    (void)state;
    tw_tar t = {0};
    tw_error err;
    uint8_t data[700];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)i;
    assert_int_equal(tw_tar_add(&t, "a.index", data, sizeof data, 1700000000, &err), TW_OK);
    assert_int_equal(tw_tar_add(&t, "checkpoint", "", 0, 0, &err), TW_OK);
    assert_int_equal(tw_tar_finish(&t, &err), TW_OK);
    assert_int_equal(t.len, 512 + 1024 + 512 + 1024);
    const uint8_t *h = t.bytes;
    assert_string_equal((const char *)h, "a.index");
    assert_int_equal(octal(h + 124, 12), sizeof data);
    assert_int_equal(octal(h + 136, 12), 1700000000);
    assert_int_equal(h[156], '0');
    assert_memory_equal(h + 257, "ustar\0" "00", 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += i >= 148 && i < 156 ? ' ' : h[i];
    assert_int_equal(octal(h + 148, 8), sum);
    assert_memory_equal(h + 512, data, sizeof data);
    for (size_t i = 512 + sizeof data; i < 1536; i++)
        assert_int_equal(t.bytes[i], 0);
    assert_string_equal((const char *)t.bytes + 1536, "checkpoint");
    for (size_t i = 2048; i < t.len; i++)
        assert_int_equal(t.bytes[i], 0);
    assert_int_equal(tw_tar_add(&t, "../x", data, 1, 0, &err), TW_ERR_INVALID);
    assert_int_equal(tw_tar_add(&t, "/x", data, 1, 0, &err), TW_ERR_INVALID);
    assert_int_equal(tw_tar_add(&t, "", data, 1, 0, &err), TW_ERR_INVALID);
    tw_tar_free(&t);
    assert_null(t.bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_order_does_not_matter),
        cmocka_unit_test(test_empty_bundle_has_only_the_header),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_state_text_escapes),
        cmocka_unit_test(test_write_files),
        cmocka_unit_test(test_tar_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
