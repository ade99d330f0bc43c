/* gpu_skip.h — the GPU tests' one way of saying "no device here": each test's main asks
 * tw_gpu_devices_or_skip first and returns TW_GPU_SKIP (77, ctest's SKIP_RETURN_CODE, tests/gpu/CMakeLists.txt)
 * when it answers 0, after one "SKIP: ..." line that says why (the backend's own reason: no module, no
 * driver, no GPU). Header-only: the tests are separate programs with nothing else in common. */
#ifndef TW_GPU_SKIP_H
#define TW_GPU_SKIP_H

#include <stdio.h>

#include "backend.h"

enum { TW_GPU_SKIP = 77 };

/* The devices of backend kind (normally "cuda"); 0 after printing the skip line with the reason. */
static inline int tw_gpu_devices_or_skip(const char *kind)
{
    int n = tw_backend_devices(kind);
    if (n >= 1)
        return n;
    tw_error e;
    tw_error_clear(&e);
    tw_backend *none = NULL;
    if (tw_backend_create(kind, 0, &none, &e) == TW_OK) /* cannot happen with no devices; be safe */
        tw_backend_destroy(none);
    printf("SKIP: no %s device: %s\n", kind, e.message[0] ? e.message : "none found");
    return 0;
}

#endif
