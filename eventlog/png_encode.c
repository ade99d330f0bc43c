/* png_encode.c — tw_png_encode over libpng's write API into a growing memory buffer. See png_encode.h.
 *
 * Error handling is libpng's documented one: an error callback that records the message and longjmps
 * back to the setjmp in write_png, which returns and lets encode() free everything. Nothing that
 * write_png changes after its setjmp is read after the jump except through the sink, which lives in
 * the caller's frame. */
#include "png_encode.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MIN_CAP = 4096 };

/* Where libpng's output and its error go. */
typedef struct {
    uint8_t *buf; /* [cap] owned until handed to the caller */
    size_t len, cap;
    int nomem;    /* the buffer could not grow */
    char message[200];
} sink;

static void on_error(png_structp png, png_const_charp msg)
{
    sink *s = png_get_error_ptr(png);
    snprintf(s->message, sizeof s->message, "%s", msg);
    png_longjmp(png, 1);
}

/* libpng warns only about what it corrects itself; nothing for a caller to act on. */
static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void on_write(png_structp png, png_bytep data, size_t n)
{
    sink *s = png_get_io_ptr(png);
    if (n > s->cap - s->len) {
        size_t cap = s->cap * 2 > s->len + n ? s->cap * 2 : s->len + n;
        uint8_t *buf = realloc(s->buf, cap < MIN_CAP ? MIN_CAP : cap);
        if (!buf) {
            s->nomem = 1;
            png_error(png, "out of memory");
        }
        s->buf = buf;
        s->cap = cap < MIN_CAP ? MIN_CAP : cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
}

static void on_flush(png_structp png) { (void)png; }

/* Every png_* call may longjmp back here with the message in the sink; returns 0 or -1. */
static int write_png(png_structp png, png_infop info, const tw_png_image *img)
{
    if (setjmp(png_jmpbuf(png)))
        return -1;
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8,
                 img->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    size_t row = (size_t)img->width * (size_t)img->channels;
    for (int y = 0; y < img->height; y++)
        png_write_row(png, img->pixels + (size_t)y * row);
    png_write_end(png, info);
    return 0;
}

static tw_status check_image(const tw_png_image *img, tw_error *err)
{
    if (!img->pixels || img->width < 1 || img->height < 1 || (img->channels != 1 && img->channels != 3))
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                            "png: a %dx%d image of %d channels (need pixels, sides >= 1, 1 or 3 channels)",
                            img->width, img->height, img->channels);
    if (img->width > TW_PNG_MAX_SIDE || img->height > TW_PNG_MAX_SIDE)
        return tw_error_set(err, TW_ERR_TOO_LARGE, NULL, -1, "png: a %dx%d image (at most %d per side)",
                            img->width, img->height, TW_PNG_MAX_SIDE);
    return TW_OK;
}

tw_status tw_png_encode(const tw_png_image *img, uint8_t **out, size_t *len, tw_error *err)
{
    *out = NULL;
    *len = 0;
    TW_TRY(check_image(img, err));
    sink s = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "png: out of memory creating the encoder");
    }
    png_set_write_fn(png, &s, on_write, on_flush);
    int rc = write_png(png, info, img);
    png_destroy_write_struct(&png, &info);
    if (rc != 0) {
        free(s.buf);
        return s.nomem ? tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "png: out of memory")
                       : tw_error_set(err, TW_ERR_INTERNAL, NULL, -1, "png: libpng failed: %s", s.message);
    }
    *out = s.buf;
    *len = s.len;
    return TW_OK;
}
