/* test_summary_images.c — engine/summary_images.c: the grid layout (sizes, zoom, stride, the cap), the
 * input samples (their bytes tile by tile, min-max when the values are not scaled bytes, RGB, the first of
 * other channel counts, the middle slice of a volume, at most 64, nothing for feature vectors), the
 * filters (tile order filter-major, min-max, the middle depth slice, at most 256 tiles, flat weights), the
 * confusion heat map (cell size, row normalisation, the colour map's ends and middle, empty rows, the
 * caps and bad counts), the first conv layer of a model, and the writers' tags in an event file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

#include "event.pb-c.h"
#include "summary_images.h"
#include "tfrecord.h"

/* ---- helpers ---- */

static tw_config config_of(int rank, const int *shape)
{
    tw_config c;
    tw_config_defaults(&c);
    c.rank = rank;
    for (int i = 0; i < rank; i++)
        c.shape[i] = shape[i];
    return c;
}

static uint8_t px(const tw_png_image *img, int x, int y, int k)
{
    assert_true(x >= 0 && x < img->width && y >= 0 && y < img->height && k < img->channels);
    return img->pixels[((size_t)y * img->width + x) * img->channels + k];
}

/* Every pixel of img outside the tiles of g (the gaps and the unused tiles) is white. */
static void expect_white_outside(const tw_png_image *img, const tw_summary_grid *g)
{
    for (int y = 0; y < img->height; y++)
        for (int x = 0; x < img->width; x++) {
            int tx = x % (g->tile_w + TW_GRID_GAP), ty = y % (g->tile_h + TW_GRID_GAP);
            int tile = y / (g->tile_h + TW_GRID_GAP) * g->cols + x / (g->tile_w + TW_GRID_GAP);
            if (tx < g->tile_w && ty < g->tile_h && tile < g->n)
                continue;
            for (int k = 0; k < img->channels; k++)
                assert_int_equal(px(img, x, y, k), 255);
        }
}

/* ---- the grid ---- */

static void test_grid_layout(void **state)
{
    (void)state;
    tw_summary_grid g;
    tw_summary_grid_layout(16, 4, 28, 28, 1, &g);
    assert_int_equal(g.rows, 4);
    assert_int_equal(g.width, 4 * 28 + 3 * TW_GRID_GAP);
    assert_int_equal(g.height, g.width);
    tw_summary_grid_layout(32, 6, 5, 5, 6, &g); /* 32 filters of 5x5 */
    assert_int_equal(g.rows, 6);
    assert_int_equal(g.tile_w, 30);
    assert_int_equal(g.width, 6 * 30 + 5 * TW_GRID_GAP);
    tw_summary_grid_layout(7, 3, 4, 2, 8, &g);
    assert_int_equal(g.rows, 3);
    assert_int_equal(g.tile_h, 32);
    assert_int_equal(g.tile_w, 16);
    assert_int_equal(g.width, 3 * 16 + 2 * TW_GRID_GAP);
    assert_int_equal(g.height, 3 * 32 + 2 * TW_GRID_GAP);
    tw_summary_grid_layout(1, 1, 1000, 1000, 24, &g); /* the zoom shrinks to fit */
    assert_int_equal(g.zoom, 4);
    assert_int_equal(g.stride, 1);
    assert_int_equal(g.width, 4000);
    tw_summary_grid_layout(1, 1, 10000, 100, 1, &g); /* even zoom 1 does not: strided */
    assert_int_equal(g.zoom, 1);
    assert_int_equal(g.stride, 3);
    assert_int_equal(g.tile_h, 3334);
    assert_int_equal(g.tile_w, 34);
    tw_summary_grid_layout(256, 256, 100, 100, 1, &g);
    assert_true(g.width <= TW_PNG_MAX_SIDE && g.height <= TW_PNG_MAX_SIDE);
    assert_int_equal(g.stride, 8);
}

/* ---- input samples ---- */

/* n examples of [h, w] bytes b(i, y, x), scaled by c's scale as the input pipeline does. */
static float *scaled_bytes(int n, int h, int w, float scale)
{
    float *x = malloc(sizeof(float) * (size_t)n * h * w);
    assert_non_null(x);
    for (int i = 0; i < n * h * w; i++)
        x[i] = (float)(uint8_t)(i * 37 + i / 7) * scale;
    return x;
}

