/* elementwise.h — the per-element formulas of training, written once for the CPU loops and the CUDA
 * kernels (TW_HD is __host__ __device__ under nvcc, empty in C).
 *
 * Owns: activations and their derivatives, the optimizer, L2 and EMA updates and the per-element pieces of
 * the losses with TensorFlow 1's formulas (docs/formats.md §6), and the counter-based random numbers dropout
 * uses, so that every backend draws the same mask for the same (seed, step, element). Does not own
 * loops, reductions or memory. */
#ifndef TW_ELEMENTWISE_H
#define TW_ELEMENTWISE_H

#include <stdint.h>

#ifdef __CUDACC__
#define TW_HD __host__ __device__
#else
#define TW_HD
#endif

#include <math.h>

typedef enum {
    TW_ACT_NONE = 0,
    TW_ACT_RELU = 1,
    TW_ACT_TANH = 2,
    TW_ACT_SIGMOID = 3,
} tw_activation;

/* Non-finite values go through as TensorFlow's kernels pass them (checked against tf.nn.relu,
 * tf.nn.tanh, tf.nn.sigmoid and their GradientTape gradients): relu(NaN) = NaN, relu(inf) = inf,
 * relu(-inf) = 0 and relu(-0) = -0 (TF's Eigen max(x, 0) keeps x unless x < 0), so a NaN input reaches
 * the loss and the trainer's NaN/Inf loss check stops the run; tanh and sigmoid propagate NaN as libm
 * does. */
static inline TW_HD float tw_activate(tw_activation a, float x)
{
    switch (a) {
    case TW_ACT_RELU: return x < 0.0f ? 0.0f : x;
    case TW_ACT_TANH: return tanhf(x);
    case TW_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    default: return x;
    }
}

/* d(loss)/d(x) from dy and the activation's OUTPUT y (all three derivatives are functions of y). ReLU is
 * TF's ReluGrad, dy * (y > 0): 0 where y is NaN and dy finite, NaN where dy is NaN or infinite and
 * y <= 0 (0 * inf), -0 for a negative dy there. */
static inline TW_HD float tw_activate_grad(tw_activation a, float dy, float y)
{
    switch (a) {
    case TW_ACT_RELU: return dy * (y > 0.0f ? 1.0f : 0.0f);
    case TW_ACT_TANH: return dy * (1.0f - y * y);
    case TW_ACT_SIGMOID: return dy * y * (1.0f - y);
    default: return dy;
    }
}

/* tf.train.GradientDescentOptimizer: w -= lr * g. */
static inline TW_HD float tw_sgd(float w, float g, float lr) { return w - lr * g; }

/* tf.train.MomentumOptimizer (use_nesterov=False): accum = accum * momentum + g; w -= lr * accum. */
static inline TW_HD float tw_momentum(float w, float g, float *accum, float lr, float momentum)
{
    *accum = *accum * momentum + g;
    return w - lr * *accum;
}

/* tf.train.MomentumOptimizer(use_nesterov=True) (ApplyMomentum): accum = accum * momentum + g;
 * w -= g * lr + accum * momentum * lr. */
static inline TW_HD float tw_nesterov(float w, float g, float *accum, float lr, float momentum)
{
    *accum = *accum * momentum + g;
    return w - (g * lr + *accum * momentum * lr);
}

/* tf.train.AdamOptimizer (ApplyAdam): alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t) is computed once per
 * step by the caller; m += (g - m)(1 - beta1); v += (g^2 - v)(1 - beta2); w -= alpha m / (sqrt(v) + eps). */
static inline TW_HD float tw_adam(float w, float g, float *m, float *v, float alpha, float beta1,
                                  float beta2, float epsilon)
{
    *m += (g - *m) * (1.0f - beta1);
    *v += (g * g - *v) * (1.0f - beta2);
    return w - alpha * *m / (sqrtf(*v) + epsilon);
}

/* tf.train.ExponentialMovingAverage: shadow -= (shadow - value) * (1 - decay). */
static inline TW_HD float tw_ema(float shadow, float value, float decay)
{
    return shadow - (shadow - value) * (1.0f - decay);
}

/* tf.contrib.layers.l2_regularizer's gradient folded into g: d/dw (l2 w^2 / 2) = l2 w (docs/formats.md §6.4). */
static inline TW_HD float tw_l2_grad(float g, float w, float l2) { return g + l2 * w; }

