/* cuda_backend.cu — the CUDA backend's instance, memory, GEMM and waiting, and its
 * operation table.
 *
 * Owns: struct tw_cuda_ctx's lifetime (cudaSetDevice, one compute stream, one copy stream, one cuBLAS
 * handle bound to the compute stream, the label-error flag, the grow-only scratch), buffers
 * (cudaMalloc), page-locked host memory (cudaHostAlloc), uploads and downloads (cudaMemcpyAsync on the
 * compute stream; from page-locked memory on the copy stream, ordered by events), GEMM (cublasSgemm,
 * FP32, or TF32 on request), step graphs (stream capture, cudaGraphInstantiate / cudaGraphExecUpdate,
 * cudaGraphLaunch),
 * the wait behind download and sync (which polls NCCL while an all-reduce is in flight, so a failed
 * collective aborts instead of hanging), the device count, and tw_cuda_backend_ops. cuBLAS does the
 * GEMMs because no kernel of ours would match it. Does not own the other compute ops (cuda_kernels.cu),
 * NCCL (cuda_allreduce.cu), or the error mapping, entering an instance and its scratch
 * (cuda_context.cu, which every .cu uses: the arrows between the three files point one way).
 *
 * Thread-safety: as backend.h says, one instance is driven by one thread at a time, not always the same
 * one (the trainer's tower threads change every step), so every op first makes the instance's device
 * current on the calling thread. */
#include "cuda_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- device count ---- */

int tw_cuda_device_count(char *why, size_t why_size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    if (n == 0 && why && why_size) {
        if (e == cudaErrorInsufficientDriver)
            snprintf(why, why_size, "no NVIDIA driver is loaded, or it is older than this build's CUDA "
                                    "runtime %d.%d (%s)", CUDART_VERSION / 1000,
                     CUDART_VERSION % 1000 / 10, cudaGetErrorName(e));
        else if (e == cudaSuccess || e == cudaErrorNoDevice)
            snprintf(why, why_size, "the NVIDIA driver reports no CUDA-capable GPU (is the container "
                                    "started with the NVIDIA runtime and a GPU?)");
        else
            snprintf(why, why_size, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                     cudaGetErrorName(e));
    }
    return n;
}

tw_status tw_cuda_device_info(int device, tw_device_info *out, tw_error *err)
{
    char why[300];
    int count = tw_cuda_device_count(why, sizeof why);
    if (count == 0)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "no CUDA device: %s", why);
    if (device < 0 || device >= count)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "no CUDA device %d (this machine has %d)",
                            device, count);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e == cudaSuccess)
        e = cudaDriverGetVersion(&out->driver_version);
    if (e == cudaSuccess)
        e = cudaRuntimeGetVersion(&out->runtime_version);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "cuda:%d: cannot read its properties: %s (%s)",
                            device, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, p.name);
    out->memory_bytes = p.totalGlobalMem;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    return TW_OK;
}

/* ---- lifecycle ---- */

/* Frees what ctx holds, tolerating a half-built ctx and a device that already failed (errors are
 * ignored: destroy cannot report them). */
static void cuda_destroy(void *p)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    if (!ctx)
        return;
    tw_cuda_group_leave(ctx);
    if (cudaSetDevice(ctx->device) == cudaSuccess) {
        if (ctx->capturing) {
            cudaGraph_t g = NULL;
            if (cudaStreamEndCapture(ctx->stream, &g) == cudaSuccess && g)
                (void)cudaGraphDestroy(g);
        }
        if (ctx->copy)
            (void)cudaStreamSynchronize(ctx->copy);
        if (ctx->stream) {
            if (ctx->scratch)
                (void)cudaFreeAsync(ctx->scratch, ctx->stream);
            (void)cudaStreamSynchronize(ctx->stream);
        }
        for (int i = 0; i < TW_GRAPH_SLOTS; i++)
            if (ctx->exec[i])
                (void)cudaGraphExecDestroy(ctx->exec[i]);
        if (ctx->before_copy)
            (void)cudaEventDestroy(ctx->before_copy);
        if (ctx->after_copy)
            (void)cudaEventDestroy(ctx->after_copy);
        if (ctx->blas)
            (void)cublasDestroy(ctx->blas);
        if (ctx->stream)
            (void)cudaStreamDestroy(ctx->stream);
        if (ctx->copy)
            (void)cudaStreamDestroy(ctx->copy);
        if (ctx->flag_dev)
            (void)cudaFree(ctx->flag_dev);
        if (ctx->flag)
            (void)cudaFreeHost((void *)ctx->flag);
    }
    (void)cudaGetLastError();
    free(ctx);
}

