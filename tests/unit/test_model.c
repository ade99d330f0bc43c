/* test_model.c — engine/model.c: shapes and the parameter layout of dense and conv models, a layer
 * that does not fit named by index, seeded initializers, what a replica holds and shares, a replica's
 * gradients against finite differences of its loss on the CPU backend, and the first layer's update
 * fused into its backward pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "cpu_gemm.h"
#include "model.h"

static const char MLP[] =
    "{\"dataset\": {\"train\": \"unused.tfrecord\", \"image_feature\": \"features\", \"shape\": [4]},"
    " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 5, \"activation\": \"tanh\"},"
    "                        {\"type\": \"dense\", \"units\": 3,"
    "                         \"bias_init\": {\"type\": \"constant\", \"value\": 0.25}}]},"
    " \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.1}, \"batch_size\": 8, \"seed\": 5}";

static const char CNN[] =
    "{\"dataset\": {\"train\": \"unused.tfrecord\", \"shape\": [28, 28, 1]},"
    " \"model\": {\"layers\": [{\"type\": \"conv2d\", \"filters\": 8, \"kernel\": 3, \"padding\": \"same\","
    "                          \"activation\": \"relu\"},"
    "                         {\"type\": \"max_pool2d\", \"pool\": 2, \"strides\": 2},"
    "                         {\"type\": \"flatten\"},"
    "                         {\"type\": \"dense\", \"units\": 10}]},"
    " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"batch_size\": 4}";

static tw_model *model_of(const char *json, tw_config *c)
{
    tw_error err;
    if (tw_config_parse(json, strlen(json), NULL, c, &err) != TW_OK)
        fail_msg("config: %s", err.message);
    tw_model *m;
    if (tw_model_create(c, &m, &err) != TW_OK)
        fail_msg("model: %s", err.message);
    return m;
}

static void expect_param(const tw_model *m, size_t i, const char *name, int rank, const int64_t *shape,
                         size_t offset, int is_weight)
{
    const tw_param *p = tw_model_param(m, i);
    assert_string_equal(p->name, name);
    assert_int_equal(p->rank, rank);
    size_t count = 1;
    for (int d = 0; d < rank; d++) {
        assert_int_equal(p->shape[d], shape[d]);
        count *= (size_t)shape[d];
    }
    assert_int_equal(p->count, count);
    assert_int_equal(p->offset, offset);
    assert_int_equal(p->is_weight, is_weight);
}

/* Listed by layer (weights, biases); laid out every weight first (the L2 range), then every bias. */
static void test_dense_layout(void **state)
{
    (void)state;
    static tw_config c;
    tw_model *m = model_of(MLP, &c);
    assert_int_equal(tw_model_input_size(m), 4);
    assert_int_equal(tw_model_output_size(m), 3);
    assert_int_equal(tw_model_n_params(m), 4);
    expect_param(m, 0, "layer1/weights", 2, (const int64_t[]){4, 5}, 0, 1);
    expect_param(m, 1, "layer1/biases", 1, (const int64_t[]){5}, 35, 0);
    expect_param(m, 2, "layer2/weights", 2, (const int64_t[]){5, 3}, 20, 1);
    expect_param(m, 3, "layer2/biases", 1, (const int64_t[]){3}, 40, 0);
    assert_int_equal(tw_model_weight_floats(m), 35);
    assert_int_equal(tw_model_param_floats(m), 43);
    tw_model_destroy(m);
}

