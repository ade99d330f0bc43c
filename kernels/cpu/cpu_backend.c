/* cpu_backend.c — the CPU backend: every operation of backend.h on host memory.
 *
 * Owns: host buffers (aligned_alloc, 64-byte aligned), the loops around elementwise.h's per-element
 * formulas, the window walks of im2col/col2im/max-pool, the row reductions of the losses, the fused
 * update, the host all-reduce, and the two in one pass over the towers' shared state (update_mean). GEMM is a tuned library's (cpu_gemm.c: oneDNN's, else OpenBLAS's);
 * direct convolutions are oneDNN's (cpu_conv.c says why); the other loops are written here because no
 * library has them with TensorFlow's formulas and a summation order the CUDA backend can match. Every
 * sum runs in a fixed order in float (sum_squares in double), so results do not depend on thread timing.
 *
 * OpenBLAS maps its GEMM buffers on its first call and, when that mmap fails (an address-space limit,
 * RLIMIT_AS, already spent on the data), spins forever instead of failing. So cpu_create first checks
 * that the room is there (a PROT_NONE reservation of OPENBLAS_ROOM, given back at once: a clear
 * TW_ERR_NOMEM instead of the hang) and then makes that first call, on a WARM_UP-sized product, while it is.
 *
 * Threads: an instance (a tower) owns its share of the cores as a pool (tower_pool.h; none with a share
 * of one), over which it cuts its GEMMs too small for oneDNN's own team (cpu_gemm.c) and its updates
 * (every value's result is independent of the cut, so the bits do not depend on the share).
 *
 * Does not own: argument checks (the wrappers in backend.c make them before an op runs, so the ops
 * assume valid views, sizes and windows) or the threads of OpenBLAS and oneDNN. It is the
 * reference the CUDA backend is tested against: im2col and col2im stay for that (the CUDA backend
 * convolves through them) while the engine convolves here through conv_* (summation order differs from
 * the im2col + gemm route only as two GEMM orders do). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "cpu_backend.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_conv.h"
#include "cpu_gemm.h"

/* One instance (a tower): its oneDNN state for the conv_* ops, and its share of the cores as threads
 * (tw_cpu_threads; none of its own with a share of one) that its small GEMMs and its updates are cut
 * over. Owns both. */
typedef struct {
    tw_cpu_conv *conv;
    tw_tower_pool *pool;
} cpu_ctx;

static tw_tower_pool *pool_of(void *ctx) { return ((cpu_ctx *)ctx)->pool; }

/* Host address of a view. */
static float *f32(tw_tensor t) { return (float *)(void *)((char *)t.buf->data + t.offset); }

static int32_t *i32(tw_tensor t) { return (int32_t *)(void *)((char *)t.buf->data + t.offset); }

/* ---- lifecycle and memory ---- */

/* Each of `concurrent` towers gets an equal share of the cores for OpenBLAS and oneDNN (at least one);
 * returns that share. */
static int cpu_plan(int concurrent)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long share = cores > concurrent ? cores / concurrent : 1;
    openblas_set_num_threads((int)share);
    tw_cpu_gemm_threads((int)share);
    tw_cpu_conv_threads((int)share);
    return (int)share;
}

enum {
    OPENBLAS_ROOM = 256 << 20, /* bytes: OpenBLAS's GEMM buffer (one mmap of 128 MiB in Debian's build) and slack */
    WARM_UP = 256,             /* the first product's size: past OpenBLAS's small-matrix path, which maps nothing */
};

/* Makes OpenBLAS map its buffers now, after checking there is address space for them (see above). */
static tw_status openblas_warm_up(tw_error *err)
{
    void *room = mmap(NULL, OPENBLAS_ROOM, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (room == MAP_FAILED)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1,
                            "cpu: no room left for OpenBLAS's buffers (%d MiB of address space; an address-space "
                            "limit, ulimit -v, is too low for this run: lower input_memory_bytes or raise the limit)",
                            OPENBLAS_ROOM >> 20);
    munmap(room, OPENBLAS_ROOM);
    float *m = calloc(3 * WARM_UP * WARM_UP, sizeof *m);
    if (!m)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: out of memory");
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, WARM_UP, WARM_UP, WARM_UP, 1.0f, m, WARM_UP,
                m + WARM_UP * WARM_UP, WARM_UP, 0.0f, m + 2 * WARM_UP * WARM_UP, WARM_UP);
    free(m);
    return TW_OK;
}

static void cpu_destroy(void *ctx)
{
    cpu_ctx *c = ctx;
    if (!c)
        return;
    tw_tower_pool_destroy(c->pool);
    tw_cpu_conv_destroy(c->conv);
    free(c);
}

static tw_status cpu_create(int device, void **ctx, char *name, size_t name_size, tw_error *err)
{
    (void)device;
    *ctx = NULL;
    TW_TRY(openblas_warm_up(err));
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: out of memory");
    int threads = tw_cpu_threads() < TW_TOWER_POOL_MAX_JOBS ? tw_cpu_threads() : TW_TOWER_POOL_MAX_JOBS;
    tw_status s = tw_cpu_conv_create(&c->conv, err);
    if (s == TW_OK && threads > 1)
        s = tw_tower_pool_create(threads, &c->pool, err);
    if (s != TW_OK) {
        cpu_destroy(c);
        return s;
    }
    *ctx = c;
    snprintf(name, name_size, "cpu");
    return TW_OK;
}

enum { ALIGN = 64 };

static tw_status cpu_alloc(void *ctx, size_t bytes, tw_buffer **out, tw_error *err)
{
    (void)ctx;
    if (bytes > SIZE_MAX - ALIGN)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: cannot allocate %zu bytes", bytes);
    tw_buffer *b = malloc(sizeof *b);
    /* aligned_alloc wants a multiple of the alignment */
    void *data = b ? aligned_alloc(ALIGN, (bytes + ALIGN - 1) / ALIGN * ALIGN) : NULL;
    if (!data) {
        free(b);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: cannot allocate %zu bytes", bytes);
    }
    b->bytes = bytes;
    b->data = data;
    *out = b;
    return TW_OK;
}

static void cpu_free(void *ctx, tw_buffer *b)
{
    (void)ctx;
    free(b->data);
    free(b);
}

static tw_status cpu_upload(void *ctx, tw_tensor dst, const void *src, size_t bytes, tw_error *err)
{
    (void)ctx;
    (void)err;
    memcpy((char *)dst.buf->data + dst.offset, src, bytes);
    return TW_OK;
}

static tw_status cpu_download(void *ctx, void *dst, tw_tensor src, size_t bytes, tw_error *err)
{
    (void)ctx;
    (void)err;
    memcpy(dst, (const char *)src.buf->data + src.offset, bytes);
    return TW_OK;
}

static tw_status cpu_zero(void *ctx, tw_tensor t, size_t bytes, tw_error *err)
{
    (void)ctx;
    (void)err;
    memset((char *)t.buf->data + t.offset, 0, bytes);
    return TW_OK;
}

