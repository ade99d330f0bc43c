/* png_fast.h — the common PNG decoded without libpng: 8-bit gray, gray + alpha, RGB or RGBA, not interlaced.
 *
 * Owns: walking such a file's chunks, inflating its image data in one call, undoing the row filters and
 * dropping alpha, with the same result as image.c's libpng path. Does not own the size caps (the caller
 * checks IHDR's size first; they are checked again here), any error message, or any other kind of PNG: a
 * file this cannot decode exactly as libpng would is handed back undecided, for libpng to decode or refuse.
 * Thread-safe: no shared state. */
#ifndef TW_PNG_FAST_H
#define TW_PNG_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"

typedef enum {
    TW_PNG_FAST_DONE = 0,  /* *out holds the image (caller frees with tw_image_free) */
    TW_PNG_FAST_UNDECIDED, /* not a file this decodes, or something in it is not as expected: ask libpng */
    TW_PNG_FAST_NOMEM,
} tw_png_fast_result;

/* Decodes the PNG in p[0..n) (borrowed) into *out, gray (1 channel) or RGB (3), alpha dropped. *out is
 * left zeroed unless DONE. */
tw_png_fast_result tw_png_fast_decode(const uint8_t *p, size_t n, tw_image *out);

#endif
