/* cuda_kernels.cu — the CUDA backend's compute ops other than GEMM: element-wise ops, the window walks
 * of convolution and pooling, the losses, the reductions and the fused update.
 *
 * Owns: the kernels and the launches of bias add/grad, activations, dropout, im2col/col2im, max-pool
 * fwd/bwd, softmax cross-entropy, squared error, sum of squares and the optimizer + L2 + EMA step. What
 * one thread computes for the window ops, bias_grad's first pass and the update is in cuda_bodies.h
 * (host-and-device, so a unit test checks it without a GPU). The per-element arithmetic is
 * engine/elementwise.h's (the same TW_HD functions the CPU loops call), and the build compiles it with
 * --fmad=false, so an op whose result is per-element arithmetic, or a sum taken in the CPU's order, is
 * bit-identical to kernels/cpu/cpu_backend.c: the update, act_bwd, relu, dropout (the same
 * counter-based mask), bias_add, im2col, col2im and max-pool bwd (gathers that add in the CPU's scatter
 * order), max-pool fwd, mse fwd/bwd and xent bwd. Only transcendental functions (tanh, sigmoid's exp, the
 * softmax's exp and log: CUDA's libdevice versus glibc, a few ulp) and reductions in another order
 * (bias_grad, the softmax's sum: CUB; sum_squares: CUB in double, like the CPU's double loop) differ,
 * within the tolerances tests/gpu/test_cuda_parity.c states.
 *
 * Reductions are CUB's (cub::BlockReduce per row or column, cub::DeviceReduce::TransformReduce), not
 * shared-memory trees of our own; bias_grad first sums row chunks per column with coalesced loads (a
 * plain per-thread loop) so that the reduction has enough parallelism for conv layers with 10^5 rows.
 *
 * Does not own memory or streams (cuda_backend.cu), nor the error mapping (cuda_context.cu). Every launch
 * goes on ctx->stream and nothing here waits for the device. A label outside [0, classes) cannot fail a
 * kernel: the loss kernels record the first one in ctx->flag_dev and the next wait reports it
 * (cuda_backend.cu). */
#include "cuda_internal.h"
#include "cuda_bodies.h"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>


#ifndef TW_CUDA_ARCHS
#define TW_CUDA_ARCHS "?"
#endif

enum { THREADS = 256, ROW_THREADS = 128 };

/* Grid-stride loop over [0, n) with 64-bit indices. */
#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

static tw_cuda_ctx *C(void *ctx) { return (tw_cuda_ctx *)ctx; }

/* Blocks of THREADS for n items: enough to fill the device, the grid-stride loop does the rest. */
static unsigned blocks_for(const tw_cuda_ctx *ctx, size_t n)
{
    size_t want = (n + THREADS - 1) / THREADS, cap = (size_t)ctx->sm_count * 16;
    if (want > cap)
        want = cap;
    return want ? (unsigned)want : 1u;
}

/* flag[4] (device int32): {1, row, label, classes} of the first bad label; later ones are dropped. */
__device__ static void report_label(int *flag, int row, int label, int classes)
{
    if (atomicCAS(&flag[0], 0, 1) == 0) {
        flag[1] = row;
        flag[2] = label;
        flag[3] = classes;
    }
}

/* ---- dense ---- */

/* y[rows, cols] += bias[cols]; n = rows * cols. */
__global__ void k_bias_add(float *y, const float *bias, size_t n, int cols)
{
    GRID_STRIDE(i, n)
    y[i] += bias[i % (size_t)cols];
}

/* partial[cols, chunks]: partial[c, j] = tw_cuda_colsum_chunk of column c, chunk j; dy [rows, cols]
 * row-major. Thread x = column (consecutive threads read consecutive addresses), thread y = chunk. */
__global__ void k_colsum_chunks(float *partial, const float *dy, int rows, int cols, int chunk_rows,
                                int chunks)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (c < cols && j < chunks)
        partial[(size_t)c * chunks + j] = tw_cuda_colsum_chunk(dy, rows, cols, c, chunk_rows, j);
}

