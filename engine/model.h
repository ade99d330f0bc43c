/* model.h — a model built from the run config: its layers with their shapes, the flat parameter
 * layout, the initializers, the GraphDef TensorBoard draws, and per-tower replicas that run forward and
 * backward on a backend.
 *
 * Owns: shape inference (a layer that does not fit its input is an error naming the layer), the
 * parameter arena layout — every weight first, then every bias, so L2 applies to one leading range —
 * the initializers (host, seeded), and each replica's buffers on its backend (parameters, gradients,
 * EMA shadows and the optimizer's slots — none for SGD, one for momentum, two for Adam —: one arena
 * each; activations and their gradients per layer) and what they come to (tw_replica_size_of). Layers
 * larger than the backends' int sizes are refused by name. Does not
 * own the optimizer schedule, the data or the loop (trainer.c). A tw_model is immutable after create and
 * may be shared by threads; a replica belongs to its tower's thread. */
#ifndef TW_MODEL_H
#define TW_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "status.h"

enum { TW_PARAM_NAME_BYTES = 96, TW_PARAM_MAX_RANK = 5 };

/* One variable: a named view of the arena. */
typedef struct {
    char name[TW_PARAM_NAME_BYTES]; /* "layer1/weights", "layer1/biases" */
    int rank;
    int64_t shape[TW_PARAM_MAX_RANK]; /* dense [in, units]; conv [kd?, kh, kw, in_c, filters] as TF */
    size_t offset;                    /* in floats from the start of the arena */
    size_t count;
    int is_weight;                    /* weights get L2 and weight decay; biases, gammas, betas do not */
    int is_state;                     /* batch norm's moving statistics: saved, not trained (no gradient,
                                         optimizer slot or EMA shadow), after every trainable value */
    tw_init init;
    int fan_in, fan_out;              /* for glorot_uniform (docs/formats.md §6.7) */
} tw_param;

typedef struct tw_model tw_model;

/* Builds the layer plan from c (input shape c->shape, c->layers, c->loss). Errors name the layer:
 * "model.layers[3] (dense): ...". Caller owns *out. */
tw_status tw_model_create(const tw_config *c, tw_model **out, tw_error *err);
void tw_model_destroy(tw_model *m); /* NULL-safe */

size_t tw_model_param_floats(const tw_model *m);  /* arena size */
size_t tw_model_weight_floats(const tw_model *m); /* the leading weights (L2 range) */
size_t tw_model_trainable_floats(const tw_model *m); /* the leading trainable values; the state follows */
int tw_model_has_conv(const tw_model *m);         /* 1 when a layer is a convolution (2-D or 3-D) */
size_t tw_model_n_params(const tw_model *m);
const tw_param *tw_model_param(const tw_model *m, size_t i);
size_t tw_model_input_size(const tw_model *m);    /* values per example */
int tw_model_output_size(const tw_model *m);      /* classes, or regression outputs */

/* One layer as planned, for exporters that rebuild the graph in another format (engine/export_onnx.c). */
typedef struct {
    const tw_layer_config *cfg;  /* borrowed from the config the model was built from */
    int flat_in, flat_out;       /* 1: [values] (in[3] / out[3]); 0: [d, h, w, c] */
    int in[4], out[4];           /* d, h, w, c; a flat shape is {1, 1, 1, values} */
    tw_window win;               /* conv and pool: kernel, strides, padding before, output (batch 1) */
    int w_param, b_param;        /* tw_model_param indices, -1 when none; batch norm: gamma, beta */
    int s_param;                 /* batch norm: the moving mean (the moving variance is s_param + 1) */
    int n_in;                    /* the layers it reads */
    int in_layer[TW_MAX_INPUTS]; /* their indices; -1: the model's input */
} tw_layer_plan;

int tw_model_n_layers(const tw_model *m);
void tw_model_layer_plan(const tw_model *m, int i, tw_layer_plan *out); /* 0 <= i < n_layers */

/* Fills arena[tw_model_param_floats] with the initial values, from seed alone. */
void tw_model_init_params(const tw_model *m, uint64_t seed, float *arena);

/* The model as a serialized GraphDef (caller frees *bytes). */
tw_status tw_model_graph(const tw_model *m, uint8_t **bytes, size_t *len, tw_error *err);

/* ---- replicas ---- */

typedef struct tw_replica tw_replica;

/* Allocates a replica for up to `batch` examples per step on b (borrowed; must outlive it). */
tw_status tw_replica_create(const tw_model *m, tw_backend *b, int batch, tw_replica **out,
                            tw_error *err);
void tw_replica_destroy(tw_replica *r); /* NULL-safe */

