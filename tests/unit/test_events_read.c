/* test_events_read.c — the scalar series of a run folder (events_read.h), from files written by our
 * writer (events.h) and, for what it does not write (TF2 tensor scalars, other dtypes, long records,
 * damaged records), by hand through tw_tfrecord_writer: values, steps and wall times; a resume with
 * SessionLog START; a step written again without one; a torn tail cut at every byte; two files and the
 * files that are not read; the max_points sampling, with and without a restart; CRC and protobuf
 * damage named by file and offset; a record over the cap stepped over. The same reader is checked
 * against TensorFlow's own files in tests/integration/test_events_read.py. The incremental reader
 * (tw_events_scalars) equals a full read after every append, torn records, replaced and shrunk files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "event.pb-c.h"
#include "events.h"
#include "events_read.h"
#include "tfrecord.h"

/* ---- helpers ---- */

typedef struct {
    char dir[512];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(tw_test_mkdtemp(f->dir, sizeof f->dir, "events_read"), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    assert_int_equal(tw_test_rmdir(f->dir), 0);
    free(f);
    return 0;
}

/* A writer with no flusher thread; everything reaches the file at close. */
static tw_events_writer *create(const char *dir)
{
    tw_events_options o;
    tw_events_options_default(&o);
    o.flush_secs = 0;
    tw_events_writer *w;
    tw_error err;
    assert_int_equal(tw_events_create(dir, &o, &w, &err), TW_OK);
    return w;
}

static void add_scalar(tw_events_writer *w, const char *tag, int64_t step, float v)
{
    tw_error err;
    assert_int_equal(tw_events_add_scalar(w, tag, step, v, &err), TW_OK);
}

static void close_writer(tw_events_writer *w)
{
    tw_error err;
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    tw_events_destroy(w);
}

static json_t *read_ok(const char *dir, size_t max_points)
{
    json_t *out = NULL;
    tw_error err;
    tw_error_clear(&err);
    tw_status s = tw_events_read_scalars(dir, max_points, &out, &err);
    if (s != TW_OK)
        fail_msg("tw_events_read_scalars: %s: %s at %lld", tw_status_name(s), err.message,
                 (long long)err.offset);
    assert_non_null(out);
    assert_true(json_is_object(out));
    return out;
}

static tw_status read_err(const char *dir, tw_error *err)
{
    json_t *out = (json_t *)1;
    tw_status s = tw_events_read_scalars(dir, 1000, &out, err);
    assert_true(s < 0);
    assert_null(out);
    return s;
}

static json_t *series(const json_t *all, const char *tag)
{
    json_t *s = json_object_get(all, tag);
    if (!s)
        fail_msg("no series \"%s\"", tag);
    assert_true(json_is_array(s));
    return s;
}

static int64_t step_at(const json_t *s, size_t i)
{
    return json_integer_value(json_array_get(json_array_get(s, i), 0));
}

static double value_at(const json_t *s, size_t i)
{
    const json_t *v = json_array_get(json_array_get(s, i), 1);
    assert_true(json_is_real(v));
    return json_real_value(v);
}

static double wall_at(const json_t *s, size_t i)
{
    return json_real_value(json_array_get(json_array_get(s, i), 2));
}

/* The series is exactly steps[n] with values (float) vals[n]. */
static void assert_series(const json_t *s, const int64_t *steps, const float *vals, size_t n)
{
    assert_int_equal(json_array_size(s), n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(json_array_size(json_array_get(s, i)), 3);
        assert_int_equal(step_at(s, i), steps[i]);
        assert_true(value_at(s, i) == (double)vals[i]);
    }
}

static void assert_ascending(const json_t *s)
{
    for (size_t i = 1; i < json_array_size(s); i++)
        assert_true(step_at(s, i - 1) < step_at(s, i));
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* The whole of path into *data (caller frees). */
static size_t slurp(const char *path, uint8_t **data)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *data = malloc((size_t)n + 1);
    assert_non_null(*data);
    assert_int_equal(fread(*data, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    return (size_t)n;
}

/* ---- hand-written records ---- */

typedef struct {
    int fd;
    tw_tfrecord_writer *w;
} raw_file;

static void raw_open(raw_file *rf, const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    rf->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(rf->fd >= 0);
    tw_error err;
    assert_int_equal(tw_tfrecord_writer_create(rf->fd, TW_COMPRESSION_NONE, path, &rf->w, &err), TW_OK);
}

static void raw_bytes(raw_file *rf, const void *data, size_t n)
{
    tw_error err;
    assert_int_equal(tw_tfrecord_write(rf->w, data, n, &err), TW_OK);
}

static void raw_event(raw_file *rf, const Twpb__Event *ev)
{
    size_t n = twpb__event__get_packed_size(ev);
    uint8_t *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    assert_int_equal(twpb__event__pack(ev, buf), n);
    raw_bytes(rf, buf, n);
    free(buf);
}

static void raw_close(raw_file *rf)
{
    tw_error err;
    assert_int_equal(tw_tfrecord_writer_finish(rf->w, &err), TW_OK);
    tw_tfrecord_writer_destroy(rf->w);
    assert_int_equal(close(rf->fd), 0);
}

/* One Event{step, wall_time = step + 0.5, summary{value v}}. */
static void raw_value(raw_file *rf, int64_t step, Twpb__Summary__Value *v)
{
    Twpb__Summary summary = TWPB__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = &v;
    Twpb__Event ev = TWPB__EVENT__INIT;
    ev.step = step;
    ev.wall_time = (double)step + 0.5;
    ev.what_case = TWPB__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    raw_event(rf, &ev);
}

enum { WITH_METADATA = 1, AS_CONTENT = 2 };

/* A tensor value as TF2's tf.summary.scalar writes it (plugin "scalars" metadata when WITH_METADATA;
 * the float in tensor_content when AS_CONTENT, else in float_val), with dtype and rank given. */
static void raw_tensor(raw_file *rf, const char *tag, int64_t step, float x, Twpb__DataType dtype,
                       int rank1, int flags)
{
    Twpb__TensorShapeProto__Dim dim = TWPB__TENSOR_SHAPE_PROTO__DIM__INIT, *dims = &dim;
    dim.size = 1;
    Twpb__TensorShapeProto shape = TWPB__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = rank1 ? 1 : 0;
    shape.dim = rank1 ? &dims : NULL;
    Twpb__TensorProto t = TWPB__TENSOR_PROTO__INIT;
    t.dtype = dtype;
    t.tensor_shape = &shape;
    uint8_t content[4];
    double d = x;
    if (flags & AS_CONTENT) {
        memcpy(content, &x, 4); /* little-endian host, as TF's own files */
        t.tensor_content.data = content;
        t.tensor_content.len = 4;
    } else if (dtype == TWPB__DATA_TYPE__DT_DOUBLE) {
        t.n_double_val = 1;
        t.double_val = &d;
    } else {
        t.n_float_val = 1;
        t.float_val = &x;
    }
    Twpb__SummaryMetadata__PluginData pd = TWPB__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    pd.plugin_name = "scalars";
    Twpb__SummaryMetadata md = TWPB__SUMMARY_METADATA__INIT;
    md.plugin_data = &pd;
    Twpb__Summary__Value v = TWPB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.metadata = (flags & WITH_METADATA) ? &md : NULL;
    v.value_case = TWPB__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = &t;
    raw_value(rf, step, &v);
}

static void raw_simple(raw_file *rf, const char *tag, int64_t step, float x)
{
    Twpb__Summary__Value v = TWPB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = TWPB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = x;
    raw_value(rf, step, &v);
}

static void raw_start(raw_file *rf, int64_t step)
{
    Twpb__SessionLog log = TWPB__SESSION_LOG__INIT;
    log.status = TWPB__SESSION_LOG__SESSION_STATUS__START;
    Twpb__Event ev = TWPB__EVENT__INIT;
    ev.step = step;
    ev.what_case = TWPB__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &log;
    raw_event(rf, &ev);
}

/* ---- tests ---- */

static void test_values_steps_and_wall_times(void **state)
{
    fixture *f = *state;
    double before = tw_test_realtime();
    tw_events_writer *w = create(f->dir);
    for (int64_t step = 0; step < 10; step++) {
        add_scalar(w, "loss", step, 1.0f / (float)(step + 1));
        if (step % 3 == 0)
            add_scalar(w, "eval/accuracy", step, 0.1f * (float)step);
    }
    tw_error err;
    assert_int_equal(tw_events_add_text(w, "notes", 0, "not a scalar", &err), TW_OK);
    float h[3] = {1, 2, 3};
    assert_int_equal(tw_events_add_histogram(w, "weights", 0, h, 3, &err), TW_OK);
    close_writer(w);
    double after = tw_test_realtime();

    json_t *all = read_ok(f->dir, 1000);
    assert_int_equal(json_object_size(all), 2);
    int64_t steps[10];
    float vals[10];
    for (int i = 0; i < 10; i++) {
        steps[i] = i;
        vals[i] = 1.0f / (float)(i + 1);
    }
    json_t *loss = series(all, "loss");
    assert_series(loss, steps, vals, 10);
    for (size_t i = 0; i < 10; i++)
        assert_true(wall_at(loss, i) >= before && wall_at(loss, i) <= after);
    const int64_t eval_steps[] = {0, 3, 6, 9};
    const float eval_vals[] = {0.1f * 0.0f, 0.1f * 3.0f, 0.1f * 6.0f, 0.1f * 9.0f};
    assert_series(series(all, "eval/accuracy"), eval_steps, eval_vals, 4);
    /* tags in the order they first appear */
    void *it = json_object_iter(all);
    assert_string_equal(json_object_iter_key(it), "loss");
    json_decref(all);
}

static void test_empty_folder_and_missing_folder(void **state)
{
    fixture *f = *state;
    json_t *all = read_ok(f->dir, 10);
    assert_int_equal(json_object_size(all), 0);
    json_decref(all);

    tw_events_writer *w = create(f->dir); /* just the file_version record */
    close_writer(w);
    all = read_ok(f->dir, 10);
    assert_int_equal(json_object_size(all), 0);
    json_decref(all);

    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope", f->dir);
    tw_error err;
    assert_int_equal(read_err(missing, &err), TW_ERR_IO);
    assert_int_equal(err.errno_value, ENOENT);
    assert_string_equal(err.file, missing);

    json_t *out;
    assert_int_equal(tw_events_read_scalars(f->dir, 0, &out, &err), TW_ERR_INVALID);
    assert_null(out);
    assert_int_equal(tw_events_read_scalars(NULL, 10, &out, &err), TW_ERR_INVALID);
}

/* A run killed after step 9 and resumed from its step-5 checkpoint: the second writer's file sorts
 * after the first (a later second, or the ".1" suffix), starts with SessionLog START at 5 and writes
 * 5.. again. Points >= 5 of every tag are the resumed run's; a tag the resumed run has not written
 * again yet keeps only its points below 5. */
static void test_resume_with_session_start(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = create(f->dir);
    tw_error err;
    assert_int_equal(tw_events_add_session_start(w, 0, &err), TW_OK);
    for (int64_t step = 0; step < 10; step++) {
        add_scalar(w, "loss", step, (float)step);
        if (step % 4 == 0)
            add_scalar(w, "eval", step, (float)step);
    }
    close_writer(w);
    w = create(f->dir);
    assert_int_equal(tw_events_add_session_start(w, 5, &err), TW_OK);
    for (int64_t step = 5; step < 15; step++)
        add_scalar(w, "loss", step, -(float)step);
    close_writer(w);

    json_t *all = read_ok(f->dir, 1000);
    json_t *loss = series(all, "loss");
    assert_int_equal(json_array_size(loss), 15);
    for (size_t i = 0; i < 15; i++) {
        assert_int_equal(step_at(loss, i), (int64_t)i);
        assert_true(value_at(loss, i) == (i < 5 ? (double)i : -(double)i));
    }
    const int64_t eval_steps[] = {0, 4};
    const float eval_vals[] = {0, 4};
    assert_series(series(all, "eval"), eval_steps, eval_vals, 2);
    json_decref(all);
}

/* Without a START, a step written again replaces the points of that tag from that step on (the data
 * server's preemption): the series stays strictly ascending. Other tags are untouched. */
static void test_step_written_again_preempts(void **state)
{
    fixture *f = *state;
    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000001.host");
    for (int64_t step = 0; step < 10; step++) {
        raw_simple(&rf, "a", step, (float)step);
        raw_simple(&rf, "b", step, (float)step);
    }
    raw_simple(&rf, "a", 6, 60);
    raw_simple(&rf, "a", 7, 70);
    raw_simple(&rf, "a", 7, 71);
    raw_close(&rf);
    json_t *all = read_ok(f->dir, 1000);
    const int64_t steps[] = {0, 1, 2, 3, 4, 5, 6, 7};
    const float vals[] = {0, 1, 2, 3, 4, 5, 60, 71};
    assert_series(series(all, "a"), steps, vals, 8);
    assert_int_equal(json_array_size(series(all, "b")), 10);
    json_decref(all);
}

/* Offsets of the records of a TFRecord file in memory, and the end offset: *n records. */
static size_t record_ends(const uint8_t *data, size_t size, size_t *ends, size_t cap)
{
    size_t n = 0;
    for (size_t at = 0; at < size; n++) {
        assert_true(n < cap && at + 12 <= size);
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | data[at + (size_t)i];
        at += 12 + (size_t)len + 4;
        ends[n] = at;
    }
    return n;
}

/* A file cut at every byte (as a kill -9 or a reader racing the writer leaves it): the whole records
 * before the cut are read, quietly. */
static void test_torn_tail_at_every_byte(void **state)
{
    fixture *f = *state;
    char sub[600], path[700];
    snprintf(sub, sizeof sub, "%s/src", f->dir);
    tw_events_writer *w = create(sub);
    for (int64_t step = 0; step < 6; step++)
        add_scalar(w, "loss", step, (float)step * 0.25f);
    char src[700];
    snprintf(src, sizeof src, "%s", tw_events_path(w));
    close_writer(w);
    uint8_t *data;
    size_t size = slurp(src, &data);
    assert_int_equal(unlink(src), 0);
    assert_int_equal(rmdir(sub), 0);
    size_t ends[16];
    size_t records = record_ends(data, size, ends, 16);
    assert_int_equal(records, 7); /* file_version + 6 scalars */

    snprintf(path, sizeof path, "%s/events.out.tfevents.0000000001.host", f->dir);
    for (size_t cut = 0; cut <= size; cut++) {
        write_file(path, data, cut);
        size_t whole = 0;
        while (whole < records && ends[whole] <= cut)
            whole++;
        size_t points = whole > 0 ? whole - 1 : 0;
        json_t *all = read_ok(f->dir, 1000);
        json_t *loss = json_object_get(all, "loss");
        assert_int_equal(loss ? json_array_size(loss) : 0, points);
        for (size_t i = 0; i < points; i++)
            assert_true(value_at(loss, i) == (double)i * 0.25);
        json_decref(all);
    }
    /* A torn tail ends its file only: the next file is read. */
    write_file(path, data, size - 3);
    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000002.host");
    raw_start(&rf, 5);
    raw_simple(&rf, "loss", 5, 50);
    raw_close(&rf);
    json_t *all = read_ok(f->dir, 1000);
    const int64_t steps[] = {0, 1, 2, 3, 4, 5};
    const float vals[] = {0, 0.25f, 0.5f, 0.75f, 1, 50};
    assert_series(series(all, "loss"), steps, vals, 6);
    json_decref(all);
    free(data);
}

/* Two files in name order; files without "tfevents" in the name, ".profile-empty" files, folders and
 * sub-folders (other runs) are not read. */
static void test_two_files_and_what_is_not_read(void **state)
{
    fixture *f = *state;
    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000002.host.2.v2");
    raw_simple(&rf, "x", 3, 3);
    raw_simple(&rf, "x", 4, 4);
    raw_close(&rf);
    raw_open(&rf, f->dir, "events.out.tfevents.0000000001.host.1.v2");
    raw_simple(&rf, "x", 1, 1);
    raw_simple(&rf, "x", 2, 2);
    raw_close(&rf);
    raw_open(&rf, f->dir, "notes.txt");
    raw_simple(&rf, "x", 9, 9);
    raw_close(&rf);
    raw_open(&rf, f->dir, "events.out.tfevents.0000000003.host.profile-empty");
    raw_simple(&rf, "x", 9, 9);
    raw_close(&rf);
    char sub[700], dirlike[700];
    snprintf(sub, sizeof sub, "%s/child", f->dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    raw_open(&rf, sub, "events.out.tfevents.0000000004.host");
    raw_simple(&rf, "x", 9, 9);
    raw_close(&rf);
    snprintf(dirlike, sizeof dirlike, "%s/tfevents.dir", f->dir);
    assert_int_equal(mkdir(dirlike, 0755), 0);

    json_t *all = read_ok(f->dir, 1000);
    const int64_t steps[] = {1, 2, 3, 4};
    const float vals[] = {1, 2, 3, 4};
    assert_series(series(all, "x"), steps, vals, 4);
    json_decref(all);
    assert_int_equal(tw_test_rmdir(sub), 0);
    assert_int_equal(rmdir(dirlike), 0);
}

/* TF2's tf.summary.scalar: rank-0 DT_FLOAT tensors, plugin "scalars" on the first value only (or on
 * all), the float in float_val or tensor_content. Not scalars: other dtypes and ranks of a scalars
 * tag (dropped), tensors of a tag whose first value named no plugin or another plugin. */
static void test_tensor_scalars(void **state)
{
    fixture *f = *state;
    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000001.host");
    raw_tensor(&rf, "tf2", 0, 0.5f, TWPB__DATA_TYPE__DT_FLOAT, 0, WITH_METADATA);
    raw_tensor(&rf, "tf2", 1, 1.5f, TWPB__DATA_TYPE__DT_FLOAT, 0, 0);
    raw_tensor(&rf, "tf2", 2, 2.5f, TWPB__DATA_TYPE__DT_FLOAT, 0, AS_CONTENT);
    raw_tensor(&rf, "tf2", 3, 3.5f, TWPB__DATA_TYPE__DT_DOUBLE, 0, 0);
    raw_tensor(&rf, "tf2", 4, 4.5f, TWPB__DATA_TYPE__DT_FLOAT, 1, 0);
    raw_tensor(&rf, "tf2", 5, 5.5f, TWPB__DATA_TYPE__DT_FLOAT, 0, WITH_METADATA | AS_CONTENT);
    raw_simple(&rf, "tf2", 6, 6.5f);
    raw_tensor(&rf, "bare", 0, 1.0f, TWPB__DATA_TYPE__DT_FLOAT, 0, 0);
    raw_tensor(&rf, "bare", 1, 1.0f, TWPB__DATA_TYPE__DT_FLOAT, 0, WITH_METADATA);
    raw_simple(&rf, "nan", 0, NAN);
    raw_simple(&rf, "nan", 1, INFINITY);
    raw_simple(&rf, "nan", 2, -INFINITY);
    raw_close(&rf);
    json_t *all = read_ok(f->dir, 1000);
    assert_int_equal(json_object_size(all), 2);
    const int64_t steps[] = {0, 1, 2, 5, 6};
    const float vals[] = {0.5f, 1.5f, 2.5f, 5.5f, 6.5f};
    json_t *tf2 = series(all, "tf2");
    assert_series(tf2, steps, vals, 5);
    assert_true(wall_at(tf2, 3) == 5.5);
    json_t *nan = series(all, "nan");
    assert_string_equal(json_string_value(json_array_get(json_array_get(nan, 0), 1)), "NaN");
    assert_string_equal(json_string_value(json_array_get(json_array_get(nan, 1), 1)), "Infinity");
    assert_string_equal(json_string_value(json_array_get(json_array_get(nan, 2), 1)), "-Infinity");
    json_decref(all);
}

/* A tag that is not UTF-8 cannot be a JSON key: its values are skipped, the rest is read. */
static void test_tag_not_utf8_is_skipped(void **state)
{
    fixture *f = *state;
    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000001.host");
    raw_simple(&rf, "bad\xff", 0, 1);
    raw_simple(&rf, "good", 0, 2);
    raw_simple(&rf, "bad\xff", 1, 1);
    raw_close(&rf);
    json_t *all = read_ok(f->dir, 1000);
    assert_int_equal(json_object_size(all), 1);
    assert_int_equal(json_array_size(series(all, "good")), 1);
    json_decref(all);
}

/* Checks the sampling of a series of newest step `last` cut to max_points: at most max_points points,
 * ascending, the newest last, and the others an evenly strided run 0, s, 2s, ... (s a power of two)
 * that is at least half full and reaches to within s of the newest. */
static void assert_sampled(const json_t *s, size_t max_points, int64_t last)
{
    size_t n = json_array_size(s);
    assert_true(n >= 2 && n <= max_points);
    assert_ascending(s);
    assert_int_equal(step_at(s, n - 1), last);
    size_t kept = n - 1;
    assert_int_equal(step_at(s, 0), 0);
    assert_true(kept >= max_points / 2);
    if (kept == 1)
        return;
    int64_t stride = step_at(s, 1) - step_at(s, 0);
    assert_true(stride > 0 && (stride & (stride - 1)) == 0);
    for (size_t i = 0; i < kept; i++)
        assert_int_equal(step_at(s, i), (int64_t)i * stride);
    assert_true(step_at(s, kept - 1) + stride > last);
}

static void test_max_points_sampling(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = create(f->dir);
    for (int64_t step = 0; step < 1000; step++)
        add_scalar(w, "loss", step, (float)step);
    close_writer(w);

    json_t *all = read_ok(f->dir, 1000);
    assert_int_equal(json_array_size(series(all, "loss")), 1000);
    json_decref(all);
    all = read_ok(f->dir, 999);
    assert_sampled(series(all, "loss"), 999, 999);
    json_decref(all);
    const size_t caps[] = {2, 3, 10, 17, 64, 100, 500};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        all = read_ok(f->dir, caps[c]);
        json_t *loss = series(all, "loss");
        assert_sampled(loss, caps[c], 999);
        for (size_t i = 0; i < json_array_size(loss); i++)
            assert_true(value_at(loss, i) == (double)step_at(loss, i));
        json_decref(all);
    }
    all = read_ok(f->dir, 1);
    const int64_t steps[] = {999};
    const float vals[] = {999};
    assert_series(series(all, "loss"), steps, vals, 1);
    json_decref(all);
}

/* The cap across a restart: still bounded and ascending, old values below the START step and resumed
 * ones from it, the newest last, and no gap wider than twice the final stride. */
static void test_max_points_across_a_restart(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = create(f->dir);
    for (int64_t step = 0; step < 1000; step++)
        add_scalar(w, "loss", step, (float)step);
    close_writer(w);
    w = create(f->dir);
    tw_error err;
    assert_int_equal(tw_events_add_session_start(w, 500, &err), TW_OK);
    for (int64_t step = 500; step < 1500; step++)
        add_scalar(w, "loss", step, -(float)step);
    close_writer(w);
    json_t *all = read_ok(f->dir, 50);
    json_t *loss = series(all, "loss");
    size_t n = json_array_size(loss);
    assert_true(n >= 25 && n <= 50);
    assert_ascending(loss);
    assert_int_equal(step_at(loss, n - 1), 1499);
    int64_t widest = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t step = step_at(loss, i);
        assert_true(value_at(loss, i) == (step < 500 ? (double)step : -(double)step));
        if (i > 0 && i < n - 1 && step - step_at(loss, i - 1) > widest)
            widest = step - step_at(loss, i - 1);
    }
    assert_true(widest <= 2 * 64); /* 1500 arrivals into 49 kept: the stride is 64 at most */
    json_decref(all);
}

/* A bad data CRC, a bad length CRC and a record that is not an Event are errors naming the file and
 * the record's offset. */
static void test_corruption_names_file_and_offset(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = create(f->dir);
    for (int64_t step = 0; step < 4; step++)
        add_scalar(w, "loss", step, (float)step);
    char path[700];
    snprintf(path, sizeof path, "%s", tw_events_path(w));
    close_writer(w);
    uint8_t *data;
    size_t size = slurp(path, &data);
    size_t ends[8];
    assert_int_equal(record_ends(data, size, ends, 8), 5);
    size_t third = ends[1]; /* offset of the step-1 scalar record */

    tw_error err;
    data[third + 14] ^= 0x40; /* payload byte */
    write_file(path, data, size);
    assert_int_equal(read_err(f->dir, &err), TW_ERR_CORRUPT);
    assert_string_equal(err.file, path);
    assert_int_equal(err.offset, (int64_t)third);
    assert_non_null(strstr(err.message, "CRC"));
    data[third + 14] ^= 0x40;

    data[third + 1] ^= 0x01; /* length */
    write_file(path, data, size);
    assert_int_equal(read_err(f->dir, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, (int64_t)third);
    assert_non_null(strstr(err.message, "length"));
    data[third + 1] ^= 0x01;

    /* the last record's footer damaged: whole, so not a torn tail */
    data[size - 1] ^= 0x01;
    write_file(path, data, size);
    assert_int_equal(read_err(f->dir, &err), TW_ERR_CORRUPT);
    assert_int_equal(err.offset, (int64_t)ends[3]);
    free(data);
    assert_int_equal(unlink(path), 0);

    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000001.host");
    raw_simple(&rf, "loss", 0, 0);
    raw_bytes(&rf, "\xff\xff\xff", 3);
    raw_simple(&rf, "loss", 1, 1);
    raw_close(&rf);
    snprintf(path, sizeof path, "%s/events.out.tfevents.0000000001.host", f->dir);
    size = slurp(path, &data);
    assert_int_equal(record_ends(data, size, ends, 8), 3);
    free(data);
    assert_int_equal(read_err(f->dir, &err), TW_ERR_CORRUPT);
    assert_string_equal(err.file, path);
    assert_int_equal(err.offset, (int64_t)ends[0]);
    assert_non_null(strstr(err.message, "not a valid Event"));
}

/* A record over TW_EVENTS_READ_MAX_RECORD (a large graph) is stepped over, CRC checked; the scalars
 * after it are read. Torn, it ends the file quietly; damaged, it is an error. */
static void test_long_record_is_stepped_over(void **state)
{
    fixture *f = *state;
    size_t big = (size_t)TW_EVENTS_READ_MAX_RECORD + 12345;
    uint8_t *graph = malloc(big);
    assert_non_null(graph);
    for (size_t i = 0; i < big; i++)
        graph[i] = (uint8_t)(i * 2654435761u >> 13);
    Twpb__Event ev = TWPB__EVENT__INIT;
    ev.what_case = TWPB__EVENT__WHAT_GRAPH_DEF;
    ev.graph_def.data = graph;
    ev.graph_def.len = big;
    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000001.host");
    raw_simple(&rf, "loss", 0, 0);
    raw_event(&rf, &ev);
    raw_simple(&rf, "loss", 1, 1);
    raw_close(&rf);
    free(graph);
    json_t *all = read_ok(f->dir, 1000);
    const int64_t steps[] = {0, 1};
    const float vals[] = {0, 1};
    assert_series(series(all, "loss"), steps, vals, 2);
    json_decref(all);

    char path[700];
    snprintf(path, sizeof path, "%s/events.out.tfevents.0000000001.host", f->dir);
    uint8_t *data;
    size_t size = slurp(path, &data);
    size_t ends[8];
    assert_int_equal(record_ends(data, size, ends, 8), 3);
    const size_t cuts[] = {ends[0] + 12, ends[0] + 5000, ends[1] - 4, ends[1] - 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        write_file(path, data, cuts[c]);
        all = read_ok(f->dir, 1000);
        assert_int_equal(json_array_size(series(all, "loss")), 1);
        json_decref(all);
    }
    tw_error err;
    const size_t flips[] = {ends[0] + 12 + 700000, ends[1] - 2};
    for (size_t c = 0; c < sizeof flips / sizeof flips[0]; c++) {
        data[flips[c]] ^= 0x10;
        write_file(path, data, size);
        assert_int_equal(read_err(f->dir, &err), TW_ERR_CORRUPT);
        assert_int_equal(err.offset, (int64_t)ends[0]);
        data[flips[c]] ^= 0x10;
    }
    free(data);
}

/* ---- incremental reading (tw_events_scalars) ---- */

/* The incremental reader's series, after one more update that adds its bytes to *bytes. */
static json_t *update_ok(tw_events_scalars *t, const char *dir, uint64_t *bytes)
{
    tw_error err;
    assert_int_equal(tw_events_scalars_update(t, dir, bytes, &err), TW_OK);
    json_t *out;
    assert_int_equal(tw_events_scalars_json(t, &out, &err), TW_OK);
    return out;
}

static void assert_same_as_full_read(tw_events_scalars *t, const char *dir, size_t max_points, uint64_t *bytes)
{
    json_t *inc = update_ok(t, dir, bytes), *full = read_ok(dir, max_points);
    assert_true(json_equal(inc, full));
    json_decref(inc);
    json_decref(full);
}

/* Two files (a run and its resume, with STARTs and a sampled series) grown a few bytes at a time, torn
 * records included: after every update the incremental series equal a full read's; an update with
 * nothing new reads no byte, one after a whole record reads exactly its bytes. A file replaced by a
 * shorter one (another inode) or cut shorter is read again from the start. */
static void test_incremental_equals_full_read(void **state)
{
    fixture *f = *state;
    enum { MAX = 8 };
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/events.out.tfevents.0000000001.host", f->dir);
    snprintf(b, sizeof b, "%s/events.out.tfevents.0000000002.host", f->dir);
    raw_file rf;
    raw_open(&rf, f->dir, "events.out.tfevents.0000000001.host");
    raw_start(&rf, 0);
    for (int64_t step = 0; step < 30; step++) {
        raw_simple(&rf, "loss", step, (float)step);
        if (step % 3 == 0)
            raw_simple(&rf, "eval", step, -(float)step);
    }
    raw_close(&rf);
    raw_open(&rf, f->dir, "events.out.tfevents.0000000002.host");
    raw_start(&rf, 20);
    for (int64_t step = 20; step < 40; step++)
        raw_simple(&rf, "loss", step, 100.0f + (float)step);
    raw_close(&rf);
    uint8_t *da, *db;
    size_t na = slurp(a, &da), nb = slurp(b, &db);
    assert_int_equal(unlink(b), 0);

    tw_events_scalars *t;
    tw_error err;
    assert_int_equal(tw_events_scalars_new(MAX, &t, &err), TW_OK);
    uint64_t bytes = 0;
    for (size_t cut = 0; cut <= na; cut += 7) {
        write_file(a, da, cut);
        assert_same_as_full_read(t, f->dir, MAX, &bytes);
    }
    write_file(a, da, na);
    assert_same_as_full_read(t, f->dir, MAX, &bytes);
    for (size_t cut = 1; cut <= nb; cut += 11) {
        write_file(b, db, cut);
        assert_same_as_full_read(t, f->dir, MAX, &bytes);
    }
    size_t ends[64];
    size_t records = record_ends(db, nb, ends, 64);
    write_file(b, db, ends[records - 2]); /* all but the last record, whole */
    assert_same_as_full_read(t, f->dir, MAX, &bytes);
    bytes = 0;
    assert_same_as_full_read(t, f->dir, MAX, &bytes);
    assert_int_equal(bytes, 0); /* nothing new: nothing read */
    write_file(b, db, nb);
    assert_same_as_full_read(t, f->dir, MAX, &bytes);
    assert_int_equal(bytes, nb - ends[records - 2]); /* the appended record only */

    /* b replaced by a shorter file (rename over it: another inode), then cut shorter in place. */
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s/tmp", f->dir);
    write_file(tmp, db, ends[3]);
    assert_int_equal(rename(tmp, b), 0);
    assert_same_as_full_read(t, f->dir, MAX, &bytes);
    write_file(b, db, ends[1]);
    assert_same_as_full_read(t, f->dir, MAX, &bytes);
    /* a, not the newest, changed: read again from the start. */
    write_file(a, da, na - 5);
    assert_same_as_full_read(t, f->dir, MAX, &bytes);
    assert_true(tw_events_scalars_memory(t) > 0);
    tw_events_scalars_free(t);
    free(da);
    free(db);
}

static void test_json_number(void **state)
{
    (void)state;
    json_t *v = tw_events_read_json_number(0.25);
    assert_true(json_is_real(v) && json_real_value(v) == 0.25);
    json_decref(v);
    v = tw_events_read_json_number(NAN);
    assert_string_equal(json_string_value(v), "NaN");
    json_decref(v);
    v = tw_events_read_json_number(-INFINITY);
    assert_string_equal(json_string_value(v), "-Infinity");
    json_decref(v);
}

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_values_steps_and_wall_times),
        TEST(test_empty_folder_and_missing_folder),
        TEST(test_resume_with_session_start),
        TEST(test_step_written_again_preempts),
        TEST(test_torn_tail_at_every_byte),
        TEST(test_two_files_and_what_is_not_read),
        TEST(test_tensor_scalars),
        TEST(test_tag_not_utf8_is_skipped),
        TEST(test_max_points_sampling),
        TEST(test_incremental_equals_full_read),
        TEST(test_max_points_across_a_restart),
        TEST(test_corruption_names_file_and_offset),
        TEST(test_long_record_is_stepped_over),
        TEST(test_json_number),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
