/* trainer.c — the training loop. See trainer.h.
 *
 * One step: the input hands out towers × batch_size examples; tower t runs forward and backward on its
 * slice (on its own thread when there are several); the gradient arenas are averaged across towers;
 * every tower applies the same fused update (optimizer + L2 + EMA), so the replicas stay identical.
 * Everything random is a function of (seed, step, tower), and the data position is checkpointed, so a
 * resumed run repeats an uninterrupted one bit for bit. tw_train_bench runs the same step on a synthetic
 * batch, without input or output, and times it and its all-reduce between syncs of every tower.
 *
 * CUDA Graphs (config "cuda_graphs", on a backend with graphs): the first step of a process runs op by
 * op (it grows the backend's scratch and warms cuBLAS up); from the second on, each tower records its
 * forward and backward pass as graph GRAPH_TOWER and its update as GRAPH_UPDATE and replays them. The
 * batch upload and the loss download stay outside the graphs, and so does the all-reduce (NCCL runs
 * between the two graphs, as in an eager step), so the step keeps its order: the loss is known before
 * the update is queued. Every capture re-records the step and the backend updates the instantiated
 * graph with the new kernel arguments (learning rate, EMA decay, Adam alpha, dropout seeds) instead of
 * reading them from device memory, so a replay computes exactly what the eager step would.
 *
 * Host batches come from tw_backend_alloc_host (page-locked on CUDA: uploads run on the backend's copy
 * stream) and alternate between two buffers from step to step, so the input pipeline fills one while
 * the upload from the other may still be in flight. */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend.h"
#include "checkpoint.h"
#include "child.h"
#include "datafs.h"
#include "events.h"
#include "input.h"
#include "memory.h"
#include "model.h"

enum { MAX_TOWERS = 64, CKPT_ARENAS = 4 };

static volatile sig_atomic_t stop_requested;

void tw_train_request_stop(void) { stop_requested = 1; }

float tw_learning_rate(const tw_config *c, int64_t global_step)
{
    if (!c->lr_decay)
        return c->learning_rate;
    float p = (float)global_step / (float)c->decay_steps;
    if (c->staircase)
        p = floorf(p);
    return c->learning_rate * powf(c->decay_rate, p);
}

float tw_ema_decay(float decay, int64_t num_updates)
{
    float n = (float)num_updates;
    float warm = (1.0f + n) / (10.0f + n);
    return warm < decay ? warm : decay;
}

typedef struct {
    const tw_config *c;
    const tw_train_options *o;
    tw_model *m;
    int n;                          /* towers */
    tw_backend *b[MAX_TOWERS];
    tw_replica *r[MAX_TOWERS];
    tw_buffer *scalar;              /* [1] fp32 on tower 0, for sum of squares */
    tw_input *train, *test;
    tw_events_writer *ev;           /* NULL once degraded */
    size_t in_size, label_values, P;
    float *x;                       /* [n*batch, in_size] host batch: xb[0] or xb[1] */
    void *y;                        /* [n*batch*label_values] int32 or fp32 labels: yb[0] or yb[1] */
    float *xb[2];                   /* the two host batch buffers (tw_backend_alloc_host on b[0]) */
    void *yb[2];
    int graphs;                     /* config's cuda_graphs and a backend with graphs */
    int64_t steps_run;              /* train steps this process ran (the first never as graphs) */
    float *host[CKPT_ARENAS];       /* [P] params, ema, slot1, slot2 downloads */
    float *outs;                    /* [batch, outputs] evaluation outputs */
    void *eval_y;                   /* [batch*label_values] evaluation labels */
    int64_t step;                   /* completed updates */
    tw_update update;               /* the update of the step in progress */
    double loss_sum;                /* training loss since the last report */
    int64_t loss_steps;
    double train_time;              /* seconds spent in train steps since the last report */
    int64_t step_report;            /* step of the last report */
    double t_start;
    int64_t step_start;
    tw_child_out out;               /* the progress lines (child.h), on o->progress */
    char ckpt_dir[TW_PATH_BYTES + 16];
    int bench;                      /* tw_train_bench: one synthetic batch in x/y, no input, no output */
    double allreduce_time;          /* bench: seconds of this step's all-reduce, between syncs */
} run;

static double now(void) { return tw_child_now(); }

/* ================================ output ================================ */

/* A failed event write never stops training (RELIABILITY.md P9): say so once, stop writing. */
static void events_failed(run *R, const tw_error *e)
{
    char msg[1200];
    tw_error_format(e, msg, sizeof msg);
    tw_child_warning(&R->out, TW_CHILD_METRICS_DEGRADED, msg, R->step);
    tw_events_destroy(R->ev);
    R->ev = NULL;
}

static void scalar(run *R, const char *tag, double v)
{
    tw_error e;
    if (R->ev && tw_events_add_scalar(R->ev, tag, R->step, (float)v, &e) != TW_OK)
        events_failed(R, &e);
}

