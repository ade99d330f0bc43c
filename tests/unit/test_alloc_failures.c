/* test_alloc_failures.c — SQLite's out-of-memory loop over the parsers of untrusted input: the file formats
 * of eventlog/ (CSV, NumPy, IDX, safetensors, TFRecord plain and gzip, tf.train.Example, the scalars of a
 * run's event files read incrementally, PNG and JPEG images, a list of class names) and the upload's
 * multipart/form-data parser (server/multipart.c). For every N the Nth allocation of ours fails (malloc,
 * calloc, realloc, strdup: wrapped at link time by tests/unit/CMakeLists.txt), and the parse must answer
 * TW_ERR_NOMEM, free what it took and leave nothing behind (the ASan build's leak check at exit). The loop
 * ends at the first N the parse no longer reaches, and that run must succeed with the right result. A run
 * that succeeds although an allocation failed is a fallback and goes on (tw_gzfile decodes on the caller's
 * thread when its prefetch thread's buffers cannot be had).
 *
 * The wrap reaches the calls compiled into Tower's code only. libpng and libjpeg (images), protobuf-c
 * (unpacking Examples and Events) and jansson (the scalars' JSON, class names) allocate inside their own
 * shared libraries, unseen; ISA-L inflates gzip in a state that is ours, and is failed here. The GraphDef
 * and HParams modules (graph.h, hparams.h) only write, so they have no case here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h> /* before jpeglib.h, which names FILE */
#include <jpeglib.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#include "convert.h"
#include "csv.h"
#include "events.h"
#include "events_read.h"
#include "example.h"
#include "idx.h"
#include "image.h"
#include "multipart.h"
#include "npy.h"
#include "png_encode.h"
#include "safetensors.h"
#include "tfrecord.h"

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

/* Runs parse with the Nth allocation failing for N = 0, 1, ... until a run makes no Nth allocation; every
 * failure must be TW_ERR_NOMEM and that last run TW_OK. Returns how many allocations the last run made. */
static long oom_loop(parse_fn parse)
{
    for (long n = 0;; n++) {
        fail_at = n;
        seen = 0;
        tw_status s = parse();
        fail_at = -1;
        if (seen <= n) {
            if (s != TW_OK)
                fail_msg("with no allocation failing the parse gave status %d", (int)s);
            return seen;
        }
        if (s != TW_OK && s != TW_ERR_NOMEM)
            fail_msg("allocation %ld failing gave status %d, not TW_ERR_NOMEM", n, (int)s);
    }
}

/* ================================ scratch files ================================ */

static char scratch[512]; /* a folder of the test's own, made by setup */

/* Writes data[n] to path, truncating it or appending. */
static void put_file(const char *path, const void *data, size_t n, int flags)
{
    int fd = open(path, O_WRONLY | O_CREAT | flags, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    close(fd);
}

/* The bytes of path into buf[cap]; returns how many. */
static size_t get_file(const char *path, uint8_t *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, cap);
    close(fd);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* ================================ eventlog: tabular and tensor files ================================ */

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

/* Class names as an upload's form field sends them: one per line, CRLF. */
static tw_status parse_class_names(void)
{
    static const char text[] = "T-shirt\r\nTrouser\r\nPullover\r\n";
    json_t *names;
    tw_error err;
    TW_TRY(tw_convert_class_names_parse(text, sizeof text - 1, &names, &err));
    assert_int_equal(json_array_size(names), 3);
    assert_string_equal(json_string_value(json_array_get(names, 2)), "Pullover");
    json_decref(names);
    return TW_OK;
}

/* ================================ eventlog: TFRecord and Example ================================ */

enum { N_RECORDS = 3, BIG_RECORD = 5000 };
static const size_t RECORD_BYTES[N_RECORDS] = {10, BIG_RECORD, 0}; /* the second outgrows a first buffer */

static uint8_t record_byte(size_t r, size_t i) { return (uint8_t)(r * 31 + i); }

static uint8_t tfrecord[16384]; /* the uncompressed file */
static size_t tfrecord_len;
static char tfrecord_gz[600];   /* the gzip file's path */

static void write_records(const char *path, tw_compression c)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    tw_tfrecord_writer *w;
    tw_error err;
    assert_int_equal(tw_tfrecord_writer_create(fd, c, path, &w, &err), TW_OK);
    uint8_t rec[BIG_RECORD];
    for (size_t r = 0; r < N_RECORDS; r++) {
        for (size_t i = 0; i < RECORD_BYTES[r]; i++)
            rec[i] = record_byte(r, i);
        assert_int_equal(tw_tfrecord_write(w, rec, RECORD_BYTES[r], &err), TW_OK);
    }
    assert_int_equal(tw_tfrecord_writer_finish(w, &err), TW_OK);
    tw_tfrecord_writer_destroy(w);
    close(fd);
}

