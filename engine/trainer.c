/* trainer.c — a run's lifecycle. See trainer.h.
 *
 * setup (model, inputs, memory check, towers: train_step.h), the log folder, resume or initial
 * parameters, the event files (the run's and, with an EMA evaluation, its eval_ema sub-run's: trainer.h),
 * the baseline evaluation, then the loop: fill the host batch from the input
 * pipeline, one step (train_step.c), and at their cadence the summaries, evaluation and checkpoints (saved
 * off the step by ckpt_writer.h from host[], which nothing else touches until the save is collected); on a
 * stop request a checkpoint; the last save joined; a final line; teardown. The data position is checkpointed with the arenas,
 * so a resumed run repeats an uninterrupted one bit for bit. Every progress line goes through the child
 * protocol's emitter (child.h). */
#include "trainer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backend.h"
#include "checkpoint.h"
#include "ckpt_contents.h"
#include "child.h"
#include "ckpt_writer.h"
#include "convert.h"
#include "datafs.h"
#include "evaluation.h"
#include "events.h"
#include "hparams.h"
#include "inference.h"
#include "input.h"
#include "memory.h"
#include "model.h"
#include "run_hparams.h"
#include "schedule.h"
#include "summary_images.h"
#include "train_step.h"


static volatile sig_atomic_t stop_requested;

void tw_train_request_stop(void) { stop_requested = 1; }

typedef struct {
    const tw_config *c;
    const tw_train_options *o;
    tw_towers T;                    /* the model, the towers and the step (train_step.h) */
    tw_input *train, *test;
    tw_events_writer *ev;           /* the run's event file; NULL once degraded */
    tw_events_writer *ev_ema;       /* TW_EVAL_EMA_RUN/'s: the EMA evaluation; NULL without one or degraded */
    float *host[TW_CKPT_ARENAS];       /* [P] params, ema, slot1, slot2 downloads */
    float *outs;                    /* [batch, outputs] evaluation outputs */
    void *eval_y;                   /* [batch*label_values] evaluation labels */
    tw_evaluation *metrics[2];      /* the pass with raw, then EMA weights (evaluation.h); NULL: no test */
    double loss_sum;                /* training loss since the last report */
    int64_t loss_steps;
    double train_time;              /* seconds spent in train steps since the last report */
    int64_t step_report;            /* step of the last report */
    double t_start;
    double wall_start;              /* wall-clock seconds at this attempt's start (the HParams start time) */
    int64_t step_start;
    tw_child_out out;               /* the progress lines (child.h), on o->progress */
    tw_ckpt_writer *saver;          /* saves checkpoints off the step; reads host[] until collected */
    char ckpt_dir[TW_PATH_BYTES + 16];
} run;

static double now(void) { return tw_child_now(); }

/* 1 on the process that writes the run's files and lines: rank 0 of the world (trainer.h). */
static int writes(const run *R) { return !R->o->world || tw_world_rank(R->o->world) == 0; }

/* Wall-clock seconds, for the HParams start and end times. */
static double wall_now(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_REALTIME, &ts) == 0 ? (double)ts.tv_sec + ts.tv_nsec * 1e-9 : 0.0;
}

/* ================================ output ================================ */

/* A failed event write never stops training (the METRICS_DEGRADED warning, docs/architecture.md "The child protocol"): say so once, stop writing. */
static void events_failed(run *R, const tw_error *e)
{
    char msg[1200];
    tw_error_format(e, msg, sizeof msg);
    tw_child_warning(&R->out, TW_CHILD_METRICS_DEGRADED, msg, R->T.step);
    tw_events_destroy(R->ev);
    tw_events_destroy(R->ev_ema);
    R->ev = R->ev_ema = NULL;
}

/* A scalar at this step into *ev (R->ev or R->ev_ema: read again after a failure, which clears both). */
static void scalar_to(run *R, tw_events_writer **ev, const char *tag, double v)
{
    tw_error e;
    if (*ev && tw_events_add_scalar(*ev, tag, R->T.step, (float)v, &e) != TW_OK)
        events_failed(R, &e);
}

/* A training scalar: TW_TRAIN_TAGS "<name>" in the run's file. */
static void train_scalar(run *R, const char *name, double v)
{
    char tag[64];
    snprintf(tag, sizeof tag, TW_TRAIN_TAGS "%s", name);
    scalar_to(R, &R->ev, tag, v);
}

/* Hands every pending point of both files to the disk. */
static void flush_events(run *R)
{
    tw_error e;
    if ((R->ev && tw_events_flush(R->ev, &e) != TW_OK) || (R->ev_ema && tw_events_flush(R->ev_ema, &e) != TW_OK))
        events_failed(R, &e);
}

static void histogram(run *R, const char *prefix, const char *name, const float *v, size_t n)
{
    char tag[256];
    snprintf(tag, sizeof tag, "%s%s", prefix, name);
    tw_error e;
    if (R->ev && tw_events_add_histogram(R->ev, tag, R->T.step, v, n, &e) != TW_OK)
        events_failed(R, &e);
}

