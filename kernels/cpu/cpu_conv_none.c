/* cpu_conv_none.c — the CPU backend's convolution state where the build has no oneDNN 2.x (see
 * engine/CMakeLists.txt): none. The CPU backend's table then offers no conv_* ops and the engine
 * convolves through im2col + gemm; these keep cpu_backend.c's instance lifecycle the same either way. */
#include "cpu_conv.h"

#include <stddef.h>

tw_status tw_cpu_conv_create(tw_cpu_conv **out, tw_error *err)
{
    (void)err;
    *out = NULL;
    return TW_OK;
}

void tw_cpu_conv_destroy(tw_cpu_conv *c) { (void)c; }

void tw_cpu_conv_threads(int threads) { (void)threads; }

void tw_cpu_conv_set_winograd(tw_cpu_conv *c, int on)
{
    (void)c;
    (void)on;
}

void tw_cpu_conv_process_init(char **argv) { (void)argv; }
