/* events.c — tfevents writer over tw_tfrecord_writer, protobuf-c Event messages and one mutex.
 * See events.h.
 *
 * Every add_* builds its Event on the stack (pointing at the caller's strings and values), then
 * append() takes the lock, stamps wall_time, packs into the writer's buffer and hands the record to
 * the TFRecord writer; bytes reach the file on a flush (count, timer, explicit, close). good_bytes
 * remembers the file size after the last successful flush, which always ends on a record boundary:
 * a failed write cuts the file back to it. */
#include "events.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "datafs.h"
#include "event.pb-c.h"
#include "graph.pb-c.h"
#include "histogram.h"
#include "tfrecord.h"

enum { MAX_NAME_TRIES = 1000, HOST_BYTES = 256, MIN_BUF_BYTES = 256 };

static const double MAX_FLUSH_SECS = 86400.0;
static const char FILE_VERSION[] = "brain.Event:2";

struct tw_events_writer {
    pthread_mutex_t mu;        /* guards everything below */
    pthread_cond_t wake;       /* signals the flusher to stop; uses CLOCK_MONOTONIC */
    int sync_ready;            /* mu and wake are initialised */
    pthread_t flusher;
    int has_flusher;           /* a flusher thread exists and nobody has joined it yet */
    int stopping;              /* the flusher must exit */
    int closed;
    tw_events_options opts;
    char *path;                /* owned */
    int fd;                    /* owned, -1 once closed */
    tw_tfrecord_writer *rec;   /* owned; borrows fd and path */
    uint8_t *buf;              /* [cap] packing buffer for one Event, owned */
    size_t cap;
    size_t pending;            /* events handed to rec since the last flush */
    uint64_t good_bytes;       /* file size after the last successful flush */
    tw_error failure;          /* status TW_OK while healthy; else why the writer is degraded */
};

void tw_events_options_default(tw_events_options *o)
{
    o->flush_secs = 10.0;
    o->max_queue = 100;
    o->fsync = 0;
}

/* CLOCK_REALTIME as double seconds; 0 if the clock fails (RustBoard kills a file on a NaN
 * wall_time). */
static double now_secs(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0.0;
    double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return isfinite(t) ? t : 0.0;
}

/* ---- state, failure and flushing (all called with mu held) ---- */

static tw_status copy_failure(const tw_events_writer *w, tw_error *err)
{
    if (err)
        *err = w->failure;
    return w->failure.status;
}

static tw_status check_usable(const tw_events_writer *w, tw_error *err)
{
    if (w->closed)
        return tw_error_set(err, TW_ERR_INVALID, w->path, -1, "the events writer is closed");
    return copy_failure(w, err);
}

/* Marks w degraded with *why, cuts the file back to the last flushed record boundary (best effort:
 * the write already failed) and reports why. */
static tw_status degrade(tw_events_writer *w, const tw_error *why, tw_error *err)
{
    w->failure = *why;
    if (w->fd >= 0 && ftruncate(w->fd, (off_t)w->good_bytes) != 0) {
        size_t len = strlen(w->failure.message);
        snprintf(w->failure.message + len, sizeof w->failure.message - len,
                 " (and the file could not be cut back to its last whole record)");
    }
    return copy_failure(w, err);
}

static tw_status flush_locked(tw_events_writer *w, tw_error *err)
{
    TW_TRY(copy_failure(w, err));
    tw_error e;
    tw_error_clear(&e);
    tw_status s = tw_tfrecord_writer_flush(w->rec, &e);
    if (s == TW_OK && w->opts.fsync && fsync(w->fd) != 0)
        s = tw_error_errno(&e, w->path, "fsync failed");
    if (s != TW_OK)
        return degrade(w, &e, err);
    w->good_bytes = tw_tfrecord_writer_bytes(w->rec);
    w->pending = 0;
    return TW_OK;
}

static tw_status reserve(tw_events_writer *w, size_t n, tw_error *err)
{
    if (n <= w->cap)
        return TW_OK;
    size_t cap = n > 2 * w->cap ? n : 2 * w->cap;
    cap = cap < MIN_BUF_BYTES ? MIN_BUF_BYTES : cap;
    uint8_t *buf = realloc(w->buf, cap);
    if (!buf)
        return tw_error_set(err, TW_ERR_NOMEM, w->path, -1, "out of memory packing an event");
    w->buf = buf;
    w->cap = cap;
    return TW_OK;
}

