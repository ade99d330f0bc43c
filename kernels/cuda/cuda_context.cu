/* cuda_context.cu — what every source of the CUDA backend shares: the mapping of CUDA, cuBLAS and NCCL
 * errors to tw_status (cuda_backend.h: a sticky error marks the tw_error with TW_CUDA_STICKY_ERRNO),
 * making an instance's device current on the calling thread (tw_cuda_enter), and the instance's
 * grow-only scratch (tw_cuda_scratch).
 *
 * Owns those three and nothing else, and calls no other file of kernels/: cuda_backend.cu,
 * cuda_kernels.cu and cuda_allreduce.cu all use it, so the arrows among them point one way (the
 * operation table in cuda_backend.cu names the ops of the other two). Does not own struct tw_cuda_ctx's
 * lifetime (cuda_backend.cu). */
#include "cuda_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- errors ---- */

/* Errors after which the CUDA context is unusable: every later call of the process fails. */
static int is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    case cudaErrorUnknown:
        return 1;
    default:
        return 0;
    }
}

/* The statement as it goes into a message: at most 160 characters. */
static void clip(char *out, size_t size, const char *stmt)
{
    size_t n = strlen(stmt);
    if (n < size) {
        memcpy(out, stmt, n + 1);
        return;
    }
    snprintf(out, size, "%.*s...", (int)(size - 4), stmt);
}

/* File name without its directories (messages stay short and do not depend on the build path). */
static const char *base(const char *file)
{
    const char *s = strrchr(file, '/');
    return s ? s + 1 : file;
}

static tw_status set(tw_error *err, tw_status status, int sticky, const tw_cuda_ctx *ctx,
                     const char *stmt, const char *lib_name, const char *lib_text, const char *file,
                     int line)
{
    char what[164];
    clip(what, sizeof what, stmt);
    tw_error_set(err, status, NULL, -1, "%s: %s failed: %s (%s) at %s:%d%s", ctx ? ctx->name : "cuda",
                 what, lib_text, lib_name, base(file), line,
                 sticky ? "; the GPU context is unusable, the process must restart" : "");
    if (err && sticky)
        err->errno_value = TW_CUDA_STICKY_ERRNO;
    return status;
}

tw_status tw_cuda_fail(tw_error *err, const tw_cuda_ctx *ctx, cudaError_t e, const char *stmt,
                       const char *file, int line)
{
    int sticky = is_sticky(e);
    if (!sticky)
        (void)cudaGetLastError(); /* reported here; must not resurface after the next launch */
    tw_status s = e == cudaErrorMemoryAllocation ? TW_ERR_NOMEM
                  : e == cudaErrorNoKernelImageForDevice ? TW_ERR_UNSUPPORTED
                                                         : TW_ERR_INTERNAL;
    return set(err, s, sticky, ctx, stmt, cudaGetErrorName(e), cudaGetErrorString(e), file, line);
}

static const char *cublas_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_?";
    }
}

tw_status tw_cublas_fail(tw_error *err, const tw_cuda_ctx *ctx, cublasStatus_t s, const char *stmt,
                         const char *file, int line)
{
    /* A failed cuBLAS kernel leaves its CUDA error behind: sticky if the context is gone. */
    cudaError_t e = cudaPeekAtLastError();
    int sticky = s == CUBLAS_STATUS_EXECUTION_FAILED && is_sticky(e);
    tw_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? TW_ERR_NOMEM : TW_ERR_INTERNAL;
    return set(err, st, sticky, ctx, stmt, cublas_name(s), cublasGetStatusString(s), file, line);
}

tw_status tw_nccl_fail(tw_error *err, const tw_cuda_ctx *ctx, ncclResult_t r, int sticky,
                       const char *stmt, const char *file, int line)
{
    static const char *names[] = {"ncclSuccess",      "ncclUnhandledCudaError", "ncclSystemError",
                                  "ncclInternalError", "ncclInvalidArgument",   "ncclInvalidUsage",
                                  "ncclRemoteError",  "ncclInProgress"};
    const char *name = (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "ncclResult?";
    char text[400];
    const char *last = ncclGetLastError(NULL);
    snprintf(text, sizeof text, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "",
             last ? last : "");
    return set(err, TW_ERR_INTERNAL, sticky, ctx, stmt, name, text, file, line);
}

/* ---- instances ---- */

tw_status tw_cuda_enter(tw_cuda_ctx *ctx, tw_error *err)
{
    TW_CUDA_CHECK(ctx, cudaSetDevice(ctx->device), err);
    return TW_OK;
}

tw_status tw_cuda_scratch(tw_cuda_ctx *ctx, size_t bytes, void **p, tw_error *err)
{
    if (bytes > ctx->scratch_bytes && ctx->capturing)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1,
                            "%s: scratch of %zu bytes needed while capturing a graph (it holds %zu): "
                            "run the step once without a graph first", ctx->name, bytes,
                            ctx->scratch_bytes);
    if (bytes > ctx->scratch_bytes) {
        size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1); /* whole MiB */
        if (ctx->scratch) {
            TW_CUDA_CHECK(ctx, cudaFreeAsync(ctx->scratch, ctx->stream), err);
            ctx->scratch = NULL;
            ctx->scratch_bytes = 0;
        }
        TW_CUDA_CHECK(ctx, cudaMallocAsync(&ctx->scratch, want, ctx->stream), err);
        ctx->scratch_bytes = want;
    }
    *p = ctx->scratch;
    return TW_OK;
}