/* Reads every record of r, checks them and closes r. */
static tw_status read_records(tw_tfrecord_reader *r)
{
    const uint8_t *data;
    size_t len, k = 0;
    tw_error err;
    tw_status s;
    while ((s = tw_tfrecord_read(r, &data, &len, &err)) == TW_OK) {
        assert_true(k < N_RECORDS);
        assert_int_equal(len, RECORD_BYTES[k]);
        for (size_t i = 0; i < len; i++)
            assert_int_equal(data[i], record_byte(k, i));
        k++;
    }
    tw_tfrecord_reader_close(r);
    if (s == TW_END)
        assert_int_equal(k, N_RECORDS);
    return s == TW_END ? TW_OK : s;
}

/* From memory, the compression detected (the stream is opened twice). */
static tw_status parse_tfrecord_mem(void)
{
    tw_tfrecord_reader *r;
    tw_error err;
    TW_TRY(tw_tfrecord_reader_open_mem(tfrecord, tfrecord_len, "t.tfrecord", NULL, &r, &err));
    return read_records(r);
}

/* A gzip file: inflate state, and the prefetch thread's ring or the caller's own buffer. */
static tw_status parse_tfrecord_gzip(void)
{
    tw_tfrecord_reader *r;
    tw_error err;
    TW_TRY(tw_tfrecord_reader_open(tfrecord_gz, NULL, &r, &err));
    return read_records(r);
}

static uint8_t example[1024]; /* a serialized Example */
static size_t example_len;

static void make_example(void)
{
    static const uint8_t image[4] = {0, 64, 128, 255};
    static const int64_t label = 7;
    static const float x[2] = {0.5f, -1.0f};
    tw_example_builder *b;
    tw_error err;
    assert_int_equal(tw_example_builder_create(&b, &err), TW_OK);
    assert_int_equal(tw_example_add_bytes1(b, "image", image, sizeof image, &err), TW_OK);
    assert_int_equal(tw_example_add_int64s(b, "label", &label, 1, &err), TW_OK);
    assert_int_equal(tw_example_add_floats(b, "x", x, 2, &err), TW_OK);
    const uint8_t *data;
    assert_int_equal(tw_example_serialize(b, &data, &example_len, &err), TW_OK);
    assert_true(example_len <= sizeof example);
    memcpy(example, data, example_len);
    tw_example_builder_destroy(b);
}

static tw_status parse_example(void)
{
    tw_example *ex;
    tw_error err;
    TW_TRY(tw_example_parse(example, example_len, "t.tfrecord", 0, &ex, &err));
    tw_feature f;
    assert_int_equal(tw_example_feature_count(ex), 3);
    assert_true(tw_example_find(ex, "label", &f));
    assert_int_equal(f.kind, TW_FEATURE_INT64);
    assert_int_equal(f.int64s[0], 7);
    tw_example_destroy(ex);
    return TW_OK;
}

/* ================================ eventlog: tfevents scalars ================================ */

/* A run's two event files: the first run's, and the resumed run's after it. */
static struct {
    uint8_t bytes[8192];
    size_t len;
    char path[600];
} events[2];

static tw_events_writer *events_open(void)
{
    tw_events_options o;
    tw_events_options_default(&o);
    o.flush_secs = 0;
    tw_events_writer *w;
    tw_error err;
    assert_int_equal(tw_events_create(scratch, &o, &w, &err), TW_OK);
    return w;
}

static void events_close(tw_events_writer *w, int i)
{
    tw_error err;
    snprintf(events[i].path, sizeof events[i].path, "%s", tw_events_path(w));
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    tw_events_destroy(w);
    events[i].len = get_file(events[i].path, events[i].bytes, sizeof events[i].bytes);
}

/* The first run: loss and acc at steps 0..5 and a text summary (not a scalar series). The resumed run: a
 * restart at step 3 and loss 3..5 again (10 + step). */
static void make_events(void)
{
    tw_error err;
    tw_events_writer *w = events_open();
    for (int step = 0; step < 6; step++) {
        assert_int_equal(tw_events_add_scalar(w, "loss", step, (float)step / 2, &err), TW_OK);
        assert_int_equal(tw_events_add_scalar(w, "acc", step, 0.9f, &err), TW_OK);
    }
    assert_int_equal(tw_events_add_text(w, "note", 0, "first run", &err), TW_OK);
    events_close(w, 0);
    w = events_open();
    assert_int_equal(tw_events_add_session_start(w, 3, &err), TW_OK);
    for (int step = 3; step < 6; step++)
        assert_int_equal(tw_events_add_scalar(w, "loss", step, 10.0f + (float)step, &err), TW_OK);
    events_close(w, 1);
}

