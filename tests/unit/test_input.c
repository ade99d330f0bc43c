/* test_input.c — the input pipeline: exact decoded values and scaling, float-list images and
 * labels; the shuffle (a permutation per epoch, a function of seed and epoch), repeat, batches
 * across epoch boundaries; tell/seek reproducing the following batches in memory and streaming,
 * with and without the prefetch thread; every decode error naming the file and the record offset;
 * one-pass evaluation; GZIP and ZLIB input. Files are written here with tw_tfrecord_writer and
 * tw_example_builder. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "example.h"
#include "input.h"
#include "tfrecord.h"

enum { CLASSES = 10, MAX_BATCHES = 64, MAX_BATCH = 16, E = 12 };

typedef enum { IMG_BYTES, IMG_FLOATS, IMG_INT64, IMG_NONE, IMG_GARBAGE } img_kind;
typedef enum { LAB_INT, LAB_FLOAT, LAB_NONE } lab_kind;

/* What record i holds; a tweak changes it to make one bad record. */
typedef struct {
    img_kind img;
    size_t len;     /* values (bytes or floats) in the image feature */
    lab_kind lab;
    int64_t label;
} rec_spec;

typedef void (*tweak_fn)(int i, rec_spec *r);

/* Record i's values: pixel j of a bytes image, value j of a float image, its float label. */
static uint8_t pixel(int i, size_t j) { return (uint8_t)(i * 31 + (int)j * 7); }
static float fvalue(int i, size_t j) { return (float)i + (float)j * 0.25f; }
static float flabel(int i) { return (float)i * 0.5f; }

static void make_path(char *buf, size_t n, const char *name)
{
    const char *t = tw_test_tmp();
    snprintf(buf, n, "%s/input_%s.tfrecord", t, name);
}

/* Adds record i's features to b. The value arrays must live until serialize. */
static void add_features(tw_example_builder *b, const rec_spec *r, const uint8_t *bytes,
                         const float *floats, const int64_t *ints, const float *fl)
{
    const int64_t size = (int64_t)r->len;
    assert_int_equal(tw_example_add_int64s(b, "size", &size, 1, NULL), TW_OK);
    if (r->img == IMG_BYTES)
        assert_int_equal(tw_example_add_bytes1(b, "image_raw", bytes, r->len, NULL), TW_OK);
    if (r->img == IMG_FLOATS)
        assert_int_equal(tw_example_add_floats(b, "image_raw", floats, r->len, NULL), TW_OK);
    if (r->img == IMG_INT64)
        assert_int_equal(tw_example_add_int64s(b, "image_raw", ints, r->len, NULL), TW_OK);
    if (r->lab == LAB_INT)
        assert_int_equal(tw_example_add_int64s(b, "label", &r->label, 1, NULL), TW_OK);
    if (r->lab == LAB_FLOAT)
        assert_int_equal(tw_example_add_floats(b, "label", fl, 1, NULL), TW_OK);
}

/* Writes n Examples of E values to path; offsets (may be NULL) gets each record's byte offset in
 * the uncompressed stream. */
static void write_file(const char *path, tw_compression c, int n, img_kind img, lab_kind lab,
                       tweak_fn tweak, int64_t *offsets)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    tw_tfrecord_writer *w;
    tw_example_builder *b;
    assert_int_equal(tw_tfrecord_writer_create(fd, c, path, &w, NULL), TW_OK);
    assert_int_equal(tw_example_builder_create(&b, NULL), TW_OK);
    uint8_t bytes[2 * E];
    float floats[2 * E];
    int64_t ints[2 * E];
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        rec_spec r = {img, E, lab, i % CLASSES};
        if (tweak)
            tweak(i, &r);
        for (size_t j = 0; j < r.len; j++) {
            bytes[j] = pixel(i, j);
            floats[j] = fvalue(i, j);
            ints[j] = pixel(i, j);
        }
        const float fl = flabel(i);
        tw_example_builder_reset(b);
        add_features(b, &r, bytes, floats, ints, &fl);
        const uint8_t *data = bytes;
        size_t len = 5;
        if (r.img != IMG_GARBAGE)
            assert_int_equal(tw_example_serialize(b, &data, &len, NULL), TW_OK);
        else
            memset(bytes, 0xff, len);
        assert_int_equal(tw_tfrecord_write(w, data, len, NULL), TW_OK);
        if (offsets)
            offsets[i] = at;
        at += (int64_t)(len + TW_TFRECORD_HEADER_BYTES + TW_TFRECORD_FOOTER_BYTES);
    }
    assert_int_equal(tw_tfrecord_writer_finish(w, NULL), TW_OK);
    tw_tfrecord_writer_destroy(w);
    tw_example_builder_destroy(b);
    assert_int_equal(close(fd), 0);
}