static tw_status append_locked(tw_events_writer *w, Twpb__Event *ev, tw_error *err)
{
    TW_TRY(check_usable(w, err));
    ev->wall_time = now_secs();
    size_t n = twpb__event__get_packed_size(ev);
    TW_TRY(reserve(w, n, err));
    twpb__event__pack(ev, w->buf);
    tw_error e;
    tw_error_clear(&e);
    if (tw_tfrecord_write(w->rec, w->buf, n, &e) != TW_OK)
        return degrade(w, &e, err);
    if (++w->pending >= w->opts.max_queue)
        return flush_locked(w, err);
    return TW_OK;
}

static tw_status append(tw_events_writer *w, Twpb__Event *ev, tw_error *err)
{
    pthread_mutex_lock(&w->mu);
    tw_status s = append_locked(w, ev, err);
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* ---- background flusher ---- */

/* Every flush_secs, flushes whatever is pending; a failure degrades the writer and is reported by
 * the next call. Spurious wake-ups wait again for the same deadline. */
static void *flusher_main(void *arg)
{
    tw_events_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        struct timespec deadline = tw_mono_after(w->opts.flush_secs);
        int rc = 0;
        while (!w->stopping && rc == 0)
            rc = pthread_cond_timedwait(&w->wake, &w->mu, &deadline);
        if (!w->stopping && w->pending > 0)
            flush_locked(w, NULL);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static tw_status start_flusher(tw_events_writer *w, tw_error *err)
{
    if (w->opts.flush_secs <= 0.0)
        return TW_OK;
    int rc = pthread_create(&w->flusher, NULL, flusher_main, w);
    if (rc != 0) /* EAGAIN: no room for its stack (an address-space limit) or no thread left */
        return tw_error_set(err, rc == EAGAIN ? TW_ERR_NOMEM : TW_ERR_INTERNAL, w->path, -1,
                            "cannot start the event flusher thread: %s", strerror(rc));
    w->has_flusher = 1;
    return TW_OK;
}

/* Stops and joins the flusher; safe to call from several threads (only one joins). */
static void stop_flusher(tw_events_writer *w)
{
    pthread_mutex_lock(&w->mu);
    int join = w->has_flusher;
    w->has_flusher = 0;
    w->stopping = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->mu);
    if (join)
        pthread_join(w->flusher, NULL);
}

/* ---- creation ---- */

static tw_status check_options(const tw_events_options *o, tw_error *err)
{
    if (!(o->flush_secs >= 0.0 && o->flush_secs <= MAX_FLUSH_SECS))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "flush_secs must be between 0 and %g (got %g)", MAX_FLUSH_SECS,
                            o->flush_secs);
    if (o->max_queue < 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "max_queue must be at least 1");
    return TW_OK;
}

static tw_status init_sync(tw_events_writer *w, tw_error *err)
{
    TW_CHECK_FOREIGN(tw_cond_init_mono(&w->wake) == 0, err, TW_ERR_INTERNAL, "pthread");
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        pthread_cond_destroy(&w->wake);
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "pthread_mutex_init failed");
    }
    w->sync_ready = 1;
    return TW_OK;
}

