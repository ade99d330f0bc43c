/* test_cuda_parity.c — every operation of the CUDA backend against the CPU backend (the reference) on
 * the same random inputs, with the tolerance of each op stated next to it; plus the label error that a
 * wait reports, views at offsets, and the all-reduce across GPUs when there are two or more.
 *
 * Tolerances (g = CUDA value, c = CPU value, per element):
 *   exact   bit-identical (memcmp): ops whose result is per-element arithmetic of elementwise.h or a sum
 *           taken in the CPU's order (kernels/ builds with --fmad=false): upload/download/zero,
 *           bias_add, relu/none fwd, every act_bwd, dropout fwd/bwd, im2col, col2im, max-pool fwd
 *           (values and argmax, ties included) and bwd, xent_bwd, mse fwd/bwd, the fused update (SGD,
 *           momentum, Adam, L2, EMA) and the one-tower all-reduce.
 *   gemm    |g - c| <= 2 k eps32 M, M = |alpha| sum_k |a||b| + |beta c0| (the classic bound of a k-term
 *           float dot product, for both summation orders).
 *   tanh, sigmoid fwd          |g - c| <= 2e-6 |c| + 1e-9 (libdevice vs glibc: a few ulp each).
 *   bias_grad                  |g - c| <= 1e-6 sum_r |dy[r, c]| (float sums in other orders).
 *   xent_fwd probs             |g - c| <= 4e-6 |c| + 1e-9; loss |g - c| <= 4e-6 (|c| + 1).
 *   sum_squares                |g - c| <= 2.4e-7 |c| (2 ulp: both sum in double).
 *   all-reduce of 2+ GPUs      |g - c| <= 4.8e-7 |c| + 1e-30 (NCCL's order and scaling vs the CPU's);
 *                              and every GPU holds the same bits.
 * Prints one line per check and a summary; exit 0 all passed, 1 a failure, 77 no CUDA device (ctest
 * reports that as skipped). TW_PARITY_OTHER=cpu runs the harness CPU against CPU, where no GPU is. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_skip.h"

static tw_backend *CPU, *GPU;
static int failures, checks;

/* ---- helpers ---- */

