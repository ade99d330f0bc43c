/* backend.c — the checked wrappers of backend.h and the backend handle.
 *
 * Owns: struct tw_backend (an operation table, the backend's context and its name), creating one from
 * the table the registry finds for a kind (backend_reg.c, the only engine file that names kernels/),
 * the argument checks every wrapper makes before it
 * dispatches (a backend, positive sizes, views that hold a buffer, are aligned for their dtype and lie
 * inside it, outputs that do not overlap the inputs they are computed from), and TensorFlow's SAME/VALID
 * window arithmetic. Every check failure is TW_ERR_INVALID with a message that names the wrapper and the
 * argument. Does not own any arithmetic on tensors (the backends do) or the values inside buffers (a
 * wrapper cannot read device memory, so e.g. label ranges are the caller's or the backend's business).
 * Knows no backend by name: the engine's core does not depend on kernels/. */
#include "backend.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tw_backend {
    const tw_backend_ops *ops; /* borrowed: a static table */
    void *ctx;                 /* owned: destroyed with ops->destroy */
    char name[32];             /* "cpu", "cuda:0" */
};

/* ---- argument checks ---- */

static tw_status fail(tw_error *err, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* TW_ERR_INVALID with "op: message". */
static tw_status fail(tw_error *err, const char *op, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: %s", op, msg);
}

/* a * b, saturating at SIZE_MAX (which no view can hold, so an overflow fails the range check). */
static size_t mul(size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a)
        return SIZE_MAX;
    return a * b;
}

static tw_status check_backend(const char *op, const tw_backend *b, tw_error *err)
{
    return b ? TW_OK : fail(err, op, "no backend (NULL)");
}

static tw_status check_dim(const char *op, const char *arg, int v, tw_error *err)
{
    return v > 0 ? TW_OK : fail(err, op, "argument %s must be positive, got %d", arg, v);
}

static tw_status check_count(const char *op, const char *arg, size_t v, tw_error *err)
{
    return v > 0 ? TW_OK : fail(err, op, "argument %s must be positive, got 0", arg);
}

/* View t holds `count` values of `elem` bytes: it has a buffer, its offset is a multiple of elem, and
 * [offset, offset + count * elem) lies inside the buffer. */
static tw_status check_view(const char *op, const char *arg, tw_tensor t, size_t count, size_t elem,
                            tw_error *err)
{
    if (!t.buf || !t.buf->data)
        return fail(err, op, "argument %s has no buffer", arg);
    if (t.offset % elem != 0)
        return fail(err, op, "argument %s: offset %zu is not a multiple of %zu bytes", arg, t.offset,
                    elem);
    size_t bytes = mul(count, elem);
    if (t.offset > t.buf->bytes || bytes > t.buf->bytes - t.offset)
        return fail(err, op, "argument %s: %zu values of %zu bytes at offset %zu do not fit its %zu-byte "
                    "buffer", arg, count, elem, t.offset, t.buf->bytes);
    return TW_OK;
}

static tw_status check_f32(const char *op, const char *arg, tw_tensor t, size_t count, tw_error *err)
{
    return check_view(op, arg, t, count, sizeof(float), err);
}

static tw_status check_i32(const char *op, const char *arg, tw_tensor t, size_t count, tw_error *err)
{
    return check_view(op, arg, t, count, sizeof(int32_t), err);
}

/* Output view `out` (out_floats values) shares no byte with input view `in` (in_floats values). Both
 * views have passed check_view. */
static tw_status check_disjoint(const char *op, const char *out_arg, tw_tensor out, size_t out_floats,
                                const char *in_arg, tw_tensor in, size_t in_floats, tw_error *err)
{
    if (out.buf != in.buf)
        return TW_OK;
    size_t out_end = out.offset + out_floats * sizeof(float);
    size_t in_end = in.offset + in_floats * sizeof(float);
    if (out_end <= in.offset || in_end <= out.offset)
        return TW_OK;
    return fail(err, op, "argument %s overlaps argument %s", out_arg, in_arg);
}

/* The value counts of a checked window: x [batch, in_d, in_h, in_w, in_c]; rows = output positions
 * [batch, out_d, out_h, out_w]; y = rows * in_c (pooling output); cols = rows * taps * in_c. */
typedef struct {
    size_t x, rows, y, cols;
} window_sizes;

/* One spatial axis of a window: 0 <= pad < k (the first window touches the input) and the last window
 * starts inside the input. */
static tw_status check_axis(const char *op, const char *axis, int in, int k, int s, int pad, int out,
                            tw_error *err)
{
    if (pad < 0 || pad >= k)
        return fail(err, op, "window axis %s: padding %d outside [0, %d)", axis, pad, k);
    if ((int64_t)(out - 1) * s - pad > (int64_t)in - 1)
        return fail(err, op, "window axis %s: %d outputs at stride %d start past the %d inputs", axis,
                    out, s, in);
    return TW_OK;
}