/* ---- dense ---- */

/* c[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta c; a stored [m, k] or [k, m] (trans_a), b stored
 * [k, n] or [n, k] (trans_b); row-major, packed. beta 0 overwrites c (BLAS never reads it then). */
static tw_status cpu_gemm(void *ctx, int trans_a, int trans_b, int m, int n, int k, float alpha,
                          tw_tensor a, tw_tensor b, float beta, tw_tensor c, tw_error *err)
{
    return tw_cpu_sgemm(pool_of(ctx), trans_a, trans_b, m, n, k, alpha, f32(a), f32(b), beta, f32(c), err);
}

/* y[rows, cols] += bias[cols]. */
static tw_status cpu_bias_add(void *ctx, tw_tensor y, tw_tensor bias, int rows, int cols,
                              tw_error *err)
{
    (void)ctx;
    (void)err;
    float *py = f32(y);
    const float *pb = f32(bias);
    for (size_t r = 0; r < (size_t)rows; r++, py += cols)
        for (int c = 0; c < cols; c++)
            py[c] += pb[c];
    return TW_OK;
}

/* dbias[cols] = sum over r = 0..rows-1 (in that order, float) of dy[r, cols]. */
static tw_status cpu_bias_grad(void *ctx, tw_tensor dbias, tw_tensor dy, int rows, int cols,
                               tw_error *err)
{
    (void)ctx;
    (void)err;
    float *pd = f32(dbias);
    const float *py = f32(dy);
    memset(pd, 0, (size_t)cols * sizeof *pd);
    for (size_t r = 0; r < (size_t)rows; r++, py += cols)
        for (int c = 0; c < cols; c++)
            pd[c] += py[c];
    return TW_OK;
}

/* ---- element-wise ---- */

/* for (i = 0; i < n; i++) the statement given. */
#define ACT_LOOP(...)                                                                                \
    do {                                                                                             \
        for (size_t i = 0; i < n; i++)                                                               \
            __VA_ARGS__;                                                                             \
    } while (0)

/* y[n] = act(x[n]): one loop per activation, so each vectorises (the same formula per element). */
static inline void act_fwd_loop(tw_activation a, float *y, const float *x, size_t n)
{
    switch (a) {
    case TW_ACT_RELU: ACT_LOOP(y[i] = tw_activate(TW_ACT_RELU, x[i])); break;
    case TW_ACT_TANH: ACT_LOOP(y[i] = tw_activate(TW_ACT_TANH, x[i])); break;
    case TW_ACT_SIGMOID: ACT_LOOP(y[i] = tw_activate(TW_ACT_SIGMOID, x[i])); break;
    default: ACT_LOOP(y[i] = tw_activate(TW_ACT_NONE, x[i])); break;
    }
}

/* dx[n] = act'(y[n]) dy[n], likewise. */
static inline void act_bwd_loop(tw_activation a, float *dx, const float *dy, const float *y, size_t n)
{
    switch (a) {
    case TW_ACT_RELU: ACT_LOOP(dx[i] = tw_activate_grad(TW_ACT_RELU, dy[i], y[i])); break;
    case TW_ACT_TANH: ACT_LOOP(dx[i] = tw_activate_grad(TW_ACT_TANH, dy[i], y[i])); break;
    case TW_ACT_SIGMOID: ACT_LOOP(dx[i] = tw_activate_grad(TW_ACT_SIGMOID, dy[i], y[i])); break;
    default: ACT_LOOP(dx[i] = tw_activate_grad(TW_ACT_NONE, dy[i], y[i])); break;
    }
}

/* The ops below run in place (y = x, dx = dy) in every layer. GCC's run-time overlap check treats an
 * exact alias as an overlap and falls back to its scalar loop (ReLU's backward was 9% of the seed MLP's
 * step so, its branch mispredicted), so the in-place case passes one pointer for both: the same address
 * read and written at i is no dependence, and the loop vectorises. */

/* y[n] = act(x[n]); y may be x. */
static tw_status cpu_act_fwd(void *ctx, tw_activation a, tw_tensor y, tw_tensor x, size_t n,
                             tw_error *err)
{
    (void)ctx;
    (void)err;
    float *py = f32(y);
    if (py == f32(x))
        act_fwd_loop(a, py, py, n);
    else
        act_fwd_loop(a, py, f32(x), n);
    return TW_OK;
}

/* dx[n] = act'(y[n]) dy[n]; dx may be dy. */
static tw_status cpu_act_bwd(void *ctx, tw_activation a, tw_tensor dx, tw_tensor dy, tw_tensor y,
                             size_t n, tw_error *err)
{
    (void)ctx;
    (void)err;
    float *pdx = f32(dx);
    if (pdx == f32(dy))
        act_bwd_loop(a, pdx, pdx, f32(y), n);
    else
        act_bwd_loop(a, pdx, f32(dy), f32(y), n);
    return TW_OK;
}

/* out[n] = in[n] * the dropout multiplier of element i of draw `seed`: the same mask both ways. */
static void dropout_apply(float *out, const float *in, size_t n, float rate, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] * tw_dropout_scale(seed, i, rate);
}

static tw_status cpu_dropout_fwd(void *ctx, tw_tensor y, tw_tensor x, size_t n, float rate,
                                 uint64_t seed, tw_error *err)
{
    (void)ctx;
    (void)err;
    dropout_apply(f32(y), f32(x), n, rate, seed);
    return TW_OK;
}

static tw_status cpu_dropout_bwd(void *ctx, tw_tensor dx, tw_tensor dy, size_t n, float rate,
                                 uint64_t seed, tw_error *err)
{
    (void)ctx;
    (void)err;
    dropout_apply(f32(dx), f32(dy), n, rate, seed);
    return TW_OK;
}

/* ---- windows (convolution and pooling), NDHWC; 2-D is depth 1 ---- */

/* Output positions [batch, out_d, out_h, out_w] and kernel taps [k_d, k_h, k_w] of a window. */
static size_t window_rows(const tw_window *w)
{
    return (size_t)w->batch * w->out_d * w->out_h * w->out_w;
}

static size_t window_taps(const tw_window *w) { return (size_t)w->k_d * w->k_h * w->k_w; }

static size_t window_inputs(const tw_window *w)
{
    return (size_t)w->batch * w->in_d * w->in_h * w->in_w * w->in_c;
}

/* offs[taps]: for output position `row` (flat over [batch, out_d, out_h, out_w]), the flat index into
 * x[batch, in_d, in_h, in_w, in_c] of channel 0 under each tap (kd, kh, kw), taps in row-major order;
 * -1 where the tap lies in the padding. This is the one place that knows the window geometry. */
