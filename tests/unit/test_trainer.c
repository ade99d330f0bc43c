/* test_trainer.c — engine/trainer.c and train_step.c: a short run on a tiny dataset
 * whose loss drops and whose evaluation learns, the child protocol's lines it writes, and a resume that
 * continues at the checkpoint's step and ends bit for bit where an uninterrupted run ends; a checkpoint
 * read back for inference (inference.h) classifies as the run's evaluation did. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#include "checkpoint.h"
#include "child.h"
#include "config.h"
#include "example.h"
#include "inference.h"
#include "tfrecord.h"
#include "trainer.h"

enum { EXAMPLES = 96, FEATURES = 4 };

typedef struct {
    char root[512];
    char data[600]; /* root/tiny.tfrecord */
} fixture;

/* Example i: features in [-1, 1); its class is how many of the first two are positive (0, 1 or 2). */
static void example(int i, float *x, int64_t *label)
{
    for (int j = 0; j < FEATURES; j++)
        x[j] = (float)(((i + 1) * (j + 3) * 7919) % 200) / 100.0f - 1.0f;
    *label = (x[0] > 0) + (x[1] > 0);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (tw_test_mkdtemp(f->root, sizeof f->root, "trainer") != 0)
        return -1;
    snprintf(f->data, sizeof f->data, "%s/tiny.tfrecord", f->root);
    int fd = open(f->data, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    tw_tfrecord_writer *w;
    tw_example_builder *b;
    if (fd < 0 || tw_tfrecord_writer_create(fd, TW_COMPRESSION_NONE, f->data, &w, NULL) != TW_OK ||
        tw_example_builder_create(&b, NULL) != TW_OK)
        return -1;
    for (int i = 0; i < EXAMPLES; i++) {
        float x[FEATURES];
        int64_t label;
        const uint8_t *bytes;
        size_t len;
        example(i, x, &label);
        tw_example_builder_reset(b);
        if (tw_example_add_floats(b, "features", x, FEATURES, NULL) != TW_OK ||
            tw_example_add_int64s(b, "label", &label, 1, NULL) != TW_OK ||
            tw_example_serialize(b, &bytes, &len, NULL) != TW_OK ||
            tw_tfrecord_write(w, bytes, len, NULL) != TW_OK)
            return -1;
    }
    tw_status s = tw_tfrecord_writer_finish(w, NULL);
    tw_tfrecord_writer_destroy(w);
    tw_example_builder_destroy(b);
    *state = f;
    return s == TW_OK ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    tw_test_rmdir(f->root);
    free(f);
    return 0;
}

static void config_of(const fixture *f, int steps, tw_config *c)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"dataset\": {\"train\": \"%s\", \"test\": \"%s\", \"image_feature\": \"features\","
             "              \"shape\": [%d]},"
             " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 16, \"activation\": \"tanh\"},"
             "                        {\"type\": \"dense\", \"units\": 3}]},"
             " \"optimizer\": {\"type\": \"momentum\", \"learning_rate\": 0.2, \"momentum\": 0.9},"
             " \"ema_decay\": 0.9, \"l2\": 0.0001, \"batch_size\": 16, \"steps\": %d, \"seed\": 3,"
             " \"summary_every\": 1, \"eval_every\": 10, \"checkpoint_every\": 10}",
             f->data, f->data, FEATURES, steps);
    tw_error err;
    if (tw_config_parse(json, strlen(json), NULL, c, &err) != TW_OK)
        fail_msg("config: %s", err.message);
}

/* Runs c into root/name; returns the progress lines as a JSON array (caller frees). */
static json_t *train(const fixture *f, const tw_config *c, const char *name, int resume)
{
    char logdir[700];
    snprintf(logdir, sizeof logdir, "%s/%s", f->root, name);
    char *text = NULL;
    size_t len = 0;
    FILE *progress = open_memstream(&text, &len);
    tw_train_options o = {.logdir = logdir, .resume = resume, .backend = "cpu", .progress = progress};
    tw_train_outcome outcome;
    tw_error err;
    tw_status s = tw_train(c, &o, &outcome, &err);
    fclose(progress);
    if (s != TW_OK)
        fail_msg("tw_train: %s", err.message);
    assert_int_equal(outcome, TW_TRAIN_COMPLETED);
    json_t *lines = json_array();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *o = json_loads(line, 0, NULL);
        assert_true(json_is_object(o));
        json_array_append_new(lines, o);
    }
    free(text);
    return lines;
}

