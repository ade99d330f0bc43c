/* test_train_parity.c — whole training runs on the CPU and on the GPU, compared: 200 steps of a
 * seed_mlp-like config (784-500-10 relu, SGD with exponential decay, L2, EMA) and of a fashion_cnn-like
 * config (conv5x5x32, pool, conv5x5x64, pool, dense 1024, dropout 0.4, Adam, EMA), through tw_train as
 * `tower train` runs them; with two or more GPUs also 2 towers x 16 against 1 tower x 32 on the GPU
 * (the same examples: equal up to rounding) and the CNN on 2 towers, CPU against GPU.
 *
 * What is compared, from the JSON progress lines: the training loss of every summary (every 20 steps,
 * the mean over those steps) and the final evaluation (loss, accuracy, with raw and EMA weights).
 * Tolerances: the runs start from the same weights and see the same examples and dropout masks, but
 * GEMMs (OpenBLAS vs cuBLAS) round differently and the difference grows with training, slowly for SGD
 * and faster for Adam (whose step is ~lr for any gradient sign, so rounding flips near-zero gradients).
 * Measured on the CPU alone, two OpenBLAS kernels (OPENBLAS_CORETYPE Haswell vs Prescott, i.e. GEMMs
 * with other rounding) give the CNN summary losses 0.9% apart at worst, eval losses 0.08% and eval
 * accuracies 0.0013 after these 200 steps, and the MLP the same 7 printed digits; hence
 *   MLP (SGD):  loss |g - c| <= 1e-3 max(|c|, 0.1); eval loss the same; eval accuracy within 0.003;
 *   CNN (Adam): loss |g - c| <= 3e-2 max(|c|, 0.1); eval loss 1e-2 relative; eval accuracy within 0.01;
 *   2x16 vs 1x32 on the GPU: as the MLP.
 * The dataset: $TW_GPU_DATA (a folder with train.tfrecord and test.tfrecord of 28x28x1 images and
 * labels 0..9, as `tower convert` writes Fashion-MNIST), else the repository's
 * tower-data/datasets/fashion-mnist. Run logs go to temporary folders, removed at the end.
 * Exit 0 passed, 1 failed, 77 no CUDA device or no dataset. TW_PARITY_OTHER=cpu trains the CPU against
 * itself (a check of this harness where no GPU is). */
#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "gpu_skip.h"
#include "config.h"
#include "trainer.h"

#ifndef TW_SOURCE_DIR
#define TW_SOURCE_DIR "."
#endif

enum { STEPS = 200, SUMMARY_EVERY = 20, MAX_POINTS = 64 };

static const char MLP[] =
    "{\"dataset\": {\"train\": \"train.tfrecord\", \"test\": \"test.tfrecord\", \"shape\": [28, 28, 1],"
    " \"scale\": 0.00392156862745098, \"shuffle_buffer\": 10000},"
    " \"model\": {\"layers\": ["
    "  {\"type\": \"flatten\"},"
    "  {\"type\": \"dense\", \"units\": 500, \"activation\": \"relu\","
    "   \"weight_init\": {\"type\": \"truncated_normal\", \"stddev\": 0.1},"
    "   \"bias_init\": {\"type\": \"glorot_uniform\"}},"
    "  {\"type\": \"dense\", \"units\": 10, \"weight_init\": {\"type\": \"truncated_normal\","
    "   \"stddev\": 0.1}, \"bias_init\": {\"type\": \"glorot_uniform\"}}]},"
    " \"loss\": \"softmax_cross_entropy\", \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.01},"
    " \"lr_decay\": {\"type\": \"exponential\", \"decay_steps\": 100, \"decay_rate\": 0.9,"
    " \"staircase\": false}, \"l2\": 0.0001, \"ema_decay\": 0.99,"
    " \"batch_size\": %d, \"towers\": %d, \"steps\": %d, \"seed\": 1, \"summary_every\": %d,"
    " \"eval_every\": %d, \"checkpoint_every\": %d, \"keep_checkpoints\": 1}";

