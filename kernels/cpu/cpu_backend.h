/* cpu_backend.h — the CPU backend's table of operations, for the registry (backend_reg.c) alone: the rest of
 * Tower reaches the CPU backend through backend.h (tw_backend_create with "cpu"). The backend itself is
 * cpu_backend.c, with its kernels in cpu_gemm.c (OpenBLAS) and cpu_conv.c (oneDNN). */
#ifndef TW_CPU_BACKEND_H
#define TW_CPU_BACKEND_H

#include "backend.h"

extern const tw_backend_ops tw_cpu_backend_ops;

#endif
