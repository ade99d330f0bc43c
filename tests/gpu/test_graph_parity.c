/* test_graph_parity.c — CUDA Graphs on against off: the same training run on the CUDA backend, once op by
 * op ("cuda_graphs": false) and once with each tower's step captured and replayed as graphs (true), must
 * give bit-identical results: the graphs run the same kernels with the same arguments in the same order
 * (engine/train_step.c, kernels/cuda/cuda_backend.cu), only launched differently.
 *
 * The run: a small CNN (conv, max-pool, dense, dropout 0.3, Adam, exponential decay, L2, EMA) on a
 * synthetic dataset written here (512 8x8x1 uint8 images, labels 0..3), 30 steps with a summary every
 * step (so the eager ops of a summary — sum of squares, histogram downloads — run between the graphs)
 * and an evaluation at the end; on one tower, and on two when the machine has two GPUs (the NCCL
 * all-reduce between the graphs). Compared: every progress line's loss and the evaluation line as
 * printed, and every tensor of the final checkpoint (parameters, EMA shadows, Adam slots) bit for bit.
 * A third run with "tf32": true only has to train (TF32 changes the rounding; its accuracy is not tested
 * here).
 *
 * Exit 0 passed, 1 failed, 77 no CUDA device. Temporary folders are removed at the end. */
#define _XOPEN_SOURCE 700

#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "gpu_skip.h"
#include "checkpoint.h"
#include "config.h"
#include "example.h"
#include "model.h"
#include "tfrecord.h"
#include "trainer.h"

enum { EXAMPLES = 512, SIDE = 8, CLASSES = 4, MAX_LINES = 256, LINE_BYTES = 512 };

static const char CONFIG[] =
    "{\"dataset\": {\"train\": \"train.tfrecord\", \"test\": \"train.tfrecord\", \"shape\": [8, 8, 1]},"
    " \"model\": {\"layers\": ["
    "  {\"type\": \"conv2d\", \"filters\": 8, \"kernel\": 3, \"activation\": \"relu\"},"
    "  {\"type\": \"max_pool2d\", \"pool\": 2},"
    "  {\"type\": \"flatten\"},"
    "  {\"type\": \"dense\", \"units\": 32, \"activation\": \"tanh\"},"
    "  {\"type\": \"dropout\", \"rate\": 0.3},"
    "  {\"type\": \"dense\", \"units\": 4}]},"
    " \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.003},"
    " \"lr_decay\": {\"type\": \"exponential\", \"decay_steps\": 10, \"decay_rate\": 0.9},"
    " \"l2\": 0.0001, \"ema_decay\": 0.99, \"batch_size\": 16, \"towers\": %d, \"steps\": 30,"
    " \"seed\": 7, \"summary_every\": 1, \"eval_every\": 0, \"checkpoint_every\": 0,"
    " \"keep_checkpoints\": 1, \"cuda_graphs\": %s, \"tf32\": %s}";

static char tmp_root[4096];
static int failures, checks;

static void check(int ok, const char *what)
{
    checks++;
    failures += !ok;
    printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
    fflush(stdout);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(path);
}

/* tmp_root/train.tfrecord: EXAMPLES examples of image_raw (SIDE*SIDE bytes) and label (int64). */
static int write_dataset(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/train.tfrecord", tmp_root);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    tw_tfrecord_writer *w = NULL;
    tw_example_builder *b = NULL;
    tw_error err;
    tw_error_clear(&err);
    tw_status s = fd < 0 ? TW_ERR_IO : tw_tfrecord_writer_create(fd, TW_COMPRESSION_NONE, path, &w, &err);
    if (s == TW_OK)
        s = tw_example_builder_create(&b, &err);
    uint64_t state = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < EXAMPLES && s == TW_OK; i++) {
        uint8_t image[SIDE * SIDE];
        int64_t label = i % CLASSES;
        for (int k = 0; k < SIDE * SIDE; k++) { /* a class-dependent pattern plus noise */
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            int noise = (int)(state >> 58);
            image[k] = (uint8_t)(((k + (int)label * 16) % 64) * 3 + noise);
        }
        const uint8_t *data;
        size_t len;
        tw_example_builder_reset(b);
        s = tw_example_add_bytes1(b, "image_raw", image, sizeof image, &err);
        if (s == TW_OK)
            s = tw_example_add_int64s(b, "label", &label, 1, &err);
        if (s == TW_OK)
            s = tw_example_serialize(b, &data, &len, &err);
        if (s == TW_OK)
            s = tw_tfrecord_write(w, data, len, &err);
    }
    if (s == TW_OK)
        s = tw_tfrecord_writer_finish(w, &err);
    tw_tfrecord_writer_destroy(w);
    tw_example_builder_destroy(b);
    if (fd >= 0)
        close(fd);
    if (s != TW_OK)
        printf("FAIL cannot write %s: %s\n", path, err.message);
    return s == TW_OK ? 0 : -1;
}

/* What one run reported: its progress lines without the timings, and its final arenas. */
typedef struct {
    char lines[MAX_LINES][LINE_BYTES];
    int n;
    float *arenas; /* every checkpoint tensor, in the model's order, params then suffixes */
    size_t floats;
} outcome;

/* The line without the keys that measure time. */
static void strip_times(json_t *j, char *out, size_t size)
{
    static const char *TIMES[] = {"examples_per_sec", "sec_per_batch", "eta_s", "seconds"};
    for (size_t i = 0; i < sizeof TIMES / sizeof TIMES[0]; i++)
        json_object_del(j, TIMES[i]);
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    snprintf(out, size, "%s", text ? text : "");
    free(text);
}