static void test_samples_show_their_bytes(void **state)
{
    (void)state;
    const int shape[] = {4, 3, 1};
    tw_config c = config_of(3, shape);
    float *x = scaled_bytes(5, 4, 3, c.scale);
    x[7] = 255.0f * c.scale; /* the largest byte */
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_samples(&c, x, 5, &img, &err), TW_OK);
    tw_summary_grid g;
    tw_summary_grid_layout(5, 3, 4, 3, TW_GRID_TILE / 4, &g);
    assert_int_equal(g.tile_h, 32);
    assert_int_equal(g.tile_w, 24);
    assert_int_equal(img.width, g.width);
    assert_int_equal(img.height, g.height);
    assert_int_equal(img.channels, 1);
    for (int i = 0; i < 5; i++)
        for (int y = 0; y < g.tile_h; y++)
            for (int xx = 0; xx < g.tile_w; xx++) {
                int x0 = i % 3 * (g.tile_w + TW_GRID_GAP), y0 = i / 3 * (g.tile_h + TW_GRID_GAP);
                uint8_t want = (uint8_t)lroundf(x[i * 12 + y / 8 * 3 + xx / 8] / c.scale);
                assert_int_equal(px(&img, x0 + xx, y0 + y, 0), want);
            }
    assert_int_equal(px(&img, 8, 16, 0), 255); /* x[7]: example 0, row 2, column 1 */
    expect_white_outside(&img, &g);
    free(img.pixels);
    free(x);
}

static void test_samples_min_max_when_not_bytes(void **state)
{
    (void)state;
    const int shape[] = {2, 2};
    tw_config c = config_of(2, shape);
    const float x[] = {-1.0f, 0.0f, 1.0f, 3.0f};
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_samples(&c, x, 1, &img, &err), TW_OK);
    assert_int_equal(img.width, 32); /* zoom 16 */
    assert_int_equal(px(&img, 0, 0, 0), 0);
    assert_int_equal(px(&img, 16, 0, 0), 64);  /* floor(255 * 1/4 + 0.5) */
    assert_int_equal(px(&img, 0, 16, 0), 128); /* floor(255 * 2/4 + 0.5) */
    assert_int_equal(px(&img, 31, 31, 0), 255);
    free(img.pixels);
}

static void test_samples_channels(void **state)
{
    (void)state;
    const int rgb[] = {1, 2, 3}, two[] = {1, 1, 2};
    float x[6];
    for (int i = 0; i < 6; i++)
        x[i] = (float)(10 * i) / 255.0f;
    tw_config c = config_of(3, rgb);
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_samples(&c, x, 1, &img, &err), TW_OK);
    assert_int_equal(img.channels, 3);
    assert_int_equal(img.width, 32);
    assert_int_equal(img.height, 16);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(px(&img, 0, 0, k), 10 * k);
        assert_int_equal(px(&img, 31, 15, k), 10 * (3 + k));
    }
    free(img.pixels);
    c = config_of(3, two); /* two channels: the first as gray */
    assert_int_equal(tw_summary_render_samples(&c, x, 3, &img, &err), TW_OK);
    assert_int_equal(img.channels, 1);
    assert_int_equal(px(&img, 0, 0, 0), 0);
    assert_int_equal(px(&img, 32 + TW_GRID_GAP, 0, 0), 20);
    assert_int_equal(px(&img, 0, 32 + TW_GRID_GAP, 0), 40);
    free(img.pixels);
}

static void test_samples_of_a_volume_show_its_middle_slice(void **state)
{
    (void)state;
    const int shape[] = {3, 2, 2, 1};
    tw_config c = config_of(4, shape);
    float x[2 * 12];
    for (int i = 0; i < 24; i++)
        x[i] = (float)i / 255.0f;
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_samples(&c, x, 2, &img, &err), TW_OK);
    assert_int_equal(img.width, 2 * 32 + TW_GRID_GAP);
    assert_int_equal(img.height, 32);
    assert_int_equal(px(&img, 0, 0, 0), 4);   /* example 0, slice 1, (0, 0) */
    assert_int_equal(px(&img, 31, 31, 0), 7); /* (1, 1) */
    assert_int_equal(px(&img, 34, 0, 0), 16); /* example 1 */
    free(img.pixels);
}

static void test_samples_at_most_64_and_none_for_vectors(void **state)
{
    (void)state;
    const int shape[] = {28, 28, 1};
    tw_config c = config_of(3, shape);
    float *x = scaled_bytes(100, 28, 28, c.scale);
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_samples(&c, x, 100, &img, &err), TW_OK);
    assert_int_equal(img.width, 8 * 28 + 7 * TW_GRID_GAP);
    assert_int_equal(img.height, img.width);
    free(img.pixels);
    const int flat[] = {784};
    c = config_of(1, flat);
    assert_int_equal(tw_summary_render_samples(&c, x, 100, &img, &err), TW_END);
    assert_null(img.pixels);
    free(x);
}

