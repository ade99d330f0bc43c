/* config.c — the run configuration: JSON text -> tw_config, strictly, and back to canonical JSON.
 *
 * Owns: the schema of the config document, every default (tw_config_defaults), the decoder and the
 * encoder. The schema is one table per JSON object: each row is a key, its kind, where its value
 * lives in tw_config, its range, whether it is required, and which variants (values of the object's
 * "type" key) accept it. The decoder and the encoder both walk these tables, so a key cannot be read
 * and then forgotten by tw_config_to_json, and the ranges live in one place; so does the JSON Schema
 * export (tw_config_json_schema, at the end), which the server's OpenAPI document carries. Decoding is strict
 * (docs/architecture.md, "House style" rule 10): an unknown key, a key the object's type does not use, a duplicate, a wrong
 * type, a number out of range or a path too long is TW_ERR_INVALID with one message that starts with
 * the key path ("model.layers[2].units: must be in [1, 65536], got 0"); "config" names the document.
 *
 * jansson parses. Written here is only what jansson does not do: a nesting cap of MAX_DEPTH levels
 * (jansson recurses 2048 deep) and the key path of a syntax error (jansson gives a byte position), both
 * by one small scan of the text (text_scan) that tracks containers, keys and indices.
 *
 * Does not own: whether the dataset exists and fits the model (the input pipeline and the model check
 * that). No global state; not thread-safe per struct. */
#include "config.h"

#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datafs.h"
#include "suggest.h"

enum {
    MAX_CONFIG_BYTES = 1 << 20, /* config text cap, for files and for request bodies */
    MAX_DEPTH = 32,             /* deepest nesting of objects and arrays accepted */
    KEY_PATH = 256,             /* room for a key path in messages */
    MAX_KEYS = 32,              /* most keys one schema has */
};

/* ---- the schema ---------------------------------------------------------------------------------- */

typedef enum {
    K_INT,    /* int, in [ilo, ihi] */
    K_INT64,  /* int64_t, in [ilo, ihi] */
    K_UINT64, /* uint64_t, in [ilo, ihi] (ilo >= 0) */
    K_FLOAT,  /* float from any JSON number, in flo..fhi (ends open with F_LO_OPEN / F_HI_OPEN) */
    K_BOOL,   /* int 0 or 1 from true / false */
    K_ENUM,   /* int-sized enum from a string: names[value]; a NULL name is not accepted */
    K_STRING, /* char[TW_NAME_BYTES], 1..63 bytes, no control characters; F_IDENT: a layer name */
    K_PATH,   /* char[TW_PATH_BYTES]; relative paths are joined to base_dir */
    K_SHAPE,  /* int[4] from 1 to 4 integers in [ilo, ihi]; their count is an int at aux */
    K_WINDOW, /* int[3] [d, h, w] from an int or a list of 2 (2-D variants) or 3 (3-D) in [ilo, ihi] */
    K_OBJECT, /* a nested object, decoded by sub at base + offset */
    K_LAYERS, /* tw_layer_config[TW_MAX_LAYERS] at offset, 1 to TW_MAX_LAYERS; count at aux */
    K_STEPS,  /* int64_t[max_items] of 0 to max_items steps in [ilo, ihi], increasing; count at aux */
    K_FLOATS, /* float[max_items] of 1 to max_items numbers as K_FLOAT takes them; count at aux */
    K_NAMES,  /* char[max_items][TW_NAME_BYTES] of 1 to max_items strings as K_STRING takes them; count at
                 aux; left out of the JSON written when the count is 0 */
} field_kind;

enum {
    F_REQUIRED = 1,  /* absent is an error */
    F_NULLABLE = 2,  /* null means absent (K_PATH: ""; K_OBJECT: the NULL-named variant, or for an object
                        without variants, its first field a list of no items) */
    F_LO_OPEN = 4,   /* K_FLOAT: flo itself is out of range */
    F_HI_OPEN = 8,   /* K_FLOAT: fhi itself is out of range */
    F_IDENT = 16,    /* K_STRING: a layer name (valid_layer_name) */
    F_VARIANT = 32,  /* K_ENUM: the object's "type": decoded first; selects the other keys */
};

typedef struct schema schema;

typedef struct {
    const char *key;
    field_kind kind;
    size_t offset;            /* where the value lives in the object's struct */
    unsigned flags;           /* F_* */
    unsigned variants;        /* bit v: used when the variant is v; 0: used by every variant */
    int64_t ilo, ihi;         /* integer kinds */
    double flo, fhi;          /* K_FLOAT */
    const char *const *names; /* K_ENUM */
    int n_names;
    const schema *sub; /* K_OBJECT */
    size_t aux;        /* K_SHAPE, K_LAYERS, K_STEPS, K_FLOATS, K_NAMES: offset of the int count */
    int max_items;     /* K_STEPS, K_FLOATS, K_NAMES */
} field;

struct schema {
    const field *fields;
    int n;
};

#define BIT(v) (1u << (v))
#define NAMES(a) .names = (a), .n_names = (int)(sizeof(a) / sizeof *(a))
#define IRANGE(lo, hi) .ilo = (lo), .ihi = (hi)
#define FRANGE(lo, hi) .flo = (lo), .fhi = (hi)
#define SCHEMA(a) {(a), (int)(sizeof(a) / sizeof *(a))}

_Static_assert(sizeof(tw_layer_type) == sizeof(int) && sizeof(tw_activation) == sizeof(int) &&
                   sizeof(tw_init_weights) == sizeof(int) &&
                   sizeof(tw_init_kind) == sizeof(int) && sizeof(tw_loss_kind) == sizeof(int) &&
                   sizeof(tw_optimizer_kind) == sizeof(int),
               "enums are stored as int");
_Static_assert(TW_LAYER_CONCAT == 12 && TW_ACT_SIGMOID == 3 && TW_INIT_CONSTANT == 3 &&
                   TW_LOSS_MSE == 1 && TW_OPT_ADAM == 2 && TW_DECAY_PIECEWISE == 3,
               "the name tables below are indexed by these enums");

static const char *const LAYER_TYPES[] = {"dense",      "conv2d",     "max_pool2d", "conv3d",
                                          "max_pool3d", "dropout",    "flatten",    "batch_norm",
                                          "avg_pool2d", "avg_pool3d", "global_avg_pool", "add",
                                          "concat"};
static const char *const ACTIVATIONS[] = {"linear", "relu", "tanh", "sigmoid"};
static const char *const INITS[] = {"truncated_normal", "glorot_uniform", "zeros", "constant"};
static const char *const PADDINGS[] = {"valid", "same"};
static const char *const LOSSES[] = {"softmax_cross_entropy", "mean_squared_error"};
static const char *const OPTIMIZERS[] = {"sgd", "momentum", "adam"};
static const char *const DECAYS[] = {NULL, "exponential", "cosine", "piecewise"}; /* NONE: null */
static const char *const INIT_WEIGHTS[] = {NULL, "raw", "ema"}; /* 0: no init_from, written as null */

const char *tw_layer_type_name(tw_layer_type t)
{
    return (unsigned)t < sizeof LAYER_TYPES / sizeof *LAYER_TYPES ? LAYER_TYPES[t] : "?";
}

enum {
    WEIGHTED = BIT(TW_LAYER_DENSE) | BIT(TW_LAYER_CONV2D) | BIT(TW_LAYER_CONV3D),
    CONVS = BIT(TW_LAYER_CONV2D) | BIT(TW_LAYER_CONV3D),
    POOLS = BIT(TW_LAYER_MAX_POOL2D) | BIT(TW_LAYER_MAX_POOL3D) | BIT(TW_LAYER_AVG_POOL2D) |
            BIT(TW_LAYER_AVG_POOL3D),
    LAYERS_3D = BIT(TW_LAYER_CONV3D) | BIT(TW_LAYER_MAX_POOL3D) | BIT(TW_LAYER_AVG_POOL3D),
    NORMS = BIT(TW_LAYER_BATCH_NORM),
    ACTIVATED = WEIGHTED | NORMS | BIT(TW_LAYER_ADD), /* layers that take an "activation" */
};

#define INIT_AT(m) offsetof(tw_init, m)
static const field INIT_FIELDS[] = {
    {.key = "type", .kind = K_ENUM, .offset = INIT_AT(kind), .flags = F_VARIANT | F_REQUIRED,
     NAMES(INITS)},
    {.key = "stddev", .kind = K_FLOAT, .offset = INIT_AT(stddev), .flags = F_LO_OPEN,
     .variants = BIT(TW_INIT_TRUNCATED_NORMAL), FRANGE(0, FLT_MAX)},
    {.key = "value", .kind = K_FLOAT, .offset = INIT_AT(value), .variants = BIT(TW_INIT_CONSTANT),
     FRANGE(-FLT_MAX, FLT_MAX)},
};
static const schema INIT_SCHEMA = SCHEMA(INIT_FIELDS);