static void histogram(run *R, const char *prefix, const char *name, const char *suffix,
                      const float *v, size_t n)
{
    char tag[256];
    snprintf(tag, sizeof tag, "%s%s%s", prefix, name, suffix);
    tw_error e;
    if (R->ev && tw_events_add_histogram(R->ev, tag, R->step, v, n, &e) != TW_OK)
        events_failed(R, &e);
}

/* ================================ setup ================================ */

static tw_status open_inputs(run *R, tw_error *err)
{
    const tw_config *c = R->c;
    tw_input_options io;
    tw_input_options_default(&io);
    io.path = c->train_path;
    io.image_feature = c->image_feature;
    io.label_feature = c->label_feature;
    io.example_size = R->in_size;
    io.scale = c->scale;
    io.float_labels = c->loss == TW_LOSS_MSE;
    io.classes = c->loss == TW_LOSS_MSE ? 0 : tw_model_output_size(R->m);
    io.seed = c->seed;
    io.shuffle = 1;
    io.shuffle_buffer = c->shuffle_buffer;
    TW_TRY(tw_input_open(&io, &R->train, err));
    if (!c->test_path[0])
        return TW_OK;
    io.path = c->test_path;
    io.shuffle = 0;
    io.prefetch_batches = 0;
    return tw_input_open(&io, &R->test, err);
}

static tw_status alloc_host(run *R, tw_error *err)
{
    size_t outs = (size_t)tw_model_output_size(R->m);
    int ok = (R->outs = malloc((size_t)R->c->batch_size * outs * sizeof(float))) &&
             (R->eval_y = malloc((size_t)R->c->batch_size * R->label_values * 4));
    for (int a = 0; a < CKPT_ARENAS; a++)
        ok = ok && (R->host[a] = malloc((R->P ? R->P : 1) * sizeof(float)));
    return ok ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

/* The host batch buffers, from tower 0's backend (page-locked on CUDA); two of them, alternating by
 * step, except in the bench, which uploads the one batch it filled in every step. */
static tw_status alloc_batches(run *R, tw_error *err)
{
    size_t rows = (size_t)R->n * (size_t)R->c->batch_size;
    for (int i = 0; i < (R->bench ? 1 : 2); i++) {
        void *x;
        TW_TRY(tw_backend_alloc_host(R->b[0], rows * R->in_size * sizeof(float), &x, err));
        R->xb[i] = x;
        TW_TRY(tw_backend_alloc_host(R->b[0], rows * R->label_values * 4, &R->yb[i], err));
    }
    R->x = R->xb[0];
    R->y = R->yb[0];
    return TW_OK;
}

static tw_status create_towers(run *R, tw_error *err)
{
    TW_TRY(tw_backend_plan(R->o->backend, R->n, err));
    for (int t = 0; t < R->n; t++) {
        TW_TRY(tw_backend_create(R->o->backend, t, &R->b[t], err));
        TW_TRY(tw_backend_set_tf32(R->b[t], R->c->tf32, err));
        TW_TRY(tw_replica_create(R->m, R->b[t], R->c->batch_size, &R->r[t], err));
    }
    R->graphs = R->c->cuda_graphs && tw_backend_has_graphs(R->b[0]);
    TW_TRY(alloc_batches(R, err));
    return tw_backend_alloc(R->b[0], sizeof(float), &R->scalar, err);
}

/* Same values into one arena of every tower. */
static tw_status upload_all(run *R, tw_tensor (*arena)(const tw_replica *), const float *v,
                            tw_error *err)
{
    for (int t = 0; t < R->n; t++)
        TW_TRY(tw_backend_upload(R->b[t], arena(R->r[t]), v, R->P * sizeof(float), err));
    return TW_OK;
}

static tw_status init_params(run *R, tw_error *err)
{
    tw_model_init_params(R->m, R->c->seed, R->host[0]);
    TW_TRY(upload_all(R, tw_replica_params, R->host[0], err));
    return upload_all(R, tw_replica_ema, R->host[0], err); /* shadows start at the initial values */
}

/* ================================ checkpoints ================================ */

static tw_tensor (*const ARENAS[CKPT_ARENAS])(const tw_replica *) = {
    tw_replica_params, tw_replica_ema, tw_replica_slot1, tw_replica_slot2};

/* TensorFlow's names for the EMA shadow and the optimizer slots of a variable. */
static const char *arena_suffix(const tw_config *c, int a)
{
    switch (a) {
    case 1: return "/ExponentialMovingAverage";
    case 2: return c->optimizer == TW_OPT_ADAM ? "/Adam" : "/Momentum";
    case 3: return "/Adam_1";
    default: return "";
    }
}

/* The arenas a checkpoint holds: params and EMA, then the optimizer's slots (none for SGD, the
 * accumulator for momentum, m and v for Adam). */
static int saved_arenas(const tw_config *c)
{
    return 2 + (c->optimizer == TW_OPT_MOMENTUM) + 2 * (c->optimizer == TW_OPT_ADAM);
}

static tw_status save_checkpoint(run *R, tw_error *err)
{
    size_t np = tw_model_n_params(R->m), n = 0;
    tw_ckpt_tensor *t = calloc(np * CKPT_ARENAS, sizeof *t);
    char (*names)[TW_PARAM_NAME_BYTES + 32] = calloc(np * CKPT_ARENAS, sizeof *names);
    tw_status s = t && names ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    for (int a = 0; a < saved_arenas(R->c) && s == TW_OK; a++) {
        s = tw_backend_download(R->b[0], R->host[a], ARENAS[a](R->r[0]), R->P * sizeof(float), err);
        for (size_t i = 0; i < np && s == TW_OK; i++, n++) {
            const tw_param *p = tw_model_param(R->m, i);
            snprintf(names[n], sizeof names[n], "%s%s", p->name, arena_suffix(R->c, a));
            t[n] = (tw_ckpt_tensor){.name = names[n], .data = R->host[a] + p->offset,
                                    .rank = p->rank};
            for (int d = 0; d < p->rank; d++)
                t[n].shape[d] = p->shape[d];
        }
    }
    tw_input_position pos = tw_input_tell(R->train);
    char step[24], epoch[24], consumed[24], seed[24];
    snprintf(step, sizeof step, "%lld", (long long)R->step);
    snprintf(epoch, sizeof epoch, "%llu", (unsigned long long)pos.epoch);
    snprintf(consumed, sizeof consumed, "%llu", (unsigned long long)pos.consumed);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)R->c->seed);
    char *config = tw_config_to_json(R->c);
    const tw_ckpt_meta meta[] = {{"format", "tower-checkpoint-1"}, {"step", step},
                                 {"data_epoch", epoch},           {"data_consumed", consumed},
                                 {"seed", seed},                  {"config", config ? config : ""}};
    tw_error e; /* every point up to this step reaches the event file before a resume can start here */
    if (R->ev && tw_events_flush(R->ev, &e) != TW_OK)
        events_failed(R, &e);
    if (s == TW_OK)
        s = tw_checkpoint_save(R->ckpt_dir, R->step, R->c->keep_checkpoints, t, n, meta,
                               sizeof meta / sizeof meta[0], err);
    free(config);
    free(names);
    free(t);
    return s;
}

