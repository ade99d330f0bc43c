/* test_events.c — the tfevents writer: file naming (pattern, pid, time, never reusing a name),
 * every record read back by tw_tfrecord_reader with valid CRCs and decoded by twpb__event__unpack
 * (file version first, a 0.0 scalar present, histogram, text, graph, SessionLog, an image summary whose
 * PNG libpng decodes back), flushing by
 * count, by time and on demand, several threads adding at once, and write failures injected with
 * RLIMIT_FSIZE: an error with errno, no crash, a degraded writer, and a file cut back to whole
 * records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <png.h>

#include "testutil.h"

#include "event.pb-c.h"
#include "events.h"
#include "histogram.h"
#include "tfrecord.h"

enum { MAX_EVENTS = 1024, THREADS = 4, PER_THREAD = 200 };

/* ---- helpers ---- */

/* A fresh folder under $TW_TEST_TMP (or /tmp); removed with its files by remove_dir. */
static void make_dir(char *out, size_t size) { assert_int_equal(tw_test_mkdtemp(out, size, "events"), 0); }

static void remove_dir(const char *dir) { assert_int_equal(tw_test_rmdir(dir), 0); }

typedef struct {
    Twpb__Event *ev[MAX_EVENTS];
    size_t n;
} events;

/* Reads every record of path (uncompressed TFRecord, both CRCs checked), requiring a clean end, and
 * unpacks each as an Event. */
static void read_events(const char *path, events *out)
{
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    o.compression = TW_COMPRESSION_NONE;
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open(path, &o, &r, &err), TW_OK);
    const uint8_t *data;
    size_t len;
    tw_status s;
    out->n = 0;
    while ((s = tw_tfrecord_read(r, &data, &len, &err)) == TW_OK) {
        assert_true(out->n < MAX_EVENTS);
        out->ev[out->n] = twpb__event__unpack(NULL, len, data);
        assert_non_null(out->ev[out->n]);
        out->n++;
    }
    assert_int_equal(s, TW_END);
    tw_tfrecord_reader_close(r);
}

static void free_events(events *e)
{
    for (size_t i = 0; i < e->n; i++)
        twpb__event__free_unpacked(e->ev[i], NULL);
    e->n = 0;
}

static size_t count_records(const char *path)
{
    events *e = malloc(sizeof *e);
    assert_non_null(e);
    read_events(path, e);
    size_t n = e->n;
    free_events(e);
    free(e);
    return n;
}