static void row_taps(const tw_window *w, size_t row, ptrdiff_t *offs)
{
    int ow = (int)(row % (size_t)w->out_w);
    row /= (size_t)w->out_w;
    int oh = (int)(row % (size_t)w->out_h);
    row /= (size_t)w->out_h;
    int od = (int)(row % (size_t)w->out_d);
    size_t b = row / (size_t)w->out_d;
    for (int kd = 0; kd < w->k_d; kd++) {
        int id = od * w->s_d - w->pad_d + kd;
        for (int kh = 0; kh < w->k_h; kh++) {
            int ih = oh * w->s_h - w->pad_h + kh;
            for (int kw = 0; kw < w->k_w; kw++, offs++) {
                int iw = ow * w->s_w - w->pad_w + kw;
                int inside = id >= 0 && id < w->in_d && ih >= 0 && ih < w->in_h && iw >= 0 &&
                             iw < w->in_w;
                *offs = inside ? (ptrdiff_t)((((b * w->in_d + id) * w->in_h + ih) * w->in_w + iw) *
                                             w->in_c)
                               : -1;
            }
        }
    }
}

/* Scratch for row_taps; caller frees. */
static tw_status taps_alloc(const tw_window *w, ptrdiff_t **offs, tw_error *err)
{
    *offs = malloc(window_taps(w) * sizeof **offs);
    if (!*offs)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cpu: out of memory for window taps");
    return TW_OK;
}

/* The walk im2col and col2im share, over every (output position, tap):
 * to_cols: cols[rows, taps * in_c] = x under the tap (zeros in the padding);
 * else:    x[batch, in_d, in_h, in_w, in_c] += cols under the tap (x zeroed first). */
static tw_status window_walk(const tw_window *w, float *cols, float *x, int to_cols, tw_error *err)
{
    ptrdiff_t *offs;
    TW_TRY(taps_alloc(w, &offs, err));
    size_t rows = window_rows(w), taps = window_taps(w), c = (size_t)w->in_c;
    if (!to_cols)
        memset(x, 0, window_inputs(w) * sizeof *x);
    for (size_t r = 0; r < rows; r++) {
        row_taps(w, r, offs);
        for (size_t t = 0; t < taps; t++) {
            float *col = cols + (r * taps + t) * c;
            if (offs[t] < 0) {
                if (to_cols)
                    memset(col, 0, c * sizeof *col);
            } else if (to_cols) {
                memcpy(col, x + offs[t], c * sizeof *col);
            } else {
                float *dst = x + offs[t];
                for (size_t i = 0; i < c; i++)
                    dst[i] += col[i];
            }
        }
    }
    free(offs);
    return TW_OK;
}

static tw_status cpu_im2col(void *ctx, const tw_window *w, tw_tensor cols, tw_tensor x,
                            tw_error *err)
{
    (void)ctx;
    return window_walk(w, f32(cols), f32(x), 1, err);
}

static tw_status cpu_col2im(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor cols,
                            tw_error *err)
{
    (void)ctx;
    return window_walk(w, f32(cols), f32(dx), 0, err);
}

/* y[rows, in_c] = max of x over each window, argmax[rows, in_c] its flat index into x; the first
 * maximum wins a tie; padding taps are skipped (every checked window has an input tap).
 * NaN: one rule serves both ways, TF's 2-D MaxPoolGrad argmax (the first tap, then a strictly greater
 * one), so a NaN at a window's first tap is the max and carries the gradient, and a later NaN is
 * skipped. TF's forward MaxPool (checked against tf.nn.max_pool2d) instead skips every NaN, starting
 * from -FLT_MAX, while its gradient goes to that first-tap NaN: Tower does not copy the disagreement,
 * and lets that NaN through to the loss check rather than swallow more of them.
 * Speed: each row starts from its first input tap, and later taps select through a mask (max_tap), so
 * the channel loop vectorises (cpu_conv.c has the comparison with oneDNN's pooling, which skips even a
 * first-tap NaN, checked, and keeps its own workspace instead of this argmax). */

/* y[c], argmax[c] = x[c], at + c where x is strictly greater; the rest stays. */
static void max_tap(float *restrict y, int32_t *restrict argmax, const float *restrict x, int32_t at,
                    int32_t c)
{
    for (int32_t i = 0; i < c; i++) { /* integer masks, not branches: GCC vectorises this */
        float v = x[i], best = y[i];
        int32_t gt = -(int32_t)(v > best);
        y[i] = v > best ? v : best;
        argmax[i] = (argmax[i] & ~gt) | ((at + i) & gt);
    }
}

static tw_status cpu_maxpool_fwd(void *ctx, const tw_window *w, tw_tensor y, tw_tensor argmax,
                                 tw_tensor x, tw_error *err)
{
    (void)ctx;
    ptrdiff_t *offs;
    TW_TRY(taps_alloc(w, &offs, err));
    size_t rows = window_rows(w), taps = window_taps(w);
    int32_t c = w->in_c; /* x's values fit int32 (tw_maxpool_fwd checks) */
    const float *px = f32(x);
    float *py = f32(y);
    int32_t *pa = i32(argmax);
    for (size_t r = 0; r < rows; r++, py += c, pa += c) {
        row_taps(w, r, offs);
        size_t t = 0;
        while (offs[t] < 0) /* the first input tap */
            t++;
        memcpy(py, px + offs[t], (size_t)c * sizeof *py);
        for (int32_t i = 0; i < c; i++)
            pa[i] = (int32_t)offs[t] + i;
        for (t++; t < taps; t++)
            if (offs[t] >= 0)
                max_tap(py, pa, px + offs[t], (int32_t)offs[t], c);
    }
    free(offs);
    return TW_OK;
}

/* dx[batch, in_d, in_h, in_w, in_c] = 0, then dx[argmax[j]] += dy[j] for every output j in order. */
static void maxpool_scatter(const tw_window *w, float *dx, const float *dy, const int32_t *argmax)
{
    size_t n = window_rows(w) * (size_t)w->in_c;
    memset(dx, 0, window_inputs(w) * sizeof *dx);
    for (size_t j = 0; j < n; j++)
        dx[argmax[j]] += dy[j];
}

static tw_status cpu_maxpool_bwd(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy,
                                 tw_tensor argmax, tw_error *err)
{
    (void)ctx;
    (void)err;
    maxpool_scatter(w, f32(dx), f32(dy), i32(argmax));
    return TW_OK;
}

/* maxpool_bwd, then dx = relu'(x) dx: the scatter, then the ReLU factor at the argmax positions alone.
 * Every other position holds 0, which the factor (0 or 1) keeps; the factor is idempotent (a position
 * several windows chose gets it more than once), so dx is bit for bit act_bwd's over all of it. Where
 * the windows do not overlap (stride >= kernel: each position is chosen at most once), both happen in
 * the one pass over the outputs, in the same order per position. */
