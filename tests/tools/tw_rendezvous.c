/* tw_rendezvous.c — one rank of a torchrun-style world, for tests/integration/test_rendezvous.py (and the
 * GPU world test): reads the world from the environment (world/rendezvous.h), and rank 0 makes a random
 * token of BYTES bytes and hands it to every rank exactly as a CUDA world hands out its NCCL unique id
 * (tw_rendezvous_share). Owns nothing but its arguments.
 *
 *   tw_rendezvous [--timeout SECONDS] [--bytes N]      (defaults 30 and 128, NCCL_UNIQUE_ID_BYTES)
 *
 * Prints {"rank":R,"size":N,"rank_from":VAR,"token":"HEX"} on one line. Exit status 0 ok; 1 the
 * rendezvous failed (a time-out, a refusal by rank 0), with "STATUS: message" on stderr; 2 a usage error,
 * no world in the environment, or a bad variable (the message names it). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "rendezvous.h"

static int fail(const char *what, const tw_error *err, int code)
{
    char msg[1200];
    tw_error_format(err, msg, sizeof msg);
    fprintf(stderr, "%s: %s: %s\n", what, tw_status_name(err->status), msg);
    return code;
}

/* Strict positive number from argv; 0 when it is not one. */
static double number(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    return end != s && !*end && v > 0 ? v : 0;
}

int main(int argc, char **argv)
{
    double timeout_s = 30, bytes = 128;
    for (int i = 1; i < argc; i++) {
        double *into = !strcmp(argv[i], "--timeout") ? &timeout_s
                       : !strcmp(argv[i], "--bytes") ? &bytes : NULL;
        if (!into || i + 1 == argc || !(*into = number(argv[++i])) ||
            (into == &bytes && bytes > TW_RENDEZVOUS_MAX_BLOB)) {
            fprintf(stderr, "usage: tw_rendezvous [--timeout SECONDS] [--bytes 1..%d]\n",
                    TW_RENDEZVOUS_MAX_BLOB);
            return 2;
        }
    }
    tw_error err;
    tw_error_clear(&err);
    tw_rendezvous r;
    int present = 0;
    if (tw_rendezvous_from_env(&r, &present, &err) != TW_OK)
        return fail("tw_rendezvous", &err, 2);
    if (!present) {
        fprintf(stderr, "tw_rendezvous: no world: set MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK\n");
        return 2;
    }
    size_t n = (size_t)bytes;
    unsigned char token[TW_RENDEZVOUS_MAX_BLOB];
    memset(token, 0, n);
    if (r.rank == 0 && getrandom(token, n, 0) != (ssize_t)n) {
        perror("tw_rendezvous: getrandom");
        return 1;
    }
    if (tw_rendezvous_share(&r, token, n, timeout_s, &err) != TW_OK)
        return fail("tw_rendezvous", &err, 1);
    printf("{\"rank\":%d,\"size\":%d,\"rank_from\":\"%s\",\"token\":\"", r.rank, r.size, r.rank_from);
    for (size_t i = 0; i < n; i++)
        printf("%02x", token[i]);
    printf("\"}\n");
    return fflush(stdout) == 0 ? 0 : 1;
}
