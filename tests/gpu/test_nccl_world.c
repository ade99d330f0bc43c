/* test_nccl_world.c — a CUDA world of two processes (backend.h's world_id / world_join) bootstrapped the way
 * `tower train` will in a torchrun-style job: rank 0 makes the NCCL unique id, the TCP rendezvous
 * (world/rendezvous.h, the path tests/tools/tw_rendezvous takes) hands it to rank 1, both join the world
 * and all-reduce a known vector, whose average every rank must then hold exactly. Also a world of one
 * process (its all-reduce of one tower goes through NCCL and leaves the values as they are) and the refusal
 * of an all-reduce over another set of a world's towers.
 *
 * The program is both the test and its ranks: without world variables it runs the world of one, then
 * starts itself twice on loopback (MASTER_ADDR=127.0.0.1, a free MASTER_PORT, WORLD_SIZE=2, RANK=r) and
 * waits for both, each with a bound (a rank alarms after RANK_LIMIT_S; the parent kills what is left after
 * PARENT_LIMIT_S). On a machine with one GPU both ranks use it: each gets its own NCCL_HOSTID, so NCCL
 * takes them for two nodes and connects them through its socket transport (NCCL_SOCKET_IFNAME=lo,
 * NCCL_IB_DISABLE=1), as two machines would; with two GPUs rank r uses GPU r. Exit 0 passed, 1 failed,
 * 77 no CUDA device. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "gpu_skip.h"
#include "rendezvous.h"
#include "../unit/testutil.h"

extern char **environ;

enum { N = 4099, RANK_LIMIT_S = 120, PARENT_LIMIT_S = 180 };

static int failures;

static void expect(int ok, const char *what, const tw_error *e)
{
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, e && e->message[0] ? ": " : "",
           e ? e->message : "");
    failures += !ok;
}

/* Rank r's vector: v[i] = (r + 1) * i + r / 2, exact in fp32, so the average of ranks 0..size-1 is
 * exact too. */
static float value(int rank, int i) { return (float)(rank + 1) * (float)i + 0.5f * (float)rank; }

/* Uploads rank's vector to b, all-reduces it over towers[0..n) and checks every element against the
 * average over `size` ranks. */
static void allreduce_check(tw_backend *b, tw_backend *const *towers, int n, int rank, int size,
                            const char *what)
{
    static float host[N];
    tw_error e;
    tw_error_clear(&e);
    tw_buffer *buf = NULL;
    tw_status s = tw_backend_alloc(b, N * sizeof(float), &buf, &e);
    for (int i = 0; i < N; i++)
        host[i] = value(rank, i);
    if (s == TW_OK)
        s = tw_backend_upload(b, tw_tensor_of(buf), host, sizeof host, &e);
    tw_tensor view = buf ? tw_tensor_of(buf) : (tw_tensor){0};
    if (s == TW_OK)
        s = tw_backend_allreduce_avg(towers, n, &view, N, &e);
    if (s == TW_OK)
        s = tw_backend_download(b, host, tw_tensor_of(buf), sizeof host, &e);
    int bad = -1;
    for (int i = 0; s == TW_OK && i < N && bad < 0; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += value(r, i);
        if (host[i] != want / (float)size)
            bad = i;
    }
    char line[200];
    snprintf(line, sizeof line, "rank %d: %s (%d floats%s%d)", rank, what, N,
             bad >= 0 ? ", first wrong at " : "", bad >= 0 ? bad : N);
    expect(s == TW_OK && bad < 0, line, s == TW_OK ? NULL : &e);
    tw_backend_free(b, buf);
}

/* One rank of the two-process world, from the environment. */
static int run_rank(void)
{
    alarm(RANK_LIMIT_S); /* a hung NCCL call ends the rank (and fails the test), never the machine */
    tw_error e;
    tw_error_clear(&e);
    tw_rendezvous r;
    int present = 0;
    if (tw_rendezvous_from_env(&r, &present, &e) != TW_OK || !present) {
        expect(0, "the rank's world from the environment", &e);
        return 1;
    }
    int devices = tw_backend_devices("cuda");
    tw_backend *b = NULL;
    if (devices < 1 || tw_backend_create("cuda", r.rank % devices, &b, &e) != TW_OK) {
        expect(0, "create", &e);
        return 1;
    }
    unsigned char id[TW_WORLD_ID_BYTES] = {0};
    tw_status s = r.rank == 0 ? tw_backend_world_id(b, id, &e) : TW_OK;
    if (s == TW_OK)
        s = tw_rendezvous_share(&r, id, sizeof id, 60, &e);
    if (s == TW_OK)
        s = tw_backend_world_join(&b, 1, id, r.rank, r.size, &e);
    char line[120];
    snprintf(line, sizeof line, "rank %d of %d: id made, shared and the world joined on %s", r.rank,
             r.size, tw_backend_name(b));
    expect(s == TW_OK, line, s == TW_OK ? NULL : &e);
    if (s == TW_OK) {
        allreduce_check(b, &b, 1, r.rank, r.size, "the world's average");
        allreduce_check(b, &b, 1, r.rank, r.size, "again, on the same communicators");
    }
    tw_backend_destroy(b);
    return failures ? 1 : 0;
}

