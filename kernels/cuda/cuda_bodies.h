/* cuda_bodies.h — the per-output work of the CUDA backend's index-heavy kernels, as host-and-device
 * functions (TW_HD) written in C that also compiles as CUDA C++.
 *
 * Owns: what one thread computes for one output of im2col, col2im, max-pool fwd/bwd, the first pass of
 * bias_grad and the fused update: the window geometry of the gathers, their summation order, and the
 * update's choice of formulas. The kernels in cuda_kernels.cu are grid-stride loops around these; the
 * unit test tests/unit/test_cuda_bodies.c runs the same functions on the host against the CPU backend
 * (bit for bit), so the index arithmetic is checked on machines without a GPU. Does not own the
 * per-element formulas (elementwise.h), launches or memory.
 *
 * Layouts are those of backend.h: x [batch, in_d, in_h, in_w, in_c]; window rows [batch, out_d, out_h,
 * out_w]; cols [rows, k_d, k_h, k_w, in_c]; y and argmax [rows, in_c]; all row-major, fp32 unless int32.
 * Indices are 64-bit (size_t); the argument checks of backend.c guarantee every window has an input
 * tap and fits int32 argmax indices. */
#ifndef TW_CUDA_BODIES_H
#define TW_CUDA_BODIES_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* The outputs o along one axis whose window covers input i: o*s - pad + t = i for a tap t in [0, k),
 * i.e. ceil((i + pad - k + 1) / s) <= o <= floor((i + pad) / s), clipped to [0, out). */
static inline TW_HD void tw_cuda_covering(int i, int pad, int k, int s, int out, int *lo, int *hi)
{
    int q = i + pad;
    int h = q / s;
    *hi = h < out - 1 ? h : out - 1;
    *lo = q - k + 1 <= 0 ? 0 : (q - k + 1 + s - 1) / s;
}

/* The output position of row r (b, od, oh, ow in [batch, out_d, out_h, out_w] order); returns b. */
static inline TW_HD size_t tw_cuda_out_position(const tw_window *w, size_t r, int *od, int *oh, int *ow)
{
    *ow = (int)(r % (size_t)w->out_w);
    r /= (size_t)w->out_w;
    *oh = (int)(r % (size_t)w->out_h);
    r /= (size_t)w->out_h;
    *od = (int)(r % (size_t)w->out_d);
    return r / (size_t)w->out_d;
}

/* cols[i]: the input under tap t of output row r for channel ci (i = (r * taps + t) * in_c + ci), 0 in
 * the padding. */
static inline TW_HD float tw_cuda_im2col_at(const tw_window *w, const float *x, size_t i)
{
    size_t c = (size_t)w->in_c, taps = (size_t)w->k_d * w->k_h * w->k_w;
    size_t ci = i % c, rt = i / c;
    size_t t = rt % taps, r = rt / taps;
    int kw = (int)(t % (size_t)w->k_w), kh = (int)(t / (size_t)w->k_w % (size_t)w->k_h),
        kd = (int)(t / (size_t)w->k_w / (size_t)w->k_h);
    int od, oh, ow;
    size_t b = tw_cuda_out_position(w, r, &od, &oh, &ow);
    int id = od * w->s_d - w->pad_d + kd, ih = oh * w->s_h - w->pad_h + kh,
        iw = ow * w->s_w - w->pad_w + kw;
    if (id < 0 || id >= w->in_d || ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w)
        return 0.0f;
    return x[(((b * w->in_d + id) * w->in_h + ih) * w->in_w + iw) * c + ci];
}

/* The coordinates of input i: batch b, position (id, ih, iw), channel ci. */
static inline TW_HD void tw_cuda_input_at(const tw_window *w, size_t i, size_t *b, int *id, int *ih,
                                          int *iw, size_t *ci)
{
    size_t c = (size_t)w->in_c;
    *ci = i % c;
    size_t p = i / c;
    *iw = (int)(p % (size_t)w->in_w);
    p /= (size_t)w->in_w;
    *ih = (int)(p % (size_t)w->in_h);
    p /= (size_t)w->in_h;
    *id = (int)(p % (size_t)w->in_d);
    *b = p / (size_t)w->in_d;
}

/* Input i's coordinates (batch b, position id, ih, iw, channel ci) and, per axis, the outputs whose windows
 * cover it: [d0, d1] x [h0, h1] x [w0, w1] (the gathers of col2im and the pools' backward). */
static inline TW_HD void tw_cuda_covered(const tw_window *w, size_t i, size_t *b, size_t *ci, int *id, int *ih,
                                         int *iw, int *d0, int *d1, int *h0, int *h1, int *w0, int *w1)
{
    tw_cuda_input_at(w, i, b, id, ih, iw, ci);
    tw_cuda_covering(*id, w->pad_d, w->k_d, w->s_d, w->out_d, d0, d1);
    tw_cuda_covering(*ih, w->pad_h, w->k_h, w->s_h, w->out_h, h0, h1);
    tw_cuda_covering(*iw, w->pad_w, w->k_w, w->s_w, w->out_w, w0, w1);
}

