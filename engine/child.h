/* child.h — the protocol between `tower train` (the child) and the server's supervisor
 * (server/scheduler.c): the JSON lines the child writes on stdout, their keys, and its exit statuses.
 *
 * Owns: the names of every line kind and key, the exit-status table and the mapping from a tw_error to
 * an exit status, the heartbeat cadence, and the one emitter that writes the lines (tw_child_*: one
 * compact JSON object per line, flushed at once). Does not own: what the values mean to the training
 * loop (trainer.h), nor what the server does with them (the supervisor parses through these names and
 * maps the exit statuses to run states).
 *
 * The line kinds, in the order a run writes them (every line is one JSON object):
 *   backend    {"backend":KIND,"devices":[NAME...],"towers":N,"processes":P,"total_towers":N*P,
 *               "world":"mpi"|"tcp"|"none"}     the first line of a run: N towers in each of P
 *               processes (world.h; "tcp": torchrun's variables; "none": one process)
 *   resumed    {"resumed_from":PATH,"step":K}                           after a resume
 *   step       {"step":K,"loss":X[,"learning_rate":R,"examples_per_sec":E,"sec_per_batch":S,"eta_s":T]}
 *   eval       {"step":K,"eval_loss":X,"eval_examples":N[,"eval_accuracy":A][,"eval_loss_ema":X
 *               [,"eval_accuracy_ema":A]][,"eval_top5_accuracy":T[,"eval_top5_accuracy_ema":T]]
 *               [,"eval_mae":M,"eval_r2":R[,"eval_mae_ema":M,"eval_r2_ema":R]]}   every key starts
 *               with "eval_"
 *   heartbeat  {"heartbeat":true,"step":K}      when nothing was written for TW_CHILD_HEARTBEAT_S
 *   warning    {"warning":CODE,"message":TEXT,"step":K}                 training goes on
 *   error      {"error":"LOSS_NAN"|"LOSS_INF","step":K,"message":TEXT}   before the "diverged" status
 *   status     {"status":"completed"|"cancelled"|"diverged","step":K,"seconds":S}   the last line
 *   failed     {"status":"failed","error":{"code":NAME},"exit":CODE,"message":TEXT}  the last line of a
 *              failure (the message also goes to stderr)
 * The supervisor keeps "step", "eta_s", "status", the error's code and message, the numbers under
 * TW_CHILD_METRIC_KEYS and every "eval_" key as the run's metrics, and "warning". */
#ifndef TW_CHILD_H
#define TW_CHILD_H

#include <stdint.h>
#include <stdio.h>

#include "status.h"

/* ---- keys ---- */
#define TW_CHILD_STEP "step"
#define TW_CHILD_LOSS "loss"
#define TW_CHILD_LEARNING_RATE "learning_rate"
#define TW_CHILD_EXAMPLES_PER_SEC "examples_per_sec"
#define TW_CHILD_SEC_PER_BATCH "sec_per_batch"
#define TW_CHILD_ETA "eta_s"
#define TW_CHILD_EVAL_PREFIX "eval_" /* every key of an eval line but "step" */
#define TW_CHILD_EVAL_LOSS "eval_loss"
#define TW_CHILD_EVAL_EXAMPLES "eval_examples"
#define TW_CHILD_EVAL_ACCURACY "eval_accuracy"
#define TW_CHILD_EVAL_LOSS_EMA "eval_loss_ema"
#define TW_CHILD_EVAL_ACCURACY_EMA "eval_accuracy_ema"
#define TW_CHILD_EVAL_TOP5 "eval_top5_accuracy"         /* classifiers of more than 5 classes */
#define TW_CHILD_EVAL_TOP5_EMA "eval_top5_accuracy_ema"
#define TW_CHILD_EVAL_MAE "eval_mae"                    /* regression (eval_loss is the MSE) */
#define TW_CHILD_EVAL_MAE_EMA "eval_mae_ema"
#define TW_CHILD_EVAL_R2 "eval_r2"
#define TW_CHILD_EVAL_R2_EMA "eval_r2_ema"
#define TW_CHILD_HEARTBEAT "heartbeat"
#define TW_CHILD_WARNING "warning"
#define TW_CHILD_ERROR "error"
#define TW_CHILD_CODE "code" /* inside a failed line's "error" object */
#define TW_CHILD_MESSAGE "message"
#define TW_CHILD_STATUS "status"
#define TW_CHILD_EXIT "exit"
#define TW_CHILD_SECONDS "seconds"
#define TW_CHILD_RESUMED_FROM "resumed_from"
#define TW_CHILD_BACKEND "backend"
#define TW_CHILD_DEVICES "devices"
#define TW_CHILD_TOWERS "towers"              /* per process */
#define TW_CHILD_PROCESSES "processes"        /* the world's processes (mpirun -np) */
#define TW_CHILD_TOTAL_TOWERS "total_towers"  /* towers of all processes */
#define TW_CHILD_WORLD "world"                /* what joined the processes: "mpi", "tcp" or "none" */