static void die(const char *what, const tw_error *e)
{
    fprintf(stderr, "FATAL %s: %s\n", what, e ? e->message : "");
    exit(1);
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        tw_error e_;                                                                               \
        tw_error_clear(&e_);                                                                       \
        if ((call) != TW_OK)                                                                       \
            die(#call, &e_);                                                                       \
    } while (0)

/* The same call on both backends: CALL(b) is an expression using backend b and ending in &e_. */
#define BOTH(CALL)                                                                                 \
    do {                                                                                           \
        tw_error e_;                                                                               \
        tw_error_clear(&e_);                                                                       \
        tw_backend *b = CPU;                                                                       \
        if ((CALL) != TW_OK)                                                                       \
            die("cpu: " #CALL, &e_);                                                               \
        b = GPU;                                                                                   \
        if ((CALL) != TW_OK)                                                                       \
            die("cuda: " #CALL, &e_);                                                              \
    } while (0)

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t next_u64(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

static float frand(float lo, float hi)
{
    return lo + (hi - lo) * (float)(next_u64() >> 40) * (1.0f / 16777216.0f);
}

static float *host(size_t n)
{
    float *v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        die("calloc", NULL);
    return v;
}

static float *randv(size_t n, float lo, float hi)
{
    float *v = host(n);
    for (size_t i = 0; i < n; i++)
        v[i] = frand(lo, hi);
    return v;
}

/* A buffer of n 4-byte values on each backend. */
typedef struct {
    tw_buffer *c, *g;
    size_t n;
} pair;

static pair pair_new(size_t n)
{
    pair p = {NULL, NULL, n};
    OK(tw_backend_alloc(CPU, n * 4, &p.c, &e_));
    OK(tw_backend_alloc(GPU, n * 4, &p.g, &e_));
    return p;
}

/* A pair holding v[n] (fp32 or int32) on both. */
static pair pair_from(const void *v, size_t n)
{
    pair p = pair_new(n);
    OK(tw_backend_upload(CPU, tw_tensor_of(p.c), v, n * 4, &e_));
    OK(tw_backend_upload(GPU, tw_tensor_of(p.g), v, n * 4, &e_));
    return p;
}

static void pair_free(pair *p)
{
    tw_backend_free(CPU, p->c);
    tw_backend_free(GPU, p->g);
}

/* The view of p on backend b. */
static tw_tensor V(tw_backend *b, pair p) { return tw_tensor_of(b == CPU ? p.c : p.g); }

static void pair_read(pair p, float *c, float *g)
{
    OK(tw_backend_download(CPU, c, tw_tensor_of(p.c), p.n * 4, &e_));
    OK(tw_backend_download(GPU, g, tw_tensor_of(p.g), p.n * 4, &e_));
}

static void report(int ok, const char *name, size_t n, double worst, double bound, const char *kind)
{
    checks++;
    if (!ok)
        failures++;
    printf("%-4s %-44s n=%-9zu %s worst=%.3g (bound %.3g)\n", ok ? "ok" : "FAIL", name, n, kind, worst,
           bound);
    fflush(stdout);
}

/* p must hold the same bits on both backends. */
static void expect_exact(const char *name, pair p)
{
    float *c = host(p.n), *g = host(p.n);
    pair_read(p, c, g);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < p.n; i++)
        if (memcmp(&c[i], &g[i], 4) != 0 && bad++ == 0)
            first = i;
    report(bad == 0, name, p.n, (double)bad, 0, "exact: differing values");
    if (bad)
        printf("     first at %zu: cpu %.9g cuda %.9g (%zu differ)\n", first, c[first], g[first], bad);
    free(c);
    free(g);
}

/* |g - c| <= rtol |c| + atol[i] (atol may be NULL: atol0 for all). */
static void expect_close(const char *name, pair p, double rtol, double atol0, const double *atol)
{
    float *c = host(p.n), *g = host(p.n);
    pair_read(p, c, g);
    double worst = 0;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < p.n; i++) {
        double bound = rtol * fabs((double)c[i]) + (atol ? atol[i] : atol0);
        double d = fabs((double)g[i] - (double)c[i]);
        if (!(d <= bound) && bad++ == 0)
            first = i;
        double ratio = bound > 0 ? d / bound : (d > 0 ? INFINITY : 0);
        if (ratio > worst || isnan(ratio))
            worst = isnan(ratio) ? INFINITY : ratio;
    }
    report(bad == 0, name, p.n, worst, 1, "close: worst |g-c|/bound");
    if (bad)
        printf("     first at %zu: cpu %.9g cuda %.9g (%zu outside)\n", first, c[first], g[first], bad);
    free(c);
    free(g);
}

/* ---- memory ---- */

static void test_memory(void)
{
    size_t n = 1000;
    float *v = randv(n, -1, 1);
    pair p = pair_from(v, n);
    expect_exact("upload/download", p);
    BOTH(tw_backend_zero(b, tw_tensor_at(V(b, p), 100), 300 * 4, &e_));
    BOTH(tw_backend_upload(b, tw_tensor_at(V(b, p), 700), v, 50 * 4, &e_));
    expect_exact("zero + upload at offsets", p);
    pair_free(&p);
    free(v);
}

/* ---- gemm ---- */

static void test_gemm_case(int ta, int tb, int m, int n, int k, float alpha, float beta, size_t off)
{
    float *a = randv(off + (size_t)m * k, -1, 1), *bm = randv(off + (size_t)k * n, -1, 1);
    float *c0 = randv((size_t)m * n, -1, 1);
    pair A = pair_from(a, off + (size_t)m * k), B = pair_from(bm, off + (size_t)k * n);
    pair Cm = pair_from(c0, (size_t)m * n);
    BOTH(tw_gemm(b, ta, tb, m, n, k, alpha, tw_tensor_at(V(b, A), off), tw_tensor_at(V(b, B), off),
                 beta, V(b, Cm), &e_));
    double *bound = calloc((size_t)m * n, sizeof *bound);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int q = 0; q < k; q++) {
                float av = ta ? a[off + (size_t)q * m + i] : a[off + (size_t)i * k + q];
                float bv = tb ? bm[off + (size_t)j * k + q] : bm[off + (size_t)q * n + j];
                s += fabs((double)av * bv);
            }
            double M = fabs(alpha) * s + fabs(beta * c0[(size_t)i * n + j]);
            bound[(size_t)i * n + j] = 2.0 * k * FLT_EPSILON * M;
        }
    char name[96];
    snprintf(name, sizeof name, "gemm ta=%d tb=%d %dx%dx%d off=%zu", ta, tb, m, n, k, off);
    expect_close(name, Cm, 0, 0, bound);
    free(bound);
    pair_free(&A);
    pair_free(&B);
    pair_free(&Cm);
    free(a);
    free(bm);
    free(c0);
}

