/* train_step.h — the training step: N towers (a backend instance and a model replica each), one step on
 * the host batch, and the same step timed on synthetic data for `tower bench`.
 *
 * Owns: the towers (the backend plan, instances, replicas, the memory check before anything is
 * allocated), the two alternating host batch buffers, the initial parameters, the step (the plain step
 * and the speed modes that compute its bits faster, chosen once per run from one table: train_step.c)
 * and the bench. Does not own the input pipeline, evaluation, checkpoints or the run's cadence
 * (trainer.c), the schedules (schedule.h), nor the math (backends). Used by trainer.c and bench_main.c. */
#ifndef TW_TRAIN_STEP_H
#define TW_TRAIN_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "memory.h"
#include "model.h"
#include "status.h"
#include "world.h"

enum { TW_MAX_TOWERS = 64 };

/* The towers of a run. Zero-initialise, set bench when timing and world when several processes train
 * together, then tw_towers_model. */
typedef struct {
    const tw_config *c;             /* borrowed */
    tw_world *world;                /* borrowed; NULL: a world of one. Every process of it runs n towers */
    int tower0;                     /* the global index of tower 0 (tw_world_tower_offset) */
    int world_towers;               /* towers of all processes: n × the world's size */
    float *world_grads;             /* [P] host copy of the gradients for the processes' all-reduce; NULL
                                       in a world of one or a device world */
    int device_world;               /* the towers joined the backend's world of processes (CUDA: one NCCL
                                       world of every process's GPUs): its all-reduce averages over all */
    tw_model *m;                    /* owned */
    int n;                          /* towers */
    tw_backend *b[TW_MAX_TOWERS];   /* owned */
    tw_replica *r[TW_MAX_TOWERS];   /* owned */
    tw_buffer *scalar;              /* [1] fp32 on tower 0, for sums of squares */
    size_t in_size, label_values, P; /* floats per example, label values per example, parameter floats */
    size_t trained;                 /* the leading P values training updates (the rest: batch norm's moving
                                       statistics, which tower 0's forward pass moves) */
    float *x;                       /* [n*batch, in_size] the host batch of this step: xb[0] or xb[1]; this
                                       process's rows of the world's batch (tw_towers_first_row) */
    void *y;                        /* [n*batch*label_values] int32 or fp32 labels: yb[0] or yb[1] */
    float *xb[2];                   /* the host batch buffers (tw_backend_alloc_host on b[0]) */
    void *yb[2];
    const struct tw_step_mode *mode; /* how each step runs (train_step.c's table), chosen at create */
    int graphs;                     /* config's cuda_graphs and a backend with graphs */
    int64_t steps_run;              /* train steps this process ran (the first never as graphs) */
    int64_t step;                   /* completed updates (global_step) */
    tw_update update;               /* the update of the step in progress */
    int bench;                      /* one batch buffer, filled once; the all-reduce timed */
    double allreduce_time;          /* bench: seconds of this step's all-reduce, between syncs */
    struct tw_tower_pool *pool;     /* owned: a thread per tower (NULL with one, or towers in turn) */
    size_t fused_lo, fused_hi;      /* the fused mode's range: the first layer's weights, updated inside
                                       the backward pass (tw_model_fused_range); 0, 0 in other modes */
    int keep_grads;                 /* the caller's, for the next step: tower 0's gradient arena must hold
                                       the mean afterwards (a histogram reads it); else a shared update
                                       may skip writing it there */
} tw_towers;

/* Creates c's model into T (no device touched): m, n, tower0, world_towers, in_size, P, label_values. Errors: TW_ERR_INVALID
 * (towers outside 1..TW_MAX_TOWERS), the model's. */
tw_status tw_towers_model(tw_towers *T, const tw_config *c, tw_error *err);

/* Refuses a run that cannot fit in memory (memory.h) on backend kind, before anything is allocated.
 * data: the datasets' examples held in memory (NULL: none); memory_limit: bytes per device, 0 = what
 * the machine has. */
tw_status tw_towers_check_memory(const tw_towers *T, const char *kind, const tw_memory_data *data,
                                 uint64_t memory_limit, tw_error *err);

/* Creates the n instances of backend kind, their replicas and the host batch buffers. */
tw_status tw_towers_create(tw_towers *T, const char *kind, tw_error *err);

/* Frees what T holds (also after a failed create). */
void tw_towers_destroy(tw_towers *T);

/* Uploads v ([P] fp32) into arena(replica) of every tower (once into an arena the towers share). */
tw_status tw_towers_upload_all(tw_towers *T, tw_tensor (*arena)(const tw_replica *), const float *v,
                               tw_error *err);

/* The model's initial parameters (from the config's seed) into the params and EMA of every tower. */
tw_status tw_towers_init_params(tw_towers *T, tw_error *err);

/* Points x and y at the host buffer of the next step (the other one's upload may still be in flight). */
void tw_towers_next_batch(tw_towers *T);

/* The row of the world's batch (world_towers × batch examples a step) where local tower t's examples
 * start: (tower0 + t) × batch. Each process takes rows [first_row(0), first_row(0) + n × batch) of it
 * from the input (tw_input_next_rows), so each example of an epoch goes to exactly one tower of the
 * world, the one it would go to in one process with world_towers towers. */
size_t tw_towers_first_row(const tw_towers *T, int t);

/* One training step on the batch in x and y: *loss = the mean loss over the world's examples. The
 * gradients are averaged over the local towers, then over the world's processes (every process calls it
 * in step). When the loss is not finite nothing is applied (step is unchanged: the caller stops; the
 * loss is the world's, so every process stops); else step advances by one. */
tw_status tw_towers_step(tw_towers *T, double *loss, tw_error *err);

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
    char mode[16];          /* the step mode that ran: "plain", "shared", "in_turn" or "fused"
                               (train_step.c's table) */
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

#endif