/* The first examples of the first batch (R->T.x, read after the first step, outside its timing), at step 0
 * of a new run: a resumed one has them (summary_images.h). */
static void samples_image(run *R)
{
    tw_error e;
    if (R->ev && R->T.step == 1 &&
        tw_summary_samples(R->ev, 0, R->c, R->T.x, R->T.n * R->c->batch_size, &e) != TW_OK)
        events_failed(R, &e);
}

/* The first conv layer's filters from host[0], the params histograms() has just downloaded. */
static void filters_image(run *R)
{
    tw_error e;
    if (R->ev && tw_summary_filters(R->ev, R->T.step, R->T.m, R->host[0], &e) != TW_OK)
        events_failed(R, &e);
}

/* ================================ setup ================================ */

/* The dataset's memory budget: the config's, else `--input-memory`'s, else the input's default. */
static uint64_t input_budget(const run *R, uint64_t fallback)
{
    return R->c->input_memory_bytes ? R->c->input_memory_bytes : R->o->input_memory ? R->o->input_memory : fallback;
}

static tw_status open_inputs(run *R, tw_error *err)
{
    const tw_config *c = R->c;
    tw_input_options io;
    tw_input_options_default(&io);
    io.path = c->train_path;
    io.image_feature = c->image_feature;
    io.label_feature = c->label_feature;
    io.example_size = R->T.in_size;
    io.scale = c->scale;
    io.float_labels = c->loss == TW_LOSS_MSE;
    io.classes = c->loss == TW_LOSS_MSE ? 0 : tw_model_output_size(R->T.m);
    io.seed = c->seed;
    io.shuffle = 1;
    io.shuffle_buffer = c->shuffle_buffer;
    io.max_memory_bytes = input_budget(R, io.max_memory_bytes);
    io.augment = &c->augment;
    io.image = (tw_augment_shape){.h = c->shape[0], .w = c->shape[1], .c = c->rank == 3 ? c->shape[2] : 1};
    TW_TRY(tw_input_open(&io, &R->train, err));
    io.augment = NULL; /* never the evaluation's */
    if (!c->test_path[0])
        return TW_OK;
    io.path = c->test_path;
    io.shuffle = 0;
    io.prefetch_batches = 0;
    return tw_input_open(&io, &R->test, err);
}

/* The evaluation accumulators, when there is a test split. */
static tw_status open_metrics(run *R, tw_error *err)
{
    int outs = tw_model_output_size(R->T.m), classes = R->c->loss == TW_LOSS_MSE ? 0 : outs;
    json_t *names = classes ? tw_convert_class_names_of(R->c->train_path) : NULL; /* the dataset's */
    tw_status s = TW_OK;
    for (int k = 0; k < 2 && R->test && s == TW_OK; k++)
        if ((s = tw_evaluation_create(classes, outs, &R->metrics[k], err)) == TW_OK)
            tw_evaluation_name_classes(R->metrics[k], names);
    json_decref(names);
    return s;
}

static tw_status alloc_host(run *R, tw_error *err)
{
    size_t outs = (size_t)tw_model_output_size(R->T.m);
    int ok = (R->outs = malloc((size_t)R->c->batch_size * outs * sizeof(float))) &&
             (R->eval_y = malloc((size_t)R->c->batch_size * R->T.label_values * 4));
    for (int a = 0; a < TW_CKPT_ARENAS; a++)
        ok = ok && (R->host[a] = malloc((R->T.P ? R->T.P : 1) * sizeof(float)));
    return ok ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
}

/* ================================ checkpoints ================================ */

static tw_tensor (*const ARENAS[TW_CKPT_ARENAS])(const tw_replica *) = {
    [TW_CKPT_PARAMS] = tw_replica_params, [TW_CKPT_EMA] = tw_replica_ema, [TW_CKPT_SLOT1] = tw_replica_slot1,
    [TW_CKPT_SLOT2] = tw_replica_slot2};

/* The tensors of arena a (in host[a]) that a checkpoint holds, into t[*n...] and names[*n...]. */
static void arena_tensors(const run *R, tw_ckpt_arena a, tw_ckpt_tensor *t, char (*names)[TW_CKPT_TENSOR_NAME_BYTES],
                          size_t *n)
{
    for (size_t i = 0; i < tw_model_n_params(R->T.m); i++) {
        const tw_param *p = tw_model_param(R->T.m, i);
        if (!tw_ckpt_holds(p, a))
            continue;
        tw_ckpt_name(p, R->c->optimizer, a, names[*n]);
        t[*n] = (tw_ckpt_tensor){.name = names[*n], .data = R->host[a] + p->offset, .rank = p->rank};
        for (int d = 0; d < p->rank; d++)
            t[*n].shape[d] = p->shape[d];
        (*n)++;
    }
}

