/* cuda_module.c — the one symbol tower-cuda.so exports: the table engine/backend_reg.c finds with dlsym
 * after dlopen (kernels/cuda/cuda_backend.h). Owns nothing else. */
#include "cuda_backend.h"

/* Visible from the shared object; every other symbol of the module may stay internal. */
__attribute__((visibility("default"))) const tw_cuda_module tw_cuda_module_v1 = {
    .ops_size = sizeof(tw_backend_ops),
    .error_size = sizeof(tw_error),
    .device_info_size = sizeof(tw_device_info),
    .ops = &tw_cuda_backend_ops,
    .device_count = tw_cuda_device_count,
    .device_info = tw_cuda_device_info,
};
