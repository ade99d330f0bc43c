/* train_step.c — the training step and the bench. See train_step.h.
 *
 * Read it in this order: the plain step (one function, top to bottom: every tower's forward, loss and
 * backward pass, the mean of the gradients, one update), then the speed modes, each of which computes the
 * plain step's bits by another route on a backend that allows it, then the table that chooses one mode
 * per run (MODES). docs/architecture.md, "The backend seam", tells the story; BENCHMARKS.md, "CPU step
 * modes", has the figures behind each mode.
 *
 * Everything random is a function of (seed, step, global tower). Host batches come from
 * tw_backend_alloc_host (page-locked on CUDA) and alternate between two buffers from step to step, so the
 * input pipeline fills one while the upload from the other may still be in flight.
 *
 * CUDA Graphs (config "cuda_graphs", on a backend with graphs): the first step of a process runs op by op
 * (it grows the backend's scratch and warms cuBLAS up); from the second on, each tower records its forward
 * and backward pass as graph GRAPH_TOWER and its update as GRAPH_UPDATE and replays them. The batch upload,
 * the loss download and the all-reduce stay outside the graphs, so the loss is known before the update is
 * queued. Every capture re-records the step and the backend updates the instantiated graph with the new
 * kernel arguments, so a replay computes exactly what the eager step would.
 *
 * tw_train_bench runs the same step on a synthetic batch, without input or output, and times it and its
 * all-reduce between syncs of every tower. */
#include "train_step.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "schedule.h"
#include "tower_pool.h"

static double now(void) { return tw_child_now(); }

/* ================================ the towers ================================ */

tw_status tw_towers_model(tw_towers *T, const tw_config *c, tw_error *err)
{
    T->c = c;
    T->n = c->towers;
    if (T->n < 1 || T->n > TW_MAX_TOWERS)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "towers must be 1..%d", TW_MAX_TOWERS);
    int procs = T->world ? tw_world_size(T->world) : 1;
    if (procs > INT_MAX / T->n / c->batch_size)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%d processes of %d towers of batch %d are too "
                            "many examples per step", procs, T->n, c->batch_size);
    T->tower0 = T->world ? tw_world_tower_offset(T->world, T->n) : 0;
    T->world_towers = T->n * procs;
    TW_TRY(tw_model_create(c, &T->m, err));
    T->in_size = tw_model_input_size(T->m);
    T->P = tw_model_param_floats(T->m);
    T->trained = tw_model_trainable_floats(T->m);
    T->label_values = c->loss == TW_LOSS_MSE ? (size_t)tw_model_output_size(T->m) : 1;
    return TW_OK;
}