/* Each test gets a fresh folder and may leave its writer in f->w; teardown destroys both. */
typedef struct {
    char dir[512];
    tw_events_writer *w;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    make_dir(f->dir, sizeof f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tw_events_destroy(f->w);
    remove_dir(f->dir);
    free(f);
    return 0;
}

/* flush_secs = 0: no background flusher, so only count and explicit flushes write. */
static tw_events_options options(double flush_secs, size_t max_queue)
{
    tw_events_options o;
    tw_events_options_default(&o);
    o.flush_secs = flush_secs;
    o.max_queue = max_queue;
    return o;
}

static tw_events_writer *create(const char *dir, const tw_events_options *o)
{
    tw_events_writer *w;
    tw_error err;
    assert_int_equal(tw_events_create(dir, o, &w, &err), TW_OK);
    return w;
}

/* Creates the test's writer (kept in f->w for teardown) with options(flush_secs, max_queue). */
static tw_events_writer *start(fixture *f, double flush_secs, size_t max_queue)
{
    tw_events_options o = options(flush_secs, max_queue);
    return f->w = create(f->dir, &o);
}

static const Twpb__Summary__Value *only_value(const Twpb__Event *ev)
{
    assert_int_equal(ev->what_case, TWPB__EVENT__WHAT_SUMMARY);
    assert_int_equal(ev->summary->n_value, 1);
    return ev->summary->value[0];
}

/* ---- naming and the first record ---- */

static void test_file_name_and_version_record(void **state)
{
    fixture *f = *state;
    time_t before = time(NULL);
    double precise_before = tw_test_realtime();
    tw_events_writer *w = f->w = create(f->dir, NULL);
    double precise_after = tw_test_realtime();
    time_t after = time(NULL);
    const char *path = tw_events_path(w);
    assert_memory_equal(path, f->dir, strlen(f->dir));
    const char *base = path + strlen(f->dir) + 1;
    regex_t re;
    const char *pattern = "^events\\.out\\.tfevents\\.([0-9]{10})\\.[A-Za-z0-9._-]+\\.([0-9]+)$";
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED), 0);
    regmatch_t m[3];
    assert_int_equal(regexec(&re, base, 3, m, 0), 0);
    regfree(&re);
    long long secs = strtoll(base + m[1].rm_so, NULL, 10);
    assert_true(secs >= (long long)before && secs <= (long long)after);
    assert_int_equal(strtol(base + m[2].rm_so, NULL, 10), (long)getpid());

    /* Flushed at creation: readable before any flush or close. */
    events e;
    read_events(path, &e);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.ev[0]->what_case, TWPB__EVENT__WHAT_FILE_VERSION);
    assert_string_equal(e.ev[0]->file_version, "brain.Event:2");
    /* wall_time is CLOCK_REALTIME's; time() reads a coarser clock that may lag it by a tick */
    assert_true(e.ev[0]->wall_time >= precise_before && e.ev[0]->wall_time <= precise_after);
    free_events(&e);
    tw_error err;
    assert_int_equal(tw_events_close(w, &err), TW_OK);
}

/* A taken name gets the ".1" counter and the existing file is left alone. Placeholders cover the
 * current second and the next three, so the test does not depend on the clock ticking. */
static void test_existing_name_is_never_reused(void **state)
{
    fixture *f = *state;
    char path[1024];
    tw_events_writer *w1 = f->w = create(f->dir, NULL);
    const char *base1 = strrchr(tw_events_path(w1), '/') + 1;
    const char *prefix = "events.out.tfevents.";
    long long secs = strtoll(base1 + strlen(prefix), NULL, 10);
    const char *rest = base1 + strlen(prefix) + 10; /* ".<host>.<pid>" */
    for (int k = 1; k <= 3; k++) {
        snprintf(path, sizeof path, "%s/%s%010lld%s", f->dir, prefix, secs + k, rest);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs("keep", fp);
        fclose(fp);
    }
    tw_events_writer *w2 = create(f->dir, NULL);
    const char *p2 = tw_events_path(w2);
    size_t n = strlen(p2);
    assert_string_equal(p2 + n - 2, ".1");
    snprintf(path, sizeof path, "%.*s", (int)(n - 2), p2);
    struct stat st;
    assert_int_equal(stat(path, &st), 0); /* the name it skipped exists */
    for (int k = 1; k <= 3; k++) {
        snprintf(path, sizeof path, "%s/%s%010lld%s", f->dir, prefix, secs + k, rest);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, 4);
    }
    assert_int_equal(count_records(tw_events_path(w1)), 1);
    tw_events_destroy(w2);
}

/* ---- each kind of event ---- */

