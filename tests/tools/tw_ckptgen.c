/* tw_ckptgen.c — writes a safetensors checkpoint with known tensors, through the public API, for the
 * integration tests to read with the Python `safetensors` package (not a test itself).
 *
 *   tw_ckptgen FILE [KEY=VALUE ...]                 tw_safetensors_write(FILE, ...)
 *   tw_ckptgen --dir DIR STEP KEEP [KEY=VALUE ...]  tw_checkpoint_save(DIR, STEP, KEEP, ...)
 *
 * The tensors (tests/integration/test_safetensors.py computes the same values):
 *   "dense/kernel"  [3, 4]   value i * 0.25 - 1 at flat index i
 *   "dense/bias"    [4]      1e-8, -0.0, FLT_MAX, FLT_MIN
 *   "scalar"        []       42.5 (rank 0: one value)
 *   "empty"         [0, 5]   no values
 *   "special"       [3]      NaN, +Inf, -Inf (not with --dir: a checkpoint holds no non-finite value)
 *   "big"           [300, 7] value (i % 97) * 0.5 - 7 at flat index i
 *   "ü \"quoted\"/x" [2]     1, 2 (a name that needs UTF-8 and JSON escapes)
 * The metadata is the KEY=VALUE arguments. Exit status 0 on success, 1 on failure (message on stderr),
 * 2 on a usage error. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "safetensors.h"

enum { BIG_ROWS = 300, BIG_COLS = 7, MAX_META = 64 };

static float kernel[12], bias[4], scalar[1] = {42.5f}, special[3], big[BIG_ROWS * BIG_COLS],
             quoted[2] = {1, 2};

static void fill_values(void)
{
    for (int i = 0; i < 12; i++)
        kernel[i] = (float)i * 0.25f - 1.0f;
    bias[0] = 1e-8f;
    bias[1] = -0.0f;
    bias[2] = FLT_MAX;
    bias[3] = FLT_MIN;
    special[0] = NAN;
    special[1] = INFINITY;
    special[2] = -INFINITY;
    for (int i = 0; i < BIG_ROWS * BIG_COLS; i++)
        big[i] = (float)(i % 97) * 0.5f - 7.0f;
}

static const tw_st_tensor TENSORS[] = {
    {.name = "dense/kernel", .data = kernel, .rank = 2, .shape = {3, 4}},
    {.name = "dense/bias", .data = bias, .rank = 1, .shape = {4}},
    {.name = "scalar", .data = scalar, .rank = 0},
    {.name = "empty", .data = NULL, .rank = 2, .shape = {0, 5}},
    {.name = "big", .data = big, .rank = 2, .shape = {BIG_ROWS, BIG_COLS}},
    {.name = "\xc3\xbc \"quoted\"/x", .data = quoted, .rank = 1, .shape = {2}},
    {.name = "special", .data = special, .rank = 1, .shape = {3}}, /* last: --dir leaves it out */
};
enum { N_TENSORS = sizeof TENSORS / sizeof TENSORS[0] };

/* Splits each KEY=VALUE argument in place into meta; returns the count or -1 on a malformed one. */
static int parse_meta(int argc, char **argv, tw_st_meta *meta)
{
    if (argc > MAX_META)
        return -1;
    for (int i = 0; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq)
            return -1;
        *eq = 0;
        meta[i] = (tw_st_meta){argv[i], eq + 1};
    }
    return argc;
}

static int usage(void)
{
    fputs("usage: tw_ckptgen FILE [KEY=VALUE ...]\n"
          "       tw_ckptgen --dir DIR STEP KEEP [KEY=VALUE ...]\n", stderr);
    return 2;
}

int main(int argc, char **argv)
{
    int folder = argc > 1 && !strcmp(argv[1], "--dir");
    int first_meta = folder ? 5 : 2;
    tw_st_meta meta[MAX_META];
    int n_meta = argc >= first_meta ? parse_meta(argc - first_meta, argv + first_meta, meta) : -1;
    if (n_meta < 0)
        return usage();
    fill_values();
    tw_error err;
    tw_error_clear(&err);
    tw_status s = folder ? tw_checkpoint_save(argv[2], strtoll(argv[3], NULL, 10), atoi(argv[4]),
                                              TENSORS, N_TENSORS - 1, meta, (size_t)n_meta, &err)
                         : tw_safetensors_write(argv[1], TENSORS, N_TENSORS, meta, (size_t)n_meta,
                                                &err);
    if (s != TW_OK) {
        char msg[1200];
        tw_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "tw_ckptgen: %s\n", msg);
        return 1;
    }
    return 0;
}
