/* test_elementwise.c — NaN and Inf through the CPU backend's element-wise ops (engine/elementwise.h) as
 * TensorFlow passes them, so that a NaN input reaches the loss and the trainer's NaN/Inf loss check
 * fires instead of the ReLU turning it into 0.
 *
 * The expected values were printed by TensorFlow 2.21 on the CPU (the venv of scripts/install-deps.sh
 * --test), with and without oneDNN:
 *   tf.nn.relu([nan, -1, 0, 2, inf, -inf])            -> [nan, 0, 0, 2, inf, 0]; relu(-0.) is -0.
 *   tf.raw_ops.ReluGrad(gradients=[1, nan, inf, -2, 1, 1], features=[nan, -1, 0, 2, inf, -inf])
 *                                                      -> [0, nan, nan, -2, 1, 0]; (-3, -1) gives -0.
 *   tf.nn.tanh / tf.nn.sigmoid of the same x           -> tanh [nan, -0.7615942, 0, 0.9640276, 1, -1],
 *                                                         sigmoid [nan, 0.26894143, 0.5, 0.8807971, 1, 0]
 *   sparse_softmax_cross_entropy_with_logits(labels=[0, 1, 0],
 *       logits=[[1, nan, 0], [1, 2, 3], [inf, 0, 0]])  -> [nan, 1.4076059, nan]
 *   the gradient of tf.nn.max_pool2d(ksize 2, stride 2) over [[1, 2], [3, 4]] with a NaN at tap t:
 *       t = 0 -> [1, 0, 0, 0], t = 1 -> [0, 0, 0, 1], t = 3 -> [0, 0, 1, 0]
 *       (its forward skips every NaN: cpu_maxpool_fwd says where Tower differs, and this pins it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

enum { N = 6 };

static tw_backend *B;
static tw_error E;

#define OK(call)                                                                                   \
    do {                                                                                           \
        tw_error_clear(&E);                                                                        \
        if ((call) != TW_OK)                                                                       \
            fail_msg("%s failed: %s", #call, E.message);                                           \
    } while (0)

static const float X[N] = {NAN, -1.0f, 0.0f, 2.0f, INFINITY, -INFINITY};

static tw_buffer *dev_from(const void *v, size_t n) /* n values of 4 bytes: fp32 or int32 */
{
    tw_buffer *b = NULL;
    OK(tw_backend_alloc(B, n * 4, &b, &E));
    OK(tw_backend_upload(B, tw_tensor_of(b), v, n * 4, &E));
    return b;
}

static void dev_read(void *v, tw_buffer *b, size_t n)
{
    OK(tw_backend_download(B, v, tw_tensor_of(b), n * 4, &E));
}

/* got[i] is want[i]: both NaN, or within tol (0: equal with the same sign, so -0 is not 0). */
static void expect(const float *got, const float *want, size_t n, float tol, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        int same = isnan(want[i]) ? isnan(got[i])
                   : tol > 0      ? fabsf(got[i] - want[i]) <= tol || got[i] == want[i]
                                  : got[i] == want[i] && signbit(got[i]) == signbit(want[i]);
        if (!same)
            fail_msg("%s[%zu]: got %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
    }
}

/* y = act(x) on the backend. */
static void act_fwd(tw_activation a, const float *x, float *y, size_t n)
{
    tw_buffer *bx = dev_from(x, n);
    OK(tw_act_fwd(B, a, tw_tensor_of(bx), tw_tensor_of(bx), n, &E));
    dev_read(y, bx, n);
    tw_backend_free(B, bx);
}

/* dx = act'(y) dy on the backend. */
static void act_bwd(tw_activation a, const float *dy, const float *y, float *dx, size_t n)
{
    tw_buffer *bd = dev_from(dy, n), *by = dev_from(y, n);
    OK(tw_act_bwd(B, a, tw_tensor_of(bd), tw_tensor_of(bd), tw_tensor_of(by), n, &E));
    dev_read(dx, bd, n);
    tw_backend_free(B, bd);
    tw_backend_free(B, by);
}

static void test_relu_passes_nan_as_tf(void **state)
{
    (void)state;
    float y[N], dx[N], z;
    static const float want[N] = {NAN, 0.0f, 0.0f, 2.0f, INFINITY, 0.0f};
    act_fwd(TW_ACT_RELU, X, y, N);
    expect(y, want, N, 0, "relu");
    float neg_zero = -0.0f;
    act_fwd(TW_ACT_RELU, &neg_zero, &z, 1);
    expect(&z, &neg_zero, 1, 0, "relu(-0)");

    static const float dy[N] = {1.0f, NAN, INFINITY, -2.0f, 1.0f, 1.0f};
    static const float want_dx[N] = {0.0f, NAN, NAN, -2.0f, 1.0f, 0.0f};
    act_bwd(TW_ACT_RELU, dy, X, dx, N);
    expect(dx, want_dx, N, 0, "relu grad");
    float m3 = -3.0f, m1 = -1.0f;
    act_bwd(TW_ACT_RELU, &m3, &m1, &z, 1);
    expect(&z, &neg_zero, 1, 0, "relu grad(-3, -1)");
}