/* Snapshots the arenas into host[] (after the previous save let go of them) and hands them to the
 * background writer (ckpt_writer.h): the step goes on while the file is written, fsynced and committed. */
static tw_status save_checkpoint(run *R, tw_error *err)
{
    if (!writes(R))
        return TW_OK;
    TW_TRY(tw_ckpt_writer_wait(R->saver, err));
    size_t np = tw_model_n_params(R->T.m), n = 0;
    tw_ckpt_tensor *t = calloc(np * TW_CKPT_ARENAS, sizeof *t);
    char (*names)[TW_CKPT_TENSOR_NAME_BYTES] = calloc(np * TW_CKPT_ARENAS, sizeof *names);
    tw_status s = t && names ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    for (int a = 0; a < tw_ckpt_arena_count(R->c->optimizer) && s == TW_OK; a++) {
        s = tw_backend_download(R->T.b[0], R->host[a], ARENAS[a](R->T.r[0]), R->T.P * sizeof(float), err);
        arena_tensors(R, (tw_ckpt_arena)a, t, names, &n);
    }
    tw_input_position pos = tw_input_tell(R->train);
    char *config = tw_config_to_json(R->c);
    tw_ckpt_state state = {.step = R->T.step, .data_epoch = pos.epoch, .data_consumed = pos.consumed,
                           .seed = R->c->seed, .config = config};
    tw_ckpt_meta meta[TW_CKPT_META];
    tw_ckpt_state_text text;
    tw_ckpt_state_meta(&state, meta, &text);
    flush_events(R); /* every point up to this step reaches the event files before a resume can start here */
    if (s == TW_OK) {
        s = tw_ckpt_writer_submit(R->saver, R->T.step, R->c->keep_checkpoints, t, names, n, meta, TW_CKPT_META,
                                  err);
        t = NULL; /* the writer's now */
        names = NULL;
    }
    free(config);
    free(names);
    free(t);
    return s;
}

/* Copies the checkpoint's tensors into host[a] and uploads them to every tower (an arena's values the
 * checkpoint does not hold, the EMA of the moving statistics, keep what they have). */
static tw_status restore_arenas(run *R, const tw_checkpoint *ck, tw_error *err)
{
    for (int a = 0; a < tw_ckpt_arena_count(R->c->optimizer); a++) {
        TW_TRY(tw_backend_download(R->T.b[0], R->host[a], ARENAS[a](R->T.r[0]), R->T.P * sizeof(float), err));
        for (size_t i = 0; i < tw_model_n_params(R->T.m); i++) {
            const tw_param *p = tw_model_param(R->T.m, i);
            char name[TW_CKPT_TENSOR_NAME_BYTES];
            if (!tw_ckpt_holds(p, (tw_ckpt_arena)a))
                continue;
            tw_ckpt_name(p, R->c->optimizer, (tw_ckpt_arena)a, name);
            TW_TRY(tw_checkpoint_fetch(ck, name, p->rank, p->shape, R->host[a] + p->offset, err));
        }
        TW_TRY(tw_towers_upload_all(&R->T, ARENAS[a], R->host[a], err));
    }
    return TW_OK;
}

/* Restores the arenas, the step and the data position from ck. */
static tw_status load_checkpoint(run *R, const tw_checkpoint *ck, tw_error *err)
{
    tw_ckpt_state state;
    TW_TRY(tw_ckpt_state_read(ck, &state, err));
    TW_TRY(restore_arenas(R, ck, err));
    R->T.step = state.step;
    tw_input_position pos = {.epoch = state.data_epoch, .consumed = state.data_consumed};
    return tw_input_seek(R->train, &pos, err);
}

/* ================================ one step ================================ */

/* ================================ evaluation ================================ */

typedef struct {
    double loss;      /* mean per example (per value for MSE) */
    double accuracy;  /* classification only */
    int64_t examples;
} eval_result;

static tw_status eval_batch(run *R, int rows, int use_ema, double *loss, tw_error *err)
{
    tw_replica *r = R->T.r[0];
    double sum;
    TW_TRY(tw_replica_upload_batch(r, rows, R->T.x, R->eval_y, err));
    TW_TRY(tw_replica_forward(r, rows, 0, use_ema, 0, err));
    TW_TRY(tw_replica_loss_sum(r, rows, &sum, err));
    *loss += sum;
    TW_TRY(tw_replica_outputs(r, rows, R->outs, err));
    tw_evaluation_add(R->metrics[use_ema], rows, R->outs, R->eval_y);
    return TW_OK;
}

static tw_status evaluate(run *R, int use_ema, eval_result *res, tw_error *err)
{
    double loss = 0;
    int64_t n = 0;
    int got;
    TW_TRY(tw_input_rewind(R->test, err));
    tw_evaluation_reset(R->metrics[use_ema]);
    for (;;) {
        TW_TRY(tw_input_next_once(R->test, R->c->batch_size, R->T.x, R->eval_y, &got, err));
        if (!got)
            break;
        TW_TRY(eval_batch(R, got, use_ema, &loss, err));
        n += got;
    }
    double per = R->c->loss == TW_LOSS_MSE ? (double)tw_model_output_size(R->T.m) : 1.0;
    res->examples = n;
    res->loss = n ? loss / ((double)n * per) : 0;
    res->accuracy = tw_evaluation_summarize(R->metrics[use_ema]).accuracy;
    return TW_OK;
}