/* ---- filters ---- */

static tw_param conv_param(int rank, const int64_t *shape)
{
    tw_param p = {.rank = rank, .count = 1, .is_weight = 1};
    snprintf(p.name, sizeof p.name, "conv/weights");
    for (int i = 0; i < rank; i++) {
        p.shape[i] = shape[i];
        p.count *= (size_t)shape[i];
    }
    return p;
}

static float *ramp(size_t n)
{
    float *v = malloc(n * sizeof(float));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = sinf((float)i) * 0.3f;
    return v;
}

static uint8_t minmax(float v, float lo, float hi)
{
    return (uint8_t)floor(255.0 * ((double)v - lo) / ((double)hi - lo) + 0.5);
}

static void test_filters_2d(void **state)
{
    (void)state;
    const int64_t shape[] = {3, 3, 2, 5}; /* [kh, kw, in_c, filters] */
    tw_param p = conv_param(4, shape);
    float *w = ramp(p.count);
    float lo = w[0], hi = w[0];
    for (size_t i = 0; i < p.count; i++) {
        lo = fminf(lo, w[i]);
        hi = fmaxf(hi, w[i]);
    }
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_filters(&p, w, &img, &err), TW_OK);
    tw_summary_grid g; /* 10 tiles: ceil(ceil(sqrt(10)) / 2) = 2 filters a row, 4 tiles */
    tw_summary_grid_layout(10, 4, 3, 3, TW_GRID_TILE / 3, &g);
    assert_int_equal(g.rows, 3);
    assert_int_equal(g.tile_w, 30);
    assert_int_equal(img.width, g.width);
    assert_int_equal(img.height, g.height);
    assert_int_equal(img.channels, 1);
    int seen_lo = 0, seen_hi = 0;
    for (int t = 0; t < 10; t++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 3; x++) {
                int f = t / 2, ch = t % 2;
                float v = w[((y * 3 + x) * 2 + ch) * 5 + f];
                int x0 = t % 4 * (30 + TW_GRID_GAP) + x * 10 + 9, y0 = t / 4 * (30 + TW_GRID_GAP) + y * 10;
                assert_int_equal(px(&img, x0, y0, 0), minmax(v, lo, hi));
                seen_lo |= px(&img, x0, y0, 0) == 0;
                seen_hi |= px(&img, x0, y0, 0) == 255;
            }
    assert_true(seen_lo && seen_hi);
    expect_white_outside(&img, &g);
    free(img.pixels);
    free(w);
}

static void test_filters_3d_middle_slice(void **state)
{
    (void)state;
    const int64_t shape[] = {3, 2, 2, 1, 4}; /* [kd, kh, kw, in_c, filters] */
    tw_param p = conv_param(5, shape);
    float w[48];
    for (int i = 0; i < 48; i++)
        w[i] = i >= 16 && i < 32 ? (float)(i - 16) : 100.0f; /* only the middle slice is 0..15 */
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_filters(&p, w, &img, &err), TW_OK);
    assert_int_equal(img.width, 2 * 32 + TW_GRID_GAP); /* 4 tiles, 2 a row, zoom 16 */
    assert_int_equal(img.height, img.width);
    /* filter 3, (y 1, x 1): index ((1 * 2 + 1) * 1) * 4 + 3 = 15, the greatest shown */
    assert_int_equal(px(&img, 34 + 31, 34 + 31, 0), 255);
    assert_int_equal(px(&img, 0, 0, 0), 0); /* filter 0, (0, 0): 0, the least */
    assert_int_equal(px(&img, 16, 0, 0), minmax(4.0f, 0.0f, 15.0f)); /* filter 0, (0, 1) */
    free(img.pixels);
}

