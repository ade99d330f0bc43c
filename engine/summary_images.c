/* summary_images.c — the grids and the heat map of TensorBoard's IMAGES tab. See summary_images.h.
 *
 * Each renderer turns its values into one source plane per tile ([src_h, src_w, channels] uint8), and
 * blit() copies a plane into its tile of the grid with the layout's zoom and stride. */
#include "summary_images.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_COLS = 256 };

/* ================================ the grid ================================ */

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

static int min_int(int a, int b) { return a < b ? a : b; }

/* Pixels a run of `count` tiles of `tile` pixels takes with the gaps between them. */
static int span(int count, int tile) { return count * tile + (count - 1) * TW_GRID_GAP; }

void tw_summary_grid_layout(int n, int cols, int src_h, int src_w, int zoom, tw_summary_grid *g)
{
    assert(n >= 1 && cols >= 1 && cols <= MAX_COLS && src_h >= 1 && src_w >= 1 && zoom >= 1);
    int rows = ceil_div(n, cols);
    /* the largest tile that fits: at least 14 pixels with MAX_COLS tiles a row */
    int limit_w = (TW_PNG_MAX_SIDE - (cols - 1) * TW_GRID_GAP) / cols;
    int limit_h = (TW_PNG_MAX_SIDE - (rows - 1) * TW_GRID_GAP) / rows;
    int z = min_int(zoom, min_int(limit_w / src_w, limit_h / src_h));
    int stride = 1;
    if (z < 1) {
        z = 1;
        stride = ceil_div(src_w, limit_w) > ceil_div(src_h, limit_h) ? ceil_div(src_w, limit_w)
                                                                       : ceil_div(src_h, limit_h);
    }
    *g = (tw_summary_grid){.n = n, .cols = cols, .rows = rows, .src_h = src_h, .src_w = src_w, .zoom = z,
                           .stride = stride, .tile_h = z * ceil_div(src_h, stride),
                           .tile_w = z * ceil_div(src_w, stride)};
    g->width = span(cols, g->tile_w);
    g->height = span(rows, g->tile_h);
}

/* The zoom that brings a tile of the longer side `side` to about TW_GRID_TILE pixels (>= 1). */
static int zoom_for(int side) { return side < TW_GRID_TILE ? TW_GRID_TILE / side : 1; }

/* A white image the size of g. Caller frees img->pixels. */
static tw_status blank(const tw_summary_grid *g, int channels, tw_png_image *img, tw_error *err)
{
    size_t bytes = (size_t)g->width * (size_t)g->height * (size_t)channels;
    *img = (tw_png_image){.pixels = malloc(bytes), .width = g->width, .height = g->height,
                          .channels = channels};
    if (!img->pixels)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory for a %dx%d image", g->width,
                            g->height);
    memset(img->pixels, 255, bytes);
    return TW_OK;
}

/* Copies src [g->src_h, g->src_w, img->channels] into tile i of img. */
static void blit(const tw_summary_grid *g, tw_png_image *img, int i, const uint8_t *src)
{
    int ch = img->channels;
    int x0 = i % g->cols * (g->tile_w + TW_GRID_GAP), y0 = i / g->cols * (g->tile_h + TW_GRID_GAP);
    for (int ty = 0; ty < g->tile_h; ty++) {
        const uint8_t *row = src + (size_t)(ty / g->zoom * g->stride) * (size_t)g->src_w * (size_t)ch;
        uint8_t *dst = img->pixels + ((size_t)(y0 + ty) * (size_t)img->width + (size_t)x0) * (size_t)ch;
        for (int tx = 0; tx < g->tile_w; tx++)
            memcpy(dst + (size_t)tx * (size_t)ch, row + (size_t)(tx / g->zoom * g->stride) * (size_t)ch,
                   (size_t)ch);
    }
}

/* ================================ values to pixels ================================ */

