/* image.h — PNG and JPEG images read from memory into 8-bit pixels, and fitted to a given shape.
 *
 * Owns: recognising the two formats by their signatures, decoding them with libpng and libjpeg-turbo
 * (the plain 8-bit PNG through png_fast.h, to libpng's result; each library's documented setjmp error
 * pattern, kept inside image.c: no longjmp crosses a frame of ours that holds a resource), the
 * decompression-bomb caps (width, height and pixel count checked from
 * the header, before any pixel buffer is allocated), and the channel rules of tw_image_fit. Does not own
 * what the pixels mean to a model (scaling, the shape a run takes: engine/predict.c) or resizing (there
 * is none: an image of another size is refused, so what the model sees is exactly what was sent).
 *
 * Decoding, as done:
 *   PNG  — palette images expand to RGB, gray below 8 bits expands to 8, 16-bit samples keep their high
 *          byte, alpha (an alpha channel or tRNS) is dropped: the colour values are taken as they are,
 *          not composited. Interlaced images are read whole. Every chunk CRC is checked and the file must
 *          reach IEND.
 *   JPEG — grayscale stays 1 channel; YCbCr and RGB become RGB; CMYK and YCCK are refused. A warning
 *          from libjpeg (corrupt or truncated data it would paper over) is an error.
 * Thread-safe: no shared state; one call decodes one image. */
#ifndef TW_IMAGE_H
#define TW_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum {
    TW_IMAGE_MAX_SIDE = 8192,          /* pixels of the width or the height */
    TW_IMAGE_MAX_PIXELS = 16 << 20,    /* width · height */
};

typedef enum { TW_IMAGE_NONE = 0, TW_IMAGE_PNG, TW_IMAGE_JPEG } tw_image_format;

typedef struct {
    int width, height;
    int channels;     /* 1 (gray) or 3 (RGB) */
    uint8_t *pixels;  /* [height, width, channels] uint8 row-major; owned (tw_image_free) */
} tw_image;

/* The format data[0..n) starts like (PNG's 8-byte signature, JPEG's FF D8 FF), or TW_IMAGE_NONE. */
tw_image_format tw_image_sniff(const void *data, size_t n);

/* "PNG", "JPEG" or "unknown". */
const char *tw_image_format_name(tw_image_format f);

/* Decodes the PNG or JPEG in data[0..n) (borrowed) into *out (caller frees with tw_image_free; zeroed on
 * error). name (may be NULL) labels errors. Errors: TW_ERR_UNSUPPORTED (neither format, CMYK JPEG),
 * TW_ERR_TOO_LARGE (a side over TW_IMAGE_MAX_SIDE or more than TW_IMAGE_MAX_PIXELS pixels, found before
 * allocating), TW_ERR_CORRUPT (the library's message: bad CRC, bad Huffman data, truncated file...),
 * TW_ERR_NOMEM. */
tw_status tw_image_decode(const void *data, size_t n, const char *name, tw_image *out, tw_error *err);

/* As tw_image_decode, for an image that must be height x width (a model's input): any other size is refused
 * from the header, before a pixel is decoded or a buffer allocated (TW_ERR_INVALID naming both sizes), so a
 * request's decoding never holds more than the model's own input size per image. */
tw_status tw_image_decode_sized(const void *data, size_t n, int height, int width, const char *name, tw_image *out,
                                tw_error *err);

void tw_image_free(tw_image *img); /* NULL-safe; leaves *img zeroed */

/* Writes img as [height, width, channels] uint8 into dst ([height · width · channels], caller-owned),
 * converting channels: 1 from 3 by the ITU-R 601 luma with PIL's integer rounding
 * ((19595 R + 38470 G + 7471 B + 32768) >> 16, what Image.convert("L") computes), 3 from 1 by repeating
 * the gray value. Errors: TW_ERR_INVALID naming both sizes when img is not height x width, or when
 * channels is not 1 or 3. */
tw_status tw_image_fit(const tw_image *img, int height, int width, int channels, uint8_t *dst,
                       const char *name, tw_error *err);

#endif