#define LAYER_AT(m) offsetof(tw_layer_config, m)
static const field LAYER_FIELDS[] = {
    {.key = "type", .kind = K_ENUM, .offset = LAYER_AT(type), .flags = F_VARIANT | F_REQUIRED,
     NAMES(LAYER_TYPES)},
    {.key = "name", .kind = K_STRING, .offset = LAYER_AT(name), .flags = F_IDENT},
    {.key = "inputs", .kind = K_NAMES, .offset = LAYER_AT(inputs), .flags = F_IDENT, .aux = LAYER_AT(n_inputs),
     .max_items = TW_MAX_INPUTS},
    {.key = "momentum", .kind = K_FLOAT, .offset = LAYER_AT(momentum), .flags = F_HI_OPEN, .variants = NORMS,
     FRANGE(0, 1)},
    {.key = "epsilon", .kind = K_FLOAT, .offset = LAYER_AT(epsilon), .flags = F_LO_OPEN, .variants = NORMS,
     FRANGE(0, 1)},
    {.key = "units", .kind = K_INT, .offset = LAYER_AT(units), .flags = F_REQUIRED,
     .variants = BIT(TW_LAYER_DENSE), IRANGE(1, 65536)},
    {.key = "filters", .kind = K_INT, .offset = LAYER_AT(filters), .flags = F_REQUIRED,
     .variants = CONVS, IRANGE(1, 4096)},
    {.key = "kernel", .kind = K_WINDOW, .offset = LAYER_AT(kernel), .flags = F_REQUIRED,
     .variants = CONVS, IRANGE(1, 64)},
    {.key = "pool", .kind = K_WINDOW, .offset = LAYER_AT(kernel), .flags = F_REQUIRED,
     .variants = POOLS, IRANGE(1, 64)},
    {.key = "strides", .kind = K_WINDOW, .offset = LAYER_AT(strides), .variants = CONVS | POOLS,
     IRANGE(1, 64)},
    {.key = "padding", .kind = K_ENUM, .offset = LAYER_AT(same_padding), .variants = CONVS | POOLS,
     NAMES(PADDINGS)},
    {.key = "activation", .kind = K_ENUM, .offset = LAYER_AT(activation), .variants = ACTIVATED,
     NAMES(ACTIVATIONS)},
    {.key = "rate", .kind = K_FLOAT, .offset = LAYER_AT(rate), .flags = F_REQUIRED | F_HI_OPEN,
     .variants = BIT(TW_LAYER_DROPOUT), FRANGE(0, 1)},
    {.key = "weight_init", .kind = K_OBJECT, .offset = LAYER_AT(weight_init), .variants = WEIGHTED,
     .sub = &INIT_SCHEMA},
    {.key = "bias_init", .kind = K_OBJECT, .offset = LAYER_AT(bias_init), .variants = WEIGHTED,
     .sub = &INIT_SCHEMA},
};
static const schema LAYER_SCHEMA = SCHEMA(LAYER_FIELDS);

#define AT(m) offsetof(tw_config, m)
#define AUG_AT(m) offsetof(tw_augment, m)
static const field AUGMENT_FIELDS[] = {
    {.key = "resized_crop_min_scale", .kind = K_FLOAT, .offset = AUG_AT(resized_crop_min_scale), FRANGE(0, 1)},
    {.key = "resized_crop_max_ratio", .kind = K_FLOAT, .offset = AUG_AT(resized_crop_max_ratio), FRANGE(1, 10)},
    {.key = "crop_padding", .kind = K_INT, .offset = AUG_AT(crop_padding), IRANGE(0, 64)},
    {.key = "horizontal_flip", .kind = K_BOOL, .offset = AUG_AT(horizontal_flip)},
    {.key = "erasing_probability", .kind = K_FLOAT, .offset = AUG_AT(erasing_probability), FRANGE(0, 1)},
    {.key = "erasing_max_area", .kind = K_FLOAT, .offset = AUG_AT(erasing_max_area), FRANGE(0.02, 1)},
};
static const schema AUGMENT_SCHEMA = SCHEMA(AUGMENT_FIELDS);

static const field NORMALIZE_FIELDS[] = {
    {.key = "mean", .kind = K_FLOATS, .offset = AT(norm_mean), .flags = F_REQUIRED, FRANGE(-FLT_MAX, FLT_MAX),
     .aux = AT(n_norm_mean), .max_items = TW_MAX_NORM},
    {.key = "std", .kind = K_FLOATS, .offset = AT(norm_std), .flags = F_REQUIRED | F_LO_OPEN, FRANGE(0, FLT_MAX),
     .aux = AT(n_norm_std), .max_items = TW_MAX_NORM},
};
static const schema NORMALIZE_SCHEMA = SCHEMA(NORMALIZE_FIELDS);

static const field DATASET_FIELDS[] = {
    {.key = "train", .kind = K_PATH, .offset = AT(train_path), .flags = F_REQUIRED},
    {.key = "test", .kind = K_PATH, .offset = AT(test_path), .flags = F_NULLABLE},
    {.key = "image_feature", .kind = K_STRING, .offset = AT(image_feature)},
    {.key = "label_feature", .kind = K_STRING, .offset = AT(label_feature)},
    {.key = "shape", .kind = K_SHAPE, .offset = AT(shape), .flags = F_REQUIRED, IRANGE(1, 65536),
     .aux = AT(rank)},
    {.key = "scale", .kind = K_FLOAT, .offset = AT(scale), .flags = F_LO_OPEN, FRANGE(0, FLT_MAX)},
    {.key = "shuffle_buffer", .kind = K_INT, .offset = AT(shuffle_buffer), IRANGE(1, 10000000)},
    {.key = "augment", .kind = K_OBJECT, .offset = AT(augment), .sub = &AUGMENT_SCHEMA},
    {.key = "normalize", .kind = K_OBJECT, .flags = F_NULLABLE, .sub = &NORMALIZE_SCHEMA},
};
static const schema DATASET_SCHEMA = SCHEMA(DATASET_FIELDS);


static const field MODEL_FIELDS[] = {
    {.key = "layers", .kind = K_LAYERS, .offset = AT(layers), .flags = F_REQUIRED,
     .aux = AT(n_layers)},
};
static const schema MODEL_SCHEMA = SCHEMA(MODEL_FIELDS);

static const field OPTIMIZER_FIELDS[] = {
    {.key = "type", .kind = K_ENUM, .offset = AT(optimizer), .flags = F_VARIANT,
     NAMES(OPTIMIZERS)},
    {.key = "learning_rate", .kind = K_FLOAT, .offset = AT(learning_rate), .flags = F_LO_OPEN,
     FRANGE(0, FLT_MAX)},
    {.key = "momentum", .kind = K_FLOAT, .offset = AT(momentum), .flags = F_HI_OPEN,
     .variants = BIT(TW_OPT_MOMENTUM), FRANGE(0, 1)},
    {.key = "beta1", .kind = K_FLOAT, .offset = AT(beta1), .flags = F_HI_OPEN,
     .variants = BIT(TW_OPT_ADAM), FRANGE(0, 1)},
    {.key = "beta2", .kind = K_FLOAT, .offset = AT(beta2), .flags = F_HI_OPEN,
     .variants = BIT(TW_OPT_ADAM), FRANGE(0, 1)},
    {.key = "epsilon", .kind = K_FLOAT, .offset = AT(epsilon), .flags = F_LO_OPEN,
     .variants = BIT(TW_OPT_ADAM), FRANGE(0, FLT_MAX)},
    {.key = "nesterov", .kind = K_BOOL, .offset = AT(nesterov), .variants = BIT(TW_OPT_MOMENTUM)},
    {.key = "weight_decay", .kind = K_FLOAT, .offset = AT(weight_decay), FRANGE(0, 1)},
    {.key = "global_clipnorm", .kind = K_FLOAT, .offset = AT(clip_norm), FRANGE(0, FLT_MAX)},
};
static const schema OPTIMIZER_SCHEMA = SCHEMA(OPTIMIZER_FIELDS);