/* The loss of the step line for step k, or NAN. */
static double loss_at(const json_t *lines, int64_t k)
{
    size_t i;
    json_t *o;
    json_array_foreach(lines, i, o) {
        json_t *loss = json_object_get(o, TW_CHILD_LOSS);
        if (loss && json_integer_value(json_object_get(o, TW_CHILD_STEP)) == k)
            return json_number_value(loss);
    }
    return NAN;
}

static const json_t *last_line(const json_t *lines) { return json_array_get(lines, json_array_size(lines) - 1); }

/* 60 steps: the loss falls, the evaluation learns, the lines are the protocol's, checkpoints exist. */
static void test_short_run_learns(void **state)
{
    fixture *f = *state;
    static tw_config c;
    config_of(f, 60, &c);
    json_t *lines = train(f, &c, "learn", 0);
    const json_t *first = json_array_get(lines, 0);
    assert_string_equal(json_string_value(json_object_get(first, TW_CHILD_BACKEND)), "cpu");
    assert_int_equal(json_integer_value(json_object_get(first, TW_CHILD_TOWERS)), 1);
    double early = 0, late = 0;
    for (int k = 1; k <= 5; k++) {
        early += loss_at(lines, k) / 5;
        late += loss_at(lines, 55 + k) / 5;
    }
    if (!(late < 0.6 * early))
        fail_msg("the loss did not drop: %g over steps 1-5, %g over 56-60", early, late);
    double accuracy = -1;
    size_t i;
    json_t *o;
    json_array_foreach(lines, i, o) {
        if (json_object_get(o, TW_CHILD_EVAL_ACCURACY) &&
            json_integer_value(json_object_get(o, TW_CHILD_STEP)) == 60)
            accuracy = json_number_value(json_object_get(o, TW_CHILD_EVAL_ACCURACY));
    }
    if (!(accuracy > 0.8))
        fail_msg("eval accuracy at step 60 is %g", accuracy);
    const json_t *end = last_line(lines);
    assert_string_equal(json_string_value(json_object_get(end, TW_CHILD_STATUS)), TW_CHILD_COMPLETED);
    assert_int_equal(json_integer_value(json_object_get(end, TW_CHILD_STEP)), 60);
    char dir[800], logdir[700];
    snprintf(logdir, sizeof logdir, "%s/learn", f->root);
    assert_int_equal(tw_checkpoint_dir_of(logdir, dir, sizeof dir), 0);
    tw_ckpt_listing l;
    assert_int_equal(tw_checkpoint_list(dir, &l, NULL), TW_OK);
    assert_int_equal(l.latest, 60);
    assert_int_equal(l.n, 5); /* keep_checkpoints' default */
    tw_checkpoint_listing_free(&l);
    json_decref(lines);
}

/* A run stopped at 10 and resumed to 20 continues at step 11 and ends with the parameters an
 * uninterrupted 20-step run has, bit for bit. */
static void test_resume_continues_at_the_checkpoint(void **state)
{
    fixture *f = *state;
    static tw_config c;
    config_of(f, 20, &c);
    json_decref(train(f, &c, "whole", 0));
    config_of(f, 10, &c);
    json_decref(train(f, &c, "parts", 0));
    config_of(f, 20, &c);
    json_t *lines = train(f, &c, "parts", 1);
    const json_t *resumed = json_array_get(lines, 1);
    assert_non_null(json_object_get(resumed, TW_CHILD_RESUMED_FROM));
    assert_int_equal(json_integer_value(json_object_get(resumed, TW_CHILD_STEP)), 10);
    assert_true(isnan(loss_at(lines, 10)));
    assert_false(isnan(loss_at(lines, 11)));
    assert_int_equal(json_integer_value(json_object_get(last_line(lines), TW_CHILD_STEP)), 20);
    json_decref(lines);
    char a[800], b[800];
    snprintf(a, sizeof a, "%s/whole/checkpoints/ckpt-0000000020.safetensors", f->root);
    snprintf(b, sizeof b, "%s/parts/checkpoints/ckpt-0000000020.safetensors", f->root);
    tw_checkpoint *ca, *cb;
    assert_int_equal(tw_checkpoint_read(a, &ca, NULL), TW_OK);
    assert_int_equal(tw_checkpoint_read(b, &cb, NULL), TW_OK);
    static const char *const NAMES[] = {"layer1/weights", "layer2/biases",
                                        "layer1/weights/ExponentialMovingAverage",
                                        "layer2/weights/Momentum"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        size_t na = 0, nb = 0;
        const float *va = tw_checkpoint_tensor(ca, NAMES[i], &na), *vb = tw_checkpoint_tensor(cb, NAMES[i], &nb);
        assert_non_null(va);
        assert_non_null(vb);
        assert_int_equal(na, nb);
        assert_memory_equal(va, vb, na * sizeof *va);
    }
    tw_checkpoint_free(ca);
    tw_checkpoint_free(cb);
}

