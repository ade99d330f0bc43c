/* testutil.h — scratch folders and free loopback ports for the unit tests, shared so every test makes
 * and removes them the same way. Header-only (static inline): each test program includes what it uses. */
#ifndef TW_TESTUTIL_H
#define TW_TESTUTIL_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The tests' scratch root: $TW_TEST_TMP (created if missing) or /tmp. */
static inline const char *tw_test_tmp(void)
{
    const char *base = getenv("TW_TEST_TMP");
    if (!base || !base[0])
        return "/tmp";
    mkdir(base, 0755);
    return base;
}

/* Makes a fresh folder "<tw_test_tmp()>/<prefix>.XXXXXX" and writes its path into out.
 * Returns 0, or -1 with errno set. */
static inline int tw_test_mkdtemp(char *out, size_t size, const char *prefix)
{
    snprintf(out, size, "%s/%s.XXXXXX", tw_test_tmp(), prefix);
    return mkdtemp(out) ? 0 : -1;
}

/* Removes dir and everything in it (symlinks are removed, not followed). Returns 0, or -1 with errno
 * set. */
static inline int tw_test_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char path[4096];
    struct stat sb;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
            rc = -1;
        else
            rc |= lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? tw_test_rmdir(path) : unlink(path);
    }
    closedir(d);
    return rc | rmdir(dir);
}

/* A loopback TCP port nothing listens on now (the kernel's pick), or -1. */
static inline int tw_test_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(s, (struct sockaddr *)&a, &len) == 0;
    if (s >= 0)
        close(s);
    return ok ? ntohs(a.sin_port) : -1;
}

/* CLOCK_REALTIME in seconds, as the event writer stamps wall_time. time() reads a coarser clock that
 * may differ from it by a tick either way, so bounds on a wall_time are taken with this. */
static inline double tw_test_realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9; /* the writer's formula */
}

#endif