static tw_status cpu_maxpool_bwd_relu(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy,
                                      tw_tensor argmax, tw_tensor x, tw_error *err)
{
    (void)ctx;
    (void)err;
    float *pdx = f32(dx);
    const float *px = f32(x), *pdy = f32(dy);
    const int32_t *pa = i32(argmax);
    size_t n = window_rows(w) * (size_t)w->in_c;
    if (w->s_d >= w->k_d && w->s_h >= w->k_h && w->s_w >= w->k_w) {
        memset(pdx, 0, window_inputs(w) * sizeof *pdx);
        for (size_t j = 0; j < n; j++)
            pdx[pa[j]] = tw_activate_grad(TW_ACT_RELU, pdx[pa[j]] + pdy[j], px[pa[j]]);
        return TW_OK;
    }
    maxpool_scatter(w, pdx, pdy, pa);
    for (size_t j = 0; j < n; j++)
        pdx[pa[j]] = tw_activate_grad(TW_ACT_RELU, pdx[pa[j]], px[pa[j]]);
    return TW_OK;
}

/* ---- direct convolution (oneDNN 2.x, when CMake found it: TW_HAVE_DNNL, engine/CMakeLists.txt) ---- */

#ifdef TW_HAVE_DNNL

static tw_cpu_conv *conv_of(void *ctx) { return ((cpu_ctx *)ctx)->conv; }

static tw_status cpu_conv_fwd(void *ctx, const tw_window *w, int filters, tw_tensor y, tw_tensor x,
                              tw_tensor f, tw_tensor bias, tw_error *err)
{
    return tw_cpu_conv_fwd(conv_of(ctx), w, filters, f32(x), f32(f), f32(y), f32(bias), err);
}

static tw_status cpu_conv_bwd(void *ctx, const tw_window *w, int filters, tw_tensor df, tw_tensor dbias,
                              tw_tensor dx, tw_tensor x, tw_tensor dy, tw_tensor f, tw_error *err)
{
    return tw_cpu_conv_bwd(conv_of(ctx), w, filters, f32(x), f32(dy), dx.buf ? f32(f) : NULL, f32(df),
                           f32(dbias), dx.buf ? f32(dx) : NULL, err);
}
#endif

/* ---- losses ---- */

static tw_status bad_label(int32_t label, int row, int classes, tw_error *err)
{
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                        "cpu: label %d of row %d is outside the valid range [0, %d)", (int)label, row,
                        classes);
}

/* One row of sparse softmax cross-entropy with the max-shift: x[classes] -> probs[classes], the loss with
 * the targets smoothed by e (elementwise.h). */
static float xent_row(const float *x, float *probs, int label, int classes, float e)
{
    float m = x[0];
    for (int j = 1; j < classes; j++)
        m = x[j] > m ? x[j] : m;
    float s = 0.0f;
    for (int j = 0; j < classes; j++) {
        probs[j] = tw_xent_exp(x[j], m);
        s += probs[j];
    }
    for (int j = 0; j < classes; j++)
        probs[j] /= s;
    if (e == 0.0f)
        return tw_xent_loss(s, x[label], m);
    float d = 0.0f;
    for (int j = 0; j < classes; j++)
        d += x[j] - m;
    return tw_xent_smooth_loss(s, x[label], m, d, e, classes);
}

/* loss[rows], probs[rows, classes] from logits[rows, classes] and labels[rows] (int32). A label outside
 * [0, classes) is TW_ERR_INVALID, as TensorFlow's CPU kernel reports it. */
static tw_status cpu_xent_fwd(void *ctx, tw_tensor loss, tw_tensor probs, tw_tensor logits,
                              tw_tensor labels, int rows, int classes, float smoothing, tw_error *err)
{
    (void)ctx;
    const float *px = f32(logits);
    const int32_t *pl = i32(labels);
    float *pp = f32(probs), *ploss = f32(loss);
    for (int r = 0; r < rows; r++) {
        if (pl[r] < 0 || pl[r] >= classes)
            return bad_label(pl[r], r, classes, err);
        size_t at = (size_t)r * (size_t)classes;
        ploss[r] = xent_row(px + at, pp + at, pl[r], classes, smoothing);
    }
    return TW_OK;
}

/* dlogits[rows, classes] = (probs - targets) * scale, the targets smoothed; dlogits may be probs. */
static tw_status cpu_xent_bwd(void *ctx, tw_tensor dlogits, tw_tensor probs, tw_tensor labels,
                              int rows, int classes, float scale, float smoothing, tw_error *err)
{
    (void)ctx;
    const float *pp = f32(probs);
    const int32_t *pl = i32(labels);
    float *pd = f32(dlogits);
    for (int r = 0; r < rows; r++) {
        if (pl[r] < 0 || pl[r] >= classes)
            return bad_label(pl[r], r, classes, err);
        size_t at = (size_t)r * (size_t)classes;
        for (int j = 0; j < classes; j++)
            pd[at + j] = tw_xent_grad(pp[at + j], j == pl[r], scale, smoothing, classes);
    }
    return TW_OK;
}

/* loss[rows] = sum over c = 0..cols-1 (in order, float) of (pred - target)^2, pred/target [rows, cols]. */
static tw_status cpu_mse_fwd(void *ctx, tw_tensor loss, tw_tensor pred, tw_tensor target, int rows,
                             int cols, tw_error *err)
{
    (void)ctx;
    (void)err;
    const float *pp = f32(pred), *pt = f32(target);
    float *pl = f32(loss);
    for (int r = 0; r < rows; r++, pp += cols, pt += cols) {
        float s = 0.0f;
        for (int c = 0; c < cols; c++)
            s += tw_sq_err(pp[c], pt[c]);
        pl[r] = s;
    }
    return TW_OK;
}

/* dpred[n] = 2 (pred - target) scale; dpred may be pred. */
static tw_status cpu_mse_bwd(void *ctx, tw_tensor dpred, tw_tensor pred, tw_tensor target, size_t n,
                             float scale, tw_error *err)
{
    (void)ctx;
    (void)err;
    float *pd = f32(dpred);
    const float *pp = f32(pred), *pt = f32(target);
    for (size_t i = 0; i < n; i++)
        pd[i] = tw_sq_err_grad(pp[i], pt[i], scale);
    return TW_OK;
}

/* out[1] = sum of x[n]^2, accumulated in double in index order. */
static tw_status cpu_sum_squares(void *ctx, tw_tensor out, tw_tensor x, size_t n, tw_error *err)
{
    (void)ctx;
    (void)err;
    const float *px = f32(x);
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)px[i] * px[i];
    *f32(out) = (float)s;
    return TW_OK;
}

/* ---- graph joins, average pooling, batch normalisation ---- */

static tw_status cpu_add(void *ctx, tw_tensor y, tw_tensor a, tw_tensor c, size_t n, tw_error *err)
{
    (void)ctx;
    (void)err;
    float *py = f32(y);
    const float *pa = f32(a), *pc = f32(c);
    if (py == pa) /* adding into y: one pointer, so the loop vectorises (see cpu_act_fwd) */
        for (size_t i = 0; i < n; i++)
            py[i] += pc[i];
    else
        for (size_t i = 0; i < n; i++)
            py[i] = pa[i] + pc[i];
    return TW_OK;
}