static tw_status meta_u64(const tw_checkpoint *ck, const char *key, uint64_t *v, tw_error *err)
{
    const char *path = tw_checkpoint_path(ck);
    const char *s = tw_checkpoint_meta(ck, key);
    char *end;
    if (!s || !*s)
        return tw_error_set(err, TW_ERR_CORRUPT, path, -1, "checkpoint metadata lacks '%s'", key);
    *v = strtoull(s, &end, 10);
    return *end ? tw_error_set(err, TW_ERR_CORRUPT, path, -1, "checkpoint metadata '%s' is '%s'",
                               key, s)
                : TW_OK;
}

/* Copies the checkpoint's tensors into host[a] and uploads them to every tower. */
static tw_status restore_arenas(run *R, const tw_checkpoint *ck, tw_error *err)
{
    for (int a = 0; a < saved_arenas(R->c); a++) {
        for (size_t i = 0; i < tw_model_n_params(R->m); i++) {
            const tw_param *p = tw_model_param(R->m, i);
            char name[TW_PARAM_NAME_BYTES + 32];
            snprintf(name, sizeof name, "%s%s", p->name, arena_suffix(R->c, a));
            TW_TRY(tw_checkpoint_fetch(ck, name, p->rank, p->shape, R->host[a] + p->offset, err));
        }
        TW_TRY(upload_all(R, ARENAS[a], R->host[a], err));
    }
    return TW_OK;
}

/* Restores the arenas, the step and the data position from ck. */
static tw_status load_checkpoint(run *R, const tw_checkpoint *ck, tw_error *err)
{
    uint64_t step = 0, epoch = 0, consumed = 0;
    TW_TRY(meta_u64(ck, "step", &step, err));
    TW_TRY(meta_u64(ck, "data_epoch", &epoch, err));
    TW_TRY(meta_u64(ck, "data_consumed", &consumed, err));
    TW_TRY(restore_arenas(R, ck, err));
    R->step = (int64_t)step;
    tw_input_position pos = {.epoch = epoch, .consumed = consumed};
    return tw_input_seek(R->train, &pos, err);
}

/* ================================ one step ================================ */

/* Work one tower does in a phase of the step; *out is summed over the towers. */
typedef tw_status (*tower_fn)(run *R, int t, double *out, tw_error *err);

typedef struct {
    run *R;
    int t;
    tower_fn fn;
    double out;
    tw_status status;
    tw_error err;
} tower_job;

static uint64_t dropout_seed(const run *R, int t)
{
    return tw_hash64(R->c->seed ^ 0x64726f706f7574ull, (uint64_t)R->step * MAX_TOWERS + (uint64_t)t);
}