/* dx[i] of col2im: the sum of the cols values im2col copied from input i, added in ascending output
 * row (the order in which the CPU's scatter adds them, starting from 0), so bit-identical to it. */
static inline TW_HD float tw_cuda_col2im_at(const tw_window *w, const float *cols, size_t i)
{
    size_t c = (size_t)w->in_c, taps = (size_t)w->k_d * w->k_h * w->k_w, b, ci;
    int id, ih, iw, d0, d1, h0, h1, w0, w1;
    tw_cuda_covered(w, i, &b, &ci, &id, &ih, &iw, &d0, &d1, &h0, &h1, &w0, &w1);
    float s = 0.0f;
    for (int od = d0; od <= d1; od++) {
        int kd = id + w->pad_d - od * w->s_d;
        for (int oh = h0; oh <= h1; oh++) {
            int kh = ih + w->pad_h - oh * w->s_h;
            for (int ow = w0; ow <= w1; ow++) {
                int kw = iw + w->pad_w - ow * w->s_w;
                size_t r = ((b * w->out_d + od) * w->out_h + oh) * w->out_w + ow;
                size_t t = ((size_t)kd * w->k_h + kh) * w->k_w + kw;
                s += cols[(r * taps + t) * c + ci];
            }
        }
    }
    return s;
}

/* y[j] and argmax[j] of max-pool (j = r * in_c + ci): the maximum of x over the window's input taps in
 * tap order, the first maximum winning a tie (as the CPU), and its flat index into x; a NaN at the first
 * tap is kept, a later one skipped (cpu_maxpool_fwd says why). */
static inline TW_HD void tw_cuda_maxpool_at(const tw_window *w, const float *x, size_t j, float *y,
                                            int32_t *argmax)
{
    size_t c = (size_t)w->in_c, ci = j % c, r = j / c;
    int od, oh, ow;
    size_t b = tw_cuda_out_position(w, r, &od, &oh, &ow);
    float best = 0.0f;
    int32_t arg = -1;
    for (int kd = 0; kd < w->k_d; kd++) {
        int id = od * w->s_d - w->pad_d + kd;
        if (id < 0 || id >= w->in_d)
            continue;
        for (int kh = 0; kh < w->k_h; kh++) {
            int ih = oh * w->s_h - w->pad_h + kh;
            if (ih < 0 || ih >= w->in_h)
                continue;
            for (int kw = 0; kw < w->k_w; kw++) {
                int iw = ow * w->s_w - w->pad_w + kw;
                if (iw < 0 || iw >= w->in_w)
                    continue;
                size_t at = (((b * w->in_d + id) * w->in_h + ih) * w->in_w + iw) * c + ci;
                float v = x[at];
                if (arg < 0 || v > best) {
                    best = v;
                    arg = (int32_t)at;
                }
            }
        }
    }
    *y = best;
    *argmax = arg;
}

/* dx[i] of max-pool bwd: the sum of dy[j] over the outputs j whose window covers input i and whose
 * argmax is i, in ascending j (the CPU's scatter order). */
static inline TW_HD float tw_cuda_maxpool_grad_at(const tw_window *w, const float *dy,
                                                  const int32_t *argmax, size_t i)
{
    size_t c = (size_t)w->in_c, b, ci;
    int id, ih, iw, d0, d1, h0, h1, w0, w1;
    tw_cuda_covered(w, i, &b, &ci, &id, &ih, &iw, &d0, &d1, &h0, &h1, &w0, &w1);
    float s = 0.0f;
    for (int od = d0; od <= d1; od++)
        for (int oh = h0; oh <= h1; oh++)
            for (int ow = w0; ow <= w1; ow++) {
                size_t j = (((b * w->out_d + od) * w->out_h + oh) * w->out_w + ow) * c + ci;
                if (argmax[j] == (int32_t)i)
                    s += dy[j];
            }
    return s;
}

/* The input taps of output (od, oh, ow)'s window: the padding's are not counted (average pooling). */
static inline TW_HD int tw_cuda_window_count(const tw_window *w, int od, int oh, int ow)
{
    int n = 1, at[3] = {od * w->s_d - w->pad_d, oh * w->s_h - w->pad_h, ow * w->s_w - w->pad_w};
    int k[3] = {w->k_d, w->k_h, w->k_w}, in[3] = {w->in_d, w->in_h, w->in_w};
    for (int a = 0; a < 3; a++) {
        int lo = at[a] < 0 ? 0 : at[a], hi = at[a] + k[a] > in[a] ? in[a] : at[a] + k[a];
        n *= hi - lo;
    }
    return n;
}

