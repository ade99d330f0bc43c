/* tw_inputdump.c — reads a TFRecord through the input pipeline (engine/input.h) and prints what the
 * trainer would get, for the TensorFlow compatibility tests (tests/integration/test_input_tf.py).
 * Owns nothing but its arguments.
 *
 *   tw_inputdump PATH EXAMPLE_SIZE [--batch N] [--batches N] [--once] [--seek EPOCH:CONSUMED]
 *                [--seed N] [--shuffle 0|1] [--scale F] [--float-labels] [--classes N]
 *                [--image-feature NAME] [--label-feature NAME] [--max-memory BYTES]
 *                [--shuffle-buffer N] [--prefetch N] [--time]
 *
 * Prints one JSON object per line: first {"count", "in_memory"} after open, then per batch
 * {"epoch", "consumed" (tell() after it), "got", "labels": [got], "x": [got * EXAMPLE_SIZE]},
 * floats with 9 significant digits (exact for fp32). --batches N (default 1) takes N batches with
 * tw_input_next; --once takes the one-pass iteration (tw_input_next_once) until it ends. --time
 * prints instead one object {"count", "in_memory", "open_s", "batches", "next_s"} with wall-clock
 * seconds.
 * Option defaults are tw_input_options_default's, with classes 10 and shuffle 0. Exit status 0 ok,
 * 1 failure (the error on stderr, with file and byte offset), 2 usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "input.h"

typedef struct {
    tw_input_options o;
    int batch, batches, once, timing, seek;
    tw_input_position at;
} args;

static int usage(void)
{
    fprintf(stderr, "usage: tw_inputdump PATH EXAMPLE_SIZE [--batch N] [--batches N] [--once] "
                    "[--seek EPOCH:CONSUMED] [--seed N] [--shuffle 0|1] [--scale F] "
                    "[--float-labels] [--classes N] [--image-feature NAME] [--label-feature NAME] "
                    "[--max-memory BYTES] [--shuffle-buffer N] [--prefetch N] [--time]\n");
    return 2;
}

/* Applies option argv[*i] (and its value); 0 on success, -1 on a usage error. */
static int parse_option(int argc, char **argv, int *i, args *a)
{
    const char *k = argv[*i];
    if (!strcmp(k, "--once") || !strcmp(k, "--float-labels") || !strcmp(k, "--time")) {
        a->once |= !strcmp(k, "--once");
        a->o.float_labels |= !strcmp(k, "--float-labels");
        a->timing |= !strcmp(k, "--time");
        return 0;
    }
    if (*i + 1 >= argc)
        return -1;
    const char *v = argv[++*i];
    if (!strcmp(k, "--batch"))
        a->batch = atoi(v);
    else if (!strcmp(k, "--batches"))
        a->batches = atoi(v);
    else if (!strcmp(k, "--seed"))
        a->o.seed = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--shuffle"))
        a->o.shuffle = atoi(v);
    else if (!strcmp(k, "--scale"))
        a->o.scale = strtof(v, NULL);
    else if (!strcmp(k, "--classes"))
        a->o.classes = atoi(v);
    else if (!strcmp(k, "--image-feature"))
        a->o.image_feature = v;
    else if (!strcmp(k, "--label-feature"))
        a->o.label_feature = v;
    else if (!strcmp(k, "--max-memory"))
        a->o.max_memory_bytes = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--shuffle-buffer"))
        a->o.shuffle_buffer = atoi(v);
    else if (!strcmp(k, "--prefetch"))
        a->o.prefetch_batches = atoi(v);
    else if (!strcmp(k, "--seek")) {
        unsigned long long e, c;
        if (sscanf(v, "%llu:%llu", &e, &c) != 2)
            return -1;
        a->seek = 1;
        a->at.epoch = e;
        a->at.consumed = c;
    } else
        return -1;
    return 0;
}

static int parse_args(int argc, char **argv, args *a)
{
    if (argc < 3)
        return -1;
    memset(a, 0, sizeof *a);
    tw_input_options_default(&a->o);
    a->o.path = argv[1];
    a->o.example_size = strtoull(argv[2], NULL, 10);
    a->o.classes = 10;
    a->o.shuffle = 0;
    a->batch = 32;
    a->batches = 1;
    for (int i = 3; i < argc; i++)
        if (parse_option(argc, argv, &i, a) != 0)
            return -1;
    return a->batch >= 1 ? 0 : -1;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void print_batch(const args *a, const tw_input *in, int got, const float *x,
                        const void *labels)
{
    const tw_input_position p = tw_input_tell(in);
    printf("{\"epoch\": %llu, \"consumed\": %llu, \"got\": %d, \"labels\": [",
           (unsigned long long)p.epoch, (unsigned long long)p.consumed, got);
    for (int k = 0; k < got; k++) {
        if (a->o.float_labels)
            printf("%s%.9g", k ? ", " : "", (double)((const float *)labels)[k]);
        else
            printf("%s%d", k ? ", " : "", (int)((const int32_t *)labels)[k]);
    }
    printf("], \"x\": [");
    for (size_t i = 0; i < (size_t)got * a->o.example_size; i++)
        printf("%s%.9g", i ? ", " : "", (double)x[i]);
    printf("]}\n");
}

/* Takes the batches asked for; prints them unless timing. *taken counts them. */
static tw_status take(const args *a, tw_input *in, float *x, void *labels, int *taken,
                      tw_error *err)
{
    for (*taken = 0; a->once || *taken < a->batches; (*taken)++) {
        int got = a->batch;
        tw_status s = a->once ? tw_input_next_once(in, a->batch, x, labels, &got, err)
                              : tw_input_next(in, a->batch, x, labels, err);
        if (s != TW_OK)
            return s;
        if (!a->timing)
            print_batch(a, in, got, x, labels);
        if (got == 0)
            break;
    }
    return TW_OK;
}

static tw_status dump(const args *a, tw_error *err)
{
    const double t0 = now();
    tw_input *in;
    TW_TRY(tw_input_open(&a->o, &in, err));
    const double t1 = now();
    if (!a->timing)
        printf("{\"count\": %llu, \"in_memory\": %d}\n", (unsigned long long)tw_input_count(in),
               tw_input_in_memory(in));
    float *x = malloc((size_t)a->batch * a->o.example_size * sizeof *x);
    int32_t *labels = malloc((size_t)a->batch * sizeof *labels);
    int taken = 0;
    tw_status s = x && labels ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s == TW_OK && a->seek)
        s = tw_input_seek(in, &a->at, err);
    const double t2 = now();
    if (s == TW_OK)
        s = take(a, in, x, labels, &taken, err);
    if (s == TW_OK && a->timing)
        printf("{\"count\": %llu, \"in_memory\": %d, \"open_s\": %.6f, \"batches\": %d, "
               "\"next_s\": %.6f}\n",
               (unsigned long long)tw_input_count(in), tw_input_in_memory(in), t1 - t0, taken,
               now() - t2);
    free(x);
    free(labels);
    tw_input_close(in);
    return s;
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a) != 0)
        return usage();
    tw_error err;
    tw_error_clear(&err);
    if (dump(&a, &err) != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "tw_inputdump: %s\n", msg);
        return 1;
    }
    return 0;
}
