/* test_evaluation.c — the evaluation accumulator (evaluation.h) against values worked out by hand: a
 * 3-class pass (confusion matrix, accuracy, precision/recall/F1, the first-largest tie rule, the
 * cross-entropy), a 7-class pass (top-5 with TensorFlow's tie rule, null precision and recall where they
 * are undefined), a regression pass (MSE, MAE, R²), reset, the class tags, and the document written
 * durably and read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <cmocka.h>

#include "evaluation.h"
#include "testutil.h"

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

static const json_t *per_class(const json_t *m, const char *key, size_t k)
{
    return json_array_get(json_object_get(json_object_get(m, "per_class"), key), k);
}

/* Five examples over 3 classes: predicted 0,1,2,2,0 for true 0,1,1,2,2. */
static tw_evaluation *three_classes(void)
{
    static const float z[] = {2, 1, 0, 0, 3, 1, 1, 0, 2, 0, 0, 5, 4, 1, 1};
    static const int32_t y[] = {0, 1, 1, 2, 2};
    tw_evaluation *ev;
    tw_error err;
    assert_int_equal(tw_evaluation_create(3, 3, &ev, &err), TW_OK);
    tw_evaluation_add(ev, 2, z, y);
    tw_evaluation_add(ev, 3, z + 6, y + 2);
    return ev;
}

static void test_classification(void **state)
{
    (void)state;
    tw_evaluation *ev = three_classes();
    json_t *m = tw_evaluation_metrics(ev);
    assert_int_equal(json_integer_value(json_object_get(m, "examples")), 5);
    assert_float_equal(num(m, "accuracy"), 0.6, 1e-12);
    assert_null(json_object_get(m, "top5")); /* 3 classes: no top-5 */
    static const int64_t want[3][3] = {{1, 0, 0}, {0, 1, 1}, {1, 0, 1}};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++)
            assert_int_equal(json_integer_value(json_array_get(
                                 json_array_get(json_object_get(m, "confusion"), i), j)), want[i][j]);
    static const double precision[3] = {0.5, 1.0, 0.5}, recall[3] = {1.0, 0.5, 0.5},
                        f1[3] = {2.0 / 3, 2.0 / 3, 0.5};
    static const int64_t support[3] = {1, 2, 2};
    for (size_t k = 0; k < 3; k++) {
        assert_float_equal(json_number_value(per_class(m, "precision", k)), precision[k], 1e-12);
        assert_float_equal(json_number_value(per_class(m, "recall", k)), recall[k], 1e-12);
        assert_float_equal(json_number_value(per_class(m, "f1", k)), f1[k], 1e-12);
        assert_int_equal(json_integer_value(per_class(m, "support", k)), support[k]);
    }
    /* -log softmax: log(sum exp(z - max)) + max - z[y], per example, averaged */
    double ce = log(1 + exp(-1) + exp(-2)) + log(exp(-3) + 1 + exp(-2)) + (log(exp(-1) + exp(-2) + 1) + 2) +
                log(exp(-5) + exp(-5) + 1) + (log(1 + 2 * exp(-3)) + 3);
    assert_float_equal(num(m, "loss"), ce / 5, 1e-9);
    tw_evaluation_summary s = tw_evaluation_summarize(ev);
    assert_true(s.classify);
    assert_false(s.has_top5);
    assert_float_equal(s.accuracy, 0.6, 1e-12);
    json_decref(m);
    tw_evaluation_reset(ev);
    static const float zero[3] = {0, 0, 0};
    static const int32_t one = 1;
    tw_evaluation_add(ev, 1, zero, &one); /* a tie: the first largest (class 0) is predicted */
    m = tw_evaluation_metrics(ev);
    assert_int_equal(json_integer_value(json_array_get(json_array_get(json_object_get(m, "confusion"), 1), 0)), 1);
    assert_float_equal(num(m, "accuracy"), 0, 0);
    assert_float_equal(num(m, "loss"), log(3.0), 1e-12);
    json_decref(m);
    tw_evaluation_destroy(ev);
}

static void test_top5(void **state)
{
    (void)state;
    tw_evaluation *ev;
    tw_error err;
    assert_int_equal(tw_evaluation_create(7, 7, &ev, &err), TW_OK);
    static const float z[] = {6, 5, 4, 3, 2, 1, 0, 6, 5, 4, 3, 2, 1, 0, 1, 1, 1, 1, 1, 1, 1};
    static const int32_t y[] = {4, 5, 6}; /* 4 logits above: in; 5 above: out; all tied: in */
    tw_evaluation_add(ev, 3, z, y);
    json_t *m = tw_evaluation_metrics(ev);
    assert_float_equal(num(m, "top5"), 2.0 / 3, 1e-12);
    assert_float_equal(num(m, "accuracy"), 0, 0);
    assert_true(json_is_null(per_class(m, "precision", 4))); /* nothing predicted as 4 */
    assert_true(json_is_null(per_class(m, "recall", 0)));    /* no example of 0 */
    assert_float_equal(json_number_value(per_class(m, "precision", 0)), 0, 0);
    assert_true(json_is_null(per_class(m, "f1", 0)));
    tw_evaluation_summary s = tw_evaluation_summarize(ev);
    assert_true(s.has_top5);
    assert_float_equal(s.top5, 2.0 / 3, 1e-12);
    json_decref(m);
    tw_evaluation_destroy(ev);
}

