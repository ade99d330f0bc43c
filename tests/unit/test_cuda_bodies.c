/* test_cuda_bodies.c — the per-output functions of the CUDA kernels (kernels/cuda/cuda_bodies.h), run on the
 * host against the CPU backend, on any machine: im2col, col2im, max-pool fwd/bwd and the fused update
 * bit for bit, bias_grad's chunked first pass summed up close to the CPU's column sums. A kernel is a
 * grid-stride loop around one of these functions, so this checks the GPU's index arithmetic and
 * summation order without a GPU (tests/gpu/ checks the kernels themselves). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cuda/cuda_bodies.h"
#include "backend.h"

static tw_backend *B;
static tw_error E;

#define OK(call)                                                                                   \
    do {                                                                                           \
        tw_error_clear(&E);                                                                        \
        if ((call) != TW_OK)                                                                       \
            fail_msg("%s failed: %s", #call, E.message);                                           \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float frand(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static float *randv(size_t n)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

static tw_buffer *dev_from(const void *v, size_t n)
{
    tw_buffer *b = NULL;
    OK(tw_backend_alloc(B, n * 4, &b, &E));
    OK(tw_backend_upload(B, tw_tensor_of(b), v, n * 4, &E));
    return b;
}

static void dev_read(void *v, tw_buffer *b, size_t n)
{
    OK(tw_backend_download(B, v, tw_tensor_of(b), n * 4, &E));
}

/* One window: the four window ops through the CPU backend and through the bodies. */
static void check_window(int batch, int d, int h, int w, int c, int kd, int kh, int kw, int sd, int sh,
                         int sw, int same)
{
    tw_window win = {.batch = batch, .in_d = d, .in_h = h, .in_w = w, .in_c = c, .k_d = kd, .k_h = kh,
                     .k_w = kw, .s_d = sd, .s_h = sh, .s_w = sw};
    OK(tw_window_resolve(&win, same, &E));
    size_t nx = (size_t)batch * d * h * w * c;
    size_t ny = (size_t)batch * win.out_d * win.out_h * win.out_w * c;
    size_t ncols = ny * kd * kh * kw;
    float *x = randv(nx), *cols = randv(ncols), *dy = randv(ny);
    for (size_t i = 0; i < nx; i += 2)
        x[i] = roundf(x[i] * 4) / 4; /* ties */
    size_t most = ncols > nx ? ncols : nx; /* ny <= ncols */
    float *ref = malloc(most * sizeof *ref), *got = malloc(most * sizeof *got);
    int32_t *aref = malloc(ny * sizeof *aref), *agot = malloc(ny * sizeof *agot);
    assert_true(ref && got && aref && agot);
    tw_buffer *X = dev_from(x, nx), *C = dev_from(cols, ncols), *DY = dev_from(dy, ny);
    tw_buffer *Y = dev_from(dy, ny), *AM = dev_from(dy, ny), *DX = dev_from(x, nx);

    OK(tw_im2col(B, &win, tw_tensor_of(C), tw_tensor_of(X), &E));
    dev_read(ref, C, ncols);
    for (size_t i = 0; i < ncols; i++)
        got[i] = tw_cuda_im2col_at(&win, x, i);
    assert_memory_equal(ref, got, ncols * sizeof *ref);

    OK(tw_backend_upload(B, tw_tensor_of(C), cols, ncols * 4, &E));
    OK(tw_col2im(B, &win, tw_tensor_of(DX), tw_tensor_of(C), &E));
    dev_read(ref, DX, nx);
    for (size_t i = 0; i < nx; i++)
        got[i] = tw_cuda_col2im_at(&win, cols, i);
    assert_memory_equal(ref, got, nx * sizeof *ref);

    OK(tw_maxpool_fwd(B, &win, tw_tensor_of(Y), tw_tensor_of(AM), tw_tensor_of(X), &E));
    dev_read(ref, Y, ny);
    dev_read(aref, AM, ny);
    for (size_t j = 0; j < ny; j++)
        tw_cuda_maxpool_at(&win, x, j, &got[j], &agot[j]);
    assert_memory_equal(ref, got, ny * sizeof *ref);
    assert_memory_equal(aref, agot, ny * sizeof *aref);

    OK(tw_maxpool_bwd(B, &win, tw_tensor_of(DX), tw_tensor_of(DY), tw_tensor_of(AM), &E));
    dev_read(ref, DX, nx);
    for (size_t i = 0; i < nx; i++)
        got[i] = tw_cuda_maxpool_grad_at(&win, dy, aref, i);
    assert_memory_equal(ref, got, nx * sizeof *ref);

    tw_backend_free(B, X);
    tw_backend_free(B, C);
    tw_backend_free(B, DY);
    tw_backend_free(B, Y);
    tw_backend_free(B, AM);
    tw_backend_free(B, DX);
    free(x);
    free(cols);
    free(dy);
    free(ref);
    free(got);
    free(aref);
    free(agot);
}

