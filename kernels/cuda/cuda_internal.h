/* cuda_internal.h — what the CUDA backend's four translation units share (CUDA C++ only, never
 * included from C).
 *
 * Owns: the per-instance state (struct tw_cuda_ctx), the checking macro family every CUDA, cuBLAS and
 * NCCL call goes through (house style rule 5: the statement, file and line go into the tw_error, the
 * library's error becomes a tw_status), the kernel launch macro, and the declarations that cross files:
 * the error mapping, entering an instance and its scratch memory (cuda_context.cu, which calls no other
 * .cu), the compute ops (cuda_kernels.cu) and the NCCL group (cuda_allreduce.cu), the last two named by
 * cuda_backend.cu's ops table. Does not own the C face (cuda_backend.h) or any arithmetic.
 *
 * Stream order: every op of an instance is issued on its one compute stream, in call order, and returns
 * without waiting for the device; only download and sync wait (and alloc/free/destroy, which are not
 * part of a training step). That keeps the compute part of a step capturable as a CUDA Graph
 * (cuda_backend.cu: capture_begin / capture_end / replay). */
#ifndef TW_CUDA_INTERNAL_H
#define TW_CUDA_INTERNAL_H

/* The C headers of the engine declare C functions and include these C library headers; including them
 * here first keeps the C++ versions out of the extern "C" block below. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

extern "C" {
#include "backend.h"
#include "cuda_backend.h"
}

struct tw_cuda_group;

/* One backend instance: one GPU, the state of one tower. */
struct tw_cuda_ctx {
    int device;                  /* CUDA device index */
    char name[16];               /* "cuda:0" */
    int sm_count;                /* multiprocessors, for grid sizes */
    cudaStream_t stream;         /* every op, in issue order (non-blocking w.r.t. the legacy stream) */
    cudaStream_t copy;           /* uploads from page-locked host memory (alloc_host), ordered against
                                    stream by the two events below */
    cudaEvent_t before_copy;     /* recorded on stream before an upload: the copy waits for it */
    cudaEvent_t after_copy;      /* recorded on copy after an upload: stream waits for it */
    cublasHandle_t blas;         /* bound to stream; FP32 math unless set_math turned TF32 on */
    int capturing;               /* stream is being captured into a graph (capture_begin..end) */
    cudaGraphExec_t exec[TW_GRAPH_SLOTS]; /* executable graph of each slot, or NULL */
    void *scratch;               /* [scratch_bytes] device, grow-only, stream-ordered: CUB temporary
                                    storage and partial sums */
    size_t scratch_bytes;
    int *flag_dev;               /* [4] int32 device: {bad, row, label, classes} of the first label
                                    outside [0, classes) a loss kernel saw since the last wait */
    volatile int *flag;          /* [4] int32 pinned host: flag_dev as copied by the last wait */
    struct tw_cuda_group *group; /* the NCCL clique or world this instance is in, or NULL
                                    (cuda_allreduce.cu) */
    int nccl_pending;            /* an all-reduce was issued since the last wait */
};

/* ---- errors (cuda_context.cu) ---- */

/* Fills err for a failed CUDA runtime call: status from the error (cudaErrorMemoryAllocation ->
 * TW_ERR_NOMEM; sticky errors -> TW_ERR_INTERNAL with errno_value TW_CUDA_STICKY_ERRNO; else
 * TW_ERR_INTERNAL) and a message naming ctx (may be NULL), the statement, the error, file and line.
 * Clears a non-sticky error from the runtime's last-error slot so that it is not reported twice. */
tw_status tw_cuda_fail(tw_error *err, const tw_cuda_ctx *ctx, cudaError_t e, const char *stmt,
                       const char *file, int line);
tw_status tw_cublas_fail(tw_error *err, const tw_cuda_ctx *ctx, cublasStatus_t s, const char *stmt,
                         const char *file, int line);
/* sticky: the communicator reported the failure asynchronously (the group is aborted). */
tw_status tw_nccl_fail(tw_error *err, const tw_cuda_ctx *ctx, ncclResult_t r, int sticky,
                       const char *stmt, const char *file, int line);

/* The macro family: each evaluates call once and returns the mapped status from the calling function
 * when it fails. ctx may be NULL (no instance yet). */
