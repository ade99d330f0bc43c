/* predict.c — the input rules, the batch, softmax and top-k, and the reply of a prediction (predict.h).
 *
 * The base64 decoder is written here (a dozen lines): none of Tower's libraries (jansson, zlib, libcurl's
 * public API) offers one, and a dependency for it alone is not worth it. */
#include "predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "image.h"
#include "npy.h"

enum { INFERENCE_BATCH = 256, MAX_NESTING = 4 };
static const uint64_t ACTIVATION_BUDGET = 64ull << 20;

tw_status tw_predict_open(const char *path, int w, tw_inference **out, uint64_t *bytes, tw_error *err)
{
    tw_inference *probe;
    TW_TRY(tw_inference_open(path, TW_WEIGHTS_RAW, 1, &probe, err));
    const tw_model *m = tw_inference_model(probe);
    int has_ema = tw_inference_config(probe)->ema_decay > 0, batch = INFERENCE_BATCH;
    tw_replica_size one, size;
    tw_status s = tw_replica_size_of(m, 1, &one, err);
    if (s == TW_OK && (one.activations + one.batch) * INFERENCE_BATCH > ACTIVATION_BUDGET) {
        uint64_t fit = ACTIVATION_BUDGET / (one.activations + one.batch);
        batch = fit < 1 ? 1 : (int)fit;
    }
    if (s == TW_OK)
        s = tw_replica_size_of(m, batch, &size, err);
    tw_inference_close(probe);
    TW_TRY(s);
    if (w == TW_WEIGHTS_EMA && !has_ema)
        return tw_error_set(err, TW_ERR_INVALID, path, -1,
                            "weights 'ema': the run kept no EMA (its ema_decay is 0): ask for the raw weights");
    if (bytes) /* the host weights and the replica's arenas, activations and batch */
        *bytes = size.arena * (uint64_t)(size.arenas + 1) + size.activations + size.batch;
    return tw_inference_open(path, (tw_weights)w, batch, out, err);
}

/* ================================ the batch ================================ */

tw_status tw_predict_batch_init(tw_predict_batch *b, const tw_inference *inf, tw_error *err)
{
    const tw_config *c = tw_inference_config(inf);
    memset(b, 0, sizeof *b);
    memcpy(b->shape, c->shape, sizeof b->shape);
    b->rank = c->rank;
    b->scale = c->scale;
    b->width = tw_model_input_size(tw_inference_model(inf));
    b->labels = json_array();
    if (!b->labels)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    return TW_OK;
}

void tw_predict_batch_cleanup(tw_predict_batch *b)
{
    if (!b)
        return;
    free(b->x);
    json_decref(b->labels);
    memset(b, 0, sizeof *b);
}

/* Appends one row labelled label; *row receives its [width] values to fill. */
static tw_status new_row(tw_predict_batch *b, const char *label, float **row, tw_error *err)
{
    if (b->rows >= TW_PREDICT_MAX_INPUTS || (b->rows + 1) * b->width > TW_PREDICT_MAX_VALUES)
        return tw_error_set(err, TW_ERR_TOO_LARGE, label, -1,
                            "too many inputs: at most %d examples and %d values in one request", TW_PREDICT_MAX_INPUTS,
                            TW_PREDICT_MAX_VALUES);
    if (b->rows == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 8;
        float *grown = realloc(b->x, cap * b->width * sizeof *grown);
        if (!grown)
            return tw_error_set(err, TW_ERR_NOMEM, label, -1, "out of memory");
        b->x = grown;
        b->cap = cap;
    }
    if (json_array_append_new(b->labels, json_string(label)) != 0)
        return tw_error_set(err, TW_ERR_NOMEM, label, -1, "out of memory");
    *row = b->x + b->rows++ * b->width;
    return TW_OK;
}

/* The model's input shape as text ("28x28x1"). */
static const char *shape_text(const tw_predict_batch *b, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < b->rank && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%d", i ? "x" : "", b->shape[i]);
    return buf;
}

static tw_status add_image(tw_predict_batch *b, const void *data, size_t n, const char *name, tw_error *err)
{
    char shape[64];
    int channels = b->rank == 3 ? b->shape[2] : 1;
    if ((b->rank != 2 && b->rank != 3) || (channels != 1 && channels != 3))
        return tw_error_set(err, TW_ERR_INVALID, name, -1,
                            "the model takes inputs of shape [%s], not images ([height, width, 1 or 3]): "
                            "send a .npy or JSON array", shape_text(b, shape, sizeof shape));
    tw_image img;
    TW_TRY(tw_image_decode_sized(data, n, b->shape[0], b->shape[1], name, &img, err));
    uint8_t *px = malloc(b->width);
    float *row = NULL;
    tw_status s = px ? tw_image_fit(&img, b->shape[0], b->shape[1], channels, px, name, err)
                     : tw_error_set(err, TW_ERR_NOMEM, name, -1, "out of memory");
    if (s == TW_OK)
        s = new_row(b, name, &row, err);
    for (size_t i = 0; s == TW_OK && i < b->width; i++)
        row[i] = (float)px[i] * b->scale;
    free(px);
    tw_image_free(&img);
    return s;
}