/* The numeric keys of a step line the supervisor keeps as metrics (besides the "eval_" keys). */
#define TW_CHILD_METRIC_KEYS {TW_CHILD_LOSS, TW_CHILD_LEARNING_RATE, TW_CHILD_EXAMPLES_PER_SEC}

/* ---- values ---- */
#define TW_CHILD_COMPLETED "completed" /* "status" of a run that reached its steps */
#define TW_CHILD_CANCELLED "cancelled" /* SIGTERM/SIGINT: checkpointed and flushed */
#define TW_CHILD_DIVERGED "diverged"   /* a NaN or Inf loss */
#define TW_CHILD_FAILED "failed"       /* the failed line */
#define TW_CHILD_LOSS_NAN "LOSS_NAN"   /* "error" of the error line */
#define TW_CHILD_LOSS_INF "LOSS_INF"
#define TW_CHILD_METRICS_DEGRADED "METRICS_DEGRADED" /* "warning": the event file is no longer written */
#define TW_CHILD_NO_TEST_SET "NO_TEST_SET" /* "warning", after the backend line: the dataset has no test
                                              set, so nothing is ever evaluated (eval_every does nothing) */

/* Seconds of silence after which the next check writes a heartbeat line. */
#define TW_CHILD_HEARTBEAT_S 1.0

/* ---- exit statuses: 0 completed or cancelled, then these ---- */
enum {
    TW_EXIT_FAILED = 1,        /* any other runtime failure (retried by the server) */
    TW_EXIT_USAGE = 2,         /* a usage or config error: nothing written */
    TW_EXIT_DIVERGED = 10,     /* a NaN or Inf loss */
    TW_EXIT_OOM = 11,          /* out of memory */
    TW_EXIT_DEVICE = 12,       /* a sticky device error (TW_ERR_INTERNAL with ENOTRECOVERABLE): retry fresh */
    TW_EXIT_STORAGE_FULL = 13, /* ENOSPC or EDQUOT */
    TW_EXIT_BAD_DATA = 14,     /* a damaged or wrong data or checkpoint file (corrupt, truncated, a length
                                  past its cap, a label outside the classes: TW_ERR_INVALID + EILSEQ) */
    TW_EXIT_STOP_TIMEOUT = 15, /* not stopped within --stop-within seconds of SIGTERM (train_main.c's
                                  watchdog): retried; the last committed checkpoint stands */
};

/* The exit status for a run that failed with err. */
int tw_child_exit_code(const tw_error *err);

/* What a failing exit status means to the supervisor: the run's failure reason and error code, and whether
 * the failure is final (deterministic: never retried) or retried on a fresh process. Any status outside
 * the table (1, a signal's) reads as a crash, retried. Never NULL; for 0 the caller looks at the final line. */
typedef struct {
    int exit;
    const char *reason; /* "bad_config", "diverged", ... */
    const char *code;   /* "BAD_CONFIG", "DIVERGED", ... */
    int final;
} tw_child_failure;

const tw_child_failure *tw_child_failure_of(int exit_status);

/* ---- the emitter ---- */

/* Where the lines go, and when the last one went. */
typedef struct {
    FILE *out;           /* borrowed; NULL: nothing is written (the ranks of a world but rank 0) */
    double last_write;   /* CLOCK_MONOTONIC seconds of the last line (tw_child_now) */
    int terminal;        /* render the lines for a person (tw_child_use_terminal) instead of JSON */
    int64_t total_steps; /* the run's steps, for the terminal's progress line */
} tw_child_out;

typedef struct {
    double learning_rate, examples_per_sec, sec_per_batch, eta_s;
} tw_child_rates;