/* Options for path: E values, 10 classes, file order, no thread, in memory. */
static tw_input_options options(const char *path)
{
    tw_input_options o;
    tw_input_options_default(&o);
    o.path = path;
    o.example_size = E;
    o.classes = CLASSES;
    o.shuffle = 0;
    o.prefetch_batches = 0;
    return o;
}

/* Forces streaming through a buffer of `buffer` examples. */
static void streaming(tw_input_options *o, int buffer)
{
    o->max_memory_bytes = 1;
    o->shuffle_buffer = buffer;
}

static tw_input *open_ok(const tw_input_options *o)
{
    tw_input *in;
    tw_error err;
    tw_status s = tw_input_open(o, &in, &err);
    if (s != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fail_msg("open: %s", msg);
    }
    return in;
}

/* Batches as the caller got them. */
typedef struct {
    float x[MAX_BATCHES][MAX_BATCH * E];
    int32_t y[MAX_BATCHES][MAX_BATCH];
    tw_input_position after[MAX_BATCHES];
} run;

/* Takes `count` batches of `batch` into r starting at batch `first`. */
static void take(tw_input *in, int batch, int first, int count, run *r)
{
    for (int k = first; k < first + count; k++) {
        tw_error err;
        tw_status s = tw_input_next(in, batch, r->x[k], r->y[k], &err);
        if (s != TW_OK)
            fail_msg("next: %s", err.message);
        r->after[k] = tw_input_tell(in);
    }
}

/* Example ids of a float-image batch (value 0 of record i is i). */
static void ids(const float *x, int n, int *out)
{
    for (int k = 0; k < n; k++)
        out[k] = (int)x[(size_t)k * E];
}

/* The ids of `total` examples taken in batches of `batch`. */
static void take_ids(tw_input *in, int batch, int total, int *out)
{
    float x[MAX_BATCH * E];
    int32_t y[MAX_BATCH];
    for (int got = 0; got < total; got += batch) {
        assert_int_equal(tw_input_next(in, batch, x, y, NULL), TW_OK);
        ids(x, batch < total - got ? batch : total - got, out + got);
    }
}

static void assert_permutation(const int *id, int n)
{
    char seen[256] = {0};
    for (int k = 0; k < n; k++) {
        assert_in_range(id[k], 0, n - 1);
        assert_int_equal(seen[id[k]], 0);
        seen[id[k]] = 1;
    }
}

/* --------------------------------------------------------------------------------------- values */

static void test_bytes_values_and_scale(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "bytes");
    write_file(path, TW_COMPRESSION_NONE, 5, IMG_BYTES, LAB_INT, NULL, NULL);
    const float scales[] = {1.0f / 255.0f, 2.0f};
    for (int s = 0; s < 2; s++) {
        tw_input_options o = options(path);
        if (s == 1)
            o.scale = scales[1];
        tw_input *in = open_ok(&o);
        assert_true(tw_input_in_memory(in));
        assert_int_equal(tw_input_count(in), 5);
        float x[5 * E];
        int32_t y[5];
        assert_int_equal(tw_input_next(in, 5, x, y, NULL), TW_OK);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(y[i], i % CLASSES);
            for (size_t j = 0; j < E; j++)
                assert_true(x[i * E + j] == (float)pixel(i, j) * scales[s]);
        }
        tw_input_close(in);
    }
}

