/* evaluation.c — the metrics of one evaluation pass, and the run's `evaluation.json`. See evaluation.h.
 *
 * Classification keeps the confusion matrix (int64 [classes, classes], row = true class), the top-5
 * hits and the summed cross-entropy; every per-class number is derived from the matrix at the end.
 * Ties follow NumPy's argmax (the first largest logit) and TensorFlow's in_top_k (a label is in the top
 * k when fewer than k logits are strictly larger). Regression keeps the summed squared and absolute
 * errors and, per output, the labels' sum and sum of squares: R² = 1 - SS_res / SS_tot with SS_tot
 * summed over the outputs around each output's mean (scikit-learn's "variance_weighted"; the plain R²
 * for one output). */
#include "evaluation.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic_file.h"
#include "datafs.h"

struct tw_evaluation {
    int classes;         /* 0: regression */
    int outputs;         /* values per example */
    int64_t examples;
    double loss_sum;     /* cross-entropy per example, or squared error per value, summed */
    int64_t top5;        /* examples whose label is in the top TW_EVAL_TOP_K */
    int64_t *confusion;  /* [classes, classes] row-major: [true][predicted] */
    double abs_sum;      /* regression: summed |error| */
    double *y_sum;       /* [outputs] regression: summed labels */
    double *y_sq;        /* [outputs] regression: summed squared labels */
    json_t *names;       /* the dataset's class names (an array of strings, owned), or NULL: indices */
};

tw_status tw_evaluation_create(int classes, int outputs, tw_evaluation **out, tw_error *err)
{
    *out = NULL;
    if (classes < 0 || classes > TW_EVAL_MAX_CLASSES || (classes && outputs != classes))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "evaluation: %d classes for %d outputs", classes,
                            outputs);
    if (outputs < 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "evaluation: %d outputs", outputs);
    tw_evaluation *ev = calloc(1, sizeof *ev);
    int ok = ev != NULL;
    if (ok && classes)
        ok = (ev->confusion = calloc((size_t)classes * (size_t)classes, sizeof *ev->confusion)) != NULL;
    if (ok && !classes)
        ok = (ev->y_sum = calloc((size_t)outputs, sizeof(double))) &&
             (ev->y_sq = calloc((size_t)outputs, sizeof(double)));
    if (!ok) {
        tw_evaluation_destroy(ev);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    }
    ev->classes = classes;
    ev->outputs = outputs;
    *out = ev;
    return TW_OK;
}

void tw_evaluation_destroy(tw_evaluation *ev)
{
    if (!ev)
        return;
    free(ev->confusion);
    free(ev->y_sum);
    free(ev->y_sq);
    json_decref(ev->names);
    free(ev);
}

void tw_evaluation_reset(tw_evaluation *ev)
{
    ev->examples = 0;
    ev->loss_sum = ev->abs_sum = 0;
    ev->top5 = 0;
    if (ev->classes)
        memset(ev->confusion, 0, (size_t)ev->classes * (size_t)ev->classes * sizeof *ev->confusion);
    else {
        memset(ev->y_sum, 0, (size_t)ev->outputs * sizeof(double));
        memset(ev->y_sq, 0, (size_t)ev->outputs * sizeof(double));
    }
}

/* ================================ accumulating ================================ */

/* One example's logits z [n] and its label y: the matrix, top-5 and -log softmax(z)[y]. */
static void add_classified(tw_evaluation *ev, const float *z, int y)
{
    int n = ev->classes, best = 0, above = 0;
    double max = z[0];
    for (int i = 1; i < n; i++) {
        if (z[i] > z[best])
            best = i;
        if (z[i] > max)
            max = z[i];
    }
    if (y < 0 || y >= n)
        return;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        sum += exp((double)z[i] - max);
        above += z[i] > z[y];
    }
    ev->loss_sum += log(sum) + max - (double)z[y];
    ev->top5 += above < TW_EVAL_TOP_K;
    ev->confusion[(size_t)y * (size_t)n + (size_t)best]++;
}

static void add_regressed(tw_evaluation *ev, const float *p, const float *y)
{
    for (int j = 0; j < ev->outputs; j++) {
        double d = (double)p[j] - (double)y[j];
        ev->loss_sum += d * d;
        ev->abs_sum += fabs(d);
        ev->y_sum[j] += y[j];
        ev->y_sq[j] += (double)y[j] * y[j];
    }
}

