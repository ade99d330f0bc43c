/* augment.c — data augmentation. See augment.h.
 *
 * Written here: the operations are a few loops each over an fp32 image already in memory, the draws must
 * come from Tower's counter-based stream (the bit-exact resume depends on it), and the bilinear resize is
 * TensorFlow's (half-pixel centres, edge clamped) so a crop looks as tf.image.resize makes it. */
#include "augment.h"

#include <math.h>
#include <string.h>

#include "elementwise.h"

/* The k-th uniform draw in [0, 1) of one example. */
static float u(uint64_t key, uint64_t k) { return tw_uniform(key, k); }

int tw_augment_any(const tw_augment *a)
{
    return a->resized_crop_min_scale > 0 || a->crop_padding > 0 || a->horizontal_flip || a->erasing_probability > 0;
}

size_t tw_augment_scratch(const tw_augment_shape *s, const tw_augment *a)
{
    (void)a;
    return (size_t)s->h * s->w * s->c;
}

/* TF's bilinear sample of src [sh, sw, c] at (y, x) in pixel coordinates (half-pixel centres), channel ch. */
static float sample(const float *src, int sh, int sw, int c, float y, float x, int ch)
{
    y = y < 0 ? 0 : y > sh - 1 ? (float)(sh - 1) : y;
    x = x < 0 ? 0 : x > sw - 1 ? (float)(sw - 1) : x;
    int y0 = (int)y, x0 = (int)x;
    int y1 = y0 + 1 < sh ? y0 + 1 : y0, x1 = x0 + 1 < sw ? x0 + 1 : x0;
    float dy = y - (float)y0, dx = x - (float)x0;
    float top = src[((size_t)y0 * sw + x0) * c + ch] + (src[((size_t)y0 * sw + x1) * c + ch] - src[((size_t)y0 * sw + x0) * c + ch]) * dx;
    float bot = src[((size_t)y1 * sw + x0) * c + ch] + (src[((size_t)y1 * sw + x1) * c + ch] - src[((size_t)y1 * sw + x0) * c + ch]) * dx;
    return top + (bot - top) * dy;
}

/* A rectangle of `area` (a fraction of the image) and aspect ratio r = w / h drawn log-uniform in
 * [1 / max_ratio, max_ratio], clipped to the image; its corner drawn uniformly. Draws k and k + 1..3. */
static void rectangle(const tw_augment_shape *s, uint64_t key, uint64_t k, float area, float max_ratio, int *y0,
                      int *x0, int *rh, int *rw)
{
    float lr = logf(max_ratio), ratio = expf(-lr + 2 * lr * u(key, k));
    float pixels = area * (float)s->h * (float)s->w;
    int w = (int)lroundf(sqrtf(pixels * ratio)), h = (int)lroundf(sqrtf(pixels / ratio));
    *rw = w < 1 ? 1 : w > s->w ? s->w : w;
    *rh = h < 1 ? 1 : h > s->h ? s->h : h;
    *y0 = (int)(u(key, k + 1) * (float)(s->h - *rh + 1));
    *x0 = (int)(u(key, k + 2) * (float)(s->w - *rw + 1));
}

static void resized_crop(const tw_augment *a, const tw_augment_shape *s, uint64_t key, float *x, float *work)
{
    float area = a->resized_crop_min_scale + (1.0f - a->resized_crop_min_scale) * u(key, 0);
    int y0, x0, rh, rw;
    rectangle(s, key, 1, area, a->resized_crop_max_ratio, &y0, &x0, &rh, &rw);
    memcpy(work, x, (size_t)s->h * s->w * s->c * sizeof *x);
    float fy = (float)rh / (float)s->h, fx = (float)rw / (float)s->w;
    for (int i = 0; i < s->h; i++)
        for (int j = 0; j < s->w; j++)
            for (int ch = 0; ch < s->c; ch++)
                x[((size_t)i * s->w + j) * s->c + ch] =
                    sample(work, s->h, s->w, s->c, (float)y0 + ((float)i + 0.5f) * fy - 0.5f,
                           (float)x0 + ((float)j + 0.5f) * fx - 0.5f, ch);
}

/* The image moved by (dy, dx) in [-p, p]: what comes from outside it is zero. */
static void padded_crop(const tw_augment *a, const tw_augment_shape *s, uint64_t key, float *x, float *work)
{
    int p = a->crop_padding;
    int dy = (int)(u(key, 4) * (float)(2 * p + 1)) - p, dx = (int)(u(key, 5) * (float)(2 * p + 1)) - p;
    size_t row = (size_t)s->w * s->c;
    memcpy(work, x, (size_t)s->h * row * sizeof *x);
    for (int i = 0; i < s->h; i++)
        for (int j = 0; j < s->w; j++) {
            int si = i + dy, sj = j + dx;
            float *to = x + (size_t)i * row + (size_t)j * s->c;
            if (si < 0 || si >= s->h || sj < 0 || sj >= s->w)
                memset(to, 0, (size_t)s->c * sizeof *to);
            else
                memcpy(to, work + (size_t)si * row + (size_t)sj * s->c, (size_t)s->c * sizeof *to);
        }
}

static void flip(const tw_augment_shape *s, float *x)
{
    for (int i = 0; i < s->h; i++)
        for (int j = 0; j < s->w / 2; j++)
            for (int ch = 0; ch < s->c; ch++) {
                float *l = x + ((size_t)i * s->w + j) * s->c + ch, *r = x + ((size_t)i * s->w + (s->w - 1 - j)) * s->c + ch;
                float t = *l;
                *l = *r;
                *r = t;
            }
}

static void erase(const tw_augment *a, const tw_augment_shape *s, uint64_t key, float *x)
{
    float area = 0.02f + (a->erasing_max_area - 0.02f) * u(key, 8);
    int y0, x0, rh, rw;
    rectangle(s, key, 9, area, 3.3f, &y0, &x0, &rh, &rw);
    for (int i = y0; i < y0 + rh; i++)
        memset(x + ((size_t)i * s->w + x0) * s->c, 0, (size_t)rw * s->c * sizeof *x);
}

void tw_augment_apply(const tw_augment *a, const tw_augment_shape *s, uint64_t seed, uint64_t epoch,
                      uint64_t index, float *x, float *work)
{
    uint64_t key = tw_hash64(tw_hash64(seed ^ 0x6175676d656e74ull, epoch), index);
    if (a->resized_crop_min_scale > 0)
        resized_crop(a, s, key, x, work);
    if (a->crop_padding > 0)
        padded_crop(a, s, key, x, work);
    if (a->horizontal_flip && u(key, 6) < 0.5f)
        flip(s, x);
    if (a->erasing_probability > 0 && u(key, 7) < a->erasing_probability)
        erase(a, s, key, x);
}