/* The part of create that can fail after ctx exists; the caller destroys ctx on failure. */
static tw_status setup(tw_cuda_ctx *ctx, tw_error *err)
{
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUDA_CHECK(ctx, cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount,
                                              ctx->device), err);
    int pools = 0;
    TW_CUDA_CHECK(ctx, cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ctx->device),
                  err);
    if (!pools)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "%s: the device or driver lacks stream-ordered memory pools "
                            "(cudaMallocAsync), which this backend needs", ctx->name);
    TW_TRY(tw_cuda_kernels_probe(ctx, err));
    TW_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), err);
    TW_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking), err);
    TW_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&ctx->before_copy, cudaEventDisableTiming), err);
    TW_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&ctx->after_copy, cudaEventDisableTiming), err);
    TW_CUBLAS_CHECK(ctx, cublasCreate(&ctx->blas), err);
    TW_CUBLAS_CHECK(ctx, cublasSetStream(ctx->blas, ctx->stream), err);
    TW_CUBLAS_CHECK(ctx, cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH), err);
    void *flag = NULL;
    TW_CUDA_CHECK(ctx, cudaMallocHost(&flag, 4 * sizeof(int)), err);
    ctx->flag = (volatile int *)flag;
    memset(flag, 0, 4 * sizeof(int));
    TW_CUDA_CHECK(ctx, cudaMalloc((void **)&ctx->flag_dev, 4 * sizeof(int)), err);
    TW_CUDA_CHECK(ctx, cudaMemsetAsync(ctx->flag_dev, 0, 4 * sizeof(int), ctx->stream), err);
    return TW_OK;
}

static tw_status cuda_create(int device, void **out, char *name, size_t name_size, tw_error *err)
{
    char why[200] = "";
    int count = tw_cuda_device_count(why, sizeof why);
    if (count == 0)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "tw_backend_create: no CUDA device: %s; no CUDA backend can run here "
                            "(use --backend cpu or auto)", why);
    if (device < 0 || device >= count)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "tw_backend_create: no CUDA device %d: this machine has %d (cuda:0 to "
                            "cuda:%d); one tower needs one GPU", device, count, count - 1);
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "tw_backend_create: out of memory");
    ctx->device = device;
    snprintf(ctx->name, sizeof ctx->name, "cuda:%d", device);
    tw_status s = setup(ctx, err);
    if (s != TW_OK) {
        cuda_destroy(ctx);
        return s;
    }
    snprintf(name, name_size, "%s", ctx->name);
    *out = ctx;
    return TW_OK;
}

/* ---- memory ---- */

static tw_status cuda_alloc(void *p, size_t bytes, tw_buffer **out, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(tw_cuda_enter(ctx, err));
    tw_buffer *b = (tw_buffer *)malloc(sizeof *b);
    if (!b)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "%s: out of host memory", ctx->name);
    void *data = NULL;
    cudaError_t e = cudaMalloc(&data, bytes);
    if (e != cudaSuccess) {
        free(b);
        char stmt[80];
        snprintf(stmt, sizeof stmt, "cudaMalloc of %zu bytes", bytes);
        return tw_cuda_fail(err, ctx, e, stmt, __FILE__, __LINE__);
    }
    b->bytes = bytes;
    b->data = data;
    *out = b;
    return TW_OK;
}

/* cudaFree waits for the device; buffers are freed at teardown, never inside a step. */
static void cuda_free(void *p, tw_buffer *b)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    if (cudaSetDevice(ctx->device) == cudaSuccess)
        (void)cudaFree(b->data);
    (void)cudaGetLastError();
    free(b);
}