/* SAME 3x3 conv keeps 28x28, the pool halves it: the dense layer sees 14*14*8 inputs. */
static void test_conv_shapes(void **state)
{
    (void)state;
    static tw_config c;
    tw_model *m = model_of(CNN, &c);
    assert_int_equal(tw_model_input_size(m), 784);
    assert_int_equal(tw_model_output_size(m), 10);
    assert_int_equal(tw_model_n_params(m), 4);
    const tw_param *conv = tw_model_param(m, 0), *dense = tw_model_param(m, 2);
    assert_int_equal(conv->rank, 4);
    assert_int_equal(conv->shape[0], 3);
    assert_int_equal(conv->shape[1], 3);
    assert_int_equal(conv->shape[2], 1);
    assert_int_equal(conv->shape[3], 8);
    assert_int_equal(dense->shape[0], 14 * 14 * 8);
    assert_int_equal(dense->shape[1], 10);
    assert_int_equal(tw_model_param_floats(m), 72 + 1568 * 10 + 8 + 10);
    tw_replica_size rs;
    assert_int_equal(tw_replica_size_of(m, 4, &rs, NULL), TW_OK);
    assert_int_equal(rs.arena, tw_model_param_floats(m) * sizeof(float));
    assert_int_equal(rs.arenas, 3); /* params, grads, EMA: SGD has no slot */
    tw_model_destroy(m);
}

/* The plan exporters read (tw_model_layer_plan): shapes in and out, the resolved window, the variables. */
static void test_layer_plan(void **state)
{
    (void)state;
    static tw_config c;
    tw_model *m = model_of(CNN, &c);
    assert_int_equal(tw_model_n_layers(m), 4);
    tw_layer_plan l;
    tw_model_layer_plan(m, 0, &l);
    assert_int_equal(l.cfg->type, TW_LAYER_CONV2D);
    assert_false(l.flat_in);
    assert_memory_equal(l.in, ((int[]){1, 28, 28, 1}), sizeof l.in);
    assert_memory_equal(l.out, ((int[]){1, 28, 28, 8}), sizeof l.out);
    assert_int_equal(l.win.pad_h, 1); /* SAME 3x3 */
    assert_int_equal(l.win.out_w, 28);
    assert_int_equal(l.w_param, 0);
    assert_int_equal(l.b_param, 1);
    tw_model_layer_plan(m, 1, &l);
    assert_memory_equal(l.out, ((int[]){1, 14, 14, 8}), sizeof l.out);
    assert_int_equal(l.w_param, -1);
    tw_model_layer_plan(m, 2, &l);
    assert_true(l.flat_out);
    assert_int_equal(l.out[3], 14 * 14 * 8);
    tw_model_layer_plan(m, 3, &l);
    assert_true(l.flat_in && l.flat_out);
    assert_int_equal(l.out[3], 10);
    assert_int_equal(l.w_param, 2);
    tw_model_destroy(m);
}

static void test_layer_that_does_not_fit_is_named(void **state)
{
    (void)state;
    static tw_config c;
    static const char BAD[] =
        "{\"dataset\": {\"train\": \"unused.tfrecord\", \"shape\": [4, 4, 1]},"
        " \"model\": {\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 5,"
        "                          \"padding\": \"valid\"}, {\"type\": \"flatten\"},"
        "                         {\"type\": \"dense\", \"units\": 2}]},"
        " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}}";
    tw_error err;
    assert_int_equal(tw_config_parse(BAD, strlen(BAD), NULL, &c, &err), TW_OK);
    tw_model *m = (tw_model *)1;
    assert_int_not_equal(tw_model_create(&c, &m, &err), TW_OK);
    if (!strstr(err.message, "model.layers[0]"))
        fail_msg("message '%s' does not name the layer", err.message);
}

/* The same seed gives the same arena, another seed other weights; biases take their initializer. */
static void test_init_is_seeded(void **state)
{
    (void)state;
    static tw_config c;
    tw_model *m = model_of(MLP, &c);
    size_t n = tw_model_param_floats(m);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *d = malloc(n * sizeof *d);
    tw_model_init_params(m, 5, a);
    tw_model_init_params(m, 5, b);
    tw_model_init_params(m, 6, d);
    assert_memory_equal(a, b, n * sizeof *a);
    assert_memory_not_equal(a, d, tw_model_weight_floats(m) * sizeof *a);
    const tw_param *bias2 = tw_model_param(m, 3);
    for (size_t i = 0; i < bias2->count; i++)
        assert_true(a[bias2->offset + i] == 0.25f);
    for (size_t i = 0; i < tw_model_weight_floats(m); i++)
        assert_true(isfinite(a[i]) && fabsf(a[i]) < 2.0f);
    free(a);
    free(b);
    free(d);
    tw_model_destroy(m);
}