/* floor(p + 0.5) as a pixel; 0 for anything outside [0, 255] (a NaN, an infinity: never a cast out of
 * range). */
static uint8_t to_pixel(double p)
{
    p = floor(p + 0.5);
    return p >= 0.0 && p <= 255.0 ? (uint8_t)p : 0;
}

/* 255 * (v - lo) / (hi - lo) in double; 0 when hi == lo. */
static uint8_t minmax_pixel(float v, float lo, float hi)
{
    return hi > lo ? to_pixel(255.0 * ((double)v - (double)lo) / ((double)hi - (double)lo)) : 0;
}

/* The least and greatest of some values. */
typedef struct {
    float lo, hi;
} range;

static void widen(range *r, float v)
{
    r->lo = v < r->lo ? v : r->lo;
    r->hi = v > r->hi ? v : r->hi;
}

/* ================================ input samples ================================ */

/* An example's layout: depth, height, width, channels. */
typedef struct {
    int d, h, w, c;
} example_shape;

static example_shape shape_of(const tw_config *c)
{
    const int *s = c->shape;
    switch (c->rank) {
    case 2: return (example_shape){1, s[0], s[1], 1};
    case 3: return (example_shape){1, s[0], s[1], s[2]};
    default: return (example_shape){s[0], s[1], s[2], s[3]};
    }
}

/* Value (y, x, channel k) of the middle slice of example e. */
static float sample_at(const float *e, example_shape s, int y, int x, int k)
{
    return e[(((size_t)(s.d / 2) * (size_t)s.h + (size_t)y) * (size_t)s.w + (size_t)x) * (size_t)s.c +
             (size_t)k];
}

/* The range of the values shown: count examples of x, their middle slices, channels 0..shown-1. */
static range samples_range(const float *x, int count, example_shape s, int shown)
{
    size_t per = (size_t)s.d * (size_t)s.h * (size_t)s.w * (size_t)s.c;
    range r = {sample_at(x, s, 0, 0, 0), sample_at(x, s, 0, 0, 0)};
    for (int i = 0; i < count; i++)
        for (int y = 0; y < s.h; y++)
            for (int xx = 0; xx < s.w; xx++)
                for (int k = 0; k < shown; k++)
                    widen(&r, sample_at(x + (size_t)i * per, s, y, xx, k));
    return r;
}

/* One example's plane [h, w, shown]: its bytes (bytes = 1) or min-max over r. */
static void sample_plane(const float *e, example_shape s, int shown, int bytes, float scale, range r,
                         uint8_t *plane)
{
    for (int y = 0; y < s.h; y++)
        for (int x = 0; x < s.w; x++)
            for (int k = 0; k < shown; k++) {
                float v = sample_at(e, s, y, x, k);
                *plane++ = bytes ? to_pixel((double)v / (double)scale) : minmax_pixel(v, r.lo, r.hi);
            }
}

tw_status tw_summary_render_samples(const tw_config *c, const float *x, int n, tw_png_image *img,
                                    tw_error *err)
{
    *img = (tw_png_image){0};
    if (c->rank < 2 || n < 1)
        return TW_END;
    example_shape s = shape_of(c);
    int count = min_int(n, TW_SAMPLES_MAX), shown = s.c == 3 ? 3 : 1;
    range r = samples_range(x, count, s, shown);
    int bytes = r.lo >= 0.0f && r.hi <= 255.0f * c->scale;
    tw_summary_grid g;
    tw_summary_grid_layout(count, (int)ceil(sqrt((double)count)), s.h, s.w, zoom_for(s.h > s.w ? s.h : s.w),
                           &g);
    uint8_t *plane = malloc((size_t)s.h * (size_t)s.w * (size_t)shown);
    tw_status st = plane ? blank(&g, shown, img, err)
                         : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory for a sample");
    size_t per = (size_t)s.d * (size_t)s.h * (size_t)s.w * (size_t)s.c;
    for (int i = 0; i < count && st == TW_OK; i++) {
        sample_plane(x + (size_t)i * per, s, shown, bytes, c->scale, r, plane);
        blit(&g, img, i, plane);
    }
    free(plane);
    return st;
}

