/* usage.c — CPU and memory of a run's processes from /proc, its GPUs' from NVML (see usage.h).
 *
 * NVML is declared here by hand, the five calls Tower makes: the library comes with the NVIDIA driver, not
 * with the build's packages, so it is opened with dlopen and its header may be absent where Tower builds. */
#define _GNU_SOURCE
#include "usage.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================ /proc ================================ */

/* Adds process pid's CPU seconds and resident bytes when its group or session is leader. */
static void add_process(const char *pid, pid_t leader, double *cpu_s, uint64_t *rss)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = 0;
    const char *after = strrchr(text, ')'); /* the command name may hold spaces and parentheses */
    long pgrp, session, rss_pages;
    unsigned long utime, stime;
    /* fields 3.. after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss */
    if (!after || sscanf(after + 2, "%*c %*d %ld %ld %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d %*d "
                                    "%*u %*u %ld", &pgrp, &session, &utime, &stime, &rss_pages) != 5)
        return;
    if (pgrp != leader && session != leader)
        return;
    *cpu_s += (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
    *rss += (uint64_t)rss_pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void sample_processes(pid_t leader, double *cpu_s, uint64_t *rss)
{
    *cpu_s = 0;
    *rss = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
            add_process(e->d_name, leader, cpu_s, rss);
    if (d)
        closedir(d);
}

/* ================================ NVML ================================ */

typedef struct { unsigned int gpu, memory; } nvml_utilization;
typedef struct { unsigned long long total, free, used; } nvml_memory;

static struct {
    pthread_once_t once;
    int ok;
    int (*device)(unsigned int index, void **device);
    int (*utilization)(void *device, nvml_utilization *u);
    int (*memory)(void *device, nvml_memory *m);
} nvml = {.once = PTHREAD_ONCE_INIT};

static void nvml_open(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = lib ? (int (*)(void))dlsym(lib, "nvmlInit_v2") : NULL;
    nvml.device = lib ? (int (*)(unsigned int, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2") : NULL;
    nvml.utilization = lib ? (int (*)(void *, nvml_utilization *))dlsym(lib, "nvmlDeviceGetUtilizationRates") : NULL;
    nvml.memory = lib ? (int (*)(void *, nvml_memory *))dlsym(lib, "nvmlDeviceGetMemoryInfo") : NULL;
    nvml.ok = init && nvml.device && nvml.utilization && nvml.memory && init() == 0; /* NVML_SUCCESS */
}

/* The run's GPUs' mean utilisation and used memory into u; 0 when NVML cannot say. */
static int sample_gpus(tw_usage *u, const int *gpus, int n)
{
    if (n <= 0)
        return 0;
    pthread_once(&nvml.once, nvml_open);
    if (!nvml.ok)
        return 0;
    double util = 0;
    uint64_t used = 0;
    for (int i = 0; i < n; i++) {
        void *dev;
        nvml_utilization ut;
        nvml_memory mem;
        if (nvml.device((unsigned int)gpus[i], &dev) || nvml.utilization(dev, &ut) || nvml.memory(dev, &mem))
            return 0;
        util += ut.gpu;
        used += mem.used;
    }
    u->gpu_percent = util / n;
    u->gpu_bytes = used;
    return 1;
}

/* ================================ a sample ================================ */

void tw_usage_sample(tw_usage *u, pid_t leader, const int *gpus, int n, double now)
{
    double cpu_s;
    uint64_t rss;
    sample_processes(leader, &cpu_s, &rss);
    if (u->at > 0 && now > u->at)
        u->cpu_percent = 100.0 * (cpu_s - u->cpu_s) / (now - u->at);
    if (u->cpu_percent < 0) /* a process of the group ended: its seconds left the sum */
        u->cpu_percent = 0;
    u->cpu_s = cpu_s;
    u->at = now;
    u->rss_bytes = rss;
    u->gpu = sample_gpus(u, gpus, n);
    u->samples++;
}

json_t *tw_usage_json(const tw_usage *u)
{
    if (u->samples < 2)
        return json_null();
    return json_pack("{s:f, s:I, s:o, s:o}", "cpu_percent", u->cpu_percent, "rss_bytes", (json_int_t)u->rss_bytes,
                     "gpu_utilization_percent", u->gpu ? json_real(u->gpu_percent) : json_null(),
                     "gpu_memory_bytes", u->gpu ? json_integer((json_int_t)u->gpu_bytes) : json_null());
}
