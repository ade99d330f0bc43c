/* summary_images.h — the pictures a run shows in TensorBoard's IMAGES tab: a grid of input samples, the
 * first conv layer's filters as a grid, and a confusion matrix as a heat map; each rendered into pixels
 * (tw_summary_render_*, tested on their own) and written as an image summary (tw_summary_*, events.h).
 *
 * Owns: the grid layout (tiles row-major, TW_GRID_GAP white pixels between tiles and none around them;
 * tiles smaller than TW_GRID_TILE pixels zoomed with nearest neighbour, larger ones strided down so that
 * the image fits TW_PNG_MAX_SIDE), how values become pixels (samples: their own bytes; filters: min-max;
 * the confusion matrix: row-normalised through a white-to-blue colour map), which layer's filters, and
 * the tags (docs/formats.md, "Images"). Does not own: computing the confusion matrix (the evaluation),
 * when each image is written (trainer.c), PNG (png_encode.h), the event file (events.h).
 * Written here because it is a few loops over pixels: no library tiles a tensor into a PNG.
 *
 * Thread-safety: no shared state; the writers serialize on the event writer's lock. */
#ifndef TW_SUMMARY_IMAGES_H
#define TW_SUMMARY_IMAGES_H

#include <stdint.h>

#include "config.h"
#include "events.h"
#include "model.h"
#include "png_encode.h"
#include "status.h"

enum {
    TW_GRID_GAP = 2,           /* white pixels between two tiles */
    TW_GRID_TILE = 32,         /* tiles smaller than this are zoomed by floor(32 / their longer side) */
    TW_SAMPLES_MAX = 64,       /* input examples shown */
    TW_FILTER_TILES_MAX = 256, /* (filter, input channel) tiles shown */
    TW_CONFUSION_CELL = 24,    /* pixels per cell side, at most ... */
    TW_CONFUSION_SIDE = 480,   /* ... and k cells take about this many (never under 1 pixel a cell) */
};

#define TW_SUMMARY_SAMPLES_TAG "input/samples"
#define TW_SUMMARY_FILTERS_SUFFIX "/filters" /* after the conv layer's name: "layer1/filters" */

/* How n equal tiles lie in one image. */
typedef struct {
    int n;              /* tiles */
    int cols, rows;     /* tiles per row; rows = ceil(n / cols) */
    int src_h, src_w;   /* source pixels of one tile */
    int zoom;           /* each shown source pixel becomes zoom x zoom pixels (>= 1) */
    int stride;         /* every stride-th source pixel is shown (>= 1; > 1 only at zoom 1) */
    int tile_h, tile_w; /* pixels of one tile: zoom * ceil(src / stride) */
    int width, height;  /* the image: cols * tile_w + (cols - 1) * TW_GRID_GAP; likewise rows */
} tw_summary_grid;

/* Lays out n >= 1 tiles of src_h x src_w >= 1 source pixels, cols per row (1 <= cols <= 256), each source
 * pixel shown zoom x zoom (zoom >= 1) — less when that would pass TW_PNG_MAX_SIDE, and when even zoom 1
 * would, every stride-th source pixel with the smallest stride that fits. */
void tw_summary_grid_layout(int n, int cols, int src_h, int src_w, int zoom, tw_summary_grid *g);

/* The first conv layer's weights of m ([kh, kw, in_c, filters] or [kd, kh, kw, in_c, filters]; borrowed
 * from m), or NULL when m has none (an MLP). */
const tw_param *tw_summary_first_conv(const tw_model *m);

/* The input samples: the first min(n, TW_SAMPLES_MAX) examples of x [n, example values] fp32 (borrowed;
 * c's dataset.shape: rank 2 [h, w], 3 [h, w, ch], 4 [d, h, w, ch] showing the middle slice d / 2), one tile
 * each, ceil(sqrt(count)) tiles per row. ch 3 is RGB; any other ch shows its first channel as gray. A value
 * v becomes floor(v / scale + 0.5) when every value shown lies in [0, 255 * scale] (a uint8 dataset: its
 * own bytes), else min-max over the values shown (as the filters). Rank 1 (feature vectors, no image):
 * TW_END and nothing rendered. On TW_OK the caller frees img->pixels. Errors: TW_ERR_NOMEM. */
tw_status tw_summary_render_samples(const tw_config *c, const float *x, int n, tw_png_image *img,
                                    tw_error *err);

/* p's kernels (values: p's view of a params arena, [p->count] fp32, borrowed): one gray tile per (filter,
 * input channel) pair, filter-major (filter f, channel ch is tile f * in_c + ch), at most
 * TW_FILTER_TILES_MAX; a 3-D kernel shows its middle depth slice kd / 2; ceil(ceil(sqrt(tiles)) / in_c)
 * filters per row (capped at the tiles). A value v becomes floor(255 * (v - lo) / (hi - lo) + 0.5) with lo
 * and hi the least and greatest value shown (computed in double; all 0 when hi == lo). On TW_OK the
 * caller frees img->pixels. Errors: TW_ERR_INVALID (p not rank 4 or 5), TW_ERR_NOMEM. */
tw_status tw_summary_render_filters(const tw_param *p, const float *values, tw_png_image *img,
                                    tw_error *err);

/* counts [k * k] (row: the true class, column: the predicted one; borrowed) as an RGB heat map of k x k
 * cells, each max(1, min(TW_CONFUSION_CELL, TW_CONFUSION_SIDE / k)) pixels square: each row divided by
 * its sum (a row without examples stays 0) and mapped through ColorBrewer's 9-class "Blues" (0: (247, 251,
 * 255) near white, 1: (8, 48, 107) dark blue; linear between its 9 colours). On TW_OK the caller frees
 * img->pixels. Errors: TW_ERR_INVALID (no counts, k < 1, a negative count), TW_ERR_TOO_LARGE
 * (k > TW_PNG_MAX_SIDE), TW_ERR_NOMEM. */
tw_status tw_summary_render_confusion(const int64_t *counts, int k, tw_png_image *img, tw_error *err);

/* The writers: render as above and append the image summary to w at step (tw_events_add_image). Errors:
 * the renderer's and the writer's. */

/* Tag TW_SUMMARY_SAMPLES_TAG. Rank 1: writes nothing, TW_OK. */
tw_status tw_summary_samples(tw_events_writer *w, int64_t step, const tw_config *c, const float *x, int n,
                             tw_error *err);

/* Tag "<layer>/filters" for m's first conv layer (tw_summary_first_conv), from params [P] (a params arena
 * on the host, borrowed). m without a conv layer: writes nothing, TW_OK. */
tw_status tw_summary_filters(tw_events_writer *w, int64_t step, const tw_model *m, const float *params,
                             tw_error *err);

/* The confusion matrix counts [k * k] under tag (both borrowed). */
tw_status tw_summary_confusion(tw_events_writer *w, const char *tag, int64_t step, const int64_t *counts,
                               int k, tw_error *err);

#endif
