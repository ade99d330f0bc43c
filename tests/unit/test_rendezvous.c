/* test_rendezvous.c — the world's variables (world/rendezvous.h): where the rank and size come from, and
 * every check with the variable it names; plus one share between threads on loopback and the argument
 * checks of tw_rendezvous_share; the optional TOWER_RENDEZVOUS_TIMEOUT and LOCAL_WORLD_SIZE. The processes' view (launchers' variables, strays, time-outs, refusals) is
 * tests/integration/test_rendezvous.py's. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rendezvous.h"
#include "testutil.h"

static const char *const VARS[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "SLURM_PROCID",
                                   "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                   "JOB_COMPLETION_INDEX", "LOCAL_WORLD_SIZE", "TOWER_RENDEZVOUS_TIMEOUT"};

/* Clears every world variable, then sets the NULL-terminated name, value pairs. */
static void env(const char *name, ...)
{
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        unsetenv(VARS[i]);
    va_list ap;
    va_start(ap, name);
    for (const char *n = name; n; n = va_arg(ap, const char *))
        setenv(n, va_arg(ap, const char *), 1);
    va_end(ap);
}

/* Reads the environment expecting an error whose message contains `named`. */
static void expect_error(const char *named)
{
    tw_rendezvous r;
    int present = 0;
    tw_error err;
    tw_error_clear(&err);
    assert_int_equal(tw_rendezvous_from_env(&r, &present, &err), TW_ERR_INVALID);
    if (!strstr(err.message, named))
        fail_msg("message '%s' does not name '%s'", err.message, named);
}

static tw_rendezvous expect_world(void)
{
    tw_rendezvous r;
    int present = 0;
    tw_error err;
    tw_error_clear(&err);
    assert_int_equal(tw_rendezvous_from_env(&r, &present, &err), TW_OK);
    assert_int_equal(present, 1);
    return r;
}

static void test_torchrun_variables(void **state)
{
    (void)state;
    env("MASTER_ADDR", "node-0.svc", "MASTER_PORT", "29500", "WORLD_SIZE", "4", "RANK", "3", NULL);
    tw_rendezvous r = expect_world();
    assert_string_equal(r.addr, "node-0.svc");
    assert_int_equal(r.port, 29500);
    assert_int_equal(r.size, 4);
    assert_int_equal(r.rank, 3);
    assert_string_equal(r.rank_from, "RANK");
    assert_string_equal(r.size_from, "WORLD_SIZE");
    assert_true(r.timeout_s == TW_RENDEZVOUS_TIMEOUT_S); /* the default join time-out */
    assert_int_equal(r.local_size, 0);                   /* not set: counted from host names */
}

