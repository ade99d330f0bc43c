/* memcg.h — the memory cgroup a process is charged to, as the kernel shows it: how many processes the
 * kernel's OOM killer has killed in it, its limit and its peak use. The scheduler notes a trainer's group
 * and count when it starts and looks again when the trainer dies of SIGKILL that the server did not
 * send: a count that grew means the OOM killer, not a crash (docs/reliability.md).
 *
 * cgroup v2 (memory.events "oom_kill", memory.max, memory.peak) and v1 (memory.oom_control "oom_kill",
 * memory.limit_in_bytes, memory.max_usage_in_bytes), under /sys/fs/cgroup; the group's ancestors up to
 * the mount count too (a limit set on a container's group, the trainer in a child of it). Where no group
 * says it (no memory controller; the whole machine out of memory), the kernel's log (/dev/kmsg, when this
 * process may read it) is searched for the kill of the pid.
 *
 * Written by hand: a few small files read; libcgroup creates and configures groups, it has no reader
 * for these counters. Owns nothing durable. */
#ifndef TW_MEMCG_H
#define TW_MEMCG_H

#include <limits.h>
#include <sys/types.h>

typedef struct {
    char dir[PATH_MAX];  /* the group's folder; "" when the process has none that can be read */
    char root[64];       /* the mount the walk up stops at */
    int v2;
} tw_memcg;

/* The memory cgroup of process pid into *g (g->dir "" when none can be read). */
void tw_memcg_of(pid_t pid, tw_memcg *g);

/* The OOM kills counted in the group and its ancestors so far; -1 when unknown. */
long long tw_memcg_oom_kills(const tw_memcg *g);

/* The lowest limit of the group and its ancestors in bytes, -1 when none; the group's peak use in
 * bytes, -1 when unknown. */
long long tw_memcg_limit(const tw_memcg *g);
long long tw_memcg_peak(const tw_memcg *g);

/* 1 when the kernel's log records killing pid for want of memory; 0 when it does not or cannot be read. */
int tw_memcg_kernel_killed(pid_t pid);

#endif
