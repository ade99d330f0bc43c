/* dnnl_sgemm_signals.c — oneDNN's dnnl_sgemm under a storm of signals on the calling thread, without
 * Tower (the evidence for engine/train_main.c's signal thread; not built by CMake, not a test).
 *
 *   gcc -O2 -o /tmp/dnnl_sgemm_signals tests/tools/probes/dnnl_sgemm_signals.c -ldnnl -lpthread
 *   OMP_NUM_THREADS=1 /tmp/dnnl_sgemm_signals MODE [ITERATIONS]
 *
 * A second thread sends SIGUSR1 to the main thread every 50 us while the main thread multiplies the seed
 * MLP's first layer (32 x 500 x 784, forward) with dnnl_sgemm again and again, mallocs and frees around
 * it, and compares each product with the first one. MODE:
 *   0  no signals
 *   1  an empty handler, run on the thread's own stack: glibc aborts ("corrupted size vs. prev_size")
 *      within a few thousand products (oneDNN 2.6, AVX-512, Debian 12)
 *   2  the same handler on an alternate stack (sigaltstack, SA_ONSTACK): no corruption
 *   3  the signal blocked in the thread: no corruption
 *   4  as 2, and the handler counts the signals that found the interrupted stack pointer outside the
 *      thread's stack: almost all (it is in the heap, page-aligned: oneDNN's JIT kernel, for K > 84,
 *      runs with rsp in its malloc'ed workspace, and the kernel writes a signal's frame below rsp) */
#define _GNU_SOURCE
#include <dnnl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

enum { M = 32, N = 500, K = 784 };

static pthread_t main_thread;
static volatile int done;
static volatile long hits, off_stack;
static unsigned long stack_lo, stack_hi;

static void on_signal(int sig) { (void)sig; hits++; }

static void on_signal_info(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    hits++;
    unsigned long sp = (unsigned long)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RSP];
    if (sp < stack_lo || sp > stack_hi)
        off_stack++;
}

static void *kicker(void *unused)
{
    (void)unused;
    while (!done) {
        pthread_kill(main_thread, SIGUSR1);
        usleep(50);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int mode = argc > 1 ? atoi(argv[1]) : 1, iterations = argc > 2 ? atoi(argv[2]) : 5000;
    char here;
    stack_hi = (unsigned long)&here + 4096;
    stack_lo = stack_hi - (8ul << 20);
    main_thread = pthread_self();
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    if (mode == 4) {
        sa.sa_sigaction = on_signal_info;
        sa.sa_flags = SA_SIGINFO;
    }
    if (mode == 2 || mode == 4) {
        stack_t st = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16};
        sigaltstack(&st, NULL);
        sa.sa_flags |= SA_ONSTACK;
    }
    sigaction(SIGUSR1, &sa, NULL);
    if (mode == 3) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &s, NULL);
    }
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c = malloc(sizeof(float) * M * N), *first = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 7) - 3;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 5) - 2;
    dnnl_sgemm('N', 'N', M, N, K, 1, a, K, b, N, 0, first, N);
    pthread_t k;
    if (mode)
        pthread_create(&k, NULL, kicker, NULL);
    long wrong = 0;
    for (int it = 0; it < iterations; it++) {
        dnnl_sgemm('N', 'N', M, N, K, 1, a, K, b, N, 0, c, N);
        if (memcmp(c, first, sizeof(float) * M * N))
            wrong++;
        free(malloc(sizeof(float) * K * N)); /* the heap at work, as in a step: glibc checks its chunks */
        free(malloc(sizeof(float) * M * K));
    }
    done = 1;
    if (mode)
        pthread_join(k, NULL);
    if (mode == 4)
        printf("signals that found rsp outside the thread's stack: %ld of %ld\n", off_stack, hits);
    printf("mode %d: %ld signals, %ld wrong products of %d\n", mode, hits, wrong, iterations);
    return wrong != 0;
}