static tw_status cpu_copy_cols(void *ctx, tw_tensor dst, int dst_cols, int dst_at, tw_tensor src, int src_cols,
                               int src_at, int rows, int cols, int accumulate, tw_error *err)
{
    (void)ctx;
    (void)err;
    for (int r = 0; r < rows; r++) {
        float *d = f32(dst) + (size_t)r * (size_t)dst_cols + (size_t)dst_at;
        const float *s = f32(src) + (size_t)r * (size_t)src_cols + (size_t)src_at;
        if (accumulate)
            for (int c = 0; c < cols; c++)
                d[c] += s[c];
        else
            memcpy(d, s, (size_t)cols * sizeof *d);
    }
    return TW_OK;
}

/* The input taps of a window (the padding's are -1 in offs). */
static int input_taps(const ptrdiff_t *offs, size_t taps)
{
    int n = 0;
    for (size_t t = 0; t < taps; t++)
        n += offs[t] >= 0;
    return n;
}

/* y[rows, in_c] = the sum of x's input taps over each window, divided by their count (in tap order). */
static tw_status cpu_avgpool_fwd(void *ctx, const tw_window *w, tw_tensor y, tw_tensor x, tw_error *err)
{
    (void)ctx;
    ptrdiff_t *offs;
    TW_TRY(taps_alloc(w, &offs, err));
    size_t rows = window_rows(w), taps = window_taps(w), c = (size_t)w->in_c;
    const float *px = f32(x);
    float *py = f32(y);
    for (size_t r = 0; r < rows; r++, py += c) {
        row_taps(w, r, offs);
        memset(py, 0, c * sizeof *py);
        for (size_t t = 0; t < taps; t++)
            if (offs[t] >= 0)
                for (size_t i = 0; i < c; i++)
                    py[i] += px[offs[t] + (ptrdiff_t)i];
        float inv = 1.0f / (float)input_taps(offs, taps);
        for (size_t i = 0; i < c; i++)
            py[i] *= inv;
    }
    free(offs);
    return TW_OK;
}

/* dx = 0, then each dy / (its window's input taps) added to every input tap, outputs in order. */
static tw_status cpu_avgpool_bwd(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy, tw_error *err)
{
    (void)ctx;
    ptrdiff_t *offs;
    TW_TRY(taps_alloc(w, &offs, err));
    size_t rows = window_rows(w), taps = window_taps(w), c = (size_t)w->in_c;
    float *pdx = f32(dx);
    const float *pdy = f32(dy);
    memset(pdx, 0, window_inputs(w) * sizeof *pdx);
    for (size_t r = 0; r < rows; r++, pdy += c) {
        row_taps(w, r, offs);
        float inv = 1.0f / (float)input_taps(offs, taps);
        for (size_t t = 0; t < taps; t++)
            if (offs[t] >= 0)
                for (size_t i = 0; i < c; i++)
                    pdx[offs[t] + (ptrdiff_t)i] += pdy[i] * inv;
    }
    free(offs);
    return TW_OK;
}

/* Batch normalization over the instance's threads. The rows are grouped in fixed blocks of BN_BLOCK; a
 * channel's sums are each block's sum (in row order) added in block order, so the results never depend on
 * how many threads there are (bit-exact resume on another thread count). Thread t takes the blocks, or
 * for the elementwise passes the rows, of part t of an even cut. */
enum { BN_BLOCK = 64, SPLIT_BN = 1 << 14 }; /* rows a block; values: smaller batch normalizations run whole on the caller */

typedef struct {
    const tw_bn *p;
    const float *x, *dy, *gamma, *beta;
    float *y, *dx, *stats, *dgamma, *dbeta;
    double *part;   /* [2 * blocks * C]: each block's two sums per channel */
    int parts;
    enum { BN_MOMENTS, BN_GRADS } pass; /* what bn_sums_part sums */
} bn_job;

static size_t bn_blocks(const tw_bn *p) { return ((size_t)p->rows + BN_BLOCK - 1) / BN_BLOCK; }

/* Part t of [0, n) cut into j->parts even pieces. */
static void bn_cut(const bn_job *j, size_t n, int t, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)t / (size_t)j->parts;
    *hi = n * (size_t)(t + 1) / (size_t)j->parts;
}

enum { BN_LANES = 16 }; /* channels summed together in registers */

/* BN_LANES floats as one value (GCC's vector extension: the arithmetic of each lane is C's, in whatever
 * registers the target has), so the sums of a block stay in registers: written as loops over the lanes,
 * GCC kept them in memory, and the loop-carried sum through memory was half of batch normalization's
 * time. */
typedef float bn_lanes __attribute__((vector_size(BN_LANES * sizeof(float))));

/* The loops batch normalization spends its time in, compiled for AVX-512, AVX2 and the baseline x86-64
 * (GCC's target_clones; the loader picks one for the machine): bn_lanes is one AVX-512 register, four SSE
 * ones spilled to the stack in the baseline (its sums were a third faster so; BENCHMARKS.md). No product
 * is contracted into an FMA (kernels/cpu/CMakeLists.txt), so the three give the same bits. */
#define BN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* Rows [r0, r1)'s two sums of channels [c0, c0 + n) (n <= BN_LANES) in float (see bn_rows_sums), into s
 * and q; with n = BN_LANES in registers. */
BN_CLONES
static void bn_lanes_sums(const bn_job *j, size_t r0, size_t r1, size_t c0, size_t n, double *restrict s,
                          double *restrict q)
{
    size_t C = (size_t)j->p->channels;
    float pad[2][BN_LANES] = {{0}}, out[2][BN_LANES];
    for (size_t c = 0; c < n; c++) {
        pad[0][c] = j->pass == BN_MOMENTS ? j->x[c0 + c] : j->stats[c0 + c];
        pad[1][c] = j->pass == BN_MOMENTS ? 1.0f : j->stats[C + c0 + c];
    }
    bn_lanes sa = {0}, qa = {0}, k, inv, vx, vdy;
    memcpy(&k, pad[0], sizeof k);
    memcpy(&inv, pad[1], sizeof inv);
    float row[2][BN_LANES] = {{0}}; /* a partial chunk's row, zero past n */
    for (size_t r = r0; r < r1; r++) {
        const float *x = j->x + r * C + c0, *dy = j->pass == BN_GRADS ? j->dy + r * C + c0 : NULL;
        if (n < BN_LANES) {
            memcpy(row[0], x, n * sizeof *x);
            if (dy)
                memcpy(row[1], dy, n * sizeof *dy);
            x = row[0];
            dy = dy ? row[1] : NULL;
        }
        memcpy(&vx, x, sizeof vx);
        vx -= k;
        if (dy) {
            memcpy(&vdy, dy, sizeof vdy);
            sa += vdy;
            qa += vdy * (vx * inv);
        } else {
            sa += vx;
            qa += vx * vx;
        }
    }
    memcpy(out[0], &sa, sizeof sa);
    memcpy(out[1], &qa, sizeof qa);
    for (size_t c = 0; c < n; c++) {
        s[c0 + c] = out[0][c];
        q[c0 + c] = out[1][c];
    }
}

