/* cpu_conv.h — the CPU backend's convolutions through oneDNN (cpu_conv.c); internal to the CPU backend
 * (and the backend registry, whose tw_backend_process_init calls tw_cpu_conv_process_init for main).
 *
 * Owns: one oneDNN engine and stream per CPU backend instance and its cache of convolution primitives,
 * one per (window, filters, direction), created on first use and executed on every later call. Layouts
 * are Tower's: activations NHWC / NDHWC, filters [kd, kh, kw, in_c, filters] (TensorFlow's DHWIO).
 * Does not own: argument checks (backend.c) or the activation (act_fwd/act_bwd follow, as on every
 * backend: oneDNN's ReLU post-op turns a NaN into 0, where TensorFlow's and Tower's ReLU keep it; see
 * cpu_conv.c). */
#ifndef TW_CPU_CONV_H
#define TW_CPU_CONV_H

#include "backend.h"

typedef struct tw_cpu_conv tw_cpu_conv;

typedef enum {
    TW_CONV_FWD = 0,        /* out = y[batch, out.., filters] from a = x, b = f, plus bias[filters] */
    TW_CONV_BWD_DATA = 1,   /* out = dx[batch, in.., in_c] (overwritten) from a = dy, b = f; no bias */
    TW_CONV_BWD_FILTER = 2, /* out = df[k.., in_c, filters] and bias = dbias[filters] (both
                               overwritten) from a = x, b = dy */
} tw_conv_dir;

/* Caller owns *out. Errors: TW_ERR_INTERNAL when oneDNN has no CPU engine; TW_ERR_NOMEM. */
tw_status tw_cpu_conv_create(tw_cpu_conv **out, tw_error *err);
void tw_cpu_conv_destroy(tw_cpu_conv *c); /* NULL-safe */

/* The threads each instance's convolutions use from now on (process-wide; tw_backend_plan's share). */
void tw_cpu_conv_threads(int threads);

/* Called by main before a command that computes on the CPU, with main's argv: sets OMP_WAIT_POLICY=passive
 * (unless it or GOMP_SPINCOUNT is set) and OPENBLAS_THREAD_TIMEOUT=4 (unless set) and, where it set
 * one, re-executes the program (/proc/self/exe, the same argv and pid), since libgomp and OpenBLAS read
 * them once, as they load. Their defaults have each idle thread spin for a long while after every
 * oneDNN call or sgemm, on the core the other library's thread and Tower's own loops need next (see
 * cpu_conv.c). Returns where nothing is to be done or exec fails (the process then runs on with the
 * libraries' defaults). */
void tw_cpu_conv_process_init(char **argv);

/* One convolution of direction dir over window w with `filters` outputs per position; a, b and out are
 * host arrays of the shapes above. Errors: TW_ERR_INTERNAL naming the oneDNN call that failed;
 * TW_ERR_NOMEM. */
tw_status tw_cpu_conv_run(tw_cpu_conv *c, tw_conv_dir dir, const tw_window *w, int filters,
                          const float *a, const float *b, float *out, float *bias, tw_error *err);

#endif