static void test_gemm(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            test_gemm_case(ta, tb, 67, 45, 129, 0.7f, ta ? 0.3f : 0.0f, (size_t)(ta + tb) * 3);
    test_gemm_case(0, 0, 32, 500, 784, 1.0f, 0.0f, 0);  /* seed MLP layer 1 forward */
    test_gemm_case(1, 0, 784, 500, 32, 1.0f, 0.0f, 0);  /* its weight gradient */
    test_gemm_case(0, 1, 32, 784, 500, 1.0f, 0.0f, 0);  /* its input gradient */
    test_gemm_case(0, 0, 1960, 64, 800, 1.0f, 0.0f, 0); /* a conv layer as GEMM */
}

/* ---- bias ---- */

static void test_bias(int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    float *y = randv(n, -1, 1), *bias = randv((size_t)cols, -1, 1);
    pair Y = pair_from(y, n), Bi = pair_from(bias, (size_t)cols), D = pair_new((size_t)cols);
    char name[96];
    BOTH(tw_bias_add(b, V(b, Y), V(b, Bi), rows, cols, &e_));
    snprintf(name, sizeof name, "bias_add %dx%d", rows, cols);
    expect_exact(name, Y);
    BOTH(tw_bias_grad(b, V(b, D), V(b, Y), rows, cols, &e_));
    float *after = host(n);
    OK(tw_backend_download(CPU, after, V(CPU, Y), n * 4, &e_));
    double *bound = calloc((size_t)cols, sizeof *bound);
    for (size_t r = 0; r < (size_t)rows; r++)
        for (int c = 0; c < cols; c++)
            bound[c] += 1e-6 * fabs((double)after[r * cols + c]);
    snprintf(name, sizeof name, "bias_grad %dx%d", rows, cols);
    expect_close(name, D, 0, 0, bound);
    free(bound);
    free(after);
    pair_free(&Y);
    pair_free(&Bi);
    pair_free(&D);
    free(y);
    free(bias);
}

/* ---- element-wise ---- */

static void test_activations(void)
{
    static const char *names[] = {"none", "relu", "tanh", "sigmoid"};
    size_t n = 100003;
    float *x = randv(n, -6, 6), *dy = randv(n, -1, 1);
    pair X = pair_from(x, n), DY = pair_from(dy, n), Y = pair_new(n), DX = pair_new(n);
    for (int a = 0; a < 4; a++) {
        char name[64];
        BOTH(tw_act_fwd(b, (tw_activation)a, V(b, Y), V(b, X), n, &e_));
        snprintf(name, sizeof name, "act_fwd %s", names[a]);
        if (a == TW_ACT_TANH || a == TW_ACT_SIGMOID)
            expect_close(name, Y, 2e-6, 1e-9, NULL);
        else
            expect_exact(name, Y);
        /* bwd from the same y on both (the CPU's), so only the bwd formula is compared */
        float *y = host(n);
        OK(tw_backend_download(CPU, y, V(CPU, Y), n * 4, &e_));
        BOTH(tw_backend_upload(b, V(b, Y), y, n * 4, &e_));
        free(y);
        BOTH(tw_act_bwd(b, (tw_activation)a, V(b, DX), V(b, DY), V(b, Y), n, &e_));
        snprintf(name, sizeof name, "act_bwd %s", names[a]);
        expect_exact(name, DX);
    }
    BOTH(tw_act_fwd(b, TW_ACT_RELU, V(b, X), V(b, X), n, &e_));
    expect_exact("act_fwd relu in place", X);
    pair_free(&X);
    pair_free(&DY);
    pair_free(&Y);
    pair_free(&DX);
    free(x);
    free(dy);
}