static void test_float_images_and_labels(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "floats");
    write_file(path, TW_COMPRESSION_NONE, 6, IMG_FLOATS, LAB_FLOAT, NULL, NULL);
    tw_input_options o = options(path);
    o.float_labels = 1;
    o.classes = 0;
    o.scale = 0.5f; /* not applied to float lists */
    tw_input *in = open_ok(&o);
    float x[6 * E], y[6];
    assert_int_equal(tw_input_next(in, 6, x, y, NULL), TW_OK);
    for (int i = 0; i < 6; i++) {
        assert_true(y[i] == flabel(i));
        for (size_t j = 0; j < E; j++)
            assert_true(x[i * E + j] == fvalue(i, j));
    }
    tw_input_close(in);

    make_path(path, sizeof path, "float_int_labels");
    write_file(path, TW_COMPRESSION_NONE, 6, IMG_FLOATS, LAB_INT, NULL, NULL);
    in = open_ok(&o);
    assert_int_equal(tw_input_next(in, 6, x, y, NULL), TW_OK);
    for (int i = 0; i < 6; i++)
        assert_true(y[i] == (float)(i % CLASSES));
    tw_input_close(in);
}

static void test_compressed_input(void **state)
{
    (void)state;
    const tw_compression kinds[] = {TW_COMPRESSION_GZIP, TW_COMPRESSION_ZLIB};
    for (int k = 0; k < 2; k++) {
        char path[600];
        make_path(path, sizeof path, k ? "zlib" : "gzip");
        write_file(path, kinds[k], 30, IMG_BYTES, LAB_INT, NULL, NULL);
        for (int mode = 0; mode < 2; mode++) {
            tw_input_options o = options(path);
            if (mode)
                streaming(&o, 4);
            tw_input *in = open_ok(&o);
            assert_int_equal(tw_input_in_memory(in), !mode);
            float x[10 * E];
            int32_t y[10];
            for (int b = 0; b < 3; b++) {
                assert_int_equal(tw_input_next(in, 10, x, y, NULL), TW_OK);
                for (int i = 0; i < 10; i++) {
                    assert_int_equal(y[i], (b * 10 + i) % CLASSES);
                    assert_true(x[i * E + 5] == (float)pixel(b * 10 + i, 5) * (1.0f / 255.0f));
                }
            }
            tw_input_close(in);
        }
    }
}

/* --------------------------------------------------------------------- repeat, shuffle, batches */

static void test_repeat_across_epochs(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "repeat");
    write_file(path, TW_COMPRESSION_NONE, 10, IMG_FLOATS, LAB_INT, NULL, NULL);
    for (int variant = 0; variant < 4; variant++) {
        tw_input_options o = options(path);
        if (variant & 1)
            streaming(&o, 4);
        o.prefetch_batches = variant & 2 ? 2 : 0;
        o.prefetch_min_bytes = 0; /* the thread even for these small batches */
        tw_input *in = open_ok(&o);
        assert_int_equal(tw_input_count(in), variant & 1 ? 0 : 10);
        int id[24];
        take_ids(in, 4, 12, id);
        tw_input_position p = tw_input_tell(in);
        assert_int_equal(p.epoch, 1);
        assert_int_equal(p.consumed, 2);
        assert_int_equal(tw_input_count(in), 10);
        take_ids(in, 4, 8, id + 12);
        for (int k = 0; k < 20; k++)
            assert_int_equal(id[k], k % 10);
        p = tw_input_tell(in);
        assert_int_equal(p.epoch, 2);
        assert_int_equal(p.consumed, 0);
        tw_input_close(in);
    }
}

/* The first 4 epochs (in batches of 7) of a 50-example file under seed, in memory or streaming. */
static void shuffled_ids(const char *path, int stream, uint64_t seed, int prefetch, int *id)
{
    tw_input_options o = options(path);
    o.shuffle = 1;
    o.seed = seed;
    o.prefetch_batches = prefetch;
    o.prefetch_min_bytes = 0;
    if (stream)
        streaming(&o, 16);
    tw_input *in = open_ok(&o);
    take_ids(in, 7, 203, id);
    tw_input_close(in);
}

static void test_shuffle_is_a_seeded_permutation_per_epoch(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "shuffle");
    write_file(path, TW_COMPRESSION_NONE, 50, IMG_FLOATS, LAB_INT, NULL, NULL);
    for (int stream = 0; stream < 2; stream++) {
        int a[203], b[203], c[203];
        shuffled_ids(path, stream, 7, 0, a);
        shuffled_ids(path, stream, 7, 2, b);
        shuffled_ids(path, stream, 8, 0, c);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_not_equal(a, c, sizeof a);
        int in_order = 1;
        for (int e = 0; e < 4; e++) {
            assert_permutation(a + 50 * e, 50);
            assert_permutation(c + 50 * e, 50);
            for (int k = 0; k < 50; k++)
                in_order &= a[50 * e + k] == k;
        }
        assert_false(in_order);
        for (int e = 1; e < 4; e++)
            assert_memory_not_equal(a, a + 50 * e, 50 * sizeof *a);
        if (stream)
            assert_in_range(a[0], 0, 15); /* only the first 16 records are in the buffer */
    }
}

