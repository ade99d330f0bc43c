/* trainer.h — a run's lifecycle (trainer.c): setup, the step loop, the cadence of summaries, evaluation
 * and checkpoints, resume, the progress lines, the outcome.
 *
 * Owns: one run from a validated tw_config: the loop over train_step.h's steps, evaluation with raw and
 * EMA weights, the event file's scalars, histograms, images, graph, config text and HParams session,
 * checkpoints every checkpoint_every steps and at the end, bit-exact resume from the latest checkpoint,
 * the memory check before the towers allocate, and when to write each progress line. Does not own the
 * step (train_step.h), the schedules (schedule.h), the lines' form or the exit statuses (child.h), the
 * formats (eventlog/), the math (backends) or the data (input.h). */
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

/* The parameters of model m (built from c) from c's init_from checkpoint — its raw weights or their EMA
 * shadows, each found by the variable's name and checked against its shape — into dst[P] (the params
 * arena's layout; NULL: only check). Not the optimizer state. Errors: TW_ERR_INVALID "init_from: ..."
 * naming the variable the checkpoint lacks or has with another shape; the checkpoint reader's errors
 * (a missing or damaged file). */
struct tw_model;
tw_status tw_train_init_from(const tw_config *c, const struct tw_model *m, float *dst, tw_error *err);

/* Runs c to c->steps (or until stopped). Errors: any module's (data, backend, I/O). */
tw_status tw_train(const tw_config *c, const tw_train_options *o, tw_train_outcome *outcome,
                   tw_error *err);

/* Asks the running loop to checkpoint and stop after the current step. Async-signal-safe. */
void tw_train_request_stop(void);

#endif