static const field DECAY_FIELDS[] = {
    {.key = "type", .kind = K_ENUM, .offset = AT(lr_decay), .flags = F_VARIANT | F_REQUIRED,
     NAMES(DECAYS)},
    {.key = "decay_steps", .kind = K_INT64, .offset = AT(decay_steps), .flags = F_REQUIRED,
     .variants = BIT(TW_DECAY_EXPONENTIAL) | BIT(TW_DECAY_COSINE), IRANGE(1, INT64_MAX)},
    {.key = "decay_rate", .kind = K_FLOAT, .offset = AT(decay_rate), .flags = F_REQUIRED | F_LO_OPEN,
     .variants = BIT(TW_DECAY_EXPONENTIAL), FRANGE(0, 1)},
    {.key = "staircase", .kind = K_BOOL, .offset = AT(staircase), .variants = BIT(TW_DECAY_EXPONENTIAL)},
    {.key = "alpha", .kind = K_FLOAT, .offset = AT(alpha), .variants = BIT(TW_DECAY_COSINE), FRANGE(0, 1)},
    {.key = "boundaries", .kind = K_STEPS, .offset = AT(boundaries), .flags = F_REQUIRED,
     .variants = BIT(TW_DECAY_PIECEWISE), IRANGE(1, INT64_MAX), .aux = AT(n_boundaries),
     .max_items = TW_MAX_PIECES - 1},
    {.key = "factors", .kind = K_FLOATS, .offset = AT(factors), .flags = F_REQUIRED | F_LO_OPEN,
     .variants = BIT(TW_DECAY_PIECEWISE), FRANGE(0, FLT_MAX), .aux = AT(n_factors),
     .max_items = TW_MAX_PIECES},
    {.key = "warmup_steps", .kind = K_INT64, .offset = AT(warmup_steps), IRANGE(0, INT64_MAX)},
};
static const schema DECAY_SCHEMA = SCHEMA(DECAY_FIELDS);

static const field INIT_FROM_FIELDS[] = {
    {.key = "weights", .kind = K_ENUM, .offset = AT(init_weights), .flags = F_VARIANT | F_REQUIRED,
     NAMES(INIT_WEIGHTS)},
    {.key = "checkpoint", .kind = K_PATH, .offset = AT(init_checkpoint), .flags = F_REQUIRED},
};
static const schema INIT_FROM_SCHEMA = SCHEMA(INIT_FROM_FIELDS);

static const field CONFIG_FIELDS[] = {
    {.key = "dataset", .kind = K_OBJECT, .flags = F_REQUIRED, .sub = &DATASET_SCHEMA},
    {.key = "model", .kind = K_OBJECT, .flags = F_REQUIRED, .sub = &MODEL_SCHEMA},
    {.key = "loss", .kind = K_ENUM, .offset = AT(loss), NAMES(LOSSES)},
    {.key = "label_smoothing", .kind = K_FLOAT, .offset = AT(label_smoothing), .flags = F_HI_OPEN, FRANGE(0, 1)},
    {.key = "optimizer", .kind = K_OBJECT, .sub = &OPTIMIZER_SCHEMA},
    {.key = "lr_decay", .kind = K_OBJECT, .flags = F_NULLABLE, .sub = &DECAY_SCHEMA},
    {.key = "l2", .kind = K_FLOAT, .offset = AT(l2), FRANGE(0, FLT_MAX)},
    {.key = "ema_decay", .kind = K_FLOAT, .offset = AT(ema_decay), .flags = F_HI_OPEN,
     FRANGE(0, 1)},
    {.key = "batch_size", .kind = K_INT, .offset = AT(batch_size), IRANGE(1, 65536)},
    {.key = "towers", .kind = K_INT, .offset = AT(towers), IRANGE(1, 64)},
    {.key = "steps", .kind = K_INT64, .offset = AT(steps), IRANGE(1, 1000000000)},
    {.key = "seed", .kind = K_UINT64, .offset = AT(seed), IRANGE(0, INT64_MAX)},
    {.key = "summary_every", .kind = K_INT64, .offset = AT(summary_every), IRANGE(1, INT64_MAX)},
    {.key = "histogram_every", .kind = K_INT64, .offset = AT(histogram_every), IRANGE(0, INT64_MAX)},
    /* 0: no periodic evaluation or checkpoint; the run still evaluates and checkpoints at its end */
    {.key = "eval_every", .kind = K_INT64, .offset = AT(eval_every), IRANGE(0, INT64_MAX)},
    {.key = "checkpoint_every", .kind = K_INT64, .offset = AT(checkpoint_every),
     IRANGE(0, INT64_MAX)},
    {.key = "keep_checkpoints", .kind = K_INT, .offset = AT(keep_checkpoints), IRANGE(1, 1000)},
    {.key = "input_memory_bytes", .kind = K_UINT64, .offset = AT(input_memory_bytes), IRANGE(0, INT64_MAX)},
    {.key = "cuda_graphs", .kind = K_BOOL, .offset = AT(cuda_graphs)},
    {.key = "tf32", .kind = K_BOOL, .offset = AT(tf32)},
    {.key = "winograd", .kind = K_BOOL, .offset = AT(winograd)},
    {.key = "init_from", .kind = K_OBJECT, .flags = F_NULLABLE, .sub = &INIT_FROM_SCHEMA},
};
static const schema CONFIG_SCHEMA = SCHEMA(CONFIG_FIELDS);

/* ---- defaults ------------------------------------------------------------------------------------ */

static void layer_defaults(tw_layer_config *l)
{
    l->type = TW_LAYER_DENSE;
    l->activation = TW_ACT_NONE;
    l->weight_init = (tw_init){TW_INIT_TRUNCATED_NORMAL, 0.1f, 0.0f};
    l->bias_init = (tw_init){TW_INIT_ZEROS, 0.1f, 0.0f};
    for (int i = 0; i < 3; i++)
        l->kernel[i] = l->strides[i] = 1;
    l->same_padding = 1;
    l->momentum = 0.99f; /* Keras' BatchNormalization defaults */
    l->epsilon = 0.001f;
}

/* The name of layer i when the config gives none: "layer<k>" for the k-th dense or convolution layer
 * (1-based), "<type>_<i>" for the others. */
static void default_layer_name(const tw_layer_config *l, int i, int k, char *name, size_t size)
{
    if (WEIGHTED & BIT(l->type))
        snprintf(name, size, "layer%d", k);
    else
        snprintf(name, size, "%s_%d", tw_layer_type_name(l->type), i);
}

void tw_config_defaults(tw_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->image_feature, sizeof c->image_feature, "%s", "image_raw");
    snprintf(c->label_feature, sizeof c->label_feature, "%s", "label");
    c->scale = 1.0f / 255.0f;
    c->shuffle_buffer = 10000;
    c->augment = (tw_augment){.resized_crop_max_ratio = 4.0f / 3.0f, .erasing_max_area = 0.33f};
    for (int i = 0; i < TW_MAX_LAYERS; i++)
        layer_defaults(&c->layers[i]);
    c->loss = TW_LOSS_SOFTMAX_XENT;
    c->optimizer = TW_OPT_SGD;
    c->learning_rate = 0.001f;
    c->momentum = 0.9f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->epsilon = 1e-8f;
    c->nesterov = 0;
    c->weight_decay = 0.0f;
    c->clip_norm = 0.0f;
    c->label_smoothing = 0.0f;
    c->lr_decay = 0;
    c->decay_steps = 1;
    c->decay_rate = 1.0f;
    c->staircase = 0;
    c->alpha = 0.0f;
    c->warmup_steps = 0;
    c->batch_size = 32;
    c->towers = 1;
    c->steps = 1000;
    c->seed = 1;
    c->summary_every = 100;
    c->histogram_every = 1000;
    c->eval_every = 1000;
    c->checkpoint_every = 1000;
    c->keep_checkpoints = 5;
    c->cuda_graphs = 1;
    c->tf32 = 0;
    c->winograd = 0;
}

/* ---- small helpers ------------------------------------------------------------------------------- */

static int load_int(const char *base, size_t off)
{
    int v;
    memcpy(&v, base + off, sizeof v);
    return v;
}

static void store_int(char *base, size_t off, int v) { memcpy(base + off, &v, sizeof v); }

static int applies(const field *f, int variant)
{
    return !f->variants || (f->variants & BIT(variant));
}

static int is_3d(int layer_type) { return (LAYERS_3D & BIT(layer_type)) != 0; }

static const field *variant_field(const schema *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->fields[i].flags & F_VARIANT)
            return &s->fields[i];
    return NULL;
}

static const char *enum_name(const field *f, int v)
{
    return v >= 0 && v < f->n_names ? f->names[v] : NULL;
}

/* Copies s into out for a message: printable ASCII kept, every other byte '?', at most max bytes. */
static void sanitize(char *out, size_t size, const char *s, size_t max)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 1 < size && n < max; p++)
        out[n++] = (*p >= 0x20 && *p < 0x7f) ? (char)*p : '?';
    out[n] = '\0';
}

/* Key paths longer than KEY_PATH end in "...". */
static void mark_truncated(char out[KEY_PATH], int n)
{
    if (n >= KEY_PATH)
        memcpy(out + KEY_PATH - 4, "...", 4);
}

