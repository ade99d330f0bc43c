/* memcg.c — a process's memory cgroup: OOM kills, limit and peak (memcg.h). */
#define _GNU_SOURCE
#include "memcg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { KMSG_RECORDS_MAX = 1 << 20 }; /* the kernel's ring holds far fewer */

static const long long UNLIMITED = 1LL << 60; /* v1 writes "no limit" as a page-rounded LLONG_MAX */

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The path of the process's memory group within its hierarchy ("/..."), from /proc/PID/cgroup, into
 * path. 0, or -1 when the process has none. */
static int group_path(pid_t pid, int v2, char *path, size_t size)
{
    char file[64], line[PATH_MAX + 64];
    snprintf(file, sizeof file, "/proc/%d/cgroup", (int)pid);
    FILE *f = fopen(file, "re");
    int found = -1;
    while (f && found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *controllers = strchr(line, ':'), *rest = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!rest)
            continue;
        *rest++ = 0;
        controllers++;
        int memory = 0;
        for (char *save = NULL, *c = strtok_r(controllers, ",", &save); c; c = strtok_r(NULL, ",", &save))
            memory |= !strcmp(c, "memory");
        if (v2 ? !strncmp(line, "0", 2) && !*controllers : memory)
            found = snprintf(path, size, "%s", rest) < (int)size ? 0 : -1;
    }
    if (f)
        fclose(f);
    return found;
}

void tw_memcg_of(pid_t pid, tw_memcg *g)
{
    memset(g, 0, sizeof *g);
    char path[PATH_MAX];
    g->v2 = access("/sys/fs/cgroup/cgroup.controllers", R_OK) == 0;
    snprintf(g->root, sizeof g->root, "%s", g->v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory");
    if (!is_dir(g->root) || group_path(pid, g->v2, path, sizeof path) != 0)
        return;
    int n = snprintf(g->dir, sizeof g->dir, "%s%s", g->root, strcmp(path, "/") ? path : "");
    if (n < 0 || (size_t)n >= sizeof g->dir || !is_dir(g->dir)) /* a namespace shows the group as its root */
        snprintf(g->dir, sizeof g->dir, "%s", g->root);
}

/* The number after "key " in a file of "key value" lines, or the file's single number (key NULL);
 * -1 when absent, unreadable or "max". */
static long long read_value(const char *dir, const char *file, const char *key)
{
    char path[PATH_MAX + 64], line[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "re");
    long long v = -1;
    size_t k = key ? strlen(key) : 0;
    while (f && v < 0 && fgets(line, sizeof line, f)) {
        const char *num = key ? (!strncmp(line, key, k) && line[k] == ' ' ? line + k + 1 : NULL) : line;
        char *end;
        errno = 0;
        long long x = num ? strtoll(num, &end, 10) : -1;
        if (num && !errno && end != num && x >= 0)
            v = x;
        if (!key)
            break;
    }
    if (f)
        fclose(f);
    return v;
}

/* Steps dir up to its parent; 0 once it was the root (or outside it). */
static int up(const tw_memcg *g, char *dir)
{
    if (strcmp(dir, g->root) == 0 || strncmp(dir, g->root, strlen(g->root)) != 0)
        return 0;
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    *slash = 0;
    return 1;
}

/* The values of file (key, as read_value) in the group and each ancestor up to the root, folded with
 * fold (acc starts at -1: none yet); -1 when the group is unknown. */
static long long fold_up(const tw_memcg *g, const char *file, const char *key, long long (*fold)(long long, long long))
{
    if (!g->dir[0])
        return -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", g->dir);
    long long acc = -1;
    do
        acc = fold(acc, read_value(dir, file, key));
    while (up(g, dir));
    return acc;
}

static long long sum(long long acc, long long v) { return v < 0 ? acc : (acc < 0 ? 0 : acc) + v; }

static long long lowest_limit(long long acc, long long v)
{
    return v > 0 && v < UNLIMITED && (acc < 0 || v < acc) ? v : acc;
}

long long tw_memcg_oom_kills(const tw_memcg *g)
{
    return fold_up(g, g->v2 ? "memory.events" : "memory.oom_control", "oom_kill", sum);
}

long long tw_memcg_limit(const tw_memcg *g)
{
    return fold_up(g, g->v2 ? "memory.max" : "memory.limit_in_bytes", NULL, lowest_limit);
}

long long tw_memcg_peak(const tw_memcg *g)
{
    return g->dir[0] ? read_value(g->dir, g->v2 ? "memory.peak" : "memory.max_usage_in_bytes", NULL) : -1;
}

int tw_memcg_kernel_killed(pid_t pid)
{
    int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char needle[48], record[8192];
    snprintf(needle, sizeof needle, "Killed process %d (", (int)pid);
    int found = 0;
    for (int i = 0; !found && i < KMSG_RECORDS_MAX; i++) {
        ssize_t n = read(fd, record, sizeof record - 1); /* one record per read */
        if (n < 0 && errno == EPIPE) /* overwritten while read: go on with the next */
            continue;
        if (n <= 0)
            break;
        record[n] = 0;
        found = strstr(record, needle) != NULL;
    }
    close(fd);
    return found;
}
