/* export.h — a trained checkpoint in the formats other stacks load: a TensorFlow checkpoint V2 and an ONNX
 * inference graph (docs/formats.md §7.3, §7.4).
 *
 * Owns: what each export holds and how Tower's model maps onto it —
 *   - TensorFlow (export_tf.c): every variable under its TF1 name ("layer1/weights" [in, units],
 *     "layer1/biases", conv weights [kd?, kh, kw, in, filters]) with the raw values, its EMA shadow as
 *     "<name>/ExponentialMovingAverage" when the run kept an EMA (ema_decay > 0), and "global_step" (int64,
 *     the checkpoint's step); a name map (export_names.h) renames them for a graph that declares other
 *     names (the seed program's "layer1/w", "layer1/bias", an int32 "Variable"); the bundle format itself
 *     is eventlog/tf_bundle.h;
 *   - ONNX (export_onnx.c): the inference graph of the model with raw or EMA weights (dropout is the
 *     identity), input "input" float32 [N, dataset.shape...] and outputs "logits" and "probabilities"
 *     (a Softmax appended) for a classifier, "predictions" for a regression model.
 * The archive form of the TF export (one download) is here too, so the CLI and the server write the same
 * bytes. Does not own the checkpoint (inference.h reads it) or the command line (export_main.c). */
#ifndef TW_EXPORT_H
#define TW_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "export_names.h"
#include "inference.h"
#include "status.h"
#include "tf_bundle.h"

/* The TF bundle of the checkpoint at path, its variables and step named by names (borrowed; NULL: Tower's
 * own, the built-in map "tower"); *step receives its step (may be NULL). Caller frees *out. Errors: those of
 * tw_inference_open; TW_ERR_CORRUPT when ema_decay > 0 and an EMA shadow is missing; TW_ERR_INVALID when
 * the map does not fit the model (tw_export_names_map) or its step is int32 and the step past INT32_MAX;
 * TW_ERR_NOMEM. */
tw_status tw_export_tf(const char *path, const tw_export_names *names, tw_bundle_bytes *out, int64_t *step,
                       tw_error *err);

/* The name a TF export of step takes by default: "model.ckpt-<step>" (TensorFlow's Saver's spelling), into
 * buf[size]. */
void tw_export_tf_name(int64_t step, char *buf, size_t size);

/* The TF export as one ustar archive of three files: NAME.index, NAME.data-00000-of-00001 and checkpoint
 * (the same bytes tw_bundle_write writes for the prefix NAME), NAME = tw_export_tf_name(step). mtime: the
 * members' time; names as tw_export_tf's. Caller frees *bytes. Errors: those of tw_export_tf, TW_ERR_NOMEM. */
tw_status tw_export_tf_archive(const char *path, const tw_export_names *names, uint64_t mtime, uint8_t **bytes,
                               size_t *len, int64_t *step, tw_error *err);

/* How the ONNX graph's input is taken. */
typedef enum {
    TW_ONNX_INPUT_RAW = 0,    /* the dataset's values as stored (uint8 pixels as floats, 0-255): the graph
                                 multiplies them by dataset.scale first, as the trainer does */
    TW_ONNX_INPUT_SCALED = 1, /* values as the model sees them (already scaled, or a float dataset) */
} tw_onnx_input;

/* The serialized ModelProto (IR 8, opset 13) of inf's model with inf's weights. Caller frees *bytes.
 * Errors: TW_ERR_NOMEM, TW_ERR_UNSUPPORTED (a layer type the exporter does not know, named). */
tw_status tw_export_onnx(const tw_inference *inf, tw_onnx_input input, uint8_t **bytes, size_t *len,
                         tw_error *err);

#endif
