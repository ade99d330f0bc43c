/* model.c — layer plan, parameter layout, initializers, GraphDef, and replicas. See model.h.
 *
 * Shapes are tracked per example as [d, h, w, c] (spatial; 2-D images have d = 1) or [n] (flat).
 * Every layer has an output view and an output-gradient view; flatten aliases its input's, so it costs
 * nothing. A convolution is the backend's direct convolution where it has one (the CPU's oneDNN), else
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
    shape in, out;
    int in_size, out_size;  /* values per example */
    tw_window win;          /* conv and pool; batch filled per call */
    int k_cols;             /* conv: K */
    int out_spatial;        /* conv and pool: out_d*out_h*out_w */
    int w_param, b_param;   /* indices into params, -1 when none */
} layer;

struct tw_model {
    layer layers[TW_MAX_LAYERS];
    int n_layers;
    tw_param params[2 * TW_MAX_LAYERS];
    size_t n_params;
    size_t param_floats, weight_floats;
    shape input;
    tw_loss_kind loss;
    float label_smoothing;       /* SOFTMAX_XENT's, the config's */
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

static tw_status plan_layer(tw_model *m, int i, layer *l, tw_error *err)
{
    l->w_param = l->b_param = -1;
    switch (l->cfg->type) {
    case TW_LAYER_DENSE: return plan_dense(m, i, l, err);
    case TW_LAYER_CONV2D: return plan_conv(m, i, l, 0, err);
    case TW_LAYER_CONV3D: return plan_conv(m, i, l, 1, err);
    case TW_LAYER_MAX_POOL2D: return plan_window(i, l, 0, l->in.c, err);
    case TW_LAYER_MAX_POOL3D: return plan_window(i, l, 1, l->in.c, err);
    case TW_LAYER_DROPOUT: l->out = l->in; return TW_OK;
    case TW_LAYER_FLATTEN: l->out = (shape){.flat = 1, .c = (int)shape_size(&l->in)}; return TW_OK;
    }
    return layer_error(err, i, l, "unknown layer type");
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

/* Weights first, then biases: L2 covers [0, weight_floats). */
static void lay_out_params(tw_model *m)
{
    size_t off = 0;
    for (int pass = 1; pass >= 0; pass--)
        for (size_t i = 0; i < m->n_params; i++)
            if (m->params[i].is_weight == pass) {
                m->params[i].offset = off;
                off += m->params[i].count;
                if (pass)
                    m->weight_floats = off;
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
    m->optimizer = c->optimizer;
    shape cur = m->input;
    tw_status s = shape_size(&m->input) <= INT_MAX
                      ? TW_OK
                      : tw_error_set(err, TW_ERR_INVALID, NULL, -1, "dataset.shape: %lld values per "
                                     "example is too large (at most %d)",
                                     (long long)shape_size(&m->input), INT_MAX);
    for (int i = 0; i < c->n_layers && s == TW_OK; i++) {
        layer *l = &m->layers[i];
        l->cfg = &c->layers[i];
        l->in = cur;
        s = plan_layer(m, i, l, err);
        if (s == TW_OK)
            s = size_check(i, l, err);
        l->in_size = (int)shape_size(&l->in);
        l->out_size = (int)shape_size(&l->out);
        cur = l->out;
        m->n_layers = i + 1;
    }
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
    *out = (tw_layer_plan){.cfg = l->cfg, .win = l->win, .w_param = l->w_param, .b_param = l->b_param};
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

/* Adds name = op(inputs) with dtype float; returns the name in out (for the next layer's input). */
static tw_status node(tw_graph *g, const char *name, const char *op, const char *a, const char *b,
                      tw_error *err)
{
    const char *inputs[2] = {a, b};
    tw_graph_attr t = tw_graph_attr_type("T", TW_GRAPH_DT_FLOAT);
    return tw_graph_add_node(g, name, op, inputs, (size_t)(a != NULL) + (b != NULL), &t, 1, err);
}

static tw_status graph_layer(const tw_model *m, tw_graph *g, int i, char *prev, tw_error *err)
{
    const layer *l = &m->layers[i];
    char name[TW_PARAM_NAME_BYTES + 16], scope[TW_NAME_BYTES + 16];
    if (l->w_param >= 0)
        snprintf(scope, sizeof scope, "%s", l->cfg->name);
    else
        snprintf(scope, sizeof scope, "%s_%d", op_name(l), i);
    for (int k = 0; k < 2; k++) {
        int p = k ? l->b_param : l->w_param;
        if (p >= 0)
            TW_TRY(node(g, m->params[p].name, "VariableV2", NULL, NULL, err));
    }
    snprintf(name, sizeof name, "%s/%s", scope, op_name(l));
    TW_TRY(node(g, name, op_name(l), prev, l->w_param >= 0 ? m->params[l->w_param].name : NULL,
                err));
    if (l->b_param >= 0) {
        char add[sizeof name];
        snprintf(add, sizeof add, "%s/BiasAdd", scope);
        TW_TRY(node(g, add, "BiasAdd", name, m->params[l->b_param].name, err));
        snprintf(name, sizeof name, "%s", add);
    }
    const char *act = l->w_param >= 0 ? act_op(l->cfg->activation) : NULL;
    if (act) {
        char out[sizeof name];
        snprintf(out, sizeof out, "%s/%s", scope, act);
        TW_TRY(node(g, out, act, name, NULL, err));
        snprintf(name, sizeof name, "%s", out);
    }
    snprintf(prev, TW_PARAM_NAME_BYTES + 16, "%s", name);
    return TW_OK;
}

static tw_status build_graph(const tw_model *m, tw_graph *g, tw_error *err)
{
    char prev[TW_PARAM_NAME_BYTES + 16] = "input";
    TW_TRY(node(g, "input", "Placeholder", NULL, NULL, err));
    TW_TRY(node(g, "labels", "Placeholder", NULL, NULL, err));
    for (int i = 0; i < m->n_layers; i++)
        TW_TRY(graph_layer(m, g, i, prev, err));
    const char *loss = m->loss == TW_LOSS_SOFTMAX_XENT ? "SparseSoftmaxCrossEntropyWithLogits"
                                                       : "SquaredDifference";
    TW_TRY(node(g, "loss/loss", loss, prev, "labels", err));
    return node(g, "loss/Mean", "Mean", "loss/loss", NULL, err);
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
    tw_tensor out, dout;      /* [batch, out_size] fp32; flatten aliases its input's */
    tw_buffer *out_buf, *dout_buf, *work; /* owned; work = conv cols [batch*out_spatial, K] or
                                              pool argmax [batch, out_size] int32 */
} layer_state;

struct tw_replica {
    const tw_model *m;        /* borrowed */
    tw_backend *b;            /* borrowed */
    int batch;
    tw_buffer *arena[N_ARENAS]; /* owned, except those `shares` borrows */
    const tw_replica *shares; /* borrowed: the replica whose params, slots and EMA this one uses, or NULL */
    tw_buffer *x, *labels, *loss, *probs; /* [batch, in] ; [batch*outs] ; [batch] ; [batch, outs] */
    float *host_loss;         /* [batch] host copy of loss, owned */
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

/* Layer l's buffers for `batch` rows, in floats: its output and output gradient (each *act; 0 for
 * flatten, which aliases its input's) and its work buffer (*work: conv columns [batch*out_spatial, K],
 * pool argmax [batch, out_size] int32, else 0). 0 when they pass 2^64 or a conv's GEMM would have more
 * than INT_MAX rows (batch*out_spatial). */
static int layer_floats(const layer *l, int batch, uint64_t *act, uint64_t *work)
{
    tw_layer_type t = l->cfg->type;
    int conv = is_conv(t);
    int pool = t == TW_LAYER_MAX_POOL2D || t == TW_LAYER_MAX_POOL3D;
    *act = *work = 0;
    if (t == TW_LAYER_FLATTEN)
        return 1;
    *act = (uint64_t)batch * (uint64_t)l->out_size;
    if (pool)
        *work = *act;
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
    for (int i = 0; i < m->n_layers; i++) {
        uint64_t act, work;
        if (!layer_floats(&m->layers[i], (int)rows, &act, &work) ||
            !add_buffers(&out->activations, act, 2) || !add_buffers(&out->activations, work, 1) ||
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
    const tw_buffer *bufs[4] = {r->x, r->labels, r->loss, r->probs};
    for (int i = 0; i < 4; i++)
        sum += bufs[i]->bytes;
    for (int i = 0; i < r->m->n_layers; i++) {
        const layer_state *s = &r->ls[i];
        sum += (s->out_buf ? s->out_buf->bytes : 0) + (s->dout_buf ? s->dout_buf->bytes : 0) +
               (s->work ? s->work->bytes : 0);
    }
    return sum;
}

static tw_status alloc_layer(tw_replica *r, int i, tw_error *err)
{
    const layer *l = &r->m->layers[i];
    layer_state *s = &r->ls[i];
    uint64_t act, work;
    (void)layer_floats(l, r->batch, &act, &work); /* checked by tw_replica_size_of */
    if (l->cfg->type == TW_LAYER_FLATTEN) {
        s->out = i ? r->ls[i - 1].out : tw_tensor_of(r->x);
        s->dout = i ? r->ls[i - 1].dout : (tw_tensor){0};
        return TW_OK;
    }
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
    tw_status s = (r->host_loss = malloc((size_t)batch * sizeof(float)))
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
    free(r->host_loss);
    free(r);
}

tw_tensor tw_replica_params(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_PARAMS]); }
tw_tensor tw_replica_grads(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_GRADS]); }
tw_tensor tw_replica_slot1(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_SLOT1]); }
tw_tensor tw_replica_slot2(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_SLOT2]); }
tw_tensor tw_replica_ema(const tw_replica *r) { return tw_tensor_of(r->arena[ARENA_EMA]); }