static void test_windows(void **state)
{
    (void)state;
    check_window(3, 1, 28, 28, 1, 1, 5, 5, 1, 1, 1, 1);   /* conv 5x5 SAME */
    check_window(2, 1, 14, 14, 8, 1, 5, 5, 1, 1, 1, 1);   /* conv 5x5 SAME, channels */
    check_window(4, 1, 28, 28, 3, 1, 2, 2, 1, 2, 2, 0);   /* pool 2x2/2 */
    check_window(3, 1, 13, 10, 5, 1, 3, 3, 1, 2, 2, 1);   /* pool 3x3/2 SAME: overlap, odd padding */
    check_window(2, 7, 9, 8, 3, 3, 3, 3, 2, 2, 2, 1);     /* 3-D 3x3x3/2 SAME */
    check_window(2, 5, 11, 9, 4, 2, 4, 3, 1, 3, 2, 0);    /* 3-D mixed strides VALID */
    check_window(1, 1, 7, 7, 2, 1, 7, 7, 1, 3, 3, 1);     /* kernel as large as the input, SAME */
    check_window(2, 1, 9, 9, 1, 1, 3, 3, 1, 4, 4, 0);     /* stride larger than the kernel */
}

static void check_update(tw_optimizer_kind kind, int ema, float l2)
{
    size_t n = 5003;
    float *w = randv(n), *g = randv(n), *s1 = randv(n), *s2 = randv(n), *e = randv(n);
    for (size_t i = 0; i < n; i++)
        s2[i] = fabsf(s2[i]) * 1e-3f;
    tw_buffer *W = dev_from(w, n), *G = dev_from(g, n), *S1 = dev_from(s1, n), *S2 = dev_from(s2, n),
              *EM = dev_from(e, n);
    tw_update u = {.kind = kind, .lr = 0.01f, .momentum = 0.9f, .adam_alpha = 0.0031f, .beta1 = 0.9f,
                   .beta2 = 0.999f, .epsilon = 1e-8f, .l2 = l2, .l2_count = n / 3, .ema = ema,
                   .ema_decay = 0.99f};
    for (int step = 0; step < 2; step++) {
        OK(tw_update_step(B, &u, tw_tensor_of(W), tw_tensor_of(G), tw_tensor_of(S1), tw_tensor_of(S2),
                          tw_tensor_of(EM), n, &E));
        for (size_t i = 0; i < n; i++)
            tw_cuda_update_at(&u, w, g, kind != TW_OPT_SGD ? s1 : NULL,
                              kind == TW_OPT_ADAM ? s2 : NULL, ema ? e : NULL, i);
    }
    float *ref = malloc(n * sizeof *ref);
    assert_non_null(ref);
    dev_read(ref, W, n);
    assert_memory_equal(ref, w, n * sizeof *w);
    if (kind != TW_OPT_SGD) {
        dev_read(ref, S1, n);
        assert_memory_equal(ref, s1, n * sizeof *s1);
    }
    if (kind == TW_OPT_ADAM) {
        dev_read(ref, S2, n);
        assert_memory_equal(ref, s2, n * sizeof *s2);
    }
    if (ema) {
        dev_read(ref, EM, n);
        assert_memory_equal(ref, e, n * sizeof *e);
    }
    tw_backend_free(B, W);
    tw_backend_free(B, G);
    tw_backend_free(B, S1);
    tw_backend_free(B, S2);
    tw_backend_free(B, EM);
    free(w);
    free(g);
    free(s1);
    free(s2);
    free(e);
    free(ref);
}

static void test_update(void **state)
{
    (void)state;
    for (int k = 0; k < 3; k++) {
        check_update((tw_optimizer_kind)k, 1, 1e-3f);
        check_update((tw_optimizer_kind)k, 0, 0.0f);
    }
}

/* The chunk split of tw_cuda_bias_grad (cuda_kernels.cu: chunks of >= 32 rows, at most 1024) covers
 * every row once; the chunk sums, added up, are the column sums within rounding. */
static void check_colsum(int rows, int cols)
{
    int chunks = (rows + 31) / 32;
    if (chunks > 1024)
        chunks = 1024;
    int chunk_rows = (rows + chunks - 1) / chunks;
    assert_true((size_t)chunks * (size_t)chunk_rows >= (size_t)rows);
    size_t n = (size_t)rows * cols;
    float *dy = randv(n), *ref = malloc((size_t)cols * sizeof *ref);
    assert_non_null(ref);
    tw_buffer *DY = dev_from(dy, n), *D = dev_from(dy, (size_t)cols);
    OK(tw_bias_grad(B, tw_tensor_of(D), tw_tensor_of(DY), rows, cols, &E));
    dev_read(ref, D, (size_t)cols);
    for (int c = 0; c < cols; c++) {
        double s = 0, mag = 0;
        for (int j = 0; j < chunks; j++)
            s += tw_cuda_colsum_chunk(dy, rows, cols, c, chunk_rows, j);
        for (int r = 0; r < rows; r++)
            mag += fabs(dy[(size_t)r * cols + c]);
        assert_true(fabs(s - ref[c]) <= 1e-6 * mag);
    }
    tw_backend_free(B, DY);
    tw_backend_free(B, D);
    free(dy);
    free(ref);
}

static void test_colsum(void **state)
{
    (void)state;
    check_colsum(1, 7);
    check_colsum(100, 10);
    check_colsum(1000, 37);
    check_colsum(78400, 32);
    check_colsum(33000, 3);
}

static int setup(void **state)
{
    (void)state;
    return tw_backend_create("cpu", 0, &B, &E) == TW_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tw_backend_destroy(B);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_update),
        cmocka_unit_test(test_colsum),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
