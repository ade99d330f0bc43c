/* model.c — layer plan, parameter layout, initializers, GraphDef, and replicas. See model.h.
 *
 * Shapes are tracked per example as [d, h, w, c] (spatial; 2-D images have d = 1) or [n] (flat).
 * A model is a graph in list order: each layer reads the model's input or earlier layers (its "inputs";
 * by default the layer before it), the last one is the output. Every layer has an output view and an
 * output-gradient view; flatten aliases its input's output, so it costs nothing. Backward runs the list
 * in reverse: a layer read by several others gets its gradient from each, the first of them (in backward
 * order) writing it and the others adding theirs (through one scratch buffer where an op cannot add). A convolution is the backend's direct convolution where it has one (the CPU's oneDNN), else
 * im2col + one GEMM (weights [kd, kh, kw, in_c, filters] flattened to [K, filters], K = kd*kh*kw*in_c,
 * channel fastest, as TensorFlow's HWIO layout); tw_replica_size_of counts the columns either way. */
#include "model.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

typedef struct {
    int flat;           /* 1: [n] ; 0: [d, h, w, c] */
    int d, h, w, c;
} shape;

/* Values per example, in 64 bits: a layer whose size passes INT_MAX is refused (size_check). */
static int64_t shape_size(const shape *s)
{
    return s->flat ? s->c : (int64_t)s->d * s->h * s->w * s->c;
}

typedef struct {
    const tw_layer_config *cfg;
    shape in, out;          /* in: the first input's */
    int in_size, out_size;  /* values per example */
    tw_window win;          /* conv and pool; batch filled per call */
    int k_cols;             /* conv: K */
    int out_spatial;        /* conv and pool: out_d*out_h*out_w */
    int w_param, b_param;   /* indices into params, -1 when none; batch norm: gamma, beta */
    int s_param;            /* batch norm: the moving mean, then the moving variance; else -1 */
    int n_in;
    int in_layer[TW_MAX_INPUTS];  /* the layers it reads; -1: the model's input */
    int first_edge[TW_MAX_INPUTS]; /* 1: in backward order, the first edge into that layer: it writes the
                                      layer's output gradient, later ones add to it */
    int c_at[TW_MAX_INPUTS];      /* concat: where each input's channels start in the output */
    int consumers;          /* the layers that read its output */
    int upstream_vars;      /* it, or a layer it reads (at any distance), has variables */
} layer;

struct tw_model {
    layer layers[TW_MAX_LAYERS];
    int n_layers;
    tw_param params[4 * TW_MAX_LAYERS];
    size_t n_params;
    size_t param_floats, weight_floats, trainable_floats;
    int64_t scratch_values;      /* per example: the largest gradient an edge adds to another's */
    int chain;                   /* every layer reads the one before it, and only it reads it */
    shape input;
    tw_loss_kind loss;
    float label_smoothing;       /* SOFTMAX_XENT's, the config's */
    const float *norm_mean, *norm_std; /* the config's "normalize" (borrowed), NULL: none */
    int n_norm_mean, n_norm_std;
    tw_optimizer_kind optimizer; /* which slot arenas a replica holds */
};

/* ================================ building ================================ */

static tw_status layer_error(tw_error *err, int i, const layer *l, const char *what)
{
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "model.layers[%d] (%s): %s", i,
                        tw_layer_type_name(l->cfg->type), what);
}

static tw_param *add_param(tw_model *m, const char *layer_name, const char *var, int rank,
                           const int64_t *dims, int is_weight, tw_init init)
{
    tw_param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s/%s", layer_name, var);
    p->is_state = 0;
    p->rank = rank;
    p->count = 1;
    for (int i = 0; i < rank; i++) {
        p->shape[i] = dims[i];
        p->count *= (size_t)dims[i];
    }
    p->is_weight = is_weight;
    p->init = init;
    int64_t receptive = 1;
    for (int i = 0; i + 2 < rank; i++)
        receptive *= dims[i];
    p->fan_in = rank == 1 ? (int)dims[0] : (int)(dims[rank - 2] * receptive);
    p->fan_out = rank == 1 ? (int)dims[0] : (int)(dims[rank - 1] * receptive);
    return p;
}

static tw_status plan_dense(tw_model *m, int i, layer *l, tw_error *err)
{
    if (!l->in.flat)
        return layer_error(err, i, l, "its input is not flat: add a flatten layer before it");
    int64_t w[2] = {l->in.c, l->cfg->units}, b[1] = {l->cfg->units};
    l->w_param = (int)m->n_params;
    add_param(m, l->cfg->name, "weights", 2, w, 1, l->cfg->weight_init);
    l->b_param = (int)m->n_params;
    add_param(m, l->cfg->name, "biases", 1, b, 0, l->cfg->bias_init);
    l->out = (shape){.flat = 1, .c = l->cfg->units};
    return TW_OK;
}

/* Conv and pool windows: 2-D layers need d == 1 inputs and use a depth-1 window. */
static tw_status plan_window(int i, layer *l, int three_d, int out_c, tw_error *err)
{
    if (l->in.flat)
        return layer_error(err, i, l, "its input is flat: it needs [h, w, c] or [d, h, w, c]");
    if (!three_d && l->in.d != 1)
        return layer_error(err, i, l, "its input is a volume: use the 3-D layer");
    const int *k = l->cfg->kernel, *s = l->cfg->strides;
    tw_window w = {.batch = 1, .in_d = l->in.d, .in_h = l->in.h, .in_w = l->in.w,
                   .in_c = l->in.c, .k_d = three_d ? k[0] : 1, .k_h = k[1], .k_w = k[2],
                   .s_d = three_d ? s[0] : 1, .s_h = s[1], .s_w = s[2]};
    tw_error e;
    if (tw_window_resolve(&w, l->cfg->same_padding, &e) != TW_OK)
        return layer_error(err, i, l, e.message);
    l->win = w;
    int64_t spatial = (int64_t)w.out_d * w.out_h * w.out_w;
    if (spatial > INT_MAX)
        return layer_error(err, i, l, "its output is too large (over 2^31 - 1 positions)");
    l->out_spatial = (int)spatial;
    l->out = (shape){.d = w.out_d, .h = w.out_h, .w = w.out_w, .c = out_c};
    return TW_OK;
}

static tw_status plan_conv(tw_model *m, int i, layer *l, int three_d, tw_error *err)
{
    TW_TRY(plan_window(i, l, three_d, l->cfg->filters, err));
    const tw_window *w = &l->win;
    int64_t k_cols = (int64_t)w->k_d * w->k_h * w->k_w * w->in_c;
    if (k_cols > INT_MAX)
        return layer_error(err, i, l, "its window is too large (over 2^31 - 1 values)");
    l->k_cols = (int)k_cols;
    int64_t dims[5], b[1] = {l->cfg->filters};
    int r = 0;
    if (three_d)
        dims[r++] = w->k_d;
    dims[r++] = w->k_h;
    dims[r++] = w->k_w;
    dims[r++] = w->in_c;
    dims[r++] = l->cfg->filters;
    l->w_param = (int)m->n_params;
    add_param(m, l->cfg->name, "weights", r, dims, 1, l->cfg->weight_init);
    l->b_param = (int)m->n_params;
    add_param(m, l->cfg->name, "biases", 1, b, 0, l->cfg->bias_init);
    return TW_OK;
}

/* Batch normalisation over the last axis (a flat input's values, an image's channels): gamma (ones) and
 * beta (zeros), trained; the moving mean (zeros) and variance (ones), state. Names as TF1's
 * tf.contrib.layers.batch_norm gives them: "<name>/BatchNorm/gamma" and so on. */
