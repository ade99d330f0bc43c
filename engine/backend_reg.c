/* backend_reg.c — the registry of backends: which kinds this build has, the operation table of a kind,
 * and the device queries (as ggml keeps ggml-backend-reg.cpp apart from ggml-backend.cpp).
 *
 * Owns: the kinds ("cpu", "cuda", "auto") and their tables (tw_cpu_backend_ops; tw_cuda_backend_ops from
 * kernels/ under TW_HAVE_CUDA), the CUDA device count and description. The only engine file that names
 * kernels/, and the one file where #ifdef TW_HAVE_CUDA may appear. Does not own the backend handle or
 * the checked wrappers (backend.c), which ask tw_backend_find for a table. */
#include "backend.h"

#include <string.h>

#ifdef TW_HAVE_CUDA
#include "cuda_backend.h"
#endif

/* Number of CUDA devices: 0 in a build without the CUDA backend, and (not an error) on a machine
 * without a GPU or driver. */
static int cuda_devices(void)
{
#ifdef TW_HAVE_CUDA
    return tw_cuda_device_count(NULL, 0);
#else
    return 0;
#endif
}

tw_status tw_backend_find(const char *kind, const tw_backend_ops **ops, tw_error *err)
{
    if (!kind)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tw_backend_create: no backend kind (NULL)");
    int is_auto = strcmp(kind, "auto") == 0;
#ifdef TW_HAVE_CUDA
    if (strcmp(kind, "cuda") == 0 || (is_auto && cuda_devices() > 0)) {
        *ops = &tw_cuda_backend_ops;
        return TW_OK;
    }
#endif
    if (strcmp(kind, "cpu") == 0 || is_auto) {
        *ops = &tw_cpu_backend_ops;
        return TW_OK;
    }
    if (strcmp(kind, "cuda") == 0)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "tw_backend_create: this build has no CUDA backend");
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                        "tw_backend_create: unknown backend kind '%s' (expected cpu, cuda or auto)", kind);
}

int tw_backend_built(const char *kind)
{
#ifdef TW_HAVE_CUDA
    if (kind && strcmp(kind, "cuda") == 0)
        return 1;
#endif
    return kind && strcmp(kind, "cpu") == 0;
}

tw_status tw_backend_device_info(int device, tw_device_info *out, tw_error *err)
{
    memset(out, 0, sizeof *out);
#ifdef TW_HAVE_CUDA
    return tw_cuda_device_info(device, out, err);
#else
    (void)device;
    return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                        "this build has no CUDA backend (built without the CUDA toolkit, cuBLAS and NCCL)");
#endif
}

int tw_backend_devices(const char *kind)
{
    if (!kind)
        return 0;
    if (strcmp(kind, "cuda") == 0)
        return cuda_devices();
    if (strcmp(kind, "auto") == 0) {
        int n = cuda_devices();
        return n > 0 ? n : 1;
    }
    return strcmp(kind, "cpu") == 0 ? 1 : 0;
}