/* The graphs of a step (module comment). */
enum { GRAPH_TOWER = 0, GRAPH_UPDATE = 1 };

/* Device work of one tower in a phase of the step: queued only, nothing waited for. */
typedef tw_status (*device_fn)(run *R, int t, tw_error *err);

/* fn's work on tower t: queued op by op, or, once graphs are in use (not in a process's first step),
 * recorded as graph `slot` of tower t and replayed. */
static tw_status on_device(run *R, int t, int slot, device_fn fn, tw_error *err)
{
    if (!R->graphs || R->steps_run == 0)
        return fn(R, t, err);
    TW_TRY(tw_backend_capture_begin(R->b[t], err));
    tw_status s = fn(R, t, err);
    tw_error dropped;
    tw_status e = tw_backend_capture_end(R->b[t], slot, s == TW_OK, s == TW_OK ? err : &dropped);
    TW_TRY(s);
    TW_TRY(e);
    return tw_backend_replay(R->b[t], slot, err);
}

/* Forward and backward (train mode: dropout) on tower t's uploaded slice. */
static tw_status tower_compute(run *R, int t, tw_error *err)
{
    int bs = R->c->batch_size;
    uint64_t seed = dropout_seed(R, t);
    TW_TRY(tw_replica_forward(R->r[t], bs, 1, 0, seed, err));
    return tw_replica_backward(R->r[t], bs, seed, err);
}

/* Forward and backward on tower t's slice of the batch; *loss_sum = its summed loss. */
static tw_status tower_step(run *R, int t, double *loss_sum, tw_error *err)
{
    int bs = R->c->batch_size;
    const float *x = R->x + (size_t)t * bs * R->in_size;
    const char *y = (const char *)R->y + (size_t)t * bs * R->label_values * 4;
    TW_TRY(tw_replica_upload_batch(R->r[t], bs, x, y, err));
    TW_TRY(on_device(R, t, GRAPH_TOWER, tower_compute, err));
    return tw_replica_loss_sum(R->r[t], bs, loss_sum, err);
}

static tw_status apply_update(run *R, int t, tw_error *err)
{
    tw_replica *r = R->r[t];
    return tw_update_step(R->b[t], &R->update, tw_replica_params(r), tw_replica_grads(r),
                          tw_replica_slot1(r), tw_replica_slot2(r), tw_replica_ema(r), R->P, err);
}

/* The same update on every replica (from the averaged gradients), so they stay identical. */
static tw_status tower_update(run *R, int t, double *unused, tw_error *err)
{
    *unused = 0;
    return on_device(R, t, GRAPH_UPDATE, apply_update, err);
}

static void *tower_main(void *arg)
{
    tower_job *j = arg;
    j->status = j->fn(j->R, j->t, &j->out, &j->err);
    return NULL;
}

/* Runs fn on every tower, each on its own thread when there are several; *sum = the outputs' sum. */
static tw_status for_each_tower(run *R, tower_fn fn, double *sum, tw_error *err)
{
    tower_job jobs[MAX_TOWERS];
    pthread_t threads[MAX_TOWERS];
    int started[MAX_TOWERS] = {0};
    for (int t = 0; t < R->n; t++) {
        jobs[t] = (tower_job){.R = R, .t = t, .fn = fn};
        tw_error_clear(&jobs[t].err);
        if (t > 0)
            started[t] = pthread_create(&threads[t], NULL, tower_main, &jobs[t]) == 0;
        if (t > 0 && !started[t])
            tower_main(&jobs[t]);
    }
    tower_main(&jobs[0]);
    tw_status s = TW_OK;
    *sum = 0;
    for (int t = 0; t < R->n; t++) {
        if (started[t])
            pthread_join(threads[t], NULL);
        if (jobs[t].status != TW_OK && s == TW_OK) {
            s = jobs[t].status;
            if (err)
                *err = jobs[t].err;
        }
        *sum += jobs[t].out;
    }
    return s;
}

/* Forward and backward on every tower; *loss = the mean loss over the step's examples. */
static tw_status run_towers(run *R, double *loss, tw_error *err)
{
    double sum;
    TW_TRY(for_each_tower(R, tower_step, &sum, err));
    size_t per_example = R->c->loss == TW_LOSS_MSE ? (size_t)tw_model_output_size(R->m) : 1;
    *loss = sum / ((double)R->n * R->c->batch_size * (double)per_example);
    return TW_OK;
}

static tw_update step_update(const run *R)
{
    const tw_config *c = R->c;
    int64_t t = R->step + 1; /* this update's number, 1-based; global_step before it is R->step */
    tw_update u = {.kind = c->optimizer, .lr = tw_learning_rate(c, R->step), .momentum = c->momentum,
                   .beta1 = c->beta1, .beta2 = c->beta2, .epsilon = c->epsilon, .l2 = c->l2,
                   .l2_count = tw_model_weight_floats(R->m), .ema = c->ema_decay > 0,
                   .ema_decay = tw_ema_decay(c->ema_decay, t)};
    double b1t = pow(c->beta1, (double)t), b2t = pow(c->beta2, (double)t);
    u.adam_alpha = (float)(u.lr * sqrt(1.0 - b2t) / (1.0 - b1t));
    return u;
}