/* gethostname, with anything but [A-Za-z0-9._-] replaced by '_': one safe path component. */
static void hostname(char *buf, size_t size)
{
    if (gethostname(buf, size) != 0 || !buf[0])
        snprintf(buf, size, "localhost");
    buf[size - 1] = '\0';
    for (char *p = buf; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
            *p = '_';
}

/* Sets w->path to try number `n` of the name (n = 0: no counter suffix). */
static tw_status name_file(tw_events_writer *w, const char *logdir, long long secs,
                           const char *host, unsigned n, tw_error *err)
{
    size_t size = strlen(logdir) + strlen(host) + 96;
    free(w->path);
    if (!(w->path = malloc(size)))
        return tw_error_set(err, TW_ERR_NOMEM, logdir, -1, "out of memory");
    int len = snprintf(w->path, size, "%s/events.out.tfevents.%010lld.%s.%ld", logdir, secs, host,
                       (long)getpid());
    if (n > 0)
        snprintf(w->path + len, size - (size_t)len, ".%u", n);
    return TW_OK;
}

/* Creates logdir if needed and a new event file in it, never reusing an existing name. */
static tw_status open_file(tw_events_writer *w, const char *logdir, tw_error *err)
{
    if (!logdir || !logdir[0])
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "no log folder given");
    if (tw_fs_mkdir(logdir, 0755) != 0 && errno != EEXIST)
        return tw_fs_error(err, logdir, "cannot create the log folder");
    char host[HOST_BYTES];
    hostname(host, sizeof host);
    long long secs = (long long)time(NULL);
    for (unsigned n = 0; n < MAX_NAME_TRIES; n++) {
        TW_TRY(name_file(w, logdir, secs, host, n, err));
        w->fd = tw_fs_open(w->path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (w->fd >= 0)
            return TW_OK;
        if (errno != EEXIST)
            return tw_fs_error(err, w->path, "cannot create the event file");
    }
    return tw_error_set(err, TW_ERR_IO, logdir, -1, "no free event file name after %d tries",
                        MAX_NAME_TRIES);
}

/* The first record, flushed at once (docs/formats.md §3.2). */
static tw_status write_version(tw_events_writer *w, tw_error *err)
{
    Twpb__Event ev = TWPB__EVENT__INIT;
    ev.what_case = TWPB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)FILE_VERSION;
    pthread_mutex_lock(&w->mu);
    tw_status s = append_locked(w, &ev, err);
    if (s == TW_OK)
        s = flush_locked(w, err);
    pthread_mutex_unlock(&w->mu);
    return s;
}

tw_status tw_events_create(const char *logdir, const tw_events_options *opts,
                           tw_events_writer **out, tw_error *err)
{
    *out = NULL;
    tw_events_options o;
    tw_events_options_default(&o);
    if (opts)
        o = *opts;
    TW_TRY(check_options(&o, err));
    tw_events_writer *w = calloc(1, sizeof *w);
    if (!w)
        return tw_error_set(err, TW_ERR_NOMEM, logdir, -1, "out of memory");
    w->fd = -1;
    w->opts = o;
    tw_error_clear(&w->failure);
    tw_status s = init_sync(w, err);
    if (s == TW_OK)
        s = open_file(w, logdir, err);
    if (s == TW_OK)
        s = tw_tfrecord_writer_create(w->fd, TW_COMPRESSION_NONE, w->path, &w->rec, err);
    if (s == TW_OK)
        s = write_version(w, err);
    if (s == TW_OK)
        s = start_flusher(w, err);
    if (s != TW_OK) {
        if (w->fd >= 0) {
            close(w->fd);
            tw_fs_unlink(w->path);
            w->fd = -1;
        }
        w->closed = 1;
        tw_events_destroy(w);
        return s;
    }
    *out = w;
    return TW_OK;
}

const char *tw_events_path(const tw_events_writer *w) { return w->path; }

/* ---- events ---- */

static tw_status check_tag(const tw_events_writer *w, const char *tag, tw_error *err)
{
    if (!tag || !tag[0])
        return tw_error_set(err, TW_ERR_INVALID, w->path, -1, "a summary needs a non-empty tag");
    return TW_OK;
}

/* Appends Event{step, Summary{v}}; v->tag is set from tag. */
static tw_status add_value(tw_events_writer *w, const char *tag, int64_t step,
                           Twpb__Summary__Value *v, tw_error *err)
{
    v->tag = (char *)tag;
    Twpb__Summary summary = TWPB__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = &v;
    Twpb__Event ev = TWPB__EVENT__INIT;
    ev.step = step;
    ev.what_case = TWPB__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    return append(w, &ev, err);
}

tw_status tw_events_add_scalar(tw_events_writer *w, const char *tag, int64_t step, float value,
                               tw_error *err)
{
    TW_TRY(check_tag(w, tag, err));
    Twpb__Summary__Value v = TWPB__SUMMARY__VALUE__INIT;
    v.value_case = TWPB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = value;
    return add_value(w, tag, step, &v, err);
}

tw_status tw_events_add_histogram(tw_events_writer *w, const char *tag, int64_t step,
                                  const float *values, size_t n, tw_error *err)
{
    TW_TRY(check_tag(w, tag, err));
    if (!values && n)
        return tw_error_set(err, TW_ERR_INVALID, w->path, -1, "histogram '%s': no values", tag);
    struct {
        tw_histogram h;
        tw_histogram_proto p;
    } *scratch = malloc(sizeof *scratch);
    if (!scratch)
        return tw_error_set(err, TW_ERR_NOMEM, w->path, -1, "out of memory");
    tw_histogram_init(&scratch->h);
    tw_status s = tw_histogram_add_floats(&scratch->h, values, n, tag, err);
    if (s == TW_OK) {
        tw_histogram_encode(&scratch->h, &scratch->p);
        Twpb__Summary__Value v = TWPB__SUMMARY__VALUE__INIT;
        v.value_case = TWPB__SUMMARY__VALUE__VALUE_HISTO;
        v.histo = &scratch->p.proto;
        s = add_value(w, tag, step, &v, err);
    }
    free(scratch);
    return s;
}