static void test_dropout(void)
{
    static const float rates[] = {0.0f, 0.2f, 0.4f, 0.9f};
    size_t n = 262147;
    float *x = randv(n, -1, 1);
    pair X = pair_from(x, n), Y = pair_new(n);
    for (int i = 0; i < 4; i++) {
        char name[64];
        uint64_t seed = next_u64();
        BOTH(tw_dropout_fwd(b, V(b, Y), V(b, X), n, rates[i], seed, &e_));
        snprintf(name, sizeof name, "dropout_fwd rate %.1f", (double)rates[i]);
        expect_exact(name, Y);
        BOTH(tw_dropout_bwd(b, V(b, Y), V(b, X), n, rates[i], seed, &e_));
        snprintf(name, sizeof name, "dropout_bwd rate %.1f", (double)rates[i]);
        expect_exact(name, Y);
    }
    pair_free(&X);
    pair_free(&Y);
    free(x);
}

/* ---- windows ---- */

static tw_window window(int batch, int d, int h, int w, int c, int kd, int kh, int kw, int sd, int sh,
                        int sw, int same)
{
    tw_window win = {.batch = batch, .in_d = d, .in_h = h, .in_w = w, .in_c = c, .k_d = kd, .k_h = kh,
                     .k_w = kw, .s_d = sd, .s_h = sh, .s_w = sw};
    OK(tw_window_resolve(&win, same, &e_));
    return win;
}

static void test_window(const char *label, tw_window w)
{
    size_t nx = (size_t)w.batch * w.in_d * w.in_h * w.in_w * w.in_c;
    size_t rows = (size_t)w.batch * w.out_d * w.out_h * w.out_w;
    size_t ny = rows * w.in_c, ncols = ny * w.k_d * w.k_h * w.k_w;
    char name[128];
    float *x = randv(nx, -1, 1);
    for (size_t i = 0; i < nx; i += 2)
        x[i] = roundf(x[i] * 4) / 4; /* ties for the max-pool */
    float *cols = randv(ncols, -1, 1), *dy = randv(ny, -1, 1);
    pair X = pair_from(x, nx), Cl = pair_new(ncols), DX = pair_new(nx);
    pair Y = pair_new(ny), AM = pair_new(ny), DY = pair_from(dy, ny);
    BOTH(tw_im2col(b, &w, V(b, Cl), V(b, X), &e_));
    snprintf(name, sizeof name, "im2col %s", label);
    expect_exact(name, Cl);
    BOTH(tw_backend_upload(b, V(b, Cl), cols, ncols * 4, &e_));
    BOTH(tw_col2im(b, &w, V(b, DX), V(b, Cl), &e_));
    snprintf(name, sizeof name, "col2im %s", label);
    expect_exact(name, DX);
    BOTH(tw_maxpool_fwd(b, &w, V(b, Y), V(b, AM), V(b, X), &e_));
    snprintf(name, sizeof name, "maxpool_fwd %s", label);
    expect_exact(name, Y);
    snprintf(name, sizeof name, "maxpool_fwd argmax %s", label);
    expect_exact(name, AM);
    BOTH(tw_maxpool_bwd(b, &w, V(b, DX), V(b, DY), V(b, AM), &e_));
    snprintf(name, sizeof name, "maxpool_bwd %s", label);
    expect_exact(name, DX);
    BOTH(tw_avgpool_fwd(b, &w, V(b, Y), V(b, X), &e_)); /* the CPU's tap order and divisor: bit-identical */
    snprintf(name, sizeof name, "avgpool_fwd %s", label);
    expect_exact(name, Y);
    BOTH(tw_avgpool_bwd(b, &w, V(b, DX), V(b, DY), &e_));
    snprintf(name, sizeof name, "avgpool_bwd %s", label);
    expect_exact(name, DX);
    pair_free(&X);
    pair_free(&Cl);
    pair_free(&DX);
    pair_free(&Y);
    pair_free(&AM);
    pair_free(&DY);
    free(x);
    free(cols);
    free(dy);
}

static void test_windows(void)
{
    test_window("2d conv 5x5 SAME (fashion_cnn conv1)", window(8, 1, 28, 28, 1, 1, 5, 5, 1, 1, 1, 1));
    test_window("2d conv 5x5 SAME c=32", window(4, 1, 14, 14, 32, 1, 5, 5, 1, 1, 1, 1));
    test_window("2d pool 2x2/2 VALID", window(8, 1, 28, 28, 32, 1, 2, 2, 1, 2, 2, 0));
    test_window("2d pool 3x3/2 SAME (overlap, odd pad)", window(3, 1, 13, 10, 5, 1, 3, 3, 1, 2, 2, 1));
    test_window("3d 3x3x3/2 SAME", window(2, 7, 9, 8, 3, 3, 3, 3, 2, 2, 2, 1));
    test_window("3d 2x4x3 strides 1,3,2 VALID", window(2, 5, 11, 9, 4, 2, 4, 3, 1, 3, 2, 0));
}