static void test_scalars_including_zero(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = f->w = create(f->dir, NULL);
    const float v[] = {1.5f, 0.0f, -2.0f, NAN, 1e30f};
    tw_error err;
    for (int i = 0; i < 5; i++)
        assert_int_equal(tw_events_add_scalar(w, "loss", 10 + i, v[i], &err), TW_OK);
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    events e;
    read_events(tw_events_path(w), &e);
    assert_int_equal(e.n, 6);
    for (int i = 0; i < 5; i++) {
        const Twpb__Event *ev = e.ev[1 + i];
        assert_int_equal(ev->step, 10 + i);
        assert_true(ev->wall_time >= e.ev[0]->wall_time);
        const Twpb__Summary__Value *sv = only_value(ev);
        assert_string_equal(sv->tag, "loss");
        /* The case is set only when the field is on the wire: 0.0 must be written, not elided. */
        assert_int_equal(sv->value_case, TWPB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        if (isnan(v[i]))
            assert_true(isnan(sv->simple_value));
        else
            assert_true(sv->simple_value == v[i]);
    }
    free_events(&e);
}

static void test_histogram_event(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = f->w = create(f->dir, NULL);
    float v[257];
    for (int i = 0; i < 257; i++)
        v[i] = (float)((i * 37) % 101 - 50) / 100.0f; /* every value -0.5, -0.49, ..., 0.5 */
    tw_error err;
    assert_int_equal(tw_events_add_histogram(w, "layer1/weights", 3, v, 257, &err), TW_OK);
    const float bad[] = {1.0f, INFINITY};
    assert_int_equal(tw_events_add_histogram(w, "layer1/bias", 4, bad, 2, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "layer1/bias"));
    assert_int_equal(tw_events_status(w, &err), TW_OK); /* bad input does not degrade the writer */
    assert_int_equal(tw_events_close(w, &err), TW_OK);

    tw_histogram h;
    tw_histogram_init(&h);
    assert_int_equal(tw_histogram_add_floats(&h, v, 257, "x", &err), TW_OK);
    tw_histogram_proto want;
    tw_histogram_encode(&h, &want);
    events e;
    read_events(tw_events_path(w), &e);
    assert_int_equal(e.n, 2);
    assert_int_equal(e.ev[1]->step, 3);
    const Twpb__Summary__Value *sv = only_value(e.ev[1]);
    assert_string_equal(sv->tag, "layer1/weights");
    assert_int_equal(sv->value_case, TWPB__SUMMARY__VALUE__VALUE_HISTO);
    const Twpb__HistogramProto *got = sv->histo;
    assert_true(got->min == -0.5 && got->max == 0.5 && got->num == 257.0);
    assert_true(got->sum == want.proto.sum && got->sum_squares == want.proto.sum_squares);
    assert_int_equal(got->n_bucket, want.proto.n_bucket);
    assert_int_equal(got->n_bucket_limit, want.proto.n_bucket);
    assert_memory_equal(got->bucket, want.counts, want.proto.n_bucket * sizeof(double));
    assert_memory_equal(got->bucket_limit, want.limits, want.proto.n_bucket * sizeof(double));
    free_events(&e);
}

static void test_text_graph_and_session_start(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = f->w = create(f->dir, NULL);
    tw_error err;
    const char *json = "{\"lr\": 0.01, \"layers\": [784, 500, 10]}";
    assert_int_equal(tw_events_add_text(w, "config", 0, json, &err), TW_OK);
    /* GraphDef{node {name: "x" op: "Placeholder"}} written by hand. */
    const uint8_t graph[] = {0x0a, 0x10, 0x0a, 0x01, 'x', 0x12, 0x0b, 'P', 'l', 'a', 'c', 'e',
                             'h', 'o', 'l', 'd', 'e', 'r'};
    assert_int_equal(tw_events_add_graph(w, graph, sizeof graph, &err), TW_OK);
    const uint8_t garbage[] = {0xff, 0xff, 0xff};
    assert_int_equal(tw_events_add_graph(w, garbage, sizeof garbage, &err), TW_ERR_INVALID);
    assert_int_equal(tw_events_add_session_start(w, 7, &err), TW_OK);
    assert_int_equal(tw_events_close(w, &err), TW_OK);

    events e;
    read_events(tw_events_path(w), &e);
    assert_int_equal(e.n, 4);
    const Twpb__Summary__Value *text = only_value(e.ev[1]);
    assert_string_equal(text->tag, "config");
    assert_int_equal(text->value_case, TWPB__SUMMARY__VALUE__VALUE_TENSOR);
    assert_int_equal(text->tensor->dtype, TWPB__DATA_TYPE__DT_STRING);
    assert_true(!text->tensor->tensor_shape || text->tensor->tensor_shape->n_dim == 0);
    assert_int_equal(text->tensor->n_string_val, 1);
    assert_int_equal(text->tensor->string_val[0].len, strlen(json));
    assert_memory_equal(text->tensor->string_val[0].data, json, strlen(json));
    assert_string_equal(text->metadata->plugin_data->plugin_name, "text");
    assert_int_equal(text->metadata->data_class, TWPB__DATA_CLASS__DATA_CLASS_TENSOR);
    assert_int_equal(e.ev[2]->what_case, TWPB__EVENT__WHAT_GRAPH_DEF);
    assert_int_equal(e.ev[2]->step, 0);
    assert_int_equal(e.ev[2]->graph_def.len, sizeof graph);
    assert_memory_equal(e.ev[2]->graph_def.data, graph, sizeof graph);
    assert_int_equal(e.ev[3]->what_case, TWPB__EVENT__WHAT_SESSION_LOG);
    assert_int_equal(e.ev[3]->step, 7);
    assert_int_equal(e.ev[3]->session_log->status, TWPB__SESSION_LOG__SESSION_STATUS__START);
    free_events(&e);
}

/* ---- flushing ---- */

static void test_flush_by_count_and_on_demand(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = start(f, 0, 3);
    const char *path = tw_events_path(w);
    tw_error err;
    assert_int_equal(count_records(path), 1);
    assert_int_equal(tw_events_add_scalar(w, "a", 0, 1.0f, &err), TW_OK);
    assert_int_equal(tw_events_add_scalar(w, "a", 1, 1.0f, &err), TW_OK);
    assert_int_equal(count_records(path), 1); /* two pending, still in memory */
    assert_int_equal(tw_events_add_scalar(w, "a", 2, 1.0f, &err), TW_OK);
    assert_int_equal(count_records(path), 4); /* the third one flushed all three */
    assert_int_equal(tw_events_add_scalar(w, "a", 3, 1.0f, &err), TW_OK);
    assert_int_equal(count_records(path), 4);
    assert_int_equal(tw_events_flush(w, &err), TW_OK);
    assert_int_equal(count_records(path), 5);
    assert_int_equal(tw_events_add_scalar(w, "a", 4, 1.0f, &err), TW_OK);
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    assert_int_equal(count_records(path), 6);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_flush_by_time(void **state)
{
    fixture *f = *state;
    tw_events_options o = options(0.05, 100);
    o.fsync = 1;
    tw_events_writer *w = f->w = create(f->dir, &o);
    tw_error err;
    assert_int_equal(tw_events_add_scalar(w, "a", 0, 2.0f, &err), TW_OK);
    size_t n = 0;
    for (int tries = 0; tries < 500 && (n = count_records(tw_events_path(w))) < 2; tries++)
        sleep_ms(10);
    assert_int_equal(n, 2);
    assert_int_equal(tw_events_close(w, &err), TW_OK);
}

/* ---- threads ---- */

typedef struct {
    tw_events_writer *w;
    int id;
} worker;

static void *add_many(void *arg)
{
    const worker *k = arg;
    char tag[16];
    snprintf(tag, sizeof tag, "thread%d", k->id);
    for (int j = 0; j < PER_THREAD; j++)
        if (tw_events_add_scalar(k->w, tag, j, (float)(k->id * 1000 + j), NULL) != TW_OK)
            return (void *)1;
    return NULL;
}

static void test_threads_add_concurrently(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = start(f, 0.001, 7); /* the flusher runs while the workers add */
    pthread_t t[THREADS];
    worker k[THREADS];
    for (int i = 0; i < THREADS; i++) {
        k[i] = (worker){.w = w, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, add_many, &k[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *rc;
        assert_int_equal(pthread_join(t[i], &rc), 0);
        assert_null(rc);
    }
    tw_error err;
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    events *e = malloc(sizeof *e);
    assert_non_null(e);
    read_events(tw_events_path(w), e);
    assert_int_equal(e->n, 1 + THREADS * PER_THREAD);
    static char seen[THREADS][PER_THREAD];
    memset(seen, 0, sizeof seen);
    for (size_t i = 1; i < e->n; i++) {
        const Twpb__Summary__Value *sv = only_value(e->ev[i]);
        int id = sv->tag[6] - '0';
        int64_t step = e->ev[i]->step;
        assert_true(id >= 0 && id < THREADS && step >= 0 && step < PER_THREAD);
        assert_true(sv->simple_value == (float)(id * 1000 + step));
        assert_int_equal(seen[id][step]++, 0);
    }
    free_events(e);
    free(e);
}

/* ---- failures ---- */

typedef struct {
    struct rlimit old;
    void (*old_handler)(int);
} fsize_limit;

/* Lets the process grow files only `extra` bytes past `path`'s size; writes past it fail with EFBIG
 * (SIGXFSZ ignored). Only the soft limit changes, so restore_fsize can always undo it. */
static fsize_limit limit_fsize(const char *path, off_t extra)
{
    fsize_limit l;
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &l.old), 0);
    l.old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = l.old;
    lim.rlim_cur = (rlim_t)(st.st_size + extra);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    return l;
}

static void restore_fsize(const fsize_limit *l)
{
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &l->old), 0);
    signal(SIGXFSZ, l->old_handler);
}