static tw_status plan_batch_norm(tw_model *m, layer *l)
{
    int64_t c[1] = {l->in.c};
    char scope[TW_NAME_BYTES + 16];
    snprintf(scope, sizeof scope, "%s/BatchNorm", l->cfg->name);
    l->w_param = (int)m->n_params;
    add_param(m, scope, "gamma", 1, c, 0, (tw_init){.kind = TW_INIT_CONSTANT, .value = 1.0f});
    l->b_param = (int)m->n_params;
    add_param(m, scope, "beta", 1, c, 0, (tw_init){.kind = TW_INIT_ZEROS});
    l->s_param = (int)m->n_params;
    add_param(m, scope, "moving_mean", 1, c, 0, (tw_init){.kind = TW_INIT_ZEROS})->is_state = 1;
    add_param(m, scope, "moving_variance", 1, c, 0, (tw_init){.kind = TW_INIT_CONSTANT, .value = 1.0f})->is_state = 1;
    l->out = l->in;
    return TW_OK;
}

/* The mean over every position of each channel: a VALID window as large as the input; a flat output. */
static tw_status plan_global_pool(int i, layer *l, tw_error *err)
{
    if (l->in.flat)
        return layer_error(err, i, l, "its input is flat: it needs [h, w, c] or [d, h, w, c]");
    l->win = (tw_window){.batch = 1, .in_d = l->in.d, .in_h = l->in.h, .in_w = l->in.w, .in_c = l->in.c,
                         .k_d = l->in.d, .k_h = l->in.h, .k_w = l->in.w, .s_d = 1, .s_h = 1, .s_w = 1,
                         .out_d = 1, .out_h = 1, .out_w = 1};
    l->out_spatial = 1;
    l->out = (shape){.flat = 1, .c = l->in.c};
    return TW_OK;
}

static int same_shape(const shape *a, const shape *b)
{
    return a->flat == b->flat && a->c == b->c && (a->flat || (a->d == b->d && a->h == b->h && a->w == b->w));
}

static void shape_text(const shape *s, char *out, size_t size)
{
    if (s->flat)
        snprintf(out, size, "[%d]", s->c);
    else
        snprintf(out, size, "[%d, %d, %d, %d]", s->d, s->h, s->w, s->c);
}

static const shape *input_of(const tw_model *m, const layer *l, int k)
{
    return l->in_layer[k] < 0 ? &m->input : &m->layers[l->in_layer[k]].out;
}

/* add: every input has the first one's shape; concat: the same positions, the channels (or a flat
 * input's values) side by side. */
static tw_status plan_join(const tw_model *m, int i, layer *l, tw_error *err)
{
    l->out = l->in;
    for (int k = 1; k < l->n_in; k++) {
        const shape *s = input_of(m, l, k);
        shape rest = *s;
        rest.c = l->in.c;
        int fits = l->cfg->type == TW_LAYER_ADD ? same_shape(s, &l->in) : same_shape(&rest, &l->in);
        if (!fits) {
            char a[64], b[64], what[256];
            shape_text(s, a, sizeof a);
            shape_text(&l->in, b, sizeof b);
            snprintf(what, sizeof what, "input '%s' is %s, the first input %s: %s", l->cfg->inputs[k], a, b,
                     l->cfg->type == TW_LAYER_ADD ? "add needs one shape" : "concat needs the same positions");
            return layer_error(err, i, l, what);
        }
        l->c_at[k] = l->out.c;
        if (l->cfg->type == TW_LAYER_CONCAT)
            l->out.c += s->c;
    }
    return TW_OK;
}

static tw_status plan_layer(tw_model *m, int i, layer *l, tw_error *err)
{
    l->w_param = l->b_param = l->s_param = -1;
    switch (l->cfg->type) {
    case TW_LAYER_DENSE: return plan_dense(m, i, l, err);
    case TW_LAYER_CONV2D: return plan_conv(m, i, l, 0, err);
    case TW_LAYER_CONV3D: return plan_conv(m, i, l, 1, err);
    case TW_LAYER_MAX_POOL2D:
    case TW_LAYER_AVG_POOL2D: return plan_window(i, l, 0, l->in.c, err);
    case TW_LAYER_MAX_POOL3D:
    case TW_LAYER_AVG_POOL3D: return plan_window(i, l, 1, l->in.c, err);
    case TW_LAYER_GLOBAL_AVG_POOL: return plan_global_pool(i, l, err);
    case TW_LAYER_BATCH_NORM: return plan_batch_norm(m, l);
    case TW_LAYER_ADD:
    case TW_LAYER_CONCAT: return plan_join(m, i, l, err);
    case TW_LAYER_DROPOUT: l->out = l->in; return TW_OK;
    case TW_LAYER_FLATTEN: l->out = (shape){.flat = 1, .c = (int)shape_size(&l->in)}; return TW_OK;
    }
    return layer_error(err, i, l, "unknown layer type");
}

/* The layers layer i reads, from its config's "inputs" (names the config checked: earlier layers, or
 * the model's input), or the layer before it. */
static void resolve_inputs(const tw_config *c, tw_model *m, int i, layer *l)
{
    const tw_layer_config *lc = &c->layers[i];
    l->n_in = lc->n_inputs ? lc->n_inputs : 1;
    l->in_layer[0] = i - 1;
    for (int k = 0; k < lc->n_inputs; k++) {
        l->in_layer[k] = -1;
        for (int j = 0; j < i; j++)
            if (strcmp(lc->inputs[k], c->layers[j].name) == 0)
                l->in_layer[k] = j;
    }
    l->in = *input_of(m, l, 0);
}

/* Who reads whom: consumers, the first edge into each layer in backward order, the variables upstream,
 * whether the model is a chain, and the scratch an adding edge needs. Every layer but the last must be
 * read. */
static tw_status link_layers(tw_model *m, tw_error *err)
{
    int seen[TW_MAX_LAYERS] = {0};
    m->chain = 1;
    for (int i = m->n_layers - 1; i >= 0; i--) {
        layer *l = &m->layers[i];
        for (int k = 0; k < l->n_in; k++) {
            int p = l->in_layer[k];
            m->chain &= l->n_in == 1 && p == i - 1;
            if (p < 0)
                continue;
            m->layers[p].consumers++;
            l->first_edge[k] = !seen[p];
            seen[p] = 1;
            if (!l->first_edge[k] && m->layers[p].out_size > m->scratch_values)
                m->scratch_values = m->layers[p].out_size;
        }
    }
    for (int i = 0; i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        m->chain &= l->consumers <= 1;
        if (i < m->n_layers - 1 && !l->consumers)
            return layer_error(err, i, l, "no later layer reads its output: name it in one's \"inputs\", "
                               "or remove it");
        l->upstream_vars = l->w_param >= 0;
        for (int k = 0; k < l->n_in; k++)
            l->upstream_vars |= l->in_layer[k] >= 0 && m->layers[l->in_layer[k]].upstream_vars;
    }
    return TW_OK;
}

static shape input_shape(const tw_config *c)
{
    const int *s = c->shape;
    switch (c->rank) {
    case 1: return (shape){.flat = 1, .c = s[0]};
    case 2: return (shape){.d = 1, .h = s[0], .w = s[1], .c = 1};
    case 3: return (shape){.d = 1, .h = s[0], .w = s[1], .c = s[2]};
    default: return (shape){.d = s[0], .h = s[1], .w = s[2], .c = s[3]};
    }
}

/* Weights first (L2 and weight decay cover [0, weight_floats)), then the other trainable values (biases,
 * gammas, betas), then the state (moving statistics): [0, trainable_floats) is what training updates. */
static void lay_out_params(tw_model *m)
{
    size_t off = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < m->n_params; i++) {
            const tw_param *p = &m->params[i];
            int in_pass = pass == 0 ? p->is_weight : pass == 1 ? !p->is_weight && !p->is_state : p->is_state;
            if (in_pass) {
                m->params[i].offset = off;
                off += p->count;
            }
        }
        if (pass == 0)
            m->weight_floats = off;
        else if (pass == 1)
            m->trainable_floats = off;
    }
    m->param_floats = off;
}

