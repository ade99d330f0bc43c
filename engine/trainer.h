/* trainer.h — the training loop: towers, averaged gradients, one update, EMA, evaluation, TensorBoard
 * output, checkpoints and resume. Two files behind it: train_step.c (the towers, one step, the schedules
 * and the bench) and trainer.c (a run's lifecycle: setup, loop, cadence of summaries, evaluation and
 * checkpoints, resume, the progress lines through child.h, exit).
 *
 * Owns: one run from a validated tw_config: N towers (one backend instance and replica each, a thread
 * each when N > 1), the learning-rate schedule (tf.train.exponential_decay), the EMA decay schedule
 * (num_updates = step), the per-step loop, evaluation with raw and EMA weights, the scalars, histograms,
 * images (when: the input samples at step 0, the filters at each summary; summary_images.h draws them),
 * graph, config text and HParams session start and final end (run_hparams.h) of the event file,
 * checkpoints every checkpoint_every steps and at the end,
 * bit-exact resume from the latest checkpoint, the memory check before the towers allocate (memory.h:
 * estimate against the devices' memory or tw_train_options.memory_limit), and when to write each
 * progress line; and the same step timed on synthetic data for `tower bench`. Does not own the progress
 * lines' form or the exit statuses (child.h), the formats (eventlog/),
 * the math (backends), the data (input.c) or the bench's statistics and report (bench_main.c). */
#ifndef TW_TRAINER_H
#define TW_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "status.h"
#include "world.h"

/* What the event files hold, for their readers (the server's metrics route; docs/formats.md, "Event
 * files"): the training scalars are tagged TW_TRAIN_TAGS "<name>" (train/loss, train/learning_rate, ...);
 * the evaluation with the raw weights is eval/loss and eval/accuracy in logdir's file, the one with the
 * EMA weights the same tags in the sub-run logdir/TW_EVAL_EMA_RUN (a file of its own per attempt, like
 * TensorFlow's estimators write eval/), so TensorBoard draws raw and EMA on one chart. */
#define TW_TRAIN_TAGS "train/"
#define TW_EVAL_EMA_RUN "eval_ema"

typedef struct {
    const char *logdir;   /* event files here (and in logdir/TW_EVAL_EMA_RUN); checkpoints in logdir/checkpoints */
    int resume;           /* continue from logdir/checkpoints/latest when there is one */
    const char *backend;  /* "auto", "cpu" or "cuda" */
    FILE *progress;       /* the child protocol's lines (child.h); borrowed; NULL: none (ranks but 0) */
    tw_world *world;      /* borrowed; NULL: a world of one. Every process of it calls tw_train with the
                             same config: each runs its towers on its share of the world's batch, the
                             gradients and the step's loss are averaged over the world, and only rank 0
                             reads the checkpoint it resumes from (and broadcasts it), evaluates and
                             writes (event files, checkpoints, evaluation.json) */
    uint64_t memory_limit; /* bytes each device may use (memory.h's check); 0: what the machine has */
    const char *monitor_url; /* the run's status page, for TensorBoard's HParams link; NULL = none */
    uint64_t input_memory; /* bytes a dataset may take decoded in memory (tw_input_options.max_memory_bytes)
                              when the config has no input_memory_bytes; 0: the input's default */
} tw_train_options;

typedef enum {
    TW_TRAIN_COMPLETED = 0,
    TW_TRAIN_CANCELLED = 1,  /* tw_train_request_stop (SIGTERM): checkpointed and flushed */
    TW_TRAIN_DIVERGED = 2,   /* a NaN or Inf loss: stopped without checkpointing that state */
} tw_train_outcome;

/* Runs c to c->steps (or until stopped). Errors: any module's (data, backend, I/O). */
/* The parameters of model m (built from c) from c's init_from checkpoint — its raw weights or their EMA
 * shadows, each found by the variable's name and checked against its shape — into dst[P] (the params
 * arena's layout; NULL: only check). Not the optimizer state. Errors: TW_ERR_INVALID "init_from: ..."
 * naming the variable the checkpoint lacks or has with another shape; the checkpoint reader's errors
 * (a missing or damaged file). */
struct tw_model;
tw_status tw_train_init_from(const tw_config *c, const struct tw_model *m, float *dst, tw_error *err);

tw_status tw_train(const tw_config *c, const tw_train_options *o, tw_train_outcome *outcome,
                   tw_error *err);

/* Asks the running loop to checkpoint and stop after the current step. Async-signal-safe. */
void tw_train_request_stop(void);

/* ---- `tower bench`: the training step, timed on synthetic data ---- */

typedef struct {
    const char *backend;  /* "auto", "cpu" or "cuda" */
    tw_world *world;      /* borrowed; NULL: a world of one (each process times the world's step) */
    int warmup;           /* untimed steps first, >= 0 */
    int steps;            /* timed steps, >= 1 */
    double *step_s;       /* [steps] caller-owned, filled: seconds of each timed step */
    double *allreduce_s;  /* [steps] caller-owned, filled: seconds of its all-reduce (0 with 1 tower) */
} tw_bench_options;

typedef struct {
    char backend[16];       /* the kind that ran ("auto" resolved): "cpu" or "cuda" */
    size_t allreduce_bytes; /* bytes of the gradient arena each tower all-reduces per step */
    int graphs;             /* 1 when the steps after the first ran as CUDA Graphs (the config's
                               cuda_graphs on a backend with graphs); 0 on the CPU */
    int processes;          /* the world's processes that ran the step together (1 without a launcher) */
    int allreduce_with_update; /* 1 when the timed all-reduce is fused with the update (the CPU's towers
                                  sharing one state, tw_update_mean): its time includes the update's */
} tw_bench_info;

/* Runs o->warmup + o->steps training steps of c's model (c->towers towers of o->backend) on one fixed
 * synthetic batch of c's shape: inputs uniform in [0, 1), labels uniform over the classes. No dataset is
 * opened and nothing is written. The step is tw_train's own (upload, forward, backward, loss, all-reduce,
 * update + EMA) without the input pipeline; each step, and its all-reduce, lies between two
 * tw_backend_sync of every tower. Fills o->step_s, o->allreduce_s and *info. Errors: the model's and the
 * backend's (TW_ERR_UNSUPPORTED: no such device); TW_ERR_INVALID for bad options or when the loss is
 * not finite (the update was skipped, the timing would be wrong). Not thread-safe (the backend plan is
 * process-wide). */
tw_status tw_train_bench(const tw_config *c, const tw_bench_options *o, tw_bench_info *info,
                         tw_error *err);

/* tf.train.exponential_decay(lr, global_step, decay_steps, decay_rate, staircase), in float32. */
float tw_learning_rate(const tw_config *c, int64_t global_step);

/* tf.train.ExponentialMovingAverage's decay at num_updates: min(decay, (1 + n) / (10 + n)). */
float tw_ema_decay(float decay, int64_t num_updates);

#endif