/* A phase of the step that the bench times as a whole (the step itself, its all-reduce). */
typedef tw_status (*phase_fn)(run *R, double *out, tw_error *err);

/* Waits for every tower's queued work. */
static tw_status sync_towers(run *R, tw_error *err)
{
    for (int t = 0; t < R->n; t++)
        TW_TRY(tw_backend_sync(R->b[t], err));
    return TW_OK;
}

/* fn between two syncs of every tower, so that the device work it queues lies inside the interval;
 * *seconds = its wall time. */
static tw_status synced(run *R, phase_fn fn, double *out, double *seconds, tw_error *err)
{
    TW_TRY(sync_towers(R, err));
    double t0 = now();
    TW_TRY(fn(R, out, err));
    TW_TRY(sync_towers(R, err));
    *seconds = now() - t0;
    return TW_OK;
}

/* Every tower's gradient arena becomes the mean over the towers. */
static tw_status average_gradients(run *R, double *unused, tw_error *err)
{
    *unused = 0;
    tw_tensor grads[MAX_TOWERS];
    for (int t = 0; t < R->n; t++)
        grads[t] = tw_replica_grads(R->r[t]);
    return tw_backend_allreduce_avg(R->b, R->n, grads, R->P, err);
}

static tw_status train_step(run *R, double *loss, tw_error *err)
{
    int rows = R->n * R->c->batch_size;
    if (!R->bench) { /* the bench trains on the one batch it filled in */
        int k = (int)(R->steps_run & 1); /* the other buffer's upload may still be in flight */
        R->x = R->xb[k];
        R->y = R->yb[k];
        TW_TRY(tw_input_next(R->train, rows, R->x, R->y, err));
    }
    TW_TRY(run_towers(R, loss, err));
    if (!isfinite(*loss))
        return TW_OK; /* the caller stops before this state is applied or saved */
    double unused;
    if (R->n > 1 && R->bench)
        TW_TRY(synced(R, average_gradients, &unused, &R->allreduce_time, err));
    else if (R->n > 1)
        TW_TRY(average_gradients(R, &unused, err));
    R->update = step_update(R);
    TW_TRY(for_each_tower(R, tower_update, &unused, err));
    R->steps_run++;
    R->step++;
    return TW_OK;
}

/* ================================ evaluation ================================ */

typedef struct {
    double loss;      /* mean per example (per value for MSE) */
    double accuracy;  /* classification only */
    int64_t examples;
} eval_result;

static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static tw_status eval_batch(run *R, int rows, int use_ema, double *loss, int64_t *correct,
                            tw_error *err)
{
    tw_replica *r = R->r[0];
    int outs = tw_model_output_size(R->m);
    double sum;
    TW_TRY(tw_replica_upload_batch(r, rows, R->x, R->eval_y, err));
    TW_TRY(tw_replica_forward(r, rows, 0, use_ema, 0, err));
    TW_TRY(tw_replica_loss_sum(r, rows, &sum, err));
    *loss += sum;
    if (R->c->loss == TW_LOSS_MSE)
        return TW_OK;
    TW_TRY(tw_replica_outputs(r, rows, R->outs, err));
    const int32_t *labels = R->eval_y;
    for (int i = 0; i < rows; i++)
        *correct += argmax(R->outs + (size_t)i * outs, outs) == labels[i];
    return TW_OK;
}

static tw_status evaluate(run *R, int use_ema, eval_result *res, tw_error *err)
{
    double loss = 0;
    int64_t correct = 0, n = 0;
    int got;
    TW_TRY(tw_input_rewind(R->test, err));
    for (;;) {
        TW_TRY(tw_input_next_once(R->test, R->c->batch_size, R->x, R->eval_y, &got, err));
        if (!got)
            break;
        TW_TRY(eval_batch(R, got, use_ema, &loss, &correct, err));
        n += got;
    }
    double per = R->c->loss == TW_LOSS_MSE ? (double)tw_model_output_size(R->m) : 1.0;
    res->examples = n;
    res->loss = n ? loss / ((double)n * per) : 0;
    res->accuracy = n ? (double)correct / (double)n : 0;
    return TW_OK;
}