static void test_timeout_and_local_size(void **state)
{
    (void)state;
    env("MASTER_ADDR", "h", "MASTER_PORT", "1", "WORLD_SIZE", "4", "RANK", "0", "TOWER_RENDEZVOUS_TIMEOUT",
        "2", "LOCAL_WORLD_SIZE", "4", NULL);
    tw_rendezvous r = expect_world();
    assert_true(r.timeout_s == 2);
    assert_int_equal(r.local_size, 4);
    static const char *const bad[][2] = {{"TOWER_RENDEZVOUS_TIMEOUT", "0"}, {"TOWER_RENDEZVOUS_TIMEOUT", "86401"},
                                         {"TOWER_RENDEZVOUS_TIMEOUT", "2s"}, {"TOWER_RENDEZVOUS_TIMEOUT", ""},
                                         {"LOCAL_WORLD_SIZE", "5"}, {"LOCAL_WORLD_SIZE", "0"},
                                         {"LOCAL_WORLD_SIZE", "-1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        env("MASTER_ADDR", "h", "MASTER_PORT", "1", "WORLD_SIZE", "4", "RANK", "0", bad[i][0], bad[i][1], NULL);
        expect_error(bad[i][0]);
    }
}

static void test_no_world(void **state)
{
    (void)state;
    /* a launcher's own variables alone do not ask for a rendezvous */
    env("SLURM_PROCID", "1", "SLURM_NTASKS", "2", "OMPI_COMM_WORLD_RANK", "0", "JOB_COMPLETION_INDEX", "2",
        NULL);
    tw_rendezvous r = {.port = 7};
    int present = 1;
    tw_error err;
    tw_error_clear(&err);
    assert_int_equal(tw_rendezvous_from_env(&r, &present, &err), TW_OK);
    assert_int_equal(present, 0);
    assert_int_equal(r.port, 7);
}

static void test_rank_from_launchers(void **state)
{
    (void)state;
    env("MASTER_ADDR", "h", "MASTER_PORT", "1", "SLURM_PROCID", "2", "SLURM_NTASKS", "3", NULL);
    tw_rendezvous r = expect_world();
    assert_int_equal(r.rank, 2);
    assert_int_equal(r.size, 3);
    assert_string_equal(r.rank_from, "SLURM_PROCID");
    assert_string_equal(r.size_from, "SLURM_NTASKS");

    env("MASTER_ADDR", "h", "MASTER_PORT", "65535", "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE",
        "2", NULL);
    r = expect_world();
    assert_int_equal(r.port, 65535);
    assert_string_equal(r.rank_from, "OMPI_COMM_WORLD_RANK");
    assert_string_equal(r.size_from, "OMPI_COMM_WORLD_SIZE");

    env("MASTER_ADDR", "h", "MASTER_PORT", "80", "JOB_COMPLETION_INDEX", "4095", "WORLD_SIZE", "4096",
        NULL);
    r = expect_world();
    assert_int_equal(r.rank, 4095);
    assert_string_equal(r.rank_from, "JOB_COMPLETION_INDEX");
    assert_string_equal(r.size_from, "WORLD_SIZE");

    /* RANK before the launchers' ranks, WORLD_SIZE before their sizes */
    env("MASTER_ADDR", "h", "MASTER_PORT", "80", "RANK", "0", "SLURM_PROCID", "5", "WORLD_SIZE", "2",
        "SLURM_NTASKS", "9", NULL);
    r = expect_world();
    assert_int_equal(r.rank, 0);
    assert_int_equal(r.size, 2);
    assert_string_equal(r.rank_from, "RANK");
}

/* One bad environment: the variables beside a valid MASTER_ADDR=h, MASTER_PORT=80 (NULL value: unset),
 * and what the message must contain. */
typedef struct {
    const char *vars[8]; /* name, value, name, value, ... */
    const char *named;
} bad_case;

static void test_bad_variables(void **state)
{
    (void)state;
    static char long_addr[TW_RENDEZVOUS_ADDR_MAX + 1];
    memset(long_addr, 'a', sizeof long_addr - 1);
    static const bad_case cases[] = {
        {{"WORLD_SIZE", "2", "RANK", "2"}, "RANK=2 is not below WORLD_SIZE=2"},
        {{"MASTER_PORT", "0", "WORLD_SIZE", "2", "RANK", "1"}, "MASTER_PORT=0 is outside 1..65535"},
        {{"MASTER_PORT", "99999999999", "WORLD_SIZE", "2", "RANK", "1"},
         "MASTER_PORT='99999999999' is not a decimal number"},
        {{"MASTER_PORT", "+80", "WORLD_SIZE", "2", "RANK", "1"}, "MASTER_PORT='+80'"},
        {{"WORLD_SIZE", "4097", "RANK", "1"}, "WORLD_SIZE=4097 is outside 1..4096"},
        {{"WORLD_SIZE", "", "RANK", "1"}, "WORLD_SIZE=''"},
        {{"WORLD_SIZE", "2", "RANK", "1\n"}, "RANK='(unprintable)'"},
        {{"SLURM_PROCID", "x", "SLURM_NTASKS", "2"}, "SLURM_PROCID='x'"},
        {{"SLURM_PROCID", "1", "SLURM_NTASKS", "1"}, "SLURM_PROCID=1 is not below SLURM_NTASKS=1"},
        {{"JOB_COMPLETION_INDEX", "1"}, "WORLD_SIZE is not set (JOB_COMPLETION_INDEX=1"},
        {{"MASTER_ADDR", NULL, "WORLD_SIZE", "2", "RANK", "1"}, "MASTER_ADDR is not set"},
        {{"MASTER_ADDR", "", "WORLD_SIZE", "2", "RANK", "1"}, "MASTER_ADDR is empty"},
        {{"MASTER_ADDR", long_addr, "WORLD_SIZE", "2", "RANK", "1"}, "MASTER_ADDR="},
        {{"MASTER_PORT", NULL, "WORLD_SIZE", "2", "RANK", "1"}, "MASTER_PORT is not set"},
        {{"WORLD_SIZE", "2"}, "RANK is not set"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        env("MASTER_ADDR", "h", "MASTER_PORT", "80", NULL);
        for (int v = 0; v < 8 && cases[c].vars[v]; v += 2) {
            if (cases[c].vars[v + 1])
                setenv(cases[c].vars[v], cases[c].vars[v + 1], 1);
            else
                unsetenv(cases[c].vars[v]);
        }
        expect_error(cases[c].named);
    }
}

static void test_share_arguments(void **state)
{
    (void)state;
    tw_rendezvous r = {.addr = "127.0.0.1", .port = 1, .rank = 0, .size = 1, .rank_from = "RANK",
                       .size_from = "WORLD_SIZE"};
    unsigned char blob[8] = {1, 2, 3};
    tw_error err;
    tw_error_clear(&err);
    assert_int_equal(tw_rendezvous_share(&r, blob, sizeof blob, 1, &err), TW_OK); /* a world of one */
    assert_int_equal(blob[2], 3);
    assert_int_equal(tw_rendezvous_share(&r, blob, 0, 1, &err), TW_ERR_INVALID);
    assert_int_equal(tw_rendezvous_share(&r, blob, TW_RENDEZVOUS_MAX_BLOB + 1, 1, &err), TW_ERR_INVALID);
    assert_int_equal(tw_rendezvous_share(&r, blob, sizeof blob, 0, &err), TW_ERR_INVALID);
    r.rank = 1;
    assert_int_equal(tw_rendezvous_share(&r, blob, sizeof blob, 1, &err), TW_ERR_INVALID);
}

typedef struct {
    tw_rendezvous r;
    unsigned char blob[300];
    tw_status status;
    tw_error err;
} rank_job;

static void *run_rank(void *p)
{
    rank_job *j = p;
    tw_error_clear(&j->err);
    j->status = tw_rendezvous_share(&j->r, j->blob, sizeof j->blob, 20, &j->err);
    return NULL;
}

/* A port nothing listens on now (testutil.h). */
static int free_port(void)
{
    int port = tw_test_free_port();
    assert_true(port > 0);
    return port;
}

static void test_share_between_threads(void **state)
{
    (void)state;
    enum { SIZE = 3 };
    static rank_job jobs[SIZE];
    int port = free_port();
    pthread_t t[SIZE];
    for (int i = 0; i < SIZE; i++) {
        jobs[i] = (rank_job){.r = {.addr = "127.0.0.1", .port = port, .rank = i, .size = SIZE,
                                   .rank_from = "RANK", .size_from = "WORLD_SIZE"}};
        for (size_t k = 0; k < sizeof jobs[i].blob; k++)
            jobs[i].blob[k] = (unsigned char)(i == 0 ? k * 7 + 1 : 0xee);
    }
    for (int i = SIZE - 1; i >= 0; i--)
        assert_int_equal(pthread_create(&t[i], NULL, run_rank, &jobs[i]), 0);
    for (int i = 0; i < SIZE; i++) {
        pthread_join(t[i], NULL);
        if (jobs[i].status != TW_OK)
            fail_msg("rank %d: %s", i, jobs[i].err.message);
        assert_memory_equal(jobs[i].blob, jobs[0].blob, sizeof jobs[0].blob);
    }
    assert_int_equal(jobs[1].blob[299], (unsigned char)(299 * 7 + 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torchrun_variables),
        cmocka_unit_test(test_no_world),
        cmocka_unit_test(test_timeout_and_local_size),
        cmocka_unit_test(test_rank_from_launchers),
        cmocka_unit_test(test_bad_variables),
        cmocka_unit_test(test_share_arguments),
        cmocka_unit_test(test_share_between_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
