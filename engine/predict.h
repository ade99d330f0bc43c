/* predict.h — prediction with a trained model: inputs turned into the rows the model takes, and its
 * outputs into top-k classes with probabilities (or the regression outputs), as JSON. The one
 * implementation behind POST /api/v1/runs/{id}/predict (server/api_predict.c) and `tower predict`
 * (predict_main.c).
 *
 * Owns: the input rules (which inputs a model takes and how they are scaled), the caps on a batch, the
 * opening of a checkpoint for prediction (the inference batch, sized to a memory budget), the softmax and
 * top-k, the reply's shape, and the one place class names come from (tw_predict_class_names). Does not
 * own image decoding (eventlog/image.h), .npy parsing (eventlog/npy.h), the forward pass (inference.h) or
 * HTTP (the server).
 *
 * Inputs, each one example:
 *   a PNG or JPEG image — the model's input shape must be [H, W, C] with C 1 or 3 (or [H, W]); the image
 *     must be W x H exactly (no resizing); gray and RGB are converted as tw_image_fit says; its uint8
 *     pixels are multiplied by the run's scale, as the trainer feeds stored bytes.
 *   a .npy array [N, ...] — every row holds the model's input size of values: uint8 (multiplied by the
 *     scale, like stored bytes) or float32/float64 (taken as they are, like stored floats); other dtypes
 *     are refused, as it is not clear which of the two they mean.
 *   a JSON array — numbers, nested in any way (at most 4 levels), that flatten to the input size: taken
 *     as they are (the values the first layer sees, already scaled).
 *   a JSON string — the base64 of a PNG, JPEG or .npy file, optionally as a data: URL
 *     ("data:image/png;base64,...", what a browser's FileReader gives).
 * Not thread-safe: a batch belongs to one thread. */
#ifndef TW_PREDICT_H
#define TW_PREDICT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "inference.h"
#include "status.h"

enum {
    TW_PREDICT_MAX_INPUTS = 1024,      /* examples in one batch */
    TW_PREDICT_MAX_VALUES = 1 << 25,   /* input values in one batch (128 MiB of fp32) */
    TW_PREDICT_MAX_TOP_K = 1000,
    TW_PREDICT_DEFAULT_TOP_K = 5,
};

/* Opens the checkpoint at path for prediction (tw_inference_open) with the weights w: TW_WEIGHTS_RAW,
 * TW_WEIGHTS_EMA, or TW_WEIGHTS_DEFAULT (inference.h: the EMA when the run kept one). The inference
 * batch is up to 256 rows, fewer when 256 would hold
 * more than 64 MiB of activations. Caller owns *out; *bytes (may be NULL) receives the memory it holds (the
 * host weights and the replica's buffers). Errors: those of tw_inference_open; TW_ERR_INVALID for EMA
 * weights of a run that kept no EMA. */
tw_status tw_predict_open(const char *path, int w, tw_inference **out, uint64_t *bytes, tw_error *err);

/* The examples of one request, as the model takes them. */
typedef struct {
    int shape[4], rank;  /* the model's input shape (the run's config) */
    float scale;         /* uint8 inputs are multiplied by it */
    size_t width;        /* values per example: tw_model_input_size */
    size_t rows, cap;
    float *x;            /* [rows, width] fp32 row-major; owned */
    json_t *labels;      /* [rows] strings: where each row came from ("a.png", "x.npy[3]", "inputs[0]"); owned */
} tw_predict_batch;

/* An empty batch for inf's model (borrowed only for the call). Errors: TW_ERR_NOMEM. */
tw_status tw_predict_batch_init(tw_predict_batch *b, const tw_inference *inf, tw_error *err);
void tw_predict_batch_cleanup(tw_predict_batch *b); /* NULL-safe */

/* Adds the examples of one file's bytes data[0..n) (borrowed), found by its signature: a PNG or JPEG
 * image (one row) or a .npy array (one row per entry of its first axis); name labels the rows and errors.
 * Errors: TW_ERR_INVALID naming the file and what does not fit (size, channels, values per row, dtype,
 * not an image or .npy), TW_ERR_CORRUPT / TW_ERR_TRUNCATED for a damaged file (the decoder's message),
 * TW_ERR_TOO_LARGE past a cap (an image's sides, the batch's inputs or values), TW_ERR_NOMEM. */
tw_status tw_predict_add_file(tw_predict_batch *b, const void *data, size_t n, const char *name,
                              tw_error *err);

/* Adds the inputs of a JSON array (borrowed): each a (nested) array of numbers or a base64 file string.
 * Errors: as tw_predict_add_file, the message naming "inputs[i]". */
tw_status tw_predict_add_json(tw_predict_batch *b, const json_t *inputs, tw_error *err);

/* Runs b through inf (tw_inference_forward; one thread at a time per inf) and builds the predictions
 * (new JSON): [{"input": LABEL, "top_k": [{"class": K, "name": N (only with names), "probability": P}]}]
 * with the k (1 to TW_PREDICT_MAX_TOP_K, at most the classes) most probable classes of the softmax of
 * the logits, most probable first; for a regression model (MSE loss) [{"input", "outputs": [...]}].
 * names (borrowed, may be NULL): an array of class names, tw_predict_class_names. Errors: TW_ERR_INVALID
 * for a batch without rows, those of the forward pass, TW_ERR_NOMEM. */
tw_status tw_predict_run(tw_inference *inf, const tw_predict_batch *b, int top_k, const json_t *names,
                         json_t **predictions, tw_error *err);

/* "classification" or "regression", from the model's loss. */
const char *tw_predict_task(const tw_inference *inf);

/* The class names of the dataset the model trained on (new JSON array of strings, [classes]: the meta
 * next to c's train file, eventlog/convert.h tw_convert_class_names_of), or NULL when it has none: the
 * place names come from, for the route and the command alike. */
json_t *tw_predict_class_names(const tw_config *c);

#endif