/* add and copy_cols: per element, bit-identical; batch norm: its channel sums in CUB's order, within
 * float tolerance of the CPU's (both sum in double). */
static void test_joins_and_batch_norm(int rows, int channels)
{
    size_t n = (size_t)rows * channels;
    float *x = randv(n, -2, 3), *c = randv(n, -1, 1), *g = randv((size_t)channels, 0.5f, 1.5f);
    float *be = randv((size_t)channels, -1, 1), moving[2 * 512];
    for (int i = 0; i < 2 * channels; i++)
        moving[i] = i < channels ? 0.0f : 1.0f;
    pair X = pair_from(x, n), C = pair_from(c, n), Y = pair_new(n), G = pair_from(g, (size_t)channels);
    pair Be = pair_from(be, (size_t)channels), S = pair_new(2 * (size_t)channels), M = pair_from(moving, 2 * (size_t)channels);
    pair DX = pair_new(n), DG = pair_new((size_t)channels), DB = pair_new((size_t)channels);
    char name[96];
    BOTH(tw_add(b, V(b, Y), V(b, X), V(b, C), n, &e_));
    expect_exact("add", Y);
    BOTH(tw_copy_cols(b, V(b, Y), channels, channels / 2, V(b, X), channels, 0, rows, channels - channels / 2, 1, &e_));
    expect_exact("copy_cols accumulate", Y);
    tw_bn p = {.rows = rows, .channels = channels, .momentum = 0.9f, .epsilon = 1e-3f, .mode = TW_BN_TRAIN_UPDATE};
    BOTH(tw_bn_fwd(b, &p, V(b, Y), V(b, X), V(b, G), V(b, Be), V(b, S), V(b, M), &e_));
    snprintf(name, sizeof name, "bn_fwd train %dx%d", rows, channels);
    expect_close(name, Y, 1e-5, 1e-5, NULL);
    snprintf(name, sizeof name, "bn moving statistics %dx%d", rows, channels);
    expect_close(name, M, 1e-5, 1e-6, NULL);
    BOTH(tw_bn_bwd(b, &p, V(b, DX), V(b, DG), V(b, DB), V(b, C), V(b, X), V(b, G), V(b, S), &e_));
    snprintf(name, sizeof name, "bn_bwd dx %dx%d", rows, channels);
    expect_close(name, DX, 1e-4, 1e-5, NULL);
    snprintf(name, sizeof name, "bn_bwd dgamma %dx%d", rows, channels);
    expect_close(name, DG, 1e-4, 1e-4, NULL);
    p.mode = TW_BN_INFER;
    BOTH(tw_bn_fwd(b, &p, V(b, Y), V(b, X), V(b, G), V(b, Be), V(b, S), V(b, M), &e_));
    snprintf(name, sizeof name, "bn_fwd inference %dx%d", rows, channels);
    expect_close(name, Y, 1e-5, 1e-5, NULL);
    p.activation = TW_ACT_RELU;
    BOTH(tw_bn_fwd(b, &p, V(b, Y), V(b, X), V(b, G), V(b, Be), V(b, S), V(b, M), &e_));
    snprintf(name, sizeof name, "bn_fwd inference relu %dx%d", rows, channels);
    expect_close(name, Y, 1e-5, 1e-5, NULL);
    pair *all[] = {&X, &C, &Y, &G, &Be, &S, &M, &DX, &DG, &DB};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
    free(x);
    free(c);
    free(g);
    free(be);
}

/* ---- losses ---- */