/* Rows [r0, r1)'s two sums per channel into s[C] and q[C], each in row order, BN_LANES channels at a time in
 * float (a block of rows is short) and handed over in double: BN_MOMENTS, about each channel's value in row
 * 0 (k), s = sum (x - k) and q = sum (x - k)^2 (the mean and the variance in one pass, without the
 * cancellation of sums about 0); BN_GRADS, s = sum dy and q = sum dy xhat, stats holding the means and
 * 1 / sqrt(variance + epsilon). */
static void bn_rows_sums(const bn_job *j, size_t r0, size_t r1, double *restrict s, double *restrict q)
{
    size_t C = (size_t)j->p->channels;
    for (size_t c0 = 0; c0 < C; c0 += BN_LANES)
        bn_lanes_sums(j, r0, r1, c0, C - c0 < BN_LANES ? C - c0 : BN_LANES, s, q);
}

/* Each of part t's blocks: part[b] and part[blocks + b], the pass's two sums over the block's rows. */
static void bn_sums_part(void *arg, int t)
{
    const bn_job *j = arg;
    size_t R = (size_t)j->p->rows, C = (size_t)j->p->channels, nb = bn_blocks(j->p), lo, hi;
    bn_cut(j, nb, t, &lo, &hi);
    for (size_t b = lo; b < hi; b++)
        bn_rows_sums(j, b * BN_BLOCK, (b + 1) * BN_BLOCK < R ? (b + 1) * BN_BLOCK : R, j->part + b * C,
                     j->part + (nb + b) * C);
}

/* sum[c] = the blocks' sums of set k (0 or 1) added in block order. */
static void bn_combine(const bn_job *j, int k, double *sum)
{
    size_t C = (size_t)j->p->channels, nb = bn_blocks(j->p);
    for (size_t c = 0; c < C; c++)
        sum[c] = 0.0;
    for (size_t b = 0; b < nb; b++)
        for (size_t c = 0; c < C; c++)
            sum[c] += j->part[((size_t)k * nb + b) * C + c];
}

/* y = act(gamma (x - mean) inv + beta) over part t's rows, BN_BLOCK rows at a time: normalised, then
 * activated while they are still in cache (act_fwd_loop, one loop per activation). */
BN_CLONES
static void bn_norm_part(void *arg, int t)
{
    const bn_job *j = arg;
    size_t C = (size_t)j->p->channels, lo, hi;
    const float *ps = j->stats;
    bn_cut(j, (size_t)j->p->rows, t, &lo, &hi);
    for (size_t r0 = lo; r0 < hi; r0 += BN_BLOCK) {
        size_t r1 = r0 + BN_BLOCK < hi ? r0 + BN_BLOCK : hi;
        for (size_t r = r0; r < r1; r++)
            for (size_t c = 0; c < C; c++)
                j->y[r * C + c] = tw_bn_norm(j->x[r * C + c], ps[c], ps[C + c], j->gamma[c], j->beta[c]);
        if (j->p->activation != TW_ACT_NONE)
            act_fwd_loop(j->p->activation, j->y + r0 * C, j->y + r0 * C, (r1 - r0) * C);
    }
}

/* How many parts a batch normalization of p is cut into on ctx's threads. */
static int bn_parts(void *ctx, const tw_bn *p)
{
    return (size_t)p->rows * (size_t)p->channels < SPLIT_BN ? 1 : tw_tower_pool_jobs(pool_of(ctx));
}

/* The batch's mean and 1 / sqrt(biased variance + epsilon) per channel into stats (one pass: the sums
 * about row 0, bn_rows_sums); with moving (TRAIN_UPDATE), the moving mean and variance follow the batch's.
 * sum[2 * C]: scratch. */
static void bn_batch_stats(void *ctx, bn_job *j, float *moving, double *sum)
{
    size_t R = (size_t)j->p->rows, C = (size_t)j->p->channels;
    j->pass = BN_MOMENTS;
    tw_tower_pool_run(pool_of(ctx), j->parts, bn_sums_part, j);
    bn_combine(j, 0, sum);
    bn_combine(j, 1, sum + C);
    for (size_t c = 0; c < C; c++) {
        double d = sum[c] / (double)R, var = sum[C + c] / (double)R - d * d; /* d: the mean less row 0's */
        var = var > 0.0 ? var : 0.0;
        j->stats[c] = (float)((double)j->x[c] + d);
        j->stats[C + c] = (float)(1.0 / sqrt(var + (double)j->p->epsilon));
        if (moving) {
            moving[c] = tw_bn_moving(moving[c], j->stats[c], j->p->momentum);
            moving[C + c] = tw_bn_moving(moving[C + c], (float)var, j->p->momentum);
        }
    }
}

static tw_status cpu_bn_fwd(void *ctx, const tw_bn *p, tw_tensor y, tw_tensor x, tw_tensor gamma, tw_tensor beta,
                            tw_tensor stats, tw_tensor moving, tw_error *err)
{
    size_t C = (size_t)p->channels;
    bn_job j = {.p = p, .x = f32(x), .gamma = f32(gamma), .beta = f32(beta), .y = f32(y), .stats = f32(stats),
                .parts = bn_parts(ctx, p)};
    float *pm = f32(moving);
    if (p->mode == TW_BN_INFER) {
        for (size_t c = 0; c < C; c++) {
            j.stats[c] = pm[c];
            j.stats[C + c] = 1.0f / sqrtf(pm[C + c] + p->epsilon);
        }
    } else {
        double *sum = malloc((2 * bn_blocks(p) + 2) * C * sizeof *sum);
        if (!sum)
            return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
        j.part = sum + 2 * C;
        bn_batch_stats(ctx, &j, p->mode == TW_BN_TRAIN_UPDATE ? pm : NULL, sum);
        free(sum);
    }
    tw_tower_pool_run(pool_of(ctx), j.parts, bn_norm_part, &j);
    return TW_OK;
}

/* dx = gamma inv / R (R dy - dbeta - xhat dgamma) over part t's rows. */
BN_CLONES
static void bn_dx_part(void *arg, int t)
{
    const bn_job *j = arg;
    size_t R = (size_t)j->p->rows, C = (size_t)j->p->channels, lo, hi;
    const float *ps = j->stats;
    bn_cut(j, R, t, &lo, &hi);
    for (size_t r = lo; r < hi; r++)
        for (size_t c = 0; c < C; c++)
            j->dx[r * C + c] = tw_bn_grad(j->dy[r * C + c], j->x[r * C + c], ps[c], ps[C + c], j->gamma[c],
                                          j->dbeta[c], j->dgamma[c], (float)R);
}