/* The server's way: an update while the resumed run's file ends inside a record (a torn tail), another
 * after the rest was appended, then the series as JSON. */
static tw_status parse_events(void)
{
    size_t half = events[1].len / 2;
    put_file(events[0].path, events[0].bytes, events[0].len, O_TRUNC);
    put_file(events[1].path, events[1].bytes, half, O_TRUNC);
    tw_events_scalars *t;
    tw_error err;
    TW_TRY(tw_events_scalars_new(3, &t, &err));
    tw_status s = tw_events_scalars_update(t, scratch, NULL, &err);
    if (s == TW_OK) {
        put_file(events[1].path, events[1].bytes + half, events[1].len - half, O_APPEND);
        s = tw_events_scalars_update(t, scratch, NULL, &err);
    }
    json_t *series = NULL;
    if (s == TW_OK)
        s = tw_events_scalars_json(t, &series, &err);
    tw_events_scalars_free(t);
    if (s != TW_OK)
        return s;
    json_t *loss = json_object_get(series, "loss");
    assert_int_equal(json_object_size(series), 2);
    assert_int_equal(json_array_size(loss), 2); /* step 0 and the newest: the restart rewound the sample */
    json_t *last = json_array_get(loss, 1);
    assert_int_equal(json_integer_value(json_array_get(last, 0)), 5);
    assert_true(json_real_value(json_array_get(last, 1)) == 15.0);
    json_decref(series);
    return TW_OK;
}

/* ================================ eventlog: images ================================ */

enum { IMG_W = 6, IMG_H = 4, JPEG_W = 16, JPEG_H = 8 };

static uint8_t pixels[IMG_H * IMG_W * 3];
static uint8_t png[4096], jpeg[4096];
static size_t png_len, jpeg_len;

static void make_png(void)
{
    for (size_t i = 0; i < sizeof pixels; i++)
        pixels[i] = (uint8_t)(i * 9);
    const tw_png_image img = {.pixels = pixels, .width = IMG_W, .height = IMG_H, .channels = 3};
    uint8_t *out;
    tw_error err;
    assert_int_equal(tw_png_encode(&img, &out, &png_len, &err), TW_OK);
    assert_true(png_len <= sizeof png);
    memcpy(png, out, png_len);
    free(out);
}

/* A grayscale JPEG (a horizontal ramp), through libjpeg. */
static void make_jpeg(void)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long len = 0;
    jpeg_mem_dest(&c, &out, &len);
    c.image_width = JPEG_W;
    c.image_height = JPEG_H;
    c.input_components = 1;
    c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t row[JPEG_W];
    for (int x = 0; x < JPEG_W; x++)
        row[x] = (uint8_t)(x * 16);
    for (JSAMPROW r = row; c.next_scanline < JPEG_H;)
        jpeg_write_scanlines(&c, &r, 1);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    assert_true(len <= sizeof jpeg);
    memcpy(jpeg, out, len);
    jpeg_len = len;
    free(out);
}

static tw_status parse_png(void)
{
    tw_image img;
    tw_error err;
    TW_TRY(tw_image_decode(png, png_len, "t.png", &img, &err));
    assert_int_equal(img.width, IMG_W);
    assert_int_equal(img.height, IMG_H);
    assert_int_equal(img.channels, 3);
    assert_memory_equal(img.pixels, pixels, sizeof pixels);
    tw_image_free(&img);
    return TW_OK;
}

static tw_status parse_jpeg(void)
{
    tw_image img;
    tw_error err;
    TW_TRY(tw_image_decode_sized(jpeg, jpeg_len, JPEG_H, JPEG_W, "t.jpg", &img, &err));
    assert_int_equal(img.channels, 1);
    tw_image_free(&img);
    return TW_OK;
}

/* ================================ server: multipart uploads ================================ */

static const char MP_TYPE[] = "multipart/form-data; boundary=----twBoundary7MA4";
static const char MP_BODY[] = "------twBoundary7MA4\r\n"
                              "Content-Disposition: form-data; name=\"name\"\r\n\r\n"
                              "mnist\r\n------twBoundary7MA4\r\n"
                              "Content-Disposition: form-data; name=\"train\"; filename=\"train.csv\"\r\n"
                              "Content-Type: text/csv\r\n\r\n"
                              "a,b,label\r\n1,2,0\r\n--not the boundary\r\n"
                              "\r\n------twBoundary7MA4--\r\n";
static const char MP_DATA[] = "mnist" "a,b,label\r\n1,2,0\r\n--not the boundary\r\n";

static struct {
    int begins, ends;
    char data[256]; /* every part's bytes, concatenated */
    size_t n;
} mp_seen;