static void test_xent(int rows, int classes, float spread, float smoothing)
{
    size_t n = (size_t)rows * classes;
    float *logits = randv(n, -spread, spread);
    int32_t *labels = malloc((size_t)rows * sizeof *labels);
    for (int r = 0; r < rows; r++)
        labels[r] = (int32_t)(next_u64() % (uint64_t)classes);
    pair L = pair_from(logits, n), LB = pair_from(labels, (size_t)rows);
    pair LOSS = pair_new((size_t)rows), P = pair_new(n), D = pair_new(n);
    char name[96];
    BOTH(tw_xent_fwd(b, V(b, LOSS), V(b, P), V(b, L), V(b, LB), rows, classes, smoothing, &e_));
    snprintf(name, sizeof name, "xent_fwd probs %dx%d spread %g smoothing %g", rows, classes, (double)spread,
             (double)smoothing);
    expect_close(name, P, 4e-6, 1e-9, NULL);
    double *bound = calloc((size_t)rows, sizeof *bound);
    float *cl = host((size_t)rows);
    OK(tw_backend_download(CPU, cl, V(CPU, LOSS), (size_t)rows * 4, &e_));
    for (int r = 0; r < rows; r++)
        bound[r] = 4e-6 * (fabs((double)cl[r]) + 1);
    snprintf(name, sizeof name, "xent_fwd loss %dx%d spread %g smoothing %g", rows, classes, (double)spread,
             (double)smoothing);
    expect_close(name, LOSS, 0, 0, bound);
    /* bwd from the CPU's probs on both */
    float *p = host(n);
    OK(tw_backend_download(CPU, p, V(CPU, P), n * 4, &e_));
    BOTH(tw_backend_upload(b, V(b, P), p, n * 4, &e_));
    BOTH(tw_xent_bwd(b, V(b, D), V(b, P), V(b, LB), rows, classes, 1.0f / (float)rows, smoothing, &e_));
    snprintf(name, sizeof name, "xent_bwd %dx%d", rows, classes);
    expect_exact(name, D);
    BOTH(tw_xent_bwd(b, V(b, P), V(b, P), V(b, LB), rows, classes, 0.5f, smoothing, &e_));
    snprintf(name, sizeof name, "xent_bwd in place %dx%d", rows, classes);
    expect_exact(name, P);
    free(p);
    free(cl);
    free(bound);
    pair_free(&L);
    pair_free(&LB);
    pair_free(&LOSS);
    pair_free(&P);
    pair_free(&D);
    free(logits);
    free(labels);
}

/* A label outside [0, classes): the CPU fails at once; the CUDA backend reports it at the next wait
 * (download or sync) and goes on working afterwards. */
static void test_bad_label(void)
{
    int rows = 8, classes = 10;
    float *logits = randv((size_t)rows * classes, -1, 1);
    int32_t labels[8] = {1, 2, 3, 12, 4, 5, 6, 7};
    pair L = pair_from(logits, (size_t)rows * classes), LB = pair_from(labels, (size_t)rows);
    pair LOSS = pair_new((size_t)rows), P = pair_new((size_t)rows * classes);
    tw_error e;
    tw_error_clear(&e);
    tw_status s = tw_xent_fwd(GPU, V(GPU, LOSS), V(GPU, P), V(GPU, L), V(GPU, LB), rows, classes, 0.0f, &e);
    if (s == TW_OK)
        s = tw_backend_sync(GPU, &e);
    int ok = s == TW_ERR_INVALID && strstr(e.message, "label 12 of row 3") != NULL;
    report(ok, "xent_fwd bad label reported by sync", 1, ok ? 0 : 1, 0, "error");
    if (!ok)
        printf("     got status %d: %s\n", (int)s, e.message);
    tw_error_clear(&e);
    s = tw_backend_sync(GPU, &e);
    report(s == TW_OK, "sync after the bad label is clean", 1, s == TW_OK ? 0 : 1, 0, "error");
    pair_free(&L);
    pair_free(&LB);
    pair_free(&LOSS);
    pair_free(&P);
    free(logits);
}

static void test_mse(int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    float *pred = randv(n, -2, 2), *target = randv(n, -2, 2);
    pair PR = pair_from(pred, n), T = pair_from(target, n), LOSS = pair_new((size_t)rows),
         D = pair_new(n);
    char name[64];
    BOTH(tw_mse_fwd(b, V(b, LOSS), V(b, PR), V(b, T), rows, cols, &e_));
    snprintf(name, sizeof name, "mse_fwd %dx%d", rows, cols);
    expect_exact(name, LOSS);
    BOTH(tw_mse_bwd(b, V(b, D), V(b, PR), V(b, T), n, 1.0f / (float)n, &e_));
    snprintf(name, sizeof name, "mse_bwd %dx%d", rows, cols);
    expect_exact(name, D);
    pair_free(&PR);
    pair_free(&T);
    pair_free(&LOSS);
    pair_free(&D);
    free(pred);
    free(target);
}