/* Mean loss over the batch at the parameters in host (uploaded first). */
static double loss_at(tw_backend *b, tw_replica *r, const float *host, size_t n, int rows)
{
    double sum;
    assert_int_equal(tw_backend_upload(b, tw_replica_params(r), host, n * sizeof *host, NULL), TW_OK);
    assert_int_equal(tw_replica_forward(r, rows, 0, 0, 0, NULL), TW_OK);
    assert_int_equal(tw_replica_loss_sum(r, rows, &sum, NULL), TW_OK);
    return sum / rows;
}

/* backward's gradients (of a replica of m over `rows` examples) match central differences of the mean
 * loss at step h, on the parameters probe[n_probe] (indices into the arena); adam: the replica holds
 * the Adam slots. */
static void check_gradients(tw_model *m, int adam, int rows, float h, const size_t *probe,
                            size_t n_probe)
{
    tw_backend *b;
    tw_replica *r;
    assert_int_equal(tw_backend_create("cpu", 0, &b, NULL), TW_OK);
    assert_int_equal(tw_replica_create(m, b, rows, &r, NULL), TW_OK);
    if (adam) {
        assert_non_null(tw_replica_slot1(r).buf);
        assert_non_null(tw_replica_slot2(r).buf);
    }
    size_t n = tw_model_param_floats(m), in = tw_model_input_size(m);
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *x = malloc(rows * in * sizeof *x);
    int32_t *y = malloc(rows * sizeof *y);
    for (size_t i = 0; i < rows * in; i++)
        x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < rows; i++)
        y[i] = i % 3;
    tw_model_init_params(m, 5, p);
    assert_int_equal(tw_replica_upload_batch(r, rows, x, y, NULL), TW_OK);
    loss_at(b, r, p, n, rows);
    assert_int_equal(tw_replica_forward(r, rows, 1, 0, 1, NULL), TW_OK); /* no dropout layer */
    assert_int_equal(tw_replica_backward(r, rows, 1, NULL), TW_OK);
    assert_int_equal(tw_backend_download(b, g, tw_replica_grads(r), n * sizeof *g, NULL), TW_OK);
    for (size_t k = 0; k < n_probe; k++) {
        size_t i = probe[k];
        float keep = p[i];
        p[i] = keep + h;
        double up = loss_at(b, r, p, n, rows);
        p[i] = keep - h;
        double down = loss_at(b, r, p, n, rows);
        p[i] = keep;
        double fd = (up - down) / (2.0 * h);
        if (fabs(fd - g[i]) > 2e-3 + 2e-2 * fabs(fd))
            fail_msg("param %zu: backward %g, finite difference %g", i, (double)g[i], fd);
    }
    free(p);
    free(g);
    free(x);
    free(y);
    tw_replica_destroy(r);
    tw_backend_destroy(b);
}

/* On a weight and a bias of each layer; the replica holds the Adam slots. */
static void test_replica_gradients_match_finite_differences(void **state)
{
    (void)state;
    static tw_config c;
    tw_model *m = model_of(MLP, &c);
    check_gradients(m, 1, 8, 1e-2f, (const size_t[]){0, 7, 21, 34, 36, 41}, 6);
    tw_model_destroy(m);
}

