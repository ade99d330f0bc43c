/* datasets.h — uploaded datasets: the streaming upload, the background conversion, the demo dataset.
 *
 * Owns DIR/datasets/<id>/: upload/ (the received files and params.json, until converted), then
 * train.tfrecord, test.tfrecord and meta.json written by eventlog/convert (all-or-nothing). An upload is
 * accepted (a row in the store) only after every byte is on disk and fsynced; a folder without a row is
 * debris of an interrupted upload and is removed at start-up, and conversions a crash interrupted are
 * restarted. One worker thread converts, oldest first. Does not own the HTTP routes (api_datasets.c). */
#ifndef TW_DATASETS_H
#define TW_DATASETS_H

#include <jansson.h>

#include "http.h"
#include "server.h"

/* The upload ops of POST /api/v1/datasets (multipart, or a raw CSV / TFRecord body). */
extern const tw_upload_ops TW_DATASET_UPLOAD;

/* The handler that runs when the upload body is complete: converts (TFRecord: now, else queued). */
void tw_dataset_upload_done(tw_server *S, tw_req *r);

/* Removes the folders in DATA/datasets and DATA/runs named like our ids whose row does not exist (uploads
 * and submissions that never committed). A folder goes only after a read that says so: a failed read
 * returns its error (TW_ERR_IO) and removes nothing more. */
tw_status tw_datasets_remove_debris(tw_server *S, tw_error *err);

/* Cleans debris (a store that cannot be read stops the start), starts the worker, requeues interrupted
 * conversions. */
tw_status tw_datasets_start(tw_server *S, tw_error *err);
void tw_datasets_stop(tw_server *S);

/* On an empty store: registers Debian's Fashion-MNIST (converted now) and queues the seed MLP on it.
 * Does nothing when the files are not installed or the store is not empty. */
tw_status tw_datasets_demo(tw_server *S, tw_error *err);

/* A dataset row as the API shows it (new JSON; takes nothing). */
json_t *tw_dataset_present(const json_t *row);

/* The engine's "dataset" object for a run on this dataset row: train/test paths, features, shape
 * (new JSON). NULL when the dataset cannot feed a run (then *why says why). */
json_t *tw_dataset_for_run(tw_server *S, const json_t *row, const char **why);

#endif