/* A world of 3 processes of 2 towers of 2 (a world batch of 12, over a file of 50: epochs end inside
 * batches): each process's rows (tw_input_next_rows) are the rows of its towers in one reader's whole
 * batches, shuffled or not, in memory or streamed, with or without the prefetch thread; the position
 * after each batch is the whole reader's; a slice outside the batch is refused. */
static void test_rows_of_a_world_batch(void **state)
{
    (void)state;
    enum { PROCS = 3, ROWS = 4, WORLD = PROCS * ROWS, STEPS = 12 };
    char path[600];
    make_path(path, sizeof path, "slices");
    write_file(path, TW_COMPRESSION_NONE, 50, IMG_FLOATS, LAB_INT, NULL, NULL);
    for (int mode = 0; mode < 8; mode++) {
        tw_input_options o = options(path);
        o.shuffle = mode & 1;
        o.seed = 11;
        o.prefetch_batches = mode & 2 ? 2 : 0;
        o.prefetch_min_bytes = 0;
        if (mode & 4)
            streaming(&o, 16);
        tw_input *whole = open_ok(&o), *rank[PROCS];
        for (int r = 0; r < PROCS; r++)
            rank[r] = open_ok(&o);
        for (int step = 0; step < STEPS; step++) {
            float x[WORLD * E], xr[ROWS * E];
            int32_t y[WORLD], yr[ROWS];
            assert_int_equal(tw_input_next(whole, WORLD, x, y, NULL), TW_OK);
            for (int r = 0; r < PROCS; r++) {
                assert_int_equal(tw_input_next_rows(rank[r], WORLD, r * ROWS, ROWS, xr, yr, NULL), TW_OK);
                assert_memory_equal(xr, x + r * ROWS * E, sizeof xr);
                assert_memory_equal(yr, y + r * ROWS, sizeof yr);
                tw_input_position a = tw_input_tell(whole), b = tw_input_tell(rank[r]);
                assert_true(a.epoch == b.epoch && a.consumed == b.consumed);
            }
        }
        tw_error err;
        float xr[ROWS * E];
        int32_t yr[ROWS];
        assert_int_equal(tw_input_next_rows(rank[0], WORLD, WORLD - 2, ROWS, xr, yr, &err), TW_ERR_INVALID);
        assert_non_null(strstr(err.message, "not inside a batch of 12"));
        assert_int_equal(tw_input_next_rows(rank[0], WORLD, -1, ROWS, xr, yr, &err), TW_ERR_INVALID);
        assert_int_equal(tw_input_next_rows(rank[0], WORLD, 0, 0, xr, yr, &err), TW_ERR_INVALID);
        tw_input_close(whole);
        for (int r = 0; r < PROCS; r++)
            tw_input_close(rank[r]);
    }
}

static void test_batch_size_change_with_prefetch(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "sizes");
    write_file(path, TW_COMPRESSION_NONE, 9, IMG_FLOATS, LAB_INT, NULL, NULL);
    for (int stream = 0; stream < 2; stream++) {
        int want[30], got[30];
        for (int prefetch = 0; prefetch < 2; prefetch++) {
            tw_input_options o = options(path);
            o.shuffle = 1;
            o.prefetch_batches = prefetch ? 3 : 0;
            o.prefetch_min_bytes = 0;
            if (stream)
                streaming(&o, 5);
            tw_input *in = open_ok(&o);
            int *id = prefetch ? got : want;
            take_ids(in, 4, 8, id);
            take_ids(in, 3, 9, id + 8);
            take_ids(in, 13, 13, id + 17);
            tw_input_close(in);
        }
        assert_memory_equal(want, got, sizeof want);
        assert_permutation(want, 9);
        assert_permutation(want + 9, 9);
        assert_permutation(want + 18, 9);
    }
}

/* ------------------------------------------------------------------------------------ tell/seek */