static const char CNN[] =
    "{\"dataset\": {\"train\": \"train.tfrecord\", \"test\": \"test.tfrecord\", \"shape\": [28, 28, 1],"
    " \"scale\": 0.00392156862745098},"
    " \"model\": {\"layers\": ["
    "  {\"type\": \"conv2d\", \"filters\": 32, \"kernel\": 5, \"padding\": \"same\","
    "   \"activation\": \"relu\", \"weight_init\": {\"type\": \"glorot_uniform\"},"
    "   \"bias_init\": {\"type\": \"zeros\"}},"
    "  {\"type\": \"max_pool2d\", \"pool\": 2, \"strides\": 2},"
    "  {\"type\": \"conv2d\", \"filters\": 64, \"kernel\": 5, \"padding\": \"same\","
    "   \"activation\": \"relu\", \"weight_init\": {\"type\": \"glorot_uniform\"},"
    "   \"bias_init\": {\"type\": \"zeros\"}},"
    "  {\"type\": \"max_pool2d\", \"pool\": 2, \"strides\": 2},"
    "  {\"type\": \"flatten\"},"
    "  {\"type\": \"dense\", \"units\": 1024, \"activation\": \"relu\","
    "   \"weight_init\": {\"type\": \"glorot_uniform\"}, \"bias_init\": {\"type\": \"zeros\"}},"
    "  {\"type\": \"dropout\", \"rate\": 0.4},"
    "  {\"type\": \"dense\", \"units\": 10, \"weight_init\": {\"type\": \"glorot_uniform\"},"
    "   \"bias_init\": {\"type\": \"zeros\"}}]},"
    " \"loss\": \"softmax_cross_entropy\", \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.001},"
    " \"lr_decay\": {\"type\": \"exponential\", \"decay_steps\": 600, \"decay_rate\": 0.9,"
    " \"staircase\": false}, \"l2\": 0, \"ema_decay\": 0.999,"
    " \"batch_size\": %d, \"towers\": %d, \"steps\": %d, \"seed\": 1, \"summary_every\": %d,"
    " \"eval_every\": %d, \"checkpoint_every\": %d, \"keep_checkpoints\": 1}";

/* What one run reported. */
typedef struct {
    const char *label;
    int n;                          /* summaries */
    int step[MAX_POINTS];
    double loss[MAX_POINTS];
    double eval_loss, eval_acc, eval_loss_ema, eval_acc_ema;
    double ex_per_s;                /* training examples per second, the last summary's */
    double seconds;                 /* the whole run, evaluation and checkpoints included */
} outcome;

static int failures, checks;
static char data_dir[4096];
static char tmp_root[4096];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(path);
}

/* Trains the config text on backend; returns 0 and fills *o, or prints why and returns -1. */
static int train(const char *label, const char *fmt, int batch, int towers, const char *backend,
                 outcome *o)
{
    static tw_config c; /* large */
    char json[8192];
    snprintf(json, sizeof json, fmt, batch, towers, STEPS, SUMMARY_EVERY, STEPS, STEPS);
    tw_error err;
    tw_error_clear(&err);
    memset(o, 0, sizeof *o);
    o->label = label;
    if (tw_config_parse(json, strlen(json), data_dir, &c, &err) != TW_OK) {
        printf("FAIL %s: config: %s\n", label, err.message);
        return -1;
    }
    char logdir[4200];
    snprintf(logdir, sizeof logdir, "%s/run-XXXXXX", tmp_root);
    if (!mkdtemp(logdir)) {
        perror("mkdtemp");
        return -1;
    }
    FILE *progress = tmpfile();
    if (!progress)
        return -1;
    tw_train_options opt = {.logdir = logdir, .resume = 0, .backend = backend, .progress = progress};
    tw_train_outcome result;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tw_status s = tw_train(&c, &opt, &result, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    o->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    nftw(logdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (s != TW_OK || result != TW_TRAIN_COMPLETED) {
        printf("FAIL %s: training %s: %s\n", label, s != TW_OK ? "failed" : "did not complete",
               err.message);
        fclose(progress);
        return -1;
    }
    rewind(progress);
    char line[4096];
    while (fgets(line, sizeof line, progress)) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j)
            continue;
        json_t *loss = json_object_get(j, "loss"), *step = json_object_get(j, "step");
        if (json_is_number(loss) && json_is_integer(step) && o->n < MAX_POINTS) {
            o->step[o->n] = (int)json_integer_value(step);
            o->loss[o->n++] = json_number_value(loss);
            o->ex_per_s = json_number_value(json_object_get(j, "examples_per_sec"));
        }
        if (json_object_get(j, "eval_loss")) {
            o->eval_loss = json_number_value(json_object_get(j, "eval_loss"));
            o->eval_acc = json_number_value(json_object_get(j, "eval_accuracy"));
            o->eval_loss_ema = json_number_value(json_object_get(j, "eval_loss_ema"));
            o->eval_acc_ema = json_number_value(json_object_get(j, "eval_accuracy_ema"));
        }
        json_decref(j);
    }
    fclose(progress);
    printf("     ran %-26s %-4s towers %d x batch %-3d %6.1f s, %9.0f train ex/s, eval loss %.5f "
           "acc %.4f (ema %.4f)\n", label, backend, towers, batch, o->seconds, o->ex_per_s,
           o->eval_loss, o->eval_acc, o->eval_acc_ema);
    fflush(stdout);
    return o->n > 0 ? 0 : -1;
}