static tw_status check_window(const char *op, const tw_window *w, window_sizes *sz, tw_error *err)
{
    if (!w)
        return fail(err, op, "no window (NULL)");
    const struct {
        const char *name;
        int v;
    } dims[] = {
        {"batch", w->batch}, {"in_d", w->in_d}, {"in_h", w->in_h},   {"in_w", w->in_w},
        {"in_c", w->in_c},   {"k_d", w->k_d},   {"k_h", w->k_h},     {"k_w", w->k_w},
        {"s_d", w->s_d},     {"s_h", w->s_h},   {"s_w", w->s_w},     {"out_d", w->out_d},
        {"out_h", w->out_h}, {"out_w", w->out_w},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        TW_TRY(check_dim(op, dims[i].name, dims[i].v, err));
    TW_TRY(check_axis(op, "d", w->in_d, w->k_d, w->s_d, w->pad_d, w->out_d, err));
    TW_TRY(check_axis(op, "h", w->in_h, w->k_h, w->s_h, w->pad_h, w->out_h, err));
    TW_TRY(check_axis(op, "w", w->in_w, w->k_w, w->s_w, w->pad_w, w->out_w, err));
    sz->x = mul(mul(mul(mul(w->batch, w->in_d), w->in_h), w->in_w), w->in_c);
    sz->rows = mul(mul(mul(w->batch, w->out_d), w->out_h), w->out_w);
    sz->y = mul(sz->rows, w->in_c);
    sz->cols = mul(mul(mul(sz->y, w->k_d), w->k_h), w->k_w);
    return TW_OK;
}

/* ---- windows ---- */

/* One axis of TensorFlow's window arithmetic (tensorflow/core/framework/kernel_shape_util.cc):
 * SAME: out = ceil(in / s), pad_total = max((out - 1) s + k - in, 0), pad_before = pad_total / 2;
 * VALID: out = ceil((in - k + 1) / s), no padding, in >= k. */
static tw_status resolve_axis(const char *axis, int in, int k, int s, int same, int *out, int *pad,
                              tw_error *err)
{
    const char *op = "tw_window_resolve";
    if (in <= 0 || k <= 0 || s <= 0)
        return fail(err, op, "axis %s: input %d, kernel %d and stride %d must be positive", axis, in, k,
                    s);
    if (same) {
        *out = (int)(((int64_t)in + s - 1) / s);
        int64_t total = (int64_t)(*out - 1) * s + k - in;
        *pad = total > 0 ? (int)(total / 2) : 0;
        return TW_OK;
    }
    if (in < k)
        return fail(err, op, "axis %s: VALID kernel %d is larger than the input %d", axis, k, in);
    *out = (in - k) / s + 1;
    *pad = 0;
    return TW_OK;
}

tw_status tw_window_resolve(tw_window *w, int same, tw_error *err)
{
    if (!w)
        return fail(err, "tw_window_resolve", "no window (NULL)");
    TW_TRY(check_dim("tw_window_resolve", "batch", w->batch, err));
    TW_TRY(check_dim("tw_window_resolve", "in_c", w->in_c, err));
    TW_TRY(resolve_axis("d", w->in_d, w->k_d, w->s_d, same, &w->out_d, &w->pad_d, err));
    TW_TRY(resolve_axis("h", w->in_h, w->k_h, w->s_h, same, &w->out_h, &w->pad_h, err));
    return resolve_axis("w", w->in_w, w->k_w, w->s_w, same, &w->out_w, &w->pad_w, err);
}

/* ---- lifecycle (the kinds: backend_reg.c) ---- */

tw_status tw_backend_create(const char *kind, int device, tw_backend **out, tw_error *err)
{
    if (!out)
        return fail(err, "tw_backend_create", "argument out is NULL");
    *out = NULL;
    const tw_backend_ops *ops;
    TW_TRY(tw_backend_find(kind, &ops, err));
    tw_backend *b = calloc(1, sizeof *b);
    if (!b)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "tw_backend_create: out of memory");
    b->ops = ops;
    tw_status s = ops->create(device, &b->ctx, b->name, sizeof b->name, err);
    if (s != TW_OK) {
        free(b);
        return s;
    }
    *out = b;
    return TW_OK;
}

tw_status tw_backend_plan(const char *kind, int concurrent, int *threads, tw_error *err)
{
    if (concurrent < 1)
        return fail(err, "tw_backend_plan", "concurrent must be >= 1, got %d", concurrent);
    const tw_backend_ops *ops;
    TW_TRY(tw_backend_find(kind, &ops, err));
    int share = ops->plan ? ops->plan(concurrent) : 1;
    if (threads)
        *threads = share;
    return TW_OK;
}

void tw_backend_destroy(tw_backend *b)
{
    if (!b)
        return;
    b->ops->destroy(b->ctx);
    free(b);
}

const char *tw_backend_name(const tw_backend *b) { return b->name; }

const char *tw_backend_kind(const tw_backend *b) { return b->ops->kind; }

/* ---- memory ---- */

tw_status tw_backend_alloc(tw_backend *b, size_t bytes, tw_buffer **out, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    if (!out)
        return fail(err, op, "argument out is NULL");
    *out = NULL;
    TW_TRY(check_count(op, "bytes", bytes, err));
    return b->ops->alloc(b->ctx, bytes, out, err);
}

void tw_backend_free(tw_backend *b, tw_buffer *buf)
{
    if (b && buf)
        b->ops->free(b->ctx, buf);
}

tw_status tw_backend_upload(tw_backend *b, tw_tensor dst, const void *src, size_t bytes,
                            tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    if (!src)
        return fail(err, op, "argument src is NULL");
    TW_TRY(check_count(op, "bytes", bytes, err));
    TW_TRY(check_view(op, "dst", dst, bytes, 1, err));
    return b->ops->upload(b->ctx, dst, src, bytes, err);
}

tw_status tw_backend_download(tw_backend *b, void *dst, tw_tensor src, size_t bytes,
                              tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    if (!dst)
        return fail(err, op, "argument dst is NULL");
    TW_TRY(check_count(op, "bytes", bytes, err));
    TW_TRY(check_view(op, "src", src, bytes, 1, err));
    return b->ops->download(b->ctx, dst, src, bytes, err);
}

tw_status tw_backend_zero(tw_backend *b, tw_tensor t, size_t bytes, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_count(op, "bytes", bytes, err));
    TW_TRY(check_view(op, "t", t, bytes, 1, err));
    return b->ops->zero(b->ctx, t, bytes, err);
}

/* ---- compute ---- */

