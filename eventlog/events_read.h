/* events_read.h — the scalar series of a run folder, read back from the tfevents files TensorBoard reads.
 *
 * Owns: choosing a folder's event files, decoding their Events into per-tag scalar series with
 * TensorBoard's rules (what counts as a scalar, restarts, out-of-order steps, torn tails), bounding the
 * memory that takes, and the JSON the server's GET /api/v1/runs/{id}/metrics returns. Also the JSON
 * spelling of a non-finite number that `tower inspect` shares. Does not own: writing event files
 * (events.h), HTTP (server/), or other kinds of summaries (histograms, text, images are skipped).
 *
 * Thread-safety: every function here is reentrant (no shared state); any number of threads may read the
 * same folder at once, also while a writer appends to it; a tw_events_scalars is used by one thread at a
 * time. */
#ifndef TW_EVENTS_READ_H
#define TW_EVENTS_READ_H

#include <jansson.h>
#include <stddef.h>

#include "status.h"

/* Longest record decoded: a longer one (a large graph, image or run metadata) is stepped over without
 * being held in memory, its CRC still checked; it never holds a scalar. */
enum { TW_EVENTS_READ_MAX_RECORD = 1 << 20 };

/* Reads the scalar series of the run whose event files lie directly in logdir (borrowed).
 *
 * Files: every regular file (symlinks followed) directly in logdir whose name contains "tfevents" and
 * does not end in ".profile-empty" — TensorBoard's own test, which covers events.out.tfevents.* — in
 * byte order of their names (chronological for every TF writer), read as uncompressed TFRecords (the
 * only kind TensorBoard reads). Sub-folders are other runs and are not read.
 *
 * Scalars: a tag is a scalar series when its first value is a simple_value (TF1 Summary, tf.compat.v1,
 * tensorboardX, events.h) or a tensor whose metadata names plugin "scalars" (tf.summary.scalar in TF2
 * writes those), unless that first value's metadata sets a data_class other than SCALAR. Its points are
 * its simple_values and its rank-0 DT_FLOAT tensors (float_val[0] or 4 bytes of tensor_content); any
 * other value of the tag is dropped, as TensorBoard's Rust data server drops it.
 *
 * Restarts and order: a SessionLog START at step s discards every point already read, of every tag,
 * with step >= s (TensorBoard's purge of orphaned data: the resumed run writes those steps again). A
 * point at step s also discards the points of its own tag with step >= s (the preemption of
 * TensorBoard's data server), so each series is strictly ascending in step and a step written twice
 * keeps its last value. (TensorBoard's Python loader takes a run's first START for its beginning and
 * purges on later ones only; the data server ignores STARTs. Here every START counts, so a resumed run
 * never shows a step twice, whoever wrote the first file.)
 *
 * Bound: each series holds at most max_points (>= 1) points: the newest, always returned last so a
 * chart ends at the latest value, and an evenly strided sample of the ones before it. Every point is
 * kept while they fit; when the sample (max_points - 1 points) is full and another point is due,
 * every other sampled point is dropped (the first stays) and from then on only every 2nd (then 4th,
 * 8th, ...) point to arrive is sampled. A discard by step rewinds the sampling to just after the last
 * sampled point still held. Memory is therefore about tags * max_points * 24 bytes, plus one record
 * buffer of at most TW_EVENTS_READ_MAX_RECORD bytes.
 *
 * Damage: a file ending inside a record (a torn tail: the writer was killed, or is writing it now)
 * ends that file quietly after its last whole record. A record with a bad length or data CRC, or one
 * that is not an Event protobuf, is TW_ERR_CORRUPT naming the file and the record's byte offset.
 *
 * Output: *out (caller owns; NULL on error) is a new JSON object
 * {"<tag>": [[step, value, wall_time], ...], ...}, tags in the order they first appear, tags without
 * points left out. step is an integer, wall_time seconds since the epoch; a NaN or infinite value is
 * written as in tw_events_read_json_number.
 * Errors: TW_ERR_INVALID (max_points 0, NULL logdir or out), TW_ERR_IO (logdir or a file cannot be
 * listed, opened or read; errno_value tells ENOENT apart), TW_ERR_CORRUPT, TW_ERR_NOMEM. */
tw_status tw_events_read_scalars(const char *logdir, size_t max_points, json_t **out, tw_error *err);

/* The same series, read incrementally: a tw_events_scalars remembers, per event file of one folder, how
 * far it has read (the end of its last whole record) and holds the series so far, bounded as above.
 * Each update reads only what was appended since the last: the newest file read from where it stopped
 * (a torn tail is read again once it is complete), then the files that are new. Whenever what was
 * read is no longer the start of what a full read would read — a file read before is gone, replaced
 * (another inode), shrank, or (not the newest) changed size, or a new file sorts before one read — it
 * starts over from nothing. So after any update its series equal tw_events_read_scalars' of the
 * folder as it was then (the same code reads both), restarts (SessionLog START) included.
 *
 * Thread-safety: one tw_events_scalars is used by one thread at a time (the caller locks). */
typedef struct tw_events_scalars tw_events_scalars;

/* A reader that has read nothing; max_points as in tw_events_read_scalars. Caller owns *out.
 * Errors: TW_ERR_INVALID (max_points 0), TW_ERR_NOMEM. */
tw_status tw_events_scalars_new(size_t max_points, tw_events_scalars **out, tw_error *err);
void tw_events_scalars_free(tw_events_scalars *t); /* NULL-safe */

/* Reads what logdir's (borrowed) event files gained since the last update; adds the bytes read to
 * *bytes_read (may be NULL). Errors: those of tw_events_read_scalars; after one the reader has forgotten
 * everything and the next update reads the folder from the start. */
tw_status tw_events_scalars_update(tw_events_scalars *t, const char *logdir, uint64_t *bytes_read, tw_error *err);

/* The series read so far, as tw_events_read_scalars writes them (*out new, caller owns). */
tw_status tw_events_scalars_json(const tw_events_scalars *t, json_t **out, tw_error *err);

/* Bytes of memory t holds between updates, about (the record buffer is freed after each update). */
size_t tw_events_scalars_memory(const tw_events_scalars *t);

/* A new JSON number for v, or for values JSON cannot hold the new string "NaN", "Infinity" or
 * "-Infinity" (JSON.parse keeps them as strings; Number("NaN") is NaN). NULL only when out of memory. */
json_t *tw_events_read_json_number(double v);

#endif