/* ================================ filters ================================ */

const tw_param *tw_summary_first_conv(const tw_model *m)
{
    for (size_t i = 0; i < tw_model_n_params(m); i++) {
        const tw_param *p = tw_model_param(m, i);
        if (p->is_weight && (p->rank == 4 || p->rank == 5))
            return p;
    }
    return NULL;
}

/* A conv kernel's layout: [kd, kh, kw, in_c, filters], kd = 1 for 2-D. */
typedef struct {
    int kd, kh, kw, in_c, filters;
} kernel_shape;

static float kernel_at(const float *w, kernel_shape k, int y, int x, int ch, int f)
{
    return w[((((size_t)(k.kd / 2) * (size_t)k.kh + (size_t)y) * (size_t)k.kw + (size_t)x) * (size_t)k.in_c +
              (size_t)ch) * (size_t)k.filters + (size_t)f];
}

tw_status tw_summary_render_filters(const tw_param *p, const float *values, tw_png_image *img,
                                    tw_error *err)
{
    *img = (tw_png_image){0};
    if (p->rank != 4 && p->rank != 5)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "%s: rank %d is not a conv kernel", p->name,
                            p->rank);
    const int64_t *d = p->shape + (p->rank - 4);
    kernel_shape k = {p->rank == 5 ? (int)p->shape[0] : 1, (int)d[0], (int)d[1], (int)d[2], (int)d[3]};
    int64_t all = (int64_t)k.filters * k.in_c;
    int tiles = all < TW_FILTER_TILES_MAX ? (int)all : TW_FILTER_TILES_MAX;
    int64_t per_row = ceil_div((int)ceil(sqrt((double)tiles)), k.in_c); /* filters a row */
    int cols = per_row * k.in_c < tiles ? (int)(per_row * k.in_c) : tiles;
    range r = {kernel_at(values, k, 0, 0, 0, 0), kernel_at(values, k, 0, 0, 0, 0)};
    for (int t = 0; t < tiles; t++)
        for (int y = 0; y < k.kh; y++)
            for (int x = 0; x < k.kw; x++)
                widen(&r, kernel_at(values, k, y, x, t % k.in_c, t / k.in_c));
    tw_summary_grid g;
    tw_summary_grid_layout(tiles, cols, k.kh, k.kw, zoom_for(k.kh > k.kw ? k.kh : k.kw), &g);
    uint8_t *plane = malloc((size_t)k.kh * (size_t)k.kw);
    tw_status st = plane ? blank(&g, 1, img, err)
                         : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory for a filter");
    for (int t = 0; t < tiles && st == TW_OK; t++) {
        for (int y = 0; y < k.kh; y++)
            for (int x = 0; x < k.kw; x++)
                plane[y * k.kw + x] =
                    minmax_pixel(kernel_at(values, k, y, x, t % k.in_c, t / k.in_c), r.lo, r.hi);
        blit(&g, img, t, plane);
    }
    free(plane);
    return st;
}

/* ================================ the confusion matrix ================================ */

/* ColorBrewer's 9-class sequential "Blues", light to dark. */
static const uint8_t BLUES[9][3] = {{247, 251, 255}, {222, 235, 247}, {198, 219, 239},
                                    {158, 202, 225}, {107, 174, 214}, {66, 146, 198},
                                    {33, 113, 181},  {8, 81, 156},    {8, 48, 107}};

/* t in [0, 1] through BLUES, linear between neighbours. */
static void blues(double t, uint8_t *rgb)
{
    double pos = t * 8.0;
    int i = pos >= 8.0 ? 7 : (int)pos;
    double f = pos - i;
    for (int k = 0; k < 3; k++)
        rgb[k] = (uint8_t)floor(BLUES[i][k] + (BLUES[i + 1][k] - BLUES[i][k]) * f + 0.5);
}

