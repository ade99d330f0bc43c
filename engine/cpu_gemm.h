/* cpu_gemm.h — the CPU backend's single-precision GEMM (cpu_gemm.c); internal to the CPU backend.
 *
 * Owns: the GEMM (OpenBLAS's cblas_sgemm; cpu_gemm.c says why not oneDNN's) and its thread count, and
 * oneDNN's OpenMP team size. Does not own:
 * argument checks (backend.c) or OpenBLAS's warm-up (cpu_backend.c). */
#ifndef TW_CPU_GEMM_H
#define TW_CPU_GEMM_H

#include "status.h"

/* c[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta c; a stored [m, k] or [k, m] (trans_a), b stored
 * [k, n] or [n, k] (trans_b); row-major, packed. beta 0 overwrites c (never reads it, so a NaN there
 * does not survive). Always TW_OK (the status keeps the call sites ready for a library that can fail). */
tw_status tw_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       const float *b, float beta, float *c, tw_error *err);

/* oneDNN builds only: this thread's OpenMP team size for oneDNN's next calls (at least 1), through the
 * omp_set_num_threads of the runtime libdnnl loaded (dlsym: the engine links none of its own); a no-op
 * when there is none. Shared with the convolutions (cpu_conv.c). */
void tw_cpu_omp_team(int threads);

/* The threads every later GEMM uses (OpenBLAS's, process-wide; tw_backend_plan's share). */
void tw_cpu_gemm_threads(int threads);

#endif