/* A layer's output must fit the int sizes the backends take (checked before anything uses it). */
static tw_status size_check(int i, const layer *l, tw_error *err)
{
    char what[96];
    int64_t n = shape_size(&l->out);
    if (n <= INT_MAX)
        return TW_OK;
    snprintf(what, sizeof what, "its output of %lld values per example is too large (at most %d)",
             (long long)n, INT_MAX);
    return layer_error(err, i, l, what);
}

static tw_status check_output(const tw_model *m, tw_error *err)
{
    const layer *last = &m->layers[m->n_layers - 1];
    if (!last->out.flat)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "model.layers: the last layer's output is not flat: end with dense");
    if (m->loss == TW_LOSS_SOFTMAX_XENT && last->out.c < 2)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "model.layers: softmax_cross_entropy needs at least 2 outputs (classes)");
    return TW_OK;
}

tw_status tw_model_create(const tw_config *c, tw_model **out, tw_error *err)
{
    *out = NULL;
    if (c->n_layers < 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "model.layers: no layers");
    tw_model *m = calloc(1, sizeof *m);
    if (!m)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    m->input = input_shape(c);
    m->loss = c->loss;
    m->label_smoothing = c->label_smoothing;
    if (c->n_norm_mean) {
        m->norm_mean = c->norm_mean;
        m->norm_std = c->norm_std;
        m->n_norm_mean = c->n_norm_mean;
        m->n_norm_std = c->n_norm_std;
    }
    m->optimizer = c->optimizer;
    tw_status s = shape_size(&m->input) <= INT_MAX
                      ? TW_OK
                      : tw_error_set(err, TW_ERR_INVALID, NULL, -1, "dataset.shape: %lld values per "
                                     "example is too large (at most %d)",
                                     (long long)shape_size(&m->input), INT_MAX);
    for (int i = 0; i < c->n_layers && s == TW_OK; i++) {
        layer *l = &m->layers[i];
        l->cfg = &c->layers[i];
        resolve_inputs(c, m, i, l);
        s = plan_layer(m, i, l, err);
        if (s == TW_OK)
            s = size_check(i, l, err);
        l->in_size = (int)shape_size(&l->in);
        l->out_size = (int)shape_size(&l->out);
        m->n_layers = i + 1;
    }
    if (s == TW_OK)
        s = link_layers(m, err);
    if (s == TW_OK)
        s = check_output(m, err);
    if (s != TW_OK) {
        free(m);
        return s;
    }
    lay_out_params(m);
    *out = m;
    return TW_OK;
}

void tw_model_destroy(tw_model *m) { free(m); }

size_t tw_model_param_floats(const tw_model *m) { return m->param_floats; }
size_t tw_model_weight_floats(const tw_model *m) { return m->weight_floats; }
size_t tw_model_trainable_floats(const tw_model *m) { return m->trainable_floats; }
size_t tw_model_n_params(const tw_model *m) { return m->n_params; }
const tw_param *tw_model_param(const tw_model *m, size_t i) { return &m->params[i]; }
size_t tw_model_input_size(const tw_model *m) { return (size_t)shape_size(&m->input); }
int tw_model_output_size(const tw_model *m) { return m->layers[m->n_layers - 1].out_size; }
int tw_model_n_layers(const tw_model *m) { return m->n_layers; }

static int is_conv(tw_layer_type t) { return t == TW_LAYER_CONV2D || t == TW_LAYER_CONV3D; }

int tw_model_has_conv(const tw_model *m)
{
    for (int i = 0; i < m->n_layers; i++)
        if (is_conv(m->layers[i].cfg->type))
            return 1;
    return 0;
}

static void plan_dims(const shape *s, int *flat, int dims[4])
{
    *flat = s->flat;
    dims[0] = s->flat ? 1 : s->d;
    dims[1] = s->flat ? 1 : s->h;
    dims[2] = s->flat ? 1 : s->w;
    dims[3] = s->c;
}

void tw_model_layer_plan(const tw_model *m, int i, tw_layer_plan *out)
{
    const layer *l = &m->layers[i];
    *out = (tw_layer_plan){.cfg = l->cfg, .win = l->win, .w_param = l->w_param, .b_param = l->b_param,
                           .s_param = l->s_param, .n_in = l->n_in};
    memcpy(out->in_layer, l->in_layer, sizeof out->in_layer);
    plan_dims(&l->in, &out->flat_in, out->in);
    plan_dims(&l->out, &out->flat_out, out->out);
}

/* ================================ initializers ================================ */