/* TW_ERR_INVALID when ctx is capturing a graph: op is not part of what a graph may hold. */
static tw_status refuse_in_capture(const tw_cuda_ctx *ctx, const char *op, tw_error *err)
{
    if (!ctx->capturing)
        return TW_OK;
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                        "%s: %s while a graph is being captured (graphs hold device work only)",
                        ctx->name, op);
}

/* 1 when p is page-locked host memory (cudaHostAlloc / cudaMallocHost); pageable memory is
 * cudaMemoryTypeUnregistered. */
static int is_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Host to device. From pageable host memory (the engine's malloc'd arenas) the copy is queued on the
 * compute stream and the runtime has staged src before cudaMemcpyAsync returns, so the caller may reuse
 * it at once. From page-locked memory (alloc_host: the trainer's batches) the copy runs on the copy
 * stream, after everything queued on the compute stream so far (event before_copy: it may overwrite a
 * buffer earlier ops read) and before everything queued after it (event after_copy), and returns before
 * the copy is done: src must stay unchanged until the next download or sync of ctx (backend.h). */
static tw_status cuda_upload(void *p, tw_tensor dst, const void *src, size_t bytes, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(refuse_in_capture(ctx, "upload", err));
    TW_TRY(tw_cuda_enter(ctx, err));
    void *to = (char *)dst.buf->data + dst.offset;
    if (!is_pinned(src)) {
        TW_CUDA_CHECK(ctx, cudaMemcpyAsync(to, src, bytes, cudaMemcpyHostToDevice, ctx->stream), err);
        return TW_OK;
    }
    TW_CUDA_CHECK(ctx, cudaEventRecord(ctx->before_copy, ctx->stream), err);
    TW_CUDA_CHECK(ctx, cudaStreamWaitEvent(ctx->copy, ctx->before_copy, 0), err);
    TW_CUDA_CHECK(ctx, cudaMemcpyAsync(to, src, bytes, cudaMemcpyHostToDevice, ctx->copy), err);
    TW_CUDA_CHECK(ctx, cudaEventRecord(ctx->after_copy, ctx->copy), err);
    TW_CUDA_CHECK(ctx, cudaStreamWaitEvent(ctx->stream, ctx->after_copy, 0), err);
    return TW_OK;
}

/* Waits for everything issued on ctx: a plain stream synchronize, or, after an all-reduce, a poll of
 * the stream and of the NCCL communicator (an asynchronous NCCL error aborts the group instead of
 * waiting forever). Then reports a label error a loss kernel flagged. */
static tw_status wait_stream(tw_cuda_ctx *ctx, tw_error *err)
{
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUDA_CHECK(ctx, cudaMemcpyAsync((void *)ctx->flag, ctx->flag_dev, 4 * sizeof(int),
                                       cudaMemcpyDeviceToHost, ctx->stream), err);
    if (!ctx->nccl_pending || !ctx->group) {
        TW_CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream), err);
    } else {
        for (;;) {
            cudaError_t e = cudaStreamQuery(ctx->stream);
            if (e == cudaSuccess)
                break;
            if (e != cudaErrorNotReady)
                return tw_cuda_fail(err, ctx, e, "cudaStreamQuery(ctx->stream)", __FILE__, __LINE__);
            TW_TRY(tw_cuda_group_poll(ctx, err));
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        (void)cudaGetLastError(); /* "not ready" was an answer, not an error to report later */
    }
    ctx->nccl_pending = 0;
    if (ctx->flag[0]) {
        int row = ctx->flag[1], label = ctx->flag[2], classes = ctx->flag[3];
        ctx->flag[0] = 0;
        TW_CUDA_CHECK(ctx, cudaMemsetAsync(ctx->flag_dev, 0, 4 * sizeof(int), ctx->stream), err);
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "%s: label %d of row %d is outside the valid range [0, %d)", ctx->name,
                            label, row, classes);
    }
    return TW_OK;
}

/* Device to host: queued behind every op issued before it, then waited for. A copy into pageable
 * memory blocks the host until the stream reaches it, so after an all-reduce the stream is first
 * waited for by polling (a failed collective must not block the copy forever). */