/* Reads the final checkpoint of logdir into o->arenas. */
static int read_arenas(const tw_config *c, const char *logdir, outcome *o)
{
    static const char *SUFFIXES[] = {"", "/ExponentialMovingAverage", "/Adam", "/Adam_1"};
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/checkpoints", logdir);
    tw_model *m = NULL;
    tw_checkpoint *ck = NULL;
    tw_error err;
    tw_error_clear(&err);
    tw_status s = tw_model_create(c, &m, &err);
    if (s == TW_OK)
        s = tw_checkpoint_open_latest(dir, &ck, &err);
    size_t per = s == TW_OK ? tw_model_param_floats(m) : 0;
    o->floats = 4 * per;
    o->arenas = calloc(o->floats ? o->floats : 1, sizeof(float));
    for (int a = 0; a < 4 && s == TW_OK; a++) {
        for (size_t i = 0; i < tw_model_n_params(m) && s == TW_OK; i++) {
            const tw_param *p = tw_model_param(m, i);
            char name[256];
            snprintf(name, sizeof name, "%s%s", p->name, SUFFIXES[a]);
            s = tw_checkpoint_fetch(ck, name, p->rank, p->shape, o->arenas + a * per + p->offset, &err);
        }
    }
    if (s != TW_OK)
        printf("FAIL reading the checkpoint in %s: %s\n", dir, err.message);
    tw_checkpoint_free(ck);
    tw_model_destroy(m);
    return s == TW_OK ? 0 : -1;
}

/* Trains CONFIG with towers, graphs and tf32 on the CUDA backend into *o. */
static int train(int towers, int graphs, int tf32, outcome *o)
{
    static tw_config c;
    char json[4096];
    snprintf(json, sizeof json, CONFIG, towers, graphs ? "true" : "false", tf32 ? "true" : "false");
    tw_error err;
    tw_error_clear(&err);
    memset(o, 0, sizeof *o);
    if (tw_config_parse(json, strlen(json), tmp_root, &c, &err) != TW_OK) {
        printf("FAIL config: %s\n", err.message);
        return -1;
    }
    char logdir[4200];
    snprintf(logdir, sizeof logdir, "%s/run-XXXXXX", tmp_root);
    FILE *progress = mkdtemp(logdir) ? tmpfile() : NULL;
    if (!progress)
        return -1;
    tw_train_options opt = {.logdir = logdir, .resume = 0, .backend = "cuda", .progress = progress};
    tw_train_outcome result;
    tw_status s = tw_train(&c, &opt, &result, &err);
    int rc = -1;
    if (s != TW_OK || result != TW_TRAIN_COMPLETED) {
        printf("FAIL training (%d towers, graphs %d, tf32 %d): %s\n", towers, graphs, tf32,
               s != TW_OK ? err.message : "did not complete");
    } else {
        rewind(progress);
        char line[8192];
        while (fgets(line, sizeof line, progress) && o->n < MAX_LINES) {
            json_t *j = json_loads(line, 0, NULL);
            if (j)
                strip_times(j, o->lines[o->n++], LINE_BYTES);
            json_decref(j);
        }
        rc = read_arenas(&c, logdir, o);
    }
    fclose(progress);
    nftw(logdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

static void compare(const char *name, const outcome *a, const outcome *b)
{
    char what[512];
    int same = a->n == b->n && a->n > 0;
    for (int i = 0; same && i < a->n; i++)
        if (strcmp(a->lines[i], b->lines[i]) != 0) {
            printf("     line %d differs:\n       off %s\n       on  %s\n", i, a->lines[i], b->lines[i]);
            same = 0;
        }
    snprintf(what, sizeof what, "%s: %d progress lines (losses, learning rates, evaluation) equal", name,
             a->n);
    check(same, what);
    size_t differ = 0;
    for (size_t i = 0; a->floats == b->floats && i < a->floats; i++)
        differ += memcmp(&a->arenas[i], &b->arenas[i], sizeof(float)) != 0;
    snprintf(what, sizeof what, "%s: final params, EMA and Adam slots bit-identical (%zu of %zu differ)",
             name, differ, a->floats);
    check(a->floats == b->floats && a->floats > 0 && differ == 0, what);
}

int main(void)
{
    int gpus = tw_gpu_devices_or_skip("cuda");
    if (gpus < 1) {
        return TW_GPU_SKIP;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/tw-gpu-graphs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    static outcome off, on;
    if (write_dataset() == 0) {
        for (int towers = 1; towers <= (gpus >= 2 ? 2 : 1); towers++) {
            char name[64];
            snprintf(name, sizeof name, "%d tower%s, graphs off vs on", towers, towers > 1 ? "s" : "");
            if (train(towers, 0, 0, &off) == 0 && train(towers, 1, 0, &on) == 0)
                compare(name, &off, &on);
            else
                check(0, name);
            free(off.arenas);
            free(on.arenas);
            off.arenas = on.arenas = NULL;
        }
        check(train(1, 1, 1, &on) == 0, "tf32 with graphs trains");
        free(on.arenas);
    } else {
        check(0, "synthetic dataset");
    }
    nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("%s: %d of %d checks passed\n", failures ? "FAILED" : "PASSED", checks - failures, checks);
    return failures ? 1 : 0;
}