typedef cub::BlockReduce<float, ROW_THREADS> row_reduce;

/* dbias[c] = sum of partial[c, 0..chunks); one block per column, cub::BlockReduce. */
__global__ void __launch_bounds__(ROW_THREADS) k_segment_sum(float *dbias, const float *partial,
                                                             int chunks)
{
    __shared__ typename row_reduce::TempStorage tmp;
    const float *p = partial + (size_t)blockIdx.x * chunks;
    float s = 0.0f;
    for (int j = threadIdx.x; j < chunks; j += ROW_THREADS)
        s += p[j];
    float total = row_reduce(tmp).Sum(s);
    if (threadIdx.x == 0)
        dbias[blockIdx.x] = total;
}

tw_status tw_cuda_bias_add(void *ctx, tw_tensor y, tw_tensor bias, int rows, int cols, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t n = (size_t)rows * cols;
    TW_CUDA_LAUNCH(C(ctx), err, k_bias_add, blocks_for(C(ctx), n), THREADS, tw_cuda_f32(y),
                   tw_cuda_f32(bias), n, cols);
    return TW_OK;
}

enum { CHUNK_MIN_ROWS = 32, MAX_CHUNKS = 1024 };

tw_status tw_cuda_bias_grad(void *ctx, tw_tensor dbias, tw_tensor dy, int rows, int cols,
                            tw_error *err)
{
    tw_cuda_ctx *c = C(ctx);
    TW_TRY(tw_cuda_enter(c, err));
    int chunks = (rows + CHUNK_MIN_ROWS - 1) / CHUNK_MIN_ROWS;
    if (chunks > MAX_CHUNKS)
        chunks = MAX_CHUNKS;
    int chunk_rows = (rows + chunks - 1) / chunks;
    void *scratch;
    TW_TRY(tw_cuda_scratch(c, (size_t)cols * chunks * sizeof(float), &scratch, err));
    float *partial = (float *)scratch;
    dim3 block(32, 8), grid((cols + 31) / 32, (chunks + 7) / 8);
    TW_CUDA_LAUNCH(c, err, k_colsum_chunks, grid, block, partial, tw_cuda_f32(dy), rows, cols,
                   chunk_rows, chunks);
    TW_CUDA_LAUNCH(c, err, k_segment_sum, cols, ROW_THREADS, tw_cuda_f32(dbias), partial, chunks);
    return TW_OK;
}

/* ---- element-wise ---- */

/* y[n] = act(x[n]); y may be x. */
__global__ void k_act_fwd(tw_activation a, float *y, const float *x, size_t n)
{
    GRID_STRIDE(i, n)
    y[i] = tw_activate(a, x[i]);
}

/* dx[n] = act'(y[n]) dy[n]; dx may be dy. */
__global__ void k_act_bwd(tw_activation a, float *dx, const float *dy, const float *y, size_t n)
{
    GRID_STRIDE(i, n)
    dx[i] = tw_activate_grad(a, dy[i], y[i]);
}

/* out[n] = in[n] * the dropout multiplier of element i of draw seed (the CPU's mask, bit for bit). */
__global__ void k_dropout(float *out, const float *in, size_t n, float rate, uint64_t seed)
{
    GRID_STRIDE(i, n)
    out[i] = in[i] * tw_dropout_scale(seed, (uint64_t)i, rate);
}

tw_status tw_cuda_act_fwd(void *ctx, tw_activation a, tw_tensor y, tw_tensor x, size_t n,
                          tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    TW_CUDA_LAUNCH(C(ctx), err, k_act_fwd, blocks_for(C(ctx), n), THREADS, a, tw_cuda_f32(y),
                   tw_cuda_f32(x), n);
    return TW_OK;
}