/* The eval line's value of key at step k, or NAN. */
static double eval_at(const json_t *lines, const char *key, int64_t k)
{
    size_t i;
    json_t *o;
    json_array_foreach(lines, i, o) {
        if (json_object_get(o, key) && json_integer_value(json_object_get(o, TW_CHILD_STEP)) == k)
            return json_number_value(json_object_get(o, key));
    }
    return NAN;
}

/* Accuracy of a checkpoint's weights over the fixture's examples, through inference.h. */
static double inference_accuracy(const char *path, tw_weights w)
{
    tw_inference *inf;
    tw_error err;
    if (tw_inference_open(path, w, 7, &inf, &err) != TW_OK) /* a batch that does not divide 96 */
        fail_msg("tw_inference_open: %s", err.message);
    assert_int_equal(tw_inference_step(inf), 60);
    assert_int_equal(tw_model_output_size(tw_inference_model(inf)), 3);
    static float x[EXAMPLES * FEATURES], out[EXAMPLES * 3];
    int64_t labels[EXAMPLES];
    for (int i = 0; i < EXAMPLES; i++)
        example(i, x + i * FEATURES, &labels[i]);
    if (tw_inference_forward(inf, EXAMPLES, x, out, &err) != TW_OK)
        fail_msg("tw_inference_forward: %s", err.message);
    tw_inference_close(inf);
    int correct = 0;
    for (int i = 0; i < EXAMPLES; i++) {
        const float *o = out + i * 3;
        int best = o[1] > o[0] ? 1 : 0;
        best = o[2] > o[best] ? 2 : best;
        correct += best == labels[i];
    }
    return (double)correct / EXAMPLES;
}

/* A checkpoint read back for inference classifies the test set exactly as the run's own evaluation did,
 * with raw and with EMA weights; a file without the run's config is refused by name. */
static void test_inference_matches_the_evaluation(void **state)
{
    fixture *f = *state;
    static tw_config c;
    config_of(f, 60, &c);
    c.ema_decay = 0.5f; /* shadows that differ from the weights, so the two checks differ */
    json_t *lines = train(f, &c, "infer", 0);
    char dir[800], path[900];
    snprintf(dir, sizeof dir, "%s/infer/checkpoints", f->root);
    assert_int_equal(tw_checkpoint_latest(dir, path, sizeof path, NULL), TW_OK);
    assert_float_equal(inference_accuracy(path, TW_WEIGHTS_RAW), eval_at(lines, TW_CHILD_EVAL_ACCURACY, 60), 1e-9);
    assert_float_equal(inference_accuracy(path, TW_WEIGHTS_EMA), eval_at(lines, TW_CHILD_EVAL_ACCURACY_EMA, 60),
                       1e-9);
    json_decref(lines);
    tw_ckpt_tensor t = {.name = "w", .data = (float[]){1}, .rank = 1, .shape = {1}};
    char bare[700];
    snprintf(bare, sizeof bare, "%.600s/bare", f->root);
    assert_int_equal(tw_checkpoint_save(bare, 1, 1, &t, 1, NULL, 0, NULL), TW_OK);
    assert_int_equal(tw_checkpoint_latest(bare, path, sizeof path, NULL), TW_OK);
    tw_inference *inf = NULL;
    tw_error err;
    assert_int_equal(tw_inference_open(path, TW_WEIGHTS_RAW, 8, &inf, &err), TW_ERR_CORRUPT);
    assert_null(inf);
    assert_non_null(strstr(err.message, "no run config"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_short_run_learns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_continues_at_the_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inference_matches_the_evaluation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
