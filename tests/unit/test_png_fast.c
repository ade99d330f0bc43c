/* test_png_fast.c — the PNG path that bypasses libpng (eventlog/png_fast.c) against files libpng writes:
 * every 8-bit colour type it takes (gray, gray + alpha, RGB, RGBA) under each of the five row filters and
 * libpng's adaptive choice, image data split over many IDAT chunks, widths of one pixel and odd ones, and
 * the pixels it returns are those written (alpha dropped). What it must leave to libpng — interlacing, a
 * palette, 16 bits, a zlib window smaller than the image, a bad CRC on an ancillary chunk, another IDAT
 * after the stream — it leaves undecided, and tw_image_decode still returns the pixels written (or refuses
 * what libpng refuses). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <png.h>
#include <zlib.h>

#include "image.h"
#include "png_fast.h"

typedef struct {
    int type;        /* PNG_COLOR_TYPE_GRAY, _GRAY_ALPHA, _RGB, _RGB_ALPHA or _PALETTE */
    int depth;       /* 8, or 16 */
    int filter;      /* a PNG_FILTER_* mask */
    int interlace;   /* PNG_INTERLACE_NONE or _ADAM7 */
    int window_bits; /* zlib's, 0: libpng's choice */
    size_t idat;     /* the most bytes an IDAT chunk holds (0: libpng's 8 KiB) */
    int text;        /* 1: a tEXt chunk before the image data */
} spec;

typedef struct {
    uint8_t *buf;
    size_t len, cap;
} sink;

static void put(png_structp png, png_bytep data, size_t n)
{
    sink *s = png_get_io_ptr(png);
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2;
        s->buf = realloc(s->buf, s->cap);
        assert_non_null(s->buf);
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
}

static void flush(png_structp png) { (void)png; }

/* Bytes a pixel of px has for each colour type (a palette index is one). */
static int samples_of(int type)
{
    switch (type) {
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;
    }
}

/* A PNG of w x h written by libpng from px (w · h · samples bytes, each sample one byte; at 16 bits the
 * byte is repeated), as sp says. Returns the file (caller frees) and its length in *n. */
static uint8_t *write_png(const uint8_t *px, uint32_t w, uint32_t h, spec sp, size_t *n)
{
    sink s = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_non_null(info);
    int ch = samples_of(sp.type), bytes = sp.depth / 8;
    uint8_t *row = malloc((size_t)w * ch * bytes);
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng could not write the test file");
    png_set_write_fn(png, &s, put, flush);
    png_set_IHDR(png, info, w, h, sp.depth, sp.type, sp.interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (sp.type == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[256];
        for (int i = 0; i < 256; i++)
            pal[i] = (png_color){(png_byte)i, (png_byte)(255 - i), (png_byte)(i * 7)};
        png_set_PLTE(png, info, pal, 256);
    }
    if (sp.text) {
        png_text t = {.compression = PNG_TEXT_COMPRESSION_NONE, .key = "Comment", .text = "written by a test"};
        png_set_text(png, info, &t, 1);
    }
    png_set_filter(png, PNG_FILTER_TYPE_BASE, sp.filter);
    if (sp.window_bits)
        png_set_compression_window_bits(png, sp.window_bits);
    if (sp.idat)
        png_set_compression_buffer_size(png, sp.idat);
    png_write_info(png, info);
    int passes = png_set_interlace_handling(png);
    for (int pass = 0; pass < passes; pass++)
        for (uint32_t y = 0; y < h; y++) {
            for (size_t i = 0; i < (size_t)w * ch; i++)
                for (int b = 0; b < bytes; b++)
                    row[i * bytes + b] = px[(size_t)y * w * ch + i];
            png_write_row(png, row);
        }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    *n = s.len;
    return s.buf;
}

static uint8_t *random_pixels(size_t n, unsigned seed)
{
    uint8_t *px = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        /* smooth with noise, so every filter has something to predict */
        px[i] = (uint8_t)(i / 3 + (seed >> 16) % 24);
    }
    return px;
}