tw_status tw_replica_upload_batch(tw_replica *r, int rows, const float *x, const void *labels,
                                  tw_error *err)
{
    if (rows < 1 || rows > r->batch)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "batch of %d rows, replica holds %d",
                            rows, r->batch);
    size_t in = tw_model_input_size(r->m), outs = (size_t)tw_model_output_size(r->m);
    size_t label_values = r->m->loss == TW_LOSS_SOFTMAX_XENT ? 1 : outs;
    TW_TRY(tw_backend_upload(r->b, tw_tensor_of(r->x), x, (size_t)rows * in * sizeof(float), err));
    if (!labels) /* inference: the loss the forward computes is not read; class 0 keeps it in range */
        return tw_backend_zero(r->b, tw_tensor_of(r->labels), (size_t)rows * label_values * 4, err);
    return tw_backend_upload(r->b, tw_tensor_of(r->labels), labels,
                             (size_t)rows * label_values * 4, err);
}

/* ---- forward ---- */

/* The layer's input view: the previous layer's output, or the batch. */
static tw_tensor layer_input(const tw_replica *r, int i)
{
    return i ? r->ls[i - 1].out : tw_tensor_of(r->x);
}

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
    TW_TRY(tw_gemm(r->b, 0, 0, rows, units, l->in_size, 1.0f, layer_input(r, i),
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
        TW_TRY(tw_conv_fwd(r->b, &w, F, y, layer_input(r, i), f, bias, err));
    } else {
        tw_tensor cols = tw_tensor_of(r->ls[i].work);
        TW_TRY(tw_im2col(r->b, &w, cols, layer_input(r, i), err));
        TW_TRY(tw_gemm(r->b, 0, 0, R, F, l->k_cols, 1.0f, cols, f, 0.0f, y, err));
        TW_TRY(tw_bias_add(r->b, y, bias, R, F, err));
    }
    return tw_act_fwd(r->b, l->cfg->activation, y, y, (size_t)R * F, err);
}

