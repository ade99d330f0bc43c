/* cpu_gemm.h — the CPU backend's single-precision GEMM (cpu_gemm.c); internal to the CPU backend.
 *
 * Owns: which library multiplies (oneDNN's dnnl_sgemm or OpenBLAS's cblas_sgemm, chosen by the build,
 * never by timing) and the thread count each calling thread gives it. Does not own:
 * argument checks (backend.c) or OpenBLAS's warm-up (cpu_backend.c).
 * Callers' rule: no signal handler may run on a thread inside tw_cpu_sgemm (oneDNN's kernel moves the
 * stack pointer onto the heap; cpu_gemm.c): block the signals there and take them elsewhere. */
#ifndef TW_CPU_GEMM_H
#define TW_CPU_GEMM_H

#include "status.h"
#include "tower_pool.h"

/* c[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta c; a stored [m, k] or [k, m] (trans_a), b stored
 * [k, n] or [n, k] (trans_b); row-major, packed. pool: the calling tower's threads (its share of the
 * cores, tw_cpu_threads; NULL with one), which a product too small for oneDNN's own team is cut over.
 * beta 0 overwrites c (never reads it, so a NaN there does not survive). Errors: TW_ERR_NOMEM when
 * oneDNN cannot allocate its buffers, else TW_ERR_INTERNAL naming oneDNN's status. */
tw_status tw_cpu_sgemm(tw_tower_pool *pool, int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const float *a, const float *b, float beta, float *c, tw_error *err);

/* How tw_cpu_sgemm cuts a product of c[m, n] over a tower's pool: parts blocks (1: not cut, the whole
 * product on the libraries' own threads), part p being rows [lo, hi) of c (by_rows) or its columns
 * [lo, hi), lo and hi = tw_tower_pool_cut(by_rows ? m : n, parts, p and p + 1). The rule (cpu_gemm.c)
 * depends on the build, the shape, the share and the pool's size only. */
typedef struct {
    int parts, by_rows;
} tw_cpu_cut;

tw_cpu_cut tw_cpu_sgemm_cut(const tw_tower_pool *pool, int m, int n, int k);

/* Part p's rows (cut.by_rows) or columns [*lo, *hi) of an m x n product cut as `cut` says. */
void tw_cpu_cut_span(tw_cpu_cut cut, int m, int n, int p, int *lo, int *hi);

/* Part p of tw_cpu_sgemm's product cut as `cut` says, on the calling thread alone (cut.parts = 1: the
 * whole product, p = 0). tw_cpu_sgemm is its parts over the pool; a caller that runs them itself (to
 * use each block as soon as it is computed) gets the same bits. Errors: tw_cpu_sgemm's. */
tw_status tw_cpu_sgemm_part(tw_cpu_cut cut, int p, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float *a, const float *b, float beta, float *c, tw_error *err);

/* oneDNN builds only: this thread's OpenMP team size for oneDNN's next calls (at least 1), through the
 * omp_set_num_threads of the runtime libdnnl loaded (dlsym: the engine links none of its own); a no-op
 * when there is none. Shared with the convolutions (cpu_conv.c). */
void tw_cpu_omp_team(int threads);

/* The threads every later GEMM uses, per calling thread (process-wide; tw_backend_plan's share). */
void tw_cpu_gemm_threads(int threads);

/* That share (1 until it is set). */
int tw_cpu_threads(void);

#endif
