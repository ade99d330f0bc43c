/* child.c — the child protocol's emitter and exit statuses. See child.h. */
#include "child.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "progress.h"

double tw_child_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The stream tw_child_use_terminal named, and its run's steps. */
static FILE *terminal_out;
static int64_t terminal_steps;

void tw_child_init(tw_child_out *o, FILE *out)
{
    o->out = out;
    o->last_write = tw_child_now();
    o->terminal = out && out == terminal_out;
    o->total_steps = o->terminal ? terminal_steps : 0;
}

void tw_child_use_terminal(FILE *out, int64_t total_steps)
{
    terminal_out = out;
    terminal_steps = total_steps;
}

/* "1h02m", "3m05s", "42s" into buf. */
/* One value as a person reads it: a string bare, a number with %g, anything else as compact JSON. */
static void print_value(FILE *out, const json_t *v)
{
    if (json_is_string(v)) {
        fputs(json_string_value(v), out);
    } else if (json_is_number(v)) {
        fprintf(out, "%g", json_number_value(v));
    } else {
        json_dumpf(v, out, JSON_COMPACT);
    }
}

/* The terminal rendering of one line (see child.h); borrows line. */
static void render(tw_child_out *o, const json_t *line)
{
    const json_t *step = json_object_get(line, TW_CHILD_STEP);
    if (json_object_get(line, TW_CHILD_HEARTBEAT))
        return;
    if (step && json_object_get(line, TW_CHILD_LOSS)) {
        const json_t *eps = json_object_get(line, TW_CHILD_EXAMPLES_PER_SEC);
        const json_t *eta = json_object_get(line, TW_CHILD_ETA);
        tw_progress_line(o->out, json_integer_value(step), o->total_steps,
                          eps ? json_number_value(eps) : 0.0,
                          json_number_value(json_object_get(line, TW_CHILD_LOSS)),
                          eta ? json_number_value(eta) : 0.0);
        return;
    }
    tw_progress_clear(o->out);
    int eval = json_object_get(line, TW_CHILD_EVAL_LOSS) != NULL;
    size_t prefix = strlen(TW_CHILD_EVAL_PREFIX);
    if (eval)
        fprintf(o->out, "eval at step %lld:", (long long)json_integer_value(step));
    const char *key;
    const json_t *v;
    const char *sep = "";
    json_object_foreach((json_t *)line, key, v) {
        if (eval && strncmp(key, TW_CHILD_EVAL_PREFIX, prefix))
            continue;
        fprintf(o->out, "%s%s ", eval ? " " : sep, eval ? key + prefix : key);
        print_value(o->out, v);
        sep = ", ";
    }
    fputc('\n', o->out);
}

/* Writes obj as one line (rendered instead on a terminal) and flushes it at once (the supervisor reads
 * lines as they come); steals obj.
 * Returns 0, or -1 when obj is NULL or could not be written (a string that is not UTF-8). */
static int emit(tw_child_out *o, json_t *obj)
{
    int rc = obj ? 0 : -1;
    if (!o->out) {
        json_decref(obj);
        return rc;
    }
    if (obj && o->terminal)
        render(o, obj);
    else if (obj && (rc = json_dumpf(obj, o->out, JSON_COMPACT | JSON_REAL_PRECISION(7))) == 0)
        fputc('\n', o->out);
    fflush(o->out);
    json_decref(obj);
    o->last_write = tw_child_now();
    return rc;
}

void tw_child_backend(tw_child_out *o, const char *kind, const char *const *devices, int n,
                      const char *world, int processes)
{
    json_t *names = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(names, json_string(devices[i]));
    emit(o, json_pack("{s:s, s:o, s:I, s:I, s:I, s:s}", TW_CHILD_BACKEND, kind, TW_CHILD_DEVICES, names,
                      TW_CHILD_TOWERS, (json_int_t)n, TW_CHILD_PROCESSES, (json_int_t)processes,
                      TW_CHILD_TOTAL_TOWERS, (json_int_t)n * processes, TW_CHILD_WORLD, world));
}

void tw_child_resumed(tw_child_out *o, const char *path, int64_t step)
{
    emit(o, json_pack("{s:s, s:I}", TW_CHILD_RESUMED_FROM, path, TW_CHILD_STEP, (json_int_t)step));
}

