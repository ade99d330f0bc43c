/* events.h — the tfevents writer: one event file per writer that stock TensorBoard reads.
 *
 * Owns: the event file's name (`events.out.tfevents.<%010lld seconds>.<hostname>.<pid>`, plus
 * `.<n>` when that name is taken — a writer never appends to an existing file), its descriptor, the
 * first record Event{wall_time, file_version = "brain.Event:2"} (docs/formats.md §3.2), the Event
 * messages for scalars (Summary.Value.simple_value), histograms (HistogramProto with TF's default
 * buckets, histogram.h), images (the legacy Summary.Image holding a PNG, png_encode.h), the graph
 * (Event.graph_def), text (a DT_STRING rank-0 tensor with "text" plugin metadata), other plugins'
 * null-tensor summaries and SessionLog START, and when bytes reach the disk: by count (max_queue
 * events), by time (a background flusher every flush_secs), on tw_events_flush and at close.
 * Does not own: the TFRecord framing (tfrecord.h, always uncompressed here: TensorBoard reads no
 * compressed event files), the GraphDef contents (graph.h) or reading event files back.
 *
 * Thread-safety: every function on one writer may be called from any thread; one mutex serializes
 * them and the background flusher.
 * Failures: a failed write (disk full, EFBIG, EIO) returns TW_ERR_IO with the errno message and
 * marks the writer degraded: the file is cut back to the end of the last successful flush (readers
 * never see a torn record), and every later call returns the same error without touching the file.
 * An error found by the background flusher is reported by the next call. Bad arguments (empty tag,
 * NaN in a histogram) return TW_ERR_INVALID and leave the writer healthy. */
#ifndef TW_EVENTS_H
#define TW_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "png_encode.h"
#include "status.h"

typedef struct {
    double flush_secs;  /* background flush period in seconds; default 10; 0 = no flusher thread */
    size_t max_queue;   /* flush once this many events are pending; default 100; must be >= 1 */
    int fsync;          /* also fsync on every flush and at close; default 0 */
} tw_events_options;

/* Fills *o with the defaults above. */
void tw_events_options_default(tw_events_options *o);

typedef struct tw_events_writer tw_events_writer;

/* Creates logdir if it does not exist (its parent must), creates a new event file in it with O_EXCL
 * and writes and flushes the file_version record. logdir and opts are borrowed (opts NULL =
 * defaults). Caller owns *out (tw_events_close, then tw_events_destroy).
 * Errors: TW_ERR_INVALID (bad options), TW_ERR_IO (mkdir/open/write), TW_ERR_NOMEM, TW_ERR_INTERNAL
 * (thread creation). On error nothing is left on disk but the folder. */
tw_status tw_events_create(const char *logdir, const tw_events_options *opts,
                           tw_events_writer **out, tw_error *err);

/* A small event file of its own in logdir, written whole: created as tw_events_create does (fsync at close),
 * fill(w, ctx, err) appends its records, then it is closed and destroyed. For a writer that is not the run's
 * (the server, at a state only it knows). Errors: tw_events_create's, fill's, the close's. */
tw_status tw_events_write_file(const char *logdir, tw_status (*fill)(tw_events_writer *w, void *ctx, tw_error *err),
                               void *ctx, tw_error *err);

/* Path of the event file (borrowed; valid until tw_events_destroy). */
const char *tw_events_path(const tw_events_writer *w);

/* Appends Summary{Value{tag, simple_value = value}} at step. Any float is written, NaN included (TF
 * does too). tag is borrowed during the call. Errors: TW_ERR_INVALID (empty tag, closed writer),
 * TW_ERR_IO (see above), TW_ERR_NOMEM. */
tw_status tw_events_add_scalar(tw_events_writer *w, const char *tag, int64_t step, float value,
                               tw_error *err);

/* Appends a histogram of values[n] (borrowed during the call) with TF's default buckets. A NaN or
 * an infinity is TW_ERR_INVALID naming the tag and nothing is written; the caller decides what to
 * do. */
tw_status tw_events_add_histogram(tw_events_writer *w, const char *tag, int64_t step,
                                  const float *values, size_t n, tw_error *err);

/* Appends the legacy image summary Summary.Value{tag, image = {height, width, colorspace = 1 (gray) or
 * 3 (RGB), encoded_image_string = the PNG of *img}} at step: TensorBoard's IMAGES tab (both loaders
 * migrate it to the images plugin). img is borrowed during the call. Errors: tw_png_encode's (a bad or
 * too large image: TW_ERR_INVALID / TW_ERR_TOO_LARGE naming the tag, and the writer stays healthy), and
 * the writer's. */
tw_status tw_events_add_image(tw_events_writer *w, const char *tag, int64_t step, const tw_png_image *img,
                              tw_error *err);

/* Appends Event{step = 0, graph_def = bytes}; graphdef[len] (borrowed during the call) must parse
 * as a GraphDef (tw_graph_serialize makes one), else TW_ERR_INVALID. */
tw_status tw_events_add_graph(tw_events_writer *w, const uint8_t *graphdef, size_t len,
                              tw_error *err);

/* Appends a text summary: a rank-0 DT_STRING tensor holding text (borrowed during the call;
 * markdown in TensorBoard's Text tab) with metadata plugin_name "text", data_class
 * DATA_CLASS_TENSOR. */
tw_status tw_events_add_text(tw_events_writer *w, const char *tag, int64_t step, const char *text,
                             tw_error *err);

/* Appends a plugin's summary: Summary.Value{tag, tensor = DT_FLOAT of shape [0] (the null tensor
 * TensorBoard's loaders add themselves), metadata = {plugin_data = {plugin_name, content[len]},
 * data_class = DATA_CLASS_TENSOR}}, as the hparams plugin reads (hparams.h). Strings and content are
 * borrowed during the call. TensorBoard keeps the metadata of a (run, tag)'s first value only. */
tw_status tw_events_add_plugin_tensor(tw_events_writer *w, const char *tag, int64_t step,
                                     const char *plugin_name, const uint8_t *content, size_t len,
                                     tw_error *err);

/* Appends SessionLog{status = START} at step. Write it first when resuming from a checkpoint at
 * step: TensorBoard then drops the points at steps >= step left by the interrupted run. */
tw_status tw_events_add_session_start(tw_events_writer *w, int64_t step, tw_error *err);

/* Hands every pending byte to the file (and fsyncs when opts.fsync). */
tw_status tw_events_flush(tw_events_writer *w, tw_error *err);

/* Stops the flusher, flushes, and closes the file. Returns the writer's first failure, if any (the
 * file is closed regardless). Later calls on w return TW_ERR_INVALID; calling close twice is
 * allowed. */
tw_status tw_events_close(tw_events_writer *w, tw_error *err);

/* TW_OK while healthy, else the status of the failure that degraded the writer (into *err). */
tw_status tw_events_status(tw_events_writer *w, tw_error *err);

/* Closes (ignoring errors) if still open, and frees w. NULL-safe. */
void tw_events_destroy(tw_events_writer *w);

#endif