/* The operands of a product c[m, n] = op(a)[m, k] op(b)[k, n]: sizes, views, c apart from a and b. */
static tw_status check_product(const char *op, int m, int n, int k, tw_tensor a, tw_tensor bm, tw_tensor c,
                               tw_error *err)
{
    TW_TRY(check_dim(op, "m", m, err));
    TW_TRY(check_dim(op, "n", n, err));
    TW_TRY(check_dim(op, "k", k, err));
    size_t na = mul(m, k), nb = mul(k, n), nc = mul(m, n);
    TW_TRY(check_f32(op, "a", a, na, err));
    TW_TRY(check_f32(op, "b", bm, nb, err));
    TW_TRY(check_f32(op, "c", c, nc, err));
    TW_TRY(check_disjoint(op, "c", c, nc, "a", a, na, err));
    return check_disjoint(op, "c", c, nc, "b", bm, nb, err);
}

tw_status tw_gemm(tw_backend *b, int trans_a, int trans_b, int m, int n, int k, float alpha,
                  tw_tensor a, tw_tensor bm, float beta, tw_tensor c, tw_error *err)
{
    TW_TRY(check_backend(__func__, b, err));
    TW_TRY(check_product(__func__, m, n, k, a, bm, c, err));
    return b->ops->gemm(b->ctx, trans_a != 0, trans_b != 0, m, n, k, alpha, a, bm, beta, c, err);
}

/* Checks rows and cols and returns rows * cols in *count. */
static tw_status check_matrix(const char *op, int rows, int cols, size_t *count, tw_error *err)
{
    TW_TRY(check_dim(op, "rows", rows, err));
    TW_TRY(check_dim(op, "cols", cols, err));
    *count = mul(rows, cols);
    return TW_OK;
}

tw_status tw_bias_add(tw_backend *b, tw_tensor y, tw_tensor bias, int rows, int cols, tw_error *err)
{
    const char *op = __func__;
    size_t count;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_matrix(op, rows, cols, &count, err));
    TW_TRY(check_f32(op, "y", y, count, err));
    TW_TRY(check_f32(op, "bias", bias, (size_t)cols, err));
    TW_TRY(check_disjoint(op, "y", y, count, "bias", bias, (size_t)cols, err));
    return b->ops->bias_add(b->ctx, y, bias, rows, cols, err);
}

tw_status tw_bias_grad(tw_backend *b, tw_tensor dbias, tw_tensor dy, int rows, int cols,
                       tw_error *err)
{
    const char *op = __func__;
    size_t count;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_matrix(op, rows, cols, &count, err));
    TW_TRY(check_f32(op, "dbias", dbias, (size_t)cols, err));
    TW_TRY(check_f32(op, "dy", dy, count, err));
    TW_TRY(check_disjoint(op, "dbias", dbias, (size_t)cols, "dy", dy, count, err));
    return b->ops->bias_grad(b->ctx, dbias, dy, rows, cols, err);
}

static tw_status check_activation(const char *op, tw_activation a, tw_error *err)
{
    if (a == TW_ACT_NONE || a == TW_ACT_RELU || a == TW_ACT_TANH || a == TW_ACT_SIGMOID)
        return TW_OK;
    return fail(err, op, "unknown activation %d", (int)a);
}

tw_status tw_act_fwd(tw_backend *b, tw_activation a, tw_tensor y, tw_tensor x, size_t n,
                     tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_activation(op, a, err));
    TW_TRY(check_count(op, "n", n, err));
    TW_TRY(check_f32(op, "y", y, n, err));
    TW_TRY(check_f32(op, "x", x, n, err));
    return b->ops->act_fwd(b->ctx, a, y, x, n, err);
}

tw_status tw_act_bwd(tw_backend *b, tw_activation a, tw_tensor dx, tw_tensor dy, tw_tensor y,
                     size_t n, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_activation(op, a, err));
    TW_TRY(check_count(op, "n", n, err));
    TW_TRY(check_f32(op, "dx", dx, n, err));
    TW_TRY(check_f32(op, "dy", dy, n, err));
    TW_TRY(check_f32(op, "y", y, n, err));
    return b->ops->act_bwd(b->ctx, a, dx, dy, y, n, err);
}

/* The checks of both dropout directions: out and in hold n values, 0 <= rate < 1. */
static tw_status check_dropout(const char *op, const tw_backend *b, const char *out_arg, tw_tensor out,
                               const char *in_arg, tw_tensor in, size_t n, float rate, tw_error *err)
{
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_count(op, "n", n, err));
    if (!(rate >= 0.0f && rate < 1.0f))
        return fail(err, op, "rate %g outside [0, 1)", (double)rate);
    TW_TRY(check_f32(op, out_arg, out, n, err));
    return check_f32(op, in_arg, in, n, err);
}

tw_status tw_dropout_fwd(tw_backend *b, tw_tensor y, tw_tensor x, size_t n, float rate,
                         uint64_t seed, tw_error *err)
{
    TW_TRY(check_dropout(__func__, b, "y", y, "x", x, n, rate, err));
    return b->ops->dropout_fwd(b->ctx, y, x, n, rate, seed, err);
}

tw_status tw_dropout_bwd(tw_backend *b, tw_tensor dx, tw_tensor dy, size_t n, float rate,
                         uint64_t seed, tw_error *err)
{
    TW_TRY(check_dropout(__func__, b, "dx", dx, "dy", dy, n, rate, err));
    return b->ops->dropout_bwd(b->ctx, dx, dy, n, rate, seed, err);
}

tw_status tw_im2col(tw_backend *b, const tw_window *w, tw_tensor cols, tw_tensor x, tw_error *err)
{
    const char *op = __func__;
    window_sizes sz;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_window(op, w, &sz, err));
    TW_TRY(check_f32(op, "cols", cols, sz.cols, err));
    TW_TRY(check_f32(op, "x", x, sz.x, err));
    TW_TRY(check_disjoint(op, "cols", cols, sz.cols, "x", x, sz.x, err));
    return b->ops->im2col(b->ctx, w, cols, x, err);
}