static void test_failed_write_degrades_and_keeps_whole_records(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = start(f, 0, 1000);
    const char *path = tw_events_path(w);
    tw_error err;
    assert_int_equal(tw_events_add_scalar(w, "a", 0, 1.0f, &err), TW_OK);
    assert_int_equal(tw_events_add_scalar(w, "a", 1, 1.0f, &err), TW_OK);
    assert_int_equal(tw_events_flush(w, &err), TW_OK);
    struct stat good;
    assert_int_equal(stat(path, &good), 0);

    fsize_limit l = limit_fsize(path, 100);
    for (int i = 2; i < 102; i++) /* ~3 KB buffered: past the limit once flushed */
        assert_int_equal(tw_events_add_scalar(w, "a", i, 1.0f, &err), TW_OK);
    tw_status s = tw_events_flush(w, &err);
    restore_fsize(&l);
    assert_int_equal(s, TW_ERR_IO);
    assert_int_equal(err.errno_value, EFBIG);
    assert_non_null(strstr(err.message, strerror(EFBIG)));

    tw_error later;
    assert_int_equal(tw_events_add_scalar(w, "a", 200, 1.0f, &later), TW_ERR_IO);
    assert_string_equal(later.message, err.message);
    assert_int_equal(tw_events_add_text(w, "t", 0, "x", &later), TW_ERR_IO);
    assert_int_equal(tw_events_flush(w, &later), TW_ERR_IO);
    assert_int_equal(tw_events_status(w, &later), TW_ERR_IO);
    assert_int_equal(tw_events_close(w, &later), TW_ERR_IO);
    assert_int_equal(tw_events_add_scalar(w, "a", 201, 1.0f, &later), TW_ERR_INVALID);

    struct stat after;
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_size, good.st_size); /* cut back: no torn record */
    assert_int_equal(count_records(path), 3);
}

