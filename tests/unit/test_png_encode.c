/* test_png_encode.c — the PNG encoder: gray and RGB images decoded back by libpng's own reader (the
 * simplified png_image API) to the same size, format and pixels; a 1x1 image and the largest side
 * allowed; the sizes and channel counts refused, each with its status and nothing allocated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <png.h>

#include "png_encode.h"

/* Encodes img, decodes the PNG with libpng and checks size, format and every pixel. */
static void round_trip(const tw_png_image *img)
{
    uint8_t *bytes;
    size_t len;
    tw_error err;
    assert_int_equal(tw_png_encode(img, &bytes, &len, &err), TW_OK);
    assert_true(len > 8);
    assert_memory_equal(bytes, "\x89PNG\r\n\x1a\n", 8);
    png_image dec;
    memset(&dec, 0, sizeof dec);
    dec.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_memory(&dec, bytes, len));
    assert_int_equal(dec.width, img->width);
    assert_int_equal(dec.height, img->height);
    assert_int_equal(dec.format, img->channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY);
    size_t n = PNG_IMAGE_SIZE(dec);
    assert_int_equal(n, (size_t)img->width * img->height * img->channels);
    uint8_t *px = malloc(n);
    assert_non_null(px);
    assert_true(png_image_finish_read(&dec, NULL, px, 0, NULL));
    assert_memory_equal(px, img->pixels, n);
    free(px);
    free(bytes);
}

/* A pattern that changes along both axes and across channels. */
static uint8_t *pattern(int w, int h, int ch)
{
    uint8_t *p = malloc((size_t)w * h * ch);
    assert_non_null(p);
    for (size_t i = 0; i < (size_t)w * h * ch; i++)
        p[i] = (uint8_t)(i * 7 + i / (size_t)(w * ch) * 13);
    return p;
}

static void test_gray_and_rgb_round_trip(void **state)
{
    (void)state;
    static const int sizes[][3] = {{1, 1, 1}, {5, 3, 1}, {3, 5, 3}, {94, 94, 1}, {240, 17, 3}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        tw_png_image img = {.width = sizes[i][0], .height = sizes[i][1], .channels = sizes[i][2]};
        img.pixels = pattern(img.width, img.height, img.channels);
        round_trip(&img);
        free(img.pixels);
    }
}

static void test_largest_side(void **state)
{
    (void)state;
    tw_png_image img = {.width = TW_PNG_MAX_SIDE, .height = 2, .channels = 1};
    img.pixels = pattern(img.width, img.height, 1);
    round_trip(&img);
    free(img.pixels);
}

static void refused(const tw_png_image *img, tw_status want)
{
    uint8_t *bytes = (uint8_t *)"x";
    size_t len = 1;
    tw_error err;
    tw_error_clear(&err);
    assert_int_equal(tw_png_encode(img, &bytes, &len, &err), want);
    assert_null(bytes);
    assert_int_equal(len, 0);
    assert_int_equal(err.status, want);
    assert_non_null(strstr(err.message, "png:"));
}

static void test_bad_images_refused(void **state)
{
    (void)state;
    uint8_t px[16] = {0};
    refused(&(tw_png_image){.pixels = NULL, .width = 2, .height = 2, .channels = 1}, TW_ERR_INVALID);
    refused(&(tw_png_image){.pixels = px, .width = 0, .height = 2, .channels = 1}, TW_ERR_INVALID);
    refused(&(tw_png_image){.pixels = px, .width = 2, .height = -1, .channels = 1}, TW_ERR_INVALID);
    refused(&(tw_png_image){.pixels = px, .width = 2, .height = 2, .channels = 2}, TW_ERR_INVALID);
    refused(&(tw_png_image){.pixels = px, .width = 2, .height = 2, .channels = 4}, TW_ERR_INVALID);
    refused(&(tw_png_image){.pixels = px, .width = TW_PNG_MAX_SIDE + 1, .height = 1, .channels = 1},
            TW_ERR_TOO_LARGE);
    refused(&(tw_png_image){.pixels = px, .width = 1, .height = TW_PNG_MAX_SIDE + 1, .channels = 3},
            TW_ERR_TOO_LARGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gray_and_rgb_round_trip),
        cmocka_unit_test(test_largest_side),
        cmocka_unit_test(test_bad_images_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