static void join_key(char out[KEY_PATH], const char *parent, const char *key)
{
    char k[64];
    sanitize(k, sizeof k, key, 63);
    mark_truncated(out, snprintf(out, KEY_PATH, "%s%s%s", parent, parent[0] ? "." : "", k));
}

static void join_index(char out[KEY_PATH], const char *parent, size_t i)
{
    mark_truncated(out, snprintf(out, KEY_PATH, "%s[%zu]", parent, i));
}

/* Fills *err with "<path>: <message>" (path "" is the whole document, "config"); TW_ERR_INVALID. */
__attribute__((format(printf, 3, 4))) static tw_status fail(tw_error *err, const char *path,
                                                            const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: %s", path[0] ? path : "config", msg);
}

/* A JSON value as a message shows it: 12, 0.5, 'text', true, null, an object, an array. */
static const char *describe(const json_t *v, char *buf, size_t size)
{
    char text[48];
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: snprintf(buf, size, "an array of %zu", json_array_size(v)); return buf;
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    case JSON_INTEGER: snprintf(buf, size, "%lld", (long long)json_integer_value(v)); return buf;
    case JSON_REAL:
        snprintf(buf, size, "%.9g", json_real_value(v));
        if (!strpbrk(buf, ".eEin"))
            strncat(buf, ".0", size - strlen(buf) - 1);
        return buf;
    case JSON_STRING:
        sanitize(text, sizeof text, json_string_value(v), 40);
        snprintf(buf, size, "'%s'", text);
        return buf;
    }
    return "a value";
}

static tw_status type_error(tw_error *err, const char *path, const char *expected, const json_t *v)
{
    char buf[64];
    return fail(err, path, "must be %s, got %s", expected, describe(v, buf, sizeof buf));
}

/* The candidates a message offers for a misspelt key or value. */
typedef struct {
    const char *name[MAX_KEYS];
    int n;
} choices;

static void choices_add(choices *c, const char *name)
{
    if (name && c->n < MAX_KEYS)
        c->name[c->n++] = name;
}

/* Writes "(did you mean 'x'?)" for a close candidate, else "(expected one of: a, b, c)". */
static void suggest(const choices *c, const char *s, char *out, size_t size)
{
    out[0] = '(';
    tw_suggest_hint(s, c->name, (size_t)c->n, out + 1, size - 1);
    size_t n = strlen(out);
    if (n + 1 < size)
        snprintf(out + n, size - n, ")");
}

/* ---- the text scan: nesting depth and the key path at a byte position ---------------------------- */

typedef struct {
    int is_object;
    int expect_key; /* objects: the next string is a key */
    int has_key;    /* objects: key holds the key whose value comes now */
    size_t index;   /* arrays: the element now */
    char key[64];
} scan_frame;

static void scan_path(const scan_frame *f, int depth, char out[KEY_PATH])
{
    char parent[KEY_PATH];
    out[0] = '\0';
    for (int i = 0; i < depth; i++) {
        snprintf(parent, sizeof parent, "%s", out);
        if (!f[i].is_object)
            join_index(out, parent, f[i].index);
        else if (f[i].has_key)
            join_key(out, parent, f[i].key);
    }
}

/* Walks text[0, stop) as JSON, tracking open containers, the key of each object and the index in each
 * array. Returns 1 when nesting goes past MAX_DEPTH (path: where), else 0 (path: the key path at stop).
 * Any bytes are accepted: stray brackets and unterminated strings only end the walk. */
static int text_scan(const char *text, size_t stop, char out[KEY_PATH])
{
    scan_frame f[MAX_DEPTH];
    int depth = 0, in_string = 0, escaped = 0, in_key = 0;
    size_t key_len = 0;
    for (size_t i = 0; i < stop; i++) {
        char ch = text[i];
        if (in_string) {
            if (!escaped && ch == '"') {
                in_string = 0;
                if (in_key) {
                    f[depth - 1].key[key_len] = '\0';
                    f[depth - 1].has_key = 1;
                    f[depth - 1].expect_key = in_key = 0;
                }
                continue;
            }
            escaped = !escaped && ch == '\\';
            if (in_key && key_len < sizeof f[0].key - 1)
                f[depth - 1].key[key_len++] = ch;
            continue;
        }
        if (ch == '"') {
            in_string = 1;
            in_key = depth > 0 && f[depth - 1].is_object && f[depth - 1].expect_key;
            if (in_key)
                f[depth - 1].has_key = 0, key_len = 0;
        } else if (ch == '{' || ch == '[') {
            if (depth == MAX_DEPTH) {
                scan_path(f, depth, out);
                return 1;
            }
            f[depth++] = (scan_frame){.is_object = ch == '{', .expect_key = ch == '{'};
        } else if ((ch == '}' || ch == ']') && depth > 0) {
            depth--;
        } else if (ch == ',' && depth > 0) {
            if (f[depth - 1].is_object)
                f[depth - 1].expect_key = 1, f[depth - 1].has_key = 0;
            else
                f[depth - 1].index++;
        }
    }
    scan_path(f, depth, out);
    return 0;
}

/* A jansson decode error as "<key path>: <what>" (the path found by scanning up to its position). */
static tw_status syntax_error(const char *text, size_t len, const json_error_t *je, tw_error *err)
{
    char path[KEY_PATH], what[200], text_part[160];
    size_t stop = je->position >= 0 && (size_t)je->position < len ? (size_t)je->position : len;
    text_scan(text, stop, path);
    switch (json_error_code(je)) {
    case json_error_numeric_overflow: snprintf(what, sizeof what, "number out of range"); break;
    case json_error_duplicate_key: snprintf(what, sizeof what, "duplicate key"); break;
    case json_error_null_character: snprintf(what, sizeof what, "\\u0000 is not allowed"); break;
    case json_error_invalid_utf8: snprintf(what, sizeof what, "invalid UTF-8"); break;
    default:
        sanitize(text_part, sizeof text_part, je->text, 150);
        snprintf(what, sizeof what, "invalid JSON: %s", text_part);
    }
    return fail(err, path, "%s (line %d, column %d)", what, je->line, je->column);
}

/* ---- decoding ------------------------------------------------------------------------------------ */

typedef struct {
    const char *base_dir; /* NULL or "": paths stay as given */
    tw_error *err;
} decoder;

static tw_status decode_object(const schema *s, json_t *obj, const char *path, char *base,
                               const decoder *d);

static tw_status get_integer(const json_t *v, const char *path, int64_t lo, int64_t hi,
                             int64_t *out, tw_error *err)
{
    if (!json_is_integer(v))
        return type_error(err, path, "an integer", v);
    long long i = json_integer_value(v);
    if (i < lo || i > hi) {
        if (hi == INT64_MAX)
            return fail(err, path, "must be >= %lld, got %lld", (long long)lo, i);
        return fail(err, path, "must be in [%lld, %lld], got %lld", (long long)lo, (long long)hi, i);
    }
    *out = i;
    return TW_OK;
}

static void store_integer(const field *f, char *base, int64_t i)
{
    if (f->kind == K_INT) {
        store_int(base, f->offset, (int)i);
    } else if (f->kind == K_INT64) {
        memcpy(base + f->offset, &i, sizeof i);
    } else {
        uint64_t u = (uint64_t)i;
        memcpy(base + f->offset, &u, sizeof u);
    }
}

static tw_status float_range_error(const field *f, const char *path, double got, tw_error *err)
{
    const char *lo = (f->flags & F_LO_OPEN) ? ">" : ">=";
    if (f->fhi >= FLT_MAX)
        return fail(err, path, "must be %s %g, got %.9g", lo, f->flo, got);
    return fail(err, path, "must be in %c%g, %g%c, got %.9g", (f->flags & F_LO_OPEN) ? '(' : '[',
                f->flo, f->fhi, (f->flags & F_HI_OPEN) ? ')' : ']', got);
}

/* Any JSON number that is a finite float (after rounding to float) within the field's range. */
static tw_status decode_float(const field *f, const json_t *v, const char *path, char *base,
                              tw_error *err)
{
    if (!json_is_number(v))
        return type_error(err, path, "a number", v);
    double d = json_number_value(v);
    if (!(fabs(d) <= FLT_MAX))
        return fail(err, path, "must fit a 32-bit float, got %.9g", d);
    float x = (float)d;
    int below = (f->flags & F_LO_OPEN) ? !(x > f->flo) : !(x >= f->flo);
    int above = (f->flags & F_HI_OPEN) ? !(x < f->fhi) : !(x <= f->fhi);
    if (below || above)
        return float_range_error(f, path, d, err);
    memcpy(base + f->offset, &x, sizeof x);
    return TW_OK;
}