/* Standard normal from the counter-based stream (Box-Muller; two uniforms per draw). */
static float normal(uint64_t seed, uint64_t *counter)
{
    float u1 = tw_uniform(seed, (*counter)++), u2 = tw_uniform(seed, (*counter)++);
    if (u1 < 1e-30f)
        u1 = 1e-30f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

static void init_param(const tw_param *p, uint64_t seed, float *v)
{
    uint64_t counter = 0;
    float limit = sqrtf(6.0f / (float)(p->fan_in + p->fan_out));
    for (size_t i = 0; i < p->count; i++) {
        switch (p->init.kind) {
        case TW_INIT_TRUNCATED_NORMAL: {
            float z;
            do
                z = normal(seed, &counter);
            while (fabsf(z) >= 2.0f); /* TF redraws beyond two standard deviations */
            v[i] = p->init.stddev * z;
            break;
        }
        case TW_INIT_GLOROT_UNIFORM:
            v[i] = limit * (2.0f * tw_uniform(seed, counter++) - 1.0f);
            break;
        case TW_INIT_ZEROS: v[i] = 0.0f; break;
        case TW_INIT_CONSTANT: v[i] = p->init.value; break;
        }
    }
}

void tw_model_init_params(const tw_model *m, uint64_t seed, float *arena)
{
    for (size_t i = 0; i < m->n_params; i++)
        init_param(&m->params[i], tw_hash64(seed, 0x1000 + i), arena + m->params[i].offset);
}

/* ================================ GraphDef ================================ */

static const char *op_name(const layer *l)
{
    switch (l->cfg->type) {
    case TW_LAYER_DENSE: return "MatMul";
    case TW_LAYER_CONV2D: return "Conv2D";
    case TW_LAYER_CONV3D: return "Conv3D";
    case TW_LAYER_MAX_POOL2D: return "MaxPool";
    case TW_LAYER_MAX_POOL3D: return "MaxPool3D";
    case TW_LAYER_DROPOUT: return "Dropout";
    case TW_LAYER_FLATTEN: return "Reshape";
    case TW_LAYER_BATCH_NORM: return "FusedBatchNormV3";
    case TW_LAYER_AVG_POOL2D: return "AvgPool";
    case TW_LAYER_AVG_POOL3D: return "AvgPool3D";
    case TW_LAYER_GLOBAL_AVG_POOL: return "Mean";
    case TW_LAYER_ADD: return "AddV2";
    case TW_LAYER_CONCAT: return "ConcatV2";
    }
    return "Identity";
}

static const char *act_op(tw_activation a)
{
    switch (a) {
    case TW_ACT_RELU: return "Relu";
    case TW_ACT_TANH: return "Tanh";
    case TW_ACT_SIGMOID: return "Sigmoid";
    default: return NULL;
    }
}

enum { GRAPH_NAME = TW_PARAM_NAME_BYTES + 16 };

/* Adds name = op(inputs[n]) with dtype float. */
static tw_status node(tw_graph *g, const char *name, const char *op, const char *const *inputs, size_t n,
                      tw_error *err)
{
    tw_graph_attr t = tw_graph_attr_type("T", TW_GRAPH_DT_FLOAT);
    return tw_graph_add_node(g, name, op, inputs, n, &t, 1, err);
}

/* name = op(a) or op(a, b) (b may be NULL). */
static tw_status node2(tw_graph *g, const char *name, const char *op, const char *a, const char *b, tw_error *err)
{
    const char *inputs[2] = {a, b};
    return node(g, name, op, a ? inputs : NULL, (size_t)(a != NULL) + (b != NULL), err);
}

/* Layer i's nodes: its variables, its op on its inputs' outputs (and the variables), the bias and the
 * activation; its output node's name into outs[i]. */
static tw_status graph_layer(const tw_model *m, tw_graph *g, int i, char (*outs)[GRAPH_NAME], tw_error *err)
{
    const layer *l = &m->layers[i];
    char name[GRAPH_NAME], scope[TW_NAME_BYTES + 16];
    snprintf(scope, sizeof scope, "%s", l->cfg->name);
    int params[4] = {l->w_param, l->b_param, l->s_param, l->s_param >= 0 ? l->s_param + 1 : -1};
    const char *inputs[TW_MAX_INPUTS + 4];
    size_t n = 0;
    for (int k = 0; k < l->n_in; k++)
        inputs[n++] = l->in_layer[k] < 0 ? "input" : outs[l->in_layer[k]];
    for (int k = 0; k < 4; k++)
        if (params[k] >= 0) {
            TW_TRY(node2(g, m->params[params[k]].name, "VariableV2", NULL, NULL, err));
            if (k != 1 || l->cfg->type == TW_LAYER_BATCH_NORM)
                inputs[n++] = m->params[params[k]].name;
        }
    snprintf(name, sizeof name, "%s/%s", scope, op_name(l));
    TW_TRY(node(g, name, op_name(l), inputs, n, err));
    if (l->b_param >= 0 && l->cfg->type != TW_LAYER_BATCH_NORM) {
        char add[sizeof name];
        snprintf(add, sizeof add, "%s/BiasAdd", scope);
        TW_TRY(node2(g, add, "BiasAdd", name, m->params[l->b_param].name, err));
        snprintf(name, sizeof name, "%s", add);
    }
    const char *act = (l->w_param >= 0 || l->cfg->type == TW_LAYER_ADD) ? act_op(l->cfg->activation) : NULL;
    if (act) {
        char out[sizeof name];
        snprintf(out, sizeof out, "%s/%s", scope, act);
        TW_TRY(node2(g, out, act, name, NULL, err));
        snprintf(name, sizeof name, "%s", out);
    }
    snprintf(outs[i], GRAPH_NAME, "%s", name);
    return TW_OK;
}

static tw_status build_graph(const tw_model *m, tw_graph *g, tw_error *err)
{
    static __thread char outs[TW_MAX_LAYERS][GRAPH_NAME]; /* 7 KiB: off the stack */
    TW_TRY(node2(g, "input", "Placeholder", NULL, NULL, err));
    TW_TRY(node2(g, "labels", "Placeholder", NULL, NULL, err));
    for (int i = 0; i < m->n_layers; i++)
        TW_TRY(graph_layer(m, g, i, outs, err));
    const char *loss = m->loss == TW_LOSS_SOFTMAX_XENT ? "SparseSoftmaxCrossEntropyWithLogits"
                                                       : "SquaredDifference";
    TW_TRY(node2(g, "loss/loss", loss, outs[m->n_layers - 1], "labels", err));
    return node2(g, "loss/Mean", "Mean", "loss/loss", NULL, err);
}

tw_status tw_model_graph(const tw_model *m, uint8_t **bytes, size_t *len, tw_error *err)
{
    tw_graph *g;
    TW_TRY(tw_graph_create(&g, err));
    tw_status s = build_graph(m, g, err);
    if (s == TW_OK)
        s = tw_graph_serialize(g, bytes, len, err);
    tw_graph_destroy(g);
    return s;
}

/* ================================ replicas ================================ */

enum { ARENA_PARAMS, ARENA_GRADS, ARENA_SLOT1, ARENA_SLOT2, ARENA_EMA, N_ARENAS };

typedef struct {
    tw_tensor out, dout;      /* [batch, out_size] fp32; flatten aliases its input's output, and its output
                                 gradient too when it writes it (its first edge) */
    tw_buffer *out_buf, *dout_buf, *work; /* owned; work = conv cols [batch*out_spatial, K], max-pool argmax
                                              [batch, out_size] int32 or batch norm's statistics [2, C] */
} layer_state;

struct tw_replica {
    const tw_model *m;        /* borrowed */
    tw_backend *b;            /* borrowed */
    int batch;
    tw_buffer *arena[N_ARENAS]; /* owned, except those `shares` borrows */
    const tw_replica *shares; /* borrowed: the replica whose params, slots and EMA this one uses, or NULL */
    tw_buffer *x, *labels, *loss, *probs; /* [batch, in] ; [batch*outs] ; [batch] ; [batch, outs] */
    tw_buffer *scratch;       /* [batch * scratch_values]: a gradient that is then added (NULL: none) */
    float *host_loss;         /* [batch] host copy of loss, owned */
    float *host_x;            /* [batch, in]: a batch normalised on its way up; NULL without "normalize" */
    layer_state ls[TW_MAX_LAYERS];
};

/* The one rule for a buffer's size: floats (at least one) of 4 bytes. */
static uint64_t buffer_bytes(uint64_t floats) { return (floats ? floats : 1) * sizeof(float); }

static tw_status alloc_floats(tw_replica *r, uint64_t floats, tw_buffer **out, tw_error *err)
{
    TW_TRY(tw_backend_alloc(r->b, (size_t)buffer_bytes(floats), out, err));
    return tw_backend_zero(r->b, tw_tensor_of(*out), (*out)->bytes, err);
}

/* 1 when arena a is held: the slots only by the optimizers that use them (momentum 1, Adam 2); the
 * EMA shadows always (evaluation and checkpoints read them). */
static int arena_held(const tw_model *m, int a)
{
    if (a == ARENA_SLOT1)
        return m->optimizer != TW_OPT_SGD;
    if (a == ARENA_SLOT2)
        return m->optimizer == TW_OPT_ADAM;
    return 1;
}

/* *out = a * b * c; 0 when the product passes 2^64 (only checked sizes reach an allocation). */
static int product(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    uint64_t ab;
    return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, out);
}

/* 1 when flatten layer l keeps an output gradient of its own: it reads a layer whose gradient another
 * edge writes first, so flatten's is added to it afterwards. */
static int flatten_owns_grad(const layer *l) { return l->in_layer[0] >= 0 && !l->first_edge[0]; }

/* Layer l's buffers for `batch` rows, in floats: *bufs buffers of *act each (its output and output
 * gradient: 2; flatten: only a gradient of its own, or none) and its work buffer (*work: conv columns
 * [batch*out_spatial, K], max-pool argmax [batch, out_size] int32, batch norm's statistics [2, C], else
 * 0). 0 when they pass 2^64 or a conv's GEMM would have more than INT_MAX rows (batch*out_spatial). */
static int layer_floats(const layer *l, int batch, uint64_t *act, int *bufs, uint64_t *work)
{
    tw_layer_type t = l->cfg->type;
    int conv = is_conv(t);
    *act = (uint64_t)batch * (uint64_t)l->out_size;
    *bufs = t == TW_LAYER_FLATTEN ? flatten_owns_grad(l) : 2;
    *work = t == TW_LAYER_MAX_POOL2D || t == TW_LAYER_MAX_POOL3D ? *act
            : t == TW_LAYER_BATCH_NORM                        ? 2 * (uint64_t)l->out.c
                                                                : 0;
    return !conv || ((uint64_t)batch * (uint64_t)l->out_spatial <= INT_MAX &&
                     product((uint64_t)batch, (uint64_t)l->out_spatial, (uint64_t)l->k_cols, work));
}

/* *sum += times buffers of `floats` (none when 0); 0 when that passes 2^64 bytes. */
static int add_buffers(uint64_t *sum, uint64_t floats, int times)
{
    uint64_t bytes;
    return !floats || (floats <= UINT64_MAX / sizeof(float) / (uint64_t)times &&
                       !__builtin_mul_overflow(buffer_bytes(floats), (uint64_t)times, &bytes) &&
                       !__builtin_add_overflow(*sum, bytes, sum));
}

