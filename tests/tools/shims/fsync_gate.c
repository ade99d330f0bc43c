/* fsync_gate.c — an LD_PRELOAD shim for tests: a slow disk on demand. fsync and fdatasync of a file
 * whose name contains "$TW_FSYNC_GATE_MATCH" (default ".safetensors.tmp": a checkpoint being written)
 * wait until the file "$TW_FSYNC_GATE" exists, polling every 10 ms, then do the real call. Without
 * TW_FSYNC_GATE it changes nothing. Test-only (tests/integration/test_checkpoint_async.py); owns nothing
 * of Tower's. Hand-written: no stock tool delays one file's fsync until a condition holds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Waits for the gate when fd names a matching file. */
static void gate(int fd)
{
    const char *path = getenv("TW_FSYNC_GATE"), *match = getenv("TW_FSYNC_GATE_MATCH");
    char link[64], name[4096];
    if (!path)
        return;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, name, sizeof name - 1);
    if (n <= 0)
        return;
    name[n] = '\0';
    if (!strstr(name, match ? match : ".safetensors.tmp"))
        return;
    const struct timespec tick = {0, 10 * 1000 * 1000};
    while (access(path, F_OK) != 0)
        nanosleep(&tick, NULL);
}

int fsync(int fd)
{
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    gate(fd);
    return real(fd);
}

int fdatasync(int fd)
{
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    gate(fd);
    return real(fd);
}
