/* test_world.c — engine/world_none.c, the world of one (compiled in here, so it is tested in builds with
 * MPI too: its definitions stand in for world.c's, which the linker then never pulls from tw_engine), the
 * refusal to run as one of several processes a launcher started, and the global shard index: over every
 * process and tower of a world, each row of the world's batch goes to exactly one tower, the tower one
 * process of all the towers would give it (world.h, train_step.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "../../engine/world_none.c"
#include "train_step.h"

static void test_a_world_of_one(void **state)
{
    (void)state;
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
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
    assert_int_equal(tw_world_any(&w, 0), 0);
    assert_int_equal(tw_world_any(&w, 5), 1);
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
        setenv(vars[i], "two", 1); /* not a count: no launcher */
        assert_int_equal(tw_world_launched_size(), 0);
    }
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
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
        cmocka_unit_test(test_every_row_of_the_world_batch_has_one_tower),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
