/* export_onnx.c — a trained model as an ONNX inference graph (IR 8, opset 13). See export.h.
 *
 * The mapping (docs/formats.md §7.4). Tower's activations are channels-last (NHWC, NDHWC) and its conv
 * weights TF's [kd?, kh, kw, in, filters]; ONNX's Conv and MaxPool are channels-first with weights [out, in,
 * kd?, kh, kw]. So the weights are transposed here, once, and the activations cross with Transpose nodes:
 * into channels-first before the first window layer, back into channels-last before a Flatten, so that
 * Flatten (axis 1) lists the values in Tower's order and the dense weights [in, units] apply as they are
 * (Gemm, no transpose). Padding is explicit (pads = before, after per spatial axis) from the window Tower
 * resolved (TensorFlow's SAME: the odd one after; VALID: none); a max pool ignores its padding as TF's does.
 * Dropout is the identity at inference and leaves no node. A dataset.shape of rank 2 ([h, w]) is reshaped
 * to [N, h, w, 1] before a window layer. The input is multiplied by dataset.scale first
 * (TW_ONNX_INPUT_RAW), so the graph takes the stored pixel values as the trainer reads them. A classifier
 * gives "logits" and "probabilities" (Softmax over axis 1); a regression model "predictions".
 *
 * Every message, string and transposed weight lives in a per-export arena (a list of blocks freed
 * together), as in eventlog/graph.c: protobuf-c only reads the structs when packing. */
#include "export.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

enum { MAX_NODES = 1024, MAX_INITS = 512, MAX_ATTRS = 4, IR_VERSION = 8, OPSET = 13 };
enum { FLAT, CL, CF }; /* the layout of the current tensor: [N, values], channels-last, channels-first */

typedef struct block {
    struct block *next;
    max_align_t data[];
} block;

typedef struct {
    block *blocks;
    int failed;     /* an allocation failed: checked once, before packing */
    Twonnx__NodeProto *nodes[MAX_NODES];
    size_t n_nodes;
    Twonnx__TensorProto *inits[MAX_INITS];
    size_t n_inits;
    int names;      /* the counter behind fresh names */
    /* the current tensor */
    const char *cur;
    int layout, rank; /* rank with the batch axis */
} gb;

/* A tensor of the graph: its name, layout and rank (with the batch axis). */
typedef struct {
    const char *name;
    int layout, rank;
} tensor;

static void *arena(gb *g, size_t size)
{
    block *b = calloc(1, sizeof *b + size);
    if (!b) {
        g->failed = 1;
        return NULL;
    }
    b->next = g->blocks;
    g->blocks = b;
    return b->data;
}

