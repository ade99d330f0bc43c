/* test_world.c — world/world.c, the dispatch and the world of one (compiled in here without TW_HAVE_MPI,
 * so it is tested as a build without MPI even in builds with it: its definitions stand in for tw_engine's
 * world.o, which the linker then never pulls), the refusal to run as one of several processes a launcher
 * started, the TCP world (world_tcp.c, from tw_engine) with forked ranks on loopback: its reductions in
 * rank order, a collective called differently on two ranks and the abort, and the global shard index: over
 * every process and tower of a world, each row of the world's batch goes to exactly one tower, the tower
 * one process of all the towers would give it (world.h, train_step.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../world/world.c"
#include "train_step.h"
#include "testutil.h"

static const char *const WORLD_VARS[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "SLURM_PROCID",
                                         "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                         "PMI_SIZE", "JOB_COMPLETION_INDEX", "LOCAL_WORLD_SIZE",
                                         "TOWER_RENDEZVOUS_TIMEOUT"};

static void clear_world_env(void)
{
    for (size_t i = 0; i < sizeof WORLD_VARS / sizeof WORLD_VARS[0]; i++)
        unsetenv(WORLD_VARS[i]);
}

static void test_a_world_of_one(void **state)
{
    (void)state;
    clear_world_env();
    tw_world w;
    tw_error err;
    assert_int_equal(tw_world_init(&w, &err), TW_OK);
    assert_int_equal(tw_world_rank(&w), 0);
    assert_int_equal(tw_world_size(&w), 1);
    assert_string_equal(w.kind, "none");
    assert_int_equal(tw_world_tower_offset(&w, 4), 0);
    float g[3] = {1.5f, -2.0f, 3.25f};
    double d[2] = {0.5, 7.0};
    int64_t step = 42;
    assert_int_equal(tw_world_allreduce_avg(&w, g, 3, &err), TW_OK);
    assert_int_equal(tw_world_sum(&w, d, 2, &err), TW_OK);
    assert_int_equal(tw_world_bcast(&w, &step, sizeof step, &err), TW_OK);
    assert_true(g[0] == 1.5f && g[1] == -2.0f && g[2] == 3.25f && d[0] == 0.5 && d[1] == 7.0 && step == 42);
    int flag = 0;
    assert_int_equal(tw_world_any(&w, &flag, &err), TW_OK);
    assert_int_equal(flag, 0);
    flag = 5;
    assert_int_equal(tw_world_any(&w, &flag, &err), TW_OK);
    assert_int_equal(flag, 1);
    tw_world_finalize(&w);
}

static void test_one_of_several_processes_is_refused(void **state)
{
    (void)state;
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        unsetenv("OMPI_COMM_WORLD_SIZE");
        unsetenv("PMI_SIZE");
        tw_world w;
        tw_error err;
        setenv(vars[i], "1", 1); /* a launcher's world of one is fine */
        assert_int_equal(tw_world_launched_size(), 1);
        assert_int_equal(tw_world_init(&w, &err), TW_OK);
        setenv(vars[i], "2", 1);
        assert_int_equal(tw_world_launched_size(), 2);
        assert_int_equal(tw_world_init(&w, &err), TW_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.message, "one of 2 processes"));
        assert_non_null(strstr(err.message, "-DTW_MPI=ON")); /* names the build option */
        assert_int_equal(tw_world_size(&w), 1);              /* a failed join is a world of one */
        setenv(vars[i], "two", 1); /* not a count: no launcher */
        assert_int_equal(tw_world_launched_size(), 0);
    }
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
}

/* A port nothing listens on now (testutil.h). */
static int free_port(void)
{
    int port = tw_test_free_port();
    assert_true(port > 0);
    return port;
}

/* Forks size ranks of a TCP world on port; rank r runs body(r) and exits with its result. Returns the
 * exit statuses in status[size] (-1: not a normal exit). */
static void run_ranks(int size, int (*body)(int rank), int *status)
{
    int port = free_port();
    pid_t pid[8];
    for (int r = 0; r < size; r++) {
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0) {
            char v[16];
            clear_world_env();
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            snprintf(v, sizeof v, "%d", port);
            setenv("MASTER_PORT", v, 1);
            snprintf(v, sizeof v, "%d", size);
            setenv("WORLD_SIZE", v, 1);
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("TOWER_RENDEZVOUS_TIMEOUT", "30", 1);
            _exit(body(r));
        }
    }
    for (int r = 0; r < size; r++) {
        int st;
        assert_int_equal(waitpid(pid[r], &st, 0), pid[r]);
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
}

/* Rank r's buffer: values whose fp32 sum depends on the order they are added in. */
static float value(int rank, int i) { return (float)(rank + 1) * 0.1f + (float)i * 1e-7f + (rank == 1 ? 3e7f : 0); }

