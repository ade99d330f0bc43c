/* store.h — the server's durable state in SQLite (DIR/tower.db): datasets and runs with their states.
 *
 * Owns: the schema, the connection (WAL, synchronous=FULL: a commit survives power loss), every SQL
 * statement (prepared once, cached), and the state transitions as single statements so that a crash
 * leaves each row in one state or the next, never between. Does not own files (api_*.c, scheduler.c).
 * The child processes never open the database; the connection is opened with O_CLOEXEC by SQLite and the
 * children close every inherited descriptor anyway.
 *
 * Errors: SQLite failures return TW_ERR_IO with the SQLite message; a full disk keeps errno_value =
 * ENOSPC (the caller answers 507); any other I/O failure is fatal for the process (tw_store_on_fatal). Thread-safety: every function locks the store's mutex; JSON results are new (caller owns).
 *
 * Reads return TW_OK with *out set, TW_END when the row asked for does not exist (*out = NULL), or
 * TW_ERR_IO with err filled when the read failed (*out = NULL): "not found" and "could not read" are
 * never the same answer, and a list that could not be read is a failure, never an empty list. */
#ifndef TW_STORE_H
#define TW_STORE_H

#include <jansson.h>
#include <stdint.h>

#include "status.h"

typedef struct tw_store tw_store;

enum { TW_ID_BYTES = 17 }; /* "r" or "d" + 15 hex digits + NUL */

/* The states of a run and of a dataset. The store keeps each as its name (the tables in store.c, the
 * one spelling: the API shows the same names, and a database written before the enums reads the same).
 * The API also shows "cancelling" for a running run whose cancel was asked (api_runs.c, from the
 * scheduler's child table): a presented state, never stored, so it has no enum value here. */
typedef enum {
    TW_RUN_QUEUED,
    TW_RUN_RUNNING,
    TW_RUN_SUCCEEDED,
    TW_RUN_FAILED,
    TW_RUN_CANCELLED,
    TW_RUN_STATES
} tw_run_state;
typedef enum { TW_DATASET_CONVERTING, TW_DATASET_READY, TW_DATASET_FAILED, TW_DATASET_STATES } tw_dataset_state;

/* The name of s; "unknown" for TW_RUN_STATES / TW_DATASET_STATES (no row is in it: a filter by it
 * matches none). */
const char *tw_run_state_name(tw_run_state s);
const char *tw_dataset_state_name(tw_dataset_state s);
/* The state with that name (may be NULL); TW_RUN_STATES / TW_DATASET_STATES when there is none. */
tw_run_state tw_run_state_named(const char *name);
tw_dataset_state tw_dataset_state_named(const char *name);
/* The state of a row the store returned (its "status"), as above. */
tw_run_state tw_store_run_state(const json_t *row);
tw_dataset_state tw_store_dataset_state(const json_t *row);
/* 1 for succeeded, failed and cancelled: nothing changes the run any more. */
int tw_run_state_final(tw_run_state s);

tw_status tw_store_open(const char *path, tw_store **out, tw_error *err);
void tw_store_close(tw_store *st); /* NULL-safe */

/* Registers what runs when a write fails in a way that must stop the process (an I/O error other than
 * a full disk, e.g. a failed fsync: PostgreSQL's lesson, docs/reliability.md rule 2): fn(arg, err), once per
 * failure, on the failing thread, before the call returns its error. */
void tw_store_on_fatal(tw_store *st, void (*fn)(void *arg, const tw_error *err), void *arg);

/* A new random id: prefix ('r' or 'd') and 15 hex digits. */
void tw_store_new_id(char prefix, char id[TW_ID_BYTES]);

/* 1 when s has the form of an id tw_store_new_id(prefix, ...) makes. */
int tw_store_id_valid(char prefix, const char *s);

/* ---- datasets ---- */
tw_status tw_store_dataset_insert(tw_store *st, const char *id, const char *name, const char *source,
                                  int64_t bytes, tw_error *err);
/* TW_DATASET_READY with meta (JSON text) or TW_DATASET_FAILED with error (JSON text {"code","message",...}). */
tw_status tw_store_dataset_finish(tw_store *st, const char *id, tw_dataset_state state, const char *meta,
                                  const char *error, tw_error *err);
