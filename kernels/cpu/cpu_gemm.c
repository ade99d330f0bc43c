/* cpu_gemm.c — the CPU backend's GEMM. See cpu_gemm.h.
 *
 * Which library: oneDNN's dnnl_sgemm JIT-compiles for the CPU's real instruction set, while OpenBLAS runs
 * whatever core it detects or OPENBLAS_CORETYPE names (SSE3 "Prescott" when detection fails). An OpenMP
 * team costs more than it gives on small products (its threads meet at a barrier), so a product under
 * MACS_PER_THREAD multiply-adds per thread is cut along the longer side of c into one block per thread of
 * the tower's own pool (tower_pool.h), each block one single-threaded oneDNN call: the threads meet once,
 * at the end. Products under SPLIT_MACS run whole on the caller. Without oneDNN (the cpu_conv_none.c build)
 * OpenBLAS multiplies everything on its own threads. The figures: BENCHMARKS.md, "GEMM".
 *
 * The route, the cuts and the thread count depend on the build, the shape and the plan's share only, never
 * on timing, so a run and its resume multiply alike; for a fixed shape and thread count both libraries sum
 * in a fixed order (bit-exact resume, test_trainer.c).
 *
 * Signals: no signal handler may run on a thread while it is inside dnnl_sgemm (its JIT kernel moves the
 * stack pointer into its heap workspace; docs/architecture.md, "Signals in `tower train`"). `tower train`
 * takes its signals on a sigwait thread; `tower serve` unblocks them only in main, which never multiplies;
 * the other commands install no handler. A new handler, or a thread that multiplies with a signal
 * unblocked, must keep to that.
 *
 * Threads: Debian's libdnnl runs on OpenMP (libgomp), whose team size is per calling thread, so each call
 * sets it through the omp_set_num_threads of the runtime libdnnl loaded (found with dlsym: Tower links no
 * OpenMP runtime of its own). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "cpu_gemm.h"

#include <stdatomic.h>

#include <cblas.h>

#ifdef TW_HAVE_DNNL
#include <dlfcn.h>
#include <dnnl.h>
#endif

static atomic_int gemm_threads = 1;

void tw_cpu_gemm_threads(int threads) { atomic_store(&gemm_threads, threads); }

int tw_cpu_threads(void) { return atomic_load(&gemm_threads); }

void tw_cpu_cut_span(tw_cpu_cut cut, int m, int n, int p, int *lo, int *hi)
{
    size_t len = (size_t)(cut.by_rows ? m : n);
    *lo = (int)tw_tower_pool_cut(len, cut.parts, p);
    *hi = (int)tw_tower_pool_cut(len, cut.parts, p + 1);
}

#ifdef TW_HAVE_DNNL

/* A product of fewer multiply-adds than this per thread runs on fewer oneDNN threads (at least one; with
 * a share of several, such a product is cut over the tower's pool instead: the header): the MLP's (12.5 M at batch 32)
 * on one, the Fashion CNN's first dense layer (321 M at batch 100) on the share. On these shared 2-core
 * VMs an OpenMP team costs more than it gives on the small products (its threads spin at the barrier
 * while the other core runs another tower or process: 1.2 GFLOP/s instead of 38 on one thread for
 * 32 x 500 x 784 with the machine busy). */
enum { MACS_PER_THREAD = 1 << 25 };

/* A product oneDNN would run on one of a tower's several threads is cut into one block per thread of the
 * tower's pool when it has at least this many multiply-adds (smaller ones run whole on the caller: a
 * block's call costs more than it saves). */
enum { SPLIT_MACS = 1 << 20 };

void tw_cpu_omp_team(int threads)
{
    static void (*set_num)(int);
    static atomic_int looked;
    if (!atomic_load(&looked)) {
        *(void **)&set_num = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
        atomic_store(&looked, 1);
    }
    if (set_num)
        set_num(threads > 1 ? threads : 1);
}

/* One product of the layout of tw_cpu_sgemm, with leading dimensions (a block of a bigger product), on
 * this thread's current OpenMP team. */