/* A world of one process and one tower, and the refusal of a local group over a world's tower. */
static void world_of_one(void)
{
    tw_error e;
    tw_error_clear(&e);
    tw_backend *b = NULL, *b2 = NULL;
    unsigned char id[TW_WORLD_ID_BYTES];
    tw_status s = tw_backend_create("cuda", 0, &b, &e);
    expect(s == TW_OK && tw_backend_has_world(b), "the CUDA backend offers worlds", &e);
    if (s == TW_OK)
        s = tw_backend_world_id(b, id, &e);
    if (s == TW_OK)
        s = tw_backend_world_join(&b, 1, id, 0, 1, &e);
    expect(s == TW_OK, "a world of one process joined", s == TW_OK ? NULL : &e);
    if (s != TW_OK) {
        tw_backend_destroy(b);
        return;
    }
    allreduce_check(b, &b, 1, 0, 1, "a world of one leaves the values");
    if (tw_backend_devices("cuda") > 1 && tw_backend_create("cuda", 1, &b2, &e) == TW_OK) {
        tw_backend *pair[2] = {b, b2};
        tw_buffer *x = NULL, *y = NULL;
        s = tw_backend_alloc(b, 64, &x, &e);
        if (s == TW_OK)
            s = tw_backend_alloc(b2, 64, &y, &e);
        tw_tensor views[2] = {tw_tensor_of(x), tw_tensor_of(y)};
        if (s == TW_OK)
            s = tw_backend_allreduce_avg(pair, 2, views, 16, &e);
        expect(s == TW_ERR_INVALID && strstr(e.message, "world"),
               "an all-reduce over another set than the world's towers is refused", &e);
        tw_backend_free(b, x);
        tw_backend_free(b2, y);
        tw_backend_destroy(b2);
    }
    tw_backend_destroy(b);
}

/* A free loopback port (testutil.h), or torchrun's default when none could be had. */
static int free_port(void)
{
    int port = tw_test_free_port();
    return port > 0 ? port : 29500;
}

/* Starts this program as rank `rank` of a world of two on port: the parent's environment without any
 * world variable, plus the rank's. */
static pid_t spawn_rank(int rank, int port)
{
    static const char *const drop[] = {"MASTER_ADDR=", "MASTER_PORT=", "WORLD_SIZE=", "RANK=",
                                       "SLURM_PROCID=", "OMPI_COMM_WORLD_RANK=",
                                       "JOB_COMPLETION_INDEX=", "NCCL_HOSTID="};
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 6, sizeof *env);
    char vars[5][64];
    size_t k = 0;
    for (size_t i = 0; env && i < n; i++) {
        int keep = 1;
        for (size_t d = 0; d < sizeof drop / sizeof drop[0]; d++)
            keep &= strncmp(environ[i], drop[d], strlen(drop[d])) != 0;
        if (keep)
            env[k++] = environ[i];
    }
    snprintf(vars[0], 64, "MASTER_PORT=%d", port);
    snprintf(vars[1], 64, "RANK=%d", rank);
    snprintf(vars[2], 64, "NCCL_HOSTID=tower-test-node-%d", rank); /* two "nodes" on one machine */
    snprintf(vars[3], 64, "MASTER_ADDR=127.0.0.1");
    snprintf(vars[4], 64, "WORLD_SIZE=2");
    for (int v = 0; env && v < 5; v++)
        env[k++] = vars[v];
    pid_t pid = -1;
    char *argv[] = {"test_nccl_world", NULL};
    if (!env || posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env) != 0)
        pid = -1;
    free(env);
    return pid;
}

/* Waits for both ranks (pids[r] is rank r), killing what is left after PARENT_LIMIT_S. */
static void wait_ranks(const pid_t *pids)
{
    time_t end = time(NULL) + PARENT_LIMIT_S;
    int status[2] = {0, 0}, done[2] = {0, 0};
    while (!done[0] || !done[1]) {
        for (int r = 0; r < 2; r++)
            done[r] = done[r] || waitpid(pids[r], &status[r], WNOHANG) == pids[r];
        if ((!done[0] || !done[1]) && time(NULL) > end) {
            for (int r = 0; r < 2; r++)
                if (!done[r]) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], &status[r], 0);
                }
            expect(0, "the two ranks ended within the bound (the rest was killed)", NULL);
            return;
        }
        struct timespec tick = {0, 100 * 1000 * 1000}; /* the poll's interval */
        nanosleep(&tick, NULL);
    }
    for (int r = 0; r < 2; r++) {
        char line[80];
        snprintf(line, sizeof line, "rank %d ended with exit 0 (wait status %d)", r, status[r]);
        expect(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0, line, NULL);
    }
}

int main(void)
{
    if (getenv("RANK"))
        return run_rank();
    tw_error e;
    tw_error_clear(&e);
    if (tw_gpu_devices_or_skip("cuda") < 1) {
        return TW_GPU_SKIP;
    }
    setenv("NCCL_SOCKET_IFNAME", "lo", 0); /* loopback sockets, unless the caller says otherwise */
    setenv("NCCL_IB_DISABLE", "1", 0);
    world_of_one();
    int port = free_port();
    fflush(stdout);
    pid_t pids[2];
    pids[1] = spawn_rank(1, port); /* the peer first: it retries until rank 0 listens */
    pids[0] = spawn_rank(0, port);
    expect(pids[0] > 0 && pids[1] > 0, "two ranks started", NULL);
    if (pids[0] > 0 && pids[1] > 0)
        wait_ranks(pids);
    for (int r = 0; r < 2 && (pids[0] <= 0 || pids[1] <= 0); r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
