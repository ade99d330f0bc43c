/* image.c — PNG (libpng) and JPEG (libjpeg-turbo) decoding from memory, and the channel rules of
 * tw_image_fit (image.h).
 *
 * The plain 8-bit PNG, most of an image-folder dataset, is decoded by png_fast.c (ISA-L's inflate, one call
 * an image); every other PNG, and any that path leaves undecided, by libpng.
 *
 * Both libraries report errors by longjmp. Each decoder keeps what must be freed after one in a job
 * struct of its caller's frame, reached through a pointer (never a local of the function that calls
 * setjmp), and the function holding the setjmp (png_run, jpeg_run) only calls the library: the longjmp
 * crosses libpng's and libjpeg's frames and our read callback, none of which holds a resource. */
#include "image.h"

#include <stdio.h> /* before jpeglib.h, which names FILE */
#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "png_fast.h"

static const char *label(const char *name) { return name ? name : "image"; }

tw_image_format tw_image_sniff(const void *data, size_t n)
{
    const uint8_t *p = data;
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
        return TW_IMAGE_PNG;
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        return TW_IMAGE_JPEG;
    return TW_IMAGE_NONE;
}

const char *tw_image_format_name(tw_image_format f)
{
    return f == TW_IMAGE_PNG ? "PNG" : f == TW_IMAGE_JPEG ? "JPEG" : "unknown";
}

void tw_image_free(tw_image *img)
{
    if (!img)
        return;
    free(img->pixels);
    memset(img, 0, sizeof *img);
}

/* The size an image must have (0 x 0: any within the caps). */
typedef struct {
    int width, height;
} want_size;

/* Checks the header's size against the caps and the wanted size before anything is allocated: TW_OK, or
 * TW_ERR_TOO_LARGE / TW_ERR_INVALID with why[]. */