static uint64_t layer_seed(uint64_t dropout_seed, int i) { return tw_hash64(dropout_seed, (uint64_t)i); }

static tw_status layer_fwd(tw_replica *r, int i, int rows, int train, tw_tensor base,
                           uint64_t seed, tw_error *err)
{
    const layer *l = &r->m->layers[i];
    tw_window w;
    switch (l->cfg->type) {
    case TW_LAYER_DENSE: return dense_fwd(r, l, i, rows, base, err);
    case TW_LAYER_CONV2D:
    case TW_LAYER_CONV3D: return conv_fwd(r, l, i, rows, base, err);
    case TW_LAYER_MAX_POOL2D:
    case TW_LAYER_MAX_POOL3D:
        w = window_for(l, rows);
        return tw_maxpool_fwd(r->b, &w, r->ls[i].out, tw_tensor_of(r->ls[i].work),
                              layer_input(r, i), err);
    case TW_LAYER_DROPOUT: /* rate 0 keeps everything: an exact copy for evaluation */
        return tw_dropout_fwd(r->b, r->ls[i].out, layer_input(r, i), (size_t)rows * l->out_size,
                              train ? l->cfg->rate : 0.0f, layer_seed(seed, i), err);
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

/* Layer i must produce the gradient of its input only if some layer before it has variables. */
static int needs_input_grad(const tw_model *m, int i)
{
    for (int j = 0; j < i; j++)
        if (m->layers[j].w_param >= 0)
            return 1;
    return 0;
}

/* The weight gradient of dense layer i: dW = x^T dz; with u (the layer passes no gradient on, so this
 * is the weights' last use in the pass) the update u of those weights in the same pass. */
static tw_status dense_weight_grad(tw_replica *r, const layer *l, int i, int rows, const tw_update *u,
                                   tw_error *err)
{
    tw_tensor dz = r->ls[i].dout, x = layer_input(r, i);
    int units = l->out_size, in = l->in_size, w = l->w_param;
    tw_tensor dw = param_view(r, tw_replica_grads(r), w);
    if (!u)
        return tw_gemm(r->b, 1, 0, in, units, rows, 1.0f, x, dz, 0.0f, dw, err);
    return tw_gemm_update(r->b, u, 1, 0, in, units, rows, x, dz, dw, param_view(r, tw_replica_params(r), w),
                          param_view(r, tw_replica_slot1(r), w), param_view(r, tw_replica_slot2(r), w),
                          param_view(r, tw_replica_ema(r), w), err);
}

/* dz = act'(y) * dy in place; then weight (with u: and their update, dense_weight_grad), bias and
 * (unless first) input gradients of a dense layer. */
static tw_status dense_bwd(tw_replica *r, const layer *l, int i, int rows, const tw_update *u, tw_error *err)
{
    tw_tensor dz = r->ls[i].dout, grads = tw_replica_grads(r);
    int units = l->out_size, in = l->in_size;
    TW_TRY(tw_act_bwd(r->b, l->cfg->activation, dz, dz, r->ls[i].out, (size_t)rows * units, err));
    TW_TRY(dense_weight_grad(r, l, i, rows, u, err));
    TW_TRY(tw_bias_grad(r->b, param_view(r, grads, l->b_param), dz, rows, units, err));
    if (!needs_input_grad(r->m, i))
        return TW_OK;
    return tw_gemm(r->b, 0, 1, rows, in, units, 1.0f, dz, param_view(r, tw_replica_params(r),
                   l->w_param), 0.0f, r->ls[i - 1].dout, err);
}

/* conv_bwd through the backend's direct convolution: filter and bias gradients in one pass, then (unless
 * first) the input gradient. */
static tw_status conv_bwd_direct(tw_replica *r, const layer *l, int i, const tw_window *w,
                                 tw_error *err)
{
    tw_tensor dz = r->ls[i].dout;
    int F = l->cfg->filters;
    tw_tensor grads = tw_replica_grads(r);
    TW_TRY(tw_conv_bwd_filter(r->b, w, F, param_view(r, grads, l->w_param),
                              param_view(r, grads, l->b_param), layer_input(r, i), dz, err));
    if (!needs_input_grad(r->m, i))
        return TW_OK;
    return tw_conv_bwd_data(r->b, w, F, r->ls[i - 1].dout, dz,
                            param_view(r, tw_replica_params(r), l->w_param), err);
}

/* 1 when layer i is a max pool whose backward also applies the ReLU of the layer before it (the
 * backend folds it in: tw_maxpool_bwd_relu), so that layer skips its own act_bwd. */
static int pool_folds_relu(const tw_replica *r, int i)
{
    const tw_model *m = r->m;
    if (i < 1 || i >= m->n_layers || !tw_backend_has_maxpool_bwd_relu(r->b))
        return 0;
    tw_layer_type t = m->layers[i].cfg->type, before = m->layers[i - 1].cfg->type;
    return (t == TW_LAYER_MAX_POOL2D || t == TW_LAYER_MAX_POOL3D) && is_conv(before) &&
           m->layers[i - 1].cfg->activation == TW_ACT_RELU;
}

static tw_status conv_bwd(tw_replica *r, const layer *l, int i, int rows, tw_error *err)
{
    tw_window w = window_for(l, rows);
    tw_tensor dz = r->ls[i].dout, cols = tw_tensor_of(r->ls[i].work), grads = tw_replica_grads(r);
    int R = rows * l->out_spatial, F = l->cfg->filters, K = l->k_cols;
    if (!pool_folds_relu(r, i + 1))
        TW_TRY(tw_act_bwd(r->b, l->cfg->activation, dz, dz, r->ls[i].out, (size_t)R * F, err));
    if (tw_backend_has_conv(r->b))
        return conv_bwd_direct(r, l, i, &w, err);
    TW_TRY(tw_bias_grad(r->b, param_view(r, grads, l->b_param), dz, R, F, err));
    TW_TRY(tw_gemm(r->b, 1, 0, K, F, R, 1.0f, cols, dz, 0.0f, param_view(r, grads, l->w_param),
                   err));
    if (!needs_input_grad(r->m, i))
        return TW_OK;
    TW_TRY(tw_gemm(r->b, 0, 1, R, K, F, 1.0f, dz, param_view(r, tw_replica_params(r), l->w_param),
                   0.0f, cols, err)); /* the columns are spent: reuse them for their gradient */
    return tw_col2im(r->b, &w, r->ls[i - 1].dout, cols, err);
}

/* Layer i's backward; u: the update fused into the weight gradient of the first layer with variables
 * (tw_replica_backward_update), else NULL. */
static tw_status layer_bwd(tw_replica *r, int i, int rows, uint64_t seed, const tw_update *u, tw_error *err)
{
    const layer *l = &r->m->layers[i];
    tw_window w;
    int pass_on = needs_input_grad(r->m, i);
    switch (l->cfg->type) {
    case TW_LAYER_DENSE: return dense_bwd(r, l, i, rows, pass_on ? NULL : u, err);
    case TW_LAYER_CONV2D:
    case TW_LAYER_CONV3D: return conv_bwd(r, l, i, rows, err);
    case TW_LAYER_MAX_POOL2D:
    case TW_LAYER_MAX_POOL3D:
        if (!pass_on)
            return TW_OK;
        w = window_for(l, rows);
        if (pool_folds_relu(r, i))
            return tw_maxpool_bwd_relu(r->b, &w, r->ls[i - 1].dout, r->ls[i].dout,
                                       tw_tensor_of(r->ls[i].work), r->ls[i - 1].out, err);
        return tw_maxpool_bwd(r->b, &w, r->ls[i - 1].dout, r->ls[i].dout,
                              tw_tensor_of(r->ls[i].work), err);
    case TW_LAYER_DROPOUT:
        if (!pass_on)
            return TW_OK;
        return tw_dropout_bwd(r->b, r->ls[i - 1].dout, r->ls[i].dout, (size_t)rows * l->out_size,
                              l->cfg->rate, layer_seed(seed, i), err);
    case TW_LAYER_FLATTEN: return TW_OK;
    }
    return TW_OK;
}

/* The first layer with variables when it is dense (its weights are the fused range), else -1. */
static int fused_layer(const tw_model *m)
{
    for (int i = 0; i < m->n_layers; i++)
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

/* The backward pass; u: tw_replica_backward_update's, or NULL. */
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
