/* usage.h — what a run's processes use, as the server reads it: CPU % and resident memory from /proc for
 * every process of the run's process group or session (the trainer, or a launched world's local ranks),
 * and, when the NVIDIA driver's NVML library is installed, the utilisation and used memory of the run's
 * GPUs (loaded with dlopen at the first sample: a server without it has no GPU figures, never a link
 * dependency).
 *
 * Owns: the sampling and the figures of one run. Does not own which processes or devices are the run's
 * (scheduler.c) nor how they are shown (api_runs.c, api_system.c's /metrics). */
#ifndef TW_USAGE_H
#define TW_USAGE_H

#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

typedef struct {
    double cpu_s;          /* CPU seconds (user + system) of the processes at the last sample */
    double at;             /* monotonic seconds of the last sample, 0: none yet */
    double cpu_percent;    /* over the interval between the last two samples (100 = one core) */
    uint64_t rss_bytes;    /* resident memory, summed over the processes */
    int gpu;               /* the GPU figures below hold (NVML answered for the run's devices) */
    double gpu_percent;    /* mean utilisation of the run's GPUs */
    uint64_t gpu_bytes;    /* memory used on the run's GPUs */
    int samples;           /* how many samples were taken */
} tw_usage;

/* Samples the processes whose group or session is `leader`, at monotonic time now; gpus[n] are the NVML
 * indices of the run's GPUs (n = 0: none). */
void tw_usage_sample(tw_usage *u, pid_t leader, const int *gpus, int n, double now);

/* The figures as the run object shows them (new): {"cpu_percent", "rss_bytes", "gpu_utilization_percent",
 * "gpu_memory_bytes"} (GPU ones null without NVML), or null before two samples. */
json_t *tw_usage_json(const tw_usage *u);

#endif