void tw_evaluation_add(tw_evaluation *ev, int rows, const float *outputs, const void *labels)
{
    for (int i = 0; i < rows; i++) {
        const float *row = outputs + (size_t)i * (size_t)ev->outputs;
        if (ev->classes)
            add_classified(ev, row, ((const int32_t *)labels)[i]);
        else
            add_regressed(ev, row, (const float *)labels + (size_t)i * (size_t)ev->outputs);
    }
    ev->examples += rows;
}

/* ================================ metrics ================================ */

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static int64_t correct(const tw_evaluation *ev)
{
    int64_t c = 0;
    for (int k = 0; k < ev->classes; k++)
        c += ev->confusion[(size_t)k * (size_t)ev->classes + (size_t)k];
    return c;
}

static double r_squared(const tw_evaluation *ev)
{
    double n = (double)ev->examples, tot = 0;
    for (int j = 0; j < ev->outputs; j++)
        tot += ev->y_sq[j] - ev->y_sum[j] * ev->y_sum[j] / n;
    return n > 0 && tot > 0 ? 1.0 - ev->loss_sum / tot : 0;
}

tw_evaluation_summary tw_evaluation_summarize(const tw_evaluation *ev)
{
    double n = (double)ev->examples, values = n * ev->outputs;
    tw_evaluation_summary s = {.examples = ev->examples, .classify = ev->classes > 0};
    if (s.classify) {
        s.loss = ratio(ev->loss_sum, n);
        s.accuracy = ratio((double)correct(ev), n);
        s.has_top5 = ev->classes > TW_EVAL_TOP_K;
        s.top5 = ratio((double)ev->top5, n);
    } else {
        s.loss = s.mse = ratio(ev->loss_sum, values);
        s.mae = ratio(ev->abs_sum, values);
        s.r2 = r_squared(ev);
    }
    return s;
}

/* a / b, or null when b is 0 (undefined). */
static json_t *rate_or_null(int64_t a, int64_t b) { return b ? json_real((double)a / (double)b) : json_null(); }

static json_t *f1_of(const json_t *p, const json_t *r)
{
    if (!json_is_number(p) || !json_is_number(r))
        return json_null();
    double a = json_number_value(p), b = json_number_value(r);
    return json_real(a + b > 0 ? 2 * a * b / (a + b) : 0);
}

/* {"precision", "recall", "f1", "support"}: one entry per class, from the matrix. */
static json_t *per_class(const tw_evaluation *ev)
{
    json_t *p = json_array(), *r = json_array(), *f = json_array(), *n = json_array();
    size_t C = (size_t)ev->classes;
    for (size_t k = 0; k < C; k++) {
        int64_t tp = ev->confusion[k * C + k], row = 0, col = 0;
        for (size_t j = 0; j < C; j++) {
            row += ev->confusion[k * C + j];
            col += ev->confusion[j * C + k];
        }
        json_t *pk = rate_or_null(tp, col), *rk = rate_or_null(tp, row);
        json_array_append_new(f, f1_of(pk, rk));
        json_array_append_new(p, pk);
        json_array_append_new(r, rk);
        json_array_append_new(n, json_integer(row));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "precision", p, "recall", r, "f1", f, "support", n);
}

static json_t *confusion(const tw_evaluation *ev)
{
    size_t C = (size_t)ev->classes;
    json_t *m = json_array();
    for (size_t k = 0; k < C; k++) {
        json_t *row = json_array();
        for (size_t j = 0; j < C; j++)
            json_array_append_new(row, json_integer(ev->confusion[k * C + j]));
        json_array_append_new(m, row);
    }
    return m;
}

json_t *tw_evaluation_metrics(const tw_evaluation *ev)
{
    tw_evaluation_summary s = tw_evaluation_summarize(ev);
    json_t *o = json_pack("{s:I, s:f}", "examples", (json_int_t)s.examples, "loss", s.loss);
    if (!o)
        return NULL;
    if (!s.classify) {
        json_object_set_new(o, "mse", json_real(s.mse));
        json_object_set_new(o, "mae", json_real(s.mae));
        json_object_set_new(o, "r2", json_real(s.r2));
        return o;
    }
    json_object_set_new(o, "accuracy", json_real(s.accuracy));
    if (s.has_top5)
        json_object_set_new(o, "top5", json_real(s.top5));
    json_object_set_new(o, "per_class", per_class(ev));
    if (ev->classes <= TW_EVAL_CONFUSION_MAX)
        json_object_set_new(o, "confusion", confusion(ev));
    return o;
}

