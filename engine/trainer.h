/* trainer.h — the training loop: towers, averaged gradients, one update, EMA, evaluation, TensorBoard
 * output, checkpoints and resume.
 *
 * Owns: one run from a validated tw_config: N towers (one backend instance and replica each, a thread
 * each when N > 1), the learning-rate schedule (tf.train.exponential_decay), the EMA decay schedule
 * (num_updates = step), the per-step loop, evaluation with raw and EMA weights, the scalars, histograms,
 * graph and config text of the event file, checkpoints every checkpoint_every steps and at the end,
 * bit-exact resume from the latest checkpoint, and the JSON progress lines. Does not own the formats
 * (eventlog/), the math (backends) or the data (input.c). */
#ifndef TW_TRAINER_H
#define TW_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "status.h"

typedef struct {
    const char *logdir;   /* event files here; checkpoints in logdir/checkpoints */
    int resume;           /* continue from logdir/checkpoints/latest when there is one */
    const char *backend;  /* "auto", "cpu" or "cuda" */
    FILE *progress;       /* one JSON object per line; borrowed */
} tw_train_options;

typedef enum {
    TW_TRAIN_COMPLETED = 0,
    TW_TRAIN_CANCELLED = 1,  /* tw_train_request_stop (SIGTERM): checkpointed and flushed */
    TW_TRAIN_DIVERGED = 2,   /* a NaN or Inf loss: stopped without checkpointing that state */
} tw_train_outcome;

/* The exit statuses of `tower train`, which the server's supervisor maps to run states
 * (server/scheduler.c): 0 completed or cancelled, then these. */
enum {
    TW_EXIT_FAILED = 1,        /* any other runtime failure (retried by the server) */
    TW_EXIT_USAGE = 2,         /* a usage or config error: nothing written */
    TW_EXIT_DIVERGED = 10,     /* a NaN or Inf loss */
    TW_EXIT_OOM = 11,          /* out of memory */
    TW_EXIT_DEVICE = 12,       /* reserved: a sticky CUDA error, once the backend reports one */
    TW_EXIT_STORAGE_FULL = 13, /* ENOSPC or EDQUOT */
    TW_EXIT_BAD_DATA = 14,     /* a damaged data or checkpoint file (corrupt, truncated, a length past its cap) */
};

/* The exit status for a run that failed with err. */
int tw_train_exit_code(const tw_error *err);

/* Runs c to c->steps (or until stopped). Errors: any module's (data, backend, I/O). */
tw_status tw_train(const tw_config *c, const tw_train_options *o, tw_train_outcome *outcome,
                   tw_error *err);

/* Asks the running loop to checkpoint and stop after the current step. Async-signal-safe. */
void tw_train_request_stop(void);

/* tf.train.exponential_decay(lr, global_step, decay_steps, decay_rate, staircase), in float32. */
float tw_learning_rate(const tw_config *c, int64_t global_step);

/* tf.train.ExponentialMovingAverage's decay at num_updates: min(decay, (1 + n) / (10 + n)). */
float tw_ema_decay(float decay, int64_t num_updates);

#endif