static tw_status check_counts(const int64_t *counts, int k, tw_error *err)
{
    if (!counts || k < 1)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "confusion matrix: %d classes", k);
    if (k > TW_PNG_MAX_SIDE)
        return tw_error_set(err, TW_ERR_TOO_LARGE, NULL, -1,
                            "confusion matrix: %d classes (at most %d in an image)", k, TW_PNG_MAX_SIDE);
    for (size_t i = 0; i < (size_t)k * (size_t)k; i++)
        if (counts[i] < 0)
            return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                                "confusion matrix: count [%zu][%zu] is negative", i / (size_t)k,
                                i % (size_t)k);
    return TW_OK;
}

tw_status tw_summary_render_confusion(const int64_t *counts, int k, tw_png_image *img, tw_error *err)
{
    *img = (tw_png_image){0};
    TW_TRY(check_counts(counts, k, err));
    int cell = TW_CONFUSION_SIDE / k < 1 ? 1 : min_int(TW_CONFUSION_CELL, TW_CONFUSION_SIDE / k);
    tw_summary_grid g;
    tw_summary_grid_layout(1, 1, k, k, cell, &g);
    uint8_t *plane = malloc((size_t)k * (size_t)k * 3);
    tw_status st = plane ? blank(&g, 3, img, err)
                         : tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory for a confusion matrix");
    for (int row = 0; row < k && st == TW_OK; row++) {
        const int64_t *c = counts + (size_t)row * (size_t)k;
        double sum = 0;
        for (int col = 0; col < k; col++)
            sum += (double)c[col];
        for (int col = 0; col < k; col++)
            blues(sum > 0 ? (double)c[col] / sum : 0.0, plane + ((size_t)row * (size_t)k + (size_t)col) * 3);
    }
    if (st == TW_OK)
        blit(&g, img, 0, plane);
    free(plane);
    return st;
}

/* ================================ the writers ================================ */

/* Writes img (its pixels freed here) under tag; st is the renderer's status (TW_END: nothing to write). */
static tw_status write_image(tw_events_writer *w, const char *tag, int64_t step, tw_png_image *img,
                             tw_status st, tw_error *err)
{
    if (st == TW_OK)
        st = tw_events_add_image(w, tag, step, img, err);
    free(img->pixels);
    return st == TW_END ? TW_OK : st;
}

tw_status tw_summary_samples(tw_events_writer *w, int64_t step, const tw_config *c, const float *x, int n,
                             tw_error *err)
{
    tw_png_image img;
    tw_status st = tw_summary_render_samples(c, x, n, &img, err);
    return write_image(w, TW_SUMMARY_SAMPLES_TAG, step, &img, st, err);
}

tw_status tw_summary_filters(tw_events_writer *w, int64_t step, const tw_model *m, const float *params,
                             tw_error *err)
{
    const tw_param *p = tw_summary_first_conv(m);
    if (!p)
        return TW_OK;
    char tag[TW_PARAM_NAME_BYTES + sizeof TW_SUMMARY_FILTERS_SUFFIX];
    const char *slash = strrchr(p->name, '/');
    int layer = slash ? (int)(slash - p->name) : (int)strlen(p->name);
    snprintf(tag, sizeof tag, "%.*s%s", layer, p->name, TW_SUMMARY_FILTERS_SUFFIX);
    tw_png_image img;
    tw_status st = tw_summary_render_filters(p, params + p->offset, &img, err);
    return write_image(w, tag, step, &img, st, err);
}

tw_status tw_summary_confusion(tw_events_writer *w, const char *tag, int64_t step, const int64_t *counts,
                               int k, tw_error *err)
{
    tw_png_image img;
    tw_status st = tw_summary_render_confusion(counts, k, &img, err);
    return write_image(w, tag, step, &img, st, err);
}