static tw_status decode_enum(const field *f, const json_t *v, const char *path, char *base,
                             tw_error *err)
{
    if (!json_is_string(v))
        return type_error(err, path, "a string", v);
    const char *s = json_string_value(v);
    choices c = {.n = 0};
    for (int i = 0; i < f->n_names; i++) {
        if (f->names[i] && strcmp(s, f->names[i]) == 0) {
            store_int(base, f->offset, i);
            return TW_OK;
        }
        choices_add(&c, f->names[i]);
    }
    char shown[48], hint[300];
    sanitize(shown, sizeof shown, s, 40);
    suggest(&c, s, hint, sizeof hint);
    return fail(err, path, "unknown value '%s' %s", shown, hint);
}

static int alnum(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* A layer name, a TensorFlow scope: letters, digits and _ - . /, where the name and every part after
 * a '/' start with a letter or a digit (so "a/b_1" but not "_a", "a//b" or "a/"). */
static int valid_layer_name(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++) {
        int starts_part = i == 0 || s[i - 1] == '/';
        if (starts_part ? !alnum(s[i]) : !(alnum(s[i]) || strchr("_-./", s[i])))
            return 0;
    }
    return i > 0 && s[i - 1] != '/';
}

static int has_control_char(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 1;
    return 0;
}

static tw_status decode_string(const field *f, const json_t *v, const char *path, char *base,
                               tw_error *err)
{
    if (!json_is_string(v))
        return type_error(err, path, "a string", v);
    const char *s = json_string_value(v);
    size_t n = strlen(s);
    if (n == 0 || n >= TW_NAME_BYTES)
        return fail(err, path, "must be 1 to %d bytes long, got %zu", TW_NAME_BYTES - 1, n);
    if ((f->flags & F_IDENT) && !valid_layer_name(s))
        return fail(err, path, "must be letters, digits and _ - . /, each '/' part starting with "
                               "a letter or digit");
    if (!(f->flags & F_IDENT) && has_control_char(s))
        return fail(err, path, "must not hold control characters");
    memcpy(base + f->offset, s, n + 1);
    return TW_OK;
}

/* A dataset path: non-empty; relative ones joined to base_dir; the result under TW_PATH_BYTES. */
static tw_status decode_path(const field *f, const json_t *v, const char *path, char *base,
                             const decoder *d)
{
    if (!json_is_string(v))
        return type_error(d->err, path, "a string", v);
    const char *s = json_string_value(v);
    if (!s[0])
        return fail(d->err, path, "must not be empty");
    const char *dir = (s[0] != '/' && d->base_dir) ? d->base_dir : "";
    size_t dl = strlen(dir);
    const char *sep = (dl && dir[dl - 1] != '/') ? "/" : "";
    int n = snprintf(base + f->offset, TW_PATH_BYTES, "%s%s%s", dir, sep, s);
    if (n < 0 || n >= TW_PATH_BYTES)
        return fail(d->err, path, "path longer than %d bytes", TW_PATH_BYTES - 1);
    return TW_OK;
}

static tw_status decode_shape(const field *f, const json_t *v, const char *path, char *base,
                              tw_error *err)
{
    if (!json_is_array(v))
        return type_error(err, path, "an array of 1 to 4 integers", v);
    size_t n = json_array_size(v);
    if (n < 1 || n > 4)
        return fail(err, path, "must have 1 to 4 entries, got %zu", n);
    int dims[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        char item[KEY_PATH];
        int64_t x = 0;
        join_index(item, path, i);
        TW_TRY(get_integer(json_array_get(v, i), item, f->ilo, f->ihi, &x, err));
        dims[i] = (int)x;
    }
    memcpy(base + f->offset, dims, sizeof dims);
    store_int(base, f->aux, (int)n);
    return TW_OK;
}

/* A window as [d, h, w]: an int for every spatial dim, or a list of dims (2 or 3) values; d = 1 in 2-D. */
static tw_status decode_window(const field *f, const json_t *v, const char *path, char *base,
                               size_t dims, tw_error *err)
{
    int w[3] = {1, 1, 1};
    int64_t x = 0;
    if (json_is_integer(v)) {
        TW_TRY(get_integer(v, path, f->ilo, f->ihi, &x, err));
        for (size_t i = 3 - dims; i < 3; i++)
            w[i] = (int)x;
    } else if (json_is_array(v) && json_array_size(v) == dims) {
        for (size_t i = 0; i < dims; i++) {
            char item[KEY_PATH];
            join_index(item, path, i);
            TW_TRY(get_integer(json_array_get(v, i), item, f->ilo, f->ihi, &x, err));
            w[3 - dims + i] = (int)x;
        }
    } else {
        char buf[64];
        return fail(err, path, "must be an integer or an array of %zu integers, got %s", dims,
                    describe(v, buf, sizeof buf));
    }
    memcpy(base + f->offset, w, sizeof w);
    return TW_OK;
}

/* The items of a list field: an array of min_n to f->max_items entries, else the error names the key. */
static tw_status list_size(const field *f, const json_t *v, const char *path, size_t min_n, const char *what,
                           size_t *n, tw_error *err)
{
    char expected[64];
    snprintf(expected, sizeof expected, "an array of %s", what);
    if (!json_is_array(v))
        return type_error(err, path, expected, v);
    *n = json_array_size(v);
    if (*n < min_n || *n > (size_t)f->max_items)
        return fail(err, path, "must have %zu to %d entries, got %zu", min_n, f->max_items, *n);
    return TW_OK;
}

/* Steps in [ilo, ihi], each greater than the one before. */
static tw_status decode_steps(const field *f, const json_t *v, const char *path, char *base, tw_error *err)
{
    size_t n = 0;
    TW_TRY(list_size(f, v, path, 0, "steps", &n, err));
    int64_t *out = (int64_t *)(void *)(base + f->offset);
    for (size_t i = 0; i < n; i++) {
        char item[KEY_PATH];
        join_index(item, path, i);
        TW_TRY(get_integer(json_array_get(v, i), item, f->ilo, f->ihi, &out[i], err));
        if (i > 0 && out[i] <= out[i - 1])
            return fail(err, item, "must be greater than the entry before it (%lld), got %lld",
                        (long long)out[i - 1], (long long)out[i]);
    }
    store_int(base, f->aux, (int)n);
    return TW_OK;
}

/* A list of min-1 items, item i decoded by `one` as a field of its own at f->offset + i * stride (numbers as
 * decode_float takes one, names as decode_string); their count stored at f->aux. */
static tw_status decode_items(const field *f, const json_t *v, const char *path, char *base, const char *what,
                              size_t stride,
                              tw_status (*one)(const field *, const json_t *, const char *, char *, tw_error *),
                              tw_error *err)
{
    size_t n = 0;
    TW_TRY(list_size(f, v, path, 1, what, &n, err));
    for (size_t i = 0; i < n; i++) {
        char item[KEY_PATH];
        field at = *f;
        at.offset = f->offset + i * stride;
        join_index(item, path, i);
        TW_TRY(one(&at, json_array_get(v, i), item, base, err));
    }
    store_int(base, f->aux, (int)n);
    return TW_OK;
}

static tw_status decode_layer(json_t *v, const char *path, tw_layer_config *l, const decoder *d)
{
    TW_TRY(decode_object(&LAYER_SCHEMA, v, path, (char *)l, d));
    if ((POOLS & BIT(l->type)) && !json_object_get(v, "strides"))
        memcpy(l->strides, l->kernel, sizeof l->strides);
    return TW_OK;
}

static tw_status decode_layers(const field *f, const json_t *v, const char *path, char *base,
                               const decoder *d)
{
    if (!json_is_array(v))
        return type_error(d->err, path, "an array of layers", v);
    size_t n = json_array_size(v);
    if (n < 1 || n > TW_MAX_LAYERS)
        return fail(d->err, path, "must have 1 to %d layers, got %zu", TW_MAX_LAYERS, n);
    tw_layer_config *layers = (tw_layer_config *)(void *)(base + f->offset);
    for (size_t i = 0; i < n; i++) {
        char item[KEY_PATH];
        join_index(item, path, i);
        TW_TRY(decode_layer(json_array_get(v, i), item, &layers[i], d));
    }
    store_int(base, f->aux, (int)n);
    return TW_OK;
}