static tw_status size_ok(unsigned long w, unsigned long h, want_size want, char *why, size_t size)
{
    if (w == 0 || h == 0 || w > TW_IMAGE_MAX_SIDE || h > TW_IMAGE_MAX_SIDE ||
        (unsigned long long)w * h > TW_IMAGE_MAX_PIXELS) {
        snprintf(why, size, "%lux%lu pixels is over the cap (sides up to %d, %d pixels in all)", w, h,
                 TW_IMAGE_MAX_SIDE, TW_IMAGE_MAX_PIXELS);
        return TW_ERR_TOO_LARGE;
    }
    if (want.width && (w != (unsigned long)want.width || h != (unsigned long)want.height)) {
        snprintf(why, size, "the image is %lux%lu (width x height), the model takes %dx%d images (they are not "
                 "resized: resize it first)", w, h, want.width, want.height);
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

/* ================================ PNG ================================ */

typedef struct {
    const uint8_t *p;
    size_t n, at;
    want_size want;
    png_structp png;
    png_infop info;
    png_bytep *rows;   /* [height] pointers into img.pixels; owned */
    tw_image img;
    tw_status status;  /* of a refusal decided here (not a libpng error) */
    char msg[256];
    jmp_buf jb;
} png_job;

static void png_fail(png_structp png, png_const_charp msg)
{
    png_job *j = png_get_error_ptr(png);
    snprintf(j->msg, sizeof j->msg, "%s", msg);
    longjmp(j->jb, 1);
}

static void png_warn(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* an ancillary chunk libpng skipped: the pixels are unaffected */
}

static void png_read_mem(png_structp png, png_bytep out, size_t len)
{
    png_job *j = png_get_io_ptr(png);
    if (len > j->n - j->at)
        png_error(png, "the file ends early (truncated)");
    memcpy(out, j->p + j->at, len);
    j->at += len;
}

/* The libpng calls, under one setjmp. 0, or -1 with j->msg (and j->status for a refusal of ours). */
static int png_run(png_job *j)
{
    if (setjmp(j->jb))
        return -1;
    png_set_read_fn(j->png, j, png_read_mem);
    /* zlib's Adler-32 of the inflated rows is not checked: every chunk's CRC-32 (checked, a mismatch refused)
     * already covers each compressed byte, and the second sum was 2% of a conversion of small images. */
    png_set_option(j->png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
    png_read_info(j->png, j->info);
    png_uint_32 w = png_get_image_width(j->png, j->info), h = png_get_image_height(j->png, j->info);
    if ((j->status = size_ok(w, h, j->want, j->msg, sizeof j->msg)) != TW_OK)
        return -1;
    j->status = TW_ERR_CORRUPT;
    int type = png_get_color_type(j->png, j->info), depth = png_get_bit_depth(j->png, j->info);
    if (type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(j->png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(j->png);
    if (depth == 16)
        png_set_strip_16(j->png);
    png_set_strip_alpha(j->png);
    png_set_interlace_handling(j->png);
    png_read_update_info(j->png, j->info);
    int ch = png_get_channels(j->png, j->info);
    if ((ch != 1 && ch != 3) || png_get_rowbytes(j->png, j->info) != (size_t)w * (size_t)ch)
        png_error(j->png, "an unexpected pixel layout after conversion to 8-bit gray or RGB");
    j->img = (tw_image){(int)w, (int)h, ch, malloc((size_t)w * h * (size_t)ch)};
    j->rows = malloc(h * sizeof *j->rows);
    if (!j->img.pixels || !j->rows) {
        j->status = TW_ERR_NOMEM;
        snprintf(j->msg, sizeof j->msg, "out of memory");
        return -1;
    }
    for (png_uint_32 y = 0; y < h; y++)
        j->rows[y] = j->img.pixels + (size_t)y * w * (size_t)ch;
    png_read_image(j->png, j->rows);
    png_read_end(j->png, NULL);
    return 0;
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static tw_status decode_png(const uint8_t *p, size_t n, want_size want, const char *name, tw_image *out,
                            tw_error *err)
{
    png_job j = {.p = p, .n = n, .want = want, .status = TW_ERR_CORRUPT};
    /* IHDR is the first chunk (libpng refuses a file where it is not): its size is refused at once, before
     * libpng reads on to the first IDAT; png_run checks it again from what libpng parsed. */
    tw_status s = n >= 24 && !memcmp(p + 12, "IHDR", 4) ? size_ok(be32(p + 16), be32(p + 20), want, j.msg, sizeof j.msg)
                                                        : TW_OK;
    if (s != TW_OK)
        return tw_error_set(err, s, label(name), 16, "PNG: %s", j.msg);
    tw_png_fast_result fast = tw_png_fast_decode(p, n, out);
    if (fast != TW_PNG_FAST_UNDECIDED)
        return fast == TW_PNG_FAST_DONE ? TW_OK : tw_error_set(err, TW_ERR_NOMEM, label(name), -1, "out of memory");
    j.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, png_fail, png_warn);
    if (j.png)
        j.info = png_create_info_struct(j.png);
    if (!j.png || !j.info) {
        png_destroy_read_struct(&j.png, NULL, NULL);
        return tw_error_set(err, TW_ERR_NOMEM, label(name), -1, "out of memory");
    }
    int rc = png_run(&j);
    png_destroy_read_struct(&j.png, &j.info, NULL);
    free(j.rows);
    if (rc != 0) {
        tw_image_free(&j.img);
        return tw_error_set(err, j.status, label(name), -1, "PNG: %s", j.msg);
    }
    *out = j.img;
    return TW_OK;
}

/* ================================ JPEG ================================ */

typedef struct {
    struct jpeg_error_mgr pub; /* first: libjpeg hands back a pointer to it */
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

typedef struct {
    struct jpeg_decompress_struct ci;
    jpeg_err e;
    want_size want;
    int created;
    tw_image img;
    tw_status status;
    char msg[256];
} jpeg_job;

static void jpeg_fail(j_common_ptr c)
{
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* libjpeg warns (level -1) where it would paper over corrupt or truncated data: strict, an error here;
 * trace messages (level >= 0) are ignored. */
static void jpeg_emit(j_common_ptr c, int level)
{
    if (level < 0)
        jpeg_fail(c);
}

static int jpeg_run(jpeg_job *j, const uint8_t *p, size_t n)
{
    if (setjmp(j->e.jb)) {
        snprintf(j->msg, sizeof j->msg, "%s", j->e.msg);
        return -1;
    }
    jpeg_create_decompress(&j->ci);
    j->created = 1;
    j->ci.mem->max_memory_to_use = 256L << 20;
    jpeg_mem_src(&j->ci, p, (unsigned long)n);
    jpeg_read_header(&j->ci, TRUE);
    if ((j->status = size_ok(j->ci.image_width, j->ci.image_height, j->want, j->msg, sizeof j->msg)) != TW_OK)
        return -1;
    j->status = TW_ERR_CORRUPT;
    if (j->ci.jpeg_color_space == JCS_CMYK || j->ci.jpeg_color_space == JCS_YCCK) {
        j->status = TW_ERR_UNSUPPORTED;
        snprintf(j->msg, sizeof j->msg, "a CMYK image (only grayscale and colour JPEGs are read)");
        return -1;
    }
    j->ci.out_color_space = j->ci.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&j->ci);
    size_t w = j->ci.output_width, h = j->ci.output_height, ch = (size_t)j->ci.output_components;
    j->img = (tw_image){(int)w, (int)h, (int)ch, malloc(w * h * ch)};
    if (!j->img.pixels) {
        j->status = TW_ERR_NOMEM;
        snprintf(j->msg, sizeof j->msg, "out of memory");
        return -1;
    }
    while (j->ci.output_scanline < h) {
        JSAMPROW row = j->img.pixels + (size_t)j->ci.output_scanline * w * ch;
        jpeg_read_scanlines(&j->ci, &row, 1);
    }
    jpeg_finish_decompress(&j->ci);
    return 0;
}

static tw_status decode_jpeg(const uint8_t *p, size_t n, want_size want, const char *name, tw_image *out,
                             tw_error *err)
{
    jpeg_job *j = calloc(1, sizeof *j);
    if (!j)
        return tw_error_set(err, TW_ERR_NOMEM, label(name), -1, "out of memory");
    j->status = TW_ERR_CORRUPT;
    j->want = want;
    j->ci.err = jpeg_std_error(&j->e.pub);
    j->e.pub.error_exit = jpeg_fail;
    j->e.pub.emit_message = jpeg_emit;
    int rc = jpeg_run(j, p, n);
    if (j->created)
        jpeg_destroy_decompress(&j->ci);
    tw_status s = TW_OK;
    if (rc != 0) {
        tw_image_free(&j->img);
        s = tw_error_set(err, j->status, label(name), -1, "JPEG: %s", j->msg);
    } else {
        *out = j->img;
    }
    free(j);
    return s;
}

static tw_status decode(const void *data, size_t n, want_size want, const char *name, tw_image *out, tw_error *err)
{
    memset(out, 0, sizeof *out);
    switch (tw_image_sniff(data, n)) {
    case TW_IMAGE_PNG:
        return decode_png(data, n, want, name, out, err);
    case TW_IMAGE_JPEG:
        return decode_jpeg(data, n, want, name, out, err);
    default:
        return tw_error_set(err, TW_ERR_UNSUPPORTED, label(name), 0, "not a PNG or JPEG image");
    }
}

tw_status tw_image_decode(const void *data, size_t n, const char *name, tw_image *out, tw_error *err)
{
    return decode(data, n, (want_size){0, 0}, name, out, err);
}

tw_status tw_image_decode_sized(const void *data, size_t n, int height, int width, const char *name, tw_image *out,
                                tw_error *err)
{
    return decode(data, n, (want_size){width, height}, name, out, err);
}

/* ================================ fitting ================================ */

tw_status tw_image_fit(const tw_image *img, int height, int width, int channels, uint8_t *dst,
                       const char *name, tw_error *err)
{
    if (channels != 1 && channels != 3)
        return tw_error_set(err, TW_ERR_INVALID, label(name), -1,
                            "the model takes %d channels per pixel; images give 1 (gray) or 3 (RGB)", channels);
    if (img->width != width || img->height != height)
        return tw_error_set(err, TW_ERR_INVALID, label(name), -1,
                            "the image is %dx%d (width x height), the model takes %dx%d images (they are "
                            "not resized: resize it first)", img->width, img->height, width, height);
    const size_t px = (size_t)width * (size_t)height;
    const uint8_t *s = img->pixels;
    if (img->channels == channels) {
        memcpy(dst, s, px * (size_t)channels);
        return TW_OK;
    }
    for (size_t i = 0; i < px; i++) {
        if (channels == 3)
            memset(dst + i * 3, s[i], 3);
        else
            dst[i] = (uint8_t)((19595u * s[3 * i] + 38470u * s[3 * i + 1] + 7471u * s[3 * i + 2] + 32768u) >> 16);
    }
    return TW_OK;
}