static tw_status mp_begin(void *ctx, const char *name, const char *filename, const char *content_type,
                          tw_error *err)
{
    (void)ctx;
    (void)name;
    (void)filename;
    (void)content_type;
    (void)err;
    mp_seen.begins++;
    return TW_OK;
}

static tw_status mp_data(void *ctx, const void *data, size_t n, tw_error *err)
{
    (void)ctx;
    (void)err;
    assert_true(mp_seen.n + n < sizeof mp_seen.data);
    memcpy(mp_seen.data + mp_seen.n, data, n);
    mp_seen.n += n;
    return TW_OK;
}

static tw_status mp_end(void *ctx, tw_error *err)
{
    (void)ctx;
    (void)err;
    mp_seen.ends++;
    return TW_OK;
}

/* The body fed in chunks of 5 bytes, so delimiters are split across calls. */
static tw_status parse_multipart(void)
{
    memset(&mp_seen, 0, sizeof mp_seen);
    const tw_multipart_callbacks cb = {mp_begin, mp_data, mp_end, NULL};
    tw_multipart *m;
    tw_error err;
    TW_TRY(tw_multipart_create(MP_TYPE, &cb, &m, &err));
    tw_status s = TW_OK;
    const size_t len = sizeof MP_BODY - 1;
    for (size_t at = 0; s == TW_OK && at < len; at += 5)
        s = tw_multipart_feed(m, MP_BODY + at, len - at < 5 ? len - at : 5, &err);
    if (s == TW_OK)
        s = tw_multipart_finish(m, &err);
    tw_multipart_destroy(m);
    if (s == TW_OK) {
        assert_int_equal(mp_seen.begins, 2);
        assert_int_equal(mp_seen.ends, 2);
        assert_int_equal(mp_seen.n, sizeof MP_DATA - 1);
        assert_memory_equal(mp_seen.data, MP_DATA, mp_seen.n);
    }
    return s;
}

/* ================================ the cases ================================ */

static void test_csv(void **state) { (void)state; assert_true(oom_loop(parse_csv) > 0); }
static void test_safetensors(void **state) { (void)state; assert_true(oom_loop(parse_safetensors) > 0); }
static void test_npy(void **state) { (void)state; assert_true(oom_loop(parse_npy) > 0); }
static void test_idx(void **state) { (void)state; assert_true(oom_loop(parse_idx) > 0); }
static void test_class_names(void **state) { (void)state; assert_true(oom_loop(parse_class_names) > 0); }

static void test_tfrecord(void **state)
{
    (void)state;
    char plain[600];
    snprintf(plain, sizeof plain, "%s/t.tfrecord", scratch);
    write_records(plain, TW_COMPRESSION_NONE);
    tfrecord_len = get_file(plain, tfrecord, sizeof tfrecord);
    unlink(plain);
    snprintf(tfrecord_gz, sizeof tfrecord_gz, "%s/t.tfrecord.gz", scratch);
    write_records(tfrecord_gz, TW_COMPRESSION_GZIP);
    assert_true(oom_loop(parse_tfrecord_mem) > 0);
    assert_true(oom_loop(parse_tfrecord_gzip) > 0);
    unlink(tfrecord_gz);
}

static void test_example(void **state)
{
    (void)state;
    make_example();
    assert_true(oom_loop(parse_example) > 0);
}

static void test_events_scalars(void **state)
{
    (void)state;
    make_events();
    assert_true(oom_loop(parse_events) > 0);
    unlink(events[0].path);
    unlink(events[1].path);
}

static void test_image(void **state)
{
    (void)state;
    make_png();
    make_jpeg();
    assert_true(oom_loop(parse_png) > 0);
    assert_true(oom_loop(parse_jpeg) > 0);
}

static void test_multipart(void **state) { (void)state; assert_true(oom_loop(parse_multipart) > 0); }

/* Before each case: no allocation fails, also after a case whose check failed inside its loop. */
static int no_failure(void **state)
{
    (void)state;
    fail_at = -1;
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return tw_test_mkdtemp(scratch, sizeof scratch, "alloc_failures");
}

static int teardown(void **state)
{
    (void)state;
    return tw_test_rmdir(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_csv, no_failure),
        cmocka_unit_test_setup(test_safetensors, no_failure),
        cmocka_unit_test_setup(test_npy, no_failure),
        cmocka_unit_test_setup(test_idx, no_failure),
        cmocka_unit_test_setup(test_class_names, no_failure),
        cmocka_unit_test_setup(test_tfrecord, no_failure),
        cmocka_unit_test_setup(test_example, no_failure),
        cmocka_unit_test_setup(test_events_scalars, no_failure),
        cmocka_unit_test_setup(test_image, no_failure),
        cmocka_unit_test_setup(test_multipart, no_failure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