/* One evaluation's eval/loss (and eval/accuracy for a classifier) into *ev: the raw weights' into the run's
 * file, the EMA's under the same tags into the eval_ema sub-run, so TensorBoard draws them on one chart. */
static void eval_scalars(run *R, tw_events_writer **ev, const eval_result *res, int classify)
{
    scalar_to(R, ev, "eval/loss", res->loss);
    if (classify)
        scalar_to(R, ev, "eval/accuracy", res->accuracy);
}

/* The scalars beyond loss and accuracy of one pass into *ev (the run's file for the raw weights, the
 * eval_ema sub-run for the EMA's, under the same tags): top-5, the regression metrics, precision and
 * recall of the first TW_EVAL_SCALAR_CLASSES classes (evaluation.h's tags), and the confusion matrix as
 * an image (summary_images.h). */
static void detail_scalars(run *R, tw_events_writer **ev, const tw_evaluation *pass)
{
    tw_evaluation_summary s = tw_evaluation_summarize(pass);
    if (s.has_top5)
        scalar_to(R, ev, "eval/top5_accuracy", s.top5);
    static const char *const REGRESSION[3] = {"eval/mse", "eval/mae", "eval/r2"};
    const double values[3] = {s.mse, s.mae, s.r2};
    for (int i = 0; i < 3 && !s.classify; i++)
        scalar_to(R, ev, REGRESSION[i], values[i]);
    json_t *m = s.classify ? tw_evaluation_metrics(pass) : NULL;
    json_t *pc = json_object_get(m, "per_class");
    static const char *const PER_CLASS[2] = {"precision", "recall"};
    char tag[256];
    for (int k = 0; k < TW_EVAL_SCALAR_CLASSES && k < (int)json_array_size(json_object_get(pc, "recall")); k++)
        for (int i = 0; i < 2; i++) {
            json_t *v = json_array_get(json_object_get(pc, PER_CLASS[i]), (size_t)k);
            if (json_is_number(v) && tw_evaluation_class_tag(pass, k, PER_CLASS[i], tag, sizeof tag) == 0)
                scalar_to(R, ev, tag, json_number_value(v));
        }
    json_decref(m);
    int k;
    const int64_t *counts = tw_evaluation_confusion(pass, &k);
    tw_error e;
    if (*ev && counts && tw_summary_confusion(*ev, "eval/confusion_matrix", R->T.step, counts, k, &e) != TW_OK)
        events_failed(R, &e);
}

/* The eval line's top-5 or MAE and R² (child.h). */
static void detail_line(run *R, int with_ema, tw_child_eval *line)
{
    tw_evaluation_summary s[2] = {tw_evaluation_summarize(R->metrics[0])};
    if (with_ema)
        s[1] = tw_evaluation_summarize(R->metrics[1]);
    line->has_top5 = s[0].has_top5;
    line->has_regression = !s[0].classify;
    for (int k = 0; k < 2; k++) {
        line->top5[k] = s[k].top5;
        line->mae[k] = s[k].mae;
        line->r2[k] = s[k].r2;
    }
}

/* evaluation.json in the log folder: the latest pass, raw and EMA (evaluation.h). A failed write is a
 * degraded metric, never a stopped run (as an event write). */
static void write_evaluation(run *R, int with_ema)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/%s", R->o->logdir, TW_EVALUATION_FILE);
    json_t *doc = tw_evaluation_document(R->T.step, R->metrics[0], with_ema ? R->metrics[1] : NULL);
    tw_error e;
    tw_status s = TW_OK;
    if (n < 0 || (size_t)n >= sizeof path)
        s = tw_error_set(&e, TW_ERR_INVALID, R->o->logdir, -1, "the log folder's path is too long");
    else
        s = doc ? tw_evaluation_write(path, doc, &e) : tw_error_set(&e, TW_ERR_NOMEM, path, -1, "out of memory");
    if (s != TW_OK) {
        char msg[1200];
        tw_error_format(&e, msg, sizeof msg);
        tw_child_warning(&R->out, TW_CHILD_METRICS_DEGRADED, msg, R->T.step);
    }
    json_decref(doc);
}

/* Evaluates on rank 0 only: every process holds the same weights, so its pass over the whole test set is
 * the world's (the others go on to the next step's all-reduce and wait there). */
