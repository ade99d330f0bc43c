/* server.h — what the threads of `tower serve` share: the options, the data folder, the store, the
 * scheduler, the request counters and the change signal that Server-Sent Events wait on.
 *
 * Owns: tw_serve_options (every default in tw_serve_options_default), tw_server (one per process, built
 * by serve_main.c), the change signal, the fatal flag and the data folder's layout (the path helpers at
 * the end: no other file assembles a path under DATA). Does not own the HTTP plumbing (http.c), the
 * routes (routes.c, api_*.c), SQLite (store.c) or the children (scheduler.c). */
#ifndef TW_SERVER_H
#define TW_SERVER_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "status.h"

typedef struct tw_store tw_store;
struct json_t;
typedef struct tw_scheduler tw_scheduler;
typedef struct tw_http tw_http;
struct tw_route;

typedef struct {
    const char *listen;        /* "HOST:PORT"; port 0 = any free port */
    const char *data;          /* the data folder (created if missing) */
    const char *token;         /* bearer token for POST/DELETE; NULL = none */
    const char *trainer;       /* program run as `TRAINER train CONFIG --logdir DIR ...`; NULL = this binary */
    const char *launcher;      /* how a run of processes > 1 starts (launch.h's template); NULL = mpirun */
    int insecure;              /* allow a non-loopback listen address without a token */
    int demo;                  /* on an empty data folder: register Fashion-MNIST and queue the seed MLP */
    uint64_t max_upload;       /* bytes per upload body */
    uint64_t max_dataset;      /* decompressed bytes per uploaded file (a gzip bomb stops here) */
    uint64_t min_free;         /* below this many free bytes in the data folder, new work gets 507 */
    uint64_t memory_limit;     /* bytes a run's device has for the memory check; 0: what it really has */
    unsigned conn_limit;       /* open connections in all */
    unsigned per_ip_limit;     /* open connections per client address */
    unsigned conn_timeout;     /* seconds of silence before a connection is closed */
    unsigned header_timeout;   /* seconds for a request's headers to arrive (from connect or the last reply) */
    double body_min_rate;      /* bytes/s a body keeps on average after header_timeout seconds of grace */
    unsigned sse_limit;        /* open event streams per client address (0: a quarter of per_ip_limit) */
    const char *origin;        /* another origin allowed to drive the API (a proxy's https://...); NULL: none */
    const char *tensorboard_url; /* a TensorBoard serving DATA/runs, linked from the page; NULL: none */
    double heartbeat_timeout;  /* seconds without a line from a child before it is killed */
    double grace;              /* seconds between SIGTERM and SIGKILL */
    uint64_t input_memory;     /* a run's dataset budget (`tower train --input-memory`); 0: the trainer's default */
    double backoff_base;       /* first retry delay (seconds); doubles per restart */
    double backoff_cap;        /* longest retry delay (seconds) */
    int max_restarts;          /* default for runs that do not say */
} tw_serve_options;

void tw_serve_options_default(tw_serve_options *o);

/* HTTP request counters for /metrics, by status code. */
enum { TW_STATUS_SLOTS = 16, TW_API_CODE_SLOTS = 16 };

typedef struct tw_server {
    tw_serve_options opt;
    char data[PATH_MAX];           /* absolute data folder */
    char self[PATH_MAX];           /* this binary (/proc/self/exe) */
    double started;                /* wall-clock start, seconds */
    tw_store *store;
    tw_scheduler *sched;
    tw_http *http;
    const struct tw_route *routes; /* the route table served (http.h), set by tw_http_start */
    char chartjs_path[PATH_MAX];   /* Debian's Chart.js, served as /static/chart.js ("" = absent) */
    atomic_uint_fast64_t requests[TW_STATUS_SLOTS]; /* indexed by tw_http_status_slot */
    atomic_uint_fast64_t errors[TW_API_CODE_SLOTS]; /* indexed by tw_api_code */
    struct tw_converter *converter; /* datasets.c: the background conversion worker */
    struct tw_predict_cache *predict; /* predict_cache.c: the models opened for prediction */
    struct tw_scalars_cache *scalars; /* scalars_cache.c: runs' scalar series, read incrementally */
    struct tw_launcher *launcher;  /* launch.c: opt.launcher split into words at start-up */
    atomic_int fatal;              /* set when the store cannot persist: main stops the process */
    int lock_fd;                   /* DIR/tower.lock, flock'd for the process's life (serve_main.c) */
    int wake_fd[2];                /* main's self-pipe: a byte = stop */
    pthread_mutex_t change_mu;
    pthread_cond_t change_cv;
    uint64_t change;               /* bumped on every run or dataset change (guarded by change_mu) */
    atomic_int port;               /* the bound port once listening (serve_main.c); 0 before */
    /* Completes a queued run's config before it starts (runs.h, tw_runs_complete; set by serve_main.c so
     * that the scheduler calls into the run routes without depending on them). */
    tw_status (*complete_run)(struct tw_server *S, const struct json_t *row, const char **reason, tw_error *err);
    /* One round of the running sweeps (sweeps.h, tw_sweeps_drive; set by serve_main.c, called by the
     * scheduler every round, outside its lock). */
    void (*drive_sweeps)(struct tw_server *S, double now);
} tw_server;