/* img holds px's colour samples (a palette index i is the colour pal[i] of write_png). */
static void assert_colours(const tw_image *img, const uint8_t *px, uint32_t w, uint32_t h, int type)
{
    int in = samples_of(type), keep = type & PNG_COLOR_MASK_COLOR ? 3 : 1;
    assert_int_equal(img->width, (int)w);
    assert_int_equal(img->height, (int)h);
    assert_int_equal(img->channels, keep);
    for (size_t i = 0; i < (size_t)w * h; i++)
        for (int c = 0; c < keep; c++) {
            int want = type != PNG_COLOR_TYPE_PALETTE ? px[i * in + c]
                       : c == 0                       ? px[i]
                       : c == 1                       ? 255 - px[i]
                                                      : (uint8_t)(px[i] * 7);
            if (img->pixels[i * keep + c] != want)
                fail_msg("type %d: pixel %zu sample %d is %d, written %d", type, i, c, img->pixels[i * keep + c], want);
        }
}

static void assert_decodes(const uint8_t *file, size_t n, const uint8_t *px, uint32_t w, uint32_t h, int type)
{
    tw_image img;
    tw_error err;
    if (tw_image_decode(file, n, "t.png", &img, &err) != TW_OK)
        fail_msg("decode: %s", err.message);
    assert_colours(&img, px, w, h, type);
    tw_image_free(&img);
}

