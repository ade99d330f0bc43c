/* cpu_gemm.c — the CPU backend's GEMM. See cpu_gemm.h.
 *
 * OpenBLAS's cblas_sgemm multiplies. oneDNN's dnnl_sgemm (2.6, Debian 12) was measured 1.2x to 2x faster
 * on the seed MLP's and the Fashion CNN's dense shapes, but a SIGTERM that stops a run while the main
 * thread is inside it corrupted the heap (glibc: "corrupted size vs. prev_size", SIGSEGV/SIGABRT instead
 * of the stop's checkpoint; test_runs_control.py's cancel, reproduced 5 runs in 8), so it is not used
 * until that is understood. The thread count depends on the plan's share only, never on timing, so a run
 * and its resume multiply alike (bit-exact resume, test_trainer.c).
 *
 * Also the OpenMP team size of oneDNN's convolutions (tw_cpu_omp_team): Debian's libdnnl runs on OpenMP
 * (libgomp), whose team size is per calling thread, set through the omp_set_num_threads of the runtime
 * libdnnl loaded (found with dlsym: the engine links no OpenMP runtime of its own). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "cpu_gemm.h"

#include <stdatomic.h>

#include <cblas.h>

#ifdef TW_HAVE_DNNL
#include <dlfcn.h>
#endif

void tw_cpu_gemm_threads(int threads) { openblas_set_num_threads(threads > 1 ? threads : 1); }

#ifdef TW_HAVE_DNNL

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

#endif

tw_status tw_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       const float *b, float beta, float *c, tw_error *err)
{
    (void)err;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
    return TW_OK;
}

