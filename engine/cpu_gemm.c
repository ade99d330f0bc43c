/* cpu_gemm.c — the CPU backend's GEMM. See cpu_gemm.h.
 *
 * Which library: oneDNN's dnnl_sgemm JIT-compiles for the CPU's real instruction set, while OpenBLAS runs
 * whatever core it detects or OPENBLAS_CORETYPE names (SSE3 "Prescott" when detection fails, Haswell when
 * preset). On the VMs that detected Prescott, oneDNN was 1.2x to 2x faster on every dense shape of the seed
 * MLP (batch 32: 784-500-10) and the Fashion CNN's dense layers (batch 100: 3136-1024-10), one thread each.
 * But an OpenMP team costs more than it gives on small products (its threads meet at a barrier): a product
 * under MACS_PER_THREAD multiply-adds per thread runs on fewer threads, so with one tower on two cores
 * oneDNN would run the MLP's products on one core while the other idles. Those go to OpenBLAS, whose
 * threads split them well: measured on an AVX-512 VM (Zen 4; `tw_bench gemm` / `tw_bench engine-gemm`,
 * GFLOP/s), 32x500x784 and its weight gradient 784x500x32: OpenBLAS on 2 threads 126 / 116 (its own
 * Cooperlake kernel) or 105 / 91 (Haswell), oneDNN 93 / 83 on one thread and 75 / 98 on two. The rule:
 * oneDNN, unless the tower has several threads and oneDNN would use only one of them. Without oneDNN
 * (the cpu_conv_none.c build) OpenBLAS multiplies everything. The route and the thread count depend on
 * the build, the shape and the plan's share only, never on timing, so a run and its resume multiply
 * alike.
 *
 * Signals: no signal handler may run on a thread while it is inside dnnl_sgemm. oneDNN's AVX-512 JIT
 * kernel (jit_avx512_common_gemm_f32) runs with its stack pointer in its malloc'ed workspace when K > 84,
 * and the kernel pushes a signal's frame below the stack pointer: onto the heap chunk before the
 * workspace (glibc's "corrupted size vs. prev_size"; the crash that had 58d97cc turn this path off).
 * `tower train` takes its stop signals on a sigwait thread, blocked in every thread that computes; the
 * main thread takes only a poke, on an alternate stack (train_main.c's header: the evidence,
 * tests/tools/stop_storm.py and probes/dnnl_sgemm_signals.c);
 * `tower serve` blocks SIGTERM/SIGINT in every thread it starts and unblocks them only in main, which
 * polls and never multiplies (serve_main.c); the other commands install no handler. A new handler, or
 * a thread that multiplies with a signal unblocked, must keep to that.
 *
 * Determinism: for a fixed shape and thread count, both libraries split the work and sum in a fixed
 * order (bit-exact resume, test_trainer.c). Threads: Debian's libdnnl runs on OpenMP (libgomp), whose
 * team size is per calling thread, so each call sets it through the omp_set_num_threads of the runtime
 * libdnnl loaded (found with dlsym: the engine links no OpenMP runtime of its own). */
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

#ifdef TW_HAVE_DNNL

/* A product of fewer multiply-adds than this per thread runs on fewer oneDNN threads (at least one; with
 * a share of several, such a product goes to OpenBLAS instead: the header): the MLP's (12.5 M at batch 32)
 * on one, the Fashion CNN's first dense layer (321 M at batch 100) on the share. On these shared 2-core
 * VMs an OpenMP team costs more than it gives on the small products (its threads spin at the barrier
 * while the other core runs another tower or process: 1.2 GFLOP/s instead of 38 on one thread for
 * 32 x 500 x 784 with the machine busy). */
enum { MACS_PER_THREAD = 1 << 25 };

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

/* OpenBLAS's product (its threads: the plan's share, openblas_set_num_threads in cpu_backend.c). */
static void openblas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                           const float *b, float beta, float *c)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

tw_status tw_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       const float *b, float beta, float *c, tw_error *err)
{
    int share = atomic_load(&gemm_threads);
    double fit = (double)m * n * k / MACS_PER_THREAD;
    if (share > 1 && fit < 2) { /* oneDNN would run it on one thread of several: OpenBLAS's use them all */
        openblas_sgemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
        return TW_OK;
    }
    tw_cpu_omp_team(fit < share ? (int)fit : share); /* this thread's OpenMP team for the product */
    dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                 trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
    if (s == dnnl_out_of_memory) /* its packing buffers, e.g. under an address-space limit */
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "oneDNN: out of memory in dnnl_sgemm(%d x %d x %d)",
                            m, n, k);
    if (s != dnnl_success)
        return tw_error_set(err, TW_ERR_INTERNAL, NULL, -1,
                            "oneDNN: dnnl_sgemm(%d x %d x %d) failed (status %d)", m, n, k, (int)s);
    return TW_OK;
}

#else

tw_status tw_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       const float *b, float beta, float *c, tw_error *err)
{
    (void)err;
    openblas_sgemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    return TW_OK;
}

#endif