/* Every colour type the fast path takes, each filter, many small IDATs and libpng's default ones. */
static void plain_files_decode_to_the_pixels_written(void **state)
{
    (void)state;
    const int types[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
    const int filters[] = {PNG_FILTER_NONE, PNG_FILTER_SUB, PNG_FILTER_UP, PNG_FILTER_AVG, PNG_FILTER_PAETH,
                           PNG_ALL_FILTERS};
    const uint32_t sizes[][2] = {{1, 1}, {1, 7}, {5, 3}, {37, 9}, {300, 200}};
    unsigned seed = 1;
    for (int t = 0; t < 4; t++)
        for (int f = 0; f < 6; f++)
            for (int z = 0; z < 5; z++)
                for (int split = 0; split < 2; split++) {
                    uint32_t w = sizes[z][0], h = sizes[z][1];
                    uint8_t *px = random_pixels((size_t)w * h * samples_of(types[t]), seed++);
                    spec sp = {.type = types[t], .depth = 8, .filter = filters[f], .idat = split ? 16 : 0,
                               .text = split};
                    size_t n;
                    uint8_t *file = write_png(px, w, h, sp, &n);
                    tw_image img;
                    if (tw_png_fast_decode(file, n, &img) != TW_PNG_FAST_DONE)
                        fail_msg("type %d, filter %#x, %ux%u: left undecided", types[t], filters[f], w, h);
                    assert_colours(&img, px, w, h, types[t]);
                    tw_image_free(&img);
                    assert_decodes(file, n, px, w, h, types[t]);
                    free(file);
                    free(px);
                }
}

/* What the fast path leaves to libpng: each file is undecided there, and decodes to its pixels anyway. */
static void other_files_are_left_to_libpng(void **state)
{
    (void)state;
    const struct {
        spec sp;
        const char *what;
    } cases[] = {
        {{PNG_COLOR_TYPE_RGB, 8, PNG_ALL_FILTERS, PNG_INTERLACE_ADAM7, 0, 0, 0}, "interlaced"},
        {{PNG_COLOR_TYPE_PALETTE, 8, PNG_ALL_FILTERS, PNG_INTERLACE_NONE, 0, 0, 0}, "a palette"},
        {{PNG_COLOR_TYPE_GRAY, 16, PNG_ALL_FILTERS, PNG_INTERLACE_NONE, 0, 0, 0}, "16 bits"},
        {{PNG_COLOR_TYPE_GRAY, 8, PNG_ALL_FILTERS, PNG_INTERLACE_NONE, 9, 0, 0}, "a 512-byte window"},
    };
    const uint32_t w = 40, h = 30;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t *px = random_pixels((size_t)w * h * samples_of(cases[k].sp.type), (unsigned)k + 7);
        size_t n;
        uint8_t *file = write_png(px, w, h, cases[k].sp, &n);
        tw_image img;
        if (tw_png_fast_decode(file, n, &img) != TW_PNG_FAST_UNDECIDED)
            fail_msg("%s: decided by the fast path", cases[k].what);
        assert_null(img.pixels);
        assert_decodes(file, n, px, w, h, cases[k].sp.type);
        free(file);
        free(px);
    }
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

/* The offset of the first chunk named `name`. */
static size_t find_chunk(const uint8_t *file, size_t n, const char *name)
{
    for (size_t at = 8; at + 12 <= n; at += 12 + be32(file + at))
        if (!memcmp(file + at + 4, name, 4))
            return at;
    fail_msg("no %s chunk", name);
    return 0;
}

/* file with a chunk `name` of len bytes ('x's, its CRC right) inserted before the first chunk named
 * `before`; its length in *m. */
static uint8_t *with_chunk(const uint8_t *file, size_t n, const char *before, const char *name, uint32_t len,
                           size_t *m)
{
    size_t at = find_chunk(file, n, before);
    uint8_t *out = malloc(n + 12 + len);
    assert_non_null(out);
    memcpy(out, file, at);
    put32(out + at, len);
    memcpy(out + at + 4, name, 4);
    memset(out + at + 8, 'x', len);
    put32(out + at + 8 + len, (uint32_t)crc32(0, out + at + 4, len + 4));
    memcpy(out + at + 12 + len, file + at, n - at);
    *m = n + 12 + len;
    return out;
}

/* Files the fast path refuses to judge: a bad CRC on an ancillary chunk (libpng warns and reads on, so the
 * file decodes), an empty IDAT after the stream's end (decodes), an unknown critical chunk (refused), an
 * ancillary chunk over libpng's cap on lengths (decodes, through libpng). */
static void departures_are_decided_by_libpng(void **state)
{
    (void)state;
    const uint32_t w = 16, h = 16;
    uint8_t *px = random_pixels(w * h, 3);
    spec sp = {.type = PNG_COLOR_TYPE_GRAY, .depth = 8, .filter = PNG_ALL_FILTERS, .text = 1};
    size_t n;
    uint8_t *file = write_png(px, w, h, sp, &n);
    tw_image img;

    size_t text = find_chunk(file, n, "tEXt");
    file[text + 8] ^= 0x20; /* a letter of the keyword: only the CRC notices */
    assert_int_equal(tw_png_fast_decode(file, n, &img), TW_PNG_FAST_UNDECIDED);
    assert_decodes(file, n, px, w, h, sp.type);
    file[text + 8] ^= 0x20;

    /* An empty IDAT between the image data and IEND: the stream has ended before it. */
    size_t m;
    uint8_t *more = with_chunk(file, n, "IEND", "IDAT", 0, &m);
    assert_int_equal(tw_png_fast_decode(more, m, &img), TW_PNG_FAST_UNDECIDED);
    assert_decodes(more, m, px, w, h, sp.type);
    free(more);

    /* A critical chunk nobody knows, before the image data: libpng refuses the file. */
    more = with_chunk(file, n, "IDAT", "QXYZ", 0, &m);
    assert_int_equal(tw_png_fast_decode(more, m, &img), TW_PNG_FAST_UNDECIDED);
    tw_error err;
    assert_int_equal(tw_image_decode(more, m, "t.png", &img, &err), TW_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "unhandled critical chunk"));
    free(more);

    /* libpng's cap on a chunk's length, 8,000,000 bytes: at it a private ancillary chunk is skipped on both
     * paths; over it the fast path leaves the file to libpng, which warns and decodes it. */
    more = with_chunk(file, n, "IDAT", "tsTx", 8000000, &m);
    assert_int_equal(tw_png_fast_decode(more, m, &img), TW_PNG_FAST_DONE);
    assert_colours(&img, px, w, h, sp.type);
    tw_image_free(&img);
    assert_decodes(more, m, px, w, h, sp.type);
    free(more);
    more = with_chunk(file, n, "IDAT", "tsTx", 8000001, &m);
    assert_int_equal(tw_png_fast_decode(more, m, &img), TW_PNG_FAST_UNDECIDED);
    assert_decodes(more, m, px, w, h, sp.type);
    free(more);
    free(file);
    free(px);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_files_decode_to_the_pixels_written),
        cmocka_unit_test(other_files_are_left_to_libpng),
        cmocka_unit_test(departures_are_decided_by_libpng),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
