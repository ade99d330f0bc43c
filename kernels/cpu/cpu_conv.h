/* cpu_conv.h — the CPU backend's convolutions through oneDNN (cpu_conv.c); internal to the CPU backend
 * (and the backend registry, whose tw_backend_process_init calls tw_cpu_conv_process_init for main).
 *
 * Owns: one oneDNN engine and stream per CPU backend instance and its cache of convolution primitives,
 * one per (window, filters, direction), created on first use and executed on every later call, and one
 * arena for the primitives' copies of their operands and their scratchpads (cpu_conv.c). Layouts
 * are Tower's: activations NHWC / NDHWC, filters [kd, kh, kw, in_c, filters] (TensorFlow's DHWIO).
 * Does not own: argument checks (backend.c) or the activation (act_fwd/act_bwd follow, as on every
 * backend: oneDNN's ReLU post-op turns a NaN into 0, where TensorFlow's and Tower's ReLU keep it; see
 * cpu_conv.c). */
#ifndef TW_CPU_CONV_H
#define TW_CPU_CONV_H

#include "backend.h"

typedef struct tw_cpu_conv tw_cpu_conv;

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

/* on = 1: the 2-D 3x3 stride-1 convolutions use oneDNN's Winograd kernels where it has them (AVX-512;
 * elsewhere, and for every other window, direct ones), their activations copied to and from the blocked
 * layout those want; 0 (the default): direct kernels throughout. Winograd's F(4x4, 3x3) rounds
 * differently from a direct sum (about 1e-6 relative; BENCHMARKS.md). Cached primitives are dropped
 * when the choice changes. */
void tw_cpu_conv_set_winograd(tw_cpu_conv *c, int on);

/* The forward convolution over window w with `filters` outputs per position: y[batch, out.., filters]
 * (overwritten) from x[batch, in.., in_c], f and bias[filters]. Errors: TW_ERR_INTERNAL naming the oneDNN
 * call that failed; TW_ERR_NOMEM. */
tw_status tw_cpu_conv_fwd(tw_cpu_conv *c, const tw_window *w, int filters, const float *x, const float *f,
                          float *y, float *bias, tw_error *err);

/* Its backward: df[k.., in_c, filters] and dbias[filters] (both overwritten) from x and dy[batch, out..,
 * filters]; then, when dx is not NULL, dx[batch, in.., in_c] (overwritten) from dy and f. The two share
 * dy's copy where both want it in another layout than Tower's (Winograd's). Errors: as tw_cpu_conv_fwd. */
tw_status tw_cpu_conv_bwd(tw_cpu_conv *c, const tw_window *w, int filters, const float *x, const float *dy,
                          const float *f, float *df, float *dbias, float *dx, tw_error *err);

#endif