static tw_status eval_and_report(run *R, tw_error *err)
{
    if (!R->test || !writes(R))
        return TW_OK;
    eval_result raw, ema = {0};
    int with_ema = R->c->ema_decay > 0;
    TW_TRY(evaluate(R, 0, &raw, err));
    if (with_ema)
        TW_TRY(evaluate(R, 1, &ema, err));
    int classify = R->c->loss == TW_LOSS_SOFTMAX_XENT;
    tw_child_eval line = {.step = R->T.step, .loss = raw.loss, .examples = raw.examples,
                          .has_accuracy = classify, .accuracy = raw.accuracy, .has_ema = with_ema,
                          .loss_ema = ema.loss, .accuracy_ema = ema.accuracy};
    detail_line(R, with_ema, &line);
    eval_scalars(R, &R->ev, &raw, classify);
    detail_scalars(R, &R->ev, R->metrics[0]);
    if (with_ema) {
        eval_scalars(R, &R->ev_ema, &ema, classify);
        detail_scalars(R, &R->ev_ema, R->metrics[1]);
    }
    write_evaluation(R, with_ema);
    tw_child_eval_line(&R->out, &line);
    return TW_OK;
}

/* ================================ summaries ================================ */

static tw_status regularization_loss(run *R, double *reg, tw_error *err)
{
    *reg = 0;
    size_t n = tw_model_weight_floats(R->T.m);
    if (R->c->l2 <= 0 || n == 0)
        return TW_OK;
    float ss;
    TW_TRY(tw_sum_squares(R->T.b[0], tw_tensor_of(R->T.scalar), tw_replica_params(R->T.r[0]), n, err));
    TW_TRY(tw_backend_download(R->T.b[0], &ss, tw_tensor_of(R->T.scalar), sizeof ss, err));
    *reg = R->c->l2 * (double)ss / 2.0;
    return TW_OK;
}

/* Whether a cadence of `every` steps (0: none) falls on step. */
static int due(int64_t step, int64_t every) { return every > 0 && step % every == 0; }

/* Whether the report after step writes histograms (of the weights, the shadows and the mean gradient). */
static int histograms_due(const run *R, int64_t step)
{
    return (due(step, R->c->summary_every) && due(step, R->c->histogram_every)) || step == R->c->steps;
}

static tw_status histograms(run *R, tw_error *err)
{
    static const int arenas[3] = {0, 1, -1}; /* params, ema, then grads */
    TW_TRY(tw_ckpt_writer_wait(R->saver, err)); /* a save in flight reads host[] */
    for (int k = 0; k < 3; k++) {
        int a = arenas[k];
        if (a == 1 && R->c->ema_decay <= 0)
            continue;
        tw_tensor src = a < 0 ? tw_replica_grads(R->T.r[0]) : ARENAS[a](R->T.r[0]);
        float *dst = R->host[a < 0 ? 2 : a];
        TW_TRY(tw_backend_download(R->T.b[0], dst, src, R->T.P * sizeof(float), err));
        for (size_t i = 0; i < tw_model_n_params(R->T.m); i++) {
            const tw_param *p = tw_model_param(R->T.m, i);
            char name[TW_CKPT_TENSOR_NAME_BYTES];
            if (a == 0 || tw_ckpt_holds(p, TW_CKPT_EMA)) { /* the moving statistics: no EMA, no gradient */
                tw_ckpt_name(p, R->c->optimizer, a == 1 ? TW_CKPT_EMA : TW_CKPT_PARAMS, name);
                histogram(R, a < 0 ? "gradients_on_average/" : "", name, dst + p->offset, p->count);
            }
        }
    }
    return TW_OK;
}

/* The sums of the next report start at this step. */
static tw_status start_report(run *R)
{
    R->loss_sum = 0;
    R->loss_steps = 0;
    R->train_time = 0;
    R->step_report = R->T.step;
    return TW_OK;
}

static tw_status report(run *R, tw_error *err)
{
    double t = now(), dt = R->train_time, reg;
    int64_t steps = R->T.step - R->step_report;
    double xent = R->loss_steps ? R->loss_sum / (double)R->loss_steps : 0;
    if (!writes(R))
        return start_report(R); /* only rank 0 writes */
    TW_TRY(regularization_loss(R, &reg, err));
    double ex_per_s = steps && dt > 0 ? (double)steps * R->T.world_towers * R->c->batch_size / dt : 0;
    double sec_per_batch = steps ? dt / (double)steps / R->T.world_towers : 0;
    double per_step = (t - R->t_start) / (double)(R->T.step - R->step_start);
    float lr = tw_learning_rate(R->c, R->T.step);
    train_scalar(R, "loss", xent + reg);
    train_scalar(R, R->c->loss == TW_LOSS_MSE ? "mean_squared_error" : "cross_entropy", xent);
    train_scalar(R, "regularization_loss", reg);
    train_scalar(R, "learning_rate", lr);
    train_scalar(R, "examples_per_sec", ex_per_s);
    train_scalar(R, "sec_per_batch", sec_per_batch);
    if (histograms_due(R, R->T.step)) {
        TW_TRY(histograms(R, err));
        filters_image(R); /* from the parameters histograms() just downloaded */
    }
    const tw_child_rates rates = {.learning_rate = lr, .examples_per_sec = ex_per_s,
                                  .sec_per_batch = sec_per_batch,
                                  .eta_s = per_step * (double)(R->c->steps - R->T.step)};
    tw_child_step(&R->out, R->T.step, xent + reg, &rates);
    return start_report(R);
}