tw_status tw_events_add_image(tw_events_writer *w, const char *tag, int64_t step, const tw_png_image *img,
                              tw_error *err)
{
    TW_TRY(check_tag(w, tag, err));
    uint8_t *png;
    size_t len;
    tw_error e;
    tw_status s = tw_png_encode(img, &png, &len, &e);
    if (s != TW_OK)
        return tw_error_set(err, s, w->path, -1, "image '%s': %s", tag, e.message);
    Twpb__Summary__Image image = TWPB__SUMMARY__IMAGE__INIT;
    image.height = img->height;
    image.width = img->width;
    image.colorspace = img->channels; /* 1 gray, 3 RGB: the colorspace numbers */
    image.encoded_image_string = (ProtobufCBinaryData){.len = len, .data = png};
    Twpb__Summary__Value v = TWPB__SUMMARY__VALUE__INIT;
    v.value_case = TWPB__SUMMARY__VALUE__VALUE_IMAGE;
    v.image = &image;
    s = add_value(w, tag, step, &v, err);
    free(png);
    return s;
}

/* Adds tensor (borrowed) under tag with the plugin's metadata (name, content) and the tensor data class:
 * the shape of every plugin summary (text, hparams). */
static tw_status add_tensor(tw_events_writer *w, const char *tag, int64_t step, const char *plugin_name,
                            ProtobufCBinaryData content, Twpb__TensorProto *tensor, tw_error *err)
{
    Twpb__SummaryMetadata__PluginData plugin = TWPB__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    plugin.plugin_name = (char *)plugin_name;
    plugin.content = content;
    Twpb__SummaryMetadata meta = TWPB__SUMMARY_METADATA__INIT;
    meta.plugin_data = &plugin;
    meta.data_class = TWPB__DATA_CLASS__DATA_CLASS_TENSOR;
    Twpb__Summary__Value v = TWPB__SUMMARY__VALUE__INIT;
    v.metadata = &meta;
    v.value_case = TWPB__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = tensor;
    return add_value(w, tag, step, &v, err);
}

tw_status tw_events_add_text(tw_events_writer *w, const char *tag, int64_t step, const char *text,
                             tw_error *err)
{
    TW_TRY(check_tag(w, tag, err));
    if (!text)
        return tw_error_set(err, TW_ERR_INVALID, w->path, -1, "text '%s': no text", tag);
    ProtobufCBinaryData str = {.len = strlen(text), .data = (uint8_t *)text};
    Twpb__TensorShapeProto scalar_shape = TWPB__TENSOR_SHAPE_PROTO__INIT;
    Twpb__TensorProto tensor = TWPB__TENSOR_PROTO__INIT;
    tensor.dtype = TWPB__DATA_TYPE__DT_STRING;
    tensor.tensor_shape = &scalar_shape;
    tensor.n_string_val = 1;
    tensor.string_val = &str;
    return add_tensor(w, tag, step, "text", (ProtobufCBinaryData){0}, &tensor, err);
}

tw_status tw_events_add_plugin_tensor(tw_events_writer *w, const char *tag, int64_t step,
                                     const char *plugin_name, const uint8_t *content, size_t len,
                                     tw_error *err)
{
    TW_TRY(check_tag(w, tag, err));
    if (!plugin_name || !*plugin_name || (!content && len))
        return tw_error_set(err, TW_ERR_INVALID, w->path, -1, "'%s': no plugin name or content", tag);
    Twpb__TensorShapeProto__Dim zero = TWPB__TENSOR_SHAPE_PROTO__DIM__INIT;
    Twpb__TensorShapeProto__Dim *dims = &zero;
    Twpb__TensorShapeProto shape = TWPB__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = &dims;
    Twpb__TensorProto tensor = TWPB__TENSOR_PROTO__INIT; /* DT_FLOAT [0]: the loaders' null tensor */
    tensor.dtype = TWPB__DATA_TYPE__DT_FLOAT;
    tensor.tensor_shape = &shape;
    return add_tensor(w, tag, step, plugin_name, (ProtobufCBinaryData){.len = len, .data = (uint8_t *)content},
                      &tensor, err);
}

