/* test_schedule.c — engine/schedule.c: each learning-rate schedule at its edges (the warm-up's end, a
 * piecewise boundary, the end of a cosine decay), and the EMA's decay. TensorFlow's own functions are
 * compared step by step in tests/integration/test_recipe.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "config.h"
#include "schedule.h"

static tw_config base(void)
{
    static tw_config c; /* large: off the stack */
    tw_config_defaults(&c);
    c.learning_rate = 0.5f;
    return c;
}

static void test_exponential(void **state)
{
    (void)state;
    tw_config c = base();
    c.lr_decay = TW_DECAY_EXPONENTIAL;
    c.decay_steps = 10;
    c.decay_rate = 0.5f;
    assert_true(tw_learning_rate(&c, 0) == 0.5f);
    assert_float_equal(tw_learning_rate(&c, 10), 0.25, 1e-7);
    assert_float_equal(tw_learning_rate(&c, 5), 0.5 * pow(0.5, 0.5), 1e-7);
    c.staircase = 1;
    assert_float_equal(tw_learning_rate(&c, 19), 0.25, 1e-7);
    c.lr_decay = TW_DECAY_NONE;
    assert_true(tw_learning_rate(&c, 1000) == 0.5f);
}

static void test_cosine_with_warmup(void **state)
{
    (void)state;
    tw_config c = base();
    c.lr_decay = TW_DECAY_COSINE;
    c.decay_steps = 100;
    c.alpha = 0.1f;
    c.warmup_steps = 10;
    assert_true(tw_learning_rate(&c, 0) == 0.0f);
    assert_float_equal(tw_learning_rate(&c, 5), 0.25, 1e-7);       /* half-way up the ramp */
    assert_true(tw_learning_rate(&c, 10) == 0.5f);                 /* the peak: the decay's step 0 */
    assert_float_equal(tw_learning_rate(&c, 60), 0.5 * (0.9 * 0.5 + 0.1), 1e-6); /* half-way down */
    assert_float_equal(tw_learning_rate(&c, 110), 0.05, 1e-7);     /* the floor, alpha x lr */
    assert_float_equal(tw_learning_rate(&c, 100000), 0.05, 1e-7);  /* and it stays there */
}

static void test_piecewise(void **state)
{
    (void)state;
    tw_config c = base();
    c.lr_decay = TW_DECAY_PIECEWISE;
    c.n_boundaries = 2;
    c.boundaries[0] = 100;
    c.boundaries[1] = 200;
    c.n_factors = 3;
    c.factors[0] = 1.0f;
    c.factors[1] = 0.1f;
    c.factors[2] = 0.01f;
    assert_true(tw_learning_rate(&c, 100) == 0.5f);        /* a boundary belongs to the piece before it */
    assert_true(tw_learning_rate(&c, 101) == 0.5f * 0.1f);
    assert_true(tw_learning_rate(&c, 200) == 0.5f * 0.1f);
    assert_true(tw_learning_rate(&c, 201) == 0.5f * 0.01f);
    c.warmup_steps = 50; /* the boundaries count from the warm-up's end */
    assert_true(tw_learning_rate(&c, 150) == 0.5f);
    assert_true(tw_learning_rate(&c, 151) == 0.5f * 0.1f);
}

static void test_ema_decay(void **state)
{
    (void)state;
    assert_float_equal(tw_ema_decay(0.999f, 0), 0.1, 1e-7);      /* (1 + 0) / (10 + 0) */
    assert_float_equal(tw_ema_decay(0.999f, 90), 0.91, 1e-6);    /* 91 / 100 */
    assert_float_equal(tw_ema_decay(0.999f, 1000000), 0.999, 1e-7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exponential),
        cmocka_unit_test(test_cosine_with_warmup),
        cmocka_unit_test(test_piecewise),
        cmocka_unit_test(test_ema_decay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