tw_status tw_col2im(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor cols, tw_error *err)
{
    const char *op = __func__;
    window_sizes sz;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_window(op, w, &sz, err));
    TW_TRY(check_f32(op, "dx", dx, sz.x, err));
    TW_TRY(check_f32(op, "cols", cols, sz.cols, err));
    TW_TRY(check_disjoint(op, "dx", dx, sz.x, "cols", cols, sz.cols, err));
    return b->ops->col2im(b->ctx, w, dx, cols, err);
}

int tw_backend_has_conv(const tw_backend *b)
{
    return b && b->ops->conv_fwd && b->ops->conv_bwd;
}

/* The value counts of a direct convolution: x and y as in window_sizes (y with `filters` channels) and
 * f = taps * in_c * filters; fails where b has no direct convolution. */
typedef struct {
    size_t x, y, f;
} conv_sizes;

/* b exists and offers the optional op (offered: 1), else TW_ERR_UNSUPPORTED naming `what`. */
static tw_status check_offers(const char *op, const tw_backend *b, int offered, const char *what,
                              tw_error *err)
{
    TW_TRY(check_backend(op, b, err));
    if (!offered)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "%s: the %s backend has no %s", op,
                            b->ops->kind, what);
    return TW_OK;
}

static tw_status check_conv(const char *op, const tw_backend *b, const tw_window *w, int filters,
                            conv_sizes *cs, tw_error *err)
{
    window_sizes sz;
    TW_TRY(check_offers(op, b, tw_backend_has_conv(b), "direct convolution", err));
    TW_TRY(check_window(op, w, &sz, err));
    TW_TRY(check_dim(op, "filters", filters, err));
    cs->x = sz.x;
    cs->y = mul(sz.rows, (size_t)filters);
    cs->f = mul(mul(mul(mul((size_t)w->k_d, (size_t)w->k_h), (size_t)w->k_w), (size_t)w->in_c),
                (size_t)filters);
    return TW_OK;
}

tw_status tw_conv_fwd(tw_backend *b, const tw_window *w, int filters, tw_tensor y, tw_tensor x,
                      tw_tensor f, tw_tensor bias, tw_error *err)
{
    const char *op = __func__;
    conv_sizes cs = {0};
    TW_TRY(check_conv(op, b, w, filters, &cs, err));
    TW_TRY(check_f32(op, "y", y, cs.y, err));
    TW_TRY(check_f32(op, "x", x, cs.x, err));
    TW_TRY(check_f32(op, "f", f, cs.f, err));
    TW_TRY(check_f32(op, "bias", bias, (size_t)filters, err));
    TW_TRY(check_disjoint(op, "y", y, cs.y, "x", x, cs.x, err));
    TW_TRY(check_disjoint(op, "y", y, cs.y, "f", f, cs.f, err));
    TW_TRY(check_disjoint(op, "y", y, cs.y, "bias", bias, (size_t)filters, err));
    return b->ops->conv_fwd(b->ctx, w, filters, y, x, f, bias, err);
}

/* dx's and f's checks for tw_conv_bwd, dx being given. */
static tw_status check_conv_dx(const char *op, const conv_sizes *cs, tw_tensor dx, tw_tensor dy, tw_tensor f,
                               tw_tensor df, tw_tensor x, int filters, tw_tensor dbias, tw_error *err)
{
    TW_TRY(check_f32(op, "dx", dx, cs->x, err));
    TW_TRY(check_f32(op, "f", f, cs->f, err));
    TW_TRY(check_disjoint(op, "dx", dx, cs->x, "dy", dy, cs->y, err));
    TW_TRY(check_disjoint(op, "dx", dx, cs->x, "f", f, cs->f, err));
    TW_TRY(check_disjoint(op, "dx", dx, cs->x, "x", x, cs->x, err));
    TW_TRY(check_disjoint(op, "dx", dx, cs->x, "df", df, cs->f, err));
    TW_TRY(check_disjoint(op, "dx", dx, cs->x, "dbias", dbias, (size_t)filters, err));
    return TW_OK;
}

tw_status tw_conv_bwd(tw_backend *b, const tw_window *w, int filters, tw_tensor df, tw_tensor dbias,
                      tw_tensor dx, tw_tensor x, tw_tensor dy, tw_tensor f, tw_error *err)
{
    const char *op = __func__;
    conv_sizes cs = {0};
    TW_TRY(check_conv(op, b, w, filters, &cs, err));
    TW_TRY(check_f32(op, "df", df, cs.f, err));
    TW_TRY(check_f32(op, "dbias", dbias, (size_t)filters, err));
    TW_TRY(check_f32(op, "x", x, cs.x, err));
    TW_TRY(check_f32(op, "dy", dy, cs.y, err));
    TW_TRY(check_disjoint(op, "df", df, cs.f, "x", x, cs.x, err));
    TW_TRY(check_disjoint(op, "df", df, cs.f, "dy", dy, cs.y, err));
    TW_TRY(check_disjoint(op, "df", df, cs.f, "dbias", dbias, (size_t)filters, err));
    TW_TRY(check_disjoint(op, "dbias", dbias, (size_t)filters, "x", x, cs.x, err));
    TW_TRY(check_disjoint(op, "dbias", dbias, (size_t)filters, "dy", dy, cs.y, err));
    if (dx.buf)
        TW_TRY(check_conv_dx(op, &cs, dx, dy, f, df, x, filters, dbias, err));
    return b->ops->conv_bwd(b->ctx, w, filters, df, dbias, dx, x, dy, f, err);
}

/* A pooling window whose input indices fit the int32 argmax. */
static tw_status check_pool(const char *op, const tw_window *w, window_sizes *sz, tw_error *err)
{
    TW_TRY(check_window(op, w, sz, err));
    if (sz->x > (size_t)INT32_MAX)
        return fail(err, op, "input of %zu values does not fit the int32 argmax", sz->x);
    return TW_OK;
}

