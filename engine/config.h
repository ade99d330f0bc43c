/* config.h — the run configuration: a JSON document (the contract `tower train` and the HTTP API share)
 * decoded strictly into tw_config.
 *
 * Owns: the struct, every default (tw_config_defaults, the only place defaults live), and the one
 * validation function: unknown keys are refused by name, duplicate keys rejected, every number
 * range-checked, paths resolved against the config file's folder. A typo is an error naming the key,
 * never a default. Does not own: whether the dataset files exist and fit the model (the input pipeline
 * and the model check that when a run starts). Not thread-safe per struct; no global state. */
#ifndef TW_CONFIG_H
#define TW_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "backend.h"
#include "status.h"

enum { TW_MAX_LAYERS = 64, TW_PATH_BYTES = 4096, TW_NAME_BYTES = 64, TW_MAX_PIECES = 16, TW_MAX_INPUTS = 4,
       TW_MAX_NORM = 16 };

typedef enum {
    TW_LAYER_DENSE = 0,
    TW_LAYER_CONV2D,
    TW_LAYER_MAX_POOL2D,
    TW_LAYER_CONV3D,
    TW_LAYER_MAX_POOL3D,
    TW_LAYER_DROPOUT,
    TW_LAYER_FLATTEN,
    TW_LAYER_BATCH_NORM,
    TW_LAYER_AVG_POOL2D,
    TW_LAYER_AVG_POOL3D,
    TW_LAYER_GLOBAL_AVG_POOL,
    TW_LAYER_ADD,
    TW_LAYER_CONCAT,
} tw_layer_type;

typedef enum {
    TW_INIT_TRUNCATED_NORMAL = 0, /* mean 0, stddev; redrawn beyond 2 stddev (docs/formats.md §6.6) */
    TW_INIT_GLOROT_UNIFORM,       /* docs/formats.md §6.7 */
    TW_INIT_ZEROS,
    TW_INIT_CONSTANT,
} tw_init_kind;

typedef struct {
    tw_init_kind kind;
    float stddev; /* TRUNCATED_NORMAL */
    float value;  /* CONSTANT */
} tw_init;

typedef enum { TW_LOSS_SOFTMAX_XENT = 0, TW_LOSS_MSE = 1 } tw_loss_kind;

/* The learning-rate schedules ("lr_decay"'s "type"; NONE is null). */
typedef enum { TW_DECAY_NONE = 0, TW_DECAY_EXPONENTIAL = 1, TW_DECAY_COSINE = 2, TW_DECAY_PIECEWISE = 3 } tw_lr_decay;

/* Which weights of another checkpoint a run starts from (config "init_from"). */
typedef enum { TW_INIT_FROM_NONE = 0, TW_INIT_FROM_RAW = 1, TW_INIT_FROM_EMA = 2 } tw_init_weights;

/* The name "inputs" gives the model's input (the batch) by. */
#define TW_MODEL_INPUT "input"

/* One layer. JSON: {"type": "dense", "units": 500, "activation": "relu", "name": "layer1",
 * "weight_init": {"type": "truncated_normal", "stddev": 0.1}, "bias_init": {"type": "constant",
 * "value": 0.1}}; conv: "filters", "kernel" (an int or a list of 2 or 3), "strides", "padding"
 * ("same"/"valid"), "activation"; pool (max or average): "pool" (int or list), "strides", "padding";
 * dropout: "rate"; batch_norm: "momentum", "epsilon"; every layer: "name", "inputs" (the names of the
 * layers it reads, or "input": the model's input; default the layer before it; add and concat take 2 or
 * more). */
