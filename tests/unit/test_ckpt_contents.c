/* test_ckpt_contents.c — engine/ckpt_contents.c: the arenas and TensorFlow names a checkpoint holds per
 * optimizer (batch norm's moving statistics raw only), the state's metadata written and read back through
 * a real checkpoint file, and a missing or malformed key named. (An unknown format is refused when the
 * file is read: test_checkpoint.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "testutil.h"

#include "ckpt_contents.h"
#include "config.h"
#include "model.h"

/* A dense layer and a batch norm: weights, biases, gamma, beta and the two moving statistics. */
static tw_model *model(tw_optimizer_kind o)
{
    static tw_config c;
    tw_config_defaults(&c);
    c.rank = 1;
    c.shape[0] = 3;
    c.n_layers = 2;
    c.layers[0].type = TW_LAYER_DENSE;
    c.layers[0].units = 4;
    snprintf(c.layers[0].name, sizeof c.layers[0].name, "d");
    c.layers[1].type = TW_LAYER_BATCH_NORM;
    snprintf(c.layers[1].name, sizeof c.layers[1].name, "bn");
    c.optimizer = o;
    tw_model *m;
    tw_error err;
    assert_int_equal(tw_model_create(&c, &m, &err), TW_OK);
    return m;
}

static const tw_param *find(const tw_model *m, const char *name)
{
    for (size_t i = 0; i < tw_model_n_params(m); i++)
        if (!strcmp(tw_model_param(m, i)->name, name))
            return tw_model_param(m, i);
    fail_msg("no variable %s", name);
    return NULL;
}

static void test_names_per_optimizer(void **state)
{
    (void)state;
    assert_int_equal(tw_ckpt_arena_count(TW_OPT_SGD), 2);
    assert_int_equal(tw_ckpt_arena_count(TW_OPT_MOMENTUM), 3);
    assert_int_equal(tw_ckpt_arena_count(TW_OPT_ADAM), 4);
    tw_model *m = model(TW_OPT_ADAM);
    const tw_param *w = find(m, "d/weights"), *mean = find(m, "bn/BatchNorm/moving_mean");
    char name[TW_CKPT_TENSOR_NAME_BYTES];
    tw_ckpt_name(w, TW_OPT_ADAM, TW_CKPT_PARAMS, name);
    assert_string_equal(name, "d/weights");
    tw_ckpt_name(w, TW_OPT_ADAM, TW_CKPT_EMA, name);
    assert_string_equal(name, "d/weights/ExponentialMovingAverage");
    tw_ckpt_name(w, TW_OPT_ADAM, TW_CKPT_SLOT1, name);
    assert_string_equal(name, "d/weights/Adam");
    tw_ckpt_name(w, TW_OPT_ADAM, TW_CKPT_SLOT2, name);
    assert_string_equal(name, "d/weights/Adam_1");
    tw_ckpt_name(w, TW_OPT_MOMENTUM, TW_CKPT_SLOT1, name);
    assert_string_equal(name, "d/weights/Momentum");
    /* the moving statistics: raw only, and read raw for an EMA model too */
    assert_true(tw_ckpt_holds(mean, TW_CKPT_PARAMS));
    assert_false(tw_ckpt_holds(mean, TW_CKPT_EMA));
    assert_false(tw_ckpt_holds(mean, TW_CKPT_SLOT1));
    tw_ckpt_weights_name(mean, 1, name);
    assert_string_equal(name, "bn/BatchNorm/moving_mean");
    tw_ckpt_weights_name(find(m, "bn/BatchNorm/gamma"), 1, name);
    assert_string_equal(name, "bn/BatchNorm/gamma/ExponentialMovingAverage");
    /* 3x4 + 4 + 4 + 4 trainable values in 4 arenas, 8 moving statistics once */
    assert_int_equal(tw_ckpt_values(m, TW_OPT_ADAM), 4 * 24 + 8);
    tw_model_destroy(m);
}

/* Saves state s in a checkpoint (one tensor) under dir, reads it back into *ck. */
static void save_and_read(const char *dir, const tw_ckpt_meta *meta, size_t n_meta, tw_checkpoint **ck)
{
    float w[2] = {1, 2};
    const tw_ckpt_tensor t = {.name = "w", .data = w, .rank = 1, .shape = {2}};
    tw_error err;
    assert_int_equal(tw_checkpoint_save(dir, 7, 3, &t, 1, meta, n_meta, &err), TW_OK);
    assert_int_equal(tw_checkpoint_open_latest(dir, ck, &err), TW_OK);
}

static void test_state_round_trip(void **state)
{
    (void)state;
    char dir[512];
    assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "ckpt_contents"), 0);
    tw_ckpt_state s = {.step = 7, .data_epoch = 3, .data_consumed = 12345678901234ull,
                       .seed = 18446744073709551615ull, .config = "{\"steps\":9}"}, back;
    tw_ckpt_meta meta[TW_CKPT_META];
    tw_ckpt_state_text text;
    tw_ckpt_state_meta(&s, meta, &text);
    assert_string_equal(meta[0].key, "format");
    assert_string_equal(meta[0].value, TW_CHECKPOINT_FORMAT);
    tw_checkpoint *ck;
    save_and_read(dir, meta, TW_CKPT_META, &ck);
    tw_error err;
    assert_int_equal(tw_ckpt_state_read(ck, &back, &err), TW_OK);
    assert_int_equal(back.step, 7);
    assert_int_equal(back.data_epoch, 3);
    assert_true(back.data_consumed == 12345678901234ull && back.seed == 18446744073709551615ull);
    assert_string_equal(back.config, "{\"steps\":9}");
    tw_checkpoint_free(ck);
    assert_int_equal(tw_test_rmdir(dir), 0);
}

/* A key left out, and a key that is not a number, are named. */
static void test_missing_and_malformed_keys(void **state)
{
    (void)state;
    static const struct {
        const char *drop, *value, *message;
    } cases[] = {{"data_epoch", NULL, "checkpoint metadata lacks 'data_epoch'"},
                 {"seed", "-1", "checkpoint metadata 'seed' is '-1', not a number"},
                 {"step", "12x", "checkpoint metadata 'step' is '12x', not a number"},
                 {"config", NULL, "checkpoint metadata holds no run config"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char dir[512];
        assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "ckpt_contents"), 0);
        tw_ckpt_state s = {.step = 1, .config = "{}"}, back;
        tw_ckpt_meta meta[TW_CKPT_META], kept[TW_CKPT_META];
        tw_ckpt_state_text text;
        tw_ckpt_state_meta(&s, meta, &text);
        size_t n = 0;
        for (int i = 0; i < TW_CKPT_META; i++) {
            if (strcmp(meta[i].key, cases[k].drop) != 0)
                kept[n++] = meta[i];
            else if (cases[k].value)
                kept[n++] = (tw_ckpt_meta){meta[i].key, cases[k].value};
        }
        tw_checkpoint *ck;
        save_and_read(dir, kept, n, &ck);
        tw_error err;
        assert_int_equal(tw_ckpt_state_read(ck, &back, &err), TW_ERR_CORRUPT);
        assert_non_null(strstr(err.message, cases[k].message));
        tw_checkpoint_free(ck);
        assert_int_equal(tw_test_rmdir(dir), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_per_optimizer),
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_missing_and_malformed_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