tw_status tw_maxpool_fwd(tw_backend *b, const tw_window *w, tw_tensor y, tw_tensor argmax,
                         tw_tensor x, tw_error *err)
{
    const char *op = __func__;
    window_sizes sz;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_pool(op, w, &sz, err));
    TW_TRY(check_f32(op, "y", y, sz.y, err));
    TW_TRY(check_i32(op, "argmax", argmax, sz.y, err));
    TW_TRY(check_f32(op, "x", x, sz.x, err));
    TW_TRY(check_disjoint(op, "y", y, sz.y, "x", x, sz.x, err));
    TW_TRY(check_disjoint(op, "argmax", argmax, sz.y, "x", x, sz.x, err));
    TW_TRY(check_disjoint(op, "argmax", argmax, sz.y, "y", y, sz.y, err));
    return b->ops->maxpool_fwd(b->ctx, w, y, argmax, x, err);
}

/* The arguments of a max-pool backward (its backend checked already). */
static tw_status check_pool_bwd(const char *op, const tw_window *w, tw_tensor dx, tw_tensor dy,
                                tw_tensor argmax, window_sizes *sz, tw_error *err)
{
    TW_TRY(check_pool(op, w, sz, err));
    TW_TRY(check_f32(op, "dx", dx, sz->x, err));
    TW_TRY(check_f32(op, "dy", dy, sz->y, err));
    TW_TRY(check_i32(op, "argmax", argmax, sz->y, err));
    TW_TRY(check_disjoint(op, "dx", dx, sz->x, "dy", dy, sz->y, err));
    return check_disjoint(op, "dx", dx, sz->x, "argmax", argmax, sz->y, err);
}

tw_status tw_maxpool_bwd(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor dy,
                         tw_tensor argmax, tw_error *err)
{
    const char *op = __func__;
    window_sizes sz;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_pool_bwd(op, w, dx, dy, argmax, &sz, err));
    return b->ops->maxpool_bwd(b->ctx, w, dx, dy, argmax, err);
}

int tw_backend_has_maxpool_bwd_relu(const tw_backend *b) { return b && b->ops->maxpool_bwd_relu; }

tw_status tw_maxpool_bwd_relu(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor dy,
                              tw_tensor argmax, tw_tensor x, tw_error *err)
{
    const char *op = __func__;
    window_sizes sz;
    TW_TRY(check_offers(op, b, tw_backend_has_maxpool_bwd_relu(b), "fused max-pool backward", err));
    TW_TRY(check_pool_bwd(op, w, dx, dy, argmax, &sz, err));
    TW_TRY(check_f32(op, "x", x, sz.x, err));
    TW_TRY(check_disjoint(op, "dx", dx, sz.x, "x", x, sz.x, err));
    return b->ops->maxpool_bwd_relu(b->ctx, w, dx, dy, argmax, x, err);
}

tw_status tw_add(tw_backend *b, tw_tensor y, tw_tensor a, tw_tensor c, size_t n, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_count(op, "n", n, err));
    TW_TRY(check_f32(op, "y", y, n, err));
    TW_TRY(check_f32(op, "a", a, n, err));
    TW_TRY(check_f32(op, "c", c, n, err));
    return b->ops->add(b->ctx, y, a, c, n, err);
}

tw_status tw_copy_cols(tw_backend *b, tw_tensor dst, int dst_cols, int dst_at, tw_tensor src, int src_cols,
                       int src_at, int rows, int cols, int accumulate, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_dim(op, "rows", rows, err));
    TW_TRY(check_dim(op, "cols", cols, err));
    if (dst_at < 0 || src_at < 0 || dst_at > dst_cols - cols || src_at > src_cols - cols)
        return fail(err, op, "columns [%d, %d) of %d and [%d, %d) of %d", dst_at, dst_at + cols, dst_cols,
                    src_at, src_at + cols, src_cols);
    TW_TRY(check_f32(op, "dst", dst, mul(rows, dst_cols), err));
    TW_TRY(check_f32(op, "src", src, mul(rows, src_cols), err));
    TW_TRY(check_disjoint(op, "dst", dst, mul(rows, dst_cols), "src", src, mul(rows, src_cols), err));
    return b->ops->copy_cols(b->ctx, dst, dst_cols, dst_at, src, src_cols, src_at, rows, cols, accumulate, err);
}

tw_status tw_avgpool_fwd(tw_backend *b, const tw_window *w, tw_tensor y, tw_tensor x, tw_error *err)
{
    const char *op = __func__;
    window_sizes sz;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_pool(op, w, &sz, err));
    TW_TRY(check_f32(op, "y", y, sz.y, err));
    TW_TRY(check_f32(op, "x", x, sz.x, err));
    TW_TRY(check_disjoint(op, "y", y, sz.y, "x", x, sz.x, err));
    return b->ops->avgpool_fwd(b->ctx, w, y, x, err);
}

tw_status tw_avgpool_bwd(tw_backend *b, const tw_window *w, tw_tensor dx, tw_tensor dy, tw_error *err)
{
    const char *op = __func__;
    window_sizes sz;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_pool(op, w, &sz, err));
    TW_TRY(check_f32(op, "dx", dx, sz.x, err));
    TW_TRY(check_f32(op, "dy", dy, sz.y, err));
    TW_TRY(check_disjoint(op, "dx", dx, sz.x, "dy", dy, sz.y, err));
    return b->ops->avgpool_bwd(b->ctx, w, dx, dy, err);
}

/* A batch normalisation's sizes, and its per-channel views. */
static tw_status check_bn(const char *op, const tw_bn *p, tw_tensor gamma, tw_tensor stats, size_t *count,
                          tw_error *err)
{
    if (!p)
        return fail(err, op, "no parameters (NULL)");
    TW_TRY(check_matrix(op, p->rows, p->channels, count, err));
    if (p->mode != TW_BN_INFER && p->mode != TW_BN_TRAIN && p->mode != TW_BN_TRAIN_UPDATE)
        return fail(err, op, "unknown mode %d", (int)p->mode);
    if (!(p->momentum >= 0.0f && p->momentum < 1.0f) || !(p->epsilon > 0.0f))
        return fail(err, op, "momentum %g outside [0, 1) or epsilon %g not > 0", (double)p->momentum,
                    (double)p->epsilon);
    TW_TRY(check_f32(op, "gamma", gamma, (size_t)p->channels, err));
    return check_f32(op, "stats", stats, 2 * (size_t)p->channels, err);
}