static const char CNN3D[] =
    "{\"dataset\": {\"train\": \"unused.tfrecord\", \"shape\": [6, 6, 6, 1]},"
    " \"model\": {\"layers\": [{\"type\": \"conv3d\", \"filters\": 3, \"kernel\": 3, \"padding\": \"same\","
    "                          \"activation\": \"relu\"},"
    "                         {\"type\": \"max_pool3d\", \"pool\": 3, \"strides\": 2, \"padding\": \"same\"},"
    "                         {\"type\": \"conv3d\", \"filters\": 2, \"kernel\": 2, \"activation\": \"relu\"},"
    "                         {\"type\": \"max_pool3d\", \"pool\": 2, \"strides\": 2},"
    "                         {\"type\": \"flatten\"},"
    "                         {\"type\": \"dense\", \"units\": 3}]},"
    " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"batch_size\": 2}";

/* A CNN's gradients (conv + ReLU, then max pool: the CPU backend folds the ReLU's backward into the
 * pool's, tw_maxpool_bwd_relu) on filter weights and biases of each convolution, 2-D and 3-D (the 3-D
 * one with overlapping pool windows). */
static void test_cnn_gradients_match_finite_differences(void **state)
{
    (void)state;
    static tw_config c2, c3;
    tw_model *m = model_of(CNN, &c2);
    size_t w = tw_model_weight_floats(m); /* conv biases [w, w + 8), then the dense layer's */
    check_gradients(m, 0, 4, 1e-3f, (const size_t[]){0, 13, 40, 71, w, w + 5}, 6);
    tw_model_destroy(m);
    m = model_of(CNN3D, &c3);
    w = tw_model_weight_floats(m); /* conv1: 81 weights, conv2: 48 */
    check_gradients(m, 0, 2, 1e-3f, (const size_t[]){0, 40, 80, 81, 100, 128, w, w + 3, w + 4}, 9);
    tw_model_destroy(m);
}

/* A replica made to share another's state uses its params, slots and EMA (a write through one is read
 * through the other), keeps its own gradients, counts only what it holds, frees only that (the owner
 * still works after it is gone), and refuses a replica of another model. */
static void test_replica_sharing(void **state)
{
    (void)state;
    static tw_config c, c2;
    tw_model *m = model_of(MLP, &c), *other = model_of(CNN, &c2);
    tw_backend *b;
    tw_replica *owner, *r, *bad = NULL;
    tw_error err;
    assert_int_equal(tw_backend_create("cpu", 0, &b, NULL), TW_OK);
    assert_int_equal(tw_replica_create(m, b, 8, &owner, NULL), TW_OK);
    assert_int_equal(tw_replica_create_sharing(m, b, 8, owner, &r, NULL), TW_OK);
    tw_tensor (*const shared[])(const tw_replica *) = {tw_replica_params, tw_replica_slot1,
                                                       tw_replica_slot2, tw_replica_ema};
    size_t n = tw_model_param_floats(m);
    float *v = malloc(n * sizeof *v), *back = malloc(n * sizeof *back);
    for (size_t a = 0; a < sizeof shared / sizeof shared[0]; a++) {
        for (size_t i = 0; i < n; i++)
            v[i] = (float)(a * 100 + i);
        assert_int_equal(tw_backend_upload(b, shared[a](r), v, n * sizeof *v, NULL), TW_OK);
        assert_int_equal(tw_backend_download(b, back, shared[a](owner), n * sizeof *v, NULL), TW_OK);
        assert_memory_equal(back, v, n * sizeof *v);
    }
    assert_ptr_not_equal(tw_replica_grads(r).buf, tw_replica_grads(owner).buf);
    uint64_t arena = tw_replica_grads(owner).buf->bytes;
    assert_int_equal(tw_replica_bytes(r), tw_replica_bytes(owner) - 4 * arena); /* params, 2 slots, EMA */
    assert_int_equal(tw_replica_create_sharing(other, b, 4, owner, &bad, &err), TW_ERR_INVALID);
    assert_null(bad);
    assert_non_null(strstr(err.message, "same model"));
    tw_replica_destroy(r);
    assert_int_equal(tw_backend_download(b, back, tw_replica_params(owner), n * sizeof *v, NULL), TW_OK);
    free(v);
    free(back);
    tw_replica_destroy(owner);
    tw_backend_destroy(b);
    tw_model_destroy(m);
    tw_model_destroy(other);
}