/* Options of variant v: bit 0 streaming, bit 1 prefetch thread. Shuffled, 37 examples. */
static tw_input_options seek_options(const char *path, int v)
{
    tw_input_options o = options(path);
    o.shuffle = 1;
    o.seed = 42;
    o.prefetch_batches = v & 2 ? 3 : 0;
    if (v & 1)
        streaming(&o, 8);
    return o;
}

static void assert_same_batches(const run *a, const run *b, int first, int end, int batch)
{
    for (int k = first; k < end; k++) {
        assert_memory_equal(a->x[k], b->x[k], (size_t)batch * E * sizeof(float));
        assert_memory_equal(a->y[k], b->y[k], (size_t)batch * sizeof(int32_t));
        assert_int_equal(a->after[k].epoch, b->after[k].epoch);
        assert_int_equal(a->after[k].consumed, b->after[k].consumed);
    }
}

static void test_tell_seek_reproduces_batches(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "seek");
    write_file(path, TW_COMPRESSION_NONE, 37, IMG_BYTES, LAB_INT, NULL, NULL);
    static run ref, again;
    const int batch = 5, n = 30;
    const int resume_at[] = {1, 3, 7, 8, 15, 29};
    for (int v = 0; v < 4; v++) {
        tw_input_options o = seek_options(path, v);
        tw_input *in = open_ok(&o);
        take(in, batch, 0, n, &ref);
        if (v & 2) { /* the thread runs ahead; tell reports what the caller received */
            assert_int_equal(ref.after[0].epoch, 0);
            assert_int_equal(ref.after[0].consumed, 5);
        }
        for (size_t r = 0; r < sizeof resume_at / sizeof *resume_at; r++) {
            const int k = resume_at[r];
            tw_input *fresh = open_ok(&o);
            assert_int_equal(tw_input_seek(fresh, &ref.after[k - 1], NULL), TW_OK);
            take(fresh, batch, k, n - k, &again);
            assert_same_batches(&ref, &again, k, n, batch);
            tw_input_close(fresh);
            assert_int_equal(tw_input_seek(in, &ref.after[k - 1], NULL), TW_OK);
            assert_int_equal(tw_input_tell(in).consumed, ref.after[k - 1].consumed);
            take(in, batch, k, n - k, &again);
            assert_same_batches(&ref, &again, k, n, batch);
        }
        tw_input_close(in);
    }
}

static void test_seek_past_the_end(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "seek_end");
    write_file(path, TW_COMPRESSION_NONE, 10, IMG_FLOATS, LAB_INT, NULL, NULL);
    for (int v = 0; v < 4; v++) {
        tw_input_options o = seek_options(path, v);
        tw_input *in = open_ok(&o);
        const tw_input_position bad = {3, 10};
        tw_error err;
        assert_int_equal(tw_input_seek(in, &bad, &err), TW_ERR_INVALID);
        assert_non_null(strstr(err.message, "past the end"));
        assert_int_equal(tw_input_tell(in).epoch, 0);
        assert_int_equal(tw_input_tell(in).consumed, 0);
        int id[10];
        take_ids(in, 5, 10, id);
        assert_permutation(id, 10);
        tw_input_close(in);
    }
}

/* ------------------------------------------------------------------------------------- one pass */

static void test_eval_pass_in_order(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "eval");
    write_file(path, TW_COMPRESSION_NONE, 10, IMG_FLOATS, LAB_INT, NULL, NULL);
    for (int v = 0; v < 4; v++) {
        tw_input_options o = options(path);
        o.prefetch_batches = v & 2 ? 2 : 0;
        if (v & 1)
            streaming(&o, 3);
        tw_input *in = open_ok(&o);
        for (int pass = 0; pass < 2; pass++) {
            const int sizes[] = {4, 4, 2, 0, 0};
            int seen = 0;
            for (int b = 0; b < 5; b++) {
                float x[4 * E];
                int32_t y[4];
                int got = -1, id[4];
                assert_int_equal(tw_input_next_once(in, 4, x, y, &got, NULL), TW_OK);
                assert_int_equal(got, sizes[b]);
                ids(x, got, id);
                for (int k = 0; k < got; k++, seen++) {
                    assert_int_equal(id[k], seen);
                    assert_int_equal(y[k], seen % CLASSES);
                }
            }
            assert_int_equal(seen, 10);
            assert_int_equal(tw_input_rewind(in, NULL), TW_OK);
        }
        int id[6];
        take_ids(in, 3, 6, id); /* next after a pass and a rewind starts at the beginning */
        for (int k = 0; k < 6; k++)
            assert_int_equal(id[k], k);
        tw_input_close(in);
    }
}