static tw_status eval_and_report(run *R, tw_error *err)
{
    if (!R->test)
        return TW_OK;
    eval_result raw, ema = {0};
    int with_ema = R->c->ema_decay > 0;
    TW_TRY(evaluate(R, 0, &raw, err));
    if (with_ema)
        TW_TRY(evaluate(R, 1, &ema, err));
    int classify = R->c->loss == TW_LOSS_SOFTMAX_XENT;
    tw_child_eval line = {.step = R->step, .loss = raw.loss, .examples = raw.examples,
                          .has_accuracy = classify, .accuracy = raw.accuracy, .has_ema = with_ema,
                          .loss_ema = ema.loss, .accuracy_ema = ema.accuracy};
    scalar(R, "eval/loss", raw.loss);
    if (classify)
        scalar(R, "eval/accuracy", raw.accuracy);
    if (with_ema)
        scalar(R, "eval/loss_ema", ema.loss);
    if (with_ema && classify)
        scalar(R, "eval/accuracy_ema", ema.accuracy);
    tw_child_eval_line(&R->out, &line);
    return TW_OK;
}

/* ================================ summaries ================================ */

static tw_status regularization_loss(run *R, double *reg, tw_error *err)
{
    *reg = 0;
    size_t n = tw_model_weight_floats(R->m);
    if (R->c->l2 <= 0 || n == 0)
        return TW_OK;
    float ss;
    TW_TRY(tw_sum_squares(R->b[0], tw_tensor_of(R->scalar), tw_replica_params(R->r[0]), n, err));
    TW_TRY(tw_backend_download(R->b[0], &ss, tw_tensor_of(R->scalar), sizeof ss, err));
    *reg = R->c->l2 * (double)ss / 2.0;
    return TW_OK;
}

static tw_status histograms(run *R, tw_error *err)
{
    static const int arenas[3] = {0, 1, -1}; /* params, ema, then grads */
    for (int k = 0; k < 3; k++) {
        int a = arenas[k];
        if (a == 1 && R->c->ema_decay <= 0)
            continue;
        tw_tensor src = a < 0 ? tw_replica_grads(R->r[0]) : ARENAS[a](R->r[0]);
        float *dst = R->host[a < 0 ? 2 : a];
        TW_TRY(tw_backend_download(R->b[0], dst, src, R->P * sizeof(float), err));
        for (size_t i = 0; i < tw_model_n_params(R->m); i++) {
            const tw_param *p = tw_model_param(R->m, i);
            histogram(R, a < 0 ? "gradients_on_average/" : "", p->name,
                      a == 1 ? arena_suffix(R->c, 1) : "", dst + p->offset, p->count);
        }
    }
    return TW_OK;
}

static tw_status report(run *R, tw_error *err)
{
    double t = now(), dt = R->train_time, reg;
    int64_t steps = R->step - R->step_report;
    double xent = R->loss_steps ? R->loss_sum / (double)R->loss_steps : 0;
    TW_TRY(regularization_loss(R, &reg, err));
    double ex_per_s = steps && dt > 0 ? (double)steps * R->n * R->c->batch_size / dt : 0;
    double sec_per_batch = steps ? dt / (double)steps / R->n : 0;
    double per_step = (t - R->t_start) / (double)(R->step - R->step_start);
    float lr = tw_learning_rate(R->c, R->step);
    scalar(R, "loss", xent + reg);
    scalar(R, R->c->loss == TW_LOSS_MSE ? "mean_squared_error" : "cross_entropy", xent);
    scalar(R, "regularization_loss", reg);
    scalar(R, "learning_rate", lr);
    scalar(R, "examples_per_sec", ex_per_s);
    scalar(R, "sec_per_batch", sec_per_batch);
    TW_TRY(histograms(R, err));
    const tw_child_rates rates = {.learning_rate = lr, .examples_per_sec = ex_per_s,
                                  .sec_per_batch = sec_per_batch,
                                  .eta_s = per_step * (double)(R->c->steps - R->step)};
    tw_child_step(&R->out, R->step, xent + reg, &rates);
    R->loss_sum = 0;
    R->loss_steps = 0;
    R->train_time = 0;
    R->step_report = R->step;
    return TW_OK;
}

/* ================================ the run ================================ */

static tw_status start_events(run *R, int resumed, tw_error *err)
{
    tw_events_options eo;
    tw_events_options_default(&eo);
    TW_TRY(tw_events_create(R->o->logdir, &eo, &R->ev, err));
    tw_error e;
    tw_status s = TW_OK;
    if (resumed) {
        s = tw_events_add_session_start(R->ev, R->step + 1, &e);
    } else {
        uint8_t *graph = NULL;
        size_t len = 0;
        char *config = tw_config_to_json(R->c);
        TW_TRY(tw_model_graph(R->m, &graph, &len, err));
        s = tw_events_add_graph(R->ev, graph, len, &e);
        if (s == TW_OK && config)
            s = tw_events_add_text(R->ev, "config", 0, config, &e);
        free(graph);
        free(config);
    }
    if (s != TW_OK)
        events_failed(R, &e);
    return TW_OK;
}