/* Seed-MLP-like models of `in` inputs, `units` hidden ReLU units and 10 outputs, `opt` the optimizer. */
static tw_model *dense_model(int in, int units, const char *opt, tw_config *c)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"dataset\": {\"train\": \"unused.tfrecord\", \"image_feature\": \"features\","
             " \"shape\": [%d]},"
             " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": %d, \"activation\": \"relu\"},"
             "                        {\"type\": \"dense\", \"units\": 10}]},"
             " \"optimizer\": {\"type\": \"%s\", \"learning_rate\": 0.05}, \"batch_size\": 32, \"seed\": 3}",
             in, units, opt);
    return model_of(json, c);
}

/* One training step of replica r (rows examples x, labels y) from parameters p and slots and shadows
 * s: the backward pass and one update of the whole arena, or (fused) the backward pass with the update
 * of tw_replica_fused_range inside it and then the rest. out[5n] = params, grads, slot1, slot2, ema. */
static void one_step(tw_backend *b, tw_replica *r, int kind, int fused, const float *p, const float *x,
                     const int32_t *y, int rows, size_t n, size_t weights, float *out)
{
    tw_tensor (*const arenas[])(const tw_replica *) = {tw_replica_params, tw_replica_grads, tw_replica_slot1,
                                                       tw_replica_slot2, tw_replica_ema};
    for (int a = 0; a < 5; a++)
        if (arenas[a](r).buf)
            assert_int_equal(tw_backend_upload(b, arenas[a](r), p, n * sizeof *p, NULL), TW_OK);
    tw_update u = {.kind = kind, .lr = 0.05f, .momentum = 0.9f, .adam_alpha = 0.01f, .beta1 = 0.9f,
                   .beta2 = 0.999f, .epsilon = 1e-8f, .l2 = 0.01f, .l2_count = weights, .ema = 1,
                   .ema_decay = 0.9f};
    assert_int_equal(tw_replica_upload_batch(r, rows, x, y, NULL), TW_OK);
    assert_int_equal(tw_replica_forward(r, rows, 1, 0, 1, NULL), TW_OK);
    tw_tensor w = tw_replica_params(r), g = tw_replica_grads(r), s1 = tw_replica_slot1(r),
              s2 = tw_replica_slot2(r), e = tw_replica_ema(r);
    size_t lo = 0, hi = 0;
    if (!fused) {
        assert_int_equal(tw_replica_backward(r, rows, 1, NULL), TW_OK);
        assert_int_equal(tw_update_step(b, &u, w, g, s1, s2, e, n, NULL), TW_OK);
    } else {
        assert_true(tw_replica_fused_range(r, &lo, &hi));
        assert_true(hi > lo && hi <= weights); /* the first layer's weights */
        tw_update f = u;
        f.l2_count = hi - lo;
        assert_int_equal(tw_replica_backward_update(r, rows, 1, &f, NULL), TW_OK);
        tw_update rest = u; /* [hi, n): weights up to `weights` under L2 */
        rest.l2_count = weights - hi;
        assert_int_equal(tw_update_step(b, &rest, tw_tensor_at(w, hi), tw_tensor_at(g, hi),
                                        tw_tensor_at(s1, hi), tw_tensor_at(s2, hi), tw_tensor_at(e, hi),
                                        n - hi, NULL), TW_OK);
        assert_int_equal(lo, 0);
    }
    for (int a = 0; a < 5; a++)
        if (arenas[a](r).buf)
            assert_int_equal(tw_backend_download(b, out + a * n, arenas[a](r), n * sizeof *out, NULL), TW_OK);
}