/* ================================ the run ================================ */

/* 1 when the run ends for good here: completed, diverged, or an error the supervisor never retries
 * (tw_child_failure_of: docs/reliability.md rule 3). A stop (cancel or shutdown) and a retriable error are
 * not: only the server knows what follows them. */
static int final_here(tw_status s, tw_train_outcome outcome, const tw_error *err, tw_hparams_status *st)
{
    if (s == TW_OK) {
        *st = outcome == TW_TRAIN_COMPLETED ? TW_HPARAMS_SUCCESS : TW_HPARAMS_FAILURE;
        return outcome != TW_TRAIN_CANCELLED;
    }
    *st = TW_HPARAMS_FAILURE;
    return tw_child_failure_of(tw_child_exit_code(err))->final;
}

/* The HParams session (run_hparams.h: its start and end info together), once, at a state the trainer knows
 * to be terminal (final_here); start_time is this attempt's start. */
static void session_end(run *R, tw_status s, tw_train_outcome outcome, const tw_error *err)
{
    tw_hparams_status st;
    tw_run_hparams h;
    char model_uri[TW_PATH_BYTES + 16];
    tw_error e;
    if (!R->ev || !final_here(s, outcome, err, &st))
        return;
    if (tw_run_hparams_of(R->c, &h) != 0) {
        tw_error_set(&e, TW_ERR_NOMEM, "_hparams_", -1, "out of memory");
        events_failed(R, &e);
        return;
    }
    tw_run_model_uri(R->o->logdir, model_uri, sizeof model_uri);
    tw_hparams_session hs = tw_run_hparams_session(&h, st, model_uri, R->o->monitor_url, R->wall_start);
    if (tw_hparams_add_session_start(R->ev, &hs, &e) != TW_OK ||
        tw_hparams_add_session_end(R->ev, st, wall_now(), &e) != TW_OK)
        events_failed(R, &e);
}

/* The eval_ema sub-run (logdir/TW_EVAL_EMA_RUN) when the run evaluates EMA weights: a new file per
 * attempt, as the run's own, starting with SessionLog START at the resumed step so TensorBoard drops the
 * points the interrupted attempt wrote after its checkpoint. */
static tw_status start_ema_events(run *R, int resumed, tw_error *e)
{
    char dir[TW_PATH_BYTES + 16];
    if (!R->test || R->c->ema_decay <= 0)
        return TW_OK;
    if (snprintf(dir, sizeof dir, "%s/" TW_EVAL_EMA_RUN, R->o->logdir) >= (int)sizeof dir)
        return tw_error_set(e, TW_ERR_INVALID, R->o->logdir, -1, "the log folder's path is too long");
    tw_events_options eo;
    tw_events_options_default(&eo);
    TW_TRY(tw_events_create(dir, &eo, &R->ev_ema, e));
    return resumed ? tw_events_add_session_start(R->ev_ema, R->T.step + 1, e) : TW_OK;
}

static tw_status start_events(run *R, int resumed, tw_error *err)
{
    if (!writes(R))
        return TW_OK;
    tw_events_options eo;
    tw_events_options_default(&eo);
    TW_TRY(tw_events_create(R->o->logdir, &eo, &R->ev, err));
    tw_error e;
    tw_status s = TW_OK;
    if (resumed) {
        s = tw_events_add_session_start(R->ev, R->T.step + 1, &e);
    } else {
        uint8_t *graph = NULL;
        size_t len = 0;
        char *config = tw_run_config_markdown(R->c);
        TW_TRY(tw_model_graph(R->T.m, &graph, &len, err));
        s = tw_events_add_graph(R->ev, graph, len, &e);
        if (s == TW_OK && config)
            s = tw_events_add_text(R->ev, "config", 0, config, &e);
        free(graph);
        free(config);
    }
    if (s == TW_OK)
        s = start_ema_events(R, resumed, &e);
    if (s != TW_OK)
        events_failed(R, &e);
    return TW_OK;
}

tw_status tw_train_init_from(const tw_config *c, const tw_model *m, float *dst, tw_error *err)
{
    tw_checkpoint *ck;
    TW_TRY(tw_checkpoint_read(c->init_checkpoint, &ck, err));
    size_t P = tw_model_param_floats(m);
    float *to = dst ? dst : malloc((P ? P : 1) * sizeof(float));
    tw_error e;
    tw_status s = to ? tw_inference_load_params(ck, m, c->init_weights == TW_INIT_FROM_EMA ? TW_WEIGHTS_EMA
                                                                                          : TW_WEIGHTS_RAW,
                                                to, &e)
                     : tw_error_set(&e, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s != TW_OK) /* the file is fine; the two models differ: the config's mistake */
        s = tw_error_set(err, s == TW_ERR_CORRUPT ? TW_ERR_INVALID : s, c->init_checkpoint, -1,
                         "init_from: %s (variables are matched by name and shape)", e.message);
    if (!dst)
        free(to);
    tw_checkpoint_free(ck);
    return s;
}