typedef struct {
    tw_layer_type type;
    char name[TW_NAME_BYTES];   /* variables are "<name>/weights", "<name>/biases"; default "layer<k>"
                                   for dense and convolutions, "<type>_<index>" for the others */
    char inputs[TW_MAX_INPUTS][TW_NAME_BYTES]; /* layer names or "input"; none: the layer before */
    int n_inputs;
    float momentum, epsilon;    /* BATCH_NORM: of the moving statistics, and added to the variance */
    int units;                  /* DENSE */
    int filters;                /* CONV* */
    int kernel[3];              /* CONV* window, POOL* window: [d, h, w] (d = 1 for 2-D) */
    int strides[3];             /* [d, h, w]; default = kernel for pools, 1 for convs */
    int same_padding;           /* 1 SAME, 0 VALID */
    tw_activation activation;   /* DENSE, CONV* */
    float rate;                 /* DROPOUT: fraction dropped, in [0, 1) */
    tw_init weight_init, bias_init;
} tw_layer_config;

typedef struct {
    /* dataset */
    char train_path[TW_PATH_BYTES];
    char test_path[TW_PATH_BYTES];   /* "" = no evaluation */
    char image_feature[TW_NAME_BYTES];
    char label_feature[TW_NAME_BYTES];
    int shape[4];                    /* per-example input shape, e.g. [28, 28, 1] or [d, h, w, 1] */
    int rank;                        /* entries of shape in use (1 to 4) */
    float scale;                     /* uint8 inputs are multiplied by it (default 1/255) */
    int shuffle_buffer;              /* used when the data does not fit in memory */
    tw_augment augment;              /* the training examples' augmentation (augment.h); evaluation has none */
    float norm_mean[TW_MAX_NORM], norm_std[TW_MAX_NORM]; /* "normalize": every input value v of channel k (the
                                        shape's last axis) becomes (v - mean[k]) / std[k] before the first
                                        layer, everywhere the model runs; one entry stands for every channel */
    int n_norm_mean, n_norm_std;     /* 0: no normalisation */
    /* model */
    tw_layer_config layers[TW_MAX_LAYERS];
    int n_layers;
    tw_loss_kind loss;
    float label_smoothing;           /* SOFTMAX_XENT: the targets are (1 - e) one-hot + e / classes; 0 = off */
    /* optimisation */
    tw_optimizer_kind optimizer;
    float learning_rate, momentum, beta1, beta2, epsilon;
    int nesterov;                    /* MOMENTUM: Nesterov's step (use_nesterov) */
    float weight_decay;              /* decoupled weight decay of the weights (Keras'; Adam's is AdamW); 0 = off */
    float clip_norm;                 /* "global_clipnorm": the gradient's global norm is clipped to it; 0 = off */
    int lr_decay;                    /* tw_lr_decay: the learning-rate schedule (schedule.h) */
    int64_t decay_steps;             /* EXPONENTIAL, COSINE */
    float decay_rate;                /* EXPONENTIAL */
    int staircase;                   /* EXPONENTIAL */
    float alpha;                     /* COSINE: the floor, a fraction of learning_rate */
    int64_t boundaries[TW_MAX_PIECES - 1]; /* PIECEWISE: steps after the warm-up, increasing */
    int n_boundaries;
    float factors[TW_MAX_PIECES];    /* PIECEWISE: learning_rate × factors[i] in piece i; n_boundaries + 1 */
    int n_factors;
    int64_t warmup_steps;            /* every schedule: the rate ramps from 0 to learning_rate over these
                                        steps, and the schedule counts its steps from their end */
    float l2;                        /* 0 = off */
    float ema_decay;                 /* 0 = off */
    int batch_size;                  /* per tower */
    int towers;
    int64_t steps;
    uint64_t seed;
    int64_t summary_every;
    int64_t histogram_every;         /* weight, EMA and gradient histograms (a pass over every parameter,
                                        three times): every this many steps and at the end; 0: only at
                                        the end. Scalars follow summary_every. */
    int64_t eval_every, checkpoint_every; /* 0: only at the end of the run */
    int keep_checkpoints;
    uint64_t input_memory_bytes;     /* bytes a dataset may take decoded in memory before it streams
                                        (input.h's max_memory_bytes); 0 (default): `tower train
                                        --input-memory`, which `tower serve --input-memory` sets, else 2 GiB.
                                        The budget picks in-memory or streaming order (input.h): a run is
                                        bit-exact across resumes only under one budget; set it here to pin it
                                        against a server default changed between attempts */
    /* execution: cuda_graphs and tf32 are CUDA's (the CPU backend ignores them), winograd the CPU's (the
       CUDA backend ignores it) */
    int cuda_graphs;                 /* 1 (default): from the second step on, each tower's step runs as
                                        CUDA Graphs (trainer.c); 0: op by op */
    int tf32;                        /* 1: GEMMs on TF32 tensor cores (~1e-3 relative error per
                                        product, kernels/cuda/README.md); 0 (default): full FP32 */
    int winograd;                    /* 1: 3x3 stride-1 convolutions through oneDNN's Winograd kernels
                                        where it has them (AVX-512; kernels/cpu/cpu_conv.h), rounding
                                        differently (~1e-6 relative); 0 (default): direct */
    /* start from another run's weights: JSON "init_from": {"checkpoint": PATH, "weights": "raw" | "ema"}
       (null or absent: none). Only the parameters are read, by name and shape (trainer.h:
       tw_train_init_from); a run resuming from its own checkpoint ignores it. */
    tw_init_weights init_weights;
    char init_checkpoint[TW_PATH_BYTES];
} tw_config;