/* One .npy item (little-endian, as stored) into row[width]. */
static void npy_row(const tw_predict_batch *b, tw_npy_dtype d, const uint8_t *item, float *row)
{
    for (size_t i = 0; i < b->width; i++) {
        if (d == TW_NPY_UINT8) {
            row[i] = (float)item[i] * b->scale;
        } else if (d == TW_NPY_FLOAT32) {
            memcpy(&row[i], item + 4 * i, 4);
        } else {
            double v;
            memcpy(&v, item + 8 * i, 8);
            row[i] = (float)v;
        }
    }
}

static tw_status add_npy(tw_predict_batch *b, const void *data, size_t n, const char *name, tw_error *err)
{
    tw_npy_reader *r;
    TW_TRY(tw_npy_open_mem(data, n, name, 0, &r, err));
    const tw_npy_header *h = tw_npy_reader_header(r);
    size_t values = h->item_bytes / tw_npy_dtype_size(h->dtype);
    char shape[64], label[320];
    tw_status s = TW_OK;
    if (h->dtype != TW_NPY_UINT8 && h->dtype != TW_NPY_FLOAT32 && h->dtype != TW_NPY_FLOAT64)
        s = tw_error_set(err, TW_ERR_INVALID, name, -1,
                         "dtype %s: give uint8 (multiplied by the run's scale, like stored pixels) or float32 / "
                         "float64 (taken as they are)", tw_npy_dtype_name(h->dtype));
    else if (h->rank < 2 || values != b->width)
        s = tw_error_set(err, TW_ERR_INVALID, name, -1,
                         "each row (entry of the first axis) holds %zu values, the model takes %zu (shape "
                         "[%s]): give an array [N, %s]", h->rank < 2 ? (size_t)1 : values, b->width,
                         shape_text(b, shape, sizeof shape), shape);
    const uint8_t *item;
    for (uint64_t i = 0; s == TW_OK && (s = tw_npy_next(r, &item, err)) == TW_OK; i++) {
        float *row = NULL;
        snprintf(label, sizeof label, "%s[%llu]", name, (unsigned long long)i);
        if ((s = new_row(b, label, &row, err)) == TW_OK)
            npy_row(b, h->dtype, item, row);
    }
    tw_npy_close(r);
    return s == TW_END ? TW_OK : s;
}

tw_status tw_predict_add_file(tw_predict_batch *b, const void *data, size_t n, const char *name,
                              tw_error *err)
{
    if (tw_image_sniff(data, n) != TW_IMAGE_NONE)
        return add_image(b, data, n, name, err);
    if (n >= 6 && !memcmp(data, "\x93NUMPY", 6))
        return add_npy(b, data, n, name, err);
    return tw_error_set(err, TW_ERR_INVALID, name, 0, "not a PNG or JPEG image nor a .npy array");
}

/* ================================ JSON inputs ================================ */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes standard base64 (up to two '=' of padding) s[0..n) into a new buffer *out (caller frees) of
 * *len bytes. Returns 0, or -1 on a byte outside the alphabet, a dangling character or no memory. */
static int b64_decode(const char *s, size_t n, uint8_t **out, size_t *len)
{
    for (int pad = 0; pad < 2 && n > 0 && s[n - 1] == '='; pad++)
        n--;
    uint8_t *o = n % 4 == 1 ? NULL : malloc(n / 4 * 3 + 3);
    if (!o)
        return -1;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(o);
            return -1;
        }
        acc = (acc << 6 | (uint32_t)v) & 0x3fff; /* at most 7 + 6 pending bits */
        if ((bits += 6) >= 8)
            o[k++] = (uint8_t)(acc >> (bits -= 8));
    }
    *out = o;
    *len = k;
    return 0;
}

static tw_status add_base64(tw_predict_batch *b, const char *s, size_t n, const char *label, tw_error *err)
{
    const char *comma = memchr(s, ',', n);
    if (n > 5 && !memcmp(s, "data:", 5) && comma) { /* a data: URL */
        n -= (size_t)(comma + 1 - s);
        s = comma + 1;
    }
    uint8_t *bytes;
    size_t len;
    if (b64_decode(s, n, &bytes, &len) != 0)
        return tw_error_set(err, TW_ERR_INVALID, label, -1,
                            "a string input must be the base64 of a PNG, JPEG or .npy file (or a data: URL)");
    tw_status s2 = tw_predict_add_file(b, bytes, len, label, err);
    free(bytes);
    return s2;
}