/* A new run's parameters: from the seed, or from the init_from checkpoint (params and EMA shadows). */
static tw_status init_params(run *R, tw_error *err)
{
    if (R->c->init_weights == TW_INIT_FROM_NONE)
        return tw_towers_init_params(&R->T, err);
    TW_TRY(tw_train_init_from(R->c, R->T.m, R->host[0], err));
    TW_TRY(tw_towers_upload_all(&R->T, tw_replica_params, R->host[0], err));
    return tw_towers_upload_all(&R->T, tw_replica_ema, R->host[0], err); /* shadows start at them */
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
        tw_child_resumed(&R->out, tw_checkpoint_path(ck), R->T.step);
    tw_checkpoint_free(ck);
    *resumed = s == TW_OK;
    return s;
}

/* Rank 0's start on every process of the world: the step, whether it resumed, the data position and
 * every saved arena (params, EMA, optimizer slots), from a checkpoint or the initial values. Only rank 0
 * reads `latest` or init_from, so nothing races with its writes and the log folder need not be shared. */
static tw_status share_start(run *R, int *resumed, tw_error *err)
{
    tw_world *w = R->o->world;
    if (!w || tw_world_size(w) == 1)
        return TW_OK;
    tw_input_position pos = tw_input_tell(R->train);
    uint64_t head[4] = {(uint64_t)R->T.step, (uint64_t)*resumed, pos.epoch, pos.consumed};
    TW_TRY(tw_world_bcast(w, head, sizeof head, err));
    for (int a = 0; a < tw_ckpt_arena_count(R->c->optimizer); a++) {
        size_t bytes = R->T.P * sizeof(float);
        if (writes(R))
            TW_TRY(tw_backend_download(R->T.b[0], R->host[a], ARENAS[a](R->T.r[0]), bytes, err));
        TW_TRY(tw_world_bcast(w, R->host[a], bytes, err));
        if (!writes(R))
            TW_TRY(tw_towers_upload_all(&R->T, ARENAS[a], R->host[a], err));
    }
    if (writes(R))
        return TW_OK;
    R->T.step = (int64_t)head[0];
    *resumed = (int)head[1];
    pos = (tw_input_position){.epoch = head[2], .consumed = head[3]};
    return tw_input_seek(R->train, &pos, err);
}

static tw_status loop(run *R, tw_train_outcome *outcome, tw_error *err)
{
    const tw_config *c = R->c;
    while (R->T.step < c->steps) {
        if (R->saver) /* a background save that failed ends the run */
            TW_TRY(tw_ckpt_writer_poll(R->saver, NULL, err));
        int stop = stop_requested;
        if (R->o->world) /* all stop together */
            TW_TRY(tw_world_any(R->o->world, &stop, err));
        if (stop) {
            *outcome = TW_TRAIN_CANCELLED;
            return save_checkpoint(R, err);
        }
        double loss, t0 = now();
        tw_towers_next_batch(&R->T);
        int lo = (int)tw_towers_first_row(&R->T, 0); /* this process's towers' rows of the world's batch */
        TW_TRY(tw_input_next_rows(R->train, R->T.world_towers * c->batch_size, lo, R->T.n * c->batch_size,
                                  R->T.x, R->T.y, err));
        R->T.keep_grads = histograms_due(R, R->T.step + 1);
        TW_TRY(tw_towers_step(&R->T, &loss, err));
        R->train_time += now() - t0;
        samples_image(R);
        if (!isfinite(loss)) {
            *outcome = TW_TRAIN_DIVERGED;
            tw_child_diverged(&R->out, loss, R->T.step + 1);
            return TW_OK;
        }
        R->loss_sum += loss;
        R->loss_steps++;
        if (due(R->T.step, c->summary_every) || R->T.step == c->steps)
            TW_TRY(report(R, err));
        if (due(R->T.step, c->eval_every) || R->T.step == c->steps)
            TW_TRY(eval_and_report(R, err));
        if (due(R->T.step, c->checkpoint_every) || R->T.step == c->steps)
            TW_TRY(save_checkpoint(R, err));
        tw_child_heartbeat(&R->out, R->T.step);
    }
    *outcome = TW_TRAIN_COMPLETED;
    return TW_OK;
}

/* The memory the datasets take when the input holds them (memory.h). */
static tw_memory_data data_in_memory(const run *R)
{
    return (tw_memory_data){
        .train_examples = tw_input_in_memory(R->train) ? tw_input_count(R->train) : 0,
        .test_examples = R->test && tw_input_in_memory(R->test) ? tw_input_count(R->test) : 0};
}