/* Signals that runs or datasets changed: wakes every SSE stream. Thread-safe. */
void tw_server_changed(tw_server *S);

/* The change counter now. Thread-safe. */
uint64_t tw_server_version(tw_server *S);

/* Waits until the change counter differs from *seen or `seconds` pass; updates *seen. Returns 1 on a
 * change, 0 on a timeout. Thread-safe. */
int tw_server_wait_change(tw_server *S, uint64_t *seen, double seconds);

/* Records that state can no longer be persisted (a SQLite I/O error, a failed fsync): the process stops
 * with a non-zero status and is expected to be restarted by its supervisor (docs/reliability.md rule 2). */
void tw_server_fatal(tw_server *S, const tw_error *err);

/* The server's base URL, "http://HOST:PORT" (0.0.0.0 listens as 127.0.0.1), into buf[size]. Returns 0,
 * or -1 before the port is bound or when it does not fit (buf is then ""). Thread-safe. */
int tw_server_url(tw_server *S, char *buf, size_t size);

/* Monotonic and wall-clock seconds. */
double tw_now_mono(void);
double tw_now_wall(void);

/* ---- the data folder's layout: every path under DATA is made by these (nowhere else) ----
 *   DATA/tower.db  DATA/tower.lock  (serve_main.c)
 *   DATA/datasets/<id>/upload/<field>, upload/params.json, train.tfrecord, test.tfrecord, meta.json
 *   DATA/runs/<folder>/config.json, log; its checkpoints/ and event files are the engine's
 *   (tw_checkpoint_dir_of, trainer.h); <folder> is the run's (tw_run_folder_name), kept in its row
 *   DATA/sweeps/<folder>/<trial run name>/: a sweep's HParams experiment (sweep_board.h); <folder> is
 *   tw_run_folder_name of the sweep's id and name
 * Each returns 0, or -1 when the path does not fit in size (buf is then ""). */
#define TW_DATA_DB "tower.db"
#define TW_DATA_LOCK "tower.lock"
#define TW_DATA_RUNS "runs"
#define TW_DATA_SWEEPS "sweeps"
#define TW_DATA_DATASETS "datasets"
#define TW_DATASET_UPLOAD_DIR "upload"
#define TW_DATASET_PARAMS "upload/params.json"
#define TW_DATASET_TRAIN "train.tfrecord"
#define TW_DATASET_TEST "test.tfrecord"
#define TW_DATASET_META "meta.json"
#define TW_RUN_CONFIG "config.json"
#define TW_RUN_LOG "log"
#define TW_RUN_EVALUATIONS "evaluations" /* evaluation jobs: <job id>.json (the result), <job id>.log */

/* DATA/<name> ("tower.db", "runs", ...). */
int tw_data_path(const tw_server *S, const char *name, char *buf, size_t size);
/* A run's folder under DATA/runs, the name TensorBoard lists it by: "<name>-<the id's first
 * TW_RUN_FOLDER_ID characters>" for a named run (mnist-lr0.1-r9ac3a9), with the whole id instead when
 * whole_id (the short one was taken); the bare id for an unnamed run (the page and the API show it by its
 * id too). name (may be NULL) passed names.h's rule, so it is one safe path component. The folder is
 * chosen once, at submission, and kept in the run's row (the store's "folder"; runs of an older Tower
 * keep theirs, the bare id): everything else finds it from the row (tw_run_folder), never from the name.
 * Returns 0, or -1 when it does not fit in size (buf ""). */
enum { TW_RUN_FOLDER_ID = 7, TW_RUN_FOLDER_BYTES = 96 };
int tw_run_folder_name(const char *id, const char *name, int whole_id, char *buf, size_t size);
/* 1 when s has a form tw_run_folder_name makes (the start-up clean-up removes only those). */
int tw_run_folder_valid(const char *s);
/* The folder of a run's row (borrowed from row). */
const char *tw_run_folder(const struct json_t *row);

/* DATA/runs/<folder> and DATA/datasets/<id>. */
int tw_run_dir(const tw_server *S, const char *folder, char *buf, size_t size);
/* DATA/sweeps/<folder>, and DATA/sweeps/<folder>/<trial> when trial is not NULL. */
int tw_sweep_dir(const tw_server *S, const char *folder, const char *trial, char *buf, size_t size);
int tw_dataset_dir(const tw_server *S, const char *id, char *buf, size_t size);
/* A file in those folders: DATA/runs/<folder>/<name> (TW_RUN_*), DATA/datasets/<id>/<name> (TW_DATASET_*). */
int tw_run_path(const tw_server *S, const char *folder, const char *name, char *buf, size_t size);
int tw_dataset_path(const tw_server *S, const char *id, const char *name, char *buf, size_t size);
/* An uploaded file: DATA/datasets/<id>/upload/<field>. */
int tw_upload_path(const tw_server *S, const char *id, const char *field, char *buf, size_t size);

/* Removes path and everything under it (symlinks are removed, not followed). Best effort. */
void tw_remove_tree(const char *path);

#endif