/* 3 ranks: the mean in rank order ((b0 + b1) + b2) * (1/3), fp64 sums, rank 0's broadcast, the OR. Exit
 * status: 0, or the number of the check that failed. */
static int three_ranks(int rank)
{
    tw_world w;
    tw_error err;
    if (tw_world_init(&w, &err) != TW_OK)
        return 10;
    if (strcmp(w.kind, "tcp") || w.size != 3 || w.rank != rank || w.local_size != 3)
        return 11;
    enum { N = 1000 };
    float g[N];
    for (int i = 0; i < N; i++)
        g[i] = value(rank, i);
    if (tw_world_allreduce_avg(&w, g, N, &err) != TW_OK)
        return 12;
    for (int i = 0; i < N; i++) {
        float want = value(0, i) + value(1, i);
        want += value(2, i);
        if (g[i] != want * (1.0f / 3.0f))
            return 13;
    }
    double d[2] = {rank + 0.5, 1e-3 * rank};
    int64_t step = rank == 0 ? 4242 : -1;
    if (tw_world_sum(&w, d, 2, &err) != TW_OK || d[0] != (0.5 + 1.5) + 2.5 || d[1] != (0.0 + 1e-3) + 2e-3)
        return 14;
    if (tw_world_bcast(&w, &step, sizeof step, &err) != TW_OK || step != 4242)
        return 15;
    int stop = rank == 2, none = 0;
    if (tw_world_any(&w, &stop, &err) != TW_OK || stop != 1 || tw_world_any(&w, &none, &err) != TW_OK || none)
        return 16;
    tw_world_finalize(&w);
    return 0;
}

static void test_a_tcp_world_reduces_in_rank_order(void **state)
{
    (void)state;
    int status[3];
    run_ranks(3, three_ranks, status);
    for (int r = 0; r < 3; r++)
        assert_int_equal(status[r], 0);
}

/* Rank 0 sums two doubles while rank 1 broadcasts 8 bytes: rank 0's error names both ranks and both
 * calls; its abort (status 7) ends rank 1 with 7 too. */
static int mismatched(int rank)
{
    tw_world w;
    tw_error err;
    tw_error_clear(&err);
    if (tw_world_init(&w, &err) != TW_OK)
        return 10;
    double d[2] = {1, 2};
    if (rank == 1) {
        tw_world_bcast(&w, d, sizeof d[0], &err);
        return 20; /* the abort ends this rank first */
    }
    if (tw_world_sum(&w, d, 2, &err) != TW_ERR_INTERNAL)
        return 21;
    const char *m = err.message;
    if (!strstr(m, "rank 0 is in collective #1, sum of 16 bytes") || !strstr(m, "rank 1 in #1, bcast of 8 bytes"))
        return 22;
    tw_world_abort(&w, 7);
}

static void test_a_mismatched_collective_names_both_ranks_and_aborts_all(void **state)
{
    (void)state;
    int status[2];
    run_ranks(2, mismatched, status);
    assert_int_equal(status[0], 7);
    assert_int_equal(status[1], 7);
}

/* 3 processes of 2 towers, batch 4: global tower g = rank * 2 + t trains on rows [4g, 4g + 4) of the
 * world's batch of 24, so every row has exactly one tower, as in one process of 6 towers. */
static void test_every_row_of_the_world_batch_has_one_tower(void **state)
{
    (void)state;
    enum { PROCS = 3, LOCAL = 2, BATCH = 4, ROWS = PROCS * LOCAL * BATCH };
    tw_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = BATCH;
    int owner[ROWS];
    for (int i = 0; i < ROWS; i++)
        owner[i] = -1;
    for (int rank = 0; rank < PROCS; rank++) {
        tw_world w = {.rank = rank, .size = PROCS};
        tw_towers T = {.c = &c, .n = LOCAL, .tower0 = tw_world_tower_offset(&w, LOCAL)};
        for (int t = 0; t < LOCAL; t++) {
            size_t first = tw_towers_first_row(&T, t);
            assert_int_equal(first, (size_t)(rank * LOCAL + t) * BATCH);
            for (size_t r = first; r < first + BATCH; r++) {
                assert_true(r < ROWS);
                assert_int_equal(owner[r], -1);
                owner[r] = rank * LOCAL + t;
            }
        }
    }
    for (int i = 0; i < ROWS; i++)
        assert_int_equal(owner[i], i / BATCH);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_world_of_one),
        cmocka_unit_test(test_one_of_several_processes_is_refused),
        cmocka_unit_test(test_a_tcp_world_reduces_in_rank_order),
        cmocka_unit_test(test_a_mismatched_collective_names_both_ranks_and_aborts_all),
        cmocka_unit_test(test_every_row_of_the_world_batch_has_one_tower),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