/* ================================ names and tags ================================ */

void tw_evaluation_name_classes(tw_evaluation *ev, const json_t *names)
{
    json_decref(ev->names);
    ev->names = json_is_array(names) ? json_deep_copy(names) : NULL;
}

int tw_evaluation_class_name(const tw_evaluation *ev, int k, char *buf, size_t size)
{
    const char *name = json_string_value(json_array_get(ev->names, (size_t)k));
    int n = name ? snprintf(buf, size, "%s", name) : snprintf(buf, size, "%d", k);
    return n >= 0 && (size_t)n < size ? 0 : -1;
}

int tw_evaluation_class_tag(const tw_evaluation *ev, int k, const char *metric, char *buf, size_t size)
{
    char name[TW_EVAL_NAME_BYTES];
    if (tw_evaluation_class_name(ev, k, name, sizeof name) != 0)
        return -1;
    for (char *c = name; *c; c++)
        if (*c == '/') /* one tag level: "T-shirt/top" is "T-shirt-top" */
            *c = '-';
    int n = snprintf(buf, size, "eval_per_class/%s/%s", metric, name);
    return n >= 0 && (size_t)n < size ? 0 : -1;
}

const int64_t *tw_evaluation_confusion(const tw_evaluation *ev, int *k)
{
    *k = ev->classes;
    return ev->classes > 0 ? ev->confusion : NULL;
}

/* ================================ the document ================================ */

static json_t *class_names(const tw_evaluation *ev)
{
    json_t *a = json_array();
    char name[TW_EVAL_NAME_BYTES];
    for (int k = 0; k < ev->classes && k < TW_EVAL_CONFUSION_MAX; k++)
        if (tw_evaluation_class_name(ev, k, name, sizeof name) == 0)
            json_array_append_new(a, json_string(name));
    return a;
}

json_t *tw_evaluation_document(int64_t step, const tw_evaluation *raw, const tw_evaluation *ema)
{
    const tw_evaluation *any = raw ? raw : ema;
    json_t *m_raw = raw ? tw_evaluation_metrics(raw) : json_null();
    json_t *m_ema = ema ? tw_evaluation_metrics(ema) : json_null();
    if (!m_raw || !m_ema) {
        json_decref(m_raw);
        json_decref(m_ema);
        return NULL;
    }
    return json_pack("{s:s, s:I, s:s, s:i, s:o, s:o, s:o}", "format", TW_EVALUATION_FORMAT, "step",
                     (json_int_t)step, "kind", any->classes ? "classification" : "regression", "classes",
                     any->classes, "class_names", class_names(any), "raw", m_raw, "ema", m_ema);
}

tw_status tw_evaluation_write(const char *path, const json_t *doc, tw_error *err)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (!text)
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "out of memory");
    tw_status s = tw_atomic_write_file(path, text, strlen(text), err);
    free(text);
    return s;
}

tw_status tw_evaluation_read(const char *path, json_t **doc, tw_error *err)
{
    *doc = NULL;
    int fd = tw_fs_open(path, O_RDONLY, 0);
    if (fd < 0)
        return errno == ENOENT ? TW_END : tw_fs_error(err, path, "cannot read the evaluation");
    json_error_t je;
    json_t *d = json_loadfd(fd, 0, &je); /* the writer's whole file: its size is bounded by the classes */
    close(fd);
    const char *format = json_string_value(json_object_get(d, "format"));
    if (!json_is_object(d) || !format || strcmp(format, TW_EVALUATION_FORMAT)) {
        json_decref(d);
        return tw_error_set(err, TW_ERR_CORRUPT, path, -1, "not a %s document%s%s", TW_EVALUATION_FORMAT,
                            d ? "" : ": ", d ? "" : je.text);
    }
    *doc = d;
    return TW_OK;
}
