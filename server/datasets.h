/* datasets.h — uploaded datasets: an upload's files, the background conversion, the demo dataset.
 *
 * Owns DIR/datasets/<id>/: upload/ (the received files and params.json, until converted), then
 * train.tfrecord, test.tfrecord and meta.json written by eventlog/convert (all-or-nothing). An upload is
 * accepted (a row in the store) only after every byte is on disk and fsynced; a folder without a row is
 * debris of an interrupted upload and is removed at start-up, and conversions a crash interrupted are
 * restarted. One worker thread converts, oldest first. Does not own the HTTP side of the upload (the
 * body's framing, the replies) nor the routes (api_datasets.c). */
#ifndef TW_DATASETS_H
#define TW_DATASETS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* One upload being received into DATA/datasets/<id>/upload/: the form's files (streamed to disk) and
 * values. Fields: files images, labels, test_images, test_labels (IDX), features + labels (NumPy), csv,
 * tfrecord, test_tfrecord; values label_column, test_fraction. One thread at a time. */
typedef struct tw_dataset_upload tw_dataset_upload;

/* A new dataset id for the dataset `name` (valid: names.h) and its folder with upload/. On failure *out
 * is still set (free it). */
tw_status tw_dataset_upload_new(tw_server *S, const char *name, tw_dataset_upload **out, tw_error *err);
/* Frees u and, unless it was accepted, removes its folder. NULL-safe. */
void tw_dataset_upload_free(tw_dataset_upload *u);
const char *tw_dataset_upload_id(const tw_dataset_upload *u);

/* The parts of the body, in the shape of tw_multipart_callbacks (ctx: the upload): a file field is
 * written to upload/<field> (named from a fixed table, never from the request) and fsynced at its end,
 * a value field is kept. TW_ERR_INVALID for an unknown or repeated field or a value that is too long. */
tw_status tw_dataset_upload_part_begin(void *ctx, const char *name, const char *filename, const char *ctype,
                                       tw_error *err);
tw_status tw_dataset_upload_part_data(void *ctx, const void *data, size_t n, tw_error *err);
tw_status tw_dataset_upload_part_end(void *ctx, tw_error *err); /* no part open: does nothing */


/* Ends the open part, checks that the files make a dataset (TW_ERR_INVALID naming the sets expected),
 * makes everything durable and registers the dataset (bytes: the body's size): from here on the folder
 * is the dataset's. */
tw_status tw_dataset_upload_accept(tw_dataset_upload *u, uint64_t bytes, tw_error *err);

/* After accept: a TFRecord upload is converted now (*now = 1: validated record by record before the
 * reply; a failure is recorded in the row and returned in err), any other is queued for the worker. */
tw_status tw_dataset_upload_convert(tw_dataset_upload *u, int *now, tw_error *err);

/* Removes the folders in DATA/datasets and DATA/runs named like our ids whose row does not exist (uploads
 * and submissions that never committed). A folder goes only after a read that says so: a failed read
 * returns its error (TW_ERR_IO) and removes nothing more. */
tw_status tw_datasets_remove_debris(tw_server *S, tw_error *err);

/* Cleans debris (a store that cannot be read stops the start), starts the worker, requeues interrupted
 * conversions. */
tw_status tw_datasets_start(tw_server *S, tw_error *err);
void tw_datasets_stop(tw_server *S);

/* On an empty store: registers Debian's Fashion-MNIST as "fashion-mnist" (converted now) and sets
 * *registered; the caller then queues the demo run on it (tw_runs_submit_demo). Does nothing
 * (*registered = 0) when the files are not installed or the store is not empty. */
tw_status tw_datasets_demo(tw_server *S, int *registered, tw_error *err);

/* A dataset row as the API shows it (new JSON; takes nothing). */
json_t *tw_dataset_present(const json_t *row);

/* The engine's "dataset" object for a run on this dataset row: train/test paths, features, shape
 * (new JSON). NULL when the dataset cannot feed a run (then *why says why). */
json_t *tw_dataset_for_run(tw_server *S, const json_t *row, const char **why);

#endif