tw_status tw_replica_size_of(const tw_model *m, int batch, tw_replica_size *out, tw_error *err)
{
    uint64_t outs = (uint64_t)tw_model_output_size(m), rows = (uint64_t)(batch > 0 ? batch : 1);
    *out = (tw_replica_size){.arena = buffer_bytes(m->param_floats)};
    for (int a = 0; a < N_ARENAS; a++)
        out->arenas += arena_held(m, a);
    out->batch = buffer_bytes(rows * tw_model_input_size(m)) + 2 * buffer_bytes(rows * outs) +
                 buffer_bytes(rows); /* inputs, labels and probabilities, losses */
    if (!add_buffers(&out->activations, rows * (uint64_t)m->scratch_values, 1))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "model.layers: too large for this batch_size");
    for (int i = 0; i < m->n_layers; i++) {
        uint64_t act, work;
        int bufs;
        if (!layer_floats(&m->layers[i], (int)rows, &act, &bufs, &work) ||
            (bufs && !add_buffers(&out->activations, act, bufs)) || !add_buffers(&out->activations, work, 1) ||
            (m->layers[i].k_cols && !add_buffers(&out->columns, work, 1)))
            return layer_error(err, i, &m->layers[i], "too large for this batch_size (over 2^31 - 1 "
                               "GEMM rows, or over 2^64 bytes)");
    }
    return TW_OK;
}

/* 1 when r holds arena a itself (not borrowed from the replica it shares with). */
static int arena_owned(const tw_replica *r, int a) { return !r->shares || a == ARENA_GRADS; }

uint64_t tw_replica_bytes(const tw_replica *r)
{
    uint64_t sum = 0;
    for (int a = 0; a < N_ARENAS; a++)
        sum += r->arena[a] && arena_owned(r, a) ? r->arena[a]->bytes : 0;
    const tw_buffer *bufs[5] = {r->x, r->labels, r->loss, r->probs, r->scratch};
    for (int i = 0; i < 5; i++)
        sum += bufs[i] ? bufs[i]->bytes : 0;
    for (int i = 0; i < r->m->n_layers; i++) {
        const layer_state *s = &r->ls[i];
        sum += (s->out_buf ? s->out_buf->bytes : 0) + (s->dout_buf ? s->dout_buf->bytes : 0) +
               (s->work ? s->work->bytes : 0);
    }
    return sum;
}

/* Flatten's views: its input's output; its gradient its own, its input's (the first edge), or none (the
 * model's input). */
static tw_status alloc_flatten(tw_replica *r, const layer *l, layer_state *s, uint64_t act, tw_error *err)
{
    int p = l->in_layer[0];
    s->out = p >= 0 ? r->ls[p].out : tw_tensor_of(r->x);
    if (flatten_owns_grad(l)) {
        TW_TRY(alloc_floats(r, act, &s->dout_buf, err));
        s->dout = tw_tensor_of(s->dout_buf);
    } else {
        s->dout = p >= 0 ? r->ls[p].dout : (tw_tensor){0};
    }
    return TW_OK;
}

static tw_status alloc_layer(tw_replica *r, int i, tw_error *err)
{
    const layer *l = &r->m->layers[i];
    layer_state *s = &r->ls[i];
    uint64_t act, work;
    int bufs;
    (void)layer_floats(l, r->batch, &act, &bufs, &work); /* checked by tw_replica_size_of */
    if (l->cfg->type == TW_LAYER_FLATTEN)
        return alloc_flatten(r, l, s, act, err);
    TW_TRY(alloc_floats(r, act, &s->out_buf, err));
    TW_TRY(alloc_floats(r, act, &s->dout_buf, err));
    s->out = tw_tensor_of(s->out_buf);
    s->dout = tw_tensor_of(s->dout_buf);
    if (l->k_cols && tw_backend_has_conv(r->b))
        return TW_OK; /* a direct convolution needs no columns */
    return work ? alloc_floats(r, work, &s->work, err) : TW_OK; /* int32 argmax: same byte size */
}

static tw_status replica_alloc(tw_replica *r, tw_error *err)
{
    const tw_model *m = r->m;
    tw_replica_size size;
    TW_TRY(tw_replica_size_of(m, r->batch, &size, err));
    uint64_t outs = (uint64_t)tw_model_output_size(m), rows = (uint64_t)r->batch;
    for (int a = 0; a < N_ARENAS; a++)
        if (arena_held(m, a) && !arena_owned(r, a))
            r->arena[a] = r->shares->arena[a];
        else if (arena_held(m, a))
            TW_TRY(alloc_floats(r, m->param_floats, &r->arena[a], err));
    TW_TRY(alloc_floats(r, rows * tw_model_input_size(m), &r->x, err));
    TW_TRY(alloc_floats(r, rows * outs, &r->labels, err));
    TW_TRY(alloc_floats(r, rows, &r->loss, err));
    TW_TRY(alloc_floats(r, rows * outs, &r->probs, err));
    if (m->scratch_values)
        TW_TRY(alloc_floats(r, rows * (uint64_t)m->scratch_values, &r->scratch, err));
    for (int i = 0; i < m->n_layers; i++)
        TW_TRY(alloc_layer(r, i, err));
    return TW_OK;
}

tw_status tw_replica_create(const tw_model *m, tw_backend *b, int batch, tw_replica **out,
                            tw_error *err)
{
    return tw_replica_create_sharing(m, b, batch, NULL, out, err);
}

tw_status tw_replica_create_sharing(const tw_model *m, tw_backend *b, int batch, const tw_replica *shares,
                                    tw_replica **out, tw_error *err)
{
    *out = NULL;
    if (shares && shares->m != m)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "a replica shares arenas only with a replica "
                            "of the same model");
    tw_replica *r = calloc(1, sizeof *r);
    if (!r)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    r->m = m;
    r->b = b;
    r->batch = batch;
    r->shares = shares;
    int norm = m->norm_mean != NULL;
    tw_status s = (r->host_loss = malloc((size_t)batch * sizeof(float))) &&
                          (!norm || (r->host_x = malloc((size_t)batch * tw_model_input_size(m) * sizeof(float))))
                      ? replica_alloc(r, err)
                      : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    if (s != TW_OK) {
        tw_replica_destroy(r);
        return s;
    }
    *out = r;
    return TW_OK;
}

void tw_replica_destroy(tw_replica *r)
{
    if (!r)
        return;
    for (int i = 0; i < TW_MAX_LAYERS; i++) {
        tw_backend_free(r->b, r->ls[i].out_buf);
        tw_backend_free(r->b, r->ls[i].dout_buf);
        tw_backend_free(r->b, r->ls[i].work);
    }
    for (int a = 0; a < N_ARENAS; a++)
        if (arena_owned(r, a))
            tw_backend_free(r->b, r->arena[a]);
    tw_backend_free(r->b, r->x);
    tw_backend_free(r->b, r->labels);
    tw_backend_free(r->b, r->loss);
    tw_backend_free(r->b, r->probs);
    tw_backend_free(r->b, r->scratch);
    free(r->host_loss);
    free(r->host_x);
    free(r);
}

tw_tensor tw_replica_params(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_PARAMS]); }
tw_tensor tw_replica_grads(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_GRADS]); }
tw_tensor tw_replica_slot1(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_SLOT1]); }
tw_tensor tw_replica_slot2(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_SLOT2]); }
tw_tensor tw_replica_ema(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_EMA]); }

/* x [rows, in] with every value v of channel k (the input's last axis) as (v - mean[k]) / std[k], into
 * out; returns out. */