/* dbeta = sum dy, dgamma = sum dy xhat per channel (blocks as above), then dx. */
static tw_status cpu_bn_bwd(void *ctx, const tw_bn *p, tw_tensor dx, tw_tensor dgamma, tw_tensor dbeta, tw_tensor dy,
                            tw_tensor x, tw_tensor gamma, tw_tensor stats, tw_error *err)
{
    size_t C = (size_t)p->channels;
    bn_job j = {.p = p, .x = f32(x), .dy = f32(dy), .gamma = f32(gamma), .dx = dx.buf ? f32(dx) : NULL,
                .stats = f32(stats), .dgamma = f32(dgamma), .dbeta = f32(dbeta), .parts = bn_parts(ctx, p)};
    double *sum = malloc((2 * bn_blocks(p) + 1) * C * sizeof *sum);
    if (!sum)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    j.part = sum + C;
    j.pass = BN_GRADS;
    tw_tower_pool_run(pool_of(ctx), j.parts, bn_sums_part, &j);
    bn_combine(&j, 0, sum);
    for (size_t c = 0; c < C; c++)
        j.dbeta[c] = (float)sum[c];
    bn_combine(&j, 1, sum);
    for (size_t c = 0; c < C; c++)
        j.dgamma[c] = (float)sum[c];
    free(sum);
    if (j.dx)
        tw_tower_pool_run(pool_of(ctx), j.parts, bn_dx_part, &j);
    return TW_OK;
}

/* ---- update and collectives ---- */

/* The arrays of one update over a range; they never overlap (separate arenas). s1/s2: the slots the
 * kind uses (else NULL); e: the EMA shadows, or NULL without EMA. */
typedef struct {
    float *restrict w;
    const float *restrict g;
    float *restrict s1, *restrict s2, *restrict e;
} update_range;

/* for (i = 0; i < n; i++) w[i] = the new weight STEP (an expression of i), and e[i] follows it, in the
 * same pass (one loop each way, so each vectorises). */
#define UPDATE_LOOP(STEP)                                                                             \
    do {                                                                                             \
        if (r.e) {                                                                                   \
            for (size_t i = 0; i < n; i++) {                                                         \
                float v_ = (STEP);                                                                   \
                r.w[i] = v_;                                                                         \
                r.e[i] = tw_ema(r.e[i], v_, u->ema_decay);                                           \
            }                                                                                        \
        } else {                                                                                     \
            for (size_t i = 0; i < n; i++)                                                           \
                r.w[i] = (STEP);                                                                     \
        }                                                                                            \
    } while (0)

/* The optimizer step over r.w[n] with gradients r.g[n] (scaled, plus L2 and weight decay on the weights:
 * `weights`), the shadows in the same pass. The weight decay reads the old w, as the step's gradient does. */
static void step_range(const tw_update *u, int weights, update_range r, size_t n)
{
    float l2 = weights ? u->l2 : 0.0f, wd = weights ? u->weight_decay : 0.0f, lr = u->lr;
    float sc = u->grad_scale != 0.0f ? u->grad_scale : 1.0f;
#define W_ tw_weight_decay(r.w[i], wd, lr)
#define G_ tw_step_grad(r.g[i], r.w[i], sc, l2)
    switch (u->kind) {
    case TW_OPT_SGD: UPDATE_LOOP(tw_sgd(W_, G_, lr)); break;
    case TW_OPT_MOMENTUM:
        if (u->nesterov)
            UPDATE_LOOP(tw_nesterov(W_, G_, &r.s1[i], lr, u->momentum));
        else
            UPDATE_LOOP(tw_momentum(W_, G_, &r.s1[i], lr, u->momentum));
        break;
    case TW_OPT_ADAM:
        UPDATE_LOOP(tw_adam(W_, G_, &r.s1[i], &r.s2[i], u->adam_alpha, u->beta1, u->beta2, u->epsilon));
        break;
    }
#undef W_
#undef G_
}

/* The range r moved on by k values (NULL arrays stay NULL). */
static update_range range_from(update_range r, size_t k)
{
    return (update_range){r.w + k, r.g ? r.g + k : NULL, r.s1 ? r.s1 + k : NULL, r.s2 ? r.s2 + k : NULL,
                          r.e ? r.e + k : NULL};
}

enum { REDUCE_BLOCK = 1024 };

/* acc[len] = (bufs[0] + bufs[1] + ... + bufs[n-1]) * (1 / n) over values [at, at + len), summed in that
 * order in float (n = 1: bufs[0] itself); acc may be bufs[0]'s own values. The one formula of the mean,
 * shared by the all-reduce and the fused update so that both give bit-identical values. Plain loops
 * that vectorise (the memcpy calls this had were inlined as rep movsq, 60% of the all-reduce). */
static void mean_block(const tw_tensor *bufs, int n, size_t at, size_t len, float *acc)
{
    const float *b0 = f32(bufs[0]) + at;
    if (n < 2) {
        if (acc != b0)
            for (size_t i = 0; i < len; i++)
                acc[i] = b0[i];
        return;
    }
    const float *b1 = f32(bufs[1]) + at;
    for (size_t i = 0; i < len; i++)
        acc[i] = b0[i] + b1[i];
    for (int t = 2; t < n; t++) {
        const float *src = f32(bufs[t]) + at;
        for (size_t i = 0; i < len; i++)
            acc[i] += src[i];
    }
    float inv = 1.0f / (float)n;
    for (size_t i = 0; i < len; i++)
        acc[i] *= inv;
}

/* Every bufs[t] ([n] fp32, host) becomes their mean (mean_block), so every tower gets bit-identical
 * values; block by block. */
static tw_status cpu_allreduce_avg(void *const *ctxs, int n_ctx, const tw_tensor *bufs, size_t n,
                                   tw_error *err)
{
    (void)ctxs;
    (void)err;
    if (n_ctx < 2)
        return TW_OK; /* the mean of one */
    float acc[REDUCE_BLOCK];
    for (size_t at = 0; at < n; at += REDUCE_BLOCK) {
        size_t len = n - at < REDUCE_BLOCK ? n - at : REDUCE_BLOCK;
        mean_block(bufs, n_ctx, at, len, acc);
        for (int t = 0; t < n_ctx; t++) {
            float *dst = f32(bufs[t]) + at;
            for (size_t i = 0; i < len; i++)
                dst[i] = acc[i];
        }
    }
    return TW_OK;
}

/* The update of values [lo, hi) from the mean of grads[n_grads] (r.g unused): block by block, the mean
 * into grads[0]'s block (u->keep_mean, or one gradient: itself) or a block on the stack, then the step
 * over it while the block is still in the cache. */
static void update_span(const tw_update *u, update_range r, const tw_tensor *grads, int n_grads, size_t lo,
                        size_t hi)
{
    float acc[REDUCE_BLOCK];
    for (size_t at = lo; at < hi; at += REDUCE_BLOCK) {
        size_t len = hi - at < REDUCE_BLOCK ? hi - at : REDUCE_BLOCK;
        float *mean = u->keep_mean || n_grads < 2 ? f32(grads[0]) + at : acc;
        mean_block(grads, n_grads, at, len, mean);
        size_t k = u->l2_count > at ? u->l2_count - at : 0; /* the block's weights under L2 */
        k = k < len ? k : len;
        update_range b = range_from(r, at);
        b.g = mean;
        step_range(u, 1, b, k);
        step_range(u, 0, range_from(b, k), len - k);
    }
}