/* A failure met by the background flusher surfaces through the next call. */
static void test_background_failure_is_reported(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = start(f, 0.01, 100000);
    const char *path = tw_events_path(w);
    tw_error err;
    fsize_limit l = limit_fsize(path, 100);
    tw_status s = TW_OK;
    for (int i = 0; i < 100000 && s == TW_OK; i++) {
        s = tw_events_add_scalar(w, "a", i, 1.0f, &err);
        if (i % 100 == 99)
            sleep_ms(1);
    }
    restore_fsize(&l);
    assert_int_equal(s, TW_ERR_IO);
    assert_int_equal(err.errno_value, EFBIG);
    assert_int_equal(tw_events_status(w, &err), TW_ERR_IO);
    assert_true(count_records(path) >= 1); /* whatever is there reads cleanly to the end */
}

/* ---- misuse ---- */

static void test_bad_arguments_and_closed_writer(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = NULL;
    tw_error err;
    tw_events_options o = options(-1, 100);
    assert_int_equal(tw_events_create(f->dir, &o, &w, &err), TW_ERR_INVALID);
    o = options(NAN, 100);
    assert_int_equal(tw_events_create(f->dir, &o, &w, &err), TW_ERR_INVALID);
    o = options(0, 0);
    assert_int_equal(tw_events_create(f->dir, &o, &w, &err), TW_ERR_INVALID);
    assert_null(w);
    assert_int_equal(tw_events_create("", NULL, &w, &err), TW_ERR_INVALID);
    assert_int_equal(tw_events_create("/proc/no/such/dir", NULL, &w, &err), TW_ERR_IO);

    f->w = w = create(f->dir, NULL);
    assert_int_equal(tw_events_add_scalar(w, "", 0, 1.0f, &err), TW_ERR_INVALID);
    assert_int_equal(tw_events_add_scalar(w, NULL, 0, 1.0f, &err), TW_ERR_INVALID);
    assert_int_equal(tw_events_add_text(w, "t", 0, NULL, &err), TW_ERR_INVALID);
    assert_int_equal(tw_events_status(w, &err), TW_OK);
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    assert_int_equal(tw_events_add_scalar(w, "a", 0, 1.0f, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "closed"));
    assert_int_equal(tw_events_flush(w, &err), TW_ERR_INVALID);
    assert_int_equal(count_records(tw_events_path(w)), 1);
    tw_events_destroy(NULL);
}