typedef struct {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_args;

static tw_status dnnl_product(const gemm_args *g, tw_error *err)
{
    dnnl_status_t s = dnnl_sgemm(g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N', g->m, g->n, g->k, g->alpha,
                                 g->a, g->lda, g->b, g->ldb, g->beta, g->c, g->ldc);
    if (s == dnnl_out_of_memory) /* its packing buffers, e.g. under an address-space limit */
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "oneDNN: out of memory in dnnl_sgemm(%d x %d x %d)",
                            g->m, g->n, g->k);
    if (s != dnnl_success)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1,
                            "oneDNN: dnnl_sgemm(%d x %d x %d) failed (status %d)", g->m, g->n, g->k, (int)s);
    return TW_OK;
}

/* The rows [r0, r1) of g's product (by_rows) or its columns [r0, r1): the same product of a block. */
static gemm_args block_of(const gemm_args *g, int by_rows, int r0, int r1)
{
    gemm_args b = *g;
    if (by_rows) {
        b.m = r1 - r0;
        b.a = g->trans_a ? g->a + r0 : g->a + (size_t)r0 * g->lda;
        b.c = g->c + (size_t)r0 * g->ldc;
    } else {
        b.n = r1 - r0;
        b.b = g->trans_b ? g->b + (size_t)r0 * g->ldb : g->b + r0;
        b.c = g->c + r0;
    }
    return b;
}

tw_cpu_cut tw_cpu_sgemm_cut(const tw_tower_pool *pool, int m, int n, int k)
{
    int share = atomic_load(&gemm_threads);
    double macs = (double)m * n * k;
    if (share > 1 && macs < 2.0 * MACS_PER_THREAD && macs >= SPLIT_MACS && tw_tower_pool_jobs(pool) > 1)
        return (tw_cpu_cut){tw_tower_pool_jobs(pool), m > n}; /* oneDNN's team would be one thread */
    return (tw_cpu_cut){1, 0};
}

tw_status tw_cpu_sgemm_part(tw_cpu_cut cut, int p, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float *a, const float *b, float beta, float *c, tw_error *err)
{
    gemm_args g = {trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n, n, alpha, beta, a, b, c};
    if (cut.parts > 1) {
        int r0, r1;
        tw_cpu_cut_span(cut, m, n, p, &r0, &r1);
        if (r1 == r0)
            return TW_OK;
        tw_cpu_omp_team(1);
        gemm_args block = block_of(&g, cut.by_rows, r0, r1);
        return dnnl_product(&block, err);
    }
    int share = atomic_load(&gemm_threads);
    double fit = (double)m * n * k / MACS_PER_THREAD;
    if (share > 1 && fit < 2)
        fit = 1; /* not cut (too small): whole, on the caller */
    tw_cpu_omp_team(fit < share ? (int)fit : share); /* this thread's OpenMP team for the product */
    return dnnl_product(&g, err);
}

/* One product, cut (tw_cpu_sgemm_cut) over a pool. */
typedef struct {
    tw_cpu_cut cut;
    gemm_args g;
} cut_product;

static tw_status product_part(void *arg, int p, tw_error *err)
{
    const cut_product *s = arg;
    const gemm_args *g = &s->g;
    return tw_cpu_sgemm_part(s->cut, p, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a, g->b,
                             g->beta, g->c, err);
}

tw_status tw_cpu_sgemm(tw_tower_pool *pool, int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const float *a, const float *b, float beta, float *c, tw_error *err)
{
    cut_product s = {tw_cpu_sgemm_cut(pool, m, n, k),
                     {trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n, n, alpha, beta, a, b, c}};
    return tw_tower_pool_try(pool, s.cut.parts, product_part, &s, err);
}

#else

tw_cpu_cut tw_cpu_sgemm_cut(const tw_tower_pool *pool, int m, int n, int k)
{
    (void)pool, (void)m, (void)n, (void)k;
    return (tw_cpu_cut){1, 0}; /* OpenBLAS's own threads split every product */
}

tw_status tw_cpu_sgemm_part(tw_cpu_cut cut, int p, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float *a, const float *b, float beta, float *c, tw_error *err)
{
    (void)cut, (void)p;
    (void)err; /* OpenBLAS's threads: the plan's share, openblas_set_num_threads in cpu_backend.c */
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
    return TW_OK;
}

tw_status tw_cpu_sgemm(tw_tower_pool *pool, int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const float *a, const float *b, float beta, float *c, tw_error *err)
{
    (void)pool;
    return tw_cpu_sgemm_part((tw_cpu_cut){1, 0}, 0, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, err);
}

#endif