static tw_status cuda_download(void *p, void *dst, tw_tensor src, size_t bytes, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(refuse_in_capture(ctx, "download", err));
    if (ctx->nccl_pending)
        TW_TRY(wait_stream(ctx, err));
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUDA_CHECK(ctx, cudaMemcpyAsync(dst, (const char *)src.buf->data + src.offset, bytes,
                                       cudaMemcpyDeviceToHost, ctx->stream), err);
    return wait_stream(ctx, err);
}

static tw_status cuda_zero(void *p, tw_tensor t, size_t bytes, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUDA_CHECK(ctx, cudaMemsetAsync((char *)t.buf->data + t.offset, 0, bytes, ctx->stream), err);
    return TW_OK;
}

static tw_status cuda_sync(void *p, tw_error *err)
{
    TW_TRY(refuse_in_capture((tw_cuda_ctx *)p, "sync", err));
    return wait_stream((tw_cuda_ctx *)p, err);
}

/* ---- page-locked host memory ---- */

/* Portable: the trainer's one host batch is uploaded to every tower's GPU. */
static tw_status cuda_alloc_host(void *p, size_t bytes, void **out, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(tw_cuda_enter(ctx, err));
    cudaError_t e = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        *out = NULL;
        char stmt[80];
        snprintf(stmt, sizeof stmt, "cudaHostAlloc of %zu bytes", bytes);
        return tw_cuda_fail(err, ctx, e, stmt, __FILE__, __LINE__);
    }
    return TW_OK;
}

/* cudaFreeHost waits for the device; called at teardown, after the last step. */
static void cuda_free_host(void *p, void *mem)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    if (cudaSetDevice(ctx->device) == cudaSuccess)
        (void)cudaFreeHost(mem);
    (void)cudaGetLastError();
}

/* ---- math mode ---- */

/* TF32 tensor-core GEMMs (inputs rounded to a 10-bit mantissa, fp32 accumulation) or full FP32; no
 * Winograd convolutions here (the engine convolves through im2col + cuBLAS). */
static tw_status cuda_set_math(void *p, const tw_math *m, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUBLAS_CHECK(ctx, cublasSetMathMode(ctx->blas, m->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                              : CUBLAS_DEFAULT_MATH), err);
    return TW_OK;
}

/* ---- step graphs ----
 *
 * A graph is re-recorded at every capture and, from the second capture of a slot on, applied to the
 * slot's executable graph with cudaGraphExecUpdate: the update copies the new kernel arguments (this
 * step's learning rate, EMA decay, Adam alpha, dropout seeds) into the instantiated graph without
 * instantiating it again. The kernels stay as they are (no device-side "step parameters" to read), so
 * a replay runs exactly the arguments an eager step would pass, and the results are bit-identical.
 * When the update is refused (the ops or their shapes changed) the slot is instantiated anew.
 * Capture mode ThreadLocal: other threads (other towers) keep calling the runtime freely. */

static tw_status cuda_capture_begin(void *p, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    if (ctx->capturing)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: capture_begin while capturing",
                            ctx->name);
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUDA_CHECK(ctx, cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal), err);
    ctx->capturing = 1;
    return TW_OK;
}

/* The executable graph of slot from graph g (which the caller destroys). */
static tw_status install(tw_cuda_ctx *ctx, int slot, cudaGraph_t g, tw_error *err)
{
    if (ctx->exec[slot]) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(ctx->exec[slot], g, &info) == cudaSuccess)
            return TW_OK;
        (void)cudaGetLastError(); /* the topology changed: instantiate anew */
        (void)cudaGraphExecDestroy(ctx->exec[slot]);
        ctx->exec[slot] = NULL;
    }
    TW_CUDA_CHECK(ctx, cudaGraphInstantiate(&ctx->exec[slot], g, 0), err);
    return TW_OK;
}