static void test_eval_pass_on_a_batch_boundary(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "eval8");
    write_file(path, TW_COMPRESSION_NONE, 8, IMG_FLOATS, LAB_INT, NULL, NULL);
    for (int v = 0; v < 2; v++) {
        tw_input_options o = options(path);
        o.prefetch_batches = v ? 2 : 0;
        tw_input *in = open_ok(&o);
        float x[4 * E];
        int32_t y[4];
        int got;
        const int sizes[] = {4, 4, 0};
        for (int b = 0; b < 3; b++) {
            assert_int_equal(tw_input_next_once(in, 4, x, y, &got, NULL), TW_OK);
            assert_int_equal(got, sizes[b]);
        }
        tw_input_close(in);
    }
}

/* --------------------------------------------------------------------------------------- errors */

enum { BAD = 5 };

static void no_image(int i, rec_spec *r) { r->img = i == BAD ? IMG_NONE : r->img; }
static void no_label(int i, rec_spec *r) { r->lab = i == BAD ? LAB_NONE : r->lab; }
static void short_image(int i, rec_spec *r) { r->len -= i == BAD; }
static void long_image(int i, rec_spec *r) { r->len += i == BAD; }
static void label_12(int i, rec_spec *r) { r->label = i == BAD ? 12 : r->label; }
static void label_neg(int i, rec_spec *r) { r->label = i == BAD ? -1 : r->label; }
static void float_label(int i, rec_spec *r) { r->lab = i == BAD ? LAB_FLOAT : r->lab; }
static void int_image(int i, rec_spec *r) { r->img = i == BAD ? IMG_INT64 : r->img; }
static void garbage(int i, rec_spec *r) { r->img = i == BAD ? IMG_GARBAGE : r->img; }
static void float_image(int i, rec_spec *r) { r->img = i == BAD ? IMG_FLOATS : r->img; }
static void bytes_image(int i, rec_spec *r) { r->img = i == BAD ? IMG_BYTES : r->img; }

typedef struct {
    const char *name;
    img_kind img;
    tweak_fn tweak;
    tw_status status;
    const char *message;
} bad_case;

static const bad_case BAD_CASES[] = {
    {"no_image", IMG_BYTES, no_image, TW_ERR_INVALID, "record 5 has no feature 'image_raw'"},
    {"no_label", IMG_BYTES, no_label, TW_ERR_INVALID, "record 5 has no feature 'label'"},
    {"short", IMG_BYTES, short_image, TW_ERR_INVALID,
     "holds 11 bytes in 1 items; expected one item of 12 bytes (uint8) or 48 (float32)"},
    {"long_floats", IMG_FLOATS, long_image, TW_ERR_INVALID, "record 5 has 13 floats; expected 12"},
    {"label_12", IMG_BYTES, label_12, TW_ERR_INVALID, "label 12 at record 5 is outside [0, 10)"},
    {"label_neg", IMG_BYTES, label_neg, TW_ERR_INVALID, "label -1 at record 5 is outside [0, 10)"},
    {"float_label", IMG_BYTES, float_label, TW_ERR_INVALID,
     "record 5 is a float; expected an int64"},
    {"int_image", IMG_BYTES, int_image, TW_ERR_INVALID, "record 5 holds int64 values"},
    {"garbage", IMG_BYTES, garbage, TW_ERR_CORRUPT, "not a valid tf.train.Example"},
    /* rows are held as the first record's format: a file must not mix uint8 and float rows */
    {"float_in_uint8", IMG_BYTES, float_image, TW_ERR_INVALID,
     "record 5 holds float32 values; the file's first record holds uint8 bytes"},
    {"uint8_in_floats", IMG_FLOATS, bytes_image, TW_ERR_INVALID,
     "record 5 holds uint8 bytes; the file's first record holds float32 values"},
};

static void expect_error(const tw_error *err, tw_status s, tw_status want, const char *path,
                         int64_t offset, const char *message)
{
    assert_int_equal(s, want);
    assert_int_equal(err->status, want);
    assert_string_equal(err->file, path);
    assert_int_equal(err->offset, offset);
    if (!strstr(err->message, message))
        fail_msg("message '%s' lacks '%s'", err->message, message);
}

