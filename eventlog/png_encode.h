/* png_encode.h — 8-bit grayscale or RGB pixels encoded as one PNG file in memory, through libpng.
 *
 * Owns: the image view the summaries pass around (tw_png_image), the size caps, and the encoding (8 bits
 * per sample, no interlace, zlib's default compression, libpng's default filters). Does not own: what
 * the pixels show (engine/summary_images.c renders the grids and the heat map) or writing the bytes into
 * an event file (events.c: the image summary), nor decoding. */
#ifndef TW_PNG_ENCODE_H
#define TW_PNG_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum { TW_PNG_MAX_SIDE = 4096 }; /* pixels per side, at most: 48 MiB of RGB at the very most */

/* An image: pixels [height, width, channels] uint8 row-major, channels 1 (gray) or 3 (RGB). Who owns
 * pixels is said where one is made. */
typedef struct {
    uint8_t *pixels;
    int width, height;
    int channels;
} tw_png_image;

/* Encodes *img (borrowed during the call) as a PNG: *out (caller frees) of *len bytes. Errors:
 * TW_ERR_INVALID (no pixels, a side < 1, channels other than 1 or 3), TW_ERR_TOO_LARGE (a side past
 * TW_PNG_MAX_SIDE), TW_ERR_NOMEM, TW_ERR_INTERNAL (libpng's own error, its message kept). On error *out
 * is NULL. Thread-safe: no state is shared between calls. */
tw_status tw_png_encode(const tw_png_image *img, uint8_t **out, size_t *len, tw_error *err);

#endif