#define TW_CUDA_CHECK(ctx, call, err)                                                              \
    do {                                                                                           \
        cudaError_t tw_cuda_e_ = (call);                                                           \
        if (tw_cuda_e_ != cudaSuccess)                                                             \
            return tw_cuda_fail((err), (ctx), tw_cuda_e_, #call, __FILE__, __LINE__);              \
    } while (0)

#define TW_CUBLAS_CHECK(ctx, call, err)                                                            \
    do {                                                                                           \
        cublasStatus_t tw_cublas_s_ = (call);                                                      \
        if (tw_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return tw_cublas_fail((err), (ctx), tw_cublas_s_, #call, __FILE__, __LINE__);          \
    } while (0)

#define TW_NCCL_CHECK(ctx, call, err)                                                              \
    do {                                                                                           \
        ncclResult_t tw_nccl_r_ = (call);                                                          \
        if (tw_nccl_r_ != ncclSuccess)                                                             \
            return tw_nccl_fail((err), (ctx), tw_nccl_r_, 0, #call, __FILE__, __LINE__);           \
    } while (0)

/* Launches kernel<<<grid, block, 0, ctx->stream>>>(args...) and checks the launch (a bad configuration;
 * execution errors surface at the next wait). kernel must not contain a comma (no template lists). */
#define TW_CUDA_LAUNCH(ctx, err, kernel, grid, block, ...)                                         \
    do {                                                                                           \
        kernel<<<(grid), (block), 0, (ctx)->stream>>>(__VA_ARGS__);                                \
        cudaError_t tw_cuda_e_ = cudaGetLastError();                                               \
        if (tw_cuda_e_ != cudaSuccess)                                                             \
            return tw_cuda_fail((err), (ctx), tw_cuda_e_, "launch of " #kernel, __FILE__,         \
                                __LINE__);                                                         \
    } while (0)

/* ---- instance helpers (cuda_context.cu) ---- */

/* Makes ctx's device current on the calling thread (instances may be driven from several threads, one
 * at a time, and each thread has its own current device). */
tw_status tw_cuda_enter(tw_cuda_ctx *ctx, tw_error *err);

/* *p = ctx's scratch of at least bytes, grown (stream-ordered: cudaFreeAsync + cudaMallocAsync on
 * ctx->stream, no host wait) when too small. Valid until the next call on ctx; only this instance's
 * stream uses it, so ops that run one after another on the stream can reuse it. */
tw_status tw_cuda_scratch(tw_cuda_ctx *ctx, size_t bytes, void **p, tw_error *err);

/* Device address of a view (fp32 / int32). */
static inline float *tw_cuda_f32(tw_tensor t)
{
    return (float *)(void *)((char *)t.buf->data + t.offset);
}

static inline int32_t *tw_cuda_i32(tw_tensor t)
{
    return (int32_t *)(void *)((char *)t.buf->data + t.offset);
}

/* ---- compute ops (cuda_kernels.cu); the contracts are those of backend.h ---- */

/* TW_OK when this build's kernels can run on ctx's device, else TW_ERR_UNSUPPORTED naming the
 * architectures (called by create). */
tw_status tw_cuda_kernels_probe(tw_cuda_ctx *ctx, tw_error *err);

tw_status tw_cuda_bias_add(void *ctx, tw_tensor y, tw_tensor bias, int rows, int cols, tw_error *err);
tw_status tw_cuda_bias_grad(void *ctx, tw_tensor dbias, tw_tensor dy, int rows, int cols,
                            tw_error *err);
tw_status tw_cuda_act_fwd(void *ctx, tw_activation a, tw_tensor y, tw_tensor x, size_t n,
                          tw_error *err);
tw_status tw_cuda_act_bwd(void *ctx, tw_activation a, tw_tensor dx, tw_tensor dy, tw_tensor y,
                          size_t n, tw_error *err);
tw_status tw_cuda_dropout_fwd(void *ctx, tw_tensor y, tw_tensor x, size_t n, float rate,
                              uint64_t seed, tw_error *err);
tw_status tw_cuda_dropout_bwd(void *ctx, tw_tensor dx, tw_tensor dy, size_t n, float rate,
                              uint64_t seed, tw_error *err);
tw_status tw_cuda_im2col(void *ctx, const tw_window *w, tw_tensor cols, tw_tensor x, tw_error *err);
tw_status tw_cuda_col2im(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor cols, tw_error *err);
tw_status tw_cuda_maxpool_fwd(void *ctx, const tw_window *w, tw_tensor y, tw_tensor argmax,
                              tw_tensor x, tw_error *err);
tw_status tw_cuda_maxpool_bwd(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy,
                              tw_tensor argmax, tw_error *err);
tw_status tw_cuda_xent_fwd(void *ctx, tw_tensor loss, tw_tensor probs, tw_tensor logits,
                           tw_tensor labels, int rows, int classes, float smoothing, tw_error *err);
tw_status tw_cuda_xent_bwd(void *ctx, tw_tensor dlogits, tw_tensor probs, tw_tensor labels, int rows,
                           int classes, float scale, float smoothing, tw_error *err);
tw_status tw_cuda_mse_fwd(void *ctx, tw_tensor loss, tw_tensor pred, tw_tensor target, int rows,
                          int cols, tw_error *err);
tw_status tw_cuda_mse_bwd(void *ctx, tw_tensor dpred, tw_tensor pred, tw_tensor target, size_t n,
                          float scale, tw_error *err);
tw_status tw_cuda_sum_squares(void *ctx, tw_tensor out, tw_tensor x, size_t n, tw_error *err);
tw_status tw_cuda_add(void *ctx, tw_tensor y, tw_tensor a, tw_tensor c, size_t n, tw_error *err);
tw_status tw_cuda_copy_cols(void *ctx, tw_tensor dst, int dst_cols, int dst_at, tw_tensor src, int src_cols,
                            int src_at, int rows, int cols, int accumulate, tw_error *err);
tw_status tw_cuda_avgpool_fwd(void *ctx, const tw_window *w, tw_tensor y, tw_tensor x, tw_error *err);
tw_status tw_cuda_avgpool_bwd(void *ctx, const tw_window *w, tw_tensor dx, tw_tensor dy, tw_error *err);
tw_status tw_cuda_bn_fwd(void *ctx, const tw_bn *p, tw_tensor y, tw_tensor x, tw_tensor gamma, tw_tensor beta,
                         tw_tensor stats, tw_tensor moving, tw_error *err);
tw_status tw_cuda_bn_bwd(void *ctx, const tw_bn *p, tw_tensor dx, tw_tensor dgamma, tw_tensor dbeta, tw_tensor dy,
                         tw_tensor x, tw_tensor gamma, tw_tensor stats, tw_error *err);
tw_status tw_cuda_update(void *ctx, const tw_update *u, tw_tensor params, tw_tensor grads,
                         tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n, tw_error *err);

/* ---- NCCL (cuda_allreduce.cu) ---- */

/* backend.h's allreduce_avg: one NCCL clique per group of instances (ncclCommInitAll over their
 * devices, created on the group's first call) or the world they joined, ncclAllReduce with ncclAvg in
 * place on each instance's stream inside ncclGroupStart/End; returns once enqueued. One instance
 * outside a world: nothing to do. */
tw_status tw_cuda_allreduce_avg(void *const *ctxs, int n_ctx, const tw_tensor *bufs, size_t n,
                                tw_error *err);

/* While ctx waits for its stream after an all-reduce: TW_OK when its communicator reports no
 * asynchronous error; else aborts every communicator of the group (ncclCommAbort, so no rank hangs)
 * and returns the sticky error. */
tw_status tw_cuda_group_poll(tw_cuda_ctx *ctx, tw_error *err);

/* backend.h's world_id and world_join: ncclGetUniqueId; ncclCommInitRank of rank node*n_ctx + i of
 * nodes*n_ctx for each instance, inside ncclGroupStart/End, the instances' group from then on (its
 * all-reduce, poll and abort are the clique's). */
tw_status tw_cuda_world_id(void *ctx, void *id, tw_error *err);
tw_status tw_cuda_world_join(void *const *ctxs, int n_ctx, const void *id, int node, int nodes,
                             tw_error *err);

/* Ends the group ctx is in, if any (ncclCommDestroy of every communicator, or nothing after an abort);
 * its other members create a new one on their next all-reduce. Called by destroy. */
void tw_cuda_group_leave(tw_cuda_ctx *ctx);

#endif