/* In memory the bad record fails the open. */
static void test_decode_errors_at_open(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof BAD_CASES / sizeof *BAD_CASES; c++) {
        const bad_case *bc = &BAD_CASES[c];
        char path[600];
        int64_t offsets[8];
        make_path(path, sizeof path, bc->name);
        write_file(path, TW_COMPRESSION_NONE, 8, bc->img, LAB_INT, bc->tweak, offsets);
        tw_input_options o = options(path);
        tw_input *in = (tw_input *)1;
        tw_error err;
        tw_status s = tw_input_open(&o, &in, &err);
        assert_null(in);
        expect_error(&err, s, bc->status, path, offsets[BAD], bc->message);
    }
}

/* Streaming, the bad record fails the batch that reaches it, and keeps failing until a seek. */
static void test_decode_errors_while_streaming(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof BAD_CASES / sizeof *BAD_CASES; c++) {
        const bad_case *bc = &BAD_CASES[c];
        char path[600];
        int64_t offsets[8];
        make_path(path, sizeof path, bc->name);
        write_file(path, TW_COMPRESSION_NONE, 8, bc->img, LAB_INT, bc->tweak, offsets);
        for (int prefetch = 0; prefetch < 2; prefetch++) {
            tw_input_options o = options(path);
            streaming(&o, 2);
            o.prefetch_batches = prefetch;
            o.prefetch_min_bytes = 0;
            tw_input *in = open_ok(&o);
            float x[2 * E];
            int32_t y[2];
            tw_error err;
            assert_int_equal(tw_input_next(in, 2, x, y, NULL), TW_OK);
            assert_int_equal(tw_input_next(in, 2, x, y, NULL), TW_OK);
            for (int again = 0; again < 2; again++) {
                tw_status s = tw_input_next(in, 2, x, y, &err);
                expect_error(&err, s, bc->status, path, offsets[BAD], bc->message);
            }
            assert_int_equal(tw_input_tell(in).consumed, 4);
            assert_int_equal(tw_input_rewind(in, NULL), TW_OK);
            assert_int_equal(tw_input_next(in, 2, x, y, NULL), TW_OK);
            assert_int_equal(y[1], 1);
            tw_input_close(in);
        }
    }
}

/* Rewrites one byte of a file. */
static void poke(const char *path, int64_t at, uint8_t value)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)at, SEEK_SET), 0);
    assert_int_equal(fputc(value, f), value);
    assert_int_equal(fclose(f), 0);
}

static void test_corrupt_and_truncated_files(void **state)
{
    (void)state;
    char path[600];
    int64_t offsets[8];
    make_path(path, sizeof path, "corrupt");
    write_file(path, TW_COMPRESSION_NONE, 8, IMG_BYTES, LAB_INT, NULL, offsets);
    poke(path, offsets[BAD] + TW_TFRECORD_HEADER_BYTES + 3, 0xee);
    tw_input_options o = options(path);
    tw_input *in;
    tw_error err;
    tw_status s = tw_input_open(&o, &in, &err);
    expect_error(&err, s, TW_ERR_CORRUPT, path, offsets[BAD], "CRC");

    make_path(path, sizeof path, "truncated");
    write_file(path, TW_COMPRESSION_NONE, 8, IMG_BYTES, LAB_INT, NULL, offsets);
    assert_int_equal(truncate(path, offsets[7] + 20), 0);
    o = options(path);
    s = tw_input_open(&o, &in, &err);
    expect_error(&err, s, TW_ERR_TRUNCATED, path, offsets[7], "truncated");

    streaming(&o, 3);
    o.prefetch_batches = 2;
    o.prefetch_min_bytes = 0;
    in = open_ok(&o);
    float x[4 * E];
    int32_t y[4];
    assert_int_equal(tw_input_next(in, 4, x, y, NULL), TW_OK);
    s = tw_input_next(in, 4, x, y, &err);
    expect_error(&err, s, TW_ERR_TRUNCATED, path, offsets[7], "truncated");
    tw_input_close(in);
}