/* Flattens the numbers of v (nested up to MAX_NESTING levels) into row[*at..width). */
static tw_status flatten(const json_t *v, int depth, float *row, size_t width, size_t *at, const char *label,
                         tw_error *err)
{
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if (*at >= width)
            return tw_error_set(err, TW_ERR_INVALID, label, -1, "more than %zu values: the model takes %zu", width,
                                width);
        if (!isfinite((float)d))
            return tw_error_set(err, TW_ERR_INVALID, label, -1, "value %zu is not a finite float32", *at);
        row[(*at)++] = (float)d;
        return TW_OK;
    }
    if (!json_is_array(v) || depth >= MAX_NESTING)
        return tw_error_set(err, TW_ERR_INVALID, label, -1,
                            "an input is an array of numbers (nested at most %d deep) or a base64 string",
                            MAX_NESTING);
    for (size_t i = 0; i < json_array_size(v); i++)
        TW_TRY(flatten(json_array_get(v, i), depth + 1, row, width, at, label, err));
    return TW_OK;
}

tw_status tw_predict_add_json(tw_predict_batch *b, const json_t *inputs, tw_error *err)
{
    if (!json_is_array(inputs) || json_array_size(inputs) == 0)
        return tw_error_set(err, TW_ERR_INVALID, "inputs", -1, "must be a non-empty array of inputs");
    char label[32], shape[64];
    for (size_t i = 0; i < json_array_size(inputs); i++) {
        const json_t *v = json_array_get(inputs, i);
        snprintf(label, sizeof label, "inputs[%zu]", i);
        if (json_is_string(v)) {
            TW_TRY(add_base64(b, json_string_value(v), json_string_length(v), label, err));
            continue;
        }
        float *row = NULL;
        size_t at = 0;
        TW_TRY(new_row(b, label, &row, err));
        TW_TRY(flatten(v, 0, row, b->width, &at, label, err));
        if (at != b->width)
            return tw_error_set(err, TW_ERR_INVALID, label, -1, "%zu values, the model takes %zu (shape [%s])", at,
                                b->width, shape_text(b, shape, sizeof shape));
    }
    return TW_OK;
}

/* ================================ outputs ================================ */

const char *tw_predict_task(const tw_inference *inf)
{
    return tw_inference_config(inf)->loss == TW_LOSS_MSE ? "regression" : "classification";
}

json_t *tw_predict_class_names(const tw_config *c)
{
    return tw_convert_class_names_of(c->train_path); /* the names of the dataset the run trained on */
}

/* The top-k of the softmax of logits[classes] as JSON (new). */
static json_t *top_k(const float *logits, int classes, int k, const json_t *names)
{
    double max = logits[0], sum = 0;
    for (int i = 1; i < classes; i++)
        max = fmax(max, logits[i]);
    for (int i = 0; i < classes; i++)
        sum += exp(logits[i] - max);
    json_t *list = json_array();
    char *taken = calloc((size_t)classes, 1);
    for (int r = 0; taken && r < k && r < classes; r++) {
        int best = -1;
        for (int i = 0; i < classes; i++)
            if (!taken[i] && (best < 0 || logits[i] > logits[best]))
                best = i;
        taken[best] = 1;
        json_t *e = json_pack("{s:i, s:f}", "class", best, "probability", exp(logits[best] - max) / sum);
        if (json_is_string(json_array_get(names, (size_t)best)))
            json_object_set(e, "name", json_array_get(names, (size_t)best));
        json_array_append_new(list, e);
    }
    free(taken);
    return list;
}

tw_status tw_predict_run(tw_inference *inf, const tw_predict_batch *b, int k, const json_t *names,
                         json_t **predictions, tw_error *err)
{
    *predictions = NULL;
    if (b->rows == 0)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "no inputs (a .npy array with no rows?)");
    const int outs = tw_model_output_size(tw_inference_model(inf));
    float *out = malloc((b->rows ? b->rows : 1) * (size_t)outs * sizeof *out);
    if (!out)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_status s = tw_inference_forward(inf, b->rows, b->x, out, err);
    json_t *list = s == TW_OK ? json_array() : NULL;
    int regression = tw_inference_config(inf)->loss == TW_LOSS_MSE;
    for (size_t r = 0; list && r < b->rows; r++) {
        const float *o = out + r * (size_t)outs;
        json_t *p = json_pack("{s:O}", "input", json_array_get(b->labels, r));
        if (regression) {
            json_t *v = json_array();
            for (int i = 0; i < outs; i++)
                json_array_append_new(v, json_real(o[i]));
            json_object_set_new(p, "outputs", v);
        } else {
            json_object_set_new(p, "top_k", top_k(o, outs, k, names));
        }
        json_array_append_new(list, p);
    }
    free(out);
    if (s == TW_OK && !list)
        s = tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    *predictions = list;
    return s;
}