static const float *normalized(const tw_model *m, int rows, const float *x, float *out)
{
    size_t n = (size_t)rows * tw_model_input_size(m), c = (size_t)m->input.c;
    for (size_t i = 0; i < n; i++) {
        size_t k = i % c;
        out[i] = (x[i] - m->norm_mean[m->n_norm_mean > 1 ? k : 0]) / m->norm_std[m->n_norm_std > 1 ? k : 0];
    }
    return out;
}

tw_status tw_replica_upload_batch(tw_replica *r, int rows, const float *x, const void *labels,
                                  tw_error *err)
{
    if (rows < 1 || rows > r->batch)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "batch of %d rows, replica holds %d",
                            rows, r->batch);
    size_t in = tw_model_input_size(r->m), outs = (size_t)tw_model_output_size(r->m);
    size_t label_values = r->m->loss == TW_LOSS_SOFTMAX_XENT ? 1 : outs;
    if (r->host_x)
        x = normalized(r->m, rows, x, r->host_x);
    TW_TRY(tw_backend_upload(r->b, tw_tensor_of(r->x), x, (size_t)rows * in * sizeof(float), err));
    if (!labels) /* inference: the loss the forward computes is not read; class 0 keeps it in range */
        return tw_backend_zero(r->b, tw_tensor_of(r->labels), (size_t)rows * label_values * 4, err);
    return tw_backend_upload(r->b, tw_tensor_of(r->labels), labels,
                             (size_t)rows * label_values * 4, err);
}

/* ---- forward ---- */

/* Input k of layer l: an earlier layer's output, or the batch. */
static tw_tensor in_view(const tw_replica *r, const layer *l, int k)
{
    return l->in_layer[k] < 0 ? tw_tensor_of(r->x) : r->ls[l->in_layer[k]].out;
}

/* The values per position of input k (a flat input's values; an image's channels). */
static int in_channels(const tw_model *m, const layer *l, int k) { return input_of(m, l, k)->c; }

static tw_tensor param_view(const tw_replica *r, tw_tensor base, int p)
{
    return tw_tensor_at(base, r->m->params[p].offset);
}

static tw_window window_for(const layer *l, int rows)
{
    tw_window w = l->win;
    w.batch = rows;
    return w;
}

static tw_status dense_fwd(tw_replica *r, const layer *l, int i, int rows, tw_tensor base,
                           tw_error *err)
{
    tw_tensor y = r->ls[i].out;
    int units = l->out_size;
    TW_TRY(tw_gemm(r->b, 0, 0, rows, units, l->in_size, 1.0f, in_view(r, l, 0),
                   param_view(r, base, l->w_param), 0.0f, y, err));
    TW_TRY(tw_bias_add(r->b, y, param_view(r, base, l->b_param), rows, units, err));
    return tw_act_fwd(r->b, l->cfg->activation, y, y, (size_t)rows * units, err);
}

static tw_status conv_fwd(tw_replica *r, const layer *l, int i, int rows, tw_tensor base,
                          tw_error *err)
{
    tw_window w = window_for(l, rows);
    tw_tensor y = r->ls[i].out, f = param_view(r, base, l->w_param), bias = param_view(r, base,
                                                                                        l->b_param);
    int R = rows * l->out_spatial, F = l->cfg->filters;
    if (tw_backend_has_conv(r->b)) {
        TW_TRY(tw_conv_fwd(r->b, &w, F, y, in_view(r, l, 0), f, bias, err));
    } else {
        tw_tensor cols = tw_tensor_of(r->ls[i].work);
        TW_TRY(tw_im2col(r->b, &w, cols, in_view(r, l, 0), err));
        TW_TRY(tw_gemm(r->b, 0, 0, R, F, l->k_cols, 1.0f, cols, f, 0.0f, y, err));
        TW_TRY(tw_bias_add(r->b, y, bias, R, F, err));
    }
    return tw_act_fwd(r->b, l->cfg->activation, y, y, (size_t)R * F, err);
}

/* Batch norm's parameters for `rows` examples: every position a row of out.c channels. */
static tw_bn bn_of(const layer *l, int rows, int train)
{
    tw_bn_mode mode = (train & TW_FORWARD_UPDATE_STATS) ? TW_BN_TRAIN_UPDATE
                      : (train & TW_FORWARD_TRAIN)      ? TW_BN_TRAIN
                                                        : TW_BN_INFER;
    return (tw_bn){.rows = rows * (l->out_size / l->out.c), .channels = l->out.c, .momentum = l->cfg->momentum,
                   .epsilon = l->cfg->epsilon, .mode = mode, .activation = l->cfg->activation};
}

/* gamma and beta from base (the parameters or their EMA); the moving statistics always the parameters'; the
 * activation applied by the normalisation (tw_bn.activation). */
static tw_status bn_fwd(tw_replica *r, const layer *l, int i, int rows, int train, tw_tensor base, tw_error *err)
{
    tw_bn p = bn_of(l, rows, train);
    return tw_bn_fwd(r->b, &p, r->ls[i].out, in_view(r, l, 0), param_view(r, base, l->w_param),
                     param_view(r, base, l->b_param), tw_tensor_of(r->ls[i].work),
                     param_view(r, tw_replica_params(r), l->s_param), err);
}

static tw_status add_fwd(tw_replica *r, const layer *l, int i, int rows, tw_error *err)
{
    tw_tensor y = r->ls[i].out;
    size_t n = (size_t)rows * l->out_size;
    TW_TRY(tw_add(r->b, y, in_view(r, l, 0), in_view(r, l, 1), n, err));
    for (int k = 2; k < l->n_in; k++)
        TW_TRY(tw_add(r->b, y, y, in_view(r, l, k), n, err));
    return tw_act_fwd(r->b, l->cfg->activation, y, y, n, err);
}

static tw_status concat_fwd(tw_replica *r, const layer *l, int i, int rows, tw_error *err)
{
    int positions = rows * (l->out_size / l->out.c);
    for (int k = 0; k < l->n_in; k++) {
        int c = in_channels(r->m, l, k);
        TW_TRY(tw_copy_cols(r->b, r->ls[i].out, l->out.c, l->c_at[k], in_view(r, l, k), c, 0, positions, c, 0,
                            err));
    }
    return TW_OK;
}

static uint64_t layer_seed(uint64_t dropout_seed, int i) { return tw_hash64(dropout_seed, (uint64_t)i); }

static tw_status layer_fwd(tw_replica *r, int i, int rows, int train, tw_tensor base,
                           uint64_t seed, tw_error *err)
{
    const layer *l = &r->m->layers[i];
    tw_window w = window_for(l, rows);
    switch (l->cfg->type) {
    case TW_LAYER_DENSE: return dense_fwd(r, l, i, rows, base, err);
    case TW_LAYER_CONV2D:
    case TW_LAYER_CONV3D: return conv_fwd(r, l, i, rows, base, err);
    case TW_LAYER_MAX_POOL2D:
    case TW_LAYER_MAX_POOL3D:
        return tw_maxpool_fwd(r->b, &w, r->ls[i].out, tw_tensor_of(r->ls[i].work), in_view(r, l, 0), err);
    case TW_LAYER_AVG_POOL2D:
    case TW_LAYER_AVG_POOL3D:
    case TW_LAYER_GLOBAL_AVG_POOL: return tw_avgpool_fwd(r->b, &w, r->ls[i].out, in_view(r, l, 0), err);
    case TW_LAYER_DROPOUT: /* rate 0 keeps everything: an exact copy for evaluation */
        return tw_dropout_fwd(r->b, r->ls[i].out, in_view(r, l, 0), (size_t)rows * l->out_size,
                              (train & TW_FORWARD_TRAIN) ? l->cfg->rate : 0.0f, layer_seed(seed, i), err);
    case TW_LAYER_BATCH_NORM: return bn_fwd(r, l, i, rows, train, base, err);
    case TW_LAYER_ADD: return add_fwd(r, l, i, rows, err);
    case TW_LAYER_CONCAT: return concat_fwd(r, l, i, rows, err);
    case TW_LAYER_FLATTEN: return TW_OK;
    }
    return TW_OK;
}