static void test_empty_and_missing_files(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "empty");
    write_file(path, TW_COMPRESSION_NONE, 0, IMG_BYTES, LAB_INT, NULL, NULL);
    for (int stream = 0; stream < 2; stream++) {
        tw_input_options o = options(path);
        if (stream)
            streaming(&o, 3);
        tw_input *in;
        tw_error err;
        assert_int_equal(tw_input_open(&o, &in, &err), TW_ERR_INVALID);
        assert_non_null(strstr(err.message, "no records"));
        assert_string_equal(err.file, path);
    }
    make_path(path, sizeof path, "does_not_exist");
    unlink(path);
    tw_input_options o = options(path);
    tw_input *in;
    tw_error err;
    assert_int_equal(tw_input_open(&o, &in, &err), TW_ERR_IO);
}

static void test_invalid_options(void **state)
{
    (void)state;
    char path[600];
    make_path(path, sizeof path, "opts");
    write_file(path, TW_COMPRESSION_NONE, 3, IMG_BYTES, LAB_INT, NULL, NULL);
    for (int c = 0; c < 6; c++) {
        tw_input_options o = options(path);
        const char *key[] = {"path", "example_size", "classes", "shuffle_buffer", "prefetch",
                             "image_feature"};
        if (c == 0)
            o.path = NULL;
        if (c == 1)
            o.example_size = 0;
        if (c == 2)
            o.classes = 0;
        if (c == 3)
            o.shuffle_buffer = 0;
        if (c == 4)
            o.prefetch_batches = -1;
        if (c == 5)
            o.image_feature = "";
        tw_input *in;
        tw_error err;
        assert_int_equal(tw_input_open(&o, &in, &err), TW_ERR_INVALID);
        assert_non_null(strstr(err.message, key[c]));
    }
    tw_input_options o = options(path);
    tw_input *in = open_ok(&o);
    float x[E];
    int32_t y[1];
    assert_int_equal(tw_input_next(in, 0, x, y, NULL), TW_ERR_INVALID);
    assert_int_equal(tw_input_next(in, 1, x, y, NULL), TW_OK);
    tw_input_close(in);
}

/* ------------------------------------------------------------------------------------ lifetimes */

static void test_defaults_and_close(void **state)
{
    (void)state;
    tw_input_options o;
    tw_input_options_default(&o);
    assert_string_equal(o.image_feature, "image_raw");
    assert_string_equal(o.label_feature, "label");
    assert_true(o.scale == 1.0f / 255.0f);
    assert_int_equal(o.shuffle, 1);
    assert_int_equal(o.max_memory_bytes, 2ull << 30);
    assert_int_equal(o.shuffle_buffer, 10000);
    assert_int_equal(o.prefetch_batches, 2);
    tw_input_close(NULL);

    char path[600];
    make_path(path, sizeof path, "close");
    write_file(path, TW_COMPRESSION_NONE, 20, IMG_BYTES, LAB_INT, NULL, NULL);
    for (int stream = 0; stream < 2; stream++) {
        o = options(path);
        o.prefetch_batches = 4;
        if (stream)
            streaming(&o, 4);
        tw_input_close(open_ok(&o)); /* no thread was ever started */
        tw_input *in = open_ok(&o);
        float x[3 * E];
        int32_t y[3];
        assert_int_equal(tw_input_next(in, 3, x, y, NULL), TW_OK);
        const struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL); /* the thread fills its ring and waits */
        tw_input_close(in);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_values_and_scale),
        cmocka_unit_test(test_float_images_and_labels),
        cmocka_unit_test(test_compressed_input),
        cmocka_unit_test(test_repeat_across_epochs),
        cmocka_unit_test(test_shuffle_is_a_seeded_permutation_per_epoch),
        cmocka_unit_test(test_rows_of_a_world_batch),
        cmocka_unit_test(test_batch_size_change_with_prefetch),
        cmocka_unit_test(test_tell_seek_reproduces_batches),
        cmocka_unit_test(test_seek_past_the_end),
        cmocka_unit_test(test_eval_pass_in_order),
        cmocka_unit_test(test_eval_pass_on_a_batch_boundary),
        cmocka_unit_test(test_decode_errors_at_open),
        cmocka_unit_test(test_decode_errors_while_streaming),
        cmocka_unit_test(test_corrupt_and_truncated_files),
        cmocka_unit_test(test_empty_and_missing_files),
        cmocka_unit_test(test_invalid_options),
        cmocka_unit_test(test_defaults_and_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