static void test_filters_capped_and_flat(void **state)
{
    (void)state;
    const int64_t shape[] = {1, 1, 3, 200};
    tw_param p = conv_param(4, shape);
    float *w = calloc(p.count, sizeof(float));
    assert_non_null(w);
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_filters(&p, w, &img, &err), TW_OK);
    tw_summary_grid g; /* 256 tiles: ceil(16 / 3) = 6 filters, 18 tiles a row */
    tw_summary_grid_layout(TW_FILTER_TILES_MAX, 18, 1, 1, TW_GRID_TILE, &g);
    assert_int_equal(g.rows, 15);
    assert_int_equal(img.width, g.width);
    assert_int_equal(img.height, g.height);
    assert_int_equal(px(&img, 0, 0, 0), 0); /* every weight equal: all 0 */
    expect_white_outside(&img, &g);
    free(img.pixels);
    const int64_t dense[] = {4, 3};
    tw_param q = conv_param(2, dense);
    assert_int_equal(tw_summary_render_filters(&q, w, &img, &err), TW_ERR_INVALID);
    assert_null(img.pixels);
    free(w);
}

/* ---- the confusion matrix ---- */

static void expect_rgb(const tw_png_image *img, int x, int y, int r, int g, int b)
{
    assert_int_equal(px(img, x, y, 0), r);
    assert_int_equal(px(img, x, y, 1), g);
    assert_int_equal(px(img, x, y, 2), b);
}

static void test_confusion_heat_map(void **state)
{
    (void)state;
    const int64_t counts[] = {5, 0, 0,   /* all right: dark, light, light */
                              3, 3, 0,   /* half and half: the middle colour */
                              0, 0, 0};  /* no examples: light */
    tw_png_image img;
    tw_error err;
    assert_int_equal(tw_summary_render_confusion(counts, 3, &img, &err), TW_OK);
    assert_int_equal(img.channels, 3);
    assert_int_equal(img.width, 3 * TW_CONFUSION_CELL);
    assert_int_equal(img.height, img.width);
    for (int dy = 0; dy < TW_CONFUSION_CELL; dy += TW_CONFUSION_CELL - 1)
        for (int dx = 0; dx < TW_CONFUSION_CELL; dx += TW_CONFUSION_CELL - 1) {
            expect_rgb(&img, dx, dy, 8, 48, 107);
            expect_rgb(&img, 24 + dx, dy, 247, 251, 255);
            expect_rgb(&img, dx, 24 + dy, 107, 174, 214);
            expect_rgb(&img, 24 + dx, 24 + dy, 107, 174, 214);
            expect_rgb(&img, 48 + dx, 24 + dy, 247, 251, 255);
            expect_rgb(&img, 24 + dx, 48 + dy, 247, 251, 255);
        }
    free(img.pixels);
    const int64_t quarter[] = {1, 3, 0, 4}; /* 0.25: between "Blues" 2 and 3 */
    assert_int_equal(tw_summary_render_confusion(quarter, 2, &img, &err), TW_OK);
    expect_rgb(&img, 0, 0, 198, 219, 239);
    expect_rgb(&img, 24, 0, 33, 113, 181); /* 0.75: "Blues" 6 */
    free(img.pixels);
}

static void test_confusion_sizes_and_errors(void **state)
{
    (void)state;
    static const int ks[][2] = {{10, 24}, {100, 4}, {480, 1}, {1000, 1}};
    tw_png_image img;
    tw_error err;
    for (int i = 0; i < 4; i++) {
        int k = ks[i][0];
        int64_t *counts = calloc((size_t)k * k, sizeof *counts);
        assert_non_null(counts);
        assert_int_equal(tw_summary_render_confusion(counts, k, &img, &err), TW_OK);
        assert_int_equal(img.width, k * ks[i][1]);
        assert_int_equal(img.height, k * ks[i][1]);
        free(img.pixels);
        free(counts);
    }
    int64_t bad[4] = {1, 2, -3, 4};
    assert_int_equal(tw_summary_render_confusion(bad, 2, &img, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "[1][0]"));
    assert_int_equal(tw_summary_render_confusion(bad, 0, &img, &err), TW_ERR_INVALID);
    assert_int_equal(tw_summary_render_confusion(NULL, 2, &img, &err), TW_ERR_INVALID);
    assert_int_equal(tw_summary_render_confusion(bad, TW_PNG_MAX_SIDE + 1, &img, &err), TW_ERR_TOO_LARGE);
    assert_null(img.pixels);
}

/* ---- the model's first conv layer and the writers ---- */

static tw_model *model_of(const char *json, tw_config *c)
{
    tw_error err;
    if (tw_config_parse(json, strlen(json), NULL, c, &err) != TW_OK)
        fail_msg("config: %s", err.message);
    tw_model *m;
    if (tw_model_create(c, &m, &err) != TW_OK)
        fail_msg("model: %s", err.message);
    return m;
}