tw_status tw_bn_fwd(tw_backend *b, const tw_bn *p, tw_tensor y, tw_tensor x, tw_tensor gamma, tw_tensor beta,
                    tw_tensor stats, tw_tensor moving, tw_error *err)
{
    const char *op = __func__;
    size_t count = 0;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_bn(op, p, gamma, stats, &count, err));
    TW_TRY(check_f32(op, "y", y, count, err));
    TW_TRY(check_f32(op, "x", x, count, err));
    TW_TRY(check_f32(op, "beta", beta, (size_t)p->channels, err));
    TW_TRY(check_f32(op, "moving", moving, 2 * (size_t)p->channels, err));
    TW_TRY(check_disjoint(op, "stats", stats, 2 * (size_t)p->channels, "moving", moving, 2 * (size_t)p->channels,
                          err));
    return b->ops->bn_fwd(b->ctx, p, y, x, gamma, beta, stats, moving, err);
}

tw_status tw_bn_bwd(tw_backend *b, const tw_bn *p, tw_tensor dx, tw_tensor dgamma, tw_tensor dbeta, tw_tensor dy,
                    tw_tensor x, tw_tensor gamma, tw_tensor stats, tw_error *err)
{
    const char *op = __func__;
    size_t count = 0;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_bn(op, p, gamma, stats, &count, err));
    if (p->mode == TW_BN_INFER)
        return fail(err, op, "the backward pass follows a training forward (mode TRAIN)");
    if (dx.buf)
        TW_TRY(check_f32(op, "dx", dx, count, err));
    TW_TRY(check_f32(op, "dgamma", dgamma, (size_t)p->channels, err));
    TW_TRY(check_f32(op, "dbeta", dbeta, (size_t)p->channels, err));
    TW_TRY(check_f32(op, "dy", dy, count, err));
    TW_TRY(check_f32(op, "x", x, count, err));
    return b->ops->bn_bwd(b->ctx, p, dx, dgamma, dbeta, dy, x, gamma, stats, err);
}

/* Label smoothing in [0, 1). */
static tw_status check_smoothing(const char *op, float smoothing, tw_error *err)
{
    return smoothing >= 0.0f && smoothing < 1.0f ? TW_OK : fail(err, op, "smoothing %g outside [0, 1)", (double)smoothing);
}

tw_status tw_xent_fwd(tw_backend *b, tw_tensor loss, tw_tensor probs, tw_tensor logits,
                      tw_tensor labels, int rows, int classes, float smoothing, tw_error *err)
{
    const char *op = __func__;
    size_t count;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_dim(op, "rows", rows, err));
    TW_TRY(check_dim(op, "classes", classes, err));
    count = mul(rows, classes);
    TW_TRY(check_f32(op, "loss", loss, (size_t)rows, err));
    TW_TRY(check_f32(op, "probs", probs, count, err));
    TW_TRY(check_f32(op, "logits", logits, count, err));
    TW_TRY(check_i32(op, "labels", labels, (size_t)rows, err));
    TW_TRY(check_disjoint(op, "loss", loss, (size_t)rows, "logits", logits, count, err));
    TW_TRY(check_disjoint(op, "loss", loss, (size_t)rows, "probs", probs, count, err));
    TW_TRY(check_disjoint(op, "probs", probs, count, "logits", logits, count, err));
    TW_TRY(check_smoothing(op, smoothing, err));
    return b->ops->xent_fwd(b->ctx, loss, probs, logits, labels, rows, classes, smoothing, err);
}

tw_status tw_xent_bwd(tw_backend *b, tw_tensor dlogits, tw_tensor probs, tw_tensor labels,
                      int rows, int classes, float scale, float smoothing, tw_error *err)
{
    const char *op = __func__;
    size_t count;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_dim(op, "rows", rows, err));
    TW_TRY(check_dim(op, "classes", classes, err));
    count = mul(rows, classes);
    TW_TRY(check_f32(op, "dlogits", dlogits, count, err));
    TW_TRY(check_f32(op, "probs", probs, count, err));
    TW_TRY(check_i32(op, "labels", labels, (size_t)rows, err));
    TW_TRY(check_smoothing(op, smoothing, err));
    return b->ops->xent_bwd(b->ctx, dlogits, probs, labels, rows, classes, scale, smoothing, err);
}

tw_status tw_mse_fwd(tw_backend *b, tw_tensor loss, tw_tensor pred, tw_tensor target, int rows,
                     int cols, tw_error *err)
{
    const char *op = __func__;
    size_t count;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_matrix(op, rows, cols, &count, err));
    TW_TRY(check_f32(op, "loss", loss, (size_t)rows, err));
    TW_TRY(check_f32(op, "pred", pred, count, err));
    TW_TRY(check_f32(op, "target", target, count, err));
    TW_TRY(check_disjoint(op, "loss", loss, (size_t)rows, "pred", pred, count, err));
    TW_TRY(check_disjoint(op, "loss", loss, (size_t)rows, "target", target, count, err));
    return b->ops->mse_fwd(b->ctx, loss, pred, target, rows, cols, err);
}

tw_status tw_mse_bwd(tw_backend *b, tw_tensor dpred, tw_tensor pred, tw_tensor target, size_t n,
                     float scale, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_count(op, "n", n, err));
    TW_TRY(check_f32(op, "dpred", dpred, n, err));
    TW_TRY(check_f32(op, "pred", pred, n, err));
    TW_TRY(check_f32(op, "target", target, n, err));
    return b->ops->mse_bwd(b->ctx, dpred, pred, target, n, scale, err);
}