/* The arrays of an update from their views (r.g unset: the caller's mean or gradient). */
static update_range ranges_of(const tw_update *u, tw_tensor params, tw_tensor slot1, tw_tensor slot2,
                              tw_tensor ema)
{
    return (update_range){f32(params), NULL, u->kind != TW_OPT_SGD ? f32(slot1) : NULL,
                          u->kind == TW_OPT_ADAM ? f32(slot2) : NULL, u->ema ? f32(ema) : NULL};
}

/* An update cut into one range per thread of the instance (every value's result is the same however it
 * is cut: each is computed from its own values alone). */
typedef struct {
    const tw_update *u;
    update_range r;
    const tw_tensor *grads;
    int n_grads, parts;
    size_t n;
} update_job;

static void update_part(void *arg, int p)
{
    const update_job *j = arg;
    update_span(j->u, j->r, j->grads, j->n_grads, tw_tower_pool_cut(j->n, j->parts, p),
                tw_tower_pool_cut(j->n, j->parts, p + 1));
}

enum { SPLIT_UPDATE = 1 << 16 }; /* values: smaller updates run whole on the caller (a wake-up costs more) */

/* The update from the mean of grads[n_grads] (backend.h's tw_update_mean), cut over the instance's
 * threads. */
static tw_status cpu_update_mean(void *ctx, const tw_update *u, tw_tensor params, const tw_tensor *grads,
                                 int n_grads, tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n,
                                 tw_error *err)
{
    (void)err;
    tw_tower_pool *pool = pool_of(ctx);
    update_job j = {u, ranges_of(u, params, slot1, slot2, ema), grads, n_grads,
                    n < SPLIT_UPDATE ? 1 : tw_tower_pool_jobs(pool), n};
    tw_tower_pool_run(pool, j.parts, update_part, &j);
    return TW_OK;
}

/* A weight gradient's product cut as tw_cpu_sgemm cuts it, each block updated by the thread that computed
 * it (tw_gemm_update). */
typedef struct {
    const tw_update *u;
    update_range r;
    const tw_tensor *grads; /* [1]: the product c */
    tw_cpu_cut cut;
    int trans_a, trans_b, m, n, k;
    const float *a, *b;
} gemm_update_job;

static tw_status gemm_update_part(void *arg, int p, tw_error *err)
{
    const gemm_update_job *j = arg;
    size_t n = (size_t)j->n;
    TW_TRY(tw_cpu_sgemm_part(j->cut, p, j->trans_a, j->trans_b, j->m, j->n, j->k, 1.0f, j->a, j->b, 0.0f,
                             f32(j->grads[0]), err));
    int lo, hi;
    tw_cpu_cut_span(j->cut, j->m, j->n, p, &lo, &hi);
    if (j->cut.by_rows)
        update_span(j->u, j->r, j->grads, 1, (size_t)lo * n, (size_t)hi * n);
    else
        for (size_t row = 0; row < (size_t)j->m; row++)
            update_span(j->u, j->r, j->grads, 1, row * n + (size_t)lo, row * n + (size_t)hi);
    return TW_OK;
}

/* grads = op(a) op(b), then the update of params from it (backend.h's tw_gemm_update): a product that
 * tw_cpu_sgemm would cut over the pool is cut the same way, and each thread updates its block right
 * after computing it; an uncut one is multiplied whole, then updated as cpu_update does. */
static tw_status cpu_gemm_update(void *ctx, const tw_update *u, int trans_a, int trans_b, int m, int n, int k,
                                 tw_tensor a, tw_tensor b, tw_tensor grads, tw_tensor params, tw_tensor slot1,
                                 tw_tensor slot2, tw_tensor ema, tw_error *err)
{
    tw_tower_pool *pool = pool_of(ctx);
    gemm_update_job j = {u, ranges_of(u, params, slot1, slot2, ema), &grads, tw_cpu_sgemm_cut(pool, m, n, k),
                         trans_a, trans_b, m, n, k, f32(a), f32(b)};
    if (j.cut.parts > 1)
        return tw_tower_pool_try(pool, j.cut.parts, gemm_update_part, &j, err);
    TW_TRY(tw_cpu_sgemm(pool, trans_a, trans_b, m, n, k, 1.0f, f32(a), f32(b), 0.0f, f32(grads), err));
    return cpu_update_mean(ctx, u, params, &grads, 1, slot1, slot2, ema, (size_t)m * n, err);
}

/* params[n] -= step(grads[n] + L2 on the first l2_count); ema[n] follows the new params in the same
 * pass. Slots the kind does not use are never touched (they may be empty views). The update of one
 * gradient: update_mean's mean of one is the gradient itself, untouched. */
static tw_status cpu_update(void *ctx, const tw_update *u, tw_tensor params, tw_tensor grads,
                            tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n, tw_error *err)
{
    return cpu_update_mean(ctx, u, params, &grads, 1, slot1, slot2, ema, n, err);
}

static tw_status cpu_sync(void *ctx, tw_error *err)
{
    (void)ctx;
    (void)err;
    return TW_OK;
}

/* Winograd's convolutions on or off (cpu_conv.h); no TF32 here. */
static tw_status cpu_set_math(void *ctx, const tw_math *m, tw_error *err)
{
    (void)err;
    tw_cpu_conv_set_winograd(((cpu_ctx *)ctx)->conv, m->winograd);
    return TW_OK;
}

const tw_backend_ops tw_cpu_backend_ops = {
    .kind = "cpu",
    .plan = cpu_plan,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .zero = cpu_zero,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .maxpool_bwd_relu = cpu_maxpool_bwd_relu,
    .xent_fwd = cpu_xent_fwd,
    .xent_bwd = cpu_xent_bwd,
    .mse_fwd = cpu_mse_fwd,
    .mse_bwd = cpu_mse_bwd,
    .sum_squares = cpu_sum_squares,
    .add = cpu_add,
    .copy_cols = cpu_copy_cols,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .bn_fwd = cpu_bn_fwd,
    .bn_bwd = cpu_bn_bwd,
    .update = cpu_update,
    .allreduce_avg = cpu_allreduce_avg,
    .update_mean = cpu_update_mean,
    .gemm_update = cpu_gemm_update,
    .allreduce_split = 1, /* each call touches only its range, summed in the same order */
    .sync = cpu_sync,
    .set_math = cpu_set_math,
#ifdef TW_HAVE_DNNL /* without it the engine convolves through im2col + gemm (model.c) */
    .conv_fwd = cpu_conv_fwd,
    .conv_bwd = cpu_conv_bwd,
#endif
};