tw_status tw_cuda_act_bwd(void *ctx, tw_activation a, tw_tensor dx, tw_tensor dy, tw_tensor y,
                          size_t n, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    TW_CUDA_LAUNCH(C(ctx), err, k_act_bwd, blocks_for(C(ctx), n), THREADS, a, tw_cuda_f32(dx),
                   tw_cuda_f32(dy), tw_cuda_f32(y), n);
    return TW_OK;
}

tw_status tw_cuda_dropout_fwd(void *ctx, tw_tensor y, tw_tensor x, size_t n, float rate,
                              uint64_t seed, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    TW_CUDA_LAUNCH(C(ctx), err, k_dropout, blocks_for(C(ctx), n), THREADS, tw_cuda_f32(y),
                   tw_cuda_f32(x), n, rate, seed);
    return TW_OK;
}

/* The same mask and scale applied to the gradient: dx = dropout(dy) with the forward's seed. */
tw_status tw_cuda_dropout_bwd(void *ctx, tw_tensor dx, tw_tensor dy, size_t n, float rate,
                              uint64_t seed, tw_error *err)
{
    return tw_cuda_dropout_fwd(ctx, dx, dy, n, rate, seed, err);
}

/* ---- windows (convolution and pooling), NDHWC; 2-D is depth 1 ---- */

/* cols[rows, taps, in_c] from x, one thread per cols value (coalesced writes). */
__global__ void k_im2col(tw_window w, float *cols, const float *x, size_t total)
{
    GRID_STRIDE(i, total)
    cols[i] = tw_cuda_im2col_at(&w, x, i);
}

/* dx[batch, in_d, in_h, in_w, in_c] from cols, one thread per input: a gather (no atomics) that adds
 * in the CPU's order. */
__global__ void k_col2im(tw_window w, float *dx, const float *cols, size_t total)
{
    GRID_STRIDE(i, total)
    dx[i] = tw_cuda_col2im_at(&w, cols, i);
}

/* y[rows, in_c] and argmax[rows, in_c] (int32) from x, one thread per output. */
__global__ void k_maxpool_fwd(tw_window w, float *y, int32_t *argmax, const float *x, size_t total)
{
    GRID_STRIDE(j, total)
    tw_cuda_maxpool_at(&w, x, j, &y[j], &argmax[j]);
}

/* dx[batch, in_d, in_h, in_w, in_c] from dy and argmax [rows, in_c], one thread per input (a gather). */
__global__ void k_maxpool_bwd(tw_window w, float *dx, const float *dy, const int32_t *argmax,
                              size_t total)
{
    GRID_STRIDE(i, total)
    dx[i] = tw_cuda_maxpool_grad_at(&w, dy, argmax, i);
}

__global__ void k_avgpool_fwd(tw_window w, float *y, const float *x, size_t total)
{
    GRID_STRIDE(j, total)
    y[j] = tw_cuda_avgpool_at(&w, x, j);
}

__global__ void k_avgpool_bwd(tw_window w, float *dx, const float *dy, size_t total)
{
    GRID_STRIDE(i, total)
    dx[i] = tw_cuda_avgpool_grad_at(&w, dy, i);
}

static size_t window_rows(const tw_window *w)
{
    return (size_t)w->batch * w->out_d * w->out_h * w->out_w;
}

static size_t window_inputs(const tw_window *w)
{
    return (size_t)w->batch * w->in_d * w->in_h * w->in_w * w->in_c;
}

tw_status tw_cuda_im2col(void *ctx, const tw_window *w, tw_tensor cols, tw_tensor x, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t total = window_rows(w) * w->k_d * w->k_h * w->k_w * w->in_c;
    TW_CUDA_LAUNCH(C(ctx), err, k_im2col, blocks_for(C(ctx), total), THREADS, *w,
                   tw_cuda_f32(cols), tw_cuda_f32(x), total);
    return TW_OK;
}