/* The gradient a step takes: the loss's, times the global-norm clipping factor (1 without clipping: g
 * itself), plus L2's term (docs/formats.md §6.10). */
static inline TW_HD float tw_step_grad(float g, float w, float scale, float l2)
{
    return tw_l2_grad(g * scale, w, l2);
}

/* Keras' decoupled weight decay (any optimizer's weight_decay; Adam's makes AdamW): w -= w * wd * lr, before
 * the optimizer's step (docs/formats.md §6.9). wd = 0 leaves w as it is, an infinite one too. */
static inline TW_HD float tw_weight_decay(float w, float wd, float lr) { return wd != 0.0f ? w - w * wd * lr : w; }

/* Sparse softmax cross-entropy (docs/formats.md §6.3), one row with max m and s = sum of tw_xent_exp over it:
 * exp(x - m); the loss from the label's logit; d(loss)/d(logit) of one class from its probability. A NaN
 * or +inf logit makes the row's sum, and so its loss, NaN, as in TF. */
static inline TW_HD float tw_xent_exp(float x, float m) { return expf(x - m); }

static inline TW_HD float tw_xent_loss(float s, float x_label, float m) { return logf(s) - (x_label - m); }

/* Label smoothing e over K classes (tf.losses.softmax_cross_entropy's label_smoothing, docs/formats.md
 * §6.11): the targets are (1 - e) one-hot + e / K, so the row's loss, from d = the sum over the row of
 * (x - m), is log(s) - ((1 - e)(x_label - m) + e / K d). The backends take tw_xent_loss when e = 0, whose
 * bits do not depend on the other logits. */
static inline TW_HD float tw_xent_smooth_loss(float s, float x_label, float m, float d, float e, int classes)
{
    return logf(s) - ((1.0f - e) * (x_label - m) + e / (float)classes * d);
}

/* d(loss)/d(logit) = (prob - target) * scale, the target (1 - e) one-hot + e / K (0 or 1 when e = 0). */
static inline TW_HD float tw_xent_grad(float prob, int is_label, float scale, float e, int classes)
{
    return (prob - ((is_label ? 1.0f - e : 0.0f) + e / (float)classes)) * scale;
}

/* Batch normalisation of one value (docs/formats.md §6.12): gamma (x - mean) inv + beta, inv = 1 / sqrt(var
 * + eps); the moving statistics' update, Keras': moving * momentum + batch * (1 - momentum); and the input's
 * gradient from the channel's sums dbeta = sum dy and dgamma = sum dy xhat over its R values. */
static inline TW_HD float tw_bn_norm(float x, float mean, float inv, float gamma, float beta)
{
    return gamma * ((x - mean) * inv) + beta;
}

static inline TW_HD float tw_bn_moving(float moving, float batch, float momentum)
{
    return moving * momentum + batch * (1.0f - momentum);
}

static inline TW_HD float tw_bn_grad(float dy, float x, float mean, float inv, float gamma, float dbeta,
                                     float dgamma, float rows)
{
    float xhat = (x - mean) * inv;
    return gamma * inv / rows * (rows * dy - dbeta - xhat * dgamma);
}

/* Squared error of one element, and its derivative times scale. */
static inline TW_HD float tw_sq_err(float pred, float target)
{
    float d = pred - target;
    return d * d;
}

static inline TW_HD float tw_sq_err_grad(float pred, float target, float scale)
{
    return 2.0f * (pred - target) * scale;
}

/* splitmix64 finaliser of (seed, counter): a counter-based random stream, identical on every backend. */
static inline TW_HD uint64_t tw_hash64(uint64_t seed, uint64_t counter)
{
    uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform float in [0, 1) with 24 random bits. */
static inline TW_HD float tw_uniform(uint64_t seed, uint64_t counter)
{
    return (float)(tw_hash64(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/* tf.nn.dropout(x, rate): keep with probability 1 - rate, scale kept values by 1 / (1 - rate). Returns
 * the multiplier (0 or 1/(1-rate)) for element `counter` of the draw `seed`. The backends multiply by
 * it, as TF 1's dropout (x * scale * mask) did, so a dropped NaN stays NaN both ways (TF 2's
 * where(mask, x * scale, 0) zeroes it). */
static inline TW_HD float tw_dropout_scale(uint64_t seed, uint64_t counter, float rate)
{
    float keep = 1.0f - rate;
    return tw_uniform(seed, counter) < keep ? 1.0f / keep : 0.0f;
}

#endif