static tw_status setup(run *R, tw_error *err)
{
    if (tw_checkpoint_dir_of(R->o->logdir, R->ckpt_dir, sizeof R->ckpt_dir) != 0)
        return tw_error_set(err, TW_ERR_INVALID, R->o->logdir, -1, "the log folder's path is too long");
    R->T.world = R->o->world;
    TW_TRY(tw_towers_model(&R->T, R->c, err));
    TW_TRY(open_inputs(R, err));
    TW_TRY(open_metrics(R, err));
    tw_memory_data d = data_in_memory(R);
    TW_TRY(tw_towers_check_memory(&R->T, R->o->backend, &d, R->o->memory_limit, err));
    TW_TRY(alloc_host(R, err));
    if (writes(R))
        TW_TRY(tw_ckpt_writer_create(R->ckpt_dir, &R->saver, err));
    return tw_towers_create(&R->T, R->o->backend, err);
}

/* The first progress line: which backend `auto` chose and the device of each tower. */
static void announce(run *R)
{
    const char *devices[TW_MAX_TOWERS];
    for (int t = 0; t < R->T.n; t++)
        devices[t] = tw_backend_name(R->T.b[t]);
    tw_world *w = R->o->world;
    tw_child_backend(&R->out, tw_backend_kind(R->T.b[0]), devices, R->T.n, w ? w->kind : "none",
                     w ? tw_world_size(w) : 1);
}

/* Says up front, after the backend line, when the config has no test set: no evaluation will ever run. */
static void warn_no_test(run *R)
{
    if (!R->c->test_path[0])
        tw_child_warning(&R->out, TW_CHILD_NO_TEST_SET,
                         "the dataset has no test set (dataset.test is null): nothing is evaluated, "
                         "eval_every does nothing; give the dataset a test file or a validation split",
                         R->T.step);
}

/* Waits for the checkpoint in flight (the last one, or the stop's) before the run reports its end;
 * its failure is the run's when nothing failed before. */
static tw_status finish_saves(run *R, tw_status s, tw_error *err)
{
    tw_error e;
    tw_status w = R->saver ? tw_ckpt_writer_wait(R->saver, &e) : TW_OK;
    if (s == TW_OK && w != TW_OK)
        *err = e;
    return s == TW_OK ? w : s;
}

static void teardown(run *R)
{
    tw_error e;
    tw_ckpt_writer_destroy(R->saver);
    if ((R->ev && tw_events_close(R->ev, &e) != TW_OK) || (R->ev_ema && tw_events_close(R->ev_ema, &e) != TW_OK))
        events_failed(R, &e);
    tw_events_destroy(R->ev);
    tw_events_destroy(R->ev_ema);
    tw_towers_destroy(&R->T);
    tw_input_close(R->train);
    tw_input_close(R->test);
    free(R->outs);
    free(R->eval_y);
    tw_evaluation_destroy(R->metrics[0]);
    tw_evaluation_destroy(R->metrics[1]);
    for (int a = 0; a < TW_CKPT_ARENAS; a++)
        free(R->host[a]);
}

static void final_line(run *R, tw_train_outcome outcome)
{
    static const char *names[] = {TW_CHILD_COMPLETED, TW_CHILD_CANCELLED, TW_CHILD_DIVERGED};
    tw_child_final(&R->out, names[outcome], R->T.step, now() - R->t_start);
}

tw_status tw_train(const tw_config *c, const tw_train_options *o, tw_train_outcome *outcome,
                   tw_error *err)
{
    run R = {.c = c, .o = o};
    tw_child_init(&R.out, o->progress);
    *outcome = TW_TRAIN_COMPLETED;
    int resumed = 0;
    tw_status s = setup(&R, err); /* everything is checked before anything is written */
    if (s == TW_OK) {
        announce(&R);
        warn_no_test(&R);
    }
    if (s == TW_OK && writes(&R))
        s = tw_fs_mkdirs(o->logdir, "cannot create the log folder", err);
    if (s == TW_OK && writes(&R))
        s = maybe_resume(&R, &resumed, err);
    if (s == TW_OK)
        s = share_start(&R, &resumed, err); /* the other ranks start where rank 0 does */
    if (s == TW_OK)
        s = start_events(&R, resumed, err);
    /* the baseline every later evaluation is measured against; and a resumed attempt with nothing left to
     * train reports its final evaluation again (the server may have been killed before it stored it) */
    if (s == TW_OK && (resumed ? R.T.step >= R.c->steps : R.c->eval_every > 0))
        s = eval_and_report(&R, err);
    R.t_start = R.out.last_write = now();
    R.wall_start = wall_now();
    R.step_start = R.step_report = R.T.step;
    if (s == TW_OK)
        s = loop(&R, outcome, err);
    s = finish_saves(&R, s, err);
    if (s == TW_OK)
        final_line(&R, *outcome);
    session_end(&R, s, *outcome, err);
    teardown(&R);
    return s;
}