/* The config's spelling of a layer type ("dense", "max_pool3d", ...). */
const char *tw_layer_type_name(tw_layer_type t);

/* Every default, in one place. */
void tw_config_defaults(tw_config *c);

/* Decodes and validates a JSON config (len bytes of text, at most 1 MiB: else TW_ERR_TOO_LARGE).
 * base_dir (may be NULL) resolves relative dataset paths. On error *err names the key
 * ("model.layers[1].units: must be >= 1"), c is undefined. */
tw_status tw_config_parse(const char *json, size_t len, const char *base_dir, tw_config *c,
                          tw_error *err);

/* The same on a document already decoded (borrowed; e.g. a request body jansson decoded with duplicate
 * keys rejected): tw_config_parse is its text reader. The caller bounds the text's size. */
struct json_t;
tw_status tw_config_decode(const struct json_t *doc, const char *base_dir, tw_config *c, tw_error *err);

/* Reads path (capped at 1 MiB) and parses it with base_dir = the file's folder. */
tw_status tw_config_load(const char *path, tw_config *c, tw_error *err);

/* The config as canonical JSON (every field, defaults filled in): caller frees. For the event file's
 * text summary and the checkpoint's metadata. */
char *tw_config_to_json(const tw_config *c);

/* Finds a file-path key (the dataset's "train", "test", ...: every key the schema reads as a path) in
 * doc, a config as a JSON object (borrowed; other keys are ignored). Returns 1 and its key path
 * ("dataset.train") in key, or 0 when there is none. The server refuses such keys: a run submitted over
 * the API reads only registered datasets. */
int tw_config_find_path_key(const struct json_t *doc, char *key, size_t size);

/* The JSON Schema (draft 2020-12) of the config document, generated from the tables the decoder walks
 * (one owner: no second copy of a key, range or enum): types, ranges, enums, required keys, defaults,
 * and per "type" variant (layers, initialisers, optimizer, lr_decay) the keys it takes, as oneOf. paths
 * = 0 leaves the file-path keys out (the server's document refuses them). What JSON Schema cannot say
 * stays with the decoder: unique layer names, a string's limit in bytes (maxLength counts characters),
 * 100.0 refused where an integer is due (JSON Schema's "integer" takes it).
 * New reference (caller owns); NULL when out of memory. Thread-safe. */
struct json_t *tw_config_json_schema(int paths);

/* Applies the `tower train` overrides (--towers N when > 0) and re-validates. */
tw_status tw_config_override_towers(tw_config *c, int towers, tw_error *err);

#endif