static void test_tanh_and_sigmoid_pass_nan_as_tf(void **state)
{
    (void)state;
    float y[N], dx[N];
    static const float want_tanh[N] = {NAN, -0.7615942f, 0.0f, 0.9640276f, 1.0f, -1.0f};
    static const float want_sigmoid[N] = {NAN, 0.26894143f, 0.5f, 0.8807971f, 1.0f, 0.0f};
    act_fwd(TW_ACT_TANH, X, y, N);
    expect(y, want_tanh, N, 1e-6f, "tanh");
    act_fwd(TW_ACT_SIGMOID, X, y, N);
    expect(y, want_sigmoid, N, 1e-6f, "sigmoid");
    static const float dy[N] = {1.0f, NAN, 1.0f, 1.0f, 1.0f, 1.0f};
    for (tw_activation a = TW_ACT_TANH; a <= TW_ACT_SIGMOID; a++) {
        act_fwd(a, X, y, N);
        act_bwd(a, dy, y, dx, N);
        assert_true(isnan(dx[0])); /* y NaN */
        assert_true(isnan(dx[1])); /* dy NaN */
        assert_true(isfinite(dx[2]) && isfinite(dx[3]));
    }
}

static void test_xent_of_nan_or_inf_logits_is_nan_as_tf(void **state)
{
    (void)state;
    static const float logits[9] = {1.0f, NAN, 0.0f, 1.0f, 2.0f, 3.0f, INFINITY, 0.0f, 0.0f};
    static const int32_t labels[3] = {0, 1, 0};
    static const float want[3] = {NAN, 1.4076059f, NAN};
    tw_buffer *bl = dev_from(logits, 9), *by = dev_from(labels, 3), *bp = dev_from(logits, 9),
              *bloss = dev_from(want, 3);
    OK(tw_xent_fwd(B, tw_tensor_of(bloss), tw_tensor_of(bp), tw_tensor_of(bl), tw_tensor_of(by), 3,
                   3, 0.0f, &E));
    float loss[3];
    dev_read(loss, bloss, 3);
    expect(loss, want, 3, 1e-6f, "xent loss");
    tw_backend_free(B, bl);
    tw_backend_free(B, by);
    tw_backend_free(B, bp);
    tw_backend_free(B, bloss);
}

/* One 2x2 window, stride 2, over [[1, 2], [3, 4]] with a NaN at tap t: the gradient goes where TF's
 * goes; the forward value is TF's unless the NaN is the first tap. */
static void test_maxpool_with_a_nan(void **state)
{
    (void)state;
    tw_window w = {.batch = 1, .in_d = 1, .in_h = 2, .in_w = 2, .in_c = 1, .k_d = 1, .k_h = 2,
                   .k_w = 2, .s_d = 1, .s_h = 2, .s_w = 2, .out_d = 1, .out_h = 1, .out_w = 1};
    static const struct {
        int tap;
        float y;
        float dx[4];
    } cases[] = {
        {0, NAN, {1, 0, 0, 0}}, /* TF's forward gives 4 here */
        {1, 4.0f, {0, 0, 0, 1}},
        {3, 3.0f, {0, 0, 1, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float x[4] = {1, 2, 3, 4}, one = 1.0f, y, dx[4];
        x[cases[i].tap] = NAN;
        tw_buffer *bx = dev_from(x, 4), *by = dev_from(&one, 1), *ba = dev_from(&one, 1),
                  *bdy = dev_from(&one, 1), *bdx = dev_from(x, 4);
        OK(tw_maxpool_fwd(B, &w, tw_tensor_of(by), tw_tensor_of(ba), tw_tensor_of(bx), &E));
        OK(tw_maxpool_bwd(B, &w, tw_tensor_of(bdx), tw_tensor_of(bdy), tw_tensor_of(ba), &E));
        dev_read(&y, by, 1);
        dev_read(dx, bdx, 4);
        expect(&y, &cases[i].y, 1, 0, "maxpool y");
        expect(dx, cases[i].dx, 4, 0, "maxpool dx");
        tw_buffer *all[] = {bx, by, ba, bdy, bdx};
        for (size_t k = 0; k < 5; k++)
            tw_backend_free(B, all[k]);
    }
}

/* Dropout multiplies by its mask as TF 1 did: a dropped NaN stays NaN, forward and backward. */
static void test_dropout_keeps_nan(void **state)
{
    (void)state;
    enum { M = 64 };
    float x[M], y[M];
    for (size_t i = 0; i < M; i++)
        x[i] = NAN;
    tw_buffer *b = dev_from(x, M);
    OK(tw_dropout_fwd(B, tw_tensor_of(b), tw_tensor_of(b), M, 0.5f, 7, &E));
    OK(tw_dropout_bwd(B, tw_tensor_of(b), tw_tensor_of(b), M, 0.5f, 7, &E));
    dev_read(y, b, M);
    expect(y, x, M, 0, "dropout");
    tw_backend_free(B, b);
}

static int setup(void **state)
{
    (void)state;
    return tw_backend_create("cpu", 0, &B, &E) == TW_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tw_backend_destroy(B);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu_passes_nan_as_tf),
        cmocka_unit_test(test_tanh_and_sigmoid_pass_nan_as_tf),
        cmocka_unit_test(test_xent_of_nan_or_inf_logits_is_nan_as_tf),
        cmocka_unit_test(test_maxpool_with_a_nan),
        cmocka_unit_test(test_dropout_keeps_nan),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