tw_status tw_replica_forward(tw_replica *r, int rows, int train, int use_ema, uint64_t dropout_seed,
                             tw_error *err)
{
    tw_tensor base = tw_tensor_of(r->arena[use_ema ? ARENA_EMA : ARENA_PARAMS]);
    const tw_model *m = r->m;
    for (int i = 0; i < m->n_layers; i++)
        TW_TRY(layer_fwd(r, i, rows, train, base, dropout_seed, err));
    tw_tensor out = r->ls[m->n_layers - 1].out;
    int outs = tw_model_output_size(m);
    if (m->loss == TW_LOSS_SOFTMAX_XENT)
        return tw_xent_fwd(r->b, tw_tensor_of(r->loss), tw_tensor_of(r->probs), out,
                           tw_tensor_of(r->labels), rows, outs, m->label_smoothing, err);
    return tw_mse_fwd(r->b, tw_tensor_of(r->loss), out, tw_tensor_of(r->labels), rows, outs, err);
}

/* ---- backward ---- */

/* 1 when layer l must pass a gradient to its input k: that input is a layer with variables upstream. */
static int pass_on(const tw_model *m, const layer *l, int k)
{
    return l->in_layer[k] >= 0 && m->layers[l->in_layer[k]].upstream_vars;
}

/* Where layer l writes its input k's gradient: the producer's gradient on its first edge, else the scratch
 * (add_into then adds it to the producer's). */
static tw_tensor din(const tw_replica *r, const layer *l, int k)
{
    return l->first_edge[k] ? r->ls[l->in_layer[k]].dout : tw_tensor_of(r->scratch);
}

static tw_status add_into(tw_replica *r, const layer *l, int k, int rows, tw_error *err)
{
    if (l->first_edge[k])
        return TW_OK;
    const layer_state *p = &r->ls[l->in_layer[k]];
    size_t n = (size_t)rows * (size_t)r->m->layers[l->in_layer[k]].out_size;
    return tw_add(r->b, p->dout, p->dout, tw_tensor_of(r->scratch), n, err);
}

/* The weight gradient of dense layer i: dW = x^T dz; with u (the layer passes no gradient on, so this
 * is the weights' last use in the pass) the update u of those weights in the same pass. */
static tw_status dense_weight_grad(tw_replica *r, const layer *l, int i, int rows, const tw_update *u,
                                   tw_error *err)
{
    tw_tensor dz = r->ls[i].dout, x = in_view(r, l, 0);
    int units = l->out_size, in = l->in_size, w = l->w_param;
    tw_tensor dw = param_view(r, tw_replica_grads(r), w);
    if (!u)
        return tw_gemm(r->b, 1, 0, in, units, rows, 1.0f, x, dz, 0.0f, dw, err);
    return tw_gemm_update(r->b, u, 1, 0, in, units, rows, x, dz, dw, param_view(r, tw_replica_params(r), w),
                          param_view(r, tw_replica_slot1(r), w), param_view(r, tw_replica_slot2(r), w),
                          param_view(r, tw_replica_ema(r), w), err);
}

/* dz = act'(y) * dy in place; then weight (with u: and their update, dense_weight_grad), bias and
 * (when passed on) input gradients of a dense layer. */
static tw_status dense_bwd(tw_replica *r, const layer *l, int i, int rows, const tw_update *u, tw_error *err)
{
    tw_tensor dz = r->ls[i].dout, grads = tw_replica_grads(r);
    int units = l->out_size, in = l->in_size;
    TW_TRY(tw_act_bwd(r->b, l->cfg->activation, dz, dz, r->ls[i].out, (size_t)rows * units, err));
    TW_TRY(dense_weight_grad(r, l, i, rows, u, err));
    TW_TRY(tw_bias_grad(r->b, param_view(r, grads, l->b_param), dz, rows, units, err));
    if (!pass_on(r->m, l, 0))
        return TW_OK;
    TW_TRY(tw_gemm(r->b, 0, 1, rows, in, units, 1.0f, dz, param_view(r, tw_replica_params(r), l->w_param), 0.0f,
                   din(r, l, 0), err));
    return add_into(r, l, 0, rows, err);
}

/* conv_bwd through the backend's direct convolution: filter and bias gradients, and (when passed on) the
 * input gradient, in one op. */
static tw_status conv_bwd_direct(tw_replica *r, const layer *l, int i, int rows, const tw_window *w,
                                 tw_error *err)
{
    int passes = pass_on(r->m, l, 0);
    tw_tensor grads = tw_replica_grads(r);
    TW_TRY(tw_conv_bwd(r->b, w, l->cfg->filters, param_view(r, grads, l->w_param),
                       param_view(r, grads, l->b_param), passes ? din(r, l, 0) : (tw_tensor){0},
                       in_view(r, l, 0), r->ls[i].dout,
                       passes ? param_view(r, tw_replica_params(r), l->w_param) : (tw_tensor){0}, err));
    return passes ? add_into(r, l, 0, rows, err) : TW_OK;
}

/* 1 when layer i is a max pool whose backward also applies the ReLU of the convolution it reads (the
 * backend folds it in: tw_maxpool_bwd_relu), so the convolution skips its own act_bwd: the pool must be the
 * convolution's only reader. */
static int pool_folds_relu(const tw_replica *r, int i)
{
    const tw_model *m = r->m;
    const layer *l = &m->layers[i];
    int p = l->in_layer[0];
    if (p < 0 || !tw_backend_has_maxpool_bwd_relu(r->b))
        return 0;
    const layer *before = &m->layers[p];
    return (l->cfg->type == TW_LAYER_MAX_POOL2D || l->cfg->type == TW_LAYER_MAX_POOL3D) &&
           is_conv(before->cfg->type) && before->cfg->activation == TW_ACT_RELU && before->consumers == 1;
}

/* 1 when convolution i's only reader is a max pool that folds its ReLU (pool_folds_relu). */
static int relu_folded(const tw_replica *r, int i)
{
    const tw_model *m = r->m;
    for (int j = i + 1; j < m->n_layers && m->layers[i].consumers == 1; j++)
        if (m->layers[j].in_layer[0] == i)
            return pool_folds_relu(r, j);
    return 0;
}

static tw_status conv_bwd(tw_replica *r, const layer *l, int i, int rows, tw_error *err)
{
    tw_window w = window_for(l, rows);
    tw_tensor dz = r->ls[i].dout, cols = tw_tensor_of(r->ls[i].work), grads = tw_replica_grads(r);
    int R = rows * l->out_spatial, F = l->cfg->filters, K = l->k_cols;
    if (!relu_folded(r, i))
        TW_TRY(tw_act_bwd(r->b, l->cfg->activation, dz, dz, r->ls[i].out, (size_t)R * F, err));
    if (tw_backend_has_conv(r->b))
        return conv_bwd_direct(r, l, i, rows, &w, err);
    TW_TRY(tw_bias_grad(r->b, param_view(r, grads, l->b_param), dz, R, F, err));
    TW_TRY(tw_gemm(r->b, 1, 0, K, F, R, 1.0f, cols, dz, 0.0f, param_view(r, grads, l->w_param),
                   err));
    if (!pass_on(r->m, l, 0))
        return TW_OK;
    TW_TRY(tw_gemm(r->b, 0, 1, R, K, F, 1.0f, dz, param_view(r, tw_replica_params(r), l->w_param),
                   0.0f, cols, err)); /* the columns are spent: reuse them for their gradient */
    TW_TRY(tw_col2im(r->b, &w, din(r, l, 0), cols, err));
    return add_into(r, l, 0, rows, err);
}