static tw_status decode_value(const field *f, json_t *v, const char *path, char *base, int variant,
                              const decoder *d)
{
    int64_t i;
    switch (f->kind) {
    case K_INT:
    case K_INT64:
    case K_UINT64:
        TW_TRY(get_integer(v, path, f->ilo, f->ihi, &i, d->err));
        store_integer(f, base, i);
        return TW_OK;
    case K_FLOAT: return decode_float(f, v, path, base, d->err);
    case K_BOOL:
        if (!json_is_boolean(v))
            return type_error(d->err, path, "true or false", v);
        store_int(base, f->offset, json_is_true(v));
        return TW_OK;
    case K_ENUM: return decode_enum(f, v, path, base, d->err);
    case K_STRING: return decode_string(f, v, path, base, d->err);
    case K_PATH: return decode_path(f, v, path, base, d);
    case K_SHAPE: return decode_shape(f, v, path, base, d->err);
    case K_WINDOW: return decode_window(f, v, path, base, is_3d(variant) ? 3 : 2, d->err);
    case K_OBJECT: return decode_object(f->sub, v, path, base + f->offset, d);
    case K_LAYERS: return decode_layers(f, v, path, base, d);
    case K_STEPS: return decode_steps(f, v, path, base, d->err);
    case K_FLOATS: return decode_items(f, v, path, base, "numbers", sizeof(float), decode_float, d->err);
    case K_NAMES: return decode_items(f, v, path, base, "names", TW_NAME_BYTES, decode_string, d->err);
    }
    return fail(d->err, path, "internal: unknown field kind");
}

/* Decodes obj's value of f, if any: absent is an error only for F_REQUIRED, null is absent for
 * F_NULLABLE. */
static tw_status decode_member(const field *f, json_t *obj, const char *path, char *base,
                               int variant, const field *vf, const decoder *d)
{
    char child[KEY_PATH];
    join_key(child, path, f->key);
    json_t *v = json_object_get(obj, f->key);
    if (!v && !(f->flags & F_REQUIRED))
        return TW_OK;
    if (!v && f->variants && vf)
        return fail(d->err, child, "is required for type '%s'", enum_name(vf, variant));
    if (!v)
        return fail(d->err, child, "is required");
    if (json_is_null(v) && (f->flags & F_NULLABLE))
        return TW_OK;
    return decode_value(f, v, child, base, variant, d);
}

/* Every key of obj must be one of s's keys; an unknown one gets a suggestion. */
static tw_status check_known_keys(const schema *s, json_t *obj, const char *path, tw_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach (obj, key, v) {
        choices c = {.n = 0};
        int known = 0;
        for (int i = 0; i < s->n && !known; i++) {
            known = strcmp(key, s->fields[i].key) == 0;
            choices_add(&c, s->fields[i].key);
        }
        if (!known) {
            char child[KEY_PATH], hint[300];
            join_key(child, path, key);
            suggest(&c, key, hint, sizeof hint);
            return fail(err, child, "unknown key %s", hint);
        }
    }
    return TW_OK;
}

/* Every key of obj must be used by the object's variant (its "type"). */
static tw_status check_variant_keys(const schema *s, json_t *obj, const char *path, const field *vf,
                                    int variant, tw_error *err)
{
    for (int i = 0; i < s->n; i++) {
        const field *f = &s->fields[i];
        if (!applies(f, variant) && json_object_get(obj, f->key)) {
            char child[KEY_PATH];
            join_key(child, path, f->key);
            return fail(err, child, "is not used by type '%s'", enum_name(vf, variant));
        }
    }
    return TW_OK;
}

static tw_status decode_object(const schema *s, json_t *obj, const char *path, char *base,
                               const decoder *d)
{
    if (!json_is_object(obj))
        return type_error(d->err, path, "an object", obj);
    TW_TRY(check_known_keys(s, obj, path, d->err));
    const field *vf = variant_field(s);
    int variant = 0;
    if (vf) {
        TW_TRY(decode_member(vf, obj, path, base, 0, NULL, d));
        variant = load_int(base, vf->offset);
        TW_TRY(check_variant_keys(s, obj, path, vf, variant, d->err));
    }
    for (int i = 0; i < s->n; i++) {
        const field *f = &s->fields[i];
        if (f != vf && applies(f, variant))
            TW_TRY(decode_member(f, obj, path, base, variant, vf, d));
    }
    return TW_OK;
}

/* Gives unnamed layers with variables their default names; every name must be unique. */
static tw_status name_layers(tw_config *c, tw_error *err)
{
    int k = 0;
    for (int i = 0; i < c->n_layers; i++) {
        tw_layer_config *l = &c->layers[i];
        int given = l->name[0] != '\0';
        k += (WEIGHTED & BIT(l->type)) != 0;
        if (!given)
            default_layer_name(l, i, k, l->name, sizeof l->name);
        if (strcmp(l->name, TW_MODEL_INPUT) == 0) {
            char path[KEY_PATH];
            snprintf(path, sizeof path, "model.layers[%d].name", i);
            return fail(err, path, "'%s' names the model's input in \"inputs\": choose another", TW_MODEL_INPUT);
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(l->name, c->layers[j].name) == 0) {
                char path[KEY_PATH];
                snprintf(path, sizeof path, "model.layers[%d].name", i);
                return fail(err, path, "%s'%s' is already the name of model.layers[%d]",
                            given ? "" : "the default name ", l->name, j);
            }
        }
    }
    return TW_OK;
}

/* What one key's range cannot say: a piecewise schedule has one factor per piece (one more than its
 * boundaries); label smoothing needs classes. */
static tw_status check_across_keys(const tw_config *c, tw_error *err)
{
    if (c->lr_decay == TW_DECAY_PIECEWISE && c->n_factors != c->n_boundaries + 1)
        return fail(err, "lr_decay.factors", "must have one entry more than lr_decay.boundaries (%d), got %d",
                    c->n_boundaries, c->n_factors);
    if (tw_augment_any(&c->augment) && c->rank != 2 && c->rank != 3)
        return fail(err, "dataset.augment", "needs images: dataset.shape [h, w] or [h, w, c], not a flat "
                    "input or a volume");
    int channels = c->shape[c->rank > 0 ? c->rank - 1 : 0];
    const int norm[2] = {c->n_norm_mean, c->n_norm_std};
    for (int k = 0; k < 2; k++)
        if (norm[k] > 1 && norm[k] != channels)
            return fail(err, k ? "dataset.normalize.std" : "dataset.normalize.mean",
                        "must have 1 entry or one per channel (the shape's last axis: %d), got %d", channels, norm[k]);
    if (c->label_smoothing > 0 && c->loss != TW_LOSS_SOFTMAX_XENT)
        return fail(err, "label_smoothing", "needs the loss softmax_cross_entropy, not %s", LOSSES[c->loss]);
    return TW_OK;
}

/* Layer i's inputs name the model's input or layers before it; add and concat read 2 or more, the
 * others at most one. */
static tw_status check_layer_inputs(const tw_config *c, int i, tw_error *err)
{
    const tw_layer_config *l = &c->layers[i];
    char path[KEY_PATH];
    snprintf(path, sizeof path, "model.layers[%d].inputs", i);
    int joins = l->type == TW_LAYER_ADD || l->type == TW_LAYER_CONCAT;
    if (joins && l->n_inputs < 2)
        return fail(err, path, "%s reads 2 or more layers: name them", tw_layer_type_name(l->type));
    if (!joins && l->n_inputs > 1)
        return fail(err, path, "%s reads one layer, got %d", tw_layer_type_name(l->type), l->n_inputs);
    for (int k = 0; k < l->n_inputs; k++) {
        int found = strcmp(l->inputs[k], TW_MODEL_INPUT) == 0;
        for (int j = 0; j < i && !found; j++)
            found = strcmp(l->inputs[k], c->layers[j].name) == 0;
        if (!found) {
            char item[KEY_PATH];
            join_index(item, path, (size_t)k);
            return fail(err, item, "no layer before this one is named '%s' (or '%s', the model's input)",
                        l->inputs[k], TW_MODEL_INPUT);
        }
    }
    return TW_OK;
}

static tw_status check_inputs(const tw_config *c, tw_error *err)
{
    for (int i = 0; i < c->n_layers; i++)
        TW_TRY(check_layer_inputs(c, i, err));
    return TW_OK;
}

/* 1 when v, inside depth containers at key path `path`, nests past MAX_DEPTH (out: where, as text_scan
 * names it), else 0. */
static int too_deep(const json_t *v, int depth, const char *path, char out[KEY_PATH])
{
    if (!json_is_object(v) && !json_is_array(v))
        return 0;
    if (depth == MAX_DEPTH) {
        snprintf(out, KEY_PATH, "%s", path);
        return 1;
    }
    char here[KEY_PATH];
    const char *key;
    const json_t *e;
    size_t i;
    if (json_is_object(v))
        json_object_foreach((json_t *)v, key, e) {
            join_key(here, path, key);
            if (too_deep(e, depth + 1, here, out))
                return 1;
        }
    else
        json_array_foreach(v, i, e) {
            join_index(here, path, i);
            if (too_deep(e, depth + 1, here, out))
                return 1;
        }
    return 0;
}