typedef struct {
    int64_t step;
    double loss;          /* eval_loss */
    int64_t examples;     /* eval_examples */
    int has_accuracy;     /* classification: eval_accuracy (and eval_accuracy_ema with has_ema) */
    double accuracy;
    int has_ema;          /* eval_loss_ema */
    double loss_ema, accuracy_ema;
    int has_top5;         /* eval_top5_accuracy[_ema] */
    int has_regression;   /* eval_mae, eval_r2 [_ema] */
    double top5[2], mae[2], r2[2]; /* [0] raw weights, [1] EMA (with has_ema) */
} tw_child_eval;

/* CLOCK_MONOTONIC in seconds. */
double tw_child_now(void);

void tw_child_init(tw_child_out *o, FILE *out);

/* ---- the terminal rendering: for a person, never for the supervisor ----
 * After tw_child_use_terminal(out, steps) (`tower train` calls it when its stdout is a terminal), every
 * emitter later initialised on out renders its lines instead of writing JSON: a step line updates one
 * `\r`-rewritten progress line (base/progress.h, the one `tower submit --follow` draws too), an eval line prints its "eval_" values under their
 * names less the prefix, a heartbeat prints nothing, any other line prints its keys and values. A pipe
 * (the server's supervisor, scripts) never calls it and keeps the JSON lines unchanged. */
void tw_child_use_terminal(FILE *out, int64_t total_steps);
/* devices: [n] names, borrowed: the towers of this process, one of `processes` in a world joined by
 * world ("mpi", "none"). */
void tw_child_backend(tw_child_out *o, const char *kind, const char *const *devices, int n,
                      const char *world, int processes);
void tw_child_resumed(tw_child_out *o, const char *path, int64_t step);
/* rates NULL: the step line has only step and loss. */
void tw_child_step(tw_child_out *o, int64_t step, double loss, const tw_child_rates *rates);
void tw_child_eval_line(tw_child_out *o, const tw_child_eval *e);
/* A heartbeat line when nothing was written for TW_CHILD_HEARTBEAT_S (checked by the caller once per
 * step, so one step longer than the supervisor's timeout still looks like a hang). */
void tw_child_heartbeat(tw_child_out *o, int64_t step);
void tw_child_warning(tw_child_out *o, const char *code, const char *message, int64_t step);
/* The error line of a non-finite loss (LOSS_NAN or LOSS_INF by loss) at step. */
void tw_child_diverged(tw_child_out *o, double loss, int64_t step);
/* The last line: status TW_CHILD_COMPLETED, _CANCELLED or _DIVERGED. */
void tw_child_final(tw_child_out *o, const char *status, int64_t step, double seconds);
/* The failed line (code: a status name, e.g. tw_status_name's); a message that is not UTF-8 is left
 * out. Returns exit_code. */
int tw_child_failed(tw_child_out *o, const char *code, int exit_code, const char *message);

/* ---- the command line the server starts a run's trainer with ---- */

/* `TRAINER train CONFIG --logdir DIR --resume --backend cpu|cuda --data-root DATA --stop-within S
 * --input-memory BYTES [--monitor-url URL]`: built by tw_child_train_argv alone (the server's scheduler) and
 * parsed by `tower train` (engine/train_main.c) and the fake trainer through the same option names. */
#define TW_TRAIN_OPT_LOGDIR "logdir"
#define TW_TRAIN_OPT_RESUME "resume"
#define TW_TRAIN_OPT_BACKEND "backend"
#define TW_TRAIN_OPT_DATA_ROOT "data-root"
#define TW_TRAIN_OPT_STOP_WITHIN "stop-within"
#define TW_TRAIN_OPT_INPUT_MEMORY "input-memory"
#define TW_TRAIN_OPT_MONITOR_URL "monitor-url"

typedef struct {
    const char *trainer, *config, *logdir, *backend, *data_root;
    const char *monitor_url;       /* NULL: none */
    unsigned stop_within_s;        /* 1 .. 3600 */
    unsigned long long input_memory;
} tw_child_train_args;

enum { TW_CHILD_TRAIN_ARGV = 18 }; /* argv's size, its NULL included */

/* Fills argv[TW_CHILD_TRAIN_ARGV] (NULL-terminated; pointers into *a and text, which must outlive it). */
void tw_child_train_argv(const tw_child_train_args *a, char text[2][24], char *argv[TW_CHILD_TRAIN_ARGV]);

#endif
