/* test_memory.c — the memory estimate (engine/memory.h): its device part equals what a real replica
 * allocates on the CPU backend (the seed MLP under each optimizer, and a conv/pool/dropout/flatten
 * model, whose estimate also counts the im2col columns the CPU's direct convolution does not hold), the optimizers order as Adam > momentum > SGD, sizes past the backends' ints or 2^64 are
 * refused by name instead of wrapping, and the check refuses an estimate over the limit with a message
 * naming the estimate, its biggest part and the limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend.h"
#include "config.h"
#include "memory.h"
#include "model.h"

#define OK(call) assert_int_equal((call), TW_OK)

/* The seed MLP (examples/seed_mlp.json's model) with the given optimizer, shape and layers. */
static const char SEED_LAYERS[] =
    "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":500,\"activation\":\"relu\"},"
    "{\"type\":\"dense\",\"units\":10}";

static tw_status parse_batch(const char *optimizer, const char *shape, const char *layers,
                             int towers, int batch, tw_config *c, tw_error *err)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"dataset\":{\"train\":\"/x/train.tfrecord\",\"shape\":%s},\"model\":{\"layers\":[%s]},"
             "\"optimizer\":{\"type\":\"%s\"},\"batch_size\":%d,\"towers\":%d}",
             shape, layers, optimizer, batch, towers);
    return tw_config_parse(json, strlen(json), NULL, c, err);
}

static tw_status parse(const char *optimizer, const char *shape, const char *layers, int towers,
                       tw_config *c, tw_error *err)
{
    return parse_batch(optimizer, shape, layers, towers, 32, c, err);
}

static tw_config C; /* large: off the stack */

/* The estimate's device part for one tower against the bytes a real CPU replica holds. */
static void check_against_replica(const char *optimizer, const char *shape, const char *layers)
{
    tw_error err;
    OK(parse(optimizer, shape, layers, 1, &C, &err));
    tw_memory est;
    OK(tw_memory_estimate(&C, NULL, &est, &err));
    tw_model *m;
    tw_backend *b;
    tw_replica *r;
    OK(tw_model_create(&C, &m, &err));
    OK(tw_backend_create("cpu", 0, &b, &err));
    OK(tw_replica_create(m, b, C.batch_size, &r, &err));
    tw_replica_size rs; /* the CPU convolves directly: its replica holds no im2col columns */
    OK(tw_replica_size_of(m, C.batch_size, &rs, &err));
    assert_true(tw_backend_has_conv(b));
    assert_int_equal(est.device, tw_replica_bytes(r) + rs.columns);
    uint64_t sum = 0;
    for (int p = 0; p < TW_MEM_DEVICE_PARTS; p++)
        sum += est.part[p];
    assert_int_equal(sum, est.device); /* one tower: the parts are its device */
    assert_int_equal(est.part[TW_MEM_PARAMS], tw_model_param_floats(m) * sizeof(float));
    assert_true(est.part[TW_MEM_ACTIVATIONS] > 0 && est.host > 0);
    tw_replica_destroy(r);
    tw_backend_destroy(b);
    tw_model_destroy(m);
}

static void seed_mlp_matches_replica(void **state)
{
    (void)state;
    check_against_replica("sgd", "[28,28,1]", SEED_LAYERS);
    check_against_replica("momentum", "[28,28,1]", SEED_LAYERS);
    check_against_replica("adam", "[28,28,1]", SEED_LAYERS);
}

static void conv_model_matches_replica(void **state)
{
    (void)state;
    check_against_replica("adam", "[12,12,3]",
                          "{\"type\":\"conv2d\",\"filters\":4,\"kernel\":3,\"activation\":\"relu\"},"
                          "{\"type\":\"max_pool2d\",\"pool\":2},{\"type\":\"dropout\",\"rate\":0.5},"
                          "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":10}");
}

static uint64_t device_of(const char *optimizer)
{
    tw_error err;
    tw_memory est;
    OK(parse(optimizer, "[28,28,1]", SEED_LAYERS, 1, &C, &err));
    OK(tw_memory_estimate(&C, NULL, &est, &err));
    return est.device;
}

static void optimizers_order(void **state)
{
    (void)state;
    uint64_t sgd = device_of("sgd"), momentum = device_of("momentum"), adam = device_of("adam");
    uint64_t arena = 4 * (784 * 500 + 500 * 10 + 500 + 10);
    assert_int_equal(momentum - sgd, arena); /* one slot arena */
    assert_int_equal(adam - momentum, arena); /* the second */
}

static void towers_and_inputs_count(void **state)
{
    (void)state;
    tw_error err;
    tw_memory one, four, fed;
    OK(parse("sgd", "[28,28,1]", SEED_LAYERS, 1, &C, &err));
    OK(tw_memory_estimate(&C, NULL, &one, &err));
    OK(parse("sgd", "[28,28,1]", SEED_LAYERS, 4, &C, &err));
    OK(tw_memory_estimate(&C, NULL, &four, &err));
    assert_int_equal(four.device, one.device);
    assert_int_equal(four.part[TW_MEM_PARAMS], 4 * one.part[TW_MEM_PARAMS]);
    tw_memory_data d = {.train_examples = 60000};
    OK(tw_memory_estimate(&C, &d, &fed, &err));
    assert_true(fed.part[TW_MEM_INPUT] >= 60000ull * 784 * 4); /* decoded in memory */
    assert_int_equal(fed.host - four.host, fed.part[TW_MEM_INPUT]);
}