static tw_status cuda_capture_end(void *p, int slot, int ok, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    if (!ctx->capturing)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: capture_end without capture_begin",
                            ctx->name);
    TW_TRY(tw_cuda_enter(ctx, err));
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(ctx->stream, &g);
    ctx->capturing = 0;
    tw_status s = TW_OK;
    if (e != cudaSuccess && ok)
        s = tw_cuda_fail(err, ctx, e, "cudaStreamEndCapture(ctx->stream, &g)", __FILE__, __LINE__);
    else if (e != cudaSuccess)
        (void)cudaGetLastError(); /* dropping a record that an earlier failure invalidated */
    else if (ok)
        s = install(ctx, slot, g, err);
    if (g)
        (void)cudaGraphDestroy(g);
    return s;
}

static tw_status cuda_replay(void *p, int slot, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(refuse_in_capture(ctx, "replay", err));
    if (!ctx->exec[slot])
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: replay of graph slot %d, which holds "
                            "no graph", ctx->name, slot);
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUDA_CHECK(ctx, cudaGraphLaunch(ctx->exec[slot], ctx->stream), err);
    return TW_OK;
}

/* ---- GEMM ---- */

/* c[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta c, all row-major fp32, as cpu_gemm. cuBLAS is
 * column-major, and a row-major matrix is its transpose in column-major, so the row-major product
 * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: operands swapped, m and n
 * swapped, the leading dimensions those of the row-major storage (a: trans_a ? m : k; b: trans_b ?
 * k : n; c: n). */
static tw_status cuda_gemm(void *p, int trans_a, int trans_b, int m, int n, int k, float alpha,
                           tw_tensor a, tw_tensor b, float beta, tw_tensor c, tw_error *err)
{
    tw_cuda_ctx *ctx = (tw_cuda_ctx *)p;
    TW_TRY(tw_cuda_enter(ctx, err));
    TW_CUBLAS_CHECK(ctx, cublasSgemm(ctx->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                                     tw_cuda_f32(b), trans_b ? k : n, tw_cuda_f32(a),
                                     trans_a ? m : k, &beta, tw_cuda_f32(c), n), err);
    return TW_OK;
}

extern "C" const tw_backend_ops tw_cuda_backend_ops = {
    .kind = "cuda",
    .plan = NULL,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .zero = cuda_zero,
    .gemm = cuda_gemm,
    .bias_add = tw_cuda_bias_add,
    .bias_grad = tw_cuda_bias_grad,
    .act_fwd = tw_cuda_act_fwd,
    .act_bwd = tw_cuda_act_bwd,
    .dropout_fwd = tw_cuda_dropout_fwd,
    .dropout_bwd = tw_cuda_dropout_bwd,
    .im2col = tw_cuda_im2col,
    .col2im = tw_cuda_col2im,
    .maxpool_fwd = tw_cuda_maxpool_fwd,
    .maxpool_bwd = tw_cuda_maxpool_bwd,
    .xent_fwd = tw_cuda_xent_fwd,
    .xent_bwd = tw_cuda_xent_bwd,
    .mse_fwd = tw_cuda_mse_fwd,
    .mse_bwd = tw_cuda_mse_bwd,
    .sum_squares = tw_cuda_sum_squares,
    .add = tw_cuda_add,
    .copy_cols = tw_cuda_copy_cols,
    .avgpool_fwd = tw_cuda_avgpool_fwd,
    .avgpool_bwd = tw_cuda_avgpool_bwd,
    .bn_fwd = tw_cuda_bn_fwd,
    .bn_bwd = tw_cuda_bn_bwd,
    .update = tw_cuda_update,
    .allreduce_avg = tw_cuda_allreduce_avg,
    .update_mean = nullptr, /* replicas on separate devices: averaged by NCCL, each updates its own */
    .gemm_update = nullptr, /* its gradients are averaged by NCCL after the backward pass */
    .allreduce_split = 0, /* NCCL: one call for the whole group */
    .sync = cuda_sync,
    .set_math = cuda_set_math,
    .alloc_host = cuda_alloc_host,
    .free_host = cuda_free_host,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .conv_fwd = nullptr, /* the engine convolves through im2col + cuBLAS */
    .conv_bwd = nullptr,
    .world_id = tw_cuda_world_id,
    .world_join = tw_cuda_world_join,
    .maxpool_bwd_relu = nullptr, /* the engine calls maxpool_bwd, then act_bwd */
};