tw_status tw_cuda_col2im(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor cols, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t total = window_inputs(w);
    TW_CUDA_LAUNCH(C(ctx), err, k_col2im, blocks_for(C(ctx), total), THREADS, *w, tw_cuda_f32(dx),
                   tw_cuda_f32(cols), total);
    return TW_OK;
}

tw_status tw_cuda_maxpool_fwd(void *ctx, const tw_window *w, tw_tensor y, tw_tensor argmax,
                              tw_tensor x, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t total = window_rows(w) * w->in_c;
    TW_CUDA_LAUNCH(C(ctx), err, k_maxpool_fwd, blocks_for(C(ctx), total), THREADS, *w,
                   tw_cuda_f32(y), tw_cuda_i32(argmax), tw_cuda_f32(x), total);
    return TW_OK;
}

tw_status tw_cuda_maxpool_bwd(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy,
                              tw_tensor argmax, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t total = window_inputs(w);
    TW_CUDA_LAUNCH(C(ctx), err, k_maxpool_bwd, blocks_for(C(ctx), total), THREADS, *w,
                   tw_cuda_f32(dx), tw_cuda_f32(dy), tw_cuda_i32(argmax), total);
    return TW_OK;
}

/* ---- losses ---- */

/* The larger of two floats, the CPU's way (a > b ? a : b keeps the first on a tie). */
struct max_op {
    __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

/* One block per row r: probs[r, classes] = softmax(logits[r, classes]) with the max-shift, loss[r] =
 * log(sum exp(x - m)) - (x[label] - m) (docs/formats.md §6.3), or its label-smoothed form (e > 0: the sum
 * of x - m too); max and sums by cub::BlockReduce. A bad label gives a NaN loss and a report in flag. */
__global__ void __launch_bounds__(ROW_THREADS) k_xent_fwd(float *loss, float *probs,
                                                          const float *logits, const int32_t *labels,
                                                          int classes, float e, int *flag)
{
    __shared__ typename row_reduce::TempStorage tmp;
    __shared__ float shared_m, shared_s, shared_d;
    int r = blockIdx.x;
    const float *x = logits + (size_t)r * classes;
    float *p = probs + (size_t)r * classes;
    float m = x[0];
    for (int j = threadIdx.x; j < classes; j += ROW_THREADS)
        m = x[j] > m ? x[j] : m;
    m = row_reduce(tmp).Reduce(m, max_op());
    if (threadIdx.x == 0)
        shared_m = m;
    __syncthreads();
    m = shared_m;
    float s = 0.0f, d = 0.0f;
    for (int j = threadIdx.x; j < classes; j += ROW_THREADS) {
        float ex = tw_xent_exp(x[j], m);
        p[j] = ex;
        s += ex;
        d += x[j] - m;
    }
    s = row_reduce(tmp).Sum(s);
    if (threadIdx.x == 0)
        shared_s = s;
    __syncthreads();
    s = shared_s;
    if (e != 0.0f) {
        d = row_reduce(tmp).Sum(d);
        if (threadIdx.x == 0)
            shared_d = d;
        __syncthreads();
        d = shared_d;
    }
    for (int j = threadIdx.x; j < classes; j += ROW_THREADS)
        p[j] /= s; /* the thread that wrote p[j] above */
    if (threadIdx.x == 0) {
        int label = labels[r];
        if (label < 0 || label >= classes) {
            report_label(flag, r, label, classes);
            loss[r] = __int_as_float(0x7fc00000); /* NaN */
        } else {
            loss[r] = e == 0.0f ? tw_xent_loss(s, x[label], m) : tw_xent_smooth_loss(s, x[label], m, d, e, classes);
        }
    }
}

/* dlogits[rows, classes] = (probs - targets) * scale, element-wise, the targets smoothed by e; dlogits
 * may be probs. */
__global__ void k_xent_bwd(float *dlogits, const float *probs, const int32_t *labels, int classes,
                           float scale, float e, size_t n, int *flag)
{
    GRID_STRIDE(i, n) {
        size_t r = i / (size_t)classes;
        int j = (int)(i % (size_t)classes);
        int label = labels[r];
        if ((label < 0 || label >= classes) && j == 0)
            report_label(flag, (int)r, label, classes);
        dlogits[i] = tw_xent_grad(probs[i], j == label, scale, e, classes);
    }
}

/* loss[rows] = sum over c = 0..cols-1 (in order, as the CPU) of (pred - target)^2; one thread per row. */
__global__ void k_mse_fwd(float *loss, const float *pred, const float *target, int rows, int cols)
{
    GRID_STRIDE(r, (size_t)rows) {
        const float *p = pred + r * cols, *t = target + r * cols;
        float s = 0.0f;
        for (int c = 0; c < cols; c++)
            s += tw_sq_err(p[c], t[c]);
        loss[r] = s;
    }
}

/* dpred[n] = 2 (pred - target) scale; dpred may be pred. */
__global__ void k_mse_bwd(float *dpred, const float *pred, const float *target, size_t n, float scale)
{
    GRID_STRIDE(i, n)
    dpred[i] = tw_sq_err_grad(pred[i], target[i], scale);
}

tw_status tw_cuda_xent_fwd(void *ctx, tw_tensor loss, tw_tensor probs, tw_tensor logits,
                           tw_tensor labels, int rows, int classes, float smoothing, tw_error *err)
{
    tw_cuda_ctx *c = C(ctx);
    TW_TRY(tw_cuda_enter(c, err));
    TW_CUDA_LAUNCH(c, err, k_xent_fwd, rows, ROW_THREADS, tw_cuda_f32(loss), tw_cuda_f32(probs),
                   tw_cuda_f32(logits), tw_cuda_i32(labels), classes, smoothing, c->flag_dev);
    return TW_OK;
}

tw_status tw_cuda_xent_bwd(void *ctx, tw_tensor dlogits, tw_tensor probs, tw_tensor labels, int rows,
                           int classes, float scale, float smoothing, tw_error *err)
{
    tw_cuda_ctx *c = C(ctx);
    TW_TRY(tw_cuda_enter(c, err));
    size_t n = (size_t)rows * classes;
    TW_CUDA_LAUNCH(c, err, k_xent_bwd, blocks_for(c, n), THREADS, tw_cuda_f32(dlogits),
                   tw_cuda_f32(probs), tw_cuda_i32(labels), classes, scale, smoothing, n, c->flag_dev);
    return TW_OK;
}

tw_status tw_cuda_mse_fwd(void *ctx, tw_tensor loss, tw_tensor pred, tw_tensor target, int rows,
                          int cols, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    TW_CUDA_LAUNCH(C(ctx), err, k_mse_fwd, blocks_for(C(ctx), (size_t)rows), THREADS,
                   tw_cuda_f32(loss), tw_cuda_f32(pred), tw_cuda_f32(target), rows, cols);
    return TW_OK;
}

tw_status tw_cuda_mse_bwd(void *ctx, tw_tensor dpred, tw_tensor pred, tw_tensor target, size_t n,
                          float scale, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    TW_CUDA_LAUNCH(C(ctx), err, k_mse_bwd, blocks_for(C(ctx), n), THREADS, tw_cuda_f32(dpred),
                   tw_cuda_f32(pred), tw_cuda_f32(target), n, scale);
    return TW_OK;
}

/* ---- sum of squares ---- */

/* x -> x^2 in double, as the CPU's (double)x * x. */
struct square_to_double {
    __host__ __device__ double operator()(float v) const { return (double)v * (double)v; }
};

/* out[1] = (float)*sum. */
__global__ void k_store_sum(float *out, const double *sum) { *out = (float)*sum; }

enum { SUM_SLOT = 256 }; /* bytes of scratch before CUB's temporary storage (keeps it aligned) */

tw_status tw_cuda_sum_squares(void *ctx, tw_tensor out, tw_tensor x, size_t n, tw_error *err)
{
    tw_cuda_ctx *c = C(ctx);
    TW_TRY(tw_cuda_enter(c, err));
    const float *px = tw_cuda_f32(x);
    size_t temp = 0;
    TW_CUDA_CHECK(c, cub::DeviceReduce::TransformReduce(NULL, temp, px, (double *)NULL, n,
                                                        cuda::std::plus<double>(),
                                                        square_to_double(), 0.0, c->stream),
                  err);
    void *scratch;
    TW_TRY(tw_cuda_scratch(c, SUM_SLOT + temp, &scratch, err));
    double *sum = (double *)scratch;
    TW_CUDA_CHECK(c, cub::DeviceReduce::TransformReduce((char *)scratch + SUM_SLOT, temp, px, sum, n,
                                                        cuda::std::plus<double>(),
                                                        square_to_double(), 0.0, c->stream),
                  err);
    TW_CUDA_LAUNCH(c, err, k_store_sum, 1, 1, tw_cuda_f32(out), sum);
    return TW_OK;
}

/* ---- graph joins, average pooling, batch normalisation ---- */

__global__ void k_add(float *y, const float *a, const float *c, size_t n)
{
    GRID_STRIDE(i, n)
    y[i] = a[i] + c[i];
}

tw_status tw_cuda_add(void *ctx, tw_tensor y, tw_tensor a, tw_tensor c, size_t n, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    TW_CUDA_LAUNCH(C(ctx), err, k_add, blocks_for(C(ctx), n), THREADS, tw_cuda_f32(y), tw_cuda_f32(a),
                   tw_cuda_f32(c), n);
    return TW_OK;
}

__global__ void k_copy_cols(float *dst, int dst_cols, int dst_at, const float *src, int src_cols, int src_at,
                            int cols, int accumulate, size_t n)
{
    GRID_STRIDE(i, n) {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        float v = src[r * src_cols + src_at + c];
        float *d = &dst[r * dst_cols + dst_at + c];
        *d = accumulate ? *d + v : v;
    }
}

tw_status tw_cuda_copy_cols(void *ctx, tw_tensor dst, int dst_cols, int dst_at, tw_tensor src, int src_cols,
                            int src_at, int rows, int cols, int accumulate, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t n = (size_t)rows * cols;
    TW_CUDA_LAUNCH(C(ctx), err, k_copy_cols, blocks_for(C(ctx), n), THREADS, tw_cuda_f32(dst), dst_cols, dst_at,
                   tw_cuda_f32(src), src_cols, src_at, cols, accumulate, n);
    return TW_OK;
}

tw_status tw_cuda_avgpool_fwd(void *ctx, const tw_window *w, tw_tensor y, tw_tensor x, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t total = window_rows(w) * w->in_c;
    TW_CUDA_LAUNCH(C(ctx), err, k_avgpool_fwd, blocks_for(C(ctx), total), THREADS, *w, tw_cuda_f32(y),
                   tw_cuda_f32(x), total);
    return TW_OK;
}

tw_status tw_cuda_avgpool_bwd(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    size_t total = window_inputs(w);
    TW_CUDA_LAUNCH(C(ctx), err, k_avgpool_bwd, blocks_for(C(ctx), total), THREADS, *w, tw_cuda_f32(dx),
                   tw_cuda_f32(dy), total);
    return TW_OK;
}

typedef cub::BlockReduce<double, ROW_THREADS> channel_reduce;

/* One block per channel c: the batch's mean and 1 / sqrt(biased variance + eps) into stats (two passes in
 * double, the sums' order CUB's; the CPU sums about row 0 in one pass: the two agree to rounding), and with
 * moving (TRAIN_UPDATE) the moving statistics. */
__global__ void __launch_bounds__(ROW_THREADS) k_bn_stats(tw_bn p, const float *x, float *stats, float *moving)
{
    __shared__ typename channel_reduce::TempStorage tmp;
    __shared__ double shared_mean;
    int c = blockIdx.x, C = p.channels;
    double s = 0.0;
    for (int r = threadIdx.x; r < p.rows; r += ROW_THREADS)
        s += x[(size_t)r * C + c];
    s = channel_reduce(tmp).Sum(s);
    if (threadIdx.x == 0)
        shared_mean = s / p.rows;
    __syncthreads();
    double mean = shared_mean, q = 0.0;
    for (int r = threadIdx.x; r < p.rows; r += ROW_THREADS) {
        double d = x[(size_t)r * C + c] - mean;
        q += d * d;
    }
    q = channel_reduce(tmp).Sum(q);
    if (threadIdx.x == 0) {
        stats[c] = (float)mean;
        stats[C + c] = (float)(1.0 / sqrt(q / p.rows + (double)p.epsilon));
        if (moving) {
            moving[c] = tw_bn_moving(moving[c], (float)mean, p.momentum);
            moving[C + c] = tw_bn_moving(moving[C + c], (float)(q / p.rows), p.momentum);
        }
    }
}

/* INFER's statistics from the moving ones (the CPU's formula). */
__global__ void k_bn_moving_stats(tw_bn p, const float *moving, float *stats)
{
    GRID_STRIDE(c, (size_t)p.channels) {
        stats[c] = moving[c];
        stats[p.channels + c] = 1.0f / sqrtf(moving[p.channels + c] + p.epsilon);
    }
}

__global__ void k_bn_norm(tw_bn p, float *y, const float *x, const float *gamma, const float *beta,
                          const float *stats, size_t n)
{
    GRID_STRIDE(i, n) {
        int c = (int)(i % (size_t)p.channels);
        y[i] = tw_activate(p.activation, tw_bn_norm(x[i], stats[c], stats[p.channels + c], gamma[c], beta[c]));
    }
}

tw_status tw_cuda_bn_fwd(void *ctx, const tw_bn *p, tw_tensor y, tw_tensor x, tw_tensor gamma, tw_tensor beta,
                         tw_tensor stats, tw_tensor moving, tw_error *err)
{
    tw_cuda_ctx *c = C(ctx);
    TW_TRY(tw_cuda_enter(c, err));
    size_t n = (size_t)p->rows * p->channels;
    if (p->mode == TW_BN_INFER)
        TW_CUDA_LAUNCH(c, err, k_bn_moving_stats, blocks_for(c, (size_t)p->channels), THREADS, *p,
                       tw_cuda_f32(moving), tw_cuda_f32(stats));
    else
        TW_CUDA_LAUNCH(c, err, k_bn_stats, p->channels, ROW_THREADS, *p, tw_cuda_f32(x), tw_cuda_f32(stats),
                       p->mode == TW_BN_TRAIN_UPDATE ? tw_cuda_f32(moving) : (float *)nullptr);
    TW_CUDA_LAUNCH(c, err, k_bn_norm, blocks_for(c, n), THREADS, *p, tw_cuda_f32(y), tw_cuda_f32(x),
                   tw_cuda_f32(gamma), tw_cuda_f32(beta), tw_cuda_f32(stats), n);
    return TW_OK;
}

/* One block per channel: dbeta = sum dy, dgamma = sum dy xhat (double). */
__global__ void __launch_bounds__(ROW_THREADS) k_bn_param_grads(tw_bn p, float *dgamma, float *dbeta,
                                                                const float *dy, const float *x,
                                                                const float *stats)
{
    __shared__ typename channel_reduce::TempStorage tmp;
    int c = blockIdx.x, C = p.channels;
    double sb = 0.0, sg = 0.0;
    for (int r = threadIdx.x; r < p.rows; r += ROW_THREADS) {
        size_t i = (size_t)r * C + c;
        sb += dy[i];
        sg += (double)dy[i] * ((x[i] - stats[c]) * stats[C + c]);
    }
    sb = channel_reduce(tmp).Sum(sb);
    __syncthreads();
    sg = channel_reduce(tmp).Sum(sg);
    if (threadIdx.x == 0) {
        dbeta[c] = (float)sb;
        dgamma[c] = (float)sg;
    }
}

__global__ void k_bn_input_grad(tw_bn p, float *dx, const float *dy, const float *x, const float *gamma,
                                const float *stats, const float *dgamma, const float *dbeta, size_t n)
{
    GRID_STRIDE(i, n) {
        int c = (int)(i % (size_t)p.channels);
        dx[i] = tw_bn_grad(dy[i], x[i], stats[c], stats[p.channels + c], gamma[c], dbeta[c], dgamma[c],
                           (float)p.rows);
    }
}

tw_status tw_cuda_bn_bwd(void *ctx, const tw_bn *p, tw_tensor dx, tw_tensor dgamma, tw_tensor dbeta, tw_tensor dy,
                         tw_tensor x, tw_tensor gamma, tw_tensor stats, tw_error *err)
{
    tw_cuda_ctx *c = C(ctx);
    TW_TRY(tw_cuda_enter(c, err));
    TW_CUDA_LAUNCH(c, err, k_bn_param_grads, p->channels, ROW_THREADS, *p, tw_cuda_f32(dgamma),
                   tw_cuda_f32(dbeta), tw_cuda_f32(dy), tw_cuda_f32(x), tw_cuda_f32(stats));
    if (!dx.buf)
        return TW_OK;
    size_t n = (size_t)p->rows * p->channels;
    TW_CUDA_LAUNCH(c, err, k_bn_input_grad, blocks_for(c, n), THREADS, *p, tw_cuda_f32(dx), tw_cuda_f32(dy),
                   tw_cuda_f32(x), tw_cuda_f32(gamma), tw_cuda_f32(stats), tw_cuda_f32(dgamma),
                   tw_cuda_f32(dbeta), n);
    return TW_OK;
}

/* ---- the fused update ---- */

/* One pass over the flat arenas [n]: tw_cuda_update_at for every element (L2, the optimizer step,
 * the EMA), with the formulas and the order of the CPU's update. */
__global__ void k_update(tw_update u, float *w, const float *g, float *s1, float *s2, float *ema,
                         size_t n)
{
    GRID_STRIDE(i, n)
    tw_cuda_update_at(&u, w, g, s1, s2, ema, i);
}

tw_status tw_cuda_update(void *ctx, const tw_update *u, tw_tensor params, tw_tensor grads,
                         tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n, tw_error *err)
{
    TW_TRY(tw_cuda_enter(C(ctx), err));
    /* views the kind does not use may be empty: never dereferenced, passed as NULL */
    float *s1 = u->kind != TW_OPT_SGD ? tw_cuda_f32(slot1) : NULL;
    float *s2 = u->kind == TW_OPT_ADAM ? tw_cuda_f32(slot2) : NULL;
    float *e = u->ema ? tw_cuda_f32(ema) : NULL;
    TW_CUDA_LAUNCH(C(ctx), err, k_update, blocks_for(C(ctx), n), THREADS, *u, tw_cuda_f32(params),
                   tw_cuda_f32(grads), s1, s2, e, n);
    return TW_OK;
}

/* ---- probe ---- */

tw_status tw_cuda_kernels_probe(tw_cuda_ctx *ctx, tw_error *err)
{
    cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, k_update);
    if (e == cudaSuccess)
        return TW_OK;
    (void)cudaGetLastError();
    int major = 0, minor = 0;
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->device);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx->device);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction ||
        e == cudaErrorUnsupportedPtxVersion)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "%s: compute capability %d.%d has no kernels in this build "
                            "(CMAKE_CUDA_ARCHITECTURES %s; reconfigure with the device's "
                            "architecture): %s", ctx->name, major, minor, TW_CUDA_ARCHS,
                            cudaGetErrorString(e));
    return tw_cuda_fail(err, ctx, e, "cudaFuncGetAttributes(&attr, k_update)", __FILE__, __LINE__);
}