static void refuse_too_large(const char *shape, const char *layers, int towers, int batch,
                             const char *what)
{
    tw_error err;
    tw_memory est;
    tw_status s = parse_batch("sgd", shape, layers, towers, batch, &C, &err);
    if (s == TW_OK)
        s = tw_memory_estimate(&C, NULL, &est, &err);
    assert_int_equal(s, TW_ERR_INVALID);
    assert_non_null(strstr(err.message, what));
    assert_non_null(strstr(err.message, "too large"));
}

static void overflow_is_refused(void **state)
{
    (void)state;
    /* 2^40 values per example: past the backends' int sizes */
    refuse_too_large("[65536,65536,256]", "{\"type\":\"flatten\"},{\"type\":\"dense\",\"units\":10}",
                     1, 32, "dataset.shape");
    /* a convolution whose output passes 2^31 values per example */
    refuse_too_large("[1024,1024,1]",
                     "{\"type\":\"conv2d\",\"filters\":4096,\"kernel\":3},{\"type\":\"flatten\"},"
                     "{\"type\":\"dense\",\"units\":10}", 1, 32, "model.layers[0] (conv2d)");
    /* conv columns of 2^14 rows x 2^14 positions x 2^28 values = 2^58 bytes per tower, times 64
     * towers: past 2^64 */
    refuse_too_large("[128,128,65536]",
                     "{\"type\":\"conv2d\",\"filters\":1,\"kernel\":64},{\"type\":\"flatten\"},"
                     "{\"type\":\"dense\",\"units\":10}", 64, 16384, "2^64");
    /* 2^16 rows x 2^15 positions: a GEMM with more than 2^31 - 1 rows */
    refuse_too_large("[128,256,1]",
                     "{\"type\":\"conv2d\",\"filters\":1,\"kernel\":1},{\"type\":\"flatten\"},"
                     "{\"type\":\"dense\",\"units\":10}", 1, 65536, "model.layers[0] (conv2d)");
}

static void check_names_estimate_and_limit(void **state)
{
    (void)state;
    tw_error err;
    tw_memory est;
    OK(parse("adam", "[784]", "{\"type\":\"dense\",\"units\":65536},{\"type\":\"dense\",\"units\":65536},"
                              "{\"type\":\"dense\",\"units\":10}", 1, &C, &err));
    OK(tw_memory_estimate(&C, NULL, &est, &err));
    uint64_t weights = 4ull * (784 * 65536 + 65536ull * 65536 + 65536 * 10 + 65536 * 2 + 10);
    assert_int_equal(est.part[TW_MEM_PARAMS], weights);
    assert_int_equal(est.part[TW_MEM_SLOTS], 2 * weights);
    tw_memory_limit limit;
    tw_memory_limit_given(24ull << 30, &limit);
    assert_int_equal(tw_memory_check(&est, 0, &limit, NULL, &err), TW_ERR_INVALID);
    char estimate[32], part[64], b[32];
    tw_memory_format(est.device + est.host, estimate, sizeof estimate);
    assert_non_null(strstr(err.message, estimate));
    tw_memory_format(weights, b, sizeof b);
    snprintf(part, sizeof part, "weights %s", b);
    assert_non_null(strstr(err.message, part));
    tw_memory_format(2 * weights, b, sizeof b);
    snprintf(part, sizeof part, "Adam slots %s", b);
    assert_non_null(strstr(err.message, part));
    assert_non_null(strstr(err.message, "24.0 GiB"));
    /* on a GPU the device parts are checked against the GPU, the host parts against the host */
    tw_memory_limit big;
    tw_memory_limit_given(1ull << 40, &big);
    OK(tw_memory_check(&est, 1, &big, &big, &err));
    assert_int_equal(tw_memory_check(&est, 1, &big, &limit, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "on each GPU"));
    OK(tw_memory_check(&est, 0, &big, NULL, &err));
}

static void host_limit_is_sane(void **state)
{
    (void)state;
    tw_error err;
    tw_memory_limit host;
    OK(tw_memory_host_limit(&host, &err));
    assert_true(host.bytes >= (64ull << 20));
    assert_non_null(strstr(host.what, "the CPU has"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seed_mlp_matches_replica),
        cmocka_unit_test(conv_model_matches_replica),
        cmocka_unit_test(optimizers_order),
        cmocka_unit_test(towers_and_inputs_count),
        cmocka_unit_test(overflow_is_refused),
        cmocka_unit_test(check_names_estimate_and_limit),
        cmocka_unit_test(host_limit_is_sane),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