/* Summary.Value.image: height, width, colorspace and a PNG of those pixels; a bad image is refused by
 * name and leaves the writer healthy. */
static void test_image_event(void **state)
{
    fixture *f = *state;
    tw_events_writer *w = f->w = create(f->dir, NULL);
    uint8_t px[4 * 3 * 3];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 11);
    tw_png_image img = {.pixels = px, .width = 4, .height = 3, .channels = 3};
    tw_error err;
    assert_int_equal(tw_events_add_image(w, "input/samples", 7, &img, &err), TW_OK);
    tw_png_image bad = {.pixels = px, .width = 4, .height = 3, .channels = 2};
    assert_int_equal(tw_events_add_image(w, "conv/filters", 8, &bad, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "conv/filters"));
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    events e;
    read_events(tw_events_path(w), &e);
    assert_int_equal(e.n, 2);
    assert_int_equal(e.ev[1]->step, 7);
    const Twpb__Summary__Value *v = only_value(e.ev[1]);
    assert_string_equal(v->tag, "input/samples");
    assert_int_equal(v->value_case, TWPB__SUMMARY__VALUE__VALUE_IMAGE);
    assert_int_equal(v->image->height, 3);
    assert_int_equal(v->image->width, 4);
    assert_int_equal(v->image->colorspace, 3);
    png_image dec;
    memset(&dec, 0, sizeof dec);
    dec.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_memory(&dec, v->image->encoded_image_string.data,
                                                 v->image->encoded_image_string.len));
    dec.format = PNG_FORMAT_RGB;
    uint8_t back[sizeof px];
    assert_int_equal(PNG_IMAGE_SIZE(dec), sizeof back);
    assert_true(png_image_finish_read(&dec, NULL, back, 0, NULL));
    assert_memory_equal(back, px, sizeof px);
    free_events(&e);
}

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_file_name_and_version_record),
        TEST(test_existing_name_is_never_reused),
        TEST(test_scalars_including_zero),
        TEST(test_histogram_event),
        TEST(test_text_graph_and_session_start),
        TEST(test_image_event),
        TEST(test_flush_by_count_and_on_demand),
        TEST(test_flush_by_time),
        TEST(test_threads_add_concurrently),
        TEST(test_failed_write_degrades_and_keeps_whole_records),
        TEST(test_background_failure_is_reported),
        TEST(test_bad_arguments_and_closed_writer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