/* The first layer's weight update fused into its gradient's product (tw_replica_backward_update, the
 * step of one tower) gives the same bits in every arena as the backward pass followed by one update,
 * for every optimizer, on an instance of one thread and on one of three that cuts the product by
 * columns (130 inputs, 300 units) and by rows (300 inputs, 130 units); a model whose first layer is a
 * convolution has no fused range. */
static void test_fused_backward_update(void **state)
{
    (void)state;
    static const char *opts[] = {"sgd", "momentum", "adam"};
    static const int shapes[2][2] = {{130, 300}, {300, 130}};
    enum { ROWS = 32 };
    for (int threads = 1; threads <= 3; threads += 2)
        for (int sh = 0; sh < 2; sh++)
            for (int kind = TW_OPT_SGD; kind <= TW_OPT_ADAM; kind++) {
                static tw_config c;
                tw_model *m = dense_model(shapes[sh][0], shapes[sh][1], opts[kind], &c);
                tw_cpu_gemm_threads(threads);
                tw_backend *b;
                tw_replica *r;
                assert_int_equal(tw_backend_create("cpu", 0, &b, NULL), TW_OK);
                assert_int_equal(tw_replica_create(m, b, ROWS, &r, NULL), TW_OK);
                size_t n = tw_model_param_floats(m), in = tw_model_input_size(m);
                float *p = malloc(n * sizeof *p), *x = malloc(ROWS * in * sizeof *x);
                float *want = malloc(5 * n * sizeof *want), *got = malloc(5 * n * sizeof *got);
                int32_t y[ROWS];
                for (size_t i = 0; i < ROWS * in; i++)
                    x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
                for (int i = 0; i < ROWS; i++)
                    y[i] = i % 10;
                tw_model_init_params(m, 5, p);
                memset(want, 0, 5 * n * sizeof *want);
                memset(got, 0, 5 * n * sizeof *got);
                one_step(b, r, kind, 0, p, x, y, ROWS, n, tw_model_weight_floats(m), want);
                one_step(b, r, kind, 1, p, x, y, ROWS, n, tw_model_weight_floats(m), got);
                assert_memory_equal(got, want, 5 * n * sizeof *got);
                assert_memory_not_equal(got, p, n * sizeof *p); /* the step moved the weights */
                free(p), free(x), free(want), free(got);
                tw_replica_destroy(r);
                tw_backend_destroy(b);
                tw_model_destroy(m);
            }
    tw_cpu_gemm_threads(1);
    static tw_config cc;
    tw_model *cnn = model_of(CNN, &cc);
    tw_backend *b;
    tw_replica *r;
    size_t lo = 7, hi = 9;
    assert_int_equal(tw_backend_create("cpu", 0, &b, NULL), TW_OK);
    assert_int_equal(tw_replica_create(cnn, b, 4, &r, NULL), TW_OK);
    assert_false(tw_replica_fused_range(r, &lo, &hi));
    assert_int_equal(lo, 7);
    tw_update u = {.kind = TW_OPT_SGD, .lr = 0.1f};
    tw_error err;
    assert_int_equal(tw_replica_backward_update(r, 4, 1, &u, &err), TW_ERR_UNSUPPORTED);
    tw_replica_destroy(r);
    tw_backend_destroy(b);
    tw_model_destroy(cnn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_layout),
        cmocka_unit_test(test_conv_shapes),
        cmocka_unit_test(test_layer_plan),
        cmocka_unit_test(test_layer_that_does_not_fit_is_named),
        cmocka_unit_test(test_init_is_seeded),
        cmocka_unit_test(test_replica_gradients_match_finite_differences),
        cmocka_unit_test(test_cnn_gradients_match_finite_differences),
        cmocka_unit_test(test_replica_sharing),
        cmocka_unit_test(test_fused_backward_update),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