void tw_child_step(tw_child_out *o, int64_t step, double loss, const tw_child_rates *rates)
{
    json_t *line = json_pack("{s:I, s:f}", TW_CHILD_STEP, (json_int_t)step, TW_CHILD_LOSS, loss);
    if (line && rates) {
        json_object_set_new(line, TW_CHILD_LEARNING_RATE, json_real(rates->learning_rate));
        json_object_set_new(line, TW_CHILD_EXAMPLES_PER_SEC, json_real(rates->examples_per_sec));
        json_object_set_new(line, TW_CHILD_SEC_PER_BATCH, json_real(rates->sec_per_batch));
        json_object_set_new(line, TW_CHILD_ETA, json_real(rates->eta_s));
    }
    emit(o, line);
}

/* The eval line's top-5, MAE and R² keys, raw then EMA. */
static void eval_details(json_t *line, const tw_child_eval *e)
{
    static const char *const TOP5[2] = {TW_CHILD_EVAL_TOP5, TW_CHILD_EVAL_TOP5_EMA};
    static const char *const MAE[2] = {TW_CHILD_EVAL_MAE, TW_CHILD_EVAL_MAE_EMA};
    static const char *const R2[2] = {TW_CHILD_EVAL_R2, TW_CHILD_EVAL_R2_EMA};
    for (int k = 0; line && k <= (e->has_ema != 0); k++) {
        if (e->has_top5)
            json_object_set_new(line, TOP5[k], json_real(e->top5[k]));
        if (e->has_regression) {
            json_object_set_new(line, MAE[k], json_real(e->mae[k]));
            json_object_set_new(line, R2[k], json_real(e->r2[k]));
        }
    }
}

void tw_child_eval_line(tw_child_out *o, const tw_child_eval *e)
{
    json_t *line = json_pack("{s:I, s:f, s:I}", TW_CHILD_STEP, (json_int_t)e->step, TW_CHILD_EVAL_LOSS,
                             e->loss, TW_CHILD_EVAL_EXAMPLES, (json_int_t)e->examples);
    if (line && e->has_accuracy)
        json_object_set_new(line, TW_CHILD_EVAL_ACCURACY, json_real(e->accuracy));
    if (line && e->has_ema)
        json_object_set_new(line, TW_CHILD_EVAL_LOSS_EMA, json_real(e->loss_ema));
    if (line && e->has_ema && e->has_accuracy)
        json_object_set_new(line, TW_CHILD_EVAL_ACCURACY_EMA, json_real(e->accuracy_ema));
    eval_details(line, e);
    emit(o, line);
}

void tw_child_heartbeat(tw_child_out *o, int64_t step)
{
    if (tw_child_now() - o->last_write >= TW_CHILD_HEARTBEAT_S)
        emit(o, json_pack("{s:b, s:I}", TW_CHILD_HEARTBEAT, 1, TW_CHILD_STEP, (json_int_t)step));
}

void tw_child_warning(tw_child_out *o, const char *code, const char *message, int64_t step)
{
    emit(o, json_pack("{s:s, s:s, s:I}", TW_CHILD_WARNING, code, TW_CHILD_MESSAGE, message,
                      TW_CHILD_STEP, (json_int_t)step));
}

void tw_child_diverged(tw_child_out *o, double loss, int64_t step)
{
    emit(o, json_pack("{s:s, s:I, s:s}", TW_CHILD_ERROR, isnan(loss) ? TW_CHILD_LOSS_NAN : TW_CHILD_LOSS_INF,
                      TW_CHILD_STEP, (json_int_t)step, TW_CHILD_MESSAGE,
                      "the loss is not finite: stopping without checkpointing this state"));
}

void tw_child_final(tw_child_out *o, const char *status, int64_t step, double seconds)
{
    emit(o, json_pack("{s:s, s:I, s:f}", TW_CHILD_STATUS, status, TW_CHILD_STEP, (json_int_t)step,
                      TW_CHILD_SECONDS, seconds));
}

static json_t *failed_line(const char *code, int exit_code)
{
    return json_pack("{s:s, s:{s:s}, s:i}", TW_CHILD_STATUS, TW_CHILD_FAILED, TW_CHILD_ERROR,
                     TW_CHILD_CODE, code, TW_CHILD_EXIT, exit_code);
}