static void test_sum_squares(size_t n)
{
    float *x = randv(n, -3, 3);
    pair X = pair_from(x, n), OUT = pair_new(1);
    BOTH(tw_sum_squares(b, V(b, OUT), V(b, X), n, &e_));
    char name[64];
    snprintf(name, sizeof name, "sum_squares n=%zu", n);
    expect_close(name, OUT, 2.4e-7, 0, NULL);
    pair_free(&X);
    pair_free(&OUT);
    free(x);
}

/* ---- update ---- */

static void test_update(tw_optimizer_kind kind, int ema, float l2)
{
    static const char *names[] = {"sgd", "momentum", "adam"};
    size_t n = 397731; /* the seed MLP's parameter count */
    float *w = randv(n, -0.5f, 0.5f), *g = randv(n, -0.1f, 0.1f);
    float *s1 = randv(n, -0.01f, 0.01f), *s2 = randv(n, 0, 1e-3f), *e = randv(n, -0.5f, 0.5f);
    pair W = pair_from(w, n), G = pair_from(g, n), S1 = pair_from(s1, n), S2 = pair_from(s2, n),
         E = pair_from(e, n);
    tw_update u = {.kind = kind, .lr = 0.01f, .momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f,
                   .epsilon = 1e-8f, .l2 = l2, .l2_count = n / 3, .ema = ema, .ema_decay = 0.99f};
    for (int step = 1; step <= 3; step++) {
        double b1t = pow(u.beta1, step), b2t = pow(u.beta2, step);
        u.adam_alpha = (float)(u.lr * sqrt(1.0 - b2t) / (1.0 - b1t));
        BOTH(tw_update_step(b, &u, V(b, W), V(b, G), V(b, S1), V(b, S2), V(b, E), n, &e_));
    }
    char name[96];
    snprintf(name, sizeof name, "update %s l2=%g ema=%d (3 steps): params", names[kind], (double)l2,
             ema);
    expect_exact(name, W);
    if (kind != TW_OPT_SGD) {
        snprintf(name, sizeof name, "update %s: slot1", names[kind]);
        expect_exact(name, S1);
    }
    if (kind == TW_OPT_ADAM) {
        snprintf(name, sizeof name, "update %s: slot2", names[kind]);
        expect_exact(name, S2);
    }
    if (ema) {
        snprintf(name, sizeof name, "update %s: ema", names[kind]);
        expect_exact(name, E);
    }
    pair_free(&W);
    pair_free(&G);
    pair_free(&S1);
    pair_free(&S2);
    pair_free(&E);
    free(w);
    free(g);
    free(s1);
    free(s2);
    free(e);
}

/* ---- all-reduce ---- */