static const char CNN[] =
    "{\"dataset\": {\"train\": \"unused.tfrecord\", \"shape\": [6, 6, 1]},"
    " \"model\": {\"layers\": [{\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3, \"name\": \"edges\"},"
    "                          {\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 3},"
    "                          {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 2}]},"
    " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"batch_size\": 4}";

static const char MLP[] =
    "{\"dataset\": {\"train\": \"unused.tfrecord\", \"shape\": [6]},"
    " \"model\": {\"layers\": [{\"type\": \"dense\", \"units\": 2}]},"
    " \"optimizer\": {\"type\": \"sgd\", \"learning_rate\": 0.1}, \"batch_size\": 4}";

/* The tags of the image summaries in the event file at path, in order, joined by spaces. */
static void image_tags(const char *path, char *out, size_t size)
{
    tw_tfrecord_options o;
    tw_tfrecord_options_default(&o);
    o.compression = TW_COMPRESSION_NONE;
    tw_tfrecord_reader *r;
    tw_error err;
    assert_int_equal(tw_tfrecord_reader_open(path, &o, &r, &err), TW_OK);
    const uint8_t *data;
    size_t len;
    out[0] = '\0';
    while (tw_tfrecord_read(r, &data, &len, &err) == TW_OK) {
        Twpb__Event *ev = twpb__event__unpack(NULL, len, data);
        assert_non_null(ev);
        if (ev->what_case == TWPB__EVENT__WHAT_SUMMARY &&
            ev->summary->value[0]->value_case == TWPB__SUMMARY__VALUE__VALUE_IMAGE)
            snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] ? " " : "",
                     ev->summary->value[0]->tag);
        twpb__event__free_unpacked(ev, NULL);
    }
    tw_tfrecord_reader_close(r);
}

static void test_first_conv_and_writers(void **state)
{
    (void)state;
    tw_config c, cm;
    tw_model *m = model_of(CNN, &c), *mlp = model_of(MLP, &cm);
    const tw_param *p = tw_summary_first_conv(m);
    assert_non_null(p);
    assert_string_equal(p->name, "edges/weights");
    assert_null(tw_summary_first_conv(mlp));

    char dir[512], tags[256];
    assert_int_equal(tw_test_mkdtemp(dir, sizeof dir, "images"), 0);
    tw_events_writer *w;
    tw_error err;
    assert_int_equal(tw_events_create(dir, NULL, &w, &err), TW_OK);
    float *params = ramp(tw_model_param_floats(m));
    float *x = scaled_bytes(4, 6, 6, c.scale);
    int64_t counts[4] = {3, 1, 0, 4};
    assert_int_equal(tw_summary_samples(w, 0, &c, x, 4, &err), TW_OK);
    assert_int_equal(tw_summary_samples(w, 0, &cm, x, 4, &err), TW_OK); /* rank 1: nothing */
    assert_int_equal(tw_summary_filters(w, 5, m, params, &err), TW_OK);
    assert_int_equal(tw_summary_filters(w, 5, mlp, params, &err), TW_OK); /* no conv: nothing */
    assert_int_equal(tw_summary_confusion(w, "eval/confusion_matrix", 5, counts, 2, &err), TW_OK);
    assert_int_equal(tw_summary_confusion(w, "eval/confusion_matrix", 5, counts, 0, &err), TW_ERR_INVALID);
    assert_int_equal(tw_events_close(w, &err), TW_OK);
    image_tags(tw_events_path(w), tags, sizeof tags);
    assert_string_equal(tags, "input/samples edges/filters eval/confusion_matrix");
    tw_events_destroy(w);
    assert_int_equal(tw_test_rmdir(dir), 0);
    free(x);
    free(params);
    tw_model_destroy(m);
    tw_model_destroy(mlp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_layout),
        cmocka_unit_test(test_samples_show_their_bytes),
        cmocka_unit_test(test_samples_min_max_when_not_bytes),
        cmocka_unit_test(test_samples_channels),
        cmocka_unit_test(test_samples_of_a_volume_show_its_middle_slice),
        cmocka_unit_test(test_samples_at_most_64_and_none_for_vectors),
        cmocka_unit_test(test_filters_2d),
        cmocka_unit_test(test_filters_3d_middle_slice),
        cmocka_unit_test(test_filters_capped_and_flat),
        cmocka_unit_test(test_confusion_heat_map),
        cmocka_unit_test(test_confusion_sizes_and_errors),
        cmocka_unit_test(test_first_conv_and_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
