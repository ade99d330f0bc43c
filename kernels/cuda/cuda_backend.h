/* cuda_backend.h — the CUDA backend's face to C: its operation table and the device count the registry
 * needs. Plain C, no CUDA types, so engine/backend_reg.c includes it to load the module.
 *
 * Owns: the declarations of what kernels/ exports (tw_cuda_backend_ops, tw_cuda_device_count, and the
 * module table the registry loads them through) and the error convention of the CUDA backend below. Does
 * not own the registry (engine/backend_reg.c) or the argument checks (the wrappers of backend.h make them
 * before any op of this table runs).
 *
 * Errors every op of the table may return, besides what backend.h says:
 *   TW_ERR_NOMEM        cudaMalloc, cuBLAS or a stream-ordered scratch allocation ran out of memory;
 *   TW_ERR_UNSUPPORTED  no driver, no such device, or kernels not built for the device's architecture
 *                       (create only);
 *   TW_ERR_INVALID      a label outside [0, classes) seen by xent_fwd/xent_bwd; reported by the next
 *                       download or sync of that instance (a kernel cannot return a status);
 *   TW_ERR_INTERNAL     any other CUDA, cuBLAS or NCCL failure. When the failure poisons the device
 *                       context (a sticky CUDA error: illegal address, launch failure, ECC, ...) or an
 *                       NCCL communicator (an asynchronous NCCL error, after which the group is
 *                       aborted), tw_error.errno_value is TW_CUDA_STICKY_ERRNO: the process cannot go
 *                       on using the GPU and should exit (tower train: exit status 12, so the supervisor
 *                       restarts the run from its last checkpoint in a fresh process).
 * Every message names the instance ("cuda:0"), the failed statement, the library's own error name and
 * text, and the source file and line of the call. */
#ifndef TW_CUDA_BACKEND_H
#define TW_CUDA_BACKEND_H

#include <errno.h>
#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The errno_value of a tw_error that reports a sticky device error (see above). */
#define TW_CUDA_STICKY_ERRNO ENOTRECOVERABLE

/* The CUDA backend's table (kind "cuda"; one instance per GPU, device = the CUDA device index). */
extern const tw_backend_ops tw_cuda_backend_ops;

/* Number of CUDA devices this process can use: 0, not an error, when there is no GPU or no driver. When
 * it is 0 and why is not NULL, why (why_size bytes, always terminated) says why in one sentence.
 * Thread-safe; the first call initialises the CUDA runtime. */
int tw_cuda_device_count(char *why, size_t why_size);

/* Name, memory, compute capability and the driver and runtime versions of device `device` (see
 * tw_backend_device_info). TW_ERR_UNSUPPORTED with the reason when there is no such device. */
tw_status tw_cuda_device_info(int device, tw_device_info *out, tw_error *err);

/* ---- the module: kernels/ is built as the shared object tower-cuda.so, which engine/backend_reg.c
 * opens with dlopen only when a run or a command asks for the CUDA backend, so that `tower serve`,
 * `tower convert` and every CPU run never map the CUDA libraries. The module exports one symbol, this
 * table; the sizes let the registry refuse a module built from other sources. ---- */
#define TW_CUDA_MODULE_FILE "tower-cuda.so"
#define TW_CUDA_MODULE_SYMBOL "tw_cuda_module_v1"

typedef struct {
    size_t ops_size, error_size, device_info_size; /* sizeof each type as the module was built */
    const tw_backend_ops *ops;
    int (*device_count)(char *why, size_t why_size);
    tw_status (*device_info)(int device, tw_device_info *out, tw_error *err);
} tw_cuda_module;

#ifdef __cplusplus
}
#endif

#endif