static void test_allreduce(int gpus)
{
    size_t n = 397731;
    float *v = randv(n, -1, 1);
    pair P = pair_from(v, n);
    tw_tensor tc = V(CPU, P), tg = V(GPU, P);
    OK(tw_backend_allreduce_avg(&CPU, 1, &tc, n, &e_));
    OK(tw_backend_allreduce_avg(&GPU, 1, &tg, n, &e_));
    expect_exact("allreduce_avg 1 tower", P);
    pair_free(&P);
    if (gpus < 2) {
        printf("skip allreduce_avg across GPUs: this machine has %d GPU\n", gpus);
        free(v);
        return;
    }
    enum { MAX = 8 };
    int towers = gpus < MAX ? gpus : MAX;
    tw_backend *cb[MAX], *gb[MAX];
    tw_buffer *cbuf[MAX], *gbuf[MAX];
    tw_tensor ct[MAX], gt[MAX];
    float *vals[MAX];
    for (int t = 0; t < towers; t++) {
        OK(tw_backend_create("cpu", 0, &cb[t], &e_));
        OK(tw_backend_create("cuda", t, &gb[t], &e_));
        vals[t] = randv(n, -1, 1);
        OK(tw_backend_alloc(cb[t], n * 4, &cbuf[t], &e_));
        OK(tw_backend_alloc(gb[t], n * 4, &gbuf[t], &e_));
        OK(tw_backend_upload(cb[t], tw_tensor_of(cbuf[t]), vals[t], n * 4, &e_));
        OK(tw_backend_upload(gb[t], tw_tensor_of(gbuf[t]), vals[t], n * 4, &e_));
        ct[t] = tw_tensor_of(cbuf[t]);
        gt[t] = tw_tensor_of(gbuf[t]);
    }
    for (int rep = 0; rep < 2; rep++) { /* the second call reuses the NCCL communicators */
        OK(tw_backend_allreduce_avg(cb, towers, ct, n, &e_));
        OK(tw_backend_allreduce_avg(gb, towers, gt, n, &e_));
    }
    float *ref = host(n), *got = host(n), *first = host(n);
    OK(tw_backend_download(cb[0], ref, ct[0], n * 4, &e_));
    double worst = 0;
    size_t bad = 0, same = 1;
    for (int t = 0; t < towers; t++) {
        OK(tw_backend_download(gb[t], got, gt[t], n * 4, &e_));
        if (t == 0)
            memcpy(first, got, n * 4);
        else if (memcmp(first, got, n * 4) != 0)
            same = 0;
        for (size_t i = 0; i < n; i++) {
            double bound = 4.8e-7 * fabs((double)ref[i]) + 1e-30, d = fabs((double)got[i] - ref[i]);
            if (!(d <= bound))
                bad++;
            if (d / bound > worst)
                worst = d / bound;
        }
    }
    char name[64];
    snprintf(name, sizeof name, "allreduce_avg %d GPUs (twice) vs cpu", towers);
    report(bad == 0, name, n, worst, 1, "close: worst |g-c|/bound");
    snprintf(name, sizeof name, "allreduce_avg %d GPUs: identical on every GPU", towers);
    report(same, name, n, same ? 0 : 1, 0, "exact");
    for (int t = 0; t < towers; t++) {
        tw_backend_free(cb[t], cbuf[t]);
        tw_backend_free(gb[t], gbuf[t]);
        tw_backend_destroy(cb[t]);
        tw_backend_destroy(gb[t]);
        free(vals[t]);
    }
    free(ref);
    free(got);
    free(first);
    free(v);
}

int main(void)
{
    /* TW_PARITY_OTHER=cpu compares the CPU backend with itself: a check of this harness on machines
     * without a GPU (every comparison must then pass). */
    const char *other = getenv("TW_PARITY_OTHER");
    other = other && *other ? other : "cuda";
    int gpus = tw_gpu_devices_or_skip(other);
    if (gpus < 1) {
        return TW_GPU_SKIP;
    }
    OK(tw_backend_create("cpu", 0, &CPU, &e_));
    OK(tw_backend_create(other, 0, &GPU, &e_));
    printf("parity of %s against %s (%d GPU%s)\n", tw_backend_name(GPU), tw_backend_name(CPU), gpus,
           gpus == 1 ? "" : "s");
    test_memory();
    test_gemm();
    test_bias(100, 500);
    test_bias(1000, 37);
    test_bias(78400, 32); /* fashion_cnn conv1's bias gradient: [100*28*28, 32] */
    test_bias(3, 1025);
    test_activations();
    test_dropout();
    test_windows();
    test_xent(100, 10, 5, 0.0f);
    test_xent(64, 1000, 80, 0.0f);
    test_xent(7, 3, 0.001f, 0.0f);
    test_xent(100, 10, 5, 0.1f); /* label smoothing: its loss sums the row once more */
    test_joins_and_batch_norm(100 * 14 * 14, 32); /* a CNN's batch norm: every position a row */
    test_joins_and_batch_norm(37, 500);
    if (strcmp(other, "cuda") == 0)
        test_bad_label();
    test_mse(100, 10);
    test_mse(33, 784);
    test_sum_squares(1);
    test_sum_squares(397731);
    test_sum_squares(3000017);
    for (int k = 0; k < 3; k++) {
        test_update((tw_optimizer_kind)k, 1, 1e-4f);
        test_update((tw_optimizer_kind)k, 0, 0.0f);
    }
    test_allreduce(strcmp(other, "cuda") == 0 ? gpus : 1);
    OK(tw_backend_sync(GPU, &e_));
    tw_backend_destroy(GPU);
    tw_backend_destroy(CPU);
    printf("%s: %d of %d checks passed\n", failures ? "FAILED" : "PASSED", checks - failures, checks);
    return failures ? 1 : 0;
}