static void check(int ok, const char *what)
{
    checks++;
    failures += !ok;
    printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
    fflush(stdout);
}

/* Compares run b against reference a with the stated tolerances. */
/* |a - b| relative to max(|a|, 0.1): a loss near 0 is compared on the scale of 0.1. */
static double rel(double a, double b)
{
    double scale = fabs(a) > 0.1 ? fabs(a) : 0.1;
    return fabs(a - b) / scale;
}

static void compare(const char *name, const outcome *a, const outcome *b, double loss_rtol,
                    double eval_rtol, double acc_atol)
{
    char what[256];
    int ok = a->n == b->n && a->n > 0;
    double worst = 0;
    for (int i = 0; ok && i < a->n; i++) {
        double d = rel(a->loss[i], b->loss[i]);
        ok = a->step[i] == b->step[i];
        if (d > worst || isnan(d))
            worst = isnan(d) ? INFINITY : d;
        printf("     step %4d  loss %s %.6f  %s %.6f  rel diff %.2e\n", a->step[i], a->label,
               a->loss[i], b->label, b->loss[i], d);
    }
    snprintf(what, sizeof what, "%s: training loss at %d summaries, worst rel diff %.2e <= %.0e", name,
             a->n, worst, loss_rtol);
    check(ok && worst <= loss_rtol, what);
    double de = rel(a->eval_loss, b->eval_loss), dee = rel(a->eval_loss_ema, b->eval_loss_ema);
    snprintf(what, sizeof what, "%s: eval loss rel diff %.2e, ema %.2e <= %.0e", name, de, dee,
             eval_rtol);
    check(de <= eval_rtol && dee <= eval_rtol, what);
    double da = fabs(a->eval_acc - b->eval_acc), dae = fabs(a->eval_acc_ema - b->eval_acc_ema);
    snprintf(what, sizeof what, "%s: eval accuracy diff %.4f, ema %.4f <= %.3f", name, da, dae,
             acc_atol);
    check(da <= acc_atol && dae <= acc_atol, what);
}

static int file_exists(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, R_OK) == 0;
}

int main(void)
{
    /* TW_PARITY_OTHER=cpu trains the CPU against itself: a check of this harness without a GPU. */
    const char *env_other = getenv("TW_PARITY_OTHER");
    const char *other = env_other && *env_other ? env_other : "cuda";
    int gpus = tw_gpu_devices_or_skip(other);
    if (gpus < 1) {
        return TW_GPU_SKIP;
    }
    const char *env = getenv("TW_GPU_DATA");
    snprintf(data_dir, sizeof data_dir, "%s",
             env && *env ? env : TW_SOURCE_DIR "/tower-data/datasets/fashion-mnist");
    if (!file_exists(data_dir, "train.tfrecord") || !file_exists(data_dir, "test.tfrecord")) {
        printf("SKIP: no dataset: %s/{train,test}.tfrecord (set TW_GPU_DATA; tests/gpu/run.sh makes "
               "one)\n", data_dir);
        return 77;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/tw-gpu-train-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    printf("training parity, %d steps, dataset %s, %d GPU%s\n", STEPS, data_dir, gpus,
           gpus == 1 ? "" : "s");
    static outcome a, b;
    if (train("mlp", MLP, 32, 1, "cpu", &a) || train("mlp", MLP, 32, 1, other, &b))
        check(0, "mlp runs");
    else
        compare("mlp cpu vs cuda", &a, &b, 1e-3, 1e-3, 0.003);
    if (train("cnn", CNN, 100, 1, "cpu", &a) || train("cnn", CNN, 100, 1, other, &b))
        check(0, "cnn runs");
    else
        compare("cnn cpu vs cuda", &a, &b, 3e-2, 1e-2, 0.01);
    if (gpus >= 2) {
        if (train("mlp 1x32", MLP, 32, 1, other, &a) || train("mlp 2x16", MLP, 16, 2, other, &b))
            check(0, "mlp tower runs");
        else
            compare("mlp cuda 1 tower x 32 vs 2 towers x 16", &a, &b, 1e-3, 1e-3, 0.003);
        if (train("cnn 2x50", CNN, 50, 2, "cpu", &a) || train("cnn 2x50", CNN, 50, 2, other, &b))
            check(0, "cnn 2-tower runs");
        else
            compare("cnn 2 towers cpu vs cuda", &a, &b, 3e-2, 1e-2, 0.01);
    } else {
        printf("skip 1 vs 2 towers: this machine has 1 GPU\n");
    }
    rmdir(tmp_root);
    printf("%s: %d of %d checks passed\n", failures ? "FAILED" : "PASSED", checks - failures, checks);
    return failures ? 1 : 0;
}