tw_status tw_events_add_graph(tw_events_writer *w, const uint8_t *graphdef, size_t len,
                              tw_error *err)
{
    if (!graphdef && len)
        return tw_error_set(err, TW_ERR_INVALID, w->path, -1, "graph: no bytes");
    const uint8_t *bytes = graphdef ? graphdef : (const uint8_t *)"";
    Twpb__GraphDef *parsed = twpb__graph_def__unpack(NULL, len, bytes);
    if (!parsed)
        return tw_error_set(err, TW_ERR_INVALID, w->path, -1, "graph: %zu bytes are not a GraphDef",
                            len);
    twpb__graph_def__free_unpacked(parsed, NULL);
    Twpb__Event ev = TWPB__EVENT__INIT;
    ev.step = 0;
    ev.what_case = TWPB__EVENT__WHAT_GRAPH_DEF;
    ev.graph_def.len = len;
    ev.graph_def.data = (uint8_t *)bytes;
    return append(w, &ev, err);
}

tw_status tw_events_add_session_start(tw_events_writer *w, int64_t step, tw_error *err)
{
    Twpb__SessionLog log = TWPB__SESSION_LOG__INIT;
    log.status = TWPB__SESSION_LOG__SESSION_STATUS__START;
    Twpb__Event ev = TWPB__EVENT__INIT;
    ev.step = step;
    ev.what_case = TWPB__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &log;
    return append(w, &ev, err);
}

/* ---- flush, close, status ---- */

tw_status tw_events_flush(tw_events_writer *w, tw_error *err)
{
    pthread_mutex_lock(&w->mu);
    tw_status s = check_usable(w, err);
    if (s == TW_OK)
        s = flush_locked(w, err);
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Finishes the records, fsyncs if asked, closes the fd; the first failure wins. */
static tw_status close_locked(tw_events_writer *w, tw_error *err)
{
    tw_status s = copy_failure(w, err);
    if (s == TW_OK) {
        tw_error e;
        tw_error_clear(&e);
        s = tw_tfrecord_writer_finish(w->rec, &e);
        if (s == TW_OK && w->opts.fsync && fsync(w->fd) != 0)
            s = tw_error_errno(&e, w->path, "fsync failed");
        if (s == TW_OK)
            w->good_bytes = tw_tfrecord_writer_bytes(w->rec);
        else
            s = degrade(w, &e, err);
    }
    int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0 && s == TW_OK) {
        tw_error e;
        tw_error_errno(&e, w->path, "close failed");
        s = degrade(w, &e, err);
    }
    w->closed = 1;
    return s;
}

tw_status tw_events_close(tw_events_writer *w, tw_error *err)
{
    stop_flusher(w);
    pthread_mutex_lock(&w->mu);
    tw_status s = w->closed ? copy_failure(w, err) : close_locked(w, err);
    pthread_mutex_unlock(&w->mu);
    return s;
}

tw_status tw_events_status(tw_events_writer *w, tw_error *err)
{
    pthread_mutex_lock(&w->mu);
    tw_status s = copy_failure(w, err);
    pthread_mutex_unlock(&w->mu);
    return s;
}

void tw_events_destroy(tw_events_writer *w)
{
    if (!w)
        return;
    if (w->sync_ready) {
        tw_events_close(w, NULL);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->wake);
    }
    tw_tfrecord_writer_destroy(w->rec);
    free(w->buf);
    free(w->path);
    free(w);
}

tw_status tw_events_write_file(const char *logdir, tw_status (*fill)(tw_events_writer *w, void *ctx, tw_error *err),
                               void *ctx, tw_error *err)
{
    tw_events_options o;
    tw_events_options_default(&o);
    o.flush_secs = 0;
    o.fsync = 1;
    tw_events_writer *w;
    TW_TRY(tw_events_create(logdir, &o, &w, err));
    tw_status st = fill(w, ctx, err);
    tw_error close_err;
    tw_status c = tw_events_close(w, &close_err);
    if (st == TW_OK && c != TW_OK) {
        *err = close_err;
        st = c;
    }
    tw_events_destroy(w);
    return st;
}
