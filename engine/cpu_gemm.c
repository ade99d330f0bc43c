/* cpu_gemm.c — the CPU backend's GEMM. See cpu_gemm.h.
 *
 * Why oneDNN first: its dnnl_sgemm JIT-compiles for the CPU's real instruction set (AVX-512 on these
 * VMs), while OpenBLAS runs whatever core it detects or OPENBLAS_CORETYPE names (SSE3 "Prescott" when
 * detection fails, Haswell as preset here). Measured one thread each (`tw_bench engine-gemm` against
 * `tw_bench gemm`, OPENBLAS_CORETYPE=Haswell), oneDNN was 1.2x to 2x faster on every dense shape of the
 * seed MLP (batch 32: 784-500-10, forward, backward data and weights) and of the Fashion CNN's dense
 * layers (batch 100: 3136-1024-10), so every shape goes to oneDNN where the build has it (TW_HAVE_DNNL);
 * without it (the cpu_conv_none.c build) OpenBLAS multiplies. The route depends on the build only and
 * the thread count on the shape and the plan's share only (apply_threads), never on timing, so a run
 * and its resume multiply alike.
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

#ifdef TW_HAVE_DNNL
#include <dlfcn.h>
#include <dnnl.h>
#else
#include <cblas.h>
#endif

static atomic_int gemm_threads = 1;

void tw_cpu_gemm_threads(int threads) { atomic_store(&gemm_threads, threads); }

#ifdef TW_HAVE_DNNL

/* A product of fewer multiply-adds than this per thread runs on fewer threads (at least one): the MLP's
 * (12.5 M at batch 32) on one, the Fashion CNN's first dense layer (321 M at batch 100) on the share. On
 * these shared 2-core VMs an OpenMP team costs more than it gives on the small products (its threads
 * spin at the barrier while the other core runs another tower or process: 1.2 GFLOP/s instead of 38 on
 * one thread for 32 x 500 x 784 with the machine busy). */
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

/* Sets this thread's OpenMP team size for an m x n x k product. */
static void apply_threads(int m, int n, int k)
{
    int share = atomic_load(&gemm_threads);
    double fit = (double)m * n * k / MACS_PER_THREAD;
    tw_cpu_omp_team(fit < share ? (int)fit : share);
}

tw_status tw_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       const float *b, float beta, float *c, tw_error *err)
{
    apply_threads(m, n, k);
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
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
    return TW_OK;
}

#endif