/* A reader of one row by id (tw_store_dataset_get, tw_store_run_get). */
typedef tw_status (*tw_store_get_fn)(tw_store *st, const char *id, json_t **out, tw_error *err);

tw_status tw_store_dataset_get(tw_store *st, const char *id, json_t **out, tw_error *err);
tw_status tw_store_dataset_list(tw_store *st, json_t **out, tw_error *err); /* array, newest first */
/* The dataset a run names: an id, or the newest ready dataset with that name, else the newest of that
 * name. TW_END: none. */
tw_status tw_store_dataset_resolve(tw_store *st, const char *name_or_id, json_t **out, tw_error *err);
/* Datasets still "converting" (to restart after a crash), oldest first: an array. */
tw_status tw_store_datasets_converting(tw_store *st, json_t **out, tw_error *err);
/* Deletes unless a queued or running run uses it: TW_ERR_INVALID (in use), TW_END (no such dataset). */
tw_status tw_store_dataset_delete(tw_store *st, const char *id, tw_error *err);

/* ---- runs ---- */
typedef struct {
    const char *id, *name, *dataset_id, *config; /* name may be NULL */
    const char *folder; /* its folder under DATA/runs (server.h, tw_run_folder_name); NULL: the id */
    const char *idem_key, *idem_body; /* NULL, or the Idempotency-Key and the canonical body it came with */
    int towers;
    int64_t steps;
    int max_restarts;
    double deadline_s; /* 0 = none */
    int priority;      /* higher runs first (tw_store_run_next) */
    int processes;     /* processes it trains in (launch.h); 0 = 1 */
    const char *hosts; /* JSON text of its host list (launch.h); NULL = none, "[]" */
} tw_run_new;

/* Inserts a queued run in one statement that commits only while its dataset exists and is "ready" or
 * "converting" (the check and the insert are one step: a dataset deleted meanwhile makes the insert a
 * no-op). TW_OK; TW_ERR_INVALID when the dataset is gone or failed (err names it); TW_END when another run already
 * holds r->idem_key (the UNIQUE index decides between concurrent submissions: read the winner with
 * tw_store_run_by_key); TW_ERR_IO on failure. */
tw_status tw_store_run_insert(tw_store *st, const tw_run_new *r, tw_error *err);
tw_status tw_store_run_get(tw_store *st, const char *id, json_t **out, tw_error *err);
/* The run whose folder (under DATA/runs) is `folder`: TW_OK, TW_END (none). A tw_store_get_fn. */
tw_status tw_store_run_by_folder(tw_store *st, const char *folder, json_t **out, tw_error *err);
/* The run holding idem_key when it was submitted with idem_body (or before bodies were kept): TW_OK;
 * TW_END: no run holds the key; TW_ERR_INVALID: it was used with another body (err says so). */
tw_status tw_store_run_by_key(tw_store *st, const char *idem_key, const char *idem_body, json_t **out,
                              tw_error *err);
/* A page of the run list (GET /api/v1/runs), read a few rows at a time so that the route can stream it
 * (api_runs_list.c) without holding the page: tw_store_run_page_open fixes, in one read, the total and
 * the page's range of runs (newest first: the `limit` runs from `offset`); each tw_store_run_page_next
 * returns the next rows of that range as they are then: a run deleted meanwhile is skipped (a page may
 * end shorter than it began), and with a state filter only the range's runs in that state then are
 * shown; never a run outside the range, nor more than `limit`. Holds no SQLite statement or lock
 * between calls. */
typedef struct {
    const char *status; /* the state filtered on (static), NULL: all */
    int64_t next, lo;   /* the range still to read: the runs' seq from next down to lo */
    long left;          /* rows the page may still show */
    int64_t total;      /* runs in that state (all) at open: the list's "total" */
} tw_run_page;
/* state may be NULL (all). */
tw_status tw_store_run_page_open(tw_store *st, const tw_run_state *state, long limit, long offset, tw_run_page *p,
                                 tw_error *err);
/* Up to n (1..64) next rows of p into *rows (a new array; empty at the page's end), newest first.
 * with_config 0: each row's "config" is null, neither read nor parsed (a list that does not show it). */
