/* test_cuda_sticky.c — a sticky device error surfaces as a status, not a crash or a hang: a kernel that
 * reads an address no allocation owns poisons the CUDA context; the next sync must return
 * TW_ERR_INTERNAL with errno_value ENOTRECOVERABLE (TW_CUDA_STICKY_ERRNO of kernels/cuda/cuda_backend.h, the
 * convention by which `tower train` exits with status 12), later ops must fail the same way, and destroy
 * must still return. Its own program because the context stays poisoned until the process exits.
 * Exit 0 passed, 1 failed, 77 no CUDA device. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "gpu_skip.h"

static int failures;

static void expect(int ok, const char *what, const tw_error *e, tw_status s)
{
    printf("%-4s %s (status %d, errno_value %d: %s)\n", ok ? "ok" : "FAIL", what, (int)s,
           e->errno_value, e->message);
    failures += !ok;
}

int main(void)
{
    tw_error e;
    tw_error_clear(&e);
    if (tw_gpu_devices_or_skip("cuda") < 1) {
        return TW_GPU_SKIP;
    }
    tw_backend *gpu = NULL;
    if (tw_backend_create("cuda", 0, &gpu, &e) != TW_OK) {
        printf("FAIL create: %s\n", e.message);
        return 1;
    }
    /* A view the wrappers accept (non-NULL, in range) whose device address is unmapped. */
    tw_buffer bogus = {.bytes = (size_t)1 << 24, .data = (void *)(uintptr_t)0x1000};
    size_t n = (size_t)1 << 22;
    tw_status s = tw_act_fwd(gpu, TW_ACT_RELU, tw_tensor_of(&bogus), tw_tensor_of(&bogus), n, &e);
    if (s == TW_OK)
        s = tw_backend_sync(gpu, &e);
    expect(s == TW_ERR_INTERNAL && e.errno_value == ENOTRECOVERABLE &&
               strstr(e.message, "cuda:0") != NULL,
           "sync after an illegal address: sticky", &e, s);
    tw_error_clear(&e);
    tw_buffer *buf = NULL;
    s = tw_backend_alloc(gpu, 1024, &buf, &e);
    if (s == TW_OK) {
        float v[4] = {1, 2, 3, 4};
        s = tw_backend_upload(gpu, tw_tensor_of(buf), v, sizeof v, &e);
        if (s == TW_OK)
            s = tw_backend_download(gpu, v, tw_tensor_of(buf), sizeof v, &e);
    }
    expect(s != TW_OK && e.errno_value == ENOTRECOVERABLE, "later ops fail the same way", &e, s);
    tw_backend_free(gpu, buf);
    tw_backend_destroy(gpu);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