static tw_status pool_bwd(tw_replica *r, const layer *l, int i, int rows, tw_error *err)
{
    tw_window w = window_for(l, rows);
    tw_tensor dx = din(r, l, 0), dy = r->ls[i].dout;
    if (l->cfg->type != TW_LAYER_MAX_POOL2D && l->cfg->type != TW_LAYER_MAX_POOL3D)
        TW_TRY(tw_avgpool_bwd(r->b, &w, dx, dy, err));
    else if (pool_folds_relu(r, i))
        TW_TRY(tw_maxpool_bwd_relu(r->b, &w, dx, dy, tw_tensor_of(r->ls[i].work), in_view(r, l, 0), err));
    else
        TW_TRY(tw_maxpool_bwd(r->b, &w, dx, dy, tw_tensor_of(r->ls[i].work), err));
    return add_into(r, l, 0, rows, err);
}

/* dz = act'(y) * dy in place; gamma's and beta's gradients, and (when passed on) the input's. */
static tw_status bn_bwd(tw_replica *r, const layer *l, int i, int rows, tw_error *err)
{
    tw_bn p = bn_of(l, rows, TW_FORWARD_TRAIN);
    tw_tensor dz = r->ls[i].dout, grads = tw_replica_grads(r);
    int passes = pass_on(r->m, l, 0);
    TW_TRY(tw_act_bwd(r->b, l->cfg->activation, dz, dz, r->ls[i].out, (size_t)rows * l->out_size, err));
    TW_TRY(tw_bn_bwd(r->b, &p, passes ? din(r, l, 0) : (tw_tensor){0}, param_view(r, grads, l->w_param),
                     param_view(r, grads, l->b_param), dz, in_view(r, l, 0),
                     param_view(r, tw_replica_params(r), l->w_param), tw_tensor_of(r->ls[i].work), err));
    return passes ? add_into(r, l, 0, rows, err) : TW_OK;
}

/* add: each input's gradient is dz (after the activation's); concat: each input's channels of it. The
 * first edge into a layer writes its gradient, the others add to it. */
static tw_status join_bwd(tw_replica *r, const layer *l, int i, int rows, tw_error *err)
{
    tw_tensor dz = r->ls[i].dout;
    int positions = rows * (l->out_size / l->out.c);
    TW_TRY(tw_act_bwd(r->b, l->cfg->activation, dz, dz, r->ls[i].out, (size_t)rows * l->out_size, err));
    for (int k = 0; k < l->n_in; k++) {
        if (!pass_on(r->m, l, k))
            continue;
        int c = l->cfg->type == TW_LAYER_ADD ? l->out.c : in_channels(r->m, l, k);
        int at = l->cfg->type == TW_LAYER_ADD ? 0 : l->c_at[k];
        TW_TRY(tw_copy_cols(r->b, r->ls[l->in_layer[k]].dout, c, 0, dz, l->out.c, at, positions, c,
                            !l->first_edge[k], err));
    }
    return TW_OK;
}

/* Layer i's backward; u: the update fused into the weight gradient of the first layer with variables
 * (tw_replica_backward_update), else NULL. */
static tw_status layer_bwd(tw_replica *r, int i, int rows, uint64_t seed, const tw_update *u, tw_error *err)
{
    const layer *l = &r->m->layers[i];
    switch (l->cfg->type) {
    case TW_LAYER_DENSE: return dense_bwd(r, l, i, rows, pass_on(r->m, l, 0) ? NULL : u, err);
    case TW_LAYER_CONV2D:
    case TW_LAYER_CONV3D: return conv_bwd(r, l, i, rows, err);
    case TW_LAYER_BATCH_NORM: return bn_bwd(r, l, i, rows, err);
    case TW_LAYER_ADD:
    case TW_LAYER_CONCAT: return join_bwd(r, l, i, rows, err);
    default: break;
    }
    if (!pass_on(r->m, l, 0))
        return TW_OK;
    switch (l->cfg->type) {
    case TW_LAYER_DROPOUT:
        TW_TRY(tw_dropout_bwd(r->b, din(r, l, 0), r->ls[i].dout, (size_t)rows * l->out_size, l->cfg->rate,
                              layer_seed(seed, i), err));
        return add_into(r, l, 0, rows, err);
    case TW_LAYER_FLATTEN: /* a gradient of its own (flatten_owns_grad) is added to its input's */
        return flatten_owns_grad(l) ? tw_add(r->b, r->ls[l->in_layer[0]].dout, r->ls[l->in_layer[0]].dout,
                                             r->ls[i].dout, (size_t)rows * l->out_size, err)
                                    : TW_OK;
    default: return pool_bwd(r, l, i, rows, err);
    }
}

/* The first layer with variables when the model is a chain and that layer is dense (its weights are the
 * fused range), else -1. */
static int fused_layer(const tw_model *m)
{
    for (int i = 0; i < m->n_layers && m->chain; i++)
        if (m->layers[i].w_param >= 0)
            return m->layers[i].cfg->type == TW_LAYER_DENSE ? i : -1;
    return -1;
}

int tw_model_fused_range(const tw_model *m, size_t *lo, size_t *hi)
{
    int i = fused_layer(m);
    if (i < 0)
        return 0;
    const tw_param *w = &m->params[m->layers[i].w_param];
    *lo = w->offset;
    *hi = w->offset + w->count;
    return 1;
}

int tw_replica_fused_range(const tw_replica *r, size_t *lo, size_t *hi)
{
    return tw_backend_has_gemm_update(r->b) && tw_model_fused_range(r->m, lo, hi);
}

/* The backward pass; u: tw_replica_backward_update's, or NULL. Layers with no variables upstream have
 * nothing to do. */
static tw_status backward(tw_replica *r, int rows, uint64_t dropout_seed, const tw_update *u, tw_error *err)
{
    const tw_model *m = r->m;
    int last = m->n_layers - 1, outs = tw_model_output_size(m);
    tw_tensor dout = r->ls[last].dout;
    if (m->loss == TW_LOSS_SOFTMAX_XENT)
        TW_TRY(tw_xent_bwd(r->b, dout, tw_tensor_of(r->probs), tw_tensor_of(r->labels), rows, outs,
                           1.0f / (float)rows, m->label_smoothing, err));
    else
        TW_TRY(tw_mse_bwd(r->b, dout, r->ls[last].out, tw_tensor_of(r->labels),
                          (size_t)rows * outs, 1.0f / (float)((size_t)rows * outs), err));
    for (int i = last; i >= 0; i--)
        if (m->layers[i].upstream_vars)
            TW_TRY(layer_bwd(r, i, rows, dropout_seed, u, err));
    return TW_OK;
}

tw_status tw_replica_backward(tw_replica *r, int rows, uint64_t dropout_seed, tw_error *err)
{
    return backward(r, rows, dropout_seed, NULL, err);
}

tw_status tw_replica_backward_update(tw_replica *r, int rows, uint64_t dropout_seed, const tw_update *u,
                                     tw_error *err)
{
    size_t lo, hi;
    if (!u || !tw_replica_fused_range(r, &lo, &hi))
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "tw_replica_backward_update: %s",
                            u ? "the model's first layer with variables is not dense, or the backend has "
                                "no tw_gemm_update" : "no update (NULL)");
    return backward(r, rows, dropout_seed, u, err);
}

tw_status tw_replica_loss_sum(tw_replica *r, int rows, double *sum, tw_error *err)
{
    TW_TRY(tw_backend_download(r->b, r->host_loss, tw_tensor_of(r->loss),
                               (size_t)rows * sizeof(float), err));
    double s = 0;
    for (int i = 0; i < rows; i++)
        s += r->host_loss[i];
    *sum = s;
    return TW_OK;
}

tw_status tw_replica_outputs(tw_replica *r, int rows, float *out, tw_error *err)
{
    const tw_model *m = r->m;
    return tw_backend_download(r->b, out, r->ls[m->n_layers - 1].out,
                               (size_t)rows * (size_t)tw_model_output_size(m) * sizeof(float), err);
}