/* y[j] of average pooling (j = r * in_c + ci): the window's input taps summed in tap order from 0, times
 * 1 / their count (cpu_avgpool_fwd's order, so bit-identical). */
static inline TW_HD float tw_cuda_avgpool_at(const tw_window *w, const float *x, size_t j)
{
    size_t c = (size_t)w->in_c, ci = j % c, r = j / c;
    int od, oh, ow;
    size_t b = tw_cuda_out_position(w, r, &od, &oh, &ow);
    float s = 0.0f;
    for (int kd = 0; kd < w->k_d; kd++) {
        int id = od * w->s_d - w->pad_d + kd;
        for (int kh = 0; kh < w->k_h && id >= 0 && id < w->in_d; kh++) {
            int ih = oh * w->s_h - w->pad_h + kh;
            for (int kw = 0; kw < w->k_w && ih >= 0 && ih < w->in_h; kw++) {
                int iw = ow * w->s_w - w->pad_w + kw;
                if (iw >= 0 && iw < w->in_w)
                    s += x[(((b * w->in_d + id) * w->in_h + ih) * w->in_w + iw) * c + ci];
            }
        }
    }
    return s * (1.0f / (float)tw_cuda_window_count(w, od, oh, ow));
}

/* dx[i] of average pooling's backward: dy[j] / count(j) summed over the outputs j whose window covers
 * input i, in ascending j from 0 (the CPU's scatter order). */
static inline TW_HD float tw_cuda_avgpool_grad_at(const tw_window *w, const float *dy, size_t i)
{
    size_t c = (size_t)w->in_c, b, ci;
    int id, ih, iw, d0, d1, h0, h1, w0, w1;
    tw_cuda_covered(w, i, &b, &ci, &id, &ih, &iw, &d0, &d1, &h0, &h1, &w0, &w1);
    float s = 0.0f;
    for (int od = d0; od <= d1; od++)
        for (int oh = h0; oh <= h1; oh++)
            for (int ow = w0; ow <= w1; ow++) {
                size_t j = (((b * w->out_d + od) * w->out_h + oh) * w->out_w + ow) * c + ci;
                s += dy[j] * (1.0f / (float)tw_cuda_window_count(w, od, oh, ow));
            }
    return s;
}

/* bias_grad's first pass: the sum over the rows of chunk j ([j * chunk_rows, min(rows, (j + 1) *
 * chunk_rows)), in order) of dy[r, col], dy [rows, cols]. */
static inline TW_HD float tw_cuda_colsum_chunk(const float *dy, int rows, int cols, int col,
                                               int chunk_rows, int j)
{
    size_t r0 = (size_t)j * (size_t)chunk_rows, r1 = r0 + (size_t)chunk_rows;
    if (r1 > (size_t)rows)
        r1 = (size_t)rows;
    float s = 0.0f;
    for (size_t r = r0; r < r1; r++)
        s += dy[r * (size_t)cols + (size_t)col];
    return s;
}

/* Element i of the fused update: g scaled, plus l2 w and w decayed when i < u->l2_count (the weights), the optimizer step of
 * u->kind on w[i] (s1 = momentum accumulator or Adam m, s2 = Adam v; unused slots may be NULL), then
 * the EMA shadow follows the new w[i] when u->ema (ema may be NULL otherwise). The formulas and their
 * order are cpu_update's. */
static inline TW_HD void tw_cuda_update_at(const tw_update *u, float *w, const float *g, float *s1,
                                           float *s2, float *ema, size_t i)
{
    int weight = i < u->l2_count;
    float gi = tw_step_grad(g[i], w[i], u->grad_scale != 0.0f ? u->grad_scale : 1.0f, weight ? u->l2 : 0.0f);
    float wi = tw_weight_decay(w[i], weight ? u->weight_decay : 0.0f, u->lr);
    if (u->kind == TW_OPT_SGD) {
        wi = tw_sgd(wi, gi, u->lr);
    } else if (u->kind == TW_OPT_MOMENTUM) {
        float a = s1[i];
        wi = u->nesterov ? tw_nesterov(wi, gi, &a, u->lr, u->momentum) : tw_momentum(wi, gi, &a, u->lr, u->momentum);
        s1[i] = a;
    } else {
        float m = s1[i], v = s2[i];
        wi = tw_adam(wi, gi, &m, &v, u->adam_alpha, u->beta1, u->beta2, u->epsilon);
        s1[i] = m;
        s2[i] = v;
    }
    w[i] = wi;
    if (u->ema)
        ema[i] = tw_ema(ema[i], wi, u->ema_decay);
}

#endif