static tw_status maybe_resume(run *R, int *resumed, tw_error *err)
{
    *resumed = 0;
    if (!R->o->resume)
        return init_params(R, err);
    tw_checkpoint *ck;
    tw_status s = tw_checkpoint_open_latest(R->ckpt_dir, &ck, err);
    if (s == TW_END)
        return init_params(R, err);
    TW_TRY(s);
    s = load_checkpoint(R, ck, err);
    if (s == TW_OK)
        tw_child_resumed(&R->out, tw_checkpoint_path(ck), R->step);
    tw_checkpoint_free(ck);
    *resumed = s == TW_OK;
    return s;
}

static int due(int64_t step, int64_t every) { return every > 0 && step % every == 0; }

static tw_status loop(run *R, tw_train_outcome *outcome, tw_error *err)
{
    const tw_config *c = R->c;
    while (R->step < c->steps) {
        if (stop_requested) {
            *outcome = TW_TRAIN_CANCELLED;
            return save_checkpoint(R, err);
        }
        double loss, t0 = now();
        TW_TRY(train_step(R, &loss, err));
        R->train_time += now() - t0;
        if (!isfinite(loss)) {
            *outcome = TW_TRAIN_DIVERGED;
            tw_child_diverged(&R->out, loss, R->step + 1);
            return TW_OK;
        }
        R->loss_sum += loss;
        R->loss_steps++;
        if (due(R->step, c->summary_every) || R->step == c->steps)
            TW_TRY(report(R, err));
        if (due(R->step, c->eval_every) || R->step == c->steps)
            TW_TRY(eval_and_report(R, err));
        if (due(R->step, c->checkpoint_every) || R->step == c->steps)
            TW_TRY(save_checkpoint(R, err));
        tw_child_heartbeat(&R->out, R->step);
    }
    *outcome = TW_TRAIN_COMPLETED;
    return TW_OK;
}

/* The memory of the devices the towers will get: the smallest GPU's, or *known = 0. */
static void gpu_limit(const run *R, tw_memory_limit *out, int *known)
{
    *known = 0;
    for (int t = 0; t < R->n; t++) {
        tw_device_info d;
        tw_error e;
        if (tw_backend_device_info(t, &d, &e) != TW_OK)
            return; /* creating the tower's backend will say why */
        if (!*known || d.memory_bytes < out->bytes) {
            char b[32];
            tw_memory_format(d.memory_bytes, b, sizeof b);
            out->bytes = d.memory_bytes;
            snprintf(out->what, sizeof out->what, "cuda:%d (%s) has %s", t, d.name, b);
        }
        *known = 1;
    }
}

/* Refuses a run that cannot fit in memory (memory.h) before the towers allocate anything. */
static tw_status check_memory(run *R, tw_error *err)
{
    tw_memory_data d = {0};
    if (!R->bench) {
        d.train_examples = tw_input_in_memory(R->train) ? tw_input_count(R->train) : 0;
        d.test_examples = R->test && tw_input_in_memory(R->test) ? tw_input_count(R->test) : 0;
    }
    tw_memory need;
    TW_TRY(tw_memory_estimate(R->c, R->bench ? NULL : &d, &need, err));
    const char *kind = R->o->backend;
    int on_gpu = !strcmp(kind, "cuda") || (!strcmp(kind, "auto") && tw_backend_devices("cuda") > 0);
    tw_memory_limit host, gpu;
    int gpu_known = 0;
    if (R->o->memory_limit) {
        tw_memory_limit_given(R->o->memory_limit, &host);
        gpu = host;
        gpu_known = 1;
    } else {
        TW_TRY(tw_memory_host_limit(&host, err));
        if (on_gpu)
            gpu_limit(R, &gpu, &gpu_known);
    }
    return tw_memory_check(&need, on_gpu, &host, gpu_known ? &gpu : NULL, err);
}

static tw_status setup(run *R, tw_error *err)
{
    const tw_config *c = R->c;
    R->n = c->towers;
    if (R->n < 1 || R->n > MAX_TOWERS)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "towers must be 1..%d", MAX_TOWERS);
    if (!R->bench && tw_checkpoint_dir_of(R->o->logdir, R->ckpt_dir, sizeof R->ckpt_dir) != 0)
        return tw_error_set(err, TW_ERR_INVALID, R->o->logdir, -1, "the log folder's path is too long");
    TW_TRY(tw_model_create(c, &R->m, err));
    R->in_size = tw_model_input_size(R->m);
    R->P = tw_model_param_floats(R->m);
    R->label_values = c->loss == TW_LOSS_MSE ? (size_t)tw_model_output_size(R->m) : 1;
    if (!R->bench)
        TW_TRY(open_inputs(R, err));
    TW_TRY(check_memory(R, err));
    TW_TRY(alloc_host(R, err));
    return create_towers(R, err);
}

/* The first progress line: which backend `auto` chose and the device of each tower. */
static void announce(run *R)
{
    const char *devices[MAX_TOWERS];
    for (int t = 0; t < R->n; t++)
        devices[t] = tw_backend_name(R->b[t]);
    tw_child_backend(&R->out, tw_backend_kind(R->b[0]), devices, R->n);
}