tw_status tw_sum_squares(tw_backend *b, tw_tensor out, tw_tensor x, size_t n, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    TW_TRY(check_count(op, "n", n, err));
    TW_TRY(check_f32(op, "out", out, 1, err));
    TW_TRY(check_f32(op, "x", x, n, err));
    TW_TRY(check_disjoint(op, "out", out, 1, "x", x, n, err));
    return b->ops->sum_squares(b->ctx, out, x, n, err);
}

/* ---- update and collectives ---- */

/* The update's parameters and the views its kind uses: slot1 for MOMENTUM and ADAM, slot2 for ADAM,
 * ema when u->ema; each of those [n] and apart from params. */
static tw_status check_update(const char *op, const tw_update *u, tw_tensor params, tw_tensor grads,
                              tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n, tw_error *err)
{
    if (!u)
        return fail(err, op, "no update (NULL)");
    if (u->kind != TW_OPT_SGD && u->kind != TW_OPT_MOMENTUM && u->kind != TW_OPT_ADAM)
        return fail(err, op, "unknown optimizer %d", (int)u->kind);
    TW_TRY(check_count(op, "n", n, err));
    if (u->l2_count > n)
        return fail(err, op, "l2_count %zu exceeds n %zu", u->l2_count, n);
    TW_TRY(check_f32(op, "params", params, n, err));
    TW_TRY(check_f32(op, "grads", grads, n, err));
    TW_TRY(check_disjoint(op, "params", params, n, "grads", grads, n, err));
    if (u->kind != TW_OPT_SGD) {
        TW_TRY(check_f32(op, "slot1", slot1, n, err));
        TW_TRY(check_disjoint(op, "slot1", slot1, n, "params", params, n, err));
    }
    if (u->kind == TW_OPT_ADAM) {
        TW_TRY(check_f32(op, "slot2", slot2, n, err));
        TW_TRY(check_disjoint(op, "slot2", slot2, n, "params", params, n, err));
        TW_TRY(check_disjoint(op, "slot2", slot2, n, "slot1", slot1, n, err));
    }
    if (u->ema) {
        TW_TRY(check_f32(op, "ema", ema, n, err));
        TW_TRY(check_disjoint(op, "ema", ema, n, "params", params, n, err));
    }
    return TW_OK;
}

tw_status tw_update_step(tw_backend *b, const tw_update *u, tw_tensor params, tw_tensor grads,
                         tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n, tw_error *err)
{
    TW_TRY(check_backend(__func__, b, err));
    TW_TRY(check_update(__func__, u, params, grads, slot1, slot2, ema, n, err));
    return b->ops->update(b->ctx, u, params, grads, slot1, slot2, ema, n, err);
}

/* Every tower is a backend of towers[0]'s kind and bufs[i] holds n values. */
static tw_status check_group(const char *op, tw_backend *const *towers, int n_towers,
                             const tw_tensor *bufs, size_t n, tw_error *err)
{
    if (!towers || !bufs)
        return fail(err, op, "argument %s is NULL", towers ? "bufs" : "towers");
    TW_TRY(check_dim(op, "n_towers", n_towers, err));
    TW_TRY(check_count(op, "n", n, err));
    for (int i = 0; i < n_towers; i++) {
        char arg[32];
        snprintf(arg, sizeof arg, "bufs[%d]", i);
        if (!towers[i])
            return fail(err, op, "towers[%d] is NULL", i);
        if (towers[i]->ops != towers[0]->ops)
            return fail(err, op, "towers[%d] is a %s backend, towers[0] a %s one", i,
                        towers[i]->ops->kind, towers[0]->ops->kind);
        TW_TRY(check_f32(op, arg, bufs[i], n, err));
    }
    return TW_OK;
}

int tw_backend_has_update_mean(const tw_backend *b) { return b && b->ops->update_mean; }

tw_status tw_update_mean(tw_backend *b, const tw_update *u, tw_tensor params, const tw_tensor *grads,
                         int n_grads, tw_tensor slot1, tw_tensor slot2, tw_tensor ema, size_t n,
                         tw_error *err)
{
    TW_TRY(check_backend(__func__, b, err));
    if (!b->ops->update_mean)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "%s: the %s backend has no fused "
                            "all-reduce and update", __func__, b->ops->kind);
    if (!grads)
        return fail(err, __func__, "argument grads is NULL");
    TW_TRY(check_dim(__func__, "n_grads", n_grads, err));
    for (int i = 0; i < n_grads; i++) {
        TW_TRY(check_update(__func__, u, params, grads[i], slot1, slot2, ema, n, err));
        for (int j = 0; j < i; j++)
            TW_TRY(check_disjoint(__func__, "grads", grads[i], n, "grads", grads[j], n, err));
    }
    return b->ops->update_mean(b->ctx, u, params, grads, n_grads, slot1, slot2, ema, n, err);
}

int tw_backend_has_gemm_update(const tw_backend *b) { return b && b->ops->gemm_update; }

tw_status tw_gemm_update(tw_backend *b, const tw_update *u, int trans_a, int trans_b, int m, int n, int k,
                         tw_tensor a, tw_tensor bm, tw_tensor grads, tw_tensor params, tw_tensor slot1,
                         tw_tensor slot2, tw_tensor ema, tw_error *err)
{
    TW_TRY(check_backend(__func__, b, err));
    if (!b->ops->gemm_update)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "%s: the %s backend has no fused weight "
                            "gradient and update", __func__, b->ops->kind);
    TW_TRY(check_product(__func__, m, n, k, a, bm, grads, err));
    size_t nc = mul(m, n);
    TW_TRY(check_update(__func__, u, params, grads, slot1, slot2, ema, nc, err));
    TW_TRY(check_disjoint(__func__, "params", params, nc, "a", a, mul(m, k), err));
    TW_TRY(check_disjoint(__func__, "params", params, nc, "b", bm, mul(k, n), err));
    return b->ops->gemm_update(b->ctx, u, trans_a != 0, trans_b != 0, m, n, k, a, bm, grads, params, slot1,
                               slot2, ema, err);
}