static char *str(gb *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *str(gb *g, const char *fmt, ...)
{
    char tmp[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    char *s = arena(g, strlen(tmp) + 1);
    return s ? strcpy(s, tmp) : (char *)"";
}

/* ---- nodes and initializers ---- */

/* A node op(inputs) -> out, appended to the graph; NULL (and failed) when out of room. */
static Twonnx__NodeProto *node(gb *g, const char *op, const char *name, int n_in, const char *const *in,
                               const char *out)
{
    Twonnx__NodeProto *n = arena(g, sizeof *n);
    char **ins = arena(g, (size_t)n_in * sizeof *ins + 1), **outs = arena(g, sizeof *outs);
    Twonnx__AttributeProto **attrs = arena(g, MAX_ATTRS * sizeof *attrs);
    if (!n || !ins || !outs || !attrs || g->n_nodes == MAX_NODES) {
        g->failed = 1;
        return NULL;
    }
    twonnx__node_proto__init(n);
    for (int i = 0; i < n_in; i++)
        ins[i] = (char *)in[i];
    outs[0] = (char *)out;
    n->n_input = (size_t)n_in;
    n->input = ins;
    n->n_output = 1;
    n->output = outs;
    n->op_type = (char *)op;
    n->name = (char *)name;
    n->attribute = attrs;
    g->nodes[g->n_nodes++] = n;
    return n;
}

/* Appends op(cur, extra...) producing a fresh tensor, which becomes the current one. */
static Twonnx__NodeProto *step(gb *g, const char *op, const char *name, int n_extra, const char *const *extra)
{
    const char *in[3] = {g->cur, n_extra > 0 ? extra[0] : NULL, n_extra > 1 ? extra[1] : NULL};
    const char *out = str(g, "%s_out%d", name, g->names++);
    Twonnx__NodeProto *n = node(g, op, name, 1 + n_extra, in, out);
    g->cur = out;
    return n;
}

static Twonnx__AttributeProto *attr(gb *g, Twonnx__NodeProto *n, const char *name,
                                    Twonnx__AttributeProto__AttributeType type)
{
    Twonnx__AttributeProto *a = n ? arena(g, sizeof *a) : NULL;
    if (!a || n->n_attribute == MAX_ATTRS) {
        g->failed = 1;
        return NULL;
    }
    twonnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void attr_int(gb *g, Twonnx__NodeProto *n, const char *name, int64_t v)
{
    Twonnx__AttributeProto *a = attr(g, n, name, TWONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) {
        a->has_i = 1;
        a->i = v;
    }
}

static void attr_ints(gb *g, Twonnx__NodeProto *n, const char *name, const int64_t *v, size_t count)
{
    Twonnx__AttributeProto *a = attr(g, n, name, TWONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *copy = arena(g, count * sizeof *copy);
    if (a && copy) {
        a->n_ints = count;
        a->ints = memcpy(copy, v, count * sizeof *copy);
    }
}

/* An initializer: rank dims, bytes of raw little-endian data (borrowed: it outlives the packing). */
static const char *init(gb *g, const char *name, int32_t type, int rank, const int64_t *dims, const void *data,
                        size_t bytes)
{
    Twonnx__TensorProto *t = arena(g, sizeof *t);
    int64_t *d = arena(g, (size_t)rank * sizeof *d + 1);
    if (!t || !d || g->n_inits == MAX_INITS) {
        g->failed = 1;
        return name;
    }
    twonnx__tensor_proto__init(t);
    t->name = (char *)name;
    t->n_dims = (size_t)rank;
    t->dims = rank ? memcpy(d, dims, (size_t)rank * sizeof *d) : d;
    t->has_data_type = 1;
    t->data_type = type;
    t->has_raw_data = 1;
    t->raw_data = (ProtobufCBinaryData){bytes, (uint8_t *)data};
    g->inits[g->n_inits++] = t;
    return name;
}

static const char *init_floats(gb *g, const char *name, int rank, const int64_t *dims, const float *data)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    return init(g, name, TWONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, rank, dims, data, n * sizeof(float));
}

static const char *init_int64s(gb *g, const char *name, size_t n, const int64_t *values)
{
    int64_t *copy = arena(g, n * sizeof *copy);
    int64_t dims[1] = {(int64_t)n};
    if (!copy)
        return name;
    memcpy(copy, values, n * sizeof *copy);
    return init(g, name, TWONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims, copy, n * sizeof *copy);
}

/* ---- layouts ---- */

static void transpose(gb *g, const char *name, const int64_t *perm, int rank)
{
    attr_ints(g, step(g, "Transpose", name, 0, NULL), "perm", perm, (size_t)rank);
}

/* The current tensor into channels-last. */
static void to_cl(gb *g, const char *layer)
{
    static const int64_t P4[] = {0, 2, 3, 1}, P5[] = {0, 2, 3, 4, 1};
    if (g->layout != CF)
        return;
    transpose(g, str(g, "%s/to_channels_last", layer), g->rank == 4 ? P4 : P5, g->rank);
    g->layout = CL;
}

/* The current tensor into channels-first with sp spatial axes, shaped as the layer's input in[d, h, w, c]. */
static void to_cf(gb *g, const char *layer, int sp, const int in[4])
{
    static const int64_t P4[] = {0, 3, 1, 2}, P5[] = {0, 4, 1, 2, 3};
    if (g->layout == CF && g->rank == sp + 2)
        return;
    to_cl(g, layer);
    if (g->rank != sp + 2) {
        int64_t dims[5] = {-1}, k = 1;
        if (sp == 3)
            dims[k++] = in[0];
        dims[k++] = in[1];
        dims[k++] = in[2];
        dims[k++] = in[3];
        const char *shape = init_int64s(g, str(g, "%s/input_shape", layer), (size_t)k, dims);
        step(g, "Reshape", str(g, "%s/reshape", layer), 1, &shape);
        g->rank = sp + 2;
    }
    transpose(g, str(g, "%s/to_channels_first", layer), sp == 2 ? P4 : P5, sp + 2);
    g->layout = CF;
}

/* ---- layers ---- */

static void activation(gb *g, const char *layer, tw_activation a)
{
    static const char *const OPS[] = {[TW_ACT_RELU] = "Relu", [TW_ACT_TANH] = "Tanh", [TW_ACT_SIGMOID] = "Sigmoid"};
    if (a != TW_ACT_NONE)
        step(g, OPS[a], str(g, "%s/%s", layer, OPS[a]), 0, NULL);
}

/* kernel_shape, strides and pads (before..., after...) of a window with sp spatial axes. */
static void window_attrs(gb *g, Twonnx__NodeProto *n, const tw_window *w, int sp)
{
    const int k[3] = {w->k_d, w->k_h, w->k_w}, s[3] = {w->s_d, w->s_h, w->s_w};
    const int in[3] = {w->in_d, w->in_h, w->in_w}, out[3] = {w->out_d, w->out_h, w->out_w};
    const int pad[3] = {w->pad_d, w->pad_h, w->pad_w};
    int64_t ks[3], ss[3], pads[6];
    for (int i = 3 - sp, j = 0; i < 3; i++, j++) {
        int64_t after = (int64_t)(out[i] - 1) * s[i] + k[i] - in[i] - pad[i];
        ks[j] = k[i];
        ss[j] = s[i];
        pads[j] = pad[i];
        pads[sp + j] = after > 0 ? after : 0;
    }
    attr_ints(g, n, "kernel_shape", ks, (size_t)sp);
    attr_ints(g, n, "strides", ss, (size_t)sp);
    attr_ints(g, n, "pads", pads, 2 * (size_t)sp);
}

/* TF's conv weights [kd?, kh, kw, in, out] as ONNX's [out, in, kd?, kh, kw], in the arena. */
static const float *conv_weights(gb *g, const tw_param *p, const float *w, int64_t dims[5])
{
    const int r = p->rank;
    const int64_t ic = p->shape[r - 2], oc = p->shape[r - 1];
    int64_t spatial = 1;
    dims[0] = oc;
    dims[1] = ic;
    for (int i = 0; i < r - 2; i++) {
        dims[2 + i] = p->shape[i];
        spatial *= p->shape[i];
    }
    float *t = arena(g, p->count * sizeof *t + 1);
    if (!t)
        return w;
    for (int64_t k = 0; k < spatial; k++)
        for (int64_t i = 0; i < ic; i++)
            for (int64_t o = 0; o < oc; o++)
                t[(o * ic + i) * spatial + k] = w[(k * ic + i) * oc + o];
    return t;
}

static void conv(gb *g, const tw_model *m, const float *params, const tw_layer_plan *l, const char *name, int sp)
{
    const tw_param *w = tw_model_param(m, (size_t)l->w_param), *b = tw_model_param(m, (size_t)l->b_param);
    int64_t dims[5];
    to_cf(g, name, sp, l->in);
    const float *weights = conv_weights(g, w, params + w->offset, dims);
    const char *extra[2] = {init_floats(g, w->name, w->rank, dims, weights),
                            init_floats(g, b->name, 1, b->shape, params + b->offset)};
    Twonnx__NodeProto *n = step(g, "Conv", str(g, "%s/Conv", name), 2, extra);
    window_attrs(g, n, &l->win, sp);
    activation(g, name, l->cfg->activation);
}

static void max_pool(gb *g, const tw_layer_plan *l, const char *name, int sp)
{
    to_cf(g, name, sp, l->in);
    window_attrs(g, step(g, "MaxPool", str(g, "%s/MaxPool", name), 0, NULL), &l->win, sp);
}

/* BatchNormalization over axis 1: an image channels-first, a flat input as it is; the moving statistics as
 * the export's weights hold them (always the raw ones, as TensorFlow's EMA model keeps them). */
static void batch_norm(gb *g, const tw_model *m, const float *params, const tw_layer_plan *l, const char *name,
                       int sp)
{
    if (!l->flat_in)
        to_cf(g, name, sp, l->in);
    const char *extra[4];
    int ps[4] = {l->w_param, l->b_param, l->s_param, l->s_param + 1};
    for (int k = 0; k < 4; k++) {
        const tw_param *p = tw_model_param(m, (size_t)ps[k]);
        extra[k] = init_floats(g, p->name, 1, p->shape, params + p->offset);
    }
    const char *in[5] = {g->cur, extra[0], extra[1], extra[2], extra[3]};
    const char *out = str(g, "%s/BatchNorm_out%d", name, g->names++);
    Twonnx__NodeProto *n = node(g, "BatchNormalization", str(g, "%s/BatchNormalization", name), 5, in, out);
    Twonnx__AttributeProto *a = attr(g, n, "epsilon", TWONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) {
        a->has_f = 1;
        a->f = l->cfg->epsilon;
    }
    g->cur = out;
    activation(g, name, l->cfg->activation);
}

static void avg_pool(gb *g, const tw_layer_plan *l, const char *name, int sp)
{
    to_cf(g, name, sp, l->in);
    Twonnx__NodeProto *n = step(g, "AveragePool", str(g, "%s/AveragePool", name), 0, NULL);
    window_attrs(g, n, &l->win, sp);
    attr_int(g, n, "count_include_pad", 0);
}

/* The mean over every position: GlobalAveragePool, then [N, C, 1...] flattened to Tower's [N, C]. */
static void global_avg_pool(gb *g, const tw_layer_plan *l, const char *name)
{
    int sp = l->in[0] > 1 ? 3 : 2;
    to_cf(g, name, sp, l->in);
    step(g, "GlobalAveragePool", str(g, "%s/GlobalAveragePool", name), 0, NULL);
    attr_int(g, step(g, "Flatten", str(g, "%s/Flatten", name), 0, NULL), "axis", 1);
    g->layout = FLAT;
    g->rank = 2;
}

/* add or concat: every input channels-last (or flat), then Add after Add, or Concat on the last axis. */
static void join(gb *g, const tensor *ins, const tw_layer_plan *l, const char *name)
{
    const char *names[TW_MAX_INPUTS] = {0};
    for (int k = 0; k < l->n_in; k++) {
        g->cur = ins[k].name;
        g->layout = ins[k].layout;
        g->rank = ins[k].rank;
        to_cl(g, str(g, "%s/input%d", name, k));
        names[k] = g->cur;
    }
    if (l->cfg->type == TW_LAYER_CONCAT) {
        const char *out = str(g, "%s/Concat_out%d", name, g->names++);
        attr_int(g, node(g, "Concat", str(g, "%s/Concat", name), l->n_in, names, out), "axis", -1);
        g->cur = out;
        return;
    }
    g->cur = names[0];
    for (int k = 1; k < l->n_in; k++)
        step(g, "Add", str(g, "%s/Add%d", name, k), 1, &names[k]);
    activation(g, name, l->cfg->activation);
}

static void flatten(gb *g, const char *name)
{
    if (g->layout == FLAT)
        return;
    to_cl(g, name);
    attr_int(g, step(g, "Flatten", str(g, "%s/Flatten", name), 0, NULL), "axis", 1);
    g->layout = FLAT;
    g->rank = 2;
}

static void dense(gb *g, const tw_model *m, const float *params, const tw_layer_plan *l, const char *name)
{
    const tw_param *w = tw_model_param(m, (size_t)l->w_param), *b = tw_model_param(m, (size_t)l->b_param);
    const char *extra[2] = {init_floats(g, w->name, 2, w->shape, params + w->offset),
                            init_floats(g, b->name, 1, b->shape, params + b->offset)};
    step(g, "Gemm", str(g, "%s/Gemm", name), 2, extra);
    activation(g, name, l->cfg->activation);
}

static tw_status layer_nodes(gb *g, const tw_model *m, const float *params, const tw_layer_plan *lp, int i,
                             const tensor *ins, const char *name, tw_error *err);

/* Layer i, its inputs taken from outs (the model's input for -1: *input), its output into outs[i]. */
static tw_status layer(gb *g, const tw_model *m, const float *params, int i, tensor *outs, const tensor *input,
                       tw_error *err)
{
    tw_layer_plan l;
    tw_model_layer_plan(m, i, &l);
    const char *name = l.cfg->name;
    tensor ins[TW_MAX_INPUTS];
    for (int k = 0; k < l.n_in; k++)
        ins[k] = l.in_layer[k] < 0 ? *input : outs[l.in_layer[k]];
    g->cur = ins[0].name;
    g->layout = ins[0].layout;
    g->rank = ins[0].rank;
    TW_TRY(layer_nodes(g, m, params, &l, i, ins, name, err));
    outs[i] = (tensor){g->cur, g->layout, g->rank};
    return TW_OK;
}

static tw_status layer_nodes(gb *g, const tw_model *m, const float *params, const tw_layer_plan *lp, int i,
                             const tensor *ins, const char *name, tw_error *err)
{
    tw_layer_plan l = *lp;
    switch (l.cfg->type) {
    case TW_LAYER_DENSE: dense(g, m, params, &l, name); return TW_OK;
    case TW_LAYER_CONV2D: conv(g, m, params, &l, name, 2); return TW_OK;
    case TW_LAYER_CONV3D: conv(g, m, params, &l, name, 3); return TW_OK;
    case TW_LAYER_MAX_POOL2D: max_pool(g, &l, name, 2); return TW_OK;
    case TW_LAYER_MAX_POOL3D: max_pool(g, &l, name, 3); return TW_OK;
    case TW_LAYER_DROPOUT: return TW_OK; /* the identity at inference */
    case TW_LAYER_FLATTEN: flatten(g, name); return TW_OK;
    case TW_LAYER_BATCH_NORM: batch_norm(g, m, params, &l, name, l.in[0] > 1 ? 3 : 2); return TW_OK;
    case TW_LAYER_AVG_POOL2D: avg_pool(g, &l, name, 2); return TW_OK;
    case TW_LAYER_AVG_POOL3D: avg_pool(g, &l, name, 3); return TW_OK;
    case TW_LAYER_GLOBAL_AVG_POOL: global_avg_pool(g, &l, name); return TW_OK;
    case TW_LAYER_ADD:
    case TW_LAYER_CONCAT: join(g, ins, &l, name); return TW_OK;
    }
    return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "model.layers[%d]: no ONNX form for layer type %d", i,
                        (int)l.cfg->type);
}

/* ---- the graph's interface ---- */

/* A float tensor value [N, dims...] (N symbolic). */
static Twonnx__ValueInfoProto *value_info(gb *g, const char *name, int rank, const int *dims)
{
    Twonnx__ValueInfoProto *v = arena(g, sizeof *v);
    Twonnx__TypeProto *t = arena(g, sizeof *t);
    Twonnx__TypeProto__Tensor *tt = arena(g, sizeof *tt);
    Twonnx__TensorShapeProto *s = arena(g, sizeof *s);
    Twonnx__TensorShapeProto__Dimension *d = arena(g, (size_t)(rank + 1) * sizeof *d);
    Twonnx__TensorShapeProto__Dimension **dp = arena(g, (size_t)(rank + 1) * sizeof *dp);
    if (!v || !t || !tt || !s || !d || !dp)
        return NULL;
    twonnx__value_info_proto__init(v);
    twonnx__type_proto__init(t);
    twonnx__type_proto__tensor__init(tt);
    twonnx__tensor_shape_proto__init(s);
    for (int i = 0; i <= rank; i++) {
        twonnx__tensor_shape_proto__dimension__init(&d[i]);
        if (i == 0) {
            d[i].value_case = TWONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d[i].dim_param = "N";
        } else {
            d[i].value_case = TWONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d[i].dim_value = dims[i - 1];
        }
        dp[i] = &d[i];
    }
    s->n_dim = (size_t)rank + 1;
    s->dim = dp;
    tt->has_elem_type = 1;
    tt->elem_type = TWONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = s;
    t->value_case = TWONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->name = (char *)name;
    v->type = t;
    return v;
}

/* The config's "normalize": Sub of the means, Div by the deviations, each [channels] (or one value) broadcast
 * over the channels-last input's last axis, as the engine does before the first layer. */
static void normalize(gb *g, const tw_config *c)
{
    if (!c->n_norm_mean)
        return;
    int64_t nm[1] = {c->n_norm_mean}, ns[1] = {c->n_norm_std};
    const char *mean = init_floats(g, "normalize/mean", 1, nm, c->norm_mean);
    const char *std = init_floats(g, "normalize/std", 1, ns, c->norm_std);
    step(g, "Sub", "normalize/Sub", 1, &mean);
    step(g, "Div", "normalize/Div", 1, &std);
}

/* The input, the scale, every layer, and the outputs: names into outs[2] and *n_outs. */
static tw_status body(gb *g, const tw_inference *inf, tw_onnx_input input, const char **outs, size_t *n_outs,
                      tw_error *err)
{
    const tw_config *c = tw_inference_config(inf);
    const tw_model *m = tw_inference_model(inf);
    g->cur = "input";
    g->layout = c->rank == 1 ? FLAT : CL;
    g->rank = c->rank + 1;
    if (input == TW_ONNX_INPUT_RAW) {
        float *scale = arena(g, sizeof *scale);
        if (scale) {
            *scale = c->scale;
            const char *s = init(g, "scale", TWONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, scale, sizeof *scale);
            step(g, "Mul", "scale/Mul", 1, &s);
        }
    }
    normalize(g, c);
    static __thread tensor layer_outs[TW_MAX_LAYERS];
    const tensor input_tensor = {g->cur, g->layout, g->rank};
    for (int i = 0; i < tw_model_n_layers(m); i++)
        TW_TRY(layer(g, m, tw_inference_params(inf), i, layer_outs, &input_tensor, err));
    const int classify = c->loss == TW_LOSS_SOFTMAX_XENT;
    const char *last = g->cur;
    outs[0] = classify ? "logits" : "predictions";
    node(g, "Identity", outs[0], 1, &last, outs[0]);
    *n_outs = 1;
    if (classify) {
        outs[(*n_outs)++] = "probabilities";
        attr_int(g, node(g, "Softmax", "probabilities", 1, &outs[0], "probabilities"), "axis", 1);
    }
    return TW_OK;
}

/* What the graph's metadata says: the input's meaning, the step and the weights. */
static void metadata(gb *g, Twonnx__ModelProto *model, const tw_inference *inf, tw_onnx_input input)
{
    Twonnx__StringStringEntryProto **props = arena(g, 3 * sizeof *props);
    if (!props)
        return;
    const char *kv[3][2] = {
        {"tower.input", input == TW_ONNX_INPUT_RAW ? str(g, "stored values (uint8 pixels as float32), multiplied "
                                                            "by dataset.scale = %.9g in the graph",
                                                         (double)tw_inference_config(inf)->scale)
                                                   : "values as the model sees them (scaled)"},
        {"tower.step", str(g, "%lld", (long long)tw_inference_step(inf))},
        {"tower.weights", tw_inference_weights(inf) == TW_WEIGHTS_EMA ? "ema" : "raw"}};
    for (int i = 0; i < 3; i++) {
        if (!(props[i] = arena(g, sizeof *props[i])))
            return;
        twonnx__string_string_entry_proto__init(props[i]);
        props[i]->key = (char *)kv[i][0];
        props[i]->value = (char *)kv[i][1];
    }
    model->n_metadata_props = 3;
    model->metadata_props = props;
}

static tw_status pack(gb *g, const tw_inference *inf, tw_onnx_input input, uint8_t **bytes, size_t *len,
                      tw_error *err)
{
    const tw_config *c = tw_inference_config(inf);
    const char *outs[2];
    size_t n_outs;
    TW_TRY(body(g, inf, input, outs, &n_outs, err));
    int out_dims[1] = {tw_model_output_size(tw_inference_model(inf))};
    Twonnx__ValueInfoProto *in = value_info(g, "input", c->rank, c->shape), *ov[2];
    for (size_t i = 0; i < n_outs; i++)
        ov[i] = value_info(g, outs[i], 1, out_dims);
    Twonnx__ValueInfoProto **ins = arena(g, sizeof *ins), **outp = arena(g, 2 * sizeof *outp);
    Twonnx__OperatorSetIdProto opset = TWONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
    if (g->failed || !in || !ov[0] || !ov[n_outs - 1] || !ins || !outp)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory (or over %d nodes)", MAX_NODES);
    ins[0] = in;
    memcpy(outp, ov, n_outs * sizeof *outp);
    Twonnx__GraphProto graph = TWONNX__GRAPH_PROTO__INIT;
    graph.name = "tower";
    graph.n_node = g->n_nodes;
    graph.node = g->nodes;
    graph.n_initializer = g->n_inits;
    graph.initializer = g->inits;
    graph.n_input = 1;
    graph.input = ins;
    graph.n_output = n_outs;
    graph.output = outp;
    opset.domain = "";
    opset.has_version = 1;
    opset.version = OPSET;
    Twonnx__ModelProto model = TWONNX__MODEL_PROTO__INIT;
    model.has_ir_version = 1;
    model.ir_version = IR_VERSION;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = "tower";
    model.graph = &graph;
    metadata(g, &model, inf, input);
    *len = twonnx__model_proto__get_packed_size(&model);
    if (g->failed || !(*bytes = malloc(*len)))
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    twonnx__model_proto__pack(&model, *bytes);
    return TW_OK;
}

tw_status tw_export_onnx(const tw_inference *inf, tw_onnx_input input, uint8_t **bytes, size_t *len,
                         tw_error *err)
{
    *bytes = NULL;
    *len = 0;
    gb *g = calloc(1, sizeof *g);
    if (!g)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    tw_status s = pack(g, inf, input, bytes, len, err);
    while (g->blocks) {
        block *next = g->blocks->next;
        free(g->blocks);
        g->blocks = next;
    }
    free(g);
    return s;
}