tw_status tw_config_decode(const json_t *doc, const char *base_dir, tw_config *c, tw_error *err)
{
    if (!doc || !c)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "config: no document or no struct");
    char path[KEY_PATH];
    if (too_deep(doc, 0, "", path))
        return fail(err, path, "nested deeper than %d levels", MAX_DEPTH);
    tw_config_defaults(c);
    decoder d = {base_dir && base_dir[0] ? base_dir : NULL, err};
    tw_status st = decode_object(&CONFIG_SCHEMA, (json_t *)doc, "", (char *)c, &d);
    if (st == TW_OK)
        st = name_layers(c, err);
    if (st == TW_OK)
        st = check_inputs(c, err);
    if (st == TW_OK)
        st = check_across_keys(c, err);
    return st;
}

tw_status tw_config_parse(const char *json, size_t len, const char *base_dir, tw_config *c,
                          tw_error *err)
{
    if (!json || !c)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "config: no text or no struct");
    if (len > MAX_CONFIG_BYTES)
        return tw_error_set(err, TW_ERR_TOO_LARGE, NULL, -1,
                            "config: %zu bytes, more than the %d allowed", len, MAX_CONFIG_BYTES);
    char path[KEY_PATH];
    if (text_scan(json, len, path))
        return fail(err, path, "nested deeper than %d levels", MAX_DEPTH);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return syntax_error(json, len, &je, err);
    tw_status st = tw_config_decode(root, base_dir, c, err);
    json_decref(root);
    return st;
}

/* The first K_PATH key of schema s present in obj (objects and layer lists searched too): 1 and its key
 * path in out, else 0. Variants are not looked at: a path key anywhere is reported. */
static int find_path_key(const schema *s, const json_t *obj, const char *path, char out[KEY_PATH])
{
    for (int i = 0; i < s->n; i++) {
        const field *f = &s->fields[i];
        const json_t *v = json_object_get(obj, f->key);
        char here[KEY_PATH];
        join_key(here, path, f->key);
        if (v && f->kind == K_PATH) {
            memcpy(out, here, KEY_PATH);
            return 1;
        }
        if (json_is_object(v) && f->kind == K_OBJECT && find_path_key(f->sub, v, here, out))
            return 1;
        size_t k;
        const json_t *e;
        if (json_is_array(v) && f->kind == K_LAYERS)
            json_array_foreach(v, k, e) {
                char at[KEY_PATH];
                join_index(at, here, k);
                if (json_is_object(e) && find_path_key(&LAYER_SCHEMA, e, at, out))
                    return 1;
            }
    }
    return 0;
}

int tw_config_find_path_key(const struct json_t *doc, char *key, size_t size)
{
    char found[KEY_PATH];
    if (!json_is_object(doc) || !find_path_key(&CONFIG_SCHEMA, doc, "", found))
        return 0;
    snprintf(key, size, "%s", found);
    return 1;
}

/* ---- loading ------------------------------------------------------------------------------------- */

/* Reads the whole file at path into *text (caller frees), refusing more than MAX_CONFIG_BYTES. */
static tw_status read_capped(const char *path, char **text, size_t *len, tw_error *err)
{
    int fd = tw_fs_open(path, O_RDONLY, 0); /* runs/<id>/config.json: never through a symlink */
    FILE *fp = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!fp) {
        tw_status s = tw_fs_error(err, path, "cannot open config");
        if (fd >= 0)
            close(fd);
        return s;
    }
    char *buf = malloc(MAX_CONFIG_BYTES + 1);
    if (!buf) {
        fclose(fp);
        return tw_error_set(err, TW_ERR_NOMEM, path, -1, "no memory for the config text");
    }
    size_t n = fread(buf, 1, MAX_CONFIG_BYTES + 1, fp);
    tw_status st = TW_OK;
    if (ferror(fp))
        st = tw_error_errno(err, path, "cannot read config");
    else if (n > MAX_CONFIG_BYTES)
        st = tw_error_set(err, TW_ERR_TOO_LARGE, path, -1, "config: more than %d bytes",
                          MAX_CONFIG_BYTES);
    fclose(fp);
    if (st != TW_OK) {
        free(buf);
        return st;
    }
    *text = buf;
    *len = n;
    return TW_OK;
}

tw_status tw_config_load(const char *path, tw_config *c, tw_error *err)
{
    const char *slash = strrchr(path, '/');
    char dir[TW_PATH_BYTES] = "";
    if (slash && (size_t)(slash - path) >= sizeof dir)
        return tw_error_set(err, TW_ERR_INVALID, path, -1, "config path too long");
    if (slash)
        memcpy(dir, path, slash == path ? 1 : (size_t)(slash - path));
    char *text = NULL;
    size_t len = 0;
    TW_TRY(read_capped(path, &text, &len, err));
    tw_status st = tw_config_parse(text, len, dir, c, err);
    free(text);
    if (st != TW_OK && err)
        snprintf(err->file, sizeof err->file, "%s", path);
    return st;
}

/* ---- encoding ------------------------------------------------------------------------------------ */

/* The double with the fewest significant digits that rounds to x as a float: 0.1f is written 0.1. */
static double shortest(float x)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, x);
        double d = strtod(buf, NULL);
        if (fabs(d) <= FLT_MAX && (float)d == x)
            return d;
    }
    return x;
}

static json_t *encode_object(const schema *s, const char *base);