/* As tw_replica_create, but the new replica uses shares's params, optimizer slots and EMA shadows (its
 * own gradients, activations and batch): one copy of the state for the towers of a backend in host
 * memory, updated once per step (tw_update_mean). shares (borrowed) must be of model m, on a backend of
 * the same memory, and outlive the new replica; whatever is written to the shared arenas through either
 * is seen by both. NULL: tw_replica_create. */
tw_status tw_replica_create_sharing(const tw_model *m, tw_backend *b, int batch, const tw_replica *shares,
                                    tw_replica **out, tw_error *err);

/* What tw_replica_create(m, b, batch) allocates on its backend, in bytes, computed without allocating
 * (the same rule the allocation follows), on a backend that convolves through im2col; one with a direct
 * convolution (tw_backend_has_conv) holds `columns` bytes less. Errors: TW_ERR_INVALID when a size
 * passes 2^64 bytes. */
typedef struct {
    uint64_t arena;       /* one arena: [tw_model_param_floats] fp32 */
    int arenas;           /* arenas held: params, grads, EMA, and the optimizer's 0, 1 or 2 slots */
    uint64_t activations; /* every layer's output and its gradient, conv columns, pool argmax */
    uint64_t columns;     /* the conv columns within activations */
    uint64_t batch;       /* inputs, labels, per-example losses, probabilities */
} tw_replica_size;
tw_status tw_replica_size_of(const tw_model *m, int batch, tw_replica_size *out, tw_error *err);

/* The bytes r holds on its backend: the sum of its buffers' sizes. */
uint64_t tw_replica_bytes(const tw_replica *r);

/* The replica's arenas, each [tw_model_param_floats] fp32. The slots exist only for the optimizers
 * that use them (slot1: momentum and Adam; slot2: Adam); otherwise the view is empty ({NULL, 0}). */
tw_tensor tw_replica_params(const tw_replica *r);
tw_tensor tw_replica_grads(const tw_replica *r);
tw_tensor tw_replica_slot1(const tw_replica *r);
tw_tensor tw_replica_slot2(const tw_replica *r);
tw_tensor tw_replica_ema(const tw_replica *r);

/* Copies one batch of host data in: x [rows, input_size] fp32; labels [rows] int32 (classification) or
 * fp32 [rows, outputs] (regression), or NULL for a forward whose loss is not read (labels zeroed). */
tw_status tw_replica_upload_batch(tw_replica *r, int rows, const float *x, const void *labels,
                                  tw_error *err);

/* tw_replica_forward's train flags: TRAIN turns dropout on (drawn from dropout_seed) and has batch norm use
 * the batch's statistics; UPDATE_STATS also moves batch norm's moving statistics (one tower of a world
 * does: the world's first). */
enum { TW_FORWARD_TRAIN = 1, TW_FORWARD_UPDATE_STATS = 2 };

/* Forward pass over the uploaded rows. train: TW_FORWARD_* flags (0: evaluation). use_ema: read the EMA
 * shadows instead of the parameters (batch norm's moving statistics are always the parameters' own, as
 * TensorFlow restores them for an EMA model). Afterwards loss/outputs can be read. */
tw_status tw_replica_forward(tw_replica *r, int rows, int train, int use_ema, uint64_t dropout_seed,
                             tw_error *err);

/* Backward pass after a training forward: grads = d(mean loss over rows)/d(params). */
tw_status tw_replica_backward(tw_replica *r, int rows, uint64_t dropout_seed, tw_error *err);

/* The values [*lo, *hi) of the arenas that a backward pass can update itself on a backend with
 * tw_gemm_update: the weights of the model's first layer with variables, when that layer is dense;
 * returns 1 then, else 0 (*lo, *hi untouched). */
int tw_model_fused_range(const tw_model *m, size_t *lo, size_t *hi);

/* tw_model_fused_range of r's model when r's backend offers tw_gemm_update, else 0: the values that
 * tw_replica_backward_update updates itself. */
int tw_replica_fused_range(const tw_replica *r, size_t *lo, size_t *hi);

/* tw_replica_backward, and the update u of tw_replica_fused_range's weights, fused into their
 * gradient's product (tw_gemm_update; u->l2_count counted from the range's start). For a step whose
 * gradients are final when computed (one tower, no world); the caller updates the rest of the arenas.
 * The gradients arena still gets every gradient. TW_ERR_UNSUPPORTED where there is no fused range. */
tw_status tw_replica_backward_update(tw_replica *r, int rows, uint64_t dropout_seed, const tw_update *u,
                                     tw_error *err);

/* Sum over rows of the per-example loss of the last forward (double on the host). */
tw_status tw_replica_loss_sum(tw_replica *r, int rows, double *sum, tw_error *err);

/* Downloads the last forward's outputs: [rows, output_size] fp32 (logits or predictions). */
tw_status tw_replica_outputs(tw_replica *r, int rows, float *out, tw_error *err);

#endif