/* The memory of the devices the towers will get: the smallest GPU's, or *known = 0. */
static void gpu_limit(const tw_towers *T, tw_memory_limit *out, int *known)
{
    *known = 0;
    for (int t = 0; t < T->n; t++) {
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

tw_status tw_towers_check_memory(const tw_towers *T, const char *kind, const tw_memory_data *data,
                                 uint64_t memory_limit, tw_error *err)
{
    tw_memory need;
    TW_TRY(tw_memory_estimate(T->c, data, &need, err));
    int on_gpu = !strcmp(tw_backend_resolve(kind), "cuda");
    tw_memory_limit host, gpu;
    int gpu_known = 0;
    if (memory_limit) {
        tw_memory_limit_given(memory_limit, &host);
        gpu = host;
        gpu_known = 1;
    } else {
        TW_TRY(tw_memory_host_limit(&host, err));
        if (on_gpu)
            gpu_limit(T, &gpu, &gpu_known);
    }
    return tw_memory_check(&need, on_gpu, &host, gpu_known ? &gpu : NULL, err);
}

/* The host batch buffers, from tower 0's backend (page-locked on CUDA); two of them, alternating by
 * step, except in the bench, which uploads the one batch it filled in every step. */
static tw_status alloc_batches(tw_towers *T, tw_error *err)
{
    size_t rows = (size_t)T->n * (size_t)T->c->batch_size;
    for (int i = 0; i < (T->bench ? 1 : 2); i++) {
        void *x;
        TW_TRY(tw_backend_alloc_host(T->b[0], rows * T->in_size * sizeof(float), &x, err));
        T->xb[i] = x;
        TW_TRY(tw_backend_alloc_host(T->b[0], rows * T->label_values * 4, &T->yb[i], err));
    }
    T->x = T->xb[0];
    T->y = T->yb[0];
    return TW_OK;
}

/* On a backend with worlds of its own (CUDA: NCCL), the processes' towers join one: rank 0 makes the id,
 * tw_world_bcast hands it to every process (MPI_Bcast, or the TCP world's rank 0), each joins as node
 * `rank`; the towers' all-reduce then averages over every tower of the world on the devices, with no copy
 * through the host. */
static tw_status join_device_world(tw_towers *T, tw_error *err)
{
    if (T->world_towers == T->n || !tw_backend_has_world(T->b[0]))
        return TW_OK;
    unsigned char id[TW_WORLD_ID_BYTES] = {0};
    if (tw_world_rank(T->world) == 0)
        TW_TRY(tw_backend_world_id(T->b[0], id, err));
    TW_TRY(tw_world_bcast(T->world, id, sizeof id, err));
    TW_TRY(tw_backend_world_join(T->b, T->n, id, tw_world_rank(T->world), tw_world_size(T->world), err));
    T->device_world = 1;
    return TW_OK;
}

/* A way to run the step (the plain step, or a speed mode: "the speed modes" below): when it applies
 * (T's model and world, the backend's table) and what it needs from tw_towers_create. */
typedef struct tw_step_mode {
    const char *name;
    int (*applies)(const tw_towers *T, const tw_backend_ops *ops);
    tw_status (*step)(tw_towers *T, double *loss, tw_error *err);
    int shares;       /* the towers share tower 0's params, slots and EMA (tw_replica_create_sharing) */
    int one_instance; /* the towers run in turn on one backend instance with all the cores */
    int fuses;        /* the backward pass updates the first layer (tw_replica_fused_range) */
} tw_step_mode;

/* Sets T->mode: the first row of MODES whose condition holds for T and backend's table (below). */
static tw_status choose_mode(tw_towers *T, const char *backend, tw_error *err);

tw_status tw_towers_create(tw_towers *T, const char *backend, tw_error *err)
{
    TW_TRY(choose_mode(T, backend, err));
    int local = T->world ? tw_world_local_size(T->world) : 1; /* processes sharing this machine's cores */
    int one = T->mode->one_instance;
    TW_TRY(tw_backend_plan(backend, (one ? 1 : T->n) * local, NULL, err));
    for (int t = 0; t < T->n; t++) {
        if (t > 0 && one) {
            T->b[t] = T->b[0]; /* one instance, its threads all the process's share of the cores */
        } else {
            TW_TRY(tw_backend_create(backend, t, &T->b[t], err));
            tw_math math = {.tf32 = T->c->tf32, .winograd = T->c->winograd};
            TW_TRY(tw_backend_set_math(T->b[t], &math, err));
        }
        TW_TRY(tw_replica_create_sharing(T->m, T->b[t], T->c->batch_size, T->mode->shares && t ? T->r[0] : NULL,
                                         &T->r[t], err));
    }
    T->graphs = T->c->cuda_graphs && tw_backend_has_graphs(T->b[0]);
    if (T->n > 1 && !one)
        TW_TRY(tw_tower_pool_create(T->n, &T->pool, err));
    if (T->mode->fuses)
        tw_replica_fused_range(T->r[0], &T->fused_lo, &T->fused_hi);
    TW_TRY(alloc_batches(T, err));
    TW_TRY(join_device_world(T, err));
    if (T->world_towers > T->n && !T->device_world && !(T->world_grads = malloc((T->trained ? T->trained : 1) * sizeof(float))))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    return tw_backend_alloc(T->b[0], sizeof(float), &T->scalar, err);
}

tw_status tw_towers_upload_all(tw_towers *T, tw_tensor (*arena)(const tw_replica *), const float *v,
                            tw_error *err)
{
    for (int t = 0; t < T->n; t++)
        if (t == 0 || arena(T->r[t]).buf != arena(T->r[0]).buf) /* a shared arena once */
            TW_TRY(tw_backend_upload(T->b[t], arena(T->r[t]), v, T->P * sizeof(float), err));
    return TW_OK;
}

tw_status tw_towers_init_params(tw_towers *T, tw_error *err)
{
    float *host = malloc((T->P ? T->P : 1) * sizeof *host);
    if (!host)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_model_init_params(T->m, T->c->seed, host);
    tw_status s = tw_towers_upload_all(T, tw_replica_params, host, err);
    if (s == TW_OK) /* shadows start at the initial values */
        s = tw_towers_upload_all(T, tw_replica_ema, host, err);
    free(host);
    return s;
}

void tw_towers_destroy(tw_towers *T)
{
    tw_tower_pool_destroy(T->pool);
    for (int t = 0; t < T->n; t++)
        tw_replica_destroy(T->r[t]);
    if (T->b[0])
        tw_backend_free(T->b[0], T->scalar);
    for (int i = 0; i < 2; i++) { /* before the backend that allocated them goes */
        tw_backend_free_host(T->b[0], T->xb[i]);
        tw_backend_free_host(T->b[0], T->yb[i]);
    }
    for (int t = 0; t < T->n; t++)
        if (t == 0 || T->b[t] != T->b[0]) /* towers in turn share tower 0's */
            tw_backend_destroy(T->b[t]);
    free(T->world_grads);
    tw_model_destroy(T->m);
}

/* ================================ one step ================================ */

/* Work one tower does in a phase of the step; *out is summed over the towers. */
typedef tw_status (*tower_fn)(tw_towers *T, int t, double *out, tw_error *err);

typedef struct {
    double out;
    tw_status status;
    tw_error err;
} tower_job;

/* One phase on every tower (or every job of a shared update): fn, and each one's result. */
typedef struct {
    tw_towers *T;
    tower_fn fn;
    tower_job jobs[TW_MAX_TOWERS];
} tower_phase;

/* Tower t's dropout seed: a function of the global tower, so a world trains as one process would. */
static uint64_t dropout_seed(const tw_towers *T, int t)
{
    return tw_hash64(T->c->seed ^ 0x64726f706f7574ull,
                     (uint64_t)T->step * TW_MAX_TOWERS + (uint64_t)(T->tower0 + t));
}

/* The graphs of a step (module comment). */
enum { GRAPH_TOWER = 0, GRAPH_UPDATE = 1 };

/* Device work of one tower in a phase of the step: queued only, nothing waited for. */
typedef tw_status (*device_fn)(tw_towers *T, int t, tw_error *err);

/* fn's work on tower t: queued op by op, or, once graphs are in use (not in a process's first step),
 * recorded as graph `slot` of tower t and replayed. */
static tw_status on_device(tw_towers *T, int t, int slot, device_fn fn, tw_error *err)
{
    if (!T->graphs || T->steps_run == 0)
        return fn(T, t, err);
    TW_TRY(tw_backend_capture_begin(T->b[t], err));
    tw_status s = fn(T, t, err);
    tw_error dropped;
    tw_status e = tw_backend_capture_end(T->b[t], slot, s == TW_OK, s == TW_OK ? err : &dropped);
    TW_TRY(s);
    TW_TRY(e);
    return tw_backend_replay(T->b[t], slot, err);
}

/* Tower t's training forward: the world's first tower also moves batch norm's moving statistics (one tower
 * does, as the tower programs run the first tower's update ops alone). */
static int forward_flags(const tw_towers *T, int t)
{
    return TW_FORWARD_TRAIN | (T->tower0 + t == 0 ? TW_FORWARD_UPDATE_STATS : 0);
}

/* Forward and backward (train mode: dropout) on tower t's uploaded slice. */
static tw_status tower_compute(tw_towers *T, int t, tw_error *err)
{
    int bs = T->c->batch_size;
    uint64_t seed = dropout_seed(T, t);
    TW_TRY(tw_replica_forward(T->r[t], bs, forward_flags(T, t), 0, seed, err));
    return tw_replica_backward(T->r[t], bs, seed, err);
}

size_t tw_towers_first_row(const tw_towers *T, int t)
{
    return (size_t)(T->tower0 + t) * (size_t)T->c->batch_size;
}

/* Tower t's slice of the host batch into its replica. */
static tw_status upload_slice(tw_towers *T, int t, tw_error *err)
{
    int bs = T->c->batch_size;
    const float *x = T->x + (size_t)t * bs * T->in_size;
    const char *y = (const char *)T->y + (size_t)t * bs * T->label_values * 4;
    return tw_replica_upload_batch(T->r[t], bs, x, y, err);
}

/* Forward and backward on tower t's slice of the batch; *loss_sum = its summed loss. */
static tw_status tower_step(tw_towers *T, int t, double *loss_sum, tw_error *err)
{
    int bs = T->c->batch_size;
    TW_TRY(upload_slice(T, t, err));
    TW_TRY(on_device(T, t, GRAPH_TOWER, tower_compute, err));
    return tw_replica_loss_sum(T->r[t], bs, loss_sum, err);
}

static tw_status apply_update(tw_towers *T, int t, tw_error *err)
{
    tw_replica *r = T->r[t];
    return tw_update_step(T->b[t], &T->update, tw_replica_params(r), tw_replica_grads(r),
                          tw_replica_slot1(r), tw_replica_slot2(r), tw_replica_ema(r), T->trained, err);
}

/* The same update on every replica (from the averaged gradients), so they stay identical. */
static tw_status tower_update(tw_towers *T, int t, double *unused, tw_error *err)
{
    *unused = 0;
    return on_device(T, t, GRAPH_UPDATE, apply_update, err);
}

static void tower_main(void *arg, int t)
{
    tower_phase *ph = arg;
    tower_job *j = &ph->jobs[t];
    j->status = ph->fn(ph->T, t, &j->out, &j->err);
}

/* fn on every tower, each on its own thread of T->pool when there are several, else one after another
 * (towers in turn); *sum = the outputs' sum. */
static tw_status for_each_tower(tw_towers *T, tower_fn fn, double *sum, tw_error *err)
{
    tower_phase ph = {.T = T, .fn = fn};
    for (int t = 0; t < T->n; t++)
        tw_error_clear(&ph.jobs[t].err);
    if (T->pool)
        tw_tower_pool_run(T->pool, T->n, tower_main, &ph);
    else
        for (int t = 0; t < T->n; t++)
            tower_main(&ph, t);
    tw_status s = TW_OK;
    *sum = 0;
    for (int t = 0; t < T->n; t++) {
        if (ph.jobs[t].status != TW_OK && s == TW_OK) {
            s = ph.jobs[t].status;
            if (err)
                *err = ph.jobs[t].err;
        }
        *sum += ph.jobs[t].out;
    }
    return s;
}

/* The mean loss over the world's examples of a step whose summed loss is sum. */
static double mean_loss(const tw_towers *T, double sum)
{
    size_t per_example = T->c->loss == TW_LOSS_MSE ? (size_t)tw_model_output_size(T->m) : 1;
    return sum / ((double)T->world_towers * T->c->batch_size * (double)per_example);
}

/* Forward and backward on every tower; *loss = the mean loss over the world's examples of the step. */
static tw_status run_towers(tw_towers *T, double *loss, tw_error *err)
{
    double sum;
    TW_TRY(for_each_tower(T, tower_step, &sum, err));
    if (T->world)
        TW_TRY(tw_world_sum(T->world, &sum, 1, err));
    *loss = mean_loss(T, sum);
    return TW_OK;
}

static tw_update step_update(const tw_towers *T)
{
    const tw_config *c = T->c;
    int64_t t = T->step + 1; /* this update's number, 1-based; global_step before it is T->step */
    tw_update u = {.kind = c->optimizer, .lr = tw_learning_rate(c, T->step), .momentum = c->momentum,
                   .nesterov = c->nesterov, .beta1 = c->beta1, .beta2 = c->beta2, .epsilon = c->epsilon,
                   .l2 = c->l2, .weight_decay = c->weight_decay,
                   .l2_count = tw_model_weight_floats(T->m), .ema = c->ema_decay > 0,
                   .ema_decay = tw_ema_decay(c->ema_decay, t), .keep_mean = T->keep_grads};
    double b1t = pow(c->beta1, (double)t), b2t = pow(c->beta2, (double)t);
    u.adam_alpha = (float)(u.lr * sqrt(1.0 - b2t) / (1.0 - b1t));
    return u;
}

/* 1 when the run clips the gradient to a global norm ("global_clipnorm"). */
static int clips(const tw_towers *T) { return T->c->clip_norm > 0; }

/* 1 when the towers' mean is computed inside the shared update, in the same pass: several towers of one
 * process and nothing that needs the mean before the update (a world's average, the clipping norm). */
static int mean_in_update(const tw_towers *T) { return T->n > 1 && !T->world_grads && !clips(T); }

/* With clipping, the step's gradient scale: tf.clip_by_global_norm's factor for the norm of tower 0's
 * gradients, which hold the mean over the world's towers by now: clip * min(1 / norm, 1 / clip), NaN for a
 * norm that is not finite (docs/formats.md §6.10). */
static tw_status clip(tw_towers *T, tw_error *err)
{
    if (!clips(T))
        return TW_OK;
    float ss, c = T->c->clip_norm;
    TW_TRY(tw_sum_squares(T->b[0], tw_tensor_of(T->scalar), tw_replica_grads(T->r[0]), T->trained, err));
    TW_TRY(tw_backend_download(T->b[0], &ss, tw_tensor_of(T->scalar), sizeof ss, err));
    float norm = sqrtf(ss);
    T->update.grad_scale = isfinite(norm) ? c * fminf(1.0f / norm, 1.0f / c) : NAN;
    return TW_OK;
}

/* A phase of the step that the bench times as a whole (the step itself, its all-reduce). */
typedef tw_status (*phase_fn)(tw_towers *T, double *out, tw_error *err);

/* Waits for every tower's queued work. */
static tw_status sync_towers(tw_towers *T, tw_error *err)
{
    for (int t = 0; t < T->n; t++)
        TW_TRY(tw_backend_sync(T->b[t], err));
    return TW_OK;
}

/* fn between two syncs of every tower, so that the device work it queues lies inside the interval;
 * *seconds = its wall time. */
static tw_status synced(tw_towers *T, phase_fn fn, double *out, double *seconds, tw_error *err)
{
    TW_TRY(sync_towers(T, err));
    double t0 = now();
    TW_TRY(fn(T, out, err));
    TW_TRY(sync_towers(T, err));
    *seconds = now() - t0;
    return TW_OK;
}

/* Averages values [lo, hi) of every tower's gradient arena over the towers. */
static tw_status average_range(tw_towers *T, size_t lo, size_t hi, tw_error *err)
{
    tw_tensor grads[TW_MAX_TOWERS];
    for (int t = 0; t < T->n; t++)
        grads[t] = tw_tensor_at(tw_replica_grads(T->r[t]), lo);
    return hi > lo ? tw_backend_allreduce_avg(T->b, T->n, grads, hi - lo, err) : TW_OK;
}

/* Tower t's share of the all-reduce: its 1/n of the arena. */
static tw_status tower_average(tw_towers *T, int t, double *unused, tw_error *err)
{
    *unused = 0;
    return average_range(T, T->trained * (size_t)t / (size_t)T->n, T->trained * (size_t)(t + 1) / (size_t)T->n,
                         err);
}

/* Every tower's gradient arena becomes the mean over the towers: split across the towers' threads where
 * the backend allows it (the CPU: every value is summed in the same order either way), else in one
 * call for the group. */
static tw_status average_gradients(tw_towers *T, double *unused, tw_error *err)
{
    *unused = 0;
    if (T->pool && tw_backend_allreduce_splits(T->b[0]))
        return for_each_tower(T, tower_average, unused, err);
    return average_range(T, 0, T->trained, err);
}

/* The towers' (identical) averaged gradients become their mean over the world's processes: tower 0's
 * arena through the host, tw_world_allreduce_avg (world.h: MPI or TCP), back into every tower (tower 0's
 * alone when they share the update, which reads only its gradients). */
static tw_status average_world(tw_towers *T, tw_error *err)
{
    size_t bytes = T->trained * sizeof(float);
    TW_TRY(tw_backend_download(T->b[0], T->world_grads, tw_replica_grads(T->r[0]), bytes, err));
    TW_TRY(tw_world_allreduce_avg(T->world, T->world_grads, T->trained, err));
    if (T->mode->shares)
        return tw_backend_upload(T->b[0], tw_replica_grads(T->r[0]), T->world_grads, bytes, err);
    return tw_towers_upload_all(T, tw_replica_grads, T->world_grads, err);
}

/* The gradients of every tower of every process become their mean over the world's towers: in a device
 * world by the backend's all-reduce alone; else over the local towers, then over the processes (each
 * holds the same number of towers, so the mean of the means is the mean). */
static tw_status average_all(tw_towers *T, double *unused, tw_error *err)
{
    if (T->device_world) { /* one call over the world's towers, even for one local tower */
        *unused = 0;
        return average_range(T, 0, T->trained, err);
    }
    if (T->n > 1)
        TW_TRY(average_gradients(T, unused, err));
    *unused = 0;
    return T->world_grads ? average_world(T, err) : TW_OK;
}

void tw_towers_next_batch(tw_towers *T)
{
    int k = (int)(T->steps_run & 1); /* the other buffer's upload may still be in flight */
    T->x = T->xb[k];
    T->y = T->yb[k];
}

/* The step's update over values [lo, hi) of the arenas: the weights under L2 counted from lo. */
static tw_update range_update(const tw_towers *T, size_t lo, size_t hi)
{
    tw_update u = T->update;
    u.l2_count = u.l2_count > lo ? u.l2_count - lo : 0;
    u.l2_count = u.l2_count < hi - lo ? u.l2_count : hi - lo;
    return u;
}

/* The shared update of values [lo, hi) of the arenas, from the mean of the local towers' gradients (or
 * tower 0's alone, which hold the world's mean already), on tower j's backend (which cuts it over its
 * own threads). */
static tw_status update_values(tw_towers *T, int j, size_t lo, size_t hi, tw_error *err)
{
    if (hi == lo)
        return TW_OK;
    tw_update u = range_update(T, lo, hi);
    int n_grads = mean_in_update(T) ? T->n : 1;
    tw_tensor grads[TW_MAX_TOWERS];
    for (int t = 0; t < n_grads; t++)
        grads[t] = tw_tensor_at(tw_replica_grads(T->r[t]), lo);
    const tw_replica *r = T->r[0];
    return tw_update_mean(T->b[j], &u, tw_tensor_at(tw_replica_params(r), lo), grads, n_grads,
                          tw_tensor_at(tw_replica_slot1(r), lo), tw_tensor_at(tw_replica_slot2(r), lo),
                          tw_tensor_at(tw_replica_ema(r), lo), hi - lo, err);
}

/* Tower j's share of the shared update. */
static tw_status update_share(tw_towers *T, int j, double *unused, tw_error *err)
{
    *unused = 0;
    return update_values(T, j, tw_tower_pool_cut(T->trained, T->n, j), tw_tower_pool_cut(T->trained, T->n, j + 1), err);
}

/* fn, timed as the step's all-reduce in the bench. */
static tw_status timed(tw_towers *T, phase_fn fn, tw_error *err)
{
    double unused;
    if (T->bench)
        return synced(T, fn, &unused, &T->allreduce_time, err);
    return fn(T, &unused, err);
}

/* ================================ the plain step ================================ */

/* The step as the tower programs take it, top to bottom: every tower's forward pass, loss and backward
 * pass on its slice of the batch (on its own thread when there are several); the mean of the gradients
 * over the world's towers; the same update (optimizer, L2, EMA) on every replica, so they stay identical.
 * Nothing is applied when the loss is not finite (the caller stops). */
static tw_status plain_step(tw_towers *T, double *loss, tw_error *err)
{
    double unused;
    TW_TRY(run_towers(T, loss, err)); /* forward, loss, backward */
    if (!isfinite(*loss))
        return TW_OK;
    if (T->world_towers > 1)
        TW_TRY(timed(T, average_all, err)); /* the mean */
    T->update = step_update(T);
    TW_TRY(clip(T, err));
    return for_each_tower(T, tower_update, &unused, err); /* the update */
}

/* ================================ the speed modes ================================ */

/* The shared modes' end of a step: the update of the one shared state from the towers' mean, by `update`
 * (a share per tower, or whole). The mean is part of the update when it can be (the bench then times the
 * two together as the all-reduce); otherwise it comes first, with the world's, then the clipping. */
static tw_status mean_and_shared_update(tw_towers *T, phase_fn update, tw_error *err)
{
    double unused;
    T->update = step_update(T);
    if (mean_in_update(T))
        return timed(T, update, err);
    if (T->world_towers > 1)
        TW_TRY(timed(T, average_all, err));
    TW_TRY(clip(T, err));
    return update(T, &unused, err);
}

/* Each tower's share of the shared update, on its own thread. */
static tw_status update_by_shares(tw_towers *T, double *unused, tw_error *err)
{
    return for_each_tower(T, update_share, unused, err);
}

/* The whole shared update in one call, which the towers' one instance cuts over its threads as it cut
 * the weight gradients' rows (each thread then updates mostly the gradients it computed). */
static tw_status update_whole(tw_towers *T, double *unused, tw_error *err)
{
    *unused = 0;
    return update_values(T, 0, 0, T->trained, err);
}

/* shared (a backend with tw_update_mean: the CPU): the towers hold one copy of the parameters, slots and
 * shadows (tw_replica_create_sharing), and the mean over the towers and the update run in one pass, a
 * share per tower cut over the tower's own threads. The update is memory-bound: one copy on all cores
 * instead of n. The mean is written back into tower 0's gradients only for a step whose histogram reads
 * it (keep_grads). Bit for bit the plain step's averaged separate updates. */
static tw_status shared_step(tw_towers *T, double *loss, tw_error *err)
{
    TW_TRY(run_towers(T, loss, err));
    return isfinite(*loss) ? mean_and_shared_update(T, update_by_shares, err) : TW_OK;
}

/* in_turn (shared, several towers, a model without convolutions): the towers run one after another on one
 * backend instance holding all the process's cores (T->pool is NULL), each product cut over its threads,
 * and one whole update follows. Such a model's products are small, so the cut multiplies about as well as
 * a thread per tower, and the update then finds on each thread the gradient rows it computed.
 * Convolutions keep a tower per share of the cores (shared): oneDNN's OpenMP team loses more to its
 * barriers. */
static tw_status in_turn_step(tw_towers *T, double *loss, tw_error *err)
{
    TW_TRY(run_towers(T, loss, err));
    return isfinite(*loss) ? mean_and_shared_update(T, update_whole, err) : TW_OK;
}

/* fused (one tower in a world of one on a backend with tw_gemm_update, a model that starts with a dense
 * layer): the gradients are final as soon as they are computed, so the backward pass updates the first
 * layer's weights block by block as their gradient's product computes them, while they are in the cache
 * (tw_replica_backward_update), then the rest of the arenas. The loss is checked after the forward pass.
 * Bit for bit the plain step. */
static tw_status fused_step(tw_towers *T, double *loss, tw_error *err)
{
    int bs = T->c->batch_size;
    uint64_t seed = dropout_seed(T, 0);
    double sum;
    TW_TRY(upload_slice(T, 0, err));
    TW_TRY(tw_replica_forward(T->r[0], bs, forward_flags(T, 0), 0, seed, err));
    TW_TRY(tw_replica_loss_sum(T->r[0], bs, &sum, err));
    *loss = mean_loss(T, sum);
    if (!isfinite(*loss))
        return TW_OK;
    T->update = step_update(T);
    tw_update u = range_update(T, T->fused_lo, T->fused_hi);
    TW_TRY(tw_replica_backward_update(T->r[0], bs, seed, &u, err));
    TW_TRY(update_values(T, 0, 0, T->fused_lo, err));
    return update_values(T, 0, T->fused_hi, T->trained, err);
}

/* ================================ choosing the mode ================================ */


static int shares_update(const tw_towers *T, const tw_backend_ops *ops)
{
    (void)T;
    return ops->update_mean != NULL;
}

static int fuses_first_layer(const tw_towers *T, const tw_backend_ops *ops)
{
    size_t lo, hi;
    int graphs = T->c->cuda_graphs && ops->capture_begin;
    return shares_update(T, ops) && ops->gemm_update && T->n == 1 && T->world_towers == 1 && !graphs &&
           !clips(T) && tw_model_fused_range(T->m, &lo, &hi);
}

static int runs_in_turn(const tw_towers *T, const tw_backend_ops *ops)
{
    return shares_update(T, ops) && T->n > 1 && !tw_model_has_conv(T->m);
}

static int always(const tw_towers *T, const tw_backend_ops *ops)
{
    (void)T, (void)ops;
    return 1;
}

/* The first row that applies is the run's mode. */
static const tw_step_mode MODES[] = {
    {"fused", fuses_first_layer, fused_step, 1, 0, 1},
    {"in_turn", runs_in_turn, in_turn_step, 1, 1, 0},
    {"shared", shares_update, shared_step, 1, 0, 0},
    {"plain", always, plain_step, 0, 0, 0},
};

static tw_status choose_mode(tw_towers *T, const char *backend, tw_error *err)
{
    const tw_backend_ops *ops;
    TW_TRY(tw_backend_find(backend, &ops, err));
    size_t i = 0;
    while (!MODES[i].applies(T, ops))
        i++;
    T->mode = &MODES[i];
    return TW_OK;
}

tw_status tw_towers_step(tw_towers *T, double *loss, tw_error *err)
{
    TW_TRY(T->mode->step(T, loss, err));
    if (!isfinite(*loss))
        return TW_OK; /* the caller stops before this state is applied or saved */
    T->steps_run++;
    T->step++;
    return TW_OK;
}

/* ================================ the bench ================================ */

/* The bench's one batch, from the seed: inputs uniform in [0, 1); labels uniform over the classes
 * (int32), or regression targets uniform in [0, 1). */
static void synthetic_batch(tw_towers *T)
{
    size_t rows = (size_t)T->n * (size_t)T->c->batch_size;
    uint64_t seed = T->c->seed, classes = (uint64_t)tw_model_output_size(T->m);
    for (size_t i = 0; i < rows * T->in_size; i++)
        T->x[i] = tw_uniform(seed, i);
    for (size_t i = 0; i < rows * T->label_values; i++) {
        if (T->c->loss == TW_LOSS_MSE)
            ((float *)T->y)[i] = tw_uniform(~seed, i);
        else
            ((int32_t *)T->y)[i] = (int32_t)(tw_hash64(~seed, i) % classes);
    }
}

static tw_status bench_steps(tw_towers *T, const tw_bench_options *o, tw_error *err)
{
    for (int i = 0; i < o->warmup + o->steps; i++) {
        double loss, seconds;
        T->allreduce_time = 0;
        TW_TRY(synced(T, tw_towers_step, &loss, &seconds, err));
        if (!isfinite(loss))
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "the loss on synthetic data is not "
                                "finite at step %d: lower the config's learning rate", i + 1);
        if (i >= o->warmup) {
            o->step_s[i - o->warmup] = seconds;
            o->allreduce_s[i - o->warmup] = T->allreduce_time;
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
    tw_towers T = {.bench = 1, .world = o->world};
    tw_status s = tw_towers_model(&T, c, err);
    if (s == TW_OK)
        s = tw_towers_check_memory(&T, o->backend, NULL, 0, err);
    if (s == TW_OK)
        s = tw_towers_create(&T, o->backend, err);
    if (s == TW_OK) {
        synthetic_batch(&T);
        s = tw_towers_init_params(&T, err);
    }
    if (s == TW_OK)
        s = bench_steps(&T, o, err);
    if (s == TW_OK) {
        *info = (tw_bench_info){.allreduce_bytes = T.trained * sizeof(float), .graphs = T.graphs,
                                .processes = T.world_towers / T.n,
                                .allreduce_with_update = T.mode->shares && mean_in_update(&T)};
        snprintf(info->backend, sizeof info->backend, "%s", tw_backend_kind(T.b[0]));
        snprintf(info->mode, sizeof info->mode, "%s", T.mode->name);
    }
    tw_towers_destroy(&T);
    return s;
}