static json_t *encode_int_list(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *encode_number_list(const field *f, const char *base)
{
    int n = load_int(base, f->aux);
    json_t *a = n >= 0 && n <= f->max_items ? json_array() : NULL;
    for (int i = 0; a && i < n; i++) {
        json_t *v;
        if (f->kind == K_STEPS) {
            int64_t x;
            memcpy(&x, base + f->offset + (size_t)i * sizeof x, sizeof x);
            v = json_integer(x);
        } else {
            float x;
            memcpy(&x, base + f->offset + (size_t)i * sizeof x, sizeof x);
            v = json_real(shortest(x));
        }
        if (json_array_append_new(a, v) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *encode_names(const field *f, const char *base)
{
    int n = load_int(base, f->aux);
    json_t *a = n >= 0 && n <= f->max_items ? json_array() : NULL;
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(base + f->offset + (size_t)i * TW_NAME_BYTES)) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *encode_layers(const field *f, const char *base)
{
    int n = load_int(base, f->aux);
    json_t *a = n >= 0 && n <= TW_MAX_LAYERS ? json_array() : NULL;
    for (int i = 0; a && i < n; i++) {
        const char *layer = base + f->offset + (size_t)i * sizeof(tw_layer_config);
        if (json_array_append_new(a, encode_object(&LAYER_SCHEMA, layer)) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* The value of f in the struct at base, as JSON (new reference; NULL when it cannot be written). */
static json_t *encode_value(const field *f, const char *base, int variant)
{
    const char *p = base + f->offset;
    int64_t i64;
    uint64_t u64;
    float x;
    switch (f->kind) {
    case K_INT: return json_integer(load_int(base, f->offset));
    case K_INT64: memcpy(&i64, p, sizeof i64); return json_integer(i64);
    case K_UINT64:
        memcpy(&u64, p, sizeof u64);
        return u64 <= INT64_MAX ? json_integer((json_int_t)u64) : NULL;
    case K_FLOAT: memcpy(&x, p, sizeof x); return json_real(shortest(x));
    case K_BOOL: return json_boolean(load_int(base, f->offset));
    case K_ENUM: {
        const char *name = enum_name(f, load_int(base, f->offset));
        return name ? json_string(name) : NULL;
    }
    case K_STRING: return json_string(p);
    case K_PATH: return (!p[0] && (f->flags & F_NULLABLE)) ? json_null() : json_string(p);
    case K_SHAPE: {
        int rank = load_int(base, f->aux);
        return rank >= 0 && rank <= 4 ? encode_int_list((const int *)(const void *)p, rank) : NULL;
    }
    case K_WINDOW: {
        int dims = is_3d(variant) ? 3 : 2;
        return encode_int_list((const int *)(const void *)p + (3 - dims), dims);
    }
    case K_OBJECT:
        if ((f->flags & F_NULLABLE) && !variant_field(f->sub) && load_int(p, f->sub->fields[0].aux) == 0)
            return json_null(); /* an object of lists, absent */
        return encode_object(f->sub, p);
    case K_LAYERS: return encode_layers(f, base);
    case K_STEPS:
    case K_FLOATS: return encode_number_list(f, base);
    case K_NAMES: return encode_names(f, base);
    }
    return NULL;
}

/* The object of schema s; null when its variant has no name (no lr_decay). */
static json_t *encode_object(const schema *s, const char *base)
{
    const field *vf = variant_field(s);
    int variant = vf ? load_int(base, vf->offset) : 0;
    if (vf && !enum_name(vf, variant))
        return variant >= 0 && variant < vf->n_names ? json_null() : NULL;
    json_t *o = json_object();
    for (int i = 0; o && i < s->n; i++) {
        const field *f = &s->fields[i];
        if (f->kind == K_NAMES && load_int(base, f->aux) == 0)
            continue; /* the default: not written */
        if (applies(f, variant) && json_object_set_new(o, f->key, encode_value(f, base, variant))) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

char *tw_config_to_json(const tw_config *c)
{
    json_t *root = encode_object(&CONFIG_SCHEMA, (const char *)c);
    char *text = root ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(9))
                      : NULL;
    json_decref(root);
    return text;
}

tw_status tw_config_override_towers(tw_config *c, int towers, tw_error *err)
{
    if (towers == 0)
        return TW_OK;
    tw_config changed = *c;
    changed.towers = towers;
    char *text = tw_config_to_json(&changed);
    if (!text)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "config: cannot encode it (no memory)");
    tw_config checked;
    tw_status st = tw_config_parse(text, strlen(text), NULL, &checked, err);
    free(text);
    if (st == TW_OK)
        *c = checked;
    return st;
}

/* ---- the JSON Schema ----------------------------------------------------------------------------- */

/* The JSON Schema the tables above describe. Each kind maps to the schema that accepts exactly what its
 * decoder accepts, as far as JSON Schema can say it: a float's open end becomes the nearest float inside
 * it (what rounds into the range), a variant object ("type") one branch per variant with only its keys.
 * Not expressible, so left to the decoder (and said in the schema's description): unique layer names, a
 * string's 63 bytes (maxLength counts characters), an integer written as a real (100.0) refused, a
 * piecewise schedule's increasing boundaries and its one factor more, label smoothing with a regression loss. Every builder returns a new reference or NULL; json_pack's "o" steals and passes NULL on. */

static json_t *schema_of_object(const schema *s, const char *defaults, int paths);

static json_t *integer_schema(int64_t lo, int64_t hi)
{
    return json_pack("{s:s, s:I, s:I}", "type", "integer", "minimum", (json_int_t)lo, "maximum", (json_int_t)hi);
}

static json_t *float_schema(const field *f)
{
    float lo = (float)f->flo, hi = (float)f->fhi;
    json_t *s = json_pack("{s:s, s:f, s:f}", "type", "number", "minimum",
                          (double)((f->flags & F_LO_OPEN) ? nextafterf(lo, FLT_MAX) : lo), "maximum",
                          (double)((f->flags & F_HI_OPEN) ? nextafterf(hi, -FLT_MAX) : hi));
    if (s && (f->flags & F_LO_OPEN))
        json_object_set_new(s, "exclusiveMinimum", json_real(f->flo));
    if (s && (f->flags & F_HI_OPEN))
        json_object_set_new(s, "exclusiveMaximum", json_real(f->fhi));
    return s;
}

static json_t *string_schema(const field *f)
{
    static const char ident[] = "^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)*$";
    return json_pack("{s:s, s:i, s:i, s:s}", "type", "string", "minLength", 1, "maxLength", TW_NAME_BYTES - 1,
                     "pattern", (f->flags & F_IDENT) ? ident : "^[^\\x00-\\x1f\\x7f]*$");
}

static json_t *enum_schema(const field *f)
{
    json_t *names = json_array();
    for (int i = 0; names && i < f->n_names; i++)
        if (f->names[i] && json_array_append_new(names, json_string(f->names[i])) != 0) {
            json_decref(names);
            names = NULL;
        }
    return json_pack("{s:s, s:o}", "type", "string", "enum", names);
}

static json_t *array_schema(json_t *items, int lo, int hi)
{
    return json_pack("{s:s, s:o, s:i, s:i}", "type", "array", "items", items, "minItems", lo, "maxItems", hi);
}

/* The schema of f's value in an object of the given variant; defaults: the struct f's offset is in. */
static json_t *schema_of_value(const field *f, int variant, const char *defaults, int paths)
{
    int dims = is_3d(variant) ? 3 : 2;
    switch (f->kind) {
    case K_INT:
    case K_INT64:
    case K_UINT64: return integer_schema(f->ilo, f->ihi);
    case K_FLOAT: return float_schema(f);
    case K_BOOL: return json_pack("{s:s}", "type", "boolean");
    case K_ENUM: return enum_schema(f);
    case K_STRING: return string_schema(f);
    case K_PATH: return json_pack("{s:s, s:i, s:i}", "type", "string", "minLength", 1, "maxLength", TW_PATH_BYTES - 1);
    case K_SHAPE: return array_schema(integer_schema(f->ilo, f->ihi), 1, 4);
    case K_WINDOW:
        return json_pack("{s:[o, o]}", "anyOf", integer_schema(f->ilo, f->ihi),
                         array_schema(integer_schema(f->ilo, f->ihi), dims, dims));
    case K_OBJECT: return schema_of_object(f->sub, defaults + f->offset, paths);
    case K_LAYERS: return array_schema(schema_of_object(&LAYER_SCHEMA, defaults + f->offset, paths), 1, TW_MAX_LAYERS);
    case K_STEPS: return array_schema(integer_schema(f->ilo, f->ihi), 0, f->max_items);
    case K_FLOATS: return array_schema(float_schema(f), 1, f->max_items);
    case K_NAMES: return array_schema(string_schema(f), 1, f->max_items);
    }
    return NULL;
}

/* A key's schema with its default (scalars the decoder fills in when the key is absent). */
static json_t *schema_of_member(const field *f, int variant, const char *defaults, int paths)
{
    json_t *s = schema_of_value(f, variant, defaults, paths);
    int scalar = f->kind == K_INT || f->kind == K_INT64 || f->kind == K_UINT64 || f->kind == K_FLOAT ||
                 f->kind == K_BOOL || f->kind == K_ENUM || f->kind == K_STRING;
    json_t *def = s && scalar && !(f->flags & F_REQUIRED) ? encode_value(f, defaults, variant) : NULL;
    if (def && !(json_is_string(def) && !json_string_length(def)))
        json_object_set(s, "default", def);
    json_decref(def);
    return s && (f->flags & F_NULLABLE) ? json_pack("{s:[{s:s}, o]}", "anyOf", "type", "null", s) : s;
}

/* The object of schema s for one variant (vf: its "type" key, or NULL): only the keys that variant takes;
 * "type" is required unless the variant is the default one (def). */
static json_t *schema_of_variant(const schema *s, const field *vf, int variant, int def, const char *defaults,
                                 int paths)
{
    json_t *props = json_object(), *required = json_array();
    int ok = props && required;
    for (int i = 0; ok && i < s->n; i++) {
        const field *f = &s->fields[i];
        if (!applies(f, variant) || (f->kind == K_PATH && !paths))
            continue;
        json_t *v = f == vf ? json_pack("{s:s}", "const", enum_name(vf, variant))
                            : schema_of_member(f, variant, defaults, paths);
        ok = json_object_set_new(props, f->key, v) == 0;
        if (ok && ((f->flags & F_REQUIRED) || (f == vf && variant != def)))
            ok = json_array_append_new(required, json_string(f->key)) == 0;
    }
    if (!ok) {
        json_decref(props);
        json_decref(required);
        return NULL;
    }
    return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", required,
                     "additionalProperties", 0);
}

/* defaults: tw_config_defaults' struct of this object (its "type" default picks the branch that may omit
 * "type", and its values are the keys' defaults). */
static json_t *schema_of_object(const schema *s, const char *defaults, int paths)
{
    const field *vf = variant_field(s);
    if (!vf)
        return schema_of_variant(s, NULL, 0, 0, defaults, paths);
    json_t *branches = json_array();
    int def = load_int(defaults, vf->offset);
    for (int v = 0; branches && v < vf->n_names; v++)
        if (enum_name(vf, v) &&
            json_array_append_new(branches, schema_of_variant(s, vf, v, def, defaults, paths)) != 0) {
            json_decref(branches);
            branches = NULL;
        }
    return json_pack("{s:s, s:o}", "type", "object", "oneOf", branches);
}

json_t *tw_config_json_schema(int paths)
{
    static __thread tw_config defaults; /* large: off the stack */
    tw_config_defaults(&defaults);
    json_t *s = schema_of_object(&CONFIG_SCHEMA, (const char *)&defaults, paths);
    if (s)
        json_object_set_new(s, "$schema", json_string("https://json-schema.org/draft/2020-12/schema"));
    if (s)
        json_object_set_new(s, "description",
                            json_string("A Tower run config. Beyond this schema the decoder refuses an integer "
                                        "written as a real (100.0; JSON Schema counts it an integer), a string "
                                        "over 63 bytes of UTF-8, two layers of one name, lr_decay.boundaries "
                                        "that do not increase, and lr_decay.factors without exactly one entry "
                                        "more than lr_decay.boundaries."));
    return s;
}
