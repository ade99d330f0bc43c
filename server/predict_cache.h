/* predict_cache.h — the server's cache of models opened for prediction: one tw_inference per (run, checkpoint
 * file, weights), loaded on first use and kept for the next requests.
 *
 * Owns: the entries, their bounds (entries and bytes; the least recently used idle entry goes first),
 * their invalidation (an entry whose checkpoint file was removed or replaced — pruned by the trainer's
 * keep count, the run deleted — is dropped at the next lookup, checked by the file's identity; a deleted
 * run's entries are dropped at once by tw_predict_cache_forget_run) and the locking: the cache's list
 * under one mutex, each model used by one request at a time (a tw_inference is single-threaded). Does not
 * own what a prediction is (engine/predict.h) or the route (api_predict.c).
 * Thread-safe: every function may be called from any handler thread. */
#ifndef TW_PREDICT_CACHE_H
#define TW_PREDICT_CACHE_H

#include <jansson.h>
#include <stdint.h>

#include "predict.h"
#include "status.h"

enum {
    TW_PREDICT_CACHE_ENTRIES = 8,
};
#define TW_PREDICT_CACHE_BYTES (1024ull << 20)

typedef struct tw_predict_cache tw_predict_cache;
typedef struct tw_predict_entry tw_predict_entry;

/* Caller owns *out. Errors: TW_ERR_NOMEM. */
tw_status tw_predict_cache_create(tw_predict_cache **out, tw_error *err);
void tw_predict_cache_destroy(tw_predict_cache *c); /* NULL-safe; no entry may be held */

/* The model of run `run`'s checkpoint at path (under the data folder; run, path and w are the key) with
 * weights w (tw_predict_open's), opened now unless cached and unchanged. *hit says which. The entry is
 * held until tw_predict_cache_release. Errors: those of tw_predict_open; TW_ERR_IO when the file is gone. */
tw_status tw_predict_cache_get(tw_predict_cache *c, const char *run, const char *path, int w,
                               tw_predict_entry **out, int *hit, tw_error *err);

/* The entry's model, for its config and shape (immutable: read from any thread). Borrowed. */
const tw_inference *tw_predict_entry_model(const tw_predict_entry *e);

/* tw_predict_run on the entry's model, one request at a time. */
tw_status tw_predict_entry_run(tw_predict_entry *e, const tw_predict_batch *b, int top_k, const json_t *names,
                               json_t **predictions, tw_error *err);

void tw_predict_cache_release(tw_predict_cache *c, tw_predict_entry *e); /* NULL-safe */

/* Drops every entry of run (those in use go when released). */
void tw_predict_cache_forget_run(tw_predict_cache *c, const char *run);

#endif