int tw_backend_allreduce_splits(const tw_backend *b) { return b && b->ops->allreduce_split; }

tw_status tw_backend_allreduce_avg(tw_backend *const *towers, int n_towers, const tw_tensor *bufs,
                                   size_t n, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_group(op, towers, n_towers, bufs, n, err));
    void **ctxs = malloc((size_t)n_towers * sizeof *ctxs);
    if (!ctxs)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "%s: out of memory", op);
    for (int i = 0; i < n_towers; i++)
        ctxs[i] = towers[i]->ctx;
    tw_status s = towers[0]->ops->allreduce_avg((void *const *)ctxs, n_towers, bufs, n, err);
    free(ctxs);
    return s;
}

tw_status tw_backend_sync(tw_backend *b, tw_error *err)
{
    TW_TRY(check_backend(__func__, b, err));
    return b->ops->sync(b->ctx, err);
}

/* ---- host memory, math mode and step graphs ---- */

tw_status tw_backend_alloc_host(tw_backend *b, size_t bytes, void **out, tw_error *err)
{
    const char *op = __func__;
    TW_TRY(check_backend(op, b, err));
    if (!out)
        return fail(err, op, "argument out is NULL");
    TW_TRY(check_count(op, "bytes", bytes, err));
    *out = NULL;
    if (b->ops->alloc_host)
        return b->ops->alloc_host(b->ctx, bytes, out, err);
    *out = malloc(bytes);
    return *out ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "%s: out of memory", op);
}

void tw_backend_free_host(tw_backend *b, void *p)
{
    if (!p)
        return;
    if (b && b->ops->free_host)
        b->ops->free_host(b->ctx, p);
    else
        free(p);
}

tw_status tw_backend_set_math(tw_backend *b, const tw_math *m, tw_error *err)
{
    TW_TRY(check_backend(__func__, b, err));
    return b->ops->set_math ? b->ops->set_math(b->ctx, m, err) : TW_OK;
}

int tw_backend_has_graphs(const tw_backend *b)
{
    return b && b->ops->capture_begin && b->ops->capture_end && b->ops->replay;
}

static tw_status check_graphs(const char *op, const tw_backend *b, tw_error *err)
{
    TW_TRY(check_backend(op, b, err));
    if (!tw_backend_has_graphs(b))
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "%s: the %s backend has no graphs", op,
                            b->ops->kind);
    return TW_OK;
}

static tw_status check_slot(const char *op, int slot, tw_error *err)
{
    if (slot >= 0 && slot < TW_GRAPH_SLOTS)
        return TW_OK;
    return fail(err, op, "slot must be in [0, %d), got %d", (int)TW_GRAPH_SLOTS, slot);
}

tw_status tw_backend_capture_begin(tw_backend *b, tw_error *err)
{
    TW_TRY(check_graphs(__func__, b, err));
    return b->ops->capture_begin(b->ctx, err);
}

tw_status tw_backend_capture_end(tw_backend *b, int slot, int ok, tw_error *err)
{
    TW_TRY(check_graphs(__func__, b, err));
    tw_status s = check_slot(__func__, slot, err);
    if (s != TW_OK) {
        tw_error drop;
        (void)b->ops->capture_end(b->ctx, 0, 0, &drop); /* never leave b capturing */
        return s;
    }
    return b->ops->capture_end(b->ctx, slot, ok != 0, err);
}

tw_status tw_backend_replay(tw_backend *b, int slot, tw_error *err)
{
    TW_TRY(check_graphs(__func__, b, err));
    TW_TRY(check_slot(__func__, slot, err));
    return b->ops->replay(b->ctx, slot, err);
}

/* ---- a world of processes ---- */

int tw_backend_has_world(const tw_backend *b) { return b && b->ops->world_id && b->ops->world_join; }

static tw_status check_world(const char *op, const tw_backend *b, tw_error *err)
{
    TW_TRY(check_backend(op, b, err));
    if (!tw_backend_has_world(b))
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1,
                            "%s: the %s backend cannot join a world of processes", op, b->ops->kind);
    return TW_OK;
}

tw_status tw_backend_world_id(tw_backend *b, void *id, tw_error *err)
{
    TW_TRY(check_world(__func__, b, err));
    if (!id)
        return fail(err, __func__, "argument id is NULL");
    return b->ops->world_id(b->ctx, id, err);
}

tw_status tw_backend_world_join(tw_backend *const *towers, int n_towers, const void *id, int node,
                                int nodes, tw_error *err)
{
    const char *op = __func__;
    if (!towers || n_towers < 1 || !id)
        return fail(err, op, "towers (%d) and id are needed", n_towers);
    if (nodes < 1 || nodes > TW_WORLD_MAX_NODES || node < 0 || node >= nodes)
        return fail(err, op, "node %d of %d nodes: node must be in [0, nodes), nodes in [1, %d]", node,
                    nodes, (int)TW_WORLD_MAX_NODES);
    for (int i = 0; i < n_towers; i++) {
        TW_TRY(check_world(op, towers[i], err));
        if (towers[i]->ops != towers[0]->ops)
            return fail(err, op, "towers[%d] is a %s backend, towers[0] a %s one", i,
                        towers[i]->ops->kind, towers[0]->ops->kind);
        for (int j = 0; j < i; j++)
            if (towers[j] == towers[i])
                return fail(err, op, "towers[%d] and towers[%d] are the same instance", j, i);
    }
    void **ctxs = malloc((size_t)n_towers * sizeof *ctxs);
    if (!ctxs)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "%s: out of memory", op);
    for (int i = 0; i < n_towers; i++)
        ctxs[i] = towers[i]->ctx;
    tw_status s = towers[0]->ops->world_join((void *const *)ctxs, n_towers, id, node, nodes, err);
    free(ctxs);
    return s;
}