static void test_regression(void **state)
{
    (void)state;
    tw_evaluation *ev;
    tw_error err;
    assert_int_equal(tw_evaluation_create(0, 1, &ev, &err), TW_OK);
    static const float p[] = {1, 2, 3}, y[] = {1, 3, 5}; /* errors 0, -1, -2; labels' mean 3 */
    tw_evaluation_add(ev, 3, p, y);
    json_t *m = tw_evaluation_metrics(ev);
    assert_float_equal(num(m, "mse"), 5.0 / 3, 1e-12);
    assert_float_equal(num(m, "loss"), 5.0 / 3, 1e-12);
    assert_float_equal(num(m, "mae"), 1.0, 1e-12);
    assert_float_equal(num(m, "r2"), 1 - 5.0 / 8, 1e-12);
    assert_null(json_object_get(m, "accuracy"));
    json_decref(m);
    tw_evaluation_destroy(ev);
    assert_int_equal(tw_evaluation_create(3, 4, &ev, &err), TW_ERR_INVALID);
    assert_int_equal(tw_evaluation_create(0, 0, &ev, &err), TW_ERR_INVALID);
}

static void test_tags_and_document(void **state)
{
    (void)state;
    char tag[64];
    tw_evaluation *raw = three_classes();
    assert_int_equal(tw_evaluation_class_tag(raw, 7, "recall", tag, sizeof tag), 0); /* no names: indices */
    assert_string_equal(tag, "eval_per_class/recall/7");
    assert_int_equal(tw_evaluation_class_tag(raw, 12, "precision", tag, sizeof tag), 0);
    assert_string_equal(tag, "eval_per_class/precision/12");
    assert_int_equal(tw_evaluation_class_tag(raw, 12, "precision", tag, 8), -1);
    json_t *names = json_pack("[s, s]", "T-shirt/top", "Trouser"); /* fewer than the classes */
    tw_evaluation_name_classes(raw, names);
    json_decref(names); /* copied */
    assert_int_equal(tw_evaluation_class_tag(raw, 0, "recall", tag, sizeof tag), 0);
    assert_string_equal(tag, "eval_per_class/recall/T-shirt-top");
    assert_int_equal(tw_evaluation_class_name(raw, 0, tag, sizeof tag), 0);
    assert_string_equal(tag, "T-shirt/top");
    assert_int_equal(tw_evaluation_class_name(raw, 2, tag, sizeof tag), 0);
    assert_string_equal(tag, "2");
    json_t *named = tw_evaluation_document(1, raw, NULL);
    assert_string_equal(json_string_value(json_array_get(json_object_get(named, "class_names"), 1)), "Trouser");
    json_decref(named);
    tw_evaluation_name_classes(raw, NULL);
    int k = 0;
    const int64_t *counts = tw_evaluation_confusion(raw, &k);
    assert_int_equal(k, 3);
    json_t *m = tw_evaluation_metrics(raw); /* the matrix the document holds, row by row */
    for (int t = 0; t < 3; t++)
        for (int p = 0; p < 3; p++)
            assert_int_equal(counts[t * 3 + p],
                             json_integer_value(json_array_get(json_array_get(json_object_get(m, "confusion"), t), p)));
    json_decref(m);
    json_t *doc = tw_evaluation_document(42, raw, NULL);
    char dir[512], path[600];
    assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "evaluation"), 0);
    snprintf(path, sizeof path, "%s/%s", dir, TW_EVALUATION_FILE);
    tw_error err;
    assert_int_equal(tw_evaluation_write(path, doc, &err), TW_OK);
    json_t *back = json_load_file(path, 0, NULL);
    assert_non_null(back);
    assert_string_equal(json_string_value(json_object_get(back, "format")), TW_EVALUATION_FORMAT);
    assert_int_equal(json_integer_value(json_object_get(back, "step")), 42);
    assert_string_equal(json_string_value(json_object_get(back, "kind")), "classification");
    assert_string_equal(json_string_value(json_array_get(json_object_get(back, "class_names"), 2)), "2");
    assert_true(json_is_null(json_object_get(back, "ema")));
    assert_float_equal(num(json_object_get(back, "raw"), "accuracy"), 0.6, 1e-15);
    json_decref(back);
    json_decref(doc);
    tw_evaluation_destroy(raw);
    tw_test_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classification),
        cmocka_unit_test(test_top5),
        cmocka_unit_test(test_regression),
        cmocka_unit_test(test_tags_and_document),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