int tw_child_failed(tw_child_out *o, const char *code, int exit_code, const char *message)
{
    json_t *line = failed_line(code, exit_code);
    if (line && json_object_set_new(line, TW_CHILD_MESSAGE, json_string(message)) != 0) {
        json_decref(line); /* a message that is not UTF-8 (a file name): the line without it */
        line = failed_line(code, exit_code);
    }
    emit(o, line);
    return exit_code;
}

const tw_child_failure *tw_child_failure_of(int exit_status)
{
    static const tw_child_failure TABLE[] = {
        {TW_EXIT_USAGE, "bad_config", "BAD_CONFIG", 1},
        {TW_EXIT_DIVERGED, "diverged", "DIVERGED", 1},
        {TW_EXIT_OOM, "out_of_memory", "OUT_OF_MEMORY", 1},
        {TW_EXIT_DEVICE, "device_error", "DEVICE_ERROR", 0},
        {TW_EXIT_STORAGE_FULL, "storage_full", "STORAGE_FULL", 0},
        {TW_EXIT_BAD_DATA, "bad_dataset", "BAD_DATASET", 1},
        {TW_EXIT_STOP_TIMEOUT, "stop_timeout", "STOP_TIMEOUT", 0},
    };
    static const tw_child_failure CRASH = {TW_EXIT_FAILED, "crashed", "CRASHED", 0};
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++)
        if (TABLE[i].exit == exit_status)
            return &TABLE[i];
    return &CRASH;
}

int tw_child_exit_code(const tw_error *err)
{
    static const struct {
        tw_status status;
        int code;
    } BY_STATUS[] = {
        {TW_ERR_INVALID, TW_EXIT_USAGE},    {TW_ERR_NOMEM, TW_EXIT_OOM},
        {TW_ERR_CORRUPT, TW_EXIT_BAD_DATA}, {TW_ERR_TRUNCATED, TW_EXIT_BAD_DATA},
        {TW_ERR_TOO_LARGE, TW_EXIT_BAD_DATA},
    };
    if (err->status == TW_ERR_IO && (err->errno_value == ENOSPC || err->errno_value == EDQUOT))
        return TW_EXIT_STORAGE_FULL;
    if (err->status == TW_ERR_INTERNAL && err->errno_value == ENOTRECOVERABLE)
        return TW_EXIT_DEVICE; /* a poisoned CUDA context or an aborted NCCL group (kernels/cuda/cuda_backend.h) */
    if (err->status == TW_ERR_INVALID && err->errno_value == EDOM)
        return TW_EXIT_DIVERGED; /* a NaN or Inf parameter refused by tw_checkpoint_save: diverged too */
    if (err->status == TW_ERR_INVALID && err->errno_value == EILSEQ)
        return TW_EXIT_BAD_DATA; /* a record whose label the data cannot hold (input.c) */
    for (size_t i = 0; i < sizeof BY_STATUS / sizeof BY_STATUS[0]; i++)
        if (BY_STATUS[i].status == err->status)
            return BY_STATUS[i].code;
    return TW_EXIT_FAILED;
}

void tw_child_train_argv(const tw_child_train_args *a, char text[2][24], char *argv[TW_CHILD_TRAIN_ARGV])
{
    snprintf(text[0], 24, "%u", a->stop_within_s);
    snprintf(text[1], 24, "%llu", a->input_memory);
    const char *words[TW_CHILD_TRAIN_ARGV] = {
        a->trainer, "train", a->config, "--" TW_TRAIN_OPT_LOGDIR, a->logdir, "--" TW_TRAIN_OPT_RESUME,
        "--" TW_TRAIN_OPT_BACKEND, a->backend, "--" TW_TRAIN_OPT_DATA_ROOT, a->data_root,
        "--" TW_TRAIN_OPT_STOP_WITHIN, text[0], "--" TW_TRAIN_OPT_INPUT_MEMORY, text[1],
        a->monitor_url ? "--" TW_TRAIN_OPT_MONITOR_URL : NULL, a->monitor_url, NULL};
    for (int i = 0; i < TW_CHILD_TRAIN_ARGV; i++)
        argv[i] = (char *)words[i];
}