tw_status tw_store_run_page_next(tw_store *st, tw_run_page *p, int n, int with_config, json_t **rows,
                                 tw_error *err);
/* Counts by state name, every state present: {"queued": n, ...}. */
tw_status tw_store_run_counts(tw_store *st, json_t **out, tw_error *err);
/* The queued run of the highest priority, the oldest (by submission) among equals, whose back-off has
 * passed (not_before <= now) and whose dataset no longer converts; TW_END if none. */
tw_status tw_store_run_next(tw_store *st, double now, json_t **out, tw_error *err);
/* The running runs' eta_s (seconds to go, null when not yet known), unknown first, then shortest first:
 * a new array. */
tw_status tw_store_running_etas(tw_store *st, json_t **out, tw_error *err);
/* Every run in `state` (array of run objects). */
tw_status tw_store_runs_in(tw_store *st, tw_run_state state, json_t **out, tw_error *err);

tw_status tw_store_run_started(tw_store *st, const char *id, const char *devices, double now,
                               tw_error *err);
tw_status tw_store_run_progress(tw_store *st, const char *id, int64_t step, const char *metrics,
                                double eta_s, tw_error *err);
/* Final states: succeeded, failed (reason, error JSON), cancelled. */
tw_status tw_store_run_finished(tw_store *st, const char *id, tw_run_state state, const char *reason,
                                const char *error, double now, tw_error *err);
/* Back to queued after a retriable failure: restarts + 1, not before `not_before`; reason/error kept as
 * the last failure. */
tw_status tw_store_run_requeue(tw_store *st, const char *id, const char *reason, const char *error,
                               double not_before, tw_error *err);
/* A run the stopping server stopped: back to queued (not a restart), its attempt ended "server stopped".
 * Returns 1, 0 when the run was not running, -1 on error. */
int tw_store_run_stopped(tw_store *st, const char *id, tw_error *err);
/* Runs left "running" by a server that died without stopping them: each such start was an attempt that
 * crashed: back to queued with restarts + 1 (*requeued of them), or failed "crashed" once their restarts are
 * spent (*failed); the attempt ends "server crashed". */
tw_status tw_store_runs_recover(tw_store *st, int *requeued, int *failed, tw_error *err);
/* queued -> cancelled in one statement. 1 when it changed the row. */
int tw_store_run_cancel_queued(tw_store *st, const char *id, double now, tw_error *err);
/* Deletes a finished run and its evaluation jobs: TW_ERR_INVALID when it is not finished or an evaluation job
 * of it is queued or running, TW_END when there is no such run. */
tw_status tw_store_run_delete(tw_store *st, const char *id, tw_error *err);

/* The run or dataset whose id is ref, else the one named ref: TW_OK with the row; TW_END: none;
 * TW_ERR_INVALID: several have that name (err says so; *out is the array of their ids, newest first). */
tw_status tw_store_run_resolve(tw_store *st, const char *ref, json_t **out, tw_error *err);
tw_status tw_store_dataset_resolve_unique(tw_store *st, const char *ref, json_t **out, tw_error *err);
/* The steps per second last measured by the newest run whose config has the same "model", "batch_size"
 * and "towers" as config (a run config's JSON text), into *rate (0: no such run has measured one). */
tw_status tw_store_run_rate_like(tw_store *st, const char *config, double *rate, tw_error *err);
/* The distinct names of the runs (kind 'r') or datasets ('d'), newest first, at most 10,000: *out an array
 * of {"name": N} rows (new). */
tw_status tw_store_names(tw_store *st, char kind, json_t **out, tw_error *err);
/* Moves a queued run in the queue: TW_ERR_INVALID when it is not queued (err names its state), TW_END
 * when there is no such run. */
tw_status tw_store_run_set_priority(tw_store *st, const char *id, int priority, tw_error *err);
/* Back to queued, to continue from its latest checkpoint up to `steps` (the row's steps and its config's
 * "steps" both change): a cancelled or failed run with steps >= its steps, a succeeded one with more.
 * Restarts start again from 0; its dataset must still be ready (the check and the update are one
 * statement). TW_ERR_INVALID when the run is in no such state or its dataset is gone (err says why), TW_END
 * when there is no such run. */