static void teardown(run *R)
{
    tw_error e;
    if (R->ev && tw_events_close(R->ev, &e) != TW_OK)
        events_failed(R, &e);
    tw_events_destroy(R->ev);
    for (int t = 0; t < R->n; t++)
        tw_replica_destroy(R->r[t]);
    if (R->b[0])
        tw_backend_free(R->b[0], R->scalar);
    for (int i = 0; i < 2; i++) { /* before the backend that allocated them goes */
        tw_backend_free_host(R->b[0], R->xb[i]);
        tw_backend_free_host(R->b[0], R->yb[i]);
    }
    for (int t = 0; t < R->n; t++)
        tw_backend_destroy(R->b[t]);
    tw_input_close(R->train);
    tw_input_close(R->test);
    tw_model_destroy(R->m);
    free(R->outs);
    free(R->eval_y);
    for (int a = 0; a < CKPT_ARENAS; a++)
        free(R->host[a]);
}

static void final_line(run *R, tw_train_outcome outcome)
{
    static const char *names[] = {TW_CHILD_COMPLETED, TW_CHILD_CANCELLED, TW_CHILD_DIVERGED};
    tw_child_final(&R->out, names[outcome], R->step, now() - R->t_start);
}

tw_status tw_train(const tw_config *c, const tw_train_options *o, tw_train_outcome *outcome,
                   tw_error *err)
{
    run R = {.c = c, .o = o};
    tw_child_init(&R.out, o->progress);
    *outcome = TW_TRAIN_COMPLETED;
    int resumed = 0;
    tw_status s = setup(&R, err); /* everything is checked before anything is written */
    if (s == TW_OK)
        announce(&R);
    if (s == TW_OK && tw_fs_mkdir(o->logdir, 0755) != 0 && errno != EEXIST)
        s = tw_fs_error(err, o->logdir, "cannot create the log folder");
    if (s == TW_OK)
        s = maybe_resume(&R, &resumed, err);
    if (s == TW_OK)
        s = start_events(&R, resumed, err);
    if (s == TW_OK && !resumed && R.c->eval_every > 0)
        s = eval_and_report(&R, err); /* the baseline every later evaluation is measured against */
    R.t_start = R.out.last_write = now();
    R.step_start = R.step_report = R.step;
    if (s == TW_OK)
        s = loop(&R, outcome, err);
    if (s == TW_OK)
        final_line(&R, *outcome);
    teardown(&R);
    return s;
}

/* ================================ the bench ================================ */

/* The bench's one batch, from the seed: inputs uniform in [0, 1); labels uniform over the classes
 * (int32), or regression targets uniform in [0, 1). */
static void synthetic_batch(run *R)
{
    size_t rows = (size_t)R->n * (size_t)R->c->batch_size;
    uint64_t seed = R->c->seed, classes = (uint64_t)tw_model_output_size(R->m);
    for (size_t i = 0; i < rows * R->in_size; i++)
        R->x[i] = tw_uniform(seed, i);
    for (size_t i = 0; i < rows * R->label_values; i++) {
        if (R->c->loss == TW_LOSS_MSE)
            ((float *)R->y)[i] = tw_uniform(~seed, i);
        else
            ((int32_t *)R->y)[i] = (int32_t)(tw_hash64(~seed, i) % classes);
    }
}

static tw_status bench_steps(run *R, const tw_bench_options *o, tw_error *err)
{
    for (int i = 0; i < o->warmup + o->steps; i++) {
        double loss, seconds;
        R->allreduce_time = 0;
        TW_TRY(synced(R, train_step, &loss, &seconds, err));
        if (!isfinite(loss))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the loss on synthetic data is not "
                                "finite at step %d: lower the config's learning rate", i + 1);
        if (i >= o->warmup) {
            o->step_s[i - o->warmup] = seconds;
            o->allreduce_s[i - o->warmup] = R->allreduce_time;
        }
    }
    return TW_OK;
}

tw_status tw_train_bench(const tw_config *c, const tw_bench_options *o, tw_bench_info *info,
                         tw_error *err)
{
    if (o->warmup < 0 || o->steps < 1 || !o->step_s || !o->allreduce_s)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tw_train_bench: warmup must be >= 0, "
                            "steps >= 1, and step_s and allreduce_s [steps] arrays");
    tw_train_options to = {.backend = o->backend};
    run R = {.c = c, .o = &to, .bench = 1};
    tw_status s = setup(&R, err);
    if (s == TW_OK) {
        synthetic_batch(&R);
        s = init_params(&R, err);
    }
    if (s == TW_OK)
        s = bench_steps(&R, o, err);
    if (s == TW_OK) {
        *info = (tw_bench_info){.allreduce_bytes = R.P * sizeof(float), .graphs = R.graphs};
        snprintf(info->backend, sizeof info->backend, "%s", tw_backend_kind(R.b[0]));
    }
    teardown(&R);
    return s;
}
