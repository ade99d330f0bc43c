/* test_backend_world.c — the checked wrappers of backend.h's world of processes on a build's CPU backend,
 * which offers none (its processes average through MPI): tw_backend_has_world is 0, world_id and
 * world_join are TW_ERR_UNSUPPORTED naming the kind, and world_join's arguments are checked before the
 * kind is asked. The CUDA side runs in tests/gpu/test_nccl_world.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cpu_backend.h"

static void expect(tw_status got, tw_status want, const tw_error *e, const char *named)
{
    assert_int_equal(got, want);
    if (!strstr(e->message, named))
        fail_msg("message '%s' does not name '%s'", e->message, named);
}

static void test_cpu_has_no_world(void **state)
{
    (void)state;
    tw_error e;
    tw_error_clear(&e);
    tw_backend *cpu = NULL;
    assert_int_equal(tw_backend_create("cpu", 0, &cpu, &e), TW_OK);
    assert_null(tw_cpu_backend_ops.world_id);
    assert_null(tw_cpu_backend_ops.world_join);
    assert_int_equal(tw_backend_has_world(cpu), 0);
    assert_int_equal(tw_backend_has_world(NULL), 0);
    unsigned char id[TW_WORLD_ID_BYTES] = {0};
    expect(tw_backend_world_id(cpu, id, &e), TW_ERR_UNSUPPORTED, &e, "the cpu backend cannot join");
    expect(tw_backend_world_join(&cpu, 1, id, 0, 2, &e), TW_ERR_UNSUPPORTED, &e, "cpu");
    tw_backend_destroy(cpu);
}

static void test_join_arguments(void **state)
{
    (void)state;
    tw_error e;
    tw_error_clear(&e);
    tw_backend *cpu = NULL;
    assert_int_equal(tw_backend_create("cpu", 0, &cpu, &e), TW_OK);
    unsigned char id[TW_WORLD_ID_BYTES] = {0};
    expect(tw_backend_world_join(&cpu, 1, id, 2, 2, &e), TW_ERR_INVALID, &e, "node 2 of 2 nodes");
    expect(tw_backend_world_join(&cpu, 1, id, -1, 2, &e), TW_ERR_INVALID, &e, "node -1");
    expect(tw_backend_world_join(&cpu, 1, id, 0, TW_WORLD_MAX_NODES + 1, &e), TW_ERR_INVALID, &e,
           "nodes in [1, 4096]");
    expect(tw_backend_world_join(&cpu, 0, id, 0, 1, &e), TW_ERR_INVALID, &e, "towers (0)");
    expect(tw_backend_world_join(&cpu, 1, NULL, 0, 1, &e), TW_ERR_INVALID, &e, "id");
    expect(tw_backend_world_id(cpu, NULL, &e), TW_ERR_UNSUPPORTED, &e, "cpu");
    expect(tw_backend_world_id(NULL, id, &e), TW_ERR_INVALID, &e, "no backend");
    tw_backend_destroy(cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_has_no_world),
        cmocka_unit_test(test_join_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