tw_status tw_store_run_resume(tw_store *st, const char *id, int64_t steps, tw_error *err);

/* ---- evaluation jobs (POST /api/v1/runs/{id}/evaluate): a run's checkpoint on a dataset's split ----
 * Their states are the runs' names: queued, running, succeeded, failed, cancelled (never retried). A row:
 * {id, run_id, dataset_id, split, checkpoint, weights, job (the child's arguments, JSON), status, error,
 * result (the evaluation document, JSON), created, started, finished}. Ids: 'e' + 15 hex digits. */
typedef struct {
    const char *id, *run_id, *dataset_id, *split, *weights; /* split "train"/"test"; weights "raw"/"ema" */
    int64_t checkpoint;                                     /* the step */
    const char *job; /* JSON text {"checkpoint": PATH, "data": PATH, "image_feature", "label_feature"} */
    double now;
} tw_eval_new;

tw_status tw_store_eval_insert(tw_store *st, const tw_eval_new *e, tw_error *err);
tw_status tw_store_eval_get(tw_store *st, const char *id, json_t **out, tw_error *err);
/* The run's newest 100 jobs, newest first (an array). */
tw_status tw_store_eval_list(tw_store *st, const char *run_id, json_t **out, tw_error *err);
/* The oldest queued job; TW_END if none. */
tw_status tw_store_eval_next(tw_store *st, json_t **out, tw_error *err);
tw_status tw_store_eval_started(tw_store *st, const char *id, double now, tw_error *err);
/* A final state; error and result are JSON text or NULL. */
tw_status tw_store_eval_finished(tw_store *st, const char *id, tw_run_state state, const char *error,
                                 const char *result, double now, tw_error *err);
/* queued -> cancelled in one statement: 1 when it changed the row, 0 when not, -1 on failure. */
int tw_store_eval_cancel_queued(tw_store *st, const char *id, double now, tw_error *err);
/* Jobs left "running" by a server that died: back to queued. Returns the count, -1 on failure. */
int tw_store_evals_recover(tw_store *st, tw_error *err);

/* ---- sweeps (POST /api/v1/sweeps; server/sweeps.c runs them) ----
 * A sweep row: {id, name, spec (JSON: space, searcher, metric, maximize), config (the base run config, JSON),
 * status ("running", "succeeded", "cancelled", "failed"), created, finished}. Ids: 's' + 15 hex digits. A trial
 * row (tw_store_trials): {trial, run_id, rung, results (the metric at the end of each finished rung, a JSON
 * array), and its run's name, status, steps, step, metrics and config (null when the run was deleted)}. */
tw_status tw_store_sweep_insert(tw_store *st, const char *id, const char *name, const char *spec, const char *config,
                                double now, tw_error *err);
/* By id or name; TW_END when none. */
tw_status tw_store_sweep_resolve(tw_store *st, const char *ref, json_t **out, tw_error *err);
/* The sweeps of a status, oldest first, or (status NULL) the newest 1000. */
tw_status tw_store_sweep_list(tw_store *st, const char *status, json_t **out, tw_error *err);
tw_status tw_store_sweep_set_status(tw_store *st, const char *id, const char *status, double now, tw_error *err);
/* The sweep and its trial rows (its runs stay). */
tw_status tw_store_sweep_delete(tw_store *st, const char *id, tw_error *err);
/* Trial `trial` of the sweep is run_id (a second insert of the same trial changes nothing). */
tw_status tw_store_trial_insert(tw_store *st, const char *sweep_id, int trial, const char *run_id, tw_error *err);
/* The sweep's trials in order (an array of trial rows). */
tw_status tw_store_trials(tw_store *st, const char *sweep_id, json_t **out, tw_error *err);
tw_status tw_store_trial_set_rung(tw_store *st, const char *sweep_id, int trial, int rung, tw_error *err);
/* results: JSON text, the array of rung metrics. */
tw_status tw_store_trial_set_results(tw_store *st, const char *sweep_id, int trial, const char *results, tw_error *err);

#endif
